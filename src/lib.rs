//! Shared pieces of the runnable examples and the cross-crate tests of the ccron workspace.
//!
//! The libraries live in `ccron/` (the scheduler a ledger links) and `sim-bft/` (the simulated
//! BFT cluster). This root package only owns `examples/` and `tests/`.

use std::process::ExitCode;

use sim_bft::ledgers::demo::DemoOutcome;

/// Logs to stderr, `error` and above unless `RUST_LOG` says otherwise (what every example does).
pub fn init_example_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Prints how many `what` (the actions of `component`) each honest replica ran up to the common
/// agreed time, every checker violation, and the verdict. Success when the honest replicas agree
/// on every batch and state digest, every checker held, and they all ran the same, non-zero
/// number of actions.
pub fn report_agreement(outcome: &DemoOutcome, component: u32, what: &str) -> ExitCode {
    let counts: Vec<usize> = outcome
        .replicas
        .iter()
        .flatten()
        .filter(|r| r.honest)
        .map(|r| outcome.actions_until_common(r, component))
        .collect();
    println!("  {what} up to the common agreed time, per honest replica: {counts:?}");
    for v in &outcome.violations {
        println!("  VIOLATION: {v}");
    }
    if outcome.agree() && counts.iter().all(|c| *c == counts[0] && *c > 0) {
        println!("  honest replicas agree");
        ExitCode::SUCCESS
    } else {
        println!("  honest replicas DISAGREE (or a replica is down)");
        ExitCode::from(1)
    }
}
