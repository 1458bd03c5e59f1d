//! [`LedgerScheduler`]: schedules as replicated data inside the one [`Application`] a replica
//! runs.
//!
//! [`LedgerScheduler`] is the schedule-book part of a [`CronLedger`]
//! ([`CronLedger::with_scheduler`]): a `crate::schedule::Scheduler` whose handlers change the
//! ledger's own state `S`, its replicated outbox, and the reserved pages the book is persisted
//! in. Through the ledger, client requests carrying an encoded
//! [`crate::schedule::ScheduleRequest`] create, upsert, replace, pause, resume and cancel
//! schedules (applied with the batch's sequence number and agreed time); a committed tick of the
//! book's component runs what is due (and the ledger's cron tables of that component, if any);
//! the book and the outbox live in the book's own reserved pages (the book's range, then the
//! outbox's, both through `ccron::codec`), which the ledger snapshot carries, so a restart or a
//! state transfer restores both with the tables (the tables' schedules live in the replica's
//! reserved pages) and a restarted replica's outbox consumer sees the same records.

use crate::codec;
use crate::outbox::{
    Origin, Outbox, OutboxLimits, OutboxRecord, OutboxResult, ResultApplied, ResultOutcome,
};
use crate::schedule::{Handlers, Limits, ScheduleRequest, Scheduler};
use crate::{MemPages, PageRange, PagesError, Policy, Principal, ReservedPages, Tick};

#[cfg(doc)]
use super::app::Application;
use super::app::{AppError, ExecContext};
#[cfg(doc)]
use super::cron_ledger::CronLedger;

/// Prefix of an outbox consumer's progress request ([`outbox_delivered_payload`]).
const OUTBOX_DELIVERED: &[u8; 16] = b"ccron-outbox-ack";

/// The payload of a client request reporting that an outbox consumer has delivered every record
/// up to index `upto`: a ledger with a schedule book trims its outbox below `upto + 1` when the
/// request executes (docs/outbox.md, "Trim"). Only progress the consumer has persisted may be
/// reported: a trimmed record can never be delivered again.
pub fn outbox_delivered_payload(upto: u64) -> Vec<u8> {
    let mut p = OUTBOX_DELIVERED.to_vec();
    p.extend_from_slice(&upto.to_le_bytes());
    p
}

/// The index an outbox progress payload reports, if `payload` is one.
pub fn outbox_delivered_of(payload: &[u8]) -> Option<u64> {
    let rest = payload.strip_prefix(OUTBOX_DELIVERED.as_slice())?;
    Some(u64::from_le_bytes(rest.try_into().ok()?))
}

/// Turns a request payload that is not an encoded [`ScheduleRequest`] into one, or leaves it to
/// the ledger state (`None`).
pub type RequestTranslator = Box<dyn Fn(&[u8]) -> Option<ScheduleRequest> + Send>;

/// A ledger's reaction to the first result for one of its outbox records (a worker's answer or
/// a dead letter, `crate::outbox::OutboxResult`): runs inside execution, exactly once per record,
/// on every replica alike; it may change the ledger state `S`. Registered identically on every
/// replica ([`LedgerScheduler::with_result_reaction`]).
pub type ResultReaction<S> = Box<dyn Fn(&mut S, &OutboxRecord, &ResultOutcome) + Send>;

/// Configuration of a ledger's schedule book (identical on every replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BookConfig {
    /// The component whose ticks run the schedules.
    pub component: u32,
    /// The position the book's runs are counted under in [`Application::fires`] (with
    /// `component`); choose one no cron table of that component uses.
    pub position: u32,
    /// The book's limits.
    pub limits: Limits,
    /// Reserved pages of the book (4 KiB each), carried by the ledger snapshot.
    pub book_pages: u32,
    /// Reserved pages of the outbox (4 KiB each, at least one: see [`BookConfig::validate`]),
    /// after the book's. The outbox's limits are
    /// derived from them ([`BookConfig::outbox_limits`]) so that a full outbox always fits: an
    /// append beyond them is a typed error of the emitting handler, never a lost save.
    pub outbox_pages: u32,
}

/// Page size of a book's pages.
const PAGE_BYTES: usize = 4_096;

/// Most records a ledger outbox holds (the demo never trims: see `docs/outbox.md`).
const OUTBOX_MAX_RECORDS: usize = 1_024;

