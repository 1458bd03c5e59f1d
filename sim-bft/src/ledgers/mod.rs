//! The example ledgers: [`Application`]s built on the execution boundary, kept apart from the
//! engine.
//!
//! The replica and the simulator core depend only on [`crate::app`]; everything here is built on
//! top of it:
//!
//! - [`cron_ledger`]: [`CronLedger`], a state `S` plus a `ccron::CronTableRegistry<S>` evaluated
//!   on every tick, and optionally a schedule book, so a ledger's cron actions change the ledger's
//!   own state.
//! - [`scheduler`]: [`LedgerScheduler`], the schedule-book part of a [`CronLedger`] (schedules as
//!   replicated data, with their outbox, in the book's own reserved pages).
//! - [`kv`]: [`KvLedger`], a key-value ledger whose digest covers its whole state, and its
//!   request payload [`KvOp`].
//! - [`tick_counter`]: [`TickCounter`], a [`crate::app::TickExecutor`] recording every tick in
//!   the reserved pages (so that checkpoints and state transfer visibly carry pages).
//! - [`demo`]: the demo ledger with ccron tables (`--ledger demo`, the top-level examples).
//! - [`orders`]: [`orders::ScheduledLedger`], the orders demo (`--ledger orders`).
//!
//! [`Application`]: crate::app::Application

pub mod cron_ledger;
pub mod demo;
pub mod kv;
pub mod orders;
pub mod scheduler;
pub mod tick_counter;

pub use cron_ledger::CronLedger;
pub use kv::{KvLedger, KvOp, kv_result};
pub use scheduler::{BookConfig, BookConfigError, LedgerScheduler};
pub use tick_counter::{TickCounter, TickRecord};
