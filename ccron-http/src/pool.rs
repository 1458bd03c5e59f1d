//! The worker pool's decision logic: a pure, sans-IO state machine.
//!
//! [`Pool`] decides, for each delivery the ccron [`Consumer`](ccron::outbox::Consumer) hands
//! out, which worker gets it ([`Assignment`]: sticky by key, least-loaded, or seeded random),
//! keeps each worker's health (failures and timeouts mark it down for an exponential back-off;
//! a probe after the back-off brings it back), fails a retried record over to another worker,
//! and applies each handler's retry limit and time-to-run ([`HandlerPolicy`]): when either runs
//! out the verdict is [`Verdict::GiveUp`], and the shell dead-letters the record through the
//! consumer.
//!
//! Time is an argument (`now_ms`), randomness is a SplitMix64 stream from
//! [`PoolConfig::seed`]: the same calls give the same decisions, byte for byte. Nothing here
//! reads a clock, spawns or does I/O; [`crate::deliver`] is the thin shell around it.
//!
//! Bounds: at most [`PoolConfig::max_in_flight_per_worker`] attempts per worker, and the
//! per-record tracking holds only records with an attempt made and no verdict yet (at most
//! [`PoolConfig::max_tracked`]; the consumer's search-ahead window keeps it far below).

use std::collections::BTreeMap;
use std::fmt;

use ccron::TimeMs;
use ccron::outbox::OccurrenceId;

/// A worker's position in the pool (index into the configured worker list).
pub type WorkerId = usize;

/// How a handler's records are assigned to workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// The same key goes to the same worker while that worker is healthy and has room
    /// (rendezvous hashing over the eligible workers: a worker going down moves only its own
    /// keys).
    Sticky(KeyOf),
    /// The eligible worker with the fewest attempts in flight (ties: round robin).
    LeastLoaded,
    /// A uniformly random eligible worker, from the pool's seeded generator.
    Random,
}

/// What a sticky assignment keys on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOf {
    /// The record's handler: all of a handler's records go to one worker.
    Handler,
    /// The record's payload (e.g. an order or account id): one entity, one worker.
    Payload,
}

/// Per-handler delivery policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerPolicy {
    /// How records are assigned.
    pub assignment: Assignment,
    /// Real attempts (requests that reached a worker or timed out) before the record is given
    /// up (at least 1).
    pub max_attempts: u32,
    /// Time from the first attempt after which the record is given up instead of retried
    /// (at least 1).
    pub time_to_run_ms: TimeMs,
    /// One attempt's time limit: no answer by then counts as a timeout (at least 1).
    pub attempt_timeout_ms: TimeMs,
}

impl Default for HandlerPolicy {
    /// Least-loaded, 5 attempts, 60 s to run, 2 s per attempt.
    fn default() -> Self {
        Self {
            assignment: Assignment::LeastLoaded,
            max_attempts: 5,
            time_to_run_ms: 60_000,
            attempt_timeout_ms: 2_000,
        }
    }
}

/// The health model's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Consecutive failures (5xx, 408, 429, timeouts, connection errors) that mark a worker
    /// down (at least 1).
    pub failures_to_down: u32,
    /// First down period (at least 1).
    pub base_down_ms: TimeMs,
    /// Longest down period (at least `base_down_ms`); each failed probe doubles the period.
    pub max_down_ms: TimeMs,
    /// A probe with no answer by then fails (at least 1).
    pub probe_timeout_ms: TimeMs,
}

impl Default for HealthConfig {
    /// Down after 3 consecutive failures, for 200 ms doubling up to 10 s; 1 s probe timeout.
    fn default() -> Self {
        Self {
            failures_to_down: 3,
            base_down_ms: 200,
            max_down_ms: 10_000,
            probe_timeout_ms: 1_000,
        }
    }
}

/// Configuration of a [`Pool`]. Validated by [`Pool::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of workers (at least 1).
    pub workers: usize,
    /// Most attempts in flight at one worker (at least 1).
    pub max_in_flight_per_worker: usize,
    /// Most records tracked (attempted, no verdict yet) at once (at least 1).
    pub max_tracked: usize,
    /// Health model.
    pub health: HealthConfig,
    /// Policy of handlers not in `handlers`.
    pub default_policy: HandlerPolicy,
    /// Per-handler policies.
    pub handlers: BTreeMap<String, HandlerPolicy>,
    /// Seed of the random assignment.
    pub seed: u64,
}

impl PoolConfig {
    /// `workers` workers, 8 in flight each, default health and policy, seed 0.
    pub fn new(workers: usize) -> Self {
        Self {
            workers,
            max_in_flight_per_worker: 8,
            max_tracked: 4_096,
            health: HealthConfig::default(),
            default_policy: HandlerPolicy::default(),
            handlers: BTreeMap::new(),
            seed: 0,
        }
    }

