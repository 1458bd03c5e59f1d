//! The quickstart of `docs/user-guide.md`, section 12, as a test: a small ledger of one's own
//! run on the simulated PBFT cluster for 3 days across the 2026-03-29 DST change in Paris.
//!
//! - offers expire every day at `0 9 * * *` Europe/Paris (a cron table entry);
//! - a 10-minute periodic count (a periodic table entry);
//! - "remind me in 2 hours" delayed tasks, created by client requests (a schedule book).
//!
//! Asserted: the 09:00 job ran exactly three times, at 08:00Z, then 07:00Z twice (summer time),
//! on every replica; the periodic count ran on its 10-minute grid; every reminder ran once, 2 h
//! after it was admitted; and all replicas end in the same state.

use std::collections::BTreeMap;

use ccron::cron::{CronSchedule, ZoneRules};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Timing};
use ccron::{CronEntry, CronTable, CronTableRegistry, PageAllocator, Periodic};
use serde::{Deserialize, Serialize};
use sim_bft::app::ClientId;
use sim_bft::app::{AppError, Application, ExecContext};
use sim_bft::crypto::{Digest32, sha256};
use sim_bft::ledgers::{BookConfig, CronLedger, LedgerScheduler};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{SimRng, Workload};

const SHOP: u32 = 1; // the component: its ticks run the table and the book
const EXPIRE_OFFERS: u32 = 0; // table positions
const COUNT: u32 = 1;
const REMINDERS: u32 = 9; // the book's runs are counted under this position
const HOUR: i64 = 3_600_000;

/// The ledger's own state. An [`Application`]: execute, digest, snapshot, restore.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Shop {
    open_offers: u64,
    expired_offers: u64,
    counts: u64,
    reminded: Vec<(u32, u64, i64)>, // (client, request number, due instant)
}

impl Application for Shop {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, payload: &[u8]) -> Vec<u8> {
        match payload {
            b"offer" => {
                self.open_offers += 1;
                b"ok".to_vec()
            }
            _ => b"err unknown request".to_vec(),
        }
    }
    fn digest(&self) -> Digest32 {
        sha256(&self.snapshot()) // small state: hashing it all is fine (see the guide, 12)
    }
    fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        *self =
            serde_json::from_slice(snapshot).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        Ok(())
    }
}

/// The same tables and handlers on every replica, at every boot.
fn shop(_replica: u32) -> CronLedger<Shop> {
    let paris = ZoneRules::from_iana("Europe/Paris").unwrap();
    let nine_am = CronSchedule::parse_in("0 9 * * *", paris).unwrap();
    let mut pages = PageAllocator::new(1, 63); // page 0 holds the replica's agreed time
    let mut table = CronTable::with_persistence(SHOP, pages.allocate(2).unwrap(), 16);
    table
        .add(CronEntry::<Shop>::cron(EXPIRE_OFFERS, nine_am, |ctx| {
            ctx.state.expired_offers += std::mem::take(&mut ctx.state.open_offers);
        }))
        .unwrap();
    table
        .add(CronEntry::<Shop>::periodic(
            COUNT,
            Periodic::every_ms(600_000).unwrap(),
            |ctx| {
                ctx.state.counts += 1;
            },
        ))
        .unwrap();
    let mut registry = CronTableRegistry::new();
    registry.register(table).unwrap();

    let mut handlers = Handlers::<Shop>::new();
    handlers.register("remind", |ctx| {
        let (client, number) = ctx.payload.split_at(4);
        let client = u32::from_le_bytes(client.try_into().unwrap());
        let number = u64::from_le_bytes(number.try_into().unwrap());
        let due = ctx.due.time_ms().unwrap();
        ctx.state.reminded.push((client, number, due));
    });
    let book = BookConfig {
        component: SHOP,
        position: REMINDERS,
        limits: Limits::default(),
        book_pages: 8,
        outbox_pages: 2,
    };
    CronLedger::new(Shop::default(), registry).with_scheduler(LedgerScheduler::new(book, handlers))
}

/// Each client alternates: place an offer, ask to be reminded in 2 hours.
struct Customer(u32);

