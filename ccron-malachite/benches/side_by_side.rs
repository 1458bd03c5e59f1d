//! Side by side in one run: sim-bft's threaded runtime (4 PBFT replicas on threads of this
//! process, real time) and the Malachite localnet (4 validator processes on 127.0.0.1), both on
//! the demo ledger with ticks every 200 ms per component, for the same duration. Prints one
//! table: heights (batches) per second, committed ticks per second, lateness of the due
//! periodic actions (agreed time minus due, wall clock at execution minus due; p50 / p99 /
//! max) and peak memory (VmHWM). A plain bench binary (no timing harness).
//!
//! Run: `cargo bench -p ccron-malachite --bench side_by_side` (release; 30 s per side, or
//! `SIDE_BY_SIDE_SECS=60`). Figures and the machine: docs/benchmarks-engines.md.
//!
//! What is measured on each side:
//! - sim-bft: replica 0's executed batches as the runtime reports them (`Executed`); the wall
//!   clock is read when this thread receives the observation (right after execution); peak
//!   memory is this process's VmHWM, which holds all 4 replicas (and the bench itself).
//! - Malachite: the localnet's JSON report (`heights_per_sec`, `committed_ticks_per_sec`,
//!   `lateness_ms` from node 0's `fires.log`, `nodes[].peak_rss_kb` per process); no kill or
//!   restart during the measured run.

// A benchmark reads the real clock.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use ccron::Due;
use ccron_node::ledger::DEFAULT_TICK_PERIOD_MS as DEMO_TICK_PERIOD_MS;
use ccron_node::localnet::{Lateness, LedgerInit, LocalnetOptions, peak_rss_kb, run_localnet};
use sim_bft::ledgers::demo::{DemoTables, demo_ledger};
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{RuntimeConfig, ThreadedCluster, wall_clock_ms};

const NODES: u32 = 4;

