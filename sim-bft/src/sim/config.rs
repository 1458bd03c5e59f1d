//! Simulation configuration: the knobs a user sets, their bounds and parsers. What the seed
//! derives from them ([`SimParams`]) lives in `params.rs` and is re-exported here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

pub use super::params::{CrashPlan, JumpPlan, PartitionPlan, SimParams};
pub use crate::crypto::Signatures;
use crate::node::{Millis, NodeId};

/// Errors in a simulation configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Fewer than one replica.
    #[error("at least one replica is needed")]
    NoReplicas,
    /// More Byzantine replicas than the protocol tolerates.
    #[error("{byzantine} Byzantine replicas exceed f = {f}")]
    TooManyByzantine {
        /// Requested Byzantine replicas.
        byzantine: u32,
        /// The tolerated number.
        f: u32,
    },
    /// A pinned Byzantine replica id is out of range.
    #[error("Byzantine replica {0} does not exist")]
    BadReplicaId(NodeId),
    /// A probability outside `0.0..=1.0`.
    #[error("{name} = {value} is not a probability")]
    BadRate {
        /// The knob.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// A period or duration of zero where one is required.
    #[error("{0} must be positive")]
    ZeroPeriod(&'static str),
    /// The system under test rejected the configuration.
    #[error("{0}")]
    Node(String),
    /// A duration that does not parse.
    #[error("bad duration {0:?} (expected e.g. 500ms, 60s, 10m, 1h)")]
    BadDuration(String),
    /// An unknown name for an enumerated knob.
    #[error("unknown {what} {name:?} (expected one of: {expected})")]
    UnknownName {
        /// Which knob.
        what: &'static str,
        /// The name given.
        name: String,
        /// The accepted names.
        expected: &'static str,
    },
    /// A replica id given twice in the pinned Byzantine replicas.
    #[error("Byzantine replica {0} is listed twice")]
    DuplicateReplicaId(NodeId),
    /// The application setup is inconsistent (checked on throwaway instances before any replica
    /// boots: see `ClusterHarness::check_app`).
    #[error("application setup: {check}: {cause}")]
    App {
        /// The check that failed.
        check: &'static str,
        /// Why.
        cause: String,
    },
    /// A start instant that does not parse.
    #[error("bad instant {input:?}: {cause}")]
    BadInstant {
        /// The text given.
        input: String,
        /// Why it does not parse.
        cause: String,
    },
    /// A knob outside its documented range.
    #[error("{name} = {value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// The knob (its command-line name).
        name: &'static str,
        /// Its value, with its unit.
        value: String,
        /// The accepted range.
        allowed: String,
    },
}

/// Longest simulated run: the safety phase plus the liveness bound, and any single duration
/// knob, at most 31 days of simulated time (a month of 30 days plus its liveness bound; small
/// enough that no deadline arithmetic can overflow).
pub const MAX_SIMULATED_MS: u64 = 31 * 24 * 3_600_000;

/// Most replicas in one simulated cluster (every message goes to every replica: cost grows
/// with n squared).
pub const MAX_REPLICAS: u32 = 100;

/// Most user clients in one run. Wall time grows with `clients / request-interval` (each
/// request is signed, verified and ordered): 200 clients at 100 ms take about 25 s of wall time
/// per 7 s simulated in a debug build.
pub const MAX_CLIENTS: u32 = 1_000;

/// Largest clock drift magnitude, parts per million (10%: a replica clock never stops or runs
/// backwards).
pub const MAX_DRIFT_PPM: i64 = 100_000;

/// The replicas' time-service hard limit (`TimeConfig::hard_limit_ms`, 3 s by default): a
/// backup withholds its votes from a primary whose clock is farther than this from its own.
pub fn time_hard_limit_ms() -> u64 {
    crate::replica::TimeConfig::default()
        .hard_limit_ms
        .unsigned_abs()
}

/// What the simulated replicas run (`--ledger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum LedgerKind {
    /// `sim_bft::ledgers::demo`: the key-value ledger with ccron tables (component 1 prunes
    /// every 5 s, component 2 calls a contract every 4 s). The command line's default.
    Demo,
    /// The plain key-value ledger with ticks counted in the reserved pages (no cron tables,
    /// no fires). The library's default.
    #[default]
    Kv,
    /// `sim_bft::ledgers::orders`: every client put places an order whose 2 s expiry is a
    /// delayed task held as replicated data (component 1).
    Orders,
    /// An application built in code (`Cluster::build_with_app`): the command line cannot
    /// replay it, and the replay line says so.
    Custom,
}

