//! The overlap policy of recurring schedules (book layout 9): what a regular occurrence does
//! when the schedule's previous run has no result yet (Temporal's `ScheduleOverlapPolicy`,
//! Kubernetes' `concurrencyPolicy`).
//!
//! "No result yet" is exact and replicated: a run of a schedule under a policy other than
//! [`Overlap::AllowAll`] that emitted outbox records leaves the schedule *awaiting* them
//! ([`OverlapState::awaiting`]: its occurrence number and how many of its records have no
//! result). Each of those records settles once, through consensus: when the consumer's result
//! for it is applied ([`Outbox::accept_result`](crate::outbox::Outbox::accept_result) answers
//! `Applied`), or when the consumer's progress trims it without a result (no result can
//! arrive for it any more; waiting for one would wedge the schedule forever). The host calls
//! [`Scheduler::settle`] for each; the state lives in the schedule's record, so it is in the
//! book's pages, the digest and every snapshot. A run that emitted nothing has its result at
//! once (nothing to wait for); a failed attempt emits nothing and its retry is the run the
//! schedule waits for (`runs.rs`: one occurrence at a time).
//!
//! While a schedule awaits, each regular occurrence its misfire plan runs goes through the
//! policy instead of running:
//!
//! | policy | the occurrence |
//! |---|---|
//! | [`Overlap::AllowAll`] (the default: the book before layout 9) | runs; nothing is tracked |
//! | [`Overlap::Skip`] | is skipped: counted ([`OverlapState::skipped`], [`RunCounters::skipped`](super::RunCounters::skipped)), reported ([`TickReport::overlap_skipped`](super::TickReport::overlap_skipped)) and traced |
//! | [`Overlap::BufferOne`] | is buffered when nothing is ([`OverlapState::buffered`]), else skipped as above |
//! | [`Overlap::BufferAll`] | is buffered, up to [`MAX_BUFFERED`]; beyond it, refused: a typed [`ScheduleError::BufferFull`](super::ScheduleError::BufferFull) in the tick's errors, counted ([`OverlapState::overflowed`]) and traced |
//! | [`Overlap::CancelOther`] | runs, and the awaited run is *cancelled*: reported ([`TickReport::overlap_cancelled`](super::TickReport::overlap_cancelled)), counted ([`OverlapState::overflowed`], which counts cancellations under this policy) and traced; the schedule awaits the new run instead |
//!
//! A buffered occurrence keeps its nominal time and its occurrence number (given by the plan,
//! as for every planned run: a skipped occurrence's number is not reused, and every planned
//! occurrence counts towards [`Bounds::max_runs`](super::Bounds::max_runs)). When the awaited
//! run settles, the oldest buffered occurrence is due at once and runs on the next tick, in
//! the canonical order and within the fire budget, ahead of the schedule's next regular
//! point; it is awaited in turn.
//!
//! Manual runs (`manual.rs`: trigger-now, backfill) neither wait for the regular runs nor are
//! waited for by them; a backfill's runs wait for each other under the backfill's own policy
//! (`manual.rs`, "Backfill overlap", layout 12).
//!
//! What a cancellation is (Temporal's `CANCEL_OTHER`). The cancellation is replicated state:
//! the schedule stops awaiting the cancelled run (its occurrence number leaves
//! [`OverlapState::awaiting`]), so the slot is free for the new run, which is awaited in turn
//! when it emits. Results come back by occurrence id: a late result of the cancelled run names
//! the cancelled occurrence, not the awaited one, so [`Scheduler::settle_detail`] answers
//! [`Settled::OfUnawaitedRun`] and changes nothing (it neither counts as the new run's result
//! nor frees the slot again). Its records stay in the outbox: the outbox cannot withdraw a
//! record deterministically (its delivery happens outside consensus: a replica cannot know
//! whether a worker holds it). So a worker sees no cancel record: the cancelled run's records
//! are delivered, retried and dead-lettered as any other, and their results are applied to the
//! outbox as usual. A worker that must stop the cancelled work reads it from the book
//! (`describe`: the awaited occurrence moved on, the cancel count grew) or from a record the
//! new run's handler emits (its handler knows its occurrence number; the previous one is
//! `occurrence - 1` or older). Nothing is stored per cancelled run (no layout change: layout
//! 13's records carry the policy and the count); a result recognised as not awaited is traced.

use super::{RunCounters, ScheduleError, Scheduler};
use crate::due::Due;
use crate::outbox::{OccurrenceId, Origin, Outbox};
use crate::tick::TimeMs;