/// One column of the table.
struct Side {
    name: &'static str,
    heights_per_sec: f64,
    ticks_per_sec: f64,
    fires: u64,
    lateness: Lateness,
    memory: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn sim_bft_side(duration: Duration) -> Side {
    let tables = DemoTables::default();
    let components = tables.components();
    let replicas: Vec<Replica> = (0..NODES)
        .map(|i| {
            let mut cfg = ReplicaConfig::new(i, NODES, 11, 0);
            cfg.tick_components = components
                .iter()
                .map(|&c| (c, DEMO_TICK_PERIOD_MS))
                .collect();
            let ledger = demo_ledger(&tables).unwrap_or_else(|e| panic!("demo tables: {e}"));
            Replica::with_app(cfg, Box::new(ledger)).unwrap_or_else(|e| panic!("replica: {e}"))
        })
        .collect();
    let cluster = ThreadedCluster::start(
        replicas,
        RuntimeConfig {
            tick_period_ms: DEMO_TICK_PERIOD_MS,
            components,
        },
    )
    .unwrap_or_else(|e| panic!("runtime: {e}"));
    let start = Instant::now();
    let (mut last_seq, mut ticks) = (0u64, 0u64);
    let mut samples = Vec::new();
    while start.elapsed() < duration {
        let Ok((id, e)) = cluster.executed().recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        if id != 0 {
            continue;
        }
        let wall = wall_clock_ms();
        last_seq = last_seq.max(e.seq);
        ticks += e.ticks.len() as u64;
        for f in &e.fires {
            if let (Some(Due::Time(due)), Some(agreed)) = (f.due, e.agreed_time_ms) {
                samples.push((agreed - due, wall - due));
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let dropped = cluster.dropped();
    cluster.stop().unwrap_or_else(|e| panic!("stop: {e}"));
    let peak = peak_rss_kb(std::process::id()).unwrap_or(0);
    if dropped > 0 {
        println!("  (sim-bft runtime: {dropped} messages dropped on full channels)");
    }
    Side {
        name: "sim-bft threaded runtime",
        heights_per_sec: last_seq as f64 / elapsed,
        ticks_per_sec: ticks as f64 / elapsed,
        fires: samples.len() as u64,
        lateness: Lateness::from_samples(0, &samples),
        memory: format!("{} MiB (1 process, 4 replicas)", peak / 1024),
    }
}

fn malachite_side(duration: Duration) -> Side {
    let tables = DemoTables::default();
    let opts = LocalnetOptions {
        nodes: NODES as usize,
        duration,
        ledger: LedgerInit {
            name: "demo".into(),
            tick_periods: tables
                .components()
                .into_iter()
                .map(|c| (c, DEMO_TICK_PERIOD_MS))
                .collect(),
            pages: ccron_node::ledger::DEFAULT_PAGES,
            setup_digest: None,
            has_outbox: false,
            has_book: false,
        },
        load: None,
        engine: ccron_malachite::ENGINE.into(),
        late_join: false,
        late_join_at_height: None,
        lying_time: false,
        omit_ticks: false,
        kill_restart: false,
        byzantine: None,
        faults: None,
        kill_all: false,
        net_faults: None,
        clock_faults: None,
        disk_faults: None,
        byzantine_subset: None,
        seed: 1,
        home: None,
        node_bin: env!("CARGO_BIN_EXE_ccron-malachite").into(),
        upgrade_binary: None,
        retain_blocks: None,
        wipe_restarted: false,
        scale: Default::default(),
    };
    let report = run_localnet(&opts).unwrap_or_else(|e| panic!("localnet: {e}"));
    let _ = std::fs::remove_dir_all(&report.home);
    if !report.honest_agree || !report.violations.is_empty() {
        println!("  (localnet violations: {:?})", report.violations);
    }
    let peaks: Vec<String> = report
        .nodes
        .iter()
        .map(|n| (n.peak_rss_kb / 1024).to_string())
        .collect();
    let lateness = report.lateness_ms.unwrap_or_default();
    Side {
        name: "Malachite localnet",
        heights_per_sec: report.heights_per_sec,
        ticks_per_sec: report.committed_ticks_per_sec,
        fires: lateness.fires,
        lateness,
        memory: format!("{} MiB (per process)", peaks.join(" / ")),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects nothing here.
    let secs: u64 = std::env::var("SIDE_BY_SIDE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let duration = Duration::from_secs(secs);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "side by side: demo ledger, {NODES} nodes, ticks every {DEMO_TICK_PERIOD_MS} ms per component, \
         {secs} s per side; {} ({cores} cores)",
        cpu_model()
    );
    println!("load average before: {}", loadavg());
    let sim = sim_bft_side(duration);
    println!("load average after sim-bft: {}", loadavg());
    let mal = malachite_side(duration);
    println!("load average after Malachite: {}", loadavg());
    println!();
    println!(
        "{:<26} {:>9} {:>9} {:>6} {:>17} {:>17}  peak memory (VmHWM)",
        "engine", "heights/s", "ticks/s", "fires", "agreed-due p50/99", "wall-due p50/99"
    );
    for s in [&sim, &mal] {
        println!(
            "{:<26} {:>9.1} {:>9.1} {:>6} {:>17} {:>17}  {}",
            s.name,
            s.heights_per_sec,
            s.ticks_per_sec,
            s.fires,
            format!(
                "{}/{} ms",
                s.lateness.agreed_p50_ms, s.lateness.agreed_p99_ms
            ),
            format!("{}/{} ms", s.lateness.wall_p50_ms, s.lateness.wall_p99_ms),
            s.memory
        );
    }
    println!(
        "(max lateness agreed/wall: sim-bft {}/{} ms, Malachite {}/{} ms)",
        sim.lateness.agreed_max_ms,
        sim.lateness.wall_max_ms,
        mal.lateness.agreed_max_ms,
        mal.lateness.wall_max_ms
    );
}
