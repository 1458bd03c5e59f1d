//! The IO shell: [`Dispatcher`] drives a ccron consumer, the [`Pool`]'s decisions and hyper.
//!
//! One [`Dispatcher::step`]:
//! 1. sends a probe (`GET` health, under the probe timeout) to every worker whose back-off ended;
//! 2. polls the [`PersistentConsumer`] for deliveries (retries first, then new records, within
//!    its in-flight and search-ahead bounds) and asks the pool for a worker for each; an
//!    assignment becomes a spawned `POST` under the handler's attempt timeout. When every
//!    healthy worker is full the delivery **waits here** for the next free slot (lowest index
//!    first, started as soon as a completion frees one; at most the consumer's
//!    `max_processing`), rather than failing: a failed attempt would be backed off by the
//!    consumer, which meanwhile hands out newer records, so the oldest record, the one
//!    progress waits on, would be served last. Only when no worker is up is the delivery
//!    reported to the consumer as a failed attempt (it retries after its backoff); a
//!    time-to-run that ran out gives the record up;
//! 3. waits for the first completion (or the next timer, or `max_wait`), then applies every
//!    completion that arrived: the pool's [`Verdict`] becomes the consumer's acknowledgement,
//!    retry or dead letter. A refusal with `Retry-After` (the bounded server's rate limit, a
//!    worker's 503) pauses that worker until then ([`Pool::pause`]): it is sent nothing before
//!    that time, and the record fails over. Every attempt is counted by how it ended
//!    ([`DispatchStats::outcomes`], [`AttemptKind`]).
//!
//! Authentication: every delivery carries an HMAC-SHA256 under the secret the dispatcher shares
//! with that worker ([`WorkerEndpoint::secret`], [`crate::auth`]), over the chain id, its key id,
//! the record's index, id, handler, the attempt, the consumer's **persisted** progress (the
//! worker forgets what it covers) and a timestamp from the Unix clock. Every response of an
//! authenticated worker must carry its MAC ([`crate::auth::response_signing_bytes`]), and an
//! answer the worker's ed25519 signature over the record and the answer
//! ([`ccron::outbox::workers::answer_signing_bytes`], through its batch's Merkle root) by one
//! of the pool's [`WorkerEndpoint::answer_key`]s when they are configured; the signature itself
//! is verified for the first roots of each worker and a sample after them
//! ([`AnswerVerification`]). An answer that fails any of it is a worker fault (retried on
//! another worker, [`DispatchStats::bad_answers`]), never handed to the sink.
//!
//! Results back: before a record is acknowledged done (or given up), its [`OutboxResult`] (the
//! worker's signed answer, or the dead letter) is offered to the [`ResultSink`]; only when the
//! sink took it does the consumer move on. A sink that fails leaves the record unacknowledged:
//! it times out and is delivered again (the worker answers the repeat from memory), so no
//! result is lost behind persisted progress. [`ResultJournal`] is the durable sink (fsynced
//! before the acknowledgement). The ledger applies each result once
//! ([`ccron::outbox::Outbox::accept_result`]), so offering one twice is harmless.
//!
//! Bounds: attempts in flight ≤ workers × `max_in_flight_per_worker` (and the consumer's
//! `max_processing`); every request and probe has a timeout; answers are read up to
//! [`DispatcherConfig::max_answer_bytes`] (what the ledger accepts,
//! [`ccron::outbox::max_answer_bytes`]): a longer one is given up as a dead letter, never
//! acknowledged done ([`DispatchStats::answers_too_large`]); dead-letter reasons are cut to the
//! same bound; the completion channel is sized for every task that can exist, so no queue grows
//! without bound. Dropping the dispatcher aborts its tasks (a killed consumer).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccron::TimeMs;
use ccron::outbox::workers::{
    MAX_PROOF_STEPS, PathStep, PreparedKey, answer_root, hex_array, sha256, to_hex,
};
use ccron::outbox::{
    AckOutcome, AnswerProof, ConsumerError, DeadLetterSink, Delivery, FailureReason, Jobs,
    OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer, ProgressStore, ResultJournal,
    WorkerKey, max_answer_bytes,
};
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

