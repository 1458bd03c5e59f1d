//! The application side, pure: decided blocks run through `ccron::host` (the engine-independent
//! code sim-bft's replicas run too), plus the block validity rule every validator re-checks.
//!
//! [`LedgerHost`] executes a decided block with [`BlockHost::execute_block`] on one of
//! `ccron-ledgers`' ledgers (`demo`, `orders`); the agreed time is [`TimeRule`]'s over the
//! verified samples of the previous height. Nothing here does I/O or reads a clock: the same
//! blocks give the same state digest on every node and on any engine (`tests/equivalence.rs`).

use std::collections::{BTreeMap, BTreeSet};

use ccron::MemPages;
use ccron::host::{
    Block as HostBlock, BlockHost, BlockOutcome as HostOutcome, ClientId, CronLedger,
    ExecutedRequests, HostError, TickGate, TickPool, TickRejection, TimeError, TimeRule, Tx,
    TxResult,
};
use ccron_ledgers::demo::{DemoLedger, DemoTables, demo_ledger};
use ccron_ledgers::orders::{SchedAppConfig, ScheduledLedger};
use malachitebft_core_types::{Round, VoteExtensionScope};
use sha2::{Digest, Sha256};

use crate::context::{
    Address, Block, CarriedSample, ClockSample, Ctx, Hash32, Height, PubKey, TickTx, ValidatorSet,
    extension_signing_bytes, verify_raw,
};
use crate::request::{MAX_BLOCK_REQUEST_BYTES, MAX_BLOCK_REQUESTS, RequestError};

/// How far height 1's agreed time (the proposer's clock) may be from a validator's clock.
pub const GENESIS_BOUND_MS: i64 = 10_000;

/// How far ahead of a validator's clock the median of a block's samples may be.
pub const HARD_LIMIT_MS: i64 = 10_000;

/// The tick period (ms) validators submit ticks at, for every ticking component: the tick
/// gate's coalescing period too (one evaluated tick per sender, component and 200 ms of agreed
/// time).
pub const DEMO_TICK_PERIOD_MS: u64 = 200;

/// Reserved pages of the host (the cron tables' schedules): 64 pages of 4 KiB, as sim-bft's
/// default replica configuration.
pub const HOST_PAGES: (usize, u32) = (4_096, 64);

/// The ledger hosts this adapter runs: one of `ccron-ledgers`' ledgers behind
/// [`ccron::host::BlockHost`], exactly the execution path of sim-bft's replicas and of any other
/// engine.
enum Hosted {
    Demo(BlockHost<CronLedger<DemoLedger>>),
    Orders(BlockHost<ScheduledLedger>),
}

/// A ledger the node drives with decided blocks: a [`BlockHost`] of `ccron-ledgers`' `demo` or
/// `orders` ledger, with counters for the node's status.
pub struct LedgerHost {
    hosted: Hosted,
    components: Vec<u32>,
    /// Ticks evaluated so far (admitted by the gate and run).
    pub ticks_executed: u64,
    /// Ticks refused by the gate or the application so far.
    pub ticks_skipped: u64,
    /// Ticks evaluated so far per submitter (validator index in the address-ordered set).
    pub ticks_by_submitter: Vec<u64>,
    /// Actions fired so far.
    pub fires: u64,
    /// Client requests executed so far.
    pub requests_executed: u64,
    /// Ordered client requests not executed because their `(client, number)` already executed.
    pub requests_duplicate: u64,
    /// The `(client, number)` pairs the last block executed.
    pub last_requests: Vec<(ClientId, u64)>,
    /// The highest tick number a decided block carried per (component, submitter index):
    /// derived from the decided blocks like the counters, kept in snapshots so a restored node
    /// refuses replayed tick numbers and numbers its own ticks above them
    /// (`ccron::host::TickPool::on_included`).
    pub tick_included: BTreeMap<(u32, u32), u64>,
    /// Exactly-once per `(client, number)`: replicated, in the state digest.
    executed: ExecutedRequests,
}

impl std::fmt::Debug for LedgerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerHost")
            .field("components", &self.components)
            .field("ticks_executed", &self.ticks_executed)
            .field("ticks_skipped", &self.ticks_skipped)
            .field("fires", &self.fires)
            .finish_non_exhaustive()
    }
}

