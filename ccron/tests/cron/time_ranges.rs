//! Time arithmetic on admitted data (issue 10, defect 2): every instant and span a request can
//! carry has a documented range (`MIN_INSTANT_MS`, `MAX_INSTANT_MS`, `MAX_PERIOD_MS`,
//! `docs/scheduling.md`), enforced at admission, and every occurrence computation is checked:
//! for any admitted timing and any tick time, a tick never panics and leaves the next
//! occurrence strictly after the tick (or none).

use ccron::Principal;
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, MAX_INSTANT_MS, MAX_PERIOD_MS, MIN_INSTANT_MS, Misfire, NewSchedule,
    ScheduleError, ScheduleRequest, Scheduler, Timing,
};
use ccron::{CronEntry, CronTable, Due, MemPages, Periodic, Tick};
use proptest::prelude::*;

fn handlers() -> Handlers<u64> {
    let mut h: Handlers<u64> = Handlers::new();
    assert!(h.register("run", |ctx| *ctx.state += 1));
    h
}

fn create(timing: Timing, misfire: Misfire) -> ScheduleRequest {
    ScheduleRequest::Create(NewSchedule::new("run", timing).with_misfire(misfire))
}

/// The regression: a start at `i64::MIN` was admitted and the next tick overflowed in the
/// occurrence computation (a panic in debug builds; in release the schedule fired once and
/// never again). It is now rejected, and nothing changes.
#[test]
fn a_start_at_i64_min_is_rejected_and_changes_nothing() {
    let h = handlers();
    let mut book = Scheduler::new(1, Limits::default());
    let before = book.clone();
    let r = book.apply(
        &Principal::Host,
        create(
            Timing::Every {
                period_ms: 1,
                start_ms: Some(i64::MIN),
            },
            Misfire::FireOnce,
        ),
        &h,
        1,
        Some(1_000),
    );
    assert!(matches!(r, Err(ScheduleError::Invalid(_))), "{r:?}");
    assert_eq!(book, before);
}

#[test]
fn every_bound_is_enforced_at_admission_and_the_bounds_themselves_are_admitted() {
    let h = handlers();
    let every = |period_ms, start_ms| Timing::Every {
        period_ms,
        start_ms: Some(start_ms),
    };
    let rejected = [
        (every(1, MIN_INSTANT_MS - 1), Misfire::FireOnce),
        (every(1, MAX_INSTANT_MS), Misfire::FireOnce),
        (every(0, 0), Misfire::FireOnce),
        (every(MAX_PERIOD_MS + 1, 0), Misfire::FireOnce),
        (every(i64::MAX, 0), Misfire::FireOnce),
        (Timing::At(Due::Time(-1)), Misfire::FireOnce),
        (Timing::At(Due::Time(i64::MAX)), Misfire::FireOnce),
        (Timing::AfterMs(-1), Misfire::FireOnce),
        (Timing::AfterMs(MAX_PERIOD_MS + 1), Misfire::FireOnce),
        // Resolved at admission time 0: past the end of the instant range.
        (Timing::AfterMs(MAX_PERIOD_MS), Misfire::FireOnce),
        (
            every(1, 0),
            Misfire::ExpireAfter {
                deadline_ms: MAX_PERIOD_MS + 1,
            },
        ),
        (every(1, 0), Misfire::ExpireAfter { deadline_ms: -1 }),
        // The time-or-sequence trigger (issue 13): the time part is an instant, the sums are
        // checked (admitted at sequence 1, time 0).
        (Timing::AtOrSeq { at_ms: -1, seq: 0 }, Misfire::FireOnce),
        (
            Timing::AtOrSeq {
                at_ms: MAX_INSTANT_MS,
                seq: 0,
            },
            Misfire::FireOnce,
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: -1,
                delay_seqs: 0,
            },
            Misfire::FireOnce,
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: MAX_PERIOD_MS,
                delay_seqs: 0,
            },
            Misfire::FireOnce,
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: 0,
                delay_seqs: u64::MAX,
            },
            Misfire::FireOnce,
        ),
    ];
    for (timing, misfire) in rejected {
        let mut book = Scheduler::new(1, Limits::default());
        let r = book.apply(
            &Principal::Host,
            create(timing.clone(), misfire),
            &h,
            1,
            Some(0),
        );
        assert!(
            matches!(r, Err(ScheduleError::Invalid(_))),
            "{timing:?} {misfire:?}: {r:?}"
        );
        assert!(book.is_empty());
    }
    // A defaulted start is the agreed time, which must lie in the range too (the stored start
    // is re-validated when the book loads).
    let mut book = Scheduler::new(1, Limits::default());
    let r = book.apply(
        &Principal::Host,
        create(
            Timing::Every {
                period_ms: 1,
                start_ms: None,
            },
            Misfire::FireOnce,
        ),
        &h,
        1,
        Some(-1),
    );
    assert!(matches!(r, Err(ScheduleError::Invalid(_))), "{r:?}");
    let admitted = [
        (every(1, MIN_INSTANT_MS), Misfire::FireOnce),
        (every(MAX_PERIOD_MS, MAX_INSTANT_MS - 1), Misfire::FireOnce),
        (Timing::At(Due::Time(MAX_INSTANT_MS - 1)), Misfire::FireOnce),
        (Timing::At(Due::Seq(u64::MAX)), Misfire::FireOnce),
        (Timing::AfterMs(MAX_PERIOD_MS - 1), Misfire::FireOnce),
        (
            Timing::AtOrSeq {
                at_ms: MAX_INSTANT_MS - 1,
                seq: u64::MAX,
            },
            Misfire::FireOnce,
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: MAX_PERIOD_MS - 1,
                delay_seqs: u64::MAX - 1,
            },
            Misfire::FireOnce,
        ),
        (
            every(1, 0),
            Misfire::ExpireAfter {
                deadline_ms: MAX_PERIOD_MS,
            },
        ),
    ];
    for (timing, misfire) in admitted {
        let mut book = Scheduler::new(1, Limits::default());
        let r = book.apply(
            &Principal::Host,
            create(timing.clone(), misfire),
            &h,
            1,
            Some(0),
        );
        assert!(r.is_ok(), "{timing:?} {misfire:?}: {r:?}");
    }
}