mod answers;
mod attempt;
pub mod metrics;
mod outcomes;

use answers::AnswerCheck;
pub use answers::{AnswerVerification, VerifiedRoots, parse_answer_path};
pub use metrics::{
    DispatchFigures, DispatchMetrics, RenderMetrics, WorkerFigures, metrics_router, serve_metrics,
};
pub use outcomes::{AttemptCounts, AttemptKind};

use crate::auth::{self, DeliveryClaims, DeliverySecret};
use crate::contract;
use crate::pool::{
    AssignError, AttemptOutcome, Pool, PoolConfig, PoolConfigError, Verdict, WorkerId,
};

/// A source of milliseconds (injected: tests and the bench use their own).
pub type Clock = Arc<dyn Fn() -> TimeMs + Send + Sync>;

/// The Unix clock of delivery timestamps, in milliseconds.
pub type UnixClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// One worker as the dispatcher knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEndpoint {
    /// Base URI (`http://host:port`).
    pub base: String,
    /// The secret shared with this worker (deliveries are MACed with it); `None` sends
    /// unauthenticated deliveries, refused unless [`DispatcherConfig::allow_unauthenticated`].
    pub secret: Option<DeliverySecret>,
    /// The worker's answer key as registered in the ledger. Answers signed by a key that is
    /// none of the pool's are refused here already (workers of one service share their
    /// idempotency memory, so one may replay another's signed answer). `None` on every worker:
    /// any valid signature (the ledger checks its registry).
    pub answer_key: Option<WorkerKey>,
}

impl WorkerEndpoint {
    /// An authenticated worker at `base`.
    pub fn new(base: impl Into<String>, secret: DeliverySecret, answer_key: WorkerKey) -> Self {
        Self {
            base: base.into(),
            secret: Some(secret),
            answer_key: Some(answer_key),
        }
    }

    /// A worker at `base` reached without authentication (insecure: benchmarks only).
    pub fn insecure(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            secret: None,
            answer_key: None,
        }
    }
}

/// Configuration of a [`Dispatcher`].
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// The workers; `pool.workers` must match its length.
    pub workers: Vec<WorkerEndpoint>,
    /// The chain whose outbox is delivered (at most [`contract::MAX_CHAIN_ID_BYTES`]).
    pub chain_id: Vec<u8>,
    /// The dispatcher's key id (the sender name workers know its secrets by).
    pub key_id: String,
    /// Allow workers without a secret (insecure: anyone reaching such a worker can make it
    /// perform effects; benchmarks of the unauthenticated path only).
    pub allow_unauthenticated: bool,
    /// The pool's decision settings.
    pub pool: PoolConfig,
    /// Largest answer accepted: what the ledger accepts ([`max_answer_bytes`] of the outbox's
    /// limits). A longer one gives the record up (dead letter), never acknowledges it done.
    pub max_answer_bytes: usize,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
    /// Which answers' signatures the dispatcher verifies itself (every response's MAC is
    /// always checked; the ledger verifies every signature).
    pub verify_answers: AnswerVerification,
}

impl DispatcherConfig {
    /// A configuration delivering chain `chain_id` as `key_id` to `workers`, with the default
    /// pool settings and the answer bound of an outbox of default limits.
    pub fn new(
        chain_id: impl Into<Vec<u8>>,
        key_id: impl Into<String>,
        workers: Vec<WorkerEndpoint>,
    ) -> Self {
        let pool = PoolConfig::new(workers.len());
        Self {
            workers,
            chain_id: chain_id.into(),
            key_id: key_id.into(),
            allow_unauthenticated: false,
            pool,
            max_answer_bytes: max_answer_bytes(&OutboxLimits::default()),
            connect_timeout_ms: 1_000,
            verify_answers: AnswerVerification::default(),
        }
    }

    /// Unauthenticated deliveries to `bases` (see [`Self::allow_unauthenticated`]): the
    /// benchmark's baseline.
    pub fn insecure(bases: Vec<String>) -> Self {
        let mut cfg = Self::new(
            Vec::new(),
            "insecure",
            bases.into_iter().map(WorkerEndpoint::insecure).collect(),
        );
        cfg.allow_unauthenticated = true;
        cfg
    }

