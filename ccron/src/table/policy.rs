//! Policies of table entries evaluated inside a pass: the overlap policy
//! ([`CronEntry::with_overlap`]) and the retirement of an entry that can never run again
//! ([`crate::Schedule::retirement`]). Kept apart from the evaluation's hot path: an entry
//! without a policy costs one field test per step.
//!
//! Nothing here is persisted. "No result yet" is read from the host's outbox for each pass
//! ([`PendingResults`]), and a retirement is the stored next due point "never" read with the
//! entry's rule: both are derived from replicated state, so the table's page layout is the
//! one it was. A cancellation ([`Overlap::CancelOther`]) is reported with its mark
//! ([`Diversion::Cancelled`]); the host keeps the marks ([`crate::entry::CancelledRuns`])
//! and its view applies them to the next passes.

use std::collections::BTreeSet;

use super::{Pass, TableError, TickOutcome};
use crate::due::Due;
use crate::entry::{CronEntry, Diversion, EntryDiverted, EntryRetired, PendingResults};
use crate::schedule::Overlap;
use crate::tick::{ComponentId, TimeMs};

/// What a table's policies did, counted since the table was built (process-local, like the
/// registry's unknown ticks; the replicated record of each event is in the ticks' outcomes,
/// from which `CronLedger` keeps each entry's skips and holds as replicated counts:
/// `CronLedger::entry_counts`, and its cancellations: `CronLedger::entry_cancels`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyCounters {
    /// Entries retired ([`TickOutcome::retired`]).
    pub retired: u64,
    /// Runs an overlap policy skipped.
    pub skipped: u64,
    /// Steps [`Overlap::BufferOne`] held.
    pub held: u64,
    /// Runs [`Overlap::CancelOther`] cancelled.
    pub cancelled: u64,
    /// Passes that met a tracking entry without an outbox view ([`TableError::NoResultView`]).
    pub unviewed: u64,
}

/// A table's policy state for one pass, and its counters.
#[derive(Debug, Default)]
pub(super) struct Policies {
    /// Positions awaiting a result, read from the host's outbox for this pass (`None`: the
    /// pass was given no view).
    awaiting: Option<BTreeSet<u32>>,
    /// The index the host's outbox gives its next record, read with `awaiting`.
    append_index: Option<u64>,
    /// Positions whose run in this pass emitted records (awaited from then on).
    emitted: BTreeSet<u32>,
    /// Tracking entries due in this pass without a view.
    unviewed: BTreeSet<u32>,
    retired: Vec<EntryRetired>,
    diverted: Vec<EntryDiverted>,
    /// Entries with a tracking overlap policy.
    pub(super) tracking: u32,
    pub(super) counters: PolicyCounters,
}

impl Policies {
    /// Reads, for the next pass, which entries of `component` await a result (only when an
    /// entry tracks: the read is O(outbox)).
    pub(super) fn read(&mut self, component: ComponentId, results: &dyn PendingResults) {
        let mut set = BTreeSet::new();
        if self.tracking > 0 {
            results.awaiting(component, &mut set);
        }
        self.awaiting = Some(set);
        self.append_index = results.append_index();
    }

    /// Forgets the view read for the pass.
    pub(super) fn forget(&mut self) {
        self.awaiting = None;
        self.append_index = None;
    }

    /// Moves the pass's events into `outcome` and clears the pass's state.
    pub(super) fn finish(&mut self, component_id: ComponentId, outcome: &mut TickOutcome) {
        outcome.retired = std::mem::take(&mut self.retired);
        outcome.diverted = std::mem::take(&mut self.diverted);
        if !self.unviewed.is_empty() {
            self.counters.unviewed = self.counters.unviewed.saturating_add(1);
        }
        for position in std::mem::take(&mut self.unviewed) {
            tracing::warn!(
                component_id,
                position,
                "table entry with an overlap policy evaluated without the outbox: ran as AllowAll"
            );
            outcome.errors.push(TableError::NoResultView {
                component_id,
                position,
            });
        }
        self.emitted.clear();
    }
}

impl<S> Pass<'_, '_, S> {
    /// Whether the entry at `position` awaits a result now.
    fn awaits(&mut self, position: u32) -> bool {
        if self.policy.emitted.contains(&position) {
            return true;
        }
        match &self.policy.awaiting {
            Some(set) => set.contains(&position),
            None => {
                self.policy.unviewed.insert(position);
                false
            }
        }
    }

    /// [`Overlap::BufferOne`]: whether the due entry of `slot_id` is held (not stepped) because
    /// its previous run has no result yet; it is indexed again at its key then.
    pub(super) fn hold(&mut self, slot_id: u32, entry: &CronEntry<S>, stored: Option<Due>) -> bool {
        if entry.overlap != Overlap::BufferOne {
            return false;
        }
        let Some(schedule) = entry.rule.schedule() else {
            return false;
        };
        let key = schedule.due_key(stored);
        if !key.reached_by(self.tick) || !self.awaits(entry.position) {
            return false;
        }
        self.index.restore(slot_id, entry.position, key);
        self.divert(entry.position, key, Diversion::Held);
        true
    }

