//! Proposer reputation (`ccron_malachite::reputation`): the round-0 proposer is a pure
//! function of the decided history, the same on every node that holds the window's blocks;
//! nobody is excluded forever; an honest cluster keeps plain rotation; a validator whose round
//! 0 keeps failing loses few rounds. And the engine is told exactly what the node checks parts
//! against (`State::params`, `State::proposer`).

mod support;

use std::path::{Path, PathBuf};

use ccron::host::Application;
use ccron_malachite::context::{Ctx, Height, ValidatorSet, proposer_of};
use std::time::Duration;

use ccron_malachite::reputation::{
    BASE_SKIP, LAG, MAX_SKIP, Outcomes, RETRY_PROPOSE, RETRY_VOTE, WINDOW, amnesty_period,
    plain_index, retry_timeouts, round0_index, round0_pick, skip_for, window,
};
use ccron_malachite::state::{State, timeouts};
use ccron_node::{Factory, NodeOptions};
use malachitebft_core_types::{Context as _, LinearTimeouts, Round, Timeout};
use proptest::prelude::*;

/// The engine's wait for `kind` at round `r` under `t` (`LinearTimeouts::duration_for`, what
/// the engine calls when it schedules a timeout).
fn wait(t: &LinearTimeouts, kind: fn(Round) -> Timeout, r: u32) -> Duration {
    t.duration_for(kind(Round::new(r)))
}

/// What a failed round 0 whose proposer sent nothing costs before round 1: the propose
/// timeout, then (nil prevotes and precommits from a quorum) the precommit timeout.
fn silent_round0_cost(t: &LinearTimeouts) -> Duration {
    wait(t, Timeout::propose, 0) + wait(t, Timeout::precommit, 0)
}

/// The failed heights of `bits` in `window(h)` at `v`'s slots.
fn record_of(n: usize, h: u64, v: usize, bits: &[bool]) -> u64 {
    window(h)
        .filter(|j| bits.get(*j as usize).copied().unwrap_or(false) && plain_index(n, *j) == v)
        .count() as u64
}

/// `failed(j)` from a bit vector (index `j`; beyond it, not failed).
fn from_bits(bits: &[bool]) -> impl Fn(u64) -> bool + '_ {
    move |j| bits.get(j as usize).copied().unwrap_or(false)
}

/// A node's outcomes after deciding blocks `from..=last` of a chain whose round 0 of height
/// `j` failed iff `bits[j]` (block `j + 1`'s `prev_round` is then 1 or more).
fn node_outcomes(bits: &[bool], from: u64, last: u64, round: u32) -> Outcomes {
    let mut o = Outcomes::default();
    for h in from.max(1)..=last {
        let failed = bits.get((h - 1) as usize).copied().unwrap_or(false) && h >= 2;
        o.record(h, if failed { round } else { 0 });
    }
    o
}

fn keys(n: usize) -> Vec<[u8; 32]> {
    (0..n)
        .map(|i| {
            let mut k = [0u8; 32];
            k[0] = i as u8;
            k[1] = 0xa5;
            k
        })
        .collect()
}

