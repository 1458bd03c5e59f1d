//! Inputs from peers and timers: decoding, routing by message, and catching up.
//!
//! Peer bytes are decoded and opened (signature checked) once, then dispatched by body;
//! messages of other views are dropped or buffered. Timers flush own requests, ask peers for
//! their status before changing view, and drive state transfer. A peer's status is answered
//! with the commit certificates it lacks, which are verified and executed on arrival.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use tracing::{debug, trace, warn};

use super::retransmit::BatchAnswer;
use super::{CommitVote, Dest, Entry, Replica};
use crate::crypto::SigBytes;
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Batch, Body, ClockSample, Payload, SignedMsg, TimeCert, Wire, codec};

/// Most waiting requests a backup relays to the primary again at a status round.
const STATUS_RELAY_MAX: usize = 256;

/// Status rounds and their answers: when this replica asked its peers, and whom it answered
/// with what (rate limits, certificates and checkpoint votes sent).
#[derive(Debug)]
pub(super) struct StatusState {
    /// The executed seq at which this replica last broadcast a `Status` (asks once per stall).
    pub(super) asked_at: Option<u64>,
    /// When this replica last sent its status to each peer (rate limit).
    pub(super) peer_ms: BTreeMap<NodeId, Millis>,
    /// The waiting request for which this replica last asked its peers' status, and when: its
    /// second expiry changes view, whatever executed meanwhile.
    pub(super) asked_req: Option<((crate::node::ClientId, u64), Millis)>,
    /// When this replica last answered each peer's `Status` with certificates (rate limit).
    pub(super) answered_ms: BTreeMap<NodeId, Millis>,
    /// Per peer: the highest seq whose commit certificate a `Status` answer sent it, and when
    /// (certificates up to it are not sent again for a view-change timeout).
    pub(super) sent_upto: BTreeMap<NodeId, (u64, Millis)>,
    /// When a `Status` answer last carried a checkpoint vote of ours to each peer.
    pub(super) vote_sent_ms: BTreeMap<NodeId, Millis>,
    /// When this replica last asked for checkpoint votes because its window was full
    /// ([`Replica::above_window`]).
    pub(super) window_ms: Option<Millis>,
}

impl Replica {
    pub(super) fn on_peer(
        &mut self,
        now: Millis,
        from: NodeId,
        bytes: &[u8],
        out: &mut Vec<Output>,
    ) {
        if from >= self.cfg.n {
            return self.drop_msg("drop_unknown_sender", Some(from));
        }
        let wire: Wire = match codec::decode(bytes, self.cfg.max_message_bytes) {
            Ok(w) => w,
            Err(codec::CodecError::TooLarge { .. }) => {
                return self.drop_msg("drop_oversized", Some(from));
            }
            Err(_) => return self.drop_msg("drop_malformed", Some(from)),
        };
        let msg = match wire {
            Wire::Request(r) => return self.admit_request(now, r, false, out),
            Wire::Requests(rs) => return self.admit_bundle(now, from, rs, out),
            Wire::Signed(m) => m,
        };
        let payload = match msg.open(
            &self.ring,
            self.cfg.max_message_bytes,
            self.cfg.verify_cache.as_ref(),
        ) {
            Ok(p) => p,
            Err(crate::protocol::OpenError::BadSignature) => {
                return self.drop_msg("drop_bad_signature", Some(from));
            }
            Err(crate::protocol::OpenError::UnknownSender(_)) => {
                return self.drop_msg("drop_unknown_sender", Some(from));
            }
            Err(_) => return self.drop_msg("drop_malformed", Some(from)),
        };
        // A new-view is self-certifying and may be relayed by any replica (to show a lagging
        // peer the current view); everything else must come from its signer.
        let from = match payload.body {
            Body::NewView { .. } => payload.from,
            _ if payload.from != from => {
                return self.drop_msg("drop_sender_mismatch", Some(from));
            }
            _ => from,
        };
        if from == self.cfg.id {
            return self.drop_msg("drop_from_self", Some(from));
        }
        trace!(
            replica = self.cfg.id,
            from,
            kind = payload.body.kind(),
            "message"
        );
        self.dispatch(now, from, payload.body, msg, out);
    }

