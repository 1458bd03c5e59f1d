//! Runs that fail: what a run's outcome is ([`RunOutcome`]), the retry policy stored with a
//! schedule ([`RetryPolicy`], [`RunPolicy`]), the retry pending and the dead letters a record
//! keeps, and the book's bookkeeping of both (settling a failed run, re-driving or discarding a
//! dead run).
//!
//! A schedule runs one occurrence at a time: while a retry of a failed run is pending, the
//! schedule's later occurrences wait (they are planned, under its misfire policy, once the
//! retry succeeds or is dead-lettered), so runs stay in order and a retry never overlaps the
//! next occurrence. Every attempt of an occurrence has the same occurrence id (outbox records
//! deduplicate across attempts).

use super::{Record, ScheduleError, Scheduler, Target};
use crate::due::Due;
use crate::tick::{Tick, TimeMs};

/// Most attempts a [`RetryPolicy`] may allow (the first run and its retries).
pub const MAX_ATTEMPTS: u32 = 100;

/// Most runs a recurring schedule's history keeps ([`RunEntry`], a ring: the oldest leaves);
/// a one-shot keeps the last [`ONE_SHOT_HISTORY_RUNS`] attempts (it leaves the book when a run
/// succeeds). Kubernetes keeps 3 successful and 1 failed job by default, Temporal 10 actions;
/// a constant, because the stored size a record is placed at depends on it.
pub const HISTORY_RUNS: usize = 4;

/// Most runs a one-shot schedule's history keeps (its failed attempts, while it retries or
/// holds a dead run).
pub const ONE_SHOT_HISTORY_RUNS: usize = 2;

/// One run in a schedule's history ([`super::Scheduler::history`]): replicated, persisted with
/// the schedule, in the digest and in state transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct RunEntry {
    /// The nominal occurrence it ran for.
    pub due: Due,
    /// Sequence number of the tick that ran it.
    pub seq: u64,
    /// Agreed time of that tick.
    pub agreed_time_ms: Option<TimeMs>,
    /// Its occurrence number (the third part of its
    /// [`OccurrenceId`](crate::outbox::OccurrenceId)).
    pub occurrence: u64,
    /// Which attempt.
    pub attempt: u32,
    /// How it ended.
    pub outcome: RunOutcome,
    /// The result mark: the outbox index of the record the run emitted, whose worker result
    /// the outbox records against it ([`crate::outbox::Outbox::accept_result`]); `None` when it
    /// emitted nothing (or failed: a failed run's emit is dropped).
    pub emitted: Option<u64>,
}

/// Most dead runs a recurring schedule keeps (a one-shot keeps its one): a further dead run
/// evicts the oldest, counted in [`super::ScheduleInfo::dead_evicted`].
pub const MAX_DEAD_RUNS: usize = 2;

/// How a handler run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum RunOutcome {
    /// It returned `Ok`: its effects were committed.
    Ok,
    /// It returned an error with this code ([`super::HandlerError::code`]): its effects were
    /// dropped and its state changes rolled back.
    Failed {
        /// The handler's code.
        code: u32,
    },
    /// It panicked; the panic was caught at the handler boundary and treated as a failure
    /// (no message recorded: it is the same on every replica).
    Panicked,
}

impl RunOutcome {
    /// Whether the run succeeded.
    pub fn is_ok(&self) -> bool {
        matches!(self, RunOutcome::Ok)
    }
}

/// When a failed run is tried again, in agreed time: attempt `k + 1` is due
/// `min(backoff_cap_ms, backoff_base_ms · 2^(k-1)) + jitter` after the tick at which attempt `k`
/// failed (at least 1 ms later), where the jitter is `hash(schedule id, k) mod (jitter_ms + 1)`:
/// deterministic, the same on every replica, and spreading schedules that failed together.
/// After `max_attempts` attempts the run is dead-lettered. Without agreed time, a retry is due
/// at the next sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct RetryPolicy {
    /// Attempts in all (the first run included), in `1..=MAX_ATTEMPTS`; 1: no retry.
    pub max_attempts: u32,
    /// The delay after the first failure, in `[0, MAX_PERIOD_MS]` ms.
    pub backoff_base_ms: i64,
    /// The longest delay, in `[backoff_base_ms, MAX_PERIOD_MS]` ms.
    pub backoff_cap_ms: i64,
    /// The deterministic jitter's range, ms.
    pub jitter_ms: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::none()
    }
}

