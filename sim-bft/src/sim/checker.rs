//! Invariant checkers the simulator runs after every step.
//!
//! - Agreement: no two honest replicas execute different batch digests at one sequence number.
//! - State: honest replicas that executed the same sequence number report the same state digest.
//! - Order: each replica executes strictly increasing sequence numbers (between restarts).
//! - Time: agreed time never decreases along the log, and when first agreed it lies within the
//!   honest clocks' bounds (Byzantine-robust mode).
//! - Liveness (after healing): every honest replica executes a batch beyond the highest sequence
//!   number executed before the heal.
//! - Liveness (fault phase): while 2f+1 honest replicas are up and can reach each other (the
//!   simulator computes these *judged* windows from the seeded fault plan), no interval without a
//!   newly committed batch may exceed a stated bound.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::node::{Executed, Millis, NodeId};
use crate::protocol::TrafficClass;

/// Which invariant a [`Violation`] broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[non_exhaustive]
pub enum ViolationKind {
    /// Two honest replicas executed different batches at one sequence number.
    Agreement,
    /// Two honest replicas report different state digests after the same sequence number.
    StateDivergence,
    /// A replica executed a sequence number not above its previous one.
    SeqRegression,
    /// Agreed time decreased along the log.
    TimeRegression,
    /// Agreed time lay outside the honest clocks' bounds when first agreed.
    TimeOutOfBounds,
    /// An honest replica made no progress within the liveness bound after healing.
    NoProgress,
    /// A node's own internal invariant check failed.
    NodeInvariant,
    /// The run hit its event budget (a livelock or runaway message storm).
    EventLimit,
    /// During the fault phase, no batch committed for longer than the stall bound while 2f+1
    /// honest replicas were up and mutually connected.
    FaultPhaseStall,
    /// A client request that reached 2f+1 honest replicas got no honest reply within the
    /// bound (see [`super::starvation`]).
    Starvation,
    /// An honest replica could not boot or restart from its storage, or could not install a
    /// certified snapshot by state transfer; the detail names the cause (typically an
    /// application whose snapshot does not restore).
    NodeFailure,
    /// A custom client workload's own oracle rejected a reply
    /// ([`super::workload::Workload::on_reply`]).
    Workload,
    /// An honest replica sent a Byzantine peer far more than it sent an average honest peer,
    /// out of proportion to what that peer sent it (see [`Checker::amplification`]).
    Amplification,
}

/// One broken invariant, with enough context to debug it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Simulated time of detection, in ms since the start of the run.
    pub at_ms: u64,
    /// The replica that exposed it, when one did.
    pub node: Option<NodeId>,
    /// The invariant.
    pub kind: ViolationKind,
    /// Human-readable details.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node {
            Some(n) => write!(
                f,
                "[t={}ms replica {}] {:?}: {}",
                self.at_ms, n, self.kind, self.detail
            ),
            None => write!(f, "[t={}ms] {:?}: {}", self.at_ms, self.kind, self.detail),
        }
    }
}

#[derive(Debug, Clone)]
struct Agreed {
    by: NodeId,
    batch: [u8; 32],
    state: [u8; 32],
    time_ms: Option<Millis>,
    /// The slowest honest clock when this seq was first executed.
    min_honest_ms: Millis,
}

/// Bounds on the agreed time relative to honest clocks when a batch is first executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBounds {
    /// Lowest honest clock reading at that moment.
    pub min_honest_ms: Millis,
    /// Highest honest clock reading at that moment.
    pub max_honest_ms: Millis,
}

/// The safety and liveness checkers' state.
#[derive(Debug, Clone)]
pub struct Checker {
    agreed: BTreeMap<u64, Agreed>,
    last_seq: Vec<Option<u64>>,
    honest: Vec<bool>,
    check_time: bool,
    ahead_slack_ms: Millis,
    behind_slack_ms: Millis,
    lag_seqs: u64,
    start_min_honest_ms: Millis,
    heal_seq: Option<u64>,
    progressed: Vec<bool>,
    violations: Vec<Violation>,
    /// Fault-phase windows (sorted, disjoint, simulated ms) in which stalls are judged.
    stall_windows: Vec<(u64, u64)>,
    /// Longest allowed judged stall (0: stalls are measured, never a violation).
    stall_bound_ms: u64,
    /// When a new sequence number was last first executed (fault phase).
    last_commit_ms: u64,
    /// Longest judged stall so far.
    max_stall_ms: u64,
    /// Violations are capped so a diverged run does not eat memory; the count keeps going.
    dropped: u64,
    /// Seqs below this were dropped from `agreed` (see [`AGREED_KEEP_SEQS`]).
    pruned_below: u64,
}

