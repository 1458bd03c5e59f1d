//! Replica configuration: cluster shape, batching, protocol windows, time service, faults.

use std::collections::BTreeMap;

use crate::crypto::{Signatures, VerifyCache};
use crate::node::{Millis, NodeId};

/// How the agreed time of a batch is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeMode {
    /// No time service: batches carry no agreed time.
    Off,
    /// Concord's rule: the primary stamps its clock; backups check soft/hard bounds.
    Reference,
    /// Byzantine-robust: the median of a certificate of 2f+1 signed commit clocks (default).
    Robust,
}

/// Time-service parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeConfig {
    /// The rule.
    pub mode: TimeMode,
    /// Beyond this distance (exclusive: equal is fine) a backup counts and warns.
    pub soft_limit_ms: Millis,
    /// Beyond this distance (exclusive) a backup withholds its votes.
    pub hard_limit_ms: Millis,
    /// Minimum increase of agreed time per batch.
    pub epsilon_ms: Millis,
    /// A robust certificate must be for a seq at most this far below the proposed seq.
    pub cert_window: u64,
    /// Robust mode without a certificate (the first seqs, or after a restart): the primary's
    /// clock must be this close to the backup's. Defaults to the hard limit: tighter values stall
    /// clusters whose honest clocks are that far apart (no primary satisfies every backup).
    pub genesis_bound_ms: Millis,
}

impl Default for TimeConfig {
    fn default() -> Self {
        Self {
            mode: TimeMode::Robust,
            soft_limit_ms: 500,
            hard_limit_ms: 3_000,
            epsilon_ms: 1,
            cert_window: 64,
            genesis_bound_ms: 3_000,
        }
    }
}

/// The fault modes a replica can be configured with (only the simulator and tests set them):
/// see [`crate::byzantine`], where each is a strategy outside the honest protocol.
pub use crate::byzantine::{Byzantine, STARVED_CLIENT};

