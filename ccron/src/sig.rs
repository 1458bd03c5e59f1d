//! Signature schemes, and the one pinned ed25519 verification rule every engine uses.
//!
//! Replicas must agree on which signatures verify: if one honest replica accepts a signed
//! request or vote that another rejects, they disagree on a request's validity or a
//! certificate's weight. So the rule is ours and pinned, not "whatever the signature library's
//! `verify` does in the version the lock file happens to hold":
//!
//! - **Cofactored ed25519**: `[8]([s]B - [k]A - R) = 0` with `k = SHA-512(R || A || M)`, on the
//!   exact curve arithmetic of `curve25519-dalek =4.1.3` (pinned in the workspace, as is
//!   `ed25519-dalek`). A signature whose `s` is not canonical (`s >= l`) or whose `R` is not a
//!   point encoding is rejected.
//! - **Single and batched checks agree** ([`Ed25519::verify`], [`Ed25519::verify_batch`]): the
//!   batch is a random linear combination of the same cofactored equations (128-bit
//!   coefficients derived from a hash of the whole batch), so it accepts exactly the
//!   signatures single checks accept (up to a 2^-128 chance), and a failed batch falls back to
//!   single checks to find the bad ones. Which path a replica happens to take cannot make it
//!   disagree with another. With the cofactorless equation of `ed25519_dalek::Verifier` a
//!   signature whose `R` carries a small-order component passes a batch one time in eight
//!   (grindable) while failing alone.
//!
//! Every signature the ed25519 signing algorithm produces passes both.
//!
//! Schemes sit behind [`SignatureScheme`] (sign with a key handle, verify one, verify a batch;
//! 32-byte public keys, 64-byte signatures), so a host can run its protocol code unchanged
//! over another scheme: sim-bft's simulator-only keyed-hash scheme implements it too.

use std::collections::BTreeMap;

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use ed25519_dalek::Signer as _;
use sha2::{Digest as _, Sha512};

/// A public key in its 32-byte form.
pub type PublicKey = [u8; 32];

/// A signature in its 64-byte wire form.
pub type Signature = [u8; 64];

/// One signature to check: `sig` over `msg` by the holder of `key`.
#[derive(Debug)]
pub struct SigCheck<'a, K> {
    /// The signer's verifying key.
    pub key: &'a K,
    /// The signed bytes.
    pub msg: &'a [u8],
    /// The signature.
    pub sig: &'a Signature,
}

impl<K> Clone for SigCheck<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for SigCheck<'_, K> {}

/// A signature scheme: what signs (a key handle holding the secret), what verifies, and the
/// 32-byte public key that names a signer.
///
/// `verify_batch(checks)[i]` must equal `verify(checks[i])` for every input: a host may take
/// either path for any signature.
pub trait SignatureScheme {
    /// A key handle that can sign (it holds the secret).
    type SigningKey;
    /// A signer's key as verification needs it. It cannot sign.
    type VerifyingKey;

    /// The 32-byte public key naming the signer of `key`.
    fn public_key(key: &Self::VerifyingKey) -> PublicKey;

    /// Signs `msg` with `key`.
    fn sign(key: &Self::SigningKey, msg: &[u8]) -> Signature;

    /// Whether `sig` is `key`'s signature over `msg`.
    fn verify(key: &Self::VerifyingKey, msg: &[u8], sig: &Signature) -> bool;

    /// `result[i]` says whether `checks[i]` verifies, exactly as [`Self::verify`] says.
    fn verify_batch(checks: &[SigCheck<'_, Self::VerifyingKey>]) -> Vec<bool> {
        checks
            .iter()
            .map(|c| Self::verify(c.key, c.msg, c.sig))
            .collect()
    }
}

/// ed25519 under the pinned cofactored rule (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ed25519;

impl Ed25519 {
    /// The verifying key of a 32-byte public key (`None`: not a point encoding).
    pub fn verifying_key(public: &PublicKey) -> Option<ed25519_dalek::VerifyingKey> {
        ed25519_dalek::VerifyingKey::from_bytes(public).ok()
    }

