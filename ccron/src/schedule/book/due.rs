//! [`DueIndex`]: the due index, (inverted priority, due key, id) of every active record with a
//! next due point, as an ordered set whose front a tick takes off in one piece.
//!
//! Why. A 1%-due tick of 10^6 one-shots takes 10^4 entries, all at the front of the index (the
//! highest priority level in use, its reached time keys), and each of its runs removes its
//! entry. Removed one by one from a B-tree of 10^6 entries, each removal walks the tree and
//! rebalances it (node merges, their copies and frees). Here the tick splits them off the tree
//! at once ([`DueIndex::take_front`]: a `split_off`, O(log n) and the entries taken) into a
//! sorted vector where a removal clears a flag; the entries still flagged when the tick ends
//! (schedules the budget or a full outbox held back, or put back by a failed run) return to
//! the tree ([`DueIndex::put_back`]).
//!
//! A tick's runs look their entries up in the order the tick listed them: a cursor, one past
//! the last taken entry removed, answers that lookup with one comparison ([`DueIndex::find`]),
//! where a binary search over 10^4 entries cost two searches per run (~5,000 instructions:
//! a third of the tick's). Any other lookup searches as before: the cursor is a hint, and
//! every answer is the same with or without it.
//!
//! The set every method sees is the tree's entries and the vector's flagged ones (a key is in
//! one or the other, never both), at all times: what a handler's request reads during the tick
//! (admission's slot capacity, the earliest due time) is what the single tree gave.
//!
//! Determinism. Only ordered collections; nothing depends on addresses.

use std::collections::BTreeSet;
use std::ops::{Bound, RangeBounds};

use crate::due::Due;

/// A due index entry: (255 - priority, due key, id).
pub(super) type DueKey = (u8, Due, u64);

/// The due index (see the module documentation).
#[derive(Debug, Clone, Default)]
pub(super) struct DueIndex {
    /// The entries a tick has not taken.
    tree: BTreeSet<DueKey>,
    /// The entries [`Self::take_front`] split off the tree, ascending, each with whether it
    /// is still in the index (`false`: removed since).
    taken: Vec<(DueKey, bool)>,
    /// How many of `taken` are still in the index.
    held: usize,
    /// Where in `taken` the next lookup is expected: one past the last entry removed from
    /// it (a tick's runs remove their entries in the order it listed them, ascending). A
    /// hint only: [`Self::find`] compares the entry there before it answers from it.
    cursor: usize,
    /// Lookups into `taken` the cursor did not answer (binary searches), for the tests.
    #[cfg(test)]
    searches: std::cell::Cell<usize>,
}

impl DueIndex {
    /// Where `k` is in `taken` (`Err` when it is not there: then it can only be in the tree):
    /// at the cursor without a search when it is there (a tick's runs in their order),
    /// else by a binary search when within the taken entries' bounds.
    fn find(&self, k: &DueKey) -> Result<usize, ()> {
        if self.taken.get(self.cursor).is_some_and(|(e, _)| e == k) {
            return Ok(self.cursor);
        }
        match (self.taken.first(), self.taken.last()) {
            (Some((first, _)), Some((last, _))) if first <= k && k <= last => {
                #[cfg(test)]
                self.searches.set(self.searches.get() + 1);
                self.taken
                    .binary_search_by(|(e, _)| e.cmp(k))
                    .map_err(|_| ())
            }
            _ => Err(()),
        }
    }

    /// Whether `k` is in the index.
    pub fn contains(&self, k: &DueKey) -> bool {
        match self.find(k) {
            Ok(i) => self.taken[i].1,
            Err(_) => self.tree.contains(k),
        }
    }

    /// Adds `k`; returns whether it was not there.
    pub fn insert(&mut self, k: DueKey) -> bool {
        match self.find(&k) {
            Ok(i) => {
                let held = &mut self.taken[i].1;
                if *held {
                    return false;
                }
                *held = true;
                self.held += 1;
                true
            }
            Err(_) => self.tree.insert(k),
        }
    }

