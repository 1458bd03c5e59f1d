//! The localnet's JSON report: per node, the Byzantine node's part, lateness, liveness and the
//! supervisor's part (moved out of `localnet.rs` as is; re-exported there).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hostile::ByzantineKind;

/// One node in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeReport {
    /// Index.
    pub id: usize,
    /// PID of its last process.
    pub pid: u32,
    /// Whether it was honest.
    pub honest: bool,
    /// Last decided height.
    pub last_executed_seq: u64,
    /// State digest at that height.
    pub state_digest: String,
    /// Ticks executed.
    pub ticks_executed: u64,
    /// Ticks skipped by the host's tick gate or refused by the ledger.
    #[serde(default)]
    pub ticks_skipped: u64,
    /// Actions fired.
    pub fires: u64,
    /// Proposals it rejected.
    pub rejected_proposals: u64,
    /// Heights it obtained through sync.
    pub synced_heights: u64,
    /// Agreed time of its last height (Unix ms).
    pub agreed_time_ms: i64,
    /// Ticks evaluated per submitter (validator index): ticks from every validator, not just
    /// the proposers'.
    #[serde(default)]
    pub ticks_by_submitter: Vec<u64>,
    /// Peak resident set of its last process (`VmHWM` of `/proc/<pid>/status`, KiB), read just
    /// before the localnet stops it; 0 when unavailable (not Linux, or the process was gone).
    #[serde(default)]
    pub peak_rss_kb: u64,
    /// The height of the snapshot its last process restored from at start (`None`: it
    /// replayed its whole block store or started empty).
    #[serde(default)]
    pub restored_from_height: Option<u64>,
    /// Blocks its last process re-executed at start (above the restored snapshot).
    #[serde(default)]
    pub replayed_blocks: u64,
    /// Bytes of its state on disk at the end (block and part logs, snapshots, the engine's
    /// WAL, tick floor: everything in its directory but the logs and reports).
    #[serde(default)]
    pub disk_bytes: u64,
    /// Bytes of its log and report files at the end (`node.log`, `digests.log`, ...).
    #[serde(default)]
    pub log_bytes: u64,
    /// What it refused, by reason ([`refusals`](super::refusals)): proposal parts, proposals, ticks, requests,
    /// engine signatures, own ticks' forwards that did not deliver; only non-zero counts.
    #[serde(default)]
    pub refusals: BTreeMap<String, u64>,
    /// The height of its newest snapshot after the localnet stopped it (SIGTERM: a node writes
    /// one of its last height before it exits).
    #[serde(default)]
    pub final_snapshot: Option<u64>,
}

/// A Byzantine run's verdict on the honest nodes (one honest node that ran the whole time,
/// from its `digests.log`: the heights and agreed times it executed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ByzantineReport {
    /// The kind.
    pub kind: ByzantineKind,
    /// The Byzantine node.
    pub node: usize,
    /// When the behaviour started (Unix ms).
    pub from_ms: i64,
    /// The honest node measured.
    pub measured_node: usize,
    /// Heights per second of agreed time before the fault (from height 2 to `from_ms`).
    pub heights_per_sec_before: f64,
    /// Heights per second of agreed time during the fault (from `from_ms` to the last height).
    pub heights_per_sec_during: f64,
    /// Heights decided during the fault.
    pub heights_during: u64,
    /// The longest time between two consecutive heights' agreed times during the fault (ms).
    pub longest_stall_during_ms: i64,
    /// The longest such time before it (ms).
    pub longest_stall_before_ms: i64,
    /// Per honest node that ran the whole time, the votes it verified during the fault, by
    /// voter: from its first status written at a height whose agreed time is at or after
    /// `from_ms` (every vote counted after it was signed after `from_ms`) to its last.
    #[serde(default)]
    pub votes_during: Vec<VotesDuring>,
}

/// The votes one honest node verified during a Byzantine run's fault
/// ([`ByzantineReport::votes_during`]; from its `status.json`'s `votes_verified`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct VotesDuring {
    /// The honest node.
    pub node: usize,
    /// The height of its status the count starts from.
    pub from_height: u64,
    /// Its last height.
    pub to_height: u64,
    /// Votes (prevotes and precommits) it verified in between, per voter by node index.
    pub by_voter: Vec<u64>,
    /// The highest height of a vote of each voter it verified (over the whole run).
    pub last_height_by_voter: Vec<u64>,
}

