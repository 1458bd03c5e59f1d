//! Handlers: code registered under a name (and a version) on every replica, the context one
//! run gets, what a run returns ([`HandlerError`]), and how a failed run's changes to the
//! ledger state are undone ([`Transactional`], [`Handlers::transactional`],
//! [`Handlers::with_clone_rollback`]).
//!
//! Isolation. A run's effects on the book and the outbox are *staged*: the record it emits is
//! appended and the requests it queues are applied only when it returns `Ok`. Its effects on
//! the ledger state go through the handler set's rollback: with [`Transactional`] hooks (an
//! undo log kept by the state: O(what the run changed), the cheap default for large states)
//! or a clone taken before the run (O(state) per run: for small states). A handler that
//! returns an error or panics (the panic is caught at the boundary, `catch_unwind`) is the
//! same deterministic failure on every replica: no panic message is recorded, only
//! [`RunOutcome::Panicked`].

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::{RunOutcome, ScheduleError, ScheduleRequest};
use crate::due::Due;
use crate::outbox::{OccurrenceId, Outbox, OutboxRecord};
use crate::tick::Tick;

/// The context of one handler run.
pub struct HandlerCtx<'a, S> {
    /// The tick.
    pub tick: &'a Tick,
    /// The schedule's id.
    pub id: u64,
    /// The nominal occurrence.
    pub due: Due,
    /// The occurrence's deterministic id (component, schedule id, occurrence number): the same
    /// for every attempt of one occurrence.
    pub occurrence: OccurrenceId,
    /// Which attempt this is: 1, then 2, 3, ... for the retries of a failed run
    /// ([`super::RetryPolicy`]).
    pub attempt: u32,
    /// The schedule's payload.
    pub payload: &'a [u8],
    /// The schedule's routing topic ([`NewSchedule::topic`](super::NewSchedule::topic)),
    /// carried into the record [`HandlerCtx::emit`] appends.
    pub topic: Option<&'a str>,
    /// The schedule's record type ([`NewSchedule::kind`](super::NewSchedule::kind)), carried
    /// likewise.
    pub kind: Option<&'a str>,
    /// The ledger's state.
    pub state: &'a mut S,
    pub(super) outbox: &'a Outbox,
    /// The records [`HandlerCtx::emit`] staged: appended when the run returns `Ok`.
    pub(super) staged: Vec<OutboxRecord>,
    /// What the run may emit in all (records, bytes): reserved before it started.
    pub(super) budget: crate::outbox::EmitBudget,
    /// The largest record this run may emit ([`Scheduler::emit_bound`](super::Scheduler::emit_bound)):
    /// the tick made sure the outbox can take one that large before the run started.
    pub(super) emit_bound: usize,
    /// A refused emit, reported by the tick after the run ([`TickReport::errors`](super::TickReport::errors)).
    pub(super) emit_error: Option<ScheduleError>,
    pub(super) requests: Vec<ScheduleRequest>,
}

