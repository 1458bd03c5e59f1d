//! Issue 23, item 5, "running for weeks": catch-up while running. A localnet of 4 validators
//! prunes below its snapshots (`--retain-blocks 0`); node 2 is paused (SIGSTOP) while the
//! others run on until every one of them has pruned its next height, then continued
//! (SIGCONT). The engine's value sync can never serve it again; nobody restarts it from
//! outside. It must notice (`ccron_node::catchup::running`), catch up from a peer's snapshot
//! verified against the commit certificate of the block above it, and decide with the
//! others again, agreeing with them at every height they share. With the catch-up off
//! (`CCRON_RUNNING_CATCHUP=off`, inherited by the nodes) the test fails: node 2 stays at
//! the height it stopped at.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ccron_node::catchup::fetch::CatchUpReport;
use ccron_node::localnet::Report;
use ccron_node::records::NodeStatus;

/// Per node: height -> digest, from its `digests.log`.
fn digests(path: &Path) -> std::collections::BTreeMap<u64, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut v = line.split_whitespace();
            Some((v.next()?.parse().ok()?, v.next()?.to_string()))
        })
        .collect()
}

fn status(node: &Path) -> Option<NodeStatus> {
    serde_json::from_slice(&std::fs::read(node.join("status.json")).ok()?).ok()
}

/// The PID of the node process with `--home home --index index` (from `/proc`).
fn node_pid(home: &Path, index: usize) -> Option<u32> {
    let home = home.to_string_lossy().to_string();
    let index = index.to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        let after = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        if args.iter().any(|a| a == "node")
            && after("--home").as_deref() == Some(home.as_str())
            && after("--index").as_deref() == Some(index.as_str())
        {
            return Some(pid);
        }
    }
    None
}

fn signal(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid}");
}

/// Waits (polling every 200 ms, at most `limit`) until `f` is `Some`.
#[allow(clippy::disallowed_methods)]
fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

#[test]
#[allow(clippy::disallowed_methods)] // the test's own wall clock: how long the node is paused
fn a_paused_node_behind_every_pruned_history_catches_up_while_running() {
    const PAUSED: usize = 2;
    let dir: PathBuf = support::scratch("test", "running-catchup");
    let home = dir.join("home");
    let localnet = support::localnet_command(
        &dir,
        "demo",
        &["--duration", "60s", "--no-kill", "--retain-blocks", "0"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("localnet runs");
    let node = |i: usize| home.join(format!("node-{i}"));
    let others = [0usize, 1, 3];

    // Node 2 runs and decides; then it is paused.
    let pid = wait_for(Duration::from_secs(30), || {
        let s = status(&node(PAUSED))?;
        (s.last_height >= 20).then_some(())?;
        node_pid(&home, PAUSED)
    })
    .expect("node 2 decides 20 heights");
    signal("STOP", pid);
    // Its height as it stopped (status.json is written at each decision).
    std::thread::sleep(Duration::from_millis(300));
    let stopped_at = status(&node(PAUSED)).unwrap().last_height;
    // The others run on until each one's store starts above node 2's next height (pruned),
    // and at least 15 s (a long partition); then node 2 continues. Nobody restarts it.
    let paused = Instant::now();
    let pruned = wait_for(Duration::from_secs(35), || {
        let firsts: Vec<u64> = others
            .iter()
            .map(|&i| status(&node(i)).map_or(0, |s| s.store_first_height))
            .collect();
        (paused.elapsed() >= Duration::from_secs(15) && firsts.iter().all(|&f| f > stopped_at + 2))
            .then_some(firsts)
    });
    signal("CONT", pid);
    let paused_for = paused.elapsed();
    let firsts = pruned.expect("the others pruned node 2's next height");
    let out = localnet.wait_with_output().expect("localnet finishes");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let r: Report = support::read_report(&dir);
    assert!(out.status.success(), "localnet failed: {r:?}");
    assert!(r.honest_agree, "{:?}", r.violations);
    // The same process all along (it restarted itself in place: same PID), no restart from
    // outside.
    assert_eq!(r.restarts, 0);
    assert_eq!(r.nodes[PAUSED].pid, pid, "node 2 is the process paused");

    // It caught up while running, from a verified snapshot above the height it stopped at.
    let report: CatchUpReport = serde_json::from_slice(
        &std::fs::read(node(PAUSED).join("catchup.json")).expect("node 2 caught up (catchup.json)"),
    )
    .unwrap();
    assert_eq!(report.trigger.as_deref(), Some("running"), "{report:?}");
    let reason = report.reason.expect("the trigger's reason");
    // (A decision under way when it stopped may complete as it continues: one height more.)
    assert!(
        reason.have == stopped_at || reason.have == stopped_at + 1,
        "stopped at {stopped_at}: {report:?}"
    );
    assert!(reason.lowest_first > stopped_at + 1, "{reason:?}");
    let installed = report.installed_height.expect("a snapshot installed");
    assert!(installed > stopped_at, "{report:?}");
    assert!(report.refusals.is_empty(), "{report:?}");
    let s = status(&node(PAUSED)).unwrap();
    assert!(
        s.catchup_running.restarts >= 1,
        "the restarted image counts its restart: {:?}",
        s.catchup_running
    );
    assert!(s.store_first_height > stopped_at + 1);

    // It decides with the others again and agrees with them at every shared height.
    let mine = digests(&node(PAUSED).join("digests.log"));
    let mut shared_above = 0;
    for &i in &others {
        let theirs = digests(&node(i).join("digests.log"));
        for (h, d) in &mine {
            if let Some(t) = theirs.get(h) {
                assert_eq!(d, t, "node 2 disagrees with node {i} at height {h}");
                if *h > installed {
                    shared_above += 1;
                }
            }
        }
    }
    let top = others
        .iter()
        .filter_map(|&i| status(&node(i)).map(|s| s.last_height))
        .max()
        .unwrap_or(0);
    assert!(
        shared_above > 0 && s.last_height + 20 >= top,
        "node 2 at {} of {top} ({shared_above} shared heights above the snapshot)",
        s.last_height
    );
    // The signing guard refused nothing anywhere.
    for i in 0..4 {
        let st = status(&node(i)).unwrap();
        assert!(st.signing.refused.is_empty(), "node {i}: {:?}", st.signing);
    }
    println!(
        "running catch-up: node 2 paused at {stopped_at} for {:.1} s (peers' stores then from \
         {firsts:?}); {reason}; installed the snapshot at {installed} from {:?} in {} ms; then \
         at {} of {top}; counters {:?}",
        paused_for.as_secs_f64(),
        report.from_peer,
        report.took_ms,
        s.last_height,
        s.catchup_running
    );
    let _ = std::fs::remove_dir_all(&dir);
}
