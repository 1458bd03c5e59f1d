//! Behaviour of `ccron::schedule::Scheduler`: schedules as replicated data (admission, delayed
//! one-shot tasks, misfire policies, budget and priorities, pause/resume, jitter, outbox emits,
//! preview, persistence and reload equivalence).

use ccron::Principal;
use ccron::codec::{self, BlobKind};
use ccron::cron::{CronError, ZoneRules, parse_rfc3339_ms};
use ccron::outbox::{OccurrenceId, Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, Misfire, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, Target,
    Timing,
};
use ccron::{Due, MemPages, PageRange, ReservedPages, Tick};
use proptest::prelude::*;

/// The ledger state handlers see: a log of (handler, schedule id, due) runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Ledger {
    log: Vec<(String, u64, Due)>,
}

const MIN: i64 = 60_000;

/// Recognises an expected error.
type ErrCheck = fn(&ScheduleError) -> bool;

fn handlers() -> Handlers<Ledger> {
    let mut h: Handlers<Ledger> = Handlers::new();
    for name in ["expire", "report"] {
        assert!(h.register(name, move |ctx| {
            let (id, due) = (ctx.id, ctx.due);
            ctx.state.log.push((name.to_string(), id, due));
        }));
    }
    assert!(!h.register("expire", |_| {}), "names are unique");
    h
}

struct Rig {
    book: Scheduler,
    handlers: Handlers<Ledger>,
    ledger: Ledger,
    outbox: Outbox,
    seq: u64,
}

impl Rig {
    fn new(limits: Limits) -> Self {
        Self {
            book: Scheduler::new(7, limits),
            handlers: handlers(),
            ledger: Ledger::default(),
            outbox: Outbox::new(OutboxLimits::default()),
            seq: 0,
        }
    }

    fn apply(&mut self, req: ScheduleRequest, now_ms: i64) -> Result<Option<u64>, ScheduleError> {
        self.seq += 1;
        let r = self.book.apply(
            &Principal::Host,
            req,
            &self.handlers,
            self.seq,
            Some(now_ms),
        );
        self.book.check_invariants().unwrap();
        r
    }

    /// Runs a tick at `now_ms`; returns the (id, due) runs.
    fn tick(&mut self, now_ms: i64) -> Vec<(u64, Due)> {
        self.seq += 1;
        let tick = Tick::new(7, self.seq, Some(now_ms));
        let rep = self.book.on_tick(
            &tick,
            &mut self.ledger,
            &mut self.handlers,
            &mut self.outbox,
        );
        self.book.check_invariants().unwrap();
        rep.fired.iter().map(|f| (f.id, f.due)).collect()
    }
}

fn at(id: u64, t: i64) -> (u64, Due) {
    (id, Due::Time(t))
}

#[test]
fn delayed_task_fires_exactly_once_and_leaves_the_book() {
    let mut r = Rig::new(Limits::default());
    let id = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new("expire", Timing::AfterMs(30 * MIN))),
            1_000,
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        r.book.get(id).unwrap().next,
        Some(Due::Time(1_000 + 30 * MIN))
    );
    assert!(r.tick(30 * MIN).is_empty());
    assert_eq!(r.tick(30 * MIN + 1_000), vec![at(id, 30 * MIN + 1_000)]);
    assert!(
        r.tick(30 * MIN + 1_000).is_empty(),
        "a repeated tick runs nothing"
    );
    assert!(r.tick(90 * MIN).is_empty());
    assert!(r.book.is_empty());
    assert_eq!(r.ledger.log.len(), 1);
}

#[test]
fn sequence_delays_cancel_by_id_and_upsert_by_key() {
    let mut r = Rig::new(Limits::default());
    // Admitted at seq 1: due at seq 4.
    let by_seq = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new("report", Timing::AfterSeqs(3))),
            0,
        )
        .unwrap()
        .unwrap();
    let cancelled = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(Due::Time(50)))),
            0,
        )
        .unwrap()
        .unwrap();
    let order = NewSchedule::new("expire", Timing::AfterMs(100)).with_key("order-1");
    let keyed = r
        .apply(ScheduleRequest::Upsert(order.clone()), 0)
        .unwrap()
        .unwrap();
    // Upsert again later: same id, re-armed from the new admission time.
    assert_eq!(
        r.apply(ScheduleRequest::Upsert(order.clone()), 500)
            .unwrap(),
        Some(keyed)
    );
    assert_eq!(
        r.apply(ScheduleRequest::Create(order), 500),
        Err(ScheduleError::KeyInUse("order-1".into()))
    );
    r.apply(ScheduleRequest::Cancel(Target::Id(cancelled)), 0)
        .unwrap();
    assert_eq!(
        r.apply(ScheduleRequest::Cancel(Target::Id(cancelled)), 0),
        Err(ScheduleError::UnknownSchedule(Target::Id(cancelled)))
    );
    // seq is now 6 (>= 4): the sequence task fires; time 550 < 600: the keyed one waits.
    assert_eq!(r.tick(550), vec![(by_seq, Due::Seq(4))]);
    assert_eq!(r.tick(600), vec![at(keyed, 600)]);
    assert_eq!(
        r.book.id_of("order-1"),
        None,
        "a fired one-shot frees its key"
    );
}

