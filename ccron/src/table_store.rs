//! Page layout of a cron table's persisted schedule (table layout 3): a commit page, a log area
//! of two halves and record pages: the cron tables' instance of the record log
//! (`record_log.rs`, the commit protocol the schedule book uses too) with the book's
//! record-page placement (`schedule/store.rs`). This file keeps only the table's encodings:
//! its commit page, its change segments, a folded record page's content, and the migrations
//! from layouts 1 and 2.
//!
//! Why. Layout 1 wrote the whole schedule (every next due point) at every tick that changed
//! one, alternating between two halves of the range: a tick firing 1% of 10^6 entries rewrote
//! 16 MB. Layout 2 wrote O(changes) (the changed records appended to a log, then one commit
//! page) but folded a full log in one tick: every ~470 ticks of the 1%-due benchmark, a tick
//! rewrote ~4,000 record pages. Layout 3 paces the fold: the log area is two halves; a full
//! active log is frozen and folded into the record pages a share per save while the other
//! half takes the saves (`record_log::RecordLog`).
//!
//! Two forms, a pure function of the configuration (`max_scheduled`) and the page size, so
//! every replica picks the same (the same as layout 2's):
//! - **inline**: when `max_scheduled` records fit one page, the commit page carries them all;
//!   a save is one single-page write (atomic by the [`ReservedPages`] contract).
//! - **log**: the range is cut into the commit page, the record pages (just enough for
//!   `max_scheduled` records, placed by the lowest page with room, as the book places its
//!   records) and the log area (every other page, at least enough for a save that changes
//!   every record twice over: removals of all old records and all new ones).
//!
//! A paced fold writes a record page's content as of the frozen log's end: the table keeps,
//! for every position changed since the active log began, its value at that point
//! (`frozen_end`, rebuilt at load from the logs), so the content is computed from memory. A
//! synchronous fold (when a save does not fit the free half, or is larger than a half) writes
//! the committed content of every record page.
//!
//! Migrations. Layout 2's log form is layout 3's with one active log in the area's first half
//! or spanning both (the same segments, record pages and positions): it loads as is and the
//! next save writes a layout 3 commit page. Layout 1 (one blob, or alternate halves of the
//! range each holding `(generation, schedule)`) loads, and the next save logs every record
//! (a full save, the record pages marked stale until a fold has rewritten them) after making
//! sure the newest layout 1 copy lies in the range's second half, beyond the log pages the
//! full save writes: a crash at any page write reloads as the schedule before or after.

use std::collections::BTreeMap;

use crate::codec::{self, BlobKind, CodecError, HEADER_BYTES};
use crate::due::Due;
use crate::pages::{PageId, PageRange, ReservedPages};
use crate::periodic::{NO_PAGE, PersistedSchedule, ScheduleChange};
use crate::record_log::{
    self, CommitOf, FoldPoint, LogInstance, LogPos, LogSpan, ReadError, RecordLog, Stale,
};
use crate::schedule::store::{Placement, record_room};
use crate::table::TableError;
use crate::tick::ComponentId;

pub(crate) use crate::record_log::SaveStats;

/// Version of the table layout this build writes (it reads layouts 1, 2 and 3).
pub const TABLE_LAYOUT_VERSION: u8 = 3;

/// Encoded bytes of one record `(position, due)` on a record page (fixed-width encoding).
pub(crate) const RECORD_BYTES: usize = 16;

/// Encoded bytes of one log change that places a record: position, presence tag, page, due.
const CHANGE_BYTES: usize = 21;

/// Encoded bytes of the inline commit page's fields before its records.
const COMMIT_BASE_BYTES: usize = 30;

/// Encoded bytes of a log blob before its changes: segment index (u32,
/// [`record_log::SEGMENT_INDEX_BYTES`]) and vector length (u64).
const SEGMENT_BASE_BYTES: usize = record_log::SEGMENT_INDEX_BYTES + 8;

/// Changes one log blob carries at most (about 340 KiB): every decode stays small whatever
/// the size of a save.
const SEGMENT_CHANGES: usize = 16_384;

/// One log change: a position and its record page and due point, or `None` when its record
/// left the schedule.
type Change = (u32, Option<(u32, Due)>);

/// The commit page of the inline form (layouts 2 and 3 alike but for the version; the log
/// fields are unused).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct InlineCommit {
    version: u8,
    component_id: ComponentId,
    /// 0.
    form: u8,
    records: u64,
    log_pages: u32,
    log_segments: u32,
    /// Every record, ascending position.
    inline: Vec<(u32, Due)>,
}

/// The commit page of layout 2's log form: one log from the area's first page.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct CommitV2 {
    version: u8,
    component_id: ComponentId,
    /// 1.
    form: u8,
    records: u64,
    log_pages: u32,
    log_segments: u32,
    /// Empty.
    inline: Vec<(u32, Due)>,
}

/// The commit page of layout 3's log form.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct LogCommit {
    /// [`TABLE_LAYOUT_VERSION`].
    version: u8,
    component_id: ComponentId,
    /// 1.
    form: u8,
    /// Records stored.
    records: u64,
    /// The log saves append to.
    active: LogSpan,
    /// The log a paced fold is folding, if any.
    frozen: Option<LogSpan>,
    /// The next record page the paced fold rewrites.
    cursor: u32,
    /// Whether the record pages count for nothing yet (a migration's full save).
    stale: Stale,
}