    /// Removes `k`; returns whether it was there.
    pub fn remove(&mut self, k: &DueKey) -> bool {
        match self.find(k) {
            Ok(i) => {
                let held = &mut self.taken[i].1;
                if !*held {
                    return false;
                }
                *held = false;
                self.held -= 1;
                self.cursor = i + 1;
                true
            }
            Err(_) => self.tree.remove(k),
        }
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.tree.len() + self.held
    }

    /// Every entry, ascending.
    pub fn iter(&self) -> impl Iterator<Item = &DueKey> + '_ {
        self.range(..)
    }

    /// The entries within `range`, ascending.
    pub fn range<R: RangeBounds<DueKey> + Clone>(
        &self,
        range: R,
    ) -> impl Iterator<Item = &DueKey> + '_ {
        let lo = match range.start_bound() {
            Bound::Included(k) => self.taken.partition_point(|(e, _)| e < k),
            Bound::Excluded(k) => self.taken.partition_point(|(e, _)| e <= k),
            Bound::Unbounded => 0,
        };
        let hi = match range.end_bound() {
            Bound::Included(k) => self.taken.partition_point(|(e, _)| e <= k),
            Bound::Excluded(k) => self.taken.partition_point(|(e, _)| e < k),
            Bound::Unbounded => self.taken.len(),
        };
        let taken = self
            .taken
            .get(lo..hi.max(lo))
            .unwrap_or_default()
            .iter()
            .filter(|(_, held)| *held)
            .map(|(k, _)| k);
        Merged {
            a: self.tree.range(range).peekable(),
            b: taken.peekable(),
        }
    }

    /// Splits every entry up to `last` (inclusive) off the tree into the taken entries at
    /// once (still in the index): for a tick about to remove them, `last` the last of the
    /// entries it listed from the index's front. Entries taken before are put back first.
    pub fn take_front(&mut self, last: &DueKey) {
        self.put_back();
        let rest = match self
            .tree
            .range((Bound::Excluded(*last), Bound::Unbounded))
            .next()
            .copied()
        {
            Some(next) => self.tree.split_off(&next),
            None => BTreeSet::new(),
        };
        let front = std::mem::replace(&mut self.tree, rest);
        self.taken.extend(front.into_iter().map(|k| (k, true)));
        self.held = self.taken.len();
        self.cursor = 0;
    }

    /// Returns the taken entries still in the index to the tree (the end of a tick).
    pub fn put_back(&mut self) {
        for (k, held) in self.taken.drain(..) {
            if held {
                self.tree.insert(k);
            }
        }
        self.held = 0;
        self.cursor = 0;
    }
}