    /// With the answer bound of an outbox of `limits`.
    pub fn with_outbox_limits(mut self, limits: &OutboxLimits) -> Self {
        self.max_answer_bytes = max_answer_bytes(limits);
        self
    }
}

/// Why the dispatcher could not start or step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliverError {
    /// The pool configuration is invalid.
    #[error(transparent)]
    Pool(#[from] PoolConfigError),
    /// A worker URI does not parse, or the worker list does not match the pool.
    #[error("bad worker address: {0}")]
    Worker(String),
    /// Authentication is misconfigured: a worker without a secret (and unauthenticated
    /// deliveries not allowed), a bad key id or chain id.
    #[error("delivery authentication: {0}")]
    Auth(String),
    /// The consumer's store failed (its in-memory state is kept; the next step retries).
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
}

/// Why a [`ResultSink`] did not take a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("result sink: {0}")]
pub struct ResultSinkError(pub String);

/// Where results go before the consumer moves past their records: it must keep what it takes
/// (durably, for a consumer that must survive its own crash) until the ledger applied it.
pub trait ResultSink {
    /// Takes `result`; an error leaves its record unacknowledged (delivered again later).
    fn offer(&mut self, result: OutboxResult) -> Result<(), ResultSinkError>;
}

impl ResultSink for Vec<OutboxResult> {
    fn offer(&mut self, result: OutboxResult) -> Result<(), ResultSinkError> {
        self.push(result);
        Ok(())
    }
}

/// The durable sink: a result is fsynced before the consumer may acknowledge its record, and
/// stays pending until marked applied ([`ResultJournal::mark_applied`]); after a restart its
/// [`ResultJournal::pending`] results are sent again.
impl ResultSink for ResultJournal {
    fn offer(&mut self, result: OutboxResult) -> Result<(), ResultSinkError> {
        self.take(result)
            .map(|_| ())
            .map_err(|e| ResultSinkError(e.to_string()))
    }
}

impl<T: ResultSink + ?Sized> ResultSink for &mut T {
    fn offer(&mut self, result: OutboxResult) -> Result<(), ResultSinkError> {
        (**self).offer(result)
    }
}

/// Counters of a [`Dispatcher`] (observation only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Requests sent.
    pub attempts: u64,
    /// Records done.
    pub done: u64,
    /// Answers the worker replayed from memory (a repeat of an id it had performed).
    pub replayed: u64,
    /// Attempts that failed and were left to the consumer's retry.
    pub retries: u64,
    /// Records given up (dead letters).
    pub given_up: u64,
    /// Deliveries no worker could take because none was up (reported to the consumer as a
    /// failed attempt: it retries after its backoff).
    pub no_worker: u64,
    /// Deliveries that waited in the dispatcher for a free slot (a worker was up, every
    /// healthy one was full): started, in index order, as soon as a slot freed, never failed
    /// for it.
    pub waited_for_room: u64,
    /// Attempts that timed out.
    pub timeouts: u64,
    /// Attempts that ended in a transport error.
    pub transport_errors: u64,
    /// Probes sent.
    pub probes: u64,
    /// Results the sink refused.
    pub sink_failures: u64,
    /// Deliveries a worker refused as not authenticated (401: a misconfigured secret, key id,
    /// chain or clock).
    pub unauthorized: u64,
    /// Answers without a valid signature by the expected key (retried elsewhere).
    pub bad_answers: u64,
    /// Answers longer than the ledger accepts (given up).
    pub answers_too_large: u64,
    /// Ed25519 verifications made (answers of one signed batch share one).
    pub signature_checks: u64,
    /// Attempts by how they ended (the worker's or the server's refusal reason).
    pub outcomes: AttemptCounts,
}

/// What an attempt's response showed besides its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    Unauthorized,
    BadAnswer,
    AnswerTooLarge,
}

