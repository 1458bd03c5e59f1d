//! Exclusion calendars of the book's schedules (book layout 11): installed as shared data like
//! zones (authorized, bounded in count and bytes, refused typed), named by cron schedules,
//! skipping the occurrences they exclude in the schedule's zone, with the cron tables'
//! semantics (the same [`ExclusionCalendar`], the same admission refusal as
//! [`CronRule::excluding`]); ticks against a brute-force model that judges every fire instant
//! by its local date; persisted and reloaded. From layout 12 periodic grids too (dates in
//! UTC), against the same model.

use ccron::cron::{
    CronError, CronSchedule, Exclusion, ExclusionCalendar, ZoneRules, parse_rfc3339_ms,
};
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Bounds, CronRule, Handlers, Limits, MAX_BOOK_CALENDARS, Misfire, NewSchedule, Overlap,
    RunPolicy, ScheduleError, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{ClientId, Due, MemPages, PageRange, Policy, Principal, Tick, TimeMs};
use proptest::prelude::*;

fn handlers() -> Handlers<u64> {
    let mut h = Handlers::new();
    h.register("h", |ctx| *ctx.state += 1);
    h
}

fn range() -> PageRange {
    PageRange::new(0, 64).unwrap()
}

pub(crate) fn at(s: &str) -> TimeMs {
    parse_rfc3339_ms(s).unwrap()
}

fn cron(expression: &str, zone: Option<&str>) -> NewSchedule {
    NewSchedule::new(
        "h",
        Timing::Cron {
            expression: expression.into(),
            zone: zone.map(str::to_owned),
        },
    )
}

fn excluding(schedule: NewSchedule, calendar: &str) -> ScheduleRequest {
    ScheduleRequest::CreateExcluding {
        schedule,
        policy: RunPolicy::default(),
        bounds: Bounds::NONE,
        overlap: Overlap::AllowAll,
        calendar: calendar.into(),
    }
}

pub(crate) fn xmas() -> ExclusionCalendar {
    ExclusionCalendar::new("xmas", vec![Exclusion::Annual { month: 12, day: 25 }]).unwrap()
}

/// Runs the book's ticks at `times`, returning the nominal instants that ran.
fn run(book: &mut Scheduler, times: &[TimeMs], seq0: u64) -> Vec<TimeMs> {
    let mut h = handlers();
    let mut ran = Vec::new();
    for (k, &t) in times.iter().enumerate() {
        let mut outbox = Outbox::new(OutboxLimits::default());
        let report = book.on_tick(
            &Tick::new(1, seq0 + k as u64, Some(t)),
            &mut 0,
            &mut h,
            &mut outbox,
        );
        ran.extend(report.fired.iter().filter_map(|f| f.due.time_ms()));
    }
    ran
}

/// A holiday is a local day of the schedule's zone: "01:00 every day" at +05:30 is 19:30 UTC
/// the evening before, and Christmas excludes the run at 19:30 UTC on December 24th.
#[test]
fn a_holiday_is_skipped_in_the_schedules_zone() {
    let h = handlers();
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    let host = Principal::Host;
    book.apply(
        &host,
        ScheduleRequest::InstallZone(ZoneRules::fixed("Y", 19_800).unwrap()),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(xmas()),
        &h,
        2,
        Some(0),
    )
    .unwrap();
    let admitted = at("2026-12-23T00:00:00Z");
    let id = book
        .apply(
            &host,
            excluding(cron("0 1 * * *", Some("Y")), "xmas"),
            &h,
            3,
            Some(admitted),
        )
        .unwrap()
        .unwrap();
    assert_eq!(book.get(id).unwrap().calendar.as_deref(), Some("xmas"));
    let hours: Vec<TimeMs> = (1..=100).map(|k| admitted + k * 3_600_000).collect();
    let ran = run(&mut book, &hours, 10);
    assert_eq!(
        ran,
        vec![
            at("2026-12-23T19:30:00Z"),
            at("2026-12-25T19:30:00Z"),
            at("2026-12-26T19:30:00Z"),
        ]
    );
    book.check_invariants().unwrap();
}

