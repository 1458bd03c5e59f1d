//! Issue 10 (part): every `now + timeout` deadline saturates. A replica driven with its clock
//! near `Millis::MAX` (i64), or configured with huge timeouts, neither panics (debug overflow
//! checks are on in tests) nor wraps its deadlines into the past.

use crate::replica_support;

use replica_support::Harness;
use sim_bft::node::{Input, Millis, Node};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{FaultConfig, SimConfig, TimeServiceMode};

/// A cluster whose clocks start 40 s before `i64::MAX`: requests, a view change (the primary is
/// cut off) and timers all the way to the end of time.
#[test]
fn a_clock_near_the_end_of_time_neither_panics_nor_wraps() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
    });
    h.now = Millis::MAX - 40_000;
    for k in 0..6 {
        h.put(k % 3, &format!("a{k}"), "v");
    }
    h.advance(1_000);
    // Cut the primary off: the backups' timers expire and they change view.
    h.isolated.insert(0);
    for k in 0..6 {
        h.put(k % 3, &format!("b{k}"), "v");
    }
    h.advance(20_000);
    assert!(
        h.replica(1).view() >= 1,
        "no view change near the end of time"
    );
    assert_eq!(
        h.assert_agreement(&[1, 2, 3]),
        h.replica(1).last_executed() as usize
    );
    // Requests arriving at the last milliseconds: their deadlines saturate at `Millis::MAX`.
    h.now = Millis::MAX - 5;
    for k in 0..3 {
        h.put(k, &format!("c{k}"), "v");
    }
    h.now = Millis::MAX;
    for i in 1..4 {
        if let Some(d) = h.replica(i).next_deadline() {
            assert!(d >= Millis::MAX - 5, "replica {i}: deadline {d} wrapped");
        }
        h.input(i, Input::Timer);
        h.input(i, Input::Timer);
    }
    h.deliver_all();
    for i in 1..4 {
        h.replica(i).check_invariants().unwrap();
    }
}

/// Timeouts as large as the configuration allows: deadlines saturate instead of overflowing.
#[test]
fn huge_timeouts_saturate() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
        c.view_change_timeout_ms = Millis::MAX;
        c.view_change_timeout_max_ms = Millis::MAX;
        c.state_transfer_grace_ms = Millis::MAX;
        c.state_transfer_timeout_ms = Millis::MAX;
        c.batch_delay_ms = Millis::MAX;
        c.retransmit_interval_ms = Millis::MAX;
        c.batch_max = 1;
    });
    for k in 0..12 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.advance(50);
    }
    assert_eq!(h.assert_agreement(&[0, 1, 2, 3]), 12);
    // Pending work with a saturated timer: the deadline is the end of time, not the past.
    h.isolated.insert(0);
    h.put(1, "late", "v");
    for i in 1..4 {
        assert_eq!(h.replica(i).next_deadline(), Some(Millis::MAX));
    }
}

/// The simulator with its epoch 2 s before the end of time: every replica clock reaches and
/// clamps at `Millis::MAX` (where no timeout can elapse any more, so only the absence of panics
/// and the safety checks are asserted), deadlines saturate.
#[test]
fn the_simulator_runs_into_the_end_of_time() {
    let mut cfg: SimConfig = Cluster::builder()
        .seed(3)
        .replicas(4)
        .time_service(TimeServiceMode::Off)
        .duration_ms(3_000, 10_000)
        .clients(2, 100)
        .faults(FaultConfig {
            drop_rate: 0.05,
            ..FaultConfig::default()
        })
        .config()
        .clone();
    cfg.epoch_ms = Millis::MAX - 2_000;
    let mut sim = Cluster::from_config(cfg).build().unwrap();
    assert!(sim.run_until(3_000), "event budget exhausted");
    for id in 0..4 {
        let r = sim.node(id).and_then(|n| n.replica()).unwrap();
        r.check_invariants().unwrap();
        assert!(r.last_executed() > 0, "replica {id} executed nothing");
        assert!(r.next_deadline().is_none_or(|d| d >= Millis::MAX - 2_000));
    }
}
