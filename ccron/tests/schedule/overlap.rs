//! The overlap policy (issue 27): what a due occurrence does while the schedule's previous run
//! has no result yet. Unit tests per variant (skip, buffer one, buffer all with its bound,
//! allow all), the requests that set it (authorized, recurring schedules only), runs that emit
//! nothing or several records, and a proptest against a brute-force model over random grids,
//! tick times and result arrival times, for every policy, with the book saved and reloaded
//! along the way.

use std::collections::{BTreeMap, VecDeque};

use ccron::outbox::{OccurrenceId, Outbox, OutboxLimits};
use ccron::schedule::{
    Bounds, Handlers, Limits, MAX_BUFFERED, Misfire, NewSchedule, Overlap, Policy, RunPolicy,
    ScheduleError, ScheduleRequest, Scheduler, Settled, Target, TickReport, Timing,
};
use ccron::{Due, MemPages, PageRange, Principal, Tick};
use proptest::prelude::*;

/// The handler's state: what ran (occurrence, nominal due) and which occurrences emit nothing.
#[derive(Default)]
struct St {
    ran: Vec<(u64, Due)>,
    /// Occurrences `o` with `o % 5 == 3` emit nothing.
    silent: bool,
    /// Records each run emits.
    records: usize,
}

fn handlers() -> Handlers<St> {
    let mut h: Handlers<St> = Handlers::new();
    assert!(h.register("job", |ctx| {
        let occ = ctx.occurrence.occurrence;
        ctx.state.ran.push((occ, ctx.due));
        if ctx.state.silent && occ % 5 == 3 {
            return;
        }
        for _ in 0..ctx.state.records.max(1) {
            ctx.emit("effect", b"x".to_vec()).unwrap();
        }
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

fn create(schedule: NewSchedule, overlap: Overlap) -> ScheduleRequest {
    ScheduleRequest::CreateOverlap {
        schedule,
        policy: RunPolicy::default(),
        bounds: Bounds::NONE,
        overlap,
    }
}

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
    skipped: Vec<u64>,
    buffered: Vec<u64>,
    overflowed: Vec<u64>,
    /// Runs `CancelOther` cancelled: (cancelled occurrence, the occurrence run instead).
    cancelled: Vec<(u64, u64)>,
    /// Late results of cancelled runs settled (each answered `OfUnawaitedRun`).
    late_of_cancelled: usize,
}

impl Rig {
    fn new(delays: Vec<i64>) -> Self {
        Self {
            book: Scheduler::new(7, Limits::default())
                .with_policy(Policy::default().with_admin(ccron::ClientId([99; 32]))),
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
            skipped: Vec::new(),
            buffered: Vec::new(),
            overflowed: Vec::new(),
            cancelled: Vec::new(),
            late_of_cancelled: 0,
        }
    }

    fn apply(&mut self, by: u64, req: ScheduleRequest) -> Result<Option<u64>, ScheduleError> {
        self.seq += 1;
        self.book.apply(
            &Principal::Client(ccron::ClientId([by as u8; 32])),
            req,
            &self.h,
            self.seq,
            Some(0),
        )
    }

    /// Results that arrived by `now` settle, then a tick at `now`; records the run emitted get
    /// their arrival time.
    fn tick(&mut self, now: i64) -> TickReport {
        let arrived: Vec<(i64, OccurrenceId)> = self
            .pending
            .range(..(now + 1, OccurrenceId::new(0, 0, 0)))
            .map(|(k, _)| *k)
            .collect();
        for k in arrived {
            self.pending.remove(&k);
            self.settle(k.1);
        }
        self.seq += 1;
        let head = self.outbox.next_index();
        let report = self.book.on_tick(
            &Tick::new(7, self.seq, Some(now)),
            &mut self.st,
            &mut self.h,
            &mut self.outbox,
        );
        for (i, r) in self.outbox.iter() {
            if i >= head {
                let d = self.delays[(r.id.occurrence % self.delays.len() as u64) as usize];
                self.pending.insert((now + d, r.id), ());
            }
        }
        self.skipped
            .extend(report.overlap_skipped.iter().map(|(_, o)| *o));
        self.buffered
            .extend(report.overlap_buffered.iter().map(|(_, o)| *o));
        self.cancelled
            .extend(report.overlap_cancelled.iter().map(|(_, c, o)| (*c, *o)));
        for e in &report.errors {
            match e {
                ScheduleError::BufferFull { occurrence, .. } => {
                    // Reported among the occurrences not run, told apart here.
                    self.overflowed.push(*occurrence);
                    self.skipped.retain(|o| o != occurrence);
                }
                other => panic!("unexpected tick error {other}"),
            }
        }
        report
    }

    /// Settles `record`; a record of a cancelled run must change nothing.
    fn settle(&mut self, record: OccurrenceId) -> Settled {
        let before = self.book.clone();
        let settled = self.book.settle_detail(record);
        if self.cancelled.iter().any(|(c, _)| *c == record.occurrence) {
            assert_eq!(settled, Settled::OfUnawaitedRun, "{record}");
            assert!(
                self.book == before,
                "a cancelled run's result changes nothing"
            );
            self.late_of_cancelled += 1;
        }
        assert_eq!(settled.changed(), self.book != before, "{settled:?}");
        settled
    }

    /// Settles every record occurrence `occ` of schedule `id` emitted (its results arrive).
    fn answer(&mut self, id: u64, occ: u64) -> Vec<Settled> {
        let keys: Vec<(i64, OccurrenceId)> = self
            .pending
            .keys()
            .filter(|(_, r)| r.emitter() == id && r.occurrence == occ)
            .copied()
            .collect();
        let mut out = Vec::new();
        for k in keys {
            self.pending.remove(&k);
            out.push(self.settle(k.1));
        }
        out
    }

    fn occurrences(&self) -> Vec<u64> {
        self.st.ran.iter().map(|(o, _)| *o).collect()
    }
}

#[test]
fn skip_skips_while_the_previous_run_has_no_result() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig
        .apply(1, create(every(100, 100), Overlap::Skip))
        .unwrap()
        .unwrap();
    rig.tick(100);
    assert_eq!(rig.occurrences(), vec![0]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((0, 1)));
    let r = rig.tick(200);
    assert_eq!(r.overlap_skipped, vec![(id, 1)]);
    assert_eq!(rig.occurrences(), vec![0], "skipped");
    let info = rig.book.get(id).unwrap();
    assert_eq!((info.overlap.skipped, info.counters.skipped), (1, 1));
    assert_eq!(rig.book.totals().skipped, 1);
    rig.answer(id, 0);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, None);
    rig.tick(300);
    assert_eq!(rig.occurrences(), vec![0, 2]);
    rig.book.check_invariants().unwrap();
}

#[test]
fn buffer_one_keeps_one_and_runs_it_when_the_result_arrives() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig
        .apply(1, create(every(100, 100), Overlap::BufferOne))
        .unwrap()
        .unwrap();
    rig.tick(100);
    let r = rig.tick(200);
    assert_eq!(r.overlap_buffered, vec![(id, 1)]);
    let r = rig.tick(300);
    assert_eq!(r.overlap_skipped, vec![(id, 2)], "one is buffered already");
    assert_eq!(rig.book.get(id).unwrap().overlap.buffered, vec![(200, 1)]);
    // Nothing runs before the result.
    rig.tick(310);
    assert_eq!(rig.occurrences(), vec![0]);
    rig.answer(id, 0);
    rig.tick(320);
    assert_eq!(rig.st.ran, vec![(0, Due::Time(100)), (1, Due::Time(200))]);
    let info = rig.book.get(id).unwrap();
    assert_eq!(
        info.overlap.awaiting,
        Some((1, 1)),
        "the buffered run is awaited"
    );
    assert!(info.overlap.buffered.is_empty());
    assert_eq!(info.next, Some(Due::Time(400)));
    rig.book.check_invariants().unwrap();
}

