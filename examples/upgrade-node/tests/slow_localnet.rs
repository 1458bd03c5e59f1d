//! A planned upgrade on real processes: 4 Malachite nodes of build 1 (`upgrade-node-v1`) under
//! the localnet's supervisor (`--upgrade-binary upgrade-node-v2`). The load client (the admin)
//! plans upgrade `v2` at a height early in the run, asks for a `legacy` run due after it, and
//! keeps asking for reminders 2 s ahead. Every node of build 1 stops at the plan (exit 10,
//! after writing the snapshot below it) and the supervisor restarts it on build 2 from the same
//! directory; build 2 runs migration `v2` there (re-targeting pending reminders) and goes on.
//!
//! Asserted, from the report (the outbox read back by quorum: a record counted only when f+1
//! nodes returned it identically) and from every node's final snapshot restored on build 2:
//! agreement at every shared height; every reminder ran exactly once (none lost, none repeated
//! across the switch) under the handler of the build at the height that ran it; reminders
//! pending across the switch ran under `remind-v2`; the `legacy` run is parked, not consumed;
//! the migration ran once per node at the plan's height; each node switched once.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ccron::host::Application;
use ccron_malachite::commit::MalachiteCommit;
use ccron_node::LedgerHost;
use ccron_node::records::Genesis;
use ccron_node::snapshot::Snapshots;
use ccron_node::store::BlockStore;
use upgrade_node::{Build, Run, UPGRADE, ledger};

const PLAN_HEIGHT: u64 = 150;

/// A node's final state: its newest snapshot (written at its SIGTERM stop) restored on build 2.
fn final_state(home: &Path, i: usize) -> LedgerHost<ccron::host::CronLedger<upgrade_node::Shop>> {
    let genesis: Genesis =
        serde_json::from_slice(&std::fs::read(home.join("genesis.json")).unwrap()).unwrap();
    let dir = home.join(format!("node-{i}"));
    let store = BlockStore::<MalachiteCommit>::open(&dir.join("blocks.log")).unwrap();
    let snapshots = Snapshots::open(&dir.join("snapshots")).unwrap();
    let setup = genesis.setup(&ledger(Build::V2).tick_components());
    let fresh = || LedgerHost::new(ledger(Build::V2), &setup);
    let restored = snapshots.restore_latest(&store, &genesis.ledger, &fresh);
    assert_eq!(
        restored.height,
        Some(store.last_height()),
        "node {i}: a snapshot of its last height"
    );
    restored.ledger
}

