//! The pure outbox consumer: bounds, retries, timeouts, dead letters, backoff determinism, and
//! the persistence order of `PersistentConsumer`.

use ccron::outbox::{
    AckEffect, AckOutcome, Backoff, ConfigError, Consumer, ConsumerConfig, DeadLetter,
    DeadLetterSink, FailureReason, IgnoredAck, MemDeadLetters, MemProgressStore, OccurrenceId,
    Outbox, OutboxLimits, OutboxRecord, PersistentConsumer, StoreError,
};
use proptest::prelude::*;

fn outbox(n: u64) -> Outbox {
    let mut ob = Outbox::new(OutboxLimits::default());
    for k in 0..n {
        ob.append(OutboxRecord::new(
            OccurrenceId::new(1, k % 3, k),
            "mail",
            k.to_be_bytes(),
        ))
        .unwrap();
    }
    ob
}

fn config(max_processing: usize, max_search_ahead: u64) -> ConsumerConfig {
    ConsumerConfig {
        max_processing,
        max_search_ahead,
        max_attempts: 3,
        ack_timeout_ms: 100,
        backoff: Backoff {
            base_ms: 10,
            cap_ms: 1000,
            jitter_permille: 0,
        },
    }
}

fn indices(d: &[ccron::outbox::Delivery]) -> Vec<(u64, u32)> {
    d.iter().map(|d| (d.index, d.attempt)).collect()
}

fn done(c: &mut Consumer, index: u64, attempt: u32, now: i64) -> AckEffect {
    c.on_ack(index, attempt, AckOutcome::Done, now)
}

fn failed(c: &mut Consumer, index: u64, attempt: u32, now: i64) -> AckEffect {
    c.on_ack(
        index,
        attempt,
        AckOutcome::Failed {
            reason: "boom".into(),
        },
        now,
    )
}

#[test]
fn in_flight_and_search_ahead_bound_dispatch() {
    let ob = outbox(100);
    let mut c = Consumer::new(config(3, 5), 0).unwrap();
    assert_eq!(indices(&c.poll(&ob, 0)), vec![(1, 1), (2, 1), (3, 1)]);
    assert!(c.poll(&ob, 0).is_empty(), "3 in flight: no capacity");
    assert_eq!(done(&mut c, 2, 1, 1), AckEffect::Completed { progress: 0 });
    assert_eq!(done(&mut c, 3, 1, 1), AckEffect::Completed { progress: 0 });
    assert_eq!(indices(&c.poll(&ob, 1)), vec![(4, 1), (5, 1)]);
    done(&mut c, 4, 1, 2);
    done(&mut c, 5, 1, 2);
    // Two workers are free, but index 6 is beyond progress 0 + search-ahead 5.
    assert_eq!(c.in_flight(), 1);
    assert!(c.poll(&ob, 2).is_empty());
    assert_eq!(done(&mut c, 1, 1, 3), AckEffect::Completed { progress: 5 });
    assert_eq!(indices(&c.poll(&ob, 3)), vec![(6, 1), (7, 1), (8, 1)]);
    c.check_invariants().unwrap();
}

#[test]
fn failures_back_off_deterministically_then_dead_letter() {
    let ob = outbox(2);
    let mut c = Consumer::new(config(2, 4), 0).unwrap();
    c.poll(&ob, 0);
    assert_eq!(
        failed(&mut c, 1, 1, 5),
        AckEffect::RetryScheduled { retry_at_ms: 15 }
    );
    assert!(c.poll(&ob, 14).is_empty());
    assert_eq!(c.next_wakeup_ms(), Some(15));
    assert_eq!(indices(&c.poll(&ob, 15)), vec![(1, 2)]);
    assert_eq!(
        failed(&mut c, 1, 2, 20),
        AckEffect::RetryScheduled { retry_at_ms: 40 }
    );
    assert_eq!(indices(&c.poll(&ob, 40)), vec![(1, 3)]);
    assert_eq!(done(&mut c, 2, 1, 41), AckEffect::Completed { progress: 0 });
    assert_eq!(failed(&mut c, 1, 3, 42), AckEffect::DeadLettered);
    assert_eq!(c.progress(), 2, "progress moves past the dead letter");
    assert_eq!(
        c.take_dead_letters(),
        vec![DeadLetter {
            index: 1,
            id: OccurrenceId::new(1, 0, 0),
            handler: "mail".into(),
            attempts: 3,
            reason: FailureReason::Failed("boom".into()),
            at_ms: 42,
        }]
    );
    assert!(c.take_dead_letters().is_empty());
    c.check_invariants().unwrap();
}

