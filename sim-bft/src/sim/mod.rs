//! The deterministic simulator: one seed, virtual time, seeded faults, checkers after every step.
//!
//! The simulator is generic over any [`Node`]: a [`Harness`] boots nodes (from a disk image, with
//! a role) and makes client requests. Events sit in a queue ordered by (simulated time, insertion
//! number), so two events at one instant are processed in a fixed order. Between a node's outputs
//! and another node's inputs sits the fault layer (loss, duplication, reordering, delay,
//! partitions, Byzantine byte-level behaviour). Each node sees its own clock: true time plus a
//! seeded offset and drift, plus any seeded jumps.
//!
//! A run has two phases. The safety phase (`duration_ms`) runs with every fault active and the
//! [`checker`] watching every executed batch. Then every fault heals (partitions end, crashed
//! replicas restart, loss stops; Byzantine replicas stay Byzantine) and the liveness phase requires
//! every honest replica to execute a batch beyond the highest sequence number seen at the heal,
//! within `liveness_ms`.
//!
//! Every processed event and executed batch is hashed into a trace hash: the same seed and
//! configuration give the same trace hash, run after run.

pub mod checker;
mod clock_math;
pub mod cluster;
pub mod config;
pub mod disk;
pub mod events;
mod network;
pub mod outcome;
mod params;
mod replay;
pub mod rng;
mod stall;
pub mod starvation;
pub mod toy;
pub mod workload;

use clock_math::div_i128;

use std::any::Any;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::{Arc, Mutex};

use ccron::ticks::TickTimers;

pub use checker::{Checker, TimeBounds, Violation, ViolationKind};
pub use config::{
    ByzantineKind, ConfigError, CrashPlan, FaultConfig, JumpPlan, LedgerKind, MAX_CLIENTS,
    MAX_DRIFT_PPM, MAX_REPLICAS, MAX_SIMULATED_MS, NodeKind, PartitionKind, PartitionPlan,
    Signatures, SimConfig, SimParams, TimeServiceMode, format_instant_ms, parse_duration_ms,
    parse_instant_ms, time_hard_limit_ms,
};
pub use disk::{Disk, DiskImage};
pub use events::{FireEvent, MarkKind, ReplicaMark, SimEvents};
pub use outcome::{FinalStates, NodeSummary, SimOutcome, SimStats};
pub use rng::SimRng;
pub use stall::{
    JUDGED_MAX_DROP_RATE, default_stall_bound_ms, derived_stall_bound_ms, judged_windows,
    quiet_gap_ms,
};
pub use workload::{Workload, workload_rng};

use crate::node::{Executed, Input, Millis, Node, NodeId, Output};

/// Whether a replica runs honest code or misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Follows the protocol.
    Honest,
    /// Misbehaves. For generic kinds ([`ByzantineKind::is_generic`]) the simulator does the
    /// misbehaving on the bytes, and the harness may boot honest code.
    Byzantine(ByzantineKind),
}

/// What the simulator needs from the system under test.
pub trait Harness {
    /// The replica type.
    type Node: Node;

    /// Boots replica `id` from `disk` (empty on first boot) with `role`.
    fn boot(&mut self, id: NodeId, disk: &DiskImage, role: Role) -> Self::Node;

    /// The encoded request number `number` of user client `client`.
    fn client_request(&mut self, client: u32, number: u64) -> Vec<u8>;

    /// The node's own account of its progress: last executed sequence number and the state
    /// digest there. Nodes that catch up by state transfer execute without reporting `Executed`;
    /// this lets the summary show where they really are. `None` (the default): use what the
    /// node reported.
    fn status(&self, _node: &Self::Node) -> Option<(u64, [u8; 32])> {
        None
    }

    /// The node's state digest now under SHA-256, whatever hash function its scheme's state
    /// digest uses: what runs of one configuration under the two signature schemes can
    /// compare. `None` (the default, or a node that is down): not known.
    fn state_sha256(&self, _node: &Self::Node) -> Option<[u8; 32]> {
        None
    }

    /// Checks `node`'s internal invariants (called after every step of an honest node).
    fn check(&self, _node: &Self::Node) -> Result<(), String> {
        Ok(())
    }

    /// Actions fired so far by `node`, keyed `"<component>/<position>"` (empty by default).
    fn fires(&self, _node: &Self::Node) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    /// Called once for every message a node sends, before its copies are scheduled. A harness
    /// may prepare work whose result only affects speed, never a run (the cluster offers the
    /// message's signatures for batch verification). Default: nothing.
    fn on_send(&self, _bytes: &[u8]) {}

    /// The user client and request number a node's reply bytes answer (the number as passed
    /// to [`Self::client_request`]), for the starvation checker. Default: unknown (`None`),
    /// which leaves that checker idle.
    fn reply_number(&self, _bytes: &[u8]) -> Option<(u32, u64)> {
        None
    }

    /// The view `node` is in, if it has views (the simulator marks every change). Default: none.
    fn view(&self, _node: &Self::Node) -> Option<u64> {
        None
    }