#[test]
fn rejected_requests_change_nothing() {
    let mut r = Rig::new(Limits {
        max_payload_bytes: 4,
        ..Limits::default()
    });
    r.apply(
        ScheduleRequest::Create(NewSchedule::new("report", Timing::AfterMs(5))),
        0,
    )
    .unwrap();
    let before = r.book.clone();
    let bad: Vec<(ScheduleRequest, ErrCheck)> = vec![
        (
            ScheduleRequest::Create(NewSchedule::new("nope", Timing::AfterMs(5))),
            |e| matches!(e, ScheduleError::UnknownHandler(h) if h == "nope"),
        ),
        (
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: "61 * * * *".into(),
                    zone: None,
                },
            )),
            |e| matches!(e, ScheduleError::Cron(CronError::InvalidExpression { .. })),
        ),
        (
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: "0 0 30 2 *".into(),
                    zone: None,
                },
            )),
            |e| matches!(e, ScheduleError::Cron(CronError::NeverFires { .. })),
        ),
        (
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: "0 9 * * *".into(),
                    zone: Some("Europe/Berlin".into()),
                },
            )),
            |e| matches!(e, ScheduleError::UnknownZone(_)),
        ),
        (
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Every {
                    period_ms: 0,
                    start_ms: None,
                },
            )),
            |e| matches!(e, ScheduleError::Invalid(_)),
        ),
        (
            ScheduleRequest::Create(
                NewSchedule::new("report", Timing::AfterMs(5))
                    .with_misfire(Misfire::FireEach { cap: 0 }),
            ),
            |e| matches!(e, ScheduleError::Invalid(_)),
        ),
        (
            ScheduleRequest::Create(
                NewSchedule::new("report", Timing::AfterMs(5))
                    .with_misfire(Misfire::FireEach { cap: 1_001 }),
            ),
            |e| matches!(e, ScheduleError::Invalid(_)),
        ),
        (
            ScheduleRequest::Create(
                NewSchedule::new("report", Timing::AfterMs(5)).with_payload(vec![0; 5]),
            ),
            |e| matches!(e, ScheduleError::Limit(_)),
        ),
        (
            ScheduleRequest::Upsert(NewSchedule::new("report", Timing::AfterMs(5))),
            |e| matches!(e, ScheduleError::MissingKey),
        ),
        (ScheduleRequest::Pause(Target::Key("ghost".into())), |e| {
            matches!(e, ScheduleError::UnknownSchedule(_))
        }),
        (
            ScheduleRequest::Replace {
                target: Target::Id(1),
                schedule: NewSchedule::new("nope", Timing::AfterMs(5)),
            },
            |e| matches!(e, ScheduleError::UnknownHandler(_)),
        ),
    ];
    for (req, expected) in bad {
        let err = r.apply(req.clone(), 0).unwrap_err();
        assert!(expected(&err), "{req:?} gave {err:?}");
        assert_eq!(r.book, before, "{req:?} changed the book");
    }
    // Without agreed time, relative timings cannot be admitted.
    let err = r
        .book
        .apply(
            &Principal::Host,
            ScheduleRequest::Create(NewSchedule::new("report", Timing::AfterMs(5))),
            &r.handlers,
            9,
            None,
        )
        .unwrap_err();
    assert_eq!(err, ScheduleError::NeedsTime);
    assert_eq!(r.book, before);
}

#[test]
fn cron_in_installed_zone_runs_once_after_the_spring_gap() {
    let mut r = Rig::new(Limits::default());
    let berlin = ZoneRules::from_iana("Europe/Berlin").unwrap();
    r.apply(ScheduleRequest::InstallZone(berlin), 0).unwrap();
    let t0 = parse_rfc3339_ms("2026-03-28T12:00:00Z").unwrap();
    let id = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: "30 2 * * *".into(),
                    zone: Some("Europe/Berlin".into()),
                },
            )),
            t0,
        )
        .unwrap()
        .unwrap();
    let gap_end = parse_rfc3339_ms("2026-03-29T01:00:00Z").unwrap();
    let next_day = parse_rfc3339_ms("2026-03-30T00:30:00Z").unwrap();
    assert_eq!(
        r.book.preview(id, 2),
        vec![Due::Time(gap_end), Due::Time(next_day)]
    );
    // Ticks every 10 minutes across the gap: one run, right after it.
    let mut runs = Vec::new();
    let mut t = t0;
    while t < next_day + 1 {
        runs.extend(r.tick(t));
        t += 10 * MIN;
    }
    assert_eq!(runs, vec![at(id, gap_end), at(id, next_day)]);
}

#[test]
fn cron_in_installed_zone_runs_once_in_the_fall_back_hour() {
    let mut r = Rig::new(Limits::default());
    let berlin = ZoneRules::from_iana("Europe/Berlin").unwrap();
    r.apply(ScheduleRequest::InstallZone(berlin), 0).unwrap();
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice.
    let t0 = parse_rfc3339_ms("2026-10-24T12:00:00Z").unwrap();
    let id = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: "30 2 * * *".into(),
                    zone: Some("Europe/Berlin".into()),
                },
            )),
            t0,
        )
        .unwrap()
        .unwrap();
    let first = parse_rfc3339_ms("2026-10-25T00:30:00Z").unwrap(); // 02:30 CEST
    let next_day = parse_rfc3339_ms("2026-10-26T01:30:00Z").unwrap(); // 02:30 CET
    let mut runs = Vec::new();
    let mut t = t0;
    while t <= next_day {
        runs.extend(r.tick(t));
        t += 5 * MIN;
    }
    assert_eq!(runs, vec![at(id, first), at(id, next_day)]);
}

#[test]
fn misfire_policies_on_a_late_tick() {
    // Every minute from 0; the tick at 5.5 min has reached 0..=5 min (6 occurrences).
    let run = |misfire| {
        let mut r = Rig::new(Limits::default());
        let id = r
            .apply(
                ScheduleRequest::Create(
                    NewSchedule::new(
                        "report",
                        Timing::Every {
                            period_ms: MIN,
                            start_ms: Some(0),
                        },
                    )
                    .with_misfire(misfire),
                ),
                0,
            )
            .unwrap()
            .unwrap();
        let late = r.tick(5 * MIN + MIN / 2);
        let next = r.book.get(id).unwrap().next;
        let on_time = r.tick(6 * MIN);
        (
            late.into_iter().map(|(_, d)| d).collect::<Vec<_>>(),
            next,
            on_time.len(),
        )
    };
    let t = |m: i64| Due::Time(m * MIN);
    // Fire once stands for the latest missed occurrence; fire each runs the latest `cap`,
    // ascending; the grid (next = 6 min) never drifts.
    assert_eq!(run(Misfire::FireOnce), (vec![t(5)], Some(t(6)), 1));
    assert_eq!(run(Misfire::Skip), (vec![], Some(t(6)), 1));
    assert_eq!(
        run(Misfire::FireEach { cap: 3 }),
        (vec![t(3), t(4), t(5)], Some(t(6)), 1)
    );
    assert_eq!(
        run(Misfire::FireEach { cap: 10 }),
        (vec![t(0), t(1), t(2), t(3), t(4), t(5)], Some(t(6)), 1)
    );
    // Fire once with a deadline: the latest reached (5 min, 30 s old) is within 2 min.
    assert_eq!(
        run(Misfire::ExpireAfter {
            deadline_ms: 2 * MIN
        }),
        (vec![t(5)], Some(t(6)), 1)
    );
    assert_eq!(
        run(Misfire::ExpireAfter { deadline_ms: 10 }),
        (vec![], Some(t(6)), 1)
    );
}

#[test]
fn expired_one_shot_is_dropped_without_running() {
    let mut r = Rig::new(Limits::default());
    let id = r
        .apply(
            ScheduleRequest::Create(
                NewSchedule::new("expire", Timing::At(Due::Time(1_000)))
                    .with_misfire(Misfire::ExpireAfter { deadline_ms: 500 }),
            ),
            0,
        )
        .unwrap()
        .unwrap();
    let tick = Tick::new(7, 10, Some(2_000));
    let rep = r
        .book
        .on_tick(&tick, &mut r.ledger, &mut r.handlers, &mut r.outbox);
    assert!(rep.fired.is_empty());
    assert_eq!(rep.skipped, vec![id]);
    assert!(r.book.is_empty());
}