impl RetryPolicy {
    /// No retry: a failed run is dead-lettered at once.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            backoff_base_ms: 0,
            backoff_cap_ms: 0,
            jitter_ms: 0,
        }
    }

    /// Up to `max_attempts` attempts, backing off exponentially from `base_ms` to `cap_ms`.
    pub fn exponential(max_attempts: u32, base_ms: i64, cap_ms: i64) -> Self {
        Self {
            max_attempts,
            backoff_base_ms: base_ms,
            backoff_cap_ms: cap_ms,
            jitter_ms: 0,
        }
    }

    /// With deterministic jitter of up to `jitter_ms`.
    pub fn with_jitter_ms(mut self, jitter_ms: u32) -> Self {
        self.jitter_ms = jitter_ms;
        self
    }

    /// The delay before the attempt after failed attempt `attempt` (1-based) of schedule `id`,
    /// ms: at least 1 (a retry never runs in the tick that failed).
    pub fn delay_ms(&self, id: u64, attempt: u32) -> i64 {
        let doublings = attempt.saturating_sub(1).min(62);
        let exp = self
            .backoff_base_ms
            .max(0)
            .saturating_mul(1i64 << doublings)
            .min(self.backoff_cap_ms.max(self.backoff_base_ms).max(0));
        let jitter = super::timing::jitter_offset_ms(
            id.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ u64::from(attempt),
            self.jitter_ms,
        );
        exp.saturating_add(jitter).max(1)
    }

    /// `Ok` when the policy's parameters are in range.
    pub(super) fn check(&self) -> Result<(), ScheduleError> {
        let max = super::MAX_PERIOD_MS;
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(ScheduleError::Invalid(format!(
                "max_attempts must be in 1..={MAX_ATTEMPTS}, got {}",
                self.max_attempts
            )));
        }
        if !(0..=max).contains(&self.backoff_base_ms)
            || !(self.backoff_base_ms..=max).contains(&self.backoff_cap_ms)
        {
            return Err(ScheduleError::Invalid(format!(
                "backoff base {} ms and cap {} ms must satisfy 0 <= base <= cap <= {max}",
                self.backoff_base_ms, self.backoff_cap_ms
            )));
        }
        Ok(())
    }
}

/// What a schedule does with failed runs, stored with it (set at creation with
/// [`super::ScheduleRequest::CreateWith`] / [`super::ScheduleRequest::UpsertWith`], changed
/// with [`super::ScheduleRequest::SetRunPolicy`]). The default: no retry, no pause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct RunPolicy {
    /// Retries of a failed run.
    pub retry: RetryPolicy,
    /// Pause the schedule when one of its runs is dead-lettered (after its last attempt), so
    /// a broken handler stops firing until someone looks (resume it with
    /// [`super::ScheduleRequest::Resume`]).
    pub pause_on_failure: bool,
}

impl RunPolicy {
    /// With `retry`.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Pausing on a dead-lettered run.
    pub fn pausing_on_failure(mut self) -> Self {
        self.pause_on_failure = true;
        self
    }
}

/// A retry of a failed run, pending in the schedule's record (replicated, persisted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct PendingRetry {
    /// The run's nominal occurrence.
    pub due: Due,
    /// Its occurrence number.
    pub occurrence: u64,
    /// The attempt that runs next (2 for the first retry; 1 after a re-drive).
    pub attempt: u32,
    /// When it is due: an agreed time (or a sequence number, without agreed time).
    pub at: Due,
}

/// A run that failed its last attempt: kept in its schedule's record, in replicated state, until
/// it is re-driven ([`super::ScheduleRequest::Redrive`]) or discarded
/// ([`super::ScheduleRequest::Discard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct DeadRun {
    /// The run's nominal occurrence.
    pub due: Due,
    /// Its occurrence number.
    pub occurrence: u64,
    /// Attempts made.
    pub attempts: u32,
    /// The last attempt's outcome.
    pub outcome: RunOutcome,
    /// Sequence number of the tick of the last attempt.
    pub seq: u64,
    /// Agreed time of that tick.
    pub at_ms: Option<TimeMs>,
}

