//! [`Scheduler`]: schedules as replicated data, naming handlers registered as code.
//!
//! Layout. The book maps a schedule id (a `u64` assigned densely by the book, so every replica
//! assigns the same one) to a record (handler name, [`Timing`], [`Misfire`] policy, priority,
//! jitter, payload, routing topic and type, pause flag, nominal next due point, run counter,
//! owner, version, run state, replicated run counters, bounds and retired state, overlap policy
//! and state, the exclusion calendar it names, its backfills' overlap policy), optionally under a unique client key. A due index ordered by (priority,
//! due key, id) holds every active record (an `AtOrSeq` one under both its keys), so a tick
//! visits only what is due: O(fired · log n), plus one range probe per priority level in
//! use, whatever the number of schedules.
//!
//! Persistence ([`Scheduler::save`], [`Scheduler::load`]): the record log shared with the cron
//! tables (`crate::record_log`: commit page, change log, record pages folded when the log is
//! full), laid out and placed by `store.rs`; a save after one change writes 2 pages, and a
//! crash at any page write reloads as the book before or after the save.
//!
//! Files. This module owns the state ([`Scheduler`] and its stored `Record`); the others add
//! `impl Scheduler` blocks by concern: `types.rs` (the public vocabulary: timings, misfire
//! policies, requests, limits, errors, views and reports), `handlers.rs` (registered handlers
//! and a run's context), `counters.rs` (replicated run counters), `bounds.rs` (start/end
//! bounds, run limit, retirement), `calendars.rs` (exclusion calendars installed as shared
//! data and named by cron schedules), `overlap.rs` (the overlap policy: what an occurrence does
//! while the previous run has no result),
//! `manual.rs` (trigger-now and backfill runs), `timing.rs` (occurrences,
//! jitter, the misfire plan), `index.rs` (due
//! and zone index upkeep, invariant check), `admission/` (validating and applying requests),
//! `tick.rs` (the budgeted tick), `preview.rs` (looks ahead) and `persist.rs` (save and load).

mod admission;
mod bounds;
mod calendars;
mod counters;
mod def;
mod due;
mod handlers;
mod index;
mod legacy;
mod manual;
mod overlap;
mod persist;
mod preview;
mod quota;
mod records;
mod runs;
mod slots;
mod tick;
mod timing;
mod types;

use std::collections::{BTreeMap, BTreeSet};

use def::{Def, HandlerNames};

use super::store::Placement;
use crate::authz::{Policy, Principal};
use crate::cron::{CronSchedule, ExclusionCalendar, ZoneRules};
use crate::due::Due;
use crate::tick::{ComponentId, TimeMs};

pub(super) use admission::check_misfire;
pub use bounds::{Bounds, RetireReason, Retired};
pub use calendars::MAX_BOOK_CALENDARS;
// The book's periodic-grid semantics under a calendar, shared with the tables' periodic
// entries (`crate::periodic::ExcludingPeriodic`).
pub(crate) use calendars::{check_grid_fires, grid_allowed_after, grid_allowed_latest};
pub use counters::{RefusalCounters, RunCounters};
pub use handlers::{
    EMIT_REFUSED_CODE, HandlerCtx, HandlerError, HandlerFn, Handlers, IntoRunResult, Transactional,
    manifest_digest,
};
pub use manual::{BackfillOverlap, MAX_BACKFILL_RUNS, ManualRuns, is_manual, manual_occurrence};
pub use overlap::{MAX_BUFFERED, Overlap, OverlapState, Settled};
pub use preview::{NextRun, SlotLoad};
pub use runs::{
    AfterFailure, DeadRun, FailedRun, HISTORY_RUNS, MAX_ATTEMPTS, MAX_DEAD_RUNS,
    ONE_SHOT_HISTORY_RUNS, PendingRetry, RetryPolicy, RunEntry, RunOutcome, RunPolicy,
};
pub use slots::SlotCapacity;
pub use types::{
    FireRecord, Guarded, Limits, MAX_FIRE_EACH_CAP, MAX_INSTANT_MS, MAX_PERIOD_MS, MIN_INSTANT_MS,
    Misfire, NewSchedule, ScheduleError, ScheduleInfo, ScheduleRequest, Target, TickReport, Timing,
    record_pages_of,
};