#[test]
fn buffer_all_is_bounded_with_a_typed_refusal() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig
        .apply(1, create(every(10, 10), Overlap::BufferAll))
        .unwrap()
        .unwrap();
    rig.tick(10);
    let extra = 3u64;
    let r = rig.tick(10 + 10 * (MAX_BUFFERED as i64 + extra as i64));
    assert_eq!(r.overlap_buffered.len(), MAX_BUFFERED);
    assert_eq!(r.overlap_skipped.len() as u64, extra);
    assert_eq!(r.errors.len() as u64, extra);
    assert!(matches!(
        r.errors[0],
        ScheduleError::BufferFull { id: i, occurrence: o, bound: MAX_BUFFERED } if i == id && o == 1 + MAX_BUFFERED as u64
    ));
    let info = rig.book.get(id).unwrap();
    assert_eq!(
        (info.overlap.overflowed, info.counters.skipped),
        (extra, extra)
    );
    // Each result lets the next buffered occurrence run, in order.
    for k in 0..MAX_BUFFERED as u64 {
        rig.answer(id, k);
        rig.tick(1_000 + k as i64);
        assert_eq!(*rig.occurrences().last().unwrap(), k + 1);
    }
    rig.book.check_invariants().unwrap();
}

#[test]
fn allow_all_runs_everything_and_tracks_nothing() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig
        .apply(1, create(every(100, 100), Overlap::AllowAll))
        .unwrap()
        .unwrap();
    let plain = rig
        .apply(1, ScheduleRequest::Create(every(100, 100)))
        .unwrap()
        .unwrap();
    for t in 1..=5 {
        rig.tick(100 * t);
    }
    assert_eq!(rig.occurrences().len(), 10);
    assert_eq!(
        rig.book.get(id).unwrap().overlap,
        rig.book.get(plain).unwrap().overlap
    );
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, None);
}

