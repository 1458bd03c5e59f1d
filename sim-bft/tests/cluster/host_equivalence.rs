//! Cross-engine equivalence: the same ledger fed the same committed sequence of (seq/height,
//! agreed time, transactions) gives the same fires, application state and cron pages whether it
//! runs inside sim-bft's PBFT replicas or directly through ccron's block-driven entry point
//! (`ccron::host::BlockHost`), which a real engine's adapter calls.
//!
//! The sim-bft side runs 4 replicas (one request or tick per batch, so each executed batch's
//! content is known), records every executed batch as a `ccron::host::Block`, and the host side
//! replays those blocks.

use crate::replica_support;

use std::collections::BTreeMap;

use ccron::MemPages;
use ccron::host::{Application, Block, BlockHost, TickGate, Tx, TxResult, replay};
use replica_support::Harness;
use sim_bft::ledgers::KvOp;
use sim_bft::ledgers::demo::{CONTRACT_COMPONENT, DemoTables, PRUNE_COMPONENT, demo_ledger};
use sim_bft::ledgers::orders::{SchedAppConfig, ScheduledLedger};
use sim_bft::node::Input;
use sim_bft::replica::{Replica, TickSenders};

/// One step of the workload: a client put, or an internal tick of a replica.
#[derive(Debug, Clone, Copy)]
enum Step {
    Put(u64, u32),
    Tick(u32, u32),
}

/// A workload touching every path: puts from several clients, ticks of every component from
/// rotating replicas, over ~40 s of agreed time.
fn workload(components: &[u32]) -> Vec<Step> {
    let mut steps = Vec::new();
    for i in 0..36u32 {
        steps.push(Step::Put(u64::from(i % 3), i));
        let c = components[(i as usize) % components.len()];
        steps.push(Step::Tick(i % 4, c));
    }
    steps
}

/// Runs `steps` on a 4-replica sim-bft cluster of `make()` ledgers, then replays the executed
/// batches through a `BlockHost` of a fresh `make()` ledger, and checks both agree.
fn equivalent<A: Application + 'static>(make: impl Fn() -> A, periods: &[(u32, u64)]) -> usize {
    let periods: BTreeMap<u32, u64> = periods.iter().copied().collect();
    let p = periods.clone();
    let mut h = Harness::new(4, move |c| {
        c.tick_components = p.clone();
        c.tick_senders = TickSenders::All;
    });
    for i in 0..4 {
        let r = Replica::with_app(h.cfgs[i].clone(), Box::new(make())).unwrap();
        h.replicas[i] = Some(r);
    }
    let components: Vec<u32> = periods.keys().copied().collect();
    let mut blocks = Vec::new();
    // The request numbers the harness's clients and the replicas' internal clients use.
    let mut client_numbers: BTreeMap<u64, u64> = BTreeMap::new();
    let mut tick_numbers: BTreeMap<u32, u64> = BTreeMap::new();
    for step in workload(&components) {
        let before = h.executed[0].len();
        let tx = match step {
            Step::Put(client, k) => {
                let payload = KvOp::Put {
                    key: format!("k{k}").into_bytes(),
                    value: b"v".to_vec(),
                }
                .to_payload();
                let bytes = h.request_bytes(client, payload.clone());
                for i in 0..4 {
                    h.input(
                        i,
                        Input::Client {
                            bytes: bytes.clone(),
                        },
                    );
                }
                let number = client_numbers.entry(client).or_insert(0);
                *number += 1;
                Tx::Request {
                    client: sim_bft::node::ledger_client(client),
                    number: *number,
                    payload,
                }
            }
            Step::Tick(r, c) => {
                h.tick(r, c);
                let number = tick_numbers.entry(r).or_insert(0);
                *number += 1;
                Tx::Tick {
                    component: c,
                    sender: Some(r),
                    number: *number,
                }
            }
        };
        h.advance(1_100);
        let new = &h.executed[0][before..];
        assert_eq!(new.len(), 1, "{step:?}: one batch per step");
        assert_eq!(new[0].requests, 1, "{step:?}");
        blocks.push(Block {
            height: new[0].seq,
            agreed_time_ms: new[0].agreed_time_ms,
            txs: vec![tx],
        });
    }
    h.assert_agreement(&[0, 1, 2, 3]);

    let cfg = h.cfgs[0].clone();
    let mut host = BlockHost::new(
        make(),
        MemPages::new(cfg.page_size, cfg.num_pages),
        TickGate::new(4, periods),
    );
    let outcomes = replay(&mut host, &blocks).unwrap();
    let mut fires = 0;
    for (o, e) in outcomes.iter().zip(&h.executed[0]) {
        assert_eq!(o.height, e.seq);
        assert_eq!(o.fires, e.fires, "fires of block {}", e.seq);
        fires += o.fires.len();
        for r in &o.results {
            assert!(!matches!(r, TxResult::TickFailed(_)), "{r:?}");
        }
    }
    let r = h.replica(0);
    assert_eq!(host.app().digest(), r.app().digest(), "application state");
    assert_eq!(host.app().fires(), r.app().fires());
    // The cron tables' pages: the replica's minus its own agreed-time page.
    let replica_pages: Vec<_> = r
        .pages()
        .snapshot()
        .into_iter()
        .filter(|(id, _)| *id != cfg.time_page)
        .collect();
    assert_eq!(host.pages().snapshot(), replica_pages, "cron pages");
    assert_eq!(host.last_agreed_ms(), r.last_agreed_time_ms());
    // One kernel: the exactly-once table, the tick gate and the counters agree too.
    assert_eq!(host.requests(), r.host().requests());
    assert_eq!(host.gate(), r.host().gate());
    assert_eq!(host.counters(), r.host().counters());
    fires
}

