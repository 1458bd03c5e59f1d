//! The block-driven entry point any engine calls: one committed block (height or sequence
//! number, agreed time, ordered transactions that are ticks or client requests) in, results,
//! fires and a state digest out.
//!
//! Engines map onto it directly: sim-bft's primary + sequence number gives `height = seq`, a
//! Tendermint engine's decided value at height h gives `height = h` (rounds never reach the
//! application). The engine provides the order, the agreed time ([`super::time::TimeRule`] on
//! verified samples) and the authenticated sender of each transaction; [`BlockHost`] does the
//! rest, identically on every validator: tick authorization and the flood bound
//! ([`TickGate`]), dispatch to the [`Application`], fail-stop on a fatal application error.

use std::collections::BTreeMap;

use crate::state_hash::{StateHash, StateHasher};

use super::digest_cache::PartDigests;

use super::app::{AppError, Application, ClientId, Digest32, ExecContext, FireNote, Millis};
use super::requests::{DuplicateRequest, ExecutedRequests};
use super::ticks::{TickAuthority, TickCoalescer, TickRejection, ValidatorId};
use super::time::TimeRule;
use super::wire;
use crate::{MemPages, PagesError, ReservedPages, Tick};

/// One transaction of a committed block, as the engine decoded and authenticated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tx {
    /// A tick of `component`; `sender` is the validator whose tick sender signed it (`None`:
    /// the signer is not a validator's tick sender; the tick is refused). `number` is the
    /// sender's tick number (increasing per sender and component): a number not above the last
    /// one ordered for that sender and component is a replay and is skipped.
    Tick {
        /// The component to evaluate.
        component: u32,
        /// The authenticated sender.
        sender: Option<ValidatorId>,
        /// The sender's tick number.
        number: u64,
    },
    /// A client request: `payload` from the authenticated `client`, its request number
    /// `number` (each `(client, number)` executes at most once, [`ExecutedRequests`]).
    Request {
        /// The requester.
        client: ClientId,
        /// The client's request number.
        number: u64,
        /// The request bytes (untrusted: the application must not panic on any).
        payload: Vec<u8>,
    },
}

/// A committed block (or batch) as ccron sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Height (Tendermint) or sequence number (PBFT): strictly increasing.
    pub height: u64,
    /// The block's agreed time (`None` when the engine runs without a time service), computed
    /// by the engine with [`super::time::TimeRule::agreed_from`].
    pub agreed_time_ms: Option<Millis>,
    /// The ordered transactions.
    pub txs: Vec<Tx>,
}

/// Why an ordered request was refused without running (a replicated outcome: every validator
/// refuses the same requests; the request counts as executed and its client gets the refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestRefusal {
    /// Running the request could make the snapshot larger than the host's state limit, which
    /// would make restart and state transfer impossible ([`BlockHost::with_state_limit`]).
    #[error("state full: projected snapshot of {projected} bytes exceeds the limit of {limit}")]
    StateFull {
        /// The projected snapshot size after the request.
        projected: u64,
        /// The limit.
        limit: u64,
    },
}

/// The reply bytes engines send for [`RequestRefusal::StateFull`].
pub const STATE_FULL_REPLY: &[u8] = b"ccron:state-full";

/// What one transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxResult {
    /// A client request's result (to send back to the client).
    Reply(Vec<u8>),
    /// A request whose `(client, number)` already executed (or may have): not run, no reply
    /// (the client got one the first time), counted.
    Duplicate(DuplicateRequest),
    /// A request refused without running (its number is consumed; see [`RequestRefusal`]).
    Refused(RequestRefusal),
    /// A tick that was evaluated.
    TickEvaluated,
    /// A tick refused by the gate (not a validator, unknown component, replayed number,
    /// coalesced): counted, nothing ran.
    TickSkipped(TickRejection),
    /// A tick the application refused (e.g. a component without a table); the block goes on.
    TickFailed(AppError),
}

/// The outcome of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockOutcome {
    /// The block's height.
    pub height: u64,
    /// One result per transaction, in block order.
    pub results: Vec<TxResult>,
    /// The cron actions the block's ticks ran, in order (observation, not replicated state).
    pub fires: Vec<FireNote>,
    /// [`BlockHost::digest`] after the block.
    pub digest: Digest32,
}

/// Errors of [`BlockHost`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The application stopped (fail-stop) on a fatal error; nothing executes any more. The
    /// engine must stop this node loudly (and may restore it from a snapshot).
    #[error("halted: {0}")]
    Halted(AppError),
    /// A block at or below the last executed height.
    #[error("block {got} after block {last}: heights must increase")]
    OutOfOrder {
        /// Last executed height.
        last: u64,
        /// The block's height.
        got: u64,
    },
    /// A block whose agreed time is below the previous block's (the engine's time rule is
    /// monotonic, so this is an engine bug).
    #[error("agreed time {got} ms after {previous} ms")]
    TimeWentBack {
        /// Previous agreed time.
        previous: Millis,
        /// The block's.
        got: Millis,
    },
    /// A snapshot that does not decode or does not fit.
    #[error("bad snapshot: {0}")]
    BadSnapshot(String),
    /// The reserved pages refused an operation.
    #[error("pages: {0}")]
    Pages(#[from] PagesError),
}

/// What a host did, counted: replicated (a function of the executed blocks, in the digest and
/// the snapshot), so every validator reports the same figures at the same height.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostCounters {
    /// Ticks evaluated (admitted by the gate and run, successfully or not).
    pub ticks_evaluated: u64,
    /// Ticks the gate skipped (not a validator, unknown component, replay, coalesced).
    pub ticks_skipped: u64,
    /// Evaluated ticks the application refused.
    pub ticks_failed: u64,
    /// Evaluated ticks per sender (validator index).
    pub ticks_by_sender: BTreeMap<ValidatorId, u64>,
    /// Cron actions fired.
    pub fires: u64,
    /// Client requests executed.
    pub requests_executed: u64,
    /// Ordered requests not run because their `(client, number)` already executed.
    pub requests_duplicate: u64,
    /// Ordered requests refused without running ([`RequestRefusal`]).
    pub requests_refused: u64,
}

