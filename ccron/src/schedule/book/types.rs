//! The book's public vocabulary: timings, misfire policies, schedule definitions and requests,
//! limits, errors, and the views and reports the book hands out.

use crate::authz::{Action, Principal};
use crate::codec::CodecError;
use crate::cron::{CronError, ExclusionCalendar, ZoneRules};
use crate::due::Due;
use crate::outbox::OutboxError;
use crate::pages::PageRange;
use crate::schedule::store::Layout;
use crate::tick::TimeMs;

use super::{
    Bounds, DeadRun, FailedRun, ManualRuns, PendingRetry, RetireReason, Retired, RunCounters,
    RunEntry, RunOutcome, RunPolicy,
};

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum Timing {
    /// A cron expression read in the zone named `zone` (rules installed in the book with
    /// [`ScheduleRequest::InstallZone`]; `None` = UTC). First fire: strictly after admission.
    Cron {
        /// The expression (`docs/cron-expressions.md`).
        expression: String,
        /// The zone's name, or `None` for UTC.
        zone: Option<String>,
    },
    /// Every `period_ms` of agreed time on the grid `start_ms + k·period_ms` (`start_ms`
    /// defaults to the admission time: the first run is due at once).
    Every {
        /// The period, positive.
        period_ms: i64,
        /// The grid's origin.
        start_ms: Option<TimeMs>,
    },
    /// Once, at an agreed time or sequence number (a delayed one-shot task).
    At(Due),
    /// Once, `delay_ms` of agreed time after admission (stored as [`Timing::At`]).
    AfterMs(i64),
    /// Once, `delay` sequence numbers after admission (stored as [`Timing::At`]).
    AfterSeqs(u64),
    /// Once, at agreed time `at_ms` or at sequence number `seq`, whichever a committed tick
    /// reaches first ("expire at 12:00 or after 1,000 more batches"). The sequence number is the
    /// one every tick carries ([`Tick::bft_sequence_num`](crate::Tick): the consensus sequence
    /// number of the committed batch executing the tick), the same counter as
    /// [`Due::Seq`] and [`Timing::AfterSeqs`]. The run reports `Due::Time(at_ms)` when the time
    /// was reached (also when both were), `Due::Seq(seq)` otherwise. `at_ms` lies in
    /// `[MIN_INSTANT_MS, MAX_INSTANT_MS)`; jitter delays the time trigger only.
    AtOrSeq {
        /// The agreed time trigger.
        at_ms: TimeMs,
        /// The sequence number trigger.
        seq: u64,
    },
    /// Once, `delay_ms` of agreed time or `delay_seqs` sequence numbers after admission,
    /// whichever comes first (stored as [`Timing::AtOrSeq`]; a sum past the ranges is rejected
    /// at admission).
    AfterMsOrSeqs {
        /// The time delay, in `[0, MAX_PERIOD_MS]` ms.
        delay_ms: i64,
        /// The sequence delay.
        delay_seqs: u64,
    },
}

impl Timing {
    /// Whether the timing fires once (the schedule leaves the book after its run).
    pub fn is_one_shot(&self) -> bool {
        !matches!(self, Timing::Cron { .. } | Timing::Every { .. })
    }
}

/// The earliest instant a request may carry (`Timing::Every::start_ms`, `Timing::At` with
/// a time): the Unix epoch. Admission rejects an earlier one ([`ScheduleError::Invalid`]).
pub const MIN_INSTANT_MS: TimeMs = 0;

/// The end of the instants a request may carry: 4000-01-01T00:00:00Z in Unix ms (exclusive).
/// Admission rejects a later one ([`ScheduleError::Invalid`]); together with
/// [`MAX_PERIOD_MS`] this keeps `start + k·period` far from `i64` overflow for any tick
/// before the year 4000, and every occurrence computation is checked beyond it.
pub const MAX_INSTANT_MS: TimeMs = 64_060_588_800_000;

/// The longest period (`Timing::Every::period_ms`), delay (`Timing::AfterMs`) and expiry
/// deadline (`Misfire::ExpireAfter`) a request may carry: the width of the instant range
/// (about 2030 years). Periods are at least 1 ms; delays and deadlines at least 0.
pub const MAX_PERIOD_MS: i64 = MAX_INSTANT_MS - MIN_INSTANT_MS;

