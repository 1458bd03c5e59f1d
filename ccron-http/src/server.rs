//! One bounded HTTP/1.1 server for every endpoint ccron-http serves (workers, outbox read
//! endpoints) and for a host's own API: [`serve`] takes an axum [`Router`] and a
//! [`ServerConfig`] and runs it behind every bound a server facing strangers needs.
//!
//! * **Connections**: at most [`ServerConfig::max_connections`] at once and
//!   [`ServerConfig::max_connections_per_peer`] per peer (an IPv4 address, or an IPv6 /64);
//!   past either, a new connection is closed at once. The peer table holds at most
//!   [`ServerConfig::max_peers`] peers (idle ones are forgotten first).
//! * **Request heads**: hyper's timer is on and [`ServerConfig::header_read_timeout_ms`] bounds
//!   the time from the moment the server waits for a request head (a new connection, or the end
//!   of the previous response on a kept-alive one) to its last byte: half a head, or an idle
//!   kept-alive connection, is closed after it. Heads are at most
//!   [`ServerConfig::max_header_bytes`].
//! * **Bodies**: a declared `Content-Length` over [`ServerConfig::max_body_bytes`] is refused
//!   (413) before a byte of the body is read; the body is then read, at most that many bytes,
//!   within [`ServerConfig::body_timeout_ms`] (408 otherwise), **before** the handler runs: a
//!   handler never waits on a client.
//! * **Handlers** get [`ServerConfig::request_timeout_ms`] (503 after it).
//! * **Rate**: each peer has a token bucket of [`RateLimit::burst`] requests refilled at
//!   [`RateLimit::per_second`]; an empty bucket answers 429 with `Retry-After` (and the exact
//!   wait in [`RETRY_AFTER_MS_HEADER`]). The limit is
//!   for strangers: a handler that authenticated the request marks its response
//!   [`Authenticated`] and the peer gets its token back, so a known sender (a worker's
//!   dispatcher) is bounded by its own flow control, not throttled with strangers.
//! * **Age**: a connection is asked to close (graceful: the request in progress finishes) after
//!   [`ServerConfig::max_connection_age_ms`], and dropped [`ServerConfig::shutdown_grace_ms`]
//!   later: nothing, not even a client that never reads its response, holds a connection longer.
//!
//! Every refusal is typed ([`Refusal`], also in the response header [`REFUSAL_HEADER`]),
//! counted ([`ServerStats`]) and traced (`debug` each, `warn` for the first of a kind and every
//! 1,024th after it, so a flood cannot flood the logs). Handlers see the peer's address as
//! axum's `ConnectInfo<SocketAddr>`.
//!
//! Shutdown: when the `shutdown` future completes, the server stops accepting, asks every
//! connection to close gracefully, and drops what is still open after the grace period.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower_service::Service;

/// Response header naming the refusal ([`Refusal::name`]).
pub const REFUSAL_HEADER: &str = "ccron-refusal";

/// Response header of a 429: the milliseconds until the peer's next token (`Retry-After` says
/// the same in whole seconds, rounded up, which is far longer than a bucket needs to refill).
pub const RETRY_AFTER_MS_HEADER: &str = "ccron-retry-after-ms";

/// A response extension: the handler authenticated the request (a MAC or signature it
/// checked), so the server returns the peer's rate token (see the module documentation).
/// Set it only after a successful authentication: a stranger must not be able to earn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Authenticated;

/// A per-peer token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Tokens (requests) added per second (at least 1).
    pub per_second: u32,
    /// Bucket size: requests a peer may make at once after an idle spell (at least 1).
    pub burst: u32,
}

/// The bounds of a [`serve`]d server (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one peer.
    pub max_connections_per_peer: usize,
    /// Most peers tracked (for connection counts and rate buckets).
    pub max_peers: usize,
    /// Time for a request head to arrive in full, counted from when the server waits for it
    /// (also the idle limit of a kept-alive connection).
    pub header_read_timeout_ms: u64,
    /// Largest request head (hyper's read buffer; at least 8,192).
    pub max_header_bytes: usize,
    /// Time to read a request body in full.
    pub body_timeout_ms: u64,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Time a handler may take.
    pub request_timeout_ms: u64,
    /// Age after which a connection is asked to close.
    pub max_connection_age_ms: u64,
    /// Time a closing connection (aged out, or at shutdown) gets before it is dropped.
    pub shutdown_grace_ms: u64,
    /// Requests per peer.
    pub rate: RateLimit,
}

