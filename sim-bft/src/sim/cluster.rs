//! The simulated PBFT cluster: boots [`Replica`]s from the seed and signs user clients' requests.
//!
//! [`Cluster`] is a builder over [`SimConfig`]: replicas, seed, time-service mode, signature
//! scheme and faults; it yields a [`Simulator`] driving [`ClusterHarness`]. Keys derive from the
//! seed (replicas and clients alike) under the configured scheme ([`Signatures`]); under
//! ed25519 a shared verification memo spares re-verifying the same signature on every replica.
//! Protocol-aware Byzantine kinds become the replica's own fault mode.

use std::any::Any;
use std::collections::BTreeMap;
use std::rc::Rc;

use ccron::{MemPages, Tick};

use super::workload::{Workload, WorkloadFactory, workload_rng};
use super::{ByzantineKind, ConfigError, DiskImage, FaultConfig, Harness, Role, SimConfig};
use super::{LedgerKind, NodeKind, PartitionKind, SimRng, Simulator, TimeServiceMode};
use crate::app::{Application, WithTicks};
use crate::crypto::{self, Keyring, Signatures, SigningKey, VerifyCache};
use crate::ledgers::demo::{DemoTables, demo_ledger};
use crate::ledgers::{KvLedger, KvOp, TickCounter};
use crate::node::{Input, Millis, Node, NodeId, Output};
use crate::protocol::codec::{decode, encode};
use crate::protocol::{Payload, Request, RequestKind, SignedRequest, Wire};
use crate::replica::{Byzantine, Replica, ReplicaConfig, TickSenders, TimeMode};

/// How far a lying clock is off (ahead), when the Byzantine kind is `lying-time`.
pub const LYING_CLOCK_OFFSET_MS: Millis = 120_000;
/// Entries of the shared signature-verification memo.
const VERIFY_MEMO: usize = 1 << 16;
/// Bytes a maximal request leaves for its encoding around the Put value (client, number, kind,
/// key, lengths, signature).
const MAX_REQUEST_MARGIN: usize = 256;
/// Distinct keys each client writes (its requests overwrite them in turn).
const KEYS_PER_CLIENT: u64 = 64;
/// The replicas' `max_snapshot_bytes` under `--state-growth` (the reserved pages, 256 KiB by
/// default, leave 256 KiB for the application and clients).
pub const STATE_GROWTH_SNAPSHOT_BYTES: usize = 512 << 10;

/// A replica as the simulator hosts it: no replica when it could not be booted (an invalid
/// configuration or unreadable storage), in which case it ignores every input. A failed boot or
/// restart (storage that does not recover, even when an empty replica then boots to catch up by
/// state transfer) is kept as its failure, which the simulator reports as a
/// [`super::ViolationKind::NodeFailure`] naming the cause.
#[derive(Debug)]
pub struct SimReplica {
    replica: Option<Replica>,
    failure: Option<String>,
}

impl SimReplica {
    /// The replica, if it booted.
    pub fn replica(&self) -> Option<&Replica> {
        self.replica.as_ref()
    }
}

impl Node for SimReplica {
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>) {
        if let Some(r) = self.replica.as_mut() {
            r.handle(now, input, out);
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.replica.as_ref().and_then(Node::next_deadline)
    }
}

/// Adjusts a replica's configuration before boot.
pub type ConfigTweak = Box<dyn Fn(&mut ReplicaConfig)>;

/// Builds replica `id`'s application at every boot (first boot and restarts alike): the same
/// tables, registered the same way, on every replica.
pub type AppFactory = Box<dyn Fn(NodeId) -> Box<dyn Application>>;