    fn dispatch(
        &mut self,
        now: Millis,
        from: NodeId,
        body: Body,
        msg: SignedMsg,
        out: &mut Vec<Output>,
    ) {
        if self.with_strategy(|s, r| s.inbound(r, now, from, &body, out)) {
            return;
        }
        match body {
            Body::PrePrepare { view, seq, batch } => {
                // The current view's pre-prepare is handled at once; any other goes to
                // `defer_by_view` whole (no copy of the batch on the common path).
                if view != self.view || self.in_view_change {
                    let body = Body::PrePrepare { view, seq, batch };
                    let deferred = self.defer_by_view(now, from, view, &msg, body, out);
                    debug_assert!(deferred, "defer_by_view keeps every other view's message");
                    return;
                }
                self.on_pre_prepare(now, from, seq, batch, out)
            }
            Body::Prepare { view, seq, digest } => {
                if self.defer_by_view(
                    now,
                    from,
                    view,
                    &msg,
                    Body::Prepare { view, seq, digest },
                    out,
                ) {
                    return;
                }
                self.on_prepare(now, from, seq, digest, msg.sig, out)
            }
            Body::Commit {
                view,
                seq,
                digest,
                clock_ms,
            } => {
                let body = Body::Commit {
                    view,
                    seq,
                    digest,
                    clock_ms,
                };
                if self.defer_by_view(now, from, view, &msg, body, out) {
                    return;
                }
                self.on_commit(
                    now,
                    from,
                    seq,
                    CommitVote {
                        view,
                        digest,
                        clock_ms,
                        sig: msg.sig,
                    },
                    out,
                )
            }
            Body::Checkpoint { seq, digest } => {
                self.on_checkpoint(now, from, seq, digest, msg.sig, out)
            }
            Body::ViewChange(vc) => self.on_view_change(now, from, vc, msg, out),
            Body::NewView { view, view_changes } => {
                self.on_new_view(now, from, view, view_changes, msg, out)
            }
            Body::StateRequest { seq, meta, indices } => {
                self.on_state_request(now, from, seq, meta, indices, out)
            }
            Body::StateMeta {
                proof,
                total_len,
                leaves,
            } => self.on_state_meta(now, from, proof, total_len, leaves, out),
            Body::StateChunk { seq, index, data } => {
                self.on_state_chunk(now, from, seq, index, data, out)
            }
            Body::Status {
                view,
                last_executed,
            } => self.on_status(now, from, view, last_executed, out),
            Body::Committed {
                view,
                seq,
                batch,
                commits,
            } => self.on_committed(now, from, view, seq, batch, commits, out),
            Body::Have { view, seqs, .. } => self.on_have(now, from, view, seqs, out),
            Body::BatchFetch { wanted } => self.on_batch_fetch(now, from, wanted, out),
            Body::BatchData { seq, batch } => self.on_batch_data(now, from, seq, batch, out),
        }
    }

    /// Handles messages of other views: older ones are dropped (and the sender, apparently
    /// behind, gets our latest new-view message), future ones are buffered until we get there.
    /// Returns true when the message must not be processed now.
    fn defer_by_view(
        &mut self,
        now: Millis,
        from: NodeId,
        view: u64,
        msg: &SignedMsg,
        body: Body,
        out: &mut Vec<Output>,
    ) -> bool {
        if view == self.view && !self.in_view_change {
            return false;
        }
        if view < self.view {
            self.drop_msg("drop_wrong_view", Some(from));
            if self.in_view_change {
                // We moved ahead alone while `from` still makes progress in its view: follow
                // the log through its commit certificates (view-independent) meanwhile.
                self.ask_status(now, from, out);
            }
            if let Some(nv) = self.vc.last_new_view.clone()
                && self.vc.new_view_resent.insert((from, self.view))
                && let Ok(bytes) = codec::encode(&Wire::Signed(nv))
            {
                out.push(Output::Send { to: from, bytes });
            }
            return true;
        }
        if view > self.view.saturating_add(u64::from(self.cfg.n)) {
            self.drop_msg("drop_wrong_view", Some(from));
            return true;
        }
        // view > self.view, or our current view while its new-view has not arrived yet.
        if view > self.view {
            // `from` is in a later view: our status makes it relay the new-view to us.
            self.ask_status(now, from, out);
        }
        match self.future.push(from, body, msg.sig, msg.payload.len()) {
            Ok(()) => {
                self.metrics.inc("buffered_future_view");
                self.metrics
                    .set_max("future_buffer_peak_bytes", self.future.peak_bytes() as u64);
            }
            Err(e) => self.drop_msg(e.reason(), Some(from)),
        }
        true
    }