    /// Verifies `sig` over `msg` by the holder of the 32-byte `public` key under the pinned
    /// rule (false for a key that is not a point encoding).
    pub fn verify_public(public: &PublicKey, msg: &[u8], sig: &Signature) -> bool {
        Self::verifying_key(public).is_some_and(|vk| Self::verify(&vk, msg, sig))
    }
}

/// Batches smaller than this are checked one by one (a multiscalar multiplication only pays
/// off from a few signatures on).
const MIN_BATCH: usize = 3;

impl SignatureScheme for Ed25519 {
    type SigningKey = ed25519_dalek::SigningKey;
    type VerifyingKey = ed25519_dalek::VerifyingKey;

    fn public_key(key: &Self::VerifyingKey) -> PublicKey {
        key.to_bytes()
    }

    fn sign(key: &Self::SigningKey, msg: &[u8]) -> Signature {
        key.sign(msg).to_bytes()
    }

    fn verify(key: &Self::VerifyingKey, msg: &[u8], sig: &Signature) -> bool {
        Parsed::new(key, msg, sig).is_some_and(|p| p.verify_one())
    }

    /// Checks the signatures together in one batch equation and, only if that fails (or a
    /// signature does not even decode), one by one to find the bad ones.
    fn verify_batch(checks: &[SigCheck<'_, Self::VerifyingKey>]) -> Vec<bool> {
        let parsed: Vec<Option<Parsed>> = checks
            .iter()
            .map(|c| Parsed::new(c.key, c.msg, c.sig))
            .collect();
        let all: Option<Vec<&Parsed>> = parsed.iter().map(Option::as_ref).collect();
        let batch_ok =
            checks.len() >= MIN_BATCH && all.is_some_and(|ps| batch_equation_holds(&ps, checks));
        parsed
            .iter()
            .map(|p| batch_ok || p.as_ref().is_some_and(Parsed::verify_one))
            .collect()
    }
}

/// A signature decoded for the verification equation.
#[derive(Debug)]
struct Parsed {
    r: EdwardsPoint,
    s: Scalar,
    k: Scalar,
    a: EdwardsPoint,
    a_bytes: [u8; 32],
}

impl Parsed {
    /// Decodes `sig`; `None` for a non-canonical `s` or an `R` that is not a curve point.
    fn new(key: &ed25519_dalek::VerifyingKey, msg: &[u8], sig: &Signature) -> Option<Self> {
        let mut r_bytes = [0u8; 32];
        let mut s_bytes = [0u8; 32];
        r_bytes.copy_from_slice(&sig[..32]);
        s_bytes.copy_from_slice(&sig[32..]);
        let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(s_bytes))?;
        let r = CompressedEdwardsY(r_bytes).decompress()?;
        let mut h = Sha512::new();
        h.update(r_bytes);
        h.update(key.as_bytes());
        h.update(msg);
        let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
        Some(Self {
            r,
            s,
            k,
            a: key.to_edwards(),
            a_bytes: *key.as_bytes(),
        })
    }

