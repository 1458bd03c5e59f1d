//! View change (PBFT §4.4): leaving a stalled view, and the new primary's new-view message.
//!
//! A replica whose timer on pending work expires moves to view v+1 and broadcasts a view-change
//! carrying its stable checkpoint proof and a prepared certificate for every batch it prepared
//! above it. A replica that sees f+1 view changes for higher views joins the smallest (so f
//! faulty replicas cannot force a change, and one honest replica's timeout is not needed by
//! all). The primary of v+1 collects 2f+1 valid view changes and broadcasts them in a new-view.
//! Every replica recomputes the new view's log from those view changes alone: above the highest
//! stable checkpoint, each sequence number gets the batch of the highest-view prepared
//! certificate, or a null batch. There is nothing for a Byzantine new primary to choose except
//! which 2f+1 view changes it includes, and any 2f+1 intersect every commit quorum.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use super::{Dest, Entry, Replica};
use crate::crypto::Digest32;
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Batch, Body, Payload, SignedMsg, ViewChange, Wire, codec};

/// Most pending requests a backup re-forwards to a new primary.
const REFORWARD_MAX: usize = 4_096;

/// View changes: timers, the view changes received, the last new-view (see `view_change`).
#[derive(Debug)]
pub(super) struct ViewChangeState {
    /// View changes attempted since the last executed batch (the timeout doubles with each).
    pub(super) attempts: u32,
    /// View changes received, per target view and sender (validated).
    pub(super) received: BTreeMap<u64, BTreeMap<NodeId, (SignedMsg, ViewChange)>>,
    /// The new-view of the current view, relayed to a peer that lags behind.
    pub(super) last_new_view: Option<SignedMsg>,
    /// (peer, view) pairs this replica relayed its last new-view to.
    pub(super) new_view_resent: BTreeSet<(NodeId, u64)>,
    /// The view-change timer: when pending work must have executed by.
    pub(super) deadline: Option<Millis>,
    /// While changing view: when this replica re-sends its view change to the new primary
    /// (or, as the new primary short of a quorum, to the peers it lacks), see `view_change`.
    pub(super) resend_deadline: Option<Millis>,
    /// When this replica last answered a peer's repeated or stale view change with its own
    /// view change or new-view (a restarted peer lost them; rate limit).
    pub(super) echo_ms: BTreeMap<NodeId, Millis>,
    /// Local time at which this replica entered its current view (a waiting request's age
    /// counts from the later of its arrival and this: PBFT restarts the timers in a new view).
    pub(super) started_ms: Millis,
    /// The `(view, in_view_change)` seen at the end of the previous input (to notice entry).
    pub(super) seen: (u64, bool),
}

impl Replica {
    pub(super) fn start_view_change(&mut self, now: Millis, target: u64, out: &mut Vec<Output>) {
        if target <= self.view {
            return;
        }
        info!(
            replica = self.cfg.id,
            from_view = self.view,
            to_view = target,
            "view change"
        );
        if tracing::enabled!(tracing::Level::DEBUG) {
            let stuck: Vec<String> = self
                .log
                .range(self.last_executed + 1..)
                .take(4)
                .map(|(s, e)| {
                    format!(
                        "{s}:v{} b{} d{} ok{} p{:?} c{:?} prep{} cs{} com{} cert{}",
                        e.view,
                        e.batch.is_some() as u8,
                        e.digest.is_some() as u8,
                        e.vote_ok as u8,
                        e.prepares.keys().collect::<Vec<_>>(),
                        e.commits.keys().collect::<Vec<_>>(),
                        e.prepared as u8,
                        e.commit_sent as u8,
                        e.committed as u8,
                        e.cert.is_some() as u8
                    )
                })
                .collect();
            tracing::debug!(
                replica = self.cfg.id,
                last_executed = self.last_executed,
                in_view_change = self.in_view_change,
                attempts = self.vc.attempts,
                pending = self.clients.pending_len(),
                stuck = ?stuck,
                "view change: log above executed"
            );
        }
        self.view = target;
        self.in_view_change = true;
        self.vc.attempts = self.vc.attempts.saturating_add(1);
        self.metrics.inc("view_changes_started");
        // Ticks waiting in the old view may never be ordered: clear the throttle marks so that
        // the components keep ticking (a duplicate tick is harmless, a stuck one is not).
        self.ticks.throttle.on_view_change_cleared();
        self.clients.clear_proposed();
        self.batch_deadline = None;
        // Persist "changing to `target`" before anything of the view change leaves: a replica
        // restarting from here resumes the view change (and waits for the new-view) instead of
        // believing it is in `target` already.
        self.store_view(out);
        out.push(Output::Sync);
        let vc = self.own_view_change(target);
        self.send(Body::ViewChange(vc), Dest::All, out);
        self.vc.deadline = Some(now.saturating_add(self.vc_timeout()));
        self.vc.resend_deadline = Some(now.saturating_add(self.vc_resend_interval()));
        self.maybe_send_new_view(now, out);
    }