/// The run's last two thirds (from D/3, when a `--byzantine` node turns faulty and a
/// `--byzantine-subset` cut is applied; of the time run when a `--late-join-at-height` run
/// ended early) on the measured node, for every run: an honest run's
/// is the baseline a Byzantine run of the same length is compared with (`localnet
/// --measure-byzantine`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct WindowReport {
    /// The measured node.
    pub node: usize,
    /// The window's start (Unix ms).
    pub from_ms: i64,
    /// Heights per second of agreed time in the window.
    pub heights_per_sec: f64,
    /// Heights decided in it.
    pub heights: u64,
    /// The longest gap between consecutive heights' agreed times in it (ms).
    pub longest_stall_ms: i64,
    /// Lateness of the fires due in it (due at or after `from_ms`).
    pub lateness: Lateness,
}

/// A `--byzantine-subset` run's verdict: the Byzantine node's consensus messages reached only
/// `delivers_to` from `from_ms` on; the chain's liveness on an honest node that ran the whole
/// time (from its `digests.log`), and where the nodes it withheld from ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SubsetReport {
    /// The Byzantine node.
    pub node: usize,
    /// The peers it delivered to.
    pub delivers_to: Vec<usize>,
    /// The peers it withheld from (its links to them cut).
    pub withheld_from: Vec<usize>,
    /// When the links were cut (Unix ms).
    pub from_ms: i64,
    /// The honest node measured.
    pub measured_node: usize,
    /// Heights per second of agreed time before.
    pub heights_per_sec_before: f64,
    /// Heights per second of agreed time during.
    pub heights_per_sec_during: f64,
    /// Heights decided during.
    pub heights_during: u64,
    /// The longest time between two consecutive heights' agreed times before (ms).
    pub longest_stall_before_ms: i64,
    /// The longest such time during (ms).
    pub longest_stall_during_ms: i64,
    /// The last height of each node it withheld from (in `withheld_from`'s order).
    pub withheld_heights: Vec<u64>,
    /// The highest last height of any node.
    pub top_height: u64,
}

/// Lateness of the due periodic actions one node ran (ms, from its `fires.log`): each fire's
/// agreed time minus its due instant, and the node's wall clock when it executed the block
/// minus the due instant.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Lateness {
    /// The node measured (honest, never restarted).
    pub node: usize,
    /// Fires measured (actions with a time due, executed on decision).
    pub fires: u64,
    /// Median of agreed time minus due.
    pub agreed_p50_ms: i64,
    /// 99th percentile of agreed time minus due.
    pub agreed_p99_ms: i64,
    /// Largest agreed time minus due.
    pub agreed_max_ms: i64,
    /// Median of wall clock at execution minus due.
    pub wall_p50_ms: i64,
    /// 99th percentile of wall clock at execution minus due.
    pub wall_p99_ms: i64,
    /// Largest wall clock at execution minus due.
    pub wall_max_ms: i64,
}

/// The `p` percentile (0..=1, nearest rank on the sorted samples; 0 when empty).
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Lateness {
    /// Percentiles of `(agreed - due, wall - due)` samples.
    pub fn from_samples(node: usize, samples: &[(i64, i64)]) -> Self {
        let mut agreed: Vec<i64> = samples.iter().map(|s| s.0).collect();
        let mut wall: Vec<i64> = samples.iter().map(|s| s.1).collect();
        agreed.sort_unstable();
        wall.sort_unstable();
        Self {
            node,
            fires: samples.len() as u64,
            agreed_p50_ms: percentile(&agreed, 0.5),
            agreed_p99_ms: percentile(&agreed, 0.99),
            agreed_max_ms: agreed.last().copied().unwrap_or(0),
            wall_p50_ms: percentile(&wall, 0.5),
            wall_p99_ms: percentile(&wall, 0.99),
            wall_max_ms: wall.last().copied().unwrap_or(0),
        }
    }
}

