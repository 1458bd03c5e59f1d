//! The `sim-bft` command line: run a simulated cluster from a seed and report on it.
//!
//! `sim-bft` alone runs a short demo of a 4-replica cluster and prints a summary. `sim-bft run`
//! takes the knobs documented in `docs/simulator.md` (every one checked before the run starts);
//! `--json PATH` writes the report, and `--seeds A..B` runs a campaign. The first line of a run
//! is the command that replays it (`SimConfig::command_line`). The exit status is 0 when every
//! checker held, 1 when one failed, 2 on a usage or configuration error (one line on stderr).

use std::ops::Range;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use sim_bft::node::Millis;
use sim_bft::report::Report;
use sim_bft::sim::cluster::ClusterHarness;
use sim_bft::sim::toy::ToyHarness;
use sim_bft::sim::{
    ByzantineKind, ConfigError, FaultConfig, Harness, LedgerKind, MAX_CLIENTS, MAX_DRIFT_PPM,
    MAX_REPLICAS, MAX_SIMULATED_MS, NodeKind, PartitionKind, Signatures, SimConfig, SimOutcome,
    Simulator, TimeServiceMode, parse_duration_ms, time_hard_limit_ms,
};

/// mimalloc as this binary's allocator (sim-bft's default feature `mimalloc`): the simulator
/// allocates at every step, and glibc's malloc/free were ~20% of its CPU time. The library
/// leaves the allocator to its users; the outputs and trace hashes do not depend on it.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Run(Box<RunArgs>),
    /// Print the next fire instants of a cron expression (RFC 3339 UTC, one per line), computed
    /// by the code the replicas run, with zone rules from the tz database compiled in.
    Preview(PreviewArgs),
}

/// Arguments of `sim-bft preview`.
#[derive(Debug, Clone, Args)]
struct PreviewArgs {
    /// The cron expression (5 fields, or 6 with seconds first; quote it), or a nickname:
    /// @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly.
    expression: String,
    /// IANA time zone the expression's wall times are read in (default UTC).
    #[arg(long)]
    tz: Option<String>,
    /// Instants strictly after this RFC 3339 instant (default: now, from this machine's clock;
    /// a leap second 23:59:60 counts as 23:59:59.999).
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

/// Which replicas send the ticks of a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SendersKind {
    /// F+1 replicas per period, rotating (ccron's improvement).
    Rotating,
    /// Every replica (the reference design).
    All,
}

