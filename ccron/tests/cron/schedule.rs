//! Unit tests of cron schedules: UTC evaluation, DST in Europe/Berlin and America/New_York,
//! impossible patterns, bad zones, the RFC 3339 preview, and stored forms.

use ccron::cron::{
    CronError, CronSchedule, LocalResolution, MAX_PREVIEW_COUNT, ZoneRules, format_rfc3339_ms,
    parse_rfc3339_ms, preview,
};

fn ms(rfc3339: &str) -> i64 {
    parse_rfc3339_ms(rfc3339).unwrap()
}

fn next(s: &CronSchedule, from: &str) -> String {
    format_rfc3339_ms(s.next_after(ms(from)).unwrap())
}

fn prev_n(expr: &str, zone: Option<&str>, from: &str, n: usize) -> Vec<String> {
    preview(expr, zone, from, n).unwrap()
}

/// chrono-tz 0.10.4 lists Berlin's DST transitions up to 2099; after the last one the rules keep
/// its offset (CET) for ever. This pins that documented behaviour.
#[test]
fn berlin_rules_cover_dst_until_2099_then_stay_fixed() {
    let z = ZoneRules::from_iana("Europe/Berlin").unwrap();
    assert_eq!(z.name(), "Europe/Berlin");
    let last = *z.transitions().last().unwrap();
    assert_eq!(
        format_rfc3339_ms(last.at_utc_s * 1000),
        "2099-10-25T01:00:00Z"
    );
    assert_eq!(last.offset_s, 3_600);
    assert_eq!(z.offset_at(ms("2150-07-01T00:00:00Z") / 1000), 3_600);
    assert_eq!(z.offset_at(ms("2098-07-01T00:00:00Z") / 1000), 7_200);
}

#[test]
fn utc_next_after_is_strictly_after() {
    let s = CronSchedule::parse("*/15 * * * *").unwrap();
    assert_eq!(next(&s, "2026-01-01T00:00:00Z"), "2026-01-01T00:15:00Z");
    assert_eq!(next(&s, "2026-01-01T00:14:59.999Z"), "2026-01-01T00:15:00Z");
    assert_eq!(next(&s, "2026-01-01T00:15:00.001Z"), "2026-01-01T00:30:00Z");
    let daily = CronSchedule::parse("@daily").unwrap();
    assert_eq!(next(&daily, "2026-01-01T12:00:00Z"), "2026-01-02T00:00:00Z");
    let seconds = CronSchedule::parse("30 * * * * *").unwrap();
    assert_eq!(
        next(&seconds, "2026-01-01T00:00:00Z"),
        "2026-01-01T00:00:30Z"
    );
}

#[test]
fn utc_day_fields_names_and_specials() {
    // 2026-02-28 is a Saturday; last day of February 2026 is the 28th.
    let last = CronSchedule::parse("0 9 L * *").unwrap();
    assert_eq!(next(&last, "2026-02-01T00:00:00Z"), "2026-02-28T09:00:00Z");
    let weekdays = CronSchedule::parse("0 9 * * MON-FRI").unwrap();
    assert_eq!(
        next(&weekdays, "2026-02-27T10:00:00Z"),
        "2026-03-02T09:00:00Z"
    );
    // dom OR dow when both are restricted (Vixie): the 1st, or any Sunday.
    let either = CronSchedule::parse("0 0 1 * SUN").unwrap();
    assert_eq!(
        next(&either, "2026-11-02T00:00:00Z"),
        "2026-11-08T00:00:00Z"
    );
    // `+` asks for both: a 13th that is a Friday.
    let both = CronSchedule::parse("0 0 13 * +FRI").unwrap();
    assert_eq!(next(&both, "2026-01-01T00:00:00Z"), "2026-02-13T00:00:00Z");
    // Leap day, every four years.
    let leap = CronSchedule::parse("0 12 29 2 *").unwrap();
    assert_eq!(next(&leap, "2025-01-01T00:00:00Z"), "2028-02-29T12:00:00Z");
}

