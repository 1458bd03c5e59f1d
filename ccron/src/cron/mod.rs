//! Cron expressions evaluated on agreed time, in UTC or in zone rules held as data.
//!
//! [`CronSchedule`] wraps a croner (4.0.3, pinned) pattern validated at admission: a malformed
//! pattern is a typed error, and a pattern that can never fire (`0 0 , * * *`, an empty hour
//! list; `0 0 30 2 *`) is rejected exactly from its field sets (every field: the time fields
//! must each match a value, and some month shape must have a matching day), never found out by
//! a long search on some later tick. `next_after(t)` gives the first fire instant strictly after
//! `t`; hosts store it and compare ticks against it rather than searching on every tick.
//!
//! Every search runs under a deterministic budget of counted steps ([`SEARCH_STEP_BUDGET`],
//! [`LATEST_IN_SEARCH_BUDGET`]): it skips to the next matching day month by month, stops
//! croner's walk at DST gaps instead of stepping through them, and a spent budget is the same
//! outcome on every replica (`None`, or [`CronError::SearchBudgetExhausted`] from the `try_`
//! variants).
//!
//! Time zones never come from the host: a schedule evaluates local times through the
//! [`ZoneRules`] it carries (UTC by default), which are plain data stored in replicated state.
//!
//! DST (see `docs/cron-expressions.md`). A *wall-clock* job names specific hours (its hour
//! field is neither `*` nor `*/n`, e.g. `30 2 * * *`, `0 1,13 * * *`, `*/15 9-17 * * *`): each
//! matching wall time runs once. A matching wall time swallowed by a spring-forward gap runs once,
//! at the first instant after the gap (if that wall date still matches the day fields); a wall
//! time repeated by a fall-back runs only at its earlier instant. An *interval* job (`*/15 * * *
//! *`, `0 */2 * * *`) runs on elapsed time: at every real instant whose wall time matches, so
//! nothing in a gap and twice in an overlap. croner 4.0.3 applies the wall-clock rule only to
//! single-time patterns (and only to gaps up to two hours); ccron extends it on top of croner.
//!
//! ```
//! use ccron::cron::{CronSchedule, ZoneRules, format_rfc3339_ms, parse_rfc3339_ms};
//!
//! # fn main() -> Result<(), ccron::cron::CronError> {
//! // Admission: rules become data, the pattern is validated once.
//! let berlin = ZoneRules::from_iana("Europe/Berlin")?;
//! let schedule = CronSchedule::parse_in("30 2 * * *", berlin)?;
//! // 02:30 does not exist on 2026-03-29: the job runs once, right after the gap (03:00 CEST).
//! let from_ms = parse_rfc3339_ms("2026-03-28T12:00:00Z")?;
//! let next_ms = schedule.next_after(from_ms).expect("fires daily");
//! assert_eq!(format_rfc3339_ms(next_ms), "2026-03-29T01:00:00Z");
//! assert!(matches!(
//!     CronSchedule::parse("0 0 30 2 *"),
//!     Err(ccron::cron::CronError::NeverFires { .. })
//! ));
//! # Ok(())
//! # }
//! ```

/// bincode for a validated type stored as its plain `Data` shape (serde goes through the same
/// shape with `#[serde(try_from, into)]`): encoding writes the listed fields in the shape's
/// order, decoding reads the shape and re-validates it through `TryFrom<Data>`, so a stored
/// value that fails validation is a decode error, never a value.
macro_rules! validated_codec {
    ($ty:ident, $data:ident { $($field:ident),+ }) => {
        impl bincode::Encode for $ty {
            fn encode<E: bincode::enc::Encoder>(
                &self,
                encoder: &mut E,
            ) -> Result<(), bincode::error::EncodeError> {
                $(bincode::Encode::encode(&self.$field, encoder)?;)+
                Ok(())
            }
        }

        impl<Context> bincode::Decode<Context> for $ty {
            fn decode<D: bincode::de::Decoder<Context = Context>>(
                decoder: &mut D,
            ) -> Result<Self, bincode::error::DecodeError> {
                let data = <$data as bincode::Decode<Context>>::decode(decoder)?;
                $ty::try_from(data)
                    .map_err(|e| bincode::error::DecodeError::OtherString(e.to_string()))
            }
        }

        bincode::impl_borrow_decode!($ty);
    };
}

mod calendar;
mod latest;
mod zone;
mod zoned;

use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

pub use calendar::{
    Exclusion, ExclusionCalendar, MAX_CALENDAR_NAME_LEN, MAX_DAYS_PER_SKIP, MAX_EXCLUDED_SKIPS,
    MAX_EXCLUSIONS,
};
pub use zone::{
    LocalResolution, MAX_OFFSET_S, MAX_TRANSITIONS, MAX_ZONE_NAME_LEN, RULES_HORIZON_S,
    RULES_START_S, ZoneRules, ZoneTransition,
};
use zoned::{Budget, Stop, ZonedSecond, days_from_civil, weekday_from_days};

use crate::tick::TimeMs;

/// Longest cron expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 128;

/// Most instants one preview may return.
pub const MAX_PREVIEW_COUNT: usize = 1_000;

/// Searches start no earlier than 1900-01-01T00:00:00Z (the start of stored zone rules).
pub const MIN_SEARCH_S: i64 = RULES_START_S;

/// Searches never start at or after 4000-01-01T00:00:00Z: `next_after` returns `None` there.
pub const MAX_SEARCH_S: i64 = 64_060_588_800;

