//! Page layout and record placement of the schedule book's persistence (book layout 7: the
//! book's instance of the record log, `crate::record_log`, shared with the cron tables; the
//! same layout of the range as layouts 2 to 6, which `book/legacy.rs` reads).
//! The placement ([`Placement`], [`FreeTree`]) is shared with the cron tables' record pages
//! (`crate::table_store`).
//!
//! Why record pages. The first layout kept the records in 16 multi-page shard blobs, so one
//! changed record rewrote a sixteenth of the book (65-86 ms at 10^6 schedules). Here each record
//! lives in exactly one *record page*, a single-page [`crate::codec`] blob holding the page's
//! number and its records ascending by id, and is rewritten only by a fold.
//!
//! Placement. A record goes to the lowest-numbered page whose free room fits it, found in
//! O(log P) through a max-free segment tree ([`FreeTree`]). Free room is a function of the page's
//! contents only (the exact encoded size of its records), so a replica that restarted or
//! received the pages by state transfer rebuilds the same tree and keeps placing records where a
//! replica that never stopped does: identical operations give identical page bytes. A record
//! that grows past its page's room moves to the lowest page that fits it; a shrinking or
//! unchanged record stays. A record larger than one page is rejected at admission
//! ([`super::ScheduleError::Limit`], sized from `Limits::page_bytes`): there are no overflow
//! chains, which keeps every page write a bounded encode.
//!
//! The range. A book's range of `R` pages is cut (a pure function of `R`) into:
//! 1 commit page (version, component, next id, record count, zone summary, committed log
//! length), a zones part of `max(1, R/32)` pages (the installed zone rules, one multi-page blob,
//! written only by a fold), a log of 17/32 of the rest, and the record pages (15/32). The log is
//! a little larger than the record part so that even a save naming every record fits it.
//!
//! Commit protocol (`crate::record_log`, the book's instance in `book/persist.rs`). A save
//! appends the changed records (each a record image with its page, or a removal) and, when
//! they changed, the zones, as log segments after the committed part of the log, then rewrites
//! the commit page: the one write that decides.
//! A save after one change writes 2 pages. When the log has no room for a save, the save first
//! folds: it rewrites the record pages the committed log touched (and the zones part when the
//! log carries zones) with their committed content, read back from the pages, then commits an
//! empty log. Load gives the log priority over the record pages and the zones part, so a crash
//! at any page write reloads as the book before or after the save.

use std::collections::{BTreeSet, HashMap};

use crate::codec::HEADER_BYTES;
use crate::pages::{PageId, PageRange};
use crate::record_log::{LogSpan, Stale};

/// Bytes of a record page's blob before its records: the page number (u32) and the vector
/// length (u64, fixed-width integers).
pub(crate) const PAGE_BASE_BYTES: usize = 12;

/// Bytes of one page's blob available to records (each counted as its encoded `(id, record)`),
/// for pages of `page_bytes`.
pub(crate) fn record_room(page_bytes: usize) -> usize {
    page_bytes
        .saturating_sub(HEADER_BYTES)
        .saturating_sub(PAGE_BASE_BYTES)
}

/// Where the parts of a book's page range lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    /// The commit page.
    pub meta: PageRange,
    /// The zone rules.
    pub zones: PageRange,
    /// The change log.
    pub log: PageRange,
    /// The first record page.
    pub records_first: PageId,
    /// How many record pages.
    pub record_pages: u32,
}

impl Layout {
    /// The layout of `range`, or `None` when the range is too small (fewer than 4 pages).
    pub fn of(range: PageRange) -> Option<Self> {
        let r = range.len();
        let zones_len = (r / 32).max(1);
        let rest = r.checked_sub(1 + zones_len)?;
        // The log gets 17/32 of the rest: a change takes 5 bytes more in the log than in a
        // record page (its page number and presence tag), so a save naming every record of
        // full record pages still fits it.
        let record_pages = rest * 15 / 32;
        let journal_len = rest - record_pages;
        if journal_len == 0 || record_pages == 0 {
            return None;
        }
        let first = range.first();
        Some(Self {
            meta: PageRange::new(first, 1)?,
            zones: PageRange::new(first + 1, zones_len)?,
            log: PageRange::new(first + 1 + zones_len, journal_len)?,
            records_first: first + 1 + zones_len + journal_len,
            record_pages,
        })
    }