/// Boots [`Replica`]s for the simulator.
pub struct ClusterHarness {
    n: u32,
    key_seed: u64,
    num_clients: u64,
    time_mode: TimeMode,
    client_keys: Vec<SigningKey>,
    signatures: Signatures,
    verify_cache: VerifyCache,
    tweak: Option<ConfigTweak>,
    app_factory: Option<AppFactory>,
    /// `FaultConfig::state_growth_bytes`.
    state_growth_bytes: u64,
    tick_components: BTreeMap<u32, u64>,
    tick_senders: TickSenders,
    ledger: LedgerKind,
    boot_failures: u64,
    /// The public keys, to offer sent signatures to `verify_cache` (see `on_send`).
    ring: Keyring,
    max_message_bytes: usize,
    /// Value size of a user request's Put (see [`FaultConfig::max_size_requests`]); 0 for the
    /// normal small value.
    request_value_bytes: usize,
    /// Custom workloads, one per client (empty: the stock key-value puts), and their streams.
    workloads: Vec<(Box<dyn Workload>, SimRng)>,
    /// The run's seed (for the workloads' streams).
    seed: u64,
    /// The configuration's start instant (the boot check's tick time).
    epoch_ms: Millis,
}

impl std::fmt::Debug for ClusterHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterHarness")
            .field("n", &self.n)
            .field("key_seed", &self.key_seed)
            .field("num_clients", &self.num_clients)
            .finish_non_exhaustive()
    }
}

/// The application factory of a ledger kind (`None`: the key-value ledger and tick counter, or
/// an application the caller supplies with [`ClusterHarness::with_app`]).
fn ledger_factory(ledger: LedgerKind, zone_installs: bool) -> Option<AppFactory> {
    match ledger {
        LedgerKind::Demo => {
            let tables = DemoTables::default();
            Some(Box::new(move |id| match demo_ledger(&tables) {
                Ok(l) => Box::new(l),
                Err(e) => {
                    // `validate` checks this first; a replica without tables rejects every
                    // tick (counted).
                    tracing::error!(id, error = %e, "demo tables");
                    Box::new(KvLedger::new())
                }
            }))
        }
        LedgerKind::Orders => {
            let app = crate::ledgers::orders::SchedAppConfig {
                puts_as_orders: true,
                zone_installs,
                expiry_ms: 2_000,
                ..Default::default()
            };
            Some(Box::new(move |_| {
                Box::new(crate::ledgers::orders::ScheduledLedger::new(app))
            }))
        }
        _ => None,
    }
}

/// The replica fault mode for a Byzantine kind (generic kinds are done by the simulator on the
/// bytes, so the replica runs honest code).
pub fn replica_fault(kind: ByzantineKind) -> Byzantine {
    match kind {
        ByzantineKind::Equivocate => Byzantine::EquivocatingPrimary,
        ByzantineKind::BogusViewChange => Byzantine::BogusViewChange,
        ByzantineKind::CorruptStateTransfer => Byzantine::CorruptStateChunks,
        ByzantineKind::LyingTime => Byzantine::LyingClock {
            offset_ms: LYING_CLOCK_OFFSET_MS,
        },
        ByzantineKind::TickFlood => Byzantine::TickFlood,
        ByzantineKind::BadSignatures => Byzantine::BadSignatures,
        ByzantineKind::BadDigests => Byzantine::BadDigests,
        ByzantineKind::StateRequestFlood => Byzantine::StateRequestFlood,
        ByzantineKind::SlowStateSource => Byzantine::SlowStateSource,
        ByzantineKind::FutureFlood => Byzantine::FutureFlood,
        ByzantineKind::StarveClient => Byzantine::StarveClient,
        ByzantineKind::Repropose => Byzantine::ReproposeCommitted,
        ByzantineKind::TimeOmit => Byzantine::TimeOmit,
        ByzantineKind::TimeReplay => Byzantine::TimeReplay,
        ByzantineKind::TimeOwn => Byzantine::TimeOwn,
        ByzantineKind::FatViewChange => Byzantine::FatViewChange,
        ByzantineKind::Amplify => Byzantine::Amplify,
        ByzantineKind::WithholdCommits => Byzantine::WithholdCommits,
        _ => Byzantine::Honest,
    }
}

