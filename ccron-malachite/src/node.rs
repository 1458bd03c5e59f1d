//! One validator process: loads its key and the genesis from its config directory, starts the
//! Malachite engine (libp2p on 127.0.0.1, Broadcast pub-sub, WAL, sync) and answers the engine's
//! application messages with the ledger, the block store and the agreed-time rule.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use malachitebft_app_channel::app::config::{
    ConsensusConfig, NodeConfig, P2pConfig, PubSubProtocol, ValuePayload, ValueSyncConfig,
};
use malachitebft_app_channel::app::engine::host::{HeightParams, Next, SyncedValueOutcome};
use malachitebft_app_channel::app::streaming::{StreamContent, StreamId, StreamMessage};
use malachitebft_app_channel::app::types::core::{
    ExtendedCommitCertificate, LinearTimeouts, Round, Validity, Value as _, VoteExtensionPolicy,
    VoteExtensions,
};
use malachitebft_app_channel::app::types::sync::RawDecidedValue;
use malachitebft_app_channel::app::types::{Keypair, LocallyProposedValue, ProposedValue};
use malachitebft_app_channel::{
    AppMsg, Channels, ConsensusContext, NetworkContext, NetworkIdentity, NetworkMsg,
    NetworkRequest, RequestContext, Signer as _, SyncContext, WalContext,
};
use sha2::{Digest, Sha256};

use std::sync::{Arc, Mutex};

use crate::api::{ApiState, lock};
use crate::app::{
    BlockRejection, LedgerHost, PrevCommit, agreed_time, validate_block, validate_ticks,
    validator_index,
};
use crate::context::{
    Address, Block, BorshCodec, CarriedSample, ClockSample, Ctx, Ed25519Signer, Ed25519Verifier,
    Hash32, Height, ProposalPart, PubKey, TickTx, ValidatorSet, proposer_of, verify_raw,
};
use crate::mempool::{Mempool, MempoolConfig};
use crate::request::{MAX_BLOCK_REQUEST_BYTES, MAX_BLOCK_REQUESTS};
use crate::results::RequestResults;
use crate::snapshot::Snapshots;
use crate::store::{BlockStore, Decided, PartLog};
use ccron::host::{BlockOutcome, TickPool};
use ccron::ticks::TickThrottle;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use crate::records::{Genesis, GenesisValidator, NodeStatus, TickPoolStatus};

mod ticks;

/// Why a node does not propose in a round (it skips the round's proposal; the round times out
/// and the next proposer proposes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// The previous height's clock samples do not give an agreed time (fewer than a quorum).
    #[error("no agreed time for height {height}: {reason}")]
    NoAgreedTime {
        /// The height.
        height: u64,
        /// Why.
        reason: BlockRejection,
    },
    /// The block this node would propose fails its own validity check (e.g. the samples'
    /// median is beyond the hard limit of its clock): the others would reject it too.
    #[error("own block for height {height} is invalid: {reason}")]
    Invalid {
        /// The height.
        height: u64,
        /// Why.
        reason: BlockRejection,
    },
}

/// Errors that stop a node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Config directory problem.
    #[error("config: {0}")]
    Config(String),
    /// Store failure.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The snapshot directory is unusable (a bad snapshot is not this: it is skipped).
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// Ledger failure.
    #[error(transparent)]
    App(#[from] ccron::host::HostError),
    /// Engine failure.
    #[error("engine: {0}")]
    Engine(String),
    /// A decided value this node never saw.
    #[error("decided value {0} at height {1} is unknown to this node")]
    UnknownDecided(Hash32, u64),
}

/// Node options.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The localnet home (genesis.json, node-i/).
    pub home: PathBuf,
    /// This node's index in the genesis.
    pub index: usize,
    /// Propose blocks whose agreed time is an hour ahead (a Byzantine proposer, for tests).
    pub lying_time: bool,
    /// Propose blocks without ticks (a Byzantine proposer starving ticks, for tests; its
    /// blocks are otherwise valid).
    pub omit_ticks: bool,
    /// Where the HTTP server (client submissions) listens (`127.0.0.1:0`: any free port). The
    /// bound address is written to `node-I/http.addr`.
    pub http: std::net::SocketAddr,
    /// Write a durable snapshot every this many heights (and at a clean stop); 0: only at a
    /// clean stop. See [`crate::snapshot`].
    pub snapshot_every: u64,
}

/// The file a node writes its bound HTTP address to.
pub fn http_addr_path(home: &Path, index: usize) -> PathBuf {
    node_dir(home, index).join("http.addr")
}

/// Hex encoding.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex decoding of exactly 32 bytes.
pub fn unhex32(s: &str) -> Option<[u8; 32]> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Wall clock, Unix ms.
// The node is the process boundary where wall-clock time enters (clock samples, ticks).
#[allow(clippy::disallowed_methods)]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The node directory of `index`.
pub fn node_dir(home: &Path, index: usize) -> PathBuf {
    home.join(format!("node-{index}"))
}

