//! Exclusion calendars: days and spans on which a cron schedule does not fire ("every weekday
//! at 09:30 except the business's holidays", Quartz's `HolidayCalendar`, Temporal's
//! `ScheduleSpec.exclude_calendar`).
//!
//! An [`ExclusionCalendar`] is plain, validated data (like [`ZoneRules`]): a name and a set of
//! [`Exclusion`]s. Local dates, yearly dates and weekdays are read in the *schedule's* zone
//! (a holiday is a local day); a [`Exclusion::Span`] is an interval of UTC instants. A fire
//! instant the calendar excludes is skipped, not postponed: the schedule's next instant is its
//! first *allowed* one ([`CronSchedule::try_next_allowed_after`]), and a catch-up runs only
//! allowed instants ([`CronSchedule::try_latest_allowed_in`]).
//!
//! Searches skip whole excluded stretches at once (a run of excluded local days, bounded by the
//! zone's next transition, or a span), never every excluded fire instant one by one, and run
//! under a deterministic budget of [`MAX_EXCLUDED_SKIPS`] skips: a spent budget is the same
//! typed error ([`CronError::CalendarBudgetExhausted`]) on every replica.
//! [`ExclusionCalendar::check_fires`] refuses, at admission, a schedule the calendar keeps from
//! ever firing again.

use serde::{Deserialize, Serialize};

use super::zoned::{civil_from_days, days_from_civil};
use super::{CronError, CronSchedule, MAX_SEARCH_S, MIN_SEARCH_S, ZoneRules};
use crate::tick::TimeMs;

/// Most exclusions one calendar holds.
pub const MAX_EXCLUSIONS: usize = 1_024;

/// Longest calendar name, in bytes.
pub const MAX_CALENDAR_NAME_LEN: usize = 64;

/// Skips one allowed-instant search may make ([`CronSchedule::try_next_allowed_after`],
/// [`CronSchedule::try_latest_allowed_in`]). A skip passes a whole excluded stretch: a span,
/// or a run of up to [`MAX_DAYS_PER_SKIP`] excluded local days within one zone period.
pub const MAX_EXCLUDED_SKIPS: u32 = 4_096;

/// Longest run of excluded local days one skip passes (a calendar excluding every day of the
/// year but one needs 1,460 days between two allowed Februaries 29th).
pub const MAX_DAYS_PER_SKIP: i64 = 1_500;

/// Seconds per day.
const DAY_S: i64 = 86_400;

/// Days of a 400-year Gregorian cycle: weekdays and yearly dates repeat with it (146,097 days
/// are exactly 20,871 weeks).
const CYCLE_DAYS: i64 = 146_097;

/// One rule of an [`ExclusionCalendar`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
pub enum Exclusion {
    /// One local date (proleptic Gregorian, years 1900..=3999).
    Date {
        /// The year.
        year: i32,
        /// The month, 1..=12.
        month: u8,
        /// The day of the month, valid for that month and year.
        day: u8,
    },
    /// The same local date every year (`{12, 25}`); February 29th only in leap years.
    Annual {
        /// The month, 1..=12.
        month: u8,
        /// The day of the month, 1..=the month's longest length.
        day: u8,
    },
    /// Local weekdays: bit `d` set excludes weekday `d`, numbered as cron's day-of-week field
    /// (0 = Sunday … 6 = Saturday). Not every day (that calendar could never allow a fire).
    Weekdays {
        /// The weekday bits, within `0x01..=0x7e` or any set of at most six days.
        mask: u8,
    },
    /// The UTC instants `[from_ms, until_ms)` (a maintenance window, a freeze).
    Span {
        /// First excluded instant.
        from_ms: TimeMs,
        /// First instant after the span (ending no later than 4000-01-01T00:00:00Z).
        until_ms: TimeMs,
    },
}

/// A validated exclusion calendar: a name and its [`Exclusion`]s, kept sorted and without
/// duplicates (the canonical form its encoding and fingerprint use).
///
/// Stored form (serde and bincode): the name and the exclusions; decoding re-validates, so a
/// calendar that exists is always valid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CalendarData", into = "CalendarData")]
pub struct ExclusionCalendar {
    name: String,
    exclusions: Vec<Exclusion>,
    index: Index,
}

