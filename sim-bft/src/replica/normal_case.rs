//! The normal case (PBFT §4.2): propose, pre-prepare, prepare, commit.
//!
//! The primary cuts batches from the pending requests (pipelined up to `max_in_flight`) and
//! broadcasts pre-prepares; a backup accepts one after validating every request and the
//! batch's time, and votes. An entry prepares with 2f matching prepares from backups and
//! commits with 2f+1 matching commits, whose signed clocks become a time certificate.

use std::sync::Arc;

use tracing::{debug, warn};

use super::{CommitVote, Dest, Entry, Replica, TimeMode, batch_bytes};
use crate::crypto::{Digest32, SigBytes};
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Batch, Body, ClockSample, PreparedProof, SigList, TimeCert};

impl Replica {
    pub(super) fn try_propose(&mut self, now: Millis, out: &mut Vec<Output>) {
        if !self.is_primary() || self.in_view_change || self.state_transfer.transfer.is_some() {
            return;
        }
        if let Some(until) = self.strategy.hold_proposals(self, now) {
            self.batch_deadline = Some(until);
            return;
        }
        loop {
            let in_flight = self.next_seq.saturating_sub(self.last_executed + 1);
            if in_flight >= self.cfg.max_in_flight || self.next_seq > self.high_watermark() {
                return;
            }
            let (oldest, count) = self.clients.unproposed();
            let Some(oldest) = oldest else {
                self.batch_deadline = None;
                return;
            };
            if count < self.cfg.batch_max && now < oldest.saturating_add(self.cfg.batch_delay_ms) {
                self.batch_deadline = Some(oldest.saturating_add(self.cfg.batch_delay_ms));
                return;
            }
            self.batch_deadline = None;
            let seq = self.next_seq;
            let requests = self.clients.take_batch(self.cfg.batch_max, seq);
            let time_cert = match self.cfg.time.mode {
                TimeMode::Robust => self.select_cert(seq),
                _ => None,
            };
            let batch = Batch {
                requests,
                primary_clock_ms: self.primary_stamp(now),
                time_cert,
                null: false,
            };
            self.next_seq += 1;
            self.propose(seq, batch, out);
        }
    }

    fn propose(&mut self, seq: u64, batch: Batch, out: &mut Vec<Output>) {
        // Encoded once: for the digest, then kept for the stored log entries.
        let Ok((digest, bytes)) = batch_bytes::digest_and_bytes(&batch, self.cfg.signatures) else {
            self.metrics.inc("encode_error");
            return;
        };
        let view = self.view;
        let batch = Arc::new(batch);
        self.batch_bytes.keep(&batch, bytes);
        let entry = self.log.entry(seq).or_default();
        *entry = Entry {
            view,
            digest: Some(digest),
            batch: Some(Arc::clone(&batch)),
            vote_ok: true,
            proof: entry.proof.take(),
            proof_batch: entry.proof_batch.take(),
            ..Entry::default()
        };
        self.store_entry(seq, out);
        out.push(Output::Sync);
        self.metrics.inc("batches_proposed");
        debug!(
            replica = self.cfg.id,
            view,
            seq,
            requests = ?batch.requests.iter().map(|r| (r.request.client, r.request.req_seq)).collect::<Vec<_>>(),
            "proposed"
        );
        // The wire message owns its batch: one copy, for the encoding (the log keeps the
        // shared one).
        self.send(
            Body::PrePrepare {
                view,
                seq,
                batch: Batch::clone(&batch),
            },
            Dest::All,
            out,
        );
    }

    pub(super) fn on_pre_prepare(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        batch: Batch,
        out: &mut Vec<Output>,
    ) {
        let view = self.view;
        if from != self.primary_of(view) {
            return self.drop_msg("drop_not_primary", Some(from));
        }
        if seq > self.high_watermark() {
            return self.above_window(now, from, out);
        }
        if seq <= self.checkpoints.stable.seq {
            return self.drop_msg("drop_out_of_window", Some(from));
        }
        if batch.null || batch.requests.is_empty() || batch.requests.len() > self.cfg.batch_max {
            return self.drop_msg("drop_invalid_batch", Some(from));
        }
        let Ok((digest, bytes)) = batch_bytes::digest_and_bytes(&batch, self.cfg.signatures) else {
            return self.drop_msg("drop_malformed", Some(from));
        };
        if let Some(e) = self.log.get(&seq)
            && e.view == view
            && let Some(d) = e.digest
        {
            let reason = if d == digest {
                "drop_duplicate"
            } else {
                "drop_equivocation"
            };
            return self.drop_msg(reason, Some(from));
        }
        if let Some(e) = self.log.get(&seq)
            && e.view != view
            && e.committed
        {
            // Committed in an earlier view: only a validated new-view may replace the entry (and
            // it carries the same batch). A pre-prepare never does, whatever its digest.
            let reason = if e.digest == Some(digest) {
                "drop_duplicate"
            } else {
                warn!(
                    replica = self.cfg.id,
                    from, seq, "pre-prepare conflicts with a batch committed in an earlier view"
                );
                "drop_conflicts_committed"
            };
            return self.drop_msg(reason, Some(from));
        }
        self.preverify_requests(batch.requests.iter(), Some(from));
        for r in &batch.requests {
            if let Err(reason) = self.validate_request(r, Some(from)) {
                self.metrics.inc(reason);
                return self.drop_msg("drop_invalid_batch", Some(from));
            }
        }
        let vote_ok = self.check_batch_time(now, seq, &batch);
        for r in &batch.requests {
            self.clients
                .mark_proposed(r.request.client, r.request.req_seq, seq);
        }
        let entry = self.log.entry(seq).or_default();
        if entry.view != view {
            // An entry left from an earlier view (its votes and flags were about another view's
            // batch): start afresh, keeping only the prepared certificate (view-change evidence).
            let commits = std::mem::take(&mut entry.commits)
                .into_iter()
                .filter(|(_, v)| v.view == view)
                .collect();
            *entry = Entry {
                proof: entry.proof.take(),
                proof_batch: entry.proof_batch.take(),
                commits,
                ..Entry::default()
            };
        }
        entry.view = view;
        entry.digest = Some(digest);
        let batch = Arc::new(batch);
        entry.batch = Some(Arc::clone(&batch));
        entry.vote_ok = vote_ok;
        self.batch_bytes.keep(&batch, bytes);
        self.store_entry(seq, out);
        out.push(Output::Sync);
        if vote_ok
            && let Some(sig) = self.send(Body::Prepare { view, seq, digest }, Dest::All, out)
            && let Some(e) = self.log.get_mut(&seq)
        {
            e.prepares.insert(self.cfg.id, (digest, sig));
        }
        if self.vc.deadline.is_none() {
            self.vc.deadline = Some(now.saturating_add(self.vc_timeout()));
        }
        self.progress(now, seq, out);
    }

