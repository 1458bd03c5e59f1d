//! [`Records`]: the book's records by id, held in a slab (no allocation per record) and found
//! through a table of the ids in chunks of 64.
//!
//! Why. A tick that runs 10^4 one-shots among 10^6 records looks each up and removes it: in a
//! `BTreeMap<u64, Box<Record>>` that is a walk through the lower levels of a large tree (cache
//! misses), a node rebalance, and the freeing of the boxed record (the allocator's coalescing
//! with its neighbours, more misses). Here ids are assigned densely by the book, so they are
//! grouped in chunks of [`CHUNK`] consecutive ids: a small ordered map (one entry per chunk
//! holding a live id: 1/64 of the records, which mostly stays in the cache) leads to the chunk,
//! whose slot numbers lead to the record in the slab. A removal clears a slot and keeps the
//! slab entry for the next insert: nothing is freed per record.
//!
//! Locality. New records are appended to one of [`BUCKETS`] streams of slab pages chosen by
//! their due second, so that the records a tick runs together sit together in memory (a few
//! dense runs instead of one record per 4 KiB page; see [`Records::bucket`]).
//!
//! Determinism. Slots are local memory addresses: they never reach replicated state. Every
//! iteration is in ascending id order (the chunk map is a `BTreeMap`, a chunk's ids are
//! ascending), as with the ordered map this replaces.

use std::collections::BTreeMap;

use super::Record;
use crate::schedule::store::Locations;

/// Ids per chunk of the id table (a power of two).
const CHUNK: usize = 64;
/// Bits of an id selecting its place within its chunk.
const CHUNK_BITS: u32 = CHUNK.trailing_zeros();
/// Slots per page of the slab (pages are never reallocated: inserting never moves records).
const SLAB_PAGE: usize = 1024;
/// Bits of a slot selecting its place within its slab page.
const SLAB_BITS: u32 = SLAB_PAGE.trailing_zeros();
/// Streams of slab pages new records are appended to, by their due second
/// ([`Records::bucket`]).
const BUCKETS: usize = 128;
/// An absent id in a chunk; as a hint ([`Records::locate`]), no slot.
pub(super) const NONE: u32 = u32::MAX;

/// The slots of up to [`CHUNK`] consecutive ids.
#[derive(Debug, Clone)]
struct Chunk {
    slots: [u32; CHUNK],
    live: u32,
}

/// One slab entry: a record, its id, the chunk naming its slot (an index into
/// [`Records::chunks`]: a removal by slot clears the id's place without searching the chunk
/// table), and where the book's placement put it (its record page and entry bytes:
/// [`Locations`], kept here so that a change finds it with the record).
#[derive(Debug, Clone)]
struct Slot {
    id: u64,
    chunk: u32,
    at: Option<(u32, u32)>,
    rec: Record,
}

/// The book's records by id (see the module documentation).
#[derive(Clone, Default)]
pub(super) struct Records {
    /// `id >> CHUNK_BITS` -> the index in `chunks` of that chunk's slots.
    table: BTreeMap<u64, u32>,
    /// The chunks `table` names; an emptied chunk is listed in `free_chunks` for reuse.
    chunks: Vec<Chunk>,
    /// Chunks no `table` entry names, reused last freed first.
    free_chunks: Vec<u32>,
    /// Pages of [`SLAB_PAGE`] slots; `None` is a free slot.
    slab: Vec<Vec<Option<Slot>>>,
    /// Free slots, reused last freed first (still warm in the cache).
    free: Vec<u32>,
    /// The slab page each bucket appends new records to ([`Self::bucket`]; `NONE`: none
    /// yet; empty until the first append).
    open: Vec<u32>,
    len: usize,
}