#[test]
fn budget_carries_over_by_priority_then_due_then_id() {
    let mut r = Rig::new(Limits {
        budget_per_tick: 2,
        ..Limits::default()
    });
    let mk = |t: i64, p: u8| {
        ScheduleRequest::Create(
            NewSchedule::new("report", Timing::At(Due::Time(t))).with_priority(p),
        )
    };
    let a = r.apply(mk(30, 0), 0).unwrap().unwrap();
    let b = r.apply(mk(10, 0), 0).unwrap().unwrap();
    let c = r.apply(mk(20, 5), 0).unwrap().unwrap();
    let d = r.apply(mk(10, 0), 0).unwrap().unwrap();
    let e = r.apply(mk(40, 9), 0).unwrap().unwrap();
    let tick = Tick::new(7, 100, Some(100));
    let rep = r
        .book
        .on_tick(&tick, &mut r.ledger, &mut r.handlers, &mut r.outbox);
    assert!(rep.carried_over);
    let ids =
        |rep: &ccron::schedule::TickReport| rep.fired.iter().map(|f| f.id).collect::<Vec<_>>();
    assert_eq!(ids(&rep), vec![e, c]);
    let rep = r
        .book
        .on_tick(&tick, &mut r.ledger, &mut r.handlers, &mut r.outbox);
    assert_eq!(ids(&rep), vec![b, d]);
    assert!(rep.carried_over);
    let rep = r
        .book
        .on_tick(&tick, &mut r.ledger, &mut r.handlers, &mut r.outbox);
    assert_eq!(ids(&rep), vec![a]);
    assert!(!rep.carried_over);
}

#[test]
fn pause_and_resume_keep_the_phase() {
    let mut r = Rig::new(Limits::default());
    let req = NewSchedule::new(
        "report",
        Timing::Every {
            period_ms: 10_000,
            start_ms: Some(3_000),
        },
    )
    .with_key("k")
    .with_misfire(Misfire::Skip);
    let id = r.apply(ScheduleRequest::Create(req), 0).unwrap().unwrap();
    assert_eq!(r.tick(3_000), vec![at(id, 3_000)]);
    r.apply(ScheduleRequest::Pause(Target::Key("k".into())), 5_000)
        .unwrap();
    assert!(r.tick(13_000).is_empty());
    assert!(r.tick(43_000).is_empty());
    assert!(r.book.get(id).unwrap().paused);
    r.apply(ScheduleRequest::Resume(Target::Id(id)), 47_000)
        .unwrap();
    // Skip drops the occurrences passed during the pause; the grid is still 3 s + k·10 s.
    assert!(r.tick(47_000).is_empty());
    assert_eq!(r.tick(53_000), vec![at(id, 53_000)]);
}

#[test]
fn jitter_is_deterministic_bounded_and_spreads() {
    let mut r = Rig::new(Limits::default());
    let mut ids = Vec::new();
    for _ in 0..50 {
        let req = NewSchedule::new("report", Timing::At(Due::Time(1_000))).with_jitter_ms(999);
        ids.push(r.apply(ScheduleRequest::Create(req), 0).unwrap().unwrap());
    }
    let mut fired_at = Vec::new();
    for t in (1_000..=2_000).step_by(100) {
        for (id, due) in r.tick(t) {
            assert_eq!(due, Due::Time(1_000), "the nominal due is reported");
            fired_at.push((id, t));
        }
    }
    assert_eq!(fired_at.len(), 50, "all ran within the jitter window");
    let distinct: std::collections::BTreeSet<_> = fired_at.iter().map(|(_, t)| *t).collect();
    assert!(distinct.len() > 3, "jitter spread the runs: {distinct:?}");
    // Same ids, same offsets: a second book fires identically.
    let mut r2 = Rig::new(Limits::default());
    for _ in 0..50 {
        let req = NewSchedule::new("report", Timing::At(Due::Time(1_000))).with_jitter_ms(999);
        r2.apply(ScheduleRequest::Create(req), 0).unwrap();
    }
    let mut fired2 = Vec::new();
    for t in (1_000..=2_000).step_by(100) {
        fired2.extend(r2.tick(t).into_iter().map(|(id, _)| (id, t)));
    }
    assert_eq!(fired_at, fired2);
}

