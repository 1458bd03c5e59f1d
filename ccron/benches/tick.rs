//! Cost of one tick: indexed evaluation vs the linear-scan reference, measured in the same run.
//!
//! Tables of 10^3, 10^5 and 10^6 periodic entries (period 100 s, starts spread over 100 one-second
//! slots, so a tick on a slot finds 1% of the entries due). Two cases per size:
//! - nothing due: a repeated tick at a time between slots;
//! - 1% due: a tick on the next slot (this includes the schedule write of table layout 2: the
//!   changed records appended to the log and the commit page; now and then a fold of the log
//!   into the record pages changed since the last fold). Measured in interleaved rounds: each
//!   round runs indexed ticks with a few linear ticks spread among them, so both paths see the
//!   same load of the shared machine. A round's ratio is its mean linear tick over its mean
//!   indexed tick, by wall clock and by this thread's CPU time (which excludes waiting for a
//!   core); the bench prints the median ratio over the rounds, its range and the worst round.
//!   The mean, p50, p99 and worst indexed tick are printed, by wall clock and on CPU, and the
//!   pages written.
//!
//! The table's range is twice [`CronTable::pages_needed`] (the extra pages lengthen the log, so
//! folds are rarer). For comparison the bench also times what layout 1 did at every such tick:
//! write the whole schedule as one blob.
//!
//! Both paths use the same slab of entries; the indexed one takes the due buckets of the due
//! index, the linear one asks every entry. The 10^6 row is checked against issue 10's target
//! (1% due <= 10 ms, and the median on-CPU ratio over the rounds >= 20x) and the verdict
//! printed with the wall-clock median beside it.
//!
//! Run: `cargo bench -p ccron --bench tick` (a few minutes; `CCRON_BENCH_MAX=100000` stops at
//! 10^5; `CCRON_BENCH_ROUNDS=1` prints every round; `CCRON_BENCH_PROFILE=N` runs only N indexed
//! 1%-due ticks at the largest size, for `perf record` or a per-tick callgrind profile, see
//! `profiled_tick`). Prints one row per size and case with the ratio
//! linear / indexed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccron::{CronEntry, CronTable, MemPages, PageRange, Periodic, Tick};

const C: u32 = 1;
const PERIOD_MS: i64 = 100_000;
const SLOT_MS: i64 = 1_000;
const BASE_MS: i64 = 1_000_000_000;

struct Bench {
    table: CronTable<u64>,
    pages: MemPages,
    fires: u64,
    seq: u64,
    /// Index of the next slot to tick (slot k is at BASE + k * SLOT_MS).
    slot: i64,
}

impl Bench {
    fn new(n: u32) -> Self {
        let page_size = 4096;
        let num_pages = 2 * CronTable::<u64>::pages_needed(n, page_size).expect("4 KiB pages");
        let range = PageRange::new(0, num_pages).expect("non-empty range");
        let pages = MemPages::new(page_size, num_pages);
        let mut table = CronTable::with_persistence(C, range, n);
        table.reload(&pages).expect("empty pages reload");
        for i in 0..n {
            let start = BASE_MS + i64::from(i % 100) * SLOT_MS;
            let schedule = Periodic::every_ms(PERIOD_MS)
                .expect("positive period")
                .starting_at(start);
            table
                .add(CronEntry::<u64>::periodic(i, schedule, |ctx| {
                    *ctx.state += 1
                }))
                .expect("free position");
        }
        Self {
            table,
            pages,
            fires: 0,
            seq: 0,
            slot: 0,
        }
    }

    fn tick(&mut self, time_ms: i64, linear: bool) -> usize {
        self.seq += 1;
        let t = Tick::new(C, self.seq, Some(time_ms));
        let out = if linear {
            self.table
                .evaluate_linear(&t, &mut self.fires, &mut self.pages)
        } else {
            self.table.evaluate(&t, &mut self.fires, &mut self.pages)
        };
        out.expect("tick for the table's component").fired.len()
    }

    /// Ticks the next slot (1% due).
    fn tick_slot(&mut self, linear: bool) -> usize {
        let time = BASE_MS + self.slot * SLOT_MS;
        self.slot += 1;
        self.tick(time, linear)
    }

