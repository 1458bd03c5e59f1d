//! [`Relay`]: the ready consumer of a ledger's outbox. It reads the committed outbox by quorum
//! ([`QuorumReader`]: a record is believed only when f+1 replicas return it identically),
//! delivers it to the worker pool ([`Dispatcher`], authenticated, with retries and dead
//! letters), keeps every result durably ([`ResultJournal`]) and submits it back to the ledger
//! through [`Submit`], re-sending until f+1 replicas show it applied; then it reports its
//! progress so the ledger trims the outbox (never past a record whose result is still
//! pending, so every result reaches its emitter).
//!
//! What the relay needs from the ledger's side is one [`Submit`]: "send this payload as a
//! signed request of the outbox consumer" (`Policy::outbox_consumer`). sim-bft's threaded
//! runtime has one (`sim_bft::runtime::ClusterSubmit`); the nodes of the real engine have
//! `ccron_node::submit::NodeSubmit` (signed requests to every node's `POST /v1/requests`, the
//! same number for a re-sent payload, results read back by f+1), and the operator's binary
//! runs the whole relay: `ccron relay --nodes ... --key ... --workers ...`.
//!
//! Nothing is dropped silently: a submit that fails is a typed [`SubmitError`], counted in
//! [`RelayStats`] and traced, and the result stays in the journal until f+1 replicas show it
//! applied, re-sent every `resend_after_ms`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use ccron::outbox::{
    ConsumerConfig, ConsumerError, FileDeadLetters, FileProgressStore, JournalError, JournalLimits,
    OutboxResult, PersistentConsumer, ResultJournal,
};

use crate::deliver::{
    Clock, DeliverError, Dispatcher, DispatcherConfig, ResultSink, ResultSinkError,
};
use crate::read::{QuorumReader, ReadClientConfig, ReadError};

pub mod metrics;

pub use metrics::{RelayFigures, RelayMetrics};

/// Why a [`Submit`] did not send a payload. The relay counts and traces each one and sends
/// the payload again later (its result stays journaled until f+1 replicas show it applied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// No replica took it (unreachable, busy, its queue full): sent again later.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The submitter's window of requests awaiting execution is full (pacing: a request too
    /// far behind the client's newest executed one would be refused by the replicas). Nothing
    /// was sent.
    #[error("{in_flight} requests await execution: the window is full")]
    WindowFull {
        /// Requests awaiting execution.
        in_flight: usize,
    },
    /// The replicas refused the request itself (malformed, over a bound, a bad signature):
    /// sending it again does not help until the configuration changes.
    #[error("refused: {0}")]
    Refused(String),
}

/// Sends a payload to the ledger as a signed client request of the outbox consumer. The relay
/// re-sends an equal payload until f+1 replicas show it applied; a submitter may re-send it
/// under the same request number (the ledger executes each number once) or a new one (the
/// ledger applies each result once).
pub trait Submit: Send {
    /// Sends `payload`.
    ///
    /// # Errors
    /// Why it was not sent ([`SubmitError`]; counted and traced, the relay re-sends).
    fn submit(&mut self, payload: Vec<u8>) -> impl Future<Output = Result<(), SubmitError>> + Send;

