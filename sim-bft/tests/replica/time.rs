//! Time service: inclusive soft/hard bounds with counters (reference rule), strictly increasing
//! agreed time, robust median with f lying clocks, and time surviving state transfer.

use crate::replica_support;

use replica_support::{Harness, T0};
use sim_bft::replica::{Byzantine, TimeConfig, TimeMode};

/// Reference rule, primary's clock ahead by `offset`: returns backup 1's (soft, hard) counters
/// and whether the cluster stayed in view 0.
fn reference_with_primary_offset(offset: i64) -> (u64, u64, bool, Harness) {
    let mut h = Harness::new(4, |c| c.time.mode = TimeMode::Reference);
    h.clock_offset_ms[0] = offset;
    h.put(1, "a", "1");
    h.deliver_all();
    let m = h.replica(1).metrics();
    (
        m.get("time_soft_exceeded"),
        m.get("time_hard_exceeded"),
        h.executed[1].len() == 1,
        h,
    )
}

#[test]
fn reference_bounds_are_inclusive_and_counted() {
    assert_eq!(reference_with_primary_offset(0).0, 0);
    let (soft, hard, ok, _) = reference_with_primary_offset(500);
    assert_eq!(
        (soft, hard, ok),
        (0, 0, true),
        "500 ms is within the soft limit"
    );
    let (soft, hard, ok, _) = reference_with_primary_offset(-501);
    assert_eq!(
        (soft, hard, ok),
        (1, 0, true),
        "501 ms exceeds the soft limit only"
    );
    let (soft, hard, ok, _) = reference_with_primary_offset(3_000);
    assert_eq!(
        (soft, hard, ok),
        (1, 0, true),
        "3 s is within the hard limit"
    );
    let (soft, hard, ok, mut h) = reference_with_primary_offset(3_001);
    assert_eq!(
        (soft, hard, ok),
        (1, 1, false),
        "beyond 3 s the backups withhold votes"
    );
    // The withheld votes lead to a view change, after which the request executes with an
    // honest primary's time.
    h.advance(6_000);
    assert!(h.replica(1).view() >= 1);
    h.assert_agreement(&[1, 2, 3]);
    let e = h.executed[1].last().unwrap();
    assert!(e.agreed_time_ms.unwrap() <= h.now);
}

#[test]
fn agreed_time_is_strictly_increasing_even_with_a_stopped_clock() {
    for mode in [TimeMode::Reference, TimeMode::Robust] {
        let mut h = Harness::new(4, |c| {
            c.time.mode = mode;
            c.max_in_flight = 1;
        });
        for k in 0..30 {
            h.put(k % 3, &format!("k{k}"), "v");
            h.deliver_all(); // virtual time never advances
        }
        let times: Vec<i64> = h.executed[2]
            .iter()
            .map(|e| e.agreed_time_ms.unwrap())
            .collect();
        assert!(times.len() >= 10);
        assert!(times.windows(2).all(|w| w[1] > w[0]), "{mode:?}: {times:?}");
        // The robust rule floors a batch's time at the primary's stamp minus the genesis
        // bound (never ahead of an honest clock): the first batch, without a certificate,
        // gets exactly that.
        let first = match mode {
            TimeMode::Robust => T0 - TimeConfig::default().genesis_bound_ms,
            _ => T0,
        };
        assert_eq!(times[0], first);
    }
}

#[test]
fn time_off_gives_no_agreed_time() {
    let mut h = Harness::new(4, |c| c.time.mode = TimeMode::Off);
    h.put(0, "a", "b");
    h.deliver_all();
    assert_eq!(h.executed[0][0].agreed_time_ms, None);
}

/// Robust rule with one liar (f = 1) at `liar` whose clock is off by `offset`: agreed time
/// must stay within the honest clocks' range.
fn robust_with_liar(liar: u32, offset: i64) -> Harness {
    let mut h = Harness::new(4, |c| c.time.mode = TimeMode::Robust);
    h.clock_offset_ms[liar as usize] = offset;
    let start = h.now;
    for k in 0..60 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.advance(50);
    }
    h.advance(8_000);
    for k in 0..20 {
        h.put(k % 3, &format!("m{k}"), "v");
        h.advance(50);
    }
    let honest: Vec<u32> = (0..4).filter(|i| *i != liar).collect();
    h.assert_agreement(&honest);
    let e = &h.executed[honest[0] as usize];
    let users: u64 = e
        .iter()
        .map(|x| u64::from(x.requests) - x.ticks.len() as u64)
        .sum();
    assert_eq!(users, 80, "every request executed");
    let mut prev = i64::MIN;
    for x in e {
        let t = x.agreed_time_ms.unwrap();
        // Honest clocks read between `start` and `h.now`; epsilon steps may add a few ms. The
        // first batches (no certificate yet) get the primary's stamp minus the genesis bound.
        assert!(
            t >= start - TimeConfig::default().genesis_bound_ms && t <= h.now + 100,
            "time {t} outside honest range"
        );
        assert!(t > prev);
        prev = t;
    }
    h
}

