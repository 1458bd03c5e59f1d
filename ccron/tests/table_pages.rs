//! Crash atomicity of a cron table's multi-page schedule write: with a range whose halves each
//! hold a full schedule, a crash after any page write of a persist reloads as the schedule
//! before or after it (never corrupt), and the replica then writes the same pages as one that
//! never crashed.

use ccron::{CronEntry, CronTable, MemPages, PageRange, Periodic, Tick};

/// Pages that fail every write after the first `budget` ones.
type Crashing = ccron::pages::CrashAfter<MemPages>;

const C: u32 = 3;
const ENTRIES: u32 = 60;

/// 512-byte pages: a schedule of up to 100 records (1,612 bytes and a generation) takes 4
/// pages, so a 10-page range holds two copies of 5 pages.
fn range() -> PageRange {
    PageRange::new(2, 10).unwrap()
}

fn table() -> CronTable<u32> {
    let mut t = CronTable::with_persistence(C, range(), 100);
    for pos in 0..ENTRIES {
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
    (0..ENTRIES).map(|pos| t.next_due_ms(pos)).collect()
}

#[test]
fn a_crash_at_every_page_write_of_a_multi_page_persist_reloads_old_or_new() {
    let mut pages = MemPages::new(512, 16);
    let mut t = table();
    t.reload(&pages).unwrap();
    let mut state = 0;
    let first = Tick::new(C, 1, Some(0));
    assert!(
        t.evaluate(&first, &mut state, &mut pages)
            .unwrap()
            .errors
            .is_empty()
    );
    let old_pages = pages.clone();
    let old = schedule(&t);
    let second = Tick::new(C, 2, Some(3_000));
    let mut full = Crashing::new(pages, usize::MAX);
    assert!(
        t.evaluate(&second, &mut state, &mut full)
            .unwrap()
            .errors
            .is_empty()
    );
    let new = schedule(&t);
    assert_ne!(old, new);
    assert!(
        full.writes.len() >= 3,
        "a multi-page write: {}",
        full.writes.len()
    );
    let expected = full.inner.snapshot();
    let mut saw_old = false;
    for k in 0..full.writes.len() {
        let mut crashed = Crashing::new(old_pages.clone(), k);
        let mut before = table();
        before.reload(&old_pages).unwrap();
        let mut s = 0;
        assert!(
            before
                .evaluate(&second, &mut s, &mut crashed)
                .map_or(true, |o| !o.errors.is_empty()),
            "k = {k}: the write fails"
        );
        let mut pages = crashed.inner;
        let mut reloaded = table();
        reloaded
            .reload(&pages)
            .unwrap_or_else(|e| panic!("k = {k}: {e}"));
        let got = schedule(&reloaded);
        if got == old {
            saw_old = true;
            // The host re-executes the tick it had not persisted.
            assert!(
                reloaded
                    .evaluate(&second, &mut s, &mut pages)
                    .unwrap()
                    .errors
                    .is_empty()
            );
        } else {
            assert_eq!(got, new, "k = {k}: neither the old nor the new schedule");
        }
        assert!(
            pages.snapshot() == expected,
            "k = {k}: pages differ from a replica that never crashed"
        );
    }
    assert!(saw_old, "a crash inside the write keeps the old copy");
}

/// A range without room for two copies keeps the single-blob layout (reload of what it wrote
/// still works).
#[test]
fn a_tight_range_keeps_one_copy() {
    let tight = PageRange::new(0, 4).unwrap();
    let mut pages = MemPages::new(512, 4);
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
    let stored: ccron::periodic::PersistedSchedule =
        ccron::codec::load(&pages, tight, ccron::codec::BlobKind::PeriodicSchedule)
            .unwrap()
            .unwrap();
    assert_eq!(stored.records.len(), 1);
    let mut again = CronTable::<u32>::with_persistence(C, tight, 100);
    again.reload(&pages).unwrap();
    assert_eq!(again.next_due_ms(0), t.next_due_ms(0));
}
