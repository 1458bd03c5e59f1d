//! State transfer: a replica behind a stable checkpoint pulls its snapshot in verified chunks,
//! only those whose content it does not already hold.
//!
//! The target is a checkpoint proof (2f+1 signed checkpoint messages with one digest). That
//! digest commits to the list of digests of the snapshot's content-defined chunks
//! ([`crate::protocol::chunks`]): a source first sends the list ([`Body::StateMeta`], checked
//! against the certified digest), then each chunk, verified on arrival against its leaf, from
//! whichever source sent it. Chunks whose content the receiver already holds (in its stable
//! snapshot, its newest own checkpoint, or chunks of a transfer it abandoned) are taken
//! locally: a replica that falls behind again costs its sources about the state that changed,
//! not the whole snapshot (the campaign's D/fat-view-change seed 46 found the whole-snapshot
//! cost: a replica that never keeps up pulled ~100 MB in 20 s). The receiver pulls a bounded
//! window of missing chunks at a time from every usable source; every verified chunk extends
//! the source's deadline; a source that times out or serves a bad chunk is replaced by the
//! next signer of the proof and the chunks already verified are kept. A source serves at most
//! `state_window` chunks per request and `state_chunks_per_peer` chunks per peer per
//! `state_rate_interval_ms`, so a request costs a bounded number of bytes. The assembled
//! snapshot is decoded and installed with its reserved pages (whose own digest is checked
//! again), the clients table and the agreed time (reloaded from the time page).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ccron::ReservedPages;
use tracing::{info, warn};

use super::{Dest, KEY_CHECKPOINT, Replica, Snapshot, StoredCheckpoint, TimeRecord};
use crate::crypto::{Digest32, Signatures};
use crate::node::{Millis, NodeId, Output};
use crate::protocol::chunks::{self, ChunkList};
use crate::protocol::{Body, CheckpointProof, codec};

/// An in-progress state transfer.
#[derive(Debug, Clone)]
pub(super) struct Transfer {
    /// The certified checkpoint to reach.
    pub(super) target: CheckpointProof,
    sources: Vec<NodeId>,
    /// The source asked for the meta (rotates on timeouts).
    source_idx: usize,
    meta: Option<TransferMeta>,
    /// Verified chunks (kept across source rotation).
    chunks: BTreeMap<u32, Vec<u8>>,
    /// Chunks of an abandoned transfer, by leaf: reused when the new target holds them.
    carry: HashMap<Digest32, Vec<u8>>,
    /// Per source: chunks asked of it and not yet received, and when it is given up unless
    /// it makes progress. Once the meta is known every usable source gets its own disjoint
    /// window, so a transfer runs at the sum of the sources' rate limits.
    outstanding: BTreeMap<NodeId, (BTreeSet<u32>, Millis)>,
    /// Sources that timed out or served a bad chunk in this transfer (used again only when
    /// every source is in here).
    excluded: BTreeSet<NodeId>,
    /// A newer certified checkpoint seen while this transfer was making progress: pursued
    /// once this one installs (or when no source serves this one any more).
    newer: Option<CheckpointProof>,
    /// The earliest deadline of `outstanding` (the replica's timer).
    pub(super) deadline_ms: Millis,
}

impl Transfer {
    /// The verified chunks (and earlier carry) by leaf, for the transfer that replaces this
    /// one.
    fn into_carry(self, scheme: Signatures) -> HashMap<Digest32, Vec<u8>> {
        let mut carry = self.carry;
        for data in self.chunks.into_values() {
            carry.insert(chunks::leaf(scheme, &data), data);
        }
        carry
    }

    fn refresh_deadline(&mut self, now: Millis, timeout: Millis) {
        self.deadline_ms = self
            .outstanding
            .values()
            .map(|(_, d)| *d)
            .min()
            .unwrap_or(now.saturating_add(timeout));
    }
}

/// The verified description of the snapshot being fetched.
#[derive(Debug, Clone)]
struct TransferMeta {
    proof: CheckpointProof,
    total_len: u64,
    leaves: Vec<Digest32>,
    /// The indices of every leaf that occurs more than once (equal content: fetched once).
    repeated: BTreeMap<Digest32, Vec<u32>>,
}

impl TransferMeta {
    fn new(proof: CheckpointProof, total_len: u64, leaves: Vec<Digest32>) -> Self {
        let mut at: BTreeMap<Digest32, Vec<u32>> = BTreeMap::new();
        for (i, l) in leaves.iter().enumerate() {
            at.entry(*l).or_default().push(i as u32);
        }
        at.retain(|_, v| v.len() > 1);
        Self {
            proof,
            total_len,
            leaves,
            repeated: at,
        }
    }