    /// The page id of record page `page`, if the range has it.
    pub fn record_page(&self, page: u32) -> Option<PageRange> {
        if page >= self.record_pages {
            return None;
        }
        PageRange::new(self.records_first + page, 1)
    }
}

/// A max-free segment tree over record pages: the lowest page with at least `need` free bytes
/// in O(log P). Pages past the ones in use are empty (full room); the tree doubles when every
/// leaf is in use.
#[derive(Debug, Clone)]
pub(crate) struct FreeTree {
    room: u32,
    leaves: usize,
    tree: Vec<u32>,
}

impl FreeTree {
    /// A tree whose pages each offer `room` bytes.
    pub fn new(room: u32) -> Self {
        Self {
            room,
            leaves: 1,
            tree: vec![room; 2],
        }
    }

    fn grow(&mut self) {
        let old = self.leaves;
        let leaves = old * 2;
        let mut tree = vec![self.room; 2 * leaves];
        tree[leaves..leaves + old].copy_from_slice(&self.tree[old..2 * old]);
        for i in (1..leaves).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        self.leaves = leaves;
        self.tree = tree;
    }

    /// Page `page`'s free bytes as the tree holds them (0 past its leaves); reads only.
    pub fn peek(&self, page: u32) -> u32 {
        self.tree
            .get(self.leaves.saturating_add(page as usize))
            .copied()
            .unwrap_or(0)
    }

    /// Sets page `page`'s free bytes.
    pub fn set(&mut self, page: u32, free: u32) {
        let page = page as usize;
        while page >= self.leaves {
            self.grow();
        }
        let mut i = self.leaves + page;
        self.tree[i] = free;
        while i > 1 {
            i /= 2;
            let max = self.tree[2 * i].max(self.tree[2 * i + 1]);
            // The ancestors above an unchanged node keep their values too (a tick freeing
            // 10^4 records mostly stops a few levels up instead of walking to the root).
            if self.tree[i] == max {
                break;
            }
            self.tree[i] = max;
        }
    }

    /// What [`Self::first_fit`] would return, without growing the tree (pages past the
    /// tree's leaves are empty, so the first of them fits when no leaf does).
    pub fn first_fit_within(&self, need: u32) -> u32 {
        if self.tree[1] < need {
            return u32::try_from(self.leaves).unwrap_or(u32::MAX);
        }
        let mut i = 1;
        while i < self.leaves {
            i = if self.tree[2 * i] >= need {
                2 * i
            } else {
                2 * i + 1
            };
        }
        // `i - leaves` is below `leaves`, itself at most twice the pages in use.
        u32::try_from(i - self.leaves).unwrap_or(u32::MAX)
    }

    /// The lowest page with at least `need` free bytes (`need` must not exceed the room).
    pub fn first_fit(&mut self, need: u32) -> u32 {
        while self.tree[1] < need {
            self.grow();
        }
        self.first_fit_within(need)
    }
}

/// A set of changed ids or pages, marked by appending (no tree walk per mark: a tick marks
/// 10^4 records and pages) and sorted and deduplicated only when read, so it reads exactly as
/// an ordered set of the same marks would. Duplicates are squeezed out whenever the marks
/// outgrow twice what the last squeeze left, so memory stays within a constant factor of the
/// set, whatever the number of marks between two saves.
#[derive(Debug, Clone)]
pub(crate) struct DirtySet<T> {
    marks: Vec<T>,
    /// How many leading marks are sorted and distinct.
    sorted: usize,
}

impl<T> Default for DirtySet<T> {
    fn default() -> Self {
        Self {
            marks: Vec::new(),
            sorted: 0,
        }
    }
}