/// The `orders` ledger's configuration on this adapter (puts place orders, as in sim-bft's
/// `--ledger orders`).
pub fn orders_config() -> SchedAppConfig {
    SchedAppConfig {
        puts_as_orders: true,
        ..SchedAppConfig::default()
    }
}

/// The tick gate of `validators` validators whose `components` tick every
/// [`DEMO_TICK_PERIOD_MS`].
pub fn tick_gate(validators: u32, components: &[u32]) -> TickGate {
    TickGate::new(
        validators,
        components
            .iter()
            .map(|&c| (c, DEMO_TICK_PERIOD_MS))
            .collect(),
    )
}

impl LedgerHost {
    /// A fresh host of ledger `name` (`demo` or `orders`) for `validators` validators,
    /// identical on every node.
    ///
    /// # Errors
    /// An unknown ledger name, or a ledger whose setup fails.
    pub fn new(name: &str, validators: u32) -> Result<Self, String> {
        let pages = || MemPages::new(HOST_PAGES.0, HOST_PAGES.1);
        let (hosted, components) = match name {
            "demo" => {
                let tables = DemoTables::default();
                let components = tables.components();
                let ledger = demo_ledger(&tables).map_err(|e| e.to_string())?;
                let host = BlockHost::new(ledger, pages(), tick_gate(validators, &components));
                (Hosted::Demo(host), components)
            }
            "orders" => return Ok(Self::orders(orders_config(), validators)),
            other => {
                return Err(format!(
                    "ledger '{other}' is not available on this adapter (demo, orders)"
                ));
            }
        };
        Ok(Self::hosting(hosted, components, validators))
    }

    /// A fresh host of the `orders` ledger with configuration `cfg` ([`new`](Self::new) uses
    /// [`orders_config`]; a recording of another engine's run uses that run's configuration).
    pub fn orders(cfg: SchedAppConfig, validators: u32) -> Self {
        let components = vec![cfg.component];
        let host = BlockHost::new(
            ScheduledLedger::new(cfg),
            MemPages::new(HOST_PAGES.0, HOST_PAGES.1),
            tick_gate(validators, &components),
        );
        Self::hosting(Hosted::Orders(host), components, validators)
    }

    fn hosting(hosted: Hosted, components: Vec<u32>, validators: u32) -> Self {
        Self {
            hosted,
            components,
            ticks_executed: 0,
            ticks_skipped: 0,
            ticks_by_submitter: vec![0; validators as usize],
            tick_included: BTreeMap::new(),
            fires: 0,
            requests_executed: 0,
            requests_duplicate: 0,
            last_requests: Vec::new(),
            executed: ExecutedRequests::new(),
        }
    }

    /// The components that tick, with their tick period (ms).
    pub fn tick_components(&self) -> Vec<(u32, u64)> {
        self.components
            .iter()
            .map(|&c| (c, DEMO_TICK_PERIOD_MS))
            .collect()
    }

    /// Whether `component` ticks on this ledger.
    pub fn has_component(&self, component: u32) -> bool {
        self.components.contains(&component)
    }

    /// Executes one decided block through [`BlockHost::execute_block`]: its client requests
    /// first (in block order, each `(client, number)` at most once: repeats are counted in
    /// [`requests_duplicate`](Self::requests_duplicate) and dropped), then its ticks.
    ///
    /// # Errors
    /// The host's error (a halted application, out-of-order height, time going back): the
    /// node stops.
    pub fn execute(
        &mut self,
        block: &Block,
        validators: &ValidatorSet,
    ) -> Result<HostOutcome, HostError> {
        self.execute_with_clients(block, validators, &|r| r.client())
    }

