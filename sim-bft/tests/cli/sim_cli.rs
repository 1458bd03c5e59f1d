//! The `sim-bft` command line is a contract: exit statuses, the JSON report's fields, replay.

use std::process::Command;

fn sim_bft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sim-bft"))
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sim-bft-cli-{}-{name}", std::process::id()))
}

#[test]
fn run_writes_the_json_report_and_exits_zero() {
    let path = tmp("ok.json");
    let out = sim_bft()
        .args([
            "run",
            "--seed",
            "3",
            "--duration",
            "3s",
            "--liveness",
            "10s",
            "--crash",
            "1",
        ])
        .arg("--json")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("sim-bft run --seed 3"),
        "parameters not printed: {stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(v["seed"], 3);
    assert_eq!(v["replicas"], 4);
    assert_eq!(v["f"], 1);
    assert_eq!(v["honest_agree"], true);
    assert_eq!(v["violations"].as_array().unwrap().len(), 0);
    assert_eq!(v["trace_hash"].as_str().unwrap().len(), 64);
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    for n in nodes {
        assert!(n["last_executed_seq"].as_u64().unwrap() > 0);
        assert_eq!(n["state_digest"].as_str().unwrap().len(), 64);
        assert!(n["fires"].is_object());
        assert!(n["honest"].as_bool().unwrap());
        assert!(n["ticks_executed"].is_u64());
    }
}

#[test]
fn same_seed_same_trace_hash_from_the_command_line() {
    let run = || {
        let out = sim_bft()
            .args([
                "run",
                "-q",
                "--seed",
                "5",
                "--duration",
                "2s",
                "--liveness",
                "5s",
            ])
            .args([
                "--drop-rate",
                "0.05",
                "--byzantine",
                "1",
                "--byzantine-kind",
                "replay",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let a = run();
    assert!(a.contains("seed 5: ok (trace "), "{a}");
    assert_eq!(a, run());
}

#[test]
fn a_failed_checker_exits_one_and_prints_the_replay_command() {
    // The toy node trusts replica 0; a silent replica 0 stalls every follower.
    let out = sim_bft()
        .args([
            "run",
            "--node",
            "toy",
            "--seed",
            "2",
            "--duration",
            "1s",
            "--liveness",
            "2s",
        ])
        .args(["--byzantine-ids", "0", "--byzantine-kind", "silent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("NoProgress"), "{stdout}");
    assert!(
        stderr.contains("replay with: sim-bft run --seed 2") && stderr.contains("--node toy"),
        "{stderr}"
    );
}

#[test]
fn configuration_errors_exit_two() {
    let out = sim_bft()
        .args(["run", "--byzantine", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = sim_bft()
        .args(["run", "--duration", "1d"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = sim_bft()
        .args(["run", "--partition", "bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn seed_campaign_reports_each_seed() {
    let path = tmp("campaign.json");
    let out = sim_bft()
        .args([
            "run",
            "--seeds",
            "0..3",
            "--duration",
            "2s",
            "--liveness",
            "5s",
        ])
        .arg("--json")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("3 seeds, 0 failed"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    let seeds: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, vec![0, 1, 2]);
}
