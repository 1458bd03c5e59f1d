//! Cross-engine equivalence on one recorded sequence: a seeded sim-bft run of the demo ledger
//! (4 PBFT replicas in the deterministic simulator, robust agreed time, ticks every 200 ms from
//! every replica) is recorded batch by batch — seq, agreed time, the ordered ticks with their
//! senders, the fires, and replica 0's application digest and cron pages after the batch — and
//! exactly that sequence is fed to the node's own execution path,
//! `ccron_node::LedgerHost::execute` on node `Block`s (the call a Malachite node makes on a
//! decided value), not to `ccron::host::replay`. The fires of every batch, the application
//! digest, the cron pages and the kernel's replicated bookkeeping (exactly-once table, tick gate,
//! counters) must be those the sim-bft replica had.
//!
//! How the sequence is recorded: a harness wraps sim-bft's `ClusterHarness`; its nodes see every
//! message a replica sends (the primary's pre-prepares carry the batches, kept by digest) and
//! every `Executed` output of replica 0, which names its batch by digest. A batch's ticks are
//! its tick requests with their numbers (the kernel skips replays on both engines); the ones
//! above the replay floor are checked against the components the replica itself reports.
//!
//! The demo run has no clients (ticks only). The `orders` run has two sim-bft clients whose puts
//! place orders that expire 2 s later: their requests are replayed as the adapter's signed
//! requests (number = sim-bft's request number, one ed25519 key per client) through
//! `LedgerHost::execute_with_clients`, which runs the node's own request path (the kernel's
//! exactly-once per `(client, number)`) under sim-bft's client ids (the orders ledger records
//! each order's owner, and the node otherwise derives the id from the key).
//!
//! A third recording runs a ledger defined here, outside the project's crates (a user's own
//! ledger type, with a cron entry, a periodic count and client requests), through both engines.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use ccron::Due;
use ccron::host::{Application, ExecutedRequests, FireNote, HostCounters};
use ccron_ledgers::orders::{SchedAppConfig, ScheduledLedger};
use ccron_node::ledger::{DEFAULT_TICK_PERIOD_MS, LedgerHost, LedgerSetup};
use ccron_node::request::{ClientRequest, SignedRequest};
use ccron_node::types::{Block, Hash32, Sig, TickTx, Validators};
use ed25519_dalek::SigningKey;
use sim_bft::crypto::internal_client_owner;
use sim_bft::ledgers::demo::DemoTables;
use sim_bft::node::{Executed, Input, Millis, Node, NodeId, Output};
use sim_bft::protocol::{Batch, Body, Payload, RequestKind, Wire, codec};
use sim_bft::sim::cluster::{ClusterHarness, SimReplica};
use sim_bft::sim::{DiskImage, Harness, LedgerKind, Role, SimConfig, Simulator};

const N: u32 = 4;
/// The replica whose executions are recorded.
const RECORDED: NodeId = 0;
/// Simulated run time (the demo tables fire every 4 s and 5 s).
const RUN_MS: u64 = 30_000;
/// Decode limit for recorded messages.
const LIMIT: usize = 1 << 24;

/// Replica 0's state right after a batch: application digest, cron pages (without the
/// replica's own agreed-time page), last agreed time, and the kernel's exactly-once table,
/// tick replay floor and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Checkpoint {
    app_digest: [u8; 32],
    pages: Vec<(u32, Vec<u8>)>,
    agreed_ms: Option<Millis>,
    requests: ExecutedRequests,
    floor: Vec<(u32, u32, u64)>,
    counters: HostCounters,
}

/// One executed batch as recorded.
#[derive(Debug, Clone)]
struct RecordedBatch {
    seq: u64,
    agreed_time_ms: Option<Millis>,
    /// `(component, sender replica, tick number)` in batch order.
    ticks: Vec<(u32, u32, u64)>,
    /// `(client, request number, payload)` of user requests in batch order.
    requests: Vec<(u64, u64, Vec<u8>)>,
    fires: Vec<FireNote>,
    /// Set when this batch was the last one the replica executed in one step (its state then
    /// is the state after this batch).
    checkpoint: Option<Checkpoint>,
}

