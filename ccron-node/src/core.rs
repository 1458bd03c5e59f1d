//! The engine-free part of one validator process: everything a node does between "the engine
//! asks for a value / hands a proposal / decides" and ccron's kernel.
//!
//! [`NodeCore<A, C>`] owns the ledger ([`LedgerHost<A>`] over any [`Application`] `A`), the
//! decided-block store (records of the engine's commit type `C`), the snapshots, the mempool,
//! the tick pool and the node's own ticks, the results clients read, the published outbox and
//! the status records. An engine adapter calls it from its loop:
//!
//! - [`build_block`](NodeCore::build_block) when it must propose,
//! - [`judge`](NodeCore::judge) for every proposal it receives (before voting),
//! - [`decide`](NodeCore::decide) when a value is decided (durable before acknowledged),
//! - [`on_local_tick`](NodeCore::on_local_tick) for its TicksGenerator's ticks,
//! - [`decided`](NodeCore::decided) to serve the engine's sync.
//!
//! Everything else the adapter does (votes, proposal parts and their streaming, the engine's
//! own configuration) is the engine's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use ccron::host::{Application, BlockOutcome, TickPool};
use ccron::ticks::TickThrottle;

use crate::api::{ApiState, lock};
use crate::crypto::{Signer, SigningDomain};
use crate::forward::{FORWARD_DEADLINE, Forwarder};
use crate::ledger::{BlockRejection, LedgerHost, PrevCommit, agreed_time, validate_block};
use crate::mempool::{Mempool, MempoolConfig};
use crate::records::{Genesis, NodeStatus};
use crate::request::{MAX_BLOCK_REQUEST_BYTES, MAX_BLOCK_REQUESTS};
use crate::results::RequestResults;
use crate::snapshot::{ReplayError, Snapshots};
use crate::store::{BlockStore, Commit, Decided, StoreError};
use crate::types::{Address, Block, CarriedSample, Hash32, TickTx, Validators, hex, unhex32};

/// Most blocks a node remembers for undecided heights (proposed, received or synced).
pub const MAX_UNDECIDED: usize = 1_024;

/// Why a node does not propose in a round (it skips the round's proposal; the round times out
/// and the next proposer proposes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError {
    /// The previous height's clock samples do not give an agreed time (fewer than a quorum).
    #[error("no agreed time for height {height}")]
    NoAgreedTime {
        /// The height.
        height: u64,
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
    Store(#[from] StoreError),
    /// The snapshot directory is unusable (a bad snapshot is not this: it is skipped).
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// Ledger failure.
    #[error(transparent)]
    App(#[from] ccron::host::HostError),
    /// Engine failure.
    #[error("engine: {0}")]
    Engine(String),
    /// The block store was pruned up to `base` and no snapshot at or above it is usable: the
    /// blocks below are gone, so the state cannot be rebuilt from this node's disk.
    #[error(
        "blocks up to {base} were pruned and no valid snapshot at or above {base} remains \
         (rebuild from a peer's snapshot)"
    )]
    Pruned {
        /// The store's highest pruned height.
        base: u64,
    },
    /// A decided value this node never saw.
    #[error("decided value {0} at height {1} is unknown to this node")]
    UnknownDecided(Hash32, u64),
    /// The ledger stopped at a planned upgrade (`ccron::schedule::upgrade`) at `height`; the
    /// process exits with the halt's code ([`crate::upgrade`]).
    #[error("{halt} (at height {height}; snapshot for the next build: {saved:?})")]
    Upgrade {
        /// Why.
        halt: ccron::schedule::UpgradeHalt,
        /// The height whose execution stopped.
        height: u64,
        /// The height of the snapshot written for the next build ([`UpgradeHalt::Needed`]
        /// only).
        ///
        /// [`UpgradeHalt::Needed`]: ccron::schedule::UpgradeHalt::Needed
        saved: Option<u64>,
    },
    /// The validator's signing state is unusable, or says it would sign again at heights it
    /// signed before losing its WAL ([`crate::signguard`]).
    #[error(transparent)]
    Signing(#[from] crate::signguard::SigningStateError),
}

impl From<ReplayError> for NodeError {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Store(e) => NodeError::Store(e),
            ReplayError::Host(e) => NodeError::App(e),
            // Non-exhaustive: a future reason still stops the node, named.
            #[allow(unreachable_patterns)]
            other => NodeError::Engine(other.to_string()),
        }
    }
}

