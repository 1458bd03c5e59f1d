//! The sim-bft replica: one sans-IO state machine implementing [`Node`].
//!
//! PBFT (Castro & Liskov) with request batching: the primary of view `v` (replica `v mod n`)
//! orders batches with pre-prepares; a batch *prepares* at a replica once it holds the
//! pre-prepare and 2f matching prepares from backups, and *commits* once 2f+1 replicas sent
//! matching commits. Committed batches execute strictly in sequence order. Every K sequence
//! numbers replicas exchange signed checkpoints; 2f+1 matching ones make a checkpoint stable,
//! which moves the low watermark and garbage-collects the log. A replica whose timer on pending
//! work expires moves to the next view (view change / new view); a replica that fell behind the
//! stable checkpoint fetches a snapshot (application, clients, reserved pages, time) by state
//! transfer and verifies it against the checkpoint certificate.
//!
//! This module holds the one [`Replica`] struct (the single owner of all replica state), its
//! constructors, accessors, shared helpers, invariants and the [`Node`] impl. Public submodules:
//! [`config`], [`metrics`], [`clients`] (ClientsManager). The protocol's handlers are `impl
//! Replica` blocks in private submodules, one concern each: `dispatch` (peer bytes and timers
//! routed to handlers, view deferral, status and commit-certificate catch-up), `admission`
//! (client requests, internal ticks, bundles), `normal_case` (propose, pre-prepare, prepare,
//! commit), `execution` (ordered execution, replies, state digest), `checkpoint`, `time_service`
//! (time certificates, agreed time), `recovery` (restart from storage, persistence),
//! `view_change` and `state_transfer`.

mod admission;
mod batch_bytes;
mod batch_fetch;
mod checkpoint;
pub mod clients;
pub mod config;
mod dispatch;
mod execution;
pub mod future;
pub(crate) mod hooks;
pub mod metrics;
mod normal_case;
mod recovery;
mod retransmit;
mod state_transfer;
mod time_service;
mod view_change;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bincode::{Decode, Encode};
use ccron::MemPages;
use ccron::host::{BlockHost, TickGate, TimeRule};
use ccron::ticks::TickThrottle;
use tracing::{debug, warn};

use crate::app::{Application, TickExecutor, WithTicks};
use crate::crypto::{self, Digest32, Keyring, SigBytes, SigningKey};
use crate::node::{Input, Millis, Node, NodeId, Output};
use crate::protocol::{Batch, Body, CheckpointProof, Payload, PreparedProof, sign_wire};
pub use checkpoint::{ExecutionRejection, STATE_FULL_RESULT};
use clients::{ClientRecord, ClientsManager};
pub use config::{Byzantine, ConfigError, ReplicaConfig, TickSenders, TimeConfig, TimeMode};
pub use metrics::Metrics;
use state_transfer::{RepeatHolds, Serving};
pub use time_service::KEY_TIME_CERT;

/// Errors of constructing or recovering a replica.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Durable storage holds something unusable.
    #[error("corrupt storage: {0}")]
    Storage(String),
}

/// The agreed-time rule of a replica: quorum 2f+1, the configured epsilon and hard limit; in
/// the robust mode the primary's stamp counts less the genesis bound ([`TimeMode::Robust`]), in
/// the reference mode as it is.
fn time_rule(cfg: &ReplicaConfig) -> TimeRule {
    let mut rule = TimeRule::for_validators(
        cfg.n,
        match cfg.time.mode {
            TimeMode::Robust => cfg.time.genesis_bound_ms,
            _ => 0,
        },
        cfg.time.hard_limit_ms,
    );
    rule.epsilon_ms = cfg.time.epsilon_ms;
    rule
}

