//! Hostile and stray ticks at a replica: only replicas' internal clients may tick, a malformed
//! payload or an unlisted component is dropped at admission, counted, and creates no state.

use std::collections::BTreeMap;

use sim_bft::crypto::{internal_client_id, replica_signing_key};
use sim_bft::node::{Input, Node};
use sim_bft::protocol::{Request, RequestKind, SignedRequest, Wire, codec};
use sim_bft::replica::{Replica, ReplicaConfig};

const SEED: u64 = 11;
const NOW: i64 = 1_767_225_600_000;

fn replica() -> Replica {
    let mut cfg = ReplicaConfig::new(0, 4, SEED, 1);
    cfg.tick_components = BTreeMap::from([(1, 1_000)]);
    Replica::new(cfg).expect("replica")
}

/// A tick request signed by replica `from`'s internal client, as a peer would relay it.
fn tick_from(from: u32, client: u64, payload: Vec<u8>) -> Input {
    let req = Request {
        client,
        req_seq: 1,
        kind: RequestKind::Tick,
        payload,
    };
    let signed = SignedRequest::sign(&replica_signing_key(SEED, from), req).expect("sign");
    Input::Peer {
        from,
        bytes: codec::encode(&Wire::Request(signed)).expect("encode"),
    }
}

#[test]
fn stray_ticks_are_dropped_counted_and_create_nothing() {
    let mut r = replica();
    let digest = r.state_digest_now();
    let mut out = Vec::new();
    // Unlisted component from our own generator.
    r.handle(NOW, Input::InternalTick { component: 9 }, &mut out);
    assert_eq!(r.metrics().get("tick_unknown_component"), 1);
    // Malformed payload, unlisted component, and a user client pretending to tick.
    r.handle(
        NOW,
        tick_from(1, internal_client_id(1), vec![1, 0, 0]),
        &mut out,
    );
    assert_eq!(r.metrics().get("drop_malformed_tick"), 1);
    r.handle(
        NOW,
        tick_from(1, internal_client_id(1), 9u32.to_le_bytes().to_vec()),
        &mut out,
    );
    assert_eq!(r.metrics().get("drop_unknown_tick_component"), 1);
    r.handle(NOW, tick_from(1, 0, 1u32.to_le_bytes().to_vec()), &mut out);
    assert_eq!(r.metrics().get("drop_unauthorized_tick"), 1);
    assert_eq!(r.pending_requests(), 0);
    assert_eq!(r.ticks_pending().count(), 0);
    assert_eq!(r.state_digest_now(), digest);
    // A well-formed tick of a listed component from a peer's internal client is admitted.
    r.handle(
        NOW,
        tick_from(1, internal_client_id(1), 1u32.to_le_bytes().to_vec()),
        &mut out,
    );
    assert_eq!(r.pending_requests(), 1);
}

#[test]
fn own_ticks_follow_the_rotation_and_the_throttle() {
    // n = 4, f = 1: the senders of period p are replicas 2p mod 4 and 2p+1 mod 4, so replica 0
    // sends in even periods only.
    let mut r = replica();
    let mut out = Vec::new();
    let period = |p: i64| p * 1_000 + 10;
    let p0 = NOW / 1_000;
    let (mine, other) = if p0 % 2 == 0 {
        (p0, p0 + 1)
    } else {
        (p0 + 1, p0)
    };
    r.handle(
        period(other),
        Input::InternalTick { component: 1 },
        &mut out,
    );
    assert_eq!(r.metrics().get("tick_not_my_turn"), 1);
    assert_eq!(r.pending_requests(), 0);
    r.handle(period(mine), Input::InternalTick { component: 1 }, &mut out);
    assert_eq!(r.metrics().get("ticks_submitted"), 1);
    assert_eq!(r.ticks_pending().collect::<Vec<_>>(), vec![1]);
    // At most one per period, and at most one pending per component.
    r.handle(
        period(mine) + 5,
        Input::InternalTick { component: 1 },
        &mut out,
    );
    assert_eq!(r.metrics().get("tick_already_sent_in_period"), 1);
    r.handle(
        period(mine + 2),
        Input::InternalTick { component: 1 },
        &mut out,
    );
    assert_eq!(r.metrics().get("tick_throttled"), 1);
    assert_eq!(r.pending_requests(), 1);
}