    /// Sends our status to `from`, at most once per quarter view-change timeout per peer.
    fn ask_status(&mut self, now: Millis, from: NodeId, out: &mut Vec<Output>) {
        let gap = (self.cfg.view_change_timeout_ms / 4).max(1);
        if self
            .status
            .peer_ms
            .get(&from)
            .is_some_and(|last| now < last.saturating_add(gap))
        {
            return;
        }
        self.status.peer_ms.insert(from, now);
        self.metrics.inc("status_sent");
        let (view, last_executed) = (self.view, self.last_executed);
        self.send(
            Body::Status {
                view,
                last_executed,
            },
            Dest::One(from),
            out,
        );
    }

    pub(super) fn replay_future(&mut self, now: Millis, out: &mut Vec<Output>) {
        for super::future::Buffered {
            from, body, sig, ..
        } in self.future.drain()
        {
            let payload = Payload { from, body };
            match codec::encode(&payload) {
                Ok(bytes) => {
                    let msg = SignedMsg {
                        payload: bytes,
                        sig,
                    };
                    self.dispatch(now, from, payload.body, msg, out);
                }
                Err(_) => self.metrics.inc("encode_error"),
            }
        }
    }

    pub(super) fn on_timer(&mut self, now: Millis, out: &mut Vec<Output>) {
        if self.ticks.flush_deadline.is_some_and(|d| now >= d) {
            self.flush_own_requests(out);
        }
        if self.retransmit.deadline.is_some_and(|d| now >= d) {
            self.on_retransmit_timer(now, out);
        }
        if self.fetch.deadline.is_some_and(|d| now >= d) {
            self.on_fetch_timer(now, out);
        }
        if self.vc.resend_deadline.is_some_and(|d| now >= d) {
            self.on_vc_resend_timer(now, out);
        }
        if let Some(d) = self.vc.deadline
            && now >= d
        {
            self.vc.deadline = None;
            if !self.in_view_change
                && let Some(later) = self.request_deadline().filter(|r| *r > now)
            {
                // Set by another path (a new request, a pre-prepare) while the oldest waiting
                // request is not overdue yet: wait for it (if the log is stuck, the requests
                // in it age and fire this anyway).
                self.vc.deadline = Some(later);
                return self.on_timer_rest(now, out);
            }
            // Per waiting request: the oldest one's status round happens once, whatever else
            // executes meanwhile (a primary must not starve one request by ordering others).
            let oldest = self.clients.oldest_pending().map(|(k, _)| k);
            // A status round already made in this stall (nothing executed since), in an earlier
            // view, is not repeated in the next one: what the peers had committed then came
            // back with it, and lost messages of the new view are the retransmission's
            // (`Have`) job. Repeating it made every faulty view cost two timeouts (16 s at
            // the 8 s cap), so f consecutive faulty primaries after a failed view outlasted
            // the 20 s liveness bound (campaign C/bad-signatures 7, C/lying-time 7,
            // D/equivocate 33, D/lying-time 33: NoProgress after healing).
            let asked_in_stall =
                self.vc.attempts > 0 && self.status.asked_at == Some(self.last_executed);
            let asked = asked_in_stall
                || match oldest {
                    Some(k) => self.status.asked_req.is_some_and(|(a, _)| a == k),
                    None => self.status.asked_at == Some(self.last_executed),
                };
            if !self.in_view_change && !asked {
                // First expiry without progress: maybe we only lost messages. Ask the others
                // for what committed; change view only if the next expiry finds us still stuck.
                self.status.asked_at = Some(self.last_executed);
                if let Some(k) = oldest {
                    self.status.asked_req = Some((k, now));
                }
                self.metrics.inc("status_sent");
                self.broadcast_status(out);
                self.relay_waiting_requests(out);
                self.vc.deadline = Some(now.saturating_add(self.vc_timeout()));
            } else {
                if self.in_view_change {
                    // Stuck in a view change: keep catching up on what the others commit
                    // (commit certificates are valid in any view).
                    self.broadcast_status(out);
                }
                if !self.in_view_change || !self.retransmit_lone_view_change(now, out) {
                    let target = self.view + 1;
                    self.start_view_change(now, target, out);
                }
            }
        }
        self.on_timer_rest(now, out);
    }