impl Records {
    /// How many records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot_of(&self, id: u64) -> Option<u32> {
        let &c = self.table.get(&(id >> CHUNK_BITS))?;
        let s = self.chunks.get(c as usize)?.slots[(id as usize) & (CHUNK - 1)];
        (s != NONE).then_some(s)
    }

    /// The slot holding record `id`: `hint` when it holds it (a slot found earlier, by
    /// [`Self::warm`]), else looked up in the chunk table. The hint is checked, never
    /// trusted: a slab entry holds record `id` exactly when `id`'s chunk names its slot (an
    /// insert fills both, a removal clears both), so a stale hint (the record removed, its
    /// slot reused) or a wrong one costs only the lookup.
    pub fn locate(&self, id: u64, hint: u32) -> Option<u32> {
        if self.entry(hint).is_some_and(|e| e.id == id) {
            return Some(hint);
        }
        self.slot_of(id)
    }

    fn entry(&self, slot: u32) -> Option<&Slot> {
        let s = slot as usize;
        self.slab
            .get(s >> SLAB_BITS)?
            .get(s & (SLAB_PAGE - 1))?
            .as_ref()
    }

    fn entry_mut(&mut self, slot: u32) -> Option<&mut Option<Slot>> {
        let s = slot as usize;
        self.slab
            .get_mut(s >> SLAB_BITS)?
            .get_mut(s & (SLAB_PAGE - 1))
    }

    /// Record `id`.
    pub fn get(&self, id: &u64) -> Option<&Record> {
        let slot = self.slot_of(*id)?;
        self.entry(slot).map(|e| &e.rec)
    }

    /// Record `id`, found through `hint` ([`Self::locate`]).
    pub fn get_at(&self, id: u64, hint: u32) -> Option<&Record> {
        self.entry(self.locate(id, hint)?).map(|e| &e.rec)
    }

    /// Record `id`, to change it.
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut Record> {
        let slot = self.slot_of(*id)?;
        self.entry_mut(slot)?.as_mut().map(|e| &mut e.rec)
    }

    /// Whether record `id` is held.
    pub fn contains_key(&self, id: &u64) -> bool {
        self.slot_of(*id).is_some()
    }

    /// Holds `rec` as record `id`; returns the record it replaces.
    pub fn insert(&mut self, id: u64, rec: Record) -> Option<Record> {
        if let Some(slot) = self.slot_of(id)
            && let Some(Some(e)) = self.entry_mut(slot)
        {
            return Some(std::mem::replace(&mut e.rec, rec));
        }
        let key = id >> CHUNK_BITS;
        let chunk = match self.table.get(&key) {
            Some(&c) => c,
            None => {
                let empty = Chunk {
                    slots: [NONE; CHUNK],
                    live: 0,
                };
                let c = match self.free_chunks.pop() {
                    Some(c) => {
                        if let Some(slot) = self.chunks.get_mut(c as usize) {
                            *slot = empty;
                        }
                        c
                    }
                    None => {
                        self.chunks.push(empty);
                        // As for slots: more chunks than u32 can count cannot be reached.
                        u32::try_from(self.chunks.len() - 1).unwrap_or(NONE - 1)
                    }
                };
                self.table.insert(key, c);
                c
            }
        };
        let entry = Slot {
            id,
            chunk,
            at: None,
            rec,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                if let Some(e) = self.entry_mut(slot) {
                    *e = Some(entry);
                }
                slot
            }
            None => self.append(entry)?,
        };
        if let Some(c) = self.chunks.get_mut(chunk as usize) {
            c.slots[(id as usize) & (CHUNK - 1)] = slot;
            c.live += 1;
        }
        self.len += 1;
        None
    }

    /// Which stream of slab pages a new record is appended to: its due second (a time
    /// point's, else a sequence point's) modulo [`BUCKETS`]. Records due together are then
    /// mostly on the same few slab pages, in id order, instead of one per 4 KiB page: the
    /// tick that runs them reads a few dense runs of memory (fewer TLB and cache misses).
    /// Local memory only: a slot never reaches replicated state.
    fn bucket(rec: &Record) -> usize {
        let n = match rec.next {
            Some(crate::due::Due::Time(t)) => t.div_euclid(1_000).rem_euclid(BUCKETS as i64) as u64,
            Some(crate::due::Due::Seq(s)) => s,
            None => 0,
        };
        (n % BUCKETS as u64) as usize
    }

    /// Appends `entry` to the slab page of its bucket ([`Self::bucket`]), opening a new page
    /// when that one is full; returns its slot.
    fn append(&mut self, entry: Slot) -> Option<u32> {
        if self.open.is_empty() {
            self.open = vec![NONE; BUCKETS];
        }
        let bucket = Self::bucket(&entry.rec);
        let open = self.open.get(bucket).copied().unwrap_or(NONE);
        let page = match self.slab.get(open as usize) {
            Some(p) if p.len() < SLAB_PAGE => open as usize,
            _ => {
                self.slab.push(Vec::with_capacity(SLAB_PAGE));
                let page = self.slab.len() - 1;
                if let Some(o) = self.open.get_mut(bucket) {
                    // Slab pages past u32::MAX cannot be reached (see below).
                    *o = u32::try_from(page).unwrap_or(NONE);
                }
                page
            }
        };
        let held = self.slab.get_mut(page)?;
        let slot = page * SLAB_PAGE + held.len();
        held.push(Some(entry));
        // A slab of more than u32::MAX - 1 slots cannot be reached (limits bound the records
        // far below); saturating keeps `NONE` out of reach.
        Some(u32::try_from(slot).unwrap_or(NONE - 1))
    }

    /// Takes record `id` out, with its location ([`Locations`]).
    pub fn remove_placed(&mut self, id: u64) -> Option<(Record, Option<(u32, u32)>)> {
        let slot = self.slot_of(id)?;
        self.unlink(id, slot);
        let taken = self.entry_mut(slot).and_then(Option::take)?;
        self.free.push(slot);
        self.len -= 1;
        Some((taken.rec, taken.at))
    }

    /// Drops record `id` where it is held (as [`Self::remove_placed`], without moving it out);
    /// returns its location ([`Locations`]) when it was held.
    #[cfg(test)]
    pub fn delete(&mut self, id: u64) -> Option<Option<(u32, u32)>> {
        self.delete_at(id, NONE)
    }

    /// [`Self::delete`], record `id` found through `hint` ([`Self::locate`]).
    pub fn delete_at(&mut self, id: u64, hint: u32) -> Option<Option<(u32, u32)>> {
        let slot = self.locate(id, hint)?;
        self.unlink(id, slot);
        let e = self.entry_mut(slot)?;
        let at = e.as_ref()?.at;
        *e = None;
        self.free.push(slot);
        self.len -= 1;
        Some(at)
    }

    /// Record `id` and its location ([`Locations`]).
    pub fn get_placed(&self, id: u64) -> Option<(&Record, Option<(u32, u32)>)> {
        self.get_placed_at(id, NONE)
    }

    /// [`Self::get_placed`], record `id` found through `hint` ([`Self::locate`]).
    pub fn get_placed_at(&self, id: u64, hint: u32) -> Option<(&Record, Option<(u32, u32)>)> {
        let e = self.entry(self.locate(id, hint)?)?;
        Some((&e.rec, e.at))
    }

    /// Every `(id, record, location)`, ascending by id.
    pub fn iter_placed(&self) -> impl Iterator<Item = (u64, &Record, Option<(u32, u32)>)> + '_ {
        self.chunks_in_order().flat_map(move |chunk| {
            chunk
                .slots
                .iter()
                .filter(|&&s| s != NONE)
                .filter_map(move |&s| self.entry(s).map(|e| (e.id, &e.rec, e.at)))
        })
    }

    /// The chunks the table names, ascending by their ids.
    fn chunks_in_order(&self) -> impl Iterator<Item = &Chunk> + '_ {
        self.table
            .values()
            .filter_map(move |&c| self.chunks.get(c as usize))
    }

    /// Clears record `id`'s place in its chunk (`slot`: where the slab holds it; the entry
    /// names its chunk, so no chunk table search), dropping the chunk from the table when it
    /// empties. The slab entry is the caller's to clear.
    fn unlink(&mut self, id: u64, slot: u32) {
        let Some(c) = self.entry(slot).map(|e| e.chunk) else {
            return;
        };
        let Some(chunk) = self.chunks.get_mut(c as usize) else {
            return;
        };
        chunk.slots[(id as usize) & (CHUNK - 1)] = NONE;
        chunk.live -= 1;
        if chunk.live == 0 {
            self.table.remove(&(id >> CHUNK_BITS));
            self.free_chunks.push(c);
        }
    }

    /// Every `(id, record)`, ascending by id.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &Record)> + '_ {
        self.chunks_in_order().flat_map(move |chunk| {
            chunk
                .slots
                .iter()
                .filter(|&&s| s != NONE)
                .filter_map(move |&s| self.entry(s).map(|e| (&e.id, &e.rec)))
        })
    }

    /// Every id, ascending.
    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// Every record, ascending by id.
    pub fn values(&self) -> impl Iterator<Item = &Record> + '_ {
        self.iter().map(|(_, r)| r)
    }

    /// Reads where each of `ids` is held (its chunk, its record's first fields, its handler
    /// name), changing nothing, so that the lookups that follow find them in the cache;
    /// returns a value derived from what was read (for `black_box`). Each step is one pass
    /// over all of `ids`: the reads of a pass do not depend on each other, so their cache
    /// misses overlap instead of following each other along each record's chain.
    ///
    /// `pages` gets each record's page (`u32::MAX` when it is not placed), for the
    /// placement's own read-ahead ([`Placement::warm_pages`](crate::schedule::store::Placement::warm_pages));
    /// `slots` gets each record's slot (a hint for [`Self::locate`]: the step that follows
    /// finds the record without searching the chunk table again).
    pub fn warm(&self, ids: &[u64], pages: &mut [u32], slots: &mut [u32]) -> usize {
        let mut seen = 0usize;
        for ((group, pages), slots) in ids
            .chunks(WARM_GROUP)
            .zip(pages.chunks_mut(WARM_GROUP))
            .zip(slots.chunks_mut(WARM_GROUP))
        {
            // The chunks first (one walk along the chunk table: [`ChunkWalk`]), then their
            // slots: loads of a short loop, many in flight at once.
            let mut chunks: [Option<&Chunk>; WARM_GROUP] = [None; WARM_GROUP];
            let mut walk = ChunkWalk::new(&self.table);
            for (chunk, id) in chunks.iter_mut().zip(group) {
                *chunk = walk
                    .find(id >> CHUNK_BITS)
                    .and_then(|c| self.chunks.get(c as usize));
            }
            for ((slot, chunk), id) in slots.iter_mut().zip(chunks).zip(group) {
                *slot = chunk.map_or(NONE, |c| c.slots[(*id as usize) & (CHUNK - 1)]);
            }
            let mut names: [&[u8]; WARM_GROUP] = [&[]; WARM_GROUP];
            for ((name, &slot), page) in names.iter_mut().zip(&*slots).zip(pages.iter_mut()) {
                *page = u32::MAX;
                if let Some(e) = self.entry(slot) {
                    seen += lines_of(&e.rec);
                    *name = e.rec.def.handler.as_bytes();
                    if let Some((p, _)) = e.at {
                        *page = p;
                    }
                }
            }
            for name in names {
                seen += usize::from(name.first().copied().unwrap_or(0));
            }
        }
        seen
    }
}

