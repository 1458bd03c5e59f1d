//! Cron entries and the context their callbacks see.
//!
//! # Why the context looks like this
//!
//! Entries act on the application's state, which the host passes to every evaluation
//! explicitly: tables are generic over the state type `S`, and
//! [`CronTable::evaluate`](crate::CronTable::evaluate) takes `&mut S` and the reserved pages.
//! A rule gets a [`RuleCtx`] with *shared* access (it decides, it must not act), an action gets an
//! [`ActionCtx`] with *exclusive* access to both. There are no globals, no `Rc<RefCell<_>>`, no
//! captured handles to the ledger: the borrow checker proves that nothing else touches the state
//! during a pass, and the same table can be driven by a simulator, a test or a real engine.
//!
//! Callbacks cannot change the table they run in (the table is borrowed by the pass). They
//! *request* changes ([`ActionCtx::request_add`] and friends); the table applies them after the
//! pass, in request order, so a pass always runs over one fixed set of entries and every replica
//! applies the same changes in the same order.

use std::collections::BTreeSet;
use std::fmt;

use crate::due::{Due, Schedule};
use crate::pages::ReservedPages;
use crate::periodic::Periodic;
use crate::schedule::{Overlap, ScheduleError};
use crate::tick::{ComponentId, Tick, TimeMs};

/// Why a table entry can never run again ([`EntryRetired`], [`Schedule::retirement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EntryEnd {
    /// Its end ([`CronRule::until`](crate::schedule::CronRule::until)) passed.
    Ended,
    /// Its run limit ([`CronRule::with_max_runs`](crate::schedule::CronRule::with_max_runs))
    /// is reached.
    RunLimit,
    /// No bound ends it, but its search found no further instant (the cron search horizon,
    /// or an exclusion calendar search that spent its budget, traced when it did).
    Stopped,
}

impl fmt::Display for EntryEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EntryEnd::Ended => "its end passed",
            EntryEnd::RunLimit => "its run limit is reached",
            EntryEnd::Stopped => "its schedule has no further instant",
        })
    }
}

/// A table entry retired by a tick: the step that stored "never again" as its next due point
/// ([`TickOutcome::retired`](crate::TickOutcome::retired)). The same on every replica (a
/// function of the committed tick, the stored point and the rule). The entry stays in the
/// table, idle; [`CronTable::retired_entries`](crate::CronTable::retired_entries) lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRetired {
    /// The entry's position.
    pub position: u32,
    /// Why it can never run again.
    pub end: EntryEnd,
    /// The sequence number of the tick that retired it.
    pub seq: u64,
    /// That tick's agreed time.
    pub at_ms: Option<TimeMs>,
}

/// What a table entry's overlap policy did because its previous run has no result yet
/// ([`EntryDiverted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Diversion {
    /// A planned run was skipped ([`Overlap::Skip`], or a run after the first of one step
    /// under [`Overlap::BufferOne`]).
    Skipped,
    /// The due entry was held, not stepped ([`Overlap::BufferOne`]): its due occurrences wait,
    /// and the first tick after the result steps it as a late tick.
    Held,
    /// The previous run was cancelled ([`Overlap::CancelOther`]) and the planned run ran in
    /// its place: every record the entry emitted at an outbox index below `mark` (the index
    /// the new run's first record got, or would have got had it emitted) is no longer
    /// awaited. The host keeps the mark ([`CancelledRuns`]) and reads results through it
    /// ([`CancelledRuns::view`]), so the entry awaits the new run only.
    Cancelled {
        /// The entry's records below this outbox index belong to cancelled runs.
        mark: u64,
    },
}

/// What a table entry's overlap policy did to a run (or a step) because the entry's previous
/// run has no result yet ([`TickOutcome::diverted`](crate::TickOutcome::diverted)): kept it
/// from happening ([`Diversion::Skipped`], [`Diversion::Held`]), or ran it and cancelled the
/// previous run ([`Diversion::Cancelled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryDiverted {
    /// The entry's position.
    pub position: u32,
    /// The due point of the skipped run, the stored due point of the held entry, or the due
    /// point of the run that ran in the cancelled run's place.
    pub due: Due,
    /// What the policy did.
    pub what: Diversion,
}

pub use crate::table::{CancelledRuns, EntryCancels, MarkedOutbox};

