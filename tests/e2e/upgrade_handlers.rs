//! Schedules that outlive code (issue 26), end to end on the simulated PBFT cluster (4 replicas).
//!
//! A shop ledger runs build 1 (handlers `remind` and `legacy`). Clients ask for reminders two
//! hours ahead, all the time; an admin plans upgrade `v2` at 03:00 of agreed time. Build 2
//! renames `remind` to `remind-v2`, drops `legacy`, and carries migration `v2`, which
//! re-targets the pending reminders. Each replica is run by a small supervisor (what
//! `cosmovisor` does for a Cosmos node): when build 1 stops at the plan (`UpgradeHalt::Needed`,
//! a fatal error, before the plan's batch changes anything) it restarts the replica on build 2
//! from build 1's snapshot, and build 2 runs the migration once, at the same point on every
//! replica.
//!
//! Under build 2 the reminder handler fails the first attempt of some reminders (an error, or a
//! panic caught at the handler boundary): the failed attempt is rolled back and retried at the
//! deterministic backoff of the reminder's `RetryPolicy`.
//!
//! Asserted: every reminder ran exactly once (none lost, none repeated across the switch), under
//! the handler of the build at its due time; reminders pending across the switch ran under
//! `remind-v2`; the `legacy` run is parked, not consumed; failed attempts left nothing in the
//! state and were retried at their backoff (within a tick period); the migration ran once per
//! replica at the same batch; every replica switched builds once; all replicas agree (state
//! digests after every batch, final states).

use std::collections::BTreeMap;

use ccron::Policy;
use ccron::schedule::{
    HandlerError, Handlers, Limits, NewSchedule, RetryPolicy, RunPolicy, ScheduleRequest, Timing,
    UpgradeAt, UpgradeHalt, UpgradePlan, UpgradeRequest, Upgrades, upgrade_request_payload,
};
use ccron::{CronTableRegistry, ReservedPages, Tick};
use serde::{Deserialize, Serialize};
use sim_bft::app::ClientId;
use sim_bft::app::{AppError, Application, ExecContext, FireNote};
use sim_bft::crypto::{Digest32, sha256};
use sim_bft::ledgers::{BookConfig, CronLedger, LedgerScheduler};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{SimRng, Workload};

const SHOP: u32 = 1;
const REMINDERS: u32 = 9;
const HOUR: i64 = 3_600_000;
const ADMIN: u32 = 0;
const EPOCH: &str = "2026-03-28T00:00:00Z";

fn epoch_ms() -> i64 {
    ccron::cron::parse_rfc3339_ms(EPOCH).unwrap()
}

/// The ledger's own state.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Shop {
    /// (client, request number, handler that ran it, due instant, attempt).
    reminded: Vec<(u32, u64, String, i64, u32)>,
    /// Runs of `legacy` (none expected: its run is parked under build 2).
    legacy: u32,
    /// Migrations run.
    migrated: u32,
}

impl Application for Shop {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, _payload: &[u8]) -> Vec<u8> {
        b"ok noop".to_vec()
    }
    fn digest(&self) -> Digest32 {
        sha256(&self.snapshot())
    }
    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        *self =
            serde_json::from_slice(snapshot).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        Ok(())
    }
}

fn policy() -> Policy {
    Policy::default().with_admin(sim_bft::node::ledger_client(u64::from(ADMIN)))
}

fn book() -> BookConfig {
    BookConfig {
        component: SHOP,
        position: REMINDERS,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    }
}

fn who(payload: &[u8]) -> (u32, u64) {
    let (c, n) = payload.split_at(4);
    (
        u32::from_le_bytes(c.try_into().unwrap()),
        u64::from_le_bytes(n.try_into().unwrap()),
    )
}

/// Build 1: `remind` and `legacy`.
fn build_1() -> CronLedger<Shop> {
    let mut h: Handlers<Shop> = Handlers::new().with_clone_rollback();
    h.register("remind", |ctx| {
        let (client, number) = who(ctx.payload);
        let due = ctx.due.time_ms().unwrap();
        let attempt = ctx.attempt;
        ctx.state
            .reminded
            .push((client, number, "remind".into(), due, attempt));
    });
    h.register("legacy", |ctx| ctx.state.legacy += 1);
    CronLedger::new(Shop::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(book(), h).with_policy(policy()))
        .with_upgrades(Upgrades::new().with_policy(policy()))
}

