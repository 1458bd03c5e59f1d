//! Cron nicknames (`@daily`, `@midnight`, …) and leap-second instants (issue 12).

use ccron::cron::{CronError, CronSchedule, NICKNAMES, parse_rfc3339_ms, preview};

const FROM: &str = "2026-01-01T00:00:00Z";

#[test]
fn every_nickname_fires_like_its_pattern() {
    for (name, pattern) in NICKNAMES {
        let by_name = preview(name, None, FROM, 5).unwrap();
        assert_eq!(by_name, preview(pattern, None, FROM, 5).unwrap(), "{name}");
        let upper = name.to_ascii_uppercase();
        assert_eq!(preview(&upper, None, FROM, 5).unwrap(), by_name, "{upper}");
    }
    assert_eq!(
        preview("@midnight", None, FROM, 2).unwrap(),
        ["2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"]
    );
    // A named-zone nickname is a wall-clock job like `0 0 * * *`.
    let s = CronSchedule::parse("@midnight").unwrap();
    assert!(s.is_wall_clock());
    assert_eq!(s.expression(), "@midnight");
}

#[test]
fn unknown_nicknames_name_the_known_ones() {
    for bad in ["@reboot", "@every", "@", "@midnightly"] {
        let e = CronSchedule::parse(bad).unwrap_err();
        assert!(
            matches!(e, CronError::InvalidExpression { .. }),
            "{bad}: {e:?}"
        );
        let msg = e.to_string();
        for (name, _) in NICKNAMES {
            assert!(msg.contains(name), "{bad}: {msg}");
        }
    }
}

#[test]
fn a_stored_nickname_decodes_to_the_same_schedule() {
    let s = CronSchedule::parse("@midnight").unwrap();
    let config = bincode::config::standard().with_limit::<{ 1 << 20 }>();
    let bytes = bincode::encode_to_vec(&s, config).unwrap();
    let (decoded, _): (CronSchedule, usize) = bincode::decode_from_slice(&bytes, config).unwrap();
    assert_eq!(decoded, s);
    assert_eq!(decoded.next_after(0), s.next_after(0));
}

#[test]
fn a_leap_second_lies_before_the_next_midnight() {
    assert_eq!(
        parse_rfc3339_ms("2016-12-31T23:59:60Z").unwrap(),
        parse_rfc3339_ms("2016-12-31T23:59:59.999Z").unwrap()
    );
    assert_eq!(
        parse_rfc3339_ms("2016-12-31T23:59:60.500Z").unwrap(),
        parse_rfc3339_ms("2016-12-31T23:59:59.999Z").unwrap()
    );
    for from in [
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.999Z",
        "2017-01-01T00:59:60+01:00",
    ] {
        assert_eq!(
            preview("0 0 * * *", None, from, 2).unwrap(),
            ["2017-01-01T00:00:00Z", "2017-01-02T00:00:00Z"],
            "{from}"
        );
    }
}
