//! Keys, signatures and digests of the simulated cluster.
//!
//! Keys are derived deterministically from the cluster seed so that a simulated run is fully
//! determined by its seed: `sha256(seed || role || id)` is the secret. Every replica holds the
//! verifying keys of all replicas and of all user clients (a [`Keyring`]); a replica's internal
//! client (the one that submits ticks) signs with the replica's own key.
//!
//! # Two schemes, one protocol
//!
//! A cluster runs one [`Signatures`] scheme, both behind [`ccron::sig::SignatureScheme`]:
//! - [`Signatures::Ed25519`] (the default everywhere): ed25519 under the one pinned verification
//!   rule of [`ccron::sig`] (cofactored; single and batched checks agree), which the Malachite
//!   adapter shares.
//! - [`Signatures::Sim`], simulator-only: a 64-byte keyed-hash tag under the signer's secret
//!   ([`sim_scheme`]). Only the holder of a [`SigningKey`] can tag; verifying resolves the
//!   secret through the [`Keyring`]; any changed byte fails. It makes long simulations
//!   affordable, and proves nothing about the signature scheme itself (malleability,
//!   small-order points, batch disagreements): the ed25519 runs keep covering those.
//!
//! [`SigningKey`] and [`VerifyKey`] carry their scheme, so the replica's protocol code signs
//! with [`sign`] and checks with [`verify`] / [`verify_many`] the same way under both.
//!
//! # Digests
//!
//! The protocol's digests follow the same choice ([`Signatures::digest`],
//! [`Signatures::hasher`]), again with one protocol code path for both: batch digests (what
//! the votes are about), request memo keys, reply entries, checkpoint chunk digests and the
//! simulator's trace hash are SHA-256 under ed25519 and unkeyed BLAKE3 (256-bit output) under
//! `sim`. BLAKE3 costs a fraction of SHA-256 where SHA-256 runs in software (no SHA
//! extensions) and has the same collision and preimage resistance for what the protocol uses
//! a digest for; under `sim` a run proves nothing about SHA-256 itself (the exact bytes an
//! ed25519 run's digests commit to, test vectors, interoperability with the Malachite
//! adapter's SHA-256 digests): the ed25519 runs keep covering it. The replicated state's digest
//! (`ccron::host::BlockHost::digest`, reported after every batch and compared by the
//! checkers) follows too ([`Signatures::state_hash`]): the same byte streams, every part of it
//! (the ledger's digest, the pages, the exactly-once table, the host's fields) hashed with
//! SHA-256 under ed25519, byte for byte what other engines compute, and with BLAKE3 under
//! `sim`; a `sim` run's state digests are compared only with other `sim` replicas'.
//!
//! # The ed25519 memo (speed only)
//!
//! Under ed25519, verification may be memoised through a [`VerifyCache`]. This is safe because
//! only *successful* verifications are remembered and the memo key is a SHA-256 over the public
//! key, the message and the signature: a hit proves that exactly this (key, message, signature)
//! triple verified before. In the simulator, the harness also *offers* every sent signature to
//! the shared memo ([`VerifyCache::offer`]); the next memo miss verifies the offered ones with it
//! in one batch, so the messages of one protocol round are checked together instead of one by
//! one. A `sim` tag is checked directly: recomputing it costs about what the memo key costs.

pub mod sim_scheme;

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use ccron::sha256::Sha256;
pub use ccron::sig::{Ed25519, SignatureScheme};
use serde::Serialize;
pub use sim_scheme::{Sim, SimSigningKey, SimVerifyingKey};

use crate::node::{ClientId, NodeId};

/// A 32-byte SHA-256 digest.
pub type Digest32 = [u8; 32];

/// A signature (ed25519) or tag (`sim`) in its 64-byte wire form.
pub type SigBytes = ccron::sig::Signature;

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

