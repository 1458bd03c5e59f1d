//! Runs an operator asks for: [`ScheduleRequest::TriggerNow`](super::ScheduleRequest::TriggerNow)
//! (one run now) and [`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill) (the
//! schedule's occurrences in a past window, run again), both authorized like a change of the
//! schedule (its owner or an admin) and bounded: at most one trigger and one backfill pending per
//! schedule, at most [`MAX_BACKFILL_RUNS`] occurrences per backfill (counted at admission, under
//! a bounded walk), and every run paid from the tick's fire budget like any other.
//!
//! Occurrence ids. A regular run's occurrence number is the schedule's run counter (0, 1, 2,
//! …). A manual run's is derived from its nominal time, in a space a counter never reaches:
//! bit 63 set, bit 62 set for a trigger and clear for a backfill, the nominal time in ms below
//! ([`manual_occurrence`]). So a manual run never shares an outbox id with a regular run, and
//! backfilling the same occurrence twice gives it the same id both times (workers deduplicate
//! it). Trigger nominal times strictly increase per schedule (the request's agreed time, or
//! one past the previous trigger's), so two triggers never share an id.
//!
//! A schedule runs one thing at a time: a pending retry first, then a trigger, then the
//! backfill's next occurrence, then its regular runs. A failed manual run is retried and
//! dead-lettered by the schedule's run policy like a regular one (same occurrence id). Manual
//! runs wait while the schedule is paused or parked. They do not change the run counter or the
//! regular phase.
//!
//! Backfill overlap (book layout 12, [`ScheduleRequest::BackfillWith`]: Temporal's backfill
//! `overlap_policy`). A backfill's occurrences are one stream beside the regular runs, with
//! its own overlap policy ([`BackfillOverlap`]) keyed on the same "no result yet" as the
//! regular runs' (`overlap.rs`: a run that emitted outbox records awaits their results,
//! settled through consensus by [`Scheduler::settle`]; a run that emitted nothing has its
//! result at once). The occurrences of the window were all due when the backfill was
//! admitted, so when a backfill run starts awaiting, the policy decides for every occurrence
//! the backfill still holds, at once:
//!
//! | policy | the backfill's remaining occurrences |
//! |---|---|
//! | [`Overlap::AllowAll`] (plain [`ScheduleRequest::Backfill`], the only behaviour before layout 12) | run back to back, within the fire budget; nothing is tracked |
//! | [`Overlap::Skip`] | are skipped |
//! | [`Overlap::BufferOne`] | the next one waits for the result, the others are skipped |
//! | [`Overlap::BufferAll`] | wait, and run one at a time, each after the previous one's result (at most [`MAX_BACKFILL_RUNS`], bounded at admission: no overflow) |
//! | [`Overlap::CancelOther`] | refused at admission ([`ScheduleError::Invalid`], counted as a backfill refusal): each backfill occurrence is work asked for, none supersedes another |
//!
//! Skipped occurrences are counted in the schedule's [`RunCounters::skipped`](super::RunCounters::skipped)
//! and traced. A waiting backfill is out of the due index until the result arrives. The
//! regular runs and the backfill do not wait for each other (each stream awaits its own
//! previous run); a trigger neither waits nor is waited for. A new backfill's policy replaces
//! the previous one's; a run it still awaits stays awaited under a tracking policy.
//!
//! Refusals ([`ScheduleError::Invalid`], [`ScheduleError::Limit`],
//! [`ScheduleError::ManualRunPending`], [`ScheduleError::NeedsTime`], an unknown or
//! unauthorized target) are typed, counted ([`Scheduler::backfill_refusals`]) and traced.

use super::{Overlap, Record, RunCounters, ScheduleError, Scheduler, Target, Timing};
use crate::authz::{Action, Principal};
use crate::due::Due;
use crate::tick::TimeMs;

#[cfg(doc)]
use super::ScheduleRequest;

/// Most occurrences one [`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill) may
/// run; a window holding more is refused ([`ScheduleError::Limit`]): split it.
pub const MAX_BACKFILL_RUNS: u32 = 1_000;

