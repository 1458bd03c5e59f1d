//! A worker in another language: `workers/python/worker.py` (Python, standard library only,
//! written from `docs/outbox.md`'s worker protocol) serves the Rust dispatcher. Two Python
//! worker processes share one SQLite idempotency store; one is killed (SIGKILL) mid-run. Every
//! effect is performed exactly once, every delivery it saw was authenticated, and every answer
//! is applied once by a ledger stand-in that believes only answers signed by the registered
//! worker keys (the Python workers' ed25519 signatures, verified in Rust). Records with an
//! unknown handler are refused (422) and dead-lettered.
//!
//! Skips (with a message) only when `python3` is not installed.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ccron::outbox::workers::to_hex;
use ccron::outbox::{
    Backoff, ConsumerConfig, MemDeadLetters, MemProgressStore, OccurrenceId, Outbox, OutboxLimits,
    OutboxRecord, OutboxResult, PersistentConsumer, ResultApplied, ResultOutcome, WorkerSigner,
};
use ccron::{Policy, Principal};
use ccron_http::{
    Assignment, DeliverySecret, Dispatcher, DispatcherConfig, HandlerPolicy, ResultSink,
    ResultSinkError, WorkerEndpoint,
};

const RECORDS: u64 = 40;
/// The outbox consumer (a stand-in id: no key behind it).
const CONSUMER: ccron::ClientId = ccron::ClientId::from_bytes([9; 32]);
const CHAIN: &[u8] = b"python-chain";

/// The wall clock of this test shell.
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

fn script_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workers/python")
}

fn python() -> Option<()> {
    match Command::new("python3").arg("--version").output() {
        Ok(o) if o.status.success() => Some(()),
        _ => None,
    }
}

fn seed(i: usize) -> [u8; 32] {
    [u8::try_from(40 + i).unwrap(); 32]
}

fn secret(i: usize) -> DeliverySecret {
    DeliverySecret::new(format!("python-worker-secret-{i:04}").into_bytes()).unwrap()
}