/// Where the parts of a log-form range lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogLayout {
    commit: PageRange,
    log: PageRange,
    records_first: PageId,
    record_pages: u32,
}

impl LogLayout {
    fn record_page(&self, page: u32) -> Option<PageRange> {
        (page < self.record_pages).then(|| PageRange::new(self.records_first + page, 1))?
    }
}

/// The form of a table's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// Everything on the commit page.
    Inline(PageRange),
    /// Commit page, log area and record pages.
    Log(LogLayout),
}

/// Pages a log blob of `changes` placing changes takes, in pages of `per_page` blob bytes.
fn segment_pages(changes: usize, per_page: usize) -> usize {
    (SEGMENT_BASE_BYTES + changes * CHANGE_BYTES)
        .div_ceil(per_page)
        .max(1)
}

/// Log pages a save of `changes` changes needs at most.
fn log_pages_for(changes: usize, per_page: usize) -> usize {
    let full = changes / SEGMENT_CHANGES;
    let rest = changes % SEGMENT_CHANGES;
    full * segment_pages(SEGMENT_CHANGES, per_page)
        + if rest > 0 || full == 0 {
            segment_pages(rest, per_page)
        } else {
            0
        }
}

/// Records one record page holds.
fn per_record_page(page_size: usize) -> usize {
    record_room(page_size) / RECORD_BYTES
}

/// Whether `max` records fit the commit page.
fn inline_fits(max: u32, page_size: usize) -> bool {
    COMMIT_BASE_BYTES.saturating_add((max as usize).saturating_mul(RECORD_BYTES))
        <= page_size.saturating_sub(HEADER_BYTES)
}

/// Pages a range needs for a table of at most `max` scheduled entries in pages of
/// `page_size` bytes (the log form takes every further page as log), or `None` when such pages
/// cannot hold a record at all.
pub(crate) fn pages_needed(max: u32, page_size: usize) -> Option<u32> {
    if page_size <= HEADER_BYTES + COMMIT_BASE_BYTES {
        return None;
    }
    if inline_fits(max, page_size) {
        return Some(1);
    }
    let k = per_record_page(page_size);
    if k == 0 {
        return None;
    }
    let per_page = page_size - HEADER_BYTES;
    let record_pages = (max as usize).div_ceil(k);
    // A save changes at most every old record (removed) and every new one (placed).
    let log = log_pages_for((max as usize).saturating_mul(2), per_page);
    u32::try_from(1 + record_pages + log).ok()
}

/// The form of `range` for `max` scheduled entries in pages of `page_size` bytes.
pub(crate) fn form(range: PageRange, max: u32, page_size: usize) -> Result<Form, TableError> {
    let needed = pages_needed(max, page_size).ok_or(TableError::RangeTooSmall {
        needed: HEADER_BYTES + COMMIT_BASE_BYTES + RECORD_BYTES,
        capacity: page_size,
    })?;
    if range.len() < needed {
        return Err(TableError::RangeTooShort {
            needed_pages: needed,
            pages: range.len(),
        });
    }
    let commit = PageRange::new(range.first(), 1).ok_or(TableError::RangeTooShort {
        needed_pages: needed,
        pages: range.len(),
    })?;
    if needed == 1 {
        return Ok(Form::Inline(commit));
    }
    let k = per_record_page(page_size).max(1);
    let record_pages = u32::try_from((max as usize).div_ceil(k)).unwrap_or(u32::MAX);
    let log_len = range.len() - 1 - record_pages;
    let short = TableError::RangeTooShort {
        needed_pages: needed,
        pages: range.len(),
    };
    let log = PageRange::new(range.first() + 1, log_len).ok_or(short.clone())?;
    Ok(Form::Log(LogLayout {
        commit,
        log,
        records_first: log.end(),
        record_pages,
    }))
}

/// The current schedule as a save reads it (the table's slab and its orphan records).
pub(crate) trait Records {
    /// How many records there are.
    fn count(&self) -> usize;
    /// The record of `position`.
    fn get(&self, position: u32) -> Option<Due>;
    /// Every record, ascending position.
    fn sorted(&self) -> Vec<(u32, Due)>;
    /// The records of `positions`, in their order, appended to `out` (what [`Self::get`]
    /// answers for each; an implementation may look them up in batches).
    fn get_many(&self, positions: &[u32], out: &mut Vec<Option<Due>>) {
        out.extend(positions.iter().map(|p| self.get(*p)));
    }
}

/// A schedule of table layout 1 found at load: migrated by the next save.
#[derive(Debug, Clone)]
struct Legacy {
    /// The newest copy's generation and the half holding it (`None`: the one-blob form).
    newest: Option<(u64, PageRange)>,
    /// The range's second half (alternate-halves form).
    second: Option<PageRange>,
    /// The schedule as stored.
    schedule: PersistedSchedule,
}

