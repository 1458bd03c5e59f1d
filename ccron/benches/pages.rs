//! Reserved-page backends: page writes per second through `FilePages` (temp file, fsync,
//! rename, directory fsync per page) and, with `--features redb`, `RedbPages` (one durable redb
//! write transaction per page), in the same run, plus `MemPages` as the in-memory ceiling.
//!
//! Each durable backend is measured twice: one `save` per page, and `save_batch` of 16 pages
//! (how `codec::save_blob` writes a multi-page blob), with the ratio in the same run.
//!
//! Then the pages' digest (`MemPages::digest`, taken after every block), as sim-bft's replicas
//! hold them (a 20-byte time page and two small schedule pages), through `ccron::sha256` and
//! the same bytes through `sha2`, with the ratio in the same run.
//!
//! Run: `cargo bench -p ccron --features redb --bench pages` (without the feature only
//! `FilePages` and `MemPages` are measured). Pages of 4 KiB over a store of 256 pages, written
//! round robin; the directory is under the system's temp dir.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ccron::{FilePages, MemPages, ReservedPages};

const PAGE: usize = 4_096;
const PAGES: u32 = 256;

// The benchmark is a driver: reading the real clock is its whole point.
#[allow(clippy::disallowed_methods)]
fn rate(name: &str, pages: &mut dyn ReservedPages, writes: u32) -> f64 {
    let data: Vec<u8> = (0..PAGE).map(|i| (i * 7) as u8).collect();
    let start = Instant::now();
    for i in 0..writes {
        pages.save(i % PAGES, black_box(&data)).expect("page write");
    }
    let took = start.elapsed().max(Duration::from_nanos(1));
    let per_s = f64::from(writes) / took.as_secs_f64();
    println!(
        "{name:>10} | {writes:>7} writes | {:>10.1} ms | {per_s:>12.0} pages/s",
        took.as_secs_f64() * 1e3
    );
    per_s
}

/// Pages per second written through `save_batch` in batches of `batch` pages (a multi-page
/// blob's write in `codec::save_blob`), round robin like `rate`.
#[allow(clippy::disallowed_methods)]
fn batch_rate(name: &str, pages: &mut dyn ReservedPages, writes: u32, batch: u32) -> f64 {
    let data: Vec<u8> = (0..PAGE).map(|i| (i * 13) as u8).collect();
    let batches = (writes / batch).max(1);
    let start = Instant::now();
    for b in 0..batches {
        let ids: Vec<(u32, &[u8])> = (0..batch)
            .map(|k| ((b * batch + k) % PAGES, black_box(&data[..])))
            .collect();
        pages.save_batch(&ids).expect("batch write");
    }
    let took = start.elapsed().max(Duration::from_nanos(1));
    let written = batches * batch;
    let per_s = f64::from(written) / took.as_secs_f64();
    println!(
        "{name:>10} | {written:>7} writes | {:>10.1} ms | {per_s:>12.0} pages/s (save_batch of {batch})",
        took.as_secs_f64() * 1e3
    );
    per_s
}

/// The pages' digest as `MemPages` computes it (id, length, bytes of each non-empty page, in
/// id order), through the `sha2` crate: the reference the faster `ccron::sha256` must equal.
fn sha2_pages_digest(pages: &[(u32, Vec<u8>)]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for (id, data) in pages {
        h.update(id.to_le_bytes());
        h.update((data.len() as u64).to_le_bytes());
        h.update(data);
    }
    h.finalize().into()
}

/// Digests per second of `pages` through `MemPages::digest` and through `sha2` (over the same
/// pages, taken out once), alternated in five rounds; returns (ours, sha2).
#[allow(clippy::disallowed_methods)]
fn digest_rates(pages: &MemPages, n: u32) -> (f64, f64) {
    let snapshot = pages.snapshot();
    assert_eq!(pages.digest(), sha2_pages_digest(&snapshot), "same bytes");
    let (mut ours, mut reference) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..n {
            black_box(black_box(pages).digest());
        }
        ours += start.elapsed();
        let start = Instant::now();
        for _ in 0..n {
            black_box(sha2_pages_digest(black_box(&snapshot)));
        }
        reference += start.elapsed();
    }
    let per_s = |d: Duration| f64::from(n * 5) / d.max(Duration::from_nanos(1)).as_secs_f64();
    (per_s(ours), per_s(reference))
}

fn main() {
    let dir = std::env::temp_dir().join(format!("ccron-bench-pages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    println!("reserved pages: durable page writes per second (4 KiB pages, same run)");
    let mut mem = MemPages::new(PAGE, PAGES);
    let mem_rate = rate("MemPages", &mut mem, 200_000);
    let mut file = FilePages::open(dir.join("file"), PAGE, PAGES).expect("file pages");
    let file_rate = rate("FilePages", &mut file, 2_000);
    let file_batch = batch_rate("FilePages", &mut file, 2_000, 16);
    println!(
        "ratio FilePages save_batch(16) / save: {:.2}x",
        file_batch / file_rate
    );
    #[cfg(feature = "redb")]
    {
        let mut redb = ccron::redb_pages::RedbPages::open(&dir.join("pages.redb"), PAGE, PAGES)
            .expect("redb pages");
        let redb_rate = rate("RedbPages", &mut redb, 2_000);
        let redb_batch = batch_rate("RedbPages", &mut redb, 2_000, 16);
        println!(
            "ratio RedbPages save_batch(16) / save: {:.2}x; save_batch(16) RedbPages / FilePages: {:.2}x",
            redb_batch / redb_rate,
            redb_batch / file_batch
        );
        println!(
            "ratio RedbPages / FilePages: {:.2}x (MemPages / FilePages: {:.0}x)",
            redb_rate / file_rate,
            mem_rate / file_rate
        );
    }
    #[cfg(not(feature = "redb"))]
    println!(
        "MemPages / FilePages: {:.0}x (run with --features redb for RedbPages)",
        mem_rate / file_rate
    );
    let _ = std::fs::remove_dir_all(&dir);

    let mut small = MemPages::new(PAGE, PAGES);
    small.save(0, &[3; 20]).expect("time page");
    small.save(1, &[5; 90]).expect("schedule page");
    small.save(3, &[7; 90]).expect("schedule page");
    let (ours, reference) = digest_rates(&small, 200_000);
    println!(
        "pages digest (3 pages, 200 B): ccron::sha256 {ours:.0}/s, sha2 {reference:.0}/s: {:.2}x",
        ours / reference
    );
    let (ours, reference) = digest_rates(&mem, 20);
    println!(
        "pages digest ({PAGES} pages of 4 KiB): ccron::sha256 {ours:.0}/s, sha2 {reference:.0}/s: {:.2}x",
        ours / reference
    );
}
