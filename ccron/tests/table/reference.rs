//! The reference tests of Concord's cron table and periodic action, against our API, plus the
//! behaviours we define where Concord left them undefined or wrong.

use std::sync::{Arc, Mutex};

use ccron::periodic::PersistedSchedule;
use ccron::{
    CronEntry, CronTable, CronTableRegistry, Due, Fired, MemPages, PageRange, Periodic,
    RegistryError, ReservedPages, TableError, Tick,
};

/// The application state of these tests: a log of what ran.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Log {
    lines: Vec<String>,
}

const C: u32 = 7;

fn tick(seq: u64, time_ms: Option<i64>) -> Tick {
    Tick::new(C, seq, time_ms)
}

fn logging(position: u32, holds: bool) -> CronEntry<Log> {
    CronEntry::<Log>::new(
        position,
        move |_| holds,
        move |ctx| ctx.state.lines.push(format!("action {position}")),
    )
}

fn pages() -> MemPages {
    MemPages::new(4096, 64)
}

#[test]
fn entries_run_in_position_order_and_a_false_rule_is_skipped() {
    let mut t = CronTable::new(C);
    // Added out of order: evaluation order is position order, not insertion order.
    t.add(logging(2, true)).unwrap();
    t.add(logging(0, true)).unwrap();
    t.add(logging(1, false)).unwrap();
    let mut log = Log::default();
    let out = t.evaluate(&tick(1, None), &mut log, &mut pages()).unwrap();
    assert_eq!(log.lines, ["action 0", "action 2"]);
    assert_eq!(
        out.fired,
        [
            Fired {
                position: 0,
                due: None
            },
            Fired {
                position: 2,
                due: None
            }
        ]
    );
    assert!(out.errors.is_empty());
}

#[test]
fn schedule_next_runs_only_when_present_and_the_rule_holds_and_before_the_action() {
    let mut t = CronTable::new(C);
    let with_next = |pos: u32, holds: bool| {
        logging(pos, holds)
            .with_schedule_next(move |ctx| ctx.state.lines.push(format!("next {pos}")))
    };
    t.add(with_next(0, true)).unwrap();
    t.add(logging(1, true)).unwrap();
    t.add(with_next(2, false)).unwrap();
    t.add(with_next(3, true)).unwrap();
    let mut log = Log::default();
    t.evaluate(&tick(1, Some(0)), &mut log, &mut pages())
        .unwrap();
    assert_eq!(
        log.lines,
        ["next 0", "action 0", "action 1", "next 3", "action 3"]
    );
}

#[test]
fn remove_and_remove_all_call_on_remove_in_order() {
    let removed = Arc::new(Mutex::new(Vec::new()));
    let mut t: CronTable<Log> = CronTable::new(C);
    for pos in [5, 1, 3] {
        let removed = Arc::clone(&removed);
        t.add(logging(pos, true).with_on_remove(move |c, p| removed.lock().unwrap().push((c, p))))
            .unwrap();
    }
    t.add(logging(4, true)).unwrap(); // no on_remove
    assert!(!t.remove(9), "absent position: false");
    assert!(removed.lock().unwrap().is_empty(), "and no callback");
    assert!(t.remove(3));
    assert_eq!(*removed.lock().unwrap(), [(C, 3)]);
    assert!(t.get(3).is_none());
    assert_eq!(t.remove_all(), 3);
    assert_eq!(*removed.lock().unwrap(), [(C, 3), (C, 1), (C, 5)]);
    assert!(t.is_empty());
    t.check_invariants().unwrap();
}

#[test]
fn lookup_count_empty_and_component_id() {
    let mut t: CronTable<Log> = CronTable::new(C);
    assert_eq!(t.component_id(), C);
    assert!(t.is_empty());
    assert_eq!(t.len(), 0);
    t.add(logging(3, true).with_schedule_next(|_| {})).unwrap();
    t.add(logging(8, false)).unwrap();
    assert!(!t.is_empty());
    assert_eq!(t.len(), 2);
    let e = t.get(3).unwrap();
    assert_eq!(e.position(), 3);
    assert!(e.has_schedule_next());
    assert!(!e.has_on_remove());
    assert!(t.get(4).is_none());
    assert_eq!(t.positions().collect::<Vec<_>>(), [3, 8]);
}

