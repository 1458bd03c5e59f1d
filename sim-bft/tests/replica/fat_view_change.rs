//! Issue 9 defect 4: view changes stay deliverable at every admissible batch size.
//!
//! The old view change carried every prepared batch above the stable checkpoint: with a few
//! full batches of maximal requests it exceeded `max_message_bytes`, every receiver dropped it
//! (`drop_oversized`) and the cluster stalled for ever after a primary failure. View changes
//! now carry digests, and a replica fetches a batch it lacks by digest.

use crate::replica_support;

use replica_support::Harness;
use sim_bft::ledgers::KvOp;
use sim_bft::node::Input;

/// Largest request payload that stays under `max_request_bytes` once signed and encoded.
const PAYLOAD: usize = 8 * 1024 - 256;

fn fat_put(h: &mut Harness, client: u64, key: &str) {
    let payload = KvOp::Put {
        key: key.into(),
        value: vec![b'x'; PAYLOAD - 64 - key.len()],
    }
    .to_payload();
    let bytes = h.request_bytes(client, payload);
    assert!(
        bytes.len() <= 8 * 1024,
        "request admissible: {}",
        bytes.len()
    );
    for i in 0..h.n {
        if !h.isolated.contains(&i) {
            h.input(
                i,
                Input::Client {
                    bytes: bytes.clone(),
                },
            );
        }
    }
}

/// Four full batches of maximal requests execute in view 0 (all above the stable checkpoint,
/// so every view change names them); then the primary fails with a request pending. The view
/// change must complete and the pending request execute. On the old code each view change was
/// ~2 MiB against a 1 MiB limit: dropped everywhere, no view change ever completed.
#[test]
fn a_view_change_after_full_batches_of_maximal_requests_completes() {
    let mut h = Harness::new(4, |c| {
        c.max_message_bytes = 1 << 20;
        c.max_request_bytes = 8 * 1024;
        c.batch_max = 64;
        c.batch_delay_ms = 50;
        c.max_pending_per_client = 4_096;
        c.chunk_bytes = 64 << 10;
    });
    // 4 full batches (64 requests of ~8 KiB each: ~512 KiB per pre-prepare, within the limit).
    for k in 0..256u64 {
        fat_put(&mut h, k % 4, &format!("k{k}"));
    }
    h.advance(2_000);
    let before = h.replica(1).last_executed();
    assert!(before >= 4, "the fat batches executed: {before}");
    assert_eq!(h.total_requests(1), 256);
    // The primary fails; a request waits.
    h.isolated.insert(0);
    h.put(5, "after", "v");
    h.advance(20_000);
    for i in 1..4 {
        let r = h.replica(i);
        assert!(r.view() >= 1 && !r.in_view_change(), "replica {i}: {r:?}");
        assert_eq!(r.metrics().get("view_change_oversized"), 0);
        assert_eq!(r.metrics().get("drop_oversized"), 0, "replica {i}");
        assert_eq!(
            h.total_requests(i),
            257,
            "replica {i} executed the waiting request"
        );
    }
    h.assert_agreement(&[1, 2, 3]);
}