/// What the searches read: derived from the exclusions, so not compared.
#[derive(Debug, Clone, Default)]
struct Index {
    /// Excluded local dates as days since 1970-01-01, ascending.
    dates: Vec<i64>,
    /// Yearly dates: bit `day` of `annual[month]`.
    annual: [u32; 13],
    /// Excluded weekdays (bit 0 = Sunday).
    weekdays: u8,
    /// Spans, merged (disjoint, not touching) and ascending.
    spans: Vec<(TimeMs, TimeMs)>,
}

impl PartialEq for Index {
    fn eq(&self, _: &Self) -> bool {
        // Derived from the exclusions, which are compared.
        true
    }
}

impl Eq for Index {}

/// The stored shape of an [`ExclusionCalendar`].
#[derive(Debug, Clone, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
struct CalendarData {
    name: String,
    exclusions: Vec<Exclusion>,
}

fn invalid(reason: impl Into<String>) -> CronError {
    CronError::InvalidCalendar {
        reason: reason.into(),
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn month_len(year: i64, month: u8) -> u8 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Weekday of `days` since 1970-01-01 (a Thursday), 0 = Sunday.
fn weekday(days: i64) -> u8 {
    // rem_euclid(7) is in 0..7.
    (days + 4).rem_euclid(7) as u8
}

impl ExclusionCalendar {
    /// A calendar named `name` excluding `exclusions` (in any order; duplicates are merged).
    ///
    /// # Errors
    /// [`CronError::InvalidCalendar`]: an empty, too long or non-printable name, more than
    /// [`MAX_EXCLUSIONS`] exclusions, a date that does not exist or lies outside 1900..=3999,
    /// a weekday mask excluding no day or every day, an empty span or one ending after
    /// 4000-01-01, or rules that together exclude every day forever.
    pub fn new(name: &str, exclusions: Vec<Exclusion>) -> Result<Self, CronError> {
        if name.is_empty() || name.len() > MAX_CALENDAR_NAME_LEN {
            return Err(invalid(format!(
                "calendar name must be 1..={MAX_CALENDAR_NAME_LEN} bytes"
            )));
        }
        if !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid("calendar name must be printable ASCII"));
        }
        if exclusions.len() > MAX_EXCLUSIONS {
            return Err(invalid(format!(
                "{} exclusions, at most {MAX_EXCLUSIONS}",
                exclusions.len()
            )));
        }
        let mut exclusions = exclusions;
        exclusions.sort_unstable();
        exclusions.dedup();
        let mut index = Index::default();
        let mut spans = Vec::new();
        for exclusion in &exclusions {
            match *exclusion {
                Exclusion::Date { year, month, day } => {
                    let y = i64::from(year);
                    if !(1900..=3999).contains(&y) {
                        return Err(invalid(format!("date year {year} outside 1900..=3999")));
                    }
                    if !(1..=12).contains(&month) || day == 0 || day > month_len(y, month) {
                        return Err(invalid(format!("no date {year}-{month:02}-{day:02}")));
                    }
                    index
                        .dates
                        .push(days_from_civil(y, u32::from(month), u32::from(day)));
                }
                Exclusion::Annual { month, day } => {
                    // A leap year gives every month its longest length.
                    if !(1..=12).contains(&month) || day == 0 || day > month_len(2000, month) {
                        return Err(invalid(format!("no yearly date {month:02}-{day:02}")));
                    }
                    index.annual[usize::from(month)] |= 1 << day;
                }
                Exclusion::Weekdays { mask } => {
                    if mask == 0 || mask >= 0x7f {
                        return Err(invalid(format!(
                            "weekday mask {mask:#04x} must exclude 1 to 6 days"
                        )));
                    }
                    index.weekdays |= mask;
                }
                Exclusion::Span { from_ms, until_ms } => {
                    if from_ms >= until_ms {
                        return Err(invalid(format!("empty span [{from_ms}, {until_ms})")));
                    }
                    if until_ms > MAX_SEARCH_S.saturating_mul(1_000) {
                        return Err(invalid("span ends after 4000-01-01T00:00:00Z"));
                    }
                    spans.push((from_ms, until_ms));
                }
            }
        }
        if index.weekdays == 0x7f {
            return Err(invalid("the weekday masks together exclude every day"));
        }
        index.dates.sort_unstable();
        index.dates.dedup();
        spans.sort_unstable();
        for (from, until) in spans {
            match index.spans.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(until),
                _ => index.spans.push((from, until)),
            }
        }
        let calendar = Self {
            name: name.to_owned(),
            exclusions,
            index,
        };
        // Weekdays and yearly dates repeat every 400 years: if they exclude a whole cycle,
        // they exclude every day from some point on.
        if (0..CYCLE_DAYS).all(|d| calendar.repeating_day_excluded(d)) {
            return Err(invalid("the yearly dates and weekdays exclude every day"));
        }
        Ok(calendar)
    }

    /// The calendar's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The exclusions, sorted and without duplicates.
    pub fn exclusions(&self) -> &[Exclusion] {
        &self.exclusions
    }

    /// Bytes identifying the calendar (its name and canonical exclusions), for setup digests
    /// and schedule fingerprints.
    pub fn fingerprint(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16 + self.name.len() + 12 * self.exclusions.len());
        v.extend_from_slice(b"calendar");
        v.extend_from_slice(&(self.name.len() as u64).to_le_bytes());
        v.extend_from_slice(self.name.as_bytes());
        v.extend_from_slice(&(self.exclusions.len() as u64).to_le_bytes());
        for e in &self.exclusions {
            match *e {
                Exclusion::Date { year, month, day } => {
                    v.push(0);
                    v.extend_from_slice(&year.to_le_bytes());
                    v.extend_from_slice(&[month, day]);
                }
                Exclusion::Annual { month, day } => v.extend_from_slice(&[1, month, day]),
                Exclusion::Weekdays { mask } => v.extend_from_slice(&[2, mask]),
                Exclusion::Span { from_ms, until_ms } => {
                    v.push(3);
                    v.extend_from_slice(&from_ms.to_le_bytes());
                    v.extend_from_slice(&until_ms.to_le_bytes());
                }
            }
        }
        v
    }

    /// Whether the yearly dates or the weekdays exclude local day `days` (days since
    /// 1970-01-01).
    fn repeating_day_excluded(&self, days: i64) -> bool {
        if self.index.weekdays & (1 << weekday(days)) != 0 {
            return true;
        }
        let (_, month, day) = civil_from_days(days);
        // month is 1..=12 and day 1..=31 by construction.
        self.index.annual[month as usize] & (1 << day) != 0
    }

    /// Whether local day `days` is excluded.
    fn day_excluded(&self, days: i64) -> bool {
        self.repeating_day_excluded(days) || self.index.dates.binary_search(&days).is_ok()
    }

    /// The merged span holding `t_ms`, if any.
    fn span_at(&self, t_ms: TimeMs) -> Option<(TimeMs, TimeMs)> {
        let i = self.index.spans.partition_point(|&(from, _)| from <= t_ms);
        let span = *self.index.spans.get(i.checked_sub(1)?)?;
        (t_ms < span.1).then_some(span)
    }

    /// Whether the calendar excludes instant `t_ms` for a schedule in `zone`.
    pub fn excludes(&self, t_ms: TimeMs, zone: &ZoneRules) -> bool {
        self.span_at(t_ms).is_some() || self.day_excluded(local_day(t_ms, zone).0)
    }

    /// When `t_ms` is excluded, an instant `h > t_ms` such that every instant of
    /// `[t_ms, h)` is excluded (a safe skip, not necessarily the first allowed instant);
    /// `None` when `t_ms` is allowed.
    pub fn excluded_until(&self, t_ms: TimeMs, zone: &ZoneRules) -> Option<TimeMs> {
        let mut h = t_ms;
        // Each round extends the excluded prefix [t_ms, h); spans are merged, so a span and a
        // day run alternate at most a few times per zone period.
        for _ in 0..64 {
            if let Some((_, until)) = self.span_at(h) {
                h = until;
            } else {
                let (days, offset_s) = local_day(h, zone);
                if !self.day_excluded(days) {
                    break;
                }
                h = self.day_run_end(h, days, offset_s, zone);
            }
        }
        (h > t_ms).then_some(h)
    }

    /// When `t_ms` is excluded, an instant `l <= t_ms` such that every instant of
    /// `[l, t_ms]` is excluded; `None` when `t_ms` is allowed.
    pub fn excluded_since(&self, t_ms: TimeMs, zone: &ZoneRules) -> Option<TimeMs> {
        if !self.excludes(t_ms, zone) {
            return None;
        }
        // [l, t_ms] is excluded; extend it backwards while the instant before l is.
        let mut l = t_ms;
        for _ in 0..64 {
            let Some(before) = l.checked_sub(1) else {
                break;
            };
            if let Some((from, _)) = self.span_at(before) {
                l = from;
            } else {
                let (days, offset_s) = local_day(before, zone);
                if !self.day_excluded(days) {
                    break;
                }
                l = self.day_run_start(before, days, offset_s, zone);
            }
        }
        Some(l)
    }

    /// The end of the run of excluded local days starting with `days` (the day of `t_ms`,
    /// under offset `offset_s`), as a UTC instant: the first local midnight after the run under
    /// the same offset, or the zone's next transition, whichever comes first. Greater than
    /// `t_ms`.
    fn day_run_end(&self, t_ms: TimeMs, days: i64, offset_s: i32, zone: &ZoneRules) -> TimeMs {
        let t_s = t_ms.div_euclid(1_000);
        let mut k = 1;
        while k < MAX_DAYS_PER_SKIP && self.day_excluded(days.saturating_add(k)) {
            k += 1;
        }
        let mut end_s = days
            .saturating_add(k)
            .saturating_mul(DAY_S)
            .saturating_sub(i64::from(offset_s));
        let transitions = zone.transitions();
        let next = transitions.partition_point(|tr| tr.at_utc_s <= t_s);
        if let Some(tr) = transitions.get(next) {
            end_s = end_s.min(tr.at_utc_s);
        }
        end_s.saturating_mul(1_000)
    }

    /// The start of the run of excluded local days ending with `days` (the day of `t_ms`,
    /// under offset `offset_s`), as a UTC instant: its first local midnight under the same
    /// offset, or the zone's last transition at or before `t_ms`, whichever comes last. At
    /// most `t_ms`.
    fn day_run_start(&self, t_ms: TimeMs, days: i64, offset_s: i32, zone: &ZoneRules) -> TimeMs {
        let t_s = t_ms.div_euclid(1_000);
        let mut k = 0;
        while k < MAX_DAYS_PER_SKIP && self.day_excluded(days.saturating_sub(k + 1)) {
            k += 1;
        }
        let mut start_s = days
            .saturating_sub(k)
            .saturating_mul(DAY_S)
            .saturating_sub(i64::from(offset_s));
        let transitions = zone.transitions();
        let next = transitions.partition_point(|tr| tr.at_utc_s <= t_s);
        if let Some(tr) = next.checked_sub(1).and_then(|i| transitions.get(i)) {
            start_s = start_s.max(tr.at_utc_s);
        }
        start_s.saturating_mul(1_000).min(t_ms)
    }

    /// The first instant after which only the yearly dates and weekdays exclude anything (the
    /// end of the last date or span, with a day's margin for any zone offset).
    fn finite_end_ms(&self) -> TimeMs {
        let dates_end = self.index.dates.last().map_or(TimeMs::MIN, |&d| {
            d.saturating_add(2).saturating_mul(DAY_S * 1_000)
        });
        let spans_end = self.index.spans.last().map_or(TimeMs::MIN, |s| s.1);
        dates_end.max(spans_end)
    }

    /// Checks, at admission, that `schedule` still fires under this calendar once every date
    /// and span is past: from then on only yearly dates and weekdays apply, and they repeat
    /// every 400 years, so a schedule that fires after that point fires forever.
    ///
    /// # Errors
    /// [`CronError::ExcludedForever`] when no allowed instant exists after that point;
    /// [`CronError::CalendarBudgetExhausted`] or [`CronError::SearchBudgetExhausted`] when the
    /// search spends its budget (refuse such a pair too: it would stop on some tick).
    pub fn check_fires(&self, schedule: &CronSchedule) -> Result<(), CronError> {
        let from_ms = self.finite_end_ms().max(MIN_SEARCH_S.saturating_mul(1_000));
        match schedule.try_next_allowed_after(from_ms, self)? {
            Some(_) => Ok(()),
            None => Err(CronError::ExcludedForever {
                expression: schedule.expression().to_owned(),
                calendar: self.name.clone(),
            }),
        }
    }
}