impl Locations for Records {
    fn loc(&self, id: u64) -> Option<(u32, u32)> {
        self.entry(self.slot_of(id)?)?.at
    }

    fn set_loc(&mut self, id: u64, at: Option<(u32, u32)>) {
        if let Some(slot) = self.slot_of(id)
            && let Some(Some(e)) = self.entry_mut(slot)
        {
            e.at = at;
        }
    }
}

/// Ids [`Records::warm`] reads per pass.
const WARM_GROUP: usize = 32;

/// Steps [`ChunkWalk::find`] takes along the chunk table before it searches instead.
const WALK_STEPS: usize = 8;

/// Lookups of chunk numbers in the chunk table, for numbers mostly ascending and close
/// together (a tick's due ids at one due point are ascending): each lookup continues from the
/// previous one along the table's order, a few steps of an iterator, instead of a search from
/// the root (~40% of the read-ahead's instructions before). A number lower than the
/// previous one, or farther than [`WALK_STEPS`] entries ahead, is searched for. Every answer
/// is the table's own (`table.get`).
struct ChunkWalk<'a> {
    table: &'a BTreeMap<u64, u32>,
    /// The table from the last number looked up on (none before the first lookup).
    at: Option<std::iter::Peekable<std::collections::btree_map::Range<'a, u64, u32>>>,
    /// The last number looked up.
    last: u64,
}

