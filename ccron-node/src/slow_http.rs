//! The `slow-http` Byzantine validator's endpoint ([`crate::hostile::ByzantineKind::SlowHttp`]):
//! every answer starts late and then drips, the way a faulty or hostile peer starves clients
//! that wait per read instead of per exchange. The honest side it attacks: the tick
//! forwarders of the other validators ([`crate::forward`]: one post in flight per target, a
//! deadline per exchange), their catch-up fetchers and any reader of this node.
//!
//! A layer over the node's routes ([`layer`]); before the behaviour's start time, and on an
//! honest node, the routes are served unchanged.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;

use crate::hostile::{Byzantine, ByzantineKind};

/// How long a `slow-http` node waits before it starts an answer.
pub const FIRST_BYTE_DELAY: Duration = Duration::from_secs(2);

/// How often it sends the next byte of an answer.
pub const DRIP_INTERVAL: Duration = Duration::from_millis(500);

/// Most bytes of an answer it holds to drip (the node's answers are far smaller; a larger one
/// is cut there: the client sees a short body).
pub const MAX_DRIPPED_BYTES: usize = 1 << 20;

/// `routes`, answering slowly from `byzantine`'s start time when its kind is
/// [`ByzantineKind::SlowHttp`]; unchanged otherwise.
pub fn layer(routes: Router, byzantine: Option<Byzantine>) -> Router {
    layer_with(routes, byzantine, FIRST_BYTE_DELAY, DRIP_INTERVAL)
}

fn layer_with(
    routes: Router,
    byzantine: Option<Byzantine>,
    first_byte: Duration,
    interval: Duration,
) -> Router {
    match byzantine {
        Some(b) if b.kind == ByzantineKind::SlowHttp => routes.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| answer_slowly(b, first_byte, interval, req, next),
        )),
        _ => routes,
    }
}

async fn answer_slowly(
    b: Byzantine,
    first_byte: Duration,
    interval: Duration,
    req: Request,
    next: Next,
) -> Response {
    if !b.active(crate::core::now_ms()) {
        return next.run(req).await;
    }
    tokio::time::sleep(first_byte).await;
    let (parts, body) = next.run(req).await.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_DRIPPED_BYTES)
        .await
        .unwrap_or_default();
    Response::from_parts(parts, Body::new(Drip::new(bytes, interval)))
}

/// A body sending one byte per interval.
pub struct Drip {
    rest: Bytes,
    interval: Duration,
    next: Pin<Box<tokio::time::Sleep>>,
}

impl Drip {
    /// `bytes`, one per `interval`, the first after one interval.
    pub fn new(bytes: Bytes, interval: Duration) -> Self {
        Self {
            rest: bytes,
            interval,
            next: Box::pin(tokio::time::sleep(interval)),
        }
    }
}

impl http_body::Body for Drip {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        if self.next.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let at = tokio::time::Instant::now() + self.interval;
        self.next.as_mut().reset(at);
        let byte = self.rest.split_to(1);
        Poll::Ready(Some(Ok(http_body::Frame::data(byte))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// The body's frames and the time from the request to the last one.
    async fn get(routes: Router) -> (Vec<Bytes>, Duration) {
        use tower_service::Service as _;
        let start = tokio::time::Instant::now();
        let mut routes = routes;
        let resp = routes
            .call(Request::get("/v1/x").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let mut body = resp.into_body();
        let mut frames = Vec::new();
        while let Some(f) = body.frame().await {
            frames.push(f.unwrap().into_data().unwrap());
        }
        (frames, start.elapsed())
    }

    fn router() -> Router {
        Router::new().route("/v1/x", axum::routing::get(|| async { "hello" }))
    }

    const FIRST: Duration = Duration::from_millis(100);
    const EVERY: Duration = Duration::from_millis(20);

    #[tokio::test]
    async fn a_slow_http_node_answers_late_and_drips_from_its_start_time() {
        let on = Byzantine {
            kind: ByzantineKind::SlowHttp,
            from_ms: 0,
        };
        let (frames, took) = get(layer_with(router(), Some(on), FIRST, EVERY)).await;
        // One byte a frame, after the delay and one interval each.
        assert_eq!(frames.concat(), b"hello");
        assert!(frames.iter().all(|f| f.len() == 1), "{frames:?}");
        assert!(took >= FIRST + EVERY * 5, "{took:?}");
        // Before its start time, on an honest node or of another kind: the answer whole.
        let later = Byzantine {
            kind: ByzantineKind::SlowHttp,
            from_ms: i64::MAX,
        };
        let other = Byzantine {
            kind: ByzantineKind::Flood,
            from_ms: 0,
        };
        for b in [Some(later), Some(other), None] {
            let (frames, _) = get(layer_with(router(), b, FIRST, EVERY)).await;
            assert_eq!(frames, [Bytes::from_static(b"hello")], "{b:?}");
        }
    }

    #[tokio::test]
    async fn a_drip_ends_with_its_bytes() {
        let mut body = Drip::new(Bytes::from_static(b"abc"), Duration::from_millis(1));
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(3));
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            got.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(got, [&b"a"[..], b"b", b"c"]);
        assert!(http_body::Body::is_end_stream(&body));
    }
}