    /// A tick between the last slot and the next: nothing is due.
    fn tick_idle(&mut self, linear: bool) -> usize {
        let time = BASE_MS + self.slot * SLOT_MS - SLOT_MS / 2;
        self.tick(time, linear)
    }
}

/// This thread's (on-CPU, waiting-for-a-CPU) nanoseconds so far, from Linux's
/// `/proc/thread-self/schedstat`; `None` elsewhere. Tells a slow tick that ran long from one
/// that was preempted (waited for a core of the shared machine).
fn sched_ns() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut it = s.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

// The benchmark is a driver: reading the real clock is its whole point.
#[allow(clippy::disallowed_methods)]
fn time_per_iter(iters: u32, mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let start = Instant::now();
    let mut fired = 0;
    for _ in 0..iters {
        fired += black_box(f());
    }
    (start.elapsed() / iters, fired)
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

fn main() {
    let max: u32 = std::env::var("CCRON_BENCH_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // `CCRON_BENCH_PROFILE=N`: only N indexed 1%-due ticks at the largest size (for `perf
    // record`).
    let profile_ticks: Option<u32> = std::env::var("CCRON_BENCH_PROFILE")
        .ok()
        .and_then(|v| v.parse().ok());
    // `CCRON_BENCH_ROUNDS=1`: print every round of the 1%-due case.
    let print_rounds = std::env::var_os("CCRON_BENCH_ROUNDS").is_some();
    println!("ccron tick cost: indexed evaluate vs linear-scan reference (same table, same run)");
    println!(
        "{:>9} | {:<9} | {:>8} | {:>12} | {:>12} | {:>9}",
        "entries", "case", "fired", "indexed", "linear", "ratio"
    );
    for n in [1_000u32, 100_000, 1_000_000] {
        if n > max || profile_ticks.is_some_and(|_| n < max) {
            continue;
        }
        let mut b = Bench::new(n);
        // Warm up: one full period of slots, so every entry has run once and has a record;
        // then on until the log appends have written more pages than the table's range holds
        // (the active log has gone through both halves of the log area), so that the
        // measured ticks overwrite log pages (the steady state of a long-running replica)
        // rather than fault in the fresh memory of MemPages' first pass over the log. (Before
        // the paced fold this waited for a tick writing twice the pages of an ordinary one: a
        // paced fold never does, so the warm-up ran into its cap of 5,000 ticks.)
        let range_pages = b.table.persistence().expect("configured").range.len() as usize;
        let (mut warm, mut appended) = (0, 0);
        while warm < 5_000 && (warm < 100 || appended <= range_pages) {
            b.tick_slot(false);
            warm += 1;
            let s = b.table.last_persist_stats();
            // Log pages: all but the paced fold's record pages and the commit page.
            appended += s.writes.saturating_sub(s.paced_pages + 1);
        }
        println!("{n:>9} | warm-up: {warm} indexed ticks, until the log has gone through its area");
        let b_idle = b.tick_idle(false);
        assert_eq!(b_idle, 0, "idle tick fires nothing");
        if let Some(ticks) = profile_ticks {
            // Only indexed 1%-due ticks, for `perf record` or callgrind (each tick is one call
            // of `profiled_tick`: `valgrind --tool=callgrind --dump-after='*profiled_tick*'`
            // writes one profile per tick; `CCRON_BENCH_TICKS=1` prints each tick's pages to
            // match them).
            let print_ticks = std::env::var_os("CCRON_BENCH_TICKS").is_some();
            let mut fired = 0;
            for i in 0..ticks {
                fired += profiled_tick(&mut b);
                if print_ticks {
                    let s = b.table.last_persist_stats();
                    println!(
                        "{n:>9} | profile tick {i}: {} pages written, {} paced, folded {}",
                        s.writes, s.paced_pages, s.folded
                    );
                }
            }
            println!("{n:>9} | profile: {ticks} indexed 1%-due ticks, {fired} fires");
            continue;
        }

        let (idle_iters, lin_idle_iters) = match n {
            1_000 => (200_000, 2_000),
            100_000 => (200_000, 20),
            _ => (200_000, 5),
        };
        let (ix_idle, f1) = time_per_iter(idle_iters, || b.tick_idle(false));
        let (lin_idle, f2) = time_per_iter(lin_idle_iters, || b.tick_idle(true));
        assert_eq!(f1 + f2, 0);
        row(n, "nothing", 0, ix_idle, lin_idle);

        // 1% due: interleaved rounds. Each round runs `ix_per_round` indexed ticks and
        // `lin_per_round` linear ticks spread among them, so both paths see the same load on
        // the shared machine; a round's ratio is the mean linear tick over the mean indexed
        // tick of that round (wall clock, and on-CPU time of this thread), and the verdict
        // takes the median over the rounds.
        let (rounds, ix_per_round, lin_per_round) = match n {
            1_000 => (11usize, 200usize, 20usize),
            100_000 => (11, 40, 4),
            _ => (31, 30, 2),
        };
        let due_iters = rounds * ix_per_round;
        let lin_due_iters = rounds * lin_per_round;
        let stride = ix_per_round / lin_per_round;
        // Per indexed tick: (time, pages written), to tell a fold (many pages) from other
        // outliers.
        let mut each = Vec::with_capacity(due_iters);
        // Per indexed tick: (on-CPU time, pages written).
        let mut each_cpu = Vec::with_capacity(due_iters);
        // On-CPU and waiting time of the slowest indexed tick (preemption or work).
        let mut worst_sched = None;
        let mut worst = Duration::ZERO;
        let (mut f1, mut f2) = (0, 0);
        let (mut writes, mut max_writes) = (0, 0);
        let mut per_round = Vec::with_capacity(rounds);
        let mut totals = [Measured::default(); 2];
        for _ in 0..rounds {
            let mut sums = [Measured::default(); 2];
            let mut lin_done = 0;
            for j in 0..ix_per_round {
                if j % stride == stride / 2 && lin_done < lin_per_round {
                    let (m, f) = measure(|| b.tick_slot(true));
                    sums[1].add(m);
                    f2 += f;
                    lin_done += 1;
                }
                let before = sched_ns();
                let (m, f) = measure(|| b.tick_slot(false));
                if m.wall >= worst
                    && let (Some(a), Some(z)) = (before, sched_ns())
                {
                    worst_sched = Some((z.0.saturating_sub(a.0), z.1.saturating_sub(a.1)));
                }
                worst = worst.max(m.wall);
                sums[0].add(m);
                f1 += f;
                let w = b.table.last_persist_writes();
                writes += w;
                max_writes = max_writes.max(w);
                each.push((m.wall, w));
                each_cpu.push((m.cpu, w));
            }
            per_round.push(sums);
            totals[0].add(sums[0]);
            totals[1].add(sums[1]);
        }
        let mut sorted = each.clone();
        sorted.sort();
        let p50 = sorted[sorted.len() / 2].0;
        let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)].0;
        let (worst_at, (_, worst_pages)) = each
            .iter()
            .enumerate()
            .max_by_key(|(_, (d, _))| *d)
            .map(|(i, x)| (i, *x))
            .unwrap_or((0, (Duration::ZERO, 0)));
        let mut slowest: Vec<(Duration, usize)> =
            each.iter().enumerate().map(|(i, (d, _))| (*d, i)).collect();
        slowest.sort_by(|a, b| b.cmp(a));
        let slowest: Vec<String> = slowest
            .iter()
            .take(6)
            .map(|(d, i)| format!("#{i} {}", fmt(*d)))
            .collect();
        println!(
            "{:>9} | 1% due: indexed tick p50 {} p99 {}; worst is tick {worst_at} of {due_iters}, {worst_pages} pages written; slowest: {}",
            "",
            fmt(p50),
            fmt(p99),
            slowest.join(", "),
        );
        // The same on CPU (this thread's CPU time: what the tick costs, without the waits
        // for a core of the shared machine).
        let mut sorted_cpu = each_cpu.clone();
        sorted_cpu.sort();
        let cpu_at = |q: usize| sorted_cpu[(sorted_cpu.len() * q / 100).min(sorted_cpu.len() - 1)];
        let (cpu_max, cpu_max_pages) = sorted_cpu.last().copied().unwrap_or_default();
        let slowest_cpu: Vec<String> = sorted_cpu
            .iter()
            .rev()
            .take(6)
            .map(|(d, w)| format!("{} ({w} pages)", fmt(*d)))
            .collect();
        println!(
            "{:>9} | 1% due: indexed tick on CPU p50 {} p99 {} max {} ({cpu_max_pages} pages written); slowest on CPU: {}",
            "",
            fmt(cpu_at(50).0),
            fmt(cpu_at(99).0),
            fmt(cpu_max),
            slowest_cpu.join(", "),
        );
        if let Some((run, wait)) = worst_sched {
            println!(
                "{:>9} | 1% due: slowest tick on CPU {}, waiting for a CPU {} (schedstat)",
                "",
                fmt(Duration::from_nanos(run)),
                fmt(Duration::from_nanos(wait)),
            );
        }
        assert_eq!(
            f1 / due_iters,
            f2 / lin_due_iters,
            "both paths fire 1% per slot"
        );
        let ix_due = totals[0].wall / due_iters as u32;
        let lin_due = totals[1].wall / lin_due_iters as u32;
        row(n, "1% due", f1 / due_iters, ix_due, lin_due);
        // A round's sums of `lin_per_round` linear and `ix_per_round` indexed ticks.
        let (li, ix) = (lin_per_round as f64, ix_per_round as f64);
        let round_ratio = |lin: Duration, idx: Duration| ratio(lin, idx) * ix / li;
        if print_rounds {
            for (i, r) in per_round.iter().enumerate() {
                println!(
                    "{:>9} | round {i}: indexed {} ({} on CPU), linear {} ({} on CPU): {:.1}x, {:.1}x on CPU",
                    "",
                    fmt(r[0].wall / ix_per_round as u32),
                    fmt(r[0].cpu / ix_per_round as u32),
                    fmt(r[1].wall / lin_per_round as u32),
                    fmt(r[1].cpu / lin_per_round as u32),
                    round_ratio(r[1].wall, r[0].wall),
                    round_ratio(r[1].cpu, r[0].cpu),
                );
            }
        }
        let wall = Spread::of(per_round.iter().map(|r| round_ratio(r[1].wall, r[0].wall)));
        let cpu = Spread::of(per_round.iter().map(|r| round_ratio(r[1].cpu, r[0].cpu)));
        println!(
            "{:>9} | 1% due, {rounds} interleaved rounds of {ix_per_round} indexed + {lin_per_round} linear ticks: ratio per round median {:.1}x (quartiles {:.1}-{:.1}x, min {:.1}x, max {:.1}x); on CPU median {:.1}x (quartiles {:.1}-{:.1}x, min {:.1}x, max {:.1}x)",
            "",
            wall.median,
            wall.q1,
            wall.q3,
            wall.min,
            wall.max,
            cpu.median,
            cpu.q1,
            cpu.q3,
            cpu.min,
            cpu.max,
        );
        let ix_cpu = totals[0].cpu / due_iters as u32;
        let lin_cpu = totals[1].cpu / lin_due_iters as u32;
        let (lo, lo_r) = per_round
            .iter()
            .map(|r| (round_ratio(r[1].wall, r[0].wall), r))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(x, r)| (x, *r))
            .unwrap_or_default();
        println!(
            "{:>9} | 1% due: mean tick on CPU indexed {} linear {}; worst round {lo:.1}x: indexed {} linear {} (mean wall)",
            "",
            fmt(ix_cpu),
            fmt(lin_cpu),
            fmt(lo_r[0].wall / ix_per_round as u32),
            fmt(lo_r[1].wall / lin_per_round as u32),
        );
        if n == 1_000_000 {
            println!(
                "{:>9} | issue 26 target, worst 1%-due tick at 10^6 <= 10 ms: {} on CPU ({} max on CPU over {due_iters} ticks; wall clock max {})",
                "",
                if cpu_max <= Duration::from_millis(10) {
                    "met"
                } else {
                    "NOT met"
                },
                fmt(cpu_max),
                fmt(worst),
            );
            // The verdict on the on-CPU ratio: waiting for a core of the shared machine is not
            // the tick's cost and falls unevenly on a 1 ms and a 45 ms tick.
            let met = ix_due <= Duration::from_millis(10) && cpu.median >= 20.0;
            println!(
                "{:>9} | issue 10 target, 1% due at 10^6: <= 10 ms and >= 20x the scan: {} ({} mean, {} on CPU; on CPU median {:.1}x over {rounds} rounds, worst round {:.1}x; wall clock median {:.1}x, worst round {:.1}x)",
                "",
                if met { "met" } else { "NOT met" },
                fmt(ix_due),
                fmt(ix_cpu),
                cpu.median,
                cpu.min,
                wall.median,
                wall.min,
            );
        }
        println!(
            "{:>9} | 1% due: worst indexed tick {} ; pages written per tick: mean {}, max {} (of {})",
            "",
            fmt(worst),
            writes / due_iters,
            max_writes,
            b.table.persistence().expect("configured").range.len()
        );
        b.table.check_invariants().expect("table invariants");

        // What table layout 1 wrote at every such tick: the whole schedule (n records) as one
        // blob over the range.
        let schedule = ccron::periodic::PersistedSchedule {
            component_id: C,
            records: (0..n)
                .map(|p| (p, ccron::Due::Time(BASE_MS + i64::from(p))))
                .collect(),
        };
        let range = b.table.persistence().expect("configured").range;
        let mut scratch = b.pages.clone();
        let (write, _) = time_per_iter(4, || {
            ccron::codec::save(
                &mut scratch,
                range,
                ccron::codec::BlobKind::PeriodicSchedule,
                &schedule,
            )
            .expect("fits the range");
            0
        });
        println!(
            "{:>9} | layout 1's whole-schedule write alone ({n} records): {}",
            "",
            fmt(write)
        );
    }
}

