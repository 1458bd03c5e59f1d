//! The relay's Prometheus text endpoint (`GET /metrics`, `ccron relay --metrics-listen`): the
//! dispatcher's series (`ccron_dispatch_*`, [`DispatchMetrics`]) beside the relay's own
//! (`ccron_relay_*`): the consumer's progress and the progress reported to the ledger, results
//! pending, sent and re-sent, submit failures by kind and failed quorum reads.
//!
//! [`Relay::step`](super::Relay::step) copies its counters into the [`RelayMetrics`] handle at
//! the end of every step (a few integers); the registry is built per scrape, behind the bounded
//! server ([`crate::server`]).

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::RelayStats;
use crate::deliver::DispatchMetrics;
use crate::deliver::metrics::RenderMetrics;

/// What the relay knew at the end of its last step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayFigures {
    /// Its counters.
    pub stats: RelayStats,
    /// Failed endpoint reads of both quorum readers.
    pub read_failures: u64,
    /// Steps completed.
    pub steps: u64,
}

/// A relay's figures and its dispatcher's, shared with the metrics endpoint (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct RelayMetrics {
    figures: Arc<Mutex<RelayFigures>>,
    dispatch: DispatchMetrics,
}

impl RelayMetrics {
    pub(super) fn new(dispatch: DispatchMetrics) -> Self {
        Self {
            figures: Arc::default(),
            dispatch,
        }
    }

    /// The relay's figures now.
    pub fn figures(&self) -> RelayFigures {
        *self.figures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The dispatcher's handle.
    pub fn dispatch(&self) -> &DispatchMetrics {
        &self.dispatch
    }

    pub(super) fn set(&self, f: RelayFigures) {
        *self.figures.lock().unwrap_or_else(|e| e.into_inner()) = f;
    }

    /// Both sets of series in the Prometheus text format.
    ///
    /// # Errors
    /// A formatting error of the encoder.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut root = Registry::default();
        self.dispatch
            .register_into(root.sub_registry_with_prefix("ccron_dispatch"));
        let r = root.sub_registry_with_prefix("ccron_relay");
        let f = self.figures();
        let s = &f.stats;
        for (name, help, v) in [
            (
                "results_sent",
                "Results submitted to the ledger (first sends)",
                s.results_sent,
            ),
            (
                "resent",
                "Results and progress reports sent again (not seen applied in time)",
                s.resent,
            ),
            (
                "read_failures",
                "Failed endpoint reads of the quorum readers (each retried)",
                f.read_failures,
            ),
            ("steps", "Relay rounds completed", f.steps),
        ] {
            let c: Counter = Counter::default();
            c.inc_by(v);
            r.register(name, help, c);
        }
        let failures: Family<Vec<(String, String)>, Counter> = Family::default();
        let other = s
            .submit_failures
            .saturating_sub(s.submit_paced)
            .saturating_sub(s.submit_refused);
        for (kind, n) in [
            ("window_full", s.submit_paced),
            ("refused", s.submit_refused),
            ("not_sent", other),
        ] {
            failures
                .get_or_create(&vec![("kind".into(), kind.into())])
                .inc_by(n);
        }
        r.register(
            "submit_failures",
            "Submits that failed, by kind (each payload is sent again later)",
            failures,
        );
        for (name, help, v) in [
            (
                "progress",
                "The consumer's persisted progress (every record up to it is finished)",
                s.progress,
            ),
            (
                "reported_progress",
                "The last progress reported to the ledger (it trims the outbox up to it)",
                s.reported_progress,
            ),
            (
                "pending_results",
                "Results journaled and not yet seen applied by f+1 replicas",
                u64::try_from(s.pending_results).unwrap_or(u64::MAX),
            ),
        ] {
            let g: Gauge = Gauge::default();
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
            r.register(name, help, g);
        }
        let mut out = String::new();
        encode(&mut out, &root)?;
        Ok(out)
    }
}

impl RenderMetrics for RelayMetrics {
    fn render(&self) -> Result<String, std::fmt::Error> {
        RelayMetrics::render(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sets_of_series_are_rendered_with_the_published_figures() {
        let m = RelayMetrics::new(DispatchMetrics::default());
        m.set(RelayFigures {
            stats: RelayStats {
                progress: 41,
                pending_results: 3,
                results_sent: 44,
                resent: 2,
                submit_failures: 7,
                submit_paced: 4,
                submit_refused: 1,
                reported_progress: 40,
            },
            read_failures: 5,
            steps: 9,
        });
        let text = m.render().expect("render");
        for line in [
            "ccron_relay_progress 41",
            "ccron_relay_reported_progress 40",
            "ccron_relay_pending_results 3",
            "ccron_relay_results_sent_total 44",
            "ccron_relay_resent_total 2",
            "ccron_relay_read_failures_total 5",
            "ccron_relay_steps_total 9",
            "ccron_relay_submit_failures_total{kind=\"window_full\"} 4",
            "ccron_relay_submit_failures_total{kind=\"refused\"} 1",
            "ccron_relay_submit_failures_total{kind=\"not_sent\"} 2",
            "ccron_dispatch_consumer_progress 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
    }
}
