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
//!   taken under one function is never compared with one taken under the other. Its input
//!   buffer is reused from one hasher to the next on a thread (scratch memory, emptied: no
//!   state passes), so a digest allocates nothing.

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
///
/// The buffer is taken from this thread's spare buffers ([`SPARE`]) and given back when the
/// hasher is finalized or dropped, so a digest allocates nothing once a thread has hashed once
/// (a host takes several part digests after every block).
struct Blake3Buffered {
    /// Never longer than [`BLAKE3_BUFFER`] (allocated with that capacity).
    buf: Vec<u8>,
    hasher: Option<Box<blake3::Hasher>>,
}

/// Most spare buffers a thread keeps: as many BLAKE3 hashers as are ever open at once on one
/// thread (a part digest taken inside another: host, ledger, its key-value part, ...).
const SPARE_BUFFERS: usize = 8;

thread_local! {
    /// Emptied BLAKE3 buffers of finished hashers, each of capacity [`BLAKE3_BUFFER`]. Scratch
    /// memory only: a buffer is empty when it is kept and when it is taken, so nothing passes
    /// between hashers (or between the replicas a thread runs) but the allocation.
    static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An empty buffer of capacity [`BLAKE3_BUFFER`]: a spare one, or a new one.
fn take_buffer() -> Vec<u8> {
    SPARE
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
        .ok()
        .flatten()
        .unwrap_or_else(|| Vec::with_capacity(BLAKE3_BUFFER))
}

/// Keeps `buf` (emptied) for the next hasher, up to [`SPARE_BUFFERS`] (dropped otherwise, or
/// while the thread is ending).
fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() != BLAKE3_BUFFER {
        return;
    }
    buf.clear();
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut()
            && s.len() < SPARE_BUFFERS
        {
            s.push(buf);
        }
    });
}

impl Clone for Blake3Buffered {
    fn clone(&self) -> Self {
        let mut buf = take_buffer();
        buf.extend_from_slice(&self.buf);
        Self {
            buf,
            hasher: self.hasher.clone(),
        }
    }
}

impl Drop for Blake3Buffered {
    fn drop(&mut self) {
        give_back(std::mem::take(&mut self.buf));
    }
}

impl Blake3Buffered {
    fn new() -> Self {
        Self {
            buf: take_buffer(),
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

    /// Published vectors, not this code's own output: BLAKE3's official test vectors
    /// (`test_vectors.json` of the BLAKE3 repository: input byte `i` is `i % 251`, the first 32
    /// bytes of `hash`) and SHA-256 of the same inputs (Python's `hashlib`), on both sides of
    /// the buffer's edge.
    const VECTORS: [(usize, &str, &str); 8] = [
        (
            0,
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ),
        (
            1,
            "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213",
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        ),
        (
            1023,
            "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11",
            "1c5e88a585b61754df6137d66632a7348557a88358afc401b0a0a4fc427104a9",
        ),
        (
            1024,
            "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7",
            "2bce1ba628720664be4b9fdd77aae0678e5f0f3f02fc6ff641ec879094f6a404",
        ),
        (
            1025,
            "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444",
            "bc0b6b10b89b9487a12fda2a8cc13194e7091c217aabf8b92846274026f4bcd0",
        ),
        (
            2048,
            "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a",
            "b2a8170614e23194ae2951423d601987f518ce2f11205d7b0b708080103b9f76",
        ),
        (
            2049,
            "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030",
            "26e1e2808e3a6cf967ca03f6749a063c5ed55f92f5874653a1faabed78346f00",
        ),
        (
            4097,
            "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995",
            "a16560d668b843fb3be99ace41dbd18471f342bd3255a1d21204b35e43f74436",
        ),
    ];

    fn hex(d: [u8; 32]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The published digests, whole and in pieces, with hashers open inside each other,
    /// cloned, dropped unfinished and finished in any order, so that every buffer is reused
    /// (the spare buffers pass nothing between hashers but memory).
    #[test]
    fn reused_buffers_give_the_published_digests() {
        let input = |n: usize| (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
        for round in 0..3 {
            for (n, blake, sha) in VECTORS {
                let data = input(n);
                assert_eq!(
                    hex(StateHasher::digest(StateHash::Blake3, &data)),
                    blake,
                    "{n}"
                );
                assert_eq!(
                    hex(StateHasher::digest(StateHash::Sha256, &data)),
                    sha,
                    "{n}"
                );
                // A hasher left holding bytes, dropped unfinished: its buffer comes back empty.
                let mut dropped = StateHasher::new(StateHash::Blake3);
                dropped.update(&data);
                drop(dropped);
                // Nested: an outer hasher open while inner ones are made, cloned and finished.
                let mut outer = StateHasher::new(StateHash::Blake3);
                for piece in data.chunks(1 + round * 7 + n % 13) {
                    let mut inner = StateHasher::new(StateHash::Blake3);
                    inner.update(piece);
                    let twin = inner.clone();
                    assert_eq!(inner.finalize(), twin.finalize());
                    outer.update(piece);
                }
                let copy = outer.clone();
                assert_eq!(hex(outer.finalize()), blake, "{n} in pieces");
                assert_eq!(hex(copy.finalize()), blake, "{n} cloned");
            }
        }
        // Never more spare buffers than the bound, each empty and of the buffer's size.
        SPARE.with(|s| {
            let s = s.borrow();
            assert!(s.len() <= SPARE_BUFFERS);
            assert!(
                s.iter()
                    .all(|b| b.is_empty() && b.capacity() == BLAKE3_BUFFER)
            );
        });
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