    /// The timers other than the view-change one: state transfer.
    fn on_timer_rest(&mut self, now: Millis, out: &mut Vec<Output>) {
        if let Some((d, proof)) = self.state_transfer.behind_since.clone()
            && now >= d
        {
            self.state_transfer.behind_since = None;
            if proof.seq > self.last_executed {
                self.start_transfer(now, proof, out);
            }
        }
        if self
            .state_transfer
            .transfer
            .as_ref()
            .is_some_and(|t| now >= t.deadline_ms)
        {
            self.metrics.inc("state_transfer_timeouts");
            self.on_transfer_timeout(now, out);
        }
    }

    /// At a status round (a waiting request's first timeout), a backup relays the oldest
    /// requests it holds that no batch of this view carries to the primary again, at most
    /// [`STATUS_RELAY_MAX`] of them and `max_message_bytes` in all. The primary may never have
    /// received one: a client's copy and every relay lost, or a backup's own tick bundle lost
    /// on the way to the primary while every other replica got it and watches for it, so that
    /// all of them time out together. Without this, that lost message cost a view change, and
    /// with the next primaries silent, a timeout per silent primary (f silent, 5% loss, n = 7,
    /// seed 9310002: a 12.1 s stall at 44.7 s, two requests the primary lacked).
    fn relay_waiting_requests(&mut self, out: &mut Vec<Output>) {
        if self.is_primary() || !self.cfg.forward_requests {
            return;
        }
        let primary = self.primary();
        let budget = self.cfg.max_message_bytes;
        let mut used = 0usize;
        let mut relayed = 0u64;
        for r in self.clients.unproposed_requests(STATUS_RELAY_MAX) {
            let Ok(bytes) = codec::encode(&Wire::Request(r)) else {
                continue;
            };
            used = used.saturating_add(bytes.len());
            if used > budget && relayed > 0 {
                break;
            }
            relayed += 1;
            out.push(Output::Send { to: primary, bytes });
        }
        if relayed > 0 {
            self.metrics.add("status_requests_relayed", relayed);
        }
    }

    /// A message for `seq` above our window arrived from `from`: dropped (counted). Our
    /// window moves only when our latest checkpoint becomes stable here; when a vote for it
    /// was lost, everything above the window is dropped until a view change or a status
    /// round. So ask at once: a `Status` to every peer (at most once per quarter view-change
    /// timeout), whose answers carry each peer's newest checkpoint vote at or below our last
    /// executed seq.
    pub(super) fn above_window(&mut self, now: Millis, from: NodeId, out: &mut Vec<Output>) {
        self.drop_msg("drop_out_of_window", Some(from));
        let gap = (self.cfg.view_change_timeout_ms / 4).max(1);
        if self.state_transfer.transfer.is_some()
            || self
                .status
                .window_ms
                .is_some_and(|last| now >= last && now < last.saturating_add(gap))
        {
            return;
        }
        self.status.window_ms = Some(now);
        self.metrics.inc("window_full_status");
        self.broadcast_status(out);
    }

    /// Tells every peer where this replica is (view, last executed); they answer with the
    /// commit certificates it lacks, or their checkpoint vote.
    fn broadcast_status(&mut self, out: &mut Vec<Output>) {
        let (view, last_executed) = (self.view, self.last_executed);
        self.send(
            Body::Status {
                view,
                last_executed,
            },
            Dest::All,
            out,
        );
    }

