//! A worker that speaks the delivery contract ([`crate::contract`], `docs/outbox.md`, "The
//! worker protocol"), on axum behind the bounded server ([`crate::server`]).
//!
//! For each delivery, in this order:
//! 1. **Authenticate** ([`crate::auth`]): the chain is the worker's, the key id is one of its
//!    senders, the timestamp is within [`WorkerConfig::max_clock_skew_ms`] of its clock, the
//!    HMAC matches. Anything else is `401` ([`Refusal::Unauthenticated`]) and counted; nothing
//!    else happens. (Only [`WorkerConfig::insecure_unauthenticated`], for benchmarks, skips it.)
//! 2. **Deduplicate** through the service's [`Dedupe`] (ccron's [`DedupeTable`]), keyed on
//!    (sender, occurrence id), with a digest of handler and payload: the sender's acknowledged
//!    progress ([`contract::PROGRESS`]) first forgets what it finished; a repeat with the same
//!    record is answered from memory, one with another record is `409`, one at or below the
//!    progress `410`, one beyond the window or with no room `503` (before any effect).
//! 3. **Perform** the effect ([`Effect`]) under the store's lock, so two concurrent deliveries
//!    of one id never both perform it, then remember its outcome.
//! 4. **Answer** `200` with the body and the worker's ed25519 signature over it
//!    ([`ccron::outbox::workers::answer_signing_bytes`]) in [`contract::ANSWER_KEY`] and
//!    [`contract::ANSWER_SIGNATURE`]; the replicas believe the answer only with that signature
//!    by a key registered for the handler. An answer longer than
//!    [`WorkerConfig::max_answer_bytes`] (what the ledger accepts) is never answered as done:
//!    `422` ([`Refusal::AnswerTooLarge`]), remembered as such, and the record is dead-lettered.
//!
//! Every response to an authenticated delivery (answers and refusals) carries a MAC under the
//! sender's secret ([`crate::auth::response_signing_bytes`]), so the dispatcher believes only
//! what this worker said. Answers ready at the same time share one signature (a Merkle root,
//! [`ccron::outbox::WorkerSigner::sign_leaves`]), made outside the store's lock.
//!
//! The workers of one service share one [`Dedupe`] (in production: the service's idempotency
//! table), so a record that fails over after its first worker performed it is still performed
//! once.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ccron::outbox::workers::{answer_leaf, answer_signing_bytes_parts, hex_array, sha256, to_hex};
use ccron::outbox::{
    AnswerProof, DedupeFull, DedupeLimits, DedupeTable, DedupeVerdict, OccurrenceId, Remembered,
    WorkerSigner, delivery_digest, max_answer_bytes,
};
use tokio::sync::{mpsc, oneshot};

use crate::auth::{self, DeliveryClaims, DeliverySecret};
use crate::contract;
use crate::server::{self, ServerConfig, ServerStats};

/// What an effect can answer besides success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectError {
    /// The record can never be performed (bad payload, unknown handler): 422, not retried.
    Rejected(String),
    /// Not now (a dependency is down): 503, retried (on another worker), not remembered.
    Unavailable(String),
}

/// The effect a worker performs: `(handler, id, payload) → answer body`. It runs under the
/// dedupe lock on the server's task: keep it short (hand long work to a queue or
/// `spawn_blocking` and answer when it is durably accepted).
pub type Effect = dyn Fn(&str, &OccurrenceId, &[u8]) -> Result<Vec<u8>, EffectError> + Send + Sync;

/// A worker's configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The chain whose records it performs (deliveries for another chain are `401`).
    pub chain_id: Vec<u8>,
    /// The senders it accepts: key id → the secret it shares with that sender.
    pub senders: BTreeMap<String, DeliverySecret>,
    /// Accept deliveries without authentication (every sender is `""`). Insecure: anyone who
    /// reaches the worker can make it perform effects and answer for records. For benchmarks
    /// of the unauthenticated path only.
    pub insecure_unauthenticated: bool,
    /// How far a delivery's timestamp may be from the worker's clock.
    pub max_clock_skew_ms: u64,
    /// The worker's signing key (its public key registered in the ledger for its handlers).
    /// `None` answers unsigned, which the ledger refuses from the consumer.
    pub signer: Option<WorkerSigner>,
    /// Largest answer it gives: what the ledger accepts
    /// ([`ccron::outbox::max_answer_bytes`] of the outbox's limits).
    pub max_answer_bytes: usize,
    /// Bounds of its HTTP server (body size, deadlines, connections, rates).
    pub server: ServerConfig,
}

