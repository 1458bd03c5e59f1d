//! The due index: indexed entries in buckets, one bucket per due point.
//!
//! Entries live in the table's slab under a dense slot number; the index keeps, per due point
//! (a time or a sequence number), the bucket of `(position, slot)` pairs due then, and per slot
//! where in which bucket it sits. A tick at agreed time `t` and sequence number `s` takes the
//! buckets of the ranges `..= Time(t)` and `Seq(0) ..= Seq(s)` whole: one ordered-map step per
//! due *point*, not per entry. Re-keying an entry is O(1) (an append to the bucket of its new
//! due point, found through a one-entry cache when consecutive entries share it, as a cohort of
//! entries with the same period and phase does), and removing one is a swap-remove in its
//! bucket. So a tick that fires k of n entries costs O(k + due points · log points), with no
//! per-entry ordered-map churn; the table sorts the k candidates by position (the firing
//! order). Nothing here reaches replicated state: the order inside a bucket is an artefact of
//! the operations, and the table only ever sorts or counts it.

use std::collections::BTreeMap;

use crate::due::Due;
use crate::tick::{Tick, TimeMs};

/// A slot that is not in any bucket.
const DETACHED: (u32, u32) = (u32::MAX, u32::MAX);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bucket {
    due: Option<Due>,
    /// `(position, slot)` of the entries due at `due`.
    members: Vec<(u32, u32)>,
}

/// Slots keyed by the point at which they are next due.
///
/// The table derives each slot's key from the entry's stored next due point
/// (`Schedule::due_key`); `CronTable::check_invariants` checks that the two agree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DueIndex {
    /// Due point -> bucket number.
    keys: BTreeMap<Due, u32>,
    buckets: Vec<Bucket>,
    /// Bucket numbers free for reuse.
    free_buckets: Vec<u32>,
    /// Per slot: (bucket, index in the bucket), or [`DETACHED`].
    at: Vec<(u32, u32)>,
    /// Slots in a bucket.
    len: usize,
    /// How many slots are keyed by sequence numbers: an idle tick skips that range when none is.
    seq_keys: usize,
    /// The last bucket appended to (its due point and number): a cohort's entries re-key to the
    /// same point one after the other.
    last: Option<(Due, u32)>,
}

impl DueIndex {
    /// The bucket of `due`, created when absent.
    fn bucket_for(&mut self, due: Due) -> u32 {
        if let Some((d, b)) = self.last
            && d == due
        {
            return b;
        }
        let b = match self.keys.get(&due) {
            Some(b) => *b,
            None => {
                let b = match self.free_buckets.pop() {
                    Some(b) => b,
                    None => {
                        self.buckets.push(Bucket::default());
                        u32::try_from(self.buckets.len() - 1).unwrap_or(u32::MAX)
                    }
                };
                if let Some(bucket) = self.buckets.get_mut(b as usize) {
                    bucket.due = Some(due);
                }
                self.keys.insert(due, b);
                b
            }
        };
        self.last = Some((due, b));
        b
    }

    /// Indexes `slot` (holding `position`) at `due`; it must not be indexed yet.
    pub(crate) fn insert(&mut self, slot: u32, position: u32, due: Due) {
        let s = slot as usize;
        if self.at.len() <= s {
            self.at.resize(s + 1, DETACHED);
        }
        debug_assert_eq!(self.at[s], DETACHED, "slot {slot} indexed twice");
        let b = self.bucket_for(due);
        let Some(bucket) = self.buckets.get_mut(b as usize) else {
            return;
        };
        let i = u32::try_from(bucket.members.len()).unwrap_or(u32::MAX);
        bucket.members.push((position, slot));
        self.at[s] = (b, i);
        self.len += 1;
        self.seq_keys += usize::from(due.seq().is_some());
    }

    /// Removes `slot` from its bucket (nothing when it is not indexed).
    pub(crate) fn remove(&mut self, slot: u32) {
        let Some(&(b, i)) = self.at.get(slot as usize) else {
            return;
        };
        if (b, i) == DETACHED {
            return;
        }
        self.at[slot as usize] = DETACHED;
        let Some(bucket) = self.buckets.get_mut(b as usize) else {
            return;
        };
        let i = i as usize;
        if i >= bucket.members.len() {
            debug_assert!(false, "slot {slot} points past its bucket");
            return;
        }
        bucket.members.swap_remove(i);
        if let Some(&(_, moved)) = bucket.members.get(i)
            && let Some(m) = self.at.get_mut(moved as usize)
        {
            m.1 = i as u32;
        }
        let due = bucket.due;
        let empty = bucket.members.is_empty();
        self.len -= 1;
        if let Some(due) = due {
            self.seq_keys -= usize::from(due.seq().is_some());
            if empty {
                self.release(b, due);
            }
        }
    }

