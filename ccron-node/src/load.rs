//! The localnet's load generator: clients that submit requests through the nodes' client
//! endpoints while the network runs (the binary gives the payload of each request number, e.g.
//! the orders ledger's "place order k").
//!
//! Every `interval` each client signs its request number k with the payload the binary's
//! function gives for k, and submits it to **every** node's `POST /v1/requests` (the address
//! each node wrote to `node-I/http.addr`): whichever validator proposes next has it, a node that
//! is down or restarting misses nothing, and the pools (by digest) and execution (by `(client,
//! number)`) make it execute once.
//!
//! The default is one client at 4 requests/s ([`LoadOptions::localnet`]). A higher rate
//! ([`LoadOptions::at_rate`], `localnet --load-rate N`) is spread over
//! [`clients_for_rate`] clients of at most [`MAX_CLIENT_RATE`] requests/s each, each with its
//! own key ([`client_seed`]) and its own posters, started a fraction of an interval apart: one
//! signer and one poster per node would be paced by the slowest post.
//!
//! The HTTP client is a minimal blocking HTTP/1.1 POST over a loopback `TcpStream` with
//! timeouts and a bounded response read: the localnet is synchronous and this is a test
//! driver, not a general client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::http_addr_path;
use crate::crypto::SigningDomain;
use crate::request::{ClientRequest, SignedRequest};

/// The payload of request number k of the load client whose ledger id is the first argument
/// (the binary's, for its ledger).
pub type LoadPayload = Arc<dyn Fn(ccron::host::ClientId, u64) -> Vec<u8> + Send + Sync>;

/// Load generator options.
#[derive(Clone)]
pub struct LoadOptions {
    /// The localnet home (where each node writes `node-I/http.addr`).
    pub home: PathBuf,
    /// Number of nodes.
    pub nodes: usize,
    /// Seed of the first client's key (client c's is [`client_seed`]`(seed, c)`).
    pub seed: u64,
    /// Time between two requests of one client.
    pub interval: Duration,
    /// How many clients sign and post (each at one request per `interval`).
    pub clients: usize,
    /// The payload of each request number.
    pub payload: LoadPayload,
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("home", &self.home)
            .field("nodes", &self.nodes)
            .field("seed", &self.seed)
            .field("interval", &self.interval)
            .field("clients", &self.clients)
            .finish_non_exhaustive()
    }
}

impl LoadOptions {
    /// The localnet's load: one client, a request every 250 ms with `payload`
    /// ([`DEFAULT_LOAD_RATE`]).
    pub fn localnet(home: &Path, nodes: usize, seed: u64, payload: LoadPayload) -> Self {
        Self::at_rate(home, nodes, seed, DEFAULT_LOAD_RATE, payload)
    }

    /// `rate` requests/s (at least 1) with `payload`, over [`clients_for_rate`] clients each
    /// at [`client_interval`].
    pub fn at_rate(home: &Path, nodes: usize, seed: u64, rate: u32, payload: LoadPayload) -> Self {
        let clients = clients_for_rate(rate);
        Self {
            home: home.to_path_buf(),
            nodes,
            seed,
            interval: client_interval(rate, clients),
            clients,
            payload,
        }
    }
}

/// The localnet's default load: 4 requests/s, one client.
pub const DEFAULT_LOAD_RATE: u32 = 4;

/// The most requests/s one load client signs: a higher rate is spread over more clients
/// ([`clients_for_rate`]), so that one client's posts to a node (one poster thread per node,
/// one post at a time) have at least 40 ms each.
pub const MAX_CLIENT_RATE: u32 = 25;

/// How many clients carry `rate` requests/s: `ceil(rate / MAX_CLIENT_RATE)`, at least 1.
pub fn clients_for_rate(rate: u32) -> usize {
    usize::try_from(rate.max(1).div_ceil(MAX_CLIENT_RATE)).unwrap_or(usize::MAX)
}

/// The time between two requests of one of `clients` clients carrying `rate` requests/s
/// together: `clients / rate` seconds (rate at least 1).
pub fn client_interval(rate: u32, clients: usize) -> Duration {
    let clients = u64::try_from(clients.max(1)).unwrap_or(u64::MAX);
    Duration::from_nanos(1_000_000_000u64.saturating_mul(clients) / u64::from(rate.max(1)))
}

