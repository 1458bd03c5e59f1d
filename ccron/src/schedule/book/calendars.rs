//! Exclusion calendars of the book's schedules (book layout 11): calendars installed in the
//! book as shared data, like zones ([`ScheduleRequest::InstallCalendar`]), and named by
//! recurring cron schedules ([`ScheduleRequest::SetCalendar`],
//! [`ScheduleRequest::CreateExcluding`]).
//!
//! The calendar is the cron tables' [`ExclusionCalendar`] with the same semantics as a table
//! entry's ([`CronRule::excluding`](crate::schedule::CronRule::excluding)): local dates,
//! yearly dates and weekdays are read in the *schedule's* zone, spans are UTC instants; an
//! excluded instant is skipped, never postponed (the schedule's occurrences are the allowed
//! fire instants of its expression, [`CronSchedule::try_next_allowed_after`]); a late tick's
//! misfire policy chooses among the allowed instants it reached
//! ([`CronSchedule::try_latest_allowed_in`]); a schedule the calendar keeps from ever firing
//! again is refused at admission ([`ExclusionCalendar::check_fires`]:
//! [`ScheduleError::Cron`] with [`CronError::ExcludedForever`]). A search that spends its
//! skip budget stops the schedule (no next point, traced), the same on every replica, as a
//! table rule's does.
//!
//! Calendars are stored with the zones in the zones part of the book's range (and in the
//! log's segments that change them): [`MAX_BOOK_CALENDARS`] at most, and together with the
//! zones within [`Limits::max_zones_bytes`](super::Limits::max_zones_bytes); an install
//! beyond either is [`ScheduleError::Limit`], nothing changes. Recurring schedules take a
//! calendar (a one-shot naming one is [`ScheduleError::Invalid`]).
//!
//! Periodic schedules (book layout 12 reserves the name's bytes for them): one grid for all,
//! the same rule as cron. The occurrences of `Every { period_ms, start_ms }` under a calendar
//! are the grid points `start + k·period` the calendar allows; an excluded point is skipped,
//! never postponed (the grid's phase never moves), and a late tick's misfire policy chooses
//! among the allowed points it reached. A grid has no zone: local dates, yearly dates and
//! weekdays are read in UTC, spans are UTC instants as for cron. A grid the calendar keeps
//! from ever firing is refused ([`CronError::ExcludedForever`], or the search's
//! [`CronError::CalendarBudgetExhausted`]): past 4000-01-03 only the yearly dates and weekdays
//! apply, which repeat every 400 years (146,097 days, whole weeks), so a grid with an allowed
//! point past it has allowed points forever ([`check_grid_fires`]).

use std::sync::{Arc, OnceLock};

#[cfg(doc)]
use super::ScheduleRequest;
use super::timing::every_after;
use super::{
    Bounds, NewSchedule, Overlap, Record, RunPolicy, ScheduleError, Scheduler, Target, Timing,
};
use crate::authz::{Action, Principal};
use crate::codec;
use crate::cron::{CronError, CronSchedule, ExclusionCalendar, MAX_EXCLUDED_SKIPS, ZoneRules};
use crate::due::Due;
use crate::tick::TimeMs;

/// Most exclusion calendars one book holds.
pub const MAX_BOOK_CALENDARS: usize = 64;

/// Encoded bytes of a record's calendar name at its largest (an option tag, a length and
/// [`crate::cron::MAX_CALENDAR_NAME_LEN`] bytes): what placement adds to every recurring
/// record, so that naming a calendar never moves a record off its page.
pub(super) const CALENDAR_REF_BYTES: usize = 1 + 8 + crate::cron::MAX_CALENDAR_NAME_LEN;