    fn chunks(&self) -> u32 {
        u32::try_from(self.leaves.len()).unwrap_or(u32::MAX)
    }

    /// The other indices with the same content as `index`.
    fn same_as(&self, index: u32) -> &[u32] {
        self.leaves
            .get(index as usize)
            .and_then(|l| self.repeated.get(l))
            .map_or(&[], Vec::as_slice)
    }
}

/// Most (peer, content) entries [`RepeatHolds`] keeps; beyond it a chunk is served without
/// being remembered (never withheld for want of memory).
const REPEAT_HOLDS_MAX: usize = 65_536;

/// Growth of a repeat window per re-send.
const REPEAT_GROWTH: Millis = 4;

/// What a source remembers of the state transfer data it served each peer, by content (a
/// chunk by its leaf digest, a meta by its checkpoint digest): the same content goes to the
/// same peer again only after a repeat window, which starts at `state_transfer_timeout_ms`
/// (a requester's timeout for one source: a chunk lost in transit is asked again after it)
/// and grows fourfold per re-send up to `8 * view_change_timeout_max_ms`.
///
/// An honest receiver keeps every chunk it verified (across source rotation, in an abandoned
/// transfer's carry, in its installed snapshot), so it asks a source for the same content
/// again only after a loss or a crash in the middle of a transfer; then the repeat window, or
/// another source that has not served it that chunk, answers. A peer that asks for the whole
/// state again and again (the `state-request-flood` strategy draws it at every checkpoint
/// vote) gets each chunk about `1 + log4(elapsed / timeout)` times, not once per request: the
/// amplification checker's state part found ~10 times the state per honest replica in 20 s.
#[derive(Debug, Clone, Default)]
pub(super) struct RepeatHolds {
    sent: BTreeMap<(NodeId, Digest32), (Millis, Millis)>,
}

impl RepeatHolds {
    /// Whether `content` may go to `peer` now; if so, records it and grows its window.
    pub(super) fn due(
        &mut self,
        now: Millis,
        peer: NodeId,
        content: Digest32,
        base: Millis,
        cap: Millis,
    ) -> bool {
        let base = base.max(1);
        let cap = cap.max(base);
        let window = match self.sent.get(&(peer, content)) {
            Some((at, w)) if now < at.saturating_add(*w) && now >= *at => return false,
            Some((at, w)) if now < at.saturating_add(cap.saturating_mul(2)) => {
                w.saturating_mul(REPEAT_GROWTH).min(cap)
            }
            _ => base,
        };
        if self.sent.len() >= REPEAT_HOLDS_MAX {
            // Forget what no longer holds anything back (long expired), else serve unrecorded.
            self.sent
                .retain(|_, (at, _)| now < at.saturating_add(cap.saturating_mul(2)) && now >= *at);
            if self.sent.len() >= REPEAT_HOLDS_MAX {
                return true;
            }
        }
        self.sent.insert((peer, content), (now, window));
        true
    }

    /// Entries kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.sent.len()
    }
}

/// What a source keeps to serve state transfers.
#[derive(Debug, Clone, Default)]
pub(super) struct Serving {
    /// The chunk list of the stable snapshot, by checkpoint digest, and whether it was
    /// served since the last stable checkpoint.
    tree: Option<(Digest32, ChunkList, bool)>,
    /// The previous stable snapshot, kept while peers still fetch it: a transfer that takes
    /// longer than a checkpoint interval (large state) can finish instead of restarting at
    /// every new stable checkpoint. At most one (bounded by `max_snapshot_bytes`).
    pinned: Option<Pinned>,
    /// Per peer: start of its current rate interval and chunks served in it.
    budget: BTreeMap<NodeId, (Millis, u32)>,
    /// The chunk list of the newest own (not yet stable) checkpoint served, by its digest:
    /// each request used to cut and hash the snapshot again (up to `max_snapshot_bytes`).
    own_tree: Option<(Digest32, ChunkList)>,
}

/// A retired stable snapshot still being served.
#[derive(Debug, Clone)]
struct Pinned {
    proof: CheckpointProof,
    bytes: Vec<u8>,
    tree: ChunkList,
    /// Served since the last stable checkpoint.
    used: bool,
}

impl Serving {
    /// The stable checkpoint moves on from `old` (`bytes`): keep it pinned if peers fetched
    /// it since the previous stable checkpoint; keep the pinned one only while it is used.
    pub(super) fn retire(&mut self, old: CheckpointProof, bytes: Vec<u8>) {
        match self.tree.take() {
            Some((d, tree, true)) if d == old.digest && old.seq > 0 => {
                self.pinned = Some(Pinned {
                    proof: old,
                    bytes,
                    tree,
                    used: false,
                });
            }
            _ => match &mut self.pinned {
                Some(p) if p.used => p.used = false,
                _ => self.pinned = None,
            },
        }
    }
}

