//! The due index: indexed entries ordered by (due point, position).
//!
//! A tick at agreed time `t` and sequence number `s` visits only the ranges `..= (Time(t), MAX)`
//! and `(Seq(0), 0) ..= (Seq(s), MAX)`, so it costs O(due · log n) instead of one rule call per
//! entry. The order (due, position) is canonical, so replicas agree on it without sorting.
//! Any [`Schedule`](crate::due::Schedule) kind keyed on time or on sequence numbers plugs in
//! without touching this module; the table merges the candidates into position order.

use std::collections::BTreeSet;

use crate::due::Due;
use crate::tick::{Tick, TimeMs};

/// Positions keyed by the point at which they are next due.
///
/// The index does not remember each position's key: the table derives it from the entry's
/// stored next due point (`Schedule::due_key`) and passes it in, which saves one ordered-map
/// update per fire. `CronTable::check_invariants` checks that the two agree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DueIndex {
    ordered: BTreeSet<(Due, u32)>,
    /// How many keys are sequence numbers: an idle tick skips the sequence range when none is.
    seq_keys: usize,
}

impl DueIndex {
    /// Indexes `position` at `due` (it must not be indexed yet).
    pub(crate) fn insert(&mut self, position: u32, due: Due) {
        let fresh = self.ordered.insert((due, position));
        debug_assert!(fresh, "position {position} indexed twice at {due:?}");
        self.seq_keys += usize::from(due.seq().is_some());
    }

    /// Removes `position`, currently indexed at `due`.
    pub(crate) fn remove(&mut self, position: u32, due: Due) {
        let removed = self.ordered.remove(&(due, position));
        debug_assert!(removed, "position {position} was not indexed at {due:?}");
        if removed {
            self.seq_keys -= usize::from(due.seq().is_some());
        }
    }

    /// Moves `position` from `old` to `new`.
    pub(crate) fn move_key(&mut self, position: u32, old: Due, new: Due) {
        if old != new {
            self.remove(position, old);
            self.insert(position, new);
        }
    }

    /// Whether `position` is indexed at `due`.
    pub(crate) fn contains(&self, position: u32, due: Due) -> bool {
        self.ordered.contains(&(due, position))
    }

    /// Appends to `out` every position whose key `tick` has reached: time keys in (time,
    /// position) order (only when the tick carries time), then sequence keys likewise.
    pub(crate) fn due_at(&self, tick: &Tick, out: &mut Vec<u32>) {
        if let Some(now_ms) = tick.agreed_time_ms {
            let range = (Due::Time(TimeMs::MIN), 0)..=(Due::Time(now_ms), u32::MAX);
            out.extend(self.ordered.range(range).map(|(_, p)| *p));
        }
        if self.seq_keys > 0 {
            let range = (Due::Seq(0), 0)..=(Due::Seq(tick.bft_sequence_num), u32::MAX);
            out.extend(self.ordered.range(range).map(|(_, p)| *p));
        }
    }

    /// The earliest due time among time-keyed positions.
    pub(crate) fn next_time(&self) -> Option<TimeMs> {
        self.ordered.first().and_then(|(d, _)| d.time_ms())
    }

    /// The earliest due sequence number among sequence-keyed positions.
    pub(crate) fn next_seq(&self) -> Option<u64> {
        self.ordered
            .range((Due::Seq(0), 0)..)
            .next()
            .and_then(|(d, _)| d.seq())
    }

    /// How many positions are indexed.
    pub(crate) fn len(&self) -> usize {
        self.ordered.len()
    }

    /// Checks the index's own bookkeeping; returns a description of the first mismatch.
    pub(crate) fn check(&self) -> Result<(), String> {
        let seq_keys = self
            .ordered
            .iter()
            .filter(|(d, _)| d.seq().is_some())
            .count();
        if seq_keys != self.seq_keys {
            return Err(format!(
                "{seq_keys} sequence keys, count says {}",
                self.seq_keys
            ));
        }
        let mut positions = BTreeSet::new();
        for (_, p) in &self.ordered {
            if !positions.insert(*p) {
                return Err(format!("position {p} indexed twice"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_ranges_are_inclusive_and_ordered_by_due_then_position() {
        let mut ix = DueIndex::default();
        ix.insert(5, Due::Time(100));
        ix.insert(1, Due::Time(200));
        ix.insert(3, Due::Time(100));
        ix.insert(9, Due::Time(TimeMs::MIN));
        ix.insert(4, Due::Seq(7));
        ix.insert(2, Due::Seq(8));
        let mut out = Vec::new();
        ix.due_at(&Tick::new(1, 7, Some(100)), &mut out);
        assert_eq!(out, vec![9, 3, 5, 4]);
        out.clear();
        ix.due_at(&Tick::new(1, 8, None), &mut out);
        assert_eq!(out, vec![4, 2], "no time: only sequence keys");
        ix.move_key(3, Due::Time(100), Due::Time(300));
        ix.remove(9, Due::Time(TimeMs::MIN));
        out.clear();
        ix.due_at(&Tick::new(1, 0, Some(250)), &mut out);
        assert_eq!(out, vec![5, 1]);
        assert_eq!(ix.next_time(), Some(100));
        assert_eq!(ix.next_seq(), Some(7));
        assert_eq!(ix.len(), 5);
        assert!(ix.contains(3, Due::Time(300)));
        ix.check().unwrap();
        ix.remove(4, Due::Seq(7));
        ix.remove(2, Due::Seq(8));
        out.clear();
        ix.due_at(&Tick::new(1, u64::MAX, None), &mut out);
        assert!(out.is_empty());
        assert_eq!(ix.next_seq(), None);
    }
}