/// The committed value (page, due) or none of every position one save changes, ascending
/// position (a save's changes come one per position, ascending), with the positions that
/// were on each page, grouped by page on first use (only a save that folds asks).
#[derive(Debug, Default)]
struct SaveThen {
    by_position: Vec<(u32, Option<(u32, Due)>)>,
    by_page: std::cell::OnceCell<Vec<(u32, u32, Due)>>,
    /// A bit per position this save changes ([`Self::contains`] in O(1): a paced fold asks it
    /// of every record of the pages it rewrites). Kept by the store between saves, all clear.
    marks: Vec<u64>,
    /// How many positions this save gives a record that had none and takes the record of,
    /// from the changes themselves (`None` when the changes were not one per position, or a
    /// position's record was not found: then [`TableLog::commit`] looks the records up).
    added_removed: Option<(u64, u64)>,
}

impl SaveThen {
    /// Room for `n` changes, with the store's all-clear bitmap `marks`.
    fn with_capacity(n: usize, marks: Vec<u64>) -> Self {
        Self {
            by_position: Vec::with_capacity(n),
            by_page: std::cell::OnceCell::new(),
            marks,
            added_removed: Some((0, 0)),
        }
    }

    /// Records `position`'s committed value (positions come ascending) and whether it has a
    /// record after this save.
    fn push(&mut self, position: u32, value: Option<(u32, Due)>, now: bool) {
        self.by_position.push((position, value));
        let word = position as usize / 64;
        if self.marks.len() <= word {
            self.marks.resize(word + 1, 0);
        }
        self.marks[word] |= 1u64 << (position % 64);
        if let Some((added, removed)) = &mut self.added_removed {
            match (value.is_some(), now) {
                (false, true) => *added += 1,
                (true, false) => *removed += 1,
                _ => {}
            }
        }
    }

    /// Makes the positions ascending and unique (the first value of each kept), in case the
    /// changes did not come that way: O(n) when they did.
    fn settle(&mut self) {
        if !self.by_position.windows(2).all(|w| w[0].0 < w[1].0) {
            self.by_position.sort_by_key(|r| r.0);
            self.by_position.dedup_by_key(|r| r.0);
            // The counts of the pushes may count a position twice.
            self.added_removed = None;
        }
    }

    /// Whether this save changes `position`.
    fn contains(&self, position: u32) -> bool {
        self.marks
            .get(position as usize / 64)
            .is_some_and(|w| w & (1u64 << (position % 64)) != 0)
    }

    /// Clears the bits of this save's positions and hands the bitmap back (O(changes)).
    fn into_marks(mut self) -> Vec<u64> {
        for &(position, _) in &self.by_position {
            if let Some(w) = self.marks.get_mut(position as usize / 64) {
                *w = 0;
            }
        }
        self.marks
    }

    /// The (position, due) of the changed positions that were on `page`, ascending position.
    fn on_page(&self, page: u32) -> impl Iterator<Item = (u32, Due)> + '_ {
        let all = self.by_page.get_or_init(|| {
            let mut v: Vec<(u32, u32, Due)> = Vec::with_capacity(self.by_position.len());
            v.extend(
                self.by_position
                    .iter()
                    .filter_map(|&(position, then)| then.map(|(p, due)| (p, position, due))),
            );
            v.sort_unstable_by_key(|r| (r.0, r.1));
            v
        });
        let from = all.partition_point(|r| r.0 < page);
        all[from..]
            .iter()
            .take_while(move |r| r.0 == page)
            .map(|&(_, position, due)| (position, due))
    }
}

/// While a frozen log is being folded: which positions changed since the active log began
/// (a bit per position), and the (position, due) of those that were on each record page at
/// the frozen log's end (by page). Dense and without hashing: a save adds its changes in
/// O(changes), a fold reads a page's in O(its records), the end of the fold clears it in
/// O(positions / 64 + record pages).
#[derive(Debug, Clone, Default)]
struct FrozenEnd {
    changed: Vec<u64>,
    by_page: Vec<Vec<(u32, Due)>>,
    any: bool,
}

impl FrozenEnd {
    /// Records `position`'s value at the frozen log's end unless it has one already.
    fn keep_first(&mut self, position: u32, value: Option<(u32, Due)>) {
        let word = position as usize / 64;
        let bit = 1u64 << (position % 64);
        if self.changed.len() <= word {
            self.changed.resize(word + 1, 0);
        }
        if self.changed[word] & bit != 0 {
            return;
        }
        self.changed[word] |= bit;
        self.any = true;
        if let Some((page, due)) = value {
            let page = page as usize;
            if self.by_page.len() <= page {
                self.by_page.resize_with(page + 1, Vec::new);
            }
            self.by_page[page].push((position, due));
        }
    }

    /// Whether `position` changed since the active log began.
    fn contains(&self, position: u32) -> bool {
        self.changed
            .get(position as usize / 64)
            .is_some_and(|w| w & (1u64 << (position % 64)) != 0)
    }

    fn on_page(&self, page: u32) -> &[(u32, Due)] {
        self.by_page.get(page as usize).map_or(&[], Vec::as_slice)
    }

