//! The simulator-only signature scheme `sim`: a keyed-hash tag instead of a signature.
//!
//! A tag is 64 bytes, the size of an ed25519 signature, so every message has the same size
//! and layout under either scheme: HMAC-SHA-256 of the message under the signer's 32-byte
//! secret, written twice (`tag = mac || mac`; the verifier compares all 64 bytes). It costs one
//! pass of SHA-256's compression function over the message plus one call; the pads' states are
//! computed once per key.
//!
//! What it gives the simulated cluster:
//! - **Only a key holder can tag.** A [`SimSigningKey`] holds its signer's secret; a
//!   [`SimVerifyingKey`] holds it too (verifying a keyed hash needs the secret), but this
//!   module gives it no way to produce a tag: it only answers whether a tag is right. The
//!   simulator's keyring ([`crate::crypto::Keyring`]) holds the verifying keys of every
//!   replica and client, so verifying resolves the secret through the keyring; a replica —
//!   and so a Byzantine strategy, which runs inside its replica — is handed only its own
//!   signing key.
//! - **Any changed byte fails**: a changed message byte changes the inner hash, a changed tag
//!   byte fails the comparison of all 64 bytes (up to the 2^-256 chance of a SHA-256 collision).
//! - **Cheap**: about 0.3-0.6 µs for a protocol message against ~17 µs to sign and ~40 µs to
//!   verify ed25519 (`cargo bench -p sim-bft --bench verify`).
//!
//! What it does not prove: anything about the signature scheme itself. Malleable encodings
//! (a non-canonical `s`), small-order points and torsion components, and batch-verification
//! disagreements (the cofactored equation of [`ccron::sig`]) exist only under ed25519, and only
//! runs with ed25519 signatures cover them (`docs/simulator.md`, "Signature schemes").

use ccron::sig::{PublicKey, SignatureScheme};
use sha2::{Digest as _, Sha256};

use super::{Digest32, SigBytes};

/// HMAC's inner pad byte.
const IPAD: u8 = 0x36;
/// HMAC's outer pad byte.
const OPAD: u8 = 0x5c;

/// SHA-256's initial state.
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// SHA-256's compression function over one 64-byte block.
fn compress(state: &mut [u32; 8], block: &[u8; 64]) {
    sha2::compress256(state, &[(*block).into()]);
}

/// A key's precomputed HMAC states: SHA-256's state after the one block of `k ^ pad`. The tag
/// runs the compression function directly (the same SHA-256, without the streaming API's
/// buffering), which is most of its cost for the short messages of the protocol.
#[derive(Clone)]
struct Keyed {
    inner: [u32; 8],
    outer: [u32; 8],
}

impl Keyed {
    fn new(secret: &Digest32) -> Self {
        let padded = |pad: u8| {
            let mut block = [pad; 64];
            for (b, s) in block.iter_mut().zip(secret) {
                *b ^= s;
            }
            let mut state = IV;
            compress(&mut state, &block);
            state
        };
        Self {
            inner: padded(IPAD),
            outer: padded(OPAD),
        }
    }

    /// SHA-256 of (the 64-byte key block behind `state`) || `msg`.
    fn finish(mut state: [u32; 8], msg: &[u8]) -> [u8; 32] {
        let mut blocks = msg.chunks_exact(64);
        for b in &mut blocks {
            let mut block = [0u8; 64];
            block.copy_from_slice(b);
            compress(&mut state, &block);
        }
        let rest = blocks.remainder();
        // Padding: 0x80, zeros, then the bit length of key block and message, big endian.
        let bits = (64 + msg.len() as u64).wrapping_mul(8);
        let mut tail = [0u8; 128];
        tail[..rest.len()].copy_from_slice(rest);
        tail[rest.len()] = 0x80;
        let end = if rest.len() + 9 <= 64 { 64 } else { 128 };
        tail[end - 8..end].copy_from_slice(&bits.to_be_bytes());
        for b in tail[..end].chunks_exact(64) {
            let mut block = [0u8; 64];
            block.copy_from_slice(b);
            compress(&mut state, &block);
        }
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }

    /// The tag of `msg` under this key: its HMAC-SHA-256, twice.
    fn tag(&self, msg: &[u8]) -> SigBytes {
        let mac = Self::finish(self.outer, &Self::finish(self.inner, msg));
        let mut tag = [0u8; 64];
        tag[..32].copy_from_slice(&mac);
        tag[32..].copy_from_slice(&mac);
        tag
    }
}

/// The public key naming the holder of `secret` (a hash of it: it names, it does not verify).
fn public_of(secret: &Digest32) -> PublicKey {
    let mut h = Sha256::new();
    h.update(b"sim-bft sim scheme public key v1");
    h.update(secret);
    h.finalize().into()
}

/// What signs under the `sim` scheme: the signer's secret (its HMAC states).
#[derive(Clone)]
pub struct SimSigningKey {
    keyed: Keyed,
    public: PublicKey,
}

impl SimSigningKey {
    /// The key whose secret is `secret`.
    pub(super) fn from_secret(secret: &Digest32) -> Self {
        Self {
            keyed: Keyed::new(secret),
            public: public_of(secret),
        }
    }