/// The key seed of load client `c` of a localnet with key seed `seed`: client 0's is `seed`
/// itself (the one-client load keeps its key), client c's `seed + c * 2^32`.
pub fn client_seed(seed: u64, c: usize) -> u64 {
    seed.wrapping_add(u64::try_from(c).unwrap_or(u64::MAX).wrapping_shl(32))
}

/// Where a client's pacer stands at `now` (time since the client started) when its next
/// request was due at `next`: how long to wait, how many whole slots it fell behind (not
/// signed: counted, [`LoadStats::skipped_pace`]), and the due point after the one it signs now.
/// A client less than one `interval` late signs at once and keeps its grid (no drift); one
/// more late skips the slots it missed instead of bursting to catch up.
pub fn pace(next: Duration, now: Duration, interval: Duration) -> (Duration, u64, Duration) {
    let interval = interval.max(Duration::from_micros(1));
    if now <= next {
        return (next - now, 0, next + interval);
    }
    let late = now - next;
    let behind = u64::try_from(late.as_nanos() / interval.as_nanos()).unwrap_or(u64::MAX);
    let skipped_to = next + interval.saturating_mul(u32::try_from(behind).unwrap_or(u32::MAX));
    (Duration::ZERO, behind, skipped_to + interval)
}

/// What the load generator did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadStats {
    /// Requests signed and submitted.
    pub orders: u64,
    /// Requests at least one node admitted (`202`).
    pub admitted: u64,
    /// Submissions (requests x nodes tried).
    pub submissions: u64,
    /// Submissions a node refused (a status other than 202; `409` when another copy is already
    /// pending or executed is normal).
    pub refused: u64,
    /// Submissions that failed to connect or read (a node down or restarting, or one that did
    /// not answer within [`EXCHANGE_DEADLINE`]).
    pub unreachable: u64,
    /// Submissions not made because that node's queue was full: its earlier posts were still
    /// waiting on it (at most [`NODE_QUEUE`] wait per node).
    #[serde(default)]
    pub skipped_busy: u64,
    /// Requests not signed because the client fell a whole interval or more behind its pace
    /// (the machine too busy to sign and queue at the rate asked; [`pace`]).
    #[serde(default)]
    pub skipped_pace: u64,
}

impl LoadStats {
    /// The sum of two clients' figures.
    pub fn plus(self, o: Self) -> Self {
        Self {
            orders: self.orders.saturating_add(o.orders),
            admitted: self.admitted.saturating_add(o.admitted),
            submissions: self.submissions.saturating_add(o.submissions),
            refused: self.refused.saturating_add(o.refused),
            unreachable: self.unreachable.saturating_add(o.unreachable),
            skipped_busy: self.skipped_busy.saturating_add(o.skipped_busy),
            skipped_pace: self.skipped_pace.saturating_add(o.skipped_pace),
        }
    }
}

/// Requests waiting to be posted to one node: a node slower than the client's pace fills its
/// queue and misses requests (counted, `LoadStats::skipped_busy`); the others are not held.
pub const NODE_QUEUE: usize = 4;

/// The signing key of the load client of `seed`.
pub fn client_key(seed: u64) -> SigningKey {
    let h: [u8; 32] = Sha256::new()
        .chain_update(b"ccron-malachite-load-client")
        .chain_update(seed.to_le_bytes())
        .finalize()
        .into();
    SigningKey::from_bytes(&h)
}

/// Request `number` of `key`'s client with `payload`, signed for the chain of `domain`.
pub fn signed_request(
    domain: &SigningDomain,
    key: &SigningKey,
    number: u64,
    payload: Vec<u8>,
) -> SignedRequest {
    ClientRequest {
        client_key: key.verifying_key().to_bytes(),
        number,
        payload,
    }
    .sign(domain, key)
}

/// The largest response read back.
const MAX_RESPONSE_BYTES: u64 = 16 * 1024;

/// POSTs `body` to `http://addr{path}` (HTTP/1.1, `Connection: close`) and returns the status
/// code and the response text (at most `MAX_RESPONSE_BYTES`).
///
/// # Errors
/// Connecting, writing or reading failed, or the response has no status line.
pub fn post(addr: SocketAddr, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    exchange(addr, head.as_bytes(), body)
}

/// How long one exchange may take in all (connect, send, the whole response): an endpoint
/// that answers slowly, or drips its answer a byte at a time (`--byzantine slow-http`), costs
/// the client this much and no more. Per-read timeouts alone do not bound a drip.
pub const EXCHANGE_DEADLINE: Duration = Duration::from_millis(1_500);