impl Default for ServerConfig {
    /// 1,024 connections (128 per peer, 4,096 peers tracked), 5 s for a request head (16 KiB),
    /// 10 s for a body (1 MiB), 30 s per handler, connections closed after 5 minutes (2 s of
    /// grace), 5,000 requests per second per peer with bursts of 10,000.
    fn default() -> Self {
        Self {
            max_connections: 1_024,
            max_connections_per_peer: 128,
            max_peers: 4_096,
            header_read_timeout_ms: 5_000,
            max_header_bytes: 16 * 1024,
            body_timeout_ms: 10_000,
            max_body_bytes: 1024 * 1024,
            request_timeout_ms: 30_000,
            max_connection_age_ms: 300_000,
            shutdown_grace_ms: 2_000,
            rate: RateLimit {
                per_second: 5_000,
                burst: 10_000,
            },
        }
    }
}

/// A [`ServerConfig`] breaking a documented constraint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid server configuration: {0}")]
pub struct ServerConfigError(pub &'static str);

impl ServerConfig {
    /// Checks the documented constraints (every bound at least 1, heads at least 8,192 bytes,
    /// per-peer connections at most the total).
    pub fn validate(&self) -> Result<(), ServerConfigError> {
        let bad = |what| Err(ServerConfigError(what));
        if self.max_connections == 0 || self.max_connections_per_peer == 0 || self.max_peers == 0 {
            return bad("connection and peer bounds must be at least 1");
        }
        if self.max_connections_per_peer > self.max_connections {
            return bad("max_connections_per_peer is above max_connections");
        }
        if self.header_read_timeout_ms == 0
            || self.body_timeout_ms == 0
            || self.request_timeout_ms == 0
            || self.max_connection_age_ms == 0
        {
            return bad("timeouts must be at least 1 ms");
        }
        if self.max_header_bytes < 8_192 {
            return bad("max_header_bytes must be at least 8192");
        }
        if self.rate.per_second == 0 || self.rate.burst == 0 {
            return bad("rate limits must be at least 1");
        }
        Ok(())
    }
}

/// Why the server refused a connection or a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// [`ServerConfig::max_connections`] are open: the connection is closed.
    ConnectionCap,
    /// [`ServerConfig::max_connections_per_peer`] are open from this peer: closed.
    PeerConnectionCap,
    /// The peer table is full of active peers: a new peer's connection is closed.
    PeerTableFull,
    /// The peer's token bucket is empty: 429.
    RateLimited,
    /// The body is (or declares to be) over [`ServerConfig::max_body_bytes`]: 413.
    BodyTooLarge,
    /// The body did not arrive within [`ServerConfig::body_timeout_ms`]: 408.
    BodyTimeout,
    /// The body broke off or is malformed: 400.
    BadBody,
    /// The handler took longer than [`ServerConfig::request_timeout_ms`]: 503.
    RequestTimeout,
}