impl<S> HandlerCtx<'_, S> {
    /// Stages an outbox record for an external effect, identified by this occurrence's id so a
    /// worker can deduplicate, and carrying the schedule's topic and type so that a worker pool
    /// can route it. The record is appended when the run returns `Ok` (never for a failed
    /// attempt: a retry emits again, under the same ids); the returned index is the one it gets
    /// then.
    ///
    /// Several per run: as many as the book's emit budget allows
    /// ([`Scheduler::with_emit_budget`](super::Scheduler::with_emit_budget); one by default).
    /// The first record's id is the occurrence's ([`HandlerCtx::occurrence`]); the k-th carries
    /// sub-index k-1 in its `entry` (`crate::outbox::OccurrenceId::emitted`), so every record
    /// keeps a distinct, deterministic id.
    ///
    /// Capacity: the tick starts a run only when the outbox can take one record of the run's
    /// emit bound ([`Scheduler::emit_bound`](super::Scheduler::emit_bound)), so a record within
    /// that bound is always appended; runs that would not fit wait (due or owed) until the
    /// consumer trims the outbox ([`TickReport::outbox_full`](super::TickReport::outbox_full)).
    ///
    /// # Errors
    /// [`ScheduleError::SecondEmit`], or [`ScheduleError::EmitTooLarge`] for a record over the
    /// emit bound. Nothing is staged then, and the tick also reports the error in
    /// [`TickReport::errors`](super::TickReport::errors) and counts it
    /// ([`Scheduler::emit_failures`](super::Scheduler::emit_failures)): a refused emit is a
    /// deterministic outcome of the run, the same on every replica, never only a log line.
    pub fn emit(
        &mut self,
        effect: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Result<u64, ScheduleError> {
        let result = self.try_emit(effect.into(), payload.into());
        if let Err(e) = &result {
            self.emit_error.get_or_insert_with(|| e.clone());
        }
        result
    }

    fn try_emit(&mut self, effect: String, payload: Vec<u8>) -> Result<u64, ScheduleError> {
        let sub = self.staged.len();
        if sub >= self.budget.records {
            if self.budget.records <= 1 {
                return Err(ScheduleError::SecondEmit);
            }
            return Err(crate::outbox::EmitError::TooManyInRun {
                max_records: self.budget.records,
            }
            .into());
        }
        let id = OccurrenceId::emitted(
            self.occurrence.component,
            crate::outbox::Origin::Schedule,
            self.occurrence.entry,
            self.occurrence.occurrence,
            sub,
        )?;
        let mut record = OutboxRecord::new(id, effect, payload);
        if let Some(topic) = self.topic {
            record = record.with_topic(topic);
        }
        if let Some(kind) = self.kind {
            record = record.with_kind(kind);
        }
        let size_bytes = record.size_bytes();
        let used: usize = self.staged.iter().map(OutboxRecord::size_bytes).sum();
        let max_bytes = self.emit_bound.min(self.budget.bytes.saturating_sub(used));
        if size_bytes > max_bytes {
            return Err(ScheduleError::EmitTooLarge {
                size_bytes,
                max_bytes,
            });
        }
        self.staged.push(record);
        Ok(self.outbox.next_index().saturating_add(sub as u64))
    }

    /// Queues a change to the book, applied right after this run if it returns `Ok` (with this
    /// tick as the admission point); rejections are reported in
    /// [`TickReport::errors`](super::TickReport::errors).
    pub fn request(&mut self, request: ScheduleRequest) {
        self.requests.push(request);
    }
}

impl<S> fmt::Debug for HandlerCtx<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerCtx")
            .field("id", &self.id)
            .field("due", &self.due)
            .field("occurrence", &self.occurrence)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// Why a handler run failed: a code the book records ([`RunOutcome::Failed`]) and a message
/// for the logs only (not replicated: only the code is stored, in the run's history and dead
/// letter). The run's staged effects are dropped and its state changes rolled back; the
/// schedule's [`RetryPolicy`](super::RetryPolicy) decides what happens next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("handler failed with code {code}: {message}")]
pub struct HandlerError {
    /// A code of the ledger's choosing, recorded with the run.
    pub code: u32,
    /// What went wrong (traced, never stored).
    pub message: String,
}

