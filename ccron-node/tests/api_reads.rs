//! The node's HTTP API with a real ledger behind it: schedule reads by quorum through the
//! node's own router, `/metrics` scraped (replicated figures equal on every node), the tick
//! pool, and the API behind the bounded server (a slowloris is cut off, an over-limit body is
//! refused before it is read, an honest client is served meanwhile).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
use ccron::host::{BookConfig, CronLedger, LedgerScheduler, TickPool};
use ccron::schedule::query::{QueryBody, ScheduleFilter};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Target, Timing};
use ccron::{CronTableRegistry, MemPages, Tick};
use ccron_http::{ScheduleQuery, ScheduleReadConfig, ScheduleReader};
use ccron_node::api::{ApiState, serve_with, server_config};
use ccron_node::mempool::{Mempool, MempoolConfig};
use ccron_node::read::NodeReads;
use ccron_node::records::NodeStatus;
use ccron_node::results::RequestResults;
use ccron_node::types::Validators;
use sha2::{Digest, Sha256};

#[derive(Debug, Default, Clone)]
struct Counter(u64);

impl Application for Counter {
    fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
        b"err unknown".to_vec()
    }
    fn digest(&self) -> Digest32 {
        Sha256::digest(self.0.to_le_bytes()).into()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), AppError> {
        let b = <[u8; 8]>::try_from(s).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        self.0 = u64::from_le_bytes(b);
        Ok(())
    }
}

fn ledger() -> CronLedger<Counter> {
    let mut h: Handlers<Counter> = Handlers::new();
    assert!(h.register("count", |ctx| ctx.state.0 += 1));
    let cfg = BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    };
    let mut l = CronLedger::new(Counter::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(cfg, h));
    for i in 0..3i64 {
        let s = NewSchedule::new(
            "count",
            Timing::Every {
                period_ms: 1_000 * (i + 1),
                start_ms: Some(0),
            },
        )
        .with_key(format!("job-{i}"));
        let payload = ccron::codec::to_blob(&ScheduleRequest::Create(s)).unwrap();
        let ctx = ExecContext {
            seq: 1,
            agreed_time_ms: Some(100),
        };
        let reply = l.execute(ctx, ccron::ClientId::from_index(7), &payload);
        assert!(
            reply.starts_with(b"ok"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }
    let mut pages = MemPages::new(4096, 0);
    l.on_tick(Tick::new(1, 2, Some(6_500)), &mut pages).unwrap();
    l
}

fn state(index: u64, l: &CronLedger<Counter>) -> ApiState {
    let reads = NodeReads::new(index);
    reads.publish(l, 2, l.digest());
    let status = NodeStatus {
        last_height: 2,
        fires: 3,
        ..NodeStatus::default()
    };
    reads.set_status(&status);
    ApiState {
        mempool: Arc::new(Mutex::new(Mempool::new(
            MempoolConfig::default(),
            Default::default(),
        ))),
        outbox: ccron_http::PublishedOutbox::new(index),
        ticks: Arc::new(Mutex::new(TickPool::new(4, [1]))),
        validators: Validators::new(&[[1; 32], [2; 32], [3; 32], [4; 32]]),
        domain: ccron_node::crypto::SigningDomain::chain(b"test-chain").unwrap(),
        ticks_invalid: Arc::new(AtomicU64::new(0)),
        results: Arc::new(Mutex::new(RequestResults::default())),
        reads,
    }
}

/// One HTTP/1.1 request on a fresh connection; returns (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf[9..12].parse().unwrap();
    let body = buf.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, body.to_string())
}