#[test]
fn handlers_emit_outbox_records_and_chain_schedules() {
    let mut h: Handlers<Ledger> = Handlers::new();
    h.register("remind", |ctx| {
        ctx.emit("mail", ctx.payload.to_vec()).unwrap();
        assert_eq!(
            ctx.emit("mail", b"again".to_vec()),
            Err(ScheduleError::SecondEmit)
        );
        // Chain a follow-up one minute later.
        ctx.request(ScheduleRequest::Create(NewSchedule::new(
            "followup",
            Timing::AfterMs(MIN),
        )));
        ctx.request(ScheduleRequest::Create(NewSchedule::new(
            "nope",
            Timing::AfterMs(1),
        )));
    });
    h.register("followup", |ctx| {
        ctx.state.log.push(("followup".into(), ctx.id, ctx.due))
    });
    let mut book = Scheduler::new(3, Limits::default());
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut ledger = Ledger::default();
    let id = book
        .apply(
            &Principal::Host,
            ScheduleRequest::Create(
                NewSchedule::new("remind", Timing::At(Due::Time(100))).with_payload(b"hi".to_vec()),
            ),
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    let rep = book.on_tick(
        &Tick::new(3, 2, Some(100)),
        &mut ledger,
        &mut h,
        &mut outbox,
    );
    assert_eq!(rep.fired.len(), 1);
    // The refused second emit is reported by the tick too (nothing silent), before the
    // rejected request the run queued.
    assert!(
        matches!(&rep.errors[..], [ScheduleError::SecondEmit, ScheduleError::UnknownHandler(n)] if n == "nope"),
        "{:?}",
        rep.errors
    );
    assert_eq!(book.emit_failures(), 1);
    let (_, rec) = outbox.iter().next().unwrap();
    assert_eq!(rec.id, OccurrenceId::new(3, id, 0));
    assert_eq!(rec.payload, b"hi");
    assert_eq!(outbox.len(), 1);
    let rep = book.on_tick(
        &Tick::new(3, 3, Some(100 + MIN)),
        &mut ledger,
        &mut h,
        &mut outbox,
    );
    assert_eq!(rep.fired.len(), 1);
    assert_eq!(
        ledger.log,
        vec![("followup".into(), id + 1, Due::Time(100 + MIN))]
    );
    book.check_invariants().unwrap();
}

/// Regression (issue 10, "nothing silent"): a handler's emit into a full outbox used to fail
/// after the handler had changed the state, and the ledgers only logged it. Now a run starts
/// only when the outbox can take a record of the run's emit bound: what does not fit waits,
/// due, and runs once the outbox is trimmed; an emit over the bound is a typed error in the
/// tick's report and counted, identically on every replica.
#[test]
fn a_full_outbox_holds_runs_back_and_a_refused_emit_is_reported() {
    let mut h: Handlers<Ledger> = Handlers::new();
    h.register("remind", |ctx| {
        let index = ctx.emit("mail", ctx.payload.to_vec());
        assert!(index.is_ok(), "{index:?}");
        ctx.state.log.push(("remind".into(), ctx.id, ctx.due));
    });
    h.register("big", |ctx| {
        let refused = ctx.emit("mail", vec![0; 5_000]);
        assert!(matches!(refused, Err(ScheduleError::EmitTooLarge { .. })));
    });
    let mut book = Scheduler::new(3, Limits::default());
    let mut outbox = Outbox::new(OutboxLimits {
        max_records: 3,
        ..OutboxLimits::default()
    });
    assert_eq!(book.emit_bound(&outbox), 128 + 4_096 + 2 * 64);
    let mut ledger = Ledger::default();
    for seq in 1..=5 {
        book.apply(
            &Principal::Host,
            ScheduleRequest::Create(
                NewSchedule::new("remind", Timing::At(Due::Time(100))).with_payload(b"hi".to_vec()),
            ),
            &h,
            seq,
            Some(0),
        )
        .unwrap();
    }
    fn tick(
        book: &mut Scheduler,
        h: &mut Handlers<Ledger>,
        outbox: &mut Outbox,
        ledger: &mut Ledger,
        seq: u64,
    ) -> ccron::schedule::TickReport {
        let rep = book.on_tick(&Tick::new(3, seq, Some(100)), ledger, h, outbox);
        book.check_invariants().unwrap();
        rep
    }
    let rep = tick(&mut book, &mut h, &mut outbox, &mut ledger, 10);
    assert_eq!(rep.fired.len(), 3);
    assert!(rep.outbox_full && rep.carried_over && rep.errors.is_empty());
    assert_eq!((outbox.len(), ledger.log.len(), book.len()), (3, 3, 2));
    // Still full: nothing runs, nothing is lost.
    let rep = tick(&mut book, &mut h, &mut outbox, &mut ledger, 11);
    assert!(rep.fired.is_empty() && rep.outbox_full && rep.carried_over);
    assert_eq!(outbox.trim_below(3), 2);
    let rep = tick(&mut book, &mut h, &mut outbox, &mut ledger, 12);
    assert_eq!(rep.fired.len(), 2);
    assert!(!rep.outbox_full && !rep.carried_over && rep.errors.is_empty());
    assert_eq!((outbox.len(), ledger.log.len(), book.len()), (3, 5, 0));
    assert_eq!(book.emit_failures(), 0);
    // An emit over the bound: refused, nothing appended, reported and counted.
    outbox.trim_below(outbox.head() + 1);
    book.apply(
        &Principal::Host,
        ScheduleRequest::Create(NewSchedule::new("big", Timing::At(Due::Time(100)))),
        &h,
        13,
        Some(0),
    )
    .unwrap();
    let rep = tick(&mut book, &mut h, &mut outbox, &mut ledger, 14);
    assert_eq!(rep.fired.len(), 1);
    assert!(
        matches!(
            &rep.errors[..],
            [ScheduleError::EmitTooLarge {
                size_bytes: 5_004,
                max_bytes: 4_352
            }]
        ),
        "{:?}",
        rep.errors
    );
    assert!(outbox.is_empty());
    assert_eq!(book.emit_failures(), 1);
}

#[test]
fn preview_and_load_per_slot() {
    let mut r = Rig::new(Limits::default());
    let every = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new(
                "report",
                Timing::Every {
                    period_ms: 15_000,
                    start_ms: Some(0),
                },
            )),
            0,
        )
        .unwrap()
        .unwrap();
    r.apply(
        ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(Due::Time(61_000)))),
        0,
    )
    .unwrap();
    assert_eq!(
        r.book.preview(every, 3),
        vec![Due::Time(0), Due::Time(15_000), Due::Time(30_000)]
    );
    let load: Vec<_> = r
        .book
        .load_per_slot(0, 120_000, 60_000, 100)
        .into_iter()
        .map(|s| (s.slot_start_ms, s.runs))
        .collect();
    assert_eq!(load, vec![(0, 4), (60_000, 5)]);
}

fn range() -> PageRange {
    PageRange::new(2, 170).unwrap()
}

#[test]
fn persistence_round_trips_across_pages_and_rejects_garbage() {
    let mut r = Rig::new(Limits::default());
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::from_iana("America/New_York").unwrap()),
        0,
    )
    .unwrap();
    for i in 0..200 {
        let req = NewSchedule::new("expire", Timing::AfterMs(i * 1_000))
            .with_key(format!("order-{i}"))
            .with_payload(vec![7; 40]);
        r.apply(ScheduleRequest::Create(req), 0).unwrap();
    }
    r.apply(
        ScheduleRequest::Create(NewSchedule::new(
            "report",
            Timing::Cron {
                expression: "0 2 * * *".into(),
                zone: Some("America/New_York".into()),
            },
        )),
        0,
    )
    .unwrap();
    let mut pages = MemPages::new(4096, 200);
    assert!(r.book.is_dirty());
    r.book.save(&mut pages, range()).unwrap();
    assert!(!r.book.is_dirty());
    let loaded = Scheduler::load(7, Limits::default(), &pages, range()).unwrap();
    assert_eq!(loaded, r.book);
    loaded.check_invariants().unwrap();
    assert_eq!(loaded.id_of("order-5"), r.book.id_of("order-5"));
    // A range too small to lay out, or whose record pages cannot hold the book: errors,
    // nothing written.
    let small = PageRange::new(50, 2).unwrap();
    assert!(matches!(
        r.book.save_all(&mut pages, small),
        Err(ScheduleError::Limit(_))
    ));
    let mid = PageRange::new(180, 8).unwrap();
    assert!(matches!(
        r.book.save_all(&mut pages, mid),
        Err(ScheduleError::Limit(_))
    ));
    assert!(
        Scheduler::load(7, Limits::default(), &pages, mid)
            .unwrap()
            .is_empty()
    );
    // Pages smaller than the configured page size: a typed error.
    assert!(matches!(
        r.book.save_all(&mut MemPages::new(1024, 200), range()),
        Err(ScheduleError::Limit(_))
    ));
    // Another component's book, or limits it exceeds: rejected.
    assert!(matches!(
        Scheduler::load(8, Limits::default(), &pages, range()),
        Err(ScheduleError::Corrupt(_))
    ));
    let tight = Limits {
        max_schedules: 10,
        ..Limits::default()
    };
    assert!(matches!(
        Scheduler::load(7, tight, &pages, range()),
        Err(ScheduleError::Corrupt(_))
    ));
}

