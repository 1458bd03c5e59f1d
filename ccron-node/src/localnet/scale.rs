//! The localnet at scale (issue 23, "scale on the real engine"): a client load of N signed
//! requests/s (`--load-rate N`, [`crate::load::LoadOptions::at_rate`]), a book preloaded with
//! many live schedules before the measured window (`--preload N`, [`preload`]), and
//! `--measure-scale N`, which runs the empty ledger without load, the empty ledger at the client
//! rate and the ledger preloaded with N schedules at the client rate, all of the same length,
//! and compares their windows (the last two thirds of each run, [`super::WindowReport`]) as
//! `--measure-byzantine` does. The target: heights/s and the lateness p99s of the loaded book
//! within 20% of the empty ledger's at the same client rate. A measurement, not a test.
//!
//! The preload places each schedule with its own signed request (the book has no bulk request)
//! through [`preload_clients`] clients of at most [`Quota::max_schedules`](ccron::Quota) schedules
//! each (the book's default quota per owner: one client cannot hold 10^5 schedules), each
//! client posting its requests in order to one node, one at a time, again after a `429` (its
//! pool's cap). The schedules are the binary's preload payload (the `orders` ledger: an order
//! expiring in an hour, so none fires during the run). The ledger must have the room:
//! `--ledger orders:book-pages=N` in `ccron-malachite` (the default book, 40 pages, holds a few
//! hundred).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{LocalnetOptions, Report, WindowReport, run_localnet};
use crate::core::node_dir;
use crate::load::{
    DEFAULT_LOAD_RATE, LoadPayload, LoadStats, ResultsRead, client_key, client_seed, post,
    signed_request,
};

/// The localnet's scale options: the client rate and the preload.
#[derive(Clone)]
pub struct ScaleOptions {
    /// The load's requests/s (with a load; [`DEFAULT_LOAD_RATE`] by default).
    pub load_rate: u32,
    /// Schedules placed before the run's clock starts (`scale::preload`); 0: none.
    pub preload: u64,
    /// The payload of preload request k of a client (the binary's; needed when `preload` > 0).
    pub preload_payload: Option<LoadPayload>,
}

impl Default for ScaleOptions {
    fn default() -> Self {
        Self {
            load_rate: DEFAULT_LOAD_RATE,
            preload: 0,
            preload_payload: None,
        }
    }
}

impl std::fmt::Debug for ScaleOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScaleOptions")
            .field("load_rate", &self.load_rate)
            .field("preload", &self.preload)
            .field("preload_payload", &self.preload_payload.is_some())
            .finish()
    }
}

/// The most schedules one preload client places: the book's default quota per owner
/// ([`ccron::Quota::default`]); a client past it is refused by the book.
pub fn preload_per_client() -> u64 {
    ccron::Quota::default().max_schedules
}

/// How many preload clients place `schedules`: `ceil(schedules / preload_per_client())`.
pub fn preload_clients(schedules: u64) -> u64 {
    schedules.div_ceil(preload_per_client().max(1))
}

/// Preload client p's key seed: far from the load clients' ([`client_seed`] of `2^20 + p`), so
/// the two never share a key (nor a quota).
pub fn preload_seed(seed: u64, p: u64) -> u64 {
    client_seed(
        seed,
        usize::try_from((1u64 << 20).saturating_add(p)).unwrap_or(usize::MAX),
    )
}

/// The node preload client `p` posts to (all its requests, in order: one pool keeps them in
/// the client's order, within its execution window).
pub fn preload_node(p: u64, nodes: usize) -> usize {
    usize::try_from(p % u64::try_from(nodes.max(1)).unwrap_or(1)).unwrap_or(0)
}

/// Preload threads (each runs whole clients, one request at a time).
pub const PRELOAD_WORKERS: usize = 8;

/// Posts of one request tried before it is given up (a `429`: the node's pool is full for
/// the client or at all; an unreachable node), [`PRELOAD_RETRY_PAUSE`] apart.
pub const PRELOAD_ATTEMPTS: u32 = 600;

/// The pause before posting a refused request again.
pub const PRELOAD_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long the preload waits, after its last post, for the book to hold every schedule
/// without it growing (the chain still executing what the pools hold).
pub const PRELOAD_SETTLE: Duration = Duration::from_secs(30);