/// Bit 63 of a manual run's occurrence number.
const MANUAL_BIT: u64 = 1 << 63;

/// Bit 62: a trigger's (clear: a backfill's).
const TRIGGER_BIT: u64 = 1 << 62;

/// Encoded bytes of [`ManualRuns`] (checked against the codec in the tests): what a record's
/// stored size bound adds for it.
pub(super) const MANUAL_BYTES: usize = 9 + 17 + 4 + 9;

/// The occurrence number of a manual run of nominal time `nominal_ms` (in
/// `[MIN_INSTANT_MS, MAX_INSTANT_MS)`, so below 2^62): see the module documentation.
pub fn manual_occurrence(nominal_ms: TimeMs, trigger: bool) -> u64 {
    let t = u64::try_from(nominal_ms).unwrap_or(0) & (TRIGGER_BIT - 1);
    MANUAL_BIT | if trigger { TRIGGER_BIT } else { 0 } | t
}

/// Whether occurrence number `occurrence` is a manual run's: `Some(trigger)` then.
pub fn is_manual(occurrence: u64) -> Option<bool> {
    (occurrence & MANUAL_BIT != 0).then_some(occurrence & TRIGGER_BIT != 0)
}

/// Manual runs pending on a schedule (replicated, persisted with its record; fixed size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ManualRuns {
    /// A pending trigger: its nominal time.
    pub trigger: Option<TimeMs>,
    /// A pending backfill: the next occurrence it runs and the window's last instant
    /// (inclusive).
    pub backfill: Option<(TimeMs, TimeMs)>,
    /// Occurrences the backfill still runs (at most [`MAX_BACKFILL_RUNS`]; 0 without one).
    pub backfill_left: u32,
    /// The nominal time of the last trigger admitted.
    pub last_trigger_ms: Option<TimeMs>,
}

impl ManualRuns {
    /// Whether a manual run is pending.
    pub fn pending(&self) -> bool {
        self.trigger.is_some() || self.backfill.is_some()
    }

    /// `Ok` when the stored fields are consistent (checked at load).
    pub(super) fn check(&self, recurring: bool) -> Result<(), String> {
        if self.pending() && !recurring {
            return Err("manual runs on a one-shot schedule".into());
        }
        let backfill_ok = match self.backfill {
            Some((next, last)) => {
                next <= last && (1..=MAX_BACKFILL_RUNS).contains(&self.backfill_left)
            }
            None => self.backfill_left == 0,
        };
        if !backfill_ok {
            return Err("an invalid pending backfill".into());
        }
        if let (Some(t), Some(last)) = (self.trigger, self.last_trigger_ms)
            && t > last
        {
            return Err("a trigger after the last one admitted".into());
        }
        Ok(())
    }
}

/// The overlap policy of a schedule's backfills and the backfill run it awaits (replicated,
/// persisted with its record from layout 12; see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct BackfillOverlap {
    /// The policy of the latest backfill admitted with one ([`Overlap::AllowAll`] when none).
    pub policy: Overlap,
    /// The backfill run the backfill waits for: its occurrence number and how many of the
    /// records it emitted have no result yet (at least 1).
    pub awaiting: Option<(u64, u32)>,
}

impl BackfillOverlap {
    /// Whether the backfill's next occurrence must wait for a result now.
    pub fn blocks(&self) -> bool {
        self.policy.tracks() && self.awaiting.is_some()
    }

    /// `Ok` when the stored fields are consistent (checked at load; `recurring`: the
    /// schedule's timing recurs).
    pub(super) fn check(&self, recurring: bool) -> Result<(), String> {
        if !recurring {
            return Err("a backfill overlap policy on a one-shot schedule".into());
        }
        if !self.policy.tracks() {
            return Err("a stored backfill overlap policy AllowAll".into());
        }
        match self.awaiting {
            Some((_, 0)) => Err("a backfill awaiting a run with no records".into()),
            Some((occ, _)) if is_manual(occ) != Some(false) => {
                Err("a backfill awaiting a run that is not a backfill's".into())
            }
            _ => Ok(()),
        }
    }
}

