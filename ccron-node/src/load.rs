//! The localnet's load generator: one client that submits requests through the nodes' client
//! endpoints while the network runs (the binary gives the payload of each request number, e.g.
//! the orders ledger's "place order k").
//!
//! Every `interval` it signs request number k with the payload the binary's function gives for
//! k, and submits it to **every** node's `POST /v1/requests` (the address each node wrote to
//! `node-I/http.addr`): whichever validator proposes next has it, a node that is down or
//! restarting misses nothing, and the pools (by digest) and execution (by `(client, number)`)
//! make it execute once.
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
    /// Seed of the client's key.
    pub seed: u64,
    /// Time between two requests.
    pub interval: Duration,
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
            .finish_non_exhaustive()
    }
}

impl LoadOptions {
    /// The localnet's load: a request every 250 ms with `payload`.
    pub fn localnet(home: &Path, nodes: usize, seed: u64, payload: LoadPayload) -> Self {
        Self {
            home: home.to_path_buf(),
            nodes,
            seed,
            interval: Duration::from_millis(250),
            payload,
        }
    }
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
    /// Submissions that failed to connect or read (a node down or restarting).
    pub unreachable: u64,
}

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

/// Sends one request (`head`, then `body`) on a fresh connection with 1 s timeouts and reads the
/// response (at most `MAX_RESPONSE_BYTES`): its status code and whole text.
fn exchange(addr: SocketAddr, head: &[u8], body: &[u8]) -> std::io::Result<(u16, String)> {
    let timeout = Duration::from_millis(1_000);
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(head)?;
    s.write_all(body)?;
    let mut text = String::new();
    s.take(MAX_RESPONSE_BYTES).read_to_string(&mut text)?;
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

/// Reads the result of each of the load client's requests `1..=orders` back from every node
/// (`GET /v1/requests/{client}/{number}`) and believes a result when f+1 nodes (n = 3f+1 or
/// more) return it identically.
pub fn read_results(home: &Path, nodes: usize, seed: u64, orders: u64) -> ResultsRead {
    let key = client_key(seed);
    let client = crate::request::client_id(&key.verifying_key().to_bytes());
    let quorum = nodes.saturating_sub(1) / 3 + 1;
    let addrs: Vec<Option<SocketAddr>> = (0..nodes).map(|i| read_addr(home, i)).collect();
    let mut out = ResultsRead::default();
    for number in 1..=orders {
        out.asked += 1;
        let mut bodies: std::collections::BTreeMap<String, usize> = Default::default();
        let mut pending = false;
        for addr in addrs.iter().flatten() {
            match get(*addr, &format!("/v1/requests/{client}/{number}")) {
                Ok((200, body)) => *bodies.entry(body).or_default() += 1,
                Ok((202, _)) => pending = true,
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

/// A running load generator (a thread); stopped by [`LoadGenerator::stop`] or on drop.
pub struct LoadGenerator {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<LoadStats>>,
}

impl std::fmt::Debug for LoadGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadGenerator").finish_non_exhaustive()
    }
}

impl LoadGenerator {
    /// Starts placing orders.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(opts: LoadOptions) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("ccron-load".into())
            .spawn(move || run(&opts, &flag))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops it and returns what it did.
    pub fn stop(mut self) -> LoadStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
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

fn run(opts: &LoadOptions, stop: &AtomicBool) -> LoadStats {
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
    let key = client_key(opts.seed);
    let client = crate::request::client_id(&key.verifying_key().to_bytes());
    let mut stats = LoadStats::default();
    let mut number = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(opts.interval);
        number += 1;
        let request =
            signed_request(&domain, &key, number, (opts.payload)(client, number)).encode();
        stats.orders += 1;
        let mut admitted = false;
        for i in 0..opts.nodes {
            stats.submissions += 1;
            // Re-read every time: a restarted node listens on a new port.
            let Some(addr) = read_addr(&opts.home, i) else {
                stats.unreachable += 1;
                continue;
            };
            match post(addr, "/v1/requests", &request) {
                Ok((202, _)) => admitted = true,
                Ok((code, text)) => {
                    stats.refused += 1;
                    tracing::debug!(node = i, code, response = %text.lines().last().unwrap_or(""), "request refused");
                }
                Err(e) => {
                    stats.unreachable += 1;
                    tracing::debug!(node = i, error = %e, "node unreachable");
                }
            }
        }
        if admitted {
            stats.admitted += 1;
        }
    }
    stats
}
