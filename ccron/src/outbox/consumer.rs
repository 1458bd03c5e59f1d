//! The outbox consumer: a pure state machine that delivers outbox records to workers outside
//! consensus, at least once, with bounded work in flight.
//!
//! The design follows a pull-style job queue: records are found by dense index through
//! [`Jobs`], progress is the highest *contiguous* index that is finished (done or dead-lettered),
//! and only that number needs persisting. After a crash the consumer restarts from its persisted
//! progress and re-delivers everything above it; workers deduplicate by
//! [`OccurrenceId`](super::OccurrenceId), which turns at-least-once delivery into an
//! effectively-once effect.
//!
//! Bounds: at most [`ConsumerConfig::max_processing`] deliveries are in flight, and no record above
//! `progress + max_search_ahead` is dispatched, so one slow record cannot let the consumer run
//! arbitrarily far ahead (and the memory it tracks stays bounded by `max_search_ahead`).
//!
//! Retries: a failed or timed-out attempt is retried after a deterministic backoff
//! ([`Backoff::delay_ms`]); after [`ConsumerConfig::max_attempts`] attempts the record becomes a
//! [`DeadLetter`] and progress moves past it.
//!
//! Time is an argument (`now_ms`); nothing here reads a clock or does I/O. See
//! [`super::PersistentConsumer`] for the thin layer that persists progress and dead letters.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::id::OccurrenceId;
use super::log::{Outbox, OutboxRecord};
use crate::tick::TimeMs;

/// A source of records by dense index (the replicated [`Outbox`], or a ledger query).
pub trait Jobs {
    /// Index of the last record available (0 when none).
    fn head(&self) -> u64;
    /// The record at `index`, or `None` when it does not exist (not yet appended, or trimmed).
    fn at_index(&self, index: u64) -> Option<OutboxRecord>;
}

impl Jobs for Outbox {
    fn head(&self) -> u64 {
        Outbox::head(self)
    }

    fn at_index(&self, index: u64) -> Option<OutboxRecord> {
        self.get(index).cloned()
    }
}

impl<T: Jobs + ?Sized> Jobs for &T {
    fn head(&self) -> u64 {
        (**self).head()
    }

    fn at_index(&self, index: u64) -> Option<OutboxRecord> {
        (**self).at_index(index)
    }
}

/// Deterministic exponential backoff with hashed jitter.
///
/// The delay before attempt `n + 1` (after attempt `n` failed) is
/// `min(base_ms * 2^(n-1), cap_ms) + jitter`, where `jitter` is
/// `id.mix(n) % (capped * jitter_permille / 1000 + 1)`: spread out per occurrence (so records that
/// failed together do not retry together) yet a pure function of the id and the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failed attempt, before jitter.
    pub base_ms: TimeMs,
    /// Largest delay before jitter.
    pub cap_ms: TimeMs,
    /// Largest jitter as a fraction of the capped delay, in thousandths (0..=1000).
    pub jitter_permille: u32,
}

impl Default for Backoff {
    /// 100 ms doubling up to 30 s, with up to 25 % jitter.
    fn default() -> Self {
        Self {
            base_ms: 100,
            cap_ms: 30_000,
            jitter_permille: 250,
        }
    }
}

impl Backoff {
    /// The delay to wait after `attempt` (1-based) of occurrence `id` failed.
    pub fn delay_ms(&self, id: &OccurrenceId, attempt: u32) -> TimeMs {
        let base = self.base_ms.max(0);
        let cap = self.cap_ms.max(base);
        let shift = attempt.saturating_sub(1).min(62);
        let exp = base.checked_mul(1i64 << shift).unwrap_or(cap);
        let capped = exp.min(cap);
        let permille = i64::from(self.jitter_permille.min(1000));
        // capped <= i64::MAX and permille <= 1000: compute in i128 to avoid overflow.
        let span = (i128::from(capped) * i128::from(permille) / 1000) as u64;
        let jitter = id.mix(u64::from(attempt)) % span.saturating_add(1);
        capped.saturating_add(i64::try_from(jitter).unwrap_or(i64::MAX))
    }
}

/// Configuration of a [`Consumer`]. Validated by [`Consumer::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Most deliveries in flight at once (at least 1).
    pub max_processing: usize,
    /// Never dispatch a record above `progress + max_search_ahead` (at least `max_processing`).
    pub max_search_ahead: u64,
    /// Attempts before a record is dead-lettered (at least 1).
    pub max_attempts: u32,
    /// An attempt with no acknowledgement after this long counts as failed (at least 1).
    pub ack_timeout_ms: TimeMs,
    /// Delay between attempts.
    pub backoff: Backoff,
}