/// Sends one request (`head`, then `body`) on a fresh connection and reads the response (at
/// most `MAX_RESPONSE_BYTES`), all within [`EXCHANGE_DEADLINE`]: its status code and whole text.
fn exchange(addr: SocketAddr, head: &[u8], body: &[u8]) -> std::io::Result<(u16, String)> {
    exchange_within(addr, head, body, EXCHANGE_DEADLINE)
}

/// [`exchange`] with the deadline `limit` for the whole exchange: every read waits at most
/// what is left of it, and an answer not complete by then is a `TimedOut` error.
fn exchange_within(
    addr: SocketAddr,
    head: &[u8],
    body: &[u8],
    limit: Duration,
) -> std::io::Result<(u16, String)> {
    // The localnet's client is a test driver on the wall clock (not replicated state).
    #[allow(clippy::disallowed_methods)]
    let start = std::time::Instant::now();
    let left = || {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no whole answer within {} ms", limit.as_millis()),
            ))
        } else {
            Ok(left)
        }
    };
    let mut s = TcpStream::connect_timeout(&addr, left()?)?;
    s.set_write_timeout(Some(left()?))?;
    s.write_all(head)?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        s.set_read_timeout(Some(left()?))?;
        let room = usize::try_from(MAX_RESPONSE_BYTES)
            .unwrap_or(usize::MAX)
            .saturating_sub(raw.len());
        if room == 0 {
            break;
        }
        let want = room.min(chunk.len());
        match s.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(k) => raw.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // The read's wait ran out: the deadline (checked by `left`) or a spurious
                // wake-up; loop to tell which.
            }
            Err(e) => return Err(e),
        }
    }
    let text = String::from_utf8(raw)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "answer not UTF-8"))?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other("no HTTP status line"))?;
    Ok((code, text))
}

/// GETs `http://addr{path}` (HTTP/1.1, `Connection: close`) and returns the status code and
/// the response body (the response read is at most `MAX_RESPONSE_BYTES`).
///
/// # Errors
/// Connecting, writing or reading failed, or the response has no status line.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let (code, text) = exchange(addr, head.as_bytes(), &[])?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// What reading the orders' results back from the nodes gave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultsRead {
    /// Request numbers asked about (1..=orders), each of every node.
    pub asked: u64,
    /// Results returned identically (`200`, same body) by at least f+1 nodes: believed.
    pub believed: u64,
    /// Of those, results that are `ok ...` (the order was placed).
    pub believed_ok: u64,
    /// Requests some node still reported pending (`202`) and no f+1 agreed on yet.
    pub pending: u64,
    /// Requests for which two nodes returned different `200` bodies (a faulty node or a bug).
    pub conflicting: u64,
}

impl ResultsRead {
    /// The sum of two clients' reads.
    pub fn plus(self, o: Self) -> Self {
        Self {
            asked: self.asked.saturating_add(o.asked),
            believed: self.believed.saturating_add(o.believed),
            believed_ok: self.believed_ok.saturating_add(o.believed_ok),
            pending: self.pending.saturating_add(o.pending),
            conflicting: self.conflicting.saturating_add(o.conflicting),
        }
    }
}

/// [`read_results`] for every load client: client c (key seed [`client_seed`]`(seed, c)`)
/// signed `orders[c]` requests; the figures summed.
pub fn read_results_of_clients(
    home: &Path,
    nodes: usize,
    seed: u64,
    orders: &[u64],
) -> ResultsRead {
    orders
        .iter()
        .enumerate()
        .map(|(c, &k)| read_results(home, nodes, client_seed(seed, c), k))
        .fold(ResultsRead::default(), ResultsRead::plus)
}

/// Consecutive failed reads after which [`read_results`] stops asking a node (it is down, or
/// answers too slowly to wait for: each failure costs up to [`EXCHANGE_DEADLINE`]).
pub const READ_GIVE_UP_AFTER: u32 = 3;

