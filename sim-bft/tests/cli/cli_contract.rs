//! The `sim-bft run` / `sim-bft preview` contract of issue 12, through the binary: the replay
//! line reproduces the run, knobs are checked before a run starts (output path, durations,
//! client count, clocks against the time service's bound, duplicate Byzantine ids), the default
//! ledger shows cron fires, `batches_executed` counts each batch once, and preview knows the
//! cron nicknames and leap seconds.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn sim_bft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sim-bft"))
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "sim-bft-cli-contract-{}-{name}",
        std::process::id()
    ))
}

/// Runs `cmd`, failing the test (instead of hanging) when it takes longer than `limit`: a
/// watchdog against runs that never end (the old `--duration u64::MAX`), not a timing assertion.
#[allow(clippy::disallowed_methods)]
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `sim-bft run ARGS --json F`: the report.
fn report(args: &[&str], name: &str) -> serde_json::Value {
    let path = tmp(name);
    let mut cmd = sim_bft();
    cmd.arg("run").args(args).arg("--json").arg(&path);
    let out = output_within(cmd, Duration::from_secs(300));
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {}",
        text(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    v
}

/// The arguments of a replay line (after `sim-bft`, before any `#` comment).
fn replay_args(replay: &str) -> Vec<String> {
    let line = replay.split('#').next().unwrap();
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("sim-bft"), "{replay}");
    words.map(str::to_owned).collect()
}

#[test]
fn the_replay_line_reproduces_the_run() {
    let short = ["--duration", "1s", "--liveness", "3s"];
    let knob_sets: [&[&str]; 8] = [
        &[],
        &[
            "--ledger",
            "kv",
            "--tick-senders",
            "all",
            "--drift-ppm",
            "300",
        ],
        &[
            "--ledger",
            "orders",
            "--clock-skew",
            "100ms",
            "--crash",
            "1",
        ],
        &[
            "--node",
            "toy",
            "--components",
            "1,2",
            "--drop-rate",
            "0.05",
        ],
        &[
            "--ledger",
            "kv",
            "--byzantine-ids",
            "2",
            "--byzantine-kind",
            "replay",
            "--duplicate-rate",
            "0.02",
            "--reorder-rate",
            "0.1",
            "--tick-spread",
            "0ms",
        ],
        &[
            "--components",
            "none",
            "--partition",
            "one-way",
            "--time-service",
            "reference",
            "--max-delay",
            "20ms",
            "--clients",
            "3",
            "--request-interval",
            "50ms",
        ],
        &[
            "--clock-jumps",
            "2",
            "--clock-jump",
            "500ms",
            "--clock-skew",
            "2s",
            "--allow-clock-stall",
            "--seed",
            "4",
        ],
        &[
            "--from",
            "2026-03-28T23:59:58Z",
            "--component-period",
            "2=500ms",
            "--min-delay",
            "2ms",
            "--reorder-rate",
            "0.1",
            "--reorder-delay",
            "20ms",
            "--time-ahead-slack",
            "2s",
            "--check-every",
            "3",
            "--stall-bound",
            "0ms",
            "--max-events",
            "10000000",
        ],
    ];
    for (i, knobs) in knob_sets.iter().enumerate() {
        let args: Vec<&str> = short.iter().chain(knobs.iter()).copied().collect();
        let first = report(&args, &format!("replay-{i}-a.json"));
        let replay = first["replay"].as_str().unwrap().to_owned();
        for knob in knobs.iter().filter(|k| k.starts_with("--")) {
            // Every knob given is in the line (values may be normalised, e.g. 1s -> 1000ms).
            assert!(replay.contains(knob), "{knob} missing from {replay}");
        }
        assert!(!replay.contains('#'), "CLI runs replay exactly: {replay}");
        let again: Vec<String> = replay_args(&replay);
        let again: Vec<&str> = again.iter().skip(1).map(String::as_str).collect();
        let second = report(&again, &format!("replay-{i}-b.json"));
        assert_eq!(
            first["trace_hash"], second["trace_hash"],
            "{args:?} and its replay {replay} ran differently"
        );
        assert_eq!(second["replay"], first["replay"], "the replay of a replay");
    }
}

#[test]
fn the_replay_names_what_decides_the_trace() {
    // Each of these knobs changes the trace, so a replay line that dropped it would replay
    // another run (the defect: --ledger, --node and --tick-senders were missing).
    let base = ["--duration", "1s", "--liveness", "3s"];
    let hash = |extra: &[&str], name: &str| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        report(&args, name)["trace_hash"].clone()
    };
    let plain = hash(&["--ledger", "kv"], "knob-plain.json");
    for (i, extra) in [
        &["--ledger", "demo"][..],
        &["--ledger", "orders"],
        &["--ledger", "kv", "--tick-senders", "all"],
        &["--ledger", "kv", "--node", "toy"],
        &["--ledger", "kv", "--drift-ppm", "500"],
        &["--ledger", "kv", "--from", "2030-01-01T00:00:00Z"],
        &["--ledger", "kv", "--component-period", "1=300ms"],
        &["--ledger", "kv", "--min-delay", "3ms"],
    ]
    .iter()
    .enumerate()
    {
        assert_ne!(hash(extra, &format!("knob-{i}.json")), plain, "{extra:?}");
    }
}

