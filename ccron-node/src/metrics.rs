//! The node's Prometheus text endpoint (`GET /metrics`), rendered with `prometheus-client`.
//!
//! Two kinds of figures:
//!
//! - **Node-local** (this process's view; nodes differ): heights, ticks evaluated and skipped
//!   by the kernel, tick submissions refused by reason, fires, requests, mempool, the lateness
//!   of fires (agreed time minus due, and wall clock at execution minus due, histograms per
//!   component), snapshots and their age, runs and requests the outbox refused or held back
//!   for their owner's quota (`ccron_outbox_quota_refusals_total`), the signing guard's
//!   refusals by reason (`ccron_sign_refused_total{reason}`), the catch-up offers refused
//!   by kind (`ccron_catchup_refused_total{kind}`) and the catch-up while running's checks,
//!   triggers, installs and self-restarts (`ccron_catchup_running_total{event}`), the corrupt
//!   store files this home recovered from (`ccron_store_recovered_total{file}`).
//! - **Replicated** (read from the committed schedule book and outbox, so every honest node at
//!   the same height reports the same numbers; `ccron_book_height` names that height; each
//!   one's help text starts with [`REPLICATED_HELP`], so a scrape says which they are):
//!   schedules, paused, parked, dead runs, retries pending, the book's run counters
//!   (`ccron_book_runs_total{event=fired|failed|late|skipped|expired|retired}`, every schedule
//!   it ever held), per-schedule runs, run counters (`ccron_schedule_events_total{event=…}`),
//!   dead runs and recent failures (at most [`MAX_SCHEDULE_SERIES`] schedules, lowest ids, the rest
//!   counted in `ccron_schedule_series_dropped`), outbox depth, head, first index (the
//!   consumer's progress), records with a result, refused results, and each cron table entry's
//!   runs, overlap skips and holds (`ccron_table_entry_events_total{component,position,event}`,
//!   `ccron_http::register_entry_counts`).
//!
//! The registry is built per scrape from the shared state (no process-wide registry: several
//! nodes in one process share nothing); only the lateness histograms accumulate.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::{ApiState, lock};

/// Most schedules exported with per-schedule series (cardinality bound).
pub const MAX_SCHEDULE_SERIES: usize = 1_000;

type Labels = Vec<(String, String)>;

fn new_histogram() -> Histogram {
    // 1 ms .. ~17 min.
    Histogram::new(exponential_buckets(0.001, 2.0, 21))
}

/// Lateness histograms of fires, per component (seconds).
#[derive(Debug, Clone)]
pub struct Lateness {
    agreed: Family<Labels, Histogram>,
    wall: Family<Labels, Histogram>,
}

impl Lateness {
    /// Empty histograms.
    pub fn new() -> Self {
        Self {
            agreed: Family::new_with_constructor(new_histogram),
            wall: Family::new_with_constructor(new_histogram),
        }
    }

    /// One fire of `component`, `agreed_ms` and `wall_ms` late.
    pub fn observe(&self, component: u32, agreed_ms: i64, wall_ms: i64) {
        let l = vec![("component".to_string(), component.to_string())];
        self.agreed
            .get_or_create(&l)
            .observe(agreed_ms as f64 / 1000.0);
        self.wall.get_or_create(&l).observe(wall_ms as f64 / 1000.0);
    }
}

impl Default for Lateness {
    fn default() -> Self {
        Self::new()
    }
}

/// The start of a replicated figure's help text (`# HELP ccron_x [replicated] ...`): a reader of
/// the scrape tells the figures every honest node at the same `ccron_book_height` reports
/// equally from the node-local ones by it ([`replicated_samples`]); shared with
/// `ccron_http::book_metrics`.
pub use ccron_http::book_metrics::REPLICATED_HELP;

