//! Upgrades at a planned height or agreed time: the library side of shipping a new ledger build
//! (Cosmos' `x/upgrade`, with ccron's schedules carried across).
//!
//! An admin plans an upgrade with a request ([`UpgradeRequest::Plan`]: a name and a point,
//! [`UpgradeAt::Height`] or [`UpgradeAt::TimeMs`]); the plan is replicated state
//! ([`UpgradeState`], in the ledger's snapshot and digest). Every replica reaches the plan at
//! the same point of the log: the first request or tick of the first batch whose sequence
//! number (or agreed time) is at or past it. There, before that request or tick does anything:
//! - a build that does not carry the plan's named migration stops ([`UpgradeHalt::Needed`]: a
//!   fatal [`AppError`], which hosts turn into fail-stop): the operator restarts the replica
//!   with the new build;
//! - a build that carries it ([`Upgrades::carrying`]) runs the migration once, on the ledger
//!   state and the schedule book ([`MigrationCtx`]: re-target renamed handlers, cancel
//!   schedules of dropped ones, ...), records it ([`UpgradeState::applied`]) and goes on. The
//!   same build refuses to run while the plan is pending but not yet reached
//!   ([`UpgradeHalt::Early`]): a replica restarted too early with the new build stops instead of
//!   running new code before the others.
//!
//! A build also refuses a state upgraded by a plan it knows nothing of
//! ([`UpgradeHalt::Unknown`]: an old build restarted on new state); builds list the past
//! upgrades they are compatible with ([`Upgrades::knowing`]) once they stop carrying their
//! migrations. A migration that fails (an error or a panic, caught) stops the replica
//! ([`UpgradeHalt::Failed`]), on every replica alike: there is no safe way to run on.
//!
//! Schedules pending across an upgrade keep their ids, due points and run counters; those whose
//! handler the new build renamed or dropped are parked rather than consumed (see
//! `docs/scheduling.md`, "Schedules that outlive code"), and the new build's handler set enters
//! the setup digest.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};

use sha2::{Digest, Sha256};

use super::Scheduler;
use crate::authz::{Policy, Principal};
use crate::host::app::{AppError, ExecContext};
use crate::host::scheduler::LedgerScheduler;
use crate::pages::ReservedPages;
use crate::tick::TimeMs;

/// Prefix of an upgrade request's payload ([`upgrade_request_payload`]).
const UPGRADE_PREFIX: &[u8; 16] = b"ccron-upgrade-v1";

/// Longest upgrade name, bytes (printable ASCII without spaces).
pub const MAX_UPGRADE_NAME_BYTES: usize = 64;

/// Most applied upgrades [`UpgradeState::applied`] keeps (the oldest leave; all are counted in
/// [`UpgradeState::applied_count`]).
pub const MAX_APPLIED_UPGRADES: usize = 32;

/// Largest encoded upgrade request accepted, bytes.
const MAX_REQUEST_BYTES: usize = 1_024;

/// Where an upgrade happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum UpgradeAt {
    /// At the first batch with this sequence number (height) or later.
    Height(u64),
    /// At the first batch whose agreed time is at or past this instant.
    TimeMs(TimeMs),
}

impl UpgradeAt {
    /// Whether a batch at `seq` and agreed time `now_ms` has reached it.
    pub fn reached(&self, seq: u64, now_ms: Option<TimeMs>) -> bool {
        match *self {
            UpgradeAt::Height(h) => seq >= h,
            UpgradeAt::TimeMs(t) => now_ms.is_some_and(|now| now >= t),
        }
    }
}

/// A planned upgrade: the migration's name and where it happens.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct UpgradePlan {
    /// The migration's name (what a build carries, [`Upgrades::carrying`]).
    pub name: String,
    /// Where it happens.
    pub at: UpgradeAt,
}

/// An admin's request about upgrades (the payload of a client request:
/// [`upgrade_request_payload`]).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum UpgradeRequest {
    /// Plans an upgrade, replacing the pending one if any. Refused unless its point is still
    /// ahead (a height above the request's sequence number, an instant after its agreed time)
    /// and its name is new.
    Plan(UpgradePlan),
    /// Cancels the pending plan of this name.
    Cancel(String),
}