/// A stored schedule (normalised: relative timings resolved).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct Record {
    /// The definition, as requested but its handler name shared (`def.rs`; stored as the
    /// [`NewSchedule`] it was admitted as).
    def: Def,
    paused: bool,
    /// The nominal next occurrence (before jitter); `None` for a cron schedule past its horizon.
    next: Option<Due>,
    /// Runs so far: the occurrence number of the next run (outbox ids).
    runs: u64,
    /// Runs of a catch-up the fire budget cut short, still owed: the occurrences from the first
    /// through the second instant (inclusive, consecutive occurrences of the timing, all reached
    /// when the catch-up was planned). While set, the record is due at the first, ahead of
    /// `next` (the resume point after the catch-up).
    owed: Option<(TimeMs, TimeMs)>,
    /// Who owns it: the principal that created it (`crate::authz`); replicated and persisted.
    owner: Principal,
    /// 1 at creation, bumped by every admitted request that changes it (optimistic
    /// concurrency, [`ScheduleRequest::IfVersion`]); replicated and persisted.
    version: u64,
    /// Layout 6: a run came due while this build had no handler of the record's name, so it
    /// was *parked* instead of run: the record keeps its due point (nothing consumed), leaves
    /// the due index, and waits until a build registering the handler ticks (it is then due
    /// at once) or an authorized request cancels it or re-targets it
    /// ([`ScheduleRequest::Retarget`]). Replicated and persisted.
    parked: bool,
    /// Layout 6: what the schedule does with failed runs (retries, pause on failure).
    policy: RunPolicy,
    /// Layout 6: a retry of a failed run, pending; while set, the record is due at its `at`
    /// (ahead of owed runs and `next`, which wait for it).
    retry: Option<PendingRetry>,
    /// Layout 6: runs that failed their last attempt, oldest first (at most
    /// `Scheduler::dead_cap`), until re-driven or discarded.
    dead: Vec<DeadRun>,
    /// Layout 6: dead runs evicted because the record held its most.
    dead_evicted: u64,
    /// Layout 6: its last runs, oldest first (a ring of at most `Scheduler::history_cap`).
    history: Vec<RunEntry>,
    /// Layout 7: its replicated run counters (`counters.rs`).
    counters: RunCounters,
    /// Layout 7: runs an operator asked for, pending (`manual.rs`).
    manual: ManualRuns,
    /// Layout 8: start and end bounds and a run limit (`bounds.rs`; recurring schedules only).
    bounds: Bounds,
    /// Layout 8: set when the schedule reached its end or its run limit: it is out of the due
    /// index for good (until new bounds or a replace) and kept, with why and when.
    retired: Option<Retired>,
    /// Layout 9: the overlap policy, the run it awaits and the occurrences it buffered
    /// (`overlap.rs`; recurring schedules only); `None` until a policy is set: the default
    /// state (`AllowAll`), one byte stored, so that records without one stay small.
    overlap: Option<Box<OverlapState>>,
    /// Layout 11: the exclusion calendar it names (`calendars.rs`; cron schedules only):
    /// its occurrences are the fire instants the calendar allows.
    calendar: Option<String>,
    /// Layout 12: the overlap policy of its backfills and the backfill run it awaits
    /// (`manual.rs`; recurring schedules only); `None` for [`Overlap::AllowAll`], the
    /// backfills' behaviour before layout 12 (one byte stored).
    backfill_overlap: Option<BackfillOverlap>,
}

impl Record {
    /// A new record as admission creates it.
    fn new(def: Def, next: Option<Due>, owner: Principal, policy: RunPolicy) -> Self {
        Self {
            def,
            paused: false,
            next,
            runs: 0,
            owed: None,
            owner,
            version: 1,
            parked: false,
            policy,
            retry: None,
            dead: Vec::new(),
            dead_evicted: 0,
            history: Vec::new(),
            counters: RunCounters::default(),
            manual: ManualRuns::default(),
            bounds: Bounds::NONE,
            retired: None,
            overlap: None,
            calendar: None,
            backfill_overlap: None,
        }
    }
}