#[test]
fn cancel_other_cancels_the_awaited_run_and_ignores_its_late_result() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig
        .apply(1, create(every(100, 100), Overlap::CancelOther))
        .unwrap()
        .unwrap();
    rig.tick(100);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((0, 1)));
    let r = rig.tick(200);
    assert_eq!(r.overlap_cancelled, vec![(id, 0, 1)]);
    assert!(r.overlap_skipped.is_empty() && r.overlap_buffered.is_empty());
    assert_eq!(rig.occurrences(), vec![0, 1], "the new occurrence runs");
    let info = rig.book.get(id).unwrap();
    assert_eq!(
        info.overlap.awaiting,
        Some((1, 1)),
        "the new run is awaited"
    );
    assert_eq!(
        (
            info.overlap.overflowed,
            info.overlap.skipped,
            info.counters.skipped
        ),
        (1, 0, 0),
        "one cancellation, nothing skipped"
    );
    // The cancelled run's late result: recognised, frees nothing.
    assert_eq!(rig.answer(id, 0), vec![Settled::OfUnawaitedRun]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((1, 1)));
    // The same book saved and reloaded reads the late result the same way.
    let range = PageRange::new(0, 32).unwrap();
    let mut pages = MemPages::new(4_096, 32);
    rig.book.save(&mut pages, range).unwrap();
    let again = Scheduler::load(7, Limits::default(), &pages, range).unwrap();
    assert!(again == rig.book, "reloads equal");
    // The new run's own result releases it: the next occurrence runs without a cancellation.
    assert_eq!(rig.answer(id, 1), vec![Settled::Released]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, None);
    let r = rig.tick(300);
    assert!(r.overlap_cancelled.is_empty());
    assert_eq!(rig.occurrences(), vec![0, 1, 2]);
    assert_eq!(rig.book.get(id).unwrap().overlap.overflowed, 1);
    rig.book.check_invariants().unwrap();
}