    fn clear(&mut self) {
        if !self.any {
            return;
        }
        self.changed.fill(0);
        for v in &mut self.by_page {
            v.clear();
        }
        self.any = false;
    }
}

/// The persistence state of one table's schedule besides the schedule itself: where each
/// record lies, the record log, and what a paced fold needs.
#[derive(Debug, Clone)]
pub(crate) struct TableStore {
    /// Record placement (log form), created for the store's page size.
    placement: Option<Placement>,
    /// The record log (log form), once loaded or saved.
    log: Option<RecordLog>,
    /// While a frozen log is being folded: the positions changed since the active log began,
    /// with their frozen-end records by page.
    frozen_end: FrozenEnd,
    /// A layout 1 schedule the next save migrates.
    legacy: Option<Legacy>,
    /// A bit per position, all clear between saves: a save marks the positions it changes.
    save_marks: Vec<u64>,
}

/// The table's view of one save, the record log's instance.
struct TableLog<'a> {
    layout: LogLayout,
    component_id: ComponentId,
    placement: &'a Placement,
    next: &'a dyn Records,
    /// The committed value (page, due) of every position this save changes.
    this_save: &'a SaveThen,
    frozen_end: &'a mut FrozenEnd,
}

impl TableLog<'_> {
    /// Whether `position` changed since `at` (the frozen log's end, or the last commit).
    fn changed_since(&self, position: u32, at: FoldPoint) -> bool {
        (at == FoldPoint::FrozenEnd && self.frozen_end.contains(position))
            || self.this_save.contains(position)
    }
}

impl LogInstance for TableLog<'_> {
    type Error = TableError;

    fn record_pages(&self) -> u32 {
        self.layout.record_pages
    }

    fn record_page(&self, p: u32) -> Option<PageRange> {
        self.layout.record_page(p)
    }

    fn fold_list(&mut self, _: &dyn ReservedPages, _: &RecordLog) -> Result<Vec<u32>, TableError> {
        // Every record page: the list must not depend on what a replica remembers (one that
        // restarted folds the same pages as one that did not).
        Ok((0..self.layout.record_pages).collect())
    }

    fn folded_page(
        &mut self,
        _: &dyn ReservedPages,
        _: &RecordLog,
        p: u32,
        at: FoldPoint,
    ) -> Result<Option<Vec<u8>>, TableError> {
        // A position changed since has its value then below, with the page it had. The
        // others are looked up in one batch (independent lookups overlap their cache misses).
        let members = self.placement.members(p);
        let mut positions: Vec<u32> = Vec::with_capacity(members.len());
        positions.extend(
            members
                .iter()
                .map(|id| u32::try_from(*id).unwrap_or(u32::MAX))
                .filter(|position| !self.changed_since(*position, at)),
        );
        let mut dues = Vec::with_capacity(positions.len());
        self.next.get_many(&positions, &mut dues);
        let mut records: Vec<(u32, Due)> = Vec::with_capacity(members.len());
        records.extend(
            positions
                .iter()
                .zip(dues)
                .filter_map(|(position, due)| Some((*position, due?))),
        );
        // Positions changed since that were on this page then.
        let frozen = at == FoldPoint::FrozenEnd;
        for (position, due) in self.this_save.on_page(p) {
            if !frozen || !self.frozen_end.contains(position) {
                records.push((position, due));
            }
        }
        if frozen {
            records.extend_from_slice(self.frozen_end.on_page(p));
        }
        if records.is_empty() {
            return Ok(None);
        }
        records.sort_unstable_by_key(|r| r.0);
        Ok(Some(codec::to_blob(&(p, &records))?))
    }

    fn frozen_folded(&mut self) {
        self.frozen_end.clear();
    }

    fn commit(
        &mut self,
        pages: &mut dyn ReservedPages,
        log: &RecordLog,
        of: CommitOf,
    ) -> Result<(), TableError> {
        let now = self.next.count() as u64;
        let records = match of {
            CommitOf::This => now,
            // A fold's commit in the middle of the save describes the committed schedule:
            // undo this save's changes to the count.
            // The changes say which positions gained or lost a record (counted as the save
            // took them, no lookup per change); otherwise each is looked up.
            CommitOf::Previous => {
                let (added, removed) = self.this_save.added_removed.unwrap_or_else(|| {
                    let (mut added, mut removed) = (0u64, 0u64);
                    for (position, then) in &self.this_save.by_position {
                        match (then.is_some(), self.next.get(*position).is_some()) {
                            (false, true) => added += 1,
                            (true, false) => removed += 1,
                            _ => {}
                        }
                    }
                    (added, removed)
                });
                now.saturating_sub(added).saturating_add(removed)
            }
        };
        let commit = LogCommit {
            version: TABLE_LAYOUT_VERSION,
            component_id: self.component_id,
            form: 1,
            records,
            active: log.active,
            frozen: log.frozen,
            cursor: log.cursor,
            stale: log.stale,
        };
        codec::save(pages, self.layout.commit, BlobKind::TableCommit, &commit)?;
        Ok(())
    }
}

impl TableStore {
    /// Nothing stored.
    pub(crate) fn new() -> Self {
        Self {
            placement: None,
            log: None,
            frozen_end: FrozenEnd::default(),
            legacy: None,
            save_marks: Vec::new(),
        }
    }

