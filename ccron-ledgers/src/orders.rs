//! [`ScheduledLedger`]: the `--ledger orders` demo, a [`CronLedger`] whose schedule book holds
//! order-expiry tasks.
//!
//! [`ScheduledLedger`] is a [`CronLedger`] over [`OrderState`] with no tables and a book
//! ([`LedgerScheduler`]) whose handler `expire-order` marks an order expired and emits one outbox
//! record per run (the idempotent external effect, keyed by occurrence id).
//! With [`SchedAppConfig::puts_as_orders`], the simulator's stock client traffic (key-value
//! `Put`s and `Delete`s) becomes order traffic: a `Put` of key `k` places (or re-places) order `k`
//! and upserts its expiry task keyed `k`, a `Delete` pays it (cancels the task by key).
//!
//! # Keys are the client's own
//!
//! Under [`KeySpace::PerClient`] (the default) every name a client uses is in its own namespace,
//! prefixed with its authenticated client id ([`own_key`]): the schedule keys and the payloads
//! of the schedule requests it sends ([`own_request`]), hence the order names the handlers
//! count. Two clients placing `order-7` place two orders, `1/order-7` and `2/order-7`; no client
//! can take, cancel or count another's (a client naming `2/order-7` gets `1/2/order-7`). An
//! admin addresses another client's schedule by id. [`KeySpace::Shared`] is the layout before
//! (one namespace, each key owned by its first creator), kept to replay logs recorded under it;
//! the two are told apart by the setup digest.

use std::collections::BTreeMap;

use ccron::codec;
use ccron::outbox::Outbox;
use ccron::schedule::{
    Handlers, Limits, Misfire, NewSchedule, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{CronTableRegistry, MemPages, ReservedPages, Tick};
use sha2::{Digest, Sha256};

use super::cron_ledger::CronLedger;
use super::kv::{KeySpace, KvOp};
use super::scheduler::{BookConfig, LedgerScheduler, ResultReaction};

mod namespace;
use ccron::host::ClientId;
use ccron::host::Digest32;
use ccron::host::app::{AppError, Application, ExecContext};
use ccron::host::wire;
pub use namespace::{legacy_key, own_key, own_request, own_request_in};

/// The handler every replica registers.
pub const EXPIRE_ORDER: &str = "expire-order";
/// Configuration of the `--ledger orders` demo (identical on every replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedAppConfig {
    /// The component whose ticks run the schedules.
    pub component: u32,
    /// The book's limits.
    pub limits: Limits,
    /// Reserved pages of the book (4 KiB each).
    pub book_pages: u32,
    /// Reserved pages of the outbox (4 KiB each; see [`BookConfig::outbox_pages`]).
    pub outbox_pages: u32,
    /// Expiry delay of an order placed by a `Put`.
    pub expiry_ms: i64,
    /// Whether key-value `Put`/`Delete` requests place and pay orders (see the module docs).
    pub puts_as_orders: bool,
    /// With [`Self::puts_as_orders`]: about one `Put` in eight (by a hash of its key) installs
    /// one of [`INSTALLED_ZONES`] (chosen by the hash) instead of placing an order: zone
    /// installs in the simulator's workload (`--zone-installs`). Installing zones is
    /// admin-only, so this also makes user client 0 the book's admin ([`ZONE_ADMIN`]): its
    /// installs reach admission (and its size check), the other clients' are denied.
    pub zone_installs: bool,
    /// Whose names keys are ([`KeySpace::PerClient`] by default; see the module
    /// documentation).
    pub keys: KeySpace,
}

/// The user client that [`SchedAppConfig::zone_installs`] makes the book's admin.
pub const ZONE_ADMIN: u64 = 0;

/// The IANA zones `zone_installs` traffic installs (Berlin alone fits the 40-page book's
/// one-page zones part; with New York it does not).
pub const INSTALLED_ZONES: [&str; 3] = ["Europe/Berlin", "America/New_York", "Asia/Tokyo"];

/// The zone a `Put` of `key` installs under `zone_installs`, if it does.
fn zone_install_of(key: &[u8]) -> Option<ScheduleRequest> {
    let h = Sha256::digest(key);
    if h[0] % 8 != 0 {
        return None;
    }
    let name = INSTALLED_ZONES[usize::from(h[1]) % INSTALLED_ZONES.len()];
    ccron::cron::ZoneRules::from_iana(name)
        .ok()
        .map(ScheduleRequest::InstallZone)
}

impl Default for SchedAppConfig {
    fn default() -> Self {
        Self {
            component: 1,
            limits: Limits::default(),
            book_pages: 40,
            outbox_pages: 64,
            expiry_ms: 3_000,
            puts_as_orders: false,
            zone_installs: false,
            keys: KeySpace::PerClient,
        }
    }
}

/// The replicated ledger state the handlers change: how often each order expired.
pub type Orders = BTreeMap<String, u32>;

/// The orders demo's ledger state as an [`Application`]: requests that are not schedule
/// requests are malformed here (the book takes every valid one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderState(pub Orders);

impl Application for OrderState {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, _payload: &[u8]) -> Vec<u8> {
        b"err malformed request".to_vec()
    }

    fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"orders");
        h.update(self.snapshot());
        h.finalize().into()
    }

    fn snapshot(&self) -> Vec<u8> {
        let v: Vec<(&String, &u32)> = self.0.iter().collect();
        wire::encode(&v).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let v: Vec<(String, u32)> = wire::decode(snapshot, snapshot.len())
            .map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        let orders: Orders = v.iter().cloned().collect();
        if orders.len() != v.len() {
            return Err(AppError::BadSnapshot("duplicate order".into()));
        }
        self.0 = orders;
        Ok(())
    }
}

/// What a snapshot of the orders demo decodes to.
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

/// The `--ledger orders` demo (see the module documentation): one [`CronLedger`] over
/// [`OrderState`] whose schedule book holds the order-expiry tasks.
pub struct ScheduledLedger {
    inner: CronLedger<OrderState>,
    cfg: SchedAppConfig,
}

