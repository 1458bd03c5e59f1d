//! Page layout of a cron table's persisted schedule (table layout version 2): a commit page,
//! an append-only change log and record pages: an instance of the record log
//! (`record_log.rs`, the commit protocol the schedule book uses too) with the book's record-page
//! placement (`schedule/store.rs`).
//!
//! Why. Layout 1 wrote the whole schedule (every next due point) at every tick that changed
//! one, alternating between two halves of the range: a tick firing 1% of 10^6 entries rewrote
//! 16 MB. Here a save writes O(changes): the changed records, appended to a log, then one
//! commit page.
//!
//! Two forms, a pure function of the configuration (`max_scheduled`) and the page size, so
//! every replica picks the same:
//! - **inline**: when `max_scheduled` records fit one page, the commit page carries them all;
//!   a save is one single-page write (atomic by the [`ReservedPages`] contract).
//! - **log**: the range is cut into the commit page, the record pages (just enough for
//!   `max_scheduled` records, placed by the lowest page with room, as the book places its
//!   records) and the log (every other page, at least enough for a save that changes every
//!   record twice over: removals of all old records and all new ones).
//!
//! A save in the log form appends the changed records (position, new record page and due
//! point, or removal) as one or more codec blobs after the committed part of the log, then
//! rewrites the commit page with the new log length: the commit page is the only page whose
//! write decides what is stored. A crash before it leaves the previous save (the appended pages
//! lie past the committed log and are never read); after it, the new one. When the log has no
//! room for a save, the save first *folds* the committed log into the record pages (rewriting
//! the pages whose records changed since the last fold, with the committed values), commits an
//! empty log, then appends. A crash inside a fold leaves the committed log in force: load gives
//! the log's records priority over any copy on a record page, so record pages that are old,
//! new or a mix all load as the same schedule. Page images depend only on the operations, so a
//! replica that crashed and re-executed writes the same bytes as one that never stopped.

use std::collections::{BTreeMap, BTreeSet};

use crate::codec::{self, BlobKind, CodecError, HEADER_BYTES};
use crate::due::Due;
use crate::pages::{PageId, PageRange, ReservedPages};
use crate::periodic::{NO_PAGE, ScheduleChange};
use crate::record_log::{self, LogPos, ReadError};
use crate::schedule::store::{Placement, record_room};
use crate::table::TableError;
use crate::tick::ComponentId;

/// Version of the table layout this build writes and reads (layout 1, the whole schedule in
/// one blob or alternate halves, is refused with [`TableError::OldLayout`]).
pub const TABLE_LAYOUT_VERSION: u8 = 2;

/// Encoded bytes of one record `(position, due)` on a record page (fixed-width encoding).
pub(crate) const RECORD_BYTES: usize = 16;

/// Encoded bytes of one log change that places a record: position, presence tag, page, due.
const CHANGE_BYTES: usize = 21;

/// Encoded bytes of the commit page's fields before its inline records.
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

/// The commit page.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct Commit {
    /// [`TABLE_LAYOUT_VERSION`].
    version: u8,
    component_id: ComponentId,
    /// 0 inline, 1 log.
    form: u8,
    /// Records stored.
    records: u64,
    /// Committed log pages (log form).
    log_pages: u32,
    /// Committed log blobs (log form).
    log_segments: u32,
    /// Every record, ascending position (inline form; empty in the log form).
    inline: Vec<(u32, Due)>,
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
    /// Commit page, log and record pages.
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
}

/// The persistence state of one table's schedule besides the schedule itself: where each
/// record lies and how much of the log is committed.
#[derive(Debug, Clone)]
pub(crate) struct TableStore {
    /// Record placement (log form), created for the store's page size.
    placement: Option<Placement>,
    /// Committed log pages and blobs.
    log_pages: u32,
    log_segments: u32,
}

/// What a save writes, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SaveStats {
    /// Page writes (saves and zeroes).
    pub writes: usize,
    /// Whether the save folded the log into the record pages first.
    pub folded: bool,
}

impl TableStore {
    /// Nothing stored.
    pub(crate) fn new() -> Self {
        Self {
            placement: None,
            log_pages: 0,
            log_segments: 0,
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
                let c = Commit {
                    version: TABLE_LAYOUT_VERSION,
                    component_id,
                    form: 0,
                    records: inline.len() as u64,
                    log_pages: 0,
                    log_segments: 0,
                    inline,
                };
                codec::save(pages, commit, BlobKind::TableCommit, &c)?;
                return Ok(SaveStats {
                    writes: 1,
                    folded: false,
                });
            }
            Form::Log(layout) => layout,
        };
        let page_size = pages.page_size();
        let per_page = page_size - HEADER_BYTES;
        let mut stats = SaveStats::default();
        // The log pages this save takes: its size depends only on how many changes it has.
        let needed = log_pages_for(changed.len(), per_page);
        if needed > layout.log.len() as usize {
            return Err(TableError::RangeTooShort {
                needed_pages: 1 + layout.record_pages + needed as u32,
                pages: 1 + layout.record_pages + layout.log.len(),
            });
        }
        if self.log_pages as usize + needed > layout.log.len() as usize {
            self.fold(pages, layout, component_id, next, changed, &mut stats)?;
        }
        // Place the changed records (a record that stays keeps its page) and log them.
        let k = u32::try_from(per_record_page(page_size)).unwrap_or(u32::MAX);
        let placement = self.placement(page_size);
        let mut log: Vec<Change> = Vec::with_capacity(changed.len());
        // Records of neighbouring positions share pages: mark each page once per run.
        let mut touched = NO_PAGE;
        for c in changed.iter_mut() {
            let position = c.position;
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
        let bodies = log
            .chunks(SEGMENT_CHANGES)
            .map(|chunk| codec::to_blob(&chunk));
        let committed = LogPos {
            pages: self.log_pages,
            segments: self.log_segments,
        };
        let (pos, writes) =
            record_log::append(pages, layout.log, committed, BlobKind::TableLog, bodies)?;
        stats.writes += writes;
        let commit = Commit {
            version: TABLE_LAYOUT_VERSION,
            component_id,
            form: 1,
            records: next.count() as u64,
            log_pages: pos.pages,
            log_segments: pos.segments,
            inline: Vec::new(),
        };
        codec::save(pages, layout.commit, BlobKind::TableCommit, &commit)?;
        stats.writes += 1;
        self.log_pages = pos.pages;
        self.log_segments = pos.segments;
        Ok(stats)
    }

