//! Table layout 3's page bytes, pinned: a workload of periodic entries in the log form (paced
//! folds of the frozen log a share per save, synchronous folds of saves larger than a half,
//! removals and additions, a restart in the middle of a paced fold) digests every page after
//! every tick. Persisted bytes are forever: a change to the tick or save path that writes other
//! bytes fails here, whatever the tests of behaviour say.

use ccron::{CronEntry, CronTable, MemPages, PageRange, Periodic, Tick};
use sha2::{Digest, Sha256};

const C: u32 = 7;
const PAGE: usize = 256;
const MAX: u32 = 1_200;

fn range() -> PageRange {
    // Just what the layout needs: a save of many changes is larger than a half of the log
    // area and folds synchronously.
    PageRange::new(1, CronTable::<u64>::pages_needed(MAX, PAGE).unwrap()).unwrap()
}

/// The entry of `position` this build registers.
fn entry(position: u32) -> CronEntry<u64> {
    let slot = 1_000 * (1 + i64::from(position % 7));
    let schedule = Periodic::every_ms(slot)
        .unwrap()
        .starting_at(1_000 * i64::from(position % 13));
    CronEntry::periodic(position, schedule, |ctx| *ctx.state += 1)
}

fn table(positions: impl IntoIterator<Item = u32>) -> CronTable<u64> {
    let mut t = CronTable::with_persistence(C, range(), MAX);
    for p in positions {
        t.add(entry(p)).unwrap();
    }
    t
}

fn digest_pages(pages: &MemPages, h: &mut Sha256) {
    for (id, bytes) in pages.snapshot() {
        h.update(id.to_le_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
}

/// Runs the workload; returns the digest of the pages after every tick, with what the ticks
/// fired and wrote.
fn run() -> (String, usize, usize) {
    let mut pages = MemPages::new(PAGE, range().end() + 1);
    let mut live: Vec<u32> = (0..1_150).collect();
    let mut t = table(live.iter().copied());
    t.reload(&pages).unwrap();
    let mut h = Sha256::new();
    let (mut state, mut paced, mut folded) = (0u64, 0usize, 0usize);
    // Positions are not bounded by `MAX` (only the count of records is): new entries take
    // fresh ones.
    let mut next_new = 2_000u32;
    for seq in 1..=400u64 {
        let time = 500 * i64::try_from(seq).unwrap();
        if seq % 37 == 0 {
            // Removals and additions between ticks: records leave pages and new ones are
            // placed. Every third time every entry is replaced: a save of more changes than a
            // half of the log area holds, which folds synchronously.
            let take = if seq % 111 == 0 { live.len() } else { 25 };
            for _ in 0..take {
                let p = live.remove((seq as usize * 31) % live.len());
                assert!(t.remove(p));
            }
            for _ in 0..take {
                t.add(entry(next_new)).unwrap();
                live.push(next_new);
                next_new += 1;
            }
        }
        if seq == 250 {
            // A restart: the table of the same entries reloads the pages (in the middle of a
            // paced fold or not) and goes on writing the same bytes.
            t = table(live.iter().copied());
            t.reload(&pages).unwrap();
        }
        let out = t
            .evaluate(&Tick::new(C, seq, Some(time)), &mut state, &mut pages)
            .unwrap();
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let s = t.last_persist_stats();
        paced += s.paced_pages;
        folded += usize::from(s.folded);
        h.update(seq.to_le_bytes());
        h.update((out.fired.len() as u64).to_le_bytes());
        digest_pages(&pages, &mut h);
    }
    h.update(state.to_le_bytes());
    let hex = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    (hex, paced, folded)
}

#[test]
fn table_pages_are_main_s() {
    let (got, paced, folded) = run();
    println!("table layout pin digest: {got} (paced pages {paced}, synchronous folds {folded})");
    assert!(paced > 0, "the workload takes paced folds");
    assert!(folded > 0, "the workload takes synchronous folds");
    assert_eq!(got, run().0, "the workload is deterministic");
    assert_eq!(got, PINNED);
}

/// The digest the workload gives on main (551469a).
const PINNED: &str = "a67e05bd3540de61978d830dee2ab6b836138d85c6b914ae4172d3f26a21da35";
