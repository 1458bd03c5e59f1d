//! The execution boundary: what a replica executes, and nothing else.
//!
//! Committed batches (blocks) execute in log order, and the transactions of one batch in batch
//! order: a user request goes to [`Application::execute`], a tick to [`Application::on_tick`]
//! with the batch's sequence number (or height) and agreed time and the reserved pages. Because
//! both reach the same object, a ledger's cron actions can change the ledger's own state (the
//! `CronLedger` of the `ccron-ledgers` crate). [`TickExecutor`] handles ticks apart from the
//! application, and [`WithTicks`] joins an application and a separate tick executor into one
//! [`Application`].
//!
//! Engine-independent: sim-bft's replica and any other engine's adapter drive the same trait
//! (see `docs/host.md`).

use std::collections::BTreeMap;

use crate::{PageRange, ReservedPages, Tick};

/// A client's id as the engine authenticated it (the requester of a transaction): 256 bits,
/// see [`crate::authz::ClientId`].
pub use crate::authz::ClientId;

/// Milliseconds since the Unix epoch (agreed time and clock readings).
pub type Millis = i64;

/// A 32-byte digest (SHA-256) of an application's state.
pub type Digest32 = [u8; 32];

/// One cron action run by a tick: which one, and the due point it ran for (an observation for
/// reports and timelines, never replicated state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireNote {
    /// Component of the tick.
    pub component: u32,
    /// Position of the entry in the component's table (for a schedule book, the book's position).
    pub position: u32,
    /// The schedule id, for a run of a schedule book.
    pub schedule: Option<u64>,
    /// The due point the action ran for (`None` for user rules, which have none).
    pub due: Option<crate::Due>,
}

/// Errors of applications and tick executors.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppError {
    /// A snapshot does not decode or violates the application's invariants.
    #[error("bad snapshot: {0}")]
    BadSnapshot(String),
    /// A tick could not be handled; the batch still executes on.
    #[error("tick rejected: {0}")]
    TickRejected(String),
    /// A tick named a component without a cron table (no state is created for it).
    #[error("no cron table for component {0}")]
    UnknownComponent(u32),
    /// The reserved pages refused an operation.
    #[error("pages: {0}")]
    Pages(#[from] crate::PagesError),
    /// The application could not complete a replicated operation (e.g. a save of its pages
    /// failed): carrying on would let its pages, snapshot and digest fall behind its memory.
    /// The replica stops (fail-stop, [`Application::halted`]).
    #[error("fatal: {0}")]
    Fatal(String),
    /// The ledger stopped at an upgrade ([`crate::schedule::UpgradeHalt`]): fail-stop like
    /// [`AppError::Fatal`] (the same text), typed so a host can tell an upgrade stop (restart on
    /// another build) from a failure without reading the message.
    #[error("fatal: {0}")]
    Upgrade(crate::schedule::UpgradeHalt),
}

impl AppError {
    /// The upgrade stop this error is, if it is one.
    pub fn upgrade_halt(&self) -> Option<&crate::schedule::UpgradeHalt> {
        match self {
            Self::Upgrade(h) => Some(h),
            _ => None,
        }
    }
}

/// Where a request executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecContext {
    /// Sequence number (or height) of the batch.
    pub seq: u64,
    /// Agreed time of the batch, when the time service is on.
    pub agreed_time_ms: Option<Millis>,
}

/// A deterministic replicated application.
///
/// Every method must be a pure function of the application state and its arguments: replicas
/// that execute the same requests in the same order must end with equal digests and snapshots.
///
/// `Any` is a supertrait so that a host can hand a `&dyn Application` back as the concrete type
/// a test built (e.g. sim-bft's `Simulator::app` and `SimOutcome::app`): upcast to `&dyn Any`
/// and downcast. Every boxed application is `'static` already.
pub trait Application: Send + std::any::Any {
    /// Executes one user request and returns its result (sent back to the client).
    /// Malformed payloads must yield an error *result*, never a panic.
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8>;

    /// [`Application::execute`] with effects beyond the state: a `CronLedger` calls this on
    /// its state, with [`Effects`](super::Effects) that emit records into the ledger's one
    /// outbox and apply schedule requests to its book in the same request, all or nothing
    /// (authorized as `client`). Override it (and let `execute` call it with
    /// [`Effects::none`](super::Effects::none)) when a request must change the state and the
    /// book together, or emit. Default: [`Application::execute`], no effects.
    fn execute_with(
        &mut self,
        ctx: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut super::Effects<'_>,
    ) -> Vec<u8> {
        let _ = fx;
        self.execute(ctx, client, payload)
    }