#[test]
fn cancel_other_cancels_a_partly_answered_run_once() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    rig.st.records = 2;
    let id = rig
        .apply(1, create(every(100, 100), Overlap::CancelOther))
        .unwrap()
        .unwrap();
    rig.book = rig.book.clone().with_emit_budget(2, 1_000);
    rig.tick(100);
    let first = *rig.pending.keys().next().unwrap();
    rig.pending.remove(&first);
    assert_eq!(rig.settle(first.1), Settled::Pending);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((0, 1)));
    // Two occurrences due in one tick: 1 cancels 0, then 2 cancels 1.
    let r = rig.tick(300);
    assert_eq!(r.overlap_cancelled, vec![(id, 0, 1), (id, 1, 2)]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((2, 2)));
    // Every late record of the cancelled runs (one of 0, two of 1) settles nothing.
    assert_eq!(rig.answer(id, 0), vec![Settled::OfUnawaitedRun]);
    assert_eq!(rig.answer(id, 1), vec![Settled::OfUnawaitedRun; 2]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((2, 2)));
    assert_eq!(rig.book.get(id).unwrap().overlap.overflowed, 2);
    assert_eq!(rig.late_of_cancelled, 3);
    rig.book.check_invariants().unwrap();
}

#[test]
fn cancel_other_is_refused_for_one_shots_and_backfills() {
    let mut rig = Rig::new(vec![1]);
    let once = NewSchedule::new("job", Timing::At(Due::Time(50)));
    assert!(matches!(
        rig.apply(1, create(once, Overlap::CancelOther)),
        Err(ScheduleError::Invalid(_))
    ));
    let id = rig
        .apply(1, create(every(100, 100), Overlap::CancelOther))
        .unwrap()
        .unwrap();
    let before = rig.book.refusals().backfill;
    let backfill = ScheduleRequest::BackfillWith {
        target: Target::Id(id),
        from_ms: 100,
        to_ms: 300,
        overlap: Overlap::CancelOther,
    };
    assert!(matches!(
        rig.apply(1, backfill),
        Err(ScheduleError::Invalid(_))
    ));
    assert_eq!(rig.book.refusals().backfill, before + 1, "counted");
    assert!(rig.book.get(id).unwrap().manual.backfill.is_none());
    // Cron table entries take it (their cancellations are kept by the host:
    // `ccron/tests/table_policies.rs`, `cancel_other_matches_the_model`).
    let entry = ccron::CronEntry::<()>::cron(
        0,
        ccron::cron::CronSchedule::parse("* * * * *").unwrap(),
        |_| {},
    );
    assert_eq!(
        entry.with_overlap(Overlap::CancelOther).unwrap().overlap(),
        Overlap::CancelOther
    );
}

#[test]
fn a_run_without_records_has_its_result_and_several_records_all_count() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    rig.st.silent = true;
    rig.st.records = 2;
    let id = rig
        .apply(1, create(every(100, 100), Overlap::Skip))
        .unwrap()
        .unwrap();
    rig.book = rig.book.clone().with_emit_budget(2, 1_000);
    rig.tick(100);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((0, 2)));
    // One of its two records answered: still waiting.
    let k = *rig.pending.keys().next().unwrap();
    rig.pending.remove(&k);
    assert!(rig.book.settle(k.1));
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((0, 1)));
    rig.tick(200);
    assert_eq!(rig.skipped, vec![1]);
    rig.answer(id, 0);
    rig.tick(300);
    rig.answer(id, 2);
    // Occurrence 3 emits nothing: it has its result at once, 4 runs.
    rig.tick(400);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, None);
    rig.tick(500);
    assert_eq!(rig.occurrences(), vec![0, 2, 3, 4]);
    assert_eq!(rig.skipped, vec![1]);
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, Some((4, 2)));
    // A record of another emitter, or of an older run, settles nothing.
    assert!(!rig.book.settle(OccurrenceId::new(7, id, 0)));
    assert!(!rig.book.settle(OccurrenceId::new(8, id, 4)));
}

