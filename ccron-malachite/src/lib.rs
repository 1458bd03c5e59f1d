//! ccron on a real BFT engine: an adapter to Malachite (the Rust Tendermint, `arc-malachitebft-*`
//! pinned `=0.8.2`).
//!
//! - [`context`]: the engine's [`Context`](malachitebft_core_types::Context): heights, ed25519
//!   keys, blocks, votes with signed clock samples as vote extensions, proposal parts, one borsh
//!   codec for network, WAL and sync.
//! - [`app`]: the pure application side: [`app::LedgerHost`] (decided blocks through
//!   `ccron::host::BlockHost` on `ccron-ledgers`' `demo` or `orders` ledger), the agreed time by
//!   `ccron::host::TimeRule`, and the block-validity rule every validator re-checks.
//! - [`request`]: signed client requests (format, bounds, signature); [`mempool`]: a node's
//!   bounded pool of them; [`api`]: the node's HTTP server (`POST /v1/requests`, `POST
//!   /v1/ticks`, `GET /v1/requests/{client}/{number}`) as one axum router; [`results`]: the
//!   bounded record of executed requests' results it serves; [`load`]: the localnet's order
//!   load generator (it reads the results back).
//! - [`store`]: the durable decided-block store (append-only, checksummed, fsync'ed; an offset
//!   index in memory, blocks read on demand).
//! - [`snapshot`]: durable, checksummed snapshots of the node's state every K heights; a restart
//!   restores the newest valid one and re-executes only the blocks above it.
//! - [`node`]: one validator process (engine + app loop + ccron's TicksGenerator thread).
//! - [`records`]: the node's JSON records on disk: the genesis and `status.json`.
//! - [`localnet`]: N processes on 127.0.0.1 with kill/restart, late join, a lying proposer, and a
//!   JSON report.

pub mod api;
pub mod app;
pub mod context;
pub mod load;
pub mod localnet;
pub mod mempool;
pub mod node;
pub mod records;
pub mod request;
pub mod results;
pub mod snapshot;
pub mod store;
