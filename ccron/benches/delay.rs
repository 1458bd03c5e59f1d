//! Cost of delayed one-shot tasks held as data in a `ccron::schedule::Scheduler`, at 10^6 tasks.
//!
//! Tasks are due at `BASE + (i mod 100)` seconds, so a tick on one of those seconds finds 1% of
//! them due. Figures:
//! - insert: one `ScheduleRequest::Create` (admission, id, index insert), averaged over all;
//! - cancel: one `ScheduleRequest::Cancel` by id, averaged over 10^4 spread ids;
//! - idle tick: a tick before anything is due, averaged over 10^4 ticks, next to a baseline
//!   measured in the same run: one linear pass over the same (due, id) pairs, which is what a
//!   scheduler without a due index pays per tick (the printed ratio);
//! - 1% due: a tick on a due second (10^4 handler runs, each task leaving the book), by wall
//!   clock and on CPU (this thread's time on a core, `/proc/thread-self/schedstat`: on a
//!   shared machine the wall clock also counts waiting for a core);
//! - persist (the record log, book layout 5): writing the whole book once, the save after one
//!   change (averaged over 200, with the pages it writes), and the save after each 1%-due tick
//!   (folds included, when the log fills), and the worst fold (a full save that finds a full
//!   save filling the log, so every record page is rewritten first); next to a
//!   baseline measured in the same run: the previous layout's cost (16 multi-page shard blobs
//!   by id mod 16, a change rewriting its whole shard; a 1% tick dirtied all 16), printed as
//!   ratios.
//!
//! Run: `cargo bench -p ccron --bench delay` (about a minute; `CCRON_BENCH_N=100000` for 10^5;
//! `CCRON_BENCH_ROLLBACK=1`: a fallible handler in a set with a clone rollback, issue 26's case;
//! `CCRON_BENCH_PROFILE=N`: only N 1%-due ticks after the insert, for a profiler).

use ccron::Principal;
use std::hint::black_box;
use std::time::{Duration, Instant};

use ccron::codec::{self, BlobKind};
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    HandlerError, Handlers, Limits, NewSchedule, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{Due, MemPages, PageRange, Tick};

const BASE_MS: i64 = 1_000_000_000;

/// A record as the previous layout stored it: (id, (definition, paused, next, runs)).
type OldRecord = (u64, (NewSchedule, bool, Option<Due>, u64));

