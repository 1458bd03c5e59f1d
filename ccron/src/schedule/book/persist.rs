//! Persistence glue: the stored meta and journal forms, save (journal first, then the meta,
//! zones and changed record pages), load with journal replay, and the re-validation of every
//! loaded record. Page layout and record placement are in `store.rs`.

use std::collections::{BTreeMap, BTreeSet};

use super::{Limits, Record, ScheduleError, Scheduler, Timing};
use crate::codec::{self, BlobKind, CodecError};
use crate::cron::ZoneRules;
use crate::pages::{PageRange, ReservedPages};
use crate::schedule::store::Layout;
use crate::tick::ComponentId;

/// What the meta page holds (see [`store`](crate::schedule::store) for the layout).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct Meta {
    /// [`WIRE_VERSION`].
    version: u8,
    component: ComponentId,
    next_id: u64,
    /// `Limits::page_bytes` of the writer: placement depends on it.
    page_bytes: u64,
    /// How many records the record pages hold.
    records: u64,
    /// How many zones the zones part holds, and the CRC-32 of its blob.
    zones: u32,
    zones_crc: u32,
}

/// A record page's blob: its page number (within the record pages) and its records, ascending
/// by id (written from references, read as [`PageBlob`]; the bytes are the same).
type PageBlob = (u32, Vec<(u64, Record)>);

/// One change a journal carries: a record id and its new page and content, or `None` when it
/// left the book.
type Change = (u64, Option<(u32, Record)>);

/// A save's journal: ([`WIRE_VERSION`], whether every record page was rewritten, the meta, the
/// zones when they changed, the record pages the save writes, the changed records). A tuple so
/// that the writer can encode borrowed records with the same bytes.
type Journal = (
    u8,
    bool,
    Meta,
    Option<Vec<ZoneRules>>,
    Vec<u32>,
    Vec<Change>,
);

/// The head of one journal part: ([`WIRE_VERSION`], part index, part count, CRC-32 of every
/// part's body, which binds the parts of one save together).
type JournalHead = (u8, u32, u32, u32);

/// Encoded bytes of a [`JournalHead`] (fixed-width integers).
const JOURNAL_HEAD_BYTES: usize = 13;

/// The body of one journal part: (full save, meta, zones (part 0 only), record pages written
/// (part 0 only), changes).
type JournalBody = (bool, Meta, Option<Vec<ZoneRules>>, Vec<u32>, Vec<Change>);

/// Pages' worth of changes one journal part carries: parts keep every decode small (a codec
/// blob is at most [`codec::MAX_BLOB_BYTES`]) whatever the size of a save.
const JOURNAL_PART_PAGES: usize = 16;

/// A journal's records by record page (borrowed from the journal).
type Placed<'a> = BTreeMap<u32, Vec<(u64, &'a Record)>>;

/// Version of the stored book: 2 = meta page, zones, journal, record pages ([`store`](crate::schedule::store));
/// 3 = records carry their owner (`crate::authz`); 4 = records carry their version, routing
/// topic and type, and may hold the `AtOrSeq` timing. Pages of another version are refused at
/// load with [`ScheduleError::UnsupportedLayout`] (no conversion: a replica of an older release
/// must be drained, or its book recreated, before upgrading).
const WIRE_VERSION: u8 = 4;

