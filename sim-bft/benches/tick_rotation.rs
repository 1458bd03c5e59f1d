//! Ordered ticks per component per period: every replica sending (the reference) against F+1
//! rotating senders, for n = 4 and n = 7 (a plain bench binary; counts, not wall time).
//!
//! Run: `cargo bench -p sim-bft --bench tick_rotation`
//!
//! Each run simulates `SECONDS` of a tick-only workload (one component, tick period 1 s, no user
//! clients, seeded clock skew) and counts, on replica 0, the ticks consensus ordered and the ticks
//! evaluated (after the execution-time bound). The baseline (all senders) is measured in the same
//! run; the ratio rotating / all is printed against its target (F+1)/n.

use std::collections::BTreeMap;

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, SimConfig};

const SECONDS: u64 = 120;
const PERIOD_MS: u64 = 1_000;

/// (ordered ticks, evaluated ticks) per period on replica 0.
fn measure(n: u32, rotate: bool, seed: u64) -> (f64, f64) {
    measure_with(n, rotate, seed, FaultConfig::default())
}

/// Like [`measure`], with extra faults (e.g. a Byzantine replica flooding ticks).
fn measure_with(n: u32, rotate: bool, seed: u64, faults: FaultConfig) -> (f64, f64) {
    let cfg = SimConfig {
        seed,
        replicas: n,
        node_check_every: 0,
        clients: 0,
        request_interval_ms: 0,
        faults: FaultConfig {
            max_clock_skew_ms: 50,
            ..faults
        },
        ..SimConfig::default()
    };
    let mut sim = Cluster::from_config(cfg)
        .tick_periods(BTreeMap::from([(1, PERIOD_MS)]), rotate)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("bad configuration: {e}");
            std::process::exit(2);
        });
    if !sim.run_until(SECONDS * 1_000) || !sim.violations().is_empty() {
        eprintln!("warning: checker failed: {:?}", sim.violations());
    }
    let Some(r) = sim.node(0).and_then(|n| n.replica()) else {
        eprintln!("replica 0 is down");
        std::process::exit(1);
    };
    let periods = (SECONDS * 1_000 / PERIOD_MS) as f64;
    let m = r.metrics();
    let ordered = (m.get("ticks_evaluated") + m.get("tick_coalesced")) as f64;
    (ordered / periods, m.get("ticks_evaluated") as f64 / periods)
}

fn main() {
    println!(
        "ordered ticks per component per period ({SECONDS} s simulated, period {PERIOD_MS} ms)"
    );
    let mut failed = false;
    for n in [4u32, 7] {
        let f = (n - 1) / 3;
        let (all, all_eval) = measure(n, false, 1);
        let (rot, rot_eval) = measure(n, true, 1);
        let ratio = rot / all;
        let target = f64::from(f + 1) / f64::from(n);
        println!(
            "n = {n}: all-replica {all:.2} ordered ({all_eval:.2} evaluated), rotating {rot:.2} ordered ({rot_eval:.2} evaluated); ratio {ratio:.3} (target <= {target:.3})"
        );
        failed |= ratio > target + 0.02;
    }
    // A Byzantine replica flooding ticks (16 per timer firing, ignoring throttle and rotation):
    // the ordered count grows, the evaluated count stays within one per sender and period.
    for n in [4u32, 7] {
        let flood = FaultConfig {
            byzantine: 1,
            byzantine_kind: ByzantineKind::TickFlood,
            pinned_byzantine: vec![n - 1],
            ..FaultConfig::default()
        };
        let (ordered, evaluated) = measure_with(n, true, 1, flood);
        let f = (n - 1) / 3;
        let bound = f64::from(f + 1) + 1.0;
        println!(
            "n = {n}, rotating, one tick flooder: {ordered:.2} ordered, {evaluated:.2} evaluated per period (bound: F+1 honest + 1 flooder = {bound:.0})"
        );
        failed |= evaluated > bound + 0.05;
    }
    if failed {
        std::process::exit(1);
    }
}
