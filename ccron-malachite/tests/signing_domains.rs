//! Signing domains on the real engine's adapter (issue 23, item 6): every signature names the
//! chain (genesis `signing_domain: 2`), so a vote, a proposal, a proposal part or a clock sample
//! a validator signed for chain A is refused, and counted, by a node of chain B with the same
//! keys; a genesis without the field (every chain initialised before it) keeps domain 1, whose
//! bytes are exactly what 8855341 signed (`fixtures/signing_domain_v1.txt`, written by that
//! build), so its stores still replay and verify.

mod support;

use std::path::{Path, PathBuf};

use ccron::host::Application;
use ccron_malachite::context::{
    Address, Block, ClockSample, Ctx, Ed25519Signer, Ed25519Verifier, Hash32, Height, Proposal,
    ProposalPart, Sig, Value, Vote, extension_signing_bytes, proposer_of,
};
use ccron_malachite::state::State;
use ccron_node::crypto::SigningDomain;
use ccron_node::localnet::localnet_secret;
use ccron_node::request::ClientRequest;
use ccron_node::{Factory, NodeOptions};
use malachitebft_app_channel::app::types::core::{NilOrVal, Round, VoteExtensionScope, VoteType};
use malachitebft_signing::{Signer as _, Verifier as _};

const SEED: u64 = 11;

fn hexs(b: &[u8]) -> String {
    ccron_node::types::hex(b)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Runs a future that never waits (the signer and verifier are synchronous).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("signing is synchronous"),
    }
}

/// The validators' engine signers of [`SEED`] (node order) in `domain`.
fn signers(domain: &SigningDomain) -> Vec<Ed25519Signer> {
    (0..4)
        .map(|i| Ed25519Signer::new(localnet_secret(SEED, i), domain.clone()))
        .collect()
}

/// What the validators of [`SEED`] and client key 9 sign in `domain`: a block of height 2 with
/// the clock samples of height 1 (round 2), a tick and a request; its part and proposal by
/// validator 2; four precommits for it. One line per signed item, as the fixture holds it.
fn fixture(domain: &SigningDomain) -> String {
    let signers = signers(domain);
    let node = |i: usize| ccron_node::crypto::Signer::new(localnet_secret(SEED, i));
    let mut out = String::new();
    let prev_id = Hash32([3; 32]);
    let mut samples = Vec::new();
    for (i, s) in signers.iter().enumerate() {
        let a = Address(s.public_key());
        let scope = VoteExtensionScope::<Ctx>::new(Height(1), Round::new(2), prev_id, a);
        let sample = ClockSample {
            time_ms: 1_700_000_000_000 + i as i64,
        };
        let sig = s.sign_raw(&extension_signing_bytes(domain, &scope, &sample));
        samples.push(ccron_node::CarriedSample {
            validator: a.into(),
            time_ms: sample.time_ms,
            signature: sig,
        });
    }
    samples.sort_by_key(|s| s.validator);
    let client = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let request = ClientRequest {
        client_key: client.verifying_key().to_bytes(),
        number: 42,
        payload: b"pay 7".to_vec(),
    }
    .sign(domain, &client);
    let block = Block {
        height: 2,
        prev_round: 2,
        prev_id,
        samples,
        agreed_time_ms: 1_700_000_000_001,
        ticks: vec![ccron_node::TickTx::sign(domain, 5, 17, &node(1))],
        requests: vec![request],
        // The first layout: the fixture's bytes were written before layout 2.
        prev_state: None,
    };
    out.push_str(&format!("block {}\n", hexs(&block.encode())));
    let proposer = Address(signers[2].public_key());
    let bytes = ProposalPart::signing_bytes(
        domain,
        Height(2),
        Round::new(0),
        Round::Nil,
        &proposer,
        &block,
    );
    let part = ProposalPart {
        height: Height(2),
        round: Round::new(0),
        valid_round: Round::Nil,
        proposer,
        block: block.clone(),
        signature: signers[2].sign_raw(&bytes),
    };
    out.push_str(&format!("part {}\n", hexs(&borsh::to_vec(&part).unwrap())));
    let proposal = Proposal {
        height: Height(2),
        round: Round::new(0),
        value: Value(block.clone()),
        pol_round: Round::Nil,
        proposer,
    };
    let signed = ready(signers[2].sign_proposal(proposal.clone())).unwrap();
    out.push_str(&format!(
        "proposal {} {}\n",
        hexs(&borsh::to_vec(&proposal).unwrap()),
        hexs(&signed.signature.0)
    ));
    for s in &signers {
        let vote = Vote {
            typ: VoteType::Precommit,
            height: Height(2),
            round: Round::new(0),
            value: NilOrVal::Val(block.id()),
            validator: Address(s.public_key()),
            extension: None,
        };
        let signed = ready(s.sign_vote(vote.clone())).unwrap();
        out.push_str(&format!(
            "vote {} {}\n",
            hexs(&borsh::to_vec(&vote).unwrap()),
            hexs(&signed.signature.0)
        ));
    }
    out
}