#[test]
fn a_tick_for_another_component_runs_nothing() {
    let mut t = CronTable::new(C);
    t.add(logging(0, true)).unwrap();
    let mut log = Log::default();
    let err = t
        .evaluate(&Tick::new(C + 1, 1, Some(0)), &mut log, &mut pages())
        .unwrap_err();
    assert_eq!(
        err,
        TableError::WrongComponent {
            expected: C,
            got: C + 1
        }
    );
    assert!(log.lines.is_empty());
}

#[test]
fn add_at_a_taken_position_is_rejected_and_replace_is_explicit() {
    let mut t = CronTable::new(C);
    t.add(logging(0, true)).unwrap();
    let err = t.add(logging(0, false)).unwrap_err();
    assert_eq!(
        err,
        TableError::PositionTaken {
            component_id: C,
            position: 0
        }
    );
    let mut log = Log::default();
    t.evaluate(&tick(1, None), &mut log, &mut pages()).unwrap();
    assert_eq!(log.lines, ["action 0"], "the first entry is still there");
    let old = t.replace(logging(0, false)).unwrap();
    assert_eq!(old.position(), 0);
    t.evaluate(&tick(2, None), &mut log, &mut pages()).unwrap();
    assert_eq!(log.lines, ["action 0"], "the replacement's rule is false");
    assert!(matches!(
        t.replace(logging(1, true)),
        Err(TableError::NoSuchPosition { position: 1, .. })
    ));
}

#[test]
fn changes_requested_during_a_pass_apply_after_it_in_request_order() {
    let mut t = CronTable::new(C);
    // Entry 0 removes entry 1 and adds entry 2 (at a free position), then tries to add at 3
    // (taken) and to remove itself. Entry 1 still runs in this pass: the set is fixed.
    t.add(CronEntry::<Log>::new(
        0,
        |_| true,
        |ctx| {
            ctx.state.lines.push("action 0".into());
            ctx.request_remove(1);
            ctx.request_add(logging(2, true));
            ctx.request_add(logging(3, true));
            ctx.request_remove(0);
        },
    ))
    .unwrap();
    t.add(logging(1, true)).unwrap();
    t.add(logging(3, true)).unwrap();
    let mut log = Log::default();
    let out = t.evaluate(&tick(1, None), &mut log, &mut pages()).unwrap();
    assert_eq!(log.lines, ["action 0", "action 1", "action 3"]);
    assert_eq!(
        out.errors,
        [TableError::PositionTaken {
            component_id: C,
            position: 3
        }]
    );
    assert_eq!(t.positions().collect::<Vec<_>>(), [2, 3]);
    log.lines.clear();
    t.evaluate(&tick(2, None), &mut log, &mut pages()).unwrap();
    assert_eq!(log.lines, ["action 2", "action 3"]);
    t.check_invariants().unwrap();
}

#[test]
fn registry_rejects_unknown_components_without_creating_state() {
    let mut r: CronTableRegistry<Log> = CronTableRegistry::new();
    let mut log = Log::default();
    let mut p = pages();
    assert_eq!(
        r.evaluate(&tick(1, Some(0)), &mut log, &mut p),
        Err(RegistryError::UnknownComponent(C))
    );
    assert!(r.is_empty());
    assert_eq!(r.unknown_ticks(), 1);
    let mut t = CronTable::new(C);
    t.add(logging(0, true)).unwrap();
    r.register(t).unwrap();
    assert_eq!(
        r.register(CronTable::new(C)).unwrap_err(),
        RegistryError::AlreadyRegistered(C)
    );
    r.evaluate(&tick(2, Some(0)), &mut log, &mut p).unwrap();
    assert_eq!(log.lines, ["action 0"]);
    r.evaluate_linear(&tick(3, Some(0)), &mut log, &mut p)
        .unwrap();
    assert_eq!(log.lines, ["action 0", "action 0"]);
    assert_eq!(
        r.evaluate_linear(&Tick::new(C + 5, 4, None), &mut log, &mut p),
        Err(RegistryError::UnknownComponent(C + 5))
    );
    assert_eq!(r.unknown_ticks(), 2);
    assert_eq!(r.components().collect::<Vec<_>>(), [C]);
    r.check_invariants().unwrap();
}

#[test]
fn disassociate_calls_no_on_remove() {
    let removed = Arc::new(Mutex::new(0));
    let mut r: CronTableRegistry<Log> = CronTableRegistry::new();
    let mut t = CronTable::new(C);
    let counter = Arc::clone(&removed);
    t.add(logging(0, true).with_on_remove(move |_, _| *counter.lock().unwrap() += 1))
        .unwrap();
    r.register(t).unwrap();
    let table = r.disassociate(C).unwrap();
    assert_eq!(table.len(), 1);
    drop(table);
    assert_eq!(*removed.lock().unwrap(), 0);
    assert!(r.get(C).is_none());
    assert!(r.disassociate(C).is_none());
}

