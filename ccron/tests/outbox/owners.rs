//! Per-owner outbox quotas, and the outbox's layouts 4 (before owners) and 5 (64-bit owners)
//! still load.
//!
//! * `layout_4_fixture_loads_and_saves_as_layout_5`: bytes written by the code before record
//!   owners (`tests/fixtures/outbox_v4.*.hex`, the canonical encoding and the reserved page)
//!   load with every record owned by the host (exempt from quotas) and save as the current
//!   layout (6).
//! * `layout_5_fixture_loads_with_legacy_owners_and_saves_as_layout_6`: bytes main's code
//!   wrote (`tests/fixtures/outbox_v5.*.hex`) load with their client owners as legacy owners.
//! * `write_layout_4_fixture` (ignored): how the fixture was written, by the layout-4 code.
//! * `a_client_at_its_outbox_quota_leaves_every_other_clients_emits_unchanged`: a hog with
//!   sixty emitting schedules and twenty emitting requests a step beside three honest clients;
//!   the honest replies and records equal those of a run without the hog; with the quota check
//!   disabled they do not (the hog fills the outbox).

use std::fs;
use std::path::{Path, PathBuf};

use ccron::host::{
    AppError, Application, BookConfig, ClientId, CronLedger, Digest32, Effects, ExecContext,
    LedgerScheduler,
};
use ccron::outbox::{
    EmitBudget, OccurrenceId, Origin, Outbox, OutboxLimits, OutboxRecord, OutboxResult,
    ResultOutcome, WorkerKey, WorkerKeyRequest, WorkerSigner,
};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Timing};
use ccron::{
    CronTableRegistry, MemPages, PageRange, Policy, Principal, Quota, ReservedPages, Tick,
};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    let t = text.trim();
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
        .collect()
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn fixture(name: &str) -> Vec<u8> {
    unhex(&fs::read_to_string(fixture_path(name)).unwrap())
}

/// What the layout-4 fixture holds: records 2..=6 of component 7 (record 3 with a result,
/// record 4 with a topic and a type) and one registered worker key.
fn layout_4_content() -> Outbox {
    let mut ob = Outbox::new(OutboxLimits::default());
    for k in 0..6u64 {
        let mut r = OutboxRecord::new(
            OccurrenceId::new(7, 0x0102_0304_0506_0708, k),
            "shop.cancel",
            format!("order-{k}").into_bytes(),
        );
        if k == 3 {
            r = r.with_topic("payments").with_kind("cancel");
        }
        ob.append(r).unwrap();
    }
    ob.trim_below(2);
    let r3 = OutboxResult::unsigned(
        3,
        ob.get(3).unwrap().id,
        ResultOutcome::Answer(b"confirmed".to_vec()),
    );
    ob.accept_result(&Policy::default(), &Principal::Host, &r3)
        .unwrap();
    let key: WorkerKey = WorkerSigner::from_seed([4; 32]).public();
    ob.apply_worker_keys(
        &Policy::default(),
        &Principal::Host,
        &WorkerKeyRequest::Register {
            key,
            handlers: vec!["shop.cancel".into()],
        },
    )
    .unwrap();
    ob
}

/// Writes `tests/fixtures/outbox_v4.*.hex` (run by the layout-4 code only:
/// `CCRON_WRITE_OUTBOX_V4=1 cargo test -p ccron --test outbox owners::write -- --ignored`).
#[test]
#[ignore = "writes the layout-4 fixture; only with the layout-4 code"]
fn write_layout_4_fixture() {
    if std::env::var_os("CCRON_WRITE_OUTBOX_V4").is_none() {
        return;
    }
    let ob = layout_4_content();
    let encoded = ob.encode().unwrap();
    assert_eq!(encoded[0], 4, "only the layout-4 code writes this fixture");
    fs::write(fixture_path("outbox_v4.encoded.hex"), hex(&encoded) + "\n").unwrap();
    let range = PageRange::new(0, 2).unwrap();
    let mut pages = MemPages::new(4096, 2);
    ob.save(&mut pages, range).unwrap();
    assert!(pages.load(1).unwrap().is_none_or(|p| p.is_empty()));
    let page0 = pages.load(0).unwrap().unwrap().to_vec();
    fs::write(fixture_path("outbox_v4.page0.hex"), hex(&page0) + "\n").unwrap();
}

