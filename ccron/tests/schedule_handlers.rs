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

mod parked {
    use ccron::outbox::{Outbox, OutboxLimits};
    use ccron::schedule::{
        Action, Handlers, Limits, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, Target,
        Timing,
    };
    use ccron::{Due, MemPages, PageRange, Policy, Principal, Tick};

    const OWNER: Principal = Principal::Client(1);
    const STRANGER: Principal = Principal::Client(2);
    const ADMIN: Principal = Principal::Client(9);

    /// A build registering `names`; each run logs `(handler, id, due)`.
    fn build(names: &[&'static str]) -> Handlers<Vec<(&'static str, u64, Due)>> {
        let mut h: Handlers<Vec<(&'static str, u64, Due)>> = Handlers::new();
        for &name in names {
            h.register(name, move |ctx| {
                let (id, due) = (ctx.id, ctx.due);
                ctx.state.push((name, id, due));
            });
        }
        h
    }

    fn range() -> PageRange {
        PageRange::new(0, 32).unwrap()
    }

    /// Build 1 ("expire", "report") creates: 1 one-shot "expire" at 1 s (OWNER's), 2 "report"
    /// every second from 0, 3 one-shot "expire" at 5 s (STRANGER's); saved.
    fn old_build_pages() -> MemPages {
        let h = build(&["expire", "report"]);
        let mut book = Scheduler::new(4, Limits::default()).with_policy(policy());
        let mk = |handler, timing| ScheduleRequest::Create(NewSchedule::new(handler, timing));
        book.apply(
            &OWNER,
            mk("expire", Timing::At(Due::Time(1_000))),
            &h,
            1,
            Some(0),
        )
        .unwrap();
        let every = Timing::Every {
            period_ms: 1_000,
            start_ms: Some(0),
        };
        book.apply(&OWNER, mk("report", every), &h, 2, Some(0))
            .unwrap();
        book.apply(
            &STRANGER,
            mk("expire", Timing::At(Due::Time(5_000))),
            &h,
            3,
            Some(0),
        )
        .unwrap();
        let mut pages = MemPages::new(4_096, 32);
        book.save(&mut pages, range()).unwrap();
        pages
    }

    fn policy() -> Policy {
        Policy::default().with_admin(9)
    }

    fn load(pages: &MemPages) -> Scheduler {
        Scheduler::load(4, Limits::default(), pages, range())
            .unwrap()
            .with_policy(policy())
    }

    /// A new build without "expire" (renamed "expire-order"): the due one-shots park, keep
    /// their due points and run counters, are listed and counted, survive save and reload
    /// byte-identically on two replicas, and run exactly once when the handler is back.
    #[test]
    fn a_dropped_handler_parks_its_runs_and_consumes_none() {
        let pages = old_build_pages();
        let mut h = build(&["report", "expire-order"]);
        let (mut a, mut b) = (load(&pages), load(&pages));
        let (mut pa, mut pb) = (pages.clone(), pages.clone());
        let mut log = Vec::new();
        let mut outbox = Outbox::new(OutboxLimits::default());
        for (seq, now) in [(10, 1_000), (11, 2_000), (12, 6_000)] {
            let tick = Tick::new(4, seq, Some(now));
            let ra = a.on_tick(&tick, &mut log, &mut h, &mut outbox);
            let mut log_b = Vec::new();
            let rb = b.on_tick(
                &tick,
                &mut log_b,
                &mut h,
                &mut Outbox::new(OutboxLimits::default()),
            );
            assert_eq!(ra, rb);
            match seq {
                10 => assert_eq!(ra.parked, vec![1]),
                12 => assert_eq!(ra.parked, vec![3]),
                _ => assert!(ra.parked.is_empty(), "a parked run is not retaken: {ra:?}"),
            }
            a.check_invariants().unwrap();
            a.save(&mut pa, range()).unwrap();
            b.save(&mut pb, range()).unwrap();
            assert!(
                pa.snapshot() == pb.snapshot(),
                "identical pages on both replicas"
            );
        }
        // Only "report" ran; the one-shots are kept, due points and counters untouched.
        assert!(log.iter().all(|(n, ..)| *n == "report"), "{log:?}");
        for (id, due) in [(1, 1_000), (3, 5_000)] {
            let info = a.get(id).expect("a parked one-shot stays in the book");
            assert!(info.parked);
            assert_eq!((info.next, info.runs), (Some(Due::Time(due)), 0));
        }
        assert_eq!(a.parked_count(), 2);
        let listed: Vec<(String, Vec<u64>)> = a
            .parked()
            .map(|(n, ids)| (n.to_string(), ids.iter().copied().collect()))
            .collect();
        assert_eq!(listed, vec![("expire".to_string(), vec![1, 3])]);
        // Restart: the parked runs come back from the pages.
        let reloaded = load(&pa);
        assert!(reloaded == a);
        assert_eq!(reloaded.parked_count(), 2);

        // A build carrying "expire" again: both run once, on the next tick, at their due point.
        let mut back = build(&["expire", "report"]);
        let mut c = reloaded;
        let mut log = Vec::new();
        let rep = c.on_tick(
            &Tick::new(4, 13, Some(6_100)),
            &mut log,
            &mut back,
            &mut outbox,
        );
        assert_eq!(rep.unparked, 2);
        let expired: Vec<_> = log.iter().filter(|(n, ..)| *n == "expire").collect();
        assert_eq!(
            expired,
            vec![
                &("expire", 1, Due::Time(1_000)),
                &("expire", 3, Due::Time(5_000))
            ]
        );
        assert!(c.get(1).is_none() && c.get(3).is_none() && c.parked_count() == 0);
        c.check_invariants().unwrap();
    }

    /// Parked runs are re-targeted by their owner (only theirs) or an admin (all), to a
    /// registered handler; they then run at their kept due point. Typed refusals otherwise.
    #[test]
    fn parked_runs_are_retargeted_by_their_owner_or_an_admin() {
        let pages = old_build_pages();
        let mut h = build(&["report", "expire-order"]);
        let mut book = load(&pages);
        let mut log = Vec::new();
        let mut outbox = Outbox::new(OutboxLimits::default());
        book.on_tick(
            &Tick::new(4, 10, Some(6_000)),
            &mut log,
            &mut h,
            &mut outbox,
        );
        assert_eq!(book.parked_count(), 2);
        let retarget = |to: &str| ScheduleRequest::Retarget {
            from_handler: "expire".into(),
            to_handler: to.into(),
        };
        assert_eq!(
            book.apply(&OWNER, retarget("nope"), &h, 11, Some(6_000)),
            Err(ScheduleError::UnknownHandler("nope".into()))
        );
        assert_eq!(
            book.apply(
                &Principal::Client(5),
                retarget("expire-order"),
                &h,
                11,
                Some(6_000)
            ),
            Err(ScheduleError::Unauthorized {
                by: Principal::Client(5),
                action: Action::Retarget
            })
        );
        // The owner moves its own (id 1) only.
        assert_eq!(
            book.apply(&OWNER, retarget("expire-order"), &h, 11, Some(6_000)),
            Ok(Some(1))
        );
        let one = book.get(1).unwrap();
        assert!(!one.parked && one.schedule.handler == "expire-order" && one.version == 2);
        assert!(book.get(3).unwrap().parked);
        // The admin moves the rest; then nothing is parked.
        assert_eq!(
            book.apply(&ADMIN, retarget("expire-order"), &h, 12, Some(6_000)),
            Ok(Some(1))
        );
        assert_eq!(
            book.apply(&ADMIN, retarget("expire-order"), &h, 12, Some(6_000)),
            Err(ScheduleError::NothingParked("expire".into()))
        );
        book.check_invariants().unwrap();
        let mut log = Vec::new();
        book.on_tick(
            &Tick::new(4, 13, Some(6_000)),
            &mut log,
            &mut h,
            &mut outbox,
        );
        let moved: Vec<_> = log.iter().filter(|(n, ..)| *n == "expire-order").collect();
        assert_eq!(
            moved,
            vec![
                &("expire-order", 1, Due::Time(1_000)),
                &("expire-order", 3, Due::Time(5_000))
            ]
        );
    }

    /// A parked run can be cancelled (by its owner); a stranger cannot.
    #[test]
    fn a_parked_run_is_cancelled_by_its_owner() {
        let pages = old_build_pages();
        let mut h = build(&["report"]);
        let mut book = load(&pages);
        book.on_tick(
            &Tick::new(4, 10, Some(1_500)),
            &mut Vec::new(),
            &mut h,
            &mut Outbox::new(OutboxLimits::default()),
        );
        assert!(book.get(1).unwrap().parked);
        assert!(matches!(
            book.apply(
                &STRANGER,
                ScheduleRequest::Cancel(Target::Id(1)),
                &h,
                11,
                Some(1_500)
            ),
            Err(ScheduleError::Unauthorized { .. })
        ));
        assert_eq!(
            book.apply(
                &OWNER,
                ScheduleRequest::Cancel(Target::Id(1)),
                &h,
                11,
                Some(1_500)
            ),
            Ok(Some(1))
        );
        assert_eq!(book.parked_count(), 0);
        book.check_invariants().unwrap();
    }
}