/// Configuration of one replica. Every replica of a cluster must agree on everything except
/// `id`, `byzantine` and `verify_cache`.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// This replica.
    pub id: NodeId,
    /// Number of replicas, 3f+1.
    pub n: u32,
    /// Seed from which all keys derive.
    pub key_seed: u64,
    /// User clients `0..num_clients` are known.
    pub num_clients: u64,
    /// Most requests per batch.
    pub batch_max: usize,
    /// How long the primary may wait to fill a batch (0: propose at once).
    pub batch_delay_ms: Millis,
    /// Most proposed-but-unexecuted sequence numbers.
    pub max_in_flight: u64,
    /// Checkpoint every this many sequence numbers (K).
    pub checkpoint_interval: u64,
    /// Log window above the low watermark (L, a multiple of K).
    pub log_window: u64,
    /// View-change timeout (doubles per consecutive failed view change).
    pub view_change_timeout_ms: Millis,
    /// Ceiling of the doubled view-change timeout. Without one, a long faulty period leaves
    /// the timer at 64x the base (minutes) and a healed cluster behind a faulty primary waits
    /// that long before it moves on.
    pub view_change_timeout_max_ms: Millis,
    /// How long a replica that saw a newer stable checkpoint waits before state transfer.
    pub state_transfer_grace_ms: Millis,
    /// Per-source state-transfer timeout.
    pub state_transfer_timeout_ms: Millis,
    /// Largest state-transfer chunk (chunks are content-defined, between a quarter of this
    /// and this; see [`crate::protocol::chunks`]). The checkpoint digest commits to the chunk
    /// list, so every replica of a cluster must agree on it.
    pub chunk_bytes: usize,
    /// Most chunks a state-transfer receiver asks for in one request (its window in flight);
    /// a source serves at most this many per request.
    pub state_window: u32,
    /// Most chunks a source serves one peer per `state_rate_interval_ms`.
    pub state_chunks_per_peer: u32,
    /// The interval of `state_chunks_per_peer`.
    pub state_rate_interval_ms: Millis,
    /// Most bytes of commit certificates one answer to a [`crate::protocol::Body::Status`]
    /// carries (at least one certificate is sent).
    pub status_answer_bytes: usize,
    /// Largest accepted peer message.
    pub max_message_bytes: usize,
    /// Largest accepted client request.
    pub max_request_bytes: usize,
    /// Largest accepted snapshot.
    pub max_snapshot_bytes: usize,
    /// Most pending requests in total.
    pub max_pending: usize,
    /// Most pending requests per client (bounds tick flooding).
    pub max_pending_per_client: usize,
    /// Most bytes of pending requests in all (payload + 128 bytes each; 0: no bound).
    pub max_pending_bytes: usize,
    /// Most bytes of pending requests per user client (0: no bound).
    pub max_pending_bytes_per_client: usize,
    /// Forward client requests received by a backup to the primary.
    pub forward_requests: bool,
    /// Reserved pages: page size.
    pub page_size: usize,
    /// Reserved pages: number of pages.
    pub num_pages: u32,
    /// The reserved page that holds the agreed time.
    pub time_page: u32,
    /// Time service.
    pub time: TimeConfig,
    /// Fault mode: the strategy this replica runs at its interception points
    /// ([`crate::byzantine`]; honest by default).
    pub byzantine: Byzantine,
    /// Shared memo of successful signature verifications (simulator only; ed25519 only).
    pub verify_cache: Option<VerifyCache>,
    /// The signature scheme of the cluster (every replica and client of a cluster uses the
    /// same): ed25519 by default, or the simulator-only `sim` tags.
    pub signatures: Signatures,
    /// The components this cluster ticks, with their tick period in ms. When non-empty, ticks
    /// for other components are rejected at admission, and the per-period rules below apply to
    /// the listed ones. Empty: any component may tick, every replica sends every tick, no bound.
    pub tick_components: BTreeMap<u32, u64>,
    /// Which replicas send the ticks of a listed component in a given period.
    pub tick_senders: TickSenders,
    /// Normal-case retransmission period: a replica with sequence numbers stuck uncommitted
    /// for this long tells its peers what it holds of them ([`crate::protocol::Body::Have`])
    /// and they resend what it lacks. 0 disables (loss is then repaired only around view
    /// changes).
    pub retransmit_interval_ms: Millis,
    /// Most bytes the future-view buffer holds for one sender (messages of views this replica
    /// has not entered yet; see [`super::future`]): what one faulty peer can pin.
    pub future_bytes_per_sender: usize,
}

/// Which replicas send the ticks of a component in one period (F+1 rotation or all): the
/// engine-independent rule of [`ccron::host::ticks`], re-exported.
pub use ccron::host::TickSenders;

impl ReplicaConfig {
    /// Defaults for replica `id` of an `n`-replica cluster with keys from `key_seed`.
    pub fn new(id: NodeId, n: u32, key_seed: u64, num_clients: u64) -> Self {
        Self {
            id,
            n,
            key_seed,
            num_clients,
            batch_max: 64,
            batch_delay_ms: 0,
            max_in_flight: 4,
            checkpoint_interval: 32,
            log_window: 128,
            view_change_timeout_ms: 2_000,
            view_change_timeout_max_ms: 8_000,
            state_transfer_grace_ms: 200,
            state_transfer_timeout_ms: 1_000,
            chunk_bytes: 64 << 10,
            state_window: 8,
            state_chunks_per_peer: 64,
            state_rate_interval_ms: 1_000,
            status_answer_bytes: 1 << 20,
            max_message_bytes: 8 << 20,
            max_request_bytes: 64 << 10,
            max_snapshot_bytes: 32 << 20,
            max_pending: 20_000,
            max_pending_per_client: 1_024,
            max_pending_bytes: 64 << 20,
            max_pending_bytes_per_client: 8 << 20,
            forward_requests: true,
            page_size: 4_096,
            num_pages: 64,
            time_page: 0,
            time: TimeConfig::default(),
            byzantine: Byzantine::Honest,
            verify_cache: None,
            signatures: Signatures::Ed25519,
            tick_components: BTreeMap::new(),
            tick_senders: TickSenders::default(),
            retransmit_interval_ms: 50,
            future_bytes_per_sender: 16 << 20,
        }
    }

