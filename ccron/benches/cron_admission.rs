//! Worst-case cost of cron admission and catch-up searches over a fuzzed corpus (issue 10,
//! defect 3: never-firing patterns used to be admitted and cost seconds per search).
//!
//! A seeded PRNG builds a deterministic corpus of expressions (every field form: values, lists,
//! ranges, steps, empty lists, `L`, `W`, `#`, `+`, names, impossible dates, 5 and 6 fields) and
//! pairs each with a zone (UTC, Europe/Berlin, America/New_York, Australia/Lord_Howe,
//! Asia/Kathmandu, fixed offsets) and a start instant (a fixed date, anywhere in 1900–4000, or
//! within two hours of one of the zone's transitions). Per input it measures
//! - admission: `CronSchedule::parse_in` and, when admitted, the first `next_after`;
//! - `latest_in(after, through, count)` over a random span (seconds to centuries, up to the year
//!   4000 horizon) for count 1 and 10;
//!
//! each as the fastest of a few repetitions (to filter out scheduling noise on a shared
//! machine), and prints the worst input of each kind against a baseline (`* * * * *` in UTC) in
//! the same run.
//!
//! Run: `cargo bench -p ccron --bench cron_admission` (`CCRON_BENCH_CORPUS=N` sets the corpus
//! size, default 4000).

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccron::cron::{CronSchedule, ZoneRules, format_rfc3339_ms};

/// splitmix64: a tiny deterministic PRNG, so the corpus is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// A numeric field in `lo..=hi`, in one of the generic forms.
fn numeric(rng: &mut Rng, lo: u64, hi: u64) -> String {
    match rng.below(10) {
        0 => "*".into(),
        1 | 2 => rng.range(lo, hi).to_string(),
        3 => {
            let a = rng.range(lo, hi);
            let b = rng.range(a, hi);
            format!("{a}-{b}")
        }
        4 => format!("*/{}", rng.range(1, hi - lo + 1)),
        5 => {
            let a = rng.range(lo, hi);
            let b = rng.range(a, hi);
            format!("{a}-{b}/{}", rng.range(1, hi - lo + 1))
        }
        6 | 7 => {
            let n = rng.range(2, 4);
            (0..n)
                .map(|_| rng.range(lo, hi).to_string())
                .collect::<Vec<_>>()
                .join(",")
        }
        // Empty-ish lists: the defect's `,`.
        8 => [",", ",,"][rng.below(2) as usize].into(),
        _ => format!("{},{}", rng.range(lo, hi), rng.range(lo, hi)),
    }
}

fn day_of_month(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => "L".into(),
        1 => format!("{}W", rng.range(1, 31)),
        2 => ["29", "30", "31"][rng.below(3) as usize].into(),
        3 => "LW".into(),
        _ => numeric(rng, 1, 31),
    }
}

fn month(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => "2".into(),
        1 => ["4,6,9,11", "2,4", "FEB", "JAN-MAR"][rng.below(4) as usize].into(),
        _ => numeric(rng, 1, 12),
    }
}

fn day_of_week(rng: &mut Rng) -> String {
    let names = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let field = match rng.below(8) {
        0 => format!("{}#{}", rng.range(0, 6), rng.range(1, 5)),
        1 => format!("{}#L", rng.range(0, 6)),
        2 => names[rng.below(7) as usize].into(),
        3 => "MON-FRI".into(),
        _ => numeric(rng, 0, 7),
    };
    // `+`: day-of-month AND day-of-week.
    if rng.below(4) == 0 {
        format!("+{field}")
    } else {
        field
    }
}

fn expression(rng: &mut Rng) -> String {
    let minute = numeric(rng, 0, 59);
    let hour = numeric(rng, 0, 23);
    let dom = day_of_month(rng);
    let mon = month(rng);
    let dow = day_of_week(rng);
    if rng.below(3) == 0 {
        let second = numeric(rng, 0, 59);
        format!("{second} {minute} {hour} {dom} {mon} {dow}")
    } else {
        format!("{minute} {hour} {dom} {mon} {dow}")
    }
}

/// 2026-03-28T12:00:00Z, the day before Berlin springs forward.
const T_MS: i64 = 1_774_699_200_000;
/// 1900-01-01 and 3999-12-31, the ends of the supported range.
const MIN_MS: i64 = -2_208_988_800_000;
const MAX_MS: i64 = 64_060_502_400_000;

