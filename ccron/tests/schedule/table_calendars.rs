//! Exclusion calendars on the cron tables' periodic entries ([`Periodic::excluding`]): one grid
//! semantics with the book's periodic schedules (an excluded grid point is skipped, never
//! postponed; a late tick's misfire policy picks among the allowed points it reached), checked
//! against the brute-force model of `calendars.rs` (each point judged by its UTC date and
//! weekday in plain arithmetic) and against a book schedule on the same ticks, the table
//! persisted and reloaded at a random tick (its layout unchanged: the stored next point is an
//! allowed grid point).

use std::num::NonZeroU32;

use ccron::cron::{CronError, Exclusion, ExclusionCalendar, ZoneRules};
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Bounds, Handlers, Limits, Misfire, NewSchedule, Overlap, RunPolicy, ScheduleError,
    ScheduleRequest, Scheduler, Timing,
};
use ccron::{
    CronEntry, CronTable, ExcludingPeriodic, MemPages, MisfirePolicy, PageRange, Periodic,
    PeriodicError, Principal, Tick, TimeMs,
};
use proptest::prelude::*;

use super::calendars::{BASE_MS, DAY_MS, PERIODS, at, exclusion, misfire, model_excludes, xmas};

/// The due points the entry ran, in order.
type World = Vec<TimeMs>;

const PAGE: usize = 512;

fn range() -> PageRange {
    PageRange::new(1, CronTable::<World>::pages_needed(4, PAGE).unwrap()).unwrap()
}

/// A table holding one entry at position 0 on `schedule`, reloaded from `pages`.
fn table(schedule: &ExcludingPeriodic, pages: &MemPages) -> CronTable<World> {
    let mut t = CronTable::with_persistence(1, range(), 4);
    t.add(CronEntry::<World>::scheduled(0, schedule.clone(), |ctx| {
        if let Some(due) = ctx.due_ms() {
            ctx.state.push(due);
        }
    }))
    .unwrap();
    t.reload(pages).unwrap();
    t
}

fn policy(m: Misfire) -> MisfirePolicy {
    match m {
        Misfire::FireOnce => MisfirePolicy::FireOnce,
        Misfire::Skip => MisfirePolicy::SkipMissed,
        Misfire::FireEach { cap } => MisfirePolicy::FireEach {
            cap: NonZeroU32::new(cap).unwrap(),
        },
        other => unreachable!("{other:?}"),
    }
}

/// Christmas (UTC) on a 12-hour grid from 2026-12-24: the points of the 25th are skipped,
/// never postponed to the 26th; a late tick runs the latest allowed point it reached; an
/// aligned grid keeps its epoch phase.
#[test]
fn a_table_grid_skips_its_excluded_points() {
    let start = at("2026-12-24T00:00:00Z");
    let grid = Periodic::every_ms(DAY_MS / 2)
        .unwrap()
        .starting_at(start)
        .excluding(xmas())
        .unwrap();
    let mut pages = MemPages::new(PAGE, range().end() + 1);
    let mut t = table(&grid, &pages);
    let mut world = World::new();
    for (seq, tick) in [
        "2026-12-24T00:00:00Z",
        "2026-12-24T12:00:00Z",
        "2026-12-25T00:00:00Z",
        "2026-12-25T12:00:00Z",
        "2026-12-26T00:00:00Z",
    ]
    .iter()
    .enumerate()
    {
        t.evaluate(
            &Tick::new(1, seq as u64 + 1, Some(at(tick))),
            &mut world,
            &mut pages,
        )
        .unwrap();
    }
    assert_eq!(
        world,
        vec![
            at("2026-12-24T00:00:00Z"),
            at("2026-12-24T12:00:00Z"),
            at("2026-12-26T00:00:00Z")
        ]
    );
    // Aligned to the epoch, no start: the first allowed grid point at or after the first tick.
    let aligned = Periodic::every_ms(DAY_MS)
        .unwrap()
        .aligned()
        .excluding(xmas())
        .unwrap();
    let mut pages = MemPages::new(PAGE, range().end() + 1);
    let mut t = table(&aligned, &pages);
    let mut world = World::new();
    for (seq, tick) in ["2026-12-24T18:00:00Z", "2026-12-26T01:00:00Z"]
        .iter()
        .enumerate()
    {
        t.evaluate(
            &Tick::new(1, seq as u64 + 1, Some(at(tick))),
            &mut world,
            &mut pages,
        )
        .unwrap();
    }
    assert_eq!(world, vec![at("2026-12-26T00:00:00Z")]);
}