/// The first fire instant of `cron` strictly after `after_ms` that `calendar` allows (every
/// fire instant without a calendar). A search that spends its skip budget gives `None` (the
/// schedule stops, as a table rule does), traced.
pub(super) fn allowed_after(
    cron: &CronSchedule,
    calendar: Option<&ExclusionCalendar>,
    after_ms: TimeMs,
) -> Option<TimeMs> {
    let Some(calendar) = calendar else {
        return cron.next_after(after_ms);
    };
    cron.try_next_allowed_after(after_ms, calendar)
        .unwrap_or_else(|error| {
            stopped(&error);
            None
        })
}

/// The latest `count` allowed fire instants of `cron` in `(after_ms, through_ms]`, ascending.
pub(super) fn allowed_latest(
    cron: &CronSchedule,
    calendar: Option<&ExclusionCalendar>,
    after_ms: TimeMs,
    through_ms: TimeMs,
    count: usize,
) -> Vec<TimeMs> {
    let Some(calendar) = calendar else {
        return cron.latest_in(after_ms, through_ms, count);
    };
    cron.try_latest_allowed_in(after_ms, through_ms, count, calendar)
        .unwrap_or_else(|error| {
            stopped(&error);
            Vec::new()
        })
}

/// `Ok` when a schedule of `timing` (parsed as `cron`) still fires under `calendar`.
///
/// # Errors
/// [`ScheduleError::Cron`] when it never would; [`ScheduleError::NeedsTime`] for a periodic
/// grid without its origin (`Every { start_ms: None }` before admission fixed it at the
/// agreed time: which points a calendar allows depends on the grid's phase);
/// [`ScheduleError::Invalid`] for a one-shot timing, and for a cron timing not parsed.
fn check_fires(
    calendar: &ExclusionCalendar,
    timing: &Timing,
    cron: Option<&CronSchedule>,
) -> Result<(), ScheduleError> {
    match (timing, cron) {
        (Timing::Cron { .. }, Some(cron)) => Ok(calendar.check_fires(cron)?),
        (Timing::Cron { .. }, None) => Err(ScheduleError::Invalid(
            "a cron schedule's expression must be parsed before its calendar is checked".into(),
        )),
        (
            Timing::Every {
                period_ms,
                start_ms: Some(start),
            },
            _,
        ) => Ok(check_grid_fires(*start, *period_ms, calendar)?),
        // A recurring schedule whose grid has no origin yet: not a one-shot, so never the
        // "recurring schedules only" refusal; its origin is the admission's agreed time.
        (Timing::Every { start_ms: None, .. }, _) => Err(ScheduleError::NeedsTime),
        _ => Err(ScheduleError::Invalid(
            "an exclusion calendar applies to recurring schedules only (cron or periodic)".into(),
        )),
    }
}

/// The zone a periodic schedule's calendar reads local dates in: UTC (a grid has no zone).
fn utc() -> &'static ZoneRules {
    static UTC: OnceLock<ZoneRules> = OnceLock::new();
    UTC.get_or_init(ZoneRules::utc)
}

/// 4000-01-03T00:00:00Z: past it no date or span of any calendar applies (dates are years
/// 1900..=3999, spans end by 4000-01-01; two days' margin), only yearly dates and weekdays.
const REPEATING_FROM_MS: TimeMs = 64_060_761_600_000;

fn grid_name(start: TimeMs, period_ms: i64) -> String {
    format!("every {period_ms} ms from {start} ms")
}

/// The first point of the grid `start + k·period` (k >= 0) strictly after `after_ms` that
/// `calendar` allows (local dates in UTC; every point without a calendar). A search that
/// spends its skip budget gives `None` (the schedule stops, as a cron schedule's does), traced.
pub(crate) fn grid_allowed_after(
    start: TimeMs,
    period_ms: i64,
    calendar: Option<&ExclusionCalendar>,
    after_ms: TimeMs,
) -> Option<TimeMs> {
    let Some(calendar) = calendar else {
        return every_after(start, period_ms, after_ms);
    };
    try_grid_after(start, period_ms, calendar, after_ms).unwrap_or_else(|error| {
        stopped(&error);
        None
    })
}

