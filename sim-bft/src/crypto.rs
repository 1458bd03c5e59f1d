//! Keys, signatures and digests of the simulated cluster.
//!
//! Keys are derived deterministically from the cluster seed so that a simulated run is fully
//! determined by its seed: `SigningKey::from_bytes(sha256(seed || role || id))`. Every replica holds
//! the public keys of all replicas and of all user clients (a [`Keyring`]); a replica's internal
//! client (the one that submits ticks) signs with the replica's own key.
//!
//! Verification uses the **cofactored** ed25519 equation `[8]([s]B - [k]A - R) = 0`, both for
//! one signature ([`verify`]) and for many at once ([`verify_many`], a random-linear-combination
//! batch check with one multiscalar multiplication). With the cofactored equation a batch
//! accepts exactly the signatures that single checks accept (up to a 2^-128 chance), so which
//! path a replica happens to use (a memo hit, a bundle, a pre-prepare) cannot make honest
//! replicas disagree on a request's validity; with the cofactorless equation of
//! `ed25519_dalek::Verifier` a signature whose `R` carries a small-order component passes a batch
//! with probability 1/8 (grindable) while failing alone. Every signature an honest ed25519 signer
//! produces passes both. Signatures with a non-canonical `s` or an undecodable `R` are rejected.
//!
//! In the simulator, the harness also *offers* every sent signature to the shared memo
//! ([`VerifyCache::offer`]); the next memo miss verifies the offered ones with it in one batch,
//! so the messages of one protocol round are checked together instead of one by one.
//!
//! Verification may be memoised through a [`VerifyCache`]. This is safe because only *successful*
//! verifications are remembered and the memo key is a SHA-256 over the public key, the message and
//! the signature: a hit proves that exactly this (key, message, signature) triple verified before.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256, Sha512};

use crate::node::{ClientId, NodeId};

/// A 32-byte SHA-256 digest.
pub type Digest32 = [u8; 32];

/// An ed25519 signature in its 64-byte wire form.
pub type SigBytes = [u8; 64];

/// Client ids at or above this value belong to replicas' internal clients: the internal client of
/// replica `r` is `INTERNAL_CLIENT_BASE + r`. User clients use ids below it.
pub const INTERNAL_CLIENT_BASE: ClientId = 1 << 62;

/// The internal client id of replica `replica`.
pub fn internal_client_id(replica: NodeId) -> ClientId {
    INTERNAL_CLIENT_BASE + ClientId::from(replica)
}

/// The replica owning internal client `client`, if `client` is an internal client id.
pub fn internal_client_owner(client: ClientId) -> Option<NodeId> {
    client
        .checked_sub(INTERNAL_CLIENT_BASE)
        .and_then(|r| NodeId::try_from(r).ok())
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Digest32 {
    Sha256::digest(bytes).into()
}

fn derive_key(seed: u64, role: &[u8], id: u64) -> SigningKey {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(role);
    h.update(id.to_le_bytes());
    SigningKey::from_bytes(&h.finalize().into())
}

/// The signing key of replica `id` in the cluster generated from `seed`.
pub fn replica_signing_key(seed: u64, id: NodeId) -> SigningKey {
    derive_key(seed, b"replica", u64::from(id))
}

/// The signing key of user client `id` in the cluster generated from `seed`.
pub fn client_signing_key(seed: u64, id: ClientId) -> SigningKey {
    derive_key(seed, b"client", id)
}

/// Signs `msg` with `key`, returning the 64-byte wire form.
pub fn sign(key: &SigningKey, msg: &[u8]) -> SigBytes {
    key.sign(msg).to_bytes()
}

/// Signs `msg` with `key` and, when `cache` is given, remembers the signature as verified
/// ([`VerifyCache::vouch`]): a signature the ed25519 signing algorithm just produced with the
/// secret key of `key` passes [`verify`] by construction, so the receivers in this process find
/// it in the memo instead of checking it again. The signature is the same as [`sign`]'s.
pub fn sign_vouched(key: &SigningKey, msg: &[u8], cache: Option<&VerifyCache>) -> SigBytes {
    let sig = sign(key, msg);
    if let Some(c) = cache {
        c.vouch(&key.verifying_key(), msg, &sig);
    }
    sig
}

/// The public keys a replica needs: every replica's and every user client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyring {
    replicas: Vec<VerifyingKey>,
    clients: Vec<VerifyingKey>,
}

