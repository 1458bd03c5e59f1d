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

mod cancel;
mod pass;
mod persist;
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

pub use cancel::{CancelledRuns, EntryCancels, MarkedOutbox};
use pass::Pass;
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
    /// [`CronTable::evaluate_with_results`]), or an entry under `CancelOther` had to cancel
    /// through a view that knows no outbox index
    /// ([`PendingResults::append_index`](crate::entry::PendingResults::append_index)): it ran
    /// as under `AllowAll`.
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
