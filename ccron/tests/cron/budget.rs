//! Regression tests for issue 10, defect 3: a pattern that can never fire is rejected at
//! admission (every field is checked, not only month and day), and every search runs under a
//! deterministic step budget, yet sparse valid patterns still resolve exactly.
//!
//! References: plain croner 4.0.3 over chrono (no budget, no ccron code) in UTC and fixed
//! offsets, where it answers quickly; and a day-by-day chrono walk for the sparse day patterns.

use ccron::cron::{CronError, CronSchedule, ZoneRules, format_rfc3339_ms, parse_rfc3339_ms};
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, TimeZone, Utc, Weekday};
use croner::parser::{CronParser, Seconds, Year};
use proptest::prelude::*;

fn never(expression: &str) -> bool {
    matches!(
        CronSchedule::parse(expression),
        Err(CronError::NeverFires { .. })
    )
}

fn ms(rfc3339: &str) -> i64 {
    parse_rfc3339_ms(rfc3339).unwrap()
}

#[test]
fn an_empty_list_in_any_field_never_fires() {
    // The defect's own example: an empty list in the hour field.
    assert!(never("0 0 , * * *"));
    // Every field of the 6-field form, then of the 5-field form.
    for (i, _) in ["s", "m", "h", "dom", "mon", "dow"].iter().enumerate() {
        let mut fields = ["0", "0", "0", "*", "*", "*"];
        fields[i] = ",";
        let expression = fields.join(" ");
        assert!(never(&expression), "{expression:?} admitted");
        fields[i] = ",,";
        let expression = fields.join(" ");
        assert!(never(&expression), "{expression:?} admitted");
    }
    for (i, _) in ["m", "h", "dom", "mon", "dow"].iter().enumerate() {
        let mut fields = ["0", "0", "*", "*", "*"];
        fields[i] = ",";
        let expression = fields.join(" ");
        assert!(never(&expression), "{expression:?} admitted");
    }
    // An empty day-of-week with a restricted day-of-month is OR semantics: the day of month
    // alone decides, so it fires; with `+` (AND) nothing matches.
    assert!(CronSchedule::parse("0 0 1 * ,").is_ok_and(|s| s.next_after(0).is_some()));
    assert!(never("0 0 , * ,"));
}

#[test]
fn impossible_dates_never_fire() {
    for expression in [
        "0 0 30 2 *",
        "0 0 31 4,6,9,11 *",
        "0 0 30,31 2 *",
        "0 0 31 2,4 *",
        "0 0 30 2 +MON",
        // Day 1 is never a fifth weekday; the last day is never a first Monday.
        "0 0 1 * +1#5",
        "0 0 L * +1#1",
    ] {
        assert!(
            never(expression),
            "{expression:?} not rejected as never firing"
        );
    }
    // The last day of February that is its fifth Friday: a leap February starting on a Friday.
    let rare = CronSchedule::parse("0 0 L 2 +5#5").unwrap();
    let next = rare
        .next_after(ms("2026-01-01T00:00:00Z"))
        .map(format_rfc3339_ms);
    assert_eq!(next.as_deref(), Some("2036-02-29T00:00:00Z"));
    // The 5th Monday of a February needs a leap February starting on a Monday: rare, valid.
    let fifth = CronSchedule::parse("0 0 * 2 1#5").unwrap();
    assert_eq!(
        fifth
            .next_after(ms("2026-01-01T00:00:00Z"))
            .map(format_rfc3339_ms),
        Some("2044-02-29T00:00:00Z".to_owned())
    );
}

/// The first midnight (UTC) strictly after `from_ms` whose date satisfies `day`, by walking
/// chrono dates one by one (at most 60 years).
fn naive_next_midnight(from_ms: i64, day: impl Fn(NaiveDate) -> bool) -> Option<i64> {
    let from = DateTime::<Utc>::from_timestamp_millis(from_ms)?;
    let mut date = from.date_naive();
    for _ in 0..(366 * 60) {
        let at = date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
        if at > from_ms && day(date) {
            return Some(at);
        }
        date = date.succ_opt()?;
    }
    None
}