/// Which table entries of a component await a result: their runs emitted outbox records
/// ([`ActionCtx::emit`]) that have no result yet. The host passes its outbox
/// ([`CronTable::evaluate_with_results`](crate::CronTable::evaluate_with_results)), which
/// implements it; the answer must be a function of replicated state.
///
/// Entries under [`Overlap::CancelOther`] need a view that knows which runs were cancelled:
/// the host's [`CancelledRuns`] over its outbox ([`CancelledRuns::view`]).
pub trait PendingResults {
    /// Adds to `out` the position of every entry of `component`'s table that has an emitted
    /// record without a result (of a run nothing cancelled).
    fn awaiting(&self, component: ComponentId, out: &mut BTreeSet<u32>);

    /// The outbox index the next appended record gets: the mark a cancellation
    /// ([`Diversion::Cancelled`]) takes when the pass has no emits of its own. `None` (the
    /// default) for a view that does not know indices: a pass cannot cancel through it, and
    /// an entry under [`Overlap::CancelOther`] whose previous run awaits runs as under
    /// [`Overlap::AllowAll`], reported ([`TableError::NoResultView`](crate::TableError::NoResultView)).
    fn append_index(&self) -> Option<u64> {
        None
    }
}

/// "No result yet", exactly as the book's overlap reads it: a record a table entry emitted is
/// awaited until its result is applied through consensus or the consumer's progress trims it
/// (no result can arrive for it any more). O(held records).
impl PendingResults for crate::outbox::Outbox {
    fn awaiting(&self, component: ComponentId, out: &mut BTreeSet<u32>) {
        for (index, record) in self.iter() {
            let id = record.id;
            if id.component == component
                && id.origin() == crate::outbox::Origin::Table
                && !self.has_result(index)
                && let Ok(position) = u32::try_from(id.emitter())
            {
                out.insert(position);
            }
        }
    }

    fn append_index(&self) -> Option<u64> {
        Some(self.next_index())
    }
}

/// What a rule sees: the tick, the entry's position, and shared access to state and pages.
pub struct RuleCtx<'a, S> {
    /// The committed tick being evaluated.
    pub tick: &'a Tick,
    /// The position of the entry whose rule runs.
    pub position: u32,
    /// The application's state, read-only.
    pub state: &'a S,
    /// The reserved pages, read-only.
    pub pages: &'a dyn ReservedPages,
}

/// What an action (and a schedule-next callback) sees: exclusive access to state and pages, and
/// a way to request table changes that apply after the pass.
pub struct ActionCtx<'a, S> {
    /// The committed tick being evaluated.
    pub tick: &'a Tick,
    /// The position of the entry that runs.
    pub position: u32,
    /// For indexed entries (periodic and other [`Schedule`]s), the due point of this run (on
    /// the drift-free grid); `None` for entries with a user rule. With
    /// [`MisfirePolicy::FireEach`](crate::MisfirePolicy::FireEach) each catch-up run sees its
    /// own due point, which makes a good idempotence key.
    pub due: Option<Due>,
    /// The application's state.
    pub state: &'a mut S,
    /// The reserved pages (writes happen inside execution of the committed tick).
    pub pages: &'a mut dyn ReservedPages,
    pub(crate) changes: &'a mut Vec<TableChange<S>>,
    /// The outbox room the ledger reserved for this pass (`CronLedger::with_table_emits`).
    pub(crate) emits: Option<&'a mut crate::outbox::Emits>,
}

