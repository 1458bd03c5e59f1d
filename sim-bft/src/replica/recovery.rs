//! Recovery: rebuilding a replica from durable storage, and what it persists for that.
//!
//! Log entries and the view are stored as they change; after a crash the replica reloads its
//! stable checkpoint, re-executes the committed entries above it and keeps the other accepted
//! pre-prepares and prepared certificates as evidence for the next view change.

use std::collections::BTreeMap;

use super::{
    KEY_CHECKPOINT, KEY_LOG_PREFIX, KEY_VIEW, Replica, ReplicaConfig, ReplicaError,
    StoredCheckpoint, StoredEntry, log_key,
};
use crate::app::{Application, TickExecutor, WithTicks};
use crate::crypto::{self, internal_client_id};
use crate::node::Output;
use crate::protocol::codec;

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
            if crypto::sha256(&ck.snapshot) != ck.proof.digest {
                return Err(ReplicaError::Storage("checkpoint digest mismatch".into()));
            }
            r.install_snapshot(ck.proof, ck.snapshot)
                .map_err(|e| ReplicaError::Storage(format!("checkpoint: {e}")))?;
        }
        if let Some(bytes) = stored.get(KEY_VIEW) {
            let view: u64 = codec::decode(bytes, 16)
                .map_err(|e| ReplicaError::Storage(format!("view: {e}")))?;
            r.view = view;
        }
        for (k, v) in stored.range(KEY_LOG_PREFIX.to_vec()..) {
            if !k.starts_with(KEY_LOG_PREFIX) {
                break;
            }
            let e: StoredEntry = codec::decode(v, r.cfg.max_message_bytes)
                .map_err(|e| ReplicaError::Storage(format!("log entry: {e}")))?;
            if e.seq <= r.stable.seq || e.seq > r.stable.seq + r.cfg.log_window {
                continue;
            }
            let digest = e
                .batch
                .digest()
                .map_err(|e| ReplicaError::Storage(format!("log entry: {e}")))?;
            let entry = r.log.entry(e.seq).or_default();
            entry.view = e.view;
            entry.digest = Some(digest);
            entry.batch = Some(e.batch);
            entry.proof = e.proof;
            entry.committed = e.committed;
            entry.vote_ok = true;
        }
        r.restore_time_cert(stored)?;
        let mut discard = Vec::new();
        r.execute_ready(0, &mut discard);
        let known = r.log.keys().next_back().copied().unwrap_or(0);
        r.next_seq = known.max(r.last_executed) + 1;
        // Entries above what executed were accepted in some view; only the current view's may
        // still gather votes. Older ones stay as evidence (proofs) for the next view change.
        let view = r.view;
        for e in r.log.values_mut() {
            if e.view != view && !e.committed {
                e.batch = None;
                e.digest = None;
            }
        }
        r.next_internal_req = r.clients.last_req_seq(internal_client_id(r.cfg.id)) + 1;
        Ok(r)
    }

    pub(super) fn store_entry(&self, seq: u64, out: &mut Vec<Output>) {
        if let Some(e) = self.log.get(&seq)
            && let Some(batch) = &e.batch
        {
            let stored = StoredEntry {
                view: e.view,
                seq,
                batch: batch.clone(),
                proof: e.proof.clone(),
                committed: e.committed,
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
        if let Ok(v) = codec::encode(&self.view) {
            out.push(Output::Store {
                key: KEY_VIEW.to_vec(),
                value: Some(v),
            });
        }
    }
}
