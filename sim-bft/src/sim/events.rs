//! What happened where in a run, event by event: every cron action each replica ran (from the
//! [`FireNote`]s of its `Executed` observations), the spans of batches a replica skipped by state
//! transfer ([`MarkKind::StateTransferred`]: the actions of those batches ran on the replicas
//! that executed them, and this replica holds their effects through the snapshot it installed),
//! crashes, restarts and view changes.
//!
//! The simulator keeps these as observations: they do not enter the trace hash and change
//! nothing in a run. They are bounded ([`MAX_FIRE_EVENTS`], [`MAX_REPLICA_MARKS`]); what does
//! not fit is counted as dropped, and the report says so. The JSON report carries them on request
//! (`sim-bft run --fire-events`), and [`crate::timeline`] draws them.

use serde::Serialize;

use crate::node::{FireNote, Millis, NodeId};

/// Fire events kept per run; later ones are counted in [`SimEvents::fires_dropped`].
pub const MAX_FIRE_EVENTS: usize = 100_000;
/// Crash, restart and view-change marks kept per run; later ones are counted in
/// [`SimEvents::marks_dropped`].
pub const MAX_REPLICA_MARKS: usize = 10_000;

/// One cron action one replica ran, the first time it executed the batch (re-executions after a
/// restart are not repeated; actions of batches a replica skipped by state transfer are not
/// here: a [`MarkKind::StateTransferred`] mark covers those batches instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FireEvent {
    /// The replica.
    pub replica: NodeId,
    /// Component of the tick.
    pub component: u32,
    /// Position of the entry in the component's table (a schedule book's own position for its
    /// runs).
    pub position: u32,
    /// The schedule id, for runs of a schedule book.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<u64>,
    /// Sequence number of the batch that ran it.
    pub seq: u64,
    /// Agreed time of that batch, ms (absent without the time service).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreed_time_ms: Option<Millis>,
    /// The due instant it ran for, ms (time-based schedules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<Millis>,
    /// The due sequence number it ran for (sequence-based schedules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_seq: Option<u64>,
    /// Agreed time minus due instant, ms (when both are known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lateness_ms: Option<i64>,
    /// Simulated time at which the replica executed it, ms since the start.
    pub sim_ms: u64,
}

impl FireEvent {
    /// The event of `note`, run by `replica` in batch `seq` at agreed time `agreed`.
    pub fn new(
        replica: NodeId,
        seq: u64,
        agreed: Option<Millis>,
        sim_ms: u64,
        note: &FireNote,
    ) -> Self {
        let (due_ms, due_seq) = match note.due {
            Some(ccron::Due::Time(t)) => (Some(t), None),
            Some(ccron::Due::Seq(s)) => (None, Some(s)),
            None => (None, None),
        };
        Self {
            replica,
            component: note.component,
            position: note.position,
            schedule: note.schedule,
            seq,
            agreed_time_ms: agreed,
            due_ms,
            due_seq,
            lateness_ms: match (agreed, due_ms) {
                (Some(a), Some(d)) => Some(a.saturating_sub(d)),
                _ => None,
            },
            sim_ms,
        }
    }

    /// The report's key for its action, `"<component>/<position>"`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.component, self.position)
    }
}

/// What happened to a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum MarkKind {
    /// The simulator crashed it.
    Crash,
    /// The simulator restarted it (from its disk).
    Restart,
    /// It moved to `view`.
    ViewChange {
        /// The new view.
        view: u64,
    },
    /// It caught up by state transfer: it never executed batches `from_seq..=to_seq` (both
    /// inclusive) and holds their effects through the snapshot it installed. Their cron
    /// actions ran on the replicas that executed them (their [`FireEvent`]s); this replica has
    /// none for them. Recorded when the replica executes the batch after the span, or at the
    /// end of the run when it executed nothing after the install.
    StateTransferred {
        /// The first batch skipped.
        from_seq: u64,
        /// The last batch skipped (the snapshot's sequence number).
        to_seq: u64,
    },
}

/// A crash, restart or view change of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplicaMark {
    /// The replica.
    pub replica: NodeId,
    /// Simulated time, ms since the start.
    pub sim_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: MarkKind,
}

