//! [`CronLedger`]: a ledger state with ccron tables and an optional schedule book, as one
//! [`Application`].
//!
//! [`CronLedger`] holds a state `S` and a `ccron::CronTableRegistry<S>` and evaluates the
//! registry on every tick, and optionally a schedule book ([`LedgerScheduler`]: schedules as
//! replicated data, created and changed by client requests, whose handlers change the same state).

use std::collections::BTreeMap;

use ccron::{CronTableRegistry, MemPages, Principal, RegistryError, Tick};
use sha2::{Digest, Sha256};

use super::scheduler::{BookWire, LedgerScheduler};
use crate::app::{AppError, Application, ExecContext};
use crate::crypto::Digest32;
use crate::node::{ClientId, FireNote};
use crate::protocol::codec;

/// A ledger with cron tables: state `S` (an [`Application`] for user requests) plus a
/// [`CronTableRegistry`] over `S`, whose actions therefore change the ledger's own state.
///
/// Register the same tables, in the same way, on every replica before the replica starts
/// ([`CronLedger::registry_mut`]); the registry's persisted schedules live in the replica's
/// reserved pages, which the replica checkpoints, digests and transfers, and
/// [`Application::reload`] reloads them after a restart or a state transfer. A tick for a
/// component without a table is rejected ([`AppError::UnknownComponent`]), counted, traced, and
/// creates no state.
///
/// With a schedule book ([`CronLedger::with_scheduler`]): a request payload that is an encoded
/// `ccron::schedule::ScheduleRequest` (or that the book's translator maps to one) is applied to
/// the book instead of `S`; a tick of the book's component runs the due schedules against `S`
/// (then that component's table, if one is registered); the book's pages and outbox travel in
/// the snapshot, so restart and state transfer restore the book with `S`.
pub struct CronLedger<S> {
    state: S,
    registry: CronTableRegistry<S>,
    scheduler: Option<LedgerScheduler<S>>,
    fires: BTreeMap<(u32, u32), u64>,
    /// Notes of the actions run since the replica last took them (observation only: neither
    /// digested nor snapshotted); at most [`MAX_FIRE_NOTES`], the rest counted.
    notes: Vec<FireNote>,
    notes_dropped: u64,
    unknown_component_ticks: u64,
    table_errors: u64,
}

impl<S> std::fmt::Debug for CronLedger<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronLedger")
            .field("registry", &self.registry)
            .field("scheduler", &self.scheduler)
            .field("fires", &self.fires)
            .field("unknown_component_ticks", &self.unknown_component_ticks)
            .finish_non_exhaustive()
    }
}

impl<S: Application> CronLedger<S> {
    /// A ledger over `state` with the tables of `registry`.
    pub fn new(state: S, registry: CronTableRegistry<S>) -> Self {
        Self {
            state,
            registry,
            scheduler: None,
            fires: BTreeMap::new(),
            notes: Vec::new(),
            notes_dropped: 0,
            unknown_component_ticks: 0,
            table_errors: 0,
        }
    }

    /// The same ledger with a schedule book (set up identically on every replica).
    pub fn with_scheduler(mut self, scheduler: LedgerScheduler<S>) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    /// The schedule book, if any.
    pub fn scheduler(&self) -> Option<&LedgerScheduler<S>> {
        self.scheduler.as_ref()
    }

    /// The ledger state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The registry.
    pub fn registry(&self) -> &CronTableRegistry<S> {
        &self.registry
    }

    /// The registry, mutably (register tables at start, identically on every replica).
    pub fn registry_mut(&mut self) -> &mut CronTableRegistry<S> {
        &mut self.registry
    }

    /// Ticks rejected because their component has no table.
    pub fn unknown_component_ticks(&self) -> u64 {
        self.unknown_component_ticks
    }

    /// Evaluations that reported a table error (the pass itself completed).
    pub fn table_errors(&self) -> u64 {
        self.table_errors
    }

    /// Fire notes not kept because [`MAX_FIRE_NOTES`] were waiting to be taken.
    pub fn fire_notes_dropped(&self) -> u64 {
        self.notes_dropped
    }

    fn note(&mut self, n: FireNote) {
        if self.notes.len() < MAX_FIRE_NOTES {
            self.notes.push(n);
        } else {
            self.notes_dropped = self.notes_dropped.saturating_add(1);
            tracing::debug!(component = n.component, "fire note dropped: buffer full");
        }
    }
}

/// Fire notes a [`CronLedger`] keeps until the replica takes them (after every tick).
pub const MAX_FIRE_NOTES: usize = 4_096;