/// Encoded bytes of a [`BackfillOverlap`] (checked against the codec in the tests).
pub(super) const BACKFILL_OVERLAP_BYTES: usize = 4 + 1 + 8 + 4;

/// Encoded bytes of a record's backfill overlap at their largest: the option's tag, and for a
/// recurring schedule the state (a one-shot's is always `None`).
pub(super) fn backfill_overlap_bytes(one_shot: bool) -> usize {
    if one_shot {
        1
    } else {
        1 + BACKFILL_OVERLAP_BYTES
    }
}

/// Whether record `rec` has a manual run that may start now: a trigger, or a backfill not
/// waiting for its previous run's result (the due index holds it at sequence 0 then).
pub(super) fn manual_due(rec: &Record) -> bool {
    rec.manual.trigger.is_some()
        || (rec.manual.backfill.is_some() && !rec.backfill_overlap.is_some_and(|b| b.blocks()))
}

fn recurring(rec: &Record) -> bool {
    matches!(rec.def.timing, Timing::Every { .. } | Timing::Cron { .. })
}

impl Scheduler {
    /// Backfill requests refused ([`ScheduleRequest::Backfill`],
    /// [`ScheduleRequest::BackfillWith`]: any error): the replicated
    /// [`RefusalCounters::backfill`](super::RefusalCounters::backfill) (book layout 13; stored,
    /// so a restart keeps it).
    pub fn backfill_refusals(&self) -> u64 {
        self.refusals.backfill
    }

    /// [`ScheduleRequest::Backfill`] (`overlap` [`Overlap::AllowAll`]) and
    /// [`ScheduleRequest::BackfillWith`] from `by` on `target` (its owner or an admin,
    /// [`Action::Trigger`]): the window `(from_ms, to_ms)` under the backfill's overlap
    /// policy. A refusal is counted and traced; nothing changes then.
    pub(super) fn admit_backfill(
        &mut self,
        by: &Principal,
        target: &Target,
        (from_ms, to_ms): (TimeMs, TimeMs),
        overlap: Overlap,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<u64>, ScheduleError> {
        let admitted = self.resolve(target).and_then(|id| {
            // Who may change what is checked before anything else: an unauthorized caller
            // learns nothing about the request's other faults.
            self.authorize(by, Action::Trigger, Some(id))?;
            if overlap == Overlap::CancelOther {
                // A backfill's runs are a bounded window of past occurrences: each is the
                // work asked for, none supersedes the one before it.
                return Err(ScheduleError::Invalid(
                    "CancelOther is not offered for backfills: use Skip, BufferOne or BufferAll"
                        .into(),
                ));
            }
            self.backfill(id, from_ms, to_ms, now_ms)?;
            Ok(id)
        });
        match admitted {
            Ok(id) => {
                self.set_backfill_overlap(id, overlap);
                Ok(Some(id))
            }
            Err(error) => {
                self.refuse(|r| &mut r.backfill);
                tracing::info!(
                    component = self.component,
                    %error,
                    ?overlap,
                    "schedule book: backfill refused"
                );
                Err(error)
            }
        }
    }

    /// Sets the overlap policy of record `id`'s backfill, just admitted: `AllowAll` stores
    /// none (nothing tracked); a tracking policy keeps the backfill run still awaited.
    fn set_backfill_overlap(&mut self, id: u64, policy: Overlap) {
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.backfill_overlap = policy.tracks().then(|| BackfillOverlap {
                policy,
                awaiting: r.backfill_overlap.and_then(|b| b.awaiting),
            });
        }
        self.reindex(id);
        self.touch(id);
    }

