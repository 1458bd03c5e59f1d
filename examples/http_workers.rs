//! Outbox records from a live cluster to HTTP workers, and the answers back into the ledger.
//!
//! 1. A threaded PBFT cluster (`sim_bft::runtime`, n = 4, f = 1, real time, real
//!    TicksGenerators) runs the orders ledger with payment confirmation
//!    (`ScheduledLedger::with_payment_confirmation`): a shop client places orders, each order's
//!    expiry task fires on agreed time and emits a `shop.cancel` outbox record; the order is
//!    *not* marked expired yet.
//! 2. Every replica serves its committed outbox on its own loopback read endpoint
//!    (`ThreadedCluster::serve_reads`, `ccron_http::read`); the consumer reads all four over
//!    HTTP (`QuorumReader`) and believes a record only when f+1 = 2 replicas return it
//!    identically (`QuorumJobs`); it also learns over HTTP which results f+1 replicas applied.
//!    With `--liar`, replica 0's endpoint serves altered and forged records: outvoted.
//! 3. A `ccron_http::Dispatcher` delivers each record over HTTP to three axum workers on
//!    loopback (sticky by order, failover, health with probes), every delivery authenticated
//!    (HMAC with each worker's secret); the workers deduplicate on (sender, occurrence id)
//!    through one shared idempotency store and answer `confirmed`, signed with their ed25519
//!    keys; worker 1 fails a third of its calls.
//! 4. Each answer goes into the consumer's durable `ResultJournal` (fsynced before the record
//!    is acknowledged), then back as a signed client request of the consumer identity
//!    (`OutboxResult`); the ledger believes it only because the workers' keys are registered
//!    for `shop.cancel` in its policy, and marks the order expired when it executes, once.
//! 5. Mid-run, worker 0 is killed (and restarted later) and the consumer is killed (its
//!    in-memory state and requests in flight are lost) and restarted from its files: progress,
//!    dead letters and the results not yet applied, which it sends again.
//!
//! The run checks that every effect was performed exactly once at the workers, and that on every
//! replica every record has exactly one result and every order was marked expired exactly once
//! (the check looks inside the replicas; the consumer itself only reads the network);
//! it prints a summary and exits non-zero otherwise (a 60 s guard turns a hang into a failure).
//!
//! Run: `cargo run --release --example http_workers -- --orders 200`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccron::outbox::{
    Backoff, ConsumerConfig, DedupeLimits, FileDeadLetters, FileProgressStore, JournalLimits,
    OccurrenceId, Outbox, OutboxRecord, OutboxResult, PersistentConsumer, ReadEntry, ReadPage,
    ResultJournal,
};
use ccron::schedule::ScheduleRequest;
use ccron_http::{
    Assignment, Dedupe, Dispatcher, DispatcherConfig, EffectError, HandlerPolicy, KeyOf,
    OutboxSource, PublishOutbox, PublishedOutbox, QuorumReader, ReadClientConfig, ReadServerConfig,
    ResultSink, ResultSinkError, Worker,
};
use clap::Parser;
use sim_bft::crypto::client_signing_key;
use sim_bft::ledgers::orders::{PAYMENT_CONFIRMED, SHOP_CANCEL, SchedAppConfig, ScheduledLedger};
use sim_bft::node::ClientId;
use sim_bft::protocol::client_request_bytes;
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{RuntimeConfig, ThreadedCluster};

#[path = "../ccron-http/tests/support/mod.rs"]
mod support;

/// The wall clock of this IO shell (the one place it is read; the pool and the consumer get
/// time as an argument).
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

const N: u32 = 4;
const F: usize = 1;
const KEY_SEED: u64 = 11;
const SHOP: ClientId = 0;
const CONSUMER: ClientId = 1;
const COMPONENT: u32 = 1;
const TICK_MS: u64 = 40;

/// Options of a run.
#[derive(Debug, Clone, Parser)]
pub struct Options {
    /// Orders to place (each expires once: one outbox record each).
    #[arg(long, default_value_t = 200)]
    pub orders: u64,
    /// Expiry delay of an order after admission.
    #[arg(long, default_value_t = 200)]
    pub expiry_ms: i64,
    /// Give up (exit non-zero) after this long.
    #[arg(long, default_value_t = 60)]
    pub guard_s: u64,
    /// Replica 0's read endpoint lies: it serves every record with an altered payload, a forged
    /// record past the head, and every result as applied (f+1 honest answers outvote it).
    #[arg(long)]
    pub liar: bool,
}

