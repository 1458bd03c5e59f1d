//! A cron-expression entry on the simulated cluster: call a contract at `*/2 * * * *` (every even
//! minute, wall clock) on 4 PBFT replicas, with a crash and restart, 2% loss and 150 ms of clock
//! skew.
//!
//! Every replica registers the same cron table: component 2, position 0, a `CronEntry::cron`
//! whose next instant lives in the due index and the table's reserved pages (so a replica that
//! restarts from its disk or catches up by state transfer resumes the same calendar). Ticks carry
//! the agreed time; the entry fires once per reached instant. The example checks that every honest
//! replica fired the same number of times, that this equals the number of even minutes the agreed
//! time crossed (give or take the last one, which the liveness phase may or may not reach), and
//! exits non-zero otherwise or if a checker failed.
//!
//! Run: `cargo run --release --example cron_contract`

use std::process::ExitCode;

use ccron::cron::{CronSchedule, ZoneRules};
use ccron::{CronEntry, CronTable, CronTableRegistry, PageAllocator};
use sim_bft::ledgers::CronLedger;
use sim_bft::ledgers::demo::DemoLedger;
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{FaultConfig, TimeServiceMode};

/// The contract's component id (the ticks the replicas propose name it).
const CONTRACT: u32 = 2;
/// The cron expression: every even minute.
const EXPRESSION: &str = "*/2 * * * *";
/// Simulated time under faults, then time to converge.
const SAFETY_MS: u64 = 20 * 60_000;
const LIVENESS_MS: u64 = 2 * 60_000;

fn ledger() -> Result<CronLedger<DemoLedger>, String> {
    let schedule =
        CronSchedule::parse_in(EXPRESSION, ZoneRules::utc()).map_err(|e| e.to_string())?;
    // Page 0 holds the replica's agreed time (`ReplicaConfig::time_page`): tables start at 1.
    let mut alloc = PageAllocator::new(1, 8);
    let range = alloc.allocate(2).ok_or("no pages")?;
    let mut table = CronTable::with_persistence(CONTRACT, range, 16);
    table
        .add(CronEntry::<DemoLedger>::cron(0, schedule, |ctx| {
            ctx.state.contract_calls += 1;
        }))
        .map_err(|e| e.to_string())?;
    let mut registry = CronTableRegistry::new();
    registry.register(table).map_err(|e| e.to_string())?;
    Ok(CronLedger::new(DemoLedger::new(), registry))
}

fn main() -> ExitCode {
    ccron_suite::init_example_tracing();
    // Fail before the run if the table cannot be built.
    if let Err(e) = ledger() {
        eprintln!("cron_contract: {e}");
        return ExitCode::from(2);
    }
    let sim = Cluster::builder()
        .seed(11)
        .replicas(4)
        .time_service(TimeServiceMode::Robust)
        .duration_ms(SAFETY_MS, LIVENESS_MS)
        .clients(0, 0)
        .ticks(vec![CONTRACT], 5_000)
        .faults(FaultConfig {
            crashes: 1,
            drop_rate: 0.02,
            max_clock_skew_ms: 150,
            ..FaultConfig::default()
        })
        .build_with_app(
            |_| {},
            |_| match ledger() {
                Ok(l) => Box::new(l),
                // Checked above; the same construction cannot fail later.
                Err(e) => unreachable!("{e}"),
            },
        );
    let sim = match sim {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!("cron_contract: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = sim.run();
    println!("call a contract at '{EXPRESSION}' (UTC); 4 replicas, a crash, 2% loss, 150 ms skew");
    let mut calls = Vec::new();
    for n in &outcome.nodes {
        let fired = n.fires.values().sum::<u64>();
        println!(
            "  replica {} ({}): executed up to seq {}, {} ticks, {} contract calls",
            n.id,
            if n.honest { "honest" } else { "byzantine" },
            n.last_executed_seq,
            n.ticks_executed,
            fired
        );
        if n.honest {
            calls.push(fired);
        }
    }
    // The simulation starts at the epoch instant (a whole minute); the agreed time runs to
    // about SAFETY_MS + LIVENESS_MS: every even minute crossed fires once. The first instant is
    // the first even minute after the first tick's agreed time.
    let minutes = (SAFETY_MS + LIVENESS_MS) / 60_000;
    let expected_max = minutes / 2;
    let expected_min = expected_max.saturating_sub(2);
    println!("  replay: {}", outcome.replay_command());
    for v in &outcome.violations {
        println!("  VIOLATION: {v}");
    }
    let agree = calls.windows(2).all(|w| w[0] == w[1]);
    let in_range = calls
        .iter()
        .all(|c| (expected_min..=expected_max).contains(c));
    if outcome.ok() && outcome.honest_agree && agree && in_range {
        println!(
            "  honest replicas agree: {} calls each (expected {expected_min}..={expected_max})",
            calls.first().copied().unwrap_or(0)
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "  FAILED: checkers ok {}, digests agree {}, calls {calls:?} (expected {expected_min}..={expected_max})",
            outcome.ok(),
            outcome.honest_agree
        );
        ExitCode::from(1)
    }
}
