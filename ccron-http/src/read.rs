//! A networked read endpoint per replica, and the consumer's quorum reader over them.
//!
//! **Server.** A replica (sim-bft's threaded runtime, a Malachite node, any host) implements
//! [`OutboxSource`] over its committed outbox (or uses [`PublishedOutbox`], filled by the
//! [`PublishOutbox`] application wrapper after every committed change) and serves
//! [`read_router`]: `GET` [`contract::OUTBOX_PATH`]`?from=I&limit=N&max_bytes=B` answers a
//! [`ReadPage`] (ccron's versioned, bounded wire format) with the records it holds from `I`,
//! at most `N` records and `B` bytes (each clamped to the server's [`ReadServerConfig`]), its
//! head and first held index, which records have a result, its replica id and the sequence
//! number its state is at. `400` for a malformed query, `503` while the replica has nothing to
//! serve yet. The endpoint only reads; anyone who can reach it may read (the records are
//! what the ledger committed; put it behind the network's access control if they are secret).
//! [`serve_reads`] runs it behind the bounded server ([`crate::server`]:
//! [`ReadServerConfig::server`]): deadlines, connection caps, per-peer rates.
//!
//! **Client.** A [`QuorumReader`] holds one [`EndpointJobs`] per replica endpoint (a cache of
//! the last page it answered) inside ccron's [`QuorumJobs`]: a record is believed only when
//! `quorum` (f+1) endpoints return it byte-identically, and the head is the highest that
//! `quorum` endpoints report, so up to f lying replicas can neither inject, alter nor hide
//! records. [`QuorumReader::refresh`] asks every endpoint concurrently, each under a timeout
//! and reading at most [`ReadClientConfig::max_response_bytes`]; an endpoint that fails keeps
//! its previous page (committed records never change) and counts the failure.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext, FireNote};
use ccron::outbox::{Jobs, Outbox, OutboxRecord, QuorumError, QuorumJobs, ReadPage, ReadPageError};
use ccron::{PageRange, ReservedPages, Tick};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinSet;

use crate::contract;
use crate::server::{self, ServerConfig};

// ---------------------------------------------------------------------------------------------
// Server side.

/// A replica's committed outbox, as its read endpoint serves it.
pub trait OutboxSource: Send + Sync + 'static {
    /// The page of records from `from` (at most `max_records` records and about `max_bytes`
    /// bytes, see [`ReadPage::from_outbox`]), or `None` when the replica has nothing to serve
    /// yet (answered `503`).
    fn page(&self, from: u64, max_records: usize, max_bytes: usize) -> Option<ReadPage>;
}

/// Bounds of a read endpoint: a query asking for more is clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadServerConfig {
    /// Most records in one page.
    pub max_records: usize,
    /// Largest byte budget of one page ([`ReadPage::from_outbox`] adds at most one record).
    pub max_bytes: usize,
    /// The server's bounds ([`serve_reads`]; a host mounting [`read_router`] in its own
    /// server applies its own).
    pub server: ServerConfig,
}

impl Default for ReadServerConfig {
    /// 512 records, 1 MiB, the default server bounds with request bodies of at most 1 KiB
    /// (a read has none).
    fn default() -> Self {
        Self {
            max_records: 512,
            max_bytes: 1024 * 1024,
            server: ServerConfig {
                max_body_bytes: 1024,
                ..ServerConfig::default()
            },
        }
    }
}

struct ReadState {
    source: Arc<dyn OutboxSource>,
    cfg: ReadServerConfig,
}

/// The query of a read: `from`, and optionally `limit` and `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadQuery {
    from: u64,
    limit: Option<u64>,
    max_bytes: Option<u64>,
}

fn parse_query(q: Option<&str>) -> Result<ReadQuery, String> {
    let q = q.ok_or("missing query")?;
    if q.len() > 256 {
        return Err("query too long".into());
    }
    let mut out = ReadQuery {
        from: 0,
        limit: None,
        max_bytes: None,
    };
    let mut from = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or("a parameter has no value")?;
        let n: u64 = v.parse().map_err(|_| format!("{k}: not a number"))?;
        let slot = match k {
            "from" => &mut from,
            "limit" => &mut out.limit,
            "max_bytes" => &mut out.max_bytes,
            _ => return Err(format!("unknown parameter {k}")),
        };
        if slot.replace(n).is_some() {
            return Err(format!("{k} given twice"));
        }
    }
    out.from = from.ok_or("missing from")?;
    Ok(out)
}

