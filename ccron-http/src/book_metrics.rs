//! The book's replicated counters in the Prometheus text format: what a node's `/metrics`
//! exports of its committed schedule book, rendered with `prometheus-client` (the crate the
//! node's endpoint and the dispatcher's use).
//!
//! Series (prefixed `ccron_`; every figure read from the committed book, so every honest
//! replica at the same height reports the same numbers):
//!
//! - `ccron_book_height`: the height the figures were read at.
//! - `ccron_book_runs_total{event=fired|failed|late|skipped|expired|retired}`: the book's run
//!   counters ([`Scheduler::totals`](ccron::schedule::Scheduler::totals)), every schedule it
//!   ever held.
//! - `ccron_book_refusals_total{reason=slot_full|calendar|backfill}`: the book's admission
//!   refusals ([`RefusalCounters`], book layout 13): stored in the book's commit page, so a
//!   restart does not reset them.
//!
//! - `ccron_table_entry_events_total{component,position,event=fired|skipped|held}`: each cron
//!   table entry's replicated counts (`CronLedger`'s: runs of its action, runs its overlap
//!   policy skipped, passes it held the entry; query format 7's
//!   [`EntrySummary::overlap_counts`](ccron::schedule::query::EntrySummary::overlap_counts)),
//!   at most [`MAX_ENTRY_SERIES`] entries (lowest component and position), the rest counted in
//!   `ccron_table_entry_series_dropped`.
//!
//! [`register_book_counters`] adds the two counter families to a registry (a node's endpoint
//! registers them next to its own figures), [`register_entry_counts`] the table entries';
//! [`PublishedBook`] renders these series for a
//! host that publishes its book with [`PublishBook`](crate::PublishBook), served by
//! [`metrics_router`](crate::metrics_router) behind the bounded server
//! ([`serve_metrics`](crate::serve_metrics)).

use ccron::schedule::query::{self, BookState, TableEntries};
use ccron::schedule::{RefusalCounters, RunCounters};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::RenderMetrics;
use crate::schedules::PublishedBook;

type Labels = Vec<(String, String)>;

/// The run counters by `event` label (the values of `book_runs{event}`; a node's per-schedule
/// series use the same labels).
pub fn events(c: &RunCounters) -> [(&'static str, u64); 6] {
    [
        ("fired", c.fired),
        ("failed", c.failed),
        ("late", c.late),
        ("skipped", c.skipped),
        ("expired", c.expired),
        ("retired", c.retired),
    ]
}

/// A counter family over `(label, value)` pairs, label name `label`.
fn family(label: &str, values: &[(&'static str, u64)]) -> Family<Labels, Counter> {
    let f: Family<Labels, Counter> = Family::default();
    for (name, v) in values {
        f.get_or_create(&vec![(label.to_owned(), (*name).to_owned())])
            .inc_by(*v);
    }
    f
}

/// The start of a replicated figure's help text (`# HELP ccron_x [replicated] ...`): the
/// figures every honest node at the same `ccron_book_height` reports equally, told apart from
/// a node's local ones in the scrape itself (`ccron_node::metrics::replicated_samples`).
pub const REPLICATED_HELP: &str = "[replicated] ";

/// Registers the book's replicated counters of `state` in `r` (names relative to the
/// registry's prefix, `ccron` for the series above): `book_runs{event}` and, when the state
/// reports them (a book state of query format 6 or one built by
/// [`book_state`](ccron::schedule::query::book_state)), `book_refusals{reason}`.
pub fn register_book_counters(r: &mut Registry, state: &BookState) {
    r.register(
        "book_runs",
        "[replicated] The book's replicated run counters, by event (every schedule it ever held)",
        family("event", &events(&state.totals)),
    );
    if let Some(refusals) = state.refusals {
        register_refusals(r, &refusals);
    }
}

/// Registers `book_refusals{reason}` (see the module documentation).
pub fn register_refusals(r: &mut Registry, refusals: &RefusalCounters) {
    r.register(
        "book_refusals",
        "[replicated] The book's replicated admission refusals, by reason (slot_full, calendar, backfill)",
        family("reason", &refusals.by_reason()),
    );
}

/// Most table entries exported with per-entry series (cardinality bound).
pub const MAX_ENTRY_SERIES: usize = 1_000;

/// Registers `table_entry_events{component,position,event}` and
/// `table_entry_series_dropped` for `entries` (see the module documentation). An entry of an
/// answer that does not report overlap counts (decoded from query format 6) exports none:
/// only its `fired` sample.
pub fn register_entry_counts(r: &mut Registry, entries: &TableEntries) {
    let events: Family<Labels, Counter> = Family::default();
    let mut dropped = 0u64;
    for (i, e) in entries.summaries().iter().enumerate() {
        if i >= MAX_ENTRY_SERIES {
            dropped += 1;
            continue;
        }
        let mut values = vec![("fired", e.fired)];
        if let Some(c) = e.overlap_counts {
            values.extend([("skipped", c.skipped), ("held", c.held)]);
        }
        for (event, v) in values {
            events
                .get_or_create(&vec![
                    ("component".to_owned(), e.component.to_string()),
                    ("position".to_owned(), e.position.to_string()),
                    ("event".to_owned(), event.to_owned()),
                ])
                .inc_by(v);
        }
    }
    r.register(
        "table_entry_events",
        "[replicated] Replicated counts per cron table entry, by event (fired, skipped and held by its overlap policy)",
        events,
    );
    let g: Gauge = Gauge::default();
    g.set(i64::try_from(dropped).unwrap_or(i64::MAX));
    r.register(
        "table_entry_series_dropped",
        "[replicated] Table entries without per-entry series (over the cardinality bound)",
        g,
    );
}

impl RenderMetrics for PublishedBook {
    /// The book's and the table entries' replicated series as of the last publish (none
    /// before the first publish, only the height when the application keeps neither).
    fn render(&self) -> Result<String, std::fmt::Error> {
        let mut r = Registry::with_prefix("ccron");
        if let Some(s) = self.snapshot_with_entries() {
            let (book, height) = (s.book, s.at_height);
            let g: Gauge = Gauge::default();
            g.set(i64::try_from(height).unwrap_or(i64::MAX));
            r.register(
                "book_height",
                "[replicated] Height the replicated figures were read at",
                g,
            );
            if let Some(book) = book {
                register_book_counters(&mut r, &query::book_state(&book));
            }
            if let Some(entries) = s.entries {
                register_entry_counts(&mut r, &entries);
            }
        }
        let mut out = String::new();
        encode(&mut out, &r)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::schedule::{Limits, Scheduler};

    /// The series' names and labels as a scrape shows them, refusals next to runs.
    #[test]
    fn the_book_series_are_named_and_labelled() {
        let published = PublishedBook::new(0);
        assert_eq!(published.render().unwrap().trim(), "# EOF");
        let book = Scheduler::new(3, Limits::default());
        published.publish(Some(&book), None, 9, [1; 32]);
        let text = published.render().unwrap();
        for line in [
            "ccron_book_height 9",
            "ccron_book_runs_total{event=\"fired\"} 0",
            "ccron_book_refusals_total{reason=\"slot_full\"} 0",
            "ccron_book_refusals_total{reason=\"calendar\"} 0",
            "ccron_book_refusals_total{reason=\"backfill\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // A book state of an older query format reports no refusals: none exported.
        let mut r = Registry::with_prefix("ccron");
        register_book_counters(&mut r, &BookState::default());
        let mut out = String::new();
        encode(&mut out, &r).unwrap();
        assert!(out.contains("ccron_book_runs_total") && !out.contains("refusals"));
    }
}