/// Reads the result of each of the load client's requests `1..=orders` back from every node
/// (`GET /v1/requests/{client}/{number}`) and believes a result when f+1 nodes (n = 3f+1 or
/// more) return it identically.
///
/// Each node is read on its own thread, and a node that fails [`READ_GIVE_UP_AFTER`] reads in
/// a row is asked no more: one slow or dead endpoint costs the reader a few deadlines, not one
/// per request, and never delays the other nodes' answers.
pub fn read_results(home: &Path, nodes: usize, seed: u64, orders: u64) -> ResultsRead {
    let key = client_key(seed);
    let client = crate::request::client_id(&key.verifying_key().to_bytes());
    let quorum = nodes.saturating_sub(1) / 3 + 1;
    let addrs: Vec<Option<SocketAddr>> = (0..nodes).map(|i| read_addr(home, i)).collect();
    // Per node, per request number: 200 and its body, 202 (pending), or nothing.
    let answers: Vec<Vec<Option<(u16, String)>>> = std::thread::scope(|scope| {
        let readers: Vec<_> = addrs
            .iter()
            .map(|addr| {
                let client = &client;
                scope.spawn(move || {
                    let mut out = Vec::new();
                    let mut failures = 0u32;
                    for number in 1..=orders {
                        let answer = match addr {
                            Some(a) if failures < READ_GIVE_UP_AFTER => {
                                get(*a, &format!("/v1/requests/{client}/{number}")).ok()
                            }
                            _ => None,
                        };
                        failures = if answer.is_some() { 0 } else { failures + 1 };
                        out.push(answer);
                    }
                    out
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap_or_default())
            .collect()
    });
    let mut out = ResultsRead::default();
    for k in 0..usize::try_from(orders).unwrap_or(usize::MAX) {
        out.asked += 1;
        let mut bodies: std::collections::BTreeMap<&str, usize> = Default::default();
        let mut pending = false;
        for node in &answers {
            match node.get(k) {
                Some(Some((200, body))) => *bodies.entry(body.as_str()).or_default() += 1,
                Some(Some((202, _))) => pending = true,
                _ => {}
            }
        }
        if bodies.len() > 1 {
            out.conflicting += 1;
        }
        match bodies.iter().find(|(_, k)| **k >= quorum) {
            Some((body, _)) => {
                out.believed += 1;
                let ok = serde_json::from_str::<crate::results::RequestResult>(body)
                    .is_ok_and(|r| r.result.starts_with("ok"));
                if ok {
                    out.believed_ok += 1;
                }
            }
            None if pending => out.pending += 1,
            None => {}
        }
    }
    out
}

/// A running load generator (a thread per client); stopped by [`LoadGenerator::stop`] or on
/// drop.
pub struct LoadGenerator {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<LoadStats>>,
}

impl std::fmt::Debug for LoadGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadGenerator").finish_non_exhaustive()
    }
}

impl LoadGenerator {
    /// Starts placing orders: `opts.clients` clients, client c starting `c / clients` of an
    /// interval after client 0.
    ///
    /// # Errors
    /// A thread could not be spawned (the clients already started are stopped).
    pub fn start(opts: LoadOptions) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut generator = Self {
            stop: stop.clone(),
            handles: Vec::new(),
        };
        let clients = opts.clients.max(1);
        let opts = Arc::new(opts);
        for c in 0..clients {
            let flag = stop.clone();
            let o = Arc::clone(&opts);
            let offset = o.interval.mul_f64(c as f64 / clients as f64);
            let handle = std::thread::Builder::new()
                .name(format!("ccron-load-{c}"))
                .spawn(move || run(&o, c, offset, &flag))?;
            generator.handles.push(handle);
        }
        Ok(generator)
    }

    /// Stops it and returns what each client did (client c at index c).
    pub fn stop_each(mut self) -> Vec<LoadStats> {
        self.stop.store(true, Ordering::Relaxed);
        std::mem::take(&mut self.handles)
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    }

    /// Stops it and returns what its clients did together.
    pub fn stop(self) -> LoadStats {
        self.stop_each()
            .into_iter()
            .fold(LoadStats::default(), LoadStats::plus)
    }
}