    /// A run of backfill occurrence `occurrence` of record `id` committed, appending `records`
    /// outbox records: under a tracking backfill policy the backfill now awaits them, and the
    /// policy decides at once for its remaining occurrences (see the module documentation).
    pub(super) fn backfill_started(&mut self, id: u64, occurrence: u64, records: u32) {
        let Some(policy) = self
            .records
            .get(&id)
            .and_then(|r| r.backfill_overlap)
            .map(|b| b.policy)
            .filter(|p| p.tracks())
        else {
            return;
        };
        if records == 0 {
            return;
        }
        self.unindex(id);
        let mut dropped = 0u64;
        if let Some(r) = self.records.get_mut(&id) {
            r.backfill_overlap = Some(BackfillOverlap {
                policy,
                awaiting: Some((occurrence, records)),
            });
            let left = r.manual.backfill_left;
            match (policy, r.manual.backfill) {
                (Overlap::Skip, Some(_)) => {
                    dropped = u64::from(left);
                    r.manual.backfill = None;
                    r.manual.backfill_left = 0;
                }
                (Overlap::BufferOne, Some((next, _))) if left > 1 => {
                    dropped = u64::from(left - 1);
                    r.manual.backfill = Some((next, next));
                    r.manual.backfill_left = 1;
                }
                _ => {}
            }
        }
        if dropped > 0 {
            tracing::info!(
                component = self.component,
                id,
                awaited = occurrence,
                dropped,
                ?policy,
                "backfill overlap: occurrences skipped, the previous backfill run has no result yet"
            );
            self.count(
                id,
                RunCounters {
                    skipped: dropped,
                    ..RunCounters::default()
                },
            );
        }
        self.reindex(id);
        self.touch(id);
    }

