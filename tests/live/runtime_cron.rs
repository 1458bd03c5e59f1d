//! The threaded runtime with real time: every replica runs ccron's real TicksGenerator thread,
//! ticks go through consensus, and each replica's `CronLedger` fires a periodic action on the
//! agreed (wall-clock) time. The fires are observed through a side channel the action writes to.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccron::{CronEntry, CronTable, CronTableRegistry, PageAllocator, Periodic};
use sim_bft::app::ClientId;
use sim_bft::app::{AppError, Application, ExecContext};
use sim_bft::crypto::{Digest32, sha256};
use sim_bft::ledgers::CronLedger;
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{RuntimeConfig, ThreadedCluster, wall_clock_ms};

/// A minimal ledger: the number of times the periodic action ran.
#[derive(Debug, Default)]
struct Counter(u64);

impl Application for Counter {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, _payload: &[u8]) -> Vec<u8> {
        Vec::new()
    }
    fn digest(&self) -> Digest32 {
        sha256(&self.0.to_le_bytes())
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let b: [u8; 8] = snapshot
            .try_into()
            .map_err(|_| AppError::BadSnapshot("length".into()))?;
        self.0 = u64::from_le_bytes(b);
        Ok(())
    }
}

type Seen = Arc<Mutex<BTreeMap<u32, Vec<(u64, i64)>>>>;

const COMPONENT: u32 = 3;
const TICK_MS: u64 = 20;
const PERIOD_MS: i64 = 100;

fn ledger(id: u32, seen: Seen) -> CronLedger<Counter> {
    let mut alloc = PageAllocator::new(1, 8);
    let mut table = CronTable::with_persistence(COMPONENT, alloc.allocate(2).expect("pages"), 4);
    table
        .add(CronEntry::<Counter>::periodic(
            0,
            Periodic::every_ms(PERIOD_MS).expect("period"),
            move |ctx| {
                ctx.state.0 += 1;
                let t = ctx.tick.agreed_time_ms.unwrap_or(i64::MIN);
                if let Ok(mut s) = seen.lock() {
                    s.entry(id)
                        .or_default()
                        .push((ctx.tick.bft_sequence_num, t));
                }
            },
        ))
        .expect("entry");
    let mut registry = CronTableRegistry::new();
    registry.register(table).expect("register");
    CronLedger::new(Counter::default(), registry)
}

#[test]
fn real_ticks_generators_fire_periodic_actions_on_agreed_time() {
    const N: u32 = 4;
    let seen: Seen = Arc::default();
    let replicas: Vec<Replica> = (0..N)
        .map(|i| {
            let mut cfg = ReplicaConfig::new(i, N, 7, 0);
            cfg.tick_components = BTreeMap::from([(COMPONENT, TICK_MS)]);
            Replica::with_app(cfg, Box::new(ledger(i, seen.clone()))).expect("replica")
        })
        .collect();
    let cluster = ThreadedCluster::start(
        replicas,
        RuntimeConfig {
            tick_period_ms: TICK_MS,
            components: vec![COMPONENT],
        },
    )
    .expect("cluster");
    let start = wall_clock_ms();
    // A generous bound on real time: normally well under a second.
    let deadline = start + 30_000;
    let enough = |s: &BTreeMap<u32, Vec<(u64, i64)>>| {
        (0..N).all(|i| s.get(&i).is_some_and(|v| v.len() >= 4))
    };
    while wall_clock_ms() < deadline && !enough(&seen.lock().expect("lock")) {
        while cluster.executed().try_recv().is_ok() {}
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.stop().expect("stop");
    let s = seen.lock().expect("lock");
    assert!(enough(&s), "fires: {s:?}");
    let shortest = (0..N).map(|i| s[&i].len()).min().unwrap_or(0);
    for i in 0..N {
        let v = &s[&i];
        // Every replica fired the same actions at the same (seq, agreed time).
        assert_eq!(v[..shortest], s[&0][..shortest], "replica {i}");
        // Agreed time is wall-clock time, and the action keeps to its period.
        assert!(v.iter().all(|(_, t)| *t >= start - 5_000));
        // Drift-free grid from the first fire: each fire covers a later occurrence.
        let t0 = v[0].1;
        let slots: Vec<i64> = v
            .iter()
            .map(|(_, t)| (t - t0).div_euclid(PERIOD_MS))
            .collect();
        assert!(slots.windows(2).all(|w| w[0] < w[1]), "{v:?}");
    }
}
