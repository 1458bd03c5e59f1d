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

use std::fmt;

use crate::due::{Due, Schedule};
use crate::pages::ReservedPages;
use crate::periodic::Periodic;
use crate::tick::{ComponentId, Tick, TimeMs};

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
}

impl<S> fmt::Debug for CronEntry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronEntry")
            .field("position", &self.position)
            .field("rule", &self.rule)
            .field("schedule_next", &self.schedule_next.is_some())
            .field("on_remove", &self.on_remove.is_some())
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
