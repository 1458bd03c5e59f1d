//! Persistence of `ccron::schedule::Scheduler` on the record log (layout version 6: commit page,
//! change log, record pages folded when the log is full): a save after one change writes 2
//! pages, a crash at any page write of a save (a fold included) reloads as the book before or
//! after it (never a mix, never corrupt), identical operations give identical page images on
//! every replica (restarted, state-transferred or not), and a flipped byte is a typed error.

use ccron::Principal;
use ccron::cron::ZoneRules;
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{Due, MemPages, PageRange, ReservedPages, Tick};
use proptest::prelude::*;

/// Pages that fail every write after the first `budget` ones.
type Crashing = ccron::pages::CrashAfter<MemPages>;

const PAGE: usize = 2_048;

fn limits() -> Limits {
    Limits {
        page_bytes: PAGE,
        budget_per_tick: 1_000,
        ..Limits::default()
    }
}

fn range() -> PageRange {
    PageRange::new(3, 200).unwrap()
}

/// The layout of `range()`: commit page 3, zones 4..10, log 10..113, record pages 113..203.
const LOG: std::ops::Range<u32> = 10..113;
const RECORDS_FIRST: u32 = 113;

fn store() -> MemPages {
    MemPages::new(PAGE, 210)
}

fn handlers() -> Handlers<u64> {
    let mut h = Handlers::new();
    h.register("run", |ctx| *ctx.state += 1);
    h
}

fn create(book: &mut Scheduler, h: &Handlers<u64>, due_ms: i64, payload: usize) -> u64 {
    let def = NewSchedule::new("run", Timing::At(Due::Time(due_ms))).with_payload(vec![1; payload]);
    book.apply(
        &Principal::Host,
        ScheduleRequest::Create(def),
        h,
        0,
        Some(0),
    )
    .unwrap()
    .unwrap()
}

fn tick(book: &mut Scheduler, h: &mut Handlers<u64>, seq: u64, now_ms: i64) -> usize {
    let mut state = 0u64;
    let mut outbox = Outbox::new(OutboxLimits::default());
    let t = Tick::new(7, seq, Some(now_ms));
    book.on_tick(&t, &mut state, h, &mut outbox).fired.len()
}

/// A book of `n` one-shots due at 1000 + (i mod 10) seconds, saved.
fn saved_book(n: usize) -> (Scheduler, MemPages) {
    let h = handlers();
    let mut book = Scheduler::new(7, limits());
    for i in 0..n {
        create(&mut book, &h, 1_000_000 + (i % 10) as i64 * 1_000, i % 40);
    }
    let mut pages = store();
    book.save(&mut pages, range()).unwrap();
    (book, pages)
}

/// One change costs the same 2 page writes (a log segment, the commit page) whatever the book's
/// size (layout 4 wrote 3: journal, meta, record page).
#[test]
fn a_save_writes_only_the_pages_of_changed_records() {
    // (250: what the 90 record pages of the range hold with room to spare since records
    // carry their version, topic and type, layout 4.)
    for n in [50, 250] {
        let (mut book, pages) = saved_book(n);
        let h = handlers();
        let mut counting = Crashing::new(pages, usize::MAX);
        book.apply(
            &Principal::Host,
            ScheduleRequest::Pause(Target::Id(5)),
            &h,
            0,
            Some(0),
        )
        .unwrap();
        book.save(&mut counting, range()).unwrap();
        counting.writes.clear();
        book.apply(
            &Principal::Host,
            ScheduleRequest::Resume(Target::Id(5)),
            &h,
            0,
            Some(0),
        )
        .unwrap();
        book.save(&mut counting, range()).unwrap();
        assert_eq!(
            counting.writes.len(),
            2,
            "n = {n}: a log segment, the commit page: {:?}",
            counting.writes
        );
        assert!(LOG.contains(&counting.writes[0]) && counting.writes[1] == range().first());
        counting.writes.clear();
        book.save(&mut counting, range()).unwrap();
        assert!(
            counting.writes.is_empty(),
            "nothing changed, nothing written"
        );
        let mut loaded = Scheduler::load(7, limits(), &counting.inner, range()).unwrap();
        assert_eq!(loaded, book);
        // Nothing is pending after a load: the next save writes nothing.
        assert!(!loaded.is_dirty());
        let before = counting.inner.snapshot();
        counting.writes.clear();
        loaded.save(&mut counting, range()).unwrap();
        assert!(counting.writes.is_empty());
        assert!(counting.inner.snapshot() == before);
    }
}

