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
//! 4. Steps 2 to 4 are one library call, `ccron_http::Relay` (with `sim_bft::runtime::
//!    ClusterSubmit` as its way back into the cluster): each answer goes into the consumer's
//!    durable `ResultJournal` (fsynced before the record is acknowledged), then back as a signed
//!    client request of the consumer identity (`OutboxResult`); the ledger believes it only because the workers' keys are registered
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
    Backoff, ConsumerConfig, DedupeLimits, OccurrenceId, Outbox, OutboxRecord, ReadEntry, ReadPage,
};
use ccron::schedule::ScheduleRequest;
use ccron_http::{
    Assignment, Dedupe, DispatcherConfig, EffectError, HandlerPolicy, KeyOf, OutboxSource,
    PublishOutbox, PublishedOutbox, ReadClientConfig, ReadServerConfig, Relay, RelayConfig, Worker,
};
use clap::Parser;
use sim_bft::crypto::client_signing_key;
use sim_bft::ledgers::orders::{PAYMENT_CONFIRMED, SHOP_CANCEL, SchedAppConfig, ScheduledLedger};
use sim_bft::node::ClientId;
use sim_bft::protocol::client_request_bytes;
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{ClusterSubmit, RuntimeConfig, ThreadedCluster};

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
        ccron::Policy::default().with_outbox_consumer(sim_bft::node::ledger_client(CONSUMER)),
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
    // The ready consumer: reads by quorum, delivers, journals each result and submits it back
    // as the consumer client, re-sent until f+1 replicas show it applied.
    let relay_cfg = RelayConfig {
        read: read_cfg.clone(),
        dispatcher: dcfg.clone(),
        consumer: consumer_config(),
        dir: dir.to_path_buf(),
        resend_after_ms: 1_000,
        step_wait: Duration::from_millis(20),
        // The run checks every result on every replica's outbox: keep the records.
        report_progress: false,
    };
    let open_relay = |first_number: u64| {
        Relay::open(
            relay_cfg.clone(),
            clock.clone(),
            ClusterSubmit::new(cluster.clone(), KEY_SEED, CONSUMER, first_number),
        )
        .map_err(|e| e.to_string())
    };
    let mut relay = open_relay(1)?;
    let (mut sent, mut resent, mut read_failures) = (0, 0, 0);
    let mut dispatch = Vec::new();
    let mut phase = 0;
    let quarter = opts.orders / 4;
    loop {
        let stats = relay.stats();
        if wall() > guard {
            return Err(format!(
                "guard ran out: progress {} of {}, {} results pending",
                stats.progress, opts.orders, stats.pending_results
            ));
        }
        let stats = relay.step().await.map_err(|e| e.to_string())?;
        let progress = stats.progress;
        if phase == 0 && progress >= quarter {
            println!("progress {progress}: killing worker 0");
            if let Some(r) = running[0].take() {
                r.kill().await;
            }
            phase = 1;
        } else if phase == 1 && progress >= 2 * quarter {
            println!("progress {progress}: killing the consumer and restarting it");
            let d = relay.dispatcher();
            dispatch.push((d.stats(), d.pool().stats()));
            (sent, resent) = (sent + stats.results_sent, resent + stats.resent);
            read_failures += relay.read_failures();
            // Its memory is gone; its files (and its request counter) are not.
            let next = relay.submitter().next_number();
            drop(relay);
            relay = open_relay(next)?;
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
        if phase == 3 && progress >= opts.orders && stats.pending_results == 0 && all_applied {
            break;
        }
    }
    let stats = relay.stats();
    let d = relay.dispatcher();
    dispatch.push((d.stats(), d.pool().stats()));
    (sent, resent) = (sent + stats.results_sent, resent + stats.resent);
    read_failures += relay.read_failures();
    let progress = stats.progress;
    drop(relay);
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
    let report = Report {
        records: progress,
        performed: performed.len(),
        performed_twice: performed.values().filter(|&&n| n != 1).count(),
        replicas,
        results_sent: sent,
        results_resent: resent,
        dispatch,
        read_failures,
    };
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
