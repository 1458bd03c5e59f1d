//! [`Overlap::CancelOther`](crate::schedule::Overlap::CancelOther) on table entries: which
//! runs a host no longer awaits.
//!
//! A table pass reads "no result yet" from a [`PendingResults`] view: which entries have an
//! emitted record without a result. A cancellation must make the cancelled run's records stop
//! counting, and only those: the pass reports it ([`Diversion::Cancelled`]) with a *mark*, the
//! outbox index the run that cancelled it gave (or would have given) its first record; every
//! record the entry emitted at an index below the mark belongs to a cancelled run (outbox
//! indices grow with every append and are never reused, whatever the entry's schedule, so the
//! mark holds across replaced entries and restarts). The host keeps the marks as replicated
//! state ([`CancelledRuns`]: `CronLedger` digests and snapshots them) and reads results
//! through them ([`CancelledRuns::view`]): the next pass awaits the new run only.
//!
//! A cancelled run's records stay in the outbox (as the book's: a replica cannot know whether
//! a worker holds one): they are delivered, and a late result for one is applied to the
//! outbox as any other, which changes nothing for the entry (it is below the mark: it neither
//! counts as the new run's result nor makes the entry await again). `CronLedger` traces it.

use std::collections::{BTreeMap, BTreeSet};

use crate::entry::{Diversion, EntryDiverted, PendingResults};
use crate::outbox::{OccurrenceId, Origin, Outbox};
use crate::tick::ComponentId;

/// What [`Overlap::CancelOther`](crate::schedule::Overlap::CancelOther) did to one table
/// entry, replicated: how many of its runs were cancelled, and the mark of the last
/// cancellation (its records at outbox indices below it are not awaited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EntryCancels {
    /// Runs cancelled ([`Diversion::Cancelled`] reports).
    pub cancelled: u64,
    /// The highest mark reported: the entry's records below this outbox index belong to
    /// cancelled runs.
    pub mark: u64,
}

/// The cancellations of table entries, by `(component, position)`: what a host keeps (as
/// replicated state: a function of the ticks' outcomes) so that its outbox view
/// ([`CancelledRuns::view`]) awaits only the runs nothing cancelled. Empty until an entry
/// under [`Overlap::CancelOther`](crate::schedule::Overlap::CancelOther) cancels a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelledRuns {
    entries: BTreeMap<(ComponentId, u32), EntryCancels>,
}

impl CancelledRuns {
    /// Nothing cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no run was ever cancelled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries that cancelled a run.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The cancellations of entry `(component, position)`, if it cancelled a run.
    pub fn get(&self, component: ComponentId, position: u32) -> Option<EntryCancels> {
        self.entries.get(&(component, position)).copied()
    }

    /// Every entry that cancelled a run, ascending `(component, position)`.
    pub fn iter(&self) -> impl Iterator<Item = ((ComponentId, u32), EntryCancels)> + '_ {
        self.entries.iter().map(|(k, v)| (*k, *v))
    }

    /// Records the cancellations among `diverted` (a pass of `component`'s table,
    /// [`crate::TickOutcome::diverted`]); returns how many there were. A mark never moves
    /// back (the highest one stays).
    pub fn note(&mut self, component: ComponentId, diverted: &[EntryDiverted]) -> usize {
        let mut n = 0;
        for d in diverted {
            if let Diversion::Cancelled { mark } = d.what {
                let e = self.entries.entry((component, d.position)).or_default();
                e.cancelled = e.cancelled.saturating_add(1);
                e.mark = e.mark.max(mark);
                n += 1;
            }
        }
        n
    }

    /// Sets entry `(component, position)`'s cancellations (a restore): `false`, and nothing
    /// changes, when it has some already or `cancels` counts none (no entry holds a mark
    /// without a cancellation: one state, one form).
    pub fn insert(&mut self, component: ComponentId, position: u32, cancels: EntryCancels) -> bool {
        if cancels.cancelled == 0 || self.entries.contains_key(&(component, position)) {
            return false;
        }
        self.entries.insert((component, position), cancels);
        true
    }

    /// Whether the table record at outbox index `index` with id `id` belongs to a run its
    /// entry cancelled (below the entry's mark). Records of other origins never do.
    pub fn covers(&self, index: u64, id: &OccurrenceId) -> bool {
        if id.origin() != Origin::Table {
            return false;
        }
        let Ok(position) = u32::try_from(id.emitter()) else {
            return false;
        };
        self.get(id.component, position)
            .is_some_and(|c| index < c.mark)
    }

    /// `outbox` read through these cancellations: an entry awaits a result when a record it
    /// emitted has none and belongs to no cancelled run. With nothing cancelled it answers
    /// exactly as the outbox itself.
    pub fn view<'a>(&'a self, outbox: &'a Outbox) -> MarkedOutbox<'a> {
        MarkedOutbox {
            outbox,
            cancels: self,
        }
    }
}