#[test]
fn robust_time_ignores_a_lying_backup() {
    robust_with_liar(3, 3_600_000);
    robust_with_liar(2, -3_600_000);
}

#[test]
fn robust_time_ignores_a_lying_primary() {
    let h = robust_with_liar(0, 3_600_000);
    // The liar's first batches (no certificate yet) were refused by the tight genesis bound.
    assert!(h.replica(1).metrics().get("time_hard_exceeded") >= 1);
    // A lying primary *within* the hard limit once certificates exist cannot move time either.
    let h = robust_with_liar(0, 400);
    let last = h.executed[1].last().unwrap().agreed_time_ms.unwrap();
    assert!(last <= h.now);
}

#[test]
fn robust_batches_carry_certificates_after_the_first_commits() {
    let mut h = Harness::new(4, |c| c.max_in_flight = 1);
    for k in 0..10 {
        h.put(0, &format!("k{k}"), "v");
        h.advance(10);
    }
    let m = h.replica(1).metrics();
    assert_eq!(m.get("time_cert_invalid"), 0);
    assert_eq!(m.get("time_cert_replayed"), 0);
    assert_eq!(m.get("time_cert_missing"), 0);
    assert!(h.executed[1].len() >= 10);
}

#[test]
fn agreed_time_survives_state_transfer_in_the_time_page() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
    });
    h.isolated.insert(2);
    for k in 0..40 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.advance(25);
    }
    h.isolated.clear();
    for k in 0..20 {
        h.put(0, &format!("z{k}"), "v");
        h.advance(25);
    }
    h.advance(3_000);
    let r2 = h.replica(2);
    assert!(r2.metrics().get("state_transfers_completed") >= 1);
    assert_eq!(r2.last_agreed_time_ms(), h.replica(0).last_agreed_time_ms());
    assert_eq!(r2.pages().snapshot()[0], h.replica(0).pages().snapshot()[0]);
}

#[test]
fn replayed_old_time_certificate_is_refused() {
    use sim_bft::crypto::replica_signing_key;
    use sim_bft::node::Input;
    use sim_bft::protocol::{Body, Payload, SignedMsg, Wire, codec};

    let mut h = Harness::new(4, |c| c.max_in_flight = 1);
    let mut old_batch = None;
    for k in 0..12 {
        h.put(0, &format!("k{k}"), "v");
        // Capture the primary's pre-prepare for seq 4 (it carries a certificate for seq 3).
        for (from, _, bytes) in h.queue.iter() {
            if *from != 0 || old_batch.is_some() {
                continue;
            }
            if let Ok(Wire::Signed(m)) = codec::decode::<Wire>(bytes, 1 << 22)
                && let Ok(p) = codec::decode::<Payload>(&m.payload, 1 << 22)
                && let Body::PrePrepare { seq: 4, batch, .. } = p.body
            {
                old_batch = Some(batch);
            }
        }
        h.advance(10);
    }
    let mut batch = old_batch.expect("captured seq 4");
    assert_eq!(batch.time_cert.as_ref().map(|c| c.seq), Some(3));
    let executed = h.replica(1).last_executed();
    assert!(executed >= 12);
    // A Byzantine primary re-proposes with the stale certificate to freeze time.
    h.put(1, "fresh", "v");
    batch.requests = vec![codec::decode(&h.request_bytes(2, b"x".to_vec()), 1 << 20).unwrap()];
    let payload = Payload {
        from: 0,
        body: Body::PrePrepare {
            view: 0,
            seq: executed + 2,
            batch,
        },
    };
    let msg = SignedMsg::sign(&replica_signing_key(replica_support::SEED, 0), &payload).unwrap();
    let bytes = codec::encode(&Wire::Signed(msg)).unwrap();
    h.queue.clear();
    h.input(1, Input::Peer { from: 0, bytes });
    assert_eq!(h.replica(1).metrics().get("time_cert_replayed"), 1);
    // The backup withheld its prepare.
    assert!(h.queue.iter().all(|(from, _, _)| *from != 1));
}