    /// `node`'s own counters since its last boot (drops by reason and the like). Default: none.
    fn metrics(&self, _node: &Self::Node) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    /// Why `node` failed since the last call, if it did: a boot or restart from its storage
    /// that did not succeed, a certified snapshot it could not install. The simulator asks after
    /// every boot and step and reports each as a [`ViolationKind::NodeFailure`] (honest nodes).
    /// Default: never.
    fn take_failure(&mut self, _node: &mut Self::Node) -> Option<String> {
        None
    }

    /// Shown an honest node's reply `bytes`: `Some((client, why))` when the client's own oracle
    /// rejects it ([`Workload::on_reply`]), reported as a [`ViolationKind::Workload`]
    /// violation. Default: nothing to check.
    fn on_reply(&mut self, _bytes: &[u8]) -> Option<(u32, String)> {
        None
    }

    /// `node`'s application state, for typed access ([`Simulator::app`]). Default: none.
    fn state<'a>(&self, _node: &'a Self::Node) -> Option<&'a dyn Any> {
        None
    }

    /// `node`'s application state at the end of a run, kept in the outcome
    /// ([`SimOutcome::app`]). Default: none.
    fn final_state(&mut self, _node: Self::Node) -> Option<Box<dyn Any + Send>> {
        None
    }
}

/// The `sim-bft run` command line that reproduces a run of `cfg` ([`SimConfig::command_line`]).
pub fn replay_command(cfg: &SimConfig) -> String {
    cfg.command_line()
}

#[derive(Debug, Clone)]
enum Event {
    Deliver {
        to: NodeId,
        input: Input,
    },
    Timer {
        node: NodeId,
        generation: u64,
    },
    /// Poll of a replica's TicksGenerator timer core (at the next local expiry).
    Tick {
        node: NodeId,
    },
    ClientSend {
        client: u32,
    },
    Crash {
        node: NodeId,
    },
    Restart {
        node: NodeId,
    },
    PartitionOn {
        index: usize,
    },
    PartitionOff {
        index: usize,
    },
    ClockJump {
        node: NodeId,
        delta_ms: Millis,
    },
}

/// An event in the queue, ordered by (simulated time, insertion number): the earliest first,
/// and events of one instant in the order they were scheduled.
struct Queued {
    at_ms: u64,
    seq: u64,
    ev: Event,
}

impl Queued {
    fn key(&self) -> (u64, u64) {
        (self.at_ms, self.seq)
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest event must come out first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key().cmp(&self.key())
    }
}

struct Slot<N> {
    node: Option<N>,
    disk: Disk,
    role: Role,
    offset_ms: Millis,
    drift_ppm: i64,
    /// Deadline (local clock) of the pending timer event, and that event's generation.
    timer: Option<(Millis, u64)>,
    generation: u64,
    last_seq: u64,
    state_digest: [u8; 32],
    batches: u64,
    reexecuted: u64,
    ticks: u64,
    requests: u64,
    inputs: u64,
    /// The replica's TicksGenerator timer core, driven by its local clock in virtual time.
    timers: TickTimers,
    /// Old messages a replaying Byzantine replica can re-send.
    history: VecDeque<Vec<u8>>,
}

/// Bytes kept for replay by a Byzantine replica.
const REPLAY_HISTORY: usize = 64;

/// The simulator.
pub struct Simulator<H: Harness> {
    cfg: SimConfig,
    params: SimParams,
    harness: H,
    slots: Vec<Slot<H::Node>>,
    queue: BinaryHeap<Queued>,
    next_seq: u64,
    now_ms: u64,
    net_rng: SimRng,
    crash_rng: SimRng,
    byz_rng: SimRng,
    point_rng: SimRng,
    blocked: BTreeMap<(NodeId, NodeId), u32>,
    checker: Checker,
    /// The trace hash (the scheme's digest, [`Signatures::hasher`]) over every input.
    trace: crate::crypto::BufferedHasher,
    healed: bool,
    /// The starvation checker's watched requests (see [`starvation`]).
    starvation: starvation::StarvationWatch,
    client_numbers: Vec<u64>,
    stats: SimStats,
    out: Vec<Output>,
    /// Observations for reports and timelines (not hashed into the trace).
    events: SimEvents,
    /// The view each replica was last seen in.
    views: Vec<Option<u64>>,
    /// Bytes each replica handed to the network for each other replica (`[from][to]`; the
    /// amplification checker, see [`checker::amplification`]).
    bytes_sent: Vec<Vec<u64>>,
    /// The parts of `bytes_sent` in unicast batch-carrying messages, in state transfer data and
    /// in relayed client requests (`[from][to]` each; see [`checker::Traffic`]).
    class_bytes_sent: checker::ClassBytes,
    /// Bytes of every client request the simulated clients sent (each request once).
    client_stream: u64,
    /// The largest value an honest replica wrote to its disk in one piece (its stable
    /// checkpoint with the snapshot): what a whole state transfer moves, about.
    largest_stored: u64,
    /// The committed batch stream: estimated bytes of every seq an honest replica executed
    /// (each seq once), and the highest seq counted.
    stream: (u64, u64),
}

