//! Simulator tests against the toy leader-based node: every fault kind, determinism, and checkers
//! that do fire when a node misbehaves.

use sim_bft::node::{Input, Millis, Node, NodeId, Output};
use sim_bft::sim::toy::{ToyHarness, ToyNode};
use sim_bft::sim::{
    ByzantineKind, DiskImage, Harness, PartitionKind, Role, SimConfig, SimOutcome, Simulator,
    ViolationKind,
};

fn base(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        replicas: 4,
        duration_ms: 5_000,
        liveness_ms: 5_000,
        tick_period_ms: 500,
        components: vec![1, 2],
        clients: 2,
        request_interval_ms: 50,
        ..SimConfig::default()
    }
}

fn run(cfg: SimConfig) -> SimOutcome {
    Simulator::new(cfg, ToyHarness { n: 4 }).unwrap().run()
}

fn assert_ok(o: &SimOutcome) {
    assert!(
        o.ok(),
        "violations: {:?}\nreplay: {}",
        o.violations,
        o.replay_command()
    );
    assert!(o.honest_agree);
    for n in o.nodes.iter().filter(|n| n.honest) {
        assert!(n.last_executed_seq > o.heal_seq, "replica {} stuck", n.id);
    }
}

#[test]
fn fault_free_run_makes_progress_and_agrees() {
    let o = run(base(1));
    assert_ok(&o);
    assert!(o.stats.dropped == 0 && o.stats.delivered > 100);
    // Every replica executed ticks for both components.
    assert!(o.nodes.iter().all(|n| n.ticks_executed > 0));
    let d = o.nodes[0].state_digest;
    assert!(o.nodes.iter().all(|n| n.state_digest == d));
}

#[test]
fn same_seed_same_trace_hash_different_seed_different_hash() {
    let mut c = base(7);
    c.faults.drop_rate = 0.1;
    c.faults.reorder_rate = 0.2;
    c.faults.crashes = 1;
    let a = run(c.clone());
    let b = run(c.clone());
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.stats, b.stats);
    c.seed = 8;
    assert_ne!(a.trace_hash, run(c).trace_hash);
}

#[test]
fn network_faults_loss_duplication_reordering_delay() {
    for seed in 0..4 {
        let mut c = base(seed);
        c.faults.drop_rate = 0.2;
        c.faults.duplicate_rate = 0.2;
        c.faults.reorder_rate = 0.3;
        c.faults.max_delay_ms = 40;
        let o = run(c);
        assert_ok(&o);
        assert!(o.stats.dropped > 0 && o.stats.duplicated > 0 && o.stats.reordered > 0);
    }
}

#[test]
fn partitions_of_every_kind_heal() {
    for kind in [
        PartitionKind::Symmetric,
        PartitionKind::OneWay,
        PartitionKind::Isolate,
    ] {
        for seed in 0..3 {
            let mut c = base(seed);
            c.faults.partition = kind;
            let o = run(c);
            assert!(!o.params.partitions.is_empty());
            assert_ok(&o);
        }
    }
}

#[test]
fn crashes_lose_unsynced_writes_and_restart_from_disk() {
    for seed in 0..4 {
        let mut c = base(seed);
        c.faults.crashes = 3;
        c.faults.drop_rate = 0.05;
        let o = run(c);
        assert_eq!(o.stats.crashes as usize, {
            // Overlapping plans on one replica crash it once.
            let mut down_until = [0u64; 4];
            let mut k = 0;
            for p in &o.params.crashes {
                if p.at_ms >= down_until[p.node as usize] {
                    k += 1;
                    down_until[p.node as usize] = p.restart_ms;
                }
            }
            k
        });
        assert_ok(&o);
    }
}

#[test]
fn clock_skew_drift_and_jumps() {
    let mut c = base(3);
    c.faults.max_clock_skew_ms = 2_000;
    c.faults.max_drift_ppm = 500;
    c.faults.clock_jumps = 4;
    c.faults.max_clock_jump_ms = 10_000;
    let o = run(c);
    assert_eq!(o.params.jumps.len(), 4);
    assert_ok(&o);
}

#[test]
fn generic_byzantine_behaviours_do_not_break_the_honest_replicas() {
    for kind in [
        ByzantineKind::Silent,
        ByzantineKind::Replay,
        ByzantineKind::Corrupt,
    ] {
        let mut c = base(5);
        // The toy trusts its leader; keep replica 0 honest.
        c.faults.pinned_byzantine = vec![2];
        c.faults.byzantine_kind = kind;
        let o = run(c);
        assert!(!o.nodes[2].honest);
        assert_ok(&o);
        match kind {
            ByzantineKind::Replay => assert!(o.stats.replayed > 0),
            ByzantineKind::Corrupt => assert!(o.stats.corrupted > 0),
            _ => {}
        }
    }
}