/// What a tick does with the occurrences of a schedule it reached late.
///
/// The tick at time `now` has reached the occurrences `r1 < r2 < … <= rk <= now` (at least
/// one). The recurring policies follow the same rule as the periodic table entries'
/// [`crate::MisfirePolicy`]: a catch-up stands for the *most recent* missed occurrences
/// (Kubernetes' "latest only", Quartz's fire-once-now), and the phase never drifts (the next
/// occurrence is the first of the timing after `now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, bincode::Encode, bincode::Decode)]
pub enum Misfire {
    /// Run only when the tick is on time (only `r1` reached); otherwise run nothing and wait for
    /// the next occurrence after `now`.
    Skip,
    /// Run once, for the latest reached occurrence `rk`; the earlier ones are dropped. The
    /// default.
    #[default]
    FireOnce,
    /// Run once per reached occurrence, the latest `min(k, cap)` of them in ascending order;
    /// older ones beyond the cap are dropped.
    FireEach {
        /// The most runs one tick may cause for this schedule (at least 1).
        cap: u32,
    },
    /// Fire once with a deadline: run once, for the latest reached occurrence, if it is at most
    /// `deadline_ms` old; when it is older (e.g. an order-expiry task after a long outage), run
    /// nothing.
    ExpireAfter {
        /// How late a run may still happen.
        deadline_ms: i64,
    },
}

/// A schedule as requested (see [`ScheduleRequest`]).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct NewSchedule {
    /// A unique client key (create-or-replace by key, cancel by key), or none.
    pub key: Option<String>,
    /// The registered handler it runs.
    pub handler: String,
    /// When it fires.
    pub timing: Timing,
    /// What a late tick does.
    pub misfire: Misfire,
    /// Higher runs first when the per-tick budget cannot fit everything due.
    pub priority: u8,
    /// Each time occurrence's run is delayed by `hash(id) mod (jitter_ms + 1)` ms: spreads
    /// schedules sharing an instant, identically on every replica.
    pub jitter_ms: u32,
    /// Opaque bytes handed to the handler.
    pub payload: Vec<u8>,
    /// A routing topic carried into every outbox record a run of the schedule emits
    /// ([`OutboxRecord::topic`](crate::outbox::OutboxRecord::topic)), so that a worker pool
    /// can route by it. At most [`Limits::max_topic_bytes`] bytes of printable ASCII without
    /// spaces (`0x21..=0x7E`), not empty; checked at admission.
    pub topic: Option<String>,
    /// A record type carried like the topic
    /// ([`OutboxRecord::kind`](crate::outbox::OutboxRecord::kind)), same bounds.
    pub kind: Option<String>,
}

impl NewSchedule {
    /// A schedule running `handler` on `timing`, default policy (fire once, priority 0, no
    /// jitter, empty payload, no key).
    pub fn new(handler: impl Into<String>, timing: Timing) -> Self {
        Self {
            key: None,
            handler: handler.into(),
            timing,
            misfire: Misfire::default(),
            priority: 0,
            jitter_ms: 0,
            payload: Vec::new(),
            topic: None,
            kind: None,
        }
    }

    /// With a client key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// With a misfire policy.
    pub fn with_misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// With a priority.
    pub fn with_priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// With jitter.
    pub fn with_jitter_ms(mut self, jitter_ms: u32) -> Self {
        self.jitter_ms = jitter_ms;
        self
    }

    /// With a payload.
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// With a routing topic for the outbox records its runs emit.
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// With a record type for the outbox records its runs emit.
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }
}

/// Which schedule a request addresses.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum Target {
    /// By the id the book assigned.
    Id(u64),
    /// By client key.
    Key(String),
}