impl Drop for LoadGenerator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn read_addr(home: &Path, i: usize) -> Option<SocketAddr> {
    std::fs::read_to_string(http_addr_path(home, i))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Load client `c`: signs at its pace (its first request `offset` after it starts, then every
/// `opts.interval`) until `stop`.
fn run(opts: &LoadOptions, c: usize, offset: Duration, stop: &AtomicBool) -> LoadStats {
    // The chain the requests are signed for: the localnet's genesis.
    let domain = match crate::core::read_genesis(&opts.home).and_then(|g| {
        g.domain()
            .map_err(|e| crate::core::NodeError::Config(e.to_string()))
    }) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "load: no signing domain: nothing sent");
            return LoadStats::default();
        }
    };
    let key = client_key(client_seed(opts.seed, c));
    let client = crate::request::client_id(&key.verifying_key().to_bytes());
    let mut stats = LoadStats::default();
    // One poster per node with a bounded queue: the client signs at its own pace and a node
    // that answers slowly (or drips its answer) delays only its own posts. Each poster reports
    // (request number, node, outcome); `admitted` is counted per request at the end.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<(u64, usize, Outcome)>();
    let (queues, posters): (Vec<_>, Vec<_>) = (0..opts.nodes)
        .map(|i| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, Arc<Vec<u8>>)>(NODE_QUEUE);
            let home = opts.home.clone();
            let done = done_tx.clone();
            let poster = std::thread::Builder::new()
                .name(format!("load-{c}-post-{i}"))
                .spawn(move || {
                    for (number, request) in rx {
                        // Re-read every time: a restarted node listens on a new port.
                        let outcome = match read_addr(&home, i) {
                            None => Outcome::Unreachable("no address".into()),
                            Some(addr) => match post(addr, "/v1/requests", &request) {
                                Ok((202, _)) => Outcome::Admitted,
                                Ok((code, text)) => Outcome::Refused(
                                    code,
                                    text.lines().last().unwrap_or("").to_string(),
                                ),
                                Err(e) => Outcome::Unreachable(e.to_string()),
                            },
                        };
                        if done.send((number, i, outcome)).is_err() {
                            return;
                        }
                    }
                });
            if let Err(e) = &poster {
                tracing::error!(node = i, error = %e, "load: no poster thread: nothing posted to this node");
            }
            (tx, poster)
        })
        .unzip();
    drop(done_tx);
    let mut number = 0u64;
    // The client's pace on the wall clock (a test driver, not replicated state).
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let mut next = offset + opts.interval;
    while !stop.load(Ordering::Relaxed) {
        let (wait, skipped, after) = pace(next, started.elapsed(), opts.interval);
        next = after;
        stats.skipped_pace += skipped;
        if !wait.is_zero() {
            std::thread::sleep(wait);
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        number += 1;
        let request = Arc::new(
            signed_request(&domain, &key, number, (opts.payload)(client, number)).encode(),
        );
        stats.orders += 1;
        for (i, queue) in queues.iter().enumerate() {
            stats.submissions += 1;
            if queue.try_send((number, Arc::clone(&request))).is_err() {
                stats.skipped_busy += 1;
                tracing::debug!(
                    node = i,
                    number,
                    "load: node's queue full: request not posted to it"
                );
            }
        }
    }
    // Stop: the posters finish what is queued (each post bounded by its deadline).
    drop(queues);
    for p in posters.into_iter().flatten() {
        let _ = p.join();
    }
    let mut admitted = std::collections::BTreeSet::new();
    for (number, i, outcome) in done_rx.try_iter() {
        match outcome {
            Outcome::Admitted => {
                admitted.insert(number);
            }
            Outcome::Refused(code, last) => {
                stats.refused += 1;
                tracing::debug!(node = i, number, code, response = %last, "request refused");
            }
            Outcome::Unreachable(e) => {
                stats.unreachable += 1;
                tracing::debug!(node = i, number, error = %e, "node unreachable");
            }
        }
    }
    stats.admitted = admitted.len() as u64;
    stats
}

