//! Hostile inputs and Byzantine replicas: everything bad is dropped, counted, and changes
//! nothing; honest replicas keep agreeing and making progress under each Byzantine mode.

use crate::replica_support;

use proptest::prelude::*;
use replica_support::Harness;
use sim_bft::node::{Input, Node, Output};
use sim_bft::protocol::{Wire, codec};
use sim_bft::replica::{Byzantine, Replica, ReplicaConfig};

/// Captures one real signed message (a pre-prepare from the primary to replica 1).
fn captured_message() -> (Harness, Vec<u8>) {
    let mut h = Harness::new(4, |_| {});
    h.put(0, "a", "b");
    let (_, _, bytes) = h
        .queue
        .iter()
        .find(|(from, to, _)| *from == 0 && *to == 1)
        .cloned()
        .unwrap();
    h.queue.clear();
    (h, bytes)
}

fn fingerprint(r: &Replica) -> (u64, u64, [u8; 32], u64, usize) {
    (
        r.view(),
        r.last_executed(),
        r.state_digest_now(),
        r.stable_seq(),
        r.log_len(),
    )
}

#[test]
fn bad_signature_unknown_sender_and_garbage_are_counted_and_change_nothing() {
    let (mut h, bytes) = captured_message();
    let before = fingerprint(h.replica(2));
    let mut bad_sig = bytes.clone();
    let n = bad_sig.len();
    bad_sig[n - 1] ^= 1; // last byte is inside the signature
    h.input(
        2,
        Input::Peer {
            from: 0,
            bytes: bad_sig,
        },
    );
    let mut bad_body = bytes.clone();
    bad_body[20] ^= 0x40;
    h.input(
        2,
        Input::Peer {
            from: 0,
            bytes: bad_body,
        },
    );
    h.input(
        2,
        Input::Peer {
            from: 9,
            bytes: bytes.clone(),
        },
    );
    h.input(
        2,
        Input::Peer {
            from: 1,
            bytes: bytes.clone(),
        },
    ); // wrong transport sender
    h.input(
        2,
        Input::Peer {
            from: 0,
            bytes: vec![1, 2, 3],
        },
    );
    h.input(
        2,
        Input::Peer {
            from: 0,
            bytes: vec![0; 9 << 20],
        },
    );
    h.input(2, Input::Client { bytes: vec![7; 10] });
    h.input(
        2,
        Input::Client {
            bytes: vec![0; 1 << 20],
        },
    );
    let m = h.replica(2).metrics();
    assert!(
        m.get("drop_bad_signature") + m.get("drop_malformed") >= 2,
        "{m:?}"
    );
    assert_eq!(m.get("drop_unknown_sender"), 1);
    assert_eq!(m.get("drop_sender_mismatch"), 1);
    assert_eq!(m.get("drop_oversized"), 2);
    assert!(m.get("drop_malformed") >= 2);
    assert_eq!(fingerprint(h.replica(2)), before);
    assert!(h.queue.is_empty(), "a dropped input produced messages");
    // The genuine message still works afterwards.
    h.input(2, Input::Peer { from: 0, bytes });
    assert_eq!(h.replica(2).log_len(), 1);
}

#[test]
fn forged_client_requests_and_ticks_are_rejected() {
    let mut h = Harness::new(4, |_| {});
    let mut bytes = h.request_bytes(1, b"x".to_vec());
    let n = bytes.len();
    bytes[n - 3] ^= 1;
    h.input(0, Input::Client { bytes });
    // A user client may not submit a tick.
    let tick = sim_bft::protocol::SignedRequest::sign(
        &sim_bft::crypto::client_signing_key(replica_support::SEED, 1),
        sim_bft::protocol::Request {
            client: 1,
            req_seq: 5,
            kind: sim_bft::protocol::RequestKind::Tick,
            payload: 3u32.to_le_bytes().to_vec(),
        },
    )
    .unwrap();
    h.input(
        0,
        Input::Client {
            bytes: tick.to_bytes().unwrap(),
        },
    );
    // A replica's internal client with a malformed tick payload.
    let bad_tick = sim_bft::protocol::SignedRequest::sign(
        &sim_bft::crypto::replica_signing_key(replica_support::SEED, 2),
        sim_bft::protocol::Request {
            client: sim_bft::crypto::internal_client_id(2),
            req_seq: 1,
            kind: sim_bft::protocol::RequestKind::Tick,
            payload: vec![1, 2],
        },
    )
    .unwrap();
    h.input(
        0,
        Input::Client {
            bytes: bad_tick.to_bytes().unwrap(),
        },
    );
    let m = h.replica(0).metrics();
    assert_eq!(m.get("drop_bad_request_signature"), 1, "{m:?}");
    assert_eq!(m.get("drop_unauthorized_tick"), 1);
    assert_eq!(m.get("drop_malformed_tick"), 1);
    assert_eq!(h.replica(0).pending_requests(), 0);
    assert!(h.queue.is_empty());
}