#[test]
fn four_nodes_switch_builds_at_the_planned_height_and_no_reminder_is_lost_or_repeated() {
    let dir = std::env::temp_dir().join(format!("upgrade-localnet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let home = dir.join("home");
    let out = Command::new(env!("CARGO_BIN_EXE_upgrade-node-v1"))
        .args([
            "localnet",
            "--nodes",
            "4",
            "--duration",
            "40s",
            "--tick-period-ms",
            "200",
            "--no-kill",
            "--upgrade-binary",
            env!("CARGO_BIN_EXE_upgrade-node-v2"),
            "--home",
        ])
        .arg(&home)
        .arg("--json")
        .arg(&json)
        .env("UPGRADE_NODE_PLAN_HEIGHT", PLAN_HEIGHT.to_string())
        .output()
        .expect("the binary runs");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("a report")).expect("JSON");
    assert!(out.status.success(), "{report:#}");
    assert_eq!(report["honest_agree"], true, "{report:#}");
    assert_eq!(report["violations"].as_array().unwrap().len(), 0);

    // Each node stopped once for the upgrade (exit 10) and was switched once.
    assert_eq!(
        report["restarts_by_reason"]["upgrade_needed"], 4,
        "{report:#}"
    );
    let sup = report["supervisor"]["nodes"].as_array().unwrap();
    assert_eq!(sup.len(), 4);
    // The height every node switched at: the plan is reached at the first request or tick of
    // the first block at or past its height (ccron::schedule::upgrade), so an empty block at
    // PLAN_HEIGHT moves the switch to the next block that carries something; the same height
    // on every node either way.
    let switch = {
        let info: serde_json::Value =
            serde_json::from_slice(&std::fs::read(home.join("node-0/upgrade-info.json")).unwrap())
                .unwrap();
        info["height"].as_u64().unwrap()
    };
    assert!(
        (PLAN_HEIGHT..PLAN_HEIGHT + 20).contains(&switch),
        "switched at {switch}, the plan is at {PLAN_HEIGHT}"
    );
    println!("every node switched at height {switch} (plan: {PLAN_HEIGHT})");
    for (i, n) in sup.iter().enumerate() {
        assert_eq!(n["switches"], 1, "node {i}: {n:#}");
        assert_eq!(n["on_upgrade_binary"], true, "node {i}");
        assert_eq!(n["exits"], serde_json::json!([10]), "node {i}");
        // It stopped at the plan's height and saved the snapshot below it.
        let info: serde_json::Value = serde_json::from_slice(
            &std::fs::read(home.join(format!("node-{i}/upgrade-info.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(info["name"], UPGRADE);
        assert_eq!(info["height"], switch, "node {i}: {info:#}");
        assert_eq!(info["snapshot_height"], switch - 1, "node {i}");
    }
    for n in report["nodes"].as_array().unwrap() {
        assert!(
            n["last_executed_seq"].as_u64().unwrap() > switch + 20,
            "the chain went on after the switch: {n:#}"
        );
    }

    // The reminders' runs, from the outbox as f+1 nodes returned it.
    let runs: Vec<Run> = report["outbox_quorum_payloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Run::parse(p.as_str().unwrap()).expect("a reminder record"))
        .collect();
    assert_eq!(
        report["outbox_quorum_records"].as_u64().unwrap(),
        runs.len() as u64,
        "only reminder records (no legacy run)"
    );
    let mut by_number: BTreeMap<u64, &Run> = BTreeMap::new();
    for r in &runs {
        assert!(
            by_number.insert(r.number, r).is_none(),
            "reminder {} ran twice",
            r.number
        );
        let expect = if r.seq < switch {
            "remind"
        } else {
            "remind-v2"
        };
        assert_eq!(r.handler, expect, "{r:?}");
        assert!(r.seq > r.requested_seq, "{r:?}");
    }
    let across = runs
        .iter()
        .filter(|r| r.requested_seq < switch && r.seq >= switch)
        .count();
    assert!(across >= 1, "reminders pending across the switch: {across}");
    assert!(runs.iter().any(|r| r.handler == "remind"));
    assert!(runs.len() >= 20, "{} reminders ran", runs.len());

    // The final states (nodes stop at slightly different heights: each one's history is a
    // prefix of the longest; equality at shared heights is the digests' check above): on every
    // node, every reminder asked for ran once or is still pending (due after its last height),
    // the legacy run is parked, the migration ran once, at the plan's height.
    let states: Vec<_> = (0..4).map(|i| final_state(&home, i)).collect();
    let longest = states
        .iter()
        .map(|s| s.app().state().reminded.clone())
        .max_by_key(Vec::len)
        .unwrap();
    for (i, node) in states.iter().enumerate() {
        let app = node.app();
        let shop = app.state();
        assert!(longest.starts_with(&shop.reminded), "node {i}");
        assert_eq!(shop.migrated, 1, "node {i}");
        assert_eq!(shop.migrated_at, Some(switch), "node {i}");
        let up = app.upgrades().state();
        assert!(up.pending.is_none(), "node {i}");
        assert_eq!(up.applied.len(), 1, "node {i}");
        assert_eq!(up.applied[0].seq, switch, "node {i}");
        assert_eq!(shop.legacy, 0, "node {i}");
        let book = app.scheduler().unwrap().book();
        assert_eq!(book.parked_count(), 1, "node {i}: the legacy run is parked");
        let ran: Vec<u64> = shop.reminded.iter().map(|r| r.number).collect();
        let mut sorted = ran.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ran.len(), "node {i}: no reminder ran twice");
        let pending = book.len() - book.parked_count();
        assert_eq!(
            shop.requested.len(),
            ran.len() + pending,
            "node {i}: requested = ran + pending"
        );
    }
    let ran: Vec<u64> = longest.iter().map(|r| r.number).collect();
    // The outbox read by quorum (before the nodes stopped) is the state's runs, in order, up to
    // the height it was read at.
    let emitted: Vec<u64> = runs.iter().map(|r| r.number).collect();
    assert!(ran.starts_with(&emitted), "{emitted:?}\n{ran:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
