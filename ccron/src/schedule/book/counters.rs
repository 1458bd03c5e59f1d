//! Replicated run counters (book layout 7; `retired` layout 8): per schedule in its record, and for the whole book
//! in the commit page, so that every replica reports the same numbers at the same height (the
//! node's `/metrics` exports the book's totals, `describe` a schedule's own).
//!
//! Every counter is a function of the committed log (ticks and requests), persisted with the
//! book, in the digest (the pages are) and in state transfer. They only grow (saturating): the
//! book's totals keep counting runs of schedules that left the book, which is what a Prometheus
//! counter must do.
//!
//! Layout 13 adds the book's admission refusals ([`RefusalCounters`]: slot full, calendar,
//! backfill) to the commit page, counted the same way (executed requests only).

use super::{Misfire, Scheduler};

/// Encoded bytes of [`RunCounters`] (six fixed-width `u64`s; checked against the codec in the
/// tests): what a record's stored size bound adds for them.
pub(super) const COUNTER_BYTES: usize = 6 * 8;

/// How a schedule's runs went: replicated counters (see the module documentation).
///
/// A tick *plans* a schedule when one of its occurrences is reached: the plan runs what the
/// misfire policy keeps. `late`, `skipped` and `expired` count plans, not occurrences (counting
/// every occurrence a cron schedule missed during a long stall would mean walking them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct RunCounters {
    /// Handler runs started: every attempt, successful or not (retries included).
    pub fired: u64,
    /// Handler runs that failed (an error or a caught panic); each is in `fired` too.
    pub failed: u64,
    /// Plans that found the schedule behind: more than one of its occurrences reached (a
    /// misfire), whatever its policy then ran.
    pub late: u64,
    /// Plans in which the misfire policy dropped reached occurrences without running them: every
    /// one with [`Misfire::Skip`], all but the latest with [`Misfire::FireOnce`] and
    /// [`Misfire::ExpireAfter`], the oldest beyond the cap with [`Misfire::FireEach`].
    pub skipped: u64,
    /// Plans in which [`Misfire::ExpireAfter`] ran nothing: even the latest reached occurrence
    /// was past its deadline (a one-shot's too).
    pub expired: u64,
    /// Layout 8: retirements: the schedule reached its end bound or its run limit
    /// ([`Bounds`](super::Bounds); at most 1 per schedule until new bounds revive it).
    pub retired: u64,
}

impl RunCounters {
    /// The sum of two counters, field by field (saturating).
    pub fn plus(self, o: RunCounters) -> RunCounters {
        RunCounters {
            fired: self.fired.saturating_add(o.fired),
            failed: self.failed.saturating_add(o.failed),
            late: self.late.saturating_add(o.late),
            skipped: self.skipped.saturating_add(o.skipped),
            expired: self.expired.saturating_add(o.expired),
            retired: self.retired.saturating_add(o.retired),
        }
    }
}

/// Admission refusals of the whole book (layout 13, in the commit page after the
/// calendars): replicated like [`RunCounters`], so every replica reports the same numbers at
/// the same height and a restart does not reset them. Counted only for executed requests
/// (`Scheduler::apply`, and the requests a handler run issues):
/// their outcome is a function of the committed log. They only grow (saturating).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct RefusalCounters {
    /// Requests refused with
    /// [`ScheduleError::SlotFull`](super::ScheduleError::SlotFull) (admission capacity per
    /// time slot, `slots.rs`): applied by [`Scheduler::apply`] or issued by a handler run
    /// (both are executed requests).
    pub slot_full: u64,
    /// Requests refused because of an exclusion calendar
    /// ([`ScheduleRequest::InstallCalendar`](super::ScheduleRequest::InstallCalendar),
    /// [`ScheduleRequest::SetCalendar`](super::ScheduleRequest::SetCalendar),
    /// [`ScheduleRequest::CreateExcluding`](super::ScheduleRequest::CreateExcluding): any
    /// error; `calendars.rs`).
    pub calendar: u64,
    /// Backfill requests refused ([`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill),
    /// [`ScheduleRequest::BackfillWith`](super::ScheduleRequest::BackfillWith): any error;
    /// `manual.rs`).
    pub backfill: u64,
}