impl<T: Ord + Copy> DirtySet<T> {
    /// Marks `v`.
    pub fn insert(&mut self, v: T) {
        // Marks in ascending order (ids due together are often ascending) stay sorted.
        if self.sorted == self.marks.len() && self.marks.last().is_none_or(|&l| l < v) {
            self.sorted += 1;
        } else if self.marks.len() >= 2 * self.sorted + 1_024 {
            self.squeeze();
        }
        self.marks.push(v);
    }

    /// Sorts and deduplicates the marks.
    pub fn squeeze(&mut self) {
        if self.sorted != self.marks.len() {
            self.marks.sort_unstable();
            self.marks.dedup();
            self.sorted = self.marks.len();
        }
    }

    /// Whether nothing is marked.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// The marked values, ascending and distinct (after [`Self::squeeze`]: the caller
    /// squeezes first; unsqueezed marks are a defect, caught in debug builds).
    pub fn sorted(&self) -> &[T] {
        debug_assert_eq!(self.sorted, self.marks.len(), "read before a squeeze");
        &self.marks
    }

    /// Clears the marks.
    pub fn clear(&mut self) {
        self.marks.clear();
        self.sorted = 0;
    }

    /// The marked values, ascending and distinct; leaves the set empty, keeping its buffer
    /// (the next tick marks about as many again: regrowing it from nothing each time costs a
    /// chain of reallocations inside the tick).
    pub fn take_sorted(&mut self) -> std::vec::Drain<'_, T> {
        self.squeeze();
        self.sorted = 0;
        self.marks.drain(..)
    }
}

/// Where each placed record is: id -> (page, encoded bytes of its entry). A [`Placement`] keeps
/// its own map (the cron tables) or is handed its caller's through the `*_in` methods (the
/// book keeps each record's location next to the record, read with it: no map probe per
/// change). Local memory only: never iterated, so no order reaches anything.
pub(crate) trait Locations {
    /// Record `id`'s location, if placed.
    fn loc(&self, id: u64) -> Option<(u32, u32)>;
    /// Sets (`Some`) or clears (`None`) record `id`'s location; called only for ids the
    /// caller holds.
    fn set_loc(&mut self, id: u64, at: Option<(u32, u32)>);
}

/// A placement's own locations (a fixed hasher: no randomness).
type LocMap = HashMap<u64, (u32, u32), crate::periodic::IntHash>;

impl Locations for LocMap {
    fn loc(&self, id: u64) -> Option<(u32, u32)> {
        self.get(&id).copied()
    }

    fn set_loc(&mut self, id: u64, at: Option<(u32, u32)>) {
        match at {
            Some(at) => {
                self.insert(id, at);
            }
            None => {
                self.remove(&id);
            }
        }
    }
}

/// The persistence state of a book: which page holds each record, each page's members and fill,
/// and what changed since the last save (all derived from the records; rebuilt at load).
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    room: u32,
    /// Record id -> (page, encoded bytes of its `(id, record)` entry), when the placement keeps
    /// them itself (empty when its caller keeps them: the `*_in` methods). Looked up only,
    /// never iterated (a fixed hasher: no randomness, and no order reaches anything).
    loc: LocMap,
    /// How many records are placed.
    placed: usize,
    /// Each page's record ids, ascending (kept only when `track_members`: the cron tables
    /// read them; the book needs only whether a page holds records, `used > 0`).
    members: Vec<Vec<u64>>,
    track_members: bool,
    /// Each page's used entry bytes.
    used: Vec<u32>,
    free: FreeTree,
    /// Records changed (created, updated, moved, removed) since the last save.
    pub dirty_ids: DirtySet<u64>,
    /// Pages whose content changed since the last save.
    pub dirty_pages: DirtySet<u32>,
    /// Records too large for any page (admission prevents them; a save reports them).
    pub oversize: BTreeSet<u64>,
    /// The book's committed log (after the last save, fold or load).
    pub log: LogSpan,
    /// Whether the book's record pages count for nothing yet (a migration's full save).
    pub stale: Stale,
    /// Record pages the committed log changed (the next fold rewrites them).
    pub fold_pages: BTreeSet<u32>,
    /// Whether the next fold rewrites every record page (a full save is in the log).
    pub fold_all: bool,
    /// Checksum of the zone rules' encoding as stored (`None`: nothing stored yet).
    pub zones_crc: Option<u32>,
    /// Ids below this may be on the pages (the book's next id at the last save or load); ids
    /// at or above it were created since and never stored.
    pub stored_below: u64,
    /// Sum of the placed records' entry bytes (what a log save naming every record carries).
    pub placed_bytes: u64,
    /// Records removed since the last save that were on the pages (below
    /// [`Self::stored_below`]): each is a removal the next save must log.
    pub removed_stored: u64,
}

