//! [`CronRule`]: a cron expression as a known [`Schedule`] of the table's due index.

use super::book::{Misfire, RetireReason, ScheduleError};
use std::sync::Arc;

use crate::cron::{CronError, CronSchedule, ExclusionCalendar};
use crate::due::{Due, Schedule};
use crate::entry::EntryEnd;
use crate::tick::{Tick, TimeMs};

/// A cron expression as an indexed table rule.
///
/// - Without a stored due point (a new entry, or one never evaluated), the rule *arms* on the
///   first tick with agreed time: it stores the first fire instant strictly after that tick's time
///   (or after [`CronRule::starting_after`]'s instant, when given) and runs nothing.
/// - A tick whose time has reached the stored instant runs the action as the entry's misfire
///   policy ([`CronRule::with_misfire`], the book's [`Misfire`]) says, for the instants
///   `r1 < … < rk <= now` it reached, and stores the first instant strictly after the tick's
///   time. The default, [`Misfire::FireOnce`], runs once for the *latest* instant `rk` (a tick
///   after a long stall or a jump forward runs once, not once per missed minute: the fire-once
///   rule of [`crate::MisfirePolicy::FireOnce`]); [`Misfire::Skip`] runs only an on-time tick
///   (`k = 1`); [`Misfire::FireEach`] runs the latest `min(k, cap)` instants, oldest first;
///   [`Misfire::ExpireAfter`] runs `rk` only when it is at most the deadline old. The same
///   rules as the book's schedules, found by the same backward search (never a walk over every
///   missed instant).
/// - Ticks without agreed time never run nor move a cron rule.
/// - With an exclusion calendar ([`CronRule::excluding`]), only the instants it allows exist
///   for the rule: the stored next instant is the first allowed one, and a late tick's
///   misfire policy chooses among the allowed instants it reached (an excluded instant is
///   skipped, never postponed).
///
/// - With an end ([`CronRule::until`]) or a run limit ([`CronRule::with_max_runs`]), the rule
///   has a last instant. Once it ran (or was passed), the stored next instant is the end of
///   time and the entry is *retired*: the step that stores it reports a typed
///   [`EntryRetired`](crate::entry::EntryRetired) in the tick's outcome
///   ([`TickOutcome::retired`](crate::TickOutcome::retired)), counted and traced, and
///   [`CronTable::retired_entries`](crate::CronTable::retired_entries) lists it with its
///   [`EntryEnd`] from then on (derived from the stored instant and the rule: nothing more is
///   persisted). It stays in the table, idle, until the ledger removes or replaces it. A rule
///   that could never fire is refused when it is built ([`ScheduleError::NeverFires`]).
///
/// The stored instant lives in the table's due index and page range like a periodic entry's, so
/// an idle tick costs no cron search at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronRule {
    schedule: CronSchedule,
    after_ms: Option<TimeMs>,
    misfire: Misfire,
    calendar: Option<Arc<ExclusionCalendar>>,
    until_ms: Option<TimeMs>,
    run_limit: Option<RunLimit>,
}

/// A run limit as the rule's last instant (see [`CronRule::with_max_runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunLimit {
    runs: u64,
    /// The `runs`-th instant after the start (`TimeMs::MAX`: the schedule has fewer).
    last_ms: TimeMs,
}

impl CronRule {
    /// The largest run limit a cron rule takes ([`CronRule::with_max_runs`]): the limit is
    /// turned into the instant of its last run when the rule is built, by a walk over that
    /// many instants, so it is bounded like every search.
    pub const MAX_RUNS: u64 = 10_000;

    /// A rule running on `schedule`, armed by the first tick with time.
    pub fn new(schedule: CronSchedule) -> Self {
        Self {
            schedule,
            after_ms: None,
            misfire: Misfire::FireOnce,
            calendar: None,
            until_ms: None,
            run_limit: None,
        }
    }