/// A change to the book: what a client request executed by the ledger, or a handler, carries.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum ScheduleRequest {
    /// A new schedule (its key, if any, must be free).
    Create(NewSchedule),
    /// Create, or replace the schedule holding the same key (the key is required).
    Upsert(NewSchedule),
    /// Replace an existing schedule's definition (it keeps its id and run counter, and is
    /// re-armed from the admission point, dropping runs still owed from a catch-up; a paused one
    /// stays paused).
    Replace {
        /// The schedule.
        target: Target,
        /// Its new definition (its key must be the target's or free).
        schedule: NewSchedule,
    },
    /// Stop firing, keeping the next due point (the phase).
    Pause(Target),
    /// Fire again from the kept next due point; occurrences passed meanwhile go through the
    /// misfire policy on the next tick.
    Resume(Target),
    /// Remove the schedule.
    Cancel(Target),
    /// Optimistic concurrency: apply `change` to `target` only if the schedule's version
    /// ([`ScheduleInfo::version`]) is still `version`; otherwise reject it with
    /// [`ScheduleError::StaleVersion`] and change nothing. Authorization is that of the
    /// change (checked before the version, so a stranger learns nothing).
    IfVersion {
        /// The schedule.
        target: Target,
        /// The version the requester last saw.
        version: u64,
        /// What to do when it matches.
        change: Guarded,
    },
    /// Install (or update) zone rules cron schedules may name. Every admitted cron schedule in
    /// that zone (running or paused) is re-evaluated under the new rules: its next due point
    /// becomes the first instant of the new rules after the request's agreed time, or at or
    /// after its old point when that was already reached (see `docs/scheduling.md`, "Zone rule
    /// changes").
    InstallZone(ZoneRules),
    /// Optimistic concurrency for an upsert (the last variant, so the others keep their
    /// encoding): as [`ScheduleRequest::Upsert`], but only if the schedule holding the key is
    /// still at `version` ([`ScheduleInfo::version`]), or, with
    /// `version` 0, only if no schedule holds the key (create, never overwrite). A schedule at
    /// another version is [`ScheduleError::StaleVersion`] (for 0: the key is taken); a non-zero
    /// `version` for a key no schedule holds is [`ScheduleError::UnknownSchedule`]. Either
    /// way nothing changes. Authorization is the upsert's (replace the holder, or create),
    /// checked before the version.
    UpsertIfVersion {
        /// The definition (its key is required).
        schedule: NewSchedule,
        /// The version the requester last saw, or 0 for "no schedule holds the key".
        version: u64,
    },
    /// Moves parked schedules ([`ScheduleInfo::parked`]) waiting for handler `from_handler` to
    /// the registered handler `to_handler` (after a handler was renamed or dropped by a new
    /// build): each keeps its id, due point, run counter, owner and key, gets version + 1, and
    /// is due again at once. Only the requester's own schedules move, or every one for an
    /// admin ([`crate::authz::Policy`]); at most [`Limits::budget_per_tick`] per request,
    /// ascending id (repeat the request for the rest): the reply is how many moved. An
    /// unregistered `to_handler` is [`ScheduleError::UnknownHandler`]; nothing parked for the
    /// requester is [`ScheduleError::NothingParked`]. Appended, so the others keep their
    /// encoding.
    Retarget {
        /// The handler name the parked schedules wait for.
        from_handler: String,
        /// The registered handler they move to.
        to_handler: String,
    },
    /// Sets the run policy (retries of failed runs, pause on failure) of an existing schedule
    /// (its owner or an admin, as a replace; version + 1). A retry already pending keeps the
    /// attempt count it has.
    SetRunPolicy {
        /// The schedule.
        target: Target,
        /// Its new run policy.
        policy: RunPolicy,
    },
    /// As [`ScheduleRequest::Create`], with a run policy from the first run on.
    CreateWith {
        /// The schedule.
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
    },
    /// As [`ScheduleRequest::Upsert`], with a run policy (which replaces the holder's).
    UpsertWith {
        /// The schedule (its key is required).
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
    },
    /// Re-drives a dead run ([`ScheduleInfo::dead`]) of the schedule: tried again from attempt
    /// 1 on the next tick (its owner or an admin, [`Action::DeadLetter`]). Refused while a retry
    /// of the schedule is pending ([`ScheduleError::RunPending`]); a paused schedule runs it
    /// once resumed.
    Redrive {
        /// The schedule.
        target: Target,
        /// The dead run's occurrence number.
        occurrence: u64,
    },
    /// Drops a dead run (its owner or an admin, [`Action::DeadLetter`]); a one-shot schedule
    /// with nothing left leaves the book.
    Discard {
        /// The schedule.
        target: Target,
        /// The dead run's occurrence number.
        occurrence: u64,
    },
    /// Runs a recurring schedule once now (its owner or an admin, [`Action::Trigger`], version
    /// plus one): on the next tick, outside its regular phase and run counter, with an occurrence id
    /// derived from the request's agreed time ([`super::manual_occurrence`]). One trigger
    /// pending per schedule ([`ScheduleError::ManualRunPending`]); needs agreed time.
    TriggerNow(Target),
    /// Runs a recurring schedule's occurrences in the past window `[from_ms, to_ms]` again
    /// (its owner or an admin, [`Action::Trigger`], version plus one), oldest first, from the next
    /// tick on within the fire budget, each with an occurrence id derived from its nominal
    /// time ([`super::manual_occurrence`]), outside the regular phase and run counter. At most
    /// [`super::MAX_BACKFILL_RUNS`] occurrences ([`ScheduleError::Limit`]), `to_ms` at most the
    /// agreed time, one backfill pending per schedule ([`ScheduleError::ManualRunPending`]).
    /// The reply is the schedule's id.
    Backfill {
        /// The schedule.
        target: Target,
        /// The window's first instant.
        from_ms: TimeMs,
        /// Its last instant (inclusive).
        to_ms: TimeMs,
    },
    /// As [`ScheduleRequest::CreateWith`], with start and end bounds and a run limit
    /// ([`Bounds`]; recurring schedules only). Bounds under which the schedule could never fire
    /// are [`ScheduleError::NeverFires`]. Appended, so the others keep their encoding.
    CreateBounded {
        /// The schedule.
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
        /// Its bounds.
        bounds: Bounds,
    },
    /// As [`ScheduleRequest::UpsertWith`], with bounds (which replace the holder's).
    UpsertBounded {
        /// The schedule (its key is required).
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
        /// Its bounds.
        bounds: Bounds,
    },
    /// Sets the bounds of an existing recurring schedule (its owner or an admin, as a replace;
    /// version + 1): its next point becomes the first occurrence within the new bounds at or
    /// after its current one (for a retired schedule, strictly after the request's agreed
    /// time), runs still owed from a catch-up are dropped, and a retired schedule is active
    /// again. Bounds under which it could never fire again (its run counter at the limit, no
    /// occurrence left before the end) are [`ScheduleError::NeverFires`]; nothing changes.
    SetBounds {
        /// The schedule.
        target: Target,
        /// Its new bounds ([`Bounds::NONE`] removes them).
        bounds: Bounds,
    },
    /// As [`ScheduleRequest::CreateBounded`], with an overlap policy ([`super::Overlap`];
    /// recurring schedules only, [`ScheduleError::Invalid`] otherwise). Appended, so the
    /// others keep their encoding.
    CreateOverlap {
        /// The schedule.
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
        /// Its bounds.
        bounds: Bounds,
        /// Its overlap policy.
        overlap: super::Overlap,
    },
    /// As [`ScheduleRequest::UpsertBounded`], with an overlap policy (which replaces the
    /// holder's; a replaced schedule keeps the run it awaits and drops its buffered
    /// occurrences).
    UpsertOverlap {
        /// The schedule (its key is required).
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
        /// Its bounds.
        bounds: Bounds,
        /// Its overlap policy.
        overlap: super::Overlap,
    },
    /// Sets the overlap policy of an existing recurring schedule (its owner or an admin, as a
    /// replace; version + 1). Buffered occurrences beyond the new policy's bound are dropped
    /// and counted as skipped; [`super::Overlap::AllowAll`] stops waiting (what was buffered
    /// runs on the next tick).
    SetOverlap {
        /// The schedule.
        target: Target,
        /// Its new overlap policy.
        overlap: super::Overlap,
    },
    /// Installs (or replaces) an exclusion calendar recurring schedules may name (book layout 11;
    /// the same authorization as [`ScheduleRequest::InstallZone`]: an admin,
    /// [`Action::InstallZone`]). Stored with the zones: at most
    /// [`super::MAX_BOOK_CALENDARS`], and within [`Limits::max_zones_bytes`] together with
    /// them ([`ScheduleError::Limit`]). Replacing a calendar re-evaluates the schedules naming
    /// it (as a zone install does); one the new calendar would keep from ever firing refuses
    /// the install ([`ScheduleError::Cron`] with [`CronError::ExcludedForever`]). Nothing
    /// changes on error. Appended, so the others keep their encoding.
    InstallCalendar(ExclusionCalendar),
    /// Names an installed exclusion calendar for an existing recurring schedule (cron, or
    /// periodic from layout 12: its grid points the calendar allows, dates read in UTC), or none (its
    /// owner or an admin, as a replace; version + 1): from its current next point on, its
    /// occurrences are the fire instants the calendar allows (`docs/scheduling.md`,
    /// "Exclusion calendars"); owed catch-up runs are dropped. An unknown calendar is
    /// [`ScheduleError::UnknownCalendar`]; a one-shot schedule
    /// [`ScheduleError::Invalid`]; one the calendar keeps from ever firing again
    /// [`ScheduleError::Cron`] ([`CronError::ExcludedForever`]) or, within its end bound,
    /// [`ScheduleError::NeverFires`]. Nothing changes on error.
    SetCalendar {
        /// The schedule.
        target: Target,
        /// The calendar's name, or `None` to remove it.
        calendar: Option<String>,
    },
    /// As [`ScheduleRequest::CreateOverlap`], with an exclusion calendar from the first
    /// occurrence on (a recurring schedule only; refused as [`ScheduleRequest::SetCalendar`] is).
    CreateExcluding {
        /// The schedule.
        schedule: NewSchedule,
        /// Its run policy.
        policy: RunPolicy,
        /// Its bounds.
        bounds: Bounds,
        /// Its overlap policy.
        overlap: super::Overlap,
        /// The installed calendar it names.
        calendar: String,
    },
    /// As [`ScheduleRequest::Backfill`], the backfill's occurrences under their own overlap
    /// policy (book layout 12; `manual.rs`, "Backfill overlap"): what each does while the
    /// backfill's previous run has no result yet ([`super::Overlap::AllowAll`] is the plain
    /// request). Appended, so the others keep their encoding.
    BackfillWith {
        /// The schedule.
        target: Target,
        /// The window's first instant.
        from_ms: TimeMs,
        /// Its last instant (inclusive).
        to_ms: TimeMs,
        /// The backfill's overlap policy.
        overlap: super::Overlap,
    },
}