/// The engine configuration the adapter uses.
#[derive(Debug, Clone)]
struct Config {
    moniker: String,
    consensus: ConsensusConfig,
    value_sync: ValueSyncConfig,
}

impl NodeConfig for Config {
    fn moniker(&self) -> &str {
        &self.moniker
    }
    fn consensus(&self) -> &ConsensusConfig {
        &self.consensus
    }
    fn consensus_mut(&mut self) -> &mut ConsensusConfig {
        &mut self.consensus
    }
    fn value_sync(&self) -> &ValueSyncConfig {
        &self.value_sync
    }
    fn value_sync_mut(&mut self) -> &mut ValueSyncConfig {
        &mut self.value_sync
    }
}

fn timeouts() -> LinearTimeouts {
    LinearTimeouts {
        propose: Duration::from_millis(1_000),
        propose_delta: Duration::from_millis(250),
        prevote: Duration::from_millis(500),
        prevote_delta: Duration::from_millis(250),
        precommit: Duration::from_millis(500),
        precommit_delta: Duration::from_millis(250),
        rebroadcast: Duration::from_millis(2_000),
        max_timeout: Duration::from_secs(10),
    }
}

/// Runs one validator until the process is killed (or its parent localnet dies).
///
/// # Errors
/// Config, store, engine and ledger failures.
pub async fn run_node(opts: NodeOptions) -> Result<(), NodeError> {
    let genesis: Genesis = serde_json::from_slice(
        &std::fs::read(opts.home.join("genesis.json"))
            .map_err(|e| NodeError::Config(format!("genesis.json: {e}")))?,
    )
    .map_err(|e| NodeError::Config(format!("genesis.json: {e}")))?;
    if genesis.validators.is_empty() || opts.index >= genesis.validators.len() {
        return Err(NodeError::Config("no such validator index".into()));
    }
    let dir = node_dir(&opts.home, opts.index);
    let secret_hex = std::fs::read_to_string(dir.join("secret.key"))
        .map_err(|e| NodeError::Config(format!("secret.key: {e}")))?;
    let secret = unhex32(&secret_hex)
        .ok_or_else(|| NodeError::Config("secret.key: not 32 hex bytes".into()))?;
    let signer = Ed25519Signer::new(secret);
    let me = Address(signer.public_key());
    let mut keys = Vec::new();
    for v in &genesis.validators {
        keys.push(
            unhex32(&v.public_key).ok_or_else(|| NodeError::Config("bad public key".into()))?,
        );
    }
    let validators = ValidatorSet::new(&keys);
    if !validators.contains(&me) {
        return Err(NodeError::Config("this key is not in the genesis".into()));
    }

    let mut p2p = P2pConfig::default();
    let port = genesis.validators[opts.index].port;
    p2p.listen_addr = format!("/ip4/127.0.0.1/tcp/{port}")
        .parse()
        .map_err(|e| NodeError::Config(format!("listen addr: {e}")))?;
    for (i, v) in genesis.validators.iter().enumerate() {
        if i != opts.index {
            p2p.persistent_peers.push(
                format!("/ip4/127.0.0.1/tcp/{}", v.port)
                    .parse()
                    .map_err(|e| NodeError::Config(format!("peer addr: {e}")))?,
            );
        }
    }
    p2p.protocol = PubSubProtocol::Broadcast;
    let consensus = ConsensusConfig {
        p2p,
        value_payload: ValuePayload::ProposalAndParts,
        ..ConsensusConfig::default()
    };
    let value_sync = ValueSyncConfig {
        enabled: true,
        status_update_interval: Duration::from_millis(500),
        request_timeout: Duration::from_secs(3),
        ..ValueSyncConfig::default()
    };
    let config = Config {
        moniker: format!("node-{}", opts.index),
        consensus,
        value_sync,
    };

    // The libp2p identity is derived from the validator key (one key per validator).
    let keypair = Keypair::ed25519_from_bytes(secret)
        .map_err(|e| NodeError::Config(format!("libp2p key: {e}")))?;
    let peer_id = keypair.public().to_peer_id();
    let proof = signer
        .sign_validator_proof(me.0.to_vec(), peer_id.to_bytes())
        .await
        .map_err(|e| NodeError::Engine(e.to_string()))?;
    let proof_bytes =
        malachitebft_app_channel::app::types::codec::Codec::encode(&BorshCodec, &proof)
            .map_err(|e| NodeError::Engine(e.to_string()))?;
    let identity = NetworkIdentity::new_validator(
        config.moniker.clone(),
        keypair,
        me.to_string(),
        proof_bytes,
    );

    // The process boundary: the restart time reported in the status is a wall-clock figure.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let store = BlockStore::open(&dir.join("blocks.log"))?;
    let parts = PartLog::open(&dir.join("parts.log"))?;
    let snapshots = Snapshots::open(&dir.join("snapshots"))?;
    let mut node = NodeState::new(
        opts.clone(),
        genesis,
        validators,
        me,
        signer.clone(),
        store,
        parts,
        snapshots,
    )?;
    node.status.restart_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    node.write_status();

    // Client submissions and forwarded ticks: the HTTP server feeds the pools the proposer
    // reads. The genesis' port, unless `--http` names one.
    let http = match node.genesis.validators[opts.index].http_port {
        Some(port) if opts.http.port() == 0 => std::net::SocketAddr::new(opts.http.ip(), port),
        _ => opts.http,
    };
    let bound = crate::api::serve(
        http,
        ApiState {
            mempool: node.mempool.clone(),
            outbox: node.outbox.clone(),
            ticks: node.ticks.clone(),
            validators: node.validators.clone(),
            ticks_invalid: node.ticks_invalid.clone(),
            results: node.results.clone(),
        },
    )
    .await
    .map_err(|e| NodeError::Config(format!("HTTP listen on {http}: {e}")))?;
    std::fs::write(http_addr_path(&opts.home, opts.index), bound.to_string())
        .map_err(|e| NodeError::Config(format!("http.addr: {e}")))?;
    tracing::info!(%bound, "client endpoint");

    let (mut channels, _engine) = malachitebft_app_channel::start_engine(
        Ctx,
        config,
        WalContext::new(dir.join("wal"), BorshCodec),
        NetworkContext::new(identity, BorshCodec),
        ConsensusContext::new_validator(me, Box::new(Ed25519Verifier), Box::new(signer)),
        SyncContext::new(BorshCodec),
        RequestContext::new(100),
    )
    .await
    .map_err(|e| NodeError::Engine(e.to_string()))?;

    // Ticks: ccron's TicksGenerator thread, one timer per component; at most one pending.
    let (tick_tx, tick_rx) = crossbeam_channel::bounded(ccron::ticks::DEFAULT_CHANNEL_CAPACITY);
    let generator = ccron::ticks::TicksGenerator::spawn(
        ccron::ticks::SystemClock::new(),
        ccron::ticks::DriverConfig { poll_period_ms: 50 },
        tick_tx,
    )
    .map_err(|e| NodeError::Engine(format!("ticks thread: {e}")))?;
    for (component, period) in node.ledger.tick_components() {
        generator.start(component, period);
    }

    let parent = std::os::unix::process::parent_id();
    let mut watchdog = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            msg = channels.consensus.recv() => {
                let Some(msg) = msg else {
                    return Err(NodeError::Engine("consensus channel closed".into()));
                };
                while let Ok(t) = tick_rx.try_recv() {
                    node.on_local_tick(t.component);
                }
                node.handle(msg, &mut channels).await?;
            }
            _ = watchdog.tick() => {
                while let Ok(t) = tick_rx.try_recv() {
                    node.on_local_tick(t.component);
                }
                if std::os::unix::process::parent_id() != parent {
                    tracing::info!("parent exited; node stops");
                    node.snapshot();
                    return Ok(());
                }
            }
        }
    }
}