impl WorkerConfig {
    /// A worker of chain `chain_id` accepting `senders`, signing with `signer`, answering what
    /// an outbox of default limits accepts, behind the default server bounds, 30 s of skew.
    pub fn new(
        chain_id: impl Into<Vec<u8>>,
        senders: BTreeMap<String, DeliverySecret>,
        signer: WorkerSigner,
    ) -> Self {
        Self {
            chain_id: chain_id.into(),
            senders,
            insecure_unauthenticated: false,
            max_clock_skew_ms: 30_000,
            signer: Some(signer),
            max_answer_bytes: max_answer_bytes(&ccron::outbox::OutboxLimits::default()),
            server: ServerConfig::default(),
        }
    }

    /// An unauthenticated, unsigned worker (see [`Self::insecure_unauthenticated`]): the
    /// baseline of the delivery benchmark.
    pub fn insecure() -> Self {
        Self {
            chain_id: Vec::new(),
            senders: BTreeMap::new(),
            insecure_unauthenticated: true,
            max_clock_skew_ms: 30_000,
            signer: None,
            max_answer_bytes: max_answer_bytes(&ccron::outbox::OutboxLimits::default()),
            server: ServerConfig::default(),
        }
    }
}

/// Why a worker refused a delivery (its name goes in [`contract::ERROR`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Missing or malformed headers: 400.
    BadRequest,
    /// Not authenticated (chain, key id, timestamp or MAC): 401.
    Unauthenticated,
    /// The same (sender, id) was delivered before with another record: 409.
    Conflict,
    /// At or below the sender's acknowledged progress: 410.
    Stale,
    /// The effect refused the record: 422.
    Rejected,
    /// The effect's answer is longer than the ledger accepts: 422.
    AnswerTooLarge,
    /// Beyond the sender's window: 503.
    AheadOfWindow,
    /// The idempotency memory has no room: 503.
    MemoryFull,
    /// The effect is unavailable now: 503.
    Unavailable,
}

