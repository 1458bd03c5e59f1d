//! What a replica executes: one [`Application`] for user requests *and* ticks.
//!
//! Committed batches execute in sequence order, and the requests of one batch in batch order:
//! a user request goes to [`Application::execute`], a tick to [`Application::on_tick`] with the
//! batch's sequence number and agreed time and the reserved pages. Because both reach the same
//! object, a ledger's cron actions can change the ledger's own state: [`CronLedger`] holds a
//! state `S` and a `ccron::CronTableRegistry<S>` and evaluates the registry on every tick, and
//! optionally a schedule book ([`crate::sched_app::LedgerScheduler`]: schedules as replicated
//! data, created and changed by client requests, whose handlers change the same state).
//!
//! Deterministic demos: [`KvLedger`], a key-value ledger whose digest covers its whole state,
//! and [`TickCounter`], a [`TickExecutor`] recording every tick in the reserved pages (so that
//! checkpoints and state transfer visibly carry pages); [`WithTicks`] joins an application and a
//! separate tick executor into one [`Application`].

use std::collections::BTreeMap;

use bincode::{Decode, Encode};
use ccron::{CronTableRegistry, MemPages, PageId, RegistryError, ReservedPages, Tick};
use sha2::{Digest, Sha256};

use crate::crypto::Digest32;
use crate::node::{ClientId, Millis};
use crate::protocol::codec;
use crate::sched_app::{BookWire, LedgerScheduler};

/// Errors of applications and tick executors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppError {
    /// A snapshot does not decode or violates the application's invariants.
    #[error("bad snapshot: {0}")]
    BadSnapshot(String),
    /// A tick could not be handled; the batch still executes on.
    #[error("tick rejected: {0}")]
    TickRejected(String),
    /// A tick named a component without a cron table (no state is created for it).
    #[error("no cron table for component {0}")]
    UnknownComponent(u32),
    /// The reserved pages refused an operation.
    #[error("pages: {0}")]
    Pages(#[from] ccron::PagesError),
}

/// Where a request executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecContext {
    /// Sequence number of the batch.
    pub seq: u64,
    /// Agreed time of the batch, when the time service is on.
    pub agreed_time_ms: Option<Millis>,
}

/// A deterministic replicated application.
///
/// Every method must be a pure function of the application state and its arguments: replicas
/// that execute the same requests in the same order must end with equal digests and snapshots.
pub trait Application: Send {
    /// Executes one user request and returns its result (sent back to the client).
    /// Malformed payloads must yield an error *result*, never a panic.
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8>;
    /// Digest of the whole state.
    fn digest(&self) -> Digest32;
    /// Canonical encoding of the whole state.
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the state with a snapshot; on error the state is unchanged.
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError>;

    /// Handles a committed tick (sequence number and agreed time of its batch); replicated
    /// state it keeps outside the application state lives in `pages`. The default rejects every
    /// tick: an application without cron tables has no component to tick.
    fn on_tick(&mut self, tick: Tick, pages: &mut MemPages) -> Result<(), AppError> {
        let _ = pages;
        Err(AppError::UnknownComponent(tick.component_id))
    }

    /// Reloads whatever it caches from `pages` (after state transfer or restart).
    fn reload(&mut self, pages: &MemPages) -> Result<(), AppError> {
        let _ = pages;
        Ok(())
    }

    /// Cron actions run so far, per `(component, position)` (for reports). Empty by default;
    /// [`CronLedger`] keeps them in its replicated state, so they agree across honest replicas
    /// at the same sequence number, restarts and state transfers included.
    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        BTreeMap::new()
    }
}

/// An [`Application`] for user requests joined with a separate [`TickExecutor`] for ticks.
pub struct WithTicks {
    app: Box<dyn Application>,
    ticks: Box<dyn TickExecutor>,
}

impl WithTicks {
    /// Joins `app` and `ticks`.
    pub fn new(app: Box<dyn Application>, ticks: Box<dyn TickExecutor>) -> Self {
        Self { app, ticks }
    }
}

impl Application for WithTicks {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        self.app.execute(ctx, client, payload)
    }

    fn digest(&self) -> Digest32 {
        self.app.digest()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.app.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        self.app.restore(snapshot)
    }

    fn on_tick(&mut self, tick: Tick, pages: &mut MemPages) -> Result<(), AppError> {
        self.ticks.on_tick(tick, pages)
    }

    fn reload(&mut self, pages: &MemPages) -> Result<(), AppError> {
        self.app.reload(pages)?;
        self.ticks.reload(pages)
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        self.app.fires()
    }
}

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
}