impl<S: Application> Application for CronLedger<S> {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        if let Some(book) = &mut self.scheduler {
            if let Some(upto) = super::scheduler::outbox_delivered_of(payload) {
                return book.trim_outbox(Principal::Client(client), upto);
            }
            if let Some(result) = ccron::outbox::OutboxResult::from_payload(payload) {
                return book.apply_result(&mut self.state, Principal::Client(client), result);
            }
            if let Some(req) = book.request_of(payload) {
                return book.execute(ctx, Principal::Client(client), req);
            }
        }
        self.state.execute(ctx, client, payload)
    }

    fn digest(&self) -> Digest32 {
        // The replica's state digest adds the reserved pages (the persisted schedules); the
        // setup digest makes replicas that registered different tables visibly diverge; the
        // book (pages and outbox) is part of the ledger's own state.
        let mut h = Sha256::new();
        h.update(b"cron-ledger");
        h.update(self.state.digest());
        h.update(self.registry.setup_digest());
        for ((c, p), n) in &self.fires {
            h.update(c.to_le_bytes());
            h.update(p.to_le_bytes());
            h.update(n.to_le_bytes());
        }
        if let Some(book) = &self.scheduler {
            h.update(b"schedule-book");
            h.update(book.policy().digest());
            h.update(codec::encode(&book.to_wire()).unwrap_or_default());
        }
        h.finalize().into()
    }

    fn snapshot(&self) -> Vec<u8> {
        let fires: Vec<(u32, u32, u64)> =
            self.fires.iter().map(|((c, p), n)| (*c, *p, *n)).collect();
        // Without a book the snapshot keeps its original two-part form.
        match &self.scheduler {
            None => codec::encode(&(self.state.snapshot(), fires)),
            Some(book) => codec::encode(&(self.state.snapshot(), fires, book.to_wire())),
        }
        .unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let bad = |e: String| AppError::BadSnapshot(e);
        // Decode and validate everything before changing anything.
        let (state, fires, book) = match &self.scheduler {
            None => {
                let (state, fires): (Vec<u8>, Vec<(u32, u32, u64)>) =
                    codec::decode(snapshot, snapshot.len()).map_err(|e| bad(e.to_string()))?;
                (state, fires, None)
            }
            Some(sched) => {
                let (state, fires, wire): (Vec<u8>, Vec<(u32, u32, u64)>, BookWire) =
                    codec::decode(snapshot, snapshot.len()).map_err(|e| bad(e.to_string()))?;
                let parts = LedgerScheduler::<S>::decode_wire(sched.config(), wire)?;
                (state, fires, Some(parts))
            }
        };
        self.state.restore(&state)?;
        self.fires = fires.into_iter().map(|(c, p, n)| ((c, p), n)).collect();
        if let (Some(sched), Some(parts)) = (&mut self.scheduler, book) {
            sched.install(parts);
        }
        Ok(())
    }

    fn on_tick(&mut self, tick: Tick, pages: &mut MemPages) -> Result<(), AppError> {
        let mut book_ran = false;
        if let Some(book) = &mut self.scheduler
            && book.config().component == tick.component_id
        {
            let fired = book.on_tick(&tick, &mut self.state);
            let key = (tick.component_id, book.config().position);
            if !fired.is_empty() {
                *self.fires.entry(key).or_insert(0) += fired.len() as u64;
            }
            for f in fired {
                self.note(FireNote {
                    component: key.0,
                    position: key.1,
                    schedule: Some(f.id),
                    due: Some(f.due),
                });
            }
            book_ran = true;
        }
        if book_ran && self.registry.get(tick.component_id).is_none() {
            // The book's component needs no table.
            return Ok(());
        }
        match self.registry.evaluate(&tick, &mut self.state, pages) {
            Ok(outcome) => {
                for f in &outcome.fired {
                    *self
                        .fires
                        .entry((tick.component_id, f.position))
                        .or_insert(0) += 1;
                    self.note(FireNote {
                        component: tick.component_id,
                        position: f.position,
                        schedule: None,
                        due: f.due,
                    });
                }
                if !outcome.errors.is_empty() {
                    self.table_errors = self.table_errors.saturating_add(1);
                    tracing::warn!(
                        component = tick.component_id,
                        seq = tick.bft_sequence_num,
                        errors = ?outcome.errors,
                        "cron table pass reported errors"
                    );
                }
                Ok(())
            }
            Err(RegistryError::UnknownComponent(c)) => {
                self.unknown_component_ticks = self.unknown_component_ticks.saturating_add(1);
                Err(AppError::UnknownComponent(c))
            }
            Err(e) => {
                self.table_errors = self.table_errors.saturating_add(1);
                Err(AppError::TickRejected(e.to_string()))
            }
        }
    }

    fn reload(&mut self, pages: &MemPages) -> Result<(), AppError> {
        self.registry
            .reload(pages)
            .map_err(|e| AppError::TickRejected(format!("reload: {e}")))
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        self.fires.clone()
    }

    fn halted(&self) -> Option<&AppError> {
        self.scheduler.as_ref().and_then(|s| s.halted())
    }

    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        out.append(&mut self.notes);
    }
}
