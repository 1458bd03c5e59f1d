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
