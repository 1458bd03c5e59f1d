//! Keys and signatures of a node: the validator's ed25519 signer, the one verification rule
//! every node applies to votes, proposals, ticks, requests and clock samples (`ccron::sig`'s
//! pinned cofactored rule, [`ccron::sig::Ed25519`], the one sim-bft verifies with, so both
//! engines accept exactly the same signatures: [`Ed25519`], the kernel's
//! [`ccron::host::Verify`]), and the one signing domain every signed message goes through
//! ([`SigningDomain::message`]).
//!
//! **Signing domains.** Every signature a node makes or checks covers
//! `domain.message(kind, fields)`: a vote, a proposal, a proposal part, a clock sample, a tick,
//! a client request (and the engine's validator proofs). The genesis names the version
//! (`signing_domain`, [`crate::records::Genesis::signing_domain`]):
//!
//! - version 1 (a genesis without the field, every chain initialised before it existed): the
//!   kind's historic tag followed by the fields ([`SignedKind::v1_tag`]). No chain id: a
//!   signature made for one such chain verifies on another chain with the same keys. Kept so
//!   that the stores those chains wrote (blocks, parts, snapshots, the engine's WAL) still
//!   replay and verify.
//! - version 2 (what `init` writes): `"ccron-sig/v2"` ‖ len(kind) ‖ kind ‖ len(chain id) ‖
//!   chain id ‖ fields, lengths as u32 little-endian ([`SIGNING_DOMAIN_V2`]). A signature
//!   made for one chain never verifies on another, nor as another kind.

use std::sync::Arc;

use ed25519_dalek::{Signer as _, SigningKey};

use crate::types::{PubKey, Sig};

/// Verifies an ed25519 signature under `ccron::sig`'s pinned rule; false for a malformed key.
pub fn verify_raw(public_key: &PubKey, bytes: &[u8], signature: &Sig) -> bool {
    ccron::sig::Ed25519::verify_public(&public_key.0, bytes, &signature.0)
}

/// The verification rule nodes judge blocks with (the kernel's [`ccron::host::Verify`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ed25519;

impl ccron::host::Verify for Ed25519 {
    fn verify(&self, public_key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> bool {
        verify_raw(&PubKey(*public_key), message, &Sig(*signature))
    }
}

/// The prefix of every version 2 signed message.
pub const SIGNING_DOMAIN_V2: &[u8] = b"ccron-sig/v2";

/// The largest chain id (bytes) a version 2 domain names (the outbox dispatcher's bound too).
pub const MAX_CHAIN_ID_BYTES: usize = 64;

/// What a signature is for: each kind has its own tag, so no signature of one kind is taken
/// for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SignedKind {
    /// A consensus vote (prevote or precommit).
    Vote,
    /// A consensus proposal.
    Proposal,
    /// A streamed proposal part (the block and its proposer's claim).
    ProposalPart,
    /// A clock sample (the vote extension on a precommit).
    ClockSample,
    /// A clock sample of [`crate::store::PlainCommit`] (tools and tests without an engine).
    PlainSample,
    /// A validator's tick.
    Tick,
    /// A client request.
    Request,
    /// The engine's proof binding a validator key to its network peer id.
    ValidatorProof,
}

impl SignedKind {
    /// The tag version 1 puts before the fields: the bytes stores written before version 2
    /// hold signatures over (empty for validator proofs, signed over the engine's own bytes).
    pub const fn v1_tag(self) -> &'static [u8] {
        match self {
            SignedKind::Vote => b"ccron-vote",
            SignedKind::Proposal => b"ccron-proposal",
            SignedKind::ProposalPart => b"ccron-part",
            SignedKind::ClockSample => b"ccron-clock",
            SignedKind::PlainSample => b"ccron-node/plain-sample",
            SignedKind::Tick => b"ccron-malachite/tick/v1",
            SignedKind::Request => b"ccron-malachite/client-request/v1",
            SignedKind::ValidatorProof => b"",
        }
    }

    /// Its name in a version 2 message.
    pub const fn name(self) -> &'static [u8] {
        match self {
            SignedKind::Vote => b"vote",
            SignedKind::Proposal => b"proposal",
            SignedKind::ProposalPart => b"proposal-part",
            SignedKind::ClockSample => b"clock-sample",
            SignedKind::PlainSample => b"plain-sample",
            SignedKind::Tick => b"tick",
            SignedKind::Request => b"client-request",
            SignedKind::ValidatorProof => b"validator-proof",
        }
    }
}

