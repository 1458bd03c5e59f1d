//! `ccron relay`: the ready consumer of a ledger's outbox as a process an operator runs
//! against the nodes of the real engine.
//!
//! ```text
//! ccron relay --nodes URL,... --key FILE --workers FILE --chain-id ID --dir DIR
//!             [--key-id NAME] [--quorum N] [--resend-after-ms MS] [--timeout-ms MS]
//!             [--keep-records] [--until-progress N] [--max-run-ms MS] [--json]
//!             [--metrics-listen ADDR]
//! ```
//!
//! It is [`ccron_http::Relay`] over [`ccron_node::submit::NodeSubmit`]: it reads the committed
//! outbox from every node's `GET /ccron/v1/outbox` and believes a record only when f+1 nodes
//! return it identically; delivers each record to the worker pool (every delivery MACed with
//! the worker's secret, every response's MAC and answer signature checked); journals each
//! result durably in `--dir` and submits it back as a request signed with `--key` (the ledger's
//! `Policy::outbox_consumer`) to every node's `POST /v1/requests`, re-sent under the same
//! number until f+1 nodes show it applied; then reports its progress so the ledger trims its
//! outbox (never past a record whose result is pending). Request numbers are reserved durably
//! in `--dir` and start above the wall clock in microseconds, so a restarted relay never
//! reuses one. Stopping it (any signal) loses nothing: a restart resumes from `--dir`.
//!
//! The workers file holds one worker per line, `URL SECRET_HEX ANSWER_KEY_HEX` (the delivery
//! secret shared with that worker, 16 to 64 bytes, and the worker's answer key as registered
//! in the ledger); `#` starts a comment. Secrets stay off the command line.
//!
//! With `--metrics-listen ADDR` it serves `GET /metrics` there (Prometheus text, behind the
//! bounded server): the dispatcher's series (`ccron_dispatch_*`: attempts by outcome, records
//! done and given up, workers up, the outbox behind the consumer) and the relay's
//! (`ccron_relay_*`: progress and reported progress, results pending, sent and re-sent, submit
//! failures by kind, failed quorum reads), as of its last round.
//!
//! Answers longer than [`ccron_node::submit::MAX_NODE_ANSWER_BYTES`] would make a result no
//! node takes: the relay gives such a record up as a dead letter instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ccron::outbox::{ConsumerConfig, WorkerKey};
use ccron_http::serve_metrics;
use ccron_http::{
    DeliverySecret, DispatcherConfig, ReadClientConfig, Relay, RelayConfig, RelayStats,
    ServerConfig, WorkerEndpoint,
};
use ccron_node::submit::{
    MAX_NODE_ANSWER_BYTES, NodeApi, NodeApiConfig, NodeSubmit, NodeSubmitConfig, NumberFile,
};
use clap::Args;

use crate::{CliError, Env};

/// The most workers a workers file names.
pub const MAX_WORKERS: usize = 256;

/// The largest workers file read.
pub const MAX_WORKERS_FILE_BYTES: u64 = 64 * 1024;

/// `ccron relay`'s options.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    /// The nodes' HTTP API base URLs, comma-separated (their outbox read endpoints and their
    /// request endpoints).
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    /// Identical answers needed (default: f+1 for n = 3f+1 nodes given).
    #[arg(long)]
    pub quorum: Option<usize>,
    /// The outbox consumer's ed25519 secret key: 64 hex characters (`ccron key new`).
    #[arg(long)]
    pub key: PathBuf,
    /// The workers file: one `URL SECRET_HEX ANSWER_KEY_HEX` per line.
    #[arg(long)]
    pub workers: PathBuf,
    /// The chain id the ledger's policy names (deliveries are bound to it).
    #[arg(long)]
    pub chain_id: String,
    /// The relay's key id, the name workers know its secrets by.
    #[arg(long, default_value = "ccron-relay")]
    pub key_id: String,
    /// The relay's directory: progress, dead letters, the results journal, request numbers.
    #[arg(long)]
    pub dir: PathBuf,
    /// A result not seen applied by f+1 nodes after this long is sent again, ms.
    #[arg(long, default_value_t = 2_000)]
    pub resend_after_ms: u64,
    /// Time allowed for one node's or worker's answer, ms.
    #[arg(long, default_value_t = 2_000)]
    pub timeout_ms: u64,
    /// Do not report progress (the ledger keeps every record; for audits and tests).
    #[arg(long)]
    pub keep_records: bool,
    /// Exit once this many records are done, their results applied (and progress reported).
    #[arg(long)]
    pub until_progress: Option<u64>,
    /// Exit after this long, ms (default: run until stopped).
    #[arg(long)]
    pub max_run_ms: Option<u64>,
    /// Print the final counters as JSON.
    #[arg(long)]
    pub json: bool,
    /// Serve `GET /metrics` (Prometheus text) on this address, e.g. `127.0.0.1:9464`.
    #[arg(long)]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Parses a workers file's text (see the module documentation).
