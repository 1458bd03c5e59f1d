//! Known schedules: the plug-in point of the due index.
//!
//! An entry whose rule is a [`Schedule`] (rather than arbitrary user code) is *indexed*: the
//! table keeps it in a due index ordered by ([`Due`], position) and a tick only visits the
//! entries whose key it has reached. Periodic actions on agreed time
//! ([`Periodic`](crate::Periodic)) and every-N-sequence-numbers ([`EverySeq`]) are built in;
//! cron expressions and one-shot delays plug in by implementing [`Schedule`] and registering
//! with [`CronEntry::scheduled`](crate::CronEntry::scheduled). The table persists each indexed
//! entry's next [`Due`] in its page range, so every kind survives restarts and state transfers.

use std::fmt;
use std::num::NonZeroU64;

use crate::tick::{Tick, TimeMs};

/// When an indexed entry is due: at an agreed time, or at a consensus sequence number.
///
/// Ordered (all times before all sequence numbers, then by value) only so that one ordered set
/// can hold both kinds; a tick queries the two ranges separately.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, bincode::Encode, bincode::Decode,
)]
pub enum Due {
    /// Due on the first tick whose agreed time is at or after this (never without time).
    Time(TimeMs),
    /// Due on the first tick whose sequence number is at or after this.
    Seq(u64),
}

impl Due {
    /// Whether `tick` has reached this point (inclusive).
    pub fn reached_by(&self, tick: &Tick) -> bool {
        match *self {
            Due::Time(t) => tick.agreed_time_ms.is_some_and(|now| now >= t),
            Due::Seq(s) => tick.bft_sequence_num >= s,
        }
    }

    /// The time, for a time point.
    pub fn time_ms(&self) -> Option<TimeMs> {
        match *self {
            Due::Time(t) => Some(t),
            Due::Seq(_) => None,
        }
    }

    /// The sequence number, for a sequence point.
    pub fn seq(&self) -> Option<u64> {
        match *self {
            Due::Time(_) => None,
            Due::Seq(s) => Some(s),
        }
    }
}

/// A known schedule: what the due index needs to evaluate an entry without calling user code.
///
/// The contract, which the table checks with debug assertions and the property tests check
/// against the linear reference:
/// - `step` returns `Some` only when `due_key(stored)` is reached by the tick (otherwise the
///   indexed evaluation, which never visits the entry, and the linear one would disagree);
/// - the next due it returns is *not* reached by the same tick (so a repeated tick, as when
///   several replicas' ticks land in one batch, runs nothing: idempotence);
/// - both are pure functions of their arguments (replicas must agree).
pub trait Schedule: Send + fmt::Debug + 'static {
    /// The index key given the stored next due point (`None`: never ran, or a stored point of
    /// another kind, which a schedule must treat as never ran).
    fn due_key(&self, stored: Option<Due>) -> Due;

    /// What `tick` does: `None` when not due (nothing changes); otherwise the new next due
    /// point, after pushing onto `runs` the due point of every run of the action (possibly
    /// none: the tick only moves the schedule).
    fn step(&self, stored: Option<Due>, tick: &Tick, runs: &mut Vec<Due>) -> Option<Due>;

    /// Bytes identifying the schedule's parameters (for the registry's setup digest).
    fn fingerprint(&self) -> Vec<u8>;

    /// Why an entry whose stored next due point is `stored` can never run again, or `None`
    /// while it can (the default: a schedule without an end). The table reports the step that
    /// stores such a point as a retirement ([`crate::entry::EntryRetired`]); a pure function
    /// of the schedule and `stored`, like the others.
    fn retirement(&self, stored: Option<Due>) -> Option<crate::entry::EntryEnd> {
        let _ = stored;
        None
    }

    /// The schedule's parameters as the read API reports them
    /// ([`crate::schedule::query::EntryRule`]); `None` (the default): it cannot be described
    /// (reported as an opaque schedule).
    fn describe(&self) -> Option<crate::schedule::query::EntryRule> {
        None
    }

    /// A copy of the schedule, for the read API's preview of a table entry's upcoming
    /// instants ([`crate::schedule::query::describe_entry`]); `None` (the default): not
    /// computable. A copy must step exactly as the original.
    fn clone_schedule(&self) -> Option<Box<dyn Schedule>> {
        None
    }

    /// The UTC offset, seconds, of the schedule's zone at `time_ms` (for previews shown in
    /// local time); 0 (the default) for schedules without a zone.
    fn utc_offset_s(&self, time_ms: TimeMs) -> i32 {
        let _ = time_ms;
        0
    }
}