    /// Ends the rule: no instant after `until_ms` exists for it (Temporal's `end_at`). Once
    /// its last instant ran, the entry's stored next instant is the end of time
    /// ([`crate::CronTable::next_due`] shows `Due::Time(TimeMs::MAX)`): it stays in the table,
    /// idle, until the ledger removes it. Enters the fingerprint.
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] when `until_ms` is at or before the rule's start
    /// ([`CronRule::starting_after`]); [`ScheduleError::NeverFires`] when the rule's first
    /// instant after its start lies after `until_ms`: a rule that could never fire.
    pub fn until(mut self, until_ms: TimeMs) -> Result<Self, ScheduleError> {
        if self.after_ms.is_some_and(|after| until_ms <= after) {
            return Err(ScheduleError::Invalid(format!(
                "cron rule ends at {until_ms}, at or before its start"
            )));
        }
        self.until_ms = Some(until_ms);
        self.check_fires()?;
        Ok(self)
    }

    /// Limits the rule to its first `runs` instants after its start ([`CronRule::starting_after`],
    /// which must be set first): an occurrence limit, the table's `max_runs`. The limit is
    /// turned into the instant of the last of them here, so the table stores nothing more
    /// than the next instant (its page layout is unchanged) and every replica retires the
    /// entry at the same point. Every instant of the rule counts, run or not: one a late
    /// tick's misfire policy passed over, or one its overlap policy skipped, counts as the
    /// book's planned occurrences do. Only instants the rule has count: an exclusion calendar's
    /// (set before or after) are not among them. Enters the fingerprint.
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] for `runs` outside `1..=`[`CronRule::MAX_RUNS`] or a rule without
    /// a start (a rule armed by its first tick has no instant to count from that the
    /// definition knows); [`ScheduleError::Cron`] when the walk to the last instant spends a
    /// search budget.
    pub fn with_max_runs(mut self, runs: u64) -> Result<Self, ScheduleError> {
        if !(1..=Self::MAX_RUNS).contains(&runs) {
            return Err(ScheduleError::Invalid(format!(
                "a cron rule's run limit of {runs} is outside 1..={}",
                Self::MAX_RUNS
            )));
        }
        let Some(after_ms) = self.after_ms else {
            return Err(ScheduleError::Invalid(
                "a cron rule's run limit counts instants from its start: set starting_after first"
                    .into(),
            ));
        };
        let last_ms = self.nth_instant(after_ms, runs)?;
        self.run_limit = Some(RunLimit { runs, last_ms });
        self.check_fires()?;
        Ok(self)
    }

    /// The run limit, if any ([`CronRule::with_max_runs`]).
    pub fn max_runs(&self) -> Option<u64> {
        self.run_limit.map(|l| l.runs)
    }

    /// The rule's last instant as its end and run limit bound it (`None`: unbounded). For a
    /// run limit it is the instant of the last counted run (`TimeMs::MAX` when the schedule
    /// has fewer instants).
    pub fn last_ms(&self) -> Option<TimeMs> {
        match (self.until_ms, self.run_limit) {
            (Some(u), Some(l)) => Some(u.min(l.last_ms)),
            (u, l) => u.or(l.map(|l| l.last_ms)),
        }
    }

    /// Why an entry of this rule whose stored next instant is the end of time never runs
    /// again: the end passed, the run limit is reached, or (neither bounding it) its search
    /// stopped (the horizon, or a calendar search that spent its budget; traced when it did).
    pub fn end_reason(&self) -> EntryEnd {
        match (self.until_ms, self.run_limit) {
            (until, Some(l))
                if l.last_ms != TimeMs::MAX && until.is_none_or(|u| l.last_ms <= u) =>
            {
                EntryEnd::RunLimit
            }
            (Some(_), _) => EntryEnd::Ended,
            _ => EntryEnd::Stopped,
        }
    }

    /// The `n`-th instant strictly after `after_ms` (calendar applied, no end), `TimeMs::MAX`
    /// when there are fewer.
    fn nth_instant(&self, after_ms: TimeMs, n: u64) -> Result<TimeMs, ScheduleError> {
        let mut t = after_ms;
        for _ in 0..n {
            let next = match &self.calendar {
                None => self.schedule.try_next_after(t)?,
                Some(c) => self.schedule.try_next_allowed_after(t, c)?,
            };
            match next {
                Some(next) => t = next,
                None => return Ok(TimeMs::MAX),
            }
        }
        Ok(t)
    }

    /// `Err(NeverFires)` when the rule has a start and its first instant after it lies beyond
    /// its last instant ([`CronRule::last_ms`]).
    fn check_fires(&self) -> Result<(), ScheduleError> {
        let (Some(after), Some(last)) = (self.after_ms, self.last_ms()) else {
            return Ok(());
        };
        if let Due::Time(first) = self.next_in_bounds(after)
            && first != TimeMs::MAX
            && first > last
        {
            return Err(ScheduleError::NeverFires(RetireReason::Ended));
        }
        Ok(())
    }

    /// The end bound, if any.
    pub fn until_ms(&self) -> Option<TimeMs> {
        self.until_ms
    }

    /// Skips the instants `calendar` excludes (holidays, weekdays, freeze windows; local dates
    /// are read in the schedule's zone). The calendar enters the rule's fingerprint, so the
    /// registry's setup digest tells replicas with different calendars apart.
    ///
    /// # Errors
    /// [`ScheduleError::Cron`] with [`CronError::ExcludedForever`] when the calendar keeps the
    /// schedule from ever firing once its dates and spans are past (or
    /// [`CronError::CalendarBudgetExhausted`] when that search spends its budget): such a rule
    /// is refused here rather than found silent on some later tick.
    ///
    /// With a run limit set before, the limit is counted again over the allowed instants.
    pub fn excluding(mut self, calendar: ExclusionCalendar) -> Result<Self, ScheduleError> {
        calendar.check_fires(&self.schedule)?;
        self.calendar = Some(Arc::new(calendar));
        if let (Some(after), Some(limit)) = (self.after_ms, self.run_limit) {
            let last_ms = self.nth_instant(after, limit.runs)?;
            self.run_limit = Some(RunLimit { last_ms, ..limit });
        }
        self.check_fires()?;
        Ok(self)
    }

    /// The exclusion calendar, if any.
    pub fn calendar(&self) -> Option<&ExclusionCalendar> {
        self.calendar.as_deref()
    }

    /// With `misfire` deciding what a late tick runs (the default is [`Misfire::FireOnce`]).
    /// Use it through [`CronEntry::scheduled`](crate::CronEntry::scheduled).
    ///
    /// # Errors
    /// [`ScheduleError::Invalid`] for a parameter out of range, as the book's admission: a
    /// fire-each cap outside `1..=`[`MAX_FIRE_EACH_CAP`](crate::schedule::MAX_FIRE_EACH_CAP), an
    /// expiry deadline outside `[0, `[`MAX_PERIOD_MS`](crate::schedule::MAX_PERIOD_MS)`]`.
    pub fn with_misfire(mut self, misfire: Misfire) -> Result<Self, ScheduleError> {
        super::book::check_misfire(misfire)?;
        self.misfire = misfire;
        Ok(self)
    }

    /// The misfire policy.
    pub fn misfire(&self) -> Misfire {
        self.misfire
    }

    /// Arms at the first instant strictly after `after_ms` instead of after the first tick: the
    /// first run is due then even if the first tick comes later (replicas agree either way).
    ///
    /// Set it before a run limit ([`CronRule::with_max_runs`] counts from it); moving the
    /// start of a rule with a limit counts the limit again from the new start (a walk that
    /// spends its search budget leaves the rule with no instant left: it retires at once,
    /// traced).
    pub fn starting_after(mut self, after_ms: TimeMs) -> Self {
        self.after_ms = Some(after_ms);
        if let Some(limit) = self.run_limit {
            let last_ms = self.nth_instant(after_ms, limit.runs).unwrap_or_else(|error| {
                tracing::warn!(%error, "cron rule: its run limit could not be counted from its new start");
                after_ms
            });
            self.run_limit = Some(RunLimit { last_ms, ..limit });
        }
        self
    }

    /// The cron schedule.
    pub fn schedule(&self) -> &CronSchedule {
        &self.schedule
    }

    /// The stored point for "no fire before the end of the search horizon".
    fn never() -> Due {
        Due::Time(TimeMs::MAX)
    }

    fn next_after(&self, time_ms: TimeMs) -> Due {
        match self.next_in_bounds(time_ms) {
            Due::Time(t) if self.last_ms().is_some_and(|last| t > last) => Self::never(),
            due => due,
        }
    }

    fn next_in_bounds(&self, time_ms: TimeMs) -> Due {
        let Some(calendar) = &self.calendar else {
            return self
                .schedule
                .next_after(time_ms)
                .map_or_else(Self::never, Due::Time);
        };
        match self.schedule.try_next_allowed_after(time_ms, calendar) {
            Ok(next) => next.map_or_else(Self::never, Due::Time),
            Err(error) => {
                // The same outcome on every replica (a counted budget), as a plain search that
                // spends its budget: the rule stops, loudly.
                Self::stopped(&error);
                Self::never()
            }
        }
    }

    /// The latest `count` instants the rule runs in `(after_ms, through_ms]`, ascending.
    fn latest_in(&self, after_ms: TimeMs, through_ms: TimeMs, count: usize) -> Vec<TimeMs> {
        let through_ms = self
            .last_ms()
            .map_or(through_ms, |last| through_ms.min(last));
        let Some(calendar) = &self.calendar else {
            return self.schedule.latest_in(after_ms, through_ms, count);
        };
        self.schedule
            .try_latest_allowed_in(after_ms, through_ms, count, calendar)
            .unwrap_or_else(|error| {
                Self::stopped(&error);
                Vec::new()
            })
    }

    fn stopped(error: &CronError) {
        tracing::warn!(%error, "cron rule: search under its exclusion calendar stopped");
    }
}

