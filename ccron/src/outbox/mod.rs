//! Idempotent external effects: the replicated outbox and its consumer outside consensus.
//!
//! * [`OccurrenceId`]: the deterministic name of one firing of one action.
//! * [`Outbox`]: replicated state; actions append [`OutboxRecord`]s, which get dense indices.
//!   One per ledger: book handlers, table actions and the state's own code emit into it
//!   ([`Emits`], [`EmitBudget`]); an id's [`Origin`] and sub-index say who emitted it and
//!   which record of its run it is.
//! * [`Consumer`]: a pure state machine delivering records at least once, with bounded work in
//!   flight, deterministic retries and dead letters; [`PersistentConsumer`] adds its durable
//!   progress ([`ProgressStore`]) and dead letters ([`DeadLetterSink`]).
//! * [`QuorumJobs`]: reads records from several replicas, believing only what f+1 agree on;
//!   [`ReadPage`] is what a replica's read endpoint answers (versioned, bounded wire format).
//! * [`DedupeTable`]: a worker's deduplication keyed on (authenticated sender, id), with a digest
//!   of what was delivered, forgotten only when the sender's acknowledged progress passes it
//!   (an outsider cannot evict); [`SeenSet`]: the plain FIFO set of ids, for a trusted channel
//!   with one sender.
//! * [`ResultJournal`]: the consumer's durable hold on results between the worker's answer and
//!   the ledger applying it.
//! * [`OutboxResult`]: a worker's answer or a dead letter, sent back as a client request and
//!   applied once by [`Outbox::accept_result`]; an answer only when signed by a worker key
//!   registered for its handler ([`workers`]: [`WorkerSigner`], [`WorkerKeyRequest`]).
//!
//! See `docs/outbox.md` for the model and how a ledger uses it.
//!
//! ```
//! use ccron::outbox::{AckOutcome, Consumer, ConsumerConfig, OccurrenceId, Outbox, OutboxLimits,
//!                     OutboxRecord, SeenSet};
//!
//! // Inside consensus: the action for occurrence 0 of entry 7 of component 1 records its effect.
//! let mut outbox = Outbox::new(OutboxLimits::default());
//! let id = OccurrenceId::new(1, 7, 0);
//! let index = outbox.append(OutboxRecord::new(id, "send-mail", b"to=ops".to_vec()))?;
//! assert_eq!((index, id.to_string().as_str()), (1, "00000001-0000000000000007-0000000000000000"));
//!
//! // Outside consensus: the consumer delivers, the worker deduplicates by id.
//! let mut consumer = Consumer::new(ConsumerConfig::default(), 0)?;
//! let mut seen = SeenSet::new(2 * 256);
//! let mut performed = 0;
//! for round in 0..2 {
//!     for d in consumer.poll(&outbox, 0) {
//!         if !seen.contains(&d.record.id) {
//!             performed += 1; // the effect
//!             seen.insert(d.record.id);
//!         }
//!         if round == 1 {
//!             consumer.on_ack(d.index, d.attempt, AckOutcome::Done, 1);
//!         }
//!     }
//!     // Round 0 "loses" its acknowledgement; a restarted consumer delivers again.
//!     if round == 0 {
//!         consumer = Consumer::new(ConsumerConfig::default(), consumer.progress())?;
//!     }
//! }
//! assert_eq!((consumer.progress(), performed), (1, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod codec;
mod consumer;
mod dedupe;
mod emit;
mod host;
mod id;
mod journal;
mod log;
mod progress;
mod quorum;
mod read;
mod result;
mod seen;
pub mod workers;

pub use codec::{CodecError, MAX_ENCODED_BYTES};
pub use consumer::{
    AckEffect, AckOutcome, Backoff, ConfigError, Consumer, ConsumerConfig, DeadLetter, Delivery,
    FailureReason, IgnoredAck, Jobs,
};
pub use dedupe::{
    DEDUPE_ENTRY_OVERHEAD_BYTES, DedupeEntry, DedupeError, DedupeFull, DedupeLimits, DedupeTable,
    DedupeVerdict, MAX_SENDER_BYTES, Remembered, delivery_digest,
};
pub use emit::{EmitBudget, EmitError, Emits, MAX_EMITTER, MAX_RECORDS_PER_RUN, Origin};
pub use host::{ConsumerError, PersistentConsumer};
pub use id::{IdParseError, OCCURRENCE_ID_BYTES, OCCURRENCE_ID_TEXT_LEN, OccurrenceId};
pub use journal::{
    COMPACT_MIN_RECORDS, JournalError, JournalLimits, MAX_JOURNAL_RECORD_BYTES, ResultJournal,
};
pub use log::{Outbox, OutboxError, OutboxLimits, OutboxRecord};
pub use progress::{
    DeadLetterSink, FileDeadLetters, FileProgressStore, MemDeadLetters, MemProgressStore,
    ProgressStore, StoreError,
};
pub use quorum::{QuorumError, QuorumJobs};
pub use read::{READ_FORMAT_VERSION, ReadEntry, ReadPage, ReadPageError};
pub use result::{
    ANSWER_PAYLOAD_OVERHEAD_BYTES, MAX_RESULT_PAYLOAD_BYTES, OutboxResult, RESULT_PAYLOAD_PREFIX,
    ResultApplied, ResultOutcome, ResultPayloadError, max_answer_bytes,
};
pub use seen::{SeenSet, SeenSetError};
pub use workers::{
    AnswerProof, PathStep, PreparedKey, WorkerKey, WorkerKeyRequest, WorkerKeysApplied,
    WorkerKeysPayloadError, WorkerRegistry, WorkerSigner,
};