///
/// # Errors
/// [`CliError::Args`] naming the line.
pub fn parse_workers(text: &str) -> Result<Vec<WorkerEndpoint>, CliError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| CliError::Args(format!("workers file line {}: {what}", i + 1));
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [url, secret, key] = fields.as_slice() else {
            return Err(bad("expected URL SECRET_HEX ANSWER_KEY_HEX"));
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad("the URL must start with http:// or https://"));
        }
        let secret = unhex(secret).ok_or_else(|| bad("the secret is not hex"))?;
        let secret = DeliverySecret::new(secret).map_err(|e| bad(&e.to_string()))?;
        let key: WorkerKey = key.parse().map_err(|e| bad(&format!("answer key: {e}")))?;
        out.push(WorkerEndpoint::new(url.trim_end_matches('/'), secret, key));
        if out.len() > MAX_WORKERS {
            return Err(bad(&format!("more than {MAX_WORKERS} workers")));
        }
    }
    if out.is_empty() {
        return Err(CliError::Args("the workers file names no worker".into()));
    }
    Ok(out)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn read_workers(path: &Path) -> Result<Vec<WorkerEndpoint>, CliError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| CliError::Args(format!("workers file {}: {e}", path.display())))?;
    if meta.len() > MAX_WORKERS_FILE_BYTES {
        return Err(CliError::Args(format!(
            "workers file {}: over {MAX_WORKERS_FILE_BYTES} bytes",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Args(format!("workers file {}: {e}", path.display())))?;
    parse_workers(&text)
}

/// What a relay run did (the final counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayRun {
    /// The relay's counters.
    pub relay: RelayStats,
    /// The node submitter's counters.
    pub submit: ccron_node::submit::SubmitCounters,
    /// Failed endpoint reads (retried, never fatal).
    pub read_failures: u64,
    /// Whether `--until-progress` was reached.
    pub reached: bool,
}

/// Opens the relay of `args` (its files, its clients).
///
/// # Errors
/// [`CliError::Args`] for the arguments and the workers file, [`CliError::KeyFile`] for the
/// key, [`CliError::RelayState`] (exit code 8) when the relay directory or a file in it
/// cannot be created, opened or read back (a damaged request-number reservation, progress
/// file or results journal is refused, never reset).
pub fn open(args: &RelayArgs, env: Env) -> Result<Relay<NodeSubmit>, CliError> {
    let key = crate::submit::read_key(&args.key)?;
    let workers = read_workers(&args.workers)?;
    if args.nodes.is_empty() {
        return Err(CliError::Args("--nodes names no node".into()));
    }
    let quorum = args
        .quorum
        .unwrap_or_else(|| ccron_http::ScheduleReadConfig::quorum_of(args.nodes.len()));
    if quorum == 0 || quorum > args.nodes.len() {
        return Err(CliError::Args(format!(
            "--quorum {quorum} for {} nodes",
            args.nodes.len()
        )));
    }
    let mut read = ReadClientConfig::new(args.nodes.clone(), quorum);
    read.timeout_ms = args.timeout_ms;
    let mut dispatcher = DispatcherConfig::new(args.chain_id.as_bytes(), &args.key_id, workers);
    dispatcher.max_answer_bytes = dispatcher.max_answer_bytes.min(MAX_NODE_ANSWER_BYTES);
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| CliError::RelayState(format!("directory {}: {e}", args.dir.display())))?;
    let numbers = NumberFile::open(args.dir.join("request-numbers"))
        .map_err(|e| CliError::RelayState(e.to_string()))?;
    let mut api = NodeApiConfig::new(args.nodes.clone());
    api.quorum = quorum;
    api.timeout_ms = args.timeout_ms;
    // Above the ledger's floor for a client it may have evicted, and above every number a
    // previous run reserved.
    let first = env.now_ms.saturating_mul(1_000);
    let submit = NodeSubmit::new(NodeApi::new(api), key, first, NodeSubmitConfig::default())
        .with_number_file(numbers);
    let cfg = RelayConfig {
        read,
        dispatcher,
        consumer: ConsumerConfig::default(),
        dir: args.dir.clone(),
        resend_after_ms: i64::try_from(args.resend_after_ms).unwrap_or(i64::MAX),
        step_wait: Duration::from_millis(50),
        report_progress: !args.keep_records,
    };
    let start = tokio::time::Instant::now();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));
    Relay::open(cfg, clock, submit)
        .map_err(|e| CliError::RelayState(format!("{}: {e}", args.dir.display())))
}