#[test]
fn config_errors_are_reported() {
    let mut c = base(0);
    c.faults.byzantine = 2;
    assert!(Simulator::new(c, ToyHarness { n: 4 }).is_err());
}

/// A toy whose replica 3 reports a different state digest: the state checker must fire.
struct Divergent(ToyNode, bool);

impl Node for Divergent {
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>) {
        self.0.handle(now, input, out);
        if self.1 {
            for o in out.iter_mut() {
                if let Output::Executed(e) = o {
                    e.state_digest[0] ^= 1;
                }
            }
        }
    }
    fn next_deadline(&self) -> Option<Millis> {
        self.0.next_deadline()
    }
}

struct DivergentHarness;

impl Harness for DivergentHarness {
    type Node = Divergent;
    fn boot(&mut self, id: NodeId, disk: &DiskImage, _role: Role) -> Divergent {
        Divergent(ToyNode::new(id, 4, disk), id == 3)
    }
    fn client_request(&mut self, client: u32, number: u64) -> Vec<u8> {
        format!("{client}:{number}").into_bytes()
    }
}

#[test]
fn checkers_catch_divergence() {
    let o = Simulator::new(base(1), DivergentHarness).unwrap().run();
    assert!(!o.ok());
    assert!(!o.honest_agree);
    assert!(
        o.violations
            .iter()
            .any(|v| v.kind == ViolationKind::StateDivergence)
    );
    assert!(o.replay_command().contains("--seed 1"));
}

/// A toy that never lets replica 3 execute anything: the liveness checker must fire.
struct Mute;

impl Harness for Mute {
    type Node = ToyNode;
    fn boot(&mut self, id: NodeId, disk: &DiskImage, _role: Role) -> ToyNode {
        // Replica 3 believes it is a second leader of a 1-replica cluster: it ignores orders.
        if id == 3 {
            ToyNode::new(0, 1, disk)
        } else {
            ToyNode::new(id, 4, disk)
        }
    }
    fn client_request(&mut self, _client: u32, _number: u64) -> Vec<u8> {
        Vec::new()
    }
}

#[test]
fn liveness_checker_catches_a_stuck_replica() {
    let mut c = base(2);
    c.clients = 0;
    c.tick_period_ms = 0;
    let o = Simulator::new(c, Mute).unwrap().run();
    assert!(
        o.violations
            .iter()
            .any(|v| v.kind == ViolationKind::NoProgress && v.node == Some(3)),
        "{:?}",
        o.violations
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn any_faults() -> impl Strategy<Value = (u64, f64, f64, f64, u32, u8, i64, u32, u8)> {
        (
            any::<u64>(),
            0.0..0.3f64,
            0.0..0.3f64,
            0.0..0.5f64,
            0..4u32,
            0..4u8,
            0..2_000i64,
            0..4u32,
            0..4u8,
        )
    }

    fn config(
        (seed, drop, dup, reorder, crashes, partition, skew, jumps, byz): (
            u64,
            f64,
            f64,
            f64,
            u32,
            u8,
            i64,
            u32,
            u8,
        ),
    ) -> SimConfig {
        let mut c = base(seed);
        c.duration_ms = 3_000;
        c.faults.drop_rate = drop;
        c.faults.duplicate_rate = dup;
        c.faults.reorder_rate = reorder;
        c.faults.crashes = crashes;
        c.faults.partition = [
            PartitionKind::None,
            PartitionKind::Symmetric,
            PartitionKind::OneWay,
            PartitionKind::Isolate,
        ][partition as usize];
        c.faults.max_clock_skew_ms = skew;
        c.faults.clock_jumps = jumps;
        c.faults.max_clock_jump_ms = 5_000;
        if byz > 0 {
            // The toy trusts replica 0: a Byzantine follower only.
            c.faults.pinned_byzantine = vec![1 + u32::from(byz % 3)];
            c.faults.byzantine_kind = [
                ByzantineKind::Silent,
                ByzantineKind::Replay,
                ByzantineKind::Corrupt,
            ][(byz % 3) as usize];
        }
        c
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the seed and faults, the toy cluster is safe, converges after healing, and
        /// replays to the same trace hash.
        #[test]
        fn any_faults_are_survived_and_replayed(f in any_faults()) {
            let c = config(f);
            let a = run(c.clone());
            prop_assert!(a.ok(), "{:?}\n{}", a.violations, a.replay_command());
            let b = run(c);
            prop_assert_eq!(a.trace_hash, b.trace_hash);
            prop_assert_eq!(a.stats, b.stats);
        }
    }
}