/// A replica's tick request signed by `signer` (a forgery when `signer` is not `owner`).
fn tick_request(
    owner: u32,
    signer: u32,
    req_seq: u64,
    component: u32,
) -> sim_bft::protocol::SignedRequest {
    sim_bft::protocol::SignedRequest::sign(
        &sim_bft::crypto::replica_signing_key(replica_support::SEED, signer),
        sim_bft::protocol::Request {
            client: sim_bft::crypto::internal_client_id(owner),
            req_seq,
            kind: sim_bft::protocol::RequestKind::Tick,
            payload: component.to_le_bytes().to_vec(),
        },
    )
    .unwrap()
}

#[test]
fn request_bundles_admit_the_good_requests_and_drop_forged_or_malformed_ones() {
    let mut h = Harness::new(4, |_| {});
    // Replica 2 relays a bundle of its own ticks with one forged by replica 3 in the middle.
    let bundle = vec![
        tick_request(2, 2, 1, 10),
        tick_request(2, 2, 2, 11),
        tick_request(2, 3, 3, 12),
        tick_request(2, 2, 4, 13),
        tick_request(2, 2, 5, 14),
    ];
    let bytes = codec::encode(&Wire::Requests(bundle)).unwrap();
    h.input(0, Input::Peer { from: 2, bytes });
    let m = h.replica(0).metrics();
    assert_eq!(m.get("bundles_received"), 1, "{m:?}");
    assert_eq!(m.get("drop_bad_request_signature"), 1, "{m:?}");
    assert_eq!(m.get("requests_batch_verified"), 4, "{m:?}");
    assert_eq!(h.replica(0).pending_requests(), 4);
    // An empty bundle and one over the size limit are dropped unread and change nothing.
    for requests in [
        Vec::new(),
        vec![tick_request(2, 2, 9, 1); sim_bft::replica::MAX_BUNDLE_REQUESTS + 1],
    ] {
        let bytes = codec::encode(&Wire::Requests(requests)).unwrap();
        h.input(0, Input::Peer { from: 2, bytes });
    }
    let m = h.replica(0).metrics();
    assert_eq!(m.get("drop_bad_bundle"), 2, "{m:?}");
    assert_eq!(h.replica(0).pending_requests(), 4);
    // The four good ticks execute, in bundle order.
    h.advance(50);
    let ticks: Vec<u32> = h.executed[0].iter().flat_map(|e| e.ticks.clone()).collect();
    assert_eq!(ticks, vec![10, 11, 13, 14]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_bytes_never_panic_nor_change_state(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        from in 0u32..6,
        as_client in any::<bool>(),
    ) {
        let mut r = Replica::new(ReplicaConfig::new(1, 4, 1, 2)).unwrap();
        let before = fingerprint(&r);
        let mut out = Vec::new();
        let input = if as_client { Input::Client { bytes } } else { Input::Peer { from, bytes } };
        r.handle(1_000, input, &mut out);
        prop_assert_eq!(fingerprint(&r), before);
        let quiet = out.iter().all(|o| !matches!(o, Output::Executed(_) | Output::Store { .. }));
        prop_assert!(quiet);
        prop_assert!(r.check_invariants().is_ok());
    }

    #[test]
    fn mutated_real_messages_never_panic(pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (mut h, mut bytes) = captured_message();
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        h.input(2, Input::Peer { from: 0, bytes });
        prop_assert!(h.replica(2).check_invariants().is_ok());
        // Either the flip hit a don't-care byte (impossible here: everything is signed or
        // decoded) or it was dropped and counted.
        let dropped = h.replica(2).metrics().dropped();
        let accepted = h.replica(2).log_len();
        prop_assert!(dropped >= 1 || accepted == 1);
    }
}

#[test]
fn codec_rejects_wire_with_trailing_bytes() {
    let (_h, mut bytes) = captured_message();
    bytes.push(0);
    assert!(codec::decode::<Wire>(&bytes, 1 << 20).is_err());
}

/// Runs a mixed workload with replica `bad` in mode `mode` and checks that the honest
/// replicas agree and executed every request.
fn tolerate(bad: u32, mode: Byzantine) -> Harness {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
        if c.id == bad {
            c.byzantine = mode;
        }
    });
    let honest: Vec<u32> = (0..4).filter(|i| *i != bad).collect();
    for k in 0..40u64 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.tick((k % 4) as u32, 1);
        h.advance(30);
    }
    h.advance(15_000);
    for k in 0..10u64 {
        h.put(3, &format!("z{k}"), "v");
        h.advance(30);
    }
    h.advance(15_000);
    h.assert_agreement(&honest);
    // User requests executed: a batch's requests less its executed ticks, less the copies
    // execution skipped as already executed (a request can be ordered twice: after an
    // equivocating primary's view change a replica's tick is, and a Byzantine primary may put
    // any request in two seqs; PBFT's exactly-once is at execution, where the per-client
    // window skips the second copy on every honest replica alike). Only replicas that executed
    // every batch themselves are counted: a state transfer skips batches.
    let users = |h: &Harness, i: u32| -> u64 {
        let in_batches: u64 = h.executed[i as usize]
            .iter()
            .map(|e| u64::from(e.requests) - e.ticks.len() as u64)
            .sum();
        in_batches.saturating_sub(h.replica(i).metrics().get("duplicate_execution_skipped"))
    };
    let mut counted = 0;
    for &i in &honest {
        assert_eq!(
            h.replica(i).last_executed(),
            h.replica(honest[0]).last_executed()
        );
        if h.replica(i).metrics().get("state_transfers_completed") > 0 {
            continue;
        }
        counted += 1;
        assert_eq!(
            users(&h, i),
            50,
            "replica {i} under {mode:?}: {:?}",
            h.replica(i).metrics()
        );
    }
    assert!(
        counted >= 2,
        "{mode:?}: fewer than 2 honest replicas executed every batch"
    );
    h
}