impl HostCounters {
    /// The counters as one flat tuple list (the canonical encoding's order).
    fn encoded(&self) -> CountersWire {
        (
            [
                self.ticks_evaluated,
                self.ticks_skipped,
                self.ticks_failed,
                self.fires,
                self.requests_executed,
                self.requests_duplicate,
                self.requests_refused,
            ],
            self.ticks_by_sender.iter().map(|(s, n)| (*s, *n)).collect(),
        )
    }

    fn from_encoded((v, by_sender): CountersWire) -> Self {
        let [
            ticks_evaluated,
            ticks_skipped,
            ticks_failed,
            fires,
            requests_executed,
            requests_duplicate,
            requests_refused,
        ] = v;
        Self {
            ticks_evaluated,
            ticks_skipped,
            ticks_failed,
            ticks_by_sender: by_sender.into_iter().collect(),
            fires,
            requests_executed,
            requests_duplicate,
            requests_refused,
        }
    }
}

/// [`HostCounters`] as encoded: the scalar counters, then evaluated ticks per sender.
type CountersWire = ([u64; 7], Vec<(ValidatorId, u64)>);

/// Bytes a request may add to the snapshot besides its payload and result (record framing).
pub const REQUEST_OVERHEAD_BYTES: u64 = 64;

/// A deterministic upper bound of the snapshot size: the exact size at the last checkpoint
/// ([`BlockHost::checkpoint`]) plus what the requests executed since may have added. Replicated:
/// every validator checkpoints at the same heights, so every validator refuses the same
/// requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateBudget {
    /// The usable limit (`None`: no limit; the budget is still tracked).
    pub limit: Option<u64>,
    /// Snapshot bytes at the last checkpoint.
    pub base: u64,
    /// What the requests executed since may have added.
    pub growth: u64,
}

impl StateBudget {
    /// Checks that a request of `payload_len` bytes keeps the snapshot within the limit. The
    /// bound assumes an application grows by at most the payload, its result (not known yet:
    /// as much as the payload is reserved) and [`REQUEST_OVERHEAD_BYTES`] per request.
    pub fn check(&self, payload_len: usize) -> Result<(), RequestRefusal> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let projected = self
            .base
            .saturating_add(self.growth)
            .saturating_add((payload_len as u64).saturating_mul(2))
            .saturating_add(REQUEST_OVERHEAD_BYTES);
        if projected > limit {
            return Err(RequestRefusal::StateFull { projected, limit });
        }
        Ok(())
    }

    /// Accounts an executed request's possible growth.
    pub fn grow(&mut self, payload_len: usize, result_len: usize) {
        let g = (payload_len as u64)
            .saturating_add(result_len as u64)
            .saturating_add(REQUEST_OVERHEAD_BYTES);
        self.growth = self.growth.saturating_add(g);
    }
}

/// Tick admission at execution: authorization, ticking components, the replay floor and the
/// flood bound. Its state (the floor and the coalescer) is replicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickGate {
    authority: TickAuthority,
    /// Ticking components and their tick periods (empty: every component ticks, none coalesced).
    periods: BTreeMap<u32, u64>,
    coalescer: TickCoalescer,
    /// The highest tick number ordered per (component, sender): a tick at or below it is a
    /// replay.
    floor: BTreeMap<(u32, ValidatorId), u64>,
}

impl TickGate {
    /// A gate for `validators` validators whose components `periods` tick (component → tick
    /// period in ms; empty: any component, no coalescing).
    pub fn new(validators: u32, periods: BTreeMap<u32, u64>) -> Self {
        Self {
            authority: TickAuthority::new(validators),
            periods,
            coalescer: TickCoalescer::new(),
            floor: BTreeMap::new(),
        }
    }

    /// The validators' authority.
    pub fn authority(&self) -> TickAuthority {
        self.authority
    }

    /// Whether `component` ticks (listed, or no list).
    pub fn ticks(&self, component: u32) -> bool {
        self.periods.is_empty() || self.periods.contains_key(&component)
    }

    /// The tick period of `component`, if listed.
    pub fn period_ms(&self, component: u32) -> Option<u64> {
        self.periods.get(&component).copied()
    }

    /// The ticking components and their periods.
    pub fn periods(&self) -> &BTreeMap<u32, u64> {
        &self.periods
    }

    /// The replicated coalescer state.
    pub fn coalescer(&self) -> &TickCoalescer {
        &self.coalescer
    }

    /// The highest tick number ordered for `component` from `sender` (the replay floor).
    pub fn last_number(&self, component: u32, sender: ValidatorId) -> Option<u64> {
        self.floor.get(&(component, sender)).copied()
    }

    /// The replay floor's `(component, sender, number)` entries in ascending order.
    pub fn floor_entries(&self) -> impl Iterator<Item = (u32, ValidatorId, u64)> + '_ {
        self.floor.iter().map(|((c, s), n)| (*c, *s, *n))
    }

    /// Replaces the replicated state (a snapshot's coalescer and floor).
    fn replace_state(
        &mut self,
        coalescer: TickCoalescer,
        floor: impl IntoIterator<Item = (u32, ValidatorId, u64)>,
    ) {
        self.coalescer = coalescer;
        self.floor = floor.into_iter().map(|(c, s, n)| ((c, s), n)).collect();
    }

    /// Admits an ordered tick: its sender must be a validator, its component must tick, its
    /// number must be above the last one ordered for its sender and component (the floor rises
    /// to it), and it must be the first of its sender, component and period of `agreed` time.
    /// Returns the sender.
    pub fn admit(
        &mut self,
        component: u32,
        sender: Option<ValidatorId>,
        number: u64,
        agreed: Option<Millis>,
    ) -> Result<ValidatorId, TickRejection> {
        let sender = self.authority.authorize(sender)?;
        if !self.ticks(component) {
            return Err(TickRejection::UnknownComponent(component));
        }
        if let Some(&last) = self.floor.get(&(component, sender))
            && number <= last
        {
            return Err(TickRejection::Stale {
                component,
                sender,
                number,
                last,
            });
        }
        self.floor.insert((component, sender), number);
        self.coalescer
            .admit(component, sender, self.period_ms(component), agreed)?;
        Ok(sender)
    }
}

