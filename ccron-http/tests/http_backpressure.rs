//! The dispatcher under back-pressure, over loopback (authenticated workers):
//!
//! * every healthy worker full: deliveries wait in the dispatcher for the next free slot and
//!   are never failed for it (a failed attempt was backed off by the consumer while newer
//!   records went first: the record progress waits on was served last);
//! * a refusal with `Retry-After` (a rate-limited worker) pauses that worker until then: it
//!   gets nothing more, the records go to the other worker, every attempt is counted by how it
//!   ended.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::any;
use ccron::outbox::{
    Backoff, ConsumerConfig, DedupeLimits, MemDeadLetters, MemProgressStore, OccurrenceId, Outbox,
    OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer,
};
use ccron_http::deliver::AttemptKind;
use ccron_http::server::{REFUSAL_HEADER, ServerConfig};
use ccron_http::{Dedupe, DispatchStats, Dispatcher, DispatcherConfig, Worker, WorkerEndpoint};
use support::{CHAIN, KEY_ID, Running, any_port, endpoint, worker_config};

/// The wall clock of this IO shell.
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

fn outbox(records: u64) -> Outbox {
    let mut o = Outbox::new(OutboxLimits::default());
    for k in 0..records {
        o.append(OutboxRecord::new(
            OccurrenceId::new(1, 2, k),
            "mail",
            b"x".to_vec(),
        ))
        .unwrap();
    }
    o
}

fn real_worker(i: usize) -> (Arc<Worker>, Running) {
    let dedupe = Dedupe::new(DedupeLimits {
        window: 64,
        ..DedupeLimits::default()
    });
    let w = Worker::new(worker_config(i), dedupe, |_, _, _| {
        // Long enough that the one slot is busy when the next delivery comes.
        std::thread::sleep(Duration::from_millis(2));
        Ok(b"ok".to_vec())
    });
    let r = Running::start(w.clone(), any_port()).unwrap();
    (w, r)
}

/// Delivers every record of `outbox` through `endpoints`; returns the dispatcher's counters
/// and the results.
async fn drive(
    outbox: &Outbox,
    endpoints: Vec<WorkerEndpoint>,
    max_processing: usize,
) -> (DispatchStats, ccron_http::PoolStats, Vec<OutboxResult>) {
    let mut cfg = DispatcherConfig::new(CHAIN, KEY_ID, endpoints);
    cfg.pool.max_in_flight_per_worker = 1;
    let start = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));
    let mut dispatcher = Dispatcher::new(cfg, clock).unwrap();
    let mut store = MemProgressStore::default();
    let mut letters = MemDeadLetters::default();
    let mut consumer = PersistentConsumer::open(
        ConsumerConfig {
            max_processing,
            max_search_ahead: 64,
            max_attempts: u32::MAX,
            ack_timeout_ms: 10_000,
            backoff: Backoff {
                base_ms: 5,
                cap_ms: 50,
                jitter_permille: 0,
            },
        },
        &mut store,
        &mut letters,
    )
    .unwrap();
    let mut results: Vec<OutboxResult> = Vec::new();
    let deadline = wall() + Duration::from_secs(30);
    while consumer.persisted_progress() < outbox.head() {
        assert!(
            wall() < deadline,
            "stuck at {}",
            consumer.persisted_progress()
        );
        dispatcher
            .step(
                &mut consumer,
                outbox,
                &mut results,
                Duration::from_millis(5),
            )
            .await
            .unwrap();
    }
    (dispatcher.stats(), dispatcher.pool().stats(), results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_wait_for_a_free_slot_instead_of_failing() {
    let (w, r) = real_worker(0);
    let outbox = outbox(40);
    // One worker with one slot, eight records handed out at a time.
    let (stats, _, results) = drive(&outbox, vec![endpoint(0, r.base())], 8).await;
    assert_eq!(results.len(), 40);
    assert!(results.iter().all(|r| r.proof.is_some()));
    // Each record sent once, none failed for the lack of a slot: they waited.
    assert_eq!(stats.attempts, 40, "{stats:?}");
    assert_eq!((stats.no_worker, stats.retries), (0, 0), "{stats:?}");
    assert!(stats.waited_for_room > 0, "{stats:?}");
    assert_eq!(stats.outcomes.get(AttemptKind::Done), 40);
    assert_eq!(w.stats().performed.load(Ordering::Relaxed), 40);
    r.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_pauses_the_worker_and_the_records_fail_over() {
    // Worker 0 is rate-limited: every request is a 429 with a Retry-After of 30 s.
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let router = Router::new().fallback(any(move || {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::Relaxed);
            let mut resp = (StatusCode::TOO_MANY_REQUESTS, "rate-limited").into_response();
            let h = resp.headers_mut();
            h.insert(REFUSAL_HEADER, HeaderValue::from_static("rate-limited"));
            h.insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
            resp
        }
    }));
    let listener = ccron_http::server::bind(any_port()).unwrap();
    let throttled = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ccron_http::serve(
        listener,
        router,
        ServerConfig::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    let (w1, r1) = real_worker(1);
    let outbox = outbox(20);
    let (stats, pool, results) = drive(
        &outbox,
        vec![endpoint(0, throttled), endpoint(1, r1.base())],
        4,
    )
    .await;
    assert_eq!(results.len(), 20);
    // One request reached the throttled worker; then it was left alone until its Retry-After
    // (without the pause it got a request per attempt until three failures marked it down).
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!(pool.paused, 1, "{pool:?}");
    assert_eq!(pool.marked_down, 0, "{pool:?}");
    assert_eq!(stats.outcomes.get(AttemptKind::RateLimited), 1, "{stats:?}");
    assert_eq!(stats.outcomes.get(AttemptKind::Done), 20, "{stats:?}");
    assert_eq!(w1.stats().performed.load(Ordering::Relaxed), 20);
    let _ = stop.send(());
    let _ = server.await;
    r1.kill().await;
}