#[test]
fn timeouts_retry_and_late_success_still_counts() {
    let ob = outbox(1);
    let mut c = Consumer::new(config(1, 1), 0).unwrap();
    c.poll(&ob, 0);
    assert!(c.poll(&ob, 99).is_empty());
    // Deadline 100: the attempt expires, backoff 10 ms, attempt 2 at 110.
    assert!(c.poll(&ob, 100).is_empty());
    assert_eq!(indices(&c.poll(&ob, 110)), vec![(1, 2)]);
    // A failure reported for attempt 1 is stale; attempt 2 is what is in flight.
    assert_eq!(
        failed(&mut c, 1, 1, 111),
        AckEffect::Ignored(IgnoredAck::StaleFailure)
    );
    // A late success for attempt 1 is still a success.
    assert_eq!(
        done(&mut c, 1, 1, 112),
        AckEffect::Completed { progress: 1 }
    );
    assert_eq!(
        done(&mut c, 1, 2, 113),
        AckEffect::Ignored(IgnoredAck::NotTracked)
    );
    assert_eq!(
        done(&mut c, 7, 1, 113),
        AckEffect::Ignored(IgnoredAck::NotTracked)
    );
    assert_eq!(c.in_flight(), 0);
    c.check_invariants().unwrap();
}

#[test]
fn repeated_acks_for_a_finished_record_are_ignored() {
    let ob = outbox(3);
    let mut c = Consumer::new(config(3, 3), 0).unwrap();
    c.poll(&ob, 0);
    done(&mut c, 2, 1, 1);
    assert_eq!(
        done(&mut c, 2, 1, 1),
        AckEffect::Ignored(IgnoredAck::AlreadyFinished)
    );
    assert_eq!(
        failed(&mut c, 2, 1, 1),
        AckEffect::Ignored(IgnoredAck::AlreadyFinished)
    );
    assert_eq!(c.in_flight(), 2);
    c.check_invariants().unwrap();
}

#[test]
fn resumes_after_persisted_progress() {
    let ob = outbox(10);
    let mut c = Consumer::new(config(2, 4), 7).unwrap();
    assert_eq!(indices(&c.poll(&ob, 0)), vec![(8, 1), (9, 1)]);
    assert_eq!(c.highest_dispatched(), 9);
}

#[test]
fn invalid_configs_are_rejected() {
    let good = config(2, 4);
    let cases = [
        (
            ConsumerConfig {
                max_processing: 0,
                ..good
            },
            ConfigError::NoProcessing,
        ),
        (
            ConsumerConfig {
                max_search_ahead: 1,
                ..good
            },
            ConfigError::SearchAheadTooSmall {
                max_search_ahead: 1,
                max_processing: 2,
            },
        ),
        (
            ConsumerConfig {
                max_attempts: 0,
                ..good
            },
            ConfigError::NoAttempts,
        ),
        (
            ConsumerConfig {
                ack_timeout_ms: 0,
                ..good
            },
            ConfigError::AckTimeout(0),
        ),
    ];
    for (cfg, err) in cases {
        assert_eq!(Consumer::new(cfg, 0).unwrap_err(), err);
    }
    for backoff in [
        Backoff {
            base_ms: -1,
            ..good.backoff
        },
        Backoff {
            cap_ms: 5,
            ..good.backoff
        },
        Backoff {
            jitter_permille: 1001,
            ..good.backoff
        },
    ] {
        assert!(matches!(
            Consumer::new(ConsumerConfig { backoff, ..good }, 0),
            Err(ConfigError::Backoff(_))
        ));
    }
}