#[test]
fn layout_4_fixture_loads_and_saves_as_layout_5() {
    let expected = layout_4_content();
    let v4 = fixture("outbox_v4.encoded.hex");
    assert_eq!(v4[0], 4, "the fixture is layout 4");
    let ob = Outbox::decode(&v4, OutboxLimits::default()).unwrap();
    assert_eq!(ob, expected);
    // Admitted before quotas: every record the host's, charged to no client.
    assert!((2..=6).all(|i| ob.owner_of(i) == Some(Principal::Host)));
    assert_eq!(ob.owner_usage(&Principal::Host), (5, 5 * 18 + 14));
    assert!(ob.has_result(3) && !ob.has_result(4));
    assert_eq!(ob.workers().len(), 1);
    let v6 = ob.encode().unwrap();
    assert_eq!(
        v6[0], 6,
        "saved as the current layout (6: 256-bit client ids)"
    );
    assert_eq!(Outbox::decode(&v6, OutboxLimits::default()).unwrap(), ob);

    // The reserved page, as a layout-4 replica saved it.
    let range = PageRange::new(0, 2).unwrap();
    let mut pages = MemPages::new(4096, 2);
    pages
        .restore(&[(0, fixture("outbox_v4.page0.hex"))])
        .unwrap();
    let mut loaded = Outbox::load(&pages, range, OutboxLimits::default()).unwrap();
    assert_eq!(loaded, expected);
    // A client's record after the migration is charged to it, and survives a save and load.
    let id = OccurrenceId::new(7, 9, 9);
    let index = loaded
        .append_as(
            OutboxRecord::new(id, "h", vec![0; 3]),
            Principal::Client(ccron::ClientId([4; 32])),
        )
        .unwrap();
    loaded.save(&mut pages, range).unwrap();
    assert_ne!(
        pages.load(0).unwrap().unwrap().to_vec(),
        fixture("outbox_v4.page0.hex"),
        "saved again, as layout 6"
    );
    let again = Outbox::load(&pages, range, OutboxLimits::default()).unwrap();
    assert_eq!(again, loaded);
    assert_eq!(
        again.owner_of(index),
        Some(Principal::Client(ccron::ClientId([4; 32])))
    );
    assert_eq!(
        again.owner_usage(&Principal::Client(ccron::ClientId([4; 32]))),
        (1, 4)
    );
}

/// What the layout-5 fixture holds, as this build reads it: records 3..=7 (indices) of
/// component 7 (record 3 with a result, record 5 with a topic and a type), owned by the host
/// (3), main's client 5 (4, 5), client 6 (6) and client `u64::MAX` (7), now legacy owners; one
/// worker key.
/// Written by main's code (be3a95a) from the same content with `Principal::Client(n)` owners
/// (a throwaway generator, not kept).
fn layout_5_content() -> Outbox {
    let mut ob = Outbox::new(OutboxLimits::default());
    let owners = [
        Principal::Host,
        Principal::Host,
        Principal::Host,
        Principal::LegacyClient(5),
        Principal::LegacyClient(5),
        Principal::LegacyClient(6),
        Principal::LegacyClient(u64::MAX),
    ];
    for (k, owner) in owners.into_iter().enumerate() {
        let k = k as u64;
        let mut r = OutboxRecord::new(
            OccurrenceId::new(7, 0x0102_0304_0506_0708, k),
            "shop.cancel",
            format!("order-{k}").into_bytes(),
        );
        if k == 4 {
            r = r.with_topic("payments").with_kind("cancel");
        }
        ob.append_as(r, owner).unwrap();
    }
    ob.trim_below(2);
    let r3 = OutboxResult::unsigned(
        3,
        ob.get(3).unwrap().id,
        ResultOutcome::Answer(b"confirmed".to_vec()),
    );
    ob.accept_result(&Policy::default(), &Principal::Host, &r3)
        .unwrap();
    let key: WorkerKey = WorkerSigner::from_seed([4; 32]).public();
    ob.apply_worker_keys(
        &Policy::default(),
        &Principal::Host,
        &WorkerKeyRequest::Register {
            key,
            handlers: vec!["shop.cancel".into()],
        },
    )
    .unwrap();
    ob
}

