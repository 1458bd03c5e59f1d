//! End to end over loopback: three axum workers, one failing half its calls, one killed and
//! restarted, the consumer killed and restarted mid-run; every effect is performed exactly once
//! at the workers, every record gets exactly one result applied in the ledger stand-in (a
//! replicated `Outbox` applying `OutboxResult`s, which believes an answer only when the worker
//! that made it signed it), records a worker rejects are dead-lettered. Every delivery is
//! authenticated (HMAC per worker).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccron::outbox::{
    Backoff, ConsumerConfig, DedupeLimits, MemDeadLetters, MemProgressStore, OccurrenceId, Outbox,
    OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer, ResultApplied, ResultOutcome,
};
use ccron::{Policy, Principal};
use ccron_http::{
    Assignment, Dedupe, Dispatcher, DispatcherConfig, EffectError, HandlerPolicy, KeyOf,
    ResultSink, ResultSinkError, Worker,
};
use support::{CHAIN, KEY_ID, Running, any_port, endpoint, with_workers, worker_config};

/// The wall clock of this IO shell (the one place it is read; the pool and the consumer get
/// time as an argument).
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

const RECORDS: u64 = 240;
/// The outbox consumer (a stand-in id: no key behind it).
const CONSUMER: ccron::ClientId = ccron::ClientId::from_bytes([9; 32]);

/// The ledger stand-in: applies results through `Outbox::accept_result`, counting.
struct Ledger {
    outbox: Outbox,
    policy: Policy,
    applied: BTreeMap<u64, ResultOutcome>,
    duplicates: u64,
}

impl ResultSink for Ledger {
    fn offer(&mut self, r: OutboxResult) -> Result<(), ResultSinkError> {
        match self
            .outbox
            .accept_result(&self.policy, &Principal::Client(CONSUMER), &r)
        {
            Ok(ResultApplied::Applied) => {
                assert!(self.applied.insert(r.index, r.outcome).is_none());
            }
            Ok(_) => self.duplicates += 1,
            Err(e) => return Err(ResultSinkError(e.to_string())),
        }
        Ok(())
    }
}

type Performed = Arc<Mutex<BTreeMap<OccurrenceId, u32>>>;

fn worker(i: usize, dedupe: &Arc<Dedupe>, performed: &Performed, flaky: bool) -> Arc<Worker> {
    let performed = performed.clone();
    let calls = AtomicU64::new(0);
    Worker::new(
        worker_config(i),
        dedupe.clone(),
        move |handler, id, payload| {
            if flaky && calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
                return Err(EffectError::Unavailable("flaky".into()));
            }
            if handler == "bad" {
                return Err(EffectError::Rejected("unknown handler".into()));
            }
            *performed.lock().unwrap().entry(*id).or_insert(0) += 1;
            Ok(format!("done {}", String::from_utf8_lossy(payload)).into_bytes())
        },
    )
}