impl Placement {
    /// Empty, for pages of `page_bytes`, keeping each page's members ([`Self::members`]).
    pub fn new(page_bytes: usize) -> Self {
        Self::with_members(page_bytes, true)
    }

    /// Empty, for pages of `page_bytes`, without each page's member list ([`Self::members`]
    /// is then always empty; [`Self::holds`] still answers): the book's placement, where a
    /// tick removes 10^4 records and the lists cost a cache miss each.
    pub fn without_members(page_bytes: usize) -> Self {
        Self::with_members(page_bytes, false)
    }

    fn with_members(page_bytes: usize, track_members: bool) -> Self {
        let room = u32::try_from(record_room(page_bytes)).unwrap_or(u32::MAX);
        Self {
            room,
            loc: HashMap::default(),
            placed: 0,
            members: Vec::new(),
            track_members,
            used: Vec::new(),
            free: FreeTree::new(room),
            dirty_ids: DirtySet::default(),
            dirty_pages: DirtySet::default(),
            oversize: BTreeSet::new(),
            log: LogSpan::default(),
            stale: Stale::No,
            fold_pages: BTreeSet::new(),
            fold_all: false,
            zones_crc: None,
            stored_below: 0,
            placed_bytes: 0,
            removed_stored: 0,
        }
    }

    /// Bytes of entries one page holds.
    pub fn room(&self) -> u32 {
        self.room
    }

    /// Pages that may hold records (one past the highest page ever used since load).
    pub fn pages_in_use(&self) -> u32 {
        u32::try_from(self.used.len()).unwrap_or(u32::MAX)
    }

    /// Whether `page` holds records (every placed entry takes at least one byte).
    pub fn holds(&self, page: u32) -> bool {
        self.used.get(page as usize).is_some_and(|&u| u > 0)
    }

    /// How many records are placed.
    pub fn records(&self) -> usize {
        self.placed
    }

    /// Runs `f` on this placement with its own locations (the methods without `_in`).
    fn own<R>(&mut self, f: impl FnOnce(&mut Self, &mut LocMap) -> R) -> R {
        let mut loc = std::mem::take(&mut self.loc);
        let out = f(self, &mut loc);
        self.loc = loc;
        out
    }

    /// The ids on `page`, ascending.
    pub fn members(&self, page: u32) -> &[u64] {
        self.members.get(page as usize).map_or(&[], Vec::as_slice)
    }

    /// The page of record `id`.
    pub fn page_of(&self, id: u64) -> Option<u32> {
        self.loc.loc(id).map(|(p, _)| p)
    }

    /// Reads what removing records on `pages` (`u32::MAX`: not placed) will touch (each
    /// page's fill and free-tree leaf, its member list when kept), changing nothing: a tight
    /// pass whose independent cache misses overlap, ahead of the removals that would take
    /// them one by one. Returns a value derived from what was read (for `black_box`).
    pub fn warm_pages(&self, pages: &[u32]) -> usize {
        let mut placed = 0usize;
        for &page in pages {
            let p = page as usize;
            placed += usize::from(
                self.members.get(p).and_then(|m| m.first()).is_some() || self.used.get(p).is_some(),
            );
            placed += self.free.peek(page) as usize;
        }
        placed
    }