/// An incremental 256-bit hash under one scheme's digest ([`Signatures::hasher`]): SHA-256
/// under ed25519, BLAKE3 under `sim`. Digests of the same bytes differ between the schemes;
/// within one scheme how the bytes are split between [`Self::update`] calls never matters.
// A hasher lives on the stack of the function that digests (or once, in the simulator's trace
// hash): ~0.5 KB for SHA-256's buffer is cheaper there than an allocation per digest.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Hasher {
    /// SHA-256 (the ed25519 scheme's digest; [`ccron::sha256`], the same bytes as `sha2`).
    Sha256(Sha256),
    /// BLAKE3, unkeyed, 256-bit output (the `sim` scheme's digest), through ccron's
    /// [`StateHasher`](ccron::state_hash::StateHasher): the input is gathered in a buffer
    /// reused from one hasher to the next and hashed in one [`blake3::hash`] call up to 2 KiB
    /// (most protocol digests: memo keys, reply entries), incrementally beyond; the digest is
    /// BLAKE3's of the whole input either way. No allocation per digest (a boxed
    /// `blake3::Hasher`, ~1.9 KB, was one per memo key).
    Blake3(ccron::state_hash::StateHasher),
}

impl Hasher {
    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: impl AsRef<[u8]>) {
        match self {
            Self::Sha256(h) => h.update(bytes),
            Self::Blake3(h) => h.update(bytes),
        }
    }

    /// The digest of everything fed.
    pub fn finalize(self) -> Digest32 {
        match self {
            Self::Sha256(h) => h.finalize().into(),
            Self::Blake3(h) => h.finalize(),
        }
    }
}

/// A [`Hasher`] fed through a buffer: many small updates (the simulator's trace hash feeds
/// each delivered input in pieces of a few bytes) reach the hash function as large ones, where
/// BLAKE3 hashes many 1 KiB chunks at once with its SIMD code. The digest is the hasher's over
/// the same bytes, whatever the buffering.
#[derive(Debug, Clone)]
pub struct BufferedHasher {
    hasher: Hasher,
    buf: Vec<u8>,
}

/// The bytes a [`BufferedHasher`] gathers before it hashes them (a multiple of BLAKE3's chunk
/// size, and enough for its widest SIMD code).
const HASH_BUFFER: usize = 64 * 1024;

impl BufferedHasher {
    /// A buffered `hasher`.
    pub fn new(hasher: Hasher) -> Self {
        Self {
            hasher,
            buf: Vec::with_capacity(HASH_BUFFER),
        }
    }

    /// Feeds `bytes`.
    #[inline]
    pub fn update(&mut self, bytes: impl AsRef<[u8]>) {
        let bytes = bytes.as_ref();
        if self.buf.len() + bytes.len() > HASH_BUFFER {
            self.flush();
            if bytes.len() >= HASH_BUFFER {
                self.hasher.update(bytes);
                return;
            }
        }
        self.buf.extend_from_slice(bytes);
    }

    fn flush(&mut self) {
        self.hasher.update(&self.buf);
        self.buf.clear();
    }

    /// The digest of everything fed.
    pub fn finalize(mut self) -> Digest32 {
        self.flush();
        self.hasher.finalize()
    }
}

impl fmt::Debug for Hasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sha256(_) => "Hasher::Sha256",
            Self::Blake3(_) => "Hasher::Blake3",
        })
    }
}

/// The signature scheme a cluster runs (`sim-bft run --signatures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Signatures {
    /// ed25519 under the pinned rule of [`ccron::sig`]: the default of the library, the
    /// command line and the threaded runtime.
    #[default]
    Ed25519,
    /// The simulator-only keyed-hash tags of [`sim_scheme`].
    Sim,
}

impl Signatures {
    /// Every CLI name.
    pub const NAMES: &'static str = "ed25519, sim";
    /// Both schemes.
    pub const ALL: [Signatures; 2] = [Signatures::Ed25519, Signatures::Sim];

    /// A fresh incremental hasher of this scheme's digest: SHA-256 under ed25519, BLAKE3
    /// under `sim` (see the module docs, "Digests").
    pub fn hasher(self) -> Hasher {
        match self {
            Self::Ed25519 => Hasher::Sha256(Sha256::new()),
            Self::Sim => Hasher::Blake3(ccron::state_hash::StateHasher::new(
                ccron::state_hash::StateHash::Blake3,
            )),
        }
    }