/// Runs one admitted tick: the application's `on_tick`, then its fire notes into `fires`.
pub fn run_tick(
    app: &mut dyn Application,
    pages: &mut dyn ReservedPages,
    tick: Tick,
    fires: &mut Vec<FireNote>,
) -> Result<(), AppError> {
    let result = app.on_tick(tick, pages);
    app.take_fire_notes(fires);
    result
}

/// SHA-256 over the non-empty pages in ascending id order (id, length, bytes): for
/// [`MemPages`] the same as [`MemPages::digest`], for any store ([`ReservedPages::digest`]).
pub fn pages_digest(pages: &dyn ReservedPages) -> Result<Digest32, PagesError> {
    pages.digest()
}

/// A ledger driven block by block: the one executor every engine drives (sim-bft's replicas
/// and block-driven nodes alike).
///
/// It owns the application `A`, its reserved pages `P` (the cron tables' schedules), and every
/// piece of replicated state an engine would otherwise keep beside it:
///
/// - exactly-once client requests ([`ExecutedRequests`], the request gate);
/// - the tick gate ([`TickGate`]: authorization, ticking components, the replay floor of tick
///   numbers, the per-period flood bound);
/// - the counters ([`HostCounters`]) and the state budget ([`StateBudget`]: requests that could
///   outgrow the snapshot limit are refused);
/// - the last height and agreed time, and the agreed-time rule ([`TimeRule`]) with which
///   validators check a proposal ([`BlockHost::validate`]).
///
/// Its [`digest`](Self::digest) and [`snapshot`](Self::snapshot) cover all of it, so two
/// engines that execute the same blocks report the same digest.
pub struct BlockHost<A, P = MemPages> {
    app: A,
    pages: P,
    gate: TickGate,
    requests: ExecutedRequests,
    counters: HostCounters,
    budget: StateBudget,
    time_rule: TimeRule,
    last_height: u64,
    last_agreed_ms: Option<Millis>,
    halted: Option<AppError>,
    /// The hash function of the digest and the part digests kept between blocks.
    parts: PartDigests,
}

impl<A, P> std::fmt::Debug for BlockHost<A, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockHost")
            .field("gate", &self.gate)
            .field("counters", &self.counters)
            .field("budget", &self.budget)
            .field("last_height", &self.last_height)
            .field("last_agreed_ms", &self.last_agreed_ms)
            .field("halted", &self.halted)
            .finish_non_exhaustive()
    }
}

/// The layout version of [`BlockHost::snapshot`]'s bytes: 4, the executed requests in their
/// layout 5 (256-bit client ids, legacy watermarks). [`BlockHost::restore`] also reads layout 3
/// (executed requests of layout 4, 64-bit ids: [`ExecutedRequests::decode_v4`]) and layout 2
/// (executed requests of layout 3: [`ExecutedRequests::decode_legacy`]) and migrates them.
pub const HOST_SNAPSHOT_VERSION: u32 = 4;

/// The layout before 256-bit client ids [`BlockHost::restore`] still reads (executed requests
/// of layout 4).
const HOST_SNAPSHOT_V3: u32 = 3;

/// The oldest layout [`BlockHost::restore`] still reads (executed requests of layout 3).
const HOST_SNAPSHOT_LEGACY: u32 = 2;

/// The body of a host snapshot (layouts 2 to 4): application snapshot, non-empty pages, last
/// height, last agreed time, coalescer entries, tick floor entries, executed requests,
/// counters.
type SnapshotBody = (
    Vec<u8>,
    Vec<(u32, Vec<u8>)>,
    u64,
    Option<Millis>,
    Vec<(u32, u32, i64)>,
    Vec<(u32, u32, u64)>,
    Vec<u8>,
    CountersWire,
);

/// A whole host snapshot: version, body, and the state budget `(base, growth)` (last, so a
/// checkpoint can set the base to the body's own length).
type SnapshotFile = (u32, Vec<u8>, (u64, u64));

impl<A: Application, P: ReservedPages> BlockHost<A, P> {
    /// A host for `app` over `pages` with `gate`, at genesis (height 0), with the default
    /// time rule of the gate's validator set ([`TimeRule::for_validators`], 10 s bounds) and no
    /// state limit. Call [`BlockHost::reload`] when `pages` come from durable storage.
    pub fn new(app: A, pages: P, gate: TickGate) -> Self {
        let validators = gate.authority.validators();
        Self {
            app,
            pages,
            gate,
            requests: ExecutedRequests::new(),
            counters: HostCounters::default(),
            budget: StateBudget::default(),
            time_rule: TimeRule::for_validators(validators, 10_000, 10_000),
            last_height: 0,
            last_agreed_ms: None,
            halted: None,
            parts: PartDigests::default(),
        }
    }

    /// The same host taking its [`digest`](Self::digest) (every part of it) with the hash
    /// function `hash` (default [`StateHash::Sha256`], the digest every engine compares and
    /// records; every validator must use the same).
    pub fn with_state_hash(mut self, hash: StateHash) -> Self {
        self.parts = PartDigests::new(hash);
        self
    }

    /// The hash function of [`Self::digest`].
    pub fn state_hash(&self) -> StateHash {
        self.parts.hash
    }

    /// The same host with the agreed-time rule `rule` (every validator must use the same).
    pub fn with_time_rule(mut self, rule: TimeRule) -> Self {
        self.time_rule = rule;
        self
    }