/// The replicated samples of a scrape (metrics whose help starts with [`REPLICATED_HELP`]):
/// `ccron_book_height`'s value, and every other replicated sample line as `series -> value`
/// (`series` is the sample's name with its labels, as scraped). Lines it does not understand
/// are skipped.
pub fn replicated_samples(text: &str) -> (Option<u64>, std::collections::BTreeMap<String, String>) {
    let mut names = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ")
            && let Some((name, help)) = rest.split_once(' ')
            && help.starts_with(REPLICATED_HELP)
        {
            names.insert(name.to_string());
        }
    }
    let mut height = None;
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        let base = name.strip_suffix("_total").unwrap_or(name);
        if !names.contains(name) && !names.contains(base) {
            continue;
        }
        if name == "ccron_book_height" {
            height = value.parse().ok();
        } else {
            out.insert(series.to_string(), value.to_string());
        }
    }
    (height, out)
}

fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    let g: Gauge = Gauge::default();
    g.set(v);
    r.register(name, help, g);
}

/// A counter family with one series per `(label, count)` of `counts`.
fn by_label(
    r: &mut Registry,
    name: &str,
    help: &str,
    label: &str,
    counts: &std::collections::BTreeMap<String, u64>,
) {
    let family: Family<Labels, Counter> = Family::default();
    for (k, v) in counts {
        family
            .get_or_create(&vec![(label.to_string(), k.clone())])
            .inc_by(*v);
    }
    r.register(name, help, family);
}