/// The payload a lying replica puts in the records it serves; the workers refuse it, so a
/// believed forgery would end as a dead letter and fail the run.
const FORGED: &[u8] = b"forged";

/// A lying replica's read endpoint (see [`Options::liar`]).
struct Liar(PublishedOutbox);

impl OutboxSource for Liar {
    fn page(&self, from: u64, max_records: usize, max_bytes: usize) -> Option<ReadPage> {
        let mut p = self.0.page(from, max_records, max_bytes)?;
        for e in &mut p.entries {
            e.record.payload = FORGED.to_vec();
            e.has_result = true;
        }
        if p.entries.len() < max_records {
            let forged = OutboxRecord::new(OccurrenceId::new(COMPONENT, 0, 0), SHOP_CANCEL, FORGED);
            p.entries.push(ReadEntry {
                record: forged,
                has_result: true,
            });
            p.head = p.last_index();
        }
        Some(p)
    }
}

/// Where the orders ledger keeps its outbox (for `ccron_http::PublishOutbox`).
fn orders_outbox(ledger: &ScheduledLedger) -> Option<&Outbox> {
    ledger.ledger().scheduler().map(|book| book.outbox())
}

/// The consumer's way back into the ledger: each result is first taken into the durable
/// [`ResultJournal`] (fsynced: only then may the consumer acknowledge its record), then sent as
/// a signed request of the consumer identity; it stays pending (and is re-sent under the same
/// request number, which the replicas execute at most once) until f+1 replicas' read endpoints
/// show it applied, when the journal marks it applied. After a crash the journal's pending
/// results are sent again under new numbers (the ledger applies one result per record). The
/// request counter stands for the consumer client's own durable state.
struct ClusterResults {
    cluster: Arc<ThreadedCluster>,
    journal: ResultJournal,
    /// Signs a payload as the consumer client under a request number.
    sign: Signer,
    next_req: u64,
    /// Signed request and last send time of each result in flight to the ledger.
    sent_at: BTreeMap<u64, (Vec<u8>, Instant)>,
    sent: u64,
    resent: u64,
}

/// Signs a request payload as the consumer under a request number.
type Signer = Box<dyn Fn(u64, Vec<u8>) -> Result<Vec<u8>, String> + Send>;

impl ResultSink for ClusterResults {
    fn offer(&mut self, result: OutboxResult) -> Result<(), ResultSinkError> {
        let index = result.index;
        self.journal.offer(result)?;
        if !self.sent_at.contains_key(&index) {
            self.send(index)?;
        }
        Ok(())
    }
}

impl ClusterResults {
    /// Sends the journal's pending result for `index` as a new signed request.
    fn send(&mut self, index: u64) -> Result<(), ResultSinkError> {
        let Some(result) = self.journal.pending().find(|r| r.index == index) else {
            return Ok(());
        };
        let payload = result
            .to_payload()
            .map_err(|e| ResultSinkError(e.to_string()))?;
        self.next_req += 1;
        let bytes = (self.sign)(self.next_req, payload).map_err(ResultSinkError)?;
        if let Err(e) = self.cluster.submit(&bytes) {
            // Not lost: `pump` re-sends it after a second.
            tracing::warn!(index, error = %e, "result request not queued everywhere");
        }
        self.sent += 1;
        self.sent_at.insert(index, (bytes, wall()));
        Ok(())
    }

    /// After a restart: sends every result the journal still holds.
    fn resend_pending(&mut self) -> Result<(), ResultSinkError> {
        let pending: Vec<u64> = self.journal.pending().map(|r| r.index).collect();
        for index in pending {
            self.send(index)?;
        }
        Ok(())
    }

    /// The lowest record index with a result pending.
    fn lowest_pending(&self) -> Option<u64> {
        self.journal.pending().next().map(|r| r.index)
    }

    /// Marks applied the results f+1 replicas' endpoints show applied (as `reader` last read
    /// them, from [`Self::lowest_pending`]); re-sends those older than a second.
    fn pump(&mut self, reader: &QuorumReader) -> Result<(), String> {
        let done: Vec<u64> = self
            .journal
            .pending()
            .map(|r| r.index)
            .filter(|&i| reader.results_applied(i) > F)
            .collect();
        for i in done {
            self.journal.mark_applied(i).map_err(|e| e.to_string())?;
            self.sent_at.remove(&i);
        }
        for (bytes, at) in self.sent_at.values_mut() {
            if at.elapsed() > Duration::from_secs(1) {
                if let Err(e) = self.cluster.submit(bytes) {
                    tracing::warn!(error = %e, "result request not queued everywhere");
                }
                *at = wall();
                self.resent += 1;
            }
        }
        Ok(())
    }
}

