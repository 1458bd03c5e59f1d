//! Long-horizon simulation speed (a plain bench binary; prints simulated / wall and CPU time).
//!
//! The default workload is issue 28's first target: the demo ledger (components 1 and 2 ticking
//! every second), two user clients at 1 request/s each, n = 4, the robust time service, `sim`
//! signatures, every checker on (including the replicas' per-step invariant checks). Each run
//! prints simulated / CPU time and, when its workload is one of issue 28's targets, that target
//! and whether this run meets it (projected to a month):
//!
//! | workload | options | target (CPU time of a 30-day month) |
//! |---|---|---|
//! | 2 clients x 1 request/s, `sim` | (default) | <= 5 min (>= 8,640x) |
//! | 2 clients x 10 requests/s, `sim` | `--rate 10` | <= 30 min (>= 1,440x) |
//! | 2 clients x 1 request/s, ed25519 | `--signatures ed25519` | <= 90 min (>= 480x) |
//! | tick-only | `--clients 0` | >= 10,000x |
//!
//! (The tick-only target's own workload, one component and aligned tick timers, is part 3 of
//! the `sim_throughput` bench; `--clients 0` here is this bench's two-component variant.)
//!
//! ```sh
//! cargo bench -p sim-bft --bench long_horizon -- day --signatures sim   # 1 simulated day
//! cargo bench -p sim-bft --bench long_horizon             # 1 simulated hour (quick)
//! cargo bench -p sim-bft --bench long_horizon -- month    # 30 simulated days
//! cargo bench -p sim-bft --bench long_horizon -- day --rate 10 --signatures ed25519
//! cargo bench -p sim-bft --bench long_horizon -- 6h --batch-delay 0 --byzantine equivocate
//! ```
//!
//! Options after `--`: a length (`hour`, `day`, `week`, `month`, or a duration such as `6h`),
//! `--signatures ed25519|sim` (default `sim`, the target's workload), `--rate R` (requests per
//! second of each of the two clients, default 1; issue 14's workload was 10), `--clients N`
//! (default 2; 0: tick-only), `--batch-delay MS` (the primary's batch delay, default 50 ms; 0
//! is the replica's default: every request its own batch), `--byzantine KIND` (one Byzantine
//! replica of that kind, as `sim-bft run --byzantine-kind` names them; `all`: one run per
//! kind), `--seed N`. CI never runs this bench (no CI job runs `cargo bench`);
//! `docs/benchmarks-sim-bft.md` has the figures.
//!
//! Wall time is read only here, in the driver (the simulator never reads a clock).

use std::time::Instant;

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, LedgerKind, Signatures, SimConfig, parse_duration_ms};

/// mimalloc as this binary's allocator (sim-bft's default feature `mimalloc`): the simulator
/// allocates at every step, and glibc's malloc/free were ~20% of its CPU time. The library
/// leaves the allocator to its users; the outputs and trace hashes do not depend on it.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A month of 30 days.
const MONTH_MS: u64 = 30 * 24 * 3_600_000;

/// Issue 28's target for a workload: what it is and the simulated / CPU time ratio it needs.
struct Target {
    what: &'static str,
    ratio: f64,
}

/// The ratio a month in `minutes` of CPU time needs.
fn month_in(minutes: f64) -> f64 {
    MONTH_MS as f64 / (minutes * 60_000.0)
}

/// The issue-28 target this run's workload is, if any (honest runs only: a Byzantine replica
/// is a different workload).
fn target(o: &Opts, byzantine: Option<ByzantineKind>) -> Option<Target> {
    if byzantine.is_some() {
        return None;
    }
    let (sim, rate) = (o.signatures == Signatures::Sim, o.rate);
    match (o.clients, sim) {
        (0, _) => Some(Target {
            what: "tick-only: >= 10,000x",
            ratio: 10_000.0,
        }),
        (2, true) if rate == 1.0 => Some(Target {
            what: "a month, 2 clients x 1 request/s, sim signatures: <= 5 CPU min",
            ratio: month_in(5.0),
        }),
        (2, true) if rate == 10.0 => Some(Target {
            what: "a month, 2 clients x 10 requests/s, sim signatures: <= 30 CPU min",
            ratio: month_in(30.0),
        }),
        (2, false) if rate == 1.0 => Some(Target {
            what: "a month, 2 clients x 1 request/s, ed25519: <= 90 CPU min",
            ratio: month_in(90.0),
        }),
        _ => None,
    }
}

