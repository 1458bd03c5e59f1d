//! Build 1 of the upgrade example's ledger (handlers `remind` and `legacy`) as a Malachite node
//! binary: `init`, `node`, `localnet` (its load: the admin's plan, a `legacy` run, reminders).
//!
//! `cargo build -p upgrade-node && target/debug/upgrade-node-v1 localnet --nodes 4 --duration 40s
//! --tick-period-ms 200 --no-kill --upgrade-binary target/debug/upgrade-node-v2 --json report.json`

use std::process::ExitCode;
use std::sync::Arc;

use upgrade_node::{Build, ledger, load_request, plan_at};

fn main() -> ExitCode {
    let at = plan_at();
    ccron_malachite::binary(|_spec| Ok(ledger(Build::V1)))
        .load(move |_| {
            Some(Arc::new(move |_client, k| load_request(k, at)) as ccron_node::load::LoadPayload)
        })
        .main()
}
