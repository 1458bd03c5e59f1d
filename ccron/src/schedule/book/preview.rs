//! Read-only looks ahead: the earliest due time for a host's timer, a schedule's next instants
//! ([`Scheduler::preview`], and [`Scheduler::next_run`], which honours the sequence trigger of
//! [`Timing::AtOrSeq`](super::Timing::AtOrSeq)), and the load per time slot.

use std::collections::BTreeMap;

use super::timing::jitter_offset_ms;
use super::{Scheduler, Timing};
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

/// When a schedule runs next, as far as the book can know it ([`Scheduler::next_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NextRun {
    /// At this due point: the schedule's only trigger, or the trigger of a
    /// [`Timing::AtOrSeq`] already reached at the given point (it runs on the next tick,
    /// reporting this due point, as the tick would).
    At(Due),
    /// A [`Timing::AtOrSeq`] neither of whose triggers is reached at the given point: it runs
    /// at agreed time `at_ms` (`due_ms` with its jitter) or sequence number `seq`, whichever a
    /// committed tick reaches first. Which one cannot be known from the book: sequence numbers
    /// advance with the load, not with the clock.
    EarlierOf {
        /// The nominal time trigger.
        at_ms: TimeMs,
        /// The time trigger with the schedule's jitter (when a tick takes it).
        due_ms: TimeMs,
        /// The sequence trigger.
        seq: u64,
    },
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

    /// When schedule `id` runs next, seen from sequence number `now_seq` and agreed time
    /// `now_ms` (the last executed batch's; `None` when the time service is off), ignoring pause
    /// and the fire budget. For a [`Timing::AtOrSeq`] it is the earlier of its two triggers
    /// when that can be known (one of them is reached: the time, jitter included, wins a tie,
    /// as on a tick), and [`NextRun::EarlierOf`] when it cannot. `None` for an unknown id or a
    /// schedule with nothing left to run.
    pub fn next_run(&self, id: u64, now_seq: u64, now_ms: Option<TimeMs>) -> Option<NextRun> {
        let rec = self.records.get(&id)?;
        if let Some(retry) = rec.retry {
            // A pending retry runs first.
            return Some(NextRun::At(retry.at));
        }
        if let Some((owed_ms, _)) = rec.owed {
            return Some(NextRun::At(Due::Time(owed_ms)));
        }
        let next = rec.next?;
        let (Timing::AtOrSeq { at_ms, seq }, Due::Time(_)) = (&rec.def.timing, next) else {
            return Some(NextRun::At(next));
        };
        let (at_ms, seq) = (*at_ms, *seq);
        let due_ms = at_ms.saturating_add(jitter_offset_ms(id, rec.def.jitter_ms));
        Some(if now_ms.is_some_and(|t| t >= due_ms) {
            NextRun::At(Due::Time(at_ms))
        } else if now_seq >= seq {
            NextRun::At(Due::Seq(seq))
        } else {
            NextRun::EarlierOf { at_ms, due_ms, seq }
        })
    }

    /// The next `count` nominal fire instants of schedule `id` (time timings; a one-shot at a
    /// time gives one), ignoring pause. Empty for an unknown id. A [`Timing::AtOrSeq`] gives
    /// its time trigger only, though it may run earlier by sequence number: ask
    /// [`Scheduler::next_run`], which says which trigger comes first or that it cannot be
    /// known.
    pub fn preview(&self, id: u64, count: usize) -> Vec<Due> {
        let Some(rec) = self.records.get(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let Some(first) = rec.next else { return out };
        // No more than its run limit lets run.
        let count = count.min(rec.bounds.runs_left(rec.runs));
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
    /// are omitted. Costs O(schedules + runs counted). A [`Timing::AtOrSeq`] is counted at its
    /// time trigger (it may run earlier, by sequence number).
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
            let max_per_schedule = max_per_schedule.min(rec.bounds.runs_left(rec.runs));
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