/// Installing calendars: an admin only; at most [`MAX_BOOK_CALENDARS`]; within the zones
/// part's bytes together with the zones; each refusal typed, counted, and changing nothing.
#[test]
fn calendars_are_installed_by_admins_within_count_and_bytes() {
    let h = handlers();
    let admin = ClientId([7; 32]);
    let stranger = Principal::Client(ClientId([8; 32]));
    let mut book = Scheduler::new_in(1, Limits::default(), range())
        .with_policy(Policy::default().with_admin(admin));
    let install = |c| ScheduleRequest::InstallCalendar(c);
    assert!(matches!(
        book.apply(&stranger, install(xmas()), &h, 1, Some(0)),
        Err(ScheduleError::Unauthorized { .. })
    ));
    assert!(book.calendar("xmas").is_none());
    let admin = Principal::Client(admin);
    for k in 0..MAX_BOOK_CALENDARS {
        let c = ExclusionCalendar::new(
            &format!("c{k:02}"),
            vec![Exclusion::Annual { month: 1, day: 1 }],
        )
        .unwrap();
        book.apply(&admin, install(c), &h, 2, Some(0)).unwrap();
    }
    let before = book.clone();
    assert!(matches!(
        book.apply(&admin, install(xmas()), &h, 3, Some(0)),
        Err(ScheduleError::Limit(_))
    ));
    assert!(book.eq_but_refusals(&before));
    assert_eq!(book.calendar_refusals(), 1);
    // Replacing an installed one is no new calendar.
    let c00 = ExclusionCalendar::new("c00", vec![Exclusion::Annual { month: 2, day: 2 }]).unwrap();
    book.apply(&admin, install(c00.clone()), &h, 4, Some(0))
        .unwrap();
    assert_eq!(book.calendar("c00"), Some(&c00));
    assert_eq!(book.calendar_names().count(), MAX_BOOK_CALENDARS);

    // Bytes: a book whose zones part holds 600 bytes takes a small calendar, not a large one.
    let limits = Limits {
        max_zones_bytes: Some(600),
        ..Limits::default()
    };
    let mut small = Scheduler::new(1, limits);
    small
        .apply(&Principal::Host, install(xmas()), &h, 1, Some(0))
        .unwrap();
    let dates: Vec<Exclusion> = (1..=3)
        .flat_map(|month| {
            (1..=28).map(move |day| Exclusion::Date {
                year: 2027,
                month,
                day,
            })
        })
        .collect();
    let big = ExclusionCalendar::new("big", dates).unwrap();
    assert!(matches!(
        small.apply(&Principal::Host, install(big), &h, 2, Some(0)),
        Err(ScheduleError::Limit(_))
    ));
    assert!(small.calendar("big").is_none());
    assert_eq!(small.calendar_refusals(), 1);
}

