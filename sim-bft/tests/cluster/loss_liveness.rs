//! Liveness under message loss with f silent replicas (issue 9): the batches committed during
//! the fault phase must stay a large fraction of a fault-free run of the same seed and length.
//! Before normal-case retransmission, n = 4 with 1 silent replica and 5 % loss committed 6–34
//! batches in 60 s against 1,320 without faults. The measured campaign is in docs/simulator.md.

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, SimConfig, SimOutcome, ViolationKind};

fn config(seed: u64, n: u32, faulty: bool, duration_ms: u64) -> SimConfig {
    let f = (n - 1) / 3;
    let faults = if faulty {
        FaultConfig {
            drop_rate: 0.05,
            byzantine: f,
            byzantine_kind: ByzantineKind::Silent,
            ..FaultConfig::default()
        }
    } else {
        FaultConfig::default()
    };
    SimConfig {
        seed,
        replicas: n,
        duration_ms,
        liveness_ms: 10_000,
        faults,
        ..SimConfig::default()
    }
}

fn run(seed: u64, n: u32, faulty: bool, duration_ms: u64) -> SimOutcome {
    Cluster::from_config(config(seed, n, faulty, duration_ms))
        .build()
        .unwrap()
        .run()
}

/// Batches committed during the fault phase with f silent and 5 % loss, over the same count
/// in a fault-free run of the same seed and length.
fn ratio(seed: u64, n: u32, duration_ms: u64) -> f64 {
    let lossy = run(seed, n, true, duration_ms);
    let clean = run(seed, n, false, duration_ms);
    assert!(
        lossy.ok(),
        "{:#?}\n{}",
        lossy.violations,
        lossy.replay_command()
    );
    assert!(clean.ok(), "{:#?}", clean.violations);
    assert!(clean.heal_seq > 0);
    lossy.heal_seq as f64 / clean.heal_seq as f64
}

#[test]
fn one_silent_replica_and_five_percent_loss_keep_most_of_the_throughput() {
    // Measured 0.9+ (docs/simulator.md); the old code reached 0.03 or less.
    let r = ratio(9_310_001, 4, 8_000);
    assert!(r >= 0.6, "committed ratio {r:.3}");
}

/// Slow view-change retransmission: with seed 9310003 at n = 4 the silent replica is the first
/// primary, and view changes lost on the way to the next primaries were re-sent only at the
/// next (doubling) view-change timeout: no batch committed for the first 16–24 s
/// (`FaultPhaseStall`). A replica waiting for a new-view now re-sends its view change every
/// eighth of the base timeout; the longest stall is the first view change's (~4.3 s).
#[test]
fn lost_view_changes_are_resent_before_the_next_timeout() {
    let o = run(9_310_003, 4, true, 12_000);
    assert!(o.ok(), "{:#?}\n{}", o.violations, o.replay_command());
    assert!(
        o.stats.max_stall_ms < 6_000,
        "stall {} ms",
        o.stats.max_stall_ms
    );
    assert!(o.heal_seq > 100, "committed {} batches", o.heal_seq);
}

/// The campaign of docs/simulator.md: n = 4 and n = 7, 60 s.
#[test]
#[ignore = "long: several 60 s simulated runs (run with --release --ignored)"]
fn f_silent_replicas_and_five_percent_loss_keep_80_percent_over_60_s() {
    for (n, seed) in [
        (4, 9_310_001),
        (4, 9_310_002),
        (4, 9_310_003),
        (7, 9_310_001),
        (7, 9_310_002),
        (7, 9_310_003),
    ] {
        let r = ratio(seed, n, 60_000);
        assert!(r >= 0.8, "n = {n}, seed {seed}: committed ratio {r:.3}");
    }
}

/// The fault-phase liveness checker finds the defect on its own: with retransmission disabled
/// (the old replica), the example `--replicas 7 --byzantine 2 --byzantine-kind silent
/// --drop-rate 0.05 --duration 60s` fails with a `FaultPhaseStall`; with it, the same run passes
/// (a shorter run of it, to keep the test fast) and reports a short `max_stall_ms`.
#[test]
fn the_stall_checker_flags_a_cluster_without_retransmission() {
    let old = Cluster::from_config(config(9_310_001, 7, true, 60_000))
        .build_with(|c| c.retransmit_interval_ms = 0)
        .unwrap()
        .run();
    assert!(
        old.violations
            .iter()
            .any(|v| v.kind == ViolationKind::FaultPhaseStall),
        "{:#?} {:?}",
        old.violations,
        old.stats
    );
    assert!(old.stats.max_stall_ms > old.stats.stall_bound_ms);
    let new = run(9_310_001, 7, true, 12_000);
    assert!(new.ok(), "{:#?}", new.violations);
    assert_eq!(new.stats.judged_ms, 12_000);
    assert!(new.stats.max_stall_ms < 2_000, "{:?}", new.stats);
    assert_eq!(new.stats.fault_phase_batches, new.heal_seq);
    assert!(new.stats.fault_phase_batches > 10 * old.stats.fault_phase_batches.max(1));
}
