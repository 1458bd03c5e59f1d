//! State transfer: a replica behind a stable checkpoint pulls its snapshot in verified chunks.
//!
//! The target is a checkpoint proof (2f+1 signed checkpoint messages with one digest). That
//! digest commits to a Merkle root over fixed-size chunks of the snapshot
//! ([`crate::protocol::chunks`]): a source first sends the root ([`Body::StateMeta`], checked
//! against the certified digest), then each chunk with its sibling path, so every chunk is
//! verified on arrival, from whichever source sent it. The receiver pulls a bounded window of
//! missing chunks at a time; every verified chunk extends the source's deadline; a source that
//! times out or serves a bad chunk is replaced by the next signer of the proof and the chunks
//! already verified are kept. A source serves at most `state_window` chunks per request and
//! `state_chunks_per_peer` chunks per peer per `state_rate_interval_ms`, so a request costs a
//! bounded number of bytes. The assembled snapshot is decoded and installed with its reserved
//! pages (whose own digest is checked again), the clients table and the agreed time (reloaded
//! from the time page).

use std::collections::{BTreeMap, BTreeSet};

use ccron::host::TickCoalescer;
use ccron::{MemPages, ReservedPages};
use tracing::{info, warn};

use super::{Byzantine, Dest, KEY_CHECKPOINT, Replica, Snapshot, StoredCheckpoint, TimeRecord};
use crate::crypto::Digest32;
use crate::node::{Millis, NodeId, Output};
use crate::protocol::chunks::{self, ChunkTree};
use crate::protocol::{Body, CheckpointProof, codec};

/// Most chunk indices a flooding attacker puts in one request.
const FLOOD_INDICES: u32 = 1_024;

/// An in-progress state transfer.
#[derive(Debug, Clone)]
pub(super) struct Transfer {
    /// The certified checkpoint to reach.
    pub(super) target: CheckpointProof,
    sources: Vec<NodeId>,
    source_idx: usize,
    meta: Option<TransferMeta>,
    /// Verified chunks (kept across source rotation).
    chunks: BTreeMap<u32, Vec<u8>>,
    /// Chunks asked of the current source and not yet received.
    outstanding: BTreeSet<u32>,
    /// When the current source is given up unless it makes progress.
    pub(super) deadline_ms: Millis,
}

/// The verified description of the snapshot being fetched.
#[derive(Debug, Clone)]
struct TransferMeta {
    proof: CheckpointProof,
    total_len: u64,
    chunks: u32,
    root: Digest32,
}

/// What a source keeps to serve state transfers.
#[derive(Debug, Clone, Default)]
pub(super) struct Serving {
    /// The chunk tree of the snapshot last served, by checkpoint digest.
    tree: Option<(Digest32, ChunkTree)>,
    /// Per peer: start of its current rate interval and chunks served in it.
    budget: BTreeMap<NodeId, (Millis, u32)>,
}

