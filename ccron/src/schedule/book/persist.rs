//! Persistence glue: the book's instance of the record log (`crate::record_log`, book layout
//! 7): the commit page, the log's segments, the content of a folded record page, load, and the
//! re-validation of every loaded record. Page layout and record placement are in `store.rs`;
//! the layouts earlier releases wrote (2 to 6) are read in `legacy.rs` and migrated by the
//! next save.

use std::collections::{BTreeMap, BTreeSet};

use super::legacy;
use super::{Limits, Record, RefusalCounters, RunCounters, ScheduleError, Scheduler, Timing};
use crate::codec::{self, BlobKind, CodecError};
use crate::cron::{ExclusionCalendar, ZoneRules};
use crate::pages::{PageRange, ReservedPages};
use crate::record_log::{
    self, CommitOf, FoldPoint, LogInstance, LogPos, LogSpan, ReadError, RecordLog, Stale,
};
use crate::schedule::store::{Layout, Locations};
use crate::tick::ComponentId;

/// What the commit page holds (see [`store`](crate::schedule::store) for the layout). Its
/// first byte is the version, so that a range of another layout is recognised as such.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct Commit {
    /// [`WIRE_VERSION`].
    version: u8,
    component: ComponentId,
    next_id: u64,
    /// `Limits::page_bytes` of the writer: placement depends on it.
    page_bytes: u64,
    /// How many records the book holds.
    records: u64,
    /// How many zones the book holds, and the CRC-32 of their encoding.
    zones: u32,
    zones_crc: u32,
    /// The committed log: where it starts in the log area (after a migration, past the older
    /// layout's log or journal) and its committed part.
    log: LogSpan,
    /// Whether the record pages count for nothing yet (they hold an older layout's records;
    /// a migration's full save is in the log).
    stale: Stale,
    /// Layout 7: the book's run counters (`Scheduler::totals`; layout 8 counts retirements).
    totals: RunCounters,
    /// Layout 11: how many exclusion calendars the zones part holds after the zones (its CRC
    /// is `zones_crc`, over both).
    calendars: u32,
    /// Layout 13: the book's admission refusals (`Scheduler::refusals`).
    refusals: RefusalCounters,
}

/// What the zones part (and a log segment changing it) holds from layout 11 on: the zones,
/// ascending by name, then the exclusion calendars, ascending by name (`calendars.rs`).
/// Layouts 2 to 10 hold the zones only (`Vec<ZoneRules>`).
pub(super) type Shared = (Vec<ZoneRules>, Vec<ExclusionCalendar>);

/// A record page's blob: its page number (within the record pages) and its records, ascending
/// by id (written from references, read as [`PageBlob`]; the bytes are the same).
pub(super) type PageBlob<R> = (u32, Vec<(u64, R)>);

/// One logged change: a record id and its new page and content (a record image), or `None`
/// when it left the book.
pub(super) type Change<R> = (u64, Option<(u32, R)>);

/// The body of one log segment: (a full save: nothing logged or stored before it counts; the
/// zones, when this save changed them (first segment of a save only); the changes).
pub(super) type Segment<R, Z = Vec<ZoneRules>> = (bool, Option<Z>, Vec<Change<R>>);

/// Encoded bytes of a segment besides its changes and zones: index (4), full flag (1), zones'
/// option tag (1), vector length (8).
const SEGMENT_FRAMING_BYTES: u64 = 14;

/// Pages' worth of changes one log segment carries: segments keep every decode small (a
/// codec blob is at most [`codec::MAX_BLOB_BYTES`]) whatever the size of a save.
const SEGMENT_PAGES: usize = 16;

/// Version of the stored book: 2 = meta page, zones, journal, record pages; 3 = records carry
/// their owner (`crate::authz`); 4 = records carry their version, routing topic and type, and
/// may hold the `AtOrSeq` timing; 5 = the record log (commit page, change log, record pages
/// folded when the log is full, [`store`](crate::schedule::store)) in place of the write-ahead
/// journal; 6 = records carry their run state (parked, run policy, pending retry, dead runs,
/// run history) and the commit page where the log starts and whether the record pages are
/// stale; 7 = records carry their run counters and the commit page the book's
/// (`counters.rs`); 8 = records carry their bounds and retired state (`bounds.rs`) and the run
/// counters count retirements; 9 = records carry their overlap policy and state
/// (`overlap.rs`); 10 = records name a client owner by its 256-bit id
/// ([`crate::authz::ClientId`]; an owner migrated from a 64-bit id is
/// [`crate::authz::Principal::LegacyClient`]), so a record's largest form grows by 24 bytes;
/// 11 = a cron record may name an exclusion calendar (`calendars.rs`; its largest form grows
/// by the name's 73 bytes), and the zones part holds the book's calendars after its zones
/// ([`Shared`]), counted in the commit page; 12 = a recurring record carries the overlap policy
/// of its backfills and the backfill run it awaits (`manual.rs`; its largest form grows by 18
/// bytes); 13 = the commit page counts the book's admission refusals ([`RefusalCounters`],
/// after the calendars; records unchanged).
/// Layouts 2 to 12 load and are migrated by the next save (`legacy.rs`); layout 1 (16
/// shard blobs over the whole range, superseded before layout 2 was released) is refused with
/// [`ScheduleError::UnsupportedLayout`].
pub(super) const WIRE_VERSION: u8 = 13;