/// Build 2: `remind` renamed `remind-v2` (version 2), `legacy` dropped, migration `v2`. The
/// reminder handler writes the state first, then fails attempt 1 of request numbers 1 mod 3
/// (an error) and 2 mod 3 (a panic): the rollback must undo the write.
fn build_2() -> CronLedger<Shop> {
    let mut h: Handlers<Shop> = Handlers::new().with_clone_rollback();
    h.register_versioned("remind-v2", 2, |ctx| {
        let (client, number) = who(ctx.payload);
        let due = ctx.due.time_ms().unwrap();
        let attempt = ctx.attempt;
        ctx.state
            .reminded
            .push((client, number, "remind-v2".into(), due, attempt));
        match (number % 3, attempt) {
            (1, 1) => Err(HandlerError::new(503, "mail service unavailable")),
            (2, 1) => panic!("deliberate panic in a handler (issue 26 test)"),
            _ => Ok(()),
        }
    });
    CronLedger::new(Shop::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(book(), h).with_policy(policy()))
        .with_upgrades(
            Upgrades::<Shop>::new()
                .with_policy(policy())
                .carrying("v2", |ctx| {
                    ctx.state.migrated += 1;
                    let book = ctx.book.as_deref_mut().ok_or("no schedule book")?;
                    book.retarget_all("remind", "remind-v2")
                        .map_err(|e| e.to_string())?;
                    Ok(())
                }),
        )
}

/// One replica under a supervisor that restarts it on build 2 when build 1 stops at the plan
/// (or finds state upgraded by it, after a state transfer).
struct Supervised {
    ledger: CronLedger<Shop>,
    on_build_2: bool,
    /// Build switches (replica-local observation, not replicated).
    switches: u32,
}

impl Supervised {
    fn new() -> Self {
        Self {
            ledger: build_1(),
            on_build_2: false,
            switches: 0,
        }
    }

    /// Restarts on build 2 from build 1's snapshot when build 1 stopped for upgrade `v2`;
    /// returns whether it did.
    fn switch_if_needed(&mut self) -> bool {
        let needed = matches!(
            self.ledger.upgrades().halt(),
            Some(UpgradeHalt::Needed(n) | UpgradeHalt::Unknown(n)) if n == "v2"
        );
        if !needed || self.on_build_2 {
            return false;
        }
        let snapshot = self.ledger.snapshot();
        let mut next = build_2();
        next.restore(&snapshot)
            .expect("build 2 restores build 1's snapshot");
        self.ledger = next;
        self.on_build_2 = true;
        self.switches += 1;
        true
    }
}

impl Application for Supervised {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        let out = self.ledger.execute(ctx, client, payload);
        if self.switch_if_needed() {
            return self.ledger.execute(ctx, client, payload);
        }
        out
    }
    fn digest(&self) -> Digest32 {
        self.ledger.digest()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.ledger.snapshot()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        self.ledger.restore(snapshot)?;
        if !self.on_build_2 && self.ledger.upgrades().state().was_applied("v2") {
            // Build 1 on upgraded state: restart on build 2 at once.
            let mut next = build_2();
            next.restore(snapshot)?;
            self.ledger = next;
            self.on_build_2 = true;
            self.switches += 1;
        }
        Ok(())
    }
    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        match self.ledger.on_tick(tick, pages) {
            Err(_) if self.switch_if_needed() => self.ledger.on_tick(tick, pages),
            r => r,
        }
    }
    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        self.ledger.reload(pages)
    }
    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        self.ledger.fires()
    }
    fn halted(&self) -> Option<&AppError> {
        self.ledger.halted()
    }
    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        self.ledger.take_fire_notes(out);
    }
    fn page_ranges(&self) -> Vec<ccron::PageRange> {
        self.ledger.page_ranges()
    }
}

/// The reminders' retry policy.
fn retry() -> RetryPolicy {
    RetryPolicy::exponential(3, 5 * 60_000, 30 * 60_000).with_jitter_ms(60_000)
}

/// The admin plans `v2` at 03:00, then sends no-ops; the others ask for a reminder two hours
/// ahead with every request (client 1's first asks for a `legacy` run at 05:00).
struct Client(u32);

impl Workload for Client {
    fn payload(&mut self, number: u64, _rng: &mut SimRng) -> Vec<u8> {
        if self.0 == ADMIN {
            if number == 0 {
                return upgrade_request_payload(&UpgradeRequest::Plan(UpgradePlan {
                    name: "v2".into(),
                    at: UpgradeAt::TimeMs(epoch_ms() + 3 * HOUR),
                }));
            }
            return b"noop".to_vec();
        }
        if self.0 == 1 && number == 0 {
            let legacy = NewSchedule::new("legacy", Timing::AfterMs(5 * HOUR));
            return ccron::codec::to_blob(&ScheduleRequest::Create(legacy)).unwrap();
        }
        // Before the switch reminders name `remind`, after it `remind-v2` (the clients'
        // own upgrade: a request naming an unregistered handler is refused).
        let remind = NewSchedule::new(
            if number < 5 { "remind" } else { "remind-v2" },
            Timing::AfterMs(2 * HOUR),
        )
        .with_payload([&self.0.to_le_bytes()[..], &number.to_le_bytes()].concat());
        let policy = RunPolicy::default().with_retry(retry());
        ccron::codec::to_blob(&ScheduleRequest::CreateWith {
            schedule: remind,
            policy,
        })
        .unwrap()
    }
    fn on_reply(&mut self, number: u64, result: &[u8]) -> Result<(), String> {
        let ok = result.starts_with(b"ok");
        // Requests naming the handler of the other build may be refused around the switch.
        if ok || (self.0 != ADMIN && (4..=6).contains(&number)) {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(result).into_owned())
        }
    }
}

