//! The escrow ledger as real processes on Malachite: its own binary's `localnet` (4 validators
//! on loopback, one SIGKILLed and restarted from its storage mid-run, a client placing holds,
//! confirmations and refund tasks). Asserted from the report and the nodes' logs: the honest
//! nodes agree at every height they share, the restarted node restored from a snapshot and
//! rejoined, every table fired on every node, refunds reached the outbox (read back by quorum),
//! and the client's results were returned identically by f+1 nodes.

use std::process::Command;

#[test]
fn the_escrow_node_runs_a_four_process_localnet_with_a_kill_and_restart() {
    let dir = std::env::temp_dir().join(format!("escrow-localnet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_escrow-node"))
        .args(["localnet", "--nodes", "4", "--duration", "40s", "--home"])
        .arg(dir.join("home"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("the binary runs");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("a report")).expect("JSON");
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["honest_agree"], true);
    assert_eq!(report["restarts"], 1);
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4);
    for n in nodes {
        assert!(n["fires"].as_u64().unwrap() >= 4, "{n:#}");
        assert!(n["last_executed_seq"].as_u64().unwrap() >= 20, "{n:#}");
    }
    assert!(
        nodes
            .iter()
            .any(|n| n["restored_from_height"].as_u64().is_some()),
        "the restarted node restored from a snapshot: {report:#}"
    );
    assert!(
        report["outbox_quorum_records"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(
        report["results"]["believed"].as_u64().unwrap() > 10,
        "{report:#}"
    );
    assert_eq!(report["results"]["conflicting"], 0);
    // The same digest at the highest height all four nodes executed.
    let logs: Vec<std::collections::BTreeMap<u64, String>> = (0..4)
        .map(|i| {
            std::fs::read_to_string(dir.join(format!("home/node-{i}/digests.log")))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    Some((w.next()?.parse().ok()?, w.next()?.to_string()))
                })
                .collect()
        })
        .collect();
    let shared = logs
        .iter()
        .map(|l| l.keys().next_back().copied().unwrap_or(0))
        .min()
        .unwrap();
    assert!(shared >= 20);
    let digest = &logs[0][&shared];
    assert!(logs.iter().all(|l| &l[&shared] == digest));
    let _ = std::fs::remove_dir_all(&dir);
}
