//! `ClusterClient` on the threaded runtime (issue 25, item 4): paced, f+1 equal replies,
//! re-sent, never a silent drop.

use std::time::Duration;

use sim_bft::ledgers::KvOp;
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{
    ClientConfig, ClientError, ClusterClient, RuntimeConfig, ThreadedCluster, wall_clock_ms,
};

const N: u32 = 4;
const SEED: u64 = 42;

fn cluster() -> ThreadedCluster {
    let replicas: Vec<Replica> = (0..N)
        .map(|i| Replica::new(ReplicaConfig::new(i, N, SEED, 2)).unwrap())
        .collect();
    ThreadedCluster::start(
        replicas,
        RuntimeConfig {
            tick_period_ms: 0,
            components: vec![],
        },
    )
    .unwrap()
}

fn put(k: u64) -> Vec<u8> {
    KvOp::Put {
        key: format!("k{k}").into_bytes(),
        value: vec![1],
    }
    .to_payload()
}

#[test]
fn a_paced_client_gets_every_result_from_f_plus_one_replicas() {
    let cluster = cluster();
    let mut client = ClusterClient::new(SEED, N, 2, 0, 1, ClientConfig::default());
    // 600 requests: more than the replicas' 256-number window, so pacing matters.
    const TOTAL: u64 = 600;
    let mut sent = 0;
    let mut done = std::collections::BTreeSet::new();
    let deadline = wall_clock_ms() + 60_000;
    while done.len() < TOTAL as usize && wall_clock_ms() < deadline {
        while sent < TOTAL {
            match client.send(&cluster, put(sent + 1)) {
                Ok(_) => sent += 1,
                Err(ClientError::WindowFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if let Ok(reply) = cluster.replies().recv_timeout(Duration::from_millis(20))
            && let Some((n, _)) = client.on_reply(&reply)
        {
            assert!(done.insert(n), "request {n} completed twice");
        }
        client.poll(&cluster);
    }
    assert_eq!(done.len(), TOTAL as usize, "every request got its result");
    assert_eq!(client.in_flight(), 0);
    assert_eq!(client.bad_replies(), 0);
    // A blocking call on top.
    client
        .call(&cluster, put(1_000), Duration::from_secs(20))
        .unwrap();
    assert_eq!(client.in_flight(), 0);
    cluster.stop().unwrap();
}

#[test]
fn the_window_refuses_before_the_replicas_would() {
    let cluster = cluster();
    // Asking for more than the window allows is lowered to 255 in flight.
    let cfg = ClientConfig {
        max_in_flight: 10_000,
        resend_after_ms: 60_000,
    };
    let mut client = ClusterClient::new(SEED, N, 2, 1, 1, cfg);
    let mut accepted = 0;
    loop {
        match client.send(&cluster, put(accepted)) {
            Ok(_) => accepted += 1,
            Err(ClientError::WindowFull { in_flight }) => {
                assert_eq!(in_flight, 255);
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(accepted <= 255);
    }
    assert_eq!(accepted, 255);
    cluster.stop().unwrap();
}