    /// How often a replica in a view change re-sends its view change (an eighth of the base
    /// view-change timeout: 250 ms by default).
    fn vc_resend_interval(&self) -> Millis {
        (self.cfg.view_change_timeout_ms / 8).max(1)
    }

    /// View-change retransmission (issue 9: a lost view change used to be re-sent only at the
    /// next, doubling, view-change timeout — 24 s at n = 4 with 5 % loss). Every
    /// [`Self::vc_resend_interval`] while waiting for the new-view, a backup re-sends its view
    /// change to the new primary (which answers a repeat with the new-view if it already sent
    /// one); the new primary, short of a quorum, re-sends its own to the peers whose view
    /// change it lacks (a peer changing to the same view answers with its own). Each costs one
    /// view change (bounded by digests, see [`Self::check_deliverable`]) per interval.
    pub(super) fn on_vc_resend_timer(&mut self, now: Millis, out: &mut Vec<Output>) {
        self.vc.resend_deadline = None;
        if !self.in_view_change {
            return;
        }
        let own = self
            .vc
            .received
            .get(&self.view)
            .and_then(|m| m.get(&self.cfg.id))
            .map(|(msg, _)| msg.clone());
        let Some(Ok(bytes)) = own.map(|msg| codec::encode(&Wire::Signed(msg))) else {
            return;
        };
        let primary = self.primary_of(self.view);
        if primary != self.cfg.id {
            self.metrics.inc("view_change_resent");
            out.push(Output::Send { to: primary, bytes });
        } else {
            let have: BTreeSet<NodeId> = self
                .vc
                .received
                .get(&self.view)
                .map(|m| m.keys().copied().collect())
                .unwrap_or_default();
            for to in (0..self.cfg.n).filter(|p| !have.contains(p)) {
                self.metrics.inc("view_change_resent");
                out.push(Output::Send {
                    to,
                    bytes: bytes.clone(),
                });
            }
        }
        self.vc.resend_deadline = Some(now.saturating_add(self.vc_resend_interval()));
    }

    /// Builds this replica's view change for `target` from its stable checkpoint and prepared
    /// certificates, and records its signed copy among the view changes for `target`.
    pub(super) fn own_view_change(&mut self, target: u64) -> ViewChange {
        let prepared = self
            .log
            .range(self.checkpoints.stable.seq + 1..)
            .filter_map(|(_, e)| e.proof.clone())
            .collect();
        let vc = ViewChange {
            new_view: target,
            stable: self.checkpoints.stable.clone(),
            prepared,
        };
        let payload = Payload {
            from: self.cfg.id,
            body: Body::ViewChange(vc.clone()),
        };
        if let Ok(msg) = SignedMsg::sign(&self.key, &payload) {
            self.check_deliverable(&msg, "view change");
            self.vc
                .received
                .entry(target)
                .or_default()
                .insert(self.cfg.id, (msg, vc.clone()));
        }
        vc
    }

