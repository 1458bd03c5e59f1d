//! Cost of delayed one-shot tasks held as data in a `ccron::schedule::Scheduler`, at 10^6 tasks.
//!
//! Tasks are due at `BASE + (i mod 100)` seconds, so a tick on one of those seconds finds 1% of
//! them due. Figures:
//! - insert: one `ScheduleRequest::Create` (admission, id, index insert), averaged over all;
//! - cancel: one `ScheduleRequest::Cancel` by id, averaged over 10^4 spread ids;
//! - idle tick: a tick before anything is due, averaged over 10^4 ticks, next to a baseline
//!   measured in the same run: one linear pass over the same (due, id) pairs, which is what a
//!   scheduler without a due index pays per tick (the printed ratio);
//! - 1% due: a tick on a due second (10^4 handler runs, each task leaving the book);
//! - persist: writing the whole book to reserved pages once (multi-page codec, sharded), and
//!   the incremental save after one change (the header and one of the 16 shards).
//!
//! Run: `cargo bench -p ccron --bench delay` (about a minute; `CCRON_BENCH_N=100000` for 10^5).

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Scheduler, Target, Timing};
use ccron::{Due, MemPages, PageRange, Tick};

const BASE_MS: i64 = 1_000_000_000;

/// Times `f`, returning its result and the elapsed wall time (benchmarks are drivers: the one
/// place allowed to read the real clock).
#[allow(clippy::disallowed_methods)]
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn per_op_ns(d: Duration, ops: usize) -> f64 {
    d.as_nanos() as f64 / ops.max(1) as f64
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
    let mut handlers: Handlers<u64> = Handlers::new();
    handlers.register("expire", |ctx| *ctx.state += 1);
    let mut book = Scheduler::new(1, limits);
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut fired = 0u64;

    // Insert.
    let (_, d_insert) = timed(|| {
        for i in 0..n {
            let due = Due::Time(BASE_MS + (i % 100) as i64 * 1_000);
            let req = ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(due)));
            black_box(book.apply(req, &handlers, i as u64, Some(0)).ok());
        }
    });
    assert_eq!(book.len(), n);

    // Cancel 10^4 ids spread over the book (deterministic stride), then put as many back.
    let cancels = (n / 100).max(1);
    let stride = (n / cancels).max(1) as u64;
    let (_, d_cancel) = timed(|| {
        for k in 0..cancels as u64 {
            let id = 1 + k * stride;
            black_box(
                book.apply(
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
        book.apply(req, &handlers, 0, Some(0)).ok();
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

    // Persist: the whole book once, then what one more insert dirtied (header + one shard).
    let page_size = 4096;
    let shards = limits.persist_shards + 1;
    let num_pages = ((n * 128 / (page_size - 32)) as u32 / shards + 2) * shards;
    let mut pages = MemPages::new(page_size, num_pages);
    let range = PageRange::new(0, num_pages).expect("non-empty range");
    let (saved, d_save) = timed(|| book.save_all(&mut pages, range));
    saved.expect("the book fits its range");
    let req = ScheduleRequest::Create(NewSchedule::new("expire", Timing::At(Due::Time(0))));
    let extra = book.apply(req, &handlers, 0, Some(0)).ok().flatten();
    let (saved, d_save_one) = timed(|| book.save(&mut pages, range));
    saved.expect("the book fits its range");
    if let Some(id) = extra {
        book.apply(
            ScheduleRequest::Cancel(Target::Id(id)),
            &handlers,
            0,
            Some(0),
        )
        .ok();
        book.save(&mut pages, range)
            .expect("the book fits its range");
    }

    // Ticks with 1% due: five consecutive due seconds.
    let due_ticks = 5;
    let before = fired;
    let (_, d_due) = timed(|| {
        for s in 0..due_ticks {
            seq += 1;
            let tick = Tick::new(1, seq, Some(BASE_MS + s * 1_000));
            black_box(
                book.on_tick(&tick, &mut fired, &mut handlers, &mut outbox)
                    .fired
                    .len(),
            );
        }
    });
    let runs = (fired - before) as usize;
    assert_eq!(runs, due_ticks as usize * n / 100);

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
    println!(
        "  persist, full    {:>12.1} ms       ({} pages of {page_size} B, {} shards)",
        d_save.as_secs_f64() * 1e3,
        num_pages,
        limits.persist_shards
    );
    println!(
        "  persist, 1 change{:>12.1} ms       (header + one shard)",
        d_save_one.as_secs_f64() * 1e3
    );
}
