//! Keys and signatures of a node: the validator's ed25519 signer and the one verification rule
//! every node applies to votes, proposals, ticks, requests and clock samples: `ccron::sig`'s
//! pinned cofactored rule ([`ccron::sig::Ed25519`]), the one sim-bft verifies with, so both
//! engines accept exactly the same signatures ([`Ed25519`], the kernel's
//! [`ccron::host::Verify`]).

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
}
