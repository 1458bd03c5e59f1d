//! HTTP delivery throughput and commit→ack latency (a bench binary, not a timed test).
//!
//! Three axum workers on loopback, one `Dispatcher` + `PersistentConsumer`, a ccron `Outbox` of
//! 10^5 records (`BENCH_RECORDS` to change it). Four runs:
//!
//! * `drain`: every record is committed before the start; records/s until the last ack.
//! * `drain, 1 worker fails 1/2`: the same with worker 1 answering 503 to every other call.
//! * `paced` (and with the failing worker): records are committed at a steady rate (50 % of the
//!   healthy drain rate, below the failing-worker drain rate too); p50/p99/max from a record's commit to its acknowledgement (the moment
//!   its answer is handed to the result sink, just before the consumer moves on).
//!
//! Run: `cargo bench -p ccron-http --bench http_delivery`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccron::outbox::{
    Backoff, ConsumerConfig, Jobs, MemDeadLetters, MemProgressStore, OccurrenceId, Outbox,
    OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer,
};
use ccron_http::{
    Dedupe, Dispatcher, DispatcherConfig, EffectError, ResultSink, ResultSinkError, Worker,
    WorkerConfig,
};

/// The wall clock of this IO shell (the one place it is read; the pool and the consumer get
/// time as an argument).
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

/// The outbox as seen at a point in time: records up to `visible` are committed.
struct Paced<'a> {
    outbox: &'a Outbox,
    visible: u64,
}

impl Jobs for Paced<'_> {
    fn head(&self) -> u64 {
        self.visible.min(self.outbox.head())
    }
    fn at_index(&self, index: u64) -> Option<OutboxRecord> {
        (index <= self.visible)
            .then(|| self.outbox.get(index).cloned())
            .flatten()
    }
}

/// Records each record's commit→ack latency.
struct Latencies {
    start: Instant,
    /// Commit time of record `i` (ms from start): `i / rate`, or 0 when drained.
    per_ms: f64,
    samples: Vec<f64>,
    answered: u64,
}

impl ResultSink for Latencies {
    fn offer(&mut self, r: OutboxResult) -> Result<(), ResultSinkError> {
        let now = self.start.elapsed().as_secs_f64() * 1e3;
        let committed = (r.index as f64 - 1.0) * self.per_ms;
        self.samples.push(now - committed);
        self.answered += 1;
        Ok(())
    }
}

struct Outcome {
    secs: f64,
    p50: f64,
    p99: f64,
    max: f64,
    attempts: u64,
    retries: u64,
}

async fn run(records: u64, flaky: bool, rate: Option<f64>) -> Outcome {
    let mut outbox = Outbox::new(OutboxLimits {
        max_records: records as usize,
        max_record_bytes: 1024,
        max_total_bytes: usize::MAX,
    });
    for k in 0..records {
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(1, k % 97, k),
                "shop.cancel",
                format!("order-{}", k % 1_000).into_bytes(),
            ))
            .expect("append");
    }
    let dedupe = Dedupe::new(8_192);
    let workers: Vec<support::Running> = (0..3)
        .map(|i| {
            let calls = AtomicU64::new(0);
            let w = Worker::new(WorkerConfig::default(), dedupe.clone(), move |_, _, _| {
                if flaky && i == 1 && calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
                    return Err(EffectError::Unavailable("half my calls fail".into()));
                }
                Ok(b"confirmed".to_vec())
            });
            support::Running::start(w, support::any_port()).expect("worker")
        })
        .collect();
    let mut cfg = DispatcherConfig::new(workers.iter().map(support::Running::base).collect());
    cfg.pool.max_in_flight_per_worker = 16;
    cfg.pool.default_policy.max_attempts = 20;
    let start = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));
    let mut dispatcher = Dispatcher::new(cfg, clock).expect("dispatcher");
    let mut store = MemProgressStore::default();
    let mut letters = MemDeadLetters::default();
    let mut consumer = PersistentConsumer::open(
        ConsumerConfig {
            max_processing: 48,
            max_search_ahead: 1_024,
            max_attempts: u32::MAX,
            ack_timeout_ms: 10_000,
            backoff: Backoff {
                base_ms: 2,
                cap_ms: 50,
                jitter_permille: 250,
            },
        },
        &mut store,
        &mut letters,
    )
    .expect("consumer");
    let per_ms = rate.map_or(0.0, |r| 1e3 / r);
    let mut sink = Latencies {
        start,
        per_ms,
        samples: Vec::with_capacity(records as usize),
        answered: 0,
    };
    while consumer.persisted_progress() < records {
        let visible = match rate {
            None => records,
            Some(r) => ((start.elapsed().as_secs_f64() * r) as u64 + 1).min(records),
        };
        let jobs = Paced {
            outbox: &outbox,
            visible,
        };
        dispatcher
            .step(&mut consumer, &jobs, &mut sink, Duration::from_millis(1))
            .await
            .expect("step");
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = dispatcher.stats();
    drop(dispatcher);
    for w in workers {
        w.kill().await;
    }
    let mut s = sink.samples;
    s.sort_by(f64::total_cmp);
    let q = |p: f64| {
        s.get(((s.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    Outcome {
        secs,
        p50: q(0.50),
        p99: q(0.99),
        max: q(1.0),
        attempts: stats.attempts,
        retries: stats.retries,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let records: u64 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("http_delivery: {records} records, 3 loopback workers, 48 in flight");
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "run", "records/s", "p50 ms", "p99 ms", "max ms", "attempts", "retries"
    );
    let mut healthy_rate = 0.0;
    for (name, flaky, paced) in [
        ("drain", false, false),
        ("drain, 1 worker fails 1/2", true, false),
        ("paced 50%", false, true),
        ("paced 50%, 1 worker fails 1/2", true, true),
    ] {
        let rate = paced.then_some(healthy_rate * 0.5);
        let o = rt.block_on(run(records, flaky, rate));
        let rps = records as f64 / o.secs;
        if name == "drain" {
            healthy_rate = rps;
        }
        let (p50, p99, max) = if paced {
            (
                format!("{:.1}", o.p50),
                format!("{:.1}", o.p99),
                format!("{:.1}", o.max),
            )
        } else {
            ("-".into(), "-".into(), "-".into())
        };
        println!(
            "{name:<34} {rps:>10.0} {p50:>10} {p99:>10} {max:>10} {:>10} {:>9}",
            o.attempts, o.retries
        );
    }
}