#[test]
fn backoff_doubles_up_to_the_cap_and_jitter_spreads_ids() {
    let b = Backoff {
        base_ms: 100,
        cap_ms: 1_000,
        jitter_permille: 0,
    };
    let id = OccurrenceId::new(1, 2, 3);
    let plain: Vec<i64> = (1..=6).map(|a| b.delay_ms(&id, a)).collect();
    assert_eq!(plain, vec![100, 200, 400, 800, 1000, 1000]);
    assert_eq!(b.delay_ms(&id, u32::MAX), 1000, "huge attempts saturate");

    let j = Backoff {
        jitter_permille: 500,
        ..b
    };
    let delays: std::collections::BTreeSet<i64> = (0..64)
        .map(|n| j.delay_ms(&OccurrenceId::new(1, 2, n), 1))
        .collect();
    assert!(delays.iter().all(|d| (100..=150).contains(d)));
    assert!(
        delays.len() > 20,
        "jitter spreads records that failed together: {delays:?}"
    );
    // Pinned values: the retry schedule is reproducible across runs, builds and platforms.
    assert_eq!(
        (1..=5).map(|a| j.delay_ms(&id, a)).collect::<Vec<_>>(),
        vec![137, 283, 471, 870, 1136]
    );
}

/// Persisted progress never passes a dead letter that was not durably recorded.
#[test]
fn dead_letters_are_recorded_before_progress_is_saved() {
    struct Broken(bool);
    impl DeadLetterSink for Broken {
        fn record(&mut self, _: &DeadLetter) -> Result<(), StoreError> {
            if self.0 {
                Err(StoreError::Io {
                    path: "dead".into(),
                    reason: "disk full".into(),
                })
            } else {
                Ok(())
            }
        }
    }
    let ob = outbox(1);
    let cfg = ConsumerConfig {
        max_attempts: 1,
        ..config(1, 1)
    };
    let mut progress = MemProgressStore::default();
    let mut sink = Broken(true);
    let mut pc = PersistentConsumer::open(cfg, &mut progress, &mut sink).unwrap();
    pc.poll(&ob, 0).unwrap();
    let err = pc
        .on_ack(1, 1, AckOutcome::Failed { reason: "x".into() }, 1)
        .unwrap_err();
    assert!(matches!(err, ccron::outbox::ConsumerError::Store(_)));
    assert_eq!(pc.consumer().progress(), 1);
    assert_eq!(pc.persisted_progress(), 0);
    drop(pc);
    assert_eq!(progress.saves, 0);

    // A working sink: the same failure is recorded, then progress saved.
    let mut progress = MemProgressStore::default();
    let mut sink = MemDeadLetters::default();
    let mut pc = PersistentConsumer::open(cfg, &mut progress, &mut sink).unwrap();
    pc.poll(&ob, 0).unwrap();
    assert_eq!(
        pc.on_ack(1, 1, AckOutcome::Failed { reason: "x".into() }, 1),
        Ok(AckEffect::DeadLettered)
    );
    drop(pc);
    assert_eq!((progress.progress, sink.letters.len()), (1, 1));
}