#[test]
fn the_policy_is_set_by_its_owner_or_an_admin_on_recurring_schedules_only() {
    let mut rig = Rig::new(vec![1]);
    let id = rig
        .apply(1, ScheduleRequest::Create(every(100, 100)))
        .unwrap()
        .unwrap();
    let set = |overlap| ScheduleRequest::SetOverlap {
        target: Target::Id(id),
        overlap,
    };
    assert!(matches!(
        rig.apply(2, set(Overlap::Skip)),
        Err(ScheduleError::Unauthorized { .. })
    ));
    let v = rig.book.get(id).unwrap().version;
    assert_eq!(rig.apply(1, set(Overlap::Skip)), Ok(Some(id)));
    assert_eq!(rig.apply(99, set(Overlap::BufferOne)), Ok(Some(id)));
    let info = rig.book.get(id).unwrap();
    assert_eq!(
        (info.overlap.policy, info.version),
        (Overlap::BufferOne, v + 2)
    );
    let once = NewSchedule::new("job", Timing::At(Due::Time(50)));
    assert!(matches!(
        rig.apply(1, create(once.clone(), Overlap::Skip)),
        Err(ScheduleError::Invalid(_))
    ));
    assert!(rig.apply(1, create(once, Overlap::AllowAll)).is_ok());
    let upsert = ScheduleRequest::UpsertOverlap {
        schedule: every(10, 10).with_key("k"),
        policy: RunPolicy::default(),
        bounds: Bounds::NONE,
        overlap: Overlap::BufferAll,
    };
    let k = rig.apply(1, upsert.clone()).unwrap().unwrap();
    assert_eq!(rig.book.get(k).unwrap().overlap.policy, Overlap::BufferAll);
    assert!(matches!(
        rig.apply(2, upsert),
        Err(ScheduleError::Unauthorized { .. })
    ));
}

#[test]
fn switching_to_allow_all_releases_the_buffer_and_skip_drops_it() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let id = rig
        .apply(1, create(every(10, 10), Overlap::BufferAll))
        .unwrap()
        .unwrap();
    rig.tick(10);
    rig.tick(40);
    assert_eq!(rig.book.get(id).unwrap().overlap.buffered.len(), 3);
    let set = |overlap| ScheduleRequest::SetOverlap {
        target: Target::Id(id),
        overlap,
    };
    rig.apply(1, set(Overlap::BufferOne)).unwrap();
    let info = rig.book.get(id).unwrap();
    assert_eq!((info.overlap.buffered.len(), info.overlap.skipped), (1, 2));
    rig.apply(1, set(Overlap::AllowAll)).unwrap();
    assert_eq!(rig.book.get(id).unwrap().overlap.awaiting, None);
    rig.tick(41);
    assert_eq!(rig.occurrences(), vec![0, 1]);
    rig.book.check_invariants().unwrap();
}