    /// The first result (a worker's answer or a dead letter) for an outbox record this state
    /// emitted ([`Effects::emit`](super::Effects::emit)): a `CronLedger` routes it here, inside
    /// execution, once per record, on every replica alike. Default: nothing.
    fn on_outbox_result(
        &mut self,
        record: &crate::outbox::OutboxRecord,
        outcome: &crate::outbox::ResultOutcome,
    ) {
        let _ = (record, outcome);
    }

    /// Digest of the whole state.
    ///
    /// Called after **every executed batch** (the replica reports it with each execution and
    /// sim-bft's checkers compare it across replicas), so it must be cheap: O(what changed) or
    /// O(a small bounded state), never "hash the encoded snapshot" of a state that grows. Keep
    /// it incremental: an additive multiset hash over entries updated on each write (as the
    /// kv ledger of `ccron-ledgers` does), a hash chain over an append-only log (as the demo
    /// ledger's action chain does), or a digest cached and invalidated on change. Equal states
    /// must give equal digests, and states that differ should differ in digest. Checkpoints do
    /// not use it: they hash [`Application::snapshot`], once per checkpoint interval.
    ///
    /// A host keeps it between blocks that neither executed a request nor evaluated a tick
    /// ([`crate::host::BlockHost::digest`]): it must change only through this trait's `&mut`
    /// methods (or the host's `app_mut`), never through shared interior mutability.
    fn digest(&self) -> Digest32;
    /// [`Self::digest`]'s byte stream under the host's hash function
    /// ([`crate::state_hash::StateHash`]); `digest_in(StateHash::Sha256)` must be
    /// [`Self::digest`]. Default: [`Self::digest`] under every function (correct; override it
    /// to hash with `hash`, as `CronLedger` and the ledgers of `ccron-ledgers` do).
    fn digest_in(&self, hash: crate::state_hash::StateHash) -> Digest32 {
        let _ = hash;
        self.digest()
    }
    /// Canonical encoding of the whole state.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot; on error the state is unchanged.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError>;

    /// Handles a committed tick (sequence number and agreed time of its batch); replicated
    /// state it keeps outside the application state lives in `pages`. The default rejects every
    /// tick: an application without cron tables has no component to tick.
    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        let _ = pages;
        Err(AppError::UnknownComponent(tick.component_id))
    }

    /// Reloads whatever it caches from `pages` (after state transfer or restart).
    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        let _ = pages;
        Ok(())
    }

    /// Cron actions run so far, per `(component, position)` (for reports). Empty by default;
    /// `CronLedger` (crate `ccron-ledgers`) keeps them in its replicated state, so they agree across honest replicas
    /// at the same sequence number, restarts and state transfers included.
    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        BTreeMap::new()
    }

    /// Why the application stopped, if it did ([`AppError::Fatal`]): a replicated operation
    /// it could not complete (a failed save of its pages). The replica checks it after every
    /// request and tick and, once set, stops executing (fail-stop) and fails its invariant
    /// check with the cause, so the simulator reports it; never a silent divergence.
    fn halted(&self) -> Option<&AppError> {
        None
    }

    /// Moves the notes of the cron actions run since the last call into `out`, in the order
    /// they ran (an observation for reports and timelines, not replicated state: it must not
    /// affect the digest or the snapshot). The replica calls it after every tick. Default:
    /// nothing.
    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        let _ = out;
    }

    /// The components whose ticks this application evaluates (its cron tables and schedule
    /// book): an engine lists them in its genesis and ticks each. Default: none.
    fn tick_components(&self) -> Vec<u32> {
        Vec::new()
    }

    /// A digest of the application's setup (its registered tables, handlers and their
    /// configuration; never its replicated state): equal on every validator built from the same
    /// code and configuration. An engine records it in its genesis and refuses to start a
    /// build whose digest differs, instead of letting the validators diverge at the first fire.
    /// Default: `None` (nothing to compare).
    fn setup_digest(&self) -> Option<Digest32> {
        None
    }

    /// The committed outbox of external effects, if the application keeps one (an engine serves
    /// it to consumers, `ccron_http::read`). Default: none.
    fn outbox(&self) -> Option<&crate::outbox::Outbox> {
        None
    }

    /// The committed schedule book, if the application keeps one (an engine serves read-only
    /// queries over it, `crate::schedule::query`). Default: none.
    fn schedule_book(&self) -> Option<&crate::schedule::Scheduler> {
        None
    }

    /// The entries of the application's cron tables, gathered for the read API
    /// ([`crate::schedule::query::table_entries`]: rules, stored next due points, replicated
    /// fire counts), if it has tables. A host calls it when it publishes a changed state (an
    /// engine serves them next to the book's schedules). Default: none.
    fn table_entries(&self) -> Option<crate::schedule::query::TableEntries> {
        None
    }

    /// The reserved pages this application writes from [`Self::on_tick`] (the ranges its cron
    /// tables and tick executors were given). A host that keeps data of its own in the same
    /// store (sim-bft keeps the agreed time in `ReplicaConfig::time_page`) refuses an overlap
    /// when it is built, instead of letting both write one page and diverge at the first
    /// restart. Default: none. Declare every range: an undeclared range cannot be checked.
    fn page_ranges(&self) -> Vec<PageRange> {
        Vec::new()
    }
}

