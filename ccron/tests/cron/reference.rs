//! Property tests of `CronSchedule::next_after` against a brute-force reference written here,
//! independent of croner and of ccron's `ZoneRules`: it walks the zone's local calendar day by
//! day and minute by minute and resolves wall times through chrono-tz directly.
//!
//! The reference encodes the documented DST semantics (docs/cron-expressions.md). A
//! *wall-clock* job names specific hours (its hour field is neither `*` nor `*/n`); any other job
//! is an *interval* job.
//! - a wall time that happens once fires at that instant;
//! - in a fall-back overlap, a wall-clock job fires at the earlier instant only, an interval job
//!   at both;
//! - in a spring-forward gap (of any length), a wall-clock job whose matching wall time was
//!   swallowed fires once at the first instant after the gap, if that wall date still matches the
//!   day fields; an interval job skips the missing times.

use ccron::Principal;
use std::collections::BTreeSet;

use ccron::cron::{CronError, CronSchedule, ZoneRules};
use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone, Timelike};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Field {
    Any,
    Value(u32),
    Step(u32),
    Range(u32, u32),
    List(u32, u32),
}

impl Field {
    fn render(&self) -> String {
        match self {
            Field::Any => "*".into(),
            Field::Value(v) => v.to_string(),
            Field::Step(k) => format!("*/{k}"),
            Field::Range(a, b) => format!("{a}-{b}"),
            Field::List(a, b) => format!("{a},{b}"),
        }
    }

    fn values(&self, min: u32, max: u32) -> BTreeSet<u32> {
        match *self {
            Field::Any => (min..=max).collect(),
            Field::Value(v) => [v].into(),
            Field::Step(k) => (min..=max).step_by(k as usize).collect(),
            Field::Range(a, b) => (a..=b).collect(),
            Field::List(a, b) => [a, b].into(),
        }
    }
}

#[derive(Debug, Clone)]
struct Spec {
    minute: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
}

impl Spec {
    fn render(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.minute.render(),
            self.hour.render(),
            self.dom.render(),
            self.month.render(),
            self.dow.render()
        )
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        if !self.month.values(1, 12).contains(&date.month()) {
            return false;
        }
        let dom_ok = self.dom.values(1, 31).contains(&date.day());
        let dow_ok = self
            .dow
            .values(0, 6)
            .contains(&date.weekday().num_days_from_sunday());
        match (&self.dom, &self.dow) {
            (Field::Any, Field::Any) => true,
            (Field::Any, _) => dow_ok,
            (_, Field::Any) => dom_ok,
            // Vixie cron: both restricted means either.
            _ => dom_ok || dow_ok,
        }
    }

    fn wall_clock(&self) -> bool {
        !matches!(self.hour, Field::Any | Field::Step(_))
    }
}

/// Every fire instant (UTC seconds) of the wall times of local day `day`, by the documented
/// DST semantics (candidates only: callers filter by range).
fn reference_day_instants(spec: &Spec, tz: chrono_tz::Tz, day: NaiveDate) -> Vec<i64> {
    let mut out = Vec::new();
    if !spec.day_matches(day) {
        return out;
    }
    let fixed = spec.wall_clock();
    for h in spec.hour.values(0, 23) {
        for m in spec.minute.values(0, 59) {
            let wall: NaiveDateTime = day.and_hms_opt(h, m, 0).unwrap();
            match tz.from_local_datetime(&wall) {
                chrono::LocalResult::Single(u) => out.push(u.timestamp()),
                chrono::LocalResult::Ambiguous(e, l) => {
                    out.push(e.timestamp());
                    if !fixed {
                        out.push(l.timestamp());
                    }
                }
                chrono::LocalResult::None if fixed => {
                    let mut after = wall;
                    for _ in 0..(30 * 60) {
                        after += chrono::TimeDelta::minutes(1);
                        if let Some(u) = tz.from_local_datetime(&after).earliest() {
                            if spec.day_matches(after.date()) {
                                out.push(u.timestamp());
                            }
                            break;
                        }
                    }
                }
                chrono::LocalResult::None => {}
            }
        }
    }
    out
}