    /// [`execute`](Self::execute) with the client id of each request given by `client_of`
    /// instead of derived from its key ([`crate::request::SignedRequest::client`]): the same
    /// path otherwise. For replaying another engine's recorded requests under that engine's
    /// client ids (`tests/cross_engine.rs`); a node always uses [`execute`](Self::execute).
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub fn execute_with_clients(
        &mut self,
        block: &Block,
        validators: &ValidatorSet,
        client_of: &dyn Fn(&crate::request::SignedRequest) -> ClientId,
    ) -> Result<HostOutcome, HostError> {
        self.last_requests.clear();
        let mut txs = Vec::with_capacity(block.requests.len() + block.ticks.len());
        for r in &block.requests {
            let (client, number) = (client_of(r), r.request.number);
            match self.executed.admit(client, number) {
                Ok(()) => {
                    self.last_requests.push((client, number));
                    txs.push(Tx::Request {
                        client,
                        payload: r.request.payload.clone(),
                    });
                }
                Err(e) => {
                    self.requests_duplicate += 1;
                    tracing::debug!(height = block.height, reason = %e, "ordered request not executed");
                }
            }
        }
        self.requests_executed += self.last_requests.len() as u64;
        for t in &block.ticks {
            if let Some(i) = validator_index(validators, &t.submitter) {
                let last = self
                    .tick_included
                    .entry((t.component, i))
                    .or_insert(t.number);
                *last = (*last).max(t.number);
            }
        }
        let requests = txs.len();
        let block = host_block(block, validators, txs);
        let out = match &mut self.hosted {
            Hosted::Demo(h) => h.execute_block(&block)?,
            Hosted::Orders(h) => h.execute_block(&block)?,
        };
        for (tx, r) in block.txs.iter().zip(&out.results).skip(requests) {
            match r {
                TxResult::TickEvaluated => {
                    self.ticks_executed += 1;
                    if let Tx::Tick {
                        sender: Some(s), ..
                    } = tx
                        && let Some(c) = self.ticks_by_submitter.get_mut(*s as usize)
                    {
                        *c += 1;
                    }
                }
                TxResult::TickSkipped(_) | TxResult::TickFailed(_) => self.ticks_skipped += 1,
                _ => {}
            }
        }
        self.fires += out.fires.len() as u64;
        Ok(out)
    }

    /// The node's state digest after the last executed block: [`host_digest`](Self::host_digest)
    /// and the executed requests' digest ([`ExecutedRequests::digest`]).
    pub fn state_digest(&self) -> [u8; 32] {
        Sha256::new()
            .chain_update(b"ccron-malachite-state")
            .chain_update(self.host_digest())
            .chain_update(self.executed.digest())
            .finalize()
            .into()
    }

    /// The host's digest ([`BlockHost::digest`]): what any engine's [`BlockHost`] gives after
    /// the same blocks (the cross-engine comparison).
    pub fn host_digest(&self) -> [u8; 32] {
        match &self.hosted {
            Hosted::Demo(h) => h.digest(),
            Hosted::Orders(h) => h.digest(),
        }
    }

    /// The application's own digest ([`ccron::host::Application::digest`]), without the pages,
    /// time and gate the host digest adds: comparable with any engine's copy of the same ledger
    /// (`tests/cross_engine.rs` compares it with a sim-bft replica's after every batch).
    pub fn app_digest(&self) -> [u8; 32] {
        use ccron::host::Application as _;
        match &self.hosted {
            Hosted::Demo(h) => h.app().digest(),
            Hosted::Orders(h) => h.app().digest(),
        }
    }

    /// The host's reserved pages (the cron tables' schedules).
    pub fn pages(&self) -> &MemPages {
        match &self.hosted {
            Hosted::Demo(h) => h.pages(),
            Hosted::Orders(h) => h.pages(),
        }
    }

    /// The ledger's committed outbox (`None` when the ledger has no schedule book).
    pub fn outbox(&self) -> Option<&ccron::outbox::Outbox> {
        match &self.hosted {
            Hosted::Demo(h) => h.app().scheduler().map(|s| s.outbox()),
            Hosted::Orders(h) => h.app().ledger().scheduler().map(|s| s.outbox()),
        }
    }

    /// The executed requests (the mempool's mirror starts from it).
    pub fn executed(&self) -> &ExecutedRequests {
        &self.executed
    }

    /// The host's snapshot ([`BlockHost::snapshot`]: the application, the reserved pages, the
    /// last height and agreed time, the tick gate's coalescer), for the node's durable
    /// snapshots (`crate::snapshot`).
    ///
    /// # Errors
    /// The host's (pages that do not read back, an encoding failure).
    pub fn host_snapshot(&self) -> Result<Vec<u8>, HostError> {
        match &self.hosted {
            Hosted::Demo(h) => h.snapshot(),
            Hosted::Orders(h) => h.snapshot(),
        }
    }