type Performed = Arc<Mutex<BTreeMap<OccurrenceId, u32>>>;

fn worker(i: usize, dedupe: &Arc<Dedupe>, performed: &Performed, flaky: bool) -> Arc<Worker> {
    let performed = performed.clone();
    let calls = AtomicU64::new(0);
    Worker::new(
        support::worker_config(i),
        dedupe.clone(),
        move |handler, id, payload| {
            if payload == FORGED {
                return Err(EffectError::Rejected("a forged record".into()));
            }
            if flaky && calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(3) {
                return Err(EffectError::Unavailable("payment service busy".into()));
            }
            if handler != SHOP_CANCEL {
                return Err(EffectError::Rejected(format!("unknown handler {handler}")));
            }
            if let Ok(mut p) = performed.lock() {
                *p.entry(*id).or_insert(0) += 1;
            }
            Ok(PAYMENT_CONFIRMED.to_vec())
        },
    )
}

fn consumer_config() -> ConsumerConfig {
    ConsumerConfig {
        max_processing: 12,
        max_search_ahead: 64,
        max_attempts: u32::MAX,
        ack_timeout_ms: 5_000,
        backoff: Backoff {
            base_ms: 10,
            cap_ms: 200,
            jitter_permille: 250,
        },
    }
}

/// What a run observed.
#[derive(Debug)]
pub struct Report {
    /// Records delivered and acknowledged (the consumer's progress).
    pub records: u64,
    /// Effects performed at the workers, and how many ids were performed more than once.
    pub performed: usize,
    /// Ids performed more than once (must be 0).
    pub performed_twice: usize,
    /// Per replica: records with a result, orders marked expired, orders marked more than once.
    pub replicas: Vec<(usize, usize, usize)>,
    /// Result requests sent and re-sent.
    pub results_sent: u64,
    /// Re-sent results.
    pub results_resent: u64,
    /// Dispatcher and pool counters before and after the consumer's crash.
    pub dispatch: Vec<(ccron_http::DispatchStats, ccron_http::PoolStats)>,
    /// Reads of the replicas' endpoints that failed (the readers alive at the end).
    pub read_failures: u64,
}

impl Report {
    /// Whether everything happened exactly once.
    pub fn exactly_once(&self, orders: u64) -> bool {
        let n = usize::try_from(orders).unwrap_or(usize::MAX);
        self.records == orders
            && self.performed == n
            && self.performed_twice == 0
            && self.replicas.len() == N as usize
            && self.replicas.iter().all(|&r| r == (n, n, 0))
    }
}

/// Runs the scenario (see the module documentation).
///
/// # Errors
/// A setup failure or the guard running out.
pub fn run(opts: &Options) -> Result<Report, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run_async(opts))
}

