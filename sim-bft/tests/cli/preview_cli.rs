//! `sim-bft preview`: the contract of docs/simulator.md (instants on stdout, one per line, RFC
//! 3339 UTC; a bad expression, zone or instant exits 2 with one line on stderr).

use std::process::Command;

fn preview(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sim-bft"))
        .arg("preview")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn prints_instants_across_the_spring_gap_in_a_named_zone() {
    let (code, out, err) = preview(&[
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2026-03-27T00:00:00Z",
        "--count",
        "4",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "2026-03-27T01:30:00Z\n2026-03-28T01:30:00Z\n2026-03-29T01:00:00Z\n2026-03-30T00:30:00Z\n"
    );
}

#[test]
fn defaults_to_five_instants_in_utc() {
    let (code, out, _) = preview(&["0 12 * * MON", "--from", "2026-01-01T00:00:00+01:00"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0], "2026-01-05T12:00:00Z");
    assert_eq!(lines[4], "2026-02-02T12:00:00Z");
    // Without --from it reads this machine's clock: still five increasing instants.
    let (code, out, _) = preview(&["*/10 * * * *"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 5);
}

#[test]
fn errors_are_one_line_and_exit_2() {
    for args in [
        vec!["61 * * * *", "--from", "2026-01-01T00:00:00Z"],
        vec!["0 0 30 2 *", "--from", "2026-01-01T00:00:00Z"],
        vec![
            "* * * * *",
            "--tz",
            "Mars/Olympus",
            "--from",
            "2026-01-01T00:00:00Z",
        ],
        vec!["* * * * *", "--from", "yesterday"],
        vec![
            "* * * * *",
            "--from",
            "2026-01-01T00:00:00Z",
            "--count",
            "1001",
        ],
    ] {
        let (code, out, err) = preview(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("sim-bft preview: "), "{err}");
    }
}

/// `sim-bft run --ledger orders`: client puts become order-expiry schedules held as replicated
/// data; every checker holds and expiries run.
#[test]
fn run_with_the_orders_ledger() {
    let out = Command::new(env!("CARGO_BIN_EXE_sim-bft"))
        .args([
            "run",
            "--ledger",
            "orders",
            "--duration",
            "4s",
            "--liveness",
            "10s",
            "--crash",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("all checkers held"), "{text}");
    assert!(text.contains(" 1/0: "), "expiries ran: {text}");
}
