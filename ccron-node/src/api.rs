//! A node's HTTP server: the client submission endpoint (loopback by default).
//!
//! [`router`] assembles every route in one [`Router`], so a deployment can merge more routers
//! (e.g. an outbox-read API) into the same server:
//!
//! - `POST /v1/requests`: body = one borsh-encoded [`SignedRequest`] (at most
//!   [`MAX_SIGNED_REQUEST_BYTES`]). The node decodes it, checks its bounds and signature, and
//!   admits it to its [`Mempool`]. Replies: `202` with the request digest (hex) when admitted,
//!   `400` malformed / over a bound / bad signature, `409` already pending or already executed,
//!   `429` client cap or pool full, `413` body over the limit; the body names the reason.
//! - `GET /v1/chain`: the chain's id and signing domain version, JSON [`ChainInfo`]
//!   (`{"chain_id": "...", "signing_domain": 2}`): what a client signs requests for. A request
//!   or tick signed for another chain (or another domain version) is refused as a bad
//!   signature.
//! - `GET /v1/mempool`: the pool's counters (JSON).
//! - `GET /v1/requests/{client}/{number}`: the result of request `number` of `client` (the
//!   decimal `ClientId` of the client's key, [`crate::request::client_id`]): `200` with a JSON
//!   [`RequestResult`] (height, reply) once executed, `202` while it is in this node's pool,
//!   `410` when it executed but its result is no longer kept ([`RequestResults`] keeps the most
//!   recent [`crate::results::MAX_RESULTS`]), `404` when unknown. A client believes a result
//!   that f+1 nodes return identically.
//! - `POST /v1/ticks`: body = one borsh-encoded [`TickTx`], a validator's signed tick (the
//!   other validators forward their ticks here). Checked (signature, validator, ticking
//!   component, number not already decided, at most one pending per submitter and component)
//!   and admitted to the node's [`TickPool`]: `202`, `400` malformed or bad signature, `403`
//!   not a validator, `409` throttled (one already pending) or a replay, `422` unknown
//!   component. Every refusal is counted (`status.json`'s `tick_pool`) and traced.
//! - `GET /ccron/v1/outbox?from=I&limit=N`: the node's committed outbox, as of its last
//!   executed height ([`ccron_http::read_router`], the same endpoint sim-bft's threaded runtime
//!   serves); a consumer believes a record only when f+1 nodes return it identically
//!   ([`ccron_http::QuorumReader`]). `503` until the node has executed a height.
//! - `GET /ccron/v1/schedules`, `/ccron/v1/schedule`, `/ccron/v1/book`,
//!   `/ccron/v1/outbox/state`: the committed schedule book and outbox state
//!   ([`ccron_http::schedule_router`]: list with filters, describe, the book as a whole, the
//!   outbox's depth and consumer progress), each a versioned, bounded answer naming the height
//!   it was read at; a client believes one only when f+1 nodes return it identically at the
//!   same height ([`ccron_http::ScheduleReader`], the `ccron` CLI).
//! - `GET /v1/ticks`: this node's tick pool (node-local, JSON: pending ticks, counters by
//!   refusal reason); not replicated, so not for quorum reads.
//! - `GET /metrics`: Prometheus text ([`crate::metrics`]).
//! - `GET /v1/catchup/history`, `GET /v1/catchup/offer`: this node's history and catch-up
//!   offer, for a peer behind every history ([`crate::catchup::serve`]; merged by the engine
//!   adapter, which feeds the [`crate::catchup::serve::OfferSlot`]: [`serve_router`]).
//!
//! [`serve`] runs the router behind ccron-http's bounded server ([`server_config`]: head and
//! body deadlines, a body limit before reading, connection caps, per-peer rate limits): every
//! peer is a stranger.
//!
//! A client submits each request to every validator (see `docs/malachite.md`): whichever
//! proposes next has it; the pools dedupe by digest and execution dedupes by
//! `(client, number)`, so it executes once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use ccron::host::{ClientId, TickPool, TickRejection};

