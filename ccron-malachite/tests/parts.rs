//! Proposal parts under a Byzantine proposer, at the adapter's state (no processes, no engine):
//! a flood of signed parts across rounds and values (issue 23, defect 2), `RestreamProposal`
//! for another proposer's value and for a re-proposal at a new round (defect 3), and a
//! restarted proposer that must re-propose the very block it signed, or refuse to start
//! (defect 4); a block taken by value sync that the engine decides after a crash (its WAL
//! replays the decision) is still known at the restart.

mod support;

use std::path::{Path, PathBuf};

use ccron::host::Application;
use ccron_malachite::context::{
    Address, Block, Ed25519Signer, Hash32, Height, ProposalPart, proposer_of,
};
use ccron_malachite::state::{Restream, State};
use ccron_node::crypto::SigningDomain;
use ccron_node::localnet::localnet_secret;
use ccron_node::{Factory, NodeOptions};
use malachitebft_app_channel::app::types::core::{Round, Validity};

const SEED: u64 = 7;
const N: usize = 4;

fn factory() -> Factory<Box<dyn Application>> {
    support::demo_factory()
}

fn home(name: &str) -> PathBuf {
    support::demo_home("parts", name, N, SEED)
}

fn open(home: &Path, index: usize) -> State<Box<dyn Application>> {
    State::open(opts(home, index), &factory()).unwrap()
}

fn opts(home: &Path, index: usize) -> NodeOptions {
    NodeOptions {
        home: home.to_path_buf(),
        index,
        lying_time: false,
        omit_ticks: false,
        byzantine: None,
        http: "127.0.0.1:0".parse().unwrap(),
        snapshot_every: 0,
        retain_blocks: None,
        signing_state: None,
    }
}

/// Validator signers by address, signing for the chain of `domain`.
fn signers(domain: &SigningDomain) -> Vec<Ed25519Signer> {
    (0..N)
        .map(|i| Ed25519Signer::new(localnet_secret(SEED, i), domain.clone()))
        .collect()
}

fn signer_of(domain: &SigningDomain, addr: Address) -> Ed25519Signer {
    signers(domain)
        .into_iter()
        .find(|s| Address(s.public_key()) == addr)
        .unwrap()
}

/// A valid first block (timed at the genesis time), made distinct by `v`: it carries tick
/// number `v + 1` of validator 0.
fn block(state: &State<Box<dyn Application>>, v: u64) -> Block {
    let component = *state.core.tick_periods().keys().next().unwrap();
    let signer = ccron_node::crypto::Signer::new(localnet_secret(SEED, 0));
    Block {
        height: 1,
        prev_round: 0,
        prev_id: Hash32::default(),
        samples: Vec::new(),
        agreed_time_ms: state.core.genesis().genesis_time_ms,
        ticks: vec![ccron_node::TickTx::sign(
            state.core.domain(),
            component,
            v + 1,
            &signer,
        )],
        requests: Vec::new(),
        prev_state: Some(state.core.ledger().state_digest()),
    }
}

/// The part the proposer of `(1, round)` signs for `block`.
fn part(state: &State<Box<dyn Application>>, round: u32, block: Block) -> ProposalPart {
    part_in(state.core.domain(), state, round, block)
}

/// [`part`] signed for the chain of `domain`.
fn part_in(
    domain: &SigningDomain,
    state: &State<Box<dyn Application>>,
    round: u32,
    block: Block,
) -> ProposalPart {
    let (height, round) = (Height(1), Round::new(round));
    let proposer = proposer_of(&state.vset, height, round).address;
    let valid_round = Round::Nil;
    let bytes = ProposalPart::signing_bytes(domain, height, round, valid_round, &proposer, &block);
    ProposalPart {
        height,
        round,
        valid_round,
        proposer,
        signature: signer_of(domain, proposer).sign_raw(&bytes),
        block,
    }
}

fn part_log_records(home: &Path, index: usize) -> usize {
    let log = ccron_node::store::PartLog::<ProposalPart>::open(
        &ccron_node::core::node_dir(home, index).join("parts.log"),
    )
    .unwrap();
    log.parts().len()
}