impl LedgerKind {
    /// Every CLI name.
    pub const NAMES: &'static str = "demo, kv, orders";

    /// The components that have tables in this ledger (what `--components` defaults to).
    pub fn default_components(self) -> Vec<u32> {
        match self {
            Self::Demo => crate::ledgers::demo::DemoTables::default().components(),
            _ => vec![1],
        }
    }
}

impl FromStr for LedgerKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "demo" => Self::Demo,
            "kv" => Self::Kv,
            "orders" => Self::Orders,
            _ => {
                return Err(ConfigError::UnknownName {
                    what: "ledger",
                    name: s.to_string(),
                    expected: Self::NAMES,
                });
            }
        })
    }
}

impl fmt::Display for LedgerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Demo => "demo",
            Self::Kv => "kv",
            Self::Orders => "orders",
            Self::Custom => "custom",
        })
    }
}

/// Which node implementation the simulator drives (`--node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum NodeKind {
    /// The PBFT replica.
    #[default]
    Replica,
    /// The toy leader-based node (tests the simulator itself; not Byzantine-tolerant).
    Toy,
}

impl NodeKind {
    /// Every CLI name.
    pub const NAMES: &'static str = "replica, toy";
}

impl FromStr for NodeKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "replica" => Self::Replica,
            "toy" => Self::Toy,
            _ => {
                return Err(ConfigError::UnknownName {
                    what: "node kind",
                    name: s.to_string(),
                    expected: Self::NAMES,
                });
            }
        })
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Replica => "replica",
            Self::Toy => "toy",
        })
    }
}

/// How the network is partitioned during the safety phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PartitionKind {
    /// No partitions.
    #[default]
    None,
    /// Two groups that cannot reach each other in either direction.
    Symmetric,
    /// Two groups; messages from the first to the second are lost, the reverse get through.
    OneWay,
    /// One replica cut off from every other in both directions.
    Isolate,
}

impl PartitionKind {
    /// Every kind's CLI name.
    pub const NAMES: &'static str = "none, symmetric, one-way, isolate";
}

impl FromStr for PartitionKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "none" => Self::None,
            "symmetric" => Self::Symmetric,
            "one-way" => Self::OneWay,
            "isolate" => Self::Isolate,
            _ => {
                return Err(ConfigError::UnknownName {
                    what: "partition kind",
                    name: s.to_string(),
                    expected: Self::NAMES,
                });
            }
        })
    }
}

impl fmt::Display for PartitionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Symmetric => "symmetric",
            Self::OneWay => "one-way",
            Self::Isolate => "isolate",
        })
    }
}

/// How replicas decide the agreed time of a batch (a replica setting the harness applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum TimeServiceMode {
    /// Batches carry no agreed time.
    Off,
    /// The reference rule: the primary stamps its clock, backups check bounds.
    Reference,
    /// Byzantine-robust: the median of 2f+1 signed clock samples. The simulator also checks
    /// agreed time against the honest clocks.
    #[default]
    Robust,
}

impl TimeServiceMode {
    /// Every mode's CLI name.
    pub const NAMES: &'static str = "off, reference, robust";
}

impl FromStr for TimeServiceMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "off" => Self::Off,
            "reference" => Self::Reference,
            "robust" => Self::Robust,
            _ => {
                return Err(ConfigError::UnknownName {
                    what: "time service mode",
                    name: s.to_string(),
                    expected: Self::NAMES,
                });
            }
        })
    }
}

impl fmt::Display for TimeServiceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::Reference => "reference",
            Self::Robust => "robust",
        })
    }
}

/// Parses a duration such as `250ms`, `60s`, `10m`, `1h` (a bare number means seconds) into ms.
pub fn parse_duration_ms(s: &str) -> Result<u64, ConfigError> {
    let bad = || ConfigError::BadDuration(s.to_string());
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: u64 = num.parse().map_err(|_| bad())?;
    let mul = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    v.checked_mul(mul).ok_or_else(bad)
}