/// Amplification bound: multiple of the average an honest peer receives.
pub const AMP_AVG: u64 = 2;
/// Amplification bound: multiple of the bytes the Byzantine peer sent.
pub const AMP_INPUT: u64 = 4;
/// Amplification bound: fixed slack, bytes.
pub const AMP_SLACK_BYTES: u64 = 1 << 20;
/// Amplification bound on batch-carrying answers (commit certificates, pre-prepare re-sends,
/// fetched batches): multiple of the committed batch stream. A peer may claim to lack every
/// batch, as an honest replica cut off from the primary does (which needs each batch once,
/// and retries for loss), so it may draw the stream a bounded number of times; what it draws
/// beyond that is amplification. The same multiple bounds relayed client requests (against
/// the client stream) and state transfer data (against the stream plus one whole state).
/// (The `withhold-commits` strategy still draws more batches: open, see docs/simulator.md.)
pub const AMP_STREAM: u64 = 3;

/// Per ordered pair of replicas `[from][to]`, the bytes of unicast batch-carrying messages,
/// of state transfer data and of relayed client requests
/// ([`crate::protocol::TrafficClass`]; broadcasts count as [`TrafficClass::Other`] except
/// relayed requests).
#[derive(Debug, Clone, Default)]
pub struct ClassBytes {
    /// [`TrafficClass::Batch`] bytes (unicasts only).
    pub batch: Vec<Vec<u64>>,
    /// [`TrafficClass::State`] bytes.
    pub state: Vec<Vec<u64>>,
    /// [`TrafficClass::Forward`] bytes.
    pub forward: Vec<Vec<u64>>,
}

impl ClassBytes {
    /// Zeroes for `n` replicas.
    pub fn new(n: usize) -> Self {
        Self {
            batch: vec![vec![0; n]; n],
            state: vec![vec![0; n]; n],
            forward: vec![vec![0; n]; n],
        }
    }

    /// Counts `len` bytes of `class` from `from` to `to` ([`TrafficClass::Other`] is not kept:
    /// it is the total less the classes).
    pub fn add(&mut self, class: TrafficClass, from: NodeId, to: NodeId, len: u64) {
        let m = match class {
            TrafficClass::Batch => &mut self.batch,
            TrafficClass::State => &mut self.state,
            TrafficClass::Forward => &mut self.forward,
            TrafficClass::Other => return,
        };
        if let Some(c) = m
            .get_mut(from as usize)
            .and_then(|r| r.get_mut(to as usize))
        {
            *c = c.saturating_add(len);
        }
    }
}

/// What the amplification check judges, per ordered pair of replicas `[from][to]`.
#[derive(Debug, Clone, Copy)]
pub struct Traffic<'a> {
    /// Every byte `from` handed the network for `to`.
    pub bytes: &'a [Vec<u64>],
    /// The parts of `bytes` by [`TrafficClass`].
    pub classes: &'a ClassBytes,
    /// The committed batch stream: the sum of [`crate::node::Executed::batch_bytes`] over
    /// every sequence number honest replicas executed.
    pub stream: u64,
    /// The client stream: bytes of every request the clients sent (each once).
    pub client_stream: u64,
    /// The largest value an honest replica stored in one piece (its stable checkpoint with
    /// the snapshot): about what one whole state transfer moves.
    pub largest_stored: u64,
}

/// At most this many violations are kept in detail.
const MAX_VIOLATIONS: usize = 64;

/// The agreement table keeps the seqs from this many below the slowest honest replica's last
/// executed seq on (far more than a restarted replica re-executes from its checkpoint: the
/// replica's log window is 128), so a month-long run holds thousands of entries, not millions.
/// An execution reported below the pruned seqs is not compared (a replica that far behind
/// catches up by state transfer, which skips execution).
pub const AGREED_KEEP_SEQS: u64 = 4_096;

impl Checker {
    /// A checker for `honest.len()` replicas; `honest[i]` says whether replica `i` is honest.
    pub fn new(
        honest: Vec<bool>,
        check_time: bool,
        ahead_slack_ms: Millis,
        behind_slack_ms: Millis,
    ) -> Self {
        let n = honest.len();
        Self {
            agreed: BTreeMap::new(),
            last_seq: vec![None; n],
            honest,
            check_time,
            ahead_slack_ms,
            behind_slack_ms,
            lag_seqs: 0,
            start_min_honest_ms: Millis::MIN,
            heal_seq: None,
            progressed: vec![false; n],
            violations: Vec::new(),
            stall_windows: Vec::new(),
            stall_bound_ms: 0,
            last_commit_ms: 0,
            max_stall_ms: 0,
            dropped: 0,
            pruned_below: 0,
        }
    }

    /// Judges fault-phase stalls inside `windows` (simulated ms, half-open): a judged stretch
    /// without a newly committed batch longer than `bound_ms` is a
    /// [`ViolationKind::FaultPhaseStall`] (`bound_ms` 0: measured only).
    pub fn judge_stalls(&mut self, mut windows: Vec<(u64, u64)>, bound_ms: u64) {
        windows.retain(|(a, b)| a < b);
        windows.sort_unstable();
        self.stall_windows = windows;
        self.stall_bound_ms = bound_ms;
    }

