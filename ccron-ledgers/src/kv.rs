//! [`KvLedger`]: the demo key-value ledger whose digest covers its whole state, and its
//! request payload [`KvOp`] and result bytes ([`kv_result`]).
//!
//! Keys are the client's own ([`KeySpace::PerClient`], the default): a client's `Put`, `Get`
//! and `Delete` of key `k` address the entry stored under its authenticated client id followed
//! by `k` ([`KvLedger::stored_key`]), so two clients using the same key hold separate entries
//! and no client can read, overwrite or delete another's. [`KeySpace::Shared`] (one namespace
//! for everyone, the layout before) is kept to replay logs recorded under it; the digest tells
//! the two apart.

use std::collections::BTreeMap;

use bincode::{Decode, Encode};
use ccron::sha256::Sha256;
use ccron::state_hash::{StateHash, StateHasher};

use ccron::host::ClientId;
use ccron::host::Digest32;
use ccron::host::app::{AppError, Application, ExecContext};
use ccron::host::wire as codec;

/// An operation of the [`KvLedger`] (the payload of a user request, encoded with the codec).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum KvOp {
    /// Sets `key` to `value`; the result is the previous value, if any.
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Reads `key`.
    Get {
        /// Key.
        key: Vec<u8>,
    },
    /// Removes `key`; the result is the removed value, if any.
    Delete {
        /// Key.
        key: Vec<u8>,
    },
}

impl KvOp {
    /// The request payload for this operation.
    pub fn to_payload(&self) -> Vec<u8> {
        codec::encode(self).unwrap_or_default()
    }
}

/// Result byte prefix of a [`KvLedger`] operation: `0` found/ok with value following, `1` absent,
/// `2` malformed request.
pub mod kv_result {
    /// Success with a value following.
    pub const VALUE: u8 = 0;
    /// Success, no value.
    pub const NONE: u8 = 1;
    /// The payload did not decode.
    pub const MALFORMED: u8 = 2;
}

/// Whose names keys are, in the example ledgers (configuration, identical on every replica).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeySpace {
    /// Every client has its own namespace: a key is stored under the authenticated client id
    /// that names it, so nobody can take another client's key.
    #[default]
    PerClient,
    /// One namespace shared by every client (the layout before issue 24), kept only to replay
    /// logs recorded under it.
    Shared,
}

/// A deterministic key-value ledger.
///
/// Its digest is SHA-256 over the entry count and an additive multiset hash (the sum modulo
/// 2^256 of SHA-256 over each entry), maintained incrementally so that a batch costs O(its
/// requests), not O(state). Demo grade: additive hashes over 256 bits are fine for detecting
/// divergence and corruption, not for adversarially chosen multisets of many entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvLedger {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    sum: [u64; 4],
    keys: KeySpace,
}

fn entry_hash(key: &[u8], value: &[u8]) -> [u64; 4] {
    let mut h = Sha256::new();
    h.update((key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(value);
    let d: [u8; 32] = h.finalize().into();
    let mut limbs = [0u64; 4];
    for (i, limb) in limbs.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[i * 8..i * 8 + 8]);
        *limb = u64::from_le_bytes(b);
    }
    limbs
}

fn add256(a: &mut [u64; 4], b: [u64; 4]) {
    let mut carry = false;
    for i in 0..4 {
        let (s1, c1) = a[i].overflowing_add(b[i]);
        let (s2, c2) = s1.overflowing_add(u64::from(carry));
        a[i] = s2;
        carry = c1 || c2;
    }
}

fn sub256(a: &mut [u64; 4], b: [u64; 4]) {
    let mut borrow = false;
    for i in 0..4 {
        let (s1, c1) = a[i].overflowing_sub(b[i]);
        let (s2, c2) = s1.overflowing_sub(u64::from(borrow));
        a[i] = s2;
        borrow = c1 || c2;
    }
}

impl KvLedger {
    /// An empty ledger, each client's keys its own ([`KeySpace::PerClient`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty ledger whose keys are named in `keys`.
    pub fn with_keys(keys: KeySpace) -> Self {
        Self {
            keys,
            ..Self::default()
        }
    }

    /// Whose names keys are.
    pub fn keys(&self) -> KeySpace {
        self.keys
    }

    /// Where `client`'s `key` is stored: under [`KeySpace::PerClient`], the client id (8 bytes,
    /// big-endian) followed by the key; under [`KeySpace::Shared`], the key.
    pub fn stored_key(&self, client: ClientId, key: &[u8]) -> Vec<u8> {
        match self.keys {
            KeySpace::PerClient => [&client.to_be_bytes()[..], key].concat(),
            KeySpace::Shared => key.to_vec(),
        }
    }

    /// The value stored under `stored` ([`KvLedger::stored_key`]).
    pub fn get(&self, stored: &[u8]) -> Option<&[u8]> {
        self.entries.get(stored).map(Vec::as_slice)
    }

