//! Seeing what happened in a simulated run: typed access to a replica's application during the
//! run (the `tracing` side is `tests/sim_tracing.rs`).

use sim_bft::ledgers::KvLedger;
use sim_bft::sim::cluster::Cluster;

use crate::support;
use support::Loud;

#[test]
fn a_replicas_application_is_readable_typed_during_the_run() {
    let mut sim = Cluster::builder()
        .duration_ms(4_000, 4_000)
        .ticks(vec![], 0)
        .clients(1, 100)
        .app(|_| Loud::default())
        .build()
        .unwrap();
    assert_eq!(sim.app::<Loud>(0).map(|l| l.0.len()), Some(0));
    assert!(sim.run_until(2_000));
    let keys = sim.app::<Loud>(0).map(|l| l.0.len()).unwrap();
    assert!(keys > 0, "nothing executed by 2 s");
    // Another type is not handed out.
    assert!(sim.app::<KvLedger>(0).is_none());
    let out = sim.run();
    assert!(out.ok(), "{:?}", out.violations);
    for id in 0..4 {
        assert!(out.app(id, |l: &Loud| l.0.len()).unwrap() >= keys);
    }
    assert_eq!(out.app(0, |_: &KvLedger| ()), None);
}