/// Encoded bytes per outbox record beyond its counted size: occurrence id (20), two length
/// prefixes (16), the optional topic and type (a tag and a length prefix each, 18) and its
/// result mark (8, `Outbox::accept_result`) and its owner (12: the principal's tag and client id,
/// outbox layout 5).
const OUTBOX_RECORD_OVERHEAD_BYTES: usize = 74;

/// An inconsistent [`BookConfig`] ([`BookConfig::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BookConfigError {
    /// No page for the schedule book.
    #[error("book_pages = 0: the schedule book needs at least one page")]
    NoBookPages,
    /// No page for the outbox: every save, snapshot restore (restart, state transfer) needs
    /// one, even when no handler emits.
    #[error("outbox_pages = 0: the outbox needs at least one page, even when no handler emits")]
    NoOutboxPages,
    /// More pages than a page index can address.
    #[error("book_pages + outbox_pages overflows")]
    TooManyPages,
    /// The book's or the outbox's pages cannot hold even an empty one (too few pages for the
    /// book's layout and limits).
    #[error("{what} does not fit its pages: {cause}")]
    TooFewPages {
        /// `"schedule book"` or `"outbox"`.
        what: &'static str,
        /// Why.
        cause: String,
    },
}

impl BookConfig {
    /// Checks the configuration: pages for the book and for the outbox, addressable together.
    /// [`LedgerScheduler::try_new`] calls it; the simulator's builder also catches an invalid
    /// book through its application check (`ClusterHarness::check_app`).
    pub fn validate(&self) -> Result<(), BookConfigError> {
        if self.book_pages == 0 {
            return Err(BookConfigError::NoBookPages);
        }
        if self.outbox_pages == 0 {
            return Err(BookConfigError::NoOutboxPages);
        }
        if self.book_pages.checked_add(self.outbox_pages).is_none() {
            return Err(BookConfigError::TooManyPages);
        }
        // What every restore does: load an (empty) book and outbox from their pages.
        let pages = MemPages::new(PAGE_BYTES, self.total_pages());
        let too_few = |what, e: String| BookConfigError::TooFewPages { what, cause: e };
        if let Some(range) = self.book_range() {
            Scheduler::load(self.component, self.book_limits(), &pages, range)
                .map_err(|e| too_few("schedule book", e.to_string()))?;
        }
        if let Some(range) = self.outbox_range() {
            Outbox::load(&pages, range, self.outbox_limits())
                .map_err(|e| too_few("outbox", e.to_string()))?;
        }
        Ok(())
    }

    /// The outbox limits the outbox pages can always hold (all zero without outbox pages).
    pub fn outbox_limits(&self) -> OutboxLimits {
        let capacity = self
            .outbox_range()
            .map_or(0, |r| codec::capacity(r, PAGE_BYTES));
        // At least ~128 bytes of capacity per record held, so small ranges still hold some.
        let max_records = OUTBOX_MAX_RECORDS.min(capacity / 128);
        // Version, first index and the vector length (rounded up), plus per-record overhead.
        let fixed = 64 + max_records * OUTBOX_RECORD_OVERHEAD_BYTES;
        let total = capacity.saturating_sub(fixed);
        OutboxLimits {
            max_records,
            max_record_bytes: total.min(OutboxLimits::default().max_record_bytes),
            max_total_bytes: total,
        }
    }

    /// The book's pages.
    fn book_range(&self) -> Option<PageRange> {
        PageRange::new(0, self.book_pages)
    }

    /// The book's limits, with admission bounded by its record pages (a schedule that would
    /// not fit is rejected when requested, not when the book is saved).
    /// Every bound "admitted ⇒ saved" needs comes from the book's pages, whatever the caller
    /// set ([`Limits::fitted_to`]: a caller's value only ever lowers it).
    fn book_limits(&self) -> Limits {
        self.book_range()
            .map_or(self.limits, |r| self.limits.fitted_to(r))
    }

    /// The outbox's pages, right after the book's.
    fn outbox_range(&self) -> Option<PageRange> {
        PageRange::new(self.book_pages, self.outbox_pages)
    }

    /// Pages of the store holding both.
    /// Pages the book and its outbox use (`book_pages + outbox_pages`), from page 0.
    pub fn total_pages(&self) -> u32 {
        self.book_pages.saturating_add(self.outbox_pages)
    }
}

/// The ledger snapshot's part for the book: its pages (book, then outbox).
pub(crate) type BookWire = Vec<(u32, Vec<u8>)>;