impl ClusterHarness {
    /// A harness for the cluster `cfg` describes.
    pub fn new(cfg: &SimConfig) -> Self {
        let key_seed = SimRng::split(cfg.seed, "keys").next_u64();
        let num_clients = u64::from(cfg.clients);
        Self {
            n: cfg.replicas,
            key_seed,
            num_clients,
            time_mode: match cfg.time_service {
                TimeServiceMode::Off => TimeMode::Off,
                TimeServiceMode::Reference => TimeMode::Reference,
                _ => TimeMode::Robust,
            },
            client_keys: (0..num_clients)
                .map(|c| crypto::client_key(cfg.signatures, key_seed, c))
                .collect(),
            signatures: cfg.signatures,
            verify_cache: VerifyCache::new(VERIFY_MEMO),
            tweak: None,
            app_factory: ledger_factory(cfg.ledger, cfg.zone_installs),
            state_growth_bytes: cfg.faults.state_growth_bytes,
            tick_components: cfg
                .components
                .iter()
                .map(|c| (*c, cfg.tick_period_of(*c)))
                .filter(|(_, p)| *p > 0)
                .collect(),
            tick_senders: if cfg.rotate_ticks {
                TickSenders::Rotating
            } else {
                TickSenders::All
            },
            ledger: cfg.ledger,
            boot_failures: 0,
            ring: Keyring::new(cfg.signatures, key_seed, cfg.replicas, num_clients),
            max_message_bytes: ReplicaConfig::new(0, cfg.replicas, key_seed, num_clients)
                .max_message_bytes,
            workloads: Vec::new(),
            seed: cfg.seed,
            epoch_ms: cfg.epoch_ms,
            request_value_bytes: if cfg.faults.max_size_requests
                || (matches!(
                    cfg.faults.byzantine_kind,
                    ByzantineKind::FatViewChange | ByzantineKind::WithholdCommits
                ) && (cfg.faults.byzantine > 0 || !cfg.faults.pinned_byzantine.is_empty()))
            {
                ReplicaConfig::new(0, cfg.replicas, key_seed, num_clients)
                    .max_request_bytes
                    .saturating_sub(MAX_REQUEST_MARGIN)
                    .max(8)
            } else {
                0
            },
        }
    }

    /// Offers a signed request to the shared memo for batch verification.
    fn offer_request(&self, r: &SignedRequest) {
        if let (Some(key), Ok(msg)) = (self.ring.client(r.request.client), encode(&r.request)) {
            self.verify_cache.offer(key, &msg, &r.sig);
        }
    }

    /// Adjusts every replica's configuration before boot (batching, windows, timeouts).
    pub fn with_tweak(mut self, tweak: impl Fn(&mut ReplicaConfig) + 'static) -> Self {
        self.tweak = Some(Box::new(tweak));
        self
    }

    /// Boots every replica with the application `factory` builds (e.g. a
    /// [`crate::ledgers::CronLedger`]) instead of the demo key-value ledger and tick counter.
    pub fn with_app(mut self, factory: impl Fn(NodeId) -> Box<dyn Application> + 'static) -> Self {
        self.app_factory = Some(Box::new(factory));
        self
    }

    /// Every client sends the requests of its own [`Workload`] (`factory(client)`, each with its
    /// own stream split from the seed) instead of the stock key-value puts.
    pub fn with_workload(mut self, factory: impl Fn(u32) -> Box<dyn Workload>) -> Self {
        let clients = u32::try_from(self.num_clients).unwrap_or(u32::MAX);
        self.workloads = (0..clients)
            .map(|c| (factory(c), workload_rng(self.seed, c)))
            .collect();
        self
    }

    /// Replica `id`'s application, as every boot builds it.
    fn make_app(&self, id: NodeId, cfg: &ReplicaConfig) -> Box<dyn Application> {
        match &self.app_factory {
            Some(f) => f(id),
            None => Box::new(WithTicks::new(
                Box::new(KvLedger::new()),
                Box::new(TickCounter::new(
                    if cfg.time_page == 0 { 1 } else { 0 },
                    cfg.num_pages.saturating_sub(1).max(1),
                )),
            )),
        }
    }