/// The payload of a client request carrying `req` (executed by a `CronLedger`, which answers
/// `ok ...` or `err ...`).
pub fn upgrade_request_payload(req: &UpgradeRequest) -> Vec<u8> {
    let mut p = UPGRADE_PREFIX.to_vec();
    p.extend_from_slice(&crate::codec::to_blob(req).unwrap_or_default());
    p
}

/// The upgrade request `payload` carries: `None` when it is not one, `Some(Err)` when it has the
/// prefix but does not decode (or is too large).
pub fn upgrade_request_of(payload: &[u8]) -> Option<Result<UpgradeRequest, String>> {
    let body = payload.strip_prefix(UPGRADE_PREFIX.as_slice())?;
    if body.len() > MAX_REQUEST_BYTES {
        return Some(Err(format!(
            "an upgrade request of {} bytes, at most {MAX_REQUEST_BYTES}",
            body.len()
        )));
    }
    Some(crate::codec::from_blob::<UpgradeRequest>(body).map_err(|e| e.to_string()))
}

/// An upgrade that ran.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct AppliedUpgrade {
    /// Its name.
    pub name: String,
    /// Sequence number of the batch where it ran.
    pub seq: u64,
    /// That batch's agreed time.
    pub agreed_time_ms: Option<TimeMs>,
}

/// The replicated upgrade state: the pending plan and the upgrades applied (in the ledger's
/// snapshot and digest).
#[derive(Debug, Clone, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct UpgradeState {
    /// The plan waiting for its point.
    pub pending: Option<UpgradePlan>,
    /// The latest applied upgrades, oldest first (at most [`MAX_APPLIED_UPGRADES`]).
    pub applied: Vec<AppliedUpgrade>,
    /// Upgrades applied in all.
    pub applied_count: u64,
}

impl UpgradeState {
    /// Whether nothing was ever planned.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// A digest of the state.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"ccron-upgrades-v1");
        h.update(crate::codec::to_blob(self).unwrap_or_default());
        h.finalize().into()
    }

    /// Whether an upgrade of this name was applied (among those kept).
    pub fn was_applied(&self, name: &str) -> bool {
        self.applied.iter().any(|a| a.name == name)
    }
}

/// Why a build stopped at an upgrade (every replica running the same build stops at the same
/// point).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpgradeHalt {
    /// The plan of this name is reached and this build does not carry its migration: restart
    /// the replica with the build that does.
    Needed(String),
    /// This build carries the migration of the plan of this name, which is pending but not yet
    /// reached: it refuses to run new code before the others (restart with the previous build).
    Early(String),
    /// The state was upgraded by a plan of this name that this build does not know (an older
    /// build restarted on newer state).
    Unknown(String),
    /// The migration of this name failed (an error or a panic).
    Failed(String),
}

impl std::fmt::Display for UpgradeHalt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Needed(n) => write!(f, "upgrade {n:?} needed: this build does not carry it"),
            Self::Early(n) => write!(
                f,
                "upgrade {n:?} is carried by this build but not reached yet: run the previous build"
            ),
            Self::Unknown(n) => write!(f, "the state was upgraded by {n:?}, unknown to this build"),
            Self::Failed(n) => write!(f, "the migration of upgrade {n:?} failed"),
        }
    }
}

/// What a migration gets: the ledger state and the schedule book, at the point of the plan.
#[derive(Debug)]
pub struct MigrationCtx<'a, S> {
    /// The ledger state.
    pub state: &'a mut S,
    /// The ledger's schedule book, if it has one (saved after the migration).
    pub book: Option<&'a mut Scheduler>,
    /// The plan being applied.
    pub plan: &'a UpgradePlan,
    /// Sequence number of the batch.
    pub seq: u64,
    /// Its agreed time.
    pub agreed_time_ms: Option<TimeMs>,
}

