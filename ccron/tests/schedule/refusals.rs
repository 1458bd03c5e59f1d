//! The book's admission refusals are replicated state (book layout 13, `RefusalCounters` in
//! the commit page): replicas fed the same requests count the same refusals, a restart (a
//! reload from the pages) keeps them, and a save after a request whose only effect was a
//! refusal writes them. Before layout 13 they were counted per process since the book was
//! loaded, so a restarted replica reported fewer than the others.

use ccron::cron::{Exclusion, ExclusionCalendar};
use ccron::schedule::{
    Handlers, Limits, NewSchedule, RefusalCounters, ScheduleError, ScheduleRequest, Scheduler,
    SlotCapacity, Target, Timing,
};
use ccron::{Due, MemPages, PageRange, Principal, ReservedPages};

fn handlers() -> Handlers<u64> {
    let mut h = Handlers::new();
    h.register("h", |ctx| *ctx.state += 1);
    h
}

fn limits() -> Limits {
    Limits {
        slot_capacity: Some(SlotCapacity {
            slot_ms: 60_000,
            max_due: 2,
        }),
        ..Limits::default()
    }
}

fn range() -> PageRange {
    PageRange::new(0, 64).unwrap()
}

fn load(pages: &MemPages) -> Scheduler {
    Scheduler::load(1, limits(), pages, range()).unwrap()
}

/// The requests both replicas execute, in order: creates (the third in slot 1 refused
/// `SlotFull`), a calendar installed, a calendar that is not installed named (refused), a
/// backfill of an unknown key, one of a one-shot and one of a future window (refused), and
/// valid requests between
/// them. The expected outcome of each: `true` when admitted.
fn requests() -> Vec<(ScheduleRequest, bool)> {
    let at = |t: i64| ScheduleRequest::Create(NewSchedule::new("h", Timing::At(Due::Time(t))));
    let cron = ScheduleRequest::Create(
        NewSchedule::new(
            "h",
            Timing::Cron {
                expression: "*/5 * * * *".into(),
                zone: None,
            },
        )
        .with_key("cron"),
    );
    let cal = ExclusionCalendar::new("sundays", vec![Exclusion::Weekdays { mask: 0x01 }]).unwrap();
    let backfill = |target: Target| ScheduleRequest::Backfill {
        target,
        from_ms: 0,
        to_ms: 600_000,
    };
    vec![
        (at(60_001), true),
        (at(60_002), true),
        (at(60_003), false),
        (cron, true),
        (ScheduleRequest::InstallCalendar(cal), true),
        (
            ScheduleRequest::SetCalendar {
                target: Target::Key("cron".into()),
                calendar: Some("holidays".into()),
            },
            false,
        ),
        (backfill(Target::Key("no-such-key".into())), false),
        (backfill(Target::Id(1)), false),
        (at(200_000), true),
        (at(60_004), false),
        // Refused too: at agreed time 0 the window is not a past one.
        (backfill(Target::Key("cron".into())), false),
    ]
}

const EXPECTED: RefusalCounters = RefusalCounters {
    slot_full: 2,
    calendar: 1,
    backfill: 3,
};

/// Two replicas execute the same requests and save after each; one restarts (reloads from its
/// pages) after every request. Both report the same refusals at every step, the restarted one
/// too, and their pages are byte-identical.
#[test]
fn replicas_count_the_same_refusals_and_a_restart_keeps_them() {
    let h = handlers();
    let (mut pa, mut pb) = (MemPages::new(4_096, 64), MemPages::new(4_096, 64));
    let mut a = Scheduler::new_in(1, limits(), range());
    let mut b = Scheduler::new_in(1, limits(), range());
    for (k, (req, admitted)) in requests().into_iter().enumerate() {
        let seq = 10 + k as u64;
        let ra = a.apply(&Principal::Host, req.clone(), &h, seq, Some(0));
        let rb = b.apply(&Principal::Host, req, &h, seq, Some(0));
        assert_eq!(ra, rb, "request {k}");
        assert_eq!(ra.is_ok(), admitted, "request {k}: {ra:?}");
        // A refusal alone is a change the next save writes.
        assert!(a.is_dirty(), "request {k}");
        a.save(&mut pa, range()).unwrap();
        b.save(&mut pb, range()).unwrap();
        a = load(&pa);
        assert_eq!(a.refusals(), b.refusals(), "request {k}: after a restart");
        assert!(a == b, "request {k}");
        assert!(pa.snapshot() == pb.snapshot(), "request {k}: pages differ");
    }
    assert_eq!(a.refusals(), EXPECTED);
    assert_eq!(
        (
            a.slot_refusals(),
            a.calendar_refusals(),
            a.backfill_refusals()
        ),
        (2, 1, 3)
    );
    // The query API reports them (format 6).
    let state = ccron::schedule::query::book_state(&a);
    assert_eq!(state.refusals, Some(EXPECTED));
}

