//! Normal-case retransmission: recovering lost pre-prepares, prepares and commits.
//!
//! With f faulty replicas that contribute no valid votes, every quorum is exactly the honest
//! replicas, so one lost message stalls a sequence number. Every `retransmit_interval_ms`
//! (a timer on the injected `now`, armed only while sequence numbers above the last executed
//! one are uncommitted), a replica lists the sequence numbers that were already uncommitted
//! at the previous tick, with what it holds of each, in one broadcast [`Body::Have`]. Each
//! peer answers with exactly its own messages the sender lacks: the pre-prepare when it is the
//! primary, its prepare, its commit (re-signed: ed25519 signatures are deterministic, so the
//! bytes are those it sent before), or a [`Body::Committed`] certificate for a sequence number
//! it has already committed.
//!
//! Bounds: at most [`MAX_HAVE_SEQS`] sequence numbers per `Have`, one `Have` per interval,
//! and a peer's `Have` is answered at most once per half interval (others are dropped and
//! counted), so an answer costs at most three messages per listed sequence number.
//!
//! Amplification bound on the batch-carrying answers (a `Committed` certificate, here or in a
//! `Status` answer, and the pre-prepare), in two parts:
//!
//! - **Pacing.** Each (peer, seq) gets one again only after a repeat window that starts at
//!   `retransmit_interval_ms` and doubles per re-send up to `view_change_timeout_ms`. A peer
//!   that keeps listing a seq it never gets (cut off by a partition, or an attacker) costs
//!   about `log2(timeout / interval)` batches and then one per view-change timeout, not one
//!   per interval: the campaign found A/fat-view-change seed 74, where every honest replica
//!   sent a partitioned Byzantine replica a 1.3 MB certificate every 50 ms (114–173 MB in
//!   20 s).
//! - **Credit.** The first certificate of a seq to a peer is free; every repeat (a second
//!   certificate, any pre-prepare re-send: the broadcast was the first) is paid from the
//!   peer's [`RepeatCredit`], which each executed batch refills by its size (with the
//!   certificate's signatures), and which may overdraw by one message. Beyond the credit, one
//!   repeat per view-change timeout still goes out (a peer whose answers were lost for a
//!   while is never cut off). Pacing alone let the `withhold-commits` strategy (a replica
//!   that sends no commit and lists its whole window as lacking every 50 ms) draw 4–5 times
//!   the committed stream from every honest replica: a seq lives in the window about a
//!   second, long enough for 4–6 paced re-sends. With the credit, a peer draws at most about
//!   twice the stream (the first certificates, then the stream again in repeats), whatever
//!   it claims; an honest replica that lost 5% of its messages uses a twentieth of it.

use std::collections::{BTreeMap, BTreeSet};

use super::{Dest, Replica};
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Batch, Body, MAX_HAVE_SEQS, SeqHave};

/// A peer's credit for repeated batch-carrying answers (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(super) struct RepeatCredit {
    /// Bytes; may be negative by at most one message (a repeat goes out while it is positive).
    credit: i64,
    /// When the last repeat beyond the credit went out.
    floor_at: Option<Millis>,
}

impl Default for RepeatCredit {
    fn default() -> Self {
        Self {
            credit: REPEAT_CREDIT_START,
            floor_at: None,
        }
    }
}

/// The credit a peer starts with: enough for a few repeats before anything executed.
const REPEAT_CREDIT_START: i64 = 256 << 10;

/// Signature and framing bytes of a certificate, per replica of the cluster (a commit's
/// signer, clock and signature, with slack), added to a batch's size.
const CERT_BYTES_PER_REPLICA: u64 = 96;

/// The answer a batch-carrying message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchAnswer {
    /// A commit certificate (free the first time for a (peer, seq)).
    Certificate,
    /// A pre-prepare re-send (the broadcast was the first).
    PrePrepare,
}

