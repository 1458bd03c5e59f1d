//! Issue 9, defect 5: a primary cannot starve one client's request by ordering everyone else's.
//!
//! The view-change timer used to restart on every executed batch, so a Byzantine primary that
//! kept ordering other clients' requests (progress) while never proposing one client's was never
//! replaced. The timer now runs per waiting request: the oldest request a backup holds must
//! execute within a view-change timeout (plus one status round) of when the backup first saw it.

use crate::replica_support;

use replica_support::Harness;
use sim_bft::replica::Byzantine;

/// Primary 0 starves client 0 while clients 1 and 2 keep writing: the backups change view and
/// client 0's write executes.
#[test]
fn a_primary_starving_one_client_is_replaced() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 8;
        c.log_window = 32;
        if c.id == 0 {
            c.byzantine = Byzantine::StarveClient;
        }
    });
    h.put(0, "starved", "v");
    // 12 s of steady traffic from the other clients: the log keeps moving.
    for k in 0..120u64 {
        h.put(1 + k % 2, &format!("k{k}"), "v");
        h.advance(100);
    }
    assert!(h.replica(0).metrics().get("byzantine_starved_request") > 0);
    for i in 1..4 {
        assert!(
            h.replica(i).view() >= 1,
            "replica {i} still in view 0 under a starving primary"
        );
        assert_eq!(h.replica(i).pending_requests(), 0, "replica {i}");
    }
    assert!(
        h.replies.iter().any(|(c, _)| *c == 0),
        "client 0's request never executed"
    );
    h.assert_agreement(&[1, 2, 3]);
}

/// Steady traffic through an honest primary causes no view change: requests execute long
/// before their timers expire.
#[test]
fn steady_traffic_through_an_honest_primary_keeps_the_view() {
    let mut h = Harness::new(4, |c| {
        c.checkpoint_interval = 8;
        c.log_window = 32;
    });
    for k in 0..120u64 {
        h.put(k % 3, &format!("k{k}"), "v");
        h.advance(100);
    }
    for i in 0..4 {
        assert_eq!(h.replica(i).view(), 0);
        assert_eq!(h.replica(i).pending_requests(), 0);
    }
}

/// The simulator's `starve-client` adversary as the first primary: the starvation checker
/// (every request that reached 2f+1 honest replicas is answered within 20 s) holds. On the old
/// timer (restarted by every executed batch) it reported every one of client 0's requests.
#[test]
fn starve_client_in_the_simulator() {
    use sim_bft::sim::cluster::Cluster;
    use sim_bft::sim::{ByzantineKind, FaultConfig, TimeServiceMode};
    let o = Cluster::builder()
        .seed(1)
        .replicas(4)
        .time_service(TimeServiceMode::Robust)
        .duration_ms(23_000, 5_000)
        .clients(2, 200)
        .faults(FaultConfig {
            byzantine_kind: ByzantineKind::StarveClient,
            pinned_byzantine: vec![0],
            ..FaultConfig::default()
        })
        .build()
        .unwrap()
        .run();
    assert!(o.violations.is_empty(), "{:#?}", o.violations);
    assert!(
        o.nodes
            .iter()
            .all(|n| !n.honest || n.requests_executed > 100)
    );
}
