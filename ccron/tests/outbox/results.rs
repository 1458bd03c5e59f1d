//! Results never lost, applied once; and the outbox's layout 3 (before worker keys) still loads.
//!
//! * `a_crash_at_every_step_applies_each_result_exactly_once`: the whole way of a result, from
//!   the worker's signed answer through the consumer's durable [`ResultJournal`], its
//!   acknowledgement and saved progress, to the ledger's [`Outbox::accept_result`] and the
//!   journal's "applied" mark; the consumer crashes before each durable step in turn (and, at a
//!   journal append, also with that append torn), restarts from its files, and every record
//!   ends with exactly one result applied and its effect performed once.
//! * `layout_3_fixture_loads_and_saves_as_the_current_layout`: bytes written by the code before
//!   worker keys (`tests/fixtures/outbox_v3.*.hex`, both the canonical encoding and the reserved
//!   page) load with an empty registry and save as the current layout (5).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use ccron::outbox::{
    AckOutcome, ConsumerConfig, DedupeLimits, DedupeTable, DedupeVerdict, FailureReason,
    FileDeadLetters, FileProgressStore, JournalLimits, OccurrenceId, Outbox, OutboxLimits,
    OutboxRecord, OutboxResult, PersistentConsumer, Remembered, ResultApplied, ResultJournal,
    ResultOutcome, WorkerSigner, delivery_digest,
};
use ccron::{MemPages, PageRange, Policy, Principal, ReservedPages};

const CHAIN: &[u8] = b"results-test";
const CONSUMER: u64 = 5;
const RECORDS: u64 = 6;

fn unhex(text: &str) -> Vec<u8> {
    let t = text.trim();
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
        .collect()
}

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    unhex(&fs::read_to_string(path).unwrap())
}

#[test]
fn layout_3_fixture_loads_and_saves_as_the_current_layout() {
    // What the fixture holds (written by the layout-3 code): records 2..=5 of component 7,
    // record 3 with a result, record 2 with a topic and a type.
    let mut expected = Outbox::new(OutboxLimits::default());
    for k in 0..5u64 {
        let mut r = OutboxRecord::new(
            OccurrenceId::new(7, 0x0102_0304_0506_0708, k),
            "shop.cancel",
            format!("order-{k}").into_bytes(),
        );
        if k == 2 {
            r = r.with_topic("payments").with_kind("cancel");
        }
        expected.append(r).unwrap();
    }
    expected.trim_below(2);
    let r3 = OutboxResult::unsigned(
        3,
        expected.get(3).unwrap().id,
        ResultOutcome::Answer(b"confirmed".to_vec()),
    );
    expected
        .accept_result(&Policy::default(), &Principal::Host, &r3)
        .unwrap();

    let v3 = fixture("outbox_v3.encoded.hex");
    assert_eq!(v3[0], 3, "the fixture is layout 3");
    let ob = Outbox::decode(&v3, OutboxLimits::default()).unwrap();
    assert_eq!(ob, expected);
    assert!(ob.workers().is_empty());
    assert!(ob.has_result(3) && !ob.has_result(4));
    let current = ob.encode().unwrap();
    assert_eq!(current[0], 6, "saved as the current layout (6)");
    assert_eq!(
        Outbox::decode(&current, OutboxLimits::default()).unwrap(),
        ob
    );

    // The reserved page, as a layout-3 replica saved it.
    let range = PageRange::new(0, 2).unwrap();
    let mut pages = MemPages::new(4096, 2);
    pages
        .restore(&[(0, fixture("outbox_v3.page0.hex"))])
        .unwrap();
    let loaded = Outbox::load(&pages, range, OutboxLimits::default()).unwrap();
    assert_eq!(loaded, expected);
    loaded.save(&mut pages, range).unwrap();
    assert_ne!(
        pages.load(0).unwrap().unwrap().to_vec(),
        fixture("outbox_v3.page0.hex"),
        "saved again, as the current layout"
    );
    assert_eq!(
        Outbox::load(&pages, range, OutboxLimits::default()).unwrap(),
        expected
    );
}