/// A timeout kind's constructor (`Timeout::propose`, ...).
type TimeoutOf = fn(Round) -> Timeout;
proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Two nodes that decided different stretches of the same chain (one from genesis, one
    /// restored with only the window's blocks, each up to any of the three heights below `h`)
    /// pick the same round-0 proposer at `h`, the rule's on the whole history; the engine's
    /// `select_proposer` on the set carrying it names it at round 0 and plain rotation at every
    /// other round and height.
    #[test]
    fn all_nodes_with_the_same_decided_history_pick_the_same_proposer(
        n in 1usize..=10,
        bits in proptest::collection::vec(proptest::bool::weighted(0.2), 1..1400),
        h in 1u64..1500,
        ahead_a in 0u64..3,
        ahead_b in 0u64..3,
        round in 1u32..5,
    ) {
        // A node at height `next` (decided `next - 1`) judges parts up to `next + 2`: it
        // answers for `h` when it decided `h - 3`, `h - 2` or `h - 1`.
        let last_a = h.saturating_sub(3) + ahead_a;
        let last_b = h.saturating_sub(3) + ahead_b;
        let from_b = window(h).start().saturating_add(1);
        let a = node_outcomes(&bits, 1, last_a, round);
        let b = node_outcomes(&bits, from_b, last_b, round);
        let rule = round0_index(n, h, from_bits(&bits));
        prop_assert_eq!(a.round0(n, h), rule);
        prop_assert_eq!(b.round0(n, h), rule);
        // The height's timeouts too (not needed for safety, but the same on every node).
        let pick = round0_pick(n, h, window(h).filter(|j| from_bits(&bits)(*j)));
        prop_assert_eq!(a.round0_pick(n, h), pick);
        prop_assert_eq!(b.round0_pick(n, h), pick);
        prop_assert!(b.complete_for(h) || h <= LAG);
        let set = ValidatorSet::new(&keys(n)).for_height(Height(h), rule);
        let ctx = Ctx;
        prop_assert_eq!(
            ctx.select_proposer(&set, Height(h), Round::new(0)).address,
            set.validators[rule].address
        );
        for r in 1..(2 * n as u32 + 1) {
            // Rounds >= 1: plain rotation, whatever the record.
            prop_assert_eq!(
                ctx.select_proposer(&set, Height(h), Round::new(r)).address,
                proposer_of(&set, Height(h), Round::new(r)).address
            );
        }
        // Another height than the set's: plain rotation.
        prop_assert_eq!(
            ctx.select_proposer(&set, Height(h + 1), Round::new(0)).address,
            proposer_of(&set, Height(h + 1), Round::new(0)).address
        );
    }

    /// Whatever the history (every round 0 failing included), every validator is round-0
    /// proposer at least once in any `amnesty_period(n)` consecutive heights.
    #[test]
    fn no_validator_is_excluded_forever(
        n in 1usize..=10,
        density in 0.0f64..=1.0,
        seed in any::<u64>(),
    ) {
        let mut x = seed | 1;
        let bits: Vec<bool> = (0..2000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 1000) as f64 / 1000.0 < density
            })
            .collect();
        let period = amnesty_period(n);
        let mut last_turn = vec![0u64; n];
        for h in 1..2000u64 {
            let p = round0_index(n, h, from_bits(&bits));
            prop_assert!(p < n);
            last_turn[p] = h;
            for (v, &t) in last_turn.iter().enumerate() {
                prop_assert!(
                    h - t < period,
                    "validator {} had no round 0 from {} to {} (period {})", v, t, h, period
                );
            }
        }
    }

    /// No failed round 0 anywhere (an honest cluster): plain rotation at every height.
    #[test]
    fn an_honest_cluster_keeps_plain_rotation(n in 1usize..=16, h in 1u64..100_000) {
        prop_assert_eq!(round0_index(n, h, |_| false), plain_index(n, h));
        // And the normal timeouts: an honest cluster never sees the short ones.
        let pick = round0_pick(n, h, std::iter::empty());
        prop_assert!(!pick.is_retry());
        prop_assert_eq!(pick.timeouts(timeouts()), timeouts());
        let set = ValidatorSet::new(&keys(n));
        prop_assert_eq!(
            set.for_height(Height(h), plain_index(n, h)).proposer(Height(h), Round::new(0)).address,
            proposer_of(&set, Height(h), Round::new(0)).address
        );
    }

    /// Every round 0 failing: plain rotation (everyone skipped, nobody preferred).
    #[test]
    fn all_validators_failing_degrades_to_plain_rotation(n in 1usize..=10, h in 1u64..5000) {
        prop_assert_eq!(round0_index(n, h, |_| true), plain_index(n, h));
    }

    /// A height's round 0 is short exactly when its round-0 proposer has a failed round 0 in
    /// the window (a retry: its skip ran out, its amnesty slot, or everybody skipped); the
    /// record is that validator's failed rounds 0 in the window, and a clean record keeps the
    /// normal timeouts.
    #[test]
    fn retries_and_only_retries_get_short_round0_timeouts(
        n in 1usize..=10,
        h in 1u64..1500,
        bits in proptest::collection::vec(proptest::bool::weighted(0.1), 1..1500),
    ) {
        let pick = round0_pick(n, h, window(h).filter(|j| from_bits(&bits)(*j)));
        prop_assert_eq!(pick.index, round0_index(n, h, from_bits(&bits)));
        let want = if n <= 1 || h <= LAG { 0 } else { record_of(n, h, pick.index, &bits) };
        prop_assert_eq!(pick.record, want);
        let t = pick.timeouts(timeouts());
        if pick.is_retry() {
            prop_assert_eq!(t, retry_timeouts(timeouts()));
            prop_assert!(silent_round0_cost(&t) < silent_round0_cost(&timeouts()));
        } else {
            prop_assert_eq!(t, timeouts());
        }
    }

    /// The retry timeouts of any normal ones: round 0's propose, prevote and precommit waits
    /// are the short ones (never above normal), round 1 waits exactly as normally, every later
    /// round at least as long as normally, and they grow with the round (liveness: the rounds
    /// after the short one are those of the normal timeouts or longer). Rebroadcast: lowered
    /// at round 0 by what round 0 lost (no lower than its short length), exactly normal at
    /// round 1 (a base as long as normal's three base waits: the engine's default), at least
    /// normal after; the cap unchanged.
    #[test]
    fn retry_timeouts_are_short_at_round_0_only(
        base in proptest::array::uniform3(0u64..5_000),
        delta in proptest::array::uniform3(0u64..2_000),
        max_s in 1u64..120,
        rounds in 1u32..200,
    ) {
        let ms = Duration::from_millis;
        let normal = LinearTimeouts {
            propose: ms(base[0]),
            propose_delta: ms(delta[0]),
            prevote: ms(base[1]),
            prevote_delta: ms(delta[1]),
            precommit: ms(base[2]),
            precommit_delta: ms(delta[2]),
            rebroadcast: ms(base[0] + base[1] + base[2]),
            max_timeout: Duration::from_secs(max_s),
        };
        let retry = retry_timeouts(normal);
        let kinds: [(TimeoutOf, Duration); 3] = [
            (Timeout::propose, RETRY_PROPOSE),
            (Timeout::prevote, RETRY_VOTE),
            (Timeout::precommit, RETRY_VOTE),
        ];
        for (kind, short) in kinds {
            prop_assert_eq!(wait(&retry, kind, 0), short.min(wait(&normal, kind, 0)));
            prop_assert_eq!(wait(&retry, kind, 1), wait(&normal, kind, 1));
            for r in 1..=rounds {
                prop_assert!(wait(&retry, kind, r) >= wait(&normal, kind, r), "round {}", r);
                prop_assert!(wait(&retry, kind, r) >= wait(&retry, kind, r - 1), "round {}", r);
            }
        }
        // Rebroadcast: round 0's short length at round 0 (the normal base is the three base
        // waits here), normal's at round 1, at least normal's after.
        let short0: Duration = kinds.iter().map(|(kind, _)| wait(&retry, *kind, 0)).sum();
        prop_assert_eq!(wait(&retry, Timeout::rebroadcast, 0), short0.min(normal.max_timeout));
        prop_assert_eq!(
            wait(&retry, Timeout::rebroadcast, 1),
            wait(&normal, Timeout::rebroadcast, 1)
        );
        for r in 1..=rounds {
            prop_assert!(
                wait(&retry, Timeout::rebroadcast, r) >= wait(&normal, Timeout::rebroadcast, r)
            );
        }
        prop_assert_eq!(retry.max_timeout, normal.max_timeout);
    }

    /// Only outcomes inside the window count: changing any outcome outside it changes nothing.
    #[test]
    fn only_the_window_counts(
        n in 2usize..=7,
        h in 1u64..1200,
        bits in proptest::collection::vec(proptest::bool::weighted(0.3), 1200),
        flip in 0usize..1200,
    ) {
        let w = window(h);
        prop_assume!(!w.contains(&(flip as u64)));
        let mut other = bits.clone();
        other[flip] = !other[flip];
        prop_assert_eq!(round0_index(n, h, from_bits(&bits)), round0_index(n, h, from_bits(&other)));
    }
}