struct PyWorker {
    child: Child,
    base: String,
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(i: usize, db: &Path) -> PyWorker {
    let mut child = Command::new("python3")
        .current_dir(script_dir())
        .args(["worker.py", "--listen", "127.0.0.1:0", "--window", "64"])
        .arg("--db")
        .arg(db)
        .arg("--chain-hex")
        .arg(to_hex(CHAIN))
        .arg("--sender")
        .arg(format!(
            "{}:{}",
            support::KEY_ID,
            to_hex(secret(i).expose())
        ))
        .arg("--seed-hex")
        .arg(to_hex(&seed(i)))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 worker.py");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts.first(), Some(&"LISTENING"), "{line:?}");
    // The Python signer derives the same public key as Rust's (RFC 8032).
    assert_eq!(
        parts[2],
        WorkerSigner::from_seed(seed(i)).public().to_string(),
        "public key of worker {i}"
    );
    PyWorker {
        child,
        base: format!("http://127.0.0.1:{}", parts[1]),
    }
}

/// The ledger stand-in: an `Outbox` applying results under a policy that registers the two
/// Python workers' keys for "pay".
struct Ledger {
    outbox: Outbox,
    policy: Policy,
    applied: BTreeMap<u64, ResultOutcome>,
}

impl ResultSink for Ledger {
    fn offer(&mut self, r: OutboxResult) -> Result<(), ResultSinkError> {
        match self
            .outbox
            .accept_result(&self.policy, &Principal::Client(CONSUMER), &r)
        {
            Ok(ResultApplied::Applied) => {
                self.applied.insert(r.index, r.outcome);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(ResultSinkError(e.to_string())),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_workers_one_killed_midway_still_give_exactly_once() {
    if python().is_none() {
        eprintln!("SKIPPED: python3 is not installed; the Python worker test needs it");
        return;
    }
    let st = Command::new("python3")
        .current_dir(script_dir())
        .args(["worker.py", "--self-test"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");

    let dir = std::env::temp_dir().join(format!("ccron-python-worker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("pay.sqlite");
    let mut workers: Vec<Option<PyWorker>> = (0..2).map(|i| Some(start(i, &db))).collect();

    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 1..=RECORDS {
        let handler = if k % 13 == 0 { "refund" } else { "pay" };
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(3, 1, k),
                handler,
                format!("order-{k}"),
            ))
            .unwrap();
    }
    let mut policy = Policy::default()
        .with_outbox_consumer(CONSUMER)
        .with_chain_id(CHAIN);
    for i in 0..2 {
        policy = policy.with_worker_key(WorkerSigner::from_seed(seed(i)).public(), ["pay"]);
    }
    let mut ledger = Ledger {
        outbox: outbox.clone(),
        policy,
        applied: BTreeMap::new(),
    };
    let endpoints = workers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, w)| {
            WorkerEndpoint::new(
                w.base.clone(),
                secret(i),
                WorkerSigner::from_seed(seed(i)).public(),
            )
        })
        .collect();
    let mut cfg = DispatcherConfig::new(CHAIN, support::KEY_ID, endpoints);
    cfg.pool.max_in_flight_per_worker = 2;
    cfg.pool.health.base_down_ms = 100;
    cfg.pool.default_policy = HandlerPolicy {
        assignment: Assignment::LeastLoaded,
        max_attempts: 50,
        time_to_run_ms: 60_000,
        attempt_timeout_ms: 5_000,
    };
    let start_t = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start_t.elapsed().as_millis()).unwrap_or(i64::MAX));
    let consumer_cfg = ConsumerConfig {
        max_processing: 4,
        max_search_ahead: 32,
        max_attempts: u32::MAX,
        ack_timeout_ms: 8_000,
        backoff: Backoff {
            base_ms: 10,
            cap_ms: 200,
            jitter_permille: 250,
        },
    };
    let mut store = MemProgressStore::default();
    let mut letters = MemDeadLetters::default();
    let mut consumer = PersistentConsumer::open(consumer_cfg, &mut store, &mut letters).unwrap();
    let mut dispatcher = Dispatcher::new(cfg, clock).unwrap();
    let mut killed = false;
    while consumer.persisted_progress() < RECORDS {
        assert!(
            start_t.elapsed() < Duration::from_secs(120),
            "stuck at {}: {:?}",
            consumer.persisted_progress(),
            dispatcher.stats()
        );
        dispatcher
            .step(
                &mut consumer,
                &outbox,
                &mut ledger,
                Duration::from_millis(20),
            )
            .await
            .unwrap();
        if !killed && consumer.persisted_progress() >= RECORDS / 3 {
            // SIGKILL, requests in flight included.
            drop(workers[0].take());
            killed = true;
        }
    }
    let stats = dispatcher.stats();
    drop(dispatcher);
    drop(consumer);
    drop(workers);

    // Effects: each "pay" record exactly once, in the shared store.
    let dump = Command::new("python3")
        .current_dir(script_dir())
        .args(["worker.py", "--dump-effects", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(dump.status.success());
    let mut effects: BTreeMap<String, u32> = BTreeMap::new();
    for line in String::from_utf8(dump.stdout).unwrap().lines() {
        let id = line
            .split("\"id\": \"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        *effects.entry(id.to_string()).or_default() += 1;
    }
    let pay: Vec<(u64, &OutboxRecord)> =
        outbox.iter().filter(|(_, r)| r.handler == "pay").collect();
    assert_eq!(effects.len(), pay.len(), "{effects:?}");
    assert!(effects.values().all(|&n| n == 1), "{effects:?}");
    // Results: one per record; answers signed by a Python worker and believed by the ledger.
    assert_eq!(ledger.applied.len() as u64, RECORDS);
    for (index, r) in outbox.iter() {
        match (&ledger.applied[&index], r.handler.as_str()) {
            (ResultOutcome::Answer(body), "pay") => {
                assert_eq!(body, &[b"paid ".as_slice(), &r.payload].concat());
            }
            (ResultOutcome::DeadLetter(why), "refund") => {
                assert!(why.contains("422"), "{why}");
            }
            other => panic!("record {index}: {other:?}"),
        }
    }
    assert_eq!(stats.unauthorized, 0, "{stats:?}");
    assert_eq!(stats.bad_answers, 0, "{stats:?}");
    assert!(killed);
    println!("dispatch: {stats:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
