//! Idempotent external effects: the replicated outbox and its consumer outside consensus.
//!
//! * [`OccurrenceId`]: the deterministic name of one firing of one action.
//! * [`Outbox`]: replicated state; actions append [`OutboxRecord`]s, which get dense indices.
//! * [`Consumer`]: a pure state machine delivering records at least once, with bounded work in
//!   flight, deterministic retries and dead letters; [`PersistentConsumer`] adds its durable
//!   progress ([`ProgressStore`]) and dead letters ([`DeadLetterSink`]).
//! * [`SeenSet`]: the worker's deduplication by id, turning at-least-once into effectively once.
//!
//! See `docs/outbox.md` for the model and how a ledger uses it.

mod codec;
mod consumer;
mod host;
mod id;
mod log;
mod progress;
mod seen;

pub use codec::{CodecError, MAX_ENCODED_BYTES};
pub use consumer::{
    AckEffect, AckOutcome, Backoff, ConfigError, Consumer, ConsumerConfig, DeadLetter, Delivery,
    FailureReason, IgnoredAck, Jobs,
};
pub use host::{ConsumerError, PersistentConsumer};
pub use id::{IdParseError, OCCURRENCE_ID_BYTES, OCCURRENCE_ID_TEXT_LEN, OccurrenceId};
pub use log::{Outbox, OutboxError, OutboxLimits, OutboxRecord};
pub use progress::{
    DeadLetterSink, FileDeadLetters, FileProgressStore, MemDeadLetters, MemProgressStore,
    ProgressStore, StoreError,
};
pub use seen::{SeenSet, SeenSetError};