impl Default for ConsumerConfig {
    /// 16 in flight, 256 ahead, 8 attempts, 5 s acknowledgement timeout, default backoff.
    fn default() -> Self {
        Self {
            max_processing: 16,
            max_search_ahead: 256,
            max_attempts: 8,
            ack_timeout_ms: 5_000,
            backoff: Backoff::default(),
        }
    }
}

/// Why a [`ConsumerConfig`] was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_processing` is 0.
    #[error("max_processing must be at least 1")]
    NoProcessing,
    /// `max_search_ahead` is below `max_processing` (the extra workers could never be used).
    #[error(
        "max_search_ahead ({max_search_ahead}) must be at least max_processing ({max_processing})"
    )]
    SearchAheadTooSmall {
        /// The configured search-ahead.
        max_search_ahead: u64,
        /// The configured in-flight bound.
        max_processing: usize,
    },
    /// `max_attempts` is 0.
    #[error("max_attempts must be at least 1")]
    NoAttempts,
    /// `ack_timeout_ms` is not positive.
    #[error("ack_timeout_ms must be positive, got {0}")]
    AckTimeout(TimeMs),
    /// The backoff is negative, its cap is below its base, or its jitter is above 1000 ‰.
    #[error("invalid backoff: {0}")]
    Backoff(&'static str),
}

impl ConsumerConfig {
    /// Checks the documented constraints.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_processing == 0 {
            return Err(ConfigError::NoProcessing);
        }
        if self.max_search_ahead < self.max_processing as u64 {
            return Err(ConfigError::SearchAheadTooSmall {
                max_search_ahead: self.max_search_ahead,
                max_processing: self.max_processing,
            });
        }
        if self.max_attempts == 0 {
            return Err(ConfigError::NoAttempts);
        }
        if self.ack_timeout_ms <= 0 {
            return Err(ConfigError::AckTimeout(self.ack_timeout_ms));
        }
        if self.backoff.base_ms < 0 {
            return Err(ConfigError::Backoff("base_ms is negative"));
        }
        if self.backoff.cap_ms < self.backoff.base_ms {
            return Err(ConfigError::Backoff("cap_ms is below base_ms"));
        }
        if self.backoff.jitter_permille > 1000 {
            return Err(ConfigError::Backoff("jitter_permille is above 1000"));
        }
        Ok(())
    }
}

/// One record to deliver to a worker now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The record's outbox index (echo it in the acknowledgement).
    pub index: u64,
    /// Which attempt this is, from 1 (echo it in the acknowledgement).
    pub attempt: u32,
    /// The record itself.
    pub record: OutboxRecord,
}

/// What a worker reported for one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckOutcome {
    /// The effect is done (or was already done: a deduplicated repeat also acknowledges `Done`).
    Done,
    /// The worker could not perform the effect this time.
    Failed {
        /// The worker's explanation, kept in the dead letter if this was the last attempt.
        reason: String,
    },
}

/// Why the last attempt of a dead-lettered record failed.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum FailureReason {
    /// No acknowledgement arrived within [`ConsumerConfig::ack_timeout_ms`].
    Timeout,
    /// The worker reported a failure.
    Failed(String),
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("acknowledgement timed out"),
            Self::Failed(reason) => write!(f, "worker failed: {reason}"),
        }
    }
}

/// A record given up after [`ConsumerConfig::max_attempts`] attempts.
///
/// Progress moves past it, so it must be recorded durably (see
/// [`DeadLetterSink`](super::DeadLetterSink)) before progress is persisted past its index.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct DeadLetter {
    /// The record's outbox index.
    pub index: u64,
    /// The record's occurrence id.
    pub id: OccurrenceId,
    /// The record's handler.
    pub handler: String,
    /// How many attempts were made.
    pub attempts: u32,
    /// Why the last attempt failed.
    pub reason: FailureReason,
    /// `now_ms` when it was given up.
    pub at_ms: TimeMs,
}

impl fmt::Display for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dead letter #{} {} handler={:?} after {} attempts: {}",
            self.index, self.id, self.handler, self.attempts, self.reason
        )
    }
}

/// What an acknowledgement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckEffect {
    /// The record is done; `progress` is the consumer's progress afterwards.
    Completed {
        /// Highest contiguous finished index after this acknowledgement.
        progress: u64,
    },
    /// The attempt failed; the next attempt is due at `retry_at_ms`.
    RetryScheduled {
        /// When the record becomes eligible for redelivery.
        retry_at_ms: TimeMs,
    },
    /// The attempt failed and was the last: the record is dead-lettered.
    DeadLettered,
    /// The acknowledgement changed nothing (see [`IgnoredAck`]).
    Ignored(IgnoredAck),
}