    /// The host's last executed height (0 at genesis).
    pub fn host_height(&self) -> u64 {
        match &self.hosted {
            Hosted::Demo(h) => h.last_height(),
            Hosted::Orders(h) => h.last_height(),
        }
    }

    /// Restores a fresh host from [`host_snapshot`](Self::host_snapshot)'s bytes and the
    /// executed requests of the same height (the counters are the caller's to set). On error
    /// the host may be partly restored: the caller drops it.
    ///
    /// # Errors
    /// The host's ([`HostError::BadSnapshot`], a halted store).
    pub fn restore(&mut self, host: &[u8], executed: ExecutedRequests) -> Result<(), HostError> {
        match &mut self.hosted {
            Hosted::Demo(h) => h.restore(host)?,
            Hosted::Orders(h) => h.restore(host)?,
        }
        self.executed = executed;
        self.last_requests.clear();
        Ok(())
    }
}

/// The validator index of `address` in `validators` (the tick sender [`ccron::host`] sees).
pub fn validator_index(validators: &ValidatorSet, address: &Address) -> Option<u32> {
    validators
        .validators
        .iter()
        .position(|v| v.address == *address)
        .and_then(|i| u32::try_from(i).ok())
}

/// The block as [`ccron::host`] sees it: height, agreed time, the `requests` (already deduped)
/// and then each tick transaction with its submitter's validator index (`None` for a
/// non-validator: the gate refuses it).
pub fn host_block(block: &Block, validators: &ValidatorSet, requests: Vec<Tx>) -> HostBlock {
    let mut txs = requests;
    txs.extend(block.ticks.iter().map(|t| Tx::Tick {
        component: t.component,
        sender: validator_index(validators, &t.submitter),
    }));
    HostBlock {
        height: block.height,
        agreed_time_ms: Some(block.agreed_time_ms),
        txs,
    }
}

/// The agreed-time rule for `validators`: [`TimeRule`] with this engine's commit quorum
/// ([`ValidatorSet::quorum`], `floor(2n/3)+1`, at least 2f+1 for any n, so one commit's
/// precommits always carry enough samples), [`GENESIS_BOUND_MS`] and [`HARD_LIMIT_MS`].
pub fn time_rule(validators: &ValidatorSet) -> TimeRule {
    TimeRule::with_quorum(validators.quorum(), GENESIS_BOUND_MS, HARD_LIMIT_MS)
}

/// The verified `(validator index, clock)` pairs of a block's carried samples (samples from
/// non-validators are left out; [`validate_block`] refuses such blocks first).
pub fn sample_pairs(samples: &[CarriedSample], validators: &ValidatorSet) -> Vec<(u32, i64)> {
    samples
        .iter()
        .filter_map(|s| Some((validator_index(validators, &s.validator)?, s.time_ms)))
        .collect()
}

/// The agreed time of the block at `height`: at height 1 the earliest allowed (the genesis
/// time; a proposer stamps `max(genesis, its clock)`, see [`validate_block`]), after that
/// [`TimeRule::agreed`] over the previous height's samples (`None` without a quorum of them).
pub fn agreed_time(
    height: u64,
    genesis_ms: i64,
    prev_ms: i64,
    samples: &[CarriedSample],
    validators: &ValidatorSet,
) -> Option<i64> {
    if height <= 1 {
        return Some(genesis_ms);
    }
    time_rule(validators)
        .agreed(Some(prev_ms), &sample_pairs(samples, validators))
        .ok()
}