    /// The value of `client`'s `key`.
    pub fn get_of(&self, client: ClientId, key: &[u8]) -> Option<&[u8]> {
        self.get(&self.stored_key(client, key))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the ledger is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Option<Vec<u8>> {
        add256(&mut self.sum, entry_hash(&key, &value));
        let old = self.entries.insert(key.clone(), value);
        if let Some(old) = &old {
            sub256(&mut self.sum, entry_hash(&key, old));
        }
        old
    }

    /// Removes the entry stored under `key` ([`KvLedger::stored_key`]), returning its value.
    pub(crate) fn delete(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let old = self.entries.remove(key);
        if let Some(old) = &old {
            sub256(&mut self.sum, entry_hash(key, old));
        }
        old
    }
}

fn result(v: Option<Vec<u8>>) -> Vec<u8> {
    match v {
        Some(mut v) => {
            v.insert(0, kv_result::VALUE);
            v
        }
        None => vec![kv_result::NONE],
    }
}

impl Application for KvLedger {
    fn execute(&mut self, _ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        match codec::decode::<KvOp>(payload, payload.len()) {
            Ok(KvOp::Put { key, value }) => {
                let key = self.stored_key(client, &key);
                result(self.put(key, value))
            }
            Ok(KvOp::Get { key }) => result(self.get_of(client, &key).map(<[u8]>::to_vec)),
            Ok(KvOp::Delete { key }) => {
                let key = self.stored_key(client, &key);
                result(self.delete(&key))
            }
            Err(_) => vec![kv_result::MALFORMED],
        }
    }

    fn digest(&self) -> Digest32 {
        self.digest_in(StateHash::Sha256)
    }

    fn digest_in(&self, hash: StateHash) -> Digest32 {
        let mut h = StateHasher::new(hash);
        h.update(match self.keys {
            KeySpace::Shared => &b"kv-ledger"[..],
            KeySpace::PerClient => b"kv-ledger per-client",
        });
        h.update((self.entries.len() as u64).to_le_bytes());
        for limb in self.sum {
            h.update(limb.to_le_bytes());
        }
        h.finalize()
    }

    fn snapshot(&self) -> Vec<u8> {
        let entries: Vec<(&Vec<u8>, &Vec<u8>)> = self.entries.iter().collect();
        codec::encode(&entries).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = codec::decode(snapshot, snapshot.len())
            .map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        let mut fresh = KvLedger::with_keys(self.keys);
        for (k, v) in entries {
            if fresh.put(k, v).is_some() {
                return Err(AppError::BadSnapshot("duplicate key".into()));
            }
        }
        *self = fresh;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: ExecContext = ExecContext {
        seq: 1,
        agreed_time_ms: None,
    };

    fn put(k: &str, v: &str) -> Vec<u8> {
        KvOp::Put {
            key: k.into(),
            value: v.into(),
        }
        .to_payload()
    }

    /// Issue 24: keys were one namespace, so any client could read, overwrite or delete
    /// another's entry. Each client's keys are now its own.
    #[test]
    fn a_client_cannot_take_another_clients_key() {
        let mut l = KvLedger::new();
        let get = KvOp::Get { key: "k".into() }.to_payload();
        let del = KvOp::Delete { key: "k".into() }.to_payload();
        assert_eq!(l.execute(CTX, 1, &put("k", "mine")), vec![kv_result::NONE]);
        // Another client's put, get and delete of the same name address its own entry.
        assert_eq!(l.execute(CTX, 2, &get), vec![kv_result::NONE]);
        assert_eq!(
            l.execute(CTX, 2, &put("k", "theirs")),
            vec![kv_result::NONE]
        );
        assert_eq!(l.execute(CTX, 2, &del), b"\x00theirs".to_vec());
        assert_eq!(l.execute(CTX, 2, &del), vec![kv_result::NONE]);
        assert_eq!(l.execute(CTX, 1, &get), b"\x00mine".to_vec());
        assert_eq!(l.get_of(1, b"k"), Some(&b"mine"[..]));
        assert_eq!(l.len(), 1);
        // The shared layout (replays of older logs) behaves as it did, and digests apart.
        let mut shared = KvLedger::with_keys(KeySpace::Shared);
        shared.execute(CTX, 1, &put("k", "mine"));
        assert_eq!(shared.execute(CTX, 2, &del), b"\x00mine".to_vec());
        assert!(shared.is_empty());
        let (mut a, mut b) = (KvLedger::new(), KvLedger::with_keys(KeySpace::Shared));
        assert_ne!(a.digest(), b.digest());
        a.execute(CTX, 1, &put("k", "v"));
        let mut c = KvLedger::new();
        c.restore(&a.snapshot()).unwrap();
        assert_eq!(c, a);
        b.restore(&a.snapshot()).unwrap();
        assert_eq!(b.keys(), KeySpace::Shared);
    }

    #[test]
    fn kv_digest_is_order_independent_and_tracks_state() {
        let mut a = KvLedger::new();
        let mut b = KvLedger::new();
        a.execute(CTX, 0, &put("x", "1"));
        a.execute(CTX, 0, &put("y", "2"));
        b.execute(CTX, 0, &put("y", "2"));
        assert_ne!(a.digest(), b.digest());
        b.execute(CTX, 0, &put("x", "0"));
        assert_ne!(a.digest(), b.digest());
        assert_eq!(b.execute(CTX, 0, &put("x", "1")), b"\x000".to_vec());
        assert_eq!(a.digest(), b.digest());
        let del = KvOp::Delete { key: "x".into() }.to_payload();
        a.execute(CTX, 0, &del);
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.execute(CTX, 0, b"\xff\xff"), vec![kv_result::MALFORMED]);
        let mut c = KvLedger::new();
        c.restore(&b.snapshot()).unwrap();
        assert_eq!(c, b);
        assert!(c.restore(b"junk").is_err());
        assert_eq!(c, b);
    }
}