#[derive(Default)]
struct Recorder {
    /// Every batch a replica proposed, by digest.
    batches: BTreeMap<[u8; 32], Batch>,
    /// Replica 0's executions, in order, with the state after the step that executed them.
    executed: Vec<(Executed, Option<Checkpoint>)>,
}

impl Recorder {
    fn note_message(&mut self, bytes: &[u8]) {
        let Ok(Wire::Signed(m)) = codec::decode::<Wire>(bytes, LIMIT) else {
            return;
        };
        let Ok(p) = codec::decode::<Payload>(&m.payload, LIMIT) else {
            return;
        };
        if let Body::PrePrepare { batch, .. } = p.body
            && let Ok(d) = batch.digest(sim_bft::crypto::Signatures::default())
        {
            self.batches.insert(d, batch);
        }
    }

    /// The recorded sequence: each executed batch resolved to its content.
    fn sequence(&self) -> Vec<RecordedBatch> {
        // The replay floor per (component, sender): ticks at or below it are skipped by the
        // kernel on both engines, and the replica does not report them.
        let mut floor: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        let mut out = Vec::new();
        for (e, checkpoint) in &self.executed {
            let batch = self
                .batches
                .get(&e.batch_digest)
                .unwrap_or_else(|| panic!("seq {}: batch not seen on the network", e.seq));
            let mut ticks = Vec::new();
            let mut reported = Vec::new();
            let mut requests = Vec::new();
            for r in &batch.requests {
                let (client, req_seq) = (r.request.client, r.request.req_seq);
                match r.request.kind {
                    RequestKind::Tick => {
                        let component = <[u8; 4]>::try_from(r.request.payload.as_slice())
                            .ok()
                            .map(u32::from_le_bytes);
                        let sender = internal_client_owner(client).filter(|s| *s < N);
                        if let (Some(c), Some(s)) = (component, sender) {
                            ticks.push((c, s, req_seq));
                            let last = floor.entry((c, s)).or_insert(0);
                            if req_seq > *last {
                                *last = req_seq;
                                reported.push(c);
                            }
                        }
                    }
                    RequestKind::Write => {
                        if internal_client_owner(client).is_none() {
                            requests.push((client, req_seq, r.request.payload.clone()));
                        }
                    }
                }
            }
            assert_eq!(
                reported, e.ticks,
                "seq {}: recorded ticks differ from the replica's",
                e.seq
            );
            out.push(RecordedBatch {
                seq: e.seq,
                agreed_time_ms: e.agreed_time_ms,
                ticks,
                requests,
                fires: e.fires.clone(),
                checkpoint: checkpoint.clone(),
            });
        }
        out
    }
}

/// A sim-bft replica that reports what it sends and executes to the recorder.
struct RecNode {
    id: NodeId,
    inner: SimReplica,
    rec: Rc<RefCell<Recorder>>,
}

impl Node for RecNode {
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>) {
        let start = out.len();
        self.inner.handle(now, input, out);
        let mut rec = self.rec.borrow_mut();
        let mut executed = false;
        for o in &out[start..] {
            match o {
                Output::Send { bytes, .. } | Output::Broadcast { bytes } => {
                    rec.note_message(bytes);
                }
                Output::Executed(e) if self.id == RECORDED => {
                    rec.executed.push((e.clone(), None));
                    executed = true;
                }
                _ => {}
            }
        }
        if executed && let Some(r) = self.inner.replica() {
            let time_page = r.config().time_page;
            let cp = Checkpoint {
                app_digest: r.app().digest(),
                pages: r
                    .pages()
                    .snapshot()
                    .into_iter()
                    .filter(|(id, _)| *id != time_page)
                    .collect(),
                agreed_ms: r.last_agreed_time_ms(),
                requests: r.host().requests().clone(),
                floor: r.host().gate().floor_entries().collect(),
                counters: r.host().counters().clone(),
            };
            if let Some(last) = rec.executed.last_mut() {
                last.1 = Some(cp);
            }
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.inner.next_deadline()
    }
}

/// sim-bft's cluster harness, booting [`RecNode`]s.
struct RecHarness {
    inner: ClusterHarness,
    rec: Rc<RefCell<Recorder>>,
}

impl Harness for RecHarness {
    type Node = RecNode;

