//! Runs an operator asks for: [`ScheduleRequest::TriggerNow`](super::ScheduleRequest::TriggerNow)
//! (one run now) and [`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill) (the
//! schedule's occurrences in a past window, run again), both authorized like a change of the
//! schedule (its owner or an admin) and bounded: at most one trigger and one backfill pending per
//! schedule, at most [`MAX_BACKFILL_RUNS`] occurrences per backfill (counted at admission, under
//! a bounded walk), and every run paid from the tick's fire budget like any other.
//!
//! Occurrence ids. A regular run's occurrence number is the schedule's run counter (0, 1, 2,
//! …). A manual run's is derived from its nominal time, in a space a counter never reaches:
//! bit 63 set, bit 62 set for a trigger and clear for a backfill, the nominal time in ms below
//! ([`manual_occurrence`]). So a manual run never shares an outbox id with a regular run, and
//! backfilling the same occurrence twice gives it the same id both times (workers deduplicate
//! it). Trigger nominal times strictly increase per schedule (the request's agreed time, or
//! one past the previous trigger's), so two triggers never share an id.
//!
//! A schedule runs one thing at a time: a pending retry first, then a trigger, then the
//! backfill's next occurrence, then its regular runs. A failed manual run is retried and
//! dead-lettered by the schedule's run policy like a regular one (same occurrence id). Manual
//! runs wait while the schedule is paused or parked. They do not change the run counter or the
//! regular phase.

use super::{Record, ScheduleError, Scheduler, Timing};
use crate::due::Due;
use crate::tick::TimeMs;

/// Most occurrences one [`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill) may
/// run; a window holding more is refused ([`ScheduleError::Limit`]): split it.
pub const MAX_BACKFILL_RUNS: u32 = 1_000;

/// Bit 63 of a manual run's occurrence number.
const MANUAL_BIT: u64 = 1 << 63;

/// Bit 62: a trigger's (clear: a backfill's).
const TRIGGER_BIT: u64 = 1 << 62;

/// Encoded bytes of [`ManualRuns`] (checked against the codec in the tests): what a record's
/// stored size bound adds for it.
pub(super) const MANUAL_BYTES: usize = 9 + 17 + 4 + 9;

/// The occurrence number of a manual run of nominal time `nominal_ms` (in
/// `[MIN_INSTANT_MS, MAX_INSTANT_MS)`, so below 2^62): see the module documentation.
pub fn manual_occurrence(nominal_ms: TimeMs, trigger: bool) -> u64 {
    let t = u64::try_from(nominal_ms).unwrap_or(0) & (TRIGGER_BIT - 1);
    MANUAL_BIT | if trigger { TRIGGER_BIT } else { 0 } | t
}

/// Whether occurrence number `occurrence` is a manual run's: `Some(trigger)` then.
pub fn is_manual(occurrence: u64) -> Option<bool> {
    (occurrence & MANUAL_BIT != 0).then_some(occurrence & TRIGGER_BIT != 0)
}

/// Manual runs pending on a schedule (replicated, persisted with its record; fixed size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ManualRuns {
    /// A pending trigger: its nominal time.
    pub trigger: Option<TimeMs>,
    /// A pending backfill: the next occurrence it runs and the window's last instant
    /// (inclusive).
    pub backfill: Option<(TimeMs, TimeMs)>,
    /// Occurrences the backfill still runs (at most [`MAX_BACKFILL_RUNS`]; 0 without one).
    pub backfill_left: u32,
    /// The nominal time of the last trigger admitted.
    pub last_trigger_ms: Option<TimeMs>,
}

impl ManualRuns {
    /// Whether a manual run is pending.
    pub fn pending(&self) -> bool {
        self.trigger.is_some() || self.backfill.is_some()
    }

    /// `Ok` when the stored fields are consistent (checked at load).
    pub(super) fn check(&self, recurring: bool) -> Result<(), String> {
        if self.pending() && !recurring {
            return Err("manual runs on a one-shot schedule".into());
        }
        let backfill_ok = match self.backfill {
            Some((next, last)) => {
                next <= last && (1..=MAX_BACKFILL_RUNS).contains(&self.backfill_left)
            }
            None => self.backfill_left == 0,
        };
        if !backfill_ok {
            return Err("an invalid pending backfill".into());
        }
        if let (Some(t), Some(last)) = (self.trigger, self.last_trigger_ms)
            && t > last
        {
            return Err("a trigger after the last one admitted".into());
        }
        Ok(())
    }
}

fn recurring(rec: &Record) -> bool {
    matches!(rec.def.timing, Timing::Every { .. } | Timing::Cron { .. })
}

