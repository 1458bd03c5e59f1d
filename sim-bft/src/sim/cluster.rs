//! The simulated PBFT cluster: boots [`Replica`]s from the seed and signs user clients' requests.
//!
//! [`Cluster`] is a builder over [`SimConfig`]: replicas, seed, time-service mode and faults; it
//! yields a [`Simulator`] driving [`ClusterHarness`]. Keys derive from the seed (replicas and
//! clients alike), a shared verification memo spares re-verifying the same signature on every
//! replica, and protocol-aware Byzantine kinds become the replica's own fault mode.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;

use super::{ByzantineKind, ConfigError, DiskImage, FaultConfig, Harness, Role, SimConfig};
use super::{LedgerKind, SimRng, Simulator, TimeServiceMode};
use crate::app::{Application, WithTicks};
use crate::crypto::{self, Keyring, VerifyCache};
use crate::ledgers::demo::{DemoTables, demo_ledger};
use crate::ledgers::{KvLedger, KvOp, TickCounter};
use crate::node::{Input, Millis, Node, NodeId, Output};
use crate::protocol::codec::{decode, encode};
use crate::protocol::{Payload, SignedRequest, Wire, client_request_bytes};
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

/// A replica as the simulator hosts it: `None` when it could not be booted (an invalid
/// configuration or unreadable storage, both reported by a `tracing` error), in which case it
/// ignores every input, and the liveness checker reports it.
#[derive(Debug)]
pub struct SimReplica(Option<Replica>);

impl SimReplica {
    /// The replica, if it booted.
    pub fn replica(&self) -> Option<&Replica> {
        self.0.as_ref()
    }
}

impl Node for SimReplica {
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>) {
        if let Some(r) = self.0.as_mut() {
            r.handle(now, input, out);
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.0.as_ref().and_then(Node::next_deadline)
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
                .map(|c| crypto::client_signing_key(key_seed, c))
                .collect(),
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
            ring: Keyring::from_seed(key_seed, cfg.replicas, num_clients),
            max_message_bytes: ReplicaConfig::new(0, cfg.replicas, key_seed, num_clients)
                .max_message_bytes,
            request_value_bytes: if cfg.faults.max_size_requests
                || (cfg.faults.byzantine_kind == ByzantineKind::FatViewChange
                    && (cfg.faults.byzantine > 0 || !cfg.faults.pinned_byzantine.is_empty()))
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

    /// Replica `id`'s configuration with fault mode `role`.
    pub fn replica_config(&self, id: NodeId, role: Role) -> ReplicaConfig {
        let mut c = ReplicaConfig::new(id, self.n, self.key_seed, self.num_clients);
        c.time.mode = self.time_mode;
        c.verify_cache = Some(self.verify_cache.clone());
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

    /// Checks that the replicas accept their configuration (e.g. n = 3f+1 with f >= 1).
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
        Ok(())
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
        let app = |h: &Self| -> Box<dyn Application> {
            match &h.app_factory {
                Some(f) => f(id),
                None => Box::new(WithTicks::new(
                    Box::new(KvLedger::new()),
                    Box::new(TickCounter::new(
                        if cfg.time_page == 0 { 1 } else { 0 },
                        cfg.num_pages.saturating_sub(1).max(1),
                    )),
                )),
            }
        };
        match Replica::recover_app(cfg.clone(), app(self), disk) {
            Ok(r) => SimReplica(Some(r)),
            Err(e) => {
                // Unreadable storage: start empty and catch up by state transfer.
                tracing::error!(id, error = %e, "recovery failed; booting empty");
                self.boot_failures += 1;
                match Replica::with_app(cfg.clone(), app(self)) {
                    Ok(r) => SimReplica(Some(r)),
                    Err(e) => {
                        tracing::error!(id, error = %e, "boot failed");
                        SimReplica(None)
                    }
                }
            }
        }
    }

    /// Offers the signatures of a sent message to the shared memo: the first replica that
    /// misses one verifies every offered signature in one batch equation. Speed only.
    fn on_send(&self, bytes: &[u8]) {
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
        client_request_bytes(key, u64::from(client), number + 1, op.to_payload()).unwrap_or_else(
            |e| {
                tracing::error!(client, error = %e, "cannot encode a client request");
                Vec::new()
            },
        )
    }

    fn status(&self, node: &SimReplica) -> Option<(u64, [u8; 32])> {
        node.replica()
            .map(|r| (r.last_executed(), r.state_digest_now()))
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

/// Builds a simulated PBFT cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    cfg: SimConfig,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::builder()
    }
}

impl Cluster {
    /// A 4-replica cluster with the default [`SimConfig`].
    pub fn builder() -> Self {
        Self {
            cfg: SimConfig::default(),
        }
    }

    /// From a full configuration.
    pub fn from_config(cfg: SimConfig) -> Self {
        Self { cfg }
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

    /// Internal ticks: each replica ticks every component every `period_ms` (0: none).
    pub fn ticks(mut self, components: Vec<u32>, period_ms: u64) -> Self {
        self.cfg.components = components;
        self.cfg.tick_period_ms = period_ms;
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The simulator.
    pub fn build(self) -> Result<Simulator<ClusterHarness>, ConfigError> {
        let h = ClusterHarness::new(&self.cfg);
        h.validate()?;
        Simulator::new(self.cfg, h)
    }

    /// The simulator running the application `factory` builds on every replica (at every
    /// boot), with every replica's configuration adjusted by `tweak`.
    pub fn build_with_app(
        self,
        tweak: impl Fn(&mut ReplicaConfig) + 'static,
        factory: impl Fn(NodeId) -> Box<dyn Application> + 'static,
    ) -> Result<Simulator<ClusterHarness>, ConfigError> {
        let mut cfg = self.cfg;
        cfg.ledger = LedgerKind::Custom;
        let h = ClusterHarness::new(&cfg)
            .with_tweak(tweak)
            .with_app(factory);
        h.validate()?;
        Simulator::new(cfg, h)
    }

    /// Tick periods per component (overriding the common period) and the sender rotation.
    pub fn tick_periods(mut self, periods_ms: BTreeMap<u32, u64>, rotate: bool) -> Self {
        self.cfg.components = periods_ms.keys().copied().collect();
        self.cfg.component_periods_ms = periods_ms;
        self.cfg.rotate_ticks = rotate;
        self
    }

    /// The simulator, with every replica's configuration adjusted by `tweak`.
    pub fn build_with(
        self,
        tweak: impl Fn(&mut ReplicaConfig) + 'static,
    ) -> Result<Simulator<ClusterHarness>, ConfigError> {
        let h = ClusterHarness::new(&self.cfg).with_tweak(tweak);
        h.validate()?;
        Simulator::new(self.cfg, h)
    }
}
