//! Liveness defects the issue 9 campaign found (docs/simulator.md, "Issue 9 campaign"), each
//! reduced to a deterministic replica-level scenario. Both fail on the parent of the fix
//! (commit 378515b): the seq stays uncommitted at the replica that lacks it.

use crate::replica_support;

use replica_support::Harness;
use sim_bft::node::{Input, NodeId};
use sim_bft::protocol::{Body, Payload, Wire, codec};
use sim_bft::replica::{Byzantine, ReplicaConfig};

fn body_of(bytes: &[u8]) -> Option<Body> {
    let Ok(Wire::Signed(m)) = codec::decode::<Wire>(bytes, 1 << 20) else {
        return None;
    };
    codec::decode::<Payload>(&m.payload, 1 << 20)
        .ok()
        .map(|p| p.body)
}

/// Delivers the queue, dropping what `lose(from, to, body)` says.
fn deliver_except(h: &mut Harness, lose: impl Fn(NodeId, NodeId, Option<&Body>) -> bool) {
    while let Some((src, dst, bytes)) = h.queue.pop_front() {
        if lose(src, dst, body_of(&bytes).as_ref()) {
            continue;
        }
        h.input(dst, Input::Peer { from: src, bytes });
    }
}

/// Campaign C/bad-signatures seed 2, D/silent seed 3: a backup cut off while the primary sent
/// a pre-prepare (and the others their votes) has no log entry for that seq. It never listed
/// the seq in its `Have`, so no one sent it anything again; with f replicas that do not vote,
/// the honest replicas are the whole quorum and the seq stalled until a view change (which
/// failed again when the next primary was faulty). A peer's `Have` now tells it the seq exists.
#[test]
fn a_backup_that_lost_every_message_of_a_seq_learns_it_from_a_peers_have() {
    let mut h = Harness::new(4, |c: &mut ReplicaConfig| {
        c.retransmit_interval_ms = 50;
        if c.id == 3 {
            c.byzantine = Byzantine::Silent;
        }
    });
    h.put(0, "k", "v");
    // Replica 2 is cut off for the whole normal case of seq 1.
    deliver_except(&mut h, |from, to, _| from == 2 || to == 2);
    for i in 0..3 {
        assert_eq!(h.replica(i).last_executed(), 0, "replica {i} before");
    }
    // Well below the view-change timeout (2 s): recovered in view 0.
    h.advance(600);
    for i in 0..3 {
        let r = h.replica(i);
        assert_eq!(r.last_executed(), 1, "replica {i}: {r:?}");
        assert_eq!(r.view(), 0, "replica {i} changed view");
    }
    h.assert_agreement(&[0, 1, 2]);
}

/// Campaign B/bad-digests seed 3, D/bad-signatures seed 3, D/bad-digests seed 3: a replica
/// that committed a seq by a received `Committed` certificate (not by votes it collected)
/// could not forward it, because only its own matching commit votes counted as a
/// certificate. When every honest replica still up had committed that way, the one that
/// lacked the seq never got it. The certificate it committed by is now forwarded.
#[test]
fn a_commit_certificate_received_is_forwarded_to_a_peer_that_lacks_the_seq() {
    let mut h = Harness::new(7, |c: &mut ReplicaConfig| {
        c.retransmit_interval_ms = 50;
    });
    h.put(0, "k", "v");
    // Replicas 0..=4 (2f+1 = 5) commit seq 1 by their votes; 5 and 6 only get the
    // pre-prepare (and none of their messages leave).
    deliver_except(&mut h, |from, to, body| {
        from >= 5 || (to >= 5 && !matches!(body, Some(Body::PrePrepare { .. })))
    });
    for i in 0..5 {
        assert_eq!(h.replica(i).last_executed(), 1, "replica {i}");
    }
    // Replica 5 catches up (6 still cut off): by a certificate from the others' answers.
    h.isolated.insert(6);
    h.advance(300);
    let r5 = h.replica(5);
    assert_eq!(r5.last_executed(), 1, "replica 5: {r5:?}");
    assert!(r5.metrics().get("committed_certs_applied") >= 1);
    // Now only 5 can help 6.
    h.isolated.clear();
    h.isolated.extend(0..5);
    h.advance(600);
    let r6 = h.replica(6);
    assert_eq!(r6.last_executed(), 1, "replica 6: {r6:?}");
    assert_eq!(r6.view(), 0);
    h.assert_agreement(&[0, 5, 6]);
}