/// Parses a start instant (`sim-bft run --from`): an RFC 3339 instant such as
/// `2026-03-28T00:00:00Z`, or milliseconds since the Unix epoch with an `ms` suffix (for
/// instants outside the years 0000..=9999).
pub fn parse_instant_ms(s: &str) -> Result<Millis, ConfigError> {
    let t = s.trim();
    if let Some(n) = t.strip_suffix("ms")
        && let Ok(v) = n.parse::<Millis>()
    {
        return Ok(v);
    }
    ccron::cron::parse_rfc3339_ms(t).map_err(|e| ConfigError::BadInstant {
        input: s.to_string(),
        cause: e.to_string(),
    })
}

/// Renders a start instant so that [`parse_instant_ms`] reads it back exactly: RFC 3339 UTC
/// for the years 0000..=9999, otherwise milliseconds with an `ms` suffix.
pub fn format_instant_ms(ms: Millis) -> String {
    // 0000-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999Z.
    const FIRST: Millis = -62_167_219_200_000;
    const LAST: Millis = 253_402_300_799_999;
    if (FIRST..=LAST).contains(&ms) {
        ccron::cron::format_rfc3339_ms(ms)
    } else {
        format!("{ms}ms")
    }
}

/// What a Byzantine replica does.
///
/// The first three are generic and done by the simulator on the replica's outgoing bytes; the
/// others are protocol-aware and are asked of the replica itself through
/// [`super::Role::Byzantine`] when the harness boots it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ByzantineKind {
    /// Sends nothing (still receives).
    #[default]
    Silent,
    /// Sends normally and also re-sends old messages it saw, to random peers.
    Replay,
    /// Flips random bytes in some of its messages.
    Corrupt,
    /// As primary, proposes different batches to different replicas.
    Equivocate,
    /// Starts view changes without cause, with bogus content.
    BogusViewChange,
    /// Serves corrupt state during state transfer.
    CorruptStateTransfer,
    /// Proposes or reports a wrong time.
    LyingTime,
    /// Floods ticks for its components.
    TickFlood,
    /// Corrupts the signature of everything it signs.
    BadSignatures,
    /// Votes with wrong digests.
    BadDigests,
    /// Amplification attacker: requests state from every checkpoint voter, again and again.
    StateRequestFlood,
    /// Serves state transfer slowly and partially (one chunk per request).
    SlowStateSource,
    /// Floods maximal-size messages for future views (the others must bound what they buffer).
    FutureFlood,
    /// As primary, never proposes client 0's requests (orders everyone else's).
    StarveClient,
    /// As primary, re-proposes other batches for seqs already committed in its view.
    Repropose,
    /// As primary, leaves the time certificate out of its batches.
    TimeOmit,
    /// As primary, replays the oldest time certificate backups still accept.
    TimeReplay,
    /// As primary, leaves certificates out and stamps its own time just inside the bound.
    TimeOwn,
    /// Goes silent as primary when its log above the stable checkpoint is fullest, with
    /// maximal-size client requests (implies `max_size_requests`): the view change must
    /// carry (by digest) every prepared batch of a full log.
    FatViewChange,
    /// Asks every peer, every 50 ms, for commit certificates and batches it already has
    /// (cheap requests, expensive answers): the amplification checker bounds what it gets.
    Amplify,
    /// The smarter amplification attacker, with maximal-size client requests (implies
    /// `max_size_requests`): withholds its commits (peers cannot tell what it holds) and asks
    /// every peer, every 50 ms, for certificates and pre-prepares of its whole window by
    /// `Status` and `Have`.
    WithholdCommits,
}

impl ByzantineKind {
    /// Every kind's CLI name.
    pub const NAMES: &'static str = "silent, replay, corrupt, equivocate, bogus-view-change, \
                                     corrupt-state-transfer, lying-time, tick-flood, \
                                     bad-signatures, bad-digests, \
                                     state-request-flood, slow-state-source, \
                                     future-flood, starve-client, repropose, \
                                     time-omit, time-replay, time-own, \
                                     fat-view-change, amplify, withhold-commits";

    /// Every kind, in a stable order.
    pub const ALL: [ByzantineKind; 21] = [
        Self::Silent,
        Self::Replay,
        Self::Corrupt,
        Self::Equivocate,
        Self::BogusViewChange,
        Self::CorruptStateTransfer,
        Self::LyingTime,
        Self::TickFlood,
        Self::BadSignatures,
        Self::BadDigests,
        Self::StateRequestFlood,
        Self::SlowStateSource,
        Self::FutureFlood,
        Self::StarveClient,
        Self::Repropose,
        Self::TimeOmit,
        Self::TimeReplay,
        Self::TimeOwn,
        Self::FatViewChange,
        Self::Amplify,
        Self::WithholdCommits,
    ];

