//! Proposer reputation: who proposes round 0 of a height.
//!
//! Plain rotation gives round `r` of height `h` to validator `(h - 1 + r) mod n` (the
//! address-ordered set, [`crate::context::proposer_of`]). A validator that never gets its
//! value decided (silent, equivocating, delivering to a subset, proposing invalid blocks) then
//! costs a propose timeout plus vote timeouts every `n` heights. This module skips such a
//! validator **at round 0 only**, for a bounded number of heights, from data every honest node
//! holds identically: the decided blocks.
//!
//! ## The signal: a failed round 0
//!
//! Block `j + 1` carries `prev_round`, the round of the commit of block `j` whose clock samples
//! it carries (a quorum of samples signed at that round checks it): `prev_round > 0` means a
//! quorum precommitted block `j` at a round above 0, so at least f + 1 honest validators left
//! round 0 of height `j` without a decision. Round 0 of `j` is then counted as failed, against
//! the validator plain rotation gives it to (`(j - 1) mod n`, its *slot*). The round of a
//! node's own commit certificate is never used: honest nodes can hold certificates of different
//! rounds for the same value (issue 23, item 1), the decided block's `prev_round` is one value
//! for everyone.
//!
//! ## The rule ([`round0_index`])
//!
//! At height `h`, only the outcomes of heights `j` in `[h - LAG - WINDOW + 1, h - LAG]` count
//! (block `j + 1` is decided by every node that has decided `h - LAG + 1 = h - 3`: a node at
//! height `next` judges parts up to `next + 2`, [`ccron_node::proposals::PartLimits`], and
//! needs their proposers). For each validator `v`: `k` = failed rounds 0 at its slots in the
//! window, `last` = the latest of them; `v` is *skipped* at `h` when `k > 0` and
//! `h - last <= min(BASE_SKIP * 2^(k-1), MAX_SKIP)`, except at its own slot when that slot is
//! an *amnesty* slot (every [`amnesty_period`] heights: its turn whatever its record). The
//! round-0 proposer is the first validator not skipped in rotation order from the plain one;
//! if all are skipped, the plain one. Rounds `>= 1` keep plain rotation.
//!
//! Properties (tests: `tests/reputation.rs`, proptests):
//! - **Same on every node**: a pure function of `n`, `h` and the window's outcomes, which are
//!   read from decided blocks only.
//! - **Honest cluster: plain rotation** (no failed round 0, nobody skipped).
//! - **Nobody excluded forever**: every validator is round-0 proposer at its amnesty slot, at
//!   least once every [`amnesty_period`] heights, whatever the history; and a record older
//!   than `MAX_SKIP` heights skips nobody.
//! - **All failing: plain rotation.**
//! - **Liveness never depends on it**: rounds `>= 1` are plain rotation, so once timeouts grow
//!   past the network delay an honest proposer comes within `n` rounds, as before.
//!
//! ## Safety is untouched
//!
//! Tendermint's agreement and validity hold for any proposer function, even one that differs
//! between nodes: a proposer only suggests a value, and every lock, polka and commit rule is
//! about votes from a quorum (the proof never assumes who proposed). A node that computes a
//! different proposer (e.g. one restored from a snapshot without the window's blocks: unknown
//! outcomes count as not failed) refuses that round's proposal and prevotes nil: a lost round,
//! as before this rule, never a second decision. The engine (Malachite 0.8.2) asks
//! `Context::select_proposer(validator_set, height, round)` only for its current height
//! (`core-consensus` `state.rs` `get_proposer`: start of a height, new rounds, checking a
//! proposal, sync's value), with the validator set the application passed for that height
//! (`HeightParams` in the `ConsensusReady` and `Finalized` replies): the adapter passes the
//! set with this height's round-0 proposer in it ([`crate::context::ValidatorSet::proposer`]).
//!
//! ## A cheaper retry: short round-0 timeouts ([`Round0::timeouts`])
//!
//! Skipping removes most failed rounds, not their price: a validator with a failed record
//! still proposes round 0 at its retries (its skip ran out, its amnesty slot, everybody
//! skipped), and a retry that fails again costs the normal propose timeout plus vote timeouts
//! (1 s + 0.5 s, more when it equivocates) before round 1. At such a *retry height* (the
//! round-0 proposer's record in the window is not empty: [`Round0::record`]) the height's
//! [`HeightParams`](malachitebft_app_channel::app::engine::host::HeightParams) carry
//! [`retry_timeouts`]: round 0 waits [`RETRY_PROPOSE`] for the proposal and [`RETRY_VOTE`]
//! for each vote step; every round `>= 1` waits as long as normally at round 1 and grows at
//! least as fast after. A height whose round-0 proposer has a clean record keeps the normal
//! timeouts as far as this rule goes (an honest cluster never sees the retry ones; the
//! node's observed arrivals may still shorten round 0, [`crate::round0`]). Like the proposer, the choice is a
//! pure function of the decided blocks (the same record), but nothing depends on nodes
//! agreeing on it.
//!
//! - **Safety does not depend on timeouts**: Tendermint's agreement and validity hold in an
//!   asynchronous network, where any message may arrive after any timeout; a timeout only
//!   makes a node prevote or precommit nil or move to the next round, and which of those it
//!   does, when, is a case the proof already covers (a node whose timeouts differ from its
//!   peers', e.g. one restored without the window's blocks, is such a case).
//! - **Liveness holds**: after GST a height decides at the first round whose proposer is
//!   honest and whose timeouts exceed the network's delay. Rounds `>= 1` keep plain rotation
//!   and timeouts at least the normal ones, growing with the round (up to the engine's cap of
//!   `max_timeout`, above any delay the normal timeouts assume), so the argument for the
//!   normal timeouts holds from round 1 on; only round 0 of a retry height is shorter.
//! - **What it costs an honest, slow validator**: a retry it cannot complete in
//!   [`RETRY_PROPOSE`] counts as failed again (its skip doubles, up to [`MAX_SKIP`]); it
//!   still proposes at every round `>= 1` of plain rotation and at its amnesty slots.
//!   [`RETRY_PROPOSE`] is well above a loopback or LAN round (tens of ms); a network whose
//!   proposals take longer should raise it.
//!
//! Every height, retry or not, also gets a round 0 as short as this node's observed proposal
//! arrivals allow ([`crate::round0`]): the first failure of a proposer, which no decided block
//! records yet, is cheap too. A retry's round 0 is the shorter of the two.