/// Campaign D/silent 44, 87, 99 and D/bad-digests 5, 44, 99 (n = 10, `--crash-at-view-change`:
/// whole-cluster `NoProgress` after healing). A backup accepted a pre-prepare, and crashed
/// before its prepare got out (right after entering a view). Votes are not persisted: after
/// the restart it held the entry but not its own prepare, so the retransmission (which answers
/// a peer's `Have` with the replica's own held messages only) never re-sent it. With f
/// replicas that do not vote, the honest replicas are the whole quorum: no honest replica
/// could prepare the seq in that view. A restarted backup now rebuilds its own prepare of the
/// current view's accepted entries (the same signed bytes: ed25519 is deterministic).
#[test]
fn a_restarted_backup_re_sends_the_prepare_it_lost_in_the_crash() {
    let mut h = Harness::new(4, |c: &mut ReplicaConfig| {
        c.retransmit_interval_ms = 50;
        if c.id == 3 {
            c.byzantine = Byzantine::Silent;
        }
    });
    h.put(0, "k", "v");
    // Replica 2 gets the pre-prepare, but nothing it sends gets out; then it crashes.
    deliver_except(&mut h, |from, _, _| from == 2);
    for i in 0..3 {
        assert_eq!(h.replica(i).last_executed(), 0, "replica {i} before");
    }
    h.crash(2);
    h.recover(2);
    assert_eq!(
        h.replica(2).metrics().get("own_prepare_restored"),
        1,
        "{:?}",
        h.replica(2)
    );
    // Well below the view-change timeout (2 s): recovered in view 0.
    h.advance(600);
    for i in 0..3 {
        let r = h.replica(i);
        assert_eq!(r.last_executed(), 1, "replica {i}: {r:?}");
        assert_eq!(r.view(), 0, "replica {i} changed view");
    }
    h.assert_agreement(&[0, 1, 2]);
}

/// The same crash, but the batch's time check had failed at the backup (it withheld its
/// vote): the restart must not turn the withheld vote into a prepare (`vote_ok` is persisted
/// with the entry).
#[test]
fn a_restarted_backup_does_not_prepare_what_it_withheld_its_vote_on() {
    let mut h = Harness::new(4, |_c: &mut ReplicaConfig| {});
    // Replica 2's clock is far ahead: the primary's stamp fails its time check.
    h.clock_offset_ms[2] = 60_000;
    h.put(0, "k", "v");
    // Replica 2 gets only the pre-prepare (it stays uncommitted there).
    deliver_except(&mut h, |from, to, body| {
        from == 2 || (to == 2 && !matches!(body, Some(Body::PrePrepare { .. })))
    });
    h.crash(2);
    h.recover(2);
    let r2 = h.replica(2);
    assert_eq!(r2.last_executed(), 0, "{r2:?}");
    assert_eq!(r2.metrics().get("own_prepare_restored"), 0, "{r2:?}");
    // The same schedule without the clock offset does restore it (the test can fail).
    let mut h = Harness::new(4, |_c: &mut ReplicaConfig| {});
    h.put(0, "k", "v");
    deliver_except(&mut h, |from, to, body| {
        from == 2 || (to == 2 && !matches!(body, Some(Body::PrePrepare { .. })))
    });
    h.crash(2);
    h.recover(2);
    assert_eq!(h.replica(2).metrics().get("own_prepare_restored"), 1);
}