    /// True for behaviours the simulator performs on bytes, whatever the replica's code.
    pub fn is_generic(self) -> bool {
        matches!(self, Self::Silent | Self::Replay | Self::Corrupt)
    }
}

impl FromStr for ByzantineKind {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| ConfigError::UnknownName {
                what: "Byzantine kind",
                name: s.to_string(),
                expected: Self::NAMES,
            })
    }
}

impl fmt::Display for ByzantineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Silent => "silent",
            Self::Replay => "replay",
            Self::Corrupt => "corrupt",
            Self::Equivocate => "equivocate",
            Self::BogusViewChange => "bogus-view-change",
            Self::CorruptStateTransfer => "corrupt-state-transfer",
            Self::LyingTime => "lying-time",
            Self::TickFlood => "tick-flood",
            Self::BadSignatures => "bad-signatures",
            Self::BadDigests => "bad-digests",
            Self::StateRequestFlood => "state-request-flood",
            Self::SlowStateSource => "slow-state-source",
            Self::FutureFlood => "future-flood",
            Self::StarveClient => "starve-client",
            Self::Repropose => "repropose",
            Self::TimeOmit => "time-omit",
            Self::TimeReplay => "time-replay",
            Self::TimeOwn => "time-own",
            Self::FatViewChange => "fat-view-change",
            Self::Amplify => "amplify",
            Self::WithholdCommits => "withhold-commits",
        })
    }
}

/// Fault knobs. The seed decides the details (who, when, how long).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultConfig {
    /// Probability that a message is lost.
    pub drop_rate: f64,
    /// Probability that a message is delivered twice.
    pub duplicate_rate: f64,
    /// Probability that a message gets an extra delay (and so overtakes or is overtaken).
    pub reorder_rate: f64,
    /// Smallest one-way network delay.
    pub min_delay_ms: u64,
    /// Largest one-way network delay (before reordering delay).
    pub max_delay_ms: u64,
    /// Largest extra delay of a reordered message.
    pub reorder_delay_ms: u64,
    /// Partitions during the safety phase.
    pub partition: PartitionKind,
    /// How many crashes (each followed by a restart from the persisted state).
    pub crashes: u32,
    /// How many Byzantine replicas (at most f).
    pub byzantine: u32,
    /// What they do.
    pub byzantine_kind: ByzantineKind,
    /// When non-empty, exactly these replicas are Byzantine (overrides the seeded choice).
    pub pinned_byzantine: Vec<NodeId>,
    /// Largest clock offset of a replica from true time.
    pub max_clock_skew_ms: Millis,
    /// Largest clock drift, in parts per million.
    pub max_drift_ppm: i64,
    /// How many clock jumps (a replica's clock steps forward or back).
    pub clock_jumps: u32,
    /// Largest clock jump.
    pub max_clock_jump_ms: Millis,
    /// State growth (0: off): each client request writes a fresh key with a value of this many
    /// bytes, and the replicas' `max_snapshot_bytes` is lowered to
    /// [`super::cluster::STATE_GROWTH_SNAPSHOT_BYTES`], so the state reaches the snapshot limit
    /// within a run (restart and state transfer must still work).
    pub state_growth_bytes: u64,
    /// User clients send maximal admissible requests (a Put whose value fills the replicas'
    /// `max_request_bytes`, minus a small margin for the encoding) instead of small ones.
    pub max_size_requests: bool,
    /// Crash at a protocol point: probability that an honest replica crashes right after it
    /// synced a new view to disk (joining a view change, or entering a view), before the rest of
    /// that step's outputs leave; it restarts from its disk after a seeded delay. One replica
    /// at a time, safety phase only. 0 disables it (and draws nothing from the seed).
    pub crash_at_view_change: f64,
}

