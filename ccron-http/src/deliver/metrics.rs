//! The dispatcher's Prometheus text endpoint (`GET /metrics`), rendered with
//! `prometheus-client` (the crate the node's endpoint uses).
//!
//! The dispatcher copies its figures into a [`DispatchMetrics`] handle at the end of every
//! [`Dispatcher::step`](super::Dispatcher::step) (a few counters, one entry per worker: no
//! cost that grows with the outbox); [`metrics_router`] serves the handle, behind the bounded
//! server ([`serve_metrics`], [`crate::server`]). The registry is built per scrape (no
//! process-wide registry: two dispatchers in one process share nothing).
//!
//! Series (all prefixed `ccron_dispatch_`): attempts by outcome (`attempts_total{outcome}`,
//! the [`AttemptKind`](super::AttemptKind) names: the worker's or the bounded server's refusal reason, timeouts,
//! transport errors, refused answers), records done, replayed, given up, retried, deliveries
//! that found no worker up or waited for a free slot, sink failures, signature checks, probes,
//! workers marked down and paused; gauges of attempts in flight and waiting, the consumer's
//! persisted progress, the outbox head it last saw and the records behind it, and per worker
//! (`worker` = its position in the configuration) whether it is up and its attempts in flight.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::DispatchStats;
use crate::pool::{Health, PoolStats};
use crate::server::ServerConfig;

/// The path of the metrics endpoint.
pub const METRICS_PATH: &str = "/metrics";

/// One worker as the metrics show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerFigures {
    /// Takes attempts (up, not down or probing).
    pub up: bool,
    /// Attempts in flight there.
    pub in_flight: u64,
}

/// What the dispatcher knew at the end of its last step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchFigures {
    /// Its counters.
    pub stats: DispatchStats,
    /// The pool's counters.
    pub pool: PoolStats,
    /// Attempts awaiting their answer.
    pub in_flight: u64,
    /// Deliveries waiting for a free slot.
    pub waiting: u64,
    /// The consumer's persisted progress (every record up to it is finished).
    pub progress: u64,
    /// The last outbox record the dispatcher saw committed.
    pub head: u64,
    /// Per worker, in configuration order.
    pub workers: Vec<WorkerFigures>,
}

/// A dispatcher's figures, shared with its metrics endpoint (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct DispatchMetrics {
    inner: Arc<Mutex<DispatchFigures>>,
}

impl DispatchMetrics {
    /// The figures now.
    pub fn figures(&self) -> DispatchFigures {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn set(&self, f: DispatchFigures) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = f;
    }

    /// The figures in the Prometheus text format.
    ///
    /// # Errors
    /// A formatting error of the encoder.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut r = Registry::with_prefix("ccron_dispatch");
        self.register_into(&mut r);
        let mut out = String::new();
        encode(&mut out, &r)?;
        Ok(out)
    }

    /// Registers the figures' series in `r` (a registry or a sub-registry with its own
    /// prefix: the relay's endpoint shows them beside its own).
    pub fn register_into(&self, r: &mut Registry) {
        let f = self.figures();
        let attempts: Family<Labels, Counter> = Family::default();
        for (kind, n) in f.stats.outcomes.iter() {
            attempts
                .get_or_create(&vec![("outcome".into(), kind.name().into())])
                .inc_by(n);
        }
        r.register(
            "attempts",
            "Delivery attempts, by how they ended (the worker's or the server's refusal reason)",
            attempts,
        );
        let s = &f.stats;
        for (name, help, v) in [
            (
                "records_done",
                "Records answered and handed to the result sink",
                s.done,
            ),
            (
                "records_replayed",
                "Answers a worker replayed from memory",
                s.replayed,
            ),
            (
                "records_given_up",
                "Records given up (dead letters)",
                s.given_up,
            ),
            (
                "retries",
                "Attempts that failed and were left to the consumer's retry",
                s.retries,
            ),
            (
                "no_worker",
                "Deliveries that found no worker up",
                s.no_worker,
            ),
            (
                "waited_for_room",
                "Deliveries that waited for a free slot",
                s.waited_for_room,
            ),
            (
                "sink_failures",
                "Results the result sink refused",
                s.sink_failures,
            ),
            (
                "unauthorized",
                "Deliveries a worker refused as not authenticated",
                s.unauthorized,
            ),
            (
                "bad_answers",
                "Answers refused (no valid MAC or signature)",
                s.bad_answers,
            ),
            (
                "signature_checks",
                "Answer signatures verified",
                s.signature_checks,
            ),
            ("probes", "Health probes sent", s.probes),
            (
                "workers_marked_down",
                "Times a worker was marked down",
                f.pool.marked_down,
            ),
            (
                "workers_paused",
                "Times a worker was paused by a Retry-After",
                f.pool.paused,
            ),
        ] {
            let c: Counter = Counter::default();
            c.inc_by(v);
            r.register(name, help, c);
        }
        let gauge = |r: &mut Registry, name: &str, help: &str, v: u64| {
            let g: Gauge = Gauge::default();
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
            r.register(name, help, g);
        };
        gauge(
            r,
            "in_flight",
            "Attempts awaiting their answer",
            f.in_flight,
        );
        gauge(
            r,
            "waiting",
            "Deliveries waiting for a free slot",
            f.waiting,
        );
        gauge(
            r,
            "consumer_progress",
            "The consumer's persisted progress (every record up to it is finished)",
            f.progress,
        );
        gauge(
            r,
            "outbox_head",
            "The last outbox record the dispatcher saw committed",
            f.head,
        );
        gauge(
            r,
            "outbox_behind",
            "Committed records above the consumer's progress",
            f.head.saturating_sub(f.progress),
        );
        let up: Family<Labels, Gauge> = Family::default();
        let busy: Family<Labels, Gauge> = Family::default();
        for (i, w) in f.workers.iter().enumerate() {
            let l = vec![("worker".to_string(), i.to_string())];
            up.get_or_create(&l).set(i64::from(w.up));
            busy.get_or_create(&l)
                .set(i64::try_from(w.in_flight).unwrap_or(i64::MAX));
        }
        r.register(
            "worker_up",
            "Whether a worker takes attempts (1) or is down (0)",
            up,
        );
        r.register("worker_in_flight", "Attempts in flight, per worker", busy);
    }
}

