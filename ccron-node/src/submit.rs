//! Clients of the nodes' HTTP API: [`NodeApi`], one typed exchange with one node (submit a
//! signed request, read a request's result), and [`NodeSubmit`], a signing client over every
//! node that never loses a request silently. It is the relay's way back into a Malachite
//! cluster ([`ccron_http::Submit`]): `ccron relay` submits workers' results and its progress
//! through it.
//!
//! Bounds and rules:
//!
//! - every exchange has a deadline ([`NodeApiConfig::timeout_ms`], connect to the last byte)
//!   and reads at most [`NodeApiConfig::max_answer_bytes`] of an answer;
//! - a request is signed in the node's format ([`crate::request`]) for the nodes' chain (its
//!   signing domain: given with [`NodeSubmit::with_domain`], or read from `GET /v1/chain` and
//!   believed when f+1 nodes answer it identically, [`NodeApi::domain_by_quorum`], so the
//!   client works against chains of either domain version), its payload checked against
//!   [`MAX_PAYLOAD_BYTES`] before signing, and posted to **every** node (whichever proposes
//!   next has it; the pools dedupe by digest, execution by `(client, number)`);
//! - a result is believed only when f+1 nodes return it identically ([`NodeApi::result_by_quorum`]);
//! - pacing: at most [`NodeSubmitConfig::max_in_flight`] requests await execution, and never a
//!   number more than [`REQUEST_WINDOW`] above the oldest of them (the ledger refuses a number
//!   that far below the client's newest executed one: [`SubmitError::WindowFull`] instead);
//! - an equal payload sent again while its request awaits execution goes out again **under
//!   the same number** (the same signed bytes), so it executes at most once;
//! - numbers never repeat across restarts: they start at or above the wall clock in
//!   microseconds (above the ledger's floor for a client it may have evicted) and at or above
//!   a durable reservation ([`NumberFile`], refused loudly when damaged);
//! - every outcome is a typed error and a counter ([`SubmitCounters`]) and traced; a request
//!   the ledger executed with an `err` reply is counted and traced as refused.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use ccron::host::{ClientId, REQUEST_WINDOW};
use ccron_http::{Submit, SubmitError};
use ed25519_dalek::SigningKey;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::{ChainInfo, ChainQuorum};
use crate::crypto::SigningDomain;
use crate::request::{ClientRequest, MAX_PAYLOAD_BYTES, SignedRequest, client_id};
use crate::results::RequestResult;

/// How a [`NodeApi`] talks to the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeApiConfig {
    /// The nodes' API base URLs (`http://host:port`).
    pub nodes: Vec<String>,
    /// Identical answers needed to believe a result (f+1 for n = 3f+1 nodes).
    pub quorum: usize,
    /// One exchange's deadline, connect to the last byte of the answer.
    pub timeout_ms: u64,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
    /// Largest answer body read (results and refusals are small).
    pub max_answer_bytes: usize,
}

impl NodeApiConfig {
    /// `nodes` with the quorum f+1 for their number, 2 s exchanges, 1 s connects, 64 KiB
    /// answers.
    pub fn new(nodes: Vec<String>) -> Self {
        let quorum = nodes.len().saturating_sub(1) / 3 + 1;
        Self {
            nodes,
            quorum,
            timeout_ms: 2_000,
            connect_timeout_ms: 1_000,
            max_answer_bytes: 64 * 1024,
        }
    }
}

/// Why an exchange with one node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeApiError {
    /// The URL does not parse.
    #[error("bad URL {0}")]
    BadUrl(String),
    /// Connecting, sending or reading failed.
    #[error("transport: {0}")]
    Transport(String),
    /// No whole answer within the deadline.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// The answer is longer than the bound.
    #[error("answer over {0} bytes")]
    TooLarge(usize),
    /// A status the API does not give for this route.
    #[error("unexpected status {status}: {text}")]
    Unexpected {
        /// The status.
        status: u16,
        /// The answer's first bytes.
        text: String,
    },
    /// A `200` answer that does not parse.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// Fewer than f+1 nodes gave one answer (or two answers had f+1 each).
    #[error("no quorum: {0}")]
    NoQuorum(String),
}