    fn boot(&mut self, id: NodeId, disk: &DiskImage, role: Role) -> RecNode {
        RecNode {
            id,
            inner: self.inner.boot(id, disk, role),
            rec: self.rec.clone(),
        }
    }

    fn client_request(&mut self, client: u32, number: u64) -> Vec<u8> {
        self.inner.client_request(client, number)
    }

    fn status(&self, node: &RecNode) -> Option<(u64, [u8; 32])> {
        self.inner.status(&node.inner)
    }

    fn check(&self, node: &RecNode) -> Result<(), String> {
        self.inner.check(&node.inner)
    }

    fn fires(&self, node: &RecNode) -> BTreeMap<String, u64> {
        self.inner.fires(&node.inner)
    }

    fn on_send(&self, bytes: &[u8]) {
        self.inner.on_send(bytes);
    }

    fn reply_number(&self, bytes: &[u8]) -> Option<(u32, u64)> {
        self.inner.reply_number(bytes)
    }

    fn on_reply(&mut self, bytes: &[u8]) -> Option<(u32, String)> {
        self.inner.on_reply(bytes)
    }

    fn metrics(&self, node: &RecNode) -> BTreeMap<String, u64> {
        self.inner.metrics(&node.inner)
    }

    fn view(&self, node: &RecNode) -> Option<u64> {
        self.inner.view(&node.inner)
    }

    fn take_failure(&mut self, node: &mut RecNode) -> Option<String> {
        self.inner.take_failure(&mut node.inner)
    }
}

/// Runs the seeded demo cluster and returns the recorded sequence of replica 0.
fn record(seed: u64) -> Vec<RecordedBatch> {
    let tables = DemoTables::default();
    record_with(SimConfig {
        seed,
        replicas: N,
        ledger: LedgerKind::Demo,
        tick_period_ms: DEFAULT_TICK_PERIOD_MS,
        components: tables.components(),
        rotate_ticks: false,
        clients: 0,
        request_interval_ms: 0,
        duration_ms: RUN_MS,
        node_check_every: 0,
        ..SimConfig::default()
    })
}

/// The orders ledger's configuration in sim-bft's `--ledger orders` (no zone installs).
fn sim_orders_config() -> SchedAppConfig {
    SchedAppConfig {
        puts_as_orders: true,
        zone_installs: false,
        expiry_ms: 2_000,
        ..SchedAppConfig::default()
    }
}

/// Runs the seeded orders cluster with two clients and returns replica 0's recorded sequence.
fn record_orders(seed: u64) -> Vec<RecordedBatch> {
    record_with(SimConfig {
        seed,
        replicas: N,
        ledger: LedgerKind::Orders,
        tick_period_ms: DEFAULT_TICK_PERIOD_MS,
        components: vec![sim_orders_config().component],
        rotate_ticks: false,
        clients: 2,
        request_interval_ms: 400,
        zone_installs: false,
        duration_ms: RUN_MS,
        node_check_every: 0,
        ..SimConfig::default()
    })
}

fn record_with(cfg: SimConfig) -> Vec<RecordedBatch> {
    record_harness(cfg, ClusterHarness::new)
}

/// Records a run of `cfg` on the cluster harness `make` builds (e.g. with a user's own ledger).
fn record_harness(
    cfg: SimConfig,
    make: impl FnOnce(&SimConfig) -> ClusterHarness,
) -> Vec<RecordedBatch> {
    let inner = make(&cfg);
    inner.validate().expect("harness");
    let rec = Rc::new(RefCell::new(Recorder::default()));
    let harness = RecHarness {
        inner,
        rec: rec.clone(),
    };
    let mut sim = Simulator::new(cfg, harness).expect("simulator");
    sim.run_until(RUN_MS);
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    rec.borrow().sequence()
}

/// Four validators; sim-bft replica `i` is the validator at index `i` of the address-ordered
/// set (the sender index `ccron::host` sees on both engines).
fn validators() -> Validators {
    let keys: Vec<[u8; 32]> = (0..N as u8)
        .map(|i| [i.wrapping_mul(37) ^ 0x5a; 32])
        .collect();
    Validators::new(&keys)
}

