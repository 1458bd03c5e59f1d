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
pub(crate) mod tests;
