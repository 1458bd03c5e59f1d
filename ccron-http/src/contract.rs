//! The HTTP contract between the dispatcher and a worker (`docs/outbox.md`, "The HTTP
//! contract").
//!
//! * `POST /ccron/v1/deliver`, body = the record's payload (`application/octet-stream`), headers
//!   [`IDEMPOTENCY_KEY`] (the occurrence id, 42-character text form), [`HANDLER`],
//!   [`OUTBOX_INDEX`] and [`ATTEMPT`].
//! * `2xx`: done; the body is the answer that goes back into the ledger (at most the
//!   dispatcher's `max_answer_bytes`). A repeat of an id already performed answers `2xx` with
//!   the first answer and [`REPLAYED`]`: true`.
//! * `408`, `429`, `5xx`, a timeout or a connection error: not done now; the worker's health
//!   suffers and the record is retried, on another worker when one is up.
//! * any other `4xx`: the worker refuses this record for good; it is dead-lettered at once.
//! * `GET /ccron/v1/health`: `2xx` when the worker takes deliveries (the probe).
//!
//! A replica's read endpoint ([`crate::read`]): `GET /ccron/v1/outbox?from=I&limit=N&max_bytes=B`
//! answers `200` with a [`ccron::outbox::ReadPage`] (`application/octet-stream`), `400` for a
//! malformed query, `503` while the replica has nothing to serve.

/// Path of a delivery.
pub const DELIVER_PATH: &str = "/ccron/v1/deliver";
/// Path of a replica's outbox read endpoint.
pub const OUTBOX_PATH: &str = "/ccron/v1/outbox";
/// Path of the health probe.
pub const HEALTH_PATH: &str = "/ccron/v1/health";
/// Header carrying the occurrence id: the idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Header carrying the record's handler.
pub const HANDLER: &str = "ccron-handler";
/// Header carrying the record's outbox index.
pub const OUTBOX_INDEX: &str = "ccron-outbox-index";
/// Header carrying the attempt number (from 1).
pub const ATTEMPT: &str = "ccron-attempt";
/// Response header of a repeat answered from the worker's memory.
pub const REPLAYED: &str = "idempotent-replayed";
/// Longest handler name a worker accepts.
pub const MAX_HANDLER_BYTES: usize = 256;
