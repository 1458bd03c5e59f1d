//! Fetching batches by digest after a view change (issue 9 defect 4).
//!
//! View changes and new-views name prepared batches by digest only ([`PreparedProof`]), so
//! their size does not grow with batch sizes and they stay deliverable at every admissible
//! batch size. A replica entering a new view that orders a batch it does not hold (neither as
//! its log entry nor as the batch of its own prepared certificate) records it as missing and
//! asks for it with a [`Body::BatchFetch`] — from one replica at a time among those that
//! prepared it (the certificate's signers and the primary of its view), the next one every
//! fetch interval (`view_change_timeout_ms / 8`) until it arrives. It still votes for the
//! entry (votes are about the digest), but commits and executes it only once the batch is
//! there. A [`Body::BatchData`] is accepted only when the batch hashes to the digest asked for.
//!
//! Bounds: a fetch names at most [`MAX_FETCH_BATCHES`] batches; a replica serves one peer at
//! most [`SERVE_PER_WINDOW`] batches per half view-change timeout (the rest of a fetch is
//! dropped and counted), and each batch to one peer at most once per view (a repeat is
//! refused: the fetcher asks another source), so a peer gets at most a log window of batches
//! per view however often it asks (the simulator's `amplify` strategy measures it).

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, warn};

use super::{Dest, Replica};
use crate::crypto::Digest32;
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Batch, Body, MAX_FETCH_BATCHES, PreparedProof};

/// Most batches a replica serves one peer per fetch interval.
pub const SERVE_PER_WINDOW: u32 = MAX_FETCH_BATCHES as u32;

/// Batches a new view ordered by digest: fetching the missing ones, serving them (see `batch_fetch`).
#[derive(Debug)]
pub(super) struct FetchState {
    /// Batches a new view ordered (by digest) that this replica does not hold: seq ->
    /// (digest, replicas that prepared it, to ask in turn). See `batch_fetch`.
    pub(super) missing: BTreeMap<u64, (Digest32, Vec<NodeId>)>,
    /// When the missing batches are asked for again (from the next source).
    pub(super) deadline: Option<Millis>,
    /// Fetch rounds so far (picks the source of each missing batch).
    pub(super) round: u64,
    /// Per peer: start of its current serving window and batches served in it (rate limit).
    pub(super) served: BTreeMap<NodeId, (Millis, u32)>,
    /// `(peer, seq)` batches served in the current view: each at most once per view.
    pub(super) served_seqs: BTreeSet<(NodeId, u64)>,
    /// The batches the current view's new view ordered by digest (seq -> digest): the only
    /// ones a `BatchFetch` is served for (a replica lacks a batch it must fetch only there).
    pub(super) new_view_digests: BTreeMap<u64, Digest32>,
}

impl Replica {
    /// The fetch interval: how long a source has to answer before the next one is asked,
    /// and the window of the per-peer serving limit.
    fn fetch_interval(&self) -> Millis {
        (self.cfg.view_change_timeout_ms / 8).max(1)
    }

    /// Asks for every missing batch (one source per batch, rotating per round) and arms the
    /// fetch timer; clears it when nothing is missing.
    pub(super) fn fetch_missing_batches(&mut self, now: Millis, out: &mut Vec<Output>) {
        // Anything executed or below the window meanwhile is no longer needed.
        let floor = self.last_executed.max(self.checkpoints.stable.seq);
        self.fetch.missing = self.fetch.missing.split_off(&(floor + 1));
        if self.fetch.missing.is_empty() {
            self.fetch.deadline = None;
            return;
        }
        let round = self.fetch.round;
        self.fetch.round = self.fetch.round.saturating_add(1);
        let n = u64::from(self.cfg.n);
        let id = self.cfg.id;
        let mut by_source: BTreeMap<NodeId, Vec<(u64, Digest32)>> = BTreeMap::new();
        for (seq, (digest, holders)) in &self.fetch.missing {
            // Holders first (they prepared it); then any other replica, which may hold it
            // as a commit certificate's batch or a later view's entry.
            let source = if holders.is_empty() || round >= holders.len() as u64 {
                let k = (round + seq) % n.max(1);
                let s = NodeId::try_from(k).unwrap_or(0);
                if s == id { (s + 1) % self.cfg.n } else { s }
            } else {
                holders[((round + seq) % holders.len() as u64) as usize]
            };
            by_source.entry(source).or_default().push((*seq, *digest));
        }
        for (source, wanted) in by_source {
            for chunk in wanted.chunks(MAX_FETCH_BATCHES) {
                self.metrics.inc("batch_fetch_sent");
                self.send(
                    Body::BatchFetch {
                        wanted: chunk.to_vec(),
                    },
                    Dest::One(source),
                    out,
                );
            }
        }
        self.fetch.deadline = Some(now.saturating_add(self.fetch_interval()));
    }