#[derive(Debug, Clone, Args)]
struct RunArgs {
    /// Number of replicas n (f = (n-1)/3; at most MAX_REPLICAS = 100).
    #[arg(long, default_value_t = 4)]
    replicas: u32,
    /// The seed every random choice derives from.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run every seed of a range `A..B` (B exclusive) instead of `--seed`.
    #[arg(long, value_parser = parse_range)]
    seeds: Option<Range<u64>>,
    /// Simulated length of the safety phase (faults active), e.g. 60s, 10m. With --liveness at
    /// most 31 days of simulated time in all.
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
    /// Components that tick, comma-separated, or `none` (default: the ledger's: 1,2 for demo,
    /// 1 otherwise).
    #[arg(long, value_parser = parse_components)]
    components: Option<Components>,
    /// Number of user clients (at most 1000; wall time grows with clients / request interval).
    #[arg(long, default_value_t = 2)]
    clients: u32,
    /// Interval between two requests of one client (0 disables client requests).
    #[arg(long, default_value = "100ms", value_parser = parse_duration_arg)]
    request_interval: u64,
    /// Time service: off, reference or robust.
    #[arg(long, default_value = "robust", value_parser = parse_enum::<TimeServiceMode>)]
    time_service: TimeServiceMode,
    /// Signature scheme: ed25519 (real signatures, the default) or sim (simulator-only keyed-hash
    /// tags: much faster, for long horizons; they prove nothing about the signature scheme
    /// itself, which the ed25519 runs cover).
    #[arg(long, default_value = "ed25519", value_parser = parse_signatures)]
    signatures: Signatures,
    /// User clients send maximal admissible requests (fault knob).
    #[arg(long)]
    max_size_requests: bool,
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
    /// Largest clock offset of a replica (offsets are drawn in [-D, D]). Honest clocks farther
    /// apart than the time service's hard limit (3 s) may stall the cluster: such a run is
    /// refused without --allow-clock-stall.
    #[arg(long, default_value = "0ms", value_parser = parse_duration_arg)]
    clock_skew: u64,
    /// Largest clock drift magnitude, parts per million (drifts are drawn in [-P, P]; 0..=100000).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    drift_ppm: i64,
    /// Number of clock jumps.
    #[arg(long, default_value_t = 0)]
    clock_jumps: u32,
    /// Largest clock jump.
    #[arg(long, default_value = "0ms", value_parser = parse_duration_arg)]
    clock_jump: u64,
    /// Run even when the clock knobs let honest clocks drift farther apart than the time
    /// service tolerates (the cluster may stall: a NoProgress violation is then expected).
    #[arg(long)]
    allow_clock_stall: bool,
    /// State growth: each client request writes a fresh key with a value of this many bytes,
    /// and the replicas' snapshot limit is lowered so the state reaches it (0: off).
    #[arg(long, default_value_t = 0)]
    state_growth: u64,
    /// Write the JSON report here (with `--seeds`: one JSON array of reports). Opened before
    /// the run starts, so a bad path fails at once.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Put every fire event (replica, component/position or schedule id, sequence number,
    /// agreed time, due instant, lateness) and every crash, restart and view change into the
    /// JSON report (bounded: events beyond the cap are counted in `fire_events_dropped`).
    #[arg(long)]
    fire_events: bool,
    /// Draw the run as an SVG here: one row per replica, a mark per cron fire at its agreed
    /// time, crashes, restarts, partitions and view changes (not with `--seeds`). Opened before
    /// the run starts, so a bad path fails at once.
    #[arg(long)]
    timeline: Option<std::path::PathBuf>,
    /// Which node implementation to drive: replica (PBFT) or toy (a leader-based node that
    /// tests the simulator itself; not Byzantine-tolerant).
    #[arg(long, default_value = "replica", value_parser = parse_enum::<NodeKind>)]
    node: NodeKind,
    /// What the replicas run. demo (default): the key-value ledger with ccron tables, component
    /// 1 prunes every 5 s and component 2 calls a contract every 4 s, so fires show; kv: the
    /// plain key-value ledger, ticks only counted (no fires); orders: every client put places an
    /// order whose 2 s expiry is a delayed task held as replicated data (component 1).
    #[arg(long, default_value = "demo", value_parser = parse_enum::<LedgerKind>)]
    ledger: LedgerKind,
    /// With `--ledger orders`: some client `Put`s install IANA zones (Europe/Berlin,
    /// America/New_York, ...) into the schedule book instead of placing orders, so that zone
    /// installs meet the book's one-page zones part, crashes and state transfers.
    #[arg(long)]
    zone_installs: bool,
    /// Which replicas send each period's ticks.
    #[arg(long, value_enum, default_value_t = SendersKind::Rotating)]
    tick_senders: SendersKind,
    /// True time at the start of the run: an RFC 3339 instant (2026-03-28T00:00:00Z) or
    /// milliseconds since the Unix epoch with an `ms` suffix (default 2026-01-01T00:00:00Z).
    #[arg(long, value_parser = parse_instant_arg, allow_hyphen_values = true)]
    from: Option<Millis>,
    /// A component's own tick period, overriding --tick-period: `C=DURATION` (e.g.
    /// `2=500ms`), repeatable; the component must be in --components.
    #[arg(long = "component-period", value_parser = parse_component_period)]
    component_periods: Vec<(u32, u64)>,
    /// Smallest one-way network delay (at most --max-delay).
    #[arg(long, default_value = "1ms", value_parser = parse_duration_arg)]
    min_delay: u64,
    /// Largest extra delay of a reordered message.
    #[arg(long, default_value = "50ms", value_parser = parse_duration_arg)]
    reorder_delay: u64,
    /// Compare agreed time with the honest clocks (default: on with the robust time service).
    #[arg(long)]
    check_time_bounds: Option<bool>,
    /// How far agreed time may run ahead of the fastest honest clock (time-bounds checker).
    #[arg(long, default_value = "1000ms", value_parser = parse_duration_arg)]
    time_ahead_slack: u64,
    /// How far agreed time may lag the slowest honest clock (time-bounds checker).
    #[arg(long, default_value = "7000ms", value_parser = parse_duration_arg)]
    time_behind_slack: u64,
    /// How many seqs before a batch its time lag is measured from (time-bounds checker).
    #[arg(long, default_value_t = 6)]
    time_lag_seqs: u64,
    /// Bound on processed events (a runaway run stops with an EventLimit violation).
    #[arg(long, default_value_t = 50_000_000)]
    max_events: u64,
    /// Check each honest replica's invariants after every this many of its inputs (0: never).
    #[arg(long, default_value_t = 1)]
    check_every: u64,
    /// Longest judged fault-phase stall (default: derived from the replica's timeouts and the
    /// workload's quiet gap; 0ms: measured, never a violation).
    #[arg(long, value_parser = parse_duration_arg)]
    stall_bound: Option<u64>,
    /// Print only the final verdict.
    #[arg(long, short)]
    quiet: bool,
}

