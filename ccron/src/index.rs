//! The due index: entries whose rule is a known schedule, ordered by (due, position).
//!
//! A tick at agreed time `t` only visits the index range `..= (t, u32::MAX)`, so it costs
//! O(due · log n) instead of one rule call per entry. The order (due, position) is canonical,
//! so replicas agree on it without sorting, and positions break ties.
//!
//! Only time-keyed schedules exist today (periodic). A later kind keyed on the sequence number
//! ("due at seq S") gets a second ordered set keyed by `(seq, position)` and is merged the same
//! way: [`DueIndex::due_at`] returns candidates and the table re-sorts them into position order.

use std::collections::{BTreeMap, BTreeSet};

use crate::tick::TimeMs;

/// Positions keyed by the agreed time at which they are next due.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DueIndex {
    by_time: BTreeSet<(TimeMs, u32)>,
    key_of: BTreeMap<u32, TimeMs>,
}

impl DueIndex {
    /// Sets (or moves) `position` to be due at `due_ms`.
    pub(crate) fn set(&mut self, position: u32, due_ms: TimeMs) {
        if let Some(old) = self.key_of.insert(position, due_ms) {
            if old == due_ms {
                return;
            }
            let removed = self.by_time.remove(&(old, position));
            debug_assert!(removed, "index out of sync at position {position}");
        }
        self.by_time.insert((due_ms, position));
    }

    /// Removes `position` from the index (nothing if absent).
    pub(crate) fn remove(&mut self, position: u32) {
        if let Some(old) = self.key_of.remove(&position) {
            let removed = self.by_time.remove(&(old, position));
            debug_assert!(removed, "index out of sync at position {position}");
        }
    }

    /// The due key of `position`, if indexed.
    pub(crate) fn key(&self, position: u32) -> Option<TimeMs> {
        self.key_of.get(&position).copied()
    }

    /// Appends to `out` every position due at or before `now_ms`, in (due, position) order.
    pub(crate) fn due_at(&self, now_ms: TimeMs, out: &mut Vec<u32>) {
        out.extend(self.by_time.range(..=(now_ms, u32::MAX)).map(|(_, p)| *p));
    }

    /// The earliest due time, if any entry is indexed.
    pub(crate) fn next_due(&self) -> Option<TimeMs> {
        self.by_time.first().map(|(t, _)| *t)
    }

    /// How many positions are indexed.
    pub(crate) fn len(&self) -> usize {
        self.key_of.len()
    }

    /// Checks that the two views agree; returns a description of the first mismatch.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.by_time.len() != self.key_of.len() {
            return Err(format!(
                "index has {} keys but {} ordered entries",
                self.key_of.len(),
                self.by_time.len()
            ));
        }
        for (t, p) in &self.by_time {
            if self.key_of.get(p) != Some(t) {
                return Err(format!("ordered entry ({t}, {p}) has no matching key"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_range_is_inclusive_and_ordered_by_due_then_position() {
        let mut ix = DueIndex::default();
        ix.set(5, 100);
        ix.set(1, 200);
        ix.set(3, 100);
        ix.set(9, TimeMs::MIN);
        let mut out = Vec::new();
        ix.due_at(100, &mut out);
        assert_eq!(out, vec![9, 3, 5]);
        ix.set(3, 300);
        ix.remove(9);
        out.clear();
        ix.due_at(250, &mut out);
        assert_eq!(out, vec![5, 1]);
        assert_eq!(ix.next_due(), Some(100));
        assert_eq!(ix.len(), 3);
        ix.check().unwrap();
    }
}