impl std::fmt::Debug for ScheduledLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledLedger")
            .field("ledger", &self.inner)
            .finish()
    }
}

/// The demo's handlers: `expire-order` counts the expiry and emits `shop.cancel`.
///
/// The handler changes the state only after its one fallible step (the emit), so a failed run
/// has nothing to roll back: the handler set keeps the default (no state rollback), and a run
/// that fails is retried or dead-lettered by its schedule's run policy with the state
/// untouched.
pub fn order_handlers() -> Handlers<OrderState> {
    let mut handlers: Handlers<OrderState> = Handlers::new();
    handlers.register(EXPIRE_ORDER, |ctx| {
        let order = String::from_utf8_lossy(ctx.payload).into_owned();
        // The external effect (tell the shop), deduplicated downstream by occurrence id. It
        // cannot meet a full outbox: the book runs a handler only when the outbox can take a
        // record of the run's emit bound. A refused emit (a record over that bound) is a
        // typed error of the tick, counted by the book, the same on every replica, and fails
        // the run (dead-lettered: the order does not count as expired, the shop was not told).
        ctx.emit(SHOP_CANCEL, order.clone().into_bytes())?;
        *ctx.state.0.entry(order).or_insert(0) += 1;
        Ok(())
    });
    handlers
}

/// The effect `expire-order` emits (the payment service cancels the order).
pub const SHOP_CANCEL: &str = "shop.cancel";

/// The answer body with which the payment service confirms a cancellation
/// ([`ScheduledLedger::with_payment_confirmation`]).
pub const PAYMENT_CONFIRMED: &[u8] = b"confirmed";

/// Handlers for [`ScheduledLedger::with_payment_confirmation`]: `expire-order` only asks the
/// payment service (emits `shop.cancel`); the order is marked expired by
/// [`payment_reaction`] when the service confirms.
pub fn confirming_order_handlers() -> Handlers<OrderState> {
    let mut handlers: Handlers<OrderState> = Handlers::new();
    handlers.register(EXPIRE_ORDER, |ctx| {
        // A refused emit fails the run (see `order_handlers`); an order is only marked
        // expired on a confirmation.
        ctx.emit(SHOP_CANCEL, ctx.payload.to_vec())?;
        Ok(())
    });
    handlers
}

/// The orders ledger's reaction to a result: a `shop.cancel` answered [`PAYMENT_CONFIRMED`]
/// marks its order expired (counts it); any other answer or a dead letter leaves the order as
/// it is (the operator sees the dead letter; the order is not marked expired unconfirmed).
pub fn payment_reaction() -> ResultReaction<OrderState> {
    Box::new(|state, record, outcome| {
        let confirmed = matches!(outcome, ccron::outbox::ResultOutcome::Answer(body) if body == PAYMENT_CONFIRMED);
        if record.handler == SHOP_CANCEL && confirmed {
            let order = String::from_utf8_lossy(&record.payload).into_owned();
            *state.0.entry(order).or_insert(0) += 1;
        } else {
            tracing::info!(id = %record.id, handler = %record.handler, "order not marked expired: no confirmation");
        }
    })
}

impl ScheduledLedger {
    /// An empty ledger.
    pub fn new(cfg: SchedAppConfig) -> Self {
        Self::build(cfg, order_handlers(), None)
    }

    /// An empty ledger whose orders are marked expired only when the payment service confirms:
    /// `expire-order` emits `shop.cancel`, and the result request that client `consumer` (the
    /// outbox consumer) sends back runs [`payment_reaction`] once per record. Answers are
    /// believed only when signed by a worker key registered for `shop.cancel`: this one
    /// registers none (only dead letters apply); see
    /// [`ScheduledLedger::with_payment_confirmation_policy`].
    pub fn with_payment_confirmation(cfg: SchedAppConfig, consumer: ClientId) -> Self {
        Self::with_payment_confirmation_policy(
            cfg,
            ccron::Policy::default().with_outbox_consumer(consumer),
        )
    }

    /// [`ScheduledLedger::with_payment_confirmation`] under `policy`: its outbox consumer, its
    /// chain id and the payment workers' keys ([`ccron::Policy::with_worker_key`] for
    /// [`SHOP_CANCEL`]).
    pub fn with_payment_confirmation_policy(cfg: SchedAppConfig, policy: ccron::Policy) -> Self {
        Self::build(
            cfg,
            confirming_order_handlers(),
            Some((policy, payment_reaction())),
        )
    }

    fn build(
        cfg: SchedAppConfig,
        handlers: Handlers<OrderState>,
        results: Option<(ccron::Policy, ResultReaction<OrderState>)>,
    ) -> Self {
        let book_cfg = BookConfig {
            component: cfg.component,
            position: 0,
            limits: cfg.limits,
            book_pages: cfg.book_pages,
            outbox_pages: cfg.outbox_pages,
        };
        let mut book = LedgerScheduler::new(book_cfg, handlers);
        // Per client, `execute` maps key-value traffic itself (it knows the client).
        if cfg.puts_as_orders && cfg.keys == KeySpace::Shared {
            let expiry_ms = cfg.expiry_ms;
            let zones = cfg.zone_installs;
            book = book.with_translator(Box::new(move |payload| {
                match wire::decode::<KvOp>(payload, payload.len()) {
                    Ok(KvOp::Put { key, .. }) if zones && zone_install_of(&key).is_some() => {
                        zone_install_of(&key)
                    }
                    Ok(KvOp::Put { key, .. }) => {
                        let order = String::from_utf8_lossy(&key).into_owned();
                        Some(ScheduleRequest::Upsert(Self::expiry(&order, expiry_ms)))
                    }
                    Ok(KvOp::Delete { key }) => {
                        let order = String::from_utf8_lossy(&key).into_owned();
                        Some(ScheduleRequest::Cancel(Target::Key(order)))
                    }
                    _ => None,
                }
            }));
        }
        let (mut policy, reaction) = match results {
            Some((policy, reaction)) => (policy, Some(reaction)),
            None => (ccron::Policy::default(), None),
        };
        if cfg.zone_installs {
            policy = policy.with_admin(ccron::ClientId::from_index(ZONE_ADMIN));
        }
        if let Some(reaction) = reaction {
            book = book.with_result_reaction(reaction);
        }
        if policy != ccron::Policy::default() {
            book = book.with_policy(policy);
        }
        Self {
            inner: CronLedger::new(OrderState::default(), CronTableRegistry::new())
                .with_scheduler(book),
            cfg,
        }
    }

