//! Start and end bounds and a run limit on recurring schedules (book layout 8), and the
//! retired state of a schedule that can never fire again.
//!
//! A recurring schedule's regular occurrences are the instants of its timing in
//! `[starts_at_ms, ends_at_ms]`, and at most `max_runs` of them run (counted by its run counter,
//! [`ScheduleInfo::runs`](super::ScheduleInfo::runs), which also counts the runs before the
//! bounds were set). Admission refuses bounds under which the schedule could never fire
//! ([`ScheduleError::NeverFires`]); a schedule that reaches its end or its run limit is
//! *retired*: it leaves the due index and stays in the book with a typed [`Retired`] record
//! (visible in `describe` and `list`, counted in [`RunCounters::retired`](super::RunCounters::retired))
//! until it is cancelled, replaced or given new bounds ([`ScheduleRequest::SetBounds`](super::ScheduleRequest::SetBounds)).

use super::{
    MAX_INSTANT_MS, MIN_INSTANT_MS, NewSchedule, RunCounters, ScheduleError, Scheduler, Timing,
};
use crate::cron::CronSchedule;
use crate::due::Due;
use crate::tick::TimeMs;

/// Encoded bytes of [`Bounds`] (three options of fixed-width integers; checked against the
/// codec in the tests): what a record's stored size bound adds for them.
pub(super) const BOUNDS_BYTES: usize = 3 * 9;

/// Encoded bytes of an `Option<Retired>` at its largest (checked against the codec in the
/// tests).
pub(super) const RETIRED_BYTES: usize = 1 + 4 + 8 + 9;

/// Encoded bytes of a record's bounds and retired state at their largest: a one-shot's are
/// always [`Bounds::NONE`] and `None` (admission refuses bounds on one-shots, and only
/// recurring schedules retire), 3 and 1 bytes.
pub(super) fn stored_bytes(one_shot: bool) -> usize {
    if one_shot {
        3 + 1
    } else {
        BOUNDS_BYTES + RETIRED_BYTES
    }
}

/// Bounds on a recurring schedule's regular occurrences (see the module documentation). The
/// default bounds nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, bincode::Encode, bincode::Decode)]
pub struct Bounds {
    /// No occurrence before this instant (inclusive bound; an instant, ms).
    pub starts_at_ms: Option<TimeMs>,
    /// No occurrence after this instant (inclusive bound; an instant, ms).
    pub ends_at_ms: Option<TimeMs>,
    /// At most this many regular runs over the schedule's life (its run counter; at least 1).
    pub max_runs: Option<u64>,
}

impl Bounds {
    /// No bounds.
    pub const NONE: Bounds = Bounds {
        starts_at_ms: None,
        ends_at_ms: None,
        max_runs: None,
    };

    /// Whether nothing is bounded.
    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// With no occurrence before `t`.
    pub fn starting_at(mut self, t: TimeMs) -> Self {
        self.starts_at_ms = Some(t);
        self
    }

    /// With no occurrence after `t`.
    pub fn ending_at(mut self, t: TimeMs) -> Self {
        self.ends_at_ms = Some(t);
        self
    }

    /// With at most `n` regular runs.
    pub fn with_max_runs(mut self, n: u64) -> Self {
        self.max_runs = Some(n);
        self
    }

    /// `Ok` when the bounds are admissible for a schedule (`recurring`: cron or periodic;
    /// a one-shot takes no bounds): instants in `[MIN_INSTANT_MS, MAX_INSTANT_MS)`, start at
    /// most end, a run limit of at least 1. Typed [`ScheduleError::Invalid`] otherwise.
    pub(super) fn check(&self, recurring: bool) -> Result<(), ScheduleError> {
        if self.is_none() {
            return Ok(());
        }
        if !recurring {
            return Err(ScheduleError::Invalid(
                "bounds apply to recurring schedules only".into(),
            ));
        }
        for (what, t) in [("start", self.starts_at_ms), ("end", self.ends_at_ms)] {
            if let Some(t) = t
                && !(MIN_INSTANT_MS..MAX_INSTANT_MS).contains(&t)
            {
                return Err(ScheduleError::Invalid(format!(
                    "{what} bound {t} is outside [{MIN_INSTANT_MS}, {MAX_INSTANT_MS})"
                )));
            }
        }
        if let (Some(s), Some(e)) = (self.starts_at_ms, self.ends_at_ms)
            && s > e
        {
            return Err(ScheduleError::Invalid(format!(
                "start bound {s} is after end bound {e}"
            )));
        }
        if self.max_runs == Some(0) {
            return Err(ScheduleError::Invalid("a run limit of 0".into()));
        }
        Ok(())
    }