/// Two ascending iterators over disjoint entries, merged ascending.
struct Merged<A: Iterator, B: Iterator> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<'a, A, B> Iterator for Merged<A, B>
where
    A: Iterator<Item = &'a DueKey>,
    B: Iterator<Item = &'a DueKey>,
{
    type Item = &'a DueKey;

    fn next(&mut self) -> Option<&'a DueKey> {
        match (self.a.peek(), self.b.peek()) {
            (Some(x), Some(y)) if y < x => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = DueKey> {
        (
            0u8..3,
            prop_oneof![(0i64..20).prop_map(Due::Time), (0u64..5).prop_map(Due::Seq)],
            0u64..30,
        )
    }

    proptest! {
        /// Any sequence of inserts, removals and front takes and put-backs leaves the same
        /// entries as one ordered set given the same inserts and removals, and every query
        /// answers as it does.
        #[test]
        fn behaves_as_one_ordered_set(
            ops in prop::collection::vec((0u8..8, key(), key()), 0..300)
        ) {
            let mut ours = DueIndex::default();
            let mut model: BTreeSet<DueKey> = BTreeSet::new();
            for (op, k, other) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(ours.insert(k), model.insert(k)),
                    2 => prop_assert_eq!(ours.remove(&k), model.remove(&k)),
                    3 => ours.take_front(&k),
                    4 => ours.put_back(),
                    // A tick's run: the taken entry at the cursor (the next in the tick's
                    // order) looked up and removed, or looked up and held back, or a key
                    // next to it (another of the record's keys).
                    _ => {
                        let at = ours.taken.get(ours.cursor).map(|(e, _)| *e);
                        let near = ours.cursor.checked_sub(1).and_then(|i| ours.taken.get(i));
                        for q in [at, near.map(|(e, _)| *e)].into_iter().flatten() {
                            prop_assert_eq!(ours.contains(&q), model.contains(&q));
                        }
                        if let (5 | 6, Some(q)) = (op, at) {
                            prop_assert_eq!(ours.remove(&q), model.remove(&q));
                            prop_assert_eq!(ours.remove(&q), model.remove(&q));
                            prop_assert_eq!(ours.insert(q), model.insert(q));
                            prop_assert_eq!(ours.contains(&q), model.contains(&q));
                            if op == 5 {
                                prop_assert_eq!(ours.remove(&q), model.remove(&q));
                            }
                        }
                    }
                }
                prop_assert_eq!(ours.contains(&k), model.contains(&k));
                prop_assert_eq!(ours.len(), model.len());
                let (lo, hi) = if k <= other { (k, other) } else { (other, k) };
                prop_assert!(ours.range(lo..=hi).eq(model.range(lo..=hi)));
                prop_assert!(ours.range(lo..hi).eq(model.range(lo..hi)));
                prop_assert!(ours
                    .range((Bound::Excluded(lo), Bound::Unbounded))
                    .eq(model.range((Bound::Excluded(lo), Bound::Unbounded))));
                prop_assert!(ours.iter().eq(model.iter()));
            }
            ours.put_back();
            prop_assert!(ours.taken.is_empty());
            prop_assert!(ours.tree == model);
        }

        /// A tick's pattern, twice: the front taken, then each taken entry looked up and
        /// removed in order (the runs), some held back (the budget, a full outbox: still in
        /// the index) and some inserted again (due again at once): the entries are the
        /// model's, and the cursor answers the lookups in order without a search (a tick in
        /// which every run leaves searches nothing; each entry held back or inserted again
        /// costs at most two searches).
        #[test]
        fn a_tick_in_order_searches_nothing(
            keys in prop::collection::btree_set(key(), 1..200),
            cut in any::<prop::sample::Index>(),
            fates in prop::collection::vec(0u8..8, 1..200),
            more in prop::collection::btree_set(key(), 0..50),
        ) {
            let mut ours = DueIndex::default();
            let mut model: BTreeSet<DueKey> = BTreeSet::new();
            for round in [&keys, &more] {
                for &k in round {
                    prop_assert_eq!(ours.insert(k), model.insert(k));
                }
                // The first round always holds keys; every one may have left in it.
                if model.is_empty() {
                    continue;
                }
                let Some(&last) = model.iter().nth(cut.index(model.len())) else {
                    continue;
                };
                ours.take_front(&last);
                let front: Vec<DueKey> = model.range(..=last).copied().collect();
                prop_assert_eq!(ours.taken.len(), front.len());
                ours.searches.set(0);
                let mut kept = 0;
                for (k, &fate) in front.iter().zip(fates.iter().cycle()) {
                    prop_assert!(ours.contains(k));
                    match fate {
                        0 => kept += 1,
                        1 => {
                            prop_assert!(ours.remove(k));
                            prop_assert!(ours.insert(*k));
                            kept += 1;
                        }
                        _ => {
                            prop_assert!(ours.remove(k));
                            model.remove(k);
                        }
                    }
                }
                prop_assert!(
                    ours.searches.get() <= 2 * kept,
                    "{} searches for {} entries, {} kept",
                    ours.searches.get(),
                    front.len(),
                    kept
                );
                prop_assert!(ours.iter().eq(model.iter()));
                prop_assert_eq!(ours.len(), model.len());
                ours.put_back();
                prop_assert!(ours.tree == model);
            }
        }
    }
}
