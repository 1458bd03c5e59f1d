//! An escrow ledger of one's own, written against ccron's public API only: the same type runs on
//! sim-bft's simulated cluster (`tests/sim.rs`) and on Malachite as real processes
//! (`src/main.rs`, `tests/slow_localnet.rs`).
//!
//! - Clients **hold** funds (`hold <id> <amount>`, under the client's own namespace). The same
//!   request schedules the hold's **refund** (a delayed task [`REFUND_AFTER_MS`] later), all or
//!   nothing (`Effects::schedule`): a hold never exists without its refund.
//! - **confirm** (`confirm <id>`) cancels the refund in the same request and queues the hold
//!   for release.
//! - A **cron entry in a time zone** releases the confirmed holds on Europe/London wall time
//!   ([`DEMO_TIMINGS`]: `*/10 * * * * *` for the demo; [`WEEKDAY_TIMINGS`]: `0 0 17 * * MON-FRI`
//!   and a 48 h refund, as a real ledger writes them), one
//!   `escrow-released` **outbox record** per release, several per run, into the ledger's one
//!   outbox; a refund emits `escrow-refunded` into the same outbox.
//! - A **periodic** entry, aligned to the epoch, accrues interest on the held funds.
//! - The outbox's **consumer and workers** are named by the ledger's policy
//!   ([`demo_policy`]: the relay's client id, the chain id, the two workers' answer keys for
//!   both handlers); `ccron relay` delivers the records (`tests/slow_relay_localnet.rs`). A real
//!   ledger names its own keys; the demo's are fixed so its tests can play relay and workers.

use std::collections::BTreeMap;

use ccron::cron::{CronSchedule, ZoneRules};
use ccron::host::{
    AppError, Application, BookConfig, ClientId, CronLedger, Digest32, Effects, ExecContext,
    LedgerScheduler,
};
use ccron::outbox::{EmitBudget, WorkerSigner};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Target, Timing};
use ccron::{CronEntry, CronTable, CronTableRegistry, PageAllocator, Periodic, Policy};
use sha2::{Digest, Sha256};

/// The component whose ticks run the tables and the book.
pub const ESCROW: u32 = 1;
/// Table position of the release (cron, Europe/London).
pub const SETTLE: u32 = 0;
/// Table position of the accrual (periodic).
pub const ACCRUE: u32 = 1;
/// The position the book's runs (refunds) are counted under.
pub const REFUNDS: u32 = 9;
/// A hold is refunded this long after it was placed unless confirmed, in the demo (48 h in a
/// real ledger: [`WEEKDAY_TIMINGS`]).
pub const REFUND_AFTER_MS: i64 = 3_000;

/// When the ledger releases and refunds (configuration, identical on every replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// The release's cron expression (seconds first), on Europe/London wall time.
    pub release: &'static str,
    /// A hold is refunded this long after it was placed unless confirmed.
    pub refund_after_ms: i64,
}

/// The demo's timings: a release every 10 s of London wall time, a refund 3 s after a hold.
pub const DEMO_TIMINGS: Timings = Timings {
    release: "*/10 * * * * *",
    refund_after_ms: REFUND_AFTER_MS,
};

/// The story's timings: a release at 17:00 London time on weekdays (16:00Z in summer time,
/// 17:00Z in winter), a refund 48 h after an unconfirmed hold.
pub const WEEKDAY_TIMINGS: Timings = Timings {
    release: "0 0 17 * * MON-FRI",
    refund_after_ms: 48 * 3_600_000,
};
/// Most releases one run of the release entry performs (the rest wait for the next run).
pub const RELEASES_PER_RUN: usize = 16;

/// The outbox record of a release (one per released hold).
pub const RELEASED: &str = "escrow-released";
/// The outbox record of a refund (one per refunded hold).
pub const REFUNDED: &str = "escrow-refunded";
/// The demo's chain id (the policy's; deliveries and answers are bound to it).
pub const DEMO_CHAIN: &str = "escrow-demo";
/// The demo relay's ed25519 secret (`ccron relay --key`): its node client id is the outbox
/// consumer of [`demo_policy`]. Public on purpose: a demo key, never a real one.
pub const DEMO_RELAY_SECRET: [u8; 32] = [0x5e; 32];
/// The demo workers' answer-key seeds (ed25519 secrets), registered for both handlers.
pub const DEMO_WORKER_SEEDS: [[u8; 32]; 2] = [[0x61; 32], [0x62; 32]];

