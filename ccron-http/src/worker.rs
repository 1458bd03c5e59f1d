//! A worker that speaks the delivery contract ([`crate::contract`]), on axum: it deduplicates by
//! occurrence id with ccron's [`SeenSet`] and answers a repeat with the answer it gave the first
//! time, so at-least-once delivery becomes an effectively-once effect.
//!
//! The effect itself is a closure ([`Effect`]); the worker holds its [`Dedupe`] store's lock
//! across "seen? → perform → remember", so two concurrent deliveries of one id never both
//! perform it. Workers of one service share one [`Dedupe`] (in production: the service's
//! idempotency table), so a record that fails over from one worker to another after its first
//! worker performed it (and the answer was lost) is still performed once. Bounds:
//! request bodies above [`WorkerConfig::max_body_bytes`] are refused (413) before the effect;
//! the seen-set and the stored answers keep at most [`Dedupe::new`]'s capacity ids (oldest
//! evicted first: size it at least twice the consumer's search-ahead, see [`SeenSet`]).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ccron::outbox::{OccurrenceId, SeenSet};

use crate::contract;

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

/// A worker's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Largest request body accepted.
    pub max_body_bytes: usize,
}

impl Default for WorkerConfig {
    /// 1 MiB bodies.
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
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
}

#[derive(Debug)]
struct Memory {
    seen: SeenSet,
    answers: BTreeMap<OccurrenceId, Vec<u8>>,
    order: VecDeque<OccurrenceId>,
}

/// The idempotency store of a service: ids performed (ccron's [`SeenSet`]) and their answers,
/// at most `capacity` of each, oldest evicted first. Share one among a service's workers; a
/// worker that must survive its own crash keeps it across restarts (persist the seen-set with
/// [`SeenSet::encode`] atomically with the effects).
#[derive(Debug)]
pub struct Dedupe {
    capacity: usize,
    memory: Mutex<Memory>,
}

impl Dedupe {
    /// An empty store keeping `capacity` ids (at least 1).
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity: capacity.max(1),
            memory: Mutex::new(Memory {
                seen: SeenSet::new(capacity),
                answers: BTreeMap::new(),
                order: VecDeque::new(),
            }),
        })
    }

    /// Whether `id` was performed (and not yet evicted).
    pub fn contains(&self, id: &OccurrenceId) -> bool {
        self.memory.lock().is_ok_and(|m| m.seen.contains(id))
    }
}

/// A worker's state: its idempotency store, its effect and its counters.
pub struct Worker {
    cfg: WorkerConfig,
    memory: Arc<Dedupe>,
    effect: Box<Effect>,
    healthy: AtomicBool,
    stats: WorkerStats,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker performing `effect`, deduplicating through `dedupe` (shared with the other
    /// workers of the service).
    pub fn new(
        cfg: WorkerConfig,
        dedupe: Arc<Dedupe>,
        effect: impl Fn(&str, &OccurrenceId, &[u8]) -> Result<Vec<u8>, EffectError>
        + Send
        + Sync
        + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            memory: dedupe,
            effect: Box::new(effect),
            healthy: AtomicBool::new(true),
            stats: WorkerStats::default(),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Makes the health endpoint answer 503 (`false`) or 200 (`true`).
    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    /// The axum router: `POST` [`contract::DELIVER_PATH`] and `GET` [`contract::HEALTH_PATH`].
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route(contract::DELIVER_PATH, post(deliver))
            .route(contract::HEALTH_PATH, get(health))
            .layer(DefaultBodyLimit::max(self.cfg.max_body_bytes))
            .with_state(self.clone())
    }

    /// Serves on `listener` until `shutdown` completes.
    ///
    /// # Errors
    /// The server's I/O error.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
    }

    /// Binds `addr` with `SO_REUSEADDR`, so a restarted worker gets its port back at once.
    ///
    /// # Errors
    /// The socket's I/O error.
    pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_nodelay(true)?;
        socket.bind(addr)?;
        socket.listen(1024)
    }

    fn handle(&self, headers: &HeaderMap, body: &[u8]) -> Response {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let Some(id) = text(contract::IDEMPOTENCY_KEY).and_then(|v| v.parse::<OccurrenceId>().ok())
        else {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return (
                StatusCode::BAD_REQUEST,
                "missing or malformed Idempotency-Key",
            )
                .into_response();
        };
        let Some(handler) =
            text(contract::HANDLER).filter(|h| h.len() <= contract::MAX_HANDLER_BYTES)
        else {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return (
                StatusCode::BAD_REQUEST,
                "missing or oversized Ccron-Handler",
            )
                .into_response();
        };
        let span = tracing::info_span!("worker_delivery", %id, handler);
        let _g = span.enter();
        let capacity = self.memory.capacity;
        let Ok(mut memory) = self.memory.memory.lock() else {
            return (StatusCode::INTERNAL_SERVER_ERROR, "worker state poisoned").into_response();
        };
        if memory.seen.contains(&id) {
            self.stats.replayed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("repeat answered from memory");
            let answer = memory.answers.get(&id).cloned().unwrap_or_default();
            return (
                StatusCode::OK,
                [(contract::REPLAYED, "true")],
                Bytes::from(answer),
            )
                .into_response();
        }
        match (self.effect)(handler, &id, body) {
            Ok(answer) => {
                memory.seen.insert(id);
                memory.answers.insert(id, answer.clone());
                memory.order.push_back(id);
                while memory.order.len() > capacity {
                    if let Some(old) = memory.order.pop_front() {
                        memory.answers.remove(&old);
                    }
                }
                self.stats.performed.fetch_add(1, Ordering::Relaxed);
                (StatusCode::OK, Bytes::from(answer)).into_response()
            }
            Err(EffectError::Rejected(why)) => {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reason = %why, "effect rejected the record");
                (StatusCode::UNPROCESSABLE_ENTITY, why).into_response()
            }
            Err(EffectError::Unavailable(why)) => {
                self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reason = %why, "effect unavailable");
                (StatusCode::SERVICE_UNAVAILABLE, why).into_response()
            }
        }
    }
}

async fn deliver(State(w): State<Arc<Worker>>, headers: HeaderMap, body: Bytes) -> Response {
    w.handle(&headers, &body)
}

async fn health(State(w): State<Arc<Worker>>) -> StatusCode {
    if w.healthy.load(Ordering::Relaxed) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}
