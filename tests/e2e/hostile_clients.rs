//! A hostile client on the simulated cluster (issue 10's leftover), with custom workloads.
//!
//! Two honest clients each own a recurring schedule (keys `c0`, `c1`) whose handler emits one
//! outbox record per run, and keep creating one-shot tasks. A third client tries everything the
//! default policy forbids it: cancel, replace, upsert, pause and resume the others' schedules,
//! trim the outbox (it is not the consumer), install a zone (it is not an admin).
//!
//! Oracle: no hostile request is answered `ok` by any honest replica (the workload's own
//! `on_reply`, reported as a `Workload` violation), every honest request is, and at the end on
//! every replica the honest schedules are intact (same owner, timing, not paused), the outbox
//! was never trimmed and holds exactly the honest schedules' runs, and the denials were counted.

use ccron::cron::ZoneRules;
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Target, Timing};
use ccron::{CronTableRegistry, Principal};
use serde::{Deserialize, Serialize};
use sim_bft::app::ClientId;
use sim_bft::app::{AppError, Application, ExecContext};
use sim_bft::crypto::{Digest32, sha256};
use sim_bft::ledgers::scheduler::outbox_delivered_payload;
use sim_bft::ledgers::{BookConfig, CronLedger, LedgerScheduler};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{FaultConfig, SimRng, ViolationKind, Workload};

const BOOK: u32 = 1;
const HOSTILE: u32 = 2;
const PERIOD_MS: i64 = 2_000;

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pings {
    runs: u64,
    one_shots: u64,
}

