//! Real processes on loopback: the `localnet` contract. Each test runs a short localnet of 4
//! validator processes (the localnet kills its children on every exit path, and nodes exit when
//! the localnet process is gone). The tests run one at a time (a lock) to keep 2 cores usable.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use ccron_malachite::localnet::Report;
use ccron_malachite::node::NodeStatus;

static SERIAL: Mutex<()> = Mutex::new(());

fn localnet(args: &[&str], name: &str) -> (bool, Report) {
    let (ok, report, _) = localnet_with(args, "demo", name);
    (ok, report)
}

/// Runs a localnet of `ledger`; also returns each node's final `status.json`.
fn localnet_with(args: &[&str], ledger: &str, name: &str) -> (bool, Report, Vec<NodeStatus>) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!(
        "ccron-malachite-test-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let json: PathBuf = dir.join("report.json");
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ccron-malachite"))
        .arg("localnet")
        .args(["--nodes", "4", "--ledger", ledger, "--home"])
        .arg(dir.join("home"))
        .arg("--json")
        .arg(&json)
        .args(args)
        .output()
        .expect("localnet runs");
    let report: Report = serde_json::from_slice(&std::fs::read(&json).expect("report written"))
        .expect("report parses");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let statuses = (0..4)
        .map(|i| {
            let path = dir
                .join("home")
                .join(format!("node-{i}"))
                .join("status.json");
            serde_json::from_slice(&std::fs::read(path).expect("status written"))
                .expect("status parses")
        })
        .collect();
    let ok = out.status.success();
    if ok {
        let _ = std::fs::remove_dir_all(&dir);
    }
    (ok, report, statuses)
}

#[test]
fn orders_placed_through_the_endpoint_expire_on_every_node() {
    let (ok, r, statuses) = localnet_with(&["--duration", "20s"], "orders", "orders");
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree);
    assert_eq!(r.restarts, 1);
    for (n, s) in r.nodes.iter().zip(&statuses) {
        // The orders ledger has no cron tables: every fire is an order's expiry.
        assert!(n.fires > 0, "node {} fired no expiry: {r:?}", n.id);
        assert!(s.requests_executed > 0, "node {} executed no request", n.id);
        assert!(s.mempool.accepted > 0, "node {} admitted no request", n.id);
    }
    // Nodes at the same height executed the same requests (the digest covers them too). The
    // localnet stops its nodes one after the other, so the last of them may decide one more
    // height: compare the nodes at the height most of them stopped at.
    let mut counts = std::collections::BTreeMap::new();
    for s in &statuses {
        *counts.entry(s.last_height).or_insert(0usize) += 1;
    }
    let top = counts
        .iter()
        .max_by_key(|(h, n)| (**n, **h))
        .map_or(0, |(h, _)| *h);
    let at_top: Vec<&NodeStatus> = statuses.iter().filter(|s| s.last_height == top).collect();
    assert!(at_top.len() >= 2, "{statuses:?}");
    for s in &at_top {
        assert_eq!(s.requests_executed, at_top[0].requests_executed);
        assert_eq!(s.state_digest, at_top[0].state_digest);
    }
    // A consumer reading the nodes' outbox endpoints over HTTP believed the expiries' effects
    // (each `shop.cancel` record returned identically by f+1 = 2 nodes).
    let believed = r.outbox_quorum_records.unwrap_or(0);
    let least_fires = r.nodes.iter().map(|n| n.fires).min().unwrap_or(0);
    assert!(
        believed > 0 && believed <= r.nodes.iter().map(|n| n.fires).max().unwrap_or(0),
        "outbox records believed by quorum: {believed}, fires per node from {least_fires}: {r:?}"
    );
}

#[test]
fn kill_and_restart_agrees_and_fires() {
    let (ok, r) = localnet(&["--duration", "20s"], "kill");
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree);
    assert_eq!(r.restarts, 1);
    let mut pids = r.pids.clone();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(
        pids.len(),
        5,
        "4 processes and a restarted one, distinct PIDs"
    );
    assert!(r.max_height >= 5, "decided too few heights: {r:?}");
    for n in &r.nodes {
        assert!(n.fires > 0, "node {} fired nothing", n.id);
        assert!(n.last_executed_seq > 0);
    }
    // The restarted node caught up past its restart (not stuck at the height it was killed).
    let victim = &r.nodes[1];
    assert!(victim.last_executed_seq + 5 >= r.max_height, "{r:?}");
    // It restarted from its newest snapshot (one every LOCALNET_SNAPSHOT_EVERY heights) and
    // re-executed only the blocks above it; no snapshot only if it was killed below the first.
    let every = ccron_malachite::localnet::LOCALNET_SNAPSHOT_EVERY;
    let restored = victim.restored_from_height.unwrap_or(0);
    let at_restart = restored + victim.replayed_blocks;
    println!(
        "victim restarted at height {at_restart}: restored from {:?}, replayed {}",
        victim.restored_from_height, victim.replayed_blocks
    );
    assert!(at_restart > 0, "the victim had decided nothing: {r:?}");
    assert!(
        restored == at_restart / every * every
            // Killed between appending a snapshot height and writing its snapshot.
            || (at_restart % every == 0 && restored + every == at_restart),
        "{r:?}"
    );
    for n in r.nodes.iter().filter(|n| n.id != 1) {
        assert_eq!(n.restored_from_height, None, "never restarted: {r:?}");
    }
    // Benchmark fields: every live process's peak memory, and the lateness of the fires on a
    // node that was never restarted (node 0), agreed time never before the due instant.
    assert!(r.nodes.iter().all(|n| n.peak_rss_kb > 0), "{r:?}");
    let l = r.lateness_ms.expect("lateness of node 0's fires");
    assert_eq!(l.node, 0);
    assert!(l.fires > 0 && l.fires <= r.nodes[0].fires, "{l:?}");
    assert!(
        l.agreed_p50_ms >= 0 && l.agreed_p50_ms <= l.agreed_p99_ms,
        "{l:?}"
    );
    assert!(r.committed_ticks_per_sec > 0.0);
}

#[test]
fn late_joiner_catches_up_through_sync() {
    let (ok, r) = localnet(&["--duration", "20s", "--late-join", "--no-kill"], "late");
    assert!(ok, "localnet failed: {r:?}");
    let late = &r.nodes[3];
    assert!(
        late.synced_heights > 0,
        "the late node synced nothing: {r:?}"
    );
    assert!(late.last_executed_seq + 5 >= r.max_height, "{r:?}");
}

#[test]
#[allow(clippy::disallowed_methods)] // compares against the wall clock the nodes used
fn lying_proposer_is_rejected() {
    let (ok, r) = localnet(&["--duration", "20s", "--lying-time", "--no-kill"], "lying");
    assert!(ok, "localnet failed: {r:?}");
    assert!(!r.nodes[0].honest);
    let rejected: u64 = r.nodes[1..].iter().map(|n| n.rejected_proposals).sum();
    assert!(rejected > 0, "nobody rejected the liar: {r:?}");
    // No lie was decided: agreed time stays near the wall clock (the liar adds an hour).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for n in &r.nodes {
        assert!(
            n.agreed_time_ms < now_ms + 60_000,
            "a lying time was decided: {r:?}"
        );
    }
    assert!(r.max_height >= 5, "{r:?}");
}