/// The signed items of a fixture text.
struct Signed {
    block: Block,
    part: ProposalPart,
    proposal: (Proposal, Sig),
    votes: Vec<(Vote, Sig)>,
}

fn sig(s: &str) -> Sig {
    Sig(unhex(s).try_into().unwrap())
}

fn parse(text: &str) -> Signed {
    let mut block = None;
    let mut part = None;
    let mut proposal = None;
    let mut votes = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "block" => block = Block::decode(&unhex(f[1])),
            "part" => part = borsh::from_slice(&unhex(f[1])).ok(),
            "proposal" => proposal = Some((borsh::from_slice(&unhex(f[1])).unwrap(), sig(f[2]))),
            "vote" => votes.push((borsh::from_slice(&unhex(f[1])).unwrap(), sig(f[2]))),
            other => panic!("{other}"),
        }
    }
    Signed {
        block: block.unwrap(),
        part: part.unwrap(),
        proposal: proposal.unwrap(),
        votes,
    }
}

fn fixture_v1() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/signing_domain_v1.txt"
    ))
    .unwrap()
}

/// How many of `signed`'s engine signatures (4 clock samples, the proposal, 4 votes) `verifier`
/// accepts, and whether the part, the tick and the request verify in `domain`.
fn accepted(verifier: &Ed25519Verifier, domain: &SigningDomain, signed: &Signed) -> [usize; 5] {
    let b = &signed.block;
    let samples = b
        .samples
        .iter()
        .filter(|s| {
            let scope = VoteExtensionScope::<Ctx>::new(
                Height(b.height - 1),
                Round::new(b.prev_round),
                b.prev_id,
                Address(s.validator.0),
            );
            let sample = ClockSample { time_ms: s.time_ms };
            ready(verifier.verify_signed_vote_extension(
                &scope,
                &sample,
                &s.signature,
                &ccron_node::types::PubKey(s.validator.0),
            ))
            .unwrap()
            .is_valid()
        })
        .count();
    let key = |a: &Address| ccron_node::types::PubKey(a.0);
    let (p, ps) = &signed.proposal;
    let proposal = usize::from(
        ready(verifier.verify_signed_proposal(p, ps, &key(&p.proposer)))
            .unwrap()
            .is_valid(),
    );
    let votes = signed
        .votes
        .iter()
        .filter(|(v, s)| {
            ready(verifier.verify_signed_vote(v, s, &key(&v.validator)))
                .unwrap()
                .is_valid()
        })
        .count();
    let part = usize::from(signed.part.verify(domain));
    let txs =
        usize::from(b.ticks[0].verify(domain)) + usize::from(b.requests[0].verify(domain).is_ok());
    [samples, proposal, votes, part, txs]
}

// Persisted bytes are forever: domain 1 is byte for byte what 8855341 signed, so the blocks,
// parts, snapshots and engine WAL of a chain initialised before signing domain 2 still verify.
#[test]
fn domain_1_signs_exactly_what_the_build_before_it_signed() {
    let old = fixture_v1();
    assert_eq!(fixture(&SigningDomain::V1), old);
    let v1 = parse(&old);
    let d1 = SigningDomain::V1;
    assert_eq!(
        accepted(&Ed25519Verifier::new(d1.clone()), &d1, &v1),
        [4, 1, 4, 1, 2]
    );
    // A chain of domain 2 refuses every one of them.
    let d2 = SigningDomain::chain(b"any").unwrap();
    assert_eq!(
        accepted(&Ed25519Verifier::new(d2.clone()), &d2, &v1),
        [0; 5]
    );
    // And what domain 2 signs is new bytes, refused by domain 1.
    let v2 = parse(&fixture(&d2));
    assert_eq!(
        accepted(&Ed25519Verifier::new(d2.clone()), &d2, &v2),
        [4, 1, 4, 1, 2]
    );
    assert_eq!(
        accepted(&Ed25519Verifier::new(d1.clone()), &d1, &v2),
        [0; 5]
    );
}

fn factory() -> Factory<Box<dyn Application>> {
    support::demo_factory()
}

fn home(name: &str) -> PathBuf {
    support::demo_home("domains", name, 4, SEED)
}

/// Rewrites `home`'s genesis as the build before signing domains wrote it: no `chain_id`, no
/// `signing_domain`.
fn as_old_genesis(home: &Path) {
    let path = home.join("genesis.json");
    let mut g: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let o = g.as_object_mut().unwrap();
    assert!(o.remove("chain_id").is_some() && o.remove("signing_domain") == Some(2.into()));
    std::fs::write(&path, serde_json::to_vec_pretty(&g).unwrap()).unwrap();
}