#[derive(Debug, Clone)]
enum Op {
    Delay(i64, u8),
    DelaySeq(u64),
    Every(i64, u8),
    Upsert(u8, i64),
    Cancel(u8),
    Pause(u8),
    Resume(u8),
    Tick(i64),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..5_000i64, 0..3u8).prop_map(|(d, p)| Op::Delay(d, p)),
        1 => (0..10u64).prop_map(Op::DelaySeq),
        1 => (1..3_000i64, 0..4u8).prop_map(|(p, m)| Op::Every(p, m)),
        1 => (0..4u8, 0..5_000i64).prop_map(|(k, d)| Op::Upsert(k, d)),
        1 => (0..12u8).prop_map(Op::Cancel),
        1 => (0..12u8).prop_map(Op::Pause),
        1 => (0..12u8).prop_map(Op::Resume),
        3 => (0..4_000i64).prop_map(Op::Tick),
        1 => Just(Op::Restart),
    ]
}

/// Runs `ops` (ticks advance time by their argument), restarting from the pages at
/// `Op::Restart` when `restarts` is true; returns every run and the final book.
fn drive(ops: &[Op], restarts: bool) -> (Vec<(u64, Due, u64)>, Scheduler) {
    let limits = Limits {
        budget_per_tick: 3,
        page_bytes: 512,
        ..Limits::default()
    };
    let mut r = Rig::new(limits);
    let mut pages = MemPages::new(512, 64);
    let mut now = 0i64;
    let mut runs = Vec::new();
    for op in ops {
        let misfire = |m: u8| match m {
            0 => Misfire::FireOnce,
            1 => Misfire::Skip,
            2 => Misfire::FireEach { cap: 2 },
            _ => Misfire::ExpireAfter { deadline_ms: 500 },
        };
        let req = match *op {
            Op::Delay(d, p) => Some(ScheduleRequest::Create(
                NewSchedule::new("expire", Timing::AfterMs(d)).with_priority(p),
            )),
            Op::DelaySeq(d) => Some(ScheduleRequest::Create(NewSchedule::new(
                "expire",
                Timing::AfterSeqs(d),
            ))),
            Op::Every(p, m) => Some(ScheduleRequest::Create(
                NewSchedule::new(
                    "report",
                    Timing::Every {
                        period_ms: p,
                        start_ms: None,
                    },
                )
                .with_misfire(misfire(m))
                .with_jitter_ms(200),
            )),
            Op::Upsert(k, d) => Some(ScheduleRequest::Upsert(
                NewSchedule::new("expire", Timing::AfterMs(d)).with_key(format!("k{k}")),
            )),
            Op::Cancel(i) => Some(ScheduleRequest::Cancel(Target::Id(u64::from(i)))),
            Op::Pause(i) => Some(ScheduleRequest::Pause(Target::Id(u64::from(i)))),
            Op::Resume(i) => Some(ScheduleRequest::Resume(Target::Id(u64::from(i)))),
            Op::Tick(dt) => {
                now += dt;
                r.seq += 1;
                let tick = Tick::new(7, r.seq, Some(now));
                let rep = r
                    .book
                    .on_tick(&tick, &mut r.ledger, &mut r.handlers, &mut r.outbox);
                runs.extend(rep.fired.iter().map(|f| (f.id, f.due, f.occurrence)));
                None
            }
            Op::Restart => {
                if restarts {
                    r.book
                        .save(&mut pages, PageRange::new(0, 64).unwrap())
                        .unwrap();
                    r.book =
                        Scheduler::load(7, limits, &pages, PageRange::new(0, 64).unwrap()).unwrap();
                }
                None
            }
        };
        if let Some(req) = req {
            let _ = r.apply(req, now);
        }
        r.book.check_invariants().unwrap();
    }
    // Incremental saves (above) leave the same pages as one full save of the final book.
    if restarts {
        r.book
            .save(&mut pages, PageRange::new(0, 64).unwrap())
            .unwrap();
        let mut full = MemPages::new(512, 64);
        r.book
            .save_all(&mut full, PageRange::new(0, 64).unwrap())
            .unwrap();
        let ours = Scheduler::load(7, limits, &pages, PageRange::new(0, 64).unwrap()).unwrap();
        let theirs = Scheduler::load(7, limits, &full, PageRange::new(0, 64).unwrap()).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours, r.book);
    }
    (runs, r.book)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Restarting from the pages at any point changes nothing: same runs, same book.
    #[test]
    fn restart_from_pages_is_invisible(ops in prop::collection::vec(op(), 1..80)) {
        let (a, book_a) = drive(&ops, false);
        let (b, book_b) = drive(&ops, true);
        prop_assert_eq!(a, b);
        prop_assert_eq!(book_a, book_b);
    }

    /// Every one-shot task runs at most once, and never before it is due.
    #[test]
    fn one_shots_run_at_most_once_never_early(ops in prop::collection::vec(op(), 1..80)) {
        let (runs, _) = drive(&ops, true);
        let mut seen = std::collections::BTreeSet::new();
        for (id, _, occ) in &runs {
            prop_assert!(seen.insert((*id, *occ)), "occurrence ({}, {}) ran twice", id, occ);
        }
    }

    /// Arbitrary blobs, and valid books with bytes flipped in any part (meta, zones, journal,
    /// record page; checksums fixed up so the bytes reach the decoder), never panic the loader;
    /// whatever loads satisfies the invariants.
    #[test]
    fn garbage_books_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..480),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        part in 0..4usize,
    ) {
        // Pages of 2 KiB: two record pages hold the four schedules at their largest.
        let limits = Limits { page_bytes: 2_048, ..Limits::default() };
        // 8 pages: commit 0, zones 1, log 2..6, record pages 6..8.
        let range = PageRange::new(0, 8).unwrap();
        let parts = [
            (PageRange::new(0, 1).unwrap(), BlobKind::ScheduleBook),
            (PageRange::new(1, 1).unwrap(), BlobKind::ScheduleBook),
            (PageRange::new(2, 4).unwrap(), BlobKind::BookLog),
            (PageRange::new(6, 1).unwrap(), BlobKind::BookRecords),
        ];
        let mut pages = MemPages::new(2_048, 8);
        codec::save_blob(&mut pages, parts[3].0, BlobKind::BookRecords, &bytes).unwrap();
        prop_assert!(Scheduler::load(7, limits, &pages, range).is_err());
        let mut one = Scheduler::new(7, limits);
        let h = handlers();
        one.apply(&Principal::Host, ScheduleRequest::InstallZone(ZoneRules::fixed("X", 3_600).unwrap()), &h, 0, Some(0)).unwrap();
        for req in [
            NewSchedule::new("expire", Timing::AfterMs(5)).with_key("a").with_priority(2),
            NewSchedule::new("report", Timing::Every { period_ms: 10, start_ms: None })
                .with_misfire(Misfire::FireEach { cap: 2 }),
            NewSchedule::new("report", Timing::Cron { expression: "*/5 * * * *".into(), zone: Some("X".into()) }),
            NewSchedule::new("expire", Timing::AfterSeqs(4)).with_payload(b"p".to_vec()),
        ] {
            one.apply(&Principal::Host, ScheduleRequest::Create(req), &h, 0, Some(0)).unwrap();
        }
        let mut wire = MemPages::new(2_048, 8);
        // Full saves until one folds the log: every part then holds data.
        for _ in 0..8 {
            one.save_all(&mut wire, range).unwrap();
            if wire.load(6).unwrap().is_some() {
                break;
            }
        }
        prop_assert!(wire.load(1).unwrap().is_some() && wire.load(6).unwrap().is_some());
        prop_assert_eq!(&Scheduler::load(7, limits, &wire, range).unwrap(), &one);
        let (at, kind) = parts[part];
        let mut blob = codec::load_blob(&wire, at, kind).unwrap().unwrap();
        for (i, b) in flips {
            let i = i.index(blob.len());
            blob[i] ^= b.max(1);
        }
        codec::save_blob(&mut wire, at, kind, &blob).unwrap();
        if let Ok(loaded) = Scheduler::load(7, limits, &wire, range) {
            prop_assert!(loaded.check_invariants().is_ok());
        }
    }
}

