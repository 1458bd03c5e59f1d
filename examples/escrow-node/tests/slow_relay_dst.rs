//! The escrow ledger's story across the UK's autumn clock change, delivered: the weekday
//! ledger (`escrow_node::WEEKDAY_TIMINGS`: a release at `0 0 17 * * MON-FRI` Europe/London,
//! a refund 48 h after each unconfirmed hold) on sim-bft's threaded cluster (4 PBFT replicas,
//! real threads and ticks), its outbox delivered by the library relay (`ccron_http::Relay`
//! with `sim_bft::runtime::ClusterSubmit` as its way back) to two HTTP workers sharing one
//! idempotency store, worker 0 killed mid-run.
//!
//! The threaded cluster runs on the real clock, and this test needs Friday 23 to Monday 26
//! October 2026: every replica runs the ledger behind [`TimeLapse`], which shows it the
//! agreed time as `START + (t - origin) * SPEED` (the same pure function of the agreed time on
//! every replica, so they still agree): about 79 hours in 28 s.
//!
//! Asserted: the release fired exactly at the instants `CronSchedule::instants_between`
//! gives (Friday 16:00Z in BST, Monday 17:00Z in GMT; nothing on the weekend) on every replica,
//! within a few ticks of them; every `escrow-released` and `escrow-refunded` record was
//! performed once at the workers and has exactly one result on every replica; the replicas'
//! states and digests are equal, and every hold was released or refunded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccron::cron::{CronSchedule, ZoneRules};
use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext, FireNote};
use ccron::host::{CronLedger, Effects};
use ccron::outbox::{
    Backoff, ConsumerConfig, DedupeLimits, OccurrenceId, Outbox, OutboxRecord, ResultOutcome,
    WorkerSigner,
};
use ccron::{Due, PageRange, Policy, ReservedPages, Tick};
use ccron_http::{
    Dedupe, DeliverySecret, DispatcherConfig, OutboxSource, PublishOutbox, PublishedOutbox,
    ReadClientConfig, ReadServerConfig, Relay, RelayConfig, Worker, WorkerConfig, WorkerEndpoint,
};
use escrow_node::{ESCROW, Escrow, REFUNDED, RELEASED, SETTLE, WEEKDAY_TIMINGS};
use sim_bft::crypto::client_signing_key;
use sim_bft::protocol::client_request_bytes;
use sim_bft::replica::{Replica, ReplicaConfig};
use sim_bft::runtime::{ClusterSubmit, RuntimeConfig, ThreadedCluster};

const N: u32 = 4;
const KEY_SEED: u64 = 7;
/// The holder's and the consumer's simulated client indices (sim-bft's keys); the ledger names
/// them by `sim_bft::node::ledger_client` of these.
const HOLDER: u64 = 0;
const CONSUMER: u64 = 1;
const TICK_MS: u64 = 50;
/// Simulated ms per real ms.
const SPEED: i64 = 10_000;
/// 2026-10-23T12:00:00Z: Friday, in British Summer Time.
const START_MS: i64 = 1_792_756_800_000;
/// 2026-10-26T19:00:00Z: Monday, in Greenwich Mean Time.
const END_MS: i64 = 1_793_041_200_000;
const CHAIN: &[u8] = b"escrow-dst";
const KEY_ID: &str = "escrow-relay";
/// Requests per batch (the demo's mix: three holds, then a confirmation of the third).
const BATCH: u64 = 12;

// The test is a process boundary: it reads the real clock.
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

#[allow(clippy::disallowed_methods)]
fn unix_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// What one replica's ledger showed: its release fires (due, agreed time), the latest state,
/// and its digest after each sequence number (the last [`DIGESTS_KEPT`]). The replicas keep
/// running while the test compares them, so digests are compared at one sequence number that
/// every replica has finished, never "the latest" (a replica one block ahead has another
/// agreed-time page).
#[derive(Default)]
struct Seen {
    releases: Vec<(i64, i64)>,
    state: Option<Escrow>,
    digests: BTreeMap<u64, Digest32>,
    now_ms: i64,
}

/// How many sequence numbers' digests a replica keeps for the comparison.
const DIGESTS_KEPT: usize = 4_096;