use std::time::Duration;

use malachitebft_app_channel::app::types::core::LinearTimeouts;

/// Heights a validator is skipped after its first failed round 0 (doubling with each further
/// one in the window).
pub const BASE_SKIP: u64 = 32;

/// Most heights one failed record skips a validator.
pub const MAX_SKIP: u64 = 256;

/// Outcomes counted: the last `WINDOW` heights up to `h - LAG`.
pub const WINDOW: u64 = 1024;

/// The outcome of height `j` counts from height `j + LAG` on (block `j + 1` decided, and a
/// node two heights behind the part's height has it too).
pub const LAG: u64 = 4;

/// Heights between two amnesty slots of one validator (`n` validators): a multiple of `n`,
/// at least `4 * MAX_SKIP`.
pub fn amnesty_period(n: usize) -> u64 {
    let n = (n as u64).max(1);
    let turns = (4 * MAX_SKIP).div_ceil(n).max(1);
    turns.saturating_mul(n)
}

/// The heights whose outcomes decide height `h`'s round-0 proposer.
pub fn window(h: u64) -> std::ops::RangeInclusive<u64> {
    let hi = h.saturating_sub(LAG);
    let lo = hi.saturating_sub(WINDOW - 1).max(1);
    lo..=hi
}

/// How many heights `k` failed rounds 0 in the window skip a validator for (`k >= 1`).
pub fn skip_for(k: u64) -> u64 {
    let doublings = u32::try_from(k.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(16);
    BASE_SKIP.saturating_mul(1u64 << doublings).min(MAX_SKIP)
}

/// Plain rotation's round-0 validator of height `h` (its slot owner).
pub fn plain_index(n: usize, h: u64) -> usize {
    let n = (n as u64).max(1);
    (h.saturating_sub(1) % n) as usize
}

/// The index (in the address-ordered set of `n`) of the round-0 proposer of height `h`, given
/// `failed(j)`: whether round 0 of height `j` failed (block `j + 1`'s `prev_round > 0`; an
/// unknown outcome is `false`). Called only for `j` in [`window`]`(h)`.
pub fn round0_index(n: usize, h: u64, failed: impl Fn(u64) -> bool) -> usize {
    round0_of_failed(n, h, window(h).filter(|j| failed(*j)))
}

/// [`round0_index`] given the failed heights themselves (those outside [`window`]`(h)` are
/// ignored).
pub fn round0_of_failed(n: usize, h: u64, failed: impl IntoIterator<Item = u64>) -> usize {
    round0_pick(n, h, failed).index
}

/// Height `h`'s round 0: who proposes it and that validator's record in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round0 {
    /// The round-0 proposer's index in the address-ordered set ([`round0_index`]).
    pub index: usize,
    /// Its failed rounds 0 in [`window`]`(h)`: `0` for a clean record. Above 0 the height is a
    /// *retry* (its skip ran out, its amnesty slot, or everybody is skipped): round 0 gets the
    /// short timeouts ([`Round0::timeouts`]).
    pub record: u64,
}

impl Round0 {
    /// Whether round 0 of this height is a retry of a validator with a failed record.
    pub fn is_retry(&self) -> bool {
        self.record > 0
    }

    /// This rule's timeouts for the height: `normal`, or at a retry the same with a short
    /// round 0 ([`retry_timeouts`]). What the engine gets also depends on the node's observed
    /// arrivals ([`crate::round0::height_timeouts`]; without any, exactly these).
    pub fn timeouts(&self, normal: LinearTimeouts) -> LinearTimeouts {
        if self.is_retry() {
            retry_timeouts(normal)
        } else {
            normal
        }
    }
}