/// Why a genesis' signing domain is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DomainError {
    /// A version this build does not know.
    #[error("unknown signing domain version {0} (this build knows 1 and 2)")]
    UnknownVersion(u32),
    /// Version 2 without a chain id.
    #[error("signing domain 2 needs a non-empty chain_id")]
    NoChainId,
    /// A chain id over [`MAX_CHAIN_ID_BYTES`].
    #[error("chain id of {0} bytes is over the limit of {MAX_CHAIN_ID_BYTES}")]
    ChainIdTooLong(usize),
}

/// The signing domain of a chain: which bytes every signature of its nodes and clients covers
/// (see the module documentation). Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SigningDomain {
    /// Version 1: the kind's historic tag, then the fields; no chain id.
    V1,
    /// Version 2: the kind and the chain id, length-delimited, then the fields.
    V2 {
        /// The chain id (1 to [`MAX_CHAIN_ID_BYTES`] bytes).
        chain_id: Arc<[u8]>,
    },
}

impl SigningDomain {
    /// The version 2 domain of chain `chain_id`.
    ///
    /// # Errors
    /// An empty chain id or one over [`MAX_CHAIN_ID_BYTES`].
    pub fn chain(chain_id: &[u8]) -> Result<Self, DomainError> {
        Self::of_version(2, chain_id)
    }

    /// The domain of `version` (1 ignores the chain id) for chain `chain_id`.
    ///
    /// # Errors
    /// An unknown version; for version 2 an empty or oversized chain id.
    pub fn of_version(version: u32, chain_id: &[u8]) -> Result<Self, DomainError> {
        match version {
            1 => Ok(SigningDomain::V1),
            2 if chain_id.is_empty() => Err(DomainError::NoChainId),
            2 if chain_id.len() > MAX_CHAIN_ID_BYTES => {
                Err(DomainError::ChainIdTooLong(chain_id.len()))
            }
            2 => Ok(SigningDomain::V2 {
                chain_id: chain_id.into(),
            }),
            v => Err(DomainError::UnknownVersion(v)),
        }
    }

    /// Its version (1 or 2).
    pub fn version(&self) -> u32 {
        match self {
            SigningDomain::V1 => 1,
            SigningDomain::V2 { .. } => 2,
        }
    }

    /// The chain id it names (empty for version 1).
    pub fn chain_id(&self) -> &[u8] {
        match self {
            SigningDomain::V1 => &[],
            SigningDomain::V2 { chain_id } => chain_id,
        }
    }

    /// The bytes a signature of `kind` over `fields` covers: the one function every signing
    /// and verifying site calls.
    pub fn message(&self, kind: SignedKind, fields: &[u8]) -> Vec<u8> {
        match self {
            SigningDomain::V1 => {
                let tag = kind.v1_tag();
                let mut out = Vec::with_capacity(tag.len() + fields.len());
                out.extend_from_slice(tag);
                out.extend_from_slice(fields);
                out
            }
            SigningDomain::V2 { chain_id } => {
                let name = kind.name();
                let mut out = Vec::with_capacity(
                    SIGNING_DOMAIN_V2.len() + 8 + name.len() + chain_id.len() + fields.len(),
                );
                out.extend_from_slice(SIGNING_DOMAIN_V2);
                put_len(&mut out, name.len());
                out.extend_from_slice(name);
                put_len(&mut out, chain_id.len());
                out.extend_from_slice(chain_id);
                out.extend_from_slice(fields);
                out
            }
        }
    }

    /// Signs `fields` as a message of `kind` in this domain.
    pub fn sign(&self, signer: &Signer, kind: SignedKind, fields: &[u8]) -> Sig {
        signer.sign_raw(&self.message(kind, fields))
    }

