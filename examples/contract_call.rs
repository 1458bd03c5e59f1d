//! Calls a contract every 5 minutes, on a simulated 7-replica PBFT cluster with one replica
//! crashing (and restarting from its disk) and one Byzantine replica whose clock lies by two
//! minutes.
//!
//! Every replica registers the same cron table (component 2: a periodic action every 5 minutes
//! of agreed time calling the ledger's contract, which accrues 1% on a balance). The robust time
//! service keeps the lying clock from moving agreed time, so the calls stay on their 5-minute
//! grid. The example prints each replica's fires and exits non-zero if the honest replicas
//! disagree or a checker failed.
//!
//! Run: `cargo run --release --example contract_call`

use std::process::ExitCode;

use sim_bft::ledgers::demo::{CONTRACT_COMPONENT, DemoRun, DemoTables};
use sim_bft::sim::{ByzantineKind, FaultConfig, SimConfig};

const MINUTE_MS: i64 = 60_000;

fn main() -> ExitCode {
    ccron_suite::init_example_tracing();
    let run = DemoRun {
        tables: DemoTables {
            prune_every_ms: None,
            retain_ms: MINUTE_MS,
            contract_every_ms: Some(5 * MINUTE_MS),
        },
        config: SimConfig {
            seed: 5,
            replicas: 7,
            duration_ms: 25 * 60_000,
            liveness_ms: 5 * 60_000,
            tick_period_ms: 15_000,
            clients: 0,
            request_interval_ms: 0,
            faults: FaultConfig {
                crashes: 1,
                byzantine: 1,
                byzantine_kind: ByzantineKind::LyingTime,
                pinned_byzantine: vec![3],
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
            eprintln!("contract_call: {e}");
            return ExitCode::from(2);
        }
    };
    println!("call the contract every 5 minutes; 7 replicas, one crash, replica 3's clock lies");
    println!("  id  role       last seq  calls  balance  fires (component/position)");
    for r in outcome.replicas.iter().flatten() {
        println!(
            "  {:>2}  {:<9}  {:>8}  {:>5}  {:>7}  {:?}",
            r.id,
            if r.honest { "honest" } else { "byzantine" },
            r.last_seq,
            r.ledger.contract_calls,
            r.ledger.balance,
            r.fires
        );
    }
    ccron_suite::report_agreement(&outcome, CONTRACT_COMPONENT, "calls")
}