impl Refusal {
    /// The name in [`contract::ERROR`].
    pub fn name(self) -> &'static str {
        match self {
            Self::BadRequest => "bad-request",
            Self::Unauthenticated => "unauthenticated",
            Self::Conflict => "conflict",
            Self::Stale => "stale",
            Self::Rejected => "rejected",
            Self::AnswerTooLarge => "answer-too-large",
            Self::AheadOfWindow => "ahead-of-window",
            Self::MemoryFull => "memory-full",
            Self::Unavailable => "unavailable",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Conflict => StatusCode::CONFLICT,
            Self::Stale => StatusCode::GONE,
            Self::Rejected | Self::AnswerTooLarge => StatusCode::UNPROCESSABLE_ENTITY,
            Self::AheadOfWindow | Self::MemoryFull | Self::Unavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

/// Counters of a worker.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Effects performed (first deliveries that succeeded).
    pub performed: AtomicU64,
    /// Repeats answered from memory without performing.
    pub replayed: AtomicU64,
    /// Requests refused as malformed (400) or rejected by the effect (422).
    pub rejected: AtomicU64,
    /// Effects that answered unavailable (503).
    pub unavailable: AtomicU64,
    /// Deliveries refused as not authenticated (401).
    pub unauthenticated: AtomicU64,
    /// Repeats of an id with another record (409).
    pub conflicts: AtomicU64,
    /// Deliveries at or below the sender's progress (410).
    pub stale: AtomicU64,
    /// Deliveries refused for the window or the memory's room (503).
    pub refused_room: AtomicU64,
    /// Effects whose answer was longer than the ledger accepts (422).
    pub answers_too_large: AtomicU64,
    /// Answers signed.
    pub answers_signed: AtomicU64,
}

/// The idempotency store of a service (ccron's [`DedupeTable`] behind a lock). Share one among
/// a service's workers.
#[derive(Debug)]
pub struct Dedupe {
    table: Mutex<DedupeTable>,
}

impl Dedupe {
    /// An empty store of `limits` (its window at least the consumer's `max_search_ahead`).
    pub fn new(limits: DedupeLimits) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(DedupeTable::new(limits)),
        })
    }

    /// Whether `(sender, id)` is remembered.
    pub fn contains(&self, sender: &str, id: &OccurrenceId) -> bool {
        self.table.lock().is_ok_and(|t| t.get(sender, id).is_some())
    }

    /// Entries remembered.
    pub fn len(&self) -> usize {
        self.table.lock().map_or(0, |t| t.len())
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A worker's state: its configuration, idempotency store, effect and counters.
pub struct Worker {
    cfg: WorkerConfig,
    memory: Arc<Dedupe>,
    effect: Box<Effect>,
    healthy: AtomicBool,
    stats: WorkerStats,
    server_stats: Arc<ServerStats>,
    /// The signing task, started on the first answer (inside the server's runtime).
    batcher: std::sync::OnceLock<mpsc::Sender<SignJob>>,
    /// Signatures the batcher made (shared with its task).
    signatures: Arc<AtomicU64>,
    /// The chain id in hex, as deliveries name it.
    chain_hex: String,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A delivery up to its signature.
enum Handled {
    /// Refused: the reply.
    Refused(Reply),
    /// Answered: sign it (unless its signature was remembered).
    Sign(ToSign),
}

/// An answer to sign (or answered with its remembered signature).
struct ToSign {
    body: Vec<u8>,
    proof: Option<AnswerProof>,
    replayed: bool,
    leaf: [u8; 32],
}

/// What the worker decided under the store's lock.
enum Decided {
    Refuse(Reply),
    Answer {
        body: Vec<u8>,
        /// A signature remembered with the answer (none: sign it now).
        proof: Option<AnswerProof>,
        replayed: bool,
    },
}

/// A parsed delivery's headers.
struct Head<'a> {
    id: OccurrenceId,
    /// The chain part of the idempotency key (hex; `None` from a dispatcher built before keys
    /// named the chain).
    key_chain: Option<&'a str>,
    handler: &'a str,
    index: u64,
    attempt: u32,
    progress: u64,
}

/// A response before it is encoded (and MACed for the sender).
struct Reply {
    status: StatusCode,
    error: Option<&'static str>,
    body: Vec<u8>,
    proof: Option<AnswerProof>,
    replayed: bool,
}

fn refuse(r: Refusal, why: impl Into<String>) -> Reply {
    Reply {
        status: r.status(),
        error: Some(r.name()),
        body: why.into().into_bytes(),
        proof: None,
        replayed: false,
    }
}

/// What the response's MAC is keyed with: the authenticated sender's secret and the request's
/// own MAC (which binds the response to this request).
struct ResponseKey<'a> {
    secret: &'a DeliverySecret,
    request_tag: [u8; 32],
}

impl Worker {
    /// A worker performing `effect`, deduplicating through `dedupe` (shared with the other
    /// workers of the service). Its server configuration is checked when it serves.
    pub fn new(
        cfg: WorkerConfig,
        dedupe: Arc<Dedupe>,
        effect: impl Fn(&str, &OccurrenceId, &[u8]) -> Result<Vec<u8>, EffectError>
        + Send
        + Sync
        + 'static,
    ) -> Arc<Self> {
        if cfg.insecure_unauthenticated {
            tracing::warn!("worker accepts unauthenticated deliveries (insecure)");
        }
        Arc::new(Self {
            memory: dedupe,
            effect: Box::new(effect),
            healthy: AtomicBool::new(true),
            stats: WorkerStats::default(),
            server_stats: Arc::default(),
            batcher: std::sync::OnceLock::new(),
            signatures: Arc::default(),
            chain_hex: to_hex(&cfg.chain_id),
            cfg,
        })
    }

    /// The counters.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Ed25519 signatures made: one per batch of answers signed together (see
    /// [`WorkerStats::answers_signed`]).
    pub fn signatures(&self) -> u64 {
        self.signatures.load(Ordering::Relaxed)
    }

    /// Its server's counters (connections, deadlines, rates).
    pub fn server_stats(&self) -> Arc<ServerStats> {
        self.server_stats.clone()
    }

