//! Safety is never opt-in (issue 25, item 7): "admitted ⇒ saved" holds whatever `Limits` the
//! caller built, because every bound it needs is derived from the pages the book saves into.
//!
//! Regression: a `Limits` built by hand with only `max_record_pages` set admitted zone installs
//! (America/New_York, then Australia/Lord_Howe) that the book then could not save.

use ccron::cron::ZoneRules;
use ccron::host::{BookConfig, LedgerScheduler};
use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleRequest, Scheduler, Timing, record_pages_of,
};
use ccron::{MemPages, PageRange, Principal};

const ZONES: [&str; 2] = ["America/New_York", "Australia/Lord_Howe"];

/// A range whose zones part is one page: both zones do not fit it together.
fn small_range() -> PageRange {
    PageRange::new(0, 8).unwrap()
}

fn by_hand(range: PageRange) -> Limits {
    Limits {
        max_record_pages: Some(record_pages_of(range)),
        ..Limits::default()
    }
}

/// Installs every zone it can into `book`; then saving must succeed.
fn install_all_then_save(mut book: Scheduler, range: PageRange) -> usize {
    let handlers = Handlers::<()>::new();
    let mut admitted = 0;
    for zone in ZONES {
        let rules = ZoneRules::from_iana(zone).unwrap();
        if book
            .apply(
                &Principal::Host,
                ScheduleRequest::InstallZone(rules),
                &handlers,
                1,
                Some(0),
            )
            .is_ok()
        {
            admitted += 1;
        }
    }
    let mut pages = MemPages::new(4_096, range.end());
    book.save(&mut pages, range)
        .expect("an admitted zone install must be saved");
    admitted
}

#[test]
fn the_two_zones_do_not_fit_the_small_range() {
    // The premise: without any bound, the book admits both and cannot save them.
    let range = small_range();
    let mut book = Scheduler::new(1, Limits::default());
    let handlers = Handlers::<()>::new();
    for zone in ZONES {
        book.apply(
            &Principal::Host,
            ScheduleRequest::InstallZone(ZoneRules::from_iana(zone).unwrap()),
            &handlers,
            1,
            Some(0),
        )
        .unwrap();
    }
    let mut pages = MemPages::new(4_096, range.end());
    assert!(book.save(&mut pages, range).is_err());
}

#[test]
fn hand_built_limits_bound_to_the_range_never_admit_an_unsaveable_zone() {
    let range = small_range();
    let admitted = install_all_then_save(Scheduler::new_in(1, by_hand(range), range), range);
    assert_eq!(admitted, 1, "the second zone is refused at admission");
}

#[test]
fn a_load_binds_the_limits_to_its_range() {
    let range = small_range();
    let pages = MemPages::new(4_096, range.end());
    let book = Scheduler::load(1, by_hand(range), &pages, range).unwrap();
    assert_eq!(install_all_then_save(book, range), 1);
}

#[test]
fn a_save_binds_the_limits_for_later_admissions() {
    let range = small_range();
    let mut book = Scheduler::new(1, by_hand(range));
    let mut pages = MemPages::new(4_096, range.end());
    book.save(&mut pages, range).unwrap();
    assert_eq!(install_all_then_save(book, range), 1);
}

#[test]
fn a_caller_bound_larger_than_the_pages_never_wins_in_a_ledger_book() {
    // `max_record_pages` far above what 8 book pages hold: records are admitted only while
    // they fit, and every admitted one is saved.
    let cfg = BookConfig {
        component: 1,
        position: 0,
        limits: Limits {
            max_record_pages: Some(10_000),
            max_zones_bytes: Some(1 << 20),
            max_log_pages: Some(10_000),
            ..Limits::default()
        },
        book_pages: 8,
        outbox_pages: 1,
    };
    let mut handlers = Handlers::<()>::new();
    handlers.register("h", |_| {});
    let range = PageRange::new(0, 8).unwrap();
    let mut book = Scheduler::new_in(1, cfg.limits, range);
    let mut refused = 0;
    for i in 0..64u64 {
        let req = NewSchedule::new("h", Timing::AfterMs(1_000))
            .with_key(format!("k{i}"))
            .with_payload(vec![1; 3_000]);
        if book
            .apply(
                &Principal::Host,
                ScheduleRequest::Create(req),
                &handlers,
                1,
                Some(0),
            )
            .is_err()
        {
            refused += 1;
        }
    }
    assert!(refused > 0, "8 pages cannot hold 64 records of 3 KB");
    let mut pages = MemPages::new(4_096, 8);
    book.save(&mut pages, range).unwrap();
    // The ledger's book derives the same bounds from its configuration.
    assert!(LedgerScheduler::<()>::try_new(cfg, handlers).is_ok());
}
