//! HTTP delivery throughput and commit→ack latency (a bench binary, not a timed test).
//!
//! Three axum workers on loopback (behind the bounded server), one `Dispatcher` +
//! `PersistentConsumer`, a ccron `Outbox` of 10^5 records (`BENCH_RECORDS` to change it). Each
//! run twice in the same process: **unauthenticated** (the insecure baseline: no MAC, no answer
//! signature) and **authenticated** (every delivery MACed with the worker's secret and checked,
//! every answer signed by the worker and verified by the dispatcher):
//!
//! * `drain`: every record is committed before the start; records/s until the last ack.
//! * `drain, 1 worker fails 1/2`: the same with worker 1 answering 503 to every other call.
//! * `paced` (and with the failing worker): records are committed at a steady rate (50 % of the
//!   unauthenticated healthy drain rate, the same pace for both modes); p50/p99/max from a
//!   record's commit to its acknowledgement (the moment its answer is handed to the result
//!   sink, just before the consumer moves on).
//!
//! Each mode runs twice per scenario, in the order unauthenticated, authenticated,
//! authenticated, unauthenticated, so a drift of the shared machine's load cancels out; the
//! table shows the means, and the last lines the authenticated / unauthenticated ratios
//! (target: within 20 %). `BENCH_RECORDS` changes the size.
//!
//! Run: `cargo bench -p ccron-http --bench http_delivery`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ccron::outbox::{
    Backoff, ConsumerConfig, DedupeLimits, Jobs, MemDeadLetters, MemProgressStore, OccurrenceId,
    Outbox, OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer,
};
use ccron_http::deliver::AttemptCounts;
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

/// CPU time this process used so far (all threads, user + system), in milliseconds: from
/// `/proc/self/stat` (clock ticks of 10 ms, Linux's `CLK_TCK` of 100); `None` elsewhere.
fn cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 10.0)
}

/// Records each record's commit→ack latency.
struct Latencies {
    start: Instant,
    /// Commit time of record `i` (ms from start): `i / rate`, or 0 when drained.
    per_ms: f64,
    samples: Vec<f64>,
    answered: u64,
    /// Answers that came with a worker signature.
    signed: u64,
}

impl ResultSink for Latencies {
    fn offer(&mut self, r: OutboxResult) -> Result<(), ResultSinkError> {
        self.signed += u64::from(r.proof.is_some());
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
    /// Answers per ed25519 signature at the workers, and per verification at the dispatcher.
    per_signature: f64,
    per_check: f64,
    /// CPU time of the whole process (dispatcher and workers) per record, in microseconds.
    cpu_us: f64,
    /// Attempts by how they ended (the worker's or the server's refusal reason).
    outcomes: AttemptCounts,
    /// Deliveries that found no worker up (not attempts: the consumer retries them).
    no_worker: u64,
    /// Deliveries that waited in the dispatcher for a free slot.
    waited: u64,
}

async fn run(records: u64, flaky: bool, rate: Option<f64>, auth: bool) -> Outcome {
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
    let dedupe = Dedupe::new(DedupeLimits {
        window: 1_024,
        ..DedupeLimits::default()
    });
    let mut handles = Vec::new();
    let workers: Vec<support::Running> = (0..3)
        .map(|i| {
            let calls = AtomicU64::new(0);
            let cfg = if auth {
                support::worker_config(i)
            } else {
                WorkerConfig::insecure()
            };
            let w = Worker::new(cfg, dedupe.clone(), move |_, _, _| {
                if flaky && i == 1 && calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
                    return Err(EffectError::Unavailable("half my calls fail".into()));
                }
                Ok(b"confirmed".to_vec())
            });
            handles.push(w.clone());
            support::Running::start(w, support::any_port()).expect("worker")
        })
        .collect();
    let mut cfg = if auth {
        let endpoints = workers
            .iter()
            .enumerate()
            .map(|(i, w)| support::endpoint(i, w.base()))
            .collect();
        DispatcherConfig::new(support::CHAIN, support::KEY_ID, endpoints)
    } else {
        DispatcherConfig::insecure(workers.iter().map(support::Running::base).collect())
    };
    cfg.pool.max_in_flight_per_worker = 16;
    cfg.pool.default_policy.max_attempts = 20;
    let start = wall();
    let cpu_start = cpu_ms();
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
        signed: 0,
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
    let cpu_us = match (cpu_start, cpu_ms()) {
        (Some(a), Some(b)) => (b - a) * 1e3 / records as f64,
        _ => f64::NAN,
    };
    let stats = dispatcher.stats();
    let (signed, signatures) = handles.iter().fold((0u64, 0u64), |(a, b), w| {
        (
            a + w.stats().answers_signed.load(Ordering::Relaxed),
            b + w.signatures(),
        )
    });
    assert_eq!(
        sink.signed,
        if auth { sink.answered } else { 0 },
        "every answer signed exactly when authenticated"
    );
    assert_eq!((stats.unauthorized, stats.bad_answers), (0, 0), "{stats:?}");
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
        per_signature: signed as f64 / signatures.max(1) as f64,
        per_check: stats.done as f64 / stats.signature_checks.max(1) as f64,
        cpu_us,
        outcomes: stats.outcomes,
        no_worker: stats.no_worker,
        waited: stats.waited_for_room,
    }
}

