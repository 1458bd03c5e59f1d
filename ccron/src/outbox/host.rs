//! [`PersistentConsumer`]: the pure [`Consumer`] plus its durable state, persisted in the one
//! order that keeps the guarantees.
//!
//! After every step that may have finished records, dead letters are recorded first and progress
//! is saved second, so persisted progress never passes a record that is neither done nor durably
//! dead-lettered. A crash anywhere loses only in-memory state: the restarted consumer re-delivers
//! everything above the persisted progress (at-least-once), and may record a dead letter twice if
//! it crashed between the two writes (dead-letter readers should key by index).
//!
//! Progress is saved after every step that advanced it, so the persisted value never lags the
//! in-memory one between calls; that keeps re-deliveries after a crash within
//! `max_search_ahead` of the persisted progress, which is what bounds a worker's seen-set.

use std::collections::VecDeque;

use super::consumer::{
    AckEffect, AckOutcome, ConfigError, Consumer, ConsumerConfig, DeadLetter, Delivery,
    FailureReason, Jobs,
};
use super::progress::{DeadLetterSink, ProgressStore, StoreError};
use crate::tick::TimeMs;

/// Why a [`PersistentConsumer`] could not start or persist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A store failed; the step's in-memory effect is kept and persisting is retried on the
    /// next call.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A [`Consumer`] that persists progress and dead letters through `P` and `D`.
#[derive(Debug)]
pub struct PersistentConsumer<P: ProgressStore, D: DeadLetterSink> {
    consumer: Consumer,
    progress_store: P,
    dead_letters: D,
    /// Dead letters taken from the consumer and not yet durably recorded.
    unrecorded: VecDeque<DeadLetter>,
    persisted: u64,
}

impl<P: ProgressStore, D: DeadLetterSink> PersistentConsumer<P, D> {
    /// Loads the persisted progress and resumes after it.
    pub fn open(
        config: ConsumerConfig,
        mut progress_store: P,
        dead_letters: D,
    ) -> Result<Self, ConsumerError> {
        let persisted = progress_store.load()?;
        let consumer = Consumer::new(config, persisted)?;
        tracing::info!(progress = persisted, "outbox consumer resumed");
        Ok(Self {
            consumer,
            progress_store,
            dead_letters,
            unrecorded: VecDeque::new(),
            persisted,
        })
    }

    /// The pure consumer (read-only: mutate through this wrapper so persistence keeps up).
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// The progress last saved to the store.
    pub fn persisted_progress(&self) -> u64 {
        self.persisted
    }

    /// The stores, for inspection.
    pub fn stores(&self) -> (&P, &D) {
        (&self.progress_store, &self.dead_letters)
    }

    /// [`Consumer::poll`], then persists what timeouts finished.
    ///
    /// If persisting fails the error is returned and this call's deliveries are not: they are
    /// already tracked as in flight, so they time out and are re-sent (at-least-once holds), and
    /// persisting is retried by the next call.
    pub fn poll(
        &mut self,
        jobs: &impl Jobs,
        now_ms: TimeMs,
    ) -> Result<Vec<Delivery>, ConsumerError> {
        let out = self.consumer.poll(jobs, now_ms);
        self.flush()?;
        Ok(out)
    }

    /// [`Consumer::on_ack`], then persists.
    pub fn on_ack(
        &mut self,
        index: u64,
        attempt: u32,
        outcome: AckOutcome,
        now_ms: TimeMs,
    ) -> Result<AckEffect, ConsumerError> {
        let effect = self.consumer.on_ack(index, attempt, outcome, now_ms);
        self.flush()?;
        Ok(effect)
    }

    /// [`Consumer::give_up`], then persists (the dead letter first, then progress).
    pub fn give_up(
        &mut self,
        index: u64,
        attempt: u32,
        reason: FailureReason,
        now_ms: TimeMs,
    ) -> Result<AckEffect, ConsumerError> {
        let effect = self.consumer.give_up(index, attempt, reason, now_ms);
        self.flush()?;
        Ok(effect)
    }

    /// Records pending dead letters, then saves progress if it moved. Idempotent.
    pub fn flush(&mut self) -> Result<(), ConsumerError> {
        self.unrecorded.extend(self.consumer.take_dead_letters());
        while let Some(letter) = self.unrecorded.front() {
            if let Err(e) = self.dead_letters.record(letter) {
                tracing::error!(index = letter.index, error = %e, "cannot record dead letter; progress not saved");
                return Err(e.into());
            }
            self.unrecorded.pop_front();
        }
        let progress = self.consumer.progress();
        if progress != self.persisted {
            if let Err(e) = self.progress_store.save(progress) {
                tracing::error!(progress, error = %e, "cannot save consumer progress");
                return Err(e.into());
            }
            self.persisted = progress;
        }
        Ok(())
    }
}
