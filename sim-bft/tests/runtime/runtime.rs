//! The threaded runtime runs the same replica code on real threads with real time: a 4-replica
//! cluster commits signed client requests and internal ticks.

use std::time::Duration;

use sim_bft::crypto::client_signing_key;
use sim_bft::ledgers::KvOp;
use sim_bft::protocol::client_request_bytes;
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{RuntimeConfig, ThreadedCluster, wall_clock_ms};

#[test]
fn four_replica_threaded_cluster_commits_client_requests() {
    const N: u32 = 4;
    const CLIENTS: u64 = 2;
    const PER_CLIENT: u64 = 40;
    let key_seed = 42;
    let replicas: Vec<Replica> = (0..N)
        .map(|i| Replica::new(ReplicaConfig::new(i, N, key_seed, CLIENTS)).unwrap())
        .collect();
    let cluster = ThreadedCluster::start(
        replicas,
        RuntimeConfig {
            tick_period_ms: 20,
            components: vec![7],
        },
    )
    .unwrap();
    for c in 0..CLIENTS {
        let key = client_signing_key(key_seed, c);
        for k in 1..=PER_CLIENT {
            let op = KvOp::Put {
                key: format!("c{c}/{k}").into_bytes(),
                value: vec![1],
            };
            let bytes = client_request_bytes(&key, c, k, op.to_payload()).unwrap();
            cluster.submit(&bytes).unwrap();
        }
    }
    // Each replica must execute every user request (ticks are counted separately).
    let want = CLIENTS * PER_CLIENT;
    let mut user = [0u64; N as usize];
    let mut ticks = [0u64; N as usize];
    let mut digests = std::collections::BTreeMap::new();
    // A generous bound on real time: the cluster normally needs well under a second.
    let deadline = wall_clock_ms() + 30_000;
    while (user.iter().any(|u| *u < want) || ticks.contains(&0)) && wall_clock_ms() < deadline {
        if let Ok((id, e)) = cluster.executed().recv_timeout(Duration::from_millis(100)) {
            user[id as usize] += u64::from(e.requests) - e.ticks.len() as u64;
            ticks[id as usize] += e.ticks.len() as u64;
            // Equal sequence numbers, equal state digests, across threads too.
            let d = digests.entry(e.seq).or_insert(e.state_digest);
            assert_eq!(*d, e.state_digest, "divergence at seq {}", e.seq);
        }
    }
    let mut replies = 0;
    while cluster.replies().try_recv().is_ok() {
        replies += 1;
    }
    let stats = cluster.stop().unwrap();
    assert!(
        user.iter().all(|u| *u == want),
        "user requests executed: {user:?}"
    );
    assert!(ticks.iter().all(|t| *t > 0), "ticks executed: {ticks:?}");
    assert!(replies >= want, "only {replies} replies");
    assert!(
        stats
            .iter()
            .all(|s| s.last_executed_seq > 0 && s.stored_keys > 0)
    );
}