/// An upsert of a keyed schedule (`UpsertOverlap`, or a plain `Upsert` that keeps the policy)
/// replaces its definition: the occurrences its policy buffered under the old definition are
/// dropped (like owed runs, uncounted), the run it awaits stays awaited, and after that run's
/// result none of them runs. Checks the claim that `admit_overlap` leaves them buffered: it
/// only sets the policy, but the replace it follows (`lifecycle.rs`) already dropped them.
#[test]
fn an_upsert_drops_buffered_occurrences_and_keeps_the_awaited_run() {
    let mut rig = Rig::new(vec![i64::MAX / 4]);
    let upsert = |schedule: NewSchedule, overlap| ScheduleRequest::UpsertOverlap {
        schedule: schedule.with_key("k"),
        policy: RunPolicy::default(),
        bounds: Bounds::NONE,
        overlap,
    };
    let id = rig
        .apply(1, upsert(every(10, 10), Overlap::BufferAll))
        .unwrap()
        .unwrap();
    rig.tick(10);
    rig.tick(40);
    assert_eq!(rig.book.get(id).unwrap().overlap.buffered.len(), 3);
    // The same key, a new grid, the same policy.
    assert_eq!(
        rig.apply(1, upsert(every(1_000, 1_000), Overlap::BufferAll)),
        Ok(Some(id))
    );
    let o = rig.book.get(id).unwrap().overlap;
    assert_eq!(o.policy, Overlap::BufferAll);
    assert!(o.buffered.is_empty(), "dropped: {:?}", o.buffered);
    assert_eq!(o.awaiting, Some((0, 1)), "the awaited run stays awaited");
    assert_eq!(
        o.skipped, 0,
        "dropped like owed runs, not counted as skipped"
    );
    rig.book.check_invariants().unwrap();
    rig.answer(id, 0);
    rig.tick(41);
    assert_eq!(rig.occurrences(), vec![0], "no dropped occurrence runs");
    // A plain upsert keeps the policy and drops what it buffered as well.
    rig.tick(1_000);
    rig.tick(3_000);
    assert_eq!(rig.book.get(id).unwrap().overlap.buffered.len(), 2);
    rig.apply(
        1,
        ScheduleRequest::Upsert(every(100_000, 100_000).with_key("k")),
    )
    .unwrap();
    let o = rig.book.get(id).unwrap().overlap;
    assert_eq!(o.policy, Overlap::BufferAll);
    assert!(o.buffered.is_empty(), "dropped: {:?}", o.buffered);
    let awaited = o.awaiting.map(|(occ, _)| occ).unwrap();
    rig.answer(id, awaited);
    rig.tick(3_001);
    assert_eq!(rig.occurrences(), vec![0, awaited]);
    rig.book.check_invariants().unwrap();
}

/// What the model says happened: runs (occurrence, nominal time), skipped, buffered and
/// refused occurrences.
type Outcome = (
    Vec<(u64, i64)>,
    Vec<u64>,
    Vec<u64>,
    Vec<u64>,
    Vec<(u64, u64)>,
);

/// The brute-force model: the grid walked point by point at each tick, the previous run's
/// result arrival compared with the tick's time.
fn model(
    policy: Overlap,
    period: i64,
    start: i64,
    ticks: &[i64],
    delays: &[i64],
    silent: bool,
) -> Outcome {
    let (mut ran, mut skipped, mut buffered, mut overflowed) = (vec![], vec![], vec![], vec![]);
    let mut cancelled = vec![];
    let mut next = start;
    let mut n = 0u64;
    // The awaited run: its result's arrival time and its occurrence.
    let mut awaiting: Option<(i64, u64)> = None;
    let mut buffer: VecDeque<(i64, u64)> = VecDeque::new();
    let bound = match policy {
        Overlap::BufferOne => 1,
        Overlap::BufferAll => MAX_BUFFERED,
        _ => 0,
    };
    for &now in ticks {
        if awaiting.is_some_and(|(a, _)| a <= now) {
            awaiting = None;
        }
        let run =
            |occ: u64, due: i64, ran: &mut Vec<(u64, i64)>, awaiting: &mut Option<(i64, u64)>| {
                ran.push((occ, due));
                let emits = !(silent && occ % 5 == 3);
                if policy != Overlap::AllowAll && emits {
                    *awaiting = Some((now + delays[(occ % delays.len() as u64) as usize], occ));
                }
            };
        while awaiting.is_none() {
            let Some((due, occ)) = buffer.pop_front() else {
                break;
            };
            run(occ, due, &mut ran, &mut awaiting);
        }
        while next <= now {
            let occ = n;
            n += 1;
            if policy == Overlap::CancelOther
                && let Some((_, previous)) = awaiting.take()
            {
                cancelled.push((previous, occ));
                run(occ, next, &mut ran, &mut awaiting);
            } else if awaiting.is_some() {
                if buffer.len() < bound {
                    buffer.push_back((next, occ));
                    buffered.push(occ);
                } else if policy == Overlap::BufferAll {
                    overflowed.push(occ);
                } else {
                    skipped.push(occ);
                }
            } else {
                run(occ, next, &mut ran, &mut awaiting);
            }
            next += period;
        }
    }
    (ran, skipped, buffered, overflowed, cancelled)
}

