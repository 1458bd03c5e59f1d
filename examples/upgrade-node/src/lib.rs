//! Two builds of one ledger, for showing a planned upgrade on real processes
//! (`docs/malachite.md`, "Upgrading a live cluster"; the simulated version is
//! `tests/e2e/upgrade_handlers.rs`).
//!
//! A reminder ledger: a client asks for a reminder ([`remind_request`]), the ledger schedules a
//! one-shot [`REMIND_AFTER_MS`] ahead under the reminder handler of the build that executes
//! the request, and the handler records the run in the state and emits one outbox record
//! (`reminded`, payload [`Run::payload`]).
//!
//! - [`Build::V1`] (binary `upgrade-node-v1`) has handlers `remind` and `legacy`.
//! - [`Build::V2`] (binary `upgrade-node-v2`) renames `remind` to `remind-v2` (version 2),
//!   drops `legacy`, and carries migration `v2`, which re-targets pending reminders from
//!   `remind` to `remind-v2` (`Scheduler::retarget_all`) and records where it ran.
//!
//! The load client's request [`PLAN_REQUEST`] is the admin's `UpgradePlan { name: "v2", at }`
//! (the admin is the load client of seed 1, [`admin`]), request [`LEGACY_REQUEST`] asks for a
//! `legacy` run [`LEGACY_AFTER_SEQS`] heights later (after the switch: parked under build 2,
//! never run nor consumed), every other request asks for a reminder.

use std::collections::BTreeMap;

use ccron::CronTableRegistry;
use ccron::Policy;
use ccron::host::{
    AppError, Application, BookConfig, ClientId, CronLedger, Digest32, Effects, ExecContext,
    LedgerScheduler,
};
use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleRequest, Timing, UpgradeAt, UpgradePlan, UpgradeRequest,
    Upgrades, upgrade_request_payload,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The component whose ticks run the book.
pub const SHOP: u32 = 1;
/// The position the book's runs are counted under.
pub const REMINDERS: u32 = 9;
/// A reminder is due this long after its request executed.
pub const REMIND_AFTER_MS: i64 = 2_000;
/// The `legacy` run is due this many heights after its request.
pub const LEGACY_AFTER_SEQS: u64 = 200;
/// The upgrade's name (the migration build 2 carries).
pub const UPGRADE: &str = "v2";

/// Which build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// Handlers `remind` and `legacy`; no migration.
    V1,
    /// Handler `remind-v2` (version 2); migration `v2`.
    V2,
}

impl Build {
    /// The reminder handler's name in this build.
    pub fn remind_handler(self) -> &'static str {
        match self {
            Build::V1 => "remind",
            Build::V2 => "remind-v2",
        }
    }
}

/// One reminder run, as recorded in the state and emitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The request number that asked for it.
    pub number: u64,
    /// The height where the request executed.
    pub requested_seq: u64,
    /// The handler that ran it.
    pub handler: String,
    /// The height of the tick that ran it.
    pub seq: u64,
    /// Its due instant (agreed time, ms).
    pub due_ms: i64,
}

impl Run {
    /// The outbox record's payload: `number requested_seq handler seq due_ms`.
    pub fn payload(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.number, self.requested_seq, self.handler, self.seq, self.due_ms
        )
    }

    /// Parses [`Run::payload`].
    pub fn parse(s: &str) -> Option<Self> {
        let w: Vec<&str> = s.split_whitespace().collect();
        let [number, requested_seq, handler, seq, due_ms] = w[..] else {
            return None;
        };
        Some(Self {
            number: number.parse().ok()?,
            requested_seq: requested_seq.parse().ok()?,
            handler: handler.to_string(),
            seq: seq.parse().ok()?,
            due_ms: due_ms.parse().ok()?,
        })
    }
}

/// The ledger's own state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shop {
    /// Reminder runs, in run order.
    pub reminded: Vec<Run>,
    /// Runs of `legacy` (none expected: its run is parked under build 2).
    pub legacy: u32,
    /// Migrations run, and the height of the last one.
    pub migrated: u32,
    /// Height of the last migration.
    pub migrated_at: Option<u64>,
    /// Reminders asked for, by request number: the height of the request.
    pub requested: BTreeMap<u64, u64>,
    /// The build's reminder handler (configuration, not state: neither digested nor
    /// snapshotted).
    #[serde(skip, default = "default_handler")]
    pub handler: String,
}

