//! Liveness under message loss with f silent replicas (issue 9): the batches committed during
//! the fault phase must stay a large fraction of a fault-free run of the same seed and length.
//! Before normal-case retransmission, n = 4 with 1 silent replica and 5 % loss committed 6–34
//! batches in 60 s against 1,320 without faults. The measured campaign is in docs/simulator.md.

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, SimConfig, SimOutcome};

fn run(seed: u64, n: u32, faulty: bool, duration_ms: u64) -> SimOutcome {
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
    let cfg = SimConfig {
        seed,
        replicas: n,
        duration_ms,
        liveness_ms: 10_000,
        faults,
        ..SimConfig::default()
    };
    Cluster::from_config(cfg).build().unwrap().run()
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

/// The campaign of docs/simulator.md in miniature: n = 4 and n = 7, several seeds, 60 s.
#[test]
#[ignore = "long: several 60 s simulated runs (run with --release --ignored)"]
fn f_silent_replicas_and_five_percent_loss_keep_80_percent_over_60_s() {
    for n in [4, 7] {
        for seed in 9_310_001..9_310_004 {
            let r = ratio(seed, n, 60_000);
            assert!(r >= 0.8, "n = {n}, seed {seed}: committed ratio {r:.3}");
        }
    }
}