/// The events of a run (bounded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SimEvents {
    /// Cron actions run, in the order the replicas executed them.
    pub fires: Vec<FireEvent>,
    /// Fire events not kept (beyond [`MAX_FIRE_EVENTS`]).
    pub fires_dropped: u64,
    /// Crashes, restarts, view changes and state-transferred spans, in order.
    pub marks: Vec<ReplicaMark>,
    /// Marks not kept (beyond [`MAX_REPLICA_MARKS`]).
    pub marks_dropped: u64,
}

impl SimEvents {
    /// Records a fire event (or counts it as dropped when full).
    pub fn fire(&mut self, e: FireEvent) {
        if self.fires.len() < MAX_FIRE_EVENTS {
            self.fires.push(e);
        } else {
            if self.fires_dropped == 0 {
                tracing::warn!(cap = MAX_FIRE_EVENTS, "fire events full: counting the rest");
            }
            self.fires_dropped = self.fires_dropped.saturating_add(1);
        }
    }

    /// Records a replica mark (or counts it as dropped when full).
    pub fn mark(&mut self, replica: NodeId, sim_ms: u64, kind: MarkKind) {
        if self.marks.len() < MAX_REPLICA_MARKS {
            self.marks.push(ReplicaMark {
                replica,
                sim_ms,
                kind,
            });
        } else {
            if self.marks_dropped == 0 {
                tracing::warn!(
                    cap = MAX_REPLICA_MARKS,
                    "replica marks full: counting the rest"
                );
            }
            self.marks_dropped = self.marks_dropped.saturating_add(1);
        }
    }

    /// The spans of batches `replica` skipped by state transfer, `(from_seq, to_seq)` both
    /// inclusive, in order.
    pub fn transferred(&self, replica: NodeId) -> Vec<(u64, u64)> {
        self.marks
            .iter()
            .filter(|m| m.replica == replica)
            .filter_map(|m| match m.kind {
                MarkKind::StateTransferred { from_seq, to_seq } => Some((from_seq, to_seq)),
                _ => None,
            })
            .collect()
    }

    /// Whether `replica`'s events account for batch `seq` by a state transfer (its fire events
    /// then come from the replicas that executed it).
    pub fn skipped(&self, replica: NodeId, seq: u64) -> bool {
        self.transferred(replica)
            .iter()
            .any(|(from, to)| (*from..=*to).contains(&seq))
    }

    /// View changes recorded for `replica`.
    pub fn view_changes(&self, replica: NodeId) -> u64 {
        self.marks
            .iter()
            .filter(|m| m.replica == replica && matches!(m.kind, MarkKind::ViewChange { .. }))
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fire_event_derives_due_and_lateness() {
        let n = FireNote {
            component: 1,
            position: 2,
            schedule: None,
            due: Some(ccron::Due::Time(1_000)),
        };
        let e = FireEvent::new(3, 7, Some(1_250), 40, &n);
        assert_eq!(
            (e.due_ms, e.due_seq, e.lateness_ms),
            (Some(1_000), None, Some(250))
        );
        assert_eq!(e.key(), "1/2");
        let s = FireNote {
            due: Some(ccron::Due::Seq(5)),
            ..n
        };
        let e = FireEvent::new(3, 7, None, 40, &s);
        assert_eq!((e.due_ms, e.due_seq, e.lateness_ms), (None, Some(5), None));
    }

    #[test]
    fn events_are_bounded_and_the_rest_counted() {
        let mut ev = SimEvents::default();
        for i in 0..(MAX_REPLICA_MARKS as u64 + 3) {
            ev.mark(0, i, MarkKind::ViewChange { view: i });
        }
        assert_eq!(ev.marks.len(), MAX_REPLICA_MARKS);
        assert_eq!(ev.marks_dropped, 3);
        assert_eq!(ev.view_changes(0), MAX_REPLICA_MARKS as u64);
        assert_eq!(ev.view_changes(1), 0);
    }

    #[test]
    fn transferred_spans_are_read_back_per_replica() {
        let mut ev = SimEvents::default();
        ev.mark(2, 10, MarkKind::Crash);
        ev.mark(
            2,
            50,
            MarkKind::StateTransferred {
                from_seq: 4,
                to_seq: 9,
            },
        );
        ev.mark(
            1,
            60,
            MarkKind::StateTransferred {
                from_seq: 1,
                to_seq: 2,
            },
        );
        assert_eq!(ev.transferred(2), vec![(4, 9)]);
        assert!(ev.skipped(2, 4) && ev.skipped(2, 9));
        assert!(!ev.skipped(2, 3) && !ev.skipped(2, 10) && !ev.skipped(0, 5));
    }
}
