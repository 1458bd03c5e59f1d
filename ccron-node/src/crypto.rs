//! Keys and signatures of a node: the validator's ed25519 signer and the one verification rule
//! every node applies to ticks, requests and clock samples ([`Ed25519`], the kernel's
//! [`ccron::host::Verify`]).

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};

use crate::types::{PubKey, Sig};

/// Verifies an ed25519 signature; false for a malformed key.
pub fn verify_raw(public_key: &PubKey, bytes: &[u8], signature: &Sig) -> bool {
    match VerifyingKey::from_bytes(&public_key.0) {
        Ok(key) => key
            .verify(bytes, &ed25519_dalek::Signature::from_bytes(&signature.0))
            .is_ok(),
        Err(_) => false,
    }
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
