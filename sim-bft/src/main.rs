//! The `sim-bft` command line: run a simulated cluster from a seed and report on it.
//!
//! `sim-bft` alone runs a short demo of a 4-replica cluster and prints a summary. `sim-bft run`
//! takes the knobs documented in `docs/simulator.md`; `--json PATH` writes the report, and
//! `--seeds A..B` runs a campaign. The exit status is 0 when every checker held, 1 when one failed,
//! 2 on a usage or configuration error.

use std::ops::Range;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use sim_bft::ledgers::demo::{DemoTables, demo_ledger};
use sim_bft::report::Report;
use sim_bft::sim::cluster::ClusterHarness;
use sim_bft::sim::toy::ToyHarness;
use sim_bft::sim::{
    ByzantineKind, ConfigError, FaultConfig, Harness, PartitionKind, SimConfig, Simulator,
    TimeServiceMode, parse_duration_ms,
};

/// Simulated PBFT cluster running ccron tables, with seeded faults.
#[derive(Debug, Parser)]
#[command(name = "sim-bft", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a simulated cluster (safety phase under faults, then a liveness phase).
    Run(RunArgs),
    /// Print the next fire instants of a cron expression (RFC 3339 UTC, one per line), computed
    /// by the code the replicas run, with zone rules from the tz database compiled in.
    Preview(PreviewArgs),
}

/// Arguments of `sim-bft preview`.
#[derive(Debug, Clone, Args)]
struct PreviewArgs {
    /// The cron expression (5 fields, or 6 with seconds first; quote it).
    expression: String,
    /// IANA time zone the expression's wall times are read in (default UTC).
    #[arg(long)]
    tz: Option<String>,
    /// Instants strictly after this RFC 3339 instant (default: now, from this machine's clock).
    #[arg(long)]
    from: Option<String>,
    /// How many instants to print (at most 1000).
    #[arg(long, default_value_t = 5)]
    count: usize,
}

/// `sim-bft preview`: exit 0 with the instants on stdout, or 2 with a one-line error on stderr.
fn preview(args: &PreviewArgs) -> ExitCode {
    let from = match &args.from {
        Some(f) => f.clone(),
        None => ccron::cron::format_rfc3339_ms(now_ms()),
    };
    match ccron::cron::preview(&args.expression, args.tz.as_deref(), &from, args.count) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sim-bft preview: {e}");
            ExitCode::from(2)
        }
    }
}

/// The real clock, for `preview`'s default `--from` only: the CLI is a driver, replicas never
/// read a clock.
#[allow(clippy::disallowed_methods)]
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What the replicas run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LedgerKind {
    /// The demo key-value ledger with ccron tables: prune old entries (component 1) and call a
    /// contract (component 2), both periodic actions on agreed time.
    Demo,
    /// The plain key-value ledger; ticks only counted in the reserved pages.
    Kv,
    /// Order expiries as schedules held in replicated data (component 1): a client put places
    /// an order and upserts its delayed expiry task by key (2 s of agreed time later); ticks run
    /// the due expiries (`sim_bft::ledgers::orders`).
    Orders,
}

/// Which replicas send the ticks of a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SendersKind {
    /// F+1 replicas per period, rotating (ccron's improvement).
    Rotating,
    /// Every replica (the reference design).
    All,
}

/// Which node implementation the simulator drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum NodeKind {
    /// The PBFT replica.
    Replica,
    /// The toy leader-based node (tests the simulator itself; not Byzantine-tolerant).
    Toy,
}