/// The ed25519 key the replay signs sim-bft client `client`'s requests with.
fn client_key(client: u64) -> SigningKey {
    let mut secret = [0x3c; 32];
    secret[..8].copy_from_slice(&client.to_le_bytes());
    SigningKey::from_bytes(&secret)
}

/// The sim-bft client id of a replayed request (by its key).
fn sim_client(r: &SignedRequest) -> ccron::ClientId {
    sim_bft::node::ledger_client(
        (0..64u64)
            .find(|&c| client_key(c).verifying_key().to_bytes() == r.request.client_key)
            .unwrap_or(u64::MAX),
    )
}

/// The recorded batch as the node's block (no samples: execution does not read them; the block
/// validity rule is checked where blocks are proposed). Ticks keep sim-bft's numbers; client
/// requests become signed node requests with sim-bft's request numbers.
fn adapter_block(b: &RecordedBatch, vs: &Validators) -> Block {
    Block {
        height: b.seq,
        prev_round: 0,
        prev_id: Hash32::default(),
        samples: Vec::new(),
        agreed_time_ms: b.agreed_time_ms.expect("the robust time service is on"),
        ticks: b
            .ticks
            .iter()
            .map(|&(component, sender, number)| TickTx {
                component,
                submitter: *vs.get(sender as usize).expect("a validator"),
                number,
                // Execution does not read it: signatures are checked where blocks are proposed
                // (`validate_block`).
                signature: Sig([0; 64]),
            })
            .collect(),
        requests: b
            .requests
            .iter()
            .map(|(client, number, payload)| {
                let key = client_key(*client);
                ClientRequest {
                    client_key: key.verifying_key().to_bytes(),
                    number: *number,
                    payload: payload.clone(),
                }
                .sign(&ccron_node::crypto::SigningDomain::V1, &key)
            })
            .collect(),
        // Execution does not read it (checked where blocks are proposed).
        prev_state: None,
    }
}

/// What the comparison covered.
#[derive(Debug)]
struct Compared {
    batches: usize,
    checkpoints: usize,
    fires: usize,
    ticks: usize,
    requests: usize,
}

/// The node's ledger setup for these runs: `N` validators, `components` ticking at the sim-bft
/// runs' period, sim-bft's default pages.
fn setup(components: &[u32]) -> LedgerSetup {
    LedgerSetup {
        validators: N,
        tick_periods: components
            .iter()
            .map(|&c| (c, DEFAULT_TICK_PERIOD_MS))
            .collect(),
        pages: ccron_node::ledger::DEFAULT_PAGES,
    }
}

/// Feeds `seq` to a fresh node host of the demo ledger and compares batch by batch; the first
/// difference is the error.
fn feed_adapter(seq: &[RecordedBatch]) -> Result<Compared, String> {
    let tables = DemoTables::default();
    let app = sim_bft::ledgers::demo::demo_ledger(&tables).map_err(|e| format!("host: {e}"))?;
    feed(LedgerHost::new(app, &setup(&tables.components())), seq)
}

/// A fresh node host of the orders ledger.
fn orders_host() -> LedgerHost<ScheduledLedger> {
    let cfg = sim_orders_config();
    LedgerHost::new(ScheduledLedger::new(cfg), &setup(&[cfg.component]))
}

/// Feeds `seq` to `host` and compares batch by batch.
fn feed<A: Application>(
    mut host: LedgerHost<A>,
    seq: &[RecordedBatch],
) -> Result<Compared, String> {
    let vs = validators();
    let mut c = Compared {
        batches: 0,
        checkpoints: 0,
        fires: 0,
        ticks: 0,
        requests: 0,
    };
    for b in seq {
        let block = adapter_block(b, &vs);
        let out = host
            .execute_with_clients(&block, &vs, &sim_client)
            .map_err(|e| format!("seq {}: {e}", b.seq))?;
        c.requests += host.last_requests.len();
        if out.fires != b.fires {
            return Err(format!(
                "seq {}: fires differ: adapter {:?}, sim-bft {:?}",
                b.seq, out.fires, b.fires
            ));
        }
        c.batches += 1;
        c.fires += out.fires.len();
        c.ticks += b.ticks.len();
        if let Some(cp) = &b.checkpoint {
            if host.app_digest() != cp.app_digest {
                return Err(format!("seq {}: application digests differ", b.seq));
            }
            if host.host().pages().snapshot() != cp.pages {
                return Err(format!("seq {}: cron pages differ", b.seq));
            }
            if Some(block.agreed_time_ms) != cp.agreed_ms {
                return Err(format!("seq {}: agreed times differ", b.seq));
            }
            if host.host().requests() != &cp.requests {
                return Err(format!("seq {}: exactly-once tables differ", b.seq));
            }
            if host.host().gate().floor_entries().collect::<Vec<_>>() != cp.floor {
                return Err(format!("seq {}: tick replay floors differ", b.seq));
            }
            if host.host().counters() != &cp.counters {
                return Err(format!("seq {}: counters differ", b.seq));
            }
            c.checkpoints += 1;
        }
    }
    Ok(c)
}