    /// The verifying key of this signer.
    pub fn verifying_key(&self) -> SimVerifyingKey {
        SimVerifyingKey {
            keyed: self.keyed.clone(),
            public: self.public,
        }
    }

    /// The public key naming this signer.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }
}

impl std::fmt::Debug for SimSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimSigningKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// What verifies a signer's tags under the `sim` scheme: it holds the signer's secret (a keyed
/// hash is checked by recomputing it) but can only answer whether a tag is right.
#[derive(Clone)]
pub struct SimVerifyingKey {
    keyed: Keyed,
    public: PublicKey,
}

impl std::fmt::Debug for SimVerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimVerifyingKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl PartialEq for SimVerifyingKey {
    fn eq(&self, other: &Self) -> bool {
        self.public == other.public
    }
}

impl Eq for SimVerifyingKey {}

/// The simulator-only keyed-hash scheme (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sim;

impl SignatureScheme for Sim {
    type SigningKey = SimSigningKey;
    type VerifyingKey = SimVerifyingKey;

    fn public_key(key: &SimVerifyingKey) -> PublicKey {
        key.public
    }

    fn sign(key: &SimSigningKey, msg: &[u8]) -> SigBytes {
        key.keyed.tag(msg)
    }

    fn verify(key: &SimVerifyingKey, msg: &[u8], sig: &SigBytes) -> bool {
        key.keyed.tag(msg) == *sig
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> SimSigningKey {
        SimSigningKey::from_secret(&[i; 32])
    }

    #[test]
    fn the_tag_is_hmac_sha256_twice() {
        // RFC 4231 test case 2 ("Jefe"), first half; the key is zero-padded to 32 bytes,
        // which HMAC does itself for short keys.
        let mut secret = [0u8; 32];
        secret[..4].copy_from_slice(b"Jefe");
        let tag = Sim::sign(
            &SimSigningKey::from_secret(&secret),
            b"what do ya want for nothing?",
        );
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let got: String = tag[..32].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, want);
        assert_eq!(tag[..32], tag[32..]);
    }

    /// The compression-function implementation against the streaming one (`sha2::Sha256`
    /// fed the key blocks and the message) at every length around the block boundaries.
    #[test]
    fn the_tag_equals_streaming_hmac_at_every_length() {
        let secret = [7u8; 32];
        let k = SimSigningKey::from_secret(&secret);
        let hmac = |pad: u8, msg: &[u8]| -> [u8; 32] {
            let mut block = [pad; 64];
            for (b, s) in block.iter_mut().zip(&secret) {
                *b ^= s;
            }
            let mut h = Sha256::new();
            h.update(block);
            h.update(msg);
            h.finalize().into()
        };
        for len in 0..300 {
            let msg: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mac = hmac(OPAD, &hmac(IPAD, &msg));
            let mut want = [0u8; 64];
            want[..32].copy_from_slice(&mac);
            want[32..].copy_from_slice(&mac);
            assert_eq!(Sim::sign(&k, &msg), want, "length {len}");
        }
    }

    #[test]
    fn any_changed_byte_fails_and_other_keys_fail() {
        let k = key(1);
        let vk = k.verifying_key();
        let msg = b"prepare view 0 seq 5".to_vec();
        let tag = Sim::sign(&k, &msg);
        assert!(Sim::verify(&vk, &msg, &tag));
        for i in 0..64 {
            let mut bad = tag;
            bad[i] ^= 0x01;
            assert!(!Sim::verify(&vk, &msg, &bad), "tag byte {i}");
        }
        for i in 0..msg.len() {
            let mut bad = msg.clone();
            bad[i] ^= 0x80;
            assert!(!Sim::verify(&vk, &bad, &tag), "message byte {i}");
        }
        let mut longer = msg.clone();
        longer.push(0);
        assert!(!Sim::verify(&vk, &longer, &tag));
        assert!(!Sim::verify(&vk, &msg[..msg.len() - 1], &tag));
        assert!(!Sim::verify(&key(2).verifying_key(), &msg, &tag));
        assert!(!Sim::verify(&vk, &msg, &[0; 64]));
        assert_ne!(
            Sim::public_key(&vk),
            Sim::public_key(&key(2).verifying_key())
        );
        assert_eq!(Sim::public_key(&vk), k.public_key());
    }

    #[test]
    fn batch_answers_as_single_checks() {
        let k = key(3);
        let vk = k.verifying_key();
        let msgs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 20]).collect();
        let mut tags: Vec<SigBytes> = msgs.iter().map(|m| Sim::sign(&k, m)).collect();
        tags[2][40] ^= 1;
        let checks: Vec<ccron::sig::SigCheck<'_, SimVerifyingKey>> = msgs
            .iter()
            .zip(&tags)
            .map(|(msg, sig)| ccron::sig::SigCheck { key: &vk, msg, sig })
            .collect();
        assert_eq!(
            Sim::verify_batch(&checks),
            [true, true, false, true, true, true]
        );
    }
}