impl Application for Pings {
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, _payload: &[u8]) -> Vec<u8> {
        b"err not a schedule request".to_vec()
    }
    fn digest(&self) -> Digest32 {
        sha256(&self.snapshot())
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

fn ledger(_replica: u32) -> CronLedger<Pings> {
    let mut handlers = Handlers::<Pings>::new();
    handlers.register("ping", |ctx| {
        ctx.state.runs += 1;
        let _ = ctx.emit("ping", ctx.payload.to_vec());
    });
    handlers.register("once", |ctx| ctx.state.one_shots += 1);
    let book = BookConfig {
        component: BOOK,
        position: 0,
        limits: Limits::default(),
        book_pages: 32,
        outbox_pages: 8,
    };
    let book = LedgerScheduler::try_new(book, handlers).unwrap();
    CronLedger::new(Pings::default(), CronTableRegistry::new()).with_scheduler(book)
}

fn payload(req: &ScheduleRequest) -> Vec<u8> {
    ccron::codec::to_blob(req).unwrap()
}

/// Client 0 and 1: first their recurring schedule, then one-shot tasks; every reply `ok`.
struct Honest(u32);

impl Workload for Honest {
    fn payload(&mut self, number: u64, _rng: &mut SimRng) -> Vec<u8> {
        let s = if number == 0 {
            let every = Timing::Every {
                period_ms: PERIOD_MS,
                start_ms: None,
            };
            NewSchedule::new("ping", every).with_key(format!("c{}", self.0))
        } else {
            NewSchedule::new("once", Timing::AfterMs(300))
        };
        payload(&ScheduleRequest::Create(
            s.with_payload(format!("client {}", self.0)),
        ))
    }
    fn on_reply(&mut self, number: u64, result: &[u8]) -> Result<(), String> {
        match result.starts_with(b"ok") {
            true => Ok(()),
            false => Err(format!(
                "honest request {number} refused: {}",
                String::from_utf8_lossy(result)
            )),
        }
    }
}

/// Client 2: every request is one the policy must refuse.
struct Hostile;

impl Workload for Hostile {
    fn payload(&mut self, number: u64, rng: &mut SimRng) -> Vec<u8> {
        let id = Target::Id(1 + rng.below(6));
        let key = Target::Key(format!("c{}", rng.below(2)));
        let target = if rng.chance(0.5) { id } else { key };
        let theirs =
            NewSchedule::new("ping", Timing::AfterMs(1)).with_key(format!("c{}", rng.below(2)));
        match number % 8 {
            0 => payload(&ScheduleRequest::Cancel(target)),
            1 => payload(&ScheduleRequest::Replace {
                target,
                schedule: NewSchedule::new("once", Timing::AfterMs(1)),
            }),
            2 => payload(&ScheduleRequest::Upsert(theirs)),
            3 => payload(&ScheduleRequest::Pause(target)),
            4 => payload(&ScheduleRequest::Resume(target)),
            5 => outbox_delivered_payload(rng.below(20)),
            6 => payload(&ScheduleRequest::InstallZone(
                ZoneRules::from_iana("Europe/Paris").unwrap(),
            )),
            _ => payload(&ScheduleRequest::Cancel(Target::Id(1 + rng.below(2)))),
        }
    }
    fn on_reply(&mut self, number: u64, result: &[u8]) -> Result<(), String> {
        match result.starts_with(b"ok") {
            true => Err(format!(
                "hostile request {number} answered {}",
                String::from_utf8_lossy(result)
            )),
            false => Ok(()),
        }
    }
}

fn workload(client: u32) -> Box<dyn Workload> {
    match client {
        HOSTILE => Box::new(Hostile),
        c => Box::new(Honest(c)),
    }
}

#[test]
fn a_hostile_client_changes_nothing_of_the_others() {
    for seed in [1, 2] {
        let sim = Cluster::builder()
            .seed(seed)
            .duration_ms(20_000, 10_000)
            .ticks(vec![BOOK], 250)
            .clients(3, 200)
            .faults(FaultConfig {
                crashes: 1,
                ..FaultConfig::default()
            })
            .workload(workload)
            .app(ledger)
            .build()
            .unwrap();
        let out = sim.run();
        assert!(
            out.ok(),
            "seed {seed}: {:?}\n{}",
            out.violations,
            out.replay_command()
        );
        assert!(out.stats.replies > 100, "{:?}", out.stats);
        for replica in 0..4 {
            out.app(replica, |l: &CronLedger<Pings>| {
                let book = l.scheduler().unwrap();
                for client in [0u64, 1] {
                    let key = format!("c{client}");
                    let info = book
                        .book()
                        .ids()
                        .filter_map(|id| book.book().get(id))
                        .find(|i| i.schedule.key.as_deref() == Some(key.as_str()));
                    let info = info.unwrap_or_else(|| panic!("replica {replica}: {key} gone"));
                    assert_eq!(
                        info.owner,
                        Principal::Client(sim_bft::node::ledger_client(client))
                    );
                    assert!(!info.paused, "replica {replica}: {key} paused");
                    assert_eq!(info.schedule.handler, "ping");
                    assert!(matches!(
                        info.schedule.timing,
                        Timing::Every {
                            period_ms: PERIOD_MS,
                            ..
                        }
                    ));
                }
                // Never trimmed, and every record is a run of an honest recurring schedule.
                let outbox = book.outbox();
                assert_eq!(outbox.first_index(), 1, "replica {replica}: outbox trimmed");
                assert_eq!(outbox.len() as u64, l.state().runs);
                assert!(
                    l.state().runs >= 2 * 10,
                    "replica {replica}: {:?}",
                    l.state()
                );
                assert!(l.state().one_shots > 0);
                assert!(book.denied() > 0 || replica_restarted_late(&out, replica));
            })
            .unwrap();
        }
        assert!(
            out.violations
                .iter()
                .all(|v| v.kind != ViolationKind::Workload)
        );
    }
}

/// `denied` is a per-boot counter: a replica that restarted after the last hostile request
/// it executed may show 0.
fn replica_restarted_late(out: &sim_bft::sim::SimOutcome, replica: u32) -> bool {
    out.params.crashes.iter().any(|c| c.node == replica)
}