    /// Called once per [`Relay::step`]: a submitter catches up on what it sent (e.g. reads the
    /// results of its requests to free its window). Nothing by default.
    fn poll(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// What a [`Relay`] runs with.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The replicas' read endpoints and the quorum (f + 1).
    pub read: ReadClientConfig,
    /// The worker pool and the delivery credentials.
    pub dispatcher: DispatcherConfig,
    /// The consumer's bounds, retries and dead-letter limit.
    pub consumer: ConsumerConfig,
    /// Where the progress, dead letters and results journal live (created if missing).
    pub dir: PathBuf,
    /// A result (or progress report) not seen applied by f+1 replicas after this long is sent
    /// again.
    pub resend_after_ms: i64,
    /// Longest one [`Relay::step`] waits for deliveries to complete.
    pub step_wait: Duration,
    /// Whether to report progress (trim the ledger's outbox).
    pub report_progress: bool,
}

/// Why the relay stopped a step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The read client could not be built.
    #[error("read client: {0}")]
    Read(#[from] ReadError),
    /// The dispatcher failed (its consumer's store).
    #[error(transparent)]
    Deliver(#[from] DeliverError),
    /// The consumer's files failed.
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    /// The results journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The directory could not be created.
    #[error("relay directory: {0}")]
    Dir(std::io::Error),
}

/// Counters of a [`Relay`] (observation only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// The consumer's persisted progress.
    pub progress: u64,
    /// Results journaled and not yet seen applied by f+1 replicas.
    pub pending_results: usize,
    /// Results submitted (first sends).
    pub results_sent: u64,
    /// Results and progress reports sent again.
    pub resent: u64,
    /// Submits that failed (sent again later), of every [`SubmitError`].
    pub submit_failures: u64,
    /// Of those, [`SubmitError::WindowFull`] (pacing).
    pub submit_paced: u64,
    /// Of those, [`SubmitError::Refused`] (the request itself refused).
    pub submit_refused: u64,
    /// The last progress reported to the ledger.
    pub reported_progress: u64,
}

/// The durable result sink: journal first; [`Relay::step`] submits what it took.
struct Results<S> {
    journal: ResultJournal,
    submit: S,
    clock: Clock,
    /// Record index -> when its result was last sent.
    sent_at: BTreeMap<u64, i64>,
    /// Journaled results not sent yet.
    unsent: BTreeSet<u64>,
    stats: RelayStats,
}

impl<S: Submit> Results<S> {
    async fn send(&mut self, index: u64) {
        let Some(payload) = self
            .journal
            .pending()
            .find(|r| r.index == index)
            .and_then(|r| r.to_payload().ok())
        else {
            return;
        };
        let now = (self.clock)();
        if let Err(e) = self.submit.submit(payload).await {
            self.stats.count_failure(&e);
            tracing::warn!(index, error = %e, "result not submitted: sent again later");
        }
        self.sent_at.insert(index, now);
    }
}

impl RelayStats {
    fn count_failure(&mut self, e: &SubmitError) {
        self.submit_failures += 1;
        match e {
            SubmitError::WindowFull { .. } => self.submit_paced += 1,
            SubmitError::Refused(_) => self.submit_refused += 1,
            SubmitError::NotSent(_) => {}
        }
    }
}

impl<S: Submit> ResultSink for Results<S> {
    fn offer(&mut self, result: OutboxResult) -> Result<(), ResultSinkError> {
        let index = result.index;
        self.journal
            .take(result)
            .map_err(|e| ResultSinkError(e.to_string()))?;
        if !self.sent_at.contains_key(&index) {
            self.unsent.insert(index);
        }
        Ok(())
    }
}

/// The ready consumer (see the module documentation).
pub struct Relay<S> {
    cfg: RelayConfig,
    reader: QuorumReader,
    results_reader: QuorumReader,
    dispatcher: Dispatcher,
    consumer: PersistentConsumer<FileProgressStore, FileDeadLetters>,
    results: Results<S>,
    /// The last progress reported and when.
    reported: (u64, i64),
    /// Steps completed.
    steps: u64,
    /// The figures the metrics endpoint shows, published at the end of every step.
    metrics: RelayMetrics,
}

impl<S> std::fmt::Debug for Relay<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("progress", &self.consumer.persisted_progress())
            .field("stats", &self.results.stats)
            .finish_non_exhaustive()
    }
}

impl<S: Submit> Relay<S> {
    /// Opens the relay's files in `cfg.dir` (a restart resumes from them: progress, dead
    /// letters, and every result still pending is sent again at the first step) and its
    /// clients.
    ///
    /// # Errors
    /// [`RelayError`] for the directory, files and clients.
    pub fn open(cfg: RelayConfig, clock: Clock, submit: S) -> Result<Self, RelayError> {
        std::fs::create_dir_all(&cfg.dir).map_err(RelayError::Dir)?;
        let consumer = PersistentConsumer::open(
            cfg.consumer,
            FileProgressStore::new(cfg.dir.join("progress")),
            FileDeadLetters::new(cfg.dir.join("dead-letters")),
        )?;
        let journal = ResultJournal::open(cfg.dir.join("results"), JournalLimits::default())?;
        let mut results = Results {
            journal,
            submit,
            clock: clock.clone(),
            sent_at: BTreeMap::new(),
            unsent: BTreeSet::new(),
            stats: RelayStats::default(),
        };
        // Every result still pending is sent again at the first step.
        results.unsent = results.journal.pending().map(|r| r.index).collect();
        let dispatcher = Dispatcher::new(cfg.dispatcher.clone(), clock)?;
        let metrics = RelayMetrics::new(dispatcher.metrics());
        let relay = Self {
            reader: QuorumReader::new(cfg.read.clone())?,
            results_reader: QuorumReader::new(cfg.read.clone())?,
            dispatcher,
            consumer,
            results,
            reported: (0, i64::MIN),
            steps: 0,
            metrics,
            cfg,
        };
        relay.publish();
        Ok(relay)
    }