/// The escrow ledger seen through a time-lapse clock: agreed time `t` (Unix ms of the
/// replicas' real clocks) becomes `start_ms + (t - origin_ms) * SPEED`. Every method forwards.
struct TimeLapse {
    inner: CronLedger<Escrow>,
    origin_ms: i64,
    start_ms: i64,
    notes: Vec<FireNote>,
    seen: Arc<Mutex<Seen>>,
}

impl TimeLapse {
    fn shift(&self, t: Option<i64>) -> Option<i64> {
        t.map(|t| {
            self.start_ms
                .saturating_add(t.saturating_sub(self.origin_ms).saturating_mul(SPEED))
        })
    }

    fn ctx(&self, ctx: ExecContext) -> ExecContext {
        ExecContext {
            seq: ctx.seq,
            agreed_time_ms: self.shift(ctx.agreed_time_ms),
        }
    }

    fn observe(&self, seq: u64) {
        let mut s = self.seen.lock().unwrap();
        s.state = Some(self.inner.state().clone());
        s.digests.insert(seq, self.inner.digest());
        while s.digests.len() > DIGESTS_KEPT {
            s.digests.pop_first();
        }
    }
}

impl Application for TimeLapse {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        let ctx = self.ctx(ctx);
        let out = self.inner.execute(ctx, client, payload);
        self.observe(ctx.seq);
        out
    }
    fn execute_with(
        &mut self,
        ctx: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut Effects<'_>,
    ) -> Vec<u8> {
        let ctx = self.ctx(ctx);
        let out = self.inner.execute_with(ctx, client, payload, fx);
        self.observe(ctx.seq);
        out
    }
    fn on_outbox_result(&mut self, record: &OutboxRecord, outcome: &ResultOutcome) {
        self.inner.on_outbox_result(record, outcome);
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
        let agreed = self.shift(tick.agreed_time_ms);
        let tick = Tick::new(tick.component_id, tick.bft_sequence_num, agreed);
        let r = self.inner.on_tick(tick, pages);
        let mut notes = Vec::new();
        self.inner.take_fire_notes(&mut notes);
        {
            let mut s = self.seen.lock().unwrap();
            s.now_ms = agreed.unwrap_or(0);
            for n in notes.iter().filter(|n| n.position == SETTLE) {
                if let Some(Due::Time(due)) = n.due {
                    s.releases.push((due, agreed.unwrap_or(0)));
                }
            }
        }
        self.notes.extend(notes);
        self.observe(tick.bft_sequence_num);
        r
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
    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        self.inner.take_fire_notes(&mut self.notes);
        out.append(&mut self.notes);
    }
    fn tick_components(&self) -> Vec<u32> {
        self.inner.tick_components()
    }
    fn setup_digest(&self) -> Option<Digest32> {
        self.inner.setup_digest()
    }
    fn outbox(&self) -> Option<&Outbox> {
        self.inner.outbox()
    }
    fn schedule_book(&self) -> Option<&ccron::schedule::Scheduler> {
        self.inner.schedule_book()
    }
    fn page_ranges(&self) -> Vec<PageRange> {
        self.inner.page_ranges()
    }
}

fn lapse_outbox(l: &TimeLapse) -> Option<&Outbox> {
    l.inner.outbox()
}

fn secret(i: usize) -> DeliverySecret {
    DeliverySecret::new(format!("escrow-dst-worker-secret-{i:04}").into_bytes()).unwrap()
}

fn signer(i: usize) -> WorkerSigner {
    WorkerSigner::from_seed([u8::try_from(0x70 + i).unwrap(); 32])
}