/// Refuses an application whose declared reserved pages ([`Application::page_ranges`]) hold the
/// replica's agreed-time page or lie beyond the store: both would write one page, and the
/// replicas would diverge at the first restart or state transfer.
pub fn check_page_ranges(cfg: &ReplicaConfig, app: &dyn Application) -> Result<(), ConfigError> {
    for range in app.page_ranges() {
        if range.contains(cfg.time_page) {
            return Err(ConfigError(format!(
                "the application's reserved pages {}..{} hold page {}, which the replica uses \
                 for the agreed time (ReplicaConfig::time_page): start the application's pages \
                 after it",
                range.first(),
                range.end(),
                cfg.time_page
            )));
        }
        if range.end() > cfg.num_pages {
            return Err(ConfigError(format!(
                "the application's reserved pages {}..{} exceed the replica's {} pages \
                 (ReplicaConfig::num_pages)",
                range.first(),
                range.end(),
                cfg.num_pages
            )));
        }
    }
    Ok(())
}

/// A violated internal invariant (reported by [`Replica::check_invariants`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("invariant violated: {0}")]
pub struct InvariantError(pub String);

/// Storage key of the view number.
pub const KEY_VIEW: &[u8] = b"view";
/// Storage key of the last stable checkpoint (proof and snapshot).
pub const KEY_CHECKPOINT: &[u8] = b"ckpt";
/// Prefix of the storage keys of log entries (followed by the seq, big endian).
pub const KEY_LOG_PREFIX: &[u8] = b"log/";
/// Storage key of the high-water mark of this replica's internal request numbers (ticks): a
/// number at or below it may have been sent, so a recovered replica never issues it again.
pub const KEY_INTERNAL_REQ: &[u8] = b"ireq";

fn log_key(seq: u64) -> Vec<u8> {
    // One allocation of the final size (not the prefix's, grown for the number).
    let mut k = Vec::with_capacity(KEY_LOG_PREFIX.len() + 8);
    k.extend_from_slice(KEY_LOG_PREFIX);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// A commit vote as remembered for the commit quorum and the time certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CommitVote {
    view: u64,
    digest: Digest32,
    clock_ms: Millis,
    sig: SigBytes,
}

/// A commit certificate: the view of its commits and 2f+1 signed (replica, clock, signature).
type CommitCert = (u64, Vec<(NodeId, Millis, SigBytes)>);

/// One sequence number of the log, in the current view.
#[derive(Debug, Clone, Default)]
pub(crate) struct Entry {
    pub(crate) view: u64,
    /// The batch at this seq in `view`. Shared (`Arc`), not copied, with `proof_batch` when
    /// both are the same batch, and with the pre-prepare it arrived in.
    pub(crate) batch: Option<Arc<Batch>>,
    pub(crate) digest: Option<Digest32>,
    /// False when the time check failed: the replica keeps the batch but withholds its votes.
    vote_ok: bool,
    prepares: BTreeMap<NodeId, (Digest32, SigBytes)>,
    commits: BTreeMap<NodeId, CommitVote>,
    prepared: bool,
    commit_sent: bool,
    pub(crate) committed: bool,
    /// The highest-view prepared certificate this replica holds for the seq (survives views).
    pub(crate) proof: Option<PreparedProof>,
    /// The batch `proof` names (by digest), when this replica holds it: what it serves to a
    /// peer that fetches it after a view change ([`Body::BatchFetch`]). Usually the same
    /// allocation as `batch` (prepared in this view).
    pub(crate) proof_batch: Option<Arc<Batch>>,
    /// The commit certificate (its view and 2f+1 signed commits) this entry committed by,
    /// when it committed by a received [`Body::Committed`] rather than by collected votes:
    /// kept so that this replica can forward it to a peer that lacks the seq (else, when the
    /// honest replicas that hold the votes committed by certificates too, no one can).
    cert: Option<CommitCert>,
}