/// One failed round 0 at node 0's slot (height 1 of 4 validators): node 0 is skipped at its
/// slots while `h - 1 <= BASE_SKIP`, node 1 (next in rotation) proposes instead; others keep
/// their slots; afterwards plain again.
/// A part's height comes from the network: every height, the first ones (whose window is
/// empty) and the largest included, gets an answer, never a panic. Found by the late joiner of
/// `slow_localnet` (a part of a height up to `LAG` reached the honest nodes while it synced from
/// height 1): `BTreeSet::range(1..=0)` panicked
/// in every honest node's part check and the three of them exited.
#[test]
fn every_height_from_the_network_gets_a_round0_proposer() {
    let mut o = Outcomes::default();
    for h in 0..=LAG + 2 {
        assert_eq!(
            o.round0(4, h),
            plain_index(4, h),
            "empty history, height {h}"
        );
    }
    for height in 1..=40u64 {
        o.record(height, u32::from(height % 3 == 0));
    }
    for h in (0..=LAG + 2).chain([u64::MAX - 1, u64::MAX]) {
        assert!(o.round0(4, h) < 4, "height {h}");
    }
    for h in 0..=LAG {
        assert_eq!(o.round0(4, h), plain_index(4, h), "height {h}");
    }
}

#[test]
fn one_failure_skips_its_slot_owner_for_base_skip_heights() {
    let n = 4;
    let failed = |j: u64| j == 1;
    for h in 1..200u64 {
        let p = round0_index(n, h, failed);
        let plain = plain_index(n, h);
        let skipped = plain == 0 && h > LAG && h - 1 <= BASE_SKIP;
        let want = if skipped { 1 } else { plain };
        assert_eq!(p, want, "height {h}");
    }
    assert_eq!(skip_for(1), BASE_SKIP);
    assert_eq!(skip_for(2), 2 * BASE_SKIP);
    assert_eq!(skip_for(40), MAX_SKIP);
    assert!(amnesty_period(4) >= 4 * MAX_SKIP && amnesty_period(4).is_multiple_of(4));
    const { assert!(MAX_SKIP < WINDOW) };
}