#[derive(Debug, Clone, Args)]
struct RunArgs {
    /// Number of replicas n (f = (n-1)/3).
    #[arg(long, default_value_t = 4)]
    replicas: u32,
    /// The seed every random choice derives from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run every seed of a range `A..B` (B exclusive) instead of `--seed`.
    #[arg(long, value_parser = parse_range)]
    seeds: Option<Range<u64>>,
    /// Simulated length of the safety phase (faults active), e.g. 60s, 10m.
    #[arg(long, default_value = "60s", value_parser = parse_duration_arg)]
    duration: u64,
    /// Bound on the liveness phase after the faults heal.
    #[arg(long, default_value = "30s", value_parser = parse_duration_arg)]
    liveness: u64,
    /// Internal tick period per component (0 disables ticks).
    #[arg(long, default_value = "1s", value_parser = parse_duration_arg)]
    tick_period: u64,
    /// Replicas' tick timers start within this spread of each other (default: a whole period;
    /// 0: every replica ticks at the same instants).
    #[arg(long, value_parser = parse_duration_arg)]
    tick_spread: Option<u64>,
    /// Components that tick, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    components: Vec<u32>,
    /// Number of user clients.
    #[arg(long, default_value_t = 2)]
    clients: u32,
    /// Interval between two requests of one client (0 disables client requests).
    #[arg(long, default_value = "100ms", value_parser = parse_duration_arg)]
    request_interval: u64,
    /// Time service: off, reference or robust.
    #[arg(long, default_value = "robust", value_parser = parse_enum::<TimeServiceMode>)]
    time_service: TimeServiceMode,
    /// Number of crashes (each followed by a restart from persisted storage).
    #[arg(long, default_value_t = 0)]
    crash: u32,
    /// Probability that an honest replica crashes right after syncing a new view (joining a
    /// view change or entering a view), then restarts from its disk.
    #[arg(long, default_value_t = 0.0)]
    crash_at_view_change: f64,
    /// Number of Byzantine replicas (at most f).
    #[arg(long, default_value_t = 0)]
    byzantine: u32,
    /// Exactly these replicas are Byzantine (comma-separated; overrides the seeded choice).
    #[arg(long, value_delimiter = ',')]
    byzantine_ids: Vec<u32>,
    /// What Byzantine replicas do.
    #[arg(long, default_value = "silent", value_parser = parse_enum::<ByzantineKind>)]
    byzantine_kind: ByzantineKind,
    /// Probability that a message is lost.
    #[arg(long, default_value_t = 0.0)]
    drop_rate: f64,
    /// Probability that a message is delivered twice.
    #[arg(long, default_value_t = 0.0)]
    duplicate_rate: f64,
    /// Probability that a message is delayed extra (reordered).
    #[arg(long, default_value_t = 0.0)]
    reorder_rate: f64,
    /// Largest one-way network delay.
    #[arg(long, default_value = "5ms", value_parser = parse_duration_arg)]
    max_delay: u64,
    /// Partitions: none, symmetric, one-way, isolate.
    #[arg(long, default_value = "none", value_parser = parse_enum::<PartitionKind>)]
    partition: PartitionKind,
    /// Largest clock offset of a replica.
    #[arg(long, default_value = "0ms", value_parser = parse_duration_arg)]
    clock_skew: u64,
    /// Largest clock drift, parts per million.
    #[arg(long, default_value_t = 0)]
    drift_ppm: i64,
    /// Number of clock jumps.
    #[arg(long, default_value_t = 0)]
    clock_jumps: u32,
    /// Largest clock jump.
    #[arg(long, default_value = "0ms", value_parser = parse_duration_arg)]
    clock_jump: u64,
    /// Write the JSON report here (with `--seeds`: one JSON array of reports).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Which node implementation to drive.
    #[arg(long, value_enum, default_value_t = NodeKind::Replica)]
    node: NodeKind,
    /// What the replicas run (the demo ledger's tables use components 1 and 2).
    #[arg(long, value_enum, default_value_t = LedgerKind::Kv)]
    ledger: LedgerKind,
    /// Which replicas send each period's ticks.
    #[arg(long, value_enum, default_value_t = SendersKind::Rotating)]
    tick_senders: SendersKind,
    /// Print only the final verdict.
    #[arg(long, short)]
    quiet: bool,
}

fn parse_duration_arg(s: &str) -> Result<u64, ConfigError> {
    parse_duration_ms(s)
}

fn parse_enum<T: std::str::FromStr<Err = ConfigError>>(s: &str) -> Result<T, ConfigError> {
    s.parse()
}