    /// What `client`'s `payload` asks of the book under [`KeySpace::PerClient`], with its names
    /// in the client's namespace (see the module documentation), or `None` when it is not a
    /// schedule request (nor, with [`SchedAppConfig::puts_as_orders`], a `Put` or `Delete`).
    fn own_request_of(&self, client: ClientId, payload: &[u8]) -> Option<ScheduleRequest> {
        // A name the client has only under its 64-bit id (a book migrated from layout 9) is
        // resolved there (see `namespace`).
        let book = self.inner.scheduler().map(|s| s.book());
        let exists = |key: &str| book.is_some_and(|b| b.id_of(key).is_some());
        if let Ok(req) = codec::from_blob::<ScheduleRequest>(payload) {
            return Some(own_request_in(client, req, &exists));
        }
        if !self.cfg.puts_as_orders {
            return None;
        }
        match wire::decode::<KvOp>(payload, payload.len()) {
            Ok(KvOp::Put { key, .. })
                if self.cfg.zone_installs && zone_install_of(&key).is_some() =>
            {
                zone_install_of(&key)
            }
            Ok(KvOp::Put { key, .. }) => {
                let order = String::from_utf8_lossy(&key).into_owned();
                let expiry = Self::expiry(&order, self.cfg.expiry_ms);
                Some(own_request_in(
                    client,
                    ScheduleRequest::Upsert(expiry),
                    &exists,
                ))
            }
            Ok(KvOp::Delete { key }) => {
                let order = String::from_utf8_lossy(&key).into_owned();
                Some(own_request_in(
                    client,
                    ScheduleRequest::Cancel(Target::Key(order)),
                    &exists,
                ))
            }
            _ => None,
        }
    }

    /// The ledger.
    pub fn ledger(&self) -> &CronLedger<OrderState> {
        &self.inner
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
        let mut ledger = Self::new(cfg);
        ledger.restore(bytes)?;
        let book = ledger
            .inner
            .scheduler()
            .ok_or_else(|| AppError::BadSnapshot("no schedule book".into()))?;
        Ok(SchedState {
            pages: book.pages().clone(),
            book: book.book().clone(),
            orders: ledger.inner.state().0.clone(),
            outbox: book.outbox().clone(),
        })
    }
}