    /// View changes and new-views carry prepared certificates by digest (issue 9 defect 4), so
    /// their size is bounded by the log window and n, not by batch sizes: at most
    /// `n * (log_window * (48 + 72 * (n - 1)) + checkpoint proof)` bytes for a new-view, which
    /// [`crate::replica::ReplicaConfig::validate`] checks fits `max_message_bytes`. Should one
    /// exceed the limit anyway, it is never silent: counted (`view_change_oversized`) and
    /// warned about where it is built.
    fn check_deliverable(&mut self, msg: &SignedMsg, what: &'static str) {
        let len = codec::encode(&Wire::Signed(msg.clone())).map_or(usize::MAX, |b| b.len());
        if len > self.cfg.max_message_bytes {
            self.metrics.inc("view_change_oversized");
            warn!(
                replica = self.cfg.id,
                what,
                len,
                limit = self.cfg.max_message_bytes,
                "view-change message exceeds max_message_bytes: receivers will drop it"
            );
        }
    }

    /// A peer sent a view change for a view we already hold its view change for, or for a view
    /// at or below ours: it may have restarted and lost what it had received. While we are
    /// changing view ourselves, it gets our own view change (so that a restarted primary can
    /// still gather its quorum and send the new-view, and a restarted backup can join a later
    /// view change); at most once per half view-change timeout per peer.
    fn echo_view_change(&mut self, now: Millis, to: NodeId, out: &mut Vec<Output>) {
        if !self.in_view_change || !self.echo_allowed(now, to) {
            return;
        }
        let own = self
            .vc
            .received
            .get(&self.view)
            .and_then(|m| m.get(&self.cfg.id))
            .map(|(msg, _)| msg.clone());
        if let Some(msg) = own
            && let Ok(bytes) = codec::encode(&Wire::Signed(msg))
        {
            self.metrics.inc("view_change_echoed");
            out.push(Output::Send { to, bytes });
        }
    }

    /// Rate limit of [`Self::echo_view_change`] and of new-views re-sent to a peer that asks
    /// again for our current view: true (and recorded) at most once per half timeout per peer.
    fn echo_allowed(&mut self, now: Millis, to: NodeId) -> bool {
        let gap = (self.cfg.view_change_timeout_ms / 2).max(1);
        if self
            .vc
            .echo_ms
            .get(&to)
            .is_some_and(|last| now < last.saturating_add(gap))
        {
            return false;
        }
        self.vc.echo_ms.insert(to, now);
        true
    }

    pub(super) fn on_view_change(
        &mut self,
        now: Millis,
        from: NodeId,
        vc: ViewChange,
        msg: SignedMsg,
        out: &mut Vec<Output>,
    ) {
        let target = vc.new_view;
        if target < self.view || (target == self.view && !self.in_view_change) {
            // The sender lags behind a view we already entered: show it the new-view. A peer
            // asking for exactly our view may have restarted after we showed it once: it gets
            // the new-view again, rate limited.
            let again = target == self.view
                && !self.in_view_change
                && self.vc.last_new_view.is_some()
                && self.echo_allowed(now, from);
            if let Some(nv) = self.vc.last_new_view.clone()
                && (self.vc.new_view_resent.insert((from, self.view)) || again)
                && let Ok(bytes) = codec::encode(&Wire::Signed(nv))
            {
                out.push(Output::Send { to: from, bytes });
            }
            // We are changing to a later view: the sender may join it on our view change.
            self.echo_view_change(now, from, out);
            return self.drop_msg("drop_stale_view_change", Some(from));
        }
        if target > self.view + u64::from(self.cfg.n) {
            return self.drop_msg("drop_wrong_view", Some(from));
        }
        if self
            .vc
            .received
            .get(&target)
            .is_some_and(|m| m.contains_key(&from))
        {
            // A repeated view change: the sender found no quorum, perhaps because it restarted
            // and lost ours.
            if target == self.view {
                self.echo_view_change(now, from, out);
            }
            return self.drop_msg("drop_duplicate", Some(from));
        }
        if !self.validate_view_change(&vc) {
            warn!(replica = self.cfg.id, from, target, "invalid view change");
            return self.drop_msg("drop_invalid_view_change", Some(from));
        }
        self.vc
            .received
            .entry(target)
            .or_default()
            .insert(from, (msg, vc));
        // Join rule: f+1 distinct replicas asking for views above ours.
        let floor = self.view + 1;
        let mut senders = BTreeSet::new();
        let mut lowest = None;
        for (v, m) in self.vc.received.range(floor..) {
            for n in m.keys() {
                if *n != self.cfg.id {
                    senders.insert(*n);
                }
            }
            lowest.get_or_insert(*v);
        }
        if senders.len() > self.f()
            && let Some(v) = lowest
        {
            self.start_view_change(now, v, out);
        }
        self.maybe_send_new_view(now, out);
    }