    fn ensure(&mut self, page: u32) {
        let page = page as usize;
        if self.used.len() <= page {
            if self.track_members {
                self.members.resize_with(page + 1, Vec::new);
            }
            self.used.resize(page + 1, 0);
        }
    }

    /// Places record `id` (not placed) on `page`.
    fn attach(&mut self, loc: &mut impl Locations, id: u64, page: u32, len: u32) {
        self.ensure(page);
        let p = page as usize;
        if let Some(m) = self.members.get_mut(p)
            && let Err(at) = m.binary_search(&id)
        {
            m.insert(at, id);
        }
        self.used[p] = self.used[p].saturating_add(len);
        self.free.set(page, self.room.saturating_sub(self.used[p]));
        self.placed_bytes = self.placed_bytes.saturating_add(u64::from(len));
        self.placed += 1;
        loc.set_loc(id, Some((page, len)));
    }

    fn detach(&mut self, loc: &mut impl Locations, id: u64) -> Option<u32> {
        let at = loc.loc(id)?;
        loc.set_loc(id, None);
        Some(self.detach_at(id, at))
    }

    /// Frees record `id`'s room at `(page, len)` (its location, which the caller clears);
    /// returns the page.
    fn detach_at(&mut self, id: u64, (page, len): (u32, u32)) -> u32 {
        self.placed = self.placed.saturating_sub(1);
        self.placed_bytes = self.placed_bytes.saturating_sub(u64::from(len));
        let p = page as usize;
        if let Some(m) = self.members.get_mut(p)
            && let Ok(at) = m.binary_search(&id)
        {
            m.remove(at);
        }
        if let Some(u) = self.used.get_mut(p) {
            *u = u.saturating_sub(len);
            let free = self.room.saturating_sub(*u);
            self.free.set(page, free);
        }
        page
    }

    /// Records that `id`'s entry now takes `len` bytes: it stays on its page when it fits,
    /// otherwise it goes to the lowest page with room. Marks what changed.
    #[cfg(test)]
    pub fn put(&mut self, id: u64, len: usize) {
        self.own(|p, loc| p.put_in(loc, id, len));
    }

    /// Records that `id` (located through `loc`) now takes `len` bytes: it stays on its page
    /// when it fits, otherwise it goes to the lowest page with room. Marks what changed.
    pub fn put_in(&mut self, loc: &mut impl Locations, id: u64, len: usize) {
        self.dirty_ids.insert(id);
        self.place_in(loc, id, len);
    }

    /// [`Self::put_in`] without marking the id (the cron tables keep their own change list);
    /// returns the record's page, `None` when it is larger than a page (then it is in
    /// `oversize`).
    pub fn place(&mut self, id: u64, len: usize) -> Option<u32> {
        self.own(|p, loc| p.place_in(loc, id, len))
    }

    /// [`Self::place`] with the caller's locations.
    pub fn place_in(&mut self, loc: &mut impl Locations, id: u64, len: usize) -> Option<u32> {
        let Ok(len) = u32::try_from(len).map(|l| l.min(u32::MAX - 1)) else {
            return None;
        };
        if len > self.room {
            if let Some(old) = self.detach(loc, id) {
                self.dirty_pages.insert(old);
            }
            self.oversize.insert(id);
            return None;
        }
        if !self.oversize.is_empty() {
            self.oversize.remove(&id);
        }
        if let Some((page, old_len)) = loc.loc(id) {
            self.dirty_pages.insert(page);
            let used = self.used.get(page as usize).copied().unwrap_or(0);
            if used - old_len + len <= self.room {
                if old_len != len {
                    loc.set_loc(id, Some((page, len)));
                    self.placed_bytes = self
                        .placed_bytes
                        .saturating_sub(u64::from(old_len))
                        .saturating_add(u64::from(len));
                    let p = page as usize;
                    self.used[p] = used - old_len + len;
                    self.free.set(page, self.room - self.used[p]);
                }
                return Some(page);
            }
            self.detach(loc, id);
        }
        let page = self.free.first_fit(len);
        self.attach(loc, id, page, len);
        self.dirty_pages.insert(page);
        Some(page)
    }