#[test]
fn one_recorded_sim_bft_sequence_runs_alike_on_the_malachite_adapter() {
    let seq = record(7);
    let c = feed_adapter(&seq).unwrap_or_else(|e| panic!("{e}"));
    // Seed 7: 749 batches, 676 compared states, 16 fires, 1,198 ticks.
    eprintln!("compared: {c:?}");
    // Not vacuous: a real run (every demo table fired several times, many ticks coalesced by
    // the gate), and the state compared after most batches.
    assert!(c.batches >= 50, "{c:?}");
    assert!(c.fires >= 8, "{c:?}");
    assert!(c.ticks > c.batches, "{c:?}");
    assert!(c.checkpoints * 4 >= c.batches * 3, "{c:?}");
    let seqs: Vec<u64> = seq.iter().map(|b| b.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gapless");
}

/// The comparison can fail: one agreed time moved just before a due instant (the fire of that
/// batch moves to a later one), or the ticks of that batch left out, and the adapter no longer
/// matches the recording.
#[test]
fn a_perturbed_recording_is_caught() {
    let seq = record(7);
    // The first fire with a time due whose batch's predecessor is before the due instant.
    let k = (1..seq.len())
        .find(|&k| {
            seq[k].fires.iter().any(|f| match f.due {
                Some(Due::Time(d)) => seq[k - 1].agreed_time_ms.is_some_and(|p| p < d),
                _ => false,
            })
        })
        .expect("a fire batch");
    let due = seq[k]
        .fires
        .iter()
        .find_map(|f| match f.due {
            Some(Due::Time(d)) => Some(d),
            _ => None,
        })
        .expect("due");
    let mut moved = seq.clone();
    moved[k].agreed_time_ms = Some(due - 1);
    let err = feed_adapter(&moved).expect_err("a moved agreed time must show");
    assert!(err.starts_with(&format!("seq {}:", seq[k].seq)), "{err}");

    // The ticks of a batch that fired, left out: its fires do not happen there.
    let mut dropped = seq.clone();
    dropped[k].ticks.clear();
    let err = feed_adapter(&dropped).expect_err("dropped ticks must show");
    assert!(err.contains("fires differ"), "{err}");
}

/// A recording with client requests: sim-bft's `orders` ledger with two clients placing orders
/// (each put an order whose expiry fires 2 s later on the ticks), replayed through the adapter's
/// request and tick path: the same fires in every batch, the same application digest (orders,
/// schedule book, outbox), cron pages and agreed time wherever replica 0's state was observed.
#[test]
fn a_recorded_sim_bft_run_with_client_requests_runs_alike_on_the_adapter() {
    let seq = record_orders(7);
    let c = feed(orders_host(), &seq).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("compared: {c:?}");
    assert!(c.requests >= 20, "{c:?}");
    assert!(c.fires >= 10, "orders expired: {c:?}");
    assert!(c.checkpoints * 4 >= c.batches * 3, "{c:?}");
    // Perturbed: one batch's requests left out, and the adapter no longer matches.
    let k = seq
        .iter()
        .position(|b| !b.requests.is_empty())
        .expect("a batch with requests");
    let mut dropped = seq.clone();
    dropped[k].requests.clear();
    let err = feed(orders_host(), &dropped).expect_err("dropped requests must show");
    assert!(!err.is_empty());
}

/// A ledger of a user's own, defined here (outside the project's crates): it counts its
/// clients' requests and their bytes, and its cron table adds a beat every 3 s and a chime every
/// 7 s of agreed time.
mod user_ledger {
    use ccron::host::{AppError, Application, ClientId, CronLedger, Digest32, ExecContext};
    use ccron::{CronEntry, CronTable, CronTableRegistry, PageAllocator, Periodic};
    use sha2::{Digest, Sha256};

    /// The component its ticks evaluate.
    pub const COMPONENT: u32 = 5;

    /// The ledger's own state.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub struct Tally {
        requests: u64,
        bytes: u64,
        beats: u64,
        chimes: u64,
    }

    impl Application for Tally {
        fn execute(&mut self, _ctx: ExecContext, _client: ClientId, payload: &[u8]) -> Vec<u8> {
            self.requests += 1;
            self.bytes += payload.len() as u64;
            format!("ok {}", self.requests).into_bytes()
        }
        fn digest(&self) -> Digest32 {
            Sha256::digest(self.snapshot()).into()
        }
        fn snapshot(&self) -> Vec<u8> {
            [self.requests, self.bytes, self.beats, self.chimes]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        }
        fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
            let v: Vec<u64> = snapshot
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            let [requests, bytes, beats, chimes] = v[..] else {
                return Err(AppError::BadSnapshot("tally: 32 bytes".into()));
            };
            *self = Tally {
                requests,
                bytes,
                beats,
                chimes,
            };
            Ok(())
        }
    }

    /// The same tables on every replica and node, at every boot.
    pub fn ledger() -> CronLedger<Tally> {
        let mut pages = PageAllocator::new(1, 63); // page 0: sim-bft's agreed time
        let mut table = CronTable::with_persistence(COMPONENT, pages.allocate(2).unwrap(), 8);
        table
            .add(CronEntry::<Tally>::periodic(
                0,
                Periodic::every_ms(3_000).unwrap(),
                |c| {
                    c.state.beats += 1;
                },
            ))
            .unwrap();
        table
            .add(CronEntry::<Tally>::periodic(
                1,
                Periodic::every_ms(7_000).unwrap(),
                |c| {
                    c.state.chimes += 1;
                },
            ))
            .unwrap();
        let mut registry = CronTableRegistry::new();
        registry.register(table).unwrap();
        CronLedger::new(Tally::default(), registry)
    }
}

