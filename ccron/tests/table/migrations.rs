//! Every cron table layout earlier releases wrote (1: one blob or alternate halves; 2: commit
//! page, change log, record pages) loads and is migrated to layout 3 by the next save:
//! crash-atomic at every page write, byte-identical on every replica. The pages are fixtures
//! the old code wrote (`fixtures/README.md`).

use ccron::{CronEntry, CronTable, MemPages, PageRange, Periodic, ReservedPages, Tick};

type Crashing = ccron::pages::CrashAfter<MemPages>;

fn fixture(name: &str) -> (MemPages, Vec<Option<i64>>) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let text = std::fs::read_to_string(format!("{dir}{name}.pages")).unwrap();
    let mut lines = text.lines();
    let head: Vec<usize> = lines
        .next()
        .unwrap()
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    let mut pages = MemPages::new(head[0], head[1] as u32);
    for line in lines {
        let (id, hex) = line.split_once(' ').unwrap();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        pages.save(id.parse().unwrap(), &bytes).unwrap();
    }
    let expect = std::fs::read_to_string(format!("{dir}{name}.expect"))
        .unwrap()
        .lines()
        .map(|l| {
            let v = l.split_once(' ').unwrap().1;
            v.strip_prefix("Some(")
                .map(|x| x.trim_end_matches(')').parse().unwrap())
        })
        .collect();
    (pages, expect)
}

/// The generator's table: `n` periodic entries, entry `pos` every `1 + pos mod 5` seconds.
fn table(max: u32, range: PageRange, n: u32) -> CronTable<u64> {
    let mut t = CronTable::with_persistence(3, range, max);
    for pos in 0..n {
        let period = 1_000 * (1 + i64::from(pos % 5));
        t.add(CronEntry::periodic(
            pos,
            Periodic::every_ms(period).unwrap(),
            |ctx| *ctx.state += 1,
        ))
        .unwrap();
    }
    t
}

fn schedule(t: &CronTable<u64>, n: u32) -> Vec<Option<i64>> {
    (0..n).map(|p| t.next_due_ms(p)).collect()
}

/// (fixture, max, range pages, entries, the agreed time of its next tick).
const FIXTURES: [(&str, u32, u32, u32, i64); 5] = [
    ("table_v1_a", 1_000, 16, 600, 1_000),
    ("table_v1_b", 1_000, 16, 600, 2_000),
    ("table_v1_inline", 4, 1, 4, 3_000),
    ("table_v2", 1_000, 16, 600, 40_000),
    ("table_v2_inline", 4, 1, 4, 3_000),
];

/// Each older layout reloads as the old code left it; the next tick's save migrates it: a crash
/// at any page write of that save reloads as the schedule before or after the tick, and the
/// replica that re-executes the tick writes the pages of one that never crashed; two replicas
/// migrate to identical pages; the migrated pages reload equal, and further ticks (a paced
/// fold through the stale record pages included) keep reloading equal.
#[test]
fn every_older_layout_loads_and_migrates_crash_atomically() {
    for (name, max, len, n, at) in FIXTURES {
        let range = PageRange::new(0, len).unwrap();
        let (pages, expect) = fixture(name);
        let mut t = table(max, range, n);
        t.reload(&pages).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(schedule(&t, n), expect, "{name}: loaded");
        let tick = Tick::new(3, 1_000, Some(at));
        let run = |pages: MemPages, budget: usize| {
            let mut t = table(max, range, n);
            t.reload(&pages).unwrap();
            let mut w = Crashing::new(pages, budget);
            let mut s = 0;
            let out = t.evaluate(&tick, &mut s, &mut w).unwrap();
            (t, w, out)
        };
        let (a, wa, out) = run(pages.clone(), usize::MAX);
        assert!(
            out.errors.is_empty() && out.persisted,
            "{name}: {:?}",
            out.errors
        );
        let new = schedule(&a, n);
        assert_ne!(new, expect, "{name}: the tick changed the schedule");
        let (_, wb, _) = run(pages.clone(), usize::MAX);
        assert!(
            wa.inner.snapshot() == wb.inner.snapshot(),
            "{name}: replicas migrate to different pages"
        );
        let mut again = table(max, range, n);
        again.reload(&wa.inner).unwrap();
        assert_eq!(schedule(&again, n), new, "{name}: migrated");
        for k in 0..wa.writes.len() {
            let (_, crashed, out) = run(pages.clone(), k);
            assert!(!out.errors.is_empty(), "{name}: k = {k}: the save fails");
            let mut after = crashed.inner;
            let mut r = table(max, range, n);
            r.reload(&after)
                .unwrap_or_else(|e| panic!("{name}: crash after {k} writes: {e}"));
            let got = schedule(&r, n);
            if got == expect {
                let mut s = 0;
                let out = r.evaluate(&tick, &mut s, &mut after).unwrap();
                assert!(out.errors.is_empty(), "{name}: k = {k}: {:?}", out.errors);
            } else {
                assert_eq!(got, new, "{name}: k = {k}: neither old nor new");
            }
            assert!(
                after.snapshot() == wa.inner.snapshot(),
                "{name}: k = {k}: pages differ from a replica that never crashed"
            );
        }
        // On: ticks every second, each persisted and reloaded.
        let mut pages = wa.inner;
        let mut t = a;
        let mut paced = 0;
        for k in 1..=60i64 {
            let mut s = 0;
            let tick = Tick::new(3, 1_000 + k as u64, Some(at + 1_000 * k));
            let out = t.evaluate(&tick, &mut s, &mut pages).unwrap();
            assert!(out.errors.is_empty(), "{name}: {:?}", out.errors);
            paced += usize::from(t.last_persist_stats().paced_pages > 0);
            let mut r = table(max, range, n);
            r.reload(&pages).unwrap();
            assert_eq!(schedule(&r, n), schedule(&t, n), "{name}: tick {k}");
        }
        if len > 1 {
            assert!(paced > 0, "{name}: the log folded, paced");
        }
    }
}
