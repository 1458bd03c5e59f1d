//! A ledger that prunes old entries every minute, on a simulated 7-replica PBFT cluster with one
//! replica crashing (and restarting from its disk) and one Byzantine replica flooding ticks.
//!
//! Every replica registers the same cron table (component 1: a periodic action every minute of
//! agreed time deleting entries written more than 2 minutes earlier) and starts its
//! TicksGenerator; ticks go through consensus with the agreed time, and the prune runs inside
//! the ledger's execution. The example prints each replica's fires and exits non-zero if the
//! honest replicas disagree or a checker failed.
//!
//! Run: `cargo run --release --example prune_ledger`

use std::process::ExitCode;

use sim_bft::ledgers::demo::{DemoRun, DemoTables, PRUNE_COMPONENT};
use sim_bft::sim::{ByzantineKind, FaultConfig, SimConfig};

const MINUTE_MS: i64 = 60_000;

fn main() -> ExitCode {
    ccron_suite::init_example_tracing();
    let run = DemoRun {
        tables: DemoTables {
            prune_every_ms: Some(MINUTE_MS),
            retain_ms: 2 * MINUTE_MS,
            contract_every_ms: None,
        },
        config: SimConfig {
            seed: 7,
            replicas: 7,
            duration_ms: 8 * 60_000,
            liveness_ms: 2 * 60_000,
            tick_period_ms: 10_000,
            clients: 2,
            request_interval_ms: 2_000,
            faults: FaultConfig {
                crashes: 1,
                byzantine: 1,
                byzantine_kind: ByzantineKind::TickFlood,
                pinned_byzantine: vec![6],
                max_clock_skew_ms: 100,
                drop_rate: 0.01,
                ..FaultConfig::default()
            },
            ..SimConfig::default()
        },
    };
    let outcome = match run.run() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("prune_ledger: {e}");
            return ExitCode::from(2);
        }
    };
    println!("prune every minute, keep 2 minutes; 7 replicas, one crash, replica 6 floods ticks");
    println!("  id  role       last seq  prunes  pruned  live entries  fires (component/position)");
    for r in outcome.replicas.iter().flatten() {
        println!(
            "  {:>2}  {:<9}  {:>8}  {:>6}  {:>6}  {:>12}  {:?}",
            r.id,
            if r.honest { "honest" } else { "byzantine" },
            r.last_seq,
            r.ledger.prunes,
            r.ledger.pruned,
            r.ledger.entries(),
            r.fires
        );
    }
    ccron_suite::report_agreement(&outcome, PRUNE_COMPONENT, "prunes")
}
