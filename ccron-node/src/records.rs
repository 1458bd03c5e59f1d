//! The node's JSON records on disk: the genesis every node loads (`genesis.json`) and the status
//! a node writes after every height (`status.json`, read by `localnet` and tests).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::crypto::{DomainError, SigningDomain};
use crate::ledger::{DEFAULT_PAGES, DEFAULT_TICK_PERIOD_MS, LedgerSetup};
use crate::mempool::MempoolCounters;
use ccron::host::TickPoolCounters;

/// The genesis every node loads: validators (public keys and loopback ports), genesis time, and
/// the ledger's setup every node must share (its name, ticking components and their periods,
/// reserved pages, the setup digest of the build that wrote it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Genesis {
    /// Agreed time of height 1 (Unix ms).
    pub genesis_time_ms: i64,
    /// The validators, in node-index order.
    pub validators: Vec<GenesisValidator>,
    /// The ledger every node runs (the binary's name for it; the binary builds it).
    pub ledger: String,
    /// The ticking components and their tick periods (ms): every node's tick gate. Empty (a
    /// genesis written before it was recorded): the ledger's components at
    /// [`DEFAULT_TICK_PERIOD_MS`].
    #[serde(default)]
    pub tick_periods: BTreeMap<u32, u64>,
    /// The host's reserved pages (page size, number of pages).
    #[serde(default = "default_pages")]
    pub pages: (usize, u32),
    /// The hex setup digest of the ledger build that wrote the genesis
    /// ([`ccron::host::Application::setup_digest`]): a node whose build gives another digest
    /// refuses to start (`None`: not recorded, nothing compared).
    #[serde(default)]
    pub setup_digest: Option<String>,
    /// The chain id (UTF-8, at most [`crate::crypto::MAX_CHAIN_ID_BYTES`] bytes): named in
    /// every signature of signing domain 2. Empty in a genesis written before it existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chain_id: String,
    /// The signing domain's version ([`crate::crypto::SigningDomain`]): `None` (a genesis
    /// written before the field existed) is version 1, the domains without a chain id that the
    /// stores of such chains hold signatures over; `init` writes 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_domain: Option<u32>,
}

fn default_pages() -> (usize, u32) {
    DEFAULT_PAGES
}

impl Genesis {
    /// The chain's signing domain: version [`Genesis::signing_domain`](Self::signing_domain) (1 when absent) over
    /// [`Genesis::chain_id`].
    ///
    /// # Errors
    /// An unknown version, or version 2 with an empty or oversized chain id.
    pub fn domain(&self) -> Result<SigningDomain, DomainError> {
        SigningDomain::of_version(self.signing_domain.unwrap_or(1), self.chain_id.as_bytes())
    }

    /// The ledger setup every node derives from this genesis; `components` are the ledger's own
    /// ticking components, used at [`DEFAULT_TICK_PERIOD_MS`] when the genesis lists none.
    pub fn setup(&self, components: &[u32]) -> LedgerSetup {
        let tick_periods = if self.tick_periods.is_empty() {
            components
                .iter()
                .map(|&c| (c, DEFAULT_TICK_PERIOD_MS))
                .collect()
        } else {
            self.tick_periods.clone()
        };
        LedgerSetup {
            validators: u32::try_from(self.validators.len()).unwrap_or(u32::MAX),
            tick_periods,
            pages: self.pages,
        }
    }
}

/// One validator in the genesis.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GenesisValidator {
    /// Hex ed25519 public key.
    pub public_key: String,
    /// Its libp2p TCP port on 127.0.0.1.
    pub port: u16,
    /// Its HTTP endpoint's port on 127.0.0.1 (client requests, results, and the ticks the
    /// other validators forward to it). `None`: the node binds `--http` and receives no
    /// forwarded ticks.
    #[serde(default)]
    pub http_port: Option<u16>,
}