/// What one node said to `POST /v1/requests`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// `202`: admitted to its pool.
    Admitted,
    /// `409`: the same request is already pending there.
    Pending,
    /// `409`: this `(client, number)` already executed.
    Executed,
    /// `409`: the number is below the client's window or floor: it can never execute.
    Stale(String),
    /// `429`: the node's pool or the client's share of it is full: try again later.
    Busy(String),
    /// `400` / `413`: the request itself is refused (malformed, over a bound, bad signature).
    Refused(String),
}

/// What one node said to `GET /v1/requests/{client}/{number}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultAnswer {
    /// `200`: executed, with its result.
    Executed(RequestResult),
    /// `202`: in the node's pool.
    Pending,
    /// `410`: executed, its result no longer kept.
    Forgotten,
    /// `404`: unknown to the node.
    Unknown,
}

/// A request's result as f+1 nodes tell it ([`NodeApi::result_by_quorum`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Believed {
    /// f+1 nodes returned this result identically.
    Executed(RequestResult),
    /// f+1 nodes say it executed and no longer keep its result.
    Forgotten,
    /// No f+1 agree yet (pending, unknown, unreachable nodes): ask again later.
    Undecided,
    /// Two different results each returned by f+1 nodes: more than f nodes are faulty.
    Conflict,
}

/// One node's HTTP API, typed (see the module documentation).
#[derive(Clone)]
pub struct NodeApi {
    client: Client<HttpConnector, Full<Bytes>>,
    cfg: NodeApiConfig,
}

impl std::fmt::Debug for NodeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeApi")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// The first bytes of an answer, as text (for errors and traces).
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