fn clamp(asked: Option<u64>, max: usize) -> usize {
    asked.map_or(max, |a| usize::try_from(a).unwrap_or(usize::MAX).min(max))
}

async fn read_handler(State(st): State<Arc<ReadState>>, RawQuery(q): RawQuery) -> Response {
    let query = match parse_query(q.as_deref()) {
        Ok(q) => q,
        Err(e) => {
            tracing::debug!(error = %e, "outbox read: bad query");
            return (StatusCode::BAD_REQUEST, e).into_response();
        }
    };
    let limit = clamp(query.limit, st.cfg.max_records);
    let max_bytes = clamp(query.max_bytes, st.cfg.max_bytes);
    let Some(page) = st.source.page(query.from, limit, max_bytes) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no committed outbox yet").into_response();
    };
    match page.encode() {
        Ok(bytes) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, from = query.from, "outbox read: page does not encode");
            (StatusCode::INTERNAL_SERVER_ERROR, "page does not encode").into_response()
        }
    }
}

/// The read endpoint's router: `GET` [`contract::OUTBOX_PATH`] (see the module documentation).
pub fn read_router(source: Arc<dyn OutboxSource>, cfg: ReadServerConfig) -> Router {
    Router::new()
        .route(contract::OUTBOX_PATH, get(read_handler))
        .with_state(Arc::new(ReadState { source, cfg }))
}

/// Serves [`read_router`] on `listener` behind the bounded server
/// ([`ReadServerConfig::server`]) until `shutdown` completes.
///
/// # Errors
/// The server's I/O error; an invalid server configuration
/// ([`std::io::ErrorKind::InvalidInput`]).
pub async fn serve_reads(
    listener: tokio::net::TcpListener,
    source: Arc<dyn OutboxSource>,
    cfg: ReadServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(listener, read_router(source, cfg), cfg.server, shutdown).await
}

#[derive(Debug)]
struct Snapshot {
    outbox: Arc<Outbox>,
    at_seq: u64,
}

/// A replica's last committed outbox, shared between its execution thread (which
/// [`publish`](Self::publish)es) and its read endpoint (an [`OutboxSource`]).
///
/// Publishing clones the outbox when it changed (its head, first index or result count): cost
/// O(outbox) per committed change, fine for the simulator and examples; a production node
/// serves pages from its store instead.
#[derive(Debug, Clone)]
pub struct PublishedOutbox {
    replica: u64,
    inner: Arc<Mutex<Option<Snapshot>>>,
}

impl PublishedOutbox {
    /// Nothing published yet, for replica `replica`.
    pub fn new(replica: u64) -> Self {
        Self {
            replica,
            inner: Arc::default(),
        }
    }

    /// Publishes `outbox` as committed at `at_seq` (a no-op when nothing changed but the
    /// sequence number, which is then updated). Returns whether the outbox itself changed
    /// (a new snapshot was taken).
    pub fn publish(&self, outbox: &Outbox, at_seq: u64) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let same = g.as_ref().is_some_and(|s| {
            (
                s.outbox.first_index(),
                s.outbox.head(),
                s.outbox.results_len(),
            ) == (outbox.first_index(), outbox.head(), outbox.results_len())
        });
        match g.as_mut() {
            Some(s) if same => {
                s.at_seq = at_seq;
                false
            }
            _ => {
                *g = Some(Snapshot {
                    outbox: Arc::new(outbox.clone()),
                    at_seq,
                });
                true
            }
        }
    }

    /// The last published outbox and its sequence number.
    pub fn snapshot(&self) -> Option<(Arc<Outbox>, u64)> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|s| (s.outbox.clone(), s.at_seq))
    }

    /// The replica id it answers as.
    pub fn replica(&self) -> u64 {
        self.replica
    }
}

impl OutboxSource for PublishedOutbox {
    fn page(&self, from: u64, max_records: usize, max_bytes: usize) -> Option<ReadPage> {
        let (outbox, at_seq) = self.snapshot()?;
        Some(ReadPage::from_outbox(
            &outbox,
            self.replica,
            at_seq,
            from,
            max_records,
            max_bytes,
        ))
    }
}

