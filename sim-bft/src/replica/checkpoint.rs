//! Checkpoints: snapshots, signed checkpoint votes and stable checkpoints.
//!
//! 2f+1 matching checkpoint votes make a checkpoint stable: it is persisted with its snapshot,
//! becomes the low watermark and garbage-collects the log. A replica whose own checkpoint
//! differs from the certified one, or that is far behind it, starts a state transfer.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, warn};

use super::{Dest, KEY_CHECKPOINT, Replica, ReplicaError, Snapshot, log_key};
use crate::crypto::{Digest32, SigBytes};
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Body, CheckpointProof, SigList, chunks, codec};

/// The result bytes of a write rejected because the state would outgrow
/// `max_snapshot_bytes` (a replicated outcome: every honest replica records the same).
pub const STATE_FULL_RESULT: &[u8] = ccron::host::STATE_FULL_REPLY;

/// Why execution rejected a request (a replicated, deterministic outcome): the kernel's
/// [`ccron::host::RequestRefusal`].
pub type ExecutionRejection = ccron::host::RequestRefusal;

/// Bytes of a snapshot besides the kernel's snapshot and the reply records (sequence number,
/// certificate seq, state digest, length prefixes).
const SNAPSHOT_FRAME_BYTES: u64 = 256;

/// [`StoredCheckpoint`] by reference: the same fields in the same order, so the same encoding
/// (bincode writes a `Vec<u8>` and a `&[u8]` alike: length, then bytes).
#[derive(bincode::Encode)]
struct StoredCheckpointRef<'a> {
    proof: &'a CheckpointProof,
    snapshot: &'a [u8],
}

/// Checkpoints: the stable one, this replica's own not yet stable ones, and the votes.
#[derive(Debug)]
pub(super) struct Checkpoints {
    /// The stable checkpoint's proof (2f+1 matching votes; the low watermark is its seq).
    pub(super) stable: CheckpointProof,
    /// The stable checkpoint's snapshot (what `stable.digest` certifies).
    pub(super) stable_snapshot: Vec<u8>,
    /// This replica's own checkpoints above the stable one: seq -> (digest, snapshot).
    pub(super) own: BTreeMap<u64, (Digest32, Vec<u8>)>,
    /// Checkpoint votes received: seq -> sender -> (digest, signature).
    pub(super) votes: BTreeMap<u64, BTreeMap<NodeId, (Digest32, SigBytes)>>,
}

impl Replica {
    /// The kernel's state limit for the next checkpoint interval: `max_snapshot_bytes` less the
    /// reserved pages at full capacity (ticks may fill them), the reply records as they are now
    /// (replicated, so equal on every replica at a checkpoint) and the snapshot's framing. The
    /// kernel refuses a write that could make its own snapshot outgrow it.
    pub(super) fn state_limit(&self) -> u64 {
        let pages = (self.cfg.page_size as u64).saturating_mul(u64::from(self.cfg.num_pages));
        let replies = self
            .clients
            .records_snapshot()
            .iter()
            .flat_map(|r| &r.replies)
            .map(|c| (c.result.len() as u64).saturating_add(32))
            .sum::<u64>();
        (self.cfg.max_snapshot_bytes as u64)
            .saturating_sub(pages)
            .saturating_sub(replies)
            .saturating_sub(SNAPSHOT_FRAME_BYTES)
    }

    pub(super) fn make_snapshot(&mut self) -> Result<(Digest32, Vec<u8>), ReplicaError> {
        let limit = self.state_limit();
        self.host.set_state_limit(Some(limit));
        let host = self
            .host
            .checkpoint()
            .map_err(|e| ReplicaError::Storage(e.to_string()))?;
        let snap = Snapshot {
            seq: self.last_executed,
            host,
            clients: self.clients.records_snapshot(),
            last_cert_seq: self.time.last_cert_seq,
            state_digest: self.last_state_digest,
        };
        let bytes = codec::encode(&snap).map_err(|e| ReplicaError::Storage(e.to_string()))?;
        Ok((
            chunks::snapshot_digest(self.cfg.signatures, &bytes, self.cfg.chunk_bytes),
            bytes,
        ))
    }
    pub(super) fn take_checkpoint(&mut self, now: Millis, seq: u64, out: &mut Vec<Output>) {
        let Ok((digest, bytes)) = self.make_snapshot() else {
            self.metrics.inc("encode_error");
            return;
        };
        if bytes.len() > self.cfg.max_snapshot_bytes {
            // The execution-time bound above should make this impossible (an application
            // that outgrows its per-write allowance).
            warn!(
                replica = self.cfg.id,
                seq,
                len = bytes.len(),
                "snapshot exceeds max_snapshot_bytes"
            );
            self.metrics.inc("snapshot_too_large");
        }
        self.checkpoints.own.insert(seq, (digest, bytes));
        if let Some(sig) = self.send(Body::Checkpoint { seq, digest }, Dest::All, out) {
            self.checkpoints
                .votes
                .entry(seq)
                .or_default()
                .insert(self.cfg.id, (digest, sig));
        }
        self.metrics.inc("checkpoints_taken");
        self.check_stable(now, seq, out);
    }

