//! The example ledgers: [`Application`]s built on ccron's execution boundary
//! ([`ccron::host::app`]), engine-independent, so sim-bft's simulated cluster and a real
//! engine's adapter run them unchanged (sim-bft re-exports them as `sim_bft::ledgers::*`).
//!
//! Depends only on ccron:
//!
//! - [`cron_ledger`], [`scheduler`]: the composition the ledgers are built on, [`CronLedger`]
//!   and [`LedgerScheduler`], re-exported from [`ccron::host`] (where they live, so that every
//!   engine runs the same code).
//! - [`kv`]: [`KvLedger`], a key-value ledger whose digest covers its whole state, and its
//!   request payload [`KvOp`].
//! - [`multiset`]: [`multiset::MultisetSum`], the additive multiset hash the key-value and demo
//!   ledgers keep their digests with (a block costs O(its changes)), and why it is sound here.
//! - [`tick_counter`]: [`TickCounter`], a [`ccron::host::TickExecutor`] recording every tick in
//!   the reserved pages (so that checkpoints and state transfer visibly carry pages).
//! - [`demo`]: the demo ledger with ccron tables (sim-bft's `--ledger demo`, the top-level
//!   examples).
//! - [`orders`]: [`orders::ScheduledLedger`], the orders demo (sim-bft's `--ledger orders`).
//!
//! [`Application`]: ccron::host::Application

pub mod demo;
pub mod kv;
pub mod multiset;
pub mod orders;
pub mod tick_counter;

pub use ccron::host::{cron_ledger, scheduler};

pub use ccron::host::{BookConfig, CronLedger, LedgerScheduler};
pub use kv::{KeySpace, KvLedger, KvOp, kv_result};
pub use tick_counter::{TickCounter, TickRecord};