fn metric(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(name))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_read_by_quorum_and_metrics_scrape() {
    let l = ledger();
    let mut addrs = Vec::new();
    for i in 0..4 {
        let a = serve_with(
            "127.0.0.1:0".parse().unwrap(),
            state(i, &l),
            server_config(),
        )
        .await
        .unwrap();
        addrs.push(a);
    }
    let reader = ScheduleReader::new(ScheduleReadConfig::new(
        addrs.iter().map(|a| format!("http://{a}")).collect(),
        2,
    ))
    .unwrap();
    let got = reader
        .read(&ScheduleQuery::List(ScheduleFilter::default()))
        .await
        .unwrap();
    assert_eq!((got.at_height, got.agreeing.len()), (2, 4));
    let QueryBody::List(list) = got.body else {
        panic!()
    };
    assert_eq!(list.items.len(), 3);
    assert!(list.items.iter().all(|s| s.runs >= 1));
    let got = reader
        .read(&ScheduleQuery::Describe {
            target: Target::Key("job-1".into()),
            preview: 3,
        })
        .await
        .unwrap();
    let QueryBody::Describe(Some(d)) = got.body else {
        panic!()
    };
    assert_eq!(d.history.len(), 1);
    assert_eq!(d.upcoming.len(), 3);
    let got = reader.read(&ScheduleQuery::Outbox).await.unwrap();
    assert!(matches!(got.body, QueryBody::Outbox(Some(_))));

    // The tick pool (node-local JSON).
    let (code, body) = tokio::task::spawn_blocking({
        let a = addrs[0];
        move || get(a, "/v1/ticks")
    })
    .await
    .unwrap();
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["pending"], 0);
    assert_eq!(v["validators"], 4);

    // Metrics: every node reports the same replicated figures.
    let mut scraped = Vec::new();
    for a in addrs.clone() {
        let (code, text) = tokio::task::spawn_blocking(move || get(a, "/metrics"))
            .await
            .unwrap();
        assert_eq!(code, 200);
        scraped.push(text);
    }
    let t = &scraped[0];
    for name in [
        "ccron_height 2",
        "ccron_fires_total 3",
        "ccron_schedules 3",
        "ccron_book_height 2",
        "ccron_outbox_depth 0",
        "ccron_ticks_refused_total{reason=\"stale\"} 0",
        "ccron_schedule_runs_total{schedule=\"1\",handler=\"count\"} 1",
        "ccron_book_runs_total{event=\"fired\"} 3",
        "ccron_book_runs_total{event=\"failed\"} 0",
        "ccron_schedule_events_total{schedule=\"1\",handler=\"count\",event=\"fired\"} 1",
    ] {
        assert!(t.lines().any(|l| l == name), "{name} missing in\n{t}");
    }
    assert!(t.contains("# TYPE ccron_fire_lateness_agreed_seconds histogram"));
    assert!(t.trim_end().ends_with("# EOF"));
    let replicated = |t: &str| {
        [
            "ccron_schedule",
            "ccron_outbox",
            "ccron_book_height",
            "ccron_book_runs",
            "ccron_dead_runs",
        ]
        .iter()
        .flat_map(|n| metric(t, n))
        .collect::<std::collections::BTreeSet<_>>()
    };
    assert!(replicated(t).len() > 20);
    for other in &scraped[1..] {
        // The same series and values (a family's series come in hash order).
        assert_eq!(replicated(t), replicated(other));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_is_behind_the_bounded_server() {
    let l = ledger();
    let cfg = ccron_http::ServerConfig {
        header_read_timeout_ms: 300,
        body_timeout_ms: 300,
        ..server_config()
    };
    let addr = serve_with("127.0.0.1:0".parse().unwrap(), state(0, &l), cfg)
        .await
        .unwrap();
    let outcome = tokio::task::spawn_blocking(move || {
        // Slowloris: half a request head, then silence.
        let mut slow: Vec<TcpStream> = (0..8)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s
            })
            .collect();
        // An honest client is served meanwhile.
        let (code, _) = get(addr, "/v1/mempool");
        assert_eq!(code, 200);
        #[allow(clippy::disallowed_methods)] // A test measuring how long the server holds on.
        let start = Instant::now();
        for s in &mut slow {
            let mut buf = Vec::new();
            // The server answers 408 or just closes; either way the connection ends.
            let _ = s.read_to_end(&mut buf);
        }
        let cut = start.elapsed();
        // A declared body over the limit is refused before a byte of it is read.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            s,
            "POST /v1/requests HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"
        )
        .unwrap();
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).unwrap();
        (cut, String::from_utf8_lossy(&buf[9..12]).into_owned())
    })
    .await
    .unwrap();
    assert!(
        outcome.0 < Duration::from_secs(3),
        "slow heads held {:?}",
        outcome.0
    );
    assert_eq!(outcome.1, "413");
}
