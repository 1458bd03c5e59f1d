//! The IO shell: [`Dispatcher`] drives a ccron consumer, the [`Pool`]'s decisions and hyper.
//!
//! One [`Dispatcher::step`]:
//! 1. sends a probe (`GET` health, under the probe timeout) to every worker whose back-off ended;
//! 2. polls the [`PersistentConsumer`] for deliveries (retries first, then new records, within
//!    its in-flight and search-ahead bounds) and asks the pool for a worker for each; an
//!    assignment becomes a spawned `POST` under the handler's attempt timeout; no worker (all
//!    down or full) is reported to the consumer as a failed attempt, so it retries after its
//!    backoff; a time-to-run that ran out gives the record up;
//! 3. waits for the first completion (or the next timer, or `max_wait`), then applies every
//!    completion that arrived: the pool's [`Verdict`] becomes the consumer's acknowledgement,
//!    retry or dead letter.
//!
//! Results back: before a record is acknowledged done (or given up), its [`OutboxResult`] (the
//! worker's answer, or the dead letter) is offered to the [`ResultSink`]; only when the sink
//! took it does the consumer move on. A sink that fails leaves the record unacknowledged: it
//! times out and is delivered again (the worker answers the repeat from memory), so no result
//! is lost behind persisted progress. The ledger applies each result once
//! ([`ccron::outbox::Outbox::accept_result`]), so offering one twice is harmless.
//!
//! Bounds: attempts in flight ≤ workers × `max_in_flight_per_worker` (and the consumer's
//! `max_processing`); every request and probe has a timeout; answers are read up to
//! `max_answer_bytes`; the completion channel is sized for every task that can exist, so no
//! queue grows without bound. Dropping the dispatcher aborts its tasks (a killed consumer).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccron::TimeMs;
use ccron::outbox::{
    AckOutcome, ConsumerError, DeadLetterSink, Delivery, FailureReason, Jobs, OutboxResult,
    PersistentConsumer, ProgressStore, ResultOutcome,
};
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::contract;
use crate::pool::{
    AssignError, AttemptOutcome, Pool, PoolConfig, PoolConfigError, Verdict, WorkerId,
};

/// A source of milliseconds (injected: tests and the bench use their own).
pub type Clock = Arc<dyn Fn() -> TimeMs + Send + Sync>;

/// Configuration of a [`Dispatcher`].
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Base URI of each worker (`http://host:port`); `pool.workers` must match its length.
    pub workers: Vec<String>,
    /// The pool's decision settings.
    pub pool: PoolConfig,
    /// Largest answer body read from a worker; a longer one is a transport error.
    pub max_answer_bytes: usize,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
}

impl DispatcherConfig {
    /// A configuration for `workers` with the default pool settings.
    pub fn new(workers: Vec<String>) -> Self {
        let pool = PoolConfig::new(workers.len());
        Self {
            workers,
            pool,
            max_answer_bytes: 64 * 1024,
            connect_timeout_ms: 1_000,
        }
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
    /// Deliveries no worker could take.
    pub no_worker: u64,
    /// Attempts that timed out.
    pub timeouts: u64,
    /// Attempts that ended in a transport error.
    pub transport_errors: u64,
    /// Probes sent.
    pub probes: u64,
    /// Results the sink refused.
    pub sink_failures: u64,
}

enum Event {
    Attempt {
        index: u64,
        attempt: u32,
        worker: WorkerId,
        outcome: AttemptOutcome,
        replayed: bool,
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
    in_flight: BTreeMap<u64, InFlight>,
    stats: DispatchStats,
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

impl Dispatcher {
    /// A dispatcher for `cfg`'s workers, reading time from `clock`. Call it inside a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`DeliverError::Pool`], [`DeliverError::Worker`].
    pub fn new(cfg: DispatcherConfig, clock: Clock) -> Result<Self, DeliverError> {
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
            .map(|b| uri(b, contract::DELIVER_PATH))
            .collect::<Result<Vec<_>, _>>()?;
        let health_uris = cfg
            .workers
            .iter()
            .map(|b| uri(b, contract::HEALTH_PATH))
            .collect::<Result<Vec<_>, _>>()?;
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
            in_flight: BTreeMap::new(),
            stats: DispatchStats::default(),
        })
    }

    /// The pool's decision state.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The counters.
    pub fn stats(&self) -> DispatchStats {
        self.stats
    }

    /// Attempts awaiting their answer.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
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
        for d in consumer.poll(jobs, now)? {
            self.start(consumer, sink, d, now)?;
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
        Ok(())
    }