/// A named migration a build carries: it runs once, at the plan's point, on every replica; an
/// `Err` (or a panic) stops the replica.
pub type Migration<S> = Box<dyn FnMut(&mut MigrationCtx<'_, S>) -> Result<(), String> + Send>;

/// A build's upgrades: the migrations it carries, the past upgrades it knows, who may plan (its
/// [`Policy`]'s admins), and the replicated [`UpgradeState`]. Configure it identically on every
/// replica running the same build; a `CronLedger` takes it with `CronLedger::with_upgrades`.
pub struct Upgrades<S> {
    carried: BTreeMap<String, Migration<S>>,
    known: BTreeSet<String>,
    policy: Policy,
    state: UpgradeState,
    halt: Option<UpgradeHalt>,
    denied: u64,
}

impl<S> Default for Upgrades<S> {
    fn default() -> Self {
        Self {
            carried: BTreeMap::new(),
            known: BTreeSet::new(),
            policy: Policy::default(),
            state: UpgradeState::default(),
            halt: None,
            denied: 0,
        }
    }
}

impl<S> std::fmt::Debug for Upgrades<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgrades")
            .field("carried", &self.carried.keys().collect::<Vec<_>>())
            .field("known", &self.known)
            .field("state", &self.state)
            .field("halt", &self.halt)
            .finish()
    }
}