impl NodeApi {
    /// A client of `cfg.nodes`. Call inside a tokio runtime.
    pub fn new(cfg: NodeApiConfig) -> Self {
        let mut c = HttpConnector::new();
        c.set_connect_timeout(Some(Duration::from_millis(cfg.connect_timeout_ms)));
        c.set_nodelay(true);
        Self {
            client: Client::builder(TokioExecutor::new()).build(c),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NodeApiConfig {
        &self.cfg
    }

    async fn exchange(
        &self,
        method: Method,
        url: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), NodeApiError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| NodeApiError::BadUrl(format!("{url}: {e}")))?;
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| NodeApiError::BadUrl(e.to_string()))?;
        let limit = self.cfg.max_answer_bytes;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| NodeApiError::Transport(e.to_string()))?;
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        NodeApiError::TooLarge(limit)
                    } else {
                        NodeApiError::Transport(e.to_string())
                    }
                })?
                .to_bytes();
            Ok((status, body.to_vec()))
        };
        tokio::time::timeout(Duration::from_millis(self.cfg.timeout_ms), exchange)
            .await
            .unwrap_or(Err(NodeApiError::Timeout(self.cfg.timeout_ms)))
    }

    /// Posts one encoded signed request to `node`.
    ///
    /// # Errors
    /// [`NodeApiError`] when the exchange failed or the status is not the route's.
    pub async fn post_request(&self, node: &str, bytes: &[u8]) -> Result<Admission, NodeApiError> {
        let url = format!("{}/v1/requests", node.trim_end_matches('/'));
        let (status, body) = self.exchange(Method::POST, &url, bytes.to_vec()).await?;
        let text = excerpt(&body);
        Ok(match status {
            202 => Admission::Admitted,
            409 if text.contains("already pending") => Admission::Pending,
            409 if text.contains("already executed") => Admission::Executed,
            409 => Admission::Stale(text),
            429 => Admission::Busy(text),
            400 | 413 => Admission::Refused(text),
            status => return Err(NodeApiError::Unexpected { status, text }),
        })
    }

    /// Reads the result of request `number` of `client` from `node`.
    ///
    /// # Errors
    /// [`NodeApiError`] when the exchange failed, the status is not the route's or a `200`
    /// does not parse.
    pub async fn result(
        &self,
        node: &str,
        client: ClientId,
        number: u64,
    ) -> Result<ResultAnswer, NodeApiError> {
        let url = format!(
            "{}/v1/requests/{client}/{number}",
            node.trim_end_matches('/')
        );
        let (status, body) = self.exchange(Method::GET, &url, Vec::new()).await?;
        Ok(match status {
            200 => ResultAnswer::Executed(
                serde_json::from_slice(&body)
                    .map_err(|e| NodeApiError::Malformed(e.to_string()))?,
            ),
            202 => ResultAnswer::Pending,
            410 => ResultAnswer::Forgotten,
            404 => ResultAnswer::Unknown,
            status => {
                return Err(NodeApiError::Unexpected {
                    status,
                    text: excerpt(&body),
                });
            }
        })
    }

    /// Reads `node`'s chain id and signing domain version (`GET /v1/chain`; a `404`, from a
    /// node built before the route, is domain 1).
    ///
    /// # Errors
    /// [`NodeApiError`] when the exchange failed, the status is not `200` or the answer does
    /// not parse.
    pub async fn chain(&self, node: &str) -> Result<ChainInfo, NodeApiError> {
        let url = format!("{}/v1/chain", node.trim_end_matches('/'));
        let (status, body) = self.exchange(Method::GET, &url, Vec::new()).await?;
        if status == 404 {
            // A node built before the route existed: its chain signs in domain 1.
            return Ok(ChainInfo {
                chain_id: String::new(),
                signing_domain: 1,
            });
        }
        if status != 200 {
            return Err(NodeApiError::Unexpected {
                status,
                text: excerpt(&body),
            });
        }
        serde_json::from_slice(&body).map_err(|e| NodeApiError::Malformed(e.to_string()))
    }

    /// The nodes' signing domain, believed when f+1 (the configured quorum) answer it
    /// identically.
    ///
    /// # Errors
    /// [`NodeApiError::NoQuorum`] without f+1 identical answers (or with two such answers:
    /// more than f faulty nodes), [`NodeApiError::Malformed`] for a domain this build does not
    /// know.
    pub async fn domain_by_quorum(&self) -> Result<SigningDomain, NodeApiError> {
        let reads = self.cfg.nodes.iter().map(|n| self.chain(n));
        let answers = futures_join_all(reads).await;
        let mut errors = Vec::new();
        let mut infos = Vec::new();
        for a in answers {
            match a {
                Ok(c) => infos.push(c),
                Err(e) => errors.push(e.to_string()),
            }
        }
        let quorum = self.cfg.quorum.max(1);
        match ChainInfo::believed(infos, quorum) {
            ChainQuorum::Agreed(info) => info
                .domain()
                .map_err(|e| NodeApiError::Malformed(e.to_string())),
            ChainQuorum::Conflict => Err(NodeApiError::NoQuorum(
                "two quorums name different chains".into(),
            )),
            ChainQuorum::NoQuorum => Err(NodeApiError::NoQuorum(format!(
                "fewer than {quorum} nodes agree on the chain ({})",
                errors.join("; ")
            ))),
        }
    }

    /// Posts `bytes` to every node, concurrently; each node's answer in node order.
    pub async fn post_to_all(&self, bytes: &[u8]) -> Vec<Result<Admission, NodeApiError>> {
        let posts = self.cfg.nodes.iter().map(|n| self.post_request(n, bytes));
        futures_join_all(posts).await
    }

    /// Reads the result of `(client, number)` from every node, concurrently, and believes it
    /// only when f+1 (the configured quorum) return it identically.
    pub async fn result_by_quorum(&self, client: ClientId, number: u64) -> Believed {
        let reads = self
            .cfg
            .nodes
            .iter()
            .map(|n| self.result(n, client, number));
        let answers = futures_join_all(reads).await;
        let mut executed: BTreeMap<String, (usize, RequestResult)> = BTreeMap::new();
        let mut forgotten = 0;
        for a in answers {
            match a {
                Ok(ResultAnswer::Executed(r)) => {
                    let key = format!("{}|{}|{}", r.height, r.number, r.result_hex);
                    executed.entry(key).or_insert((0, r)).0 += 1;
                }
                Ok(ResultAnswer::Forgotten) => forgotten += 1,
                _ => {}
            }
        }
        let quorum = self.cfg.quorum.max(1);
        let mut believed = executed.into_values().filter(|(k, _)| *k >= quorum);
        match (believed.next(), believed.next()) {
            (Some(_), Some(_)) => Believed::Conflict,
            (Some((_, r)), None) => Believed::Executed(r),
            (None, _) if forgotten >= quorum => Believed::Forgotten,
            (None, _) => Believed::Undecided,
        }
    }
}