/// Steps one [`CronSchedule::next_after`] may spend: a step is one wall time resolved during a
/// search (one iteration of croner's walk) or one zone transition examined for a swallowed wall
/// time. A search that runs out gives `None` ([`CronSchedule::try_next_after`]:
/// [`CronError::SearchBudgetExhausted`]), at the same step on every replica. Admission
/// guarantees a matching wall time on every matching day, so real searches spend a handful of
/// steps, plus one per spring-forward gap and per zone transition crossed.
pub const SEARCH_STEP_BUDGET: u32 = 4_096;

/// Searches ([`CronSchedule::next_after`]) one [`CronSchedule::latest_in`] may run: the budget
/// is `LATEST_IN_SEARCH_BUDGET + LATEST_IN_SEARCHES_PER_COUNT · count` searches. It covers the
/// algorithm's worst case by construction (spans are below 2^37 seconds): at most 37
/// doublings of at most `count + 1` searches each, one failed walk of `2·count + 9`, then a
/// halving path of at most 37 levels, each a failed walk and a complete sibling walk of at most
/// `3·count + 10` together: `150·count + 416` in all. So only a search that itself spends its
/// [`SEARCH_STEP_BUDGET`] can make a catch-up stop.
pub const LATEST_IN_SEARCH_BUDGET: u32 = 512;

/// Searches per requested instant in the [`CronSchedule::latest_in`] budget (see
/// [`LATEST_IN_SEARCH_BUDGET`]).
pub const LATEST_IN_SEARCHES_PER_COUNT: u32 = 160;

