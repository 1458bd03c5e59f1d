//! Periodic actions: the schedule kind, its misfire policies and its persisted schedule.
//!
//! A periodic entry ([`crate::CronEntry::periodic`]) fires at once on the first tick that carries
//! agreed time (or at its configured start), then every `period_ms` on a drift-free grid: the
//! next due time is the previous *due* time plus a whole number of periods, never "tick time plus
//! period", so late ticks do not shift the phase. What happens to occurrences a late tick has
//! missed is the entry's [`MisfirePolicy`].
//!
//! The schedule (the next due time of every periodic entry of a table) is owned by the table
//! instance, never by a static: several replicas in one process each have their own. It lives in
//! the table's [`PageRange`](crate::PageRange) through [`crate::codec`] (table layout 2: a
//! commit page, a change log and record pages, so a write takes O(changes) pages), is written
//! at most once per tick (at the end of the pass, only when it changed), and is read back by
//! [`CronTable::reload`](crate::CronTable::reload), which the host calls after a restart and after
//! a state transfer.

use std::collections::BTreeMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::num::NonZeroU32;
use std::sync::Arc;

use crate::cron::{CronError, ExclusionCalendar};
use crate::due::{Due, Schedule};
use crate::entry::EntryEnd;
use crate::schedule::{check_grid_fires, grid_allowed_after, grid_allowed_latest};
use crate::tick::{ComponentId, Tick, TimeMs};

/// What a late tick does with the occurrences it missed.
///
/// Occurrences are the grid `due, due + period, due + 2·period, …`; a tick at time `t` has
/// *reached* every occurrence `<= t`. Let `k` be how many it reached (`k >= 1` when the entry is
/// due at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MisfirePolicy {
    /// Run once for the latest reached occurrence; the earlier `k - 1` are dropped. The default.
    #[default]
    FireOnce,
    /// Run only when the tick is on time (`k == 1`, no whole period missed); a late tick runs
    /// nothing and the entry waits for the next occurrence after `t` (Quartz's "do nothing").
    SkipMissed,
    /// Run once per reached occurrence, the latest `min(k, cap)` of them in chronological order;
    /// older ones beyond the cap are dropped.
    FireEach {
        /// The most runs one tick may cause for this entry.
        cap: NonZeroU32,
    },
    /// Concord's behaviour: run once and schedule the next run at *tick time* + period. The
    /// phase drifts by the lateness of every tick and missed occurrences never catch up.
    FromTickTime,
}

/// Errors of building a periodic schedule.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeriodicError {
    /// The period is zero or negative: the entry would fire on every tick forever.
    #[error("a period must be positive, got {period_ms} ms")]
    NonPositivePeriod {
        /// The rejected period.
        period_ms: i64,
    },
    /// An exclusion calendar on a grid whose origin is its first tick
    /// ([`Periodic::excluding`]): which points the calendar lets fire depends on the grid's
    /// phase, unknown until then.
    #[error(
        "an exclusion calendar needs the grid's origin before the first tick: give the periodic \
         schedule a start (starting_at) or align it to the epoch (aligned)"
    )]
    CalendarNeedsOrigin,
    /// An exclusion calendar with [`MisfirePolicy::FromTickTime`], whose runs follow tick times
    /// instead of a grid: there are no grid points to skip.
    #[error("an exclusion calendar skips grid points: FromTickTime has no grid")]
    CalendarWithTickTime,
    /// The calendar keeps the grid from ever firing ([`CronError::ExcludedForever`]), or that
    /// search spent its budget ([`CronError::CalendarBudgetExhausted`]).
    #[error("{0}")]
    Calendar(CronError),
}

/// The schedule of a periodic entry: period, misfire policy and optional first due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Periodic {
    period_ms: i64,
    misfire: MisfirePolicy,
    start_ms: Option<TimeMs>,
    /// The grid's origin is the Unix epoch ([`Periodic::aligned`]) instead of the first tick.
    aligned: bool,
}

/// What one tick does to one periodic entry (computed by [`Periodic::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// How many times the action runs (0 when the tick only moves the schedule).
    pub runs: u32,
    /// Due time of the first run; run `i` is due at `first_due_ms + i * period`.
    pub first_due_ms: TimeMs,
    /// The new next due time, strictly after the tick's time.
    pub next_ms: TimeMs,
}