fn open(home: &Path, index: usize) -> State<Box<dyn Application>> {
    State::open(
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
        },
        &factory(),
    )
    .unwrap()
}

/// Feeds `signed`'s engine messages to `node` (its verifier, as the engine does) and, to its
/// part intake, the part of `signed`'s block that the proposer of (2, 0) signs in `domain`:
/// how many it accepts, as [`accepted`] counts them.
fn feed(
    node: &mut State<Box<dyn Application>>,
    signed: &Signed,
    domain: &SigningDomain,
) -> [usize; 5] {
    let own = node.core.domain().clone();
    let verdicts = accepted(&node.verifier(), &own, signed);
    let proposer = proposer_of(&node.vset, Height(2), Round::new(0)).address;
    let signer = signers(domain)
        .into_iter()
        .find(|s| Address(s.public_key()) == proposer)
        .unwrap();
    let block = signed.block.clone();
    let bytes = ProposalPart::signing_bytes(
        domain,
        Height(2),
        Round::new(0),
        Round::Nil,
        &proposer,
        &block,
    );
    let part = ProposalPart {
        height: Height(2),
        round: Round::new(0),
        valid_round: Round::Nil,
        proposer,
        block,
        signature: signer.sign_raw(&bytes),
    };
    node.received_part(b"peer", &part).unwrap();
    verdicts
}

/// A chain id of its own for `home` (two homes made in one millisecond may share one).
fn with_chain_id(home: &Path, id: &str) {
    let path = home.join("genesis.json");
    let mut g: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    g["chain_id"] = id.into();
    std::fs::write(&path, serde_json::to_vec_pretty(&g).unwrap()).unwrap();
}

// A genesis written before the field (domain 1) still verifies what its validators signed
// then; a new `init` (domain 2, a chain id) refuses those very signatures, counted by reason.
#[test]
fn an_old_genesis_keeps_domain_1_and_a_new_one_refuses_its_signatures() {
    let old = parse(&fixture_v1());
    let home_old = home("old");
    as_old_genesis(&home_old);
    let mut node = open(&home_old, 0);
    assert_eq!(node.core.domain(), &SigningDomain::V1);
    assert_eq!(feed(&mut node, &old, &SigningDomain::V1), [4, 1, 4, 1, 2]);
    assert_eq!(node.signature_refusals(), Default::default());
    assert_eq!(node.book().counters().bad_signature, 0);
    assert_eq!(node.book().counters().accepted, 1, "the part is held");

    let home_new = home("new");
    let mut node = open(&home_new, 0);
    assert_eq!(node.core.domain().version(), 2);
    assert_eq!(feed(&mut node, &old, &SigningDomain::V1), [0; 5]);
    let refused = node.signature_refusals();
    assert_eq!(
        (refused.extensions, refused.proposals, refused.votes),
        (4, 1, 4)
    );
    assert_eq!(node.book().counters().bad_signature, 1);
    for h in [home_old, home_new] {
        std::fs::remove_dir_all(h).unwrap();
    }
}

// Issue 23, item 6: no signing domain named the chain. Two chains with the same validator keys
// (two localnets of one seed): everything chain A's validators sign (clock samples, proposal,
// votes, proposal part; ticks and requests in its block) is refused by a node of chain B,
// typed and counted (`signatures_refused`, `proposal_parts.bad_signature`), and accepted by a
// node of chain A.
#[test]
fn a_node_of_chain_b_refuses_what_chain_a_signed_with_the_same_keys() {
    let (home_a, home_b) = (home("chain-a"), home("chain-b"));
    with_chain_id(&home_a, "chain-a");
    with_chain_id(&home_b, "chain-b");
    let mut a = open(&home_a, 0);
    let mut b = open(&home_b, 0);
    assert_ne!(a.core.domain(), b.core.domain(), "two chains, two ids");
    assert_eq!(a.core.validators(), b.core.validators(), "the same keys");
    let of_a = parse(&fixture(a.core.domain()));
    let domain_a = a.core.domain().clone();
    assert_eq!(feed(&mut a, &of_a, &domain_a), [4, 1, 4, 1, 2]);
    assert_eq!(a.signature_refusals(), Default::default());
    assert_eq!(a.book().counters().accepted, 1);
    assert_eq!(feed(&mut b, &of_a, &domain_a), [0; 5]);
    let refused = b.signature_refusals();
    assert_eq!(
        (refused.extensions, refused.proposals, refused.votes),
        (4, 1, 4)
    );
    assert_eq!(b.book().counters().bad_signature, 1);
    assert_eq!(b.book().counters().accepted, 0, "nothing of chain A held");
    for h in [home_a, home_b] {
        std::fs::remove_dir_all(h).unwrap();
    }
}