impl Schedule for CronRule {
    fn due_key(&self, stored: Option<Due>) -> Due {
        match (stored, self.after_ms) {
            (Some(Due::Time(t)), _) => Due::Time(t),
            (_, Some(after)) => self.next_after(after),
            // Never armed: due on the first tick with time, which arms it.
            (_, None) => Due::Time(TimeMs::MIN),
        }
    }

    fn step(&self, stored: Option<Due>, tick: &Tick, runs: &mut Vec<Due>) -> Option<Due> {
        let now_ms = tick.agreed_time_ms?;
        match self.due_key(stored) {
            Due::Time(due_ms) if stored.is_none() && self.after_ms.is_none() => {
                // Arming: nothing runs (a cron job runs at its instants, not at creation).
                debug_assert_eq!(due_ms, TimeMs::MIN);
                Some(self.next_after(now_ms))
            }
            Due::Time(due_ms) if due_ms <= now_ms && due_ms != TimeMs::MAX => {
                // The stored instant is reached, so the latest reached instants include one
                // (unless a new build's calendar excludes the instant an older one stored).
                let due_excluded = self
                    .calendar
                    .as_ref()
                    .is_some_and(|c| c.excludes(due_ms, self.schedule.zone()));
                let latest = |count: usize| {
                    let mut found = self.latest_in(due_ms.saturating_sub(1), now_ms, count);
                    if found.is_empty() && !due_excluded {
                        found.push(due_ms);
                    }
                    found
                };
                let next = self.next_after(now_ms);
                match self.misfire {
                    Misfire::FireOnce => runs.extend(latest(1).into_iter().map(Due::Time)),
                    Misfire::Skip => {
                        // On time: the stored instant is the only one reached.
                        if !due_excluded
                            && self.next_after(due_ms).time_ms().is_none_or(|t| t > now_ms)
                        {
                            runs.push(Due::Time(due_ms));
                        }
                    }
                    Misfire::FireEach { cap } => {
                        runs.extend(latest(cap as usize).into_iter().map(Due::Time));
                    }
                    Misfire::ExpireAfter { deadline_ms } => runs.extend(
                        latest(1)
                            .into_iter()
                            .filter(|&t| now_ms.saturating_sub(t) <= deadline_ms)
                            .map(Due::Time),
                    ),
                }
                Some(next)
            }
            _ => None,
        }
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut v = b"cron".to_vec();
        v.extend_from_slice(self.schedule.expression().as_bytes());
        v.push(0);
        v.extend_from_slice(self.schedule.zone().name().as_bytes());
        v.push(0);
        for t in self.schedule.zone().transitions() {
            v.extend_from_slice(&t.at_utc_s.to_le_bytes());
            v.extend_from_slice(&t.offset_s.to_le_bytes());
        }
        v.extend_from_slice(&self.schedule.zone().initial_offset_s().to_le_bytes());
        v.extend_from_slice(&self.after_ms.unwrap_or(TimeMs::MIN).to_le_bytes());
        v.push(u8::from(self.after_ms.is_some()));
        // The default policy adds nothing (setup digests of existing tables are unchanged).
        match self.misfire {
            Misfire::FireOnce => {}
            Misfire::Skip => v.extend_from_slice(b"skip"),
            Misfire::FireEach { cap } => {
                v.extend_from_slice(b"each");
                v.extend_from_slice(&cap.to_le_bytes());
            }
            Misfire::ExpireAfter { deadline_ms } => {
                v.extend_from_slice(b"expire");
                v.extend_from_slice(&deadline_ms.to_le_bytes());
            }
        }
        // No calendar and no end add nothing, as above.
        if let Some(calendar) = &self.calendar {
            v.extend_from_slice(&calendar.fingerprint());
        }
        if let Some(until) = self.until_ms {
            v.extend_from_slice(b"until");
            v.extend_from_slice(&until.to_le_bytes());
        }
        if let Some(limit) = self.run_limit {
            v.extend_from_slice(b"runs");
            v.extend_from_slice(&limit.runs.to_le_bytes());
        }
        v
    }