/// [`grid_allowed_after`] with a calendar: excluded stretches are skipped whole, at most
/// [`MAX_EXCLUDED_SKIPS`] of them.
fn try_grid_after(
    start: TimeMs,
    period_ms: i64,
    calendar: &ExclusionCalendar,
    after_ms: TimeMs,
) -> Result<Option<TimeMs>, CronError> {
    let mut from_ms = after_ms;
    for _ in 0..MAX_EXCLUDED_SKIPS {
        let Some(t) = every_after(start, period_ms, from_ms) else {
            return Ok(None);
        };
        match calendar.excluded_until(t, utc()) {
            None => return Ok(Some(t)),
            // The first point at or after the end of the excluded stretch.
            Some(end_ms) => from_ms = end_ms.saturating_sub(1),
        }
    }
    Err(CronError::CalendarBudgetExhausted {
        expression: grid_name(start, period_ms),
        calendar: calendar.name().to_owned(),
    })
}

/// The latest `count` points of the grid `start + k·period` in `(after_ms, through_ms]` that
/// `calendar` allows, ascending (fewer when the interval holds fewer; none when the search
/// spends its skip budget, traced). O(count + skips), never a walk over every point.
pub(crate) fn grid_allowed_latest(
    start: TimeMs,
    period_ms: i64,
    calendar: &ExclusionCalendar,
    after_ms: TimeMs,
    through_ms: TimeMs,
    count: usize,
) -> Vec<TimeMs> {
    let mut found_desc = Vec::new();
    let mut upper_ms = through_ms;
    let mut skips = 0u32;
    while found_desc.len() < count && upper_ms > after_ms && upper_ms >= start && period_ms > 0 {
        let Some(k) = upper_ms.checked_sub(start).map(|d| d.div_euclid(period_ms)) else {
            break;
        };
        // k·period <= upper - start: no overflow.
        let t = start.saturating_add(k.saturating_mul(period_ms));
        if t <= after_ms {
            break;
        }
        match calendar.excluded_since(t, utc()) {
            None => {
                found_desc.push(t);
                upper_ms = t.saturating_sub(1);
            }
            Some(since_ms) => {
                skips += 1;
                if skips > MAX_EXCLUDED_SKIPS {
                    stopped(&CronError::CalendarBudgetExhausted {
                        expression: grid_name(start, period_ms),
                        calendar: calendar.name().to_owned(),
                    });
                    return Vec::new();
                }
                upper_ms = since_ms.saturating_sub(1);
            }
        }
    }
    found_desc.reverse();
    found_desc
}

/// Checks, at admission, that the grid `start + k·period` still fires under `calendar` (see
/// the module documentation: a point allowed past 4000-01-03 has allowed points forever).
///
/// # Errors
/// [`CronError::ExcludedForever`] when no point is allowed past it;
/// [`CronError::CalendarBudgetExhausted`] when the search spends its budget (refused too: it
/// would stop on some tick).
pub(crate) fn check_grid_fires(
    start: TimeMs,
    period_ms: i64,
    calendar: &ExclusionCalendar,
) -> Result<(), CronError> {
    match try_grid_after(start, period_ms, calendar, REPEATING_FROM_MS)? {
        Some(_) => Ok(()),
        None => Err(CronError::ExcludedForever {
            expression: grid_name(start, period_ms),
            calendar: calendar.name().to_owned(),
        }),
    }
}

fn stopped(error: &CronError) {
    tracing::warn!(%error, "schedule book: a search under an exclusion calendar stopped");
}

impl Scheduler {
    /// The exclusion calendar installed under `name` (read-only).
    pub fn calendar(&self, name: &str) -> Option<&ExclusionCalendar> {
        self.calendars.get(name).map(|c| &**c)
    }

