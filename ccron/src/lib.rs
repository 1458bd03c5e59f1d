//! ccron: deterministic, Byzantine-fault-tolerant scheduling inside replicated state machines.
//!
//! A replicated ledger links ccron, registers one cron table per component identically on every
//! replica, and hands it every committed tick. Because ticks are ordered by consensus and carry
//! the agreed time, every replica runs exactly the same actions at exactly the same point of the
//! ordered log.
//!
//! The crate is pure: it never reads a clock, never does I/O and keeps no process-wide state.
//! Its only thread lives in the TicksGenerator driver, its only file access in [`FilePages`]
//! (a host-side store).
//!
//! # Quickstart
//!
//! Register a table, feed it committed ticks, see what fired. The table is generic over the
//! ledger's state (here a plain counter and a log); actions get `&mut` access to it, rules `&`.
//!
//! ```
//! use ccron::{CronEntry, CronTable, CronTableRegistry, MemPages, PageAllocator, Periodic, Tick};
//!
//! #[derive(Default)]
//! struct Ledger {
//!     pruned: u32,
//!     log: Vec<String>,
//! }
//!
//! // Reserved pages: the host persists, checkpoints and state-transfers them.
//! let mut pages = MemPages::new(4096, 16);
//! let mut alloc = PageAllocator::new(0, 16);
//!
//! // Application setup, identical on every replica.
//! const PRUNER: u32 = 1;
//! let mut table = CronTable::with_persistence(PRUNER, alloc.allocate(2).unwrap(), 100);
//! // A periodic action: at once, then every 2 s of agreed time, drift-free.
//! table
//!     .add(CronEntry::<Ledger>::periodic(0, Periodic::every_ms(2_000).unwrap(), |ctx| {
//!         ctx.state.pruned += 1;
//!     }))
//!     .unwrap();
//! // A user rule reading the state: log every tick after the second prune.
//! table
//!     .add(CronEntry::<Ledger>::new(
//!         1,
//!         |ctx| ctx.state.pruned >= 2,
//!         |ctx| {
//!             let line = format!("seq {}", ctx.tick.bft_sequence_num);
//!             ctx.state.log.push(line);
//!         },
//!     ))
//!     .unwrap();
//! let mut registry = CronTableRegistry::new();
//! registry.register(table).unwrap();
//! // After a restart or a state transfer the host calls this; on a fresh store it reads nothing.
//! registry.reload(&pages).unwrap();
//!
//! // Execution of committed ticks: sequence number and agreed time come from consensus.
//! let mut ledger = Ledger::default();
//! let mut fired = Vec::new();
//! for (seq, time_ms) in [(1, 1_000), (2, 2_000), (3, 3_000), (4, 3_000), (5, 5_500)] {
//!     let tick = Tick::new(PRUNER, seq, Some(time_ms));
//!     let outcome = registry.evaluate(&tick, &mut ledger, &mut pages).unwrap();
//!     fired.push(outcome.fired.iter().map(|f| f.position).collect::<Vec<_>>());
//! }
//! // 1 s: first run at once; 3 s: on the grid; 3 s again (same batch): nothing; 5.5 s: the
//! // 5 s occurrence, late but on the grid (next due 7 s).
//! assert_eq!(fired, [vec![0], vec![], vec![0, 1], vec![1], vec![0, 1]]);
//! assert_eq!(ledger.pruned, 3);
//! assert_eq!(ledger.log, ["seq 3", "seq 4", "seq 5"]);
//! assert_eq!(registry.get(PRUNER).unwrap().next_due_ms(0), Some(7_000));
//! ```
//!
//! See `docs/user-guide.md` for how a ledger wires this in (reload after restart and state
//! transfer, page writes only inside execution, idempotence under repeated ticks).
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod authz;
pub mod codec;
pub mod cron;
pub mod determinism;
pub mod due;
pub mod entry;
pub mod file_pages;
pub mod host;
mod index;
pub mod outbox;
pub mod pages;
pub mod periodic;
mod record_log;
#[cfg(feature = "redb")]
pub mod redb_pages;
pub mod registry;
pub mod schedule;
pub mod sha256;
pub mod sig;
pub mod state_hash;
pub mod table;
mod table_store;
pub mod tick;
pub mod ticks;

pub use authz::{ClientId, Policy, Principal, Quota, QuotaKind};
pub use codec::CodecError;
pub use due::{Due, EverySeq, Schedule};
pub use entry::{ActionCtx, CronEntry, Rule, RuleCtx, TableChange};
pub use file_pages::FilePages;
pub use pages::{
    DirEntryProblem, MemPages, PageAllocator, PageId, PageRange, PagesError, ReservedPages,
};
pub use periodic::{ExcludingPeriodic, MisfirePolicy, Periodic, PeriodicError};
pub use registry::{CronTableRegistry, RegistryError};
pub use table::{CronTable, Fired, PersistStats, Persistence, TableError, TickOutcome};
pub use tick::{ComponentId, Tick, TimeMs};
