//! The escrow ledger on the simulated cluster (4 PBFT replicas, a crash, 2% loss, two clients),
//! the same type the node binary runs on Malachite: settlements on the London 10-second grid,
//! refunds 3 s after their request unless confirmed, one outbox record per refund, and every
//! replica in the same final state.

use escrow_node::{ESCROW, REFUNDS, SETTLE};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{SimRng, Workload};

/// A client of the demo: `escrow_node::demo_request` for its requests, all answered `ok`.
struct Client(u64);

impl Workload for Client {
    fn payload(&mut self, number: u64, _rng: &mut SimRng) -> Vec<u8> {
        escrow_node::demo_request(ccron::ClientId::from_index(self.0), number + 1)
    }
}

#[test]
fn the_escrow_ledger_runs_on_the_simulated_cluster() {
    let sim = Cluster::builder()
        .seed(5)
        .start_at("2026-10-25T00:59:00Z") // across the UK's change back to GMT at 01:00Z
        .unwrap()
        .duration_ms(60_000, 20_000)
        .ticks(vec![ESCROW], 500)
        .clients(2, 700)
        .workload(|c| Box::new(Client(u64::from(c))))
        .app(|_| escrow_node::ledger())
        .build()
        .unwrap();
    let out = sim.run();
    assert!(
        out.ok(),
        "{:?}\nreplay: {}",
        out.violations,
        out.replay_command()
    );
    let state = |i| {
        out.app(i, |l: &ccron::host::CronLedger<escrow_node::Escrow>| {
            (l.state().clone(), l.scheduler().map(|s| s.outbox().len()))
        })
        .unwrap()
    };
    let (s0, outbox0) = state(0);
    assert!((1..4).all(|i| state(i) == (s0.clone(), outbox0)));
    assert!(s0.refunded > 0 && s0.released > 0, "{s0:?}");
    assert!(s0.settlements >= 4, "one per 10 s of the minute: {s0:?}");
    // One outbox record per refund and per release, in the ledger's one outbox.
    let refunds = out
        .events
        .fires
        .iter()
        .filter(|f| f.replica == 0 && f.position == REFUNDS)
        .count();
    assert!(refunds > 0);
    let (refunded, released) = out
        .app(0, |l: &ccron::host::CronLedger<escrow_node::Escrow>| {
            let outbox = l.scheduler().unwrap().outbox();
            let count = |h: &str| outbox.iter().filter(|(_, r)| r.handler == h).count();
            (count("escrow-refunded"), count("escrow-released"))
        })
        .unwrap();
    assert!(
        refunded > 0 && refunded <= refunds,
        "{refunded} of {refunds}"
    );
    assert!(released > 0 && Some(refunded + released) == outbox0);
    // Every hold was refunded or confirmed (released or awaiting release), never both.
    assert!(s0.holds.len() + s0.confirmed.len() + refunded + released > 0);
    // Settlements on the 10-second grid of London wall time (= UTC seconds across the change).
    for f in out.events.fires.iter().filter(|f| f.position == SETTLE) {
        let due = f.due_ms.unwrap();
        assert_eq!(due % 10_000, 0, "{f:?}");
        assert!(
            (0..5_000).contains(&(f.agreed_time_ms.unwrap() - due)),
            "{f:?}"
        );
    }
}
