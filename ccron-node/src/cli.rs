//! The command line every node binary gets: `init`, `node` and `localnet`, generic over the
//! ledger (any [`Application`]) and the engine (its `run` function).
//!
//! An engine adapter wraps [`NodeBinary`] in one call (e.g. `ccron_malachite::cli`); a team's
//! own binary is then a `main` of a few lines:
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     ccron_malachite::cli(|_spec| my_ledger())
//! }
//! ```
//!
//! - `init --home DIR --nodes N`: keys and a genesis that records the ledger's name, its ticking
//!   components and their tick periods, its reserved pages and its setup digest;
//! - `node --home DIR --index I`: one validator (the engine's run function);
//! - `localnet --nodes N --duration 60s`: N node processes of this same binary on loopback, a
//!   SIGKILL and restart mid-run, optionally a late joiner, a lying proposer or a tick-starving
//!   one, and a JSON report; exits non-zero if honest nodes disagree or nothing fired.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ccron::host::Application;
use clap::{Parser, Subcommand};

use crate::core::{Factory, LedgerSpec, NodeError, NodeOptions};
use crate::hostile::{Byzantine, ByzantineKind, parse_target};
use crate::ledger::{DEFAULT_PAGES, DEFAULT_TICK_PERIOD_MS};
use crate::load::LoadPayload;
use crate::localnet::{LedgerInit, LocalnetOptions, init_home, run_localnet};
use crate::types::hex;

/// An engine's run function: runs one validator until the process ends.
pub type RunNode<A> = Arc<dyn Fn(NodeOptions, Factory<A>) -> Result<(), NodeError> + Send + Sync>;

/// The load a binary's ledger gets on a localnet, by ledger name (none: no load).
pub type LoadFor = Arc<dyn Fn(&str) -> Option<LoadPayload> + Send + Sync>;

/// A node binary: an engine's run function and the binary's ledgers (see the module docs).
pub struct NodeBinary<A> {
    name: String,
    engine: String,
    run: RunNode<A>,
    factory: Factory<A>,
    default_ledger: String,
    load: Option<LoadFor>,
    preload: Option<LoadFor>,
}

impl<A> std::fmt::Debug for NodeBinary<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBinary")
            .field("name", &self.name)
            .field("engine", &self.engine)
            .field("default_ledger", &self.default_ledger)
            .finish_non_exhaustive()
    }
}