impl<H: Harness> Simulator<H> {
    /// A simulator for `cfg` driving nodes booted by `harness`.
    pub fn new(cfg: SimConfig, mut harness: H) -> Result<Self, ConfigError> {
        cfg.validate()?;
        if cfg.tick_period_ms == 0 && !cfg.components.is_empty() {
            tracing::debug!("tick period 0: no internal ticks");
        }
        let params = SimParams::derive(&cfg);
        tracing::info!(
            seed = cfg.seed,
            replay = %replay_command(&cfg),
            params = %params,
            "simulation parameters"
        );
        let n = cfg.replicas;
        let honest: Vec<bool> = (0..n).map(|i| !params.byzantine.contains(&i)).collect();
        let slots = (0..n)
            .map(|i| {
                let role = if honest[i as usize] {
                    Role::Honest
                } else {
                    Role::Byzantine(cfg.faults.byzantine_kind)
                };
                let disk = Disk::new();
                let node = harness.boot(i, &disk.image(), role);
                Slot {
                    node: Some(node),
                    disk,
                    role,
                    offset_ms: params.clock_offset_ms[i as usize],
                    drift_ppm: params.drift_ppm[i as usize],
                    timer: None,
                    generation: 0,
                    last_seq: 0,
                    state_digest: [0; 32],
                    batches: 0,
                    reexecuted: 0,
                    ticks: 0,
                    requests: 0,
                    inputs: 0,
                    timers: TickTimers::new(),
                    history: VecDeque::new(),
                }
            })
            .collect();
        // An honest clock may step by up to the largest jump (and back when the faults heal):
        // agreed time taken from it is honest, so the bounds widen by that much.
        let jump = cfg.faults.max_clock_jump_ms.max(0);
        let start_min_honest = (0..n)
            .filter(|i| honest[*i as usize])
            .map(|i| {
                cfg.epoch_ms
                    .saturating_add(params.clock_offset_ms[i as usize])
            })
            .min()
            .unwrap_or(cfg.epoch_ms);
        let mut checker = Checker::new(
            honest,
            cfg.check_time_bounds,
            cfg.time_ahead_slack_ms.saturating_add(jump),
            cfg.time_behind_slack_ms.saturating_add(jump),
        )
        .with_time_lag_seqs(cfg.time_lag_seqs, start_min_honest);
        let windows = judged_windows(&cfg, &params);
        let stall_bound_ms = cfg
            .stall_bound_ms
            .unwrap_or_else(|| derived_stall_bound_ms(&cfg));
        let judged_ms = windows.iter().map(|(a, b)| b - a).sum();
        checker.judge_stalls(windows, stall_bound_ms);
        let mut slots: Vec<Slot<H::Node>> = slots;
        for (i, slot) in slots.iter_mut().enumerate() {
            if let Some(node) = slot.node.as_mut()
                && let Some(cause) = harness.take_failure(node)
            {
                checker.node_failure(0, i as NodeId, format!("boot: {cause}"));
            }
        }
        let mut trace = crate::crypto::BufferedHasher::new(cfg.signatures.hasher());
        trace.update(b"sim-bft trace v1");
        trace.update(cfg.seed.to_le_bytes());
        let mut sim = Self {
            net_rng: SimRng::split(cfg.seed, "network"),
            crash_rng: SimRng::split(cfg.seed, "disk-loss"),
            byz_rng: SimRng::split(cfg.seed, "byzantine-bytes"),
            point_rng: SimRng::split(cfg.seed, "crash-points"),
            client_numbers: vec![0; cfg.clients as usize],
            starvation: starvation::StarvationWatch::new(2 * cfg.f() as usize + 1),
            cfg,
            params,
            harness,
            slots,
            queue: BinaryHeap::new(),
            next_seq: 0,
            now_ms: 0,
            blocked: BTreeMap::new(),
            checker,
            trace,
            healed: false,
            stats: SimStats {
                judged_ms,
                stall_bound_ms,
                ..SimStats::default()
            },
            out: Vec::new(),
            events: SimEvents::default(),
            views: vec![None; n as usize],
            bytes_sent: vec![vec![0; n as usize]; n as usize],
            class_bytes_sent: checker::ClassBytes::new(n as usize),
            client_stream: 0,
            largest_stored: 0,
            stream: (0, 0),
        };
        sim.schedule_initial();
        Ok(sim)
    }

