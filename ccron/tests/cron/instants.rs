//! `CronSchedule::instants_between` (issue 25, item 6): a DST check without hand-written
//! offsets.

use ccron::cron::{CronError, CronSchedule, ZoneRules, format_rfc3339_ms, parse_rfc3339_ms};

#[test]
fn london_release_crosses_the_uk_dst_change() {
    let london = ZoneRules::from_iana("Europe/London").unwrap();
    let release = CronSchedule::parse_in("0 17 * * MON-FRI", london).unwrap();
    let from = parse_rfc3339_ms("2026-03-26T00:00:00Z").unwrap();
    let to = parse_rfc3339_ms("2026-03-31T16:00:00Z").unwrap();
    let got: Vec<String> = release
        .instants_between(from, to)
        .unwrap()
        .into_iter()
        .map(format_rfc3339_ms)
        .collect();
    assert_eq!(
        got,
        [
            "2026-03-26T17:00:00Z",
            "2026-03-27T17:00:00Z",
            "2026-03-30T16:00:00Z",
            "2026-03-31T16:00:00Z",
        ]
    );
    // The interval is (from, to]: `to` itself counts, `from` does not.
    let last = parse_rfc3339_ms("2026-03-31T16:00:00Z").unwrap();
    assert_eq!(
        release.instants_between(last, last + 1).unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        release.instants_between(last - 1, last).unwrap(),
        vec![last]
    );
    assert!(release.instants_between(to, from).unwrap().is_empty());
}

#[test]
fn too_many_instants_is_a_typed_error() {
    let every_second = CronSchedule::parse("* * * * * *").unwrap();
    let err = every_second
        .instants_between(0, 2 * 86_400_000)
        .unwrap_err();
    assert!(matches!(err, CronError::TooManyInstants { .. }), "{err}");
}