/// Table actions (code, not data) reach an outbox in the ledger's state through
/// `ActionCtx::occurrence_id`: distinct per run, identical on a replay.
#[test]
fn table_actions_emit_outbox_records_with_occurrence_ids() {
    use ccron::outbox::OutboxRecord;
    use ccron::{CronEntry, CronTable, EverySeq, Periodic};

    struct State {
        outbox: Outbox,
    }
    let run = || {
        let mut table = CronTable::<State>::with_persistence(9, PageRange::new(0, 2).unwrap(), 4);
        let emit = |ctx: &mut ccron::ActionCtx<'_, State>| {
            let id = ctx.occurrence_id();
            ctx.state
                .outbox
                .append(OutboxRecord::new(id, "effect", vec![]))
                .unwrap();
        };
        table
            .add(CronEntry::periodic(
                0,
                Periodic::every_ms(1_000).unwrap(),
                emit,
            ))
            .unwrap();
        table
            .add(CronEntry::scheduled(
                1,
                EverySeq::new(std::num::NonZeroU64::new(2).unwrap()),
                emit,
            ))
            .unwrap();
        table
            .add(CronEntry::new(
                2,
                |ctx| ctx.tick.bft_sequence_num % 3 == 0,
                emit,
            ))
            .unwrap();
        let mut pages = MemPages::new(1024, 2);
        let mut state = State {
            outbox: Outbox::new(OutboxLimits::default()),
        };
        for seq in 1..=12u64 {
            let tick = Tick::new(9, seq, Some(-2_000 + seq as i64 * 700));
            table.evaluate(&tick, &mut state, &mut pages).unwrap();
        }
        state.outbox.iter().map(|(_, r)| r.id).collect::<Vec<_>>()
    };
    let ids = run();
    assert!(ids.len() > 12, "{ids:?}");
    let distinct: std::collections::BTreeSet<_> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "two runs shared an id: {ids:?}");
    assert!(ids.iter().all(|id| id.component == 9 && id.entry <= 2));
    assert_eq!(run(), ids, "a replay derives the same ids");
}

/// A catch-up run (fire-each) that cancels its own schedule ends the catch-up.
#[test]
fn a_run_cancelling_its_own_schedule_stops_the_catch_up() {
    let mut h: Handlers<Ledger> = Handlers::new();
    h.register("once-then-stop", |ctx| {
        ctx.state.log.push(("stop".into(), ctx.id, ctx.due));
        ctx.request(ScheduleRequest::Cancel(Target::Id(ctx.id)));
    });
    let mut book = Scheduler::new(1, Limits::default());
    let every = NewSchedule::new(
        "once-then-stop",
        Timing::Every {
            period_ms: 10,
            start_ms: Some(0),
        },
    )
    .with_misfire(Misfire::FireEach { cap: 5 });
    book.apply(
        &Principal::Host,
        ScheduleRequest::Create(every),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    let mut ledger = Ledger::default();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let rep = book.on_tick(
        &Tick::new(1, 2, Some(100)),
        &mut ledger,
        &mut h,
        &mut outbox,
    );
    assert_eq!(rep.fired.len(), 1, "{rep:?}");
    assert!(book.is_empty());
    book.check_invariants().unwrap();
}

/// The fire budget counts handler runs: a fire-each catch-up of 10 runs under a budget of 3
/// runs 3 per tick, in ascending order with consecutive occurrence numbers, and a partially
/// caught-up schedule resumes where it stopped, ahead of later due points.
#[test]
fn budget_counts_runs_and_a_partial_catch_up_resumes() {
    let mut r = Rig::new(Limits {
        budget_per_tick: 3,
        ..Limits::default()
    });
    let every = |start_ms| {
        NewSchedule::new(
            "report",
            Timing::Every {
                period_ms: MIN,
                start_ms: Some(start_ms),
            },
        )
        .with_misfire(Misfire::FireEach { cap: 10 })
    };
    let a = r
        .apply(ScheduleRequest::Create(every(0)), 0)
        .unwrap()
        .unwrap();
    // A one-shot due later than every missed occurrence of `a`.
    let b = r
        .apply(
            ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(Due::Time(11 * MIN)))),
            0,
        )
        .unwrap()
        .unwrap();
    // At 11.5 min, `a` reached 0..=11 (12 occurrences): the latest 10 are 2..=11 min.
    let late = 11 * MIN + MIN / 2;
    let mut seen = Vec::new();
    let mut reports = Vec::new();
    for _ in 0..5 {
        r.seq += 1;
        let rep = r.book.on_tick(
            &Tick::new(7, r.seq, Some(late)),
            &mut r.ledger,
            &mut r.handlers,
            &mut r.outbox,
        );
        r.book.check_invariants().unwrap();
        assert!(rep.fired.len() <= 3, "{rep:?}");
        seen.extend(rep.fired.iter().map(|f| (f.id, f.due, f.occurrence)));
        reports.push((rep.fired.len(), rep.carried_over));
    }
    // 10 runs of `a` then `b`: 3 + 3 + 3 + (1 of a, b) = 11 runs over 4 ticks.
    assert_eq!(
        reports,
        vec![(3, true), (3, true), (3, true), (2, false), (0, false)]
    );
    let expected: Vec<_> = (2..=11)
        .map(|m| (a, Due::Time(m * MIN), (m - 2) as u64))
        .chain([(b, Due::Time(11 * MIN), 0)])
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(r.book.get(a).unwrap().next, Some(Due::Time(12 * MIN)));

    // Cut short again, then resumed by a tick two periods later: the owed runs come first,
    // then the same tick plans the new window (what an unbudgeted tick at 11.5 min and one at
    // 14.5 min would have run together).
    let mut r2 = Rig::new(Limits {
        budget_per_tick: 4,
        ..Limits::default()
    });
    let a = r2
        .apply(ScheduleRequest::Create(every(0)), 0)
        .unwrap()
        .unwrap();
    assert_eq!(r2.tick(late).len(), 4); // 2..=5 min; 6..=11 owed
    assert_eq!(
        r2.book.get(a).unwrap().owed,
        Some((6 * MIN, 11 * MIN)),
        "visible in the view"
    );
    assert_eq!(r2.tick(late).len(), 4); // 6..=9 min
    let runs = r2.tick(14 * MIN + MIN / 2);
    assert_eq!(
        runs,
        vec![
            at(a, 10 * MIN),
            at(a, 11 * MIN),
            at(a, 12 * MIN),
            at(a, 13 * MIN)
        ]
    );
    assert_eq!(r2.tick(14 * MIN + MIN / 2), vec![at(a, 14 * MIN)]);
    assert_eq!(r2.book.get(a).unwrap().runs, 13);

    // Owed runs survive a restart from the pages.
    let mut r3 = Rig::new(Limits {
        budget_per_tick: 4,
        ..Limits::default()
    });
    r3.apply(ScheduleRequest::Create(every(0)), 0).unwrap();
    assert_eq!(r3.tick(late).len(), 4);
    let mut pages = MemPages::new(4096, 200);
    r3.book.save(&mut pages, range()).unwrap();
    let loaded = Scheduler::load(7, r3.book_limits(), &pages, range()).unwrap();
    assert_eq!(loaded, r3.book);
    r3.book = loaded;
    assert_eq!(r3.tick(late).len(), 4);
    assert_eq!(r3.tick(late).len(), 2);
    assert!(r3.tick(late).is_empty());
}