    /// The policy of `handler`.
    pub fn policy(&self, handler: &str) -> &HandlerPolicy {
        self.handlers.get(handler).unwrap_or(&self.default_policy)
    }

    /// Checks the documented constraints.
    pub fn validate(&self) -> Result<(), PoolConfigError> {
        let bad = |what: &'static str| Err(PoolConfigError(what));
        if self.workers == 0 {
            return bad("workers must be at least 1");
        }
        if self.max_in_flight_per_worker == 0 {
            return bad("max_in_flight_per_worker must be at least 1");
        }
        if self.max_tracked == 0 {
            return bad("max_tracked must be at least 1");
        }
        let h = self.health;
        if h.failures_to_down == 0 || h.base_down_ms < 1 || h.probe_timeout_ms < 1 {
            return bad("health: failures_to_down, base_down_ms and probe_timeout_ms must be >= 1");
        }
        if h.max_down_ms < h.base_down_ms {
            return bad("health: max_down_ms is below base_down_ms");
        }
        for p in std::iter::once(&self.default_policy).chain(self.handlers.values()) {
            if p.max_attempts == 0 || p.time_to_run_ms < 1 || p.attempt_timeout_ms < 1 {
                return bad(
                    "handler policy: max_attempts, time_to_run_ms and attempt_timeout_ms must be >= 1",
                );
            }
        }
        Ok(())
    }
}

/// Why a [`PoolConfig`] was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pool configuration: {0}")]
pub struct PoolConfigError(pub &'static str);

/// A worker's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Takes attempts; `failures` consecutive failures so far.
    Up {
        /// Consecutive failures since the last success.
        failures: u32,
    },
    /// Takes nothing until `until_ms`, then a probe is due.
    Down {
        /// End of the back-off.
        until_ms: TimeMs,
        /// How many down periods in a row (the back-off doubles with each).
        downs: u32,
    },
    /// A probe is in flight.
    Probing {
        /// Down periods in a row so far.
        downs: u32,
    },
}

/// How one attempt ended, as the shell saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// 2xx: the effect is done; the worker's answer body.
    Done(Vec<u8>),
    /// 4xx other than 408 and 429: the worker refuses this record for good (not its health's
    /// fault); the record is given up at once.
    Rejected(String),
    /// 408, 429 or 5xx: the worker could not do it now.
    Failed(String),
    /// No answer within the attempt timeout.
    Timeout,
    /// Connection refused, reset, or a malformed response.
    Transport(String),
    /// 429 with a wait (`Retry-After`): the worker is alive and asks for a pause. Retried
    /// (elsewhere) like a failure, but not counted against its health: the shell pauses the
    /// worker until then ([`Pool::pause`]).
    Throttled(String),
}

impl AttemptOutcome {
    /// Whether this outcome counts against the worker's health.
    pub fn is_worker_fault(&self) -> bool {
        matches!(self, Self::Failed(_) | Self::Timeout | Self::Transport(_))
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Done(b) => write!(f, "done ({} bytes)", b.len()),
            Self::Rejected(r) => write!(f, "rejected: {r}"),
            Self::Failed(r) => write!(f, "failed: {r}"),
            Self::Timeout => f.write_str("timed out"),
            Self::Transport(r) => write!(f, "transport error: {r}"),
            Self::Throttled(r) => write!(f, "throttled: {r}"),
        }
    }
}

/// What to do with a record after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Done: acknowledge to the consumer and send the answer back.
    Done(Vec<u8>),
    /// Let the consumer schedule a retry (it fails over to another worker when one is up).
    Retry(String),
    /// Give the record up: dead letter with this reason.
    GiveUp(String),
}

/// Why [`Pool::assign`] did not hand out a worker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssignError {
    /// No worker is up with room: report the attempt failed; the consumer retries later (not
    /// counted against the handler's retry limit, but the time-to-run runs on).
    #[error("no healthy worker with room")]
    NoWorker,
    /// The record's time-to-run ran out: give it up.
    #[error("time-to-run of {time_to_run_ms} ms ran out after {attempts} attempts")]
    TimeToRun {
        /// The handler's time-to-run.
        time_to_run_ms: TimeMs,
        /// Real attempts made.
        attempts: u32,
    },
    /// Too many records tracked ([`PoolConfig::max_tracked`]): try later.
    #[error("pool tracks {0} records already")]
    TooManyTracked(usize),
    /// The record is already in flight at a worker (the consumer re-delivered it while the
    /// shell still waits for the earlier attempt): try later.
    #[error("record already in flight")]
    AlreadyInFlight,
}