/// What a node writes after each decision (read by `localnet`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeStatus {
    /// Node index.
    pub id: usize,
    /// OS process id.
    pub pid: u32,
    /// Last executed height.
    pub last_height: u64,
    /// Hex state digest after it.
    pub state_digest: String,
    /// Ticks evaluated.
    pub ticks_executed: u64,
    /// Ticks the kernel's tick gate skipped (coalesced, non-validator, unknown component,
    /// replayed number).
    #[serde(default)]
    pub ticks_skipped: u64,
    /// Cron actions fired.
    pub fires: u64,
    /// Proposals this node judged invalid (e.g. lying about time).
    pub rejected_proposals: u64,
    /// Heights decided whose value came through sync.
    pub synced_heights: u64,
    /// Agreed time of the last height.
    pub agreed_time_ms: i64,
    /// Client requests executed.
    #[serde(default)]
    pub requests_executed: u64,
    /// Ordered client requests not executed: their `(client, number)` had executed.
    #[serde(default)]
    pub requests_duplicate: u64,
    /// Ordered client requests refused without running (the kernel's state budget).
    #[serde(default)]
    pub requests_refused: u64,
    /// Rounds this node skipped proposing in because its own block would be invalid
    /// ([`ProposeError`](crate::core::ProposeError)).
    #[serde(default)]
    pub proposals_skipped: u64,
    /// The mempool's counters.
    #[serde(default)]
    pub mempool: MempoolCounters,
    /// Proposal parts taken and refused, by reason (`crate::proposals`).
    #[serde(default)]
    pub proposal_parts: crate::proposals::PartCounters,
    /// The engine's requests to restream a proposal.
    #[serde(default)]
    pub restreams: u64,
    /// Restreams of a value this node does not hold.
    #[serde(default)]
    pub restreams_unknown: u64,
    /// Restreams refused: this node already proposed another value in that round.
    #[serde(default)]
    pub restreams_refused: u64,
    /// Blocks not remembered because the undecided set was at its bound.
    #[serde(default)]
    pub undecided_refused: u64,
    /// Proposal parts held for undecided heights, and their bytes.
    #[serde(default)]
    pub proposal_parts_held: (usize, usize),
    /// Ticks evaluated per submitter (validator index in the address-ordered set).
    #[serde(default)]
    pub ticks_by_submitter: Vec<u64>,
    /// The tick pool and this node's own ticks.
    #[serde(default)]
    pub tick_pool: TickPoolStatus,
    /// Results of executed requests no longer kept for clients (the record is bounded).
    #[serde(default)]
    pub results_evicted: u64,
    /// The height of the snapshot this process restored from at start (`None`: it replayed
    /// the whole block store, or started empty).
    #[serde(default)]
    pub restored_from_height: Option<u64>,
    /// Blocks re-executed at start (those above the restored snapshot).
    #[serde(default)]
    pub replayed_blocks: u64,
    /// Time from opening the stores to the state being rebuilt at start (ms).
    #[serde(default)]
    pub restart_ms: u64,
    /// Snapshots rejected at start (corrupt, torn, of another chain; each a warning in the log).
    #[serde(default)]
    pub snapshots_rejected: u64,
    /// Snapshots written by this process.
    #[serde(default)]
    pub snapshots_written: u64,
    /// Snapshots this process failed to write (each an error in the log; the block store is
    /// unaffected, a restart replays more blocks).
    #[serde(default)]
    pub snapshot_failures: u64,
    /// The lowest height the block store holds (above the pruned ones; 1: nothing pruned):
    /// the history minimum the node reports to the engine's sync.
    #[serde(default)]
    pub store_first_height: u64,
    /// Heights this process pruned from the block store (`node --retain-blocks`).
    #[serde(default)]
    pub pruned_heights: u64,
    /// Prunes that failed (each an error in the log; the store is left whole).
    #[serde(default)]
    pub prune_failures: u64,
    /// Rotations of `digests.log` and `fires.log` by this process ([`crate::linelog`]).
    #[serde(default)]
    pub diag_log_rotations: u64,
    /// Appends, rotations and trims of `digests.log` and `fires.log` that failed (each an error
    /// in the log; diagnostics, not state).
    #[serde(default)]
    pub diag_log_failures: u64,
    /// Proposals this node judged invalid, by reason ([`crate::ledger::BlockRejection::name`]).
    #[serde(default)]
    pub rejections_by_reason: std::collections::BTreeMap<String, u64>,
    /// Engine messages whose signature did not verify (the engine drops them).
    #[serde(default)]
    pub signatures_refused: SignatureRefusals,
    /// Engine votes whose signature verified, per voter (hex public key): what reached this
    /// node of each validator's votes (consensus messages, vote rebroadcasts, certificates in
    /// sync answers; a vote is verified once). The localnet's judge of a validator that
    /// withholds its votes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub votes_verified: BTreeMap<String, VoteTally>,
    /// The signing guard: messages signed, signed again identically, refused by reason, and
    /// its floor ([`crate::signguard`]).
    #[serde(default)]
    pub signing: crate::signguard::SignCounters,
    /// Peers' catch-up offers this process refused (before it started, or while running), by
    /// [`CatchUpError::kind`](crate::catchup::CatchUpError::kind) (also in `catchup.json`).
    #[serde(default)]
    pub catchup_refused: std::collections::BTreeMap<String, u64>,
    /// The catch-up of a node that fell behind every peer's history while running: checks
    /// by outcome, triggers, installs, self-restarts and the last reason
    /// ([`crate::catchup::running`]).
    #[serde(default)]
    pub catchup_running: crate::catchup::running::RunningCounters,
    /// Every corrupt store file this home refused and recovered from (kept aside, cut, the
    /// rest taken from the peers: [`crate::store::recover_at_start`]; also in
    /// `store-recovery.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub store_recovery: Vec<crate::store::Quarantined>,
}