/// The local day (days since 1970-01-01) of instant `t_ms` in `zone`, and the offset in force.
fn local_day(t_ms: TimeMs, zone: &ZoneRules) -> (i64, i32) {
    let t_s = t_ms.div_euclid(1_000);
    let offset_s = zone.offset_at(t_s);
    (
        t_s.saturating_add(i64::from(offset_s)).div_euclid(DAY_S),
        offset_s,
    )
}

impl TryFrom<CalendarData> for ExclusionCalendar {
    type Error = CronError;

    fn try_from(data: CalendarData) -> Result<Self, Self::Error> {
        Self::new(&data.name, data.exclusions)
    }
}

impl From<ExclusionCalendar> for CalendarData {
    fn from(calendar: ExclusionCalendar) -> Self {
        Self {
            name: calendar.name,
            exclusions: calendar.exclusions,
        }
    }
}

validated_codec!(ExclusionCalendar, CalendarData { name, exclusions });

impl CronSchedule {
    /// The first fire instant strictly after `after_ms` that `calendar` allows (`None` past the
    /// search horizon). Excluded stretches are skipped whole ([`MAX_EXCLUDED_SKIPS`]).
    ///
    /// # Errors
    /// [`CronError::CalendarBudgetExhausted`] after [`MAX_EXCLUDED_SKIPS`] skips,
    /// [`CronError::SearchBudgetExhausted`] when one search spends its budget.
    pub fn try_next_allowed_after(
        &self,
        after_ms: TimeMs,
        calendar: &ExclusionCalendar,
    ) -> Result<Option<TimeMs>, CronError> {
        let mut from_ms = after_ms;
        for _ in 0..MAX_EXCLUDED_SKIPS {
            let Some(next_ms) = self.try_next_after(from_ms)? else {
                return Ok(None);
            };
            match calendar.excluded_until(next_ms, self.zone()) {
                None => return Ok(Some(next_ms)),
                // The first fire at or after the end of the excluded stretch.
                Some(end_ms) => from_ms = end_ms.saturating_sub(1),
            }
        }
        Err(self.calendar_exhausted(calendar))
    }