impl Keyring {
    /// The keyring of the cluster generated from `seed`, with `n` replicas and user clients
    /// `0..num_clients`.
    pub fn from_seed(seed: u64, n: u32, num_clients: u64) -> Self {
        Self {
            replicas: (0..n)
                .map(|i| replica_signing_key(seed, i).verifying_key())
                .collect(),
            clients: (0..num_clients)
                .map(|c| client_signing_key(seed, c).verifying_key())
                .collect(),
        }
    }

    /// Number of replicas the keyring knows.
    pub fn num_replicas(&self) -> u32 {
        u32::try_from(self.replicas.len()).unwrap_or(u32::MAX)
    }

    /// The public key of replica `id`, if known.
    pub fn replica(&self, id: NodeId) -> Option<&VerifyingKey> {
        self.replicas.get(id as usize)
    }

    /// The public key of client `id`: a user client's, or for an internal client its replica's.
    pub fn client(&self, id: ClientId) -> Option<&VerifyingKey> {
        match internal_client_owner(id) {
            Some(r) => self.replica(r),
            None => usize::try_from(id).ok().and_then(|i| self.clients.get(i)),
        }
    }
}

/// Verifies `sig` over `msg` with `key` (cofactored equation, see the module docs),
/// consulting and feeding `cache` when given.
pub fn verify(key: &VerifyingKey, msg: &[u8], sig: &SigBytes, cache: Option<&VerifyCache>) -> bool {
    let memo = cache.map(|c| (c, memo_key(key, msg, sig)));
    if let Some((c, k)) = &memo
        && c.contains(k)
    {
        return true;
    }
    if let Some((c, k)) = &memo {
        let offered = c.take_offered(k);
        if !offered.is_empty() {
            return verify_with_offered(key, msg, sig, *k, c, &offered);
        }
    }
    let ok = Parsed::new(key, msg, sig).is_some_and(|p| p.verify_one());
    if ok && let Some((c, k)) = memo {
        c.insert(k);
    }
    ok
}

/// A memo miss while other signatures were offered ([`VerifyCache::offer`]): checks them all in
/// one batch equation, remembers every success, and answers for `(key, msg, sig)`.
fn verify_with_offered(
    key: &VerifyingKey,
    msg: &[u8],
    sig: &SigBytes,
    memo: Digest32,
    cache: &VerifyCache,
    offered: &[Offered],
) -> bool {
    let mut checks = Vec::with_capacity(offered.len() + 1);
    checks.push(SigCheck { key, msg, sig });
    checks.extend(offered.iter().map(|o| SigCheck {
        key: &o.key,
        msg: &o.msg,
        sig: &o.sig,
    }));
    let verdicts = verify_many(&checks, None);
    let memos = std::iter::once(memo).chain(offered.iter().map(|o| o.memo));
    for (m, ok) in memos.zip(&verdicts) {
        if *ok {
            cache.insert(m);
        }
    }
    verdicts.first().copied().unwrap_or(false)
}

/// One signature to check: `sig` over `msg` by `key`.
#[derive(Debug, Clone, Copy)]
pub struct SigCheck<'a> {
    /// The signer's public key.
    pub key: &'a VerifyingKey,
    /// The signed bytes.
    pub msg: &'a [u8],
    /// The signature.
    pub sig: &'a SigBytes,
}

/// Batches smaller than this are checked one by one (a multiscalar multiplication only pays
/// off from a few signatures on).
const MIN_BATCH: usize = 3;

