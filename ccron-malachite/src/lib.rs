//! ccron on a real BFT engine: an adapter to Malachite (the Rust Tendermint, `arc-malachitebft-*`
//! pinned `=0.8.2`). Everything engine-free (requests, mempool, results, HTTP API, block log,
//! snapshots, status, tick forwarding, localnet) is `ccron-node`'s; this crate is the engine's
//! context and its loop:
//!
//! - [`context`]: the engine's [`Context`](malachitebft_core_types::Context): heights, ed25519
//!   keys, the node's block as the value, votes with signed clock samples as vote extensions,
//!   proposal parts, one borsh codec for network, WAL and sync; [`commit`]: the commit record the
//!   node stores with each block.
//! - [`state`]: the adapter's state (the node's [`ccron_node::NodeCore`], proposal parts), one
//!   method per engine request; [`stream`]: publishing parts.
//! - [`guard`]: the engine's signer and the adapter's part signing behind the validator's
//!   signing guard ([`ccron_node::signguard`]): never a second message for a signed
//!   `(height, round)`.
//! - [`node`]: one validator process: engine configuration and start, the app-message loop;
//!   [`byzantine`]: the node's strategy at its seams (honest, or a Byzantine validator's).
//! - [`reputation`]: who proposes round 0 (a validator whose round 0 failed is skipped for a
//!   bounded number of heights), from the decided blocks only; [`round0`]: round 0's
//!   timeouts adapted to the proposal arrivals this node observed (a cheap failed round 0).
//! - [`cli`]: a node binary for any ledger in one call.

pub mod byzantine;
pub mod commit;
pub mod context;
pub mod guard;
pub mod node;
pub mod reputation;
pub mod round0;
pub mod state;
pub mod stream;

use std::process::ExitCode;
use std::sync::Arc;

use ccron::host::Application;
pub use ccron_node::LedgerSpec;
use ccron_node::cli::NodeBinary;

/// The engine's name in reports.
pub const ENGINE: &str = "malachite 0.8.2";

/// A node binary running `ledger` on Malachite: `init`, `node` and `localnet` subcommands
/// (`ccron_node::cli`). The whole `main` of a team's own binary:
///
/// ```ignore
/// fn main() -> std::process::ExitCode {
///     ccron_malachite::cli(|_spec| my_ledger())
/// }
/// ```
///
/// `ledger` must build the same application on every node and at every start (tables,
/// handlers, configuration); the genesis records its setup digest and a node whose build
/// differs refuses to start.
pub fn cli<A: Application>(ledger: impl Fn(&LedgerSpec) -> A + Send + Sync + 'static) -> ExitCode {
    binary(move |spec| Ok(ledger(spec))).main()
}

/// The [`NodeBinary`] behind [`cli`], for binaries with several named ledgers (`factory` gets
/// the genesis' ledger name) or a localnet load ([`NodeBinary::load`]).
pub fn binary<A: Application>(
    factory: impl Fn(&LedgerSpec) -> Result<A, String> + Send + Sync + 'static,
) -> NodeBinary<A> {
    let name = std::env::args()
        .next()
        .and_then(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "node".into());
    NodeBinary::new(&name, ENGINE, Arc::new(node::run), factory)
}