/// Runs futures concurrently and returns their outputs in order (tokio has no `join_all`;
/// a handful of nodes, so a `JoinSet` would be overkill and loses the order).
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// A durable reservation of request numbers: a file holding the number below which every
/// number may have been used (8 bytes LE and their CRC-32), written (temporary file, fsync,
/// rename) before a number past the reservation is signed. A damaged file is refused, never
/// taken for zero.
#[derive(Debug)]
pub struct NumberFile {
    path: PathBuf,
    reserved: u64,
}

/// Numbers reserved at a time.
pub const NUMBER_BLOCK: u64 = 4_096;

/// Why the number file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NumberFileError {
    /// Reading or writing it failed.
    #[error("number file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Its bytes are not a reservation (length or checksum).
    #[error("number file {0}: damaged (wrong length or checksum); refusing to reuse numbers")]
    Damaged(PathBuf),
}

impl NumberFile {
    /// Opens `path` (missing: nothing reserved yet).
    ///
    /// # Errors
    /// [`NumberFileError`].
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, NumberFileError> {
        let path = path.into();
        let io = |source| NumberFileError::Io {
            path: path.clone(),
            source,
        };
        let reserved = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io(e)),
            Ok(m) if m.len() != 12 => return Err(NumberFileError::Damaged(path)),
            Ok(_) => {
                let b = std::fs::read(&path).map_err(io)?;
                let (n, crc) = b.split_at(8);
                if crc != crc32fast::hash(n).to_le_bytes() {
                    return Err(NumberFileError::Damaged(path));
                }
                let mut a = [0u8; 8];
                a.copy_from_slice(n);
                u64::from_le_bytes(a)
            }
        };
        Ok(Self { path, reserved })
    }

    /// Every number below this one may have been used.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Makes sure `number` is reserved (writing a new reservation of [`NUMBER_BLOCK`] more
    /// when it is not).
    ///
    /// # Errors
    /// [`NumberFileError::Io`].
    pub fn reserve(&mut self, number: u64) -> Result<(), NumberFileError> {
        if number < self.reserved {
            return Ok(());
        }
        let upto = number.saturating_add(NUMBER_BLOCK);
        let io = |source| NumberFileError::Io {
            path: self.path.clone(),
            source,
        };
        let mut bytes = upto.to_le_bytes().to_vec();
        bytes.extend_from_slice(&crc32fast::hash(&upto.to_le_bytes()).to_le_bytes());
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        self.reserved = upto;
        Ok(())
    }
}

/// The largest worker answer whose result request fits a node's payload bound
/// ([`MAX_PAYLOAD_BYTES`] less the result's overhead with the longest proof): a relay
/// submitting to nodes sets its dispatcher's `max_answer_bytes` to at most this, so a longer
/// answer becomes a dead letter instead of a result no node would take.
pub const MAX_NODE_ANSWER_BYTES: usize =
    MAX_PAYLOAD_BYTES - ccron::outbox::ANSWER_PAYLOAD_OVERHEAD_BYTES;

/// How often [`NodeSubmit::call`] re-sends a request still awaiting its result.
const CALL_RESEND: Duration = Duration::from_millis(1_000);

/// How a [`NodeSubmit`] paces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSubmitConfig {
    /// Most requests awaiting execution at once (at most the node pools' per-client cap, 128
    /// by default, and below [`REQUEST_WINDOW`]).
    pub max_in_flight: usize,
    /// Most pending requests whose results one [`NodeSubmit::poll`] reads.
    pub max_reads_per_poll: usize,
}

impl Default for NodeSubmitConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            max_reads_per_poll: 16,
        }
    }
}