/// Journal pages the worst next save can need for a book of `records` records whose entries
/// take `placed_bytes` (their placement sizes, the largest each can be stored at), with
/// `removed` records removed since the last save that were on the pages, zones encoding to
/// `zones_bytes`, `record_pages` record pages, on pages of `page_bytes` (the smallest page the
/// book may be saved to, so larger pages need no more). It follows `Scheduler::write`: every
/// record in the journal (a tick may touch any), every stored removal named, the zones and the
/// page list in part 0, parts cut at [`JOURNAL_PART_PAGES`] pages of estimated changes and each
/// rounded up to whole pages. An upper bound: the save's own check never fails below it.
pub(super) fn journal_pages_bound(
    records: u64,
    placed_bytes: u64,
    removed: u64,
    zones_bytes: usize,
    record_pages: u32,
    page_bytes: usize,
) -> u64 {
    let per_page = page_bytes.saturating_sub(codec::HEADER_BYTES).max(1) as u64;
    let part_bytes = (per_page.saturating_mul(JOURNAL_PART_PAGES as u64))
        .min((codec::MAX_BLOB_BYTES / 2) as u64);
    // The largest change's estimate in `write` (a record fills at most a page's room).
    let max_est = crate::schedule::store::record_room(page_bytes) as u64 + 13;
    let est = records
        .saturating_mul(13)
        .saturating_add(placed_bytes)
        .saturating_add(removed.saturating_mul(9));
    // Every part but the last carries more than `part_bytes - max_est` of estimates.
    let parts = 1 + est / part_bytes.saturating_sub(max_est).max(1);
    // Per part: its head (13) and body framing (full flag, meta <= 37, option tag, three
    // vector lengths), rounded up.
    let framing = parts.saturating_mul(96);
    // A change as encoded: id (8), presence tag (1), page (4) and the record: the entry's
    // placement size counts the id once more, so 5 + placed; a removal is 9.
    let changes = records
        .saturating_mul(5)
        .saturating_add(placed_bytes)
        .saturating_add(removed.saturating_mul(9));
    let total = framing
        .saturating_add(zones_bytes as u64)
        .saturating_add(u64::from(record_pages).saturating_mul(4))
        .saturating_add(changes);
    total.div_ceil(per_page).saturating_add(parts)
}