#[test]
fn extreme_clock_values_from_a_byzantine_primary_do_not_panic() {
    use sim_bft::crypto::replica_signing_key;
    use sim_bft::node::Input;
    use sim_bft::protocol::{Batch, Body, Payload, SignedMsg, Wire, codec};

    for mode in [TimeMode::Reference, TimeMode::Robust] {
        for clock in [i64::MIN, i64::MAX] {
            let mut h = Harness::new(4, |c| c.time.mode = mode);
            let req = codec::decode(&h.request_bytes(1, b"x".to_vec()), 1 << 20).unwrap();
            let batch = Batch {
                requests: vec![req],
                primary_clock_ms: clock,
                time_cert: None,
                null: false,
            };
            let payload = Payload {
                from: 0,
                body: Body::PrePrepare {
                    view: 0,
                    seq: 1,
                    batch,
                },
            };
            let msg =
                SignedMsg::sign(&replica_signing_key(replica_support::SEED, 0), &payload).unwrap();
            let bytes = codec::encode(&Wire::Signed(msg)).unwrap();
            h.input(1, Input::Peer { from: 0, bytes });
            assert_eq!(h.replica(1).metrics().get("time_hard_exceeded"), 1);
            assert!(h.queue.is_empty(), "votes must be withheld");
        }
    }
}

#[test]
fn restarted_primary_keeps_its_view_and_its_next_batches_commit() {
    // Restarts right after each of the first checkpoints too, when the log holds no batch
    // whose certificate the primary could reuse.
    for writes in 3..=12 {
        let mut h = Harness::new(4, |c| {
            c.max_in_flight = 1;
            c.checkpoint_interval = 4;
            c.log_window = 8;
        });
        for k in 0..writes {
            h.put(0, &format!("k{k}"), "v");
            h.advance(10);
        }
        let before = h.replica(1).last_executed();
        // The primary crashes and restarts from its storage at once.
        h.crash(0);
        h.recover(0);
        for k in 0..5 {
            h.put(0, &format!("after{k}"), "v");
            h.advance(10);
        }
        // Its next proposals are accepted (with a certificate from its log, or bounded tightly
        // when it has none yet): no view change.
        for i in 0..4 {
            assert_eq!(
                h.replica(i).view(),
                0,
                "{writes} writes: replica {i} changed view"
            );
            assert!(
                h.replica(i).last_executed() >= before + 5,
                "{writes} writes: replica {i} stalled"
            );
        }
    }
}

/// Issue 9 defect 2, the attack itself: in steady state a primary proposes a batch without a
/// certificate, stamped just inside the genesis bound ahead. The old omission guard only fired
/// when the backup's newest certificate was more than `max_in_flight + 1` seqs old, which never
/// happens in steady state, so the backup voted and agreed time became the primary's stamp.
#[test]
fn certificate_omitted_in_steady_state_is_refused() {
    use sim_bft::crypto::replica_signing_key;
    use sim_bft::node::Input;
    use sim_bft::protocol::{Batch, Body, Payload, SignedMsg, Wire, codec};

    let mut h = Harness::new(4, |c| c.max_in_flight = 1);
    for k in 0..12 {
        h.put(0, &format!("k{k}"), "v");
        h.advance(10);
    }
    let executed = h.replica(1).last_executed();
    assert!(executed >= 12);
    let req = codec::decode(&h.request_bytes(2, b"x".to_vec()), 1 << 20).unwrap();
    let batch = Batch {
        requests: vec![req],
        primary_clock_ms: h.now + TimeConfig::default().genesis_bound_ms - 1,
        time_cert: None,
        null: false,
    };
    let payload = Payload {
        from: 0,
        body: Body::PrePrepare {
            view: 0,
            seq: executed + 1,
            batch,
        },
    };
    let msg = SignedMsg::sign(&replica_signing_key(replica_support::SEED, 0), &payload).unwrap();
    let bytes = codec::encode(&Wire::Signed(msg)).unwrap();
    h.queue.clear();
    h.input(1, Input::Peer { from: 0, bytes });
    assert_eq!(h.replica(1).metrics().get("time_cert_missing"), 1);
    assert!(
        h.queue.iter().all(|(from, _, _)| *from != 1),
        "the backup must withhold its prepare"
    );
}

