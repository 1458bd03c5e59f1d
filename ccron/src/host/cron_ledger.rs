//! [`CronLedger`]: a ledger state with ccron tables and an optional schedule book, as one
//! [`Application`].
//!
//! [`CronLedger`] holds a state `S` and a `ccron::CronTableRegistry<S>` and evaluates the
//! registry on every tick, and optionally a schedule book ([`LedgerScheduler`]: schedules as
//! replicated data, created and changed by client requests, whose handlers change the same state).

use std::collections::BTreeMap;

use crate::state_hash::{StateHash, StateHasher};
use crate::{
    CronTableRegistry, MemPages, Principal, RegistryError, ReservedPages, TableError, Tick,
};

use super::app::Digest32;
use super::app::{AppError, Application, ExecContext};
use super::app::{ClientId, FireNote};
use super::effects::Effects;
use super::scheduler::{BookWire, LedgerScheduler};
use super::wire as codec;
use crate::entry::{CancelledRuns, Diversion, EntryCancels, PendingResults};
use crate::outbox::{EmitBudget, Emits};
use crate::schedule::query::{EntryCounts, EntryOverlapCounts};
use crate::schedule::upgrade::{UpgradeState, Upgrades, upgrade_request_of};

/// The first 8 bytes of a [`CronLedger`] snapshot in its counted form (`"ccLedgr2"`): one
/// that carries table entries' overlap counts. Every older form starts with the length of the
/// state's snapshot, a `u64` at most [`codec::ABSOLUTE_LIMIT_BYTES`], never this value, so the
/// forms cannot be mistaken for each other.
pub const COUNTED_SNAPSHOT_MAGIC: u64 = u64::from_le_bytes(*b"ccLedgr2");

/// The version of the counted form's body ([`COUNTED_SNAPSHOT_MAGIC`]).
pub const COUNTED_SNAPSHOT_VERSION: u32 = 2;

/// The version of the counted form's body that also carries table entries' cancellations
/// ([`CancelledRuns`], `Overlap::CancelOther`). Written only by a ledger where a table entry
/// cancelled a run: every other ledger keeps writing [`COUNTED_SNAPSHOT_VERSION`]'s bytes (or
/// an older form), so no pinned digest or snapshot moves.
pub const CANCELS_SNAPSHOT_VERSION: u32 = 3;

/// The counted form's body: the state's snapshot; per `(component, position)` the fires, the
/// overlap skips and holds; the book (when the ledger has one); the upgrade state.
type CountedBody = (
    Vec<u8>,
    Vec<(u32, u32, u64, u64, u64)>,
    Option<super::scheduler::BookWire>,
    UpgradeState,
);

/// The body of version 3 ([`CANCELS_SNAPSHOT_VERSION`]): version 2's parts, then per
/// `(component, position)` that cancelled a run the runs cancelled and the mark.
type CancelsBody = (
    Vec<u8>,
    Vec<(u32, u32, u64, u64, u64)>,
    Option<super::scheduler::BookWire>,
    UpgradeState,
    Vec<(u32, u32, u64, u64)>,
);

/// The counted form: magic, version, body, SHA-256 of the body.
type CountedFile = (u64, u32, Vec<u8>, [u8; 32]);

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
///
/// `P` is the store of the book's pages ([`MemPages`] by default, carried by the snapshot; see
/// [`LedgerScheduler::with_pages`] for a durable one).
pub struct CronLedger<S, P = MemPages> {
    state: S,
    registry: CronTableRegistry<S>,
    scheduler: Option<LedgerScheduler<S, P>>,
    /// Per `(component, position)`: runs, and what the entry's overlap policy diverted
    /// (replicated: in the digest and the snapshot).
    counts: BTreeMap<(u32, u32), EntryCounts>,
    /// Per `(component, position)` under `Overlap::CancelOther`: the runs it cancelled and
    /// the outbox index below which its records are not awaited (replicated: in the digest and
    /// the snapshot; the view its table passes read results through).
    cancels: CancelledRuns,
    /// Results applied to records of cancelled table runs (a metric: they change nothing).
    late_cancelled_results: u64,
    /// Notes of the actions run since the replica last took them (observation only: neither
    /// digested nor snapshotted); at most [`MAX_FIRE_NOTES`], the rest counted.
    notes: Vec<FireNote>,
    notes_dropped: u64,
    unknown_component_ticks: u64,
    table_errors: u64,
    /// Set when a table's schedule could not be saved, or at an upgrade this build must not
    /// pass: the ledger stopped (fail-stop).
    halted: Option<AppError>,
    /// The build's upgrades and the replicated upgrade state (`crate::schedule::upgrade`).
    upgrades: Upgrades<S>,
    /// Tables whose actions emit, with what one pass reserves ([`CronLedger::with_table_emits`]).
    table_emits: BTreeMap<u32, EmitBudget>,
    /// What one request of the state reserves ([`CronLedger::with_request_emits`]).
    request_emits: EmitBudget,
    /// Table passes held back because the outbox could not take their budget (a metric).
    held_passes: u64,
    /// Requests whose effects were voided because one was refused (a metric).
    voided_requests: u64,
}

impl<S, P> std::fmt::Debug for CronLedger<S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronLedger")
            .field("registry", &self.registry)
            .field("scheduler", &self.scheduler)
            .field("counts", &self.counts)
            .field("cancels", &self.cancels)
            .field("unknown_component_ticks", &self.unknown_component_ticks)
            .finish_non_exhaustive()
    }
}

impl<S: Application> CronLedger<S> {
    /// A ledger over `state` with the tables of `registry` (no schedule book yet).
    pub fn new(state: S, registry: CronTableRegistry<S>) -> Self {
        Self {
            state,
            registry,
            scheduler: None,
            counts: BTreeMap::new(),
            cancels: CancelledRuns::new(),
            late_cancelled_results: 0,
            notes: Vec::new(),
            notes_dropped: 0,
            unknown_component_ticks: 0,
            table_errors: 0,
            halted: None,
            upgrades: Upgrades::new(),
            table_emits: BTreeMap::new(),
            request_emits: EmitBudget::NONE,
            held_passes: 0,
            voided_requests: 0,
        }
    }
}