/// What a [`NodeSubmit`] did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitCounters {
    /// Requests signed under a new number.
    pub signed: u64,
    /// Re-sends of a pending request (the same number).
    pub resent: u64,
    /// Sends no node took (unreachable, busy): [`SubmitError::NotSent`].
    pub not_sent: u64,
    /// Sends refused for pacing: [`SubmitError::WindowFull`].
    pub window_full: u64,
    /// Requests the nodes refused (malformed, over a bound): [`SubmitError::Refused`].
    pub refused: u64,
    /// Numbers the nodes called stale (below the window or floor): renumbered on the next send.
    pub stale: u64,
    /// Requests f+1 nodes show executed with an `ok` reply.
    pub executed_ok: u64,
    /// Requests f+1 nodes show executed with another reply (the ledger refused it; traced).
    pub executed_err: u64,
    /// Requests f+1 nodes show executed whose result they no longer keep.
    pub forgotten: u64,
    /// Results two quorums disagreed on (more than f faulty nodes).
    pub conflicts: u64,
}

#[derive(Debug)]
struct Pending {
    digest: [u8; 32],
    bytes: Vec<u8>,
}

/// A signing client of the nodes that never loses a request silently (see the module
/// documentation); a [`Submit`] for `ccron_http::Relay`.
#[derive(Debug)]
pub struct NodeSubmit {
    api: NodeApi,
    key: SigningKey,
    /// The nodes' signing domain (read by quorum before the first signature when not given).
    domain: Option<SigningDomain>,
    client: ClientId,
    cfg: NodeSubmitConfig,
    next: u64,
    numbers: Option<NumberFile>,
    /// Number -> request awaiting execution.
    pending: BTreeMap<u64, Pending>,
    /// Payload digest -> its pending number.
    by_payload: BTreeMap<[u8; 32], u64>,
    counters: SubmitCounters,
    last_refusal: Option<String>,
}

impl NodeSubmit {
    /// A client of `api`'s nodes signing with `key`, its first number `first_number` (a
    /// restarted client passes a number above every one it used: e.g. the wall clock in
    /// microseconds, or use [`Self::with_number_file`]).
    pub fn new(api: NodeApi, key: SigningKey, first_number: u64, cfg: NodeSubmitConfig) -> Self {
        let client = client_id(&key.verifying_key().to_bytes());
        let max = usize::try_from(REQUEST_WINDOW - 1).unwrap_or(255);
        Self {
            api,
            key,
            domain: None,
            client,
            cfg: NodeSubmitConfig {
                max_in_flight: cfg.max_in_flight.clamp(1, max),
                max_reads_per_poll: cfg.max_reads_per_poll.max(1),
            },
            next: first_number.max(1),
            numbers: None,
            pending: BTreeMap::new(),
            by_payload: BTreeMap::new(),
            counters: SubmitCounters::default(),
            last_refusal: None,
        }
    }

    /// Numbers durably reserved in `file`: the first number is at least its reservation.
    pub fn with_number_file(mut self, file: NumberFile) -> Self {
        self.next = self.next.max(file.reserved());
        self.numbers = Some(file);
        self
    }