    /// Whether `signature` is `public_key`'s over `fields` as a message of `kind` in this
    /// domain (the pinned rule, [`verify_raw`]).
    pub fn verify(
        &self,
        public_key: &PubKey,
        kind: SignedKind,
        fields: &[u8],
        signature: &Sig,
    ) -> bool {
        verify_raw(public_key, &self.message(kind, fields), signature)
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Lengths are bounded (kind names, chain ids of at most 64 bytes).
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

/// A validator's (or client's) signer.
#[derive(Clone)]
pub struct Signer {
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("public_key", &crate::types::hex(&self.public_key()))
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// From a 32-byte secret.
    pub fn new(secret: [u8; 32]) -> Self {
        Signer {
            key: SigningKey::from_bytes(&secret),
        }
    }

    /// The public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// Signs raw bytes.
    pub fn sign_raw(&self, bytes: &[u8]) -> Sig {
        Sig(self.key.sign(bytes).to_bytes())
    }

    /// The signing key (to sign client requests with).
    pub fn key(&self) -> &SigningKey {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::edwards::EdwardsPoint;
    use curve25519_dalek::scalar::Scalar;
    use sha2::{Digest as _, Sha512};

    /// A signature whose `R` carries a small-order component: the pinned cofactored rule
    /// accepts it, `ed25519_dalek`'s cofactorless `verify` rejects it.
    fn torsion_signature(key: &SigningKey, msg: &[u8]) -> [u8; 64] {
        let a = key.to_scalar();
        let r = Scalar::from(0x0fed_cba9_8765_4321_u64);
        let big_r = EdwardsPoint::mul_base(&r) + curve25519_dalek::constants::EIGHT_TORSION[1];
        let r_bytes = big_r.compress().to_bytes();
        let mut h = Sha512::new();
        h.update(r_bytes);
        h.update(key.verifying_key().as_bytes());
        h.update(msg);
        let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
        let s = r + k * a;
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&r_bytes);
        sig[32..].copy_from_slice(s.as_bytes());
        sig
    }

    // Issue 23, defect 6: the node verified with ed25519-dalek's own rule, not the pinned one
    // sim-bft uses; the two disagree on torsion signatures.
    #[test]
    fn the_node_verifies_with_the_pinned_rule_shared_with_sim_bft() {
        use ed25519_dalek::Verifier as _;
        let signer = Signer::new([7; 32]);
        let public = PubKey(signer.public_key());
        let sig = torsion_signature(signer.key(), b"tick");
        let dalek = signer
            .key()
            .verifying_key()
            .verify(b"tick", &ed25519_dalek::Signature::from_bytes(&sig))
            .is_ok();
        let pinned = ccron::sig::Ed25519::verify_public(&public.0, b"tick", &sig);
        assert!(pinned && !dalek, "the vector tells the two rules apart");
        assert_eq!(verify_raw(&public, b"tick", &Sig(sig)), pinned);
        assert!(verify_raw(&public, b"tick", &signer.sign_raw(b"tick")));
        assert!(!verify_raw(&public, b"tock", &signer.sign_raw(b"tick")));
    }

    #[test]
    fn version_1_is_the_historic_tag_and_version_2_names_kind_and_chain() {
        let v1 = SigningDomain::V1;
        assert_eq!(
            v1.message(SignedKind::Vote, b"xy"),
            b"ccron-votexy".to_vec()
        );
        let a = SigningDomain::chain(b"a").unwrap();
        let mut want = b"ccron-sig/v2".to_vec();
        want.extend_from_slice(&4u32.to_le_bytes());
        want.extend_from_slice(b"vote");
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(b"a");
        want.extend_from_slice(b"xy");
        assert_eq!(a.message(SignedKind::Vote, b"xy"), want);
        let b = SigningDomain::chain(b"b").unwrap();
        let s = Signer::new([1; 32]);
        let pk = PubKey(s.public_key());
        let sig = a.sign(&s, SignedKind::Tick, b"t");
        assert!(a.verify(&pk, SignedKind::Tick, b"t", &sig));
        assert!(
            !b.verify(&pk, SignedKind::Tick, b"t", &sig),
            "another chain"
        );
        assert!(
            !a.verify(&pk, SignedKind::Request, b"t", &sig),
            "another kind"
        );
        assert!(
            !v1.verify(&pk, SignedKind::Tick, b"t", &sig),
            "another version"
        );
        // Length-delimited: chain "ab" + fields "c" is not chain "a" + fields "bc".
        assert_ne!(
            SigningDomain::chain(b"ab")
                .unwrap()
                .message(SignedKind::Tick, b"c"),
            a.message(SignedKind::Tick, b"bc")
        );
        assert_eq!(SigningDomain::of_version(1, b""), Ok(SigningDomain::V1));
        assert_eq!(SigningDomain::chain(b""), Err(DomainError::NoChainId));
        assert_eq!(
            SigningDomain::chain(&[b'x'; 65]),
            Err(DomainError::ChainIdTooLong(65))
        );
        assert_eq!(
            SigningDomain::of_version(3, b"a"),
            Err(DomainError::UnknownVersion(3))
        );
    }
}