#[test]
fn tolerates_equivocating_primary() {
    let h = tolerate(0, Byzantine::EquivocatingPrimary);
    assert!(h.replica(1).view() >= 1);
}

#[test]
fn tolerates_bad_signatures() {
    let h = tolerate(1, Byzantine::BadSignatures);
    assert!(h.replica(2).metrics().get("drop_bad_signature") > 0);
}

#[test]
fn tolerates_bad_signatures_from_the_primary() {
    let h = tolerate(0, Byzantine::BadSignatures);
    assert!(h.replica(2).view() >= 1);
}

#[test]
fn tolerates_bad_digests() {
    tolerate(1, Byzantine::BadDigests);
}

#[test]
fn tolerates_replayed_old_messages() {
    let h = tolerate(1, Byzantine::ReplayOld);
    assert!(h.replica(2).metrics().dropped() > 0);
}

#[test]
fn tolerates_bogus_view_changes() {
    let h = tolerate(1, Byzantine::BogusViewChange);
    assert!(h.replica(2).metrics().get("drop_invalid_view_change") > 0);
    assert_eq!(h.replica(2).view(), 0);
}

#[test]
fn tolerates_tick_flooding() {
    let h = tolerate(1, Byzantine::TickFlood);
    assert!(h.replica(1).metrics().get("ticks_submitted") > 40);
}

#[test]
fn tolerates_lying_primary_clock() {
    let h = tolerate(
        0,
        Byzantine::LyingClock {
            offset_ms: 3_600_000,
        },
    );
    assert!(h.replica(1).view() >= 1);
    let max = h.now;
    for e in &h.executed[1] {
        assert!(e.agreed_time_ms.unwrap() <= max);
    }
}

#[test]
fn tolerates_silent_backup() {
    tolerate(2, Byzantine::Silent);
}

#[test]
fn corrupt_state_chunks_are_detected_and_another_source_used() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
        c.byzantine = if c.id == 0 {
            Byzantine::CorruptStateChunks
        } else {
            Byzantine::Honest
        };
    });
    h.isolated.insert(3);
    for k in 0..60 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.deliver_all();
    }
    h.isolated.clear();
    for k in 0..20 {
        h.put(0, &format!("z{k}"), "w");
        h.advance(20);
    }
    h.advance(5_000);
    let r3 = h.replica(3);
    assert!(
        r3.metrics().get("state_transfers_completed") >= 1,
        "{:?}",
        r3.metrics()
    );
    assert!(
        r3.metrics().get("state_digest_mismatch") >= 1,
        "{:?}",
        r3.metrics()
    );
    assert_eq!(r3.state_digest_now(), h.replica(1).state_digest_now());
    h.assert_agreement(&[1, 2, 3]);
}

#[test]
fn tolerates_future_view_flooding() {
    let h = tolerate(1, Byzantine::FutureFlood);
    assert!(h.replica(1).metrics().get("future_flood_sent") > 0);
    for i in [0, 2, 3] {
        let r = h.replica(i);
        assert!(r.metrics().get("drop_future_duplicate") > 0);
        assert!(r.future_buffer_peak_bytes() <= r.config().future_bytes_per_sender);
    }
}
