//! Worker keys: whose answers the ledger believes.
//!
//! A worker performs an outbox record's effect outside consensus and answers; the answer goes
//! back into the ledger as an [`OutboxResult`](super::OutboxResult). Anyone who can reach a
//! worker's network could otherwise forge that answer, so every answer is **signed** (ed25519)
//! by the worker that made it. What is signed about one answer is its [`answer_signing_bytes`]:
//! the chain id, the record's index, occurrence id and handler, the digest of the record's
//! payload and the digest of the answer. Their hash is a *leaf* ([`answer_leaf`]); a worker
//! signs the root of a Merkle tree over the leaves of the answers it has ready at once
//! ([`WorkerSigner::sign_leaves`]: one signature for a batch; a batch of one is the leaf itself,
//! [`WorkerSigner::sign`]), and each answer's [`AnswerProof`] carries the signature and its path
//! to the root (at most [`MAX_PROOF_STEPS`] steps). Replicas rebuild the leaf from their own
//! copy of the record, fold the path, verify the signature over [`root_signing_bytes`] inside
//! execution ([`verify_answer`]) and believe the answer only when the key is registered for the
//! record's handler. Leaves and inner nodes are hashed with distinct prefixes (`0x00`, `0x01`),
//! so no inner node can pass for an answer.
//!
//! Keys live in replicated state: [`Policy::worker_keys`](crate::Policy::worker_keys) holds the
//! keys known at genesis, and the outbox's [`WorkerRegistry`] (encoded with the outbox, layout
//! 4) overrides them key by key through [`WorkerKeyRequest`]s that only an admin may make
//! ([`Policy::may_manage_workers`](crate::Policy::may_manage_workers)): a registration gives a
//! key exactly the handlers it names, a revocation takes every handler away (a tombstone when the
//! key came from the genesis policy). The registry is bounded ([`MAX_WORKER_KEYS`] entries,
//! [`MAX_HANDLERS_PER_KEY`] handlers each, [`MAX_WORKER_HANDLER_BYTES`] per name) and its encoded
//! bytes count against the outbox's [`max_total_bytes`](super::OutboxLimits::max_total_bytes),
//! so a registration can never make a full outbox overflow its pages.
//!
//! Verification is `verify_strict` of ed25519-dalek on the workspace's pinned curve arithmetic:
//! a pure function of the bytes, the same verdict on every replica (weak keys, non-canonical
//! encodings and small-order components are refused).
//!
//! Everything here is pure: no clock, no I/O, no randomness.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use super::log::OutboxRecord;

/// Domain separation of [`answer_signing_bytes`] (16 bytes: `ccron-answer-v1` and a zero).
pub const ANSWER_DOMAIN: &[u8; 16] = b"ccron-answer-v1\0";

/// Domain separation of [`root_signing_bytes`] (16 bytes).
pub const ANSWERS_ROOT_DOMAIN: &[u8; 16] = b"ccron-answers-v1";

/// Longest Merkle path in an [`AnswerProof`] (a batch of at most 2^16 answers).
pub const MAX_PROOF_STEPS: usize = 16;

/// Prefix of a worker key request's payload ([`WorkerKeyRequest::to_payload`]).
pub const WORKER_KEYS_PAYLOAD_PREFIX: &[u8; 16] = b"ccron-outbox-key";

/// Most entries (registered keys and revocations of genesis keys) the registry holds.
pub const MAX_WORKER_KEYS: usize = 64;

/// Most handlers one key may answer for.
pub const MAX_HANDLERS_PER_KEY: usize = 32;

/// Longest handler name in a registration.
pub const MAX_WORKER_HANDLER_BYTES: usize = 256;

/// Largest worker key request payload decoded (prefix included).
pub const MAX_WORKER_KEYS_PAYLOAD_BYTES: usize = 16 * 1024;

/// A worker's ed25519 public key (32 bytes): the identity its answers are signed with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, bincode::Encode, bincode::Decode,
)]
pub struct WorkerKey(pub [u8; 32]);

impl fmt::Display for WorkerKey {
    /// 64 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_hex(&self.0))
    }
}

/// Why a hex key or signature did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected} hex digits")]
pub struct HexError {
    /// Hex digits expected.
    pub expected: usize,
}

/// Decodes exactly `N` bytes from `2N` hex digits (upper- or lowercase).
pub fn hex_array<const N: usize>(text: &str) -> Result<[u8; N], HexError> {
    let err = HexError { expected: 2 * N };
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return Err(err);
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16).ok_or(err);
        *o = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).map_err(|_| err)?;
    }
    Ok(out)
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