/// Counters of a [`Pool`] (observation only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Attempts assigned to a worker.
    pub assigned: u64,
    /// Assignments that went to another worker than the record's previous attempt.
    pub failovers: u64,
    /// Attempts done.
    pub done: u64,
    /// Attempts that failed (worker faults).
    pub failed: u64,
    /// Attempts rejected by the worker.
    pub rejected: u64,
    /// Records given up by a verdict (retry limit, time-to-run, rejection).
    pub given_up: u64,
    /// Assignments refused because no worker could take them.
    pub no_worker: u64,
    /// Times a worker was marked down.
    pub marked_down: u64,
    /// Probes that brought a worker back.
    pub probes_ok: u64,
    /// Probes that failed.
    pub probes_failed: u64,
    /// Pauses taken from a refusal's `Retry-After` ([`Pool::pause`]).
    pub paused: u64,
}

#[derive(Debug, Clone, Copy)]
struct WorkerState {
    health: Health,
    in_flight: usize,
    /// Takes no attempt before this time (a refusal's `Retry-After`); 0: not paused.
    paused_until: TimeMs,
}

#[derive(Debug, Clone, Copy)]
struct Track {
    first_ms: TimeMs,
    attempts: u32,
    /// The worker of the attempt in flight, if any.
    in_flight_at: Option<WorkerId>,
    /// The worker of the last finished attempt.
    last_worker: Option<WorkerId>,
}

/// The pool's decision state machine (see the module documentation).
#[derive(Debug, Clone)]
pub struct Pool {
    cfg: PoolConfig,
    workers: Vec<WorkerState>,
    tracks: BTreeMap<u64, Track>,
    rng: u64,
    round_robin: usize,
    stats: PoolStats,
}

