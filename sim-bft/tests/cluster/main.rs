//! The simulated cluster's tests, one binary: seeded runs of the PBFT cluster (and the toy node)
//! with faults, Byzantine kinds, signatures, state transfer, scheduling and the timeline, every
//! checker on. `cargo test -p sim-bft --test cluster MODULE::` runs one module.

#[path = "../replica_support/mod.rs"]
mod replica_support;

mod cluster;
mod host_equivalence;
mod loss_liveness;
mod regressions;
mod sched_cluster;
mod signatures;
mod state_transfer_events;
mod timeline;
mod toy;