impl FromStr for WorkerKey {
    type Err = HexError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        hex_array(s).map(Self)
    }
}

/// One step of a Merkle path: the sibling's hash and on which side it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct PathStep {
    /// The sibling is the left child (the node so far is the right one).
    pub left: bool,
    /// The sibling's hash.
    pub hash: [u8; 32],
}

/// A worker's signature over one answer: the key (checked against the registry), the ed25519
/// signature over [`root_signing_bytes`] of a batch's root, and the answer's path to that root
/// (empty for a batch of one).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct AnswerProof {
    /// The signing worker's key.
    pub key: WorkerKey,
    /// The signature (64 bytes).
    pub signature: [u8; 64],
    /// From the answer's leaf to the signed root (at most [`MAX_PROOF_STEPS`]).
    pub path: Vec<PathStep>,
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Lengths are bounded far below 2^32 (chain ids by configuration, handlers by the outbox's
    // record bound); saturate rather than wrap if a caller ever passes more.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The bytes a worker signs for its answer `answer` to the record `record` at outbox index
/// `index` of chain `chain_id` (`docs/outbox.md`, "The worker protocol"):
///
/// ```text
/// "ccron-answer-v1\0"                      16 bytes
/// len(chain_id) as u32 BE ‖ chain_id
/// index as u64 BE
/// occurrence id                            20 bytes (component u32 ‖ entry u64 ‖ occurrence u64, BE)
/// len(handler) as u32 BE ‖ handler (UTF-8)
/// SHA-256(payload)                         32 bytes
/// SHA-256(answer)                          32 bytes
/// ```
pub fn answer_signing_bytes(
    chain_id: &[u8],
    index: u64,
    record: &OutboxRecord,
    answer: &[u8],
) -> Vec<u8> {
    answer_signing_bytes_parts(
        chain_id,
        index,
        &record.id.to_bytes(),
        &record.handler,
        &sha256(&record.payload),
        &sha256(answer),
    )
}

/// [`answer_signing_bytes`] from the parts (a worker that only has the payload's digest).
pub fn answer_signing_bytes_parts(
    chain_id: &[u8],
    index: u64,
    id: &[u8; 20],
    handler: &str,
    payload_sha256: &[u8; 32],
    answer_sha256: &[u8; 32],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 4 + chain_id.len() + 8 + 20 + 4 + handler.len() + 64);
    out.extend_from_slice(ANSWER_DOMAIN);
    put_bytes(&mut out, chain_id);
    out.extend_from_slice(&index.to_be_bytes());
    out.extend_from_slice(id);
    put_bytes(&mut out, handler.as_bytes());
    out.extend_from_slice(payload_sha256);
    out.extend_from_slice(answer_sha256);
    out
}

/// The leaf of an answer: `SHA-256(0x00 ‖ answer signing bytes)`.
pub fn answer_leaf(signing_bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(signing_bytes);
    h.finalize().into()
}

/// An inner node: `SHA-256(0x01 ‖ left ‖ right)`.
fn node(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root `path` leads to from `leaf` (`None` for a path over [`MAX_PROOF_STEPS`]).
pub fn proof_root(leaf: [u8; 32], path: &[PathStep]) -> Option<[u8; 32]> {
    if path.len() > MAX_PROOF_STEPS {
        return None;
    }
    Some(path.iter().fold(leaf, |acc, step| {
        if step.left {
            node(&step.hash, &acc)
        } else {
            node(&acc, &step.hash)
        }
    }))
}

/// The bytes a worker signs for a batch of answers: `"ccron-answers-v1" ‖ len(chain id) u32 BE
/// ‖ chain id ‖ root`.
pub fn root_signing_bytes(chain_id: &[u8], root: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 4 + chain_id.len() + 32);
    out.extend_from_slice(ANSWERS_ROOT_DOMAIN);
    put_bytes(&mut out, chain_id);
    out.extend_from_slice(root);
    out
}

/// Whether `signature` by `key` over [`root_signing_bytes`] of `root` verifies (strict ed25519:
/// weak keys, non-canonical points and scalars are refused).
pub fn verify_root(
    key: &WorkerKey,
    chain_id: &[u8],
    root: &[u8; 32],
    signature: &[u8; 64],
) -> bool {
    PreparedKey::new(key).is_some_and(|k| k.verify_root(chain_id, root, signature))
}

