//! Attacks on the bounded server, against each server ccron-http runs (a worker, a replica's
//! outbox read endpoint): slowloris (half a request head; a body that drips), floods of
//! connections from one peer and from many, floods of requests, oversized bodies, idle
//! connections. Each time an honest client on another address is still served within a
//! deadline, and every refusal is counted.
//!
//! Attackers and the honest client use distinct loopback addresses (127.0.0.0/8 is all
//! loopback on Linux), so per-peer bounds apply to them as to distinct hosts.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccron::outbox::workers::{sha256, to_hex};
use ccron::outbox::{DedupeLimits, OccurrenceId, Outbox, OutboxLimits, OutboxRecord};
use ccron_http::auth::{self, DeliveryClaims};
use ccron_http::server::{RateLimit, ServerConfig, ServerStats};
use ccron_http::{Dedupe, PublishedOutbox, ReadServerConfig, Worker, contract};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// The wall clock of the test (the one place it is read).
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

const HEAD_MS: u64 = 300;
const BODY_MS: u64 = 300;
/// How long an honest request may take while the server is under attack.
const HONEST_DEADLINE: Duration = Duration::from_secs(3);

fn tight() -> ServerConfig {
    ServerConfig {
        max_connections: 48,
        max_connections_per_peer: 8,
        max_peers: 256,
        header_read_timeout_ms: HEAD_MS,
        max_header_bytes: 8_192,
        body_timeout_ms: BODY_MS,
        max_body_bytes: 4_096,
        request_timeout_ms: 2_000,
        max_connection_age_ms: 60_000,
        shutdown_grace_ms: 200,
        rate: RateLimit {
            per_second: 20,
            burst: 40,
        },
    }
}

fn ip(a: u8, b: u8, c: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, a, b, c))
}

const HONEST: [u8; 3] = [0, 0, 2];

/// Which server is attacked.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Worker,
    Reads,
}

struct Target {
    kind: Kind,
    addr: SocketAddr,
    stats: Arc<ServerStats>,
    stop: Option<oneshot::Sender<()>>,
    next_index: std::sync::atomic::AtomicU64,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn start(kind: Kind) -> Target {
    let listener = ccron_http::server::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    // Listen on every loopback address: 127.0.0.1 and the attackers' share the interface.
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let stop = async move {
        let _ = rx.await;
    };
    let stats = match kind {
        Kind::Worker => {
            let mut cfg = support::worker_config(0);
            cfg.server = tight();
            let w = Worker::new(cfg, Dedupe::new(DedupeLimits::default()), |_, _, _| {
                Ok(b"ok".to_vec())
            });
            let stats = w.server_stats();
            tokio::spawn(w.serve(listener, stop));
            stats
        }
        Kind::Reads => {
            let published = PublishedOutbox::new(0);
            let mut ob = Outbox::new(OutboxLimits::default());
            for k in 0..5 {
                ob.append(OutboxRecord::new(
                    OccurrenceId::new(1, 0, k),
                    "h",
                    b"p".to_vec(),
                ))
                .unwrap();
            }
            published.publish(&ob, 1);
            let cfg = ReadServerConfig {
                server: tight(),
                ..ReadServerConfig::default()
            };
            let server = ccron_http::Server::new(cfg.server).unwrap();
            let stats = server.stats();
            let router = ccron_http::read_router(Arc::new(published), cfg);
            tokio::spawn(server.run(listener, router, stop));
            stats
        }
    };
    Target {
        kind,
        addr,
        stats,
        stop: Some(tx),
        next_index: std::sync::atomic::AtomicU64::new(1),
    }
}

/// A raw connection from loopback address `from`.
async fn connect(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(from, 0))?;
    s.connect(to).await
}

/// Waits until the server closes `s` (EOF or reset); returns what it sent before.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