impl Application for ScheduledLedger {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        if self.cfg.keys == KeySpace::PerClient
            && let Some(req) = self.own_request_of(client, payload)
        {
            return match Self::payload(&req) {
                Ok(p) => self.inner.execute(ctx, client, &p),
                // A request that decoded re-encodes (within the blob limit but for the prefix).
                Err(e) => format!("err {e}").into_bytes(),
            };
        }
        self.inner.execute(ctx, client, payload)
    }

    fn digest(&self) -> Digest32 {
        self.inner.digest()
    }

    fn snapshot(&self) -> Vec<u8> {
        self.inner.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        self.inner.restore(snapshot)
    }

    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        self.inner.on_tick(tick, pages)
    }

    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        self.inner.reload(pages)
    }

    fn fires(&self) -> BTreeMap<(u32, u32), u64> {
        self.inner.fires()
    }

    fn halted(&self) -> Option<&AppError> {
        self.inner.halted()
    }

    fn take_fire_notes(&mut self, out: &mut Vec<ccron::host::FireNote>) {
        self.inner.take_fire_notes(out);
    }

    fn page_ranges(&self) -> Vec<ccron::PageRange> {
        self.inner.page_ranges()
    }

    fn tick_components(&self) -> Vec<u32> {
        self.inner.tick_components()
    }

    fn setup_digest(&self) -> Option<Digest32> {
        let inner = self.inner.setup_digest();
        match self.cfg.keys {
            // The layout before per-client keys keeps its digest.
            KeySpace::Shared => inner,
            KeySpace::PerClient => {
                let mut h = Sha256::new();
                h.update(b"orders-keys-per-client-v1");
                h.update(inner.unwrap_or_default());
                Some(h.finalize().into())
            }
        }
    }

    fn outbox(&self) -> Option<&ccron::outbox::Outbox> {
        self.inner.outbox()
    }

    fn schedule_book(&self) -> Option<&ccron::schedule::Scheduler> {
        self.inner.schedule_book()
    }

    fn table_entries(&self) -> Option<ccron::schedule::query::TableEntries> {
        self.inner.table_entries()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u64) -> ClientId {
        ClientId::from_index(n)
    }

    use crate::scheduler::{outbox_delivered_of, outbox_delivered_payload};
    use ccron::PageRange;
    use ccron::cron::ZoneRules;
    use ccron::{CronEntry, CronTable, Periodic};

    const BOOK: u32 = 3;
    /// The outbox consumer's client id in the test ledgers.
    const CONSUMER: ClientId = ClientId([42; 32]);
    /// An admin's client id in the test ledgers.
    const ADMIN: ClientId = ClientId([77; 32]);

    fn ctx(seq: u64, t: i64) -> ExecContext {
        ExecContext {
            seq,
            agreed_time_ms: Some(t),
        }
    }

    /// A ledger with a cron table (component 1, every second: count) and a schedule book
    /// (component 3) whose handler changes the same state.
    fn ledger() -> CronLedger<OrderState> {
        let mut registry = CronTableRegistry::new();
        let mut table =
            CronTable::<OrderState>::with_persistence(1, PageRange::new(0, 1).unwrap(), 4);
        table
            .add(CronEntry::periodic(
                0,
                Periodic::every_ms(1_000).unwrap(),
                |ctx: &mut ccron::ActionCtx<'_, OrderState>| {
                    *ctx.state.0.entry("table".into()).or_insert(0) += 1
                },
            ))
            .unwrap();
        registry.register(table).unwrap();
        let cfg = BookConfig {
            component: BOOK,
            position: 0,
            limits: Limits::default(),
            book_pages: 9,
            outbox_pages: 3,
        };
        CronLedger::new(OrderState::default(), registry).with_scheduler(
            LedgerScheduler::new(cfg, order_handlers()).with_policy(
                ccron::Policy::default()
                    .with_outbox_consumer(CONSUMER)
                    .with_admin(ADMIN),
            ),
        )
    }

    fn req(r: &ScheduleRequest) -> Vec<u8> {
        ScheduledLedger::payload(r).unwrap()
    }

    /// An order-expiry schedule every `period_ms`, from time 0.
    fn every_ms(period_ms: i64) -> NewSchedule {
        NewSchedule::new(
            EXPIRE_ORDER,
            Timing::Every {
                period_ms,
                start_ms: Some(0),
            },
        )
    }

    #[test]
    fn a_consumer_progress_request_trims_the_outbox_on_every_replica_alike() {
        let mut a = ledger();
        let mut pages = MemPages::new(4_096, 4);
        let every = every_ms(1_000).with_payload(b"o".to_vec());
        a.execute(ctx(1, 0), c(0), &req(&ScheduleRequest::Create(every)));
        for (seq, t) in (2..7).zip((0..5).map(|s| s * 1_000)) {
            a.on_tick(Tick::new(BOOK, seq, Some(t)), &mut pages)
                .unwrap();
        }
        let outbox = |l: &CronLedger<OrderState>| {
            let o = l.scheduler().unwrap().outbox();
            (o.first_index(), o.len())
        };
        assert_eq!(outbox(&a), (1, 5));
        // A stranger's progress report, and the consumer's past the head, are rejected and
        // trim nothing (issue 10: any client could drop every undelivered effect).
        let digest = a.digest();
        let denied = a.execute(ctx(8, 5_000), c(0), &outbox_delivered_payload(u64::MAX));
        assert!(
            String::from_utf8_lossy(&denied).contains("may not report outbox progress"),
            "{}",
            String::from_utf8_lossy(&denied)
        );
        let above = a.execute(ctx(8, 5_000), CONSUMER, &outbox_delivered_payload(6));
        assert!(
            String::from_utf8_lossy(&above).contains("past the outbox head 5"),
            "{}",
            String::from_utf8_lossy(&above)
        );
        assert_eq!(outbox(&a), (1, 5));
        assert_eq!(a.digest(), digest);
        assert_eq!(a.scheduler().unwrap().denied(), 2);
        // The consumer delivered records 1..=3: they go, at this point of the log.
        assert_eq!(
            a.execute(ctx(8, 5_000), CONSUMER, &outbox_delivered_payload(3)),
            b"ok trimmed 3"
        );
        assert_eq!(outbox(&a), (4, 2));
        // Repeating or reporting older progress changes nothing.
        assert_eq!(
            a.execute(ctx(9, 5_000), CONSUMER, &outbox_delivered_payload(2)),
            b"ok trimmed 0"
        );
        // A restored replica (snapshot plus pages) holds the same trimmed outbox.
        let mut b = ledger();
        b.restore(&a.snapshot()).unwrap();
        b.reload(&pages).unwrap();
        assert_eq!(outbox(&b), (4, 2));
        assert_eq!(b.digest(), a.digest());
        assert_eq!(
            a.execute(ctx(10, 5_000), CONSUMER, &outbox_delivered_payload(5)),
            b"ok trimmed 2"
        );
        assert_eq!(outbox(&a), (6, 0));
        // Not a progress payload: wrong length or prefix.
        assert_eq!(outbox_delivered_of(b"ccron-outbox-ack"), None);
        assert_eq!(outbox_delivered_of(&[0; 24]), None);
        assert_eq!(outbox_delivered_of(&outbox_delivered_payload(7)), Some(7));
    }

    /// Issue 10: any client could cancel, replace or pause anyone's schedules. Client 1 can do
    /// none of it to client 0's order expiry (each attempt is an `err` reply, counted, and the
    /// ledger digest does not move); the expiry still fires; client 0 and an admin can.
    /// Regression (issue 10, "nothing silent"): `expire-order` used to count an expiry and then
    /// log a failed emit (a full outbox) and carry on: the order was expired on every replica
    /// but the shop was never told. Now the book runs a handler only when the outbox can take
    /// the record it may emit: every counted expiry has its record, the runs that do not fit
    /// wait (reported, not failed), and they run once the consumer trims the outbox.
    #[test]
    fn a_full_outbox_holds_expiries_back_and_every_counted_expiry_has_its_record() {
        let mut a = ledger();
        let mut pages = MemPages::new(4_096, 4);
        let every = every_ms(1_000).with_payload(b"o".to_vec());
        a.execute(ctx(1, 0), c(0), &req(&ScheduleRequest::Create(every)));
        let max_records = a.scheduler().unwrap().outbox().limits().max_records as u32;
        let ticks = max_records + 20;
        for (seq, t) in (2..).zip((0..ticks).map(|s| i64::from(s) * 1_000)) {
            a.on_tick(Tick::new(BOOK, seq, Some(t)), &mut pages)
                .unwrap();
        }
        let book = a.scheduler().unwrap();
        let held = book.outbox().len() as u32;
        let expired = a.state().0.get("o").copied().unwrap_or(0);
        assert!(held > 0 && held < ticks, "{held} of {ticks}");
        assert_eq!(expired, held, "every counted expiry has its outbox record");
        assert_eq!(book.book().emit_failures(), 0);
        assert_eq!(book.tick_errors(), 0);
        // Held back, not lost: the consumer trims, the waiting run happens (one, FireOnce).
        let t = i64::from(ticks) * 1_000;
        assert_eq!(
            a.execute(ctx(1_000, t), CONSUMER, &outbox_delivered_payload(10)),
            b"ok trimmed 10"
        );
        a.on_tick(Tick::new(BOOK, 1_001, Some(t)), &mut pages)
            .unwrap();
        assert_eq!(a.state().0.get("o").copied(), Some(expired + 1));
        assert_eq!(a.scheduler().unwrap().outbox().len() as u32, held - 10 + 1);
    }

    /// Issue 24: order keys were one namespace owned by each key's first creator, so any
    /// client could take another's `order-<k>` (and count another's order through a payload).
    /// Each client's names are now its own; the shared layout behaves as before.
    #[test]
    fn a_client_cannot_take_another_clients_order() {
        let cfg = SchedAppConfig {
            puts_as_orders: true,
            expiry_ms: 1_000,
            ..SchedAppConfig::default()
        };
        let mut l = ScheduledLedger::new(cfg);
        let mut pages = MemPages::new(4_096, 1);
        let put = |k: &str| {
            KvOp::Put {
                key: k.into(),
                value: vec![],
            }
            .to_payload()
        };
        let ok = |r: Vec<u8>| assert!(r.starts_with(b"ok "), "{}", String::from_utf8_lossy(&r));
        // Client 2 places order-7 first; client 1 still places its own.
        ok(l.execute(ctx(1, 0), c(2), &put("order-7")));
        ok(l.execute(ctx(2, 0), c(1), &put("order-7")));
        // A raw request naming client 1's namespaced key would stay in client 2's namespace;
        // with 256-bit ids (64 hex digits) the two prefixes leave no room under the 128-byte
        // name limit, so it is refused.
        let squat =
            ScheduleRequest::Create(ScheduledLedger::expiry(&format!("{}/order-9", c(1)), 1_000));
        let refused = l.execute(ctx(3, 0), c(2), &req(&squat));
        assert!(refused.starts_with(b"err limit exceeded"), "{refused:?}");
        ok(l.execute(ctx(4, 0), c(1), &put("order-9")));
        // Client 2 pays its order-7: client 1's still expires.
        let pay = KvOp::Delete {
            key: "order-7".into(),
        }
        .to_payload();
        ok(l.execute(ctx(5, 0), c(2), &pay));
        l.on_tick(Tick::new(1, 6, Some(1_000)), &mut pages).unwrap();
        let orders = &l.ledger().state().0;
        assert_eq!(orders.get(format!("{}/order-7", c(1)).as_str()), Some(&1));
        assert_eq!(orders.get(format!("{}/order-7", c(2)).as_str()), None);
        assert_eq!(orders.get(format!("{}/order-9", c(1)).as_str()), Some(&1));
        assert_eq!(orders.len(), 2, "only client 1's order-7 and order-9");
        // The shared layout (replaying older logs): the first creator holds the key.
        let shared = SchedAppConfig {
            keys: KeySpace::Shared,
            ..cfg
        };
        let mut old = ScheduledLedger::new(shared);
        ok(old.execute(ctx(1, 0), c(2), &put("order-7")));
        let denied = old.execute(ctx(2, 0), c(1), &put("order-7"));
        let want = format!("err client {} may not", c(1).short());
        assert!(denied.starts_with(want.as_bytes()), "{denied:?}");
        assert_ne!(old.setup_digest(), l.setup_digest());
    }

    /// Issue 24 (256-bit ids): a book migrated from layout 9 keeps a client's schedules under
    /// `<64-bit id>/<key>`. Paying such an order (a `Delete`) cancels that expiry, and placing it
    /// again (a `Put`) changes it instead of adding a second expiry under the full id. Without
    /// the legacy resolution the paid order would still expire. Another client cannot reach it;
    /// a fresh name is the full id's.
    #[test]
    fn a_name_from_before_256_bit_ids_is_still_the_clients() {
        let shared = SchedAppConfig {
            puts_as_orders: true,
            expiry_ms: 1_000,
            keys: KeySpace::Shared,
            ..SchedAppConfig::default()
        };
        let put = |k: &str| {
            KvOp::Put {
                key: k.into(),
                value: vec![],
            }
            .to_payload()
        };
        let del = |k: &str| KvOp::Delete { key: k.into() }.to_payload();
        let ok = |r: Vec<u8>| assert!(r.starts_with(b"ok "), "{}", String::from_utf8_lossy(&r));
        // What layout 9 stored for client 1's order-1 and order-2: the key and payload under
        // its 64-bit id, written here through the shared layout (no prefix added).
        let mut old = ScheduledLedger::new(shared);
        let legacy1 = legacy_key(c(1), "order-1");
        let legacy2 = legacy_key(c(1), "order-2");
        assert_eq!(legacy1, format!("{}/order-1", c(1).legacy_prefix()));
        ok(old.execute(ctx(1, 0), c(1), &put(&legacy1)));
        ok(old.execute(ctx(2, 0), c(1), &put(&legacy2)));
        let snapshot = old.snapshot();
        let per_client = SchedAppConfig {
            keys: KeySpace::PerClient,
            ..shared
        };
        let mut l = ScheduledLedger::new(per_client);
        l.restore(&snapshot).unwrap();
        let book = |l: &ScheduledLedger| l.ledger().scheduler().unwrap().book().clone();
        assert_eq!(book(&l).len(), 2);
        // Re-placing order-1 changes its expiry; no second one appears under the full id.
        ok(l.execute(ctx(3, 0), c(1), &put("order-1")));
        assert_eq!(
            book(&l).len(),
            2,
            "the legacy expiry was changed, not doubled"
        );
        assert!(book(&l).id_of(&own_key(c(1), "order-1")).is_none());
        // Another client's order-1 is its own.
        ok(l.execute(ctx(4, 0), c(2), &put("order-1")));
        assert!(book(&l).id_of(&own_key(c(2), "order-1")).is_some());
        assert!(book(&l).id_of(&legacy1).is_some());
        // Client 2 paying its order-1 leaves client 1's; client 1 pays order-1.
        ok(l.execute(ctx(5, 0), c(2), &del("order-1")));
        assert!(book(&l).id_of(&legacy1).is_some());
        ok(l.execute(ctx(6, 0), c(1), &del("order-1")));
        assert!(
            book(&l).id_of(&legacy1).is_none(),
            "the paid legacy order is cancelled"
        );
        // A fresh name (order-3) is the full id's; order-1 placed again now is too.
        ok(l.execute(ctx(7, 0), c(1), &put("order-3")));
        assert!(book(&l).id_of(&own_key(c(1), "order-3")).is_some());
        ok(l.execute(ctx(8, 0), c(1), &put("order-1")));
        assert!(book(&l).id_of(&own_key(c(1), "order-1")).is_some());
        // The expiries fire: the unpaid legacy order-2 under its old name, the paid one never.
        let mut pages = MemPages::new(4_096, 1);
        l.on_tick(Tick::new(1, 9, Some(1_000_000)), &mut pages)
            .unwrap();
        let orders = &l.ledger().state().0;
        assert_eq!(orders.get(legacy2.as_str()), Some(&1));
        assert_eq!(
            orders.get(legacy1.as_str()),
            None,
            "a paid order never expires"
        );
        assert_eq!(orders.get(own_key(c(1), "order-1").as_str()), Some(&1));
        assert_eq!(orders.get(own_key(c(1), "order-3").as_str()), Some(&1));
    }

    #[test]
    fn a_client_cannot_cancel_or_change_another_clients_order_expiry() {
        let mut a = ledger();
        let mut pages = MemPages::new(4_096, 4);
        let expiry = ScheduledLedger::expiry("o0", 1_000);
        assert_eq!(
            a.execute(
                ctx(1, 0),
                c(0),
                &req(&ScheduleRequest::Upsert(expiry.clone()))
            ),
            b"ok 1"
        );
        let later = ScheduledLedger::expiry("o0", 1_000_000);
        let attacks = [
            ScheduleRequest::Cancel(Target::Key("o0".into())),
            ScheduleRequest::Cancel(Target::Id(1)),
            ScheduleRequest::Pause(Target::Key("o0".into())),
            ScheduleRequest::Upsert(later.clone()),
            ScheduleRequest::Replace {
                target: Target::Id(1),
                schedule: later.clone(),
            },
        ];
        let digest = a.digest();
        for (seq, attack) in (2..).zip(&attacks) {
            let reply = String::from_utf8(a.execute(ctx(seq, 10), c(1), &req(attack))).unwrap();
            assert!(
                reply.starts_with(&format!("err client {} may not", c(1).short())),
                "{attack:?}: {reply}"
            );
            assert_eq!(a.digest(), digest, "{attack:?} changed the ledger");
        }
        assert_eq!(a.scheduler().unwrap().denied(), attacks.len() as u64);
        a.on_tick(Tick::new(BOOK, 10, Some(1_000)), &mut pages)
            .unwrap();
        assert_eq!(a.state().0.get("o0"), Some(&1), "the expiry fired");

        // Its owner and an admin may change it.
        a.execute(ctx(11, 1_000), c(0), &req(&ScheduleRequest::Upsert(expiry)));
        assert_eq!(
            a.execute(
                ctx(12, 1_000),
                c(0),
                &req(&ScheduleRequest::Pause(Target::Key("o0".into())))
            ),
            b"ok 2"
        );
        assert_eq!(
            a.execute(
                ctx(13, 1_000),
                ADMIN,
                &req(&ScheduleRequest::Cancel(Target::Key("o0".into())))
            ),
            b"ok 2"
        );
        assert!(a.scheduler().unwrap().book().is_empty());
    }

    #[test]
    fn one_ledger_runs_tables_and_schedules_and_restores_both() {
        let mut a = ledger();
        let mut pages = MemPages::new(4_096, 4);
        let every = every_ms(2_000).with_key("o").with_payload(b"o".to_vec());
        assert_eq!(
            a.execute(ctx(1, 0), c(0), &req(&ScheduleRequest::Create(every))),
            b"ok 1"
        );
        assert!(
            String::from_utf8_lossy(&a.execute(ctx(2, 0), c(0), b"junk")).starts_with("err"),
            "other payloads go to the state"
        );
        let rejected = a.execute(
            ctx(3, 0),
            c(0),
            &req(&ScheduleRequest::Create(NewSchedule::new(
                "nope",
                Timing::AfterMs(1),
            ))),
        );
        assert!(String::from_utf8_lossy(&rejected).contains("unknown handler"));
        for (seq, t) in [(4, 0), (5, 1_000), (6, 2_500)] {
            a.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
            a.on_tick(Tick::new(BOOK, seq, Some(t)), &mut pages)
                .unwrap();
        }
        assert_eq!(
            a.on_tick(Tick::new(9, 7, Some(3_000)), &mut pages),
            Err(AppError::UnknownComponent(9))
        );
        let state = a.state().0.clone();
        assert_eq!(state.get("table"), Some(&3));
        assert_eq!(state.get("o"), Some(&2), "due at 0 and 2 s");
        assert_eq!(a.fires(), [((1, 0), 3), ((BOOK, 0), 2)].into());
        assert_eq!(a.scheduler().unwrap().outbox().len(), 2);

        // Pause through a client request; a restored copy (restart / state transfer: the
        // snapshot plus the replica's pages) continues identically.
        a.execute(
            ctx(8, 3_000),
            c(0),
            &req(&ScheduleRequest::Pause(Target::Key("o".into()))),
        );
        let mut b = ledger();
        b.restore(&a.snapshot()).unwrap();
        b.reload(&pages).unwrap();
        assert_eq!(b.digest(), a.digest());
        assert_eq!(b.scheduler().unwrap().book(), a.scheduler().unwrap().book());
        // The outbox came back from the book's pages, record for record.
        assert_eq!(
            b.scheduler().unwrap().outbox(),
            a.scheduler().unwrap().outbox()
        );
        assert_eq!(b.scheduler().unwrap().outbox().len(), 2);
        let mut pages_b = pages.clone();
        let step = |l: &mut CronLedger<OrderState>, p: &mut MemPages| {
            l.execute(
                ctx(9, 4_000),
                c(0),
                &req(&ScheduleRequest::Resume(Target::Key("o".into()))),
            );
            l.on_tick(Tick::new(1, 10, Some(6_000)), p).unwrap();
            l.on_tick(Tick::new(BOOK, 10, Some(6_000)), p).unwrap();
        };
        step(&mut a, &mut pages);
        step(&mut b, &mut pages_b);
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a.state().0.get("o"), Some(&3), "fire once after the pause");
        assert_eq!(pages, pages_b);

        // Zones are data too: installed by a request, of an admin only.
        let z = ScheduleRequest::InstallZone(ZoneRules::fixed("Z", 3_600).unwrap());
        assert_eq!(
            a.execute(ctx(11, 6_000), c(0), &req(&z)),
            format!("err client {} may not install zone rules", c(0).short()).into_bytes()
        );
        assert_eq!(a.execute(ctx(11, 6_000), ADMIN, &req(&z)), b"ok 0");
        // A corrupt snapshot changes nothing.
        let before = a.digest();
        assert!(a.restore(b"junk").is_err());
        assert_eq!(a.digest(), before);
    }

    /// Issue 10, defect 1: on the orders ledger (40 book pages, a one-page zones part),
    /// installing Europe/Berlin and then America/New_York used to be accepted while every later
    /// save failed (only logged): the pages, snapshot and digest stayed behind, and a replica
    /// restored from the snapshot lost the schedules (and the orders' expiries). Now the second
    /// install is rejected (typed, in the reply), every later request saves, and a ledger
    /// restored from the snapshot holds the same book and stays identical.
    #[test]
    fn orders_ledger_rejects_a_zone_install_that_would_not_fit_and_restores_equal() {
        let cfg = SchedAppConfig {
            zone_installs: true,
            ..SchedAppConfig::default()
        };
        let mut a = ScheduledLedger::new(cfg);
        let mut pages = MemPages::new(4_096, 1);
        let install = |name: &str| {
            ScheduledLedger::payload(&ScheduleRequest::InstallZone(
                ZoneRules::from_iana(name).unwrap(),
            ))
            .unwrap()
        };
        assert_eq!(
            a.execute(ctx(1, 0), c(0), &install("Europe/Berlin")),
            b"ok 0"
        );
        let r = a.execute(ctx(2, 0), c(0), &install("America/New_York"));
        let r = String::from_utf8(r).unwrap();
        assert!(r.starts_with("err limit exceeded: the zones"), "{r}");
        let berlin = NewSchedule::new(
            EXPIRE_ORDER,
            Timing::Cron {
                expression: "0 9 * * *".into(),
                zone: Some("Europe/Berlin".into()),
            },
        )
        .with_payload(b"daily".to_vec());
        for (seq, request) in [
            ScheduleRequest::Create(berlin),
            ScheduleRequest::Upsert(ScheduledLedger::expiry("o-1", 1_000)),
        ]
        .into_iter()
        .enumerate()
        {
            let r = a.execute(
                ctx(3 + seq as u64, 0),
                c(0),
                &ScheduledLedger::payload(&request).unwrap(),
            );
            assert!(r.starts_with(b"ok "), "{}", String::from_utf8_lossy(&r));
        }
        assert!(a.halted().is_none());
        let mut b = ScheduledLedger::new(cfg);
        b.restore(&a.snapshot()).unwrap();
        assert_eq!(b.digest(), a.digest());
        let book = |l: &ScheduledLedger| l.ledger().scheduler().unwrap().book().clone();
        assert_eq!(book(&b).len(), 2);
        assert_eq!(book(&b), book(&a));
        let mut pages_b = pages.clone();
        for (seq, t) in [(10, 2_000), (11, 86_400_000)] {
            a.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
            b.on_tick(Tick::new(1, seq, Some(t)), &mut pages_b).unwrap();
            assert_eq!(a.digest(), b.digest());
        }
        // Client 0's names, in its namespace.
        assert_eq!(
            a.ledger().state().0.get(format!("{}/o-1", c(0)).as_str()),
            Some(&1)
        );
        assert_eq!(
            a.ledger().state().0.get(format!("{}/daily", c(0)).as_str()),
            Some(&1)
        );
    }

    /// Results back: an order is marked expired only when the payment service's answer comes
    /// back from the consumer, once per record; a second result, a result from anyone else, a
    /// mismatched id and a dead letter change nothing, and a restored replica agrees.
    #[test]
    fn an_order_expires_only_on_a_confirmed_result_applied_once() {
        use ccron::outbox::{OccurrenceId, OutboxResult, ResultOutcome, WorkerSigner};
        let cfg = SchedAppConfig::default();
        let worker = WorkerSigner::from_seed([9; 32]);
        let policy = ccron::Policy::default()
            .with_outbox_consumer(CONSUMER)
            .with_chain_id(b"orders".to_vec())
            .with_worker_key(worker.public(), [SHOP_CANCEL]);
        let mut a = ScheduledLedger::with_payment_confirmation_policy(cfg, policy.clone());
        let mut pages = MemPages::new(4_096, 1);
        for (seq, order) in [(1, "o-1"), (2, "o-2")] {
            let r = a.execute(
                ctx(seq, 0),
                c(0),
                &req(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
                    order, 1_000,
                ))),
            );
            assert!(r.starts_with(b"ok "), "{}", String::from_utf8_lossy(&r));
        }
        a.on_tick(Tick::new(1, 3, Some(2_000)), &mut pages).unwrap();
        let outbox = a.ledger().scheduler().unwrap().outbox().clone();
        assert_eq!(outbox.head(), 2);
        assert!(
            a.ledger().state().0.is_empty(),
            "nothing expired unconfirmed"
        );
        // Answers signed by the registered payment worker; dead letters are the consumer's.
        let result = |index: u64, outcome: ResultOutcome| {
            let record = outbox.get(index).unwrap();
            let proof = match &outcome {
                ResultOutcome::Answer(body) => Some(worker.sign(b"orders", index, record, body)),
                ResultOutcome::DeadLetter(_) => None,
            };
            OutboxResult {
                index,
                id: record.id,
                outcome,
                proof,
            }
            .to_payload()
            .unwrap()
        };
        let confirmed = || ResultOutcome::Answer(PAYMENT_CONFIRMED.to_vec());
        let reply = |l: &mut ScheduledLedger, seq, client, p: &[u8]| {
            String::from_utf8(l.execute(ctx(seq, 2_000), client, p)).unwrap()
        };

        let r = reply(&mut a, 4, c(0), &result(1, confirmed()));
        assert!(r.contains("may not report outbox results"), "{r}");
        assert!(a.ledger().state().0.is_empty());
        assert_eq!(a.ledger().scheduler().unwrap().denied(), 1);

        assert_eq!(
            reply(&mut a, 5, CONSUMER, &result(1, confirmed())),
            "ok result applied"
        );
        let order = outbox.get(1).unwrap().payload.clone();
        let order = String::from_utf8(order).unwrap();
        assert_eq!(a.ledger().state().0.get(&order), Some(&1));
        assert_eq!(
            reply(&mut a, 6, CONSUMER, &result(1, confirmed())),
            "ok result duplicate"
        );
        assert_eq!(a.ledger().state().0.get(&order), Some(&1), "applied once");

        let forged = OutboxResult::unsigned(2, OccurrenceId::new(9, 9, 9), confirmed());
        let r = reply(&mut a, 7, CONSUMER, &forged.to_payload().unwrap());
        assert!(r.contains("names"), "{r}");
        // A confirmation nobody registered signed is refused: the order stays as it is.
        let unsigned = OutboxResult::unsigned(2, outbox.get(2).unwrap().id, confirmed());
        let r = reply(&mut a, 7, CONSUMER, &unsigned.to_payload().unwrap());
        assert!(r.contains("not signed by a worker"), "{r}");
        let r = reply(
            &mut a,
            8,
            CONSUMER,
            &result(2, ResultOutcome::Answer(vec![0; 70_000])),
        );
        assert!(r.contains("exceeds"), "{r}");
        let r = reply(&mut a, 8, CONSUMER, b"ccron-outbox-res\xff");
        assert!(r.starts_with("err "), "{r}");
        let dead = ResultOutcome::DeadLetter("payment service down".into());
        assert_eq!(
            reply(&mut a, 9, CONSUMER, &result(2, dead)),
            "ok result applied"
        );
        assert_eq!(
            a.ledger().state().0.len(),
            1,
            "a dead letter expires nothing"
        );

        // A restored replica knows both records have their result.
        let mut b = ScheduledLedger::with_payment_confirmation_policy(cfg, policy);
        b.restore(&a.snapshot()).unwrap();
        assert_eq!(b.digest(), a.digest());
        assert_eq!(
            reply(&mut b, 10, CONSUMER, &result(2, confirmed())),
            "ok result duplicate"
        );
        assert_eq!(b.ledger().state().0.len(), 1);
        // After progress trims record 1, a late result for it is a no-op too.
        let r = reply(&mut b, 11, CONSUMER, &outbox_delivered_payload(1));
        assert_eq!(r, "ok trimmed 1");
        assert_eq!(
            reply(&mut b, 12, CONSUMER, &result(1, confirmed())),
            "ok result trimmed"
        );
        assert_eq!(b.ledger().state().0.get(&order), Some(&1));
    }
}