fn consumer_config() -> ConsumerConfig {
    ConsumerConfig {
        max_processing: 12,
        max_search_ahead: 64,
        max_attempts: u32::MAX,
        ack_timeout_ms: 3_000,
        backoff: Backoff {
            base_ms: 5,
            cap_ms: 100,
            jitter_permille: 250,
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_consumer_killed_and_restarted_still_give_exactly_once() {
    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 0..RECORDS {
        let handler = if k % 40 == 7 { "bad" } else { "mail" };
        let payload = format!("order-{}", k % 17);
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(1, 2, k),
                handler,
                payload,
            ))
            .unwrap();
    }
    let mut ledger = Ledger {
        outbox: outbox.clone(),
        policy: with_workers(
            Policy::default().with_outbox_consumer(CONSUMER),
            3,
            &["mail"],
        ),
        applied: BTreeMap::new(),
        duplicates: 0,
    };
    let dedupe = Dedupe::new(DedupeLimits {
        window: consumer_config().max_search_ahead,
        ..DedupeLimits::default()
    });
    let performed: Performed = Arc::default();
    let workers: Vec<Arc<Worker>> = (0..3)
        .map(|i| worker(i, &dedupe, &performed, i == 1))
        .collect();
    let mut running: Vec<Option<Running>> = workers
        .iter()
        .map(|w| Some(Running::start(w.clone(), any_port()).unwrap()))
        .collect();
    let endpoints = running
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| endpoint(i, r.base()))
        .collect();
    let addr2 = running[2].as_ref().unwrap().addr;

    let mut cfg = DispatcherConfig::new(CHAIN, KEY_ID, endpoints);
    cfg.pool.max_in_flight_per_worker = 4;
    cfg.pool.health.failures_to_down = 3;
    cfg.pool.health.base_down_ms = 50;
    cfg.pool.health.max_down_ms = 400;
    cfg.pool.health.probe_timeout_ms = 200;
    cfg.pool.default_policy = HandlerPolicy {
        assignment: Assignment::LeastLoaded,
        max_attempts: 30,
        time_to_run_ms: 30_000,
        attempt_timeout_ms: 1_000,
    };
    cfg.pool.handlers.insert(
        "mail".into(),
        HandlerPolicy {
            assignment: Assignment::Sticky(KeyOf::Payload),
            ..cfg.pool.default_policy
        },
    );
    let start = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));

    let mut store = MemProgressStore::default();
    let mut letters = MemDeadLetters::default();
    let mut consumer =
        PersistentConsumer::open(consumer_config(), &mut store, &mut letters).unwrap();
    let mut dispatcher = Dispatcher::new(cfg.clone(), clock.clone()).unwrap();
    let deadline = wall() + Duration::from_secs(60);
    let mut phase = 0;
    let mut total_stats = Vec::new();
    while consumer.persisted_progress() < RECORDS {
        assert!(
            wall() < deadline,
            "stuck at {}",
            consumer.persisted_progress()
        );
        dispatcher
            .step(
                &mut consumer,
                &outbox,
                &mut ledger,
                Duration::from_millis(20),
            )
            .await
            .unwrap();
        let progress = consumer.persisted_progress();
        if phase == 0 && progress >= 60 {
            // Kill worker 2 while records are in flight.
            running[2].take().unwrap().kill().await;
            phase = 1;
        } else if phase == 1 && progress >= 120 && dispatcher.pool().stats().marked_down > 0 {
            // Once the pool has marked worker 2 down (the persisted progress can jump past 120
            // in one step, before three attempts have failed there), kill the consumer (its
            // in-memory state and tasks are lost), restart it from the persisted progress with
            // a fresh dispatcher, and bring worker 2 back.
            total_stats.push(dispatcher.stats());
            drop(dispatcher);
            drop(consumer);
            consumer =
                PersistentConsumer::open(consumer_config(), &mut store, &mut letters).unwrap();
            dispatcher = Dispatcher::new(cfg.clone(), clock.clone()).unwrap();
            running[2] = Some(Running::start(workers[2].clone(), addr2).unwrap());
            phase = 2;
        }
    }
    total_stats.push(dispatcher.stats());
    let (_, letters_seen) = consumer.stores();
    let dead: BTreeMap<u64, String> = letters_seen
        .letters
        .iter()
        .map(|l| (l.index, l.handler.clone()))
        .collect();
    drop(consumer);

    // Exactly once at the workers, for every record that is not rejected.
    let performed = performed.lock().unwrap().clone();
    let mail: Vec<OccurrenceId> = outbox
        .iter()
        .filter(|(_, r)| r.handler == "mail")
        .map(|(_, r)| r.id)
        .collect();
    assert_eq!(performed.len(), mail.len());
    assert!(
        mail.iter().all(|id| performed.get(id) == Some(&1)),
        "{performed:?}"
    );
    // Every record has exactly one result in the ledger: answers for mail, dead letters for bad.
    assert_eq!(ledger.applied.len() as u64, RECORDS);
    assert_eq!(ledger.outbox.results_len() as u64, RECORDS);
    for (index, r) in outbox.iter() {
        match (&ledger.applied[&index], r.handler.as_str()) {
            (ResultOutcome::Answer(body), "mail") => {
                assert_eq!(
                    body,
                    &format!("done {}", String::from_utf8_lossy(&r.payload)).into_bytes()
                );
            }
            (ResultOutcome::DeadLetter(why), "bad") => assert!(why.contains("rejected"), "{why}"),
            other => panic!("record {index}: {other:?}"),
        }
    }
    assert_eq!(dead.len(), (0..RECORDS).filter(|k| k % 40 == 7).count());
    assert!(dead.values().all(|h| h == "bad"));
    // The faults were real: the flaky worker made retries, worker 2 went down.
    let retries: u64 = total_stats.iter().map(|s| s.retries).sum();
    assert!(retries > 0, "{total_stats:?}");
    assert_eq!(
        phase, 2,
        "worker 2 was never marked down, or the consumer never restarted"
    );
    assert!(workers[1].stats().unavailable.load(Ordering::Relaxed) > 0);
    // Nothing was refused for its credentials, its window or its answer's signature.
    for s in &total_stats {
        assert_eq!(
            (s.unauthorized, s.bad_answers, s.answers_too_large),
            (0, 0, 0),
            "{s:?}"
        );
    }
    for w in &workers {
        assert_eq!(w.stats().unauthenticated.load(Ordering::Relaxed), 0);
        assert_eq!(w.stats().refused_room.load(Ordering::Relaxed), 0);
        assert_eq!(w.stats().conflicts.load(Ordering::Relaxed), 0);
    }
    for r in running.into_iter().flatten() {
        r.kill().await;
    }
}