impl FaultConfig {
    /// True when the network and the nodes are fault-free apart from the Byzantine replicas
    /// and clock skew / drift (no loss, partition, crash or clock jump): what the starvation
    /// checker needs to judge requests sent before the faults heal.
    pub fn network_clean(&self) -> bool {
        self.drop_rate == 0.0
            && self.partition == PartitionKind::None
            && self.crashes == 0
            && self.crash_at_view_change == 0.0
            && self.clock_jumps == 0
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            drop_rate: 0.0,
            duplicate_rate: 0.0,
            reorder_rate: 0.0,
            min_delay_ms: 1,
            max_delay_ms: 5,
            reorder_delay_ms: 50,
            partition: PartitionKind::None,
            crashes: 0,
            byzantine: 0,
            byzantine_kind: ByzantineKind::Silent,
            pinned_byzantine: Vec::new(),
            max_clock_skew_ms: 0,
            max_drift_ppm: 0,
            clock_jumps: 0,
            max_clock_jump_ms: 0,
            state_growth_bytes: 0,
            max_size_requests: false,
            crash_at_view_change: 0.0,
        }
    }
}

/// Everything a simulated run needs besides the seed-derived details.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimConfig {
    /// The run's seed: every random choice derives from it.
    pub seed: u64,
    /// Number of replicas n.
    pub replicas: u32,
    /// The node implementation the run drives.
    pub node: NodeKind,
    /// What the replicas run. [`super::cluster::ClusterHarness::new`] boots it; an application
    /// built in code is [`LedgerKind::Custom`].
    pub ledger: LedgerKind,
    /// With [`LedgerKind::Orders`]: about one client put in eight installs an IANA zone into the
    /// schedule book instead of placing an order (`--zone-installs`).
    pub zone_installs: bool,
    /// Simulated length of the safety phase (faults active).
    pub duration_ms: u64,
    /// Bound on the liveness phase (faults healed) within which every honest replica must progress.
    pub liveness_ms: u64,
    /// Period of internal ticks per component (0: no ticks).
    pub tick_period_ms: u64,
    /// Components that tick.
    pub components: Vec<u32>,
    /// Per-component tick periods overriding `tick_period_ms` (components still come from
    /// `components`).
    pub component_periods_ms: BTreeMap<u32, u64>,
    /// Rotate tick senders (F+1 replicas per period) instead of every replica ticking.
    pub rotate_ticks: bool,
    /// Replicas' tick timers start at a seeded phase in `0..tick_spread_ms` (`None`: anywhere
    /// within one period; `Some(0)`: all replicas tick at the same instants, as timers aligned
    /// on clock boundaries would).
    pub tick_spread_ms: Option<u64>,
    /// Number of user clients.
    pub clients: u32,
    /// Interval between two requests of one client (0: no client requests).
    pub request_interval_ms: u64,
    /// The faults.
    pub faults: FaultConfig,
    /// The time service the replicas run (the harness applies it).
    pub time_service: TimeServiceMode,
    /// The signature scheme of replicas and clients (`--signatures`): ed25519 by default, or
    /// the simulator-only `sim` tags ([`crate::crypto::Signatures`]).
    pub signatures: Signatures,
    /// Check agreed time against honest clocks (set with the robust time service).
    pub check_time_bounds: bool,
    /// How far agreed time may run ahead of the fastest honest clock.
    pub time_ahead_slack_ms: Millis,
    /// How far agreed time may lag the slowest honest clock when the batch `time_lag_seqs`
    /// below it was first executed (see [`super::Checker::with_time_lag_seqs`]).
    pub time_behind_slack_ms: Millis,
    /// How many seqs before a batch its lag is measured from (0: from its own execution). For
    /// the replica: `max_in_flight + 2`, a batch being proposed only after the one
    /// `max_in_flight` below it executed, plus one null batch a view change may put after it.
    pub time_lag_seqs: u64,
    /// True time at the start of the run (ms since the Unix epoch).
    pub epoch_ms: Millis,
    /// Bound on processed events (a runaway run stops with a violation).
    pub max_events: u64,
    /// Run the harness's node invariant check after every this many inputs of each honest node
    /// (1: after every step; 0: never). Checks can be costly (the replica hashes its stable
    /// snapshot); benchmarks turn them off.
    pub node_check_every: u64,
    /// Longest judged fault-phase stall before a [`crate::sim::ViolationKind::FaultPhaseStall`]
    /// (`None`: derived from the replica's view-change and state-transfer timeouts plus the
    /// workload's quiet gap, [`super::derived_stall_bound_ms`], see
    /// `docs/simulator.md`; `Some(0)`: stalls are measured, never a violation).
    pub stall_bound_ms: Option<u64>,
    /// The clients send a workload built in code ([`super::cluster::Cluster::workload`])
    /// instead of the stock key-value puts (set by the builder; the replay line says so).
    pub custom_workload: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            replicas: 4,
            node: NodeKind::Replica,
            ledger: LedgerKind::Kv,
            zone_installs: false,
            duration_ms: 10_000,
            liveness_ms: 30_000,
            tick_period_ms: 1_000,
            components: vec![1],
            component_periods_ms: BTreeMap::new(),
            rotate_ticks: true,
            tick_spread_ms: None,
            clients: 2,
            request_interval_ms: 100,
            faults: FaultConfig::default(),
            time_service: TimeServiceMode::Robust,
            signatures: Signatures::Ed25519,
            check_time_bounds: true,
            time_ahead_slack_ms: 1_000,
            time_behind_slack_ms: 7_000,
            time_lag_seqs: 6,
            // 2026-01-01T00:00:00Z.
            epoch_ms: 1_767_225_600_000,
            max_events: 50_000_000,
            node_check_every: 1,
            stall_bound_ms: None,
            custom_workload: false,
        }
    }
}