/// Naming calendars: an unknown one, and a calendar that keeps the schedule (cron, or a
/// periodic grid) from ever firing are refused typed, as a cron table entry's calendar is
/// ([`CronRule::excluding`] refuses the same pair with the same error).
#[test]
fn schedules_that_could_never_fire_are_refused_as_table_entries_are() {
    let h = handlers();
    let host = Principal::Host;
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    let weekdays =
        ExclusionCalendar::new("weekdays", vec![Exclusion::Weekdays { mask: 0x3e }]).unwrap();
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(weekdays.clone()),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    let now = at("2026-06-01T00:00:00Z");
    assert_eq!(
        book.apply(
            &host,
            excluding(cron("0 9 * * *", None), "nope"),
            &h,
            2,
            Some(now)
        ),
        Err(ScheduleError::UnknownCalendar("nope".into()))
    );
    // Christmas at 09:00 under a calendar excluding Christmas.
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(xmas()),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    let never = book.apply(
        &host,
        excluding(cron("0 9 25 12 *", None), "xmas"),
        &h,
        3,
        Some(now),
    );
    let table = CronRule::new(CronSchedule::parse("0 9 25 12 *").unwrap()).excluding(xmas());
    assert!(matches!(
        never,
        Err(ScheduleError::Cron(CronError::ExcludedForever { .. }))
    ));
    assert_eq!(never.unwrap_err(), table.unwrap_err());
    // Monday to Friday at 09:00 under a calendar excluding Monday to Friday: its search
    // spends the skip budget (a week per skip) before the horizon; refused the same way.
    let weekly = book.apply(
        &host,
        excluding(cron("0 9 * * 1-5", None), "weekdays"),
        &h,
        3,
        Some(now),
    );
    let table = CronRule::new(CronSchedule::parse("0 9 * * 1-5").unwrap()).excluding(weekdays);
    assert!(matches!(weekly, Err(ScheduleError::Cron(_))), "{weekly:?}");
    assert_eq!(weekly.unwrap_err(), table.unwrap_err());
    assert!(book.is_empty());
    // A weekly grid on Thursdays (1970-01-01 was one) under the same calendar: its search
    // spends the skip budget (a week per skip); refused the same way (layout 12: periodic
    // schedules take calendars).
    let periodic = NewSchedule::new(
        "h",
        Timing::Every {
            period_ms: 7 * DAY_MS,
            start_ms: Some(0),
        },
    );
    assert!(matches!(
        book.apply(
            &host,
            excluding(periodic.clone(), "weekdays"),
            &h,
            4,
            Some(now)
        ),
        Err(ScheduleError::Cron(
            CronError::CalendarBudgetExhausted { .. }
        ))
    ));
    // SetCalendar on existing schedules: the same refusals, nothing changes.
    let daily = book
        .apply(
            &host,
            ScheduleRequest::Create(cron("0 9 25 12 *", None)),
            &h,
            5,
            Some(now),
        )
        .unwrap()
        .unwrap();
    let every = book
        .apply(&host, ScheduleRequest::Create(periodic), &h, 6, Some(now))
        .unwrap()
        .unwrap();
    let set = |id, name: &str| ScheduleRequest::SetCalendar {
        target: Target::Id(id),
        calendar: Some(name.into()),
    };
    let before = book.clone();
    assert!(matches!(
        book.apply(&host, set(daily, "xmas"), &h, 7, Some(now)),
        Err(ScheduleError::Cron(CronError::ExcludedForever { .. }))
    ));
    assert!(matches!(
        book.apply(&host, set(every, "weekdays"), &h, 8, Some(now)),
        Err(ScheduleError::Cron(
            CronError::CalendarBudgetExhausted { .. }
        ))
    ));
    assert_eq!(
        book.apply(&host, set(daily, "nope"), &h, 9, Some(now)),
        Err(ScheduleError::UnknownCalendar("nope".into()))
    );
    assert!(book.eq_but_refusals(&before));
    // Removing no calendar from a periodic schedule is admitted (layout 12); from a one-shot
    // it is refused (found by `book_fits`: a one-shot's next point recomputed by it was lost).
    let clear = ScheduleRequest::SetCalendar {
        target: Target::Id(every),
        calendar: None,
    };
    book.apply(&host, clear, &h, 9, Some(now)).unwrap();
    let once = NewSchedule::new("h", Timing::At(Due::Time(now + 1_000)));
    let once = book
        .apply(&host, ScheduleRequest::Create(once), &h, 9, Some(now))
        .unwrap()
        .unwrap();
    let clear = ScheduleRequest::SetCalendar {
        target: Target::Id(once),
        calendar: None,
    };
    assert!(matches!(
        book.apply(&host, clear, &h, 9, Some(now)),
        Err(ScheduleError::Invalid(_))
    ));
    assert_eq!(book.get(once).unwrap().next, Some(Due::Time(now + 1_000)));
    book.check_invariants().unwrap();
    book.apply(
        &host,
        ScheduleRequest::Cancel(Target::Id(once)),
        &h,
        9,
        Some(now),
    )
    .unwrap();
    // Eight calendar requests refused: four creates and four SetCalendar.
    assert_eq!(book.calendar_refusals(), 8);
    // Within an end bound: no allowed occurrence before it is NeverFires.
    let dec = ExclusionCalendar::new(
        "dec",
        vec![
            Exclusion::Date {
                year: 2026,
                month: 12,
                day: 24,
            },
            Exclusion::Annual { month: 12, day: 25 },
        ],
    )
    .unwrap();
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(dec),
        &h,
        10,
        Some(now),
    )
    .unwrap();
    let req = ScheduleRequest::CreateExcluding {
        schedule: cron("0 9 24,25 12 *", None),
        policy: RunPolicy::default(),
        bounds: Bounds::NONE.ending_at(at("2026-12-31T00:00:00Z")),
        overlap: Overlap::AllowAll,
        calendar: "dec".into(),
    };
    assert_eq!(
        book.apply(&host, req, &h, 11, Some(now)),
        Err(ScheduleError::NeverFires(
            ccron::schedule::RetireReason::Ended
        ))
    );
}