#[test]
fn bad_patterns_are_typed_errors() {
    for bad in [
        "",
        "* * *",
        "61 * * * *",
        "* * * * * * *",
        "*/0 * * * *",
        "a b c d e",
    ] {
        let e = CronSchedule::parse(bad).unwrap_err();
        assert!(
            matches!(e, CronError::InvalidExpression { .. }),
            "{bad:?} gave {e:?}"
        );
        assert!(!e.to_string().contains('\n'));
    }
    let long = "* ".repeat(100);
    assert!(matches!(
        CronSchedule::parse(&long),
        Err(CronError::ExpressionTooLong { .. })
    ));
    assert!(matches!(
        CronSchedule::parse("0 0 * * * é"),
        Err(CronError::InvalidExpression { .. })
    ));
}

#[test]
fn impossible_patterns_are_rejected_at_admission() {
    for never in [
        "0 0 30 2 *",
        "0 0 31 4,6,9,11 *",
        "0 0 30 2 +MON",
        "0 0 31 2 *",
        "0 0 30,31 2 *",
    ] {
        assert_eq!(
            CronSchedule::parse(never).unwrap_err(),
            CronError::NeverFires {
                expression: never.to_owned()
            },
            "{never}"
        );
    }
    // Rare but possible patterns are admitted: Feb 29 on a Monday (with AND).
    let rare = CronSchedule::parse("0 0 29 2 +MON").unwrap();
    assert_eq!(next(&rare, "2026-01-01T00:00:00Z"), "2044-02-29T00:00:00Z");
}

#[test]
fn bad_zones_are_typed_errors() {
    for zone in ["Mars/Olympus", "", "Europe/Berlin ", &"x".repeat(500)] {
        let e = ZoneRules::from_iana(zone).unwrap_err();
        assert!(matches!(e, CronError::UnknownZone { .. }), "{zone:?}");
    }
    let e = preview("0 0 * * *", Some("Nowhere/City"), "2026-01-01T00:00:00Z", 3).unwrap_err();
    assert_eq!(e.to_string(), "unknown time zone \"Nowhere/City\"");
}

#[test]
fn zone_rules_agree_with_the_compiled_tz_database() {
    use chrono::{Offset, TimeZone};
    for name in [
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
        "America/Sao_Paulo",
        "Pacific/Apia",
    ] {
        let rules = ZoneRules::from_iana(name).unwrap();
        let tz: chrono_tz::Tz = name.parse().unwrap();
        assert!(!rules.transitions().is_empty(), "{name}");
        // Every transition, its neighbourhood, and a coarse sweep of 1900..2200.
        let mut probes: Vec<i64> = rules
            .transitions()
            .iter()
            .flat_map(|t| [t.at_utc_s - 1, t.at_utc_s, t.at_utc_s + 1])
            .collect();
        probes.extend((-2_208_988_800_i64..7_258_118_400).step_by(86_400 * 7 + 3_607));
        for utc_s in probes {
            let dt = chrono::DateTime::from_timestamp(utc_s, 0)
                .unwrap()
                .naive_utc();
            let expected = tz.offset_from_utc_datetime(&dt).fix().local_minus_utc();
            assert_eq!(rules.offset_at(utc_s), expected, "{name} at {utc_s}");
        }
    }
}

#[test]
fn berlin_spring_forward_fixed_job_runs_once_right_after_the_gap() {
    // 2026-03-29: 02:00 CET -> 03:00 CEST, at 01:00Z. 02:30 does not exist.
    assert_eq!(
        prev_n(
            "30 2 * * *",
            Some("Europe/Berlin"),
            "2026-03-28T00:00:00Z",
            3
        ),
        [
            "2026-03-28T01:30:00Z", // 02:30 CET
            "2026-03-29T01:00:00Z", // the gap: runs at 03:00 CEST, the first instant after it
            "2026-03-30T00:30:00Z", // 02:30 CEST
        ]
    );
}