/// Normal-case retransmission (see `retransmit`).
#[derive(Debug)]
pub(super) struct RetransmitState {
    /// When the normal-case retransmission timer fires next (see `retransmit`).
    pub(super) deadline: Option<Millis>,
    /// The uncommitted sequence numbers seen at the previous retransmission tick.
    pub(super) prev: BTreeSet<u64>,
    /// The highest sequence number of the current view that a peer's [`Body::Have`] listed
    /// (within our window): a replica that lost every message of a seq (a pre-prepare sent
    /// while it was cut off) has no log entry for it, and learns here that it must ask.
    pub(super) heard_top: (u64, u64),
    /// When this replica last answered each peer's `Have` (rate limit).
    pub(super) have_answered_ms: BTreeMap<NodeId, Millis>,
    /// Per (peer, seq): when a `Have` answer last re-sent it a batch-carrying message (a
    /// `Committed` certificate or the pre-prepare), and the repeat window then in force (it
    /// doubles per re-send, from `retransmit_interval_ms` up to `view_change_timeout_ms`).
    /// Only seqs above the stable checkpoint are kept.
    pub(super) have_batch_sent: BTreeMap<(NodeId, u64), (Millis, Millis)>,
    /// Per peer: the byte credit for repeated batch-carrying answers and when the last
    /// repeat beyond the credit went out (see [`retransmit::RepeatCredit`]).
    pub(super) repeat_credit: BTreeMap<NodeId, RepeatCredit>,
}

impl Replica {
    /// Arms the retransmission timer when there is uncommitted work above the last executed
    /// sequence number and the timer is not armed yet; disarms it when there is none any more.
    ///
    /// Disarming is what keeps an idle replica asleep: the timer is armed by every PBFT
    /// instance (its pre-prepare is uncommitted for a few ms) and, left armed, fired one
    /// retransmission interval later into a replica with nothing to retransmit — one wasted
    /// wake-up per instance per replica, 12 of the ~123 events per simulated second of the
    /// long-horizon workload (docs/benchmarks-sim-bft.md). A timer that fires finding nothing
    /// uncommitted does nothing but forget `prev`, which disarming does too, so no message
    /// changes: a stuck sequence number is still reported between one and two intervals after
    /// the timer was armed for it.
    pub(super) fn arm_retransmit(&mut self, now: Millis) {
        let interval = self.cfg.retransmit_interval_ms;
        if interval <= 0 {
            return;
        }
        if !self.any_uncommitted() {
            self.retransmit.deadline = None;
            self.retransmit.prev.clear();
            return;
        }
        if self.retransmit.deadline.is_none() {
            self.retransmit.deadline = Some(now.saturating_add(interval));
        }
    }

    /// Whether [`Self::uncommitted_seqs`] is non-empty, without building it (called after
    /// every input).
    fn any_uncommitted(&self) -> bool {
        let Some((lo, hi)) = self.uncommitted_range() else {
            return false;
        };
        let committed = self.log.range(lo..=hi).filter(|(_, e)| e.committed).count() as u64;
        committed < hi - lo + 1
    }

    /// The sequence numbers [`Self::uncommitted_seqs`] looks at: above the last executed one,
    /// up to the highest this replica knows of (and at most the high watermark).
    fn uncommitted_range(&self) -> Option<(u64, u64)> {
        let heard = if self.retransmit.heard_top.0 == self.view && !self.in_view_change {
            self.retransmit.heard_top.1
        } else {
            0
        };
        let top = self.log.last_key_value().map_or(0, |(s, _)| *s).max(heard);
        if top == 0 {
            return None;
        }
        let lo = self.last_executed.saturating_add(1);
        let hi = top.min(self.high_watermark());
        (hi >= lo).then_some((lo, hi))
    }

    /// Sequence numbers above the last executed one, up to the highest this replica knows of
    /// (and at most the high watermark), that are not committed here: the lowest
    /// [`MAX_HAVE_SEQS`] of them.
    fn uncommitted_seqs(&self) -> Vec<u64> {
        let Some((lo, hi)) = self.uncommitted_range() else {
            return Vec::new();
        };
        (lo..=hi)
            .filter(|s| !self.log.get(s).is_some_and(|e| e.committed))
            .take(MAX_HAVE_SEQS)
            .collect()
    }