/// What the preload did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreloadReport {
    /// Schedules asked for.
    pub schedules: u64,
    /// Clients that placed them.
    pub clients: u64,
    /// Requests signed.
    pub requests: u64,
    /// Requests a node admitted (`202`).
    pub admitted: u64,
    /// Requests already pending or executed (`409`: a retry's earlier post got through).
    pub duplicate: u64,
    /// Requests refused otherwise, by status code and reason (not retried).
    pub refused: BTreeMap<String, u64>,
    /// Posts tried again after a `429` or an unreachable node.
    pub retries: u64,
    /// Requests given up after `PRELOAD_ATTEMPTS` posts.
    pub given_up: u64,
    /// The book's schedules (`ccron_schedules` on node 0's `/metrics`) when the preload ended.
    pub schedules_seen: Option<u64>,
    /// Whether the book reached `schedules`.
    pub reached: bool,
    /// How long the posts took (ms).
    pub post_ms: u64,
    /// How long the preload took in all, the wait for the book included (ms).
    pub took_ms: u64,
    /// The executed results of each client's last request, by their first words (`gone`: no
    /// longer kept by the node, `none`: no answer).
    pub last_results: BTreeMap<String, u64>,
}

/// The book's schedule count on node `i` (`ccron_schedules`, a replicated figure of its
/// `/metrics`).
pub fn book_schedules(home: &Path, i: usize) -> Option<u64> {
    let addr = std::fs::read_to_string(crate::core::http_addr_path(home, i)).ok()?;
    let (_, samples) = crate::metrics::replicated_samples(&super::judge::scrape(&addr).ok()?);
    samples.get("ccron_schedules")?.trim().parse().ok()
}