    fn placement(&mut self, page_size: usize) -> &mut Placement {
        self.placement
            .get_or_insert_with(|| Placement::new(page_size))
    }

    /// Writes the changes of `changed` (one per position, ascending: the due point at the last
    /// save and now) given the current schedule `next`; sets the record page of each change
    /// whose record it had to look up (`learned`).
    pub(crate) fn save(
        &mut self,
        pages: &mut dyn ReservedPages,
        form: Form,
        component_id: ComponentId,
        next: &dyn Records,
        changed: &mut [ScheduleChange],
    ) -> Result<SaveStats, TableError> {
        let layout = match form {
            Form::Inline(commit) => {
                let inline = next.sorted();
                let c = InlineCommit {
                    version: TABLE_LAYOUT_VERSION,
                    component_id,
                    form: 0,
                    records: inline.len() as u64,
                    log_pages: 0,
                    log_segments: 0,
                    inline,
                };
                codec::save(pages, commit, BlobKind::TableCommit, &c)?;
                self.legacy = None;
                return Ok(SaveStats {
                    writes: 1,
                    ..SaveStats::default()
                });
            }
            Form::Log(layout) => layout,
        };
        let page_size = pages.page_size();
        let per_page = page_size - HEADER_BYTES;
        let mut stats = SaveStats::default();
        let migrating = self.legacy.take();
        if let Some(legacy) = &migrating {
            stats.writes += Self::secure_legacy(pages, layout, legacy, next.count(), per_page)?;
        }
        // Place the changed records (a record that stays keeps its page) and log them.
        let k = u32::try_from(per_record_page(page_size)).unwrap_or(u32::MAX);
        let mut this_save =
            SaveThen::with_capacity(changed.len(), std::mem::take(&mut self.save_marks));
        let placement = self.placement(page_size);
        let mut log: Vec<Change> = Vec::with_capacity(changed.len());
        // Records of neighbouring positions share pages: mark each page once per run.
        let mut touched = NO_PAGE;
        for c in changed.iter_mut() {
            let position = c.position;
            let before_page = match c.before {
                Some(_) if c.page != NO_PAGE => Some(c.page),
                Some(_) => placement.page_of(u64::from(position)),
                None => None,
            };
            debug_assert_eq!(c.now, next.get(position), "change of {position}");
            this_save.push(position, before_page.zip(c.before), c.now.is_some());
            let placed = match c.now {
                None => {
                    placement.unplace(u64::from(position));
                    None
                }
                // A record that stays keeps its page (records have one size): the page the
                // slab knows saves the lookup.
                Some(due) if c.before.is_some() && c.page != NO_PAGE => {
                    debug_assert_eq!(placement.page_of(u64::from(position)), Some(c.page));
                    if c.page != touched {
                        placement.touch(c.page);
                        touched = c.page;
                    }
                    Some((c.page, due))
                }
                Some(due) => match placement.place(u64::from(position), RECORD_BYTES) {
                    Some(p) if p < layout.record_pages => {
                        c.page = p;
                        c.learned = true;
                        Some((p, due))
                    }
                    _ => {
                        return Err(TableError::TooManyRecords {
                            found: next.count(),
                            max: layout.record_pages.saturating_mul(k),
                        });
                    }
                },
            };
            log.push((position, placed));
        }
        placement.dirty_pages.clear();
        this_save.settle();
        if migrating.is_some() {
            // A full save: every record, at the area's first page, the record pages stale.
            log = next
                .sorted()
                .into_iter()
                .map(|(position, due)| {
                    let page = placement.page_of(u64::from(position)).unwrap_or(NO_PAGE);
                    (position, Some((page, due)))
                })
                .collect();
        }
        let mut rlog = self.log.take().unwrap_or_else(|| {
            RecordLog::new(layout.log, BlobKind::TableLog, BlobKind::TableRecords, true)
        });
        rlog.area = layout.log;
        if migrating.is_some() {
            rlog.active = LogSpan::default();
            rlog.frozen = None;
            rlog.cursor = 0;
            rlog.stale = Stale::InActive;
        }
        // The log pages this save takes: its size depends only on how many changes it has.
        let needed = log_pages_for(log.len(), per_page);
        if needed > layout.log.len() as usize {
            self.log = Some(rlog);
            return Err(TableError::RangeTooShort {
                needed_pages: 1 + layout.record_pages + needed as u32,
                pages: 1 + layout.record_pages + layout.log.len(),
            });
        }
        let bodies: Result<Vec<Vec<u8>>, CodecError> = log
            .chunks(SEGMENT_CHANGES)
            .map(|chunk| codec::to_blob(&chunk))
            .collect();
        let bodies = bodies?;
        let placement = self.placement.as_ref().ok_or(TableError::RangeTooSmall {
            needed: 0,
            capacity: 0,
        })?;
        let mut inst = TableLog {
            layout,
            component_id,
            placement,
            next,
            this_save: &this_save,
            frozen_end: &mut self.frozen_end,
        };
        let result = rlog.save(pages, &mut inst, bodies);
        let frozen = rlog.frozen.is_some();
        self.log = Some(rlog);
        let saved = result?;
        stats.writes += saved.writes;
        stats.folded = saved.folded;
        stats.paced_pages = saved.paced_pages;
        if frozen {
            // The values at the frozen log's end of the positions this save changed (unless
            // an earlier save since the freeze already recorded them).
            for &(position, v) in &this_save.by_position {
                self.frozen_end.keep_first(position, v);
            }
        }
        self.save_marks = this_save.into_marks();
        Ok(stats)
    }

