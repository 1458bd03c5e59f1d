//! A backfill's own overlap policy (issue 27, book layout 12, `ScheduleRequest::BackfillWith`):
//! what a backfill's occurrences do while the backfill's previous run has no result yet. Unit
//! tests per policy, the streams' independence (regular runs and the backfill do not wait for
//! each other), typed refusals counted, and a proptest against a brute-force model over random
//! grids, windows, tick times and result delays, for every policy, with the book saved and
//! reloaded along the way.

use std::collections::{BTreeMap, VecDeque};

use ccron::outbox::{OccurrenceId, Outbox, OutboxLimits};
use ccron::schedule::{
    BackfillOverlap, Bounds, Handlers, Limits, Misfire, NewSchedule, Overlap, Policy, RunPolicy,
    ScheduleError, ScheduleRequest, Scheduler, Target, Timing, is_manual, manual_occurrence,
};
use ccron::{Due, MemPages, PageRange, Principal, Tick};
use proptest::prelude::*;

use crate::overlap::policy;

/// The handler's state: what ran (occurrence, nominal due).
#[derive(Default)]
struct St {
    ran: Vec<(u64, Due)>,
    /// Occurrences `o` with `o % 5 == 3` emit nothing.
    silent: bool,
}

fn handlers() -> Handlers<St> {
    let mut h: Handlers<St> = Handlers::new();
    assert!(h.register("job", |ctx| {
        let occ = ctx.occurrence.occurrence;
        ctx.state.ran.push((occ, ctx.due));
        if ctx.state.silent && occ % 5 == 3 {
            return;
        }
        ctx.emit("effect", b"x".to_vec()).unwrap();
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
    .with_misfire(Misfire::FireEach { cap: 1_000 })
}

fn backfill(id: u64, from_ms: i64, to_ms: i64, overlap: Overlap) -> ScheduleRequest {
    ScheduleRequest::BackfillWith {
        target: Target::Id(id),
        from_ms,
        to_ms,
        overlap,
    }
}

const ADMIN: u8 = 99;

struct Rig {
    book: Scheduler,
    h: Handlers<St>,
    st: St,
    outbox: Outbox,
    seq: u64,
    /// Records without a result: (arrival time, id).
    pending: BTreeMap<(i64, OccurrenceId), ()>,
    /// Result delay per occurrence (indexed by occurrence modulo its length).
    delays: Vec<i64>,
    /// Regular occurrences the schedule's own overlap policy skipped.
    regular_skipped: u64,
}

impl Rig {
    fn new(delays: Vec<i64>) -> Self {
        Self {
            book: Scheduler::new(7, Limits::default())
                .with_policy(Policy::default().with_admin(ccron::ClientId([ADMIN; 32]))),
            h: handlers(),
            st: St::default(),
            outbox: Outbox::new(OutboxLimits {
                max_records: 1 << 20,
                max_total_bytes: 1 << 30,
                ..OutboxLimits::default()
            }),
            seq: 1,
            pending: BTreeMap::new(),
            delays,
            regular_skipped: 0,
        }
    }

    fn apply(
        &mut self,
        by: u8,
        req: ScheduleRequest,
        now: i64,
    ) -> Result<Option<u64>, ScheduleError> {
        self.seq += 1;
        self.book.apply(
            &Principal::Client(ccron::ClientId([by; 32])),
            req,
            &self.h,
            self.seq,
            Some(now),
        )
    }

    /// A schedule of the admin (no outbox quota holds its runs back) under regular overlap
    /// policy `regular`.
    fn create(&mut self, schedule: NewSchedule, regular: Overlap) -> u64 {
        let req = ScheduleRequest::CreateOverlap {
            schedule,
            policy: RunPolicy::default(),
            bounds: Bounds::NONE,
            overlap: regular,
        };
        self.apply(ADMIN, req, 0).unwrap().unwrap()
    }

    /// Results that arrived by `now` settle, then a tick at `now`; records the run emitted get
    /// their arrival time.
    fn tick(&mut self, now: i64) {
        let arrived: Vec<(i64, OccurrenceId)> = self
            .pending
            .range(..(now + 1, OccurrenceId::new(0, 0, 0)))
            .map(|(k, _)| *k)
            .collect();
        for k in arrived {
            self.pending.remove(&k);
            self.book.settle(k.1);
        }
        self.seq += 1;
        let head = self.outbox.next_index();
        let report = self.book.on_tick(
            &Tick::new(7, self.seq, Some(now)),
            &mut self.st,
            &mut self.h,
            &mut self.outbox,
        );
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        self.regular_skipped += report.overlap_skipped.len() as u64;
        for (i, r) in self.outbox.iter() {
            if i >= head {
                let d = self.delays[(r.id.occurrence % self.delays.len() as u64) as usize];
                self.pending.insert((now + d, r.id), ());
            }
        }
    }

    /// Settles every record occurrence `occ` of schedule `id` emitted (its results arrive).
    fn answer(&mut self, id: u64, occ: u64) {
        let keys: Vec<(i64, OccurrenceId)> = self
            .pending
            .keys()
            .filter(|(_, r)| r.emitter() == id && r.occurrence == occ)
            .copied()
            .collect();
        assert!(!keys.is_empty(), "occurrence {occ} emitted nothing pending");
        for k in keys {
            self.pending.remove(&k);
            self.book.settle(k.1);
        }
    }

    /// The backfilled nominal times that ran, in order.
    fn backfilled(&self) -> Vec<i64> {
        self.st
            .ran
            .iter()
            .filter(|(o, _)| is_manual(*o) == Some(false))
            .map(|(_, d)| match d {
                Due::Time(t) => *t,
                Due::Seq(_) => -1,
            })
            .collect()
    }

    fn regular(&self) -> Vec<u64> {
        self.st
            .ran
            .iter()
            .filter(|(o, _)| is_manual(*o).is_none())
            .map(|(o, _)| *o)
            .collect()
    }
}

/// A schedule every 100 ms from 100 whose regular runs track nothing (`AllowAll`).
fn quiet(rig: &mut Rig) -> u64 {
    rig.create(every(100, 100), Overlap::AllowAll)
}

fn bf(t: i64) -> u64 {
    manual_occurrence(t, false)
}

#[test]
fn buffer_all_runs_the_window_one_run_at_a_time() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig.create(every(100, 100), Overlap::AllowAll);
    rig.apply(ADMIN, backfill(id, 100, 400, Overlap::BufferAll), 450)
        .unwrap();
    let info = rig.book.get(id).unwrap();
    assert_eq!(info.backfill_overlap.policy, Overlap::BufferAll);
    rig.tick(450);
    // The first backfill run awaits its result; the regular runs (AllowAll) go on.
    assert_eq!(rig.backfilled(), vec![100]);
    assert_eq!(rig.regular(), vec![0, 1, 2, 3]);
    assert_eq!(
        rig.book.get(id).unwrap().backfill_overlap,
        BackfillOverlap {
            policy: Overlap::BufferAll,
            awaiting: Some((bf(100), 1)),
        }
    );
    rig.tick(460);
    assert_eq!(rig.backfilled(), vec![100], "waits for the result");
    for (t, expect) in [(100, vec![100, 200]), (200, vec![100, 200, 300])] {
        rig.answer(id, bf(t));
        rig.tick(470);
        assert_eq!(rig.backfilled(), expect);
    }
    rig.answer(id, bf(300));
    rig.tick(480);
    assert_eq!(rig.backfilled(), vec![100, 200, 300, 400]);
    let info = rig.book.get(id).unwrap();
    assert!(!info.manual.pending());
    assert_eq!(info.counters.skipped, 0, "nothing skipped");
    rig.book.check_invariants().unwrap();
}

#[test]
fn skip_and_buffer_one_drop_the_rest_counted() {
    for (policy, ran, skipped) in [
        (Overlap::Skip, vec![100], 3),
        (Overlap::BufferOne, vec![100, 200], 2),
    ] {
        let mut rig = Rig::new(vec![i64::MAX / 4]);
        let id = quiet(&mut rig);
        rig.apply(ADMIN, backfill(id, 100, 400, policy), 450)
            .unwrap();
        rig.tick(450);
        assert_eq!(rig.backfilled(), vec![100], "{policy:?}");
        let info = rig.book.get(id).unwrap();
        assert_eq!(info.counters.skipped, skipped, "{policy:?}");
        assert_eq!(rig.book.totals().skipped, skipped, "{policy:?}");
        rig.answer(id, bf(100));
        rig.tick(460);
        rig.tick(470);
        assert_eq!(rig.backfilled(), ran, "{policy:?}");
        assert!(!rig.book.get(id).unwrap().manual.pending(), "{policy:?}");
        rig.book.check_invariants().unwrap();
    }
}

#[test]
fn allow_all_is_the_plain_backfill_and_stores_nothing() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = quiet(&mut rig);
    let mut plain = Rig::new(vec![i64::MAX / 4]);
    let pid = quiet(&mut plain);
    rig.apply(ADMIN, backfill(id, 100, 400, Overlap::AllowAll), 450)
        .unwrap();
    let req = ScheduleRequest::Backfill {
        target: Target::Id(pid),
        from_ms: 100,
        to_ms: 400,
    };
    plain.apply(ADMIN, req, 450).unwrap();
    rig.tick(450);
    plain.tick(450);
    assert_eq!(rig.backfilled(), vec![100, 200, 300, 400]);
    assert_eq!(plain.backfilled(), rig.backfilled());
    assert_eq!(
        rig.book.get(id).unwrap().backfill_overlap,
        BackfillOverlap::default()
    );
    assert!(rig.book == plain.book);
}

#[test]
fn the_regular_runs_and_the_backfill_do_not_wait_for_each_other() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig.create(every(100, 100), Overlap::Skip);
    rig.tick(100);
    assert_eq!(rig.regular(), vec![0]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((0, 1)));
    // The regular stream awaits occurrence 0: the backfill runs anyway, then awaits its own.
    rig.apply(ADMIN, backfill(id, 100, 100, Overlap::BufferAll), 150)
        .unwrap();
    rig.tick(150);
    assert_eq!(rig.backfilled(), vec![100]);
    rig.answer(id, 0);
    rig.tick(200);
    assert_eq!(
        rig.regular(),
        vec![0, 1],
        "the backfill's awaited run holds nothing"
    );
    // A second backfill waits for the first one's run (its stream), not for the regular one.
    rig.apply(ADMIN, backfill(id, 100, 200, Overlap::BufferAll), 210)
        .unwrap();
    rig.tick(210);
    assert_eq!(rig.backfilled(), vec![100]);
    rig.answer(id, bf(100));
    rig.tick(220);
    assert_eq!(rig.backfilled(), vec![100, 100]);
    rig.book.check_invariants().unwrap();
}