/// A validator whose every own round 0 fails (silent, equivocating, invalid blocks), the others
/// honest: over 4,000 heights of 4 validators plain rotation loses 1,000 rounds; the rule loses
/// one per skip (doubling up to `MAX_SKIP`) and amnesty slot: at most 4000 / MAX_SKIP + 12 +
/// 4000 / amnesty_period.
#[test]
fn a_validator_that_always_fails_loses_few_rounds() {
    for n in [4usize, 7, 10] {
        let heights = 4000u64;
        let mut bits = vec![false; heights as usize + 1];
        let mut lost = 0u64;
        for h in 1..heights {
            let p = round0_index(n, h, from_bits(&bits));
            if p == 0 {
                // Its round 0 fails: block h + 1 carries prev_round 1.
                bits[h as usize] = true;
                lost += 1;
            }
        }
        let bound = heights / MAX_SKIP + 12 + heights / amnesty_period(n);
        assert!(
            lost <= bound,
            "n = {n}: lost {lost} rounds 0 (bound {bound}, plain {})",
            heights / n as u64
        );
        assert!(lost >= 2, "it is retried");
    }
}

/// What a validator whose every round 0 fails (silent: nothing proposed) costs in waiting,
/// over 4,000 heights of `n` validators: its first failure the normal round 0 (propose 1 s +
/// precommit 0.5 s, nothing had recorded it yet), every later one a retry's short round 0
/// (`RETRY_PROPOSE + RETRY_VOTE`); without the short retry rounds each would cost the normal
/// 1.5 s.
#[test]
fn a_failing_validator_s_retries_cost_short_rounds() {
    let normal = silent_round0_cost(&timeouts());
    let short = silent_round0_cost(&retry_timeouts(timeouts()));
    assert_eq!(normal, Duration::from_millis(1_500));
    assert_eq!(short, RETRY_PROPOSE + RETRY_VOTE);
    for n in [4usize, 7, 10] {
        let heights = 4000u64;
        let mut bits = vec![false; heights as usize + 1];
        let mut lost = 0u32;
        let mut waited = Duration::ZERO;
        for h in 1..heights {
            let pick = round0_pick(n, h, window(h).filter(|j| bits[*j as usize]));
            if pick.index == 0 {
                bits[h as usize] = true;
                let cost = silent_round0_cost(&pick.timeouts(timeouts()));
                let want = if lost == 0 { normal } else { short };
                assert_eq!(cost, want, "n = {n}, height {h}, failure {lost}");
                lost += 1;
                waited += cost;
            }
        }
        assert!(lost >= 2, "it is retried");
        assert_eq!(waited, normal + short * (lost - 1), "n = {n}");
    }
}

