//! Real processes on loopback with bits flipped in their files (issue 23, item 3:
//! `localnet --disk-faults SEED`): a node SIGKILLed, one bit flipped in the middle of its
//! `blocks.log`, `parts.log` or newest snapshot, the node restarted. It must refuse the damage
//! loudly (the file kept aside, recorded in `store-recovery.json` and its status), recover from
//! its peers (a cut `blocks.log` refilled with verified blocks before its engine starts) and
//! never drop a decided block; the chain agrees and the node resumes. With the recovery turned
//! off (`CCRON_STORE_RECOVERY=off`) the same run must fail the judge.

mod support;

use std::time::Duration;

use ccron_node::faults::{DiskFile, DiskPlan};
use ccron_node::localnet::Report;
use support::diagnose;

const DURATION: Duration = Duration::from_secs(30);

/// The first seed whose plan flips a bit in each kind of file, and a blocks.log at least twice.
fn seed() -> u64 {
    (1..200u64)
        .find(|&s| {
            let p = DiskPlan::new(s, 4, DURATION);
            let has = |k| p.events.iter().any(|e| e.file == k);
            has(DiskFile::Parts)
                && has(DiskFile::Snapshot)
                && p.events
                    .iter()
                    .filter(|e| e.file == DiskFile::Blocks)
                    .count()
                    >= 2
        })
        .expect("a seed flipping every kind of file")
}

fn run(name: &str, env_off: bool) -> (bool, Report, std::path::PathBuf) {
    let seed = seed().to_string();
    let args = ["--no-kill", "--duration", "30s", "--disk-faults", &seed];
    let _guard = support::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = support::scratch("diskfaults", name);
    let mut cmd = support::localnet_command(&dir, "demo", &args);
    if env_off {
        cmd.env(ccron_node::store::RECOVERY_ENV, "off");
    } else {
        cmd.env_remove(ccron_node::store::RECOVERY_ENV);
    }
    let out = cmd.output().expect("localnet runs");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let report = support::read_report(&dir);
    println!("replay: {}", report.replay);
    (out.status.success(), report, dir)
}

#[test]
fn a_flipped_bit_in_a_nodes_files_is_refused_kept_and_recovered_from_peers_without_losing_a_block()
{
    let (ok, r, dir) = run("recover", false);
    let d = r.disk_faults.as_ref().expect("disk fault report");
    println!("{d:#?}");
    assert!(
        ok && r.honest_agree && r.violations.is_empty(),
        "{}",
        diagnose(&r)
    );
    assert!(d.flips.len() >= 4, "{d:?}");
    let home = dir.join("home");
    for f in &d.flips {
        // Refused loudly: recorded, the damaged file kept aside, in the node's status.
        assert!(f.detected, "{f:?}\n{}", diagnose(&r));
        let kept = f.kept_as.as_ref().expect("kept");
        assert!(
            home.join(format!("node-{}", f.node)).join(kept).exists(),
            "{f:?}"
        );
        assert!(f.resumed_after_ms.is_some(), "{f:?}\n{}", diagnose(&r));
        let status: ccron_node::records::NodeStatus = serde_json::from_slice(
            &std::fs::read(home.join(format!("node-{}/status.json", f.node))).unwrap(),
        )
        .unwrap();
        assert!(
            status.store_recovery.iter().any(|q| &q.kept_as == kept),
            "{f:?}: {:?}",
            status.store_recovery
        );
    }
    // Every kind of file was flipped, blocks.log more than once.
    for kind in ["blocks.log", "parts.log", "snapshot"] {
        assert!(
            d.flips.iter().any(|f| f.file.starts_with(kind)
                || (kind == "snapshot" && f.file.starts_with("snapshots"))),
            "{kind}: {d:?}"
        );
    }
    // Nothing decided before a flip was lost or changed.
    assert!(d.blocks_compared > 100, "{d:?}");
    assert_eq!(
        (d.lost, d.changed, d.undetected, d.not_resumed),
        (0, 0, 0, 0)
    );
    let top = r.nodes.iter().map(|n| n.last_executed_seq).max().unwrap();
    for n in &r.nodes {
        assert!(n.last_executed_seq + 20 >= top, "{}", diagnose(&r));
    }
    let _ = std::fs::remove_dir_all(dir);
}

// The judge's own check: the same run with the node's recovery turned off must fail (the node
// refuses to start on the corrupt file, as before recovery existed).
#[test]
fn with_recovery_off_the_same_flips_fail_the_judge() {
    let (ok, r, dir) = run("off", true);
    let d = r.disk_faults.as_ref().expect("disk fault report");
    assert!(!ok, "{}", diagnose(&r));
    assert!(d.undetected > 0 && d.not_resumed > 0, "{d:?}");
    assert!(
        r.violations.iter().any(|v| v.contains("exited")),
        "{}",
        diagnose(&r)
    );
    let _ = std::fs::remove_dir_all(dir);
}