impl<'a> ChunkWalk<'a> {
    fn new(table: &'a BTreeMap<u64, u32>) -> Self {
        Self {
            table,
            at: None,
            last: 0,
        }
    }

    /// What the table holds for chunk number `c`.
    fn find(&mut self, c: u64) -> Option<u32> {
        if c >= self.last
            && let Some(at) = &mut self.at
        {
            for _ in 0..WALK_STEPS {
                match at.peek().map(|&(&k, &v)| (k, v)) {
                    Some((k, _)) if k < c => {
                        at.next();
                    }
                    Some((k, v)) if k == c => {
                        self.last = c;
                        return Some(v);
                    }
                    _ => {
                        self.last = c;
                        return None;
                    }
                }
            }
        }
        let mut at = self.table.range(c..).peekable();
        let found = match at.peek().map(|&(&k, &v)| (k, v)) {
            Some((k, v)) if k == c => Some(v),
            _ => None,
        };
        self.at = Some(at);
        self.last = c;
        found
    }
}

/// Reads one scalar of each of `rec`'s fields, so that every cache line of the record is
/// loaded (a record spans several: a step reads its priority, timing, due points, run state,
/// owner and key, and a one-shot's run moves the whole record out of the slab); returns a
/// value derived from them (for `black_box`). The loads are independent of each other, so
/// their misses overlap.
fn lines_of(rec: &Record) -> usize {
    let d = &rec.def;
    let flags = [
        d.key.is_some(),
        d.timing.is_one_shot(),
        matches!(d.misfire, super::Misfire::Skip),
        d.payload.is_empty(),
        d.topic.is_some(),
        d.kind.is_some(),
        rec.paused,
        rec.next.is_some(),
        rec.owed.is_some(),
        rec.parked,
        rec.policy.pause_on_failure,
        rec.retry.is_some(),
        rec.dead.is_empty(),
        rec.history.is_empty(),
        rec.manual.pending(),
        rec.bounds.max_runs.is_some(),
        rec.retired.is_some(),
        rec.overlap.is_some(),
        matches!(rec.owner, crate::authz::Principal::Host),
    ];
    let words = [
        d.handler.len(),
        usize::from(d.priority),
        d.jitter_ms as usize,
        rec.runs as usize,
        rec.version as usize,
        rec.dead_evicted as usize,
        rec.counters.fired as usize,
        rec.counters.expired as usize,
    ];
    flags.iter().map(|&f| usize::from(f)).sum::<usize>() + words.iter().sum::<usize>()
}

