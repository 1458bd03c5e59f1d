//! The fault phase's liveness judgement: the windows in which 2f+1 honest replicas can reach
//! each other (from the seeded fault plan) and the stall bound derived from the replica's timeouts.

use super::{CrashPlan, SimConfig, SimParams};
use crate::node::NodeId;

/// Loss rate up to which the fault phase's stalls are judged.
pub const JUDGED_MAX_DROP_RATE: f64 = 0.05;

/// The default fault-phase stall bound for `n` replicas, from the replica's default timeouts
/// (T = `view_change_timeout_ms`, doubling per attempt up to `view_change_timeout_max_ms`): one
/// timer expiry that only asks for status (T), then f+1 view changes (f faulty primaries in a
/// row, then an honest one: T, 2T, 4T, ... each capped), plus one state transfer (grace and
/// timeout). 9.2 s for n = 4, 17.2 s for n = 7.
pub fn default_stall_bound_ms(n: u32) -> u64 {
    let rc = crate::replica::ReplicaConfig::new(0, n.max(4), 0, 1);
    let t = u64::try_from(rc.view_change_timeout_ms).unwrap_or(0);
    let t_max = u64::try_from(rc.view_change_timeout_max_ms)
        .unwrap_or(0)
        .max(t);
    let view_changes: u64 = (0..=rc.f().min(16))
        .map(|k| t.saturating_mul(1u64 << k).min(t_max))
        .sum();
    let st = u64::try_from(
        rc.state_transfer_grace_ms
            .saturating_add(rc.state_transfer_timeout_ms),
    )
    .unwrap_or(0);
    t.saturating_add(view_changes).saturating_add(st)
}

/// The longest a fault-free cluster running `cfg`'s workload may stay without new work, ms:
/// the client request interval (when clients send) or two tick periods of the fastest ticking
/// component (rotating senders propose one tick per period, at phases anywhere in it),
/// whichever is shorter; 0 without any work. An idle stretch is no stall: the derived bound
/// adds it.
pub fn quiet_gap_ms(cfg: &SimConfig) -> u64 {
    let clients =
        (cfg.clients > 0 && cfg.request_interval_ms > 0).then_some(cfg.request_interval_ms);
    let ticks = cfg
        .components
        .iter()
        .map(|c| cfg.tick_period_of(*c))
        .filter(|p| *p > 0)
        .min()
        .map(|p| p.saturating_mul(2));
    match (clients, ticks) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => 0,
    }
}

/// The stall bound a run of `cfg` applies when [`SimConfig::stall_bound_ms`] is `None`:
/// [`default_stall_bound_ms`] plus the workload's [`quiet_gap_ms`] (9.3 s for the defaults:
/// n = 4, requests every 100 ms; a cluster ticking once a minute with no clients gets 2 minutes
/// more).
pub fn derived_stall_bound_ms(cfg: &SimConfig) -> u64 {
    default_stall_bound_ms(cfg.replicas).saturating_add(quiet_gap_ms(cfg))
}

/// The windows of the fault phase `[0, duration)` in which stalls are judged: loss at most
/// [`JUDGED_MAX_DROP_RATE`], one-way delays and skew at most 1 s, clients or ticks submitting
/// work, and at each instant no partition, no clock jump so far, and at least 2f+1 honest
/// replicas up.
pub fn judged_windows(cfg: &SimConfig, params: &SimParams) -> Vec<(u64, u64)> {
    let fc = &cfg.faults;
    let d = cfg.duration_ms;
    let work = (cfg.clients > 0 && cfg.request_interval_ms > 0)
        || (cfg.tick_period_ms > 0 && !cfg.components.is_empty());
    if !work
        || fc.drop_rate > JUDGED_MAX_DROP_RATE
        || fc.max_delay_ms > 1_000
        || fc.reorder_delay_ms > 1_000
        || fc.max_clock_skew_ms > 1_000
    {
        return Vec::new();
    }
    let n = u64::from(cfg.replicas);
    let quorum = 2 * u64::from(params.f) + 1;
    let honest = n.saturating_sub(params.byzantine.len() as u64);
    let may_be_down = honest.saturating_sub(quorum);
    let first_jump = params.jumps.iter().map(|j| j.at_ms).min().unwrap_or(d);
    let honest_crashes: Vec<&CrashPlan> = params
        .crashes
        .iter()
        .filter(|c| !params.byzantine.contains(&c.node))
        .collect();
    let mut points = vec![0, d, first_jump.min(d)];
    for p in &params.partitions {
        points.extend([p.from_ms.min(d), p.until_ms.min(d)]);
    }
    for c in &honest_crashes {
        points.extend([c.at_ms.min(d), c.restart_ms.min(d)]);
    }
    points.sort_unstable();
    points.dedup();
    let mut windows: Vec<(u64, u64)> = Vec::new();
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let partitioned = params
            .partitions
            .iter()
            .any(|p| p.from_ms <= a && a < p.until_ms && !p.blocked.is_empty());
        let mut down: Vec<NodeId> = honest_crashes
            .iter()
            .filter(|c| c.at_ms <= a && a < c.restart_ms)
            .map(|c| c.node)
            .collect();
        down.sort_unstable();
        down.dedup();
        if partitioned || a >= first_jump || down.len() as u64 > may_be_down {
            continue;
        }
        match windows.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => windows.push((a, b)),
        }
    }
    windows
}