impl Periodic {
    /// Every `period_ms` milliseconds, with [`MisfirePolicy::FireOnce`], first run at once.
    pub fn every_ms(period_ms: i64) -> Result<Self, PeriodicError> {
        if period_ms <= 0 {
            return Err(PeriodicError::NonPositivePeriod { period_ms });
        }
        Ok(Self {
            period_ms,
            misfire: MisfirePolicy::FireOnce,
            start_ms: None,
            aligned: false,
        })
    }

    /// The same schedule on a grid aligned to the Unix epoch (UTC): due at every multiple of
    /// the period (a 15-minute period at :00, :15, :30 and :45 UTC). Its first run is the
    /// first grid point the agreed time reaches (at once only when the first tick falls on one).
    ///
    /// Without it (and without [`Periodic::starting_at`]) the grid's origin is the agreed time
    /// of the first tick that evaluates the entry: the entry runs at once, then every period
    /// from there (e.g. :00:19.864, :15:19.864, ...). A `starting_at` start wins over
    /// alignment.
    pub fn aligned(mut self) -> Self {
        self.aligned = true;
        self
    }

    /// Whether the grid is aligned to the epoch ([`Periodic::aligned`]).
    pub fn is_aligned(&self) -> bool {
        self.aligned
    }

    /// The same schedule with misfire policy `misfire`.
    pub fn with_misfire(mut self, misfire: MisfirePolicy) -> Self {
        self.misfire = misfire;
        self
    }

    /// The same schedule, first due at agreed time `start_ms` instead of at once.
    ///
    /// Spreading the starts of many entries spreads their load over the period.
    pub fn starting_at(mut self, start_ms: TimeMs) -> Self {
        self.start_ms = Some(start_ms);
        self
    }

    /// The period in milliseconds (positive).
    pub fn period_ms(&self) -> i64 {
        self.period_ms
    }

    /// The misfire policy.
    pub fn misfire(&self) -> MisfirePolicy {
        self.misfire
    }

    /// The configured first due time, if any.
    pub fn start_ms(&self) -> Option<TimeMs> {
        self.start_ms
    }

    /// When the entry is due given its stored next due time (`None`: never ran): the key of
    /// the due index. `TimeMs::MIN` means "on the first tick with agreed time".
    pub fn due_key_ms(&self, stored_next_ms: Option<TimeMs>) -> TimeMs {
        stored_next_ms.or(self.start_ms).unwrap_or(TimeMs::MIN)
    }

    /// What a tick at agreed time `now_ms` does, given the stored next due time.
    ///
    /// `None` when the entry is not due (nothing changes). This is the rule of the periodic
    /// entry together with its schedule-next step, shared by the indexed and the linear
    /// evaluation so that they cannot disagree.
    pub fn step_at(&self, stored_next_ms: Option<TimeMs>, now_ms: TimeMs) -> Option<Step> {
        let p = i128::from(self.period_ms);
        let clamp = |v: i128| -> TimeMs {
            v.clamp(i128::from(TimeMs::MIN), i128::from(TimeMs::MAX)) as TimeMs
        };
        let due = match (stored_next_ms, self.start_ms) {
            (Some(d), _) | (None, Some(d)) => d,
            (None, None) if self.aligned => {
                // Never ran, aligned: the first grid point at or after this tick.
                let now = i128::from(now_ms);
                let next = now.div_euclid(p) * p + if now.rem_euclid(p) == 0 { 0 } else { p };
                if next == now {
                    return Some(Step {
                        runs: 1,
                        first_due_ms: now_ms,
                        next_ms: clamp(now + p),
                    });
                }
                // Not on the grid: only record the first due point.
                return Some(Step {
                    runs: 0,
                    first_due_ms: clamp(next),
                    next_ms: clamp(next),
                });
            }
            (None, None) => {
                // Never ran and no start: run at once and anchor the grid on this tick.
                return Some(Step {
                    runs: 1,
                    first_due_ms: now_ms,
                    next_ms: clamp(i128::from(now_ms) + p),
                });
            }
        };
        if now_ms < due {
            return None;
        }
        let late = i128::from(now_ms) - i128::from(due);
        // Runs on time are the common case: no 128-bit division for them.
        let reached = if late < p { 1 } else { late / p + 1 };
        let grid_next = clamp(i128::from(due) + reached * p);
        let latest = clamp(i128::from(due) + (reached - 1) * p);
        let step = match self.misfire {
            MisfirePolicy::FireOnce => Step {
                runs: 1,
                first_due_ms: latest,
                next_ms: grid_next,
            },
            MisfirePolicy::SkipMissed => Step {
                runs: u32::from(reached == 1),
                first_due_ms: due,
                next_ms: grid_next,
            },
            MisfirePolicy::FireEach { cap } => {
                let runs = reached.min(i128::from(cap.get()));
                Step {
                    runs: runs as u32,
                    first_due_ms: clamp(i128::from(due) + (reached - runs) * p),
                    next_ms: grid_next,
                }
            }
            MisfirePolicy::FromTickTime => Step {
                runs: 1,
                first_due_ms: due,
                next_ms: clamp(i128::from(now_ms) + p),
            },
        };
        // A saturated grid (times near TimeMs::MAX) is the only way next can fail to pass now.
        debug_assert!(step.next_ms > now_ms || step.next_ms == TimeMs::MAX);
        Some(step)
    }
}