/// Most occurrences [`Overlap::BufferAll`] keeps buffered (a constant: a record is placed at
/// its largest stored size, which depends on it).
pub const MAX_BUFFERED: usize = 8;

/// What a due regular occurrence does while the schedule's previous run has no result yet
/// (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, bincode::Encode, bincode::Decode)]
pub enum Overlap {
    /// Run it (runs may overlap); nothing is tracked. The default.
    #[default]
    AllowAll,
    /// Skip it (counted and traced).
    Skip,
    /// Keep at most one occurrence buffered; run it when the result arrives. Later ones are
    /// skipped.
    BufferOne,
    /// Keep up to [`MAX_BUFFERED`] occurrences buffered, run them in order, each after the
    /// previous one's result; beyond the bound, refused with a typed, counted error.
    BufferAll,
    /// Cancel the previous run and run this one (Temporal's `CANCEL_OTHER`): the schedule stops
    /// awaiting the previous run's records (their late results settle nothing), the
    /// cancellation is reported, counted and traced, and the new occurrence is awaited in turn.
    /// Appended last: its encoding (variant 4) leaves the other variants' bytes as they were.
    /// Book schedules and cron table entries (`CronEntry::with_overlap`: the host keeps a
    /// table entry's cancellations, `entry::CancelledRuns`); not backfills.
    CancelOther,
}

impl Overlap {
    /// How many occurrences the policy keeps buffered.
    pub fn buffer_bound(self) -> usize {
        match self {
            Overlap::AllowAll | Overlap::Skip | Overlap::CancelOther => 0,
            Overlap::BufferOne => 1,
            Overlap::BufferAll => MAX_BUFFERED,
        }
    }

    /// Whether the policy tracks runs' results (every policy but [`Overlap::AllowAll`]).
    pub fn tracks(self) -> bool {
        self != Overlap::AllowAll
    }
}

/// A schedule's overlap policy and state (replicated, persisted with its record; layout 9).
#[derive(Debug, Clone, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct OverlapState {
    /// The policy.
    pub policy: Overlap,
    /// The run the schedule waits for: its occurrence number and how many of the records it
    /// emitted have no result yet (at least 1).
    pub awaiting: Option<(u64, u32)>,
    /// Occurrences buffered while it waits, oldest first: (nominal time, occurrence number).
    pub buffered: Vec<(TimeMs, u64)>,
    /// Occurrences the policy skipped.
    pub skipped: u64,
    /// Occurrences [`Overlap::BufferAll`] refused because its buffer was full, and runs
    /// [`Overlap::CancelOther`] cancelled: what the policy displaced beyond what it holds (one
    /// stored counter for both, layout 13: a schedule moved from one of these policies to the
    /// other keeps one sum; the tick reports tell them apart).
    pub overflowed: u64,
}

/// What a settled record did to its schedule's overlap state ([`Scheduler::settle_detail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Not a record this book tracks: another origin or component, an unknown schedule, or a
    /// schedule that awaits nothing and tracks no result.
    Untracked,
    /// One record of the awaited run settled; others of it have no result yet.
    Pending,
    /// The awaited run's last record settled: the schedule awaits nothing now.
    Released,
    /// A record of a regular run the schedule does not await (a run
    /// [`Overlap::CancelOther`] cancelled, or one that ran before its policy tracked
    /// results): changes nothing (traced).
    OfUnawaitedRun,
    /// A record of a backfill run (`manual.rs`): `true` when it changed the book.
    Backfill(bool),
}

impl Settled {
    /// Whether the book changed (the host saves it then).
    pub fn changed(self) -> bool {
        matches!(
            self,
            Settled::Pending | Settled::Released | Settled::Backfill(true)
        )
    }
}

/// Encoded bytes of an [`OverlapState`] at its largest (checked against the codec in the
/// tests): what a record's stored size bound adds for it. A one-shot's is always the default
/// (admission refuses a policy on one-shots): [`stored_bytes`].
pub(super) const OVERLAP_BYTES: usize = 4 + (1 + 8 + 4) + (8 + MAX_BUFFERED * 16) + 8 + 8;

/// Encoded bytes of a record's overlap state at their largest: the option's tag, and for a
/// recurring schedule the state (a one-shot's is always `None`).
pub(super) fn stored_bytes(one_shot: bool) -> usize {
    if one_shot { 1 } else { 1 + OVERLAP_BYTES }
}

/// The state of a record without one: [`Overlap::AllowAll`], nothing awaited or buffered.
static NO_OVERLAP: OverlapState = OverlapState {
    policy: Overlap::AllowAll,
    awaiting: None,
    buffered: Vec::new(),
    skipped: 0,
    overflowed: 0,
};