/// Runs every `every` sequence numbers: at once on the first tick (time not needed), then on the
/// grid `first + k·every`; a tick past several grid points runs once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EverySeq {
    every: NonZeroU64,
}

impl EverySeq {
    /// Every `every` sequence numbers.
    pub fn new(every: NonZeroU64) -> Self {
        Self { every }
    }

    /// The interval in sequence numbers.
    pub fn every(&self) -> NonZeroU64 {
        self.every
    }
}

impl Schedule for EverySeq {
    fn due_key(&self, stored: Option<Due>) -> Due {
        match stored {
            Some(Due::Seq(s)) => Due::Seq(s),
            _ => Due::Seq(0),
        }
    }

    fn step(&self, stored: Option<Due>, tick: &Tick, runs: &mut Vec<Due>) -> Option<Due> {
        let seq = tick.bft_sequence_num;
        let n = self.every.get();
        let (due, latest, next) = match stored {
            Some(Due::Seq(d)) => {
                if seq < d {
                    return None;
                }
                let k = (seq - d) / n;
                let latest = d.saturating_add(k.saturating_mul(n));
                (d, latest, latest.saturating_add(n))
            }
            _ => (seq, seq, seq.saturating_add(n)),
        };
        debug_assert!(due <= latest && latest <= seq);
        runs.push(Due::Seq(latest));
        Some(Due::Seq(next))
    }

    fn fingerprint(&self) -> Vec<u8> {
        let mut v = b"every-seq".to_vec();
        v.extend_from_slice(&self.every.get().to_le_bytes());
        v
    }

    fn describe(&self) -> Option<crate::schedule::query::EntryRule> {
        Some(crate::schedule::query::EntryRule::EverySeq {
            every: self.every.get(),
        })
    }

    fn clone_schedule(&self) -> Option<Box<dyn Schedule>> {
        Some(Box::new(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seq_runs_at_once_then_on_its_grid() {
        let s = EverySeq::new(NonZeroU64::new(10).unwrap());
        let mut runs = Vec::new();
        let t = |seq| Tick::new(1, seq, None);
        assert_eq!(s.due_key(None), Due::Seq(0));
        assert_eq!(s.step(None, &t(3), &mut runs), Some(Due::Seq(13)));
        assert_eq!(s.step(Some(Due::Seq(13)), &t(12), &mut runs), None);
        assert_eq!(
            s.step(Some(Due::Seq(13)), &t(35), &mut runs),
            Some(Due::Seq(43))
        );
        assert_eq!(runs, [Due::Seq(3), Due::Seq(33)]);
        // A stored time point (another kind) counts as never ran.
        assert_eq!(s.due_key(Some(Due::Time(5))), Due::Seq(0));
    }

    #[test]
    fn reached_by_is_inclusive_and_time_needs_time() {
        let t = Tick::new(1, 7, Some(100));
        assert!(Due::Time(100).reached_by(&t));
        assert!(!Due::Time(101).reached_by(&t));
        assert!(Due::Seq(7).reached_by(&t));
        assert!(!Due::Seq(8).reached_by(&t));
        assert!(!Due::Time(TimeMs::MIN).reached_by(&Tick::new(1, 7, None)));
    }
}