/// The committed log, read back from the pages (`Z`: what the zones part holds in its layout).
pub(super) struct Committed<R, Z = Vec<ZoneRules>> {
    /// A full save is in the log: the record pages and the zones part count for nothing.
    pub full: bool,
    /// The zones (and, from layout 11, calendars) of the latest segment carrying them.
    pub zones: Option<Z>,
    /// The latest image of each record the log names (`None`: removed).
    pub named: BTreeMap<u64, Option<(u32, R)>>,
    /// The record pages the log places records on.
    pub placed_on: BTreeSet<u32>,
}

impl<R, Z> Default for Committed<R, Z> {
    fn default() -> Self {
        Self {
            full: false,
            zones: None,
            named: BTreeMap::new(),
            placed_on: BTreeSet::new(),
        }
    }
}

/// The committed log `at` (starting `start` pages into the log area) of `layout`, read back.
pub(super) fn read_log<R: bincode::Decode<()>, Z: bincode::Decode<()>>(
    pages: &dyn ReservedPages,
    layout: Layout,
    span: LogSpan,
) -> Result<Committed<R, Z>, ScheduleError> {
    let mut c = Committed::default();
    let log = span
        .range(layout.log)
        .ok_or_else(|| ScheduleError::Corrupt("the log starts past the log area".into()))?;
    record_log::read::<Segment<R, Z>>(
        pages,
        log,
        span.pos,
        BlobKind::BookLog,
        |(full, zones, changes)| {
            if full {
                c.full = true;
                c.named.clear();
                c.placed_on.clear();
            }
            if zones.is_some() {
                c.zones = zones;
            }
            for (id, placed) in changes {
                if let Some((p, _)) = &placed {
                    if *p >= layout.record_pages {
                        return Err(format!("the log places a record on page {p}"));
                    }
                    c.placed_on.insert(*p);
                }
                c.named.insert(id, placed);
            }
            Ok(())
        },
    )
    .map_err(read_error)?;
    Ok(c)
}

/// Record page `p` as stored (empty when the page is).
pub(super) fn read_page<R: bincode::Decode<()>>(
    pages: &dyn ReservedPages,
    layout: Layout,
    p: u32,
) -> Result<Vec<(u64, R)>, ScheduleError> {
    let Some(part) = layout.record_page(p) else {
        return Ok(Vec::new());
    };
    match codec::load::<PageBlob<R>>(pages, part, BlobKind::BookRecords)? {
        None => Ok(Vec::new()),
        Some((at, records)) if at == p => Ok(records),
        Some((at, _)) => Err(ScheduleError::Corrupt(format!(
            "record page {p} holds page {at}"
        ))),
    }
}

/// The folded content of record page `p`: the stored page (unless the log holds a full save or
/// the pages are stale) minus every record the log names, plus the log's records placed on it.
pub(super) fn folded_page<R: bincode::Decode<()> + bincode::Encode, Z>(
    pages: &dyn ReservedPages,
    layout: Layout,
    committed: &Committed<R, Z>,
    by_page: &BTreeMap<u32, Vec<(u64, R)>>,
    stale: bool,
    p: u32,
) -> Result<Option<Vec<u8>>, ScheduleError> {
    let stored = if committed.full || stale {
        Vec::new()
    } else {
        read_page::<R>(pages, layout, p)?
    };
    let mut out: BTreeMap<u64, &R> = BTreeMap::new();
    for (id, r) in &stored {
        if !committed.named.contains_key(id) {
            out.insert(*id, r);
        }
    }
    for (id, r) in by_page.get(&p).into_iter().flatten() {
        out.insert(*id, r);
    }
    if out.is_empty() {
        return Ok(None);
    }
    let records: Vec<(u64, &R)> = out.into_iter().collect();
    Ok(Some(codec::to_blob(&(p, records))?))
}

/// Log pages the worst next save can need for a book of `records` records whose entries take
/// `placed_bytes` (their placement sizes, the largest each can be stored at), with `removed`
/// records removed since the last save that were on the pages, zones encoding to
/// `zones_bytes`, on pages of `page_bytes` (the smallest page the book may be saved to, so
/// larger pages need no more). It follows `Scheduler::write`: every record in the log (a tick
/// may touch any), every stored removal named, the zones in the first segment, segments cut
/// at [`SEGMENT_PAGES`] pages of estimated changes and each rounded up to whole pages. An
/// upper bound: the save's own check never fails below it. A save that does not fit the log's
/// free part folds first, so the whole log is what this must fit (`_record_pages` is kept for
/// the callers: layout 4's journal listed the record pages, the log does not).
pub(super) fn log_pages_bound(
    records: u64,
    placed_bytes: u64,
    removed: u64,
    zones_bytes: usize,
    _record_pages: u32,
    page_bytes: usize,
) -> u64 {
    let per_page = page_bytes.saturating_sub(codec::HEADER_BYTES).max(1) as u64;
    let part_bytes =
        (per_page.saturating_mul(SEGMENT_PAGES as u64)).min((codec::MAX_BLOB_BYTES / 2) as u64);
    // The largest change's estimate in `write` (a record fills at most a page's room).
    let max_est = crate::schedule::store::record_room(page_bytes) as u64 + 13;
    let est = records
        .saturating_mul(13)
        .saturating_add(placed_bytes)
        .saturating_add(removed.saturating_mul(9));
    // Every segment but the last carries more than `part_bytes - max_est` of estimates.
    let parts = 1 + est / part_bytes.saturating_sub(max_est).max(1);
    let framing = parts.saturating_mul(SEGMENT_FRAMING_BYTES);
    // A change as encoded: id (8), presence tag (1), page (4) and the record: the entry's
    // placement size counts the id once more, so 5 + placed; a removal is 9.
    let changes = records
        .saturating_mul(5)
        .saturating_add(placed_bytes)
        .saturating_add(removed.saturating_mul(9));
    let total = framing
        .saturating_add(zones_bytes as u64)
        .saturating_add(changes);
    // Each segment rounds up to whole pages: at most one page more than its bytes.
    total.div_ceil(per_page).saturating_add(parts)
}

