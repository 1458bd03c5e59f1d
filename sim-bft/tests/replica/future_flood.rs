//! Issue 9, defect 6: the future-view buffer is bounded by bytes per sender and deduplicated.
//!
//! A replica buffers pre-prepares, prepares and commits of views it has not entered yet. The
//! buffer used to be bounded by count only (8,192 messages of up to `max_message_bytes` each,
//! duplicates included), so one faulty peer could pin tens of GiB in every honest replica.
//!
//! The RSS measurement is `#[ignore]`d: run it with
//! `cargo test --release -p sim-bft --test replica future_flood:: -- --ignored --nocapture`.

use sim_bft::crypto::replica_signing_key;
use sim_bft::node::{Input, Millis, Node, NodeId, Output};
use sim_bft::protocol::{
    Batch, Body, Payload, Request, RequestKind, SignedMsg, SignedRequest, Wire, codec,
};
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ByzantineKind, FaultConfig, TimeServiceMode};

const SEED: u64 = 42;
const T0: Millis = 1_700_000_000_000;

/// A signed pre-prepare of replica `from` for (`view`, `seq`) carrying `payload` bytes.
fn big_pre_prepare(from: NodeId, view: u64, seq: u64, payload: usize) -> Vec<u8> {
    let batch = Batch {
        requests: vec![SignedRequest {
            request: Request {
                client: 0,
                req_seq: seq,
                kind: RequestKind::Write,
                payload: vec![0xab; payload],
            },
            sig: [0; 64],
        }],
        primary_clock_ms: T0,
        time_cert: None,
        null: false,
    };
    let payload = Payload {
        from,
        body: Body::PrePrepare { view, seq, batch },
    };
    let msg = SignedMsg::sign(&replica_signing_key(SEED, from), &payload).unwrap();
    codec::encode(&Wire::Signed(msg)).unwrap()
}

#[test]
fn future_view_buffer_is_bounded_by_bytes_per_sender_and_deduplicated() {
    let cfg = ReplicaConfig::new(0, 4, SEED, 4);
    let budget = cfg.future_bytes_per_sender;
    let mut r = Replica::new(cfg).unwrap();
    let mut out: Vec<Output> = Vec::new();
    // Replica 1 (the primary of view 1) sends 40 distinct 1 MiB pre-prepares for view 1, each
    // twice: 80 MiB of messages, 40 MiB distinct.
    for seq in 1..=40 {
        let bytes = big_pre_prepare(1, 1, seq, 1 << 20);
        for _ in 0..2 {
            r.handle(
                T0,
                Input::Peer {
                    from: 1,
                    bytes: bytes.clone(),
                },
                &mut out,
            );
            r.check_invariants().unwrap();
        }
    }
    let m = r.metrics();
    let buffered = m.get("buffered_future_view");
    // The old buffer kept all 80 (duplicates included, 80 MiB).
    assert!(
        buffered * (1 << 20) <= budget as u64,
        "{buffered} MiB buffered from one sender (budget {budget} bytes)"
    );
    assert!(
        buffered >= 8,
        "the budget admits honest traffic: {buffered}"
    );
    assert!(r.future_buffer_bytes() <= budget);
    assert_eq!(r.future_buffer_peak_bytes(), r.future_buffer_bytes());
    assert!(m.get("drop_future_duplicate") >= buffered);
    assert!(m.get("drop_future_sender_bytes") > 0);
    assert_eq!(
        m.get("future_buffer_peak_bytes"),
        r.future_buffer_peak_bytes() as u64
    );

    let buffered_before = m.get("buffered_future_view");
    // Another sender has its own budget: a second faulty replica cannot starve an honest one.
    r.handle(
        T0,
        Input::Peer {
            from: 2,
            bytes: big_pre_prepare(2, 2, 1, 1 << 20),
        },
        &mut out,
    );
    assert_eq!(buffered_before + 1, r.metrics().get("buffered_future_view"));
    r.check_invariants().unwrap();
}

fn flood_cluster(seed: u64) -> Cluster {
    Cluster::builder()
        .seed(seed)
        .replicas(4)
        .time_service(TimeServiceMode::Robust)
        .duration_ms(4_000, 20_000)
        .clients(2, 100)
        .ticks(vec![1], 1_000)
        .faults(FaultConfig {
            byzantine_kind: ByzantineKind::FutureFlood,
            pinned_byzantine: vec![(seed % 4) as NodeId],
            ..FaultConfig::default()
        })
}

/// The `future-flood` adversary: every honest replica's buffer stays within one sender's budget
/// (only the flooder exceeds what honest traffic needs), and the cluster stays safe and live.
#[test]
fn future_flood_is_bounded_in_the_simulator() {
    for seed in [1] {
        let mut sim = flood_cluster(seed).build().unwrap();
        let flooder = (seed % 4) as NodeId;
        let mut peak = 0usize;
        for t in (500..=4_000).step_by(500) {
            sim.run_until(t);
            for id in (0..4).filter(|i| *i != flooder) {
                if let Some(r) = sim.node(id).and_then(|n| n.replica()) {
                    let budget = r.config().future_bytes_per_sender;
                    peak = peak.max(r.future_buffer_peak_bytes());
                    assert!(
                        r.future_buffer_peak_bytes() <= 3 * budget,
                        "seed {seed}: replica {id} held {} bytes",
                        r.future_buffer_peak_bytes()
                    );
                    assert!(r.metrics().get("drop_future_sender_bytes") > 0 || t < 4_000);
                }
            }
        }
        assert!(peak > 0, "seed {seed}: the flood reached nobody");
        let o = sim.run();
        assert!(o.violations.is_empty(), "seed {seed}: {:#?}", o.violations);
    }
}

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Peak memory under a flood: one replica fed 256 distinct maximal (8 MiB) future-view
/// pre-prepares (2 GiB) from one peer. Prints the buffer's peak and the process's peak RSS.
#[test]
#[ignore = "memory measurement; run with --release -- --ignored --nocapture"]
fn future_flood_peak_memory() {
    let before = rss_kib();
    let cfg = ReplicaConfig::new(0, 4, SEED, 4);
    let size = cfg.max_message_bytes - 1_024;
    let mut r = Replica::new(cfg).unwrap();
    let mut out = Vec::new();
    for seq in 1..=256 {
        let bytes = big_pre_prepare(1, 1 + seq % 4, seq, size);
        r.handle(T0, Input::Peer { from: 1, bytes }, &mut out);
        out.clear();
    }
    let after = rss_kib();
    println!(
        "future buffer: peak {} bytes (budget {} per sender); process peak RSS {:?} KiB \
         before, {:?} KiB after",
        r.future_buffer_peak_bytes(),
        r.config().future_bytes_per_sender,
        before,
        after
    );
    assert!(r.future_buffer_peak_bytes() <= r.config().future_bytes_per_sender);
    if let (Some(b), Some(a)) = (before, after) {
        // Bounded by the budget plus one message in flight and the decoder's copy.
        assert!(a.saturating_sub(b) < 64 * 1024, "RSS grew {} KiB", a - b);
    }
}
