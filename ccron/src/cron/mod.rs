//! Cron expressions evaluated on agreed time, in UTC or in zone rules held as data.
//!
//! [`CronSchedule`] wraps a croner (4.0.3, pinned) pattern validated at admission: a malformed
//! pattern is a typed error, and a pattern that can never fire (`0 0 30 2 *`) is rejected by a
//! bounded calendar scan (at most one 400-year Gregorian cycle of matching months), never found
//! out by a multi-millisecond search on some later tick. `next_after(t)` gives the first fire
//! instant strictly after `t`; hosts store it and compare ticks against it rather than searching
//! on every tick.
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

mod zone;
mod zoned;

use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

pub use zone::{
    LocalResolution, MAX_OFFSET_S, MAX_TRANSITIONS, MAX_ZONE_NAME_LEN, RULES_HORIZON_S,
    RULES_START_S, ZoneRules, ZoneTransition,
};
use zoned::{ZonedSecond, days_from_civil, weekday_from_days};

use crate::tick::TimeMs;

/// Longest cron expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 128;

/// Most instants one preview may return.
pub const MAX_PREVIEW_COUNT: usize = 1_000;

/// Searches start no earlier than 1900-01-01T00:00:00Z (the start of stored zone rules).
pub const MIN_SEARCH_S: i64 = RULES_START_S;

/// Searches never start at or after 4000-01-01T00:00:00Z: `next_after` returns `None` there.
pub const MAX_SEARCH_S: i64 = 64_060_588_800;

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
    /// The expression parses but no date in a whole 400-year Gregorian cycle matches it, so it
    /// can never fire.
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
    /// A preview asked for more than [`MAX_PREVIEW_COUNT`] instants.
    #[error("preview of {count} instants requested, at most {max} allowed")]
    PreviewTooLong {
        /// The requested count.
        count: usize,
        /// The limit.
        max: usize,
    },
}

