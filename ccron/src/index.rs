//! The due index: indexed entries ordered by (due point, position).
//!
//! A tick at agreed time `t` and sequence number `s` visits only the ranges `..= (Time(t), MAX)`
//! and `(Seq(0), 0) ..= (Seq(s), MAX)`, so it costs O(due · log n) instead of one rule call per
//! entry. The order (due, position) is canonical, so replicas agree on it without sorting.
//! Any [`Schedule`](crate::due::Schedule) kind keyed on time or on sequence numbers plugs in
//! without touching this module; the table merges the candidates into position order.

use std::collections::{BTreeMap, BTreeSet};

use crate::due::Due;
use crate::tick::{Tick, TimeMs};

/// Positions keyed by the point at which they are next due.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DueIndex {
    ordered: BTreeSet<(Due, u32)>,
    key_of: BTreeMap<u32, Due>,
    /// How many keys are sequence numbers: an idle tick skips the sequence range when none is.
    seq_keys: usize,
}

impl DueIndex {
    /// Sets (or moves) `position` to be due at `due`.
    pub(crate) fn set(&mut self, position: u32, due: Due) {
        if let Some(old) = self.key_of.insert(position, due) {
            if old == due {
                return;
            }
            let removed = self.ordered.remove(&(old, position));
            debug_assert!(removed, "index out of sync at position {position}");
            self.seq_keys -= usize::from(old.seq().is_some());
        }
        self.seq_keys += usize::from(due.seq().is_some());
        self.ordered.insert((due, position));
    }

    /// Removes `position` from the index (nothing if absent).
    pub(crate) fn remove(&mut self, position: u32) {
        if let Some(old) = self.key_of.remove(&position) {
            let removed = self.ordered.remove(&(old, position));
            debug_assert!(removed, "index out of sync at position {position}");
            self.seq_keys -= usize::from(old.seq().is_some());
        }
    }

    /// The due key of `position`, if indexed.
    pub(crate) fn key(&self, position: u32) -> Option<Due> {
        self.key_of.get(&position).copied()
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
        self.key_of.len()
    }

    /// Checks that the two views agree; returns a description of the first mismatch.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.ordered.len() != self.key_of.len() {
            return Err(format!(
                "index has {} keys but {} ordered entries",
                self.key_of.len(),
                self.ordered.len()
            ));
        }
        for (d, p) in &self.ordered {
            if self.key_of.get(p) != Some(d) {
                return Err(format!("ordered entry ({d:?}, {p}) has no matching key"));
            }
        }
        let seq_keys = self.key_of.values().filter(|d| d.seq().is_some()).count();
        if seq_keys != self.seq_keys {
            return Err(format!(
                "{seq_keys} sequence keys, count says {}",
                self.seq_keys
            ));
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
        ix.set(5, Due::Time(100));
        ix.set(1, Due::Time(200));
        ix.set(3, Due::Time(100));
        ix.set(9, Due::Time(TimeMs::MIN));
        ix.set(4, Due::Seq(7));
        ix.set(2, Due::Seq(8));
        let mut out = Vec::new();
        ix.due_at(&Tick::new(1, 7, Some(100)), &mut out);
        assert_eq!(out, vec![9, 3, 5, 4]);
        out.clear();
        ix.due_at(&Tick::new(1, 8, None), &mut out);
        assert_eq!(out, vec![4, 2], "no time: only sequence keys");
        ix.set(3, Due::Time(300));
        ix.remove(9);
        out.clear();
        ix.due_at(&Tick::new(1, 0, Some(250)), &mut out);
        assert_eq!(out, vec![5, 1]);
        assert_eq!(ix.next_time(), Some(100));
        assert_eq!(ix.next_seq(), Some(7));
        assert_eq!(ix.len(), 5);
        ix.check().unwrap();
    }
}