#[test]
fn berlin_fall_back_fixed_job_runs_once() {
    // 2026-10-25: 03:00 CEST -> 02:00 CET at 01:00Z; 02:30 happens at 00:30Z and at 01:30Z.
    assert_eq!(
        prev_n(
            "30 2 * * *",
            Some("Europe/Berlin"),
            "2026-10-24T00:00:00Z",
            3
        ),
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z", // the earlier 02:30 only
            "2026-10-26T01:30:00Z",
        ]
    );
    // Starting between the two 02:30s does not pick up the second one.
    let s = CronSchedule::parse_in("30 2 * * *", ZoneRules::from_iana("Europe/Berlin").unwrap())
        .unwrap();
    assert_eq!(next(&s, "2026-10-25T01:00:00Z"), "2026-10-26T01:30:00Z");
}

#[test]
fn new_york_wall_clock_list_and_step_jobs_run_each_wall_time_once() {
    // 2026-03-08: 02:00 EST -> 03:00 EDT at 07:00Z. 02:00 and 02:30 do not exist: one run right
    // after the gap, which is also the 03:00 run.
    assert_eq!(
        prev_n(
            "*/30 1-3 * * *",
            Some("America/New_York"),
            "2026-03-08T06:00:00Z",
            4
        ),
        [
            "2026-03-08T06:30:00Z", // 01:30 EST
            "2026-03-08T07:00:00Z", // 03:00 EDT, right after the gap
            "2026-03-08T07:30:00Z", // 03:30 EDT
            "2026-03-09T05:00:00Z", // 01:00 EDT next day
        ]
    );
    // A list of hours is about wall times too: 01:00 runs once on 2026-11-01 (EDT -> EST at
    // 06:00Z repeats 01:00-01:59), not twice as in Kubernetes.
    assert_eq!(
        prev_n(
            "0 1,13 * * *",
            Some("America/New_York"),
            "2026-11-01T00:00:00Z",
            3
        ),
        [
            "2026-11-01T05:00:00Z", // 01:00 EDT, the earlier instant only
            "2026-11-01T18:00:00Z", // 13:00 EST
            "2026-11-02T06:00:00Z",
        ]
    );
    assert_eq!(
        prev_n(
            "*/30 1 * * *",
            Some("America/New_York"),
            "2026-11-01T04:00:00Z",
            3
        ),
        [
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-02T06:00:00Z", // the repeated 01:00 and 01:30 EST do not run again
        ]
    );
    // A spring-forward gap swallowing a listed hour: 02:00 runs right after the gap.
    assert_eq!(
        prev_n(
            "0 2,14 * * *",
            Some("America/New_York"),
            "2026-03-08T00:00:00Z",
            2
        ),
        ["2026-03-08T07:00:00Z", "2026-03-08T18:00:00Z"]
    );
}

#[test]
fn new_york_interval_job_runs_on_real_time() {
    // A wildcard hour means elapsed time: the repeated hour runs twice, the missing hour never.
    assert_eq!(
        prev_n(
            "*/30 * * * *",
            Some("America/New_York"),
            "2026-11-01T05:10:00Z",
            4
        ),
        [
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-01T06:00:00Z", // 01:00 EST
            "2026-11-01T06:30:00Z", // 01:30 EST
            "2026-11-01T07:00:00Z", // 02:00 EST
        ]
    );
    assert_eq!(
        prev_n(
            "0 * * * *",
            Some("America/New_York"),
            "2026-03-08T06:30:00Z",
            2
        ),
        ["2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"] // 03:00 EDT, 04:00 EDT
    );
    assert!(
        !CronSchedule::parse_in("0 * * * *", ZoneRules::utc())
            .unwrap()
            .is_wall_clock()
    );
    assert!(CronSchedule::parse("0 1,13 * * *").unwrap().is_wall_clock());
}