impl Entry {
    /// The certificate this entry's batch can be proved committed by to a peer: its own
    /// matching commit votes of its view once committed, else a certificate it received or
    /// carried from an earlier view for the same batch.
    fn certificate(&self, quorum: usize) -> Option<CommitCert> {
        let digest = self.digest?;
        if !self.committed {
            return self.cert.clone();
        }
        let commits: Vec<(NodeId, Millis, SigBytes)> = self
            .commits
            .iter()
            .filter(|(_, v)| v.digest == digest && v.view == self.view)
            .take(quorum)
            .map(|(n, v)| (*n, v.clock_ms, v.sig))
            .collect();
        if commits.len() >= quorum {
            return Some((self.view, commits));
        }
        self.cert.clone()
    }
}

/// What durable storage keeps of a log entry.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct StoredEntry {
    view: u64,
    seq: u64,
    batch: Batch,
    proof: Option<PreparedProof>,
    /// The proof's batch when it is not `batch` (it prepared in an earlier view).
    proof_batch: Option<Batch>,
    committed: bool,
    /// Whether the replica votes on `batch` (false: the batch time check failed at receipt and
    /// it withholds its prepare; recovery must not turn that into a vote).
    vote_ok: bool,
}

/// What durable storage keeps under [`KEY_VIEW`]: the view and whether the replica is still
/// changing to it (joined its view change, new-view not yet processed). A replica restarting in
/// a view change resumes it: it must not act as if the view's new-view had been processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
struct StoredView {
    view: u64,
    in_view_change: bool,
}

/// What durable storage keeps of the stable checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct StoredCheckpoint {
    proof: CheckpointProof,
    snapshot: Vec<u8>,
}

/// The replicated state at a checkpoint (its chunk-list digest is the checkpoint digest).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct Snapshot {
    seq: u64,
    /// The kernel's snapshot ([`BlockHost::checkpoint`]): the application, the reserved
    /// pages (the agreed-time page among them), the last agreed time, the tick gate, the
    /// executed requests, the counters and the state budget.
    host: Vec<u8>,
    /// The reply cache of each client.
    clients: Vec<ClientRecord>,
    last_cert_seq: u64,
    state_digest: Digest32,
}

/// What a replica runs its batches through: ccron's kernel over the application the replica
/// was given and its reserved pages.
type Host = BlockHost<Box<dyn Application>, MemPages>;

/// What the time page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
struct TimeRecord {
    seq: u64,
    agreed_time_ms: Millis,
    cert_seq: u64,
}

/// Where a signed message goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest {
    /// Every other replica.
    All,
    /// One replica.
    One(NodeId),
}

/// The PBFT replica.
pub struct Replica {
    cfg: ReplicaConfig,
    key: SigningKey,
    ring: Keyring,
    /// The one executor (ccron's kernel): application, reserved pages, exactly-once, tick
    /// gate, agreed time, counters, state budget.
    host: Host,
    metrics: Metrics,
    /// What this replica does at its interception points ([`hooks`]): honest, unless the
    /// simulator configured a Byzantine strategy ([`crate::byzantine`]).
    strategy: Box<dyn hooks::Strategy>,

    // The core every handler reads: the view, the log and execution.
    view: u64,
    in_view_change: bool,
    next_seq: u64,
    last_executed: u64,
    log: BTreeMap<u64, Entry>,
    /// When the primary cuts its next batch (`batch_delay_ms`).
    batch_deadline: Option<Millis>,
    last_state_digest: Digest32,
    /// Why this replica stopped executing (fail-stop): its application could not complete a
    /// replicated operation ([`crate::app::Application::halted`]) or its agreed-time page did
    /// not save. Once set, nothing more executes and the invariant check fails naming it.
    halted: Option<String>,
    /// The first certified snapshot this replica could not install (state transfer), kept
    /// until the host takes it ([`Replica::take_install_failure`]).
    install_failure: Option<String>,