#[derive(Parser)]
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
        /// The ledger (the binary's name for it; a binary with one ledger ignores it).
        #[arg(long)]
        ledger: Option<String>,
        /// Key seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Tick period of every ticking component (ms).
        #[arg(long, default_value_t = DEFAULT_TICK_PERIOD_MS)]
        tick_period_ms: u64,
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
        /// Run as a Byzantine validator of this kind (`equivocate`, `flood`, `withhold`,
        /// `withhold-votes`, `silent`, `bad-ticks`, `forge-samples`, `oversized`, `slow-http`,
        /// `lie-reads`; for the localnet's attacks).
        #[arg(long)]
        byzantine: Option<String>,
        /// From when the Byzantine behaviour is on (Unix ms; honest before). Default: at once.
        #[arg(long, default_value_t = 0)]
        byzantine_from_ms: i64,
        /// Client endpoint listen address (port 0: any free port; the bound address is written
        /// to `node-I/http.addr`).
        #[arg(long, default_value = "127.0.0.1:0")]
        http: std::net::SocketAddr,
        /// Write a durable snapshot of the state every N heights (and at a clean stop); a
        /// restart re-executes only the blocks above the newest one. 0: only at a clean stop.
        #[arg(long, default_value_t = crate::snapshot::DEFAULT_SNAPSHOT_EVERY)]
        snapshot_every: u64,
        /// After each snapshot, prune the block store below the newest snapshot minus N heights
        /// (never above the previous snapshot); absent: keep every block. A node whose peers
        /// pruned catches up from a snapshot (docs/malachite.md, "Pruning").
        #[arg(long)]
        retain_blocks: Option<u64>,
        /// The validator's signing state (what its key signed: never a second message for a
        /// height and round, nothing again at a height signed before a lost WAL). Keep it with
        /// the key, outside the node's state; default: `node-I/signing.state`, beside
        /// `secret.key` (docs/malachite.md, "Signing guard").
        #[arg(long)]
        signing_state: Option<PathBuf>,
        /// Localnet fault injection: add the offset (ms) this file holds, re-read every 50 ms,
        /// to every wall-clock read (a clock jump; docs/malachite.md, "Process-level faults").
        #[arg(long)]
        fault_clock_file: Option<PathBuf>,
        /// Localnet fault injection: dial the peers at these multiaddrs (one a line) instead of
        /// the genesis' ports (the localnet's fault proxies; docs/malachite.md, "Network
        /// faults").
        #[arg(long)]
        fault_peers_file: Option<PathBuf>,
    },
    /// Cut a node's `blocks.log` or `parts.log` at a damaged record the node refused (a copy of
    /// the whole file is kept as `FILE.corrupt-OFFSET`); the node then takes the later heights
    /// from its peers. Run it on a stopped node only (docs/malachite.md, "Recovering a corrupt
    /// store").
    RepairStore {
        /// The config directory.
        #[arg(long)]
        home: PathBuf,
        /// The validator's index.
        #[arg(long)]
        index: usize,
        /// The file: `blocks.log` or `parts.log`.
        #[arg(long, default_value = "blocks.log")]
        file: String,
        /// Cut at this offset (the one the node's error named); by default at the first record
        /// failing its length bound or checksum.
        #[arg(long)]
        at: Option<u64>,
    },
    /// Start N node processes, kill and restart one, and write a JSON report.
    Localnet {
        /// Number of validators (at least 4).
        #[arg(long, default_value_t = 4)]
        nodes: usize,
        /// Run time, e.g. `60s`, `90s`, `2m`.
        #[arg(long, default_value = "60s")]
        duration: String,
        /// The ledger (the binary's name for it).
        #[arg(long)]
        ledger: Option<String>,
        /// Tick period of every ticking component (ms).
        #[arg(long, default_value_t = DEFAULT_TICK_PERIOD_MS)]
        tick_period_ms: u64,
        /// Start the last node late; it catches up through the engine's sync.
        #[arg(long)]
        late_join: bool,
        /// Start the last node once the others reach this height (implies --late-join), time
        /// its catch-up (the report's `late_join`) and end the run a few seconds after it
        /// (--duration stays the cap). With --retain-blocks it catches up from a peer's snapshot.
        #[arg(long)]
        late_join_at_height: Option<u64>,
        /// Node 0 proposes lying agreed times.
        #[arg(long)]
        lying_time: bool,
        /// Node 0 proposes blocks without ticks (the other proposers carry its ticks).
        #[arg(long)]
        omit_ticks: bool,
        /// Do not SIGKILL and restart a node mid-run.
        #[arg(long)]
        no_kill: bool,
        /// Run node INDEX (default 0) as a Byzantine validator of KIND from a third of the run
        /// on: `equivocate`, `flood`, `withhold`, `withhold-votes`, `silent`, `bad-ticks`,
        /// `forge-samples`, `oversized`, `slow-http` or `lie-reads` (`KIND[@INDEX]`;
        /// docs/malachite.md, "Byzantine validators as processes").
        #[arg(long)]
        byzantine: Option<String>,
        /// Process-level faults from this seed: SIGKILL + restart and SIGSTOP + SIGCONT of
        /// random nodes at random points, one at a time (use with --no-kill).
        #[arg(long)]
        faults: Option<u64>,
        /// With --faults: the plan also SIGKILLs every node at once and restarts them all from
        /// their storage (the report compares their decided blocks before and after).
        #[arg(long)]
        kill_all: bool,
        /// Network faults from this seed: a loopback proxy per directed link between the
        /// nodes' consensus transports, with delays, stalls, resets, one node isolated, then a
        /// 2|2 split, each healed (docs/malachite.md, "Network faults").
        #[arg(long)]
        net_faults: Option<u64>,
        /// Clock jumps from this seed: one node's wall clock at a time jumps forward or back
        /// by seconds to minutes, then back (docs/malachite.md, "Process-level faults").
        #[arg(long)]
        clock_faults: Option<u64>,
        /// Disk faults from this seed: a node SIGKILLed, one bit flipped in the middle of its
        /// blocks.log, parts.log or newest snapshot, the node restarted; it must refuse the
        /// damage, keep the file aside and recover from its peers (docs/malachite.md,
        /// "Process-level faults"). Use with --no-kill.
        #[arg(long)]
        disk_faults: Option<u64>,
        /// The Byzantine node (--byzantine's, else node 0) delivers its proposal parts and
        /// votes only to these peers (comma-separated indices, e.g. `1,2`: f+1 honest nodes)
        /// from a third of the run on: its links to the others are cut at loopback proxies
        /// (docs/malachite.md, "Byzantine validators as processes").
        #[arg(long)]
        byzantine_subset: Option<String>,
        /// Key seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Config directory (a fresh temporary directory by default).
        #[arg(long)]
        home: Option<PathBuf>,
        /// Write the JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// The upgrade binary: a node that stops for a planned upgrade it does not carry
        /// (exit 10) is restarted on it from its own directory, at most once per node
        /// (docs/malachite.md, "Upgrading a live cluster").
        #[arg(long)]
        upgrade_binary: Option<PathBuf>,
        /// Every node prunes its block store below its newest snapshot minus N heights
        /// (`node --retain-blocks`); absent: no pruning. A late joiner then catches up from a
        /// peer's snapshot (docs/malachite.md, "Catch-up from a peer's snapshot").
        #[arg(long)]
        retain_blocks: Option<u64>,
        /// Wipe the killed node's home (all but its key and signing state) before it is restarted: it starts
        /// empty and catches up from its peers.
        #[arg(long)]
        wipe_restarted: bool,
        /// A measurement instead of one run: the honest localnet, then each listed run
        /// (comma-separated `KIND`, `subset`, `KIND+subset`, or `all`), node 0 Byzantine from
        /// a third of the run on, all with these options and length, one after the other;
        /// prints heights/s and the lateness p99s of the fault's window with their ratios to
        /// the honest run (docs/malachite.md, "Byzantine validators as processes"). `--json`
        /// gets the table's JSON; each run's home is `<home>/<run>`.
        #[arg(long)]
        measure_byzantine: Option<String>,
        /// The load clients' rate, signed requests/s (spread over clients of at most 25/s
        /// each, each with its own key; docs/malachite.md, "Scale").
        #[arg(long, default_value_t = crate::load::DEFAULT_LOAD_RATE)]
        load_rate: u32,
        /// Place N long-lived schedules (the binary's preload, through clients of at most the
        /// book's per-owner quota each) before the run's clock starts; the window starts a
        /// third of the run after they are in the book. The ledger needs the room (e.g.
        /// `--ledger orders:book-pages=P`).
        #[arg(long, default_value_t = 0)]
        preload: u64,
        /// A measurement instead of one run: the empty ledger without load, the empty ledger
        /// at `--load-rate`, and the ledger with N schedules preloaded at `--load-rate`, all of
        /// this length; prints heights/s and the lateness p99s of each window with their
        /// ratios to the empty ledger's at the same rate (docs/malachite.md, "Scale").
        /// `--json` gets the table's JSON; each run's home is `<home>/<run>`.
        #[arg(long)]
        measure_scale: Option<u64>,
    },
}