/// A change [`ScheduleRequest::IfVersion`] makes when the version matches (the same effect
/// as the plain request of that name).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum Guarded {
    /// As [`ScheduleRequest::Replace`] (a successful replace bumps the version).
    Replace(NewSchedule),
    /// As [`ScheduleRequest::Pause`].
    Pause,
    /// As [`ScheduleRequest::Resume`].
    Resume,
    /// As [`ScheduleRequest::Cancel`].
    Cancel,
}

/// Bounds on what the book admits (configuration, identical on every replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most schedules held.
    pub max_schedules: usize,
    /// Longest payload, bytes.
    pub max_payload_bytes: usize,
    /// Longest key or handler name, bytes.
    pub max_name_bytes: usize,
    /// Longest [`NewSchedule::topic`] or [`NewSchedule::kind`], bytes.
    pub max_topic_bytes: usize,
    /// Most zones installed.
    pub max_zones: usize,
    /// Size of the reserved pages the book is saved into (the store's page size may be larger,
    /// never smaller). Every stored record must fit one page: admission rejects a schedule
    /// whose stored form exceeds `page_bytes` minus 44 bytes of page and blob headers with
    /// [`ScheduleError::Limit`]. Part of the stored layout: loading pages saved with another
    /// value is an error.
    pub page_bytes: usize,
    /// The record pages of the range the book is saved into ([`record_pages_of`]); when set, a
    /// new schedule that no record page could hold is rejected at admission
    /// ([`ScheduleError::Limit`], nothing changes) instead of failing the next save. `None`:
    /// checked only by the save.
    pub max_record_pages: Option<u32>,
    /// The capacity in bytes of the zones part of the range the book is saved into
    /// ([`Limits::for_range`]), which holds the zones and the exclusion calendars; when set, an
    /// `InstallZone` or `InstallCalendar` after which they would not fit is rejected at admission ([`ScheduleError::Limit`], nothing changes) instead of
    /// failing every later save. `None`: checked only by the save.
    pub max_zones_bytes: Option<usize>,
    /// The log pages of the range the book is saved into ([`Limits::for_range`]; called
    /// `max_journal_pages` before the record log took the journal's place); when set, a request after which
    /// the next save could outgrow the whole log is rejected at admission
    /// ([`ScheduleError::LogFull`], nothing changes) instead of failing a later save. A save
    /// that does not fit the log's free part folds first (an empty log), so a save fits when it
    /// fits the whole log. The bound assumes the worst save the book can reach before its next
    /// save: every record rewritten (ticks may touch any of them), every record stored at the
    /// last save and removed since named, the zones rewritten. `None`: checked only by the save.
    pub max_log_pages: Option<u32>,
    /// Admission capacity per time slot ([`super::SlotCapacity`]): a new or replacing schedule
    /// whose first due point falls in a full slot is [`ScheduleError::SlotFull`]. `None` (the
    /// default): no capacity.
    pub slot_capacity: Option<super::SlotCapacity>,
    /// The fire budget: most handler runs one tick causes (a fire-each catch-up of 10 runs costs
    /// 10), and most schedules it steps. What does not fit stays due and runs on later ticks,
    /// higher priority first, then earlier due point, then lower id; a schedule stopped in the
    /// middle of a catch-up resumes it where it stopped. 0 is treated as 1.
    pub budget_per_tick: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_schedules: 2_000_000,
            max_payload_bytes: 4_096,
            max_name_bytes: 128,
            max_topic_bytes: 64,
            max_zones: 64,
            page_bytes: 4_096,
            max_record_pages: None,
            max_zones_bytes: None,
            max_log_pages: None,
            slot_capacity: None,
            budget_per_tick: 10_000,
        }
    }
}