impl Target {
    /// The honest request for this server, from the honest address.
    fn honest_request(&self) -> Request<Full<Bytes>> {
        let base = format!("http://{}", self.addr);
        match self.kind {
            Kind::Reads => Request::get(format!("{base}{}?from=1", contract::OUTBOX_PATH))
                .body(Full::new(Bytes::new()))
                .unwrap(),
            Kind::Worker => {
                let index = self
                    .next_index
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let id = OccurrenceId::new(1, 2, index);
                let payload = format!("order-{index}").into_bytes();
                let ts = auth::unix_now_ms();
                let claims = DeliveryClaims {
                    chain_id: support::CHAIN,
                    key_id: support::KEY_ID,
                    index,
                    id,
                    handler: "h",
                    attempt: 1,
                    progress: 0,
                    timestamp_ms: ts,
                    payload_sha256: sha256(&payload),
                };
                let tag = auth::mac(&support::secret(0), &auth::delivery_signing_bytes(&claims));
                Request::post(format!("{base}{}", contract::DELIVER_PATH))
                    .header(contract::IDEMPOTENCY_KEY, id.to_string())
                    .header(contract::HANDLER, "h")
                    .header(contract::OUTBOX_INDEX, index)
                    .header(contract::ATTEMPT, 1)
                    .header(contract::PROGRESS, 0)
                    .header(contract::CHAIN, to_hex(support::CHAIN))
                    .header(contract::KEY_ID, support::KEY_ID)
                    .header(contract::TIMESTAMP, ts)
                    .header(contract::SIGNATURE, to_hex(&tag))
                    .body(Full::new(Bytes::from(payload)))
                    .unwrap()
            }
        }
    }

