//! An instant seen through stored [`ZoneRules`]: the date-time type croner searches over.
//!
//! croner 4 is generic over its `CronDateTime` trait, so instead of pretending our rules are a
//! chrono `TimeZone` we hand croner this small type: a UTC second, the offset in force, and the
//! rules. All calendar arithmetic is integer arithmetic on the proleptic Gregorian calendar, so
//! nothing here can fail or consult the host.

use core::cell::Cell;
use core::cmp::Ordering;

use croner::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};

use super::zone::{LocalResolution, ZoneRules};

const DAY_S: i64 = 86_400;

/// Why a croner walk over [`ZonedSecond`]s was stopped by ccron (croner only sees an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The walk reached a wall time inside a spring-forward gap (local second given). croner
    /// would step through the gap second by second (up to a day of steps); the caller resumes
    /// at the end of the gap instead, which finds the same answer.
    Gap(i64),
    /// The search budget is spent.
    Exhausted,
}

/// A deterministic step budget shared by every croner walk of one search: each wall time croner
/// asks us to resolve (one iteration of its walk) costs one step, and so does each zone
/// transition ccron examines itself. Counted, never timed, so every replica stops at the same
/// step.
#[derive(Debug)]
pub(crate) struct Budget {
    left: Cell<u32>,
    stop: Cell<Option<Stop>>,
}

impl Budget {
    /// A budget of `steps` steps.
    pub(crate) fn new(steps: u32) -> Self {
        Self {
            left: Cell::new(steps),
            stop: Cell::new(None),
        }
    }

    /// Spends one step; `false` (and the budget marked exhausted) when none is left.
    pub(crate) fn charge(&self) -> bool {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                true
            }
            None => {
                self.stop.set(Some(Stop::Exhausted));
                false
            }
        }
    }

    /// Why the last walk was stopped (and forgets it), unless the budget is spent (sticky).
    pub(crate) fn take_stop(&self) -> Option<Stop> {
        let stop = self.stop.get();
        if stop != Some(Stop::Exhausted) {
            self.stop.set(None);
        }
        stop
    }
}

/// A UTC instant (whole seconds) together with its zone's offset at that instant, and the
/// budget of the search it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZonedSecond<'z> {
    pub(crate) utc_s: i64,
    offset_s: i32,
    zone: &'z ZoneRules,
    budget: &'z Budget,
}

impl<'z> ZonedSecond<'z> {
    /// The instant `utc_s` in `zone`, searched under `budget`.
    pub(crate) fn new(utc_s: i64, zone: &'z ZoneRules, budget: &'z Budget) -> Self {
        Self {
            utc_s,
            offset_s: zone.offset_at(utc_s),
            zone,
            budget,
        }
    }

    fn local_s(&self) -> i64 {
        self.utc_s.saturating_add(i64::from(self.offset_s))
    }
}

impl CronDateTime for ZonedSecond<'_> {
    fn to_civil(&self) -> CivilDateTime {
        civil_from_local_s(self.local_s())
    }

    fn civil_weekday(&self) -> Weekday {
        weekday_from_days(self.local_s().div_euclid(DAY_S))
    }

    fn resolve_civil(
        &self,
        civil: CivilDateTime,
    ) -> Result<Resolution<Self>, croner::errors::CronError> {
        // Every iteration of croner's walk resolves one wall time: that is the step counted.
        if !self.budget.charge() {
            return Err(croner::errors::CronError::TimeSearchLimitExceeded);
        }
        let local_s = local_s_from_civil(civil);
        let at = |offset_s: i32| ZonedSecond {
            utc_s: local_s.saturating_sub(i64::from(offset_s)),
            offset_s,
            zone: self.zone,
            budget: self.budget,
        };
        Ok(match self.zone.resolve_local(local_s) {
            LocalResolution::Single(o) => Resolution::Single(at(o)),
            LocalResolution::Ambiguous(earlier, later) => {
                Resolution::Ambiguous(at(earlier), at(later))
            }
            LocalResolution::Gap => {
                // Stop the walk rather than let croner step through the gap a second at a time;
                // the caller resumes at the end of the gap (see `Stop::Gap`).
                self.budget.stop.set(Some(Stop::Gap(local_s)));
                return Err(croner::errors::CronError::TimeSearchLimitExceeded);
            }
        })
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        Some(Self::new(
            self.utc_s.checked_add(seconds)?,
            self.zone,
            self.budget,
        ))
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.utc_s.cmp(&other.utc_s)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // day is 1..=31 and month 1..=12 by construction.
    (year, month as u32, day as u32)
}

/// The weekday of `days` since 1970-01-01 (a Thursday).
pub(crate) fn weekday_from_days(days: i64) -> Weekday {
    // rem_euclid(7) is in 0..7, so the conversion cannot truncate.
    Weekday::from_days_from_sunday((days + 4).rem_euclid(7) as u32)
}

fn civil_from_local_s(local_s: i64) -> CivilDateTime {
    let days = local_s.div_euclid(DAY_S);
    let secs = local_s.rem_euclid(DAY_S);
    let (year, month, day) = civil_from_days(days);
    // Callers keep instants within croner's year range (1..=5000), far inside i32.
    let year = i32::try_from(year).unwrap_or(if year < 0 { i32::MIN } else { i32::MAX });
    CivilDateTime::new(
        CivilDate::from_parts_unchecked(year, month, day),
        CivilTime::from_parts_unchecked(
            (secs / 3_600) as u32,
            (secs % 3_600 / 60) as u32,
            (secs % 60) as u32,
        ),
    )
}

fn local_s_from_civil(civil: CivilDateTime) -> i64 {
    days_from_civil(i64::from(civil.year()), civil.month(), civil.day()) * DAY_S
        + i64::from(civil.hour()) * 3_600
        + i64::from(civil.minute()) * 60
        + i64::from(civil.second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_round_trips_and_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        // 2026-11-22 is a Sunday.
        assert_eq!(
            weekday_from_days(days_from_civil(2026, 11, 22)),
            Weekday::Sunday
        );
    }
}
