//! What a large schedule book costs a node per height: the `orders` ledger's state digest and
//! snapshot against the number of live schedules (issue 23's "10^5 live schedules in the
//! book").
//!
//! A node recomputes the ledger's digest after every height that executed a request or
//! evaluated a tick (`BlockHost::digest`; every height ticks), and `CronLedger::digest_in`
//! hashes the book's whole wire form (every page, copied and encoded) into it. This bench
//! places N expiry schedules (an hour out, as `localnet --preload` does; 1,000 per owner, the
//! default quota) into an `orders` ledger with room for them, then times:
//! - `digest`: one full `Application::digest` (what each height pays), averaged;
//! - `snapshot`: one `Application::snapshot` (what every `--snapshot-every` heights pay), with
//!   its size against the 64 MiB a snapshot may hold;
//!
//! each next to the empty ledger's in the same run (the ratio), and the heights/s the digest
//! alone would allow one core.
//!
//! Run: `cargo bench -p ccron-ledgers --bench book_digest` (N = 0, 1,000, 10,000;
//! `CCRON_BENCH_N=0,1000,30000` for others; the placing itself takes a while at 10^5).

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccron::host::{Application, ClientId, ExecContext};
use ccron::schedule::ScheduleRequest;
use ccron_ledgers::orders::{SchedAppConfig, ScheduledLedger};

/// Schedules one owner may hold (`ccron::Quota::default`).
const PER_OWNER: u64 = 1_000;

/// Times `f` over `reps` calls, returning the mean (benchmarks are drivers: the one place
/// allowed to read the real clock).
#[allow(clippy::disallowed_methods)]
fn mean<T>(reps: u32, mut f: impl FnMut() -> T) -> Duration {
    let start = Instant::now();
    for _ in 0..reps {
        black_box(f());
    }
    start.elapsed() / reps.max(1)
}

/// An `orders` ledger holding `n` hour-long expiries and how many were admitted. Pages:
/// `n/2 + 64`, room to spare (the wire form holds ~9 of these schedules a 4 KiB page, but the
/// book's record log needs room beyond what it holds: a 512-page book refused at ~1,390).
fn ledger_with(n: u64) -> (ScheduledLedger, u64, u32) {
    let pages = u32::try_from(n / 2 + 64).unwrap_or(u32::MAX);
    let cfg = SchedAppConfig {
        book_pages: pages,
        ..SchedAppConfig::default()
    };
    let mut ledger = ScheduledLedger::new(cfg);
    let mut admitted = 0;
    for i in 0..n {
        let order = format!("hold-{i}");
        let payload = ScheduledLedger::payload(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
            &order, 3_600_000,
        )))
        .expect("an expiry encodes");
        let ctx = ExecContext {
            seq: i + 1,
            agreed_time_ms: Some(1_000_000),
        };
        let mut owner = [0u8; 32];
        owner[..8].copy_from_slice(&(i / PER_OWNER).to_le_bytes());
        let reply = ledger.execute(ctx, ClientId(owner), &payload);
        if reply.starts_with(b"ok") {
            admitted += 1;
        } else if admitted == i {
            eprintln!("first refusal at {i}: {}", String::from_utf8_lossy(&reply));
        }
    }
    (ledger, admitted, pages)
}

fn main() {
    let ns: Vec<u64> = std::env::var("CCRON_BENCH_N")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 1_000, 10_000]);
    println!(
        "{:>8} | {:>8} | {:>7} | {:>12} | {:>7} | {:>12} | {:>12} | {:>8} | {:>14}",
        "N",
        "admitted",
        "pages",
        "digest (µs)",
        "ratio",
        "snapshot B",
        "snap (ms)",
        "ratio",
        "digest-bound h/s"
    );
    let mut base: Option<(Duration, Duration)> = None;
    for n in ns {
        let (ledger, admitted, pages) = ledger_with(n);
        let reps = if n >= 10_000 { 20 } else { 200 };
        let digest = mean(reps, || ledger.digest());
        let bytes = ledger.snapshot().len();
        let snap = mean(reps.min(20), || ledger.snapshot().len());
        let (d0, s0) = *base.get_or_insert((digest, snap));
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-12);
        println!(
            "{n:>8} | {admitted:>8} | {pages:>7} | {:>12.1} | {:>7.1} | {bytes:>12} | {:>12.2} | {:>8.1} | {:>14.0}",
            digest.as_secs_f64() * 1e6,
            ratio(digest, d0),
            snap.as_secs_f64() * 1e3,
            ratio(snap, s0),
            1.0 / digest.as_secs_f64().max(1e-12),
        );
    }
}