/// Verifies many signatures at once: `result[i]` says whether `checks[i]` verified, exactly as
/// [`verify`] would say (see the module docs). Memo hits in `cache` are not checked again;
/// the others are checked together in one batch equation and, only if that fails, one by one
/// to find the bad ones. Successes feed `cache`.
pub fn verify_many(checks: &[SigCheck<'_>], cache: Option<&VerifyCache>) -> Vec<bool> {
    let mut result = vec![false; checks.len()];
    let mut todo = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        let memo = cache.map(|_| memo_key(c.key, c.msg, c.sig));
        if let (Some(cache), Some(k)) = (cache, &memo)
            && cache.contains(k)
        {
            result[i] = true;
            continue;
        }
        todo.push((i, memo, Parsed::new(c.key, c.msg, c.sig)));
    }
    let parsed: Option<Vec<&Parsed>> = todo.iter().map(|(_, _, p)| p.as_ref()).collect();
    let batch_ok = todo.len() >= MIN_BATCH
        && parsed.is_some_and(|ps| batch_equation_holds(&ps, checks, &todo));
    for (i, memo, p) in &todo {
        let ok = batch_ok || p.as_ref().is_some_and(Parsed::verify_one);
        result[*i] = ok;
        if ok && let (Some(cache), Some(k)) = (cache, memo) {
            cache.insert(*k);
        }
    }
    result
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
    fn new(key: &VerifyingKey, msg: &[u8], sig: &SigBytes) -> Option<Self> {
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
    checks: &[SigCheck<'_>],
    todo: &[(usize, Option<Digest32>, Option<Parsed>)],
) -> bool {
    let mut seed = Sha512::new();
    seed.update(b"sim-bft batch verify v1");
    seed.update((todo.len() as u64).to_le_bytes());
    for (i, _, _) in todo {
        let Some(c) = checks.get(*i) else {
            return false;
        };
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
    let mut keys: std::collections::BTreeMap<[u8; 32], (Scalar, EdwardsPoint)> =
        std::collections::BTreeMap::new();
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

fn memo_key(key: &VerifyingKey, msg: &[u8], sig: &SigBytes) -> Digest32 {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update(sig);
    h.update(msg);
    h.finalize().into()
}

#[derive(Debug, Default)]
struct CacheInner {
    set: HashSet<Digest32>,
    order: VecDeque<Digest32>,
    /// Signatures sent but not verified yet (see [`VerifyCache::offer`]), oldest first.
    offered: VecDeque<Offered>,
}

/// A signature offered for the next batch.
#[derive(Debug, Clone)]
struct Offered {
    memo: Digest32,
    key: VerifyingKey,
    msg: Vec<u8>,
    sig: SigBytes,
}

/// Most offered signatures kept waiting for a batch (the oldest are forgotten beyond it).
const MAX_OFFERED: usize = 256;

/// A bounded memo of successful signature verifications, shareable between the replicas of one
/// simulated process (clone it: clones share the memo).
///
/// Only successful verifications enter it, keyed by SHA-256(key, signature, message), so a hit
/// can never accept a signature that would not verify. The oldest entries are evicted first.
/// Membership is the only query, so the hash set's iteration order never matters.
#[derive(Debug, Clone)]
pub struct VerifyCache {
    inner: Arc<Mutex<CacheInner>>,
    capacity: usize,
}

impl VerifyCache {
    /// A memo remembering at most `capacity` verifications.
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(CacheInner::default())),
            capacity,
        }
    }

    /// Offers a signature that is on its way to a replica (the simulator offers what replicas
    /// send): the next memo miss verifies it together with the missed one in one batch
    /// equation ([`verify_many`]), so messages sent in one protocol round are verified in a
    /// batch instead of one by one. Speed only: a verdict is the same either way, and a
    /// signature that fails is not remembered (its receiver rejects it itself).
    pub fn offer(&self, key: &VerifyingKey, msg: &[u8], sig: &SigBytes) {
        let memo = memo_key(key, msg, sig);
        if let Ok(mut g) = self.inner.lock()
            && !g.set.contains(&memo)
            && !g.offered.iter().any(|o| o.memo == memo)
        {
            if g.offered.len() >= MAX_OFFERED {
                g.offered.pop_front();
            }
            g.offered.push_back(Offered {
                memo,
                key: *key,
                msg: msg.to_vec(),
                sig: *sig,
            });
        }
    }

    /// Remembers `sig` over `msg` by `key` as verified without checking it: only for a
    /// signature this process just produced with the secret key of `key` ([`sign_vouched`]),
    /// which verifies by construction (ed25519 signing yields a canonical `s`, a valid `R` and
    /// an equation that holds exactly, so the cofactored check passes). Bytes changed after
    /// signing (a corrupted or forged message, a Byzantine replica's flipped signature) have
    /// another memo key and are verified for real. Speed only: verdicts never change.
    pub fn vouch(&self, key: &VerifyingKey, msg: &[u8], sig: &SigBytes) {
        self.insert(memo_key(key, msg, sig));
    }

    /// Takes every offered signature except `miss` and those verified since they were offered.
    fn take_offered(&self, miss: &Digest32) -> Vec<Offered> {
        let Ok(mut g) = self.inner.lock() else {
            return Vec::new();
        };
        let offered = std::mem::take(&mut g.offered);
        offered
            .into_iter()
            .filter(|o| o.memo != *miss && !g.set.contains(&o.memo))
            .collect()
    }

    fn contains(&self, k: &Digest32) -> bool {
        self.inner
            .lock()
            .map(|g| g.set.contains(k))
            .unwrap_or(false)
    }

    fn insert(&self, k: Digest32) {
        if let Ok(mut g) = self.inner.lock()
            && g.set.insert(k)
        {
            g.order.push_back(k);
            while g.order.len() > self.capacity {
                if let Some(old) = g.order.pop_front() {
                    g.set.remove(&old);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vouched_signatures_are_the_ones_that_verify() {
        let key = replica_signing_key(7, 1);
        let vk = key.verifying_key();
        let cache = VerifyCache::new(16);
        let sig = sign_vouched(&key, b"prepare 5", Some(&cache));
        assert_eq!(
            sig,
            sign(&key, b"prepare 5"),
            "vouching does not change the signature"
        );
        // A memo hit, and a real check agrees with it.
        assert!(cache.contains(&memo_key(&vk, b"prepare 5", &sig)));
        assert!(verify(&vk, b"prepare 5", &sig, None));
        // Changed bytes are not vouched for: verified for real and rejected.
        let mut flipped = sig;
        flipped[7] ^= 1;
        assert!(!verify(&vk, b"prepare 5", &flipped, Some(&cache)));
        assert!(!verify(&vk, b"prepare 6", &sig, Some(&cache)));
        // Another key claiming the signature misses the memo and fails.
        let other = replica_signing_key(7, 2).verifying_key();
        assert!(!verify(&other, b"prepare 5", &sig, Some(&cache)));
    }
    use ed25519_dalek::{Signature, Verifier};
    use proptest::prelude::*;

    /// A signature whose `R` carries a small-order component `T` (a "torsion" signature):
    /// `R = rB + T`, `s = r + H(R, A, M) a`. Cofactored checks accept it; a cofactorless single
    /// check rejects it; a cofactorless batch would accept it one time in eight.
    fn torsion_signature(key: &SigningKey, msg: &[u8]) -> SigBytes {
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
        sigs: &'a [SigBytes],
    ) -> Vec<SigCheck<'a>> {
        msgs.iter()
            .zip(sigs)
            .map(|(msg, sig)| SigCheck { key: vk, msg, sig })
            .collect()
    }

    #[test]
    fn single_and_batch_checks_agree_on_torsion_signatures() {
        let key = replica_signing_key(3, 1);
        let vk = key.verifying_key();
        let msgs: Vec<Vec<u8>> = (0..16u8).map(|i| vec![i; 40]).collect();
        let mut sigs: Vec<SigBytes> = msgs.iter().map(|m| sign(&key, m)).collect();
        sigs[5] = torsion_signature(&key, &msgs[5]);
        // The cofactorless rule of `Verifier::verify` rejects it alone...
        assert!(
            vk.verify(&msgs[5], &Signature::from_bytes(&sigs[5]))
                .is_err()
        );
        // ...ours accepts it alone and in every batch: one rule whichever path is taken.
        assert!(verify(&vk, &msgs[5], &sigs[5], None));
        let checks = one_key_checks(&vk, &msgs, &sigs);
        assert!(verify_many(&checks, None).into_iter().all(|ok| ok));
    }

    #[test]
    fn batch_with_a_noncanonical_s_or_bad_point_falls_back_per_signature() {
        let key = replica_signing_key(3, 2);
        let vk = key.verifying_key();
        let msgs: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 10]).collect();
        let mut sigs: Vec<SigBytes> = msgs.iter().map(|m| sign(&key, m)).collect();
        sigs[1][63] |= 0xf0; // s >= l: non-canonical
        sigs[4][..32].copy_from_slice(&[0xff; 32]); // not a point encoding
        let checks = one_key_checks(&vk, &msgs, &sigs);
        let got = verify_many(&checks, None);
        let want: Vec<bool> = (0..8).map(|i| i != 1 && i != 4).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn offered_signatures_are_verified_with_the_next_miss_and_only_good_ones_remembered() {
        let key = replica_signing_key(5, 0);
        let vk = key.verifying_key();
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 33]).collect();
        let mut sigs: Vec<SigBytes> = msgs.iter().map(|m| sign(&key, m)).collect();
        sigs[2][10] ^= 4;
        let cache = VerifyCache::new(64);
        for i in 1..5 {
            cache.offer(&vk, &msgs[i], &sigs[i]);
        }
        let memo = |i: usize| memo_key(&vk, &msgs[i], &sigs[i]);
        assert!(
            (1..5).all(|i| !cache.contains(&memo(i))),
            "offering verifies nothing"
        );
        // A miss on message 0 verifies the offered ones in the same batch.
        assert!(verify(&vk, &msgs[0], &sigs[0], Some(&cache)));
        assert!([0, 1, 3, 4].iter().all(|i| cache.contains(&memo(*i))));
        assert!(
            !cache.contains(&memo(2)),
            "a bad signature is never remembered"
        );
        // The bad one is rejected when its receiver checks it, offered or not.
        assert!(!verify(&vk, &msgs[2], &sigs[2], Some(&cache)));
        cache.offer(&vk, &msgs[2], &sigs[2]);
        assert!(!verify(&vk, &msgs[2], &sigs[2], Some(&cache)));
        // A miss whose own signature is bad still lets the good offered ones in.
        let cache = VerifyCache::new(64);
        cache.offer(&vk, &msgs[1], &sigs[1]);
        cache.offer(&vk, &msgs[3], &sigs[3]);
        assert!(!verify(&vk, &msgs[2], &sigs[2], Some(&cache)));
        assert!(cache.contains(&memo(1)) && cache.contains(&memo(3)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The batch check says exactly what one check per signature says, memo or not.
        #[test]
        fn verify_many_equals_verify_each(
            corrupt in proptest::collection::vec((0usize..40, 0usize..64, 1u8..=255), 0..4),
            n in 0usize..40,
            memo in any::<bool>(),
        ) {
            let keys = [replica_signing_key(9, 0), replica_signing_key(9, 1), client_signing_key(9, 0)];
            let vks: Vec<VerifyingKey> = keys.iter().map(SigningKey::verifying_key).collect();
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| format!("request {i}").into_bytes()).collect();
            let mut sigs: Vec<SigBytes> =
                msgs.iter().enumerate().map(|(i, m)| sign(&keys[i % 3], m)).collect();
            for (i, byte, x) in corrupt {
                if let Some(s) = sigs.get_mut(i) {
                    s[byte] ^= x;
                }
            }
            let checks: Vec<SigCheck<'_>> = (0..n)
                .map(|i| SigCheck { key: &vks[i % 3], msg: &msgs[i], sig: &sigs[i] })
                .collect();
            let cache = VerifyCache::new(64);
            let cache = memo.then_some(&cache);
            let want: Vec<bool> = checks.iter().map(|c| verify(c.key, c.msg, c.sig, None)).collect();
            prop_assert_eq!(verify_many(&checks, cache), want.clone());
            // Second time through: memo hits must give the same answers.
            prop_assert_eq!(verify_many(&checks, cache), want);
        }
    }

    #[test]
    fn keys_are_deterministic_and_distinct() {
        let a = replica_signing_key(7, 0);
        assert_eq!(a.to_bytes(), replica_signing_key(7, 0).to_bytes());
        assert_ne!(a.to_bytes(), replica_signing_key(7, 1).to_bytes());
        assert_ne!(a.to_bytes(), replica_signing_key(8, 0).to_bytes());
        assert_ne!(a.to_bytes(), client_signing_key(7, 0).to_bytes());
    }

    #[test]
    fn verify_accepts_good_rejects_bad_and_cache_is_sound() {
        let k = replica_signing_key(1, 2);
        let ring = Keyring::from_seed(1, 4, 2);
        let sig = sign(&k, b"hello");
        let cache = VerifyCache::new(2);
        let pk = ring.replica(2).unwrap();
        assert!(verify(pk, b"hello", &sig, Some(&cache)));
        assert!(verify(pk, b"hello", &sig, Some(&cache)));
        assert!(!verify(pk, b"hellp", &sig, Some(&cache)));
        let mut bad = sig;
        bad[3] ^= 1;
        assert!(!verify(pk, b"hello", &bad, Some(&cache)));
        assert!(!verify(ring.replica(1).unwrap(), b"hello", &sig, None));
        assert_eq!(ring.client(internal_client_id(2)), Some(pk));
        assert!(ring.client(5).is_none());
        assert_eq!(internal_client_owner(internal_client_id(3)), Some(3));
        assert_eq!(internal_client_owner(9), None);
    }
}