/// What a calendar cannot apply to is refused when the entry is built, typed.
#[test]
fn table_grids_a_calendar_cannot_apply_to_are_refused() {
    let every = Periodic::every_ms(DAY_MS).unwrap();
    assert_eq!(
        every.excluding(xmas()),
        Err(PeriodicError::CalendarNeedsOrigin)
    );
    assert_eq!(
        every
            .starting_at(0)
            .with_misfire(MisfirePolicy::FromTickTime)
            .excluding(xmas()),
        Err(PeriodicError::CalendarWithTickTime)
    );
    // A weekly grid on Thursdays (1970-01-01 was one) under a calendar excluding Thursdays.
    let thursdays =
        ExclusionCalendar::new("thu", vec![Exclusion::Weekdays { mask: 1 << 4 }]).unwrap();
    assert!(matches!(
        Periodic::every_ms(7 * DAY_MS)
            .unwrap()
            .aligned()
            .excluding(thursdays),
        Err(PeriodicError::Calendar(
            CronError::ExcludedForever { .. } | CronError::CalendarBudgetExhausted { .. }
        ))
    ));
    // The calendar enters the fingerprint (the registry's setup digest).
    let plain = ccron::due::Schedule::fingerprint(&every.starting_at(0));
    let with = ccron::due::Schedule::fingerprint(&every.starting_at(0).excluding(xmas()).unwrap());
    assert_ne!(plain, with);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random calendars, grids and misfire policies over random tick sequences: a table's
    /// periodic entry under the calendar is refused exactly when the book refuses the same
    /// grid, and otherwise runs exactly the model's allowed points on every tick, as the
    /// book's schedule does, its stored next point the model's first allowed one; the table
    /// is persisted every tick and rebuilt from its pages at a random one.
    #[test]
    fn table_grids_match_the_model_and_the_book(
        exclusions in proptest::collection::vec(exclusion(), 0..8),
        period in 0..PERIODS.len(),
        start_off in 1i64..(3 * DAY_MS),
        misfire in misfire(),
        steps in proptest::collection::vec(0i64..(40 * 3_600_000), 1..30),
        reload_at in 0usize..30,
    ) {
        let Ok(calendar) = ExclusionCalendar::new("model", exclusions.clone()) else {
            return Ok(());
        };
        let (period, start) = (PERIODS[period], BASE_MS + start_off);
        let utc = ZoneRules::utc();
        let mut h: Handlers<u64> = Handlers::new();
        h.register("h", |ctx| *ctx.state += 1);
        let host = Principal::Host;
        let mut book = Scheduler::new(1, Limits::default());
        book.apply(&host, ScheduleRequest::InstallCalendar(calendar.clone()), &h, 2, Some(0)).unwrap();
        let created = book.apply(
            &host,
            ScheduleRequest::CreateExcluding {
                schedule: NewSchedule::new("h", Timing::Every { period_ms: period, start_ms: Some(start) })
                    .with_misfire(misfire),
                policy: RunPolicy::default(),
                bounds: Bounds::NONE,
                overlap: Overlap::AllowAll,
                calendar: "model".into(),
            },
            &h,
            3,
            Some(BASE_MS),
        );
        let grid = Periodic::every_ms(period)
            .unwrap()
            .starting_at(start)
            .with_misfire(policy(misfire))
            .excluding(calendar);
        let (grid, id) = match (grid, created) {
            (Ok(grid), Ok(Some(id))) => (grid, id),
            (Err(PeriodicError::Calendar(a)), Err(ScheduleError::Cron(b))) => {
                prop_assert_eq!(a, b);
                return Ok(());
            }
            (g, b) => return Err(TestCaseError::fail(format!("table {g:?}, book {b:?}"))),
        };
        let horizon = BASE_MS + steps.iter().sum::<i64>();
        let eligible: Vec<TimeMs> = (0..)
            .map(|k| start + k * period)
            .take_while(|&t| t <= horizon.max(start + 400 * DAY_MS))
            .filter(|&t| !model_excludes(&exclusions, t, &utc))
            .collect();
        let mut pages = MemPages::new(PAGE, range().end() + 1);
        let mut t = table(&grid, &pages);
        let mut world = World::new();
        let mut prev = BASE_MS;
        let mut now = BASE_MS;
        let mut count = 0u64;
        for (k, step) in steps.iter().enumerate() {
            now += step;
            let reached: Vec<TimeMs> = eligible.iter().copied().filter(|&t| t > prev && t <= now).collect();
            let n = reached.len();
            let want: Vec<TimeMs> = match misfire {
                _ if n == 0 => Vec::new(),
                Misfire::FireOnce => vec![reached[n - 1]],
                Misfire::Skip if n == 1 => reached.clone(),
                Misfire::Skip => Vec::new(),
                Misfire::FireEach { cap } => reached[n.saturating_sub(cap as usize)..].to_vec(),
                _ => unreachable!(),
            };
            if n > 0 {
                prev = now;
            }
            let tick = Tick::new(1, 10 + k as u64, Some(now));
            world.clear();
            let out = t.evaluate(&tick, &mut world, &mut pages).unwrap();
            prop_assert!(out.errors.is_empty(), "{:?}", out.errors);
            prop_assert_eq!(&world, &want, "table, tick {} at {}", k, now);
            let mut outbox = Outbox::new(OutboxLimits::default());
            let report = book.on_tick(&tick, &mut count, &mut h, &mut outbox);
            let ran: Vec<TimeMs> = report.fired.iter().filter_map(|f| f.due.time_ms()).collect();
            prop_assert_eq!(&ran, &want, "book, tick {} at {}", k, now);
            if let Some(&next) = eligible.iter().find(|&&t| t > now) {
                prop_assert_eq!(book.get(id).unwrap().next.and_then(|d| d.time_ms()), Some(next));
            }
            if k == reload_at {
                t = table(&grid, &pages);
            }
        }
    }
}