#[cfg(test)]
mod durable_book {
    use super::*;
    use ccron::FilePages;

    /// The composition is generic over the book's page store: over `FilePages` (a durable
    /// store the node keeps), a node that stops and reopens its directory gets its schedules
    /// and outbox back at start (`LedgerScheduler::with_pages`), and fires the same orders as a
    /// node that never stopped.
    #[test]
    fn the_book_over_file_pages_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("ccron-ledgers-book-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = BookConfig {
            component: 1,
            position: 0,
            limits: Limits::default(),
            book_pages: 40,
            outbox_pages: 64,
        };
        let open = || {
            let pages = FilePages::open(&dir, 4_096, cfg.total_pages()).unwrap();
            let book = LedgerScheduler::with_pages(cfg, order_handlers(), pages).unwrap();
            CronLedger::new(OrderState::default(), CronTableRegistry::new()).with_scheduler(book)
        };
        let mut a = open();
        let mut mem = CronLedger::new(OrderState::default(), CronTableRegistry::new())
            .with_scheduler(LedgerScheduler::new(cfg, order_handlers()));
        let ctx = ExecContext {
            seq: 1,
            agreed_time_ms: Some(1_000),
        };
        for o in ["o1", "o2"] {
            let req = ScheduledLedger::payload(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
                o, 2_000,
            )))
            .unwrap();
            assert!(
                a.execute(ctx, ClientId::from_index(5), &req)
                    .starts_with(b"ok")
            );
            assert!(
                mem.execute(ctx, ClientId::from_index(5), &req)
                    .starts_with(b"ok")
            );
        }
        assert_eq!(a.digest(), mem.digest(), "same book whatever the store");
        drop(a);
        // Restart: the book comes back from the directory.
        let mut b = open();
        assert_eq!(b.scheduler().unwrap().book().len(), 2);
        assert_eq!(
            b.scheduler().unwrap().book(),
            mem.scheduler().unwrap().book()
        );
        let mut tables = MemPages::new(4_096, 1);
        b.on_tick(Tick::new(1, 2, Some(3_500)), &mut tables)
            .unwrap();
        mem.on_tick(Tick::new(1, 2, Some(3_500)), &mut tables)
            .unwrap();
        assert_eq!(b.fires().get(&(1, 0)), Some(&2));
        assert_eq!(b.digest(), mem.digest());
        // A store of the wrong geometry is refused, typed.
        let small = MemPages::new(4_096, 3);
        assert!(matches!(
            LedgerScheduler::with_pages(cfg, order_handlers(), small),
            Err(AppError::Fatal(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