/// A worker serving on loopback until killed.
struct Running {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    fn start(worker: Arc<Worker>) -> Self {
        let listener = Worker::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weekday_release_crosses_the_uk_clock_change_and_every_record_is_delivered_once() {
    let (start_ms, end_ms) = (START_MS, END_MS);
    let policy = (0..2).fold(
        Policy::default()
            .with_outbox_consumer(sim_bft::node::ledger_client(CONSUMER))
            .with_chain_id(CHAIN),
        |p, i| p.with_worker_key(signer(i).public(), [RELEASED, REFUNDED]),
    );
    let origin_ms = unix_ms();
    let seen: Vec<Arc<Mutex<Seen>>> = (0..N).map(|_| Arc::default()).collect();
    let published: Vec<PublishedOutbox> = (0..N).map(|i| PublishedOutbox::new(i.into())).collect();
    let replicas = (0..N)
        .map(|i| {
            let mut rc = ReplicaConfig::new(i, N, KEY_SEED, 2);
            rc.tick_components = BTreeMap::from([(ESCROW, TICK_MS)]);
            let app = TimeLapse {
                inner: escrow_node::ledger_with(policy.clone(), WEEKDAY_TIMINGS),
                origin_ms,
                start_ms,
                notes: Vec::new(),
                seen: seen[i as usize].clone(),
            };
            let app = PublishOutbox::new(app, lapse_outbox, published[i as usize].clone());
            Replica::with_app(rc, Box::new(app)).unwrap()
        })
        .collect::<Vec<_>>();
    let mut cluster = ThreadedCluster::start(
        replicas,
        RuntimeConfig {
            tick_period_ms: TICK_MS,
            components: vec![ESCROW],
        },
    )
    .unwrap();
    let sources = published
        .iter()
        .map(|p| -> Arc<dyn OutboxSource> { Arc::new(p.clone()) })
        .collect();
    let endpoints: Vec<String> = cluster
        .serve_reads(sources, ReadServerConfig::default())
        .unwrap()
        .iter()
        .map(|a| format!("http://{a}"))
        .collect();
    let cluster = Arc::new(cluster);
    let holder = client_signing_key(KEY_SEED, HOLDER);
    let submit_batch = |from: u64| {
        for k in from..from + BATCH {
            let payload = escrow_node::demo_request(sim_bft::node::ledger_client(HOLDER), k);
            let bytes = client_request_bytes(&holder, HOLDER, k, payload).unwrap();
            cluster.submit(&bytes).unwrap();
        }
    };
    // Friday morning (BST): released at Friday's 17:00 London; Saturday: at Monday's.
    submit_batch(1);

    // Two workers of one service (one idempotency store); each effect counted.
    let dedupe = Dedupe::new(DedupeLimits::default());
    let performed: Arc<Mutex<BTreeMap<OccurrenceId, u32>>> = Arc::default();
    let by_worker: Arc<[AtomicU64; 2]> = Arc::default();
    let mut running: Vec<Option<Running>> = (0..2)
        .map(|i| {
            let performed = performed.clone();
            let by_worker = by_worker.clone();
            let cfg = WorkerConfig::new(
                CHAIN,
                BTreeMap::from([(KEY_ID.to_string(), secret(i))]),
                signer(i),
            );
            let w = Worker::new(cfg, dedupe.clone(), move |handler, id, payload| {
                *performed.lock().unwrap().entry(*id).or_insert(0) += 1;
                by_worker[i].fetch_add(1, Ordering::Relaxed);
                Ok(format!("{handler} {}", payload.len()).into_bytes())
            });
            Some(Running::start(w))
        })
        .collect();
    let workers = running
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| WorkerEndpoint::new(&r.base, secret(i), signer(i).public()))
        .collect();
    let dir = std::env::temp_dir().join(format!("escrow-relay-dst-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let relay_cfg = RelayConfig {
        read: ReadClientConfig::new(endpoints, 2),
        dispatcher: DispatcherConfig::new(CHAIN, KEY_ID, workers),
        consumer: ConsumerConfig {
            max_processing: 8,
            max_search_ahead: 64,
            max_attempts: u32::MAX,
            ack_timeout_ms: 5_000,
            backoff: Backoff {
                base_ms: 10,
                cap_ms: 200,
                jitter_permille: 250,
            },
        },
        dir: dir.clone(),
        resend_after_ms: 1_000,
        step_wait: Duration::from_millis(20),
        // The test checks every record's result on every replica: keep the records.
        report_progress: false,
    };
    let t0 = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(t0.elapsed().as_millis()).unwrap_or(i64::MAX));
    let mut relay = Relay::open(
        relay_cfg,
        clock,
        ClusterSubmit::new(cluster.clone(), KEY_SEED, CONSUMER, 1),
    )
    .unwrap();