impl super::Record {
    /// The record's overlap state (the default when it has none).
    pub(super) fn overlap(&self) -> &OverlapState {
        self.overlap.as_deref().unwrap_or(&NO_OVERLAP)
    }

    /// The record's overlap state, created on first use.
    pub(super) fn overlap_mut(&mut self) -> &mut OverlapState {
        self.overlap.get_or_insert_with(Box::default)
    }
}

impl OverlapState {
    /// Whether a due regular occurrence must wait (go through the policy) now.
    pub fn blocks(&self) -> bool {
        self.policy.tracks() && self.awaiting.is_some()
    }

    /// `Ok` when the stored fields are consistent (checked at load).
    pub(super) fn check(&self, recurring: bool) -> Result<(), String> {
        if !recurring && *self != OverlapState::default() {
            return Err("an overlap state on a one-shot schedule".into());
        }
        if self.awaiting.is_some_and(|(_, n)| n == 0) {
            return Err("awaiting a run with no records".into());
        }
        if self.awaiting.is_some() && !self.policy.tracks() {
            return Err("awaiting a run under AllowAll".into());
        }
        if self.buffered.len() > MAX_BUFFERED || self.buffered.windows(2).any(|w| w[0].1 >= w[1].1)
        {
            return Err("an invalid overlap buffer".into());
        }
        Ok(())
    }
}

/// Whether the keys of a record with overlap state `o` start with its oldest buffered
/// occurrence (nothing awaited, something buffered): its nominal time, due at once.
pub(super) fn buffered_key(o: &OverlapState) -> Option<Due> {
    if o.awaiting.is_some() {
        return None;
    }
    o.buffered.first().map(|&(t, _)| Due::Time(t))
}

/// What the policy did with an occurrence that could not run as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Diverted {
    Skipped,
    Buffered,
    Overflowed,
    /// [`Overlap::CancelOther`]: run `previous` is cancelled, the occurrence runs.
    Cancelled {
        previous: u64,
    },
}

impl Scheduler {
    /// Sends occurrence `occurrence` (nominal `due`) of record `id`, which must wait, through
    /// its overlap policy: skipped, buffered or refused (each counted and traced).
    pub(super) fn divert(&mut self, id: u64, due: Due, occurrence: u64) -> Diverted {
        let component = self.component;
        let Some(r) = self.records.get_mut(&id) else {
            return Diverted::Skipped;
        };
        if r.overlap().policy == Overlap::CancelOther
            && let Some((previous, pending)) = r.overlap().awaiting
        {
            return self.cancel_awaited(id, occurrence, previous, pending);
        }
        let o = r.overlap_mut();
        let policy = o.policy;
        let what = match due {
            Due::Time(t) if o.buffered.len() < policy.buffer_bound() => {
                o.buffered.push((t, occurrence));
                Diverted::Buffered
            }
            _ if policy == Overlap::BufferAll => {
                o.overflowed = o.overflowed.saturating_add(1);
                Diverted::Overflowed
            }
            _ => {
                o.skipped = o.skipped.saturating_add(1);
                Diverted::Skipped
            }
        };
        let awaited = o.awaiting.map(|(occ, _)| occ);
        match what {
            Diverted::Buffered => {
                tracing::debug!(
                    component,
                    id,
                    occurrence,
                    ?awaited,
                    ?policy,
                    "overlap: occurrence buffered"
                );
            }
            Diverted::Skipped | Diverted::Overflowed => {
                tracing::info!(
                    component,
                    id,
                    occurrence,
                    ?awaited,
                    ?policy,
                    ?what,
                    "overlap: occurrence not run, the previous run has no result yet"
                );
                self.count(
                    id,
                    RunCounters {
                        skipped: 1,
                        ..RunCounters::default()
                    },
                );
            }
            // Returned above.
            Diverted::Cancelled { .. } => {}
        }
        self.touch(id);
        what
    }