impl HandlerError {
    /// An error with `code` and `message`.
    pub fn new(code: u32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The code of a [`HandlerError`] made from a refused emit ([`ScheduleError`] through `?`).
pub const EMIT_REFUSED_CODE: u32 = u32::MAX;

impl From<ScheduleError> for HandlerError {
    fn from(e: ScheduleError) -> Self {
        Self::new(EMIT_REFUSED_CODE, e.to_string())
    }
}

/// What a handler closure may return: nothing (an infallible handler; it can still panic) or
/// `Result<(), HandlerError>`.
pub trait IntoRunResult {
    /// The run's result.
    fn into_run_result(self) -> Result<(), HandlerError>;
}

impl IntoRunResult for () {
    fn into_run_result(self) -> Result<(), HandlerError> {
        Ok(())
    }
}

impl IntoRunResult for Result<(), HandlerError> {
    fn into_run_result(self) -> Result<(), HandlerError> {
        self
    }
}

/// A handler: code registered under a name on every replica.
pub type HandlerFn<S> = Box<dyn FnMut(&mut HandlerCtx<'_, S>) -> Result<(), HandlerError> + Send>;

/// A ledger state that can undo a handler run's changes: the hook [`Handlers::transactional`]
/// calls around every run. Keep an undo log (the old value of each key a run writes, pushed
/// while `begin_run` is open) so that each call costs O(what the run changed): a clone of a
/// large state per run is what this avoids. Runs never nest: every `begin_run` is followed by
/// exactly one `commit_run` or `rollback_run` before the next.
pub trait Transactional {
    /// A handler run starts: record what changes from here on.
    fn begin_run(&mut self);
    /// The run succeeded: keep its changes, drop the undo information.
    fn commit_run(&mut self);
    /// The run failed (an error or a panic): undo every change since `begin_run`.
    fn rollback_run(&mut self);
}

/// How a failed run's state changes are undone (see the module documentation).
enum Rollback<S> {
    /// Not undone: a failed run's changes to the state stay (its book and outbox effects are
    /// still dropped).
    Keep,
    /// [`Transactional`] hooks.
    Hooks {
        begin: fn(&mut S),
        commit: fn(&mut S),
        rollback: fn(&mut S),
    },
    /// A clone of the state before each run, put back on failure.
    Clone(fn(&S) -> S),
}

/// A registered handler: its version and its code.
pub(super) struct Registered<S> {
    pub(super) version: u32,
    pub(super) run: HandlerFn<S>,
}

/// The handlers schedules may name (registered identically on every replica), each under a
/// name and a version.
///
/// The set of names and versions is part of the ledger's setup: [`Handlers::digest`] hashes it,
/// and [`crate::CronTableRegistry::declare_handlers`] folds it into the registry's setup digest
/// (a `CronLedger` with a schedule book declares its handlers there), so replicas built with
/// different handler sets (a renamed handler, a changed version) disagree visibly at the first
/// checkpoint instead of silently at the first run. Bump a handler's version whenever its
/// behaviour changes in a way replicas must not mix.
///
/// A failed run's state changes are rolled back when the set was built with a rollback
/// ([`Handlers::transactional`], [`Handlers::with_clone_rollback`]); [`Handlers::new`] keeps
/// them (its book and outbox effects are dropped either way), which suits handlers that only
/// emit, or never fail.
pub struct Handlers<S> {
    pub(super) map: BTreeMap<String, Registered<S>>,
    rollback: Rollback<S>,
}

impl<S> Default for Handlers<S> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            rollback: Rollback::Keep,
        }
    }
}

impl<S> fmt::Debug for Handlers<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.map.iter().map(|(n, r)| (n, r.version)))
            .finish()
    }
}

impl<S> Handlers<S> {
    /// No handlers; a failed run's state changes are kept (see [`Handlers::transactional`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// No handlers; a failed run's state changes are undone through the state's
    /// [`Transactional`] hooks (an undo log: O(what a run changed) per run).
    pub fn transactional() -> Self
    where
        S: Transactional,
    {
        Self {
            map: BTreeMap::new(),
            rollback: Rollback::Hooks {
                begin: S::begin_run,
                commit: S::commit_run,
                rollback: S::rollback_run,
            },
        }
    }

    /// The same handlers, a failed run's state changes undone by putting back a clone of the
    /// state taken before each run: O(state) per run, for small states (use
    /// [`Handlers::transactional`] for large ones).
    pub fn with_clone_rollback(mut self) -> Self
    where
        S: Clone,
    {
        self.rollback = Rollback::Clone(S::clone);
        self
    }

    /// Whether a failed run's state changes are rolled back.
    pub fn rolls_back(&self) -> bool {
        !matches!(self.rollback, Rollback::Keep)
    }