    /// The fetch timer fired: ask the next sources.
    pub(super) fn on_fetch_timer(&mut self, now: Millis, out: &mut Vec<Output>) {
        self.fetch.deadline = None;
        if self.in_view_change {
            // The next new-view decides anew what is missing.
            return;
        }
        self.metrics.inc("batch_fetch_retries");
        self.fetch_missing_batches(now, out);
    }

    /// The batch `seq` with `digest` as this replica holds it, if it does: its log entry's or
    /// its prepared certificate's.
    fn batch_for(&self, seq: u64, digest: &Digest32) -> Option<&Batch> {
        let e = self.log.get(&seq)?;
        if e.digest.as_ref() == Some(digest)
            && let Some(b) = &e.batch
        {
            return Some(b);
        }
        match (&e.proof, &e.proof_batch) {
            (Some(PreparedProof { digest: d, .. }), Some(b)) if d == digest => Some(b),
            _ => None,
        }
    }

    /// A peer's [`Body::BatchFetch`]: send the batches it names that we hold, within its
    /// serving budget.
    pub(super) fn on_batch_fetch(
        &mut self,
        now: Millis,
        from: NodeId,
        wanted: Vec<(u64, Digest32)>,
        out: &mut Vec<Output>,
    ) {
        if wanted.len() > MAX_FETCH_BATCHES {
            return self.drop_msg("drop_oversized_batch_fetch", Some(from));
        }
        // The serving window is half a view-change timeout (4 fetch intervals).
        let interval = self.fetch_interval().saturating_mul(4);
        let (start, served) = self.fetch.served.get(&from).copied().unwrap_or((now, 0));
        let (start, mut served) = if now >= start.saturating_add(interval) {
            (now, 0)
        } else {
            (start, served)
        };
        let mut send = Vec::new();
        for (seq, digest) in &wanted {
            if served >= SERVE_PER_WINDOW {
                self.metrics.inc("batch_fetch_rate_limited");
                break;
            }
            if self.fetch.new_view_digests.get(seq) != Some(digest) {
                // Only a batch the current view's new view ordered by digest is fetched by
                // an honest replica (amplification bound: the `amplify` strategy named the
                // newest log batches and drew 8 a second, ~8.9 MB in 40 s).
                self.metrics.inc("batch_fetch_not_new_view");
                debug!(
                    replica = self.cfg.id,
                    peer = from,
                    seq,
                    "batch fetch refused: not ordered by digest in this view's new view"
                );
                continue;
            }
            if self.fetch.served_seqs.contains(&(from, *seq)) {
                // Served to this peer in this view already (it asks another source next).
                self.metrics.inc("batch_fetch_repeat");
                continue;
            }
            match self.batch_for(*seq, digest).cloned() {
                Some(b) => {
                    self.fetch.served_seqs.insert((from, *seq));
                    served += 1;
                    send.push((*seq, b));
                }
                None => self.metrics.inc("batch_fetch_unknown"),
            }
        }
        self.fetch.served.insert(from, (start, served));
        for (seq, batch) in send {
            self.metrics.inc("batch_fetch_served");
            self.send(Body::BatchData { seq, batch }, Dest::One(from), out);
        }
    }

    /// A [`Body::BatchData`]: take it when it is a batch we are missing, with that digest.
    pub(super) fn on_batch_data(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        batch: Batch,
        out: &mut Vec<Output>,
    ) {
        let Some((want, _)) = self.fetch.missing.get(&seq) else {
            return self.drop_msg("drop_unwanted_batch", Some(from));
        };
        let want = *want;
        match batch.digest(self.cfg.signatures) {
            Ok(d) if d == want => {}
            _ => {
                warn!(
                    replica = self.cfg.id,
                    from, seq, "fetched batch does not match its digest"
                );
                return self.drop_msg("drop_batch_digest_mismatch", Some(from));
            }
        }
        self.fetch.missing.remove(&seq);
        if self.fetch.missing.is_empty() {
            self.fetch.deadline = None;
        }
        let Some(e) = self.log.get_mut(&seq) else {
            return;
        };
        if e.digest != Some(want) || e.batch.is_some() {
            return;
        }
        debug!(replica = self.cfg.id, from, seq, "fetched a batch");
        self.metrics.inc("batch_fetched");
        for r in &batch.requests {
            self.clients
                .mark_proposed(r.request.client, r.request.req_seq, seq);
        }
        let batch = std::sync::Arc::new(batch);
        if e.proof.as_ref().is_some_and(|p| p.digest == want) && e.proof_batch.is_none() {
            e.proof_batch = Some(std::sync::Arc::clone(&batch));
        }
        e.batch = Some(batch);
        self.store_entry(seq, out);
        self.progress(now, seq, out);
        self.execute_ready(now, out);
    }
}