    fn retirement(&self, stored: Option<Due>) -> Option<EntryEnd> {
        (stored == Some(Self::never())).then(|| self.end_reason())
    }

    fn describe(&self) -> Option<crate::schedule::query::EntryRule> {
        Some(crate::schedule::query::EntryRule::Cron {
            expression: self.schedule.expression().to_string(),
            zone: self.schedule.zone().name().to_string(),
            after_ms: self.after_ms,
            misfire: self.misfire,
            calendar: self.calendar.as_ref().map(|c| c.name().to_string()),
            until_ms: self.until_ms,
            max_runs: self.max_runs(),
        })
    }

    fn clone_schedule(&self) -> Option<Box<dyn Schedule>> {
        Some(Box::new(self.clone()))
    }

    fn utc_offset_s(&self, time_ms: TimeMs) -> i32 {
        self.schedule.zone().offset_at(time_ms.div_euclid(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(time_ms: TimeMs) -> Tick {
        Tick::new(1, 1, Some(time_ms))
    }

    #[test]
    fn arms_then_runs_once_per_reached_instant() {
        let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap());
        let mut runs = Vec::new();
        assert_eq!(rule.due_key(None), Due::Time(TimeMs::MIN));
        assert_eq!(rule.step(None, &Tick::new(1, 1, None), &mut runs), None);
        let next = rule.step(None, &t(90_000), &mut runs);
        assert_eq!(next, Some(Due::Time(120_000)));
        assert!(runs.is_empty(), "arming runs nothing");
        assert_eq!(rule.step(next, &t(119_999), &mut runs), None);
        // A jump forward over many minutes runs once, for the latest missed instant.
        let next = rule.step(next, &t(600_500), &mut runs);
        assert_eq!(runs, [Due::Time(600_000)]);
        assert_eq!(next, Some(Due::Time(660_000)));
        // The same tick again runs nothing (idempotent under repeated ticks).
        assert_eq!(rule.step(next, &t(600_500), &mut runs), None);
    }

    #[test]
    fn starting_after_is_due_without_arming() {
        let rule = CronRule::new(CronSchedule::parse("0 * * * *").unwrap()).starting_after(0);
        assert_eq!(rule.due_key(None), Due::Time(3_600_000));
        let mut runs = Vec::new();
        assert_eq!(rule.step(None, &t(3_599_999), &mut runs), None);
        assert_eq!(
            rule.step(None, &t(3_600_000), &mut runs),
            Some(Due::Time(7_200_000))
        );
        assert_eq!(runs, [Due::Time(3_600_000)]);
        assert_ne!(
            rule.fingerprint(),
            CronRule::new(CronSchedule::parse("0 * * * *").unwrap()).fingerprint()
        );
    }

    /// December 24th and 25th, every year: the calendar the calendar tests share (D1).
    fn xmas() -> ExclusionCalendar {
        use crate::cron::Exclusion;
        ExclusionCalendar::new(
            "xmas",
            vec![
                Exclusion::Annual { month: 12, day: 24 },
                Exclusion::Annual { month: 12, day: 25 },
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_calendar_skips_excluded_instants_in_every_step() {
        use crate::cron::parse_rfc3339_ms as at;
        let at = |s: &str| at(s).unwrap();
        let cal = xmas;
        let daily = || CronSchedule::parse("0 9 * * *").unwrap();
        let rule = CronRule::new(daily()).excluding(cal()).unwrap();
        let mut runs = Vec::new();
        // Armed on the 23rd after 09:00: the next allowed instant is the 26th.
        let next = rule.step(None, &t(at("2026-12-23T10:00:00Z")), &mut runs);
        assert_eq!(next, Some(Due::Time(at("2026-12-26T09:00:00Z"))));
        // A tick long after (the 27th, 10:00): fire-once runs the latest *allowed* instant.
        let next = rule.step(next, &t(at("2026-12-27T10:00:00Z")), &mut runs);
        assert_eq!(runs, [Due::Time(at("2026-12-27T09:00:00Z"))]);
        assert_eq!(next, Some(Due::Time(at("2026-12-28T09:00:00Z"))));
        // Catch-up with fire-each over the holidays runs only allowed instants.
        let each = CronRule::new(daily())
            .with_misfire(Misfire::FireEach { cap: 10 })
            .unwrap()
            .excluding(cal())
            .unwrap();
        let mut runs = Vec::new();
        let stored = Some(Due::Time(at("2026-12-23T09:00:00Z")));
        each.step(stored, &t(at("2026-12-26T12:00:00Z")), &mut runs);
        assert_eq!(
            runs,
            [
                Due::Time(at("2026-12-23T09:00:00Z")),
                Due::Time(at("2026-12-26T09:00:00Z"))
            ]
        );
        // A stored instant a new build's calendar excludes does not run.
        let mut runs = Vec::new();
        let stored = Some(Due::Time(at("2026-12-24T09:00:00Z")));
        let next = rule.step(stored, &t(at("2026-12-24T09:00:30Z")), &mut runs);
        assert!(runs.is_empty(), "{runs:?}");
        assert_eq!(next, Some(Due::Time(at("2026-12-26T09:00:00Z"))));
        // The calendar is in the fingerprint.
        assert_ne!(rule.fingerprint(), CronRule::new(daily()).fingerprint());
        // A calendar that silences the rule forever is refused.
        let only_xmas = CronSchedule::parse("0 9 25 12 *").unwrap();
        assert!(matches!(
            CronRule::new(only_xmas).excluding(cal()),
            Err(ScheduleError::Cron(CronError::ExcludedForever { .. }))
        ));
    }

    #[test]
    fn a_run_limit_counts_allowed_instants_from_the_start_in_any_order() {
        use crate::cron::parse_rfc3339_ms as at;
        let at = |s: &str| at(s).unwrap();
        let cal = xmas;
        let daily = || CronRule::new(CronSchedule::parse("0 9 * * *").unwrap());
        let start = at("2026-12-23T00:00:00Z");
        // The 23rd, the 26th, the 27th: the holidays are not instants of the rule.
        let want = Some(at("2026-12-27T09:00:00Z"));
        let before = daily()
            .excluding(cal())
            .unwrap()
            .starting_after(start)
            .with_max_runs(3)
            .unwrap();
        let after = daily()
            .starting_after(start)
            .with_max_runs(3)
            .unwrap()
            .excluding(cal())
            .unwrap();
        assert_eq!(before.last_ms(), want);
        assert_eq!(after.last_ms(), want);
        assert_eq!(before.fingerprint(), after.fingerprint());
        // Moving the start counts the limit again from it.
        let moved = after.clone().starting_after(at("2026-12-26T10:00:00Z"));
        assert_eq!(moved.last_ms(), Some(at("2026-12-29T09:00:00Z")));
        // The step after the last instant stores "never" and says why.
        let mut runs = Vec::new();
        let next = after.step(None, &t(at("2026-12-28T00:00:00Z")), &mut runs);
        assert_eq!(runs, [Due::Time(at("2026-12-27T09:00:00Z"))]);
        assert_eq!(next, Some(CronRule::never()));
        assert_eq!(after.retirement(next), Some(EntryEnd::RunLimit));
        assert_eq!(after.retirement(Some(Due::Time(0))), None);
        assert_ne!(
            after.fingerprint(),
            daily()
                .starting_after(start)
                .excluding(cal())
                .unwrap()
                .fingerprint()
        );
    }

    /// The largest limit is a bounded walk at admission (every minute for ~7 days).
    #[test]
    fn the_largest_run_limit_is_a_bounded_walk() {
        let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap())
            .starting_after(0)
            .with_max_runs(CronRule::MAX_RUNS)
            .unwrap();
        assert_eq!(rule.last_ms(), Some(CronRule::MAX_RUNS as i64 * 60_000));
    }

    #[test]
    fn an_ended_rule_runs_through_its_last_instant_then_idles() {
        let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap())
            .until(180_000)
            .unwrap();
        let mut runs = Vec::new();
        let next = rule.step(None, &t(90_000), &mut runs);
        assert_eq!(next, Some(Due::Time(120_000)));
        let next = rule.step(next, &t(150_000), &mut runs);
        assert_eq!(next, Some(Due::Time(180_000)));
        // A late tick after the end runs the last instant (not one past the end), then idles.
        let next = rule.step(next, &t(400_000), &mut runs);
        assert_eq!(runs, [Due::Time(120_000), Due::Time(180_000)]);
        assert_eq!(next, Some(CronRule::never()));
        assert_eq!(rule.step(next, &t(10_000_000), &mut runs), None);
        // Fire-each after the end: only instants up to the end.
        let each = CronRule::new(CronSchedule::parse("* * * * *").unwrap())
            .with_misfire(Misfire::FireEach { cap: 10 })
            .unwrap()
            .until(180_000)
            .unwrap();
        let mut runs = Vec::new();
        each.step(Some(Due::Time(60_000)), &t(600_000), &mut runs);
        assert_eq!(
            runs,
            [Due::Time(60_000), Due::Time(120_000), Due::Time(180_000)]
        );
        assert_ne!(
            rule.fingerprint(),
            CronRule::new(CronSchedule::parse("* * * * *").unwrap()).fingerprint()
        );
        assert!(matches!(
            CronRule::new(CronSchedule::parse("* * * * *").unwrap())
                .starting_after(500)
                .until(500),
            Err(ScheduleError::Invalid(_))
        ));
    }
}