type Labels = Vec<(String, String)>;

/// Whether `h` takes attempts.
pub(super) fn is_up(h: Option<Health>) -> bool {
    matches!(h, Some(Health::Up { .. }))
}

/// Figures a metrics endpoint serves: a cheap-to-clone handle rendering the Prometheus text
/// format ([`DispatchMetrics`], [`crate::relay::RelayMetrics`]).
pub trait RenderMetrics: Clone + Send + Sync + 'static {
    /// The exposition now.
    ///
    /// # Errors
    /// A formatting error of the encoder.
    fn render(&self) -> Result<String, std::fmt::Error>;
}

impl RenderMetrics for DispatchMetrics {
    fn render(&self) -> Result<String, std::fmt::Error> {
        DispatchMetrics::render(self)
    }
}

/// The router of a metrics endpoint: `GET` [`METRICS_PATH`] answers `metrics`' exposition.
/// Serve it with [`serve_metrics`] (or [`crate::server::serve`]): the bounds live there.
pub fn metrics_router<M: RenderMetrics>(metrics: M) -> Router {
    Router::new()
        .route(METRICS_PATH, get(scrape::<M>))
        .with_state(metrics)
}

async fn scrape<M: RenderMetrics>(State(m): State<M>) -> Response {
    text_response(m.render())
}

/// A rendered exposition as the endpoint's answer (its content type), or a 500 when the
/// encoder failed (traced).
fn text_response(rendered: Result<String, std::fmt::Error>) -> Response {
    match rendered {
        Ok(text) => {
            let mut resp = text.into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        Err(e) => {
            tracing::error!(error = %e, "metrics not rendered");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Serves `metrics` on `listener` behind the bounded server with `cfg` until `shutdown`
/// completes.
///
/// # Errors
/// The server's I/O error; an invalid `cfg` ([`std::io::ErrorKind::InvalidInput`]).
pub async fn serve_metrics<M: RenderMetrics>(
    listener: tokio::net::TcpListener,
    metrics: M,
    cfg: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::server::serve(listener, metrics_router(metrics), cfg, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deliver::AttemptKind;

    #[test]
    fn every_series_is_rendered_with_its_labels() {
        let m = DispatchMetrics::default();
        let mut stats = DispatchStats::default();
        stats.outcomes.add(AttemptKind::Done);
        stats.outcomes.add(AttemptKind::Done);
        stats.outcomes.add(AttemptKind::RateLimited);
        stats.done = 2;
        m.set(DispatchFigures {
            stats,
            in_flight: 3,
            progress: 7,
            head: 10,
            workers: vec![
                WorkerFigures {
                    up: true,
                    in_flight: 3,
                },
                WorkerFigures::default(),
            ],
            ..DispatchFigures::default()
        });
        let text = m.render().unwrap();
        for line in [
            "ccron_dispatch_attempts_total{outcome=\"done\"} 2",
            "ccron_dispatch_attempts_total{outcome=\"rate-limited\"} 1",
            "ccron_dispatch_attempts_total{outcome=\"timeout\"} 0",
            "ccron_dispatch_records_done_total 2",
            "ccron_dispatch_in_flight 3",
            "ccron_dispatch_outbox_behind 3",
            "ccron_dispatch_worker_up{worker=\"0\"} 1",
            "ccron_dispatch_worker_up{worker=\"1\"} 0",
            "ccron_dispatch_worker_in_flight{worker=\"0\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(text.trim_end().ends_with("# EOF"));
    }
}