    /// [`Overlap::CancelOther`]: record `id` stops awaiting run `previous` (`pending` of its
    /// records without a result), counted and traced; occurrence `occurrence` runs.
    fn cancel_awaited(
        &mut self,
        id: u64,
        occurrence: u64,
        previous: u64,
        pending: u32,
    ) -> Diverted {
        // Its keys depend on what it awaits when something is buffered.
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            let o = r.overlap_mut();
            o.awaiting = None;
            o.overflowed = o.overflowed.saturating_add(1);
        }
        self.reindex(id);
        self.touch(id);
        tracing::info!(
            component = self.component,
            id,
            occurrence,
            previous,
            pending,
            "overlap: the previous run has no result yet: cancelled, the occurrence runs"
        );
        Diverted::Cancelled { previous }
    }

    /// A run of regular occurrence `occurrence` of record `id` committed, appending `records`
    /// outbox records: under a tracking policy the schedule now awaits them (nothing when it
    /// appended none: the run has its result).
    pub(super) fn note_started(&mut self, id: u64, occurrence: u64, records: u32) {
        match super::is_manual(occurrence) {
            // A backfill's run: its own policy (`manual.rs`).
            Some(false) => return self.backfill_started(id, occurrence, records),
            // A trigger neither waits nor is waited for.
            Some(true) => return,
            None => {}
        }
        if records == 0 {
            return;
        }
        let Some(r) = self.records.get_mut(&id) else {
            return;
        };
        if !r.overlap().policy.tracks() || r.def.timing.is_one_shot() {
            return;
        }
        // Its keys change when occurrences are buffered (they wait again).
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.overlap_mut().awaiting = Some((occurrence, records));
        }
        self.reindex(id);
        self.touch(id);
    }

    /// One record a schedule's run emitted, `record` its id, has settled: its result was
    /// applied through consensus, or the consumer's progress trimmed it without one. When it
    /// is the last record of the run schedule `record.emitter()` awaits, the schedule stops
    /// waiting, and its oldest buffered occurrence is due at once. Returns whether the book
    /// changed (the host saves it then). Deterministic: a function of replicated state and
    /// the committed request; call it once per record (the outbox applies one result per
    /// record, and a trimmed record never gets one).
    pub fn settle(&mut self, record: OccurrenceId) -> bool {
        self.settle_detail(record).changed()
    }

    /// [`Scheduler::settle`], telling what the record was ([`Settled`]): in particular a late
    /// result of a run [`Overlap::CancelOther`] cancelled is [`Settled::OfUnawaitedRun`] and
    /// changes nothing.
    pub fn settle_detail(&mut self, record: OccurrenceId) -> Settled {
        if record.origin() != Origin::Schedule || record.component != self.component {
            return Settled::Untracked;
        }
        let id = record.emitter();
        if super::is_manual(record.occurrence) == Some(false) {
            return Settled::Backfill(self.settle_backfill(id, record.occurrence));
        }
        let Some(r) = self.records.get(&id) else {
            return Settled::Untracked;
        };
        let o = r.overlap();
        let (occ, pending) = match o.awaiting {
            Some((occ, pending)) if occ == record.occurrence => (occ, pending),
            awaited => {
                // A regular run of a tracking schedule that has run but is not awaited: under
                // CancelOther, a run it cancelled.
                if o.policy.tracks()
                    && super::is_manual(record.occurrence).is_none()
                    && record.occurrence < r.runs
                {
                    tracing::debug!(
                        component = self.component,
                        id,
                        occurrence = record.occurrence,
                        awaited = ?awaited.map(|(occ, _)| occ),
                        policy = ?o.policy,
                        "overlap: a result of a run not awaited (cancelled or untracked): ignored"
                    );
                    return Settled::OfUnawaitedRun;
                }
                return Settled::Untracked;
            }
        };
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.overlap_mut().awaiting = pending.checked_sub(1).filter(|n| *n > 0).map(|n| (occ, n));
            if r.overlap_mut().awaiting.is_none() {
                tracing::debug!(
                    component = self.component,
                    id,
                    occurrence = occ,
                    buffered = r.overlap_mut().buffered.len(),
                    "overlap: the awaited run has its result"
                );
            }
        }
        let released = self
            .records
            .get(&id)
            .is_some_and(|r| r.overlap().awaiting.is_none());
        self.reindex(id);
        self.touch(id);
        if released {
            Settled::Released
        } else {
            Settled::Pending
        }
    }

    /// The schedule records of `outbox` at or below `upto` without a result: what the
    /// consumer's progress to `upto` trims unanswered. Once that trim is admitted, the host
    /// settles each ([`Scheduler::settle`]). O(records trimmed).
    pub fn unanswered_up_to(outbox: &Outbox, upto: u64) -> Vec<OccurrenceId> {
        outbox
            .iter()
            .take_while(|(i, _)| *i <= upto)
            .filter(|(i, r)| !outbox.has_result(*i) && r.id.origin() == Origin::Schedule)
            .map(|(_, r)| r.id)
            .collect()
    }

    /// Pops record `id`'s oldest buffered occurrence (it is due: nothing awaited).
    pub(super) fn take_buffered(&mut self, id: u64) -> Option<(Due, u64)> {
        let r = self.records.get_mut(&id)?;
        if r.overlap().buffered.is_empty() {
            return None;
        }
        let (t, occ) = r.overlap_mut().buffered.remove(0);
        Some((Due::Time(t), occ))
    }

    /// [`ScheduleRequest::SetOverlap`](super::ScheduleRequest::SetOverlap) on recurring
    /// schedule `id` (resolved and authorized): the new policy; buffered occurrences beyond
    /// its bound are dropped, counted as skipped ([`Overlap::AllowAll`] keeps them: they run
    /// now, and it stops waiting). Version + 1.
    pub(super) fn set_overlap(&mut self, id: u64, policy: Overlap) -> Result<(), ScheduleError> {
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(super::Target::Id(id)));
        };
        if rec.def.timing.is_one_shot() {
            return Err(ScheduleError::Invalid(
                "an overlap policy applies to recurring schedules only".into(),
            ));
        }
        self.unindex(id);
        let mut dropped = 0u64;
        if let Some(r) = self.records.get_mut(&id) {
            let o = r.overlap_mut();
            o.policy = policy;
            if policy.tracks() {
                let keep = policy.buffer_bound();
                if o.buffered.len() > keep {
                    dropped = (o.buffered.len() - keep) as u64;
                    o.buffered.truncate(keep);
                    o.skipped = o.skipped.saturating_add(dropped);
                }
            } else {
                o.awaiting = None;
            }
            r.version = r.version.saturating_add(1);
        }
        if dropped > 0 {
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
        Ok(())
    }

    /// Sets the overlap policy of schedule `id`, just created or upserted (the request's
    /// policy was checked: [`check_policy`]); a replaced schedule keeps the run it awaits
    /// unless the policy no longer tracks. Only the policy: an upsert's replace
    /// (`admission/lifecycle.rs`) already dropped the occurrences buffered under the old
    /// definition, uncounted like its owed runs, so nothing is buffered here (checked by
    /// `ccron/tests/schedule/overlap.rs`, `an_upsert_drops_buffered_occurrences_...`).
    pub(super) fn admit_overlap(&mut self, id: u64, policy: Overlap) {
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            if policy.tracks() {
                r.overlap_mut().policy = policy;
            } else if let Some(o) = &mut r.overlap {
                // A record without a state stays without one (a one-shot always does).
                o.policy = policy;
                o.awaiting = None;
            }
        }
        self.reindex(id);
        self.touch(id);
    }
}