    /// Marks `page` as changed (a record on it changed in place).
    pub fn touch(&mut self, page: u32) {
        self.dirty_pages.insert(page);
    }

    /// Whether a new entry of `need` bytes would land on a page below `max_pages` (the lowest
    /// page with room, as [`Self::put`] would choose; nothing changes).
    pub fn can_place(&self, need: usize, max_pages: u32) -> bool {
        let Ok(need) = u32::try_from(need) else {
            return false;
        };
        need <= self.room && self.free.first_fit_within(need) < max_pages
    }

    /// Whether record `id` (located through `loc`), grown or shrunk to `need` bytes, stays on
    /// its page or lands on one below `max_pages` (nothing changes).
    pub fn can_hold_in(&self, loc: &impl Locations, id: u64, need: usize, max_pages: u32) -> bool {
        if let Some((page, old_len)) = loc.loc(id)
            && let Ok(need32) = u32::try_from(need)
        {
            let used = self.used.get(page as usize).copied().unwrap_or(0);
            if used.saturating_sub(old_len).saturating_add(need32) <= self.room {
                return true;
            }
        }
        self.can_place(need, max_pages)
    }

    /// Records that `id` left the book (see [`Self::remove_at`]).
    #[cfg(test)]
    pub fn remove(&mut self, id: u64) {
        let at = self.loc.remove(&id);
        self.remove_at(id, at);
    }

    /// Records that `id` left the book from `at` (its location, `None` when not placed; the
    /// caller keeps locations and drops this one with the record). It stays marked, so the
    /// book is dirty; the log leaves out an id at or above [`Self::stored_below`], which never
    /// reached the pages.
    pub fn remove_at(&mut self, id: u64, at: Option<(u32, u32)>) {
        self.dirty_ids.insert(id);
        if !self.oversize.is_empty() {
            self.oversize.remove(&id);
        }
        if let Some(at) = at {
            let page = self.detach_at(id, at);
            if id < self.stored_below {
                self.removed_stored = self.removed_stored.saturating_add(1);
            }
            self.dirty_pages.insert(page);
        }
    }

    /// [`Self::remove`] without marking the id.
    pub fn unplace(&mut self, id: u64) {
        self.oversize.remove(&id);
        if let Some(page) = self.own(|p, loc| p.detach(loc, id)) {
            self.dirty_pages.insert(page);
        }
    }

    /// Places a record read from page `page` at load (nothing becomes dirty).
    pub fn load(&mut self, id: u64, page: u32, len: usize) -> Result<(), String> {
        self.own(|p, loc| p.load_in(loc, id, page, len))
    }

    /// [`Self::load`] with the caller's locations.
    pub fn load_in(
        &mut self,
        loc: &mut impl Locations,
        id: u64,
        page: u32,
        len: usize,
    ) -> Result<(), String> {
        let len = u32::try_from(len).map_err(|_| format!("record {id} too large"))?;
        let used = self.used.get(page as usize).copied().unwrap_or(0);
        if used.saturating_add(len) > self.room {
            return Err(format!("page {page} holds more than its room"));
        }
        if loc.loc(id).is_some() {
            return Err(format!("record {id} placed twice"));
        }
        self.attach(loc, id, page, len);
        Ok(())
    }

