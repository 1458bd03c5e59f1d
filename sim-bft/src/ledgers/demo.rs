//! The demo ledger on the simulated cluster: [`DemoRun`] runs it under faults and collects every
//! replica's ledger. The ledger itself (tables, state) lives in the `ccron-ledgers` crate and is
//! re-exported here, so `sim_bft::ledgers::demo::*` paths keep compiling.

use std::collections::BTreeMap;

pub use ccron_ledgers::demo::*;

use crate::app::Application;
use crate::ledgers::KvLedger;
use crate::node::{Millis, NodeId};
use crate::sim::cluster::ClusterHarness;
use crate::sim::{ConfigError, SimConfig, Simulator};

/// A demo run on the simulated cluster: what the examples and tests configure.
#[derive(Debug, Clone)]
pub struct DemoRun {
    /// The tables every replica registers.
    pub tables: DemoTables,
    /// The cluster (replicas, seed, faults, tick period, clients, durations).
    pub config: SimConfig,
}

/// One replica's view at the end of a [`DemoRun`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFires {
    /// Replica id.
    pub id: NodeId,
    /// False for the Byzantine replicas.
    pub honest: bool,
    /// Last executed sequence number.
    pub last_seq: u64,
    /// The ledger state (replicated).
    pub ledger: DemoLedger,
    /// Fires per `(component, position)` (replicated, from the registry's evaluations).
    pub fires: BTreeMap<(u32, u32), u64>,
}

/// The outcome of a [`DemoRun`].
#[derive(Debug, Clone)]
pub struct DemoOutcome {
    /// Every replica, in id order (`None` for one that is down or failed to boot).
    pub replicas: Vec<Option<ReplicaFires>>,
    /// The simulator's checkers' findings (empty when all held).
    pub violations: Vec<String>,
    /// Agreed time up to which every honest replica executed (fires are compared up to it).
    pub common_time_ms: Millis,
}

impl DemoOutcome {
    /// Actions of `component` an honest replica ran with agreed time `<= common_time_ms`,
    /// among the [`ACTION_LOG_CAP`] most recent ones it keeps.
    pub fn actions_until_common(&self, r: &ReplicaFires, component: u32) -> usize {
        r.ledger
            .actions
            .iter()
            .filter(|(c, t)| *c == component && *t <= self.common_time_ms)
            .count()
    }

    /// Whether the checkers held and the honest replicas' action logs agree (each is a prefix
    /// of the longest one where both still keep the actions, and every honest replica is up).
    pub fn agree(&self) -> bool {
        if !self.violations.is_empty() {
            return false;
        }
        let honest: Vec<&ReplicaFires> = self
            .replicas
            .iter()
            .flatten()
            .filter(|r| r.honest)
            .collect();
        let up = self.replicas.iter().all(Option::is_some);
        let Some(longest) = honest.iter().max_by_key(|r| r.ledger.actions_run()) else {
            return false;
        };
        let (l, l_off) = (&longest.ledger, longest.ledger.actions_offset());
        up && honest.iter().all(|r| {
            // The actions both keep: numbers max(offsets)..r's run count.
            let (a, a_off) = (&r.ledger, r.ledger.actions_offset());
            let from = a_off.max(l_off);
            let to = a.actions_run();
            if from >= to {
                return true; // nothing both still keep
            }
            let idx = |off: u64, i: u64| usize::try_from(i.saturating_sub(off)).ok();
            match (
                idx(a_off, from),
                idx(a_off, to),
                idx(l_off, from),
                idx(l_off, to),
            ) {
                (Some(a0), Some(a1), Some(l0), Some(l1)) => {
                    a.actions.get(a0..a1).is_some()
                        && a.actions.get(a0..a1) == l.actions.get(l0..l1)
                }
                _ => false,
            }
        })
    }
}

impl DemoRun {
    /// Runs the safety phase, heals, runs the liveness phase in full, and collects the
    /// replicas' ledgers.
    pub fn run(&self) -> Result<DemoOutcome, ConfigError> {
        let mut cfg = self.config.clone();
        cfg.components = self.tables.components();
        demo_ledger(&self.tables).map_err(|e| ConfigError::Node(e.to_string()))?;
        let tables = self.tables;
        let harness = ClusterHarness::new(&cfg).with_app(move |id| match demo_ledger(&tables) {
            Ok(l) => Box::new(l),
            Err(e) => {
                tracing::error!(id, error = %e, "demo tables");
                Box::new(KvLedger::new())
            }
        });
        harness.validate()?;
        let (safety_ms, liveness_ms) = (cfg.duration_ms, cfg.liveness_ms);
        let mut sim = Simulator::new(cfg, harness)?;
        let ok = sim.run_until(safety_ms);
        if ok {
            sim.heal();
            sim.run_until(safety_ms + liveness_ms);
        }
        let byzantine = sim.params().byzantine.clone();
        let replicas: Vec<Option<ReplicaFires>> = (0..sim.config().replicas)
            .map(|id| {
                let r = sim.node(id)?.replica()?;
                let mut l = demo_ledger(&tables).ok()?;
                l.restore(&r.app().snapshot()).ok()?;
                Some(ReplicaFires {
                    id,
                    honest: !byzantine.contains(&id),
                    last_seq: r.last_executed(),
                    fires: l.fires(),
                    ledger: l.state().clone(),
                })
            })
            .collect();
        let common_time_ms = replicas
            .iter()
            .flatten()
            .filter(|r| r.honest)
            .filter_map(|r| r.ledger.actions.last().map(|(_, t)| *t))
            .min()
            .unwrap_or(Millis::MIN);
        Ok(DemoOutcome {
            replicas,
            violations: sim.violations().iter().map(|v| v.to_string()).collect(),
            common_time_ms,
        })
    }
}