#[derive(Debug, Clone)]
enum Op {
    Poll(u8),
    Ack { pick: u8, ok: bool, stale: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..40).prop_map(Op::Poll),
        (any::<u8>(), any::<bool>(), any::<bool>()).prop_map(|(pick, ok, stale)| Op::Ack {
            pick,
            ok,
            stale
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Under any interleaving of polls and (possibly stale, repeated or bogus) acknowledgements:
    /// never more than max_processing in flight, never a dispatch beyond progress +
    /// max_search_ahead, progress never decreases, and the internal invariants hold.
    #[test]
    fn bounds_hold_under_random_operations(
        mp in 1usize..5,
        extra in 0u64..6,
        attempts in 1u32..4,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let ob = outbox(40);
        let cfg = ConsumerConfig { max_attempts: attempts, ..config(mp, mp as u64 + extra) };
        let mut c = Consumer::new(cfg, 0).unwrap();
        let mut now = 0i64;
        let mut sent: Vec<(u64, u32)> = Vec::new();
        let mut last_progress = 0;
        for op in ops {
            match op {
                Op::Poll(dt) => {
                    now += i64::from(dt);
                    let d = c.poll(&ob, now);
                    prop_assert!(d.len() <= mp);
                    for x in &d {
                        prop_assert!(x.index <= c.progress() + cfg.max_search_ahead);
                        prop_assert!(x.index > c.progress());
                        prop_assert!(x.attempt <= attempts);
                        prop_assert_eq!(Some(&x.record), ob.get(x.index));
                    }
                    sent.extend(indices(&d));
                }
                Op::Ack { pick, ok, stale } => {
                    let (index, attempt) = if sent.is_empty() || usize::from(pick) >= sent.len() * 2 {
                        (u64::from(pick), 1)
                    } else {
                        sent[usize::from(pick) % sent.len()]
                    };
                    let attempt = if stale { attempt.saturating_sub(1).max(1) } else { attempt };
                    let outcome = if ok { AckOutcome::Done } else { AckOutcome::Failed { reason: "f".into() } };
                    c.on_ack(index, attempt, outcome, now);
                }
            }
            prop_assert!(c.in_flight() <= mp);
            prop_assert!(c.progress() >= last_progress);
            last_progress = c.progress();
            if let Err(e) = c.check_invariants() {
                return Err(TestCaseError::fail(e));
            }
        }
    }

    /// The backoff is a pure function of (config, id, attempt) and stays within its documented
    /// bounds.
    #[test]
    fn backoff_is_pure_and_bounded(
        base in 0i64..10_000,
        extra in 0i64..100_000,
        permille in 0u32..=1000,
        id in any::<(u32, u64, u64)>(),
        attempt in 1u32..80,
    ) {
        let b = Backoff { base_ms: base, cap_ms: base + extra, jitter_permille: permille };
        let id = OccurrenceId::new(id.0, id.1, id.2);
        let d = b.delay_ms(&id, attempt);
        prop_assert_eq!(d, b.delay_ms(&id, attempt));
        let capped = (i128::from(base) << (attempt - 1).min(62)).min(i128::from(base + extra)) as i64;
        prop_assert!(d >= capped);
        prop_assert!(d <= capped + capped * i64::from(permille) / 1000);
    }
}

#[test]
fn give_up_dead_letters_at_once_for_the_attempt_in_flight_or_a_waiting_record() {
    let ob = outbox(3);
    let mut c = Consumer::new(config(3, 3), 0).unwrap();
    assert_eq!(indices(&c.poll(&ob, 0)), vec![(1, 1), (2, 1), (3, 1)]);
    let why = || FailureReason::Failed("retry limit of handler mail".into());
    // A stale attempt number is ignored; the attempt in flight is given up.
    assert_eq!(
        c.give_up(1, 2, why(), 5),
        AckEffect::Ignored(IgnoredAck::StaleFailure)
    );
    assert_eq!(c.give_up(1, 1, why(), 5), AckEffect::DeadLettered);
    assert_eq!(c.progress(), 1);
    // A record waiting for its retry can be given up too.
    assert!(matches!(
        c.on_ack(2, 1, AckOutcome::Failed { reason: "x".into() }, 6),
        AckEffect::RetryScheduled { .. }
    ));
    assert_eq!(c.give_up(2, 1, why(), 7), AckEffect::DeadLettered);
    assert_eq!(c.progress(), 2);
    assert_eq!(
        c.give_up(2, 1, why(), 8),
        AckEffect::Ignored(IgnoredAck::NotTracked)
    );
    c.on_ack(3, 1, AckOutcome::Done, 9);
    assert_eq!(
        c.give_up(4, 1, why(), 9),
        AckEffect::Ignored(IgnoredAck::NotTracked)
    );
    let letters = c.take_dead_letters();
    assert_eq!(
        letters
            .iter()
            .map(|l| (l.index, l.attempts))
            .collect::<Vec<_>>(),
        vec![(1, 1), (2, 1)]
    );
    assert_eq!(letters[0].reason, why());
    c.check_invariants().unwrap();
}