    /// A peer is stuck at `last_executed`: send it the commit certificates it lacks (at most a
    /// log window), or, when it is below our log, our checkpoint vote so that it can gather a
    /// checkpoint certificate and state-transfer.
    fn on_status(
        &mut self,
        now: Millis,
        from: NodeId,
        view: u64,
        last_executed: u64,
        out: &mut Vec<Output>,
    ) {
        if view < self.view
            && !self.in_view_change
            && let Some(nv) = self.vc.last_new_view.clone()
            && self.vc.new_view_resent.insert((from, self.view))
            && let Ok(bytes) = codec::encode(&Wire::Signed(nv))
        {
            out.push(Output::Send { to: from, bytes });
        }
        // A peer at or above our stable checkpoint may lack its certificate: with f replicas
        // silent every quorum is exactly the honest replicas, so one lost vote leaves it
        // without, its window then stops at its old stable checkpoint + `log_window`, and it
        // drops every message above (f silent, 5% loss, n = 7, seeds 9310002 and 9310008:
        // 16 s stalls and two view changes; in 9310008 three consecutive checkpoints each
        // missed a different vote). Our vote for the newest checkpoint we hold at or below the
        // peer's last executed seq (stable or our own) is one small message, at most once per
        // peer per quarter view-change timeout.
        let gap = (self.cfg.view_change_timeout_ms / 4).max(1);
        let newest = self
            .checkpoints
            .own
            .range(..=last_executed)
            .next_back()
            .map(|(s, (d, _))| (*s, *d))
            .filter(|(s, _)| *s > self.checkpoints.stable.seq)
            .or(Some((
                self.checkpoints.stable.seq,
                self.checkpoints.stable.digest,
            )))
            .filter(|(s, _)| *s > 0 && *s <= last_executed);
        if let Some((seq, digest)) = newest
            && !self
                .status
                .vote_sent_ms
                .get(&from)
                .is_some_and(|last| now >= *last && now < last.saturating_add(gap))
        {
            self.status.vote_sent_ms.insert(from, now);
            self.metrics.inc("status_checkpoint_vote_sent");
            self.send(Body::Checkpoint { seq, digest }, Dest::One(from), out);
        }
        if last_executed >= self.last_executed {
            return;
        }
        // Amplification bound (the simulator's `amplify` strategy found it: a 40-byte Status
        // every 50 ms drew up to `status_answer_bytes` each time): one answer per peer per
        // quarter view-change timeout, the rate at which an honest replica asks one peer.
        let gap = (self.cfg.view_change_timeout_ms / 4).max(1);
        if self
            .status
            .answered_ms
            .get(&from)
            .is_some_and(|last| now < last.saturating_add(gap))
        {
            return self.drop_msg("drop_status_rate_limited", Some(from));
        }
        self.status.answered_ms.insert(from, now);
        if last_executed < self.checkpoints.stable.seq {
            let (seq, digest) = (self.checkpoints.stable.seq, self.checkpoints.stable.digest);
            self.send(Body::Checkpoint { seq, digest }, Dest::One(from), out);
            return;
        }
        let quorum = self.quorum();
        // Certificates sent to this peer within a view-change timeout are not sent again (a
        // peer that keeps claiming the same position gets each one once per timeout).
        let from_seq = match self.status.sent_upto.get(&from) {
            Some((upto, at)) if now < at.saturating_add(self.cfg.view_change_timeout_ms) => {
                last_executed.max(*upto)
            }
            _ => last_executed,
        };
        // Nothing new for this peer when it was already sent everything up to our last
        // executed seq (a peer that asks again while we are stalled): an empty range, not a
        // `BTreeMap::range` with its start above its end, which panics (the campaign sample
        // found that panic: any peer could crash a stalled replica with two Status messages).
        let upto = self.last_executed;
        // Amplification bound (the `amplify` strategy with maximal requests found it: a peer
        // that claims its stable checkpoint was streamed every new certificate, ~22 MB in
        // 40 s, 0.8 of the allowance by itself): no certificate for a seq this peer sent us
        // its own commit for. It holds that batch and prepared it; what it may lack is
        // commits, which the `Have` retransmission recovers (with its per-(peer, seq) backoff
        // on batch-carrying answers; with retransmission disabled, `Status` is the only way
        // back, so the certificates are sent).
        let have_recovers = self.cfg.retransmit_interval_ms > 0;
        let mut voted = 0u64;
        // Every seq whose certificate the peer may lack, in order.
        let candidates: Vec<u64> = self
            .log
            .range((
                Bound::Excluded(from_seq),
                Bound::Included(upto.max(from_seq)),
            ))
            .filter(|(_, e)| {
                let has = have_recovers
                    && e.commits
                        .get(&from)
                        .is_some_and(|v| Some(v.digest) == e.digest);
                voted += u64::from(has);
                !has
            })
            .filter(|(_, e)| e.batch.is_some() && e.certificate(quorum).is_some())
            .map(|(seq, _)| *seq)
            .collect();
        // Amplification bound: one answer carries at most `status_answer_bytes` of
        // certificates (at least one); the peer asks again for the rest. And the same pacing
        // and repeat credit as `Have` answers (retransmit.rs): a peer that claims the same
        // position again and again gets each certificate once, then repeats paid from its
        // credit.
        let budget = self.cfg.status_answer_bytes as u64;
        let (mut used, mut held, mut truncated) = (0u64, 0u64, false);
        let mut chosen = Vec::new();
        for seq in candidates {
            let Some(batch) = self.log.get(&seq).and_then(|e| e.batch.as_ref()) else {
                continue;
            };
            let cost = self.answer_bytes(batch);
            if used > 0 && used.saturating_add(cost) > budget {
                truncated = true;
                break;
            }
            if self.batch_resend_due(now, from, seq, BatchAnswer::Certificate, cost) {
                used = used.saturating_add(cost);
                chosen.push(seq);
            } else {
                held += 1;
            }
        }
        if truncated {
            self.metrics.inc("status_answer_truncated");
        }
        if held > 0 {
            self.metrics.add("status_cert_repeat_held", held);
        }
        let certs: Vec<Body> = chosen
            .into_iter()
            .filter_map(|seq| {
                let e = self.log.get(&seq)?;
                let batch = e.batch.as_ref()?;
                let (view, commits) = e.certificate(quorum)?;
                Some(Body::Committed {
                    view,
                    seq,
                    batch: Batch::clone(batch),
                    commits,
                })
            })
            .collect();
        if voted > 0 {
            self.metrics.add("status_cert_peer_voted", voted);
            debug!(
                replica = self.cfg.id,
                peer = from,
                seqs = voted,
                "status answer: no certificate for seqs the peer committed itself"
            );
        }
        if let Some(Body::Committed { seq, .. }) = certs.last() {
            self.status.sent_upto.insert(from, (*seq, now));
        }
        self.metrics.add("committed_certs_sent", certs.len() as u64);
        for body in certs {
            self.send(body, Dest::One(from), out);
        }
    }