/// The schedule-book part of a [`CronLedger`] (see the module documentation), its pages a
/// [`ReservedPages`] store `P`: [`MemPages`] by default (the ledger snapshot carries them), or a
/// durable store ([`crate::FilePages`], an embedded database) the host persists on its own,
/// from which [`LedgerScheduler::with_pages`] reloads the book at start.
pub struct LedgerScheduler<S, P = MemPages> {
    cfg: BookConfig,
    book: Scheduler,
    handlers: Handlers<S>,
    outbox: Outbox,
    pages: P,
    translate: Option<RequestTranslator>,
    reaction: Option<ResultReaction<S>>,
    table_reaction: Option<ResultReaction<S>>,
    policy: Policy,
    denied: u64,
    /// The handler runs' emit budget, if set (records, bytes): kept to re-apply it to a
    /// restored book.
    emit_budget: Option<(usize, usize)>,
    /// Typed errors the book's ticks reported ([`TickReport::errors`](crate::schedule::TickReport::errors):
    /// refused emits, rejected handler requests).
    tick_errors: u64,
    /// Runs the book's ticks parked (a metric, [`Self::parked_runs`]).
    parked_runs: u64,
    /// Failed handler runs (a metric, [`Self::failed_runs`]).
    failed_runs: u64,
    /// The first failed save of the book or the outbox ([`AppError::Fatal`]): the ledger has
    /// stopped (fail-stop) and executes nothing more.
    fatal: Option<AppError>,
}

impl<S, P> std::fmt::Debug for LedgerScheduler<S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerScheduler")
            .field("cfg", &self.cfg)
            .field("schedules", &self.book.len())
            .field("handlers", &self.handlers)
            .field("outbox", &self.outbox.len())
            .finish_non_exhaustive()
    }
}

impl<S> LedgerScheduler<S> {
    /// An empty book running `handlers` (registered identically on every replica), in memory
    /// pages (carried by the ledger snapshot).
    pub fn new(cfg: BookConfig, handlers: Handlers<S>) -> Self {
        Self {
            cfg,
            book: Scheduler::new(cfg.component, cfg.book_limits()),
            handlers,
            outbox: Outbox::new(cfg.outbox_limits()),
            pages: MemPages::new(PAGE_BYTES, cfg.total_pages()),
            translate: None,
            reaction: None,
            table_reaction: None,
            policy: Policy::default(),
            emit_budget: None,
            denied: 0,
            tick_errors: 0,
            parked_runs: 0,
            failed_runs: 0,
            fatal: None,
        }
    }

    /// [`Self::new`] after [`BookConfig::validate`]: an inconsistent configuration is a typed
    /// error here rather than a ledger whose every restart and state transfer fails.
    pub fn try_new(cfg: BookConfig, handlers: Handlers<S>) -> Result<Self, BookConfigError> {
        cfg.validate()?;
        Ok(Self::new(cfg, handlers))
    }
}