    /// Makes the health endpoint answer 503 (`false`) or 200 (`true`).
    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    /// The axum router: `POST` [`contract::DELIVER_PATH`] and `GET` [`contract::HEALTH_PATH`].
    /// Serve it with [`Worker::serve`] (or [`crate::server::serve`]): the bounds live there.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route(contract::DELIVER_PATH, post(deliver))
            .route(contract::HEALTH_PATH, get(health))
            // The bounded server refuses larger bodies before routing; this keeps the same
            // bound for a host that mounts the router elsewhere.
            .layer(axum::extract::DefaultBodyLimit::max(
                self.cfg.server.max_body_bytes,
            ))
            .with_state(self.clone())
    }

    /// Serves on `listener` behind the bounded server until `shutdown` completes.
    ///
    /// # Errors
    /// The server's I/O error; an invalid [`WorkerConfig::server`]
    /// ([`std::io::ErrorKind::InvalidInput`]).
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let server = server::Server::new(self.cfg.server)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?
            .with_stats(self.server_stats.clone());
        let router = self.router();
        server.run(listener, router, shutdown).await
    }

    /// Binds `addr` with `SO_REUSEADDR` ([`crate::server::bind`]).
    ///
    /// # Errors
    /// The socket's I/O error.
    pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        server::bind(addr)
    }

    fn parse<'a>(headers: &'a HeaderMap) -> Result<Head<'a>, &'static str> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let number = |name: &str| text(name).and_then(|v| v.parse::<u64>().ok());
        let (key_chain, id) = text(contract::IDEMPOTENCY_KEY)
            .and_then(contract::parse_idempotency_key)
            .ok_or("missing or malformed Idempotency-Key")?;
        let handler = text(contract::HANDLER)
            .filter(|h| !h.is_empty() && h.len() <= contract::MAX_HANDLER_BYTES)
            .ok_or("missing or oversized Ccron-Handler")?;
        let index = number(contract::OUTBOX_INDEX)
            .filter(|&i| i > 0)
            .ok_or("missing or malformed Ccron-Outbox-Index")?;
        let attempt = text(contract::ATTEMPT)
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or("missing or malformed Ccron-Attempt")?;
        let progress = number(contract::PROGRESS).ok_or("missing or malformed Ccron-Progress")?;
        Ok(Head {
            id,
            key_chain,
            handler,
            index,
            attempt,
            progress,
        })
    }

    /// Checks the delivery's authentication; returns the sender's key id and what its
    /// response is MACed with.
    fn authenticate<'a>(
        &'a self,
        headers: &'a HeaderMap,
        head: &Head<'_>,
        payload_sha256: &[u8; 32],
    ) -> Result<(&'a str, Option<ResponseKey<'a>>), String> {
        if self.cfg.insecure_unauthenticated {
            return Ok(("", None));
        }
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let chain = text(contract::CHAIN).ok_or("no Ccron-Chain")?;
        if chain.len() > 2 * contract::MAX_CHAIN_ID_BYTES
            || !chain.eq_ignore_ascii_case(&self.chain_hex)
            || head
                .key_chain
                .is_some_and(|k| !k.eq_ignore_ascii_case(&self.chain_hex))
        {
            return Err("another chain".into());
        }
        let key_id = text(contract::KEY_ID).ok_or("no Ccron-Key-Id")?;
        let secret = self.cfg.senders.get(key_id).ok_or_else(|| {
            format!(
                "unknown key id {:?}",
                key_id.chars().take(64).collect::<String>()
            )
        })?;
        let timestamp_ms = text(contract::TIMESTAMP)
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or("no or malformed Ccron-Timestamp")?;
        let now = auth::unix_now_ms();
        if now.abs_diff(timestamp_ms) > self.cfg.max_clock_skew_ms {
            return Err(format!(
                "timestamp {timestamp_ms} is {} ms from this worker's clock",
                now.abs_diff(timestamp_ms)
            ));
        }
        let tag = text(contract::SIGNATURE)
            .and_then(|v| hex_array::<32>(v).ok())
            .ok_or("no or malformed Ccron-Signature")?;
        let claims = DeliveryClaims {
            chain_id: &self.cfg.chain_id,
            key_id,
            index: head.index,
            id: head.id,
            handler: head.handler,
            attempt: head.attempt,
            progress: head.progress,
            timestamp_ms,
            payload_sha256: *payload_sha256,
        };
        if !auth::verify_mac(secret, &auth::delivery_signing_bytes(&claims), &tag) {
            return Err("the MAC does not match".into());
        }
        Ok((
            key_id,
            Some(ResponseKey {
                secret,
                request_tag: tag,
            }),
        ))
    }

    /// Encodes `reply`, with the response MAC when the request was authenticated.
    fn respond(&self, reply: Reply, key: Option<&ResponseKey<'_>>) -> Response {
        let mac = key.map(|k| {
            auth::mac(
                k.secret,
                &auth::response_signing_bytes(
                    &k.request_tag,
                    reply.status.as_u16(),
                    &reply.body,
                    reply.proof.as_ref(),
                ),
            )
        });
        let mut resp = (reply.status, Bytes::from(reply.body)).into_response();
        let h = resp.headers_mut();
        if let Some(name) = reply.error {
            h.insert(contract::ERROR, HeaderValue::from_static(name));
        }
        if let Some(mac) = mac
            && let Ok(v) = HeaderValue::from_str(&to_hex(&mac))
        {
            h.insert(contract::RESPONSE_SIGNATURE, v);
        }
        if let Some(p) = &reply.proof {
            if let Ok(v) = HeaderValue::from_str(&p.key.to_string()) {
                h.insert(contract::ANSWER_KEY, v);
            }
            if let Ok(v) = HeaderValue::from_str(&to_hex(&p.signature)) {
                h.insert(contract::ANSWER_SIGNATURE, v);
            }
            if !p.path.is_empty() {
                let mut path = String::with_capacity(p.path.len() * 66);
                for (k, step) in p.path.iter().enumerate() {
                    if k > 0 {
                        path.push(',');
                    }
                    path.push(if step.left { 'l' } else { 'r' });
                    path.push_str(&to_hex(&step.hash));
                }
                if let Ok(v) = HeaderValue::from_str(&path) {
                    h.insert(contract::ANSWER_PATH, v);
                }
            }
        }
        if reply.replayed {
            h.insert(contract::REPLAYED, HeaderValue::from_static("true"));
        }
        if key.is_some() {
            // Authenticated: the sender's rate token comes back (limits are for strangers).
            resp.extensions_mut().insert(server::Authenticated);
        }
        resp
    }

    /// Everything up to the signature: the response of a refusal, or the answer to sign.
    fn handle<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &[u8],
    ) -> (Handled, Option<ResponseKey<'a>>) {
        let head = match Self::parse(headers) {
            Ok(h) => h,
            Err(why) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(why, "malformed delivery");
                return (Handled::Refused(refuse(Refusal::BadRequest, why)), None);
            }
        };
        let payload_sha256 = sha256(body);
        let (sender, key) = match self.authenticate(headers, &head, &payload_sha256) {
            Ok(s) => s,
            Err(why) => {
                let n = self.stats.unauthenticated.fetch_add(1, Ordering::Relaxed);
                if n.is_multiple_of(1_024) {
                    tracing::warn!(id = %head.id, %why, count = n + 1, "delivery not authenticated");
                } else {
                    tracing::debug!(id = %head.id, %why, "delivery not authenticated");
                }
                return (
                    Handled::Refused(refuse(Refusal::Unauthenticated, "not authenticated")),
                    None,
                );
            }
        };
        let span = tracing::info_span!("worker_delivery", id = %head.id, handler = head.handler, index = head.index, sender);
        let _g = span.enter();
        let digest = delivery_digest(head.handler, body);
        let decided = {
            let Ok(mut table) = self.memory.table.lock() else {
                return (
                    Handled::Refused(refuse(Refusal::Unavailable, "worker state poisoned")),
                    key,
                );
            };
            self.decide(&mut table, sender, &head, digest, body)
        };
        match decided {
            Decided::Refuse(reply) => (Handled::Refused(reply), key),
            Decided::Answer {
                body: answer,
                proof,
                replayed,
            } => {
                let leaf = answer_leaf(&answer_signing_bytes_parts(
                    &self.cfg.chain_id,
                    head.index,
                    &head.id.to_bytes(),
                    head.handler,
                    &payload_sha256,
                    &sha256(&answer),
                ));
                (
                    Handled::Sign(ToSign {
                        body: answer,
                        proof,
                        replayed,
                        leaf,
                    }),
                    key,
                )
            }
        }
    }

    /// Signs `leaf` with the worker's key, batched with the other answers ready at the same
    /// time (outside the store's lock: the workers sharing it never wait on each other's
    /// signatures). `None` for a worker without a signer.
    async fn sign(&self, leaf: [u8; 32]) -> Option<AnswerProof> {
        let signer = self.cfg.signer.as_ref()?;
        self.stats.answers_signed.fetch_add(1, Ordering::Relaxed);
        let tx = self.batcher.get_or_init(|| {
            spawn_batcher(
                signer.clone(),
                self.cfg.chain_id.clone(),
                self.signatures.clone(),
            )
        });
        let (reply, rx) = oneshot::channel();
        if tx.send((leaf, reply)).await.is_ok()
            && let Ok(proof) = rx.await
        {
            return Some(proof);
        }
        // The batcher is gone (its runtime stopped): sign alone.
        self.signatures.fetch_add(1, Ordering::Relaxed);
        signer.sign_leaves(&self.cfg.chain_id, &[leaf]).pop()
    }

    /// Under the store's lock: forget what the sender acknowledged, then replay, refuse, or
    /// perform and remember.
    fn decide(
        &self,
        table: &mut DedupeTable,
        sender: &str,
        head: &Head<'_>,
        digest: [u8; 32],
        body: &[u8],
    ) -> Decided {
        if let Err(e) = table.acknowledge(sender, head.progress) {
            self.stats.refused_room.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "no room for this sender");
            return Decided::Refuse(refuse(Refusal::MemoryFull, e.to_string()));
        }
        let too_large = |len: u64| {
            Decided::Refuse(refuse(
                Refusal::AnswerTooLarge,
                format!(
                    "answer of {len} bytes exceeds the ledger's {} bytes",
                    self.cfg.max_answer_bytes
                ),
            ))
        };
        match table.check(sender, head.index, &head.id, &digest) {
            DedupeVerdict::Replay(e) => {
                self.stats.replayed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("repeat answered from memory");
                return match &e.outcome {
                    Remembered::Answer { body, proof } => Decided::Answer {
                        body: body.clone(),
                        proof: proof.clone(),
                        replayed: true,
                    },
                    Remembered::TooLarge { len } => too_large(*len),
                };
            }
            DedupeVerdict::Conflict { index } => {
                self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    first_index = index,
                    "the same id delivered with another record"
                );
                return Decided::Refuse(refuse(
                    Refusal::Conflict,
                    "this id was delivered with another record",
                ));
            }
            DedupeVerdict::Stale { progress } => {
                self.stats.stale.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(progress, "delivery at or below the acknowledged progress");
                return Decided::Refuse(refuse(
                    Refusal::Stale,
                    "at or below your acknowledged progress",
                ));
            }
            DedupeVerdict::AheadOfWindow { progress, window } => {
                self.stats.refused_room.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(progress, window, "delivery beyond the window");
                return Decided::Refuse(refuse(
                    Refusal::AheadOfWindow,
                    "beyond the window of your progress",
                ));
            }
            DedupeVerdict::Full(why) => {
                self.stats.refused_room.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(?why, "idempotency memory full");
                let why = match why {
                    DedupeFull::Senders => "no room for another sender",
                    DedupeFull::Window => "window full",
                    _ => "no room for another answer",
                };
                return Decided::Refuse(refuse(Refusal::MemoryFull, why));
            }
            DedupeVerdict::Fresh => {}
            _ => {
                return Decided::Refuse(refuse(Refusal::Unavailable, "unexpected memory verdict"));
            }
        }
        match (self.effect)(head.handler, &head.id, body) {
            Ok(answer) => {
                self.stats.performed.fetch_add(1, Ordering::Relaxed);
                if answer.len() > self.cfg.max_answer_bytes {
                    self.stats.answers_too_large.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        len = answer.len(),
                        max = self.cfg.max_answer_bytes,
                        "answer longer than the ledger accepts"
                    );
                    let len = answer.len() as u64;
                    let remembered = Remembered::TooLarge { len };
                    if let Err(e) = table.remember(sender, head.id, head.index, digest, remembered)
                    {
                        tracing::error!(error = %e, "performed effect not remembered");
                    }
                    return too_large(len);
                }
                // Remembered without its signature: a repeat is signed again (deterministic).
                let remembered = Remembered::Answer {
                    body: answer.clone(),
                    proof: None,
                };
                if let Err(e) = table.remember(sender, head.id, head.index, digest, remembered) {
                    // Unreachable (checked fresh under the same lock); loud if it ever is.
                    tracing::error!(error = %e, "performed effect not remembered");
                }
                Decided::Answer {
                    body: answer,
                    proof: None,
                    replayed: false,
                }
            }
            Err(EffectError::Rejected(why)) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reason = %why, "effect rejected the record");
                Decided::Refuse(refuse(Refusal::Rejected, why))
            }
            Err(EffectError::Unavailable(why)) => {
                self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reason = %why, "effect unavailable");
                Decided::Refuse(refuse(Refusal::Unavailable, why))
            }
        }
    }
}