fn read_error(e: ReadError) -> ScheduleError {
    match e {
        ReadError::Codec(e) => e.into(),
        ReadError::Corrupt(m) => ScheduleError::Corrupt(m),
    }
}

/// The book's view of one save: the record log's instance (its commit page, and the content
/// of a folded record page, read back from the pages so that it is the committed book whatever
/// the memory holds, and the same on every replica).
struct BookLog<'a> {
    layout: Layout,
    /// The commit page's fields but the log's.
    commit: Commit,
    /// Record pages the committed log changed since the last fold.
    fold_pages: &'a BTreeSet<u32>,
    /// Whether a fold rewrites every record page.
    fold_all: bool,
    /// The committed log, read when a fold starts.
    committed: Option<Committed<Record, Shared>>,
    /// Its records by page.
    by_page: BTreeMap<u32, Vec<(u64, Record)>>,
}

impl LogInstance for BookLog<'_> {
    type Error = ScheduleError;

    fn record_pages(&self) -> u32 {
        self.layout.record_pages
    }

    fn record_page(&self, p: u32) -> Option<PageRange> {
        self.layout.record_page(p)
    }

    fn fold_list(
        &mut self,
        pages: &dyn ReservedPages,
        log: &RecordLog,
    ) -> Result<Vec<u32>, ScheduleError> {
        let committed = read_log::<Record, Shared>(pages, self.layout, log.active)?;
        let every = self.fold_all || committed.full || log.stale != Stale::No;
        let list: Vec<u32> = if every {
            (0..self.layout.record_pages).collect()
        } else {
            self.fold_pages
                .iter()
                .chain(&committed.placed_on)
                .copied()
                .collect::<BTreeSet<u32>>()
                .into_iter()
                .collect()
        };
        self.by_page.clear();
        for (id, placed) in &committed.named {
            if let Some((p, r)) = placed {
                self.by_page.entry(*p).or_default().push((*id, r.clone()));
            }
        }
        self.committed = Some(committed);
        Ok(list)
    }

    fn folded_page(
        &mut self,
        pages: &dyn ReservedPages,
        log: &RecordLog,
        p: u32,
        _at: FoldPoint,
    ) -> Result<Option<Vec<u8>>, ScheduleError> {
        let Some(committed) = &self.committed else {
            return Err(ScheduleError::Corrupt("a fold without its log".into()));
        };
        let stale = log.stale != Stale::No;
        folded_page(pages, self.layout, committed, &self.by_page, stale, p)
    }

    fn fold_extra(
        &mut self,
        pages: &mut dyn ReservedPages,
        _: &RecordLog,
    ) -> Result<usize, ScheduleError> {
        match self.committed.as_ref().and_then(|c| c.zones.as_ref()) {
            Some(zones) => {
                codec::save(pages, self.layout.zones, BlobKind::ScheduleBook, zones)?;
                Ok(self.layout.zones.len() as usize)
            }
            None => Ok(0),
        }
    }

    fn commit(
        &mut self,
        pages: &mut dyn ReservedPages,
        log: &RecordLog,
        of: CommitOf,
    ) -> Result<(), ScheduleError> {
        let mut c = match of {
            CommitOf::This => self.commit.clone(),
            // A fold's commit in the middle of the save: the previous save's book (its count,
            // next id and zones, which the fold wrote to the zones part), its log folded.
            CommitOf::Previous => {
                Scheduler::read_commit(pages, self.layout, self.commit.component)?
                    .ok_or_else(|| ScheduleError::Corrupt("a fold without a commit page".into()))?
            }
        };
        c.log = log.active;
        c.stale = log.stale;
        codec::save(pages, self.layout.meta, BlobKind::ScheduleBook, &c)?;
        Ok(())
    }
}

impl Scheduler {
    /// Admission's log check ([`Limits::max_log_pages`]): whether the worst next save
    /// still fits the log after a change leaving `records` records of `placed_bytes` entry
    /// bytes and zones of `zones_bytes`. Nothing changes.
    pub(super) fn check_log(
        &self,
        records: u64,
        placed_bytes: u64,
        zones_bytes: usize,
    ) -> Result<(), ScheduleError> {
        let Some(log_pages) = self.limits.max_log_pages else {
            return Ok(());
        };
        let need_pages = log_pages_bound(
            records,
            placed_bytes,
            self.placement.removed_stored,
            zones_bytes,
            self.limits.max_record_pages.unwrap_or(0),
            self.limits.page_bytes,
        );
        if need_pages > u64::from(log_pages) {
            return Err(ScheduleError::LogFull {
                need_pages,
                log_pages,
            });
        }
        Ok(())
    }