/// Places `opts.scale.preload` schedules (see the module documentation) and waits until node
/// 0's book holds them, or until it stops growing for [`PRELOAD_SETTLE`]. `None` without a
/// preload.
///
/// # Errors
/// No preload payload, no genesis, or a thread that could not be spawned.
// The preload is a test driver on the wall clock (not replicated state).
#[allow(clippy::disallowed_methods)]
pub fn preload(opts: &LocalnetOptions, home: &Path) -> std::io::Result<Option<PreloadReport>> {
    let count = opts.scale.preload;
    if count == 0 {
        return Ok(None);
    }
    let payload = opts.scale.preload_payload.clone().ok_or_else(|| {
        std::io::Error::other(format!(
            "--preload: the binary has no preload for ledger '{}'",
            opts.ledger.name
        ))
    })?;
    let domain = crate::core::read_genesis(home)
        .and_then(|g| {
            g.domain()
                .map_err(|e| crate::core::NodeError::Config(e.to_string()))
        })
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let start = std::time::Instant::now();
    let n = opts.nodes;
    // Every node serves before the first post (a node's address appears once it listens).
    while (0..n).any(|i| book_schedules(home, i).is_none()) && start.elapsed() < PRELOAD_SETTLE {
        std::thread::sleep(Duration::from_millis(200));
    }
    let clients = preload_clients(count);
    let per = preload_per_client();
    let next_client = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..PRELOAD_WORKERS)
        .map(|w| {
            let next_client = Arc::clone(&next_client);
            let payload = payload.clone();
            let domain = domain.clone();
            let home = home.to_path_buf();
            let seed = opts.seed;
            std::thread::Builder::new()
                .name(format!("preload-{w}"))
                .spawn(move || {
                    let mut r = PreloadReport::default();
                    loop {
                        let p = next_client.fetch_add(1, Ordering::Relaxed);
                        if p >= clients {
                            return r;
                        }
                        let share = per.min(count - p * per);
                        let key = client_key(preload_seed(seed, p));
                        let client = crate::request::client_id(&key.verifying_key().to_bytes());
                        let node = preload_node(p, n);
                        for k in 1..=share {
                            let req = signed_request(&domain, &key, k, payload(client, k)).encode();
                            r.requests += 1;
                            post_preload(&home, node, &req, &mut r);
                        }
                    }
                })
        })
        .collect::<Result<_, _>>()?;
    let mut report = PreloadReport {
        schedules: count,
        clients,
        ..PreloadReport::default()
    };
    for w in workers {
        let r = w.join().unwrap_or_default();
        report.requests += r.requests;
        report.admitted += r.admitted;
        report.duplicate += r.duplicate;
        report.retries += r.retries;
        report.given_up += r.given_up;
        for (k, v) in r.refused {
            *report.refused.entry(k).or_default() += v;
        }
    }
    report.post_ms = millis_u64(start.elapsed());
    // The book fills as the chain executes what the pools hold.
    let (mut seen, mut grew_at) = (None::<u64>, start.elapsed());
    loop {
        let now = book_schedules(home, 0);
        if now > seen {
            grew_at = start.elapsed();
            seen = now;
        }
        if seen.is_some_and(|s| s >= count) || start.elapsed() - grew_at > PRELOAD_SETTLE {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    report.schedules_seen = seen;
    report.reached = seen.is_some_and(|s| s >= count);
    report.last_results = last_results(home, n, opts.seed, count);
    report.took_ms = millis_u64(start.elapsed());
    tracing::info!(?report, "preload");
    Ok(Some(report))
}

/// Posts one preload request to `node` until it is admitted, refused for good, or
/// [`PRELOAD_ATTEMPTS`] posts failed.
fn post_preload(home: &Path, node: usize, req: &[u8], r: &mut PreloadReport) {
    for attempt in 0..PRELOAD_ATTEMPTS {
        if attempt > 0 {
            r.retries += 1;
            std::thread::sleep(PRELOAD_RETRY_PAUSE);
        }
        // Re-read every time: a restarted node listens on a new port.
        let addr = std::fs::read_to_string(crate::core::http_addr_path(home, node))
            .ok()
            .and_then(|a| a.trim().parse().ok());
        let Some(addr) = addr else { continue };
        match post(addr, "/v1/requests", req) {
            Ok((202, _)) => {
                r.admitted += 1;
                return;
            }
            Ok((409, _)) => {
                r.duplicate += 1;
                return;
            }
            Ok((429, _)) | Err(_) => {}
            Ok((code, text)) => {
                let reason = text.lines().last().unwrap_or("").trim();
                let reason: String = reason.chars().take(80).collect();
                *r.refused.entry(format!("{code} {reason}")).or_default() += 1;
                return;
            }
        }
    }
    r.given_up += 1;
}

/// The result of each preload client's last request on its node, counted by its first words.
fn last_results(home: &Path, n: usize, seed: u64, count: u64) -> BTreeMap<String, u64> {
    let per = preload_per_client();
    let mut out = BTreeMap::new();
    for p in 0..preload_clients(count) {
        let last = per.min(count - p * per);
        let key = client_key(preload_seed(seed, p));
        let client = crate::request::client_id(&key.verifying_key().to_bytes());
        let addr = std::fs::read_to_string(crate::core::http_addr_path(home, preload_node(p, n)))
            .ok()
            .and_then(|a| a.trim().parse().ok());
        let got =
            addr.and_then(|a| crate::load::get(a, &format!("/v1/requests/{client}/{last}")).ok());
        let word = match got {
            Some((200, body)) => serde_json::from_str::<crate::results::RequestResult>(&body)
                .map(|r| {
                    r.result
                        .split_whitespace()
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|_| "unreadable".into()),
            Some((202, _)) => "pending".into(),
            Some((410, _)) => "gone".into(),
            Some((code, _)) => format!("status {code}"),
            None => "none".into(),
        };
        *out.entry(word).or_default() += 1;
    }
    out
}

fn millis_u64(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The size in bytes of node `i`'s newest snapshot file (`None`: none written).
pub fn newest_snapshot_bytes(home: &Path, i: usize) -> Option<u64> {
    let h = super::judge::newest_snapshot(home, i)?;
    // The file name's height is zero-padded (`snapshot-00000000000000000275.bin`).
    std::fs::read_dir(node_dir(home, i).join("snapshots"))
        .ok()?
        .flatten()
        .find(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("snapshot-")?.strip_suffix(".bin"))
                .and_then(|n| n.parse::<u64>().ok())
                == Some(h)
        })?
        .metadata()
        .ok()
        .map(|m| m.len())
}

/// One run of `--measure-scale`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleRow {
    /// `idle` (no load), `rate` (the client rate, an empty book) or `loaded` (the client rate,
    /// the preloaded book).
    pub name: String,
    /// The client rate (requests/s; `None`: no load).
    pub load_rate: Option<u32>,
    /// Schedules preloaded.
    pub preload: u64,
    /// Its window (`None`: no honest node ran the whole time).
    pub window: Option<WindowReport>,
    /// Whether the honest nodes agreed and the run had no violation (the idle run's "nothing
    /// fired" and empty outbox are expected: nothing is scheduled).
    pub clean: bool,
    /// Its violations.
    pub violations: Vec<String>,
    /// Its report's home.
    pub home: String,
    /// Heights/s in the window against the `rate` run's.
    pub heights_ratio: Option<f64>,
    /// Heights/s in the window against the `idle` run's.
    pub heights_ratio_idle: Option<f64>,
    /// The window's agreed-minus-due p99 against the `rate` run's.
    pub agreed_p99_ratio: Option<f64>,
    /// The window's wall-minus-due p99 against the `rate` run's.
    pub wall_p99_ratio: Option<f64>,
    /// Whether heights/s is at least 80% of the `rate` run's and each p99 at most 120% of it.
    pub within_20pct: bool,
    /// Peak RSS per node (kB).
    pub peak_rss_kb: Vec<u64>,
    /// The newest snapshot's size per node (bytes).
    pub snapshot_bytes: Vec<Option<u64>>,
    /// Disk use per node (bytes).
    pub disk_bytes: Vec<u64>,
    /// The preload's figures.
    pub preload_report: Option<PreloadReport>,
    /// What the load clients did.
    pub load: Option<LoadStats>,
    /// The load's results read back.
    pub results: Option<ResultsRead>,
}