impl NodeStatus {
    /// Adds the catch-up's refused offers by kind to `catchup_refused`.
    pub fn count_catch_up(&mut self, report: &crate::catchup::fetch::CatchUpReport) {
        for (kind, n) in &report.refused_by_kind {
            let c = self.catchup_refused.entry(kind.clone()).or_insert(0);
            *c = c.saturating_add(*n);
        }
    }
}

/// Engine messages refused for a signature that does not verify, by kind (counted by the
/// engine adapter's verifier).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SignatureRefusals {
    /// Votes.
    pub votes: u64,
    /// Proposals.
    pub proposals: u64,
    /// Vote extensions (clock samples).
    pub extensions: u64,
    /// Validator proofs (a peer's binding of its network identity to a validator key).
    pub proofs: u64,
}

/// One voter's votes a node verified ([`NodeStatus::votes_verified`]).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VoteTally {
    /// Prevotes.
    pub prevotes: u64,
    /// Precommits.
    pub precommits: u64,
    /// The highest height of any of them.
    pub last_height: u64,
}

impl VoteTally {
    /// Prevotes and precommits.
    pub fn votes(&self) -> u64 {
        self.prevotes.saturating_add(self.precommits)
    }
}

/// The tick pool's counters ([`TickPoolCounters`], flattened: the JSON keys are the counters'
/// names) and this node's own ticks, in `status.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TickPoolStatus {
    /// What the pool admitted and refused (`admitted`, `replaced`, `not_a_validator`,
    /// `unknown_component`, `already_pending`, `stale`).
    #[serde(flatten)]
    pub pool: TickPoolCounters,
    /// Refused at the endpoint: malformed or a bad signature.
    pub invalid: u64,
    /// Pending now.
    pub pending: u64,
    /// Own ticks signed and sent (this node's F+1 turn, none pending for the component).
    pub own_sent: u64,
    /// Own generator ticks not sent: a tick of the component was still pending (ccron's
    /// `TickThrottle`).
    pub own_throttled: u64,
    /// Own generator ticks not sent: not this node's turn (`TickSenders::Rotating`).
    pub own_not_my_turn: u64,
    /// Own generator ticks not sent: the next number could not be reserved durably
    /// (`ticks.floor`).
    #[serde(default)]
    pub own_unreserved: u64,
    /// Forwards of own ticks to another validator's endpoint that failed (refused, failed or
    /// timed out).
    pub forward_failed: u64,
    /// Forwarding, in detail.
    #[serde(default)]
    pub forward: crate::forward::ForwardCounters,
}

impl TickPoolStatus {
    pub(crate) fn set_pool(&mut self, c: TickPoolCounters, pending: usize) {
        self.pool = c;
        self.pending = pending as u64;
    }
}