    // Holds: 9 per batch, 3 of them confirmed (released), 6 refunded: 18 records.
    let records = 2 * (BATCH - BATCH / 4) as usize;
    let second_batch_at = Duration::from_secs(8);
    let (mut second, mut killed) = (false, false);
    let diag = |why: &str| {
        let now: Vec<i64> = seen.iter().map(|s| s.lock().unwrap().now_ms).collect();
        format!(
            "{why}\nreplica times: {now:?} (END {end_ms})\nperformed: {:?}\nrelay dir: {}",
            performed.lock().unwrap(),
            dir.display()
        )
    };
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{}",
            diag("the 60 s guard ran out")
        );
        let stats = relay.step().await.unwrap();
        if !second && t0.elapsed() >= second_batch_at {
            submit_batch(BATCH + 1);
            second = true;
        }
        if !killed && performed.lock().unwrap().len() >= records / 3 {
            if let Some(r) = running[0].take() {
                r.kill().await;
            }
            killed = true;
        }
        let past_end = seen.iter().all(|s| s.lock().unwrap().now_ms >= end_ms);
        let all_applied = published
            .iter()
            .all(|p| p.snapshot().map(|(o, _)| o.results_len()) == Some(records));
        if past_end && stats.progress >= records as u64 && stats.pending_results == 0 && all_applied
        {
            break;
        }
    }
    drop(relay);
    for r in running.into_iter().flatten() {
        r.kill().await;
    }

    // The release fired at exactly the schedule's instants, on both sides of the change.
    let london = ZoneRules::from_iana("Europe/London").unwrap();
    let release = CronSchedule::parse_in(WEEKDAY_TIMINGS.release, london).unwrap();
    let expected = release.instants_between(start_ms, end_ms).unwrap();
    assert_eq!(expected.len(), 2, "{expected:?}");
    assert_ne!(
        expected[0] % 86_400_000,
        expected[1] % 86_400_000,
        "17:00 London is another UTC hour on each side of the change: {expected:?}"
    );
    for (i, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap();
        let dues: Vec<i64> = s.releases.iter().map(|(d, _)| *d).collect();
        assert_eq!(dues, expected, "replica {i}: {:?}", s.releases);
        for (due, agreed) in &s.releases {
            let late = agreed - due;
            assert!(
                (0..=20 * TICK_MS as i64 * SPEED).contains(&late),
                "replica {i}: fired {late} ms after {due}"
            );
        }
    }

    // Every record performed once at the workers, and one result each on every replica.
    {
        let performed = performed.lock().unwrap();
        assert_eq!(performed.len(), records, "{}", diag("performed"));
        assert!(performed.values().all(|n| *n == 1), "{performed:?}");
        let w0 = by_worker[0].load(Ordering::Relaxed);
        assert!(w0 > 0 && (w0 as usize) < records, "worker 0: {w0}");
    }
    let (reference, _) = published[0].snapshot().unwrap();
    assert_eq!(reference.len(), records);
    for p in &published {
        let (o, _) = p.snapshot().unwrap();
        assert_eq!(o.results_len(), records);
        for (index, r) in o.iter() {
            assert!(o.has_result(index), "record {index} {r:?}");
            assert!(r.handler == RELEASED || r.handler == REFUNDED, "{r:?}");
            assert_eq!(reference.get(index), Some(r));
        }
    }
    let count = |h: &str| reference.iter().filter(|(_, r)| r.handler == h).count();
    assert_eq!((count(RELEASED), count(REFUNDED)), (6, 12));

    // The replicas agree; every hold was released or refunded.
    let s0 = seen[0].lock().unwrap().state.clone().unwrap();
    for s in &seen[1..] {
        assert_eq!(s.lock().unwrap().state.as_ref(), Some(&s0));
    }
    // Digests at the latest sequence number every replica has finished (one below the lowest
    // replica's newest, which it may still be executing) and every replica recorded.
    let digests: Vec<BTreeMap<u64, Digest32>> = seen
        .iter()
        .map(|s| s.lock().unwrap().digests.clone())
        .collect();
    let finished = digests
        .iter()
        .map(|d| d.keys().next_back().copied().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let common = digests[0]
        .range(..finished)
        .rev()
        .map(|(seq, _)| *seq)
        .find(|seq| digests.iter().all(|d| d.contains_key(seq)))
        .expect("a sequence number every replica finished and recorded");
    for (i, d) in digests.iter().enumerate() {
        assert_eq!(
            d.get(&common),
            digests[0].get(&common),
            "replica {i} at seq {common}"
        );
    }
    assert!(s0.holds.is_empty() && s0.confirmed.is_empty(), "{s0:?}");
    assert_eq!(s0.settlements, 2, "{s0:?}");
    assert_eq!(
        s0.released + s0.refunded,
        (1..=2 * BATCH).filter(|k| k % 4 != 0).sum::<u64>()
    );
    if let Ok(c) = Arc::try_unwrap(cluster) {
        c.stop().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