/// The reference: the latest fire instant (UTC seconds) `u` with `after_ms < u·1000 <=
/// through_ms`, walking local days backwards from the last one that can hold it.
fn reference_latest(spec: &Spec, tz: chrono_tz::Tz, after_ms: i64, through_ms: i64) -> Option<i64> {
    let last_day = chrono::DateTime::from_timestamp(through_ms.div_euclid(1000), 0)?.date_naive()
        + chrono::Days::new(2);
    let first_day = chrono::DateTime::from_timestamp(after_ms.div_euclid(1000), 0)?.date_naive()
        - chrono::Days::new(2);
    let mut best: Option<i64> = None;
    let mut day = last_day;
    while day >= first_day {
        let day_end_s = (day + chrono::Days::new(1))
            .and_hms_opt(0, 0, 0)?
            .and_utc()
            .timestamp();
        // No wall time of this day (or earlier) can be later than best: offsets are < 1 day.
        if best.is_some_and(|b| day_end_s + 86_400 < b) {
            break;
        }
        for u in reference_day_instants(spec, tz, day) {
            if u * 1000 > after_ms && u * 1000 <= through_ms && best.is_none_or(|b| u > b) {
                best = Some(u);
            }
        }
        day = day.pred_opt()?;
    }
    best
}

/// The reference: the first fire instant (UTC seconds) strictly after `t_ms`.
fn reference_next(spec: &Spec, tz: chrono_tz::Tz, t_ms: i64) -> Option<i64> {
    let fixed = spec.wall_clock();
    let minutes = spec.minute.values(0, 59);
    let hours = spec.hour.values(0, 23);
    let t_s_floor = t_ms.div_euclid(1000);
    let start_day =
        chrono::DateTime::from_timestamp(t_s_floor, 0)?.date_naive() - chrono::Days::new(2);
    let mut best: Option<i64> = None;
    let consider = |u: i64, best: &mut Option<i64>| {
        if u * 1000 > t_ms && best.is_none_or(|b| u < b) {
            *best = Some(u);
        }
    };
    for offset_days in 0..(366 * 30) {
        let day = start_day + chrono::Days::new(offset_days);
        let day_start_s = day.and_hms_opt(0, 0, 0)?.and_utc().timestamp();
        // No wall time of this day (or later) can be earlier than best: offsets are < 1 day.
        if best.is_some_and(|b| day_start_s - 86_400 > b) {
            break;
        }
        if !spec.day_matches(day) {
            continue;
        }
        for &h in &hours {
            for &m in &minutes {
                let wall: NaiveDateTime = day.and_hms_opt(h, m, 0)?;
                match tz.from_local_datetime(&wall) {
                    chrono::LocalResult::Single(u) => consider(u.timestamp(), &mut best),
                    chrono::LocalResult::Ambiguous(e, l) => {
                        consider(e.timestamp(), &mut best);
                        if !fixed {
                            consider(l.timestamp(), &mut best);
                        }
                    }
                    chrono::LocalResult::None if fixed => {
                        // First wall minute after the gap that exists (gaps of any length).
                        let mut after = wall;
                        for _ in 0..(30 * 60) {
                            after += chrono::TimeDelta::minutes(1);
                            if let Some(u) = tz.from_local_datetime(&after).earliest() {
                                if spec.day_matches(after.date()) {
                                    consider(u.timestamp(), &mut best);
                                }
                                break;
                            }
                        }
                    }
                    chrono::LocalResult::None => {}
                }
            }
        }
    }
    best
}

