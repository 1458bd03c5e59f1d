//! Start and end bounds and run limits (book layout 8): the runs of bounded periodic schedules
//! against a brute-force model that enumerates the grid, refusals at admission, the retired
//! record (kept, counted, listed, described, persisted, revived by new bounds).

use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::query::{self, ScheduleFilter};
use ccron::schedule::{
    Bounds, Handlers, Limits, Misfire, NewSchedule, RetireReason, RunPolicy, ScheduleError,
    ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{MemPages, PageRange, Principal, Tick};
use proptest::prelude::*;

fn handlers() -> Handlers<u64> {
    let mut h = Handlers::new();
    h.register("h", |ctx| *ctx.state += 1);
    h
}

fn range() -> PageRange {
    PageRange::new(0, 64).unwrap()
}

fn every(period_ms: i64, start_ms: i64) -> NewSchedule {
    NewSchedule::new(
        "h",
        Timing::Every {
            period_ms,
            start_ms: Some(start_ms),
        },
    )
}

fn bounded(schedule: NewSchedule, bounds: Bounds) -> ScheduleRequest {
    ScheduleRequest::CreateBounded {
        schedule,
        policy: RunPolicy::default(),
        bounds,
    }
}

/// The brute-force model of one bounded periodic schedule: the grid enumerated point by point.
struct Model {
    /// Every occurrence within the bounds, ascending.
    eligible: Vec<i64>,
    misfire: Misfire,
    max_runs: Option<u64>,
    next: Option<i64>,
    runs: u64,
}

impl Model {
    /// `None`: admission must refuse it (no occurrence within the bounds).
    fn new(period: i64, start: i64, b: Bounds, misfire: Misfire, horizon: i64) -> Option<Self> {
        let mut eligible = Vec::new();
        let mut t = start;
        while t <= horizon {
            if b.starts_at_ms.is_none_or(|s| t >= s) && b.ends_at_ms.is_none_or(|e| t <= e) {
                eligible.push(t);
            }
            t += period;
        }
        // Past the horizon: an occurrence exists unless the end bound cuts it.
        let beyond = b.ends_at_ms.is_none_or(|e| e > horizon);
        let next = eligible.first().copied();
        if next.is_none() && !beyond {
            return None;
        }
        Some(Self {
            eligible,
            misfire,
            max_runs: b.max_runs,
            next,
            runs: 0,
        })
    }

    /// The dues a tick at `now` runs.
    fn tick(&mut self, now: i64) -> Vec<i64> {
        let Some(n) = self.next else {
            return Vec::new();
        };
        if n > now {
            return Vec::new();
        }
        let reached: Vec<i64> = self
            .eligible
            .iter()
            .copied()
            .filter(|&t| t >= n && t <= now)
            .collect();
        let k = reached.len();
        let mut runs: Vec<i64> = match self.misfire {
            Misfire::FireOnce => vec![reached[k - 1]],
            Misfire::Skip if k == 1 => vec![reached[0]],
            Misfire::Skip => Vec::new(),
            Misfire::FireEach { cap } => reached[k.saturating_sub(cap as usize)..].to_vec(),
            _ => unreachable!(),
        };
        if let Some(m) = self.max_runs {
            let left = (m - self.runs) as usize;
            if runs.len() > left {
                runs.drain(..runs.len() - left);
            }
        }
        self.runs += runs.len() as u64;
        self.next = self.eligible.iter().copied().find(|&t| t > now);
        if self.max_runs.is_some_and(|m| self.runs >= m) {
            self.next = None;
        }
        runs
    }
}

fn arb_bounds() -> impl Strategy<Value = Bounds> {
    (
        proptest::option::of(0i64..400),
        proptest::option::of(0i64..700),
        proptest::option::of(1u64..8),
    )
        .prop_map(|(s, e, m)| {
            let (s, e) = match (s, e) {
                (Some(s), Some(e)) if s > e => (Some(e), Some(s)),
                other => other,
            };
            Bounds {
                starts_at_ms: s,
                ends_at_ms: e,
                max_runs: m,
            }
        })
}

fn arb_misfire() -> impl Strategy<Value = Misfire> {
    prop_oneof![
        Just(Misfire::FireOnce),
        Just(Misfire::Skip),
        (1u32..4).prop_map(|cap| Misfire::FireEach { cap }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Random periodic schedules with random bounds, run limits and misfire policies, over
    /// random tick sequences (repeats and jumps), reloaded from the pages at a random tick:
    /// admission refuses exactly the schedules the model finds no occurrence for, every tick
    /// runs exactly the model's occurrences, and the schedule is retired (kept, counted once)
    /// exactly when the model has no next occurrence.
    #[test]
    fn bounded_schedules_match_the_grid_model(
        period in 1i64..60,
        start in 0i64..200,
        bounds in arb_bounds(),
        misfire in arb_misfire(),
        steps in proptest::collection::vec(0i64..90, 1..40),
        reload_at in 0usize..40,
    ) {
        let mut h = handlers();
        let horizon = 90 * 40 + 10;
        let mut book = Scheduler::new_in(1, Limits::default(), range());
        let got = book.apply(&Principal::Host, bounded(every(period, start), bounds), &h, 0, Some(0));
        let Some(mut model) = Model::new(period, start, bounds, misfire, horizon) else {
            prop_assert_eq!(got, Err(ScheduleError::NeverFires(RetireReason::Ended)));
            prop_assert!(book.is_empty());
            return Ok(());
        };
        // Set the misfire policy through a replace that keeps the bounds.
        let id = got.unwrap().unwrap();
        let replaced = book.apply(
            &Principal::Host,
            ScheduleRequest::Replace { target: Target::Id(id), schedule: every(period, start).with_misfire(misfire) },
            &h, 0, Some(0),
        );
        prop_assert_eq!(replaced, Ok(Some(id)));
        let mut pages = MemPages::new(4096, 64);
        let mut outbox = Outbox::new(OutboxLimits::default());
        let mut state = 0u64;
        let mut now = 0i64;
        for (k, step) in steps.iter().enumerate() {
            now += step;
            if k == reload_at {
                book.save(&mut pages, range()).unwrap();
                let again = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
                prop_assert!(again == book);
                book = again;
            }
            let report = book.on_tick(&Tick::new(1, 1 + k as u64, Some(now)), &mut state, &mut h, &mut outbox);
            let ran: Vec<i64> = report.fired.iter().filter_map(|f| f.due.time_ms()).collect();
            prop_assert_eq!(&ran, &model.tick(now), "tick {} at {}", k, now);
            let info = book.get(id).expect("a retired schedule stays in the book");
            prop_assert_eq!(info.next.and_then(|d| d.time_ms()), model.next, "tick {}", k);
            let retired = !bounds.is_none() && model.next.is_none();
            prop_assert_eq!(info.retired.is_some(), retired, "tick {}", k);
            prop_assert_eq!(info.counters.retired, u64::from(retired));
            prop_assert_eq!(book.totals().retired, u64::from(retired));
            prop_assert_eq!(info.runs, model.runs);
        }
        book.check_invariants().unwrap();
    }
}

/// Bounds under which a schedule could never fire are refused, typed, and change nothing.
#[test]
fn never_firing_bounds_are_refused_and_change_nothing() {
    let h = handlers();
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    let c = Principal::Client(ccron::ClientId::from_index(1));
    // The grid 1000 + k·100 has no point in [0, 999].
    let ended = bounded(every(100, 1_000), Bounds::NONE.ending_at(999));
    let cron = bounded(
        NewSchedule::new(
            "h",
            Timing::Cron {
                expression: "0 0 * * *".into(),
                zone: None,
            },
        ),
        Bounds::NONE.ending_at(86_399_999),
    );
    let cases: [(ScheduleRequest, ScheduleError); 6] = [
        (ended, ScheduleError::NeverFires(RetireReason::Ended)),
        // After admission at 86,400,001 the first midnight is the next day's, past the end.
        (cron, ScheduleError::NeverFires(RetireReason::Ended)),
        (
            bounded(every(100, 0), Bounds::NONE.with_max_runs(0)),
            ScheduleError::Invalid("a run limit of 0".into()),
        ),
        (
            bounded(every(100, 0), Bounds::NONE.starting_at(5).ending_at(4)),
            ScheduleError::Invalid("start bound 5 is after end bound 4".into()),
        ),
        (
            bounded(
                NewSchedule::new("h", Timing::AfterMs(10)),
                Bounds::NONE.with_max_runs(1),
            ),
            ScheduleError::Invalid("bounds apply to recurring schedules only".into()),
        ),
        (
            bounded(every(100, 0), Bounds::NONE.ending_at(-1)),
            ScheduleError::Invalid("end bound -1 is outside [0, 64060588800000)".into()),
        ),
    ];
    for (req, want) in cases {
        let before = book.clone();
        assert_eq!(book.apply(&c, req, &h, 5, Some(86_400_001)), Err(want));
        assert!(book == before && book.is_empty());
    }
    // The start bound moves the first point forward; the end bound admits the last one.
    let id = book
        .apply(
            &c,
            bounded(every(100, 0), Bounds::NONE.starting_at(250).ending_at(300)),
            &h,
            5,
            Some(0),
        )
        .unwrap()
        .unwrap();
    assert_eq!(book.preview(id, 5), vec![ccron::Due::Time(300)]);
}

/// A schedule reaching its run limit or end is retired: out of the due index, kept with a typed
/// record visible in `list` and `describe`, counted once, persisted; new bounds revive it, a run
/// limit at the run counter is refused; a stranger may not set bounds.
#[test]
fn retired_schedules_are_kept_counted_and_revived() {
    let mut h = handlers();
    let c = Principal::Client(ccron::ClientId::from_index(1));
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    let limited = book
        .apply(
            &c,
            bounded(every(100, 0), Bounds::NONE.with_max_runs(2)),
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    let ending = book
        .apply(
            &c,
            bounded(every(100, 50), Bounds::NONE.ending_at(250)),
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut state = 0u64;
    let mut ran = Vec::new();
    for k in 0..6u64 {
        let r = book.on_tick(
            &Tick::new(1, 2 + k, Some(100 * k as i64)),
            &mut state,
            &mut h,
            &mut outbox,
        );
        ran.extend(r.fired.iter().map(|f| (f.id, f.due.time_ms().unwrap())));
    }
    assert_eq!(
        ran,
        // In due order within a tick: the tick at 100 reaches 50 before 100.
        vec![
            (limited, 0),
            (ending, 50),
            (limited, 100),
            (ending, 150),
            (ending, 250)
        ]
    );
    for (id, reason) in [
        (limited, RetireReason::RunLimit),
        (ending, RetireReason::Ended),
    ] {
        let info = book.get(id).unwrap();
        let r = info.retired.expect("retired");
        assert_eq!(r.reason, reason);
        assert_eq!(info.next, None);
        assert_eq!(info.counters.retired, 1);
        let d = query::describe(&book, &Target::Id(id), 5).unwrap();
        assert_eq!(d.summary.retired, Some(r));
        assert_eq!(d.counters.retired, 1);
        assert!(d.upcoming.is_empty());
    }
    assert_eq!(book.get(limited).unwrap().retired.unwrap().seq, 3);
    assert_eq!(book.totals().retired, 2);
    let listed = query::list(&book, &ScheduleFilter::default());
    assert!(listed.items.iter().all(|s| s.retired.is_some()));
    // Persisted.
    let mut pages = MemPages::new(4096, 64);
    book.save(&mut pages, range()).unwrap();
    let again = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
    assert!(again == book);
    assert_eq!(
        again.get(ending).unwrap().retired,
        book.get(ending).unwrap().retired
    );
    // More ticks run nothing.
    let r = book.on_tick(
        &Tick::new(1, 20, Some(10_000)),
        &mut state,
        &mut h,
        &mut outbox,
    );
    assert!(r.fired.is_empty());
    // A stranger may not set bounds; a limit at the run counter is refused.
    let stranger = Principal::Client(ccron::ClientId::from_index(2));
    let set = |b: Bounds| ScheduleRequest::SetBounds {
        target: Target::Id(limited),
        bounds: b,
    };
    assert!(matches!(
        book.apply(&stranger, set(Bounds::NONE), &h, 21, Some(10_000)),
        Err(ScheduleError::Unauthorized { .. })
    ));
    assert_eq!(
        book.apply(&c, set(Bounds::NONE.with_max_runs(2)), &h, 21, Some(10_000)),
        Err(ScheduleError::NeverFires(RetireReason::RunLimit))
    );
    // New bounds revive it from the request's time; the retirement stays counted.
    let v = book.get(limited).unwrap().version;
    assert_eq!(
        book.apply(&c, set(Bounds::NONE.with_max_runs(3)), &h, 21, Some(10_000)),
        Ok(Some(limited))
    );
    let info = book.get(limited).unwrap();
    assert_eq!(
        (info.retired, info.next, info.version),
        (None, Some(ccron::Due::Time(10_100)), v + 1)
    );
    let r = book.on_tick(
        &Tick::new(1, 22, Some(10_100)),
        &mut state,
        &mut h,
        &mut outbox,
    );
    assert_eq!(r.fired.len(), 1);
    let info = book.get(limited).unwrap();
    assert_eq!(info.retired.map(|r| r.reason), Some(RetireReason::RunLimit));
    assert_eq!(info.counters.retired, 2);
    book.check_invariants().unwrap();
}

/// Bounds on a cron schedule: no instant before the start, none after the end.
#[test]
fn cron_schedules_keep_within_their_bounds() {
    let mut h = handlers();
    let mut book = Scheduler::new_in(1, Limits::default(), range());
    let cron = NewSchedule::new(
        "h",
        Timing::Cron {
            expression: "*/5 * * * *".into(),
            zone: None,
        },
    );
    // Minutes 10, 15, 20 only.
    let id = book
        .apply(
            &Principal::Host,
            bounded(cron, Bounds::NONE.starting_at(600_000).ending_at(1_200_000)),
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut state = 0u64;
    let mut ran = Vec::new();
    for minute in 0..40i64 {
        let r = book.on_tick(
            &Tick::new(1, 2 + minute as u64, Some(minute * 60_000)),
            &mut state,
            &mut h,
            &mut outbox,
        );
        ran.extend(r.fired.iter().map(|f| f.due.time_ms().unwrap() / 60_000));
    }
    assert_eq!(ran, vec![10, 15, 20]);
    assert_eq!(
        book.get(id).unwrap().retired.map(|r| r.reason),
        Some(RetireReason::Ended)
    );
}