/// Runs the relay of `args` until `--until-progress` or `--max-run-ms` (or forever).
///
/// # Errors
/// As [`open`]; [`CliError::RelayState`] when its files fail while it runs (nothing is lost:
/// a restart resumes from the directory).
pub async fn run_relay(args: &RelayArgs, env: Env) -> Result<RelayRun, CliError> {
    let mut relay = open(args, env)?;
    // The endpoint stops with the run (the sender dropped on every return).
    let (_stop_metrics, stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(addr) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| CliError::Args(format!("--metrics-listen {addr}: {e}")))?;
        let metrics = relay.metrics();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) =
                serve_metrics(listener, metrics, ServerConfig::default(), shutdown).await
            {
                eprintln!("ccron relay: the metrics endpoint stopped: {e}");
            }
        });
    }
    let start = tokio::time::Instant::now();
    let limit = args.max_run_ms.map(Duration::from_millis);
    let mut idle = Duration::from_millis(5);
    loop {
        let before = relay.stats();
        let stats = relay
            .step()
            .await
            .map_err(|e| CliError::RelayState(format!("{}: {e}", args.dir.display())))?;
        let reached = args.until_progress.is_some_and(|n| {
            stats.progress >= n
                && stats.pending_results == 0
                && (args.keep_records || stats.reported_progress >= n)
        });
        if reached || limit.is_some_and(|l| start.elapsed() >= l) {
            return Ok(RelayRun {
                relay: stats,
                submit: relay.submitter().counters(),
                read_failures: relay.read_failures(),
                reached,
            });
        }
        // Nothing moved: back off up to 200 ms between rounds (the reads are the cost).
        if stats.progress == before.progress && stats.pending_results == before.pending_results {
            tokio::time::sleep(idle).await;
            idle = (idle * 2).min(Duration::from_millis(200));
        } else {
            idle = Duration::from_millis(5);
        }
    }
}

/// `ccron relay`: runs it and renders the final counters.
///
/// # Errors
/// As [`run_relay`]; [`CliError::Timeout`] when `--until-progress` was not reached within
/// `--max-run-ms`.
pub async fn relay(args: RelayArgs, env: Env) -> Result<String, CliError> {
    let run = run_relay(&args, env).await?;
    let text = render(&run, args.json);
    if args.until_progress.is_some() && !run.reached {
        return Err(CliError::Timeout(format!(
            "progress {} not reached: {text}",
            args.until_progress.unwrap_or(0)
        )));
    }
    Ok(text)
}

fn render(run: &RelayRun, json: bool) -> String {
    let r = &run.relay;
    let s = &run.submit;
    if json {
        serde_json::json!({
            "progress": r.progress,
            "reported_progress": r.reported_progress,
            "pending_results": r.pending_results,
            "results_sent": r.results_sent,
            "resent": r.resent,
            "submit_failures": r.submit_failures,
            "submit_paced": r.submit_paced,
            "submit_refused": r.submit_refused,
            "read_failures": run.read_failures,
            "requests": {
                "signed": s.signed,
                "resent": s.resent,
                "not_sent": s.not_sent,
                "window_full": s.window_full,
                "refused": s.refused,
                "stale": s.stale,
                "executed_ok": s.executed_ok,
                "executed_err": s.executed_err,
                "forgotten": s.forgotten,
                "conflicts": s.conflicts,
            },
        })
        .to_string()
    } else {
        format!(
            "progress {} (reported {}), {} results pending; results sent {}, re-sent {}, \
             submit failures {} (paced {}, refused {}); requests signed {}, executed ok {}, \
             refused by the ledger {}; read failures {}",
            r.progress,
            r.reported_progress,
            r.pending_results,
            r.results_sent,
            r.resent,
            r.submit_failures,
            r.submit_paced,
            r.submit_refused,
            s.signed,
            s.executed_ok,
            s.executed_err,
            run.read_failures
        )
    }
}