    // One sub-state per concern, each defined next to the handlers that touch it.
    /// Clients: pending requests and the reply cache (`clients`).
    clients: ClientsManager,
    /// Requests whose signatures this replica checked (`admission`).
    verified: admission::VerifiedRequests,
    /// This replica's own ticks (`admission`).
    ticks: admission::TickState,
    /// Messages of views this replica has not entered yet (`future`).
    future: future::FutureBuffer,
    /// View changes: timers, the view changes received, the last new-view (`view_change`).
    vc: view_change::ViewChangeState,
    /// Batches a new view ordered by digest: fetched when missing, served (`batch_fetch`).
    fetch: batch_fetch::FetchState,
    /// Normal-case retransmission (`retransmit`).
    retransmit: retransmit::RetransmitState,
    /// Status rounds and their answers (`dispatch`).
    status: dispatch::StatusState,
    /// The time service's certificates (`time_service`).
    time: time_service::TimeState,
    /// Checkpoints: the stable one, this replica's own, the votes (`checkpoint`).
    checkpoints: checkpoint::Checkpoints,
    /// State transfer, as a receiver and as a source (`state_transfer`).
    state_transfer: state_transfer::StateTransferState,
    /// The encodings of the log's recent batches, so that one batch is encoded once for its
    /// digest, its stored log entries and its size (`batch_bytes`).
    batch_bytes: batch_bytes::BatchBytes,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.cfg.id)
            .field("view", &self.view)
            .field("in_view_change", &self.in_view_change)
            .field("last_executed", &self.last_executed)
            .field("stable", &self.checkpoints.stable.seq)
            .finish_non_exhaustive()
    }
}

/// Most requests one [`Wire::Requests`](crate::protocol::Wire::Requests) bundle may carry (a longer one is dropped unread).
pub const MAX_BUNDLE_REQUESTS: usize = 4_096;

impl Replica {
    /// A fresh replica running `app` for user requests and `ticks` for ticks.
    pub fn with_parts(
        cfg: ReplicaConfig,
        app: Box<dyn Application>,
        ticks: Box<dyn TickExecutor>,
    ) -> Result<Self, ReplicaError> {
        Self::with_app(cfg, Box::new(WithTicks::new(app, ticks)))
    }