impl Scheduler {
    /// Admission's journal check ([`Limits::max_journal_pages`]): whether the worst next save
    /// still fits the journal after a change leaving `records` records of `placed_bytes` entry
    /// bytes and zones of `zones_bytes`. Nothing changes.
    pub(super) fn check_journal(
        &self,
        records: u64,
        placed_bytes: u64,
        zones_bytes: usize,
    ) -> Result<(), ScheduleError> {
        let Some(journal_pages) = self.limits.max_journal_pages else {
            return Ok(());
        };
        let need_pages = journal_pages_bound(
            records,
            placed_bytes,
            self.placement.removed_stored,
            zones_bytes,
            self.limits.max_record_pages.unwrap_or(0),
            self.limits.page_bytes,
        );
        if need_pages > u64::from(journal_pages) {
            return Err(ScheduleError::JournalFull {
                need_pages,
                journal_pages,
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
                self.placement.put(id, len);
            }
            None => self.placement.remove(id),
        }
    }

    /// The layout of `range` in `pages`, after checking that the store has the range and pages
    /// of at least `Limits::page_bytes`.
    fn layout(&self, pages: &dyn ReservedPages, range: PageRange) -> Result<Layout, ScheduleError> {
        let layout = Layout::of(range).ok_or_else(|| {
            ScheduleError::Limit(format!(
                "a range of {} pages cannot hold the book's meta, zones, journal and record pages",
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

    /// Writes what changed since the last save or load into `range`: a journal, then the meta
    /// page, the zones when they changed and the record pages whose records changed (see
    /// `schedule/store.rs` and `docs/scheduling.md`): O(records changed) single-page writes.
    /// Size-checks everything before writing (record pages fit by construction), so a size
    /// error writes nothing new (a journal found at load is completed first); a crash part-way
    /// leaves pages that load as the book before or after this save, never a mix.
    ///
    /// A failed save (an error from the pages) keeps the change marks; the host should reload
    /// from the pages, as after a crash, before saving again.
    ///
    /// # Errors
    /// [`ScheduleError::Codec`] (pages, or the journal or zones do not fit their part),
    /// [`ScheduleError::Limit`] (the range is too small to lay out, its record pages are all
    /// used, or its pages are smaller than `Limits::page_bytes`).
    pub fn save(
        &mut self,
        pages: &mut dyn ReservedPages,
        range: PageRange,
    ) -> Result<(), ScheduleError> {
        self.write(pages, range, false)
    }

    /// Writes the whole book (meta, zones and every record page, empty ones zeroed), as after a
    /// layout change. Journaled like [`Scheduler::save`].
    ///
    /// # Errors
    /// As [`Scheduler::save`].
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
        // Complete a journal found at load before anything can overwrite it (it rewrites what
        // that save wrote, so the pages match those of a replica that never stopped).
        if self.placement.replay_pending {
            let kept = Self::replay_in_place(pages, layout, self.component)?;
            // Leftovers of a longer journal the crash did not get to zero.
            for id in
                layout.journal.first() + kept..layout.journal.first() + self.placement.journal_len
            {
                pages.zero(id).map_err(CodecError::from)?;
            }
            self.placement.journal_len = kept;
            self.placement.replay_pending = false;
        }
        if !all && !self.is_dirty() {
            return Ok(());
        }
        if let Some(id) = self.placement.oversize.first() {
            return Err(ScheduleError::Limit(format!(
                "schedule {id} does not fit a page of {} bytes",
                self.limits.page_bytes
            )));
        }
        let page_size = pages.page_size();
        // Zones change only through requests that mark the header; re-encode them only then.
        let zone_list: Vec<&ZoneRules> = self.zones.values().collect();
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
        let meta = Meta {
            version: WIRE_VERSION,
            component: self.component,
            next_id: self.next_id,
            page_bytes: self.limits.page_bytes as u64,
            records: self.records.len() as u64,
            zones: u32::try_from(zone_list.len()).unwrap_or(u32::MAX),
            zones_crc,
        };
        let listed: Vec<u32> = if all {
            (0..layout.record_pages).collect()
        } else {
            self.placement.dirty_pages.iter().copied().collect()
        };
        let in_use = if all {
            (0..self.placement.pages_in_use()).collect()
        } else {
            listed.clone()
        };
        for &p in &in_use {
            if p >= layout.record_pages && !self.placement.members(p).is_empty() {
                return Err(ScheduleError::Limit(format!(
                    "the book needs more than the {} record pages of its range",
                    layout.record_pages
                )));
            }
        }
        let changes: Vec<(u64, Option<(u32, &Record)>)> = if all {
            self.records
                .iter()
                .filter_map(|(id, r)| Some((*id, Some((self.placement.page_of(*id)?, r)))))
                .collect()
        } else {
            // A removed id at or above `stored_below` was created since the last save and
            // never reached the pages: naming it would only grow the journal (without bound
            // under create-and-cancel churn between two saves), so it is left out.
            let stored_below = self.placement.stored_below;
            self.placement
                .dirty_ids
                .iter()
                .filter(|id| **id < stored_below || self.records.contains_key(id))
                .map(|id| {
                    let placed = self
                        .records
                        .get(id)
                        .and_then(|r| Some((self.placement.page_of(*id)?, r)));
                    (*id, placed)
                })
                .collect()
        };
        let zones_in_journal = zones_blob.as_ref().map(|_| &zone_list);
        // The journal in parts of about JOURNAL_PART_PAGES pages of changes each; part 0 also
        // carries the zones and the page list.
        let per_page = page_size - codec::HEADER_BYTES;
        let part_bytes = (per_page * JOURNAL_PART_PAGES).min(codec::MAX_BLOB_BYTES / 2);
        let mut bounds = vec![0usize];
        let mut acc = 0usize;
        for (i, (id, change)) in changes.iter().enumerate() {
            let est = 9 + change.map_or(0, |_| 4 + self.placement.len_of(*id) as usize);
            if acc + est > part_bytes && bounds.last().is_some_and(|&b| b < i) {
                bounds.push(i);
                acc = 0;
            }
            acc += est;
        }
        bounds.push(changes.len());
        let count = u32::try_from(bounds.len() - 1).unwrap_or(u32::MAX);
        let mut bodies = Vec::with_capacity(bounds.len() - 1);
        for (k, w) in bounds.windows(2).enumerate() {
            let slice = changes.get(w[0]..w[1]).unwrap_or_default();
            let (pages_k, zones_k) = if k == 0 {
                (&listed[..], zones_in_journal)
            } else {
                (&[][..], None)
            };
            bodies.push(codec::to_blob(&(all, &meta, zones_k, pages_k, slice))?);
        }
        let mut tag = crc32fast::Hasher::new();
        for b in &bodies {
            tag.update(b);
        }
        let tag = tag.finalize();
        let mut journal_parts = Vec::with_capacity(bodies.len());
        for (k, body) in bodies.into_iter().enumerate() {
            let mut blob = codec::to_blob(&(WIRE_VERSION, k as u32, count, tag))?;
            blob.extend_from_slice(&body);
            journal_parts.push(blob);
        }
        let journal_pages: usize = journal_parts
            .iter()
            .map(|b| b.len().div_ceil(per_page).max(1))
            .sum();
        // Admission's bound (`check_journal`) is an upper bound of every journal: checked in
        // every test build, so the property tests exercise it on every save.
        debug_assert!(
            journal_pages as u64
                <= journal_pages_bound(
                    self.placement.records() as u64,
                    self.placement.placed_bytes,
                    self.placement.removed_stored,
                    self.zones_bytes,
                    layout.record_pages,
                    self.limits.page_bytes,
                ),
            "journal of {journal_pages} pages over admission's bound"
        );
        if journal_pages > layout.journal.len() as usize {
            return Err(CodecError::TooLarge {
                len: journal_parts.iter().map(Vec::len).sum(),
                capacity: codec::capacity(layout.journal, page_size),
            }
            .into());
        }
        let meta_blob = codec::to_blob(&meta)?;
        for (part, blob) in [(layout.meta, &meta_blob)]
            .into_iter()
            .chain(zones_blob.as_ref().map(|(b, _)| (layout.zones, b)))
        {
            let capacity = codec::capacity(part, page_size);
            if blob.len() > capacity {
                return Err(CodecError::TooLarge {
                    len: blob.len(),
                    capacity,
                }
                .into());
            }
        }
        // Writes: the journal (its leftover pages zeroed), then the pages it describes.
        let mut at = layout.journal.first();
        for blob in &journal_parts {
            let len = u32::try_from(blob.len().div_ceil(per_page).max(1)).unwrap_or(u32::MAX);
            let part = PageRange::new(at, len)
                .ok_or_else(|| ScheduleError::Limit("journal part".into()))?;
            codec::save_blob(pages, part, BlobKind::BookJournal, blob)?;
            at = part.end();
        }
        for id in at..layout.journal.first() + self.placement.journal_len {
            pages.zero(id).map_err(CodecError::from)?;
        }
        self.placement.journal_len = at - layout.journal.first();
        codec::save_blob(pages, layout.meta, BlobKind::ScheduleBook, &meta_blob)?;
        if let Some((blob, _)) = &zones_blob {
            codec::save_blob(pages, layout.zones, BlobKind::ScheduleBook, blob)?;
        }
        // Record pages are encoded as they are written (holding every blob of a large save
        // would cost its size in memory): each fits its page by the placement's accounting
        // (`Limits::page_bytes` is at most the page size, checked above).
        for &p in &listed {
            let Some(part) = layout.record_page(p) else {
                continue;
            };
            let members = self.placement.members(p);
            if members.is_empty() {
                // A full save lists never-used pages too: zero only what holds data.
                if pages
                    .load(part.first())
                    .map_err(CodecError::from)?
                    .is_some()
                {
                    pages.zero(part.first()).map_err(CodecError::from)?;
                }
                continue;
            }
            let records: Vec<(u64, &Record)> = members
                .iter()
                .filter_map(|id| self.records.get(id).map(|r| (*id, r)))
                .collect();
            let blob = codec::to_blob(&(p, records))?;
            codec::save_blob(pages, part, BlobKind::BookRecords, &blob)?;
        }
        self.placement.zones_crc = Some(zones_crc);
        self.placement.stored_below = self.next_id;
        self.placement.saved();
        self.header_dirty = false;
        Ok(())
    }

    /// The journal stored in `layout` and the pages it spans, or `None` when there is none or
    /// it is torn (a part fails the codec's checks, does not decode, is missing, or belongs to
    /// another save: a crash hit the journal's write, and the pages still hold the save
    /// before). Store failures are errors.
    fn read_journal(
        pages: &dyn ReservedPages,
        layout: Layout,
        component: ComponentId,
    ) -> Result<Option<(Journal, u32)>, ScheduleError> {
        let torn = |why: String| {
            tracing::info!(component, reason = %why, "torn schedule book journal ignored");
            Ok(None)
        };
        let per_page = pages.page_size().saturating_sub(codec::HEADER_BYTES).max(1);
        let mut at = layout.journal.first();
        let mut head0: Option<JournalHead> = None;
        let mut merged: Option<Journal> = None;
        let mut part = 0u32;
        let mut tag = crc32fast::Hasher::new();
        loop {
            let Some(range) = PageRange::new(at, layout.journal.end().saturating_sub(at)) else {
                return torn(format!("part {part} missing"));
            };
            let blob = match codec::load_blob(pages, range, BlobKind::BookJournal) {
                Ok(Some(b)) => b,
                Ok(None) if part == 0 => return Ok(None),
                Ok(None) => return torn(format!("part {part} missing")),
                Err(e @ (CodecError::Pages(_) | CodecError::RangeOutOfStore { .. })) => {
                    return Err(e.into());
                }
                Err(e) => return torn(e.to_string()),
            };
            // The head's first byte is the writer's version: a journal of another layout is
            // refused as such, not taken for a torn one.
            if let Some(&found) = blob.first()
                && found != WIRE_VERSION
            {
                return Err(ScheduleError::UnsupportedLayout {
                    found,
                    supported: WIRE_VERSION,
                });
            }
            let Ok((head, body)) = codec::from_blob::<(JournalHead, JournalBody)>(&blob) else {
                return torn(format!("part {part} does not decode"));
            };
            let body_bytes = blob.get(JOURNAL_HEAD_BYTES..).unwrap_or_default();
            let expected = head0.unwrap_or(head);
            if head.0 != WIRE_VERSION || body.1.component != component {
                return Err(ScheduleError::Corrupt(format!(
                    "journal of version {} component {}",
                    head.0, body.1.component
                )));
            }
            if head.1 != part || head.2 != expected.2 || head.3 != expected.3 {
                return torn(format!("part {part} belongs to another save"));
            }
            head0 = Some(expected);
            let (full, meta, zones, listed, changes) = body;
            match merged.as_mut() {
                None => merged = Some((head.0, full, meta, zones, listed, changes)),
                Some(j) => j.5.extend(changes),
            }
            tag.update(body_bytes);
            at = at.saturating_add(
                u32::try_from(blob.len().div_ceil(per_page).max(1)).unwrap_or(u32::MAX),
            );
            part += 1;
            if part >= expected.2 {
                break;
            }
        }
        if head0.map(|h| h.3) != Some(tag.finalize()) {
            return torn("parts of different saves".into());
        }
        Ok(merged.map(|j| (j, at - layout.journal.first())))
    }

    /// Record page `p` as stored (empty when the page is).
    fn read_page(
        pages: &dyn ReservedPages,
        layout: Layout,
        p: u32,
    ) -> Result<Vec<(u64, Record)>, ScheduleError> {
        let Some(part) = layout.record_page(p) else {
            return Ok(Vec::new());
        };
        match codec::load::<PageBlob>(pages, part, BlobKind::BookRecords)? {
            None => Ok(Vec::new()),
            Some((at, records)) if at == p => Ok(records),
            Some((at, _)) => Err(ScheduleError::Corrupt(format!(
                "record page {p} holds page {at}"
            ))),
        }
    }

    /// The records of page `p` once `journal` is applied: the stored records the journal does
    /// not name, plus the journal's records placed on `p` (only the latter after a full save).
    /// Idempotent: the result is the same whether the stored page is old or already new.
    fn journal_page(
        pages: &dyn ReservedPages,
        layout: Layout,
        journal: &Journal,
        placed: &Placed<'_>,
        named: &BTreeSet<u64>,
        p: u32,
    ) -> Result<Vec<(u64, Record)>, ScheduleError> {
        // The stored page is read even after a full save: a damaged page is reported.
        let stored = Self::read_page(pages, layout, p)?;
        let mut out: BTreeMap<u64, Record> = if journal.1 {
            BTreeMap::new()
        } else {
            stored
                .into_iter()
                .filter(|(id, _)| !named.contains(id))
                .collect()
        };
        for (id, r) in placed.get(&p).into_iter().flatten() {
            out.insert(*id, (*r).clone());
        }
        Ok(out.into_iter().collect())
    }

    /// The journal's records by page, and every id it names.
    fn journal_index(journal: &Journal) -> (Placed<'_>, BTreeSet<u64>) {
        let mut placed: Placed<'_> = BTreeMap::new();
        let mut named = BTreeSet::new();
        for (id, change) in &journal.5 {
            named.insert(*id);
            if let Some((p, r)) = change {
                placed.entry(*p).or_default().push((*id, r));
            }
        }
        (placed, named)
    }

    /// Completes the stored journal's save in place (after a load that found one); returns the
    /// pages the journal spans (0 without one).
    fn replay_in_place(
        pages: &mut dyn ReservedPages,
        layout: Layout,
        component: ComponentId,
    ) -> Result<u32, ScheduleError> {
        let Some((journal, len)) = Self::read_journal(pages, layout, component)? else {
            return Ok(0);
        };
        let (placed, named) = Self::journal_index(&journal);
        let mut writes = Vec::new();
        for &p in &journal.4 {
            let Some(part) = layout.record_page(p) else {
                continue;
            };
            let records = Self::journal_page(pages, layout, &journal, &placed, &named, p)?;
            let blob = if records.is_empty() {
                None
            } else {
                Some(codec::to_blob(&(p, records))?)
            };
            writes.push((part, blob));
        }
        codec::save(pages, layout.meta, BlobKind::ScheduleBook, &journal.2)?;
        if let Some(zones) = &journal.3 {
            codec::save(pages, layout.zones, BlobKind::ScheduleBook, zones)?;
        }
        for (part, blob) in writes {
            match blob {
                Some(b) => codec::save_blob(pages, part, BlobKind::BookRecords, &b)?,
                None => pages.zero(part.first()).map_err(CodecError::from)?,
            }
        }
        Ok(len)
    }

    /// Reads the book stored in `range` (an empty book when nothing is stored), replaying a
    /// valid journal (a save a crash interrupted) and ignoring a torn one, validating every
    /// record against `limits` and re-parsing every cron expression. Handlers are not checked
    /// here: a record naming an unregistered handler is reported when it fires. Costs one read
    /// of every page of the range.
    ///
    /// # Errors
    /// [`ScheduleError::Codec`] (a page fails its checks: any flipped byte of the meta, zones or
    /// record pages), [`ScheduleError::Corrupt`] or [`ScheduleError::Limit`].
    pub fn load(
        component: ComponentId,
        limits: Limits,
        pages: &dyn ReservedPages,
        range: PageRange,
    ) -> Result<Self, ScheduleError> {
        let mut book = Self::new(component, limits);
        let layout = book.layout(pages, range)?;
        let corrupt = |m: String| {
            tracing::warn!(component, reason = %m, "stored schedule book rejected");
            ScheduleError::Corrupt(m)
        };
        let journal = Self::read_journal(pages, layout, component)?.map(|(j, _)| j);
        let mut journal_len = 0;
        for (i, id) in layout.journal.ids().enumerate() {
            if pages.load(id).map_err(CodecError::from)?.is_some() {
                journal_len = i as u32 + 1;
            }
        }
        book.placement.journal_len = journal_len;
        // The stored meta and zones are read even when a journal supersedes them, so that a
        // damaged page is reported.
        let stored_meta = codec::load::<Meta>(pages, layout.meta, BlobKind::ScheduleBook)?;
        let stored_zones =
            codec::load::<Vec<ZoneRules>>(pages, layout.zones, BlobKind::ScheduleBook)?;
        let meta = match &journal {
            Some(j) => Some(j.2.clone()),
            None => stored_meta,
        };
        let Some(meta) = meta else {
            // Nothing stored: every part must be empty too (a lost meta page is not a fresh
            // store).
            for id in layout.zones.ids().chain(layout.records_first..range.end()) {
                if pages.load(id).map_err(CodecError::from)?.is_some() {
                    return Err(corrupt(format!(
                        "page {id} holds data but the meta page is empty"
                    )));
                }
            }
            return Ok(book);
        };
        if meta.version != WIRE_VERSION {
            tracing::warn!(
                component,
                found = meta.version,
                supported = WIRE_VERSION,
                "stored schedule book of another layout refused"
            );
            return Err(ScheduleError::UnsupportedLayout {
                found: meta.version,
                supported: WIRE_VERSION,
            });
        }
        if meta.component != component {
            return Err(corrupt(format!(
                "version {} component {}",
                meta.version, meta.component
            )));
        }
        if meta.page_bytes != limits.page_bytes as u64 {
            return Err(corrupt(format!(
                "stored for pages of {} bytes, configured {}",
                meta.page_bytes, limits.page_bytes
            )));
        }
        if meta.zones as usize > limits.max_zones || meta.records > limits.max_schedules as u64 {
            return Err(corrupt("more zones or schedules than the limits".into()));
        }
        let zones = match journal.as_ref().and_then(|j| j.3.clone()) {
            Some(z) => z,
            None => stored_zones.ok_or_else(|| corrupt("the zones part is empty".into()))?,
        };
        if zones.len() != meta.zones as usize
            || crc32fast::hash(&codec::to_blob(&zones)?) != meta.zones_crc
        {
            return Err(corrupt("zones differ from the meta page".into()));
        }
        book.zones_bytes = codec::encoded_len(&zones)?;
        for z in zones {
            book.zones.insert(z.name().to_owned(), z);
        }
        book.placement.zones_crc = Some(meta.zones_crc);
        let (placed, named, listed) = match &journal {
            Some(j) => {
                let (placed, named) = Self::journal_index(j);
                if placed.keys().any(|&p| p >= layout.record_pages) {
                    return Err(corrupt(
                        "journal places a record past the record pages".into(),
                    ));
                }
                (placed, named, j.4.iter().copied().collect())
            }
            None => (BTreeMap::new(), BTreeSet::new(), BTreeSet::new()),
        };
        let room = book.placement.room() as usize;
        for p in 0..layout.record_pages {
            let records = match &journal {
                Some(j) if listed.contains(&p) => {
                    Self::journal_page(pages, layout, j, &placed, &named, p)?
                }
                _ => Self::read_page(pages, layout, p)?,
            };
            if book.records.len().saturating_add(records.len()) as u64 > meta.records {
                return Err(corrupt("more schedules than the meta page counts".into()));
            }
            let mut last = 0;
            let mut used = 0usize;
            for (id, rec) in records {
                if id <= last || id >= meta.next_id {
                    return Err(corrupt(format!("schedule id {id} misplaced on page {p}")));
                }
                last = id;
                let len = codec::encoded_len(&(id, &rec))?;
                used = used.saturating_add(len);
                if used > room {
                    return Err(corrupt(format!("page {p} holds more than a page's room")));
                }
                // Placed at its largest size, as `touch` does.
                let placed = Self::entry_bound(&rec.def)?;
                book.load_record(id, rec).map_err(corrupt)?;
                book.placement.load(id, p, placed).map_err(corrupt)?;
            }
        }
        if book.records.len() as u64 != meta.records {
            return Err(corrupt(format!(
                "{} schedules stored, the meta page counts {}",
                book.records.len(),
                meta.records
            )));
        }
        book.next_id = meta.next_id;
        book.placement.stored_below = meta.next_id;
        book.placement.replay_pending = journal.is_some();
        Ok(book)
    }

    fn load_record(&mut self, id: u64, rec: Record) -> Result<(), String> {
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
            .admit(&rec.def, |_| true, 0, Some(0))
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
        if let Some(c) = cron {
            self.crons.insert(id, c);
        }
        self.records.insert(id, rec);
        self.reindex(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::Principal;
    use crate::pages::MemPages;
    use crate::schedule::{Handlers, NewSchedule, ScheduleRequest};

    fn saved() -> (MemPages, PageRange, Layout) {
        let range = PageRange::new(0, 16).unwrap();
        let mut pages = MemPages::new(4_096, 16);
        let mut book = Scheduler::new(1, Limits::default());
        let mut h: Handlers<()> = Handlers::new();
        assert!(h.register("run", |_| {}));
        book.apply(
            &Principal::Host,
            ScheduleRequest::Create(NewSchedule::new("run", Timing::AfterMs(10))),
            &h,
            1,
            Some(0),
        )
        .unwrap();
        book.save(&mut pages, range).unwrap();
        assert_eq!(
            Scheduler::load(1, Limits::default(), &pages, range).unwrap(),
            book
        );
        (pages, range, Layout::of(range).unwrap())
    }

    /// Pages of layout 3 (before versions and topics) are refused with a typed error naming
    /// both versions, whether the meta page or the journal says so.
    #[test]
    fn pages_of_an_older_layout_are_refused_as_such() {
        let refused = Err(ScheduleError::UnsupportedLayout {
            found: 3,
            supported: WIRE_VERSION,
        });
        // The meta page of layout 3 (no journal).
        let (mut pages, range, layout) = saved();
        for id in layout.journal.ids() {
            pages.zero(id).unwrap();
        }
        let mut meta = codec::load::<Meta>(&pages, layout.meta, BlobKind::ScheduleBook)
            .unwrap()
            .unwrap();
        meta.version = 3;
        codec::save(&mut pages, layout.meta, BlobKind::ScheduleBook, &meta).unwrap();
        assert_eq!(
            Scheduler::load(1, Limits::default(), &pages, range),
            refused
        );
        // A journal written by layout 3 (its head's first byte).
        let (mut pages, range, layout) = saved();
        let span = PageRange::new(layout.journal.first(), 1).unwrap();
        let mut blob = codec::load_blob(&pages, span, BlobKind::BookJournal)
            .unwrap()
            .unwrap();
        blob[0] = 3;
        codec::save_blob(&mut pages, span, BlobKind::BookJournal, &blob).unwrap();
        assert_eq!(
            Scheduler::load(1, Limits::default(), &pages, range),
            refused
        );
    }
}