impl<S: Application> Application for CronLedger<S> {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        if let Some(book) = &mut self.scheduler {
            if let Some(upto) = crate::sched_app::outbox_delivered_of(payload) {
                return book.trim_outbox(upto);
            }
            if let Some(req) = book.request_of(payload) {
                return book.execute(ctx, req);
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
            let runs = book.on_tick(&tick, &mut self.state);
            let key = (tick.component_id, book.config().position);
            if runs > 0 {
                *self.fires.entry(key).or_insert(0) += runs;
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
}

/// Executes committed ticks apart from the application (joined to one by [`WithTicks`]; a ledger
/// whose cron actions change its own state uses [`CronLedger`] instead).
pub trait TickExecutor: Send {
    /// Handles a committed tick; replicated state it keeps lives in `pages`.
    fn on_tick(&mut self, tick: Tick, pages: &mut MemPages) -> Result<(), AppError>;
    /// Reloads whatever it caches from `pages` (after state transfer or restart).
    fn reload(&mut self, pages: &MemPages) -> Result<(), AppError> {
        let _ = pages;
        Ok(())
    }
}

/// An operation of the [`KvLedger`] (the payload of a user request, encoded with the codec).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum KvOp {
    /// Sets `key` to `value`; the result is the previous value, if any.
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Reads `key`.
    Get {
        /// Key.
        key: Vec<u8>,
    },
    /// Removes `key`; the result is the removed value, if any.
    Delete {
        /// Key.
        key: Vec<u8>,
    },
}

impl KvOp {
    /// The request payload for this operation.
    pub fn to_payload(&self) -> Vec<u8> {
        codec::encode(self).unwrap_or_default()
    }
}

/// Result byte prefix of a [`KvLedger`] operation: `0` found/ok with value following, `1` absent,
/// `2` malformed request.
pub mod kv_result {
    /// Success with a value following.
    pub const VALUE: u8 = 0;
    /// Success, no value.
    pub const NONE: u8 = 1;
    /// The payload did not decode.
    pub const MALFORMED: u8 = 2;
}

/// A deterministic key-value ledger.
///
/// Its digest is SHA-256 over the entry count and an additive multiset hash (the sum modulo
/// 2^256 of SHA-256 over each entry), maintained incrementally so that a batch costs O(its
/// requests), not O(state). Demo grade: additive hashes over 256 bits are fine for detecting
/// divergence and corruption, not for adversarially chosen multisets of many entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvLedger {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    sum: [u64; 4],
}

fn entry_hash(key: &[u8], value: &[u8]) -> [u64; 4] {
    let mut h = Sha256::new();
    h.update((key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(value);
    let d: [u8; 32] = h.finalize().into();
    let mut limbs = [0u64; 4];
    for (i, limb) in limbs.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[i * 8..i * 8 + 8]);
        *limb = u64::from_le_bytes(b);
    }
    limbs
}

fn add256(a: &mut [u64; 4], b: [u64; 4]) {
    let mut carry = false;
    for i in 0..4 {
        let (s1, c1) = a[i].overflowing_add(b[i]);
        let (s2, c2) = s1.overflowing_add(u64::from(carry));
        a[i] = s2;
        carry = c1 || c2;
    }
}

fn sub256(a: &mut [u64; 4], b: [u64; 4]) {
    let mut borrow = false;
    for i in 0..4 {
        let (s1, c1) = a[i].overflowing_sub(b[i]);
        let (s2, c2) = s1.overflowing_sub(u64::from(borrow));
        a[i] = s2;
        borrow = c1 || c2;
    }
}

impl KvLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries.get(key).map(Vec::as_slice)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the ledger is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Option<Vec<u8>> {
        add256(&mut self.sum, entry_hash(&key, &value));
        let old = self.entries.insert(key.clone(), value);
        if let Some(old) = &old {
            sub256(&mut self.sum, entry_hash(&key, old));
        }
        old
    }

    fn delete(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let old = self.entries.remove(key);
        if let Some(old) = &old {
            sub256(&mut self.sum, entry_hash(key, old));
        }
        old
    }
}

fn result(v: Option<Vec<u8>>) -> Vec<u8> {
    match v {
        Some(mut v) => {
            v.insert(0, kv_result::VALUE);
            v
        }
        None => vec![kv_result::NONE],
    }
}

impl Application for KvLedger {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, payload: &[u8]) -> Vec<u8> {
        match codec::decode::<KvOp>(payload, payload.len()) {
            Ok(KvOp::Put { key, value }) => result(self.put(key, value)),
            Ok(KvOp::Get { key }) => result(self.entries.get(&key).cloned()),
            Ok(KvOp::Delete { key }) => result(self.delete(&key)),
            Err(_) => vec![kv_result::MALFORMED],
        }
    }

    fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"kv-ledger");
        h.update((self.entries.len() as u64).to_le_bytes());
        for limb in self.sum {
            h.update(limb.to_le_bytes());
        }
        h.finalize().into()
    }

    fn snapshot(&self) -> Vec<u8> {
        let entries: Vec<(&Vec<u8>, &Vec<u8>)> = self.entries.iter().collect();
        codec::encode(&entries).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = codec::decode(snapshot, snapshot.len())
            .map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        let mut fresh = KvLedger::new();
        for (k, v) in entries {
            if fresh.put(k, v).is_some() {
                return Err(AppError::BadSnapshot("duplicate key".into()));
            }
        }
        *self = fresh;
        Ok(())
    }
}