    /// Tolerated faults: f = (n - 1) / 3.
    pub fn f(&self) -> u32 {
        self.n.saturating_sub(1) / 3
    }

    /// Upper bound of the encoded size of a new-view message (signed, on the wire): 2f+1
    /// signed view changes, each a checkpoint proof (n signatures at most) and at most
    /// `log_window` prepared certificates of n-1 signatures each. Prepared certificates carry
    /// batch digests, not batches, so the bound does not depend on batch sizes (issue 9
    /// defect 4); [`Self::validate`] requires it to fit `max_message_bytes`.
    pub fn new_view_bound_bytes(&self) -> u64 {
        let n = u64::from(self.n);
        let sig_entry = 4 + 64;
        let proof = 8 + 8 + 32 + 8 + sig_entry * n.saturating_sub(1);
        let ckpt = 8 + 32 + 8 + sig_entry * n;
        // Payload (from, tag, fields, vec length) + SignedMsg (two length prefixes, signature)
        // + the Wire tag; 64 bytes cover each level's framing generously.
        let vc = 64 + ckpt + 8 + self.log_window.saturating_mul(proof) + 64 + 64;
        let quorum = 2 * u64::from(self.f()) + 1;
        64 + 8 + 8 + quorum.saturating_mul(vc) + 64 + 64
    }

    /// Upper bound of the encoded size of a state meta (signed, on the wire): a checkpoint
    /// proof of n signatures and one 32-byte digest per chunk of the largest snapshot
    /// ([`crate::protocol::chunks::max_chunks`]); [`Self::validate`] requires it to fit
    /// `max_message_bytes`.
    pub fn state_meta_bound_bytes(&self) -> u64 {
        let n = u64::from(self.n);
        let ckpt = 8 + 32 + 8 + (4 + 64) * n;
        let leaves =
            crate::protocol::chunks::max_chunks(self.max_snapshot_bytes, self.chunk_bytes) as u64;
        64 + ckpt + 16 + leaves.saturating_mul(32) + 64 + 64
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |s: &str| Err(ConfigError(s.to_string()));
        if self.n < 4 || self.n % 3 != 1 {
            return bad("n must be 3f+1 with f >= 1");
        }
        if self.id >= self.n {
            return bad("id must be below n");
        }
        if self.checkpoint_interval == 0 || self.log_window < 2 * self.checkpoint_interval {
            return bad("need checkpoint_interval > 0 and log_window >= 2 * checkpoint_interval");
        }
        if self.batch_max == 0 || self.max_in_flight == 0 {
            return bad("batch_max and max_in_flight must be positive");
        }
        if self.time_page >= self.num_pages || self.page_size < 64 {
            return bad("time_page must be a valid page and pages at least 64 bytes");
        }
        if self.chunk_bytes == 0 || self.chunk_bytes + 1024 > self.max_message_bytes {
            return bad("chunk_bytes must be positive and fit a message");
        }
        if self.state_meta_bound_bytes() > self.max_message_bytes as u64 {
            return bad(
                "a state meta (one digest per chunk of a max_snapshot_bytes snapshot) must fit max_message_bytes",
            );
        }
        if self.new_view_bound_bytes() > self.max_message_bytes as u64 {
            return bad(
                "a new-view (2f+1 view changes of log_window prepared certificates) must fit max_message_bytes",
            );
        }
        if self.state_window == 0
            || self.state_chunks_per_peer < self.state_window
            || self.state_rate_interval_ms <= 0
        {
            return bad(
                "need state_window > 0, state_chunks_per_peer >= state_window and a positive rate interval",
            );
        }
        if self
            .tick_components
            .values()
            .any(|p| *p == 0 || *p > i64::MAX as u64)
        {
            return bad("tick periods must be positive");
        }
        if self.retransmit_interval_ms < 0 {
            return bad("retransmit_interval_ms must not be negative");
        }
        if self.time.epsilon_ms <= 0 || self.time.soft_limit_ms > self.time.hard_limit_ms {
            return bad("time: epsilon must be positive and soft <= hard");
        }
        Ok(())
    }
}

/// An invalid configuration.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("invalid replica configuration: {0}")]
pub struct ConfigError(pub String);