/// A `--measure-scale` measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleReport {
    /// Each run's length (ms).
    pub duration_ms: u64,
    /// Nodes.
    pub nodes: usize,
    /// The ledger.
    pub ledger: String,
    /// The client rate of the `rate` and `loaded` runs.
    pub load_rate: u32,
    /// The schedules preloaded in the `loaded` run.
    pub schedules: u64,
    /// `idle`, `rate`, `loaded`.
    pub rows: Vec<ScaleRow>,
}

fn scale_row(
    name: &str,
    o: &LocalnetOptions,
    r: &Report,
    idle: Option<&WindowReport>,
    rate: Option<&WindowReport>,
) -> ScaleRow {
    let (heights_ratio, agreed_p99_ratio, wall_p99_ratio) = super::measure::ratios(r.window, rate);
    let heights_ratio_idle = super::measure::ratios(r.window, idle).0;
    let within_20pct = heights_ratio.is_some_and(|x| x >= 0.8)
        && agreed_p99_ratio.is_some_and(|x| x <= 1.2)
        && wall_p99_ratio.is_some_and(|x| x <= 1.2);
    let home = Path::new(&r.home);
    // Without a load nothing is scheduled: nothing fires and the outbox stays empty.
    let expected = |v: &String| {
        o.load.is_none()
            && (v == "nothing fired"
                || v == "no outbox record was returned identically by f+1 nodes")
    };
    let violations: Vec<String> = r
        .violations
        .iter()
        .filter(|v| !expected(v))
        .cloned()
        .collect();
    ScaleRow {
        name: name.into(),
        load_rate: o.load.is_some().then_some(o.scale.load_rate),
        preload: o.scale.preload,
        window: r.window,
        clean: r.honest_agree && violations.is_empty(),
        violations,
        home: r.home.clone(),
        heights_ratio,
        heights_ratio_idle,
        agreed_p99_ratio,
        wall_p99_ratio,
        within_20pct,
        peak_rss_kb: r.nodes.iter().map(|n| n.peak_rss_kb).collect(),
        snapshot_bytes: (0..r.nodes.len())
            .map(|i| newest_snapshot_bytes(home, i))
            .collect(),
        disk_bytes: r.nodes.iter().map(|n| n.disk_bytes).collect(),
        preload_report: r.preload.clone(),
        load: r.load,
        results: r.results,
    }
}

