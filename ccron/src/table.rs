//! The cron table of one component: entries by position, indexed evaluation, persisted schedule.
//!
//! Entries run in ascending position. Each entry lives in a dense slab under a slot number,
//! with the next due point of an indexed entry beside it; an ordered map gives the slot of a
//! position (used by add, remove and ordered walks, never per fire), and a hash map the same for
//! lookups (a fold of the schedule's log looks up every record). Indexed entries (periodic, or any
//! other known [`Schedule`]) sit in a due index (module `index`) bucketed by
//! due point, so [`CronTable::evaluate`] only visits the due ones plus the entries with a user
//! rule (which must be asked on every tick); the candidates are sorted into position order, so
//! the firing order is exactly that of [`CronTable::evaluate_linear`], the plain scan kept as
//! the reference model and benchmark baseline. A fire touches its slot, appends to a bucket
//! and to the change list: no ordered-map or hash-map operation per fired entry.

mod policy;

use std::collections::{BTreeMap, HashMap};

use crate::codec::{self, CodecError};
use crate::due::{Due, Schedule};
use crate::entry::{ActionCtx, CronEntry, Rule, RuleCtx, TableChange};
use crate::index::DueIndex;
use crate::pages::{PageRange, ReservedPages};
use crate::periodic::{IntHash, NO_PAGE, ScheduleChange, ScheduleStore};
use crate::table_store::{self, Records, TableStore};
use crate::tick::{ComponentId, Tick, TimeMs};

pub use policy::PolicyCounters;

/// Errors of a cron table.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableError {
    /// `add` at a position that already holds an entry (use `replace`).
    #[error("position {position} of component {component_id} is taken")]
    PositionTaken {
        /// The table's component.
        component_id: ComponentId,
        /// The taken position.
        position: u32,
    },
    /// `replace` of a position that holds no entry.
    #[error("position {position} of component {component_id} holds no entry")]
    NoSuchPosition {
        /// The table's component.
        component_id: ComponentId,
        /// The empty position.
        position: u32,
    },
    /// A tick for another component was handed to this table; nothing ran.
    #[error("tick for component {got} handed to the table of component {expected}")]
    WrongComponent {
        /// The table's component.
        expected: ComponentId,
        /// The tick's component.
        got: ComponentId,
    },
    /// An indexed (periodic or other scheduled) entry was added to a table without a page
    /// range for its schedule.
    #[error("component {component_id} has no persistence configured for scheduled entries")]
    NoPersistence {
        /// The table's component.
        component_id: ComponentId,
    },
    /// The configured bound on indexed entries is reached.
    #[error("component {component_id} already has the maximum of {max} scheduled entries")]
    ScheduleFull {
        /// The table's component.
        component_id: ComponentId,
        /// The configured bound.
        max: u32,
    },
    /// The page range cannot hold the configured number of schedule records.
    #[error("a schedule of {needed} bytes does not fit the range's {capacity} bytes")]
    RangeTooSmall {
        /// Bytes the configured bound needs.
        needed: usize,
        /// Bytes the range holds.
        capacity: usize,
    },
    /// The pages hold the schedule of another component (overlapping page ranges?).
    #[error("pages of component {expected} hold the schedule of component {found}")]
    ForeignSchedule {
        /// The table's component.
        expected: ComponentId,
        /// The component found in the pages.
        found: ComponentId,
    },
    /// The persisted schedule holds more records than the configured bound.
    #[error("persisted schedule holds {found} records, the bound is {max}")]
    TooManyRecords {
        /// Records found.
        found: usize,
        /// The configured bound.
        max: u32,
    },
    /// Reading or writing the schedule's pages failed.
    #[error("schedule persistence: {0}")]
    Persist(#[from] CodecError),
    /// The range has fewer pages than the table's layout needs for its bound (see
    /// [`CronTable::pages_needed`]).
    #[error("the schedule needs a range of {needed_pages} pages, the range has {pages}")]
    RangeTooShort {
        /// Pages the layout needs.
        needed_pages: u32,
        /// Pages the range has.
        pages: u32,
    },
    /// The pages hold a schedule in table layout 1 that cannot be migrated crash-atomically in
    /// place (one blob over a log-form range, or a copy the migration's full save would reach):
    /// clear the range (`clear_persistence`) or move the schedule with the older build. Other
    /// layout 1 schedules load, and the next save migrates them.
    #[error("the pages hold a schedule in table layout 1 that cannot be migrated in place")]
    OldLayout,
    /// An entry with a tracking overlap policy ([`CronEntry::with_overlap`]) was due in a pass
    /// given no outbox to read results from ([`CronTable::evaluate_emitting`] rather than
    /// [`CronTable::evaluate_with_results`]): it ran as under `AllowAll`.
    #[error(
        "entry {position} of component {component_id} has an overlap policy but the pass had no outbox view"
    )]
    NoResultView {
        /// The table's component.
        component_id: ComponentId,
        /// The entry.
        position: u32,
    },
    /// The commit page names a table layout version this build does not know.
    #[error("the pages hold table layout {found}, this build reads layouts 1 to 3")]
    UnsupportedLayout {
        /// The version found.
        found: u8,
    },
}

/// Where a table persists its schedule (next due points of indexed entries), and its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persistence {
    /// The table's own page range.
    pub range: PageRange,
    /// The most indexed (periodic and other scheduled) entries the table accepts: the typed
    /// bound instead of an abort.
    pub max_scheduled: u32,
}

