//! Upgrades at a planned height (issue 26): an old build stops loudly at the plan, the new build
//! refuses to run before it and runs its migration once at it, with schedules pending across
//! the switch (renamed handler: re-targeted by the migration; dropped handler: parked).

use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
use ccron::host::{BookConfig, CronLedger, LedgerScheduler};
use ccron::schedule::upgrade::UpgradeState;
use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleRequest, Timing, UpgradeAt, UpgradeHalt, UpgradePlan,
    UpgradeRequest, Upgrades, upgrade_request_payload,
};
use ccron::{CronTableRegistry, Due, MemPages, Policy, Tick};
use sha2::{Digest, Sha256};

/// The ledger state: runs by handler name, and migrations run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Shop {
    runs: Vec<(String, u64)>,
    migrated: u32,
}

impl Application for Shop {
    fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
        b"err unknown".to_vec()
    }
    fn digest(&self) -> Digest32 {
        Sha256::digest(format!("{self:?}")).into()
    }
    fn snapshot(&self) -> Vec<u8> {
        let mut out = self.migrated.to_le_bytes().to_vec();
        for (n, id) in &self.runs {
            out.extend_from_slice(&(n.len() as u32).to_le_bytes());
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), AppError> {
        let bad = || AppError::BadSnapshot("shop".into());
        let (m, mut rest) = s.split_at_checked(4).ok_or_else(bad)?;
        let mut shop = Shop {
            migrated: u32::from_le_bytes(m.try_into().map_err(|_| bad())?),
            runs: Vec::new(),
        };
        while !rest.is_empty() {
            let (l, r) = rest.split_at_checked(4).ok_or_else(bad)?;
            let l = u32::from_le_bytes(l.try_into().map_err(|_| bad())?) as usize;
            let (n, r) = r.split_at_checked(l).ok_or_else(bad)?;
            let (id, r) = r.split_at_checked(8).ok_or_else(bad)?;
            shop.runs.push((
                String::from_utf8(n.to_vec()).map_err(|_| bad())?,
                u64::from_le_bytes(id.try_into().map_err(|_| bad())?),
            ));
            rest = r;
        }
        *self = shop;
        Ok(())
    }
}

const ADMIN: u64 = 9;

fn cfg() -> BookConfig {
    BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    }
}