impl Schedule for Periodic {
    fn due_key(&self, stored: Option<Due>) -> Due {
        Due::Time(self.due_key_ms(stored.and_then(|d| d.time_ms())))
    }

    fn step(&self, stored: Option<Due>, tick: &Tick, runs: &mut Vec<Due>) -> Option<Due> {
        // Periodic actions never fire without agreed time (the time service is off).
        let now_ms = tick.agreed_time_ms?;
        let step = self.step_at(stored.and_then(|d| d.time_ms()), now_ms)?;
        for i in 0..step.runs {
            let offset = i64::from(i).saturating_mul(self.period_ms);
            runs.push(Due::Time(step.first_due_ms.saturating_add(offset)));
        }
        Some(Due::Time(step.next_ms))
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut v = b"periodic".to_vec();
        v.extend_from_slice(&self.period_ms.to_le_bytes());
        v.extend_from_slice(&self.start_ms.unwrap_or(TimeMs::MIN).to_le_bytes());
        v.push(u8::from(self.start_ms.is_some()));
        let (tag, cap) = match self.misfire {
            MisfirePolicy::FireOnce => (0u8, 0u32),
            MisfirePolicy::SkipMissed => (1, 0),
            MisfirePolicy::FireEach { cap } => (2, cap.get()),
            MisfirePolicy::FromTickTime => (3, 0),
        };
        v.push(tag);
        v.extend_from_slice(&cap.to_le_bytes());
        // Only when set: unaligned entries keep their fingerprint (and setup digests).
        if self.aligned {
            v.extend_from_slice(b"aligned");
        }
        v
    }

    fn describe(&self) -> Option<crate::schedule::query::EntryRule> {
        Some(self.described(None))
    }

    fn clone_schedule(&self) -> Option<Box<dyn Schedule>> {
        Some(Box::new(*self))
    }
}

impl Periodic {
    /// The read API's description, with the name of the exclusion calendar, if any.
    fn described(&self, calendar: Option<String>) -> crate::schedule::query::EntryRule {
        crate::schedule::query::EntryRule::Periodic {
            period_ms: self.period_ms,
            start_ms: self.start_ms,
            aligned: self.aligned,
            misfire: self.misfire.into(),
            calendar,
        }
    }
}

/// A periodic schedule under an exclusion calendar ([`Periodic::excluding`]): the grid of its
/// [`Periodic`], the points `calendar` excludes skipped (never postponed), with the book's
/// periodic-grid semantics (`Timing::Every` naming a calendar; `docs/scheduling.md`,
/// "Exclusion calendars"): its occurrences are the allowed grid points, local dates read in
/// UTC (a grid has no zone); a late tick's misfire policy picks among the allowed points it
/// reached. Use it through [`CronEntry::scheduled`](crate::CronEntry::scheduled): its stored
/// next due point is persisted as a periodic entry's is (an allowed grid point, or
/// `TimeMs::MAX` once its search stopped), so the table's layout is unchanged; the calendar
/// enters its fingerprint (the registry's setup digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExcludingPeriodic {
    periodic: Periodic,
    calendar: Arc<ExclusionCalendar>,
}