impl Scheduler {
    /// [`ScheduleRequest::TriggerNow`](super::ScheduleRequest::TriggerNow) on `id` (resolved
    /// and authorized) at agreed time `now_ms`.
    pub(super) fn trigger_now(
        &mut self,
        id: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        if !recurring(rec) {
            return Err(ScheduleError::Invalid(
                "a trigger or backfill needs a recurring schedule (cron or every)".into(),
            ));
        }
        if rec.manual.trigger.is_some() {
            return Err(ScheduleError::ManualRunPending(id));
        }
        let nominal = match rec.manual.last_trigger_ms {
            Some(last) if last >= now => last.saturating_add(1),
            _ => now,
        };
        if !(super::MIN_INSTANT_MS..super::MAX_INSTANT_MS).contains(&nominal) {
            return Err(ScheduleError::Invalid(format!(
                "trigger time {nominal} outside the instant range"
            )));
        }
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.manual.trigger = Some(nominal);
            r.manual.last_trigger_ms = Some(nominal);
            r.version = r.version.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        Ok(())
    }

    /// [`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill) on `id` (resolved and
    /// authorized): the occurrences in `[from_ms, to_ms]`, a past window (`to_ms` at most the
    /// agreed time `now_ms`), at most [`MAX_BACKFILL_RUNS`] of them (counted here, in at most
    /// that many steps of the timing). Returns how many it runs.
    pub(super) fn backfill(
        &mut self,
        id: u64,
        from_ms: TimeMs,
        to_ms: TimeMs,
        now_ms: Option<TimeMs>,
    ) -> Result<u32, ScheduleError> {
        let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        if !recurring(rec) {
            return Err(ScheduleError::Invalid(
                "a trigger or backfill needs a recurring schedule (cron or every)".into(),
            ));
        }
        if !(super::MIN_INSTANT_MS..super::MAX_INSTANT_MS).contains(&from_ms)
            || from_ms > to_ms
            || to_ms > now
        {
            return Err(ScheduleError::Invalid(format!(
                "backfill window [{from_ms}, {to_ms}] must be a past window (ends by {now}) of valid instants"
            )));
        }
        if rec.manual.backfill.is_some() {
            return Err(ScheduleError::ManualRunPending(id));
        }
        let first = self.occurrence_after(id, rec, from_ms.saturating_sub(1));
        let mut count = 0u32;
        let mut at = first;
        while let Some(t) = at {
            if t > to_ms {
                break;
            }
            count += 1;
            if count > MAX_BACKFILL_RUNS {
                return Err(ScheduleError::Limit(format!(
                    "a backfill runs at most {MAX_BACKFILL_RUNS} occurrences; split the window"
                )));
            }
            at = self.occurrence_after(id, rec, t);
        }
        let (Some(first), true) = (first, count > 0) else {
            return Err(ScheduleError::Invalid(format!(
                "no occurrence in [{from_ms}, {to_ms}]"
            )));
        };
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.manual.backfill = Some((first, to_ms));
            r.manual.backfill_left = count;
            r.version = r.version.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        Ok(count)
    }

    /// Takes record `id`'s next manual run off its pending runs: (nominal due point,
    /// occurrence number). The caller has unindexed the record.
    pub(super) fn next_manual(&mut self, id: u64) -> Option<(Due, u64)> {
        let rec = self.records.get(&id)?;
        if let Some(t) = rec.manual.trigger {
            if let Some(r) = self.records.get_mut(&id) {
                r.manual.trigger = None;
            }
            return Some((Due::Time(t), manual_occurrence(t, true)));
        }
        let (next, last) = rec.manual.backfill?;
        let left = rec.manual.backfill_left.saturating_sub(1);
        let following = self
            .occurrence_after(id, rec, next)
            .filter(|t| *t <= last && left > 0);
        if let Some(r) = self.records.get_mut(&id) {
            r.manual.backfill = following.map(|t| (t, last));
            r.manual.backfill_left = if following.is_some() { left } else { 0 };
        }
        Some((Due::Time(next), manual_occurrence(next, false)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_occurrences_never_meet_run_counters_or_each_other() {
        let t = super::super::MAX_INSTANT_MS - 1;
        for trigger in [false, true] {
            let o = manual_occurrence(t, trigger);
            assert!(o >= MANUAL_BIT, "above every run counter");
            assert_eq!(is_manual(o), Some(trigger));
            assert_eq!(o & (TRIGGER_BIT - 1), t as u64, "the nominal time");
        }
        assert_ne!(manual_occurrence(5, true), manual_occurrence(5, false));
        assert_eq!(is_manual(12), None);
        let full = ManualRuns {
            trigger: Some(1),
            backfill: Some((2, 3)),
            backfill_left: 4,
            last_trigger_ms: Some(5),
        };
        assert_eq!(crate::codec::encoded_len(&full).unwrap(), MANUAL_BYTES);
        assert!(full.check(true).is_ok());
        assert!(full.check(false).is_err());
    }
}
