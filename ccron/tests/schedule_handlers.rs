//! Handlers that outlive code (issue 26): the handler set (names and versions) in the setup
//! digest, so replicas built with different handlers disagree at once.

use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
use ccron::host::{BookConfig, CronLedger, LedgerScheduler};
use ccron::schedule::{Handlers, Limits};
use ccron::{CronTableRegistry, Tick};
use sha2::{Digest, Sha256};

/// A ledger state counting its runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Counter(u64);

impl Application for Counter {
    fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
        b"err unknown".to_vec()
    }
    fn digest(&self) -> Digest32 {
        Sha256::digest(self.0.to_le_bytes()).into()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let b = <[u8; 8]>::try_from(snapshot).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        self.0 = u64::from_le_bytes(b);
        Ok(())
    }
}

fn cfg() -> BookConfig {
    BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    }
}

/// Handlers named `names`, each at the version given.
fn handlers(names: &[(&str, u32)]) -> Handlers<Counter> {
    let mut h: Handlers<Counter> = Handlers::new();
    for &(name, version) in names {
        assert!(h.register_versioned(name, version, |ctx| ctx.state.0 += 1));
    }
    h
}

fn ledger(names: &[(&str, u32)]) -> CronLedger<Counter> {
    CronLedger::new(Counter::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(cfg(), handlers(names)))
}

/// The handler set's digest depends on every name and version, not on registration order.
#[test]
fn the_handler_digest_covers_names_and_versions() {
    let base = handlers(&[("expire", 1), ("report", 1)]).digest();
    assert_eq!(
        handlers(&[("report", 1), ("expire", 1)]).digest(),
        base,
        "registration order does not matter"
    );
    for other in [
        handlers(&[("expire", 1)]),
        handlers(&[("expire", 1), ("report", 2)]),
        handlers(&[("expire", 1), ("reports", 1)]),
        handlers(&[("expire", 1), ("report", 1), ("extra", 1)]),
    ] {
        assert_ne!(other.digest(), base, "{other:?}");
    }
    let h = handlers(&[("expire", 3)]);
    assert_eq!(h.version("expire"), Some(3));
    assert_eq!(h.manifest(), vec![("expire".to_string(), 3)]);
    // The plain registration is version 1.
    let mut plain: Handlers<Counter> = Handlers::new();
    assert!(plain.register("expire", |_| {}));
    assert_eq!(plain.digest(), handlers(&[("expire", 1)]).digest());
}

/// The registry's setup digest covers declared handler sets; a registry without any keeps the
/// digest it had.
#[test]
fn declared_handlers_enter_the_setup_digest() {
    let bare: CronTableRegistry<Counter> = CronTableRegistry::new();
    let mut declared: CronTableRegistry<Counter> = CronTableRegistry::new();
    declared.declare_handlers(1, vec![("expire".to_string(), 1)]);
    assert_ne!(declared.setup_digest(), bare.setup_digest());
    let mut bumped: CronTableRegistry<Counter> = CronTableRegistry::new();
    bumped.declare_handlers(1, vec![("expire".to_string(), 2)]);
    assert_ne!(bumped.setup_digest(), declared.setup_digest());
    assert_eq!(
        declared.declared_handlers(1),
        Some(&[("expire".to_string(), 1)][..])
    );
}

/// Two replicas whose builds differ only by a renamed or re-versioned handler have different
/// ledger digests from the start (before any schedule exists or fires).
#[test]
fn ledgers_with_different_handlers_disagree_at_once() {
    let a = ledger(&[("expire", 1)]);
    let same = ledger(&[("expire", 1)]);
    assert_eq!(a.digest(), same.digest());
    assert_ne!(ledger(&[("expire-order", 1)]).digest(), a.digest());
    assert_ne!(ledger(&[("expire", 2)]).digest(), a.digest());
    // And still after the same tick.
    let (mut a, mut b) = (ledger(&[("expire", 1)]), ledger(&[("expire", 2)]));
    let mut pages = ccron::MemPages::new(4_096, 1);
    for l in [&mut a, &mut b] {
        l.on_tick(Tick::new(1, 1, Some(0)), &mut pages).unwrap();
    }
    assert_ne!(a.digest(), b.digest());
}