    fn start<P: ProgressStore, D: DeadLetterSink>(
        &mut self,
        consumer: &mut PersistentConsumer<P, D>,
        sink: &mut impl ResultSink,
        d: Delivery,
        now: TimeMs,
    ) -> Result<(), DeliverError> {
        let r = &d.record;
        match self
            .pool
            .assign(d.index, &r.id, &r.handler, &r.payload, now)
        {
            Ok(w) => {
                self.spawn_attempt(w, &d);
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
        let result = OutboxResult {
            index: d.index,
            id: d.record.id,
            outcome: ResultOutcome::DeadLetter(reason.clone()),
        };
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
        let (index, attempt, worker, outcome, replayed) = match ev {
            Event::Probe { worker, ok } => {
                self.pool.on_probe(worker, ok, now);
                return Ok(());
            }
            Event::Attempt {
                index,
                attempt,
                worker,
                outcome,
                replayed,
            } => (index, attempt, worker, outcome, replayed),
        };
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
        match self
            .pool
            .on_outcome(index, &d.record.handler, worker, outcome, now)
        {
            Verdict::Done(body) => {
                let result = OutboxResult {
                    index,
                    id: d.record.id,
                    outcome: ResultOutcome::Answer(body),
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

    fn spawn_attempt(&mut self, w: WorkerId, d: &Delivery) {
        let Some(base) = self.deliver_uris.get(w).cloned() else {
            return;
        };
        self.stats.attempts += 1;
        let policy = *self.cfg.pool.policy(&d.record.handler);
        let timeout = Duration::from_millis(u64::try_from(policy.attempt_timeout_ms).unwrap_or(1));
        let request = Request::post(base)
            .header(contract::IDEMPOTENCY_KEY, d.record.id.to_string())
            .header(contract::HANDLER, d.record.handler.as_str())
            .header(contract::OUTBOX_INDEX, d.index)
            .header(contract::ATTEMPT, d.attempt)
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::from(d.record.payload.clone())));
        let client = self.client.clone();
        let tx = self.tx.clone();
        let max = self.cfg.max_answer_bytes;
        let (index, attempt) = (d.index, d.attempt);
        let span = tracing::info_span!("delivery", id = %d.record.id, index, attempt, worker = w);
        self.tasks.spawn(
            async move {
                let (outcome, replayed) = match request {
                    Err(e) => (AttemptOutcome::Rejected(format!("bad request: {e}")), false),
                    Ok(req) => match tokio::time::timeout(timeout, post(&client, req, max)).await {
                        Err(_) => (AttemptOutcome::Timeout, false),
                        Ok(r) => r,
                    },
                };
                tracing::debug!(%outcome, "attempt finished");
                let _ = tx
                    .send(Event::Attempt {
                        index,
                        attempt,
                        worker: w,
                        outcome,
                        replayed,
                    })
                    .await;
            }
            .instrument(span),
        );
    }

    fn spawn_probe(&mut self, w: WorkerId) {
        let Some(uri) = self.health_uris.get(w).cloned() else {
            return;
        };
        self.stats.probes += 1;
        let client = self.probe_client.clone();
        let tx = self.tx.clone();
        let timeout = Duration::from_millis(
            u64::try_from(self.cfg.pool.health.probe_timeout_ms).unwrap_or(1),
        );
        self.tasks.spawn(async move {
            let ok = match Request::get(uri).body(Empty::new()) {
                Ok(req) => matches!(
                    tokio::time::timeout(timeout, client.request(req)).await,
                    Ok(Ok(resp)) if resp.status().is_success()
                ),
                Err(_) => false,
            };
            tracing::debug!(worker = w, ok, "probe finished");
            let _ = tx.send(Event::Probe { worker: w, ok }).await;
        });
    }
}

/// Sends one delivery and classifies the response per the contract.
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
    max_answer_bytes: usize,
) -> (AttemptOutcome, bool) {
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) => return (AttemptOutcome::Transport(e.to_string()), false),
    };
    let status = resp.status();
    let replayed = resp.headers().contains_key(contract::REPLAYED);
    let body = match Limited::new(resp.into_body(), max_answer_bytes)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes().to_vec(),
        Err(e) => {
            return (
                AttemptOutcome::Transport(format!("answer not read: {e}")),
                false,
            );
        }
    };
    (classify(status, body), replayed)
}

/// The contract's reading of a response: 2xx done, 408/429/5xx (and anything else that is not
/// a 4xx) failed for now, any other 4xx rejected for good.
fn classify(status: StatusCode, body: Vec<u8>) -> AttemptOutcome {
    if status.is_success() {
        AttemptOutcome::Done(body)
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || !status.is_client_error()
    {
        AttemptOutcome::Failed(status.to_string())
    } else {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        AttemptOutcome::Rejected(format!("{status}: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_read_as_the_contract_says() {
        let c = |code: u16| classify(StatusCode::from_u16(code).unwrap(), b"why".to_vec());
        assert_eq!(c(200), AttemptOutcome::Done(b"why".to_vec()));
        assert_eq!(c(204), AttemptOutcome::Done(b"why".to_vec()));
        for transient in [408, 429, 500, 502, 503, 504, 302, 101] {
            assert!(
                matches!(c(transient), AttemptOutcome::Failed(_)),
                "{transient}"
            );
            assert!(c(transient).is_worker_fault());
        }
        for permanent in [400, 404, 409, 413, 422] {
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
    fn a_dispatcher_checks_its_worker_list() {
        let clock: Clock = Arc::new(|| 0);
        let mut cfg = DispatcherConfig::new(vec!["http://127.0.0.1:1".into()]);
        cfg.pool.workers = 2;
        assert!(matches!(
            Dispatcher::new(cfg, clock.clone()),
            Err(DeliverError::Worker(_))
        ));
        let cfg = DispatcherConfig::new(vec!["not a uri\u{0}".into()]);
        assert!(matches!(
            Dispatcher::new(cfg, clock),
            Err(DeliverError::Worker(_))
        ));
    }
}