    /// Removes `[from_ms, until_ms)` from the judged windows: an unplanned outage (a crash at a
    /// protocol point, `crash_at_view_change`) left fewer than 2f+1 honest replicas up. The
    /// stretch before it is still judged; after it, a stall counts from `until_ms` (as after a
    /// planned restart).
    pub fn unjudge(&mut self, from_ms: u64, until_ms: u64) {
        if from_ms >= until_ms {
            return;
        }
        let mut out = Vec::with_capacity(self.stall_windows.len() + 1);
        for &(a, b) in &self.stall_windows {
            if b <= from_ms || a >= until_ms {
                out.push((a, b));
                continue;
            }
            if a < from_ms {
                out.push((a, from_ms));
            }
            if until_ms < b {
                out.push((until_ms, b));
            }
        }
        self.stall_windows = out;
    }

    /// The amplification check, at the end of a run. For every honest replica h and
    /// Byzantine replica b, in four parts, each with `AMP_AVG` times its own average to an
    /// honest peer (`avg`) and `AMP_SLACK_BYTES` of slack:
    ///
    /// - batch-carrying unicasts (certificates, pre-prepare re-sends, fetched batches): at
    ///   most `AMP_STREAM * stream + AMP_AVG * avg`: a peer that claims to lack every batch
    ///   cannot be told from an honest replica cut off from the primary, so it may draw the
    ///   committed stream a bounded number of times;
    /// - state transfer data: at most `AMP_STREAM * (stream + largest_stored) + AMP_AVG * avg`:
    ///   a lagging peer may fetch a whole state and what changed since, a bounded number of
    ///   times;
    /// - relayed client requests: at most `AMP_STREAM * client_stream + AMP_AVG * avg`: a
    ///   backup relays what clients send it to the primary, again at each new view while the
    ///   requests wait, whatever the primary does with them;
    /// - everything else: at most `AMP_AVG * avg + AMP_INPUT * bytes[b][h]`. A Byzantine
    ///   replica thus gets at most about what an honest peer gets, plus a bounded multiple of
    ///   what it sent: asking cheaply for expensive answers does not pay.
    ///
    /// Returns the largest ratio of sent to allowed, in thousandths.
    pub fn amplification(&mut self, at_ms: u64, honest: &[bool], t: Traffic<'_>) -> u64 {
        let n = honest.len();
        let cell = |m: &[Vec<u64>], a: usize, b: usize| {
            m.get(a).and_then(|r| r.get(b)).copied().unwrap_or(0)
        };
        let c = t.classes;
        let other = |a: usize, b: usize| {
            cell(t.bytes, a, b)
                .saturating_sub(cell(&c.batch, a, b))
                .saturating_sub(cell(&c.state, a, b))
                .saturating_sub(cell(&c.forward, a, b))
        };
        let mut worst = 0u64;
        for h in (0..n).filter(|h| honest[*h]) {
            let peers: Vec<usize> = (0..n).filter(|p| *p != h && honest[*p]).collect();
            let k = peers.len().max(1) as u64;
            let avg_of = |f: &dyn Fn(usize) -> u64| peers.iter().map(|p| f(*p)).sum::<u64>() / k;
            let avg = avg_of(&|p| other(h, p));
            let avg_batch = avg_of(&|p| cell(&c.batch, h, p));
            let avg_state = avg_of(&|p| cell(&c.state, h, p));
            let avg_fwd = avg_of(&|p| cell(&c.forward, h, p));
            let whole = t.stream.saturating_add(t.largest_stored);
            for b in (0..n).filter(|b| !honest[*b]) {
                let input = cell(t.bytes, b, h);
                let parts = [
                    (
                        other(h, b),
                        AMP_AVG
                            .saturating_mul(avg)
                            .saturating_add(AMP_INPUT.saturating_mul(input)),
                        format!(
                            "(votes and the rest): more than {AMP_AVG} x {avg} (average to an \
                             honest peer) + {AMP_INPUT} x {input} (what it received from it)"
                        ),
                    ),
                    (
                        cell(&c.batch, h, b),
                        AMP_STREAM
                            .saturating_mul(t.stream)
                            .saturating_add(AMP_AVG.saturating_mul(avg_batch)),
                        format!(
                            "of batch-carrying answers: more than {AMP_STREAM} x {} (the \
                             committed batch stream) + {AMP_AVG} x {avg_batch} (average to an \
                             honest peer)",
                            t.stream
                        ),
                    ),
                    (
                        cell(&c.state, h, b),
                        AMP_STREAM
                            .saturating_mul(whole)
                            .saturating_add(AMP_AVG.saturating_mul(avg_state)),
                        format!(
                            "of state transfer data: more than {AMP_STREAM} x {whole} (the \
                             committed batch stream and the largest stored state) + {AMP_AVG} \
                             x {avg_state} (average to an honest peer)"
                        ),
                    ),
                    (
                        cell(&c.forward, h, b),
                        AMP_STREAM
                            .saturating_mul(t.client_stream)
                            .saturating_add(AMP_AVG.saturating_mul(avg_fwd)),
                        format!(
                            "of relayed client requests: more than {AMP_STREAM} x {} (the \
                             client stream) + {AMP_AVG} x {avg_fwd} (average to an honest peer)",
                            t.client_stream
                        ),
                    ),
                ];
                for (sent, allowed, why) in parts {
                    let allowed = allowed.saturating_add(AMP_SLACK_BYTES);
                    worst = worst.max(sent.saturating_mul(1000) / allowed.max(1));
                    if sent > allowed {
                        self.violate(
                            at_ms,
                            Some(h as NodeId),
                            ViolationKind::Amplification,
                            format!(
                                "replica {h} sent Byzantine replica {b} {sent} bytes {why} + \
                                 {AMP_SLACK_BYTES}"
                            ),
                        );
                    }
                }
            }
        }
        worst
    }