/// A validated cron expression together with the zone rules its local times are read in.
///
/// Stored form (serde and bincode): the expression text and the zone rules; decoding re-parses
/// and re-validates, so a schedule that exists is always valid.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expression: String,
    zone: ZoneRules,
    cron: croner::Cron,
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
        if !can_ever_fire(&cron) {
            tracing::debug!(expression, "cron: pattern can never fire; rejected");
            return Err(CronError::NeverFires {
                expression: expression.to_owned(),
            });
        }
        Ok(Self {
            expression: expression.to_owned(),
            zone,
            cron,
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
    /// there is none before year 4000 (or `time_ms` is at or beyond it).
    pub fn next_after(&self, time_ms: TimeMs) -> Option<TimeMs> {
        let from_s = time_ms.div_euclid(1_000);
        if from_s >= MAX_SEARCH_S {
            return None;
        }
        // Before 1900 the zone rules are a single offset anyway; start just before 1900 (the
        // answer is still strictly after `time_ms`).
        let from_s = from_s.max(MIN_SEARCH_S - 1);
        let next_s = if self.is_wall_clock() {
            self.next_wall_clock_s(from_s)
        } else {
            self.croner_next_s(from_s)
        }?;
        if next_s >= MAX_SEARCH_S {
            return None;
        }
        let next_ms = next_s.checked_mul(1_000)?;
        debug_assert!(next_ms > time_ms);
        Some(next_ms)
    }

    /// Whether the pattern names specific hours (its hour field is neither `*` nor `*/n`): such a
    /// job is about wall-clock times, so each matching wall time runs once even across DST (see
    /// the module documentation). Jobs with a wildcard hour run on real elapsed time.
    pub fn is_wall_clock(&self) -> bool {
        !self.cron.pattern.hours.from_wildcard
    }

    /// croner's answer strictly after `from_s` (UTC seconds).
    fn croner_next_s(&self, from_s: i64) -> Option<i64> {
        let mut from_s = from_s;
        // croner gives up inside a clock jump longer than two hours (Pacific/Apia skipped all of
        // 2011-12-30). Rather than let the schedule die, resume once past each such jump.
        // Bounded by the attempts.
        let mut inclusive = false;
        for _attempt in 0..4 {
            let start = ZonedSecond::new(from_s, &self.zone);
            // Exclusive search from the whole second: fire instants are whole seconds, so
            // "after the second containing time_ms" is exactly "strictly after time_ms".
            // A resumed search starts at a transition instant, which is after the original start
            // and may itself fire (e.g. local midnight right after the jump): inclusive.
            match self.cron.find_next_occurrence(&start, inclusive) {
                Ok(next) => return Some(next.utc_s),
                Err(error) => {
                    tracing::debug!(
                        expression = %self.expression,
                        from_s,
                        %error,
                        "cron: search failed; resuming after the next zone transition"
                    );
                    let transitions = self.zone.transitions();
                    let next_jump = transitions
                        [transitions.partition_point(|t| t.at_utc_s <= from_s)..]
                        .first()
                        .map(|t| t.at_utc_s)?;
                    from_s = next_jump;
                    inclusive = true;
                }
            }
        }
        None
    }

    /// The next run of a wall-clock job strictly after `from_s`: croner's answer, corrected so
    /// that a matching wall time inside a spring-forward gap runs once at the end of the gap and
    /// a wall time repeated by a fall-back runs only at its earlier instant. (croner already
    /// does both for single-time patterns; this extends it to lists, ranges and minute steps
    /// within specific hours, e.g. `0 1,13 * * *` or `*/15 2 * * *`.)
    fn next_wall_clock_s(&self, from_s: i64) -> Option<i64> {
        let mut cur_s = from_s;
        // Each round either returns or moves past one fall-back overlap; a handful suffices (a
        // zone has at most a few transitions between two runs of a job that fires at all).
        for _round in 0..16 {
            let found = self.croner_next_s(cur_s);
            let upper_s = found.unwrap_or(MAX_SEARCH_S);
            if let Some(gap_run_s) = self.first_gap_run_s(cur_s, upper_s) {
                return Some(gap_run_s);
            }
            let found_s = found?;
            match self.later_fold_end_s(found_s) {
                // On the repeated half of an overlap: that wall time already had its run at the
                // earlier instant; search on from the end of the overlap.
                Some(end_s) => cur_s = end_s - 1,
                None => return Some(found_s),
            }
        }
        None
    }

    /// The first forward clock jump at `at` with `from_s < at <= upper_s` that swallowed a
    /// matching wall time, provided the wall date right after the jump still matches the day
    /// fields (croner's own rule for single-time jobs): the job runs at `at`.
    fn first_gap_run_s(&self, from_s: i64, upper_s: i64) -> Option<i64> {
        let transitions = self.zone.transitions();
        let first = transitions.partition_point(|t| t.at_utc_s <= from_s);
        let utc = ZoneRules::utc();
        for index in first..transitions.len() {
            let t = transitions.get(index)?;
            if t.at_utc_s > upper_s {
                break;
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
            // Search wall time as if it were UTC: the first matching wall second in the gap.
            let probe = ZonedSecond::new(gap_start_local_s - 1, &utc);
            let swallowed = self
                .cron
                .find_next_occurrence(&probe, false)
                .is_ok_and(|m| m.utc_s < gap_end_local_s);
            if swallowed && self.day_fields_match(gap_end_local_s) {
                return Some(t.at_utc_s);
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

    /// Up to `count` successive fire instants strictly after `from_ms`.
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

    /// The latest `count` fire instants in `(after_ms, through_ms]`, ascending (fewer when the
    /// interval holds fewer).
    ///
    /// A catch-up after a long stall wants the *most recent* missed instants without walking
    /// every one of them (a job every second, a year late, has 31 million). The search walks a
    /// window ending at `through_ms` that doubles (from `count` seconds) until it holds `count`
    /// instants or reaches `after_ms`; a window found too dense to walk (instants crowded in its
    /// older half) is halved instead, latest half first. Fire instants are distinct whole
    /// seconds, so a span of fewer than `2·count + 8` seconds is always walked: both searches
    /// end, after O(count + log(span)) searches for evenly spread instants and
    /// O(count · log(span)) at worst.
    pub fn latest_in(&self, after_ms: TimeMs, through_ms: TimeMs, count: usize) -> Vec<TimeMs> {
        if count == 0 || through_ms <= after_ms {
            return Vec::new();
        }
        let mut window_ms = i128::try_from(count)
            .unwrap_or(i128::MAX)
            .saturating_mul(1_000);
        loop {
            let lower_ms = (i128::from(through_ms) - window_ms).max(i128::from(after_ms)) as TimeMs;
            match self.walk_tail(lower_ms, through_ms, count) {
                Some(tail) if tail.len() == count || lower_ms == after_ms => return tail,
                Some(_) => window_ms = window_ms.saturating_mul(2),
                None => return self.latest_by_halving(lower_ms, through_ms, count),
            }
        }
    }

    /// The last `count` instants of `(after_ms, through_ms]` by walking forward, or `None` when
    /// the interval holds more than `2·count + 8` (too many to walk).
    fn walk_tail(&self, after_ms: TimeMs, through_ms: TimeMs, count: usize) -> Option<Vec<TimeMs>> {
        let walk_limit = count.saturating_mul(2).saturating_add(8);
        let mut ring = std::collections::VecDeque::with_capacity(count.min(MAX_PREVIEW_COUNT));
        let mut at_ms = after_ms;
        let mut walked = 0usize;
        while let Some(t) = self.next_after(at_ms).filter(|&t| t <= through_ms) {
            walked += 1;
            if walked > walk_limit {
                return None;
            }
            if ring.len() == count {
                ring.pop_front();
            }
            ring.push_back(t);
            at_ms = t;
        }
        Some(ring.into())
    }

    /// [`Self::latest_in`] by halving: the latest half first, then what is still missing from
    /// the earlier half.
    fn latest_by_halving(&self, after_ms: TimeMs, through_ms: TimeMs, count: usize) -> Vec<TimeMs> {
        if count == 0 || through_ms <= after_ms {
            return Vec::new();
        }
        if let Some(tail) = self.walk_tail(after_ms, through_ms, count) {
            return tail;
        }
        let mid_ms = ((i128::from(after_ms) + i128::from(through_ms)) / 2) as TimeMs;
        let mut latest = self.latest_by_halving(mid_ms, through_ms, count);
        if latest.len() < count {
            let mut earlier = self.latest_by_halving(after_ms, mid_ms, count - latest.len());
            earlier.append(&mut latest);
            latest = earlier;
        }
        latest
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

impl Serialize for CronSchedule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        CronScheduleData {
            expression: self.expression.clone(),
            zone: self.zone.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CronSchedule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let data = CronScheduleData::deserialize(deserializer)?;
        Self::try_from(data).map_err(serde::de::Error::custom)
    }
}

impl bincode::Encode for CronSchedule {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        // Same field order as `CronScheduleData`.
        self.expression.encode(encoder)?;
        self.zone.encode(encoder)
    }
}

impl<Context> bincode::Decode<Context> for CronSchedule {
    fn decode<D: bincode::de::Decoder<Context = Context>>(
        decoder: &mut D,
    ) -> Result<Self, bincode::error::DecodeError> {
        let data = CronScheduleData::decode(decoder)?;
        Self::try_from(data).map_err(|e| bincode::error::DecodeError::OtherString(e.to_string()))
    }
}

bincode::impl_borrow_decode!(CronSchedule);

/// Whether any date matches the pattern's month and day fields, i.e. whether it can ever fire:
/// every pattern has at least one second, minute and hour, and a fixed-time job in a DST gap
/// still fires after the gap.
///
/// Exact and bounded. Without a year field, whether a day matches depends only on the month, the
/// month's length and the weekday of its 1st (that is all `L`, `W` and `#` look at). The 28 years
/// 2000–2027 contain every such combination that the Gregorian calendar has: within them the
/// weekday of any month's 1st takes each value four times, and the seven leap Februaries start on
/// seven different weekdays. So the scan visits each distinct (month, length, weekday of the 1st)
/// once, at most 91 month shapes of at most 31 days, and stops at the first matching day (real
/// patterns stop within days).
fn can_ever_fire(cron: &croner::Cron) -> bool {
    // seen[month][leap-length February][weekday of the 1st]
    let mut seen = [[[false; 7]; 2]; 13];
    for year in 2000..2028_i32 {
        for month in 1..=12_u32 {
            if !cron.pattern.month_match(month).unwrap_or(false) {
                continue;
            }
            let first_days = days_from_civil(i64::from(year), month, 1);
            let month_len = month_len_days(year, month);
            let first_weekday = weekday_from_days(first_days).num_days_from_sunday() as usize;
            let shape = &mut seen[month as usize][usize::from(month_len == 29)][first_weekday % 7];
            if *shape {
                continue;
            }
            *shape = true;
            for day in 1..=month_len {
                let weekday = weekday_from_days(first_days + i64::from(day) - 1);
                if cron
                    .pattern
                    .day_match(year, month, day, weekday)
                    .unwrap_or(false)
                {
                    return true;
                }
            }
        }
    }
    false
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
