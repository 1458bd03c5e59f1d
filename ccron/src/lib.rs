//! ccron: deterministic, Byzantine-fault-tolerant scheduling inside replicated state machines.
//!
//! A replicated ledger links ccron, registers one cron table per component identically on every
//! replica, and hands it every committed tick. Because ticks are ordered by consensus and carry
//! the agreed time, every replica runs exactly the same actions at exactly the same point of the
//! ordered log.
//!
//! The crate is pure: it never reads a clock, never does I/O and keeps no process-wide state.
//! Its only thread lives in the TicksGenerator driver.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod cron;
pub mod outbox;
pub mod pages;
pub mod tick;
pub mod ticks;

pub use pages::{MemPages, PageId, PagesError, ReservedPages};
pub use tick::{ComponentId, Tick, TimeMs};