/// A worker key decoded once (a valid, not weak, ed25519 point), for a verifier that checks
/// many signatures by few keys.
#[derive(Debug, Clone)]
pub struct PreparedKey(VerifyingKey);

impl PreparedKey {
    /// `key` decoded, or `None` when it is not a usable ed25519 public key.
    pub fn new(key: &WorkerKey) -> Option<Self> {
        VerifyingKey::from_bytes(&key.0)
            .ok()
            .filter(|k| !k.is_weak())
            .map(Self)
    }

    /// [`verify_root`] with this key.
    pub fn verify_root(&self, chain_id: &[u8], root: &[u8; 32], signature: &[u8; 64]) -> bool {
        let sig = ed25519_dalek::Signature::from_bytes(signature);
        self.0
            .verify_strict(&root_signing_bytes(chain_id, root), &sig)
            .is_ok()
    }
}

/// The root `proof` claims for the answer `answer` to `record` at `index` (`None`: its path is
/// too long).
pub fn answer_root(
    proof: &AnswerProof,
    chain_id: &[u8],
    index: u64,
    record: &OutboxRecord,
    answer: &[u8],
) -> Option<[u8; 32]> {
    proof_root(
        answer_leaf(&answer_signing_bytes(chain_id, index, record, answer)),
        &proof.path,
    )
}

/// Whether `proof` proves that `proof.key` signed the answer `answer` to `record` at `index`
/// of chain `chain_id`: the path from the answer's leaf leads to a root the key signed. Does not
/// look at any registry: see [`WorkerRegistry::may_answer`].
pub fn verify_answer(
    proof: &AnswerProof,
    chain_id: &[u8],
    index: u64,
    record: &OutboxRecord,
    answer: &[u8],
) -> bool {
    answer_root(proof, chain_id, index, record, answer)
        .is_some_and(|root| verify_root(&proof.key, chain_id, &root, &proof.signature))
}

/// A worker's signing key (its secret seed stays inside; `Debug` shows only the public key).
#[derive(Clone)]
pub struct WorkerSigner {
    key: SigningKey,
}

impl fmt::Debug for WorkerSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerSigner")
            .field("key", &self.public())
            .finish_non_exhaustive()
    }
}

impl WorkerSigner {
    /// The signer of the 32-byte ed25519 secret `seed` (RFC 8032: the private key).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key to register.
    pub fn public(&self) -> WorkerKey {
        WorkerKey(self.key.verifying_key().to_bytes())
    }

    /// Signs answer `answer` to `record` at `index` of chain `chain_id` alone (a batch of one).
    pub fn sign(
        &self,
        chain_id: &[u8],
        index: u64,
        record: &OutboxRecord,
        answer: &[u8],
    ) -> AnswerProof {
        let leaf = answer_leaf(&answer_signing_bytes(chain_id, index, record, answer));
        self.sign_root(chain_id, &leaf, Vec::new())
    }

    fn sign_root(&self, chain_id: &[u8], root: &[u8; 32], path: Vec<PathStep>) -> AnswerProof {
        AnswerProof {
            key: self.public(),
            signature: self
                .key
                .sign(&root_signing_bytes(chain_id, root))
                .to_bytes(),
            path,
        }
    }

    /// Signs a batch of answer leaves ([`answer_leaf`]) with one signature per 2^16 leaves:
    /// the root of a Merkle tree over them (a node without a sibling moves up unchanged), and
    /// each leaf's path to it. Returns one proof per leaf, in order.
    pub fn sign_leaves(&self, chain_id: &[u8], leaves: &[[u8; 32]]) -> Vec<AnswerProof> {
        let mut out = Vec::with_capacity(leaves.len());
        for chunk in leaves.chunks(1 << MAX_PROOF_STEPS) {
            let mut level: Vec<[u8; 32]> = chunk.to_vec();
            let mut paths: Vec<Vec<PathStep>> = vec![Vec::new(); chunk.len()];
            let mut pos: Vec<usize> = (0..chunk.len()).collect();
            while level.len() > 1 {
                for (p, path) in pos.iter_mut().zip(paths.iter_mut()) {
                    let sibling = *p ^ 1;
                    if let Some(hash) = level.get(sibling) {
                        path.push(PathStep {
                            left: sibling < *p,
                            hash: *hash,
                        });
                    }
                    *p /= 2;
                }
                level = level
                    .chunks(2)
                    .map(|pair| match pair {
                        [l, r] => node(l, r),
                        [one] => *one,
                        _ => [0; 32],
                    })
                    .collect();
            }
            let Some(root) = level.first() else {
                continue;
            };
            let signature = self
                .key
                .sign(&root_signing_bytes(chain_id, root))
                .to_bytes();
            let key = self.public();
            out.extend(paths.into_iter().map(|path| AnswerProof {
                key,
                signature,
                path,
            }));
        }
        out
    }
}