/// The fastest of `reps` runs of `f`.
// A bench measures wall time; the library itself never reads a clock.
#[allow(clippy::disallowed_methods)]
fn fastest<T>(reps: u32, mut f: impl FnMut() -> T) -> Duration {
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

#[derive(Default)]
struct Worst {
    time: Duration,
    input: String,
    total: Duration,
    n: u32,
}

impl Worst {
    fn record(&mut self, time: Duration, input: impl FnOnce() -> String) {
        self.total += time;
        self.n += 1;
        if time > self.time {
            self.time = time;
            self.input = input();
        }
    }

    fn print(&self, what: &str, baseline: Duration) {
        let mean = self.total / self.n.max(1);
        println!(
            "{what:<22} inputs {:>6}  mean {:>10.1?}  worst {:>10.1?}  ({:.0}x baseline {:.1?})\n  worst input: {}",
            self.n,
            mean,
            self.time,
            self.time.as_secs_f64() / baseline.as_secs_f64().max(1e-12),
            baseline,
            self.input
        );
    }
}

fn main() {
    let size: u32 = std::env::var("CCRON_BENCH_CORPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000);
    let zones: Vec<ZoneRules> = vec![
        ZoneRules::utc(),
        ZoneRules::from_iana("Europe/Berlin").expect("zone"),
        ZoneRules::from_iana("America/New_York").expect("zone"),
        ZoneRules::from_iana("Australia/Lord_Howe").expect("zone"),
        ZoneRules::from_iana("Asia/Kathmandu").expect("zone"),
        ZoneRules::fixed("UTC+05:45", 5 * 3_600 + 45 * 60).expect("zone"),
        ZoneRules::fixed("UTC-09:30", -(9 * 3_600 + 30 * 60)).expect("zone"),
    ];
    const REPS: u32 = 3;

    // `CCRON_BENCH_ONE="<expression>"`: time one expression's admission in every zone, and stop.
    if let Ok(expr) = std::env::var("CCRON_BENCH_ONE") {
        for zone in &zones {
            let parse = fastest(20, || CronSchedule::parse_in(&expr, zone.clone()));
            let admit = fastest(20, || {
                CronSchedule::parse_in(&expr, zone.clone())
                    .ok()
                    .map(|s| s.next_after(T_MS))
            });
            println!(
                "{expr:?} in {}: parse {parse:.1?}, parse + next_after {admit:.1?}",
                zone.name()
            );
        }
        return;
    }

    // Baseline, same run.
    let base = CronSchedule::parse("* * * * *").expect("baseline parses");
    let base_admit = fastest(50, || {
        CronSchedule::parse("* * * * *")
            .ok()
            .and_then(|s| s.next_after(T_MS))
    });
    let base_latest = fastest(50, || base.latest_in(T_MS - 86_400_000, T_MS, 1));

    let mut rng = Rng(0x00C0_FFEE_2026_1123);
    let mut admit = Worst::default();
    let mut latest_1 = Worst::default();
    let mut latest_10 = Worst::default();
    let (mut admitted, mut rejected) = (0u32, 0u32);
    // The defect's own example, and rare but valid patterns, lead the corpus.
    let fixed = [
        "0 0 , * * *",
        "0 0 30 2 *",
        "0 0 29 2 *",
        "0 0 29 2 +MON",
        "0 0 31 * MON",
        "0 0 31 * +MON",
        "0 0 13 * 5",
        "0 0 13 * +FRI",
        "* * * * * *",
        "30 2 * * *",
    ];
    for i in 0..size {
        let expr = match fixed.get(i as usize) {
            Some(e) => (*e).to_owned(),
            None => expression(&mut rng),
        };
        let zone = &zones[(rng.below(zones.len() as u64)) as usize];
        let transitions = zone.transitions();
        let from_ms = match rng.below(4) {
            0 => T_MS,
            // Within two hours of one of the zone's transitions (gaps, overlaps).
            1 if !transitions.is_empty() => {
                let t = transitions[rng.below(transitions.len() as u64) as usize];
                (t.at_utc_s + rng.range(0, 14_400) as i64 - 7_200) * 1_000
            }
            _ => MIN_MS + rng.below((MAX_MS - MIN_MS) as u64) as i64,
        };
        let parsed = CronSchedule::parse_in(&expr, zone.clone());
        let t = fastest(REPS, || {
            CronSchedule::parse_in(&expr, zone.clone())
                .ok()
                .map(|s| s.next_after(from_ms))
        });
        admit.record(t, || {
            format!(
                "{expr:?} in {} from {}",
                zone.name(),
                format_rfc3339_ms(from_ms)
            )
        });
        let Ok(schedule) = parsed else {
            rejected += 1;
            continue;
        };
        admitted += 1;
        // A span from seconds to centuries (log-uniform), ending anywhere in the range.
        let through_ms = MIN_MS + rng.below((MAX_MS - MIN_MS) as u64) as i64;
        let span_ms = 1_000i64 << rng.below(42);
        let after_ms = through_ms.saturating_sub(span_ms).max(MIN_MS);
        for (count, worst) in [(1usize, &mut latest_1), (10, &mut latest_10)] {
            let t = fastest(REPS, || schedule.latest_in(after_ms, through_ms, count));
            worst.record(t, || {
                format!(
                    "{expr:?} in {} latest {count} in ({}, {}]",
                    zone.name(),
                    format_rfc3339_ms(after_ms),
                    format_rfc3339_ms(through_ms)
                )
            });
        }
    }
    println!(
        "corpus: {size} inputs ({admitted} admitted, {rejected} rejected), fastest of {REPS} runs each"
    );
    admit.print("admission", base_admit);
    latest_1.print("latest_in count 1", base_latest);
    latest_10.print("latest_in count 10", base_latest);
}