    /// Records that record `id` changed (or left the book) for the next save: re-measures its
    /// stored size and keeps, moves or frees its record page (see [`store`](crate::schedule::store)). O(log n).
    pub(super) fn touch(&mut self, id: u64) {
        match self.records.get(&id) {
            Some(rec) => {
                // Placed at its largest stored size (with a next point and owed runs: every
                // other field is fixed after admission), so a record never outgrows its page
                // at run time and the record pages admission counted always hold the book.
                // Encoding to a size counter cannot fail for an admitted record; an error makes
                // it oversize, which the next save reports.
                let len = Self::entry_bound(&rec.def).unwrap_or(usize::MAX);
                self.placement.put_in(&mut self.records, id, len);
            }
            // Every path taking a record out frees its place with it (`remove_at`, the
            // location kept with the record); marked as changed all the same.
            None => self.placement.remove_at(id, None),
        }
    }

    /// The entry bytes record `id` is placed at (0 when it is not placed).
    pub(super) fn placed_len(&self, id: u64) -> u64 {
        self.records.loc(id).map_or(0, |(_, len)| u64::from(len))
    }

    /// The layout of `range` in `pages`, after checking that the store has the range and pages
    /// of at least `Limits::page_bytes`.
    fn layout(&self, pages: &dyn ReservedPages, range: PageRange) -> Result<Layout, ScheduleError> {
        let layout = Layout::of(range).ok_or_else(|| {
            ScheduleError::Limit(format!(
                "a range of {} pages cannot hold the book's commit page, zones, log and record pages",
                range.len()
            ))
        })?;
        if !range.fits(pages) {
            return Err(CodecError::RangeOutOfStore {
                first: range.first(),
                end: range.end(),
                num_pages: pages.num_pages(),
            }
            .into());
        }
        if pages.page_size() < self.limits.page_bytes {
            return Err(ScheduleError::Limit(format!(
                "pages of {} bytes, the book is configured for {}",
                pages.page_size(),
                self.limits.page_bytes
            )));
        }
        Ok(layout)
    }

    /// Writes what changed since the last save or load into `range` (see
    /// `schedule/store.rs`, `crate::record_log` and `docs/scheduling.md`): the changed records
    /// and, when they changed, the zones, appended to the log, then the commit page. A save
    /// after one change writes 2 pages; a save that does not fit the log's free part first
    /// folds the log into the record pages. Size-checks everything before writing, so a size
    /// error writes nothing; a crash part-way leaves pages that load as the book before or
    /// after this save, never a mix.
    ///
    /// A failed save (an error from the pages) keeps the change marks; the host should reload
    /// from the pages, as after a crash, before saving again.
    ///
    /// # Errors
    /// [`ScheduleError::Codec`] (pages, or the save or zones do not fit their part),
    /// [`ScheduleError::Limit`] (the range is too small to lay out, its record pages are all
    /// used, or its pages are smaller than `Limits::page_bytes`).
    pub fn save(
        &mut self,
        pages: &mut dyn ReservedPages,
        range: PageRange,
    ) -> Result<(), ScheduleError> {
        self.write(pages, range, false)
    }

    /// Logs the whole book (every record and the zones, as a full save: nothing stored before
    /// it counts), into `range` as the range's commit page finds it (so it may be another
    /// range, or fresh pages); the next fold rewrites every record page. Crash-atomic like
    /// [`Scheduler::save`].
    ///
    /// # Errors
    /// As [`Scheduler::save`]; [`ScheduleError::UnsupportedLayout`] or
    /// [`ScheduleError::Corrupt`] when the range holds a book of another layout or component
    /// (zero the range first to replace it).
    pub fn save_all(
        &mut self,
        pages: &mut dyn ReservedPages,
        range: PageRange,
    ) -> Result<(), ScheduleError> {
        self.write(pages, range, true)
    }