impl Periodic {
    /// The same grid skipping the points `calendar` excludes (see [`ExcludingPeriodic`]).
    ///
    /// # Errors
    /// [`PeriodicError::CalendarNeedsOrigin`] for a grid whose origin is the first tick (give
    /// it [`Periodic::starting_at`] or [`Periodic::aligned`]: which points a calendar lets
    /// fire depends on the grid's phase, checked here); [`PeriodicError::CalendarWithTickTime`]
    /// for [`MisfirePolicy::FromTickTime`] (no grid to skip points of);
    /// [`PeriodicError::Calendar`] with [`CronError::ExcludedForever`] when the calendar keeps
    /// the grid from ever firing (or [`CronError::CalendarBudgetExhausted`] when that search
    /// spends its budget), as the book refuses such a schedule.
    pub fn excluding(
        self,
        calendar: ExclusionCalendar,
    ) -> Result<ExcludingPeriodic, PeriodicError> {
        if self.misfire == MisfirePolicy::FromTickTime {
            return Err(PeriodicError::CalendarWithTickTime);
        }
        let origin = self.origin().ok_or(PeriodicError::CalendarNeedsOrigin)?;
        check_grid_fires(origin, self.period_ms, &calendar).map_err(PeriodicError::Calendar)?;
        Ok(ExcludingPeriodic {
            periodic: self,
            calendar: Arc::new(calendar),
        })
    }

    /// The grid's origin when known before the first tick: its start, or the epoch when
    /// aligned.
    fn origin(&self) -> Option<TimeMs> {
        match (self.start_ms, self.aligned) {
            (Some(start), _) => Some(start),
            (None, true) => Some(0),
            (None, false) => None,
        }
    }
}

impl ExcludingPeriodic {
    /// The grid.
    pub fn periodic(&self) -> &Periodic {
        &self.periodic
    }

    /// The exclusion calendar.
    pub fn calendar(&self) -> &ExclusionCalendar {
        &self.calendar
    }

    /// What a tick at agreed time `now_ms` runs (pushed onto `runs`, ascending) and the new
    /// stored next due point, given the stored one; `None` when not due.
    pub fn step_at(
        &self,
        stored_next_ms: Option<TimeMs>,
        now_ms: TimeMs,
        runs: &mut Vec<TimeMs>,
    ) -> Option<TimeMs> {
        let p = self.periodic.period_ms;
        let cal = &*self.calendar;
        let due = match stored_next_ms {
            Some(due) => due,
            None => {
                // Never ran: the first allowed grid point at or after its start, or (aligned)
                // at or after this tick, as the plain grid's first point.
                let origin = self.periodic.origin()?;
                let from = if self.periodic.start_ms.is_some() {
                    origin
                } else {
                    now_ms
                };
                let first = grid_allowed_after(origin, p, Some(cal), from.saturating_sub(1))
                    .unwrap_or(TimeMs::MAX);
                if first > now_ms {
                    return Some(first);
                }
                first
            }
        };
        if now_ms < due || due == TimeMs::MAX {
            return None;
        }
        // The allowed grid points reached, latest last (a stored point a newer calendar
        // excludes is not among them).
        let want = match self.periodic.misfire {
            MisfirePolicy::FireOnce | MisfirePolicy::FromTickTime => 1,
            MisfirePolicy::SkipMissed => 2,
            MisfirePolicy::FireEach { cap } => usize::try_from(cap.get()).unwrap_or(usize::MAX),
        };
        let reached = grid_allowed_latest(due, p, cal, due.saturating_sub(1), now_ms, want);
        match self.periodic.misfire {
            // On time: exactly one allowed point reached.
            MisfirePolicy::SkipMissed if reached.len() != 1 => {}
            MisfirePolicy::FireOnce | MisfirePolicy::FromTickTime => {
                runs.extend(reached.last().copied());
            }
            _ => runs.extend(reached),
        }
        Some(grid_allowed_after(due, p, Some(cal), now_ms).unwrap_or(TimeMs::MAX))
    }
}

impl Schedule for ExcludingPeriodic {
    fn due_key(&self, stored: Option<Due>) -> Due {
        self.periodic.due_key(stored)
    }

    fn step(&self, stored: Option<Due>, tick: &Tick, runs: &mut Vec<Due>) -> Option<Due> {
        let now_ms = tick.agreed_time_ms?;
        let mut at = Vec::new();
        let next = self.step_at(stored.and_then(|d| d.time_ms()), now_ms, &mut at)?;
        runs.extend(at.into_iter().map(Due::Time));
        Some(Due::Time(next))
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut v = self.periodic.fingerprint();
        v.extend_from_slice(b"excluding");
        v.extend_from_slice(&self.calendar.fingerprint());
        v
    }

    fn retirement(&self, stored: Option<Due>) -> Option<EntryEnd> {
        // Its search found no further allowed point (spent its budget, traced).
        (stored == Some(Due::Time(TimeMs::MAX))).then_some(EntryEnd::Stopped)
    }

    fn describe(&self) -> Option<crate::schedule::query::EntryRule> {
        Some(
            self.periodic
                .described(Some(self.calendar.name().to_string())),
        )
    }