#[test]
fn a_bad_report_path_fails_before_the_run() {
    for bad in ["/nonexistent-dir-of-sim-bft/report.json", "/"] {
        let mut cmd = sim_bft();
        cmd.args(["run", "--duration", "1s", "--liveness", "3s", "--json", bad]);
        let out = output_within(cmd, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            out.stdout.is_empty(),
            "{bad}: the run started: {}",
            text(&out.stdout)
        );
        assert!(text(&out.stderr).contains("cannot write report"), "{bad}");
    }
}

#[test]
fn oversized_runs_are_refused_up_front() {
    for (args, says) in [
        (
            &["--duration", "18446744073709551615ms"][..],
            "duration = 18446744073709551615 ms",
        ),
        (&["--duration", "744h", "--liveness", "1ms"], "2678400000"),
        (&["--liveness", "800h"], "liveness"),
        (&["--clients", "100000"], "at most 1000"),
        (&["--replicas", "1000"], "at most 100"),
        (&["--request-interval", "9999999h"], "request-interval"),
        (&["--max-delay", "9999999h"], "max-delay"),
        (&["--drift-ppm", "-5"], "drift-ppm = -5"),
        (&["--drift-ppm", "2000000"], "drift-ppm"),
        (
            &["--clock-jumps", "1", "--clock-jump", "9999999h"],
            "clock-jump",
        ),
    ] {
        let mut cmd = sim_bft();
        cmd.arg("run").args(args);
        let out = output_within(cmd, Duration::from_secs(60));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn clocks_beyond_the_time_service_bound_need_an_explicit_flag() {
    let short = ["run", "--duration", "1s", "--liveness", "2s", "-q"];
    // 2 s of skew: two honest clocks may be 4 s apart, beyond the 3 s hard limit.
    let mut cmd = sim_bft();
    cmd.args(short).args(["--clock-skew", "2s"]);
    let out = output_within(cmd, Duration::from_secs(60));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("3000 ms") && err.contains("--allow-clock-stall"),
        "{err}"
    );
    // So can drift over a long run: 2 × 20000 ppm × 90 s = 3.6 s.
    let mut cmd = sim_bft();
    cmd.args(["run", "--drift-ppm", "20000"]);
    assert_eq!(
        output_within(cmd, Duration::from_secs(60)).status.code(),
        Some(2)
    );
    // With the flag it runs, and says so on stderr.
    let mut cmd = sim_bft();
    cmd.args(short)
        .args(["--clock-skew", "2s", "--allow-clock-stall"]);
    let out = output_within(cmd, Duration::from_secs(120));
    assert!(matches!(out.status.code(), Some(0 | 1)));
    assert!(
        text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
    // Within the bound (1.5 s each way: exactly 3 s apart), or without a time service: runs.
    for extra in [
        &["--clock-skew", "1500ms"][..],
        &["--clock-skew", "2s", "--time-service", "off"],
    ] {
        let mut cmd = sim_bft();
        cmd.args(short).args(extra);
        let out = output_within(cmd, Duration::from_secs(120));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{extra:?}: {}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains("warning"), "{extra:?}");
    }
}

#[test]
fn duplicate_byzantine_ids_are_reported_as_duplicates() {
    let mut cmd = sim_bft();
    cmd.args(["run", "--byzantine-ids", "1,1"]);
    let out = output_within(cmd, Duration::from_secs(60));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("replica 1 is listed twice"), "{err}");
    assert!(!err.contains("exceed"), "{err}");
}

#[test]
fn the_default_ledger_has_cron_tables_and_help_says_so() {
    let v = report(
        &["--duration", "5s", "--liveness", "5s"],
        "default-ledger.json",
    );
    assert!(v["replay"].as_str().unwrap().contains("--ledger demo"));
    for n in v["nodes"].as_array().unwrap() {
        let fires = n["fires"].as_object().unwrap();
        assert!(
            fires.contains_key("1/0") && fires.contains_key("2/0"),
            "{fires:?}"
        );
    }
    let out = sim_bft().args(["run", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    assert!(help.contains("demo (default)"), "{help}");
    assert!(help.contains("[default: demo]"), "{help}");
}

#[test]
fn batches_executed_counts_each_batch_once() {
    // Seed 3 with two crashes: a restarted replica replays part of its log.
    let v = report(
        &[
            "--seed",
            "3",
            "--duration",
            "3s",
            "--liveness",
            "5s",
            "--crash",
            "2",
        ],
        "reexec.json",
    );
    let nodes = v["nodes"].as_array().unwrap();
    for n in nodes {
        assert!(
            n["batches_executed"].as_u64().unwrap() <= n["last_executed_seq"].as_u64().unwrap(),
            "{n}"
        );
    }
    let reexecuted: u64 = nodes
        .iter()
        .map(|n| n["batches_reexecuted"].as_u64().unwrap())
        .sum();
    assert!(reexecuted > 0, "no re-execution to count: {nodes:?}");
}

fn preview(args: &[&str]) -> (i32, String, String) {
    let out = sim_bft().arg("preview").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn preview_knows_the_nicknames() {
    let (code, out, err) = preview(&[
        "@midnight",
        "--from",
        "2026-01-01T12:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "2026-01-02T00:00:00Z\n2026-01-03T00:00:00Z\n");
    let (code, out, err) = preview(&["@reboot", "--from", "2026-01-01T12:00:00Z"]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    for name in [
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ] {
        assert!(err.contains(name), "{err}");
    }
}

#[test]
fn preview_from_a_leap_second_keeps_the_next_midnight() {
    let (code, out, err) = preview(&[
        "0 0 * * *",
        "--from",
        "2016-12-31T23:59:60Z",
        "--count",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "2017-01-01T00:00:00Z\n");
}