impl Refusal {
    /// The name sent in [`REFUSAL_HEADER`].
    pub fn name(self) -> &'static str {
        match self {
            Self::ConnectionCap => "connection-cap",
            Self::PeerConnectionCap => "peer-connection-cap",
            Self::PeerTableFull => "peer-table-full",
            Self::RateLimited => "rate-limited",
            Self::BodyTooLarge => "body-too-large",
            Self::BodyTimeout => "body-timeout",
            Self::BadBody => "bad-body",
            Self::RequestTimeout => "request-timeout",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::BadBody => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Counters of a server (observation only; see [`ServerStats::snapshot`]).
#[derive(Debug, Default)]
pub struct ServerStats {
    accepted: AtomicU64,
    requests: AtomicU64,
    refused: [AtomicU64; 8],
    header_timeouts: AtomicU64,
    connection_errors: AtomicU64,
    aged_out: AtomicU64,
    dropped_after_grace: AtomicU64,
    accept_errors: AtomicU64,
    refunded: AtomicU64,
}

/// A copy of a server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerCounters {
    /// Connections accepted (past the caps).
    pub accepted: u64,
    /// Requests handed to the router.
    pub requests: u64,
    /// Connections closed at [`ServerConfig::max_connections`].
    pub connection_cap: u64,
    /// Connections closed at [`ServerConfig::max_connections_per_peer`].
    pub peer_connection_cap: u64,
    /// Connections closed because the peer table was full.
    pub peer_table_full: u64,
    /// Requests answered 429.
    pub rate_limited: u64,
    /// Requests answered 413.
    pub body_too_large: u64,
    /// Requests answered 408.
    pub body_timeouts: u64,
    /// Requests answered 400 (a broken body).
    pub bad_bodies: u64,
    /// Handlers cut at the request timeout (503).
    pub request_timeouts: u64,
    /// Connections closed because a request head did not arrive in time (or the connection
    /// idled past it).
    pub header_timeouts: u64,
    /// Connections that ended in another protocol or I/O error.
    pub connection_errors: u64,
    /// Connections asked to close at their maximum age.
    pub aged_out: u64,
    /// Connections dropped after the grace period (aged out or at shutdown).
    pub dropped_after_grace: u64,
    /// Failed `accept` calls (e.g. out of file descriptors).
    pub accept_errors: u64,
    /// Rate tokens given back for requests the handler authenticated ([`Authenticated`]).
    pub authenticated: u64,
}

impl ServerStats {
    /// The counters now.
    pub fn snapshot(&self) -> ServerCounters {
        let r = |x: Refusal| self.refused[Self::slot(x)].load(Ordering::Relaxed);
        ServerCounters {
            accepted: self.accepted.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            connection_cap: r(Refusal::ConnectionCap),
            peer_connection_cap: r(Refusal::PeerConnectionCap),
            peer_table_full: r(Refusal::PeerTableFull),
            rate_limited: r(Refusal::RateLimited),
            body_too_large: r(Refusal::BodyTooLarge),
            body_timeouts: r(Refusal::BodyTimeout),
            bad_bodies: r(Refusal::BadBody),
            request_timeouts: r(Refusal::RequestTimeout),
            header_timeouts: self.header_timeouts.load(Ordering::Relaxed),
            connection_errors: self.connection_errors.load(Ordering::Relaxed),
            aged_out: self.aged_out.load(Ordering::Relaxed),
            dropped_after_grace: self.dropped_after_grace.load(Ordering::Relaxed),
            accept_errors: self.accept_errors.load(Ordering::Relaxed),
            authenticated: self.refunded.load(Ordering::Relaxed),
        }
    }

    fn slot(r: Refusal) -> usize {
        match r {
            Refusal::ConnectionCap => 0,
            Refusal::PeerConnectionCap => 1,
            Refusal::PeerTableFull => 2,
            Refusal::RateLimited => 3,
            Refusal::BodyTooLarge => 4,
            Refusal::BodyTimeout => 5,
            Refusal::BadBody => 6,
            Refusal::RequestTimeout => 7,
        }
    }

    /// Counts and traces a refusal.
    fn refuse(&self, r: Refusal, peer: SocketAddr) {
        let n = self.refused[Self::slot(r)].fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(1_024) {
            tracing::warn!(refusal = r.name(), %peer, count = n + 1, "server refused");
        } else {
            tracing::debug!(refusal = r.name(), %peer, "server refused");
        }
    }
}

/// A peer: an IPv4 address, or the /64 of an IPv6 one (one host usually holds a whole /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PeerKey {
    V4(u32),
    V6(u64),
}

fn peer_key(ip: IpAddr) -> PeerKey {
    match ip {
        IpAddr::V4(v4) => PeerKey::V4(u32::from(v4)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => PeerKey::V4(u32::from(v4)),
            None => PeerKey::V6((u128::from(v6) >> 64) as u64),
        },
    }
}

#[derive(Debug)]
struct PeerState {
    connections: usize,
    /// Thousandths of a request.
    tokens_milli: u64,
    refilled: Instant,
}

/// The peers' connection counts and token buckets, bounded.
#[derive(Debug)]
struct Peers {
    map: HashMap<PeerKey, PeerState>,
    cfg: ServerConfig,
}

impl Peers {
    fn full_bucket(&self) -> u64 {
        u64::from(self.cfg.rate.burst).saturating_mul(1_000)
    }

