//! Host glue: everything engine-independent between "a committed block" and ccron's tables.
//!
//! A ledger runs ccron inside some BFT engine (sim-bft's PBFT replicas, a Tendermint engine such
//! as Malachite, ...). The engine orders transactions and agrees on time; this module is the
//! rest, written once so every engine calls the same code:
//!
//! - [`app`]: the execution boundary, [`Application`] (`execute`, `on_tick`, `digest`,
//!   `snapshot`/`restore`, `reload`), its error type [`AppError`] and [`ExecContext`].
//! - [`ticks`]: tick admission: [`TickAuthority`] (only validators tick), [`TickSenders`] (F+1
//!   rotation), [`TickCoalescer`] (one evaluated tick per sender, component and period: the
//!   flood bound).
//! - [`time`]: the agreed-time rule ([`TimeRule`]: median of verified samples, monotonic,
//!   bounded).
//! - [`cron_ledger`], [`scheduler`]: the composition a ledger runs, [`CronLedger`] (state +
//!   cron tables + optional schedule book with its outbox, as one [`Application`]) and
//!   [`LedgerScheduler`] (the book, its outbox and their page layout), generic over the
//!   [`ReservedPages`](crate::ReservedPages) store of the book's pages; [`effects`]: what a
//!   ledger state's own request code may do beyond its state ([`Effects`]: emit into the
//!   ledger's one outbox, change the book in the same request, all or nothing).
//! - [`block`]: the block-driven entry point, [`BlockHost::execute_block`]: a committed block
//!   (height, agreed time, ordered ticks and requests) in, results, fires and digest out.
//! - [`requests`]: exactly-once client requests, [`ExecutedRequests`] (each `(client, request
//!   number)` executes at most once, however often a block carries it).
//! - [`validate`]: block validity ([`BlockHost::validate`]): what every validator re-checks
//!   before voting for a proposed block, signatures behind the [`Verify`] trait.
//! - [`wire`]: the canonical byte encoding of snapshots, payloads and digested values.
//!
//! See `docs/host.md` for how an engine links it.

pub mod app;
pub mod block;
pub mod cron_ledger;
mod digest_cache;
pub mod effects;
pub mod requests;
pub mod scheduler;
#[cfg(test)]
mod snapshot_migration;
pub mod ticks;
pub mod time;
pub mod validate;
pub mod wire;

pub use app::{
    AppError, Application, ClientId, Digest32, ExecContext, FireNote, Millis, TickExecutor,
    WithTicks,
};
pub use block::{
    Block, BlockHost, BlockOutcome, HOST_SNAPSHOT_VERSION, HostCounters, HostError,
    REQUEST_OVERHEAD_BYTES, RequestRefusal, STATE_FULL_REPLY, StateBudget, TickGate, Tx, TxResult,
    replay,
};
pub use cron_ledger::CronLedger;
pub use effects::Effects;
pub use requests::{
    AHEAD_WINDOW, CLOCK_SLACK_US, DEFAULT_MAX_CLIENTS, DuplicateRequest, EXECUTED_REQUESTS_LAYOUT,
    ExecutedRequests, REQUEST_WINDOW,
};
pub use scheduler::{BookConfig, LedgerScheduler};
pub use ticks::{
    TickAuthority, TickCoalescer, TickPool, TickPoolCounters, TickRejection, TickSenders,
    ValidatorId, period_index,
};
pub use time::{TimeError, TimeEvidence, TimeRule, two_thirds_quorum};
pub use validate::{
    BlockLimits, Invalid, Proposal, ProposalTime, RequestClaim, SampleClaim, Signed, TickClaim,
    Verify,
};
