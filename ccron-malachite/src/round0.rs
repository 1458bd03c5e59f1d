//! Round 0 as a fast path: a round-0 propose timeout adapted, per node, to the proposal
//! arrival latencies that node observed.
//!
//! ## Why
//!
//! With the normal timeouts ([`crate::state::timeouts`]: propose 1 s, prevote and precommit
//! 0.5 s) a round 0 whose proposer is silent, withholds its part or equivocates costs about
//! 1.5-2 s before round 1 starts, while an honest height on loopback takes tens of ms. The
//! reputation rule ([`crate::reputation`]) skips such a proposer once a decided block records
//! its failure and retries it with short timeouts, but the **first** failure of a proposer
//! that turns Byzantine is recorded nowhere yet: it waits the normal timeouts, and the fires
//! due during that wait are the p99 of a Byzantine run (docs/malachite.md, "Cheaper
//! retries"). This module makes round 0 cheap at every height: its propose timeout is what
//! this node's own observations say an honest proposal needs, with a margin, and round 1 on
//! gets the normal timeouts as before.
//!
//! ## The rule ([`Arrivals::propose_timeout`])
//!
//! An *arrival* is the time from this node starting round 0 of a height to it holding that
//! round's proposal from the round-0 proposer, judged valid (`0` when the part came before
//! the round started); it is observed once per height, whenever it comes (a part that arrives
//! after the timeout still counts: that is how a slower network raises the timeout again).
//! Per proposer the last [`PER_PROPOSER`] arrivals are kept; each proposer with at least
//! [`MIN_SAMPLES`] of them has its p90. Of the `m` such proposers the `f` highest p90s are
//! dropped (`f = (n - 1) / 3`) and the highest left, `p`, is the estimate: with at most `f`
//! Byzantine proposers it lies between two honest proposers' p90s, so a Byzantine proposer
//! can neither raise everyone's timeout (by streaming late) nor lower it (by streaming
//! early). The round-0 propose timeout is `clamp(FACTOR * p + MARGIN, FLOOR, normal)`; with
//! fewer than `f + 1` proposers measured (a node that just started) it is the normal one.
//! Round 0's prevote and precommit timeouts are half of it, at least [`VOTE_FLOOR`], at most
//! the normal ones; rounds `>= 1` wait exactly as long as normally at round 1 and at least as
//! long after ([`short_round0`]). At a reputation retry height the round-0 timeouts are also
//! at most [`crate::reputation::RETRY_PROPOSE`] / [`crate::reputation::RETRY_VOTE`]
//! ([`height_timeouts`]).
//!
//! The functions here are pure: the node's loop (`crate::node`) measures the arrivals on its
//! monotonic clock and injects them ([`ArrivalWatch`], [`Arrivals::observe`]); given the
//! same observations every function returns the same timeouts.
//!
//! ## Safety is untouched
//!
//! Tendermint's agreement and validity hold in an asynchronous network, where any message may
//! arrive after any timeout: a timeout only makes a node prevote or precommit nil, or move to
//! the next round, and the proof covers every such choice, at any time, by any node. So the
//! timeouts need not agree between nodes (each node's are its own, from its own
//! observations), and no choice of them can make two honest nodes decide differently. A
//! value precommitted by a quorum at round 0 is still decided by a node that already moved to
//! round 1 (the engine's commit rule holds for any round: `core-driver` `mux.rs`,
//! `PrecommitValue` at any round -> `ProposalAndPrecommitValue`), so a short round-0
//! precommit timeout loses no decision either.
//!
//! ## Liveness holds
//!
//! After GST a height decides at the first round whose proposer is honest and whose timeouts
//! exceed the network's delay. Rounds `>= 1` keep plain rotation and the normal timeouts (or
//! longer), growing with the round, so the argument for the normal timeouts holds from round
//! 1 on; only round 0 is shorter.
//!
//! ## What it costs
//!
//! An honest proposal slower than this node's round-0 timeout (a load spike, a slower link
//! than observed) loses round 0: the nodes that timed out prevote nil, the round fails after
//! round 0's short waits, and round 1 (plain rotation, normal timeouts, a re-proposal of a
//! value that got a polka) decides instead: the price is the short round 0 plus one normal
//! round, a few hundred ms on loopback, against the 1.5-2 s a failed round 0 costs with the
//! normal timeouts. The slow proposal's arrival is still observed, so repeated slowness
//! raises the timeout within a few heights (a test: `a_slower_network_is_learned`). The
//! failed round 0 also counts against that proposer in the reputation window (it is skipped
//! for a while at round 0, keeps every round `>= 1` turn and its amnesty slots).

