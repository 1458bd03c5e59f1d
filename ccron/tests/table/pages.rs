//! Crash atomicity and write cost of a cron table's schedule (table layout 2: commit page,
//! change log, record pages). A crash after any page write of a persist, an append or a fold,
//! reloads as the schedule before or after it (never corrupt, never a mix), and the replica
//! then writes the same pages as one that never crashed. A write after one change takes O(1)
//! pages whatever the table's size.

use ccron::{CronEntry, CronTable, Due, MemPages, PageRange, Periodic, TableError, Tick};

/// Pages that fail every write after the first `budget` ones.
type Crashing = ccron::pages::CrashAfter<MemPages>;

const C: u32 = 3;
const ENTRIES: u32 = 60;
const PAGE: usize = 512;

/// 512-byte pages, 100 entries at most: the log form (100 records do not fit one page), with
/// the shortest log the layout accepts, so that a few ticks fill it and a persist folds.
fn range() -> PageRange {
    PageRange::new(2, CronTable::<u32>::pages_needed(100, PAGE).unwrap()).unwrap()
}

fn store() -> MemPages {
    MemPages::new(PAGE, range().end() + 2)
}

fn table() -> CronTable<u32> {
    table_of(ENTRIES)
}

/// The table of a build that registers `n` periodic entries (positions `0..n`).
fn table_of(n: u32) -> CronTable<u32> {
    let mut t = CronTable::with_persistence(C, range(), 100);
    for pos in 0..n {
        let period = 1_000 * (1 + i64::from(pos % 3));
        t.add(CronEntry::periodic(
            pos,
            Periodic::every_ms(period).unwrap(),
            |ctx| *ctx.state += 1,
        ))
        .unwrap();
    }
    t
}

fn schedule(t: &CronTable<u32>) -> Vec<Option<i64>> {
    schedule_of(t, ENTRIES)
}

fn schedule_of(t: &CronTable<u32>, n: u32) -> Vec<Option<i64>> {
    (0..n).map(|pos| t.next_due_ms(pos)).collect()
}

/// Runs tick `tick` on pages `before` (as left by ticks 1..) through a store that crashes after
/// each possible number of page writes; checks old-or-new and identical pages after recovery.
/// Returns how many page writes the uncrashed persist made, and the pages it left.
fn crash_everywhere(before: &MemPages, tick: &Tick) -> (usize, MemPages) {
    crash_everywhere_with(before, tick, ENTRIES)
}

/// [`crash_everywhere`] for the build of [`table_of`]`(n)`.
fn crash_everywhere_with(before: &MemPages, tick: &Tick, n: u32) -> (usize, MemPages) {
    let table = || table_of(n);
    let schedule = |t: &CronTable<u32>| schedule_of(t, n);
    let mut t = table();
    t.reload(before).unwrap();
    let old = schedule(&t);
    let mut s = 0;
    let mut full = Crashing::new(before.clone(), usize::MAX);
    let out = t.evaluate(tick, &mut s, &mut full).unwrap();
    assert!(out.errors.is_empty() && out.persisted);
    let new = schedule(&t);
    assert_ne!(old, new);
    let expected = full.inner.snapshot();
    for k in 0..full.writes.len() {
        let mut crashed = Crashing::new(before.clone(), k);
        let mut r = table();
        r.reload(before).unwrap();
        let mut s = 0;
        let out = r.evaluate(tick, &mut s, &mut crashed).unwrap();
        assert!(!out.errors.is_empty(), "k = {k}: the write fails");
        let mut pages = crashed.inner;
        let mut reloaded = table();
        reloaded
            .reload(&pages)
            .unwrap_or_else(|e| panic!("k = {k} of {}: {e}", full.writes.len()));
        let got = schedule(&reloaded);
        if got == old {
            // The host re-executes the tick it had not persisted.
            let out = reloaded.evaluate(tick, &mut s, &mut pages).unwrap();
            assert!(out.errors.is_empty());
        } else {
            assert_eq!(got, new, "k = {k}: neither the old nor the new schedule");
        }
        assert_eq!(schedule(&reloaded), new);
        assert!(
            pages.snapshot() == expected,
            "k = {k}: pages differ from a replica that never crashed"
        );
    }
    (full.writes.len(), full.inner)
}