    /// The same host refusing requests that could make its snapshot larger than
    /// `limit_bytes` ([`RequestRefusal::StateFull`]). The budget is exact at each
    /// [`checkpoint`](Self::checkpoint); every validator must use the same limit and
    /// checkpoint at the same heights.
    pub fn with_state_limit(mut self, limit_bytes: u64) -> Self {
        self.budget.limit = Some(limit_bytes);
        self
    }

    /// Sets (or clears) the state limit of [`with_state_limit`](Self::with_state_limit): an
    /// engine whose own snapshot wraps the host's may lower it at each checkpoint by what it
    /// adds (every validator the same, at the same heights).
    pub fn set_state_limit(&mut self, limit_bytes: Option<u64>) {
        self.budget.limit = limit_bytes;
    }

    /// The same host with an exactly-once table of `requests` (e.g.
    /// [`ExecutedRequests::with_max_clients`]); every validator must use the same bound.
    pub fn with_requests(mut self, requests: ExecutedRequests) -> Self {
        self.requests = requests;
        self.parts.requests_changed();
        self
    }

    /// Reloads what the application caches from the pages (after a restart from storage).
    pub fn reload(&mut self) -> Result<(), AppError> {
        self.parts.app_changed();
        self.app.reload(&self.pages)
    }

    /// Executes one committed block. Blocks must come in increasing height; a halted host
    /// executes nothing ([`HostError::Halted`]).
    ///
    /// In block order: a request runs once per `(client, number)` (a repeat is
    /// [`TxResult::Duplicate`]) and only within the state budget ([`TxResult::Refused`]); a
    /// tick runs through the [`TickGate`] and then the application's `on_tick`.
    pub fn execute_block(&mut self, block: &Block) -> Result<BlockOutcome, HostError> {
        if let Some(e) = &self.halted {
            return Err(HostError::Halted(e.clone()));
        }
        if block.height <= self.last_height {
            return Err(HostError::OutOfOrder {
                last: self.last_height,
                got: block.height,
            });
        }
        if let (Some(previous), Some(got)) = (self.last_agreed_ms, block.agreed_time_ms)
            && got < previous
        {
            return Err(HostError::TimeWentBack { previous, got });
        }
        let ctx = ExecContext {
            seq: block.height,
            agreed_time_ms: block.agreed_time_ms,
        };
        let mut results = Vec::with_capacity(block.txs.len());
        let mut fires = Vec::new();
        for tx in &block.txs {
            let result = match tx {
                Tx::Request {
                    client,
                    number,
                    payload,
                } => self.run_request(ctx, *client, *number, payload),
                Tx::Tick {
                    component,
                    sender,
                    number,
                } => self.run_gated_tick(block, *component, *sender, *number, &mut fires),
            };
            results.push(result);
            if let Some(e) = self.app.halted() {
                tracing::error!(height = block.height, cause = %e, "application halted (fail-stop)");
                self.halted = Some(e.clone());
                break;
            }
        }
        self.counters.fires = self.counters.fires.saturating_add(fires.len() as u64);
        self.last_height = block.height;
        if block.agreed_time_ms.is_some() {
            self.last_agreed_ms = block.agreed_time_ms;
        }
        if let Some(e) = &self.halted {
            return Err(HostError::Halted(e.clone()));
        }
        self.refresh_parts();
        Ok(BlockOutcome {
            height: block.height,
            results,
            fires,
            digest: self.digest(),
        })
    }

    fn run_request(
        &mut self,
        ctx: ExecContext,
        client: ClientId,
        number: u64,
        payload: &[u8],
    ) -> TxResult {
        // The number is consumed whether the request runs or is refused: either is its
        // replicated outcome.
        self.parts.requests_changed();
        if let Err(e) = self.requests.admit(client, number, ctx.agreed_time_ms) {
            self.counters.requests_duplicate += 1;
            tracing::debug!(height = ctx.seq, reason = %e, "ordered request not executed");
            return TxResult::Duplicate(e);
        }
        if let Err(e) = self.budget.check(payload.len()) {
            self.counters.requests_refused += 1;
            tracing::warn!(height = ctx.seq, client = %client.short(), reason = %e, "request refused");
            return TxResult::Refused(e);
        }
        self.parts.app_changed();
        let reply = self.app.execute(ctx, client, payload);
        self.budget.grow(payload.len(), reply.len());
        self.counters.requests_executed += 1;
        TxResult::Reply(reply)
    }

    fn run_gated_tick(
        &mut self,
        block: &Block,
        component: u32,
        sender: Option<ValidatorId>,
        number: u64,
        fires: &mut Vec<FireNote>,
    ) -> TxResult {
        match self
            .gate
            .admit(component, sender, number, block.agreed_time_ms)
        {
            Err(e) => {
                self.counters.ticks_skipped += 1;
                tracing::debug!(height = block.height, component, reason = %e, "tick skipped");
                TxResult::TickSkipped(e)
            }
            Ok(sender) => {
                self.counters.ticks_evaluated += 1;
                *self.counters.ticks_by_sender.entry(sender).or_insert(0) += 1;
                let tick = Tick::new(component, block.height, block.agreed_time_ms);
                self.parts.app_changed();
                match run_tick(&mut self.app, &mut self.pages, tick, fires) {
                    Ok(()) => TxResult::TickEvaluated,
                    Err(e) => {
                        self.counters.ticks_failed += 1;
                        tracing::warn!(height = block.height, component, error = %e, "tick rejected");
                        TxResult::TickFailed(e)
                    }
                }
            }
        }
    }