use crate::crypto::SigningDomain;
use crate::mempool::{Mempool, Rejection};
use crate::request::{MAX_SIGNED_REQUEST_BYTES, SignedRequest};
use crate::results::{RequestResult, RequestResults};
use crate::types::{TickTx, Validators, hex};

/// The state the routes share: the node's mempool, tick pool, results and published outbox.
#[derive(Clone, Debug)]
pub struct ApiState {
    /// The node's pool of verified requests.
    pub mempool: Arc<Mutex<Mempool>>,
    /// The node's committed outbox, published after every executed height.
    pub outbox: ccron_http::PublishedOutbox,
    /// The validators' signed ticks waiting for a proposal.
    pub ticks: Arc<Mutex<TickPool<TickTx>>>,
    /// The validator set (who may tick).
    pub validators: Validators,
    /// The chain's signing domain: requests and ticks verify only if signed in it.
    pub domain: SigningDomain,
    /// Tick submissions refused before the pool (malformed or a bad signature).
    pub ticks_invalid: Arc<AtomicU64>,
    /// The results of recently executed requests.
    pub results: Arc<Mutex<RequestResults>>,
    /// The committed book, status and observations published after every height.
    pub reads: crate::read::NodeReads,
}

/// Locks shared node state (a poisoned lock still holds consistent state: every update is one
/// call).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The node's HTTP routes, in one [`Router`].
pub fn router(state: ApiState) -> Router {
    let reads = ccron_http::read_router(
        Arc::new(state.outbox.clone()),
        ccron_http::ReadServerConfig::default(),
    );
    let schedules = ccron_http::schedule_router(Arc::new(state.reads.book.clone()));
    Router::new()
        .route("/v1/requests", post(submit))
        .route("/v1/chain", get(chain))
        .route("/v1/mempool", get(counters))
        .route("/v1/requests/{client}/{number}", get(result))
        .route("/v1/ticks", post(submit_tick).get(tick_pool))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_SIGNED_REQUEST_BYTES))
        .with_state(state)
        .merge(reads)
        .merge(schedules)
}

/// The bounds of the node's API server: ccron-http's defaults with request bodies of at most
/// one signed request ([`MAX_SIGNED_REQUEST_BYTES`], above a tick's
/// [`crate::types::MAX_TICK_BYTES`]) and 5 s for a head or a body.
pub fn server_config() -> ccron_http::ServerConfig {
    ccron_http::ServerConfig {
        max_body_bytes: MAX_SIGNED_REQUEST_BYTES.max(crate::types::MAX_TICK_BYTES),
        header_read_timeout_ms: 5_000,
        body_timeout_ms: 5_000,
        request_timeout_ms: 10_000,
        ..ccron_http::ServerConfig::default()
    }
}

/// `GET /v1/ticks`: the node's tick pool (node-local).
async fn tick_pool(State(state): State<ApiState>) -> (StatusCode, String) {
    let (counters, pending) = {
        let pool = lock(&state.ticks);
        (pool.counters(), pool.len())
    };
    let v = serde_json::json!({
        "pending": pending,
        "admitted": counters.admitted,
        "replaced": counters.replaced,
        "refused": {
            "not_a_validator": counters.not_a_validator,
            "unknown_component": counters.unknown_component,
            "already_pending": counters.already_pending,
            "stale": counters.stale,
            "invalid": state.ticks_invalid.load(Ordering::Relaxed),
        },
        "validators": state.validators.count(),
    });
    (StatusCode::OK, v.to_string())
}