    /// Clears the change marks (after a successful save).
    pub fn saved(&mut self) {
        self.removed_stored = 0;
        self.dirty_ids.clear();
        self.dirty_pages.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of page updates leaves the tree answering as a plain list of each
        /// page's free bytes does (every node the max of its children, first fit the lowest
        /// page with room), and the change marks, drained between rounds, read as an ordered
        /// set of the same marks.
        #[test]
        fn free_tree_and_marks_behave_as_their_models(
            rounds in prop::collection::vec(
                prop::collection::vec((0u32..70, 0u32..=100), 0..60),
                1..6,
            ),
        ) {
            let mut tree = FreeTree::new(100);
            let mut model: Vec<u32> = Vec::new();
            let mut marks: DirtySet<u32> = DirtySet::default();
            for round in rounds {
                let mut marked = BTreeSet::new();
                for (page, free) in round {
                    tree.set(page, free);
                    if model.len() <= page as usize {
                        model.resize(page as usize + 1, 100);
                    }
                    model[page as usize] = free;
                    marks.insert(page);
                    marked.insert(page);
                }
                for i in 1..tree.leaves {
                    prop_assert_eq!(tree.tree[i], tree.tree[2 * i].max(tree.tree[2 * i + 1]));
                }
                for need in [0, 1, 30, 50, 99, 100] {
                    // Pages never set offer the whole room: the first past the model.
                    let lowest = model.iter().position(|&f| f >= need).unwrap_or(model.len());
                    prop_assert_eq!(tree.first_fit_within(need) as usize, lowest, "need {}", need);
                }
                prop_assert!(marks.take_sorted().eq(marked));
                prop_assert!(marks.is_empty());
            }
        }
    }

    #[test]
    fn first_fit_within_predicts_first_fit_without_growing() {
        let mut t = FreeTree::new(100);
        for (page, free) in [(0, 10), (1, 60), (2, 5), (3, 100), (4, 0), (5, 30)] {
            t.set(page, free);
        }
        for need in [0, 1, 10, 11, 30, 60, 61, 100] {
            let leaves = t.leaves;
            let predicted = t.first_fit_within(need);
            assert_eq!(t.leaves, leaves);
            assert_eq!(predicted, t.clone().first_fit(need), "need {need}");
        }
        // Every leaf full: the first page past the leaves.
        let mut full = FreeTree::new(100);
        full.set(0, 0);
        full.set(1, 0);
        assert_eq!(full.first_fit_within(1), 2);
        assert_eq!(full.first_fit(1), 2);
    }

    #[test]
    fn first_fit_takes_the_lowest_page_with_room_and_grows() {
        let mut t = FreeTree::new(100);
        assert_eq!(t.first_fit(100), 0);
        t.set(0, 10);
        assert_eq!(t.first_fit(11), 1);
        t.set(1, 50);
        t.set(2, 0);
        t.set(3, 0);
        assert_eq!(t.first_fit(40), 1);
        assert_eq!(t.first_fit(60), 4, "grows past the pages in use");
        t.set(4, 0);
        t.set(0, 90);
        assert_eq!(t.first_fit(60), 0, "room freed on a lower page is reused");
    }

    #[test]
    fn records_stay_move_when_they_grow_and_free_room_on_removal() {
        let mut p = Placement::new(HEADER_BYTES + PAGE_BASE_BYTES + 100);
        assert_eq!(p.room(), 100);
        p.put(1, 40);
        p.put(2, 40);
        p.put(3, 40);
        assert_eq!(
            (p.page_of(1), p.page_of(2), p.page_of(3)),
            (Some(0), Some(0), Some(1))
        );
        p.put(1, 60);
        assert_eq!(p.page_of(1), Some(0), "grew within page 0's room: stays");
        p.put(1, 61);
        assert_eq!(
            p.page_of(1),
            Some(2),
            "grew past page 0's room: moves to the lowest page that fits"
        );
        p.put(2, 30);
        assert_eq!(p.page_of(2), Some(0), "shrinks in place");
        p.remove(3);
        assert!(p.members(1).is_empty());
        p.put(4, 60);
        assert_eq!(p.page_of(4), Some(0), "room freed on page 0 is reused");
        p.put(5, 101);
        assert!(p.oversize.contains(&5) && p.page_of(5).is_none());
        assert_eq!(
            p.dirty_pages.take_sorted().collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(Layout::of(PageRange::new(0, 3).unwrap()).is_none());
        let l = Layout::of(PageRange::new(10, 70).unwrap()).unwrap();
        assert_eq!((l.zones.len(), l.log.len(), l.record_pages), (2, 36, 31));
        assert_eq!(l.record_page(30).unwrap().first(), 79);
        assert!(l.record_page(31).is_none());
    }
}