    /// Before a migration's full save: makes sure the newest layout 1 copy lies beyond the log
    /// pages the full save writes (rewriting it into the range's second half if it is in the
    /// first, as layout 1 itself would, with the next generation). Returns the page writes.
    fn secure_legacy(
        pages: &mut dyn ReservedPages,
        layout: LogLayout,
        legacy: &Legacy,
        records: usize,
        per_page: usize,
    ) -> Result<usize, TableError> {
        let (Some((generation, half)), Some(second)) = (legacy.newest, legacy.second) else {
            // One blob over the range: the full save would overwrite it.
            return Err(TableError::OldLayout);
        };
        let need = u32::try_from(log_pages_for(records, per_page)).unwrap_or(u32::MAX);
        if layout.log.first().saturating_add(need) > second.first() {
            tracing::error!(
                need,
                "table layout 1 cannot be migrated in place: the full save would reach its copy"
            );
            return Err(TableError::OldLayout);
        }
        if half == second {
            return Ok(0);
        }
        let copy = codec::to_blob(&(generation.saturating_add(1), &legacy.schedule))?;
        codec::save_blob(pages, second, BlobKind::PeriodicSchedule, &copy)?;
        Ok(copy.len().div_ceil(per_page).max(1))
    }

    /// Reads a layout 1 schedule (`range` holds [`BlobKind::PeriodicSchedule`] data).
    fn load_legacy(
        pages: &dyn ReservedPages,
        range: PageRange,
        component_id: ComponentId,
    ) -> Result<Legacy, TableError> {
        let half_len = range.len() / 2;
        let halves = PageRange::new(range.first(), half_len)
            .zip(PageRange::new(range.first() + half_len, half_len));
        let mut copies = Vec::new();
        if let Some((a, b)) = halves {
            for half in [a, b] {
                match codec::load::<(u64, PersistedSchedule)>(
                    pages,
                    half,
                    BlobKind::PeriodicSchedule,
                ) {
                    Ok(Some((g, s))) => copies.push((g, half, s)),
                    Ok(None) => {}
                    Err(e @ (CodecError::Pages(_) | CodecError::RangeOutOfStore { .. })) => {
                        return Err(e.into());
                    }
                    // A torn copy (a crash inside its write): the other one stands.
                    Err(e) => {
                        tracing::info!(first_page = half.first(), error = %e, "torn layout 1 copy ignored")
                    }
                }
            }
        }
        let legacy = match copies.into_iter().max_by_key(|(g, ..)| *g) {
            Some((g, half, schedule)) => Legacy {
                newest: Some((g, half)),
                second: halves.map(|(_, b)| b),
                schedule,
            },
            None => {
                let schedule =
                    codec::load::<PersistedSchedule>(pages, range, BlobKind::PeriodicSchedule)?
                        .ok_or(TableError::OldLayout)?;
                Legacy {
                    newest: None,
                    second: None,
                    schedule,
                }
            }
        };
        if legacy.schedule.component_id != component_id {
            return Err(TableError::ForeignSchedule {
                expected: component_id,
                found: legacy.schedule.component_id,
            });
        }
        Ok(legacy)
    }