/// Changes between two saves: inserts (one with a payload that moves records around), a
/// cancel, a pause, a replace that grows a record past its page's room, a zone, and a tick
/// that fires and removes a tenth of the book.
fn changes(book: &mut Scheduler) {
    let mut h = handlers();
    create(book, &h, 5_000, 300);
    create(book, &h, 6_000, 0);
    book.apply(
        &Principal::Host,
        ScheduleRequest::Cancel(Target::Id(3)),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    book.apply(
        &Principal::Host,
        ScheduleRequest::Pause(Target::Id(4)),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    let grown = NewSchedule::new("run", Timing::At(Due::Time(7_000))).with_payload(vec![2; 350]);
    book.apply(
        &Principal::Host,
        ScheduleRequest::Replace {
            target: Target::Id(8),
            schedule: grown,
        },
        &h,
        0,
        Some(0),
    )
    .unwrap();
    book.apply(
        &Principal::Host,
        ScheduleRequest::InstallZone(ZoneRules::fixed("Z", 7_200).unwrap()),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    assert!(tick(book, &mut h, 9, 1_000_000) > 0);
}

/// A crash after any number of page writes of a save reloads as the book before or after the
/// save, and the replica then converges to the page images of one that never crashed.
#[test]
fn a_crash_at_every_page_write_of_a_save_reloads_old_or_new() {
    crash_at_every_write(false);
}

/// The same for a full save, whose log segments span several blobs.
#[test]
fn a_crash_at_every_page_write_of_a_full_save_reloads_old_or_new() {
    crash_at_every_write(true);
}

fn save(
    book: &mut Scheduler,
    pages: &mut dyn ReservedPages,
    full: bool,
) -> Result<(), ScheduleError> {
    if full {
        book.save_all(pages, range())
    } else {
        book.save(pages, range())
    }
}

fn crash_at_every_write(full_save: bool) {
    let (old_book, old_pages) = saved_book(if full_save { 200 } else { 120 });
    let full = crash_each_write(&old_book, &old_pages, changes, full_save);
    // Log pages that start a blob: one per segment (of the first save and this one).
    let parts = LOG
        .filter_map(|id| full.inner.load(id).unwrap())
        .filter(|page| page[8..12] == [0, 0, 0, 0])
        .count();
    assert!(parts >= 2 && (!full_save || parts > 2), "segments: {parts}");
}

/// A save that finds the log full folds it into the record pages first: a crash at every
/// page write of that save (the fold's record pages, zones and commit, then the append and
/// the commit) reloads as the book before or after it, and converges.
#[test]
fn a_crash_at_every_page_write_of_a_folding_save_reloads_old_or_new() {
    let (mut book, mut pages) = saved_book(120);
    // The zones part is written by folds only: install a zone so that the fold writes it.
    book.apply(
        &Principal::Host,
        ScheduleRequest::InstallZone(ZoneRules::fixed("Z", 3_600).unwrap()),
        &handlers(),
        0,
        Some(0),
    )
    .unwrap();
    book.save(&mut pages, range()).unwrap();
    // Saves that change every record fill the log until one folds.
    for round in 0..20 {
        let mut next = book.clone();
        flip_all(&mut next);
        let mut counting = Crashing::new(pages.clone(), usize::MAX);
        next.save(&mut counting, range()).unwrap();
        if counting.writes.iter().any(|id| *id >= RECORDS_FIRST) {
            assert!(round > 0, "the first saves fit the log");
            assert!(
                counting.writes.contains(&(range().first() + 1)),
                "the fold wrote the zones part: {:?}",
                counting.writes
            );
            crash_each_write(&book, &pages, flip_all, false);
            return;
        }
        book = next;
        pages = counting.inner;
    }
    panic!("no save folded");
}

/// A folding save that also adds a schedule: the fold's own commit (in the middle of the save)
/// must describe the previous book, not the new count. Before the fix it carried the new
/// record count and next id with the folded (old) pages, so a crash between it and the save's
/// last write reloaded as `Corrupt("N schedules stored, the commit page counts N+1")`.
#[test]
fn a_crash_after_the_fold_of_a_growing_save_reloads_the_old_book() {
    let (mut book, mut pages) = saved_book(120);
    for _ in 0..40 {
        let mut grown = book.clone();
        flip_all_and_grow(&mut grown);
        let mut counting = Crashing::new(pages.clone(), usize::MAX);
        grown.save(&mut counting, range()).unwrap();
        if counting.writes.iter().any(|id| *id >= RECORDS_FIRST) {
            crash_each_write(&book, &pages, flip_all_and_grow, false);
            return;
        }
        let mut next = book.clone();
        flip_all(&mut next);
        next.save(&mut pages, range()).unwrap();
        book = next;
    }
    panic!("no save folded");
}

/// [`flip_all`], then the oldest schedule cancelled and two created:
/// the record count grows by one.
fn flip_all_and_grow(book: &mut Scheduler) {
    flip_all(book);
    let h = handlers();
    let oldest = book.ids().next().unwrap();
    book.apply(
        &Principal::Host,
        ScheduleRequest::Cancel(Target::Id(oldest)),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    create(book, &h, 9_000_000, 8);
    create(book, &h, 9_000_001, 8);
}

/// Pauses every running schedule and resumes every paused one.
fn flip_all(book: &mut Scheduler) {
    let h = handlers();
    let ids: Vec<u64> = book.ids().collect();
    for id in ids {
        let req = if book.get(id).unwrap().paused {
            ScheduleRequest::Resume(Target::Id(id))
        } else {
            ScheduleRequest::Pause(Target::Id(id))
        };
        book.apply(&Principal::Host, req, &h, 0, Some(0)).unwrap();
    }
}

/// Saves `change(old_book)` over `old_pages` once in full, then crashed after every number of
/// page writes: each crash reloads as the old or the new book, and the replica (re-executing
/// `change` when it reloaded the old one) ends with the pages of one that never crashed.
/// Returns the pages of the uncrashed save.
fn crash_each_write(
    old_book: &Scheduler,
    old_pages: &MemPages,
    change: fn(&mut Scheduler),
    full_save: bool,
) -> Crashing {
    let mut new_book = old_book.clone();
    change(&mut new_book);
    let mut full = Crashing::new(old_pages.clone(), usize::MAX);
    save(&mut new_book.clone(), &mut full, full_save).unwrap();
    let writes = full.writes.len();
    assert!(
        writes >= 2,
        "a segment and the commit page: {:?}",
        full.writes
    );
    assert_eq!(
        full.writes.last(),
        Some(&range().first()),
        "the commit page is the save's last write"
    );
    let expected = full.inner.snapshot();
    // The uncrashed save loads as the new book.
    assert_eq!(
        Scheduler::load(7, limits(), &full.inner, range()).unwrap(),
        new_book
    );
    for k in 0..writes {
        let mut crashed = Crashing::new(old_pages.clone(), k);
        let mut book = new_book.clone();
        assert!(save(&mut book, &mut crashed, full_save).is_err(), "k = {k}");
        let mut pages = crashed.inner;
        let mut reloaded = match Scheduler::load(7, limits(), &pages, range()) {
            Ok(b) => b,
            Err(e) => panic!("k = {k}: reload failed: {e}"),
        };
        reloaded.check_invariants().unwrap();
        // Every write before the commit page's leaves the old book (a fold's own commit
        // included: it commits the same book with an empty log).
        assert_eq!(reloaded, *old_book, "k = {k}: not the old book");
        // The host re-executes what it had not persisted.
        change(&mut reloaded);
        save(&mut reloaded, &mut pages, full_save).unwrap();
        assert_eq!(reloaded, new_book, "k = {k}");
        assert_eq!(
            Scheduler::load(7, limits(), &pages, range()).unwrap(),
            new_book,
            "k = {k}"
        );
        let got = pages.snapshot();
        assert!(
            got == expected,
            "k = {k}: pages differ from a replica that never crashed"
        );
    }
    full
}

/// A flipped byte in the commit page, the committed log, the zones part or a record page is a
/// typed error at load; one in a log page past the committed log (left by an earlier save
/// before a fold) is never read.
#[test]
fn a_flipped_byte_is_a_typed_error_or_an_unread_page() {
    let (mut book, mut pages) = saved_book(60);
    changes(&mut book);
    book.save(&mut pages, range()).unwrap();
    // Fill the log until a save folds it (every part then holds data), then one more save.
    let mut folded = false;
    for _ in 0..20 {
        flip_all(&mut book);
        let mut counting = Crashing::new(pages, usize::MAX);
        book.save(&mut counting, range()).unwrap();
        pages = counting.inner;
        if counting.writes.iter().any(|id| *id >= RECORDS_FIRST) {
            folded = true;
            break;
        }
    }
    assert!(folded);
    flip_all(&mut book);
    let mut counting = Crashing::new(pages, usize::MAX);
    book.save(&mut counting, range()).unwrap();
    pages = counting.inner;
    // The committed log: the pages the saves since the fold appended (from the log's start).
    let last_segment_page = counting.writes[counting.writes.len() - 2];
    assert!(LOG.contains(&last_segment_page));
    let committed_end = last_segment_page + 1;
    let stale = committed_end..LOG.end;
    assert!(
        stale.clone().any(|id| pages.load(id).unwrap().is_some()),
        "log pages of before the fold remain"
    );
    let mut checked = 0;
    for (id, bytes) in pages.snapshot() {
        for at in [0, 17, 29, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = pages.clone();
            let mut b = bytes.clone();
            b[at] ^= 0x40;
            bad.save(id, &b).unwrap();
            let loaded = Scheduler::load(7, limits(), &bad, range());
            if stale.contains(&id) {
                assert_eq!(loaded.as_ref().ok(), Some(&book), "page {id} byte {at}");
            } else {
                assert!(
                    matches!(loaded, Err(ScheduleError::Codec(_))),
                    "page {id} byte {at}: {loaded:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 30);
}

/// Records larger than one page are refused at admission, sized from `Limits::page_bytes`.
#[test]
fn a_record_larger_than_a_page_is_refused_at_admission() {
    let h = handlers();
    let mut book = Scheduler::new(7, limits());
    let big = NewSchedule::new("run", Timing::At(Due::Seq(5))).with_payload(vec![0; PAGE - 60]);
    assert!(matches!(
        book.apply(
            &Principal::Host,
            ScheduleRequest::Create(big),
            &h,
            0,
            Some(0)
        ),
        Err(ScheduleError::Limit(_))
    ));
    assert!(book.is_empty());
    // (530: page and blob headers plus the record's other fields, its owner (a 256-bit client
    // id at its largest, book layout 10), version, topic
    // and type included, its run state at its largest (a retry pending, a dead run, two
    // history entries), its run counters, its pending manual runs, its bounds and retired
    // state, empty on a one-shot, and its overlap state's tag, `None` on a one-shot.)
    let fits = NewSchedule::new("run", Timing::At(Due::Seq(5))).with_payload(vec![0; PAGE - 530]);
    book.apply(
        &Principal::Host,
        ScheduleRequest::Create(fits),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    let mut pages = store();
    book.save(&mut pages, range()).unwrap();
    assert_eq!(Scheduler::load(7, limits(), &pages, range()).unwrap(), book);
    // Pages saved for another page size are refused.
    let other = Limits {
        page_bytes: 256,
        ..limits()
    };
    assert!(matches!(
        Scheduler::load(7, other, &pages, range()),
        Err(ScheduleError::Corrupt(_))
    ));
}

#[derive(Debug, Clone)]
enum Op {
    Create(i64, usize),
    Replace(u8, usize),
    Cancel(u8),
    Pause(u8),
    Resume(u8),
    Tick(i64),
    Save,
    /// Replica B saves, then restarts from its pages.
    Restart,
    /// Replica B saves, then takes replica A's pages by state transfer.
    Transfer,
    /// Replica B crashes after this many page writes of its save, restarts from its pages
    /// and re-executes what it had not persisted.
    Crash(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..20_000i64, 0..300usize).prop_map(|(d, p)| Op::Create(d, p)),
        2 => (0..40u8, 0..380usize).prop_map(|(i, p)| Op::Replace(i, p)),
        1 => (0..40u8).prop_map(Op::Cancel),
        1 => (0..40u8).prop_map(Op::Pause),
        1 => (0..40u8).prop_map(Op::Resume),
        2 => (0..3_000i64).prop_map(Op::Tick),
        2 => Just(Op::Save),
        1 => Just(Op::Restart),
        1 => Just(Op::Transfer),
        2 => (0..12usize).prop_map(Op::Crash),
    ]
}

fn step(book: &mut Scheduler, h: &mut Handlers<u64>, op: &Op, seq: u64, now_ms: i64) {
    let id = |i: u8| Target::Id(u64::from(i));
    let req = match op {
        Op::Create(d, p) => ScheduleRequest::Create(
            NewSchedule::new("run", Timing::AfterMs(*d)).with_payload(vec![3; *p]),
        ),
        Op::Replace(i, p) => ScheduleRequest::Replace {
            target: id(*i),
            schedule: NewSchedule::new(
                "run",
                Timing::Every {
                    period_ms: 700,
                    start_ms: None,
                },
            )
            .with_payload(vec![4; *p]),
        },
        Op::Cancel(i) => ScheduleRequest::Cancel(id(*i)),
        Op::Pause(i) => ScheduleRequest::Pause(id(*i)),
        Op::Resume(i) => ScheduleRequest::Resume(id(*i)),
        Op::Tick(_) => {
            tick(book, h, seq, now_ms);
            return;
        }
        _ => return,
    };
    let _ = book.apply(&Principal::Host, req, h, seq, Some(now_ms));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Two replicas fed the same operations and saving at the same points, one of them also
    /// restarting from its pages, taking the other's pages by state transfer, or crashing in
    /// the middle of a save (a fold included; then reloading and re-executing what it had not
    /// persisted) at random points, hold identical books and identical page images at every
    /// save.
    #[test]
    fn replicas_keep_identical_page_images(ops in prop::collection::vec(op(), 1..120)) {
        // A range small enough that saves fill the log and fold it, with admission fitted to
        // it (48 pages: commit, zones 1, log 25, record pages 21).
        let r = PageRange::new(3, 48).unwrap();
        let l = limits().for_range(r);
        let (mut ha, mut hb) = (handlers(), handlers());
        let mut a = Scheduler::new(7, l);
        let mut b = Scheduler::new(7, l);
        let (mut pa, mut pb) = (store(), store());
        // B's book at its last save, and what it executed since.
        let mut b_saved = b.clone();
        let mut since_save: Vec<(Op, u64, i64)> = Vec::new();
        let mut now = 0i64;
        for (seq, op) in ops.iter().enumerate() {
            let seq = seq as u64 + 1;
            if let Op::Tick(dt) = op {
                now += dt;
            }
            step(&mut a, &mut ha, op, seq, now);
            step(&mut b, &mut hb, op, seq, now);
            since_save.push((op.clone(), seq, now));
            match op {
                Op::Save | Op::Restart | Op::Transfer | Op::Crash(_) => {
                    a.save(&mut pa, r).unwrap();
                    if let Op::Crash(k) = op {
                        let mut crashing = Crashing::new(pb.clone(), *k);
                        let crashed = b.save(&mut crashing, r).is_err();
                        pb = crashing.inner;
                        if crashed {
                            let reloaded = Scheduler::load(7, l, &pb, r).unwrap();
                            // The old book (the host re-executes what it had not
                            // persisted: also when the unsaved requests changed nothing), or
                            // the new one.
                            if reloaded == b_saved {
                                b = reloaded;
                                for (op, seq, now) in &since_save {
                                    step(&mut b, &mut hb, op, *seq, *now);
                                }
                            } else {
                                prop_assert_eq!(&reloaded, &b, "neither old nor new");
                                b = reloaded;
                            }
                        }
                    }
                    b.save(&mut pb, r).unwrap();
                    prop_assert!(pa.snapshot() == pb.snapshot(), "page images differ");
                    if matches!(op, Op::Transfer) {
                        pb.restore(&pa.snapshot()).unwrap();
                    }
                    if matches!(op, Op::Restart | Op::Transfer) {
                        b = Scheduler::load(7, l, &pb, r).unwrap();
                        b.check_invariants().unwrap();
                    }
                    b_saved = b.clone();
                    since_save.clear();
                }
                _ => {}
            }
            prop_assert_eq!(&a, &b);
        }
        a.save(&mut pa, r).unwrap();
        b.save(&mut pb, r).unwrap();
        prop_assert!(pa.snapshot() == pb.snapshot(), "final page images differ");
        prop_assert_eq!(Scheduler::load(7, l, &pa, r).unwrap(), a);
    }
}

/// With `max_record_pages` set from the range, a schedule no record page could hold is rejected
/// when requested (typed, nothing changes), so the save never meets a full book; removing one
/// makes room again. Without it, the same book fails at save.
#[test]
fn a_full_book_rejects_new_schedules_at_admission_not_at_save() {
    let small = PageRange::new(3, 12).unwrap();
    let max_pages = ccron::schedule::record_pages_of(small);
    assert!(max_pages >= 1);
    let h = handlers();
    let mut book = Scheduler::new(
        7,
        Limits {
            max_record_pages: Some(max_pages),
            ..limits()
        },
    );
    let def = |i: i64| {
        NewSchedule::new("run", Timing::At(Due::Time(1_000 + i))).with_payload(vec![7; 100])
    };
    let mut admitted = 0;
    let err = loop {
        match book.apply(
            &Principal::Host,
            ScheduleRequest::Create(def(admitted)),
            &h,
            0,
            Some(0),
        ) {
            Ok(_) => admitted += 1,
            Err(e) => break e,
        }
        assert!(admitted < 10_000, "never full");
    };
    assert!(matches!(err, ScheduleError::Limit(_)), "{err}");
    assert_eq!(book.len(), admitted as usize);
    let mut pages = store();
    book.save(&mut pages, small).unwrap();
    let loaded = Scheduler::load(7, book_limits(max_pages), &pages, small).unwrap();
    assert_eq!(loaded, book);
    // In the full book, a replacement of the same size stays on its page; one grown past
    // what any page could take is refused and changes nothing.
    book.apply(
        &Principal::Host,
        ScheduleRequest::Replace {
            target: Target::Id(2),
            schedule: def(2),
        },
        &h,
        0,
        Some(0),
    )
    .unwrap();
    let before = book.clone();
    let grown = NewSchedule::new("run", Timing::At(Due::Time(5))).with_payload(vec![7; 600]);
    let refused = book.apply(
        &Principal::Host,
        ScheduleRequest::Replace {
            target: Target::Id(2),
            schedule: grown,
        },
        &h,
        0,
        Some(0),
    );
    assert!(
        matches!(refused, Err(ScheduleError::Limit(_))),
        "{refused:?}"
    );
    assert_eq!(book, before);
    // Cancelling one frees room for one more.
    book.apply(
        &Principal::Host,
        ScheduleRequest::Cancel(Target::Id(1)),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    book.apply(
        &Principal::Host,
        ScheduleRequest::Create(def(admitted)),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    book.save(&mut pages, small).unwrap();
    // The same creations without the bound are all admitted, and the save fails instead.
    let mut unbounded = Scheduler::new(7, limits());
    for i in 0..=admitted {
        unbounded
            .apply(
                &Principal::Host,
                ScheduleRequest::Create(def(i)),
                &h,
                0,
                Some(0),
            )
            .unwrap();
    }
    assert!(unbounded.save(&mut store(), small).is_err());
}

fn book_limits(max_pages: u32) -> Limits {
    Limits {
        max_record_pages: Some(max_pages),
        ..limits()
    }
}

/// Saves that flip schedule `id` (pause, resume) until one folds the log; returns the pages.
fn save_until_fold(book: &mut Scheduler, mut pages: MemPages, id: u64) -> MemPages {
    let h = handlers();
    for k in 0..300 {
        let req = if k % 2 == 0 {
            ScheduleRequest::Pause(Target::Id(id))
        } else {
            ScheduleRequest::Resume(Target::Id(id))
        };
        book.apply(&Principal::Host, req, &h, 0, Some(0)).unwrap();
        let mut counting = Crashing::new(pages, usize::MAX);
        book.save(&mut counting, range()).unwrap();
        pages = counting.inner;
        if counting.writes.iter().any(|id| *id >= RECORDS_FIRST) {
            return pages;
        }
    }
    panic!("no save folded");
}

/// A fold rewrites the pages records left since the last fold (cancelled, or moved away), not
/// only the pages the log places records on: a page a cancel emptied is zeroed by the next fold,
/// and the book reloads equal (a stale copy left there would load as a live schedule).
#[test]
fn a_fold_rewrites_the_pages_records_left() {
    let h = handlers();
    let mut book = Scheduler::new(7, limits());
    // One record per page: a 1,100-byte payload leaves no room for a second on a page.
    let ids: Vec<u64> = (0..4)
        .map(|i| create(&mut book, &h, 1_000_000 + i, 1_100))
        .collect();
    let mut pages = store();
    book.save(&mut pages, range()).unwrap();
    pages = save_until_fold(&mut book, pages, ids[0]);
    // After that fold every record is on its page.
    assert!(pages.load(RECORDS_FIRST + 1).unwrap().is_some());
    book.apply(
        &Principal::Host,
        ScheduleRequest::Cancel(Target::Id(ids[1])),
        &h,
        0,
        Some(0),
    )
    .unwrap();
    book.save(&mut pages, range()).unwrap();
    pages = save_until_fold(&mut book, pages, ids[0]);
    assert!(
        pages.load(RECORDS_FIRST + 1).unwrap().is_none(),
        "the fold zeroed the page the cancel emptied"
    );
    assert_eq!(Scheduler::load(7, limits(), &pages, range()).unwrap(), book);
}
