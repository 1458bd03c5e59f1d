//! Serving this node's catch-up offer to a peer that is behind every history.
//!
//! The node's loop publishes into an [`OfferSlot`] after each decided height (and once at
//! start): its history ([`HistoryInfo`]: the store's first and last heights, the offer's
//! height) and, when a snapshot's next block is decided, the encoded [`super::Offer`] of that
//! pair. The HTTP handlers only read the slot: no disk, no store lock, no work per request
//! beyond a clone of shared bytes, behind the node's bounded server (`crate::api`: connection
//! caps, deadlines, per-peer rate limits).
//!
//! - `GET /v1/catchup/history`: JSON [`HistoryInfo`] (with the offers served and not
//!   published: the slot's counters).
//! - `GET /v1/catchup/offer`: the encoded offer (`application/octet-stream`, at most
//!   [`super::MAX_OFFER_BYTES`]: a larger one is never published, it is counted and traced
//!   instead), `404` when the node has none yet.
//!
//! Nothing served is trusted by the reader: the history only decides whether to ask for
//! offers, and an offer is believed only after [`super::verify_offer`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::{CatchUpError, MAX_OFFER_BYTES, offer_from};
use crate::snapshot::Snapshots;
use crate::store::{Commit, Decided};

/// The route of a node's history.
pub const HISTORY_ROUTE: &str = "/v1/catchup/history";
/// The route of a node's offer.
pub const OFFER_ROUTE: &str = "/v1/catchup/offer";

/// What `GET /v1/catchup/history` answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryInfo {
    /// The lowest height the node's store holds (its engine's history minimum; 1 unless
    /// pruned).
    pub first_height: u64,
    /// The node's last decided height.
    pub last_height: u64,
    /// The height of the snapshot it offers, if any.
    pub offer_height: Option<u64>,
    /// Offers this node served so far (node-local).
    #[serde(default)]
    pub offers_served: u64,
    /// Offers it could not publish (too large, or not read; each also a warning).
    #[serde(default)]
    pub offers_unpublished: u64,
}

#[derive(Debug, Default)]
struct Published {
    history: HistoryInfo,
    offer: Option<Bytes>,
}

/// The node's published history and offer, shared between its loop and its HTTP handlers.
#[derive(Debug, Clone, Default)]
pub struct OfferSlot {
    inner: Arc<Mutex<Published>>,
    /// Offers not published (too large, or not read).
    unpublished: Arc<AtomicU64>,
    /// Offers served.
    served: Arc<AtomicU64>,
}

impl OfferSlot {
    /// An empty slot (history all zero, no offer).
    pub fn new() -> Self {
        Self::default()
    }

    /// The history published, with the counters.
    pub fn history(&self) -> HistoryInfo {
        let mut h = crate::api::lock(&self.inner).history;
        (h.offers_unpublished, h.offers_served) = self.counters();
        h
    }

    /// The offer's bytes published, if any.
    pub fn offer_bytes(&self) -> Option<Bytes> {
        crate::api::lock(&self.inner).offer.clone()
    }

    /// Offers that could not be published, and offers served.
    pub fn counters(&self) -> (u64, u64) {
        (
            self.unpublished.load(Ordering::Relaxed),
            self.served.load(Ordering::Relaxed),
        )
    }

    /// Publishes the store's heights (the offer unchanged).
    pub fn set_heights(&self, first_height: u64, last_height: u64) {
        let mut p = crate::api::lock(&self.inner);
        p.history.first_height = first_height;
        p.history.last_height = last_height;
    }

    /// Rebuilds the offer from the newest snapshot whose next block is decided (module docs),
    /// with the store seen through `base`, `last` and `get`; the heights are published too.
    pub fn refresh<C: Commit>(
        &self,
        snapshots: &Snapshots,
        base: u64,
        last: u64,
        get: impl Fn(u64) -> Option<Decided<C>>,
    ) {
        self.set_heights(base.saturating_add(1), last);
        let found = offer_from(snapshots, base, last, |h| Ok(get(h)));
        let encoded = found.and_then(|o| match o {
            Some(o) => {
                let height = o.above.height().saturating_sub(1);
                let bytes = o
                    .encode()
                    .map_err(|e| CatchUpError::Decode(e.to_string()))?;
                if bytes.len() as u64 > MAX_OFFER_BYTES {
                    return Err(CatchUpError::TooLarge {
                        bytes: bytes.len() as u64,
                    });
                }
                Ok(Some((height, bytes)))
            }
            None => Ok(None),
        });
        match encoded {
            Ok(Some((height, bytes))) => {
                let mut p = crate::api::lock(&self.inner);
                p.history.offer_height = Some(height);
                p.offer = Some(Bytes::from(bytes));
                drop(p);
                tracing::debug!(height, "catch-up offer published");
            }
            Ok(None) => {}
            Err(e) => {
                self.unpublished.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "catch-up offer not published");
            }
        }
    }

    /// After block `height` was decided (and any snapshot of it written): the heights, and
    /// the offer when the snapshot below `height` is newer than the one offered (a `stat` per
    /// height, a read only then).
    pub fn after_decide<C: Commit>(
        &self,
        snapshots: &Snapshots,
        base: u64,
        height: u64,
        get: impl Fn(u64) -> Option<Decided<C>>,
    ) {
        let below = height.saturating_sub(1);
        let offered = self.history().offer_height;
        if below > 0 && below >= base && offered < Some(below) && snapshots.path(below).exists() {
            self.refresh(snapshots, base, height, get);
        } else {
            self.set_heights(base.saturating_add(1), height);
        }
    }

    /// The routes serving this slot (module docs), to merge into the node's router.
    pub fn router(&self) -> Router {
        Router::new()
            .route(HISTORY_ROUTE, get(history))
            .route(OFFER_ROUTE, get(offer))
            .with_state(self.clone())
    }
}

/// `GET /v1/catchup/history`.
async fn history(State(slot): State<OfferSlot>) -> Response {
    match serde_json::to_string(&slot.history()) {
        Ok(s) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            s,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// `GET /v1/catchup/offer`.
async fn offer(State(slot): State<OfferSlot>) -> Response {
    match slot.offer_bytes() {
        Some(bytes) => {
            slot.served.fetch_add(1, Ordering::Relaxed);
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                bytes,
            )
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "no catch-up offer yet").into_response(),
    }
}
