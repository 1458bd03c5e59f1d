//! `ccron relay` against four in-process node APIs (the node's real router behind the bounded
//! server; a task executes what their pools hold on a real `CronLedger`, one block at a time).
//! A state's requests emit one outbox record each; one node never publishes its outbox (its
//! reads answer 503: f+1 = 2 of the others suffice); two authenticated workers share one
//! idempotency store and worker 0 is killed mid-run. Every record is delivered, its effect
//! performed once, its result applied exactly once through signed node requests, and the
//! progress report trims the outbox. A second run on the same directory resumes: nothing is
//! delivered again and no request number is reused.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
use ccron::host::{BookConfig, CronLedger, Effects, LedgerScheduler, TickPool};
use ccron::outbox::{
    DedupeLimits, EmitBudget, OccurrenceId, OutboxRecord, ResultOutcome, WorkerSigner,
};
use ccron::schedule::{Handlers, Limits};
use ccron::{CronTableRegistry, Policy};
use ccron_cli::{Cli, CliError, Env, run};
use ccron_http::{Dedupe, DeliverySecret, PublishedOutbox, Worker, WorkerConfig};
use ccron_node::api::{ApiState, lock, serve_with, server_config};
use ccron_node::mempool::{Mempool, MempoolConfig};
use ccron_node::read::NodeReads;
use ccron_node::results::RequestResults;
use ccron_node::types::Validators;
use clap::Parser;
use sha2::{Digest, Sha256};

const RECORDS: u64 = 30;
const CHAIN: &str = "escrow-test-chain";
const KEY_ID: &str = "ccron-relay";
const RELAY_SECRET: [u8; 32] = [7; 32];
/// The ledger's admin, whose requests release escrows (executed by the block task).
const ADMIN: ClientId = ccron::ClientId([1; 32]);

/// The escrow state: a release emits one "escrow-released" record; each record's result
/// comes back once.
#[derive(Debug, Default, Clone)]
struct Escrow {
    released: u64,
    results: BTreeMap<OccurrenceId, u32>,
}

impl Application for Escrow {
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
        if client != ADMIN || payload != b"release" {
            return b"err unknown".to_vec();
        }
        let k = self.released;
        match fx.emit("escrow-released", format!("escrow-{k}")) {
            Ok(_) => {
                self.released += 1;
                b"ok".to_vec()
            }
            Err(e) => format!("err {e}").into_bytes(),
        }
    }
    fn on_outbox_result(&mut self, record: &OutboxRecord, _: &ResultOutcome) {
        *self.results.entry(record.id).or_insert(0) += 1;
    }
    fn digest(&self) -> Digest32 {
        Sha256::digest(self.released.to_le_bytes()).into()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.released.to_le_bytes().to_vec()
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), AppError> {
        let b = <[u8; 8]>::try_from(s).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        self.released = u64::from_le_bytes(b);
        Ok(())
    }
}

fn relay_client() -> ClientId {
    let key = ed25519_dalek::SigningKey::from_bytes(&RELAY_SECRET);
    ccron_node::request::client_id(&key.verifying_key().to_bytes())
}

fn secret(i: usize) -> DeliverySecret {
    DeliverySecret::new(format!("worker-secret-{i:08}-xxxxxxxx").into_bytes()).unwrap()
}

fn signer(i: usize) -> WorkerSigner {
    WorkerSigner::from_seed([u8::try_from(i + 1).unwrap(); 32])
}

fn ledger() -> CronLedger<Escrow> {
    let cfg = BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 8,
    };
    let policy = (0..2).fold(
        Policy::default()
            .with_outbox_consumer(relay_client())
            .with_chain_id(CHAIN.as_bytes()),
        |p, i| p.with_worker_key(signer(i).public(), ["escrow-released"]),
    );
    CronLedger::new(Escrow::default(), CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(cfg, Handlers::new()).with_policy(policy))
        .with_request_emits(EmitBudget::new(1, 1_024))
}

fn api(index: u64) -> ApiState {
    ApiState {
        mempool: Arc::new(Mutex::new(Mempool::new(
            MempoolConfig::default(),
            Default::default(),
        ))),
        outbox: PublishedOutbox::new(index),
        ticks: Arc::new(Mutex::new(TickPool::new(4, [1]))),
        validators: Validators::new(&[[1; 32], [2; 32], [3; 32], [4; 32]]),
        domain: ccron_node::crypto::SigningDomain::chain(b"test-chain").unwrap(),
        ticks_invalid: Arc::new(AtomicU64::new(0)),
        results: Arc::new(Mutex::new(RequestResults::default())),
        reads: NodeReads::new(index),
    }
}