fn handlers(names: &[&'static str]) -> Handlers<Shop> {
    let mut h: Handlers<Shop> = Handlers::new();
    for &name in names {
        h.register(name, move |ctx| ctx.state.runs.push((name.into(), ctx.id)));
    }
    h
}

fn policy() -> Policy {
    Policy::default().with_admin(ccron::ClientId::from_index(ADMIN))
}

/// Build 1: handlers "remind" and "legacy"; carries no migration.
fn v1() -> CronLedger<Shop> {
    CronLedger::new(Shop::default(), CronTableRegistry::new())
        .with_scheduler(
            LedgerScheduler::new(cfg(), handlers(&["remind", "legacy"])).with_policy(policy()),
        )
        .with_upgrades(Upgrades::new().with_policy(policy()))
}

/// Build 2: "remind" renamed "remind-v2", "legacy" dropped; carries migration "v2", which
/// re-targets the reminders and counts itself.
fn v2() -> CronLedger<Shop> {
    CronLedger::new(Shop::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(cfg(), handlers(&["remind-v2"])).with_policy(policy()))
        .with_upgrades(
            Upgrades::<Shop>::new()
                .with_policy(policy())
                .carrying("v2", |ctx| {
                    ctx.state.migrated += 1;
                    let book = ctx.book.as_deref_mut().ok_or("no book")?;
                    book.retarget_all("remind", "remind-v2")
                        .map_err(|e| e.to_string())?;
                    Ok(())
                }),
        )
}

fn exec(l: &mut CronLedger<Shop>, seq: u64, client: u64, payload: &[u8]) -> String {
    let ctx = ExecContext {
        seq,
        agreed_time_ms: Some(seq as i64 * 1_000),
    };
    String::from_utf8(l.execute(ctx, ccron::ClientId::from_index(client), payload)).unwrap()
}

fn tick(l: &mut CronLedger<Shop>, seq: u64) -> Result<(), AppError> {
    l.on_tick(
        Tick::new(1, seq, Some(seq as i64 * 1_000)),
        &mut MemPages::new(4_096, 1),
    )
}

fn create(handler: &str, due_seq: u64) -> Vec<u8> {
    ccron::codec::to_blob(&ScheduleRequest::Create(NewSchedule::new(
        handler,
        Timing::At(Due::Seq(due_seq)),
    )))
    .unwrap()
}

fn plan(name: &str, at: UpgradeAt) -> Vec<u8> {
    upgrade_request_payload(&UpgradeRequest::Plan(UpgradePlan {
        name: name.into(),
        at,
    }))
}

/// v1 until the plan: reminders due before and after height 10, one "legacy" schedule.
fn v1_until_plan() -> CronLedger<Shop> {
    let mut l = v1();
    assert!(exec(&mut l, 1, 1, &create("remind", 3)).starts_with("ok"));
    assert!(exec(&mut l, 1, 1, &create("remind", 12)).starts_with("ok"));
    assert!(exec(&mut l, 1, 2, &create("legacy", 14)).starts_with("ok"));
    // Only an admin plans, only ahead, only a new name.
    assert!(exec(&mut l, 2, 1, &plan("v2", UpgradeAt::Height(10))).starts_with("err"));
    assert!(exec(&mut l, 2, ADMIN, &plan("v2", UpgradeAt::Height(2))).starts_with("err"));
    assert!(exec(&mut l, 2, ADMIN, &plan("v2", UpgradeAt::Height(10))).starts_with("ok"));
    assert_eq!(l.upgrades().denied(), 1);
    for seq in 3..10 {
        tick(&mut l, seq).unwrap();
    }
    assert_eq!(l.state().runs, vec![("remind".into(), 1)]);
    l
}

/// The old build stops at the plan, before the request or tick at it changes anything.
#[test]
fn an_old_build_stops_loudly_at_the_plan() {
    let mut l = v1_until_plan();
    let before = (l.digest(), l.snapshot());
    let err = tick(&mut l, 10).unwrap_err();
    assert!(matches!(err, AppError::Upgrade(_)), "{err}");
    assert_eq!(l.upgrades().halt(), Some(&UpgradeHalt::Needed("v2".into())));
    assert!(l.halted().is_some());
    assert!(exec(&mut l, 11, 1, &create("remind", 20)).starts_with("err halted"));
    assert_eq!((l.digest(), l.snapshot()), before, "nothing changed");
}

/// The new build refuses to run before the plan, runs the migration once at it (re-targeting
/// the pending reminder, leaving the "legacy" schedule parked, not consumed), and every
/// replica running it ends equal.
#[test]
fn the_new_build_runs_its_migration_once_at_the_plan() {
    let old = v1_until_plan();
    let snapshot = old.snapshot();
    // Restarted too early (at height 9): refuses.
    let mut early = v2();
    early.restore(&snapshot).unwrap();
    assert!(tick(&mut early, 9).is_err());
    assert_eq!(
        early.upgrades().halt(),
        Some(&UpgradeHalt::Early("v2".into()))
    );
    // At the plan: two replicas restarted with build 2.
    let mut a = v2();
    let mut b = v2();
    a.restore(&snapshot).unwrap();
    b.restore(&snapshot).unwrap();
    for seq in 10..16 {
        tick(&mut a, seq).unwrap();
        tick(&mut b, seq).unwrap();
        assert_eq!(a.digest(), b.digest());
    }
    assert_eq!(a.state().migrated, 1, "once");
    assert_eq!(
        a.state().runs,
        vec![("remind".into(), 1), ("remind-v2".into(), 2)]
    );
    let book = a.scheduler().unwrap().book();
    assert_eq!(
        book.parked_count(),
        1,
        "the dropped handler's run is parked"
    );
    assert!(book.get(3).unwrap().parked);
    let state = a.upgrades().state();
    assert!(state.pending.is_none());
    assert_eq!(
        (state.applied[0].name.as_str(), state.applied[0].seq),
        ("v2", 10)
    );
    // A snapshot after the upgrade restores into build 2 identically; build 1 refuses it.
    let after = a.snapshot();
    let mut c = v2();
    c.restore(&after).unwrap();
    assert_eq!((c.digest(), c.snapshot()), (a.digest(), after.clone()));
    tick(&mut c, 16).unwrap();
    assert_eq!(c.state().migrated, 1, "never again");
    let mut stale = v1();
    stale.restore(&after).unwrap();
    assert!(tick(&mut stale, 16).is_err());
    assert_eq!(
        stale.upgrades().halt(),
        Some(&UpgradeHalt::Unknown("v2".into()))
    );
    // A later build that no longer carries the migration knows it.
    let mut v3 = CronLedger::new(Shop::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(cfg(), handlers(&["remind-v2"])))
        .with_upgrades(Upgrades::new().knowing("v2"));
    v3.restore(&after).unwrap();
    tick(&mut v3, 16).unwrap();
}

/// A failing migration stops the replica at the plan (the same on every replica); a plan can be
/// cancelled by an admin before it is reached; a time plan is reached by agreed time.
#[test]
fn failed_migrations_stop_and_plans_can_be_cancelled() {
    let mut l = CronLedger::new(Shop::default(), CronTableRegistry::new()).with_upgrades(
        Upgrades::<Shop>::new()
            .with_policy(policy())
            .carrying("bad", |_| Err("no".into())),
    );
    assert!(exec(&mut l, 1, ADMIN, &plan("bad", UpgradeAt::TimeMs(5_500))).starts_with("ok"));
    assert!(
        exec(&mut l, 5, 1, b"x").starts_with("err halted"),
        "carried, not reached: early"
    );
    let mut l = CronLedger::new(Shop::default(), CronTableRegistry::new()).with_upgrades(
        Upgrades::<Shop>::new()
            .with_policy(policy())
            .carrying("bad", |_| Err("no".into())),
    );
    let s = UpgradeState {
        pending: Some(UpgradePlan {
            name: "bad".into(),
            at: UpgradeAt::TimeMs(5_500),
        }),
        ..UpgradeState::default()
    };
    let snap = {
        let mut o = CronLedger::new(Shop::default(), CronTableRegistry::new())
            .with_upgrades(Upgrades::new().with_policy(policy()));
        assert!(exec(&mut o, 1, ADMIN, &plan("bad", UpgradeAt::TimeMs(5_500))).starts_with("ok"));
        assert_eq!(o.upgrades().state(), &s);
        // Cancel and plan again.
        let cancel = upgrade_request_payload(&UpgradeRequest::Cancel("bad".into()));
        assert!(exec(&mut o, 2, 1, &cancel).starts_with("err"));
        assert!(exec(&mut o, 2, ADMIN, &cancel).starts_with("ok"));
        assert!(o.upgrades().state().pending.is_none());
        assert!(exec(&mut o, 3, ADMIN, &plan("bad", UpgradeAt::TimeMs(5_500))).starts_with("ok"));
        o.snapshot()
    };
    l.restore(&snap).unwrap();
    assert!(exec(&mut l, 6, 1, b"x").starts_with("err halted"));
    assert_eq!(
        l.upgrades().halt(),
        Some(&UpgradeHalt::Failed("bad".into()))
    );
}

/// A snapshot without upgrade state keeps its original form (and digest), so snapshots written
/// before upgrades existed restore unchanged.
#[test]
fn snapshots_without_upgrades_keep_their_form() {
    let plain = CronLedger::new(Shop::default(), CronTableRegistry::new());
    let with = CronLedger::new(Shop::default(), CronTableRegistry::new())
        .with_upgrades(Upgrades::new().carrying("x", |_| Ok(())));
    assert_eq!(plain.snapshot(), with.snapshot());
    assert_eq!(plain.digest(), with.digest());
    let mut r = CronLedger::new(Shop::default(), CronTableRegistry::new());
    r.restore(&plain.snapshot()).unwrap();
    assert!(r.upgrades().state().is_empty());
}