/// Outbox layout 5 (owners named by 64-bit ids), bytes main's code wrote: the encoding and the
/// reserved page load with each client owner a legacy owner (its quota usage counted under it),
/// and save as layout 6, which reloads equal.
#[test]
fn layout_5_fixture_loads_with_legacy_owners_and_saves_as_layout_6() {
    let expected = layout_5_content();
    let v5 = fixture("outbox_v5.encoded.hex");
    assert_eq!(v5[0], 5, "the fixture is layout 5");
    let ob = Outbox::decode(&v5, OutboxLimits::default()).unwrap();
    assert_eq!(ob, expected);
    assert_eq!(ob.owner_of(3), Some(Principal::Host));
    assert_eq!(ob.owner_of(4), Some(Principal::LegacyClient(5)));
    assert_eq!(ob.owner_of(7), Some(Principal::LegacyClient(u64::MAX)));
    assert_eq!(ob.owner_usage(&Principal::LegacyClient(5)).0, 2);
    assert_eq!(ob.owner_usage(&Principal::LegacyClient(6)).0, 1);
    assert!(ob.has_result(3) && !ob.has_result(4));
    let v6 = ob.encode().unwrap();
    assert_eq!(v6[0], 6);
    assert_eq!(Outbox::decode(&v6, OutboxLimits::default()).unwrap(), ob);

    let range = PageRange::new(0, 2).unwrap();
    let mut pages = MemPages::new(4096, 2);
    pages
        .restore(&[(0, fixture("outbox_v5.page0.hex"))])
        .unwrap();
    let mut loaded = Outbox::load(&pages, range, OutboxLimits::default()).unwrap();
    assert_eq!(loaded, expected);
    loaded.trim_below(5);
    loaded.save(&mut pages, range).unwrap();
    let again = Outbox::load(&pages, range, OutboxLimits::default()).unwrap();
    assert_eq!(again, loaded);
    assert_eq!(again.owner_usage(&Principal::LegacyClient(5)).0, 1);
}

#[test]
fn a_layout_6_outbox_with_owners_out_of_step_is_refused() {
    let mut ob = Outbox::new(OutboxLimits::default());
    ob.append_as(
        OutboxRecord::new(OccurrenceId::new(1, 1, 1), "h", vec![]),
        Principal::Client(ccron::ClientId([1; 32])),
    )
    .unwrap();
    let mut bytes = ob.encode().unwrap();
    // The owners vector is last (fixed-width big-endian): its length 1, then the owner's tag 2
    // (`Principal::Client`) and its 32-byte id. Drop the owner and make the length 0.
    let tail = [
        &1u64.to_be_bytes()[..],
        &2u32.to_be_bytes(),
        ccron::ClientId([1; 32]).as_bytes(),
    ]
    .concat();
    assert!(bytes.ends_with(&tail));
    bytes.truncate(bytes.len() - tail.len());
    bytes.extend(0u64.to_be_bytes());
    assert!(matches!(
        Outbox::decode(&bytes, OutboxLimits::default()),
        Err(ccron::outbox::OutboxError::Invalid(_))
    ));
}

// The hostile client: one client at its outbox quota leaves every other client's requests and
// emits unchanged.

const C: u32 = 1;
const CONSUMER: ClientId = ccron::ClientId([99; 32]);
const HOG: ClientId = ccron::ClientId([66; 32]);
const HONEST: [ClientId; 3] = [
    ccron::ClientId([1; 32]),
    ccron::ClientId([2; 32]),
    ccron::ClientId([3; 32]),
];
/// Recurring schedules the hog holds: alone they would fill the outbox between two trims.
const HOG_SCHEDULES: u32 = 60;

/// Emits one record per `ping` request; `sched` creates the client's recurring schedule,
/// whose handler emits one record per run.
#[derive(Debug, Default)]
struct St;

impl Application for St {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        self.execute_with(ctx, client, payload, &mut Effects::none())
    }

    fn execute_with(
        &mut self,
        _: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut Effects<'_>,
    ) -> Vec<u8> {
        let text = String::from_utf8_lossy(payload).to_string();
        let reply = match text.split_whitespace().collect::<Vec<_>>()[..] {
            ["ping", n] => fx
                .emit("ping", format!("{}-{n}", client.short()).into_bytes())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            ["sched", name] => {
                let name = format!("{}-{name}", client.short());
                let every = Timing::Every {
                    period_ms: 1_000,
                    start_ms: None,
                };
                fx.schedule(ScheduleRequest::Create(
                    NewSchedule::new("beat", every)
                        .with_key(name.clone())
                        .with_payload(name.into_bytes()),
                ))
                .map(|_| ())
                .map_err(|e| e.to_string())
            }
            _ => Err("unknown".into()),
        };
        match reply {
            Ok(()) => b"ok".to_vec(),
            Err(e) => format!("err {e}").into_bytes(),
        }
    }

    fn digest(&self) -> Digest32 {
        [0; 32]
    }
    fn snapshot(&self) -> Vec<u8> {
        Vec::new()
    }
    fn restore(&mut self, _: &[u8]) -> Result<(), AppError> {
        Ok(())
    }
}

