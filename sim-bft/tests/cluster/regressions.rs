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

/// Whole-cluster stall after healing: a replica that ran ahead alone kept moving to later views
/// at every timer expiry while the others climbed one view per (doubling, unbounded) timeout,
/// so the honest replicas never shared a view again and the Byzantine one withheld the quorum.
/// `sim-bft run --seed 92 ... --byzantine-kind corrupt` (also seeds 2, 3, 6, 19, 48, 53, 60, 87)
#[test]
fn lone_replica_ahead_waits_for_the_others_corrupt() {
    for seed in [92, 3, 6] {
        assert_ok(&campaign_run(seed, 4, ByzantineKind::Corrupt));
    }
}

/// The same stall with a Byzantine state-transfer source:
/// `sim-bft run --seed 48 ... --byzantine-kind corrupt-state-transfer`.
#[test]
fn stall_after_healing_corrupt_state_transfer() {
    assert_ok(&campaign_run(48, 4, ByzantineKind::CorruptStateTransfer));
}

/// The same stall with forged view changes: `sim-bft run --seed 15 ... --byzantine-kind bogus-view-change`.
#[test]
fn stall_after_healing_bogus_view_change() {
    assert_ok(&campaign_run(15, 4, ByzantineKind::BogusViewChange));
}

/// A replica state-transferred from a source whose checkpoint was not yet stable there and
/// installed the source's unsigned proof instead of the certified one; every view change it sent
/// afterwards was rejected as invalid, so it could never help form a view-change quorum.
/// `sim-bft run --seed 16 ... --byzantine-kind corrupt`
#[test]
fn state_transfer_installs_the_certified_checkpoint_proof() {
    assert_ok(&campaign_run(16, 4, ByzantineKind::Corrupt));
}

/// FaultPhaseStall false positive: the judged windows came from the planned crashes only, so
/// the time honest replicas spent down after crashes at protocol points (here five of them in
/// ten seconds) counted as a stall "while 2f+1 honest replicas were up and connected".
/// Found on seed 5; since batch-carrying Have answers back off per (peer, seq), seed 5 reaches no
/// crash point at a view change, so the test runs seed 3 (4 crash points).
/// `sim-bft run --seed 3 --replicas 4 --ledger kv --duration 20000ms --clients 2
/// --request-interval 100ms --drop-rate 0.05 --byzantine-ids 1 --byzantine-kind repropose
/// --crash-at-view-change 0.5 --crash 2`
#[test]
fn crashes_at_protocol_points_are_not_judged_as_stalls() {
    let cfg = SimConfig {
        seed: 3,
        replicas: 4,
        ledger: sim_bft::sim::LedgerKind::Kv,
        duration_ms: 20_000,
        clients: 2,
        request_interval_ms: 100,
        faults: FaultConfig {
            drop_rate: 0.05,
            crashes: 2,
            pinned_byzantine: vec![1],
            byzantine: 1,
            byzantine_kind: ByzantineKind::Repropose,
            crash_at_view_change: 0.5,
            ..FaultConfig::default()
        },
        ..SimConfig::default()
    };
    let o = Cluster::from_config(cfg).build().unwrap().run();
    assert!(
        o.stats.crash_points >= 1,
        "crash points: {}",
        o.stats.crash_points
    );
    assert_ok(&o);
}

/// Amplification with maximal requests (issue 9; `sim-bft run --seeds 0..6 --duration 20s
/// --liveness 20s --byzantine 1 --drop-rate 0.05 --byzantine-kind amplify --max-size-requests
/// --ledger kv`: 543–1000 permille of the allowance at 9c6c133, seed 1 a violation). The
/// attacker's `Status` claims its stable checkpoint, so each honest backup streamed it every new
/// commit certificate (~22 MB), and its `BatchFetch` named the newest log batches (~8.9 MB).
/// Now a `Status` answer carries no certificate for a seq the peer sent its own commit for, and
/// a `BatchFetch` is served only for batches the current view's new view ordered by digest:
/// 175–433 permille on those seeds. Ignored: ~5 min in a debug build (~4 s per run in release);
/// run with `cargo test --release -p sim-bft --test cluster -- --ignored regressions::an_amplifying`.
#[test]
#[ignore = "heavy: maximal requests for 40 s simulated, minutes in a debug build"]
fn an_amplifying_replica_with_maximal_requests_stays_within_the_allowance() {
    for seed in [0, 1] {
        let cfg = SimConfig {
            seed,
            replicas: 4,
            duration_ms: 20_000,
            liveness_ms: 20_000,
            faults: FaultConfig {
                drop_rate: 0.05,
                byzantine: 1,
                byzantine_kind: ByzantineKind::Amplify,
                max_size_requests: true,
                ..FaultConfig::default()
            },
            ..SimConfig::default()
        };
        let o = Cluster::from_config(cfg).build().unwrap().run();
        assert_ok(&o);
        eprintln!("seed {seed}: {} permille", o.stats.amplification_permille);
        assert!(
            o.stats.amplification_permille < 500,
            "seed {seed}: {}",
            o.stats.amplification_permille
        );
    }
}

/// Amplification (found by the `amplify` strategy and the amplification checker): a 40-byte
/// `Status` every 50 ms drew up to `status_answer_bytes` of commit certificates each time, and
/// repeated `BatchFetch`es drew the same batches again: an honest replica sent the attacker
/// ~5 MB against ~170 KB to an honest peer (`sim-bft run --seed 2 --duration 20s --liveness 20s
/// --byzantine 1 --drop-rate 0.05 --byzantine-kind amplify`). Status answers are now rate
/// limited per peer and never repeat a certificate within a view-change timeout; a batch is
/// served to a peer once per view.
#[test]
fn an_amplifying_replica_gets_no_more_than_an_honest_peer() {
    for seed in 0..3 {
        let cfg = SimConfig {
            seed,
            replicas: 4,
            duration_ms: 20_000,
            liveness_ms: 20_000,
            faults: FaultConfig {
                drop_rate: 0.05,
                byzantine: 1,
                byzantine_kind: ByzantineKind::Amplify,
                ..FaultConfig::default()
            },
            ..SimConfig::default()
        };
        let o = Cluster::from_config(cfg).build().unwrap().run();
        assert_ok(&o);
        assert!(
            o.stats.amplification_permille < 500,
            "seed {seed}: {}",
            o.stats.amplification_permille
        );
    }
}