/// State transfer, as a receiver (behind a certified checkpoint, the transfer running) and as
/// a source (what it serves, to whom).
#[derive(Debug)]
pub(super) struct StateTransferState {
    /// A certified checkpoint above this replica's executed seq, and when the grace period
    /// before it pulls the snapshot ends.
    pub(super) behind_since: Option<(Millis, CheckpointProof)>,
    /// The transfer in progress.
    pub(super) transfer: Option<Transfer>,
    /// What this replica serves to state-transfer receivers (chunk lists, per-peer rate).
    pub(super) serving: Serving,
    /// Per (peer, content): state transfer data already served (see [`RepeatHolds`]).
    pub(super) repeats: RepeatHolds,
}

impl Replica {
    pub(super) fn start_transfer(
        &mut self,
        now: Millis,
        proof: CheckpointProof,
        out: &mut Vec<Output>,
    ) {
        if let Some(t) = &mut self.state_transfer.transfer {
            if t.target.seq >= proof.seq {
                return;
            }
            if t.meta.is_some() && !t.chunks.is_empty() {
                // Making progress: finish this one first (its sources keep it pinned), then
                // pursue the newer checkpoint.
                if t.newer.as_ref().is_none_or(|n| n.seq < proof.seq) {
                    t.newer = Some(proof);
                }
                self.metrics.inc("state_transfer_newer_deferred");
                return;
            }
        }
        let mut sources: Vec<NodeId> = proof
            .sigs
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| *n != self.cfg.id)
            .collect();
        if sources.is_empty() {
            sources = (0..self.cfg.n).filter(|n| *n != self.cfg.id).collect();
        }
        info!(
            replica = self.cfg.id,
            seq = proof.seq,
            executed = self.last_executed,
            "state transfer"
        );
        self.metrics.inc("state_transfers_started");
        let source_idx = self.cfg.id as usize % sources.len();
        self.state_transfer.transfer = Some(Transfer {
            target: proof,
            sources,
            source_idx,
            meta: None,
            chunks: BTreeMap::new(),
            carry: HashMap::new(),
            outstanding: BTreeMap::new(),
            excluded: BTreeSet::new(),
            newer: None,
            deadline_ms: now.saturating_add(self.cfg.state_transfer_timeout_ms),
        });
        self.request_state(now, out);
    }

    /// Before the meta is known, asks the meta source for it and a first window; after,
    /// gives every idle usable source its own window of missing chunks not yet asked for.
    fn request_state(&mut self, now: Millis, out: &mut Vec<Output>) {
        let window = self.cfg.state_window as usize;
        let timeout = self.cfg.state_transfer_timeout_ms;
        let Some(t) = &mut self.state_transfer.transfer else {
            return;
        };
        let mut requests: Vec<(NodeId, bool, Vec<u32>)> = Vec::new();
        match &t.meta {
            None => {
                let Some(to) = t.sources.get(t.source_idx).copied() else {
                    return;
                };
                if !t.outstanding.contains_key(&to) {
                    // The meta alone: which chunks to fetch depends on what we hold.
                    requests.push((to, true, Vec::new()));
                }
            }
            Some(meta) => {
                if t.excluded.len() >= t.sources.len() {
                    t.excluded.clear();
                }
                let asked: BTreeSet<u32> = t
                    .outstanding
                    .values()
                    .flat_map(|(s, _)| s.iter().copied())
                    .collect();
                // One index per distinct content: a chunk fills every index with its leaf.
                let mut leaves_asked: BTreeSet<Digest32> = asked
                    .iter()
                    .filter_map(|i| meta.leaves.get(*i as usize).copied())
                    .collect();
                let mut missing = (0..meta.chunks())
                    .filter(|i| !t.chunks.contains_key(i) && !asked.contains(i))
                    .filter(|i| {
                        meta.same_as(*i).is_empty()
                            || meta
                                .leaves
                                .get(*i as usize)
                                .is_some_and(|l| leaves_asked.insert(*l))
                    })
                    .peekable();
                let k = t.sources.len();
                for j in 0..k {
                    if missing.peek().is_none() {
                        break;
                    }
                    let to = t.sources[(t.source_idx + j) % k];
                    if t.outstanding.contains_key(&to) || t.excluded.contains(&to) {
                        continue;
                    }
                    let indices: Vec<u32> = missing.by_ref().take(window).collect();
                    requests.push((to, false, indices));
                }
            }
        }
        let seq = t.target.seq;
        for (to, _, indices) in &requests {
            t.outstanding.insert(
                *to,
                (
                    indices.iter().copied().collect(),
                    now.saturating_add(timeout),
                ),
            );
        }
        t.refresh_deadline(now, timeout);
        for (to, meta, indices) in requests {
            self.metrics.inc("state_requests_sent");
            self.send(
                Body::StateRequest { seq, meta, indices },
                Dest::One(to),
                out,
            );
        }
    }

    /// The transfer timer: every source past its deadline is given up (its chunks are asked
    /// of others; verified chunks are kept). When no source serves the target any more and
    /// a newer checkpoint is known, the transfer moves to it.
    pub(super) fn on_transfer_timeout(&mut self, now: Millis, out: &mut Vec<Output>) {
        let timeout = self.cfg.state_transfer_timeout_ms;
        let mut restart = None;
        if let Some(t) = &mut self.state_transfer.transfer {
            let late: Vec<NodeId> = t
                .outstanding
                .iter()
                .filter(|(_, (_, d))| *d <= now)
                .map(|(n, _)| *n)
                .collect();
            for n in &late {
                t.outstanding.remove(n);
                t.excluded.insert(*n);
            }
            if t.meta.is_none() || late.is_empty() {
                t.source_idx = (t.source_idx + 1) % t.sources.len().max(1);
            }
            if t.excluded.len() >= t.sources.len() && t.outstanding.is_empty() {
                restart = t.newer.take();
            }
            t.refresh_deadline(now, timeout);
            let kept = t.chunks.len() as u64;
            self.metrics.inc("state_source_rotations");
            self.metrics.add("state_chunks_kept_on_rotation", kept);
        }
        if let Some(proof) = restart {
            let scheme = self.cfg.signatures;
            let carry = self
                .state_transfer
                .transfer
                .take()
                .map(|t| t.into_carry(scheme));
            self.start_transfer(now, proof, out);
            if let (Some(t), Some(carry)) = (&mut self.state_transfer.transfer, carry) {
                t.carry = carry;
            }
            return;
        }
        self.request_state(now, out);
    }

    pub(super) fn on_state_request(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        want_meta: bool,
        indices: Vec<u32>,
        out: &mut Vec<Output>,
    ) {
        let (chunk_bytes, window) = (self.cfg.chunk_bytes, self.cfg.state_window);
        let (per_peer, interval) = (
            self.cfg.state_chunks_per_peer,
            self.cfg.state_rate_interval_ms,
        );
        // The snapshot asked for: the stable one, the pinned previous one, our own
        // not-yet-stable checkpoint (the requester holds its proof), else a newer stable one
        // (announced by its meta: the requester decides whether to switch).
        #[derive(Clone, Copy)]
        enum Src {
            Stable,
            Pinned,
            Own,
        }
        let src = if self.checkpoints.stable.seq == seq && seq > 0 {
            Src::Stable
        } else if self
            .state_transfer
            .serving
            .pinned
            .as_ref()
            .is_some_and(|p| p.proof.seq == seq)
        {
            Src::Pinned
        } else if self.checkpoints.own.contains_key(&seq) {
            Src::Own
        } else if self.checkpoints.stable.seq > seq && self.checkpoints.stable.seq > 0 {
            Src::Stable
        } else {
            return self.drop_msg("drop_state_unavailable", Some(from));
        };
        let budget = self
            .state_transfer
            .serving
            .budget
            .entry(from)
            .or_insert((now, 0));
        if now < budget.0 || now >= budget.0.saturating_add(interval) {
            *budget = (now, 0);
        }
        let allowed = per_peer.saturating_sub(budget.1).min(window);
        if allowed == 0 {
            self.metrics.inc("state_rate_limited");
            return self.drop_msg("drop_state_rate_limited", Some(from));
        }
        let (proof, bytes, tree): (CheckpointProof, &[u8], &ChunkList) = match src {
            Src::Stable => {
                if self
                    .state_transfer
                    .serving
                    .tree
                    .as_ref()
                    .is_none_or(|(d, _, _)| *d != self.checkpoints.stable.digest)
                {
                    self.state_transfer.serving.tree = Some((
                        self.checkpoints.stable.digest,
                        ChunkList::new(
                            self.cfg.signatures,
                            &self.checkpoints.stable_snapshot,
                            chunk_bytes,
                        ),
                        false,
                    ));
                }
                let Some((_, tree, used)) = &mut self.state_transfer.serving.tree else {
                    return;
                };
                *used = true;
                (
                    self.checkpoints.stable.clone(),
                    &self.checkpoints.stable_snapshot[..],
                    &*tree,
                )
            }
            Src::Pinned => {
                let Some(p) = &mut self.state_transfer.serving.pinned else {
                    return;
                };
                p.used = true;
                (p.proof.clone(), &p.bytes[..], &p.tree)
            }
            Src::Own => {
                let Some((d, b)) = self.checkpoints.own.get(&seq) else {
                    return;
                };
                // Not stable here (a small window before stability): its list is cached
                // apart, one checkpoint at a time.
                let proof = CheckpointProof {
                    seq,
                    digest: *d,
                    sigs: Vec::new(),
                };
                if self
                    .state_transfer
                    .serving
                    .own_tree
                    .as_ref()
                    .is_none_or(|(od, _)| od != d)
                {
                    self.state_transfer.serving.own_tree =
                        Some((*d, ChunkList::new(self.cfg.signatures, b, chunk_bytes)));
                }
                let Some((_, own_tree)) = &self.state_transfer.serving.own_tree else {
                    return;
                };
                (proof, &b[..], own_tree)
            }
        };
        let want_meta = want_meta || proof.seq != seq;
        let mut held = 0;
        let allowed = self.strategy.serve_limit(allowed);
        let bodies = Self::state_bodies(
            &self.cfg,
            (now, from, &mut self.state_transfer.repeats, &mut held),
            &proof,
            bytes,
            tree,
            want_meta,
            indices,
            allowed,
        );
        self.send_state_bodies(from, bodies, held, out);
    }

    /// Sends what [`Self::state_bodies`] built and charges the peer's budget (`held`: what
    /// the repeat holds kept back).
    fn send_state_bodies(
        &mut self,
        from: NodeId,
        bodies: Vec<Body>,
        held: u64,
        out: &mut Vec<Output>,
    ) {
        if held > 0 {
            self.metrics.add("state_repeat_held", held);
        }
        let served = bodies
            .iter()
            .filter(|b| matches!(b, Body::StateChunk { .. }))
            .count() as u32;
        if let Some(b) = self.state_transfer.serving.budget.get_mut(&from) {
            b.1 = b.1.saturating_add(served);
        }
        self.metrics.add("state_chunks_served", u64::from(served));
        self.metrics.inc("state_served");
        for body in bodies {
            self.send(body, Dest::One(from), out);
        }
    }

    /// The meta (if wanted) and at most `allowed` of the chunks `indices` of `bytes`, less
    /// what `holds` withholds from `peer` for now (counted in `held`).
    #[allow(clippy::too_many_arguments)]
    fn state_bodies(
        cfg: &super::ReplicaConfig,
        (now, peer, holds, held): (Millis, NodeId, &mut RepeatHolds, &mut u64),
        proof: &CheckpointProof,
        bytes: &[u8],
        tree: &ChunkList,
        want_meta: bool,
        indices: Vec<u32>,
        allowed: u32,
    ) -> Vec<Body> {
        let total_len = bytes.len() as u64;
        let count = tree.count();
        let (base, cap) = (
            cfg.state_transfer_timeout_ms,
            cfg.view_change_timeout_max_ms.saturating_mul(8),
        );
        let mut bodies = Vec::new();
        let want_meta = want_meta && {
            let due = holds.due(now, peer, proof.digest, base, cap);
            *held += u64::from(!due);
            due
        };
        if want_meta {
            bodies.push(Body::StateMeta {
                proof: proof.clone(),
                total_len,
                leaves: tree.leaves().to_vec(),
            });
        }
        let wanted: BTreeSet<u32> = indices.into_iter().filter(|i| *i < count).collect();
        let mut served = 0u32;
        for index in wanted {
            if served >= allowed {
                break;
            }
            let (Some(leaf), Some(chunk)) =
                (tree.leaves().get(index as usize), tree.chunk(bytes, index))
            else {
                continue;
            };
            if !holds.due(now, peer, *leaf, base, cap) {
                *held += 1;
                continue;
            }
            served += 1;
            bodies.push(Body::StateChunk {
                seq: proof.seq,
                index,
                data: chunk.to_vec(),
            });
        }
        bodies
    }

    pub(super) fn on_state_meta(
        &mut self,
        now: Millis,
        from: NodeId,
        proof: CheckpointProof,
        total_len: u64,
        leaves: Vec<Digest32>,
        out: &mut Vec<Output>,
    ) {
        let chunk_bytes = self.cfg.chunk_bytes;
        let Some(t) = &self.state_transfer.transfer else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        if !t.sources.contains(&from) {
            return self.drop_msg("drop_unexpected_state", Some(from));
        }
        let sane =
            usize::try_from(total_len).is_ok_and(|l| {
                l <= self.cfg.max_snapshot_bytes
                    && !leaves.is_empty()
                    && leaves.len() <= chunks::max_chunks(l, chunk_bytes)
            }) && chunks::digest_from_leaves(self.cfg.signatures, total_len, chunk_bytes, &leaves)
                == proof.digest;
        let valid = sane
            && if proof.seq == t.target.seq {
                proof.digest == t.target.digest
            } else {
                proof.seq > t.target.seq && self.verify_checkpoint_proof(&proof)
            };
        if !valid {
            return self.drop_msg("drop_invalid_state_meta", Some(from));
        }
        if t.meta.as_ref().is_some_and(|m| m.proof.seq >= proof.seq) {
            // Already known (e.g. from an earlier source): keep the chunks we have.
            self.metrics.inc("late_state_meta");
            return;
        }
        let timeout = self.cfg.state_transfer_timeout_ms;
        if t.meta.is_some() && !t.chunks.is_empty() {
            // A source moved on to a newer checkpoint while we are making progress on ours:
            // remember it, keep going with the others.
            let newer = proof;
            if let Some(t) = &mut self.state_transfer.transfer
                && t.newer.as_ref().is_none_or(|n| n.seq < newer.seq)
            {
                t.newer = Some(newer);
            }
            self.metrics.inc("state_transfer_newer_deferred");
            return;
        }
        // A source serving a checkpoint that is not yet stable on its side sends a proof
        // without signatures: keep our certified target instead, or the installed checkpoint
        // (and every view change carrying it) would fail verification at every other replica.
        let proof = if proof.seq == t.target.seq {
            t.target.clone()
        } else {
            proof
        };
        let local = self.local_chunks(&leaves);
        let Some(t) = &mut self.state_transfer.transfer else {
            return;
        };
        if proof.seq > t.target.seq {
            t.target = proof.clone();
            t.outstanding.clear();
            t.excluded.clear();
        }
        let chunk_count = leaves.len() as u32;
        t.chunks = local;
        let reused = t.chunks.len() as u64;
        let reused_bytes: u64 = t.chunks.values().map(|c| c.len() as u64).sum();
        t.meta = Some(TransferMeta::new(proof, total_len, leaves));
        let have = &t.chunks;
        for (set, d) in t.outstanding.values_mut() {
            set.retain(|i| *i < chunk_count && !have.contains_key(i));
            *d = now.saturating_add(timeout);
        }
        t.outstanding.retain(|_, (set, _)| !set.is_empty());
        t.refresh_deadline(now, timeout);
        self.metrics.add("state_chunks_reused", reused);
        self.metrics.add("state_bytes_reused", reused_bytes);
        if reused >= u64::from(chunk_count) {
            return self.finish_transfer(now, from, out);
        }
        self.request_state(now, out);
    }

    /// The chunks of a snapshot with `leaves` that we hold already, by index: from our
    /// stable snapshot, our newest own checkpoint and the carry of an abandoned transfer.
    fn local_chunks(&self, leaves: &[Digest32]) -> BTreeMap<u32, Vec<u8>> {
        let chunk_bytes = self.cfg.chunk_bytes;
        let mut have: HashMap<Digest32, &[u8]> = HashMap::new();
        // The stable snapshot's list, from the serving cache when it is built.
        let built;
        let stable = match &self.state_transfer.serving.tree {
            Some((d, list, _)) if *d == self.checkpoints.stable.digest => list,
            _ => {
                built = ChunkList::new(
                    self.cfg.signatures,
                    &self.checkpoints.stable_snapshot,
                    chunk_bytes,
                );
                &built
            }
        };
        have.extend(stable.by_leaf(&self.checkpoints.stable_snapshot));
        let own = self
            .checkpoints
            .own
            .values()
            .next_back()
            .map(|(_, b)| (ChunkList::new(self.cfg.signatures, b, chunk_bytes), b));
        if let Some((list, b)) = &own {
            have.extend(list.by_leaf(b));
        }
        if let Some(t) = &self.state_transfer.transfer {
            have.extend(t.carry.iter().map(|(l, d)| (*l, d.as_slice())));
        }
        leaves
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let i = u32::try_from(i).ok()?;
                have.get(l).map(|d| (i, d.to_vec()))
            })
            .collect()
    }

    pub(super) fn on_state_chunk(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        index: u32,
        data: Vec<u8>,
        out: &mut Vec<Output>,
    ) {
        let chunk_bytes = self.cfg.chunk_bytes;
        let timeout = self.cfg.state_transfer_timeout_ms;
        let Some(t) = &mut self.state_transfer.transfer else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        let Some(meta) = &t.meta else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        if !t.sources.contains(&from) || meta.proof.seq != seq || index >= meta.chunks() {
            return self.drop_msg("drop_unexpected_state", Some(from));
        }
        if t.chunks.contains_key(&index) {
            self.metrics.inc("late_state_chunk");
            return;
        }
        if !chunks::verify_chunk(self.cfg.signatures, &meta.leaves, chunk_bytes, index, &data) {
            warn!(
                replica = self.cfg.id,
                from, seq, index, "state chunk fails its digest"
            );
            // The source is given up for this transfer; its chunks go to the others.
            t.outstanding.remove(&from);
            t.excluded.insert(from);
            t.refresh_deadline(now, timeout);
            self.metrics.inc("state_digest_mismatch");
            self.drop_msg("drop_invalid_state_chunk", Some(from));
            self.request_state(now, out);
            return;
        }
        let chunk_count = meta.chunks();
        for j in meta.same_as(index) {
            if *j != index && !t.chunks.contains_key(j) {
                t.chunks.insert(*j, data.clone());
                for (set, _) in t.outstanding.values_mut() {
                    set.remove(j);
                }
            }
        }
        t.chunks.insert(index, data);
        for (set, _) in t.outstanding.values_mut() {
            set.remove(&index);
        }
        // Progress: the source keeps its turn.
        if let Some((_, d)) = t.outstanding.get_mut(&from) {
            *d = now.saturating_add(timeout);
        }
        let before = t.outstanding.len();
        t.outstanding.retain(|_, (set, _)| !set.is_empty());
        let window_done = t.outstanding.len() < before;
        t.refresh_deadline(now, timeout);
        let complete = t.chunks.len() >= chunk_count as usize;
        self.metrics.inc("state_chunks_received");
        if !complete {
            if window_done {
                self.request_state(now, out);
            }
            return;
        }
        self.finish_transfer(now, from, out);
    }

    /// Every chunk is here: assembles, installs and persists the snapshot, then pursues a
    /// newer checkpoint if one was deferred.
    fn finish_transfer(&mut self, now: Millis, from: NodeId, out: &mut Vec<Output>) {
        let Some(mut t) = self.state_transfer.transfer.take() else {
            return;
        };
        let Some(meta) = t.meta.clone() else {
            return;
        };
        let seq = meta.proof.seq;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.total_len).unwrap_or(0));
        for part in t.chunks.values() {
            bytes.extend_from_slice(part);
        }
        let proof = meta.proof;
        let newer = t.newer.clone();
        let installed = if bytes.len() as u64 == meta.total_len {
            self.install_snapshot(proof.clone(), bytes.clone())
        } else {
            Err("assembled snapshot length differs from its meta".into())
        };
        match installed {
            Ok(()) => {
                self.metrics.inc("state_transfers_completed");
                info!(replica = self.cfg.id, seq, "state transfer complete");
                let stored = StoredCheckpoint {
                    proof,
                    snapshot: bytes,
                };
                if let Ok(value) = codec::encode(&stored) {
                    out.push(Output::Store {
                        key: KEY_CHECKPOINT.to_vec(),
                        value: Some(value),
                    });
                    out.push(Output::Sync);
                }
                self.execute_ready(now, out);
                // A checkpoint certified while we were fetching this one: fetch it too if
                // the log cannot bridge the gap, else give the log the usual grace.
                if let Some(p) = newer.filter(|p| p.seq > self.last_executed) {
                    if p.seq >= self.last_executed + self.cfg.log_window / 2 {
                        self.start_transfer(now, p, out);
                    } else if self
                        .state_transfer
                        .behind_since
                        .as_ref()
                        .is_none_or(|(_, b)| b.seq < p.seq)
                    {
                        self.state_transfer.behind_since =
                            Some((now.saturating_add(self.cfg.state_transfer_grace_ms), p));
                    }
                }
            }
            Err(e) => {
                // Every chunk matched the certified list: 2f+1 signed a snapshot that does
                // not install. Start over from the next source, fetching everything.
                warn!(replica = self.cfg.id, from, seq, error = %e, "snapshot rejected");
                self.metrics.inc("state_snapshot_invalid");
                if self.install_failure.is_none() {
                    self.install_failure = Some(format!("state transfer at seq {seq}: {e}"));
                }
                t.source_idx = (t.source_idx + 1) % t.sources.len().max(1);
                self.state_transfer.transfer = Some(Transfer {
                    meta: None,
                    chunks: BTreeMap::new(),
                    carry: HashMap::new(),
                    outstanding: BTreeMap::new(),
                    excluded: BTreeSet::new(),
                    ..t
                });
                self.request_state(now, out);
            }
        }
    }

    /// Installs a snapshot whose bytes match `proof.digest`. Validates everything first: on
    /// error nothing changed.
    pub(super) fn install_snapshot(
        &mut self,
        proof: CheckpointProof,
        bytes: Vec<u8>,
    ) -> Result<(), String> {
        let snap: Snapshot =
            codec::decode(&bytes, self.cfg.max_snapshot_bytes).map_err(|e| e.to_string())?;
        if snap.seq != proof.seq {
            return Err("snapshot seq differs from its proof".into());
        }
        // The kernel restores everything it owns; on any refusal below it is put back.
        let backup = self
            .host
            .snapshot()
            .map_err(|e| format!("own state: {e}"))?;
        let restored = self
            .host
            .restore(&snap.host)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                // The agreed time is reloaded from its reserved page (and must agree).
                let time = match self
                    .host
                    .pages()
                    .load(self.cfg.time_page)
                    .map_err(|e| e.to_string())?
                {
                    Some(b) => {
                        Some(codec::decode::<TimeRecord>(b, b.len()).map_err(|e| e.to_string())?)
                    }
                    None => None,
                };
                if time.map(|t| t.agreed_time_ms) != self.host.last_agreed_ms() {
                    return Err("time page disagrees with the snapshot".into());
                }
                if self.host.last_height() != snap.seq {
                    return Err("the kernel's height differs from the snapshot's seq".into());
                }
                if self.state_digest() != snap.state_digest {
                    return Err("state digest mismatch".into());
                }
                Ok(())
            });
        if let Err(e) = restored {
            // Restoring a snapshot we took ourselves cannot fail.
            let _ = self.host.restore(&backup);
            return Err(e);
        }
        let seq = snap.seq;
        self.clients.restore_records(snap.clients);
        // The state limit every replica set at this checkpoint (from the same reply records).
        let limit = self.state_limit();
        self.host.set_state_limit(Some(limit));
        let settled: Vec<(u64, u64)> = self
            .clients
            .pending_requests()
            .filter(|r| self.settled(r))
            .map(|r| (r.request.client, r.request.req_seq))
            .collect();
        for (c, r) in settled {
            self.clients.remove(c, r);
        }
        self.time.last_cert_seq = snap.last_cert_seq;
        self.last_executed = seq;
        self.last_state_digest = snap.state_digest;
        self.checkpoints.stable = proof;
        self.checkpoints.stable_snapshot = bytes;
        self.log = self.log.split_off(&(seq + 1));
        self.checkpoints.own = self.checkpoints.own.split_off(&(seq + 1));
        self.checkpoints.votes = self.checkpoints.votes.split_off(&(seq + 1));
        let high = self.high_watermark();
        self.log.retain(|s, _| *s <= high);
        self.next_seq = self.next_seq.max(seq + 1);
        self.ticks.next_req = self
            .ticks
            .next_req
            .max(self.last_own_tick().saturating_add(1));
        // Every admitted tick was pending in consensus; the transfer replaced that state.
        self.ticks.throttle.on_view_change_cleared();
        if self
            .state_transfer
            .behind_since
            .as_ref()
            .is_some_and(|(_, p)| p.seq <= seq)
        {
            self.state_transfer.behind_since = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_windows_start_at_the_base_grow_fourfold_and_reset_after_a_long_pause() {
        let mut h = RepeatHolds::default();
        let (base, cap, c) = (1_000, 64_000, [7u8; 32]);
        let due = |h: &mut RepeatHolds, t| h.due(t, 3, c, base, cap);
        assert!(due(&mut h, 0));
        // Served at 0, 1 000, 5 000, 21 000, 85 000, then every 64 000.
        let mut served = Vec::new();
        for t in (1..300_000).step_by(500) {
            if due(&mut h, t) {
                served.push(t);
            }
        }
        assert_eq!(
            served,
            [1_001, 5_001, 21_001, 85_001, 149_001, 213_001, 277_001]
        );
        // Another peer, or other content, is not held back.
        assert!(h.due(277_002, 2, c, base, cap));
        assert!(h.due(277_002, 3, [8; 32], base, cap));
        // After more than twice the cap without asking, the window is the base again.
        assert!(due(&mut h, 500_000));
        assert!(!due(&mut h, 500_999));
        assert!(due(&mut h, 501_000));
        // A clock that went back does not hold content back for ever.
        assert!(due(&mut h, 10));
    }

    #[test]
    fn repeat_holds_are_bounded_and_never_withhold_for_want_of_memory() {
        let mut h = RepeatHolds::default();
        for i in 0..REPEAT_HOLDS_MAX as u64 {
            let mut c = [0u8; 32];
            c[..8].copy_from_slice(&i.to_le_bytes());
            assert!(h.due(0, 1, c, 1_000, 64_000));
        }
        assert_eq!(h.len(), REPEAT_HOLDS_MAX);
        // Full and nothing expired: served, not recorded.
        assert!(h.due(1, 1, [0xff; 32], 1_000, 64_000));
        assert!(h.due(2, 1, [0xff; 32], 1_000, 64_000));
        assert_eq!(h.len(), REPEAT_HOLDS_MAX);
        // Long after: the expired entries are forgotten and the new one is recorded.
        assert!(h.due(200_000, 1, [0xff; 32], 1_000, 64_000));
        assert_eq!(h.len(), 1);
    }
}
