//! Issue 10, defect 1: every request the book admits saves. With limits fitted to the book's
//! range (`Limits::for_range`), a zone install whose zones would not fit the zones part is
//! rejected at admission (typed, nothing changes) instead of failing every later save, and the
//! book then saves, reloads equal, and a replica restored from its pages stays identical.

use ccron::cron::ZoneRules;
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, Timing,
};
use ccron::{MemPages, PageRange, Tick};

fn handlers() -> Handlers<u64> {
    let mut h: Handlers<u64> = Handlers::new();
    assert!(h.register("run", |ctx| *ctx.state += 1));
    h
}

/// The orders ledger's book: 40 pages of 4 KiB, whose zones part is one page. Berlin (3,225
/// encoded bytes) fits; Berlin and New York together (7.5 KiB) do not. The old book admitted
/// both, and every later save failed while the in-memory book moved on.
#[test]
fn a_zone_install_that_would_not_fit_the_zones_part_is_rejected_and_saves_go_on() {
    let range = PageRange::new(0, 40).unwrap();
    let limits = Limits::default().for_range(range);
    let h = handlers();
    let mut pages = MemPages::new(4_096, 40);
    let mut book = Scheduler::new(1, limits);
    let berlin = ZoneRules::from_iana("Europe/Berlin").unwrap();
    let new_york = ZoneRules::from_iana("America/New_York").unwrap();
    book.apply(ScheduleRequest::InstallZone(berlin), &h, 1, Some(0))
        .unwrap();
    book.save(&mut pages, range).unwrap();
    let before = book.clone();
    let r = book.apply(ScheduleRequest::InstallZone(new_york), &h, 2, Some(0));
    assert!(matches!(r, Err(ScheduleError::Limit(_))), "{r:?}");
    assert_eq!(book, before, "a rejection changes nothing");
    // The book goes on saving: a cron schedule in the installed zone and a delayed one.
    for (i, timing) in [
        Timing::Cron {
            expression: "0 9 * * *".into(),
            zone: Some("Europe/Berlin".into()),
        },
        Timing::AfterMs(60_000),
    ]
    .into_iter()
    .enumerate()
    {
        book.apply(
            ScheduleRequest::Create(NewSchedule::new("run", timing)),
            &h,
            3 + i as u64,
            Some(0),
        )
        .unwrap();
        book.save(&mut pages, range).unwrap();
    }
    let restored = Scheduler::load(1, limits, &pages, range).unwrap();
    assert_eq!(restored, book);
    assert_eq!(restored.len(), 2);
    // Without the fitted limits the install is admitted and the save fails: the defect.
    let mut unfitted = Scheduler::new(1, Limits::default());
    for z in ["Europe/Berlin", "America/New_York"] {
        unfitted
            .apply(
                ScheduleRequest::InstallZone(ZoneRules::from_iana(z).unwrap()),
                &h,
                1,
                Some(0),
            )
            .unwrap();
    }
    assert!(unfitted.save(&mut MemPages::new(4_096, 40), range).is_err());
}

/// Records are placed at their largest stored size (with a next point and owed catch-up
/// runs), so a book whose record pages admission filled still saves after every tick, when
/// records gain owed runs or next points.
#[test]
fn a_full_book_still_saves_when_its_records_grow_at_run_time() {
    let range = PageRange::new(0, 8).unwrap();
    let limits = Limits {
        budget_per_tick: 1,
        page_bytes: 512,
        ..Limits::default()
    }
    .for_range(range);
    let mut h = handlers();
    let mut pages = MemPages::new(512, 8);
    let mut book = Scheduler::new(1, limits);
    let mut n = 0;
    loop {
        let def = NewSchedule::new(
            "run",
            Timing::Every {
                period_ms: 1_000,
                start_ms: Some(1_000),
            },
        )
        .with_misfire(ccron::schedule::Misfire::FireEach { cap: 5 });
        match book.apply(ScheduleRequest::Create(def), &h, 1, Some(0)) {
            Ok(_) => n += 1,
            Err(ScheduleError::Limit(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(n > 2, "{n}");
    book.save(&mut pages, range).unwrap();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut state = 0;
    // Late ticks with a budget of one: every schedule gains owed runs.
    for seq in 0..(3 * n as u64) {
        let tick = Tick::new(1, 10 + seq, Some(10_000 + seq as i64));
        book.on_tick(&tick, &mut state, &mut h, &mut outbox);
        book.save(&mut pages, range).unwrap();
        assert_eq!(Scheduler::load(1, limits, &pages, range).unwrap(), book);
    }
    assert!(state > 0);
}