fn parse_duration_arg(s: &str) -> Result<u64, ConfigError> {
    parse_duration_ms(s)
}

fn parse_instant_arg(s: &str) -> Result<Millis, ConfigError> {
    sim_bft::sim::parse_instant_ms(s)
}

fn parse_component_period(s: &str) -> Result<(u32, u64), String> {
    let (c, d) = s
        .split_once('=')
        .ok_or_else(|| format!("expected COMPONENT=DURATION, got {s:?}"))?;
    let c: u32 = c
        .trim()
        .parse()
        .map_err(|e| format!("component {c:?}: {e}"))?;
    let d = parse_duration_ms(d).map_err(|e| e.to_string())?;
    Ok((c, d))
}

fn parse_enum<T: std::str::FromStr<Err = ConfigError>>(s: &str) -> Result<T, ConfigError> {
    s.parse()
}

fn parse_signatures(s: &str) -> Result<Signatures, String> {
    s.parse()
}

/// A `--components` list (`none`: no component ticks).
#[derive(Debug, Clone)]
struct Components(Vec<u32>);

fn parse_components(s: &str) -> Result<Components, String> {
    if s.trim() == "none" {
        return Ok(Components(Vec::new()));
    }
    s.split(',')
        .map(|c| {
            c.trim()
                .parse::<u32>()
                .map_err(|e| format!("component {c:?}: {e}"))
        })
        .collect::<Result<Vec<u32>, String>>()
        .map(Components)
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
            node: self.node,
            ledger: self.ledger,
            zone_installs: self.zone_installs,
            duration_ms: self.duration,
            liveness_ms: self.liveness,
            tick_period_ms: self.tick_period,
            components: match &self.components {
                Some(c) => c.0.clone(),
                None => self.ledger.default_components(),
            },
            rotate_ticks: self.tick_senders == SendersKind::Rotating,
            tick_spread_ms: self.tick_spread,
            clients: self.clients,
            request_interval_ms: self.request_interval,
            time_service: self.time_service,
            signatures: self.signatures,
            check_time_bounds: self
                .check_time_bounds
                .unwrap_or(self.time_service == TimeServiceMode::Robust),
            time_ahead_slack_ms: self.time_ahead_slack.min(i64::MAX as u64) as i64,
            time_behind_slack_ms: self.time_behind_slack.min(i64::MAX as u64) as i64,
            time_lag_seqs: self.time_lag_seqs,
            epoch_ms: self.from.unwrap_or(SimConfig::default().epoch_ms),
            component_periods_ms: self.component_periods.iter().copied().collect(),
            max_events: self.max_events,
            node_check_every: self.check_every,
            stall_bound_ms: self.stall_bound,
            faults: FaultConfig {
                min_delay_ms: self.min_delay,
                reorder_delay_ms: self.reorder_delay,
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
                state_growth_bytes: self.state_growth,
                max_size_requests: self.max_size_requests,
                crash_at_view_change: self.crash_at_view_change,
            },
            ..SimConfig::default()
        }
    }

    /// The demo `sim-bft` runs without arguments.
    fn demo() -> Self {
        let mut a = match Cli::try_parse_from(["sim-bft", "run"]) {
            Ok(Cli {
                command: Some(Command::Run(a)),
            }) => *a,
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
        a.components = None;
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
) -> Result<SimOutcome, ConfigError> {
    let sim = Simulator::new(cfg, harness)?;
    if print_params {
        println!("{}", sim.config().command_line());
        print!("{}", sim.params());
    }
    let total = sim
        .config()
        .duration_ms
        .saturating_add(sim.config().liveness_ms);
    let bar = if show_progress {
        // Drawn only when stderr is a terminal (indicatif hides it otherwise).
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} simulated {pos}/{len} ms [{bar:40}] {elapsed_precise} (about {eta} left) {msg}",
        ) {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let outcome = sim.run_with(|now, _| bar.set_position(now));
    bar.finish_and_clear();
    Ok(outcome)
}

/// The report of seed `seed`, and its timeline SVG when `--timeline` asks for one.
fn run_seed(
    args: &RunArgs,
    seed: u64,
    single: bool,
) -> Result<(Report, Option<String>), ConfigError> {
    let cfg = args.config(seed);
    let verbose = single && !args.quiet;
    let outcome = match cfg.node {
        NodeKind::Toy => simulate(cfg.clone(), boot_toy(&cfg), single, verbose)?,
        _ => {
            let h = ClusterHarness::new(&cfg);
            h.validate()?;
            simulate(cfg, h, single, verbose)?
        }
    };
    let report = if args.fire_events {
        Report::with_events(&outcome)
    } else {
        Report::from_outcome(&outcome)
    };
    let svg = args
        .timeline
        .as_ref()
        .map(|_| sim_bft::timeline::render_svg(&outcome));
    Ok((report, svg))
}

/// Everything checked before a run starts: the configuration (as the first seed gives it), the
/// clocks against the time service's bound, and the report's path (opened, so a bad path fails
/// now rather than after the run). Errors are one line for stderr.
fn preflight(args: &RunArgs) -> Result<Outputs, String> {
    let seed = args.seeds.as_ref().map_or(args.seed, |r| r.start);
    let cfg = args.config(seed);
    cfg.validate().map_err(|e| e.to_string())?;
    if cfg.node == NodeKind::Replica {
        ClusterHarness::new(&cfg)
            .validate()
            .map_err(|e| e.to_string())?;
    }
    if cfg.clocks_beyond_time_bound() {
        let msg = format!(
            "--clock-skew {}ms and --drift-ppm {} let two honest clocks be up to {} ms apart \
             over the run, beyond the time service's hard limit of {} ms: backups withhold their \
             votes from a primary that far off and the cluster may stall (NoProgress)",
            cfg.faults.max_clock_skew_ms,
            cfg.faults.max_drift_ppm,
            cfg.max_honest_clock_distance_ms(),
            time_hard_limit_ms()
        );
        if !args.allow_clock_stall {
            return Err(format!(
                "{msg}. Pass --allow-clock-stall to run anyway, or --time-service off."
            ));
        }
        eprintln!("sim-bft: warning: {msg}; running anyway (--allow-clock-stall).");
    }
    if args.timeline.is_some() && args.seeds.is_some() {
        return Err("--timeline draws one run: use --seed, not --seeds".to_string());
    }
    let open = |p: &std::path::PathBuf, what: &str| {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(p)
            .map_err(|e| format!("cannot write {what} to {}: {e}", p.display()))
    };
    Ok(Outputs {
        json: args.json.as_ref().map(|p| open(p, "report")).transpose()?,
        timeline: args
            .timeline
            .as_ref()
            .map(|p| open(p, "timeline"))
            .transpose()?,
    })
}

/// The files `preflight` opened.
struct Outputs {
    json: Option<std::fs::File>,
    timeline: Option<std::fs::File>,
}

fn write_text(file: &mut std::fs::File, path: &std::path::Path, text: &str) -> Result<(), String> {
    use std::io::{Seek, Write};
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(text.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn write_json<T: serde::Serialize>(
    file: &mut std::fs::File,
    path: &std::path::Path,
    value: &T,
) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    write_text(file, path, &(text + "\n"))
}

/// Writes the report to the file `preflight` opened; false (after saying why) when it failed.
fn save<T: serde::Serialize>(json: &mut Option<std::fs::File>, args: &RunArgs, value: &T) -> bool {
    let (Some(file), Some(path)) = (json.as_mut(), args.json.as_ref()) else {
        return true;
    };
    match write_json(file, path, value) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("sim-bft: cannot write report: {e}");
            false
        }
    }
}

