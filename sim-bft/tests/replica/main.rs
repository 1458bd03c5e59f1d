//! The replica's protocol tests, one binary: a PBFT replica (or a few wired by hand) under scripted
//! message sequences, faults and deadlines. One module per concern (normal case, view change,
//! retransmission, state transfer, time, ...); `cargo test -p sim-bft --test replica MODULE::`
//! runs one of them.

#[path = "../replica_support/mod.rs"]
mod replica_support;

mod campaign_liveness;
mod chaos;
mod deadlines;
mod fat_view_change;
mod faults;
mod future_flood;
mod normal;
mod perf;
mod reorder;
mod retransmit;
mod starvation;
mod state_transfer;
mod status_repeat;
mod time;
mod view_change_crash;
