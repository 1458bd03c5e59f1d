//! The reference TicksGenerator tests (semantics.md), run against the pure core, plus the throttle
//! and a driver test with a manual clock.

use std::time::Duration;

use ccron::ticks::{
    DriverConfig, ManualClock, PendingTick, TickDecision, TickInternalMsg, TickThrottle,
    TickTimers, TicksGenerator,
};
use proptest::prelude::*;

const A: u32 = 1;
const B: u32 = 2;

#[test]
fn no_ticks_before_start() {
    let mut t = TickTimers::new();
    for now in [0, 1_000, 1_000_000] {
        assert!(t.evaluate(now).is_empty());
    }
    assert_eq!(t.next_deadline(), None);
    assert!(!t.is_generating(A));
}

#[test]
fn ticks_fire_after_one_period_and_rearm_at_evaluation_time() {
    let mut t = TickTimers::new();
    t.start(A, 1_000, 0);
    assert_eq!(t.next_deadline(), Some(1_000));
    assert!(t.evaluate(999).is_empty());
    assert_eq!(t.evaluate(1_000), vec![A]);
    // Fired at most once per evaluation, re-armed at evaluation time + period.
    assert!(t.evaluate(1_000).is_empty());
    // A late poll fires once, not once per missed period, and re-arms from the poll.
    assert_eq!(t.evaluate(5_500), vec![A]);
    assert_eq!(t.next_deadline(), Some(6_500));
    assert!(t.evaluate(6_499).is_empty());
    assert_eq!(t.evaluate(6_500), vec![A]);
}

#[test]
fn tick_order_across_two_components_is_start_order() {
    let mut t = TickTimers::new();
    // B has the larger id but starts first: start order wins, not id order.
    t.start(B, 1_000, 0);
    t.start(A, 1_000, 0);
    assert_eq!(t.evaluate(1_000), vec![B, A]);
    // Different periods: only the due one fires.
    let mut t = TickTimers::new();
    t.start(A, 1_000, 0);
    t.start(B, 3_000, 0);
    assert_eq!(t.evaluate(1_000), vec![A]);
    assert_eq!(t.evaluate(2_000), vec![A]);
    assert_eq!(t.evaluate(3_000), vec![A, B]);
}

#[test]
fn restart_resets_the_phase() {
    let mut t = TickTimers::new();
    t.start(A, 1_000, 0);
    t.start(A, 1_000, 900);
    assert!(t.evaluate(1_000).is_empty(), "restart must reset the phase");
    assert_eq!(t.evaluate(1_900), vec![A]);
    // A restart counts as a fresh start for ordering.
    t.start(B, 1_000, 1_900);
    t.start(A, 1_000, 1_900);
    assert_eq!(t.evaluate(2_900), vec![B, A]);
}

#[test]
fn stop_and_is_generating() {
    let mut t = TickTimers::new();
    t.start(A, 1_000, 0);
    t.start(B, 1_000, 0);
    assert!(t.is_generating(A) && t.is_generating(B));
    assert!(t.stop(A));
    assert!(!t.stop(A), "second stop reports nothing was running");
    assert!(!t.is_generating(A));
    assert_eq!(t.evaluate(10_000), vec![B]);
}

#[test]
fn start_with_zero_period_stops() {
    let mut t = TickTimers::new();
    t.start(A, 1_000, 0);
    t.start(A, 0, 10);
    assert!(!t.is_generating(A));
    assert!(t.evaluate(10_000).is_empty());
    // On a component that was never started, start(0) is a no-op.
    t.start(B, 0, 0);
    assert!(t.is_empty());
}

#[test]
fn huge_period_never_overflows() {
    let mut t = TickTimers::new();
    t.start(A, u64::MAX, i64::MAX - 5);
    assert!(t.evaluate(i64::MAX - 1).is_empty());
    assert_eq!(t.next_deadline(), Some(i64::MAX));
}

fn seq_from(start: u64) -> impl FnMut() -> u64 {
    let mut next = start;
    move || {
        next += 1;
        next
    }
}