fn minute_field() -> impl Strategy<Value = Field> {
    prop_oneof![
        2 => Just(Field::Any),
        3 => prop_oneof![Just(0u32), Just(30), Just(15), 0u32..60].prop_map(Field::Value),
        2 => prop::sample::select(vec![5u32, 10, 15, 20, 30]).prop_map(Field::Step),
        1 => (0u32..59).prop_flat_map(|a| (Just(a), a + 1..60)).prop_map(|(a, b)| Field::Range(a, b)),
        1 => (0u32..60, 0u32..60).prop_filter("distinct", |(a, b)| a != b).prop_map(|(a, b)| Field::List(a, b)),
    ]
}

fn hour_field() -> impl Strategy<Value = Field> {
    prop_oneof![
        2 => Just(Field::Any),
        4 => prop_oneof![3 => 0u32..4, 1 => 0u32..24].prop_map(Field::Value),
        1 => prop::sample::select(vec![2u32, 3, 4, 6]).prop_map(Field::Step),
        2 => (0u32..4).prop_flat_map(|a| (Just(a), a + 1..5)).prop_map(|(a, b)| Field::Range(a, b)),
        1 => (0u32..5, 0u32..24).prop_filter("distinct", |(a, b)| a != b).prop_map(|(a, b)| Field::List(a, b)),
    ]
}

fn dom_field() -> impl Strategy<Value = Field> {
    prop_oneof![
        6 => Just(Field::Any),
        2 => (1u32..=31).prop_map(Field::Value),
        1 => prop::sample::select(vec![2u32, 5, 10]).prop_map(Field::Step),
        1 => (1u32..31).prop_flat_map(|a| (Just(a), a + 1..=31)).prop_map(|(a, b)| Field::Range(a, b)),
    ]
}

fn month_field() -> impl Strategy<Value = Field> {
    prop_oneof![
        6 => Just(Field::Any),
        2 => (1u32..=12).prop_map(Field::Value),
        1 => (1u32..12).prop_flat_map(|a| (Just(a), a + 1..=12)).prop_map(|(a, b)| Field::Range(a, b)),
        1 => (1u32..=12, 1u32..=12).prop_filter("distinct", |(a, b)| a != b).prop_map(|(a, b)| Field::List(a, b)),
    ]
}

fn dow_field() -> impl Strategy<Value = Field> {
    prop_oneof![
        6 => Just(Field::Any),
        2 => (0u32..=6).prop_map(Field::Value),
        1 => Just(Field::Range(1, 5)),
        1 => (0u32..=6, 0u32..=6).prop_filter("distinct", |(a, b)| a != b).prop_map(|(a, b)| Field::List(a, b)),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        minute_field(),
        hour_field(),
        dom_field(),
        month_field(),
        dow_field(),
    )
        .prop_map(|(minute, hour, dom, month, dow)| Spec {
            minute,
            hour,
            dom,
            month,
            dow,
        })
}

const ZONES: [&str; 6] = [
    "UTC",
    "Pacific/Apia",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Sao_Paulo",
];

/// 2008-01-01 .. 2032-01-01 in ms.
const FROM_MS: i64 = 1_199_145_600_000;
const TO_MS: i64 = 1_956_528_000_000;

/// A start instant: uniform in 2008..2032, or within three hours of one of the zone's
/// transitions in that range (where DST bugs live).
fn start(zone: &'static str) -> impl Strategy<Value = i64> {
    let rules = ZoneRules::from_iana(zone).unwrap();
    let near: Vec<i64> = rules
        .transitions()
        .iter()
        .map(|t| t.at_utc_s * 1000)
        .filter(|t| (FROM_MS..TO_MS).contains(t))
        .collect();
    let uniform = (FROM_MS..TO_MS).boxed();
    if near.is_empty() {
        uniform
    } else {
        prop_oneof![
            1 => uniform,
            2 => (prop::sample::select(near), -3 * 3_600_000i64..3 * 3_600_000)
                .prop_map(|(t, d)| t + d),
        ]
        .boxed()
    }
}