/// What the block task shares with the test.
#[derive(Default)]
struct Chain {
    /// The relay's requests executed, by number (each must execute once).
    relay_numbers: BTreeMap<u64, u32>,
    /// The ledger's outbox: (first index, results applied), and the state's results.
    first_index: u64,
    results_applied: usize,
    state: Escrow,
}

/// Four nodes; node 3 never publishes its outbox. A task releases one escrow per block until
/// `RECORDS`, and executes what the pools hold, one block every 20 ms.
async fn cluster(chain: Arc<Mutex<Chain>>) -> Vec<SocketAddr> {
    let nodes: Vec<ApiState> = (0..4).map(api).collect();
    let mut addrs = Vec::new();
    for n in &nodes {
        addrs.push(
            serve_with("127.0.0.1:0".parse().unwrap(), n.clone(), server_config())
                .await
                .unwrap(),
        );
    }
    let mut l = ledger();
    tokio::spawn(async move {
        let mut height = 0u64;
        let mut done: BTreeSet<[u8; 32]> = BTreeSet::new();
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            height += 1;
            let ctx = ExecContext {
                seq: height,
                agreed_time_ms: Some(1_000 + height as i64),
            };
            if l.state().released < RECORDS {
                assert_eq!(l.execute(ctx, ADMIN, b"release"), b"ok");
            }
            let mut block = Vec::new();
            for n in &nodes {
                for r in lock(&n.mempool).select(64, 1 << 20) {
                    if done.insert(r.digest().0) {
                        block.push(r);
                    }
                }
            }
            let mut executed = Vec::new();
            for r in &block {
                let reply = l.execute(ctx, r.client(), &r.request.payload);
                executed.push((r.client(), r.request.number));
                if r.client() == relay_client() {
                    *lock(&chain)
                        .relay_numbers
                        .entry(r.request.number)
                        .or_insert(0) += 1;
                }
                for n in &nodes {
                    lock(&n.results).record(r.client(), r.request.number, height, &reply);
                }
            }
            for n in &nodes {
                lock(&n.mempool).after_block(&block, &executed);
            }
            let outbox = l.outbox().expect("the ledger has a book");
            for n in &nodes[..3] {
                n.outbox.publish(outbox, height);
            }
            let mut c = lock(&chain);
            c.first_index = outbox.first_index();
            c.results_applied = outbox.results_len();
            c.state = l.state().clone();
        }
    });
    addrs
}

/// A worker serving on loopback until killed.
struct Running {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    fn start(worker: Arc<Worker>) -> Self {
        let listener = Worker::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(worker.serve(listener, async move {
            let _ = rx.await;
        }));
        Self {
            base,
            stop: Some(tx),
            task,
        }
    }