/// Per-component tick record kept by [`TickCounter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct TickRecord {
    /// Component.
    pub component: u32,
    /// Ticks executed for it.
    pub count: u64,
    /// Sequence number of the last one.
    pub last_seq: u64,
    /// Agreed time of the last one.
    pub last_time_ms: Option<Millis>,
}

/// A demo [`TickExecutor`]: counts ticks per component in reserved pages
/// `first_page..first_page + pages` (component `c` in page `first_page + c % pages`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickCounter {
    first_page: PageId,
    pages: u32,
}

impl TickCounter {
    /// A counter using pages `first_page..first_page + pages` (at least one page).
    pub fn new(first_page: PageId, pages: u32) -> Self {
        Self {
            first_page,
            pages: pages.max(1),
        }
    }

    fn page_of(&self, component: u32) -> PageId {
        self.first_page.saturating_add(component % self.pages)
    }

    /// The records stored for `component`'s page.
    pub fn records(pages: &MemPages, page: PageId) -> Result<Vec<TickRecord>, AppError> {
        match pages.load(page)? {
            None => Ok(Vec::new()),
            Some(b) => codec::decode(b, b.len()).map_err(|e| AppError::BadSnapshot(e.to_string())),
        }
    }

    /// The record of `component`, if it ever ticked.
    pub fn record(&self, pages: &MemPages, component: u32) -> Option<TickRecord> {
        Self::records(pages, self.page_of(component))
            .ok()?
            .into_iter()
            .find(|r| r.component == component)
    }
}

impl TickExecutor for TickCounter {
    fn on_tick(&mut self, tick: Tick, pages: &mut MemPages) -> Result<(), AppError> {
        let page = self.page_of(tick.component_id);
        let mut recs = Self::records(pages, page)?;
        match recs.iter_mut().find(|r| r.component == tick.component_id) {
            Some(r) => {
                r.count += 1;
                r.last_seq = tick.bft_sequence_num;
                r.last_time_ms = tick.agreed_time_ms;
            }
            None => {
                recs.push(TickRecord {
                    component: tick.component_id,
                    count: 1,
                    last_seq: tick.bft_sequence_num,
                    last_time_ms: tick.agreed_time_ms,
                });
                recs.sort_by_key(|r| r.component);
            }
        }
        let bytes = codec::encode(&recs).map_err(|e| AppError::TickRejected(e.to_string()))?;
        pages.save(page, &bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: ExecContext = ExecContext {
        seq: 1,
        agreed_time_ms: None,
    };

    #[test]
    fn kv_digest_is_order_independent_and_tracks_state() {
        let mut a = KvLedger::new();
        let mut b = KvLedger::new();
        let put = |k: &str, v: &str| {
            KvOp::Put {
                key: k.into(),
                value: v.into(),
            }
            .to_payload()
        };
        a.execute(CTX, 0, &put("x", "1"));
        a.execute(CTX, 0, &put("y", "2"));
        b.execute(CTX, 0, &put("y", "2"));
        assert_ne!(a.digest(), b.digest());
        b.execute(CTX, 0, &put("x", "0"));
        assert_ne!(a.digest(), b.digest());
        assert_eq!(b.execute(CTX, 0, &put("x", "1")), b"\x000".to_vec());
        assert_eq!(a.digest(), b.digest());
        let del = KvOp::Delete { key: "x".into() }.to_payload();
        a.execute(CTX, 0, &del);
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.execute(CTX, 0, b"\xff\xff"), vec![kv_result::MALFORMED]);
        let mut c = KvLedger::new();
        c.restore(&b.snapshot()).unwrap();
        assert_eq!(c, b);
        assert!(c.restore(b"junk").is_err());
        assert_eq!(c, b);
    }

    #[test]
    fn tick_counter_records_in_pages() {
        let mut pages = MemPages::new(4096, 4);
        let mut t = TickCounter::new(1, 3);
        t.on_tick(Tick::new(5, 9, Some(100)), &mut pages).unwrap();
        t.on_tick(Tick::new(5, 10, Some(101)), &mut pages).unwrap();
        t.on_tick(Tick::new(2, 10, Some(101)), &mut pages).unwrap();
        let r = t.record(&pages, 5).unwrap();
        assert_eq!((r.count, r.last_seq, r.last_time_ms), (2, 10, Some(101)));
        assert_eq!(t.record(&pages, 2).unwrap().count, 1);
        assert!(t.record(&pages, 3).is_none());
    }
}
