//! The simulator-only signature scheme `sim`: a keyed-hash tag instead of a signature.
//!
//! A tag is 64 bytes, the size of an ed25519 signature, so every message has the same size
//! and layout under either scheme: SipHash-2-4 with its 128-bit output (a keyed PRF built as a
//! MAC for short messages) of the message under a 128-bit key derived from the signer's 32-byte
//! secret, written four times (`tag = mac || mac || mac || mac`; the verifier compares all 64
//! bytes). It costs about 1-2 CPU cycles per message byte plus a few dozen per message, which
//! matters on machines without SHA extensions: the HMAC-SHA-256 tag it replaced (issue 28,
//! `docs/benchmarks-sim-bft.md`) ran SHA-256's compression function in software at least twice
//! per message: a quarter of the instructions of a 10-minute `sim` run there.
//!
//! What it gives the simulated cluster:
//! - **Only a key holder can tag.** A [`SimSigningKey`] holds its signer's secret; a
//!   [`SimVerifyingKey`] holds it too (verifying a keyed hash needs the secret), but this
//!   module gives it no way to produce a tag: it only answers whether a tag is right. The
//!   simulator's keyring ([`crate::crypto::Keyring`]) holds the verifying keys of every
//!   replica and client, so verifying resolves the secret through the keyring; a replica —
//!   and so a Byzantine strategy, which runs inside its replica — is handed only its own
//!   signing key.
//! - **Any changed byte fails**: a changed message byte changes the MAC (up to the 2^-128
//!   chance of a SipHash-128 collision under a key the attacker does not hold), a changed tag
//!   byte fails the comparison of all 64 bytes.
//! - **Cheap**: well under 0.1 µs for a protocol message against ~17 µs to sign and ~40 µs to
//!   verify ed25519 (`cargo bench -p sim-bft --bench verify`).
//!
//! What it does not prove: anything about the signature scheme itself. Malleable encodings
//! (a non-canonical `s`), small-order points and torsion components, and batch-verification
//! disagreements (the cofactored equation of [`ccron::sig`]) exist only under ed25519, and only
//! runs with ed25519 signatures cover them (`docs/simulator.md`, "Signature schemes").

use std::hash::Hasher as _;

use ccron::sha256::Sha256;
use ccron::sig::{PublicKey, SignatureScheme};
use siphasher::sip128::{Hasher128 as _, SipHasher24};

use super::{Digest32, SigBytes};

/// A key's SipHash key: 128 bits derived from the signer's secret (SHA-256 of a domain label
/// and the secret, first half), computed once per key.
#[derive(Clone)]
struct Keyed {
    key: [u8; 16],
}

impl Keyed {
    fn new(secret: &Digest32) -> Self {
        let mut h = Sha256::new();
        h.update(b"sim-bft sim scheme tag key v2");
        h.update(secret);
        let d: Digest32 = h.finalize().into();
        let mut key = [0u8; 16];
        key.copy_from_slice(&d[..16]);
        Self { key }
    }

    /// The tag of `msg` under this key: its SipHash-2-4-128, four times.
    fn tag(&self, msg: &[u8]) -> SigBytes {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(msg);
        let mac = h.finish128().as_bytes();
        let mut tag = [0u8; 64];
        for part in tag.chunks_exact_mut(16) {
            part.copy_from_slice(&mac);
        }
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

/// What signs under the `sim` scheme: the signer's secret (its SipHash key).
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

    /// The tag is SipHash-2-4-128 four times (the reference implementation's first test
    /// vector, `vectors.h` of the SipHash repository: key 00..0f, the empty message), under
    /// the key derived from the secret.
    #[test]
    fn the_tag_is_siphash128_four_times() {
        let mut key = [0u8; 16];
        for (i, b) in key.iter_mut().enumerate() {
            *b = i as u8;
        }
        let tag = Keyed { key }.tag(b"");
        let want = "a3817f04ba25a8e66df67214c7550293";
        let got: String = tag[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, want);
        for part in tag.chunks_exact(16) {
            assert_eq!(part, &tag[..16]);
        }
        // Keys from different secrets differ; the same secret gives the same key.
        assert_ne!(Keyed::new(&[1; 32]).key, Keyed::new(&[2; 32]).key);
        assert_eq!(Keyed::new(&[1; 32]).key, Keyed::new(&[1; 32]).key);
    }

    /// Every length around SipHash's 8-byte word boundaries: a tag verifies, and differs from
    /// the tag of the message one byte shorter.
    #[test]
    fn tags_at_every_length_verify_and_differ() {
        let k = key(7);
        let vk = k.verifying_key();
        let mut prev = None;
        for len in 0..300 {
            let msg: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let tag = Sim::sign(&k, &msg);
            assert!(Sim::verify(&vk, &msg, &tag), "length {len}");
            assert_ne!(Some(tag), prev, "length {len}");
            prev = Some(tag);
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