    /// Total length of the judged windows (after unplanned outages were removed), ms.
    pub fn judged_ms(&self) -> u64 {
        self.stall_windows.iter().map(|(a, b)| b - a).sum()
    }

    /// The longest judged fault-phase stretch without a newly committed batch, ms.
    pub fn max_stall_ms(&self) -> u64 {
        self.max_stall_ms
    }

    /// Judges the stretch from the last commit to `end_ms`, piece by judged window.
    fn close_stall(&mut self, end_ms: u64) {
        let start = self.last_commit_ms;
        let pieces: Vec<(u64, u64)> = self
            .stall_windows
            .iter()
            .map(|(a, b)| (start.max(*a), end_ms.min(*b)))
            .filter(|(a, b)| a < b)
            .collect();
        for (a, b) in pieces {
            let len = b - a;
            self.max_stall_ms = self.max_stall_ms.max(len);
            if self.stall_bound_ms > 0 && len > self.stall_bound_ms {
                self.violate(
                    b,
                    None,
                    ViolationKind::FaultPhaseStall,
                    format!(
                        "no batch committed from {a} ms to {b} ms ({len} ms > bound {} ms) while \
                         2f+1 honest replicas were up and connected",
                        self.stall_bound_ms
                    ),
                );
            }
        }
    }

    /// Ends the fault phase at `at_ms`: the stretch since the last commit is judged.
    pub fn end_fault_phase(&mut self, at_ms: u64) {
        if self.heal_seq.is_none() {
            self.close_stall(at_ms);
            self.last_commit_ms = at_ms;
        }
    }

    /// Measures the lag of a batch's agreed time against the slowest honest clock when the
    /// batch `lag_seqs` below it was first executed, rather than when it executes itself: a
    /// batch is proposed only after that one executed (for the replica, `max_in_flight + 1`), and
    /// its time is the proposal's, however long the batch then waits for a quorum.
    /// The first `lag_seqs` batches are measured from `start_min_honest_ms`, the slowest honest
    /// clock at the start of the run.
    pub fn with_time_lag_seqs(mut self, lag_seqs: u64, start_min_honest_ms: Millis) -> Self {
        self.lag_seqs = lag_seqs;
        self.start_min_honest_ms = start_min_honest_ms;
        self
    }

