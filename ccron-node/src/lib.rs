//! The engine-free node of ccron: what every process-level engine adapter needs, written once.
//!
//! `ccron::host` is the kernel every engine drives (one executor, one exactly-once table, one
//! time rule, one digest). This crate is the process around it, independent of any consensus
//! engine:
//!
//! - [`types`], [`crypto`], [`request`]: addresses, signed ticks, clock samples, the block a node
//!   proposes, signed client requests, the validator signer and the verification rule;
//! - [`ledger`]: [`ledger::LedgerHost`], a node's [`ccron::host::BlockHost`] over any
//!   [`ccron::host::Application`], and the block validity rule;
//! - [`core`]: [`core::NodeCore`], the node itself (store, snapshots, mempool, tick pool, own
//!   ticks, results, status), which an engine's loop calls to build, judge and decide blocks;
//! - [`linelog`]: the node's bounded diagnostic logs (`digests.log`, `fires.log`);
//! - [`store`], [`snapshot`], [`records`]: the decided-block log (records of the engine's
//!   [`store::Commit`], pruned below the snapshots), durable snapshots, the genesis and status
//!   records; [`catchup`]: a node behind every peer's history rebuilt from a peer's snapshot,
//!   checked against the state digest a committed block carries;
//! - [`api`], [`forward`], [`mempool`], [`results`]: the HTTP API, own-tick forwarding with
//!   deadlines, the bounded pool of verified requests, the results clients read;
//! - [`proposals`]: the bounded book of undecided proposal parts an adapter admits into;
//! - [`signguard`]: the validator's signing state beside its key, refusing a second message
//!   for a `(height, round)` it signed (a wiped validator double-signing);
//! - [`hostile`], [`faults`]: Byzantine validators' kinds for the localnet and a junk-posting
//!   client; seeded process-level faults (SIGKILL + restart, SIGSTOP + SIGCONT, every node
//!   killed at once, clock jumps); [`netfault`]: network faults between the localnet's
//!   processes (a loopback proxy per link: delay, stalls, resets, partitions);
//! - [`read`], [`metrics`]: what a node publishes after every height for its schedule read
//!   endpoints and its Prometheus `/metrics`;
//! - [`localnet`], [`load`], [`cli`]: N processes on loopback with kills and restarts, a load
//!   client, and the `init` / `localnet` subcommands any node binary gets;
//! - [`upgrade`], [`supervise`]: a node stopping at a planned upgrade (its snapshot below the
//!   plan, `upgrade-info.json`, exit codes) and the localnet's supervisor restarting it on the
//!   new build.
//!
//! An adapter for an engine (Malachite today) adds its context (its value, vote, proposal and
//! signing types around these) and its loop; see `ccron-malachite`.

pub mod api;
pub mod catchup;
pub mod cli;
pub mod core;
pub mod crypto;
pub mod faults;
pub mod forward;
pub mod hostile;
pub mod ledger;
pub mod lie_reads;
pub mod linelog;
pub mod load;
pub mod localnet;
pub mod mempool;
pub mod metrics;
pub mod netfault;
pub mod proposals;
pub mod read;
pub mod records;
pub mod request;
pub mod results;
pub mod signguard;
pub mod slow_http;
pub mod snapshot;
pub mod store;
pub mod submit;
pub mod supervise;
#[cfg(test)]
mod testutil;
mod ticks;
pub mod types;
pub mod upgrade;

pub use crate::core::{Factory, LedgerSpec, NodeCore, NodeError, NodeOptions, ProposeError};
pub use crate::ledger::{LedgerHost, LedgerSetup};
pub use crate::store::{Commit, Decided, Part};
pub use crate::types::{Address, Block, CarriedSample, Hash32, TickTx, Validators};