impl<S, P: ReservedPages> LedgerScheduler<S, P> {
    /// A book running `handlers` over the host's `pages` (4 KiB pages, at least
    /// [`BookConfig::total_pages`] of them): the book and the outbox are loaded from them, so a
    /// node that restarts from its durable store resumes where it stopped (empty pages: an empty
    /// book).
    pub fn with_pages(cfg: BookConfig, handlers: Handlers<S>, pages: P) -> Result<Self, AppError> {
        let bad = |e: String| AppError::Fatal(format!("schedule book pages: {e}"));
        if pages.page_size() != PAGE_BYTES || pages.num_pages() < cfg.total_pages() {
            return Err(bad(format!(
                "{} pages of {} bytes, the book needs {} of {PAGE_BYTES}",
                pages.num_pages(),
                pages.page_size(),
                cfg.total_pages()
            )));
        }
        let book = Scheduler::load(cfg.component, cfg.book_limits(), &pages, Self::range(cfg)?)
            .map_err(|e| bad(e.to_string()))?;
        let outbox = Outbox::load(&pages, Self::outbox_range(cfg)?, cfg.outbox_limits())
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            cfg,
            book,
            handlers,
            outbox,
            pages,
            translate: None,
            policy: Policy::default(),
            emit_budget: None,
            denied: 0,
            tick_errors: 0,
            parked_runs: 0,
            failed_runs: 0,
            fatal: None,
            reaction: None,
            table_reaction: None,
        })
    }

    /// Why the ledger stopped: a save of the book or the outbox failed (see [`Self::persist`]).
    pub(crate) fn halted(&self) -> Option<&AppError> {
        self.fatal.as_ref()
    }

    /// Records a failed save: the ledger stops (fail-stop). Admission keeps every admitted
    /// request's save within the pages (`Limits::for_range`, the outbox's derived limits), so
    /// this is a bug or a store failure, never an outcome to carry on from: the pages (the
    /// snapshot and the digest's input) would stay behind the memory and a restored replica
    /// would diverge.
    fn fail(&mut self, what: &str, e: String) {
        tracing::error!(error = %e, "{what} not saved: the ledger stops");
        if self.fatal.is_none() {
            self.fatal = Some(AppError::Fatal(format!("{what} not saved: {e}")));
        }
    }

    fn save_outbox(&mut self) {
        let saved = Self::outbox_range(self.cfg)
            .map_err(|e| e.to_string())
            .and_then(|range| {
                self.outbox
                    .save(&mut self.pages, range)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = saved {
            self.fail("outbox", e);
        }
    }

    /// With `policy` deciding who may change the book and trim the outbox (configured
    /// identically on every replica; the ledger digest covers it). The default
    /// ([`Policy::default`]) lets any client create schedules and change only its own, and no
    /// client install zones or report outbox progress.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.book = self.book.with_policy(policy.clone());
        self.policy = policy;
        self
    }

    /// The authorization policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Requests denied by the policy so far (schedule changes and outbox progress; not
    /// replicated state: a counter for this replica's metrics).
    pub fn denied(&self) -> u64 {
        self.denied
    }

    /// Typed errors the book's ticks reported so far (refused emits, rejected handler
    /// requests): deterministic outcomes, the same on every replica, each
    /// also traced; a counter for this replica's metrics, like [`Self::denied`].
    pub fn tick_errors(&self) -> u64 {
        self.tick_errors
    }

    /// Schedules this replica's ticks parked so far because their handler is not registered
    /// in this build (a metric; the parked schedules themselves are replicated state:
    /// [`Scheduler::parked`](crate::schedule::Scheduler::parked)).
    pub fn parked_runs(&self) -> u64 {
        self.parked_runs
    }

    /// Handler runs that failed on this replica's ticks so far (an error or a caught panic;
    /// rolled back, then retried or dead-lettered by the schedule's run policy): a metric, the
    /// same on every replica; the dead runs themselves are replicated state
    /// ([`Scheduler::dead_letters`](crate::schedule::Scheduler::dead_letters)).
    pub fn failed_runs(&self) -> u64 {
        self.failed_runs
    }

    /// With `reaction` run on the first result for each outbox record a schedule's handler
    /// emitted (see [`ResultReaction`]; records of the other emitters go to theirs:
    /// [`Self::with_table_result_reaction`], the state's `Application::on_outbox_result`).
    pub fn with_result_reaction(mut self, reaction: ResultReaction<S>) -> Self {
        self.reaction = Some(reaction);
        self
    }

    /// With `reaction` run on the first result for each outbox record a cron table's action
    /// emitted (`ActionCtx::emit`; the record's id names the component and position:
    /// `record.id.component`, `record.id.emitter()`).
    pub fn with_table_result_reaction(mut self, reaction: ResultReaction<S>) -> Self {
        self.table_reaction = Some(reaction);
        self
    }

    /// With every handler run allowed `records` records of `bytes` bytes in all, reserved in
    /// the outbox before the run starts (`Scheduler::with_emit_budget`; default: one record).
    pub fn with_emit_budget(mut self, records: usize, bytes: usize) -> Self {
        self.book = self.book.with_emit_budget(records, bytes);
        self.emit_budget = Some((records, bytes));
        self
    }

    /// The handler runs' emit budget, if set ([`Self::with_emit_budget`]).
    pub fn emit_budget(&self) -> Option<(usize, usize)> {
        self.emit_budget
    }

    /// Reserves `budget` in the outbox for a table pass or a request: `None` when the outbox
    /// cannot take it now (or the ledger has stopped).
    pub(crate) fn reserve(
        &self,
        budget: crate::outbox::EmitBudget,
    ) -> Option<crate::outbox::Emits> {
        if self.fatal.is_some() {
            return None;
        }
        crate::outbox::Emits::reserve(&self.outbox, budget)
    }

    /// Appends what a table pass or a request staged and saves the outbox. The room was
    /// reserved, so a refused append is a bug: the ledger stops (fail-stop), never drops a
    /// record silently.
    pub(crate) fn commit_emits(&mut self, emits: crate::outbox::Emits) -> Result<(), AppError> {
        if emits.staged().is_empty() {
            return Ok(());
        }
        match emits.commit(&mut self.outbox) {
            Ok(_) => {
                self.save_outbox();
                self.fatal.clone().map_or(Ok(()), Err)
            }
            Err(e) => {
                self.fail("reserved outbox records", e.to_string());
                self.save_outbox();
                Err(AppError::Fatal(format!(
                    "reserved outbox records refused: {e}"
                )))
            }
        }
    }

    /// Runs `f` (a ledger state's request) with [`Effects`](super::Effects) over this book
    /// and outbox: schedule requests applied now as `by`, records staged in `emits`; when the
    /// request refused any effect, the book is put back as it was before its first schedule
    /// request (a copy: O(book) once per scheduling request) and nothing is emitted.
    /// Returns `f`'s reply and whether the effects were voided.
    pub(crate) fn run_request<R>(
        &mut self,
        ctx: ExecContext,
        by: Principal,
        emits: crate::outbox::Emits,
        f: impl FnOnce(&mut super::Effects<'_>) -> R,
    ) -> (R, bool) {
        let component = self.cfg.component;
        let mut backup: Option<Scheduler> = None;
        let (reply, emits, refused, scheduled) = {
            let handlers = &self.handlers;
            let book = &mut self.book;
            let backup = &mut backup;
            let mut apply = |req: ScheduleRequest| {
                if backup.is_none() {
                    *backup = Some(book.clone());
                }
                book.apply(&by, req, handlers, ctx.seq, ctx.agreed_time_ms)
            };
            let mut fx = super::Effects::new(component, emits, Some(&mut apply));
            let reply = f(&mut fx);
            let (emits, refused, scheduled) = fx.finish();
            (reply, emits, refused, scheduled)
        };
        if refused {
            if let Some(before) = backup {
                self.book = before;
            }
            tracing::debug!(%by, "request effects refused: none of them stays");
            return (reply, true);
        }
        if scheduled > 0 {
            self.persist();
        }
        // A failed commit stops the ledger (fail-stop); the reply stands.
        let _ = self.commit_emits(emits);
        (reply, false)
    }

    /// Applies an outbox result request (`crate::outbox::OutboxResult`) from `by`: only the
    /// policy's outbox consumer may report, once per record (`Outbox::accept_result`); the
    /// first result runs the [`ResultReaction`] on `state` and saves the outbox (its result
    /// marks are replicated state). A malformed, unauthorized, oversized or mismatched result is
    /// an `err` reply and counted ([`Self::denied`] for the unauthorized); a duplicate or a
    /// result for a trimmed record is an `ok` reply that changes nothing.
    pub(crate) fn apply_result(
        &mut self,
        state: &mut S,
        by: Principal,
        result: Result<OutboxResult, crate::outbox::ResultPayloadError>,
        to_state: impl FnOnce(&mut S, &OutboxRecord, &ResultOutcome),
    ) -> Vec<u8> {
        if self.fatal.is_some() {
            return b"err halted".to_vec();
        }
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%by, error = %e, "malformed outbox result request");
                return format!("err {e}").into_bytes();
            }
        };
        match self.outbox.accept_result(&self.policy, &by, &result) {
            Ok(ResultApplied::Applied) => {
                // Routed back to whoever emitted the record (its id's origin).
                let mut settled = false;
                if let Some(record) = self.outbox.get(result.index) {
                    // The run awaiting it (overlap policies) has one result more.
                    settled = self.book.settle(record.id);
                    match record.id.origin() {
                        Origin::Schedule => {
                            if let Some(react) = &self.reaction {
                                react(state, record, &result.outcome);
                            }
                        }
                        Origin::Table => {
                            if let Some(react) = &self.table_reaction {
                                react(state, record, &result.outcome);
                            }
                        }
                        Origin::State => to_state(state, record, &result.outcome),
                        Origin::Reserved => {
                            tracing::warn!(
                                index = result.index,
                                "result for a record of no known emitter"
                            );
                        }
                    }
                }
                if settled {
                    self.persist();
                }
                self.save_outbox();
                b"ok result applied".to_vec()
            }
            Ok(ResultApplied::Duplicate) => b"ok result duplicate".to_vec(),
            Ok(ResultApplied::Trimmed) => b"ok result trimmed".to_vec(),
            Err(e) => {
                if matches!(e, crate::outbox::OutboxError::ResultUnauthorized { .. }) {
                    self.denied = self.denied.saturating_add(1);
                }
                format!("err {e}").into_bytes()
            }
        }
    }

    /// With a translator for payloads that are not encoded schedule requests.
    pub fn with_translator(mut self, translate: RequestTranslator) -> Self {
        self.translate = Some(translate);
        self
    }

    /// The configuration.
    pub fn config(&self) -> BookConfig {
        self.cfg
    }

    /// The schedule book.
    pub fn book(&self) -> &Scheduler {
        &self.book
    }

    /// The handlers the book runs (their names and versions are part of the ledger's setup
    /// digest: [`crate::CronTableRegistry::declare_handlers`]).
    pub fn handlers(&self) -> &Handlers<S> {
        &self.handlers
    }

    /// The last runs of schedule `id`, oldest first (nominal occurrence, tick, occurrence
    /// number, attempt, outcome, result mark): replicated state, in the digest and the
    /// snapshot. `None` for an unknown id.
    pub fn history(&self, id: u64) -> Option<&[crate::schedule::RunEntry]> {
        self.book.history(id)
    }

    /// The replicated outbox the handlers emit into.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// The book's reserved pages.
    pub fn pages(&self) -> &P {
        &self.pages
    }

    fn range(cfg: BookConfig) -> Result<PageRange, AppError> {
        cfg.book_range()
            .ok_or_else(|| AppError::BadSnapshot("no pages for the schedule book".into()))
    }

    fn outbox_range(cfg: BookConfig) -> Result<PageRange, AppError> {
        cfg.outbox_range()
            .ok_or_else(|| AppError::BadSnapshot("no pages for the outbox".into()))
    }

    /// Trims the outbox below `upto + 1` (an outbox consumer's committed progress: every record
    /// up to `upto` is delivered) and saves it; the reply says how many records went. Every
    /// replica trims at the same point of the log, so the outbox stays replicated state.
    /// Only the policy's outbox consumer may report, and never past the head
    /// ([`Outbox::accept_progress`]): anything else is an `err` reply, counted, and trims
    /// nothing.
    pub(crate) fn trim_outbox(&mut self, by: Principal, upto: u64) -> Vec<u8> {
        if self.fatal.is_some() {
            return b"err halted".to_vec();
        }
        // Schedule records trimmed without a result settle their runs (overlap policies).
        let unanswered = Scheduler::unanswered_up_to(&self.outbox, upto);
        let trimmed = match self.outbox.accept_progress(&self.policy, &by, upto) {
            Ok(n) => n,
            Err(e) => {
                self.denied = self.denied.saturating_add(1);
                return format!("err {e}").into_bytes();
            }
        };
        let mut settled = false;
        for id in unanswered {
            settled |= self.book.settle(id);
        }
        if settled {
            self.persist();
        }
        if trimmed > 0 {
            self.save_outbox();
        }
        format!("ok trimmed {trimmed}").into_bytes()
    }

    /// The schedule request `payload` carries, if any.
    pub(crate) fn request_of(&self, payload: &[u8]) -> Option<ScheduleRequest> {
        if let Ok(req) = codec::from_blob::<ScheduleRequest>(payload) {
            return Some(req);
        }
        self.translate.as_ref().and_then(|t| t(payload))
    }

    /// Applies `req` on behalf of `by` (the request's authenticated client; the book's policy
    /// decides, see `crate::authz`) with the batch's sequence number and agreed time, and
    /// persists the book. A denial is an `err` reply, counted ([`Self::denied`]).
    pub(crate) fn execute(
        &mut self,
        ctx: ExecContext,
        by: Principal,
        req: ScheduleRequest,
    ) -> Vec<u8> {
        if self.fatal.is_some() {
            return b"err halted".to_vec();
        }
        let reply = match self
            .book
            .apply(&by, req, &self.handlers, ctx.seq, ctx.agreed_time_ms)
        {
            Ok(id) => format!("ok {}", id.unwrap_or(0)),
            Err(e) => {
                if matches!(e, crate::schedule::ScheduleError::Unauthorized { .. }) {
                    self.denied = self.denied.saturating_add(1);
                }
                format!("err {e}")
            }
        };
        self.persist();
        reply.into_bytes()
    }

    /// Runs what is due on `tick` against `state`; returns the handler runs.
    pub(crate) fn on_tick(
        &mut self,
        tick: &Tick,
        state: &mut S,
    ) -> Vec<crate::schedule::FireRecord> {
        if self.fatal.is_some() {
            return Vec::new();
        }
        let head = self.outbox.head();
        let report = self
            .book
            .on_tick(tick, state, &mut self.handlers, &mut self.outbox);
        if !report.errors.is_empty() {
            self.tick_errors = self.tick_errors.saturating_add(report.errors.len() as u64);
            tracing::warn!(errors = ?report.errors, "scheduler tick errors");
        }
        if !report.parked.is_empty() {
            self.parked_runs = self.parked_runs.saturating_add(report.parked.len() as u64);
        }
        if !report.failed.is_empty() {
            self.failed_runs = self.failed_runs.saturating_add(report.failed.len() as u64);
        }
        self.persist();
        // Only handler runs append: rewrite the outbox's pages when they did.
        if self.outbox.head() != head {
            self.save_outbox();
        }
        report.fired
    }

    /// Runs `f` on the book (an upgrade's migration: re-target renamed handlers, cancel
    /// schedules of dropped ones) and saves it; a failed save stops the ledger.
    pub(crate) fn edit_book<R>(&mut self, f: impl FnOnce(&mut Scheduler) -> R) -> R {
        let r = f(&mut self.book);
        self.persist();
        r
    }

    /// Saves the book; a failure stops the ledger ([`Self::halted`]), never carries on.
    fn persist(&mut self) {
        let result = Self::range(self.cfg)
            .map_err(|e| e.to_string())
            .and_then(|range| {
                self.book
                    .save(&mut self.pages, range)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = result {
            self.fail("schedule book", e);
        }
    }

    /// The book's part of the ledger snapshot: its pages (book and outbox).
    pub(crate) fn to_wire(&self) -> BookWire {
        self.held_pages()
            .into_iter()
            .map(|(id, data)| (id, data.to_vec()))
            .collect()
    }

    /// The book's and the outbox's non-empty pages, ascending: what the wire form and the
    /// digest's book part carry.
    fn held_pages(&self) -> Vec<(u32, &[u8])> {
        let mut held = Vec::new();
        for id in 0..self.cfg.total_pages() {
            match self.pages.load(id) {
                Ok(Some(data)) if !data.is_empty() => held.push((id, data)),
                Ok(_) => {}
                // Unreachable for pages the book saved (a store's read failure): the snapshot
                // then lacks the page and a replica restored from it would see its digest
                // differ, never silently.
                Err(e) => tracing::error!(page = id, error = %e, "schedule book page unreadable"),
            }
        }
        held
    }

    /// Feeds `h` exactly the bytes of `codec::encode(&self.to_wire())` (the state digest's
    /// book part) without building them: the count of non-empty pages, then each page's id,
    /// length and bytes, as the canonical encoding lays out a `Vec<(u32, Vec<u8>)>` (fixed
    /// width, little endian). The digest is taken after every height, and the wire form is two
    /// copies of every page of the book (issue 23's scale: a book of 10^4 schedules is ~15 MB).
    pub(crate) fn hash_wire_into(&self, h: &mut crate::state_hash::StateHasher) {
        let held = self.held_pages();
        h.update((held.len() as u64).to_le_bytes());
        for (id, data) in held {
            h.update(id.to_le_bytes());
            h.update((data.len() as u64).to_le_bytes());
            h.update(data);
        }
    }

    /// Decodes the book's part of a snapshot, reloading the book and the outbox from the pages
    /// (nothing changes here: see [`Self::install`]).
    pub(crate) fn decode_wire(
        cfg: BookConfig,
        pages: BookWire,
    ) -> Result<(MemPages, Scheduler, Outbox), AppError> {
        let bad = |e: String| AppError::BadSnapshot(e);
        let mut mem = MemPages::new(PAGE_BYTES, cfg.total_pages());
        mem.restore(&pages).map_err(|e| bad(e.to_string()))?;
        let book = Scheduler::load(cfg.component, cfg.book_limits(), &mem, Self::range(cfg)?)
            .map_err(|e| bad(e.to_string()))?;
        let outbox = Outbox::load(&mem, Self::outbox_range(cfg)?, cfg.outbox_limits())
            .map_err(|e| bad(e.to_string()))?;
        Ok((mem, book, outbox))
    }

    /// Replaces the book, its pages and the outbox with decoded ones. A store that refuses a
    /// write leaves its pages partly replaced: the book stops (fail-stop) and the error is
    /// returned.
    pub(crate) fn install(
        &mut self,
        (pages, book, outbox): (MemPages, Scheduler, Outbox),
    ) -> Result<(), AppError> {
        if let Err(e) = copy_pages(&pages, &mut self.pages, self.cfg.total_pages()) {
            self.fail("restored schedule book", e.to_string());
            return Err(AppError::Fatal(format!(
                "restored schedule book not saved: {e}"
            )));
        }
        // The policy is configuration: the decoded book gets this replica's.
        let mut book = book.with_policy(self.policy.clone());
        if let Some((records, bytes)) = self.emit_budget {
            book = book.with_emit_budget(records, bytes);
        }
        self.book = book;
        self.outbox = outbox;
        Ok(())
    }
}

/// Makes pages `0..count` of `to` equal to those of `from` (saved or zeroed).
fn copy_pages(
    from: &dyn ReservedPages,
    to: &mut dyn ReservedPages,
    count: u32,
) -> Result<(), PagesError> {
    for id in 0..count {
        match from.load(id)? {
            Some(data) => to.save(id, data)?,
            None => to.zero(id)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_what_is_missing() {
        let ok = BookConfig {
            component: 1,
            position: 0,
            limits: Limits::default(),
            book_pages: 8,
            outbox_pages: 1,
        };
        assert_eq!(ok.validate(), Ok(()));
        let small = BookConfig {
            book_pages: 1,
            ..ok
        };
        assert!(matches!(
            small.validate(),
            Err(BookConfigError::TooFewPages {
                what: "schedule book",
                ..
            })
        ));
        let no_outbox = BookConfig {
            outbox_pages: 0,
            ..ok
        };
        assert_eq!(no_outbox.validate(), Err(BookConfigError::NoOutboxPages));
        assert!(LedgerScheduler::<()>::try_new(no_outbox, Handlers::new()).is_err());
        let no_book = BookConfig {
            book_pages: 0,
            ..ok
        };
        assert_eq!(no_book.validate(), Err(BookConfigError::NoBookPages));
        let huge = BookConfig {
            book_pages: u32::MAX,
            ..ok
        };
        assert_eq!(huge.validate(), Err(BookConfigError::TooManyPages));
    }

    /// The digest's streamed book part is the encoded wire form, byte for byte (empty pages
    /// left out, pages of both the book and the outbox, a page at the last id), under both
    /// hash functions: the state digest did not change when it stopped building the form.
    #[test]
    fn the_streamed_book_part_is_the_encoded_wire_form() {
        use crate::state_hash::{StateHash, StateHasher};
        let cfg = BookConfig {
            component: 1,
            position: 0,
            limits: Limits::default(),
            book_pages: 8,
            outbox_pages: 3,
        };
        let mut s = LedgerScheduler::<()>::try_new(cfg, Handlers::new()).unwrap();
        let check = |s: &LedgerScheduler<()>| {
            for hash in [StateHash::Sha256, StateHash::Blake3] {
                let mut streamed = StateHasher::new(hash);
                s.hash_wire_into(&mut streamed);
                let encoded = super::super::wire::encode(&s.to_wire()).unwrap();
                assert_eq!(streamed.finalize(), StateHasher::digest(hash, &encoded));
            }
        };
        check(&s);
        let last = cfg.total_pages() - 1;
        for (id, len) in [(0, 1), (3, 4_096), (5, 300), (9, 17), (last, 2)] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + id as usize) as u8).collect();
            s.pages.save(id, &data).unwrap();
        }
        s.pages.save(5, &[]).unwrap();
        check(&s);
    }

    /// A full outbox (at its derived limits, largest records) always fits its pages.
    #[test]
    fn derived_outbox_limits_always_fit_the_pages() {
        for outbox_pages in [1, 3, 64] {
            let cfg = BookConfig {
                component: 1,
                position: 0,
                limits: Limits::default(),
                book_pages: 2,
                outbox_pages,
            };
            let limits = cfg.outbox_limits();
            assert!(
                limits.max_records > 0 && limits.max_total_bytes > 0,
                "{limits:?}"
            );
            let mut outbox = Outbox::new(limits);
            let per = (limits.max_total_bytes / limits.max_records).min(limits.max_record_bytes);
            let mut n = 0;
            while outbox
                .append(
                    // Empty topic and type: encoding overhead that counts no bytes.
                    crate::outbox::OutboxRecord::new(
                        crate::outbox::OccurrenceId::new(1, 2, n),
                        "",
                        vec![7; per],
                    )
                    .with_topic("")
                    .with_kind(""),
                )
                .is_ok()
            {
                n += 1;
            }
            assert_eq!(outbox.len(), limits.max_records);
            let mut pages = MemPages::new(PAGE_BYTES, cfg.total_pages());
            outbox
                .save(&mut pages, cfg.outbox_range().unwrap())
                .unwrap();
        }
    }
}
