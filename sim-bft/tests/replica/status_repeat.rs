//! A peer that asks again, by `Status`, while this replica has not executed anything since its
//! last answer (issue 9 campaign sample): the replica sent every certificate up to its last
//! executed seq already, and the range of certificates still to send is empty. It used to be a
//! `BTreeMap::range` with its start one above its end, which panics: any peer could crash a
//! stalled replica with two `Status` messages a quarter view-change timeout apart.

use crate::replica_support;

use replica_support::{Harness, SEED};
use sim_bft::crypto::replica_signing_key;
use sim_bft::node::{Input, NodeId};
use sim_bft::protocol::{Body, Payload, SignedMsg, Wire, codec};

fn signed(from: NodeId, body: Body) -> Vec<u8> {
    let msg = SignedMsg::sign(&replica_signing_key(SEED, from), &Payload { from, body }).unwrap();
    codec::encode(&Wire::Signed(msg)).unwrap()
}

/// The commit certificates queued from `from` to `to` (the queue is emptied).
fn committed_sent(h: &mut Harness, from: NodeId, to: NodeId) -> Vec<u64> {
    let mut seqs = Vec::new();
    for (f, t, b) in std::mem::take(&mut h.queue) {
        if f != from || t != to {
            continue;
        }
        let Wire::Signed(msg) = codec::decode::<Wire>(&b, 1 << 24).unwrap() else {
            continue;
        };
        let p: Payload = codec::decode(&msg.payload, 1 << 24).unwrap();
        if let Body::Committed { seq, .. } = p.body {
            seqs.push(seq);
        }
    }
    seqs
}

fn status_from_3(h: &mut Harness) {
    let status = Body::Status {
        view: 0,
        last_executed: 0,
    };
    h.input(
        0,
        Input::Peer {
            from: 3,
            bytes: signed(3, status),
        },
    );
}

#[test]
fn a_repeated_status_from_a_peer_that_has_everything_sent_does_not_panic() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
    });
    h.isolated.insert(3);
    for k in 0..3 {
        h.put(k % 2, &format!("k{k}"), "v");
        h.deliver_all();
    }
    let executed = h.replica(0).last_executed();
    assert!(executed >= 3, "executed {executed}");
    h.queue.clear();
    // First answer: every certificate above the peer's position.
    status_from_3(&mut h);
    let first = committed_sent(&mut h, 0, 3);
    assert_eq!(first, (1..=executed).collect::<Vec<_>>());
    // The same question past the per-peer rate limit (a quarter view-change timeout) but within
    // a view-change timeout, nothing executed since: nothing to send, and no panic.
    let vct = h.cfgs[0].view_change_timeout_ms;
    h.now += vct / 4 + 1;
    status_from_3(&mut h);
    assert_eq!(committed_sent(&mut h, 0, 3), Vec::<u64>::new());
    assert_eq!(h.replica(0).last_executed(), executed);
    // After a view-change timeout the certificates are sent again (the peer may have lost them).
    h.now += vct;
    status_from_3(&mut h);
    assert_eq!(committed_sent(&mut h, 0, 3), first);
}
