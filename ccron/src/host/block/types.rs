//! The vocabulary of a block: what an engine hands [`BlockHost`] (a [`Block`] of [`Tx`]s) and
//! what it gets back ([`BlockOutcome`], [`TxResult`], [`RequestRefusal`], [`HostError`]).

#[cfg(doc)]
use super::BlockHost;
use crate::PagesError;
use crate::host::app::{AppError, ClientId, Digest32, FireNote, Millis};
use crate::host::requests::DuplicateRequest;
#[cfg(doc)]
use crate::host::requests::ExecutedRequests;
use crate::host::ticks::{TickRejection, ValidatorId};

/// One transaction of a committed block, as the engine decoded and authenticated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tx {
    /// A tick of `component`; `sender` is the validator whose tick sender signed it (`None`:
    /// the signer is not a validator's tick sender; the tick is refused). `number` is the
    /// sender's tick number (increasing per sender and component): a number not above the last
    /// one ordered for that sender and component is a replay and is skipped.
    Tick {
        /// The component to evaluate.
        component: u32,
        /// The authenticated sender.
        sender: Option<ValidatorId>,
        /// The sender's tick number.
        number: u64,
    },
    /// A client request: `payload` from the authenticated `client`, its request number
    /// `number` (each `(client, number)` executes at most once, [`ExecutedRequests`]).
    Request {
        /// The requester.
        client: ClientId,
        /// The client's request number.
        number: u64,
        /// The request bytes (untrusted: the application must not panic on any).
        payload: Vec<u8>,
    },
}

/// A committed block (or batch) as ccron sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Height (Tendermint) or sequence number (PBFT): strictly increasing.
    pub height: u64,
    /// The block's agreed time (`None` when the engine runs without a time service), computed
    /// by the engine with [`crate::host::time::TimeRule::agreed_from`].
    pub agreed_time_ms: Option<Millis>,
    /// The ordered transactions.
    pub txs: Vec<Tx>,
}

/// Why an ordered request was refused without running (a replicated outcome: every validator
/// refuses the same requests; the request counts as executed and its client gets the refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestRefusal {
    /// Running the request could make the snapshot larger than the host's state limit, which
    /// would make restart and state transfer impossible ([`BlockHost::with_state_limit`]).
    #[error("state full: projected snapshot of {projected} bytes exceeds the limit of {limit}")]
    StateFull {
        /// The projected snapshot size after the request.
        projected: u64,
        /// The limit.
        limit: u64,
    },
}

/// The reply bytes engines send for [`RequestRefusal::StateFull`].
pub const STATE_FULL_REPLY: &[u8] = b"ccron:state-full";

/// What one transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxResult {
    /// A client request's result (to send back to the client).
    Reply(Vec<u8>),
    /// A request whose `(client, number)` already executed (or may have): not run, no reply
    /// (the client got one the first time), counted.
    Duplicate(DuplicateRequest),
    /// A request refused without running (its number is consumed; see [`RequestRefusal`]).
    Refused(RequestRefusal),
    /// A tick that was evaluated.
    TickEvaluated,
    /// A tick refused by the gate (not a validator, unknown component, replayed number,
    /// coalesced): counted, nothing ran.
    TickSkipped(TickRejection),
    /// A tick the application refused (e.g. a component without a table); the block goes on.
    TickFailed(AppError),
}

/// The outcome of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockOutcome {
    /// The block's height.
    pub height: u64,
    /// One result per transaction, in block order.
    pub results: Vec<TxResult>,
    /// The cron actions the block's ticks ran, in order (observation, not replicated state).
    pub fires: Vec<FireNote>,
    /// [`BlockHost::digest`] after the block.
    pub digest: Digest32,
}

/// Errors of [`BlockHost`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The application stopped (fail-stop) on a fatal error; nothing executes any more. The
    /// engine must stop this node loudly (and may restore it from a snapshot).
    #[error("halted: {0}")]
    Halted(AppError),
    /// A block at or below the last executed height.
    #[error("block {got} after block {last}: heights must increase")]
    OutOfOrder {
        /// Last executed height.
        last: u64,
        /// The block's height.
        got: u64,
    },
    /// A block whose agreed time is below the previous block's (the engine's time rule is
    /// monotonic, so this is an engine bug).
    #[error("agreed time {got} ms after {previous} ms")]
    TimeWentBack {
        /// Previous agreed time.
        previous: Millis,
        /// The block's.
        got: Millis,
    },
    /// A snapshot that does not decode or does not fit.
    #[error("bad snapshot: {0}")]
    BadSnapshot(String),
    /// The reserved pages refused an operation.
    #[error("pages: {0}")]
    Pages(#[from] PagesError),
}