impl SimConfig {
    /// The tick period of `component` (0: it does not tick).
    pub fn tick_period_of(&self, component: u32) -> u64 {
        self.component_periods_ms
            .get(&component)
            .copied()
            .unwrap_or(self.tick_period_ms)
    }

    /// f = floor((n - 1) / 3), the Byzantine replicas tolerated.
    pub fn f(&self) -> u32 {
        self.replicas.saturating_sub(1) / 3
    }

    /// The largest distance between two honest replicas' clocks the clock knobs allow after the
    /// heal (twice the skew plus twice the drift over the whole run; clock jumps are undone at
    /// the heal and not counted). Beyond [`time_hard_limit_ms`] the time service may withhold
    /// votes for ever and the cluster stall.
    pub fn max_honest_clock_distance_ms(&self) -> u64 {
        let fc = &self.faults;
        let run_ms = u128::from(self.duration_ms.saturating_add(self.liveness_ms));
        let drift = u128::from(fc.max_drift_ppm.unsigned_abs()) * run_ms / 1_000_000;
        let d = 2 * u128::from(fc.max_clock_skew_ms.unsigned_abs()) + 2 * drift;
        u64::try_from(d).unwrap_or(u64::MAX)
    }

    /// True when the run's honest clocks may be farther apart than the time service tolerates
    /// (the replica runs a time service and [`Self::max_honest_clock_distance_ms`] exceeds
    /// [`time_hard_limit_ms`]). `sim-bft run` refuses such a run without `--allow-clock-stall`.
    pub fn clocks_beyond_time_bound(&self) -> bool {
        self.node == NodeKind::Replica
            && self.time_service != TimeServiceMode::Off
            && self.max_honest_clock_distance_ms() > time_hard_limit_ms()
    }