/// Bound on parts kept for heights not started yet.
const MAX_EARLY_PARTS: usize = 64;

/// The node's application state.
struct NodeState {
    opts: NodeOptions,
    genesis: Genesis,
    validators: ValidatorSet,
    me: Address,
    signer: Ed25519Signer,
    store: BlockStore,
    parts: PartLog,
    snapshots: Snapshots,
    ledger: LedgerHost,
    /// Blocks seen (proposed or synced) and not yet decided, by value id.
    undecided: HashMap<Hash32, Block>,
    /// The parts this node proposed, by (height, round), for restreaming.
    my_parts: BTreeMap<(u64, u32), ProposalPart>,
    /// Authentic parts for a height this node has not started yet.
    early: BTreeMap<(u64, u32), ProposalPart>,
    /// Validators' signed ticks waiting for a block (shared with the HTTP server; ccron's
    /// `TickPool`: one pending per submitter and component, no replayed numbers).
    ticks: Arc<Mutex<TickPool<TickTx>>>,
    /// This node's own ticks: at most one pending per component (ccron's `TickThrottle`).
    throttle: TickThrottle,
    /// The last number this node gave one of its ticks.
    tick_number: u64,
    /// This node's validator index.
    my_index: u32,
    /// The other validators' HTTP endpoints (from the genesis) its ticks are forwarded to.
    forward_to: Vec<std::net::SocketAddr>,
    /// Forwards in flight (bounded) and failed.
    forwarding: Arc<AtomicUsize>,
    forward_failed: Arc<AtomicU64>,
    /// Tick submissions the endpoint refused as malformed or badly signed.
    ticks_invalid: Arc<AtomicU64>,
    /// Results of recently executed requests (shared with the HTTP server).
    results: Arc<Mutex<RequestResults>>,
    /// Verified client requests waiting for a block (shared with the HTTP server).
    mempool: Arc<Mutex<Mempool>>,
    /// The committed outbox the read endpoint serves (updated after every executed height).
    outbox: ccron_http::PublishedOutbox,
    status: NodeStatus,
    synced: BTreeSet<u64>,
}

