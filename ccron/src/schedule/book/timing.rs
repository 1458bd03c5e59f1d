//! Occurrences of a schedule's timing: the next one after an instant, the latest reached, owed
//! catch-up runs, the deterministic jitter offset, and the runs a tick plans under the misfire
//! policy, within the schedule's bounds and run limit (`bounds.rs`) and among the instants its
//! exclusion calendar allows (`calendars.rs`).

use super::counters::PlanNote;
use super::{Misfire, Record, Scheduler, Timing};
use crate::due::Due;
use crate::tick::{Tick, TimeMs};

/// Deterministic jitter offset of schedule `id` (splitmix64 finaliser).
pub(super) fn jitter_offset_ms(id: u64, jitter_ms: u32) -> i64 {
    if jitter_ms == 0 {
        return 0;
    }
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // The remainder is at most u32::MAX, so the conversion cannot fail.
    i64::try_from(z % (u64::from(jitter_ms) + 1)).unwrap_or(0)
}

/// The first point of the grid `start + k·period` (k >= 0) strictly after `after_ms`; checked
/// throughout: admission bounds start and period (`MAX_INSTANT_MS`, `MAX_PERIOD_MS`), but a
/// tick's time is any i64; past i64 there is no next point.
pub(super) fn every_after(start: TimeMs, period_ms: i64, after_ms: TimeMs) -> Option<TimeMs> {
    if after_ms < start {
        return Some(start);
    }
    if period_ms <= 0 {
        return None;
    }
    let k = after_ms.checked_sub(start)?.div_euclid(period_ms);
    start.checked_add(k.checked_add(1)?.checked_mul(period_ms)?)
}

impl Scheduler {
    /// The first occurrence of `id`'s timing strictly after `after` (time timings only).
    pub(super) fn occurrence_after(
        &self,
        id: u64,
        rec: &Record,
        after_ms: TimeMs,
    ) -> Option<TimeMs> {
        // Within the record's start and end bounds (`bounds.rs`; none: unchanged).
        rec.bounds
            .occurrence_after(after_ms, |after| self.grid_after(id, rec, after))
    }

    /// The first occurrence of `id`'s timing strictly after `after_ms`, bounds aside.
    fn grid_after(&self, id: u64, rec: &Record, after_ms: TimeMs) -> Option<TimeMs> {
        match &rec.def.timing {
            // Only the instants its exclusion calendar allows (`calendars.rs`).
            Timing::Cron { .. } => super::calendars::allowed_after(
                self.crons.get(&id)?,
                self.calendar_of(rec),
                after_ms,
            ),
            Timing::Every {
                period_ms,
                start_ms,
            } => super::calendars::grid_allowed_after(
                (*start_ms)?,
                *period_ms,
                self.calendar_of(rec),
                after_ms,
            ),
            _ => None,
        }
    }

