//! Normal case, checkpoints, view change, state transfer and recovery on a 4-replica in-order
//! harness.

use crate::replica_support;

use replica_support::Harness;
use sim_bft::node::{Input, Node};
use sim_bft::protocol::SignedReply;
use sim_bft::replica::Byzantine;

#[test]
fn normal_case_commits_batches_identically() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
    });
    for k in 0..200 {
        h.put(k % 4, &format!("k{k}"), "v");
        if k % 7 == 0 {
            h.tick((k % 4) as u32, 3);
        }
        if k % 16 == 15 {
            h.deliver_all();
        }
    }
    h.deliver_all();
    let n = h.assert_agreement(&[0, 1, 2, 3]);
    assert!(n >= 5, "only {n} batches");
    for i in 0..4 {
        assert_eq!(h.total_requests(i), h.total_requests(0));
        assert_eq!(
            h.replica(i).state_digest_now(),
            h.replica(0).state_digest_now()
        );
        assert!(
            h.replica(i).stable_seq() >= 4,
            "no stable checkpoint at {i}"
        );
        assert!(h.replica(i).log_len() as u64 <= 8);
        assert_eq!(
            h.replica(i).metrics().dropped(),
            0,
            "{:?}",
            h.replica(i).metrics()
        );
    }
    let ticks: usize = h.executed[0].iter().map(|e| e.ticks.len()).sum();
    assert!(ticks >= 1);
    assert!(h.total_requests(0) >= 200);
    // Replies verify and every request got one from each replica.
    let ring = sim_bft::crypto::Keyring::from_seed(replica_support::SEED, 4, 8);
    let mut ok = 0;
    for (client, bytes) in &h.replies {
        let r = SignedReply::open(bytes, &ring).unwrap();
        assert_eq!(r.client, *client);
        ok += 1;
    }
    assert_eq!(ok, 200 * 4);
    // A reply whose result or position was altered does not verify.
    let (_, bytes) = &h.replies[5];
    let mut signed: SignedReply = sim_bft::protocol::codec::decode(bytes, 1 << 20).unwrap();
    signed.reply.result.push(1);
    let tampered = sim_bft::protocol::codec::encode(&signed).unwrap();
    assert!(SignedReply::open(&tampered, &ring).is_err());
    signed.reply.result.pop();
    signed.reply.index ^= 1;
    let tampered = sim_bft::protocol::codec::encode(&signed).unwrap();
    assert!(SignedReply::open(&tampered, &ring).is_err());
    // Agreed time strictly increases.
    let times: Vec<i64> = h.executed[0]
        .iter()
        .map(|e| e.agreed_time_ms.unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
}

#[test]
fn silent_primary_triggers_view_change_and_progress_resumes() {
    let mut h = Harness::new(4, |c| {
        if c.id == 0 {
            c.byzantine = Byzantine::Silent;
        }
    });
    for k in 0..10 {
        h.put(1, &format!("a{k}"), "x");
    }
    h.deliver_all();
    assert_eq!(h.executed[1].len(), 0);
    h.advance(5_000);
    for i in 1..4 {
        assert!(h.replica(i).view() >= 1, "replica {i} still in view 0");
        assert!(!h.replica(i).in_view_change());
    }
    for k in 0..10 {
        h.put(2, &format!("b{k}"), "y");
    }
    h.advance(100);
    h.assert_agreement(&[1, 2, 3]);
    for i in 1..4 {
        assert_eq!(h.total_requests(i), 20, "replica {i}");
        assert!(h.replica(i).metrics().get("view_changes_completed") >= 1);
    }
}

#[test]
fn lagging_replica_catches_up_by_state_transfer() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
    });
    h.isolated.insert(3);
    for k in 0..120 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.tick((k % 3) as u32, 9);
        h.deliver_all();
    }
    assert_eq!(h.executed[3].len(), 0);
    h.isolated.clear();
    for k in 0..40 {
        h.put(0, &format!("z{k}"), "w");
        h.tick(0, 9);
        h.advance(20);
    }
    h.advance(3_000);
    let r3 = h.replica(3);
    assert!(
        r3.metrics().get("state_transfers_completed") >= 1,
        "{:?}",
        r3.metrics()
    );
    assert_eq!(r3.last_executed(), h.replica(0).last_executed());
    assert_eq!(r3.state_digest_now(), h.replica(0).state_digest_now());
    assert_eq!(r3.pages(), h.replica(0).pages());
    assert!(!r3.pages().snapshot().is_empty());
    assert_eq!(r3.last_agreed_time_ms(), h.replica(0).last_agreed_time_ms());
    h.assert_agreement(&[0, 1, 2, 3]);
}