/// Finds the outbox inside an application (`None`: it has none yet).
pub type OutboxOf<A> = fn(&A) -> Option<&Outbox>;

/// An [`Application`] wrapper that publishes the inner application's outbox into a
/// [`PublishedOutbox`] after every executed request, tick, restore and reload, so a host
/// serves its read endpoint without knowing the application. Replicated behaviour is the
/// inner application's, unchanged.
pub struct PublishOutbox<A> {
    inner: A,
    outbox_of: OutboxOf<A>,
    out: PublishedOutbox,
    at_seq: u64,
    on_change: Option<OnChange<A>>,
}

/// Called with the inner application each time its published outbox changed (see
/// [`PublishOutbox::on_change`]).
pub type OnChange<A> = Box<dyn Fn(&A) + Send>;

impl<A: Application> PublishOutbox<A> {
    /// Wraps `inner`, publishing `outbox_of(&inner)` into `out`.
    pub fn new(inner: A, outbox_of: OutboxOf<A>, out: PublishedOutbox) -> Self {
        Self {
            inner,
            outbox_of,
            out,
            at_seq: 0,
            on_change: None,
        }
    }

    /// Also calls `hook` with the inner application after each publish that changed the
    /// outbox (e.g. to export other committed state for a host's own checks). The hook runs
    /// on the executing thread and must not change replicated state (it gets `&A`).
    pub fn on_change(mut self, hook: impl Fn(&A) + Send + 'static) -> Self {
        self.on_change = Some(Box::new(hook));
        self
    }

    /// The wrapped application.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    fn publish(&self) {
        if let Some(o) = (self.outbox_of)(&self.inner)
            && self.out.publish(o, self.at_seq)
            && let Some(hook) = &self.on_change
        {
            hook(&self.inner);
        }
    }
}

impl<A: Application> Application for PublishOutbox<A> {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        let r = self.inner.execute(ctx, client, payload);
        self.at_seq = self.at_seq.max(ctx.seq);
        self.publish();
        r
    }
    fn digest(&self) -> Digest32 {
        self.inner.digest()
    }
    fn digest_in(&self, hash: ccron::state_hash::StateHash) -> Digest32 {
        self.inner.digest_in(hash)
    }
    fn execute_with(
        &mut self,
        ctx: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut ccron::host::Effects<'_>,
    ) -> Vec<u8> {
        let r = self.inner.execute_with(ctx, client, payload, fx);
        self.at_seq = self.at_seq.max(ctx.seq);
        self.publish();
        r
    }
    fn on_outbox_result(
        &mut self,
        record: &ccron::outbox::OutboxRecord,
        outcome: &ccron::outbox::ResultOutcome,
    ) {
        self.inner.on_outbox_result(record, outcome);
    }
    fn snapshot(&self) -> Vec<u8> {
        self.inner.snapshot()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let r = self.inner.restore(snapshot);
        self.publish();
        r
    }
    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        let r = self.inner.on_tick(tick, pages);
        self.at_seq = self.at_seq.max(tick.bft_sequence_num);
        self.publish();
        r
    }
    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        let r = self.inner.reload(pages);
        self.publish();
        r
    }
    fn fires(&self) -> std::collections::BTreeMap<(u32, u32), u64> {
        self.inner.fires()
    }
    fn halted(&self) -> Option<&AppError> {
        self.inner.halted()
    }
    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        self.inner.take_fire_notes(out);
    }
    fn page_ranges(&self) -> Vec<PageRange> {
        self.inner.page_ranges()
    }
    fn schedule_book(&self) -> Option<&ccron::schedule::Scheduler> {
        self.inner.schedule_book()
    }
    fn table_entries(&self) -> Option<ccron::schedule::query::TableEntries> {
        self.inner.table_entries()
    }
    // A wrapper forwards every method: a default here would hide the ledger's tick
    // components, setup digest or outbox from the host.
    fn tick_components(&self) -> Vec<u32> {
        self.inner.tick_components()
    }
    fn setup_digest(&self) -> Option<Digest32> {
        self.inner.setup_digest()
    }
    fn outbox(&self) -> Option<&Outbox> {
        self.inner.outbox()
    }
}

// ---------------------------------------------------------------------------------------------
// Client side.