#[test]
fn new_york_fixed_job_in_both_transitions() {
    assert_eq!(
        prev_n(
            "30 2 * * *",
            Some("America/New_York"),
            "2026-03-07T12:00:00Z",
            2
        ),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    );
    assert_eq!(
        prev_n(
            "30 1 * * *",
            Some("America/New_York"),
            "2026-10-31T12:00:00Z",
            2
        ),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
}

#[test]
fn preview_formats_and_bounds() {
    assert_eq!(
        prev_n("0 12 * * *", None, "2026-01-01T12:00:00+01:00", 2),
        ["2026-01-01T12:00:00Z", "2026-01-02T12:00:00Z"]
    );
    assert!(matches!(
        preview("0 12 * * *", None, "yesterday", 1),
        Err(CronError::InvalidInstant { .. })
    ));
    assert!(matches!(
        preview(
            "0 12 * * *",
            None,
            "2026-01-01T00:00:00Z",
            MAX_PREVIEW_COUNT + 1
        ),
        Err(CronError::PreviewTooLong { .. })
    ));
    assert_eq!(
        preview("0 12 * * *", None, "2026-01-01T00:00:00Z", 0)
            .unwrap()
            .len(),
        0
    );
    // Near the end of the supported range the preview simply stops.
    assert!(prev_n("0 0 1 1 *", None, "3999-06-01T00:00:00Z", 5).is_empty());
    // Before 1900 searches start at 1900.
    assert_eq!(
        prev_n("0 0 1 1 *", None, "1800-06-01T00:00:00Z", 1),
        ["1900-01-01T00:00:00Z"]
    );
}

#[test]
fn extreme_inputs_do_not_panic() {
    let s = CronSchedule::parse("* * * * *").unwrap();
    assert_eq!(s.next_after(i64::MAX), None);
    assert!(s.next_after(i64::MIN).is_some());
    assert!(s.preview(i64::MAX - 5, 3).is_empty());
}

#[test]
fn stored_forms_round_trip_and_are_validated() {
    let zone = ZoneRules::from_iana("Europe/Berlin").unwrap();
    let s = CronSchedule::parse_in("0 6 * * MON", zone.clone()).unwrap();
    let config = bincode::config::standard().with_limit::<{ 1 << 20 }>();
    let bytes = bincode::encode_to_vec(&s, config).unwrap();
    let (decoded, used): (CronSchedule, usize) =
        bincode::decode_from_slice(&bytes, config).unwrap();
    assert_eq!(decoded.next_after(0), s.next_after(0));
    assert_eq!((decoded, used), (s.clone(), bytes.len()));
    let zbytes = bincode::encode_to_vec(&zone, config).unwrap();
    let (zdecoded, _): (ZoneRules, usize) = bincode::decode_from_slice(&zbytes, config).unwrap();
    assert_eq!(zdecoded, zone);

    // A stored impossible pattern (same length, so the bytes stay well-formed) or an unsorted
    // zone is refused on decode.
    let good = b"0 6 * * MON";
    let bad = b"0 0 30 2 * ";
    let at = bytes.windows(good.len()).position(|w| w == good).unwrap();
    let mut tampered = bytes.clone();
    tampered[at..at + bad.len()].copy_from_slice(bad);
    assert!(bincode::decode_from_slice::<CronSchedule, _>(&tampered, config).is_err());
    let mut t = zone.transitions().to_vec();
    t.swap(0, 1);
    assert!(matches!(
        ZoneRules::from_parts("Europe/Berlin".into(), zone.initial_offset_s(), t),
        Err(CronError::InvalidZoneRules { .. })
    ));
    assert!(ZoneRules::fixed("bad", 90_000).is_err());
    // Truncated bytes are an error, not a panic.
    for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
        assert!(bincode::decode_from_slice::<CronSchedule, _>(&bytes[..cut], config).is_err());
    }
}

#[test]
fn zone_rules_resolve_local_berlin() {
    let z = ZoneRules::from_iana("Europe/Berlin").unwrap();
    let local = |s: &str| ms(s) / 1000; // wall clock read as if UTC
    assert_eq!(
        z.resolve_local(local("2026-03-29T02:30:00Z")),
        LocalResolution::Gap
    );
    assert_eq!(
        z.resolve_local(local("2026-10-25T02:30:00Z")),
        LocalResolution::Ambiguous(7_200, 3_600)
    );
    assert_eq!(
        z.resolve_local(local("2026-07-01T12:00:00Z")),
        LocalResolution::Single(7_200)
    );
}