struct Reply {
    outcome: AttemptOutcome,
    kind: AttemptKind,
    /// The refusal's `Retry-After` (milliseconds).
    retry_after_ms: Option<u64>,
    replayed: bool,
    proof: Option<AnswerProof>,
    note: Option<Note>,
}

impl Reply {
    fn plain(outcome: AttemptOutcome, kind: AttemptKind) -> Self {
        Self {
            outcome,
            kind,
            retry_after_ms: None,
            replayed: false,
            proof: None,
            note: None,
        }
    }
}

enum Event {
    Attempt {
        index: u64,
        attempt: u32,
        worker: WorkerId,
        reply: Reply,
    },
    Probe {
        worker: WorkerId,
        ok: bool,
    },
}

struct InFlight {
    attempt: u32,
    delivery: Delivery,
}

/// The HTTP delivery shell (see the module documentation).
pub struct Dispatcher {
    cfg: DispatcherConfig,
    pool: Pool,
    client: Client<HttpConnector, Full<Bytes>>,
    probe_client: Client<HttpConnector, Empty<Bytes>>,
    deliver_uris: Vec<Uri>,
    health_uris: Vec<Uri>,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    tasks: JoinSet<()>,
    clock: Clock,
    unix_clock: UnixClock,
    answer_keys: Arc<[WorkerKey]>,
    verified: Arc<VerifiedRoots>,
    /// The chain id, shared by the attempts, and its hex header value.
    chain_id: Arc<[u8]>,
    chain_hex: hyper::header::HeaderValue,
    in_flight: BTreeMap<u64, InFlight>,
    /// Deliveries waiting for a free slot at a healthy worker, by index, with when they began
    /// to wait (at most the consumer's `max_processing`: each is a delivery it handed out).
    waiting: BTreeMap<u64, (Delivery, TimeMs)>,
    stats: DispatchStats,
    /// The figures its metrics endpoint serves, refreshed at the end of every step.
    metrics: DispatchMetrics,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("workers", &self.cfg.workers)
            .field("in_flight", &self.in_flight.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn uri(base: &str, path: &str) -> Result<Uri, DeliverError> {
    format!("{}{path}", base.trim_end_matches('/'))
        .parse::<Uri>()
        .map_err(|e| DeliverError::Worker(format!("{base}: {e}")))
}

/// `reason` cut to at most `max` bytes (on a character boundary): a dead letter the ledger
/// accepts.
fn bounded(mut reason: String, max: usize) -> String {
    if reason.len() > max {
        let mut cut = max.saturating_sub(3);
        while cut > 0 && !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        if max >= 3 {
            reason.push_str("...");
        }
    }
    reason
}

impl Dispatcher {
    /// A dispatcher for `cfg`'s workers, reading time from `clock`. Call it inside a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`DeliverError::Pool`], [`DeliverError::Worker`].
    pub fn new(cfg: DispatcherConfig, clock: Clock) -> Result<Self, DeliverError> {
        if cfg.chain_id.len() > contract::MAX_CHAIN_ID_BYTES {
            return Err(DeliverError::Auth(format!(
                "a chain id of {} bytes (at most {})",
                cfg.chain_id.len(),
                contract::MAX_CHAIN_ID_BYTES
            )));
        }
        if !auth::valid_key_id(&cfg.key_id) {
            return Err(DeliverError::Auth(format!("bad key id {:?}", cfg.key_id)));
        }
        if let Some(w) = cfg
            .workers
            .iter()
            .find(|w| w.secret.is_none() && !cfg.allow_unauthenticated)
        {
            return Err(DeliverError::Auth(format!(
                "worker {} has no secret and unauthenticated deliveries are not allowed",
                w.base
            )));
        }
        if cfg.workers.iter().any(|w| w.secret.is_none()) {
            tracing::warn!("delivering unauthenticated to some workers (insecure)");
        }
        if cfg.workers.len() != cfg.pool.workers {
            return Err(DeliverError::Worker(format!(
                "{} worker addresses for a pool of {}",
                cfg.workers.len(),
                cfg.pool.workers
            )));
        }
        let pool = Pool::new(cfg.pool.clone())?;
        let deliver_uris = cfg
            .workers
            .iter()
            .map(|w| uri(&w.base, contract::DELIVER_PATH))
            .collect::<Result<Vec<_>, _>>()?;
        let health_uris = cfg
            .workers
            .iter()
            .map(|w| uri(&w.base, contract::HEALTH_PATH))
            .collect::<Result<Vec<_>, _>>()?;
        let answer_keys: Vec<WorkerKey> = cfg.workers.iter().filter_map(|w| w.answer_key).collect();
        let workers = cfg.workers.len();
        let chain_id: Arc<[u8]> = cfg.chain_id.clone().into();
        let chain_hex = hyper::header::HeaderValue::from_str(&to_hex(&cfg.chain_id))
            .map_err(|e| DeliverError::Auth(format!("chain id: {e}")))?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(cfg.connect_timeout_ms)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(cfg.pool.max_in_flight_per_worker)
            .build(connector.clone());
        let probe_client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build(connector);
        // Every task sends exactly one event: attempts are bounded by the workers' room,
        // probes by the number of workers.
        let capacity = cfg
            .pool
            .workers
            .saturating_mul(cfg.pool.max_in_flight_per_worker.saturating_add(1))
            .max(1);
        let (tx, rx) = mpsc::channel(capacity);
        Ok(Self {
            cfg,
            pool,
            client,
            probe_client,
            deliver_uris,
            health_uris,
            tx,
            rx,
            tasks: JoinSet::new(),
            clock,
            unix_clock: Arc::new(auth::unix_now_ms),
            verified: Arc::new(VerifiedRoots {
                keys: answer_keys
                    .iter()
                    .filter_map(|k| Some((*k, PreparedKey::new(k)?)))
                    .collect(),
                per_worker: (0..workers)
                    .map(|_| std::sync::atomic::AtomicU64::new(0))
                    .collect(),
                ..VerifiedRoots::default()
            }),
            answer_keys: answer_keys.into(),
            chain_id,
            chain_hex,
            in_flight: BTreeMap::new(),
            waiting: BTreeMap::new(),
            stats: DispatchStats::default(),
            metrics: DispatchMetrics::default(),
        })
    }

    /// With `clock` as the Unix clock of delivery timestamps (milliseconds; the system clock by
    /// default).
    pub fn with_unix_clock(mut self, clock: UnixClock) -> Self {
        self.unix_clock = clock;
        self
    }

    /// The pool's decision state.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The counters.
    pub fn stats(&self) -> DispatchStats {
        DispatchStats {
            signature_checks: self
                .verified
                .checks
                .load(std::sync::atomic::Ordering::Relaxed),
            ..self.stats
        }
    }

    /// Attempts awaiting their answer.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Its figures for a metrics endpoint ([`metrics_router`], [`serve_metrics`]): a shared
    /// handle, refreshed at the end of every [`step`](Self::step).
    pub fn metrics(&self) -> DispatchMetrics {
        self.metrics.clone()
    }

    fn publish_metrics(&self, progress: u64, head: u64) {
        self.metrics.set(DispatchFigures {
            stats: self.stats(),
            pool: self.pool.stats(),
            in_flight: self.in_flight.len() as u64,
            waiting: self.waiting.len() as u64,
            progress,
            head,
            workers: (0..self.cfg.pool.workers)
                .map(|w| WorkerFigures {
                    up: metrics::is_up(self.pool.health(w)),
                    in_flight: self.pool.in_flight(w) as u64,
                })
                .collect(),
        });
    }

    /// One round (see the module documentation): probes, new attempts, then completions that
    /// arrive within `max_wait` (or by the next timer).
    ///
    /// # Errors
    /// [`DeliverError::Consumer`] when the consumer's store fails (nothing is lost: what was
    /// not persisted is retried by the next step, undelivered records time out and are sent
    /// again).
    pub async fn step<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        jobs: &impl Jobs,
        sink: &mut impl ResultSink,
        max_wait: Duration,
    ) -> Result<(), DeliverError> {
        // Reap finished tasks so the set stays as small as the work in flight.
        while self.tasks.try_join_next().is_some() {}
        let now = (self.clock)();
        for w in self.pool.probes_due(now) {
            self.spawn_probe(w);
        }
        self.start_waiting(consumer, sink, now)?;
        for d in consumer.poll(jobs, now)? {
            // The progress a worker may forget: persisted, so never re-delivered.
            let progress = consumer.persisted_progress();
            self.start(consumer, sink, d, progress, now)?;
        }
        let now = (self.clock)();
        let wake = [
            consumer.consumer().next_wakeup_ms(),
            self.pool.next_wakeup_ms(),
        ]
        .into_iter()
        .flatten()
        .min();
        let wait = match wake {
            Some(t) => Duration::from_millis(u64::try_from(t.saturating_sub(now)).unwrap_or(0))
                .min(max_wait),
            None => max_wait,
        };
        if let Ok(Some(ev)) = tokio::time::timeout(wait, self.rx.recv()).await {
            self.apply(consumer, sink, ev)?;
        }
        while let Ok(ev) = self.rx.try_recv() {
            self.apply(consumer, sink, ev)?;
        }
        // The slots those completions freed go to the deliveries waiting for one, now.
        let now = (self.clock)();
        self.start_waiting(consumer, sink, now)?;
        self.publish_metrics(consumer.persisted_progress(), jobs.head());
        Ok(())
    }

    /// Deliveries waiting for a free slot.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Starts the deliveries waiting for a slot, lowest index first, while the pool has room.
    /// One that waited past the consumer's acknowledgement timeout is dropped: the consumer
    /// has expired that attempt and hands the record out again (or dead-letters it).
    fn start_waiting<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        sink: &mut impl ResultSink,
        now: TimeMs,
    ) -> Result<(), DeliverError> {
        let ack_timeout_ms = consumer.consumer().config().ack_timeout_ms;
        while let Some((&index, &(_, since))) = self.waiting.first_key_value() {
            let expired = now.saturating_sub(since) >= ack_timeout_ms;
            if !expired && !self.pool.has_room(now) {
                break;
            }
            let Some((d, since)) = self.waiting.remove(&index) else {
                break;
            };
            if expired {
                self.pool.forget(index);
                tracing::debug!(index, "delivery waited past the acknowledgement timeout");
                continue;
            }
            let progress = consumer.persisted_progress();
            self.start_from(consumer, sink, d, progress, now, Some(since))?;
            if self.waiting.contains_key(&index) {
                // Waiting again (the room was not for its handler's workers): later.
                break;
            }
        }
        Ok(())
    }