#[test]
fn refusals_are_typed_and_counted() {
    let mut rig = Rig::new(vec![0]);
    let id = quiet(&mut rig);
    let one = rig
        .apply(
            ADMIN,
            ScheduleRequest::Create(NewSchedule::new("job", Timing::At(Due::Time(5_000)))),
            0,
        )
        .unwrap()
        .unwrap();
    let cases: Vec<(u8, ScheduleRequest, i64)> = vec![
        // A one-shot takes no backfill.
        (ADMIN, backfill(one, 100, 200, Overlap::Skip), 300),
        // A window reaching past the agreed time.
        (ADMIN, backfill(id, 100, 500, Overlap::Skip), 300),
        // No occurrence in the window.
        (ADMIN, backfill(id, 110, 150, Overlap::Skip), 300),
        // Another client's schedule.
        (5, backfill(id, 100, 200, Overlap::Skip), 300),
        // Another client's schedule, asking a policy no backfill takes: authorization is
        // checked first (`Unauthorized`, not `Invalid`).
        (5, backfill(id, 100, 200, Overlap::CancelOther), 300),
        // An unknown schedule.
        (ADMIN, backfill(77, 100, 200, Overlap::Skip), 300),
    ];
    for (k, (by, req, now)) in cases.into_iter().enumerate() {
        let before = rig.book.clone();
        let e = rig.apply(by, req, now).unwrap_err();
        assert!(
            matches!(
                (k, &e),
                (0..=2, ScheduleError::Invalid(_))
                    | (3..=4, ScheduleError::Unauthorized { .. })
                    | (5, ScheduleError::UnknownSchedule(_))
            ),
            "case {k}: {e}"
        );
        assert_eq!(rig.book.backfill_refusals(), k as u64 + 1);
        assert!(
            rig.book.eq_but_refusals(&before),
            "case {k}: nothing changed"
        );
    }
    rig.apply(ADMIN, backfill(id, 100, 200, Overlap::Skip), 300)
        .unwrap();
    let e = rig
        .apply(ADMIN, backfill(id, 100, 200, Overlap::BufferAll), 300)
        .unwrap_err();
    assert!(matches!(e, ScheduleError::ManualRunPending(i) if i == id));
    assert_eq!(rig.book.backfill_refusals(), 7);
    let e = rig
        .book
        .apply(
            &Principal::Client(ccron::ClientId([ADMIN; 32])),
            ScheduleRequest::Backfill {
                target: Target::Id(id),
                from_ms: 100,
                to_ms: 200,
            },
            &rig.h,
            900,
            None,
        )
        .unwrap_err();
    assert!(matches!(e, ScheduleError::NeedsTime));
    assert_eq!(rig.book.backfill_refusals(), 8, "the plain request too");
}