    /// `[8]([s]B - [k]A - R) == 0`.
    fn verify_one(&self) -> bool {
        let sb_minus_ka =
            EdwardsPoint::vartime_double_scalar_mul_basepoint(&-self.k, &self.a, &self.s);
        (sb_minus_ka - self.r).mul_by_cofactor().is_identity()
    }
}

/// `[8](sum z_i R_i + sum (z_i k_i) A_i - (sum z_i s_i) B) == 0` for 128-bit coefficients
/// `z_i` derived from a hash of every key, signature and message of the batch (deterministic,
/// and fixed only once the signatures are). Terms of one key are merged.
fn batch_equation_holds(
    parsed: &[&Parsed],
    checks: &[SigCheck<'_, ed25519_dalek::VerifyingKey>],
) -> bool {
    let mut seed = Sha512::new();
    seed.update(b"ccron::sig ed25519 batch v1");
    seed.update((checks.len() as u64).to_le_bytes());
    for c in checks {
        seed.update(c.key.as_bytes());
        seed.update(c.sig);
        seed.update((c.msg.len() as u64).to_le_bytes());
        seed.update(c.msg);
    }
    let seed = seed.finalize();
    let mut b_coeff = Scalar::ZERO;
    let mut scalars = Vec::with_capacity(parsed.len() + 8);
    let mut points = Vec::with_capacity(parsed.len() + 8);
    // Per key: the merged coefficient of its A (a few keys sign most requests).
    let mut keys: BTreeMap<[u8; 32], (Scalar, EdwardsPoint)> = BTreeMap::new();
    for (i, p) in parsed.iter().enumerate() {
        let mut h = Sha512::new();
        h.update(seed);
        h.update((i as u64).to_le_bytes());
        let wide = h.finalize();
        let mut z16 = [0u8; 16];
        z16.copy_from_slice(&wide[..16]);
        let z = Scalar::from(u128::from_le_bytes(z16) | 1);
        b_coeff -= z * p.s;
        scalars.push(z);
        points.push(p.r);
        let e = keys.entry(p.a_bytes).or_insert((Scalar::ZERO, p.a));
        e.0 += z * p.k;
    }
    for (coeff, point) in keys.into_values() {
        scalars.push(coeff);
        points.push(point);
    }
    scalars.push(b_coeff);
    points.push(ED25519_BASEPOINT_POINT);
    EdwardsPoint::vartime_multiscalar_mul(scalars, points)
        .mul_by_cofactor()
        .is_identity()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{SigningKey, Verifier as _, VerifyingKey};
    use proptest::prelude::*;

    fn key(i: u8) -> SigningKey {
        SigningKey::from_bytes(&[i; 32])
    }

    /// 32 bytes that are no curve point's encoding (about half of all `y` are not).
    fn not_a_point() -> [u8; 32] {
        (2u8..)
            .map(|y| {
                let mut b = [0u8; 32];
                b[0] = y;
                b
            })
            .find(|b| CompressedEdwardsY(*b).decompress().is_none())
            .unwrap()
    }

    /// A signature whose `R` carries a small-order component `T` (a "torsion" signature):
    /// `R = rB + T`, `s = r + H(R, A, M) a`. Cofactored checks accept it; a cofactorless single
    /// check rejects it; a cofactorless batch would accept it one time in eight.
    fn torsion_signature(key: &SigningKey, msg: &[u8]) -> Signature {
        let a = key.to_scalar();
        let r = Scalar::from(0x1234_5678_9abc_def0_u64);
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

    /// `msgs[i]` signed `sigs[i]` by `vk`, as batch checks.
    fn one_key_checks<'a>(
        vk: &'a VerifyingKey,
        msgs: &'a [Vec<u8>],
        sigs: &'a [Signature],
    ) -> Vec<SigCheck<'a, VerifyingKey>> {
        msgs.iter()
            .zip(sigs)
            .map(|(msg, sig)| SigCheck { key: vk, msg, sig })
            .collect()
    }

    #[test]
    fn good_signatures_verify_and_any_changed_byte_fails() {
        let k = key(1);
        let vk = k.verifying_key();
        let sig = Ed25519::sign(&k, b"hello");
        assert!(Ed25519::verify(&vk, b"hello", &sig));
        assert!(Ed25519::verify_public(
            &Ed25519::public_key(&vk),
            b"hello",
            &sig
        ));
        assert!(!Ed25519::verify(&vk, b"hellp", &sig));
        for byte in 0..64 {
            let mut bad = sig;
            bad[byte] ^= 0x10;
            assert!(!Ed25519::verify(&vk, b"hello", &bad), "byte {byte}");
        }
        assert!(!Ed25519::verify(&key(2).verifying_key(), b"hello", &sig));
        // A public key that is not a point encoding verifies nothing.
        let not_a_point = not_a_point();
        assert!(Ed25519::verifying_key(&not_a_point).is_none());
        assert!(!Ed25519::verify_public(&not_a_point, b"hello", &sig));
    }

    #[test]
    fn single_and_batch_checks_agree_on_torsion_signatures() {
        let k = key(3);
        let vk = k.verifying_key();
        let msgs: Vec<Vec<u8>> = (0..16u8).map(|i| vec![i; 40]).collect();
        let mut sigs: Vec<Signature> = msgs.iter().map(|m| Ed25519::sign(&k, m)).collect();
        sigs[5] = torsion_signature(&k, &msgs[5]);
        // The cofactorless rule of `Verifier::verify` rejects it alone...
        assert!(
            vk.verify(&msgs[5], &ed25519_dalek::Signature::from_bytes(&sigs[5]))
                .is_err()
        );
        // ...ours accepts it alone and in every batch: one rule whichever path is taken.
        assert!(Ed25519::verify(&vk, &msgs[5], &sigs[5]));
        let checks = one_key_checks(&vk, &msgs, &sigs);
        assert!(Ed25519::verify_batch(&checks).into_iter().all(|ok| ok));
    }

    #[test]
    fn batch_with_a_noncanonical_s_or_bad_point_falls_back_per_signature() {
        let k = key(4);
        let vk = k.verifying_key();
        let msgs: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 10]).collect();
        let mut sigs: Vec<Signature> = msgs.iter().map(|m| Ed25519::sign(&k, m)).collect();
        sigs[1][63] |= 0xf0; // s >= l: non-canonical
        sigs[4][..32].copy_from_slice(&not_a_point());
        let checks = one_key_checks(&vk, &msgs, &sigs);
        let got = Ed25519::verify_batch(&checks);
        let want: Vec<bool> = (0..8).map(|i| i != 1 && i != 4).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_noncanonical_s_is_refused_even_when_the_equation_holds() {
        // s + l satisfies the same equation as s (scalars are mod l) but is not canonical:
        // accepting it would make signatures malleable.
        let k = key(5);
        let vk = k.verifying_key();
        let sig = Ed25519::sign(&k, b"m");
        let s = Scalar::from_canonical_bytes(sig[32..].try_into().unwrap()).unwrap();
        // l = 2^252 + 27742317777372353535851937790883648493, as little-endian bytes.
        let l: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        // s + l as a 256-bit integer (it fits: s < l < 2^253).
        let mut sum = [0u8; 32];
        let mut carry = 0u16;
        for i in 0..32 {
            let v = u16::from(s.as_bytes()[i]) + u16::from(l[i]) + carry;
            sum[i] = (v & 0xff) as u8;
            carry = v >> 8;
        }
        let mut malleated = sig;
        malleated[32..].copy_from_slice(&sum);
        assert_ne!(malleated, sig);
        assert!(!Ed25519::verify(&vk, b"m", &malleated));
        let msgs = vec![b"m".to_vec(); 4];
        let sigs = [sig, malleated, sig, sig];
        let checks = one_key_checks(&vk, &msgs, &sigs);
        assert_eq!(Ed25519::verify_batch(&checks), [true, false, true, true]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The batch check says exactly what one check per signature says.
        #[test]
        fn verify_batch_equals_verify_each(
            corrupt in proptest::collection::vec((0usize..40, 0usize..64, 1u8..=255), 0..4),
            n in 0usize..40,
        ) {
            let keys = [key(9), key(10), key(11)];
            let vks: Vec<VerifyingKey> = keys.iter().map(SigningKey::verifying_key).collect();
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| format!("request {i}").into_bytes()).collect();
            let mut sigs: Vec<Signature> =
                msgs.iter().enumerate().map(|(i, m)| Ed25519::sign(&keys[i % 3], m)).collect();
            for (i, byte, x) in corrupt {
                if let Some(s) = sigs.get_mut(i) {
                    s[byte] ^= x;
                }
            }
            let checks: Vec<SigCheck<'_, VerifyingKey>> = (0..n)
                .map(|i| SigCheck { key: &vks[i % 3], msg: &msgs[i], sig: &sigs[i] })
                .collect();
            let want: Vec<bool> =
                checks.iter().map(|c| Ed25519::verify(c.key, c.msg, c.sig)).collect();
            prop_assert_eq!(Ed25519::verify_batch(&checks), want);
        }
    }
}