    /// The first occurrence strictly after `after` within the bounds, given `unbounded`, the
    /// timing's first occurrence strictly after an instant: the start bound moves the search
    /// forward, the end bound cuts it. The run limit is the caller's.
    pub(super) fn occurrence_after(
        &self,
        after: TimeMs,
        unbounded: impl FnOnce(TimeMs) -> Option<TimeMs>,
    ) -> Option<TimeMs> {
        let after = match self.starts_at_ms {
            Some(s) => after.max(s.saturating_sub(1)),
            None => after,
        };
        let t = unbounded(after)?;
        self.ends_at_ms.is_none_or(|e| t <= e).then_some(t)
    }

    /// Whether `runs` regular runs reach the run limit.
    pub(super) fn limit_reached(&self, runs: u64) -> bool {
        self.max_runs.is_some_and(|m| runs >= m)
    }

    /// Regular runs left after `runs` (`usize::MAX` without a limit).
    pub(super) fn runs_left(&self, runs: u64) -> usize {
        self.max_runs.map_or(usize::MAX, |m| {
            usize::try_from(m.saturating_sub(runs)).unwrap_or(usize::MAX)
        })
    }
}

/// Why a schedule was retired or can never fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bincode::Encode, bincode::Decode)]
pub enum RetireReason {
    /// No occurrence of its timing lies in its bounds any more (its end bound passed, or its
    /// first occurrence is after it).
    Ended,
    /// Its run counter reached [`Bounds::max_runs`].
    RunLimit,
}

impl std::fmt::Display for RetireReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RetireReason::Ended => "its end bound passed",
            RetireReason::RunLimit => "its run limit is reached",
        })
    }
}

/// A retired schedule's record: why, and the tick (or request) that retired it. Replicated and
/// persisted with the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct Retired {
    /// Why.
    pub reason: RetireReason,
    /// The sequence number of the batch that retired it.
    pub seq: u64,
    /// That batch's agreed time.
    pub at_ms: Option<TimeMs>,
}