#[test]
fn a_crash_at_every_page_write_of_appends_and_folds_reloads_old_or_new() {
    let mut pages = store();
    let mut t = table();
    t.reload(&pages).unwrap();
    let mut state = 0;
    let mut folds = 0;
    let mut appends = 0;
    let (mut paced, mut synchronous) = (0, 0);
    // Ticks every second: every entry, then a third or two thirds of them, run each time, so
    // the short log fills after a few ticks and a persist folds it.
    for seq in 1..=24u64 {
        let tick = Tick::new(C, seq, Some(1_000 * seq as i64 - 1_000));
        let (writes, restarted) = crash_everywhere(&pages, &tick);
        let record_pages = |p: &MemPages| -> Vec<(u32, Vec<u8>)> {
            // The 4 record pages of 100 records at 29 a page end the range.
            let first = range().end() - 4;
            p.snapshot()
                .into_iter()
                .filter(|(id, _)| *id >= first)
                .collect()
        };
        let before = record_pages(&pages);
        let out = t.evaluate(&tick, &mut state, &mut pages).unwrap();
        assert!(out.errors.is_empty());
        assert_eq!(t.last_persist_writes(), writes);
        // A replica restarted from the pages before the tick (its paced fold's state rebuilt
        // from the logs) writes the same pages as this one, which never stopped.
        assert!(
            pages.snapshot() == restarted.snapshot(),
            "seq {seq}: a restarted replica's pages differ"
        );
        // Only a fold writes the record pages; an append writes log pages and the commit.
        if record_pages(&pages) != before {
            folds += 1;
        } else {
            appends += 1;
        }
        let stats = t.last_persist_stats();
        paced += usize::from(stats.paced_pages > 0);
        synchronous += usize::from(stats.folded);
    }
    assert!(folds >= 2, "the log folded: {folds} folds");
    assert!(appends >= 2, "plain appends too: {appends}");
    assert!(paced >= 4, "paced fold steps: {paced}");
    let _ = synchronous;
    let mut again = table();
    again.reload(&pages).unwrap();
    assert_eq!(schedule(&again), schedule(&t));
}

/// A save that folds while the record count grows (a new build registered one more entry,
/// which gets its first record on this tick): the fold's commit in the middle of the save must
/// describe the previous schedule's count, not the new one. Carrying the new count with the
/// folded (old) records made a crash between that commit and the save's last write reload as
/// `Corrupt` (the book had the same defect; see schedule/book_pages.rs).
#[test]
fn a_crash_after_the_fold_of_a_growing_save_reloads_the_old_schedule() {
    let mut pages = store();
    let mut folds_while_growing = 0;
    for seq in 1..=36u64 {
        // Each tick runs under a build with one more entry than the last.
        let n = ENTRIES + seq as u32;
        let tick = Tick::new(C, seq, Some(1_000 * seq as i64 - 1_000));
        let (_, restarted) = crash_everywhere_with(&pages, &tick, n);
        let mut t = table_of(n);
        t.reload(&pages).unwrap();
        let mut state = 0;
        let out = t.evaluate(&tick, &mut state, &mut pages).unwrap();
        assert!(out.errors.is_empty());
        assert!(
            t.next_due_ms(n - 1).is_some(),
            "the new entry got its record"
        );
        assert!(pages.snapshot() == restarted.snapshot());
        let stats = t.last_persist_stats();
        folds_while_growing += usize::from(stats.folded || stats.paced_pages > 0);
    }
    assert!(
        folds_while_growing >= 2,
        "saves that grew the count also folded: {folds_while_growing}"
    );
}

#[test]
fn a_persist_after_one_change_writes_two_pages_whatever_the_size() {
    for n in [1_000u32, 4_000] {
        let needed = CronTable::<u32>::pages_needed(n, 4096).unwrap();
        let range = PageRange::new(0, needed * 2).unwrap();
        let mut pages = MemPages::new(4096, range.end());
        let mut t = CronTable::<u32>::with_persistence(C, range, n);
        t.reload(&pages).unwrap();
        for pos in 0..n {
            // Position 0 every second, the rest once a day.
            let period = if pos == 0 { 1_000 } else { 86_400_000 };
            t.add(CronEntry::periodic(
                pos,
                Periodic::every_ms(period).unwrap(),
                |ctx| *ctx.state += 1,
            ))
            .unwrap();
        }
        let mut s = 0;
        t.evaluate(&Tick::new(C, 1, Some(0)), &mut s, &mut pages)
            .unwrap();
        assert!(t.last_persist_writes() >= 6, "the first write is large");
        // Enough one-change ticks to fill the log several times over.
        let ticks = 2 * range.len() as u64;
        let (mut max, mut large) = (0, 0);
        for seq in 2..ticks {
            let mut w = ccron::pages::CrashAfter::new(pages, usize::MAX);
            let out = t
                .evaluate(
                    &Tick::new(C, seq, Some(1_000 * (seq as i64 - 1))),
                    &mut s,
                    &mut w,
                )
                .unwrap();
            assert_eq!(out.fired.len(), 1);
            assert_eq!(w.writes.len(), t.last_persist_writes());
            if w.writes.len() > 4 {
                large += 1;
            } else {
                max = max.max(w.writes.len());
            }
            pages = w.inner;
        }
        // One log page and the commit page, and a paced fold's share (a record page); a roll
        // commits once more. No save writes many pages: even the first write's n records are
        // folded a page per save (table layout 2 folded them in one save).
        assert!(max <= 4, "n = {n}: a one-record change wrote {max} pages");
        assert_eq!(large, 0, "n = {n}: no save writes many pages");
        let mut again = CronTable::<u32>::with_persistence(C, range, n);
        again.reload(&pages).unwrap();
        assert_eq!(again.next_due_ms(0), t.next_due_ms(0));
        assert_eq!(again.next_due_ms(n - 1), Some(86_400_000));
    }
}