/// What one post of the load client gave.
enum Outcome {
    Admitted,
    Refused(u16, String),
    Unreachable(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// An endpoint that reads one request and writes `answer`, one byte every `drip` when
    /// given (as `--byzantine slow-http` does), else at once; stops when the client hangs up.
    fn serve_once(
        answer: &'static [u8],
        drip: Option<Duration>,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let Some(every) = drip else {
                s.write_all(answer).unwrap();
                return;
            };
            for b in answer {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(every);
            }
        });
        (addr, server)
    }

    /// An endpoint that drips its answer one byte every 100 ms: the exchange ends at its
    /// deadline with `TimedOut`, not when the drip ends (about 6 s later).
    #[test]
    fn a_dripping_endpoint_costs_the_deadline_not_the_drip() {
        let (addr, server) = serve_once(
            b"HTTP/1.1 202 Accepted\r\nContent-Length: 24\r\n\r\nqueued for the next block",
            Some(Duration::from_millis(100)),
        );
        let start = tokio::time::Instant::now();
        let limit = Duration::from_millis(700);
        let err = exchange_within(addr, b"GET / HTTP/1.1\r\n\r\n", &[], limit)
            .expect_err("a drip must not complete within the deadline");
        let took = start.elapsed();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(took >= limit, "{took:?}");
        assert!(
            took < Duration::from_millis(2_500),
            "{took:?}: bounded by the deadline"
        );
        server.join().unwrap();
    }

    /// The default load is one client at 4/s (a request every 250 ms, client 0's key is the
    /// seed's); 100/s is four clients of 25/s, each a request every 40 ms.
    #[test]
    fn a_rate_is_spread_over_clients_of_at_most_25_per_second() {
        assert_eq!(clients_for_rate(DEFAULT_LOAD_RATE), 1);
        assert_eq!(
            client_interval(DEFAULT_LOAD_RATE, 1),
            Duration::from_millis(250)
        );
        let home = Path::new("/nonexistent");
        let payload: LoadPayload = Arc::new(|_, _| Vec::new());
        let default = LoadOptions::localnet(home, 4, 9, payload.clone());
        assert_eq!(
            (default.clients, default.interval),
            (1, Duration::from_millis(250))
        );
        let fast = LoadOptions::at_rate(home, 4, 9, 100, payload);
        assert_eq!(
            (fast.clients, fast.interval),
            (4, Duration::from_millis(40))
        );
        assert_eq!(clients_for_rate(25), 1);
        assert_eq!(clients_for_rate(26), 2);
        assert_eq!(clients_for_rate(0), 1);
        // 90/s over 4 clients: 44.4 ms each, 90 requests a second together.
        assert_eq!(client_interval(90, 4), Duration::from_nanos(44_444_444));
        assert_eq!(client_interval(0, 1), Duration::from_secs(1));
        assert_eq!(client_seed(9, 0), 9);
        let seeds: std::collections::BTreeSet<u64> = (0..16).map(|c| client_seed(9, c)).collect();
        assert_eq!(seeds.len(), 16, "every client has its own key");
    }

    /// The pacer keeps its grid when on time or less than an interval late, and skips (counts)
    /// whole intervals it fell behind instead of bursting.
    #[test]
    fn the_pacer_keeps_its_grid_and_skips_what_it_fell_behind() {
        let ms = Duration::from_millis;
        // Early: wait for the due point; the next is one interval on.
        assert_eq!(pace(ms(40), ms(10), ms(40)), (ms(30), 0, ms(80)));
        assert_eq!(pace(ms(40), ms(40), ms(40)), (ms(0), 0, ms(80)));
        // Late by less than an interval: sign now, keep the grid.
        assert_eq!(pace(ms(40), ms(79), ms(40)), (ms(0), 0, ms(80)));
        // Late by 2.5 intervals: two slots skipped, sign for the third, next on the grid.
        assert_eq!(pace(ms(40), ms(140), ms(40)), (ms(0), 2, ms(160)));
        // A zero interval does not divide by zero.
        assert_eq!(pace(ms(5), ms(5), Duration::ZERO).1, 0);
    }

    #[test]
    fn client_figures_add_up() {
        let a = LoadStats {
            orders: 3,
            admitted: 2,
            submissions: 12,
            refused: 1,
            unreachable: 1,
            skipped_busy: 2,
            skipped_pace: 1,
        };
        let b = a.plus(a);
        assert_eq!((b.orders, b.admitted, b.submissions), (6, 4, 24));
        assert_eq!(
            (b.refused, b.unreachable, b.skipped_busy, b.skipped_pace),
            (2, 2, 4, 2)
        );
        let r = ResultsRead {
            asked: 5,
            believed: 4,
            believed_ok: 3,
            pending: 1,
            conflicting: 0,
        };
        assert_eq!(r.plus(r).believed_ok, 6);
    }

    /// A whole answer within the deadline is read to its end.
    #[test]
    fn a_prompt_answer_is_read_whole() {
        let (addr, server) = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", None);
        let (code, body) = get(addr, "/x").unwrap();
        assert_eq!((code, body.as_str()), (200, "hello"));
        server.join().unwrap();
    }
}