    /// The view-change timer expired while this replica waits for the new-view of its view.
    /// When fewer than 2f+1 replicas (itself included) asked for this view or a later one, the
    /// primary of the view never had a quorum to build a new-view from: moving on alone would
    /// only run further ahead of the others (who then never gather a quorum with this replica
    /// again, the stall the simulator found after healing). Instead it sends its view change
    /// again (it may have been lost) and waits another timeout. Returns true when it did so.
    pub(super) fn retransmit_lone_view_change(
        &mut self,
        now: Millis,
        out: &mut Vec<Output>,
    ) -> bool {
        let mut supporters = BTreeSet::new();
        supporters.insert(self.cfg.id);
        for m in self.vc.received.range(self.view..).map(|(_, m)| m) {
            supporters.extend(m.keys().copied());
        }
        if supporters.len() >= self.quorum() {
            return false;
        }
        let own = self
            .vc
            .received
            .get(&self.view)
            .and_then(|m| m.get(&self.cfg.id))
            .map(|(msg, _)| msg.clone());
        match own.map(|msg| codec::encode(&Wire::Signed(msg))) {
            Some(Ok(bytes)) => {
                self.metrics.inc("view_change_retransmitted");
                out.push(Output::Broadcast { bytes });
                self.vc.deadline = Some(now.saturating_add(self.vc_timeout()));
                true
            }
            _ => false,
        }
    }

    fn maybe_send_new_view(&mut self, now: Millis, out: &mut Vec<Output>) {
        if !self.in_view_change || self.primary_of(self.view) != self.cfg.id {
            return;
        }
        let quorum = self.quorum();
        let Some(m) = self.vc.received.get(&self.view) else {
            return;
        };
        if m.len() < quorum {
            return;
        }
        let chosen: Vec<(SignedMsg, ViewChange)> = m.values().take(quorum).cloned().collect();
        let view = self.view;
        let body = Body::NewView {
            view,
            view_changes: chosen.iter().map(|(s, _)| s.clone()).collect(),
        };
        let payload = Payload {
            from: self.cfg.id,
            body: body.clone(),
        };
        if let Ok(msg) = SignedMsg::sign(&self.key, &payload) {
            self.check_deliverable(&msg, "new-view");
            self.vc.last_new_view = Some(msg);
        }
        self.send(body, Dest::All, out);
        let vcs = chosen.into_iter().map(|(_, v)| v).collect();
        self.enter_new_view(now, view, vcs, out);
    }

    pub(super) fn on_new_view(
        &mut self,
        now: Millis,
        from: NodeId,
        view: u64,
        msgs: Vec<SignedMsg>,
        msg: SignedMsg,
        out: &mut Vec<Output>,
    ) {
        if view < self.view || (view == self.view && !self.in_view_change) {
            return self.drop_msg("drop_stale_new_view", Some(from));
        }
        if from != self.primary_of(view) {
            return self.drop_msg("drop_not_primary", Some(from));
        }
        if msgs.len() > self.cfg.n as usize {
            return self.drop_msg("drop_invalid_new_view", Some(from));
        }
        let mut vcs = Vec::new();
        let mut senders = BTreeSet::new();
        for m in &msgs {
            let ok = match m.open(
                &self.ring,
                self.cfg.max_message_bytes,
                self.cfg.verify_cache.as_ref(),
            ) {
                Ok(Payload {
                    from: sender,
                    body: Body::ViewChange(vc),
                }) if vc.new_view == view
                    && senders.insert(sender)
                    && self.validate_view_change(&vc) =>
                {
                    vcs.push(vc);
                    true
                }
                _ => false,
            };
            if !ok {
                warn!(replica = self.cfg.id, from, view, "invalid new view");
                return self.drop_msg("drop_invalid_new_view", Some(from));
            }
        }
        if vcs.len() < self.quorum() {
            return self.drop_msg("drop_invalid_new_view", Some(from));
        }
        if view > self.view {
            self.metrics.inc("view_changes_started");
        }
        self.view = view;
        self.vc.last_new_view = Some(msg);
        self.enter_new_view(now, view, vcs, out);
    }