/// The consumer crashed: the durable step it was about to take did not happen.
#[derive(Debug)]
struct Crash;

/// The durable steps, counted down to the crash.
struct Budget {
    left: usize,
    /// Crash in the middle of a journal append (its tail torn) rather than before it.
    torn: bool,
}

/// Everything that survives the consumer's crash: the ledger (replicated state), the worker
/// (another process), the consumer's files.
struct World {
    dir: PathBuf,
    ledger: Outbox,
    policy: Policy,
    reactions: BTreeMap<u64, u32>,
    worker: DedupeTable,
    signer: WorkerSigner,
    effects: BTreeMap<OccurrenceId, u32>,
}

impl World {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ccron-results-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let signer = WorkerSigner::from_seed([3; 32]);
        let mut ledger = Outbox::new(OutboxLimits::default());
        for k in 0..RECORDS {
            let handler = if k == 2 { "poison" } else { "pay" };
            ledger
                .append(OutboxRecord::new(
                    OccurrenceId::new(1, 4, k),
                    handler,
                    format!("order-{k}").into_bytes(),
                ))
                .unwrap();
        }
        Self {
            dir,
            ledger,
            policy: Policy::default()
                .with_outbox_consumer(ccron::ClientId::from_index(CONSUMER))
                .with_chain_id(CHAIN)
                .with_worker_key(signer.public(), ["pay"]),
            reactions: BTreeMap::new(),
            worker: DedupeTable::new(DedupeLimits::default()),
            signer,
            effects: BTreeMap::new(),
        }
    }

    /// The ledger executes a result request from the consumer.
    fn submit(&mut self, r: &OutboxResult) {
        match self.ledger.accept_result(
            &self.policy,
            &Principal::Client(ccron::ClientId::from_index(CONSUMER)),
            r,
        ) {
            Ok(ResultApplied::Applied) => *self.reactions.entry(r.index).or_default() += 1,
            Ok(_) => {}
            Err(e) => panic!("the ledger refused a result: {e}"),
        }
    }

    /// The worker (which does not crash) answers a delivery sent with acknowledged progress
    /// `progress`: `None` for a rejection.
    fn work(&mut self, index: u64, record: &OutboxRecord, progress: u64) -> Option<OutboxResult> {
        if record.handler == "poison" {
            return None;
        }
        self.worker.acknowledge("consumer", progress).unwrap();
        let digest = delivery_digest(&record.handler, &record.payload);
        let entry = match self.worker.check("consumer", index, &record.id, &digest) {
            DedupeVerdict::Fresh => {
                *self.effects.entry(record.id).or_default() += 1;
                let body = b"paid".to_vec();
                let proof = self.signer.sign(CHAIN, index, record, &body);
                let done = Remembered::Answer {
                    body,
                    proof: Some(proof),
                };
                self.worker
                    .remember("consumer", record.id, index, digest, done)
                    .unwrap()
                    .clone()
            }
            DedupeVerdict::Replay(e) => e.clone(),
            v => panic!("honest delivery refused: {v:?}"),
        };
        let Remembered::Answer {
            body,
            proof: Some(proof),
        } = entry.outcome
        else {
            panic!("unexpected memory {entry:?}");
        };
        Some(OutboxResult::answer(index, record.id, body, proof))
    }
}

fn step(b: &mut Budget) -> Result<(), Crash> {
    if b.left == 0 {
        return Err(Crash);
    }
    b.left -= 1;
    Ok(())
}

/// Takes `r` into the journal as a durable step (or crashes before it, or in the middle of it).
fn take(j: &mut ResultJournal, r: OutboxResult, b: &mut Budget) -> Result<(), Crash> {
    if b.left == 0 && b.torn && !j.is_pending(r.index) {
        // The append reaches the disk only partly: the crash cuts its tail.
        let path = j.path().to_path_buf();
        j.take(r).unwrap();
        let len = fs::metadata(&path).unwrap().len();
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 1 - (len % 17)).unwrap();
        return Err(Crash);
    }
    step(b)?;
    j.take(r).unwrap();
    Ok(())
}