impl Limits {
    /// These limits with admission bounded by what `range` (a book's range of pages of
    /// `page_bytes`) can hold: [`Limits::max_record_pages`], [`Limits::max_zones_bytes`] and
    /// [`Limits::max_log_pages`] from its layout (0 when the range is too small to lay
    /// out), so that every admitted request's save fits the range.
    pub fn for_range(self, range: PageRange) -> Self {
        let layout = Layout::of(range);
        Self {
            max_record_pages: Some(layout.map_or(0, |l| l.record_pages)),
            max_log_pages: Some(layout.map_or(0, |l| l.log.len())),
            max_zones_bytes: Some(
                layout.map_or(0, |l| crate::codec::capacity(l.zones, self.page_bytes)),
            ),
            ..self
        }
    }

    /// These limits bounded by what `range` can hold: every bound the guarantee "admitted ⇒
    /// saved" needs ([`Limits::max_record_pages`], [`Limits::max_zones_bytes`],
    /// [`Limits::max_log_pages`]) is the smaller of the caller's value (when set) and the one
    /// derived from the range ([`Limits::for_range`]). Unlike [`Limits::for_range`], a caller's
    /// larger value never wins: safety is never opt-in. [`Scheduler::load`](super::Scheduler::load),
    /// [`Scheduler::new_in`](super::Scheduler::new_in) and every save bind the book's limits
    /// this way.
    pub fn fitted_to(self, range: PageRange) -> Self {
        let derived = self.for_range(range);
        fn min_of<T: Ord + Copy>(user: Option<T>, derived: Option<T>) -> Option<T> {
            match (user, derived) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => b.or(a),
            }
        }
        Self {
            max_record_pages: min_of(self.max_record_pages, derived.max_record_pages),
            max_zones_bytes: min_of(self.max_zones_bytes, derived.max_zones_bytes),
            max_log_pages: min_of(self.max_log_pages, derived.max_log_pages),
            ..self
        }
    }
}