    /// The hash function of the replicated state's digest
    /// ([`ccron::host::BlockHost::with_state_hash`]) under this scheme: SHA-256 under
    /// ed25519 (the bytes every engine compares and the Malachite adapter records), BLAKE3
    /// under `sim` (see the module docs, "Digests").
    pub fn state_hash(self) -> ccron::state_hash::StateHash {
        match self {
            Self::Ed25519 => ccron::state_hash::StateHash::Sha256,
            Self::Sim => ccron::state_hash::StateHash::Blake3,
        }
    }

    /// This scheme's digest of `bytes` ([`Self::hasher`] in one call).
    pub fn digest(self, bytes: &[u8]) -> Digest32 {
        match self {
            Self::Ed25519 => sha256(bytes),
            Self::Sim => blake3::hash(bytes).into(),
        }
    }
}

impl FromStr for Signatures {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ed25519" => Ok(Self::Ed25519),
            "sim" => Ok(Self::Sim),
            _ => Err(format!(
                "unknown signature scheme {s:?} (expected one of: {})",
                Self::NAMES
            )),
        }
    }
}

impl fmt::Display for Signatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ed25519 => "ed25519",
            Self::Sim => "sim",
        })
    }
}

fn derive_secret(seed: u64, role: &[u8], id: u64) -> Digest32 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(role);
    h.update(id.to_le_bytes());
    h.finalize().into()
}

/// A key that signs, under its scheme. Only its holder can sign or tag with it.
#[derive(Debug, Clone)]
pub enum SigningKey {
    /// An ed25519 key.
    Ed25519(ed25519_dalek::SigningKey),
    /// A `sim` key.
    Sim(SimSigningKey),
}

impl SigningKey {
    /// The key of `scheme` whose secret is `secret`.
    fn from_secret(scheme: Signatures, secret: &Digest32) -> Self {
        match scheme {
            Signatures::Ed25519 => Self::Ed25519(ed25519_dalek::SigningKey::from_bytes(secret)),
            Signatures::Sim => Self::Sim(SimSigningKey::from_secret(secret)),
        }
    }

    /// The scheme this key signs under.
    pub fn scheme(&self) -> Signatures {
        match self {
            Self::Ed25519(_) => Signatures::Ed25519,
            Self::Sim(_) => Signatures::Sim,
        }
    }

    /// This signer's verifying key.
    pub fn verifying_key(&self) -> VerifyKey {
        match self {
            Self::Ed25519(k) => VerifyKey::Ed25519(k.verifying_key()),
            Self::Sim(k) => VerifyKey::Sim(k.verifying_key()),
        }
    }
}

/// A signer's key as verification needs it, under its scheme. It cannot sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyKey {
    /// An ed25519 public key.
    Ed25519(ed25519_dalek::VerifyingKey),
    /// A `sim` verifying key (it holds the signer's secret and only answers whether a tag is
    /// right).
    Sim(SimVerifyingKey),
}

impl VerifyKey {
    /// The scheme this key verifies under.
    pub fn scheme(&self) -> Signatures {
        match self {
            Self::Ed25519(_) => Signatures::Ed25519,
            Self::Sim(_) => Signatures::Sim,
        }
    }

    /// The 32-byte public key naming the signer.
    pub fn public_key(&self) -> ccron::sig::PublicKey {
        match self {
            Self::Ed25519(k) => Ed25519::public_key(k),
            Self::Sim(k) => Sim::public_key(k),
        }
    }
}

/// The signing key of replica `id` under `scheme` in the cluster generated from `seed`.
pub fn replica_key(scheme: Signatures, seed: u64, id: NodeId) -> SigningKey {
    SigningKey::from_secret(scheme, &derive_secret(seed, b"replica", u64::from(id)))
}

/// The signing key of user client `id` under `scheme` in the cluster generated from `seed`.
pub fn client_key(scheme: Signatures, seed: u64, id: ClientId) -> SigningKey {
    SigningKey::from_secret(scheme, &derive_secret(seed, b"client", id))
}

