//! Simulation configuration (the knobs a user sets) and parameters (everything the seed derives).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::rng::SimRng;
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
    /// As primary, leaves the time certificate out of its batches.
    TimeOmit,
    /// As primary, replays the oldest time certificate backups still accept.
    TimeReplay,
    /// As primary, leaves certificates out and stamps its own time just inside the bound.
    TimeOwn,
}

impl ByzantineKind {
    /// Every kind's CLI name.
    pub const NAMES: &'static str = "silent, replay, corrupt, equivocate, bogus-view-change, \
                                     corrupt-state-transfer, lying-time, tick-flood, \
                                     bad-signatures, bad-digests, \
                                     time-omit, time-replay, time-own";

    /// Every kind, in a stable order.
    pub const ALL: [ByzantineKind; 13] = [
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
        Self::TimeOmit,
        Self::TimeReplay,
        Self::TimeOwn,
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
            Self::TimeOmit => "time-omit",
            Self::TimeReplay => "time-replay",
            Self::TimeOwn => "time-own",
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
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            replicas: 4,
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
            check_time_bounds: true,
            time_ahead_slack_ms: 1_000,
            time_behind_slack_ms: 7_000,
            time_lag_seqs: 6,
            // 2026-01-01T00:00:00Z.
            epoch_ms: 1_767_225_600_000,
            max_events: 50_000_000,
            node_check_every: 1,
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

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.replicas == 0 {
            return Err(ConfigError::NoReplicas);
        }
        let fc = &self.faults;
        for (name, value) in [
            ("drop-rate", fc.drop_rate),
            ("duplicate-rate", fc.duplicate_rate),
            ("reorder-rate", fc.reorder_rate),
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
        Ok(())
    }
}

/// A crash and the restart that follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CrashPlan {
    /// The replica.
    pub node: NodeId,
    /// When it crashes (simulated ms).
    pub at_ms: u64,
    /// When it restarts (at the latest when the faults heal).
    pub restart_ms: u64,
}

/// A partition window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionPlan {
    /// Start (simulated ms).
    pub from_ms: u64,
    /// End (simulated ms).
    pub until_ms: u64,
    /// Directed links that lose every message while it lasts.
    pub blocked: Vec<(NodeId, NodeId)>,
}

/// A clock jump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JumpPlan {
    /// The replica.
    pub node: NodeId,
    /// When (simulated ms).
    pub at_ms: u64,
    /// How far its clock steps (negative: backwards).
    pub delta_ms: Millis,
}

/// Everything the seed derived from a [`SimConfig`]: printed at the start of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimParams {
    /// f.
    pub f: u32,
    /// The Byzantine replicas.
    pub byzantine: Vec<NodeId>,
    /// Clock offset per replica.
    pub clock_offset_ms: Vec<Millis>,
    /// Clock drift per replica, in parts per million.
    pub drift_ppm: Vec<i64>,
    /// Phase of each replica's tick timer.
    pub tick_phase_ms: Vec<u64>,
    /// Crashes and restarts.
    pub crashes: Vec<CrashPlan>,
    /// Partition windows.
    pub partitions: Vec<PartitionPlan>,
    /// Clock jumps.
    pub jumps: Vec<JumpPlan>,
}

