//! [`MultisetSum`]: the additive multiset hash the example ledgers keep their digests with, so
//! that a block costs O(its changes), not O(state).
//!
//! A ledger's map of entries is digested as the sum modulo 2^256 of one **leaf hash** per
//! entry (MSet-Add-Hash, Clarke et al. 2003), together with the number of entries. The sum
//! does not depend on the order entries were added in, so it can be kept up to date as the map
//! changes: `add` a leaf when an entry appears, `sub` it when it goes, and the sum equals the
//! one recomputed from scratch over the map ([`MultisetSum::of`]) after any sequence of
//! changes. Every ledger that keeps one recomputes it from scratch when it loads a snapshot
//! (nothing incremental is persisted), and its tests check kept == from scratch over random
//! operation sequences.
//!
//! **What makes it a sound state digest here.**
//! - Each leaf is SHA-256 over a **domain-separated, unambiguous** encoding of its entry (a
//!   tag naming the map and its version, then the entry with every field's length known:
//!   length-prefixed, or fixed-width and last, e.g. the demo's key followed by its 8-byte
//!   time), so no two distinct entries of one map, and no entry of two different maps, hash
//!   the same input: a collision of leaves is a SHA-256 collision. (The
//!   key-value ledger's entry leaves, older than this module, carry no tag: the key's length,
//!   the key, the value; they are kept for its digest's bytes and are separated by being the
//!   only untagged leaves, each map's sum hashed as a field of its own.)
//! - The ledger's digest hashes the **entry count** next to the sum (a map of n entries and one
//!   of m != n never compare equal through the sum alone) under the host's state hash.
//! - Addition modulo 2^256, not XOR: an XOR of leaves is linear over GF(2), so any 257 leaves
//!   contain a subset that XORs to zero (Gaussian elimination finds it); an additive sum has no
//!   such structure.
//!
//! **What it does not give.** An adversary choosing very many entries can search for two
//! multisets of leaves with equal sums faster than a 256-bit hash's birthday bound (Wagner's
//! generalised birthday attack, about 2^(2·sqrt(256)) = 2^32 leaves' work for a sum modulo
//! 2^256). The state digest is how replicas notice that their states *diverged* (a bug, a
//! corrupt disk, a lost write): divergence is not chosen by the clients who write entries, and
//! the bytes a replica receives by state transfer are checked against the certified chunk
//! digests, not against this sum. A ledger whose digest must resist chosen entries (a
//! commitment others prove membership against) wants a Merkle tree instead.

use ccron::sha256::Sha256;

/// The sum modulo 2^256 of 256-bit leaf hashes, as four little-endian 64-bit limbs (the
/// module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MultisetSum([u64; 4]);

impl MultisetSum {
    /// The empty multiset's sum (zero).
    pub const EMPTY: Self = Self([0; 4]);

    /// The leaf of one entry: SHA-256 over `parts` concatenated (the caller's encoding,
    /// domain-separated and unambiguous, as the module documentation requires), read as a
    /// little-endian 256-bit number.
    pub fn leaf(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        Self::from_digest(h.finalize().into())
    }

    /// A 32-byte digest read as a little-endian 256-bit number.
    pub fn from_digest(d: [u8; 32]) -> Self {
        let mut limbs = [0u64; 4];
        for (limb, bytes) in limbs.iter_mut().zip(d.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            *limb = u64::from_le_bytes(b);
        }
        Self(limbs)
    }

    /// The sum of `leaves` (from scratch: what a kept sum must equal).
    pub fn of(leaves: impl IntoIterator<Item = Self>) -> Self {
        let mut s = Self::EMPTY;
        for l in leaves {
            s.add(l);
        }
        s
    }

    /// Adds `leaf` (an entry appeared).
    pub fn add(&mut self, leaf: Self) {
        let mut carry = false;
        for (a, b) in self.0.iter_mut().zip(leaf.0) {
            let (s1, c1) = a.overflowing_add(b);
            let (s2, c2) = s1.overflowing_add(u64::from(carry));
            *a = s2;
            carry = c1 || c2;
        }
    }

    /// Subtracts `leaf` (an entry went; `leaf` was added before).
    pub fn sub(&mut self, leaf: Self) {
        let mut borrow = false;
        for (a, b) in self.0.iter_mut().zip(leaf.0) {
            let (s1, c1) = a.overflowing_sub(b);
            let (s2, c2) = s1.overflowing_sub(u64::from(borrow));
            *a = s2;
            borrow = c1 || c2;
        }
    }

    /// The 32 bytes a digest hashes: the limbs, little-endian, lowest first.
    pub fn to_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (bytes, limb) in out.chunks_exact_mut(8).zip(self.0) {
            bytes.copy_from_slice(&limb.to_le_bytes());
        }
        out
    }

    /// The limbs, lowest first.
    pub fn limbs(self) -> [u64; 4] {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn carries_and_borrows_cross_every_limb() {
        let mut s = MultisetSum([u64::MAX, u64::MAX, u64::MAX, 7]);
        s.add(MultisetSum([1, 0, 0, 0]));
        assert_eq!(s.limbs(), [0, 0, 0, 8]);
        s.sub(MultisetSum([1, 0, 0, 0]));
        assert_eq!(s.limbs(), [u64::MAX, u64::MAX, u64::MAX, 7]);
        // Modulo 2^256: the top carry is dropped.
        let mut top = MultisetSum([u64::MAX; 4]);
        top.add(MultisetSum([1, 0, 0, 0]));
        assert_eq!(top, MultisetSum::EMPTY);
        let d: [u8; 32] = std::array::from_fn(|i| i as u8);
        assert_eq!(MultisetSum::from_digest(d).to_bytes(), d);
    }

    proptest! {
        /// Adding in any order and removing any subset leaves the sum of what remains.
        #[test]
        fn the_sum_is_the_multisets(
            keys in proptest::collection::vec(any::<u16>(), 0..40),
            drop in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let leaf = |k: u16| MultisetSum::leaf(&[b"t", &k.to_le_bytes()]);
            let mut kept = MultisetSum::EMPTY;
            for k in keys.iter().rev() {
                kept.add(leaf(*k));
            }
            let mut left = Vec::new();
            for (k, d) in keys.iter().zip(&drop) {
                if *d { kept.sub(leaf(*k)) } else { left.push(*k) }
            }
            prop_assert_eq!(kept, MultisetSum::of(left.into_iter().map(leaf)));
        }
    }
}