/// The demo's policy: [`DEMO_RELAY_SECRET`]'s client id may report results and progress,
/// the chain is [`DEMO_CHAIN`], and answers signed by a [`DEMO_WORKER_SEEDS`] key are
/// believed for [`RELEASED`] and [`REFUNDED`] records.
pub fn demo_policy() -> Policy {
    let relay = ccron_node::crypto::Signer::new(DEMO_RELAY_SECRET).public_key();
    DEMO_WORKER_SEEDS.iter().fold(
        Policy::default()
            .with_outbox_consumer(ccron_node::request::client_id(&relay))
            .with_chain_id(DEMO_CHAIN.as_bytes()),
        |p, seed| {
            p.with_worker_key(
                WorkerSigner::from_seed(*seed).public(),
                [RELEASED, REFUNDED],
            )
        },
    )
}

/// The escrow's own state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Escrow {
    /// Open holds by (client, id): a client's ids are its own namespace.
    pub holds: BTreeMap<(ClientId, String), u64>,
    /// Confirmed holds awaiting the next release run.
    pub confirmed: BTreeMap<(ClientId, String), u64>,
    /// Funds released (one `escrow-released` record each).
    pub released: u64,
    /// Funds refunded by the delayed task (one `escrow-refunded` record each).
    pub refunded: u64,
    /// Release runs (cron).
    pub settlements: u64,
    /// Interest accrued (periodic: one unit per open hold per run).
    pub accrued: u64,
    /// Configuration, not state: the refund delay ([`Timings::refund_after_ms`]; not in the
    /// snapshot, kept by `restore`).
    pub refund_after_ms: i64,
}

/// The refund task's key and payload for hold `id` of `client`.
fn refund_key(client: ClientId, id: &str) -> String {
    format!("refund-{client}-{id}")
}

impl Escrow {
    fn hold(&mut self, client: ClientId, id: &str, amount: &str, fx: &mut Effects<'_>) -> Vec<u8> {
        let (Ok(amount), true) = (amount.parse::<u64>(), (1..=64).contains(&id.len())) else {
            return b"err bad hold".to_vec();
        };
        let key = (client, id.to_string());
        if amount == 0 || self.holds.contains_key(&key) || self.confirmed.contains_key(&key) {
            return b"err bad or repeated hold".to_vec();
        }
        let mut payload = client.as_bytes().to_vec();
        payload.extend_from_slice(id.as_bytes());
        let task = NewSchedule::new("refund", Timing::AfterMs(self.refund_after_ms))
            .with_key(refund_key(client, id))
            .with_payload(payload);
        if let Err(e) = fx.schedule(ScheduleRequest::Upsert(task)) {
            return format!("err {e}").into_bytes();
        }
        self.holds.insert(key, amount);
        b"ok held".to_vec()
    }

    fn confirm(&mut self, client: ClientId, id: &str, fx: &mut Effects<'_>) -> Vec<u8> {
        let key = (client, id.to_string());
        if !self.holds.contains_key(&key) {
            return b"err no such hold".to_vec();
        }
        let cancel = ScheduleRequest::Cancel(Target::Key(refund_key(client, id)));
        if let Err(e) = fx.schedule(cancel) {
            return format!("err {e}").into_bytes();
        }
        let amount = self.holds.remove(&key).unwrap_or_default();
        self.confirmed.insert(key, amount);
        b"ok confirmed".to_vec()
    }

    /// The refund task's payload: the hold's owner and id.
    fn refund(&mut self, payload: &[u8]) -> Option<u64> {
        let (owner, id) = payload.split_at_checked(32)?;
        let owner = ClientId(owner.try_into().ok()?);
        let amount = self
            .holds
            .remove(&(owner, std::str::from_utf8(id).ok()?.to_string()))?;
        self.refunded += amount;
        Some(amount)
    }
}