    /// An honest client on its own address gets a 200 within the deadline (retrying a refused
    /// connection, as a real client would).
    async fn honest_is_served(&self) -> Duration {
        let mut connector = HttpConnector::new();
        connector.set_local_address(Some(ip(HONEST[0], HONEST[1], HONEST[2])));
        connector.set_connect_timeout(Some(Duration::from_millis(500)));
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        let start = wall();
        loop {
            let elapsed = start.elapsed();
            assert!(
                elapsed < HONEST_DEADLINE,
                "{:?}: the honest client was not served within {HONEST_DEADLINE:?}: {:?}",
                self.kind,
                self.stats.snapshot()
            );
            let attempt = tokio::time::timeout(
                Duration::from_millis(800),
                client.request(self.honest_request()),
            )
            .await;
            if let Ok(Ok(resp)) = attempt {
                let status = resp.status();
                let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                if status.is_success() && body.is_ok() {
                    return start.elapsed();
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Half a request head, from one peer up to its connection cap and past it: the held ones are
/// closed at the head deadline, the rest at once; an honest client is served meanwhile.
async fn slow_heads(kind: Kind) {
    let t = start(kind).await;
    let attacker = ip(0, 0, 3);
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = connect(attacker, t.addr).await.unwrap();
        let _ = s
            .write_all(b"POST /ccron/v1/deliver HTTP/1.1\r\nHost: x\r\nContent-Le")
            .await;
        held.push(s);
    }
    t.honest_is_served().await;
    let start = wall();
    for s in &mut held {
        let closed = closed_within(s, Duration::from_millis(HEAD_MS + 1_500)).await;
        assert!(
            closed.is_some(),
            "{kind:?}: a half head kept its connection"
        );
    }
    assert!(start.elapsed() < Duration::from_millis(HEAD_MS + 1_500));
    let c = t.stats.snapshot();
    assert!(c.header_timeouts >= 8, "{kind:?}: {c:?}");
    assert!(c.peer_connection_cap >= 12, "{kind:?}: {c:?}");
    // An idle kept-alive connection (no request at all) goes the same way.
    let mut idle = connect(ip(0, 0, 4), t.addr).await.unwrap();
    assert!(
        closed_within(&mut idle, Duration::from_millis(HEAD_MS + 1_500))
            .await
            .is_some()
    );
}

/// Many peers hold half heads until the server's connection cap: new connections are refused
/// until the head deadline frees the slots; the honest client is served within the deadline.
async fn slow_heads_from_many_peers(kind: Kind) {
    let t = start(kind).await;
    let mut held = Vec::new();
    for peer in 0..10u8 {
        for _ in 0..8 {
            if let Ok(mut s) = connect(ip(0, 1, peer + 1), t.addr).await {
                let _ = s.write_all(b"GET / HTTP/1.1\r\nHo").await;
                held.push(s);
            }
        }
    }
    let served_in = t.honest_is_served().await;
    let c = t.stats.snapshot();
    assert!(c.connection_cap > 0, "{kind:?}: the cap was reached: {c:?}");
    assert!(served_in < HONEST_DEADLINE);
    drop(held);
}

/// A body that drips: 408 at the body deadline, the connection closed; a declared body over
/// the limit: 413 before a byte of it is read.
async fn dripping_and_oversized_bodies(kind: Kind) {
    let t = start(kind).await;
    let mut drips = Vec::new();
    for k in 0..4u8 {
        let mut s = connect(ip(0, 2, k + 1), t.addr).await.unwrap();
        s.write_all(
            b"POST /ccron/v1/deliver HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab",
        )
        .await
        .unwrap();
        drips.push(s);
    }
    let dripping = async {
        for _ in 0..30 {
            for s in &mut drips {
                let _ = s.write_all(b"x").await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ((), served) = tokio::join!(dripping, t.honest_is_served());
    assert!(served < HONEST_DEADLINE);
    for s in &mut drips {
        let got = closed_within(s, Duration::from_millis(BODY_MS + 1_500))
            .await
            .expect("a dripping body kept its connection");
        assert!(
            got.starts_with(b"HTTP/1.1 408"),
            "{kind:?}: {}",
            String::from_utf8_lossy(&got)
        );
    }
    let mut big = connect(ip(0, 2, 9), t.addr).await.unwrap();
    big.write_all(
        b"POST /ccron/v1/deliver HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n",
    )
    .await
    .unwrap();
    let got = closed_within(&mut big, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    let c = t.stats.snapshot();
    assert!(c.body_timeouts >= 4, "{kind:?}: {c:?}");
    assert!(c.body_too_large >= 1, "{kind:?}: {c:?}");
}

/// One peer floods requests on kept-alive connections: it is answered 429 past its bucket, and
/// the honest client is served.
async fn request_flood(kind: Kind) {
    let t = start(kind).await;
    let flood = async {
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let addr = t.addr;
            tasks.push(tokio::spawn(async move {
                let Ok(mut s) = connect(ip(0, 3, 1), addr).await else {
                    return 0;
                };
                let mut limited = 0;
                let mut buf = vec![0u8; 4096];
                for _ in 0..60 {
                    if s.write_all(b"GET /ccron/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
                        .await
                        .is_err()
                    {
                        break;
                    }
                    match tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => {
                            if buf[..n].starts_with(b"HTTP/1.1 429") {
                                limited += 1;
                            }
                        }
                        _ => break,
                    }
                }
                limited
            }));
        }
        let mut limited = 0;
        for t in tasks {
            limited += t.await.unwrap_or(0);
        }
        limited
    };
    let (limited, served) = tokio::join!(flood, t.honest_is_served());
    assert!(served < HONEST_DEADLINE);
    assert!(limited > 0, "{kind:?}: the flood was never limited");
    let c = t.stats.snapshot();
    assert!(c.rate_limited > 0, "{kind:?}: {c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_survives_slow_heads() {
    slow_heads(Kind::Worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_endpoint_survives_slow_heads() {
    slow_heads(Kind::Reads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_survives_slow_heads_from_many_peers() {
    slow_heads_from_many_peers(Kind::Worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_endpoint_survives_slow_heads_from_many_peers() {
    slow_heads_from_many_peers(Kind::Reads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_survives_dripping_and_oversized_bodies() {
    dripping_and_oversized_bodies(Kind::Worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_endpoint_survives_dripping_and_oversized_bodies() {
    dripping_and_oversized_bodies(Kind::Reads).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_survives_a_request_flood() {
    request_flood(Kind::Worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_endpoint_survives_a_request_flood() {
    request_flood(Kind::Reads).await;
}
