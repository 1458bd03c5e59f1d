//! Costs of cron schedules: admission (parse + never-fires scan), `next_after` in UTC and in a
//! DST zone, building zone rules from the compiled tz database, and `latest_in` (the catch-up
//! search for the most recent missed instants) against walking every missed instant.
//!
//! Run: `cargo bench -p ccron --bench cron_next`.

use std::hint::black_box;

use ccron::cron::{CronSchedule, ZoneRules};
use criterion::{Criterion, criterion_group, criterion_main};

/// 2026-03-28T12:00:00Z, the day before Berlin springs forward.
const T_MS: i64 = 1_774_699_200_000;

fn admission(c: &mut Criterion) {
    c.bench_function("parse common pattern (*/15 9-17 * * MON-FRI)", |b| {
        b.iter(|| CronSchedule::parse(black_box("*/15 9-17 * * MON-FRI")))
    });
    c.bench_function("parse rare pattern (0 0 29 2 +MON)", |b| {
        b.iter(|| CronSchedule::parse(black_box("0 0 29 2 +MON")))
    });
    c.bench_function("reject impossible pattern (0 0 30 2 *)", |b| {
        b.iter(|| CronSchedule::parse(black_box("0 0 30 2 *")))
    });
    c.bench_function("reject impossible pattern (0 0 31 4,6,9,11 *)", |b| {
        b.iter(|| CronSchedule::parse(black_box("0 0 31 4,6,9,11 *")))
    });
    c.bench_function("ZoneRules::from_iana(Europe/Berlin)", |b| {
        b.iter(|| ZoneRules::from_iana(black_box("Europe/Berlin")))
    });
}

fn next_after(c: &mut Criterion) {
    let utc = CronSchedule::parse("*/15 * * * *").unwrap();
    c.bench_function("next_after UTC */15", |b| {
        b.iter(|| utc.next_after(black_box(T_MS)))
    });
    let daily = CronSchedule::parse("30 2 * * *").unwrap();
    c.bench_function("next_after UTC daily", |b| {
        b.iter(|| daily.next_after(black_box(T_MS)))
    });
    let berlin = ZoneRules::from_iana("Europe/Berlin").unwrap();
    let gap = CronSchedule::parse_in("30 2 * * *", berlin.clone()).unwrap();
    c.bench_function("next_after Berlin daily across the gap", |b| {
        b.iter(|| gap.next_after(black_box(T_MS)))
    });
    let interval = CronSchedule::parse_in("*/15 * * * *", berlin).unwrap();
    c.bench_function("next_after Berlin */15", |b| {
        b.iter(|| interval.next_after(black_box(T_MS)))
    });
    let rare = CronSchedule::parse("0 0 29 2 +MON").unwrap();
    c.bench_function("next_after UTC rare (18 years ahead)", |b| {
        b.iter(|| rare.next_after(black_box(T_MS)))
    });
}

fn latest_in(c: &mut Criterion) {
    // A per-minute job one week late: 10,080 missed instants. The baseline walks them all
    // (what a forward catch-up would do); latest_in halves backwards.
    let minute = CronSchedule::parse("* * * * *").unwrap();
    let from = T_MS - 7 * 86_400_000;
    c.bench_function(
        "catch-up baseline: walk a week of minutes, keep the last 10",
        |b| {
            b.iter(|| {
                let mut at = black_box(from);
                let mut last = std::collections::VecDeque::with_capacity(10);
                while let Some(t) = minute.next_after(at).filter(|&t| t <= T_MS) {
                    if last.len() == 10 {
                        last.pop_front();
                    }
                    last.push_back(t);
                    at = t;
                }
                last
            })
        },
    );
    c.bench_function("latest_in: last 10 of a week of minutes", |b| {
        b.iter(|| minute.latest_in(black_box(from), T_MS, 10))
    });
    c.bench_function("latest_in: last 1 of a week of minutes", |b| {
        b.iter(|| minute.latest_in(black_box(from), T_MS, 1))
    });
    let second = CronSchedule::parse("* * * * * *").unwrap();
    c.bench_function("latest_in: last 10 of a year of seconds", |b| {
        b.iter(|| second.latest_in(black_box(T_MS - 365 * 86_400_000), T_MS, 10))
    });
}

criterion_group!(benches, admission, next_after, latest_in);
criterion_main!(benches);