/// A boxed application is an application (hosts that pick the ledger at run time, such as
/// sim-bft's replicas, drive a `BlockHost<Box<dyn Application>>`).
impl Application for Box<dyn Application> {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        (**self).execute(ctx, client, payload)
    }

    fn execute_with(
        &mut self,
        ctx: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut super::Effects<'_>,
    ) -> Vec<u8> {
        (**self).execute_with(ctx, client, payload, fx)
    }

    fn on_outbox_result(
        &mut self,
        record: &crate::outbox::OutboxRecord,
        outcome: &crate::outbox::ResultOutcome,
    ) {
        (**self).on_outbox_result(record, outcome);
    }

    fn digest(&self) -> Digest32 {
        (**self).digest()
    }

    fn digest_in(&self, hash: crate::state_hash::StateHash) -> Digest32 {
        (**self).digest_in(hash)
    }

    fn snapshot(&self) -> Vec<u8> {
        (**self).snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        (**self).restore(snapshot)
    }

    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        (**self).on_tick(tick, pages)
    }

    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        (**self).reload(pages)
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        (**self).fires()
    }

    fn halted(&self) -> Option<&AppError> {
        (**self).halted()
    }

    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        (**self).take_fire_notes(out);
    }

    fn page_ranges(&self) -> Vec<PageRange> {
        (**self).page_ranges()
    }

    fn tick_components(&self) -> Vec<u32> {
        (**self).tick_components()
    }

    fn setup_digest(&self) -> Option<Digest32> {
        (**self).setup_digest()
    }

    fn outbox(&self) -> Option<&crate::outbox::Outbox> {
        (**self).outbox()
    }

    fn schedule_book(&self) -> Option<&crate::schedule::Scheduler> {
        (**self).schedule_book()
    }

    fn table_entries(&self) -> Option<crate::schedule::query::TableEntries> {
        (**self).table_entries()
    }
}

/// An [`Application`] for user requests joined with a separate [`TickExecutor`] for ticks.
pub struct WithTicks {
    app: Box<dyn Application>,
    ticks: Box<dyn TickExecutor>,
}

impl WithTicks {
    /// Joins `app` and `ticks`.
    pub fn new(app: Box<dyn Application>, ticks: Box<dyn TickExecutor>) -> Self {
        Self { app, ticks }
    }
}

impl Application for WithTicks {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        self.app.execute(ctx, client, payload)
    }

    fn digest(&self) -> Digest32 {
        self.app.digest()
    }

    fn digest_in(&self, hash: crate::state_hash::StateHash) -> Digest32 {
        self.app.digest_in(hash)
    }

    fn snapshot(&self) -> Vec<u8> {
        self.app.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        self.app.restore(snapshot)
    }

    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        self.ticks.on_tick(tick, pages)
    }

    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        self.app.reload(pages)?;
        self.ticks.reload(pages)
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        self.app.fires()
    }

    fn halted(&self) -> Option<&AppError> {
        self.app.halted()
    }

    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        self.app.take_fire_notes(out);
    }

    fn page_ranges(&self) -> Vec<PageRange> {
        let mut ranges = self.app.page_ranges();
        ranges.extend(self.ticks.page_ranges());
        ranges
    }

    fn setup_digest(&self) -> Option<Digest32> {
        self.app.setup_digest()
    }

    fn outbox(&self) -> Option<&crate::outbox::Outbox> {
        self.app.outbox()
    }

    fn schedule_book(&self) -> Option<&crate::schedule::Scheduler> {
        self.app.schedule_book()
    }

    fn table_entries(&self) -> Option<crate::schedule::query::TableEntries> {
        self.app.table_entries()
    }
}

/// Executes committed ticks apart from the application (joined to one by [`WithTicks`]; a ledger
/// whose cron actions change its own state uses `CronLedger` (crate `ccron-ledgers`) instead).
pub trait TickExecutor: Send {
    /// Handles a committed tick; replicated state it keeps lives in `pages`.
    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError>;
    /// Reloads whatever it caches from `pages` (after state transfer or restart).
    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        let _ = pages;
        Ok(())
    }
    /// The reserved pages it writes (see [`Application::page_ranges`]). Default: none.
    fn page_ranges(&self) -> Vec<PageRange> {
        Vec::new()
    }
}
