//! The validator's signing guard at the adapter's state (no processes, no engine): the
//! engine's signer (`State::engine_signer`) and the adapter's own part signing go through the
//! state file kept beside the key (`node-I/signing.state`), so a validator whose home is wiped
//! (its engine WAL and part log gone) and restarted with its key never signs a second vote,
//! proposal or part at a height it signed before; the attack it stops is shown with the state
//! removed too.

mod support;

use std::path::{Path, PathBuf};

use ccron::host::Application;
use ccron_malachite::context::{Ctx, Hash32, Height, Vote, proposer_of};
use ccron_malachite::state::State;
use ccron_node::localnet::wipe_node_dir;
use ccron_node::signguard::{SignRefusal, SigningStateError};
use ccron_node::{Factory, NodeError, NodeOptions};
use malachitebft_core_types::{NilOrVal, Round, VoteType};
use malachitebft_signing::Signer;

const SEED: u64 = 11;

fn factory() -> Factory<Box<dyn Application>> {
    support::demo_factory()
}

fn home(name: &str) -> PathBuf {
    support::demo_home("guard", name, 4, SEED)
}

fn opts(home: &Path) -> NodeOptions {
    NodeOptions {
        home: home.to_path_buf(),
        index: 0,
        lying_time: false,
        omit_ticks: false,
        byzantine: None,
        http: "127.0.0.1:0".parse().unwrap(),
        snapshot_every: 0,
        retain_blocks: None,
        signing_state: None,
    }
}

fn open(home: &Path) -> Result<State<Box<dyn Application>>, NodeError> {
    State::open(opts(home), &factory())
}

/// Runs a future that never waits (the signer is synchronous).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("signing is synchronous"),
    }
}

fn vote(
    node: &State<Box<dyn Application>>,
    typ: VoteType,
    round: u32,
    value: Option<Hash32>,
) -> Vote {
    Vote {
        typ,
        height: Height(1),
        round: Round::new(round),
        value: value.map_or(NilOrVal::Nil, NilOrVal::Val),
        validator: node.me(),
        extension: None,
    }
}

/// What the engine signs at height 1 round `r` as the node signs it: its prevote and
/// precommit for `value`; `Err` when refused.
fn votes(
    signer: &dyn Signer<Ctx>,
    node: &State<Box<dyn Application>>,
    r: u32,
    value: Option<Hash32>,
) -> Vec<bool> {
    [VoteType::Prevote, VoteType::Precommit]
        .into_iter()
        .map(|t| ready(signer.sign_vote(vote(node, t, r, value))).is_ok())
        .collect()
}