#[test]
fn sparse_valid_patterns_resolve_exactly() {
    let leap = |d: NaiveDate| d.month() == 2 && d.day() == 29;
    type DayRule = Box<dyn Fn(NaiveDate) -> bool>;
    let cases: Vec<(&str, DayRule)> = vec![
        ("0 0 29 2 *", Box::new(leap)),
        (
            "0 0 29 2 +MON",
            Box::new(move |d| leap(d) && d.weekday() == Weekday::Mon),
        ),
        // Vixie OR: the 31st, and every Monday.
        (
            "0 0 31 * MON",
            Box::new(|d| d.day() == 31 || d.weekday() == Weekday::Mon),
        ),
        (
            "0 0 31 * +MON",
            Box::new(|d| d.day() == 31 && d.weekday() == Weekday::Mon),
        ),
        (
            "0 0 13 * 5",
            Box::new(|d| d.day() == 13 || d.weekday() == Weekday::Fri),
        ),
        (
            "0 0 13 * +FRI",
            Box::new(|d| d.day() == 13 && d.weekday() == Weekday::Fri),
        ),
    ];
    for (expression, day) in &cases {
        let schedule = CronSchedule::parse(expression).unwrap();
        // Starts across the supported range, including around 2100 (not a leap year) and just
        // before the year-4000 horizon.
        for start in [
            "1900-01-01T00:00:00Z",
            "1999-12-31T12:00:00Z",
            "2026-03-28T12:00:00Z",
            "2044-02-29T00:00:00Z",
            "2096-03-01T00:00:00Z",
            "2400-02-29T00:00:00Z",
            "3950-06-15T00:00:00Z",
        ] {
            let from_ms = ms(start);
            let mut at_ms = from_ms;
            for _ in 0..3 {
                let got = schedule.try_next_after(at_ms).unwrap();
                let want =
                    naive_next_midnight(at_ms, day).filter(|&t| t < ms("4000-01-01T00:00:00Z"));
                assert_eq!(
                    got.map(format_rfc3339_ms),
                    want.map(format_rfc3339_ms),
                    "{expression:?} after {}",
                    format_rfc3339_ms(at_ms)
                );
                match got {
                    Some(t) => at_ms = t,
                    None => break,
                }
            }
        }
    }
    // Near the horizon: nothing is returned at or beyond 4000-01-01.
    let rare = CronSchedule::parse("0 0 29 2 +MON").unwrap();
    let last = rare.try_next_after(ms("3990-01-01T00:00:00Z")).unwrap();
    assert!(last.is_none_or(|t| t < ms("4000-01-01T00:00:00Z")));
}

#[test]
fn catch_up_over_the_whole_range_stays_within_budget() {
    // latest_in used to take 8–24 s on never-firing patterns; on the sparsest valid ones it
    // must answer exactly, within its search budget, over the whole supported range.
    let rare = CronSchedule::parse("0 0 29 2 +MON").unwrap();
    let latest = rare
        .try_latest_in(ms("1900-01-01T00:00:00Z"), ms("2100-01-01T00:00:00Z"), 3)
        .unwrap();
    let got: Vec<String> = latest.into_iter().map(format_rfc3339_ms).collect();
    assert_eq!(
        got,
        [
            "2016-02-29T00:00:00Z",
            "2044-02-29T00:00:00Z",
            "2072-02-29T00:00:00Z"
        ]
    );
    for zone in ["Europe/Berlin", "Australia/Lord_Howe", "America/New_York"] {
        let rules = ZoneRules::from_iana(zone).unwrap();
        for expression in [
            "* * * * * *",
            "30 2 * * *",
            "0 0 29 2 +MON",
            "*/7 2 * 3,10 SUN",
        ] {
            let schedule = CronSchedule::parse_in(expression, rules.clone()).unwrap();
            for count in [1, 10] {
                let latest = schedule.try_latest_in(
                    ms("1900-01-01T00:00:00Z"),
                    ms("3999-12-31T00:00:00Z"),
                    count,
                );
                assert!(
                    latest.as_ref().is_ok_and(|l| l.len() == count),
                    "{expression:?} in {zone}, count {count}: {latest:?}"
                );
            }
        }
    }
}

// ---- property: the budgeted search equals plain croner where plain croner answers ----

/// splitmix64, to turn one proptest seed into an expression of many field forms.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

fn numeric(rng: &mut Rng, lo: u64, hi: u64) -> String {
    match rng.below(7) {
        0 => "*".into(),
        1 => rng.range(lo, hi).to_string(),
        2 => {
            let a = rng.range(lo, hi);
            format!("{a}-{}", rng.range(a, hi))
        }
        3 => format!("*/{}", rng.range(1, hi - lo + 1)),
        4 => {
            let a = rng.range(lo, hi);
            format!("{a}-{}/{}", rng.range(a, hi), rng.range(1, 7))
        }
        5 => format!("{},{}", rng.range(lo, hi), rng.range(lo, hi)),
        _ => ",".into(),
    }
}

fn expression(seed: u64) -> String {
    let mut rng = Rng(seed);
    let dom = match rng.below(6) {
        0 => "L".into(),
        1 => format!("{}W", rng.range(1, 31)),
        2 => ["29", "30", "31"][rng.below(3) as usize].into(),
        _ => numeric(&mut rng, 1, 31),
    };
    let dow = match rng.below(5) {
        0 => format!("{}#{}", rng.range(0, 6), rng.range(1, 5)),
        1 => format!("{}#L", rng.range(0, 6)),
        _ => numeric(&mut rng, 0, 7),
    };
    let dow = if rng.below(4) == 0 {
        format!("+{dow}")
    } else {
        dow
    };
    let month = numeric(&mut rng, 1, 12);
    let hour = numeric(&mut rng, 0, 23);
    let minute = numeric(&mut rng, 0, 59);
    if rng.below(3) == 0 {
        let second = numeric(&mut rng, 0, 59);
        format!("{second} {minute} {hour} {dom} {month} {dow}")
    } else {
        format!("{minute} {hour} {dom} {month} {dow}")
    }
}

