//! Build 2 of the upgrade example's ledger (handler `remind-v2`, migration `v2`) as a Malachite
//! node binary: what the localnet's supervisor restarts a node on when build 1 stops at the
//! plan (`localnet --upgrade-binary`).

use std::process::ExitCode;
use std::sync::Arc;

use upgrade_node::{Build, ledger, load_request, plan_at};

fn main() -> ExitCode {
    let at = plan_at();
    ccron_malachite::binary(|_spec| Ok(ledger(Build::V2)))
        .load(move |_| {
            Some(Arc::new(move |_client, k| load_request(k, at)) as ccron_node::load::LoadPayload)
        })
        .main()
}