/// Parses `60s`, `90s`, `2m`, `500ms` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
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

impl<A: Application> NodeBinary<A> {
    /// A binary named `name` running engine `engine` (its name in reports) with `run`, whose
    /// ledgers `factory` builds (given the genesis' ledger name and the validators).
    pub fn new(
        name: &str,
        engine: &str,
        run: RunNode<A>,
        factory: impl Fn(&LedgerSpec) -> Result<A, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_string(),
            engine: engine.to_string(),
            run,
            factory: Arc::new(factory),
            default_ledger: "ledger".to_string(),
            load: None,
            preload: None,
        }
    }

    /// The ledger name `init` and `localnet` use without `--ledger`.
    pub fn default_ledger(mut self, name: &str) -> Self {
        self.default_ledger = name.to_string();
        self
    }

    /// The load a localnet puts on a ledger, by name.
    pub fn load(
        mut self,
        load: impl Fn(&str) -> Option<LoadPayload> + Send + Sync + 'static,
    ) -> Self {
        self.load = Some(Arc::new(load));
        self
    }

    /// What a localnet's `--preload N` places, by ledger name: the payload of request k of a
    /// preload client, one long-lived schedule each (none: the ledger has no preload).
    pub fn preload(
        mut self,
        preload: impl Fn(&str) -> Option<LoadPayload> + Send + Sync + 'static,
    ) -> Self {
        self.preload = Some(Arc::new(preload));
        self
    }

    /// The genesis record of ledger `name` for `nodes` validators: one instance is built to
    /// read its ticking components, setup digest and outbox.
    ///
    /// # Errors
    /// The factory's (an unknown ledger name).
    pub fn ledger_init(
        &self,
        name: &str,
        nodes: usize,
        tick_period_ms: u64,
    ) -> Result<LedgerInit, String> {
        let spec = LedgerSpec {
            name: name.to_string(),
            validators: u32::try_from(nodes).unwrap_or(u32::MAX),
        };
        let app = (self.factory)(&spec)?;
        let components = app.tick_components();
        if components.is_empty() {
            return Err(format!(
                "ledger '{name}' has no ticking component (Application::tick_components)"
            ));
        }
        let tick_periods: BTreeMap<u32, u64> = components
            .into_iter()
            .map(|c| (c, tick_period_ms.max(1)))
            .collect();
        let pages_needed = app.page_ranges().iter().map(|r| r.end()).max().unwrap_or(0);
        let pages = (DEFAULT_PAGES.0, DEFAULT_PAGES.1.max(pages_needed));
        Ok(LedgerInit {
            name: name.to_string(),
            tick_periods,
            pages,
            setup_digest: app.setup_digest().map(|d| hex(&d)),
            has_outbox: app.outbox().is_some(),
            has_book: app.schedule_book().is_some(),
        })
    }

    /// Parses the process's arguments and runs the subcommand. Exit codes: 0 success, 1 a
    /// node that stops on an error or a localnet with violations, 2 bad arguments or I/O;
    /// a node stopped at a planned upgrade exits with
    /// [`EXIT_UPGRADE_NEEDED`](crate::upgrade::EXIT_UPGRADE_NEEDED) (10),
    /// [`EXIT_UPGRADE_EARLY`](crate::upgrade::EXIT_UPGRADE_EARLY) (11) or
    /// [`EXIT_UPGRADE_UNKNOWN`](crate::upgrade::EXIT_UPGRADE_UNKNOWN) (12).
    pub fn main(self) -> ExitCode {
        init_tracing();
        let cli = Cli::parse();
        match cli.cmd {
            Cmd::Init {
                home,
                nodes,
                ledger,
                seed,
                tick_period_ms,
            } => {
                let name = ledger.unwrap_or_else(|| self.default_ledger.clone());
                let init = match self.ledger_init(&name, nodes, tick_period_ms) {
                    Ok(i) => i,
                    Err(e) => {
                        eprintln!("{} init: {e}", self.name);
                        return ExitCode::from(2);
                    }
                };
                match init_home(&home, nodes, seed, &init) {
                    Ok(_) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("{} init: {e}", self.name);
                        ExitCode::from(2)
                    }
                }
            }
            Cmd::Node {
                home,
                index,
                lying_time,
                omit_ticks,
                byzantine,
                byzantine_from_ms,
                http,
                snapshot_every,
                retain_blocks,
                signing_state,
                fault_clock_file,
                fault_peers_file,
            } => {
                if let Some(path) = fault_clock_file
                    && let Err(e) = crate::faults::watch_clock_file(path)
                {
                    eprintln!("{} node: --fault-clock-file: {e}", self.name);
                    return ExitCode::from(2);
                }
                if let Some(path) = fault_peers_file
                    && let Err(e) = crate::netfault::install_peer_override(&path)
                {
                    eprintln!("{} node: --fault-peers-file: {e}", self.name);
                    return ExitCode::from(2);
                }
                let byzantine = match byzantine.map(|k| k.parse::<ByzantineKind>()).transpose() {
                    Ok(k) => k.map(|kind| Byzantine {
                        kind,
                        from_ms: byzantine_from_ms,
                    }),
                    Err(e) => {
                        eprintln!("{} node: {e}", self.name);
                        return ExitCode::from(2);
                    }
                };
                let opts = NodeOptions {
                    home,
                    index,
                    lying_time,
                    omit_ticks,
                    byzantine,
                    http,
                    snapshot_every,
                    retain_blocks,
                    signing_state,
                };
                match (self.run)(opts, self.factory.clone()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        // An upgrade stop has its own code (`crate::upgrade`).
                        let code = crate::upgrade::exit_code_of(&e);
                        tracing::error!(error = %e, code, "node stops");
                        eprintln!("{} node: {e}", self.name);
                        ExitCode::from(code)
                    }
                }
            }
            Cmd::RepairStore {
                home,
                index,
                file,
                at,
            } => {
                if file != "blocks.log" && file != "parts.log" {
                    eprintln!("repair-store: --file is blocks.log or parts.log");
                    return ExitCode::from(2);
                }
                let path = crate::core::node_dir(&home, index).join(&file);
                match crate::store::cut_record_file(&path, at) {
                    Ok(Some(cut)) => {
                        println!(
                            "{}: cut at offset {} ({} bytes); the whole file is kept in {}",
                            path.display(),
                            cut.offset,
                            cut.cut_bytes,
                            cut.copy.display()
                        );
                        ExitCode::SUCCESS
                    }
                    Ok(None) => {
                        println!("{}: no damaged record found; nothing cut", path.display());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("repair-store: {e}");
                        ExitCode::from(2)
                    }
                }
            }
            Cmd::Localnet {
                nodes,
                duration,
                ledger,
                tick_period_ms,
                late_join,
                late_join_at_height,
                lying_time,
                omit_ticks,
                no_kill,
                byzantine,
                faults,
                kill_all,
                net_faults,
                clock_faults,
                disk_faults,
                byzantine_subset,
                seed,
                home,
                json,
                upgrade_binary,
                retain_blocks,
                wipe_restarted,
                measure_byzantine,
                load_rate,
                preload,
                measure_scale,
            } => {
                let byzantine = match byzantine.as_deref().map(parse_target).transpose() {
                    Ok(b) => b,
                    Err(e) => {
                        eprintln!("localnet: --byzantine: {e}");
                        return ExitCode::from(2);
                    }
                };
                if byzantine.is_some_and(|(_, i)| i >= nodes) {
                    eprintln!("localnet: --byzantine names a node index not below --nodes");
                    return ExitCode::from(2);
                }
                let byzantine_subset = match byzantine_subset
                    .as_deref()
                    .map(|s| parse_subset(s, nodes, byzantine.map_or(0, |(_, i)| i)))
                    .transpose()
                {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("localnet: --byzantine-subset: {e}");
                        return ExitCode::from(2);
                    }
                };
                let Some(duration) = parse_duration(&duration) else {
                    eprintln!("localnet: bad --duration '{duration}'");
                    return ExitCode::from(2);
                };
                if nodes < 4 {
                    eprintln!("localnet: at least 4 nodes (3f+1 with f >= 1)");
                    return ExitCode::from(2);
                }
                if let Err(e) = check_scale(
                    load_rate,
                    preload,
                    measure_scale,
                    &byzantine,
                    measure_byzantine.is_some(),
                ) {
                    eprintln!("localnet: {e}");
                    return ExitCode::from(2);
                }
                let name = ledger.unwrap_or_else(|| self.default_ledger.clone());
                let init = match self.ledger_init(&name, nodes, tick_period_ms) {
                    Ok(i) => i,
                    Err(e) => {
                        eprintln!("localnet: {e}");
                        return ExitCode::from(2);
                    }
                };
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
                    load: self.load.as_ref().and_then(|l| l(&name)),
                    ledger: init,
                    engine: self.engine.clone(),
                    late_join,
                    late_join_at_height,
                    lying_time,
                    omit_ticks,
                    kill_restart: !no_kill,
                    byzantine,
                    faults,
                    kill_all,
                    net_faults,
                    clock_faults,
                    disk_faults,
                    byzantine_subset,
                    seed,
                    home,
                    node_bin,
                    upgrade_binary,
                    retain_blocks,
                    wipe_restarted,
                    scale: crate::localnet::ScaleOptions {
                        load_rate,
                        preload,
                        preload_payload: self.preload.as_ref().and_then(|l| l(&name)),
                    },
                };
                match (measure_byzantine, measure_scale) {
                    (Some(list), _) => measure(opts, &list, json),
                    (None, Some(schedules)) => measure_scale_cmd(opts, schedules, json),
                    (None, None) => report(&opts, json),
                }
            }
        }
    }
}

