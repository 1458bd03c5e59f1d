//! A late joiner's catch-up, timed (`localnet --late-join-at-height H`): the last node starts
//! once the others reach height `H`, and the localnet polls its height against theirs until it
//! holds their top height (within [`CAUGHT_UP_WITHIN`]). With `--retain-blocks` the others
//! pruned below their snapshots, so the late node can only catch up from a peer's verified
//! snapshot and then sync the heights above it (docs/malachite.md, "Catch-up from a peer's
//! snapshot"): the report says how long that took and from which height it started.

use serde::{Deserialize, Serialize};

/// A late node is caught up once its height is at most this many heights below the others'
/// top height at the same poll (one height is in flight at any time).
pub const CAUGHT_UP_WITHIN: u64 = 2;

/// How long a run timed from a height (`--late-join-at-height`) goes on after the late node
/// caught up (ms): long enough to see it keep up.
pub const LATE_JOIN_TAIL_MS: u64 = 5_000;

/// The late joiner's part of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateJoinReport {
    /// The late node's index.
    pub node: usize,
    /// When it was started (ms from the run's start).
    pub started_at_ms: u64,
    /// The others' top height when it was started.
    pub started_at_height: u64,
    /// How long after its start it held the others' top height (within
    /// [`CAUGHT_UP_WITHIN`]); `None`: not within the run.
    pub caught_up_after_ms: Option<u64>,
    /// The others' top height at that poll.
    pub caught_up_at_height: u64,
    /// The height of the peer snapshot it installed before its engine started
    /// (`catchup.json`'s `installed_height`; `None`: it synced from its own store or from
    /// height 1).
    pub installed_height: Option<u64>,
    /// How long fetching, verifying and installing that snapshot took (`catchup.json`'s
    /// `took_ms`).
    pub install_took_ms: Option<u64>,
    /// The late node's newest snapshot file at the end of the run (bytes; 0 when none): the
    /// size of the state an offer carries (the one it installed is gone by then: a node keeps
    /// its two newest).
    pub snapshot_bytes: u64,
    /// The lowest first height of the other nodes' block stores at the end (above 1: they
    /// pruned, so no peer could have served the heights below it).
    pub peers_first_height: u64,
}

/// Watches the late node from its start to its catch-up (pure: the localnet passes its run's
/// milliseconds and the heights it polled).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LateJoinWatch {
    started: Option<(u64, u64)>,
    caught_up: Option<(u64, u64)>,
}

impl LateJoinWatch {
    /// The late node was started at `at_ms`, the others holding `top` then.
    pub fn started(&mut self, at_ms: u64, top: u64) {
        self.started = Some((at_ms, top));
    }

    /// One poll at `at_ms`: the late node holds `late`, the others' top height is `top`.
    pub fn observe(&mut self, at_ms: u64, late: u64, top: u64) {
        if self.caught_up.is_none()
            && let Some((from, _)) = self.started
            && late > 0
            && late.saturating_add(CAUGHT_UP_WITHIN) >= top
        {
            self.caught_up = Some((at_ms.saturating_sub(from), top));
        }
    }

    /// Whether the late node was started and has not caught up yet.
    pub fn pending(&self) -> bool {
        self.started.is_some() && self.caught_up.is_none()
    }

    /// How long ago (at `now_ms`, from the run's start) it caught up, if it did.
    pub fn caught_up_for(&self, now_ms: u64) -> Option<u64> {
        let (from, _) = self.started?;
        let (after, _) = self.caught_up?;
        Some(now_ms.saturating_sub(from.saturating_add(after)))
    }

    /// The report's figures this watch holds (the rest is read from the node's files).
    pub fn report(&self, node: usize) -> LateJoinReport {
        let (started_at_ms, started_at_height) = self.started.unwrap_or_default();
        LateJoinReport {
            node,
            started_at_ms,
            started_at_height,
            caught_up_after_ms: self.caught_up.map(|(after, _)| after),
            caught_up_at_height: self.caught_up.map_or(0, |(_, top)| top),
            ..LateJoinReport::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_up_only_after_the_start_and_within_the_bound() {
        let mut w = LateJoinWatch::default();
        w.observe(100, 50, 50);
        assert!(
            !w.pending() && w.caught_up_for(200).is_none(),
            "not started"
        );
        w.started(1_000, 500);
        assert!(w.pending());
        // Still empty, then far behind, then one height short of the bound.
        w.observe(1_100, 0, 0);
        w.observe(1_500, 400, 520);
        w.observe(2_000, 517, 520);
        assert!(w.pending(), "{w:?}");
        w.observe(2_500, 518, 520);
        assert!(!w.pending());
        assert_eq!(w.caught_up_for(7_500), Some(5_000));
        // A later poll does not move the figure.
        w.observe(3_000, 530, 530);
        let r = w.report(3);
        assert_eq!(
            (
                r.node,
                r.started_at_ms,
                r.started_at_height,
                r.caught_up_after_ms,
                r.caught_up_at_height
            ),
            (3, 1_000, 500, Some(1_500), 520)
        );
    }
}