/// An admin's change to the worker registry, carried by a client request
/// ([`WorkerKeyRequest::to_payload`]) and applied by
/// [`Outbox::apply_worker_keys`](super::Outbox::apply_worker_keys).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum WorkerKeyRequest {
    /// `key` may answer for exactly `handlers` from now on (replacing what it had).
    Register {
        /// The worker's public key.
        key: WorkerKey,
        /// The handlers it may answer for (1 to [`MAX_HANDLERS_PER_KEY`], distinct, each 1 to
        /// [`MAX_WORKER_HANDLER_BYTES`] bytes).
        handlers: Vec<String>,
    },
    /// `key` may answer for nothing from now on.
    Revoke {
        /// The worker's public key.
        key: WorkerKey,
    },
}

/// Why a payload is not a worker key request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerKeysPayloadError {
    /// Larger than [`MAX_WORKER_KEYS_PAYLOAD_BYTES`].
    #[error("worker key payload of {len} bytes exceeds {MAX_WORKER_KEYS_PAYLOAD_BYTES}")]
    TooLarge {
        /// The payload's length.
        len: usize,
    },
    /// The bytes after the prefix do not decode.
    #[error("worker key payload does not decode: {0}")]
    Decode(String),
}

impl WorkerKeyRequest {
    /// The client request payload: [`WORKER_KEYS_PAYLOAD_PREFIX`] then the canonical encoding.
    ///
    /// # Errors
    /// [`WorkerKeysPayloadError::TooLarge`].
    pub fn to_payload(&self) -> Result<Vec<u8>, WorkerKeysPayloadError> {
        let body = crate::codec::to_blob(self)
            .map_err(|e| WorkerKeysPayloadError::Decode(e.to_string()))?;
        let len = body.len().saturating_add(WORKER_KEYS_PAYLOAD_PREFIX.len());
        if len > MAX_WORKER_KEYS_PAYLOAD_BYTES {
            return Err(WorkerKeysPayloadError::TooLarge { len });
        }
        let mut p = WORKER_KEYS_PAYLOAD_PREFIX.to_vec();
        p.extend_from_slice(&body);
        Ok(p)
    }

    /// The request a payload carries: `None` without the prefix, `Some(Err)` when it has the
    /// prefix but is oversized or malformed.
    pub fn from_payload(payload: &[u8]) -> Option<Result<Self, WorkerKeysPayloadError>> {
        let rest = payload.strip_prefix(WORKER_KEYS_PAYLOAD_PREFIX.as_slice())?;
        if payload.len() > MAX_WORKER_KEYS_PAYLOAD_BYTES {
            return Some(Err(WorkerKeysPayloadError::TooLarge { len: payload.len() }));
        }
        Some(
            crate::codec::from_blob(rest)
                .map_err(|e| WorkerKeysPayloadError::Decode(e.to_string())),
        )
    }

    /// The key the request is about.
    pub fn key(&self) -> WorkerKey {
        match self {
            Self::Register { key, .. } | Self::Revoke { key } => *key,
        }
    }
}

/// What [`Outbox::apply_worker_keys`](super::Outbox::apply_worker_keys) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerKeysApplied {
    /// The key's handlers changed (registered or replaced).
    Registered,
    /// The key may answer for nothing any more.
    Revoked,
    /// The registry already said so: nothing changed.
    Unchanged,
}

/// A key's entry in the replicated registry.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) enum Grant {
    /// The key answers for exactly these handlers (ascending, distinct).
    Handlers(Vec<String>),
    /// The key answers for nothing (it came from the genesis policy and was revoked).
    Revoked,
}

impl Grant {
    /// Encoded bytes of one registry entry (key, variant tag, handler list): what it counts
    /// against the outbox's byte bound (fixed-width bincode: 4-byte tag, 8-byte lengths).
    fn entry_bytes(&self) -> usize {
        let list = match self {
            Self::Handlers(h) => h.iter().fold(8usize, |acc, s| {
                acc.saturating_add(8).saturating_add(s.len())
            }),
            Self::Revoked => 0,
        };
        32usize.saturating_add(4).saturating_add(list)
    }
}

