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

pub mod codec;
pub mod entry;
pub mod file_pages;
mod index;
pub mod pages;
pub mod periodic;
pub mod registry;
pub mod table;
pub mod tick;

pub use codec::CodecError;
pub use entry::{ActionCtx, CronEntry, Rule, RuleCtx, TableChange};
pub use file_pages::FilePages;
pub use pages::{MemPages, PageAllocator, PageId, PageRange, PagesError, ReservedPages};
pub use periodic::{MisfirePolicy, Periodic, PeriodicError};
pub use registry::{CronTableRegistry, RegistryError};
pub use table::{CronTable, Fired, Persistence, TableError, TickOutcome};
pub use tick::{ComponentId, Tick, TimeMs};
