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
//!
//! **256-bit client ids.** Holds were keyed by 64-bit client ids before client ids became 256
//! bits. A snapshot of that layout (layout 1) restores each such hold under
//! [`legacy_holder`]`(old id)` (the old id and 24 zero bytes, which no client's id, a SHA-256,
//! is); a client confirms a legacy hold of its own when its id starts with the old id
//! ([`ClientId::legacy_prefix`]), and a refund task scheduled before the upgrade (its payload
//! the 8-byte old id and the hold's id) still refunds it. Snapshots are written in layout 2
//! ([`SNAPSHOT_MARK`] first).

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

/// The first 8 bytes of an escrow snapshot of layout 2: `u64::MAX`, where a layout-1
/// snapshot has its released funds (never that much: the sum would have overflowed).
pub const SNAPSHOT_MARK: u64 = u64::MAX;

/// Where a hold of the client named by the 64-bit id `old` (layout 1) is kept: the old id (8
/// bytes LE) followed by 24 zero bytes.
pub fn legacy_holder(old: u64) -> ClientId {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&old.to_le_bytes());
    ClientId(b)
}

impl Escrow {
    fn hold(&mut self, client: ClientId, id: &str, amount: &str, fx: &mut Effects<'_>) -> Vec<u8> {
        let (Ok(amount), true) = (amount.parse::<u64>(), (1..=64).contains(&id.len())) else {
            return b"err bad hold".to_vec();
        };
        let key = (client, id.to_string());
        let legacy = (legacy_holder(client.legacy_prefix()), id.to_string());
        if amount == 0
            || self.holds.contains_key(&key)
            || self.confirmed.contains_key(&key)
            || self.holds.contains_key(&legacy)
        {
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
        // The client's own hold, else a legacy hold of its old id (its refund task keyed by
        // the old id's decimal form, owned by the legacy owner the client matches).
        let (held, task) = if self.holds.contains_key(&key) {
            (key.clone(), refund_key(client, id))
        } else {
            let old = client.legacy_prefix();
            let legacy = (legacy_holder(old), id.to_string());
            if !self.holds.contains_key(&legacy) {
                return b"err no such hold".to_vec();
            }
            (legacy, format!("refund-{old}-{id}"))
        };
        if let Err(e) = fx.schedule(ScheduleRequest::Cancel(Target::Key(task))) {
            return format!("err {e}").into_bytes();
        }
        let amount = self.holds.remove(&held).unwrap_or_default();
        self.confirmed.insert(key, amount);
        b"ok confirmed".to_vec()
    }

    /// The refund task's payload: the hold's owner (32 bytes) and id; or, for a task scheduled
    /// before 256-bit ids, the owner's 64-bit id (8 bytes LE) and the hold's id.
    fn refund(&mut self, payload: &[u8]) -> Option<u64> {
        let key = Self::refund_target(payload)
            .filter(|k| self.holds.contains_key(k))
            .or_else(|| Self::legacy_refund_target(payload))?;
        let amount = self.holds.remove(&key)?;
        self.refunded += amount;
        Some(amount)
    }

    fn refund_target(payload: &[u8]) -> Option<(ClientId, String)> {
        let (owner, id) = payload.split_at_checked(32)?;
        let owner = ClientId(owner.try_into().ok()?);
        Some((owner, std::str::from_utf8(id).ok()?.to_string()))
    }

    fn legacy_refund_target(payload: &[u8]) -> Option<(ClientId, String)> {
        let (owner, id) = payload.split_at_checked(8)?;
        let owner = u64::from_le_bytes(owner.try_into().ok()?);
        Some((
            legacy_holder(owner),
            std::str::from_utf8(id).ok()?.to_string(),
        ))
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

    /// Layout 2: [`SNAPSHOT_MARK`], the counters, the holds and the confirmed holds (32-byte
    /// ids).
    fn snapshot(&self) -> Vec<u8> {
        let mut out = SNAPSHOT_MARK.to_le_bytes().to_vec();
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

    /// Layout 2, or layout 1 (no mark, 8-byte client ids: each hold kept under
    /// [`legacy_holder`]).
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let r = &mut &snapshot[..];
        let v2 = r.get(..8) == Some(&SNAPSHOT_MARK.to_le_bytes()[..]);
        if v2 {
            take_u64(r)?;
        }
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
                let client = if v2 {
                    ClientId(take(r, 32)?.try_into().map_err(|_| bad())?)
                } else {
                    legacy_holder(take_u64(r)?)
                };
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
        book_pages: 16,
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

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::host::ExecContext;
    use ccron::{MemPages, Tick};

    fn unhex(s: &str) -> Vec<u8> {
        let s = s.trim();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The escrow state main's code (`be3a95a`, 64-bit client ids) snapshotted: counters 70,
    /// 5, 3, 11; holds `h1` (100) of client 1 and `h2` (200) of client 2, `c1` (30) of client 1
    /// confirmed; client `n` being `ClientId::from_index(n).legacy_prefix()`.
    const STATE_V1: &str = include_str!("../tests/fixtures/escrow_v1.snapshot.hex");

    /// The whole escrow ledger main's code snapshotted after client 1 held `h1` (100) and `c1`
    /// (30), client 2 held `h2` (200) and client 1 confirmed `c1` (requests at agreed times
    /// 1,000,001 to 1,000,004 ms): state, book (layout 9, the refund tasks owned by 64-bit
    /// client ids, their payloads the 8-byte id and the hold's id), outbox.
    const LEDGER_V1: &str = include_str!("../tests/fixtures/escrow_v1.ledger.hex");

    fn old(n: u64) -> u64 {
        ClientId::from_index(n).legacy_prefix()
    }

    #[test]
    fn a_layout_1_state_restores_its_holds_under_legacy_holders() {
        let mut e = Escrow::default();
        e.restore(&unhex(STATE_V1)).unwrap();
        assert_eq!(
            (e.released, e.refunded, e.settlements, e.accrued),
            (70, 5, 3, 11)
        );
        assert_eq!(e.holds.len(), 2);
        assert_eq!(
            e.holds.get(&(legacy_holder(old(1)), "h1".into())),
            Some(&100)
        );
        assert_eq!(
            e.holds.get(&(legacy_holder(old(2)), "h2".into())),
            Some(&200)
        );
        assert_eq!(e.confirmed.len(), 1);
        assert_eq!(
            e.confirmed.get(&(legacy_holder(old(1)), "c1".into())),
            Some(&30)
        );
        // Layout 2 from now on, read back equal.
        let snap = e.snapshot();
        assert_eq!(snap[..8], SNAPSHOT_MARK.to_le_bytes());
        let mut back = Escrow::default();
        back.restore(&snap).unwrap();
        assert_eq!(back, e);
    }

    /// The weekday story keeps two batches of holds pending at once (each hold's refund task
    /// waits 48 h): the book must hold at least 24 with 256-bit owners and keys, and refuse
    /// the one past its capacity with a typed error. With 8 book pages it held 12 (the 13th
    /// hold refused, "the book's 2 record pages are full"), found by `tests/slow_relay_dst.rs`.
    #[test]
    fn the_weekday_book_holds_two_batches_of_pending_refunds() {
        let mut l = ledger_with(demo_policy(), WEEKDAY_TIMINGS);
        let client = ClientId::from_index(0);
        let mut refusal = None;
        for k in 1..=200u64 {
            let ctx = ExecContext {
                seq: k,
                agreed_time_ms: Some(1_000_000),
            };
            let out = l.execute(ctx, client, format!("hold h{k} {k}").as_bytes());
            if out != b"ok held" {
                refusal = Some(String::from_utf8_lossy(&out).into_owned());
                break;
            }
        }
        let held = l.state().holds.len();
        assert!(held >= 24, "held {held}, then {refusal:?}");
        let refusal = refusal.expect("a book of 16 pages fills before 200 holds");
        assert!(refusal.contains("record pages are full"), "{refusal}");
        assert_eq!(l.schedule_book().map(|b| b.len()), Some(held));
    }

    /// Main's whole ledger restored: the client whose 256-bit id starts with client 1's old id
    /// confirms its legacy hold (cancelling the refund task main's code scheduled, owned by the
    /// legacy owner); an id differing in one of those 8 bytes cannot; client 2's refund task
    /// (its 8-byte payload) still refunds `h2` when due.
    #[test]
    fn a_layout_1_ledger_confirms_and_refunds_its_legacy_holds() {
        let mut l = ledger();
        l.restore(&unhex(LEDGER_V1)).unwrap();
        assert_eq!(l.state().holds.len(), 2);
        let one = ClientId::from_index(1);
        let mut near = one;
        near.0[3] ^= 1;
        let ctx = |seq| ExecContext {
            seq,
            agreed_time_ms: Some(1_000_010),
        };
        assert_eq!(l.execute(ctx(10), near, b"confirm h1"), b"err no such hold");
        assert_eq!(l.execute(ctx(11), one, b"confirm h1"), b"ok confirmed");
        assert_eq!(l.state().confirmed.get(&(one, "h1".into())), Some(&100));
        assert_eq!(l.state().holds.len(), 1);
        let mut pages = MemPages::new(4_096, 64);
        l.on_tick(
            Tick::new(ESCROW, 12, Some(1_000_004 + REFUND_AFTER_MS + 1_000)),
            &mut pages,
        )
        .unwrap();
        let s = l.state();
        assert!(s.holds.is_empty(), "{s:?}");
        assert_eq!(s.refunded, 200, "h2 refunded, h1 (confirmed) not");
    }
}