impl<'a> IntoIterator for &'a Records {
    type Item = (&'a u64, &'a Record);
    type IntoIter = Box<dyn Iterator<Item = (&'a u64, &'a Record)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl PartialEq for Records {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Records {}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NewSchedule, RunPolicy, Timing};
    use super::*;
    use crate::authz::Principal;
    use crate::due::Due;
    use proptest::prelude::*;

    fn rec(tag: u64) -> Record {
        Record::new(
            super::super::Def::new(
                NewSchedule::new("h", Timing::At(Due::Time(tag as i64))),
                &mut super::super::HandlerNames::default(),
            ),
            Some(Due::Time(tag as i64)),
            Principal::Host,
            RunPolicy::default(),
        )
    }

    proptest! {
        /// Any sequence of inserts, removals and location changes leaves the same records and
        /// locations, in the same order, as an ordered map of (record, location) given the
        /// same sequence.
        #[test]
        fn behaves_as_an_ordered_map(
            ops in prop::collection::vec((0u8..5, 0u64..400, any::<u32>()), 0..600)
        ) {
            let mut ours = Records::default();
            let mut model: BTreeMap<u64, (Record, Option<(u32, u32)>)> = BTreeMap::new();
            // Slots the read-ahead reported, some stale by now (their record removed, the
            // slot reused): hints as the tick keeps them.
            let mut hints: Vec<u32> = vec![NONE];
            for (k, (op, id, pick)) in ops.into_iter().enumerate() {
                // Spread ids over several chunks, some far apart.
                let id = if id % 7 == 0 { id << 20 } else { id };
                match op {
                    0 => {
                        let r = rec(k as u64);
                        // A replaced record keeps its location.
                        let old = match model.get_mut(&id) {
                            Some(e) => Some(std::mem::replace(&mut e.0, r.clone())),
                            None => {
                                model.insert(id, (r.clone(), None));
                                None
                            }
                        };
                        prop_assert_eq!(ours.insert(id, r), old);
                    }
                    1 => prop_assert_eq!(ours.remove_placed(id), model.remove(&id)),
                    2 => prop_assert_eq!(ours.delete(id), model.remove(&id).map(|(_, at)| at)),
                    3 => {
                        // Through a hint: any slot seen so far, or a wrong one.
                        let hint = hints[pick as usize % hints.len()];
                        let hint = if pick % 5 == 0 { pick } else { hint };
                        prop_assert_eq!(ours.get_at(id, hint), model.get(&id).map(|e| &e.0));
                        prop_assert_eq!(
                            ours.get_placed_at(id, hint),
                            model.get(&id).map(|e| (&e.0, e.1))
                        );
                        prop_assert_eq!(
                            ours.delete_at(id, hint),
                            model.remove(&id).map(|(_, at)| at)
                        );
                    }
                    _ => {
                        let at = (k % 3 != 0).then_some((k as u32, id as u32));
                        ours.set_loc(id, at);
                        if let Some(e) = model.get_mut(&id) {
                            e.1 = at;
                        }
                    }
                }
                prop_assert_eq!(ours.len(), model.len());
                prop_assert_eq!(ours.get(&id), model.get(&id).map(|e| &e.0));
                prop_assert_eq!(ours.loc(id), model.get(&id).and_then(|e| e.1));
                prop_assert_eq!(ours.get_placed(id), model.get(&id).map(|e| (&e.0, e.1)));
                prop_assert_eq!(ours.contains_key(&id), model.contains_key(&id));
                let (mut page, mut slot) = ([0], [NONE]);
                ours.warm(&[id], &mut page, &mut slot);
                if model.contains_key(&id) {
                    prop_assert_eq!(ours.locate(id, NONE), Some(slot[0]));
                    hints.push(slot[0]);
                } else {
                    prop_assert_eq!(slot[0], NONE);
                }
            }
            prop_assert!(ours.iter().eq(model.iter().map(|(id, e)| (id, &e.0))));
            prop_assert!(ours.iter_placed().eq(model.iter().map(|(id, e)| (*id, &e.0, e.1))));
            // The read-ahead reports each record's page.
            let ids: Vec<u64> = model.keys().copied().chain([u64::MAX]).collect();
            let mut pages = vec![0; ids.len()];
            let mut slots = vec![0; ids.len()];
            ours.warm(&ids, &mut pages, &mut slots);
            for (id, page) in ids.iter().zip(&pages) {
                let want = model.get(id).and_then(|e| e.1).map_or(u32::MAX, |(p, _)| p);
                prop_assert_eq!(*page, want);
            }
            // And its slot, which finds the record.
            for (id, slot) in ids.iter().zip(&slots) {
                prop_assert_eq!(ours.get_at(*id, *slot), model.get(id).map(|e| &e.0));
            }
            if let Some((&id, _)) = model.iter().next()
                && let (Some(a), Some(b)) = (ours.get_mut(&id), model.get_mut(&id))
            {
                a.runs = 9;
                b.0.runs = 9;
            }
            prop_assert!(ours.values().eq(model.values().map(|e| &e.0)));
            prop_assert!(ours.keys().eq(model.keys()));
            prop_assert_eq!(ours.clone(), ours);
        }

        /// The read-ahead's chunk walk answers every lookup as the table does, whatever the
        /// order of the numbers (ascending runs close together, far jumps, going back).
        #[test]
        fn a_chunk_walk_answers_as_the_table(
            table in prop::collection::btree_map(0u64..300, any::<u32>(), 0..120),
            steps in prop::collection::vec((0u8..4, 0u64..40), 0..200),
        ) {
            let mut walk = ChunkWalk::new(&table);
            let mut c = 0u64;
            for (how, by) in steps {
                c = match how {
                    0 | 1 => c + by % 4,
                    2 => c + by * 8,
                    _ => c.saturating_sub(by),
                };
                prop_assert_eq!(walk.find(c), table.get(&c).copied(), "chunk {}", c);
            }
        }

        /// The read-ahead reports each id's slot, for ids in any order (repeated, absent,
        /// ascending as a tick's): the slot that holds it, or none.
        #[test]
        fn the_read_ahead_finds_every_slot(
            ids in prop::collection::btree_set(0u64..5_000, 0..300),
            asks in prop::collection::vec(0u64..5_200, 0..64),
            ascending in any::<bool>(),
        ) {
            let mut ours = Records::default();
            for &id in &ids {
                ours.insert(id, rec(id));
            }
            let mut asks = asks;
            if ascending {
                asks.sort_unstable();
            }
            let mut pages = vec![0; asks.len()];
            let mut slots = vec![0; asks.len()];
            ours.warm(&asks, &mut pages, &mut slots);
            for (id, slot) in asks.iter().zip(&slots) {
                let want = ours.locate(*id, NONE).unwrap_or(NONE);
                prop_assert_eq!(*slot, want);
                prop_assert_eq!(want != NONE, ids.contains(id));
            }
        }
    }
}
