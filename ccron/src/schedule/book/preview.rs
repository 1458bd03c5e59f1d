//! Read-only looks ahead: the earliest due time for a host's timer, a schedule's next instants,
//! and the load per time slot.

use std::collections::BTreeMap;

use super::Scheduler;
use super::timing::jitter_offset_ms;
use crate::due::Due;
use crate::tick::TimeMs;

/// Load per time slot (see [`Scheduler::load_per_slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLoad {
    /// The slot's first instant.
    pub slot_start_ms: TimeMs,
    /// How many runs fall in it.
    pub runs: u64,
}

impl Scheduler {
    /// The earliest due time in the index (for a host's timer), jitter included.
    pub fn earliest_due_ms(&self) -> Option<TimeMs> {
        self.levels
            .keys()
            .filter_map(|&inv| {
                self.index
                    .range(
                        (inv, Due::Time(TimeMs::MIN), 0)..=(inv, Due::Time(TimeMs::MAX), u64::MAX),
                    )
                    .next()
                    .and_then(|(_, d, _)| d.time_ms())
            })
            .min()
    }

    /// The next `count` nominal fire instants of schedule `id` (time timings; a one-shot at a
    /// time gives one), ignoring pause. Empty for an unknown id.
    pub fn preview(&self, id: u64, count: usize) -> Vec<Due> {
        let Some(rec) = self.records.get(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let Some(first) = rec.next else { return out };
        if count == 0 {
            return out;
        }
        out.push(first);
        if let Due::Time(mut at) = first {
            while out.len() < count {
                match self.occurrence_after(id, rec, at) {
                    Some(t) => {
                        out.push(Due::Time(t));
                        at = t;
                    }
                    None => break,
                }
            }
        }
        out
    }

    /// Runs per time slot of `slot_ms` in `[from_ms, to_ms)` over every active schedule (jitter
    /// included), counting at most `max_per_schedule` runs of one schedule. Slots without runs
    /// are omitted. Costs O(schedules + runs counted).
    pub fn load_per_slot(
        &self,
        from_ms: TimeMs,
        to_ms: TimeMs,
        slot_ms: i64,
        max_per_schedule: usize,
    ) -> Vec<SlotLoad> {
        let mut slots: BTreeMap<TimeMs, u64> = BTreeMap::new();
        if slot_ms <= 0 || to_ms <= from_ms {
            return Vec::new();
        }
        for (&id, rec) in &self.records {
            if rec.paused {
                continue;
            }
            let jitter = jitter_offset_ms(id, rec.def.jitter_ms);
            let Some(Due::Time(mut at)) = rec.next else {
                continue;
            };
            let mut counted = 0;
            while counted < max_per_schedule {
                let eff = at.saturating_add(jitter);
                if eff >= to_ms {
                    break;
                }
                if eff >= from_ms {
                    let slot = from_ms + (eff - from_ms) / slot_ms * slot_ms;
                    *slots.entry(slot).or_insert(0) += 1;
                    counted += 1;
                }
                match self.occurrence_after(id, rec, at) {
                    Some(t) => at = t,
                    None => break,
                }
            }
        }
        slots
            .into_iter()
            .map(|(slot_start_ms, runs)| SlotLoad {
                slot_start_ms,
                runs,
            })
            .collect()
    }
}
