//! Scheduling beyond periodic: cron entries in tables, and schedules as replicated data.
//!
//! Two ways to schedule work, both evaluated on committed ticks only:
//! - [`CronRule`] plugs a validated [`CronSchedule`](crate::cron::CronSchedule) into a cron
//!   table's due index (an entry's action is code; its next fire instant is stored in the table
//!   and its pages, never recomputed on an idle tick).
//! - [`Scheduler`] holds *schedules as data* (cron, periodic, one-shot delayed) that name
//!   [`Handlers`] every replica registers identically. Client requests executed by the ledger,
//!   and handlers themselves, create, replace, pause, resume and cancel them through
//!   [`ScheduleRequest`]; a request naming an unknown handler or carrying an invalid schedule is
//!   rejected with a typed [`ScheduleError`] and changes nothing. The book is persisted in
//!   reserved pages through [`crate::codec`] on the record log the cron tables use too (commit
//!   page, change log, record pages; `store.rs`: a save after one change writes 2 pages, and
//!   every save is crash-atomic), and reloaded after restart and state transfer.
//!
//! Every schedule carries a version for optimistic concurrency
//! ([`ScheduleRequest::IfVersion`], [`ScheduleRequest::UpsertIfVersion`]: a stale one is
//! [`ScheduleError::StaleVersion`]), an
//! optional routing topic and type carried into the outbox records its runs emit, and may fire
//! "at time T or sequence S, whichever comes first" ([`Timing::AtOrSeq`]). Cron table entries
//! take the book's misfire policies ([`CronRule::with_misfire`]). Both take exclusion
//! calendars ([`crate::cron::ExclusionCalendar`]): a table entry through
//! [`CronRule::excluding`], a book's cron schedule by naming a calendar installed in the book
//! as shared data, like zones ([`ScheduleRequest::InstallCalendar`],
//! [`ScheduleRequest::SetCalendar`]).
//!
//! See `docs/scheduling.md` for the semantics (misfire policies, budget, priorities, jitter,
//! pause and resume, versions, topics, the time-or-sequence trigger) and `docs/benchmarks.md` ("delayed tasks") for costs.

mod book;
mod cron_rule;
pub mod query;
pub(crate) mod store;
pub mod upgrade;

pub use crate::authz::{Action, Policy, Principal};
pub use book::{
    AfterFailure, BackfillOverlap, Bounds, DeadRun, EMIT_REFUSED_CODE, FailedRun, FireRecord,
    Guarded, HISTORY_RUNS, HandlerCtx, HandlerError, HandlerFn, Handlers, IntoRunResult, Limits,
    MAX_ATTEMPTS, MAX_BACKFILL_RUNS, MAX_BOOK_CALENDARS, MAX_BUFFERED, MAX_DEAD_RUNS,
    MAX_FIRE_EACH_CAP, MAX_INSTANT_MS, MAX_PERIOD_MS, MIN_INSTANT_MS, ManualRuns, Misfire,
    NewSchedule, NextRun, ONE_SHOT_HISTORY_RUNS, Overlap, OverlapState, PendingRetry,
    RefusalCounters, RetireReason, Retired, RetryPolicy, RunCounters, RunEntry, RunOutcome,
    RunPolicy, ScheduleError, ScheduleInfo, ScheduleRequest, Scheduler, Settled, SlotCapacity,
    SlotLoad, Target, TickReport, Timing, Transactional, is_manual, manifest_digest,
    manual_occurrence, record_pages_of,
};
pub(crate) use book::{check_grid_fires, grid_allowed_after, grid_allowed_latest};
pub use cron_rule::CronRule;
pub use upgrade::{
    MigrationCtx, UpgradeAt, UpgradeHalt, UpgradePlan, UpgradeRequest, UpgradeState, Upgrades,
    upgrade_request_payload,
};