/// Node options (the `node` subcommand's).
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
    /// Run as a Byzantine validator (for the localnet's attacks; the engine adapter injects
    /// the behaviour at its seams, `None` for every honest node).
    pub byzantine: Option<crate::hostile::Byzantine>,
    /// Where the HTTP server (client submissions) listens (`127.0.0.1:0`: any free port). The
    /// bound address is written to `node-I/http.addr`.
    pub http: std::net::SocketAddr,
    /// Write a durable snapshot every this many heights (and at a clean stop); 0: only at a
    /// clean stop. See [`crate::snapshot`].
    pub snapshot_every: u64,
    /// Prune the block store below the newest snapshot minus this many heights after each
    /// snapshot (`Snapshots::prune_store`); `None`: keep every block.
    pub retain_blocks: Option<u64>,
    /// The validator's signing state ([`crate::signguard`]); `None`: beside its key,
    /// [`crate::signguard::default_path`].
    pub signing_state: Option<PathBuf>,
}

impl NodeOptions {
    /// The signing state's path: the option's, else beside the key.
    pub fn signing_state_path(&self) -> PathBuf {
        self.signing_state
            .clone()
            .unwrap_or_else(|| crate::signguard::default_path(&self.home, self.index))
    }
}

/// What the binary's ledger factory is told: the genesis' ledger name and the validators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerSpec {
    /// The ledger's name in the genesis (a binary with one ledger may ignore it).
    pub name: String,
    /// Number of validators.
    pub validators: u32,
}

/// A binary's ledger factory: builds the same application on every node, at every start.
pub type Factory<A> = Arc<dyn Fn(&LedgerSpec) -> Result<A, String> + Send + Sync>;

/// The file a node writes its bound HTTP address to.
pub fn http_addr_path(home: &Path, index: usize) -> PathBuf {
    node_dir(home, index).join("http.addr")
}

/// The node directory of `index`.
pub fn node_dir(home: &Path, index: usize) -> PathBuf {
    home.join(format!("node-{index}"))
}

/// Wall clock, Unix ms, plus the clock offset a localnet clock fault injects
/// ([`crate::faults::clock_offset_ms`]: always 0 unless `node --fault-clock-file` is given).
// The node is the process boundary where wall-clock time enters (clock samples, ticks).
#[allow(clippy::disallowed_methods)]
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
        .saturating_add(crate::faults::clock_offset_ms())
}

/// Reads `home/genesis.json`.
///
/// # Errors
/// [`NodeError::Config`] for a missing or malformed file.
pub fn read_genesis(home: &Path) -> Result<Genesis, NodeError> {
    serde_json::from_slice(
        &std::fs::read(home.join("genesis.json"))
            .map_err(|e| NodeError::Config(format!("genesis.json: {e}")))?,
    )
    .map_err(|e| NodeError::Config(format!("genesis.json: {e}")))
}

/// Reads node `index`'s secret key.
///
/// # Errors
/// [`NodeError::Config`] for a missing or malformed key.
pub fn read_secret(home: &Path, index: usize) -> Result<[u8; 32], NodeError> {
    let text = std::fs::read_to_string(node_dir(home, index).join("secret.key"))
        .map_err(|e| NodeError::Config(format!("secret.key: {e}")))?;
    unhex32(&text).ok_or_else(|| NodeError::Config("secret.key: not 32 hex bytes".into()))
}

/// The validator set of a genesis.
///
/// # Errors
/// [`NodeError::Config`] for a malformed key.
pub fn genesis_validators(genesis: &Genesis) -> Result<Validators, NodeError> {
    let mut keys = Vec::with_capacity(genesis.validators.len());
    for v in &genesis.validators {
        keys.push(
            unhex32(&v.public_key).ok_or_else(|| NodeError::Config("bad public key".into()))?,
        );
    }
    Ok(Validators::new(&keys))
}

/// The engine-free node (see the module documentation).
pub struct NodeCore<A, C> {
    opts: NodeOptions,
    genesis: Genesis,
    /// The chain's signing domain (from the genesis): every signature made or checked.
    domain: SigningDomain,
    validators: Validators,
    me: Address,
    signer: Signer,
    my_index: u32,
    store: BlockStore<C>,
    snapshots: Snapshots,
    ledger: LedgerHost<A>,
    /// Blocks seen (proposed or synced) and not yet decided, by value id.
    undecided: HashMap<Hash32, Block>,
    /// Validators' signed ticks waiting for a block (shared with the HTTP server; ccron's
    /// `TickPool`: one pending per submitter and component, no replayed numbers).
    ticks: Arc<Mutex<TickPool<TickTx>>>,
    /// This node's own ticks: at most one pending per component (ccron's `TickThrottle`).
    throttle: TickThrottle,
    /// The last number this node gave one of its ticks.
    tick_number: u64,
    /// The durable reservation of own tick numbers (`ticks.floor`).
    tick_floor: crate::ticks::TickFloor,
    /// Posts own ticks to the other validators' endpoints.
    forwarder: Option<Forwarder>,
    /// Tick submissions the endpoint refused as malformed or badly signed.
    ticks_invalid: Arc<AtomicU64>,
    /// Results of recently executed requests (shared with the HTTP server).
    results: Arc<Mutex<RequestResults>>,
    /// Verified client requests waiting for a block (shared with the HTTP server).
    mempool: Arc<Mutex<Mempool>>,
    /// The committed outbox the read endpoint serves (updated after every executed height).
    outbox: ccron_http::PublishedOutbox,
    /// The book, status and observations the read endpoints and `/metrics` serve.
    reads: crate::read::NodeReads,
    status: NodeStatus,
    /// `digests.log` and `fires.log`: bounded diagnostic logs ([`crate::linelog`]).
    digests_log: crate::linelog::LineLog,
    fires_log: crate::linelog::LineLog,
    /// Heights whose value came through sync: their count and the highest one (two numbers,
    /// not a set growing with the chain; a height synced again is not counted twice).
    synced: (u64, u64),
    /// The binary's ledger factory and the chain's setup (to rebuild the state below a
    /// planned upgrade: [`NodeCore::stop_for_upgrade`]).
    factory: Factory<A>,
    spec: LedgerSpec,
    setup: crate::ledger::LedgerSetup,
}