    /// Reads the schedule stored in `form`'s pages (empty when nothing is stored) and the
    /// store state that goes with it: layout 3, or layouts 2 and 1 (migrated by the next save).
    pub(crate) fn load(
        pages: &dyn ReservedPages,
        range: PageRange,
        form: Form,
        component_id: ComponentId,
    ) -> Result<(BTreeMap<u32, Due>, TableStore), TableError> {
        let corrupt = |m: String| TableError::Persist(CodecError::Decode(m));
        let mut store = TableStore::new();
        let commit_range = match form {
            Form::Inline(c) => c,
            Form::Log(l) => l.commit,
        };
        let blob = match codec::load_blob(pages, commit_range, BlobKind::TableCommit) {
            Ok(b) => b,
            Err(CodecError::WrongKind {
                found: BlobKind::PeriodicSchedule,
                ..
            }) => {
                let legacy = Self::load_legacy(pages, range, component_id)?;
                let mut next = BTreeMap::new();
                for (p, d) in &legacy.schedule.records {
                    if next.insert(*p, *d).is_some() {
                        return Err(corrupt("duplicate positions in the schedule".into()));
                    }
                }
                if let Form::Log(layout) = form {
                    // Refused here, not at the next save, when no crash-atomic migration
                    // exists: one blob over the range, or a full save reaching the newest copy.
                    let per_page = pages.page_size().saturating_sub(HEADER_BYTES).max(1);
                    let need =
                        u32::try_from(log_pages_for(next.len(), per_page)).unwrap_or(u32::MAX);
                    let fits = legacy
                        .second
                        .is_some_and(|b| layout.log.first().saturating_add(need) <= b.first());
                    if legacy.newest.is_none() || !fits {
                        tracing::warn!(
                            component_id,
                            "table layout 1 cannot be migrated in place: refused"
                        );
                        return Err(TableError::OldLayout);
                    }
                    let placement = store.placement(pages.page_size());
                    for p in next.keys() {
                        match placement.place(u64::from(*p), RECORD_BYTES) {
                            Some(page) if page < layout.record_pages => {}
                            _ => {
                                return Err(TableError::TooManyRecords {
                                    found: next.len(),
                                    max: layout.record_pages,
                                });
                            }
                        }
                    }
                    placement.dirty_pages.clear();
                }
                tracing::info!(
                    component_id,
                    records = next.len(),
                    "table layout 1 loaded: the next save migrates it"
                );
                store.legacy = Some(legacy);
                return Ok((next, store));
            }
            Err(e) => return Err(e.into()),
        };
        let Some(blob) = blob else {
            // Nothing committed: every page of the range must be empty too (a lost commit page
            // is not a fresh store), except log pages past the commit, which are never read.
            let log = match form {
                Form::Log(l) => Some(l.log),
                Form::Inline(_) => None,
            };
            for id in range.ids() {
                if log.is_some_and(|l| l.contains(id)) {
                    continue;
                }
                if pages.load(id).map_err(CodecError::from)?.is_some() {
                    return Err(corrupt(format!(
                        "page {id} holds data but the commit page is empty"
                    )));
                }
            }
            return Ok((BTreeMap::new(), store));
        };
        let (version, found, form_tag) = match blob.as_slice() {
            [v, a, b, c, d, f, ..] => (*v, u32::from_le_bytes([*a, *b, *c, *d]), *f),
            _ => return Err(corrupt("a short commit page".into())),
        };
        if !(2..=TABLE_LAYOUT_VERSION).contains(&version) {
            return Err(TableError::UnsupportedLayout { found: version });
        }
        if found != component_id {
            return Err(TableError::ForeignSchedule {
                expected: component_id,
                found,
            });
        }
        let mut next = BTreeMap::new();
        let layout = match form {
            Form::Inline(_) => {
                if form_tag != 0 {
                    return Err(corrupt("a log-form schedule in an inline range".into()));
                }
                let commit = codec::from_blob::<InlineCommit>(&blob)?;
                for (p, d) in commit.inline {
                    if next.insert(p, d).is_some() {
                        return Err(corrupt("duplicate positions in the schedule".into()));
                    }
                }
                if next.len() as u64 != commit.records {
                    return Err(corrupt("record count differs from the commit page".into()));
                }
                return Ok((next, store));
            }
            Form::Log(l) => l,
        };
        if form_tag != 1 {
            return Err(corrupt("an inline schedule in a log-form range".into()));
        }
        let commit = if version == 2 {
            let c = codec::from_blob::<CommitV2>(&blob)?;
            if !c.inline.is_empty() {
                return Err(corrupt("an inline schedule in a log-form range".into()));
            }
            LogCommit {
                version,
                component_id: c.component_id,
                form: c.form,
                records: c.records,
                active: LogSpan {
                    start: 0,
                    pos: LogPos {
                        pages: c.log_pages,
                        segments: c.log_segments,
                    },
                },
                frozen: None,
                cursor: 0,
                stale: Stale::No,
            }
        } else {
            codec::from_blob::<LogCommit>(&blob)?
        };
        let area = layout.log.len();
        let spans = commit.frozen.iter().chain(std::iter::once(&commit.active));
        for span in spans.clone() {
            if span.end() > area {
                return Err(corrupt("a log longer than the log area".into()));
            }
        }
        if let Some(f) = commit.frozen
            && (f.start < commit.active.end() && commit.active.start < f.end())
        {
            return Err(corrupt("the frozen and active logs overlap".into()));
        }
        if commit.cursor > layout.record_pages
            || (commit.frozen.is_none() && commit.cursor != 0)
            || (commit.stale == Stale::InFrozen && commit.frozen.is_none())
        {
            return Err(corrupt("a fold state the logs contradict".into()));
        }
        // The committed logs, frozen first: the latest change of each position wins.
        let mut named: BTreeMap<u32, Option<(u32, Due)>> = BTreeMap::new();
        let mut frozen_named: BTreeMap<u32, Option<(u32, Due)>> = BTreeMap::new();
        let mut active_named: Vec<u32> = Vec::new();
        let mut read_span = |span: &LogSpan, frozen: bool| -> Result<(), TableError> {
            let Some(log) = span.range(layout.log) else {
                return Err(corrupt("a log outside the log area".into()));
            };
            record_log::read::<Vec<Change>>(pages, log, span.pos, BlobKind::TableLog, |changes| {
                for (position, placed) in changes {
                    if let Some((page, _)) = placed
                        && page >= layout.record_pages
                    {
                        return Err(format!("log places a record on page {page}"));
                    }
                    if frozen {
                        frozen_named.insert(position, placed);
                    } else {
                        active_named.push(position);
                    }
                    named.insert(position, placed);
                }
                Ok(())
            })
            .map_err(|e| match e {
                ReadError::Codec(e) => TableError::Persist(e),
                ReadError::Corrupt(m) => corrupt(m),
            })
        };
        if let Some(f) = &commit.frozen {
            read_span(f, true)?;
        }
        read_span(&commit.active, false)?;
        let placement = store.placement(pages.page_size());
        // Record page copies the logs do not supersede; with a frozen log, the page copies of
        // positions the active log changes (their values at the frozen log's end).
        let mut copies: BTreeMap<u32, (u32, Due)> = BTreeMap::new();
        if commit.stale == Stale::No {
            for p in 0..layout.record_pages {
                let Some(part) = layout.record_page(p) else {
                    continue;
                };
                let Some((at_page, records)) =
                    codec::load::<(u32, Vec<(u32, Due)>)>(pages, part, BlobKind::TableRecords)?
                else {
                    continue;
                };
                if at_page != p {
                    return Err(corrupt(format!("record page {p} holds page {at_page}")));
                }
                let mut last = None;
                for (position, due) in records {
                    if last.is_some_and(|l| position <= l) {
                        return Err(corrupt(format!("record page {p} is out of order")));
                    }
                    last = Some(position);
                    if named.contains_key(&position) {
                        // A log supersedes this copy.
                        copies.insert(position, (p, due));
                        continue;
                    }
                    if next.insert(position, due).is_some() {
                        return Err(corrupt(format!("position {position} stored twice")));
                    }
                    placement
                        .load(u64::from(position), p, RECORD_BYTES)
                        .map_err(corrupt)?;
                }
            }
        }
        for (position, placed) in &named {
            if let Some((page, due)) = placed {
                next.insert(*position, *due);
                placement
                    .load(u64::from(*position), *page, RECORD_BYTES)
                    .map_err(corrupt)?;
            }
        }
        if next.len() as u64 != commit.records {
            return Err(corrupt(format!(
                "{} records stored, the commit page counts {}",
                next.len(),
                commit.records
            )));
        }
        if commit.frozen.is_some() {
            // What a replica that never stopped remembers: the frozen-end value of every
            // position the active log changed (the frozen log's image, else the page copy).
            for position in active_named {
                let then = match frozen_named.get(&position) {
                    Some(v) => *v,
                    None => copies.get(&position).copied(),
                };
                store.frozen_end.keep_first(position, then);
            }
        }
        let mut rlog = RecordLog::new(layout.log, BlobKind::TableLog, BlobKind::TableRecords, true);
        rlog.active = commit.active;
        rlog.frozen = commit.frozen;
        rlog.cursor = commit.cursor;
        rlog.stale = commit.stale;
        store.log = Some(rlog);
        Ok((next, store))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_codec() {
        let rec = (7u32, Due::Time(-3));
        assert_eq!(codec::encoded_len(&rec).unwrap(), RECORD_BYTES);
        let change: Change = (7, Some((3, Due::Seq(9))));
        assert_eq!(codec::encoded_len(&change).unwrap(), CHANGE_BYTES);
        let removal: Change = (7, None);
        assert!(codec::encoded_len(&removal).unwrap() <= CHANGE_BYTES);
        let seg = (0u32, vec![change; 3]);
        assert_eq!(
            codec::encoded_len(&seg).unwrap(),
            SEGMENT_BASE_BYTES + 3 * CHANGE_BYTES
        );
        let c = InlineCommit {
            version: 3,
            component_id: 1,
            form: 0,
            records: 2,
            log_pages: 0,
            log_segments: 0,
            inline: vec![rec, rec],
        };
        assert_eq!(
            codec::encoded_len(&c).unwrap(),
            COMMIT_BASE_BYTES + 2 * RECORD_BYTES
        );
        let page = (3u32, vec![rec; 4]);
        assert_eq!(
            codec::encoded_len(&page).unwrap(),
            crate::schedule::store::PAGE_BASE_BYTES + 4 * RECORD_BYTES
        );
    }

    #[test]
    fn forms_follow_the_configuration() {
        assert_eq!(pages_needed(4, 4096), Some(1));
        assert_eq!(pages_needed(252, 4096), Some(1));
        assert!(pages_needed(253, 4096).unwrap() > 2);
        assert_eq!(pages_needed(4, 40), None);
        let r = PageRange::new(3, 1).unwrap();
        assert!(matches!(form(r, 16, 4096), Ok(Form::Inline(c)) if c.first() == 3));
        let need = pages_needed(1_000, 512).unwrap();
        let short = PageRange::new(0, need - 1).unwrap();
        assert_eq!(
            form(short, 1_000, 512),
            Err(TableError::RangeTooShort {
                needed_pages: need,
                pages: need - 1
            })
        );
        let Ok(Form::Log(l)) = form(PageRange::new(0, need + 5).unwrap(), 1_000, 512) else {
            panic!("log form");
        };
        assert_eq!(l.record_pages, 1_000u32.div_ceil(29));
        assert_eq!(l.records_first + l.record_pages, need + 5);
        assert_eq!(l.log.len() + l.record_pages + 1, need + 5);
    }
}