fn parse_range(s: &str) -> Result<Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected A..B, got {s:?}"))?;
    let a: u64 = a.trim().parse().map_err(|e| format!("{a:?}: {e}"))?;
    let b: u64 = b.trim().parse().map_err(|e| format!("{b:?}: {e}"))?;
    if b <= a {
        return Err(format!("empty seed range {s:?}"));
    }
    Ok(a..b)
}

impl RunArgs {
    fn config(&self, seed: u64) -> SimConfig {
        SimConfig {
            seed,
            replicas: self.replicas,
            duration_ms: self.duration,
            liveness_ms: self.liveness,
            tick_period_ms: self.tick_period,
            components: self.components.clone(),
            rotate_ticks: self.tick_senders == SendersKind::Rotating,
            tick_spread_ms: self.tick_spread,
            clients: self.clients,
            request_interval_ms: self.request_interval,
            time_service: self.time_service,
            check_time_bounds: self.time_service == TimeServiceMode::Robust,
            faults: FaultConfig {
                drop_rate: self.drop_rate,
                duplicate_rate: self.duplicate_rate,
                reorder_rate: self.reorder_rate,
                max_delay_ms: self.max_delay.max(FaultConfig::default().min_delay_ms),
                partition: self.partition,
                crashes: self.crash,
                byzantine: self.byzantine,
                byzantine_kind: self.byzantine_kind,
                pinned_byzantine: self.byzantine_ids.clone(),
                max_clock_skew_ms: self.clock_skew.min(i64::MAX as u64) as i64,
                max_drift_ppm: self.drift_ppm,
                clock_jumps: self.clock_jumps,
                max_clock_jump_ms: self.clock_jump.min(i64::MAX as u64) as i64,
                crash_at_view_change: self.crash_at_view_change,
                ..FaultConfig::default()
            },
            ..SimConfig::default()
        }
    }

    /// The demo `sim-bft` runs without arguments.
    fn demo() -> Self {
        let mut a = match Cli::try_parse_from(["sim-bft", "run"]) {
            Ok(Cli {
                command: Some(Command::Run(a)),
            }) => a,
            // The literal arguments above always parse; fall back to running nothing odd.
            _ => unreachable_demo(),
        };
        a.duration = 20_000;
        a.liveness = 20_000;
        a.crash = 1;
        a.drop_rate = 0.02;
        a.reorder_rate = 0.05;
        a.clock_skew = 200;
        a.ledger = LedgerKind::Demo;
        a.components = DemoTables::default().components();
        a
    }
}

fn unreachable_demo() -> RunArgs {
    // Only reachable if the argument definitions above stop accepting `run`: say so loudly.
    eprintln!("sim-bft: internal error: default arguments do not parse");
    std::process::exit(2)
}

fn boot_toy(cfg: &SimConfig) -> ToyHarness {
    ToyHarness { n: cfg.replicas }
}

fn simulate<H: Harness>(
    cfg: SimConfig,
    harness: H,
    show_progress: bool,
    print_params: bool,
) -> Result<Report, ConfigError> {
    let sim = Simulator::new(cfg, harness)?;
    if print_params {
        println!("{}", sim_bft::sim::replay_command(sim.config()));
        print!("{}", sim.params());
    }
    let total = sim.config().duration_ms + sim.config().liveness_ms;
    let bar = if show_progress {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} simulated {pos}/{len} ms [{bar:40}] {elapsed_precise} {msg}",
        ) {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let outcome = sim.run_with(|now, _| bar.set_position(now));
    bar.finish_and_clear();
    Ok(Report::from_outcome(&outcome))
}