    /// The latest `count` occurrences of `id`'s timing in `[r1, now]`, ascending (`r1`, an
    /// occurrence, is reached, so there is at least one): closed form on a periodic grid, a
    /// backward search from `now` for cron ([`CronSchedule::latest_in`](crate::cron::CronSchedule::latest_in)), never a walk over
    /// every missed instant.
    fn latest_reached(
        &self,
        id: u64,
        rec: &Record,
        r1: TimeMs,
        now: TimeMs,
        count: usize,
    ) -> Vec<Due> {
        let count = count.max(1);
        // Nothing after the end bound is an occurrence (r1, an occurrence, is within it).
        let now = rec.bounds.ends_at_ms.map_or(now, |e| now.min(e).max(r1));
        let times = match &rec.def.timing {
            // Under an exclusion calendar: the latest allowed points (`calendars.rs`).
            Timing::Every {
                period_ms,
                start_ms,
            } if self.calendar_of(rec).is_some() => self
                .calendar_of(rec)
                .map(|c| {
                    super::calendars::grid_allowed_latest(
                        start_ms.unwrap_or(r1),
                        *period_ms,
                        c,
                        r1.saturating_sub(1),
                        now,
                        count,
                    )
                })
                .unwrap_or_default(),
            Timing::Every { period_ms, .. } if *period_ms > 0 && now >= r1 => {
                let p = i128::from(*period_ms);
                let reached = (i128::from(now) - i128::from(r1)) / p + 1;
                let m = reached.min(count as i128);
                let first = i128::from(r1) + (reached - m) * p;
                (0..m)
                    .map(|i| first + i * p)
                    .filter_map(|t| TimeMs::try_from(t).ok())
                    .collect()
            }
            Timing::Cron { .. } => self
                .crons
                .get(&id)
                .map(|c| {
                    super::calendars::allowed_latest(
                        c,
                        self.calendar_of(rec),
                        r1.saturating_sub(1),
                        now,
                        count,
                    )
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        if times.is_empty() {
            return vec![Due::Time(r1)];
        }
        times.into_iter().map(Due::Time).collect()
    }

    /// The occurrences of `id`'s timing from `from_ms` through `last_ms` (owed runs), at most
    /// `max`, ascending; and the first one left over, if any.
    pub(super) fn owed_runs(
        &self,
        id: u64,
        rec: &Record,
        from_ms: TimeMs,
        last_ms: TimeMs,
        max: usize,
    ) -> (Vec<Due>, Option<TimeMs>) {
        let mut runs = Vec::new();
        let mut at = Some(from_ms);
        while let Some(t) = at {
            if t > last_ms {
                return (runs, None);
            }
            if runs.len() == max {
                return (runs, Some(t));
            }
            runs.push(Due::Time(t));
            at = self.occurrence_after(id, rec, t);
        }
        (runs, None)
    }

    /// [`Self::plan`] for a one-shot record (`rec.def.timing.is_one_shot()`): its one run, or
    /// `None` when its misfire deadline dropped it (without allocating: the tick's hot path).
    pub(super) fn plan_one_shot(
        id: u64,
        rec: &Record,
        due: Due,
        tick: &Tick,
    ) -> (Option<Due>, PlanNote) {
        let now_ms = tick.agreed_time_ms;
        // At time T or sequence S: the time trigger when reached (jitter included), else
        // the sequence one (the record was taken because one of them is reached).
        let due = match (&rec.def.timing, due) {
            (Timing::AtOrSeq { seq, .. }, Due::Time(t)) => {
                let at = t.saturating_add(jitter_offset_ms(id, rec.def.jitter_ms));
                if now_ms.is_some_and(|now| now >= at) {
                    due
                } else {
                    Due::Seq(*seq)
                }
            }
            _ => due,
        };
        let run = match (rec.def.misfire, due, now_ms) {
            (Misfire::ExpireAfter { deadline_ms }, Due::Time(t), Some(now))
                if now.saturating_sub(t) > deadline_ms =>
            {
                None
            }
            _ => Some(due),
        };
        let note = PlanNote {
            expired: run.is_none(),
            ..PlanNote::default()
        };
        (run, note)
    }

    /// The due points `id`'s next tick at `now` runs for, its next nominal point, and what the
    /// plan found (late, skipped, expired: the replicated counters, `counters.rs`).
    pub(super) fn plan(
        &self,
        id: u64,
        rec: &Record,
        due: Due,
        tick: &Tick,
    ) -> (Vec<Due>, Option<Due>, PlanNote) {
        let now_ms = tick.agreed_time_ms;
        if rec.def.timing.is_one_shot() {
            let (run, note) = Self::plan_one_shot(id, rec, due, tick);
            return (run.into_iter().collect(), None, note);
        }
        let (Due::Time(r1), Some(now)) = (due, now_ms) else {
            return (Vec::new(), rec.next, PlanNote::default());
        };
        // An occurrence is reached when its *jittered* instant has passed: with jitter J, the
        // tick at `now` has reached the nominal occurrences <= now - J. One nominally past but
        // not yet at its jittered instant is neither run early nor dropped: it stays next.
        // (The record was taken because r1 + J <= now, so r1 is reached.)
        let now = now
            .saturating_sub(jitter_offset_ms(id, rec.def.jitter_ms))
            .max(r1);
        let next = self.occurrence_after(id, rec, now).map(Due::Time);
        // The latest reached occurrence before the policy (`None`: not computed, as r1).
        let (runs, latest) = match rec.def.misfire {
            Misfire::FireOnce => {
                let runs = self.latest_reached(id, rec, r1, now, 1);
                let latest = runs.last().and_then(Due::time_ms);
                (runs, latest)
            }
            Misfire::Skip => {
                let r2 = self.occurrence_after(id, rec, r1);
                if r2.is_none_or(|r2| r2 > now) {
                    (vec![due], Some(r1))
                } else {
                    (Vec::new(), r2)
                }
            }
            Misfire::FireEach { cap } => {
                let runs = self.latest_reached(id, rec, r1, now, cap as usize);
                let latest = runs.last().and_then(Due::time_ms);
                (runs, latest)
            }
            Misfire::ExpireAfter { deadline_ms } => {
                // Fire once for the latest reached occurrence, unless even that one is stale.
                let mut latest = self.latest_reached(id, rec, r1, now, 1);
                let last = latest.last().and_then(Due::time_ms);
                latest.retain(|d| {
                    d.time_ms()
                        .is_some_and(|t| now.saturating_sub(t) <= deadline_ms)
                });
                (latest, last)
            }
        };
        // The run limit keeps the latest runs that fit it (the catch-up rule: the most recent
        // occurrences are the ones kept), and ends the schedule when reached.
        let mut runs = runs;
        let mut next = next;
        if rec.bounds.max_runs.is_some() {
            let left = rec.bounds.runs_left(rec.runs);
            if runs.len() > left {
                runs.drain(..runs.len() - left);
            }
            if rec
                .bounds
                .limit_reached(rec.runs.saturating_add(runs.len() as u64))
            {
                next = None;
            }
        }
        let ran: Vec<TimeMs> = runs.iter().filter_map(Due::time_ms).collect();
        let note = PlanNote::of(rec.def.misfire, r1, latest, &ran);
        (runs, next, note)
    }
}