/// The outbox's replicated worker registry (see the module documentation): overrides of the
/// genesis keys, key by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerRegistry {
    grants: BTreeMap<WorkerKey, Grant>,
    bytes: usize,
}

/// Why a worker key request was refused (inside [`super::OutboxError::WorkerKeyInvalid`]).
pub(crate) fn validate_handlers(handlers: &[String]) -> Result<Vec<String>, String> {
    if handlers.is_empty() {
        return Err("a registration names at least one handler (revoke the key instead)".into());
    }
    if handlers.len() > MAX_HANDLERS_PER_KEY {
        return Err(format!(
            "{} handlers over the limit of {MAX_HANDLERS_PER_KEY}",
            handlers.len()
        ));
    }
    let mut set = BTreeSet::new();
    for h in handlers {
        if h.is_empty() || h.len() > MAX_WORKER_HANDLER_BYTES {
            return Err(format!(
                "handler names are 1 to {MAX_WORKER_HANDLER_BYTES} bytes"
            ));
        }
        if !set.insert(h.clone()) {
            return Err(format!("handler {h:?} is named twice"));
        }
    }
    Ok(set.into_iter().collect())
}

/// Whether `key` is an ed25519 public key a signature can be verified with (a valid point,
/// not of small order).
pub(crate) fn key_is_usable(key: &WorkerKey) -> bool {
    VerifyingKey::from_bytes(&key.0).is_ok_and(|k| !k.is_weak())
}

impl WorkerRegistry {
    /// Entries held (registrations and revocations).
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// Whether it holds no entry (the genesis keys alone decide).
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Encoded bytes of the entries: what the registry counts against the outbox's
    /// [`max_total_bytes`](super::OutboxLimits::max_total_bytes).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `key` may answer for `handler`: the registry's entry for `key` if it has one,
    /// else the genesis `policy`'s.
    pub fn may_answer(&self, policy: &crate::Policy, key: &WorkerKey, handler: &str) -> bool {
        match self.grants.get(key) {
            Some(Grant::Handlers(h)) => h.binary_search_by(|s| s.as_str().cmp(handler)).is_ok(),
            Some(Grant::Revoked) => false,
            None => policy
                .worker_keys
                .get(key)
                .is_some_and(|h| h.contains(handler)),
        }
    }