    fn clone_schedule(&self) -> Option<Box<dyn Schedule>> {
        Some(Box::new(self.clone()))
    }
}

/// One table's periodic schedule as one value: the form of table layout 1 (one blob, or
/// alternate halves), which layout 2 refuses at load ([`crate::TableError::OldLayout`]); kept
/// for tools and tests that write or inspect such pages.
#[derive(Debug, Clone, PartialEq, Eq, Default, bincode::Encode, bincode::Decode)]
pub struct PersistedSchedule {
    /// The component whose table wrote it (a misconfigured page range is caught on reload).
    pub component_id: ComponentId,
    /// `(position, next due point)` for every indexed entry that has run, ascending position.
    pub records: Vec<(u32, Due)>,
}

impl PersistedSchedule {
    /// Encoded size in bytes of a schedule with `records` records (fixed-width encoding).
    pub fn encoded_len_for(records: usize) -> usize {
        // component id (4) + vector length (8) + records of position (4), variant tag (4) and
        // value (8).
        4 + 8 + records.saturating_mul(16)
    }
}

/// A fixed multiplicative hasher for integer keys the application chooses (positions, record
/// ids): no randomness, a few cycles per key. Maps hashed with it are looked up, never iterated
/// in an order that matters.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        // Fibonacci hashing with a final fold so that the high bits (which hashbrown's control
        // bytes use) and the low bits (its bucket index) both depend on every input bit.
        let h = (self.0.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
}

/// The deterministic hasher of ccron's lookup-only hash maps.
pub(crate) type IntHash = BuildHasherDefault<IntHasher>;

/// A record page not known to the table's slab.
pub(crate) const NO_PAGE: u32 = u32::MAX;

/// One change of a table's schedule since its last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScheduleChange {
    /// The entry's position.
    pub(crate) position: u32,
    /// The due point at the last write (`None`: no record).
    pub(crate) before: Option<Due>,
    /// The due point now (`None`: the record left).
    pub(crate) now: Option<Due>,
    /// The slab slot of the entry the change came from.
    pub(crate) slot: u32,
    /// The record page of the position as the slab knew it ([`NO_PAGE`]: unknown): a save
    /// uses it for a record that stays instead of looking the record up. A save that looks a
    /// record up sets it and `learned`, and the table copies it to the slot.
    pub(crate) page: u32,
    /// Whether the save learned `page`.
    pub(crate) learned: bool,
}

/// The part of a table's in-memory schedule that is not kept beside its entries: the records of
/// positions with no indexed entry (kept from the pages for an entry registered later) and the
/// changes since the schedule was last written. The next due point of an indexed entry lives in
/// the entry's slot of the table's slab.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ScheduleStore {
    pub(crate) orphans: BTreeMap<u32, Due>,
    pub(crate) changed: Vec<ScheduleChange>,
}