/// Round 0's propose timeout at a retry height (the normal one: 1 s).
pub const RETRY_PROPOSE: Duration = Duration::from_millis(200);

/// Round 0's prevote and precommit timeouts at a retry height (normally 500 ms each).
pub const RETRY_VOTE: Duration = Duration::from_millis(100);

/// The timeouts of a retry height: round 0's propose, prevote and precommit timeouts are
/// [`RETRY_PROPOSE`] and [`RETRY_VOTE`] (never above `normal`'s), and every round `r >= 1`
/// waits exactly as long as `normal` at round 1 and at least as long as `normal` after
/// (each delta is raised by what round 0 lost: `base' + delta' = base + delta`). The cap is
/// `normal`'s; the rebroadcast wait is round 0's short length at round 0, `normal`'s at round 1
/// and at least `normal`'s after ([`crate::round0::short_round0`]).
pub fn retry_timeouts(normal: LinearTimeouts) -> LinearTimeouts {
    crate::round0::short_round0(normal, RETRY_PROPOSE, RETRY_VOTE, RETRY_VOTE)
}

/// [`round0_of_failed`] with the chosen validator's record ([`Round0`]).
pub fn round0_pick(n: usize, h: u64, failed: impl IntoIterator<Item = u64>) -> Round0 {
    let plain = plain_index(n, h);
    let clean = |index| Round0 { index, record: 0 };
    if n <= 1 || h <= LAG {
        return clean(plain);
    }
    let nn = n as u64;
    // Per validator: failed rounds 0 at its slots in the window, and the latest.
    let mut count = vec![0u64; n];
    let mut last = vec![0u64; n];
    let w = window(h);
    for j in failed.into_iter().filter(|j| w.contains(j)) {
        let v = plain_index(n, j);
        count[v] += 1;
        last[v] = last[v].max(j);
    }
    let amnesty = (h - 1) % amnesty_period(n) < nn;
    let pick = |index: usize| Round0 {
        index,
        record: count[index],
    };
    for k in 0..n {
        let c = (plain + k) % n;
        if k == 0 && amnesty {
            return pick(c);
        }
        let skipped = count[c] > 0 && h - last[c] <= skip_for(count[c]);
        if !skipped {
            return pick(c);
        }
    }
    pick(plain)
}

/// The failed rounds 0 a node knows, read from its decided blocks: heights `j` whose block
/// `j + 1` has `prev_round > 0`, kept for the heights any [`window`] still needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes {
    failed: std::collections::BTreeSet<u64>,
    /// The lowest height whose outcome is known (block `j + 1` was read): below it, unknown.
    known_from: Option<u64>,
}

impl Outcomes {
    /// Records decided block `height`'s `prev_round` (the outcome of `height - 1`), and forgets
    /// outcomes no window from `height + 1` on needs.
    pub fn record(&mut self, height: u64, prev_round: u32) {
        let Some(j) = height.checked_sub(1).filter(|j| *j >= 1) else {
            return;
        };
        if prev_round > 0 {
            self.failed.insert(j);
        }
        self.known_from = Some(self.known_from.map_or(j, |k| k.min(j)));
        let keep_from = window(height.saturating_add(1)).start().saturating_sub(LAG);
        self.failed = self.failed.split_off(&keep_from);
        if let Some(k) = &mut self.known_from {
            *k = (*k).max(keep_from.min(j));
        }
    }

    /// Whether round 0 of height `j` failed (unknown: `false`).
    pub fn failed(&self, j: u64) -> bool {
        self.failed.contains(&j)
    }

    /// Whether every outcome height `h`'s rule reads is known (`false` right after a restore
    /// from a snapshot without the window's blocks: that node may pick another round-0
    /// proposer than its peers for a while, a lost round 0, never a safety matter).
    pub fn complete_for(&self, h: u64) -> bool {
        let w = window(h);
        if h <= LAG {
            return true;
        }
        self.known_from.is_some_and(|k| k <= *w.start())
    }

    /// The round-0 proposer's index at height `h` among `n` ([`round0_index`]).
    ///
    /// Any `h` (it comes from the network: a part's height): the window of a height up to
    /// [`LAG`] is empty (`1..=0`), which `BTreeSet::range` would panic on, so it is never asked.
    pub fn round0(&self, n: usize, h: u64) -> usize {
        self.round0_pick(n, h).index
    }

    /// [`round0`](Self::round0) with the chosen validator's record ([`round0_pick`]): what
    /// height `h`'s parameters are made of (its proposer and its timeouts).
    pub fn round0_pick(&self, n: usize, h: u64) -> Round0 {
        let w = window(h);
        if w.is_empty() {
            return round0_pick(n, h, std::iter::empty());
        }
        round0_pick(n, h, self.failed.range(w).copied())
    }
}