    fn refill(cfg: &ServerConfig, s: &mut PeerState, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(s.refilled).as_millis())
            .unwrap_or(u64::MAX);
        let full = u64::from(cfg.rate.burst).saturating_mul(1_000);
        s.tokens_milli = s
            .tokens_milli
            .saturating_add(ms.saturating_mul(u64::from(cfg.rate.per_second)))
            .min(full);
        s.refilled = now;
    }

    /// Finds or makes room for `key`.
    fn entry(&mut self, key: PeerKey, now: Instant) -> Result<&mut PeerState, Refusal> {
        if !self.map.contains_key(&key) {
            if self.map.len() >= self.cfg.max_peers {
                // Forget every idle peer whose bucket is full again: it is the same as new.
                let cfg = self.cfg;
                let full = self.full_bucket();
                self.map.retain(|_, s| {
                    Self::refill(&cfg, s, now);
                    s.connections > 0 || s.tokens_milli < full
                });
                if self.map.len() >= self.cfg.max_peers {
                    return Err(Refusal::PeerTableFull);
                }
            }
            let full = self.full_bucket();
            self.map.insert(
                key,
                PeerState {
                    connections: 0,
                    tokens_milli: full,
                    refilled: now,
                },
            );
        }
        self.map.get_mut(&key).ok_or(Refusal::PeerTableFull)
    }

    fn open(&mut self, key: PeerKey, now: Instant) -> Result<(), Refusal> {
        let max = self.cfg.max_connections_per_peer;
        let s = self.entry(key, now)?;
        if s.connections >= max {
            return Err(Refusal::PeerConnectionCap);
        }
        s.connections += 1;
        Ok(())
    }

    fn close(&mut self, key: PeerKey) {
        if let Some(s) = self.map.get_mut(&key) {
            s.connections = s.connections.saturating_sub(1);
        }
    }

    /// Gives one request token back (up to a full bucket).
    fn refund(&mut self, key: PeerKey) {
        let full = self.full_bucket();
        if let Some(s) = self.map.get_mut(&key) {
            s.tokens_milli = s.tokens_milli.saturating_add(1_000).min(full);
        }
    }

    /// Takes one request token; `Err(ms)`: none, the next one in `ms`.
    fn take(&mut self, key: PeerKey, now: Instant) -> Result<(), u64> {
        let cfg = self.cfg;
        let Some(s) = self.map.get_mut(&key) else {
            return Ok(());
        };
        Self::refill(&cfg, s, now);
        if s.tokens_milli >= 1_000 {
            s.tokens_milli -= 1_000;
            Ok(())
        } else {
            Err((1_000 - s.tokens_milli).div_ceil(u64::from(cfg.rate.per_second.max(1))))
        }
    }
}

/// Releases a connection's slot in the peer table when the connection ends.
struct PeerSlot {
    peers: Arc<Mutex<Peers>>,
    key: PeerKey,
    _permit: OwnedSemaphorePermit,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .close(self.key);
    }
}

struct Shared {
    cfg: ServerConfig,
    router: Router,
    stats: Arc<ServerStats>,
    peers: Arc<Mutex<Peers>>,
}

/// A bounded server (see the module documentation): configure, keep its [`stats`](Self::stats),
/// then [`run`](Self::run) it.
#[derive(Debug, Clone)]
pub struct Server {
    cfg: ServerConfig,
    stats: Arc<ServerStats>,
}