    /// The latest `count` fire instants in `(after_ms, through_ms]` that `calendar` allows,
    /// ascending (fewer when the interval holds fewer): [`Self::try_latest_in`] with excluded
    /// stretches skipped whole.
    ///
    /// # Errors
    /// [`CronError::CalendarBudgetExhausted`] after [`MAX_EXCLUDED_SKIPS`] skips,
    /// [`CronError::SearchBudgetExhausted`] when a backward search spends its budget.
    pub fn try_latest_allowed_in(
        &self,
        after_ms: TimeMs,
        through_ms: TimeMs,
        count: usize,
        calendar: &ExclusionCalendar,
    ) -> Result<Vec<TimeMs>, CronError> {
        // Collected latest first.
        let mut found_desc: Vec<TimeMs> = Vec::new();
        let mut upper_ms = through_ms;
        let mut skips = 0u32;
        while found_desc.len() < count && upper_ms > after_ms {
            let need = count - found_desc.len();
            let batch = self.try_latest_in(after_ms, upper_ms, need)?;
            let Some(&oldest) = batch.first() else {
                break;
            };
            let mut next_upper = None;
            for &t in batch.iter().rev() {
                match calendar.excluded_since(t, self.zone()) {
                    None => found_desc.push(t),
                    Some(start_ms) => {
                        // Every instant of [start_ms, t] is excluded: search below it.
                        skips += 1;
                        if skips > MAX_EXCLUDED_SKIPS {
                            return Err(self.calendar_exhausted(calendar));
                        }
                        next_upper = Some(start_ms.saturating_sub(1));
                        break;
                    }
                }
            }
            upper_ms = match next_upper {
                Some(upper) => upper,
                None if batch.len() < need => break,
                None => oldest.saturating_sub(1),
            };
        }
        found_desc.reverse();
        Ok(found_desc)
    }