/// How many record pages a book saved into `range` has (0 when the range is too small to lay
/// out): the value for [`Limits::max_record_pages`].
pub fn record_pages_of(range: PageRange) -> u32 {
    Layout::of(range).map_or(0, |l| l.record_pages)
}

/// Errors of admitting requests, running ticks and persisting the book.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// No handler of this name is registered.
    #[error("unknown handler {0:?}")]
    UnknownHandler(String),
    /// No schedule has this id or key.
    #[error("no schedule {0:?}")]
    UnknownSchedule(Target),
    /// The key is held by another schedule.
    #[error("key {0:?} already used")]
    KeyInUse(String),
    /// An upsert without a key.
    #[error("upsert needs a key")]
    MissingKey,
    /// The cron expression or zone is invalid.
    #[error(transparent)]
    Cron(#[from] CronError),
    /// A cron schedule names a zone not installed in the book.
    #[error("zone {0:?} is not installed")]
    UnknownZone(String),
    /// A request names an exclusion calendar not installed in the book
    /// ([`ScheduleRequest::InstallCalendar`]); nothing changed.
    #[error("exclusion calendar {0:?} is not installed")]
    UnknownCalendar(String),
    /// A period or delay is not positive, or a misfire parameter is out of range.
    #[error("invalid schedule: {0}")]
    Invalid(String),
    /// The timing is relative to admission time but the request was executed without agreed
    /// time.
    #[error("the schedule needs agreed time at admission")]
    NeedsTime,
    /// A limit of [`Limits`] would be exceeded.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// A handler emitted a second outbox record for one occurrence (its id would repeat).
    #[error("one outbox record per occurrence")]
    SecondEmit,
    /// Appending to the outbox failed.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// A schedule request from a ledger state's own code (`ccron::host::Effects::schedule`)
    /// in a ledger without a schedule book.
    #[error("the ledger has no schedule book")]
    NoBook,
    /// An emit beyond the run's emit budget ([`Scheduler::with_emit_budget`](super::Scheduler::with_emit_budget)),
    /// or whose packed id does not fit (`crate::outbox::EmitError`); nothing was staged.
    #[error(transparent)]
    Emit(#[from] crate::outbox::EmitError),
    /// (Called `JournalFull` before the record log took the journal's place.) The request
    /// would let the next save outgrow the log pages of the book's range
    /// ([`Limits::max_log_pages`]); nothing changed. Save (a save logs only what changed
    /// since the last one), cancel schedules, or give the book more pages.
    #[error("the next save could need {need_pages} log pages, the range has {log_pages}")]
    LogFull {
        /// Log pages the worst next save could need after the request.
        need_pages: u64,
        /// The range's log pages.
        log_pages: u32,
    },
    /// A handler emitted a record larger than its run's emit bound
    /// ([`Scheduler::emit_bound`](super::Scheduler::emit_bound)); nothing was appended.
    #[error("an emitted record of {size_bytes} bytes exceeds the {max_bytes}-byte emit bound")]
    EmitTooLarge {
        /// [`OutboxRecord::size_bytes`](crate::outbox::OutboxRecord::size_bytes) of the record.
        size_bytes: usize,
        /// The run's emit bound.
        max_bytes: usize,
    },
    /// The pages failed or held a corrupt or oversized book.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The pages hold a book of another stored layout (`found`, e.g. 4, the write-ahead
    /// journal layout before the record log, or 3 from before versions and topics); this
    /// release reads only `supported`. Nothing was loaded, and a full save
    /// ([`Scheduler::save_all`](super::Scheduler::save_all)) into such a range is refused the
    /// same way.
    #[error("stored schedule book has layout version {found}, this release reads {supported}")]
    UnsupportedLayout {
        /// The stored layout version.
        found: u8,
        /// The one this release reads.
        supported: u8,
    },
    /// A decoded book violates its invariants.
    #[error("stored schedule book is invalid: {0}")]
    Corrupt(String),
    /// [`ScheduleRequest::IfVersion`] or [`ScheduleRequest::UpsertIfVersion`] named a version
    /// the schedule no longer has (another request changed it since; `expected` 0: the upsert
    /// asked for a free key); nothing changed.
    #[error("schedule {id} is at version {actual}, the request expected {expected}")]
    StaleVersion {
        /// The schedule.
        id: u64,
        /// The version the request carried.
        expected: u64,
        /// The schedule's version.
        actual: u64,
    },
    /// The schedule holds no dead run of this occurrence number; nothing changed.
    #[error("schedule {id} holds no dead run of occurrence {occurrence}")]
    NoDeadRun {
        /// The schedule.
        id: u64,
        /// The occurrence asked for.
        occurrence: u64,
    },
    /// A retry of the schedule is pending: a dead run is re-driven after it; nothing changed.
    #[error("schedule {0} has a retry pending")]
    RunPending(u64),
    /// [`ScheduleRequest::Retarget`] found no parked schedule waiting for this handler that
    /// the requester may change; nothing changed.
    #[error("no parked schedule waits for handler {0:?}")]
    NothingParked(String),
    /// A trigger (or a backfill) of the schedule is pending already; nothing changed.
    #[error("schedule {0} has a manual run of this kind pending")]
    ManualRunPending(u64),
    /// The policy does not let `by` do this ([`crate::authz`]); nothing changed.
    #[error("{by} may not {action}")]
    Unauthorized {
        /// Who asked.
        by: Principal,
        /// What was asked.
        action: Action,
    },
    /// The schedule could never fire (again) under the requested bounds or definition: no
    /// occurrence lies before its end bound, or its run counter is at its run limit
    /// ([`Bounds`]); nothing changed.
    #[error("the schedule could never fire: {0}")]
    NeverFires(RetireReason),
    /// The schedule's first due point falls in a time slot already holding its capacity
    /// ([`Limits::slot_capacity`]); nothing changed.
    #[error("the slot of {slot_ms} ms from {slot_start_ms} holds {held} due points, its capacity")]
    SlotFull {
        /// The slot's first instant.
        slot_start_ms: TimeMs,
        /// Its width.
        slot_ms: i64,
        /// Due points it holds.
        held: u64,
    },
    /// A due occurrence of schedule `id` found its previous run without a result and its
    /// [`super::Overlap::BufferAll`] buffer full ([`super::MAX_BUFFERED`]): it did not run
    /// (counted in [`super::OverlapState::overflowed`] and as skipped).
    #[error("schedule {id}: occurrence {occurrence} refused, its overlap buffer holds {bound}")]
    BufferFull {
        /// The schedule.
        id: u64,
        /// The refused occurrence's number.
        occurrence: u64,
        /// The buffer's bound.
        bound: usize,
    },
    /// The request would take `owner` past its quota ([`crate::authz::Quota`]); nothing
    /// changed.
    #[error("{owner} would hold {would} {kind}, its quota is {limit}")]
    QuotaExceeded {
        /// The schedules' owner.
        owner: Principal,
        /// What the quota counts.
        kind: crate::authz::QuotaKind,
        /// What the owner would hold after the request.
        would: u64,
        /// The quota.
        limit: u64,
    },
}

/// Largest [`Misfire::FireEach`] cap: bounds the occurrences one tick enumerates for one
/// schedule (a cron job every second after a year-long stall must not walk 31 million instants).
pub const MAX_FIRE_EACH_CAP: u32 = 1_000;

/// A read-only view of one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// Its id.
    pub id: u64,
    /// Its definition (relative timings resolved to [`Timing::At`]).
    pub schedule: NewSchedule,
    /// Whether it is paused.
    pub paused: bool,
    /// Its nominal next occurrence.
    pub next: Option<Due>,
    /// Its runs so far.
    pub runs: u64,
    /// Runs of a catch-up the fire budget carried over: the first and last owed occurrence
    /// (run before `next`, on the next ticks).
    pub owed: Option<(TimeMs, TimeMs)>,
    /// Who owns it (the principal that created it).
    pub owner: Principal,
    /// Its version: 1 at creation, bumped by every admitted request that changes it (replace,
    /// upsert of its key, pause, resume, retarget), never by ticks.
    /// [`ScheduleRequest::IfVersion`] compares against it.
    pub version: u64,
    /// Whether a run came due while no handler of its name was registered: the run is kept
    /// (its due point unchanged, nothing consumed) until a build registering the handler
    /// ticks, or a request cancels the schedule or re-targets it
    /// ([`ScheduleRequest::Retarget`]).
    pub parked: bool,
    /// What it does with failed runs.
    pub policy: RunPolicy,
    /// A retry of a failed run, pending (the schedule's later occurrences wait for it).
    pub retry: Option<PendingRetry>,
    /// Runs that failed their last attempt, oldest first (re-drive or discard them).
    pub dead: Vec<DeadRun>,
    /// Dead runs evicted because [`super::MAX_DEAD_RUNS`] were held (counted, never silent).
    pub dead_evicted: u64,
    /// Its last runs, oldest first ([`super::Scheduler::history`]).
    pub history: Vec<RunEntry>,
    /// Its replicated run counters (fired, failed, late, skipped, expired).
    pub counters: RunCounters,
    /// Runs an operator asked for, pending ([`ScheduleRequest::TriggerNow`],
    /// [`ScheduleRequest::Backfill`]).
    pub manual: ManualRuns,
    /// Its start and end bounds and run limit.
    pub bounds: Bounds,
    /// Set when it reached its end or its run limit: it fires no more regular runs.
    pub retired: Option<Retired>,
    /// Its overlap policy, the run it awaits and the occurrences it buffered
    /// ([`super::Overlap`]).
    pub overlap: super::OverlapState,
    /// The exclusion calendar it names ([`ScheduleRequest::SetCalendar`]), if any.
    pub calendar: Option<String>,
    /// Its backfills' overlap policy and the backfill run it awaits
    /// ([`ScheduleRequest::BackfillWith`]; the default for a plain backfill).
    pub backfill_overlap: super::BackfillOverlap,
}

