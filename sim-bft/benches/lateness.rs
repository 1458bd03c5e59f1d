//! Lateness of due actions on the simulated cluster: agreed time of each run minus its due
//! instant, p50 / p99 / max, n = 4 with up to f = 1 faulty replica (a plain bench binary;
//! simulated milliseconds, not wall time).
//!
//! Run: `cargo bench -p sim-bft --bench lateness`
//!
//! Every replica runs the same cron table: one periodic action every [`ACTION_EVERY_MS`] on a
//! grid anchored at the start of the run, with component ticks every [`TICK_MS`]. A run records
//! `(due instant, agreed time)` in the replicated ledger; lateness is their difference, read from
//! an honest replica after the run.
//!
//! The target (docs/benchmarks-ticks.md) is `lateness p99 <= tick period + one commit
//! latency`. The commit latency is measured in the same run set, as the lateness when every
//! replica's tick timer is aligned on the action grid (a tick is generated at the due instant
//! itself, so the whole lateness is the time to order that tick); the main runs put each
//! replica's timer at a seeded phase in the tick period, as independent hosts would have.

use std::collections::BTreeMap;

use ccron::{ClientId, CronEntry, CronTable, CronTableRegistry, Periodic};
use sha2::{Digest, Sha256};
use sim_bft::app::{AppError, Application, ExecContext};
use sim_bft::crypto::Digest32;
use sim_bft::ledgers::CronLedger;
use sim_bft::node::Millis;
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, SimConfig};

/// Ticks of the action's component, every this many ms on every replica.
const TICK_MS: u64 = 1_000;
/// The periodic action's period.
const ACTION_EVERY_MS: i64 = 10_000;
/// Simulated time per run.
const RUN_MS: u64 = 3_600_000;
const COMPONENT: u32 = 1;

/// The ledger state: `(due, agreed)` of every run of the action, in execution order.
#[derive(Debug, Clone, Default)]
struct Runs(Vec<(i64, i64)>);

impl Application for Runs {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, _payload: &[u8]) -> Vec<u8> {
        Vec::new()
    }

    fn digest(&self) -> Digest32 {
        Sha256::digest(self.snapshot()).into()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.0
            .iter()
            .flat_map(|(d, a)| d.to_le_bytes().into_iter().chain(a.to_le_bytes()))
            .collect()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        if !snapshot.len().is_multiple_of(16) {
            return Err(AppError::BadSnapshot("length not a multiple of 16".into()));
        }
        let word = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            i64::from_le_bytes(a)
        };
        self.0 = snapshot
            .chunks_exact(16)
            .map(|c| (word(&c[..8]), word(&c[8..])))
            .collect();
        Ok(())
    }
}

fn ledger(start_ms: Millis) -> CronLedger<Runs> {
    let mut registry = CronTableRegistry::new();
    let range = ccron::PageRange::new(1, 4).unwrap_or_else(|| unreachable!("non-empty range"));
    let mut table = CronTable::with_persistence(COMPONENT, range, 4);
    let every = Periodic::every_ms(ACTION_EVERY_MS)
        .unwrap_or_else(|e| panic!("period: {e}"))
        .starting_at(start_ms);
    table
        .add(CronEntry::<Runs>::periodic(0, every, |ctx| {
            let due = ctx.due_ms().unwrap_or(i64::MIN);
            let agreed = ctx.tick.agreed_time_ms.unwrap_or(i64::MIN);
            ctx.state.0.push((due, agreed));
        }))
        .unwrap_or_else(|e| panic!("table: {e}"));
    registry
        .register(table)
        .unwrap_or_else(|e| panic!("registry: {e}"));
    CronLedger::new(Runs::default(), registry)
}

/// Lateness samples (ms) of one run, read from the first honest replica that is up.
fn lateness(label: &str, seed: u64, aligned: bool, faults: FaultConfig) -> Vec<i64> {
    let base = SimConfig::default();
    let start_ms = base.epoch_ms;
    let mut cfg = SimConfig {
        seed,
        replicas: 4,
        node_check_every: 0,
        clients: 0,
        request_interval_ms: 0,
        faults,
        duration_ms: RUN_MS,
        ..base
    };
    cfg.tick_spread_ms = aligned.then_some(0);
    let mut sim = Cluster::from_config(cfg)
        .tick_periods(BTreeMap::from([(COMPONENT, TICK_MS)]), true)
        .build_with_app(|_| {}, move |_| Box::new(ledger(start_ms)))
        .unwrap_or_else(|e| {
            eprintln!("bad configuration: {e}");
            std::process::exit(2);
        });
    if !sim.run_until(RUN_MS) || !sim.violations().is_empty() {
        eprintln!("warning ({label}): checker failed: {:?}", sim.violations());
    }
    let byzantine = sim.params().byzantine.clone();
    let runs = (0..4u32)
        .filter(|id| !byzantine.contains(id))
        .find_map(|id| {
            let snap = sim.node(id)?.replica()?.app().snapshot();
            let mut l = ledger(start_ms);
            l.restore(&snap).ok()?;
            Some(l.state().0.clone())
        })
        .unwrap_or_default();
    runs.iter().map(|(due, agreed)| agreed - due).collect()
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Prints one row and returns its p99.
fn row(label: &str, mut samples: Vec<i64>) -> i64 {
    samples.sort_unstable();
    let expected = RUN_MS as i64 / ACTION_EVERY_MS;
    let p99 = percentile(&samples, 0.99);
    println!(
        "  {label:<34} runs {:>4}/{expected:<4} p50 {:>5} ms  p99 {:>5} ms  max {:>6} ms",
        samples.len(),
        percentile(&samples, 0.5),
        p99,
        samples.last().copied().unwrap_or(0),
    );
    p99
}

fn main() {
    println!(
        "lateness of a periodic action (every {} s, ticks every {} s, n = 4, {} min simulated)",
        ACTION_EVERY_MS / 1_000,
        TICK_MS / 1_000,
        RUN_MS / 60_000
    );
    let skew = |f: FaultConfig| FaultConfig {
        max_clock_skew_ms: 20,
        ..f
    };
    // Commit latency: tick timers aligned on the grid, so lateness = time to order the tick.
    let commit = row(
        "commit latency (aligned ticks)",
        lateness("aligned", 11, true, skew(FaultConfig::default())),
    );
    let cases: Vec<(&str, FaultConfig)> = vec![
        ("no faults", FaultConfig::default()),
        (
            "one replica crashes and restarts",
            FaultConfig {
                crashes: 1,
                ..FaultConfig::default()
            },
        ),
        (
            "one silent Byzantine replica",
            FaultConfig {
                byzantine: 1,
                byzantine_kind: ByzantineKind::Silent,
                ..FaultConfig::default()
            },
        ),
        (
            "one Byzantine replica lying on time",
            FaultConfig {
                byzantine: 1,
                byzantine_kind: ByzantineKind::LyingTime,
                ..FaultConfig::default()
            },
        ),
        (
            "2% loss, 5% reordering",
            FaultConfig {
                drop_rate: 0.02,
                reorder_rate: 0.05,
                ..FaultConfig::default()
            },
        ),
    ];
    let bound = TICK_MS as i64 + commit;
    let mut worst = 0;
    for (i, (label, faults)) in cases.into_iter().enumerate() {
        worst = worst.max(row(
            label,
            lateness(label, 100 + i as u64, false, skew(faults)),
        ));
    }
    println!(
        "target: p99 <= tick period + one commit latency = {TICK_MS} + {commit} = {bound} ms; \
         worst p99 {worst} ms: {}",
        if worst <= bound { "met" } else { "NOT met" }
    );
}