/// The ed25519 signing key of replica `id` in the cluster generated from `seed`.
pub fn replica_signing_key(seed: u64, id: NodeId) -> SigningKey {
    replica_key(Signatures::Ed25519, seed, id)
}

/// The ed25519 signing key of user client `id` in the cluster generated from `seed`.
pub fn client_signing_key(seed: u64, id: ClientId) -> SigningKey {
    client_key(Signatures::Ed25519, seed, id)
}

/// Signs `msg` with `key`, returning the 64-byte wire form.
pub fn sign(key: &SigningKey, msg: &[u8]) -> SigBytes {
    match key {
        SigningKey::Ed25519(k) => Ed25519::sign(k, msg),
        SigningKey::Sim(k) => Sim::sign(k, msg),
    }
}

/// Signs `msg` with `key` and, under ed25519 when `cache` is given, remembers the signature as
/// verified ([`VerifyCache::vouch`]): a signature the ed25519 signing algorithm just produced
/// with the secret key of `key` passes [`verify`] by construction, so the receivers in this
/// process find it in the memo instead of checking it again. The signature is the same as
/// [`sign`]'s.
pub fn sign_vouched(key: &SigningKey, msg: &[u8], cache: Option<&VerifyCache>) -> SigBytes {
    let sig = sign(key, msg);
    if let (Some(c), SigningKey::Ed25519(k)) = (cache, key) {
        c.vouch(&k.verifying_key(), msg, &sig);
    }
    sig
}

/// The verifying keys a replica needs: every replica's and every user client's, under one
/// scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyring {
    replicas: Vec<VerifyKey>,
    clients: Vec<VerifyKey>,
}

impl Keyring {
    /// The ed25519 keyring of the cluster generated from `seed`, with `n` replicas and user
    /// clients `0..num_clients`.
    pub fn from_seed(seed: u64, n: u32, num_clients: u64) -> Self {
        Self::new(Signatures::Ed25519, seed, n, num_clients)
    }

    /// The keyring of `scheme` of the cluster generated from `seed`, with `n` replicas and user
    /// clients `0..num_clients`.
    pub fn new(scheme: Signatures, seed: u64, n: u32, num_clients: u64) -> Self {
        Self {
            replicas: (0..n)
                .map(|i| replica_key(scheme, seed, i).verifying_key())
                .collect(),
            clients: (0..num_clients)
                .map(|c| client_key(scheme, seed, c).verifying_key())
                .collect(),
        }
    }

    /// Number of replicas the keyring knows.
    pub fn num_replicas(&self) -> u32 {
        u32::try_from(self.replicas.len()).unwrap_or(u32::MAX)
    }

    /// The verifying key of replica `id`, if known.
    pub fn replica(&self, id: NodeId) -> Option<&VerifyKey> {
        self.replicas.get(id as usize)
    }

    /// The verifying key of client `id`: a user client's, or for an internal client its
    /// replica's.
    pub fn client(&self, id: ClientId) -> Option<&VerifyKey> {
        match internal_client_owner(id) {
            Some(r) => self.replica(r),
            None => usize::try_from(id).ok().and_then(|i| self.clients.get(i)),
        }
    }
}

/// Verifies `sig` over `msg` by the holder of `key` (under ed25519: the pinned rule of
/// [`ccron::sig`], consulting and feeding `cache` when given).
pub fn verify(key: &VerifyKey, msg: &[u8], sig: &SigBytes, cache: Option<&VerifyCache>) -> bool {
    match key {
        VerifyKey::Ed25519(k) => verify_ed25519(k, msg, sig, cache),
        VerifyKey::Sim(k) => Sim::verify(k, msg, sig),
    }
}

fn verify_ed25519(
    key: &ed25519_dalek::VerifyingKey,
    msg: &[u8],
    sig: &SigBytes,
    cache: Option<&VerifyCache>,
) -> bool {
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
    let ok = Ed25519::verify(key, msg, sig);
    if ok && let Some((c, k)) = memo {
        c.insert(k);
    }
    ok
}