fn run_seed(args: &RunArgs, seed: u64, single: bool) -> Result<Report, ConfigError> {
    let cfg = args.config(seed);
    let verbose = single && !args.quiet;
    let mut report = match args.node {
        NodeKind::Toy => simulate(cfg.clone(), boot_toy(&cfg), single, verbose)?,
        NodeKind::Replica => sim_replica(cfg, args.ledger, single, verbose)?,
    };
    if args.node == NodeKind::Toy {
        report.replay.push_str(" --node toy");
    }
    if args.ledger == LedgerKind::Demo {
        report.replay.push_str(" --ledger demo");
    }
    if args.ledger == LedgerKind::Orders {
        report.replay.push_str(" --ledger orders");
    }
    if args.tick_senders == SendersKind::All {
        report.replay.push_str(" --tick-senders all");
    }
    Ok(report)
}

fn sim_replica(
    cfg: SimConfig,
    ledger: LedgerKind,
    progress: bool,
    verbose: bool,
) -> Result<Report, ConfigError> {
    let mut h = ClusterHarness::new(&cfg);
    if ledger == LedgerKind::Demo {
        let tables = DemoTables::default();
        // Fail early (exit 2) rather than boot replicas without their tables.
        demo_ledger(&tables).map_err(|e| ConfigError::Node(e.to_string()))?;
        h = h.with_app(move |id| match demo_ledger(&tables) {
            Ok(l) => Box::new(l),
            Err(e) => {
                // Checked above; a replica without tables rejects every tick (counted).
                tracing::error!(id, error = %e, "demo tables");
                Box::new(sim_bft::ledgers::KvLedger::new())
            }
        });
    }
    if ledger == LedgerKind::Orders {
        let app = sim_bft::ledgers::orders::SchedAppConfig {
            puts_as_orders: true,
            expiry_ms: 2_000,
            ..Default::default()
        };
        h = h.with_app(move |_| Box::new(sim_bft::ledgers::orders::ScheduledLedger::new(app)));
    }
    h.validate()?;
    simulate(cfg, h, progress, verbose)
}

fn write_json<T: serde::Serialize>(path: &std::path::Path, value: &T) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

fn run(args: &RunArgs) -> ExitCode {
    match &args.seeds {
        None => {
            let report = match run_seed(args, args.seed, true) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("sim-bft: {e}");
                    return ExitCode::from(2);
                }
            };
            if args.quiet {
                println!(
                    "seed {}: {} (trace {})",
                    report.seed,
                    if report.ok() { "ok" } else { "FAILED" },
                    report.trace_hash
                );
            } else {
                print!("{}", report.summary());
            }
            if let Some(p) = &args.json
                && let Err(e) = write_json(p, &report)
            {
                eprintln!("sim-bft: cannot write report: {e}");
                return ExitCode::from(2);
            }
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                eprintln!("sim-bft: checker failed; replay with: {}", report.replay);
                ExitCode::from(1)
            }
        }
        Some(range) => {
            let bar = ProgressBar::with_draw_target(
                Some(range.end - range.start),
                ProgressDrawTarget::stderr(),
            );
            let mut reports = Vec::new();
            let mut failed = 0u64;
            for seed in range.clone() {
                let report = match run_seed(args, seed, false) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("sim-bft: {e}");
                        return ExitCode::from(2);
                    }
                };
                if !report.ok() {
                    failed += 1;
                    bar.suspend(|| {
                        println!("seed {seed}: FAILED");
                        for v in &report.violations {
                            println!("    {v}");
                        }
                        println!("    replay with: {}", report.replay);
                    });
                } else if !args.quiet {
                    bar.suspend(|| println!("seed {seed}: ok (trace {})", report.trace_hash));
                }
                bar.inc(1);
                reports.push(report);
            }
            bar.finish_and_clear();
            println!("{} seeds, {} failed", range.end - range.start, failed);
            if let Some(p) = &args.json
                && let Err(e) = write_json(p, &reports)
            {
                eprintln!("sim-bft: cannot write report: {e}");
                return ExitCode::from(2);
            }
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Run(args)) => run(&args),
        Some(Command::Preview(args)) => preview(&args),
        None => {
            println!("sim-bft demo: 4 replicas, 20 s simulated with a crash, 2% loss, reordering");
            println!(
                "and clock skew, then 20 s to converge. `sim-bft run --help` for the knobs.\n"
            );
            run(&RunArgs::demo())
        }
    }
}