    /// The retransmission timer fired: broadcast what we hold of every sequence number that
    /// was already uncommitted at the previous tick.
    pub(super) fn on_retransmit_timer(&mut self, now: Millis, out: &mut Vec<Output>) {
        self.retransmit.deadline = None;
        if self.in_view_change || self.state_transfer.transfer.is_some() {
            self.retransmit.prev.clear();
            return;
        }
        let current = self.uncommitted_seqs();
        let stuck: Vec<u64> = current
            .iter()
            .copied()
            .filter(|s| self.retransmit.prev.contains(s))
            .collect();
        self.retransmit.prev = current.into_iter().collect();
        if !stuck.is_empty() {
            let view = self.view;
            let seqs: Vec<SeqHave> = stuck
                .iter()
                .map(|s| match self.log.get(s).filter(|e| e.view == view) {
                    Some(e) => SeqHave {
                        seq: *s,
                        digest: e.digest,
                        prepares: e.prepares.keys().copied().collect(),
                        commits: e
                            .commits
                            .iter()
                            .filter(|(_, v)| v.view == view)
                            .map(|(n, _)| *n)
                            .collect(),
                    },
                    None => SeqHave {
                        seq: *s,
                        digest: None,
                        prepares: Vec::new(),
                        commits: Vec::new(),
                    },
                })
                .collect();
            self.metrics.inc("have_sent");
            self.metrics.add("have_seqs_sent", seqs.len() as u64);
            let last_executed = self.last_executed;
            self.send(
                Body::Have {
                    view,
                    last_executed,
                    seqs,
                },
                Dest::All,
                out,
            );
        }
        self.arm_retransmit(now);
    }

    /// A peer's [`Body::Have`]: resend exactly our own messages it lacks.
    pub(super) fn on_have(
        &mut self,
        now: Millis,
        from: NodeId,
        view: u64,
        seqs: Vec<SeqHave>,
        out: &mut Vec<Output>,
    ) {
        let n = self.cfg.n as usize;
        if seqs.len() > MAX_HAVE_SEQS
            || seqs
                .iter()
                .any(|h| h.prepares.len() > n || h.commits.len() > n)
        {
            return self.drop_msg("drop_oversized_have", Some(from));
        }
        let gap = (self.cfg.retransmit_interval_ms / 2).max(1);
        if self
            .retransmit
            .have_answered_ms
            .get(&from)
            .is_some_and(|last| now < last.saturating_add(gap))
        {
            return self.drop_msg("drop_have_rate_limited", Some(from));
        }
        self.retransmit.have_answered_ms.insert(from, now);
        self.metrics.inc("have_answered");
        if view == self.view && !self.in_view_change {
            let high = self.high_watermark();
            if let Some(top) = seqs
                .iter()
                .map(|h| h.seq)
                .filter(|s| *s > self.last_executed && *s <= high)
                .max()
            {
                let cur = if self.retransmit.heard_top.0 == view {
                    self.retransmit.heard_top.1
                } else {
                    0
                };
                self.retransmit.heard_top = (view, cur.max(top));
            }
        }
        let stable = self.checkpoints.stable.seq;
        self.retransmit
            .have_batch_sent
            .retain(|(_, s), _| *s > stable);
        let id = self.cfg.id;
        let same_view = view == self.view && !self.in_view_change;
        let is_primary = self.is_primary();
        let quorum = self.quorum();
        let mut seen = BTreeSet::new();
        let mut resend: Vec<Body> = Vec::new();
        let mut held = 0u64;
        for h in &seqs {
            if h.seq <= self.checkpoints.stable.seq
                || h.seq > self.high_watermark()
                || !seen.insert(h.seq)
            {
                continue;
            }
            let Some(e) = self.log.get(&h.seq) else {
                continue;
            };
            let (Some(digest), true) = (e.digest, e.batch.is_some()) else {
                continue;
            };
            let has_cert = e.certificate(quorum).is_some();
            let wants_pre_prepare =
                same_view && e.view == view && is_primary && h.digest.is_none_or(|d| d == digest);
            // Amplification bound: batch-carrying answers per (peer, seq) back off and repeats
            // are paid from the peer's credit.
            let what = if has_cert {
                BatchAnswer::Certificate
            } else {
                BatchAnswer::PrePrepare
            };
            let batch_due = (has_cert || (wants_pre_prepare && h.digest.is_none())) && {
                let cost = e.batch.as_ref().map_or(0, |b| self.answer_bytes(b));
                self.batch_resend_due(now, from, h.seq, what, cost)
            };
            let Some(e) = self.log.get(&h.seq) else {
                continue;
            };
            let Some(batch) = e.batch.as_ref() else {
                continue;
            };
            if has_cert {
                if let (true, Some((cert_view, commits))) = (batch_due, e.certificate(quorum)) {
                    resend.push(Body::Committed {
                        view: cert_view,
                        seq: h.seq,
                        batch: Batch::clone(batch),
                        commits,
                    });
                } else {
                    held += 1;
                }
                continue;
            }
            if !same_view || e.view != view || h.digest.is_some_and(|d| d != digest) {
                continue;
            }
            if is_primary && h.digest.is_none() {
                if batch_due {
                    resend.push(Body::PrePrepare {
                        view,
                        seq: h.seq,
                        batch: Batch::clone(batch),
                    });
                } else {
                    held += 1;
                }
            }
            if !is_primary
                && !h.prepares.contains(&id)
                && e.prepares.get(&id).is_some_and(|(d, _)| *d == digest)
            {
                resend.push(Body::Prepare {
                    view,
                    seq: h.seq,
                    digest,
                });
            }
            if e.commit_sent
                && !h.commits.contains(&id)
                && let Some(v) = e.commits.get(&id)
                && v.view == view
            {
                resend.push(Body::Commit {
                    view,
                    seq: h.seq,
                    digest: v.digest,
                    clock_ms: v.clock_ms,
                });
            }
        }
        if held > 0 {
            self.metrics.add("have_batch_resend_held", held);
        }
        self.metrics.add("retransmitted", resend.len() as u64);
        for body in resend {
            self.send(body, Dest::One(from), out);
        }
    }