impl<S> Upgrades<S> {
    /// No migration carried, no past upgrade known; only the host may plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `policy` deciding who may plan and cancel upgrades (its admins).
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// This build carries the migration `name`: it runs it at the plan of that name (and
    /// refuses to run while that plan is pending but not reached).
    pub fn carrying(
        mut self,
        name: impl Into<String>,
        migration: impl FnMut(&mut MigrationCtx<'_, S>) -> Result<(), String> + Send + 'static,
    ) -> Self {
        self.carried.insert(name.into(), Box::new(migration));
        self
    }

    /// This build runs on state upgraded by `name` without carrying its migration (an upgrade
    /// of an earlier build).
    pub fn knowing(mut self, name: impl Into<String>) -> Self {
        self.known.insert(name.into());
        self
    }

    /// The replicated upgrade state.
    pub fn state(&self) -> &UpgradeState {
        &self.state
    }

    /// Why this build stopped, if it did.
    pub fn halt(&self) -> Option<&UpgradeHalt> {
        self.halt.as_ref()
    }

    /// Whether this build carries the migration `name`.
    pub fn carries(&self, name: &str) -> bool {
        self.carried.contains_key(name)
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Upgrade requests refused to non-admins (a metric; not replicated).
    pub fn denied(&self) -> u64 {
        self.denied
    }

    /// This build's configuration with `other`'s replicated state (a ledger taking a build's
    /// upgrades keeps the state it has).
    pub(crate) fn configured_from(mut self, other: &mut Self) -> Self {
        self.state = std::mem::take(&mut other.state);
        self
    }

    /// Replaces the replicated state (a restored snapshot).
    pub(crate) fn set_state(&mut self, state: UpgradeState) {
        self.state = state;
    }

    /// Executes an upgrade request from `by` at `ctx`; the reply (`ok ...` or `err ...`).
    pub(crate) fn execute(
        &mut self,
        by: Principal,
        req: Result<UpgradeRequest, String>,
        ctx: ExecContext,
    ) -> Vec<u8> {
        let reply = match req.and_then(|r| self.apply(by, r, ctx)) {
            Ok(s) => format!("ok {s}"),
            Err(e) => format!("err {e}"),
        };
        reply.into_bytes()
    }

    fn apply(
        &mut self,
        by: Principal,
        req: UpgradeRequest,
        ctx: ExecContext,
    ) -> Result<String, String> {
        if !self.policy.is_admin(&by) {
            self.denied = self.denied.saturating_add(1);
            tracing::warn!(%by, "upgrade request denied: not an admin");
            return Err(format!("{by} may not plan upgrades"));
        }
        match req {
            UpgradeRequest::Plan(plan) => {
                let n = &plan.name;
                if n.is_empty()
                    || n.len() > MAX_UPGRADE_NAME_BYTES
                    || !n.bytes().all(|b| (0x21..=0x7E).contains(&b))
                {
                    return Err(format!(
                        "an upgrade name is 1 to {MAX_UPGRADE_NAME_BYTES} bytes of printable ASCII without spaces"
                    ));
                }
                if self.state.was_applied(n) {
                    return Err(format!("upgrade {n:?} was applied already"));
                }
                let ahead = match plan.at {
                    UpgradeAt::Height(h) => h > ctx.seq,
                    UpgradeAt::TimeMs(t) => ctx.agreed_time_ms.is_some_and(|now| t > now),
                };
                if !ahead {
                    return Err(format!("the plan's point {:?} is not ahead", plan.at));
                }
                let replaced = self.state.pending.replace(plan.clone());
                tracing::info!(name = %plan.name, at = ?plan.at, ?replaced, "upgrade planned");
                Ok(match replaced {
                    Some(old) => format!("planned {} (replacing {})", plan.name, old.name),
                    None => format!("planned {}", plan.name),
                })
            }
            UpgradeRequest::Cancel(name) => match &self.state.pending {
                Some(p) if p.name == name => {
                    self.state.pending = None;
                    tracing::info!(%name, "upgrade plan cancelled");
                    Ok(format!("cancelled {name}"))
                }
                _ => Err(format!("no pending upgrade {name:?}")),
            },
        }
    }

    /// The gate every request and tick passes first, at batch `seq` and agreed time `now_ms`:
    /// runs a carried migration whose plan is reached (once: the plan then moves to
    /// [`UpgradeState::applied`]), and stops this build where it must not run (see the module
    /// documentation). A stop is sticky: every later call fails the same way.
    ///
    /// # Errors
    /// [`AppError::Upgrade`] naming the [`UpgradeHalt`].
    pub(crate) fn gate<P: ReservedPages>(
        &mut self,
        seq: u64,
        now_ms: Option<TimeMs>,
        state: &mut S,
        book: Option<&mut LedgerScheduler<S, P>>,
    ) -> Result<(), AppError> {
        if self.halt.is_none() {
            self.halt = self.check(seq, now_ms, state, book);
            if let Some(h) = &self.halt {
                tracing::error!(seq, halt = %h, "ledger stops at an upgrade (fail-stop)");
            }
        }
        match &self.halt {
            Some(h) => Err(AppError::Upgrade(h.clone())),
            None => Ok(()),
        }
    }

    fn check<P: ReservedPages>(
        &mut self,
        seq: u64,
        now_ms: Option<TimeMs>,
        state: &mut S,
        book: Option<&mut LedgerScheduler<S, P>>,
    ) -> Option<UpgradeHalt> {
        if let Some(last) = self.state.applied.last()
            && !self.carried.contains_key(&last.name)
            && !self.known.contains(&last.name)
        {
            return Some(UpgradeHalt::Unknown(last.name.clone()));
        }
        let plan = self.state.pending.clone()?;
        let reached = plan.at.reached(seq, now_ms);
        let Some(migration) = self.carried.get_mut(&plan.name) else {
            return reached.then(|| UpgradeHalt::Needed(plan.name.clone()));
        };
        if !reached {
            return Some(UpgradeHalt::Early(plan.name.clone()));
        }
        let mut run = |book: Option<&mut Scheduler>| {
            let mut ctx = MigrationCtx {
                state: &mut *state,
                book,
                plan: &plan,
                seq,
                agreed_time_ms: now_ms,
            };
            match catch_unwind(AssertUnwindSafe(|| migration(&mut ctx))) {
                Ok(r) => r,
                Err(_) => Err("the migration panicked".to_string()),
            }
        };
        let result = match book {
            Some(b) => b.edit_book(|sched| run(Some(sched))),
            None => run(None),
        };
        if let Err(e) = result {
            tracing::error!(name = %plan.name, error = %e, "upgrade migration failed");
            return Some(UpgradeHalt::Failed(plan.name));
        }
        tracing::info!(name = %plan.name, seq, ?now_ms, "upgrade applied");
        self.state.pending = None;
        if self.state.applied.len() >= MAX_APPLIED_UPGRADES {
            self.state.applied.remove(0);
        }
        self.state.applied.push(AppliedUpgrade {
            name: plan.name,
            seq,
            agreed_time_ms: now_ms,
        });
        self.state.applied_count = self.state.applied_count.saturating_add(1);
        None
    }
}