// Issue 23, defect 2: every signed part of every round was verified, fsync'ed, kept (invalid
// ones too) and rewrote status.json.
#[test]
fn a_proposer_flooding_parts_across_rounds_costs_a_bounded_amount() {
    let home = home("flood");
    let mut node = open(&home, 0);
    node.started_round(Height(1), Round::new(0)).unwrap();
    let status = ccron_node::core::node_dir(&home, 0).join("status.json");
    let status_before = std::fs::read(&status).unwrap();
    let mut values = 0;
    for round in 0..2_000u32 {
        for v in 0..3 {
            let p = part(&node, round, block(&node, u64::from(round) * 3 + v));
            if p.proposer == node.me() {
                continue;
            }
            if node.received_part(b"byzantine", &p).unwrap().is_some() {
                values += 1;
            }
        }
    }
    let c = node.book().counters().clone();
    // Rounds 0..=8 (the bound above the current round 0), minus this node's own rounds.
    let own = (0..=8u32)
        .filter(|r| proposer_of(&node.vset, Height(1), Round::new(*r)).address == node.me())
        .count();
    let kept = 9 - own;
    assert_eq!(values, kept, "one value per round, up to the bound");
    assert_eq!(node.book().held().0, kept);
    assert_eq!(
        c.equivocation as usize,
        2 * kept,
        "second values recorded, not stored"
    );
    assert!(c.round_too_far > 4_000, "{c:?}");
    assert_eq!(
        part_log_records(&home, 0),
        kept,
        "fsync'ed once per kept value"
    );
    assert_eq!(
        std::fs::read(&status).unwrap(),
        status_before,
        "status.json not rewritten per part"
    );
    // A block invalid for a shared reason (a first block carrying samples' scope) is answered
    // invalid, neither kept whole nor persisted nor remembered.
    node.started_round(Height(1), Round::new(20)).unwrap();
    let mut bad = block(&node, 0);
    bad.prev_round = 3;
    let r = (20..=28)
        .find(|r| proposer_of(&node.vset, Height(1), Round::new(*r)).address != node.me())
        .unwrap();
    let p = part(&node, r, bad.clone());
    let value = node.received_part(b"byzantine", &p).unwrap().unwrap();
    assert_eq!(value.validity, Validity::Invalid);
    assert!(!node.core.knows(&bad.id()));
    assert_eq!(part_log_records(&home, 0), kept);
    assert_eq!(node.book().counters().invalid, 1);
    // A stranger's forged parts: refused, then the peer is muted without verification.
    let mut forged = part(&node, r + 1, block(&node, 9));
    forged.signature = signer_of(node.core.domain(), node.me()).sign_raw(b"not this");
    for _ in 0..100 {
        assert!(node.received_part(b"stranger", &forged).unwrap().is_none());
    }
    let c = node.book().counters();
    assert_eq!(c.bad_signature, 16);
    assert_eq!(c.peer_muted, 84);
    std::fs::remove_dir_all(&home).unwrap();
}

// Issue 23, defect 3: RestreamProposal published only this node's own part of that round.
#[test]
fn restream_publishes_any_held_value_and_reproposes_a_locked_one() {
    let home = home("restream");
    let mut node = open(&home, 0);
    node.started_round(Height(1), Round::new(0)).unwrap();
    let me = node.me();
    // Another proposer's part, held: restreamed as it was signed.
    let (r_other, r_mine) = {
        let rounds: Vec<u32> = (0..4).collect();
        let other = *rounds
            .iter()
            .find(|r| proposer_of(&node.vset, Height(1), Round::new(**r)).address != me)
            .unwrap();
        let mine = *rounds
            .iter()
            .find(|r| proposer_of(&node.vset, Height(1), Round::new(**r)).address == me)
            .unwrap();
        (other, mine)
    };
    let theirs = part(&node, r_other, block(&node, 1));
    let id = theirs.block.id();
    assert!(node.received_part(b"p", &theirs).unwrap().is_some());
    let got = node
        .restream(
            Height(1),
            Round::new(r_other),
            Round::Nil,
            theirs.proposer,
            id,
        )
        .unwrap();
    assert_eq!(got, Restream::Publish(vec![theirs.clone()]));
    // A value it does not hold.
    let got = node
        .restream(
            Height(1),
            Round::new(r_other),
            Round::Nil,
            theirs.proposer,
            Hash32([9; 32]),
        )
        .unwrap();
    assert_eq!(got, Restream::Unknown);
    // This node re-proposes the value locked at `r_other` in its own round: a part of its own
    // for that round, with the valid round, signed and persisted.
    let got = node
        .restream(Height(1), Round::new(r_mine), Round::new(r_other), me, id)
        .unwrap();
    let Restream::Publish(parts) = got else {
        panic!("{got:?}")
    };
    let mine = parts[0].clone();
    assert_eq!(
        (mine.proposer, mine.round, mine.valid_round, mine.block.id()),
        (me, Round::new(r_mine), Round::new(r_other), id)
    );
    // Another node takes it as authentic.
    let mut peer = open(&home, 1);
    peer.started_round(Height(1), Round::new(0)).unwrap();
    let v = peer.received_part(b"n0", &mine).unwrap().unwrap();
    assert_eq!(v.validity, Validity::Valid);
    // Never a second value in that round, even after a restart.
    drop(node);
    std::fs::create_dir_all(ccron_node::core::node_dir(&home, 0).join("wal")).unwrap();
    let mut node = open(&home, 0);
    let other_value = part(&node, r_other, block(&node, 2)).block.id();
    assert_eq!(
        node.restream(
            Height(1),
            Round::new(r_mine),
            Round::new(r_other),
            me,
            other_value
        )
        .unwrap(),
        Restream::Refused
    );
    assert_eq!(
        node.restream(Height(1), Round::new(r_mine), Round::new(r_other), me, id)
            .unwrap(),
        Restream::Publish(vec![mine.clone()])
    );
    let (_, again) = node
        .propose(Height(1), Round::new(r_mine))
        .unwrap()
        .unwrap();
    assert_eq!(again, mine, "GetValue in that round gives the same part");
    std::fs::remove_dir_all(&home).unwrap();
}

