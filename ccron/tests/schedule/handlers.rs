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

    const OWNER: Principal = Principal::Client(ccron::ClientId([1; 32]));
    const STRANGER: Principal = Principal::Client(ccron::ClientId([2; 32]));
    const ADMIN: Principal = Principal::Client(ccron::ClientId([9; 32]));

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
        Policy::default().with_admin(ccron::ClientId([9; 32]))
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
                &Principal::Client(ccron::ClientId([5; 32])),
                retarget("expire-order"),
                &h,
                11,
                Some(6_000)
            ),
            Err(ScheduleError::Unauthorized {
                by: Principal::Client(ccron::ClientId([5; 32])),
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

mod failing {
    use std::collections::BTreeMap;

    use ccron::outbox::{Outbox, OutboxLimits};
    use ccron::schedule::{
        AfterFailure, HandlerError, Handlers, Limits, Misfire, NewSchedule, RetryPolicy,
        RunOutcome, RunPolicy, ScheduleError, ScheduleRequest, Scheduler, Target, Timing,
        Transactional,
    };
    use ccron::{Due, Principal, Tick};
    use proptest::prelude::*;

    /// A ledger state with an undo log: each write records the old value while a run is open.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub(super) struct Bank {
        pub balances: BTreeMap<u64, i64>,
        undo: Vec<(u64, Option<i64>)>,
        open: bool,
    }

    /// Attempts seen, `(schedule id, attempt, agreed time)`: an observation outside the
    /// replicated state (rollbacks do not touch it).
    pub(super) type Seen = std::sync::Arc<std::sync::Mutex<Vec<(u64, u32, i64)>>>;

    impl Bank {
        pub fn credit(&mut self, account: u64, amount: i64) {
            let old = self.balances.get(&account).copied();
            if self.open {
                self.undo.push((account, old));
            }
            self.balances.insert(account, old.unwrap_or(0) + amount);
        }
    }

    impl Transactional for Bank {
        fn begin_run(&mut self) {
            self.open = true;
            self.undo.clear();
        }
        fn commit_run(&mut self) {
            self.open = false;
            self.undo.clear();
        }
        fn rollback_run(&mut self) {
            self.open = false;
            while let Some((account, old)) = self.undo.pop() {
                match old {
                    Some(v) => self.balances.insert(account, v),
                    None => self.balances.remove(&account),
                };
            }
        }
    }

    /// Handlers: "pay" credits account 1, emits, queues a follow-up, then fails while the
    /// payload's first byte says how many attempts fail (255: always) by an error ("pay") or a
    /// panic ("pay-panic"); "ok" credits account 2.
    pub(super) fn handlers(transactional: bool, seen: &Seen) -> Handlers<Bank> {
        let mut h: Handlers<Bank> = if transactional {
            Handlers::transactional()
        } else {
            Handlers::new().with_clone_rollback()
        };
        for (name, panics) in [("pay", false), ("pay-panic", true)] {
            let seen = seen.clone();
            h.register(name, move |ctx| {
                let (id, attempt) = (ctx.id, ctx.attempt);
                let now = ctx.tick.agreed_time_ms.unwrap_or(0);
                seen.lock().unwrap().push((id, attempt, now));
                ctx.state.credit(1, 10);
                ctx.emit("paid", b"x".to_vec())?;
                ctx.request(ScheduleRequest::Create(NewSchedule::new(
                    "ok",
                    Timing::AfterMs(1),
                )));
                let fails = u32::from(ctx.payload.first().copied().unwrap_or(0));
                if attempt <= fails {
                    assert!(!panics, "deliberate panic in a handler");
                    return Err(HandlerError::new(7, "payment service down"));
                }
                Ok(())
            });
        }
        h.register("ok", |ctx| ctx.state.credit(2, 1));
        h
    }

    pub(super) struct Rig {
        pub book: Scheduler,
        pub h: Handlers<Bank>,
        pub bank: Bank,
        pub outbox: Outbox,
        pub seq: u64,
        pub seen: Seen,
    }

    impl Rig {
        pub fn new(transactional: bool) -> Self {
            let seen = Seen::default();
            Self {
                book: Scheduler::new(2, Limits::default()),
                h: handlers(transactional, &seen),
                seen,
                bank: Bank::default(),
                outbox: Outbox::new(OutboxLimits::default()),
                seq: 0,
            }
        }
        pub fn apply(
            &mut self,
            r: ScheduleRequest,
            now: i64,
        ) -> Result<Option<u64>, ScheduleError> {
            self.seq += 1;
            let out = self.book.apply(
                &Principal::Client(ccron::ClientId([1; 32])),
                r,
                &self.h,
                self.seq,
                Some(now),
            );
            self.book.check_invariants().unwrap();
            out
        }
        pub fn tick(&mut self, now: i64) -> ccron::schedule::TickReport {
            self.seq += 1;
            let rep = self.book.on_tick(
                &Tick::new(2, self.seq, Some(now)),
                &mut self.bank,
                &mut self.h,
                &mut self.outbox,
            );
            self.book.check_invariants().unwrap();
            rep
        }
    }

    fn pay(handler: &str, fails: u8, timing: Timing) -> NewSchedule {
        NewSchedule::new(handler, timing).with_payload(vec![fails])
    }

    /// An error and a panic alike: the failed attempt changes nothing (state rolled back,
    /// no outbox record, no queued request), the retry runs at the deterministic backoff
    /// with the same occurrence id, and the successful attempt commits once.
    #[test]
    fn a_failed_run_is_rolled_back_and_retried_at_its_backoff() {
        for (handler, transactional) in [
            ("pay", true),
            ("pay-panic", true),
            ("pay", false),
            ("pay-panic", false),
        ] {
            let mut r = Rig::new(transactional);
            let retry = RetryPolicy::exponential(5, 1_000, 60_000).with_jitter_ms(300);
            let policy = RunPolicy::default().with_retry(retry);
            let id = r
                .apply(
                    ScheduleRequest::CreateWith {
                        schedule: pay(handler, 2, Timing::At(Due::Time(10_000))),
                        policy,
                    },
                    0,
                )
                .unwrap()
                .unwrap();
            let rep = r.tick(10_000);
            let expect = RunOutcome::Failed { code: 7 };
            let outcome = if handler == "pay" {
                expect
            } else {
                RunOutcome::Panicked
            };
            let at1 = 10_000 + retry.delay_ms(id, 1);
            assert_eq!(rep.failed.len(), 1, "{handler}");
            assert_eq!(rep.failed[0].outcome, outcome);
            assert_eq!(rep.failed[0].then, AfterFailure::Retry(Due::Time(at1)));
            assert!(r.bank.balances.is_empty(), "{handler}: rolled back");
            assert!(r.outbox.is_empty() && r.book.len() == 1, "{handler}");
            let info = r.book.get(id).unwrap();
            assert_eq!(
                info.retry.map(|p| (p.attempt, p.at)),
                Some((2, Due::Time(at1)))
            );
            // Not before its time; then attempt 2 fails again, attempt 3 succeeds.
            assert!(r.tick(at1 - 1).fired.is_empty());
            let rep = r.tick(at1);
            assert_eq!(rep.fired[0].attempt, 2);
            let at2 = at1 + retry.delay_ms(id, 2);
            assert_eq!(rep.failed[0].then, AfterFailure::Retry(Due::Time(at2)));
            assert!(r.bank.balances.is_empty() && r.outbox.is_empty());
            let rep = r.tick(at2 + 5);
            assert_eq!(
                (
                    rep.fired[0].attempt,
                    rep.fired[0].outcome,
                    rep.fired[0].occurrence
                ),
                (3, RunOutcome::Ok, 0)
            );
            assert_eq!(
                r.bank.balances.get(&1),
                Some(&10),
                "{handler}: committed once"
            );
            let emitted: Vec<_> = r.outbox.iter().map(|(_, rec)| rec.id).collect();
            assert_eq!(emitted, vec![ccron::outbox::OccurrenceId::new(2, id, 0)]);
            assert!(r.book.get(id).is_none(), "the one-shot is spent");
            assert_eq!(r.book.len(), 1, "its queued follow-up was applied");
            let seen: Vec<_> = r.seen.lock().unwrap().iter().map(|s| (s.1, s.2)).collect();
            assert_eq!(seen, vec![(1, 10_000), (2, at1), (3, at2 + 5)]);
        }
    }

    /// After the last attempt the run is dead-lettered (kept in the book, listed, counted);
    /// its owner re-drives it (a fresh set of attempts) or discards it; a stranger cannot.
    #[test]
    fn the_last_failure_is_dead_lettered_then_redriven_or_discarded() {
        let mut r = Rig::new(true);
        let policy = RunPolicy::default().with_retry(RetryPolicy::exponential(2, 100, 100));
        let id = r
            .apply(
                ScheduleRequest::CreateWith {
                    schedule: pay("pay", 3, Timing::At(Due::Time(1_000))).with_key("k"),
                    policy,
                },
                0,
            )
            .unwrap()
            .unwrap();
        r.tick(1_000);
        let rep = r.tick(1_100);
        assert_eq!(
            rep.failed[0].then,
            AfterFailure::DeadLettered { paused: false }
        );
        let info = r.book.get(id).unwrap();
        assert!(info.retry.is_none() && info.next.is_none());
        assert_eq!(info.dead.len(), 1);
        assert_eq!((info.dead[0].attempts, info.dead[0].occurrence), (2, 0));
        assert_eq!(r.book.dead_count(), 1);
        assert_eq!(r.book.id_of("k"), Some(id), "it keeps its key");
        assert!(
            r.tick(50_000).fired.is_empty(),
            "a dead run does not run by itself"
        );
        // A stranger may not; the owner re-drives: attempts 1 and 2 again (the payload fails
        // attempt <= 3, so it dies again); then discards it: the one-shot leaves.
        let redrive = ScheduleRequest::Redrive {
            target: Target::Id(id),
            occurrence: 0,
        };
        r.seq += 1;
        assert!(matches!(
            r.book.apply(
                &Principal::Client(ccron::ClientId([2; 32])),
                redrive.clone(),
                &r.h,
                r.seq,
                Some(50_000)
            ),
            Err(ScheduleError::Unauthorized { .. })
        ));
        r.apply(redrive.clone(), 50_000).unwrap();
        assert_eq!(r.book.dead_count(), 0);
        assert_eq!(r.tick(50_000).fired[0].attempt, 1);
        assert_eq!(
            r.tick(50_100).failed[0].then,
            AfterFailure::DeadLettered { paused: false }
        );
        assert_eq!(
            r.apply(
                ScheduleRequest::Discard {
                    target: Target::Id(id),
                    occurrence: 9
                },
                50_200
            ),
            Err(ScheduleError::NoDeadRun { id, occurrence: 9 })
        );
        r.apply(
            ScheduleRequest::Discard {
                target: Target::Key("k".into()),
                occurrence: 0,
            },
            50_200,
        )
        .unwrap();
        assert!(r.book.get(id).is_none() && r.book.id_of("k").is_none());
        assert!(r.bank.balances.is_empty(), "every attempt was rolled back");
    }

    /// A recurring schedule with pause_on_failure is paused when a run is dead-lettered; a
    /// failure in the middle of a fire-each catch-up leaves the rest owed behind the retry,
    /// run in order once the retry succeeds.
    #[test]
    fn recurring_runs_stay_in_order_and_pause_on_failure() {
        let mut r = Rig::new(true);
        let every = Timing::Every {
            period_ms: 1_000,
            start_ms: Some(1_000),
        };
        let policy = RunPolicy::default()
            .with_retry(RetryPolicy::exponential(2, 500, 500))
            .pausing_on_failure();
        // Fails attempt 1 of every occurrence; succeeds at attempt 2.
        let id = r
            .apply(
                ScheduleRequest::CreateWith {
                    schedule: pay("pay", 1, every).with_misfire(Misfire::FireEach { cap: 3 }),
                    policy,
                },
                0,
            )
            .unwrap()
            .unwrap();
        // A tick at 3.2 s reaches 1, 2 and 3 s: the first fails, 2 and 3 s are owed.
        let rep = r.tick(3_200);
        assert_eq!(rep.fired.len(), 1);
        let info = r.book.get(id).unwrap();
        assert_eq!(info.owed, Some((2_000, 3_000)));
        assert_eq!(info.retry.map(|p| p.at), Some(Due::Time(3_700)));
        // At 3.7 s: the retry of 1 s succeeds, then the owed 2 s fails (3 s stays owed).
        let rep = r.tick(3_700);
        let runs: Vec<_> = rep
            .fired
            .iter()
            .map(|f| (f.due, f.attempt, f.outcome.is_ok()))
            .collect();
        assert_eq!(
            runs,
            vec![(Due::Time(1_000), 2, true), (Due::Time(2_000), 1, false)]
        );
        assert_eq!(r.book.get(id).unwrap().owed, Some((3_000, 3_000)));
        // Now make every attempt fail: the retry of 2 s dies and pauses the schedule.
        r.apply(
            ScheduleRequest::Replace {
                target: Target::Id(id),
                schedule: pay(
                    "pay",
                    255,
                    Timing::Every {
                        period_ms: 1_000,
                        start_ms: Some(1_000),
                    },
                ),
            },
            3_700,
        )
        .unwrap();
        // Replace drops the retry and the owed runs (re-armed from admission): nothing dies.
        let rep = r.tick(4_000);
        assert_eq!(rep.failed[0].then, AfterFailure::Retry(Due::Time(4_500)));
        let rep = r.tick(4_500);
        assert_eq!(
            rep.failed[0].then,
            AfterFailure::DeadLettered { paused: true }
        );
        let info = r.book.get(id).unwrap();
        assert!(info.paused && info.dead.len() == 1);
        assert!(r.tick(10_000).fired.is_empty(), "paused");
        assert_eq!(
            r.bank.balances.get(&1),
            Some(&10),
            "only the one success committed"
        );
    }

    /// Without a rollback configured, a failed run's staged effects are still dropped.
    #[test]
    fn staged_effects_are_dropped_even_without_a_state_rollback() {
        let mut h: Handlers<Vec<u8>> = Handlers::new();
        assert!(!h.rolls_back());
        h.register("f", |ctx| {
            ctx.state.push(1);
            ctx.emit("e", Vec::new())?;
            ctx.request(ScheduleRequest::Cancel(Target::Id(99)));
            Err(HandlerError::new(1, "no"))
        });
        let mut book = Scheduler::new(1, Limits::default());
        book.apply(
            &Principal::Host,
            ScheduleRequest::Create(NewSchedule::new("f", Timing::At(Due::Time(5)))),
            &h,
            1,
            Some(0),
        )
        .unwrap();
        let mut outbox = Outbox::new(OutboxLimits::default());
        let mut state = Vec::new();
        let rep = book.on_tick(&Tick::new(1, 2, Some(5)), &mut state, &mut h, &mut outbox);
        assert_eq!(state, vec![1], "kept: no rollback configured");
        assert!(outbox.is_empty() && rep.errors.is_empty(), "{rep:?}");
        assert_eq!(book.dead_count(), 1);
    }

    /// The model of a retry schedule: attempt k + 1 runs at the first tick at or after the
    /// failure time of attempt k plus `delay_ms(id, k)`; after `max_attempts` the run is dead.
    fn model(
        policy: RetryPolicy,
        id: u64,
        fails: u32,
        first: i64,
        step: i64,
        ticks: usize,
    ) -> (Vec<(u32, i64)>, bool) {
        let mut out = Vec::new();
        let mut attempt = 1;
        let mut due = first;
        for k in 0..ticks {
            let now = first + k as i64 * step;
            if now < due {
                continue;
            }
            out.push((attempt, now));
            if attempt > fails {
                return (out, false);
            }
            if attempt == policy.max_attempts {
                return (out, true);
            }
            due = now + policy.delay_ms(id, attempt);
            attempt += 1;
        }
        (out, false)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The book's retries match the model: same attempts at the same ticks, the same
        /// dead letter, and the state holds exactly the successful run.
        #[test]
        fn retries_follow_the_model(
            max_attempts in 1u32..6,
            base in 0i64..3_000,
            extra in 0i64..10_000,
            jitter in 0u32..2_000,
            fails in 0u8..7,
            step in 1i64..1_500,
            transactional in any::<bool>(),
        ) {
            let policy = RetryPolicy::exponential(max_attempts, base, base + extra)
                .with_jitter_ms(jitter);
            let mut r = Rig::new(transactional);
            let id = r.apply(
                ScheduleRequest::CreateWith {
                    schedule: pay("pay", fails, Timing::At(Due::Time(1_000))),
                    policy: RunPolicy::default().with_retry(policy),
                },
                0,
            ).unwrap().unwrap();
            let ticks = 200;
            for k in 0..ticks {
                r.tick(1_000 + k as i64 * step);
            }
            let (attempts, dead) = model(policy, id, u32::from(fails), 1_000, step, ticks);
            let seen: Vec<_> = r.seen.lock().unwrap().iter().map(|s| (s.1, s.2)).collect();
            prop_assert_eq!(&seen, &attempts);
            prop_assert_eq!(r.book.dead_count(), usize::from(dead));
            let succeeded = attempts.last().is_some_and(|(a, _)| *a > u32::from(fails));
            prop_assert_eq!(r.bank.balances.get(&1).copied(), succeeded.then_some(10));
        }
    }
}

mod history {
    use super::failing::{Rig, handlers};
    use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
    use ccron::host::{BookConfig, CronLedger, LedgerScheduler};
    use ccron::schedule::{
        HISTORY_RUNS, HandlerError, Handlers, Limits, NewSchedule, RetryPolicy, RunOutcome,
        RunPolicy, ScheduleRequest, Timing,
    };
    use ccron::{CronTableRegistry, Due, MemPages, Tick};
    use sha2::{Digest, Sha256};

    /// Every attempt is recorded (tick, occurrence, attempt, outcome, the outbox index of what
    /// it emitted), the ring keeps the last `HISTORY_RUNS`; a dead one-shot keeps its attempts.
    #[test]
    fn the_history_ring_keeps_the_last_runs() {
        let mut r = Rig::new(true);
        let every = Timing::Every {
            period_ms: 1_000,
            start_ms: Some(1_000),
        };
        // Fails attempt 1 of each occurrence, retried 200 ms later.
        let policy = RunPolicy::default().with_retry(RetryPolicy::exponential(2, 200, 200));
        let id = r
            .apply(
                ScheduleRequest::CreateWith {
                    schedule: NewSchedule::new("pay", every).with_payload(vec![1]),
                    policy,
                },
                0,
            )
            .unwrap()
            .unwrap();
        for t in [1_000, 1_200, 2_000, 2_200, 3_000, 3_200] {
            r.tick(t);
        }
        let h = r.book.history(id).unwrap();
        assert_eq!(h.len(), HISTORY_RUNS);
        let got: Vec<_> = h
            .iter()
            .map(|e| {
                (
                    e.due,
                    e.occurrence,
                    e.attempt,
                    e.outcome.is_ok(),
                    e.agreed_time_ms,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (Due::Time(2_000), 1, 1, false, Some(2_000)),
                (Due::Time(2_000), 1, 2, true, Some(2_200)),
                (Due::Time(3_000), 2, 1, false, Some(3_000)),
                (Due::Time(3_000), 2, 2, true, Some(3_200)),
            ]
        );
        // The successful runs emitted: their result marks are the outbox indices.
        let marks: Vec<_> = h.iter().map(|e| e.emitted).collect();
        assert_eq!(marks, vec![None, Some(2), None, Some(3)]);
        assert_eq!(h[2].outcome, RunOutcome::Failed { code: 7 });
        assert_eq!(r.book.get(id).unwrap().history, h.to_vec());
        // A one-shot that dies keeps its attempts.
        let one = r
            .apply(
                ScheduleRequest::CreateWith {
                    schedule: NewSchedule::new("pay", Timing::At(Due::Time(5_000)))
                        .with_payload(vec![255]),
                    policy,
                },
                3_200,
            )
            .unwrap()
            .unwrap();
        r.tick(5_000);
        r.tick(5_200);
        let h = r.book.history(one).unwrap();
        assert_eq!(h.iter().map(|e| e.attempt).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(r.book.dead_count(), 1);
    }

    /// The ledger state of the restart test: counts runs.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    struct Count(u64);

    impl Application for Count {
        fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
            b"err".to_vec()
        }
        fn digest(&self) -> Digest32 {
            Sha256::digest(self.0.to_le_bytes()).into()
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.to_le_bytes().to_vec()
        }
        fn restore(&mut self, s: &[u8]) -> Result<(), AppError> {
            let b = <[u8; 8]>::try_from(s).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
            self.0 = u64::from_le_bytes(b);
            Ok(())
        }
    }

    fn cfg() -> BookConfig {
        BookConfig {
            component: 1,
            position: 0,
            limits: Limits::default(),
            book_pages: 24,
            outbox_pages: 2,
        }
    }

    /// This build: "flaky" fails every other attempt; "gone" is not registered (its schedules
    /// park).
    fn build() -> Handlers<Count> {
        let mut h: Handlers<Count> = Handlers::new().with_clone_rollback();
        h.register("flaky", |ctx| {
            ctx.state.0 += 1;
            if ctx.attempt == 1 {
                return Err(HandlerError::new(1, "flaky"));
            }
            Ok(())
        });
        h
    }

    fn ledger<P: ccron::ReservedPages + Send + 'static>(
        sched: LedgerScheduler<Count, P>,
    ) -> CronLedger<Count, P> {
        CronLedger::new(Count::default(), CronTableRegistry::new()).with_scheduler(sched)
    }

    /// History and parked runs are replicated state: after a restore from a snapshot (state
    /// transfer) and after a restart from the book's durable pages, the ledger's digest,
    /// snapshot bytes, histories and parked schedules are identical.
    #[test]
    fn history_and_parked_runs_survive_restart_and_state_transfer() {
        let mut a = ledger(LedgerScheduler::new(cfg(), build()));
        let create = |handler: &str, policy| {
            ccron::codec::to_blob(&ScheduleRequest::CreateWith {
                schedule: NewSchedule::new(
                    handler,
                    Timing::Every {
                        period_ms: 1_000,
                        start_ms: Some(1_000),
                    },
                ),
                policy,
            })
            .unwrap()
        };
        let retry = RunPolicy::default().with_retry(RetryPolicy::exponential(3, 100, 100));
        let ctx = ExecContext {
            seq: 1,
            agreed_time_ms: Some(0),
        };
        // "gone" was registered by the build that created it: admit it with that build.
        let mut older = build();
        older.register("gone", |_| {});
        let mut with_gone = ledger(LedgerScheduler::new(cfg(), older));
        for l in [&mut a, &mut with_gone] {
            assert!(
                l.execute(ctx, ccron::ClientId([5; 32]), &create("flaky", retry))
                    .starts_with(b"ok")
            );
        }
        assert!(
            with_gone
                .execute(ctx, ccron::ClientId([5; 32]), &create("gone", retry))
                .starts_with(b"ok")
        );
        // Restore the two schedules into this build: "gone" parks at its first tick.
        a.restore(&with_gone.snapshot()).unwrap();
        let mut pages = MemPages::new(4_096, 1);
        for (seq, t) in [(2, 1_000), (3, 1_100), (4, 2_000), (5, 2_100), (6, 3_000)] {
            a.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
        }
        let book = a.scheduler().unwrap();
        assert_eq!(book.book().parked_count(), 1);
        assert_eq!(book.history(1).unwrap().len(), HISTORY_RUNS);
        // State transfer: the snapshot into a fresh replica of this build.
        let mut b = ledger(LedgerScheduler::new(cfg(), build()));
        b.restore(&a.snapshot()).unwrap();
        assert_eq!(b.digest(), a.digest());
        assert!(b.snapshot() == a.snapshot(), "byte-identical");
        let bb = b.scheduler().unwrap();
        assert_eq!(bb.history(1), book.history(1));
        assert_eq!(bb.book().parked_count(), 1);
        assert!(bb.book() == book.book());
        // Restart: a replica whose book lives in durable pages reloads it from them.
        let durable = book.pages().clone();
        let c = ledger(LedgerScheduler::with_pages(cfg(), build(), durable).unwrap());
        let cb = c.scheduler().unwrap();
        assert!(cb.book() == book.book());
        assert_eq!(cb.history(1), book.history(1));
        // Both go on alike.
        let mut b = b;
        let mut c = c;
        c.restore(&a.snapshot()).unwrap();
        for l in [&mut a, &mut b, &mut c] {
            l.on_tick(Tick::new(1, 7, Some(3_100)), &mut pages).unwrap();
        }
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.digest(), c.digest());
        let _ = handlers;
    }
}