impl Rig {
    fn book_limits(&self) -> Limits {
        Limits {
            budget_per_tick: 4,
            ..Limits::default()
        }
    }
}

/// Installing new rules for a zone re-evaluates the cron schedules admitted in it (running
/// or paused), not those of other zones; the zone index survives a reload.
#[test]
fn install_zone_re_evaluates_admitted_schedules() {
    let mut r = Rig::new(Limits::default());
    let t0 = parse_rfc3339_ms("2026-05-01T00:00:00Z").unwrap();
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::fixed("Shop", 3_600).unwrap()),
        t0,
    )
    .unwrap();
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::fixed("Other", 3_600).unwrap()),
        t0,
    )
    .unwrap();
    let cron = |zone: &str| {
        ScheduleRequest::Create(NewSchedule::new(
            "report",
            Timing::Cron {
                expression: "0 9 * * *".into(),
                zone: Some(zone.into()),
            },
        ))
    };
    let shop = r.apply(cron("Shop"), t0).unwrap().unwrap();
    let paused = r.apply(cron("Shop"), t0).unwrap().unwrap();
    let other = r.apply(cron("Other"), t0).unwrap().unwrap();
    r.apply(ScheduleRequest::Pause(Target::Id(paused)), t0)
        .unwrap();
    let nine_at_plus1 = parse_rfc3339_ms("2026-05-01T08:00:00Z").unwrap();
    let nine_at_plus3 = parse_rfc3339_ms("2026-05-01T06:00:00Z").unwrap();
    assert_eq!(
        r.book.get(shop).unwrap().next,
        Some(Due::Time(nine_at_plus1))
    );
    // The shop's zone moves to UTC+3 at 01:00Z.
    let change = parse_rfc3339_ms("2026-05-01T01:00:00Z").unwrap();
    assert_eq!(r.tick(change), vec![]);
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::fixed("Shop", 3 * 3_600).unwrap()),
        change,
    )
    .unwrap();
    for id in [shop, paused] {
        assert_eq!(r.book.get(id).unwrap().next, Some(Due::Time(nine_at_plus3)));
    }
    assert_eq!(
        r.book.get(other).unwrap().next,
        Some(Due::Time(nine_at_plus1))
    );
    assert_eq!(r.tick(nine_at_plus3), vec![at(shop, nine_at_plus3)]);
    assert_eq!(r.tick(nine_at_plus1), vec![at(other, nine_at_plus1)]);
    // The next day, the shop's job keeps the new rules.
    let next_day = nine_at_plus3 + 86_400_000;
    assert_eq!(r.book.get(shop).unwrap().next, Some(Due::Time(next_day)));
    // After a reload the zone index is rebuilt: a further change still reaches the schedule.
    let mut pages = MemPages::new(4096, 200);
    r.book.save_all(&mut pages, range()).unwrap();
    r.book = Scheduler::load(7, Limits::default(), &pages, range()).unwrap();
    r.book.check_invariants().unwrap();
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::fixed("Shop", 0).unwrap()),
        nine_at_plus1 + 1,
    )
    .unwrap();
    let nine_utc = parse_rfc3339_ms("2026-05-01T09:00:00Z").unwrap();
    assert_eq!(r.book.get(shop).unwrap().next, Some(Due::Time(nine_utc)));
    // A cancelled schedule leaves the zone index (check_invariants in `apply` compares it).
    r.apply(ScheduleRequest::Cancel(Target::Id(shop)), nine_utc)
        .unwrap();
}

/// An overdue schedule (reached, carried over by the budget) keeps its run when its zone's
/// rules change before it runs.
#[test]
fn install_zone_keeps_an_overdue_run() {
    let mut r = Rig::new(Limits {
        budget_per_tick: 1,
        ..Limits::default()
    });
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::fixed("Z", 0).unwrap()),
        0,
    )
    .unwrap();
    let mk = |p: u8| {
        ScheduleRequest::Create(
            NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: "0 * * * *".into(),
                    zone: Some("Z".into()),
                },
            )
            .with_priority(p),
        )
    };
    let high = r.apply(mk(1), 0).unwrap().unwrap();
    let low = r.apply(mk(0), 0).unwrap().unwrap();
    let hour = 3_600_000;
    assert_eq!(r.tick(hour + 5), vec![at(high, hour)]);
    // `low` is overdue at 1 h; a zone change with the same hourly instants keeps it due.
    r.apply(
        ScheduleRequest::InstallZone(ZoneRules::fixed("Z", 1_800).unwrap()),
        hour + 10,
    )
    .unwrap();
    // Under UTC+0:30 the hourly instants are at xx:30Z: the first at or after 1 h is 1.5 h.
    assert_eq!(
        r.book.get(low).unwrap().next,
        Some(Due::Time(hour + hour / 2))
    );
    assert_eq!(
        r.book.get(high).unwrap().next,
        Some(Due::Time(hour + hour / 2))
    );
}