    fn start<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        sink: &mut impl ResultSink,
        d: Delivery,
        progress: u64,
        now: TimeMs,
    ) -> Result<(), DeliverError> {
        // A newer attempt of a record that was waiting replaces it.
        self.waiting.remove(&d.index);
        self.start_from(consumer, sink, d, progress, now, None)
    }

    /// Assigns and sends `d`; `waiting_since`: it waited for a slot since then.
    fn start_from<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        sink: &mut impl ResultSink,
        d: Delivery,
        progress: u64,
        now: TimeMs,
        waiting_since: Option<TimeMs>,
    ) -> Result<(), DeliverError> {
        let r = &d.record;
        match self
            .pool
            .assign(d.index, &r.id, &r.handler, &r.payload, now)
        {
            Ok(w) => {
                self.spawn_attempt(w, &d, progress);
                self.in_flight.insert(
                    d.index,
                    InFlight {
                        attempt: d.attempt,
                        delivery: d,
                    },
                );
            }
            Err(AssignError::TimeToRun { .. }) => {
                let reason = "time-to-run ran out before an attempt could start".to_string();
                self.pool.forget(d.index);
                self.give_up(consumer, sink, &d, reason, now)?;
            }
            Err(AssignError::NoWorker) if self.pool.any_up() => {
                // Healthy workers, all full: wait for a slot here rather than fail the
                // attempt (the consumer would back off, and hand out newer records instead).
                if waiting_since.is_none() {
                    self.stats.waited_for_room += 1;
                }
                self.waiting
                    .insert(d.index, (d, waiting_since.unwrap_or(now)));
            }
            Err(e) => {
                self.stats.no_worker += 1;
                tracing::debug!(index = d.index, id = %r.id, error = %e, "no worker for delivery");
                consumer.on_ack(
                    d.index,
                    d.attempt,
                    AckOutcome::Failed {
                        reason: e.to_string(),
                    },
                    now,
                )?;
            }
        }
        Ok(())
    }

    fn give_up<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        sink: &mut impl ResultSink,
        d: &Delivery,
        reason: String,
        now: TimeMs,
    ) -> Result<(), DeliverError> {
        let reason = bounded(reason, self.cfg.max_answer_bytes);
        let result = OutboxResult::dead_letter(d.index, d.record.id, reason.clone());
        if let Err(e) = sink.offer(result) {
            // Not given up: the consumer's timeout brings the record back.
            self.stats.sink_failures += 1;
            tracing::error!(index = d.index, id = %d.record.id, error = %e, "dead-letter result not taken");
            return Ok(());
        }
        self.stats.given_up += 1;
        tracing::warn!(index = d.index, id = %d.record.id, %reason, "record given up");
        consumer.give_up(d.index, d.attempt, FailureReason::Failed(reason), now)?;
        Ok(())
    }

    fn apply<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        sink: &mut impl ResultSink,
        ev: Event,
    ) -> Result<(), DeliverError> {
        let now = (self.clock)();
        let (index, attempt, worker, reply) = match ev {
            Event::Probe { worker, ok } => {
                self.pool.on_probe(worker, ok, now);
                return Ok(());
            }
            Event::Attempt {
                index,
                attempt,
                worker,
                reply,
            } => (index, attempt, worker, reply),
        };
        let Reply {
            outcome,
            kind,
            retry_after_ms,
            replayed,
            proof,
            note,
        } = reply;
        self.stats.outcomes.add(kind);
        if let Some(ms) = retry_after_ms {
            // "Not before then" from this worker (its rate limit, or its own 503): it gets
            // nothing until that time; the record fails over to another worker meanwhile.
            let ms = TimeMs::try_from(ms).unwrap_or(TimeMs::MAX);
            self.pool.pause(worker, now.saturating_add(ms));
        }
        let Some(flight) = self.in_flight.remove(&index) else {
            return Ok(());
        };
        if flight.attempt != attempt {
            self.in_flight.insert(index, flight);
            return Ok(());
        }
        let d = flight.delivery;
        match &outcome {
            AttemptOutcome::Timeout => self.stats.timeouts += 1,
            AttemptOutcome::Transport(_) => self.stats.transport_errors += 1,
            _ => {}
        }
        match note {
            Some(Note::Unauthorized) => {
                self.stats.unauthorized += 1;
                tracing::error!(
                    index,
                    worker,
                    "the worker refuses our credentials (check its secret, key id, chain and clock)"
                );
            }
            Some(Note::BadAnswer) => self.stats.bad_answers += 1,
            Some(Note::AnswerTooLarge) => self.stats.answers_too_large += 1,
            None => {}
        }
        match self
            .pool
            .on_outcome(index, &d.record.handler, worker, outcome, now)
        {
            Verdict::Done(body) => {
                let result = OutboxResult {
                    index,
                    id: d.record.id,
                    outcome: ccron::outbox::ResultOutcome::Answer(body),
                    proof,
                };
                if let Err(e) = sink.offer(result) {
                    self.stats.sink_failures += 1;
                    tracing::error!(index, id = %d.record.id, error = %e, "answer not taken; the record will be delivered again");
                    return Ok(());
                }
                self.stats.done += 1;
                if replayed {
                    self.stats.replayed += 1;
                }
                consumer.on_ack(index, attempt, AckOutcome::Done, now)?;
            }
            Verdict::Retry(reason) => {
                self.stats.retries += 1;
                tracing::debug!(index, id = %d.record.id, worker, %reason, "attempt failed; retry");
                consumer.on_ack(index, attempt, AckOutcome::Failed { reason }, now)?;
            }
            Verdict::GiveUp(reason) => self.give_up(consumer, sink, &d, reason, now)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attempt::classify;

    #[test]
    fn responses_are_read_as_the_contract_says() {
        let c = |code: u16| classify(StatusCode::from_u16(code).unwrap(), b"why".to_vec());
        assert_eq!(c(200), AttemptOutcome::Done(b"why".to_vec()));
        assert_eq!(c(204), AttemptOutcome::Done(b"why".to_vec()));
        for transient in [401, 408, 429, 500, 502, 503, 504, 302, 101] {
            assert!(
                matches!(c(transient), AttemptOutcome::Failed(_)),
                "{transient}"
            );
            assert!(c(transient).is_worker_fault());
        }
        for permanent in [400, 404, 409, 410, 413, 422] {
            let o = c(permanent);
            assert!(
                matches!(&o, AttemptOutcome::Rejected(r) if r.contains("why")),
                "{o:?}"
            );
            assert!(!o.is_worker_fault());
        }
        let long = classify(StatusCode::BAD_REQUEST, vec![b'x'; 10_000]);
        assert!(matches!(long, AttemptOutcome::Rejected(r) if r.len() < 300));
    }

    #[test]
    fn a_dispatcher_checks_its_worker_list_and_credentials() {
        let clock: Clock = Arc::new(|| 0);
        let mut cfg = DispatcherConfig::insecure(vec!["http://127.0.0.1:1".into()]);
        cfg.pool.workers = 2;
        assert!(matches!(
            Dispatcher::new(cfg, clock.clone()),
            Err(DeliverError::Worker(_))
        ));
        let cfg = DispatcherConfig::insecure(vec!["not a uri\u{0}".into()]);
        assert!(matches!(
            Dispatcher::new(cfg, clock.clone()),
            Err(DeliverError::Worker(_))
        ));
        // A worker without a secret needs an explicit opt-in.
        let mut cfg = DispatcherConfig::insecure(vec!["http://127.0.0.1:1".into()]);
        cfg.allow_unauthenticated = false;
        assert!(matches!(
            Dispatcher::new(cfg, clock.clone()),
            Err(DeliverError::Auth(_))
        ));
        let secret = DeliverySecret::new(vec![1; 32]).unwrap();
        let key = ccron::outbox::WorkerSigner::from_seed([1; 32]).public();
        let endpoint = WorkerEndpoint::new("http://127.0.0.1:1", secret, key);
        for (chain, key_id) in [(vec![0; 65], "k"), (vec![1], ""), (vec![1], "a b")] {
            let cfg = DispatcherConfig::new(chain, key_id, vec![endpoint.clone()]);
            assert!(matches!(
                Dispatcher::new(cfg, clock.clone()),
                Err(DeliverError::Auth(_))
            ));
        }
        let cfg = DispatcherConfig::new(b"c".to_vec(), "consumer", vec![endpoint]);
        assert!(Dispatcher::new(cfg, clock).is_ok());
    }

    #[test]
    fn answer_paths_parse_strictly() {
        let h = "ab".repeat(32);
        assert_eq!(parse_answer_path(None), Ok(vec![]));
        assert_eq!(parse_answer_path(Some("")), Ok(vec![]));
        assert_eq!(
            parse_answer_path(Some(&format!("l{h},r{h}"))),
            Ok(vec![
                PathStep {
                    left: true,
                    hash: [0xab; 32]
                },
                PathStep {
                    left: false,
                    hash: [0xab; 32]
                }
            ])
        );
        for bad in [
            format!("x{h}"),
            format!("l{h},"),
            "l00".to_string(),
            vec![format!("l{h}"); MAX_PROOF_STEPS + 1].join(","),
        ] {
            assert!(parse_answer_path(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn dead_letter_reasons_are_cut_to_the_bound() {
        assert_eq!(bounded("abc".into(), 10), "abc");
        assert_eq!(bounded("abcdefghijk".into(), 8), "abcde...");
        assert_eq!(bounded("ééééé".into(), 6).len(), 5);
        assert!(bounded("x".repeat(100), 2).len() <= 2);
    }
}