// The limits `--help` states are the library's.
const _: () = assert!(MAX_REPLICAS == 100 && MAX_CLIENTS == 1_000 && MAX_DRIFT_PPM == 100_000);
const _: () = assert!(MAX_SIMULATED_MS == 31 * 24 * 3_600_000);

fn run(args: &RunArgs) -> ExitCode {
    let Outputs {
        mut json,
        mut timeline,
    } = match preflight(args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sim-bft: {e}");
            return ExitCode::from(2);
        }
    };
    match &args.seeds {
        None => {
            let (report, svg) = match run_seed(args, args.seed, true) {
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
            if !save(&mut json, args, &report) {
                return ExitCode::from(2);
            }
            if let (Some(file), Some(path), Some(svg)) =
                (timeline.as_mut(), args.timeline.as_ref(), svg)
                && let Err(e) = write_text(file, path, &svg)
            {
                eprintln!("sim-bft: cannot write timeline: {e}");
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
                    Ok((r, _)) => r,
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
            if !save(&mut json, args, &reports) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The configuration `sim-bft run` builds from `line` (a replay line).
    fn parse_replay(line: &str) -> SimConfig {
        let words: Vec<&str> = line
            .split('#')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        match Cli::try_parse_from(words) {
            Ok(Cli {
                command: Some(Command::Run(a)),
            }) => a.config(a.seed),
            other => panic!("{line}: {other:?}"),
        }
    }

    fn one_of<T: Copy + std::fmt::Debug + 'static>(xs: &'static [T]) -> impl Strategy<Value = T> {
        proptest::sample::select(xs)
    }

    prop_compose! {
        fn faults()(
            rates in (0.0..=1.0f64, 0.0..=1.0f64, 0.0..=1.0f64),
            max_delay_ms in 1..=10_000u64,
            partition in one_of(&[
                PartitionKind::None,
                PartitionKind::Symmetric,
                PartitionKind::OneWay,
                PartitionKind::Isolate,
            ]),
            crashes in 0..4u32,
            byzantine in 0..3u32,
            kind in one_of(&ByzantineKind::ALL),
            pinned in proptest::collection::vec(0..10u32, 0..3),
            skew in 0..=100_000i64,
            drift in 0..=MAX_DRIFT_PPM,
            jumps in (0..4u32, 0..=100_000i64),
        ) -> FaultConfig {
            FaultConfig {
                drop_rate: rates.0,
                duplicate_rate: rates.1,
                reorder_rate: rates.2,
                max_delay_ms,
                partition,
                crashes,
                byzantine,
                // Rendered (and meaningful) only with Byzantine replicas.
                byzantine_kind: if byzantine > 0 || !pinned.is_empty() {
                    kind
                } else {
                    ByzantineKind::Silent
                },
                pinned_byzantine: pinned,
                max_clock_skew_ms: skew,
                max_drift_ppm: drift,
                clock_jumps: jumps.0,
                max_clock_jump_ms: jumps.1,
                ..FaultConfig::default()
            }
        }
    }

    prop_compose! {
        fn configs()(
            seed in any::<u64>(),
            replicas in 1..=MAX_REPLICAS,
            node in one_of(&[NodeKind::Replica, NodeKind::Toy]),
            ledger in one_of(&[LedgerKind::Demo, LedgerKind::Kv, LedgerKind::Orders]),
            zone_installs in any::<bool>(),
            spans in (0..=1_000_000u64, 1..=1_000_000u64, 0..=100_000u64),
            tick_spread_ms in proptest::option::of(0..=100_000u64),
            components in proptest::collection::vec(any::<u32>(), 0..4),
            rotate_ticks in any::<bool>(),
            clients in 0..=MAX_CLIENTS,
            request_interval_ms in 0..=100_000u64,
            time_service in one_of(&[
                TimeServiceMode::Off,
                TimeServiceMode::Reference,
                TimeServiceMode::Robust,
            ]),
            signatures in one_of(&Signatures::ALL),
            faults in faults(),
            delays in (0..=1_000u64, 0..=10_000u64),
            epoch_ms in prop_oneof![
                Just(SimConfig::default().epoch_ms),
                any::<i64>(),
                -62_167_219_200_000..=253_402_300_799_999i64,
            ],
            periods in proptest::collection::vec(0..=100_000u64, 0..4),
            checker in (
                proptest::option::of(any::<bool>()),
                0..=100_000i64,
                0..=100_000i64,
                0..=100u64,
                1..=u64::MAX,
                0..=100u64,
                proptest::option::of(0..=1_000_000u64),
            ),
        ) -> SimConfig {
            let component_periods_ms = components
                .iter()
                .zip(&periods)
                .map(|(c, p)| (*c, *p))
                .collect();
            SimConfig {
                epoch_ms,
                component_periods_ms,
                check_time_bounds: checker.0.unwrap_or(time_service == TimeServiceMode::Robust),
                time_ahead_slack_ms: checker.1,
                time_behind_slack_ms: checker.2,
                time_lag_seqs: checker.3,
                max_events: checker.4,
                node_check_every: checker.5,
                stall_bound_ms: checker.6,
                faults: FaultConfig {
                    min_delay_ms: delays.0,
                    reorder_delay_ms: delays.1,
                    ..faults
                },
                seed,
                replicas,
                node,
                ledger,
                zone_installs,
                duration_ms: spans.0,
                liveness_ms: spans.1,
                tick_period_ms: spans.2,
                tick_spread_ms,
                components,
                rotate_ticks,
                clients,
                request_interval_ms,
                time_service,
                signatures,
                ..SimConfig::default()
            }
        }
    }

    proptest! {
        /// The replay line is the configuration: what the command line builds from it is the
        /// configuration it was rendered from, knob for knob.
        #[test]
        fn the_replay_line_parses_back_to_its_configuration(cfg in configs()) {
            let line = cfg.command_line();
            prop_assert!(!line.contains('#'), "{}", line);
            prop_assert_eq!(parse_replay(&line), cfg);
        }
    }

    #[test]
    fn the_demo_runs_the_demo_ledger_with_its_components() {
        let cfg = RunArgs::demo().config(1);
        assert_eq!(cfg.ledger, LedgerKind::Demo);
        assert_eq!(cfg.components, LedgerKind::Demo.default_components());
        assert_eq!(parse_replay(&cfg.command_line()), cfg);
    }
}