    fn calendar_exhausted(&self, calendar: &ExclusionCalendar) -> CronError {
        CronError::CalendarBudgetExhausted {
            expression: self.expression().to_owned(),
            calendar: calendar.name().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::{format_rfc3339_ms, parse_rfc3339_ms};

    fn at(s: &str) -> TimeMs {
        parse_rfc3339_ms(s).unwrap()
    }

    fn holidays() -> ExclusionCalendar {
        ExclusionCalendar::new(
            "holidays",
            vec![
                Exclusion::Annual { month: 12, day: 25 },
                Exclusion::Annual { month: 1, day: 1 },
                Exclusion::Date {
                    year: 2026,
                    month: 12,
                    day: 24,
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn weekday_numbering_is_crons() {
        // 2026-11-22 is a Sunday.
        assert_eq!(weekday(days_from_civil(2026, 11, 22)), 0);
        assert_eq!(weekday(days_from_civil(2026, 11, 28)), 6);
    }

    #[test]
    fn a_weekday_job_skips_the_holidays_in_its_zone() {
        let berlin = ZoneRules::from_iana("Europe/Berlin").unwrap();
        let job = CronSchedule::parse_in("30 9 * * 1-5", berlin).unwrap();
        let cal = holidays();
        // Wed 2026-12-23 09:30 CET, then Thu 24th and Fri 25th are excluded, then Mon 28th.
        let first = job
            .try_next_allowed_after(at("2026-12-23T00:00:00Z"), &cal)
            .unwrap()
            .unwrap();
        assert_eq!(format_rfc3339_ms(first), "2026-12-23T08:30:00Z");
        let next = job.try_next_allowed_after(first, &cal).unwrap().unwrap();
        assert_eq!(format_rfc3339_ms(next), "2026-12-28T08:30:00Z");
        // Backwards: the latest allowed instant through the 27th is the 23rd.
        let latest = job
            .try_latest_allowed_in(
                at("2026-12-01T00:00:00Z"),
                at("2026-12-27T23:00:00Z"),
                2,
                &cal,
            )
            .unwrap();
        assert_eq!(
            latest
                .iter()
                .map(|&t| format_rfc3339_ms(t))
                .collect::<Vec<_>>(),
            ["2026-12-22T08:30:00Z", "2026-12-23T08:30:00Z"]
        );
    }

    #[test]
    fn invalid_calendars_are_refused_with_a_reason() {
        let bad = [
            vec![Exclusion::Date {
                year: 2027,
                month: 2,
                day: 29,
            }],
            vec![Exclusion::Annual { month: 13, day: 1 }],
            vec![Exclusion::Weekdays { mask: 0 }],
            vec![Exclusion::Weekdays { mask: 0x7f }],
            vec![
                Exclusion::Weekdays { mask: 0x3f },
                Exclusion::Weekdays { mask: 0x40 },
            ],
            vec![Exclusion::Span {
                from_ms: 5,
                until_ms: 5,
            }],
            vec![Exclusion::Span {
                from_ms: 0,
                until_ms: TimeMs::MAX,
            }],
        ];
        for exclusions in bad {
            assert!(
                matches!(
                    ExclusionCalendar::new("c", exclusions.clone()),
                    Err(CronError::InvalidCalendar { .. })
                ),
                "{exclusions:?}"
            );
        }
        // Every yearly date: nothing is ever allowed.
        let every_day = (1..=12u8)
            .flat_map(|m| {
                (1..=month_len(2000, m)).map(move |d| Exclusion::Annual { month: m, day: d })
            })
            .collect();
        assert!(ExclusionCalendar::new("c", every_day).is_err());
        assert!(ExclusionCalendar::new("", vec![]).is_err());
        assert!(ExclusionCalendar::new("a b", vec![]).is_err());
        assert!(ExclusionCalendar::new("empty", vec![]).is_ok());
    }

    #[test]
    fn a_schedule_the_calendar_silences_forever_is_refused() {
        let cal = ExclusionCalendar::new("new-year", vec![Exclusion::Annual { month: 1, day: 1 }])
            .unwrap();
        let yearly = CronSchedule::parse("0 0 1 1 *").unwrap();
        assert!(matches!(
            cal.check_fires(&yearly),
            Err(CronError::ExcludedForever { .. })
        ));
        assert!(
            cal.check_fires(&CronSchedule::parse("0 0 2 1 *").unwrap())
                .is_ok()
        );
        // Only Sundays left, and the job runs on Sundays only when February 29th is one.
        let weekends =
            ExclusionCalendar::new("weekdays", vec![Exclusion::Weekdays { mask: 0x7e }]).unwrap();
        let leap = CronSchedule::parse("0 12 29 2 *").unwrap();
        assert!(weekends.check_fires(&leap).is_ok());
        let next = leap
            .try_next_allowed_after(at("2026-01-01T00:00:00Z"), &weekends)
            .unwrap()
            .unwrap();
        // 2032-02-29 is a Sunday.
        assert_eq!(format_rfc3339_ms(next), "2032-02-29T12:00:00Z");
    }

    #[test]
    fn excluded_day_runs_end_at_the_local_midnight_across_a_dst_change() {
        // Berlin moves from +1 to +2 at 2026-03-29T01:00:00Z, a Sunday.
        let berlin = ZoneRules::from_iana("Europe/Berlin").unwrap();
        let sundays =
            ExclusionCalendar::new("sundays", vec![Exclusion::Weekdays { mask: 0x01 }]).unwrap();
        // Forwards: Sunday 00:00 local (+1) is excluded; Monday 00:00 local is under +2.
        let midnight = CronSchedule::parse_in("0 0 * * *", berlin.clone()).unwrap();
        let next = midnight
            .try_next_allowed_after(at("2026-03-28T22:30:00Z"), &sundays)
            .unwrap()
            .unwrap();
        assert_eq!(format_rfc3339_ms(next), "2026-03-29T22:00:00Z");
        let until = sundays
            .excluded_until(at("2026-03-28T23:00:00Z"), &berlin)
            .unwrap();
        assert!(
            until <= at("2026-03-29T22:00:00Z"),
            "{}",
            format_rfc3339_ms(until)
        );
        // Backwards: Sunday 23:30 local (+2) is excluded; Saturday 23:30 local is under +1.
        let late = CronSchedule::parse_in("30 23 * * *", berlin.clone()).unwrap();
        let latest = late
            .try_latest_allowed_in(
                at("2026-03-20T00:00:00Z"),
                at("2026-03-30T00:00:00Z"),
                1,
                &sundays,
            )
            .unwrap();
        assert_eq!(
            latest
                .iter()
                .map(|&t| format_rfc3339_ms(t))
                .collect::<Vec<_>>(),
            ["2026-03-28T22:30:00Z"]
        );
        let since = sundays
            .excluded_since(at("2026-03-29T21:30:00Z"), &berlin)
            .unwrap();
        assert!(
            since >= at("2026-03-28T23:00:00Z"),
            "{}",
            format_rfc3339_ms(since)
        );
    }

    #[test]
    fn spans_are_utc_and_half_open() {
        let cal = ExclusionCalendar::new(
            "freeze",
            vec![Exclusion::Span {
                from_ms: at("2026-12-01T00:00:00Z"),
                until_ms: at("2026-12-01T01:00:00Z"),
            }],
        )
        .unwrap();
        let every_15 = CronSchedule::parse("*/15 * * * *").unwrap();
        let next = every_15
            .try_next_allowed_after(at("2026-11-30T23:50:00Z"), &cal)
            .unwrap()
            .unwrap();
        assert_eq!(format_rfc3339_ms(next), "2026-12-01T01:00:00Z");
    }

    #[test]
    fn the_stored_form_round_trips_and_is_validated_on_decode() {
        let cal = holidays();
        let bytes = crate::codec::to_blob(&cal).unwrap();
        let back: ExclusionCalendar = crate::codec::from_blob(&bytes).unwrap();
        assert_eq!(back, cal);
        assert_eq!(back.fingerprint(), cal.fingerprint());
        let json = serde_json::to_string(&cal).unwrap();
        let back: ExclusionCalendar = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cal);
        let bad = json.replace("\"day\":25", "\"day\":32");
        assert!(serde_json::from_str::<ExclusionCalendar>(&bad).is_err());
    }

    /// The model's local date: the RFC 3339 text of the local wall time, and Zeller's weekday.
    fn model_excludes(cal: &ExclusionCalendar, t_ms: TimeMs, zone: &ZoneRules) -> bool {
        let offset_ms = i64::from(zone.offset_at(t_ms.div_euclid(1_000))) * 1_000;
        let text = format_rfc3339_ms(t_ms + offset_ms);
        let year: i64 = text[0..4].parse().unwrap();
        let month: u8 = text[5..7].parse().unwrap();
        let day: u8 = text[8..10].parse().unwrap();
        // Zeller (0 = Saturday), turned into cron's numbering (0 = Sunday).
        let (m, y) = if month < 3 {
            (i64::from(month) + 12, year - 1)
        } else {
            (i64::from(month), year)
        };
        let h = (i64::from(day) + 13 * (m + 1) / 5 + y + y / 4 - y / 100 + y / 400) % 7;
        let wd = ((h + 6) % 7) as u8;
        cal.exclusions().iter().any(|e| match *e {
            Exclusion::Date {
                year: ey,
                month: em,
                day: ed,
            } => i64::from(ey) == year && em == month && ed == day,
            Exclusion::Annual { month: em, day: ed } => em == month && ed == day,
            Exclusion::Weekdays { mask } => mask & (1 << wd) != 0,
            Exclusion::Span { from_ms, until_ms } => from_ms <= t_ms && t_ms < until_ms,
        })
    }

    fn zones() -> Vec<ZoneRules> {
        vec![
            ZoneRules::utc(),
            ZoneRules::fixed("X+0530", 19_800).unwrap(),
            ZoneRules::fixed("X-1100", -39_600).unwrap(),
            ZoneRules::from_iana("Europe/Berlin").unwrap(),
            ZoneRules::from_iana("America/Sao_Paulo").unwrap(),
        ]
    }

    const EXPRESSIONS: &[&str] = &[
        "*/7 * * * *",
        "30 9 * * 1-5",
        "30 2 * * *",
        "0 0 * * *",
        "0 */5 * * *",
        "15 23 1,15 * *",
        "0 12 29 2 *",
    ];

    const BASE_MS: TimeMs = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const YEAR_MS: TimeMs = 365 * 86_400_000;

    fn exclusion() -> impl proptest::strategy::Strategy<Value = Exclusion> {
        use proptest::prelude::*;
        prop_oneof![
            (2026..=2027i32, 1..=12u8, 1..=28u8).prop_map(|(year, month, day)| Exclusion::Date {
                year,
                month,
                day
            }),
            (1..=12u8, 1..=29u8).prop_map(|(month, day)| Exclusion::Annual { month, day }),
            (1..=0x7eu8).prop_map(|mask| Exclusion::Weekdays { mask }),
            (0..2 * YEAR_MS, 1..20 * 86_400_000i64).prop_map(|(from, len)| Exclusion::Span {
                from_ms: BASE_MS + from,
                until_ms: BASE_MS + from + len,
            }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

        /// `excludes`, the next allowed instant and the latest allowed instants against a
        /// brute-force model: every fire instant in turn, each judged by the model's calendar.
        #[test]
        fn allowed_instants_match_the_brute_force_model(
            exclusions in proptest::collection::vec(exclusion(), 0..12),
            expr in 0..EXPRESSIONS.len(),
            zone in 0..5usize,
            start in 0..2 * YEAR_MS,
            window in 1..15 * 86_400_000i64,
            count in 1..6usize,
        ) {
            let zone = zones().swap_remove(zone);
            let Ok(cal) = ExclusionCalendar::new("model", exclusions) else {
                return Ok(());
            };
            let job = CronSchedule::parse_in(EXPRESSIONS[expr], zone.clone()).unwrap();
            let from_ms = BASE_MS + start;
            // next: walk every fire instant until the model allows one.
            let mut model_next = None;
            let mut at_ms = from_ms;
            for _ in 0..40_000 {
                match job.next_after(at_ms) {
                    Some(t) if model_excludes(&cal, t, &zone) => {
                        proptest::prop_assert!(cal.excludes(t, &zone));
                        at_ms = t;
                    }
                    Some(t) => {
                        proptest::prop_assert!(!cal.excludes(t, &zone));
                        model_next = Some(t);
                        break;
                    }
                    None => break,
                }
            }
            if let Some(t) = model_next {
                proptest::prop_assert_eq!(job.try_next_allowed_after(from_ms, &cal).unwrap(), Some(t));
            }
            // latest: every instant of the window, filtered by the model, the last `count`.
            let through_ms = from_ms + window;
            let all = job.instants_between(from_ms, through_ms).unwrap();
            let allowed: Vec<TimeMs> =
                all.into_iter().filter(|&t| !model_excludes(&cal, t, &zone)).collect();
            let model_latest = allowed[allowed.len().saturating_sub(count)..].to_vec();
            proptest::prop_assert_eq!(
                job.try_latest_allowed_in(from_ms, through_ms, count, &cal).unwrap(),
                model_latest
            );
        }

        /// The skips are safe: every instant they pass is excluded (sampled), and the
        /// backward bound likewise.
        #[test]
        fn skips_pass_only_excluded_instants(
            exclusions in proptest::collection::vec(exclusion(), 1..12),
            zone in 0..5usize,
            start in 0..2 * YEAR_MS,
        ) {
            let zone = zones().swap_remove(zone);
            let Ok(cal) = ExclusionCalendar::new("model", exclusions) else {
                return Ok(());
            };
            let t = BASE_MS + start;
            proptest::prop_assert_eq!(cal.excludes(t, &zone), model_excludes(&cal, t, &zone));
            if let Some(h) = cal.excluded_until(t, &zone) {
                proptest::prop_assert!(h > t);
                let step = ((h - t) / 97).max(1);
                let mut s = t;
                while s < h {
                    proptest::prop_assert!(model_excludes(&cal, s, &zone), "{} in [{}, {})", s, t, h);
                    s += step;
                }
                proptest::prop_assert!(model_excludes(&cal, h - 1, &zone));
            }
            if let Some(l) = cal.excluded_since(t, &zone) {
                proptest::prop_assert!(l <= t);
                let step = ((t - l) / 97).max(1);
                let mut s = l;
                while s <= t {
                    proptest::prop_assert!(model_excludes(&cal, s, &zone), "{} in [{}, {}]", s, l, t);
                    s += step;
                }
            }
        }
    }
}
