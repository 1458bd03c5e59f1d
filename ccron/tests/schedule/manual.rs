//! Trigger-now and backfill (issue 27): authorized (owner or admin), bounded (a maximum of
//! backfilled runs per request, one pending of each kind), paid from the tick's fire budget,
//! with occurrence ids derived from nominal times that never collide with regular runs. The
//! backfilled occurrences are checked against a brute-force enumeration of the grid.

use std::collections::BTreeSet;

use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, MAX_BACKFILL_RUNS, NewSchedule, Policy, ScheduleError, ScheduleRequest,
    Scheduler, Target, Timing, is_manual, manual_occurrence,
};
use ccron::{Due, MemPages, PageRange, Principal, Tick};
use proptest::prelude::*;

/// What ran: (schedule, nominal due, occurrence number, tick seq).
type Log = Vec<(u64, Due, u64, u64)>;

fn handlers() -> Handlers<Log> {
    let mut h: Handlers<Log> = Handlers::new();
    assert!(h.register("job", |ctx| {
        let (id, due, occ, seq) = (
            ctx.id,
            ctx.due,
            ctx.occurrence.occurrence,
            ctx.tick.bft_sequence_num,
        );
        ctx.state.push((id, due, occ, seq));
    }));
    h
}

fn every(period_ms: i64, start_ms: i64) -> NewSchedule {
    NewSchedule::new(
        "job",
        Timing::Every {
            period_ms,
            start_ms: Some(start_ms),
        },
    )
}

struct Rig {
    book: Scheduler,
    h: Handlers<Log>,
    log: Log,
    seq: u64,
}

impl Rig {
    fn new(budget: usize) -> Self {
        let policy = Policy::default().with_admin(ccron::ClientId::from_index(99));
        Self {
            book: Scheduler::new(
                7,
                Limits {
                    budget_per_tick: budget,
                    ..Limits::default()
                },
            )
            .with_policy(policy),
            h: handlers(),
            log: Vec::new(),
            seq: 1,
        }
    }

    fn apply(
        &mut self,
        by: u64,
        req: ScheduleRequest,
        now: i64,
    ) -> Result<Option<u64>, ScheduleError> {
        self.seq += 1;
        self.book.apply(
            &Principal::Client(ccron::ClientId::from_index(by)),
            req,
            &self.h,
            self.seq,
            Some(now),
        )
    }