impl Application for Escrow {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        self.execute_with(ctx, client, payload, &mut Effects::none())
    }

    fn execute_with(
        &mut self,
        _ctx: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut Effects<'_>,
    ) -> Vec<u8> {
        let text = String::from_utf8_lossy(payload);
        match text.split_whitespace().collect::<Vec<_>>()[..] {
            ["hold", id, amount] => self.hold(client, id, amount, fx),
            ["confirm", id] => self.confirm(client, id, fx),
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
        for map in [&self.holds, &self.confirmed] {
            out.extend_from_slice(&(map.len() as u64).to_le_bytes());
            for ((client, id), amount) in map {
                out.extend_from_slice(client.as_bytes());
                out.extend_from_slice(&(id.len() as u64).to_le_bytes());
                out.extend_from_slice(id.as_bytes());
                out.extend_from_slice(&amount.to_le_bytes());
            }
        }
        out
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let r = &mut &snapshot[..];
        let mut next = Escrow {
            released: take_u64(r)?,
            refunded: take_u64(r)?,
            settlements: take_u64(r)?,
            accrued: take_u64(r)?,
            refund_after_ms: self.refund_after_ms,
            ..Escrow::default()
        };
        for map in [&mut next.holds, &mut next.confirmed] {
            for _ in 0..take_u64(r)? {
                let client = ClientId(take(r, 32)?.try_into().map_err(|_| bad())?);
                let len = usize::try_from(take_u64(r)?).map_err(|_| bad())?;
                let id = String::from_utf8(take(r, len.min(65))?.to_vec()).map_err(|_| bad())?;
                map.insert((client, id), take_u64(r)?);
            }
        }
        if !r.is_empty() {
            return Err(bad());
        }
        *self = next;
        Ok(())
    }
}

fn bad() -> AppError {
    AppError::BadSnapshot("escrow: truncated or malformed".into())
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], AppError> {
    let (a, b) = r.split_at_checked(n).ok_or_else(bad)?;
    *r = b;
    Ok(a)
}

fn take_u64(r: &mut &[u8]) -> Result<u64, AppError> {
    Ok(u64::from_le_bytes(
        take(r, 8)?.try_into().map_err(|_| bad())?,
    ))
}

/// The escrow ledger under [`demo_policy`]: its state, cron table and schedule book, built
/// identically on every replica and node, at every start.
pub fn ledger() -> CronLedger<Escrow> {
    ledger_with(demo_policy(), DEMO_TIMINGS)
}

/// The escrow ledger under `policy` (who consumes its outbox, which workers it believes) with
/// `timings` (when it releases and refunds).
pub fn ledger_with(policy: Policy, timings: Timings) -> CronLedger<Escrow> {
    let london = ZoneRules::from_iana("Europe/London").expect("the London zone is bundled");
    let release = CronSchedule::parse_in(timings.release, london).expect("a valid expression");
    // Page 0 is sim-bft's agreed-time page; the node's pages start at 0 too and leave it unused.
    let pages = PageAllocator::new(1, 63).allocate(2).expect("two pages");
    let mut table = CronTable::with_persistence(ESCROW, pages, 8);
    let release_entry = CronEntry::<Escrow>::cron(SETTLE, release, |ctx| {
        ctx.state.settlements += 1;
        let due: Vec<_> = ctx
            .state
            .confirmed
            .keys()
            .take(RELEASES_PER_RUN)
            .cloned()
            .collect();
        for key in due {
            // The effect first: a release without its record never happens.
            if ctx.emit(RELEASED, key.1.clone().into_bytes()).is_err() {
                break;
            }
            ctx.state.released += ctx.state.confirmed.remove(&key).unwrap_or_default();
        }
    });
    table.add(release_entry).expect("a free position");
    let accrual = Periodic::every_ms(5_000)
        .expect("a positive period")
        .aligned();
    let accrue = CronEntry::<Escrow>::periodic(ACCRUE, accrual, |ctx| {
        ctx.state.accrued += ctx.state.holds.len() as u64;
    });
    table.add(accrue).expect("a free position");
    let mut registry = CronTableRegistry::new();
    registry.register(table).expect("one table per component");

    let mut handlers = Handlers::<Escrow>::new();
    handlers.register("refund", |ctx| {
        if ctx.state.refund(ctx.payload).is_some() {
            ctx.emit(REFUNDED, ctx.payload.to_vec())?;
        }
        Ok(())
    });
    let book = BookConfig {
        component: ESCROW,
        position: REFUNDS,
        limits: Limits {
            max_payload_bytes: 128,
            ..Limits::default()
        },
        book_pages: 8,
        outbox_pages: 16,
    };
    let state = Escrow {
        refund_after_ms: timings.refund_after_ms,
        ..Escrow::default()
    };
    CronLedger::new(state, registry)
        .with_scheduler(LedgerScheduler::new(book, handlers).with_policy(policy))
        .with_table_emits(ESCROW, EmitBudget::new(RELEASES_PER_RUN, 4_096))
}

/// A client's k-th request in the demos: odd k holds `h<k>` (k units), every fourth confirms
/// the hold before it, the others hold `h<k>` too (an unconfirmed hold is refunded).
pub fn demo_request(_client: ClientId, k: u64) -> Vec<u8> {
    if k.is_multiple_of(4) {
        format!("confirm h{}", k - 1).into_bytes()
    } else {
        format!("hold h{k} {k}").into_bytes()
    }
}