#[test]
fn one_pending_throttle_across_queue_and_consensus() {
    let mut th = TickThrottle::new();
    let mut alloc = seq_from(0);
    assert_eq!(
        th.on_internal_tick(A, 0, &mut alloc),
        TickDecision::Send { req_seq: 1 }
    );
    // Pending in the external queue: throttled.
    assert!(matches!(
        th.on_internal_tick(A, 1, &mut alloc),
        TickDecision::Throttled {
            pending: PendingTick::InQueue { req_seq: 1, .. }
        }
    ));
    // Popped: pending in consensus, still throttled.
    th.on_tick_popped(A, 1);
    assert!(matches!(
        th.on_internal_tick(A, 2, &mut alloc),
        TickDecision::Throttled {
            pending: PendingTick::InConsensus { req_seq: 1, .. }
        }
    ));
    // Committed: the next internal tick is sent, with a fresh request number.
    th.on_committed(A, 1);
    assert_eq!(
        th.on_internal_tick(A, 3, &mut alloc),
        TickDecision::Send { req_seq: 2 }
    );
    th.on_tick_popped(A, 2);
    th.on_executed(A, 2);
    assert!(!th.is_pending(A));
    assert_eq!(
        th.on_internal_tick(A, 4, &mut alloc),
        TickDecision::Send { req_seq: 3 }
    );
    th.on_tick_popped(A, 3);
    th.on_dropped(A, 3);
    assert!(!th.is_pending(A));
    let s = th.stats();
    assert_eq!((s.sent, s.throttled), (3, 2));
}

#[test]
fn components_do_not_crowd_each_other_out() {
    let mut th = TickThrottle::new();
    let mut alloc = seq_from(0);
    assert!(matches!(
        th.on_internal_tick(A, 0, &mut alloc),
        TickDecision::Send { .. }
    ));
    assert!(matches!(
        th.on_internal_tick(B, 0, &mut alloc),
        TickDecision::Send { .. }
    ));
    assert_eq!(th.pending_count(), 2);
}

#[test]
fn failed_enqueue_does_not_leak_the_mark() {
    let mut th = TickThrottle::new();
    let mut alloc = seq_from(0);
    let TickDecision::Send { req_seq } = th.on_internal_tick(A, 0, &mut alloc) else {
        panic!("first tick must be sent");
    };
    th.on_enqueue_failed(A, req_seq);
    assert!(!th.is_pending(A));
    assert!(matches!(
        th.on_internal_tick(A, 1, &mut alloc),
        TickDecision::Send { req_seq: 2 }
    ));
    assert_eq!(th.stats().enqueue_failed, 1);
}

#[test]
fn late_callback_for_an_old_request_does_not_clear_a_newer_mark() {
    let mut th = TickThrottle::new();
    let mut alloc = seq_from(0);
    th.on_internal_tick(A, 0, &mut alloc); // req 1
    th.on_tick_popped(A, 1);
    th.on_committed(A, 1);
    th.on_internal_tick(A, 1, &mut alloc); // req 2
    th.on_executed(A, 1); // late callback for req 1
    assert_eq!(th.pending(A).map(|p| p.req_seq()), Some(2));
    assert_eq!(th.stats().ignored_callbacks, 1);
}

#[test]
fn view_change_clears_consensus_marks_only() {
    let mut th = TickThrottle::new();
    let mut alloc = seq_from(0);
    th.on_internal_tick(A, 0, &mut alloc); // req 1, stays queued
    th.on_internal_tick(B, 0, &mut alloc); // req 2, goes to consensus
    th.on_tick_popped(B, 2);
    assert_eq!(th.on_view_change_cleared(), 1);
    assert!(th.is_pending(A));
    assert!(!th.is_pending(B));
}

#[test]
fn stale_mark_is_cleared_after_max_age() {
    let mut th = TickThrottle::with_max_pending_ms(10_000);
    let mut alloc = seq_from(0);
    th.on_internal_tick(A, 0, &mut alloc);
    th.on_tick_popped(A, 1);
    assert!(matches!(
        th.on_internal_tick(A, 9_999, &mut alloc),
        TickDecision::Throttled { .. }
    ));
    assert_eq!(
        th.on_internal_tick(A, 10_000, &mut alloc),
        TickDecision::Send { req_seq: 2 }
    );
    assert_eq!(th.stats().stale_cleared, 1);
}