    /// Frees the (empty) bucket `b` of `due`.
    fn release(&mut self, b: u32, due: Due) {
        self.keys.remove(&due);
        if let Some(bucket) = self.buckets.get_mut(b as usize) {
            bucket.due = None;
        }
        self.free_buckets.push(b);
        if self.last.is_some_and(|(_, lb)| lb == b) {
            self.last = None;
        }
    }

    /// Moves `slot` from `old` to `new`; a slot taken out by [`Self::take_due`] is indexed at
    /// `new`.
    pub(crate) fn move_key(&mut self, slot: u32, position: u32, old: Due, new: Due) {
        if self.is_detached(slot) {
            self.insert(slot, position, new);
        } else if old != new {
            self.remove(slot);
            self.insert(slot, position, new);
        }
    }

    /// Indexes `slot` at `due` when [`Self::take_due`] took it out (an entry that did not run).
    pub(crate) fn restore(&mut self, slot: u32, position: u32, due: Due) {
        if self.is_detached(slot) {
            self.insert(slot, position, due);
        }
    }

    fn is_detached(&self, slot: u32) -> bool {
        self.at.get(slot as usize).is_none_or(|&at| at == DETACHED)
    }

    /// Whether `slot` is indexed at `due`.
    pub(crate) fn contains(&self, slot: u32, due: Due) -> bool {
        match self.at.get(slot as usize) {
            Some(&(b, i)) if (b, i) != DETACHED => self.buckets.get(b as usize).is_some_and(|k| {
                k.due == Some(due) && k.members.get(i as usize).is_some_and(|m| m.1 == slot)
            }),
            _ => false,
        }
    }

    /// Takes out every slot whose key `tick` has reached and appends its `(position, slot)` to
    /// `out` (time keys only when the tick carries time). The caller re-indexes each one
    /// ([`Self::move_key`] or [`Self::restore`]) before the index is used otherwise.
    pub(crate) fn take_due(&mut self, tick: &Tick, out: &mut Vec<(u32, u32)>) {
        if let Some(now_ms) = tick.agreed_time_ms {
            self.take_range(Due::Time(TimeMs::MIN), Due::Time(now_ms), out);
        }
        if self.seq_keys > 0 {
            self.take_range(Due::Seq(0), Due::Seq(tick.bft_sequence_num), out);
        }
    }

    fn take_range(&mut self, from: Due, to: Due, out: &mut Vec<(u32, u32)>) {
        loop {
            let Some((&due, &b)) = self.keys.range(from..=to).next() else {
                return;
            };
            self.keys.remove(&due);
            let Some(bucket) = self.buckets.get_mut(b as usize) else {
                return;
            };
            bucket.due = None;
            let n = bucket.members.len();
            for &(position, slot) in &bucket.members {
                if let Some(at) = self.at.get_mut(slot as usize) {
                    *at = DETACHED;
                }
                out.push((position, slot));
            }
            bucket.members.clear();
            self.len -= n;
            if due.seq().is_some() {
                self.seq_keys -= n;
            }
            self.free_buckets.push(b);
            if self.last.is_some_and(|(_, lb)| lb == b) {
                self.last = None;
            }
        }
    }

    /// The earliest due time among time-keyed slots.
    pub(crate) fn next_time(&self) -> Option<TimeMs> {
        self.keys.first_key_value().and_then(|(d, _)| d.time_ms())
    }

    /// The earliest due sequence number among sequence-keyed slots.
    pub(crate) fn next_seq(&self) -> Option<u64> {
        self.keys
            .range(Due::Seq(0)..)
            .next()
            .and_then(|(d, _)| d.seq())
    }