    pub(super) fn on_checkpoint(
        &mut self,
        now: Millis,
        from: NodeId,
        seq: u64,
        digest: Digest32,
        sig: SigBytes,
        out: &mut Vec<Output>,
    ) {
        if seq <= self.checkpoints.stable.seq {
            // A late vote for a checkpoint that is already stable: normal, not a fault.
            self.metrics.inc("late_checkpoint");
            return;
        }
        if !seq.is_multiple_of(self.cfg.checkpoint_interval) {
            return self.drop_msg("drop_invalid_checkpoint", Some(from));
        }
        // Bound what one sender can make us hold: at most 4 distinct checkpoint seqs each.
        let held: Vec<u64> = self
            .checkpoints
            .votes
            .iter()
            .filter(|(_, m)| m.contains_key(&from))
            .map(|(s, _)| *s)
            .collect();
        if held.contains(&seq) {
            return self.drop_msg("drop_duplicate", Some(from));
        }
        if held.len() >= 4
            && let Some(lowest) = held.first()
            && let Some(m) = self.checkpoints.votes.get_mut(lowest)
        {
            m.remove(&from);
        }
        self.checkpoints
            .votes
            .entry(seq)
            .or_default()
            .insert(from, (digest, sig));
        self.check_stable(now, seq, out);
    }

    /// Makes `seq`'s checkpoint stable when 2f+1 agree, or notices that we are behind it.
    fn check_stable(&mut self, now: Millis, seq: u64, out: &mut Vec<Output>) {
        let Some(votes) = self.checkpoints.votes.get(&seq) else {
            return;
        };
        let mut by_digest: BTreeMap<Digest32, SigList> = BTreeMap::new();
        for (n, (d, s)) in votes {
            by_digest.entry(*d).or_default().push((*n, *s));
        }
        let quorum = self.quorum();
        let Some((digest, sigs)) = by_digest.into_iter().find(|(_, s)| s.len() >= quorum) else {
            return;
        };
        let proof = CheckpointProof { seq, digest, sigs };
        match self.checkpoints.own.get(&seq) {
            Some((own, _)) if *own == digest => {
                // Moved, not copied: the stable checkpoint drops its own entry anyway.
                if let Some((_, bytes)) = self.checkpoints.own.remove(&seq) {
                    self.make_stable(proof, bytes, out);
                }
            }
            Some(_) => {
                warn!(
                    replica = self.cfg.id,
                    seq, "own checkpoint differs from the certified one: state transfer"
                );
                self.metrics.inc("checkpoint_divergence");
                self.start_transfer(now, proof, out);
            }
            None if seq > self.last_executed => {
                if seq >= self.last_executed + self.cfg.log_window / 2 {
                    self.start_transfer(now, proof, out);
                } else if self
                    .state_transfer
                    .behind_since
                    .as_ref()
                    .is_none_or(|(_, p)| p.seq < seq)
                {
                    self.state_transfer.behind_since =
                        Some((now.saturating_add(self.cfg.state_transfer_grace_ms), proof));
                }
            }
            None => {}
        }
    }

    pub(super) fn make_stable(
        &mut self,
        proof: CheckpointProof,
        snapshot: Vec<u8>,
        out: &mut Vec<Output>,
    ) {
        let seq = proof.seq;
        if seq <= self.checkpoints.stable.seq {
            return;
        }
        // Encoded from borrows: the same bytes as the owned [`StoredCheckpoint`] (checked by a
        // test), without copying the snapshot first.
        let stored = StoredCheckpointRef {
            proof: &proof,
            snapshot: &snapshot,
        };
        if let Ok(value) = codec::encode(&stored) {
            out.push(Output::Store {
                key: KEY_CHECKPOINT.to_vec(),
                value: Some(value),
            });
            out.push(Output::Sync);
        }
        let old: Vec<u64> = self.log.range(..=seq).map(|(s, _)| *s).collect();
        for s in old {
            self.log.remove(&s);
            out.push(Output::Store {
                key: log_key(s),
                value: None,
            });
        }
        let old_proof = std::mem::replace(&mut self.checkpoints.stable, proof);
        let old_snapshot = std::mem::replace(&mut self.checkpoints.stable_snapshot, snapshot);
        self.state_transfer.serving.retire(old_proof, old_snapshot);
        self.checkpoints.own = self.checkpoints.own.split_off(&(seq + 1));
        self.checkpoints.votes = self.checkpoints.votes.split_off(&(seq + 1));
        if self
            .state_transfer
            .behind_since
            .as_ref()
            .is_some_and(|(_, p)| p.seq <= seq)
        {
            self.state_transfer.behind_since = None;
        }
        self.metrics.inc("checkpoints_stable");
        debug!(replica = self.cfg.id, seq, "stable checkpoint");
    }

    pub(super) fn verify_checkpoint_proof(&self, proof: &CheckpointProof) -> bool {
        if proof.seq == 0 {
            return proof.sigs.is_empty();
        }
        if !proof.seq.is_multiple_of(self.cfg.checkpoint_interval)
            || proof.sigs.len() < self.quorum()
        {
            return false;
        }
        let mut seen = BTreeSet::new();
        proof.sigs.iter().all(|(n, s)| {
            seen.insert(*n)
                && crate::protocol::verify_body(
                    &self.ring,
                    *n,
                    Body::Checkpoint {
                        seq: proof.seq,
                        digest: proof.digest,
                    },
                    s,
                    self.cfg.verify_cache.as_ref(),
                )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::StoredCheckpoint;
    use super::*;

    #[test]
    fn a_stored_checkpoint_by_reference_encodes_as_the_owned_one() {
        let owned = StoredCheckpoint {
            proof: CheckpointProof {
                seq: 64,
                digest: [7; 32],
                sigs: vec![(0, [1; 64]), (2, [3; 64])],
            },
            snapshot: (0..=255u8).cycle().take(1_000).collect(),
        };
        let by_ref = StoredCheckpointRef {
            proof: &owned.proof,
            snapshot: &owned.snapshot,
        };
        assert_eq!(
            codec::encode(&by_ref).unwrap(),
            codec::encode(&owned).unwrap()
        );
    }
}
