//! Regression seeds from the simulator campaigns: each test replays one `sim-bft run` command
//! that once failed (an invariant violation or a liveness stall) and checks every checker holds.
//!
//! Every case is the campaign configuration of docs/simulator.md (30 s of faults: 5 % loss, 10 %
//! reordering, two crashes, one Byzantine replica, 200 ms skew, a one-way partition, then 30 s to
//! recover); one run takes about a second in the test profile. The replay command of each case is
//! in its doc comment.

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, PartitionKind, SimConfig, SimOutcome};

/// The campaign configuration with `seed` and Byzantine behaviour `kind` on `n` replicas.
fn campaign_run(seed: u64, n: u32, kind: ByzantineKind) -> SimOutcome {
    let cfg = SimConfig {
        seed,
        replicas: n,
        duration_ms: 30_000,
        liveness_ms: 30_000,
        faults: FaultConfig {
            drop_rate: 0.05,
            reorder_rate: 0.1,
            crashes: 2,
            byzantine: 1,
            byzantine_kind: kind,
            max_clock_skew_ms: 200,
            partition: PartitionKind::OneWay,
            ..FaultConfig::default()
        },
        ..SimConfig::default()
    };
    Cluster::from_config(cfg).build().unwrap().run()
}

/// Every checker held and every honest replica executed past the heal.
fn assert_ok(o: &SimOutcome) {
    let explain = format!(
        "violations: {:#?}\nreplay: {}",
        o.violations,
        o.replay_command()
    );
    assert!(o.ok(), "{explain}");
    for n in o.nodes.iter().filter(|n| n.honest) {
        assert!(n.last_executed_seq > o.heal_seq, "{explain}");
    }
}

/// A replica restarted into a stale view it is the primary of, then executed later seqs from
/// commit certificates: its next proposal seq stayed at or below what it had executed.
/// `sim-bft run --seed 33 --duration 30s --liveness 30s --drop-rate 0.05 --reorder-rate 0.1
/// --crash 2 --byzantine 1 --clock-skew 200ms --partition one-way --byzantine-kind corrupt-state-transfer`
#[test]
fn primary_next_seq_follows_certificate_execution() {
    assert_ok(&campaign_run(33, 4, ByzantineKind::CorruptStateTransfer));
}