/// The replicated schedule book with its due index (see the module documentation).
#[derive(Debug, Clone)]
pub struct Scheduler {
    component: ComponentId,
    limits: Limits,
    next_id: u64,
    zones: BTreeMap<String, ZoneRules>,
    /// Layout 11: the exclusion calendars schedules may name, by name (`calendars.rs`;
    /// stored with the zones).
    calendars: BTreeMap<String, std::sync::Arc<ExclusionCalendar>>,
    /// The records by id (`records.rs`: a slab found through a table of id chunks).
    records: records::Records,
    /// The book's run counters: every schedule's, those that left the book included
    /// (replicated, stored in the commit page; `counters.rs`).
    totals: RunCounters,
    keys: BTreeMap<String, u64>,
    /// Parsed cron schedules of the cron records (derived; rebuilt on load).
    crons: BTreeMap<u64, CronSchedule>,
    /// Zone name -> ids of the cron records naming it (derived, maintained by `reindex` and
    /// `remove`): an `InstallZone` re-evaluates exactly the k schedules of its zone.
    zoned: BTreeMap<String, BTreeSet<u64>>,
    /// Handler name -> ids of the parked records naming it (derived from `Record::parked`,
    /// rebuilt on load): a tick unparks a name's records once its handler is registered, a
    /// [`ScheduleRequest::Retarget`] moves them.
    parked: BTreeMap<String, BTreeSet<u64>>,
    /// Ids of the records holding dead runs (derived, rebuilt on load).
    dead_ids: BTreeSet<u64>,
    /// (255 - priority, due key, id) of every active record with a next due point
    /// (`due.rs`: an ordered set whose front a tick takes off at once).
    index: due::DueIndex,
    /// Active index entries per inverted priority (a tick probes only levels in use).
    levels: BTreeMap<u8, usize>,
    /// Whether the header (next id, zones) changed since the last save or load.
    header_dirty: bool,
    /// Which record page holds each record, page fill, and what changed since the last save.
    placement: Placement,
    /// Who may change what (configuration, like `limits`; not stored).
    policy: Policy,
    /// Guarded requests rejected for a stale version, applied by [`Scheduler::apply`] or
    /// issued by a handler run (an observation
    /// for the host's metrics: not stored, not compared).
    stale_rejections: u64,
    /// Emits refused to handlers ([`HandlerCtx::emit`]); an observation like
    /// `stale_rejections` (each is also in its tick's [`TickReport::errors`]).
    emit_failures: u64,
    /// Layout 13: the book's admission refusals (replicated, stored in the commit page;
    /// `counters.rs`).
    refusals: RefusalCounters,
    /// Whether `refusals` changed since the last save or load (the next save writes the
    /// commit page even when nothing else changed).
    refusals_dirty: bool,
    /// Encoded bytes of the installed zones and calendars (derived; what a save logs when
    /// they change, [`Limits::max_log_pages`]).
    zones_bytes: usize,
    /// The book was loaded from an older layout: the next save migrates it (a full save).
    migration: Option<legacy::OldExtent>,
    /// What one handler run may emit and reserves before it starts (configuration, like
    /// `limits`; not stored): `None` is one record of the emit bound.
    emit_budget: Option<crate::outbox::EmitBudget>,
    /// Schedules and bytes per owner (derived, rebuilt on load) for the policy's quotas.
    usage: quota::OwnerUsage,
    /// The handler names the records share (`def.rs`; local memory, not stored).
    names: HandlerNames,
}

impl Scheduler {
    /// An empty book for `component` (the first part of its occurrence ids).
    pub fn new(component: ComponentId, limits: Limits) -> Self {
        Self {
            component,
            limits,
            next_id: 1,
            zones: BTreeMap::new(),
            calendars: BTreeMap::new(),
            records: records::Records::default(),
            totals: RunCounters::default(),
            keys: BTreeMap::new(),
            crons: BTreeMap::new(),
            zoned: BTreeMap::new(),
            parked: BTreeMap::new(),
            dead_ids: BTreeSet::new(),
            index: due::DueIndex::default(),
            levels: BTreeMap::new(),
            header_dirty: false,
            placement: Placement::without_members(limits.page_bytes),
            policy: Policy::default(),
            stale_rejections: 0,
            emit_failures: 0,
            refusals: RefusalCounters::default(),
            refusals_dirty: false,
            // Two empty vectors (zones, calendars): their lengths.
            zones_bytes: 16,
            migration: None,
            emit_budget: None,
            usage: quota::OwnerUsage::default(),
            names: HandlerNames::default(),
        }
    }

    /// The same book with every handler run allowed `records` records of `bytes` bytes in all
    /// (each within [`Scheduler::emit_bound`]), reserved in the outbox before the run starts:
    /// a run starts only when the outbox can take the whole budget. Configuration, identical on
    /// every replica and not stored: set it again after [`Scheduler::load`]. The default is one
    /// record of the emit bound.
    pub fn with_emit_budget(mut self, records: usize, bytes: usize) -> Self {
        self.emit_budget = Some(crate::outbox::EmitBudget::new(records, bytes));
        self
    }

    /// An empty book for `component` that will be saved into `range`: its limits are bound to
    /// what the range holds ([`Limits::fitted_to`]), whatever the caller set, so a request it
    /// admits always fits the next save. [`Scheduler::new`] binds them at its first save or
    /// load; before that, admission knows only the caller's bounds.
    pub fn new_in(component: ComponentId, limits: Limits, range: crate::PageRange) -> Self {
        Self::new(component, limits.fitted_to(range))
    }