    fn violate(&mut self, at_ms: u64, node: Option<NodeId>, kind: ViolationKind, detail: String) {
        tracing::warn!(at_ms, ?node, ?kind, %detail, "invariant violated");
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation {
                at_ms,
                node,
                kind,
                detail,
            });
        } else {
            self.dropped += 1;
        }
    }

    /// Records a replica restart: its executed-sequence history starts afresh (it may re-execute
    /// from its persisted state).
    pub fn restarted(&mut self, node: NodeId) {
        if let Some(s) = self.last_seq.get_mut(node as usize) {
            *s = None;
        }
    }

    /// Checks one `Executed` observation from `node` at simulated time `at_ms`.
    pub fn executed(&mut self, at_ms: u64, node: NodeId, e: &Executed, bounds: TimeBounds) {
        let i = node as usize;
        if !self.honest.get(i).copied().unwrap_or(false) {
            return;
        }
        if let Some(prev) = self.last_seq[i]
            && e.seq <= prev
        {
            self.violate(
                at_ms,
                Some(node),
                ViolationKind::SeqRegression,
                format!("executed seq {} after seq {}", e.seq, prev),
            );
        }
        self.last_seq[i] = Some(e.seq);
        if let Some(h) = self.heal_seq
            && e.seq > h
        {
            self.progressed[i] = true;
        }
        if e.seq < self.pruned_below {
            return;
        }
        match self.agreed.get(&e.seq).cloned() {
            Some(a) => {
                if a.batch != e.batch_digest {
                    self.violate(
                        at_ms,
                        Some(node),
                        ViolationKind::Agreement,
                        format!(
                            "seq {}: batch {} but replica {} executed {}",
                            e.seq,
                            short_hex(&e.batch_digest),
                            a.by,
                            short_hex(&a.batch)
                        ),
                    );
                } else if a.state != e.state_digest {
                    self.violate(
                        at_ms,
                        Some(node),
                        ViolationKind::StateDivergence,
                        format!(
                            "seq {}: state {} but replica {} has {}",
                            e.seq,
                            short_hex(&e.state_digest),
                            a.by,
                            short_hex(&a.state)
                        ),
                    );
                }
            }
            None => {
                if self.heal_seq.is_none() {
                    self.close_stall(at_ms);
                    self.last_commit_ms = at_ms;
                }
                self.first_execution(at_ms, node, e, bounds);
                self.agreed.insert(
                    e.seq,
                    Agreed {
                        by: node,
                        batch: e.batch_digest,
                        state: e.state_digest,
                        time_ms: e.agreed_time_ms,
                        min_honest_ms: bounds.min_honest_ms,
                    },
                );
                self.prune_agreed();
            }
        }
    }

    /// Drops the agreement entries more than [`AGREED_KEEP_SEQS`] below the slowest honest
    /// replica's last executed seq, in steps of that many (amortised O(1) per seq).
    fn prune_agreed(&mut self) {
        let slowest = self
            .last_seq
            .iter()
            .zip(&self.honest)
            .filter(|(_, h)| **h)
            .filter_map(|(s, _)| *s)
            .min();
        let Some(floor) = slowest.map(|s| s.saturating_sub(AGREED_KEEP_SEQS)) else {
            return;
        };
        if floor >= self.pruned_below.saturating_add(AGREED_KEEP_SEQS) {
            self.agreed = self.agreed.split_off(&floor);
            self.pruned_below = floor;
        }
    }

    /// Entries the agreement table holds (bounded, see [`AGREED_KEEP_SEQS`]).
    pub fn agreed_len(&self) -> usize {
        self.agreed.len()
    }

    fn first_execution(&mut self, at_ms: u64, node: NodeId, e: &Executed, b: TimeBounds) {
        let Some(t) = e.agreed_time_ms else { return };
        // Monotonic along the log: compare with the nearest agreed neighbours on both sides.
        let before = self
            .agreed
            .range(..e.seq)
            .rev()
            .find_map(|(s, a)| a.time_ms.map(|x| (*s, x)));
        if let Some((s, x)) = before
            && t < x
        {
            self.violate(
                at_ms,
                Some(node),
                ViolationKind::TimeRegression,
                format!("seq {}: agreed time {} < {} at seq {}", e.seq, t, x, s),
            );
        }
        let after = self
            .agreed
            .range(e.seq + 1..)
            .find_map(|(s, a)| a.time_ms.map(|x| (*s, x)));
        if let Some((s, x)) = after
            && t > x
        {
            self.violate(
                at_ms,
                Some(node),
                ViolationKind::TimeRegression,
                format!(
                    "seq {}: agreed time {} > {} at later seq {}",
                    e.seq, t, x, s
                ),
            );
        }
        if self.check_time {
            let hi = b.max_honest_ms.saturating_add(self.ahead_slack_ms);
            // The slowest honest clock when the batch could have been proposed at the latest
            // (seqs first executed before this one have earlier readings).
            let reference = if self.lag_seqs == 0 {
                b.min_honest_ms
            } else {
                e.seq
                    .checked_sub(self.lag_seqs)
                    .and_then(|s| self.agreed.range(..=s).next_back())
                    .map_or(self.start_min_honest_ms, |(_, a)| a.min_honest_ms)
                    .min(b.min_honest_ms)
            };
            let lo = reference.saturating_sub(self.behind_slack_ms);
            if t > hi || t < lo {
                self.violate(
                    at_ms,
                    Some(node),
                    ViolationKind::TimeOutOfBounds,
                    format!(
                        "seq {}: agreed time {} outside honest bounds [{}, {}]",
                        e.seq, t, lo, hi
                    ),
                );
            }
        }
    }

    /// Marks the start of the liveness phase: progress now means a sequence number above the
    /// highest executed so far.
    pub fn heal(&mut self) {
        let h = self.agreed.keys().next_back().copied().unwrap_or(0);
        self.heal_seq = Some(h);
        self.progressed.iter_mut().for_each(|p| *p = false);
    }

    /// The highest sequence executed before the heal, once healed.
    pub fn heal_seq(&self) -> Option<u64> {
        self.heal_seq
    }

    /// Per replica: executed a batch above the heal sequence number since the heal.
    pub fn progressed(&self) -> &[bool] {
        &self.progressed
    }

    /// True when every honest replica has progressed since the heal.
    pub fn all_progressed(&self) -> bool {
        self.honest
            .iter()
            .zip(&self.progressed)
            .all(|(h, p)| !*h || *p)
    }

    /// Ends the liveness phase: every honest replica that did not progress is a violation.
    pub fn finish_liveness(&mut self, at_ms: u64) {
        let Some(h) = self.heal_seq else { return };
        for i in 0..self.honest.len() {
            if self.honest[i] && !self.progressed[i] {
                self.violate(
                    at_ms,
                    Some(i as NodeId),
                    ViolationKind::NoProgress,
                    format!("executed nothing above seq {h} after healing"),
                );
            }
        }
    }

    /// Records that honest `node`'s own invariant check failed.
    pub fn node_invariant(&mut self, at_ms: u64, node: NodeId, detail: String) {
        if self.honest.get(node as usize).copied().unwrap_or(false) {
            self.violate(at_ms, Some(node), ViolationKind::NodeInvariant, detail);
        }
    }

    /// Records that honest `node` failed to boot, restart or install a state transfer.
    pub fn node_failure(&mut self, at_ms: u64, node: NodeId, detail: String) {
        if self.honest.get(node as usize).copied().unwrap_or(false) {
            self.violate(at_ms, Some(node), ViolationKind::NodeFailure, detail);
        }
    }

    /// Records that a custom workload's oracle rejected a reply to `client`.
    pub fn workload(&mut self, at_ms: u64, client: u32, detail: String) {
        self.violate(
            at_ms,
            None,
            ViolationKind::Workload,
            format!("client {client}: {detail}"),
        );
    }

    /// Records that the run exhausted its event budget.
    pub fn event_limit(&mut self, at_ms: u64, limit: u64) {
        self.violate(
            at_ms,
            None,
            ViolationKind::EventLimit,
            format!("more than {limit} events"),
        );
    }

    /// Records a starved client request (see [`super::starvation::StarvationWatch`]).
    pub fn starvation(&mut self, at_ms: u64, o: super::starvation::Overdue) {
        let (client, number, sent_ms, reached) = o;
        self.violate(
            at_ms,
            None,
            ViolationKind::Starvation,
            format!(
                "client {client} request {number} sent at {sent_ms} ms reached {reached} honest \
                 replicas and got no honest reply within {} ms",
                super::starvation::STARVATION_BOUND_MS
            ),
        );
    }

    /// The violations found so far (at most 64 in detail).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Violations found beyond the detailed ones.
    pub fn dropped_violations(&self) -> u64 {
        self.dropped
    }

    /// True when no honest replicas disagreed on any batch or state digest.
    pub fn honest_agree(&self) -> bool {
        !self.violations.iter().any(|v| {
            matches!(
                v.kind,
                ViolationKind::Agreement | ViolationKind::StateDivergence
            )
        })
    }
}

