//! Installing zone rules and re-evaluating the cron schedules of the zone.

use super::super::{ScheduleError, Scheduler, Timing};

use crate::cron::{CronSchedule, ZoneRules};
use crate::due::Due;
use crate::tick::TimeMs;

impl Scheduler {
    /// Installs `rules` under `name` and re-evaluates the cron schedules of that zone (through
    /// the zone index: O(k log n) for its k schedules, plus one cron search each).
    ///
    /// A schedule's new next due point is the first instant of the new rules strictly after the
    /// request's agreed time `now_ms`; a schedule already overdue (its old point reached but not
    /// yet run, e.g. carried over by the budget) keeps that run: its new point is the first
    /// instant of the new rules at or after its old one. Owed catch-up runs stay owed (they were
    /// reached under the old rules). Every expression is re-parsed under the new rules first, so
    /// a failure changes nothing. Within its bounds: a schedule left without an instant before
    /// its end bound is retired; a retired one is left as it is. A schedule naming an
    /// exclusion calendar (`calendars.rs`) keeps to its allowed instants, read in the new
    /// rules' local days; one the calendar would then keep from ever firing refuses the
    /// install ([`crate::cron::CronError::ExcludedForever`]).
    pub(super) fn install_zone(
        &mut self,
        name: String,
        rules: ZoneRules,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let ids: Vec<u64> = self
            .zoned
            .get(&name)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        let mut reparsed = Vec::with_capacity(ids.len());
        for id in ids {
            // A retired schedule stays retired (new bounds revive it, not new rules).
            let Some(Timing::Cron { expression, .. }) = self
                .records
                .get(&id)
                .filter(|r| r.retired.is_none())
                .map(|r| &r.def.timing)
            else {
                continue;
            };
            let cron = CronSchedule::parse_in(expression, rules.clone())?;
            // Local days move with the zone: the schedule's calendar must still let it fire.
            if let Some(calendar) = self.records.get(&id).and_then(|r| self.calendar_of(r)) {
                calendar.check_fires(&cron)?;
            }
            reparsed.push((id, cron));
        }
        for (id, cron) in reparsed {
            let old = self.records.get(&id).and_then(|r| r.next);
            let from_ms = match (old, now_ms) {
                (Some(Due::Time(t)), Some(now)) => t.saturating_sub(1).min(now),
                (Some(Due::Time(t)), None) => t.saturating_sub(1),
                (_, Some(now)) => now,
                // Past the horizon and no time to search from: stays so, with the new rules.
                (_, None) => TimeMs::MAX,
            };
            let bounds = self.records.get(&id).map(|r| r.bounds).unwrap_or_default();
            let calendar = self.records.get(&id).and_then(|r| self.calendar_of(r));
            let next = bounds
                .occurrence_after(from_ms, |after| {
                    super::super::calendars::allowed_after(&cron, calendar, after)
                })
                .map(Due::Time);
            self.unindex(id);
            if let Some(r) = self.records.get_mut(&id) {
                r.next = next;
            }
            self.crons.insert(id, cron);
            self.reindex(id);
            self.touch(id);
            // The new rules may leave no instant before its end bound.
            self.retire_if_done(id, seq, now_ms);
        }
        self.zones.insert(name, rules);
        self.header_dirty = true;
        Ok(())
    }
}