fn default_handler() -> String {
    Build::V1.remind_handler().to_string()
}

impl Shop {
    fn new(build: Build) -> Self {
        Self {
            reminded: Vec::new(),
            legacy: 0,
            migrated: 0,
            migrated_at: None,
            requested: BTreeMap::new(),
            handler: build.remind_handler().to_string(),
        }
    }
}

/// A reminder's schedule payload: its request number and request height.
fn reminder_payload(number: u64, seq: u64) -> Vec<u8> {
    [number.to_le_bytes(), seq.to_le_bytes()].concat()
}

fn reminder_of(payload: &[u8]) -> Option<(u64, u64)> {
    let (n, s) = payload.split_at_checked(8)?;
    Some((
        u64::from_le_bytes(n.try_into().ok()?),
        u64::from_le_bytes(s.try_into().ok()?),
    ))
}

impl Application for Shop {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        self.execute_with(ctx, client, payload, &mut Effects::none())
    }

    fn execute_with(
        &mut self,
        ctx: ExecContext,
        _client: ClientId,
        payload: &[u8],
        fx: &mut Effects<'_>,
    ) -> Vec<u8> {
        let text = String::from_utf8_lossy(payload);
        let schedule = match text.split_whitespace().collect::<Vec<_>>()[..] {
            ["remind", n] => {
                let Ok(n) = n.parse::<u64>() else {
                    return b"err bad number".to_vec();
                };
                if self.requested.contains_key(&n) {
                    return b"err repeated reminder".to_vec();
                }
                let s = NewSchedule::new(self.handler.clone(), Timing::AfterMs(REMIND_AFTER_MS))
                    .with_key(format!("r{n}"))
                    .with_payload(reminder_payload(n, ctx.seq));
                self.requested.insert(n, ctx.seq);
                s
            }
            ["legacy"] => {
                NewSchedule::new("legacy", Timing::AfterSeqs(LEGACY_AFTER_SEQS)).with_key("legacy")
            }
            _ => return b"err unknown request".to_vec(),
        };
        match fx.schedule(ScheduleRequest::Create(schedule)) {
            Ok(id) => format!("ok scheduled {id:?}").into_bytes(),
            Err(e) => {
                // Nothing of the request stays (the book refused it).
                if let ["remind", n] = text.split_whitespace().collect::<Vec<_>>()[..]
                    && let Ok(n) = n.parse::<u64>()
                {
                    self.requested.remove(&n);
                }
                format!("err {e}").into_bytes()
            }
        }
    }

    fn digest(&self) -> Digest32 {
        Sha256::digest(self.snapshot()).into()
    }

    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let mut next: Shop =
            serde_json::from_slice(snapshot).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        next.handler = std::mem::take(&mut self.handler);
        *self = next;
        Ok(())
    }
}

/// The client id of the localnet's load client of seed 1 (the admin who plans the upgrade).
pub fn admin() -> ClientId {
    let key = ccron_node::load::client_key(1);
    ccron_node::request::client_id(&key.verifying_key().to_bytes())
}

fn policy() -> Policy {
    Policy::default().with_admin(admin())
}

fn book() -> BookConfig {
    BookConfig {
        component: SHOP,
        position: REMINDERS,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 48,
    }
}

/// Records a reminder run and emits its record.
fn remind(
    handler: &'static str,
) -> impl FnMut(&mut ccron::schedule::HandlerCtx<'_, Shop>) -> Result<(), ccron::schedule::HandlerError>
+ Send
+ 'static {
    move |ctx| {
        let (number, requested_seq) = reminder_of(ctx.payload)
            .ok_or_else(|| ccron::schedule::HandlerError::new(400, "bad payload"))?;
        let run = Run {
            number,
            requested_seq,
            handler: handler.to_string(),
            seq: ctx.tick.bft_sequence_num,
            due_ms: ctx.due.time_ms().unwrap_or(0),
        };
        ctx.emit("reminded", run.payload().into_bytes())?;
        ctx.state.reminded.push(run);
        Ok(())
    }
}