    /// Checks the application setup before any replica boots, on throwaway instances: every
    /// replica's application starts from the same state (same digest), its snapshot restores
    /// into a freshly built one with the same digest and snapshot (what every restart and
    /// state transfer does), it reloads from empty reserved pages, and it accepts a tick of
    /// every component that ticks. Each failure is [`ConfigError::App`] naming the check and
    /// the cause, instead of a cluster that stalls at its first restart.
    pub fn check_app(&self) -> Result<(), ConfigError> {
        let err = |check: &'static str, cause: String| ConfigError::App { check, cause };
        let cfg = self.replica_config(0, Role::Honest);
        let first = self.make_app(0, &cfg);
        for id in 1..self.n {
            let other = self.make_app(id, &self.replica_config(id, Role::Honest));
            if other.digest() != first.digest() {
                return Err(err(
                    "same setup on every replica",
                    format!("replica {id}'s application digest differs from replica 0's at boot"),
                ));
            }
        }
        crate::replica::check_page_ranges(&cfg, first.as_ref())
            .map_err(|e| err("reserved pages apart from the replica's", e.0))?;
        let snapshot = first.snapshot();
        if snapshot.len() > cfg.max_snapshot_bytes {
            return Err(err(
                "snapshot size",
                format!(
                    "the empty application's snapshot is {} bytes, above max_snapshot_bytes = {}",
                    snapshot.len(),
                    cfg.max_snapshot_bytes
                ),
            ));
        }
        let mut fresh = self.make_app(0, &cfg);
        fresh
            .restore(&snapshot)
            .map_err(|e| err("snapshot restores (restart, state transfer)", e.to_string()))?;
        if fresh.digest() != first.digest() || fresh.snapshot() != snapshot {
            return Err(err(
                "snapshot restores (restart, state transfer)",
                "a restored application's digest or snapshot differs from the original's".into(),
            ));
        }
        let mut pages = MemPages::new(cfg.page_size, cfg.num_pages);
        fresh
            .reload(&pages)
            .map_err(|e| err("reload from empty pages", e.to_string()))?;
        for component in self.tick_components.keys() {
            let tick = Tick::new(*component, 1, Some(self.epoch_ms));
            fresh
                .on_tick(tick, &mut pages)
                .map_err(|e| err("every ticking component has a table", e.to_string()))?;
        }
        if let Some(e) = fresh.halted() {
            return Err(err("a first tick runs", e.to_string()));
        }
        Ok(())
    }

    /// Replica `id`'s configuration with fault mode `role`.
    pub fn replica_config(&self, id: NodeId, role: Role) -> ReplicaConfig {
        let mut c = ReplicaConfig::new(id, self.n, self.key_seed, self.num_clients);
        c.time.mode = self.time_mode;
        c.verify_cache = Some(self.verify_cache.clone());
        c.signatures = self.signatures;
        c.tick_components = self.tick_components.clone();
        c.tick_senders = self.tick_senders;
        if let Role::Byzantine(kind) = role {
            c.byzantine = replica_fault(kind);
        }
        if self.state_growth_bytes > 0 {
            c.max_snapshot_bytes = STATE_GROWTH_SNAPSHOT_BYTES;
        }
        if let Some(t) = &self.tweak {
            t(&mut c);
        }
        c
    }

    /// Checks that the replicas accept their configuration (e.g. n = 3f+1 with f >= 1) and
    /// that the application setup is consistent ([`Self::check_app`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.ledger == LedgerKind::Demo {
            // Fail early rather than boot replicas without their tables.
            demo_ledger(&DemoTables::default()).map_err(|e| ConfigError::Node(e.to_string()))?;
        }
        for id in 0..self.n {
            self.replica_config(id, Role::Honest)
                .validate()
                .map_err(|e| ConfigError::Node(e.to_string()))?;
        }
        if !self.workloads.is_empty() && self.workloads.len() as u64 != self.num_clients {
            return Err(ConfigError::Node(format!(
                "{} workloads for {} clients",
                self.workloads.len(),
                self.num_clients
            )));
        }
        self.check_app()
    }

    /// Boots that failed (each also logged).
    pub fn boot_failures(&self) -> u64 {
        self.boot_failures
    }
}

impl Harness for ClusterHarness {
    type Node = SimReplica;

    fn boot(&mut self, id: NodeId, disk: &DiskImage, role: Role) -> SimReplica {
        let cfg = self.replica_config(id, role);
        match Replica::recover_app(cfg.clone(), self.make_app(id, &cfg), disk) {
            Ok(r) => SimReplica {
                replica: Some(r),
                failure: None,
            },
            Err(e) => {
                // Unreadable storage: start empty and catch up by state transfer.
                tracing::error!(id, error = %e, "recovery failed; booting empty");
                self.boot_failures += 1;
                let failure = Some(format!("recovery from storage failed: {e}"));
                match Replica::with_app(cfg.clone(), self.make_app(id, &cfg)) {
                    Ok(r) => SimReplica {
                        replica: Some(r),
                        failure,
                    },
                    Err(e) => {
                        tracing::error!(id, error = %e, "boot failed");
                        SimReplica {
                            replica: None,
                            failure: Some(format!("boot failed: {e}")),
                        }
                    }
                }
            }
        }
    }

