//! The hash function of a host's state digest ([`StateHash`]) and its incremental hasher
//! ([`StateHasher`]).
//!
//! A host hashes its replicated state after every block ([`crate::host::BlockHost::digest`]):
//! the application's digest, the reserved pages, the exactly-once table and the host's own
//! fields, each part a digest of its own fed into the whole. The byte stream each part hashes
//! is fixed; the function that hashes it is chosen once per host
//! ([`crate::host::BlockHost::with_state_hash`]) and used for every part:
//!
//! - [`StateHash::Sha256`] (the default, every engine's and every persisted digest): SHA-256
//!   ([`crate::sha256`]); the bytes every engine compares and records.
//! - [`StateHash::Blake3`]: unkeyed BLAKE3 with a 256-bit output over the same streams, for a
//!   simulator whose cluster agrees on it (sim-bft under its `sim` signature scheme): a
//!   fraction of SHA-256's cost where SHA-256 runs in software, with the same collision
//!   resistance for what a state digest is used for (replicas comparing states). A digest
//!   taken under one function is never compared with one taken under the other.

use crate::sha256::Sha256;

/// The hash function of a state digest (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StateHash {
    /// SHA-256: the digest every engine reports, compares across engines and records.
    #[default]
    Sha256,
    /// Unkeyed BLAKE3, 256-bit output: for a simulated cluster that runs it on every replica.
    Blake3,
}

/// How many bytes a BLAKE3 [`StateHasher`] gathers before BLAKE3 sees them: most state parts
/// are smaller and are hashed in one call ([`blake3::hash`], its cheapest path).
const BLAKE3_BUFFER: usize = 2048;

/// An incremental hasher of a [`StateHash`]: `new`, `update` as often as needed, `finalize`.
/// The digest does not depend on how the input is cut into `update`s.
#[derive(Clone)]
pub struct StateHasher(Inner);

// A hasher lives on the stack of the digest that uses it (the SHA-256 variant's buffer inline,
// as `ccron::sha256` has it; the BLAKE3 variant's on the heap, so that neither scheme's hasher
// is as large as the other's buffer when it is made, moved and finalized).
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum Inner {
    Sha256(Sha256),
    Blake3(Blake3Buffered),
}

/// BLAKE3 behind a buffer: inputs up to [`BLAKE3_BUFFER`] bytes are hashed in one
/// [`blake3::hash`]; the incremental hasher (boxed: ~1.9 KB) is made only beyond that.
#[derive(Clone)]
struct Blake3Buffered {
    /// Never longer than [`BLAKE3_BUFFER`] (allocated with that capacity).
    buf: Vec<u8>,
    hasher: Option<Box<blake3::Hasher>>,
}

impl Blake3Buffered {
    fn new() -> Self {
        Self {
            buf: Vec::with_capacity(BLAKE3_BUFFER),
            hasher: None,
        }
    }

    #[inline]
    fn update(&mut self, data: &[u8]) {
        if self.buf.len() + data.len() <= BLAKE3_BUFFER {
            self.buf.extend_from_slice(data);
        } else {
            self.update_slow(data);
        }
    }

    #[inline(never)]
    fn update_slow(&mut self, data: &[u8]) {
        let hasher = self.hasher.get_or_insert_with(Box::default);
        hasher.update(&self.buf);
        self.buf.clear();
        if data.len() < BLAKE3_BUFFER {
            self.buf.extend_from_slice(data);
        } else {
            hasher.update(data);
        }
    }

    fn finalize(&mut self) -> [u8; 32] {
        match self.hasher.as_mut() {
            None => blake3::hash(&self.buf).into(),
            Some(h) => {
                h.update(&self.buf);
                h.finalize().into()
            }
        }
    }
}

impl std::fmt::Debug for StateHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StateHasher")
            .field(&self.hash())
            .finish_non_exhaustive()
    }
}

impl StateHasher {
    /// A hasher of `hash` over the empty input.
    pub fn new(hash: StateHash) -> Self {
        Self(match hash {
            StateHash::Sha256 => Inner::Sha256(Sha256::new()),
            StateHash::Blake3 => Inner::Blake3(Blake3Buffered::new()),
        })
    }

    /// Its hash function.
    pub fn hash(&self) -> StateHash {
        match self.0 {
            Inner::Sha256(_) => StateHash::Sha256,
            Inner::Blake3(_) => StateHash::Blake3,
        }
    }

    /// Appends `data` to the input.
    #[inline]
    pub fn update(&mut self, data: impl AsRef<[u8]>) {
        match &mut self.0 {
            Inner::Sha256(h) => h.update(data),
            Inner::Blake3(h) => h.update(data.as_ref()),
        }
    }

    /// The digest of everything appended.
    pub fn finalize(self) -> [u8; 32] {
        match self.0 {
            Inner::Sha256(h) => h.finalize().into(),
            Inner::Blake3(mut h) => h.finalize(),
        }
    }

    /// The digest of `data` under `hash`.
    pub fn digest(hash: StateHash, data: impl AsRef<[u8]>) -> [u8; 32] {
        let mut h = Self::new(hash);
        h.update(data);
        h.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The input cut at `cuts` (offsets taken modulo the length, sorted).
    fn pieces(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        at.push(0);
        at.push(data.len());
        at.sort_unstable();
        at.windows(2)
            .filter_map(|w| data.get(w[0]..w[1]).map(<[u8]>::to_vec))
            .collect()
    }

    #[test]
    fn sha256_is_sha256_and_blake3_is_blake3() {
        let data: Vec<u8> = (0..5_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0, 1, 63, 64, 65, 1_024, 2_047, 2_048, 2_049, 4_096, 5_000] {
            let d = &data[..len];
            assert_eq!(
                StateHasher::digest(StateHash::Sha256, d),
                <[u8; 32]>::from(Sha256::digest(d))
            );
            assert_eq!(
                StateHasher::digest(StateHash::Blake3, d),
                <[u8; 32]>::from(blake3::hash(d))
            );
        }
        assert_ne!(
            StateHasher::digest(StateHash::Sha256, b"x"),
            StateHasher::digest(StateHash::Blake3, b"x")
        );
    }

    proptest! {
        /// However the input is cut, byte by byte or across the buffer's edge, the digest is
        /// the hash function's over the whole input (a clone taken midway too).
        #[test]
        fn pieces_do_not_matter(
            data in proptest::collection::vec(any::<u8>(), 0..6_000),
            cuts in proptest::collection::vec(any::<usize>(), 0..40),
            blake in any::<bool>(),
        ) {
            let hash = if blake { StateHash::Blake3 } else { StateHash::Sha256 };
            let whole = StateHasher::digest(hash, &data);
            let parts = pieces(&data, &cuts);
            let mut h = StateHasher::new(hash);
            let mut midway = None;
            for (i, p) in parts.iter().enumerate() {
                h.update(p);
                if i == parts.len() / 2 {
                    midway = Some((h.clone(), i));
                }
            }
            prop_assert_eq!(h.finalize(), whole);
            if let Some((mut m, i)) = midway {
                for p in parts.iter().skip(i + 1) {
                    m.update(p);
                }
                prop_assert_eq!(m.finalize(), whole);
            }
            let reference: [u8; 32] = if blake {
                blake3::hash(&data).into()
            } else {
                Sha256::digest(&data).into()
            };
            prop_assert_eq!(whole, reference);
        }
    }
}