impl Server {
    /// A server with `cfg`.
    ///
    /// # Errors
    /// [`ServerConfigError`].
    pub fn new(cfg: ServerConfig) -> Result<Self, ServerConfigError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            stats: Arc::default(),
        })
    }

    /// Its counters (shared: they keep counting while it runs).
    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// The same server, counting into `stats` (counters its owner keeps across restarts).
    pub fn with_stats(mut self, stats: Arc<ServerStats>) -> Self {
        self.stats = stats;
        self
    }

    /// Serves `router` on `listener` until `shutdown` completes (see the module
    /// documentation).
    ///
    /// # Errors
    /// None today (accept errors are counted and retried); the `Result` leaves room for the
    /// listener's own.
    pub async fn run(
        self,
        listener: TcpListener,
        router: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let cfg = self.cfg;
        let shared = Arc::new(Shared {
            cfg,
            router,
            stats: self.stats.clone(),
            peers: Arc::new(Mutex::new(Peers {
                map: HashMap::new(),
                cfg,
            })),
        });
        let slots = Arc::new(Semaphore::new(cfg.max_connections));
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            while conns.try_join_next().is_some() {}
            let accepted = tokio::select! {
                biased;
                () = &mut shutdown => break,
                r = listener.accept() => r,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a reset before accept: count, breathe, go on.
                    self.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                self.stats.refuse(Refusal::ConnectionCap, peer);
                drop(stream);
                continue;
            };
            let key = peer_key(peer.ip());
            let opened = shared
                .peers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .open(key, Instant::now());
            if let Err(r) = opened {
                self.stats.refuse(r, peer);
                drop(stream);
                continue;
            }
            let slot = PeerSlot {
                peers: shared.peers.clone(),
                key,
                _permit: permit,
            };
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            conns.spawn(connection(
                stream,
                peer,
                shared.clone(),
                stop_rx.clone(),
                slot,
            ));
        }
        // Shutdown: ask every connection to close, wait for them a grace period, drop the rest.
        let _ = stop_tx.send(true);
        let grace = Duration::from_millis(cfg.shutdown_grace_ms.saturating_add(100));
        let drained =
            tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            let left = conns.len() as u64;
            self.stats
                .dropped_after_grace
                .fetch_add(left, Ordering::Relaxed);
            tracing::warn!(left, "connections dropped at shutdown");
        }
        Ok(())
    }
}

/// Serves `router` on `listener` behind every bound of `cfg` until `shutdown` completes: the
/// one call a host makes (see the module documentation). Keep a [`Server`] instead to read its
/// counters.
///
/// # Errors
/// An invalid `cfg` ([`std::io::ErrorKind::InvalidInput`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server =
        Server::new(cfg).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    server.run(listener, router, shutdown).await
}

/// Binds `addr` with `SO_REUSEADDR` (a restarted server gets its port back at once) and
/// `TCP_NODELAY` on accepted sockets' listener defaults.
///
/// # Errors
/// The socket's I/O error.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    slot: PeerSlot,
) {
    let _slot = slot;
    let _ = stream.set_nodelay(true);
    let cfg = shared.cfg;
    let svc_shared = shared.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let shared = svc_shared.clone();
        async move { Ok::<_, Infallible>(handle(req, &shared, peer).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(cfg.header_read_timeout_ms))
        .max_buf_size(cfg.max_header_bytes)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let age = tokio::time::sleep(Duration::from_millis(cfg.max_connection_age_ms));
    let finished = tokio::select! {
        r = conn.as_mut() => Some(r),
        () = age => {
            shared.stats.aged_out.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "connection aged out");
            None
        }
        _ = stop.wait_for(|s| *s) => None,
    };
    let result = match finished {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            let grace = Duration::from_millis(cfg.shutdown_grace_ms);
            match tokio::time::timeout(grace, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => {
                    shared
                        .stats
                        .dropped_after_grace
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "connection dropped after its grace period");
                    return;
                }
            }
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            shared.stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "request head timed out: connection closed");
        } else {
            shared
                .stats
                .connection_errors
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, error = %e, "connection ended in an error");
        }
    }
}

fn refusal(r: Refusal, close: bool, retry_after_ms: Option<u64>) -> Response<Body> {
    let mut resp = Response::new(Body::from(r.name()));
    *resp.status_mut() = r.status();
    let h = resp.headers_mut();
    h.insert(REFUSAL_HEADER, HeaderValue::from_static(r.name()));
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(ms) = retry_after_ms {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(ms.div_ceil(1_000).max(1)),
        );
        h.insert(RETRY_AFTER_MS_HEADER, HeaderValue::from(ms.max(1)));
    }
    resp
}