/// `Outcomes` keeps what the windows need and no more: recording 100,000 heights holds at most
/// about a window's failed heights.
#[test]
fn outcomes_stay_bounded() {
    let mut o = Outcomes::default();
    for h in 1..100_000u64 {
        o.record(h, u32::from(h % 3 == 0));
        assert!(o.complete_for(h + 1), "height {h}");
    }
    let held = (1..100_000u64).filter(|j| o.failed(*j)).count() as u64;
    assert!(held <= WINDOW + 2 * LAG, "{held} held");
    // The newest are there.
    assert!(o.failed(99_998));
}

fn factory() -> Factory<Box<dyn Application>> {
    support::demo_factory()
}

fn home(name: &str) -> PathBuf {
    support::demo_home("reputation", name, 4, 7)
}

fn open(home: &Path, index: usize) -> State<Box<dyn Application>> {
    let opts = NodeOptions {
        home: home.to_path_buf(),
        index,
        lying_time: false,
        omit_ticks: false,
        byzantine: None,
        http: "127.0.0.1:0".parse().unwrap(),
        snapshot_every: 0,
        retain_blocks: None,
        signing_state: None,
    };
    State::open(opts, &factory()).unwrap()
}

/// The engine is told (the validator set in `State::params`) the proposer the node checks
/// parts against (`State::proposer`), for every round of the next heights.
#[test]
fn the_engine_and_the_part_check_name_the_same_proposer() {
    let dir = home("same");
    let node = open(&dir, 1);
    let ctx = Ctx;
    for h in 1..=3u64 {
        let params = node.params(Height(h));
        for r in 0..8u32 {
            let round = Round::new(r);
            assert_eq!(
                ctx.select_proposer(&params.validator_set, Height(h), round)
                    .address,
                node.proposer(Height(h), round),
                "height {h} round {r}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Node 1's home `name` with `top` decided blocks whose round 0 failed at heights 1 and 5
/// (index 0's slots): their commits are of round 1, and blocks 2 and 6 carry `prev_round` 1.
fn chain_failing_at_1_and_5(name: &str, top: u64) -> PathBuf {
    use ccron_malachite::commit::MalachiteCommit;
    use ccron_node::store::{BlockStore, Decided};
    use malachitebft_core_types::CommitCertificate;

    let dir = home(name);
    let node_dir = ccron_node::core::node_dir(&dir, 1);
    {
        let mut store = BlockStore::<MalachiteCommit>::open(&node_dir.join("blocks.log")).unwrap();
        let genesis_ms = 1_700_000_000_000i64;
        for h in 1..=top {
            let block = ccron_node::types::Block {
                height: h,
                prev_round: u32::from(h == 2 || h == 6),
                prev_id: ccron_node::types::Hash32([0; 32]),
                samples: Vec::new(),
                agreed_time_ms: genesis_ms + 100 * h as i64,
                ticks: Vec::new(),
                requests: Vec::new(),
                prev_state: None,
            };
            let commit = MalachiteCommit {
                certificate: CommitCertificate {
                    height: Height(h),
                    round: Round::new(u32::from(h == 1 || h == 5)),
                    value_id: block.id(),
                    commit_signatures: Vec::new(),
                },
                extensions: Vec::new(),
            };
            store.append(Decided { block, commit }).unwrap();
        }
    }
    dir
}

/// A node reopened on a chain whose round 0 failed at index 0's slots (heights 1 and 5: blocks
/// 2 and 6 carry `prev_round` 1) reads it from its blocks: at height 13, index 0's slot, round 0
/// goes to index 1; the engine is told the same (`State::params`); rounds >= 1 and the next
/// heights stay plain rotation.
#[test]
fn a_reopened_node_reads_failed_rounds_from_its_decided_blocks() {
    let dir = chain_failing_at_1_and_5("reopen", 12);
    let node = open(&dir, 1);
    assert_eq!(node.core.last_height(), 12);
    assert!(node.outcomes().failed(1) && node.outcomes().failed(5));
    assert!(!node.outcomes().failed(2) && !node.outcomes().failed(9));
    let set = &node.vset;
    let ctx = Ctx;
    let params = node.params(Height(13));
    assert_eq!(plain_index(4, 13), 0);
    assert_eq!(
        node.proposer(Height(13), Round::new(0)),
        set.validators[1].address
    );
    assert_eq!(
        ctx.select_proposer(&params.validator_set, Height(13), Round::new(0))
            .address,
        set.validators[1].address
    );
    for r in 1..8u32 {
        let round = Round::new(r);
        assert_eq!(
            node.proposer(Height(13), round),
            proposer_of(set, Height(13), round).address
        );
        assert_eq!(
            ctx.select_proposer(&params.validator_set, Height(13), round)
                .address,
            proposer_of(set, Height(13), round).address
        );
    }
    // Heights 14 and 15 (parts judged ahead): their slot owners never failed.
    for h in 14..=15u64 {
        assert_eq!(
            node.proposer(Height(h), Round::new(0)),
            proposer_of(set, Height(h), Round::new(0)).address
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node reopened on a chain whose round 0 failed at index 0's slots (heights 1 and 5) tells
/// the engine short round-0 timeouts exactly at index 0's retry: at height 69 (its slot, 64
/// heights after its second failure) it is still skipped, index 1 proposes with the normal
/// timeouts; at height 73 (its next slot) its skip has run out, it proposes round 0 with the
/// retry timeouts; the heights between keep the normal ones.
#[test]
fn a_reopened_node_gives_the_engine_short_round0_timeouts_at_a_retry() {
    let dir = chain_failing_at_1_and_5("retry", 72);
    let node = open(&dir, 1);
    assert_eq!(node.core.last_height(), 72);
    let set = &node.vset;
    let ctx = Ctx;
    let normal = timeouts();
    let proposer0 = |h: u64| {
        ctx.select_proposer(
            &node.params(Height(h)).validator_set,
            Height(h),
            Round::new(0),
        )
        .address
    };
    // Height 69: index 0's slot, still skipped (69 - 5 = 64 = skip_for(2)): normal timeouts.
    assert_eq!(plain_index(4, 69), 0);
    assert_eq!(proposer0(69), set.validators[1].address);
    assert_eq!(node.params(Height(69)).timeouts, normal);
    // Heights 70-72: clean slot owners, normal timeouts.
    for h in 70..=72u64 {
        assert_eq!(node.params(Height(h)).timeouts, normal, "height {h}");
    }
    // Height 73: index 0's retry, round 0 short, later rounds as normal or longer.
    assert_eq!(plain_index(4, 73), 0);
    assert_eq!(proposer0(73), set.validators[0].address);
    let t = node.params(Height(73)).timeouts;
    assert_eq!(wait(&t, Timeout::propose, 0), RETRY_PROPOSE);
    assert_eq!(wait(&t, Timeout::prevote, 0), RETRY_VOTE);
    assert_eq!(wait(&t, Timeout::precommit, 0), RETRY_VOTE);
    assert_eq!(wait(&normal, Timeout::propose, 0), Duration::from_secs(1));
    for r in 1..20u32 {
        assert!(wait(&t, Timeout::propose, r) >= wait(&normal, Timeout::propose, r));
        assert!(wait(&t, Timeout::precommit, r) >= wait(&normal, Timeout::precommit, r));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A round-0 proposal of `proposer` at `height` (a block with nothing in it).
fn round0_value(
    height: u64,
    proposer: ccron_malachite::context::Address,
    validity: malachitebft_app_channel::app::types::core::Validity,
) -> malachitebft_app_channel::app::types::ProposedValue<Ctx> {
    let block = ccron_node::types::Block {
        height,
        prev_round: 0,
        prev_id: ccron_node::types::Hash32([0; 32]),
        samples: Vec::new(),
        agreed_time_ms: 1_700_000_000_000,
        ticks: Vec::new(),
        requests: Vec::new(),
        prev_state: None,
    };
    malachitebft_app_channel::app::types::ProposedValue {
        height: Height(height),
        round: Round::new(0),
        valid_round: Round::Nil,
        proposer,
        value: ccron_malachite::context::Value(block),
        validity,
    }
}

/// Round 0 is cheap at every height once the node has observed its peers' proposals
/// arriving (`ccron_malachite::round0`), not only at reputation retries: a node reopened on
/// a clean chain gives the engine the normal timeouts until it has measured enough arrivals,
/// then a round 0 at the floor (arrivals of 30 ms: 2 * 30 + 50 < 150 ms) whose failure with a
/// silent proposer costs 250 ms instead of 1.5 s, and rounds >= 1 as normally. Proposals that
/// are not the round-0 proposer's, invalid, or this node's own are not arrivals.
#[test]
fn a_node_that_saw_fast_proposals_gives_the_engine_a_short_round0_at_every_height() {
    use ccron_malachite::round0::{FLOOR, MIN_SAMPLES, VOTE_FLOOR};
    use malachitebft_app_channel::app::types::core::Validity;

    let dir = chain_failing_at_1_and_5("fast", 300);
    let mut node = open(&dir, 1);
    let normal = timeouts();
    // Height 302: its slot owner (index 1) has a clean record (index 0's failures at 1 and 5
    // make 301, 305, ... retries): no arrivals yet, the normal timeouts.
    assert_eq!(plain_index(4, 302), 1);
    assert_eq!(node.params(Height(302)).timeouts, normal);
    let me = node.me();
    let mut t = 1_000_000u64;
    for h in 301..=340u64 {
        let p = node.proposer(Height(h), Round::new(0));
        node.note_round_started(Height(h), Round::new(0), &[], t);
        // Noise first: another validator's value, an invalid one, round 1's.
        let other = node
            .vset
            .validators
            .iter()
            .map(|v| v.address)
            .find(|a| *a != p && *a != me)
            .unwrap();
        node.note_proposal(&round0_value(h, other, Validity::Valid), t + 1);
        node.note_proposal(&round0_value(h, p, Validity::Invalid), t + 2);
        node.note_proposal(&round0_value(h, p, Validity::Valid), t + 30);
        node.note_proposal(&round0_value(h, p, Validity::Valid), t + 900);
        t += 100;
    }
    // Each of the 3 other validators: 10 arrivals of 30 ms (this node's own slots: none).
    let mine = node.vset.validators.iter().position(|v| v.address == me);
    let p90s = node.arrivals().p90s();
    assert_eq!(p90s.len(), 3, "{p90s:?}");
    assert!(
        p90s.iter().all(|(i, p)| Some(*i) != mine && *p == 30),
        "{p90s:?}"
    );
    assert!(
        p90s.iter()
            .all(|(i, _)| node.arrivals().of(*i).count() >= MIN_SAMPLES)
    );
    for h in 341..=344u64 {
        let t = node.params(Height(h)).timeouts;
        assert_eq!(wait(&t, Timeout::propose, 0), FLOOR, "height {h}");
        assert_eq!(wait(&t, Timeout::prevote, 0), VOTE_FLOOR);
        assert_eq!(wait(&t, Timeout::precommit, 0), VOTE_FLOOR);
        assert!(silent_round0_cost(&t) <= Duration::from_millis(250));
        for r in 1..20u32 {
            for kind in [Timeout::propose, Timeout::prevote, Timeout::precommit] {
                let (short, n) = (wait(&t, kind, r), wait(&normal, kind, r));
                assert!(short >= n, "height {h} round {r}");
                if r == 1 {
                    assert_eq!(short, n);
                }
            }
        }
    }
    // A proposal that came before the round started (held early) is an arrival of 0 ms.
    let h = (341..=344u64)
        .find(|h| node.proposer(Height(*h), Round::new(0)) != me)
        .unwrap();
    let p = node.proposer(Height(h), Round::new(0));
    let pi = node
        .vset
        .validators
        .iter()
        .position(|v| v.address == p)
        .unwrap();
    let early = round0_value(h, p, Validity::Valid);
    let before = node.arrivals().of(pi).count();
    node.note_round_started(Height(h), Round::new(0), std::slice::from_ref(&early), t);
    assert_eq!(node.arrivals().of(pi).count(), before + 1);
    assert_eq!(node.arrivals().of(pi).last(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The network layer of the localnet campaign judges its windows against one failed round at
/// this adapter's normal timeouts (`ccron_node::netfault::FAILED_ROUND`): it must not be
/// shorter than round 0's propose, prevote and precommit timeouts together.
#[test]
fn the_net_judge_knows_what_a_failed_round_costs_here() {
    let t = timeouts();
    let failed = wait(&t, Timeout::propose, 0)
        + wait(&t, Timeout::prevote, 0)
        + wait(&t, Timeout::precommit, 0);
    assert!(ccron_node::netfault::FAILED_ROUND >= failed, "{failed:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// One Byzantine proposer (any arrivals: streaming at once or just before everyone's
    /// timeout) among 4 moves the estimate only within the honest proposers' p90s, and the
    /// round-0 timeout is never below what the honest proposers' p90 arrivals need (the
    /// lowest of them, with margin) nor above the normal one.
    #[test]
    fn one_byzantine_proposer_cannot_move_the_round0_timeout_out_of_the_honest_range(
        honest in proptest::collection::vec(proptest::collection::vec(0u64..2_000, 4..40), 3),
        byz in proptest::collection::vec(0u64..5_000, 0..40),
        byz_index in 0usize..4,
    ) {
        use ccron_malachite::round0::{Arrivals, FLOOR, p90};
        let mut a = Arrivals::default();
        let mut honest_p90 = Vec::new();
        let mut k = 0;
        for i in 0..4 {
            if i == byz_index {
                for s in &byz {
                    a.observe(i, Duration::from_millis(*s));
                }
            } else {
                let samples = &honest[k];
                k += 1;
                let kept = &samples[samples.len().saturating_sub(ccron_malachite::round0::PER_PROPOSER)..];
                honest_p90.push(p90(kept.iter().copied()).unwrap());
                for s in samples {
                    a.observe(i, Duration::from_millis(*s));
                }
            }
        }
        let est = a.estimate(4).unwrap();
        let lo = *honest_p90.iter().min().unwrap();
        let hi = *honest_p90.iter().max().unwrap();
        prop_assert!(est >= Duration::from_millis(lo) && est <= Duration::from_millis(hi),
            "{est:?} not in {lo}..={hi}");
        let normal = Duration::from_secs(1);
        let t = a.propose_timeout(4, normal);
        prop_assert!(t <= normal);
        prop_assert!(t >= Duration::from_millis(lo).min(normal));
        prop_assert!(t >= FLOOR);
    }
}