/// What one persist of a table's schedule wrote ([`CronTable::last_persist_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// Page writes (saves and zeroes).
    pub writes: usize,
    /// Whether it folded every log synchronously first (a save larger than the free half, or
    /// a log too full for the paced fold to keep up).
    pub folded: bool,
    /// Record pages a paced fold rewrote in it.
    pub paced_pages: usize,
}

/// One run of an action during a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// The entry's position.
    pub position: u32,
    /// The run's due point for indexed entries, `None` for user rules.
    pub due: Option<Due>,
}

/// What one evaluation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickOutcome {
    /// Every action run, in the order they ran.
    pub fired: Vec<Fired>,
    /// Requested changes that failed, and a failed schedule write; the pass itself completed.
    pub errors: Vec<TableError>,
    /// Whether the schedule was written to the pages at the end of the pass.
    pub persisted: bool,
    /// Entries this tick retired: their next due point is now "never"
    /// ([`crate::entry::EntryRetired`]).
    pub retired: Vec<crate::entry::EntryRetired>,
    /// Runs and steps overlap policies kept from happening
    /// ([`crate::entry::EntryDiverted`]).
    pub diverted: Vec<crate::entry::EntryDiverted>,
}

/// Due candidates a tick reads ahead of running them (their slots' cache misses overlap):
/// few enough that what it reads stays in the cache until the runs use it.
const WARM_CHUNK: usize = 32;

/// One entry in the slab, with the next due point of an indexed entry that has run.
struct Slot<S> {
    entry: CronEntry<S>,
    /// Stored next due point (indexed entries only; `None`: never ran, or a user rule).
    next: Option<Due>,
    /// The page of the record `next` in the table's store, when a write has told
    /// ([`NO_PAGE`] otherwise): a write of a record that stays needs no lookup.
    page: u32,
}

/// The cron table of one component, over application state `S`.
pub struct CronTable<S> {
    component_id: ComponentId,
    /// Position -> slot in `slots`, ascending position.
    entries: BTreeMap<u32, u32>,
    /// The same map for lookups: a fold of the schedule's log looks up every record by
    /// position, and a hash probe is one cache miss where the ordered map walks its levels.
    slot_of: HashMap<u32, u32, IntHash>,
    /// The entries by slot (`None`: a free slot, listed in `free_slots`).
    slots: Vec<Option<Slot<S>>>,
    free_slots: Vec<u32>,
    /// Position -> slot of the entries whose rule is user code: asked on every tick.
    custom: BTreeMap<u32, u32>,
    /// Slots of entries whose rule is a known schedule, by next due point.
    index: DueIndex,
    /// Records of positions without an indexed entry, and the changes since the last write.
    schedule: ScheduleStore,
    /// Indexed entries with a stored next due point (records kept in `slots`).
    with_record: u32,
    persistence: Option<Persistence>,
    /// Record placement and committed log of the persisted schedule.
    store: TableStore,
    /// What the last successful persist wrote.
    last_save: PersistStats,
    scheduled_count: u32,
    /// Scratch buffer for due candidates `(position, slot)`, kept to avoid an allocation per
    /// tick.
    scratch: Vec<(u32, u32)>,
    /// Bumped by every entry added or removed ([`Self::generation`]).
    generation: u64,
    /// Overlap and retirement state of the pass, and their counters.
    policies: policy::Policies,
}

/// The table's records as a save reads them: the slab's next due points and the orphans.
struct RecordView<'a, S> {
    entries: &'a BTreeMap<u32, u32>,
    slot_of: &'a HashMap<u32, u32, IntHash>,
    slots: &'a [Option<Slot<S>>],
    orphans: &'a BTreeMap<u32, Due>,
    with_record: u32,
}

impl<S> RecordView<'_, S> {
    fn slot(&self, position: u32) -> Option<&Slot<S>> {
        let slot = *self.slot_of.get(&position)?;
        self.slots.get(slot as usize)?.as_ref()
    }
}

impl<S> Records for RecordView<'_, S> {
    fn count(&self) -> usize {
        self.orphans.len() + self.with_record as usize
    }

    fn get(&self, position: u32) -> Option<Due> {
        self.slot(position)
            .and_then(|s| s.next)
            .or_else(|| self.orphans.get(&position).copied())
    }

    /// [`Self::get`] in two tight passes (the slots of all, then their records), so that
    /// the cache misses of independent lookups overlap instead of queueing one by one.
    fn get_many(&self, positions: &[u32], out: &mut Vec<Option<Due>>) {
        let slots: Vec<Option<u32>> = positions
            .iter()
            .map(|p| self.slot_of.get(p).copied())
            .collect();
        out.reserve(positions.len());
        for (position, slot) in positions.iter().zip(slots) {
            let next = slot
                .and_then(|s| self.slots.get(s as usize)?.as_ref())
                .and_then(|s| s.next);
            out.push(next.or_else(|| self.orphans.get(position).copied()));
        }
    }

    fn sorted(&self) -> Vec<(u32, Due)> {
        let mut all: Vec<(u32, Due)> = self.orphans.iter().map(|(p, d)| (*p, *d)).collect();
        for (position, slot) in self.entries {
            if let Some(Some(Slot {
                next: Some(due), ..
            })) = self.slots.get(*slot as usize)
            {
                all.push((*position, *due));
            }
        }
        all.sort_unstable_by_key(|r| r.0);
        all
    }
}