// Issue 23, defect 4: a restarted proposer re-proposes the block it signed; a damaged or
// missing part log stops it instead.
#[test]
fn a_restarted_proposer_never_signs_a_second_block_for_a_round() {
    let home = home("restart");
    let mut node = open(&home, 0);
    let me = node.me();
    let r = (0..4)
        .find(|r| proposer_of(&node.vset, Height(1), Round::new(*r)).address == me)
        .unwrap();
    let (_, first) = node.propose(Height(1), Round::new(r)).unwrap().unwrap();
    drop(node);
    let dir = ccron_node::core::node_dir(&home, 0);
    std::fs::create_dir_all(dir.join("wal")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut node = open(&home, 0);
    let (_, again) = node.propose(Height(1), Round::new(r)).unwrap().unwrap();
    assert_eq!(again, first);
    drop(node);
    // One flipped byte in the part: the node refuses to start.
    let path = dir.join("parts.log");
    let good = std::fs::read(&path).unwrap();
    let mut bad = good.clone();
    bad[40] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let err = State::open(opts(&home, 0), &factory()).err().unwrap();
    assert!(err.to_string().contains("parts.log"), "{err}");
    // Gone, with the engine's WAL still there: refused too.
    std::fs::remove_file(&path).unwrap();
    let err = State::open(opts(&home, 0), &factory()).err().unwrap();
    assert!(err.to_string().contains("missing"), "{err}");
    std::fs::remove_dir_all(&home).unwrap();
}

/// The defect found at the 2026-11-29 integration (`slow_netfaults` kill-all, node 1 stopped for
/// ever): a block taken by value sync was only remembered in memory; the engine wrote the
/// synced value's decision to its WAL, the process was killed before the block was stored, and
/// every restart replayed the decision onto a block the node no longer knew (`decided value …
/// is unknown to this node`). Now the synced block is durable before the verdict, read back at
/// start, and dropped from the log once decided.
#[test]
fn a_synced_block_decided_after_a_crash_is_still_known_at_the_restart() {
    use ccron_malachite::commit::MalachiteCommit;
    use malachitebft_app_channel::app::engine::host::SyncedValueOutcome;
    use malachitebft_core_types::CommitCertificate;

    let home = home("synced");
    let mut node = open(&home, 1);
    let b = block(&node, 0);
    let proposer = proposer_of(&node.vset, Height(1), Round::new(0)).address;
    // Bytes of another height, and bytes that are no block: the peer's fault, nothing kept.
    let mut other = b.clone();
    other.height = 2;
    for bad in [other.encode(), vec![1, 2, 3]] {
        let out = node
            .synced(Height(1), Round::new(0), proposer, &bad)
            .unwrap();
        assert!(matches!(out, SyncedValueOutcome::PeerFault), "{out:?}");
    }
    let out = node
        .synced(Height(1), Round::new(0), proposer, &b.encode())
        .unwrap();
    let SyncedValueOutcome::Verdict(value) = out else {
        panic!("no verdict: {out:?}");
    };
    assert_eq!(value.validity, Validity::Valid);
    assert_eq!(value.value.0, b);
    // The same value again (the engine re-requests): one record, not two.
    node.synced(Height(1), Round::new(0), proposer, &b.encode())
        .unwrap();
    let dir = ccron_node::core::node_dir(&home, 1);
    let log = |dir: &Path| {
        ccron_node::store::PartLog::<ccron_node::store::SyncedBlock>::open(
            &dir.join(ccron_node::store::SYNCED_LOG),
        )
        .unwrap()
        .parts()
        .to_vec()
    };
    // Killed before the decision reached the store; the engine's WAL exists and replays it.
    drop(node);
    std::fs::create_dir_all(dir.join("wal")).unwrap();
    let mut node = open(&home, 1);
    assert_eq!(node.core.last_height(), 0);
    let commit = MalachiteCommit {
        certificate: CommitCertificate {
            height: Height(1),
            round: Round::new(0),
            value_id: b.id(),
            commit_signatures: Vec::new(),
        },
        extensions: Vec::new(),
    };
    node.decided(commit.certificate, commit.extensions).unwrap();
    assert_eq!(node.core.last_height(), 1);
    assert_eq!(node.core.decided(1).unwrap().block, b);
    drop(node);
    // The value synced twice is one record.
    assert_eq!(log(&dir).len(), 1);
    // Decided: the log no longer brings it back (pruned in memory; the file is compacted when
    // it grows), and a reopened node does not remember a decided height's block.
    let node = open(&home, 1);
    assert_eq!(node.core.last_height(), 1);
    assert!(!node.core.knows(&b.id()));
    drop(node);
    std::fs::remove_dir_all(&home).unwrap();
}
