//! Throughput probe of the replica on the in-order harness (not a timed unit test: it only
//! prints figures). Run: `cargo test --release -p sim-bft --test replica perf:: -- --ignored --nocapture`.

use crate::replica_support;

use replica_support::Harness;
use sim_bft::crypto::VerifyCache;
use sim_bft::ledgers::KvOp;

fn run(requests: u64, shared_cache: bool, ticks: bool) -> (f64, f64) {
    let cache = VerifyCache::new(1 << 20);
    let mut h = Harness::new(4, |c| {
        c.batch_max = 64;
        c.max_in_flight = 2;
        c.num_clients = 8;
        if shared_cache {
            c.verify_cache = Some(cache.clone());
        }
        c.max_pending_per_client = 100_000;
        c.max_pending = 1_000_000;
    });
    // Requests are signed up front: this measures the replicas, not the clients.
    let mut reqs = Vec::new();
    if !ticks {
        for k in 0..requests {
            let payload = KvOp::Put {
                key: format!("k{}", k % 1000).into_bytes(),
                value: b"v".to_vec(),
            }
            .to_payload();
            reqs.push(h.request_bytes(k % 8, payload));
        }
    }
    #[allow(clippy::disallowed_methods)] // a probe's one real-clock read
    let start = std::time::Instant::now();
    for k in 0..requests {
        if ticks {
            h.tick((k % 4) as u32, (k % 256) as u32);
        } else {
            let bytes = std::mem::take(&mut reqs[k as usize]);
            for i in 0..4 {
                h.input(
                    i,
                    sim_bft::node::Input::Client {
                        bytes: bytes.clone(),
                    },
                );
            }
        }
        if k % 256 == 255 {
            h.deliver_all();
        }
    }
    h.deliver_all();
    let secs = start.elapsed().as_secs_f64();
    let done = h.total_requests(0);
    assert_eq!(done, requests);
    let batches = h.executed[0].len() as f64;
    (done as f64 / secs, done as f64 / batches)
}

#[test]
#[ignore = "throughput probe; run with --release --ignored --nocapture"]
fn throughput_probe() {
    for (cache, ticks) in [(false, false), (true, false), (false, true), (true, true)] {
        let (rps, per_batch) = run(20_000, cache, ticks);
        println!(
            "shared_cache={cache} ticks={ticks}: {rps:.0} committed req/s, {per_batch:.1} req/batch"
        );
    }
}