/// A refused request that changes nothing else still reaches the pages: saved, reloaded, the
/// count is there; a book whose save was skipped would reload without it.
#[test]
fn a_refusal_alone_is_saved() {
    let h = handlers();
    let mut pages = MemPages::new(4_096, 64);
    let mut book = Scheduler::new_in(1, limits(), range());
    book.save(&mut pages, range()).unwrap();
    assert!(!book.is_dirty());
    let req = ScheduleRequest::Backfill {
        target: Target::Id(9),
        from_ms: 0,
        to_ms: 1,
    };
    let e = book.apply(&Principal::Host, req, &h, 1, Some(0));
    assert!(matches!(e, Err(ScheduleError::UnknownSchedule(_))), "{e:?}");
    assert!(book.is_dirty());
    book.save(&mut pages, range()).unwrap();
    assert!(!book.is_dirty());
    let again = load(&pages);
    assert_eq!(again.refusals().backfill, 1);
    assert!(again == book);
}

/// A flipped byte of the commit page that carries the counters is refused loudly (a typed
/// codec error), never read as other counters.
#[test]
fn a_flipped_commit_page_byte_is_refused() {
    let h = handlers();
    let mut pages = MemPages::new(4_096, 64);
    let mut book = Scheduler::new_in(1, limits(), range());
    for (k, (req, _)) in requests().into_iter().enumerate() {
        let _ = book.apply(&Principal::Host, req, &h, k as u64, Some(0));
    }
    book.save(&mut pages, range()).unwrap();
    let commit = pages.load(0).unwrap().unwrap().to_vec();
    for at in [commit.len() - 1, commit.len() - 9, commit.len() / 2] {
        let mut bad = pages.clone();
        let mut bytes = commit.clone();
        bytes[at] ^= 0x01;
        bad.save(0, &bytes).unwrap();
        let loaded = Scheduler::load(1, limits(), &bad, range());
        assert!(
            matches!(loaded, Err(ScheduleError::Codec(_))),
            "byte {at}: {:?}",
            loaded.map(|b| b.refusals())
        );
    }
}

/// A request a handler run issues (`HandlerCtx::request`) and admission refuses `SlotFull` is
/// counted in the same replicated counter as one `Scheduler::apply` refuses (before, only
/// `apply` counted it): two replicas count it alike, the save after the tick writes it, a
/// reload keeps it. A handler request that is admitted counts nothing.
#[test]
fn a_handler_run_s_slot_full_request_is_counted() {
    use ccron::Tick;
    use ccron::outbox::{Outbox, OutboxLimits};

    fn spawner() -> Handlers<u64> {
        let mut h = handlers();
        h.register("spawn", |ctx| {
            *ctx.state += 1;
            // Slot 1 ([60 s, 120 s)) is full; slot 3 is not.
            for t in [60_003, 200_000] {
                ctx.request(ScheduleRequest::Create(NewSchedule::new(
                    "h",
                    Timing::At(Due::Time(t)),
                )));
            }
        });
        h
    }
    let mut h = spawner();
    let create = |t: i64, handler: &str| {
        ScheduleRequest::Create(NewSchedule::new(handler, Timing::At(Due::Time(t))))
    };
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut pages = MemPages::new(4_096, 64);
        let mut book = Scheduler::new_in(1, limits(), range());
        for (k, req) in [
            create(60_001, "h"),
            create(60_002, "h"),
            create(10, "spawn"),
        ]
        .into_iter()
        .enumerate()
        {
            book.apply(&Principal::Host, req, &h, k as u64 + 1, Some(0))
                .unwrap();
        }
        book.save(&mut pages, range()).unwrap();
        assert_eq!(book.refusals(), RefusalCounters::default());
        let mut state = 0u64;
        let mut outbox = Outbox::new(OutboxLimits::default());
        let report = book.on_tick(&Tick::new(1, 10, Some(10)), &mut state, &mut h, &mut outbox);
        assert_eq!(state, 1, "the spawner ran");
        assert!(
            matches!(report.errors.as_slice(), [ScheduleError::SlotFull { .. }]),
            "{:?}",
            report.errors
        );
        assert_eq!(book.len(), 3, "the admitted request created its schedule");
        assert_eq!(
            book.refusals(),
            RefusalCounters {
                slot_full: 1,
                ..RefusalCounters::default()
            }
        );
        assert_eq!(book.slot_refusals(), 1);
        book.save(&mut pages, range()).unwrap();
        let again = load(&pages);
        assert_eq!(again.refusals().slot_full, 1, "a restart keeps it");
        assert!(again == book);
        replicas.push((book, pages));
    }
    assert!(replicas[0].0 == replicas[1].0);
    assert!(replicas[0].1.snapshot() == replicas[1].1.snapshot());
}