/// One indexed 1%-due tick, not inlined: the unit a per-tick profile dumps at.
#[inline(never)]
fn profiled_tick(b: &mut Bench) -> usize {
    b.tick_slot(false)
}

/// Wall-clock and on-CPU time of some ticks.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    wall: Duration,
    cpu: Duration,
}

impl Measured {
    fn add(&mut self, m: Measured) {
        self.wall += m.wall;
        self.cpu += m.cpu;
    }
}

/// This thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`: excludes time spent waiting for
/// a core of the shared machine); zero where it is not available.
#[cfg(target_os = "linux")]
fn cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

#[cfg(not(target_os = "linux"))]
fn cpu_now() -> Duration {
    Duration::ZERO
}

/// Times one call of `f`: wall clock and on-CPU.
// The benchmark is a driver: reading the real clock is its whole point.
#[allow(clippy::disallowed_methods)]
fn measure(f: impl FnOnce() -> usize) -> (Measured, usize) {
    let cpu = cpu_now();
    let start = Instant::now();
    let fired = black_box(f());
    let wall = start.elapsed();
    let cpu = cpu_now().saturating_sub(cpu);
    (Measured { wall, cpu }, fired)
}

fn ratio(linear: Duration, indexed: Duration) -> f64 {
    linear.as_secs_f64() / indexed.as_secs_f64().max(1e-12)
}

/// Median, quartiles and range of per-round ratios.
struct Spread {
    median: f64,
    q1: f64,
    q3: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: impl Iterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.collect();
        v.sort_by(f64::total_cmp);
        let median = match v.len() {
            0 => 0.0,
            l if l % 2 == 1 => v[l / 2],
            l => (v[l / 2 - 1] + v[l / 2]) / 2.0,
        };
        let q = |f: usize| {
            v.get((v.len().saturating_sub(1)) * f / 4)
                .copied()
                .unwrap_or(0.0)
        };
        Self {
            median,
            q1: q(1),
            q3: q(3),
            min: v.first().copied().unwrap_or(0.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

fn row(n: u32, case: &str, fired: usize, indexed: Duration, linear: Duration) {
    let ratio = linear.as_secs_f64() / indexed.as_secs_f64().max(1e-12);
    println!(
        "{n:>9} | {case:<9} | {fired:>8} | {:>12} | {:>12} | {ratio:>8.0}x",
        fmt(indexed),
        fmt(linear)
    );
}