    /// A fresh replica running `app` for user requests and ticks alike (e.g. a
    /// [`crate::ledgers::CronLedger`], whose cron actions change the ledger's state).
    pub fn with_app(cfg: ReplicaConfig, app: Box<dyn Application>) -> Result<Self, ReplicaError> {
        cfg.validate()?;
        check_page_ranges(&cfg, app.as_ref())?;
        let key = crypto::replica_key(cfg.signatures, cfg.key_seed, cfg.id);
        let ring = Keyring::new(cfg.signatures, cfg.key_seed, cfg.n, cfg.num_clients);
        let host = BlockHost::new(
            app,
            MemPages::new(cfg.page_size, cfg.num_pages),
            TickGate::new(cfg.n, cfg.tick_components.clone()),
        )
        .with_time_rule(time_rule(&cfg))
        .with_state_hash(cfg.signatures.state_hash());
        let clients = ClientsManager::new(cfg.max_pending, cfg.max_pending_per_client)
            .with_byte_caps(cfg.max_pending_bytes, cfg.max_pending_bytes_per_client)
            .with_internal_cap(cfg.tick_components.len());
        let mut r = Self {
            key,
            ring,
            host,
            clients,
            metrics: Metrics::default(),
            view: 0,
            in_view_change: false,
            future: future::FutureBuffer::new(
                cfg.future_bytes_per_sender,
                usize::try_from(cfg.log_window.saturating_mul(4)).unwrap_or(usize::MAX),
            ),
            next_seq: 1,
            last_executed: 0,
            log: BTreeMap::new(),
            batch_deadline: None,
            verified: admission::VerifiedRequests::default(),
            last_state_digest: [0; 32],
            halted: None,
            install_failure: None,
            status: dispatch::StatusState {
                asked_at: None,
                peer_ms: BTreeMap::new(),
                asked_req: None,
                answered_ms: BTreeMap::new(),
                sent_upto: BTreeMap::new(),
                vote_sent_ms: BTreeMap::new(),
                window_ms: None,
            },
            retransmit: retransmit::RetransmitState {
                deadline: None,
                prev: BTreeSet::new(),
                heard_top: (0, 0),
                have_answered_ms: BTreeMap::new(),
                have_batch_sent: BTreeMap::new(),
                repeat_credit: BTreeMap::new(),
            },
            fetch: batch_fetch::FetchState {
                missing: BTreeMap::new(),
                deadline: None,
                round: 0,
                served: BTreeMap::new(),
                served_seqs: BTreeSet::new(),
                new_view_digests: BTreeMap::new(),
            },
            vc: view_change::ViewChangeState {
                attempts: 0,
                received: BTreeMap::new(),
                last_new_view: None,
                new_view_resent: BTreeSet::new(),
                deadline: None,
                resend_deadline: None,
                echo_ms: BTreeMap::new(),
                started_ms: Millis::MIN,
                seen: (0, false),
            },
            time: time_service::TimeState {
                last_cert_seq: 0,
                recent_certs: BTreeMap::new(),
            },
            state_transfer: state_transfer::StateTransferState {
                behind_since: None,
                transfer: None,
                serving: Serving::default(),
                repeats: RepeatHolds::default(),
            },
            checkpoints: checkpoint::Checkpoints {
                stable: CheckpointProof {
                    seq: 0,
                    digest: [0; 32],
                    sigs: Vec::new(),
                },
                stable_snapshot: Vec::new(),
                own: BTreeMap::new(),
                votes: BTreeMap::new(),
            },
            ticks: admission::TickState {
                outgoing: Vec::new(),
                flush_deadline: None,
                // The safety net clears a mark lost by some unforeseen path after a few view-change
                // timeouts instead of silencing the component forever.
                throttle: TickThrottle::with_max_pending_ms(
                    u64::try_from(cfg.view_change_timeout_ms.saturating_mul(4)).unwrap_or(u64::MAX),
                ),
                sent_period: BTreeMap::new(),
                next_req: 1,
                req_reserved: 0,
            },
            strategy: crate::byzantine::strategy(&cfg),
            batch_bytes: batch_bytes::BatchBytes::default(),
            cfg,
        };
        r.last_state_digest = r.state_digest();
        let (digest, bytes) = r.make_snapshot()?;
        r.checkpoints.stable.digest = digest;
        r.checkpoints.stable_snapshot = bytes;
        Ok(r)
    }

    // ----- accessors -------------------------------------------------------------------------

    /// This replica's id.
    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    /// The configuration.
    pub fn config(&self) -> &ReplicaConfig {
        &self.cfg
    }