    fn enter_new_view(
        &mut self,
        now: Millis,
        view: u64,
        vcs: Vec<ViewChange>,
        out: &mut Vec<Output>,
    ) {
        let Some(best) = vcs.iter().map(|v| &v.stable).max_by_key(|p| p.seq).cloned() else {
            return;
        };
        let min_s = best.seq;
        // seq -> (view, digest, replicas that prepared that digest in that view).
        let mut chosen: BTreeMap<u64, (u64, Digest32, Vec<NodeId>)> = BTreeMap::new();
        for vc in &vcs {
            for p in &vc.prepared {
                if p.seq <= min_s {
                    continue;
                }
                if chosen.get(&p.seq).is_none_or(|(v, _, _)| *v < p.view) {
                    let mut holders = vec![self.primary_of(p.view)];
                    holders.extend(p.sigs.iter().map(|(n, _)| *n));
                    chosen.insert(p.seq, (p.view, p.digest, holders));
                }
            }
        }
        let max_s = chosen
            .keys()
            .next_back()
            .copied()
            .unwrap_or(min_s)
            .max(min_s);
        self.view = view;
        self.in_view_change = false;
        self.vc.resend_deadline = None;
        self.vc.received = self.vc.received.split_off(&(view + 1));
        self.vc.new_view_resent.retain(|(_, v)| *v >= view);
        self.metrics.inc("view_changes_completed");
        info!(
            replica = self.cfg.id,
            view, min_s, max_s, "entered new view"
        );

        // Adopt the quorum's stable checkpoint when we executed it ourselves with that digest;
        // otherwise fetch it.
        if min_s > self.checkpoints.stable.seq {
            match self.checkpoints.own.get(&min_s) {
                Some((d, bytes)) if *d == best.digest => {
                    let bytes = bytes.clone();
                    self.make_stable(best.clone(), bytes, out);
                }
                _ if min_s > self.last_executed => self.start_transfer(now, best.clone(), out),
                _ => {}
            }
        }

        let mut old = std::mem::take(&mut self.log);
        self.clients.clear_proposed();
        self.fetch.missing.clear();
        self.fetch.served_seqs.clear();
        self.fetch.new_view_digests.clear();
        let is_primary = self.primary_of(view) == self.cfg.id;
        let quorum = self.quorum();
        let mut to_vote: Vec<(u64, Digest32)> = Vec::new();
        let Ok(null_digest) = Batch::null().digest(self.cfg.signatures) else {
            return;
        };
        for seq in (min_s + 1)..=max_s {
            if seq <= self.checkpoints.stable.seq || seq > self.high_watermark() {
                continue;
            }
            let (digest, holders) = chosen
                .remove(&seq)
                .map_or((null_digest, Vec::new()), |(_, d, h)| (d, h));
            if digest != null_digest {
                self.fetch.new_view_digests.insert(seq, digest);
            }
            let mut prev = old.remove(&seq).unwrap_or_default();
            // A commit certificate for this very batch (from any earlier view) stays
            // forwardable: peers that lack the seq can still commit it when the honest
            // replicas that executed it do not vote for it again in the new view.
            let prev_cert = if prev.digest == Some(digest) {
                prev.certificate(quorum)
            } else {
                None
            };
            // The batch itself: a null batch, or the one this replica holds with that digest
            // (as its entry or as its prepared certificate's); else it is fetched by digest.
            let batch = if digest == null_digest {
                Some(std::sync::Arc::new(Batch::null()))
            } else if prev.digest == Some(digest) && prev.batch.is_some() {
                prev.batch.take()
            } else if prev.proof.as_ref().is_some_and(|p| p.digest == digest) {
                prev.proof_batch.clone()
            } else {
                None
            };
            match &batch {
                Some(b) => {
                    for r in &b.requests {
                        self.clients
                            .mark_proposed(r.request.client, r.request.req_seq, seq);
                    }
                }
                // An executed seq needs no batch (state transfer may have skipped it).
                None if seq > self.last_executed => {
                    let holders = holders.into_iter().filter(|n| *n != self.cfg.id).collect();
                    self.fetch.missing.insert(seq, (digest, holders));
                }
                None => {}
            }
            self.log.insert(
                seq,
                Entry {
                    view,
                    batch,
                    digest: Some(digest),
                    vote_ok: true,
                    proof: prev.proof.take(),
                    proof_batch: prev.proof_batch.take(),
                    cert: prev_cert,
                    ..Entry::default()
                },
            );
            self.store_entry(seq, out);
            to_vote.push((seq, digest));
        }
        // Entries above max_s (and old votes) belonged to the old view; their proofs are kept
        // only where the new log has the seq. Delete their durable copies.
        for (seq, _) in old.range(max_s + 1..) {
            out.push(Output::Store {
                key: super::log_key(*seq),
                value: None,
            });
        }
        // "In `view`, new-view processed" goes to storage after the new log: writes are kept
        // in order, so whoever restarts in the view finds its log, and whoever finds only the
        // view change restarts it (and waits for the new-view again).
        self.store_view(out);
        out.push(Output::Sync);
        self.next_seq = max_s
            .max(self.last_executed)
            .max(self.checkpoints.stable.seq)
            + 1;
        if !is_primary {
            for (seq, digest) in to_vote {
                if let Some(sig) = self.send(Body::Prepare { view, seq, digest }, Dest::All, out)
                    && let Some(e) = self.log.get_mut(&seq)
                {
                    e.prepares.insert(self.cfg.id, (digest, sig));
                }
            }
        }
        if !is_primary {
            // Requests this replica holds that the new log does not order may never have
            // reached the new primary (forwarded to the old one): forward them again.
            let primary = self.primary_of(view);
            for r in self.clients.unproposed_requests(REFORWARD_MAX) {
                if let Ok(bytes) = codec::encode(&Wire::Request(r)) {
                    out.push(Output::Send { to: primary, bytes });
                }
            }
        }
        self.vc.deadline = if self.has_pending_work() {
            Some(now.saturating_add(self.vc_timeout()))
        } else {
            None
        };
        self.fetch.round = 0;
        self.fetch.deadline = None;
        self.fetch_missing_batches(now, out);
        self.replay_future(now, out);
    }

    /// Checks a view change's checkpoint proof and prepared certificates (signatures included).
    pub(super) fn validate_view_change(&self, vc: &ViewChange) -> bool {
        if !self.verify_checkpoint_proof(&vc.stable) {
            return false;
        }
        if vc.prepared.len() as u64 > self.cfg.log_window {
            return false;
        }
        let mut seqs = BTreeSet::new();
        vc.prepared.iter().all(|p| {
            if p.seq <= vc.stable.seq
                || p.seq > vc.stable.seq.saturating_add(self.cfg.log_window)
                || p.view >= vc.new_view
                || !seqs.insert(p.seq)
                || p.sigs.len() < 2 * self.f()
                || p.sigs.len() >= self.cfg.n as usize
            {
                return false;
            }
            let digest = p.digest;
            let primary = self.primary_of(p.view);
            let mut seen = BTreeSet::new();
            p.sigs.iter().all(|(n, s)| {
                *n != primary
                    && seen.insert(*n)
                    && crate::protocol::verify_body(
                        &self.ring,
                        *n,
                        Body::Prepare {
                            view: p.view,
                            seq: p.seq,
                            digest,
                        },
                        s,
                        self.cfg.verify_cache.as_ref(),
                    )
            })
        })
    }
}
