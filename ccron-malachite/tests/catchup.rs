//! The certificate a node catching up from a peer's snapshot believes (issue 23, item 5):
//! [`CertificateVerifier`] against forged, short, duplicate-signer, unknown-signer,
//! other-value, other-chain, nil-vote and forged-sample certificates, each refused with its
//! typed reason; and on every case the same verdict as the engine's own
//! `VerifierExt::verify_commit_certificate` with the adapter's verifier (one rule).

use ccron_malachite::commit::{CertificateVerifier, MalachiteCommit};
use ccron_malachite::context::{
    Address, ClockSample, Ctx, Ed25519Signer, Ed25519Verifier, Hash32, Height, ValidatorSet, Vote,
    extension_signing_bytes,
};
use ccron_node::catchup::{CommitRefusal, CommitVerifier};
use ccron_node::crypto::SigningDomain;
use malachitebft_core_types::{
    CommitCertificate, CommitSignature, NilOrVal, Round, SignedMessage, ThresholdParams,
    VoteExtensionScope, VoteType,
};
use malachitebft_signing::VerifierExt as _;

fn domain(chain: &str) -> SigningDomain {
    SigningDomain::of_version(2, chain.as_bytes()).unwrap()
}

fn signer(i: u8, chain: &str) -> Ed25519Signer {
    Ed25519Signer::new([i; 32], domain(chain))
}

fn vset() -> ValidatorSet {
    let keys: Vec<[u8; 32]> = (1..=4u8).map(|i| signer(i, "a").public_key()).collect();
    ValidatorSet::new(&keys)
}

const H: u64 = 61;
const R: u32 = 2;

fn id() -> Hash32 {
    Hash32([7; 32])
}

/// Validator `i`'s precommit signature for `value` at (H, R) in `chain`, under `address`.
fn precommit(
    i: u8,
    chain: &str,
    value: NilOrVal<Hash32>,
    address: Address,
) -> CommitSignature<Ctx> {
    let s = signer(i, chain);
    let vote = Vote {
        typ: VoteType::Precommit,
        height: Height(H),
        round: Round::new(R),
        value,
        validator: address,
        extension: None,
    };
    CommitSignature {
        address,
        signature: s.sign_raw(&vote.signing_bytes(&domain(chain))),
    }
}

fn honest(i: u8) -> CommitSignature<Ctx> {
    precommit(
        i,
        "a",
        NilOrVal::Val(id()),
        Address(signer(i, "a").public_key()),
    )
}

fn commit(sigs: Vec<CommitSignature<Ctx>>) -> MalachiteCommit {
    MalachiteCommit {
        certificate: CommitCertificate {
            height: Height(H),
            round: Round::new(R),
            value_id: id(),
            commit_signatures: sigs,
        },
        extensions: Vec::new(),
    }
}

/// Validator `i`'s signed clock sample on the certificate's scope.
fn sample(i: u8, time_ms: i64) -> (Address, malachitebft_core_types::SignedExtension<Ctx>) {
    let s = signer(i, "a");
    let address = Address(s.public_key());
    let scope = VoteExtensionScope::<Ctx>::new(Height(H), Round::new(R), id(), address);
    let ext = ClockSample { time_ms };
    let sig = s.sign_raw(&extension_signing_bytes(&domain("a"), &scope, &ext));
    (address, SignedMessage::new(ext, sig))
}

/// Runs a future that never waits (the adapter's verifier is synchronous).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("verification is synchronous"),
    }
}

#[test]
fn only_a_quorum_of_distinct_validators_precommits_in_this_chain_is_believed() {
    let v = CertificateVerifier::new(vset(), domain("a"));
    let outsider = Address(signer(9, "a").public_key());
    let v2 = Address(signer(2, "a").public_key());
    let mut with_samples = commit(vec![honest(1), honest(2), honest(3)]);
    with_samples.extensions = vec![sample(1, 1_000), sample(2, 1_001)];
    let mut forged_sample = with_samples.clone();
    forged_sample.extensions[1].1.message.time_ms = 5_000;
    let cases: Vec<(&str, MalachiteCommit, Result<(), CommitRefusal>)> = vec![
        (
            "3 of 4",
            commit(vec![honest(1), honest(2), honest(3)]),
            Ok(()),
        ),
        ("4 of 4", commit((1..=4).map(honest).collect()), Ok(())),
        ("with samples", with_samples, Ok(())),
        (
            "short",
            commit(vec![honest(1), honest(2)]),
            Err(CommitRefusal::NotEnoughPower {
                signed: 2,
                total: 4,
            }),
        ),
        (
            "empty",
            commit(Vec::new()),
            Err(CommitRefusal::NotEnoughPower {
                signed: 0,
                total: 4,
            }),
        ),
        (
            "duplicate signer",
            commit(vec![honest(1), honest(2), honest(2)]),
            Err(CommitRefusal::DuplicateSigner(v2.to_string())),
        ),
        (
            "forged (another key under validator 2's address)",
            commit(vec![
                honest(1),
                precommit(9, "a", NilOrVal::Val(id()), v2),
                honest(3),
            ]),
            Err(CommitRefusal::BadSignature(v2.to_string())),
        ),
        (
            "unknown signer",
            commit(vec![honest(1), honest(2), honest(9)]),
            Err(CommitRefusal::UnknownSigner(outsider.to_string())),
        ),
        (
            "another value",
            commit(vec![
                honest(1),
                precommit(2, "a", NilOrVal::Val(Hash32([8; 32])), v2),
                honest(3),
            ]),
            Err(CommitRefusal::BadSignature(v2.to_string())),
        ),
        (
            "nil precommit",
            commit(vec![
                honest(1),
                precommit(2, "a", NilOrVal::Nil, v2),
                honest(3),
            ]),
            Err(CommitRefusal::BadSignature(v2.to_string())),
        ),
        (
            "another chain",
            commit(vec![
                honest(1),
                precommit(2, "b", NilOrVal::Val(id()), v2),
                honest(3),
            ]),
            Err(CommitRefusal::BadSignature(v2.to_string())),
        ),
        (
            "forged clock sample",
            forged_sample,
            Err(CommitRefusal::BadSignature(format!("{v2} (clock sample)"))),
        ),
    ];
    let engine = Ed25519Verifier::new(domain("a"));
    for (name, c, want) in cases {
        assert_eq!(v.verify_commit(&c), want, "{name}");
        // The engine's own certificate check agrees (it does not look at samples).
        if name != "forged clock sample" {
            let theirs = ready(engine.verify_commit_certificate(
                &Ctx,
                &c.certificate,
                &vset(),
                ThresholdParams::default(),
            ));
            assert_eq!(
                theirs.is_ok(),
                want.is_ok(),
                "{name}: engine says {theirs:?}"
            );
        }
    }
    // Another chain's verifier refuses this chain's honest certificate.
    let other = CertificateVerifier::new(vset(), domain("b"));
    assert!(matches!(
        other.verify_commit(&commit(vec![honest(1), honest(2), honest(3)])),
        Err(CommitRefusal::BadSignature(_))
    ));
}