    /// Digest of the replicated state: the application's digest, the pages, the last agreed
    /// time, the tick gate (coalescer and replay floor), the executed requests and the
    /// counters. Equal on every honest validator after the same blocks, on every engine. (The
    /// state budget is not in it: a checkpoint changes it without a block, and what it decides,
    /// a refusal, shows in the counters.)
    ///
    /// The application's and the exactly-once table's digests are kept from the last block
    /// when it did not change them (`digest_cache`), and every part is taken with the host's
    /// hash function ([`Self::with_state_hash`]).
    pub fn digest(&self) -> Digest32 {
        self.digest_of(
            self.parts.hash,
            self.parts.app(|hash| self.app.digest_in(hash)),
            self.parts.requests(|hash| self.requests.digest_in(hash)),
        )
    }

    /// [`Self::digest`] with every part computed now, nothing kept (what the kept parts must
    /// always equal).
    pub fn digest_from_scratch(&self) -> Digest32 {
        self.digest_with(self.parts.hash)
    }

    /// The digest [`Self::digest`] would be under the hash function `hash`, computed now (e.g.
    /// the SHA-256 digest of a host that runs BLAKE3, to compare its state with another
    /// engine's or another scheme's run).
    pub fn digest_with(&self, hash: StateHash) -> Digest32 {
        self.digest_of(
            hash,
            self.app.digest_in(hash),
            self.requests.digest_in(hash),
        )
    }

    /// Recomputes the part digests a block's changes dropped.
    fn refresh_parts(&mut self) {
        let (app, requests) = (&self.app, &self.requests);
        self.parts
            .refresh(|hash| app.digest_in(hash), |hash| requests.digest_in(hash));
    }

    /// The host's digest over the application's and the exactly-once table's part digests.
    fn digest_of(&self, hash: StateHash, app: Digest32, requests: Digest32) -> Digest32 {
        let mut h = StateHasher::new(hash);
        h.update(b"ccron-host-state/v2");
        h.update(app);
        match self.pages.digest_in(hash) {
            Ok(d) => h.update(d),
            // A store that cannot read its own pages: the digest says so (never equal to a
            // healthy validator's).
            Err(e) => h.update(format!("pages unreadable: {e}").as_bytes()),
        }
        h.update(self.last_agreed_ms.unwrap_or(i64::MIN).to_le_bytes());
        for (c, s, p) in self.gate.coalescer().entries() {
            h.update(c.to_le_bytes());
            h.update(s.to_le_bytes());
            h.update(p.to_le_bytes());
        }
        h.update(b"floor");
        for (c, s, n) in self.gate.floor_entries() {
            h.update(c.to_le_bytes());
            h.update(s.to_le_bytes());
            h.update(n.to_le_bytes());
        }
        h.update(requests);
        let (counters, by_sender) = self.counters.encoded();
        for v in counters {
            h.update(v.to_le_bytes());
        }
        for (s, n) in by_sender {
            h.update(s.to_le_bytes());
            h.update(n.to_le_bytes());
        }
        h.finalize()
    }

    fn snapshot_body(&self) -> Result<Vec<u8>, HostError> {
        let mut pages = Vec::new();
        for id in 0..self.pages.num_pages() {
            if let Some(d) = self.pages.load(id)?
                && !d.is_empty()
            {
                pages.push((id, d.to_vec()));
            }
        }
        let body: SnapshotBody = (
            self.app.snapshot(),
            pages,
            self.last_height,
            self.last_agreed_ms,
            self.gate.coalescer().entries().collect(),
            self.gate.floor_entries().collect(),
            self.requests
                .encode()
                .map_err(|e| HostError::BadSnapshot(e.to_string()))?,
            self.counters.encoded(),
        );
        wire::encode(&body).map_err(|e| HostError::BadSnapshot(e.to_string()))
    }

    fn seal(body: Vec<u8>, budget: StateBudget) -> Result<Vec<u8>, HostError> {
        let file: SnapshotFile = (HOST_SNAPSHOT_VERSION, body, (budget.base, budget.growth));
        wire::encode(&file).map_err(|e| HostError::BadSnapshot(e.to_string()))
    }

    /// Canonical encoding of the whole replicated state (for restarts and the engine's state
    /// sync), layout [`HOST_SNAPSHOT_VERSION`].
    pub fn snapshot(&self) -> Result<Vec<u8>, HostError> {
        Self::seal(self.snapshot_body()?, self.budget)
    }

    /// A snapshot taken at a checkpoint height, which every validator takes at the same
    /// heights: the state budget becomes exact (its base is the snapshot's size, its growth
    /// zero) before the snapshot records it, so a validator that installs this snapshot holds
    /// the same budget as one that took it.
    pub fn checkpoint(&mut self) -> Result<Vec<u8>, HostError> {
        let body = self.snapshot_body()?;
        self.budget.base = body.len() as u64;
        self.budget.growth = 0;
        Self::seal(body, self.budget)
    }