/// The scale options' consistency: a rate of at least 1 request/s, and no preload or scale
/// measurement with a Byzantine node (the preload moves the run's window, which a Byzantine
/// node's start is not told) or with `--measure-byzantine`.
fn check_scale(
    load_rate: u32,
    preload: u64,
    measure_scale: Option<u64>,
    byzantine: &Option<(ByzantineKind, usize)>,
    measure_byzantine: bool,
) -> Result<(), String> {
    if load_rate == 0 {
        return Err("--load-rate is at least 1 request/s".into());
    }
    if (preload > 0 || measure_scale.is_some()) && byzantine.is_some() {
        return Err("--preload and --measure-scale run without --byzantine".into());
    }
    if measure_scale.is_some() && (measure_byzantine || preload > 0) {
        return Err(
            "--measure-scale runs alone (not with --measure-byzantine or --preload: it sets the preload)"
                .into(),
        );
    }
    if measure_scale == Some(0) {
        return Err("--measure-scale needs at least 1 schedule".into());
    }
    Ok(())
}

/// `localnet --measure-scale N`: the three runs, the table printed (and written as JSON); exit
/// 1 when a run had a violation or disagreed.
fn measure_scale_cmd(mut opts: LocalnetOptions, schedules: u64, json: Option<PathBuf>) -> ExitCode {
    let home = opts.home.take().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "ccron-measure-scale-{}-{}",
            std::process::id(),
            crate::core::now_ms()
        ))
    });
    opts.home = Some(home.clone());
    let m = match crate::localnet::measure_scale(&opts, schedules) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("localnet: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = json
        && let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap_or_default())
    {
        eprintln!("localnet: writing {}: {e}", path.display());
        return ExitCode::from(2);
    }
    println!(
        "measure-scale: {} nodes, {} ledger, {} ms per run, {} requests/s, {} schedules preloaded; window from a third of each run; homes under {}",
        m.nodes,
        m.ledger,
        m.duration_ms,
        m.load_rate,
        m.schedules,
        home.display()
    );
    print!("{}", m.table());
    for r in &m.rows {
        if let Some(p) = &r.preload_report {
            println!(
                "{} preload: {}",
                r.name,
                serde_json::to_string(p).unwrap_or_default()
            );
        }
        if let Some(l) = &r.load {
            println!(
                "{} load: {}",
                r.name,
                serde_json::to_string(l).unwrap_or_default()
            );
        }
        if !r.clean {
            println!(
                "{}: violations {:?} (home {})",
                r.name, r.violations, r.home
            );
        }
    }
    if m.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `--byzantine-subset`: distinct peer indices below `nodes`, none the sender's.
