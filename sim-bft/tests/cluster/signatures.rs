//! The signature schemes at cluster level (issue 28): a Byzantine replica that flips a byte of
//! every signature it sends, or whose messages are corrupted on the way, is refused alike under
//! ed25519 and under the simulator-only `sim` tags, and the two runs are the same run apart from
//! the signature bytes. The byte-level checks (flipped bytes, forged tags, another signer's or
//! another scheme's signature, single and batched) are `crypto::tests`; the whole campaign
//! sample under both schemes is `slow_campaign_sample`.

use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, LedgerKind, Signatures, SimOutcome};

fn run(kind: ByzantineKind, signatures: Signatures) -> SimOutcome {
    Cluster::builder()
        .seed(28)
        .ledger(LedgerKind::Kv)
        .duration_ms(3_000, 5_000)
        .clients(2, 200)
        .signatures(signatures)
        .faults(FaultConfig {
            byzantine: 1,
            pinned_byzantine: vec![2],
            byzantine_kind: kind,
            ..FaultConfig::default()
        })
        .build()
        .unwrap_or_else(|e| panic!("config: {e}"))
        .run()
}

/// The replicas' summaries without what the scheme's hash function decides (the state digest
/// after every batch: SHA-256 under ed25519, BLAKE3 under `sim`); the SHA-256 state digest at
/// the end (`state_sha256`) stays, and must be equal under both schemes.
fn scheme_free(o: &SimOutcome) -> Vec<sim_bft::sim::NodeSummary> {
    o.nodes
        .iter()
        .map(|n| {
            assert!(n.state_sha256 != [0; 32] || n.last_executed_seq == 0 || !n.honest);
            sim_bft::sim::NodeSummary {
                state_digest: [0; 32],
                ..n.clone()
            }
        })
        .collect()
}

fn refused(o: &SimOutcome, counter: &str) -> Vec<u64> {
    o.nodes
        .iter()
        .filter(|n| n.honest)
        .map(|n| n.metrics.get(counter).copied().unwrap_or(0))
        .collect()
}

#[test]
fn flipped_signatures_are_refused_alike_under_both_schemes() {
    let ed = run(ByzantineKind::BadSignatures, Signatures::Ed25519);
    let sim = run(ByzantineKind::BadSignatures, Signatures::Sim);
    for o in [&ed, &sim] {
        assert!(o.ok(), "{:?}\n{}", o.violations, o.replay_command());
        let drops = refused(o, "drop_bad_signature");
        assert_eq!(drops.len(), 3);
        assert!(
            drops.iter().all(|d| *d > 0),
            "{}: every honest replica refuses the flipped signatures: {drops:?}",
            o.config.signatures
        );
        assert!(
            o.replay_command()
                .contains(&format!("--signatures {}", o.config.signatures))
        );
    }
    assert_eq!(
        scheme_free(&ed),
        scheme_free(&sim),
        "the same run apart from signature bytes and digests"
    );
    assert_eq!(ed.stats, sim.stats);
    assert_ne!(ed.trace_hash, sim.trace_hash, "the signature bytes differ");
}

#[test]
fn corrupted_messages_are_refused_alike_under_both_schemes() {
    let ed = run(ByzantineKind::Corrupt, Signatures::Ed25519);
    let sim = run(ByzantineKind::Corrupt, Signatures::Sim);
    assert!(
        ed.ok() && sim.ok(),
        "{:?} {:?}",
        ed.violations,
        sim.violations
    );
    assert!(sim.stats.corrupted > 0);
    assert!(refused(&sim, "drop_bad_signature").iter().any(|d| *d > 0));
    assert_eq!(
        scheme_free(&ed),
        scheme_free(&sim),
        "the same run apart from signature bytes and digests"
    );
    assert_eq!(ed.stats, sim.stats);
}