#[test]
fn registry_rejects_overlapping_page_ranges_and_digests_the_setup() {
    let mut r: CronTableRegistry<Log> = CronTableRegistry::new();
    let a = PageRange::new(0, 4).unwrap();
    let b = PageRange::new(3, 4).unwrap();
    r.register(CronTable::with_persistence(1, a, 10)).unwrap();
    assert_eq!(
        r.register(CronTable::with_persistence(2, b, 10)),
        Err(RegistryError::OverlappingPages {
            component_id: 2,
            other: 1
        })
    );
    let before = r.setup_digest();
    let table = r.get_mut(1).unwrap();
    table
        .add(CronEntry::periodic(
            0,
            Periodic::every_ms(1000).unwrap(),
            |_| {},
        ))
        .unwrap();
    assert_ne!(r.setup_digest(), before);
}

// ---- The periodic scenario of Concord's tests: ticks at 1..7 s, period 2 s. ----

const RANGE_FIRST: u32 = 10;

fn range() -> PageRange {
    PageRange::new(RANGE_FIRST, 2).unwrap()
}

fn periodic_table() -> CronTable<Log> {
    CronTable::with_persistence(C, range(), 100)
}

fn periodic(position: u32) -> CronEntry<Log> {
    CronEntry::<Log>::periodic(position, Periodic::every_ms(2_000).unwrap(), move |ctx| {
        let at = ctx.tick.agreed_time_ms.unwrap_or(-1) / 1000;
        ctx.state
            .lines
            .push(format!("periodic {position} at {at}s"))
    })
}

/// What the pages hold, as a restarted replica loads it (`None`: nothing stored). With 4 KiB
/// pages the range's first page holds the whole schedule (the inline form of layout 2).
fn stored(p: &MemPages) -> Option<PersistedSchedule> {
    p.load(RANGE_FIRST).unwrap()?;
    Some(PersistedSchedule {
        component_id: C,
        records: periodic_table().stored_schedule(p).unwrap(),
    })
}

#[test]
fn periodic_scenario_over_ticks_at_one_to_seven_seconds() {
    let mut p = pages();
    let mut log = Log::default();
    let mut t = periodic_table();
    t.reload(&p).unwrap(); // a fresh store: nothing stored
    t.add(periodic(0)).unwrap();

    // Never without agreed time.
    t.evaluate(&tick(1, None), &mut log, &mut p).unwrap();
    assert!(log.lines.is_empty());
    assert_eq!(stored(&p), None);

    for (seq, s) in (2..).zip(1..=7) {
        let out = t
            .evaluate(&tick(seq, Some(s * 1000)), &mut log, &mut p)
            .unwrap();
        // The schedule changes exactly when the entry fires, and is written then.
        assert_eq!(out.persisted, !out.fired.is_empty(), "at {s}s");
    }
    assert_eq!(
        log.lines,
        [
            "periodic 0 at 1s",
            "periodic 0 at 3s",
            "periodic 0 at 5s",
            "periodic 0 at 7s"
        ]
    );
    assert_eq!(
        stored(&p).unwrap().records,
        [(0, Due::Time(9_000))],
        "next due after 7 s is 9 s"
    );
    // Repeated ticks (same seq, same time) are idempotent.
    let out = t.evaluate(&tick(8, Some(7_000)), &mut log, &mut p).unwrap();
    assert!(out.fired.is_empty());

    // A new table (a restarted replica) honours the stored schedule.
    let mut t2 = periodic_table();
    t2.add(periodic(0)).unwrap();
    t2.reload(&p).unwrap();
    log.lines.clear();
    t2.evaluate(&tick(9, Some(8_000)), &mut log, &mut p)
        .unwrap();
    assert!(log.lines.is_empty(), "next is 9 s, not at once");
    t2.evaluate(&tick(10, Some(9_000)), &mut log, &mut p)
        .unwrap();
    assert_eq!(log.lines, ["periodic 0 at 9s"]);

    // A new position runs at once.
    t2.add(periodic(1)).unwrap();
    log.lines.clear();
    t2.evaluate(&tick(11, Some(9_500)), &mut log, &mut p)
        .unwrap();
    assert_eq!(log.lines, ["periodic 1 at 9s"]);
    assert_eq!(
        stored(&p).unwrap().records,
        [(0, Due::Time(11_000)), (1, Due::Time(11_500))]
    );

    // Removal removes only its record (written inside execution: at the next tick, or persist).
    assert!(t2.remove(1));
    assert_eq!(t2.persist(&mut p), Ok(true));
    assert_eq!(stored(&p).unwrap().records, [(0, Due::Time(11_000))]);
    assert_eq!(
        t2.persist(&mut p),
        Ok(false),
        "written once, only when changed"
    );

    // Clearing the persistence zeroes the pages.
    t2.clear_persistence(&mut p).unwrap();
    for id in range().ids() {
        assert_eq!(p.load(id).unwrap(), None);
    }
    assert!(p.snapshot().is_empty());
    t2.check_invariants().unwrap();
}