/// Runs `idle` (no load, an empty book), `rate` (`opts.scale.load_rate` requests/s, an empty
/// book) and `loaded` (the same rate, `schedules` preloaded), each as long as `opts.duration`
/// and with no mid-run kill, each in its own home (`<home>/<name>`), and compares them.
///
/// # Errors
/// A localnet that could not start; a binary without a load or a preload for the ledger.
pub fn measure_scale(opts: &LocalnetOptions, schedules: u64) -> std::io::Result<ScaleReport> {
    if opts.load.is_none() || opts.scale.preload_payload.is_none() {
        return Err(std::io::Error::other(format!(
            "--measure-scale: the binary has no load or no preload for ledger '{}'",
            opts.ledger.name
        )));
    }
    let mut rows: Vec<ScaleRow> = Vec::new();
    let (mut idle, mut rate) = (None, None);
    for (name, loaded, preload) in [
        ("idle", false, 0),
        ("rate", true, 0),
        ("loaded", true, schedules),
    ] {
        let mut o = opts.clone();
        o.kill_restart = false;
        o.byzantine = None;
        o.byzantine_subset = None;
        if !loaded {
            o.load = None;
        }
        o.scale.preload = preload;
        o.home = opts.home.as_ref().map(|h| h.join(name));
        tracing::info!(run = name, "measure-scale: starting");
        let r = run_localnet(&o)?;
        match name {
            "idle" => idle = r.window,
            "rate" => rate = r.window,
            _ => {}
        }
        rows.push(scale_row(name, &o, &r, idle.as_ref(), rate.as_ref()));
    }
    Ok(ScaleReport {
        duration_ms: u64::try_from(opts.duration.as_millis()).unwrap_or(u64::MAX),
        nodes: opts.nodes,
        ledger: opts.ledger.name.clone(),
        load_rate: opts.scale.load_rate,
        schedules,
        rows,
    })
}

