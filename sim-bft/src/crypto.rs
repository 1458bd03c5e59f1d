//! Keys, signatures and digests of the simulated cluster.
//!
//! Keys are derived deterministically from the cluster seed so that a simulated run is fully
//! determined by its seed: `SigningKey::from_bytes(sha256(seed || role || id))`. Every replica holds
//! the public keys of all replicas and of all user clients (a [`Keyring`]); a replica's internal
//! client (the one that submits ticks) signs with the replica's own key.
//!
//! Verification may be memoised through a [`VerifyCache`]. This is safe because only *successful*
//! verifications are remembered and the memo key is a SHA-256 over the public key, the message and
//! the signature: a hit proves that exactly this (key, message, signature) triple verified before.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};

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

/// Verifies `sig` over `msg` with `key`, consulting and feeding `cache` when given.
pub fn verify(key: &VerifyingKey, msg: &[u8], sig: &SigBytes, cache: Option<&VerifyCache>) -> bool {
    let memo = cache.map(|c| (c, memo_key(key, msg, sig)));
    if let Some((c, k)) = &memo
        && c.contains(k)
    {
        return true;
    }
    let ok = key.verify(msg, &Signature::from_bytes(sig)).is_ok();
    if ok && let Some((c, k)) = memo {
        c.insert(k);
    }
    ok
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
}

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