/// SplitMix64: the pool's only source of randomness, a pure function of the seed and the
/// number of draws.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over `key` then the worker id, finished with SplitMix64: the rendezvous weight.
fn weight(key: &[u8], worker: WorkerId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.iter().chain((worker as u64).to_le_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    splitmix(&mut h)
}

impl Pool {
    /// A pool with every worker up.
    ///
    /// # Errors
    /// [`PoolConfigError`] when `cfg` breaks a documented constraint.
    pub fn new(cfg: PoolConfig) -> Result<Self, PoolConfigError> {
        cfg.validate()?;
        let workers = vec![
            WorkerState {
                health: Health::Up { failures: 0 },
                in_flight: 0,
                paused_until: 0,
            };
            cfg.workers
        ];
        Ok(Self {
            rng: cfg.seed,
            cfg,
            workers,
            tracks: BTreeMap::new(),
            round_robin: 0,
            stats: PoolStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Worker `w`'s health (`None` for an unknown worker).
    pub fn health(&self, w: WorkerId) -> Option<Health> {
        self.workers.get(w).map(|s| s.health)
    }

    /// Attempts in flight at worker `w`.
    pub fn in_flight(&self, w: WorkerId) -> usize {
        self.workers.get(w).map_or(0, |s| s.in_flight)
    }

    /// Records tracked (attempted, no verdict yet).
    pub fn tracked(&self) -> usize {
        self.tracks.len()
    }

    /// Chooses the worker for the next attempt of record `index` (occurrence `id`, `handler`,
    /// `payload`) at `now_ms`, and counts the attempt in flight there. A retried record fails
    /// over: its previous worker is avoided while another is eligible.
    ///
    /// # Errors
    /// [`AssignError`]: no eligible worker, the time-to-run ran out (give the record up), or a
    /// bound.
    pub fn assign(
        &mut self,
        index: u64,
        id: &OccurrenceId,
        handler: &str,
        payload: &[u8],
        now_ms: TimeMs,
    ) -> Result<WorkerId, AssignError> {
        let policy = *self.cfg.policy(handler);
        let track = match self.tracks.get(&index) {
            Some(t) => *t,
            None => {
                if self.tracks.len() >= self.cfg.max_tracked {
                    return Err(AssignError::TooManyTracked(self.tracks.len()));
                }
                Track {
                    first_ms: now_ms,
                    attempts: 0,
                    in_flight_at: None,
                    last_worker: None,
                }
            }
        };
        if track.in_flight_at.is_some() {
            return Err(AssignError::AlreadyInFlight);
        }
        if now_ms.saturating_sub(track.first_ms) >= policy.time_to_run_ms {
            return Err(AssignError::TimeToRun {
                time_to_run_ms: policy.time_to_run_ms,
                attempts: track.attempts,
            });
        }
        let eligible: Vec<WorkerId> = (0..self.workers.len())
            .filter(|&w| {
                let s = &self.workers[w];
                matches!(s.health, Health::Up { .. })
                    && s.in_flight < self.cfg.max_in_flight_per_worker
                    && s.paused_until <= now_ms
            })
            .collect();
        // Fail over: avoid the previous worker when another one is eligible.
        let candidates: Vec<WorkerId> = match track.last_worker {
            Some(prev) if eligible.len() > 1 => {
                eligible.iter().copied().filter(|&w| w != prev).collect()
            }
            _ => eligible,
        };
        if candidates.is_empty() {
            self.stats.no_worker += 1;
            // Remember the first attempt time so the time-to-run covers waiting for workers.
            self.tracks.insert(index, track);
            return Err(AssignError::NoWorker);
        }
        let chosen = match policy.assignment {
            Assignment::Sticky(key_of) => {
                let key = match key_of {
                    KeyOf::Handler => handler.as_bytes(),
                    KeyOf::Payload => payload,
                };
                // Highest weight wins; ties (astronomically rare) go to the lowest id.
                candidates
                    .iter()
                    .copied()
                    .max_by_key(|&w| (weight(key, w), std::cmp::Reverse(w)))
            }
            Assignment::LeastLoaded => {
                let least = candidates
                    .iter()
                    .map(|&w| self.workers[w].in_flight)
                    .min()
                    .unwrap_or(0);
                let tied: Vec<WorkerId> = candidates
                    .iter()
                    .copied()
                    .filter(|&w| self.workers[w].in_flight == least)
                    .collect();
                let pick = tied
                    .iter()
                    .copied()
                    .find(|&w| w >= self.round_robin)
                    .or_else(|| tied.first().copied());
                if let Some(w) = pick {
                    self.round_robin = (w + 1) % self.workers.len();
                }
                pick
            }
            Assignment::Random => {
                let r = splitmix(&mut self.rng);
                let k = (r % candidates.len() as u64) as usize;
                candidates.get(k).copied()
            }
        };
        let Some(w) = chosen else {
            return Err(AssignError::NoWorker);
        };
        if track.last_worker.is_some_and(|prev| prev != w) {
            self.stats.failovers += 1;
        }
        self.workers[w].in_flight += 1;
        self.stats.assigned += 1;
        self.tracks.insert(
            index,
            Track {
                attempts: track.attempts.saturating_add(1),
                in_flight_at: Some(w),
                ..track
            },
        );
        tracing::trace!(index, %id, worker = w, "assigned");
        Ok(w)
    }

    /// Records how the attempt of record `index` at worker `w` ended and decides: done, retry,
    /// or give up (the handler's retry limit or time-to-run ran out, or the worker rejected the
    /// record). Updates the worker's health. An outcome for an attempt the pool does not have
    /// in flight at `w` changes nothing and answers `Retry` (the consumer ignores it as stale).
    pub fn on_outcome(
        &mut self,
        index: u64,
        handler: &str,
        w: WorkerId,
        outcome: AttemptOutcome,
        now_ms: TimeMs,
    ) -> Verdict {
        let policy = *self.cfg.policy(handler);
        let Some(track) = self.tracks.get(&index).copied() else {
            return Verdict::Retry("attempt not tracked".into());
        };
        if track.in_flight_at != Some(w) {
            return Verdict::Retry("attempt not in flight at this worker".into());
        }
        if let Some(s) = self.workers.get_mut(w) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
        // Health: a success or a rejection shows the worker is alive; a fault counts.
        if outcome.is_worker_fault() {
            self.worker_failed(w, now_ms);
        } else if matches!(outcome, AttemptOutcome::Throttled(_)) {
            // Alive, asking for a pause: neither a fault nor a success.
        } else if let Some(s) = self.workers.get_mut(w)
            && let Health::Up { failures } = &mut s.health
        {
            *failures = 0;
        }
        let verdict = match outcome {
            AttemptOutcome::Done(body) => {
                self.stats.done += 1;
                Verdict::Done(body)
            }
            AttemptOutcome::Rejected(reason) => {
                self.stats.rejected += 1;
                Verdict::GiveUp(format!("worker {w} rejected the record: {reason}"))
            }
            fault => {
                self.stats.failed += 1;
                let elapsed = now_ms.saturating_sub(track.first_ms);
                if track.attempts >= policy.max_attempts {
                    Verdict::GiveUp(format!(
                        "retry limit of {} attempts reached; last: {fault}",
                        policy.max_attempts
                    ))
                } else if elapsed >= policy.time_to_run_ms {
                    Verdict::GiveUp(format!(
                        "time-to-run of {} ms ran out after {} attempts; last: {fault}",
                        policy.time_to_run_ms, track.attempts
                    ))
                } else {
                    Verdict::Retry(format!("worker {w}: {fault}"))
                }
            }
        };
        match verdict {
            Verdict::Done(_) | Verdict::GiveUp(_) => {
                if matches!(verdict, Verdict::GiveUp(_)) {
                    self.stats.given_up += 1;
                }
                self.tracks.remove(&index);
            }
            Verdict::Retry(_) => {
                self.tracks.insert(
                    index,
                    Track {
                        in_flight_at: None,
                        last_worker: Some(w),
                        ..track
                    },
                );
            }
        }
        verdict
    }

    /// Forgets record `index` (the shell gave it up for a reason of its own, e.g.
    /// [`AssignError::TimeToRun`]): frees its slot at a worker if an attempt was in flight.
    pub fn forget(&mut self, index: u64) {
        if let Some(t) = self.tracks.remove(&index)
            && let Some(w) = t.in_flight_at
            && let Some(s) = self.workers.get_mut(w)
        {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }

    fn worker_failed(&mut self, w: WorkerId, now_ms: TimeMs) {
        let Some(s) = self.workers.get_mut(w) else {
            return;
        };
        if let Health::Up { failures } = s.health {
            let failures = failures.saturating_add(1);
            if failures >= self.cfg.health.failures_to_down {
                let until_ms = now_ms.saturating_add(self.cfg.health.base_down_ms);
                s.health = Health::Down { until_ms, downs: 1 };
                self.stats.marked_down += 1;
                tracing::warn!(worker = w, failures, until_ms, "worker marked down");
            } else {
                s.health = Health::Up { failures };
            }
        }
    }

    /// Workers whose back-off ended by `now_ms`: they move to probing, and the shell sends
    /// each one probe (answer with [`on_probe`](Self::on_probe)).
    pub fn probes_due(&mut self, now_ms: TimeMs) -> Vec<WorkerId> {
        let mut due = Vec::new();
        for (w, s) in self.workers.iter_mut().enumerate() {
            if s.paused_until <= now_ms {
                s.paused_until = 0;
            }
            if let Health::Down { until_ms, downs } = s.health
                && until_ms <= now_ms
            {
                s.health = Health::Probing { downs };
                due.push(w);
            }
        }
        due
    }

    /// The probe of worker `w` succeeded (`ok`) or failed: up again, or down for twice as long.
    pub fn on_probe(&mut self, w: WorkerId, ok: bool, now_ms: TimeMs) {
        let health = self.cfg.health;
        let Some(s) = self.workers.get_mut(w) else {
            return;
        };
        let Health::Probing { downs } = s.health else {
            return;
        };
        if ok {
            s.health = Health::Up { failures: 0 };
            self.stats.probes_ok += 1;
            tracing::info!(worker = w, "worker back up after a probe");
        } else {
            let downs = downs.saturating_add(1);
            let shift = downs.saturating_sub(1).min(40);
            let period = health
                .base_down_ms
                .saturating_mul(1i64 << shift)
                .min(health.max_down_ms);
            s.health = Health::Down {
                until_ms: now_ms.saturating_add(period),
                downs,
            };
            self.stats.probes_failed += 1;
            tracing::warn!(worker = w, downs, period, "probe failed: worker stays down");
        }
    }

    /// Worker `w` asked not to be sent anything before `until_ms` (a refusal's
    /// `Retry-After`, e.g. its rate limit): it is skipped by assignments until then (its health
    /// is unchanged; the record itself fails over). A later pause never shortens an earlier one.
    pub fn pause(&mut self, w: WorkerId, until_ms: TimeMs) {
        if let Some(s) = self.workers.get_mut(w) {
            s.paused_until = s.paused_until.max(until_ms);
            self.stats.paused += 1;
            tracing::debug!(worker = w, until_ms, "worker paused (Retry-After)");
        }
    }

    /// Whether some worker could take an attempt at `now_ms` (up, not paused, with room).
    pub fn has_room(&self, now_ms: TimeMs) -> bool {
        self.workers.iter().any(|s| {
            matches!(s.health, Health::Up { .. })
                && s.in_flight < self.cfg.max_in_flight_per_worker
                && s.paused_until <= now_ms
        })
    }

    /// Whether some worker is up (with room or not, paused or not).
    pub fn any_up(&self) -> bool {
        self.workers
            .iter()
            .any(|s| matches!(s.health, Health::Up { .. }))
    }

    /// The earliest time a probe becomes due (a worker is down) or a pause ends.
    pub fn next_wakeup_ms(&self) -> Option<TimeMs> {
        self.workers
            .iter()
            .flat_map(|s| {
                let probe = match s.health {
                    Health::Down { until_ms, .. } => Some(until_ms),
                    _ => None,
                };
                let pause = (s.paused_until > 0).then_some(s.paused_until);
                [probe, pause]
            })
            .flatten()
            .min()
    }

    /// Checks the internal invariants (tests call it after every step).
    pub fn check_invariants(&self) -> Result<(), String> {
        for (w, s) in self.workers.iter().enumerate() {
            let counted = self
                .tracks
                .values()
                .filter(|t| t.in_flight_at == Some(w))
                .count();
            if counted != s.in_flight {
                return Err(format!(
                    "worker {w}: in_flight {} but {counted} tracked",
                    s.in_flight
                ));
            }
            if s.in_flight > self.cfg.max_in_flight_per_worker {
                return Err(format!(
                    "worker {w}: {} in flight over the bound",
                    s.in_flight
                ));
            }
        }
        if self.tracks.len() > self.cfg.max_tracked {
            return Err(format!("{} tracked over the bound", self.tracks.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(k: u64) -> OccurrenceId {
        OccurrenceId::new(1, 0, k)
    }

    fn pool(workers: usize, assignment: Assignment) -> Pool {
        let mut cfg = PoolConfig::new(workers);
        cfg.default_policy.assignment = assignment;
        cfg.health = HealthConfig {
            failures_to_down: 2,
            base_down_ms: 100,
            max_down_ms: 400,
            probe_timeout_ms: 50,
        };
        Pool::new(cfg).unwrap()
    }

    #[test]
    fn a_paused_worker_takes_nothing_until_its_retry_after_and_wakes_the_shell() {
        let mut p = pool(2, Assignment::LeastLoaded);
        p.pause(0, 100);
        p.pause(0, 50); // a later, shorter pause never shortens it
        assert_eq!(p.next_wakeup_ms(), Some(100));
        for k in 0..4 {
            assert_eq!(p.assign(k, &id(k), "h", b"", 10), Ok(1), "record {k}");
        }
        assert!(p.has_room(10) && p.any_up());
        // Health is unchanged: paused, not down.
        assert_eq!(p.health(0), Some(Health::Up { failures: 0 }));
        assert_eq!(p.probes_due(100), Vec::<WorkerId>::new());
        assert_eq!(p.next_wakeup_ms(), None);
        assert_eq!(p.assign(9, &id(9), "h", b"", 100), Ok(0));
        assert_eq!(p.stats().paused, 2);
        p.check_invariants().unwrap();
        // Full everywhere: no room, still up.
        let mut q = pool(1, Assignment::LeastLoaded);
        for k in 0..8 {
            q.assign(k, &id(k), "h", b"", 0).unwrap();
        }
        assert!(!q.has_room(0) && q.any_up());
    }

    #[test]
    fn config_is_validated() {
        assert!(Pool::new(PoolConfig::new(0)).is_err());
        let mut c = PoolConfig::new(1);
        c.max_in_flight_per_worker = 0;
        assert!(Pool::new(c).is_err());
        let mut c = PoolConfig::new(1);
        c.handlers.insert(
            "h".into(),
            HandlerPolicy {
                max_attempts: 0,
                ..HandlerPolicy::default()
            },
        );
        assert!(Pool::new(c).is_err());
        let mut c = PoolConfig::new(1);
        c.health.max_down_ms = 1;
        assert!(Pool::new(c).is_err());
    }

    #[test]
    fn sticky_keeps_a_key_on_one_worker_while_healthy_and_moves_only_its_keys() {
        let mut p = pool(3, Assignment::Sticky(KeyOf::Payload));
        let mut home = BTreeMap::new();
        for k in 0..30u64 {
            let key = format!("order-{}", k % 10);
            let w = p.assign(k, &id(k), "h", key.as_bytes(), 0).unwrap();
            assert_eq!(*home.entry(key).or_insert(w), w, "same key, same worker");
            assert_eq!(
                p.on_outcome(k, "h", w, AttemptOutcome::Done(vec![]), 0),
                Verdict::Done(vec![])
            );
        }
        assert!(
            home.values()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1,
            "keys spread"
        );
        // Worker 0 goes down: its keys move, the others' stay.
        let down = 0;
        p.worker_failed(down, 0);
        p.worker_failed(down, 0);
        assert!(matches!(p.health(down), Some(Health::Down { .. })));
        for (n, (key, &w0)) in home.iter().enumerate() {
            let k = 200 + n as u64;
            let w = p.assign(k, &id(k), "h", key.as_bytes(), 1).unwrap();
            if w0 == down {
                assert_ne!(w, down);
            } else {
                assert_eq!(w, w0, "{key} moved although its worker is up");
            }
            p.forget(k);
        }
        p.check_invariants().unwrap();
    }

    #[test]
    fn least_loaded_spreads_and_respects_the_per_worker_bound() {
        let mut cfg = PoolConfig::new(3);
        cfg.max_in_flight_per_worker = 2;
        let mut p = Pool::new(cfg).unwrap();
        let ws: Vec<WorkerId> = (0..6)
            .map(|k| p.assign(k, &id(k), "h", b"", 0).unwrap())
            .collect();
        for w in 0..3 {
            assert_eq!(ws.iter().filter(|&&x| x == w).count(), 2);
        }
        assert_eq!(p.assign(6, &id(6), "h", b"", 0), Err(AssignError::NoWorker));
        assert_eq!(p.stats().no_worker, 1);
        p.on_outcome(0, "h", ws[0], AttemptOutcome::Done(vec![]), 1);
        assert_eq!(p.assign(6, &id(6), "h", b"", 1), Ok(ws[0]));
        assert_eq!(
            p.assign(1, &id(1), "h", b"", 1),
            Err(AssignError::AlreadyInFlight)
        );
        p.check_invariants().unwrap();
    }

    #[test]
    fn random_assignment_is_a_function_of_the_seed() {
        let run = |seed| {
            let mut cfg = PoolConfig::new(5);
            cfg.default_policy.assignment = Assignment::Random;
            cfg.seed = seed;
            let mut p = Pool::new(cfg).unwrap();
            (0..40)
                .map(|k| {
                    let w = p.assign(k, &id(k), "h", b"", 0).unwrap();
                    p.on_outcome(k, "h", w, AttemptOutcome::Done(vec![]), 0);
                    w
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!((0..5).all(|w| run(7).contains(&w)), "every worker drawn");
    }

    #[test]
    fn failures_mark_a_worker_down_a_probe_brings_it_back_a_failed_probe_doubles_the_back_off() {
        let mut p = pool(2, Assignment::Sticky(KeyOf::Handler));
        let w = p.assign(1, &id(1), "h", b"", 0).unwrap();
        assert!(matches!(
            p.on_outcome(1, "h", w, AttemptOutcome::Timeout, 10),
            Verdict::Retry(_)
        ));
        assert_eq!(p.health(w), Some(Health::Up { failures: 1 }));
        // The retry fails over to the other worker.
        let w2 = p.assign(1, &id(1), "h", b"", 20).unwrap();
        assert_ne!(w2, w);
        assert_eq!(p.stats().failovers, 1);
        p.on_outcome(1, "h", w2, AttemptOutcome::Done(b"a".to_vec()), 21);
        // A success resets the count.
        assert_eq!(p.assign(2, &id(2), "h", b"", 25), Ok(w));
        p.on_outcome(2, "h", w, AttemptOutcome::Done(vec![]), 25);
        assert_eq!(p.health(w), Some(Health::Up { failures: 0 }));
        // Two consecutive faults: down for 100 ms.
        assert_eq!(p.assign(3, &id(3), "h", b"", 30), Ok(w));
        p.on_outcome(3, "h", w, AttemptOutcome::Transport("refused".into()), 30);
        let w_again = p.assign(4, &id(4), "h", b"", 31).unwrap();
        assert_eq!(w_again, w, "sticky: still up after one failure");
        p.on_outcome(4, "h", w, AttemptOutcome::Failed("503".into()), 31);
        // Down: the handler's key moves to the other worker meanwhile.
        assert_eq!(p.assign(5, &id(5), "h", b"", 32), Ok(w2));
        p.forget(5);
        assert_eq!(
            p.health(w),
            Some(Health::Down {
                until_ms: 131,
                downs: 1
            })
        );
        assert_eq!(p.next_wakeup_ms(), Some(131));
        assert!(p.probes_due(130).is_empty());
        assert_eq!(p.probes_due(131), vec![w]);
        p.on_probe(w, false, 140);
        assert_eq!(
            p.health(w),
            Some(Health::Down {
                until_ms: 340,
                downs: 2
            })
        );
        assert_eq!(p.probes_due(340), vec![w]);
        p.on_probe(w, false, 340);
        assert_eq!(
            p.health(w),
            Some(Health::Down {
                until_ms: 740,
                downs: 3
            }),
            "capped at 400"
        );
        assert_eq!(p.probes_due(740), vec![w]);
        p.on_probe(w, true, 741);
        assert_eq!(p.health(w), Some(Health::Up { failures: 0 }));
        let s = p.stats();
        assert_eq!((s.marked_down, s.probes_ok, s.probes_failed), (1, 1, 2));
        p.check_invariants().unwrap();
    }

    #[test]
    fn retry_limit_time_to_run_and_rejection_give_up() {
        let mut cfg = PoolConfig::new(2);
        cfg.health.failures_to_down = 100;
        cfg.handlers.insert(
            "pay".into(),
            HandlerPolicy {
                max_attempts: 2,
                time_to_run_ms: 1_000,
                ..HandlerPolicy::default()
            },
        );
        let mut p = Pool::new(cfg).unwrap();
        let w = p.assign(1, &id(1), "pay", b"", 0).unwrap();
        assert!(matches!(
            p.on_outcome(1, "pay", w, AttemptOutcome::Timeout, 5),
            Verdict::Retry(_)
        ));
        let w = p.assign(1, &id(1), "pay", b"", 10).unwrap();
        let v = p.on_outcome(1, "pay", w, AttemptOutcome::Timeout, 15);
        assert!(
            matches!(&v, Verdict::GiveUp(r) if r.contains("retry limit of 2")),
            "{v:?}"
        );
        assert_eq!(p.tracked(), 0);

        // Time-to-run: the second attempt would start after 1 s.
        let w = p.assign(2, &id(2), "pay", b"", 0).unwrap();
        p.on_outcome(2, "pay", w, AttemptOutcome::Failed("500".into()), 5);
        assert_eq!(
            p.assign(2, &id(2), "pay", b"", 1_000),
            Err(AssignError::TimeToRun {
                time_to_run_ms: 1_000,
                attempts: 1
            })
        );
        p.forget(2);
        // ... or a failure after 1 s gives up rather than retrying.
        let w = p.assign(3, &id(3), "pay", b"", 0).unwrap();
        let v = p.on_outcome(3, "pay", w, AttemptOutcome::Timeout, 1_200);
        assert!(
            matches!(&v, Verdict::GiveUp(r) if r.contains("time-to-run")),
            "{v:?}"
        );

        // A rejection gives up at once and does not hurt the worker's health.
        let w = p.assign(4, &id(4), "other", b"", 0).unwrap();
        let v = p.on_outcome(
            4,
            "other",
            w,
            AttemptOutcome::Rejected("400 bad payload".into()),
            1,
        );
        assert!(matches!(v, Verdict::GiveUp(_)));
        assert_eq!(p.health(w), Some(Health::Up { failures: 0 }));
        // An outcome for an attempt not in flight changes nothing.
        assert!(matches!(
            p.on_outcome(4, "other", w, AttemptOutcome::Done(vec![]), 2),
            Verdict::Retry(_)
        ));
        p.check_invariants().unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Assign(u64, u8),
        Outcome(u64, u8),
        Probe(bool),
        Advance(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..24u64, 0..3u8).prop_map(|(k, h)| Op::Assign(k, h)),
            (0..24u64, 0..5u8).prop_map(|(k, o)| Op::Outcome(k, o)),
            any::<bool>().prop_map(Op::Probe),
            (0..300u16).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Whatever happens, per-worker bounds hold, the tracking stays exact, a record gets at
        /// most its handler's attempts, nothing is assigned to a worker that is not up, and the
        /// same seed and operations give the same decisions.
        #[test]
        fn invariants_hold_and_decisions_replay(ops in proptest::collection::vec(op(), 1..200), seed in any::<u64>()) {
            let run = |ops: &[Op]| {
                let mut cfg = PoolConfig::new(3);
                cfg.seed = seed;
                cfg.max_in_flight_per_worker = 3;
                cfg.max_tracked = 16;
                cfg.health.failures_to_down = 2;
                cfg.handlers.insert("s".into(), HandlerPolicy { assignment: Assignment::Sticky(KeyOf::Payload), max_attempts: 3, time_to_run_ms: 2_000, attempt_timeout_ms: 10 });
                cfg.handlers.insert("r".into(), HandlerPolicy { assignment: Assignment::Random, max_attempts: 2, time_to_run_ms: 500, attempt_timeout_ms: 10 });
                let mut p = Pool::new(cfg).unwrap();
                let handlers = ["s", "r", "l"];
                let mut at: BTreeMap<u64, (WorkerId, &str)> = BTreeMap::new();
                let mut attempts: BTreeMap<u64, u32> = BTreeMap::new();
                let mut log = Vec::new();
                let mut now: TimeMs = 0;
                for op in ops {
                    match *op {
                        Op::Assign(k, h) => {
                            let handler = handlers[h as usize];
                            let handler = at.get(&k).map_or(handler, |(_, h)| h);
                            let r = p.assign(k, &id(k), handler, &k.to_le_bytes(), now);
                            if let Err(AssignError::TimeToRun { .. }) = r {
                                // The shell dead-letters it and forgets it.
                                p.forget(k);
                                at.remove(&k);
                                attempts.remove(&k);
                            }
                            if let Ok(w) = r {
                                assert!(matches!(p.health(w), Some(Health::Up { .. })));
                                at.insert(k, (w, handler));
                                let n = attempts.entry(k).or_insert(0);
                                *n += 1;
                                assert!(*n <= p.config().policy(handler).max_attempts);
                            }
                            log.push(format!("{r:?}"));
                        }
                        Op::Outcome(k, o) => {
                            if let Some((w, handler)) = at.remove(&k) {
                                let outcome = match o {
                                    0 => AttemptOutcome::Done(vec![]),
                                    1 => AttemptOutcome::Timeout,
                                    2 => AttemptOutcome::Failed("503".into()),
                                    3 => AttemptOutcome::Transport("reset".into()),
                                    _ => AttemptOutcome::Rejected("400".into()),
                                };
                                let v = p.on_outcome(k, handler, w, outcome, now);
                                if matches!(v, Verdict::Retry(_)) {
                                    // Waiting for its retry: no worker until assigned again.
                                    at.insert(k, (usize::MAX, handler));
                                } else {
                                    attempts.remove(&k);
                                }
                                log.push(format!("{v:?}"));
                            }
                        }
                        Op::Probe(ok) => {
                            for w in p.probes_due(now) {
                                p.on_probe(w, ok, now);
                            }
                        }
                        Op::Advance(ms) => now += TimeMs::from(ms),
                    }
                    p.check_invariants().unwrap();
                }
                (log, p.stats())
            };
            let a = run(&ops);
            let b = run(&ops);
            prop_assert_eq!(a, b);
        }
    }
}