impl ScaleReport {
    /// The table (Markdown): per run, its load and preload, heights/s and heights in the
    /// window, the fires measured, the p99s, the ratios to the `rate` run (and heights/s to
    /// the `idle` run), the book reached, peak RSS and snapshot size (the largest over nodes).
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| run | rate (req/s) | preloaded | book at start | heights/s | heights | fires | agreed-due p99 (ms) | wall-due p99 (ms) | heights/s ratio | vs idle | agreed p99 ratio | wall p99 ratio | within 20% | peak RSS (MB) | snapshot (MB) | clean |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n",
        );
        let fmt = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.2}"));
        let mb = |x: u64| format!("{:.1}", x as f64 / 1_048_576.0);
        for r in &self.rows {
            let (hs, h, fires, ap, wp) = super::measure::window_cells(r.window);
            let book = r
                .preload_report
                .as_ref()
                .and_then(|p| p.schedules_seen)
                .map_or("0".to_string(), |s| s.to_string());
            let rss = r
                .peak_rss_kb
                .iter()
                .copied()
                .max()
                .unwrap_or(0)
                .saturating_mul(1024);
            let snap = r
                .snapshot_bytes
                .iter()
                .flatten()
                .copied()
                .max()
                .unwrap_or(0);
            out.push_str(&format!(
                "| `{}` | {} | {} | {book} | {hs} | {h} | {fires} | {ap} | {wp} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.name,
                r.load_rate.map_or("0".to_string(), |x| x.to_string()),
                r.preload,
                fmt(r.heights_ratio),
                fmt(r.heights_ratio_idle),
                fmt(r.agreed_p99_ratio),
                fmt(r.wall_p99_ratio),
                match r.name.as_str() {
                    "loaded" if r.within_20pct => "yes",
                    "loaded" => "**no**",
                    _ => "(baseline)",
                },
                mb(rss),
                mb(snap),
                if r.clean { "yes" } else { "**no**" },
            ));
        }
        out
    }

    /// Whether every run was clean.
    pub fn clean(&self) -> bool {
        self.rows.iter().all(|r| r.clean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_clients_hold_at_most_the_default_quota_each() {
        assert_eq!(preload_per_client(), 1_000);
        assert_eq!(preload_clients(0), 0);
        assert_eq!(preload_clients(1), 1);
        assert_eq!(preload_clients(1_000), 1);
        assert_eq!(preload_clients(1_001), 2);
        assert_eq!(preload_clients(100_000), 100);
        // Preload keys never collide with the load clients' (nor with each other).
        let load: Vec<u64> = (0..64).map(|c| client_seed(7, c)).collect();
        let pre: Vec<u64> = (0..100).map(|p| preload_seed(7, p)).collect();
        assert!(pre.iter().all(|s| !load.contains(s)));
        let mut distinct = pre.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), pre.len());
        // Clients spread over the nodes, each to one.
        assert_eq!(
            (0..8).map(|p| preload_node(p, 4)).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 0, 1, 2, 3]
        );
    }

    fn window(hps: f64, agreed: i64, wall: i64) -> WindowReport {
        WindowReport {
            node: 1,
            from_ms: 0,
            heights_per_sec: hps,
            heights: 10,
            longest_stall_ms: 100,
            lateness: super::super::Lateness {
                node: 1,
                fires: 5,
                agreed_p99_ms: agreed,
                wall_p99_ms: wall,
                ..Default::default()
            },
        }
    }

    fn report(w: Option<WindowReport>, violations: &[&str]) -> Report {
        serde_json::from_value(serde_json::json!({
            "engine": "e", "nodes": [], "honest_agree": true, "violations": violations,
            "restarts": 0, "pids": [], "max_height": 0, "heights_per_sec": 0.0, "home": "h",
            "window": w,
        }))
        .unwrap()
    }

    fn opts(load: bool) -> LocalnetOptions {
        LocalnetOptions {
            nodes: 4,
            duration: Duration::from_secs(60),
            ledger: crate::localnet::LedgerInit {
                name: "orders".into(),
                tick_periods: BTreeMap::new(),
                pages: (4096, 16),
                setup_digest: None,
                has_outbox: true,
                has_book: true,
            },
            load: load.then(|| Arc::new(|_, _| Vec::new()) as LoadPayload),
            engine: "e".into(),
            late_join: false,
            late_join_at_height: None,
            lying_time: false,
            omit_ticks: false,
            kill_restart: false,
            byzantine: None,
            faults: None,
            kill_all: false,
            net_faults: None,
            clock_faults: None,
            byzantine_subset: None,
            disk_faults: None,
            seed: 1,
            home: None,
            node_bin: "/nonexistent".into(),
            upgrade_binary: None,
            retain_blocks: None,
            wipe_restarted: false,
            scale: ScaleOptions::default(),
        }
    }

    #[test]
    fn the_loaded_run_is_judged_against_the_rate_run_at_20_percent() {
        let idle = window(10.0, 0, 0);
        let rate = window(8.0, 100, 200);
        let at = |w| {
            scale_row(
                "loaded",
                &opts(true),
                &report(Some(w), &[]),
                Some(&idle),
                Some(&rate),
            )
        };
        let ok = at(window(6.4, 120, 240));
        assert_eq!(ok.heights_ratio, Some(0.8));
        assert_eq!(ok.heights_ratio_idle, Some(0.64));
        assert_eq!(
            (ok.agreed_p99_ratio, ok.wall_p99_ratio),
            (Some(1.2), Some(1.2))
        );
        assert!(ok.within_20pct && ok.clean);
        assert!(
            !at(window(6.3, 100, 200)).within_20pct,
            "heights/s below 80%"
        );
        assert!(
            !at(window(8.0, 121, 200)).within_20pct,
            "agreed p99 above 120%"
        );
        assert!(
            !at(window(8.0, 100, 241)).within_20pct,
            "wall p99 above 120%"
        );
        // The idle run's "nothing fired" is expected; any other violation is not, nor is it
        // under load.
        let quiet = report(
            Some(idle),
            &[
                "nothing fired",
                "no outbox record was returned identically by f+1 nodes",
            ],
        );
        assert!(scale_row("idle", &opts(false), &quiet, None, None).clean);
        assert!(!scale_row("rate", &opts(true), &quiet, Some(&idle), None).clean);
        let bad = report(
            Some(idle),
            &["nothing fired", "node 1 exited before the end"],
        );
        assert!(!scale_row("idle", &opts(false), &bad, None, None).clean);
    }
}
