//! The dispatcher's `/metrics`, scraped over loopback from a running dispatcher (behind the
//! bounded server) while it delivers to an authenticated worker and one that is down.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccron::outbox::{
    ConsumerConfig, DedupeLimits, MemDeadLetters, MemProgressStore, OccurrenceId, Outbox,
    OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer,
};
use ccron_http::{Dedupe, Dispatcher, DispatcherConfig, ServerConfig, Worker, serve_metrics};
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::{CHAIN, KEY_ID, Running, any_port, endpoint, worker_config};

/// The wall clock of this IO shell.
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

async fn scrape(base: &str) -> (u16, String, String) {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let req = Request::get(format!("{base}/metrics"))
        .body(Empty::new())
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, kind, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_dispatcher_serves_its_metrics() {
    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 0..30 {
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(1, 2, k),
                "mail",
                b"x".to_vec(),
            ))
            .unwrap();
    }
    let w = Worker::new(
        worker_config(0),
        Dedupe::new(DedupeLimits {
            window: 64,
            ..DedupeLimits::default()
        }),
        |_, _, _| Ok(b"ok".to_vec()),
    );
    let r = Running::start(w, any_port()).unwrap();
    // Worker 1 is configured but nobody listens there: it is marked down.
    let gone = ccron_http::server::bind(any_port()).unwrap();
    let gone_base = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let mut cfg = DispatcherConfig::new(
        CHAIN,
        KEY_ID,
        vec![endpoint(0, r.base()), endpoint(1, gone_base)],
    );
    cfg.pool.health.failures_to_down = 1;
    cfg.pool.health.base_down_ms = 60_000;
    cfg.pool.health.max_down_ms = 60_000;
    let start = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));
    let mut dispatcher = Dispatcher::new(cfg, clock).unwrap();
    let listener = ccron_http::server::bind(any_port()).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_metrics(
        listener,
        dispatcher.metrics(),
        ServerConfig::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    // Before the first step: every series at zero.
    let (status, kind, text) = scrape(&base).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/plain"), "{kind}");
    assert!(
        text.lines()
            .any(|l| l == "ccron_dispatch_attempts_total{outcome=\"done\"} 0"),
        "{text}"
    );

    let mut store = MemProgressStore::default();
    let mut letters = MemDeadLetters::default();
    let mut consumer =
        PersistentConsumer::open(ConsumerConfig::default(), &mut store, &mut letters).unwrap();
    let mut results: Vec<OutboxResult> = Vec::new();
    let deadline = wall() + Duration::from_secs(30);
    while consumer.persisted_progress() < 30 {
        assert!(
            wall() < deadline,
            "stuck at {}",
            consumer.persisted_progress()
        );
        dispatcher
            .step(
                &mut consumer,
                &outbox,
                &mut results,
                Duration::from_millis(5),
            )
            .await
            .unwrap();
    }
    let stats = dispatcher.stats();
    let (status, _, text) = scrape(&base).await;
    assert_eq!(status, 200);
    let transport = stats
        .outcomes
        .get(ccron_http::deliver::AttemptKind::Transport);
    assert!(transport >= 1, "{stats:?}");
    for line in [
        "ccron_dispatch_attempts_total{outcome=\"done\"} 30".to_string(),
        format!("ccron_dispatch_attempts_total{{outcome=\"transport\"}} {transport}"),
        "ccron_dispatch_attempts_total{outcome=\"rate-limited\"} 0".to_string(),
        "ccron_dispatch_records_done_total 30".to_string(),
        "ccron_dispatch_records_given_up_total 0".to_string(),
        format!("ccron_dispatch_retries_total {}", stats.retries),
        "ccron_dispatch_workers_marked_down_total 1".to_string(),
        "ccron_dispatch_consumer_progress 30".to_string(),
        "ccron_dispatch_outbox_head 30".to_string(),
        "ccron_dispatch_outbox_behind 0".to_string(),
        "ccron_dispatch_in_flight 0".to_string(),
        "ccron_dispatch_worker_up{worker=\"0\"} 1".to_string(),
        "ccron_dispatch_worker_up{worker=\"1\"} 0".to_string(),
        "ccron_dispatch_worker_in_flight{worker=\"0\"} 0".to_string(),
        "# TYPE ccron_dispatch_attempts counter".to_string(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    assert!(text.trim_end().ends_with("# EOF"));
    let _ = stop.send(());
    let _ = server.await;
    r.kill().await;
}