impl<S: Application, P: ReservedPages> CronLedger<S, P> {
    /// The same ledger with a schedule book (set up identically on every replica) whose pages
    /// are a store `Q` ([`MemPages`] from [`LedgerScheduler::new`], or any store from
    /// [`LedgerScheduler::with_pages`]).
    ///
    /// The book's handler set (names and versions) is declared in the registry
    /// ([`CronTableRegistry::declare_handlers`]), so it enters the setup digest and thus the
    /// ledger's digest: replicas built with different handlers disagree at once.
    pub fn with_scheduler<Q: ReservedPages>(
        mut self,
        scheduler: LedgerScheduler<S, Q>,
    ) -> CronLedger<S, Q> {
        self.registry.declare_handlers(
            scheduler.config().component,
            scheduler.handlers().manifest(),
        );
        CronLedger {
            state: self.state,
            registry: self.registry,
            scheduler: Some(scheduler),
            counts: self.counts,
            cancels: self.cancels,
            late_cancelled_results: self.late_cancelled_results,
            notes: self.notes,
            notes_dropped: self.notes_dropped,
            unknown_component_ticks: self.unknown_component_ticks,
            table_errors: self.table_errors,
            halted: self.halted,
            upgrades: self.upgrades,
            table_emits: self.table_emits,
            request_emits: self.request_emits,
            held_passes: self.held_passes,
            voided_requests: self.voided_requests,
        }
    }

    /// The same ledger with this build's upgrades (the migrations it carries, the past upgrades
    /// it knows, who may plan), configured identically on every replica running the build; the
    /// replicated upgrade state is kept. Every request and tick first passes the upgrade gate
    /// (`crate::schedule::upgrade`): a reached plan runs its migration here, once, or stops a
    /// build that does not carry it.
    pub fn with_upgrades(mut self, upgrades: Upgrades<S>) -> Self {
        self.upgrades = upgrades.configured_from(&mut self.upgrades);
        self
    }

    /// The same ledger with the actions of `component`'s cron table emitting into the ledger's
    /// one outbox (the book's, [`crate::ActionCtx::emit`]): every pass of that table reserves
    /// `budget` (records and bytes for all its actions together) before it starts, and waits,
    /// its entries still due, while the outbox cannot take it (counted:
    /// [`Self::held_passes`]). Configuration, identical on every replica (in the setup
    /// digest). A table not declared here cannot emit ([`crate::outbox::EmitError::NotReserved`]).
    pub fn with_table_emits(mut self, component: u32, budget: EmitBudget) -> Self {
        self.table_emits.insert(component, budget);
        self
    }

    /// The same ledger with its state's requests emitting into the one outbox
    /// ([`Effects::emit`]): each request reserves `budget` before it runs; with a full outbox
    /// its emits are refused ([`crate::outbox::EmitError::OutboxFull`], and with them every
    /// effect of the request), and likewise when the requesting client cannot take `budget`
    /// within its outbox quota ([`crate::outbox::EmitError::QuotaExceeded`], the book's
    /// [`crate::Policy::quota`]): the records a request emits are its client's. Configuration
    /// (in the setup digest).
    pub fn with_request_emits(mut self, budget: EmitBudget) -> Self {
        self.request_emits = budget;
        self
    }

    /// Table passes held back so far because the outbox could not take their budget.
    pub fn held_passes(&self) -> u64 {
        self.held_passes
    }

    /// Requests whose effects were all dropped because one of them was refused.
    pub fn voided_requests(&self) -> u64 {
        self.voided_requests
    }

    /// The build's upgrades and the replicated upgrade state.
    pub fn upgrades(&self) -> &Upgrades<S> {
        &self.upgrades
    }

    /// The upgrade gate at batch `seq` and agreed time `now_ms` (see [`Self::with_upgrades`]);
    /// a stop halts the ledger.
    fn upgrade_gate(&mut self, seq: u64, now_ms: Option<i64>) -> Result<(), AppError> {
        let result = self
            .upgrades
            .gate(seq, now_ms, &mut self.state, self.scheduler.as_mut());
        if let Err(e) = &result {
            self.halted.get_or_insert(e.clone());
        }
        result
    }