/// Runs a cluster whose replica 0 (the first primary) is Byzantine with `kind`, with requests
/// every 50 ms, and returns the harness. Every agreed time is checked against the honest
/// clocks when it executes: never ahead of them (epsilon steps aside), and never more than the
/// genesis bound behind.
fn time_attack(kind: Byzantine, max_in_flight: u64) -> (Harness, Option<u64>) {
    let mut h = Harness::new(4, |c| {
        c.max_in_flight = max_in_flight;
        if c.id == 0 {
            c.byzantine = kind;
        }
    });
    let bound = TimeConfig::default().genesis_bound_ms;
    let mut seen = 0;
    let mut before_view_change = None;
    for k in 0..120 {
        let executed_before = h.replica(1).last_executed();
        h.put(1 + k % 3, &format!("k{k}"), "v");
        h.advance(50);
        if before_view_change.is_none() && h.replica(1).view() >= 1 {
            // The view change and the new primary's first batches may fall into one step.
            before_view_change = Some(executed_before);
        }
        for e in &h.executed[1][seen..] {
            let t = e.agreed_time_ms.unwrap();
            assert!(
                t <= h.now + 5,
                "{kind:?}: seq {} time {t} ahead of {}",
                e.seq,
                h.now
            );
            assert!(
                t >= h.now - bound - 100,
                "{kind:?}: seq {} time {t} lags {}",
                e.seq,
                h.now
            );
        }
        seen = h.executed[1].len();
    }
    h.assert_agreement(&[1, 2, 3]);
    assert_eq!(h.total_requests(1), 120, "{kind:?}: every request executed");
    (h, before_view_change)
}

/// What a backup had executed when it left view 0: the batches the Byzantine primary got
/// through before it lost its view.
fn committed_in_first_view(h: &(Harness, Option<u64>)) -> u64 {
    h.1.expect("the primary kept its view")
}

#[test]
fn primary_omitting_certificates_loses_its_view() {
    for mif in [1, 4] {
        let h = time_attack(Byzantine::TimeOmit, mif);
        // Certificate-less batches are acceptable only up to seq max_in_flight + 1.
        let got = committed_in_first_view(&h);
        assert!(got <= mif + 1, "max_in_flight {mif}: {got}");
        assert!(h.0.replica(1).metrics().get("time_cert_missing") >= 1);
    }
}

#[test]
fn primary_stamping_its_own_time_loses_its_view_and_never_moves_time_ahead() {
    for mif in [1, 4] {
        let h = time_attack(Byzantine::TimeOwn, mif);
        let got = committed_in_first_view(&h);
        assert!(got <= mif + 1, "max_in_flight {mif}: {got}");
    }
}

#[test]
fn primary_replaying_an_old_certificate_loses_its_view() {
    for mif in [1, 4] {
        let h = time_attack(Byzantine::TimeReplay, mif);
        // Its certificate may lag by max_in_flight + 1 seqs: the first stale one is refused.
        assert!(
            committed_in_first_view(&h) <= 2 * (mif + 1) + 1,
            "max_in_flight {mif}"
        );
        assert!(h.0.replica(1).metrics().get("time_cert_replayed") >= 1);
    }
}

/// A primary whose clock runs just inside the bound ahead, attaching certificates as it must:
/// it keeps its view, and agreed time still never runs ahead of the honest clocks.
#[test]
fn primary_clock_ahead_within_the_bound_does_not_move_time_ahead() {
    let bound = TimeConfig::default().genesis_bound_ms;
    let (h, view_change) = time_attack(
        Byzantine::LyingClock {
            offset_ms: bound - 1,
        },
        4,
    );
    assert_eq!((h.replica(1).view(), view_change), (0, None));
}

/// Issue 9 defect 3: after a long idle period the first batches carried the last certificate,
/// stale by the idle time (agreed time more than 60 s behind every clock). The primary's stamp,
/// checked by the backups, now floors agreed time.
#[test]
fn first_batches_after_a_long_stall_carry_current_time() {
    let bound = TimeConfig::default().genesis_bound_ms;
    for mif in [1, 4] {
        let mut h = Harness::new(4, |c| c.max_in_flight = mif);
        for k in 0..20 {
            h.put(k % 3, &format!("k{k}"), "v");
            h.advance(20);
        }
        let before = h.executed[1].len();
        h.advance(120_000);
        for k in 0..6 {
            h.put(k % 3, &format!("after{k}"), "v");
        }
        h.advance(20);
        let after = &h.executed[1][before..];
        assert!(after.len() >= 2, "max_in_flight {mif}: {}", after.len());
        for e in after {
            let t = e.agreed_time_ms.unwrap();
            assert!(
                t >= h.now - bound - 100 && t <= h.now,
                "max_in_flight {mif}: seq {} agreed {t}, now {}",
                e.seq,
                h.now
            );
        }
    }
}