    fn take_failure(&mut self, node: &mut SimReplica) -> Option<String> {
        node.failure.take().or_else(|| {
            node.replica
                .as_mut()
                .and_then(Replica::take_install_failure)
        })
    }

    fn on_reply(&mut self, bytes: &[u8]) -> Option<(u32, String)> {
        if self.workloads.is_empty() {
            return None;
        }
        let r: crate::protocol::SignedReply = decode(bytes, self.max_message_bytes).ok()?;
        let client = u32::try_from(r.reply.client).ok()?;
        let number = r.reply.req_seq.checked_sub(1)?;
        let (w, _) = self.workloads.get_mut(client as usize)?;
        w.on_reply(number, &r.reply.result)
            .err()
            .map(|why| (client, format!("request {number}: {why}")))
    }

    fn state<'a>(&self, node: &'a SimReplica) -> Option<&'a dyn Any> {
        node.replica().map(|r| {
            let app: &dyn Any = r.app();
            app
        })
    }

    fn final_state(&mut self, node: SimReplica) -> Option<Box<dyn Any + Send>> {
        node.replica.map(|r| {
            let app: Box<dyn Any + Send> = r.into_app();
            app
        })
    }

    /// Offers the signatures of a sent message to the shared memo: the first replica that
    /// misses one verifies every offered signature in one batch equation. Speed only; `sim`
    /// tags are never memoised, so there is nothing to offer.
    fn on_send(&self, bytes: &[u8]) {
        if self.signatures == Signatures::Sim {
            return;
        }
        match decode::<Wire>(bytes, self.max_message_bytes) {
            Ok(Wire::Signed(m)) => {
                if let Ok(p) = decode::<Payload>(&m.payload, self.max_message_bytes)
                    && let Some(key) = self.ring.replica(p.from)
                {
                    self.verify_cache.offer(key, &m.payload, &m.sig);
                }
            }
            Ok(Wire::Request(r)) => self.offer_request(&r),
            Ok(Wire::Requests(rs)) => rs.iter().for_each(|r| self.offer_request(r)),
            Err(_) => {}
        }
    }

    fn reply_number(&self, bytes: &[u8]) -> Option<(u32, u64)> {
        let r: crate::protocol::SignedReply = decode(bytes, self.max_message_bytes).ok()?;
        let client = u32::try_from(r.reply.client).ok()?;
        // Request numbers on the wire are the simulator's numbers plus one.
        Some((client, r.reply.req_seq.checked_sub(1)?))
    }

    fn client_request(&mut self, client: u32, number: u64) -> Vec<u8> {
        let Some(key) = self.client_keys.get(client as usize) else {
            return Vec::new();
        };
        if let Some((w, rng)) = self.workloads.get_mut(client as usize) {
            let payload = w.payload(number, rng);
            let request = Request {
                client: u64::from(client),
                req_seq: number + 1,
                kind: RequestKind::Write,
                payload,
            };
            return SignedRequest::sign_vouched(key, request, Some(&self.verify_cache))
                .and_then(|r| r.to_bytes())
                .unwrap_or_else(|e| {
                    tracing::error!(client, error = %e, "cannot encode a workload request");
                    Vec::new()
                });
        }
        let op = if self.state_growth_bytes > 0 {
            // A fresh key per request: the state grows until the snapshot limit stops it.
            let len = usize::try_from(self.state_growth_bytes).unwrap_or(usize::MAX);
            KvOp::Put {
                key: format!("c{client}/g{number}").into_bytes(),
                value: vec![(number % 251) as u8; len.min(STATE_GROWTH_SNAPSHOT_BYTES)],
            }
        } else {
            KvOp::Put {
                key: format!("c{client}/k{}", number % KEYS_PER_CLIENT).into_bytes(),
                value: if self.request_value_bytes > 0 {
                    let mut v = vec![0x5a; self.request_value_bytes];
                    v[..8].copy_from_slice(&number.to_le_bytes());
                    v
                } else {
                    number.to_le_bytes().to_vec()
                },
            }
        };
        // Client request numbers start at 1 (0 means "none yet" to the clients manager).
        // Signed with the memo vouching for the signature (speed only, see
        // `crypto::sign_vouched`): the replicas find it there instead of checking it again.
        let request = Request {
            client: u64::from(client),
            req_seq: number + 1,
            kind: RequestKind::Write,
            payload: op.to_payload(),
        };
        SignedRequest::sign_vouched(key, request, Some(&self.verify_cache))
            .and_then(|r| r.to_bytes())
            .unwrap_or_else(|e| {
                tracing::error!(client, error = %e, "cannot encode a client request");
                Vec::new()
            })
    }

    fn status(&self, node: &SimReplica) -> Option<(u64, [u8; 32])> {
        node.replica()
            .map(|r| (r.last_executed(), r.state_digest_now()))
    }

    fn state_sha256(&self, node: &SimReplica) -> Option<[u8; 32]> {
        node.replica()
            .map(|r| r.host().digest_with(ccron::state_hash::StateHash::Sha256))
    }

    fn check(&self, node: &SimReplica) -> Result<(), String> {
        match node.replica() {
            Some(r) => r.check_invariants().map_err(|e| e.to_string()),
            None => Err("replica failed to boot".to_string()),
        }
    }

    fn fires(&self, node: &SimReplica) -> BTreeMap<String, u64> {
        node.replica()
            .map(|r| {
                r.app()
                    .fires()
                    .into_iter()
                    .map(|((c, p), n)| (format!("{c}/{p}"), n))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn view(&self, node: &SimReplica) -> Option<u64> {
        node.replica().map(Replica::view)
    }

    fn metrics(&self, node: &SimReplica) -> BTreeMap<String, u64> {
        node.replica()
            .map(|r| {
                r.metrics()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The application factory a [`Cluster`] boots every replica with.
type SharedAppFactory = Rc<dyn Fn(NodeId) -> Box<dyn Application>>;
/// The replica configuration tweak of a [`Cluster`].
type SharedTweak = Rc<dyn Fn(&mut ReplicaConfig)>;

/// Builds a simulated PBFT cluster: every knob of [`SimConfig`], the application every replica
/// runs, the clients' workloads and the replicas' configuration tweak. [`Cluster::build`]
/// validates everything (knob ranges, the replicas' configuration, the application setup:
/// [`ClusterHarness::check_app`]) and fails with a typed [`ConfigError`] before anything runs.
///
/// ```
/// use sim_bft::ledgers::KvLedger;
/// use sim_bft::sim::cluster::Cluster;
///
/// let sim = Cluster::builder()
///     .seed(7)
///     .start_at("2026-03-28T00:00:00Z")?
///     .duration_ms(5_000, 5_000)
///     .clients(1, 500)
///     .ticks(vec![], 0)
///     .app(|_replica| KvLedger::new())
///     .build()?;
/// let outcome = sim.run();
/// assert!(outcome.ok(), "{:?}", outcome.violations);
/// // Typed access to each replica's final state.
/// assert!(outcome.app(0, |kv: &KvLedger| kv.len()).is_some_and(|n| n > 0));
/// # Ok::<(), sim_bft::sim::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Cluster {
    cfg: SimConfig,
    app: Option<SharedAppFactory>,
    workload: Option<WorkloadFactory>,
    tweak: Option<SharedTweak>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("cfg", &self.cfg)
            .field("app", &self.app.is_some())
            .field("workload", &self.workload.is_some())
            .field("tweak", &self.tweak.is_some())
            .finish()
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Self::builder()
    }
}

impl Cluster {
    /// A 4-replica cluster with the default [`SimConfig`].
    pub fn builder() -> Self {
        Self::from_config(SimConfig::default())
    }

    /// From a full configuration.
    pub fn from_config(cfg: SimConfig) -> Self {
        Self {
            cfg,
            app: None,
            workload: None,
            tweak: None,
        }
    }

    /// Number of replicas n (f = (n-1)/3).
    pub fn replicas(mut self, n: u32) -> Self {
        self.cfg.replicas = n;
        self
    }

    /// The seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = seed;
        self
    }

    /// True time at the start of the run, ms since the Unix epoch ([`SimConfig::epoch_ms`];
    /// `sim-bft run --from`).
    pub fn start_at_ms(mut self, epoch_ms: Millis) -> Self {
        self.cfg.epoch_ms = epoch_ms;
        self
    }

    /// True time at the start of the run, an RFC 3339 instant such as
    /// `2026-03-28T00:00:00Z` ([`Self::start_at_ms`]).
    pub fn start_at(self, instant: &str) -> Result<Self, ConfigError> {
        let ms = ccron::cron::parse_rfc3339_ms(instant).map_err(|e| ConfigError::BadInstant {
            input: instant.to_string(),
            cause: e.to_string(),
        })?;
        Ok(self.start_at_ms(ms))
    }

    /// The signature scheme of replicas and clients: [`Signatures::Ed25519`] (the default) or
    /// the simulator-only [`Signatures::Sim`] tags, which make long runs affordable and prove
    /// nothing about the signature scheme itself (`docs/simulator.md`, "Signature schemes").
    pub fn signatures(mut self, scheme: Signatures) -> Self {
        self.cfg.signatures = scheme;
        self
    }

    /// The time service (robust mode also turns on the time-bounds checker).
    pub fn time_service(mut self, mode: TimeServiceMode) -> Self {
        self.cfg.time_service = mode;
        self.cfg.check_time_bounds = mode == TimeServiceMode::Robust;
        self
    }

    /// The faults.
    pub fn faults(mut self, faults: FaultConfig) -> Self {
        self.cfg.faults = faults;
        self
    }

    /// Safety-phase and liveness-bound lengths, simulated ms.
    pub fn duration_ms(mut self, safety_ms: u64, liveness_ms: u64) -> Self {
        self.cfg.duration_ms = safety_ms;
        self.cfg.liveness_ms = liveness_ms;
        self
    }

    /// Client workload: `clients` clients, one request each per `interval_ms` (0: none).
    pub fn clients(mut self, clients: u32, interval_ms: u64) -> Self {
        self.cfg.clients = clients;
        self.cfg.request_interval_ms = interval_ms;
        self
    }

    /// Every client sends the requests of its own [`Workload`] (built once per client by
    /// `factory(client)`, with its own random stream split from the seed) instead of the stock
    /// key-value puts ([`super::workload`]).
    pub fn workload(mut self, factory: impl Fn(u32) -> Box<dyn Workload> + 'static) -> Self {
        self.workload = Some(Rc::new(factory));
        self.cfg.custom_workload = true;
        self
    }

    /// Internal ticks: each replica ticks every component every `period_ms` (0: none).
    pub fn ticks(mut self, components: Vec<u32>, period_ms: u64) -> Self {
        self.cfg.components = components;
        self.cfg.tick_period_ms = period_ms;
        self
    }

    /// Tick periods per component (overriding the common period) and the sender rotation.
    pub fn tick_periods(mut self, periods_ms: BTreeMap<u32, u64>, rotate: bool) -> Self {
        self.cfg.components = periods_ms.keys().copied().collect();
        self.cfg.component_periods_ms = periods_ms;
        self.cfg.rotate_ticks = rotate;
        self
    }

    /// Replicas' tick timers start within `spread_ms` of each other (`None`: anywhere in a
    /// period; `Some(0)`: all at the same instants).
    pub fn tick_spread_ms(mut self, spread_ms: Option<u64>) -> Self {
        self.cfg.tick_spread_ms = spread_ms;
        self
    }

    /// The ledger the replicas run when no [`Self::app`] is given.
    pub fn ledger(mut self, ledger: LedgerKind) -> Self {
        self.cfg.ledger = ledger;
        self
    }

    /// With [`LedgerKind::Orders`]: some puts install IANA zones ([`SimConfig::zone_installs`]).
    pub fn zone_installs(mut self, on: bool) -> Self {
        self.cfg.zone_installs = on;
        self
    }

    /// The node implementation (the PBFT replica, or the toy node that tests the simulator).
    pub fn node(mut self, node: NodeKind) -> Self {
        self.cfg.node = node;
        self
    }

    /// Every replica runs the application `factory(replica id)` builds, at every boot (first
    /// boot, restarts): the same tables and handlers, registered the same way, on every
    /// replica. Read it back typed with [`Simulator::app`] and [`super::SimOutcome::app`].
    pub fn app<A: Application>(mut self, factory: impl Fn(NodeId) -> A + 'static) -> Self {
        self.app = Some(Rc::new(move |id| {
            Box::new(factory(id)) as Box<dyn Application>
        }));
        self.cfg.ledger = LedgerKind::Custom;
        self
    }

    /// Adjusts every replica's configuration before boot (batching, windows, timeouts).
    pub fn tweak(mut self, tweak: impl Fn(&mut ReplicaConfig) + 'static) -> Self {
        self.tweak = Some(Rc::new(tweak));
        self
    }

    /// Bound on processed events (a runaway run stops with a violation).
    pub fn max_events(mut self, max_events: u64) -> Self {
        self.cfg.max_events = max_events;
        self
    }

    /// Run each honest node's invariant check after every `every` of its inputs (0: never).
    pub fn node_check_every(mut self, every: u64) -> Self {
        self.cfg.node_check_every = every;
        self
    }

    /// The checker's bound on judged fault-phase stalls (`None`: derived; `Some(0)`: only
    /// measured).
    pub fn stall_bound_ms(mut self, bound_ms: Option<u64>) -> Self {
        self.cfg.stall_bound_ms = bound_ms;
        self
    }

    /// The time-bounds checker's slacks: how far agreed time may run ahead of the fastest
    /// honest clock, and lag the slowest.
    pub fn time_slack_ms(mut self, ahead_ms: Millis, behind_ms: Millis) -> Self {
        self.cfg.time_ahead_slack_ms = ahead_ms;
        self.cfg.time_behind_slack_ms = behind_ms;
        self
    }

    /// Whether the checker compares agreed time with the honest clocks (on with the robust time
    /// service by default).
    pub fn check_time_bounds(mut self, on: bool) -> Self {
        self.cfg.check_time_bounds = on;
        self
    }

    /// Partitions during the safety phase (a shorthand for the one fault knob).
    pub fn partition(mut self, kind: PartitionKind) -> Self {
        self.cfg.faults.partition = kind;
        self
    }

    /// Changes any other field of the configuration.
    pub fn configure(mut self, f: impl FnOnce(&mut SimConfig)) -> Self {
        f(&mut self.cfg);
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The simulator, after every check ([`SimConfig::validate`], the replicas' configuration,
    /// [`ClusterHarness::check_app`]).
    pub fn build(self) -> Result<Simulator<ClusterHarness>, ConfigError> {
        let mut h = ClusterHarness::new(&self.cfg);
        if let Some(t) = self.tweak {
            h = h.with_tweak(move |c| t(c));
        }
        if let Some(f) = self.app {
            h = h.with_app(move |id| f(id));
        }
        if let Some(w) = self.workload {
            h = h.with_workload(|c| w(c));
        }
        h.validate()?;
        Simulator::new(self.cfg, h)
    }

    /// The simulator running the application `factory` builds on every replica (at every
    /// boot), with every replica's configuration adjusted by `tweak`
    /// (`.tweak(tweak).app(factory).build()` with an already boxed application).
    pub fn build_with_app(
        self,
        tweak: impl Fn(&mut ReplicaConfig) + 'static,
        factory: impl Fn(NodeId) -> Box<dyn Application> + 'static,
    ) -> Result<Simulator<ClusterHarness>, ConfigError> {
        let mut c = self.tweak(tweak);
        c.app = Some(Rc::new(factory));
        c.cfg.ledger = LedgerKind::Custom;
        c.build()
    }

    /// The simulator, with every replica's configuration adjusted by `tweak`.
    pub fn build_with(
        self,
        tweak: impl Fn(&mut ReplicaConfig) + 'static,
    ) -> Result<Simulator<ClusterHarness>, ConfigError> {
        self.tweak(tweak).build()
    }
}