/// A user-defined ledger through both engines: the same recorded sim-bft run (4 PBFT replicas,
/// two clients, ticks every 200 ms) and the node's execution path give the same fires after
/// every block and the same application digest, pages and kernel bookkeeping wherever replica
/// 0's state was observed.
#[test]
fn a_ledger_defined_outside_the_project_runs_alike_on_both_engines() {
    let cfg = SimConfig {
        seed: 11,
        replicas: N,
        tick_period_ms: DEFAULT_TICK_PERIOD_MS,
        components: vec![user_ledger::COMPONENT],
        rotate_ticks: false,
        clients: 2,
        request_interval_ms: 500,
        duration_ms: RUN_MS,
        node_check_every: 0,
        ..SimConfig::default()
    };
    let seq = record_harness(cfg, |c| {
        ClusterHarness::new(c).with_app(|_| Box::new(user_ledger::ledger()))
    });
    let host = LedgerHost::new(user_ledger::ledger(), &setup(&[user_ledger::COMPONENT]));
    let c = feed(host, &seq).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("compared: {c:?}");
    assert!(c.requests >= 20, "{c:?}");
    assert!(c.fires >= 10, "beats and chimes: {c:?}");
    assert!(c.checkpoints * 4 >= c.batches * 3, "{c:?}");
    // Perturbed: one agreed time moved just before a due instant, and the node no longer
    // matches.
    let k = (1..seq.len())
        .find(|&k| !seq[k].fires.is_empty())
        .expect("a fire batch");
    let mut moved = seq.clone();
    moved[k].ticks.clear();
    let host = LedgerHost::new(user_ledger::ledger(), &setup(&[user_ledger::COMPONENT]));
    assert!(feed(host, &moved).is_err());
}
