//! Handlers: code registered under a name on every replica, and the context one run gets.

use std::collections::BTreeMap;
use std::fmt;

use super::{ScheduleError, ScheduleRequest};
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
    /// The occurrence's deterministic id (component, schedule id, occurrence number).
    pub occurrence: OccurrenceId,
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
    pub(super) outbox: &'a mut Outbox,
    pub(super) emitted: bool,
    /// The largest record this run may emit ([`Scheduler::emit_bound`](super::Scheduler::emit_bound)):
    /// the tick made sure the outbox can take one that large before the run started.
    pub(super) emit_bound: usize,
    /// A refused emit, reported by the tick after the run ([`TickReport::errors`](super::TickReport::errors)).
    pub(super) emit_error: Option<ScheduleError>,
    pub(super) requests: Vec<ScheduleRequest>,
}

impl<S> HandlerCtx<'_, S> {
    /// Appends an outbox record for an external effect, identified by this occurrence's id so a
    /// worker can deduplicate, and carrying the schedule's topic and type so that a worker pool
    /// can route it. One per occurrence.
    ///
    /// Capacity: the tick starts a run only when the outbox can take one record of the run's
    /// emit bound ([`Scheduler::emit_bound`](super::Scheduler::emit_bound)), so a record within
    /// that bound is always appended; runs that would not fit wait (due or owed) until the
    /// consumer trims the outbox ([`TickReport::outbox_full`](super::TickReport::outbox_full)).
    ///
    /// # Errors
    /// [`ScheduleError::SecondEmit`], or [`ScheduleError::EmitTooLarge`] for a record over the
    /// emit bound. Nothing is appended then, and the tick also reports the error in
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
        if self.emitted {
            return Err(ScheduleError::SecondEmit);
        }
        let mut record = OutboxRecord::new(self.occurrence, effect, payload);
        if let Some(topic) = self.topic {
            record = record.with_topic(topic);
        }
        if let Some(kind) = self.kind {
            record = record.with_kind(kind);
        }
        let size_bytes = record.size_bytes();
        if size_bytes > self.emit_bound {
            return Err(ScheduleError::EmitTooLarge {
                size_bytes,
                max_bytes: self.emit_bound,
            });
        }
        let index = self.outbox.append(record)?;
        self.emitted = true;
        Ok(index)
    }

    /// Queues a change to the book, applied right after this run (with this tick as the
    /// admission point); rejections are reported in [`TickReport::errors`](super::TickReport::errors).
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
            .finish_non_exhaustive()
    }
}

/// A handler: code registered under a name on every replica.
pub type HandlerFn<S> = Box<dyn FnMut(&mut HandlerCtx<'_, S>) + Send>;

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
pub struct Handlers<S> {
    pub(super) map: BTreeMap<String, Registered<S>>,
}

impl<S> Default for Handlers<S> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
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
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` under `name` at version 1; returns `false` (and changes nothing)
    /// when the name is taken. See [`Handlers::register_versioned`].
    pub fn register(
        &mut self,
        name: impl Into<String>,
        handler: impl FnMut(&mut HandlerCtx<'_, S>) + Send + 'static,
    ) -> bool {
        self.register_versioned(name, 1, handler)
    }

    /// Registers `handler` under `name` at `version`; returns `false` (and changes nothing)
    /// when the name is taken. The name and the version enter [`Handlers::digest`].
    pub fn register_versioned(
        &mut self,
        name: impl Into<String>,
        version: u32,
        handler: impl FnMut(&mut HandlerCtx<'_, S>) + Send + 'static,
    ) -> bool {
        let name = name.into();
        if self.map.contains_key(&name) {
            return false;
        }
        self.map.insert(
            name,
            Registered {
                version,
                run: Box::new(handler),
            },
        );
        true
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