    fn tick(&mut self, now: i64) {
        self.seq += 1;
        let mut outbox = Outbox::new(OutboxLimits::default());
        self.book.on_tick(
            &Tick::new(7, self.seq, Some(now)),
            &mut self.log,
            &mut self.h,
            &mut outbox,
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A backfill runs exactly the grid's occurrences in its window, oldest first, within the
    /// fire budget per tick, with ids from their nominal times, none equal to a regular run's;
    /// the book reloads equal from its pages while the backfill is part-way.
    #[test]
    fn backfill_runs_the_window_of_the_grid(
        start in 0i64..10_000,
        period in 50i64..2_000,
        from in 0i64..20_000,
        len in 0i64..20_000,
        budget in 1usize..6,
    ) {
        let mut rig = Rig::new(budget);
        let id = rig.apply(1, ScheduleRequest::Create(every(period, start)), 0).unwrap().unwrap();
        // Regular runs up to 40 s.
        rig.tick(40_000);
        let to = from + len;
        let model: Vec<i64> = (0..)
            .map(|k| start + k * period)
            .take_while(|t| *t <= to)
            .filter(|t| *t >= from)
            .collect();
        let r = rig.apply(1, ScheduleRequest::Backfill { target: Target::Id(id), from_ms: from, to_ms: to }, 40_000);
        if model.is_empty() {
            prop_assert!(matches!(r, Err(ScheduleError::Invalid(_))), "{:?}", r);
            return Ok(());
        }
        if model.len() > MAX_BACKFILL_RUNS as usize {
            prop_assert!(matches!(r, Err(ScheduleError::Limit(_))), "{:?}", r);
            return Ok(());
        }
        prop_assert_eq!(r, Ok(Some(id)));
        let before = rig.log.len();
        let range = PageRange::new(0, 32).unwrap();
        let mut pages = MemPages::new(4_096, 32);
        let mut ticks = 0;
        while rig.book.get(id).unwrap().manual.pending() {
            let n = rig.log.len();
            rig.tick(40_000);
            prop_assert!(rig.log.len() - n <= budget, "within the fire budget");
            ticks += 1;
            prop_assert!(ticks <= model.len(), "progress every tick");
            rig.book.save(&mut pages, range).unwrap();
            let again = Scheduler::load(7, Limits::default(), &pages, range).unwrap();
            prop_assert!(again == rig.book);
        }
        let ran: Vec<(Due, u64)> = rig.log[before..].iter().map(|(_, d, o, _)| (*d, *o)).collect();
        let want: Vec<(Due, u64)> = model
            .iter()
            .map(|t| (Due::Time(*t), manual_occurrence(*t, false)))
            .collect();
        prop_assert_eq!(ran, want);
        let regular: BTreeSet<u64> = rig.log[..before].iter().map(|(_, _, o, _)| *o).collect();
        prop_assert!(regular.iter().all(|o| is_manual(*o).is_none()));
        prop_assert!(rig.log[before..].iter().all(|(_, _, o, _)| !regular.contains(o)));
        // The regular phase and run counter are untouched.
        prop_assert_eq!(rig.book.get(id).unwrap().runs, before as u64);
    }
}

/// Triggers run once on the next tick, with ids that never repeat (two triggers at the same
/// agreed time included); one pending at a time; owners and admins only.
#[test]
fn trigger_now_runs_once_with_unique_ids_for_owners_and_admins() {
    let mut rig = Rig::new(10);
    let id = rig
        .apply(1, ScheduleRequest::Create(every(1_000_000, 0)), 0)
        .unwrap()
        .unwrap();
    rig.tick(10);
    assert_eq!(rig.log.len(), 1, "the regular run at 0");
    let t = ScheduleRequest::TriggerNow(Target::Id(id));
    assert!(matches!(
        rig.apply(2, t.clone(), 500),
        Err(ScheduleError::Unauthorized { .. })
    ));
    assert_eq!(rig.apply(1, t.clone(), 500), Ok(Some(id)));
    assert_eq!(
        rig.apply(99, t.clone(), 500),
        Err(ScheduleError::ManualRunPending(id))
    );
    rig.tick(500);
    assert_eq!(rig.apply(99, t.clone(), 500), Ok(Some(id)), "an admin");
    rig.tick(500);
    rig.tick(600);
    let manual: Vec<(Due, u64)> = rig.log[1..].iter().map(|(_, d, o, _)| (*d, *o)).collect();
    assert_eq!(
        manual,
        vec![
            (Due::Time(500), manual_occurrence(500, true)),
            (Due::Time(501), manual_occurrence(501, true)),
        ],
        "the second trigger at the same agreed time gets the next millisecond"
    );
    let info = rig.book.get(id).unwrap();
    assert_eq!((info.runs, info.next), (1, Some(Due::Time(1_000_000))));
    assert_eq!(info.counters.fired, 3);
    // Bounds: a one-shot, a future window, a second backfill, a window over the maximum.
    let once = rig
        .apply(
            1,
            ScheduleRequest::Create(NewSchedule::new("job", Timing::At(Due::Time(9_999_999)))),
            700,
        )
        .unwrap()
        .unwrap();
    assert!(matches!(
        rig.apply(1, ScheduleRequest::TriggerNow(Target::Id(once)), 700),
        Err(ScheduleError::Invalid(_))
    ));
    let bf = |from_ms, to_ms| ScheduleRequest::Backfill {
        target: Target::Id(id),
        from_ms,
        to_ms,
    };
    assert!(matches!(
        rig.apply(1, bf(0, 800), 700),
        Err(ScheduleError::Invalid(_))
    ));
    let fine = ScheduleRequest::Create(every(1, 0));
    let dense = rig.apply(1, fine, 700).unwrap().unwrap();
    let dense_bf = |to_ms| ScheduleRequest::Backfill {
        target: Target::Id(dense),
        from_ms: 0,
        to_ms,
    };
    assert!(matches!(
        rig.apply(1, dense_bf(i64::from(MAX_BACKFILL_RUNS)), 5_000),
        Err(ScheduleError::Limit(_))
    ));
    assert_eq!(
        rig.apply(1, dense_bf(i64::from(MAX_BACKFILL_RUNS) - 1), 5_000),
        Ok(Some(dense))
    );
    assert_eq!(
        rig.apply(1, dense_bf(3), 5_000),
        Err(ScheduleError::ManualRunPending(dense))
    );
}