use std::collections::VecDeque;
use std::time::Duration;

use malachitebft_app_channel::app::types::core::LinearTimeouts;

use crate::reputation::{RETRY_PROPOSE, RETRY_VOTE, Round0};

/// Arrivals kept per proposer (the most recent).
pub const PER_PROPOSER: usize = 32;

/// Arrivals a proposer needs before its p90 counts.
pub const MIN_SAMPLES: usize = 4;

/// The timeout is `FACTOR` times the estimated p90 arrival ...
pub const FACTOR: u32 = 2;

/// ... plus `MARGIN` ...
pub const MARGIN: Duration = Duration::from_millis(50);

/// ... and never below `FLOOR` (a scheduling hiccup on a loaded host is tens of ms).
pub const FLOOR: Duration = Duration::from_millis(150);

/// Round 0's prevote and precommit timeouts are never below this.
pub const VOTE_FLOOR: Duration = Duration::from_millis(100);

/// The proposal arrivals one node observed, per proposer (index in the address-ordered
/// validator set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Arrivals {
    /// Per proposer: its most recent arrivals, in ms.
    per: Vec<VecDeque<u64>>,
}

/// The p90 of `samples` (nearest rank: the `ceil(0.9 * len)`-th smallest); `None` if empty.
pub fn p90(samples: impl IntoIterator<Item = u64>) -> Option<u64> {
    let mut v: Vec<u64> = samples.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = (v.len() * 9).div_ceil(10).max(1);
    v.get(rank - 1).copied()
}

impl Arrivals {
    /// Records that round 0's proposal of proposer `index` arrived `latency` after this node
    /// started the round.
    pub fn observe(&mut self, index: usize, latency: Duration) {
        if self.per.len() <= index {
            self.per.resize_with(index + 1, VecDeque::new);
        }
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        let q = &mut self.per[index];
        if q.len() >= PER_PROPOSER {
            q.pop_front();
        }
        q.push_back(ms);
    }

    /// The arrivals held of proposer `index`, oldest first.
    pub fn of(&self, index: usize) -> impl Iterator<Item = u64> + '_ {
        self.per.get(index).into_iter().flatten().copied()
    }

    /// Each measured proposer's p90 (those with at least [`MIN_SAMPLES`] arrivals), by index.
    pub fn p90s(&self) -> Vec<(usize, u64)> {
        self.per
            .iter()
            .enumerate()
            .filter(|(_, q)| q.len() >= MIN_SAMPLES)
            .filter_map(|(i, q)| p90(q.iter().copied()).map(|p| (i, p)))
            .collect()
    }

    /// The estimate among `n` validators: of the measured proposers' p90s, the `f` highest
    /// dropped, the highest left (`None` with `f` or fewer measured).
    pub fn estimate(&self, n: usize) -> Option<Duration> {
        let f = n.saturating_sub(1) / 3;
        let mut p: Vec<u64> = self.p90s().into_iter().map(|(_, p)| p).collect();
        if p.len() <= f {
            return None;
        }
        p.sort_unstable();
        p.get(p.len() - 1 - f).copied().map(Duration::from_millis)
    }

    /// Round 0's propose timeout among `n` validators, given the `normal` one:
    /// `clamp(FACTOR * estimate + MARGIN, FLOOR, normal)`, `normal` without an estimate.
    pub fn propose_timeout(&self, n: usize, normal: Duration) -> Duration {
        match self.estimate(n) {
            Some(p) => p
                .saturating_mul(FACTOR)
                .saturating_add(MARGIN)
                .max(FLOOR)
                .min(normal),
            None => normal,
        }
    }
}

