//! [`KvLedger`]: the demo key-value ledger whose digest covers its whole state, and its
//! request payload [`KvOp`] and result bytes ([`kv_result`]).

use std::collections::BTreeMap;

use bincode::{Decode, Encode};
use sha2::{Digest, Sha256};

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
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries.get(key).map(Vec::as_slice)
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

    fn delete(&mut self, key: &[u8]) -> Option<Vec<u8>> {
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
    fn execute(&mut self, _ctx: ExecContext, _client: ClientId, payload: &[u8]) -> Vec<u8> {
        match codec::decode::<KvOp>(payload, payload.len()) {
            Ok(KvOp::Put { key, value }) => result(self.put(key, value)),
            Ok(KvOp::Get { key }) => result(self.entries.get(&key).cloned()),
            Ok(KvOp::Delete { key }) => result(self.delete(&key)),
            Err(_) => vec![kv_result::MALFORMED],
        }
    }

    fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"kv-ledger");
        h.update((self.entries.len() as u64).to_le_bytes());
        for limb in self.sum {
            h.update(limb.to_le_bytes());
        }
        h.finalize().into()
    }

    fn snapshot(&self) -> Vec<u8> {
        let entries: Vec<(&Vec<u8>, &Vec<u8>)> = self.entries.iter().collect();
        codec::encode(&entries).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = codec::decode(snapshot, snapshot.len())
            .map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        let mut fresh = KvLedger::new();
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

    #[test]
    fn kv_digest_is_order_independent_and_tracks_state() {
        let mut a = KvLedger::new();
        let mut b = KvLedger::new();
        let put = |k: &str, v: &str| {
            KvOp::Put {
                key: k.into(),
                value: v.into(),
            }
            .to_payload()
        };
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