impl<S> std::fmt::Debug for CronTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronTable")
            .field("component_id", &self.component_id)
            .field("entries", &self.entries.len())
            .field("custom", &self.custom.len())
            .field("indexed", &self.index.len())
            .field("persistence", &self.persistence)
            .finish()
    }
}

/// The fields one entry run needs besides the entry itself (split from the table so that an
/// entry can be borrowed mutably at the same time).
struct Pass<'a, 'p, S> {
    component_id: ComponentId,
    tick: &'a Tick,
    state: &'a mut S,
    pages: &'a mut (dyn ReservedPages + 'p),
    changed: &'a mut Vec<ScheduleChange>,
    with_record: &'a mut u32,
    index: &'a mut DueIndex,
    changes: &'a mut Vec<TableChange<S>>,
    fired: &'a mut Vec<Fired>,
    /// Scratch for the due points of one entry's runs.
    runs: Vec<Due>,
    /// The outbox room reserved for this pass, if any ([`CronTable::evaluate_emitting`]).
    emits: Option<&'a mut crate::outbox::Emits>,
    /// Whether the due index handed the pass its indexed entries ([`DueIndex::take_due`]:
    /// each is out of the index, so it is indexed again without the index first looking up
    /// where it sat, a cache miss per entry) or the pass asks every entry in place (the
    /// linear reference).
    taken: bool,
    /// Overlap and retirement state of the pass.
    policy: &'a mut policy::Policies,
}

impl<S> Pass<'_, '_, S> {
    /// Evaluates the entry of `slot_id`: its rule, then schedule-next and the action(s) when
    /// it holds. An indexed entry the due index handed out is indexed again, whether it ran or
    /// not.
    fn run(&mut self, slot_id: u32, slot: &mut Slot<S>) {
        let entry = &mut slot.entry;
        let position = entry.position;
        match &entry.rule {
            Rule::Custom(rule) => {
                let holds = rule(&RuleCtx {
                    tick: self.tick,
                    position,
                    state: &*self.state,
                    pages: &*self.pages,
                });
                if holds {
                    self.fire(entry, None);
                }
            }
            Rule::Periodic(_) | Rule::Scheduled(_) => {
                let stored = slot.next;
                let tracks = entry.overlap.tracks();
                if tracks && self.hold(slot_id, entry, stored) {
                    return;
                }
                // Built-in periodic schedules are stepped without a virtual call.
                let next = match &entry.rule {
                    Rule::Periodic(p) => self.step(p, slot_id, position, stored),
                    Rule::Scheduled(s) => self.step(s.as_ref(), slot_id, position, stored),
                    Rule::Custom(_) => None,
                };
                let Some(next) = next else {
                    return;
                };
                if next == policy::NEVER && stored != Some(next) {
                    self.retiring(&slot.entry, next);
                }
                // The built-in schedule-next: record the new due point before the action runs.
                slot.next = Some(next);
                if stored.is_none() {
                    *self.with_record += 1;
                }
                self.changed.push(ScheduleChange {
                    position,
                    before: stored,
                    now: Some(next),
                    slot: slot_id,
                    page: slot.page,
                    learned: false,
                });
                let runs = std::mem::take(&mut self.runs);
                for due in &runs {
                    if tracks {
                        self.fire_tracked(&mut slot.entry, *due);
                    } else {
                        self.fire(&mut slot.entry, Some(*due));
                    }
                }
                self.runs = runs;
            }
        }
    }

    /// Steps the indexed entry of `slot_id` (stored next due point `stored`): `None` when it
    /// is not due (indexed again at its key); otherwise the runs' due points in `self.runs`,
    /// the entry indexed at the returned new due point.
    #[inline]
    fn step<K: Schedule + ?Sized>(
        &mut self,
        schedule: &K,
        slot_id: u32,
        position: u32,
        stored: Option<Due>,
    ) -> Option<Due> {
        self.runs.clear();
        let old_key = schedule.due_key(stored);
        let Some(next) = schedule.step(stored, self.tick, &mut self.runs) else {
            if self.taken {
                self.index.insert(slot_id, position, old_key);
            } else {
                self.index.restore(slot_id, position, old_key);
            }
            return None;
        };
        debug_assert!(
            old_key.reached_by(self.tick),
            "schedule {schedule:?} ran at {position} before its due key"
        );
        debug_assert_eq!(schedule.due_key(Some(next)), next, "{schedule:?}");
        // The same rule as `Periodic::step_at`'s: the next point passes the tick, except a
        // grid saturated at `TimeMs::MAX` (a tick at the end of time).
        debug_assert!(
            !next.reached_by(self.tick) || next == Due::Time(TimeMs::MAX),
            "schedule {schedule:?} at {position} is due again at the same tick"
        );
        if self.taken {
            self.index.insert(slot_id, position, next);
        } else {
            self.index.move_key(slot_id, position, old_key, next);
        }
        Some(next)
    }

