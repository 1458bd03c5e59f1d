//! The escrow ledger's node on Malachite: `init`, `node` and `localnet` for this ledger type.
//!
//! `cargo run --release -p escrow-node -- localnet --nodes 4 --duration 40s --json report.json`

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    ccron_malachite::binary(|_spec| Ok(escrow_node::ledger()))
        .load(|_| Some(Arc::new(escrow_node::demo_request) as ccron_node::load::LoadPayload))
        .main()
}