/// A cron table's periodic entry ticked at the end of time: `Periodic::step_at` saturates the
/// grid at `TimeMs::MAX`, and the table's debug assertion accepts exactly that (it used to
/// fire, the two rules disagreeing).
#[test]
fn a_periodic_table_entry_ticked_at_i64_max_agrees_with_step_at() {
    let mut t: CronTable<u32> =
        CronTable::with_persistence(3, ccron::PageRange::new(0, 2).unwrap(), 4);
    t.add(CronEntry::periodic(
        0,
        Periodic::every_ms(1).unwrap(),
        |ctx| *ctx.state += 1,
    ))
    .unwrap();
    let mut pages = MemPages::new(4_096, 4);
    let mut state = 0;
    for (seq, now) in [(1, 0), (2, i64::MAX - 1), (3, i64::MAX), (4, i64::MAX)] {
        let out = t
            .evaluate(&Tick::new(3, seq, Some(now)), &mut state, &mut pages)
            .unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let next = t.next_due_ms(0).unwrap();
        assert!(next > now || next == i64::MAX, "next {next} at {now}");
    }
    // Runs at 0, i64::MAX - 1 and i64::MAX; the repeated tick at i64::MAX runs nothing more
    // than once (the saturated point is due there).
    assert!(state >= 3, "{state}");
}

fn instant() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(MIN_INSTANT_MS),
        Just(MAX_INSTANT_MS - 1),
        MIN_INSTANT_MS..MAX_INSTANT_MS,
        any::<i64>(),
    ]
}

fn span() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(1i64),
        Just(MAX_PERIOD_MS),
        1i64..100_000,
        1i64..=MAX_PERIOD_MS,
        any::<i64>(),
    ]
}

fn timing() -> impl Strategy<Value = Timing> {
    prop_oneof![
        (span(), proptest::option::of(instant())).prop_map(|(period_ms, start_ms)| {
            Timing::Every {
                period_ms,
                start_ms,
            }
        }),
        instant().prop_map(|t| Timing::At(Due::Time(t))),
        span().prop_map(Timing::AfterMs),
        (instant(), any::<u64>()).prop_map(|(at_ms, seq)| Timing::AtOrSeq { at_ms, seq }),
        (span(), any::<u64>()).prop_map(|(delay_ms, delay_seqs)| Timing::AfterMsOrSeqs {
            delay_ms,
            delay_seqs,
        }),
        Just(Timing::Cron {
            expression: "*/7 * * * *".into(),
            zone: None,
        }),
    ]
}

fn misfire() -> impl Strategy<Value = Misfire> {
    prop_oneof![
        Just(Misfire::Skip),
        Just(Misfire::FireOnce),
        (1u32..=50).prop_map(|cap| Misfire::FireEach { cap }),
        span().prop_map(|deadline_ms| Misfire::ExpireAfter { deadline_ms }),
    ]
}

fn tick_time() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::MAX - 1),
        Just(MAX_INSTANT_MS),
        instant(),
        any::<i64>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// For any admitted timing and any tick times, ticks never panic, and after each tick a
    /// remaining schedule's next occurrence is strictly after the tick's time, or none (or a
    /// sequence point).
    #[test]
    fn ticks_never_panic_and_next_passes_the_tick(
        timing in timing(),
        misfire in misfire(),
        admitted_at in instant(),
        times in proptest::collection::vec(tick_time(), 1..8),
    ) {
        let mut h = handlers();
        let mut book = Scheduler::new(1, Limits::default());
        let mut outbox = Outbox::new(OutboxLimits::default());
        let mut state = 0u64;
        let Ok(Some(id)) = book.apply(&Principal::Host, create(timing, misfire), &h, 1, Some(admitted_at)) else {
            return Ok(());
        };
        for (i, now) in times.into_iter().enumerate() {
            let tick = Tick::new(1, 2 + i as u64, Some(now));
            let _ = book.on_tick(&tick, &mut state, &mut h, &mut outbox);
            book.check_invariants().unwrap();
            let Some(info) = book.get(id) else { break };
            if info.owed.is_some() {
                continue;
            }
            match info.next {
                Some(Due::Time(t)) => prop_assert!(t > now, "next {t} at tick {now}"),
                Some(Due::Seq(_)) | None => {}
            }
        }
    }
}