    /// Runs the entry at due point `due` under its tracking overlap policy: while it awaits a
    /// result, skipped, or under [`Overlap::CancelOther`] run with the awaited run cancelled;
    /// otherwise run. Awaited for the rest of the pass when the run emitted.
    pub(super) fn fire_tracked(&mut self, entry: &mut CronEntry<S>, due: Due) {
        let position = entry.position;
        if self.awaits(position) {
            if entry.overlap != Overlap::CancelOther {
                self.divert(position, due, Diversion::Skipped);
                return;
            }
            self.cancel(position, due);
        }
        self.fire(entry, Some(due));
        if self.emits.as_deref().is_some_and(|e| e.run_records() > 0) {
            self.policy.emitted.insert(position);
        }
    }

    /// [`Overlap::CancelOther`]: the awaited run(s) of the entry at `position` are cancelled
    /// before the run at `due`: the entry awaits nothing for the rest of the pass (the new run
    /// is awaited when it emits), and the cancellation is reported with its mark, the index
    /// the new run's first record gets (after every record staged so far in this pass).
    /// Without an index to mark (a view that knows none, no emits) nothing can be cancelled:
    /// the run runs as under [`Overlap::AllowAll`], reported ([`TableError::NoResultView`]).
    fn cancel(&mut self, position: u32, due: Due) {
        let staged = self.emits.as_deref().map(crate::outbox::Emits::next_index);
        let Some(mark) = staged.max(self.policy.append_index) else {
            self.policy.unviewed.insert(position);
            return;
        };
        self.policy.emitted.remove(&position);
        if let Some(set) = self.policy.awaiting.as_mut() {
            set.remove(&position);
        }
        self.divert(position, due, Diversion::Cancelled { mark });
    }

    fn divert(&mut self, position: u32, due: Due, what: Diversion) {
        let c = &mut self.policy.counters;
        match what {
            Diversion::Skipped => c.skipped = c.skipped.saturating_add(1),
            Diversion::Held => c.held = c.held.saturating_add(1),
            Diversion::Cancelled { .. } => c.cancelled = c.cancelled.saturating_add(1),
        }
        if let Diversion::Cancelled { mark } = what {
            tracing::info!(
                component_id = self.component_id,
                position,
                ?due,
                mark,
                seq = self.tick.bft_sequence_num,
                "table entry overlap: the previous run has no result yet: cancelled, the run runs"
            );
        } else {
            tracing::info!(
                component_id = self.component_id,
                position,
                ?due,
                ?what,
                seq = self.tick.bft_sequence_num,
                "table entry overlap: the previous run has no result yet"
            );
        }
        self.policy.diverted.push(EntryDiverted {
            position,
            due,
            what,
        });
    }

    /// The step of `entry` stored `next`, the end of time: when its schedule says it can never
    /// run again, the entry is retired (reported, counted, traced).
    #[cold]
    pub(super) fn retiring(&mut self, entry: &CronEntry<S>, next: Due) {
        let Some(end) = entry.rule.schedule().and_then(|s| s.retirement(Some(next))) else {
            return;
        };
        self.policy.counters.retired = self.policy.counters.retired.saturating_add(1);
        tracing::info!(
            component_id = self.component_id,
            position = entry.position,
            seq = self.tick.bft_sequence_num,
            %end,
            "table entry retired: it can never run again"
        );
        self.policy.retired.push(EntryRetired {
            position: entry.position,
            end,
            seq: self.tick.bft_sequence_num,
            at_ms: self.tick.agreed_time_ms,
        });
    }
}

/// The point a retiring step stores.
pub(super) const NEVER: Due = Due::Time(TimeMs::MAX);

impl<S> super::CronTable<S> {
    /// `Err` when the count of entries with a tracking overlap policy is off, or a pass left
    /// state behind (for [`super::CronTable::check_invariants`]).
    pub(super) fn check_policies(&self) -> Result<(), String> {
        let tracking = self
            .entries
            .values()
            .filter_map(|&slot| self.slots.get(slot as usize)?.as_ref())
            .filter(|s| s.entry.overlap.tracks())
            .count();
        if tracking != self.policies.tracking as usize {
            return Err(format!(
                "{tracking} entries with an overlap policy, count says {}",
                self.policies.tracking
            ));
        }
        let p = &self.policies;
        if !(p.emitted.is_empty()
            && p.unviewed.is_empty()
            && p.retired.is_empty()
            && p.diverted.is_empty())
        {
            return Err("a pass left policy state behind".into());
        }
        Ok(())
    }
}