#[test]
fn a_day_long_clock_jump_runs_the_swallowed_time_once_after_it() {
    // Pacific/Apia skipped 2011-12-30 entirely (-10 h to +14 h at 2011-12-30T10:00Z). croner
    // alone gives up inside jumps longer than two hours; ccron runs the swallowed 12:00 once,
    // right after the jump, and carries on.
    assert_eq!(
        prev_n(
            "0 12 * * *",
            Some("Pacific/Apia"),
            "2011-12-29T00:00:00Z",
            3
        ),
        [
            "2011-12-29T22:00:00Z", // 12:00 on the 29th at -10 h
            "2011-12-30T10:00:00Z", // the 30th's 12:00 never happened: 00:00 on the 31st
            "2011-12-30T22:00:00Z", // 12:00 on the 31st at +14 h
        ]
    );
    // An interval job simply has no runs in the missing day.
    assert_eq!(
        prev_n(
            "0 */12 * * *",
            Some("Pacific/Apia"),
            "2011-12-29T12:00:00Z",
            2
        ),
        ["2011-12-29T22:00:00Z", "2011-12-30T10:00:00Z"] // 12:00 on the 29th, 00:00 on the 31st
    );
}

#[test]
fn a_fixed_time_near_the_end_of_a_long_jump_runs_after_it() {
    // 23:30 on 2011-12-30 never happened in Apia; it is 30 minutes before the end of the jump
    // (local 2011-12-31T00:00 +14 h = 2011-12-30T10:00Z), so it runs right after it.
    assert_eq!(
        prev_n(
            "30 23 * * *",
            Some("Pacific/Apia"),
            "2011-12-29T12:00:00Z",
            3
        ),
        [
            "2011-12-30T09:30:00Z", // 23:30 on the 29th at -10 h
            "2011-12-30T10:00:00Z", // the 30th's 23:30 never happened: right after the jump
            "2011-12-31T09:30:00Z", // 23:30 on the 31st at +14 h
        ]
    );
}

/// `latest_in` equals the tail of a forward walk over the interval, for intervals short
/// enough to walk and long ones that need the halving search (a year of a per-second job is
/// not walked: this test would take minutes if it were).
#[test]
fn latest_in_is_the_tail_of_the_forward_walk() {
    let zones = ["UTC", "Europe/Berlin", "America/New_York"];
    let exprs = [
        "* * * * *",
        "*/7 * * * *",
        "30 2 * * *",
        "0 9 * * 1-5",
        "0 0 29 2 *",
        "* * * * * *",
    ];
    let starts = [
        ms("2026-03-28T12:00:00Z"),
        ms("2026-10-24T23:59:59.500Z"),
        ms("2027-01-01T00:00:00Z"),
    ];
    for zone in zones {
        for expr in exprs {
            let s = CronSchedule::parse_in(expr, ZoneRules::from_iana(zone).unwrap()).unwrap();
            for &from in &starts {
                for span_ms in [0, 999, 61_000, 3 * 3_600_000 + 17, 2 * 86_400_000] {
                    let to = from + span_ms;
                    let mut walk = Vec::new();
                    let mut at = from;
                    while let Some(t) = s.next_after(at).filter(|&t| t <= to) {
                        walk.push(t);
                        at = t;
                    }
                    for count in [1, 3, 50] {
                        let tail = walk[walk.len().saturating_sub(count)..].to_vec();
                        assert_eq!(
                            s.latest_in(from, to, count),
                            tail,
                            "{expr} in {zone} over ({from}, {to}] x{count}"
                        );
                    }
                }
            }
        }
    }
    // A per-second job a year late: the latest three, without walking 31 million instants.
    let s = CronSchedule::parse("* * * * * *").unwrap();
    let to = ms("2027-03-01T00:00:00.400Z");
    assert_eq!(
        s.latest_in(ms("2026-03-01T00:00:00Z"), to, 3),
        vec![to - 2_400, to - 1_400, to - 400]
    );
    let leap = CronSchedule::parse("0 0 29 2 *").unwrap();
    assert_eq!(
        leap.latest_in(ms("2000-01-01T00:00:00Z"), ms("2031-01-01T00:00:00Z"), 2),
        vec![ms("2024-02-29T00:00:00Z"), ms("2028-02-29T00:00:00Z")]
    );
    assert!(leap.latest_in(5, 5, 3).is_empty());
    assert!(leap.latest_in(0, 10, 0).is_empty());
}
