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
//! - `GET /v1/mempool`: the pool's counters (JSON).
//! - `GET /ccron/v1/outbox?from=I&limit=N`: the node's committed outbox, as of its last
//!   executed height ([`ccron_http::read_router`], the same endpoint sim-bft's threaded runtime
//!   serves); a consumer believes a record only when f+1 nodes return it identically
//!   ([`ccron_http::QuorumReader`]). `503` until the node has executed a height.
//!
//! A client submits each request to every validator (see `docs/malachite.md`): whichever
//! proposes next has it; the pools dedupe by digest and execution dedupes by
//! `(client, number)`, so it executes once.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::{get, post};

use crate::mempool::{Mempool, Rejection};
use crate::node::hex;
use crate::request::{MAX_SIGNED_REQUEST_BYTES, SignedRequest};

/// The state the routes share: the node's mempool and its published outbox.
#[derive(Clone, Debug)]
pub struct ApiState {
    /// The node's pool of verified requests.
    pub mempool: Arc<Mutex<Mempool>>,
    /// The node's committed outbox, published after every executed height.
    pub outbox: ccron_http::PublishedOutbox,
}

/// Locks the pool (a poisoned lock still holds a consistent pool: every update is one call).
pub fn lock(m: &Mutex<Mempool>) -> std::sync::MutexGuard<'_, Mempool> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The node's HTTP routes, in one [`Router`].
pub fn router(state: ApiState) -> Router {
    let reads = ccron_http::read_router(
        Arc::new(state.outbox.clone()),
        ccron_http::ReadServerConfig::default(),
    );
    Router::new()
        .route("/v1/requests", post(submit))
        .route("/v1/mempool", get(counters))
        .layer(DefaultBodyLimit::max(MAX_SIGNED_REQUEST_BYTES))
        .with_state(state)
        .merge(reads)
}

/// `POST /v1/requests`.
async fn submit(State(state): State<ApiState>, body: Bytes) -> (StatusCode, String) {
    let request = match SignedRequest::decode_verified(&body) {
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
            tracing::debug!(client, number, "client request admitted");
            (StatusCode::ACCEPTED, hex(&digest.0))
        }
        Err(e) => {
            let code = match e {
                Rejection::Pending | Rejection::Executed(_) => StatusCode::CONFLICT,
                _ => StatusCode::TOO_MANY_REQUESTS,
            };
            tracing::info!(client, number, reason = %e, "client request not admitted");
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

/// Binds `addr` and serves [`router`] until the process ends; returns the bound address.
///
/// # Errors
/// The bind failed.
pub async fn serve(
    addr: std::net::SocketAddr,
    state: ApiState,
) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(bound)
}