    /// One record of backfill run `occurrence` of record `id` settled (`overlap.rs`,
    /// [`Scheduler::settle`]): when it is the last one the backfill awaits, its next
    /// occurrence is due again. Returns whether the book changed.
    pub(super) fn settle_backfill(&mut self, id: u64, occurrence: u64) -> bool {
        let Some(b) = self.records.get(&id).and_then(|r| r.backfill_overlap) else {
            return false;
        };
        let Some((occ, pending)) = b.awaiting.filter(|(occ, _)| *occ == occurrence) else {
            return false;
        };
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.backfill_overlap = Some(BackfillOverlap {
                awaiting: pending.checked_sub(1).filter(|n| *n > 0).map(|n| (occ, n)),
                ..b
            });
        }
        self.reindex(id);
        self.touch(id);
        true
    }

    /// [`ScheduleRequest::TriggerNow`](super::ScheduleRequest::TriggerNow) on `id` (resolved
    /// and authorized) at agreed time `now_ms`.
    pub(super) fn trigger_now(
        &mut self,
        id: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        if !recurring(rec) {
            return Err(ScheduleError::Invalid(
                "a trigger or backfill needs a recurring schedule (cron or every)".into(),
            ));
        }
        if rec.manual.trigger.is_some() {
            return Err(ScheduleError::ManualRunPending(id));
        }
        let nominal = match rec.manual.last_trigger_ms {
            Some(last) if last >= now => last.saturating_add(1),
            _ => now,
        };
        if !(super::MIN_INSTANT_MS..super::MAX_INSTANT_MS).contains(&nominal) {
            return Err(ScheduleError::Invalid(format!(
                "trigger time {nominal} outside the instant range"
            )));
        }
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.manual.trigger = Some(nominal);
            r.manual.last_trigger_ms = Some(nominal);
            r.version = r.version.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        Ok(())
    }

    /// [`ScheduleRequest::Backfill`](super::ScheduleRequest::Backfill) on `id` (resolved and
    /// authorized): the occurrences in `[from_ms, to_ms]`, a past window (`to_ms` at most the
    /// agreed time `now_ms`), at most [`MAX_BACKFILL_RUNS`] of them (counted here, in at most
    /// that many steps of the timing). Returns how many it runs.
    pub(super) fn backfill(
        &mut self,
        id: u64,
        from_ms: TimeMs,
        to_ms: TimeMs,
        now_ms: Option<TimeMs>,
    ) -> Result<u32, ScheduleError> {
        let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        if !recurring(rec) {
            return Err(ScheduleError::Invalid(
                "a trigger or backfill needs a recurring schedule (cron or every)".into(),
            ));
        }
        if !(super::MIN_INSTANT_MS..super::MAX_INSTANT_MS).contains(&from_ms)
            || from_ms > to_ms
            || to_ms > now
        {
            return Err(ScheduleError::Invalid(format!(
                "backfill window [{from_ms}, {to_ms}] must be a past window (ends by {now}) of valid instants"
            )));
        }
        if rec.manual.backfill.is_some() {
            return Err(ScheduleError::ManualRunPending(id));
        }
        let first = self.occurrence_after(id, rec, from_ms.saturating_sub(1));
        let mut count = 0u32;
        let mut at = first;
        while let Some(t) = at {
            if t > to_ms {
                break;
            }
            count += 1;
            if count > MAX_BACKFILL_RUNS {
                return Err(ScheduleError::Limit(format!(
                    "a backfill runs at most {MAX_BACKFILL_RUNS} occurrences; split the window"
                )));
            }
            at = self.occurrence_after(id, rec, t);
        }
        let (Some(first), true) = (first, count > 0) else {
            return Err(ScheduleError::Invalid(format!(
                "no occurrence in [{from_ms}, {to_ms}]"
            )));
        };
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.manual.backfill = Some((first, to_ms));
            r.manual.backfill_left = count;
            r.version = r.version.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        Ok(count)
    }

    /// Takes record `id`'s next manual run off its pending runs: (nominal due point,
    /// occurrence number). The caller has unindexed the record.
    pub(super) fn next_manual(&mut self, id: u64) -> Option<(Due, u64)> {
        let rec = self.records.get(&id)?;
        if let Some(t) = rec.manual.trigger {
            if let Some(r) = self.records.get_mut(&id) {
                r.manual.trigger = None;
            }
            return Some((Due::Time(t), manual_occurrence(t, true)));
        }
        if !manual_due(rec) {
            // The backfill waits for its previous run's result.
            return None;
        }
        let (next, last) = rec.manual.backfill?;
        let left = rec.manual.backfill_left.saturating_sub(1);
        let following = self
            .occurrence_after(id, rec, next)
            .filter(|t| *t <= last && left > 0);
        if let Some(r) = self.records.get_mut(&id) {
            r.manual.backfill = following.map(|t| (t, last));
            r.manual.backfill_left = if following.is_some() { left } else { 0 };
        }
        Some((Due::Time(next), manual_occurrence(next, false)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_occurrences_never_meet_run_counters_or_each_other() {
        let t = super::super::MAX_INSTANT_MS - 1;
        for trigger in [false, true] {
            let o = manual_occurrence(t, trigger);
            assert!(o >= MANUAL_BIT, "above every run counter");
            assert_eq!(is_manual(o), Some(trigger));
            assert_eq!(o & (TRIGGER_BIT - 1), t as u64, "the nominal time");
        }
        assert_ne!(manual_occurrence(5, true), manual_occurrence(5, false));
        assert_eq!(is_manual(12), None);
        let full = ManualRuns {
            trigger: Some(1),
            backfill: Some((2, 3)),
            backfill_left: 4,
            last_trigger_ms: Some(5),
        };
        assert_eq!(crate::codec::encoded_len(&full).unwrap(), MANUAL_BYTES);
        assert!(full.check(true).is_ok());
        assert!(full.check(false).is_err());
        let awaiting = BackfillOverlap {
            policy: Overlap::BufferAll,
            awaiting: Some((manual_occurrence(t, false), u32::MAX)),
        };
        assert_eq!(
            crate::codec::encoded_len(&Some(awaiting)).unwrap(),
            backfill_overlap_bytes(false)
        );
        assert_eq!(
            crate::codec::encoded_len(&None::<BackfillOverlap>).unwrap(),
            backfill_overlap_bytes(true)
        );
        assert!(awaiting.check(true).is_ok() && awaiting.blocks());
        assert!(awaiting.check(false).is_err());
        let trigger_awaited = BackfillOverlap {
            awaiting: Some((manual_occurrence(t, true), 1)),
            ..awaiting
        };
        assert!(trigger_awaited.check(true).is_err());
        let allow = BackfillOverlap::default();
        assert!(allow.check(true).is_err() && !allow.blocks());
    }
}