/// The localnet report (the sim-bft report's fields where they apply, plus `restarts`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// The engine.
    pub engine: String,
    /// Nodes.
    pub nodes: Vec<NodeReport>,
    /// Whether every honest node has the same digest at every height they share.
    pub honest_agree: bool,
    /// Agreement or liveness violations found.
    pub violations: Vec<String>,
    /// Restarts performed (SIGKILL + restart from storage).
    pub restarts: u32,
    /// Distinct PIDs spawned.
    pub pids: Vec<u32>,
    /// Highest height decided by any honest node.
    pub max_height: u64,
    /// Heights per second (max_height / duration).
    pub heights_per_sec: f64,
    /// The config directory used.
    pub home: String,
    /// Ticks committed per second (executed + skipped by the gate, of the lateness node, or of
    /// node 0 without one).
    #[serde(default)]
    pub committed_ticks_per_sec: f64,
    /// Lateness of the due periodic actions on one honest node that was never restarted
    /// (`None` when there is no such node or it kept no `fires.log`).
    #[serde(default)]
    pub lateness_ms: Option<Lateness>,
    /// With a ledger that has an outbox (`orders`): the outbox records a consumer believed at
    /// the end of the run, read over HTTP from every node's read endpoint and counted only where
    /// f+1 nodes returned a record identically (`ccron_http::QuorumReader`); `None` without one.
    #[serde(default)]
    pub outbox_quorum_records: Option<u64>,
    /// With a ledger that has a schedule book (`orders`): the schedule list read at the end of
    /// the run by an operator's reader that believes f+1 identical answers (the `ccron` CLI's
    /// `ScheduleReader`), per node how often it agreed or answered otherwise at the believed
    /// height (a `lie-reads` node); `None` without a book.
    #[serde(default)]
    pub schedule_reads: Option<super::ScheduleReads>,
    /// With a ledger that has a schedule book or an outbox: the replicated `/metrics` figures
    /// scraped from every node at the end of the run and compared between nodes at the same
    /// `ccron_book_height` (a difference is a violation).
    #[serde(default)]
    pub metrics_scrapes: Option<super::MetricsScrapes>,
    /// With `--byzantine`: the honest nodes' liveness before and during the fault.
    #[serde(default)]
    pub byzantine: Option<ByzantineReport>,
    /// The longest time between two consecutive heights' agreed times on the measured node
    /// (from height 2; ms).
    #[serde(default)]
    pub longest_stall_ms: i64,
    /// With `--faults SEED`: every fault applied, `"<ms> <kill|pause|restart|continue> <node>"`.
    #[serde(default)]
    pub faults: Vec<String>,
    /// With a load client: its results read back from every node's
    /// `GET /v1/requests/{client}/{number}`, believed where f+1 returned one identically.
    #[serde(default)]
    pub results: Option<crate::load::ResultsRead>,
    /// Every restart by reason: `fault` (the mid-run SIGKILL's and `--faults`' restarts, also
    /// counted in `restarts`) and the supervisor's (`upgrade_needed`, `upgrade_early`,
    /// `upgrade_unknown`: [`crate::supervise`]).
    #[serde(default)]
    pub restarts_by_reason: BTreeMap<String, u32>,
    /// What the supervisor saw and did per node (binary switches, restarts, exit codes) and its
    /// refusals (also violations).
    #[serde(default)]
    pub supervisor: Option<SupervisorReport>,
    /// With a ledger that has an outbox: the payloads (UTF-8, lossy) of the records counted in
    /// `outbox_quorum_records`, in outbox order (at most [`MAX_REPORTED_PAYLOADS`]).
    #[serde(default)]
    pub outbox_quorum_payloads: Vec<String>,
    /// With `--net-faults SEED`: the network faults applied and each window judged.
    #[serde(default)]
    pub net_faults: Option<NetFaultReport>,
    /// With `--faults SEED --kill-all`: every decided block before each kill of every node,
    /// compared with the nodes' stores at the end.
    #[serde(default)]
    pub kill_all: Option<KillAllReport>,
    /// With `--clock-faults SEED`: the clock jumps and the agreed time against the localnet's
    /// own clock.
    #[serde(default)]
    pub clock_faults: Option<ClockFaultReport>,
    /// With `--disk-faults SEED`: every bit flipped in a node's files, whether the node
    /// recorded it and resumed, and the blocks held before each flip compared with its store
    /// at the end.
    #[serde(default)]
    pub disk_faults: Option<super::DiskFaultReport>,
    /// With `--byzantine-subset`: the liveness while the Byzantine node delivered to a subset.
    #[serde(default)]
    pub subset: Option<SubsetReport>,
    /// Liveness and lateness in the run's last two thirds on the measured node (`None`: no
    /// honest node ran the whole time).
    #[serde(default)]
    pub window: Option<WindowReport>,
    /// With `--late-join` or `--late-join-at-height`: when the late node started and how long
    /// it took to hold the others' height (`None` without a late joiner).
    #[serde(default)]
    pub late_join: Option<super::LateJoinReport>,
    /// The `localnet` command line that runs this run again: its options, its adversary and its
    /// seeded fault plans (empty in reports written before 2026-11-29 by runs without seeded
    /// faults).
    #[serde(default)]
    pub replay: String,
    /// With `--preload N`: what placing the schedules before the run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preload: Option<super::PreloadReport>,
    /// With a load: what its clients did (their figures summed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::load::LoadStats>,
}