    fn fire(&mut self, entry: &mut CronEntry<S>, due: Option<Due>) {
        if let Some(e) = self.emits.as_deref_mut() {
            e.begin_run();
        }
        let mut ctx = ActionCtx {
            tick: self.tick,
            position: entry.position,
            due,
            state: &mut *self.state,
            pages: &mut *self.pages,
            changes: &mut *self.changes,
            emits: self.emits.as_deref_mut(),
        };
        if let Some(next) = entry.schedule_next.as_mut() {
            next(&mut ctx);
        }
        (entry.action)(&mut ctx);
        self.fired.push(Fired {
            position: entry.position,
            due,
        });
        tracing::trace!(
            component_id = self.component_id,
            position = entry.position,
            seq = self.tick.bft_sequence_num,
            ?due,
            "cron entry fired"
        );
    }
}

impl<S> CronTable<S> {
    /// An empty table for `component_id`, without persistence (user rules only).
    pub fn new(component_id: ComponentId) -> Self {
        Self {
            component_id,
            entries: BTreeMap::new(),
            slot_of: HashMap::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            custom: BTreeMap::new(),
            index: DueIndex::default(),
            schedule: ScheduleStore::default(),
            with_record: 0,
            persistence: None,
            store: TableStore::new(),
            last_save: PersistStats::default(),
            scheduled_count: 0,
            scratch: Vec::new(),
            generation: 0,
            policies: policy::Policies::default(),
        }
    }

    /// A counter that changes whenever an entry is added, removed or replaced (directly or by
    /// a pass's requested changes): what a cache of something derived from the entries (the
    /// registry's setup digest) compares. It says nothing about the schedule's records.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// An empty table for `component_id` that persists its schedule in `range` and accepts at
    /// most `max_scheduled` indexed (periodic and other scheduled) entries.
    ///
    /// Whether the range is large enough for `max_scheduled` records is checked against the
    /// pages' size by [`reload`](Self::reload) (which the host calls at start-up) and at every
    /// write, giving [`TableError::RangeTooShort`]; [`pages_needed`](Self::pages_needed) says
    /// how many pages to give it. Writes are crash-atomic and take O(changes) pages (see
    /// [`persist`](Self::persist)).
    pub fn with_persistence(
        component_id: ComponentId,
        range: PageRange,
        max_scheduled: u32,
    ) -> Self {
        let mut t = Self::new(component_id);
        t.persistence = Some(Persistence {
            range,
            max_scheduled,
        });
        t
    }

    /// The component this table serves.
    pub fn component_id(&self) -> ComponentId {
        self.component_id
    }

    /// Where the schedule is persisted, if configured.
    pub fn persistence(&self) -> Option<Persistence> {
        self.persistence
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at `position`.
    pub fn get(&self, position: u32) -> Option<&CronEntry<S>> {
        self.slot(position).map(|s| &s.entry)
    }

    fn slot(&self, position: u32) -> Option<&Slot<S>> {
        let slot = *self.slot_of.get(&position)?;
        self.slots.get(slot as usize)?.as_ref()
    }

    fn records(&self) -> RecordView<'_, S> {
        RecordView {
            entries: &self.entries,
            slot_of: &self.slot_of,
            slots: &self.slots,
            orphans: &self.schedule.orphans,
            with_record: self.with_record,
        }
    }

