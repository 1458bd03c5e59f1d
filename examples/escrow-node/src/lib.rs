//! An escrow ledger of one's own, written against ccron's public API only: the same type runs on
//! sim-bft's simulated cluster (`tests/sim.rs`) and on Malachite as real processes
//! (`src/main.rs`, `tests/localnet.rs`).
//!
//! - Clients **hold** funds (`hold <id> <amount>`, kept under the client's own namespace) and
//!   **confirm** a hold (`confirm <id>`: released now).
//! - A **delayed task** refunds a hold that was not confirmed: the client schedules
//!   `refund` after `REFUND_AFTER_MS` of agreed time ([`refund_request`]), keyed by the hold, so a
//!   confirmation cancels nothing and the refund finds the hold gone. Each refund emits an
//!   **outbox record** (`escrow-refunded`) for a worker to act on.
//! - A **cron entry in a time zone** settles the books every 10 s of Europe/London wall time
//!   (`*/10 * * * * *`; a real ledger would use `0 17 * * MON-FRI`), and a **periodic** entry
//!   accrues interest on the held funds every 5 s.

use std::collections::BTreeMap;

use ccron::cron::{CronSchedule, ZoneRules};
use ccron::host::{AppError, Application, ClientId, CronLedger, Digest32, ExecContext};
use ccron::schedule::{Handlers, NewSchedule, ScheduleRequest, Timing};
use ccron::{CronEntry, CronTable, CronTableRegistry, PageAllocator, Periodic};
use sha2::{Digest, Sha256};

/// The component whose ticks run the tables and the book.
pub const ESCROW: u32 = 1;
/// Table position of the settlement (cron, Europe/London).
pub const SETTLE: u32 = 0;
/// Table position of the accrual (periodic).
pub const ACCRUE: u32 = 1;
/// The position the book's runs (refunds) are counted under.
pub const REFUNDS: u32 = 9;
/// A hold is refunded this long after it was placed unless confirmed.
pub const REFUND_AFTER_MS: i64 = 3_000;

/// One hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Amount held.
    pub amount: u64,
}

/// The escrow's own state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Escrow {
    /// Open holds by (client, id): a client's ids are its own namespace.
    pub holds: BTreeMap<(ClientId, String), Hold>,
    /// Funds released by confirmation.
    pub released: u64,
    /// Funds refunded by the delayed task.
    pub refunded: u64,
    /// Settlement runs (cron).
    pub settlements: u64,
    /// Interest accrued (periodic: one unit per open hold per run).
    pub accrued: u64,
}

impl Escrow {
    fn hold(&mut self, client: ClientId, id: &str, amount: u64) -> Vec<u8> {
        if id.is_empty() || id.len() > 64 || amount == 0 {
            return b"err bad hold".to_vec();
        }
        let key = (client, id.to_string());
        if self.holds.contains_key(&key) {
            return b"err held already".to_vec();
        }
        self.holds.insert(key, Hold { amount });
        b"ok held".to_vec()
    }

    fn confirm(&mut self, client: ClientId, id: &str) -> Vec<u8> {
        match self.holds.remove(&(client, id.to_string())) {
            Some(h) => {
                self.released += h.amount;
                b"ok released".to_vec()
            }
            None => b"err no such hold".to_vec(),
        }
    }

    /// The refund task's payload: the hold's owner and id.
    fn refund(&mut self, payload: &[u8]) -> Option<u64> {
        let (owner, id) = payload.split_at_checked(8)?;
        let owner = u64::from_le_bytes(owner.try_into().ok()?);
        let id = std::str::from_utf8(id).ok()?;
        let h = self.holds.remove(&(owner, id.to_string()))?;
        self.refunded += h.amount;
        Some(h.amount)
    }
}

impl Application for Escrow {
    fn execute(&mut self, _ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(payload);
        let words: Vec<&str> = text.split_whitespace().collect();
        match words[..] {
            ["hold", id, amount] => match amount.parse() {
                Ok(amount) => self.hold(client, id, amount),
                Err(_) => b"err bad amount".to_vec(),
            },
            ["confirm", id] => self.confirm(client, id),
            _ => b"err unknown request".to_vec(),
        }
    }