/// Round 0's vote timeout for a round-0 propose timeout `propose`: half of it, at least
/// [`VOTE_FLOOR`], at most `normal`.
pub fn vote_timeout(propose: Duration, normal: Duration) -> Duration {
    (propose / 2).max(VOTE_FLOOR).min(normal)
}

/// `normal` with round 0's propose, prevote and precommit timeouts at most `propose`,
/// `prevote` and `precommit`, and every round `r >= 1` waiting exactly as long as `normal`
/// at round 1 and at least as long as `normal` after (each delta is raised by what round 0
/// lost: `base' + delta' = base + delta`). The cap is `normal`'s. The rebroadcast base is
/// lowered by what round 0 lost (no lower than the short round 0's length, no higher than
/// `normal`'s): the engine grows the rebroadcast wait by the sum of the deltas, which round 0's
/// loss raised, so round 1 rebroadcasts exactly when it normally does and every later round
/// no earlier, and round 0 rebroadcasts after its own, short, length (a vote lost in a
/// reconnect gap at round 1 is sent again after the normal wait, not the normal wait plus what
/// round 0 saved: issue 23's net seeds, docs/malachite.md). With every short value at or above
/// `normal`'s: `normal`.
pub fn short_round0(
    normal: LinearTimeouts,
    propose: Duration,
    prevote: Duration,
    precommit: Duration,
) -> LinearTimeouts {
    let cut = |base: Duration, delta: Duration, short: Duration| {
        let b = short.min(base);
        (b, delta.saturating_add(base.saturating_sub(b)))
    };
    let (propose, propose_delta) = cut(normal.propose, normal.propose_delta, propose);
    let (prevote, prevote_delta) = cut(normal.prevote, normal.prevote_delta, prevote);
    let (precommit, precommit_delta) = cut(normal.precommit, normal.precommit_delta, precommit);
    let lost = [
        (normal.propose, propose),
        (normal.prevote, prevote),
        (normal.precommit, precommit),
    ]
    .iter()
    .fold(Duration::ZERO, |acc, (n, s)| {
        acc.saturating_add(n.saturating_sub(*s))
    });
    let round0 = propose.saturating_add(prevote).saturating_add(precommit);
    let rebroadcast = normal
        .rebroadcast
        .saturating_sub(lost)
        .max(round0)
        .min(normal.rebroadcast);
    LinearTimeouts {
        propose,
        propose_delta,
        prevote,
        prevote_delta,
        precommit,
        precommit_delta,
        rebroadcast,
        ..normal
    }
}

/// The timeouts of a height among `n` validators whose round 0 is `pick`: round 0 as short as
/// this node's arrivals allow ([`Arrivals::propose_timeout`], [`vote_timeout`]), and at a
/// reputation retry ([`Round0::is_retry`]) at most [`RETRY_PROPOSE`] / [`RETRY_VOTE`];
/// rounds `>= 1` as [`short_round0`] says. No arrivals and no retry: `normal`.
pub fn height_timeouts(
    normal: LinearTimeouts,
    n: usize,
    pick: Round0,
    arrivals: &Arrivals,
) -> LinearTimeouts {
    let mut propose = arrivals.propose_timeout(n, normal.propose);
    let mut prevote = vote_timeout(propose, normal.prevote);
    let mut precommit = vote_timeout(propose, normal.precommit);
    if pick.is_retry() {
        propose = propose.min(RETRY_PROPOSE);
        prevote = prevote.min(RETRY_VOTE);
        precommit = precommit.min(RETRY_VOTE);
    }
    short_round0(normal, propose, prevote, precommit)
}