/// Settings of a [`QuorumReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadClientConfig {
    /// Base URI of each replica's read endpoint (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Endpoints that must return a record identically (f+1 for n = 3f+1 replicas).
    pub quorum: usize,
    /// Most records asked per page (and accepted in an answer).
    pub max_records: usize,
    /// Byte budget asked per page.
    pub max_bytes: usize,
    /// Largest answer body read; a longer one is an error. Keep it above `max_bytes` plus one
    /// record of the outbox's `max_record_bytes` plus some overhead per record.
    pub max_response_bytes: usize,
    /// Time allowed for one endpoint's whole answer.
    pub timeout_ms: u64,
    /// TCP connect timeout.
    pub connect_timeout_ms: u64,
}

impl ReadClientConfig {
    /// `endpoints` with quorum `quorum`, 256 records or 512 KiB per page, 2 MiB answers, a 2 s
    /// timeout and a 1 s connect timeout.
    pub fn new(endpoints: Vec<String>, quorum: usize) -> Self {
        Self {
            endpoints,
            quorum,
            max_records: 256,
            max_bytes: 512 * 1024,
            max_response_bytes: 2 * 1024 * 1024,
            timeout_ms: 2_000,
            connect_timeout_ms: 1_000,
        }
    }
}

/// Why a read failed or a reader could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// An endpoint URI does not parse.
    #[error("bad read endpoint {0}")]
    Endpoint(String),
    /// The quorum does not fit the endpoints.
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    /// The connection or the request failed.
    #[error("transport: {0}")]
    Transport(String),
    /// No complete answer within the timeout.
    #[error("no answer within {0} ms")]
    Timeout(u64),
    /// The endpoint answered a non-2xx status.
    #[error("status {0}")]
    Status(u16),
    /// The answer is longer than the configured bound.
    #[error("answer longer than {0} bytes")]
    TooLarge(usize),
    /// The answer is not a valid page.
    #[error(transparent)]
    Page(#[from] ReadPageError),
}

/// Counters of one endpoint (observation only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Pages read and accepted.
    pub reads: u64,
    /// Reads that failed (any [`ReadError`]).
    pub failures: u64,
    /// The last failure.
    pub last_error: Option<ReadError>,
}

/// One replica endpoint as a [`Jobs`] source: the last page it answered.
#[derive(Debug, Clone)]
pub struct EndpointJobs {
    base: String,
    page: Option<ReadPage>,
    stats: EndpointStats,
}

impl EndpointJobs {
    /// The endpoint's base URI.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The last page it answered.
    pub fn page(&self) -> Option<&ReadPage> {
        self.page.as_ref()
    }

    /// Its counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Whether its last page shows a result applied at `index` (a claim of one replica).
    pub fn has_result(&self, index: u64) -> bool {
        self.page
            .as_ref()
            .and_then(|p| p.get(index))
            .is_some_and(|e| e.has_result)
    }
}

impl Jobs for EndpointJobs {
    fn head(&self) -> u64 {
        self.page.as_ref().map_or(0, |p| p.head)
    }

    fn at_index(&self, index: u64) -> Option<OutboxRecord> {
        self.page.as_ref()?.get(index).map(|e| e.record.clone())
    }
}

/// The consumer's view of a live cluster over the network (see the module documentation).
pub struct QuorumReader {
    cfg: ReadClientConfig,
    jobs: QuorumJobs<EndpointJobs>,
    uris: Vec<String>,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl std::fmt::Debug for QuorumReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumReader")
            .field("endpoints", &self.cfg.endpoints)
            .field("quorum", &self.cfg.quorum)
            .finish_non_exhaustive()
    }
}