// A validator signs its part, prevote and precommit at height 1; within that life the same
// messages are signed again (identical bytes) and a different one is refused; then its home is
// wiped (localnet `--wipe-restarted`: all but the key and the signing state) and it restarts.
#[test]
fn a_wiped_validator_with_its_signing_state_never_signs_again_where_it_signed() {
    let home = home("wiped");
    let node = open(&home).unwrap();
    let me = node.me();
    let r = (0..4)
        .find(|r| proposer_of(&node.vset, Height(1), Round::new(*r)).address == me)
        .unwrap();
    let mut node = node;
    let (_, part) = node.propose(Height(1), Round::new(r)).unwrap().unwrap();
    let id = part.block.id();
    let signer = node.engine_signer();
    assert_eq!(votes(&signer, &node, r, Some(id)), [true, true]);
    // The identical vote again (an engine re-sending it): allowed, the same signature.
    let a = ready(signer.sign_vote(vote(&node, VoteType::Prevote, r, Some(id)))).unwrap();
    let b = ready(signer.sign_vote(vote(&node, VoteType::Prevote, r, Some(id)))).unwrap();
    assert_eq!(a.signature, b.signature);
    // Another value (nil) at the same height and round: refused, counted.
    assert_eq!(votes(&signer, &node, r, None), [false, false]);
    node.refresh_signing_status();
    let s = node.core.status().signing.clone();
    assert_eq!(s.refused.get("conflict"), Some(&2), "{s:?}");
    assert_eq!(s.signed, 3, "part, prevote, precommit: {s:?}");
    drop(node);

    // The home is lost, the key and the signing state kept.
    wipe_node_dir(&home, 0).unwrap();
    let dir = ccron_node::core::node_dir(&home, 0);
    assert!(!dir.join("parts.log").exists() && !dir.join("blocks.log").exists());
    assert!(dir.join("signing.state").exists());
    // The node would start at height 1, which it signed at: it refuses to start.
    match open(&home) {
        Err(NodeError::Signing(SigningStateError::SignedAhead { floor, start, .. })) => {
            assert_eq!((floor, start), (1, 1));
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a wiped validator started at a height it signed"),
    }
    // Whatever starts it anyway (a node at any height below the floor, the guard opened as the
    // node opens it): every vote, proposal round and part at height 1 is refused, any round.
    let guard = ccron_malachite::guard::SharedGuard::new(
        ccron_node::signguard::SigningGuard::open(&dir.join("signing.state"), false).unwrap(),
    );
    for round in [r, r + 1, r + 7] {
        for (kind, bytes) in [
            (ccron_node::signguard::SignKind::Prevote, b"nil".as_slice()),
            (ccron_node::signguard::SignKind::Precommit, b"other"),
            (ccron_node::signguard::SignKind::Part, b"block"),
            (ccron_node::signguard::SignKind::Proposal, b"value"),
        ] {
            assert!(matches!(
                guard.sign(kind, 1, Round::new(round), bytes),
                Err(SignRefusal::BelowFloor { floor: 1, .. })
            ));
        }
    }
    assert_eq!(guard.counters().refused.get("below_floor"), Some(&12));

    // The attack the guard stops: the same wipe without the signing state lets the node open
    // at height 1 and sign a nil prevote and precommit where it voted for the value.
    wipe_node_dir(&home, 0).unwrap();
    std::fs::remove_file(dir.join("signing.state")).unwrap();
    let node = open(&home).unwrap();
    assert_eq!(
        votes(&node.engine_signer(), &node, r, None),
        [true, true],
        "without its state a wiped validator equivocates"
    );
    std::fs::remove_dir_all(&home).unwrap();
}

// A restart that keeps the home (SIGKILL, the engine's WAL and part log kept): the node
// starts, re-signs exactly what it signed, and refuses anything else at those rounds or below.
#[test]
fn a_restarted_validator_with_its_wal_resigns_only_the_same_messages() {
    let home = home("kept");
    let mut node = open(&home).unwrap();
    let me = node.me();
    let r = (0..4)
        .find(|r| proposer_of(&node.vset, Height(1), Round::new(*r)).address == me)
        .unwrap();
    let (_, part) = node.propose(Height(1), Round::new(r)).unwrap().unwrap();
    let id = part.block.id();
    assert_eq!(
        votes(&node.engine_signer(), &node, r, Some(id)),
        [true, true]
    );
    drop(node);
    let dir = ccron_node::core::node_dir(&home, 0);
    std::fs::create_dir_all(dir.join("wal")).unwrap();
    let node = open(&home).unwrap();
    let signer = node.engine_signer();
    assert_eq!(votes(&signer, &node, r, Some(id)), [true, true]);
    assert_eq!(votes(&signer, &node, r, None), [false, false]);
    if r > 0 {
        assert_eq!(votes(&signer, &node, r - 1, None), [false, false]);
    }
    // A later round of the same height is the engine's to decide (its WAL holds its lock).
    assert_eq!(votes(&signer, &node, r + 1, None), [true, true]);
    assert_eq!(node.guard().floor(), 0);
    std::fs::remove_dir_all(&home).unwrap();
}

// The state file damaged: the node refuses to start, and the file is left as it was.
#[test]
fn a_corrupt_signing_state_stops_the_node() {
    let home = home("corrupt");
    let mut node = open(&home).unwrap();
    let me = node.me();
    let r = (0..4)
        .find(|r| proposer_of(&node.vset, Height(1), Round::new(*r)).address == me)
        .unwrap();
    node.propose(Height(1), Round::new(r)).unwrap().unwrap();
    drop(node);
    let path = ccron_node::core::node_dir(&home, 0).join("signing.state");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[12] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    std::fs::create_dir_all(ccron_node::core::node_dir(&home, 0).join("wal")).unwrap();
    match open(&home) {
        Err(NodeError::Signing(SigningStateError::Corrupt { .. })) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a corrupt signing state was accepted"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    std::fs::remove_dir_all(&home).unwrap();
}