impl<S> ActionCtx<'_, S> {
    /// The due time of this run, for time-keyed schedules such as periodic entries.
    pub fn due_ms(&self) -> Option<TimeMs> {
        self.due.and_then(|d| d.time_ms())
    }

    /// The deterministic id of this run, for outbox records of its external effects
    /// (`ctx.state.outbox.append(OutboxRecord::new(ctx.occurrence_id(), …))` with the ledger's
    /// [`Outbox`](crate::outbox::Outbox) in its replicated state): `(component, position,
    /// occurrence)` where the occurrence is the run's due point (a time's milliseconds mapped
    /// order-preservingly to `u64`, or a sequence number) for indexed entries, and the tick's
    /// sequence number for entries with a user rule (they run at most once per tick). Replicas,
    /// replays and restarts derive the same id; two runs of one entry never share one.
    pub fn occurrence_id(&self) -> crate::outbox::OccurrenceId {
        let occurrence = match self.due {
            // Flipping the sign bit maps i64 order onto u64 order.
            Some(Due::Time(t)) => (t as u64) ^ (1 << 63),
            Some(Due::Seq(s)) => s,
            None => self.tick.bft_sequence_num,
        };
        crate::outbox::OccurrenceId::new(
            self.tick.component_id,
            u64::from(self.position),
            occurrence,
        )
    }

    /// Emits an outbox record for an external effect into the ledger's one outbox (the one its
    /// schedule book's handlers emit into), appended after the pass; returns the index it will
    /// get. Its id is this run's: `(component, Origin::Table ‖ sub-index ‖ position,
    /// occurrence)` with the occurrence of [`ActionCtx::occurrence_id`] and the sub-index
    /// counting this run's records from 0, so several records per run keep distinct ids, and
    /// a result for it comes back to the ledger's table reaction
    /// (`LedgerScheduler::with_table_result_reaction`).
    ///
    /// Capacity: a `CronLedger` reserves the component's declared budget
    /// (`CronLedger::with_table_emits`) before the pass; a pass whose budget the outbox cannot
    /// take waits (its entries stay due) until the consumer trims the outbox.
    ///
    /// # Errors
    /// [`crate::outbox::EmitError`]: nothing reserved for this table (undeclared, or no outbox),
    /// the pass's budget spent, a record too large. Nothing is staged then; the action decides
    /// (skip, count a missed effect in its state).
    pub fn emit(
        &mut self,
        handler: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Result<u64, crate::outbox::EmitError> {
        self.emit_record(handler, payload, None, None)
    }

    /// [`ActionCtx::emit`] with a routing topic and record type (`OutboxRecord::with_topic`,
    /// `with_kind`).
    pub fn emit_record(
        &mut self,
        handler: impl Into<String>,
        payload: impl Into<Vec<u8>>,
        topic: Option<&str>,
        kind: Option<&str>,
    ) -> Result<u64, crate::outbox::EmitError> {
        let base = self.occurrence_id();
        let Some(emits) = self.emits.as_deref_mut() else {
            return Err(crate::outbox::EmitError::NotReserved);
        };
        let (handler, payload) = (handler.into(), payload.into());
        emits.stage(
            |sub| {
                crate::outbox::OccurrenceId::emitted(
                    base.component,
                    crate::outbox::Origin::Table,
                    base.entry,
                    base.occurrence,
                    sub,
                )
            },
            |id| {
                let mut r = crate::outbox::OutboxRecord::new(id, handler, payload);
                if let Some(t) = topic {
                    r = r.with_topic(t);
                }
                if let Some(k) = kind {
                    r = r.with_kind(k);
                }
                r
            },
        )
    }

    /// Requests that `entry` be added after the pass (a taken position is reported as an error
    /// in the tick's outcome, like [`CronTable::add`](crate::CronTable::add)).
    pub fn request_add(&mut self, entry: CronEntry<S>) {
        self.changes.push(TableChange::Add(entry));
    }

    /// Requests that the entry at `position` be removed after the pass (its on_remove runs then).
    pub fn request_remove(&mut self, position: u32) {
        self.changes.push(TableChange::Remove(position));
    }

    /// Requests that `entry` replace the entry at its position after the pass.
    pub fn request_replace(&mut self, entry: CronEntry<S>) {
        self.changes.push(TableChange::Replace(entry));
    }
}

/// A change to a table requested during a pass, applied after it in request order.
pub enum TableChange<S> {
    /// Add an entry (error if its position is taken).
    Add(CronEntry<S>),
    /// Remove the entry at this position (nothing if absent).
    Remove(u32),
    /// Replace the entry at the new entry's position (error if absent).
    Replace(CronEntry<S>),
}

impl<S> fmt::Debug for TableChange<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableChange::Add(e) => f.debug_tuple("Add").field(&e.position).finish(),
            TableChange::Remove(p) => f.debug_tuple("Remove").field(p).finish(),
            TableChange::Replace(e) => f.debug_tuple("Replace").field(&e.position).finish(),
        }
    }
}

