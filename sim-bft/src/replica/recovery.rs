//! Recovery: rebuilding a replica from durable storage, and what it persists for that.
//!
//! Log entries and the view are stored as they change; after a crash the replica reloads its
//! stable checkpoint, re-executes the committed entries above it and keeps the other accepted
//! pre-prepares and prepared certificates as evidence for the next view change.

use std::collections::BTreeMap;

use super::{
    KEY_CHECKPOINT, KEY_INTERNAL_REQ, KEY_LOG_PREFIX, KEY_VIEW, Replica, ReplicaConfig,
    ReplicaError, StoredCheckpoint, StoredEntry, StoredView, log_key,
};
use crate::app::{Application, TickExecutor, WithTicks};
use crate::node::Output;

/// How many internal request numbers one durable reservation covers.
pub(super) const INTERNAL_REQ_BLOCK: u64 = 64;
use super::batch_bytes::BatchRef;
use crate::protocol::{Batch, PreparedProof, codec};

/// [`StoredEntry`] by reference: the same fields in the same order, so the same encoding
/// (checked by a test), written without cloning the entry's batches.
#[derive(bincode::Encode)]
struct StoredEntryRef<'a> {
    view: u64,
    seq: u64,
    batch: BatchRef<'a>,
    proof: Option<&'a PreparedProof>,
    proof_batch: Option<&'a Batch>,
    committed: bool,
    vote_ok: bool,
}