/// What happened after a failed run ([`FailedRun::then`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Retried at this due point.
    Retry(Due),
    /// Dead-lettered (its last attempt); `paused` when the schedule's run policy paused it.
    DeadLettered {
        /// Whether the schedule was paused ([`RunPolicy::pause_on_failure`]).
        paused: bool,
    },
}

/// A failed run of a tick ([`super::TickReport::failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedRun {
    /// The schedule.
    pub id: u64,
    /// Its occurrence number.
    pub occurrence: u64,
    /// The attempt that failed.
    pub attempt: u32,
    /// How it failed.
    pub outcome: RunOutcome,
    /// What happens next.
    pub then: AfterFailure,
}

impl Scheduler {
    /// Settles a failed attempt `attempt` of occurrence `occurrence` (nominal `due`) of record
    /// `id` at `tick`: a retry per its policy, or a dead letter (pausing the schedule with
    /// `pause_on_failure`). The caller has unindexed the record and reindexes it after.
    pub(super) fn settle_failure(
        &mut self,
        id: u64,
        due: Due,
        occurrence: u64,
        attempt: u32,
        outcome: RunOutcome,
        tick: &Tick,
    ) -> AfterFailure {
        let Some(rec) = self.records.get_mut(&id) else {
            return AfterFailure::DeadLettered { paused: false };
        };
        let policy = rec.policy;
        if attempt < policy.retry.max_attempts {
            let at = match tick.agreed_time_ms {
                Some(now) => Due::Time(now.saturating_add(policy.retry.delay_ms(id, attempt))),
                None => Due::Seq(tick.bft_sequence_num.saturating_add(1)),
            };
            rec.retry = Some(PendingRetry {
                due,
                occurrence,
                attempt: attempt.saturating_add(1),
                at,
            });
            return AfterFailure::Retry(at);
        }
        rec.retry = None;
        let cap = Self::dead_cap(rec);
        if rec.dead.len() >= cap {
            let evicted = rec.dead.len() + 1 - cap;
            rec.dead.drain(..evicted);
            rec.dead_evicted = rec.dead_evicted.saturating_add(evicted as u64);
            tracing::warn!(id, evicted, "dead letters full: oldest evicted (counted)");
        }
        rec.dead.push(DeadRun {
            due,
            occurrence,
            attempts: attempt,
            outcome,
            seq: tick.bft_sequence_num,
            at_ms: tick.agreed_time_ms,
        });
        let paused = policy.pause_on_failure && !rec.def.timing.is_one_shot();
        if paused {
            rec.paused = true;
        }
        self.dead_ids.insert(id);
        tracing::warn!(
            id,
            occurrence,
            attempts = attempt,
            ?outcome,
            paused,
            "run dead-lettered"
        );
        AfterFailure::DeadLettered { paused }
    }

    /// How many runs record `rec`'s history keeps.
    pub(super) fn history_cap(rec: &Record) -> usize {
        if rec.def.timing.is_one_shot() {
            ONE_SHOT_HISTORY_RUNS
        } else {
            HISTORY_RUNS
        }
    }

    /// Appends `entry` to record `id`'s history ring (the oldest leaves when it is full).
    pub(super) fn record_run(&mut self, id: u64, entry: RunEntry) {
        let Some(rec) = self.records.get_mut(&id) else {
            return;
        };
        let cap = Self::history_cap(rec);
        if rec.history.len() >= cap {
            let over = rec.history.len() + 1 - cap;
            rec.history.drain(..over);
        }
        rec.history.push(entry);
    }

    /// The last runs of schedule `id`, oldest first (at most [`HISTORY_RUNS`]): each run's
    /// nominal occurrence, tick, occurrence number, attempt, outcome and result mark. `None` for
    /// an unknown id (a one-shot whose run succeeded has left the book with its history).
    pub fn history(&self, id: u64) -> Option<&[RunEntry]> {
        self.records.get(&id).map(|r| r.history.as_slice())
    }