#[test]
fn crashed_replica_recovers_from_storage_and_rejoins() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 4;
        c.log_window = 8;
    });
    for k in 0..30 {
        h.put(1, &format!("k{k}"), "v");
        h.deliver_all();
    }
    let before = h.replica(2).last_executed();
    h.crash(2);
    for k in 0..30 {
        h.put(1, &format!("m{k}"), "v");
        h.deliver_all();
    }
    h.recover(2);
    assert!(h.replica(2).last_executed() >= before.saturating_sub(4));
    for k in 0..30 {
        h.put(1, &format!("n{k}"), "v");
        h.advance(20);
    }
    h.advance(3_000);
    assert_eq!(h.replica(2).last_executed(), h.replica(0).last_executed());
    assert_eq!(
        h.replica(2).state_digest_now(),
        h.replica(0).state_digest_now()
    );
    assert_eq!(
        h.replica(2).last_agreed_time_ms(),
        h.replica(0).last_agreed_time_ms()
    );
    h.assert_agreement(&[0, 1, 2, 3]);
}

#[test]
fn tick_throttle_allows_one_pending_per_component() {
    let mut h = Harness::new(4, |_| {});
    // Replica 1 is a backup: its ticks stay pending until the batch executes.
    h.tick(1, 5);
    h.tick(1, 5);
    h.tick(1, 6);
    assert_eq!(h.replica(1).metrics().get("tick_throttled"), 1);
    assert_eq!(h.replica(1).ticks_pending().collect::<Vec<_>>(), vec![5, 6]);
    // The backup's own ticks leave together, in one bundle, when its flush deadline fires.
    h.deliver_all();
    assert_eq!(h.replica(1).metrics().get("bundles_sent"), 0);
    assert_eq!(h.replica(1).next_deadline(), Some(h.now));
    h.input(1, Input::Timer);
    assert_eq!(h.replica(1).metrics().get("bundles_sent"), 1);
    h.deliver_all();
    assert_eq!(h.replica(0).metrics().get("bundles_received"), 1);
    assert_eq!(h.replica(1).ticks_pending().count(), 0);
    h.tick(1, 5);
    assert_eq!(h.replica(1).metrics().get("ticks_submitted"), 3);
    h.input(1, Input::Timer);
    h.deliver_all();
    let ticks: Vec<u32> = h.executed[0].iter().flat_map(|e| e.ticks.clone()).collect();
    assert_eq!(ticks, vec![5, 6, 5]);
}

#[test]
fn a_lost_tick_is_sent_again_when_its_component_ticks_next() {
    let mut h = Harness::new(4, |_| {});
    h.tick(1, 5);
    h.input(1, Input::Timer);
    // The network loses the bundle: no replica ever sees the tick.
    assert!(!h.queue.is_empty());
    h.queue.clear();
    h.advance(100);
    assert!(h.executed[0].iter().all(|e| e.ticks.is_empty()));
    assert_eq!(h.replica(1).ticks_pending().collect::<Vec<_>>(), vec![5]);
    // The next tick of the component is throttled and re-sends the pending one, unchanged.
    h.tick(1, 5);
    let m = h.replica(1).metrics();
    assert_eq!(
        (m.get("tick_throttled"), m.get("tick_retransmitted")),
        (1, 1)
    );
    assert_eq!(
        m.get("ticks_submitted"),
        1,
        "no new request, no new signature"
    );
    h.advance(100);
    for i in 0..4 {
        let ticks: Vec<u32> = h.executed[i].iter().flat_map(|e| e.ticks.clone()).collect();
        assert_eq!(ticks, vec![5], "replica {i}");
    }
    assert_eq!(h.replica(1).ticks_pending().count(), 0);
}

#[test]
fn failed_tick_enqueue_does_not_leak_the_mark() {
    let mut h = Harness::new(4, |c| c.max_pending = 1);
    h.put(0, "fill", "the queue"); // replica 1 now holds one pending request
    h.tick(1, 4);
    let m = h.replica(1).metrics();
    assert_eq!(m.get("tick_enqueue_failed"), 1);
    assert_eq!(m.get("drop_pending_full"), 1);
    assert_eq!(h.replica(1).ticks_pending().count(), 0);
    h.deliver_all();
    h.tick(1, 4);
    assert_eq!(h.replica(1).ticks_pending().collect::<Vec<_>>(), vec![4]);
}

#[test]
fn view_change_clears_tick_marks_and_ticks_flow_in_the_new_view() {
    let mut h = Harness::new(4, |c| {
        if c.id == 0 {
            c.byzantine = Byzantine::Silent;
        }
    });
    h.tick(2, 8);
    h.deliver_all();
    assert_eq!(h.replica(2).ticks_pending().collect::<Vec<_>>(), vec![8]);
    h.advance(5_000);
    assert!(h.replica(2).view() >= 1);
    // The old tick was re-forwarded to the new primary and executed, clearing the mark; in
    // any case the mark no longer blocks the component.
    h.tick(2, 8);
    h.advance(100);
    let ticks: Vec<u32> = h.executed[2].iter().flat_map(|e| e.ticks.clone()).collect();
    assert!(
        !ticks.is_empty() && ticks.iter().all(|c| *c == 8),
        "{ticks:?}"
    );
    assert_eq!(h.replica(2).ticks_pending().count(), 0);
    h.assert_agreement(&[1, 2, 3]);
}
