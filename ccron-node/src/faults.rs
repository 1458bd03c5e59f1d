//! Process-level faults for the localnet, from a seed: SIGKILL at a random instant (then a
//! restart from the node's storage), SIGSTOP (a paused node) then SIGCONT, one node at a time
//! (at most f = 1 faulty with 4 validators), at random points of the run. The plan is a pure
//! function of the seed and the instants the localnet polls at; the localnet applies it to its
//! child processes and reports every event, so a failing seed is replayed with the same
//! command (`localnet --faults SEED`).

use std::time::Duration;

/// What happens to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL now, restart from storage when it ends.
    Kill,
    /// SIGSTOP now, SIGCONT when it ends.
    Pause,
}

/// One step of the plan the localnet acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultStep {
    /// Start a fault on a node.
    Start(FaultKind, usize),
    /// End the fault on a node (restart it, or continue it).
    End(FaultKind, usize),
}

/// A seeded fault plan (see the module documentation).
#[derive(Debug, Clone)]
pub struct FaultPlan {
    state: u64,
    nodes: usize,
    /// No fault starts after this instant of the run (the nodes get time to catch up).
    last_start: Duration,
    next_start: Duration,
    current: Option<(FaultKind, usize, Duration)>,
}

impl FaultPlan {
    /// A plan over `nodes` nodes for a run of `duration`: faults start from 2 s on and not
    /// later than 5 s before the end.
    pub fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        let mut plan = Self {
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            nodes: nodes.max(1),
            last_start: duration.saturating_sub(Duration::from_secs(5)),
            next_start: Duration::ZERO,
            current: None,
        };
        plan.next_start = Duration::from_millis(2_000 + plan.below(2_000));
        plan
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// The step due at instant `t` of the run, if any (called at every poll).
    pub fn step(&mut self, t: Duration) -> Option<FaultStep> {
        if let Some((kind, node, until)) = self.current {
            if t >= until {
                self.current = None;
                self.next_start = t + Duration::from_millis(500 + self.below(2_000));
                return Some(FaultStep::End(kind, node));
            }
            return None;
        }
        if t < self.next_start || t > self.last_start {
            return None;
        }
        let node = self.below(self.nodes as u64) as usize;
        let kind = if self.below(2) == 0 {
            FaultKind::Kill
        } else {
            FaultKind::Pause
        };
        let hold = Duration::from_millis(300 + self.below(2_700));
        self.current = Some((kind, node, t + hold));
        Some(FaultStep::Start(kind, node))
    }

    /// The fault in progress, if any (the localnet ends it before collecting).
    pub fn current(&self) -> Option<(FaultKind, usize)> {
        self.current.map(|(k, n, _)| (k, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(seed: u64) -> Vec<(u64, FaultStep)> {
        let mut p = FaultPlan::new(seed, 4, Duration::from_secs(30));
        (0..300u64)
            .filter_map(|k| p.step(Duration::from_millis(k * 100)).map(|s| (k, s)))
            .collect()
    }

    #[test]
    fn a_plan_is_a_function_of_its_seed_one_fault_at_a_time() {
        assert_eq!(steps(7), steps(7));
        assert_ne!(steps(7), steps(8));
        let s = steps(7);
        assert!(s.len() >= 6, "{s:?}");
        let mut open: Option<(FaultKind, usize)> = None;
        for (k, step) in &s {
            match *step {
                FaultStep::Start(kind, node) => {
                    assert!(open.is_none(), "two faults at once: {s:?}");
                    assert!(node < 4 && *k >= 20 && *k <= 250, "{s:?}");
                    open = Some((kind, node));
                }
                FaultStep::End(kind, node) => {
                    assert_eq!(open.take(), Some((kind, node)), "{s:?}");
                }
            }
        }
    }
}
