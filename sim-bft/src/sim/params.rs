//! Simulation parameters: everything a run's seed derives from its [`SimConfig`] (which replicas
//! are Byzantine, clock offsets and drifts, crash, partition and clock-jump plans).

use std::fmt;

use serde::Serialize;

use super::config::{PartitionKind, SimConfig};
use super::rng::SimRng;
use crate::node::{Millis, NodeId};

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
                let restart_ms = at_ms.saturating_add(r.range(d / 20, d / 4).max(1)).min(d);
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
                let until_ms = from_ms.saturating_add(r.range(d / 20, d / 4).max(1)).min(d);
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