impl<A, C> std::fmt::Debug for NodeCore<A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCore")
            .field("index", &self.opts.index)
            .field("me", &self.me)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl<A: Application, C: Commit> NodeCore<A, C> {
    /// Opens node `opts.index` of the chain in `opts.home`: reads the genesis and the key,
    /// builds the ledger with `factory` (refusing a build whose setup digest is not the
    /// genesis'), opens the block store and snapshots, restores the newest valid snapshot and
    /// re-executes the blocks above it. (Engine state, such as the engine's WAL, is the
    /// adapter's.)
    ///
    /// # Errors
    /// Config (genesis, key, ledger, setup digest), store and replay failures.
    pub fn open(opts: NodeOptions, factory: &Factory<A>) -> Result<Self, NodeError> {
        // The process boundary: the restart time reported in the status is a wall-clock figure.
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        let genesis = read_genesis(&opts.home)?;
        if genesis.validators.is_empty() || opts.index >= genesis.validators.len() {
            return Err(NodeError::Config("no such validator index".into()));
        }
        let domain = genesis
            .domain()
            .map_err(|e| NodeError::Config(format!("genesis.json: {e}")))?;
        let signer = Signer::new(read_secret(&opts.home, opts.index)?);
        let me = Address(signer.public_key());
        let validators = genesis_validators(&genesis)?;
        let my_index = validators
            .index_of(&me)
            .ok_or_else(|| NodeError::Config("this key is not in the genesis".into()))?;
        let spec = LedgerSpec {
            name: genesis.ledger.clone(),
            validators: validators.count(),
        };
        let probe = factory(&spec).map_err(NodeError::Config)?;
        // The snapshot an older build wrote below a planned upgrade, when this is the next
        // build (its state digest differs from the recorded one by design).
        let mut build_change_at = None;
        if let (Some(want), Some(have)) = (&genesis.setup_digest, probe.setup_digest())
            && *want != hex(&have)
        {
            // A node that stopped for a named upgrade accepts the next build (whose own gate
            // refuses to run anywhere but at the plan): `crate::upgrade`.
            match crate::upgrade::read_upgrade_info(&opts.home, opts.index)
                .map_err(NodeError::Config)?
            {
                Some(info) => {
                    tracing::info!(
                        upgrade = %info.name,
                        height = info.height,
                        setup_digest = %hex(&have),
                        genesis_setup_digest = %want,
                        "a build for a planned upgrade: its setup digest differs from the genesis'"
                    );
                    if info.from_setup_digest.as_deref() != Some(hex(&have).as_str()) {
                        build_change_at = info.snapshot_height;
                    }
                }
                None => {
                    return Err(NodeError::Config(format!(
                        "this build's ledger setup digest {} differs from the genesis' {want}: \
                         another ledger build or configuration (refusing to diverge; a node \
                         that stopped for a planned upgrade records it in {})",
                        hex(&have),
                        crate::upgrade::UPGRADE_INFO_FILE
                    )));
                }
            }
        }
        let setup = genesis.setup(&probe.tick_components());
        drop(probe);
        let dir = node_dir(&opts.home, opts.index);
        let store = BlockStore::open(&dir.join("blocks.log"))?;
        let tick_floor = crate::ticks::TickFloor::open(&dir.join("ticks.floor"))
            .map_err(|e| NodeError::Config(format!("tick floor: {e}")))?;
        let mut snapshots = Snapshots::open(&dir.join("snapshots"))?;
        if let Some(h) = build_change_at {
            snapshots.expect_build_change_at(h);
        }
        let fresh = || -> LedgerHost<A> {
            // The factory succeeded once with this spec; it is deterministic setup code.
            match factory(&spec) {
                Ok(app) => LedgerHost::new(app, &setup),
                Err(e) => {
                    tracing::error!(error = %e, "ledger factory failed on a second call");
                    panic_free_abort(&e)
                }
            }
        };
        // Restart: the newest valid snapshot, then the blocks above it (the state is a pure
        // function of the decided blocks); no usable snapshot: the whole chain.
        let restored = snapshots.restore_latest(&store, &genesis.ledger, &fresh);
        if restored.height.is_none() && store.base() > 0 {
            tracing::error!(
                base = store.base(),
                rejected = restored.rejected.len(),
                "pruned store without a usable snapshot"
            );
            return Err(NodeError::Pruned { base: store.base() });
        }
        let tick_pool = TickPool::new(validators.count(), setup.tick_periods.keys().copied());
        let forward_to: Vec<std::net::SocketAddr> = genesis
            .validators
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != opts.index)
            .filter_map(|(_, v)| v.http_port)
            .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        let outbox =
            ccron_http::PublishedOutbox::new(u64::try_from(opts.index).unwrap_or(u64::MAX));
        let dir = node_dir(&opts.home, opts.index);
        // Opening them cuts a torn last line (a kill mid-write). `digests.log` keeps the lines
        // of the previous process: the heights the restored snapshot covers are not
        // re-executed; the replayed heights are appended again and must repeat the same
        // digests, which the localnet checks.
        let digests_log =
            crate::linelog::LineLog::new(dir.join("digests.log"), crate::linelog::DIAG_LOG_CAP);
        let fires_log =
            crate::linelog::LineLog::new(dir.join("fires.log"), crate::linelog::DIAG_LOG_CAP);
        let mut node = NodeCore {
            digests_log,
            fires_log,
            status: NodeStatus {
                id: opts.index,
                pid: std::process::id(),
                ..NodeStatus::default()
            },
            opts,
            genesis,
            domain,
            validators,
            me,
            signer,
            my_index,
            store,
            snapshots,
            ledger: restored.ledger,
            undecided: HashMap::new(),
            ticks: Arc::new(Mutex::new(tick_pool)),
            // A pending own tick that no block carried within 2 s is treated as lost.
            throttle: TickThrottle::with_max_pending_ms(2_000),
            tick_number: 0,
            tick_floor,
            forwarder: (!forward_to.is_empty())
                .then(|| Forwarder::new(forward_to, FORWARD_DEADLINE)),
            ticks_invalid: Arc::new(AtomicU64::new(0)),
            results: Arc::new(Mutex::new(RequestResults::default())),
            mempool: Arc::new(Mutex::new(Mempool::new(
                MempoolConfig::default(),
                Default::default(),
            ))),
            synced: (0, 0),
            reads: crate::read::NodeReads::new(outbox.replica()),
            outbox,
            factory: factory.clone(),
            spec,
            setup,
        };
        node.status.restored_from_height = restored.height;
        node.status.store_first_height = node.store.first_height();
        node.status.snapshots_rejected = restored.rejected.len() as u64;
        let from = restored.height.unwrap_or(0);
        if let Some(d) = node.store.get(from)? {
            // The state restored: the status (and digests.log) as after executing block `from`.
            let build_change = restored.height.is_some() && restored.height == build_change_at;
            node.note_executed_at(from, d.block.agreed_time_ms, !build_change);
        }
        // The tick numbers decided blocks carried up to the restored snapshot (the blocks above
        // it feed the pool as they are re-executed): the kernel's replay floor.
        {
            let mut pool = lock(&node.ticks);
            for (component, sender, number) in node.ledger.host().gate().floor_entries() {
                pool.on_included(component, sender, number);
            }
        }
        // Re-execute the blocks above it, exactly as on decision (ticks, results, status and a
        // digests.log line per height).
        let mut replayed = 0u64;
        for h in from.saturating_add(1)..=node.store.last_height() {
            let Some(d) = node.store.get(h)? else {
                return Err(NodeError::Store(StoreError::OutOfOrder {
                    got: h,
                    expected: node.store.last_height(),
                }));
            };
            let out = match node.ledger.execute(&d.block, &node.validators) {
                Ok(out) => out,
                Err(e) => return Err(node.stop_for_upgrade(h, e)),
            };
            node.after_execute(&d.block, &out);
            replayed += 1;
        }
        node.status.replayed_blocks = replayed;
        // Own tick numbers continue above the last one a decided block carried and above every
        // number reserved before (pending ones included).
        node.tick_number = node
            .ledger
            .host()
            .gate()
            .floor_entries()
            .filter(|(_, s, _)| *s == node.my_index)
            .map(|(_, _, n)| n)
            .max()
            .unwrap_or(0)
            .max(node.tick_floor.reserved());
        // Published once after the replay, not per replayed block (each publish of a changed
        // outbox clones it); nothing before the first executed height (the endpoint answers 503).
        if node.store.last_height() > 0 {
            node.publish_outbox();
        }
        // The mempool refuses what executed before the restart.
        node.mempool = Arc::new(Mutex::new(Mempool::new(
            MempoolConfig::default(),
            node.ledger.host().requests().clone(),
        )));
        tracing::info!(
            height = node.store.last_height(),
            restored_from = ?restored.height,
            replayed,
            "state rebuilt from the snapshot and the block store"
        );
        node.status.restart_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        node.write_status();
        Ok(node)
    }

    pub(crate) fn my_index(&self) -> u32 {
        self.my_index
    }

    pub(crate) fn tick_number(&self) -> u64 {
        self.tick_number
    }

    pub(crate) fn set_tick_number(&mut self, n: u64) {
        self.tick_number = n;
    }

    pub(crate) fn reserve_tick_number(&mut self, n: u64) -> std::io::Result<()> {
        self.tick_floor.reserve(n)
    }

    pub(crate) fn throttle_mut(&mut self) -> &mut TickThrottle {
        &mut self.throttle
    }

    pub(crate) fn tick_pool(&self) -> &Arc<Mutex<TickPool<TickTx>>> {
        &self.ticks
    }

    pub(crate) fn forwarder(&self) -> Option<&Forwarder> {
        self.forwarder.as_ref()
    }

    pub(crate) fn results(&self) -> &Arc<Mutex<RequestResults>> {
        &self.results
    }

    /// The state the HTTP server shares with the node.
    pub fn api_state(&self) -> ApiState {
        ApiState {
            mempool: self.mempool.clone(),
            outbox: self.outbox.clone(),
            ticks: self.ticks.clone(),
            validators: self.validators.clone(),
            domain: self.domain.clone(),
            ticks_invalid: self.ticks_invalid.clone(),
            results: self.results.clone(),
            reads: self.reads.clone(),
        }
    }

    /// The options.
    pub fn options(&self) -> &NodeOptions {
        &self.opts
    }

    /// The genesis.
    pub fn genesis(&self) -> &Genesis {
        &self.genesis
    }

    /// The chain's signing domain (from the genesis).
    pub fn domain(&self) -> &SigningDomain {
        &self.domain
    }

    /// The validators.
    pub fn validators(&self) -> &Validators {
        &self.validators
    }

    /// This node's address.
    pub fn me(&self) -> Address {
        self.me
    }

    /// This node's signer.
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// The ledger.
    pub fn ledger(&self) -> &LedgerHost<A> {
        &self.ledger
    }

    /// The status record.
    pub fn status(&self) -> &NodeStatus {
        &self.status
    }

    /// Records in the status what the catch-up before start refused (counts by kind) and
    /// writes it: `status.json` `catchup_refused` and `/metrics`
    /// `ccron_catchup_refused_total{kind}`.
    pub fn note_catch_up(&mut self, report: &crate::catchup::fetch::CatchUpReport) {
        self.status.count_catch_up(report);
        self.write_status();
    }

    /// The status record, mutably (an adapter counts its own events in it).
    pub fn status_mut(&mut self) -> &mut NodeStatus {
        &mut self.status
    }

    /// The ticking components and their tick periods.
    pub fn tick_periods(&self) -> &std::collections::BTreeMap<u32, u64> {
        self.ledger.host().gate().periods()
    }

    /// The last decided height (0 at genesis).
    pub fn last_height(&self) -> u64 {
        self.store.last_height()
    }

    /// The decision at `height` from the store (a read failure is an error event and `None`:
    /// the caller then refuses or skips, as for a height it does not have).
    pub fn decided(&self, height: u64) -> Option<Decided<C>> {
        self.store.get(height).unwrap_or_else(|e| {
            tracing::error!(height, error = %e, "block store read failed");
            None
        })
    }

    fn prev_commit(&self, height: u64) -> Option<PrevCommit> {
        let d = self.decided(height.checked_sub(1)?)?;
        Some(PrevCommit {
            id: d.commit.value_id(),
            agreed_time_ms: d.block.agreed_time_ms,
        })
    }

    /// Remembers a block seen for a coming height (proposed or synced), by value id: at most
    /// [`MAX_UNDECIDED`] blocks (the adapter's part book bounds what it hands in; past the
    /// bound a block is refused, counted and traced). Whether it is remembered.
    pub fn remember(&mut self, block: Block) -> bool {
        let id = block.id();
        if self.undecided.len() >= MAX_UNDECIDED && !self.undecided.contains_key(&id) {
            self.status.undecided_refused += 1;
            tracing::warn!(
                height = block.height,
                "undecided blocks at their bound: block not kept"
            );
            return false;
        }
        self.undecided.insert(id, block);
        true
    }

    /// Whether a block with this value id is remembered.
    pub fn knows(&self, id: &Hash32) -> bool {
        self.undecided.contains_key(id)
    }

    /// The remembered block with this value id.
    pub fn undecided_block(&self, id: &Hash32) -> Option<&Block> {
        self.undecided.get(id)
    }

    /// Notes that `height` was decided through the engine's sync.
    pub fn note_synced(&mut self, height: u64) {
        if height > self.synced.1 {
            self.synced = (self.synced.0 + 1, height);
        }
    }

    /// The block this node proposes at `height`: the previous height's samples, the agreed
    /// time by the rule, its pending ticks and the oldest pending requests; checked with the
    /// validity rule every validator applies, so that it never proposes a block the others
    /// reject (a lying node, for tests, skips the check).
    ///
    /// # Errors
    /// [`ProposeError`]: this node skips the round.
    pub fn build_block(&self, height: u64) -> Result<Block, ProposeError> {
        let prev = if height > 1 {
            self.decided(height - 1)
        } else {
            None
        };
        let (prev_round, prev_id, samples) = match prev {
            Some(d) => {
                let mut samples: Vec<CarriedSample> = d.commit.samples();
                samples.sort_by_key(|s| s.validator);
                samples.dedup_by_key(|s| s.validator);
                (d.commit.round(), d.commit.value_id(), samples)
            }
            None => (0, Hash32::default(), Vec::new()),
        };
        let now = now_ms();
        let mut agreed = agreed_time(
            &self.ledger,
            height,
            self.genesis.genesis_time_ms,
            now,
            &samples,
            &self.validators,
        )
        .ok_or(ProposeError::NoAgreedTime { height })?;
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
            prev_state: Some(self.ledger.state_digest()),
        };
        if !self.opts.lying_time {
            self.check(&block, now)
                .map_err(|reason| ProposeError::Invalid { height, reason })?;
        }
        Ok(block)
    }

    fn check(&self, block: &Block, now: i64) -> Result<(), BlockRejection> {
        validate_block(
            &self.ledger,
            block,
            self.prev_commit(block.height),
            self.genesis.genesis_time_ms,
            now,
            &self.validators,
            &self.domain,
            C::sample_message,
        )
    }

    /// Judges a proposed block for the next height (before voting): the validity rule every
    /// validator applies. A refusal is counted and traced (the status file is written at the
    /// next decision, not per proposal). The caller keeps the block or not
    /// ([`BlockRejection::local_clock_only`]).
    ///
    /// # Errors
    /// Why the block is invalid.
    pub fn judge(&mut self, block: &Block) -> Result<(), BlockRejection> {
        let verdict = self.check(block, now_ms());
        if let Err(reason) = &verdict {
            self.status.rejected_proposals += 1;
            *self
                .status
                .rejections_by_reason
                .entry(reason.name())
                .or_default() += 1;
            tracing::warn!(height = block.height, %reason, "proposal rejected");
        }
        verdict
    }

    /// A value decided at `commit.height()`: the block (remembered by value id) is appended
    /// with the commit to the block store and fsync'ed (durable before the engine is
    /// acknowledged), then executed; its ticks, requests, results, status, snapshot (every
    /// `snapshot_every` heights), outbox and logs follow.
    ///
    /// # Errors
    /// An unknown value, a store failure, a halted ledger: the node stops.
    pub fn decide(&mut self, commit: C) -> Result<(Block, BlockOutcome), NodeError> {
        let height = commit.height();
        let id = commit.value_id();
        let Some(block) = self.undecided.get(&id).cloned() else {
            return Err(NodeError::UnknownDecided(id, height));
        };
        self.store.append(Decided {
            block: block.clone(),
            commit,
        })?;
        let out = match self.ledger.execute(&block, &self.validators) {
            Ok(out) => out,
            Err(e) => return Err(self.stop_for_upgrade(height, e)),
        };
        lock(&self.mempool).after_block_at(
            &block.requests,
            &self.ledger.last_requests,
            block.agreed_time_ms,
        );
        self.after_execute(&block, &out);
        if self.opts.snapshot_every > 0 && height.is_multiple_of(self.opts.snapshot_every) {
            self.snapshot();
        }
        self.publish_outbox();
        self.reads
            .observe_fires(block.agreed_time_ms, now_ms(), &out.fires);
        self.log_fires(&block, &out);
        self.undecided.retain(|_, b| b.height > height);
        self.write_status();
        tracing::info!(
            height,
            agreed_ms = block.agreed_time_ms,
            fires = out.fires.len(),
            requests = self.ledger.last_requests.len(),
            "decided"
        );
        Ok((block, out))
    }

    /// The error a failed execution of block `height` stops the node with. An upgrade stop
    /// ([`crate::upgrade`]) becomes [`NodeError::Upgrade`]; at [`UpgradeHalt::Needed`] the
    /// state below the plan is rebuilt on this build (newest snapshot + blocks up to
    /// `height - 1`: the in-memory ledger is not used, the halted batch may have touched the
    /// host's bookkeeping) and saved as a snapshot of `height - 1`, and `upgrade-info.json` is
    /// written, so the next build starts exactly at the plan. A failure to save is logged and
    /// leaves the node stopped with the same halt (the next build then finds an older
    /// snapshot and refuses to run early: [`UpgradeHalt::Early`]).
    ///
    /// [`UpgradeHalt::Needed`]: ccron::schedule::UpgradeHalt::Needed
    /// [`UpgradeHalt::Early`]: ccron::schedule::UpgradeHalt::Early
    fn stop_for_upgrade(&mut self, height: u64, e: ccron::host::HostError) -> NodeError {
        use ccron::schedule::UpgradeHalt;
        let Some(halt) = crate::upgrade::halt_of_host_error(&e) else {
            return NodeError::App(e);
        };
        tracing::error!(height, %halt, "the ledger stopped at a planned upgrade");
        let UpgradeHalt::Needed(name) = &halt else {
            return NodeError::Upgrade {
                halt,
                height,
                saved: None,
            };
        };
        let saved = match self.save_below(height) {
            Ok(saved) => saved,
            Err(err) => {
                tracing::error!(height, error = %err, "no snapshot below the upgrade");
                None
            }
        };
        let info = crate::upgrade::UpgradeInfo {
            name: name.clone(),
            height,
            snapshot_height: saved,
            from_setup_digest: self
                .ledger
                .app()
                .setup_digest()
                .map(|d| crate::types::hex(&d)),
        };
        if let Err(err) =
            crate::upgrade::write_upgrade_info(&self.opts.home, self.opts.index, &info)
        {
            tracing::error!(error = %err, "upgrade-info.json not written");
        }
        tracing::error!(
            upgrade = %name,
            height,
            snapshot = ?saved,
            "stopping for an upgrade: restart this node on the build carrying it"
        );
        NodeError::Upgrade {
            halt,
            height,
            saved,
        }
    }

    /// Rebuilds the state after block `height - 1` on a fresh ledger and writes its snapshot;
    /// the snapshot's height (`None` below height 2: genesis needs none).
    fn save_below(&mut self, height: u64) -> Result<Option<u64>, NodeError> {
        let below = height.saturating_sub(1);
        if below == 0 {
            return Ok(None);
        }
        let (factory, spec, setup) = (self.factory.clone(), self.spec.clone(), self.setup.clone());
        let fresh = || -> LedgerHost<A> {
            match factory(&spec) {
                Ok(app) => LedgerHost::new(app, &setup),
                Err(e) => panic_free_abort(&e),
            }
        };
        let restored = self
            .snapshots
            .restore_latest(&self.store, &self.genesis.ledger, &fresh);
        let from = restored.height.unwrap_or(0);
        if from > below {
            return Err(NodeError::Engine(format!(
                "the newest snapshot ({from}) is above the upgrade's height {height}"
            )));
        }
        let mut ledger = restored.ledger;
        for h in from.saturating_add(1)..=below {
            let Some(d) = self.store.get(h)? else {
                return Err(NodeError::Store(StoreError::OutOfOrder {
                    got: h,
                    expected: below,
                }));
            };
            ledger.execute(&d.block, &self.validators)?;
        }
        let Some(d) = self.store.get(below)? else {
            return Err(NodeError::Store(StoreError::OutOfOrder {
                got: below,
                expected: below,
            }));
        };
        let bytes =
            self.snapshots
                .write(below, d.commit.value_id(), &self.genesis.ledger, &ledger)?;
        tracing::info!(height = below, bytes, "snapshot below the upgrade written");
        Ok(Some(below))
    }

    /// Publishes the committed outbox, as of the last executed height, to the read endpoint.
    fn publish_outbox(&self) {
        if let Some(outbox) = self.ledger.app().outbox() {
            self.outbox.publish(outbox, self.status.last_height);
        }
        self.reads.publish(
            self.ledger.app(),
            self.status.last_height,
            self.ledger.state_digest(),
        );
    }

    fn after_execute(&mut self, block: &Block, out: &BlockOutcome) {
        self.after_decided_ticks_and_results(block, out);
        self.note_executed(block.height, block.agreed_time_ms);
    }

    /// The status (from the kernel's counters) and a `digests.log` line after `height`.
    fn note_executed(&mut self, height: u64, agreed_time_ms: i64) {
        self.note_executed_at(height, agreed_time_ms, true);
    }

    /// [`Self::note_executed`]; `log`: append the height's line to `digests.log` (not for the
    /// snapshot below an upgrade restored on the next build: its digest there is the next
    /// build's, while the line the previous build wrote stays the agreed one).
    fn note_executed_at(&mut self, height: u64, agreed_time_ms: i64, log: bool) {
        let digest = hex(&self.ledger.state_digest());
        let c = self.ledger.host().counters();
        self.status.last_height = height;
        self.status.state_digest = digest.clone();
        self.status.ticks_executed = c.ticks_evaluated;
        self.status.ticks_skipped = c.ticks_skipped;
        self.status.fires = c.fires;
        self.status.agreed_time_ms = agreed_time_ms;
        self.status.requests_executed = c.requests_executed;
        self.status.requests_duplicate = c.requests_duplicate;
        self.status.requests_refused = c.requests_refused;
        self.status.ticks_by_submitter = (0..self.validators.count())
            .map(|i| c.ticks_by_sender.get(&i).copied().unwrap_or(0))
            .collect();
        if log {
            let line = format!(
                "{height} {digest} {agreed_time_ms} {}\n",
                c.requests_executed
            );
            // Counted and traced by the log itself; a diagnostic, not state.
            let _ = self.digests_log.append(line.as_bytes());
            self.note_log_stats();
        }
    }

    /// The diagnostic logs' figures into the status.
    fn note_log_stats(&mut self) {
        let s = self.digests_log.stats().plus(self.fires_log.stats());
        self.status.diag_log_rotations = s.rotations;
        self.status.diag_log_failures = s.failures;
    }

    /// Writes a snapshot of the state after the last executed height (a failure is an error
    /// event and a counter: the block store is the source of truth, a restart replays more).
    pub fn snapshot(&mut self) {
        let Some(d) = self.store.last() else {
            return;
        };
        let (height, id) = (d.height(), d.commit.value_id());
        match self
            .snapshots
            .write(height, id, &self.genesis.ledger, &self.ledger)
        {
            Ok(bytes) => {
                self.status.snapshots_written += 1;
                self.reads.snapshot_written(height, now_ms());
                tracing::info!(height, bytes, "snapshot written");
                self.prune();
            }
            Err(e) => {
                self.status.snapshot_failures += 1;
                tracing::error!(height, error = %e, "snapshot not written");
            }
        }
    }

    /// Prunes the block store below the snapshots (`--retain-blocks`; a failure is an error
    /// event and a counter, the store is left whole).
    fn prune(&mut self) {
        if let Some(retain) = self.opts.retain_blocks {
            match self.snapshots.prune_store(&mut self.store, retain) {
                Ok(Some(p)) => self.status.pruned_heights += p.heights,
                Ok(None) => {}
                Err(e) => {
                    self.status.prune_failures += 1;
                    tracing::error!(error = %e, "block store not pruned");
                }
            }
        }
        self.status.store_first_height = self.store.first_height();
    }

    /// The lowest height this node serves from its block store (the engine's history
    /// minimum).
    pub fn history_min_height(&self) -> u64 {
        self.store.first_height()
    }

    /// Appends one line per fire with a time due to `fires.log`: `height agreed_ms wall_ms
    /// component position due_ms`, for the localnet report's lateness figures.
    fn log_fires(&mut self, block: &Block, out: &BlockOutcome) {
        use std::fmt::Write;
        let wall = now_ms();
        let mut lines = String::new();
        for f in &out.fires {
            if let Some(ccron::Due::Time(due)) = f.due {
                let _ = writeln!(
                    lines,
                    "{} {} {wall} {} {} {due}",
                    block.height, block.agreed_time_ms, f.component, f.position
                );
            }
        }
        if lines.is_empty() {
            return;
        }
        // Counted and traced by the log itself; a diagnostic, not state.
        let _ = self.fires_log.append(lines.as_bytes());
        self.note_log_stats();
    }

    /// Writes `status.json` (temporary file, rename).
    pub fn write_status(&mut self) {
        self.status.synced_heights = self.synced.0;
        self.status.mempool = lock(&self.mempool).counters();
        {
            let pool = lock(&self.ticks);
            self.status.tick_pool.set_pool(pool.counters(), pool.len());
        }
        self.status.tick_pool.invalid = self
            .ticks_invalid
            .load(std::sync::atomic::Ordering::Relaxed);
        if let Some(f) = &self.forwarder {
            let c = f.counters();
            self.status.tick_pool.forward_failed = c.failed + c.timed_out + c.refused;
            self.status.tick_pool.forward = c;
        }
        self.reads.set_status(&self.status);
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
}

/// The ledger factory failed on a call after succeeding on the first with the same arguments:
/// setup code that is not deterministic. The node cannot build its state; it stops the process
/// loudly (an error event, exit code 70) rather than run on a different ledger.
fn panic_free_abort(reason: &str) -> ! {
    tracing::error!(
        reason,
        "the ledger factory is not deterministic; the node stops"
    );
    eprintln!("ccron node: the ledger factory failed after succeeding once: {reason}");
    std::process::exit(70)
}