async fn deliver(State(w): State<Arc<Worker>>, headers: HeaderMap, body: Bytes) -> Response {
    let (handled, key) = w.handle(&headers, &body);
    let reply = match handled {
        Handled::Refused(reply) => reply,
        Handled::Sign(to_sign) => {
            // A remembered signature is answered as it was; else sign now (ed25519 is
            // deterministic: a batch of one gives a repeat the same signature; in another
            // batch, or at another worker of the service, another valid one).
            let proof = match to_sign.proof {
                Some(p) => Some(p),
                None => w.sign(to_sign.leaf).await,
            };
            Reply {
                status: StatusCode::OK,
                error: None,
                body: to_sign.body,
                proof,
                replayed: to_sign.replayed,
            }
        }
    };
    w.respond(reply, key.as_ref())
}

/// Moves the answers already waiting into `batch` (up to [`MAX_SIGN_BATCH`]).
fn take_waiting(rx: &mut mpsc::Receiver<SignJob>, batch: &mut Vec<SignJob>) {
    while batch.len() < MAX_SIGN_BATCH {
        match rx.try_recv() {
            Ok(j) => batch.push(j),
            Err(_) => break,
        }
    }
}

/// One answer waiting for its signature, and where to send it.
type SignJob = ([u8; 32], oneshot::Sender<AnswerProof>);