/// `GET /metrics`.
async fn metrics(State(state): State<ApiState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match crate::metrics::render(&state, crate::core::now_ms()) {
        Ok(text) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// What `GET /v1/chain` answers: the chain a client signs its requests for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ChainInfo {
    /// The chain id (UTF-8; empty in signing domain 1).
    pub chain_id: String,
    /// The signing domain's version (1 or 2).
    pub signing_domain: u32,
}

impl ChainInfo {
    /// The info of `domain`.
    pub fn of(domain: &SigningDomain) -> Self {
        Self {
            chain_id: String::from_utf8_lossy(domain.chain_id()).into_owned(),
            signing_domain: domain.version(),
        }
    }

    /// The signing domain it names.
    ///
    /// # Errors
    /// An unknown version or a bad chain id.
    pub fn domain(&self) -> Result<SigningDomain, crate::crypto::DomainError> {
        SigningDomain::of_version(self.signing_domain, self.chain_id.as_bytes())
    }
}

/// What a client believes of the nodes' `GET /v1/chain` answers (see [`ChainInfo::believed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainQuorum {
    /// f+1 (the quorum) nodes named this chain, and no other chain had a quorum.
    Agreed(ChainInfo),
    /// Two quorums named different chains: more than f nodes are faulty.
    Conflict,
    /// No chain was named by a quorum.
    NoQuorum,
}

impl ChainInfo {
    /// The chain `quorum` (f+1; at least 1) of `answers` name identically, if exactly one
    /// chain has such a quorum. Shared by the node client ([`crate::submit::NodeApi`]) and the
    /// CLI, so both believe the same thing of the same answers.
    pub fn believed(answers: impl IntoIterator<Item = ChainInfo>, quorum: usize) -> ChainQuorum {
        let mut seen: std::collections::BTreeMap<ChainInfo, usize> =
            std::collections::BTreeMap::new();
        for a in answers {
            *seen.entry(a).or_insert(0) += 1;
        }
        let mut agreed = seen.into_iter().filter(|(_, k)| *k >= quorum.max(1));
        match (agreed.next(), agreed.next()) {
            (Some((info, _)), None) => ChainQuorum::Agreed(info),
            (Some(_), Some(_)) => ChainQuorum::Conflict,
            (None, _) => ChainQuorum::NoQuorum,
        }
    }
}