fn zone_and_start() -> impl Strategy<Value = (&'static str, i64)> {
    prop::sample::select(ZONES.to_vec()).prop_flat_map(|z| (Just(z), start(z)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// `next_after` (and three further steps of `preview`) equal the brute-force reference.
    #[test]
    fn next_after_matches_brute_force((zone, t_ms) in zone_and_start(), spec in spec()) {
        let expression = spec.render();
        let tz: chrono_tz::Tz = zone.parse().unwrap();
        let rules = ZoneRules::from_iana(zone).unwrap();
        match CronSchedule::parse_in(&expression, rules) {
            Ok(schedule) => {
                let got = schedule.preview(t_ms, 4);
                let mut expected = Vec::new();
                let mut at_ms = t_ms;
                for _ in 0..4 {
                    match reference_next(&spec, tz, at_ms) {
                        Some(u) => {
                            expected.push(u * 1000);
                            at_ms = u * 1000;
                        }
                        None => break,
                    }
                }
                prop_assert_eq!(&got, &expected, "{} in {} from {}", expression, zone, t_ms);
                prop_assert!(got.first().is_none_or(|&g| g > t_ms));
                prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
            }
            Err(CronError::NeverFires { .. }) => {
                // The reference agrees: no date of a whole 400-year cycle matches.
                let mut d = NaiveDate::from_ymd_opt(2000, 1, 1).unwrap();
                let end = NaiveDate::from_ymd_opt(2400, 1, 1).unwrap();
                while d < end {
                    prop_assert!(!spec.day_matches(d), "{} matches {}", expression, d);
                    d = d.succ_opt().unwrap();
                }
            }
            Err(e) => prop_assert!(false, "{} rejected: {}", expression, e),
        }
    }

    /// Arbitrary text never panics the parser; whatever parses yields instants strictly after
    /// the start, increasing.
    #[test]
    fn arbitrary_expressions_never_panic(
        expression in "[0-9*/,#LW?+@ A-Z-]{0,40}",
        t_ms in FROM_MS..TO_MS,
    ) {
        if let Ok(schedule) = CronSchedule::parse(&expression) {
            let got = schedule.preview(t_ms, 3);
            prop_assert!(got.first().is_none_or(|&g| g > t_ms));
            prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Admission rejects exactly the patterns whose day fields match no date of a whole
    /// 400-year Gregorian cycle (ccron scans only 28 years; this checks that argument).
    #[test]
    fn never_fires_iff_no_date_in_400_years(
        dom in prop_oneof![
            (28u32..=31).prop_map(Field::Value),
            (28u32..31).prop_flat_map(|a| (Just(a), a + 1..=31)).prop_map(|(a, b)| Field::Range(a, b)),
            (1u32..=31).prop_map(Field::Value),
        ],
        month in prop_oneof![
            2 => prop::sample::select(vec![2u32, 4, 6, 9, 11]).prop_map(Field::Value),
            1 => prop::sample::select(vec![(2u32, 4u32), (4, 6), (9, 11), (2, 11)])
                .prop_map(|(a, b)| Field::List(a, b)),
            1 => month_field(),
        ],
        dow in prop_oneof![3 => Just(Field::Any), 1 => dow_field()],
        and in any::<bool>(),
    ) {
        let spec = Spec { minute: Field::Value(0), hour: Field::Value(0), dom, month, dow };
        // With `+` (AND) the reference must require both fields.
        let and = and && !matches!(spec.dow, Field::Any);
        let expression = format!(
            "0 0 {} {} {}{}",
            spec.dom.render(),
            spec.month.render(),
            if and { "+" } else { "" },
            spec.dow.render()
        );
        let (doms, months, dows) = (spec.dom.values(1, 31), spec.month.values(1, 12), spec.dow.values(0, 6));
        let day_ok = |d: NaiveDate| {
            if !months.contains(&d.month()) {
                return false;
            }
            let dom_ok = doms.contains(&d.day());
            let dow_ok = dows.contains(&d.weekday().num_days_from_sunday());
            match (&spec.dom, &spec.dow) {
                (Field::Any, Field::Any) => true,
                (Field::Any, _) => dow_ok,
                (_, Field::Any) => dom_ok,
                _ if and => dom_ok && dow_ok,
                _ => dom_ok || dow_ok,
            }
        };
        let mut d = NaiveDate::from_ymd_opt(2000, 1, 1).unwrap();
        let end = NaiveDate::from_ymd_opt(2400, 1, 1).unwrap();
        let mut possible = false;
        while d < end {
            if day_ok(d) {
                possible = true;
                break;
            }
            d = d.succ_opt().unwrap();
        }
        match CronSchedule::parse(&expression) {
            Ok(_) => prop_assert!(possible, "{} admitted but never fires", expression),
            Err(CronError::NeverFires { .. }) => {
                prop_assert!(!possible, "{} rejected but fires on {}", expression, d)
            }
            Err(e) => prop_assert!(false, "{} rejected: {}", expression, e),
        }
    }
}

/// Sanity of the reference itself on a hand-checked case (Berlin spring-forward 2026).
#[test]
fn reference_handles_the_gap_like_the_docs_say() {
    let spec = Spec {
        minute: Field::Value(30),
        hour: Field::Value(2),
        dom: Field::Any,
        month: Field::Any,
        dow: Field::Any,
    };
    let tz: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let from = chrono::Utc
        .with_ymd_and_hms(2026, 3, 28, 12, 0, 0)
        .unwrap()
        .timestamp_millis();
    let next = reference_next(&spec, tz, from).unwrap();
    let at = chrono::DateTime::from_timestamp(next, 0).unwrap();
    assert_eq!((at.hour(), at.minute()), (1, 0)); // 03:00 CEST = 01:00Z
}

/// Agreed-time steps between ticks: mostly small (a tick per few seconds to minutes), some
/// jumps forward of hours or days (a stalled cluster catching up), some repeats (same batch).
fn time_steps() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![
            1 => Just(0i64),
            4 => 1..600_000i64,
            2 => 600_000..7_200_000i64,
            1 => 7_200_000..3 * 86_400_000i64,
        ],
        1..30,
    )
}

/// What the documented semantics say a table does over agreed times `times`: arm at the first
/// tick (next = first instant after it), then at each tick that reached `next`, run once for
/// the *latest* instant the tick reached (fire once = latest only) and move to the first
/// instant after the tick. With `each = Some(cap)`, run the latest `cap` reached instants
/// instead, ascending (fire each). Computed with the brute-force reference.
fn reference_fires(
    spec: &Spec,
    tz: chrono_tz::Tz,
    times: &[i64],
    each: Option<usize>,
) -> Vec<(usize, i64)> {
    let mut fires = Vec::new();
    let mut next = reference_next(spec, tz, times[0]).map(|s| s * 1000);
    for (i, &t) in times.iter().enumerate().skip(1) {
        if let Some(n) = next
            && n <= t
        {
            // The reached instants, latest first, as many as the policy runs.
            let mut reached = Vec::new();
            let mut through = t;
            while reached.len() < each.unwrap_or(1) {
                match reference_latest(spec, tz, n - 1, through) {
                    Some(u) => {
                        reached.push(u * 1000);
                        through = u * 1000 - 1;
                    }
                    None => break,
                }
            }
            assert!(!reached.is_empty(), "the reference reached {n}");
            fires.extend(reached.into_iter().rev().map(|u| (i, u)));
            next = reference_next(spec, tz, t).map(|s| s * 1000);
        }
    }
    fires
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Table-level fires over agreed-time sequences (DST transitions, jumps forward, repeated
    /// ticks) equal the brute-force reference, for a cron entry of a `CronTable` (due index)
    /// and for cron schedules held as data in a `Scheduler` with the zone installed (fire once:
    /// the latest reached instant; fire each with a cap of 3: the latest three, ascending).
    #[test]
    fn table_fires_match_brute_force(
        (zone, t0) in zone_and_start(),
        spec in spec(),
        steps in time_steps(),
        restart in any::<prop::sample::Index>(),
    ) {
        use ccron::schedule::{
            Handlers, Limits, Misfire, NewSchedule, ScheduleRequest, Scheduler, Timing,
        };
        use ccron::{CronEntry, CronTable, MemPages, Tick};

        let expression = spec.render();
        let tz: chrono_tz::Tz = zone.parse().unwrap();
        let rules = ZoneRules::from_iana(zone).unwrap();
        let Ok(schedule) = CronSchedule::parse_in(&expression, rules.clone()) else {
            // Rejections are covered by next_after_matches_brute_force.
            return Ok(());
        };
        let mut times = vec![t0];
        for s in &steps {
            let last = *times.last().unwrap();
            times.push(last + s);
        }
        let expected = reference_fires(&spec, tz, &times, None);

        // A cron table entry (persisted; rebuilt from its pages before tick `restart_at`, as
        // after a restart or state transfer).
        let make = |schedule: CronSchedule| {
            let mut table = CronTable::<Vec<i64>>::with_persistence(
                1,
                ccron::PageRange::new(0, 2).unwrap(),
                4,
            );
            table.add(CronEntry::<Vec<i64>>::cron(0, schedule, |ctx| {
                let due = ctx.due_ms().unwrap();
                ctx.state.push(due);
            })).unwrap();
            table
        };
        let mut table = make(schedule.clone());
        let mut pages = MemPages::new(1024, 2);
        let mut fired = Vec::new();
        let mut got = Vec::new();
        let restart_at = restart.index(times.len());
        for (i, &t) in times.iter().enumerate() {
            if i == restart_at {
                table = make(schedule.clone());
                table.reload(&pages).unwrap();
            }
            table.evaluate(&Tick::new(1, i as u64 + 1, Some(t)), &mut fired, &mut pages).unwrap();
            got.extend(fired.drain(..).map(|due| (i, due)));
        }
        prop_assert_eq!(&got, &expected, "table: {} in {} over {:?}", expression, zone, times);

        // The same schedule as data, admitted at the first tick's time, fire once and fire each.
        let expected_each = reference_fires(&spec, tz, &times, Some(3));
        for (misfire, expected) in [
            (Misfire::FireOnce, &expected),
            (Misfire::FireEach { cap: 3 }, &expected_each),
        ] {
            let mut handlers: Handlers<Vec<i64>> = Handlers::new();
            handlers.register("h", |ctx| {
                let due = ctx.due.time_ms().unwrap();
                ctx.state.push(due);
            });
            let mut book = Scheduler::new(1, Limits::default());
            book.apply(&Principal::Host, ScheduleRequest::InstallZone(rules.clone()), &handlers, 0, Some(t0)).unwrap();
            book.apply(&Principal::Host,
                ScheduleRequest::Create(
                    NewSchedule::new(
                        "h",
                        Timing::Cron { expression: expression.clone(), zone: Some(zone.to_string()) },
                    )
                    .with_misfire(misfire),
                ),
                &handlers,
                0,
                Some(t0),
            ).unwrap();
            let mut outbox = ccron::outbox::Outbox::new(ccron::outbox::OutboxLimits::default());
            let mut got = Vec::new();
            for (i, &t) in times.iter().enumerate() {
                book.on_tick(&Tick::new(1, i as u64 + 1, Some(t)), &mut fired, &mut handlers, &mut outbox);
                got.extend(fired.drain(..).map(|due| (i, due)));
            }
            prop_assert_eq!(&got, expected, "book {:?}: {} in {} over {:?}", misfire, expression, zone, times);
        }
    }
}