impl ScheduleStore {
    /// Sorts the changes by position and merges those of one position into one (the oldest
    /// due point before, the newest after). A change that ends where it began stays: the write
    /// logs it as before (the page images depend only on the operations).
    pub(crate) fn merge_changes(&mut self) {
        let changed = &mut self.changed;
        // Stable: the changes of one position stay in the order they happened. A tick's
        // changes come in position order already.
        if changed.windows(2).all(|w| w[0].position < w[1].position) {
            return;
        }
        if !changed.is_sorted_by_key(|c| c.position) {
            changed.sort_by_key(|c| c.position);
        }
        let mut w = 0;
        for r in 0..changed.len() {
            let c = changed[r];
            if w > 0 && changed[w - 1].position == c.position {
                // The first change's page is the one the last write left (a later change of
                // the position may come from a fresh slot that does not know it).
                changed[w - 1].now = c.now;
                changed[w - 1].slot = c.slot;
            } else {
                changed[w] = c;
                w += 1;
            }
        }
        changed.truncate(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(p: i64) -> Periodic {
        Periodic::every_ms(p).unwrap()
    }

    #[test]
    fn encoded_len_for_matches_the_codec() {
        let s = PersistedSchedule {
            component_id: 1,
            records: vec![(1, Due::Time(-5)), (2, Due::Seq(9)), (7, Due::Time(0))],
        };
        assert_eq!(
            crate::codec::encoded_len(&s).unwrap(),
            PersistedSchedule::encoded_len_for(3)
        );
    }

    #[test]
    fn rejects_non_positive_periods() {
        assert_eq!(
            Periodic::every_ms(0),
            Err(PeriodicError::NonPositivePeriod { period_ms: 0 })
        );
        assert!(Periodic::every_ms(-5).is_err());
    }

    #[test]
    fn first_run_is_immediate_then_on_the_grid() {
        let p = every(2_000);
        let s = p.step_at(None, 1_000).unwrap();
        assert_eq!((s.runs, s.first_due_ms, s.next_ms), (1, 1_000, 3_000));
        assert_eq!(p.step_at(Some(3_000), 2_999), None, "not due before next");
        let s = p.step_at(Some(3_000), 3_000).unwrap();
        assert_eq!(s.next_ms, 5_000, "inclusive, and next = due + period");
        let s = p.step_at(Some(3_000), 3_700).unwrap();
        assert_eq!(s.next_ms, 5_000, "a late tick does not shift the phase");
    }

    #[test]
    fn misfire_policies_differ_on_a_tick_three_periods_late() {
        // Due at 10 s, period 2 s, tick at 16.5 s: occurrences 10, 12, 14, 16 reached (k = 4).
        let base = every(2_000);
        let once = base.step_at(Some(10_000), 16_500).unwrap();
        assert_eq!(
            (once.runs, once.first_due_ms, once.next_ms),
            (1, 16_000, 18_000)
        );
        let skip = base
            .with_misfire(MisfirePolicy::SkipMissed)
            .step_at(Some(10_000), 16_500)
            .unwrap();
        assert_eq!((skip.runs, skip.next_ms), (0, 18_000));
        let on_time = base
            .with_misfire(MisfirePolicy::SkipMissed)
            .step_at(Some(10_000), 11_999)
            .unwrap();
        assert_eq!(on_time.runs, 1);
        let cap = NonZeroU32::new(3).unwrap();
        let each = base
            .with_misfire(MisfirePolicy::FireEach { cap })
            .step_at(Some(10_000), 16_500)
            .unwrap();
        assert_eq!(
            (each.runs, each.first_due_ms, each.next_ms),
            (3, 12_000, 18_000)
        );
        let drift = base
            .with_misfire(MisfirePolicy::FromTickTime)
            .step_at(Some(10_000), 16_500)
            .unwrap();
        assert_eq!((drift.runs, drift.next_ms), (1, 18_500));
    }

    #[test]
    fn start_time_delays_the_first_run_and_extremes_saturate() {
        let p = every(1_000).starting_at(5_000);
        assert_eq!(p.due_key_ms(None), 5_000);
        assert_eq!(p.step_at(None, 4_999), None);
        assert_eq!(p.step_at(None, 5_000).unwrap().next_ms, 6_000);
        let huge = every(i64::MAX);
        let s = huge.step_at(Some(TimeMs::MAX - 1), TimeMs::MAX).unwrap();
        assert_eq!(s.next_ms, TimeMs::MAX);
        let s = every(1).step_at(Some(TimeMs::MIN), TimeMs::MAX).unwrap();
        assert_eq!(s.runs, 1);
    }

    /// Regression (issue 25): a bare period's grid starts at the first tick (:00:19.864); an
    /// aligned one fires on the quarter hours.
    #[test]
    fn an_aligned_period_fires_on_epoch_multiples() {
        const Q: i64 = 15 * 60_000;
        let first_tick = 7 * Q + 19_864;
        let bare = every(Q).step_at(None, first_tick).unwrap();
        assert_eq!((bare.runs, bare.next_ms), (1, first_tick + Q));
        let aligned = every(Q).aligned();
        let s = aligned.step_at(None, first_tick).unwrap();
        assert_eq!(
            (s.runs, s.next_ms),
            (0, 8 * Q),
            "first due at the next quarter hour"
        );
        let s = aligned.step_at(Some(s.next_ms), 8 * Q + 5).unwrap();
        assert_eq!((s.runs, s.first_due_ms, s.next_ms), (1, 8 * Q, 9 * Q));
        // On the grid: at once.
        let s = aligned.step_at(None, 3 * Q).unwrap();
        assert_eq!((s.runs, s.first_due_ms, s.next_ms), (1, 3 * Q, 4 * Q));
        // Before the epoch too.
        let s = aligned.step_at(None, -Q - 1).unwrap();
        assert_eq!((s.runs, s.next_ms), (0, -Q));
        assert_ne!(
            crate::due::Schedule::fingerprint(&aligned),
            crate::due::Schedule::fingerprint(&every(Q))
        );
    }
}