    /// Why this replica stopped executing (fail-stop), if it did.
    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
    }

    /// Per-reason counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Current view.
    pub fn view(&self) -> u64 {
        self.view
    }

    /// Whether a view change is in progress.
    pub fn in_view_change(&self) -> bool {
        self.in_view_change
    }

    /// The primary of the current view.
    pub fn primary(&self) -> NodeId {
        self.primary_of(self.view)
    }

    /// Last executed sequence number.
    pub fn last_executed(&self) -> u64 {
        self.last_executed
    }

    /// Sequence number of the last stable checkpoint (the low watermark).
    pub fn stable_seq(&self) -> u64 {
        self.checkpoints.stable.seq
    }

    /// Agreed time of the last executed batch.
    pub fn last_agreed_time_ms(&self) -> Option<Millis> {
        self.host.last_agreed_ms()
    }

    /// Digest of the replicated state after the last executed batch.
    pub fn state_digest_now(&self) -> Digest32 {
        self.last_state_digest
    }

    /// The reserved pages.
    pub fn pages(&self) -> &MemPages {
        self.host.pages()
    }

    /// The application.
    pub fn app(&self) -> &dyn Application {
        self.host.app().as_ref()
    }

    /// The kernel this replica executes through (counters, exactly-once table, tick gate).
    pub fn host(&self) -> &BlockHost<Box<dyn Application>, MemPages> {
        &self.host
    }

    /// Why a state transfer's certified snapshot (every chunk matched the root 2f+1 replicas
    /// signed) did not install here, since the last call: a snapshot the replicas' own
    /// application cannot restore (an inconsistent application setup). The replica retries from
    /// another source; the simulator reports the cause as a violation.
    pub fn take_install_failure(&mut self) -> Option<String> {
        self.install_failure.take()
    }

    /// The application, giving up the replica (its final state, e.g. at the end of a run).
    pub fn into_app(self) -> Box<dyn Application> {
        self.host.into_app()
    }

    /// Whether a state transfer is in progress.
    pub fn in_state_transfer(&self) -> bool {
        self.state_transfer.transfer.is_some()
    }

    /// Number of pending client requests.
    pub fn pending_requests(&self) -> usize {
        self.clients.pending_len()
    }

    /// Components with a tick pending (the throttle's marks).
    pub fn ticks_pending(&self) -> impl Iterator<Item = u32> + '_ {
        self.ticks.throttle.pending_components()
    }

    /// The tick throttle's counters.
    pub fn tick_throttle_stats(&self) -> ccron::ticks::ThrottleStats {
        self.ticks.throttle.stats()
    }

    /// Charged bytes the future-view buffer holds now (see [`future`]).
    pub fn future_buffer_bytes(&self) -> usize {
        self.future.bytes()
    }

    /// Most charged bytes the future-view buffer ever held at once.
    pub fn future_buffer_peak_bytes(&self) -> usize {
        self.future.peak_bytes()
    }

    /// Number of log entries held.
    pub fn log_len(&self) -> usize {
        self.log.len()
    }

    // ----- what a strategy reads and changes (crate::byzantine) ---------------------------

    /// The log: sequence number -> entry (above the stable checkpoint).
    pub(crate) fn log(&self) -> &BTreeMap<u64, Entry> {
        &self.log
    }

    /// The stable checkpoint's proof.
    pub(crate) fn stable(&self) -> &CheckpointProof {
        &self.checkpoints.stable
    }

    /// Per-reason counters, to count what a strategy did.
    pub(crate) fn metrics_mut(&mut self) -> &mut Metrics {
        &mut self.metrics
    }

    /// The oldest unproposed request's arrival time and the number of unproposed requests.
    pub(crate) fn unproposed(&self) -> (Option<Millis>, usize) {
        self.clients.unproposed()
    }

    // ----- helpers ---------------------------------------------------------------------------

    fn primary_of(&self, view: u64) -> NodeId {
        (view % u64::from(self.cfg.n)) as NodeId
    }

    pub(crate) fn is_primary(&self) -> bool {
        self.primary() == self.cfg.id
    }

    fn f(&self) -> usize {
        self.cfg.f() as usize
    }

    fn quorum(&self) -> usize {
        2 * self.f() + 1
    }

    pub(crate) fn high_watermark(&self) -> u64 {
        self.checkpoints.stable.seq + self.cfg.log_window
    }

    fn drop_msg(&mut self, reason: &'static str, from: Option<NodeId>) {
        self.metrics.inc(reason);
        debug!(replica = self.cfg.id, ?from, reason, "dropped input");
    }

    /// Signs and sends `body`, returning the signature (used for our own votes). The
    /// strategy's outgoing hooks apply ([`hooks::Strategy::outgoing`], `on_wire`).
    pub(crate) fn send(
        &mut self,
        body: Body,
        dest: Dest,
        out: &mut Vec<Output>,
    ) -> Option<SigBytes> {
        match self.strategy.outgoing(body, dest, &mut self.metrics) {
            hooks::Outgoing::Send(body, dest) => self.sign_and_emit(body, dest, out),
            hooks::Outgoing::Split(parts) => {
                let mut sig = None;
                for (body, dest) in parts {
                    sig = self.sign_and_emit(body, dest, out);
                }
                sig
            }
            hooks::Outgoing::Withhold => None,
        }
    }

    fn sign_and_emit(&mut self, body: Body, dest: Dest, out: &mut Vec<Output>) -> Option<SigBytes> {
        let payload = Payload {
            from: self.cfg.id,
            body,
        };
        // The wire bytes in one buffer (`protocol::sign_wire`: the same bytes as encoding
        // `Wire::Signed` of a signed `SignedMsg`, without encoding the payload twice).
        let (bytes, sig) = match sign_wire(&self.key, &payload, self.cfg.verify_cache.as_ref()) {
            Ok(signed) => signed,
            Err(e) => {
                warn!(replica = self.cfg.id, error = %e, "cannot encode own message");
                self.metrics.inc("encode_error");
                return None;
            }
        };
        let bytes = self.strategy.on_wire(bytes, out);
        out.push(match dest {
            Dest::All => Output::Broadcast { bytes },
            Dest::One(to) => Output::Send { to, bytes },
        });
        Some(sig)
    }

    fn vc_timeout(&self) -> Millis {
        let factor = 1i64 << self.vc.attempts.min(6);
        self.cfg.view_change_timeout_ms.saturating_mul(factor).min(
            self.cfg
                .view_change_timeout_max_ms
                .max(self.cfg.view_change_timeout_ms),
        )
    }

    /// The view-change deadline due to waiting requests: the oldest pending request (proposed
    /// or not) must execute within one view-change timeout of when this replica first saw it
    /// (or of the start of the current view, if later). So a primary that keeps ordering other
    /// requests cannot hold one back forever: executing other batches does not move this
    /// deadline. After a status round for that request, one more timeout. `None` when no
    /// request waits.
    fn request_deadline(&self) -> Option<Millis> {
        let (key, arrived) = self.clients.oldest_pending()?;
        let timeout = self.vc_timeout();
        let base = arrived.max(self.vc.started_ms);
        let mut d = base.saturating_add(timeout);
        if let Some((asked, at)) = self.status.asked_req
            && asked == key
        {
            d = d.max(at.saturating_add(timeout));
        }
        Some(d)
    }

    /// The view-change deadline for pending work seen at `now`: the oldest request's
    /// ([`Self::request_deadline`]), else one timeout from now for unexecuted log entries.
    fn work_deadline(&self, now: Millis) -> Option<Millis> {
        if !self.has_pending_work() {
            return None;
        }
        Some(
            self.request_deadline()
                .unwrap_or_else(|| now.saturating_add(self.vc_timeout())),
        )
    }

    fn has_pending_work(&self) -> bool {
        self.clients.pending_len() > 0
            || self
                .log
                .range(self.last_executed + 1..)
                .any(|(_, e)| e.batch.is_some() || e.digest.is_some())
    }

    /// Checks internal invariants (the simulator calls it after every step).
    pub fn check_invariants(&self) -> Result<(), InvariantError> {
        let fail = |s: String| Err(InvariantError(s));
        if let Some(cause) = &self.halted {
            return fail(format!("halted (fail-stop): {cause}"));
        }
        if self.checkpoints.stable.seq > self.last_executed
            && self.state_transfer.transfer.is_none()
        {
            return fail(format!(
                "stable {} above executed {}",
                self.checkpoints.stable.seq, self.last_executed
            ));
        }
        if let Some((first, _)) = self.log.first_key_value()
            && *first <= self.checkpoints.stable.seq
        {
            return fail(format!(
                "log entry {first} at or below stable {}",
                self.checkpoints.stable.seq
            ));
        }
        if let Some((last, _)) = self.log.last_key_value()
            && *last > self.high_watermark()
        {
            return fail(format!("log entry {last} above high watermark"));
        }
        if self.last_executed > self.high_watermark() {
            return fail("executed beyond the window".into());
        }
        if self.is_primary() && !self.in_view_change && self.next_seq <= self.last_executed {
            return fail("primary's next seq not above executed".into());
        }
        // The O(state) checks run in debug builds only, so hosts may call this after every
        // step of a release-mode benchmark.
        if !cfg!(debug_assertions) {
            return Ok(());
        }
        if crate::protocol::chunks::snapshot_digest(
            self.cfg.signatures,
            &self.checkpoints.stable_snapshot,
            self.cfg.chunk_bytes,
        ) != self.checkpoints.stable.digest
        {
            return fail("stable snapshot does not match its digest".into());
        }
        for (s, e) in &self.log {
            if e.committed && e.batch.is_none() {
                return fail(format!("entry {s} committed without a batch"));
            }
            if let (Some(b), Some(d)) = (&e.batch, e.digest)
                && b.digest(self.cfg.signatures).ok() != Some(d)
            {
                return fail(format!("entry {s} digest does not match its batch"));
            }
        }
        self.clients.check().map_err(InvariantError)?;
        self.future.check().map_err(InvariantError)?;
        Ok(())
    }
}

