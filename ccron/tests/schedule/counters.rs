//! The book's replicated run counters (layout 7): fired, failed, late, skipped and expired, per
//! schedule and for the whole book, checked against a brute-force model of the misfire rule
//! over random periodic schedules and tick sequences; persisted (a reload is equal) and kept
//! in the book's totals after a schedule leaves it.

use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    HandlerError, Handlers, Limits, Misfire, NewSchedule, RetryPolicy, RunCounters, RunPolicy,
    ScheduleRequest, Scheduler, Timing,
};
use ccron::{Due, MemPages, PageRange, Principal, Tick};
use proptest::prelude::*;

fn handlers() -> Handlers<u64> {
    let mut h: Handlers<u64> = Handlers::new();
    assert!(h.register("ok", |ctx| *ctx.state += 1));
    assert!(h.register("fail", |ctx| -> Result<(), HandlerError> {
        *ctx.state += 1;
        Err(HandlerError::new(3, "no"))
    }));
    h
}

fn tick(book: &mut Scheduler, h: &mut Handlers<u64>, seq: u64, now: i64) {
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut state = 0u64;
    book.on_tick(&Tick::new(7, seq, Some(now)), &mut state, h, &mut outbox);
}

/// The misfire rule by enumeration: every occurrence of the grid `start + k·period` reached by
/// each tick, the policy applied to the list.
fn model(start: i64, period: i64, misfire: Misfire, ticks: &[i64]) -> RunCounters {
    let mut c = RunCounters::default();
    let mut next = start;
    for &now in ticks {
        if next > now {
            continue;
        }
        let mut reached = Vec::new();
        let mut t = next;
        while t <= now {
            reached.push(t);
            t += period;
        }
        next = t;
        let k = reached.len();
        let last = reached[k - 1];
        let (ran, expired) = match misfire {
            Misfire::FireOnce => (1, false),
            Misfire::Skip => (usize::from(k == 1), false),
            Misfire::FireEach { cap } => (k.min(cap as usize), false),
            Misfire::ExpireAfter { deadline_ms } => {
                let ok = now - last <= deadline_ms;
                (usize::from(ok), !ok)
            }
        };
        c.fired += ran as u64;
        c.late += u64::from(k > 1);
        c.expired += u64::from(expired);
        c.skipped += u64::from(!expired && ran < k);
    }
    c
}

fn misfire() -> impl Strategy<Value = Misfire> {
    prop_oneof![
        Just(Misfire::FireOnce),
        Just(Misfire::Skip),
        (1u32..4).prop_map(|cap| Misfire::FireEach { cap }),
        (0i64..3_000).prop_map(|deadline_ms| Misfire::ExpireAfter { deadline_ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// Per-schedule counters and the book's totals follow the model; a reload from the pages is
    /// the same book (counters and totals included).
    #[test]
    fn counters_follow_the_misfire_model(
        schedules in prop::collection::vec((0i64..5_000, 100i64..3_000, misfire()), 1..4),
        gaps in prop::collection::vec(1i64..8_000, 1..30),
    ) {
        let mut book = Scheduler::new(7, Limits::default());
        let mut h = handlers();
        let mut ids = Vec::new();
        for (start, period, m) in &schedules {
            let def = NewSchedule::new("ok", Timing::Every { period_ms: *period, start_ms: Some(*start) })
                .with_misfire(*m);
            ids.push(book.apply(&Principal::Client(ccron::ClientId::from_index(1)), ScheduleRequest::Create(def), &h, 1, Some(0)).unwrap().unwrap());
        }
        let mut now = 0;
        let mut ticks = Vec::new();
        for (i, g) in gaps.iter().enumerate() {
            now += g;
            ticks.push(now);
            tick(&mut book, &mut h, 10 + i as u64, now);
        }
        let mut total = RunCounters::default();
        for ((start, period, m), id) in schedules.iter().zip(&ids) {
            let want = model(*start, *period, *m, &ticks);
            prop_assert_eq!(book.get(*id).unwrap().counters, want, "{:?} {} {}", m, start, period);
            total = total.plus(want);
        }
        prop_assert_eq!(book.totals(), total);
        let range = PageRange::new(0, 32).unwrap();
        let mut pages = MemPages::new(4_096, 32);
        book.save(&mut pages, range).unwrap();
        let again = Scheduler::load(7, Limits::default(), &pages, range).unwrap();
        prop_assert!(again == book);
        prop_assert_eq!(again.totals(), total);
    }
}

/// Failed runs count as fired and failed, retries included; a one-shot's runs stay in the
/// book's totals after it leaves, and a one-shot whose deadline passed counts as expired.
#[test]
fn failures_retries_and_one_shots_are_counted() {
    let mut book = Scheduler::new(7, Limits::default());
    let mut h = handlers();
    let by = Principal::Client(ccron::ClientId::from_index(1));
    let failing = book
        .apply(
            &by,
            ScheduleRequest::CreateWith {
                schedule: NewSchedule::new(
                    "fail",
                    Timing::Every {
                        period_ms: 1_000_000,
                        start_ms: Some(0),
                    },
                ),
                policy: RunPolicy::default().with_retry(RetryPolicy::exponential(3, 10, 10)),
            },
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    let once = NewSchedule::new("ok", Timing::At(Due::Time(50)));
    let once = book
        .apply(&by, ScheduleRequest::Create(once), &h, 1, Some(0))
        .unwrap()
        .unwrap();
    let stale = NewSchedule::new("ok", Timing::At(Due::Time(60)))
        .with_misfire(Misfire::ExpireAfter { deadline_ms: 5 });
    book.apply(&by, ScheduleRequest::Create(stale), &h, 1, Some(0))
        .unwrap();
    // Attempt 1 fails at 100, the one-shot at 50 runs, the one at 60 has expired (40 ms late).
    tick(&mut book, &mut h, 2, 100);
    // Attempts 2 and 3 (the last: dead-lettered).
    tick(&mut book, &mut h, 3, 200);
    tick(&mut book, &mut h, 4, 300);
    let c = book.get(failing).unwrap().counters;
    assert_eq!((c.fired, c.failed), (3, 3));
    assert!(book.get(once).is_none(), "the one-shot ran and left");
    let t = book.totals();
    assert_eq!((t.fired, t.failed, t.expired), (4, 3, 1), "{t:?}");
    assert_eq!((t.late, t.skipped), (0, 0));
}