fn plain_croner(expression: &str) -> Option<croner::Cron> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
        .ok()
}

/// Plain croner's next instant after `from_ms` at a fixed offset, unbudgeted: croner searches
/// up to year 5000 (it errs when nothing matches).
fn croner_next(cron: &croner::Cron, offset_s: i32, from_ms: i64) -> Option<i64> {
    let tz = FixedOffset::east_opt(offset_s)?;
    let from = tz.timestamp_millis_opt(from_ms).single()?;
    let next = cron.find_next_occurrence(&from, false).ok()?;
    let next_ms = next.timestamp_millis();
    (next_ms < ms("4000-01-01T00:00:00Z")).then_some(next_ms)
}

fn start_ms() -> impl Strategy<Value = i64> {
    prop_oneof![
        ms("1900-01-01T00:00:00Z")..ms("2200-01-01T00:00:00Z"),
        ms("3900-01-01T00:00:00Z")..ms("4000-01-01T00:00:00Z"),
    ]
}

proptest! {
    // Plain croner walks day by day to year 5000 on each never-firing pattern (~0.1–0.3 s):
    // fewer cases here than below.
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Admission is exact: a pattern is rejected as never firing iff plain croner (searching up
    /// to year 5000 from 1900, i.e. over more than one 400-year cycle) finds no instant.
    #[test]
    fn rejected_iff_croner_finds_nothing(seed in any::<u64>()) {
        let expression = expression(seed);
        let Some(cron) = plain_croner(&expression) else {
            prop_assert!(CronSchedule::parse(&expression).is_err());
            return Ok(());
        };
        let fires = croner_next(&cron, 0, ms("1900-01-01T00:00:00Z")).is_some();
        match CronSchedule::parse(&expression) {
            Ok(_) => prop_assert!(fires, "{expression:?} admitted but croner finds nothing"),
            Err(CronError::NeverFires { .. }) => prop_assert!(!fires, "{expression:?} rejected"),
            Err(e) => prop_assert!(false, "{expression:?}: unexpected {e}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// For admitted patterns in UTC and fixed offsets (no DST: ccron's wall-clock rules do not
    /// apply), the budgeted `try_next_after` and `preview` equal plain croner's unbudgeted
    /// search, and never run out of budget.
    #[test]
    fn budgeted_search_equals_plain_croner(
        seed in any::<u64>(),
        from_ms in start_ms(),
        offset_s in prop_oneof![Just(0), Just(20_700), Just(-34_200), -50_400..50_400i32],
    ) {
        let expression = expression(seed);
        let Some(cron) = plain_croner(&expression) else { return Ok(()); };
        let rules = ZoneRules::fixed("offset", offset_s).unwrap();
        let Ok(schedule) = CronSchedule::parse_in(&expression, rules) else { return Ok(()); };
        let mut at_ms = from_ms;
        for _ in 0..3 {
            let got = schedule.try_next_after(at_ms);
            let want = croner_next(&cron, offset_s, at_ms);
            prop_assert_eq!(&got, &Ok(want), "{:?} at {} after {}", expression, offset_s,
                format_rfc3339_ms(at_ms));
            match want { Some(t) => at_ms = t, None => break }
        }
        let preview = schedule.preview(from_ms, 3);
        let mut want = Vec::new();
        let mut at_ms = from_ms;
        while want.len() < 3 {
            match croner_next(&cron, offset_s, at_ms) { Some(t) => { want.push(t); at_ms = t; } None => break }
        }
        prop_assert_eq!(preview, want);
    }

    /// `try_latest_in` equals the last `count` instants found by walking plain croner forward
    /// over spans short enough to walk, and never runs out of budget.
    #[test]
    fn budgeted_latest_in_equals_a_forward_walk(
        seed in any::<u64>(),
        through_ms in ms("1950-01-01T00:00:00Z")..ms("2150-01-01T00:00:00Z"),
        span_pow in 0u32..36,
        count in 1usize..12,
    ) {
        let expression = expression(seed);
        let Some(cron) = plain_croner(&expression) else { return Ok(()); };
        let Ok(schedule) = CronSchedule::parse(&expression) else { return Ok(()); };
        let after_ms = through_ms - (1_000i64 << span_pow);
        let mut walked = Vec::new();
        let mut at_ms = after_ms;
        while let Some(t) = croner_next(&cron, 0, at_ms).filter(|&t| t <= through_ms) {
            walked.push(t);
            at_ms = t;
            if walked.len() > 5_000 { return Ok(()); } // too many to walk: no reference
        }
        let want = walked[walked.len().saturating_sub(count)..].to_vec();
        prop_assert_eq!(schedule.try_latest_in(after_ms, through_ms, count), Ok(want));
    }
}
