//! Benchmark: the outbox consumer's cost per record does not grow with the window it tracks.
//!
//! A steady stream: `max_processing = max_search_ahead = S` records in flight; each step
//! acknowledges the oldest (every 16th fails once and is retried), then polls, which dispatches
//! the next record. A consumer that scanned its tracked window on every poll would cost O(S) per
//! record; the timer index makes it O(log S). The run measures S = 64 (the baseline) and
//! S = 4096 in the same process and prints the ratio: about 1x to 2x is expected, a scanning
//! design would show about 64x.
//!
//! Run: `cargo run --release --example outbox_bench [-- --records 200000]`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ccron::outbox::{
    AckOutcome, Backoff, Consumer, ConsumerConfig, Delivery, OccurrenceId, Outbox, OutboxLimits,
    OutboxRecord,
};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Outbox consumer cost per record against the tracked window size")]
struct Args {
    /// Records streamed through the consumer per measurement.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
}

fn outbox(records: u64) -> Result<Outbox, Box<dyn std::error::Error>> {
    let mut ob = Outbox::new(OutboxLimits {
        max_records: usize::try_from(records)?,
        max_record_bytes: 64,
        max_total_bytes: usize::MAX,
    });
    for k in 0..records {
        ob.append(OutboxRecord::new(
            OccurrenceId::new(1, k % 7, k),
            "h",
            k.to_be_bytes(),
        ))?;
    }
    Ok(ob)
}

/// Streams every record through a consumer tracking `window` records; returns the elapsed time.
fn stream(ob: &Outbox, window: usize) -> Result<Duration, Box<dyn std::error::Error>> {
    let mut c = Consumer::new(
        ConsumerConfig {
            max_processing: window,
            max_search_ahead: window as u64,
            max_attempts: 3,
            ack_timeout_ms: i64::MAX / 4,
            backoff: Backoff {
                base_ms: 0,
                cap_ms: 0,
                jitter_permille: 0,
            },
        },
        0,
    )?;
    let mut now_ms = 0i64;
    // The driver's one real clock read per measurement: the consumer only sees `now_ms`.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let mut in_flight: VecDeque<Delivery> = c.poll(ob, now_ms).into();
    while let Some(d) = in_flight.pop_front() {
        now_ms += 1;
        let outcome = if d.index % 16 == 0 && d.attempt == 1 {
            AckOutcome::Failed {
                reason: String::new(),
            }
        } else {
            AckOutcome::Done
        };
        c.on_ack(d.index, d.attempt, outcome, now_ms);
        in_flight.extend(c.poll(ob, now_ms));
    }
    let elapsed = started.elapsed();
    if c.progress() != ob.head() {
        return Err(format!("stream stopped at {} of {}", c.progress(), ob.head()).into());
    }
    Ok(elapsed)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.records == 0 || args.records > 10_000_000 {
        return Err("--records must be 1..=10000000".into());
    }
    let ob = outbox(args.records)?;
    // Warm up, then take the best of three runs of each size.
    stream(&ob, 64)?;
    let best = |window: usize| -> Result<f64, Box<dyn std::error::Error>> {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let ns = stream(&ob, window)?.as_nanos() as f64 / args.records as f64;
            best = best.min(ns);
        }
        Ok(best)
    };
    let base = best(64)?;
    let big = best(4096)?;
    println!(
        "outbox consumer, {} records, ack + poll per record (best of 3):",
        args.records
    );
    println!("  window S =   64 (baseline): {base:8.1} ns/record");
    println!("  window S = 4096           : {big:8.1} ns/record");
    println!(
        "  ratio S=4096 / S=64       : {:8.2}x  (a window scan per poll would be ~64x)",
        big / base
    );
    Ok(())
}