    async fn kill(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(3), &mut self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ccron-relay-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn ccron(args: &[String], now_ms: u64) -> Result<String, CliError> {
    let cli = Cli::try_parse_from(std::iter::once("ccron").chain(args.iter().map(String::as_str)))
        .map_err(|e| CliError::Args(e.to_string()))?;
    run(
        cli,
        Env {
            now_ms,
            entropy: [5; 32],
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_binary_delivers_every_record_and_applies_every_result_once() {
    let chain: Arc<Mutex<Chain>> = Arc::default();
    let addrs = cluster(chain.clone()).await;

    // Two workers of one service (one idempotency store); each effect counted.
    let dedupe = Dedupe::new(DedupeLimits::default());
    let performed: Arc<Mutex<BTreeMap<OccurrenceId, u32>>> = Arc::default();
    let by_worker: Arc<[AtomicU64; 2]> = Arc::default();
    let mut running: Vec<Option<Running>> = (0..2)
        .map(|i| {
            let performed = performed.clone();
            let by_worker = by_worker.clone();
            let cfg = WorkerConfig::new(
                CHAIN.as_bytes(),
                BTreeMap::from([(KEY_ID.to_string(), secret(i))]),
                signer(i),
            );
            let w = Worker::new(cfg, dedupe.clone(), move |_, id, payload| {
                *performed.lock().unwrap().entry(*id).or_insert(0) += 1;
                by_worker[i].fetch_add(1, Ordering::Relaxed);
                Ok(format!("paid {}", String::from_utf8_lossy(payload)).into_bytes())
            });
            Some(Running::start(w))
        })
        .collect();

    let dir = dir("run");
    let key = dir.join("relay.key");
    std::fs::write(&key, ccron_node::types::hex(&RELAY_SECRET)).unwrap();
    let workers = dir.join("workers");
    let mut text = String::from("# URL SECRET_HEX ANSWER_KEY_HEX\n");
    for (i, r) in running.iter().enumerate() {
        let r = r.as_ref().unwrap();
        text.push_str(&format!(
            "{} {} {}\n",
            r.base,
            ccron_node::types::hex(secret(i).expose()),
            signer(i).public()
        ));
    }
    std::fs::write(&workers, text).unwrap();
    let nodes = addrs
        .iter()
        .map(|a| format!("http://{a}"))
        .collect::<Vec<_>>()
        .join(",");
    let metrics_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let args: Vec<String> = [
        "relay",
        "--nodes",
        &nodes,
        "--key",
        key.to_str().unwrap(),
        "--workers",
        workers.to_str().unwrap(),
        "--chain-id",
        CHAIN,
        "--dir",
        dir.join("state").to_str().unwrap(),
        "--resend-after-ms",
        "500",
        "--until-progress",
        &RECORDS.to_string(),
        "--max-run-ms",
        "60000",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    // `/metrics` scraped while the first run goes: the relay's progress, as the scrapes saw it,
    // reaches the records and never goes back; the dispatcher's series are beside it.
    let mut first_args = args.clone();
    first_args.extend(["--metrics-listen".to_string(), metrics_addr.to_string()]);
    let scraped: Arc<Mutex<Vec<String>>> = Arc::default();
    let scraper = {
        let scraped = scraped.clone();
        tokio::spawn(async move {
            loop {
                if let Some(text) = scrape(metrics_addr).await {
                    scraped.lock().unwrap().push(text);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // Kill worker 0 once a third of the effects are performed.
    let killer = {
        let performed = performed.clone();
        let w0 = running[0].take().unwrap();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if performed.lock().unwrap().len() as u64 >= RECORDS / 3 {
                    w0.kill().await;
                    return;
                }
            }
        })
    };
    let out = ccron(&first_args, 1_700_000_000_000).await.unwrap();
    killer.await.unwrap();
    scraper.abort();
    {
        let scraped = scraped.lock().unwrap();
        let progress: Vec<u64> = scraped
            .iter()
            .filter_map(|t| series(t, "ccron_relay_progress"))
            .collect();
        assert!(!progress.is_empty(), "no scrape answered");
        assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
        assert!(
            progress.iter().any(|p| *p > 0),
            "a scrape during the run saw progress: {progress:?}"
        );
        let last = scraped.last().unwrap();
        assert!(
            series(last, "ccron_dispatch_records_done_total").is_some_and(|n| n > 0),
            "{last}"
        );
        assert!(series(last, "ccron_relay_steps_total").is_some_and(|n| n > 0));
    }
    // The endpoint stopped with the run.
    assert!(scrape(metrics_addr).await.is_none());
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["progress"], RECORDS, "{out}");
    assert_eq!(stats["pending_results"], 0, "{out}");
    assert_eq!(stats["reported_progress"], RECORDS, "{out}");

    // Every record delivered, its effect performed once (the killed worker's in-flight
    // deliveries answered from the shared store by the other).
    {
        let performed = performed.lock().unwrap();
        assert_eq!(performed.len() as u64, RECORDS, "{performed:?}");
        assert!(performed.values().all(|n| *n == 1), "{performed:?}");
        let w0 = by_worker[0].load(Ordering::Relaxed);
        assert!(w0 > 0 && w0 < RECORDS, "worker 0 worked, then died: {w0}");
    }
    // Every result applied exactly once, and the outbox trimmed after them (wait for the
    // block that executes the progress report).
    let mut ok = false;
    for _ in 0..100 {
        {
            let c = lock(&chain);
            if c.first_index == RECORDS + 1 {
                assert_eq!(c.state.released, RECORDS);
                assert_eq!(c.state.results.len() as u64, RECORDS, "{:?}", c.state);
                assert!(c.state.results.values().all(|n| *n == 1), "{:?}", c.state);
                assert!(c.relay_numbers.values().all(|n| *n == 1));
                ok = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "the outbox was not trimmed past {RECORDS}");
    let first_run_numbers: BTreeSet<u64> = lock(&chain).relay_numbers.keys().copied().collect();
    assert!(
        first_run_numbers.len() as u64 > RECORDS,
        "results and progress"
    );

    // A second run on the same directory, its clock behind the first (a clock step back):
    // nothing delivered again, and its numbers stay above every one the first run used.
    let out = ccron(&args, 1_600_000_000_000).await.unwrap();
    let again: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(again["progress"], RECORDS, "{out}");
    assert_eq!(again["results_sent"], 0, "{out}");
    assert_eq!(performed.lock().unwrap().len() as u64, RECORDS);
    let highest = *first_run_numbers.last().unwrap();
    let mut later = Vec::new();
    for _ in 0..100 {
        later = lock(&chain)
            .relay_numbers
            .keys()
            .copied()
            .filter(|n| !first_run_numbers.contains(n))
            .collect::<Vec<_>>();
        if !later.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!later.is_empty(), "the second run reported its progress");
    assert!(later.iter().all(|n| *n > highest), "{later:?} vs {highest}");
    if let Some(r) = running[1].take() {
        r.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_relay_refuses_bad_workers_files_and_keys() {
    let dir = dir("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("k");
    std::fs::write(&key, ccron_node::types::hex(&RELAY_SECRET)).unwrap();
    let workers = dir.join("w");
    for bad in [
        "",
        "http://127.0.0.1:1 abcd",
        "ftp://x 00112233445566778899aabbccddeeff 00",
        "http://127.0.0.1:1 0011 00",
        "http://127.0.0.1:1 zz112233445566778899aabbccddeeff 00",
    ] {
        std::fs::write(&workers, bad).unwrap();
        let args: Vec<String> = [
            "relay",
            "--nodes",
            "http://127.0.0.1:1",
            "--key",
            key.to_str().unwrap(),
            "--workers",
            workers.to_str().unwrap(),
            "--chain-id",
            CHAIN,
            "--dir",
            dir.join("state").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let e = ccron(&args, 1).await.unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
    }
}

/// The relay's own state failing to open is its own error (exit code 8), not an argument
/// error: a relay directory that is a file, and a damaged request-number reservation.
#[tokio::test]
async fn the_relay_refuses_a_directory_it_cannot_use_with_its_own_exit_code() {
    let dir = dir("state-bad");
    let key = dir.join("k");
    std::fs::write(&key, ccron_node::types::hex(&RELAY_SECRET)).unwrap();
    let workers = dir.join("w");
    std::fs::write(
        &workers,
        format!(
            "http://127.0.0.1:1 {} {}\n",
            ccron_node::types::hex(secret(0).expose()),
            signer(0).public()
        ),
    )
    .unwrap();
    let args = |state: &std::path::Path| -> Vec<String> {
        [
            "relay",
            "--nodes",
            "http://127.0.0.1:1",
            "--key",
            key.to_str().unwrap(),
            "--workers",
            workers.to_str().unwrap(),
            "--chain-id",
            CHAIN,
            "--dir",
            state.to_str().unwrap(),
            "--max-run-ms",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // A file where the directory should be.
    let file = dir.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let e = ccron(&args(&file), 1).await.unwrap_err();
    assert!(matches!(e, CliError::RelayState(_)), "{e:?}");
    assert_eq!(e.exit_code(), 8, "{e}");
    // A damaged request-number reservation is refused, never reset.
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("request-numbers"), b"damaged!!!!!").unwrap();
    let e = ccron(&args(&state), 1).await.unwrap_err();
    assert!(matches!(e, CliError::RelayState(_)), "{e:?}");
    assert_eq!(e.exit_code(), 8, "{e}");
    assert!(e.to_string().starts_with("relay state: "), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One `GET /metrics` over a raw HTTP/1.0 connection: the body, or `None` (refused, failed).
async fn scrape(addr: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nhost: relay\r\n\r\n")
        .await
        .ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8(buf).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

/// The value of an unlabelled series in a Prometheus text exposition.
fn series(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