    fn write(
        &mut self,
        pages: &mut dyn ReservedPages,
        range: PageRange,
        all: bool,
    ) -> Result<(), ScheduleError> {
        let layout = self.layout(pages, range)?;
        // Admission from here on is bounded by the pages the book saves into.
        self.bind_range(range);
        if !all && !self.is_dirty() {
            return Ok(());
        }
        // A book loaded from an older layout is migrated by a full save.
        let migration = self.migration;
        let all = all || migration.is_some();
        if let Some(id) = self.placement.oversize.first() {
            return Err(ScheduleError::Limit(format!(
                "schedule {id} does not fit a page of {} bytes",
                self.limits.page_bytes
            )));
        }
        let page_size = pages.page_size();
        // Zones and calendars change only through requests that mark the header; re-encode
        // them only then. Layout 11's zones part: the zones, then the calendars ([`Shared`]).
        let zone_list: (Vec<&ZoneRules>, Vec<&ExclusionCalendar>) = (
            self.zones.values().collect(),
            self.calendars.values().map(|c| &**c).collect(),
        );
        let zones_count = u32::try_from(zone_list.0.len()).unwrap_or(u32::MAX);
        let calendars_count = u32::try_from(zone_list.1.len()).unwrap_or(u32::MAX);
        let zones_blob = if all || self.header_dirty || self.placement.zones_crc.is_none() {
            let blob = codec::to_blob(&zone_list)?;
            let crc = crc32fast::hash(&blob);
            (all || self.placement.zones_crc != Some(crc)).then_some((blob, crc))
        } else {
            None
        };
        let zones_crc = zones_blob
            .as_ref()
            .map(|(_, crc)| *crc)
            .or(self.placement.zones_crc)
            .unwrap_or(0);
        // The change marks, sorted once (they read as ordered sets).
        self.placement.dirty_pages.squeeze();
        self.placement.dirty_ids.squeeze();
        let in_use: Vec<u32> = if all {
            (0..self.placement.pages_in_use()).collect()
        } else {
            self.placement.dirty_pages.sorted().to_vec()
        };
        for &p in &in_use {
            if p >= layout.record_pages && self.placement.holds(p) {
                return Err(ScheduleError::Limit(format!(
                    "the book needs more than the {} record pages of its range",
                    layout.record_pages
                )));
            }
        }
        if let Some((blob, _)) = &zones_blob {
            // The fold writes them to the zones part: they must fit it.
            let capacity = codec::capacity(layout.zones, page_size);
            if blob.len() > capacity {
                return Err(CodecError::TooLarge {
                    len: blob.len(),
                    capacity,
                }
                .into());
            }
        }
        // Each change with its entry bytes (for the segment estimates below).
        let mut lens: Vec<u32> = Vec::new();
        let mut changes: Vec<(u64, Option<(u32, &Record)>)> = Vec::new();
        fn push<'r>(
            changes: &mut Vec<(u64, Option<(u32, &'r Record)>)>,
            lens: &mut Vec<u32>,
            id: u64,
            placed: Option<(&'r Record, Option<(u32, u32)>)>,
        ) {
            let (change, len) = match placed {
                Some((r, Some((page, len)))) => (Some((page, r)), len),
                _ => (None, 0),
            };
            changes.push((id, change));
            lens.push(len);
        }
        if all {
            for (id, r, at) in self.records.iter_placed() {
                if at.is_some() {
                    push(&mut changes, &mut lens, id, Some((r, at)));
                }
            }
        } else {
            // A removed id at or above `stored_below` was created since the last save and
            // never reached the pages: naming it would only grow the log (without bound under
            // create-and-cancel churn between two saves), so it is left out.
            let stored_below = self.placement.stored_below;
            for &id in self.placement.dirty_ids.sorted() {
                let placed = self.records.get_placed(id);
                if id < stored_below || placed.is_some() {
                    push(&mut changes, &mut lens, id, placed);
                }
            }
        }
        let zones_in_log = zones_blob.as_ref().map(|_| &zone_list);
        // The save's segments, of about SEGMENT_PAGES pages of changes each; the first also
        // carries the zones and the full flag.
        let per_page = page_size - codec::HEADER_BYTES;
        let part_bytes = (per_page * SEGMENT_PAGES).min(codec::MAX_BLOB_BYTES / 2);
        let mut bounds = vec![0usize];
        let mut acc = 0usize;
        for (i, ((_, change), len)) in changes.iter().zip(&lens).enumerate() {
            let est = 9 + change.map_or(0, |_| 4 + *len as usize);
            if acc + est > part_bytes && bounds.last().is_some_and(|&b| b < i) {
                bounds.push(i);
                acc = 0;
            }
            acc += est;
        }
        bounds.push(changes.len());
        let mut bodies = Vec::with_capacity(bounds.len() - 1);
        for (k, w) in bounds.windows(2).enumerate() {
            let slice = changes.get(w[0]..w[1]).unwrap_or_default();
            let zones_k = if k == 0 { zones_in_log } else { None };
            bodies.push(codec::to_blob(&(all && k == 0, zones_k, slice))?);
        }
        let need: usize = bodies
            .iter()
            .map(|b| record_log::segment_pages(b.len(), per_page))
            .sum();
        // Admission's bound (`check_log`) is an upper bound of every save: checked in every
        // test build, so the property tests exercise it on every save.
        debug_assert!(
            migration.is_some()
                || need as u64
                    <= log_pages_bound(
                        self.placement.records() as u64,
                        self.placement.placed_bytes,
                        self.placement.removed_stored,
                        self.zones_bytes,
                        layout.record_pages,
                        self.limits.page_bytes,
                    ),
            "a save of {need} log pages over admission's bound"
        );
        if need > layout.log.len() as usize {
            return Err(CodecError::TooLarge {
                len: bodies.iter().map(Vec::len).sum(),
                capacity: codec::capacity(layout.log, page_size),
            }
            .into());
        }
        let mut rlog = RecordLog::new(layout.log, BlobKind::BookLog, BlobKind::BookRecords, false);
        if let Some(old) = migration {
            // Past what the older layout needs (or at the first page, once its own save is
            // completed): a crash before the commit page reloads it as it was.
            let need = u32::try_from(need).unwrap_or(u32::MAX);
            let start = legacy::prepare(pages, layout, self.component, old, need)?;
            rlog.active = LogSpan {
                start,
                pos: LogPos::default(),
            };
            rlog.stale = Stale::InActive;
        } else if all {
            // A full save takes the log's position from the range itself.
            if let Some(c) = Self::read_commit(pages, layout, self.component)? {
                rlog.active = c.log;
                rlog.stale = c.stale;
            }
        } else {
            rlog.active = self.placement.log;
            rlog.stale = self.placement.stale;
        }
        let mut inst = BookLog {
            layout,
            commit: Commit {
                version: WIRE_VERSION,
                component: self.component,
                next_id: self.next_id,
                page_bytes: self.limits.page_bytes as u64,
                records: self.records.len() as u64,
                zones: zones_count,
                zones_crc,
                log: LogSpan::default(),
                stale: Stale::No,
                totals: self.totals,
                calendars: calendars_count,
                refusals: self.refusals,
            },
            fold_pages: &self.placement.fold_pages,
            fold_all: all || self.placement.fold_all,
            committed: None,
            by_page: BTreeMap::new(),
        };
        let stats = rlog.save(pages, &mut inst, bodies)?;
        self.placement.log = rlog.active;
        self.placement.stale = rlog.stale;
        if stats.folded {
            self.placement.fold_pages.clear();
            self.placement.fold_all = false;
        }
        if all {
            self.placement.fold_all = true;
            self.placement.fold_pages.clear();
        } else {
            let dirty = self.placement.dirty_pages.take_sorted();
            self.placement.fold_pages.extend(dirty);
        }
        self.placement.zones_crc = Some(zones_crc);
        self.placement.stored_below = self.next_id;
        self.placement.saved();
        self.header_dirty = false;
        self.refusals_dirty = false;
        // Names no record holds any more (re-targeted, cancelled) are forgotten.
        self.names.prune();
        if migration.is_some() {
            tracing::info!(
                component = self.component,
                layout = WIRE_VERSION,
                "schedule book migrated"
            );
            self.migration = None;
        }
        Ok(())
    }

    /// The commit page of `layout`, `None` when nothing is stored. A page of another layout
    /// (its first byte, the version) is [`ScheduleError::UnsupportedLayout`]; another
    /// component's book is [`ScheduleError::Corrupt`].
    fn read_commit(
        pages: &dyn ReservedPages,
        layout: Layout,
        component: ComponentId,
    ) -> Result<Option<Commit>, ScheduleError> {
        let Some(blob) = codec::load_blob(pages, layout.meta, BlobKind::ScheduleBook)? else {
            return Ok(None);
        };
        if let Some(&found) = blob.first()
            && found != WIRE_VERSION
        {
            return Err(ScheduleError::UnsupportedLayout {
                found,
                supported: WIRE_VERSION,
            });
        }
        let commit = codec::from_blob::<Commit>(&blob)?;
        if commit.component != component {
            return Err(ScheduleError::Corrupt(format!(
                "version {} component {}",
                commit.version, commit.component
            )));
        }
        Ok(Some(commit))
    }

    /// Reads the book stored in `range` (an empty book when nothing is stored): the commit
    /// page, the committed log (whose records and zones take priority) and the record pages,
    /// validating every record against `limits` and re-parsing every cron expression. A book
    /// of an older layout (2 to 12) is read and converted; the next save migrates it (see
    /// `legacy.rs`). Handlers are not checked here: a record naming an unregistered handler
    /// is parked when it comes due. Costs one read of every page of the range but the log's
    /// uncommitted part.
    ///
    /// # Errors
    /// [`ScheduleError::Codec`] (a page fails its checks: any flipped byte of the commit page,
    /// the committed log, the zones part in force or a record page),
    /// [`ScheduleError::UnsupportedLayout`] (layout 1, or a newer one),
    /// [`ScheduleError::Corrupt`] or [`ScheduleError::Limit`] (also: an older layout's book
    /// that does not fit the range once its records carry their run state).
    pub fn load(
        component: ComponentId,
        limits: Limits,
        pages: &dyn ReservedPages,
        range: PageRange,
    ) -> Result<Self, ScheduleError> {
        let mut book = Self::new_in(component, limits, range);
        let layout = book.layout(pages, range)?;
        let corrupt = |m: String| {
            tracing::warn!(component, reason = %m, "stored schedule book rejected");
            ScheduleError::Corrupt(m)
        };
        let first = codec::load_blob(pages, layout.meta, BlobKind::ScheduleBook)?;
        if first.as_ref().and_then(|b| b.first()) != Some(&WIRE_VERSION) {
            if let Some(old) = legacy::load(pages, layout, first.as_deref(), component)? {
                book.install_legacy(old, layout).map_err(corrupt)?;
                return Ok(book);
            }
            if first.is_some() {
                return Err(corrupt("an unreadable commit page".into()));
            }
            // Nothing stored: every other part must be empty too (a lost commit page is not
            // a fresh store); log pages are never read past the committed log.
            for id in range.ids() {
                if layout.log.contains(id) {
                    continue;
                }
                if pages.load(id).map_err(CodecError::from)?.is_some() {
                    return Err(corrupt(format!(
                        "page {id} holds data but the commit page is empty"
                    )));
                }
            }
            return Ok(book);
        }
        let Some(commit) = Self::read_commit(pages, layout, component)? else {
            return Ok(book);
        };
        if commit.page_bytes != limits.page_bytes as u64 {
            return Err(corrupt(format!(
                "stored for pages of {} bytes, configured {}",
                commit.page_bytes, limits.page_bytes
            )));
        }
        if commit.zones as usize > limits.max_zones || commit.records > limits.max_schedules as u64
        {
            return Err(corrupt("more zones or schedules than the limits".into()));
        }
        if commit.log.end() > layout.log.len() || commit.stale == Stale::InFrozen {
            return Err(corrupt("a log the log area cannot hold".into()));
        }
        let stale = commit.stale != Stale::No;
        if commit.calendars as usize > super::MAX_BOOK_CALENDARS {
            return Err(corrupt("more calendars than the limit".into()));
        }
        let committed = read_log::<Record, Shared>(pages, layout, commit.log)?;
        // The zones part is read only when the log carries no zones: a fold rewrites it while
        // the log's copy is in force. Decoding re-validates every zone and calendar.
        let shared = match &committed.zones {
            Some(z) => z.clone(),
            None => codec::load::<Shared>(pages, layout.zones, BlobKind::ScheduleBook)?
                .ok_or_else(|| corrupt("the zones part is empty".into()))?,
        };
        if shared.0.len() != commit.zones as usize
            || shared.1.len() != commit.calendars as usize
            || crc32fast::hash(&codec::to_blob(&shared)?) != commit.zones_crc
        {
            return Err(corrupt("zones differ from the commit page".into()));
        }
        book.zones_bytes = codec::encoded_len(&shared)?;
        let (zones, calendars) = shared;
        for z in zones {
            book.zones.insert(z.name().to_owned(), z);
        }
        for c in calendars {
            let name = c.name().to_owned();
            if book
                .calendars
                .insert(name, std::sync::Arc::new(c))
                .is_some()
            {
                return Err(corrupt("a calendar stored twice".into()));
            }
        }
        book.placement.zones_crc = Some(commit.zones_crc);
        let room = book.placement.room() as usize;
        // Pages holding a copy the log supersedes: the next fold rewrites them.
        let mut superseded = BTreeSet::new();
        // Stale record pages hold another layout's records: never read (the log holds every
        // record until a fold rewrites them all).
        for p in 0..if stale { 0 } else { layout.record_pages } {
            // Every page is read, even after a full save: a damaged page is reported.
            let records = read_page::<Record>(pages, layout, p)?;
            if committed.full {
                continue;
            }
            let mut last = 0;
            let mut used = 0usize;
            for (id, rec) in records {
                if id <= last || id >= commit.next_id {
                    return Err(corrupt(format!("schedule id {id} misplaced on page {p}")));
                }
                last = id;
                let len = codec::encoded_len(&(id, &rec))?;
                used = used.saturating_add(len);
                if used > room {
                    return Err(corrupt(format!("page {p} holds more than a page's room")));
                }
                if committed.named.contains_key(&id) {
                    superseded.insert(p);
                    continue;
                }
                if book.records.len() as u64 >= commit.records {
                    return Err(corrupt("more schedules than the commit page counts".into()));
                }
                // Placed at its largest size, as `touch` does.
                let placed = Self::entry_bound(&rec.def)?;
                book.load_record(id, rec).map_err(corrupt)?;
                book.placement
                    .load_in(&mut book.records, id, p, placed)
                    .map_err(corrupt)?;
            }
        }
        for (id, placed) in committed.named {
            let Some((p, rec)) = placed else {
                continue;
            };
            if id == 0 || id >= commit.next_id {
                return Err(corrupt(format!("the log names schedule id {id}")));
            }
            if book.records.len() as u64 >= commit.records {
                return Err(corrupt("more schedules than the commit page counts".into()));
            }
            if codec::encoded_len(&(id, &rec))? > room {
                return Err(corrupt(format!("schedule {id} is larger than a page")));
            }
            let len = Self::entry_bound(&rec.def)?;
            book.load_record(id, rec).map_err(corrupt)?;
            book.placement
                .load_in(&mut book.records, id, p, len)
                .map_err(corrupt)?;
        }
        if book.records.len() as u64 != commit.records {
            return Err(corrupt(format!(
                "{} schedules stored, the commit page counts {}",
                book.records.len(),
                commit.records
            )));
        }
        book.next_id = commit.next_id;
        book.totals = commit.totals;
        book.refusals = commit.refusals;
        book.placement.stored_below = commit.next_id;
        book.placement.log = commit.log;
        book.placement.stale = commit.stale;
        book.placement.fold_all = committed.full || stale;
        book.placement.fold_pages = superseded;
        book.placement
            .fold_pages
            .extend(committed.placed_on.iter().copied());
        Ok(book)
    }

    /// Installs a book read from an older layout: its records placed afresh (the next save
    /// logs them all, the record pages stale), validated like any loaded record.
    fn install_legacy(&mut self, old: legacy::Loaded, layout: Layout) -> Result<(), String> {
        // The zones part becomes (zones, calendars): no calendars below layout 11.
        self.zones_bytes =
            codec::encoded_len(&(&old.zones, &old.calendars)).map_err(|e| e.to_string())?;
        for z in old.zones {
            self.zones.insert(z.name().to_owned(), z);
        }
        // Installed before the records that name them (`load_record` checks the names).
        if old.calendars.len() > super::MAX_BOOK_CALENDARS {
            return Err("more calendars than the limit".into());
        }
        for c in old.calendars {
            let name = c.name().to_owned();
            if self
                .calendars
                .insert(name, std::sync::Arc::new(c))
                .is_some()
            {
                return Err("a calendar stored twice".into());
            }
        }
        for (id, rec) in old.records {
            self.load_record(id, rec)?;
            self.touch(id);
        }
        if let Some(id) = self.placement.oversize.first() {
            return Err(format!("schedule {id} no longer fits a record page"));
        }
        if self.placement.pages_in_use() > layout.record_pages {
            return Err(format!(
                "the book needs {} record pages once migrated, its range has {}",
                self.placement.pages_in_use(),
                layout.record_pages
            ));
        }
        self.next_id = old.next_id;
        self.totals = old.totals;
        self.header_dirty = true;
        self.migration = Some(old.old);
        Ok(())
    }

    fn load_record(&mut self, id: u64, mut rec: Record) -> Result<(), String> {
        if self.records.contains_key(&id) {
            return Err(format!("schedule id {id} stored twice"));
        }
        // Stored timings are normalised at admission: relative ones never reach the pages.
        if matches!(
            rec.def.timing,
            Timing::AfterMs(_)
                | Timing::AfterSeqs(_)
                | Timing::AfterMsOrSeqs { .. }
                | Timing::Every { start_ms: None, .. }
        ) {
            return Err(format!("schedule {id}: timing not normalised"));
        }
        if rec.version == 0 {
            return Err(format!("schedule {id}: version 0"));
        }
        // Re-admit the stored definition (validation only: the stored next point is kept).
        let (_, _, cron) = self
            .admit(&rec.def.to_schedule(), |_| true, 0, Some(0))
            .map_err(|e| format!("schedule {id}: {e}"))?;
        // Owed catch-up runs exist only for time-keyed recurring schedules, first <= last.
        if let Some((first_ms, last_ms)) = rec.owed
            && (first_ms > last_ms
                || !matches!(rec.def.timing, Timing::Every { .. } | Timing::Cron { .. }))
        {
            return Err(format!("schedule {id}: invalid owed runs"));
        }
        if let Some(k) = &rec.def.key
            && self.keys.insert(k.clone(), id).is_some()
        {
            return Err(format!("key {k:?} held twice"));
        }
        // Layout 11: a calendar named is installed, on a cron schedule that it lets fire.
        if let Some(name) = &rec.calendar {
            self.calendar_for(name, &rec.def.timing, cron.as_ref())
                .map_err(|e| format!("schedule {id}: {e}"))?;
        }
        if let Some(c) = cron {
            self.crons.insert(id, c);
        }
        rec.policy
            .retry
            .check()
            .map_err(|e| format!("schedule {id}: {e}"))?;
        if rec.dead.len() > Self::dead_cap(&rec) {
            return Err(format!("schedule {id}: {} dead runs", rec.dead.len()));
        }
        rec.manual
            .check(!rec.def.timing.is_one_shot())
            .map_err(|e| format!("schedule {id}: {e}"))?;
        rec.bounds
            .check(!rec.def.timing.is_one_shot())
            .map_err(|e| format!("schedule {id}: {e}"))?;
        if rec.overlap.is_some() && rec.def.timing.is_one_shot() {
            return Err(format!("schedule {id}: an overlap state on a one-shot"));
        }
        rec.overlap()
            .check(!rec.def.timing.is_one_shot())
            .map_err(|e| format!("schedule {id}: {e}"))?;
        // Layout 12: the backfills' overlap policy (recurring schedules only).
        if let Some(b) = &rec.backfill_overlap {
            b.check(!rec.def.timing.is_one_shot())
                .map_err(|e| format!("schedule {id}: {e}"))?;
        }
        if rec.retired.is_some() && (rec.next.is_some() || rec.bounds.is_none()) {
            return Err(format!(
                "schedule {id}: retired with a next point or no bounds"
            ));
        }
        if Self::is_spent(&rec) {
            return Err(format!("one-shot schedule {id} has nothing left"));
        }
        if rec
            .retry
            .is_some_and(|r| r.attempt == 0 || r.attempt > super::MAX_ATTEMPTS)
        {
            return Err(format!("schedule {id}: invalid pending retry"));
        }
        if rec.parked {
            self.parked
                .entry(rec.def.handler.to_string())
                .or_default()
                .insert(id);
        }
        if !rec.dead.is_empty() {
            self.dead_ids.insert(id);
        }
        let bytes = Self::quota_bytes(&rec.def).map_err(|e| format!("schedule {id}: {e}"))?;
        self.usage.add(rec.owner, bytes);
        // Its handler name shared with the book's other records naming it (`def.rs`).
        rec.def.handler = self.names.intern(&rec.def.handler);
        self.records.insert(id, rec);
        self.reindex(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound admission uses covers the save's segments (also asserted in every save of a
    /// debug build): a bound below the pages one record takes would be a defect.
    #[test]
    fn the_log_bound_covers_one_record_and_grows_with_the_book() {
        let one = log_pages_bound(1, 100, 0, 8, 0, 4_096);
        assert!(one >= 2, "a segment page at least: {one}");
        let many = log_pages_bound(1_000, 100_000, 10, 8, 0, 4_096);
        assert!(many >= 100_000 / 4_064, "{many}");
    }
}