async fn run_async(opts: &Options) -> Result<Report, String> {
    let guard = wall() + Duration::from_secs(opts.guard_s);
    // The consumer's files: progress, dead letters, results not yet applied.
    let dir = std::env::temp_dir().join(format!(
        "ccron-http-workers-{}-{}",
        std::process::id(),
        wall().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let report = run_in(opts, &dir, guard).await;
    let _ = std::fs::remove_dir_all(&dir);
    report
}

async fn run_in(opts: &Options, dir: &std::path::Path, guard: Instant) -> Result<Report, String> {
    // The ledger's policy: the consumer, the chain, and the three payment workers' keys.
    let policy = support::with_workers(
        ccron::Policy::default().with_outbox_consumer(CONSUMER),
        3,
        &[SHOP_CANCEL],
    );
    // The cluster.
    let cfg = SchedAppConfig {
        component: COMPONENT,
        expiry_ms: opts.expiry_ms,
        ..SchedAppConfig::default()
    };
    let published: Vec<PublishedOutbox> = (0..N).map(|i| PublishedOutbox::new(i.into())).collect();
    let expired: Vec<Arc<Mutex<BTreeMap<String, u32>>>> = (0..N).map(|_| Arc::default()).collect();
    let replicas = (0..N)
        .map(|i| {
            let mut rc = ReplicaConfig::new(i, N, KEY_SEED, 2);
            rc.tick_components = BTreeMap::from([(COMPONENT, TICK_MS)]);
            // The replica's committed outbox goes to its read endpoint; its expired orders,
            // whenever the outbox changed, to the run's final check (which looks inside the
            // replicas; the consumer never does).
            let expired = expired[i as usize].clone();
            let app = PublishOutbox::new(
                ScheduledLedger::with_payment_confirmation_policy(cfg, policy.clone()),
                orders_outbox,
                published[i as usize].clone(),
            )
            .on_change(move |ledger| {
                if let Ok(mut e) = expired.lock() {
                    e.clone_from(&ledger.ledger().state().0);
                }
            });
            Replica::with_app(rc, Box::new(app)).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut cluster = ThreadedCluster::start(
        replicas,
        RuntimeConfig {
            tick_period_ms: TICK_MS,
            components: vec![COMPONENT],
        },
    )
    .map_err(|e| e.to_string())?;
    // Each replica's read endpoint on loopback; the consumer reads only these.
    let sources = published
        .iter()
        .enumerate()
        .map(|(i, p)| -> Arc<dyn OutboxSource> {
            if opts.liar && i == 0 {
                Arc::new(Liar(p.clone()))
            } else {
                Arc::new(p.clone())
            }
        })
        .collect();
    let endpoints: Vec<String> = cluster
        .serve_reads(sources, ReadServerConfig::default())
        .map_err(|e| e.to_string())?
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let cluster = Arc::new(cluster);
    let read_cfg = ReadClientConfig::new(endpoints, F + 1);
    // One reader for the records to deliver (from the consumer's progress on), one for the
    // results still pending (from the lowest one on): both believe only f+1 identical answers.
    let mut reader = QuorumReader::new(read_cfg.clone()).map_err(|e| e.to_string())?;
    let mut results_reader = QuorumReader::new(read_cfg.clone()).map_err(|e| e.to_string())?;

    // The shop places the orders.
    let shop = client_signing_key(KEY_SEED, SHOP);
    for k in 0..opts.orders {
        let req = ScheduleRequest::Upsert(ScheduledLedger::expiry(
            &format!("order-{k}"),
            opts.expiry_ms,
        ));
        let payload = ScheduledLedger::payload(&req).map_err(|e| e.to_string())?;
        let bytes = client_request_bytes(&shop, SHOP, k + 1, payload).map_err(|e| e.to_string())?;
        cluster.submit(&bytes).map_err(|e| e.to_string())?;
    }

    // Three workers of one payment service (one idempotency store).
    let dedupe = Dedupe::new(DedupeLimits {
        window: consumer_config().max_search_ahead,
        ..DedupeLimits::default()
    });
    let performed: Performed = Arc::default();
    let workers: Vec<Arc<Worker>> = (0..3)
        .map(|i| worker(i, &dedupe, &performed, i == 1))
        .collect();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut running: Vec<Option<support::Running>> = workers
        .iter()
        .map(|w| support::Running::start(w.clone(), any).map(Some))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let endpoints = running
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| support::endpoint(i, r.base()))
        .collect();
    let addr0 = running[0].as_ref().map(|r| r.addr).ok_or("no worker 0")?;

    let mut dcfg = DispatcherConfig::new(support::CHAIN, support::KEY_ID, endpoints);
    dcfg.pool.max_in_flight_per_worker = 4;
    dcfg.pool.health.base_down_ms = 100;
    dcfg.pool.health.max_down_ms = 1_000;
    dcfg.pool.handlers.insert(
        SHOP_CANCEL.into(),
        HandlerPolicy {
            assignment: Assignment::Sticky(KeyOf::Payload),
            max_attempts: 50,
            time_to_run_ms: 30_000,
            attempt_timeout_ms: 1_000,
        },
    );
    let start = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));

    let open_journal = || {
        ResultJournal::open(dir.join("results"), JournalLimits::default())
            .map_err(|e| e.to_string())
    };
    let mut sink = ClusterResults {
        cluster: cluster.clone(),
        journal: open_journal()?,
        sign: {
            let key = client_signing_key(KEY_SEED, CONSUMER);
            Box::new(move |req, payload| {
                client_request_bytes(&key, CONSUMER, req, payload).map_err(|e| e.to_string())
            })
        },
        next_req: 0,
        sent_at: BTreeMap::new(),
        sent: 0,
        resent: 0,
    };
    let open_consumer = || {
        PersistentConsumer::open(
            consumer_config(),
            FileProgressStore::new(dir.join("progress")),
            FileDeadLetters::new(dir.join("dead")),
        )
        .map_err(|e| e.to_string())
    };
    let mut consumer = open_consumer()?;
    let mut dispatcher = Dispatcher::new(dcfg.clone(), clock.clone()).map_err(|e| e.to_string())?;
    let mut dispatch = Vec::new();
    let mut phase = 0;
    let quarter = opts.orders / 4;
    loop {
        if wall() > guard {
            return Err(format!(
                "guard ran out: progress {} of {}, {} results pending",
                consumer.persisted_progress(),
                opts.orders,
                sink.journal.pending_len()
            ));
        }
        reader.refresh(consumer.consumer().progress() + 1).await;
        dispatcher
            .step(
                &mut consumer,
                reader.jobs(),
                &mut sink,
                Duration::from_millis(20),
            )
            .await
            .map_err(|e| e.to_string())?;
        if let Some(lowest) = sink.lowest_pending() {
            results_reader.refresh(lowest).await;
            sink.pump(&results_reader)?;
        }
        let progress = consumer.persisted_progress();
        if phase == 0 && progress >= quarter {
            println!("progress {progress}: killing worker 0");
            if let Some(r) = running[0].take() {
                r.kill().await;
            }
            phase = 1;
        } else if phase == 1 && progress >= 2 * quarter {
            println!("progress {progress}: killing the consumer and restarting it");
            dispatch.push((dispatcher.stats(), dispatcher.pool().stats()));
            drop(dispatcher);
            drop(consumer);
            drop(reader);
            // Its memory is gone; its files are not.
            sink.sent_at.clear();
            sink.journal = open_journal()?;
            consumer = open_consumer()?;
            sink.resend_pending().map_err(|e| e.to_string())?;
            dispatcher = Dispatcher::new(dcfg.clone(), clock.clone()).map_err(|e| e.to_string())?;
            reader = QuorumReader::new(read_cfg.clone()).map_err(|e| e.to_string())?;
            phase = 2;
        } else if phase == 2 && progress >= 3 * quarter {
            println!("progress {progress}: restarting worker 0");
            running[0] = Some(
                support::Running::start(workers[0].clone(), addr0).map_err(|e| e.to_string())?,
            );
            phase = 3;
        }
        // The end of the run (not the consumer's business): every replica applied every result.
        let all_applied = published
            .iter()
            .all(|p| p.snapshot().map(|(o, _)| o.results_len() as u64) == Some(opts.orders));
        if phase == 3 && progress >= opts.orders && sink.journal.pending_len() == 0 && all_applied {
            break;
        }
    }
    dispatch.push((dispatcher.stats(), dispatcher.pool().stats()));
    drop(dispatcher);
    let progress = consumer.persisted_progress();
    drop(consumer);
    for r in running.into_iter().flatten() {
        r.kill().await;
    }
    let performed = performed.lock().map_err(|e| e.to_string())?.clone();
    let replicas = published
        .iter()
        .zip(&expired)
        .map(|(p, e)| {
            let results = p.snapshot().map_or(0, |(o, _)| o.results_len());
            let e = e.lock().map_err(|e| e.to_string())?;
            Ok((results, e.len(), e.values().filter(|&&n| n != 1).count()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let read_failures = reader
        .endpoints()
        .iter()
        .chain(results_reader.endpoints())
        .map(|e| e.stats().failures)
        .sum();
    let report = Report {
        records: progress,
        performed: performed.len(),
        performed_twice: performed.values().filter(|&&n| n != 1).count(),
        replicas,
        results_sent: sink.sent,
        results_resent: sink.resent,
        dispatch,
        read_failures,
    };
    drop(sink);
    if let Ok(c) = Arc::try_unwrap(cluster) {
        c.stop().map_err(|e| e.to_string())?;
    }
    Ok(report)
}

#[allow(dead_code)]
fn main() {
    let opts = Options::parse();
    match run(&opts) {
        Ok(report) => {
            println!("{report:#?}");
            if report.exactly_once(opts.orders) {
                println!(
                    "OK: every effect performed once, every result applied once on every replica"
                );
            } else {
                eprintln!("FAILED: not exactly once");
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            std::process::exit(2);
        }
    }
}