#[test]
fn schedules_survive_a_planned_upgrade_and_failing_handlers() {
    let sim = Cluster::builder()
        .seed(26)
        .start_at(EPOCH)
        .unwrap()
        .duration_ms(9 * HOUR as u64, 60_000)
        .ticks(vec![SHOP], 60_000)
        .clients(3, 40 * 60_000)
        .workload(|client| Box::new(Client(client)))
        .app(|_replica| Supervised::new())
        .build()
        .unwrap();
    let out = sim.run();
    assert!(
        out.ok(),
        "{:?}\nreplay: {}",
        out.violations,
        out.replay_command()
    );
    let epoch = epoch_ms();
    let switch = epoch + 3 * HOUR;

    // Every replica switched builds once and ran the migration once, at the same batch.
    let view = |i: u32| {
        out.app(i, |s: &Supervised| {
            let l = &s.ledger;
            let book = l.scheduler().unwrap().book();
            (
                s.switches,
                l.state().clone(),
                l.upgrades().state().clone(),
                book.parked_count(),
                book.len(),
                book.dead_count(),
                l.digest(),
            )
        })
        .unwrap()
    };
    let v0 = view(0);
    for i in 1..4 {
        assert_eq!(view(i), v0, "replica {i}");
    }
    let (switches, state, upgrades, parked, left, dead, _) = v0;
    assert_eq!(switches, 1);
    assert_eq!(state.migrated, 1);
    assert!(upgrades.pending.is_none());
    assert_eq!(upgrades.applied.len(), 1);
    assert!(upgrades.applied[0].agreed_time_ms.unwrap() >= switch);

    // Every reminder ran once: before the switch under `remind`, after it under `remind-v2`
    // (pending ones re-targeted by the migration), at attempt 1, or at attempt 2 for the ones
    // whose first attempt failed (rolled back: nothing of it in the state).
    let mut seen = BTreeMap::new();
    for (client, number, handler, due, attempt) in &state.reminded {
        assert!(
            seen.insert((*client, *number), ()).is_none(),
            "{client}/{number} ran twice"
        );
        let expect = if *due < switch { "remind" } else { "remind-v2" };
        assert_eq!(handler, expect, "{client}/{number} due {due}");
        let failing = handler == "remind-v2" && number % 3 != 0;
        assert_eq!(*attempt, if failing { 2 } else { 1 }, "{client}/{number}");
    }
    let pending_across = state
        .reminded
        .iter()
        .filter(|(_, n, h, _, _)| h == "remind-v2" && *n < 5)
        .count();
    assert!(
        pending_across >= 2,
        "reminders pending across the switch: {pending_across}"
    );
    assert!(state.reminded.len() >= 12, "{}", state.reminded.len());
    // The last reminders are not due yet: those are what stays in the book, with the parked
    // legacy run (never run, never consumed); nothing died.
    assert_eq!(state.legacy, 0);
    assert_eq!(parked, 1);
    assert_eq!(dead, 0);
    assert!(left >= 1);

    // The retries ran at their backoff: for each failing reminder, the second run of its
    // schedule came `delay_ms(id, 1)` after the first (within one tick period).
    let mut runs: BTreeMap<(u32, u64), Vec<i64>> = BTreeMap::new();
    for e in &out.events.fires {
        if e.position == REMINDERS {
            runs.entry((e.replica, e.schedule.unwrap()))
                .or_default()
                .push(e.agreed_time_ms.unwrap());
        }
    }
    let mut retried = 0;
    for ((_, id), times) in &runs {
        match times.as_slice() {
            [_] => {}
            [first, second] => {
                let backoff = retry().delay_ms(*id, 1);
                let late = second - first - backoff;
                assert!((0..=60_000).contains(&late), "schedule {id}: {times:?}");
                retried += 1;
            }
            other => panic!("schedule {id} ran {other:?}"),
        }
    }
    assert!(retried >= 4 * 4, "retries on every replica: {retried}");
}