    /// How many slots are indexed.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Checks the index's own bookkeeping; returns a description of the first mismatch.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut len = 0;
        let mut seq_keys = 0;
        let mut seen = vec![false; self.at.len()];
        for (due, &b) in &self.keys {
            let bucket = self
                .buckets
                .get(b as usize)
                .ok_or_else(|| format!("bucket {b} of {due:?} missing"))?;
            if bucket.due != Some(*due) {
                return Err(format!(
                    "bucket {b} is keyed {due:?}, says {:?}",
                    bucket.due
                ));
            }
            if bucket.members.is_empty() {
                return Err(format!("empty bucket {b} at {due:?}"));
            }
            for (i, &(_, slot)) in bucket.members.iter().enumerate() {
                if self.at.get(slot as usize) != Some(&(b, i as u32)) {
                    return Err(format!("slot {slot} misplaced in bucket {b}"));
                }
                if std::mem::replace(&mut seen[slot as usize], true) {
                    return Err(format!("slot {slot} indexed twice"));
                }
            }
            len += bucket.members.len();
            if due.seq().is_some() {
                seq_keys += bucket.members.len();
            }
        }
        if len != self.len {
            return Err(format!("{len} slots indexed, count says {}", self.len));
        }
        if seq_keys != self.seq_keys {
            return Err(format!(
                "{seq_keys} sequence keys, count says {}",
                self.seq_keys
            ));
        }
        let attached = self.at.iter().filter(|a| **a != DETACHED).count();
        if attached != len {
            return Err(format!("{attached} slots attached, {len} in buckets"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(ix: &mut DueIndex, tick: &Tick) -> Vec<u32> {
        let mut out = Vec::new();
        ix.take_due(tick, &mut out);
        let mut positions: Vec<u32> = out.iter().map(|p| p.0).collect();
        positions.sort_unstable();
        positions
    }

    #[test]
    fn due_ranges_are_inclusive_and_take_out_what_they_return() {
        let mut ix = DueIndex::default();
        // Slot s holds position 10 + s.
        ix.insert(5, 15, Due::Time(100));
        ix.insert(1, 11, Due::Time(200));
        ix.insert(3, 13, Due::Time(100));
        ix.insert(9, 19, Due::Time(TimeMs::MIN));
        ix.insert(4, 14, Due::Seq(7));
        ix.insert(2, 12, Due::Seq(8));
        ix.check().unwrap();
        assert_eq!(ix.next_time(), Some(TimeMs::MIN));
        assert_eq!(ix.next_seq(), Some(7));
        assert_eq!(
            taken(&mut ix, &Tick::new(1, 7, Some(100))),
            vec![13, 14, 15, 19]
        );
        assert_eq!(ix.len(), 2);
        // Taken slots are re-indexed by the caller.
        ix.move_key(3, 13, Due::Time(100), Due::Time(300));
        ix.restore(5, 15, Due::Time(100));
        ix.move_key(4, 14, Due::Seq(7), Due::Seq(9));
        ix.check().unwrap();
        assert!(ix.contains(3, Due::Time(300)));
        assert!(ix.contains(5, Due::Time(100)));
        assert!(!ix.contains(9, Due::Time(TimeMs::MIN)), "slot 9 stays out");
        assert_eq!(
            taken(&mut ix, &Tick::new(1, 8, None)),
            vec![12],
            "no time: only sequence keys"
        );
        ix.restore(2, 12, Due::Seq(8));
        ix.remove(1);
        ix.remove(1);
        ix.check().unwrap();
        assert_eq!(ix.len(), 4);
        assert_eq!(ix.next_time(), Some(100));
        assert_eq!(taken(&mut ix, &Tick::new(1, 0, Some(250))), vec![15]);
        ix.restore(5, 15, Due::Time(100));
        ix.remove(4);
        ix.remove(2);
        ix.check().unwrap();
        assert!(taken(&mut ix, &Tick::new(1, u64::MAX, None)).is_empty());
        assert_eq!(ix.next_seq(), None);
    }

    #[test]
    fn removal_inside_a_bucket_keeps_the_others_findable() {
        let mut ix = DueIndex::default();
        for s in 0..10 {
            ix.insert(s, s * 2, Due::Time(5));
        }
        ix.remove(0);
        ix.remove(5);
        ix.remove(9);
        ix.check().unwrap();
        for s in [1, 2, 3, 4, 6, 7, 8] {
            assert!(ix.contains(s, Due::Time(5)), "slot {s}");
        }
        ix.move_key(3, 6, Due::Time(5), Due::Time(6));
        ix.check().unwrap();
        assert_eq!(
            taken(&mut ix, &Tick::new(1, 0, Some(5))),
            vec![2, 4, 8, 12, 14, 16]
        );
        assert_eq!(ix.len(), 1);
        ix.check().unwrap();
    }
}