/// A user rule: decides from the tick, the state and the pages whether the action runs.
pub type RuleFn<S> = Box<dyn Fn(&RuleCtx<'_, S>) -> bool + Send>;
/// An action, or a schedule-next callback (called before the action when the rule holds).
pub type ActionFn<S> = Box<dyn FnMut(&mut ActionCtx<'_, S>) + Send>;
/// Called with `(component_id, position)` when the entry is removed from its table.
///
/// It gets no state and no pages on purpose: removal may happen during application setup, and
/// page writes outside execution would diverge replicas. Built-in entries drop their own
/// persisted records through the table instead.
pub type OnRemoveFn = Box<dyn FnMut(ComponentId, u32) + Send>;

/// When an entry runs.
pub enum Rule<S> {
    /// User code, called on every tick (in position order with the other entries).
    Custom(RuleFn<S>),
    /// A periodic schedule on agreed time: indexed by next due time, so a tick only touches
    /// the entries that are due.
    Periodic(Periodic),
    /// Any other known schedule (every N sequence numbers, cron expressions, delays): indexed
    /// like periodic entries.
    Scheduled(Box<dyn Schedule>),
}

impl<S> Rule<S> {
    /// The known schedule of an indexed rule, `None` for user code.
    pub fn schedule(&self) -> Option<&dyn Schedule> {
        match self {
            Rule::Custom(_) => None,
            Rule::Periodic(p) => Some(p),
            Rule::Scheduled(s) => Some(s.as_ref()),
        }
    }
}

impl<S> fmt::Debug for Rule<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Custom(_) => f.write_str("Custom(..)"),
            Rule::Periodic(p) => f.debug_tuple("Periodic").field(p).finish(),
            Rule::Scheduled(s) => f.debug_tuple("Scheduled").field(s).finish(),
        }
    }
}

/// One entry of a cron table: position, rule, action, optional schedule-next and on-remove.
pub struct CronEntry<S> {
    pub(crate) position: u32,
    pub(crate) rule: Rule<S>,
    pub(crate) action: ActionFn<S>,
    pub(crate) schedule_next: Option<ActionFn<S>>,
    pub(crate) on_remove: Option<OnRemoveFn>,
    /// What a due run does while the entry's previous run has no result yet.
    pub(crate) overlap: Overlap,
}

impl<S> fmt::Debug for CronEntry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronEntry")
            .field("position", &self.position)
            .field("rule", &self.rule)
            .field("schedule_next", &self.schedule_next.is_some())
            .field("on_remove", &self.on_remove.is_some())
            .field("overlap", &self.overlap)
            .finish()
    }
}

