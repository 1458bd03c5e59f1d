//! Admission capacity per time slot ([`SlotCapacity`], `Limits::slot_capacity`): a new or
//! replacing schedule whose first due point falls in a slot already holding `max_due` due points
//! is refused with [`ScheduleError::SlotFull`] (counted, traced), so one client cannot pile the
//! work of one instant onto the cluster (pallet-scheduler's `MaxScheduledPerBlock`).

use super::timing::jitter_offset_ms;
use super::{ScheduleError, Scheduler};
use crate::due::Due;
use crate::tick::TimeMs;

/// Most due points admission lets into one time slot.
///
/// Slot `k` is the agreed-time interval `[k·slot_ms, (k+1)·slot_ms)` (aligned to the Unix
/// epoch). A schedule's due point is its due index key: its next nominal time plus its jitter
/// offset (or its owed or retry point). Paused and parked schedules and sequence-keyed ones are
/// not in the time index and count for nothing; only the *next* due point of each schedule is
/// counted (later occurrences of recurring schedules are not: `Scheduler::load_per_slot`
/// previews those). Configuration, identical on every replica, not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCapacity {
    /// The slot width, ms (positive; 0 or less disables the check).
    pub slot_ms: i64,
    /// Most due points one slot holds.
    pub max_due: usize,
}

impl Scheduler {
    /// `Ok` when schedule `id` (a new one: the id it will get) may be due at `next` with jitter
    /// `jitter_ms` under [`super::Limits::slot_capacity`]; its own index entries do not count.
    pub(super) fn check_slot(
        &self,
        id: u64,
        next: Option<Due>,
        jitter_ms: u32,
    ) -> Result<(), ScheduleError> {
        let (Some(cap), Some(Due::Time(t))) = (self.limits.slot_capacity, next) else {
            return Ok(());
        };
        if cap.slot_ms <= 0 {
            return Ok(());
        }
        let key = t.saturating_add(jitter_offset_ms(id, jitter_ms));
        let start: TimeMs = key.div_euclid(cap.slot_ms).saturating_mul(cap.slot_ms);
        let end = start.saturating_add(cap.slot_ms);
        let mut held = 0usize;
        // One range probe per priority level in use, stopping at the capacity.
        for &inv in self.levels.keys() {
            let range = self
                .index
                .range((inv, Due::Time(start), 0)..(inv, Due::Time(end), 0));
            for &(_, _, other) in range {
                if other == id {
                    continue;
                }
                held += 1;
                if held >= cap.max_due {
                    return Err(ScheduleError::SlotFull {
                        slot_start_ms: start,
                        slot_ms: cap.slot_ms,
                        held: held as u64,
                    });
                }
            }
        }
        Ok(())
    }

    /// How many requests [`Scheduler::apply`] and handler runs' requests were refused with
    /// [`ScheduleError::SlotFull`]: the
    /// replicated [`RefusalCounters::slot_full`](super::RefusalCounters::slot_full) (book
    /// layout 13; stored, so a restart keeps it).
    pub fn slot_refusals(&self) -> u64 {
        self.refusals.slot_full
    }
}