/// An outbox read through a host's [`CancelledRuns`] ([`CancelledRuns::view`]): the view a
/// table pass with entries under
/// [`Overlap::CancelOther`](crate::schedule::Overlap::CancelOther) needs.
#[derive(Debug, Clone, Copy)]
pub struct MarkedOutbox<'a> {
    outbox: &'a Outbox,
    cancels: &'a CancelledRuns,
}

/// O(held records), as the outbox's own view.
impl PendingResults for MarkedOutbox<'_> {
    fn awaiting(&self, component: ComponentId, out: &mut BTreeSet<u32>) {
        if self.cancels.is_empty() {
            return self.outbox.awaiting(component, out);
        }
        for (index, record) in self.outbox.iter() {
            let id = record.id;
            if id.component == component
                && id.origin() == Origin::Table
                && !self.outbox.has_result(index)
                && !self.cancels.covers(index, &id)
                && let Ok(position) = u32::try_from(id.emitter())
            {
                out.insert(position);
            }
        }
    }

    fn append_index(&self) -> Option<u64> {
        Some(self.outbox.next_index())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::due::Due;
    use crate::outbox::{OutboxLimits, OutboxRecord};

    fn table_record(component: ComponentId, position: u64, occurrence: u64) -> OutboxRecord {
        let id = OccurrenceId::emitted(component, Origin::Table, position, occurrence, 0).unwrap();
        OutboxRecord::new(id, "job", b"x".to_vec())
    }

    fn cancelled(position: u32, mark: u64) -> EntryDiverted {
        EntryDiverted {
            position,
            due: Due::Time(0),
            what: Diversion::Cancelled { mark },
        }
    }

    #[test]
    fn records_below_the_mark_are_not_awaited() {
        let mut outbox = Outbox::new(OutboxLimits::default());
        let first = outbox.append(table_record(3, 7, 1)).unwrap();
        let second = outbox.append(table_record(3, 7, 2)).unwrap();
        let other = outbox.append(table_record(3, 8, 1)).unwrap();
        let mut runs = CancelledRuns::new();
        let awaiting = |runs: &CancelledRuns, outbox: &Outbox| {
            let mut out = BTreeSet::new();
            runs.view(outbox).awaiting(3, &mut out);
            out
        };
        assert_eq!(awaiting(&runs, &outbox), BTreeSet::from([7, 8]));
        // Nothing cancelled: the outbox's own answer.
        assert_eq!(runs.view(&outbox).append_index(), Some(outbox.next_index()));
        assert_eq!(runs.note(3, &[cancelled(7, second)]), 1);
        assert!(runs.covers(first, &table_record(3, 7, 1).id));
        assert!(!runs.covers(second, &table_record(3, 7, 2).id));
        assert!(!runs.covers(other, &table_record(3, 8, 1).id));
        assert_eq!(awaiting(&runs, &outbox), BTreeSet::from([7, 8]));
        // A later cancellation moves the mark past the second run; a lower one never moves
        // it back.
        runs.note(3, &[cancelled(7, second + 1), cancelled(7, first)]);
        assert_eq!(
            runs.get(3, 7),
            Some(EntryCancels {
                cancelled: 3,
                mark: second + 1
            })
        );
        assert_eq!(awaiting(&runs, &outbox), BTreeSet::from([8]));
        // Another component's entry at the same position is not covered.
        assert!(!runs.covers(first, &table_record(4, 7, 1).id));
        let book = OccurrenceId::new(3, 7, 1);
        assert!(!runs.covers(first, &book));
        // A restore takes one state per entry, never an empty one.
        let mut restored = CancelledRuns::new();
        assert!(!restored.insert(3, 7, EntryCancels::default()));
        assert!(restored.insert(3, 7, runs.get(3, 7).unwrap()));
        assert!(!restored.insert(3, 7, runs.get(3, 7).unwrap()));
        assert_eq!(restored, runs);
    }
}