impl Replica {
    pub(super) fn start_transfer(
        &mut self,
        now: Millis,
        proof: CheckpointProof,
        out: &mut Vec<Output>,
    ) {
        if self
            .transfer
            .as_ref()
            .is_some_and(|t| t.target.seq >= proof.seq)
        {
            return;
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
        self.transfer = Some(Transfer {
            target: proof,
            sources,
            source_idx,
            meta: None,
            chunks: BTreeMap::new(),
            outstanding: BTreeSet::new(),
            deadline_ms: now.saturating_add(self.cfg.state_transfer_timeout_ms),
        });
        self.request_state(now, out);
    }

    /// Asks the current source for the next window of missing chunks (and the meta if we have
    /// none yet), and restarts its deadline.
    fn request_state(&mut self, now: Millis, out: &mut Vec<Output>) {
        let window = self.cfg.state_window;
        let timeout = self.cfg.state_transfer_timeout_ms;
        let Some(t) = &mut self.transfer else {
            return;
        };
        let Some(to) = t.sources.get(t.source_idx).copied() else {
            return;
        };
        let total = t.meta.as_ref().map_or(window, |m| m.chunks);
        let indices: Vec<u32> = (0..total)
            .filter(|i| !t.chunks.contains_key(i))
            .take(window as usize)
            .collect();
        let meta = t.meta.is_none();
        if !meta && indices.is_empty() {
            return;
        }
        t.outstanding = indices.iter().copied().collect();
        t.deadline_ms = now.saturating_add(timeout);
        let seq = t.target.seq;
        self.metrics.inc("state_requests_sent");
        self.send(
            Body::StateRequest { seq, meta, indices },
            Dest::One(to),
            out,
        );
    }

    /// Gives up the current source (timeout or bad data) for the next one; verified chunks
    /// are kept.
    pub(super) fn next_transfer_source(&mut self, now: Millis, out: &mut Vec<Output>) {
        if let Some(t) = &mut self.transfer {
            t.source_idx = (t.source_idx + 1) % t.sources.len().max(1);
            t.outstanding.clear();
            let kept = t.chunks.len() as u64;
            self.metrics.inc("state_source_rotations");
            self.metrics.add("state_chunks_kept_on_rotation", kept);
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
        let found: Option<(CheckpointProof, &[u8])> =
            if self.stable.seq >= seq && self.stable.seq > 0 {
                Some((self.stable.clone(), &self.stable_snapshot[..]))
            } else {
                // Not yet stable here: the requester already holds the proof for this digest.
                self.own_checkpoints.get(&seq).map(|(d, b)| {
                    (
                        CheckpointProof {
                            seq,
                            digest: *d,
                            sigs: Vec::new(),
                        },
                        &b[..],
                    )
                })
            };
        let Some((proof, bytes)) = found else {
            return self.drop_msg("drop_state_unavailable", Some(from));
        };
        let budget = self.serving.budget.entry(from).or_insert((now, 0));
        if now < budget.0 || now >= budget.0.saturating_add(interval) {
            *budget = (now, 0);
        }
        let allowed = per_peer.saturating_sub(budget.1).min(window);
        if allowed == 0 {
            self.metrics.inc("state_rate_limited");
            return self.drop_msg("drop_state_rate_limited", Some(from));
        }
        let total_len = bytes.len() as u64;
        let Some(count) = chunks::chunk_count(total_len, chunk_bytes) else {
            return self.drop_msg("drop_state_unavailable", Some(from));
        };
        if self
            .serving
            .tree
            .as_ref()
            .is_none_or(|(d, _)| *d != proof.digest)
        {
            self.serving.tree = Some((proof.digest, ChunkTree::new(bytes, chunk_bytes)));
        }
        let Some((_, tree)) = &self.serving.tree else {
            return;
        };
        let mut bodies = Vec::new();
        if want_meta {
            bodies.push(Body::StateMeta {
                proof: proof.clone(),
                total_len,
                chunks: count,
                root: tree.root(),
            });
        }
        let wanted: BTreeSet<u32> = indices.into_iter().filter(|i| *i < count).collect();
        let serve = match self.cfg.byzantine {
            // Serves one chunk per request, then lets the receiver time out.
            Byzantine::SlowStateSource => allowed.min(1),
            _ => allowed,
        };
        let mut served = 0u32;
        for index in wanted.into_iter().take(serve as usize) {
            let start =
                usize::try_from(u64::from(index) * chunk_bytes as u64).unwrap_or(usize::MAX);
            let end = start.saturating_add(chunk_bytes).min(bytes.len());
            let mut data = bytes.get(start..end).unwrap_or_default().to_vec();
            if self.cfg.byzantine == Byzantine::CorruptStateChunks
                && let Some(b) = data.first_mut()
            {
                *b ^= 0xff;
            }
            bodies.push(Body::StateChunk {
                seq: proof.seq,
                index,
                data,
                path: tree.path(index),
            });
            served += 1;
        }
        if let Some(b) = self.serving.budget.get_mut(&from) {
            b.1 = b.1.saturating_add(served);
        }
        self.metrics.add("state_chunks_served", u64::from(served));
        self.metrics.inc("state_served");
        for body in bodies {
            self.send(body, Dest::One(from), out);
        }
    }

    /// The amplification attacker: asks `to` for as much state as it can, again and again.
    fn flood_state_request(&mut self, to: NodeId, out: &mut Vec<Output>) {
        self.metrics.inc("state_flood_requests");
        self.send(
            Body::StateRequest {
                seq: 0,
                meta: true,
                indices: (0..FLOOD_INDICES).collect(),
            },
            Dest::One(to),
            out,
        );
    }

    /// Under [`Byzantine::StateRequestFlood`], a checkpoint vote from `from` triggers a flood.
    pub(super) fn maybe_flood_state(&mut self, from: NodeId, out: &mut Vec<Output>) {
        if self.cfg.byzantine == Byzantine::StateRequestFlood {
            self.flood_state_request(from, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_state_meta(
        &mut self,
        now: Millis,
        from: NodeId,
        proof: CheckpointProof,
        total_len: u64,
        chunks: u32,
        root: Digest32,
        out: &mut Vec<Output>,
    ) {
        if self.cfg.byzantine == Byzantine::StateRequestFlood {
            return self.flood_state_request(from, out);
        }
        let chunk_bytes = self.cfg.chunk_bytes;
        let Some(t) = &self.transfer else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        if !t.sources.contains(&from) {
            return self.drop_msg("drop_unexpected_state", Some(from));
        }
        let sane = usize::try_from(total_len).is_ok_and(|l| l <= self.cfg.max_snapshot_bytes)
            && chunks::chunk_count(total_len, chunk_bytes) == Some(chunks)
            && chunks::digest_from_root(total_len, chunk_bytes, &root) == proof.digest;
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
        // A source serving a checkpoint that is not yet stable on its side sends a proof
        // without signatures: keep our certified target instead, or the installed checkpoint
        // (and every view change carrying it) would fail verification at every other replica.
        let proof = if proof.seq == t.target.seq {
            t.target.clone()
        } else {
            proof
        };
        let timeout = self.cfg.state_transfer_timeout_ms;
        if let Some(t) = &mut self.transfer {
            t.meta = Some(TransferMeta {
                proof,
                total_len,
                chunks,
                root,
            });
            t.chunks.clear();
            t.outstanding.retain(|i| *i < chunks);
            t.deadline_ms = now.saturating_add(timeout);
            if t.outstanding.is_empty() {
                self.request_state(now, out);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_state_chunk(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        index: u32,
        data: Vec<u8>,
        path: Vec<Digest32>,
        out: &mut Vec<Output>,
    ) {
        if self.cfg.byzantine == Byzantine::StateRequestFlood {
            return self.flood_state_request(from, out);
        }
        let chunk_bytes = self.cfg.chunk_bytes;
        let timeout = self.cfg.state_transfer_timeout_ms;
        let Some(t) = &mut self.transfer else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        let Some(meta) = &t.meta else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        if !t.sources.contains(&from) || meta.proof.seq != seq || index >= meta.chunks {
            return self.drop_msg("drop_unexpected_state", Some(from));
        }
        if t.chunks.contains_key(&index) {
            self.metrics.inc("late_state_chunk");
            return;
        }
        if data.len() as u64 != chunks::chunk_len(meta.total_len, chunk_bytes, index)
            || !chunks::verify_chunk(&meta.root, index, meta.chunks, &data, &path)
        {
            let current = t.sources.get(t.source_idx) == Some(&from);
            warn!(
                replica = self.cfg.id,
                from, seq, index, "state chunk fails its Merkle proof"
            );
            self.metrics.inc("state_digest_mismatch");
            self.drop_msg("drop_invalid_state_chunk", Some(from));
            if current {
                self.next_transfer_source(now, out);
            }
            return;
        }
        let (total_len, chunk_count) = (meta.total_len, meta.chunks);
        t.chunks.insert(index, data);
        t.outstanding.remove(&index);
        // Progress: the source keeps its turn.
        t.deadline_ms = now.saturating_add(timeout);
        let complete = t.chunks.len() >= chunk_count as usize;
        let window_done = t.outstanding.is_empty();
        self.metrics.inc("state_chunks_received");
        if !complete {
            if window_done {
                self.request_state(now, out);
            }
            return;
        }
        let Some(t) = self.transfer.take() else {
            return;
        };
        let Some(meta) = t.meta.clone() else {
            return;
        };
        let mut bytes = Vec::with_capacity(usize::try_from(total_len).unwrap_or(0));
        for part in t.chunks.values() {
            bytes.extend_from_slice(part);
        }
        let proof = meta.proof;
        match self.install_snapshot(proof.clone(), bytes.clone()) {
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
            }
            Err(e) => {
                // Every chunk matched the certified root: 2f+1 signed a snapshot that does
                // not install. Start over from the next source.
                warn!(replica = self.cfg.id, from, seq, error = %e, "snapshot rejected");
                self.metrics.inc("state_snapshot_invalid");
                if self.install_failure.is_none() {
                    self.install_failure = Some(format!("state transfer at seq {seq}: {e}"));
                }
                self.transfer = Some(Transfer {
                    meta: None,
                    chunks: BTreeMap::new(),
                    outstanding: BTreeSet::new(),
                    ..t
                });
                self.next_transfer_source(now, out);
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
        let mut pages = MemPages::new(self.cfg.page_size, self.cfg.num_pages);
        pages.restore(&snap.pages).map_err(|e| e.to_string())?;
        if pages.digest() != snap.pages_digest {
            return Err("pages digest mismatch".into());
        }
        // The agreed time is reloaded from its reserved page (and must agree with the record).
        let time = match pages.load(self.cfg.time_page).map_err(|e| e.to_string())? {
            Some(b) => Some(codec::decode::<TimeRecord>(b, b.len()).map_err(|e| e.to_string())?),
            None => None,
        };
        if time.map(|t| t.agreed_time_ms) != snap.last_agreed_time_ms {
            return Err("time page disagrees with the snapshot".into());
        }
        let backup = self.app.snapshot();
        self.app
            .restore(&snap.app)
            .map_err(|e| format!("application: {e}"))?;
        let old_pages = std::mem::replace(&mut self.pages, pages);
        let old_time = self.last_agreed_time_ms;
        self.last_agreed_time_ms = snap.last_agreed_time_ms;
        let tick_evals = TickCoalescer::from_entries(snap.tick_evals.iter().copied());
        let old_evals = self.tick_gate.replace_coalescer(tick_evals);
        if self.state_digest() != snap.state_digest {
            self.pages = old_pages;
            self.last_agreed_time_ms = old_time;
            self.tick_gate.replace_coalescer(old_evals);
            // Restoring a snapshot we took ourselves cannot fail.
            let _ = self.app.restore(&backup);
            return Err("state digest mismatch".into());
        }
        if let Err(e) = self.app.reload(&self.pages) {
            warn!(replica = self.cfg.id, error = %e, "tick executor reload failed");
            self.metrics.inc("tick_reload_error");
        }
        let seq = snap.seq;
        self.clients.restore_records(snap.clients);
        self.last_cert_seq = snap.last_cert_seq;
        self.last_executed = seq;
        self.last_state_digest = snap.state_digest;
        self.stable = proof;
        self.size.reset(bytes.len());
        self.stable_snapshot = bytes;
        self.log = self.log.split_off(&(seq + 1));
        self.own_checkpoints = self.own_checkpoints.split_off(&(seq + 1));
        self.checkpoint_votes = self.checkpoint_votes.split_off(&(seq + 1));
        let high = self.high_watermark();
        self.log.retain(|s, _| *s <= high);
        self.next_seq = self.next_seq.max(seq + 1);
        let own = crate::crypto::internal_client_id(self.cfg.id);
        self.next_internal_req = self
            .next_internal_req
            .max(self.clients.last_req_seq(own) + 1);
        // Every admitted tick was pending in consensus; the transfer replaced that state.
        self.throttle.on_view_change_cleared();
        if self
            .behind_since
            .as_ref()
            .is_some_and(|(_, p)| p.seq <= seq)
        {
            self.behind_since = None;
        }
        Ok(())
    }
}