/// One run of a handler in a tick (successful or not: see `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireRecord {
    /// The schedule.
    pub id: u64,
    /// The nominal occurrence it ran for.
    pub due: Due,
    /// Its occurrence number (the third part of its [`OccurrenceId`](crate::outbox::OccurrenceId)).
    pub occurrence: u64,
    /// Which attempt (1 for a first run).
    pub attempt: u32,
    /// How it ended.
    pub outcome: RunOutcome,
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Handler runs, in execution order.
    pub fired: Vec<FireRecord>,
    /// Schedules whose reached occurrences the misfire policy dropped without a run.
    pub skipped: Vec<u64>,
    /// Whether the budget stopped the tick with schedules still due (they carry over).
    pub carried_over: bool,
    /// Whether the outbox's room stopped the tick: a due run waits because the outbox could
    /// not take the record it may emit ([`Scheduler::emit_bound`](super::Scheduler::emit_bound));
    /// it runs once the consumer trims the outbox. Deterministic: the outbox is replicated.
    pub outbox_full: bool,
    /// Schedules parked by this tick: a run came due and no handler of its name is registered
    /// in this build; the run is kept, not consumed ([`ScheduleInfo::parked`]).
    pub parked: Vec<u64>,
    /// Parked schedules this tick made due again because their handler is registered now.
    pub unparked: usize,
    /// Runs that failed (an error or a caught panic), in execution order, with what happens
    /// next (a retry or a dead letter); each is in `fired` too.
    pub failed: Vec<FailedRun>,
    /// Errors: requests emitted by handlers that were rejected, failed emits, occurrences
    /// refused by a full overlap buffer ([`ScheduleError::BufferFull`]).
    pub errors: Vec<ScheduleError>,
    /// Occurrences the overlap policy did not run because the schedule's previous run has no
    /// result yet: (schedule, occurrence number), skipped ([`super::Overlap::Skip`], or
    /// beyond a buffer) or refused by a full buffer.
    pub overlap_skipped: Vec<(u64, u64)>,
    /// Occurrences the overlap policy buffered: (schedule, occurrence number).
    pub overlap_buffered: Vec<(u64, u64)>,
    /// Runs [`super::Overlap::CancelOther`] cancelled, in execution order: (schedule, the
    /// cancelled run's occurrence number, the occurrence that runs instead). The schedule no
    /// longer awaits the cancelled run's records: their late results settle nothing
    /// ([`super::Settled::OfUnawaitedRun`]).
    pub overlap_cancelled: Vec<(u64, u64, u64)>,
}