    /// Signs for `domain` (the chain's, e.g. from `--chain-id`) instead of reading it from the
    /// nodes before the first request.
    pub fn with_domain(mut self, domain: SigningDomain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// The signing domain requests are signed in: the given one, else the nodes' by quorum
    /// (read once).
    ///
    /// # Errors
    /// [`SubmitError::NotSent`] when no quorum of nodes names it (nothing signed).
    pub async fn domain(&mut self) -> Result<SigningDomain, SubmitError> {
        if let Some(d) = &self.domain {
            return Ok(d.clone());
        }
        match self.api.domain_by_quorum().await {
            Ok(d) => {
                tracing::info!(
                    version = d.version(),
                    chain = %String::from_utf8_lossy(d.chain_id()),
                    "signing domain read from the nodes"
                );
                self.domain = Some(d.clone());
                Ok(d)
            }
            Err(e) => {
                self.counters.not_sent += 1;
                Err(SubmitError::NotSent(format!("chain unknown: {e}")))
            }
        }
    }

    /// The ledger's id of this client (what `Policy::outbox_consumer` names for a relay).
    pub fn client(&self) -> ClientId {
        self.client
    }

    /// The number the next new request gets.
    pub fn next_number(&self) -> u64 {
        self.next
    }

    /// Requests awaiting execution.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The counters.
    pub fn counters(&self) -> SubmitCounters {
        self.counters
    }

    /// The ledger's last refusal of one of this client's requests (its reply), if any.
    pub fn last_refusal(&self) -> Option<&str> {
        self.last_refusal.as_deref()
    }

    /// Signs `payload` under a new number, or finds the pending request of an equal payload;
    /// returns its number and encoded bytes.
    fn request_for(
        &mut self,
        domain: &SigningDomain,
        payload: Vec<u8>,
    ) -> Result<(u64, Vec<u8>), SubmitError> {
        if payload.len() > MAX_PAYLOAD_BYTES {
            self.counters.refused += 1;
            return Err(SubmitError::Refused(format!(
                "payload of {} bytes is over the node's limit of {MAX_PAYLOAD_BYTES}",
                payload.len()
            )));
        }
        let digest: [u8; 32] = Sha256::digest(&payload).into();
        if let Some(&number) = self.by_payload.get(&digest)
            && let Some(p) = self.pending.get(&number)
        {
            self.counters.resent += 1;
            return Ok((number, p.bytes.clone()));
        }
        let number = self.next;
        let oldest = self.pending.keys().next().copied().unwrap_or(number);
        if self.pending.len() >= self.cfg.max_in_flight
            || number.saturating_sub(oldest) >= REQUEST_WINDOW - 1
        {
            self.counters.window_full += 1;
            return Err(SubmitError::WindowFull {
                in_flight: self.pending.len(),
            });
        }
        if let Some(file) = &mut self.numbers {
            file.reserve(number)
                .map_err(|e| SubmitError::NotSent(e.to_string()))?;
        }
        let signed: SignedRequest = ClientRequest {
            client_key: self.key.verifying_key().to_bytes(),
            number,
            payload,
        }
        .sign(domain, &self.key);
        let bytes = signed.encode();
        self.next = number.saturating_add(1);
        self.counters.signed += 1;
        self.pending.insert(
            number,
            Pending {
                digest,
                bytes: bytes.clone(),
            },
        );
        self.by_payload.insert(digest, number);
        Ok((number, bytes))
    }

    fn forget(&mut self, number: u64) {
        if let Some(p) = self.pending.remove(&number) {
            self.by_payload.remove(&p.digest);
        }
    }

    /// Signs (or re-sends) `payload` and posts it to every node; returns its number. `Ok`
    /// when at least one node holds it (admitted, or already pending or executed there).
    ///
    /// # Errors
    /// [`SubmitError::WindowFull`] (nothing sent), [`SubmitError::Refused`] (the request
    /// itself: over a bound, or every answering node refused it), [`SubmitError::NotSent`]
    /// (no node took it; it stays pending and goes out again under its number).
    pub async fn send(&mut self, payload: Vec<u8>) -> Result<u64, SubmitError> {
        let domain = self.domain().await?;
        let (number, bytes) = self.request_for(&domain, payload)?;
        let answers = self.api.post_to_all(&bytes).await;
        let (mut held, mut stale, mut refused) = (0usize, 0usize, Vec::new());
        let mut other = Vec::new();
        for (node, a) in self.api.config().nodes.iter().zip(&answers) {
            match a {
                Ok(Admission::Admitted | Admission::Pending | Admission::Executed) => held += 1,
                Ok(Admission::Stale(t)) => {
                    stale += 1;
                    other.push(format!("{node}: stale: {t}"));
                }
                Ok(Admission::Refused(t)) => refused.push(format!("{node}: {t}")),
                Ok(Admission::Busy(t)) => other.push(format!("{node}: busy: {t}")),
                Err(e) => other.push(format!("{node}: {e}")),
            }
        }
        if held > 0 {
            return Ok(number);
        }
        if stale > 0 {
            // The number can never execute: give it up; the payload gets a new one when sent
            // again.
            self.counters.stale += 1;
            self.forget(number);
            tracing::warn!(
                client = %self.client.short(),
                number,
                "request number stale: renumbered"
            );
        }
        if !refused.is_empty() && other.is_empty() {
            self.counters.refused += 1;
            self.forget(number);
            return Err(SubmitError::Refused(refused.join("; ")));
        }
        self.counters.not_sent += 1;
        other.extend(refused);
        Err(SubmitError::NotSent(other.join("; ")))
    }

    /// Reads the results of the oldest pending requests (at most `max_reads_per_poll`) by
    /// quorum; an executed one leaves the window. A reply other than `ok ...` is counted and
    /// traced as the ledger's refusal ([`Self::last_refusal`]).
    pub async fn poll(&mut self) {
        let numbers: Vec<u64> = self
            .pending
            .keys()
            .take(self.cfg.max_reads_per_poll)
            .copied()
            .collect();
        for number in numbers {
            match self.api.result_by_quorum(self.client, number).await {
                Believed::Executed(r) => {
                    if r.result.starts_with("ok") {
                        self.counters.executed_ok += 1;
                    } else {
                        self.counters.executed_err += 1;
                        tracing::warn!(
                            client = %self.client.short(),
                            number,
                            reply = %r.result,
                            "the ledger refused a request"
                        );
                        self.last_refusal = Some(r.result);
                    }
                    self.forget(number);
                }
                Believed::Forgotten => {
                    self.counters.forgotten += 1;
                    self.forget(number);
                }
                Believed::Conflict => {
                    self.counters.conflicts += 1;
                    tracing::error!(
                        client = %self.client.short(),
                        number,
                        "two quorums of nodes returned different results"
                    );
                }
                Believed::Undecided => {}
            }
        }
    }

    /// Sends `payload` and waits (at most `wait`) until f+1 nodes return its result
    /// identically, re-sending it under its number on the way.
    ///
    /// # Errors
    /// [`SubmitError`] from sending; [`SubmitError::NotSent`] when no result came in time
    /// (the request stays pending under its number).
    pub async fn call(
        &mut self,
        payload: Vec<u8>,
        wait: Duration,
    ) -> Result<RequestResult, SubmitError> {
        let start = tokio::time::Instant::now();
        let mut number = None;
        let mut last_err = None;
        let mut sent_at: Option<tokio::time::Instant> = None;
        while start.elapsed() < wait {
            let due = sent_at.is_none_or(|t| t.elapsed() >= CALL_RESEND);
            if due && number.is_none_or(|n| self.pending.contains_key(&n)) {
                sent_at = Some(tokio::time::Instant::now());
                match self.send(payload.clone()).await {
                    Ok(n) => number = Some(n),
                    Err(e @ SubmitError::Refused(_)) => return Err(e),
                    Err(e) => last_err = Some(e),
                }
            }
            if let Some(n) = number {
                match self.api.result_by_quorum(self.client, n).await {
                    Believed::Executed(r) => {
                        self.forget(n);
                        return Ok(r);
                    }
                    Believed::Forgotten => {
                        self.forget(n);
                        return Err(SubmitError::NotSent(format!(
                            "request {n} executed; its result is no longer kept"
                        )));
                    }
                    Believed::Conflict | Believed::Undecided => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last_err.unwrap_or_else(|| {
            SubmitError::NotSent(format!(
                "no f+1 equal results within {} ms",
                wait.as_millis()
            ))
        }))
    }
}

impl Submit for NodeSubmit {
    async fn submit(&mut self, payload: Vec<u8>) -> Result<(), SubmitError> {
        self.send(payload).await.map(|_| ())
    }

    async fn poll(&mut self) {
        NodeSubmit::poll(self).await;
    }
}

/// Reads a signing key file: 32 bytes as 64 hex characters (the node's `secret.key` format),
/// at most 1 KiB.
///
/// # Errors
/// A message naming the file and the cause.
pub fn read_key_file(path: &Path) -> Result<SigningKey, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > 1024 {
        return Err(format!("{}: not a key file (over 1 KiB)", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let secret = crate::types::unhex32(text.trim())
        .ok_or_else(|| format!("{}: not 32 hex bytes", path.display()))?;
    Ok(SigningKey::from_bytes(&secret))
}
