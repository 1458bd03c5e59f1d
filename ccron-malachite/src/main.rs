//! `ccron-malachite`: a validator node (`node`) and a local multi-process network (`localnet`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ccron_malachite::localnet::{LocalnetOptions, init_home, run_localnet};
use ccron_malachite::node::{NodeOptions, run_node};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ccron-malachite", about = "ccron on the Malachite BFT engine")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write keys and genesis for N validators into a config directory.
    Init {
        /// The config directory.
        #[arg(long)]
        home: PathBuf,
        /// Number of validators.
        #[arg(long, default_value_t = 4)]
        nodes: usize,
        /// The ledger (`demo` or `orders`).
        #[arg(long, default_value = "demo")]
        ledger: String,
        /// Key seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Run one validator from a config directory.
    Node {
        /// The config directory (genesis.json, node-i/secret.key).
        #[arg(long)]
        home: PathBuf,
        /// This validator's index.
        #[arg(long)]
        index: usize,
        /// Propose lying agreed times (a Byzantine proposer, for tests).
        #[arg(long)]
        lying_time: bool,
        /// Propose blocks without ticks (a Byzantine proposer starving ticks, for tests).
        #[arg(long)]
        omit_ticks: bool,
        /// Client endpoint listen address (port 0: any free port; the bound address is written
        /// to `node-I/http.addr`).
        #[arg(long, default_value = "127.0.0.1:0")]
        http: std::net::SocketAddr,
        /// Write a durable snapshot of the state every N heights (and at a clean stop); a
        /// restart re-executes only the blocks above the newest one. 0: only at a clean stop.
        #[arg(long, default_value_t = ccron_malachite::snapshot::DEFAULT_SNAPSHOT_EVERY)]
        snapshot_every: u64,
    },
    /// Start N node processes, kill and restart one, and write a JSON report.
    Localnet {
        /// Number of validators (at least 4).
        #[arg(long, default_value_t = 4)]
        nodes: usize,
        /// Run time, e.g. `60s`, `90s`, `2m`.
        #[arg(long, default_value = "60s")]
        duration: String,
        /// The ledger (`demo` or `orders`).
        #[arg(long, default_value = "demo")]
        ledger: String,
        /// Start the last node late; it catches up through the engine's sync.
        #[arg(long)]
        late_join: bool,
        /// Node 0 proposes lying agreed times.
        #[arg(long)]
        lying_time: bool,
        /// Node 0 proposes blocks without ticks (the other proposers carry its ticks).
        #[arg(long)]
        omit_ticks: bool,
        /// Do not SIGKILL and restart a node mid-run.
        #[arg(long)]
        no_kill: bool,
        /// Key seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Config directory (a fresh temporary directory by default).
        #[arg(long)]
        home: Option<PathBuf>,
        /// Write the JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Some(v) = s.strip_suffix("ms") {
        return v.parse().ok().map(Duration::from_millis);
    }
    if let Some(v) = s.strip_suffix('s') {
        return v.parse().ok().map(Duration::from_secs);
    }
    if let Some(v) = s.strip_suffix('m') {
        return v
            .parse::<u64>()
            .ok()
            .map(|m| Duration::from_secs(m.saturating_mul(60)));
    }
    s.parse().ok().map(Duration::from_secs)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Init {
            home,
            nodes,
            ledger,
            seed,
        } => match init_home(&home, nodes, seed, &ledger) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("init: {e}");
                ExitCode::from(2)
            }
        },
        Cmd::Node {
            home,
            index,
            lying_time,
            omit_ticks,
            http,
            snapshot_every,
        } => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            match rt.block_on(run_node(NodeOptions {
                home,
                index,
                lying_time,
                omit_ticks,
                http,
                snapshot_every,
            })) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "node stops");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::Localnet {
            nodes,
            duration,
            ledger,
            late_join,
            lying_time,
            omit_ticks,
            no_kill,
            seed,
            home,
            json,
        } => {
            let Some(duration) = parse_duration(&duration) else {
                eprintln!("localnet: bad --duration '{duration}'");
                return ExitCode::from(2);
            };
            if nodes < 4 {
                eprintln!("localnet: at least 4 nodes (3f+1 with f >= 1)");
                return ExitCode::from(2);
            }
            if ledger != "demo" && ledger != "orders" {
                eprintln!("localnet: ledger '{ledger}' is not available (demo, orders)");
                return ExitCode::from(2);
            }
            let node_bin = match std::env::current_exe() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("localnet: {e}");
                    return ExitCode::from(2);
                }
            };
            let opts = LocalnetOptions {
                nodes,
                duration,
                ledger,
                late_join,
                lying_time,
                omit_ticks,
                kill_restart: !no_kill,
                seed,
                home,
                node_bin,
            };
            let report = match run_localnet(&opts) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("localnet: {e}");
                    return ExitCode::from(2);
                }
            };
            let text = serde_json::to_string_pretty(&report).unwrap_or_default();
            if let Some(path) = json
                && let Err(e) = std::fs::write(&path, &text)
            {
                eprintln!("localnet: writing {}: {e}", path.display());
                return ExitCode::from(2);
            }
            for n in &report.nodes {
                println!(
                    "node {} pid {} honest {} height {} ticks {} fires {} rejected {} synced {} digest {}",
                    n.id,
                    n.pid,
                    n.honest,
                    n.last_executed_seq,
                    n.ticks_executed,
                    n.fires,
                    n.rejected_proposals,
                    n.synced_heights,
                    n.state_digest.get(..16).unwrap_or("")
                );
            }
            println!(
                "honest_agree {} restarts {} max_height {} ({:.1} heights/s) violations {:?}",
                report.honest_agree,
                report.restarts,
                report.max_height,
                report.heights_per_sec,
                report.violations
            );
            if report.honest_agree && report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}