/// `GET /v1/chain`.
async fn chain(State(state): State<ApiState>) -> (StatusCode, String) {
    match serde_json::to_string(&ChainInfo::of(&state.domain)) {
        Ok(s) => (StatusCode::OK, s),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `POST /v1/requests`.
async fn submit(State(state): State<ApiState>, body: Bytes) -> (StatusCode, String) {
    let request = match SignedRequest::decode_verified(&body, &state.domain) {
        Ok(r) => r,
        Err(e) => {
            lock(&state.mempool).count_invalid();
            tracing::warn!(reason = %e, bytes = body.len(), "client request refused");
            return (StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    let client = request.client();
    let number = request.request.number;
    let result = lock(&state.mempool).insert(request);
    match result {
        Ok(digest) => {
            tracing::debug!(client = %client.short(), number, "client request admitted");
            (StatusCode::ACCEPTED, hex(&digest.0))
        }
        Err(e) => {
            let code = match e {
                Rejection::Pending | Rejection::Executed(_) => StatusCode::CONFLICT,
                Rejection::OutOfWindow(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::TOO_MANY_REQUESTS,
            };
            tracing::info!(client = %client.short(), number, reason = %e, "client request not admitted");
            (code, e.to_string())
        }
    }
}

/// `GET /v1/requests/{client}/{number}`.
async fn result(
    State(state): State<ApiState>,
    Path((client, number)): Path<(ClientId, u64)>,
) -> (StatusCode, String) {
    let found: Option<RequestResult> = lock(&state.results).get(client, number).cloned();
    if let Some(r) = found {
        return match serde_json::to_string(&r) {
            Ok(s) => (StatusCode::OK, s),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
    }
    let pool = lock(&state.mempool);
    if pool.holds(client, number) {
        (StatusCode::ACCEPTED, "pending".into())
    } else if pool.executed(client, number) {
        (StatusCode::GONE, "executed; result no longer kept".into())
    } else {
        (StatusCode::NOT_FOUND, "unknown request".into())
    }
}

/// `POST /v1/ticks`.
async fn submit_tick(State(state): State<ApiState>, body: Bytes) -> (StatusCode, String) {
    let Some(tick) = TickTx::decode(&body).filter(|t| t.verify(&state.domain)) else {
        state.ticks_invalid.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            bytes = body.len(),
            "tick refused: malformed or bad signature"
        );
        return (
            StatusCode::BAD_REQUEST,
            "malformed tick or bad signature".into(),
        );
    };
    let sender = state.validators.index_of(&tick.submitter);
    let (component, number) = (tick.component, tick.number);
    let admitted = lock(&state.ticks).admit(component, sender, number, tick);
    match admitted {
        Ok(()) => (StatusCode::ACCEPTED, String::new()),
        Err(e) => {
            let code = match e {
                TickRejection::NotAValidator => StatusCode::FORBIDDEN,
                TickRejection::UnknownComponent(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::CONFLICT,
            };
            tracing::debug!(component, number, ?sender, reason = %e, "tick not admitted");
            (code, e.to_string())
        }
    }
}

/// `GET /v1/mempool`.
async fn counters(State(state): State<ApiState>) -> (StatusCode, String) {
    let c = lock(&state.mempool).counters();
    match serde_json::to_string(&c) {
        Ok(s) => (StatusCode::OK, s),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Binds `addr` and serves [`router`] behind the bounded server ([`server_config`]) until the
/// process ends; returns the bound address.
///
/// # Errors
/// The bind failed.
pub async fn serve(
    addr: std::net::SocketAddr,
    state: ApiState,
) -> std::io::Result<std::net::SocketAddr> {
    serve_with(addr, state, server_config()).await
}

/// [`serve`] with explicit bounds.
///
/// # Errors
/// The bind failed, or `cfg` is invalid ([`std::io::ErrorKind::InvalidInput`]).
pub async fn serve_with(
    addr: std::net::SocketAddr,
    state: ApiState,
    cfg: ccron_http::ServerConfig,
) -> std::io::Result<std::net::SocketAddr> {
    serve_router(addr, router(state), cfg).await
}

/// Serves `app` (the node's [`router`] merged with more routes, e.g. the catch-up routes)
/// behind the bounded server with `cfg` ([`server_config`] for the node's own bounds);
/// returns the bound address.
///
/// # Errors
/// The bind failed, or `cfg` is invalid ([`std::io::ErrorKind::InvalidInput`]).
pub async fn serve_router(
    addr: std::net::SocketAddr,
    app: Router,
    cfg: ccron_http::ServerConfig,
) -> std::io::Result<std::net::SocketAddr> {
    cfg.validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = ccron_http::server::bind(addr)?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = ccron_http::serve(listener, app, cfg, std::future::pending()).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::{ChainInfo, ChainQuorum};

    fn info(chain: &str, version: u32) -> ChainInfo {
        ChainInfo {
            chain_id: chain.into(),
            signing_domain: version,
        }
    }

    #[test]
    fn a_chain_is_believed_only_when_one_quorum_names_it() {
        let a = info("a", 2);
        // f = 1: two identical answers are believed, one liar outvoted.
        assert_eq!(
            ChainInfo::believed([a.clone(), a.clone(), info("b", 2), a.clone()], 2),
            ChainQuorum::Agreed(a.clone())
        );
        // The same id under another version is another answer.
        assert_eq!(
            ChainInfo::believed([a.clone(), info("a", 1)], 2),
            ChainQuorum::NoQuorum
        );
        // Two quorums: more than f faulty nodes.
        assert_eq!(
            ChainInfo::believed([a.clone(), a.clone(), info("b", 2), info("b", 2)], 2),
            ChainQuorum::Conflict
        );
        assert_eq!(ChainInfo::believed([], 2), ChainQuorum::NoQuorum);
        // A quorum of 0 is taken as 1.
        assert_eq!(ChainInfo::believed([a.clone()], 0), ChainQuorum::Agreed(a));
    }
}