/// Times `f`, returning its result and the elapsed wall time (benchmarks are drivers: the one
/// place allowed to read the real clock).
#[allow(clippy::disallowed_methods)]
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`, Linux), which excludes
/// waiting for a core on a shared machine; `None` where it cannot be read.
fn on_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn per_op_ns(d: Duration, ops: usize) -> f64 {
    d.as_nanos() as f64 / ops.max(1) as f64
}

const PAGE_SIZE: usize = 4096;

/// The pages and the range the book of `n` tasks is saved into.
fn book_pages(n: usize) -> (MemPages, PageRange) {
    // Records are placed at their largest stored size (every field in its largest form: a next
    // due point, owed runs, owner, version, run state, run history, counters, pending manual
    // runs), well above the bytes a task is encoded to: sized at 1,024 bytes (unused record
    // and log pages cost nothing in `MemPages`); the record pages are 15/32 of what the range
    // keeps after its commit and zone pages (docs/scheduling.md).
    let record_pages = (n * 1_024 / (PAGE_SIZE - 44)) as u32 + 16;
    let num_pages = record_pages * 32 / 15 * 33 / 32 + 64;
    let pages = MemPages::new(PAGE_SIZE, num_pages);
    let range = PageRange::new(0, num_pages).expect("non-empty range");
    (pages, range)
}

fn main() {
    let n: usize = std::env::var("CCRON_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let limits = Limits {
        max_schedules: n + 1,
        budget_per_tick: n,
        ..Limits::default()
    };
    // `CCRON_BENCH_ROLLBACK=1`: issue 26's case, a fallible handler (it returns a `Result`;
    // every run succeeds) in a set with a rollback (a clone of the state before each run).
    let rollback = std::env::var_os("CCRON_BENCH_ROLLBACK").is_some();
    let mut handlers: Handlers<u64> = if rollback {
        let mut h = Handlers::new().with_clone_rollback();
        h.register("expire", |ctx| -> Result<(), HandlerError> {
            *ctx.state += 1;
            Ok(())
        });
        h
    } else {
        let mut h = Handlers::new();
        h.register("expire", |ctx| *ctx.state += 1);
        h
    };
    let mut book = Scheduler::new(1, limits);
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut fired = 0u64;

    // Insert.
    let (_, d_insert) = timed(|| {
        for i in 0..n {
            let due = Due::Time(BASE_MS + (i % 100) as i64 * 1_000);
            let req = ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(due)));
            black_box(
                book.apply(&Principal::Host, req, &handlers, i as u64, Some(0))
                    .ok(),
            );
        }
    });
    assert_eq!(book.len(), n);

    // `CCRON_BENCH_PROFILE=N`: after a full save, only N 1%-due ticks (each followed by a save,
    // as below), printing the mean tick on CPU (for `perf record`), then exit.
    if let Some(ticks) = std::env::var("CCRON_BENCH_PROFILE")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        let (mut pages, range) = book_pages(n);
        book.save_all(&mut pages, range)
            .expect("the book fits its range");
        let mut cpu = Duration::ZERO;
        for s in 0..ticks.clamp(1, 100) {
            let tick = Tick::new(1, 10 + s as u64, Some(BASE_MS + s * 1_000));
            let a = on_cpu().unwrap_or_default();
            black_box(
                book.on_tick(&tick, &mut fired, &mut handlers, &mut outbox)
                    .fired
                    .len(),
            );
            cpu += on_cpu().unwrap_or_default().saturating_sub(a);
            book.save(&mut pages, range)
                .expect("the book fits its range");
        }
        println!(
            "  tick, 1% due     {:>12.3} ms/tick on CPU over {ticks} ticks",
            cpu.as_secs_f64() * 1e3 / ticks.clamp(1, 100) as f64
        );
        return;
    }

    // Cancel 10^4 ids spread over the book (deterministic stride), then put as many back.
    let cancels = (n / 100).max(1);
    let stride = (n / cancels).max(1) as u64;
    let (_, d_cancel) = timed(|| {
        for k in 0..cancels as u64 {
            let id = 1 + k * stride;
            black_box(
                book.apply(
                    &Principal::Host,
                    ScheduleRequest::Cancel(Target::Id(id)),
                    &handlers,
                    0,
                    Some(0),
                )
                .ok(),
            );
        }
    });
    for k in 0..cancels {
        // Back at the cancelled tasks' due points, so each second still holds 1%.
        let i = k * stride as usize;
        let due = Due::Time(BASE_MS + (i % 100) as i64 * 1_000);
        let req = ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(due)));
        book.apply(&Principal::Host, req, &handlers, 0, Some(0))
            .ok();
    }
    assert_eq!(book.len(), n);

    // Idle tick vs a linear pass over the same pairs.
    let idle_ticks = 10_000;
    let mut seq = 10u64;
    let (_, d_idle) = timed(|| {
        for _ in 0..idle_ticks {
            seq += 1;
            let tick = Tick::new(1, seq, Some(BASE_MS - 1));
            let rep = book.on_tick(&tick, &mut fired, &mut handlers, &mut outbox);
            black_box(rep.fired.len());
        }
    });
    let pairs: Vec<(Due, u64)> = (0..n)
        .map(|i| (Due::Time(BASE_MS + (i % 100) as i64 * 1_000), i as u64))
        .collect();
    let linear_passes = 20;
    let (_, d_linear) = timed(|| {
        for _ in 0..linear_passes {
            let tick = Tick::new(1, 1, Some(BASE_MS - 1));
            black_box(pairs.iter().filter(|(d, _)| d.reached_by(&tick)).count());
        }
    });

    // Persist (the record log): the whole book once, then single changes, then the saves after
    // the 1% ticks below.
    let (mut pages, range) = book_pages(n);
    let (page_size, num_pages) = (PAGE_SIZE, range.len());
    let (saved, d_save) = timed(|| book.save_all(&mut pages, range));
    saved.expect("the book fits its range");
    let full_pages = pages.snapshot().len();
    // The first save after the full one (not timed).
    book.apply(
        &Principal::Host,
        ScheduleRequest::Pause(Target::Id(2)),
        &handlers,
        0,
        Some(0),
    )
    .ok();
    book.save(&mut pages, range)
        .expect("the book fits its range");
    let one_changes = 200;
    // Pages written by each single-change save (counted through `CrashAfter`, which never
    // crashes with an unbounded budget).
    let mut counting = ccron::pages::CrashAfter::new(
        std::mem::replace(&mut pages, MemPages::new(page_size, 1)),
        usize::MAX,
    );
    let (mut one_min, mut one_max) = (usize::MAX, 0usize);
    let (_, d_save_one) = {
        let mut total = Duration::ZERO;
        for k in 0..one_changes {
            let req = if k % 2 == 0 {
                ScheduleRequest::Resume(Target::Id(2))
            } else {
                ScheduleRequest::Pause(Target::Id(2))
            };
            book.apply(&Principal::Host, req, &handlers, 0, Some(0))
                .ok();
            let before = counting.writes.len();
            let (saved, d) = timed(|| book.save(&mut counting, range));
            saved.expect("the book fits its range");
            let wrote = counting.writes.len() - before;
            one_min = one_min.min(wrote);
            one_max = one_max.max(wrote);
            total += d;
        }
        ((), total)
    };
    let one_writes = counting.writes.len();
    pages = counting.inner;
    if book.get(2).is_some_and(|s| s.paused) {
        book.apply(
            &Principal::Host,
            ScheduleRequest::Resume(Target::Id(2)),
            &handlers,
            0,
            Some(0),
        )
        .ok();
        book.save(&mut pages, range)
            .expect("the book fits its range");
    }

    // Ticks with 1% due: five consecutive due seconds, each followed by a save.
    let due_ticks = 5;
    let before = fired;
    let mut d_due = Duration::ZERO;
    let mut cpu_due = Some(Duration::ZERO);
    let mut d_tick_save = Duration::ZERO;
    for s in 0..due_ticks {
        seq += 1;
        let tick = Tick::new(1, seq, Some(BASE_MS + s * 1_000));
        let cpu_before = on_cpu();
        let (_, d) = timed(|| {
            black_box(
                book.on_tick(&tick, &mut fired, &mut handlers, &mut outbox)
                    .fired
                    .len(),
            )
        });
        d_due += d;
        cpu_due = match (cpu_due, cpu_before, on_cpu()) {
            (Some(total), Some(a), Some(b)) => Some(total + b.saturating_sub(a)),
            _ => None,
        };
        let (saved, d) = timed(|| book.save(&mut pages, range));
        saved.expect("the book fits its range");
        d_tick_save += d;
    }
    let runs = (fired - before) as usize;
    assert_eq!(runs, due_ticks as usize * n / 100);
    let reloaded = Scheduler::load(1, limits, &pages, range).expect("the pages reload");
    assert!(reloaded == book, "the saved pages reload as the book");
    drop(reloaded);

    // The worst fold: full saves until the log has no room for the next one, which first folds
    // the whole log (a full save is in it: every record page rewritten) into the record pages.
    let records_first = range.end() - ccron::schedule::record_pages_of(range);
    let mut counting = ccron::pages::CrashAfter::new(
        std::mem::replace(&mut pages, MemPages::new(page_size, 1)),
        usize::MAX,
    );
    let mut fold = None;
    // The log area grows with the range (sized for the records' largest form above), so it
    // holds a few full saves before one must fold.
    for _ in 0..32 {
        let before = counting.writes.len();
        let (saved, d) = timed(|| book.save_all(&mut counting, range));
        saved.expect("the book fits its range");
        let wrote = &counting.writes[before..];
        let folded = wrote.iter().filter(|id| **id >= records_first).count();
        if folded > 0 {
            fold = Some((d, folded, wrote.len()));
            break;
        }
    }
    let (d_fold, fold_record_pages, fold_writes) = fold.expect("a full save folds");
    pages = counting.inner;
    let reloaded = Scheduler::load(1, limits, &pages, range).expect("the pages reload");
    assert!(reloaded == book, "the folded pages reload as the book");
    drop(reloaded);
    drop(pages);

    // Baseline measured in the same run: the previous layout (16 multi-page shard blobs by
    // id mod 16, each the records' (id, definition, paused, next, runs) list, rewritten whole
    // when one of its records changed; one pass over the records grouped the dirty shards).
    let shards = 16u64;
    let shard_pages = (n * 100 / (page_size - 32)) as u32 / shards as u32 + 2;
    let mut old_pages = MemPages::new(page_size, shard_pages * shards as u32);
    let mut old_write = |dirty: &[u64]| {
        let mut groups: Vec<Vec<OldRecord>> = vec![Vec::new(); shards as usize];
        for id in book.ids() {
            if dirty.contains(&(id % shards))
                && let Some(info) = book.get(id)
            {
                groups[(id % shards) as usize]
                    .push((id, (info.schedule, info.paused, info.next, info.runs)));
            }
        }
        for &k in dirty {
            let part = PageRange::new(k as u32 * shard_pages, shard_pages).expect("shard part");
            let shard = (k as u32, std::mem::take(&mut groups[k as usize]));
            codec::save(&mut old_pages, part, BlobKind::ScheduleBook, &shard)
                .expect("the shard fits its part");
        }
    };
    let all_shards: Vec<u64> = (0..shards).collect();
    let (_, d_old_all) = timed(|| old_write(&all_shards));
    let old_one_reps = 5;
    let (_, d_old_one) = timed(|| {
        for k in 0..old_one_reps {
            old_write(&[k % shards]);
        }
    });

    let idle_ns = per_op_ns(d_idle, idle_ticks);
    let linear_ns = per_op_ns(d_linear, linear_passes);
    println!("delayed tasks, n = {n}");
    println!(
        "  insert           {:>12.0} ns/task",
        per_op_ns(d_insert, n)
    );
    println!(
        "  cancel           {:>12.0} ns/task",
        per_op_ns(d_cancel, cancels)
    );
    println!("  idle tick        {:>12.0} ns/tick", idle_ns);
    println!(
        "  linear pass      {:>12.0} ns/tick  (baseline; ratio linear/indexed {:.0}x)",
        linear_ns,
        linear_ns / idle_ns.max(1.0)
    );
    println!(
        "  tick, 1% due     {:>12.3} ms/tick  ({} runs/tick, {:.0} ns/run)",
        d_due.as_secs_f64() * 1e3 / due_ticks as f64,
        runs / due_ticks as usize,
        per_op_ns(d_due, runs)
    );
    if let Some(cpu) = cpu_due {
        println!(
            "  tick, 1% due     {:>12.3} ms/tick on CPU ({:.0} ns/run; wall time less waiting for a core)",
            cpu.as_secs_f64() * 1e3 / due_ticks as f64,
            per_op_ns(cpu, runs)
        );
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let new_full = ms(d_save);
    let new_one = ms(d_save_one) / one_changes as f64;
    let new_tick = ms(d_tick_save) / due_ticks as f64;
    let old_all = ms(d_old_all);
    let old_one = ms(d_old_one) / old_one_reps as f64;
    println!(
        "  persist, full    {:>12.1} ms       ({full_pages} pages of {page_size} B written, range {num_pages})",
        new_full
    );
    println!(
        "  persist, 1 change{:>12.3} ms       (log segment + commit page; old layout {:.1} ms, ratio {:.0}x)",
        new_one,
        old_one,
        old_one / new_one.max(1e-9)
    );
    println!(
        "  persist, 1 change: {:.2} pages/save over {one_changes} saves (min {one_min}, max {one_max}; book layout 4 wrote 3)",
        one_writes as f64 / one_changes as f64
    );
    println!(
        "  persist, 1% tick {:>12.1} ms/save  (after each due tick; old layout, all 16 shards {:.1} ms, ratio {:.1}x)",
        new_tick,
        old_all,
        old_all / new_tick.max(1e-9)
    );
    println!(
        "  persist, full vs old full rewrite: {:.1} ms vs {:.1} ms",
        new_full, old_all
    );
    println!(
        "  persist, fold    {:>12.1} ms       (a full save folding a log holding a full save first: {fold_record_pages} record pages rewritten, {fold_writes} pages written)",
        ms(d_fold)
    );
}
