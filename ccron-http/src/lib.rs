//! Deliver ccron outbox records over HTTP to a pool of workers, and bring the results back.
//!
//! * [`pool`]: the decision logic, a pure sans-IO state machine with injected time and a seeded
//!   generator: assignment per handler (sticky by key, least-loaded, seeded random), a health
//!   model (failures and timeouts mark a worker down for an exponential back-off, probes bring
//!   it back), failover, per-handler retry limit and time-to-run.
//! * [`deliver`]: the thin IO shell ([`deliver::Dispatcher`]): it drives a ccron
//!   [`PersistentConsumer`](ccron::outbox::PersistentConsumer) (progress, retries with backoff,
//!   dead letters), POSTs each delivery with hyper under a timeout, probes workers that are
//!   down, and hands back an [`OutboxResult`](ccron::outbox::OutboxResult) per finished record
//!   (the answer or the dead letter) for the ledger ([`ccron::outbox::Outbox::accept_result`]);
//!   its Prometheus text endpoint ([`deliver::metrics`], [`serve_metrics`]): attempts by
//!   outcome, records done and given up, in flight, the consumer's progress, workers up.
//! * [`worker`]: an axum worker: authenticates every delivery ([`auth`], HMAC-SHA256 with a
//!   secret per worker), deduplicates on (sender, occurrence id) with ccron's
//!   [`DedupeTable`](ccron::outbox::DedupeTable), signs its answers (ed25519) for the ledger.
//! * [`server`]: the one bounded HTTP server every endpoint runs behind (head and body
//!   deadlines, body limit before parsing, connection caps, per-peer rates, connection age):
//!   [`server::serve`] is one call for any axum router, a host's API included.
//! * [`read`]: a replica's networked read endpoint over its committed outbox ([`OutboxSource`],
//!   [`read_router`]), and the consumer's [`QuorumReader`], which believes a record only when
//!   f+1 endpoints return it identically.
//! * [`schedules`]: a replica's schedule read endpoint ([`schedule_router`] over a
//!   [`ScheduleSource`], e.g. [`PublishedBook`]): list, describe, book and outbox state, each a
//!   versioned, bounded answer naming its height; [`schedule_read`]: the [`ScheduleReader`]
//!   believing an answer only when f+1 nodes return it identically at the same height.
//! * [`contract`]: the HTTP contract (paths, headers, status codes).
//!
//! See `docs/outbox.md` ("HTTP workers") for the model and the figures.

pub mod auth;
pub mod book_metrics;
pub mod contract;
pub mod deliver;
pub mod pool;
pub mod read;
pub mod relay;
pub mod schedule_read;
pub mod schedules;
pub mod server;
pub mod worker;

pub use auth::DeliverySecret;
pub use book_metrics::{register_book_counters, register_entry_counts, register_refusals};
pub use deliver::{DeliverError, DispatchStats, Dispatcher, DispatcherConfig, WorkerEndpoint};
pub use deliver::{
    DispatchMetrics, RenderMetrics, ResultSink, ResultSinkError, metrics_router, serve_metrics,
};
pub use pool::{
    AssignError, Assignment, AttemptOutcome, HandlerPolicy, Health, HealthConfig, KeyOf, Pool,
    PoolConfig, PoolConfigError, PoolStats, Verdict, WorkerId,
};
pub use read::{
    EndpointJobs, EndpointStats, OnChange, OutboxSource, PublishOutbox, PublishedOutbox,
    QuorumReader, ReadClientConfig, ReadError, ReadServerConfig, read_router, serve_reads,
};
pub use relay::{Relay, RelayConfig, RelayError, RelayMetrics, RelayStats, Submit, SubmitError};
pub use schedule_read::{Believed, ScheduleReadConfig, ScheduleReadError, ScheduleReader};
pub use schedules::{
    PublishBook, PublishedBook, PublishedState, ScheduleQuery, ScheduleSource, schedule_router,
};
pub use server::{Server, ServerConfig, ServerCounters, ServerStats, serve};
pub use worker::{Dedupe, EffectError, Worker, WorkerConfig};