/// The first 8 bytes of a digest in hex, for messages.
pub fn short_hex(d: &[u8; 32]) -> String {
    hex(&d[..8])
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(seq: u64, batch: u8, state: u8, t: Option<Millis>) -> Executed {
        Executed {
            seq,
            batch_digest: [batch; 32],
            agreed_time_ms: t,
            state_digest: [state; 32],
            requests: 1,
            batch_bytes: 0,
            ticks: vec![],
            fires: vec![],
        }
    }

    const B: TimeBounds = TimeBounds {
        min_honest_ms: 1000,
        max_honest_ms: 2000,
    };

    fn checker() -> Checker {
        Checker::new(vec![true, true, true, false], true, 100, 100)
    }

    #[test]
    fn agreement_and_state_divergence_are_caught() {
        let mut c = checker();
        c.executed(0, 0, &ex(1, 1, 1, None), B);
        c.executed(0, 1, &ex(1, 1, 1, None), B);
        assert!(c.violations().is_empty());
        c.executed(0, 2, &ex(1, 2, 1, None), B);
        assert_eq!(c.violations()[0].kind, ViolationKind::Agreement);
        c.executed(0, 1, &ex(2, 3, 3, None), B);
        c.executed(0, 2, &ex(2, 3, 4, None), B);
        assert_eq!(c.violations()[1].kind, ViolationKind::StateDivergence);
        assert!(!c.honest_agree());
    }

    #[test]
    fn the_agreement_table_is_bounded_and_still_catches_divergence() {
        let mut c = checker();
        let last = 3 * AGREED_KEEP_SEQS;
        for seq in 1..=last {
            for r in 0..3 {
                c.executed(0, r, &ex(seq, 1, 1, None), B);
            }
        }
        assert!(c.violations().is_empty());
        assert!(c.agreed_len() as u64 <= 2 * AGREED_KEEP_SEQS + 1);
        // A lagging honest replica holds pruning back: its seqs stay comparable.
        for seq in last + 1..=last + 2 * AGREED_KEEP_SEQS {
            c.executed(0, 0, &ex(seq, 1, 1, None), B);
            c.executed(0, 1, &ex(seq, 1, 1, None), B);
        }
        c.executed(0, 2, &ex(last + 1, 1, 7, None), B);
        assert_eq!(c.violations()[0].kind, ViolationKind::StateDivergence);
    }

    #[test]
    fn byzantine_observations_are_ignored() {
        let mut c = checker();
        c.executed(0, 0, &ex(1, 1, 1, None), B);
        c.executed(0, 3, &ex(1, 9, 9, None), B);
        assert!(c.violations().is_empty());
    }

    #[test]
    fn seq_regression_resets_on_restart() {
        let mut c = checker();
        c.executed(0, 0, &ex(2, 1, 1, None), B);
        c.executed(0, 0, &ex(2, 1, 1, None), B);
        assert_eq!(c.violations()[0].kind, ViolationKind::SeqRegression);
        c.restarted(0);
        c.executed(0, 0, &ex(2, 1, 1, None), B);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn time_regression_and_bounds() {
        let mut c = checker();
        c.executed(0, 0, &ex(1, 1, 1, Some(1500)), B);
        c.executed(0, 0, &ex(2, 2, 2, Some(1400)), B);
        assert_eq!(c.violations()[0].kind, ViolationKind::TimeRegression);
        c.executed(0, 0, &ex(3, 3, 3, Some(2101)), B);
        assert_eq!(c.violations()[1].kind, ViolationKind::TimeOutOfBounds);
        assert_eq!(c.violations().len(), 2);
        // Exactly at the slack edge is fine.
        let mut c = checker();
        c.executed(0, 0, &ex(1, 1, 1, Some(2100)), B);
        c.executed(0, 0, &ex(2, 2, 2, Some(2100)), B);
        assert!(c.violations().is_empty());
    }

    /// Regression (FaultPhaseStall false positive, `sim-bft run --seed 5 --replicas 4 --ledger
    /// kv --duration 20000ms --clients 2 --request-interval 100ms --drop-rate 0.05
    /// --byzantine-ids 1 --byzantine-kind repropose --crash-at-view-change 0.5 --crash 2`): the
    /// judged windows came from the planned crashes only, so the time honest replicas spent
    /// down after crashes at protocol points counted as a stall "while 2f+1 honest replicas
    /// were up".
    #[test]
    fn unplanned_outages_are_not_judged() {
        let b = TimeBounds {
            min_honest_ms: 0,
            max_honest_ms: 0,
        };
        let mut c = Checker::new(vec![true; 4], false, 0, 0);
        c.judge_stalls(vec![(0, 20_000)], 3_000);
        c.executed(1_000, 0, &ex(1, 1, 1, None), b);
        // Down from 2_000 to 5_000 and from 6_000 to 8_000: the longest judged piece is
        // 8_000 .. 10_500 (2.5 s), so no violation (the old judgement saw 9.5 s).
        c.unjudge(2_000, 5_000);
        c.unjudge(6_000, 8_000);
        c.unjudge(9_000, 9_000);
        c.executed(10_500, 0, &ex(2, 2, 2, None), b);
        assert_eq!(c.max_stall_ms(), 2_500);
        assert!(c.violations().is_empty(), "{:?}", c.violations());
        // The stretches before and after an outage still count: 10_500 .. 14_000 (3.5 s) and
        // 16_000 .. 20_000 (4 s), both above the bound.
        c.unjudge(14_000, 16_000);
        c.end_fault_phase(20_000);
        assert_eq!(c.max_stall_ms(), 4_000);
        assert_eq!(c.violations().len(), 2);
    }

    /// The amplification bound: a Byzantine peer gets at most twice what an average honest
    /// peer gets, plus four times what it sent, plus 1 MiB.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn amplification_is_judged_against_honest_peers_and_input() {
        let honest = vec![true, true, true, false];
        let mb = 1u64 << 20;
        let mut bytes = vec![vec![0u64; 4]; 4];
        for h in 0..3 {
            for p in 0..4 {
                if p != h {
                    bytes[h][p] = 10 * mb;
                }
            }
        }
        for h in 0..3 {
            bytes[3][h] = mb;
        }
        let none = ClassBytes::new(4);
        let t = |bytes: &[Vec<u64>], classes: &ClassBytes, stream, client_stream, stored| {
            let (bytes, classes) = (bytes.to_vec(), classes.clone());
            move |c: &mut Checker| {
                c.amplification(
                    0,
                    &[true, true, true, false],
                    Traffic {
                        bytes: &bytes,
                        classes: &classes,
                        stream,
                        client_stream,
                        largest_stored: stored,
                    },
                )
            }
        };
        let mut c = Checker::new(honest.clone(), false, 0, 0);
        // 10 MiB to the Byzantine peer, allowed 2 x 10 + 4 x 1 + 1 = 25 MiB: 400 permille.
        assert_eq!(t(&bytes, &none, 0, 0, 0)(&mut c), 400);
        assert!(c.violations().is_empty());
        bytes[0][3] = 26 * mb;
        assert_eq!(t(&bytes, &none, 0, 0, 0)(&mut c), 1040);
        assert_eq!(c.violations().len(), 1);
        assert_eq!(c.violations()[0].kind, ViolationKind::Amplification);
        // The same 26 MiB, 16 of them batch-carrying answers: the rest (10) is judged as
        // above (400), the answers against the stream: 16 of 3 x 10 + 1 = 31 MiB, 516.
        let mut c = Checker::new(honest.clone(), false, 0, 0);
        let mut classes = none.clone();
        classes.batch[0][3] = 16 * mb;
        assert_eq!(t(&bytes, &classes, 10 * mb, 0, 0)(&mut c), 516);
        assert!(c.violations().is_empty());
        // Uncapped answers (six times the stream) are caught.
        classes.batch[0][3] = 60 * mb;
        bytes[0][3] = 70 * mb;
        assert!(t(&bytes, &classes, 10 * mb, 0, 0)(&mut c) > 1000);
        assert_eq!(c.violations().len(), 1);
        // State data: against 3 x (stream + largest stored state) + 1: 40 MiB of state with a
        // 10 MiB stream and an 8 MiB state is 40 of 55 MiB (727); 60 MiB is caught.
        let mut c = Checker::new(honest.clone(), false, 0, 0);
        let mut classes = none.clone();
        bytes[0][3] = 50 * mb;
        classes.state[0][3] = 40 * mb;
        assert_eq!(t(&bytes, &classes, 10 * mb, 0, 8 * mb)(&mut c), 727);
        assert!(c.violations().is_empty());
        classes.state[0][3] = 60 * mb;
        bytes[0][3] = 70 * mb;
        assert!(t(&bytes, &classes, 10 * mb, 0, 8 * mb)(&mut c) > 1000);
        assert_eq!(c.violations().len(), 1);
        // Relayed requests: against 3 x the client stream + 1: 20 of 31 MiB (645) with a
        // 10 MiB client stream; with none, caught.
        let mut c = Checker::new(honest.clone(), false, 0, 0);
        let mut classes = none.clone();
        bytes[0][3] = 30 * mb;
        classes.forward[0][3] = 20 * mb;
        assert_eq!(t(&bytes, &classes, 0, 10 * mb, 0)(&mut c), 645);
        assert!(c.violations().is_empty());
        assert!(t(&bytes, &classes, 0, 0, 0)(&mut c) > 1000);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn fault_phase_stalls_are_judged_only_inside_windows() {
        let mut c = Checker::new(vec![true; 4], false, 0, 0);
        c.judge_stalls(vec![(0, 1_000), (5_000, 20_000)], 3_000);
        let b = TimeBounds {
            min_honest_ms: 0,
            max_honest_ms: 0,
        };
        c.executed(500, 0, &ex(1, 1, 1, None), b);
        // 500 .. 9_000: judged pieces 500..1_000 and 5_000..9_000 (4 s > 3 s).
        c.executed(9_000, 0, &ex(2, 2, 2, None), b);
        assert_eq!(c.max_stall_ms(), 4_000);
        assert_eq!(c.violations().len(), 1);
        assert_eq!(c.violations()[0].kind, ViolationKind::FaultPhaseStall);
        // A re-execution of a known seq is no commit; the phase ends at 11_000 (2 s): fine.
        c.executed(10_000, 1, &ex(2, 2, 2, None), b);
        c.end_fault_phase(11_000);
        assert_eq!(c.violations().len(), 1);
        // Stalls after the heal are the liveness phase's business.
        c.heal();
        c.executed(60_000, 0, &ex(3, 3, 3, None), b);
        assert_eq!(c.max_stall_ms(), 4_000);
        assert_eq!(c.violations().len(), 1);
    }

    #[test]
    fn liveness_requires_every_honest_replica() {
        let mut c = checker();
        c.executed(0, 0, &ex(5, 1, 1, None), B);
        c.heal();
        assert_eq!(c.heal_seq(), Some(5));
        c.executed(0, 0, &ex(6, 2, 2, None), B);
        c.executed(0, 1, &ex(6, 2, 2, None), B);
        assert!(!c.all_progressed());
        c.finish_liveness(10);
        assert_eq!(c.violations().len(), 1);
        assert_eq!(c.violations()[0].node, Some(2));
        assert_eq!(c.violations()[0].kind, ViolationKind::NoProgress);
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x0f, 0xa0]), "0fa0");
    }
}
