//! A validator that withholds its votes on their own (issue 23, item 2: "withholds votes"):
//! `localnet --byzantine withhold-votes` runs node 0 with its own valid key, signing its
//! prevotes and precommits as an honest node does and never publishing them (its network codec
//! keeps them back), otherwise honest: it still proposes and streams its parts. The three honest
//! nodes are exactly 2f+1 and must keep deciding on their own votes alone; the report judges
//! agreement, the longest stall and the votes every honest node verified during the fault, by
//! voter: none of node 0's, some of every honest one's. Combined with `--byzantine-subset 1,2`
//! its parts reach f+1 honest nodes only as well (node 3 never sees its proposals).

mod support;

use ccron_node::localnet::{Report, SUBSET_STALL_BOUND_MS};
use support::diagnose;

/// The judge shared by both runs: agreement, liveness during the fault, every honest node near
/// the top, and the votes: each honest node counted from a height timed after the fault's start
/// verified none of node 0's votes and some of each other honest validator's.
fn judge(ok: bool, r: &Report) {
    let b = r.byzantine.as_ref().expect("a Byzantine report");
    println!("{b:#?}");
    assert!(
        ok && r.honest_agree && r.violations.is_empty(),
        "{}",
        diagnose(r)
    );
    assert!(!r.nodes[0].honest);
    assert_eq!(b.kind.name(), "withhold-votes");
    // The honest three (2f+1) kept deciding on their own votes, no stall beyond a few rounds.
    assert!(b.heights_during >= 5, "{b:?}\n{}", diagnose(r));
    assert!(b.longest_stall_during_ms < SUBSET_STALL_BOUND_MS, "{b:?}");
    for n in &r.nodes[1..] {
        assert!(n.last_executed_seq + 10 >= r.max_height, "{}", diagnose(r));
    }
    // The votes really were withheld, and the count is not empty by accident: every honest
    // node was counted over at least 5 heights of the fault, verified votes of each honest
    // peer there, and none of node 0's.
    assert_eq!(b.votes_during.len(), 3, "{b:?}");
    for v in &b.votes_during {
        assert!(v.to_height >= v.from_height + 5, "{v:?}");
        assert_eq!(
            v.by_voter[0], 0,
            "node 0's votes reached node {}: {v:?}",
            v.node
        );
        for peer in (1..4).filter(|&p| p != v.node) {
            assert!(v.by_voter[peer] > 0, "no vote of node {peer}: {v:?}");
        }
        // Node 0's last vote seen is from before the fault: below the counted heights.
        assert!(v.last_height_by_voter[0] <= v.from_height + 1, "{v:?}");
    }
}

#[test]
fn a_validator_withholding_its_votes_does_not_stop_the_honest_two_thirds() {
    let (ok, r, dir) = support::run_localnet(
        "votes",
        "withhold-votes",
        "demo",
        &[
            "--no-kill",
            "--duration",
            "18s",
            "--byzantine",
            "withhold-votes",
        ],
    );
    judge(ok, &r);
    // Node 0 stayed otherwise honest: it kept deciding with the others (it hears their votes).
    assert!(
        r.nodes[0].last_executed_seq + 10 >= r.max_height,
        "{}",
        diagnose(&r)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn withheld_votes_and_parts_delivered_to_f_plus_1_honest_nodes_only_do_not_stop_the_chain() {
    let (ok, r, dir) = support::run_localnet(
        "votes",
        "withhold-votes-subset",
        "demo",
        &[
            "--no-kill",
            "--duration",
            "18s",
            "--byzantine",
            "withhold-votes",
            "--byzantine-subset",
            "1,2",
        ],
    );
    judge(ok, &r);
    let s = r.subset.as_ref().expect("subset report");
    assert_eq!(s.withheld_from, vec![3]);
    assert!(s.heights_during >= 5, "{s:?}");
    assert!(s.longest_stall_during_ms < SUBSET_STALL_BOUND_MS, "{s:?}");
    let _ = std::fs::remove_dir_all(dir);
}