/// A memo miss while other signatures were offered ([`VerifyCache::offer`]): checks them all in
/// one batch equation, remembers every success, and answers for `(key, msg, sig)`.
fn verify_with_offered(
    key: &ed25519_dalek::VerifyingKey,
    msg: &[u8],
    sig: &SigBytes,
    memo: Digest32,
    cache: &VerifyCache,
    offered: &[Offered],
) -> bool {
    let mut checks = Vec::with_capacity(offered.len() + 1);
    checks.push(ccron::sig::SigCheck { key, msg, sig });
    checks.extend(offered.iter().map(|o| ccron::sig::SigCheck {
        key: &o.key,
        msg: &o.msg,
        sig: &o.sig,
    }));
    let verdicts = Ed25519::verify_batch(&checks);
    let memos = std::iter::once(memo).chain(offered.iter().map(|o| o.memo));
    for (m, ok) in memos.zip(&verdicts) {
        if *ok {
            cache.insert(m);
        }
    }
    verdicts.first().copied().unwrap_or(false)
}

/// One signature to check: `sig` over `msg` by `key`.
pub type SigCheck<'a> = ccron::sig::SigCheck<'a, VerifyKey>;

/// Verifies many signatures at once: `result[i]` says whether `checks[i]` verified, exactly as
/// [`verify`] would say. ed25519 memo hits in `cache` are not checked again; the other ed25519
/// signatures are checked together ([`ccron::sig::Ed25519::verify_batch`]: one batch equation,
/// then one by one only if it fails). Successes feed `cache`. `sim` tags are checked one by one.
pub fn verify_many(checks: &[SigCheck<'_>], cache: Option<&VerifyCache>) -> Vec<bool> {
    let mut result = vec![false; checks.len()];
    let mut todo = Vec::new();
    let mut batch = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        match c.key {
            VerifyKey::Sim(k) => result[i] = Sim::verify(k, c.msg, c.sig),
            VerifyKey::Ed25519(k) => {
                let memo = cache.map(|_| memo_key(k, c.msg, c.sig));
                if let (Some(cache), Some(m)) = (cache, &memo)
                    && cache.contains(m)
                {
                    result[i] = true;
                    continue;
                }
                todo.push((i, memo));
                batch.push(ccron::sig::SigCheck {
                    key: k,
                    msg: c.msg,
                    sig: c.sig,
                });
            }
        }
    }
    let verdicts = Ed25519::verify_batch(&batch);
    for ((i, memo), ok) in todo.into_iter().zip(verdicts) {
        result[i] = ok;
        if ok && let (Some(cache), Some(m)) = (cache, memo) {
            cache.insert(m);
        }
    }
    result
}

fn memo_key(key: &ed25519_dalek::VerifyingKey, msg: &[u8], sig: &SigBytes) -> Digest32 {
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
    key: ed25519_dalek::VerifyingKey,
    msg: Vec<u8>,
    sig: SigBytes,
}

/// Most offered signatures kept waiting for a batch (the oldest are forgotten beyond it).
const MAX_OFFERED: usize = 256;

/// A bounded memo of successful ed25519 verifications, shareable between the replicas of one
/// simulated process (clone it: clones share the memo).
///
/// Only successful verifications enter it, keyed by SHA-256(key, signature, message), so a hit
/// can never accept a signature that would not verify. The oldest entries are evicted first.
/// Membership is the only query, so the hash set's iteration order never matters. `sim` keys
/// never use it.
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
    /// signature that fails is not remembered (its receiver rejects it itself). A `sim` key's
    /// tag is not offered (it is checked directly).
    pub fn offer(&self, key: &VerifyKey, msg: &[u8], sig: &SigBytes) {
        let VerifyKey::Ed25519(key) = key else {
            return;
        };
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
    pub fn vouch(&self, key: &ed25519_dalek::VerifyingKey, msg: &[u8], sig: &SigBytes) {
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
mod tests;