/// Any overlap policy of regular runs: the backfill tests' four and `CancelOther`.
fn regular_policy() -> impl Strategy<Value = Overlap> {
    prop_oneof![policy(), Just(Overlap::CancelOther)]
}

/// Any of the four overlap policies a backfill takes (also the backfill tests' strategy).
pub(crate) fn policy() -> impl Strategy<Value = Overlap> {
    prop_oneof![
        Just(Overlap::AllowAll),
        Just(Overlap::Skip),
        Just(Overlap::BufferOne),
        Just(Overlap::BufferAll),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Over random grids, tick times and result delays, the book runs, skips, buffers and
    /// refuses exactly the occurrences the brute-force model does, for every policy; the book
    /// reloads equal from its pages along the way (the overlap state is persisted).
    #[test]
    fn overlap_matches_the_brute_force_model(
        policy in regular_policy(),
        period in 1i64..60,
        start in 1i64..100,
        steps in prop::collection::vec(0i64..120, 1..40),
        delays in prop::collection::vec(0i64..300, 1..8),
        silent in any::<bool>(),
    ) {
        let mut rig = Rig::new(delays.clone());
        rig.st.silent = silent;
        // Created by an admin: no outbox quota holds its runs back (results trim nothing here).
        let id = rig.apply(99, create(every(period, start), policy)).unwrap().unwrap();
        let mut ticks = Vec::new();
        let mut now = 0;
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
        let (ran, skipped, buffered, overflowed, cancelled) =
            model(policy, period, start, &ticks, &delays, silent);
        let got: Vec<(u64, i64)> = rig
            .st
            .ran
            .iter()
            .map(|(o, d)| (*o, match d { Due::Time(t) => *t, Due::Seq(_) => -1 }))
            .collect();
        prop_assert_eq!(got, ran);
        prop_assert_eq!(&rig.skipped, &skipped);
        prop_assert_eq!(&rig.buffered, &buffered);
        prop_assert_eq!(&rig.overflowed, &overflowed);
        let info = rig.book.get(id).unwrap();
        prop_assert_eq!(info.overlap.skipped, skipped.len() as u64);
        prop_assert_eq!(&rig.cancelled, &cancelled);
        prop_assert_eq!(info.overlap.overflowed, (overflowed.len() + cancelled.len()) as u64);
        prop_assert_eq!(info.counters.skipped, (skipped.len() + overflowed.len()) as u64);
    }
}

/// Through the ledger (`CronLedger` with its `LedgerScheduler`): a worker's result applied by
/// consensus, or the consumer's progress trimming a record unanswered, settles the awaited run
/// (the host's hook); the book's pages, hence the digest, carry the state.
mod through_the_ledger {
    use ccron::host::scheduler::outbox_delivered_payload;
    use ccron::host::{
        AppError, Application, BookConfig, ClientId, CronLedger, Digest32, ExecContext,
        LedgerScheduler,
    };
    use ccron::outbox::OutboxResult;
    use ccron::schedule::{
        Bounds, HandlerError, Handlers, Limits, Overlap, RunPolicy, ScheduleRequest,
    };
    use ccron::{CronTableRegistry, MemPages, Policy, Tick};

    const CONSUMER: ClientId = ccron::ClientId([99; 32]);

    #[derive(Debug, Default, Clone)]
    struct Nil;

    impl Application for Nil {
        fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
            b"ok".to_vec()
        }
        fn digest(&self) -> Digest32 {
            [0; 32]
        }
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), AppError> {
            Ok(())
        }
    }

    fn ledger() -> CronLedger<Nil> {
        let mut handlers = Handlers::<Nil>::new();
        handlers.register("job", |ctx| {
            ctx.emit("effect", b"x".to_vec())?;
            Ok::<(), HandlerError>(())
        });
        let cfg = BookConfig {
            component: 1,
            position: 9,
            limits: Limits::default(),
            book_pages: 64,
            outbox_pages: 4,
        };
        let book = LedgerScheduler::try_new(cfg, handlers)
            .unwrap()
            .with_policy(Policy::default().with_outbox_consumer(CONSUMER));
        CronLedger::new(Nil, CronTableRegistry::new()).with_scheduler(book)
    }

    fn ctx(seq: u64, t: i64) -> ExecContext {
        ExecContext {
            seq,
            agreed_time_ms: Some(t),
        }
    }

    fn runs(l: &CronLedger<Nil>) -> Vec<u64> {
        let s = l.scheduler().unwrap();
        let mut v: Vec<u64> = s.outbox().iter().map(|(_, r)| r.id.occurrence).collect();
        v.dedup();
        v
    }

    #[test]
    fn a_result_or_an_unanswered_trim_settles_the_awaited_run() {
        let mut l = ledger();
        let mut pages = MemPages::new(4_096, 2);
        let req = ScheduleRequest::CreateOverlap {
            schedule: super::every(100, 100),
            policy: RunPolicy::default(),
            bounds: Bounds::NONE,
            overlap: Overlap::Skip,
        };
        let reply = l.execute(
            ctx(1, 0),
            ccron::ClientId([1; 32]),
            &ccron::codec::to_blob(&req).unwrap(),
        );
        assert!(
            reply.starts_with(b"ok"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        l.on_tick(Tick::new(1, 2, Some(100)), &mut pages).unwrap();
        l.on_tick(Tick::new(1, 3, Some(200)), &mut pages).unwrap();
        assert_eq!(runs(&l), vec![0], "occurrence 1 skipped: no result yet");
        let before = l.digest();
        // The worker's answer for occurrence 0, applied through consensus.
        let (index, id) = {
            let s = l.scheduler().unwrap();
            let (i, r) = s.outbox().iter().next().unwrap();
            (i, r.id)
        };
        let p = OutboxResult::dead_letter(index, id, "done")
            .to_payload()
            .unwrap();
        let reply = l.execute(ctx(4, 250), CONSUMER, &p);
        assert!(reply.starts_with(b"ok result applied"));
        assert_ne!(l.digest(), before, "the settled state is in the digest");
        let book = l.scheduler().unwrap().book();
        let sid = book.ids().next().unwrap();
        assert_eq!(book.get(sid).unwrap().overlap.awaiting, None);
        l.on_tick(Tick::new(1, 5, Some(300)), &mut pages).unwrap();
        assert_eq!(runs(&l), vec![0, 2]);
        // Occurrence 2's record trimmed by the consumer's progress without a result.
        let head = l.scheduler().unwrap().outbox().head();
        let reply = l.execute(ctx(6, 350), CONSUMER, &outbox_delivered_payload(head));
        assert!(
            reply.starts_with(b"ok trimmed"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        let book = l.scheduler().unwrap().book();
        assert_eq!(book.get(sid).unwrap().overlap.awaiting, None);
        l.on_tick(Tick::new(1, 7, Some(400)), &mut pages).unwrap();
        let s = l.scheduler().unwrap();
        let last = s.outbox().iter().last().unwrap().1.id.occurrence;
        assert_eq!(last, 3, "occurrence 3 ran");
        assert_eq!(s.book().get(sid).unwrap().counters.skipped, 1);
    }
}