    /// Checks the configuration: every knob within its documented range (see the constants of
    /// this module), so a valid configuration runs to its end.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.replicas == 0 {
            return Err(ConfigError::NoReplicas);
        }
        let too_big = |name: &'static str, value: u64, max: u64, unit: &str| {
            if value > max {
                Err(ConfigError::OutOfRange {
                    name,
                    value: format!("{value}{unit}"),
                    allowed: format!("at most {max}{unit}"),
                })
            } else {
                Ok(())
            }
        };
        too_big(
            "replicas",
            u64::from(self.replicas),
            u64::from(MAX_REPLICAS),
            "",
        )?;
        too_big(
            "clients",
            u64::from(self.clients),
            u64::from(MAX_CLIENTS),
            "",
        )?;
        let days = " ms (31 days)";
        let total = self.duration_ms.checked_add(self.liveness_ms);
        too_big("duration", self.duration_ms, MAX_SIMULATED_MS, " ms")
            .map_err(|e| with_days(e, days))?;
        too_big("liveness", self.liveness_ms, MAX_SIMULATED_MS, " ms")
            .map_err(|e| with_days(e, days))?;
        if total.is_none_or(|t| t > MAX_SIMULATED_MS) {
            return Err(ConfigError::OutOfRange {
                name: "duration + liveness",
                value: format!(
                    "{} ms",
                    u128::from(self.duration_ms) + u128::from(self.liveness_ms)
                ),
                allowed: format!("at most {MAX_SIMULATED_MS}{days}"),
            });
        }
        let fc = &self.faults;
        let mut spans = vec![
            ("tick-period", self.tick_period_ms),
            ("tick-spread", self.tick_spread_ms.unwrap_or(0)),
            ("request-interval", self.request_interval_ms),
            ("max-delay", fc.max_delay_ms),
            ("min-delay", fc.min_delay_ms),
            ("reorder-delay", fc.reorder_delay_ms),
        ];
        spans.extend(
            self.component_periods_ms
                .values()
                .map(|p| ("component tick period", *p)),
        );
        for (name, v) in spans {
            too_big(name, v, MAX_SIMULATED_MS, " ms")?;
        }
        for (name, v) in [
            ("clock-skew", fc.max_clock_skew_ms),
            ("clock-jump", fc.max_clock_jump_ms),
        ] {
            if !(0..=MAX_SIMULATED_MS as i64).contains(&v) {
                return Err(ConfigError::OutOfRange {
                    name,
                    value: format!("{v} ms"),
                    allowed: format!("0..={MAX_SIMULATED_MS} ms (a magnitude: drawn in [-D, D])"),
                });
            }
        }
        if !(0..=MAX_DRIFT_PPM).contains(&fc.max_drift_ppm) {
            return Err(ConfigError::OutOfRange {
                name: "drift-ppm",
                value: fc.max_drift_ppm.to_string(),
                allowed: format!("0..={MAX_DRIFT_PPM} (a magnitude: drawn in [-P, P])"),
            });
        }
        if fc.min_delay_ms > fc.max_delay_ms {
            return Err(ConfigError::OutOfRange {
                name: "max-delay",
                value: format!("{} ms", fc.max_delay_ms),
                allowed: format!("at least the smallest delay, {} ms", fc.min_delay_ms),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = fc.pinned_byzantine.iter().find(|id| !seen.insert(**id)) {
            return Err(ConfigError::DuplicateReplicaId(*dup));
        }
        let fc = &self.faults;
        for (name, value) in [
            ("drop-rate", fc.drop_rate),
            ("duplicate-rate", fc.duplicate_rate),
            ("reorder-rate", fc.reorder_rate),
            ("crash-at-view-change", fc.crash_at_view_change),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ConfigError::BadRate { name, value });
            }
        }
        let byz = if fc.pinned_byzantine.is_empty() {
            fc.byzantine
        } else {
            fc.pinned_byzantine.len() as u32
        };
        if byz > self.f() {
            return Err(ConfigError::TooManyByzantine {
                byzantine: byz,
                f: self.f(),
            });
        }
        if let Some(bad) = fc.pinned_byzantine.iter().find(|id| **id >= self.replicas) {
            return Err(ConfigError::BadReplicaId(*bad));
        }
        if self.liveness_ms == 0 {
            return Err(ConfigError::ZeroPeriod("liveness bound"));
        }
        if let Some(c) = self
            .component_periods_ms
            .keys()
            .find(|c| !self.components.contains(c))
        {
            return Err(ConfigError::OutOfRange {
                name: "component-period",
                value: format!("component {c}"),
                allowed: format!("a component that ticks (components: {:?})", self.components),
            });
        }
        Ok(())
    }
}