    /// The handlers `key` may answer for now (`policy` supplies the genesis keys).
    pub fn handlers_of(&self, policy: &crate::Policy, key: &WorkerKey) -> Vec<String> {
        match self.grants.get(key) {
            Some(Grant::Handlers(h)) => h.clone(),
            Some(Grant::Revoked) => Vec::new(),
            None => policy
                .worker_keys
                .get(key)
                .map(|h| h.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// The entry `req` leads to, and the registry's bytes after it (`None` entry: removed).
    /// Pure: nothing changes until [`Self::set`].
    pub(crate) fn plan(
        &self,
        policy: &crate::Policy,
        req: &WorkerKeyRequest,
    ) -> Result<(Option<Grant>, usize, WorkerKeysApplied), String> {
        let key = req.key();
        let old = self.grants.get(&key);
        let new = match req {
            WorkerKeyRequest::Register { handlers, .. } => {
                if !key_is_usable(&key) {
                    return Err(format!("{key} is not a usable ed25519 public key"));
                }
                Some(Grant::Handlers(validate_handlers(handlers)?))
            }
            // A genesis key stays revoked through a tombstone; any other key simply leaves.
            WorkerKeyRequest::Revoke { .. } if policy.worker_keys.contains_key(&key) => {
                Some(Grant::Revoked)
            }
            WorkerKeyRequest::Revoke { .. } => None,
        };
        let effect = if old == new.as_ref() {
            WorkerKeysApplied::Unchanged
        } else if matches!(req, WorkerKeyRequest::Register { .. }) {
            WorkerKeysApplied::Registered
        } else {
            WorkerKeysApplied::Revoked
        };
        // A registration equal to the genesis grant still gets its own entry: the registry
        // then no longer depends on the genesis policy for this key.
        let bytes = self
            .bytes
            .saturating_sub(old.map_or(0, Grant::entry_bytes))
            .saturating_add(new.as_ref().map_or(0, Grant::entry_bytes));
        if new.is_some() && old.is_none() && self.grants.len() >= MAX_WORKER_KEYS {
            return Err(format!("the registry holds {MAX_WORKER_KEYS} keys already"));
        }
        Ok((new, bytes, effect))
    }

    /// Sets `key`'s entry (`None`: removes it).
    pub(crate) fn set(&mut self, key: WorkerKey, grant: Option<Grant>) {
        if let Some(old) = self.grants.remove(&key) {
            self.bytes = self.bytes.saturating_sub(old.entry_bytes());
        }
        if let Some(g) = grant {
            self.bytes = self.bytes.saturating_add(g.entry_bytes());
            self.grants.insert(key, g);
        }
    }

    /// The entries in key order (for the outbox's encoding).
    pub(crate) fn to_wire(&self) -> Vec<(WorkerKey, Grant)> {
        self.grants.iter().map(|(k, g)| (*k, g.clone())).collect()
    }

    /// Rebuilds a registry from decoded entries, checking every bound and that keys ascend.
    pub(crate) fn from_wire(entries: Vec<(WorkerKey, Grant)>) -> Result<Self, String> {
        if entries.len() > MAX_WORKER_KEYS {
            return Err(format!(
                "{} worker keys over the limit of {MAX_WORKER_KEYS}",
                entries.len()
            ));
        }
        if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err("worker keys out of order or repeated".into());
        }
        let mut reg = Self::default();
        for (key, grant) in entries {
            if let Grant::Handlers(h) = &grant {
                let canonical = validate_handlers(h)?;
                if &canonical != h {
                    return Err(format!("handlers of {key} are not in canonical order"));
                }
                if !key_is_usable(&key) {
                    return Err(format!("{key} is not a usable ed25519 public key"));
                }
            }
            reg.set(key, Some(grant));
        }
        Ok(reg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::OccurrenceId;
    use crate::{Policy, codec};

    fn record() -> OutboxRecord {
        OutboxRecord::new(
            OccurrenceId::new(7, 8, 9),
            "shop.cancel",
            b"order-1".to_vec(),
        )
    }

    #[test]
    fn answers_verify_only_for_their_exact_bytes() {
        let w = WorkerSigner::from_seed([5; 32]);
        let r = record();
        let proof = w.sign(b"chain", 3, &r, b"confirmed");
        assert!(verify_answer(&proof, b"chain", 3, &r, b"confirmed"));
        assert!(!verify_answer(&proof, b"chain2", 3, &r, b"confirmed"));
        assert!(!verify_answer(&proof, b"chain", 4, &r, b"confirmed"));
        assert!(!verify_answer(&proof, b"chain", 3, &r, b"confirmed!"));
        let mut other = r.clone();
        other.payload = b"order-2".to_vec();
        assert!(!verify_answer(&proof, b"chain", 3, &other, b"confirmed"));
        let mut other = r.clone();
        other.handler = "shop.refund".into();
        assert!(!verify_answer(&proof, b"chain", 3, &other, b"confirmed"));
        let mut other = r.clone();
        other.id = OccurrenceId::new(7, 8, 10);
        assert!(!verify_answer(&proof, b"chain", 3, &other, b"confirmed"));
        let mut bad = proof.clone();
        bad.signature[0] ^= 1;
        assert!(!verify_answer(&bad, b"chain", 3, &r, b"confirmed"));
        let mut bad = proof.clone();
        bad.key = WorkerSigner::from_seed([6; 32]).public();
        assert!(!verify_answer(&bad, b"chain", 3, &r, b"confirmed"));
        // A path cannot be added to a single answer's proof.
        let mut bad = proof.clone();
        bad.path.push(PathStep {
            left: true,
            hash: [0; 32],
        });
        assert!(!verify_answer(&bad, b"chain", 3, &r, b"confirmed"));
        // The identity point (a weak key) signs nothing.
        let mut weak = proof;
        weak.key = WorkerKey({
            let mut k = [0u8; 32];
            k[0] = 1;
            k
        });
        assert!(!key_is_usable(&weak.key));
        assert!(!verify_answer(&weak, b"chain", 3, &r, b"confirmed"));
    }

    /// One signature for a batch: every answer of it verifies with its own path, and with no
    /// other answer's; paths are short; a batch of one is the single signature.
    #[test]
    fn batches_share_one_signature_and_every_answer_verifies_alone() {
        let w = WorkerSigner::from_seed([5; 32]);
        for n in [1usize, 2, 3, 5, 8, 13] {
            let records: Vec<OutboxRecord> = (0..n)
                .map(|k| OutboxRecord::new(OccurrenceId::new(1, 2, k as u64), "h", vec![k as u8]))
                .collect();
            let leaves: Vec<[u8; 32]> = records
                .iter()
                .enumerate()
                .map(|(k, r)| answer_leaf(&answer_signing_bytes(b"c", k as u64 + 1, r, b"ok")))
                .collect();
            let proofs = w.sign_leaves(b"c", &leaves);
            assert_eq!(proofs.len(), n);
            assert!(proofs.iter().all(|p| p.signature == proofs[0].signature));
            let depth = usize::BITS - (n - 1).leading_zeros();
            for (k, (p, r)) in proofs.iter().zip(&records).enumerate() {
                assert!(p.path.len() <= depth as usize, "{n}: {}", p.path.len());
                assert!(verify_answer(p, b"c", k as u64 + 1, r, b"ok"), "{n} {k}");
                assert!(!verify_answer(p, b"c", k as u64 + 1, r, b"no"));
                if n > 1 {
                    let other = (k + 1) % n;
                    assert!(!verify_answer(
                        p,
                        b"c",
                        other as u64 + 1,
                        &records[other],
                        b"ok"
                    ));
                }
            }
            if n == 1 {
                assert_eq!(proofs[0], w.sign(b"c", 1, &records[0], b"ok"));
            }
        }
        let long = vec![
            PathStep {
                left: false,
                hash: [0; 32]
            };
            MAX_PROOF_STEPS + 1
        ];
        assert!(proof_root([0; 32], &long).is_none());
    }

    /// The signed bytes are pinned: workers in other languages build them from the docs.
    #[test]
    fn signing_bytes_are_pinned() {
        let b = answer_signing_bytes(b"ch", 0x0102, &record(), b"ok");
        let mut expected = b"ccron-answer-v1\0".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 2, b'c', b'h']);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        expected.extend_from_slice(&OccurrenceId::new(7, 8, 9).to_bytes());
        expected.extend_from_slice(&[0, 0, 0, 11]);
        expected.extend_from_slice(b"shop.cancel");
        expected.extend_from_slice(&sha256(b"order-1"));
        expected.extend_from_slice(&sha256(b"ok"));
        assert_eq!(b, expected);
        // RFC 8032 test 1: the seed below has this public key (the Python worker's signer is
        // checked against the same vector).
        let seed =
            hex_array::<32>("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .unwrap();
        assert_eq!(
            WorkerSigner::from_seed(seed).public().to_string(),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        // RFC 8032's signature of the empty message, through the same key.
        let sig = SigningKey::from_bytes(&seed).sign(b"").to_bytes();
        assert_eq!(
            to_hex(&sig),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155\
             5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
        // The root bytes and the leaf and node hashes.
        let mut root = b"ccron-answers-v1".to_vec();
        root.extend_from_slice(&[0, 0, 0, 2, b'c', b'h']);
        root.extend_from_slice(&[7; 32]);
        assert_eq!(root_signing_bytes(b"ch", &[7; 32]), root);
        assert_eq!(answer_leaf(b"x"), sha256(b"\x00x"));
        let mut inner = vec![1u8];
        inner.extend_from_slice(&[2; 32]);
        inner.extend_from_slice(&[3; 32]);
        assert_eq!(node(&[2; 32], &[3; 32]), sha256(&inner));
    }

    #[test]
    fn hex_parses_strictly() {
        let k = WorkerSigner::from_seed([1; 32]).public();
        assert_eq!(k.to_string().parse::<WorkerKey>(), Ok(k));
        assert_eq!(k.to_string().to_uppercase().parse::<WorkerKey>(), Ok(k));
        for bad in [
            "",
            "00",
            &"0".repeat(63),
            &"g".repeat(64),
            &"0".repeat(65),
            "+1",
        ] {
            assert!(bad.parse::<WorkerKey>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_registry_overrides_genesis_keys_within_its_bounds() {
        let a = WorkerSigner::from_seed([1; 32]).public();
        let b = WorkerSigner::from_seed([2; 32]).public();
        let policy = Policy::default().with_worker_key(a, ["mail"]);
        let mut reg = WorkerRegistry::default();
        assert!(reg.may_answer(&policy, &a, "mail"));
        assert!(!reg.may_answer(&policy, &a, "sms"));
        assert!(!reg.may_answer(&policy, &b, "mail"));
        let apply = |reg: &mut WorkerRegistry, req: WorkerKeyRequest| {
            let (g, bytes, effect) = reg.plan(&policy, &req)?;
            reg.set(req.key(), g);
            assert_eq!(reg.bytes(), bytes);
            Ok::<_, String>(effect)
        };
        let reg_b = WorkerKeyRequest::Register {
            key: b,
            handlers: vec!["sms".into(), "mail".into()],
        };
        assert_eq!(
            apply(&mut reg, reg_b.clone()),
            Ok(WorkerKeysApplied::Registered)
        );
        assert_eq!(apply(&mut reg, reg_b), Ok(WorkerKeysApplied::Unchanged));
        assert!(reg.may_answer(&policy, &b, "sms") && reg.may_answer(&policy, &b, "mail"));
        assert_eq!(reg.handlers_of(&policy, &b), vec!["mail", "sms"]);
        // Revoking a genesis key leaves a tombstone; revoking a registered one removes it.
        assert_eq!(
            apply(&mut reg, WorkerKeyRequest::Revoke { key: a }),
            Ok(WorkerKeysApplied::Revoked)
        );
        assert!(!reg.may_answer(&policy, &a, "mail"));
        assert_eq!(
            apply(&mut reg, WorkerKeyRequest::Revoke { key: a }),
            Ok(WorkerKeysApplied::Unchanged)
        );
        assert_eq!(
            apply(&mut reg, WorkerKeyRequest::Revoke { key: b }),
            Ok(WorkerKeysApplied::Revoked)
        );
        assert_eq!(reg.len(), 1);
        assert!(!reg.may_answer(&policy, &b, "mail"));
        // Bad registrations change nothing.
        for handlers in [
            vec![],
            vec!["".to_string()],
            vec!["x".repeat(MAX_WORKER_HANDLER_BYTES + 1)],
            vec!["a".into(), "a".into()],
            (0..=MAX_HANDLERS_PER_KEY).map(|i| i.to_string()).collect(),
        ] {
            let req = WorkerKeyRequest::Register { key: b, handlers };
            assert!(reg.plan(&policy, &req).is_err(), "{req:?}");
        }
        let weak = WorkerKeyRequest::Register {
            key: WorkerKey([0; 32]),
            handlers: vec!["mail".into()],
        };
        assert!(reg.plan(&policy, &weak).is_err());
        // The bound on entries.
        let mut reg = WorkerRegistry::default();
        for i in 0..MAX_WORKER_KEYS {
            let key = WorkerSigner::from_seed([u8::try_from(i + 10).unwrap(); 32]).public();
            apply(
                &mut reg,
                WorkerKeyRequest::Register {
                    key,
                    handlers: vec!["h".into()],
                },
            )
            .unwrap();
        }
        let one_more = WorkerKeyRequest::Register {
            key: WorkerSigner::from_seed([200; 32]).public(),
            handlers: vec!["h".into()],
        };
        assert!(reg.plan(&policy, &one_more).is_err());
    }

    #[test]
    fn entry_bytes_are_the_encoded_bytes() {
        let key = WorkerSigner::from_seed([1; 32]).public();
        for grant in [
            Grant::Revoked,
            Grant::Handlers(vec!["a".into()]),
            Grant::Handlers(vec!["mail".into(), "x".repeat(200)]),
        ] {
            let one = codec::encoded_len(&vec![(key, grant.clone())]).unwrap();
            let none = codec::encoded_len(&Vec::<(WorkerKey, Grant)>::new()).unwrap();
            assert_eq!(one - none, grant.entry_bytes(), "{grant:?}");
        }
    }

    #[test]
    fn key_requests_round_trip_as_payloads() {
        let req = WorkerKeyRequest::Register {
            key: WorkerSigner::from_seed([1; 32]).public(),
            handlers: vec!["mail".into()],
        };
        let p = req.to_payload().unwrap();
        assert_eq!(WorkerKeyRequest::from_payload(&p), Some(Ok(req)));
        assert_eq!(WorkerKeyRequest::from_payload(b"other"), None);
        assert!(matches!(
            WorkerKeyRequest::from_payload(b"ccron-outbox-key\x07"),
            Some(Err(WorkerKeysPayloadError::Decode(_)))
        ));
        let mut big = WORKER_KEYS_PAYLOAD_PREFIX.to_vec();
        big.resize(MAX_WORKER_KEYS_PAYLOAD_BYTES + 1, 0);
        assert!(matches!(
            WorkerKeyRequest::from_payload(&big),
            Some(Err(WorkerKeysPayloadError::TooLarge { .. }))
        ));
    }
}
