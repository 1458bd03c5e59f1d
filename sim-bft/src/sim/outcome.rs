//! What a run hands back: [`SimOutcome`] (violations, per-replica [`NodeSummary`], [`SimStats`],
//! events, the trace hash) and every replica's final application state ([`FinalStates`]).

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{SimConfig, SimEvents, SimParams, Violation, replay_command};
use crate::node::NodeId;

/// Every replica's application state at the end of a run ([`SimOutcome::app`]); `None` for a
/// replica the harness gives no state for.
#[derive(Clone, Default)]
pub struct FinalStates(pub(super) Vec<Option<KeptState>>);

/// One replica's final application state, shared by clones of the outcome.
pub(super) type KeptState = Arc<Mutex<Box<dyn Any + Send>>>;

impl std::fmt::Debug for FinalStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinalStates")
            .field("kept", &self.0.iter().filter(|s| s.is_some()).count())
            .finish()
    }
}

impl FinalStates {
    /// `f` applied to replica `id`'s final state as an `A`, or `None` when there is none or
    /// it is not an `A`.
    pub fn with<A: Any, R>(&self, id: NodeId, f: impl FnOnce(&A) -> R) -> Option<R> {
        let cell = self.0.get(id as usize)?.as_ref()?;
        let guard = cell.lock().ok()?;
        guard.downcast_ref::<A>().map(f)
    }
}

/// Counters of what happened in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimStats {
    /// Events processed.
    pub events: u64,
    /// Messages handed to replicas.
    pub delivered: u64,
    /// Messages lost (loss, partitions, crashed receivers, silent senders).
    pub dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Messages given a reordering delay.
    pub reordered: u64,
    /// Messages a Byzantine replica corrupted.
    pub corrupted: u64,
    /// Old messages a Byzantine replica replayed.
    pub replayed: u64,
    /// Client requests sent.
    pub client_requests: u64,
    /// Replies replicas sent to clients.
    pub replies: u64,
    /// Crashes performed.
    pub crashes: u64,
    /// Writes lost by crashes.
    pub lost_writes: u64,
    /// Longest stretch of the fault phase without a newly committed batch while 2f+1 honest
    /// replicas were up and mutually connected (the judged windows, see `docs/simulator.md`), ms.
    pub max_stall_ms: u64,
    /// Batches committed during the fault phase (the highest sequence number executed before the
    /// heal; null batches of view changes included).
    pub fault_phase_batches: u64,
    /// Total length of the fault phase's judged windows, ms (0: nothing was judged).
    pub judged_ms: u64,
    /// The stall bound applied, ms (0: stalls were only measured).
    pub stall_bound_ms: u64,
    /// Crashes at a protocol point (`crash_at_view_change`), counted in `crashes` too.
    pub crash_points: u64,
    /// The largest amplification seen, in thousandths: over every honest replica h and
    /// Byzantine replica b, the bytes h sent b over the allowance (twice the average h sent
    /// an honest peer, plus four times what b sent h, plus 1 MiB); above 1000 is an
    /// [`ViolationKind::Amplification`](super::ViolationKind::Amplification) (0 without Byzantine replicas).
    pub amplification_permille: u64,
}

/// One replica's state at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSummary {
    /// Replica id.
    pub id: NodeId,
    /// False for Byzantine replicas.
    pub honest: bool,
    /// Highest sequence number it executed (0 if none).
    pub last_executed_seq: u64,
    /// Its state digest after that batch (zeros if none), under its scheme's hash function
    /// ([`Signatures::state_hash`](crate::crypto::Signatures::state_hash)).
    pub state_digest: [u8; 32],
    /// Its state digest at the end of the run under SHA-256 whatever the scheme (zeros when it
    /// is down at the end): equal between runs of one configuration under the two schemes.
    pub state_sha256: [u8; 32],
    /// Batches it executed for the first time: each sequence number at most once (the
    /// re-executions after a restart are in `batches_reexecuted`).
    pub batches_executed: u64,
    /// Batches it executed again after a restart (replaying its log from the last stable
    /// checkpoint up to sequence numbers it had executed before the crash).
    pub batches_reexecuted: u64,
    /// Ticks in the batches it executed for the first time.
    pub ticks_executed: u64,
    /// Requests in the batches it executed for the first time, ticks included.
    pub requests_executed: u64,
    /// Executed a batch above the heal sequence number during the liveness phase.
    pub progressed_after_heal: bool,
    /// Actions fired, per `"<component>/<position>"`.
    pub fires: BTreeMap<String, u64>,
    /// Its own counters at the end of the run, since its last boot ([`Harness::metrics`](super::Harness::metrics)).
    pub metrics: BTreeMap<String, u64>,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    /// The configuration.
    pub config: SimConfig,
    /// What the seed derived.
    pub params: SimParams,
    /// Per-replica summaries.
    pub nodes: Vec<NodeSummary>,
    /// Broken invariants (empty when every checker held).
    pub violations: Vec<Violation>,
    /// Violations beyond those kept in detail.
    pub dropped_violations: u64,
    /// True when no two honest replicas disagreed on a batch or state digest.
    pub honest_agree: bool,
    /// The scheme's digest (SHA-256 under ed25519, BLAKE3 under `sim`) over every processed
    /// event and executed batch.
    pub trace_hash: [u8; 32],
    /// Counters.
    pub stats: SimStats,
    /// Simulated time at the end of the run.
    pub end_ms: u64,
    /// Highest sequence executed before the heal.
    pub heal_seq: u64,
    /// Fire events, crashes, restarts and view changes, in order (bounded).
    pub events: SimEvents,
    /// Every replica's application state at the end of the run (see [`SimOutcome::app`]).
    pub states: FinalStates,
}

impl SimOutcome {
    /// True when every checker held.
    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.dropped_violations == 0
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        replay_command(&self.config)
    }

    /// `f` applied to replica `id`'s final application state, as the type `A` the test built
    /// (`None` when the replica has none or it is not an `A`):
    /// `outcome.app(0, |l: &CronLedger<MyState>| l.state().count)`.
    pub fn app<A: Any, R>(&self, id: NodeId, f: impl FnOnce(&A) -> R) -> Option<R> {
        self.states.with(id, f)
    }
}