    /// Whether a batch-carrying answer (`what`, of about `cost` bytes: [`Self::answer_bytes`])
    /// for `seq` may go to `peer` now; if so, records it, doubles the repeat window and
    /// charges the peer's credit (see the module docs).
    pub(super) fn batch_resend_due(
        &mut self,
        now: Millis,
        peer: NodeId,
        seq: u64,
        what: BatchAnswer,
        cost: u64,
    ) -> bool {
        let base = self.cfg.retransmit_interval_ms.max(1);
        let cap = self.cfg.view_change_timeout_ms.max(base);
        let (window, first) = match self.retransmit.have_batch_sent.get(&(peer, seq)) {
            Some((at, w)) if now < at.saturating_add(*w) => return false,
            Some((_, w)) => (w.saturating_mul(2).min(cap), false),
            None => (base, what == BatchAnswer::Certificate),
        };
        if !first {
            let cost = i64::try_from(cost).unwrap_or(i64::MAX);
            let c = self.retransmit.repeat_credit.entry(peer).or_default();
            if c.credit > 0 {
                c.credit = c.credit.saturating_sub(cost);
            } else if c
                .floor_at
                .is_none_or(|at| now >= at.saturating_add(cap) || now < at)
            {
                c.floor_at = Some(now);
                self.metrics.inc("repeat_beyond_credit");
            } else {
                self.metrics.inc("repeat_credit_held");
                return false;
            }
        }
        self.retransmit
            .have_batch_sent
            .insert((peer, seq), (now, window));
        true
    }

    /// About the wire bytes of a batch-carrying answer for `batch`.
    pub(super) fn answer_bytes(&self, batch: &Batch) -> u64 {
        self.answer_bytes_of(batch.wire_bytes())
    }

    /// About the wire bytes of a batch-carrying answer for a batch of `batch_bytes`.
    fn answer_bytes_of(&self, batch_bytes: u64) -> u64 {
        batch_bytes.saturating_add(CERT_BYTES_PER_REPLICA.saturating_mul(u64::from(self.cfg.n)))
    }

    /// A batch of `batch_bytes` executed: every peer's repeat credit grows by what answering
    /// with it costs, up to a cap of four maximal messages (credit is earned by the stream, so
    /// a peer's repeats total at most about the stream; the cap only bounds a burst).
    pub(super) fn earn_repeat_credit(&mut self, batch_bytes: u64) {
        let earned = i64::try_from(self.answer_bytes_of(batch_bytes)).unwrap_or(i64::MAX);
        let cap = i64::try_from(self.cfg.max_message_bytes)
            .unwrap_or(i64::MAX)
            .saturating_mul(4);
        for peer in (0..self.cfg.n).filter(|p| *p != self.cfg.id) {
            let c = self.retransmit.repeat_credit.entry(peer).or_default();
            c.credit = c.credit.saturating_add(earned).min(cap);
        }
    }
}