    /// Replaces the state with a snapshot of [`BlockHost::snapshot`]. The snapshot is decoded
    /// and checked, and the application restored, before any page changes; a store that then
    /// refuses a write halts the host. A snapshot of another layout is refused
    /// ([`HostError::BadSnapshot`]).
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), HostError> {
        self.parts.all_changed();
        let bad = |e: String| HostError::BadSnapshot(e);
        let (version, body, (base, growth)): SnapshotFile =
            wire::decode(snapshot, wire::ABSOLUTE_LIMIT_BYTES).map_err(|e| bad(e.to_string()))?;
        if !(HOST_SNAPSHOT_LEGACY..=HOST_SNAPSHOT_VERSION).contains(&version) {
            return Err(bad(format!(
                "host snapshot layout {version}, this build reads {HOST_SNAPSHOT_LEGACY} to {HOST_SNAPSHOT_VERSION}"
            )));
        }
        let (app, pages, height, agreed, evals, floor, executed, counters): SnapshotBody =
            wire::decode(&body, wire::ABSOLUTE_LIMIT_BYTES).map_err(|e| bad(e.to_string()))?;
        if pages
            .iter()
            .any(|(id, d)| *id >= self.pages.num_pages() || d.len() > self.pages.page_size())
        {
            return Err(bad("pages do not fit the store".into()));
        }
        let requests = match version {
            HOST_SNAPSHOT_LEGACY => {
                ExecutedRequests::decode_legacy(&executed, wire::ABSOLUTE_LIMIT_BYTES)
            }
            HOST_SNAPSHOT_V3 => ExecutedRequests::decode_v4(&executed, wire::ABSOLUTE_LIMIT_BYTES),
            _ => ExecutedRequests::decode(&executed, wire::ABSOLUTE_LIMIT_BYTES),
        }
        .map_err(|e| bad(e.to_string()))?;
        if requests.max_clients() != self.requests.max_clients() {
            return Err(bad(format!(
                "executed-requests bound {} in the snapshot, {} here",
                requests.max_clients(),
                self.requests.max_clients()
            )));
        }
        self.app
            .restore(&app)
            .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        let by_id: BTreeMap<u32, Vec<u8>> = pages.into_iter().collect();
        for id in 0..self.pages.num_pages() {
            let written = match by_id.get(&id) {
                Some(d) => self.pages.save(id, d),
                None => self.pages.zero(id),
            };
            if let Err(e) = written {
                let fatal = AppError::Fatal(format!("restored pages not saved: {e}"));
                self.halted = Some(fatal.clone());
                return Err(HostError::Halted(fatal));
            }
        }
        self.app
            .reload(&self.pages)
            .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        self.last_height = height;
        self.last_agreed_ms = agreed;
        self.gate
            .replace_state(TickCoalescer::from_entries(evals), floor);
        self.requests = requests;
        self.counters = HostCounters::from_encoded(counters);
        self.budget.base = base;
        self.budget.growth = growth;
        Ok(())
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The application, giving up the host (its final state).
    pub fn into_app(self) -> A {
        self.app
    }

    /// The application, mutably (for an engine's own setup outside execution: never to change
    /// replicated state).
    pub fn app_mut(&mut self) -> &mut A {
        self.parts.app_changed();
        &mut self.app
    }

    /// The reserved pages.
    pub fn pages(&self) -> &P {
        &self.pages
    }

    /// The reserved pages, mutably: for an engine that keeps replicated data of its own in
    /// pages the application does not use (sim-bft's agreed-time page), written only while it
    /// executes a block.
    pub fn pages_mut(&mut self) -> &mut P {
        &mut self.pages
    }

    /// The tick gate.
    pub fn gate(&self) -> &TickGate {
        &self.gate
    }

    /// The exactly-once table (an engine's admission refuses what it would refuse).
    pub fn requests(&self) -> &ExecutedRequests {
        &self.requests
    }

    /// The counters.
    pub fn counters(&self) -> &HostCounters {
        &self.counters
    }

    /// The state budget.
    pub fn budget(&self) -> StateBudget {
        self.budget
    }

    /// The agreed-time rule.
    pub fn time_rule(&self) -> &TimeRule {
        &self.time_rule
    }

    /// Last executed height (0 at genesis).
    pub fn last_height(&self) -> u64 {
        self.last_height
    }

    /// Last agreed time.
    pub fn last_agreed_ms(&self) -> Option<Millis> {
        self.last_agreed_ms
    }

    /// Why the host stopped, if it did.
    pub fn halted(&self) -> Option<&AppError> {
        self.halted.as_ref()
    }

    /// Stops the host (fail-stop) for a reason outside the application (e.g. an engine's own
    /// replicated page could not be saved): nothing executes any more.
    pub fn halt(&mut self, cause: AppError) {
        if self.halted.is_none() {
            tracing::error!(cause = %cause, "host halted (fail-stop)");
            self.halted = Some(cause);
        }
    }
}