async fn handle(req: Request<Incoming>, shared: &Shared, peer: SocketAddr) -> Response<Body> {
    let cfg = shared.cfg;
    let stats = &shared.stats;
    let key = peer_key(peer.ip());
    let token = shared
        .peers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(key, Instant::now());
    if let Err(ms) = token {
        stats.refuse(Refusal::RateLimited, peer);
        return refusal(Refusal::RateLimited, false, Some(ms));
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cfg.max_body_bytes as u64) {
        stats.refuse(Refusal::BodyTooLarge, peer);
        return refusal(Refusal::BodyTooLarge, true, None);
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        Duration::from_millis(cfg.body_timeout_ms),
        Limited::new(body, cfg.max_body_bytes).collect(),
    )
    .await;
    let bytes = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            stats.refuse(Refusal::BodyTooLarge, peer);
            return refusal(Refusal::BodyTooLarge, true, None);
        }
        Ok(Err(_)) => {
            stats.refuse(Refusal::BadBody, peer);
            return refusal(Refusal::BadBody, true, None);
        }
        Err(_) => {
            stats.refuse(Refusal::BodyTimeout, peer);
            return refusal(Refusal::BodyTimeout, true, None);
        }
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(ConnectInfo(peer));
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let mut router = shared.router.clone();
    match tokio::time::timeout(
        Duration::from_millis(cfg.request_timeout_ms),
        router.call(req),
    )
    .await
    {
        Ok(Ok(resp)) => {
            if resp.extensions().get::<Authenticated>().is_some() {
                stats.refunded.fetch_add(1, Ordering::Relaxed);
                shared
                    .peers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .refund(key);
            }
            resp
        }
        Ok(Err(never)) => match never {},
        Err(_) => {
            stats.refuse(Refusal::RequestTimeout, peer);
            refusal(Refusal::RequestTimeout, false, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_addresses_or_ipv6_64s() {
        let k = |s: &str| peer_key(s.parse().unwrap());
        assert_eq!(k("10.0.0.1"), k("::ffff:10.0.0.1"));
        assert_ne!(k("10.0.0.1"), k("10.0.0.2"));
        assert_eq!(k("2001:db8::1"), k("2001:db8::ffff:1"));
        assert_ne!(k("2001:db8::1"), k("2001:db8:0:1::1"));
    }

    #[test]
    fn buckets_refill_and_the_table_forgets_idle_peers_only() {
        let cfg = ServerConfig {
            max_peers: 2,
            max_connections_per_peer: 1,
            rate: RateLimit {
                per_second: 10,
                burst: 2,
            },
            ..ServerConfig::default()
        };
        let mut p = Peers {
            map: HashMap::new(),
            cfg,
        };
        let (a, b, c) = (PeerKey::V4(1), PeerKey::V4(2), PeerKey::V4(3));
        let now = Instant::now();
        p.open(a, now).unwrap();
        assert_eq!(p.open(a, now), Err(Refusal::PeerConnectionCap));
        assert_eq!(p.take(a, now), Ok(()));
        assert_eq!(p.take(a, now), Ok(()));
        assert_eq!(p.take(a, now), Err(100));
        // An authenticated request's token comes back (never above a full bucket).
        p.refund(a);
        assert_eq!(p.take(a, now), Ok(()));
        assert_eq!(p.take(a, now), Err(100));
        for _ in 0..5 {
            p.refund(a);
        }
        assert_eq!(p.take(a, now), Ok(()));
        assert_eq!(p.take(a, now), Ok(()));
        assert_eq!(p.take(a, now), Err(100));
        let later = now + Duration::from_millis(100);
        assert_eq!(p.take(a, later), Ok(()));
        p.open(b, now).unwrap();
        // Both peers hold a connection: a third peer finds no room.
        assert_eq!(p.open(c, now), Err(Refusal::PeerTableFull));
        p.close(b);
        // b is idle with a full bucket: forgotten for c.
        p.open(c, now).unwrap();
        assert!(!p.map.contains_key(&b));
        assert!(p.map.contains_key(&a));
    }

    #[test]
    fn configs_are_checked() {
        assert!(ServerConfig::default().validate().is_ok());
        for bad in [
            ServerConfig {
                max_connections: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                max_connections_per_peer: 2_000,
                ..ServerConfig::default()
            },
            ServerConfig {
                header_read_timeout_ms: 0,
                ..ServerConfig::default()
            },
            ServerConfig {
                max_header_bytes: 100,
                ..ServerConfig::default()
            },
            ServerConfig {
                rate: RateLimit {
                    per_second: 0,
                    burst: 1,
                },
                ..ServerConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
