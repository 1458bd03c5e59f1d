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

mod budget;
mod counters;
mod digest;
mod gate;
mod snapshot;
#[cfg(test)]
mod tests;
mod types;

pub use budget::{REQUEST_OVERHEAD_BYTES, StateBudget};
pub use counters::HostCounters;
pub use gate::TickGate;
pub use snapshot::HOST_SNAPSHOT_VERSION;
pub use types::{Block, BlockOutcome, HostError, RequestRefusal, STATE_FULL_REPLY, Tx, TxResult};

use super::digest_cache::PartDigests;

use super::app::{AppError, Application, ClientId, Digest32, ExecContext, FireNote, Millis};
use super::requests::ExecutedRequests;
use super::ticks::ValidatorId;
use super::time::TimeRule;
use crate::state_hash::StateHash;
use crate::{MemPages, PagesError, ReservedPages, Tick};

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

impl<A: Application, P: ReservedPages> BlockHost<A, P> {
    /// A host for `app` over `pages` with `gate`, at genesis (height 0), with the default
    /// time rule of the gate's validator set ([`TimeRule::for_validators`], 10 s bounds) and no
    /// state limit. Call [`BlockHost::reload`] when `pages` come from durable storage.
    pub fn new(app: A, pages: P, gate: TickGate) -> Self {
        let validators = gate.authority().validators();
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