/// Why an acknowledgement was ignored. None of these is an error: at-least-once delivery and lost
/// or late messages make all of them normal, and a worker cannot harm the consumer with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoredAck {
    /// The index is at or below progress, or was never dispatched by this consumer instance.
    NotTracked,
    /// The record is already done or dead-lettered.
    AlreadyFinished,
    /// A failure for an attempt other than the one in flight (a late reply to a timed-out attempt).
    StaleFailure,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Attempt `attempt` was delivered and is awaiting its acknowledgement until `deadline_ms`.
    InFlight {
        attempt: u32,
        deadline_ms: TimeMs,
    },
    /// Attempt `attempt` failed; attempt `attempt + 1` is due at `retry_at_ms`.
    Waiting {
        attempt: u32,
        retry_at_ms: TimeMs,
    },
    Done,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    id: OccurrenceId,
    /// Kept so a dead letter can name its handler without another lookup in the source.
    handler: String,
    state: SlotState,
}

impl SlotState {
    /// The time at which this state needs attention, if any: the acknowledgement deadline of an
    /// attempt in flight, or the due time of a retry.
    fn timer_ms(self) -> Option<TimeMs> {
        match self {
            Self::InFlight { deadline_ms, .. } => Some(deadline_ms),
            Self::Waiting { retry_at_ms, .. } => Some(retry_at_ms),
            Self::Done | Self::Dead => None,
        }
    }
}

/// The pure outbox consumer (see the module documentation).
///
/// Cost: a poll or an acknowledgement costs O((k + 1) · log S) for k expired, retried or
/// dispatched records and S = `max_search_ahead` tracked records: timers are kept in an ordered
/// index `(time, index)`, so nothing scans the tracked window.
#[derive(Debug, Clone)]
pub struct Consumer {
    config: ConsumerConfig,
    /// Highest index such that it and every index below it is done or dead-lettered.
    progress: u64,
    /// Lowest index never dispatched by this instance; `slots` covers `progress+1 .. next_index`.
    next_index: u64,
    slots: BTreeMap<u64, Slot>,
    /// `(timer_ms, index)` for every slot in flight or waiting (see [`SlotState::timer_ms`]).
    timers: BTreeSet<(TimeMs, u64)>,
    in_flight: usize,
    /// Dead letters not yet handed to the host by [`Consumer::take_dead_letters`].
    dead_letters: Vec<DeadLetter>,
}