/// A table whose bound fits one page keeps its whole schedule on the range's first page: one
/// page write per persist.
#[test]
fn a_small_table_lives_on_one_page() {
    let tight = PageRange::new(0, 1).unwrap();
    let mut pages = MemPages::new(4096, 1);
    let mut t = CronTable::<u32>::with_persistence(C, tight, 100);
    t.add(CronEntry::periodic(
        0,
        Periodic::every_ms(1_000).unwrap(),
        |ctx| *ctx.state += 1,
    ))
    .unwrap();
    t.reload(&pages).unwrap();
    let mut s = 0;
    t.evaluate(&Tick::new(C, 1, Some(0)), &mut s, &mut pages)
        .unwrap();
    assert_eq!(t.last_persist_writes(), 1);
    assert_eq!(t.stored_schedule(&pages).unwrap(), [(0, Due::Time(1_000))]);
    let mut again = CronTable::<u32>::with_persistence(C, tight, 100);
    again.reload(&pages).unwrap();
    assert_eq!(again.next_due_ms(0), t.next_due_ms(0));
}

/// Pages of table layout 1 that cannot be migrated crash-atomically in place (one blob over a
/// log-form range: the full save would overwrite it) are refused with a typed error, not read
/// as garbage; a one-page range (the inline form) migrates at its next save. (Migrations of
/// every real layout 1 and 2 shape, from fixtures the old code wrote: `table/migrations.rs`.)
#[test]
fn layout_one_pages_are_refused_or_migrated() {
    let r = range();
    let mut pages = store();
    let old = ccron::periodic::PersistedSchedule {
        component_id: C,
        records: vec![(0, Due::Time(5))],
    };
    ccron::codec::save(
        &mut pages,
        r,
        ccron::codec::BlobKind::PeriodicSchedule,
        &old,
    )
    .unwrap();
    assert_eq!(table().reload(&pages), Err(TableError::OldLayout));
    let mut tight = MemPages::new(4096, 1);
    let one = PageRange::new(0, 1).unwrap();
    ccron::codec::save(
        &mut tight,
        one,
        ccron::codec::BlobKind::PeriodicSchedule,
        &old,
    )
    .unwrap();
    let periodic = || {
        CronEntry::periodic(
            0,
            Periodic::every_ms(1_000).unwrap(),
            |ctx: &mut ccron::ActionCtx<'_, u32>| *ctx.state += 1,
        )
    };
    let mut t = CronTable::<u32>::with_persistence(C, one, 4);
    t.add(periodic()).unwrap();
    t.reload(&tight).unwrap();
    assert_eq!(t.next_due_ms(0), Some(5), "layout 1 loads");
    let mut s = 0;
    t.evaluate(&Tick::new(C, 1, Some(5)), &mut s, &mut tight)
        .unwrap();
    let mut again = CronTable::<u32>::with_persistence(C, one, 4);
    again.add(periodic()).unwrap();
    again.reload(&tight).unwrap();
    assert_eq!(again.next_due_ms(0), Some(1_005), "migrated by the save");
    assert_eq!(t.stored_schedule(&tight).unwrap(), [(0, Due::Time(1_005))]);
}

/// Records kept for positions with no entry count against the bound, so every record always
/// has room in the pages.
#[test]
fn orphan_records_count_against_the_bound() {
    let r = PageRange::new(0, 1).unwrap();
    let mut pages = MemPages::new(4096, 1);
    let mut t = CronTable::<u32>::with_persistence(C, r, 2);
    for pos in [0, 1] {
        t.add(CronEntry::periodic(
            pos,
            Periodic::every_ms(1_000).unwrap(),
            |ctx| *ctx.state += 1,
        ))
        .unwrap();
    }
    t.evaluate(&Tick::new(C, 1, Some(0)), &mut 0, &mut pages)
        .unwrap();
    // A restarted replica registers only position 5: the records of 0 and 1 are kept.
    let mut r2 = CronTable::<u32>::with_persistence(C, r, 2);
    r2.reload(&pages).unwrap();
    let every = || Periodic::every_ms(1_000).unwrap();
    assert_eq!(
        r2.add(CronEntry::periodic(5, every(), |ctx| *ctx.state += 1)),
        Err(TableError::ScheduleFull {
            component_id: C,
            max: 2
        })
    );
    // Position 0 takes its own record over.
    r2.add(CronEntry::periodic(0, every(), |ctx| *ctx.state += 1))
        .unwrap();
    r2.check_invariants().unwrap();
    // Entries registered before the reload count too.
    let mut r3 = CronTable::<u32>::with_persistence(C, r, 2);
    r3.add(CronEntry::periodic(7, every(), |ctx| *ctx.state += 1))
        .unwrap();
    assert!(matches!(
        r3.reload(&pages),
        Err(TableError::TooManyRecords { found: 3, max: 2 })
    ));
}
