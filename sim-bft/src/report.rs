//! The JSON report of a simulated run (a contract: documented in `docs/simulator.md`).
//!
//! Field names are stable; new fields may be added, none removed or renamed without a format
//! version bump. Digests are lower-case hex.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::sim::checker::hex;
use crate::sim::{FireEvent, ReplicaMark, SimOutcome, SimStats};

/// Version of the report format.
pub const REPORT_VERSION: u32 = 1;

/// One replica in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaReport {
    /// Replica id.
    pub id: u32,
    /// False for Byzantine replicas.
    pub honest: bool,
    /// Highest sequence number it executed (0 if none).
    pub last_executed_seq: u64,
    /// Its state digest after that batch, hex.
    pub state_digest: String,
    /// Batches executed for the first time (each sequence number at most once).
    pub batches_executed: u64,
    /// Batches executed again after a restart (log replay up to where the replica had been).
    pub batches_reexecuted: u64,
    /// Ticks executed.
    pub ticks_executed: u64,
    /// Requests executed, ticks included.
    pub requests_executed: u64,
    /// Actions fired, keyed `"<component>/<position>"`.
    pub fires: BTreeMap<String, u64>,
    /// Fire events recorded for it, keyed like `fires`: the actions it ran itself (those it
    /// skipped over by state transfer count in `fires` only; see `fire_events_dropped`).
    pub fire_events: BTreeMap<String, u64>,
    /// View changes the simulator saw it make.
    pub view_changes: u64,
    /// Its dropped inputs by reason (its `drop_*` counters since its last boot).
    pub drops: BTreeMap<String, u64>,
}

/// The report of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Report format version ([`REPORT_VERSION`]).
    pub version: u32,
    /// The seed.
    pub seed: u64,
    /// Number of replicas n.
    pub replicas: u32,
    /// Byzantine replicas tolerated, f.
    pub f: u32,
    /// Simulated length of the safety phase, ms.
    pub duration_ms: u64,
    /// The signature scheme of the run: `ed25519` or `sim` (simulator-only keyed-hash tags).
    pub signatures: String,
    /// Simulated time at the end of the run, ms.
    pub end_ms: u64,
    /// Highest sequence number executed before the faults healed.
    pub heal_seq: u64,
    /// Per replica.
    pub nodes: Vec<ReplicaReport>,
    /// True when no two honest replicas disagreed on a batch or state digest.
    pub honest_agree: bool,
    /// Broken invariants, one line each; empty when every checker held.
    pub violations: Vec<String>,
    /// SHA-256 over every processed event and executed batch, hex.
    pub trace_hash: String,
    /// The command that replays this run.
    pub replay: String,
    /// Counters.
    pub stats: SimStats,
    /// Every fire event, in execution order (only with `--fire-events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fire_events: Option<Vec<FireEvent>>,
    /// Crashes, restarts and view changes (only with `--fire-events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_marks: Option<Vec<ReplicaMark>>,
    /// Fire events not kept because the run's cap was reached.
    pub fire_events_dropped: u64,
}

impl Report {
    /// The report of `o`.
    pub fn from_outcome(o: &SimOutcome) -> Self {
        let mut violations: Vec<String> = o.violations.iter().map(|v| v.to_string()).collect();
        if o.dropped_violations > 0 {
            violations.push(format!("... and {} more violations", o.dropped_violations));
        }
        let mut recorded: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
        for e in &o.events.fires {
            *recorded
                .entry(e.replica)
                .or_default()
                .entry(e.key())
                .or_insert(0) += 1;
        }
        Self {
            version: REPORT_VERSION,
            seed: o.config.seed,
            replicas: o.config.replicas,
            f: o.params.f,
            duration_ms: o.config.duration_ms,
            signatures: o.config.signatures.to_string(),
            end_ms: o.end_ms,
            heal_seq: o.heal_seq,
            nodes: o
                .nodes
                .iter()
                .map(|n| ReplicaReport {
                    id: n.id,
                    honest: n.honest,
                    last_executed_seq: n.last_executed_seq,
                    state_digest: hex(&n.state_digest),
                    batches_executed: n.batches_executed,
                    batches_reexecuted: n.batches_reexecuted,
                    ticks_executed: n.ticks_executed,
                    requests_executed: n.requests_executed,
                    fires: n.fires.clone(),
                    fire_events: recorded.remove(&n.id).unwrap_or_default(),
                    view_changes: o.events.view_changes(n.id),
                    drops: n
                        .metrics
                        .iter()
                        .filter(|(k, _)| k.starts_with("drop_"))
                        .map(|(k, v)| (k.clone(), *v))
                        .collect(),
                })
                .collect(),
            honest_agree: o.honest_agree,
            violations,
            trace_hash: hex(&o.trace_hash),
            replay: o.replay_command(),
            stats: o.stats.clone(),
            fire_events: None,
            replica_marks: None,
            fire_events_dropped: o.events.fires_dropped,
        }
    }