fn sat(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Renders the node's metrics in the Prometheus text format; `now_ms` is the wall clock (for
/// the snapshot's age).
///
/// # Errors
/// A formatting error of the encoder.
pub fn render(state: &ApiState, now_ms: i64) -> Result<String, std::fmt::Error> {
    let mut r = Registry::with_prefix("ccron");
    let s = state.reads.status();
    gauge(&mut r, "height", "Last executed height", sat(s.last_height));
    gauge(
        &mut r,
        "agreed_time_ms",
        "Agreed time of the last executed height",
        s.agreed_time_ms,
    );
    counter(
        &mut r,
        "ticks_evaluated",
        "Ticks the kernel evaluated",
        s.ticks_executed,
    );
    counter(
        &mut r,
        "ticks_skipped",
        "Ticks the kernel skipped (one per sender, component and period)",
        s.ticks_skipped,
    );
    let refused: Family<Labels, Counter> = Family::default();
    let p = &s.tick_pool.pool;
    for (reason, v) in [
        ("not_a_validator", p.not_a_validator),
        ("unknown_component", p.unknown_component),
        ("already_pending", p.already_pending),
        ("stale", p.stale),
        ("invalid", s.tick_pool.invalid),
    ] {
        refused
            .get_or_create(&vec![("reason".into(), reason.into())])
            .inc_by(v);
    }
    r.register(
        "ticks_refused",
        "Tick submissions refused before the pool, by reason",
        refused,
    );
    let pending_ticks = lock(&state.ticks).len();
    gauge(
        &mut r,
        "tick_pool_pending",
        "Signed ticks waiting for a block",
        sat(pending_ticks as u64),
    );
    counter(&mut r, "fires", "Cron actions run", s.fires);
    counter(
        &mut r,
        "requests_executed",
        "Client requests executed",
        s.requests_executed,
    );
    counter(
        &mut r,
        "requests_duplicate",
        "Duplicate client requests",
        s.requests_duplicate,
    );
    counter(
        &mut r,
        "requests_refused",
        "Client requests refused",
        s.requests_refused,
    );
    let m = lock(&state.mempool).counters();
    gauge(
        &mut r,
        "mempool_pending",
        "Verified requests waiting for a block",
        sat(m.pending),
    );
    let rejected: Family<Labels, Counter> = Family::default();
    for (reason, v) in [
        ("pending", m.rejected_pending),
        ("executed", m.rejected_executed),
        ("out_of_window", m.rejected_out_of_window),
        ("client_full", m.rejected_client_full),
        ("full", m.rejected_full),
        ("invalid", m.rejected_invalid),
    ] {
        rejected
            .get_or_create(&vec![("reason".into(), reason.into())])
            .inc_by(v);
    }
    r.register(
        "mempool_rejected",
        "Requests the mempool refused, by reason",
        rejected,
    );
    r.register(
        "fire_lateness_agreed_seconds",
        "Agreed time of a fire's block minus its due instant",
        state.reads.lateness().agreed.clone(),
    );
    r.register(
        "fire_lateness_wall_seconds",
        "Wall clock at execution minus a fire's due instant",
        state.reads.lateness().wall.clone(),
    );
    counter(
        &mut r,
        "snapshots_written",
        "Snapshots written",
        s.snapshots_written,
    );
    counter(
        &mut r,
        "snapshot_failures",
        "Snapshots that failed",
        s.snapshot_failures,
    );
    counter(
        &mut r,
        "diag_log_failures",
        "Appends, rotations and trims of digests.log and fires.log that failed",
        s.diag_log_failures,
    );
    if let Some((h, at)) = state.reads.last_snapshot() {
        gauge(
            &mut r,
            "snapshot_age_heights",
            "Heights executed since the last snapshot",
            sat(s.last_height.saturating_sub(h)),
        );
        gauge(
            &mut r,
            "snapshot_age_ms",
            "Wall time since the last snapshot",
            now_ms.saturating_sub(at),
        );
    }
    counter(
        &mut r,
        "outbox_quota_refusals",
        "Runs and requests this replica's outbox refused or held back for their owner's quota",
        state.reads.book.quota_refusals(),
    );
    by_label(
        &mut r,
        "sign_refused",
        "Signatures the signing guard refused (a second message for a signed height and round, a lower one, one below the floor of a lost WAL, an unsaved state), by reason",
        "reason",
        &s.signing.refused,
    );
    counter(
        &mut r,
        "signed",
        "Votes, proposals and parts the signing guard recorded, then signed",
        s.signing.signed,
    );
    by_label(
        &mut r,
        "catchup_refused",
        "Peers' catch-up offers refused (before start or while running), by kind",
        "kind",
        &s.catchup_refused,
    );
    by_label(
        &mut r,
        "catchup_running",
        "Catch-up while running: stalled checks by outcome, triggers, installs, self-restarts",
        "event",
        &s.catchup_running.by_event(),
    );
    let mut recovered = std::collections::BTreeMap::new();
    for q in &s.store_recovery {
        let file = if q.file.starts_with("snapshots") {
            "snapshot"
        } else {
            q.file.as_str()
        };
        *recovered.entry(file.to_string()).or_insert(0u64) += 1;
    }
    by_label(
        &mut r,
        "store_recovered",
        "Corrupt store files refused, kept aside and recovered from (this home), by file",
        "file",
        &recovered,
    );
    replicated(&mut r, state);
    let mut out = String::new();
    encode(&mut out, &r)?;
    Ok(out)
}

/// The replicated figures (see the module documentation).
fn replicated(r: &mut Registry, state: &ApiState) {
    let Some(published) = state.reads.book.snapshot_with_entries() else {
        return;
    };
    let (book, outbox, h) = (published.book, published.outbox, published.at_height);
    // Each table entry's replicated counts (query format 7), as every host renders them.
    if let Some(entries) = &published.entries {
        ccron_http::register_entry_counts(r, entries);
    }
    gauge(
        r,
        "book_height",
        "[replicated] Height the replicated figures were read at",
        sat(h),
    );
    if let Some(o) = outbox {
        gauge(
            r,
            "outbox_depth",
            "[replicated] Outbox records held",
            sat(o.held),
        );
        gauge(
            r,
            "outbox_head",
            "[replicated] Index of the last outbox record",
            sat(o.head),
        );
        gauge(
            r,
            "outbox_first_index",
            "[replicated] Oldest outbox record held (the consumer acknowledged all below)",
            sat(o.first_index),
        );
        gauge(
            r,
            "outbox_with_result",
            "[replicated] Held outbox records with a result",
            sat(o.with_result),
        );
        counter(
            r,
            "outbox_refused_results",
            "[replicated] Outbox results refused",
            o.refused_results,
        );
    }
    let Some(book) = book else {
        return;
    };
    let b = ccron::schedule::query::book_state(&book);
    gauge(
        r,
        "schedules",
        "[replicated] Schedules in the book",
        sat(b.schedules),
    );
    gauge(
        r,
        "schedules_paused",
        "[replicated] Paused schedules",
        sat(b.paused),
    );
    gauge(
        r,
        "schedules_parked",
        "[replicated] Parked schedules",
        sat(b.parked),
    );
    gauge(
        r,
        "dead_runs",
        "[replicated] Dead-lettered runs held",
        sat(b.dead_runs),
    );
    gauge(
        r,
        "retries_pending",
        "[replicated] Schedules with a retry pending",
        sat(b.retries_pending),
    );
    // `book_runs{event}` and `book_refusals{reason}` (book layout 13), as every host renders them.
    ccron_http::register_book_counters(r, &b);
    let runs: Family<Labels, Counter> = Family::default();
    let per_event: Family<Labels, Counter> = Family::default();
    let dead: Family<Labels, Gauge> = Family::default();
    let evicted: Family<Labels, Counter> = Family::default();
    let failed: Family<Labels, Gauge> = Family::default();
    let mut dropped = 0u64;
    for (i, id) in book.ids().enumerate() {
        if i >= MAX_SCHEDULE_SERIES {
            dropped += 1;
            continue;
        }
        let Some(info) = book.get(id) else { continue };
        let l = vec![
            ("schedule".to_string(), id.to_string()),
            ("handler".to_string(), info.schedule.handler.clone()),
        ];
        runs.get_or_create(&l).inc_by(info.runs);
        for (event, v) in ccron_http::book_metrics::events(&info.counters) {
            let mut le = l.clone();
            le.push(("event".to_string(), event.to_string()));
            per_event.get_or_create(&le).inc_by(v);
        }
        dead.get_or_create(&l).set(info.dead.len() as i64);
        evicted.get_or_create(&l).inc_by(info.dead_evicted);
        let f = info.history.iter().filter(|e| !e.outcome.is_ok()).count();
        failed.get_or_create(&l).set(f as i64);
    }
    r.register(
        "schedule_runs",
        "[replicated] Occurrences run, per schedule",
        runs,
    );
    r.register(
        "schedule_events",
        "[replicated] Replicated run counters, per schedule and event",
        per_event,
    );
    r.register(
        "schedule_dead_runs",
        "[replicated] Dead runs held, per schedule",
        dead,
    );
    r.register(
        "schedule_dead_evicted",
        "[replicated] Dead runs evicted, per schedule",
        evicted,
    );
    r.register(
        "schedule_recent_failed",
        "[replicated] Failed runs among the recent history, per schedule",
        failed,
    );
    gauge(
        r,
        "schedule_series_dropped",
        "[replicated] Schedules without per-schedule series (over the cardinality bound)",
        sat(dropped),
    );
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};

    use ccron::host::TickPool;
    use ccron::outbox::{EmitBudget, Outbox, OutboxLimits};
    use ccron::{Principal, Quota};

    use super::*;
    use crate::mempool::{Mempool, MempoolConfig};
    use crate::read::NodeReads;
    use crate::results::RequestResults;
    use crate::types::Validators;

    /// A node's API state around `reads` (nothing else published).
    fn state_of(reads: &NodeReads) -> ApiState {
        ApiState {
            mempool: Arc::new(Mutex::new(Mempool::new(
                MempoolConfig::default(),
                Default::default(),
            ))),
            outbox: ccron_http::PublishedOutbox::new(0),
            ticks: Arc::new(Mutex::new(TickPool::new(4, [1]))),
            validators: Validators::new(&[[1; 32], [2; 32], [3; 32], [4; 32]]),
            domain: crate::crypto::SigningDomain::chain(b"test-chain").unwrap(),
            ticks_invalid: Arc::new(AtomicU64::new(0)),
            results: Arc::new(Mutex::new(RequestResults::default())),
            reads: reads.clone(),
        }
    }

    /// Every figure `replicated` registers is marked replicated in its help, and the scrape's
    /// reader finds exactly those (a new replicated figure without the marker fails here).
    #[test]
    fn the_replicated_figures_are_marked_and_read_back() {
        let reads = NodeReads::new(0);
        let state = state_of(&reads);
        let outbox = Outbox::new(OutboxLimits::default());
        let book = ccron::schedule::Scheduler::new(1, ccron::schedule::Limits::default());
        reads.book.publish(Some(&book), Some(&outbox), 7, [1; 32]);
        // The names `replicated` registers, rendered alone.
        let mut alone = Registry::with_prefix("ccron");
        replicated(&mut alone, &state);
        let mut text = String::new();
        encode(&mut text, &alone).unwrap();
        let registered: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert!(registered.len() >= 10, "{text}");
        for l in text.lines().filter(|l| l.starts_with("# HELP ")) {
            let help = l.splitn(4, ' ').nth(3).unwrap_or_default();
            assert!(help.starts_with(REPLICATED_HELP), "not marked: {l}");
        }
        // The whole scrape: the reader finds the replicated samples and the height only.
        let full = render(&state, 0).unwrap();
        let (height, samples) = replicated_samples(&full);
        assert_eq!(height, Some(7));
        assert!(samples.contains_key("ccron_schedules"), "{samples:?}");
        assert!(samples.contains_key("ccron_outbox_depth"), "{samples:?}");
        assert!(
            !samples.keys().any(|k| k.starts_with("ccron_height")),
            "{samples:?}"
        );
        assert!(
            !samples.keys().any(|k| k.starts_with("ccron_mempool")),
            "{samples:?}"
        );
        let names: std::collections::BTreeSet<&str> = samples
            .keys()
            .map(|k| k.split('{').next().unwrap())
            .map(|k| k.strip_suffix("_total").unwrap_or(k))
            .chain(["ccron_book_height"])
            .collect();
        for name in &registered {
            if !name.starts_with("ccron_schedule_") || *name == "ccron_schedule_series_dropped" {
                assert!(names.contains(name), "{name} not read back: {samples:?}");
            }
        }
    }

    /// Each cron table entry's replicated counts (query format 7) are scraped by event and
    /// read back as replicated figures.
    #[test]
    fn table_entry_counts_are_scraped() {
        use ccron::schedule::query::{EntryCounts, EntryOverlapCounts, table_entries};
        use ccron::{CronEntry, CronTable, CronTableRegistry, PageRange, Periodic};
        let reads = NodeReads::new(0);
        let state = state_of(&reads);
        let mut t = CronTable::with_persistence(3, PageRange::new(0, 8).unwrap(), 8);
        let every = Periodic::every_ms(60_000).unwrap();
        t.add(CronEntry::<()>::periodic(4, every, |_| {})).unwrap();
        let mut registry = CronTableRegistry::new();
        registry.register(t).unwrap();
        let counts = std::collections::BTreeMap::from([(
            (3, 4),
            EntryCounts {
                fired: 5,
                overlap: EntryOverlapCounts {
                    skipped: 2,
                    held: 1,
                },
            },
        )]);
        let entries = || Some(table_entries(&registry, &counts, None));
        reads
            .book
            .publish_with_entries(None, None, entries, 9, [2; 32]);
        let text = render(&state, 0).unwrap();
        for line in [
            "ccron_book_height 9",
            "ccron_table_entry_events_total{component=\"3\",position=\"4\",event=\"fired\"} 5",
            "ccron_table_entry_events_total{component=\"3\",position=\"4\",event=\"skipped\"} 2",
            "ccron_table_entry_events_total{component=\"3\",position=\"4\",event=\"held\"} 1",
            "ccron_table_entry_series_dropped 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in {text}");
        }
        let (height, samples) = replicated_samples(&text);
        assert_eq!(height, Some(9));
        assert!(
            samples
                .keys()
                .any(|k| k.starts_with("ccron_table_entry_events")),
            "{samples:?}"
        );
    }

    #[test]
    fn the_outbox_quota_refusals_are_scraped() {
        let reads = NodeReads::new(0);
        let state = state_of(&reads);
        let line = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("ccron_outbox_quota_refusals_total "))
                .map(str::to_owned)
        };
        assert_eq!(
            line(&render(&state, 0).unwrap()).as_deref(),
            Some("ccron_outbox_quota_refusals_total 0")
        );
        // An owner with no outbox room left: each run refused is counted by the outbox.
        let outbox = Outbox::new(OutboxLimits::default());
        let full = Some(Quota::UNLIMITED.with_outbox(0, 0));
        for _ in 0..2 {
            assert!(
                outbox
                    .owner_room(
                        EmitBudget::new(1, 10),
                        &Principal::Client(ccron::ClientId::from_index(1)),
                        full
                    )
                    .is_err()
            );
        }
        reads.book.publish(None, Some(&outbox), 1, [1; 32]);
        // Not replicated state: read again at a publish whose digest did not change.
        assert!(
            outbox
                .owner_room(
                    EmitBudget::new(1, 10),
                    &Principal::Client(ccron::ClientId::from_index(1)),
                    full
                )
                .is_err()
        );
        reads.book.publish(None, Some(&outbox), 2, [1; 32]);
        let text = render(&state, 0).unwrap();
        assert_eq!(
            line(&text).as_deref(),
            Some("ccron_outbox_quota_refusals_total 3"),
            "{text}"
        );
        assert!(text.contains("# TYPE ccron_outbox_quota_refusals counter"));
    }

    #[test]
    fn catch_up_and_signing_refusals_are_scraped_by_kind() {
        let reads = NodeReads::new(0);
        let state = state_of(&reads);
        let text = render(&state, 0).unwrap();
        assert!(!text.contains("ccron_catchup_refused_total{"), "{text}");
        // What a node's status holds after a catch-up that refused two forged commits and a
        // stale offer, and a guard that refused a conflicting vote.
        let mut status = crate::records::NodeStatus::default();
        let mut report = crate::catchup::fetch::CatchUpReport::default();
        report.refused_by_kind.insert("commit".into(), 2);
        report.refused_by_kind.insert("not_above".into(), 1);
        status.count_catch_up(&report);
        status.signing.refused.insert("conflict".into(), 1);
        status.signing.signed = 7;
        status.catchup_running.triggered = 1;
        status.catchup_running.restarts = 1;
        for file in ["blocks.log", "snapshots/snapshot-00000000000000000025.bin"] {
            status.store_recovery.push(crate::store::Quarantined {
                file: file.into(),
                ..Default::default()
            });
        }
        reads.set_status(&status);
        let text = render(&state, 0).unwrap();
        for line in [
            "ccron_catchup_refused_total{kind=\"commit\"} 2",
            "ccron_catchup_refused_total{kind=\"not_above\"} 1",
            "ccron_sign_refused_total{reason=\"conflict\"} 1",
            "ccron_signed_total 7",
            "ccron_catchup_running_total{event=\"triggered\"} 1",
            "ccron_catchup_running_total{event=\"restarts\"} 1",
            "ccron_catchup_running_total{event=\"installed\"} 0",
            "ccron_store_recovered_total{file=\"blocks.log\"} 1",
            "ccron_store_recovered_total{file=\"snapshot\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in {text}");
        }
    }
}