    pub(super) fn on_prepare(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        digest: Digest32,
        sig: SigBytes,
        out: &mut Vec<Output>,
    ) {
        if from == self.primary() {
            return self.drop_msg("drop_prepare_from_primary", Some(from));
        }
        if seq > self.high_watermark() {
            return self.above_window(now, from, out);
        }
        if seq <= self.checkpoints.stable.seq {
            return self.drop_msg("drop_out_of_window", Some(from));
        }
        let view = self.view;
        let e = self.log.entry(seq).or_insert_with(|| Entry {
            view,
            ..Entry::default()
        });
        if let Some((d, _)) = e.prepares.get(&from) {
            let reason = if *d == digest {
                "drop_duplicate"
            } else {
                "drop_equivocation"
            };
            return self.drop_msg(reason, Some(from));
        }
        e.prepares.insert(from, (digest, sig));
        self.progress(now, seq, out);
    }

    pub(super) fn on_commit(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        vote: CommitVote,
        out: &mut Vec<Output>,
    ) {
        if seq > self.high_watermark() {
            return self.above_window(now, from, out);
        }
        if seq <= self.checkpoints.stable.seq {
            return self.drop_msg("drop_out_of_window", Some(from));
        }
        let view = self.view;
        let e = self.log.entry(seq).or_insert_with(|| Entry {
            view,
            ..Entry::default()
        });
        if let Some(v) = e.commits.get(&from) {
            let reason = if v.digest == vote.digest {
                "drop_duplicate"
            } else {
                "drop_equivocation"
            };
            return self.drop_msg(reason, Some(from));
        }
        e.commits.insert(from, vote);
        self.progress(now, seq, out);
    }

    /// Advances entry `seq`: prepared -> send commit; 2f+1 commits -> committed -> execute.
    pub(super) fn progress(&mut self, now: Millis, seq: u64, out: &mut Vec<Output>) {
        let stamp_ms = self.clock(now);
        let primary = self.primary();
        let quorum = self.quorum();
        let f2 = 2 * self.f();
        let id = self.cfg.id;
        let view = self.view;
        let Some(e) = self.log.get_mut(&seq) else {
            return;
        };
        let Some(digest) = e.digest else {
            return;
        };
        if !e.prepared && e.vote_ok {
            let sigs: SigList = e
                .prepares
                .iter()
                .filter(|(n, (d, _))| **n != primary && *d == digest)
                .map(|(n, (_, s))| (*n, *s))
                .collect();
            if sigs.len() >= f2 {
                e.prepared = true;
                // The certificate names the batch by digest; the batch itself may still be
                // on its way (fetched after a new view), and is kept beside it once held.
                e.proof = Some(PreparedProof {
                    view,
                    seq,
                    digest,
                    sigs,
                });
                e.proof_batch = e.batch.clone();
            }
        }
        let send_commit = e.prepared && !e.commit_sent;
        if send_commit {
            e.commit_sent = true;
            self.store_entry(seq, out);
            out.push(Output::Sync);
            let clock_ms = stamp_ms;
            if let Some(sig) = self.send(
                Body::Commit {
                    view,
                    seq,
                    digest,
                    clock_ms,
                },
                Dest::All,
                out,
            ) && let Some(e) = self.log.get_mut(&seq)
            {
                e.commits.insert(
                    id,
                    CommitVote {
                        view,
                        digest,
                        clock_ms,
                        sig,
                    },
                );
            }
        }
        let Some(e) = self.log.get_mut(&seq) else {
            return;
        };
        if !e.committed && e.batch.is_some() {
            let matching: Vec<(NodeId, CommitVote)> = e
                .commits
                .iter()
                .filter(|(_, v)| v.digest == digest && v.view == view)
                .map(|(n, v)| (*n, *v))
                .collect();
            if matching.len() >= quorum {
                // 2f+1 matching commits imply f+1 honest replicas prepared: safe to execute
                // even where this replica withheld its own votes.
                e.committed = true;
                let samples = matching
                    .iter()
                    .take(quorum)
                    .map(|(n, v)| ClockSample {
                        replica: *n,
                        view: v.view,
                        clock_ms: v.clock_ms,
                        sig: v.sig,
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
    }
}
