//! Fire events say what they cover (issue 25, item 5): a replica that catches up by state
//! transfer has no fire events for the batches it skipped, and its events mark exactly those
//! batches (`MarkKind::StateTransferred`). Its own fires plus the reference replica's fires in
//! the marked spans are exactly the reference replica's fires.
//!
//! `sim-bft run --seed 3 --replicas 4 --ledger demo --duration 30000ms --liveness 20000ms
//! --partition isolate` (replica 0 is cut off, then catches up by one state transfer).

use std::collections::BTreeSet;

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{FaultConfig, LedgerKind, PartitionKind, SimConfig};

#[test]
fn a_state_transferred_replica_marks_exactly_the_batches_it_skipped() {
    let cfg = SimConfig {
        seed: 3,
        replicas: 4,
        ledger: LedgerKind::Demo,
        duration_ms: 30_000,
        liveness_ms: 20_000,
        faults: FaultConfig {
            partition: PartitionKind::Isolate,
            ..FaultConfig::default()
        },
        ..SimConfig::default()
    };
    let o = Cluster::from_config(cfg).build().unwrap().run();
    assert!(o.ok(), "{:#?}", o.violations);
    let transferred: Vec<_> = o
        .nodes
        .iter()
        .filter(|n| {
            n.metrics
                .get("state_transfers_completed")
                .copied()
                .unwrap_or(0)
                > 0
        })
        .collect();
    assert!(
        !transferred.is_empty(),
        "the run must have a state transfer"
    );
    let reference = o
        .nodes
        .iter()
        .filter(|n| o.events.transferred(n.id).is_empty())
        .max_by_key(|n| n.last_executed_seq)
        .expect("a replica that executed every batch");
    let fires = |id, upto: u64| -> BTreeSet<(u64, u32, u32, Option<u64>)> {
        o.events
            .fires
            .iter()
            .filter(|f| f.replica == id && f.seq <= upto)
            .map(|f| (f.seq, f.component, f.position, f.schedule))
            .collect()
    };
    for n in transferred {
        let spans = o.events.transferred(n.id);
        assert_eq!(
            spans.len() as u64,
            n.metrics["state_transfers_completed"],
            "one span per completed transfer: {spans:?}"
        );
        // The spans are exactly the batches it did not execute: with no restart, every other
        // batch up to its last one it executed once.
        let skipped: u64 = spans.iter().map(|(a, b)| b - a + 1).sum();
        assert_eq!(n.batches_reexecuted, 0);
        assert_eq!(
            n.batches_executed + skipped,
            n.last_executed_seq,
            "spans {spans:?}"
        );
        for w in spans.windows(2) {
            assert!(w[0].1 < w[1].0, "ordered, disjoint: {spans:?}");
        }
        // Its fires, plus the reference's fires in its spans, are the reference's fires.
        let upto = n.last_executed_seq;
        let own = fires(n.id, upto);
        let elsewhere: BTreeSet<_> = fires(reference.id, upto)
            .into_iter()
            .filter(|f| o.events.skipped(n.id, f.0))
            .collect();
        assert!(!elsewhere.is_empty(), "the skipped spans held fires");
        assert!(own.iter().all(|f| !o.events.skipped(n.id, f.0)));
        let union: BTreeSet<_> = own.union(&elsewhere).copied().collect();
        assert_eq!(union, fires(reference.id, upto));
    }
}