    /// The positions in ascending order.
    pub fn positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.keys().copied()
    }

    /// The stored next due point of the indexed entry at `position` (`None` if it never ran).
    pub fn next_due(&self, position: u32) -> Option<Due> {
        self.records().get(position)
    }

    /// The stored next due time of the periodic entry at `position` (`None` if it never ran).
    pub fn next_due_ms(&self, position: u32) -> Option<TimeMs> {
        self.next_due(position).and_then(|d| d.time_ms())
    }

    /// The earliest time at which a time-keyed entry is due (`TimeMs::MIN`: at the next tick
    /// with time), or `None` when none is indexed. Entries with user rules are not covered.
    pub fn earliest_due_ms(&self) -> Option<TimeMs> {
        self.index.next_time()
    }

    /// The earliest sequence number at which a sequence-keyed entry is due.
    pub fn earliest_due_seq(&self) -> Option<u64> {
        self.index.next_seq()
    }

    /// Adds `entry`. A taken position is an error (the table is unchanged); use
    /// [`replace`](Self::replace) to change an entry.
    pub fn add(&mut self, entry: CronEntry<S>) -> Result<(), TableError> {
        let position = entry.position;
        if self.slot_of.contains_key(&position) {
            return Err(TableError::PositionTaken {
                component_id: self.component_id,
                position,
            });
        }
        self.check_can_hold(&entry, 0)?;
        self.insert_unchecked(entry);
        Ok(())
    }

    /// Replaces the entry at `entry`'s position and returns the old one.
    ///
    /// The old entry is removed as by [`remove`](Self::remove) (its on_remove runs and its
    /// persisted record is dropped), so a replacing periodic entry starts afresh.
    pub fn replace(&mut self, entry: CronEntry<S>) -> Result<CronEntry<S>, TableError> {
        let position = entry.position;
        let Some(old) = self.get(position) else {
            return Err(TableError::NoSuchPosition {
                component_id: self.component_id,
                position,
            });
        };
        let freed = u32::from(old.rule.schedule().is_some());
        self.check_can_hold(&entry, freed)?;
        let old = self.take(position);
        self.insert_unchecked(entry);
        // `take` found the entry checked above.
        old.ok_or(TableError::NoSuchPosition {
            component_id: self.component_id,
            position,
        })
    }

    /// Removes the entry at `position`, calling its on_remove first; false (and no callback)
    /// when absent. An indexed entry's record is dropped from the schedule; the pages change at
    /// the next evaluation or [`persist`](Self::persist), inside execution.
    pub fn remove(&mut self, position: u32) -> bool {
        self.take(position).is_some()
    }

    /// Removes every entry, calling on_remove in ascending position; returns how many.
    pub fn remove_all(&mut self) -> usize {
        let positions: Vec<u32> = self.entries.keys().copied().collect();
        for p in &positions {
            self.take(*p);
        }
        positions.len()
    }

    /// Whether `entry` may join the table, `freed` being 1 when it replaces an indexed entry.
    /// An indexed entry at a position holding an orphan record takes that record over.
    fn check_can_hold(&self, entry: &CronEntry<S>, freed: u32) -> Result<(), TableError> {
        if entry.rule.schedule().is_some() {
            let Some(persistence) = self.persistence else {
                return Err(TableError::NoPersistence {
                    component_id: self.component_id,
                });
            };
            let adopts =
                u32::from(freed == 0 && self.schedule.orphans.contains_key(&entry.position));
            let held = self.scheduled_count.saturating_add(self.orphans());
            if held.saturating_sub(freed).saturating_sub(adopts) >= persistence.max_scheduled {
                return Err(TableError::ScheduleFull {
                    component_id: self.component_id,
                    max: persistence.max_scheduled,
                });
            }
        }
        Ok(())
    }

    /// Records of positions with no indexed entry (kept from the pages for an entry registered
    /// later): they count against `max_scheduled`, so every record always has room.
    fn orphans(&self) -> u32 {
        u32::try_from(self.schedule.orphans.len()).unwrap_or(u32::MAX)
    }

    fn insert_unchecked(&mut self, entry: CronEntry<S>) {
        self.generation = self.generation.wrapping_add(1);
        let position = entry.position;
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let mut next = None;
        match entry.rule.schedule() {
            None => {
                self.custom.insert(position, slot);
            }
            Some(schedule) => {
                self.scheduled_count += 1;
                self.policies.tracking += u32::from(entry.overlap.tracks());
                // The orphan record of this position, if any, is the entry's now.
                next = self.schedule.orphans.remove(&position);
                if next.is_some() {
                    self.with_record += 1;
                }
                self.index.insert(slot, position, schedule.due_key(next));
            }
        }
        if let Some(free) = self.slots.get_mut(slot as usize) {
            *free = Some(Slot {
                entry,
                next,
                page: NO_PAGE,
            });
        }
        let old = self.entries.insert(position, slot);
        debug_assert!(old.is_none(), "insert over a live entry at {position}");
        self.slot_of.insert(position, slot);
    }

    fn take(&mut self, position: u32) -> Option<CronEntry<S>> {
        let slot = self.entries.remove(&position)?;
        self.generation = self.generation.wrapping_add(1);
        self.slot_of.remove(&position);
        let Slot {
            mut entry,
            next,
            page,
        } = self.slots.get_mut(slot as usize)?.take()?;
        self.free_slots.push(slot);
        if let Some(on_remove) = entry.on_remove.as_mut() {
            on_remove(self.component_id, position);
        }
        match entry.rule.schedule() {
            None => {
                self.custom.remove(&position);
            }
            Some(_) => {
                self.scheduled_count -= 1;
                self.policies.tracking -= u32::from(entry.overlap.tracks());
                self.index.remove(slot);
                // Removing an entry removes only its own record.
                if let Some(old) = next {
                    self.with_record -= 1;
                    self.schedule.changed.push(ScheduleChange {
                        position,
                        before: Some(old),
                        now: None,
                        slot,
                        page,
                        learned: false,
                    });
                }
            }
        }
        Some(entry)
    }

    /// Evaluates `tick` with the due index: runs every entry whose rule holds, in position order.
    ///
    /// Cost: O(due · log due + points · log points + custom): the due entries sorted into
    /// position order, one ordered-map step per distinct due point the tick reached (entries
    /// sharing a period and phase share one), and one rule call per entry with a user rule. No
    /// ordered-map or hash-map work per fired entry.
    /// Changes requested by callbacks are applied after the pass in request order; then the
    /// schedule is written once if it changed. A tick for another component runs nothing.
    pub fn evaluate(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
    ) -> Result<TickOutcome, TableError> {
        self.evaluate_emitting(tick, state, pages, None)
    }

    /// [`CronTable::evaluate`] with outbox room reserved for the pass: actions may emit
    /// records into `emits` ([`ActionCtx::emit`](crate::ActionCtx::emit)), which the caller
    /// appends to its outbox after the pass ([`crate::outbox::Emits::commit`]). Without
    /// `emits`, every emit is refused ([`crate::outbox::EmitError::NotReserved`]).
    pub fn evaluate_emitting(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        emits: Option<&mut crate::outbox::Emits>,
    ) -> Result<TickOutcome, TableError> {
        self.check_component(tick)?;
        let mut candidates = std::mem::take(&mut self.scratch);
        candidates.clear();
        // Takes the due entries out of the index; running each indexes it again.
        self.index.take_due(tick, &mut candidates);
        if !self.custom.is_empty() {
            candidates.extend(self.custom.iter().map(|(p, s)| (*p, *s)));
        }
        // Firing order is position order. Custom and indexed positions are disjoint, so no
        // duplicates arise.
        candidates.sort_unstable();
        debug_assert!(candidates.windows(2).all(|w| w[0].0 < w[1].0));
        let mut changes = Vec::new();
        // Room for one run per candidate: no regrowth while firing.
        let mut fired = Vec::with_capacity(candidates.len());
        self.schedule.changed.reserve(candidates.len());
        let mut pass = Pass {
            component_id: self.component_id,
            tick,
            state,
            pages: &mut *pages,
            changed: &mut self.schedule.changed,
            with_record: &mut self.with_record,
            index: &mut self.index,
            changes: &mut changes,
            fired: &mut fired,
            runs: Vec::new(),
            emits,
            taken: true,
            policy: &mut self.policies,
        };
        for chunk in candidates.chunks(WARM_CHUNK) {
            // One tight pass reading each candidate's slot first: the cache misses of these
            // independent reads overlap (the runs below, one entry at a time, would take
            // them one by one); nothing is decided here.
            let live = chunk
                .iter()
                .filter(|(_, slot)| {
                    matches!(self.slots.get(*slot as usize), Some(Some(s)) if s.page != NO_PAGE)
                })
                .count();
            std::hint::black_box(live);
            for &(position, slot) in chunk {
                if let Some(Some(s)) = self.slots.get_mut(slot as usize) {
                    pass.run(slot, s);
                } else {
                    debug_assert!(false, "candidate {position} has no entry");
                }
            }
        }
        self.scratch = candidates;
        Ok(self.finish_pass(changes, fired, pages))
    }

    /// Evaluates `tick` by asking every entry's rule in position order: the reference model.
    ///
    /// Same observable behaviour as [`evaluate`](Self::evaluate) (the property tests check it on
    /// random operation sequences), at O(n) per tick: kept as the baseline of the benchmark and
    /// the model of the tests, as Concord's table evaluates.
    pub fn evaluate_linear(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
    ) -> Result<TickOutcome, TableError> {
        self.check_component(tick)?;
        let mut changes = Vec::new();
        let mut fired = Vec::new();
        let mut pass = Pass {
            component_id: self.component_id,
            tick,
            state,
            pages: &mut *pages,
            changed: &mut self.schedule.changed,
            with_record: &mut self.with_record,
            index: &mut self.index,
            changes: &mut changes,
            fired: &mut fired,
            runs: Vec::new(),
            emits: None,
            taken: false,
            policy: &mut self.policies,
        };
        for &slot in self.entries.values() {
            if let Some(Some(s)) = self.slots.get_mut(slot as usize) {
                pass.run(slot, s);
            }
        }
        Ok(self.finish_pass(changes, fired, pages))
    }

    /// [`CronTable::evaluate_emitting`] with the entries' overlap policies reading "no result
    /// yet" from `results` (the host's outbox, [`crate::entry::PendingResults`]): the
    /// evaluation for tables with entries under [`CronEntry::with_overlap`]. The read costs
    /// O(held records) per tick, only when the table has such an entry.
    pub fn evaluate_with_results(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        emits: Option<&mut crate::outbox::Emits>,
        results: &dyn crate::entry::PendingResults,
    ) -> Result<TickOutcome, TableError> {
        self.policies.read(self.component_id, results);
        let outcome = self.evaluate_emitting(tick, state, pages, emits);
        self.policies.forget();
        outcome
    }

    /// [`CronTable::evaluate_linear`] with an outbox view, as
    /// [`CronTable::evaluate_with_results`] (the reference model of the property tests).
    pub fn evaluate_linear_with_results(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        results: &dyn crate::entry::PendingResults,
    ) -> Result<TickOutcome, TableError> {
        self.policies.read(self.component_id, results);
        let outcome = self.evaluate_linear(tick, state, pages);
        self.policies.forget();
        outcome
    }

    /// The entries that can never run again, ascending position, with why: derived from each
    /// indexed entry's stored next due point and its schedule ([`crate::Schedule::retirement`]),
    /// so every replica, and a restarted one, lists the same. O(entries).
    pub fn retired_entries(&self) -> Vec<(u32, crate::entry::EntryEnd)> {
        self.entries
            .iter()
            .filter_map(|(position, &slot)| {
                let s = self.slots.get(slot as usize)?.as_ref()?;
                let end = s.entry.rule.schedule()?.retirement(s.next)?;
                Some((*position, end))
            })
            .collect()
    }

    /// What the table's policies did since it was built (this process's count).
    pub fn policy_counters(&self) -> PolicyCounters {
        self.policies.counters
    }

    fn check_component(&self, tick: &Tick) -> Result<(), TableError> {
        if tick.component_id != self.component_id {
            tracing::warn!(
                table = self.component_id,
                tick = tick.component_id,
                "tick for another component ignored"
            );
            return Err(TableError::WrongComponent {
                expected: self.component_id,
                got: tick.component_id,
            });
        }
        Ok(())
    }

    fn finish_pass(
        &mut self,
        changes: Vec<TableChange<S>>,
        fired: Vec<Fired>,
        pages: &mut dyn ReservedPages,
    ) -> TickOutcome {
        let mut outcome = TickOutcome {
            fired,
            ..TickOutcome::default()
        };
        self.policies.finish(self.component_id, &mut outcome);
        for change in changes {
            let result = match change {
                TableChange::Add(e) => self.add(e),
                TableChange::Remove(p) => {
                    self.remove(p);
                    Ok(())
                }
                TableChange::Replace(e) => self.replace(e).map(drop),
            };
            if let Err(e) = result {
                tracing::warn!(component_id = self.component_id, error = %e, "requested table change failed");
                outcome.errors.push(e);
            }
        }
        match self.persist(pages) {
            Ok(written) => outcome.persisted = written,
            Err(e) => {
                tracing::error!(component_id = self.component_id, error = %e, "schedule write failed");
                outcome.errors.push(e);
            }
        }
        debug_assert!(
            self.check_invariants().is_ok(),
            "{:?}",
            self.check_invariants()
        );
        outcome
    }

    /// Writes the schedule to the table's pages if it changed since the last write; returns
    /// whether it wrote. Call it only inside execution (evaluation calls it itself).
    ///
    /// Table layout 3 (`table_store.rs`, `docs/scheduling.md` "Persistence"): when
    /// `max_scheduled` records fit one page, the whole schedule lives on the range's first page
    /// and a write is that one page. Otherwise a write appends the changed records to the
    /// range's active log and rewrites the commit page: O(changes) pages, a single page for the
    /// commit. The log area has two halves: when the active one is full it is frozen and folded
    /// into the record pages a share per write while the other half takes the writes, so no
    /// write folds everything at once (a write larger than a half, or a log the pacing could
    /// not keep up with, folds synchronously: [`CronTable::last_persist_stats`]). Pages of
    /// table layouts 1 and 2 are migrated by this write. A crash at any page write reloads as
    /// the schedule before or after the write, and a replica that re-executes writes the same
    /// pages as one that never stopped. On error the changes stay marked and the next write
    /// retries them.
    pub fn persist(&mut self, pages: &mut dyn ReservedPages) -> Result<bool, TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(false);
        };
        if self.schedule.changed.is_empty() {
            return Ok(false);
        }
        let form = table_store::form(
            persistence.range,
            persistence.max_scheduled,
            pages.page_size(),
        )?;
        if !persistence.range.fits(pages) {
            return Err(CodecError::RangeOutOfStore {
                first: persistence.range.first(),
                end: persistence.range.end(),
                num_pages: pages.num_pages(),
            }
            .into());
        }
        // One change per position, ascending: the due point at the last write and now.
        self.schedule.merge_changes();
        let records = RecordView {
            entries: &self.entries,
            slot_of: &self.slot_of,
            slots: &self.slots,
            orphans: &self.schedule.orphans,
            with_record: self.with_record,
        };
        let stats = self.store.save(
            pages,
            form,
            self.component_id,
            &records,
            &mut self.schedule.changed,
        )?;
        // The slab learns the pages of records the write had to look up.
        for c in &self.schedule.changed {
            if c.learned
                && let Some(Some(s)) = self.slots.get_mut(c.slot as usize)
                && s.entry.position == c.position
                && s.next == c.now
            {
                s.page = c.page;
            }
        }
        self.last_save = PersistStats {
            writes: stats.writes,
            folded: stats.folded,
            paced_pages: stats.paced_pages,
        };
        self.schedule.changed.clear();
        Ok(true)
    }

    /// Page writes of the last successful [`persist`](Self::persist) (for tests and
    /// benchmarks: a write after one change takes O(1) pages).
    pub fn last_persist_writes(&self) -> usize {
        self.last_save.writes
    }

    /// What the last successful [`persist`](Self::persist) wrote: its page writes, whether it
    /// folded every log synchronously, and how many record pages a paced fold rewrote in it
    /// (for tests and benchmarks).
    pub fn last_persist_stats(&self) -> PersistStats {
        self.last_save
    }

    /// The schedule stored in the table's pages (ascending position), as a restarted replica
    /// would load it; the table is not changed. Empty without persistence or when nothing is
    /// stored. For tools and tests.
    ///
    /// # Errors
    /// As [`reload`](Self::reload).
    pub fn stored_schedule(
        &self,
        pages: &dyn ReservedPages,
    ) -> Result<Vec<(u32, Due)>, TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(Vec::new());
        };
        let form = table_store::form(
            persistence.range,
            persistence.max_scheduled,
            pages.page_size(),
        )?;
        let (next, _) = TableStore::load(pages, persistence.range, form, self.component_id)?;
        Ok(next.into_iter().collect())
    }

    /// Pages a range needs to persist a table of at most `max_scheduled` indexed entries in
    /// pages of `page_size` bytes (1 when they all fit one page), or `None` when such pages
    /// cannot hold a record. A larger range is fine: the extra pages lengthen the log, so
    /// folds are rarer.
    pub fn pages_needed(max_scheduled: u32, page_size: usize) -> Option<u32> {
        table_store::pages_needed(max_scheduled, page_size)
    }

    /// Reloads the schedule from the pages: the host calls it at start-up (a fresh store reads
    /// as empty), after a restart and after a state transfer, inside its execution thread.
    ///
    /// Entries may be registered before or after the reload; either way each indexed entry
    /// honours the stored schedule of its position. Records of positions with no entry are kept
    /// (their entry may be registered later) and count against `max_scheduled`. On error the
    /// in-memory schedule is unchanged.
    ///
    /// # Errors
    /// [`TableError::RangeTooShort`] / [`TableError::RangeTooSmall`] (the range cannot hold
    /// `max_scheduled` records), [`TableError::OldLayout`] (pages of table layout 1),
    /// [`TableError::ForeignSchedule`], [`TableError::TooManyRecords`] (the stored records and
    /// the registered entries exceed the bound), [`TableError::Persist`] (pages fail their
    /// checks).
    pub fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(());
        };
        let form = table_store::form(
            persistence.range,
            persistence.max_scheduled,
            pages.page_size(),
        )?;
        let (next, store) = TableStore::load(pages, persistence.range, form, self.component_id)?;
        let orphans = next
            .keys()
            .filter(|p| self.get(**p).is_none_or(|e| e.rule.schedule().is_none()))
            .count();
        let held = orphans.saturating_add(self.scheduled_count as usize);
        if next.len() > persistence.max_scheduled as usize
            || held > persistence.max_scheduled as usize
        {
            return Err(TableError::TooManyRecords {
                found: next.len().max(held),
                max: persistence.max_scheduled,
            });
        }
        // Validated: from here on nothing fails.
        let mut next = next;
        let records = next.len();
        let mut with_record = 0;
        for (position, &slot) in &self.entries {
            let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Some(schedule) = s.entry.rule.schedule() else {
                continue;
            };
            let new = next.remove(position);
            let (old_key, new_key) = (schedule.due_key(s.next), schedule.due_key(new));
            self.index.move_key(slot, *position, old_key, new_key);
            s.next = new;
            s.page = NO_PAGE;
            with_record += u32::from(new.is_some());
        }
        self.schedule.orphans = next;
        self.schedule.changed.clear();
        self.with_record = with_record;
        self.store = store;
        tracing::debug!(
            component_id = self.component_id,
            records,
            "periodic schedule reloaded"
        );
        debug_assert!(self.check_invariants().is_ok());
        Ok(())
    }

    /// Clears the persistence: zeroes the table's pages and forgets every stored schedule (the
    /// indexed entries then start afresh: periodic ones at once on the next tick with time).
    /// Inside execution only.
    pub fn clear_persistence(&mut self, pages: &mut dyn ReservedPages) -> Result<(), TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(());
        };
        codec::clear(pages, persistence.range)?;
        for (position, &slot) in &self.entries {
            let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Some(schedule) = s.entry.rule.schedule() else {
                continue;
            };
            let (old_key, new_key) = (schedule.due_key(s.next), schedule.due_key(None));
            self.index.move_key(slot, *position, old_key, new_key);
            s.next = None;
            s.page = NO_PAGE;
        }
        // The pages are empty and so is the schedule: nothing to write.
        self.schedule = ScheduleStore::default();
        self.with_record = 0;
        self.store = TableStore::new();
        Ok(())
    }

    /// Checks the table's internal consistency (for tests and the simulator, after every step).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.index.check()?;
        let mut scheduled = 0u32;
        let mut with_record = 0u32;
        for (position, &slot) in &self.entries {
            let Some(Some(s)) = self.slots.get(slot as usize) else {
                return Err(format!("position {position} points at empty slot {slot}"));
            };
            if s.entry.position != *position {
                return Err(format!("entry {} stored at {position}", s.entry.position));
            }
            if self.slot_of.get(position) != Some(&slot) {
                return Err(format!("lookup map has {position} elsewhere"));
            }
            match s.entry.rule.schedule() {
                None => {
                    if self.custom.get(position) != Some(&slot) || s.next.is_some() {
                        return Err(format!("custom entry {position} misfiled"));
                    }
                }
                Some(schedule) => {
                    scheduled += 1;
                    with_record += u32::from(s.next.is_some());
                    let want = schedule.due_key(s.next);
                    // With the count check below (and no slot indexed twice) this makes the
                    // index exactly the set of indexed entries at their keys.
                    if !self.index.contains(slot, want) || self.custom.contains_key(position) {
                        return Err(format!(
                            "scheduled entry {position} is not indexed at {want:?}"
                        ));
                    }
                    if self.schedule.orphans.contains_key(position) {
                        return Err(format!("scheduled entry {position} has an orphan record"));
                    }
                }
            }
        }
        if scheduled != self.scheduled_count {
            return Err(format!(
                "{scheduled} scheduled entries, count says {}",
                self.scheduled_count
            ));
        }
        if with_record != self.with_record {
            return Err(format!(
                "{with_record} scheduled entries with a record, count says {}",
                self.with_record
            ));
        }
        if self.index.len() != scheduled as usize {
            return Err("index holds slots without a scheduled entry".into());
        }
        if self.slot_of.len() != self.entries.len() {
            return Err("lookup map holds positions without an entry".into());
        }
        self.check_policies()?;
        if self.custom.len() + scheduled as usize != self.entries.len() {
            return Err("custom set holds positions without an entry".into());
        }
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        if live != self.entries.len() || live + self.free_slots.len() != self.slots.len() {
            return Err(format!(
                "{live} live slots for {} entries, {} free of {}",
                self.entries.len(),
                self.free_slots.len(),
                self.slots.len()
            ));
        }
        if let Some(p) = self.persistence
            && scheduled.saturating_add(self.orphans()) > p.max_scheduled
        {
            return Err(format!(
                "{scheduled} scheduled entries over the bound {}",
                p.max_scheduled
            ));
        }
        Ok(())
    }
}