/// Why a proposed block is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockRejection {
    /// The block is for another height.
    #[error("block for height {got}, expected {expected}")]
    WrongHeight {
        /// Claimed.
        got: u64,
        /// Expected.
        expected: u64,
    },
    /// The samples' scope is not the previous commit.
    #[error("samples scope does not match the previous commit")]
    WrongScope,
    /// Fewer samples than a quorum.
    #[error("{got} clock samples, a quorum is {quorum}")]
    TooFewSamples {
        /// Carried.
        got: usize,
        /// Needed.
        quorum: usize,
    },
    /// A sample from a non-validator, a duplicate, or out of order.
    #[error("clock sample from a non-validator or repeated")]
    BadSampler,
    /// A sample whose signature does not verify.
    #[error("clock sample signature does not verify")]
    BadSampleSignature,
    /// The claimed agreed time is not the rule's result.
    #[error("claimed agreed time {claimed}, the rule gives {computed}")]
    WrongTime {
        /// Claimed by the proposer.
        claimed: i64,
        /// Recomputed.
        computed: i64,
    },
    /// A tick for an unknown component, repeated (component and submitter), or from a
    /// non-validator.
    #[error("tick transaction for an unknown component, repeated, or not from a validator")]
    BadTick,
    /// A tick transaction whose signature is not its submitter's.
    #[error("tick {index}: the signature is not its submitter's")]
    BadTickSignature {
        /// Its position in the block.
        index: usize,
    },
    /// A tick transaction the chain's tick pool refuses (a number a decided block already
    /// carried: a replay), see [`validate_ticks`].
    #[error("tick {index}: {reason}")]
    TickRefused {
        /// Its position in the block.
        index: usize,
        /// Why.
        reason: TickRejection,
    },
    /// Height 1's time is before the genesis time.
    #[error("height 1 time {time} is before the genesis time {genesis}")]
    BeforeGenesis {
        /// Claimed.
        time: i64,
        /// The genesis time.
        genesis: i64,
    },
    /// The time is too far from this validator's clock (height 1: either side by
    /// [`GENESIS_BOUND_MS`]; later: the samples' median ahead by more than [`HARD_LIMIT_MS`]).
    #[error("time {time} is more than {bound} ms from the local clock {now}")]
    TimeOutOfBounds {
        /// The checked time.
        time: i64,
        /// This validator's clock.
        now: i64,
        /// The bound.
        bound: i64,
    },
    /// More requests (count or encoded bytes) than a block may carry.
    #[error("{count} requests of {bytes} bytes, over the block's bounds")]
    TooManyRequests {
        /// Requests carried.
        count: usize,
        /// Their encoded bytes.
        bytes: usize,
    },
    /// A request whose bounds or signature fail.
    #[error("request {index}: {reason}")]
    BadRequest {
        /// Its position in the block.
        index: usize,
        /// Why.
        reason: RequestError,
    },
    /// The same `(client, number)` twice in one block.
    #[error("request {index} repeats an earlier request number of its client")]
    RepeatedRequest {
        /// Its position in the block.
        index: usize,
    },
}

/// What a validator knows about the previous height to check a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrevCommit {
    /// Round of the previous commit.
    pub round: u32,
    /// Value id of the previous block.
    pub id: Hash32,
    /// Agreed time of the previous block.
    pub agreed_time_ms: i64,
}

