//! [`Effects`]: what a ledger state's own request code may do besides changing the state, all
//! or nothing with the request: emit outbox records into the ledger's one outbox and change the
//! schedule book, authorized as the requesting client.
//!
//! A `CronLedger` hands an [`Effects`] to its state's [`Application::execute_with`]. Each
//! operation either takes effect or returns a typed error and changes nothing; **if any
//! operation of the request was refused, none of the request's effects stay** (the book is put
//! back as it was before the request, its staged records are dropped), so the state's code
//! writes:
//!
//! ```ignore
//! fn execute_with(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8],
//!                 fx: &mut Effects<'_>) -> Vec<u8> {
//!     // ... parse and validate, changing nothing ...
//!     if let Err(e) = fx.schedule(refund_task(client, id)) {
//!         return format!("err {e}").into_bytes(); // nothing changed, nothing scheduled
//!     }
//!     self.holds.insert(key, hold); // infallible from here on
//!     b"ok held".to_vec()
//! }
//! ```
//!
//! The book change and the state change then commit together in the one request: a client
//! that stops after it never leaves funds held without their refund.

use crate::outbox::{EmitError, Emits, OccurrenceId, Origin, OutboxRecord};
use crate::schedule::{ScheduleError, ScheduleRequest};

#[cfg(doc)]
use super::app::Application;

/// Applies a schedule request to the ledger's book (as the requesting client) for [`Effects`].
pub(crate) type ApplySchedule<'a> =
    dyn FnMut(ScheduleRequest) -> Result<Option<u64>, ScheduleError> + 'a;

/// The effects a ledger state's request may have beyond its state (see the module
/// documentation).
pub struct Effects<'a> {
    component: u32,
    /// The occurrence of this request's records: the outbox index its first record gets.
    occurrence: u64,
    emits: Emits,
    schedule: Option<&'a mut ApplySchedule<'a>>,
    refused: bool,
    scheduled: usize,
}

impl std::fmt::Debug for Effects<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("component", &self.component)
            .field("staged", &self.emits.staged().len())
            .field("scheduled", &self.scheduled)
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

impl Effects<'static> {
    /// No outbox and no book: every emit is [`EmitError::NotReserved`], every schedule
    /// request [`ScheduleError::NoBook`] (what a state gets outside a `CronLedger`).
    pub fn none() -> Self {
        Self {
            component: 0,
            occurrence: 0,
            emits: Emits::none(),
            schedule: None,
            refused: false,
            scheduled: 0,
        }
    }
}

impl<'a> Effects<'a> {
    /// Effects emitting into `emits` (reserved room, or none) under `component`, applying
    /// schedule requests through `schedule`.
    pub(crate) fn new(
        component: u32,
        emits: Emits,
        schedule: Option<&'a mut ApplySchedule<'a>>,
    ) -> Self {
        Self {
            component,
            occurrence: emits.next_index(),
            emits,
            schedule,
            refused: false,
            scheduled: 0,
        }
    }

    /// Emits an outbox record into the ledger's one outbox, appended when the request
    /// completes with no refused effect; returns the index it will get. Its id is
    /// `(book component, Origin::State ‖ sub-index ‖ 0, index of the request's first record)`:
    /// unique forever, the same on every replica. A result for it comes back to the state's
    /// [`Application::on_outbox_result`].
    ///
    /// Room: the ledger reserves its request budget (`CronLedger::with_request_emits`) before
    /// the request runs; without one, with a full outbox, or with the requesting client at its
    /// outbox quota (the record is the client's: [`crate::authz::Quota::max_outbox_records`]),
    /// the emit is refused.
    ///
    /// # Errors
    /// [`EmitError`]: nothing reserved, the outbox full, the client at its quota
    /// ([`EmitError::QuotaExceeded`]), the budget spent, a record too large.
    /// The request's effects are then all dropped: return without changing the state.
    pub fn emit(
        &mut self,
        handler: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Result<u64, EmitError> {
        self.emit_record(handler, payload, None, None)
    }

    /// [`Effects::emit`] with a routing topic and record type.
    ///
    /// # Errors
    /// As [`Effects::emit`].
    pub fn emit_record(
        &mut self,
        handler: impl Into<String>,
        payload: impl Into<Vec<u8>>,
        topic: Option<&str>,
        kind: Option<&str>,
    ) -> Result<u64, EmitError> {
        let (component, occurrence) = (self.component, self.occurrence);
        let (handler, payload) = (handler.into(), payload.into());
        let result = self.emits.stage(
            |sub| OccurrenceId::emitted(component, Origin::State, 0, occurrence, sub),
            |id| {
                let mut r = OutboxRecord::new(id, handler, payload);
                if let Some(t) = topic {
                    r = r.with_topic(t);
                }
                if let Some(k) = kind {
                    r = r.with_kind(k);
                }
                r
            },
        );
        if result.is_err() {
            self.refused = true;
        }
        result
    }

    /// Applies `request` to the ledger's schedule book now, authorized as the requesting client
    /// (the book's policy decides, as for a request sent to the book), with the request's
    /// sequence number and agreed time; returns the schedule id it created or changed. If any
    /// effect of this request is refused, every schedule change of the request is undone.
    ///
    /// # Errors
    /// [`ScheduleError`] (unauthorized, invalid, over a limit; [`ScheduleError::NoBook`]
    /// without a book). Return without changing the state.
    pub fn schedule(&mut self, request: ScheduleRequest) -> Result<Option<u64>, ScheduleError> {
        let result = match self.schedule.as_deref_mut() {
            Some(apply) => apply(request),
            None => Err(ScheduleError::NoBook),
        };
        match &result {
            Ok(_) => self.scheduled += 1,
            Err(_) => self.refused = true,
        }
        result
    }

    /// Whether an effect of this request was refused (then none of them stays).
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// The records staged so far.
    pub fn staged(&self) -> &[OutboxRecord] {
        self.emits.staged()
    }

    /// Schedule requests applied so far.
    pub fn scheduled(&self) -> usize {
        self.scheduled
    }

    /// The staged records and whether any effect was refused.
    pub(crate) fn finish(self) -> (Emits, bool, usize) {
        (self.emits, self.refused, self.scheduled)
    }
}