/// One life of the consumer: reopen its files, send the pending results again, deliver until
/// everything is finished and applied (`Ok`) or the budget runs out (`Err(Crash)`).
fn life(w: &mut World, b: &mut Budget) -> Result<(), Crash> {
    let cfg = ConsumerConfig {
        max_processing: 3,
        max_search_ahead: 4,
        max_attempts: 1,
        ack_timeout_ms: 1_000,
        ..ConsumerConfig::default()
    };
    let mut journal = ResultJournal::open(w.dir.join("results"), JournalLimits::default()).unwrap();
    let mut consumer = PersistentConsumer::open(
        cfg,
        FileProgressStore::new(w.dir.join("progress")),
        FileDeadLetters::new(w.dir.join("dead")),
    )
    .unwrap();
    // After a restart: every result taken and not known applied goes to the ledger again.
    let pending: Vec<OutboxResult> = journal.pending().cloned().collect();
    for r in pending {
        step(b)?;
        w.submit(&r);
        step(b)?;
        journal.mark_applied(r.index).unwrap();
    }
    let outbox = w.ledger.clone();
    for now in 0..200 {
        for d in consumer.poll(&outbox, now).unwrap() {
            let progress = consumer.persisted_progress();
            match w.work(d.index, &d.record, progress) {
                Some(answer) => {
                    // Taken durably before the acknowledgement, applied after it.
                    take(&mut journal, answer.clone(), b)?;
                    step(b)?;
                    consumer
                        .on_ack(d.index, d.attempt, AckOutcome::Done, now)
                        .unwrap();
                    step(b)?;
                    w.submit(&answer);
                    step(b)?;
                    journal.mark_applied(d.index).unwrap();
                }
                None => {
                    let dead = OutboxResult::dead_letter(d.index, d.record.id, "rejected");
                    take(&mut journal, dead.clone(), b)?;
                    step(b)?;
                    consumer
                        .give_up(
                            d.index,
                            d.attempt,
                            FailureReason::Failed("rejected".into()),
                            now,
                        )
                        .unwrap();
                    step(b)?;
                    w.submit(&dead);
                    step(b)?;
                    journal.mark_applied(d.index).unwrap();
                }
            }
        }
        if consumer.persisted_progress() == RECORDS && journal.pending_len() == 0 {
            return Ok(());
        }
    }
    panic!("no progress: {}", consumer.persisted_progress());
}

fn check_exactly_once(w: &World) {
    assert_eq!(
        w.ledger.results_len() as u64,
        RECORDS,
        "every record has its result"
    );
    for i in 1..=RECORDS {
        assert_eq!(w.reactions.get(&i), Some(&1), "record {i} applied once");
    }
    assert_eq!(
        w.effects.len() as u64,
        RECORDS - 1,
        "every effect but the poison's"
    );
    assert!(w.effects.values().all(|&n| n == 1), "{:?}", w.effects);
}

#[test]
fn a_crash_at_every_step_applies_each_result_exactly_once() {
    // How many durable steps a run without a crash takes.
    let mut w = World::new("count");
    let mut b = Budget {
        left: usize::MAX,
        torn: false,
    };
    life(&mut w, &mut b).unwrap();
    check_exactly_once(&w);
    let total = usize::MAX - b.left;
    assert!(total >= 4 * RECORDS as usize, "{total} steps");
    fs::remove_dir_all(&w.dir).unwrap();

    for torn in [false, true] {
        for crash_at in 0..total {
            let mut w = World::new(&format!("crash-{crash_at}-{torn}"));
            let mut b = Budget {
                left: crash_at,
                torn,
            };
            assert!(life(&mut w, &mut b).is_err(), "crashed at step {crash_at}");
            // A second crash a few steps into the recovery, then a clean run.
            let mut b = Budget {
                left: crash_at % 5,
                torn: false,
            };
            let _ = life(&mut w, &mut b);
            let mut b = Budget {
                left: usize::MAX,
                torn: false,
            };
            life(&mut w, &mut b).unwrap();
            check_exactly_once(&w);
            fs::remove_dir_all(&w.dir).unwrap();
        }
    }
}