    /// The schedule book, if any.
    pub fn scheduler(&self) -> Option<&LedgerScheduler<S, P>> {
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

    /// The replicated counts of every table entry (and of the book, under its position) that
    /// ran or was diverted: runs, overlap skips and holds, by `(component, position)`.
    pub fn entry_counts(&self) -> &BTreeMap<(u32, u32), EntryCounts> {
        &self.counts
    }

    /// The replicated cancellations of table entries under `Overlap::CancelOther`: per
    /// `(component, position)` the runs it cancelled and the mark below which its records are
    /// not awaited ([`CancelledRuns`]). Empty while no run was cancelled.
    pub fn entry_cancels(&self) -> &CancelledRuns {
        &self.cancels
    }

    /// Results applied so far to records of table runs a cancellation left (each changed
    /// nothing for its entry; traced): a metric of this replica.
    pub fn late_cancelled_results(&self) -> u64 {
        self.late_cancelled_results
    }

    /// Whether any entry's overlap policy skipped or held something (the snapshot takes its
    /// counted form then, and the digest covers the overlap counts).
    fn has_overlap_counts(&self) -> bool {
        self.counts
            .values()
            .any(|c| c.overlap != EntryOverlapCounts::default())
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

impl<S: Application, P: ReservedPages + Send + 'static> CronLedger<S, P> {
    /// The snapshot in its counted form ([`COUNTED_SNAPSHOT_MAGIC`]).
    fn counted_snapshot(&self) -> Result<Vec<u8>, codec::WireError> {
        let rows: Vec<(u32, u32, u64, u64, u64)> = self
            .counts
            .iter()
            .map(|((c, p), n)| (*c, *p, n.fired, n.overlap.skipped, n.overlap.held))
            .collect();
        // Encoded as a `CountedBody` (the upgrade state by reference: the same bytes), or as a
        // `CancelsBody` once a table entry cancelled a run.
        let (version, body) = if self.cancels.is_empty() {
            let body = codec::encode(&(
                self.state.snapshot(),
                rows,
                self.scheduler.as_ref().map(LedgerScheduler::to_wire),
                self.upgrades.state(),
            ))?;
            (COUNTED_SNAPSHOT_VERSION, body)
        } else {
            let cancels: Vec<(u32, u32, u64, u64)> = self
                .cancels
                .iter()
                .map(|((c, p), e)| (c, p, e.cancelled, e.mark))
                .collect();
            let body = codec::encode(&(
                self.state.snapshot(),
                rows,
                self.scheduler.as_ref().map(LedgerScheduler::to_wire),
                self.upgrades.state(),
                cancels,
            ))?;
            (CANCELS_SNAPSHOT_VERSION, body)
        };
        let sum: [u8; 32] = crate::sha256::Sha256::digest(&body).into();
        let file: CountedFile = (COUNTED_SNAPSHOT_MAGIC, version, body, sum);
        codec::encode(&file)
    }

    /// [`Application::restore`] of a snapshot in the counted form: its checksum and version
    /// checked, every part decoded and validated, before anything changes. A body failing its
    /// checksum is refused loudly (an error event and [`AppError::BadSnapshot`]).
    fn restore_counted(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let bad = |e: String| AppError::BadSnapshot(e);
        let (_, version, body, sum): CountedFile = codec::decode(snapshot, snapshot.len())
            .map_err(|e| bad(format!("counted ledger snapshot: {e}")))?;
        if version != COUNTED_SNAPSHOT_VERSION && version != CANCELS_SNAPSHOT_VERSION {
            return Err(bad(format!(
                "counted ledger snapshot version {version}, this build reads \
                 {COUNTED_SNAPSHOT_VERSION} and {CANCELS_SNAPSHOT_VERSION}"
            )));
        }
        let actual: [u8; 32] = crate::sha256::Sha256::digest(&body).into();
        if actual != sum {
            tracing::error!(
                bytes = snapshot.len(),
                "cron ledger snapshot refused: its body fails its checksum"
            );
            return Err(bad("counted ledger snapshot: checksum mismatch".into()));
        }
        let (state, rows, wire, up, cancel_rows) = if version == COUNTED_SNAPSHOT_VERSION {
            let (state, rows, wire, up): CountedBody =
                codec::decode(&body, body.len()).map_err(|e| bad(e.to_string()))?;
            (state, rows, wire, up, Vec::new())
        } else {
            let parts: CancelsBody =
                codec::decode(&body, body.len()).map_err(|e| bad(e.to_string()))?;
            // A body of this version holds a cancellation (one state, one form).
            if parts.4.is_empty() {
                return Err(bad(format!(
                    "counted ledger snapshot version {version} without cancellations"
                )));
            }
            parts
        };
        let book = match (&self.scheduler, wire) {
            (Some(sched), Some(wire)) => {
                Some(LedgerScheduler::<S, P>::decode_wire(sched.config(), wire)?)
            }
            (None, None) => None,
            (Some(_), None) => return Err(bad("snapshot without the ledger's book".into())),
            (None, Some(_)) => return Err(bad("snapshot with a book this ledger lacks".into())),
        };
        let mut counts = BTreeMap::new();
        for (c, p, fired, skipped, held) in rows {
            let n = EntryCounts {
                fired,
                overlap: EntryOverlapCounts { skipped, held },
            };
            if counts.insert((c, p), n).is_some() {
                return Err(bad(format!("entry ({c}, {p}) counted twice")));
            }
        }
        let mut cancels = CancelledRuns::new();
        for (c, p, cancelled, mark) in cancel_rows {
            if !cancels.insert(c, p, EntryCancels { cancelled, mark }) {
                return Err(bad(format!(
                    "entry ({c}, {p}): cancellations listed twice or none"
                )));
            }
        }
        self.state.restore(&state)?;
        self.upgrades.set_state(up);
        self.counts = counts;
        self.cancels = cancels;
        if let (Some(sched), Some(parts)) = (&mut self.scheduler, book) {
            sched.install(parts)?;
        }
        Ok(())
    }
}

/// Whether a table error of a tick pass is a failed save of the table's schedule (the pass's
/// only page writes): fatal, unlike a refused table change, which leaves memory and pages alike.
fn is_save_failure(e: &TableError) -> bool {
    matches!(e, TableError::Persist(_) | TableError::RangeTooSmall { .. })
}

/// Fire notes a [`CronLedger`] keeps until the replica takes them (after every tick).
pub const MAX_FIRE_NOTES: usize = 4_096;

impl<S: Application, P: ReservedPages + Send + 'static> Application for CronLedger<S, P> {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        if let Err(e) = self.upgrade_gate(ctx.seq, ctx.agreed_time_ms) {
            return format!("err halted: {e}").into_bytes();
        }
        if let Some(req) = upgrade_request_of(payload) {
            return self.upgrades.execute(Principal::Client(client), req, ctx);
        }
        if let Some(book) = &mut self.scheduler {
            if let Some(upto) = super::scheduler::outbox_delivered_of(payload) {
                return book.trim_outbox(Principal::Client(client), upto);
            }
            if let Some(result) = crate::outbox::OutboxResult::from_payload(payload) {
                // A result for a record of a table run a cancellation left is applied to the
                // outbox as any other; it changes nothing for its entry (below the mark).
                let cancelled = result
                    .as_ref()
                    .ok()
                    .and_then(|r| Some((r.index, book.outbox().get(r.index)?.id)))
                    .filter(|(index, id)| self.cancels.covers(*index, id));
                let reply = book.apply_result(
                    &mut self.state,
                    Principal::Client(client),
                    result,
                    |s, record, outcome| s.on_outbox_result(record, outcome),
                );
                if let Some((index, id)) = cancelled
                    && reply.starts_with(b"ok result applied")
                {
                    self.late_cancelled_results = self.late_cancelled_results.saturating_add(1);
                    tracing::debug!(
                        index,
                        %id,
                        "outbox result of a cancelled table run: applied, awaited by nothing"
                    );
                }
                return reply;
            }
            if let Some(req) = book.request_of(payload) {
                return book.execute(ctx, Principal::Client(client), req);
            }
            // The state's own request: its emits and schedule requests commit with it, all or
            // nothing (`Effects`). Its records are the requesting client's, within its outbox
            // quota: checked now, before it runs (a client at its quota gets its emits refused,
            // and with them every effect of the request).
            let owner = Principal::Client(client);
            let emits = if self.request_emits.records == 0 {
                Emits::none()
            } else {
                match book.reserve(self.request_emits) {
                    Some(e) => e.charged_to(book.outbox(), owner, book.policy().quota_for(&owner)),
                    None => Emits::full(),
                }
            };
            let state = &mut self.state;
            let (reply, voided) = book.run_request(ctx, Principal::Client(client), emits, |fx| {
                state.execute_with(ctx, client, payload, fx)
            });
            if voided {
                self.voided_requests = self.voided_requests.saturating_add(1);
            }
            return reply;
        }
        self.state
            .execute_with(ctx, client, payload, &mut Effects::none())
    }

    fn digest(&self) -> Digest32 {
        self.digest_in(StateHash::Sha256)
    }

    fn digest_in(&self, hash: StateHash) -> Digest32 {
        // The replica's state digest adds the reserved pages (the persisted schedules); the
        // setup digest makes replicas that registered different tables visibly diverge; the
        // book (pages and outbox) is part of the ledger's own state.
        let mut h = StateHasher::new(hash);
        h.update(b"cron-ledger");
        h.update(self.state.digest_in(hash));
        h.update(self.registry.setup_digest());
        for ((c, p), n) in &self.counts {
            // One update per entry (taken after every block): the same bytes as component,
            // position and count fed one by one.
            let mut e = [0u8; 16];
            e[..4].copy_from_slice(&c.to_le_bytes());
            e[4..8].copy_from_slice(&p.to_le_bytes());
            e[8..].copy_from_slice(&n.fired.to_le_bytes());
            h.update(e);
        }
        // Only once an overlap policy diverted something: a ledger whose entries never were
        // keeps its digest (and its snapshot form).
        if self.has_overlap_counts() {
            h.update(b"table-entry-overlap");
            for ((c, p), n) in &self.counts {
                if n.overlap == EntryOverlapCounts::default() {
                    continue;
                }
                let mut e = [0u8; 24];
                e[..4].copy_from_slice(&c.to_le_bytes());
                e[4..8].copy_from_slice(&p.to_le_bytes());
                e[8..16].copy_from_slice(&n.overlap.skipped.to_le_bytes());
                e[16..].copy_from_slice(&n.overlap.held.to_le_bytes());
                h.update(e);
            }
        }
        // Only once an entry cancelled a run (`Overlap::CancelOther`).
        if !self.cancels.is_empty() {
            h.update(b"table-entry-cancel");
            for ((c, p), n) in self.cancels.iter() {
                let mut e = [0u8; 24];
                e[..4].copy_from_slice(&c.to_le_bytes());
                e[4..8].copy_from_slice(&p.to_le_bytes());
                e[8..16].copy_from_slice(&n.cancelled.to_le_bytes());
                e[16..].copy_from_slice(&n.mark.to_le_bytes());
                h.update(e);
            }
        }
        if let Some(book) = &self.scheduler {
            h.update(b"schedule-book");
            h.update(book.policy().digest());
            // The encoded wire form's bytes, streamed (no copy of the book per height).
            book.hash_wire_into(&mut h);
        }
        // Only once something was planned: a ledger without upgrades keeps its digest.
        if !self.upgrades.state().is_empty() {
            h.update(b"upgrades");
            h.update(self.upgrades.state().digest());
        }
        h.finalize()
    }

    fn snapshot(&self) -> Vec<u8> {
        if self.has_overlap_counts() || !self.cancels.is_empty() {
            return self.counted_snapshot().unwrap_or_default();
        }
        let fires: Vec<(u32, u32, u64)> = self
            .counts
            .iter()
            .map(|((c, p), n)| (*c, *p, n.fired))
            .collect();
        // Without a book the snapshot keeps its original two-part form; the upgrade state is a
        // last part, present once something was planned (older snapshots restore as before).
        let up = self.upgrades.state();
        match (&self.scheduler, up.is_empty()) {
            (None, true) => codec::encode(&(self.state.snapshot(), fires)),
            (None, false) => codec::encode(&(self.state.snapshot(), fires, up)),
            (Some(book), true) => codec::encode(&(self.state.snapshot(), fires, book.to_wire())),
            (Some(book), false) => {
                codec::encode(&(self.state.snapshot(), fires, book.to_wire(), up))
            }
        }
        .unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let bad = |e: String| AppError::BadSnapshot(e);
        if snapshot.get(..8) == Some(&COUNTED_SNAPSHOT_MAGIC.to_le_bytes()[..]) {
            return self.restore_counted(snapshot);
        }
        // Decode and validate everything before changing anything.
        type Fires = Vec<(u32, u32, u64)>;
        let len = snapshot.len();
        let (state, fires, book, up) =
            match &self.scheduler {
                None => match codec::decode::<(Vec<u8>, Fires, UpgradeState)>(snapshot, len) {
                    Ok((state, fires, up)) => (state, fires, None, up),
                    Err(_) => {
                        let (state, fires): (Vec<u8>, Fires) =
                            codec::decode(snapshot, len).map_err(|e| bad(e.to_string()))?;
                        (state, fires, None, UpgradeState::default())
                    }
                },
                Some(sched) => {
                    let (state, fires, wire, up) =
                        match codec::decode::<(Vec<u8>, Fires, BookWire, UpgradeState)>(
                            snapshot, len,
                        ) {
                            Ok(parts) => parts,
                            Err(_) => {
                                let (state, fires, wire): (Vec<u8>, Fires, BookWire) =
                                    codec::decode(snapshot, len).map_err(|e| bad(e.to_string()))?;
                                (state, fires, wire, UpgradeState::default())
                            }
                        };
                    let parts = LedgerScheduler::<S, P>::decode_wire(sched.config(), wire)?;
                    (state, fires, Some(parts), up)
                }
            };
        self.state.restore(&state)?;
        self.upgrades.set_state(up);
        self.counts = fires
            .into_iter()
            .map(|(c, p, n)| ((c, p), EntryCounts::from(n)))
            .collect();
        self.cancels = CancelledRuns::new();
        if let (Some(sched), Some(parts)) = (&mut self.scheduler, book) {
            sched.install(parts)?;
        }
        Ok(())
    }

    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        self.upgrade_gate(tick.bft_sequence_num, tick.agreed_time_ms)?;
        let mut book_ran = false;
        if let Some(book) = &mut self.scheduler
            && book.config().component == tick.component_id
        {
            let fired = book.on_tick(&tick, &mut self.state);
            let key = (tick.component_id, book.config().position);
            if !fired.is_empty() {
                let n = &mut self.counts.entry(key).or_default().fired;
                *n = n.saturating_add(fired.len() as u64);
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
        // A table declared emitting reserves its budget in the one outbox before the pass,
        // or the pass waits (its entries stay due) until the consumer trims the outbox.
        let mut emits = None;
        if let Some(budget) = self.table_emits.get(&tick.component_id)
            && self.registry.get(tick.component_id).is_some()
        {
            match self.scheduler.as_ref().map(|b| b.reserve(*budget)) {
                Some(Some(e)) => emits = Some(e),
                Some(None) => {
                    self.held_passes = self.held_passes.saturating_add(1);
                    tracing::warn!(
                        component = tick.component_id,
                        seq = tick.bft_sequence_num,
                        "cron table pass held back: the outbox cannot take its emit budget"
                    );
                    return Ok(());
                }
                // No book, no outbox: the actions' emits are refused (typed).
                None => {}
            }
        }
        // With a book, a table entry's overlap policy reads "has its previous run a result
        // yet" from the book's outbox, through the entries' cancellations (`CancelOther`);
        // without one there is no outbox to read, and an entry with a tracking policy is
        // reported (`TableError::NoResultView`).
        let evaluated = match self.scheduler.as_ref() {
            Some(book) => self.registry.evaluate_with_results(
                &tick,
                &mut self.state,
                pages,
                emits.as_mut(),
                &self.cancels.view(book.outbox()),
            ),
            None => self
                .registry
                .evaluate_emitting(&tick, &mut self.state, pages, emits.as_mut()),
        };
        match evaluated {
            Ok(outcome) => {
                if let (Some(e), Some(book)) = (emits, self.scheduler.as_mut())
                    && let Err(fatal) = book.commit_emits(e)
                {
                    self.halted.get_or_insert(fatal.clone());
                    return Err(fatal);
                }
                for d in &outcome.diverted {
                    let o = &mut self
                        .counts
                        .entry((tick.component_id, d.position))
                        .or_default()
                        .overlap;
                    match d.what {
                        Diversion::Skipped => o.skipped = o.skipped.saturating_add(1),
                        Diversion::Held => o.held = o.held.saturating_add(1),
                        // Kept with its mark below.
                        Diversion::Cancelled { .. } => {}
                    }
                }
                self.cancels.note(tick.component_id, &outcome.diverted);
                for f in &outcome.fired {
                    let n = &mut self
                        .counts
                        .entry((tick.component_id, f.position))
                        .or_default()
                        .fired;
                    *n = n.saturating_add(1);
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
                // A schedule the pass changed in memory but could not write to the pages would
                // leave the pages (the snapshot's and the digest's input) behind the memory:
                // a restored replica would diverge. Never carry on: fail-stop.
                if let Some(e) = outcome.errors.iter().find(|e| is_save_failure(e)) {
                    let fatal = AppError::Fatal(format!(
                        "component {}: schedule not saved at seq {}: {e}",
                        tick.component_id, tick.bft_sequence_num
                    ));
                    tracing::error!(
                        component = tick.component_id,
                        seq = tick.bft_sequence_num,
                        error = %e,
                        "cron table schedule not saved: ledger halts (fail-stop)"
                    );
                    self.halted.get_or_insert(fatal.clone());
                    return Err(fatal);
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

    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        self.registry
            .reload(pages)
            .map_err(|e| AppError::TickRejected(format!("reload: {e}")))
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        self.counts.iter().map(|(k, n)| (*k, n.fired)).collect()
    }

    fn halted(&self) -> Option<&AppError> {
        self.halted
            .as_ref()
            .or_else(|| self.scheduler.as_ref().and_then(|s| s.halted()))
    }

    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        out.append(&mut self.notes);
    }

    fn tick_components(&self) -> Vec<u32> {
        let mut components: Vec<u32> = self.registry.components().collect();
        components.extend(self.scheduler.as_ref().map(|s| s.config().component));
        components.extend(self.state.tick_components());
        components.sort_unstable();
        components.dedup();
        components
    }

    fn setup_digest(&self) -> Option<Digest32> {
        let mut h = crate::sha256::Sha256::new();
        h.update(b"cron-ledger-setup");
        h.update(self.registry.setup_digest());
        if let Some(book) = &self.scheduler {
            let c = book.config();
            h.update(c.component.to_le_bytes());
            h.update(c.position.to_le_bytes());
            h.update(book.policy().digest());
        }
        if let Some(d) = self.state.setup_digest() {
            h.update(d);
        }
        // Only when set: ledgers that emit from no table and no request keep their digest.
        for (c, b) in &self.table_emits {
            h.update(b"table-emits");
            h.update(c.to_le_bytes());
            h.update((b.records as u64).to_le_bytes());
            h.update((b.bytes as u64).to_le_bytes());
        }
        if self.request_emits != EmitBudget::NONE {
            h.update(b"request-emits");
            h.update((self.request_emits.records as u64).to_le_bytes());
            h.update((self.request_emits.bytes as u64).to_le_bytes());
        }
        if let Some(book) = &self.scheduler
            && let Some((records, bytes)) = book.emit_budget()
        {
            h.update(b"book-emits");
            h.update((records as u64).to_le_bytes());
            h.update((bytes as u64).to_le_bytes());
        }
        Some(h.finalize().into())
    }

    fn outbox(&self) -> Option<&crate::outbox::Outbox> {
        self.scheduler.as_ref().map(|s| s.outbox())
    }

    fn schedule_book(&self) -> Option<&crate::schedule::Scheduler> {
        self.scheduler.as_ref().map(|s| s.book())
    }

    /// The registry's entries with this ledger's replicated fire and overlap counts and its
    /// outbox's awaited records; `None` when no table is registered.
    fn table_entries(&self) -> Option<crate::schedule::query::TableEntries> {
        if self.registry.is_empty() {
            return None;
        }
        // Read through the cancellations: a cancelled run's records are not awaited.
        let view = self
            .scheduler
            .as_ref()
            .map(|s| self.cancels.view(s.outbox()));
        Some(crate::schedule::query::table_entries(
            &self.registry,
            &self.counts,
            view.as_ref().map(|v| v as &dyn PendingResults),
        ))
    }

    fn page_ranges(&self) -> Vec<crate::PageRange> {
        // The book and its outbox live in the scheduler's own store, not the host's pages.
        let mut ranges = self.registry.page_ranges();
        ranges.extend(self.state.page_ranges());
        ranges
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::outbox::EmitBudget;
    use crate::schedule::Overlap;
    use crate::{CronEntry, CronTable, PageAllocator, Periodic};

    /// A minimal ledger state: counts its requests.
    #[derive(Debug, Default)]
    pub(crate) struct KvLedger(u64);

    impl KvLedger {
        pub(crate) fn new() -> Self {
            Self(0)
        }
    }

    impl Application for KvLedger {
        fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
            self.0 += 1;
            Vec::new()
        }
        fn digest(&self) -> Digest32 {
            crate::sha256::Sha256::digest(self.0.to_le_bytes()).into()
        }
        fn snapshot(&self) -> Vec<u8> {
            self.0.to_le_bytes().to_vec()
        }
        fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
            let b =
                <[u8; 8]>::try_from(snapshot).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
            self.0 = u64::from_le_bytes(b);
            Ok(())
        }
    }

    /// A ledger whose one table (component 1) persists its periodic schedule (every 1 s) in
    /// pages 0..2.
    pub(crate) fn ledger() -> CronLedger<KvLedger> {
        let mut registry = CronTableRegistry::new();
        let range = PageAllocator::new(0, 2).allocate(2).unwrap();
        let mut table = CronTable::with_persistence(1, range, 4);
        table
            .add(CronEntry::<KvLedger>::periodic(
                0,
                Periodic::every_ms(1_000).unwrap(),
                |_| {},
            ))
            .unwrap();
        registry.register(table).unwrap();
        CronLedger::new(KvLedger::new(), registry)
    }

    /// A ledger with the table of [`ledger`] (component 1) and a book on component 2 (one
    /// schedule every second, created by client 5): the fixture's kind of ledger.
    fn book_ledger() -> CronLedger<KvLedger> {
        let cfg = crate::host::BookConfig {
            component: 2,
            position: 0,
            limits: crate::schedule::Limits::default(),
            book_pages: 16,
            outbox_pages: 2,
        };
        let mut h: crate::schedule::Handlers<KvLedger> = crate::schedule::Handlers::new();
        assert!(h.register("job", |ctx| ctx.state.0 += 10));
        ledger().with_scheduler(LedgerScheduler::new(cfg, h))
    }

    /// Drives `l` as the fixture was driven: the schedule created, then ticks of both
    /// components at 1 s .. 3 s (and a request of the state).
    fn drive(l: &mut CronLedger<KvLedger>) {
        let mut pages = MemPages::new(4_096, 2);
        if l.scheduler.is_some() {
            let create = crate::codec::to_blob(&crate::schedule::ScheduleRequest::Create(
                crate::schedule::NewSchedule::new(
                    "job",
                    crate::schedule::Timing::Every {
                        period_ms: 1_000,
                        start_ms: Some(1_000),
                    },
                ),
            ))
            .unwrap();
            let ctx = ExecContext {
                seq: 1,
                agreed_time_ms: Some(0),
            };
            assert!(
                l.execute(ctx, ClientId([5; 32]), &create)
                    .starts_with(b"ok")
            );
        }
        for (seq, t) in [(2u64, 1_000i64), (3, 2_000), (4, 3_000)] {
            l.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
            if l.scheduler.is_some() {
                l.on_tick(Tick::new(2, seq, Some(t)), &mut pages).unwrap();
            }
        }
        let ctx = ExecContext {
            seq: 5,
            agreed_time_ms: Some(3_500),
        };
        l.execute(ctx, ClientId([6; 32]), b"kv");
    }

    /// A ledger with a book on component 1 (position 9: the outbox its entries emit into) and
    /// a table on component 1 whose entry 0 emits a record every second under `overlap`.
    fn overlap_ledger(overlap: Overlap) -> CronLedger<KvLedger> {
        let mut registry = CronTableRegistry::new();
        let range = PageAllocator::new(0, 2).allocate(2).unwrap();
        let mut table = CronTable::with_persistence(1, range, 4);
        let entry = CronEntry::<KvLedger>::periodic(0, Periodic::every_ms(1_000).unwrap(), |ctx| {
            let _ = ctx.emit("ping", b"p".to_vec());
        });
        table.add(entry.with_overlap(overlap).unwrap()).unwrap();
        registry.register(table).unwrap();
        let cfg = crate::host::BookConfig {
            component: 1,
            position: 9,
            limits: crate::schedule::Limits::default(),
            book_pages: 16,
            outbox_pages: 2,
        };
        CronLedger::new(KvLedger::new(), registry)
            .with_scheduler(LedgerScheduler::new(cfg, crate::schedule::Handlers::new()))
            .with_table_emits(1, EmitBudget::new(1, 128))
    }

    /// Ticks of component 1 at 1 s, 2 s and 3 s: the first run's record never gets a result.
    fn tick_three(l: &mut CronLedger<KvLedger>) {
        let mut pages = MemPages::new(4_096, 2);
        for (seq, t) in [(1u64, 1_000i64), (2, 2_000), (3, 3_000)] {
            l.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
        }
    }

    /// Issue 27: a table entry's overlap skips and holds are replicated counts of the ledger,
    /// next to its fire count: the numbers the table counts per process, in the read API, in
    /// the digest, and carried by the snapshot (counted form) into a restored replica.
    #[test]
    fn overlap_skips_and_holds_are_replicated_and_survive_a_snapshot() {
        for (overlap, skipped, held) in [(Overlap::Skip, 2, 0), (Overlap::BufferOne, 0, 2)] {
            let mut l = overlap_ledger(overlap);
            tick_three(&mut l);
            let want = EntryCounts {
                fired: 1,
                overlap: EntryOverlapCounts { skipped, held },
            };
            assert_eq!(l.entry_counts().get(&(1, 0)), Some(&want), "{overlap:?}");
            assert_eq!(l.fires().get(&(1, 0)), Some(&1));
            // What the table counted in this process (which never restarted).
            let pc = l.registry().get(1).unwrap().policy_counters();
            assert_eq!((pc.skipped, pc.held), (skipped, held), "{overlap:?}");
            let entries = l.table_entries().unwrap();
            assert_eq!(entries.summaries()[0].overlap_counts, Some(want.overlap));
            assert_eq!(entries.summaries()[0].fired, 1);
            let snap = l.snapshot();
            assert_eq!(snap[..8], COUNTED_SNAPSHOT_MAGIC.to_le_bytes());
            // State transfer: a fresh replica restored from it holds the same counts.
            let mut r = overlap_ledger(overlap);
            r.restore(&snap).unwrap();
            assert_eq!(r.entry_counts(), l.entry_counts());
            assert_eq!(r.digest(), l.digest());
            assert_eq!(r.snapshot(), snap);
            // The counts are digested: the same ledger without them digests otherwise, and
            // snapshots in the old form.
            let mut uncounted = overlap_ledger(overlap);
            uncounted.restore(&snap).unwrap();
            uncounted.counts.get_mut(&(1, 0)).unwrap().overlap = EntryOverlapCounts::default();
            assert_ne!(uncounted.digest(), l.digest(), "{overlap:?}");
            assert_ne!(
                uncounted.snapshot()[..8],
                COUNTED_SNAPSHOT_MAGIC.to_le_bytes()
            );
        }
    }

    /// A counted snapshot whose body or checksum was altered, of another version, or cut
    /// short, is refused loudly (`BadSnapshot`) and changes nothing.
    #[test]
    fn a_damaged_counted_snapshot_is_refused_and_changes_nothing() {
        let mut l = overlap_ledger(Overlap::Skip);
        tick_three(&mut l);
        let snap = l.snapshot();
        let fresh = overlap_ledger(Overlap::Skip).digest();
        let refused = |bytes: &[u8], what: &str| {
            let mut r = overlap_ledger(Overlap::Skip);
            let e = r.restore(bytes).unwrap_err();
            assert!(
                matches!(&e, AppError::BadSnapshot(m) if m.contains(what)),
                "{what}: {e:?}"
            );
            assert_eq!(r.digest(), fresh, "{what}: nothing changed");
            assert!(r.entry_counts().is_empty());
        };
        // Magic (8), version (4), body length (8), body, checksum (32).
        let n = snap.len();
        for at in [20, n / 2, n - 33, n - 1] {
            let mut bad = snap.clone();
            bad[at] ^= 0x10;
            refused(&bad, "checksum mismatch");
        }
        let (magic, _, body, sum): CountedFile = codec::decode(&snap, n).unwrap();
        let other = codec::encode(&(magic, CANCELS_SNAPSHOT_VERSION + 1, body, sum)).unwrap();
        refused(&other, "version 4");
        refused(&snap[..n - 1], "counted ledger snapshot");
        // A counted snapshot of a ledger with a book, into one without.
        let mut bookless = ledger();
        let e = bookless.restore(&snap).unwrap_err();
        assert!(
            matches!(&e, AppError::BadSnapshot(m) if m.contains("book")),
            "{e:?}"
        );
    }

    /// Hex of `b`.
    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s = s.trim();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Snapshots of [`ledger`] and [`book_ledger`] driven by [`drive`], written by the code of
    /// `e056996` (before the overlap counts), and their digests then.
    const V1_TABLE: &str = include_str!("../../tests/fixtures/ledger_v1_table.snapshot.hex");
    const V1_BOOK: &str = include_str!("../../tests/fixtures/ledger_v1_book.snapshot.hex");
    const V1_TABLE_DIGEST: &str =
        "1a759caa2396efd4e0d85c0c30d869d13730ecec1f4202c5b67be1645d19572a";
    const V1_BOOK_DIGEST: &str = "0dd8cbab80f13f8b062817782ef2d33364b28f94a7471c0662432cbb307d18c6";

    /// Persisted bytes are forever: a snapshot in the form before the overlap counts restores
    /// to the digest it had, with zero overlap counts, and a ledger nothing diverted still
    /// writes exactly those bytes and that digest (so no pinned digest moves).
    #[test]
    fn snapshots_written_before_the_overlap_counts_restore() {
        let cases = [
            (V1_TABLE, ledger(), ledger(), V1_TABLE_DIGEST, 1usize),
            (V1_BOOK, book_ledger(), book_ledger(), V1_BOOK_DIGEST, 2),
        ];
        for (fixture, mut restored, mut driven, digest, fired) in cases {
            let bytes = unhex(fixture);
            restored.restore(&bytes).unwrap();
            assert_eq!(hex(&restored.digest()), digest);
            assert_eq!(restored.fires().len(), fired);
            assert!(restored.fires().values().all(|&n| n == 3));
            assert!(
                restored
                    .entry_counts()
                    .values()
                    .all(|c| c.overlap == EntryOverlapCounts::default())
            );
            assert_eq!(restored.snapshot(), bytes, "written back in the same form");
            drive(&mut driven);
            assert_eq!(hex(&driven.digest()), digest);
            assert_eq!(driven.snapshot(), bytes);
        }
    }

    /// A counted snapshot (version 2, skips and holds) of [`overlap_ledger`] (`Skip`) driven
    /// by [`tick_three`], written by the code of `88094a8` (before table entries' cancellations),
    /// and the digests then of that ledger and of the `BufferOne` one driven alike.
    const V2_COUNTED: &str = include_str!("../../tests/fixtures/ledger_v2_counted.snapshot.hex");
    const V2_SKIP_DIGEST: &str = "be237e0425ca61d7fbb46752a7119a0496743197b9c58e615950d6a196939b4e";
    const V2_BUFFER_ONE_DIGEST: &str =
        "53ca9b2321caf657049cb0f17fa0848245c0b7b4c44c927c7f1f2c44c2d63e73";

    /// Persisted bytes are forever: a counted snapshot written before the cancellations
    /// restores to the digest it had, with no cancellation, and is written back byte for byte;
    /// ledgers whose entries skip or hold (and never cancel) still digest as they did.
    #[test]
    fn counted_snapshots_written_before_the_cancellations_restore() {
        let bytes = unhex(V2_COUNTED);
        let mut restored = overlap_ledger(Overlap::Skip);
        restored.restore(&bytes).unwrap();
        assert_eq!(hex(&restored.digest()), V2_SKIP_DIGEST);
        assert!(restored.entry_cancels().is_empty());
        assert_eq!(
            restored
                .entry_counts()
                .get(&(1, 0))
                .map(|c| c.overlap.skipped),
            Some(2)
        );
        assert_eq!(restored.snapshot(), bytes, "written back in the same form");
        for (overlap, digest) in [
            (Overlap::Skip, V2_SKIP_DIGEST),
            (Overlap::BufferOne, V2_BUFFER_ONE_DIGEST),
        ] {
            let mut driven = overlap_ledger(overlap);
            tick_three(&mut driven);
            assert_eq!(hex(&driven.digest()), digest, "{overlap:?}");
            if overlap == Overlap::Skip {
                assert_eq!(driven.snapshot(), bytes);
            }
        }
    }

    const CONSUMER: super::super::app::ClientId = super::super::app::ClientId([42; 32]);

    /// [`overlap_ledger`] under `CancelOther`, whose book takes results from [`CONSUMER`]; the
    /// entry emits `records` records per run.
    fn cancel_ledger(records: usize) -> CronLedger<KvLedger> {
        let mut registry = CronTableRegistry::new();
        let range = PageAllocator::new(0, 2).allocate(2).unwrap();
        let mut table = CronTable::with_persistence(1, range, 4);
        let entry =
            CronEntry::<KvLedger>::periodic(0, Periodic::every_ms(1_000).unwrap(), move |ctx| {
                for _ in 0..records {
                    let _ = ctx.emit("ping", b"p".to_vec());
                }
            });
        table
            .add(entry.with_overlap(Overlap::CancelOther).unwrap())
            .unwrap();
        registry.register(table).unwrap();
        let cfg = crate::host::BookConfig {
            component: 1,
            position: 9,
            limits: crate::schedule::Limits::default(),
            book_pages: 16,
            outbox_pages: 2,
        };
        let book = LedgerScheduler::new(cfg, crate::schedule::Handlers::new())
            .with_policy(crate::Policy::default().with_outbox_consumer(CONSUMER));
        CronLedger::new(KvLedger::new(), registry)
            .with_scheduler(book)
            .with_table_emits(1, EmitBudget::new(4, 512))
    }

    /// The consumer's dead letter for outbox record `index`, through consensus.
    fn answer(l: &mut CronLedger<KvLedger>, seq: u64, index: u64) -> Vec<u8> {
        let id = l.outbox().unwrap().get(index).unwrap().id;
        let p = crate::outbox::OutboxResult::dead_letter(index, id, "done")
            .to_payload()
            .unwrap();
        let ctx = ExecContext {
            seq,
            agreed_time_ms: Some(0),
        };
        l.execute(ctx, CONSUMER, &p)
    }

    fn awaiting(l: &CronLedger<KvLedger>) -> bool {
        l.table_entries().unwrap().summaries()[0].awaiting
    }

    /// Regression (issue 27, `CancelOther` on table entries): through the ledger, a cancelled
    /// run's late result is applied but neither releases the run that cancelled it nor, after
    /// that run's own results, makes the entry await again; the cancellations are replicated
    /// (digest, snapshot form version 3, restored equal).
    #[test]
    fn a_cancelled_table_runs_late_result_neither_releases_nor_reopens() {
        let mut l = cancel_ledger(1);
        let mut pages = MemPages::new(4_096, 2);
        let f = l.outbox().unwrap().next_index();
        let mut tick = |l: &mut CronLedger<KvLedger>, seq: u64| {
            l.on_tick(Tick::new(1, seq, Some(seq as i64 * 1_000)), &mut pages)
                .unwrap();
        };
        // Run A (record f), then run B cancels it (record f + 1).
        tick(&mut l, 1);
        let plain = l.digest();
        tick(&mut l, 2);
        let cancels = |l: &CronLedger<KvLedger>| l.entry_cancels().get(1, 0);
        assert_eq!(
            cancels(&l),
            Some(EntryCancels {
                cancelled: 1,
                mark: f + 1
            })
        );
        assert!(awaiting(&l));
        // A's late result: applied, B still awaited.
        assert!(answer(&mut l, 10, f).starts_with(b"ok result applied"));
        assert_eq!(l.late_cancelled_results(), 1);
        assert!(
            awaiting(&l),
            "a cancelled run's result does not release the new run"
        );
        // So run C cancels B (record f + 2) rather than running unannounced.
        tick(&mut l, 3);
        assert_eq!(cancels(&l).map(|c| (c.cancelled, c.mark)), Some((2, f + 2)));
        // C's result: nothing awaited, though B's record has none; B's late result then
        // reopens nothing, and run D runs with nothing to cancel.
        assert!(answer(&mut l, 11, f + 2).starts_with(b"ok result applied"));
        assert!(!awaiting(&l), "a cancelled run is not awaited");
        assert!(answer(&mut l, 12, f + 1).starts_with(b"ok result applied"));
        assert!(!awaiting(&l), "a late result never reopens the await");
        assert_eq!(l.late_cancelled_results(), 2);
        tick(&mut l, 4);
        assert_eq!(cancels(&l).map(|c| c.cancelled), Some(2));
        assert_eq!(l.fires().get(&(1, 0)), Some(&4));
        assert_eq!(l.registry().get(1).unwrap().policy_counters().cancelled, 2);
        // Replicated: the snapshot takes version 3 and restores equal.
        let snap = l.snapshot();
        assert_eq!(snap[..8], COUNTED_SNAPSHOT_MAGIC.to_le_bytes());
        let (_, version, _, _): CountedFile = codec::decode(&snap, snap.len()).unwrap();
        assert_eq!(version, CANCELS_SNAPSHOT_VERSION);
        let mut r = cancel_ledger(1);
        r.restore(&snap).unwrap();
        assert_eq!(r.entry_cancels(), l.entry_cancels());
        assert_eq!(r.digest(), l.digest());
        assert_eq!(r.snapshot(), snap);
        // The cancellations are digested.
        let mut uncancelled = cancel_ledger(1);
        uncancelled.restore(&snap).unwrap();
        uncancelled.cancels = CancelledRuns::new();
        assert_ne!(uncancelled.digest(), l.digest());
        assert_ne!(plain, l.digest());
    }

    /// A version 3 body whose cancellations repeat an entry, count none, or are missing is
    /// refused and changes nothing.
    #[test]
    fn a_bad_cancellations_body_is_refused() {
        let mut l = cancel_ledger(1);
        let mut pages = MemPages::new(4_096, 2);
        for seq in 1..=3 {
            l.on_tick(Tick::new(1, seq, Some(seq as i64 * 1_000)), &mut pages)
                .unwrap();
        }
        let snap = l.snapshot();
        let (magic, version, body, _): CountedFile = codec::decode(&snap, snap.len()).unwrap();
        let (state, rows, book, up, cancels): CancelsBody =
            codec::decode(&body, body.len()).unwrap();
        assert_eq!(cancels.len(), 1);
        let fresh = cancel_ledger(1).digest();
        let with = |c: Vec<(u32, u32, u64, u64)>| {
            let body =
                codec::encode(&(state.clone(), rows.clone(), book.clone(), up.clone(), c)).unwrap();
            let sum: [u8; 32] = crate::sha256::Sha256::digest(&body).into();
            codec::encode(&(magic, version, body, sum)).unwrap()
        };
        let twice = vec![cancels[0], cancels[0]];
        let none = vec![(1, 0, 0, 5)];
        for (bytes, what) in [
            (with(twice), "listed twice"),
            (with(none), "listed twice or none"),
            (with(Vec::new()), "without cancellations"),
        ] {
            let mut r = cancel_ledger(1);
            let e = r.restore(&bytes).unwrap_err();
            assert!(
                matches!(&e, AppError::BadSnapshot(m) if m.contains(what)),
                "{what}: {e:?}"
            );
            assert_eq!(r.digest(), fresh, "{what}: nothing changed");
        }
    }

    /// Regression (issue 10): a failed write of a table's schedule during a tick was only
    /// logged, so the pages (snapshot, digest) fell behind the memory. It is now fatal: the
    /// tick fails with `AppError::Fatal` and the ledger reports itself halted.
    #[test]
    fn failed_schedule_save_in_a_tick_is_fatal() {
        let mut ok = ledger();
        let mut pages = MemPages::new(4_096, 2);
        ok.on_tick(Tick::new(1, 1, Some(1_000)), &mut pages)
            .unwrap();
        assert!(ok.halted().is_none());
        assert_eq!(ok.fires().get(&(1, 0)), Some(&1));

        // The same tick over pages that refuse every write.
        let mut l = ledger();
        let mut broken = crate::pages::CrashAfter::new(MemPages::new(4_096, 2), 0);
        let err = l.on_tick(Tick::new(1, 1, Some(1_000)), &mut broken);
        assert!(matches!(err, Err(AppError::Fatal(_))), "{err:?}");
        assert!(matches!(l.halted(), Some(AppError::Fatal(_))));
        assert_eq!(l.table_errors(), 1);
    }

    /// The ledger's digest is its stream fed field by field, as before its fire counts were
    /// gathered one update per entry (the bytes must not change), under both hash functions.
    #[test]
    fn digest_is_the_field_by_field_stream() {
        let reference = |l: &CronLedger<KvLedger>, hash: StateHash| {
            let mut h = StateHasher::new(hash);
            h.update(b"cron-ledger");
            h.update(l.state.digest_in(hash));
            h.update(l.registry.setup_digest());
            for ((c, p), n) in &l.counts {
                h.update(c.to_le_bytes());
                h.update(p.to_le_bytes());
                h.update(n.fired.to_le_bytes());
            }
            assert!(l.scheduler.is_none() && l.upgrades.state().is_empty());
            h.finalize()
        };
        let mut l = ledger();
        let mut pages = MemPages::new(4_096, 2);
        for t in 1..=4 {
            for hash in [StateHash::Sha256, StateHash::Blake3] {
                assert_eq!(l.digest_in(hash), reference(&l, hash), "tick {t}");
            }
            l.on_tick(Tick::new(1, t, Some(1_000 * t as i64)), &mut pages)
                .unwrap();
            l.counts
                .insert((t as u32 + 1, 7), (0x0102_0304_0506_0708 * t).into());
        }
        assert!(l.counts.len() > 2);
        for hash in [StateHash::Sha256, StateHash::Blake3] {
            assert_eq!(l.digest_in(hash), reference(&l, hash));
        }
    }
}