/// Errors of cron expressions, zones and previews. Every message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// The expression is longer than [`MAX_EXPRESSION_LEN`].
    #[error("cron expression is {len} bytes long, more than {max}")]
    ExpressionTooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The expression does not parse.
    #[error("invalid cron expression {expression:?}: {reason}")]
    InvalidExpression {
        /// The expression as given.
        expression: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The expression parses but can never fire: one of its time fields (second, minute, hour)
    /// matches no value (`0 0 , * * *`), or no date in a whole 400-year Gregorian cycle matches
    /// its month and day fields (`0 0 30 2 *`).
    #[error("cron expression {expression:?} can never fire")]
    NeverFires {
        /// The expression as given.
        expression: String,
    },
    /// The zone name is not in the tz database compiled into this binary.
    #[error("unknown time zone {zone:?}")]
    UnknownZone {
        /// The name as given.
        zone: String,
    },
    /// Stored zone rules violate a structural constraint.
    #[error("invalid zone rules: {reason}")]
    InvalidZoneRules {
        /// The violated constraint.
        reason: String,
    },
    /// The instant is not an RFC 3339 date-time.
    #[error("invalid RFC 3339 instant {input:?}: {reason}")]
    InvalidInstant {
        /// The input as given.
        input: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A search ran out of its step budget ([`SEARCH_STEP_BUDGET`],
    /// [`LATEST_IN_SEARCH_BUDGET`]) before finding its answer; every replica stops at the same
    /// step.
    #[error("cron search for {expression:?} ran out of its step budget")]
    SearchBudgetExhausted {
        /// The expression searched.
        expression: String,
    },
    /// A preview asked for more than [`MAX_PREVIEW_COUNT`] instants.
    #[error("preview of {count} instants requested, at most {max} allowed")]
    PreviewTooLong {
        /// The requested count.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An interval holds more than [`MAX_INSTANTS_BETWEEN`] fire instants
    /// ([`CronSchedule::instants_between`]).
    #[error("more than {max} fire instants in the interval")]
    TooManyInstants {
        /// The limit.
        max: usize,
    },
    /// An exclusion calendar violates a structural constraint ([`ExclusionCalendar::new`]).
    #[error("invalid exclusion calendar: {reason}")]
    InvalidCalendar {
        /// The violated constraint.
        reason: String,
    },
    /// A search under an exclusion calendar made [`MAX_EXCLUDED_SKIPS`] skips without finding
    /// its answer; every replica stops at the same skip.
    #[error("search for {expression:?} under calendar {calendar:?} ran out of its skip budget")]
    CalendarBudgetExhausted {
        /// The expression searched.
        expression: String,
        /// The calendar's name.
        calendar: String,
    },
    /// The calendar excludes every fire instant of the expression once its dates and spans are
    /// past ([`ExclusionCalendar::check_fires`]): the schedule could never fire again.
    #[error("cron expression {expression:?} never fires under calendar {calendar:?}")]
    ExcludedForever {
        /// The expression.
        expression: String,
        /// The calendar's name.
        calendar: String,
    },
}

/// Most instants [`CronSchedule::instants_between`] returns.
pub const MAX_INSTANTS_BETWEEN: usize = 100_000;

/// A validated cron expression together with the zone rules its local times are read in.
///
/// Stored form (serde and bincode): the expression text and the zone rules; decoding re-parses
/// and re-validates, so a schedule that exists is always valid.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "CronScheduleData", into = "CronScheduleData")]
pub struct CronSchedule {
    expression: String,
    zone: ZoneRules,
    cron: croner::Cron,
    /// The second, minute and hour fields as bit sets (derived from `cron`).
    times: TimeIndex,
    /// The month and day fields as bit sets per month shape (derived from `cron`).
    days: DayIndex,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression && self.zone == other.zone
    }
}

impl Eq for CronSchedule {}

/// The stored shape of a [`CronSchedule`].
#[derive(Serialize, Deserialize, bincode::Encode, bincode::Decode)]
struct CronScheduleData {
    expression: String,
    zone: ZoneRules,
}

impl CronSchedule {
    /// Parses `expression` evaluated in UTC.
    ///
    /// Syntax: 5 fields (minute hour day-of-month month day-of-week) or 6 (with seconds first);
    /// ranges, steps, lists, names (`MON`, `JAN`), `L`, `W`, `#`, `+` (day-of-month AND
    /// day-of-week, as a prefix of the day-of-week field) and the nicknames in [`NICKNAMES`]
    /// (`@daily`, `@midnight`, …; any other `@name` is rejected and the error lists them). A
    /// year field is not accepted.
    ///
    /// # Errors
    /// [`CronError::ExpressionTooLong`], [`CronError::InvalidExpression`] or
    /// [`CronError::NeverFires`].
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        Self::parse_in(expression, ZoneRules::utc())
    }

    /// Parses `expression` evaluated in the local time of `zone`.
    ///
    /// # Errors
    /// As [`CronSchedule::parse`].
    pub fn parse_in(expression: &str, zone: ZoneRules) -> Result<Self, CronError> {
        if expression.len() > MAX_EXPRESSION_LEN {
            return Err(CronError::ExpressionTooLong {
                len: expression.len(),
                max: MAX_EXPRESSION_LEN,
            });
        }
        let invalid = |reason: String| CronError::InvalidExpression {
            expression: expression.to_owned(),
            reason,
        };
        // croner upper-cases and substitutes names; keep its input to plain printable ASCII so
        // no Unicode case mapping can change a pattern's length or meaning.
        if let Some(c) = expression
            .chars()
            .find(|c| !(c.is_ascii_graphic() || *c == ' '))
        {
            return Err(invalid(format!("character {c:?} not allowed")));
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let pattern = expand_nickname(expression).map_err(invalid)?;
        let cron = parser.parse(pattern).map_err(|e| invalid(e.to_string()))?;
        let times = TimeIndex::new(&cron.pattern);
        if times.first_at_or_after(0).is_none() {
            tracing::debug!(expression, "cron: a time field matches no value; rejected");
            return Err(CronError::NeverFires {
                expression: expression.to_owned(),
            });
        }
        let days = DayIndex::new(&cron.pattern);
        if !can_ever_fire(&times, &days) {
            tracing::debug!(expression, "cron: pattern can never fire; rejected");
            return Err(CronError::NeverFires {
                expression: expression.to_owned(),
            });
        }
        Ok(Self {
            expression: expression.to_owned(),
            zone,
            cron,
            times,
            days,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone rules local times are read in.
    pub fn zone(&self) -> &ZoneRules {
        &self.zone
    }

    /// The first fire instant strictly after `time_ms` (ms since the Unix epoch), or `None` when
    /// there is none before year 4000 (or `time_ms` is at or beyond it), or when the search
    /// spends its [`SEARCH_STEP_BUDGET`] (logged; [`Self::try_next_after`] tells the cases
    /// apart). The outcome is a function of the schedule and `time_ms` only.
    pub fn next_after(&self, time_ms: TimeMs) -> Option<TimeMs> {
        match self.try_next_after(time_ms) {
            Ok(next) => next,
            Err(error) => {
                tracing::warn!(expression = %self.expression, time_ms, %error, "cron: search stopped");
                None
            }
        }
    }

    /// [`Self::next_after`], with a spent budget as an error.
    ///
    /// # Errors
    /// [`CronError::SearchBudgetExhausted`] when the search spends [`SEARCH_STEP_BUDGET`] steps.
    pub fn try_next_after(&self, time_ms: TimeMs) -> Result<Option<TimeMs>, CronError> {
        let budget = Budget::new(SEARCH_STEP_BUDGET);
        self.next_after_in(time_ms, &budget)
            .map_err(|Exhausted| CronError::SearchBudgetExhausted {
                expression: self.expression.clone(),
            })
    }

    /// [`Self::next_after`] under `budget`.
    fn next_after_in(&self, time_ms: TimeMs, budget: &Budget) -> Result<Option<TimeMs>, Exhausted> {
        let from_s = time_ms.div_euclid(1_000);
        if from_s >= MAX_SEARCH_S {
            return Ok(None);
        }
        // Before 1900 the zone rules are a single offset anyway; start just before 1900 (the
        // answer is still strictly after `time_ms`).
        let from_s = from_s.max(MIN_SEARCH_S - 1);
        let next_s = if self.is_wall_clock() {
            self.next_wall_clock_s(from_s, budget)?
        } else {
            self.croner_next_s(from_s, budget)?
        };
        let Some(next_s) = next_s.filter(|&s| s < MAX_SEARCH_S) else {
            return Ok(None);
        };
        let next_ms = next_s.checked_mul(1_000);
        debug_assert!(next_ms.is_none_or(|ms| ms > time_ms));
        Ok(next_ms)
    }

    /// Whether the pattern names specific hours (its hour field is neither `*` nor `*/n`): such a
    /// job is about wall-clock times, so each matching wall time runs once even across DST (see
    /// the module documentation). Jobs with a wildcard hour run on real elapsed time.
    pub fn is_wall_clock(&self) -> bool {
        !self.cron.pattern.hours.from_wildcard
    }

    /// croner's answer strictly after `from_s` (UTC seconds), `Ok(None)` when croner finds
    /// none (it gives up at year 5000).
    ///
    /// A walk that reaches a wall time inside a spring-forward gap is stopped there (croner
    /// would step through the gap a second at a time: up to a day of steps, e.g. Pacific/Apia
    /// skipped all of 2011-12-30) and resumed, inclusive, at the instant the gap ends: no wall
    /// time in the gap exists, so an interval job's next run is the first match from the end
    /// of the gap, and a wall-clock job's swallowed run is found by [`Self::first_gap_run_s`].
    /// Each resumption starts at a later transition and costs at least one step: bounded.
    fn croner_next_s(&self, from_s: i64, budget: &Budget) -> Result<Option<i64>, Exhausted> {
        let mut from_s = from_s;
        let mut inclusive = false;
        loop {
            let Some((start_s, start_inclusive)) = self.walk_start(from_s, inclusive) else {
                return Ok(None);
            };
            (from_s, inclusive) = (start_s, start_inclusive);
            let start = ZonedSecond::new(from_s, &self.zone, budget);
            // Exclusive search from the whole second: fire instants are whole seconds, so
            // "after the second containing time_ms" is exactly "strictly after time_ms".
            // A resumed search starts at a transition instant, which is after the original start
            // and may itself fire (e.g. local midnight right after the jump): inclusive.
            match self.cron.find_next_occurrence(&start, inclusive) {
                Ok(next) => return Ok(Some(next.utc_s)),
                Err(error) => match budget.take_stop() {
                    Some(Stop::Exhausted) => return Err(Exhausted),
                    Some(Stop::Gap(local_s)) => {
                        let Some(end_s) = self.gap_end_after(from_s, local_s) else {
                            // Not reachable with validated rules; stop deterministically.
                            tracing::warn!(expression = %self.expression, from_s, local_s,
                                "cron: gap without a transition; search stopped");
                            return Err(Exhausted);
                        };
                        from_s = end_s;
                        inclusive = true;
                    }
                    None => {
                        tracing::debug!(expression = %self.expression, from_s, %error,
                            "cron: croner found no occurrence");
                        return Ok(None);
                    }
                },
            }
        }
    }

    /// Where croner's walk from `from_s` should start so that it never walks day by day over
    /// days that cannot match (croner steps one day at a time, ~40 years of steps for a rare
    /// `0 0 29 2 +MON`): `from_s` itself when a matching wall time is left on its local day
    /// (or its wall time comes round again after a fall-back), otherwise, inclusive, the first
    /// instant of the next matching local day ([`DayIndex`], one lookup per month). `None`:
    /// no matching day before the search horizon.
    fn walk_start(&self, from_s: i64, inclusive: bool) -> Option<(i64, bool)> {
        let offset_s = self.zone.offset_at(from_s);
        let local_s = from_s.saturating_add(i64::from(offset_s));
        let day = local_s.div_euclid(86_400);
        let tod = local_s.rem_euclid(86_400) as u32;
        let first_tod = if inclusive {
            Some(tod)
        } else {
            tod.checked_add(1)
        };
        let today_left = self.days.matches(day)
            && first_tod.is_some_and(|t| self.times.first_at_or_after(t).is_some());
        let repeated = matches!(
            self.zone.resolve_local(local_s),
            LocalResolution::Ambiguous(earlier, later) if earlier == offset_s && earlier != later
        );
        if today_left || repeated {
            return Some((from_s, inclusive));
        }
        let last_day = MAX_SEARCH_S.div_euclid(86_400).saturating_add(2);
        let next_day = self
            .days
            .next_matching_day(day.saturating_add(1), last_day)?;
        let midnight_s = next_day.saturating_mul(86_400);
        let start_s = match self.zone.resolve_local(midnight_s) {
            LocalResolution::Single(o) | LocalResolution::Ambiguous(o, _) => {
                midnight_s.saturating_sub(i64::from(o))
            }
            LocalResolution::Gap => self.gap_end_after(from_s, midnight_s)?,
        };
        // Only ever move forward; anything else (not expected) is left to croner.
        Some(if start_s > from_s {
            (start_s, true)
        } else {
            (from_s, inclusive)
        })
    }

    /// The UTC instant at which the spring-forward gap holding local second `local_s` ends: the
    /// first forward transition after `from_s` whose gap contains it.
    fn gap_end_after(&self, from_s: i64, local_s: i64) -> Option<i64> {
        let transitions = self.zone.transitions();
        let first = transitions.partition_point(|t| t.at_utc_s <= from_s);
        (first..transitions.len()).find_map(|index| {
            let t = transitions.get(index)?;
            let before_s = match index.checked_sub(1) {
                Some(i) => transitions.get(i).map_or(0, |p| p.offset_s),
                None => self.zone.initial_offset_s(),
            };
            let start_local_s = t.at_utc_s + i64::from(before_s);
            let end_local_s = t.at_utc_s + i64::from(t.offset_s);
            (start_local_s <= local_s && local_s < end_local_s).then_some(t.at_utc_s)
        })
    }

    /// The next run of a wall-clock job strictly after `from_s`: croner's answer, corrected so
    /// that a matching wall time inside a spring-forward gap runs once at the end of the gap and
    /// a wall time repeated by a fall-back runs only at its earlier instant. (croner already
    /// does both for single-time patterns; this extends it to lists, ranges and minute steps
    /// within specific hours, e.g. `0 1,13 * * *` or `*/15 2 * * *`.)
    fn next_wall_clock_s(&self, from_s: i64, budget: &Budget) -> Result<Option<i64>, Exhausted> {
        let mut cur_s = from_s;
        // Each round either returns or moves past one fall-back overlap; a handful suffices (a
        // zone has at most a few transitions between two runs of a job that fires at all).
        for _round in 0..16 {
            let found = self.croner_next_s(cur_s, budget)?;
            let upper_s = found.unwrap_or(MAX_SEARCH_S);
            if let Some(gap_run_s) = self.first_gap_run_s(cur_s, upper_s, budget)? {
                return Ok(Some(gap_run_s));
            }
            let Some(found_s) = found else {
                return Ok(None);
            };
            match self.later_fold_end_s(found_s) {
                // On the repeated half of an overlap: that wall time already had its run at the
                // earlier instant; search on from the end of the overlap.
                Some(end_s) => cur_s = end_s - 1,
                None => return Ok(Some(found_s)),
            }
        }
        Err(Exhausted)
    }

    /// The first forward clock jump at `at` with `from_s < at <= upper_s` that swallowed a
    /// matching wall time, provided the wall date right after the jump still matches the day
    /// fields (croner's own rule for single-time jobs): the job runs at `at`.
    fn first_gap_run_s(
        &self,
        from_s: i64,
        upper_s: i64,
        budget: &Budget,
    ) -> Result<Option<i64>, Exhausted> {
        let transitions = self.zone.transitions();
        let first = transitions.partition_point(|t| t.at_utc_s <= from_s);
        for index in first..transitions.len() {
            let Some(t) = transitions.get(index) else {
                break;
            };
            if t.at_utc_s > upper_s {
                break;
            }
            if !budget.charge() {
                return Err(Exhausted);
            }
            let before_s = match index.checked_sub(1) {
                Some(i) => transitions.get(i).map_or(0, |p| p.offset_s),
                None => self.zone.initial_offset_s(),
            };
            if t.offset_s <= before_s {
                continue;
            }
            let gap_start_local_s = t.at_utc_s + i64::from(before_s);
            let gap_end_local_s = t.at_utc_s + i64::from(t.offset_s);
            // Whether a matching wall second lies in the gap, from the field sets (no search).
            let swallowed = self
                .first_wall_match(gap_start_local_s, gap_end_local_s)
                .is_some();
            if swallowed && self.day_fields_match(gap_end_local_s) {
                return Ok(Some(t.at_utc_s));
            }
        }
        Ok(None)
    }

    /// The first wall time (local seconds, read as if UTC) in `[from_local_s, to_local_s)` that
    /// the pattern matches, computed from the field sets: at most a few days (a gap is shorter
    /// than two days), each costing a few bit scans ([`TimeIndex`]).
    fn first_wall_match(&self, from_local_s: i64, to_local_s: i64) -> Option<i64> {
        let first_day = from_local_s.div_euclid(86_400);
        let last_day = to_local_s.saturating_sub(1).div_euclid(86_400);
        for day in first_day..=last_day.min(first_day.saturating_add(3)) {
            let day_start_s = day * 86_400;
            if !self.day_fields_match(day_start_s) {
                continue;
            }
            let from_tod = (from_local_s - day_start_s).clamp(0, 86_400) as u32;
            if let Some(tod) = self.times.first_at_or_after(from_tod) {
                let at_s = day_start_s + i64::from(tod);
                return (at_s < to_local_s).then_some(at_s);
            }
        }
        None
    }

    /// If `utc_s` is on the later half of a fall-back overlap, the UTC instant where that half
    /// ends (the first instant whose wall time is no longer repeated).
    fn later_fold_end_s(&self, utc_s: i64) -> Option<i64> {
        let offset_s = self.zone.offset_at(utc_s);
        let local_s = utc_s + i64::from(offset_s);
        match self.zone.resolve_local(local_s) {
            LocalResolution::Ambiguous(earlier, later) if later == offset_s && earlier != later => {
                let transitions = self.zone.transitions();
                let index = transitions
                    .partition_point(|t| t.at_utc_s <= utc_s)
                    .checked_sub(1)?;
                let at_s = transitions.get(index)?.at_utc_s;
                let before_s = match index.checked_sub(1) {
                    Some(i) => transitions.get(i).map_or(0, |p| p.offset_s),
                    None => self.zone.initial_offset_s(),
                };
                Some(at_s + i64::from(before_s) - i64::from(offset_s))
            }
            _ => None,
        }
    }

    /// Whether the wall date of local time `local_s` matches the month and day fields.
    fn day_fields_match(&self, local_s: i64) -> bool {
        let days = local_s.div_euclid(86_400);
        let (year, month, day) = zoned::civil_from_days(days);
        let Ok(year) = i32::try_from(year) else {
            return false;
        };
        self.cron.pattern.month_match(month).unwrap_or(false)
            && self
                .cron
                .pattern
                .day_match(year, month, day, weekday_from_days(days))
                .unwrap_or(false)
    }

    /// Up to `count` successive fire instants strictly after `from_ms`. Each is one
    /// [`Self::next_after`] under its own [`SEARCH_STEP_BUDGET`]; the preview stops at the
    /// first search that finds nothing or spends its budget.
    pub fn preview(&self, from_ms: TimeMs, count: usize) -> Vec<TimeMs> {
        let mut out = Vec::with_capacity(count.min(MAX_PREVIEW_COUNT));
        let mut at_ms = from_ms;
        while out.len() < count {
            match self.next_after(at_ms) {
                Some(next_ms) => {
                    out.push(next_ms);
                    at_ms = next_ms;
                }
                None => break,
            }
        }
        out
    }

    /// Every fire instant in `(from_ms, to_ms]`, ascending: the instants a ledger's entry
    /// runs for between two agreed times (a DST check: `0 17 * * MON-FRI` in Europe/London
    /// across the last Sunday of March gives 16:00 UTC then 17:00 UTC, without hand-written
    /// offsets).
    ///
    /// # Errors
    /// [`CronError::TooManyInstants`] past [`MAX_INSTANTS_BETWEEN`] instants (ask for a
    /// shorter interval), [`CronError::SearchBudgetExhausted`] when a search spends its budget.
    pub fn instants_between(
        &self,
        from_ms: TimeMs,
        to_ms: TimeMs,
    ) -> Result<Vec<TimeMs>, CronError> {
        let mut out = Vec::new();
        let mut at_ms = from_ms;
        while at_ms < to_ms {
            match self.try_next_after(at_ms)? {
                Some(next_ms) if next_ms <= to_ms => {
                    if out.len() == MAX_INSTANTS_BETWEEN {
                        return Err(CronError::TooManyInstants {
                            max: MAX_INSTANTS_BETWEEN,
                        });
                    }
                    out.push(next_ms);
                    at_ms = next_ms;
                }
                _ => break,
            }
        }
        Ok(out)
    }
}

impl TryFrom<CronScheduleData> for CronSchedule {
    type Error = CronError;

    fn try_from(data: CronScheduleData) -> Result<Self, Self::Error> {
        Self::parse_in(&data.expression, data.zone)
    }
}

impl From<CronSchedule> for CronScheduleData {
    fn from(schedule: CronSchedule) -> Self {
        Self {
            expression: schedule.expression,
            zone: schedule.zone,
        }
    }
}

validated_codec!(CronSchedule, CronScheduleData { expression, zone });

/// A search ran out of its budget (internal; [`CronError::SearchBudgetExhausted`] outside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exhausted;

/// The second, minute and hour fields of a pattern as bit sets (bit `v` set when value `v`
/// matches), so the first matching time of day is a few bit operations, never a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimeIndex {
    seconds: u64,
    minutes: u64,
    hours: u32,
}

impl TimeIndex {
    fn new(p: &croner::CronPattern) -> Self {
        let set = |n: u32, f: &dyn Fn(u32) -> Result<bool, croner::errors::CronError>| {
            (0..n)
                .filter(|&v| f(v).unwrap_or(false))
                .fold(0u64, |bits, v| bits | (1 << v))
        };
        Self {
            seconds: set(60, &|v| p.second_match(v)),
            minutes: set(60, &|v| p.minute_match(v)),
            hours: set(24, &|v| p.hour_match(v)) as u32,
        }
    }

    /// The first second of the day (0..86 400) at or after `from_tod` whose hour, minute and
    /// second match: at most two candidate hours and two candidate minutes, each one bit scan.
    fn first_at_or_after(&self, from_tod: u32) -> Option<u32> {
        fn first_from(bits: u64, from: u32) -> Option<u32> {
            let left = bits.checked_shr(from).unwrap_or(0);
            (left != 0).then(|| from + left.trailing_zeros())
        }
        if self.seconds == 0 || self.minutes == 0 || self.hours == 0 {
            return None;
        }
        let (from_h, from_m, from_s) = (from_tod / 3_600, from_tod / 60 % 60, from_tod % 60);
        let mut h = first_from(u64::from(self.hours), from_h)?;
        loop {
            if h >= 24 {
                return None;
            }
            let same_hour = h == from_h;
            let mut m = first_from(self.minutes, if same_hour { from_m } else { 0 });
            while let Some(minute) = m.filter(|&m| m < 60) {
                let s0 = if same_hour && minute == from_m {
                    from_s
                } else {
                    0
                };
                if let Some(second) = first_from(self.seconds, s0).filter(|&s| s < 60) {
                    return Some(h * 3_600 + minute * 60 + second);
                }
                m = first_from(self.minutes, minute + 1);
            }
            h = first_from(u64::from(self.hours), h + 1)?;
        }
    }
}

/// Whether the pattern can ever fire: its second, minute and hour fields each match some value
/// (so every matching day has a matching wall time), and some date matches its month and day
/// fields (some month shape has a matching day, see [`DayIndex`]). Exact in wall time (a
/// fixed-time job in a DST gap still fires after the gap); a job whose only matching wall times
/// all fall in some zone's gaps is admitted and its searches end, within their budget, with
/// `None`.
fn can_ever_fire(times: &TimeIndex, days: &DayIndex) -> bool {
    times.first_at_or_after(0).is_some() && days.any()
}

/// The month and day fields of a pattern as one bit set of matching days per *month shape*.
///
/// Without a year field, whether a day matches depends only on the month, the month's length
/// and the weekday of its 1st (that is all `L`, `W` and `#` look at): 12 months × 7 weekdays,
/// plus 7 leap Februaries, 91 shapes of at most 31 days, computed once at admission. Every shape
/// occurs in the Gregorian calendar (the 28 years 2000–2027 contain them all), so the pattern
/// matches some date iff some set is non-empty (exact, no search); and the next matching day
/// from any date is found month by month with one lookup each, never day by day.
#[derive(Debug, Clone)]
struct DayIndex {
    /// `masks[m][w]`: bit `d - 1` set when day `d` of month `m + 1` (12: a leap February)
    /// whose 1st is weekday `w` (0 = Sunday) matches the month and day fields.
    masks: [[u32; 7]; 13],
}

impl DayIndex {
    fn new(p: &croner::CronPattern) -> Self {
        let mut masks = [[0u32; 7]; 13];
        for (index, shape) in masks.iter_mut().enumerate() {
            // A common year (2001) and, for the leap February, a leap year (2000): croner's
            // day match reads the year only for the month's length.
            let (year, month) = if index == 12 {
                (2000, 2)
            } else {
                (2001, index as u32 + 1)
            };
            if !p.month_match(month).unwrap_or(false) {
                continue;
            }
            let len = month_len_days(year, month);
            for (first_weekday, mask) in shape.iter_mut().enumerate() {
                for day in 1..=len {
                    let weekday = croner::Weekday::from_days_from_sunday(
                        (first_weekday as u32 + day - 1) % 7,
                    );
                    if p.day_match(year, month, day, weekday).unwrap_or(false) {
                        *mask |= 1 << (day - 1);
                    }
                }
            }
        }
        Self { masks }
    }

    /// Whether any date matches.
    fn any(&self) -> bool {
        self.masks.iter().flatten().any(|&m| m != 0)
    }

    /// The matching days of month `month` of `year`, and that month's first day (days since the
    /// epoch).
    fn month_mask(&self, year: i64, month: u32) -> (u32, i64) {
        let first = days_from_civil(year, month, 1);
        let weekday = weekday_from_days(first).num_days_from_sunday() as usize % 7;
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let index = if month == 2 && leap {
            12
        } else {
            (month as usize).saturating_sub(1).min(11)
        };
        (self.masks[index][weekday], first)
    }

    /// Whether day `days` (since the epoch) matches.
    fn matches(&self, days: i64) -> bool {
        let (year, month, day) = zoned::civil_from_days(days);
        let (mask, _) = self.month_mask(year, month);
        mask & (1 << (day - 1)) != 0
    }

    /// The first matching day at or after `from_days`, if there is one no later than
    /// `last_days`. One lookup per month: at most 12 per year searched.
    fn next_matching_day(&self, from_days: i64, last_days: i64) -> Option<i64> {
        let (mut year, mut month, day) = zoned::civil_from_days(from_days);
        // Days before `day` in the first month are excluded.
        let mut skip = (1u32 << (day - 1)) - 1;
        loop {
            let (mask, first) = self.month_mask(year, month);
            if first > last_days {
                return None;
            }
            let left = mask & !skip;
            if left != 0 {
                let found = first + i64::from(left.trailing_zeros());
                return (found <= last_days).then_some(found);
            }
            skip = 0;
            (year, month) = if month == 12 {
                (year + 1, 1)
            } else {
                (year, month + 1)
            };
        }
    }
}

fn month_len_days(year: i32, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The next `count` fire instants of `expression` strictly after `from` (RFC 3339), in the zone
/// named `zone` (IANA, from this binary's tz database; `None` = UTC), formatted RFC 3339 in UTC
/// with a `Z` suffix (`2026-03-29T01:00:00Z`). This is what `sim-bft preview` prints.
///
/// # Errors
/// A bad expression, zone or instant, or `count` above [`MAX_PREVIEW_COUNT`]; each error's
/// message is one line.
pub fn preview(
    expression: &str,
    zone: Option<&str>,
    from: &str,
    count: usize,
) -> Result<Vec<String>, CronError> {
    if count > MAX_PREVIEW_COUNT {
        return Err(CronError::PreviewTooLong {
            count,
            max: MAX_PREVIEW_COUNT,
        });
    }
    let from_ms = parse_rfc3339_ms(from)?;
    let rules = match zone {
        None => ZoneRules::utc(),
        Some(name) => ZoneRules::from_iana(name)?,
    };
    let schedule = CronSchedule::parse_in(expression, rules)?;
    Ok(schedule
        .preview(from_ms, count)
        .into_iter()
        .map(format_rfc3339_ms)
        .collect())
}

/// The nicknames a cron expression may be (case-insensitive), with the 5-field pattern each
/// stands for. `@reboot` has no meaning on agreed time and is not among them.
pub const NICKNAMES: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// The pattern croner parses for `expression`: a nickname's 5 fields, else the expression itself.
/// An unknown `@name` is an error naming the known nicknames.
fn expand_nickname(expression: &str) -> Result<&str, String> {
    let trimmed = expression.trim();
    if !trimmed.starts_with('@') {
        return Ok(expression);
    }
    NICKNAMES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(trimmed))
        .map(|(_, pattern)| *pattern)
        .ok_or_else(|| {
            let known: Vec<&str> = NICKNAMES.iter().map(|(name, _)| *name).collect();
            format!("unknown nickname (known: {})", known.join(", "))
        })
}

/// Parses an RFC 3339 instant to milliseconds since the Unix epoch.
///
/// A leap second (`23:59:60`, chrono's representation of it) is read as the last millisecond
/// of the minute before it, `23:59:59.999`: it lies before the next midnight, so a search
/// strictly after it still finds that midnight.
///
/// # Errors
/// [`CronError::InvalidInstant`].
pub fn parse_rfc3339_ms(input: &str) -> Result<TimeMs, CronError> {
    chrono::DateTime::parse_from_rfc3339(input.trim())
        .map(|dt| {
            use chrono::Timelike as _;
            if dt.nanosecond() >= 1_000_000_000 {
                dt.timestamp().saturating_mul(1_000).saturating_add(999)
            } else {
                dt.timestamp_millis()
            }
        })
        .map_err(|e| CronError::InvalidInstant {
            input: input.to_owned(),
            reason: e.to_string(),
        })
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC (`Z`), with milliseconds only when
/// they are not zero. Out-of-range values fall back to the raw number with an `ms` suffix.
pub fn format_rfc3339_ms(time_ms: TimeMs) -> String {
    match chrono::DateTime::from_timestamp_millis(time_ms) {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        None => format!("{time_ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules with a one-hour gap at local midnight on each of `days` days from 2030-01-01
    /// (and a fall-back at noon, so offsets stay bounded).
    fn daily_midnight_gaps(days: i64) -> ZoneRules {
        let first_day = days_from_civil(2030, 1, 1);
        let transitions = (first_day..first_day + days)
            .flat_map(|d| {
                [
                    ZoneTransition {
                        at_utc_s: d * 86_400,
                        offset_s: 3_600,
                    },
                    ZoneTransition {
                        at_utc_s: d * 86_400 + 43_200,
                        offset_s: 0,
                    },
                ]
            })
            .collect();
        ZoneRules::from_parts("Gappy".to_owned(), 0, transitions).unwrap()
    }

    #[test]
    fn a_spent_budget_is_a_deterministic_stop() {
        // `* */24 * * *` is an interval job (wildcard-step hour) matching only hour 0, which
        // every day's gap swallows: each day costs the search a step or more.
        let schedule = CronSchedule::parse_in("* */24 * * *", daily_midnight_gaps(100)).unwrap();
        let from_ms = parse_rfc3339_ms("2029-12-31T12:00:00Z").unwrap();
        for steps in [1, 10, 50] {
            let budget = Budget::new(steps);
            assert_eq!(schedule.next_after_in(from_ms, &budget), Err(Exhausted));
            // Same input, same budget: same outcome, and nothing left over between searches.
            let again = Budget::new(steps);
            assert_eq!(schedule.next_after_in(from_ms, &again), Err(Exhausted));
        }
        // With the full budget the search crosses all 100 gaps: the first run is at midnight
        // after the rules end (2030-04-11, offset 0 from noon on 2030-04-10).
        let next = schedule.try_next_after(from_ms).unwrap();
        assert_eq!(
            next.map(format_rfc3339_ms).as_deref(),
            Some("2030-04-11T00:00:00Z")
        );
    }

    #[test]
    fn time_index_finds_the_first_matching_second() {
        let cron = |e: &str| CronSchedule::parse(e).unwrap();
        let times = cron("10,20 30 5,7 * * *").times;
        assert_eq!(times.first_at_or_after(0), Some(5 * 3_600 + 30 * 60 + 10));
        assert_eq!(
            times.first_at_or_after(5 * 3_600 + 30 * 60 + 11),
            Some(5 * 3_600 + 30 * 60 + 20)
        );
        assert_eq!(
            times.first_at_or_after(5 * 3_600 + 30 * 60 + 21),
            Some(7 * 3_600 + 30 * 60 + 10)
        );
        assert_eq!(times.first_at_or_after(7 * 3_600 + 30 * 60 + 21), None);
        assert_eq!(times.first_at_or_after(86_399), None);
        // Brute force agreement on a few patterns.
        for e in [
            "*/7 */13 */5 * * *",
            "59 59 23 * * *",
            "0 0 0 * * *",
            "5-10 * 22 * * *",
        ] {
            let s = cron(e);
            let p = &s.cron.pattern;
            for from in (0..86_400).step_by(37) {
                let want = (from..86_400).find(|&t| {
                    p.hour_match(t / 3_600).unwrap()
                        && p.minute_match(t / 60 % 60).unwrap()
                        && p.second_match(t % 60).unwrap()
                });
                assert_eq!(s.times.first_at_or_after(from), want, "{e} from {from}");
            }
        }
    }

    #[test]
    fn day_index_agrees_with_croner_day_by_day() {
        for e in [
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 * * 5#5",
            "0 0 29 2 +MON",
            "0 0 LW * *",
            "0 0 31 * MON",
        ] {
            let s = CronSchedule::parse(e).unwrap();
            let first = days_from_civil(2000, 1, 1);
            for day in first..first + 2 * 366 {
                let (y, m, d) = zoned::civil_from_days(day);
                let want = s.cron.pattern.month_match(m).unwrap()
                    && s.cron
                        .pattern
                        .day_match(y as i32, m, d, weekday_from_days(day))
                        .unwrap();
                assert_eq!(s.days.matches(day), want, "{e} on {y}-{m}-{d}");
                let next = s.days.next_matching_day(day, first + 20 * 366);
                let brute = (day..first + 20 * 366).find(|&x| {
                    let (y, m, d) = zoned::civil_from_days(x);
                    s.cron.pattern.month_match(m).unwrap()
                        && s.cron
                            .pattern
                            .day_match(y as i32, m, d, weekday_from_days(x))
                            .unwrap()
                });
                assert_eq!(next, brute, "{e} from {y}-{m}-{d}");
            }
        }
    }
}