/// `allowed` of an [`ConfigError::OutOfRange`] for a simulated length, in days too.
fn with_days(e: ConfigError, days: &str) -> ConfigError {
    match e {
        ConfigError::OutOfRange { name, value, .. } => ConfigError::OutOfRange {
            name,
            value,
            allowed: format!("at most {MAX_SIMULATED_MS}{days}"),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_spread_bounds_the_phases() {
        let mut c = SimConfig {
            tick_spread_ms: Some(0),
            ..SimConfig::default()
        };
        assert!(SimParams::derive(&c).tick_phase_ms.iter().all(|p| *p == 0));
        c.tick_spread_ms = Some(10);
        assert!(SimParams::derive(&c).tick_phase_ms.iter().all(|p| *p < 10));
        c.tick_spread_ms = None;
        c.seed = 3;
        assert!(SimParams::derive(&c).tick_phase_ms.iter().any(|p| *p >= 10));
    }

    #[test]
    fn names_round_trip() {
        for k in ByzantineKind::ALL {
            assert_eq!(k.to_string().parse::<ByzantineKind>(), Ok(k));
        }
        for p in ["none", "symmetric", "one-way", "isolate"] {
            assert_eq!(
                p.parse::<PartitionKind>().map(|k| k.to_string()),
                Ok(p.into())
            );
        }
        assert!("bogus".parse::<PartitionKind>().is_err());
    }

    #[test]
    fn instants_round_trip() {
        for ms in [
            0,
            -1,
            1_774_656_000_000,
            1_774_656_000_123,
            -62_167_219_200_000,
            253_402_300_799_999,
            253_402_300_800_000,
            Millis::MAX - 2_000,
            Millis::MIN,
        ] {
            assert_eq!(parse_instant_ms(&format_instant_ms(ms)), Ok(ms), "{ms}");
        }
        assert_eq!(
            parse_instant_ms("2026-03-28T00:00:00Z"),
            Ok(1_774_656_000_000)
        );
        assert!(matches!(
            parse_instant_ms("yesterday"),
            Err(ConfigError::BadInstant { .. })
        ));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("60s"), Ok(60_000));
        assert_eq!(parse_duration_ms("10m"), Ok(600_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("7"), Ok(7_000));
        for bad in ["", "ms", "1d", "-1s", "1.5s", "99999999999999999999h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_rejects_too_many_byzantine() {
        let mut c = SimConfig::default();
        c.faults.byzantine = 2;
        assert_eq!(
            c.validate(),
            Err(ConfigError::TooManyByzantine { byzantine: 2, f: 1 })
        );
        c.faults.byzantine = 1;
        assert_eq!(c.validate(), Ok(()));
        c.faults.drop_rate = 1.5;
        assert!(matches!(c.validate(), Err(ConfigError::BadRate { .. })));
    }

    #[test]
    fn validation_bounds_every_cli_knob() {
        let mut c = SimConfig::default();
        c.faults.pinned_byzantine = vec![1, 1];
        assert_eq!(c.validate(), Err(ConfigError::DuplicateReplicaId(1)));
        let mut c = SimConfig {
            duration_ms: u64::MAX,
            ..SimConfig::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        c.duration_ms = MAX_SIMULATED_MS;
        c.liveness_ms = 1;
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        c.duration_ms = MAX_SIMULATED_MS - 1;
        assert_eq!(c.validate(), Ok(()));
        c.faults.max_drift_ppm = -1;
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        c.faults.max_drift_ppm = MAX_DRIFT_PPM;
        assert_eq!(c.validate(), Ok(()));
        c.clients = MAX_CLIENTS + 1;
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
    }

    #[test]
    fn the_command_line_says_what_only_code_can_set() {
        let mut c = SimConfig::default();
        assert!(!c.command_line().contains('#'), "{}", c.command_line());
        assert!(c.command_line().contains("--ledger kv --"));
        c.ledger = LedgerKind::Custom;
        c.component_periods_ms.insert(1, 500);
        let line = c.command_line();
        assert!(!line.contains("--ledger"), "{line}");
        assert!(line.contains("# set in code"), "{line}");
        assert!(line.contains("--component-period 1=500ms"), "{line}");
        assert!(line.contains("--from 2026-01-01T00:00:00Z"), "{line}");
        c.custom_workload = true;
        assert!(c.command_line().contains("a workload built in code"));
        // A period for a component that does not tick is an inconsistent setup.
        c.component_periods_ms.insert(9, 500);
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        c.component_periods_ms.remove(&9);
        // A clock spread beyond the time service's bound needs the flag to replay.
        c.faults.max_clock_skew_ms = 1_501;
        assert!(c.clocks_beyond_time_bound());
        assert!(c.command_line().contains("--allow-clock-stall"));
        c.faults.max_clock_skew_ms = 1_500;
        assert!(!c.clocks_beyond_time_bound());
    }

    #[test]
    fn params_are_a_function_of_the_seed() {
        let mut c = SimConfig::default();
        c.faults.partition = PartitionKind::Symmetric;
        c.faults.crashes = 2;
        c.faults.byzantine = 1;
        c.faults.max_clock_skew_ms = 100;
        c.faults.clock_jumps = 2;
        c.faults.max_clock_jump_ms = 1000;
        let a = SimParams::derive(&c);
        assert_eq!(a, SimParams::derive(&c));
        c.seed = 1;
        assert_ne!(a, SimParams::derive(&c));
        assert_eq!(a.byzantine.len(), 1);
        for cr in &a.crashes {
            assert!(cr.at_ms < cr.restart_ms && cr.restart_ms <= c.duration_ms);
        }
        for p in &a.partitions {
            // Symmetric: every blocked link is blocked both ways.
            for (x, y) in &p.blocked {
                assert!(p.blocked.contains(&(*y, *x)));
            }
        }
    }
}