    /// How many dead runs record `rec` keeps.
    pub(super) fn dead_cap(rec: &Record) -> usize {
        if rec.def.timing.is_one_shot() {
            1
        } else {
            MAX_DEAD_RUNS
        }
    }

    /// Whether record `rec` is a one-shot with nothing left to run or keep (its run done, no
    /// retry pending, no dead run): it leaves the book.
    pub(super) fn is_spent(rec: &Record) -> bool {
        rec.def.timing.is_one_shot()
            && rec.next.is_none()
            && rec.retry.is_none()
            && rec.dead.is_empty()
    }

    /// [`super::ScheduleRequest::Redrive`]: the dead run of occurrence `occurrence` of `id` is
    /// tried again from attempt 1, due at once (`now`: agreed time, or sequence number).
    pub(super) fn redrive(
        &mut self,
        id: u64,
        occurrence: u64,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(Target::Id(id)));
        };
        let Some(at) = rec.dead.iter().position(|d| d.occurrence == occurrence) else {
            return Err(ScheduleError::NoDeadRun { id, occurrence });
        };
        if rec.retry.is_some() {
            return Err(ScheduleError::RunPending(id));
        }
        self.unindex(id);
        if let Some(rec) = self.records.get_mut(&id) {
            let dead = rec.dead.remove(at);
            rec.retry = Some(PendingRetry {
                due: dead.due,
                occurrence,
                attempt: 1,
                at: now_ms.map_or(Due::Seq(seq), Due::Time),
            });
            rec.version = rec.version.saturating_add(1);
            if rec.dead.is_empty() {
                self.dead_ids.remove(&id);
            }
        }
        self.reindex(id);
        self.touch(id);
        Ok(())
    }

    /// [`super::ScheduleRequest::Discard`]: drops the dead run of occurrence `occurrence` of
    /// `id`; a one-shot with nothing left leaves the book.
    pub(super) fn discard(&mut self, id: u64, occurrence: u64) -> Result<(), ScheduleError> {
        let Some(rec) = self.records.get_mut(&id) else {
            return Err(ScheduleError::UnknownSchedule(Target::Id(id)));
        };
        let Some(at) = rec.dead.iter().position(|d| d.occurrence == occurrence) else {
            return Err(ScheduleError::NoDeadRun { id, occurrence });
        };
        rec.dead.remove(at);
        rec.version = rec.version.saturating_add(1);
        if rec.dead.is_empty() {
            self.dead_ids.remove(&id);
        }
        if self.records.get(&id).is_some_and(Self::is_spent) {
            self.remove(id);
        } else {
            self.touch(id);
        }
        Ok(())
    }

    /// How many dead runs the book holds.
    pub fn dead_count(&self) -> usize {
        self.dead_ids
            .iter()
            .filter_map(|id| self.records.get(id))
            .map(|r| r.dead.len())
            .sum()
    }

    /// Every dead run, by schedule id ascending, then oldest first.
    pub fn dead_letters(&self) -> impl Iterator<Item = (u64, &DeadRun)> + '_ {
        self.dead_ids.iter().flat_map(move |id| {
            self.records
                .get(id)
                .into_iter()
                .flat_map(move |r| r.dead.iter().map(move |d| (*id, d)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_bounded_jitter() {
        let p = RetryPolicy::exponential(10, 1_000, 5_000);
        let delays: Vec<i64> = (1..=5).map(|k| p.delay_ms(7, k)).collect();
        assert_eq!(delays, vec![1_000, 2_000, 4_000, 5_000, 5_000]);
        assert_eq!(
            RetryPolicy::exponential(3, 0, 0).delay_ms(7, 1),
            1,
            "at least 1 ms"
        );
        let j = p.with_jitter_ms(500);
        for k in 1..=5 {
            let d = j.delay_ms(7, k);
            assert!((delays[k as usize - 1]..=delays[k as usize - 1] + 500).contains(&d));
            assert_eq!(d, j.delay_ms(7, k), "deterministic");
        }
        let huge = RetryPolicy::exponential(100, i64::MAX / 2, i64::MAX);
        assert_eq!(huge.delay_ms(1, 99), i64::MAX);
    }
}
