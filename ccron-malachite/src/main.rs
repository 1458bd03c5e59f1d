//! `ccron-malachite`: the project's node binary on Malachite with its example ledgers, chosen by
//! `--ledger` at `init` / `localnet` (recorded in the genesis): `demo` (prune and contract call)
//! and `orders` (client requests create order expiries; the localnet puts an order load on it).
//! A team's own binary is the one-line `ccron_malachite::cli(|_| my_ledger())` (see
//! `examples/escrow_node.rs`).

use std::process::ExitCode;
use std::sync::Arc;

use ccron::host::Application;
use ccron::schedule::ScheduleRequest;
use ccron_ledgers::demo::{DemoTables, demo_ledger};
use ccron_ledgers::orders::{SchedAppConfig, ScheduledLedger};

/// The `orders` ledger's configuration on the node (puts place orders, as in sim-bft's
/// `--ledger orders`).
fn orders_config() -> SchedAppConfig {
    SchedAppConfig {
        puts_as_orders: true,
        ..SchedAppConfig::default()
    }
}

/// The example ledger `name`.
fn ledger(name: &str) -> Result<Box<dyn Application>, String> {
    match name {
        "demo" => Ok(Box::new(
            demo_ledger(&DemoTables::default()).map_err(|e| e.to_string())?,
        )),
        "orders" => Ok(Box::new(ScheduledLedger::new(orders_config()))),
        other => Err(format!(
            "ledger '{other}' is not available in this binary (demo, orders)"
        )),
    }
}

/// The localnet's load on `orders`: request k places order `order-k`, expiring 3 s after
/// admission.
fn order(_client: ccron::host::ClientId, number: u64) -> Vec<u8> {
    let order = format!("order-{number}");
    ScheduledLedger::payload(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
        &order, 3_000,
    )))
    .unwrap_or_default()
}

fn main() -> ExitCode {
    ccron_malachite::binary(|spec| ledger(&spec.name))
        .default_ledger("demo")
        .load(|name| (name == "orders").then(|| Arc::new(order) as ccron_node::load::LoadPayload))
        .main()
}
