//! An inconsistent ledger setup is a typed error when the simulator is built, and a restart or
//! state transfer that fails during a run is a violation naming its cause (issue 14, item 1:
//! `outbox_pages: 0` used to stall the cluster after its first crash, visible only as an
//! `EventLimit` minutes later).

use ccron::schedule::{Handlers, Limits};
use ccron::{CronEntry, CronTable, CronTableRegistry, PageRange, Periodic};
use sim_bft::app::ClientId;
use sim_bft::app::{AppError, Application, ExecContext};
use sim_bft::crypto::{Digest32, sha256};
use sim_bft::ledgers::{BookConfig, CronLedger, KvLedger, LedgerScheduler};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{ConfigError, FaultConfig, ViolationKind};

fn book(outbox_pages: u32) -> BookConfig {
    BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 8,
        outbox_pages,
    }
}

fn with_book(outbox_pages: u32) -> CronLedger<KvLedger> {
    let book = LedgerScheduler::new(book(outbox_pages), Handlers::new());
    CronLedger::new(KvLedger::new(), CronTableRegistry::new()).with_scheduler(book)
}

fn app_error(r: Result<impl Sized, ConfigError>) -> (&'static str, String) {
    match r.map(|_| ()) {
        Err(ConfigError::App { check, cause }) => (check, cause),
        other => panic!("expected an application setup error, got {other:?}"),
    }
}

#[test]
fn a_book_without_outbox_pages_is_refused_at_build() {
    let built = Cluster::builder()
        .ticks(vec![1], 1_000)
        .app(|_| with_book(0))
        .build();
    let (check, cause) = app_error(built);
    assert!(check.contains("snapshot restores"), "{check}");
    assert!(cause.contains("no pages for the outbox"), "{cause}");
    // The same book with one outbox page builds; `try_new` names the mistake itself.
    assert!(
        Cluster::builder()
            .ticks(vec![1], 1_000)
            .app(|_| with_book(1))
            .build()
            .is_ok()
    );
    assert!(LedgerScheduler::<KvLedger>::try_new(book(0), Handlers::new()).is_err());
}

#[test]
fn a_book_too_small_for_its_layout_is_refused_at_build() {
    let small = BookConfig {
        book_pages: 4,
        ..book(1)
    };
    assert!(LedgerScheduler::<KvLedger>::try_new(small, Handlers::new()).is_err());
    let ledger = move |_| {
        let book = LedgerScheduler::new(small, Handlers::new());
        CronLedger::new(KvLedger::new(), CronTableRegistry::new()).with_scheduler(book)
    };
    let (_, cause) = app_error(Cluster::builder().ticks(vec![1], 1_000).app(ledger).build());
    assert!(cause.contains("cannot hold"), "{cause}");
}

#[test]
fn a_ticking_component_without_a_table_is_refused_at_build() {
    let built = Cluster::builder()
        .ticks(vec![1, 5], 1_000)
        .app(|_| with_book(1))
        .build();
    let (check, cause) = app_error(built);
    assert!(check.contains("ticking component"), "{check}");
    assert!(cause.contains('5'), "{cause}");
}

#[test]
fn replicas_with_different_tables_are_refused_at_build() {
    let ledger = |id: u32| {
        let mut table = CronTable::with_persistence(1, PageRange::new(1, 2).unwrap(), 4);
        let period = Periodic::every_ms(1_000 + i64::from(id)).unwrap();
        table
            .add(CronEntry::<KvLedger>::periodic(0, period, |_| {}))
            .unwrap();
        let mut registry = CronTableRegistry::new();
        registry.register(table).unwrap();
        CronLedger::new(KvLedger::new(), registry)
    };
    let (check, _) = app_error(Cluster::builder().ticks(vec![1], 1_000).app(ledger).build());
    assert!(check.contains("same setup"), "{check}");
}

/// A state whose snapshot stops restoring once it holds something (a real bug class: a
/// restore that forgets a field, a version check that rejects its own output).
#[derive(Default)]
struct Forgetful(u64);

impl Application for Forgetful {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, _payload: &[u8]) -> Vec<u8> {
        self.0 += 1;
        b"ok".to_vec()
    }
    fn digest(&self) -> Digest32 {
        sha256(&self.0.to_le_bytes())
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        match snapshot {
            [0, 0, 0, 0, 0, 0, 0, 0] => {
                *self = Forgetful(0);
                Ok(())
            }
            _ => Err(AppError::BadSnapshot("version 2 is not supported".into())),
        }
    }
}

#[test]
fn a_failed_restart_is_a_violation_naming_its_cause() {
    let out = Cluster::builder()
        .seed(3)
        .duration_ms(10_000, 10_000)
        .ticks(vec![], 0)
        .clients(2, 100)
        .faults(FaultConfig {
            crashes: 1,
            ..FaultConfig::default()
        })
        .app(|_| Forgetful::default())
        .build()
        .unwrap()
        .run();
    let failures: Vec<_> = out
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::NodeFailure)
        .collect();
    assert!(!failures.is_empty(), "{:?}", out.violations);
    let crashed = out.params.crashes[0].node;
    assert_eq!(failures[0].node, Some(crashed));
    assert!(
        failures[0].detail.contains("version 2 is not supported"),
        "{}",
        failures[0].detail
    );
    assert!(
        failures.iter().all(|v| v.detail.contains("version 2")),
        "{failures:?}"
    );
}

/// A ledger whose cron table persists to pages `first..first + 2`.
fn table_at(first: u32) -> CronLedger<KvLedger> {
    let mut table = CronTable::with_persistence(1, PageRange::new(first, 2).unwrap(), 16);
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
}

#[test]
fn a_table_on_the_replicas_agreed_time_page_is_refused_at_build() {
    // The replica keeps the agreed time in page 0 (ReplicaConfig::time_page). A table given
    // pages 0..2 used to build and run, then diverge at the first restart: the table's copy in
    // page 0 was overwritten every batch (found by examples/cron_contract.rs).
    let (check, cause) = app_error(
        Cluster::builder()
            .ticks(vec![1], 1_000)
            .app(|_| table_at(0))
            .build(),
    );
    assert!(check.contains("reserved pages"), "{check}");
    assert!(cause.contains("agreed time"), "{cause}");
    assert!(
        Cluster::builder()
            .ticks(vec![1], 1_000)
            .app(|_| table_at(1))
            .build()
            .is_ok()
    );
    // Any host building a replica gets the same refusal.
    let cfg = sim_bft::replica::ReplicaConfig::new(0, 4, 7, 1);
    let refused = sim_bft::replica::Replica::with_app(cfg.clone(), Box::new(table_at(0)));
    assert!(
        matches!(refused, Err(sim_bft::replica::ReplicaError::Config(_))),
        "{refused:?}"
    );
    assert!(sim_bft::replica::Replica::with_app(cfg, Box::new(table_at(1))).is_ok());
}