impl Scheduler {
    /// The first due point of a schedule admitted with `bounds` (`stored` its normalised
    /// definition, `next` its unbounded first point, `cron` its parsed expression and
    /// `calendar` the exclusion calendar it names (its first point is then the first allowed
    /// instant after admission, bounds or none), `runs` its
    /// run counter: 0 for a new one, kept by a replace). A one-shot, or no bounds: `next`.
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] (bounds out of range, or on a one-shot),
    /// [`ScheduleError::NeverFires`] (the run counter at the limit, or no occurrence within the
    /// bounds after admission), [`ScheduleError::NeedsTime`].
    pub(super) fn bounded_first(
        stored: &NewSchedule,
        next: Option<Due>,
        cron: Option<&CronSchedule>,
        calendar: Option<&crate::cron::ExclusionCalendar>,
        bounds: &Bounds,
        runs: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<Due>, ScheduleError> {
        bounds.check(!stored.timing.is_one_shot())?;
        if bounds.is_none() && calendar.is_none() {
            return Ok(next);
        }
        if bounds.limit_reached(runs) {
            return Err(ScheduleError::NeverFires(RetireReason::RunLimit));
        }
        let first = match (&stored.timing, cron) {
            (
                Timing::Every {
                    period_ms,
                    start_ms: Some(start),
                },
                _,
            ) => bounds.occurrence_after(start.saturating_sub(1), |after| {
                super::calendars::grid_allowed_after(*start, *period_ms, calendar, after)
            }),
            (Timing::Cron { .. }, Some(cron)) => {
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                bounds.occurrence_after(now, |after| {
                    super::calendars::allowed_after(cron, calendar, after)
                })
            }
            _ => None,
        };
        match first {
            Some(t) => Ok(Some(Due::Time(t))),
            None => Err(ScheduleError::NeverFires(RetireReason::Ended)),
        }
    }

    /// [`ScheduleRequest::SetBounds`](super::ScheduleRequest::SetBounds) on schedule `id` (the
    /// caller resolved and authorized it).
    pub(super) fn set_bounds(
        &mut self,
        id: u64,
        bounds: Bounds,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        bounds.check(!rec.def.timing.is_one_shot())?;
        if bounds.limit_reached(rec.runs) {
            return Err(ScheduleError::NeverFires(RetireReason::RunLimit));
        }
        // From the current next point (kept when still within the bounds: the phase), or, for
        // a retired schedule (or one past its horizon), from the request's agreed time.
        let from = match (rec.retired, rec.next) {
            (None, Some(Due::Time(t))) => t.saturating_sub(1),
            _ => now_ms.ok_or(ScheduleError::NeedsTime)?,
        };
        let mut probe = rec.clone();
        probe.bounds = bounds;
        let next = self
            .occurrence_after(id, &probe, from)
            .ok_or(ScheduleError::NeverFires(RetireReason::Ended))?;
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.bounds = bounds;
            r.next = Some(Due::Time(next));
            r.owed = None;
            r.retired = None;
            r.version = r.version.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        Ok(())
    }

    /// Retires recurring schedule `id` when it has bounds and no next point left (its end
    /// passed, or its run limit reached), in the batch `seq` at `at_ms`: the typed
    /// [`Retired`] record is kept, counted ([`RunCounters::retired`]) and traced. Its runs
    /// already planned (owed, a retry, manual runs) still run.
    pub(super) fn retire_if_done(&mut self, id: u64, seq: u64, at_ms: Option<TimeMs>) {
        let Some(r) = self.records.get_mut(&id) else {
            return;
        };
        if r.retired.is_some()
            || r.bounds.is_none()
            || r.next.is_some()
            || r.def.timing.is_one_shot()
        {
            return;
        }
        let reason = if r.bounds.limit_reached(r.runs) {
            RetireReason::RunLimit
        } else {
            RetireReason::Ended
        };
        r.retired = Some(Retired { reason, seq, at_ms });
        self.count(
            id,
            RunCounters {
                retired: 1,
                ..RunCounters::default()
            },
        );
        self.touch(id);
        tracing::info!(component = self.component, id, %reason, "schedule retired");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sizes_are_what_the_bound_adds() {
        let b = Bounds {
            starts_at_ms: Some(i64::MIN),
            ends_at_ms: Some(1),
            max_runs: Some(u64::MAX),
        };
        assert_eq!(crate::codec::encoded_len(&b).unwrap(), BOUNDS_BYTES);
        let r = Some(Retired {
            reason: RetireReason::RunLimit,
            seq: u64::MAX,
            at_ms: Some(-1),
        });
        assert_eq!(crate::codec::encoded_len(&r).unwrap(), RETIRED_BYTES);
        let none: (Bounds, Option<Retired>) = (Bounds::NONE, None);
        assert_eq!(
            crate::codec::encoded_len(&none).unwrap(),
            stored_bytes(true)
        );
        assert_eq!(stored_bytes(false), BOUNDS_BYTES + RETIRED_BYTES);
    }

    #[test]
    fn bounds_move_and_cut_the_search() {
        let grid = |after: TimeMs| Some((after.div_euclid(10) + 1) * 10);
        let b = Bounds::NONE.starting_at(35).ending_at(60);
        assert_eq!(b.occurrence_after(0, grid), Some(40));
        assert_eq!(b.occurrence_after(40, grid), Some(50));
        assert_eq!(b.occurrence_after(50, grid), Some(60));
        assert_eq!(b.occurrence_after(60, grid), None);
        assert_eq!(Bounds::NONE.occurrence_after(60, grid), Some(70));
        assert!(Bounds::NONE.check(false).is_ok());
        assert!(b.check(false).is_err());
        assert!(
            Bounds::NONE
                .starting_at(2)
                .ending_at(1)
                .check(true)
                .is_err()
        );
        assert!(Bounds::NONE.with_max_runs(0).check(true).is_err());
        assert!(Bounds::NONE.ending_at(MAX_INSTANT_MS).check(true).is_err());
        assert_eq!(Bounds::NONE.with_max_runs(3).runs_left(1), 2);
        assert!(Bounds::NONE.with_max_runs(3).limit_reached(3));
    }
}