impl NodeState {
    #[allow(clippy::too_many_arguments)]
    fn new(
        opts: NodeOptions,
        genesis: Genesis,
        validators: ValidatorSet,
        me: Address,
        signer: Ed25519Signer,
        store: BlockStore,
        parts: PartLog,
        snapshots: Snapshots,
    ) -> Result<Self, NodeError> {
        let n = u32::try_from(validators.validators.len())
            .map_err(|_| NodeError::Config("too many validators".into()))?;
        // Restart: the newest valid snapshot, then the blocks above it (the state is a pure
        // function of the decided blocks); no usable snapshot: the whole chain.
        let restored = snapshots.restore_latest(&store, &genesis.ledger, n)?;
        let ledger = restored.ledger;
        let outbox =
            ccron_http::PublishedOutbox::new(u64::try_from(opts.index).unwrap_or(u64::MAX));
        let my_index = validator_index(&validators, &me)
            .ok_or_else(|| NodeError::Config("this key is not in the genesis".into()))?;
        let tick_pool = TickPool::new(n, ledger.tick_components().into_iter().map(|(c, _)| c));
        let forward_to = genesis
            .validators
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != opts.index)
            .filter_map(|(_, v)| v.http_port)
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        let mut node = NodeState {
            status: NodeStatus {
                id: opts.index,
                pid: std::process::id(),
                ..NodeStatus::default()
            },
            opts,
            genesis,
            validators,
            me,
            signer,
            store,
            parts,
            snapshots,
            ledger,
            undecided: HashMap::new(),
            my_parts: BTreeMap::new(),
            early: BTreeMap::new(),
            ticks: Arc::new(Mutex::new(tick_pool)),
            // A pending own tick that no block carried within 2 s is treated as lost.
            throttle: TickThrottle::with_max_pending_ms(2_000),
            tick_number: 0,
            my_index,
            forward_to,
            forwarding: Arc::new(AtomicUsize::new(0)),
            forward_failed: Arc::new(AtomicU64::new(0)),
            ticks_invalid: Arc::new(AtomicU64::new(0)),
            results: Arc::new(Mutex::new(RequestResults::default())),
            mempool: Arc::new(Mutex::new(Mempool::new(
                MempoolConfig::default(),
                Default::default(),
            ))),
            synced: BTreeSet::new(),
            outbox,
        };
        node.status.restored_from_height = restored.height;
        node.status.snapshots_rejected = restored.rejected.len() as u64;
        node.trim_digests_log();
        let from = restored.height.unwrap_or(0);
        if let Some(d) = node.store.get(from)? {
            // The state restored: the status (and digests.log) as after executing block `from`.
            let digest = hex(&node.ledger.state_digest());
            node.note_executed(from, d.block.agreed_time_ms, digest);
        }
        // The tick numbers decided blocks carried up to the restored snapshot (the blocks above
        // it feed the pool as they are re-executed).
        {
            let mut pool = lock(&node.ticks);
            for (&(component, sender), &number) in &node.ledger.tick_included {
                pool.on_included(component, sender, number);
            }
        }
        // Re-execute the blocks above it, exactly as on decision (ticks, results, status and a
        // digests.log line per height).
        let mut replayed = 0u64;
        for h in from.saturating_add(1)..=node.store.last_height() {
            let Some(d) = node.store.get(h)? else {
                return Err(NodeError::Store(crate::store::StoreError::OutOfOrder {
                    got: h,
                    expected: node.store.last_height(),
                }));
            };
            let out = node.ledger.execute(&d.block, &node.validators)?;
            node.after_execute(&d.block, &out);
            replayed += 1;
        }
        node.status.replayed_blocks = replayed;
        // Own tick numbers continue above the last one a decided block carried.
        node.tick_number = node
            .ledger
            .tick_components()
            .iter()
            .filter_map(|&(c, _)| lock(&node.ticks).last_included(c, my_index))
            .max()
            .unwrap_or(0);
        // Published once after the replay, not per replayed block (each publish of a changed
        // outbox clones it); nothing before the first executed height (the endpoint answers 503).
        if node.store.last_height() > 0 {
            node.publish_outbox();
        }
        let last = node.store.last_height();
        for p in node.parts.parts().to_vec() {
            if p.height.0 > last {
                node.undecided.insert(p.block.id(), p.block.clone());
                if p.proposer == node.me {
                    node.my_parts
                        .insert((p.height.0, p.round.as_u32().unwrap_or(0)), p);
                }
            }
        }
        // The mempool refuses what executed before the restart.
        node.mempool = Arc::new(Mutex::new(Mempool::new(
            MempoolConfig::default(),
            node.ledger.executed().clone(),
        )));
        tracing::info!(
            height = last,
            restored_from = ?restored.height,
            replayed,
            "state rebuilt from the snapshot and the block store"
        );
        node.write_status();
        Ok(node)
    }

    fn digests_path(&self) -> PathBuf {
        node_dir(&self.opts.home, self.opts.index).join("digests.log")
    }

    fn params(&self) -> HeightParams<Ctx> {
        HeightParams::new(self.validators.clone(), timeouts(), None)
            .with_vote_extension_policy(VoteExtensionPolicy::Required)
    }

    /// The decision at `height` from the store (a read failure is an error event and `None`:
    /// the caller then refuses or skips, as for a height it does not have).
    fn decided(&self, height: u64) -> Option<Decided> {
        self.store.get(height).unwrap_or_else(|e| {
            tracing::error!(height, error = %e, "block store read failed");
            None
        })
    }

    fn prev_commit(&self, height: u64) -> Option<PrevCommit> {
        let d = self.decided(height.checked_sub(1)?)?;
        Some(PrevCommit {
            round: d.certificate.round.as_u32().unwrap_or(0),
            id: d.certificate.value_id,
            agreed_time_ms: d.block.agreed_time_ms,
        })
    }

    /// The block this node proposes at `height`: the previous height's samples, the agreed
    /// time by the rule, its pending ticks and the oldest pending requests; checked with the
    /// validity rule every validator applies, so that it never proposes a block the others
    /// reject (a lying node, for tests, skips the check).
    fn build_block(&self, height: u64) -> Result<Block, ProposeError> {
        let prev = self.decided(height.saturating_sub(1));
        let (prev_round, prev_id, prev_time, samples) = match prev {
            Some(d) if height > 1 => {
                let mut samples: Vec<CarriedSample> = d
                    .extensions
                    .iter()
                    .map(|(a, e)| CarriedSample {
                        validator: *a,
                        time_ms: e.message.time_ms,
                        signature: e.signature,
                    })
                    .collect();
                samples.sort_by_key(|s| s.validator);
                samples.dedup_by_key(|s| s.validator);
                (
                    d.certificate.round.as_u32().unwrap_or(0),
                    d.certificate.value_id,
                    d.block.agreed_time_ms,
                    samples,
                )
            }
            _ => (0, Hash32::default(), 0, Vec::new()),
        };
        let now = now_ms();
        let mut agreed = match agreed_time(
            height,
            self.genesis.genesis_time_ms,
            prev_time,
            &samples,
            &self.validators,
        ) {
            // Height 1: the proposer's stamp, not before the genesis time.
            Some(t) if height <= 1 => t.max(now),
            Some(t) => t,
            None => {
                return Err(ProposeError::NoAgreedTime {
                    height,
                    reason: BlockRejection::TooFewSamples {
                        got: samples.len(),
                        quorum: self.validators.quorum(),
                    },
                });
            }
        };
        if self.opts.lying_time {
            agreed = agreed.saturating_add(3_600_000);
        }
        let block = Block {
            height,
            prev_round,
            prev_id,
            samples,
            agreed_time_ms: agreed,
            // At most one per (component, validator): the pool's bound.
            ticks: if self.opts.omit_ticks {
                Vec::new()
            } else {
                lock(&self.ticks).pending().cloned().collect()
            },
            requests: lock(&self.mempool).select(MAX_BLOCK_REQUESTS, MAX_BLOCK_REQUEST_BYTES),
        };
        if !self.opts.lying_time {
            let ledger = &self.ledger;
            validate_block(
                &block,
                height,
                self.prev_commit(height),
                self.genesis.genesis_time_ms,
                now,
                &self.validators,
                &|c| ledger.has_component(c),
            )
            .and_then(|()| validate_ticks(&block, &self.validators, &lock(&self.ticks)))
            .map_err(|reason| ProposeError::Invalid { height, reason })?;
        }
        Ok(block)
    }

    /// Publishes the committed outbox, as of the last executed height, to the read endpoint.
    fn publish_outbox(&self) {
        if let Some(outbox) = self.ledger.outbox() {
            self.outbox.publish(outbox, self.status.last_height);
        }
    }

    fn after_execute(&mut self, block: &Block, out: &BlockOutcome) {
        self.after_decided_ticks_and_results(block, out);
        let digest = hex(&self.ledger.state_digest());
        self.note_executed(block.height, block.agreed_time_ms, digest);
    }

    /// The status (from the ledger's counters) and a `digests.log` line after `height`.
    fn note_executed(&mut self, height: u64, agreed_time_ms: i64, digest: String) {
        self.status.last_height = height;
        self.status.state_digest = digest.clone();
        self.status.ticks_executed = self.ledger.ticks_executed;
        self.status.ticks_skipped = self.ledger.ticks_skipped;
        self.status.fires = self.ledger.fires;
        self.status.agreed_time_ms = agreed_time_ms;
        self.status.requests_executed = self.ledger.requests_executed;
        self.status.requests_duplicate = self.ledger.requests_duplicate;
        self.status.ticks_by_submitter = self.ledger.ticks_by_submitter.clone();
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.digests_path())
            && let Err(e) = writeln!(
                f,
                "{height} {digest} {agreed_time_ms} {}",
                self.ledger.requests_executed
            )
        {
            tracing::warn!(error = %e, "could not append to digests.log");
        }
    }

    /// At start, `digests.log` keeps the lines of the previous process (the heights the
    /// restored snapshot covers are not re-executed; the replayed heights are appended again
    /// and must repeat the same digests, which the localnet checks); a torn last line (a kill
    /// mid-write) is cut.
    fn trim_digests_log(&self) {
        let path = self.digests_path();
        let Ok(text) = std::fs::read(&path) else {
            return;
        };
        if text.is_empty() || text.ends_with(b"\n") {
            return;
        }
        let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if let Err(e) = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(keep as u64))
        {
            tracing::warn!(error = %e, "could not trim digests.log");
        }
    }

    /// Writes a snapshot of the state after the last executed height (a failure is an error
    /// event and a counter: the block store is the source of truth, a restart replays more).
    fn snapshot(&mut self) {
        let Some(d) = self.store.last() else {
            return;
        };
        let (height, id) = (d.height().0, d.certificate.value_id);
        if self.ledger.host_height() != height {
            return;
        }
        match self
            .snapshots
            .write(height, id, &self.genesis.ledger, &self.ledger)
        {
            Ok(bytes) => {
                self.status.snapshots_written += 1;
                tracing::info!(height, bytes, "snapshot written");
            }
            Err(e) => {
                self.status.snapshot_failures += 1;
                tracing::error!(height, error = %e, "snapshot not written");
            }
        }
    }

    /// Appends one line per time-due fire of a block executed on decision (not on the
    /// re-execution at restart) to `fires.log`: `height agreed_ms wall_ms component position
    /// due_ms`, for the localnet report's lateness figures.
    fn log_fires(&self, block: &Block, out: &BlockOutcome) {
        use std::io::Write;
        let wall = now_ms();
        let mut lines = String::new();
        for f in &out.fires {
            if let Some(ccron::Due::Time(due)) = f.due {
                lines.push_str(&format!(
                    "{} {} {wall} {} {} {due}\n",
                    block.height, block.agreed_time_ms, f.component, f.position
                ));
            }
        }
        if lines.is_empty() {
            return;
        }
        let path = node_dir(&self.opts.home, self.opts.index).join("fires.log");
        if let Err(e) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(lines.as_bytes()))
        {
            tracing::warn!(error = %e, "could not append to fires.log");
        }
    }

    fn write_status(&mut self) {
        self.status.synced_heights = self.synced.len() as u64;
        self.status.mempool = lock(&self.mempool).counters();
        {
            let pool = lock(&self.ticks);
            self.status.tick_pool.set_pool(pool.counters(), pool.len());
        }
        self.status.tick_pool.invalid = self.ticks_invalid.load(Ordering::Relaxed);
        self.status.tick_pool.forward_failed = self.forward_failed.load(Ordering::Relaxed);
        let dir = node_dir(&self.opts.home, self.opts.index);
        let tmp = dir.join("status.json.tmp");
        let Ok(bytes) = serde_json::to_vec_pretty(&self.status) else {
            return;
        };
        if std::fs::write(&tmp, bytes).is_err()
            || std::fs::rename(&tmp, dir.join("status.json")).is_err()
        {
            tracing::warn!("could not write status.json");
        }
    }

    fn stream_id(height: u64, round: u32) -> StreamId {
        let mut b = height.to_be_bytes().to_vec();
        b.extend_from_slice(&round.to_be_bytes());
        StreamId::new(Bytes::from(b))
    }

    async fn publish(channels: &mut Channels<Ctx>, part: &ProposalPart) {
        let round = part.round.as_u32().unwrap_or(0);
        let id = Self::stream_id(part.height.0, round);
        for msg in [
            StreamMessage::new(id.clone(), 0, StreamContent::Data(part.clone())),
            StreamMessage::new(id, 1, StreamContent::Fin),
        ] {
            if let Err(e) = channels
                .network
                .send(NetworkMsg::PublishProposalPart(msg))
                .await
            {
                tracing::error!(error = %e, "could not publish a proposal part");
            }
        }
    }

    /// Whether a part comes from the round's proposer and carries its valid signature.
    fn authentic(&self, part: &ProposalPart) -> bool {
        let expected = proposer_of(&self.validators, part.height, part.round);
        if expected.address != part.proposer {
            tracing::warn!(height = %part.height, "proposal part from a non-proposer");
            return false;
        }
        let bytes = ProposalPart::signing_bytes(
            part.height,
            part.round,
            part.valid_round,
            &part.proposer,
            &part.block,
        );
        if !verify_raw(&PubKey(part.proposer.0), &bytes, &part.signature) {
            tracing::warn!(height = %part.height, "proposal part signature does not verify");
            return false;
        }
        true
    }

    /// Judges an authentic part for the next height and records its block (persisted first).
    fn judge(&mut self, part: &ProposalPart) -> Result<ProposedValue<Ctx>, NodeError> {
        let height = part.height.0;
        let ledger = &self.ledger;
        let verdict = validate_block(
            &part.block,
            height,
            self.prev_commit(height),
            self.genesis.genesis_time_ms,
            now_ms(),
            &self.validators,
            &|c| ledger.has_component(c),
        )
        .and_then(|()| validate_ticks(&part.block, &self.validators, &lock(&self.ticks)));
        let validity = match verdict {
            Ok(()) => Validity::Valid,
            Err(reason) => {
                self.status.rejected_proposals += 1;
                tracing::warn!(height, proposer = %part.proposer, %reason, "proposal rejected");
                self.write_status();
                Validity::Invalid
            }
        };
        if !self.undecided.contains_key(&part.block.id()) {
            self.parts.append(part)?;
            self.undecided.insert(part.block.id(), part.block.clone());
        }
        Ok(ProposedValue {
            height: part.height,
            round: part.round,
            valid_round: part.valid_round,
            proposer: part.proposer,
            value: part.block.clone(),
            validity,
        })
    }

    async fn handle(
        &mut self,
        msg: AppMsg<Ctx>,
        channels: &mut Channels<Ctx>,
    ) -> Result<(), NodeError> {
        match msg {
            AppMsg::ConsensusReady { reply } => {
                // Wait for a quorum's worth of peers before starting: a first proposal made
                // before they connect is lost. (Not all: a late or dead validator must not
                // hold the others back; it catches up through sync.)
                let want = self.validators.quorum().saturating_sub(1);
                for _ in 0..100 {
                    match NetworkRequest::dump_state(&channels.net_requests).await {
                        Ok(Some(dump)) if dump.peers.len() >= want => break,
                        _ => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                let start = Height(self.store.last_height() + 1);
                tracing::info!(%start, "consensus ready");
                if reply.send((start, self.params())).is_err() {
                    return Err(NodeError::Engine("ConsensusReady reply dropped".into()));
                }
            }
            AppMsg::StartedRound {
                reply_value,
                height,
                round,
                ..
            } => {
                let r = round.as_u32().unwrap_or(0);
                let mut seen: Vec<ProposedValue<Ctx>> = Vec::new();
                if let Some(p) = self.my_parts.get(&(height.0, r)) {
                    seen.push(ProposedValue {
                        height,
                        round,
                        valid_round: p.valid_round,
                        proposer: p.proposer,
                        value: p.block.clone(),
                        validity: Validity::Valid,
                    });
                } else if let Some(p) = self.early.remove(&(height.0, r))
                    && height.0 == self.store.last_height() + 1
                {
                    seen.push(self.judge(&p)?);
                }
                self.early.retain(|(h, _), _| *h >= height.0);
                let _ = reply_value.send(seen);
            }
            AppMsg::GetValue {
                height,
                round,
                reply,
                ..
            } => {
                let r = round.as_u32().unwrap_or(0);
                let block = match self.my_parts.get(&(height.0, r)) {
                    Some(p) => p.block.clone(),
                    None => match self.build_block(height.0) {
                        Ok(b) => b,
                        Err(e) => {
                            // No value: the engine's propose timeout runs out, the validators
                            // prevote nil and the next round's proposer proposes.
                            self.status.proposals_skipped += 1;
                            tracing::warn!(height = height.0, round = r, reason = %e, "proposal skipped");
                            self.write_status();
                            drop(reply);
                            return Ok(());
                        }
                    },
                };
                let valid_round = Round::Nil;
                let bytes =
                    ProposalPart::signing_bytes(height, round, valid_round, &self.me, &block);
                let part = ProposalPart {
                    height,
                    round,
                    valid_round,
                    proposer: self.me,
                    block: block.clone(),
                    signature: self.signer.sign_raw(&bytes),
                };
                self.undecided.insert(block.id(), block.clone());
                if !self.my_parts.contains_key(&(height.0, r)) {
                    self.parts.append(&part)?;
                }
                self.my_parts.insert((height.0, r), part.clone());
                if reply
                    .send(LocallyProposedValue::new(height, round, block))
                    .is_err()
                {
                    tracing::error!("GetValue reply dropped");
                }
                Self::publish(channels, &part).await;
            }
            AppMsg::ExtendVote { reply, .. } => {
                let _ = reply.send(Some(ClockSample { time_ms: now_ms() }));
            }
            AppMsg::VerifyVoteExtensions {
                extensions, reply, ..
            } => {
                let verdicts = extensions.into_iter().map(|(a, _)| (a, Ok(()))).collect();
                let _ = reply.send(verdicts);
            }
            AppMsg::RestreamProposal { height, round, .. } => {
                if let Some(part) = self
                    .my_parts
                    .get(&(height.0, round.as_u32().unwrap_or(0)))
                    .cloned()
                {
                    Self::publish(channels, &part).await;
                }
            }
            AppMsg::GetHistoryMinHeight { reply } => {
                let _ = reply.send(Height(1));
            }
            AppMsg::ReceivedProposalPart { part, reply, .. } => {
                let mut value = None;
                if let StreamContent::Data(p) = &part.content {
                    let next = self.store.last_height() + 1;
                    if p.height.0 == next && self.authentic(p) {
                        value = Some(self.judge(p)?);
                    } else if p.height.0 > next
                        && p.height.0 <= next + 2
                        && self.early.len() < MAX_EARLY_PARTS
                        && self.authentic(p)
                    {
                        // Early: this node has not finished the previous height. Kept for
                        // StartedRound, which hands it to consensus once the height starts.
                        let r = p.round.as_u32().unwrap_or(0);
                        self.early.insert((p.height.0, r), p.clone());
                    }
                }
                let _ = reply.send(value);
            }
            AppMsg::Decided {
                certificate,
                extensions,
                reply,
            } => {
                let height = certificate.height.0;
                let Some(block) = self.undecided.get(&certificate.value_id).cloned() else {
                    return Err(NodeError::UnknownDecided(certificate.value_id, height));
                };
                let VoteExtensions { extensions } = extensions;
                // Durable before acknowledged: append and fsync, then execute.
                self.store.append(Decided {
                    block: block.clone(),
                    certificate,
                    extensions,
                })?;
                let out = self.ledger.execute(&block, &self.validators)?;
                lock(&self.mempool).after_block(&block.requests, &self.ledger.last_requests);
                self.after_execute(&block, &out);
                if self.opts.snapshot_every > 0 && height % self.opts.snapshot_every == 0 {
                    self.snapshot();
                }
                self.publish_outbox();
                self.log_fires(&block, &out);
                self.undecided.retain(|_, b| b.height > height);
                self.my_parts.retain(|(h, _), _| *h > height);
                self.parts.prune(height)?;
                self.write_status();
                tracing::info!(
                    height,
                    agreed_ms = block.agreed_time_ms,
                    fires = out.fires.len(),
                    requests = self.ledger.last_requests.len(),
                    "decided"
                );
                let _ = reply.send(());
            }
            AppMsg::Finalized {
                certificate, reply, ..
            } => {
                let next = Height(certificate.height.0 + 1);
                let _ = reply.send(Next::Start(next, self.params()));
            }
            AppMsg::GetDecidedValues { range, reply } => {
                let mut out = Vec::new();
                let (lo, hi) = (range.start().0, range.end().0.min(self.store.last_height()));
                for h in lo..=hi {
                    if out.len() >= 50 {
                        break;
                    }
                    if let Some(d) = self.decided(h) {
                        let cert =
                            ExtendedCommitCertificate::from_commit_certificate_and_extensions(
                                d.certificate.clone(),
                                VoteExtensions::new(d.extensions.clone()),
                            );
                        out.push(RawDecidedValue::new(Bytes::from(d.block.encode()), cert));
                    }
                }
                let _ = reply.send(out);
            }
            AppMsg::ProcessSyncedValue {
                height,
                round,
                proposer,
                value_bytes,
                reply,
            } => {
                let outcome = match Block::decode(&value_bytes) {
                    Some(block) if block.height == height.0 => {
                        self.undecided.insert(block.id(), block.clone());
                        self.synced.insert(height.0);
                        SyncedValueOutcome::Verdict(ProposedValue {
                            height,
                            round,
                            valid_round: Round::Nil,
                            proposer,
                            value: block,
                            validity: Validity::Valid,
                        })
                    }
                    _ => SyncedValueOutcome::PeerFault,
                };
                let _ = reply.send(outcome);
            }
        }
        Ok(())
    }
}

/// A deterministic secret for localnet node `index` (from a seed): reproducible test networks.
pub fn localnet_secret(seed: u64, index: usize) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"ccron-malachite-localnet");
    h.update(seed.to_le_bytes());
    h.update((index as u64).to_le_bytes());
    h.finalize().into()
}