/// When this node started round 0 of its current height, and whether its proposal's arrival
/// was observed yet: the loop feeds it its monotonic clock (`now_ms`), it answers the arrival
/// to observe ([`Arrivals::observe`]), once per height.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrivalWatch {
    /// The height whose round 0 started, and when (ms on the loop's monotonic clock).
    started: Option<(u64, u64)>,
    /// That height's arrival was observed.
    observed: bool,
}

impl ArrivalWatch {
    /// Round `round` of `height` started at `now_ms` (only round 0 matters).
    pub fn started(&mut self, height: u64, round: u32, now_ms: u64) {
        if round == 0 {
            self.started = Some((height, now_ms));
            self.observed = false;
        }
    }

    /// Round `round`'s proposal of `height` arrived at `now_ms`: the latency to observe, if it
    /// is round 0's of the height whose round 0 started and the first one (`0` if it came
    /// before the round started, i.e. held early and judged at the start).
    pub fn arrived(&mut self, height: u64, round: u32, now_ms: u64) -> Option<Duration> {
        let (h, t0) = self.started?;
        if round != 0 || h != height || self.observed {
            return None;
        }
        self.observed = true;
        Some(Duration::from_millis(now_ms.saturating_sub(t0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::timeouts;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn fill(a: &mut Arrivals, index: usize, samples: &[u64]) {
        for s in samples {
            a.observe(index, ms(*s));
        }
    }

    #[test]
    fn p90_is_the_nearest_rank() {
        assert_eq!(p90([]), None);
        assert_eq!(p90([7]), Some(7));
        assert_eq!(p90(1..=10), Some(9));
        assert_eq!(p90(1..=20), Some(18));
        assert_eq!(p90([5, 1, 3]), Some(5));
    }

    #[test]
    fn no_arrivals_keep_the_normal_timeouts() {
        let a = Arrivals::default();
        let clean = Round0 {
            index: 1,
            record: 0,
        };
        assert_eq!(height_timeouts(timeouts(), 4, clean, &a), timeouts());
        // One proposer measured among 4 (f = 1): no estimate yet.
        let mut a = Arrivals::default();
        fill(&mut a, 1, &[10; 8]);
        assert_eq!(a.estimate(4), None);
        assert_eq!(height_timeouts(timeouts(), 4, clean, &a), timeouts());
    }

    #[test]
    fn fast_arrivals_give_a_short_round0_and_a_normal_round1() {
        let mut a = Arrivals::default();
        for i in 1..4 {
            fill(&mut a, i, &[20, 30, 40, 25, 35]);
        }
        let clean = Round0 {
            index: 1,
            record: 0,
        };
        let t = height_timeouts(timeouts(), 4, clean, &a);
        // p90 40 ms: 2 * 40 + 50 = 130, below the floor.
        assert_eq!(t.propose, FLOOR);
        assert_eq!(t.prevote, VOTE_FLOOR);
        assert_eq!(t.precommit, VOTE_FLOOR);
        let n = timeouts();
        assert_eq!(t.propose + t.propose_delta, n.propose + n.propose_delta);
        assert_eq!(
            t.precommit + t.precommit_delta,
            n.precommit + n.precommit_delta
        );
        // Rebroadcast: after round 0's short length at round 0, as normally at round 1 (it was
        // 2 s + what round 0 saved, 4.35 s at a retry height: net seed 186's stalled round 1).
        let rebroadcast = |t: &LinearTimeouts, r: u32| {
            t.duration_for(malachitebft_core_types::Timeout::rebroadcast(
                malachitebft_core_types::Round::new(r),
            ))
        };
        assert_eq!(rebroadcast(&t, 0), FLOOR + VOTE_FLOOR + VOTE_FLOOR);
        assert_eq!(rebroadcast(&t, 1), rebroadcast(&n, 1));
        assert!(rebroadcast(&t, 2) >= rebroadcast(&n, 2));
        // Slower arrivals: 2 * 300 + 50.
        let mut b = Arrivals::default();
        for i in 0..3 {
            fill(&mut b, i, &[300; 6]);
        }
        let t = height_timeouts(timeouts(), 4, clean, &b);
        assert_eq!(t.propose, ms(650));
        assert_eq!(t.prevote, ms(325));
        // Slower still: never above normal.
        let mut c = Arrivals::default();
        for i in 0..3 {
            fill(&mut c, i, &[900; 6]);
        }
        assert_eq!(height_timeouts(timeouts(), 4, clean, &c), timeouts());
    }

    #[test]
    fn one_byzantine_proposer_moves_the_estimate_within_the_honest_ones() {
        let mut a = Arrivals::default();
        fill(&mut a, 1, &[40; 8]);
        fill(&mut a, 2, &[60; 8]);
        fill(&mut a, 3, &[50; 8]);
        assert_eq!(a.estimate(4), Some(ms(50)));
        // Proposer 0 streams just before everyone's normal timeout: dropped as the highest.
        let mut late = a.clone();
        fill(&mut late, 0, &[990; 8]);
        assert_eq!(late.estimate(4), Some(ms(60)));
        // ... or at once (0 ms): the estimate stays an honest one.
        let mut early = a.clone();
        fill(&mut early, 0, &[0; 8]);
        assert_eq!(early.estimate(4), Some(ms(50)));
    }

    #[test]
    fn a_retry_is_never_longer_than_the_retry_timeouts() {
        let retry = Round0 {
            index: 0,
            record: 2,
        };
        let t = height_timeouts(timeouts(), 4, retry, &Arrivals::default());
        assert_eq!(t, crate::reputation::retry_timeouts(timeouts()));
        let mut a = Arrivals::default();
        for i in 0..4 {
            fill(&mut a, i, &[10; 4]);
        }
        let t = height_timeouts(timeouts(), 4, retry, &a);
        assert_eq!(t.propose, FLOOR.min(RETRY_PROPOSE));
        assert_eq!(t.prevote, VOTE_FLOOR.min(RETRY_VOTE));
    }

    #[test]
    fn the_watch_observes_round0_once_per_height() {
        let mut w = ArrivalWatch::default();
        assert_eq!(w.arrived(5, 0, 100), None, "no round started");
        w.started(5, 0, 1_000);
        assert_eq!(w.arrived(5, 1, 1_010), None, "round 1's proposal");
        assert_eq!(w.arrived(6, 0, 1_010), None, "another height");
        assert_eq!(w.arrived(5, 0, 1_042), Some(ms(42)));
        assert_eq!(w.arrived(5, 0, 1_050), None, "once");
        w.started(5, 1, 2_000);
        assert_eq!(
            w.arrived(5, 0, 2_010),
            None,
            "still once after round 1 started"
        );
        w.started(6, 0, 3_000);
        assert_eq!(w.arrived(6, 0, 2_990), Some(ms(0)), "held early: 0");
    }

    #[test]
    fn a_slower_network_is_learned() {
        // Loopback arrivals, then every proposal takes 400 ms (each arrival observed even
        // though round 0 timed out before it): within a few heights per proposer the
        // timeout exceeds 400 ms again.
        let mut a = Arrivals::default();
        for i in 0..4 {
            fill(&mut a, i, &[20; PER_PROPOSER]);
        }
        assert_eq!(a.propose_timeout(4, ms(1_000)), FLOOR);
        let mut heights = 0;
        for h in 0u64.. {
            if a.propose_timeout(4, ms(1_000)) > ms(400) {
                break;
            }
            a.observe((h % 4) as usize, ms(400));
            heights += 1;
        }
        // p90 of 32 samples turns with 4 slow ones: 3 proposers (f dropped) x 4.
        assert!(heights <= 4 * 4, "{heights} heights to learn");
    }
}