impl Consumer {
    /// A consumer resuming after `progress` (0 to start from the first record).
    pub fn new(config: ConsumerConfig, progress: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            progress,
            next_index: progress.saturating_add(1),
            slots: BTreeMap::new(),
            timers: BTreeSet::new(),
            in_flight: 0,
            dead_letters: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Highest index such that it and every index below it is done or dead-lettered: the one
    /// number to persist.
    pub fn progress(&self) -> u64 {
        self.progress
    }

    /// Number of deliveries awaiting an acknowledgement.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Highest index dispatched so far by this instance (equals progress when none is tracked).
    pub fn highest_dispatched(&self) -> u64 {
        self.next_index - 1
    }

    /// Hands over the dead letters produced since the last call, in the order they were produced.
    pub fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead_letters)
    }

    /// Dead letters produced and not yet taken.
    pub fn pending_dead_letters(&self) -> &[DeadLetter] {
        &self.dead_letters
    }

    /// The earliest time at which [`poll`](Self::poll) has timed-out or retry work to do, if any.
    ///
    /// New records are not covered: call `poll` when the source signals new records too.
    pub fn next_wakeup_ms(&self) -> Option<TimeMs> {
        self.timers.first().map(|&(at_ms, _)| at_ms)
    }

    /// Expires overdue attempts, then returns the deliveries to make now: due retries first
    /// (earliest due first), then new records in index order, within the in-flight and
    /// search-ahead bounds.
    pub fn poll(&mut self, jobs: &impl Jobs, now_ms: TimeMs) -> Vec<Delivery> {
        self.expire(now_ms);
        let mut out = Vec::new();

        // Retries first: they are the oldest records, and progress waits on them.
        let due: Vec<(u64, u32)> = self
            .timers
            .range(..=(now_ms, u64::MAX))
            .filter_map(|&(_, index)| match self.slots.get(&index)?.state {
                SlotState::Waiting { attempt, .. } => Some((index, attempt)),
                _ => None,
            })
            .take(self.config.max_processing.saturating_sub(self.in_flight))
            .collect();
        for (index, attempt) in due {
            let Some(record) = jobs.at_index(index) else {
                // The host trimmed a record this consumer has not finished: it stays waiting
                // (progress cannot pass it) and the operator sees why.
                tracing::warn!(index, "outbox record to retry is missing from the source");
                continue;
            };
            out.push(self.dispatch(index, attempt + 1, record, now_ms));
        }

        let head = jobs.head();
        let window_end = self.progress.saturating_add(self.config.max_search_ahead);
        while self.in_flight < self.config.max_processing
            && self.next_index <= head
            && self.next_index <= window_end
        {
            let index = self.next_index;
            let Some(record) = jobs.at_index(index) else {
                tracing::warn!(
                    index,
                    head,
                    "outbox record below head is missing from the source"
                );
                break;
            };
            self.next_index += 1;
            out.push(self.dispatch(index, 1, record, now_ms));
        }
        out
    }

    /// Applies a worker's acknowledgement of attempt `attempt` of record `index`.
    ///
    /// `Done` is accepted from any attempt (a late success is still a success); `Failed` only from
    /// the attempt in flight. Unknown, repeated and stale acknowledgements are ignored.
    pub fn on_ack(
        &mut self,
        index: u64,
        attempt: u32,
        outcome: AckOutcome,
        now_ms: TimeMs,
    ) -> AckEffect {
        let Some(state) = self.slots.get(&index).map(|s| s.state) else {
            return AckEffect::Ignored(IgnoredAck::NotTracked);
        };
        match (state, outcome) {
            (SlotState::Done | SlotState::Dead, _) => {
                AckEffect::Ignored(IgnoredAck::AlreadyFinished)
            }
            (_, AckOutcome::Done) => {
                self.transition(index, SlotState::Done);
                self.advance();
                AckEffect::Completed {
                    progress: self.progress,
                }
            }
            (SlotState::InFlight { attempt: a, .. }, AckOutcome::Failed { reason })
                if a == attempt =>
            {
                self.fail(index, FailureReason::Failed(reason), now_ms)
            }
            (_, AckOutcome::Failed { .. }) => AckEffect::Ignored(IgnoredAck::StaleFailure),
        }
    }

    /// Gives up record `index` now, whatever attempts remain: the attempt `attempt` in flight is
    /// the last, and the record becomes a [`DeadLetter`] with `reason` (progress moves past it).
    /// A host uses it for limits the consumer does not know: a per-handler retry limit, a
    /// time-to-run, a permanent rejection by the worker. Ignored (like a stale failure) unless
    /// `attempt` is the attempt in flight, or the record is waiting for its retry.
    pub fn give_up(
        &mut self,
        index: u64,
        attempt: u32,
        reason: FailureReason,
        now_ms: TimeMs,
    ) -> AckEffect {
        let Some(slot) = self.slots.get(&index) else {
            return AckEffect::Ignored(IgnoredAck::NotTracked);
        };
        let last = match slot.state {
            SlotState::Done | SlotState::Dead => {
                return AckEffect::Ignored(IgnoredAck::AlreadyFinished);
            }
            SlotState::InFlight { attempt: a, .. } if a == attempt => a,
            SlotState::Waiting { attempt: a, .. } => a,
            SlotState::InFlight { .. } => return AckEffect::Ignored(IgnoredAck::StaleFailure),
        };
        self.dead_letter(index, last, reason, now_ms);
        AckEffect::DeadLettered
    }

    /// Checks the internal invariants; tests and simulators call it after every step.
    pub fn check_invariants(&self) -> Result<(), String> {
        let counted = self
            .slots
            .values()
            .filter(|s| matches!(s.state, SlotState::InFlight { .. }))
            .count();
        if counted != self.in_flight {
            return Err(format!(
                "in_flight {} but {counted} slots in flight",
                self.in_flight
            ));
        }
        if self.in_flight > self.config.max_processing {
            return Err(format!(
                "{} in flight over max {}",
                self.in_flight, self.config.max_processing
            ));
        }
        let expected: BTreeSet<(TimeMs, u64)> = self
            .slots
            .iter()
            .filter_map(|(&index, s)| Some((s.state.timer_ms()?, index)))
            .collect();
        if expected != self.timers {
            return Err(format!(
                "timer index {:?} disagrees with slots {expected:?}",
                self.timers
            ));
        }
        if self.next_index <= self.progress {
            return Err(format!(
                "next_index {} <= progress {}",
                self.next_index, self.progress
            ));
        }
        let tracked = self.next_index - 1 - self.progress;
        if tracked != self.slots.len() as u64 {
            return Err(format!(
                "{} slots for {tracked} tracked indices",
                self.slots.len()
            ));
        }
        if tracked > self.config.max_search_ahead {
            return Err(format!(
                "{tracked} tracked over search-ahead {}",
                self.config.max_search_ahead
            ));
        }
        if let Some((&first, slot)) = self.slots.first_key_value() {
            if first != self.progress + 1 {
                return Err(format!("first slot {first} but progress {}", self.progress));
            }
            if matches!(slot.state, SlotState::Done | SlotState::Dead) {
                return Err(format!(
                    "slot {first} is finished but progress did not advance"
                ));
            }
        }
        Ok(())
    }

    /// Moves tracked slot `index` to `state`, keeping the timer index and in-flight count exact.
    fn transition(&mut self, index: u64, state: SlotState) {
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        if let Some(at_ms) = slot.state.timer_ms() {
            self.timers.remove(&(at_ms, index));
        }
        if matches!(slot.state, SlotState::InFlight { .. }) {
            self.in_flight -= 1;
        }
        if let Some(at_ms) = state.timer_ms() {
            self.timers.insert((at_ms, index));
        }
        if matches!(state, SlotState::InFlight { .. }) {
            self.in_flight += 1;
        }
        slot.state = state;
    }

    fn dispatch(
        &mut self,
        index: u64,
        attempt: u32,
        record: OutboxRecord,
        now_ms: TimeMs,
    ) -> Delivery {
        let state = SlotState::InFlight {
            attempt,
            deadline_ms: now_ms.saturating_add(self.config.ack_timeout_ms),
        };
        // A new slot starts as finished (no timer, not in flight) so that `transition` does all
        // the accounting; a retried slot is already there.
        self.slots.entry(index).or_insert_with(|| Slot {
            id: record.id,
            handler: record.handler.clone(),
            state: SlotState::Done,
        });
        self.transition(index, state);
        tracing::trace!(index, attempt, id = %record.id, "outbox dispatch");
        Delivery {
            index,
            attempt,
            record,
        }
    }

    fn expire(&mut self, now_ms: TimeMs) {
        let overdue: Vec<u64> = self
            .timers
            .range(..=(now_ms, u64::MAX))
            .filter(|&&(_, index)| {
                self.slots
                    .get(&index)
                    .is_some_and(|s| matches!(s.state, SlotState::InFlight { .. }))
            })
            .map(|&(_, index)| index)
            .collect();
        for index in overdue {
            self.fail(index, FailureReason::Timeout, now_ms);
        }
    }

    /// The in-flight attempt of `index` failed: schedule a retry or give up.
    fn fail(&mut self, index: u64, reason: FailureReason, now_ms: TimeMs) -> AckEffect {
        let Some(slot) = self.slots.get(&index) else {
            return AckEffect::Ignored(IgnoredAck::NotTracked);
        };
        let SlotState::InFlight { attempt, .. } = slot.state else {
            return AckEffect::Ignored(IgnoredAck::StaleFailure);
        };
        if attempt >= self.config.max_attempts {
            self.dead_letter(index, attempt, reason, now_ms);
            AckEffect::DeadLettered
        } else {
            let retry_at_ms =
                now_ms.saturating_add(self.config.backoff.delay_ms(&slot.id, attempt));
            tracing::debug!(index, attempt, retry_at_ms, reason = %reason, "outbox attempt failed");
            self.transition(
                index,
                SlotState::Waiting {
                    attempt,
                    retry_at_ms,
                },
            );
            AckEffect::RetryScheduled { retry_at_ms }
        }
    }

    /// Turns tracked record `index` into a dead letter after `attempts` attempts.
    fn dead_letter(&mut self, index: u64, attempts: u32, reason: FailureReason, now_ms: TimeMs) {
        let Some(slot) = self.slots.get(&index) else {
            return;
        };
        let letter = DeadLetter {
            index,
            id: slot.id,
            handler: slot.handler.clone(),
            attempts,
            reason,
            at_ms: now_ms,
        };
        tracing::warn!(
            index,
            id = %letter.id,
            attempts,
            reason = %letter.reason,
            "outbox record dead-lettered"
        );
        self.dead_letters.push(letter);
        self.transition(index, SlotState::Dead);
        self.advance();
    }

    /// Moves progress over the finished prefix of the tracked window.
    fn advance(&mut self) {
        while let Some(entry) = self.slots.first_entry() {
            if *entry.key() != self.progress + 1
                || !matches!(entry.get().state, SlotState::Done | SlotState::Dead)
            {
                break;
            }
            entry.remove();
            self.progress += 1;
        }
    }
}