/// Checks a proposed block at `height` (every validator, before voting for it; a proposer
/// checks its own block before proposing it) against this validator's clock `now_ms`:
///
/// - the samples of height h-1 (scope, quorum, signatures) and the claimed time, by
///   [`time_rule`]: at height 1 (no samples) the proposer's stamp, not before `genesis_ms` and
///   within [`GENESIS_BOUND_MS`] of `now_ms` ([`TimeRule::genesis`]); later exactly the rule's
///   result, with the samples' median at most [`HARD_LIMIT_MS`] ahead of `now_ms`
///   ([`TimeRule::check`]);
/// - the ticks (known components, from validators, signed by their submitter, at most one per
///   component and submitter; replays are refused by [`validate_ticks`]);
/// - the client requests: at most [`MAX_BLOCK_REQUESTS`] and [`MAX_BLOCK_REQUEST_BYTES`], each
///   within its bounds and signed by its client, no `(client, number)` twice.
///
/// # Errors
/// The first reason the block is invalid.
pub fn validate_block(
    block: &Block,
    height: u64,
    prev: Option<PrevCommit>,
    genesis_ms: i64,
    now_ms: i64,
    validators: &ValidatorSet,
    has_component: &dyn Fn(u32) -> bool,
) -> Result<(), BlockRejection> {
    if block.height != height {
        return Err(BlockRejection::WrongHeight {
            got: block.height,
            expected: height,
        });
    }
    let computed = match prev {
        None => {
            if !block.samples.is_empty()
                || block.prev_round != 0
                || block.prev_id != Hash32::default()
            {
                return Err(BlockRejection::WrongScope);
            }
            if block.agreed_time_ms < genesis_ms {
                return Err(BlockRejection::BeforeGenesis {
                    time: block.agreed_time_ms,
                    genesis: genesis_ms,
                });
            }
            time_rule(validators)
                .genesis(block.agreed_time_ms, now_ms)
                .map_err(|e| time_rejection(e, block.agreed_time_ms, block.samples.len()))?
        }
        Some(p) => {
            if block.prev_round != p.round || block.prev_id != p.id {
                return Err(BlockRejection::WrongScope);
            }
            let quorum = validators.quorum();
            if block.samples.len() < quorum {
                return Err(BlockRejection::TooFewSamples {
                    got: block.samples.len(),
                    quorum,
                });
            }
            let mut last = None;
            for s in &block.samples {
                if !validators.contains(&s.validator) || last.is_some_and(|l| l >= s.validator) {
                    return Err(BlockRejection::BadSampler);
                }
                last = Some(s.validator);
                let scope = VoteExtensionScope::<Ctx>::new(
                    Height(height - 1),
                    Round::new(p.round),
                    p.id,
                    s.validator,
                );
                let bytes = extension_signing_bytes(&scope, &ClockSample { time_ms: s.time_ms });
                if !verify_raw(&PubKey(s.validator.0), &bytes, &s.signature) {
                    return Err(BlockRejection::BadSampleSignature);
                }
            }
            let pairs = sample_pairs(&block.samples, validators);
            time_rule(validators)
                .check(block.agreed_time_ms, Some(p.agreed_time_ms), &pairs, now_ms)
                .map_err(|e| time_rejection(e, block.agreed_time_ms, block.samples.len()))?;
            block.agreed_time_ms
        }
    };
    if block.agreed_time_ms != computed {
        return Err(BlockRejection::WrongTime {
            claimed: block.agreed_time_ms,
            computed,
        });
    }
    let mut seen = BTreeSet::new();
    for (index, t) in block.ticks.iter().enumerate() {
        if !has_component(t.component)
            || !seen.insert((t.component, t.submitter))
            || !validators.contains(&t.submitter)
        {
            return Err(BlockRejection::BadTick);
        }
        if !t.verify() {
            return Err(BlockRejection::BadTickSignature { index });
        }
    }
    let bytes: usize = block.requests.iter().map(|r| r.encoded_len()).sum();
    if block.requests.len() > MAX_BLOCK_REQUESTS || bytes > MAX_BLOCK_REQUEST_BYTES {
        return Err(BlockRejection::TooManyRequests {
            count: block.requests.len(),
            bytes,
        });
    }
    let mut numbers = BTreeSet::new();
    for (index, r) in block.requests.iter().enumerate() {
        r.verify()
            .map_err(|reason| BlockRejection::BadRequest { index, reason })?;
        if !numbers.insert((r.client(), r.request.number)) {
            return Err(BlockRejection::RepeatedRequest { index });
        }
    }
    Ok(())
}

/// Checks a block's ticks against the chain's [`TickPool`] (the last tick number of each
/// submitter and component decided blocks carried): a tick whose number is not above it is a
/// replay and the block is refused. Every validator holds the same numbers after the same
/// decided blocks; run after [`validate_block`].
///
/// # Errors
/// [`BlockRejection::TickRefused`] with the first refused tick.
pub fn validate_ticks(
    block: &Block,
    validators: &ValidatorSet,
    pool: &TickPool<TickTx>,
) -> Result<(), BlockRejection> {
    for (index, t) in block.ticks.iter().enumerate() {
        pool.check(
            t.component,
            validator_index(validators, &t.submitter),
            t.number,
        )
        .map_err(|reason| BlockRejection::TickRefused { index, reason })?;
    }
    Ok(())
}

/// The rejection for a [`TimeRule`] error on a block claiming `claimed` with `samples` samples.
fn time_rejection(e: TimeError, claimed: i64, samples: usize) -> BlockRejection {
    match e {
        TimeError::Mismatch { expected, .. } => BlockRejection::WrongTime {
            claimed,
            computed: expected,
        },
        TimeError::OutOfBounds { time, now, bound } => {
            BlockRejection::TimeOutOfBounds { time, now, bound }
        }
        TimeError::TooFewSamples { need, .. } => BlockRejection::TooFewSamples {
            got: samples,
            quorum: need,
        },
        TimeError::DuplicateSample(_) => BlockRejection::BadSampler,
        // `TimeError` is non-exhaustive: a future reason is still a refusal.
        _ => BlockRejection::WrongTime {
            claimed,
            computed: claimed,
        },
    }
}