struct Opts {
    simulated_ms: u64,
    batch_delay_ms: u64,
    /// One Byzantine replica of each kind in turn (`--byzantine all`), or of one kind.
    byzantine: Vec<ByzantineKind>,
    seed: u64,
    signatures: Signatures,
    clients: u32,
    /// Requests per second of each client.
    rate: f64,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        simulated_ms: 3_600_000,
        batch_delay_ms: 50,
        byzantine: Vec::new(),
        seed: 1,
        signatures: Signatures::Sim,
        clients: 2,
        rate: 1.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bench" => {}
            "hour" => o.simulated_ms = 3_600_000,
            "day" => o.simulated_ms = 24 * 3_600_000,
            "week" => o.simulated_ms = 7 * 24 * 3_600_000,
            "month" => o.simulated_ms = MONTH_MS,
            "--batch-delay" => {
                let v = args.next().ok_or("--batch-delay needs a value in ms")?;
                o.batch_delay_ms = v.parse().map_err(|e| format!("--batch-delay {v}: {e}"))?;
            }
            "--byzantine" => {
                let v = args.next().ok_or("--byzantine needs a kind or `all`")?;
                o.byzantine = if v == "all" {
                    ByzantineKind::ALL.to_vec()
                } else {
                    vec![v.parse().map_err(|e| format!("--byzantine {v}: {e}"))?]
                };
            }
            "--signatures" => {
                let v = args.next().ok_or("--signatures needs ed25519 or sim")?;
                o.signatures = v.parse()?;
            }
            "--clients" => {
                let v = args.next().ok_or("--clients needs a count")?;
                o.clients = v.parse().map_err(|e| format!("--clients {v}: {e}"))?;
            }
            "--rate" => {
                let v = args.next().ok_or("--rate needs requests per second")?;
                o.rate = v.parse().map_err(|e| format!("--rate {v}: {e}"))?;
                if !(o.rate > 0.0 && o.rate <= 1_000.0) {
                    return Err(format!("--rate {v}: expected 0 < rate <= 1000"));
                }
            }
            "--seed" => {
                let v = args.next().ok_or("--seed needs a value")?;
                o.seed = v.parse().map_err(|e| format!("--seed {v}: {e}"))?;
            }
            other => {
                o.simulated_ms =
                    parse_duration_ms(other).map_err(|e| format!("length {other:?}: {e}"))?;
            }
        }
    }
    Ok(o)
}

/// CPU time this process has run, in seconds (Linux `/proc/self/schedstat`, nanoseconds; the
/// simulator is single-threaded). On a shared machine it is steadier than wall time.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("long_horizon: {e}");
            std::process::exit(2);
        }
    };
    let mut ok = true;
    if o.byzantine.is_empty() {
        ok = run(&o, None);
    }
    for kind in &o.byzantine {
        println!("-- one Byzantine replica: {kind}");
        ok &= run(&o, Some(*kind));
    }
    if !ok {
        std::process::exit(1);
    }
}

/// One run; false when a checker failed.
#[allow(clippy::disallowed_methods)]
fn run(o: &Opts, byzantine: Option<ByzantineKind>) -> bool {
    let mut cfg = SimConfig {
        seed: o.seed,
        ledger: LedgerKind::Demo,
        components: LedgerKind::Demo.default_components(),
        tick_period_ms: 1_000,
        clients: o.clients,
        request_interval_ms: (1_000.0 / o.rate).round() as u64,
        signatures: o.signatures,
        duration_ms: o.simulated_ms,
        liveness_ms: 30_000,
        // About 0.8 events per simulated ms at this load; the default bound is for short runs.
        max_events: o.simulated_ms.saturating_mul(4).max(50_000_000),
        ..SimConfig::default()
    };
    if let Some(kind) = byzantine {
        cfg.faults.byzantine = 1;
        cfg.faults.byzantine_kind = kind;
    }
    let batch_delay = i64::try_from(o.batch_delay_ms).unwrap_or(i64::MAX);
    let sim = match Cluster::from_config(cfg).build_with(move |c| c.batch_delay_ms = batch_delay) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("long_horizon: bad configuration: {e}");
            return false;
        }
    };
    // The driver's one real-clock read pair.
    let t0 = Instant::now();
    let cpu0 = cpu_seconds();
    let out = sim.run();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let simulated_s = out.end_ms as f64 / 1_000.0;
    let ratio = simulated_s / wall.max(1e-9);
    let n0 = out.nodes.first();
    let batches = n0.map_or(0, |n| n.batches_executed);
    let requests = n0.map_or(0, |n| n.requests_executed);
    let ticks = n0.map_or(0, |n| n.ticks_executed);
    println!("{}", out.replay_command());
    println!(
        "long horizon: {simulated_s:.0} s simulated in {wall:.1} s wall = {ratio:.0}x real time \
         (wall time: the machine may be shared; CPU time below is the comparable figure)"
    );
    if let Some(cpu) = cpu {
        let cpu_ratio = simulated_s / cpu.max(1e-9);
        println!(
            "  CPU time {cpu:.1} s = {cpu_ratio:.0}x real time per CPU second; a month would take \
             {:.0} CPU s",
            MONTH_MS as f64 / 1_000.0 / cpu_ratio.max(1e-9)
        );
        match target(o, byzantine) {
            Some(t) => println!(
                "  target (issue 28) {}: needs >= {:.0}x per CPU second, this run {cpu_ratio:.0}x: {}",
                t.what,
                t.ratio,
                if cpu_ratio >= t.ratio {
                    "MET"
                } else {
                    "NOT MET"
                }
            ),
            None => println!("  (no issue-28 target has this workload)"),
        }
    }
    println!(
        "  replica 0: {batches} batches, {requests} requests ({ticks} ticks), mean batch {:.2}; \
         {} events, {} client requests, batch delay {} ms, {} signatures",
        requests as f64 / batches.max(1) as f64,
        out.stats.events,
        out.stats.client_requests,
        o.batch_delay_ms,
        o.signatures
    );
    let hash: String = out.trace_hash.iter().map(|b| format!("{b:02x}")).collect();
    println!("  trace hash {hash}");
    if out.ok() {
        println!("  all checkers held");
        true
    } else {
        println!("  CHECKER VIOLATIONS: {:?}", out.violations);
        false
    }
}