#[derive(Debug, Clone)]
enum Op {
    Internal(u32),
    EnqueueFailed(u32),
    Popped(u32),
    Committed(u32),
    Dropped(u32),
    ViewChange,
}

fn op() -> impl Strategy<Value = Op> {
    let c = 0u32..3;
    prop_oneof![
        c.clone().prop_map(Op::Internal),
        c.clone().prop_map(Op::EnqueueFailed),
        c.clone().prop_map(Op::Popped),
        c.clone().prop_map(Op::Committed),
        c.prop_map(Op::Dropped),
        Just(Op::ViewChange),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Against a naive model of (component -> request, popped?): the throttle sends exactly when
    /// nothing is pending, and every clearing event really clears.
    #[test]
    fn throttle_matches_a_naive_model(ops in proptest::collection::vec(op(), 1..80)) {
        let mut th = TickThrottle::new();
        let mut alloc = seq_from(100);
        let mut model: std::collections::BTreeMap<u32, (u64, bool)> = Default::default();
        for op in ops {
            match op {
                Op::Internal(c) => {
                    let d = th.on_internal_tick(c, 0, &mut alloc);
                    match (model.get(&c), d) {
                        (None, TickDecision::Send { req_seq }) => {
                            model.insert(c, (req_seq, false));
                        }
                        (Some(_), TickDecision::Throttled { .. }) => {}
                        (m, d) => prop_assert!(false, "model {:?} vs {:?}", m, d),
                    }
                }
                Op::EnqueueFailed(c) => {
                    if let Some(&(r, false)) = model.get(&c) {
                        th.on_enqueue_failed(c, r);
                        model.remove(&c);
                    }
                }
                Op::Popped(c) => {
                    if let Some(&(r, false)) = model.get(&c) {
                        th.on_tick_popped(c, r);
                        model.insert(c, (r, true));
                    }
                }
                Op::Committed(c) => {
                    if let Some(&(r, true)) = model.get(&c) {
                        th.on_committed(c, r);
                        model.remove(&c);
                    }
                }
                Op::Dropped(c) => {
                    if let Some(&(r, _)) = model.get(&c) {
                        th.on_dropped(c, r);
                        model.remove(&c);
                    }
                }
                Op::ViewChange => {
                    th.on_view_change_cleared();
                    model.retain(|_, (_, popped)| !*popped);
                }
            }
            for c in 0..3 {
                prop_assert_eq!(th.pending(c).map(|p| p.req_seq()), model.get(&c).map(|m| m.0));
            }
        }
    }
}

/// Waits (bounded) for the next message; the bound only guards against a hung test.
fn recv(rx: &crossbeam_channel::Receiver<TickInternalMsg>) -> TickInternalMsg {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("generator thread sent nothing")
}

/// Waits until the thread has completed `n` evaluations.
fn wait_polls<C: ccron::ticks::Clock>(generator: &TicksGenerator<C>, n: u64) {
    while generator.stats().polls < n {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn driver_with_manual_clock_sends_due_ticks_in_order_and_shuts_down() {
    let clock = ManualClock::new(0);
    let (tx, rx) = crossbeam_channel::bounded(16);
    // A long poll period: evaluations happen only when the test wakes the thread.
    let config = DriverConfig {
        poll_period_ms: 3_600_000,
    };
    let mut generator = TicksGenerator::spawn(clock.clone(), config, tx).unwrap();
    generator.start(B, 1_000);
    generator.start(A, 1_000);
    assert!(generator.is_generating(A));

    // Not yet due: an evaluation sends nothing (the polls counter proves it ran).
    generator.wake();
    wait_polls(&generator, 1);
    assert!(rx.try_recv().is_err());

    clock.advance_ms(1_000);
    generator.wake();
    assert_eq!(recv(&rx), TickInternalMsg { component: B });
    assert_eq!(recv(&rx), TickInternalMsg { component: A });

    generator.stop(B);
    clock.advance_ms(1_000);
    generator.wake();
    assert_eq!(recv(&rx), TickInternalMsg { component: A });

    generator.stop_thread();
    assert!(!generator.is_running());
    assert_eq!(generator.stats().sent, 3);
    // The sender is dropped with the thread: the channel reports disconnection.
    assert!(rx.recv_timeout(Duration::from_secs(10)).is_err());
}

#[test]
fn driver_counts_a_full_channel_instead_of_blocking() {
    let clock = ManualClock::new(0);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let config = DriverConfig {
        poll_period_ms: 3_600_000,
    };
    let generator = TicksGenerator::spawn(clock.clone(), config, tx).unwrap();
    generator.start(A, 10);
    generator.start(B, 10);
    clock.advance_ms(10);
    generator.wake();
    wait_polls(&generator, 1);
    // A filled the only slot; B found the channel full and was counted, not blocked on.
    let stats = generator.stats();
    assert_eq!((stats.sent, stats.dropped_full), (1, 1));
    assert_eq!(rx.try_recv().unwrap(), TickInternalMsg { component: A });
    drop(generator); // joins the thread; must not hang
}

#[derive(Debug, Clone)]
enum TimerOp {
    Start(u32, u64),
    Stop(u32),
    Advance(u64),
}

fn timer_op() -> impl Strategy<Value = TimerOp> {
    prop_oneof![
        (0u32..4, prop_oneof![Just(0u64), 1u64..3_000]).prop_map(|(c, p)| TimerOp::Start(c, p)),
        (0u32..4).prop_map(TimerOp::Stop),
        (0u64..4_000).prop_map(TimerOp::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The timer core against a naive list model: after every advance, `evaluate` returns
    /// exactly the started components whose expiry passed, each once, in start order, and
    /// `next_deadline` is the earliest expiry.
    #[test]
    fn timers_match_a_naive_model(ops in proptest::collection::vec(timer_op(), 1..60)) {
        let mut t = TickTimers::new();
        // (component, period, next_due) in start order.
        let mut model: Vec<(u32, u64, i64)> = Vec::new();
        let mut now: i64 = 0;
        for op in ops {
            match op {
                TimerOp::Start(c, p) => {
                    t.start(c, p, now);
                    model.retain(|m| m.0 != c);
                    if p > 0 {
                        model.push((c, p, now + p as i64));
                    }
                }
                TimerOp::Stop(c) => {
                    let was = model.iter().any(|m| m.0 == c);
                    prop_assert_eq!(t.stop(c), was);
                    model.retain(|m| m.0 != c);
                }
                TimerOp::Advance(d) => {
                    now += d as i64;
                    let expected: Vec<u32> =
                        model.iter().filter(|m| m.2 <= now).map(|m| m.0).collect();
                    for m in model.iter_mut().filter(|m| m.2 <= now) {
                        m.2 = now + m.1 as i64;
                    }
                    prop_assert_eq!(t.evaluate(now), expected);
                }
            }
            prop_assert_eq!(t.next_deadline(), model.iter().map(|m| m.2).min());
            for c in 0..4 {
                prop_assert_eq!(t.is_generating(c), model.iter().any(|m| m.0 == c));
            }
        }
    }
}

#[test]
fn driver_with_the_system_clock_ticks_and_stops_cleanly() {
    let (tx, rx) = crossbeam_channel::bounded(64);
    let config = DriverConfig { poll_period_ms: 5 };
    let mut generator =
        TicksGenerator::spawn(ccron::ticks::SystemClock::new(), config, tx).unwrap();
    generator.start(A, 10);
    // Only that a tick arrives is asserted, never when.
    assert_eq!(recv(&rx), TickInternalMsg { component: A });
    generator.start(A, 0);
    assert!(!generator.is_generating(A));
    generator.stop_thread();
    generator.stop_thread(); // idempotent
    assert!(!generator.is_running());
}