/// A calendar replaced re-evaluates the schedules naming it; one it would silence refuses
/// the install. Calendars and the names persist across save and load; removing the name
/// restores every instant.
#[test]
fn replacing_a_calendar_re_evaluates_its_schedules_and_everything_persists() {
    let h = handlers();
    let host = Principal::Host;
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    let none = ExclusionCalendar::new("cal", vec![Exclusion::Annual { month: 1, day: 1 }]).unwrap();
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(none),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    let now = at("2026-06-01T00:00:00Z");
    let id = book
        .apply(
            &host,
            excluding(cron("0 9 * * *", None), "cal"),
            &h,
            2,
            Some(now),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        book.get(id).unwrap().next,
        Some(Due::Time(at("2026-06-01T09:00:00Z")))
    );
    // June 1st excluded now: the next point moves to June 2nd.
    let june = ExclusionCalendar::new(
        "cal",
        vec![Exclusion::Date {
            year: 2026,
            month: 6,
            day: 1,
        }],
    )
    .unwrap();
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(june),
        &h,
        3,
        Some(now),
    )
    .unwrap();
    assert_eq!(
        book.get(id).unwrap().next,
        Some(Due::Time(at("2026-06-02T09:00:00Z")))
    );
    // A calendar excluding Christmas still lets the daily schedule fire, but not one firing
    // on Christmas only: its install is refused.
    let silence =
        ExclusionCalendar::new("cal", vec![Exclusion::Annual { month: 12, day: 25 }]).unwrap();
    let sat = book
        .apply(
            &host,
            ScheduleRequest::Create(cron("0 9 25 12 *", None)),
            &h,
            4,
            Some(now),
        )
        .unwrap()
        .unwrap();
    book.apply(
        &host,
        ScheduleRequest::SetCalendar {
            target: Target::Id(sat),
            calendar: Some("cal".into()),
        },
        &h,
        5,
        Some(now),
    )
    .unwrap();
    let before = book.clone();
    assert!(matches!(
        book.apply(
            &host,
            ScheduleRequest::InstallCalendar(silence),
            &h,
            6,
            Some(now)
        ),
        Err(ScheduleError::Cron(CronError::ExcludedForever { .. }))
    ));
    assert!(book.eq_but_refusals(&before));
    // Saved and reloaded: the calendar and the names persist.
    let mut pages = MemPages::new(4_096, 64);
    book.save(&mut pages, range()).unwrap();
    let again = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
    assert!(again == book);
    assert_eq!(again.get(id).unwrap().calendar.as_deref(), Some("cal"));
    assert_eq!(again.calendar("cal"), book.calendar("cal"));
    again.check_invariants().unwrap();
    // Removing the name: from its next point on, every instant again.
    let mut book = again;
    book.apply(
        &host,
        ScheduleRequest::SetCalendar {
            target: Target::Id(id),
            calendar: None,
        },
        &h,
        7,
        Some(now),
    )
    .unwrap();
    assert_eq!(book.get(id).unwrap().calendar, None);
    assert_eq!(
        book.get(id).unwrap().next,
        Some(Due::Time(at("2026-06-02T09:00:00Z")))
    );
    // Version 1 at creation, 2 after the SetCalendar (a calendar install changes no version,
    // as a zone install does not).
    assert_eq!(book.get(id).unwrap().version, 2);
}

