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
    pub(super) requests: Vec<ScheduleRequest>,
}

impl<S> HandlerCtx<'_, S> {
    /// Appends an outbox record for an external effect, identified by this occurrence's id so a
    /// worker can deduplicate, and carrying the schedule's topic and type so that a worker pool
    /// can route it. One per occurrence.
    ///
    /// # Errors
    /// [`ScheduleError::SecondEmit`], or the outbox's limits.
    pub fn emit(
        &mut self,
        effect: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Result<u64, ScheduleError> {
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

/// The handlers schedules may name (registered identically on every replica).
pub struct Handlers<S> {
    pub(super) map: BTreeMap<String, HandlerFn<S>>,
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
        f.debug_set().entries(self.map.keys()).finish()
    }
}

impl<S> Handlers<S> {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` under `name`; returns `false` (and changes nothing) when the name is
    /// taken.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        handler: impl FnMut(&mut HandlerCtx<'_, S>) + Send + 'static,
    ) -> bool {
        let name = name.into();
        if self.map.contains_key(&name) {
            return false;
        }
        self.map.insert(name, Box::new(handler));
        true
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }
}