/// `Ok` when `policy` may be set on a schedule (`one_shot`: its timing fires once, and takes
/// only [`Overlap::AllowAll`]).
pub(super) fn check_policy(policy: Overlap, one_shot: bool) -> Result<(), ScheduleError> {
    if one_shot && policy.tracks() {
        return Err(ScheduleError::Invalid(
            "an overlap policy applies to recurring schedules only".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sizes_are_what_the_bound_adds() {
        let full = OverlapState {
            policy: Overlap::BufferAll,
            awaiting: Some((u64::MAX, u32::MAX)),
            buffered: vec![(i64::MAX, u64::MAX); MAX_BUFFERED],
            skipped: 1,
            overflowed: 2,
        };
        assert_eq!(crate::codec::encoded_len(&full).unwrap(), OVERLAP_BYTES);
        let none: Option<Box<OverlapState>> = None;
        assert_eq!(
            crate::codec::encoded_len(&none).unwrap(),
            stored_bytes(true)
        );
        assert_eq!(
            crate::codec::encoded_len(&Some(Box::new(full))).unwrap(),
            stored_bytes(false)
        );
    }

    #[test]
    fn only_tracking_policies_block_and_buffer() {
        let mut o = OverlapState {
            awaiting: Some((3, 1)),
            ..OverlapState::default()
        };
        assert!(!o.blocks());
        assert!(o.check(true).is_err(), "awaiting under AllowAll");
        o.policy = Overlap::Skip;
        assert!(o.blocks() && o.check(true).is_ok());
        assert!(o.check(false).is_err());
        assert_eq!(Overlap::BufferOne.buffer_bound(), 1);
        assert_eq!(Overlap::BufferAll.buffer_bound(), MAX_BUFFERED);
        o.buffered = vec![(5, 2), (4, 2)];
        assert!(o.check(true).is_err());
        assert!(check_policy(Overlap::Skip, true).is_err());
        assert!(check_policy(Overlap::AllowAll, true).is_ok());
        assert_eq!(buffered_key(&o), None);
        o.awaiting = None;
        assert_eq!(buffered_key(&o), Some(Due::Time(5)));
    }
}
