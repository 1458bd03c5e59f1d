//! sim-bft: a simulated Byzantine-fault-tolerant cluster to test ccron tables.
//!
//! Real protocol (PBFT-style normal case, checkpoints, view change, state transfer), real
//! signatures (ed25519), seeded faults, reproducible from one seed.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod app;
pub mod byzantine;
pub mod crypto;
pub mod ledgers;
pub mod node;
pub mod protocol;
pub mod replica;
pub mod report;
pub mod runtime;
pub mod sim;
pub mod timeline;

/// The Rust snippets of `docs/`, compiled (and run, unless marked `no_run`) as doctests of this
/// crate (`cargo test --doc -p sim-bft`), so that what the guides show keeps building.
#[cfg(doctest)]
pub mod doc_snippets {
    #[doc = include_str!("../../docs/user-guide.md")]
    pub struct UserGuide;
    #[doc = include_str!("../../docs/simulator.md")]
    pub struct SimulatorGuide;
    #[doc = include_str!("../../docs/cron-expressions.md")]
    pub struct CronExpressions;
}