    /// Writes the committed schedule (the one before `changed`) into the record pages whose
    /// records changed since the last fold, then commits an empty log.
    fn fold(
        &mut self,
        pages: &mut dyn ReservedPages,
        layout: LogLayout,
        component_id: ComponentId,
        next: &dyn Records,
        changed: &[ScheduleChange],
        stats: &mut SaveStats,
    ) -> Result<(), TableError> {
        let placement = self.placement(pages.page_size());
        // The committed due point of a position this save changes is the one it had before.
        let before = |position: u32| -> Option<Due> {
            match changed.binary_search_by_key(&position, |c| c.position) {
                Ok(i) => changed.get(i).and_then(|c| c.before),
                Err(_) => next.get(position),
            }
        };
        let dirty: Vec<u32> = placement.dirty_pages.iter().copied().collect();
        let mut records = Vec::new();
        for p in dirty {
            let Some(part) = layout.record_page(p) else {
                continue;
            };
            records.clear();
            for id in placement.members(p) {
                let position = u32::try_from(*id).unwrap_or(u32::MAX);
                if let Some(due) = before(position) {
                    records.push((position, due));
                }
            }
            let blob = if records.is_empty() {
                None
            } else {
                Some(codec::to_blob(&(p, &records))?)
            };
            stats.writes +=
                record_log::write_page(pages, part, BlobKind::TableRecords, blob.as_deref())?;
        }
        let commit = Commit {
            version: TABLE_LAYOUT_VERSION,
            component_id,
            form: 1,
            records: placement.records() as u64,
            log_pages: 0,
            log_segments: 0,
            inline: Vec::new(),
        };
        codec::save(pages, layout.commit, BlobKind::TableCommit, &commit)?;
        stats.writes += 1;
        stats.folded = true;
        placement.dirty_pages.clear();
        self.log_pages = 0;
        self.log_segments = 0;
        Ok(())
    }

    /// Reads the schedule stored in `form`'s pages (empty when nothing is stored) and the
    /// store state that goes with it.
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
        let commit = match codec::load::<Commit>(pages, commit_range, BlobKind::TableCommit) {
            Ok(c) => c,
            Err(CodecError::WrongKind {
                found: BlobKind::PeriodicSchedule,
                ..
            }) => return Err(TableError::OldLayout),
            Err(e) => return Err(e.into()),
        };
        let Some(commit) = commit else {
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
        if commit.version != TABLE_LAYOUT_VERSION {
            return Err(TableError::UnsupportedLayout {
                found: commit.version,
            });
        }
        if commit.component_id != component_id {
            return Err(TableError::ForeignSchedule {
                expected: component_id,
                found: commit.component_id,
            });
        }
        let mut next = BTreeMap::new();
        let layout = match form {
            Form::Inline(_) => {
                if commit.form != 0 {
                    return Err(corrupt("a log-form schedule in an inline range".into()));
                }
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
        if commit.form != 1 || !commit.inline.is_empty() {
            return Err(corrupt("an inline schedule in a log-form range".into()));
        }
        // The committed log, oldest first: the latest change of each position wins.
        let mut named: BTreeMap<u32, Option<(u32, Due)>> = BTreeMap::new();
        let mut mentioned = BTreeSet::new();
        let committed = LogPos {
            pages: commit.log_pages,
            segments: commit.log_segments,
        };
        record_log::read::<Vec<Change>>(
            pages,
            layout.log,
            committed,
            BlobKind::TableLog,
            |changes| {
                for (position, placed) in changes {
                    if let Some((page, _)) = placed {
                        if page >= layout.record_pages {
                            return Err(format!("log places a record on page {page}"));
                        }
                        mentioned.insert(page);
                    }
                    named.insert(position, placed);
                }
                Ok(())
            },
        )
        .map_err(|e| match e {
            ReadError::Codec(e) => TableError::Persist(e),
            ReadError::Corrupt(m) => corrupt(m),
        })?;
        let placement = store.placement(pages.page_size());
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
                    // The log supersedes this copy; the page must be rewritten at the fold.
                    mentioned.insert(p);
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
        for (position, placed) in named {
            if let Some((page, due)) = placed {
                next.insert(position, due);
                placement
                    .load(u64::from(position), page, RECORD_BYTES)
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
        placement.dirty_pages = mentioned;
        store.log_pages = commit.log_pages;
        store.log_segments = commit.log_segments;
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
        let c = Commit {
            version: 2,
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