#[test]
fn several_replicas_in_one_process_do_not_share_a_schedule() {
    let (mut p1, mut p2) = (pages(), pages());
    let (mut t1, mut t2) = (periodic_table(), periodic_table());
    t1.add(periodic(0)).unwrap();
    t2.add(periodic(0)).unwrap();
    let (mut l1, mut l2) = (Log::default(), Log::default());
    t1.evaluate(&tick(1, Some(1_000)), &mut l1, &mut p1)
        .unwrap();
    // Replica 2 sees its first tick later: it must still run at once, on its own schedule.
    t2.evaluate(&tick(1, Some(1_000)), &mut l2, &mut p2)
        .unwrap();
    assert_eq!(l1, l2);
    assert_eq!(p1, p2);
}

#[test]
fn periodic_entries_need_persistence_and_respect_the_bound() {
    let mut t: CronTable<Log> = CronTable::new(C);
    assert_eq!(
        t.add(periodic(0)),
        Err(TableError::NoPersistence { component_id: C })
    );
    let mut t = CronTable::with_persistence(C, range(), 2);
    t.add(periodic(0)).unwrap();
    t.add(periodic(1)).unwrap();
    assert_eq!(
        t.add(periodic(2)),
        Err(TableError::ScheduleFull {
            component_id: C,
            max: 2
        })
    );
    t.add(logging(2, true)).unwrap();
    // A range too small for the bound is a typed error at reload, not an abort at write time.
    let tiny = MemPages::new(64, 64);
    let mut t = CronTable::<Log>::with_persistence(C, range(), 1_000);
    assert!(matches!(
        t.reload(&tiny),
        Err(TableError::RangeTooShort { .. })
    ));
}

#[test]
fn a_schedule_spans_many_pages() {
    // 1,000 periodic entries in 512-byte pages: 35 record pages and a log; Concord aborted at
    // ~340.
    let n = CronTable::<Log>::pages_needed(1_000, 512).unwrap();
    let r = PageRange::new(0, n).unwrap();
    let mut p = MemPages::new(512, n);
    let mut t = CronTable::with_persistence(C, r, 1_000);
    t.reload(&p).unwrap();
    for pos in 0..1_000 {
        t.add(CronEntry::<Log>::periodic(
            pos,
            Periodic::every_ms(10).unwrap(),
            |ctx| ctx.state.lines.push(String::new()),
        ))
        .unwrap();
    }
    let mut log = Log::default();
    t.evaluate(&tick(1, Some(0)), &mut log, &mut p).unwrap();
    assert_eq!(log.lines.len(), 1_000);
    assert!(p.snapshot().len() > 20);
    let mut t2: CronTable<Log> = CronTable::with_persistence(C, r, 1_000);
    t2.reload(&p).unwrap();
    assert_eq!(t2.next_due_ms(999), Some(10));
}

#[test]
fn reload_rejects_another_components_schedule() {
    let mut p = pages();
    let mut t = periodic_table();
    t.add(periodic(0)).unwrap();
    t.evaluate(&tick(1, Some(0)), &mut Log::default(), &mut p)
        .unwrap();
    let mut other: CronTable<Log> = CronTable::with_persistence(C + 1, range(), 100);
    assert_eq!(
        other.reload(&p),
        Err(TableError::ForeignSchedule {
            expected: C + 1,
            found: C
        })
    );
}