#[test]
fn demo_ledger_fires_alike_on_sim_bft_and_on_the_host_entry_point() {
    let fires = equivalent(
        || demo_ledger(&DemoTables::default()).unwrap(),
        &[(PRUNE_COMPONENT, 1_000), (CONTRACT_COMPONENT, 1_000)],
    );
    // Not vacuous: both tables fired several times.
    assert!(fires >= 8, "{fires} fires");
}

#[test]
fn orders_ledger_fires_alike_on_sim_bft_and_on_the_host_entry_point() {
    let app = SchedAppConfig {
        puts_as_orders: true,
        expiry_ms: 2_000,
        ..Default::default()
    };
    let fires = equivalent(|| ScheduledLedger::new(app), &[(app.component, 1_000)]);
    assert!(fires >= 10, "{fires} expiries");
}

/// Regression (issue 10): a cron table's schedule that cannot be saved during a tick was only
/// logged, and the replica carried on with its pages behind its memory. Now the ledger returns
/// `AppError::Fatal` and the replica halts loudly (fail-stop: it stops executing and its
/// invariant check names the cause).
#[test]
fn a_replica_whose_table_schedule_cannot_be_saved_halts_loudly() {
    use ccron::{CronEntry, CronTable, CronTableRegistry, PageRange, Periodic};
    use sim_bft::ledgers::{CronLedger, KvLedger};

    let mut h = Harness::new(4, |c| {
        c.tick_components = [(1, 1_000)].into_iter().collect();
        c.tick_senders = TickSenders::All;
    });
    for i in 0..4 {
        let cfg = h.cfgs[i].clone();
        // The table's range lies past the replica's pages: every save of its schedule fails.
        let ledger = || {
            let range = PageRange::new(cfg.num_pages, 2).unwrap();
            let mut table = CronTable::with_persistence(1, range, 4);
            table
                .add(CronEntry::<KvLedger>::periodic(
                    0,
                    Periodic::every_ms(1_000).unwrap(),
                    |_| {},
                ))
                .unwrap();
            let mut registry = CronTableRegistry::new();
            registry.register(table).unwrap();
            CronLedger::new(KvLedger::new(), registry)
        };
        // Declared (`Application::page_ranges`), such a range is refused when the replica is
        // built; hidden, as by a ledger that forgot to declare it, the save fails at run time.
        assert!(Replica::with_app(cfg.clone(), Box::new(ledger())).is_err());
        let app = ledger();
        h.replicas[i] = Some(Replica::with_app(cfg, Box::new(Undeclared(app))).unwrap());
    }
    h.tick(0, 1);
    // The harness checks every replica's invariants after every input: the first halted one
    // fails it (that is the loud part).
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.advance(1_000)));
    assert!(
        run.is_err(),
        "a halted replica must fail its invariant check"
    );
    let halted: Vec<_> = (0..4)
        .filter_map(|i| h.replica(i).halted().map(str::to_owned))
        .collect();
    assert!(!halted.is_empty());
    for cause in &halted {
        assert!(cause.contains("schedule not saved"), "{cause}");
    }
    let r = (0..4)
        .map(|i| h.replica(i))
        .find(|r| r.halted().is_some())
        .unwrap();
    assert!(r.check_invariants().is_err());
    assert_eq!(r.metrics().get("halted"), 1);
}

/// A ledger that does not declare its reserved pages (`Application::page_ranges` left at its
/// default), so the replica cannot refuse them when it is built.
struct Undeclared(sim_bft::ledgers::CronLedger<sim_bft::ledgers::KvLedger>);

impl Application for Undeclared {
    fn execute(
        &mut self,
        ctx: ccron::host::ExecContext,
        client: ccron::ClientId,
        payload: &[u8],
    ) -> Vec<u8> {
        self.0.execute(ctx, client, payload)
    }
    fn digest(&self) -> ccron::host::Digest32 {
        self.0.digest()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.snapshot()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), ccron::host::AppError> {
        self.0.restore(snapshot)
    }
    fn on_tick(
        &mut self,
        tick: ccron::Tick,
        pages: &mut dyn ccron::ReservedPages,
    ) -> Result<(), ccron::host::AppError> {
        self.0.on_tick(tick, pages)
    }
    fn reload(&mut self, pages: &dyn ccron::ReservedPages) -> Result<(), ccron::host::AppError> {
        self.0.reload(pages)
    }
    fn halted(&self) -> Option<&ccron::host::AppError> {
        self.0.halted()
    }
}