fn parse_subset(s: &str, nodes: usize, sender: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let i: usize = part
            .parse()
            .map_err(|_| format!("'{part}' is not a node index"))?;
        if i >= nodes || i == sender || out.contains(&i) {
            return Err(format!(
                "{i}: a peer index below {nodes}, not the sender {sender}, once"
            ));
        }
        out.push(i);
    }
    Ok(out)
}

/// `localnet --measure-byzantine LIST`: the honest run and each listed one, the table printed
/// (and written as JSON); exit 1 when a run had a violation or disagreed.
fn measure(mut opts: LocalnetOptions, list: &str, json: Option<PathBuf>) -> ExitCode {
    let runs = match crate::localnet::parse_measure_runs(list) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("localnet: --measure-byzantine: {e}");
            return ExitCode::from(2);
        }
    };
    let home = opts
        .home
        .take()
        .unwrap_or_else(crate::localnet::default_measure_home);
    opts.home = Some(home.clone());
    let m = match crate::localnet::measure_byzantine(&opts, &runs) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("localnet: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = json
        && let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap_or_default())
    {
        eprintln!("localnet: writing {}: {e}", path.display());
        return ExitCode::from(2);
    }
    println!(
        "measure-byzantine: {} nodes, {} ledger, {} ms per run, fault window from a third of each run; homes under {}",
        m.nodes,
        m.ledger,
        m.duration_ms,
        home.display()
    );
    print!("{}", m.table());
    for r in m.rows.iter().filter(|r| !r.clean) {
        println!(
            "{}: violations {:?} (home {})",
            r.run.name, r.violations, r.home
        );
    }
    if m.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn report(opts: &LocalnetOptions, json: Option<PathBuf>) -> ExitCode {
    let report = match run_localnet(opts) {
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
    if !report.faults.is_empty() {
        println!("faults {}", report.faults.join(", "));
    }
    if let Some(b) = &report.byzantine {
        println!(
            "byzantine {} at node {}: {:.1} -> {:.1} heights/s, {} heights during, longest stall before {} ms, during {} ms",
            b.kind,
            b.node,
            b.heights_per_sec_before,
            b.heights_per_sec_during,
            b.heights_during,
            b.longest_stall_before_ms,
            b.longest_stall_during_ms
        );
        for v in &b.votes_during {
            println!(
                "  node {} verified during heights {}-{} votes by voter {:?} (last vote heights {:?})",
                v.node, v.from_height, v.to_height, v.by_voter, v.last_height_by_voter
            );
        }
    }
    if let Some(w) = &report.window {
        println!(
            "window from D/3 on node {}: {:.1} heights/s, {} heights, longest stall {} ms, {} fires due, agreed-due p99 {} ms, wall-due p99 {} ms",
            w.node,
            w.heights_per_sec,
            w.heights,
            w.longest_stall_ms,
            w.lateness.fires,
            w.lateness.agreed_p99_ms,
            w.lateness.wall_p99_ms
        );
    }
    if let Some(net) = &report.net_faults {
        println!("net faults {}", net.events.join(", "));
        for w in &net.windows {
            println!(
                "net window {:?} {:?} {}-{} ms: heights during {}, longest stall {} ms, resumed after {:?} ms, all caught up after {:?} ms",
                w.kind,
                w.nodes,
                w.start_ms,
                w.end_ms,
                w.heights_during,
                w.longest_stall_during_ms,
                w.resumed_after_ms,
                w.caught_up_after_ms
            );
        }
    }
    if let Some(k) = &report.kill_all {
        println!(
            "kill-all {} times: {} decided blocks compared before/after, {} lost, {} changed",
            k.kill_alls, k.blocks_compared, k.lost, k.changed
        );
    }
    if let Some(c) = &report.clock_faults {
        println!(
            "clock jumps {}: agreed time ahead of the localnet's clock at most {} ms, behind at most {} ms, non-monotone heights {}",
            c.events.join(", "),
            c.agreed_ahead_max_ms,
            c.agreed_behind_max_ms,
            c.non_monotone
        );
    }
    if let Some(d) = &report.disk_faults {
        for f in &d.flips {
            println!(
                "disk flip at {} ms: node {} {}@{} (height {}): detected {} kept as {:?}, resumed after {:?} ms",
                f.at_ms,
                f.node,
                f.file,
                f.offset,
                f.height_at_flip,
                f.detected,
                f.kept_as,
                f.resumed_after_ms
            );
        }
        println!(
            "disk faults: {} flips, {} decided blocks compared before/after, {} lost, {} changed, {} undetected, {} not resumed",
            d.flips.len(),
            d.blocks_compared,
            d.lost,
            d.changed,
            d.undetected,
            d.not_resumed
        );
    }
    if let Some(s) = &report.subset {
        println!(
            "byzantine subset: node {} delivered only to {:?} (withheld from {:?}, ending at heights {:?} of {}): {:.1} -> {:.1} heights/s, {} heights during, longest stall before {} ms, during {} ms",
            s.node,
            s.delivers_to,
            s.withheld_from,
            s.withheld_heights,
            s.top_height,
            s.heights_per_sec_before,
            s.heights_per_sec_during,
            s.heights_during,
            s.longest_stall_before_ms,
            s.longest_stall_during_ms
        );
    }
    if !report.replay.is_empty() {
        println!("replay: {}", report.replay);
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

/// A `tracing` subscriber on stderr, `RUST_LOG` or `info` (a binary's subscriber: the library
/// never installs one except through this entry point).
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a node's stderr is usually a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_duration("x"), None);
    }

    #[test]
    fn a_byzantine_subset_names_distinct_peers_other_than_the_sender() {
        assert_eq!(parse_subset("1,2", 4, 0), Ok(vec![1, 2]));
        assert_eq!(parse_subset(" 3 ", 4, 1), Ok(vec![3]));
        assert_eq!(parse_subset("", 4, 0), Ok(vec![]));
        for bad in ["0,1", "4", "1,1", "x"] {
            assert!(parse_subset(bad, 4, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn scale_options_are_checked_together() {
        let byz = Some((ByzantineKind::Flood, 0));
        assert_eq!(check_scale(4, 0, None, &None, false), Ok(()));
        assert_eq!(check_scale(100, 100_000, None, &None, false), Ok(()));
        assert_eq!(check_scale(100, 0, Some(1_000), &None, false), Ok(()));
        assert!(check_scale(0, 0, None, &None, false).is_err(), "rate 0");
        assert!(
            check_scale(4, 10, None, &byz, false).is_err(),
            "preload + byzantine"
        );
        assert!(check_scale(4, 0, Some(10), &byz, false).is_err());
        assert!(
            check_scale(4, 0, Some(10), &None, true).is_err(),
            "two measurements"
        );
        assert!(
            check_scale(4, 10, Some(10), &None, false).is_err(),
            "measure sets the preload"
        );
        assert!(check_scale(4, 0, Some(0), &None, false).is_err());
        // The options parse, with their defaults.
        let cli = Cli::try_parse_from([
            "x",
            "localnet",
            "--load-rate",
            "100",
            "--measure-scale",
            "10000",
        ])
        .unwrap();
        let Cmd::Localnet {
            load_rate,
            preload,
            measure_scale,
            ..
        } = cli.cmd
        else {
            panic!("not a localnet command");
        };
        assert_eq!((load_rate, preload, measure_scale), (100, 0, Some(10_000)));
        let Cmd::Localnet { load_rate, .. } = Cli::try_parse_from(["x", "localnet"]).unwrap().cmd
        else {
            panic!("not a localnet command");
        };
        assert_eq!(load_rate, crate::load::DEFAULT_LOAD_RATE);
    }

    /// The localnet's replay line parses back into the same run: every option that shapes it,
    /// the adversary of a Byzantine or subset run included (a failing campaign run of those
    /// layers once printed an empty replay).
    #[test]
    fn a_localnet_replay_line_parses_back_into_the_same_run() {
        use crate::localnet::{LedgerInit, LocalnetOptions, replay_command};
        let opts = LocalnetOptions {
            nodes: 4,
            duration: Duration::from_millis(12_000),
            ledger: LedgerInit {
                name: "orders".into(),
                tick_periods: [(1, 250), (2, 250)].into_iter().collect(),
                pages: (4096, 16),
                setup_digest: None,
                has_outbox: true,
                has_book: true,
            },
            load: None,
            engine: "malachite".into(),
            late_join: true,
            late_join_at_height: Some(400),
            lying_time: false,
            omit_ticks: true,
            kill_restart: false,
            byzantine: Some((ByzantineKind::LieReads, 3)),
            faults: Some(7),
            kill_all: true,
            net_faults: None,
            clock_faults: Some(9),
            disk_faults: None,
            byzantine_subset: Some(vec![0, 1]),
            seed: 42,
            home: None,
            node_bin: PathBuf::from("/nonexistent"),
            upgrade_binary: None,
            retain_blocks: Some(64),
            wipe_restarted: true,
            scale: crate::localnet::ScaleOptions {
                load_rate: 100,
                preload: 100_000,
                preload_payload: None,
            },
        };
        let line = replay_command(&opts);
        let args = std::iter::once("ccron-malachite").chain(line.split_whitespace());
        let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{line}: {e}"));
        let Cmd::Localnet {
            nodes,
            duration,
            ledger,
            tick_period_ms,
            late_join,
            late_join_at_height,
            lying_time,
            omit_ticks,
            no_kill,
            byzantine,
            faults,
            kill_all,
            net_faults,
            clock_faults,
            disk_faults,
            byzantine_subset,
            seed,
            retain_blocks,
            wipe_restarted,
            load_rate,
            preload,
            ..
        } = cli.cmd
        else {
            panic!("{line}: not a localnet command");
        };
        assert_eq!(nodes, 4);
        assert_eq!(parse_duration(&duration), Some(opts.duration));
        assert_eq!(ledger.as_deref(), Some("orders"));
        assert_eq!(tick_period_ms, 250);
        assert!(late_join && omit_ticks && no_kill && kill_all && wipe_restarted && !lying_time);
        let byzantine = byzantine.expect("the adversary is in the replay line");
        assert_eq!(parse_target(&byzantine), Ok((ByzantineKind::LieReads, 3)));
        assert_eq!(
            byzantine_subset.map(|s| parse_subset(&s, 4, 3)),
            Some(Ok(vec![0, 1]))
        );
        assert_eq!(
            (faults, net_faults, clock_faults, disk_faults),
            (Some(7), None, Some(9), None)
        );
        assert_eq!((seed, retain_blocks), (42, Some(64)));
        assert_eq!(late_join_at_height, Some(400));
        assert_eq!((load_rate, preload), (100, 100_000));

        // An honest run's line is a plain localnet (the default tick period is not written).
        let honest = LocalnetOptions {
            ledger: LedgerInit {
                tick_periods: [(1, crate::ledger::DEFAULT_TICK_PERIOD_MS)]
                    .into_iter()
                    .collect(),
                ..opts.ledger.clone()
            },
            late_join: false,
            late_join_at_height: None,
            omit_ticks: false,
            kill_restart: true,
            byzantine: None,
            faults: None,
            kill_all: false,
            clock_faults: None,
            byzantine_subset: None,
            retain_blocks: None,
            wipe_restarted: false,
            scale: crate::localnet::ScaleOptions::default(),
            ..opts
        };
        assert_eq!(
            replay_command(&honest),
            "localnet --nodes 4 --ledger orders --duration 12000ms --seed 42"
        );
    }
}