    /// Registers `handler` under `name` at version 1; returns `false` (and changes nothing)
    /// when the name is taken. See [`Handlers::register_versioned`].
    pub fn register<R: IntoRunResult>(
        &mut self,
        name: impl Into<String>,
        handler: impl FnMut(&mut HandlerCtx<'_, S>) -> R + Send + 'static,
    ) -> bool {
        self.register_versioned(name, 1, handler)
    }

    /// Registers `handler` under `name` at `version`; returns `false` (and changes nothing)
    /// when the name is taken. The name and the version enter [`Handlers::digest`]. The
    /// handler returns nothing (infallible) or `Result<(), HandlerError>`.
    pub fn register_versioned<R: IntoRunResult>(
        &mut self,
        name: impl Into<String>,
        version: u32,
        mut handler: impl FnMut(&mut HandlerCtx<'_, S>) -> R + Send + 'static,
    ) -> bool {
        let name = name.into();
        if self.map.contains_key(&name) {
            return false;
        }
        self.map.insert(
            name,
            Registered {
                version,
                run: Box::new(move |ctx| handler(ctx).into_run_result()),
            },
        );
        true
    }

    /// Runs handler `name` on `ctx`, isolated: its panic is caught at this boundary, and when
    /// it fails (an error or a panic) the state changes it made are rolled back (with a
    /// rollback configured) and its staged effects dropped. `None` when no such handler is
    /// registered. The outcome records no panic message: every replica records the same.
    pub(super) fn run(&mut self, name: &str, ctx: &mut HandlerCtx<'_, S>) -> Option<RunOutcome> {
        let handler = &mut self.map.get_mut(name)?.run;
        let saved = match &self.rollback {
            Rollback::Keep => None,
            Rollback::Hooks { begin, .. } => {
                begin(ctx.state);
                None
            }
            Rollback::Clone(clone) => Some(clone(ctx.state)),
        };
        let outcome = match catch_unwind(AssertUnwindSafe(|| handler(ctx))) {
            Ok(Ok(())) => RunOutcome::Ok,
            Ok(Err(e)) => {
                tracing::info!(id = ctx.id, code = e.code, error = %e.message, "handler run failed");
                RunOutcome::Failed { code: e.code }
            }
            Err(payload) => {
                // The payload (and its message) is dropped unread: it may differ between
                // builds, and nothing about it is replicated.
                drop(payload);
                tracing::warn!(id = ctx.id, "handler run panicked: caught, rolled back");
                RunOutcome::Panicked
            }
        };
        match (&self.rollback, outcome) {
            (Rollback::Hooks { commit, .. }, RunOutcome::Ok) => commit(ctx.state),
            (Rollback::Hooks { rollback, .. }, _) => rollback(ctx.state),
            (Rollback::Clone(_), RunOutcome::Ok) | (Rollback::Keep, _) => {}
            (Rollback::Clone(_), _) => {
                if let Some(saved) = saved {
                    *ctx.state = saved;
                }
            }
        }
        if !outcome.is_ok() {
            ctx.staged.clear();
            ctx.requests.clear();
        }
        Some(outcome)
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// The version `name` is registered at.
    pub fn version(&self, name: &str) -> Option<u32> {
        self.map.get(name).map(|r| r.version)
    }

    /// How many handlers are registered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every registered `(name, version)`, ascending by name: the handler set as setup.
    pub fn manifest(&self) -> Vec<(String, u32)> {
        self.map
            .iter()
            .map(|(n, r)| (n.clone(), r.version))
            .collect()
    }

    /// A digest of the handler set: every name and version, ascending by name (see
    /// [`manifest_digest`]).
    pub fn digest(&self) -> [u8; 32] {
        manifest_digest(self.map.iter().map(|(n, r)| (n.as_str(), r.version)))
    }
}

/// The digest of a handler set given as `(name, version)` pairs in ascending name order:
/// SHA-256 over a domain tag, then each name's length, bytes and version (little-endian), so
/// that no two distinct sets hash the same bytes.
pub fn manifest_digest<'a>(entries: impl IntoIterator<Item = (&'a str, u32)>) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"ccron-handlers-v1");
    for (name, version) in entries {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update(version.to_le_bytes());
    }
    h.finalize().into()
}
