//! sim-bft throughput benchmark (a plain bench binary; prints figures against their targets).
//!
//! Run: `cargo bench -p sim-bft --bench sim_throughput` (`-- tick-only`: part 3 alone)
//!
//! 1. Committed client-signed requests per second of wall time, n = 4, batching on (the clients'
//!    signing is inside the measured time).
//! 2. Committed internal requests (ticks) per second of wall time, n = 4, many components.
//! 3. Simulated time over wall time for a tick-only workload (the baseline is real time: the ratio
//!    says how many times faster than real time the cluster is simulated), under both signature
//!    schemes.
//!
//! Wall time is read only here, in the driver (the simulator itself never reads a clock).

use std::time::{Duration, Instant};

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{Signatures, SimConfig, SimOutcome, TimeServiceMode};

/// mimalloc as this binary's allocator (sim-bft's default feature `mimalloc`): the simulator
/// allocates at every step, and glibc's malloc/free were ~20% of its CPU time. The library
/// leaves the allocator to its users; the outputs and trace hashes do not depend on it.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The benchmark configuration: per-step replica invariant checks off (they hash the stable
/// snapshot on every step and would dominate; the tests keep them on).
fn bench_cluster(seed: u64) -> Cluster {
    Cluster::from_config(SimConfig {
        seed,
        node_check_every: 0,
        ..SimConfig::default()
    })
}

#[allow(clippy::disallowed_methods)]
fn timed(f: impl FnOnce() -> SimOutcome) -> (SimOutcome, Duration) {
    // The benchmark driver's one real-clock read pair.
    let t0 = Instant::now();
    let o = f();
    (o, t0.elapsed())
}

/// CPU time this process has run, in seconds (Linux `/proc/self/schedstat`, nanoseconds; the
/// simulator is single-threaded). On a shared machine it is steadier than wall time.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

fn check(o: &SimOutcome) {
    if !o.ok() {
        eprintln!("warning: checker failed: {:?}", o.violations);
    }
}

fn min_user_requests(o: &SimOutcome) -> u64 {
    o.nodes
        .iter()
        .map(|n| n.requests_executed - n.ticks_executed)
        .min()
        .unwrap_or(0)
}

fn min_ticks(o: &SimOutcome) -> u64 {
    o.nodes.iter().map(|n| n.ticks_executed).min().unwrap_or(0)
}

fn mean_batch(o: &SimOutcome) -> f64 {
    let n = &o.nodes[0];
    n.requests_executed as f64 / n.batches_executed.max(1) as f64
}

fn main() {
    // Cargo passes `--bench`; `tick-only` runs part 3 alone.
    let tick_only = std::env::args().any(|a| a == "tick-only");
    println!("sim-bft throughput (n = 4, release build)");

    if !tick_only {
        requests_and_ticks();
    }

    // 3. Simulation speed, tick-only workload: one component ticking every second for 1 hour,
    //    every replica's tick timer on the same second boundaries (as cron-aligned timers are),
    //    so the primary batches the replicas' ticks of one second together. Under both
    //    signature schemes (issue 28's target, >= 10,000x, is for `sim`).
    for signatures in Signatures::ALL {
        let simulated_ms = 3_600_000;
        let cpu0 = cpu_seconds();
        let (o, wall) = timed(|| {
            let mut cfg = bench_cluster(3)
                .duration_ms(simulated_ms, 10_000)
                .clients(0, 0)
                .ticks(vec![1], 1_000)
                .signatures(signatures)
                .config()
                .clone();
            cfg.tick_spread_ms = Some(0);
            Cluster::from_config(cfg)
                .build_with(|c| c.batch_delay_ms = 10)
                .map(|s| s.run())
                .unwrap_or_else(|e| panic!("bench config: {e}"))
        });
        let cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
        check(&o);
        let simulated_s = o.end_ms as f64 / 1_000.0;
        let ratio = simulated_s / wall.as_secs_f64();
        println!(
            "simulation speed, tick-only, {signatures} signatures: {} s simulated in {:.2} s wall \
             = {:.0}x real time (baseline: real time = 1x; target >= 1,000x, with sim signatures \
             >= 10,000x; {} ticks executed per replica)",
            o.end_ms / 1_000,
            wall.as_secs_f64(),
            ratio,
            min_ticks(&o)
        );
        if let Some(cpu) = cpu {
            println!(
                "  CPU time {cpu:.2} s = {:.0}x real time per CPU second",
                simulated_s / cpu.max(1e-9)
            );
        }
    }
}

/// Parts 1 and 2: committed client-signed requests and internal requests per second of wall
/// time.
fn requests_and_ticks() {
    // 1. Client-signed requests: 32 clients, one request each per simulated ms (32k/s offered).
    let (o, wall) = timed(|| {
        bench_cluster(1)
            .time_service(TimeServiceMode::Robust)
            .duration_ms(2_000, 1_000)
            .clients(32, 1)
            .ticks(vec![1], 1_000)
            .build_with(|c| {
                c.batch_max = 256;
                c.batch_delay_ms = 2;
                c.max_in_flight = 8;
                c.max_pending_per_client = 4_096;
                c.max_pending = 200_000;
            })
            .map(|s| s.run())
            .unwrap_or_else(|e| panic!("bench config: {e}"))
    });
    check(&o);
    let req = min_user_requests(&o);
    let rate = req as f64 / wall.as_secs_f64();
    println!(
        "client-signed requests: {req} committed on every replica in {:.2} s wall = {:.0} req/s \
         (target >= 3,000; mean batch {:.1} requests)",
        wall.as_secs_f64(),
        rate,
        mean_batch(&o)
    );

    // 2. Internal requests (ticks): C components ticking every P ms on every replica; a small
    //    sweep, since the replica throttles ticks (at most one pending per component).
    for (count, period_ms) in [(256u32, 5u64), (1024, 20), (4096, 100)] {
        let components: Vec<u32> = (0..count).collect();
        let (o, wall) = timed(|| {
            // A 5 s liveness bound: long enough for a view change (2 s timeout) to complete.
            bench_cluster(2)
                .duration_ms(2_000, 5_000)
                .clients(0, 0)
                .ticks(components.clone(), period_ms)
                .build_with(|c| {
                    c.batch_max = 1_024;
                    c.batch_delay_ms = 2;
                    c.max_in_flight = 8;
                    c.max_pending = 200_000;
                })
                .map(|s| s.run())
                .unwrap_or_else(|e| panic!("bench config: {e}"))
        });
        check(&o);
        let ticks = min_ticks(&o);
        println!(
            "internal requests (ticks), {count} components every {period_ms} ms: {ticks} \
             committed on every replica in {:.2} s wall = {:.0} req/s (target >= 10,000; mean \
             batch {:.1})",
            wall.as_secs_f64(),
            ticks as f64 / wall.as_secs_f64(),
            mean_batch(&o)
        );
    }
}