    /// Binds the limits to `range` ([`Limits::fitted_to`]): admission from here on proves the
    /// next save into `range` fits.
    pub(super) fn bind_range(&mut self, range: crate::PageRange) {
        self.limits = self.limits.fitted_to(range);
    }

    /// The same book with `policy` deciding who may change it ([`Scheduler::apply`]). The policy
    /// is configuration, identical on every replica and not stored: set it again after
    /// [`Scheduler::load`]. The default is [`Policy::default`].
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The authorization policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// How many [`ScheduleRequest::IfVersion`] and [`ScheduleRequest::UpsertIfVersion`]
    /// requests [`Scheduler::apply`] (or a handler run's request) rejected with
    /// [`ScheduleError::StaleVersion`] since this book was created or loaded (a metric for the
    /// host; not replicated state: not stored, not part of equality).
    pub fn stale_rejections(&self) -> u64 {
        self.stale_rejections
    }

    /// How many emits [`HandlerCtx::emit`] refused to handlers since this book was created or
    /// loaded (each is also a typed error in its tick's [`TickReport::errors`]; a metric for
    /// the host, not stored, not part of equality).
    pub fn emit_failures(&self) -> u64 {
        self.emit_failures
    }

    /// The component.
    pub fn component(&self) -> ComponentId {
        self.component
    }

    /// How many schedules the book holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the book is empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether the next [`Scheduler::save`] has something to write: the book changed since the
    /// last save or load.
    pub fn is_dirty(&self) -> bool {
        self.header_dirty
            || self.refusals_dirty
            || !self.placement.dirty_ids.is_empty()
            || self.migration.is_some()
    }

    /// Whether the book was loaded from an older stored layout that its next save migrates.
    pub fn migrating(&self) -> bool {
        self.migration.is_some()
    }

    /// The id of the schedule holding `key`.
    pub fn id_of(&self, key: &str) -> Option<u64> {
        self.keys.get(key).copied()
    }

    /// A view of schedule `id`.
    pub fn get(&self, id: u64) -> Option<ScheduleInfo> {
        self.records.get(&id).map(|r| ScheduleInfo {
            id,
            schedule: r.def.to_schedule(),
            paused: r.paused,
            next: r.next,
            runs: r.runs,
            owed: r.owed,
            owner: r.owner,
            version: r.version,
            parked: r.parked,
            policy: r.policy,
            retry: r.retry,
            dead: r.dead.clone(),
            dead_evicted: r.dead_evicted,
            history: r.history.clone(),
            counters: r.counters,
            manual: r.manual,
            bounds: r.bounds,
            retired: r.retired,
            overlap: r.overlap().clone(),
            calendar: r.calendar.clone(),
            backfill_overlap: r.backfill_overlap.unwrap_or_default(),
        })
    }

    /// How many schedules are parked: a run came due while no handler of their name was
    /// registered ([`ScheduleInfo::parked`]).
    pub fn parked_count(&self) -> usize {
        self.parked.values().map(BTreeSet::len).sum()
    }

    /// The parked schedules by the handler name they wait for: `(handler, ids ascending)`,
    /// ascending by name.
    pub fn parked(&self) -> impl Iterator<Item = (&str, &BTreeSet<u64>)> + '_ {
        self.parked.iter().map(|(n, ids)| (n.as_str(), ids))
    }

    /// The zone rules installed under `name` (read-only; `schedule::query` renders a cron
    /// schedule's instants in its zone with them).
    pub fn zone(&self, name: &str) -> Option<&ZoneRules> {
        self.zones.get(name)
    }

    /// Every schedule id, ascending.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.records.keys().copied()
    }
}

impl Scheduler {
    /// Whether `other` holds the same book but for its refusal counters: what a refused
    /// request leaves as it was (it counts itself in [`Scheduler::refusals`], layout 13, and
    /// changes nothing else).
    pub fn eq_but_refusals(&self, other: &Self) -> bool {
        self.component == other.component
            && self.next_id == other.next_id
            && self.zones == other.zones
            && self.calendars == other.calendars
            && self.records == other.records
            && self.totals == other.totals
    }
}

impl PartialEq for Scheduler {
    fn eq(&self, other: &Self) -> bool {
        self.component == other.component
            && self.next_id == other.next_id
            && self.zones == other.zones
            && self.calendars == other.calendars
            && self.records == other.records
            && self.totals == other.totals
            && self.refusals == other.refusals
    }
}