impl QuorumReader {
    /// A reader of `cfg.endpoints`. Call it inside a tokio runtime.
    ///
    /// # Errors
    /// [`ReadError::Endpoint`], [`ReadError::Quorum`].
    pub fn new(cfg: ReadClientConfig) -> Result<Self, ReadError> {
        let mut uris = Vec::with_capacity(cfg.endpoints.len());
        for base in &cfg.endpoints {
            let u = format!("{}{}", base.trim_end_matches('/'), contract::OUTBOX_PATH);
            u.parse::<Uri>()
                .map_err(|e| ReadError::Endpoint(format!("{base}: {e}")))?;
            uris.push(u);
        }
        let sources = cfg
            .endpoints
            .iter()
            .map(|b| EndpointJobs {
                base: b.clone(),
                page: None,
                stats: EndpointStats::default(),
            })
            .collect();
        let jobs = QuorumJobs::new(sources, cfg.quorum)?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_millis(cfg.connect_timeout_ms)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            cfg,
            jobs,
            uris,
            client,
        })
    }

    /// The quorum view, to hand to a consumer (it is a [`Jobs`]).
    pub fn jobs(&self) -> &QuorumJobs<EndpointJobs> {
        &self.jobs
    }

    /// The endpoints, for inspection.
    pub fn endpoints(&self) -> &[EndpointJobs] {
        self.jobs.sources()
    }

    /// How many endpoints' last pages show a result applied at `index`; believe it when it
    /// reaches the quorum.
    pub fn results_applied(&self, index: u64) -> usize {
        self.jobs
            .sources()
            .iter()
            .filter(|s| s.has_result(index))
            .count()
    }

    /// Asks every endpoint for its page from `from`, concurrently, each under the timeout;
    /// returns how many answered with a valid page. An endpoint that fails keeps its previous
    /// page and counts the failure (a `warn` event names it).
    pub async fn refresh(&mut self, from: u64) -> usize {
        let mut set = JoinSet::new();
        for (i, uri) in self.uris.iter().enumerate() {
            let uri = format!(
                "{uri}?from={from}&limit={}&max_bytes={}",
                self.cfg.max_records, self.cfg.max_bytes
            );
            let client = self.client.clone();
            let (max_response, max_records, timeout_ms) = (
                self.cfg.max_response_bytes,
                self.cfg.max_records,
                self.cfg.timeout_ms,
            );
            set.spawn(async move {
                let r = tokio::time::timeout(
                    Duration::from_millis(timeout_ms),
                    fetch(&client, &uri, max_response, max_records),
                )
                .await
                .unwrap_or(Err(ReadError::Timeout(timeout_ms)));
                (i, r)
            });
        }
        let mut answered = 0;
        let sources = self.jobs.sources_mut();
        while let Some(joined) = set.join_next().await {
            let Ok((i, r)) = joined else { continue };
            let Some(s) = sources.get_mut(i) else {
                continue;
            };
            match r {
                Ok(page) => {
                    s.page = Some(page);
                    s.stats.reads += 1;
                    answered += 1;
                }
                Err(e) => {
                    tracing::warn!(endpoint = %s.base, from, error = %e, "outbox read failed");
                    s.stats.failures += 1;
                    s.stats.last_error = Some(e);
                }
            }
        }
        answered
    }
}

async fn fetch(
    client: &Client<HttpConnector, Empty<Bytes>>,
    uri: &str,
    max_response_bytes: usize,
    max_records: usize,
) -> Result<ReadPage, ReadError> {
    let uri: Uri = uri
        .parse()
        .map_err(|e| ReadError::Endpoint(format!("{uri}: {e}")))?;
    let resp = client
        .get(uri)
        .await
        .map_err(|e| ReadError::Transport(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(ReadError::Status(resp.status().as_u16()));
    }
    let body = Limited::new(resp.into_body(), max_response_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ReadError::TooLarge(max_response_bytes)
            } else {
                ReadError::Transport(e.to_string())
            }
        })?
        .to_bytes();
    Ok(ReadPage::decode(&body, max_records)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_parsed_strictly() {
        let q = |s: &str| parse_query(Some(s));
        assert_eq!(
            q("from=3&limit=10&max_bytes=99"),
            Ok(ReadQuery {
                from: 3,
                limit: Some(10),
                max_bytes: Some(99)
            })
        );
        assert_eq!(q("from=1").map(|r| r.limit), Ok(None));
        for bad in [
            "",
            "limit=3",
            "from=x",
            "from=1&from=2",
            "from=1&evil=2",
            "from",
            "from=-1",
            "from=18446744073709551616",
        ] {
            assert!(q(bad).is_err(), "{bad}");
        }
        assert!(parse_query(None).is_err());
        assert!(q(&format!("from=1&{}", "limit=1&".repeat(100))).is_err());
        assert_eq!(clamp(Some(u64::MAX), 512), 512);
        assert_eq!(clamp(Some(3), 512), 3);
        assert_eq!(clamp(None, 512), 512);
    }
}