impl SimParams {
    /// Derives the parameters from `cfg` (assumed valid) and its seed.
    pub fn derive(cfg: &SimConfig) -> Self {
        let n = cfg.replicas;
        let fc = &cfg.faults;
        let d = cfg.duration_ms.max(1);

        let mut r = SimRng::split(cfg.seed, "byzantine-choice");
        let byzantine = if fc.pinned_byzantine.is_empty() {
            let mut ids: Vec<NodeId> = (0..n).collect();
            // Fisher-Yates with the stable generator.
            for i in (1..ids.len()).rev() {
                let j = r.below(i as u64 + 1) as usize;
                ids.swap(i, j);
            }
            let mut b: Vec<NodeId> = ids.into_iter().take(fc.byzantine as usize).collect();
            b.sort_unstable();
            b
        } else {
            let mut b = fc.pinned_byzantine.clone();
            b.sort_unstable();
            b.dedup();
            b
        };

        let mut r = SimRng::split(cfg.seed, "clocks");
        let clock_offset_ms = (0..n).map(|_| r.symmetric(fc.max_clock_skew_ms)).collect();
        let drift_ppm = (0..n).map(|_| r.symmetric(fc.max_drift_ppm)).collect();
        let tick_spread_ms = cfg
            .tick_spread_ms
            .unwrap_or(cfg.tick_period_ms)
            .min(cfg.tick_period_ms);
        let tick_phase_ms = (0..n).map(|_| r.below(tick_spread_ms)).collect();
        let mut jumps: Vec<JumpPlan> = (0..fc.clock_jumps)
            .map(|_| JumpPlan {
                node: r.below(u64::from(n)) as NodeId,
                at_ms: r.below(d),
                delta_ms: r.symmetric(fc.max_clock_jump_ms),
            })
            .collect();
        jumps.sort_by_key(|j| (j.at_ms, j.node));

        let mut r = SimRng::split(cfg.seed, "crashes");
        let mut crashes: Vec<CrashPlan> = (0..fc.crashes)
            .map(|_| {
                let at_ms = r.range(d / 10, d * 7 / 10);
                let restart_ms = (at_ms + r.range(d / 20, d / 4).max(1)).min(d);
                CrashPlan {
                    node: r.below(u64::from(n)) as NodeId,
                    at_ms,
                    restart_ms,
                }
            })
            .collect();
        crashes.sort_by_key(|c| (c.at_ms, c.node));

        let mut r = SimRng::split(cfg.seed, "partitions");
        let mut partitions = Vec::new();
        if fc.partition != PartitionKind::None && n > 1 {
            let windows = 1 + r.below(3);
            for _ in 0..windows {
                let from_ms = r.below(d * 8 / 10 + 1);
                let until_ms = (from_ms + r.range(d / 20, d / 4).max(1)).min(d);
                let blocked = blocked_links(fc.partition, n, &mut r);
                partitions.push(PartitionPlan {
                    from_ms,
                    until_ms,
                    blocked,
                });
            }
            partitions.sort_by_key(|p| (p.from_ms, p.until_ms));
        }

        Self {
            f: cfg.f(),
            byzantine,
            clock_offset_ms,
            drift_ppm,
            tick_phase_ms,
            crashes,
            partitions,
            jumps,
        }
    }
}

fn blocked_links(kind: PartitionKind, n: u32, r: &mut SimRng) -> Vec<(NodeId, NodeId)> {
    let mut out = Vec::new();
    match kind {
        PartitionKind::None => {}
        PartitionKind::Isolate => {
            let x = r.below(u64::from(n)) as NodeId;
            for y in (0..n).filter(|y| *y != x) {
                out.push((x, y));
                out.push((y, x));
            }
        }
        PartitionKind::Symmetric | PartitionKind::OneWay => {
            // A random non-empty proper subset forms side A.
            let side_a: Vec<bool> = loop {
                let v: Vec<bool> = (0..n).map(|_| r.chance(0.5)).collect();
                if v.iter().any(|x| *x) && v.iter().any(|x| !*x) {
                    break v;
                }
            };
            for a in (0..n).filter(|i| side_a[*i as usize]) {
                for b in (0..n).filter(|i| !side_a[*i as usize]) {
                    out.push((a, b));
                    if kind == PartitionKind::Symmetric {
                        out.push((b, a));
                    }
                }
            }
        }
    }
    out.sort_unstable();
    out
}

impl fmt::Display for SimParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  f = {}, byzantine = {:?}", self.f, self.byzantine)?;
        writeln!(
            f,
            "  clock offsets (ms) = {:?}, drift (ppm) = {:?}",
            self.clock_offset_ms, self.drift_ppm
        )?;
        for c in &self.crashes {
            writeln!(
                f,
                "  crash replica {} at {} ms, restart at {} ms",
                c.node, c.at_ms, c.restart_ms
            )?;
        }
        for p in &self.partitions {
            writeln!(
                f,
                "  partition {}..{} ms, blocked links {:?}",
                p.from_ms, p.until_ms, p.blocked
            )?;
        }
        for j in &self.jumps {
            writeln!(
                f,
                "  clock jump replica {} at {} ms by {} ms",
                j.node, j.at_ms, j.delta_ms
            )?;
        }
        Ok(())
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