#[test]
fn a_sequence_keyed_schedule_plugs_into_the_index_in_position_order() {
    use std::num::NonZeroU64;
    let mut p = pages();
    let mut t = periodic_table();
    let every3 = ccron::EverySeq::new(NonZeroU64::new(3).unwrap());
    t.add(CronEntry::<Log>::scheduled(2, every3, |ctx| {
        let line = format!("seq-schedule at {}", ctx.tick.bft_sequence_num);
        ctx.state.lines.push(line)
    }))
    .unwrap();
    t.add(periodic(1)).unwrap();
    t.add(logging(0, true)).unwrap();
    let mut log = Log::default();
    // No agreed time: the sequence schedule still runs, the periodic one does not.
    t.evaluate(&tick(5, None), &mut log, &mut p).unwrap();
    t.evaluate(&tick(6, Some(1_000)), &mut log, &mut p).unwrap();
    t.evaluate(&tick(8, Some(2_000)), &mut log, &mut p).unwrap();
    assert_eq!(
        log.lines,
        [
            "action 0",
            "seq-schedule at 5",
            "action 0",
            "periodic 1 at 1s",
            "action 0",
            "seq-schedule at 8",
        ]
    );
    assert_eq!(t.next_due(2), Some(Due::Seq(11)));
    assert_eq!(t.earliest_due_seq(), Some(11));
    // Its record is persisted with the others and honoured after a restart.
    let mut t2 = periodic_table();
    t2.reload(&p).unwrap();
    t2.add(CronEntry::<Log>::scheduled(2, every3, |_| {}))
        .unwrap();
    assert_eq!(t2.earliest_due_seq(), Some(11));
    t2.check_invariants().unwrap();
}

/// A replica's setup: the same on every replica and after a restart.
fn replica_registry() -> CronTableRegistry<Log> {
    let mut r = CronTableRegistry::new();
    let mut t = periodic_table();
    t.add(periodic(0)).unwrap();
    t.add(periodic(1)).unwrap();
    r.register(t).unwrap();
    r
}

#[test]
fn state_transfer_then_reload_continues_on_the_transferred_schedule() {
    // Replica A executes ticks; lagging replica B receives A's pages by state transfer.
    let (mut pa, mut pb) = (pages(), pages());
    let (mut ra, mut rb) = (replica_registry(), replica_registry());
    ra.reload(&pa).unwrap();
    rb.reload(&pb).unwrap();
    let (mut la, mut lb) = (Log::default(), Log::default());
    for (seq, s) in [(1, 1), (2, 2), (3, 3), (4, 4)] {
        ra.evaluate(&tick(seq, Some(s * 1000)), &mut la, &mut pa)
            .unwrap();
    }
    // B saw only the first tick before falling behind.
    rb.evaluate(&tick(1, Some(1000)), &mut lb, &mut pb).unwrap();
    pb.restore(&pa.snapshot()).unwrap();
    lb = la.clone();
    rb.reload(&pb).unwrap();
    // Replica C gets the same pages but skips the reload: it runs on its own stale (empty)
    // schedule, as Concord's statics did after a state transfer.
    let (mut rc, mut pc, mut lc) = (replica_registry(), pages(), la.clone());
    pc.restore(&pa.snapshot()).unwrap();
    let mut c_diverged = false;
    for (seq, s) in [(5, 6), (6, 7), (7, 8), (8, 9)] {
        let t = tick(seq, Some(s * 1000));
        let oa = ra.evaluate(&t, &mut la, &mut pa).unwrap();
        let ob = rb.evaluate(&t, &mut lb, &mut pb).unwrap();
        let oc = rc.evaluate(&t, &mut lc, &mut pc).unwrap();
        assert_eq!(oa, ob, "seq {seq}");
        c_diverged |= oa != oc;
    }
    assert_eq!(la, lb);
    assert_eq!(pa.digest(), pb.digest());
    assert!(c_diverged, "without the reload the schedule diverges");
    assert_ne!(pa.digest(), pc.digest());
}

#[test]
fn file_backed_pages_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("ccron-table-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut log = Log::default();
    {
        let mut p = ccron::FilePages::open(&dir, 4096, 64).unwrap();
        let mut r = replica_registry();
        r.reload(&p).unwrap();
        r.evaluate(&tick(1, Some(1_000)), &mut log, &mut p).unwrap();
    }
    let mut p = ccron::FilePages::open(&dir, 4096, 64).unwrap();
    let mut r = replica_registry();
    r.reload(&p).unwrap();
    assert_eq!(r.get(C).unwrap().next_due_ms(1), Some(3_000));
    log.lines.clear();
    r.evaluate(&tick(2, Some(2_000)), &mut log, &mut p).unwrap();
    assert!(
        log.lines.is_empty(),
        "the restarted replica honours the stored schedule"
    );
    r.evaluate(&tick(3, Some(3_000)), &mut log, &mut p).unwrap();
    assert_eq!(log.lines, ["periodic 0 at 3s", "periodic 1 at 3s"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