impl<S> CronEntry<S> {
    /// An entry at `position` whose action runs on every tick for which `rule` holds.
    pub fn new(
        position: u32,
        rule: impl Fn(&RuleCtx<'_, S>) -> bool + Send + 'static,
        action: impl FnMut(&mut ActionCtx<'_, S>) + Send + 'static,
    ) -> Self {
        Self {
            position,
            rule: Rule::Custom(Box::new(rule)),
            action: Box::new(action),
            schedule_next: None,
            on_remove: None,
            overlap: Overlap::AllowAll,
        }
    }

    /// The periodic-action factory: an entry at `position` running `action` on `schedule`.
    ///
    /// The rule is false without agreed time, true on the first tick with time that finds no
    /// stored schedule for the position (or at the schedule's start), then on the drift-free
    /// grid. The table persists the schedule in its page range (see [`crate::periodic`]).
    pub fn periodic(
        position: u32,
        schedule: Periodic,
        action: impl FnMut(&mut ActionCtx<'_, S>) + Send + 'static,
    ) -> Self {
        Self {
            position,
            rule: Rule::Periodic(schedule),
            action: Box::new(action),
            schedule_next: None,
            on_remove: None,
            overlap: Overlap::AllowAll,
        }
    }

    /// An indexed entry at `position` running `action` on any known `schedule` (for example
    /// [`EverySeq`](crate::EverySeq), or a cron expression implementing [`Schedule`]). Its
    /// next due point is persisted like a periodic entry's.
    pub fn scheduled(
        position: u32,
        schedule: impl Schedule,
        action: impl FnMut(&mut ActionCtx<'_, S>) + Send + 'static,
    ) -> Self {
        Self {
            position,
            rule: Rule::Scheduled(Box::new(schedule)),
            action: Box::new(action),
            schedule_next: None,
            on_remove: None,
            overlap: Overlap::AllowAll,
        }
    }

    /// The cron-expression factory: an indexed entry at `position` running `action` at the
    /// instants of `schedule` (see [`CronRule`](crate::schedule::CronRule): armed by the first
    /// tick with agreed time, then once per reached instant; the next instant is stored in the
    /// due index and the table's pages). Validation happened when `schedule` was parsed.
    pub fn cron(
        position: u32,
        schedule: crate::cron::CronSchedule,
        action: impl FnMut(&mut ActionCtx<'_, S>) + Send + 'static,
    ) -> Self {
        Self::scheduled(position, crate::schedule::CronRule::new(schedule), action)
    }

    /// With the overlap policy `overlap` (the book's [`Overlap`], one policy type for every
    /// schedule kind): what a due run of this indexed entry does while its previous run has
    /// no result yet, i.e. records it emitted ([`ActionCtx::emit`]) have neither a result
    /// applied nor been trimmed by the consumer. The default, [`Overlap::AllowAll`], runs it.
    ///
    /// - [`Overlap::Skip`]: the run is skipped, reported
    ///   ([`TickOutcome::diverted`](crate::TickOutcome::diverted)), counted and traced; the
    ///   schedule moves on as usual.
    /// - [`Overlap::BufferOne`]: the due entry is *held*: not stepped, its stored due point
    ///   kept, so its due occurrences wait as one. The first tick after the result steps it as
    ///   a late tick: its misfire policy picks what runs (the default, fire-once, the latest
    ///   reached instant); a second run that step plans after a first that emitted is skipped.
    ///
    /// - [`Overlap::CancelOther`]: the run runs, and the previous run is *cancelled*: its
    ///   records stop being awaited, so the entry awaits the new run only (when it emits). The
    ///   cancellation is reported ([`Diversion::Cancelled`], with the outbox index below which
    ///   the entry's records belong to cancelled runs), counted and traced; the host keeps
    ///   that mark as replicated state and reads results through it ([`CancelledRuns`]:
    ///   `CronLedger` does, and counts each entry's cancellations). A cancelled run's records
    ///   stay in the outbox and are delivered; a late result for one is applied as any other
    ///   and changes nothing for the entry (it neither releases the new run nor makes the
    ///   entry await again).
    ///
    /// "No result yet" is read from the host's outbox
    /// ([`CronTable::evaluate_with_results`](crate::CronTable::evaluate_with_results)) and from
    /// the runs of the same pass. Enters the registry's setup digest.
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] for an entry with a user rule (it has no occurrences to
    /// wait), and for [`Overlap::BufferAll`]: its buffer of occurrences needs persisted state
    /// the table's pages (one next due point per entry) do not hold.
    pub fn with_overlap(mut self, overlap: Overlap) -> Result<Self, ScheduleError> {
        if overlap.tracks() && self.rule.schedule().is_none() {
            return Err(ScheduleError::Invalid(
                "an overlap policy applies to indexed table entries only".into(),
            ));
        }
        if overlap == Overlap::BufferAll {
            return Err(ScheduleError::Invalid(
                "BufferAll is not offered on table entries: its buffer needs persisted state; \
                 use BufferOne or a schedule of the book"
                    .into(),
            ));
        }
        self.overlap = overlap;
        Ok(self)
    }

    /// The overlap policy ([`CronEntry::with_overlap`]).
    pub fn overlap(&self) -> Overlap {
        self.overlap
    }

    /// Adds a schedule-next callback, called before the action whenever the rule holds.
    pub fn with_schedule_next(
        mut self,
        schedule_next: impl FnMut(&mut ActionCtx<'_, S>) + Send + 'static,
    ) -> Self {
        self.schedule_next = Some(Box::new(schedule_next));
        self
    }

    /// Adds an on-remove callback, called with `(component_id, position)` on removal.
    pub fn with_on_remove(
        mut self,
        on_remove: impl FnMut(ComponentId, u32) + Send + 'static,
    ) -> Self {
        self.on_remove = Some(Box::new(on_remove));
        self
    }

    /// The entry's position (its key in the table).
    pub fn position(&self) -> u32 {
        self.position
    }

    /// The entry's rule.
    pub fn rule(&self) -> &Rule<S> {
        &self.rule
    }

    /// The periodic schedule, when the entry is periodic.
    pub fn periodic_schedule(&self) -> Option<&Periodic> {
        match &self.rule {
            Rule::Periodic(p) => Some(p),
            Rule::Custom(_) | Rule::Scheduled(_) => None,
        }
    }

    /// Whether the entry has a schedule-next callback.
    pub fn has_schedule_next(&self) -> bool {
        self.schedule_next.is_some()
    }

    /// Whether the entry has an on-remove callback.
    pub fn has_on_remove(&self) -> bool {
        self.on_remove.is_some()
    }
}