/// The brute-force model: the backfill's window occurrences (nominal times), run at each tick
/// (the fire budget does not bind) while the backfill awaits nothing; a run that emits a record
/// under a tracking policy awaits it until its arrival (settled before the next tick at or
/// after it), and the policy decides at once for the occurrences left. Returns (ran, skipped).
fn model(
    policy: Overlap,
    window: &[i64],
    ticks: &[i64],
    delays: &[i64],
    silent: bool,
) -> (Vec<i64>, u64) {
    let mut queue: VecDeque<i64> = window.iter().copied().collect();
    let (mut ran, mut skipped) = (Vec::new(), 0u64);
    let mut awaiting: Option<i64> = None;
    for &now in ticks {
        if awaiting.is_some_and(|a| a <= now) {
            awaiting = None;
        }
        while awaiting.is_none() {
            let Some(t) = queue.pop_front() else { break };
            ran.push(t);
            let occ = manual_occurrence(t, false);
            let emits = !(silent && occ % 5 == 3);
            if policy == Overlap::AllowAll || !emits {
                continue;
            }
            awaiting = Some(now + delays[(occ % delays.len() as u64) as usize]);
            match policy {
                Overlap::Skip => {
                    skipped += queue.len() as u64;
                    queue.clear();
                }
                Overlap::BufferOne if queue.len() > 1 => {
                    skipped += queue.len() as u64 - 1;
                    queue.truncate(1);
                }
                _ => {}
            }
        }
    }
    (ran, skipped)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Over random grids, windows, tick times and result delays, the backfill runs and skips
    /// exactly the occurrences the brute-force model does, for every policy, while the
    /// schedule's regular runs go on under their own policy; the skipped count is the
    /// regular skips plus the model's; the book reloads equal from its pages along the way
    /// (the backfill's overlap state is persisted).
    #[test]
    fn backfill_overlap_matches_the_brute_force_model(
        policy in policy(),
        regular_skips in any::<bool>(),
        period in 5i64..60,
        start in 1i64..100,
        from_off in 0i64..200,
        len in 0i64..300,
        steps in prop::collection::vec(0i64..60, 1..40),
        delays in prop::collection::vec(0i64..300, 1..8),
        silent in any::<bool>(),
    ) {
        let mut rig = Rig::new(delays.clone());
        rig.st.silent = silent;
        let regular = if regular_skips { Overlap::Skip } else { Overlap::AllowAll };
        let id = rig.create(every(period, start), regular);
        let (from, to) = (start + from_off, start + from_off + len);
        let window: Vec<i64> = (0..)
            .map(|k| start + k * period)
            .skip_while(|t| *t < from)
            .take_while(|t| *t <= to)
            .collect();
        let admitted = rig.apply(ADMIN, backfill(id, from, to, policy), to);
        if window.is_empty() {
            prop_assert!(matches!(admitted, Err(ScheduleError::Invalid(_))));
            prop_assert_eq!(rig.book.backfill_refusals(), 1);
            return Ok(());
        }
        prop_assert_eq!(admitted, Ok(Some(id)));
        let mut ticks = Vec::new();
        let mut now = to;
        for s in steps {
            now += s;
            ticks.push(now);
        }
        let range = PageRange::new(0, 32).unwrap();
        let mut pages = MemPages::new(4_096, 32);
        for (k, &t) in ticks.iter().enumerate() {
            rig.tick(t);
            if k % 4 == 0 {
                rig.book.save(&mut pages, range).unwrap();
                let again = Scheduler::load(7, Limits::default(), &pages, range).unwrap();
                prop_assert!(again == rig.book, "reloads equal");
            }
        }
        rig.book.check_invariants().unwrap();
        let (ran, skipped) = model(policy, &window, &ticks, &delays, silent);
        prop_assert_eq!(rig.backfilled(), ran);
        let info = rig.book.get(id).unwrap();
        prop_assert_eq!(info.counters.skipped, rig.regular_skipped + skipped);
    }
}
