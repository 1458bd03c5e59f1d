//! What the slow localnet tests share: the one launcher of a 4-validator localnet of this
//! crate's binary, run one at a time, and what a failed run's report says. Each test file is
//! its own crate and includes this module (`mod support;`), using only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use ccron_node::localnet::Report;

/// One localnet at a time within a test binary (each takes 4 processes on 2 cores).
pub static SERIAL: Mutex<()> = Mutex::new(());

/// A fresh directory for test `name` of suite `suite` (`ccron-malachite-<suite>-<name>-<pid>`
/// under the temporary directory), emptied first.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ccron-malachite-{suite}-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `ccron-malachite localnet --nodes 4 --ledger <ledger> --home <dir>/home --json
/// <dir>/report.json <args>`: the command, not started.
pub fn localnet_command(dir: &Path, ledger: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccron-malachite"));
    cmd.arg("localnet")
        .args(["--nodes", "4", "--ledger", ledger, "--home"])
        .arg(dir.join("home"))
        .arg("--json")
        .arg(dir.join("report.json"))
        .args(args);
    cmd
}

/// Reads the report a localnet wrote into `dir`.
pub fn read_report(dir: &Path) -> Report {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report written"))
        .expect("report parses")
}

/// Runs a localnet of `ledger` with `args` to its end (one at a time: [`SERIAL`]) in a fresh
/// [`scratch`] directory, prints its output; returns its exit status, its report and the
/// directory (kept: the caller removes it).
pub fn run_localnet(
    suite: &str,
    name: &str,
    ledger: &str,
    args: &[&str],
) -> (bool, Report, PathBuf) {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch(suite, name);
    let out = localnet_command(&dir, ledger, args)
        .output()
        .expect("localnet runs");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let report = read_report(&dir);
    (out.status.success(), report, dir)
}

/// What a run's report says, for a failed assertion: the violations, every node's height and
/// restart, liveness, the fault log and the kill-all comparison, the home (kept) and replay.
pub fn diagnose(r: &Report) -> String {
    let nodes: Vec<String> = r
        .nodes
        .iter()
        .map(|n| {
            format!(
                "node {}: height {} pid {} restored from {:?} replayed {} synced {} refusals {:?}",
                n.id,
                n.last_executed_seq,
                n.pid,
                n.restored_from_height,
                n.replayed_blocks,
                n.synced_heights,
                n.refusals
            )
        })
        .collect();
    format!(
        "violations: {:?}\nhonest_agree: {}\nmax height {}, longest stall {} ms, restarts {}\n{}\n\
         kill-all: {:?}\nfaults: {:?}\nhome (kept): {}\nreplay: {}",
        r.violations,
        r.honest_agree,
        r.max_height,
        r.longest_stall_ms,
        r.restarts,
        nodes.join("\n"),
        r.kill_all,
        r.faults,
        r.home,
        r.replay
    )
}

/// The demo ledger as a node's application factory (the in-process `State` tests).
pub fn demo_factory() -> ccron_node::Factory<Box<dyn ccron::host::Application>> {
    std::sync::Arc::new(|_spec| {
        Ok(Box::new(
            ccron_ledgers::demo::demo_ledger(&ccron_ledgers::demo::DemoTables::default())
                .map_err(|e| e.to_string())?,
        ) as Box<dyn ccron::host::Application>)
    })
}

/// A fresh localnet home (`ccron-<prefix>-<name>-<pid>` under the temporary directory, emptied
/// first) of `n` validators with key seed `seed`, for the demo ledger with every tick
/// component at 200 ms: what the in-process `State` tests open nodes from.
pub fn demo_home(prefix: &str, name: &str, n: usize, seed: u64) -> PathBuf {
    use ccron::host::Application as _;
    let dir = std::env::temp_dir().join(format!("ccron-{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let app =
        ccron_ledgers::demo::demo_ledger(&ccron_ledgers::demo::DemoTables::default()).unwrap();
    let init = ccron_node::localnet::LedgerInit {
        name: "demo".into(),
        tick_periods: app
            .tick_components()
            .into_iter()
            .map(|c| (c, 200))
            .collect(),
        pages: ccron_node::ledger::DEFAULT_PAGES,
        setup_digest: None,
        has_outbox: false,
        has_book: false,
    };
    ccron_node::localnet::init_home(&dir, n, seed, &init).unwrap();
    dir
}