#[derive(Debug, Clone)]
enum Sched {
    Every(i64, u8, u32),
    Cron(&'static str, u8),
    Once(i64, u8),
}

fn sched() -> impl Strategy<Value = Sched> {
    prop_oneof![
        3 => (1..20i64, 0..4u8, 0..3u32).prop_map(|(p, m, j)| Sched::Every(p * 20_000, m, j * 7_000)),
        2 => (prop::sample::select(vec!["* * * * *", "*/7 * * * *", "0,5,6 * * * *"]), 0..4u8)
            .prop_map(|(e, m)| Sched::Cron(e, m)),
        1 => (0..3_000_000i64, 0..4u8).prop_map(|(t, p)| Sched::Once(t, p)),
    ]
}

/// Runs `schedules` over ticks at the cumulative `steps` (ms) with `budget`; each instant is
/// repeated (same sequence number: a backlog drained by further ticks of one batch) until
/// nothing is carried over. Returns every run as (id, due, occurrence), and the most runs of
/// one tick.
fn run_budgeted(
    schedules: &[Sched],
    steps: &[i64],
    budget: usize,
) -> (Vec<(u64, Due, u64)>, usize) {
    let mut r = Rig::new(Limits {
        budget_per_tick: budget,
        ..Limits::default()
    });
    for (i, s) in schedules.iter().enumerate() {
        let misfire = |m: u8| match m {
            0 => Misfire::FireOnce,
            1 => Misfire::Skip,
            2 => Misfire::FireEach {
                cap: 1 + (i as u32 % 6),
            },
            _ => Misfire::ExpireAfter {
                deadline_ms: 90_000,
            },
        };
        let def = match *s {
            Sched::Every(p, m, j) => NewSchedule::new(
                "report",
                Timing::Every {
                    period_ms: p,
                    start_ms: Some(0),
                },
            )
            .with_misfire(misfire(m))
            .with_jitter_ms(j)
            .with_priority((i % 3) as u8),
            Sched::Cron(e, m) => NewSchedule::new(
                "report",
                Timing::Cron {
                    expression: e.into(),
                    zone: None,
                },
            )
            .with_misfire(misfire(m))
            .with_priority((i % 2) as u8),
            Sched::Once(t, p) => {
                NewSchedule::new("expire", Timing::At(Due::Time(t))).with_priority(p)
            }
        };
        r.apply(ScheduleRequest::Create(def), 0).unwrap();
    }
    let mut now = 0;
    let mut runs = Vec::new();
    let mut most = 0;
    for step in steps {
        now += step;
        r.seq += 1;
        let tick = Tick::new(7, r.seq, Some(now));
        for _ in 0..10_000 {
            let rep = r
                .book
                .on_tick(&tick, &mut r.ledger, &mut r.handlers, &mut r.outbox);
            r.book.check_invariants().unwrap();
            most = most.max(rep.fired.len());
            runs.extend(rep.fired.iter().map(|f| (f.id, f.due, f.occurrence)));
            if !rep.carried_over {
                break;
            }
        }
    }
    (runs, most)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// With any budget >= 1, the runs over enough ticks are exactly the unbudgeted runs (same
    /// multiset of (schedule, due, occurrence), none lost or duplicated), each schedule's runs
    /// stay in ascending order, and no tick exceeds the budget.
    #[test]
    fn budget_loses_and_duplicates_nothing(
        schedules in prop::collection::vec(sched(), 1..12),
        steps in prop::collection::vec(prop_oneof![1 => Just(0i64), 3 => 1..600_000i64, 1 => 600_000..3_600_000i64], 1..25),
        budget in 1..6usize,
    ) {
        let (free, _) = run_budgeted(&schedules, &steps, usize::MAX);
        let (capped, most) = run_budgeted(&schedules, &steps, budget);
        prop_assert!(most <= budget, "a tick ran {} > {}", most, budget);
        for id in 1..=schedules.len() as u64 {
            let per: Vec<_> = capped.iter().filter(|r| r.0 == id).map(|r| (r.1, r.2)).collect();
            prop_assert!(per.windows(2).all(|w| w[0] < w[1]), "schedule {} out of order: {:?}", id, per);
        }
        let mut free_sorted = free.clone();
        free_sorted.sort();
        let mut capped_sorted = capped.clone();
        capped_sorted.sort();
        prop_assert_eq!(capped_sorted, free_sorted);
    }
}

/// With jitter, an occurrence counts as reached at its jittered instant: a tick between an
/// occurrence's nominal and jittered instants neither runs it early nor drops it.
#[test]
fn jitter_delays_reaching_without_dropping() {
    let mut r = Rig::new(Limits::default());
    // Find a schedule id whose jitter offset is large (ids are dense: try a few).
    let mut chosen = None;
    for _ in 0..20 {
        let id = r
            .apply(
                ScheduleRequest::Create(
                    NewSchedule::new(
                        "report",
                        Timing::Every {
                            period_ms: 10_000,
                            start_ms: Some(10_000),
                        },
                    )
                    .with_jitter_ms(5_000),
                ),
                0,
            )
            .unwrap()
            .unwrap();
        let offset = match r.book.preview(id, 1)[0] {
            Due::Time(t) => t,
            Due::Seq(_) => unreachable!(),
        };
        assert_eq!(offset, 10_000, "previews are nominal");
        chosen.get_or_insert(id);
    }
    // Learn each schedule's offset from the tick that first runs it, 1 ms at a time, then
    // check a tick between a later nominal and jittered instant.
    let mut offsets = std::collections::BTreeMap::new();
    let mut t = 10_000;
    while offsets.len() < 20 {
        for (id, due) in r.tick(t) {
            assert_eq!(due, Due::Time(10_000));
            offsets.entry(id).or_insert(t - 10_000);
        }
        t += 1;
        assert!(t <= 15_001, "every offset is within the jitter");
    }
    let (&id, &offset) = offsets.iter().max_by_key(|(_, o)| **o).unwrap();
    assert!(offset > 1_000, "{offsets:?}");
    // Nominal 20 s and 30 s have passed at 30 s + offset/2, but 30 s's jittered instant has
    // not: the tick runs 20 s (fire once: the latest *reached*), and 30 s stays next.
    let runs: Vec<_> = r
        .tick(30_000 + offset / 2)
        .into_iter()
        .filter(|(i, _)| *i == id)
        .collect();
    assert_eq!(runs, vec![at(id, 20_000)]);
    assert_eq!(r.book.get(id).unwrap().next, Some(Due::Time(30_000)));
    let runs: Vec<_> = r
        .tick(30_000 + offset)
        .into_iter()
        .filter(|(i, _)| *i == id)
        .collect();
    assert_eq!(runs, vec![at(id, 30_000)]);
}