/// The network faults' part of the report ([`crate::netfault`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NetFaultReport {
    /// The seed.
    pub seed: u64,
    /// Every action applied, `"<ms> <action>"`.
    pub events: Vec<String>,
    /// The judged windows (noise, isolation, split).
    pub windows: Vec<crate::netfault::NetWindow>,
    /// What the proxies did.
    pub counters: crate::netfault::NetCounters,
}

/// Every node killed at once ([`crate::faults::FaultKind::KillAll`]): what each node's
/// `blocks.log` held right after each kill (all nodes down), against what it holds at the end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct KillAllReport {
    /// Kills of every node.
    pub kill_alls: u32,
    /// The highest height any node held at the last kill.
    pub height_at_kill: u64,
    /// (node, height) pairs compared.
    pub blocks_compared: u64,
    /// Decided blocks held at a kill and missing at the end (a violation each).
    pub lost: u64,
    /// Decided blocks whose value id changed (a violation each).
    pub changed: u64,
    /// Heights at which two nodes' stores hold different blocks (a violation each).
    pub nodes_disagree: u64,
    /// Heights decided after the last restart of every node (by the highest node).
    pub heights_after: u64,
    /// Milliseconds from the last restart of every node to the first poll at which a node
    /// held a height above `height_at_kill` (`None`: not within
    /// [`KILL_ALL_RESUME_BOUND`](super::KILL_ALL_RESUME_BOUND), a violation).
    #[serde(default)]
    pub resumed_after_ms: Option<u64>,
    /// How long the localnet ran past its duration waiting for that (ms).
    #[serde(default)]
    pub waited_past_end_ms: u64,
}

/// The clock jumps' part of the report ([`crate::faults::ClockPlan`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct ClockFaultReport {
    /// The seed.
    pub seed: u64,
    /// Every jump, `"<ms> node <i> offset <ms>"`.
    pub events: Vec<String>,
    /// The largest amount by which a node's last agreed time was ahead of the localnet's
    /// (unjumped) clock when it read the node's status (ms; the median of at least 2f+1
    /// samples lies between two honest clocks, so this stays near 0).
    pub agreed_ahead_max_ms: i64,
    /// The largest amount by which it was behind (ms; the time since the samples of the
    /// previous height, so stalls show here).
    pub agreed_behind_max_ms: i64,
    /// Heights whose agreed time was not above the previous height's on some node (from its
    /// `digests.log`; a violation each).
    pub non_monotone: u64,
    /// Proposals refused per node over the run (a node whose clock is behind refuses blocks
    /// timed ahead of it: `TimeOutOfBounds`).
    pub rejected_proposals: Vec<u64>,
}

/// Most outbox payloads a report lists.
pub const MAX_REPORTED_PAYLOADS: usize = 10_000;

/// The supervisor's part of the report ([`crate::supervise`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SupervisorReport {
    /// Per node, by index.
    pub nodes: Vec<crate::supervise::SupervisedNode>,
    /// Its refusals to restart a node, in order.
    pub errors: Vec<crate::supervise::SuperviseError>,
}
