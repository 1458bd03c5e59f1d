//! The per-replica disk model: `Output::Store` writes, `Output::Sync` barriers, crash loss.
//!
//! Writes are kept in issue order. Everything before the last `Sync` is durable; on a crash the
//! simulator keeps a seeded prefix of the writes issued after it and loses the rest, which is
//! exactly what the [`crate::node::Output::Store`] contract allows (a suffix may vanish, never a
//! write before a sync, never a write out of order).

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::rng::SimRng;

/// The durable contents of one replica's storage, as a restarted replica sees it.
pub type DiskImage = BTreeMap<Vec<u8>, Vec<u8>>;

/// One replica's simulated disk.
///
/// The durable contents are kept in a hash map (a write is a lookup, not an ordered-tree walk
/// over byte-string keys); [`Disk::image`] orders them for a boot. Only membership and lookups
/// touch the map, so its iteration order never matters.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    durable: HashMap<Vec<u8>, Vec<u8>, BuildHasherDefault<KeyHasher>>,
    pending: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Writes lost by crashes so far (for the report and the tests).
    lost_writes: u64,
}

/// The durable map's key hasher: a fixed multiply-rotate hash of the key's bytes (the keys
/// are a replica's own storage keys, never chosen by an adversary, so the standard library's
/// per-process SipHash keys buy nothing; a hash costs a few instructions per 8 bytes). Only
/// lookups use it: nothing depends on the map's order.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyHasher(u64);

impl KeyHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.add(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Disk {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a write (not yet durable).
    pub fn store(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.pending.push((key, value));
    }

    /// Makes every earlier write durable.
    pub fn sync(&mut self) {
        // Drained, not taken: the pending list keeps its capacity for the next writes.
        for (k, v) in self.pending.drain(..) {
            apply(&mut self.durable, k, v);
        }
    }

    /// A crash: keeps a seeded prefix of the unsynced writes (possibly all, possibly none) and
    /// loses the rest. Returns how many writes were lost.
    pub fn crash(&mut self, rng: &mut SimRng) -> u64 {
        let total = self.pending.len() as u64;
        let keep = rng.below(total + 1);
        let pending = std::mem::take(&mut self.pending);
        for (i, (k, v)) in pending.into_iter().enumerate() {
            if (i as u64) < keep {
                apply(&mut self.durable, k, v);
            }
        }
        let lost = total - keep;
        self.lost_writes += lost;
        lost
    }

    /// What a replica restarting now would read (built for the boot: ordered by key).
    pub fn image(&self) -> DiskImage {
        self.durable
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Number of writes not yet made durable by a `Sync`.
    pub fn pending_writes(&self) -> usize {
        self.pending.len()
    }

    /// Total writes lost by crashes.
    pub fn lost_writes(&self) -> u64 {
        self.lost_writes
    }
}

fn apply(
    map: &mut HashMap<Vec<u8>, Vec<u8>, BuildHasherDefault<KeyHasher>>,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
) {
    match value {
        Some(v) => {
            map.insert(key, v);
        }
        None => {
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_writes_survive_and_only_a_suffix_is_lost() {
        for seed in 0..64 {
            let mut d = Disk::new();
            d.store(b"a".to_vec(), Some(b"1".to_vec()));
            d.sync();
            for i in 0..5u8 {
                d.store(vec![b'k', i], Some(vec![i]));
            }
            let lost = d.crash(&mut SimRng::new(seed));
            assert_eq!(d.image().get(b"a".as_slice()), Some(&b"1".to_vec()));
            let kept = 5 - lost as usize;
            for i in 0..5u8 {
                // Prefix kept, suffix lost: never a hole.
                assert_eq!(d.image().contains_key(&vec![b'k', i]), (i as usize) < kept);
            }
            assert_eq!(d.pending_writes(), 0);
        }
    }

    #[test]
    fn delete_applies_in_order() {
        let mut d = Disk::new();
        d.store(b"x".to_vec(), Some(b"1".to_vec()));
        d.store(b"x".to_vec(), None);
        d.sync();
        assert!(d.image().is_empty());
    }
}
