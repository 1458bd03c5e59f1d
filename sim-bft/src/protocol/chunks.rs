//! Chunked snapshot digests: the digest that 2f+1 replicas sign for a checkpoint commits to a
//! Merkle root over fixed-size chunks of the snapshot, so a state-transfer receiver verifies
//! every chunk on arrival, from any source, with the chunk's sibling path.
//!
//! Leaves are `H(0x00 || chunk)`, padded with all-zero digests up to a power of two; inner
//! nodes are `H(0x01 || left || right)`; the checkpoint digest is
//! `H(0x02 || total_len || chunk_bytes || root)` (little-endian u64s). An empty snapshot has
//! one empty chunk.

use sha2::{Digest, Sha256};

use crate::crypto::Digest32;

fn leaf(data: &[u8]) -> Digest32 {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

fn node(left: &Digest32, right: &Digest32) -> Digest32 {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The checkpoint digest of a snapshot of `total_len` bytes in `chunk_bytes` chunks whose
/// Merkle root is `root`.
pub fn digest_from_root(total_len: u64, chunk_bytes: usize, root: &Digest32) -> Digest32 {
    let mut h = Sha256::new();
    h.update([2u8]);
    h.update(total_len.to_le_bytes());
    h.update((chunk_bytes as u64).to_le_bytes());
    h.update(root);
    h.finalize().into()
}

/// How many chunks a snapshot of `total_len` bytes has (at least one), or `None` when that
/// does not fit a `u32`.
pub fn chunk_count(total_len: u64, chunk_bytes: usize) -> Option<u32> {
    let c = total_len.div_ceil(chunk_bytes.max(1) as u64).max(1);
    u32::try_from(c).ok()
}

/// The length chunk `index` of a snapshot of `total_len` bytes must have.
pub fn chunk_len(total_len: u64, chunk_bytes: usize, index: u32) -> u64 {
    let start = u64::from(index).saturating_mul(chunk_bytes as u64);
    total_len.saturating_sub(start).min(chunk_bytes as u64)
}

/// The Merkle tree over a snapshot's chunks (kept by a source while it serves them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkTree {
    /// `levels[0]` are the (padded) leaves, the last level is the root alone.
    levels: Vec<Vec<Digest32>>,
    total_len: u64,
    chunk_bytes: usize,
}

impl ChunkTree {
    /// Builds the tree of `bytes` cut into `chunk_bytes` chunks.
    pub fn new(bytes: &[u8], chunk_bytes: usize) -> Self {
        let chunk_bytes = chunk_bytes.max(1);
        let mut leaves: Vec<Digest32> = bytes.chunks(chunk_bytes).map(leaf).collect();
        if leaves.is_empty() {
            leaves.push(leaf(&[]));
        }
        leaves.resize(leaves.len().next_power_of_two(), [0u8; 32]);
        let mut levels = vec![leaves];
        while let Some(last) = levels.last()
            && last.len() > 1
        {
            let up = last
                .chunks(2)
                .map(|p| node(&p[0], &p[p.len() - 1]))
                .collect();
            levels.push(up);
        }
        Self {
            levels,
            total_len: bytes.len() as u64,
            chunk_bytes,
        }
    }

    /// The Merkle root.
    pub fn root(&self) -> Digest32 {
        self.levels
            .last()
            .and_then(|l| l.first())
            .copied()
            .unwrap_or([0u8; 32])
    }

    /// The checkpoint digest (commits to the root, the length and the chunk size).
    pub fn digest(&self) -> Digest32 {
        digest_from_root(self.total_len, self.chunk_bytes, &self.root())
    }

    /// The sibling path of chunk `index`, leaf level first (empty if out of range).
    pub fn path(&self, index: u32) -> Vec<Digest32> {
        let mut i = index as usize;
        if self.levels.first().is_none_or(|l| i >= l.len()) {
            return Vec::new();
        }
        let mut path = Vec::with_capacity(self.levels.len());
        for level in &self.levels[..self.levels.len() - 1] {
            path.push(level.get(i ^ 1).copied().unwrap_or([0u8; 32]));
            i /= 2;
        }
        path
    }
}

/// The checkpoint digest of `bytes` cut into `chunk_bytes` chunks.
pub fn snapshot_digest(bytes: &[u8], chunk_bytes: usize) -> Digest32 {
    ChunkTree::new(bytes, chunk_bytes).digest()
}

/// Whether `data` is chunk `index` of `chunks` under `root`, by its sibling `path`.
pub fn verify_chunk(
    root: &Digest32,
    index: u32,
    chunks: u32,
    data: &[u8],
    path: &[Digest32],
) -> bool {
    let width = (chunks.max(1) as usize).next_power_of_two();
    if index >= chunks || path.len() != width.trailing_zeros() as usize {
        return false;
    }
    let mut i = index as usize;
    let mut h = leaf(data);
    for sib in path {
        h = if i.is_multiple_of(2) {
            node(&h, sib)
        } else {
            node(sib, &h)
        };
        i /= 2;
    }
    h == *root
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_chunk_verifies_and_a_flipped_bit_does_not(
            len in 0usize..2_000, chunk in 1usize..300, pick in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let tree = ChunkTree::new(&bytes, chunk);
            let chunks = chunk_count(len as u64, chunk).unwrap();
            prop_assert_eq!(tree.digest(), snapshot_digest(&bytes, chunk));
            prop_assert_eq!(digest_from_root(len as u64, chunk, &tree.root()), tree.digest());
            let parts: Vec<&[u8]> = if bytes.is_empty() { vec![&[]] } else { bytes.chunks(chunk).collect() };
            prop_assert_eq!(parts.len(), chunks as usize);
            for (i, part) in parts.iter().enumerate() {
                let i = i as u32;
                prop_assert_eq!(part.len() as u64, chunk_len(len as u64, chunk, i));
                prop_assert!(verify_chunk(&tree.root(), i, chunks, part, &tree.path(i)));
            }
            let i = pick.index(parts.len());
            let mut bad = parts[i].to_vec();
            if let Some(b) = bad.first_mut() {
                *b ^= 1 << bit;
                prop_assert!(!verify_chunk(&tree.root(), i as u32, chunks, &bad, &tree.path(i as u32)));
            }
            // A chunk presented at another index does not verify (unless identical content).
            let j = (i + 1) % parts.len();
            if parts[j] != parts[i] {
                prop_assert!(!verify_chunk(&tree.root(), j as u32, chunks, parts[i], &tree.path(i as u32)));
            }
        }
    }

    #[test]
    fn digest_commits_to_length_and_chunk_size() {
        let bytes = vec![5u8; 100];
        assert_ne!(snapshot_digest(&bytes, 10), snapshot_digest(&bytes, 20));
        assert_ne!(
            snapshot_digest(&bytes, 10),
            snapshot_digest(&bytes[..99], 10)
        );
        assert!(!verify_chunk(&[0; 32], 3, 3, &[], &[]));
    }
}