/// The ledger as built by `build`, identically on every node at every start.
pub fn ledger(build: Build) -> CronLedger<Shop> {
    let mut h: Handlers<Shop> = Handlers::new();
    let upgrades = match build {
        Build::V1 => {
            h.register("remind", remind("remind"));
            h.register("legacy", |ctx| {
                ctx.state.legacy += 1;
            });
            Upgrades::new().with_policy(policy())
        }
        Build::V2 => {
            h.register_versioned("remind-v2", 2, remind("remind-v2"));
            Upgrades::<Shop>::new()
                .with_policy(policy())
                .carrying(UPGRADE, |ctx| {
                    ctx.state.migrated += 1;
                    ctx.state.migrated_at = Some(ctx.seq);
                    let book = ctx.book.as_deref_mut().ok_or("no schedule book")?;
                    book.retarget_all("remind", "remind-v2")
                        .map_err(|e| e.to_string())?;
                    Ok(())
                })
        }
    };
    CronLedger::new(Shop::new(build), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(book(), h))
        .with_upgrades(upgrades)
}

/// Where the load client's admin request plans the upgrade: at height
/// `UPGRADE_NODE_PLAN_HEIGHT` (environment of the localnet process), [`DEFAULT_PLAN_HEIGHT`]
/// without it.
pub fn plan_at() -> UpgradeAt {
    let h = std::env::var("UPGRADE_NODE_PLAN_HEIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_PLAN_HEIGHT);
    UpgradeAt::Height(h)
}

/// The plan's height without `UPGRADE_NODE_PLAN_HEIGHT`.
pub const DEFAULT_PLAN_HEIGHT: u64 = 150;

/// The load client's request that plans the upgrade (2 s into the run, at a request every
/// 250 ms: the first requests may reach no node yet, which are still starting).
pub const PLAN_REQUEST: u64 = 8;
/// The load client's request that asks for the `legacy` run.
pub const LEGACY_REQUEST: u64 = 9;

/// The load client's request `k` (see the module docs); the plan is at `plan_at`.
pub fn load_request(k: u64, plan_at: UpgradeAt) -> Vec<u8> {
    match k {
        PLAN_REQUEST => upgrade_request_payload(&UpgradeRequest::Plan(UpgradePlan {
            name: UPGRADE.into(),
            at: plan_at,
        })),
        LEGACY_REQUEST => b"legacy".to_vec(),
        _ => remind_request(k),
    }
}

/// A request for reminder `k`.
pub fn remind_request(k: u64) -> Vec<u8> {
    format!("remind {k}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::host::ExecContext;

    fn ctx(seq: u64) -> ExecContext {
        ExecContext {
            seq,
            agreed_time_ms: Some(1_000 * seq as i64),
        }
    }

    #[test]
    fn only_the_admin_plans_and_build_1_stops_at_the_plan() {
        let mut l = ledger(Build::V1);
        let plan = load_request(PLAN_REQUEST, UpgradeAt::Height(5));
        let other = l.execute(ctx(1), ccron::ClientId::from_index(1), &plan);
        assert!(
            other.starts_with(b"err"),
            "{}",
            String::from_utf8_lossy(&other)
        );
        let ok = l.execute(ctx(1), admin(), &plan);
        assert!(
            ok.starts_with(b"ok planned"),
            "{}",
            String::from_utf8_lossy(&ok)
        );
        assert!(
            l.execute(ctx(4), ccron::ClientId::from_index(7), &remind_request(20))
                .starts_with(b"ok")
        );
        let stopped = l.execute(ctx(5), ccron::ClientId::from_index(7), &remind_request(21));
        assert!(stopped.starts_with(b"err halted"));
        assert!(matches!(
            l.upgrades().halt(),
            Some(ccron::schedule::UpgradeHalt::Needed(n)) if n == UPGRADE
        ));
    }

    #[test]
    fn runs_parse_back() {
        let r = Run {
            number: 12,
            requested_seq: 40,
            handler: "remind-v2".into(),
            seq: 77,
            due_ms: 1_795_000_000_000,
        };
        assert_eq!(Run::parse(&r.payload()), Some(r));
        assert_eq!(Run::parse("1 2 x"), None);
    }
}