impl RefusalCounters {
    /// The counters by reason label, as `/metrics` exports them
    /// (`ccron_book_refusals_total{reason}`): `slot_full`, `calendar`, `backfill`.
    pub fn by_reason(&self) -> [(&'static str, u64); 3] {
        [
            ("slot_full", self.slot_full),
            ("calendar", self.calendar),
            ("backfill", self.backfill),
        ]
    }
}

/// What one plan found (`timing.rs`, `Scheduler::plan`): counted by [`Scheduler::count`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PlanNote {
    /// More than one occurrence reached.
    pub late: bool,
    /// Reached occurrences dropped without a run.
    pub skipped: bool,
    /// The deadline dropped the run.
    pub expired: bool,
}

impl PlanNote {
    /// The counters one plan adds.
    pub fn counters(self) -> RunCounters {
        RunCounters {
            late: u64::from(self.late),
            skipped: u64::from(self.skipped),
            expired: u64::from(self.expired),
            ..RunCounters::default()
        }
    }

    /// What a recurring schedule's plan found: `r1` its first reached occurrence, `latest`
    /// the latest reached one before the policy, `ran` what the policy kept.
    pub fn of(misfire: Misfire, r1: i64, latest: Option<i64>, ran: &[i64]) -> Self {
        let late = latest.is_some_and(|l| l > r1);
        let expired = matches!(misfire, Misfire::ExpireAfter { .. }) && ran.is_empty();
        // The first reached occurrence not run (and no expiry, counted apart): dropped.
        let skipped = !expired && ran.first() != Some(&r1);
        Self {
            late,
            skipped,
            expired,
        }
    }
}

impl Scheduler {
    /// Adds `delta` to schedule `id`'s counters (when it is still in the book: a one-shot
    /// whose run started has left it) and to the book's totals. The caller marks the record
    /// changed (every tick path touches it).
    pub(super) fn count(&mut self, id: u64, delta: RunCounters) {
        if let Some(r) = self.records.get_mut(&id) {
            r.counters = r.counters.plus(delta);
        }
        self.totals = self.totals.plus(delta);
    }

    /// The book's run counters: the sum over every schedule it ever held (replicated, stored in
    /// the commit page; runs of schedules that left the book stay counted).
    pub fn totals(&self) -> RunCounters {
        self.totals
    }

    /// The book's admission refusals (replicated, stored in the commit page from layout 13: a
    /// restart keeps them; a book migrated from an older layout starts them at zero).
    pub fn refusals(&self) -> RefusalCounters {
        self.refusals
    }

    /// Counts one refusal in the counter `which` picks (saturating) and marks the commit page
    /// for the next save. Called only for executed requests (see [`RefusalCounters`]).
    pub(super) fn refuse(&mut self, which: impl FnOnce(&mut RefusalCounters) -> &mut u64) {
        let c = which(&mut self.refusals);
        *c = c.saturating_add(1);
        self.refusals_dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_size_is_what_the_bound_adds() {
        let c = RunCounters {
            fired: u64::MAX,
            failed: 1,
            late: 2,
            skipped: 3,
            expired: 4,
            retired: 5,
        };
        assert_eq!(crate::codec::encoded_len(&c).unwrap(), COUNTER_BYTES);
        assert_eq!(
            crate::codec::encoded_len(&RunCounters::default()).unwrap(),
            COUNTER_BYTES
        );
    }

    #[test]
    fn a_plan_note_tells_late_skipped_and_expired_apart() {
        let on_time = PlanNote::of(Misfire::FireOnce, 10, Some(10), &[10]);
        assert_eq!(on_time, PlanNote::default());
        let once = PlanNote::of(Misfire::FireOnce, 10, Some(30), &[30]);
        assert!(once.late && once.skipped && !once.expired);
        let each = PlanNote::of(Misfire::FireEach { cap: 5 }, 10, Some(30), &[10, 20, 30]);
        assert!(each.late && !each.skipped);
        let skip = PlanNote::of(Misfire::Skip, 10, Some(20), &[]);
        assert!(skip.late && skip.skipped && !skip.expired);
        let exp = PlanNote::of(Misfire::ExpireAfter { deadline_ms: 1 }, 10, Some(10), &[]);
        assert!(!exp.late && !exp.skipped && exp.expired);
        assert_eq!(exp.counters().expired, 1);
    }
}