    /// The seed-derived parameters.
    pub fn params(&self) -> &SimParams {
        &self.params
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Current simulated time (ms since the start).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Replica `id` as hosted now (`None` while it is crashed).
    pub fn node(&self, id: NodeId) -> Option<&H::Node> {
        self.slots.get(id as usize).and_then(|s| s.node.as_ref())
    }

    /// The harness.
    pub fn harness(&self) -> &H {
        &self.harness
    }

    /// Replica `id`'s application as the type `A` the test built (`None` while it is crashed,
    /// or when it is not an `A`). Read-only: replicated state changes only by executing the log.
    pub fn app<A: Any>(&self, id: NodeId) -> Option<&A> {
        let node = self.node(id)?;
        self.harness.state(node)?.downcast_ref::<A>()
    }

    /// Violations found so far.
    pub fn violations(&self) -> &[Violation] {
        self.checker.violations()
    }

    fn push(&mut self, at_ms: u64, ev: Event) {
        self.queue.push(Queued {
            at_ms,
            seq: self.next_seq,
            ev,
        });
        self.next_seq += 1;
    }

    fn schedule_initial(&mut self) {
        let n = self.cfg.replicas;
        let ticking = self
            .cfg
            .components
            .iter()
            .any(|c| self.cfg.tick_period_of(*c) > 0);
        if ticking {
            for node in 0..n {
                // The application starts its generator at boot: each component's first tick
                // is due at the seeded phase, then every period of the replica's local clock.
                let at = self.params.tick_phase_ms[node as usize];
                let local = self.local(node, at);
                for c in self.cfg.components.clone() {
                    let period = self.cfg.tick_period_of(c);
                    let start = local.saturating_sub(i64::try_from(period).unwrap_or(i64::MAX));
                    self.slots[node as usize].timers.start(c, period, start);
                }
                self.push(at, Event::Tick { node });
            }
        }
        if self.cfg.request_interval_ms > 0 {
            for client in 0..self.cfg.clients {
                // Spread clients over one interval so they do not all fire together.
                let at = u64::from(client) * self.cfg.request_interval_ms
                    / u64::from(self.cfg.clients.max(1));
                self.push(at, Event::ClientSend { client });
            }
        }
        for c in self.params.crashes.clone() {
            self.push(c.at_ms, Event::Crash { node: c.node });
            self.push(c.restart_ms, Event::Restart { node: c.node });
        }
        for (index, p) in self.params.partitions.clone().into_iter().enumerate() {
            self.push(p.from_ms, Event::PartitionOn { index });
            self.push(p.until_ms, Event::PartitionOff { index });
        }
        for j in self.params.jumps.clone() {
            self.push(
                j.at_ms,
                Event::ClockJump {
                    node: j.node,
                    delta_ms: j.delta_ms,
                },
            );
        }
        for node in 0..n {
            self.reschedule_timer(node);
        }
    }

    /// Replica `node`'s clock reading at simulated time `t_ms`.
    #[inline]
    fn local(&self, node: NodeId, t_ms: u64) -> Millis {
        let s = &self.slots[node as usize];
        let t = i128::from(t_ms);
        let drift = div_i128(t * i128::from(s.drift_ppm), 1_000_000);
        let v = i128::from(self.cfg.epoch_ms) + i128::from(s.offset_ms) + t + drift;
        v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The earliest simulated time at which `node`'s clock reads at least `deadline`.
    fn global_for(&self, node: NodeId, deadline: Millis) -> u64 {
        let s = &self.slots[node as usize];
        let want = i128::from(deadline) - i128::from(self.cfg.epoch_ms) - i128::from(s.offset_ms);
        let denom = 1_000_000 + i128::from(s.drift_ppm);
        let mut t = if denom > 0 {
            div_i128(want * 1_000_000, denom).max(0)
        } else {
            want.max(0)
        };
        t = t.max(i128::from(self.now_ms));
        let mut t = t.min(i128::from(u64::MAX / 2)) as u64;
        // Integer division may land a millisecond early; a few steps fix it.
        for _ in 0..4 {
            if self.local(node, t) >= deadline {
                break;
            }
            t += 1;
        }
        t
    }

    fn reschedule_timer(&mut self, node: NodeId) {
        let i = node as usize;
        let Some(n) = self.slots[i].node.as_ref() else {
            self.slots[i].timer = None;
            return;
        };
        let Some(deadline) = n.next_deadline() else {
            self.slots[i].timer = None;
            return;
        };
        if let Some((d, _)) = self.slots[i].timer
            && d == deadline
        {
            return;
        }
        self.slots[i].generation += 1;
        let generation = self.slots[i].generation;
        self.slots[i].timer = Some((deadline, generation));
        // At least one millisecond ahead: a node that keeps returning a past deadline gets its
        // timer once per simulated millisecond instead of livelocking the simulator at one instant.
        let at = self
            .global_for(node, deadline)
            .max(self.now_ms.saturating_add(1));
        self.push(at, Event::Timer { node, generation });
    }

    fn honest_bounds(&self) -> TimeBounds {
        let mut lo = i64::MAX;
        let mut hi = i64::MIN;
        for (i, s) in self.slots.iter().enumerate() {
            if s.role == Role::Honest {
                let t = self.local(i as NodeId, self.now_ms);
                lo = lo.min(t);
                hi = hi.max(t);
            }
        }
        TimeBounds {
            min_honest_ms: lo,
            max_honest_ms: hi,
        }
    }

    /// Hands `input` to `node` (if it is up) and performs its outputs.
    fn deliver(&mut self, node: NodeId, input: Input) {
        let i = node as usize;
        let now = self.local(node, self.now_ms);
        self.trace_input(node, &input);
        if let (Role::Byzantine(ByzantineKind::Replay), Input::Peer { bytes, .. }) =
            (self.slots[i].role, &input)
        {
            let h = &mut self.slots[i].history;
            if h.len() >= REPLAY_HISTORY {
                h.pop_front();
            }
            h.push_back(bytes.clone());
        }
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        match self.slots[i].node.as_mut() {
            Some(n) => {
                // Every event the node logs carries its id, the simulated time and its clock.
                let span =
                    tracing::info_span!("replica", id = node, sim_ms = self.now_ms, local_ms = now);
                let _entered = span.enter();
                n.handle(now, input, &mut out);
                if let Some(cause) = self.harness.take_failure(n) {
                    self.checker.node_failure(self.now_ms, node, cause);
                }
            }
            None => {
                self.stats.dropped += 1;
                self.out = out;
                return;
            }
        }
        self.stats.delivered += 1;
        let mut view_stored = false;
        let mut crashed = false;
        for o in out.drain(..) {
            if crashed {
                continue;
            }
            let sync = matches!(o, Output::Sync);
            if let Output::Store { key, .. } = &o
                && key.as_slice() == crate::replica::KEY_VIEW
            {
                view_stored = true;
            }
            self.perform(node, o);
            crashed = sync && view_stored && self.crash_point(node);
        }
        self.out = out;
        self.observe_view(node);
        if crashed {
            // Crashed right after the sync: the rest of the step's outputs never happened.
            self.stats.crash_points += 1;
            self.crash(node);
            let back = self.now_ms + self.point_rng.range(10, 2_000);
            self.push(back, Event::Restart { node });
            self.unjudge_if_short_of_quorum(back);
            return;
        }
        self.slots[i].inputs += 1;
        let every = self.cfg.node_check_every;
        if every > 0
            && self.slots[i].inputs.is_multiple_of(every)
            && self.slots[i].role == Role::Honest
            && let Some(n) = self.slots[i].node.as_ref()
            && let Err(e) = self.harness.check(n)
        {
            self.checker.node_invariant(self.now_ms, node, e);
        }
        self.reschedule_timer(node);
    }

    /// Marks a view change of `node` since it was last seen (observation only).
    fn observe_view(&mut self, node: NodeId) {
        let i = node as usize;
        let Some(view) = self.slots[i]
            .node
            .as_ref()
            .and_then(|n| self.harness.view(n))
        else {
            return;
        };
        if let Some(old) = self.views[i].replace(view)
            && old != view
        {
            self.events
                .mark(node, self.now_ms, MarkKind::ViewChange { view });
        }
    }

    fn trace_input(&mut self, node: NodeId, input: &Input) {
        self.trace.update(self.now_ms.to_le_bytes());
        self.trace.update(node.to_le_bytes());
        match input {
            Input::Peer { from, bytes } => {
                self.trace.update([b'P']);
                self.trace.update(from.to_le_bytes());
                self.trace.update((bytes.len() as u64).to_le_bytes());
                self.trace.update(bytes);
            }
            Input::Client { bytes } => {
                self.trace.update([b'C']);
                self.trace.update((bytes.len() as u64).to_le_bytes());
                self.trace.update(bytes);
            }
            Input::Timer => self.trace.update([b'T']),
            Input::InternalTick { component } => {
                self.trace.update([b'I']);
                self.trace.update(component.to_le_bytes());
            }
        }
    }

    fn perform(&mut self, from: NodeId, o: Output) {
        match o {
            Output::Send { to, bytes } => {
                if to != from && to < self.cfg.replicas {
                    self.bytes_sent[from as usize][to as usize] += bytes.len() as u64;
                    let class = crate::protocol::traffic_class(&bytes);
                    self.class_bytes_sent
                        .add(class, from, to, bytes.len() as u64);
                    self.harness.on_send(&bytes);
                    self.send_from(from, to, bytes);
                }
            }
            Output::Broadcast { bytes } => {
                // A broadcast pre-prepare is the normal stream (every peer gets it alike), not
                // a batch-carrying answer; broadcast relayed requests still count as relayed.
                let class = match crate::protocol::traffic_class(&bytes) {
                    crate::protocol::TrafficClass::Batch => crate::protocol::TrafficClass::Other,
                    c => c,
                };
                for to in 0..self.cfg.replicas {
                    if to != from {
                        self.bytes_sent[from as usize][to as usize] += bytes.len() as u64;
                        self.class_bytes_sent
                            .add(class, from, to, bytes.len() as u64);
                    }
                }
                self.harness.on_send(&bytes);
                // Every peer gets a copy; the last one gets the original.
                let last = (0..self.cfg.replicas).rev().find(|to| *to != from);
                let mut bytes = Some(bytes);
                for to in 0..self.cfg.replicas {
                    if to == from {
                        continue;
                    }
                    let copy = if Some(to) == last {
                        bytes.take()
                    } else {
                        bytes.clone()
                    };
                    if let Some(b) = copy {
                        self.send_from(from, to, b);
                    }
                }
            }
            Output::Reply { client, bytes } => {
                if self.slots[from as usize].role == Role::Honest {
                    if let Some((c, number)) = self.harness.reply_number(&bytes) {
                        self.starvation.replied(c, number);
                    }
                    if let Some((c, why)) = self.harness.on_reply(&bytes) {
                        self.checker.workload(self.now_ms, c, why);
                    }
                }
                self.stats.replies += 1;
                self.trace.update([b'R']);
                self.trace.update(client.to_le_bytes());
                self.trace.update(&bytes);
            }
            Output::Store { key, value } => {
                if let Some(v) = &value
                    && self.slots[from as usize].role == Role::Honest
                {
                    self.largest_stored = self.largest_stored.max(v.len() as u64);
                }
                self.slots[from as usize].disk.store(key, value)
            }
            Output::Sync => self.slots[from as usize].disk.sync(),
            Output::Executed(e) => self.executed(from, e),
        }
    }

    fn executed(&mut self, node: NodeId, e: Executed) {
        self.trace.update([b'E']);
        self.trace.update(node.to_le_bytes());
        self.trace.update(e.seq.to_le_bytes());
        self.trace.update(e.batch_digest);
        self.trace.update(e.state_digest);
        self.trace
            .update(e.agreed_time_ms.unwrap_or(i64::MIN).to_le_bytes());
        let bounds = self.honest_bounds();
        self.checker.executed(self.now_ms, node, &e, bounds);
        if self.slots[node as usize].role == Role::Honest && e.seq > self.stream.1 {
            self.stream = (self.stream.0.saturating_add(e.batch_bytes), e.seq);
        }
        let s = &mut self.slots[node as usize];
        if e.seq <= s.last_seq {
            // A restarted replica replaying its log: counted apart, so `batches_executed`
            // counts each sequence number once.
            s.reexecuted += 1;
            return;
        }
        if e.seq > s.last_seq.saturating_add(1) {
            // A gap: the replica installed a snapshot at `e.seq - 1` by state transfer and never
            // executed the batches between; their fires happened elsewhere.
            let (from_seq, to_seq) = (s.last_seq + 1, e.seq - 1);
            tracing::debug!(
                replica = node,
                from_seq,
                to_seq,
                "batches skipped by state transfer"
            );
            self.events.mark(
                node,
                self.now_ms,
                MarkKind::StateTransferred { from_seq, to_seq },
            );
        }
        let s = &mut self.slots[node as usize];
        s.last_seq = e.seq;
        s.state_digest = e.state_digest;
        s.batches += 1;
        s.ticks += e.ticks.len() as u64;
        s.requests += u64::from(e.requests);
        for note in &e.fires {
            let ev = FireEvent::new(node, e.seq, e.agreed_time_ms, self.now_ms, note);
            tracing::debug!(
                replica = node,
                sim_ms = self.now_ms,
                seq = e.seq,
                agreed_time_ms = ev.agreed_time_ms,
                component = ev.component,
                position = ev.position,
                schedule = ev.schedule,
                due_ms = ev.due_ms,
                due_seq = ev.due_seq,
                "fire"
            );
            self.events.fire(ev);
        }
    }

    /// Whether `node` crashes at this protocol point (`crash_at_view_change`): honest, in the
    /// safety phase, and no other replica down; then a seeded draw.
    fn crash_point(&mut self, node: NodeId) -> bool {
        let p = self.cfg.faults.crash_at_view_change;
        p > 0.0
            && !self.healed
            && self.slots[node as usize].role == Role::Honest
            && self.slots.iter().all(|s| s.node.is_some())
            && self.point_rng.chance(p)
    }

    /// After an unplanned crash (a protocol point): while fewer than 2f+1 honest replicas are
    /// up, until `until_ms`, fault-phase stalls are not judged.
    fn unjudge_if_short_of_quorum(&mut self, until_ms: u64) {
        let f = self.cfg.replicas.saturating_sub(1) / 3;
        let up = self
            .slots
            .iter()
            .filter(|s| s.role == Role::Honest && s.node.is_some())
            .count();
        if (up as u64) < 2 * u64::from(f) + 1 {
            self.checker.unjudge(self.now_ms, until_ms);
        }
    }

    fn crash(&mut self, node: NodeId) {
        let i = node as usize;
        if self.slots[i].node.is_none() {
            return;
        }
        self.slots[i].node = None;
        self.slots[i].timer = None;
        let lost = self.slots[i].disk.crash(&mut self.crash_rng);
        self.stats.crashes += 1;
        self.stats.lost_writes += lost;
        self.trace.update([b'X']);
        self.trace.update(node.to_le_bytes());
        self.trace.update(lost.to_le_bytes());
        tracing::debug!(node, at_ms = self.now_ms, lost, "crash");
        self.events.mark(node, self.now_ms, MarkKind::Crash);
    }

    fn restart(&mut self, node: NodeId) {
        let i = node as usize;
        if self.slots[i].node.is_some() {
            return;
        }
        let role = self.slots[i].role;
        let image = self.slots[i].disk.image();
        let mut n = self.harness.boot(node, &image, role);
        if let Some(cause) = self.harness.take_failure(&mut n) {
            self.checker
                .node_failure(self.now_ms, node, format!("restart: {cause}"));
        }
        self.slots[i].node = Some(n);
        self.checker.restarted(node);
        self.trace.update([b'B']);
        self.trace.update(node.to_le_bytes());
        tracing::debug!(node, at_ms = self.now_ms, "restart");
        self.events.mark(node, self.now_ms, MarkKind::Restart);
        self.views[i] = self.slots[i]
            .node
            .as_ref()
            .and_then(|n| self.harness.view(n));
        self.reschedule_timer(node);
    }

    fn process(&mut self, ev: Event) {
        self.stats.events += 1;
        match ev {
            Event::Deliver { to, input } => self.deliver(to, input),
            Event::Timer { node, generation } => {
                let i = node as usize;
                match self.slots[i].timer {
                    Some((deadline, g)) if g == generation => {
                        self.slots[i].timer = None;
                        if self.local(node, self.now_ms) >= deadline {
                            self.deliver(node, Input::Timer);
                        } else {
                            // A clock jump moved the deadline away: wait again.
                            self.reschedule_timer(node);
                        }
                    }
                    _ => {}
                }
            }
            Event::Tick { node } => {
                let local = self.local(node, self.now_ms);
                let due = self.slots[node as usize].timers.evaluate(local);
                for component in due {
                    if self.slots[node as usize].node.is_some() {
                        self.deliver(node, Input::InternalTick { component });
                    }
                }
                if let Some(deadline) = self.slots[node as usize].timers.next_deadline() {
                    // Drift and jumps make this approximate: an early wake re-polls and waits.
                    let wait = u64::try_from(deadline.saturating_sub(local)).unwrap_or(0);
                    self.push(
                        self.now_ms.saturating_add(wait.max(1)),
                        Event::Tick { node },
                    );
                }
            }
            Event::ClientSend { client } => {
                let number = self.client_numbers[client as usize];
                self.client_numbers[client as usize] += 1;
                let bytes = self.harness.client_request(client, number);
                self.stats.client_requests += 1;
                self.client_stream = self.client_stream.saturating_add(bytes.len() as u64);
                let mut honest_reached = 0;
                for to in 0..self.cfg.replicas {
                    if !self.healed && self.net_rng.chance(self.cfg.faults.drop_rate) {
                        self.stats.dropped += 1;
                        continue;
                    }
                    let slot = &self.slots[to as usize];
                    if slot.role == Role::Honest && slot.node.is_some() {
                        honest_reached += 1;
                    }
                    let d = self.delay();
                    let input = Input::Client {
                        bytes: bytes.clone(),
                    };
                    self.push(self.now_ms.saturating_add(d), Event::Deliver { to, input });
                }
                let watch = self.healed || self.cfg.faults.network_clean();
                self.starvation
                    .sent(client, number, self.now_ms, honest_reached, watch);
                self.check_starvation();
                let next = self.now_ms.saturating_add(self.cfg.request_interval_ms);
                self.push(next, Event::ClientSend { client });
            }
            Event::Crash { node } => {
                if !self.healed {
                    self.crash(node);
                }
            }
            Event::Restart { node } => self.restart(node),
            Event::PartitionOn { index } => {
                if !self.healed {
                    for l in self.params.partitions[index].blocked.clone() {
                        *self.blocked.entry(l).or_insert(0) += 1;
                    }
                }
            }
            Event::PartitionOff { index } => {
                for l in self.params.partitions[index].blocked.clone() {
                    if let Some(c) = self.blocked.get_mut(&l) {
                        *c -= 1;
                        if *c == 0 {
                            self.blocked.remove(&l);
                        }
                    }
                }
            }
            Event::ClockJump { node, delta_ms } => {
                if !self.healed {
                    let s = &mut self.slots[node as usize];
                    s.offset_ms = s.offset_ms.saturating_add(delta_ms);
                    self.trace.update([b'J']);
                    self.trace.update(node.to_le_bytes());
                    self.trace.update(delta_ms.to_le_bytes());
                    // The pending timer was computed with the old clock.
                    self.slots[node as usize].timer = None;
                    self.reschedule_timer(node);
                }
            }
        }
    }

    /// Processes every event up to simulated time `until_ms` (inclusive). Returns false when the
    /// event budget ran out.
    pub fn run_until(&mut self, until_ms: u64) -> bool {
        while let Some(first) = self.queue.peek() {
            let t = first.at_ms;
            if t > until_ms {
                break;
            }
            let Some(Queued { ev, .. }) = self.queue.pop() else {
                break;
            };
            self.now_ms = t;
            self.process(ev);
            if self.stats.events >= self.cfg.max_events {
                self.checker.event_limit(self.now_ms, self.cfg.max_events);
                return false;
            }
        }
        self.now_ms = self.now_ms.max(until_ms);
        true
    }

    /// Ends the safety phase: partitions end, loss stops, crashed replicas restart, clocks stop
    /// jumping and the jumps are undone (skew and drift stay). Byzantine replicas stay Byzantine.
    pub fn heal(&mut self) {
        self.healed = true;
        self.blocked.clear();
        // Clocks resynchronise (as NTP would): the jumps are undone, the seeded skew and drift stay.
        for node in 0..self.cfg.replicas {
            let i = node as usize;
            if self.slots[i].offset_ms != self.params.clock_offset_ms[i] {
                self.slots[i].offset_ms = self.params.clock_offset_ms[i];
                self.slots[i].timer = None;
                self.reschedule_timer(node);
            }
        }
        for node in 0..self.cfg.replicas {
            self.restart(node);
        }
        self.checker.end_fault_phase(self.now_ms);
        self.checker.heal();
        self.trace.update([b'H']);
        tracing::debug!(at_ms = self.now_ms, "heal");
    }

    /// Runs both phases, calling `progress(now_ms, end_ms)` about once per simulated second
    /// (the end is the worst case: the liveness phase may finish early).
    pub fn run_with(mut self, mut progress: impl FnMut(u64, u64)) -> SimOutcome {
        let safety_end = self.cfg.duration_ms;
        // Validation bounds both (MAX_SIMULATED_MS); saturate anyway.
        let end = safety_end.saturating_add(self.cfg.liveness_ms);
        let step = 1_000;
        let mut ok = true;
        let mut t = 0;
        while ok && t < safety_end {
            t = (t + step).min(safety_end);
            ok = self.run_until(t);
            progress(t, end);
        }
        if ok {
            self.heal();
            while t < end {
                t = (t + step.min(100)).min(end);
                ok = self.run_until(t);
                progress(t, end);
                if !ok || self.checker.all_progressed() {
                    break;
                }
            }
            if ok {
                self.checker.finish_liveness(self.now_ms);
            }
        }
        self.finish()
    }

    /// Runs both phases without progress reports.
    pub fn run(self) -> SimOutcome {
        self.run_with(|_, _| {})
    }

    fn check_starvation(&mut self) {
        for o in self.starvation.overdue(self.now_ms) {
            self.checker.starvation(self.now_ms, o);
        }
    }

    fn finish(mut self) -> SimOutcome {
        self.check_starvation();
        self.stats.max_stall_ms = self.checker.max_stall_ms();
        self.stats.judged_ms = self.checker.judged_ms();
        let honest: Vec<bool> = self.slots.iter().map(|s| s.role == Role::Honest).collect();
        let at = self.now_ms;
        self.stats.amplification_permille = self.checker.amplification(
            at,
            &honest,
            checker::Traffic {
                bytes: &self.bytes_sent,
                classes: &self.class_bytes_sent,
                stream: self.stream.0,
                client_stream: self.client_stream,
                largest_stored: self.largest_stored,
            },
        );
        self.stats.fault_phase_batches = self.checker.heal_seq().unwrap_or(0);
        // A replica whose last state transfer was followed by no execution: its span ends at
        // the snapshot it installed.
        let tails: Vec<(NodeId, u64, u64)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let (seq, _) = s.node.as_ref().and_then(|n| self.harness.status(n))?;
                (seq > s.last_seq).then_some((i as NodeId, s.last_seq + 1, seq))
            })
            .collect();
        for (node, from_seq, to_seq) in tails {
            self.events.mark(
                node,
                self.now_ms,
                MarkKind::StateTransferred { from_seq, to_seq },
            );
        }
        let nodes = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let status = s.node.as_ref().and_then(|n| self.harness.status(n));
                let state_sha256 = s
                    .node
                    .as_ref()
                    .and_then(|n| self.harness.state_sha256(n))
                    .unwrap_or([0; 32]);
                let (last_executed_seq, state_digest) = match status {
                    Some((seq, d)) if seq >= s.last_seq => (seq, d),
                    _ => (s.last_seq, s.state_digest),
                };
                NodeSummary {
                    id: i as NodeId,
                    honest: s.role == Role::Honest,
                    last_executed_seq,
                    state_digest,
                    state_sha256,
                    batches_executed: s.batches,
                    batches_reexecuted: s.reexecuted,
                    ticks_executed: s.ticks,
                    requests_executed: s.requests,
                    progressed_after_heal: self
                        .checker
                        .progressed()
                        .get(i)
                        .copied()
                        .unwrap_or(false),
                    fires: s
                        .node
                        .as_ref()
                        .map(|n| self.harness.fires(n))
                        .unwrap_or_default(),
                    metrics: s
                        .node
                        .as_ref()
                        .map(|n| self.harness.metrics(n))
                        .unwrap_or_default(),
                }
            })
            .collect();
        let states = FinalStates(
            self.slots
                .iter_mut()
                .map(|s| {
                    s.node
                        .take()
                        .and_then(|n| self.harness.final_state(n))
                        .map(|b| Arc::new(Mutex::new(b)))
                })
                .collect(),
        );
        let mut trace = self.trace;
        trace.update(self.now_ms.to_le_bytes());
        SimOutcome {
            honest_agree: self.checker.honest_agree(),
            violations: self.checker.violations().to_vec(),
            dropped_violations: self.checker.dropped_violations(),
            heal_seq: self.checker.heal_seq().unwrap_or(0),
            trace_hash: trace.finalize(),
            config: self.cfg,
            params: self.params,
            nodes,
            stats: self.stats,
            end_ms: self.now_ms,
            events: self.events,
            states,
        }
    }
}