/// Most answers signed with one signature.
const MAX_SIGN_BATCH: usize = 256;

/// Most times the signing task yields to the runtime before signing a batch.
const SIGN_YIELDS: usize = 8;

/// The worker's signing task: it takes the first answer waiting, and every other already
/// waiting (up to [`MAX_SIGN_BATCH`]), and signs them with one signature over their Merkle root
/// ([`WorkerSigner::sign_leaves`]). No answer waits for a batch to fill: a lone answer is signed
/// alone at once; under load, answers that arrive while a batch is being signed share the next
/// signature.
fn spawn_batcher(
    signer: WorkerSigner,
    chain_id: Vec<u8>,
    signatures: Arc<AtomicU64>,
) -> mpsc::Sender<SignJob> {
    let (tx, mut rx) = mpsc::channel::<SignJob>(MAX_SIGN_BATCH * 4);
    tokio::spawn(async move {
        let mut batch: Vec<SignJob> = Vec::with_capacity(MAX_SIGN_BATCH);
        while let Some(job) = rx.recv().await {
            batch.push(job);
            take_waiting(&mut rx, &mut batch);
            // Let the tasks that are ready run first, as long as each round of the runtime
            // brings more answers: under load they join this batch; when a round brings none
            // (idle, or light load), sign at once.
            for _ in 0..SIGN_YIELDS {
                if batch.len() >= MAX_SIGN_BATCH {
                    break;
                }
                tokio::task::yield_now().await;
                let before = batch.len();
                take_waiting(&mut rx, &mut batch);
                if batch.len() == before {
                    break;
                }
            }
            let leaves: Vec<[u8; 32]> = batch.iter().map(|(leaf, _)| *leaf).collect();
            let proofs = signer.sign_leaves(&chain_id, &leaves);
            signatures.fetch_add(1, Ordering::Relaxed);
            tracing::trace!(answers = leaves.len(), "answers signed");
            for ((_, reply), proof) in batch.drain(..).zip(proofs) {
                let _ = reply.send(proof);
            }
        }
    });
    tx
}

async fn health(State(w): State<Arc<Worker>>) -> StatusCode {
    if w.healthy.load(Ordering::Relaxed) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}