/// Records/s, p99 (ms) and CPU µs per record of one mode of one scenario.
type Summary = (f64, f64, f64);

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let records = env("BENCH_RECORDS", 100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("http_delivery: {records} records, 3 loopback workers, 48 in flight");
    println!(
        "each mode run twice, in the order unauthenticated, authenticated, authenticated, \
         unauthenticated (a drift of the machine's load cancels out); figures are the means"
    );
    println!(
        "{:<44} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10}",
        "run", "records/s", "p50 ms", "p99 ms", "max ms", "attempts", "retries", "CPU µs/rec"
    );
    let mut healthy_rate = 0.0;
    // (records/s, p99, CPU per record) per run name and mode, for the ratios.
    let mut figures: Vec<(&str, [Summary; 2])> = Vec::new();
    for (name, flaky, paced) in [
        ("drain", false, false),
        ("drain, 1 worker fails 1/2", true, false),
        ("paced 50%", false, true),
        ("paced 50%, 1 worker fails 1/2", true, true),
    ] {
        // The same pace for both modes: half the unauthenticated healthy drain rate.
        let rate = paced.then_some(healthy_rate * 0.5);
        let mut by_mode: [Vec<Outcome>; 2] = [Vec::new(), Vec::new()];
        for auth in [false, true, true, false] {
            let o = rt.block_on(run(records, flaky, rate, auth));
            by_mode[usize::from(auth)].push(o);
        }
        let mut summary = [(0.0, 0.0, 0.0); 2];
        for auth in [false, true] {
            let runs = &by_mode[usize::from(auth)];
            let n = runs.len() as f64;
            let mean = |f: &dyn Fn(&Outcome) -> f64| runs.iter().map(f).sum::<f64>() / n;
            let rps = mean(&|o| records as f64 / o.secs);
            if name == "drain" && !auth {
                healthy_rate = rps;
            }
            let (p50, p99, max) = (mean(&|o| o.p50), mean(&|o| o.p99), mean(&|o| o.max));
            let cell = |v: f64| {
                if paced { format!("{v:.1}") } else { "-".into() }
            };
            let label = format!(
                "{name}, {}",
                if auth {
                    "authenticated"
                } else {
                    "unauthenticated"
                }
            );
            let batching = if auth {
                format!(
                    "  answers per signature {:.1}, per verification {:.1}",
                    mean(&|o| o.per_signature),
                    mean(&|o| o.per_check)
                )
            } else {
                String::new()
            };
            let cpu = mean(&|o| o.cpu_us);
            println!(
                "{label:<44} {rps:>10.0} {:>10} {:>10} {:>10} {:>10.0} {:>9.0} {cpu:>10.1}{batching}",
                cell(p50),
                cell(p99),
                cell(max),
                mean(&|o| o.attempts as f64),
                mean(&|o| o.retries as f64)
            );
            for (k, o) in runs.iter().enumerate() {
                println!(
                    "    run {}: attempts by outcome: {}; no worker up {}, waited for a slot {}",
                    k + 1,
                    o.outcomes,
                    o.no_worker,
                    o.waited
                );
            }
            summary[usize::from(auth)] = (rps, p99, cpu);
        }
        figures.push((name, summary));
    }
    println!("authenticated / unauthenticated:");
    for (name, [(r0, p0, c0), (r1, p1, c1)]) in figures {
        if name.starts_with("paced") {
            println!(
                "  {name:<40} p99 commit->ack x{:.2}, CPU per record x{:.2}",
                p1 / p0,
                c1 / c0
            );
        } else {
            println!(
                "  {name:<40} records/s x{:.2}, CPU per record x{:.2}",
                r1 / r0,
                c1 / c0
            );
        }
    }
}