    /// The report of `o` with every fire event and replica mark (`sim-bft run --fire-events`).
    pub fn with_events(o: &SimOutcome) -> Self {
        Self {
            fire_events: Some(o.events.fires.clone()),
            replica_marks: Some(o.events.marks.clone()),
            ..Self::from_outcome(o)
        }
    }

    /// True when every checker held.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// A readable multi-line summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "seed {}  n = {}  f = {}  simulated {} ms (faults healed at {} ms, seq {})",
            self.seed, self.replicas, self.f, self.end_ms, self.duration_ms, self.heal_seq
        );
        let _ = writeln!(
            s,
            "  {:>2}  {:<9} {:>10} {:>10} {:>8}  state digest",
            "id", "role", "last seq", "batches", "ticks"
        );
        for n in &self.nodes {
            let _ = writeln!(
                s,
                "  {:>2}  {:<9} {:>10} {:>10} {:>8}  {}",
                n.id,
                if n.honest { "honest" } else { "byzantine" },
                n.last_executed_seq,
                n.batches_executed,
                n.ticks_executed,
                n.state_digest.get(..16).unwrap_or(&n.state_digest)
            );
        }
        if self.nodes.iter().any(|n| !n.fires.is_empty()) {
            let _ = writeln!(s, "  cron fires per replica (component/position: count):");
            for n in &self.nodes {
                let fires: Vec<String> = n.fires.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                let _ = writeln!(s, "  {:>2}  {}", n.id, fires.join(", "));
            }
        }
        let st = &self.stats;
        let _ = writeln!(
            s,
            "  events {}  delivered {}  dropped {}  duplicated {}  reordered {}  crashes {} \
             (lost writes {})  client requests {}  replies {}",
            st.events,
            st.delivered,
            st.dropped,
            st.duplicated,
            st.reordered,
            st.crashes,
            st.lost_writes,
            st.client_requests,
            st.replies
        );
        let _ = writeln!(
            s,
            "  fault phase: {} batches committed, longest judged stall {} ms (bound {} ms, \
             judged {} ms)",
            st.fault_phase_batches, st.max_stall_ms, st.stall_bound_ms, st.judged_ms
        );
        let _ = writeln!(s, "  trace hash {}", self.trace_hash);
        if self.ok() {
            let _ = writeln!(s, "  all checkers held (honest replicas agree)");
        } else {
            let _ = writeln!(s, "  {} VIOLATION(S):", self.violations.len());
            for v in &self.violations {
                let _ = writeln!(s, "    {v}");
            }
            let _ = writeln!(s, "  replay with: {}", self.replay);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::toy::ToyHarness;
    use crate::sim::{SimConfig, Simulator};

    #[test]
    fn report_has_the_contract_fields() {
        let cfg = SimConfig {
            duration_ms: 2_000,
            liveness_ms: 2_000,
            ..SimConfig::default()
        };
        let o = Simulator::new(cfg, ToyHarness { n: 4 }).unwrap().run();
        let r = Report::from_outcome(&o);
        let v: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        for k in [
            "seed",
            "replicas",
            "f",
            "nodes",
            "honest_agree",
            "violations",
            "trace_hash",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        let n0 = &v["nodes"][0];
        for k in [
            "id",
            "honest",
            "last_executed_seq",
            "state_digest",
            "ticks_executed",
            "fires",
        ] {
            assert!(n0.get(k).is_some(), "missing nodes[].{k}");
        }
        for k in [
            "max_stall_ms",
            "fault_phase_batches",
            "judged_ms",
            "stall_bound_ms",
        ] {
            assert!(v["stats"].get(k).is_some(), "missing stats.{k}");
        }
        assert_eq!(v["stats"]["fault_phase_batches"], v["heal_seq"]);
        assert_eq!(v["stats"]["judged_ms"], 2_000);
        assert_eq!(v["trace_hash"].as_str().unwrap().len(), 64);
        assert_eq!(v["replicas"], 4);
        assert!(r.ok());
        assert!(r.summary().contains("all checkers held"));
    }
}