impl Workload for Customer {
    fn payload(&mut self, number: u64, _rng: &mut SimRng) -> Vec<u8> {
        if number.is_multiple_of(2) {
            return b"offer".to_vec();
        }
        let remind = NewSchedule::new("remind", Timing::AfterMs(2 * HOUR))
            .with_payload([&self.0.to_le_bytes()[..], &number.to_le_bytes()].concat());
        ccron::codec::to_blob(&ScheduleRequest::Create(remind)).unwrap()
    }
    fn on_reply(&mut self, _number: u64, result: &[u8]) -> Result<(), String> {
        match result.starts_with(b"ok") {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(result).into_owned()),
        }
    }
}

#[test]
fn three_days_across_the_paris_dst_change() {
    let day = 24 * HOUR as u64;
    let sim = Cluster::builder()
        .seed(7)
        .start_at("2026-03-28T00:00:00Z")
        .unwrap()
        .duration_ms(3 * day, 60_000)
        .ticks(vec![SHOP], 60_000) // each replica proposes a tick a minute
        .clients(2, 5 * HOUR as u64)
        .workload(|client| Box::new(Customer(client)))
        .app(shop)
        .build()
        .unwrap();
    let out = sim.run();
    assert!(
        out.ok(),
        "{:?}\nreplay: {}",
        out.violations,
        out.replay_command()
    );

    let at = |s: &str| ccron::cron::parse_rfc3339_ms(s).unwrap();
    let nine_am = [
        at("2026-03-28T08:00:00Z"),
        at("2026-03-29T07:00:00Z"),
        at("2026-03-30T07:00:00Z"),
    ];
    let mut fires = BTreeMap::<(u32, u32), Vec<(Option<i64>, i64)>>::new();
    for e in &out.events.fires {
        let agreed = e.agreed_time_ms.unwrap();
        fires
            .entry((e.replica, e.position))
            .or_default()
            .push((e.due_ms, agreed));
    }
    for replica in 0..4 {
        // 09:00 Paris: exactly three runs, due at the instants above, run within a tick period.
        let runs = &fires[&(replica, EXPIRE_OFFERS)];
        let dues: Vec<i64> = runs.iter().map(|(due, _)| due.unwrap()).collect();
        assert_eq!(dues, nine_am, "replica {replica}");
        assert!(
            runs.iter()
                .all(|(d, t)| (0..=60_000).contains(&(t - d.unwrap()))),
            "{runs:?}"
        );
        // The 10-minute count: every run on one drift-free grid, none missed.
        let counts = &fires[&(replica, COUNT)];
        assert!(
            counts
                .windows(2)
                .all(|w| w[1].0.unwrap() - w[0].0.unwrap() == 600_000)
        );
        assert!(counts.len() >= 432, "{}", counts.len());
        // Reminders: each ran 2 hours (plus at most a tick period) after it was requested.
        let reminders = &fires[&(replica, REMINDERS)];
        assert_eq!(reminders.len(), 14, "replica {replica}: {reminders:?}");
        assert!(
            reminders
                .iter()
                .all(|(d, t)| (0..=60_000).contains(&(t - d.unwrap())))
        );
    }
    // Typed access to every replica's final state: all equal, and what the fires say.
    let state = |i| {
        out.app(i, |l: &CronLedger<Shop>| l.state().clone())
            .unwrap()
    };
    let s0 = state(0);
    assert!((1..4).all(|i| state(i) == s0));
    assert_eq!(s0.counts as usize, fires[&(0, COUNT)].len());
    assert_eq!(s0.reminded.len(), 14);
    // Each reminder is due 2 hours after the agreed time of the batch that admitted its request.
    // Client c sends request k at c * 2.5 h + k * 5 h of true time; agreed time stays within
    // the time service's bounds of true time (the checker holds it to 7 s behind, 1 s ahead).
    let epoch = at("2026-03-28T00:00:00Z");
    for &(client, number, due) in &s0.reminded {
        let sent = i64::from(client) * 5 * HOUR / 2 + number as i64 * 5 * HOUR;
        let after_admission = due - (epoch + sent) - 2 * HOUR;
        assert!(
            (-7_000..1_000).contains(&after_admission),
            "{client}/{number}: {after_admission}"
        );
    }
    assert_eq!(s0.expired_offers + s0.open_offers, 15);
}