    /// One round: read new records by quorum, deliver, take results, submit them, mark those
    /// f+1 replicas show applied, re-send the overdue, report progress.
    ///
    /// # Errors
    /// [`RelayError`] when a store fails (nothing is lost: the next step retries).
    pub async fn step(&mut self) -> Result<RelayStats, RelayError> {
        self.reader
            .refresh(self.consumer.consumer().progress().saturating_add(1))
            .await;
        self.dispatcher
            .step(
                &mut self.consumer,
                self.reader.jobs(),
                &mut self.results,
                self.cfg.step_wait,
            )
            .await?;
        self.results.submit.poll().await;
        let unsent = std::mem::take(&mut self.results.unsent);
        for index in unsent {
            self.results.stats.results_sent += 1;
            self.results.send(index).await;
        }
        let lowest = self.results.journal.pending().next().map(|r| r.index);
        if let Some(lowest) = lowest {
            self.results_reader.refresh(lowest).await;
            let quorum = self.cfg.read.quorum;
            let applied: Vec<u64> = self
                .results
                .journal
                .pending()
                .map(|r| r.index)
                .filter(|&i| self.results_reader.results_applied(i) >= quorum)
                .collect();
            for i in applied {
                self.results.journal.mark_applied(i)?;
                self.results.sent_at.remove(&i);
            }
            let now = (self.results.clock)();
            let overdue: Vec<u64> = self
                .results
                .sent_at
                .iter()
                .filter(|(_, t)| now.saturating_sub(**t) >= self.cfg.resend_after_ms)
                .map(|(i, _)| *i)
                .collect();
            for i in overdue {
                self.results.stats.resent += 1;
                self.results.send(i).await;
            }
        }
        self.report_progress().await;
        self.steps += 1;
        self.publish();
        Ok(self.stats())
    }

    /// Copies the counters into the metrics handle.
    fn publish(&self) {
        self.metrics.set(RelayFigures {
            stats: self.stats(),
            read_failures: self.read_failures(),
            steps: self.steps,
        });
    }

    /// The handle the metrics endpoint serves ([`crate::metrics_router`], [`crate::serve_metrics`]): the relay's figures
    /// as of its last step, beside its dispatcher's.
    pub fn metrics(&self) -> RelayMetrics {
        self.metrics.clone()
    }

    /// Reports the progress the ledger may trim to: the persisted progress, but never a record
    /// whose result is still pending (its emitter must get it).
    async fn report_progress(&mut self) {
        if !self.cfg.report_progress {
            return;
        }
        let mut upto = self.consumer.persisted_progress();
        if let Some(lowest) = self.results.journal.pending().next().map(|r| r.index) {
            upto = upto.min(lowest.saturating_sub(1));
        }
        let now = (self.results.clock)();
        let (last, at) = self.reported;
        let due = upto > last
            || (upto > 0 && upto == last && now.saturating_sub(at) >= self.cfg.resend_after_ms);
        if !due || upto == 0 {
            return;
        }
        if upto == last {
            self.results.stats.resent += 1;
        }
        let payload = ccron::host::scheduler::outbox_delivered_payload(upto);
        match self.results.submit.submit(payload).await {
            Ok(()) => self.reported = (upto, now),
            Err(e) => {
                self.results.stats.count_failure(&e);
                tracing::warn!(upto, error = %e, "progress not submitted: sent again later");
            }
        }
    }

    /// Steps until `done` holds for the stats or `deadline` passes; returns the last stats.
    ///
    /// # Errors
    /// As [`Relay::step`].
    pub async fn run_until(
        &mut self,
        deadline: Duration,
        mut done: impl FnMut(&RelayStats) -> bool,
    ) -> Result<RelayStats, RelayError> {
        let start = tokio::time::Instant::now();
        loop {
            let stats = self.step().await?;
            if done(&stats) || start.elapsed() >= deadline {
                return Ok(stats);
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            progress: self.consumer.persisted_progress(),
            pending_results: self.results.journal.pending_len(),
            reported_progress: self.reported.0,
            ..self.results.stats
        }
    }

    /// The dispatcher (its pool and stats).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// The submitter (e.g. to carry its request counter over to a restarted relay).
    pub fn submitter(&self) -> &S {
        &self.results.submit
    }

    /// Failed endpoint reads so far (both quorum readers; each is retried, never fatal).
    pub fn read_failures(&self) -> u64 {
        self.reader
            .endpoints()
            .iter()
            .chain(self.results_reader.endpoints())
            .map(|e| e.stats().failures)
            .sum()
    }
}