    fn digest(&self) -> Digest32 {
        // A small state: hashing it whole is fine (docs/user-guide.md, section 12).
        Sha256::digest(self.snapshot()).into()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for v in [self.released, self.refunded, self.settlements, self.accrued] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.holds.len() as u64).to_le_bytes());
        for ((client, id), h) in &self.holds {
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&(id.len() as u64).to_le_bytes());
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&h.amount.to_le_bytes());
        }
        out
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let bad = || AppError::BadSnapshot("escrow: truncated or malformed".into());
        let mut r = snapshot;
        let mut take = |n: usize| -> Result<&[u8], AppError> {
            let (a, b) = r.split_at_checked(n).ok_or_else(bad)?;
            r = b;
            Ok(a)
        };
        let u64_of = |t: &[u8]| u64::from_le_bytes(t.try_into().unwrap_or_default());
        let mut next = Escrow {
            released: u64_of(take(8)?),
            refunded: u64_of(take(8)?),
            settlements: u64_of(take(8)?),
            accrued: u64_of(take(8)?),
            holds: BTreeMap::new(),
        };
        let count = u64_of(take(8)?);
        for _ in 0..count {
            let client = u64_of(take(8)?);
            let len = usize::try_from(u64_of(take(8)?)).map_err(|_| bad())?;
            if len > 64 {
                return Err(bad());
            }
            let id = String::from_utf8(take(len)?.to_vec()).map_err(|_| bad())?;
            let amount = u64_of(take(8)?);
            next.holds.insert((client, id), Hold { amount });
        }
        if !r.is_empty() {
            return Err(bad());
        }
        *self = next;
        Ok(())
    }
}

/// The escrow ledger: its state, cron table and schedule book, built identically on every
/// replica and node, at every start.
pub fn ledger() -> CronLedger<Escrow> {
    let london = ZoneRules::from_iana("Europe/London").expect("the London zone is bundled");
    let settle = CronSchedule::parse_in("*/10 * * * * *", london).expect("a valid expression");
    // Page 0 is sim-bft's agreed-time page; the node's pages start at 0 too and leave it unused.
    let mut pages = PageAllocator::new(1, 63);
    let mut table = CronTable::with_persistence(ESCROW, pages.allocate(2).expect("two pages"), 8);
    table
        .add(CronEntry::<Escrow>::cron(SETTLE, settle, |ctx| {
            ctx.state.settlements += 1;
        }))
        .expect("a free position");
    table
        .add(CronEntry::<Escrow>::periodic(
            ACCRUE,
            Periodic::every_ms(5_000).expect("a positive period"),
            |ctx| {
                ctx.state.accrued += ctx.state.holds.len() as u64;
            },
        ))
        .expect("a free position");
    let mut registry = CronTableRegistry::new();
    registry.register(table).expect("one table per component");

    let mut handlers = Handlers::<Escrow>::new();
    handlers.register("refund", |ctx| {
        if ctx.state.refund(ctx.payload).is_some() {
            // The worker side effect: tell the payment service (the record's id is the
            // occurrence's, so a worker deduplicates).
            let _ = ctx.emit("escrow-refunded", ctx.payload.to_vec());
        }
    });
    let book = ccron::host::BookConfig {
        component: ESCROW,
        position: REFUNDS,
        limits: ccron::schedule::Limits::default(),
        book_pages: 8,
        outbox_pages: 4,
    };
    CronLedger::new(Escrow::default(), registry)
        .with_scheduler(ccron::host::LedgerScheduler::new(book, handlers))
}

/// The request scheduling hold `id` of `client` to be refunded [`REFUND_AFTER_MS`] from now
/// (keyed by the hold: scheduling it again replaces it).
pub fn refund_request(client: ClientId, id: &str) -> Vec<u8> {
    let mut payload = client.to_le_bytes().to_vec();
    payload.extend_from_slice(id.as_bytes());
    let task = NewSchedule::new("refund", Timing::AfterMs(REFUND_AFTER_MS))
        .with_key(format!("refund-{client}-{id}"))
        .with_payload(payload);
    ccron::codec::to_blob(&ScheduleRequest::Upsert(task)).unwrap_or_default()
}

/// A client's k-th request in the demos: odd k holds `h<k>` (k units), even k schedules the
/// refund of the hold before it, every fourth confirms it instead (a confirmed hold is not
/// refunded: its task finds it gone).
pub fn demo_request(client: ClientId, k: u64) -> Vec<u8> {
    let id = format!("h{}", if k % 2 == 1 { k } else { k.saturating_sub(1) });
    if k % 2 == 1 {
        format!("hold {id} {k}").into_bytes()
    } else if k.is_multiple_of(4) {
        format!("confirm {id}").into_bytes()
    } else {
        refund_request(client, &id)
    }
}