    /// The installed calendars' names, ascending.
    pub fn calendar_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.calendars.keys().map(String::as_str)
    }

    /// Requests refused because of a calendar ([`ScheduleRequest::InstallCalendar`],
    /// [`ScheduleRequest::SetCalendar`], [`ScheduleRequest::CreateExcluding`]: any error): the
    /// replicated [`RefusalCounters::calendar`](super::RefusalCounters::calendar) (book layout
    /// 13; stored, so a restart keeps it).
    pub fn calendar_refusals(&self) -> u64 {
        self.refusals.calendar
    }

    /// The calendar record `rec` names (installed: admission and load check it).
    pub(super) fn calendar_of(&self, rec: &Record) -> Option<&ExclusionCalendar> {
        rec.calendar
            .as_deref()
            .and_then(|n| self.calendars.get(n))
            .map(|c| &**c)
    }

    /// The calendar named `name`, installed, for a schedule of `timing` parsed as `cron`:
    /// checked the way a table rule's is ([`ExclusionCalendar::check_fires`]; a periodic
    /// grid by [`check_grid_fires`]).
    ///
    /// # Errors
    /// [`ScheduleError::UnknownCalendar`], [`ScheduleError::Invalid`] (a one-shot timing),
    /// [`ScheduleError::Cron`] ([`CronError::ExcludedForever`], or a search budget spent).
    pub(super) fn calendar_for(
        &self,
        name: &str,
        timing: &Timing,
        cron: Option<&CronSchedule>,
    ) -> Result<Arc<ExclusionCalendar>, ScheduleError> {
        let calendar = self
            .calendars
            .get(name)
            .cloned()
            .ok_or_else(|| ScheduleError::UnknownCalendar(name.to_owned()))?;
        check_fires(&calendar, timing, cron)?;
        Ok(calendar)
    }

    /// Counts and traces a request refused because of a calendar; returns the error.
    pub(super) fn refuse_calendar(&mut self, error: ScheduleError) -> ScheduleError {
        self.refuse(|r| &mut r.calendar);
        tracing::warn!(component = self.component, %error, "schedule book: calendar request refused");
        error
    }

    /// [`shared_len`](Self::shared_len), refused when the zones part would exceed
    /// [`Limits::max_zones_bytes`](super::Limits::max_zones_bytes) or the next save would not
    /// fit the book's log ([`check_log`](Self::check_log)): the check a zone's and a
    /// calendar's install share.
    pub(super) fn shared_fits(
        &self,
        zone: Option<&ZoneRules>,
        calendar: Option<&ExclusionCalendar>,
    ) -> Result<usize, ScheduleError> {
        let len = self.shared_len(zone, calendar)?;
        if let Some(max) = self.limits.max_zones_bytes
            && len > max
        {
            return Err(ScheduleError::Limit(format!(
                "the zones and calendars would take {len} bytes, the book's zones part holds {max}"
            )));
        }
        self.check_log(
            self.placement.records() as u64,
            self.placement.placed_bytes,
            len,
        )?;
        Ok(len)
    }

    /// Encoded bytes of the zones part with `zone` and `calendar` installed in place of their
    /// names' (the zones ascending by name, then the calendars ascending by name: what a save
    /// writes).
    pub(super) fn shared_len(
        &self,
        zone: Option<&ZoneRules>,
        calendar: Option<&ExclusionCalendar>,
    ) -> Result<usize, ScheduleError> {
        let mut zones: Vec<&ZoneRules> = self
            .zones
            .iter()
            .filter(|(n, _)| zone.is_none_or(|z| z.name() != n.as_str()))
            .map(|(_, z)| z)
            .collect();
        if let Some(z) = zone {
            let at = zones.partition_point(|o| o.name() < z.name());
            zones.insert(at, z);
        }
        let mut calendars: Vec<&ExclusionCalendar> = self
            .calendars
            .iter()
            .filter(|(n, _)| calendar.is_none_or(|c| c.name() != n.as_str()))
            .map(|(_, c)| &**c)
            .collect();
        if let Some(c) = calendar {
            let at = calendars.partition_point(|o| o.name() < c.name());
            calendars.insert(at, c);
        }
        Ok(codec::encoded_len(&(zones, calendars))?)
    }

    /// [`ScheduleRequest::InstallCalendar`] from `by` (admins only, as for zones): see
    /// [`Self::install_calendar`]; a refusal is counted and traced.
    pub(super) fn admit_install_calendar(
        &mut self,
        by: &Principal,
        calendar: ExclusionCalendar,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<u64>, ScheduleError> {
        self.authorize(by, Action::InstallZone, None)?;
        self.install_calendar(calendar, seq, now_ms)
            .map_err(|e| self.refuse_calendar(e))?;
        Ok(None)
    }

    /// [`ScheduleRequest::SetCalendar`] from `by` on `target` (its owner or an admin): see
    /// [`Self::set_calendar`]; a refusal is counted and traced.
    pub(super) fn admit_set_calendar(
        &mut self,
        by: &Principal,
        target: &Target,
        calendar: Option<String>,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<u64>, ScheduleError> {
        let id = self.resolve(target)?;
        self.authorize(by, Action::Replace, Some(id))?;
        self.set_calendar(id, calendar, now_ms)
            .map_err(|e| self.refuse_calendar(e))?;
        Ok(Some(id))
    }

    /// [`ScheduleRequest::CreateExcluding`] from `by`: a new schedule (its key, if any, not in
    /// use) naming `calendar`, with its run policy, bounds and overlap policy; a refusal is
    /// counted and traced.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_excluding(
        &mut self,
        by: &Principal,
        schedule: NewSchedule,
        policy: RunPolicy,
        bounds: Bounds,
        overlap: Overlap,
        calendar: String,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<u64>, ScheduleError> {
        let created = super::overlap::check_policy(overlap, schedule.timing.is_one_shot())
            .and_then(|()| {
                self.authorize(by, Action::Create, None)?;
                if let Some(k) = &schedule.key
                    && self.keys.contains_key(k)
                {
                    return Err(ScheduleError::KeyInUse(k.clone()));
                }
                self.insert_new(
                    *by,
                    schedule,
                    policy,
                    bounds,
                    Some(calendar),
                    handlers_ok,
                    seq,
                    now_ms,
                )
            });
        let id = created.map_err(|e| self.refuse_calendar(e))?;
        self.admit_overlap(id, overlap);
        Ok(Some(id))
    }

    /// [`ScheduleRequest::InstallCalendar`] (the caller authorized it): installs `calendar`
    /// (or replaces the one of its name) and re-evaluates the schedules naming it, as
    /// [`ScheduleRequest::InstallZone`] does for a zone's: a schedule's next point becomes the
    /// first allowed instant after the request's agreed time, or at or after its old point when
    /// that was already reached. Every schedule naming it is checked first
    /// ([`ExclusionCalendar::check_fires`]): one the new calendar would keep from ever firing
    /// refuses the install, nothing changes. A scan of the book (calendar installs are rare
    /// administrative requests).
    pub(super) fn install_calendar(
        &mut self,
        calendar: ExclusionCalendar,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let name = calendar.name().to_owned();
        if !self.calendars.contains_key(&name) && self.calendars.len() >= MAX_BOOK_CALENDARS {
            return Err(ScheduleError::Limit(format!(
                "at most {MAX_BOOK_CALENDARS} exclusion calendars"
            )));
        }
        let len = self.shared_fits(None, Some(&calendar))?;
        let naming: Vec<u64> = self
            .records
            .iter()
            .filter(|(_, r)| r.calendar.as_deref() == Some(name.as_str()))
            .map(|(id, _)| *id)
            .collect();
        for &id in &naming {
            if let Some(r) = self.records.get(&id) {
                check_fires(&calendar, &r.def.timing, self.crons.get(&id))?;
            }
        }
        self.calendars.insert(name, Arc::new(calendar));
        self.zones_bytes = len;
        self.header_dirty = true;
        for id in naming {
            let Some(rec) = self.records.get(&id).filter(|r| r.retired.is_none()) else {
                continue;
            };
            let from_ms = match (rec.next, now_ms) {
                (Some(Due::Time(t)), Some(now)) => t.saturating_sub(1).min(now),
                (Some(Due::Time(t)), None) => t.saturating_sub(1),
                (_, Some(now)) => now,
                (_, None) => continue,
            };
            let next = self.occurrence_after(id, rec, from_ms).map(Due::Time);
            self.unindex(id);
            if let Some(r) = self.records.get_mut(&id) {
                r.next = next;
            }
            self.reindex(id);
            self.touch(id);
            self.retire_if_done(id, seq, now_ms);
        }
        Ok(())
    }

    /// [`ScheduleRequest::SetCalendar`] on schedule `id` (the caller resolved and authorized
    /// it): names `calendar` (or none). Its next point becomes the first allowed occurrence
    /// within its bounds at or after its current one (strictly after the request's agreed time
    /// when it has none); runs still owed from a catch-up are dropped (as
    /// [`ScheduleRequest::SetBounds`] does); version + 1. A retired schedule only records the
    /// name (new bounds revive it).
    ///
    /// # Errors
    /// [`ScheduleError::UnknownCalendar`], [`ScheduleError::Invalid`] (not a cron schedule,
    /// also for `None`), [`ScheduleError::Cron`] ([`CronError::ExcludedForever`]: it could
    /// never fire again),
    /// [`ScheduleError::NeverFires`] (no allowed occurrence before its end bound),
    /// [`ScheduleError::NeedsTime`]. Nothing changes.
    pub(super) fn set_calendar(
        &mut self,
        id: u64,
        calendar: Option<String>,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        // Only a recurring schedule takes a calendar, or has one to remove (a one-shot's next
        // point is not recomputed here: `None` would spend it).
        if rec.def.timing.is_one_shot() {
            return Err(ScheduleError::Invalid(
                "an exclusion calendar applies to recurring schedules only (cron or periodic)"
                    .into(),
            ));
        }
        if let Some(name) = &calendar {
            self.calendar_for(name, &rec.def.timing, self.crons.get(&id))?;
        }
        let mut probe = rec.clone();
        probe.calendar = calendar.clone();
        let next = if rec.retired.is_some() {
            rec.next
        } else {
            let from = match rec.next {
                Some(Due::Time(t)) => t.saturating_sub(1),
                _ => now_ms.ok_or(ScheduleError::NeedsTime)?,
            };
            let next = self.occurrence_after(id, &probe, from);
            if next.is_none() && rec.bounds.ends_at_ms.is_some() {
                return Err(ScheduleError::NeverFires(super::RetireReason::Ended));
            }
            next.map(Due::Time)
        };
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            if r.retired.is_none() {
                r.next = next;
                r.owed = None;
            }
            r.calendar = calendar;
            r.version = r.version.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::due::Due;

    /// Each timing a calendar cannot be checked against is refused for its own reason: an
    /// unanchored grid needs the admission's time (never "recurring schedules only"), a
    /// one-shot is not recurring.
    #[test]
    fn calendar_checks_name_the_real_cause() {
        let cal = ExclusionCalendar::new(
            "xmas",
            vec![crate::cron::Exclusion::Annual { month: 12, day: 25 }],
        )
        .unwrap();
        let unanchored = Timing::Every {
            period_ms: 60_000,
            start_ms: None,
        };
        assert_eq!(
            check_fires(&cal, &unanchored, None),
            Err(ScheduleError::NeedsTime)
        );
        let anchored = Timing::Every {
            period_ms: 60_000,
            start_ms: Some(0),
        };
        assert_eq!(check_fires(&cal, &anchored, None), Ok(()));
        assert!(matches!(
            check_fires(&cal, &Timing::At(Due::Time(5)), None),
            Err(ScheduleError::Invalid(m)) if m.contains("recurring schedules only")
        ));
        let cron = Timing::Cron {
            expression: "0 9 * * *".into(),
            zone: None,
        };
        assert!(matches!(
            check_fires(&cal, &cron, None),
            Err(ScheduleError::Invalid(m)) if m.contains("parsed")
        ));
    }
}