impl Replica {
    /// Rebuilds a replica after a crash from what its durable storage holds (`stored`: the
    /// key-value pairs its `Output::Store`s left, up to the last `Sync` at least).
    ///
    /// Loads the stable checkpoint, re-executes the committed log entries above it and keeps the
    /// other accepted pre-prepares and prepared certificates (so it never votes against them).
    /// Outputs of the re-execution are not re-emitted. The replica then catches up with the
    /// cluster by the normal protocol (and state transfer if it is behind a stable checkpoint).
    pub fn recover(
        cfg: ReplicaConfig,
        app: Box<dyn Application>,
        ticks: Box<dyn TickExecutor>,
        stored: &BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> Result<Self, ReplicaError> {
        Self::recover_app(cfg, Box::new(WithTicks::new(app, ticks)), stored)
    }

    /// [`Replica::recover`] for a replica running one [`Application`] for requests and ticks.
    pub fn recover_app(
        cfg: ReplicaConfig,
        app: Box<dyn Application>,
        stored: &BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> Result<Self, ReplicaError> {
        let mut r = Self::with_app(cfg, app)?;
        let limit = r.cfg.max_snapshot_bytes + r.cfg.max_message_bytes;
        if let Some(bytes) = stored.get(KEY_CHECKPOINT) {
            let ck: StoredCheckpoint = codec::decode(bytes, limit)
                .map_err(|e| ReplicaError::Storage(format!("checkpoint: {e}")))?;
            if crate::protocol::chunks::snapshot_digest(
                r.cfg.signatures,
                &ck.snapshot,
                r.cfg.chunk_bytes,
            ) != ck.proof.digest
            {
                return Err(ReplicaError::Storage("checkpoint digest mismatch".into()));
            }
            r.install_snapshot(ck.proof, ck.snapshot)
                .map_err(|e| ReplicaError::Storage(format!("checkpoint: {e}")))?;
        }
        if let Some(bytes) = stored.get(KEY_VIEW) {
            let v: StoredView = codec::decode(bytes, 32)
                .map_err(|e| ReplicaError::Storage(format!("view: {e}")))?;
            r.view = v.view;
            r.in_view_change = v.in_view_change;
        }
        for (k, v) in stored.range(KEY_LOG_PREFIX.to_vec()..) {
            if !k.starts_with(KEY_LOG_PREFIX) {
                break;
            }
            // An entry may hold two batches (its own and its prepared certificate's).
            let e: StoredEntry = codec::decode(v, r.cfg.max_message_bytes.saturating_mul(2))
                .map_err(|e| ReplicaError::Storage(format!("log entry: {e}")))?;
            if e.seq <= r.checkpoints.stable.seq
                || e.seq > r.checkpoints.stable.seq + r.cfg.log_window
            {
                continue;
            }
            let digest = e
                .batch
                .digest(r.cfg.signatures)
                .map_err(|e| ReplicaError::Storage(format!("log entry: {e}")))?;
            let entry = r.log.entry(e.seq).or_default();
            entry.view = e.view;
            entry.digest = Some(digest);
            let batch = std::sync::Arc::new(e.batch);
            entry.proof_batch = match (&e.proof, e.proof_batch) {
                (_, Some(b)) => Some(std::sync::Arc::new(b)),
                (Some(p), None) if p.digest == digest => Some(std::sync::Arc::clone(&batch)),
                _ => None,
            };
            entry.batch = Some(batch);
            entry.proof = e.proof;
            entry.committed = e.committed;
            entry.vote_ok = e.vote_ok;
        }
        r.restore_time_cert(stored)?;
        let mut discard = Vec::new();
        r.execute_ready(0, &mut discard);
        let known = r.log.keys().next_back().copied().unwrap_or(0);
        r.next_seq = known.max(r.last_executed) + 1;
        // Entries above what executed were accepted in some view; only the current view's may
        // still gather votes. Older ones stay as evidence (proofs) for the next view change.
        //
        // A replica that crashed while changing view has not processed the view's new-view: no
        // entry is the current view's, every entry waits for the new-view (which alone may
        // change an entry committed or prepared in an earlier view). It resumes the view
        // change: its own view change is rebuilt from the same durable log and checkpoint, and
        // its timer fires at once, which re-sends it (peers answer with theirs or the new-view).
        let view = r.view;
        let in_vc = r.in_view_change;
        for e in r.log.values_mut() {
            if (e.view != view || in_vc) && !e.committed {
                e.batch = None;
                e.digest = None;
            }
        }
        // The replica's own prepare of a current-view entry it accepted before the crash is
        // not stored (votes are not persisted), and may never have left (a crash right after
        // entering a view: `--crash-at-view-change`). Rebuild it (ed25519 is deterministic:
        // the same bytes as before, for the same digest, so no equivocation) so that the
        // retransmission answers a peer's `Have` with it. Without it, with every honest replica
        // needed for a quorum, no honest replica could prepare that seq in this view, and the
        // restarted replica's own short view-change timer (its back-off restarts at zero)
        // took it out of the view alone: the whole cluster stalled (campaign D/silent 44).
        if !in_vc && r.primary_of(view) != r.cfg.id {
            let own: Vec<(u64, crate::crypto::Digest32)> = r
                .log
                .iter()
                .filter(|(s, e)| **s > r.last_executed && e.view == view && e.vote_ok)
                .filter(|(_, e)| !e.committed && e.batch.is_some())
                .filter_map(|(s, e)| e.digest.map(|d| (*s, d)))
                .collect();
            let mut discard = Vec::new();
            for (seq, digest) in own {
                let body = crate::protocol::Body::Prepare { view, seq, digest };
                if let Some(sig) = r.send(body, super::Dest::All, &mut discard)
                    && let Some(e) = r.log.get_mut(&seq)
                {
                    e.prepares.insert(r.cfg.id, (digest, sig));
                    r.metrics.inc("own_prepare_restored");
                }
            }
        }
        if in_vc {
            r.own_view_change(view);
            r.vc.deadline = Some(0);
            r.vc.resend_deadline = Some(0);
            r.metrics.inc("view_change_resumed");
        }
        // Never re-issue an internal request number that may have been sent: the durable
        // high-water mark is reserved before any number below it leaves.
        let reserved = match stored.get(KEY_INTERNAL_REQ) {
            Some(bytes) => codec::decode::<u64>(bytes, 16)
                .map_err(|e| ReplicaError::Storage(format!("internal request mark: {e}")))?,
            None => 0,
        };
        r.ticks.req_reserved = reserved;
        r.ticks.next_req = r.last_own_tick().max(reserved).saturating_add(1);
        Ok(r)
    }

    /// Makes sure internal request number `req_seq` is covered by the durable high-water mark
    /// before it is sent: when it is not, reserves the next [`INTERNAL_REQ_BLOCK`] numbers (one
    /// store and sync per block, not per tick).
    pub(super) fn reserve_internal_req(&mut self, req_seq: u64, out: &mut Vec<Output>) {
        if req_seq <= self.ticks.req_reserved {
            return;
        }
        let mark = req_seq.saturating_add(INTERNAL_REQ_BLOCK);
        if let Ok(value) = codec::encode(&mark) {
            self.ticks.req_reserved = mark;
            out.push(Output::Store {
                key: KEY_INTERNAL_REQ.to_vec(),
                value: Some(value),
            });
            out.push(Output::Sync);
        } else {
            self.metrics.inc("encode_error");
        }
    }

    pub(super) fn store_entry(&mut self, seq: u64, out: &mut Vec<Output>) {
        if let Some(e) = self.log.get(&seq)
            && let Some(batch) = &e.batch
        {
            // The batch's kept encoding (`batch_bytes`): taken for its digest, and written again
            // by each store of the entry (accepted, prepared, committed).
            let batch_bytes = self.batch_bytes.encoding(batch).ok();
            // Encoded from borrows: the same bytes as the owned `StoredEntry`, without copying
            // the batches first.
            let stored = StoredEntryRef {
                view: e.view,
                seq,
                batch: match &batch_bytes {
                    Some(bytes) => BatchRef::Encoded(bytes),
                    None => BatchRef::Value(batch),
                },
                proof: e.proof.as_ref(),
                // Stored apart only when it is not the entry's own batch.
                proof_batch: match (&e.proof, &e.proof_batch) {
                    (Some(p), Some(b)) if e.digest != Some(p.digest) => Some(&**b),
                    _ => None,
                },
                committed: e.committed,
                vote_ok: e.vote_ok,
            };
            if let Ok(value) = codec::encode(&stored) {
                out.push(Output::Store {
                    key: log_key(seq),
                    value: Some(value),
                });
            }
        }
    }

    pub(super) fn store_view(&self, out: &mut Vec<Output>) {
        let v = StoredView {
            view: self.view,
            in_view_change: self.in_view_change,
        };
        if let Ok(v) = codec::encode(&v) {
            out.push(Output::Store {
                key: KEY_VIEW.to_vec(),
                value: Some(v),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{SignedRequest, TimeCert};

    #[test]
    fn a_stored_entry_by_reference_encodes_as_the_owned_one() {
        let batch = |clock| Batch {
            requests: vec![
                SignedRequest::sign(
                    &crate::crypto::client_signing_key(1, 0),
                    crate::protocol::Request {
                        client: 0,
                        req_seq: 3,
                        kind: crate::protocol::RequestKind::Write,
                        payload: vec![1, 2, 3],
                    },
                )
                .unwrap(),
            ],
            primary_clock_ms: clock,
            time_cert: Some(TimeCert {
                seq: 1,
                digest: [4; 32],
                samples: Vec::new(),
            }),
            null: false,
        };
        let proof = PreparedProof {
            view: 2,
            seq: 7,
            digest: [9; 32],
            sigs: vec![(1, [5; 64])],
        };
        for (proof, proof_batch) in [
            (None, None),
            (Some(proof.clone()), None),
            (Some(proof), Some(batch(8))),
        ] {
            let owned = StoredEntry {
                view: 3,
                seq: 7,
                batch: batch(5),
                proof: proof.clone(),
                proof_batch: proof_batch.clone(),
                committed: true,
                vote_ok: false,
            };
            let batch_bytes = codec::encode(&owned.batch).unwrap();
            for batch in [
                BatchRef::Value(&owned.batch),
                BatchRef::Encoded(&batch_bytes),
            ] {
                let by_ref = StoredEntryRef {
                    view: 3,
                    seq: 7,
                    batch,
                    proof: owned.proof.as_ref(),
                    proof_batch: owned.proof_batch.as_ref(),
                    committed: true,
                    vote_ok: false,
                };
                assert_eq!(
                    codec::encode(&by_ref).unwrap(),
                    codec::encode(&owned).unwrap()
                );
            }
        }
    }
}