/// Runs `blocks` through `host` in order and returns every block's outcome (the equivalence
/// helper: feed the same blocks to two engines' hosts, or to sim-bft and to a host, and compare
/// fires and digests). Stops at the first error.
pub fn replay<A: Application, P: ReservedPages>(
    host: &mut BlockHost<A, P>,
    blocks: &[Block],
) -> Result<Vec<BlockOutcome>, HostError> {
    blocks.iter().map(|b| host.execute_block(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::cron_ledger::tests::ledger;

    fn host() -> BlockHost<crate::host::CronLedger<crate::host::cron_ledger::tests::KvLedger>> {
        BlockHost::new(
            ledger(),
            MemPages::new(4_096, 4),
            TickGate::new(4, [(1, 1_000)].into_iter().collect()),
        )
    }

    fn tick(sender: Option<u32>, number: u64) -> Tx {
        Tx::Tick {
            component: 1,
            sender,
            number,
        }
    }

    fn put(number: u64) -> Tx {
        Tx::Request {
            client: crate::authz::ClientId::from_index(7),
            number,
            payload: b"x".to_vec(),
        }
    }

    fn blocks() -> Vec<Block> {
        (1..=6u64)
            .map(|h| Block {
                height: h,
                agreed_time_ms: Some(1_000 * h as i64 + 500),
                txs: vec![
                    put(h),
                    tick(Some((h % 4) as u32), 2 * h),
                    tick(Some((h % 4) as u32), 2 * h + 1),
                ],
            })
            .collect()
    }

    #[test]
    fn gate_refuses_strangers_unknown_components_and_floods() {
        let mut h = host();
        let b = Block {
            height: 1,
            agreed_time_ms: Some(1_500),
            txs: vec![
                tick(None, 1),
                tick(Some(4), 1),
                Tx::Tick {
                    component: 9,
                    sender: Some(0),
                    number: 1,
                },
                tick(Some(0), 1),
                tick(Some(0), 2),
                tick(Some(1), 5),
                tick(Some(1), 5),
                tick(Some(1), 4),
                put(3),
                put(3),
            ],
        };
        let o = h.execute_block(&b).unwrap();
        let stale = |number| {
            TxResult::TickSkipped(TickRejection::Stale {
                component: 1,
                sender: 1,
                number,
                last: 5,
            })
        };
        assert_eq!(
            o.results,
            vec![
                TxResult::TickSkipped(TickRejection::NotAValidator),
                TxResult::TickSkipped(TickRejection::NotAValidator),
                TxResult::TickSkipped(TickRejection::UnknownComponent(9)),
                TxResult::TickEvaluated,
                TxResult::TickSkipped(TickRejection::Coalesced {
                    component: 1,
                    sender: 0,
                    period: 1
                }),
                TxResult::TickEvaluated,
                stale(5),
                stale(4),
                TxResult::Reply(Vec::new()),
                TxResult::Duplicate(DuplicateRequest::Executed {
                    client: crate::authz::ClientId::from_index(7),
                    number: 3
                }),
            ]
        );
        let c = h.counters();
        assert_eq!(
            (
                c.ticks_evaluated,
                c.ticks_skipped,
                c.requests_executed,
                c.requests_duplicate
            ),
            (2, 6, 1, 1)
        );
        assert_eq!(c.ticks_by_sender, [(0, 1), (1, 1)].into_iter().collect());
        assert_eq!(h.gate().last_number(1, 1), Some(5));
        // The periodic entry fired once (first evaluated tick), not per tick.
        assert_eq!(o.fires.len(), 1);
        assert_eq!(h.app().fires().get(&(1, 0)), Some(&1));
        assert_eq!(o.digest, h.digest());
        // A replayed tick in a later block is still refused.
        let later = Block {
            height: 2,
            agreed_time_ms: Some(9_500),
            txs: vec![tick(Some(1), 5), tick(Some(1), 6)],
        };
        let o2 = h.execute_block(&later).unwrap();
        assert_eq!(o2.results, vec![stale(5), TxResult::TickEvaluated]);
    }

    #[test]
    fn heights_increase_and_time_never_goes_back() {
        let mut h = host();
        let b = |height, t| Block {
            height,
            agreed_time_ms: Some(t),
            txs: vec![],
        };
        h.execute_block(&b(2, 5_000)).unwrap();
        assert_eq!(
            h.execute_block(&b(2, 6_000)),
            Err(HostError::OutOfOrder { last: 2, got: 2 })
        );
        assert_eq!(
            h.execute_block(&b(3, 4_999)),
            Err(HostError::TimeWentBack {
                previous: 5_000,
                got: 4_999
            })
        );
        assert_eq!(h.last_height(), 2);
        h.execute_block(&b(5, 5_000)).unwrap();
        assert_eq!(h.last_height(), 5);
    }

    #[test]
    fn replicas_agree_and_a_restored_one_continues_identically() {
        let all = blocks();
        let mut a = host();
        let mut b = host();
        let oa = replay(&mut a, &all).unwrap();
        let ob = replay(&mut b, &all).unwrap();
        assert_eq!(oa, ob);
        assert!(oa.iter().map(|o| o.fires.len()).sum::<usize>() >= 5);
        // A third restored from a snapshot taken midway continues to the same state.
        let mut c = host();
        let mut d = host();
        replay(&mut c, &all[..3]).unwrap();
        d.restore(&c.snapshot().unwrap()).unwrap();
        assert_eq!(d.digest(), c.digest());
        assert_eq!(d.last_height(), 3);
        let od = replay(&mut d, &all[3..]).unwrap();
        assert_eq!(od.last().map(|o| o.digest), oa.last().map(|o| o.digest));
        // A different agreed time changes the outcome (the digest covers it).
        let mut e = host();
        let mut shifted = all.clone();
        shifted[5].agreed_time_ms = Some(9_999);
        let oe = replay(&mut e, &shifted).unwrap();
        assert_ne!(oe.last().map(|o| o.digest), oa.last().map(|o| o.digest));
        assert!(d.restore(b"junk").is_err());
        assert_eq!(d.digest(), a.digest());
    }

    #[test]
    fn a_state_limit_refuses_requests_that_could_outgrow_it_and_checkpoints_make_it_exact() {
        let base = host().snapshot_body().unwrap().len() as u64;
        // Room for two requests of 8 bytes (each reserves 2 x payload + overhead), not three.
        let limit = base + 2 * (16 + REQUEST_OVERHEAD_BYTES) + 10;
        let mut h = host().with_state_limit(limit);
        h.checkpoint().unwrap();
        assert_eq!(h.budget().base, base);
        let req = |number| Tx::Request {
            client: crate::authz::ClientId::from_index(3),
            number,
            payload: vec![b'k'; 8],
        };
        let b = Block {
            height: 1,
            agreed_time_ms: Some(1_000),
            txs: vec![req(1), req(2), req(3), req(3)],
        };
        let o = h.execute_block(&b).unwrap();
        assert!(matches!(o.results[0], TxResult::Reply(_)));
        assert!(matches!(o.results[1], TxResult::Reply(_)));
        assert!(matches!(
            o.results[2],
            TxResult::Refused(RequestRefusal::StateFull { .. })
        ));
        // The refused number is consumed: its repeat is a duplicate, not a second refusal.
        assert!(matches!(o.results[3], TxResult::Duplicate(_)));
        assert_eq!(h.counters().requests_refused, 1);
        // A host restored from a checkpoint holds the same budget as the one that took it.
        let snap = h.checkpoint().unwrap();
        let mut r = host().with_state_limit(limit);
        r.restore(&snap).unwrap();
        assert_eq!(r.budget(), h.budget());
        assert_eq!(r.digest(), h.digest());
        // A snapshot of another layout is refused, loudly.
        let other: SnapshotFile = (1, Vec::new(), (0, 0));
        let bytes = wire::encode(&other).unwrap();
        assert!(
            matches!(r.restore(&bytes), Err(HostError::BadSnapshot(m)) if m.contains("layout 1"))
        );
    }

    use proptest::prelude::*;

    fn arb_tx() -> impl Strategy<Value = Tx> {
        prop_oneof![
            (0u32..3, proptest::option::weighted(0.9, 0u32..6), 0u64..8).prop_map(
                |(component, sender, number)| Tx::Tick {
                    component,
                    sender,
                    number
                }
            ),
            (
                0u64..4,
                0u64..6,
                proptest::collection::vec(any::<u8>(), 0..4)
            )
                .prop_map(|(client, number, payload)| Tx::Request {
                    client: crate::authz::ClientId::from_index(client),
                    number,
                    payload
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any sequence of blocks (ticks from validators and strangers, known and unknown
        /// components, floods, requests, time jumps): two hosts fed the same blocks end equal,
        /// and a host restored from the first one's snapshot at any point continues to the
        /// same digest and the same fires.
        #[test]
        fn hosts_fed_the_same_blocks_agree_even_across_a_restore(
            steps in proptest::collection::vec(
                (0i64..3_000, proptest::collection::vec(arb_tx(), 0..6)),
                1..24,
            ),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut t = 0i64;
            let blocks: Vec<Block> = steps
                .into_iter()
                .enumerate()
                .map(|(i, (dt, txs))| {
                    t += dt;
                    Block { height: i as u64 + 1, agreed_time_ms: Some(t), txs }
                })
                .collect();
            let mut a = host();
            let mut b = host();
            let oa = replay(&mut a, &blocks).unwrap();
            let ob = replay(&mut b, &blocks).unwrap();
            prop_assert_eq!(&oa, &ob);
            let k = cut.index(blocks.len() + 1);
            let mut c = host();
            replay(&mut c, &blocks[..k]).unwrap();
            let mut d = host();
            d.restore(&c.snapshot().unwrap()).unwrap();
            prop_assert_eq!(d.digest(), c.digest());
            let od = replay(&mut d, &blocks[k..]).unwrap();
            prop_assert_eq!(&od[..], &oa[k..]);
            prop_assert_eq!(d.digest(), a.digest());
            prop_assert_eq!(d.app().fires(), a.app().fires());
        }
    }

    /// What a host may go through between two digests.
    #[derive(Debug, Clone)]
    enum Op {
        /// A block `dt` ms after the last one.
        Block(i64, Vec<Tx>),
        /// A restore from the snapshot taken before the op at this index (or at genesis).
        Restore(proptest::sample::Index),
        Reload,
        /// A request run straight through `app_mut` (an engine's setup).
        AppMut,
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0i64..3_000, proptest::collection::vec(arb_tx(), 0..6))
                .prop_map(|(dt, txs)| Op::Block(dt, txs)),
            1 => any::<proptest::sample::Index>().prop_map(Op::Restore),
            1 => Just(Op::Reload),
            1 => Just(Op::AppMut),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The kept part digests are never stale: after any sequence of blocks, restores,
        /// reloads and `app_mut` changes, under both hash functions, the digest equals the one
        /// computed from scratch, and after every block the outcome reports it.
        #[test]
        fn kept_part_digests_equal_a_fresh_computation(
            ops in proptest::collection::vec(arb_op(), 1..40),
            blake in any::<bool>(),
        ) {
            let hash = if blake { StateHash::Blake3 } else { StateHash::Sha256 };
            let mut h = host().with_state_hash(hash);
            prop_assert_eq!(h.state_hash(), hash);
            let mut snapshots = vec![h.snapshot().unwrap()];
            let mut t = 0i64;
            for op in ops {
                match op {
                    Op::Block(dt, txs) => {
                        t += dt;
                        let block = Block { height: h.last_height() + 1, agreed_time_ms: Some(t), txs };
                        let o = h.execute_block(&block).unwrap();
                        prop_assert_eq!(o.digest, h.digest_from_scratch());
                    }
                    Op::Restore(i) => {
                        let snap = &snapshots[i.index(snapshots.len())];
                        h.restore(snap).unwrap();
                        t = h.last_agreed_ms().unwrap_or(0);
                    }
                    Op::Reload => h.reload().unwrap(),
                    Op::AppMut => {
                        let ctx = ExecContext { seq: 0, agreed_time_ms: None };
                        let _ = h.app_mut().execute(ctx, Default::default(), b"y");
                    }
                }
                prop_assert_eq!(h.digest(), h.digest_from_scratch());
                snapshots.push(h.snapshot().unwrap());
            }
        }
    }

    /// The digest under SHA-256 is the one a host without a chosen hash function reports, and
    /// BLAKE3's differs from it.
    #[test]
    fn the_default_state_hash_is_sha256() {
        let mut a = host();
        let mut b = host().with_state_hash(StateHash::Sha256);
        let mut c = host().with_state_hash(StateHash::Blake3);
        assert_eq!(a.state_hash(), StateHash::Sha256);
        for block in blocks() {
            let (oa, ob, oc) = (
                a.execute_block(&block).unwrap(),
                b.execute_block(&block).unwrap(),
                c.execute_block(&block).unwrap(),
            );
            assert_eq!(oa, ob);
            assert_ne!(oa.digest, oc.digest);
            assert_eq!(oa.results, oc.results);
            assert_eq!(c.digest_with(StateHash::Sha256), oa.digest);
            assert_eq!(a.digest_with(StateHash::Blake3), oc.digest);
        }
    }

    #[test]
    fn a_failed_schedule_save_halts_the_host() {
        let mut h = BlockHost::new(
            ledger(),
            crate::pages::CrashAfter::new(MemPages::new(4_096, 4), 0),
            TickGate::new(4, BTreeMap::new()),
        );
        let b = Block {
            height: 1,
            agreed_time_ms: Some(1_000),
            txs: vec![tick(Some(0), 1), put(1)],
        };
        assert!(matches!(
            h.execute_block(&b),
            Err(HostError::Halted(AppError::Fatal(_)))
        ));
        assert!(h.halted().is_some());
        // Nothing executes any more.
        let next = Block { height: 2, ..b };
        assert!(matches!(h.execute_block(&next), Err(HostError::Halted(_))));
    }
}
