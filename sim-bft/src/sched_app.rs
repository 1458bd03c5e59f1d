//! [`ScheduledLedger`]: an [`Application`] whose schedules are replicated data.
//!
//! Clients send encoded [`ccron::schedule::ScheduleRequest`]s (create, upsert, replace, pause,
//! resume, cancel); the ledger applies them with the batch's sequence number and agreed time,
//! and every committed tick of its component runs what is due through the registered handlers.
//! The demo handler `expire-order` marks an order expired in the ledger state and emits one
//! outbox record per run (the idempotent external effect, keyed by occurrence id).
//!
//! With [`SchedAppConfig::puts_as_orders`], the simulator's stock client traffic (key-value
//! `Put`s and `Delete`s) becomes order traffic: a `Put` of key `k` places (or re-places) order `k`
//! and upserts its expiry task keyed `k`, a `Delete` pays it (cancels the task by key).
//!
//! Persistence: the schedule book lives in the ledger's own reserved pages (the sharded
//! multi-page codec of [`Scheduler::save`]), which the application snapshot carries; restart and
//! state transfer restore them and rebuild the book with [`Scheduler::load`].

use std::collections::BTreeMap;

use ccron::codec;
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, Misfire, NewSchedule, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{MemPages, PageRange, Tick};
use sha2::{Digest, Sha256};

use crate::app::{AppError, Application, ExecContext, KvOp};
use crate::crypto::Digest32;
use crate::node::ClientId;
use crate::protocol::codec as wire;

/// The handler every replica registers.
pub const EXPIRE_ORDER: &str = "expire-order";

/// Configuration (identical on every replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedAppConfig {
    /// The component whose ticks run the schedules.
    pub component: u32,
    /// The book's limits.
    pub limits: Limits,
    /// Reserved pages of the book (4 KiB each).
    pub book_pages: u32,
    /// Expiry delay of an order placed by a `Put`.
    pub expiry_ms: i64,
    /// Whether key-value `Put`/`Delete` requests place and pay orders (see the module docs).
    pub puts_as_orders: bool,
}

impl Default for SchedAppConfig {
    fn default() -> Self {
        Self {
            component: 1,
            limits: Limits {
                persist_shards: 4,
                ..Limits::default()
            },
            book_pages: 40,
            expiry_ms: 3_000,
            puts_as_orders: false,
        }
    }
}

/// The replicated ledger state the handlers change: how often each order expired.
pub type Orders = BTreeMap<String, u32>;

/// What a snapshot decodes to.
#[derive(Debug)]
pub struct SchedState {
    /// The book's reserved pages.
    pub pages: MemPages,
    /// The schedule book.
    pub book: Scheduler,
    /// The orders and their expiry counts.
    pub orders: Orders,
    /// The outbox.
    pub outbox: Outbox,
}

/// What the snapshot holds: the book's pages, the ledger state and the outbox.
type SnapshotWire = (Vec<(u32, Vec<u8>)>, Vec<(String, u32)>, Vec<u8>);

/// The ledger (see the module documentation).
pub struct ScheduledLedger {
    cfg: SchedAppConfig,
    book: Scheduler,
    handlers: Handlers<Orders>,
    orders: Orders,
    outbox: Outbox,
    pages: MemPages,
    /// Handler runs on this replica (for reports; not replicated state).
    runs: u64,
}

impl std::fmt::Debug for ScheduledLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledLedger")
            .field("schedules", &self.book.len())
            .field("orders", &self.orders.len())
            .finish_non_exhaustive()
    }
}

fn handlers() -> Handlers<Orders> {
    let mut handlers: Handlers<Orders> = Handlers::new();
    handlers.register(EXPIRE_ORDER, |ctx| {
        let order = String::from_utf8_lossy(ctx.payload).into_owned();
        *ctx.state.entry(order.clone()).or_insert(0) += 1;
        // The external effect (tell the shop), deduplicated downstream by occurrence id.
        if let Err(e) = ctx.emit("shop.cancel", order.into_bytes()) {
            tracing::warn!(error = %e, "expire-order: emit failed");
        }
    });
    handlers
}

impl ScheduledLedger {
    /// An empty ledger.
    pub fn new(cfg: SchedAppConfig) -> Self {
        Self {
            cfg,
            book: Scheduler::new(cfg.component, cfg.limits),
            handlers: handlers(),
            orders: Orders::new(),
            outbox: Outbox::new(OutboxLimits::default()),
            pages: MemPages::new(4_096, cfg.book_pages),
            runs: 0,
        }
    }

    /// The expiry task of order `order`, `delay_ms` after admission, keyed by the order.
    pub fn expiry(order: &str, delay_ms: i64) -> NewSchedule {
        NewSchedule::new(EXPIRE_ORDER, Timing::AfterMs(delay_ms))
            .with_key(order)
            .with_payload(order.as_bytes().to_vec())
            .with_misfire(Misfire::FireOnce)
    }