    /// A commit certificate for a batch: execute it if it is the one we are missing.
    #[allow(clippy::too_many_arguments)]
    fn on_committed(
        &mut self,
        now: Millis,
        from: NodeId,
        view: u64,
        seq: u64,
        batch: Batch,
        commits: Vec<(NodeId, Millis, SigBytes)>,
        out: &mut Vec<Output>,
    ) {
        if seq <= self.last_executed {
            self.metrics.inc("late_committed_cert");
            return;
        }
        if seq > self.high_watermark() {
            return self.above_window(now, from, out);
        }
        if seq <= self.checkpoints.stable.seq {
            return self.drop_msg("drop_out_of_window", Some(from));
        }
        let Ok(digest) = batch.digest(self.cfg.signatures) else {
            return self.drop_msg("drop_malformed", Some(from));
        };
        let mut seen = BTreeSet::new();
        let valid = commits.len() >= self.quorum()
            && commits.iter().all(|(n, clock_ms, sig)| {
                seen.insert(*n)
                    && crate::protocol::verify_body(
                        &self.ring,
                        *n,
                        Body::Commit {
                            view,
                            seq,
                            digest,
                            clock_ms: *clock_ms,
                        },
                        sig,
                        self.cfg.verify_cache.as_ref(),
                    )
            });
        if !valid {
            return self.drop_msg("drop_invalid_committed_cert", Some(from));
        }
        let cur = self.view;
        let e = self.log.entry(seq).or_insert_with(|| Entry {
            view: cur,
            ..Entry::default()
        });
        if e.committed {
            if e.digest != Some(digest) {
                // Two commit certificates for one seq would mean more than f faults.
                warn!(
                    replica = self.cfg.id,
                    seq, "conflicting commit certificates"
                );
                self.metrics.inc("conflicting_commit_certificates");
            }
            return;
        }
        e.digest = Some(digest);
        e.batch = Some(std::sync::Arc::new(batch));
        e.committed = true;
        e.cert = Some((view, commits.clone()));
        self.metrics.inc("committed_certs_applied");
        // The certificate's signed commit clocks are a time certificate like any other.
        let samples = commits
            .iter()
            .map(|(n, clock_ms, sig)| ClockSample {
                replica: *n,
                view,
                clock_ms: *clock_ms,
                sig: *sig,
            })
            .collect();
        self.remember_time_cert(
            TimeCert {
                seq,
                digest,
                samples,
            },
            out,
        );
        self.store_entry(seq, out);
        self.execute_ready(now, out);
    }
}