fn quota_ledger(policy: &Policy) -> CronLedger<St> {
    let mut handlers = Handlers::<St>::new();
    handlers.register("beat", |ctx| {
        let payload = ctx.payload.to_vec();
        ctx.emit("beat", payload)?;
        Ok::<(), ccron::schedule::HandlerError>(())
    });
    let cfg = BookConfig {
        component: C,
        position: 9,
        limits: Limits::default(),
        book_pages: 64,
        outbox_pages: 8,
    };
    let book = LedgerScheduler::try_new(cfg, handlers)
        .unwrap()
        .with_policy(policy.clone())
        .with_emit_budget(1, 64);
    CronLedger::new(St, CronTableRegistry::new())
        .with_scheduler(book)
        .with_request_emits(EmitBudget::new(1, 64))
}

/// What the honest clients saw: their replies, and their records in append order (owner,
/// origin, handler, payload: indices and schedule ids depend on everyone's traffic).
#[derive(Debug, PartialEq, Eq)]
struct HonestView {
    replies: Vec<(ClientId, String)>,
    records: Vec<(Principal, Origin, String, Vec<u8>)>,
}

/// Forty steps of honest traffic (a ping every other step, a schedule each), with or without
/// the hog ([`HOG_SCHEDULES`] schedules, twenty pings a step); the consumer trims every ten steps.
/// Returns the honest view and the hog's largest pending count and the quota refusals.
fn run(policy: &Policy, hostile: bool) -> (HonestView, u64, u64) {
    let mut l = quota_ledger(policy);
    let mut pages = MemPages::new(4_096, 2);
    let mut seq = 0u64;
    let mut view = HonestView {
        replies: Vec::new(),
        records: Vec::new(),
    };
    let mut seen = 0u64;
    let mut hog_peak = 0;
    let mut send = |l: &mut CronLedger<St>, client: ClientId, payload: &[u8], t: i64| {
        seq += 1;
        let ctx = ExecContext {
            seq,
            agreed_time_ms: Some(t),
        };
        String::from_utf8_lossy(&l.execute(ctx, client, payload)).to_string()
    };
    for c in HONEST {
        let r = send(&mut l, c, b"sched a", 0);
        view.replies.push((c, r));
    }
    if hostile {
        for k in 0..HOG_SCHEDULES {
            send(&mut l, HOG, format!("sched {k}").as_bytes(), 0);
        }
    }
    for step in 0..40i64 {
        let t = step * 500;
        if step % 2 == 0 {
            for c in HONEST {
                let r = send(&mut l, c, format!("ping {step}").as_bytes(), t);
                view.replies.push((c, r));
            }
        }
        if hostile {
            for k in 0..20 {
                send(&mut l, HOG, format!("ping {step}-{k}").as_bytes(), t);
            }
        }
        if step % 2 == 1 {
            l.on_tick(Tick::new(C, 1_000 + step as u64, Some(t)), &mut pages)
                .unwrap();
        }
        let outbox = l.scheduler().unwrap().outbox();
        hog_peak = hog_peak.max(outbox.owner_usage(&Principal::Client(HOG)).0);
        for (i, r) in outbox.iter().filter(|(i, _)| *i > seen) {
            let owner = outbox.owner_of(i).unwrap();
            if owner != Principal::Client(HOG) {
                view.records
                    .push((owner, r.id.origin(), r.handler.clone(), r.payload.clone()));
            }
        }
        seen = outbox.head();
        if step % 10 == 9 {
            let trim = ccron::host::scheduler::outbox_delivered_payload(seen);
            let reply = send(&mut l, CONSUMER, &trim, t);
            assert!(reply.starts_with("ok"), "{reply}");
        }
    }
    let refusals = l.scheduler().unwrap().outbox().quota_refusals();
    (view, hog_peak, refusals)
}

#[test]
fn a_client_at_its_outbox_quota_leaves_every_other_clients_emits_unchanged() {
    let quota = Quota::default().with_outbox(8, 1 << 20);
    let policy = Policy::default()
        .with_outbox_consumer(CONSUMER)
        .with_quota(quota);
    let (with, hog_peak, refusals) = run(&policy, true);
    let (without, _, _) = run(&policy, false);
    assert_eq!(with, without);
    assert_eq!(hog_peak, 8, "the hog reached its quota and never passed it");
    assert!(refusals > 0);
    // The honest clients met their own quota too (the same way in both runs), and both kinds
    // of records got through.
    assert!(with.replies.iter().any(|(_, r)| r.contains("outbox quota")));
    assert!(with.replies.iter().any(|(_, r)| r == "ok"));
    for origin in [Origin::State, Origin::Schedule] {
        assert!(with.records.iter().any(|r| r.1 == origin));
    }
    // Without the quota check the hog fills the outbox and the honest clients are refused.
    let open = policy.with_quota(quota.with_outbox(u64::MAX, u64::MAX));
    let (with, hog_peak, _) = run(&open, true);
    let (without, _, _) = run(&open, false);
    assert!(hog_peak > 8);
    assert_ne!(with, without);
}