// ---- the brute-force model ----

/// Days since 1970-01-01 to (year, month, day), by repeated subtraction of whole years and
/// months (slow and plain: the model).
fn civil(mut days: i64) -> (i64, u8, u8) {
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let mut year = 1970;
    loop {
        let len = if leap(year) { 366 } else { 365 };
        if days < len {
            break;
        }
        days -= len;
        year += 1;
    }
    let lens = [
        31,
        if leap(year) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut month = 0;
    while days >= lens[month] {
        days -= lens[month];
        month += 1;
    }
    (year, month as u8 + 1, days as u8 + 1)
}

/// Whether the model's calendar excludes `t` for a schedule in `zone`: its local date and
/// weekday from the zone's offset, each exclusion checked in turn.
pub(crate) fn model_excludes(exclusions: &[Exclusion], t: TimeMs, zone: &ZoneRules) -> bool {
    let local_s = t.div_euclid(1_000) + i64::from(zone.offset_at(t.div_euclid(1_000)));
    let days = local_s.div_euclid(86_400);
    let (year, month, day) = civil(days);
    let weekday = (days + 4).rem_euclid(7) as u8; // 1970-01-01 was a Thursday
    exclusions.iter().any(|e| match *e {
        Exclusion::Date {
            year: y,
            month: m,
            day: d,
        } => i64::from(y) == year && m == month && d == day,
        Exclusion::Annual { month: m, day: d } => m == month && d == day,
        Exclusion::Weekdays { mask } => mask & (1 << weekday) != 0,
        Exclusion::Span { from_ms, until_ms } => from_ms <= t && t < until_ms,
    })
}

pub(crate) const BASE_MS: TimeMs = 1_798_761_600_000; // 2027-01-01T00:00:00Z
pub(crate) const DAY_MS: i64 = 86_400_000;

const EXPRESSIONS: &[&str] = &[
    "0 */5 * * *",
    "30 9 * * 1-5",
    "30 2 * * *",
    "*/45 * * * *",
    "0 12 1,15 * *",
];

fn zones() -> Vec<(Option<&'static str>, ZoneRules)> {
    vec![
        (None, ZoneRules::utc()),
        (Some("X+0530"), ZoneRules::fixed("X+0530", 19_800).unwrap()),
        (Some("X-1100"), ZoneRules::fixed("X-1100", -39_600).unwrap()),
        (
            Some("Europe/Berlin"),
            ZoneRules::from_iana("Europe/Berlin").unwrap(),
        ),
    ]
}

pub(crate) fn exclusion() -> impl Strategy<Value = Exclusion> {
    prop_oneof![
        (2027..=2027i32, 1..=3u8, 1..=28u8).prop_map(|(year, month, day)| Exclusion::Date {
            year,
            month,
            day
        }),
        (1..=3u8, 1..=29u8).prop_map(|(month, day)| Exclusion::Annual { month, day }),
        (1..=0x7eu8).prop_map(|mask| Exclusion::Weekdays { mask }),
        (0..60 * DAY_MS, 1..5 * DAY_MS).prop_map(|(from, len)| Exclusion::Span {
            from_ms: BASE_MS + from,
            until_ms: BASE_MS + from + len,
        }),
    ]
}

pub(crate) fn misfire() -> impl Strategy<Value = Misfire> {
    prop_oneof![
        Just(Misfire::FireOnce),
        Just(Misfire::Skip),
        (1u32..4).prop_map(|cap| Misfire::FireEach { cap }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random calendars, expressions, zones and misfire policies over random tick sequences
    /// (on time, late, repeated), saved and reloaded at a random tick: admission refuses
    /// exactly what a cron table entry's calendar refuses, and every tick runs exactly the
    /// model's instants, the model judging every fire instant of the window by its local date.
    #[test]
    fn calendared_schedules_match_the_brute_force_model(
        exclusions in proptest::collection::vec(exclusion(), 0..8),
        expr in 0..EXPRESSIONS.len(),
        zone in 0..4usize,
        misfire in misfire(),
        steps in proptest::collection::vec(0i64..(40 * 3_600_000), 1..30),
        reload_at in 0usize..30,
    ) {
        let Ok(calendar) = ExclusionCalendar::new("model", exclusions.clone()) else {
            return Ok(());
        };
        let (zone_name, rules) = zones().swap_remove(zone);
        let h = handlers();
        let host = Principal::Host;
        let mut book = Scheduler::new_in(1, Limits::default(), range());
        if zone_name.is_some() {
            book.apply(&host, ScheduleRequest::InstallZone(rules.clone()), &h, 1, Some(0)).unwrap();
        }
        book.apply(&host, ScheduleRequest::InstallCalendar(calendar.clone()), &h, 2, Some(0)).unwrap();
        let job = CronSchedule::parse_in(EXPRESSIONS[expr], rules.clone()).unwrap();
        let table = CronRule::new(job.clone()).excluding(calendar);
        let got = book.apply(
            &host,
            excluding(cron(EXPRESSIONS[expr], zone_name).with_misfire(misfire), "model"),
            &h,
            3,
            Some(BASE_MS),
        );
        let id = match (got, table) {
            (Ok(Some(id)), Ok(_)) => id,
            (Err(e), Err(t)) => {
                prop_assert_eq!(e, t);
                prop_assert!(book.is_empty());
                return Ok(());
            }
            (got, table) => {
                return Err(TestCaseError::fail(format!("book {got:?}, table {:?}", table.err())));
            }
        };
        let horizon = BASE_MS + steps.iter().sum::<i64>();
        let eligible: Vec<TimeMs> = job
            .instants_between(BASE_MS, horizon)
            .unwrap()
            .into_iter()
            .filter(|&t| t > BASE_MS && !model_excludes(&exclusions, t, &rules))
            .collect();
        let mut prev = BASE_MS;
        let mut now = BASE_MS;
        let mut pages = MemPages::new(4_096, 64);
        let mut hh = handlers();
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
            let mut outbox = Outbox::new(OutboxLimits::default());
            let report = book.on_tick(&Tick::new(1, 10 + k as u64, Some(now)), &mut 0, &mut hh, &mut outbox);
            let ran: Vec<TimeMs> = report.fired.iter().filter_map(|f| f.due.time_ms()).collect();
            prop_assert_eq!(&ran, &want, "tick {} at {}", k, now);
            // The next point is the model's first eligible instant after the tick.
            if let Some(&next) = eligible.iter().find(|&&t| t > now) {
                prop_assert_eq!(book.get(id).unwrap().next, Some(Due::Time(next)));
            }
            if k == reload_at {
                book.save(&mut pages, range()).unwrap();
                let again = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
                prop_assert!(again == book);
                book = again;
            }
        }
        book.check_invariants().map_err(TestCaseError::fail)?;
    }
}

/// Every 12 hours from 2026-12-24T00:00Z under Christmas (read in UTC: a grid has no zone):
/// the two points of December 25th are skipped, never postponed (the next is December 26th,
/// 00:00, on the grid); a late tick's `FireOnce` runs the latest allowed point it reached;
/// a `FireEach` catch-up runs only allowed points; the calendar persists with the schedule.
#[test]
fn a_periodic_grid_skips_its_excluded_points() {
    let h = handlers();
    let host = Principal::Host;
    let start = at("2026-12-24T00:00:00Z");
    let grid = |misfire| {
        NewSchedule::new(
            "h",
            Timing::Every {
                period_ms: DAY_MS / 2,
                start_ms: Some(start),
            },
        )
        .with_misfire(misfire)
    };
    for (misfire, ticks, want) in [
        // On time: the excluded points' ticks run nothing.
        (
            Misfire::FireOnce,
            vec![
                "2026-12-24T00:00:00Z",
                "2026-12-24T12:00:00Z",
                "2026-12-25T00:00:00Z",
                "2026-12-25T12:00:00Z",
                "2026-12-26T00:00:00Z",
            ],
            vec![
                "2026-12-24T00:00:00Z",
                "2026-12-24T12:00:00Z",
                "2026-12-26T00:00:00Z",
            ],
        ),
        (
            Misfire::FireOnce,
            vec![
                "2026-12-24T00:00:00Z",
                "2026-12-25T18:00:00Z",
                "2026-12-26T01:00:00Z",
            ],
            vec![
                "2026-12-24T00:00:00Z",
                "2026-12-24T12:00:00Z",
                "2026-12-26T00:00:00Z",
            ],
        ),
        (
            Misfire::FireEach { cap: 10 },
            vec!["2026-12-26T13:00:00Z"],
            vec![
                "2026-12-24T00:00:00Z",
                "2026-12-24T12:00:00Z",
                "2026-12-26T00:00:00Z",
                "2026-12-26T12:00:00Z",
            ],
        ),
    ] {
        let mut book = Scheduler::new_in(1, Limits::default(), range());
        book.apply(
            &host,
            ScheduleRequest::InstallCalendar(xmas()),
            &h,
            1,
            Some(0),
        )
        .unwrap();
        let id = book
            .apply(
                &host,
                excluding(grid(misfire), "xmas"),
                &h,
                2,
                Some(start - 1),
            )
            .unwrap()
            .unwrap();
        assert_eq!(book.get(id).unwrap().calendar.as_deref(), Some("xmas"));
        let times: Vec<TimeMs> = ticks.iter().map(|t| at(t)).collect();
        let ran = run(&mut book, &times, 10);
        let want: Vec<TimeMs> = want.iter().map(|t| at(t)).collect();
        assert_eq!(ran, want, "{misfire:?}");
        let mut pages = MemPages::new(4_096, 64);
        book.save(&mut pages, range()).unwrap();
        let again = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
        assert!(again == book);
        book.check_invariants().unwrap();
    }
}

/// Periods the periodic proptest draws: hours, days, a week, and ones that drift across days.
pub(crate) const PERIODS: &[i64] = &[
    3_600_000,
    5 * 3_600_000,
    DAY_MS,
    2 * DAY_MS + 3_600_000,
    7 * DAY_MS,
    45 * 60_000,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random calendars, grids and misfire policies over random tick sequences, saved and
    /// reloaded at a random tick: every tick runs exactly the model's grid points, the model
    /// judging each point by its UTC date and weekday computed by plain arithmetic; the next
    /// point is the model's first allowed one. A refused grid (it could never fire) has no
    /// allowed point in the model's horizon either.
    #[test]
    fn calendared_periodic_grids_match_the_brute_force_model(
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
        let h = handlers();
        let host = Principal::Host;
        let mut book = Scheduler::new_in(1, Limits::default(), range());
        book.apply(&host, ScheduleRequest::InstallCalendar(calendar), &h, 2, Some(0)).unwrap();
        let schedule = NewSchedule::new(
            "h",
            Timing::Every { period_ms: period, start_ms: Some(start) },
        )
        .with_misfire(misfire);
        let horizon = BASE_MS + steps.iter().sum::<i64>();
        let eligible: Vec<TimeMs> = (0..)
            .map(|k| start + k * period)
            .take_while(|&t| t <= horizon.max(start + 400 * DAY_MS))
            .filter(|&t| !model_excludes(&exclusions, t, &utc))
            .collect();
        let id = match book.apply(&host, excluding(schedule, "model"), &h, 3, Some(BASE_MS)) {
            Ok(Some(id)) => id,
            Err(ScheduleError::Cron(_)) => {
                prop_assert!(eligible.is_empty(), "refused, the model allows {:?}", eligible.first());
                return Ok(());
            }
            other => return Err(TestCaseError::fail(format!("{other:?}"))),
        };
        let mut prev = BASE_MS;
        let mut now = BASE_MS;
        let mut pages = MemPages::new(4_096, 64);
        let mut hh = handlers();
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
            let mut outbox = Outbox::new(OutboxLimits::default());
            let report = book.on_tick(&Tick::new(1, 10 + k as u64, Some(now)), &mut 0, &mut hh, &mut outbox);
            let ran: Vec<TimeMs> = report.fired.iter().filter_map(|f| f.due.time_ms()).collect();
            prop_assert_eq!(&ran, &want, "tick {} at {}", k, now);
            if let Some(&next) = eligible.iter().find(|&&t| t > now) {
                prop_assert_eq!(book.get(id).unwrap().next, Some(Due::Time(next)));
            }
            if k == reload_at {
                book.save(&mut pages, range()).unwrap();
                let again = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
                prop_assert!(again == book);
                book = again;
            }
        }
        book.check_invariants().map_err(TestCaseError::fail)?;
    }
}

/// A periodic schedule without an anchored start (`Every { start_ms: None }`: its grid starts
/// at the request's agreed time) takes a calendar like an anchored one: created naming it, or
/// given one later; without an agreed time it is refused `NeedsTime` (the grid has no
/// origin yet), never as "not a recurring schedule".
#[test]
fn an_unanchored_periodic_grid_takes_a_calendar() {
    let h = handlers();
    let host = Principal::Host;
    let now = at("2026-12-24T06:00:00Z");
    let grid = NewSchedule::new(
        "h",
        Timing::Every {
            period_ms: DAY_MS / 2,
            start_ms: None,
        },
    );
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    book.apply(
        &host,
        ScheduleRequest::InstallCalendar(xmas()),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    let before = book.clone();
    assert_eq!(
        book.apply(&host, excluding(grid.clone(), "xmas"), &h, 2, None),
        Err(ScheduleError::NeedsTime)
    );
    assert!(book.eq_but_refusals(&before));
    let id = book
        .apply(&host, excluding(grid.clone(), "xmas"), &h, 2, Some(now))
        .unwrap()
        .unwrap();
    let info = book.get(id).unwrap();
    assert_eq!(info.calendar.as_deref(), Some("xmas"));
    assert_eq!(
        info.schedule.timing,
        Timing::Every {
            period_ms: DAY_MS / 2,
            start_ms: Some(now)
        }
    );
    // The grid from `now`, Christmas (UTC) skipped.
    let ticks: Vec<TimeMs> = (0..5).map(|k| now + k * DAY_MS / 2).collect();
    let ran = run(&mut book, &ticks, 10);
    assert_eq!(ran, vec![now, now + DAY_MS / 2, now + 2 * DAY_MS]);
    // SetCalendar on an unanchored grid created without one.
    let plain = book
        .apply(&host, ScheduleRequest::Create(grid), &h, 20, Some(now))
        .unwrap()
        .unwrap();
    book.apply(
        &host,
        ScheduleRequest::SetCalendar {
            target: Target::Id(plain),
            calendar: Some("xmas".into()),
        },
        &h,
        21,
        Some(now),
    )
    .unwrap();
    assert_eq!(book.get(plain).unwrap().calendar.as_deref(), Some("xmas"));
    book.check_invariants().unwrap();
}
