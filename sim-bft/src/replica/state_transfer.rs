//! State transfer: a replica behind a stable checkpoint fetches its snapshot in chunks.
//!
//! The target is a checkpoint proof (2f+1 signed checkpoint messages with one digest), so the
//! fetched bytes are trusted only if their SHA-256 equals the certified digest; the snapshot is
//! then decoded and installed with its reserved pages (whose own digest is checked again), the
//! clients table and the agreed time (reloaded from the time page). A source that serves bad
//! chunks or nothing is abandoned for the next signer of the proof.

use ccron::{MemPages, ReservedPages};
use tracing::{info, warn};

use super::{
    Byzantine, Dest, KEY_CHECKPOINT, Replica, Snapshot, StoredCheckpoint, TimeRecord, Transfer,
};
use crate::crypto;
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Body, CheckpointProof, codec};

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
            chunks: Default::default(),
            deadline_ms: now.saturating_add(self.cfg.state_transfer_timeout_ms),
        });
        self.request_state(out);
    }

    fn request_state(&mut self, out: &mut Vec<Output>) {
        if let Some(t) = &self.transfer
            && let Some(to) = t.sources.get(t.source_idx).copied()
        {
            let seq = t.target.seq;
            self.send(Body::StateRequest { seq }, Dest::One(to), out);
        }
    }

    pub(super) fn next_transfer_source(&mut self, now: Millis, out: &mut Vec<Output>) {
        let timeout = self.cfg.state_transfer_timeout_ms;
        if let Some(t) = &mut self.transfer {
            t.source_idx = (t.source_idx + 1) % t.sources.len().max(1);
            t.meta = None;
            t.chunks.clear();
            t.deadline_ms = now.saturating_add(timeout);
        }
        self.request_state(out);
    }

    pub(super) fn on_state_request(&mut self, from: NodeId, seq: u64, out: &mut Vec<Output>) {
        let (proof, bytes) = if self.stable.seq >= seq && self.stable.seq > 0 {
            (self.stable.clone(), self.stable_snapshot.clone())
        } else if let Some((d, b)) = self.own_checkpoints.get(&seq) {
            // Not yet stable here: the requester already holds the proof for this digest.
            (
                CheckpointProof {
                    seq,
                    digest: *d,
                    sigs: Vec::new(),
                },
                b.clone(),
            )
        } else {
            return self.drop_msg("drop_state_unavailable", Some(from));
        };
        let chunk = self.cfg.chunk_bytes;
        let chunks = bytes.len().div_ceil(chunk);
        let seq = proof.seq;
        self.send(
            Body::StateMeta {
                proof,
                total_len: bytes.len() as u64,
                chunks: u32::try_from(chunks).unwrap_or(u32::MAX),
            },
            Dest::One(from),
            out,
        );
        for (i, part) in bytes.chunks(chunk).enumerate() {
            let mut data = part.to_vec();
            if self.cfg.byzantine == Byzantine::CorruptStateChunks
                && let Some(b) = data.first_mut()
            {
                *b ^= 0xff;
            }
            self.send(
                Body::StateChunk {
                    seq,
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    data,
                },
                Dest::One(from),
                out,
            );
        }
        self.metrics.inc("state_served");
    }

    pub(super) fn on_state_meta(
        &mut self,
        _now: Millis,
        from: NodeId,
        proof: CheckpointProof,
        total_len: u64,
        chunks: u32,
        _out: &mut Vec<Output>,
    ) {
        let Some(t) = &self.transfer else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        if t.sources.get(t.source_idx) != Some(&from) {
            return self.drop_msg("drop_unexpected_state", Some(from));
        }
        let expected = usize::try_from(total_len)
            .ok()
            .filter(|l| *l <= self.cfg.max_snapshot_bytes)
            .map(|l| l.div_ceil(self.cfg.chunk_bytes));
        if expected != Some(chunks as usize) {
            return self.drop_msg("drop_invalid_state_meta", Some(from));
        }
        let valid = if proof.seq == t.target.seq {
            proof.digest == t.target.digest
        } else {
            proof.seq > t.target.seq && self.verify_checkpoint_proof(&proof)
        };
        if !valid {
            return self.drop_msg("drop_invalid_state_meta", Some(from));
        }
        // A source serving a checkpoint that is not yet stable on its side sends a proof
        // without signatures: keep our certified target instead, or the installed checkpoint
        // (and every view change carrying it) would fail verification at every other replica.
        let proof = if proof.seq == t.target.seq {
            t.target.clone()
        } else {
            proof
        };
        if let Some(t) = &mut self.transfer {
            t.meta = Some((proof, total_len, chunks));
            t.chunks.clear();
        }
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
        let Some(t) = &mut self.transfer else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        let Some((proof, total_len, chunks)) = t.meta.clone() else {
            return self.drop_msg("drop_unexpected_state", Some(from));
        };
        if t.sources.get(t.source_idx) != Some(&from)
            || proof.seq != seq
            || index >= chunks
            || data.len() > chunk_bytes
        {
            return self.drop_msg("drop_unexpected_state", Some(from));
        }
        t.chunks.insert(index, data);
        if t.chunks.len() < chunks as usize {
            return;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(total_len).unwrap_or(0));
        for part in t.chunks.values() {
            bytes.extend_from_slice(part);
        }
        if bytes.len() as u64 != total_len || crypto::sha256(&bytes) != proof.digest {
            warn!(
                replica = self.cfg.id,
                from, seq, "state transfer digest mismatch"
            );
            self.metrics.inc("state_digest_mismatch");
            return self.next_transfer_source(now, out);
        }
        match self.install_snapshot(proof.clone(), bytes.clone()) {
            Ok(()) => {
                self.transfer = None;
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
                warn!(replica = self.cfg.id, from, seq, error = %e, "snapshot rejected");
                self.metrics.inc("state_snapshot_invalid");
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
        let tick_evals = snap
            .tick_evals
            .iter()
            .map(|(c, s, p)| ((*c, *s), *p))
            .collect();
        let old_evals = std::mem::replace(&mut self.tick_evals, tick_evals);
        if self.state_digest() != snap.state_digest {
            self.pages = old_pages;
            self.last_agreed_time_ms = old_time;
            self.tick_evals = old_evals;
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