impl Node for Replica {
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>) {
        match self.with_strategy(|s, r| s.on_input(r, now, &input, out)) {
            hooks::InputDecision::Ignore => return,
            hooks::InputDecision::Handled => {}
            hooks::InputDecision::Handle => match input {
                Input::Peer { from, bytes } => self.on_peer(now, from, &bytes, out),
                Input::Client { bytes } => self.on_client(now, &bytes, out),
                Input::Timer => self.on_timer(now, out),
                Input::InternalTick { component } => self.on_internal_tick(now, component, out),
            },
        }
        self.with_strategy(|s, r| s.after_input(r, now, out));
        self.try_propose(now, out);
        self.with_strategy(|s, r| s.after_propose(r, now, out));
        if (self.view, self.in_view_change) != self.vc.seen {
            self.vc.seen = (self.view, self.in_view_change);
            if !self.in_view_change {
                self.vc.started_ms = now;
                self.status.asked_req = None;
            }
        }
        if self.vc.deadline.is_none() && !self.in_view_change {
            self.vc.deadline = self.work_deadline(now);
        }
        self.arm_retransmit(now);
        // A halted replica fails its check on purpose (the simulator reports the cause).
        debug_assert!(
            self.halted.is_some() || self.check_invariants().is_ok(),
            "{:?}",
            self.check_invariants()
        );
    }

    fn next_deadline(&self) -> Option<Millis> {
        [
            self.vc.deadline,
            self.batch_deadline,
            self.ticks.flush_deadline,
            self.retransmit.deadline,
            self.fetch.deadline,
            self.vc.resend_deadline,
            self.state_transfer.behind_since.as_ref().map(|(d, _)| *d),
            self.state_transfer.transfer.as_ref().map(|t| t.deadline_ms),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_is_send_and_config_is_validated() {
        fn assert_send<T: Send>() {}
        assert_send::<Replica>();
        assert!(Replica::new(ReplicaConfig::new(0, 4, 1, 1)).is_ok());
        assert!(Replica::new(ReplicaConfig::new(4, 4, 1, 1)).is_err());
        assert!(Replica::new(ReplicaConfig::new(0, 5, 1, 1)).is_err());
        let mut c = ReplicaConfig::new(0, 4, 1, 1);
        c.log_window = c.checkpoint_interval;
        assert!(Replica::new(c).is_err());
    }

    #[test]
    fn genesis_state_is_identical_and_invariants_hold() {
        let a = Replica::new(ReplicaConfig::new(0, 4, 1, 1)).unwrap();
        let b = Replica::new(ReplicaConfig::new(3, 4, 1, 1)).unwrap();
        assert_eq!(a.state_digest_now(), b.state_digest_now());
        assert_eq!(a.stable().digest, b.stable().digest);
        a.check_invariants().unwrap();
        assert_eq!(a.next_deadline(), None);
    }
}