    /// The request payload carrying `request`.
    ///
    /// # Errors
    /// The request does not encode (never for well-formed requests).
    pub fn payload(request: &ScheduleRequest) -> Result<Vec<u8>, codec::CodecError> {
        codec::to_blob(request)
    }

    /// Decodes a snapshot of a ledger configured with `cfg`.
    ///
    /// # Errors
    /// [`AppError::BadSnapshot`].
    pub fn decode_snapshot(cfg: SchedAppConfig, bytes: &[u8]) -> Result<SchedState, AppError> {
        let bad = |e: String| AppError::BadSnapshot(e);
        let (pages, orders, outbox): SnapshotWire =
            codec::from_blob(bytes).map_err(|e| bad(e.to_string()))?;
        let mut mem = MemPages::new(4_096, cfg.book_pages);
        mem.restore(&pages).map_err(|e| bad(e.to_string()))?;
        let range = Self::range(cfg)?;
        let book = Scheduler::load(cfg.component, cfg.limits, &mem, range)
            .map_err(|e| bad(e.to_string()))?;
        let outbox =
            Outbox::decode(&outbox, OutboxLimits::default()).map_err(|e| bad(e.to_string()))?;
        Ok(SchedState {
            pages: mem,
            book,
            orders: orders.into_iter().collect(),
            outbox,
        })
    }

    fn range(cfg: SchedAppConfig) -> Result<PageRange, AppError> {
        PageRange::new(0, cfg.book_pages)
            .ok_or_else(|| AppError::BadSnapshot("no pages for the schedule book".into()))
    }

    fn persist(&mut self) {
        let result = Self::range(self.cfg).and_then(|range| {
            self.book
                .save(&mut self.pages, range)
                .map_err(|e| AppError::TickRejected(e.to_string()))
        });
        if let Err(e) = result {
            tracing::error!(error = %e, "schedule book not saved");
        }
    }

    fn request_of(&self, payload: &[u8]) -> Result<ScheduleRequest, String> {
        if let Ok(req) = codec::from_blob::<ScheduleRequest>(payload) {
            return Ok(req);
        }
        if self.cfg.puts_as_orders {
            match wire::decode::<KvOp>(payload, payload.len()) {
                Ok(KvOp::Put { key, .. }) => {
                    let order = String::from_utf8_lossy(&key).into_owned();
                    return Ok(ScheduleRequest::Upsert(Self::expiry(
                        &order,
                        self.cfg.expiry_ms,
                    )));
                }
                Ok(KvOp::Delete { key }) => {
                    let order = String::from_utf8_lossy(&key).into_owned();
                    return Ok(ScheduleRequest::Cancel(Target::Key(order)));
                }
                _ => {}
            }
        }
        Err("malformed request".into())
    }
}

impl Application for ScheduledLedger {
    fn execute(&mut self, ctx: ExecContext, _client: ClientId, payload: &[u8]) -> Vec<u8> {
        let reply = match self.request_of(payload) {
            Err(e) => format!("err {e}"),
            Ok(req) => match self
                .book
                .apply(req, &self.handlers, ctx.seq, ctx.agreed_time_ms)
            {
                Ok(id) => format!("ok {}", id.unwrap_or(0)),
                Err(e) => format!("err {e}"),
            },
        };
        self.persist();
        reply.into_bytes()
    }

    fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"scheduled-ledger");
        h.update(self.snapshot());
        h.finalize().into()
    }

    fn snapshot(&self) -> Vec<u8> {
        let wire: SnapshotWire = (
            self.pages.snapshot(),
            self.orders.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            self.outbox.encode().unwrap_or_default(),
        );
        codec::to_blob(&wire).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let s = Self::decode_snapshot(self.cfg, snapshot)?;
        self.pages = s.pages;
        self.book = s.book;
        self.orders = s.orders;
        self.outbox = s.outbox;
        Ok(())
    }

    fn on_tick(&mut self, tick: Tick, _pages: &mut MemPages) -> Result<(), AppError> {
        if tick.component_id != self.cfg.component {
            return Err(AppError::UnknownComponent(tick.component_id));
        }
        let report = self.book.on_tick(
            &tick,
            &mut self.orders,
            &mut self.handlers,
            &mut self.outbox,
        );
        self.runs = self.runs.saturating_add(report.fired.len() as u64);
        if !report.errors.is_empty() {
            tracing::warn!(errors = ?report.errors, "scheduler tick errors");
        }
        self.persist();
        Ok(())
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        [((self.cfg.component, 0), self.runs)].into()
    }
}
