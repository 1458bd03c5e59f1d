//! SHA-256 for the digests computed on every block (the host's state digest, the reserved
//! pages, the exactly-once table, the ledgers' digests): the same function and the same bytes
//! as `sha2::Sha256`, computed faster on x86-64 CPUs without the SHA extensions.
//!
//! A replica hashes its whole replicated state after every block, in many small pieces (ids,
//! lengths and counters of 4 or 8 bytes, pages of a few hundred). On a CPU without SHA
//! instructions the `sha2` crate runs its portable compression function; `ring`'s
//! (OpenSSL-derived, AVX/SSSE3 picked at run time, SHA instructions where present) takes about
//! half the time per block on such a CPU. Its per-call cost is higher, so small pieces are
//! gathered in a buffer here first and handed over in runs of whole blocks.
//!
//! The output is SHA-256 (FIPS 180-4) whatever the CPU: every digest ccron records or compares
//! (state digests across engines, persisted snapshots, traces) is unchanged. The tests check it
//! against `sha2` over random inputs cut into random pieces.

/// How many bytes are gathered before `ring` sees them (a multiple of the 64-byte block).
const BUFFER: usize = 256;

/// A SHA-256 digest: `.into()` gives the 32 bytes (as `sha2`'s output does, so code written
/// for `sha2` reads the same), and it can be fed to another hasher as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Output([u8; 32]);

impl From<Output> for [u8; 32] {
    fn from(d: Output) -> Self {
        d.0
    }
}

impl AsRef<[u8]> for Output {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::Deref for Output {
    type Target = [u8; 32];
    fn deref(&self) -> &[u8; 32] {
        &self.0
    }
}

/// An incremental SHA-256 hasher: `new`, `update` as often as needed, `finalize`.
///
/// The same bytes as `sha2::Sha256` for the same input, however it is cut into `update`s.
#[derive(Clone)]
pub struct Sha256 {
    ctx: ring::digest::Context,
    buf: [u8; BUFFER],
    len: usize,
}

impl std::fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sha256")
            .field("buffered", &self.len)
            .finish_non_exhaustive()
    }
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    /// A hasher over the empty input.
    pub fn new() -> Self {
        Self {
            ctx: ring::digest::Context::new(&ring::digest::SHA256),
            buf: [0; BUFFER],
            len: 0,
        }
    }

    /// Appends `data` to the input.
    #[inline]
    pub fn update(&mut self, data: impl AsRef<[u8]>) {
        let data = data.as_ref();
        match self.buf.get_mut(self.len..self.len + data.len()) {
            Some(room) => {
                room.copy_from_slice(data);
                self.len += data.len();
            }
            None => self.update_slow(data),
        }
    }

    /// `update` for data that does not fit in what is left of the buffer: the buffer goes to
    /// `ring`, then the data (straight, or into the emptied buffer when it is small).
    #[inline(never)]
    fn update_slow(&mut self, data: &[u8]) {
        self.flush();
        match self.buf.get_mut(..data.len()) {
            Some(room) if data.len() < BUFFER => {
                room.copy_from_slice(data);
                self.len = data.len();
            }
            _ => self.ctx.update(data),
        }
    }

    fn flush(&mut self) {
        if let Some(pending) = self.buf.get(..self.len) {
            self.ctx.update(pending);
        }
        self.len = 0;
    }

    /// The SHA-256 digest of everything appended.
    pub fn finalize(mut self) -> Output {
        self.flush();
        let digest = self.ctx.finish();
        let mut out = [0u8; 32];
        // SHA-256's output is 32 bytes; zip stops at the shorter side in any case.
        for (o, d) in out.iter_mut().zip(digest.as_ref()) {
            *o = *d;
        }
        Output(out)
    }

    /// The SHA-256 digest of `data`.
    pub fn digest(data: impl AsRef<[u8]>) -> Output {
        let mut h = Self::new();
        h.update(data);
        h.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sha2::Digest as _;

    fn reference(pieces: &[Vec<u8>]) -> [u8; 32] {
        let mut h = sha2::Sha256::new();
        for p in pieces {
            h.update(p);
        }
        h.finalize().into()
    }

    fn ours(pieces: &[Vec<u8>]) -> [u8; 32] {
        let mut h = Sha256::new();
        for p in pieces {
            h.update(p);
        }
        h.finalize().into()
    }

    #[test]
    fn known_answers() {
        // FIPS 180-4 examples.
        let hex = |d: Output| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(Sha256::digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(Sha256::digest(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    /// Every length around the buffer's and the block's edges, in one piece and byte by byte.
    #[test]
    fn every_edge_length_matches_sha2() {
        for len in 0..(3 * BUFFER + 70) {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            let whole = std::slice::from_ref(&data);
            assert_eq!(ours(whole), reference(whole));
            let bytes: Vec<Vec<u8>> = data.iter().map(|b| vec![*b]).collect();
            assert_eq!(ours(&bytes), reference(&bytes), "len {len}");
        }
    }

    proptest! {
        /// Any input, cut into any pieces (empty, tiny, around and beyond the buffer), gives
        /// `sha2`'s digest; a clone taken midway goes on to the same digest.
        #[test]
        fn matches_sha2_for_any_cutting(
            pieces in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..9),
                    proptest::collection::vec(any::<u8>(), 0..80),
                    proptest::collection::vec(any::<u8>(), 200..700),
                ],
                0..40,
            ),
            cut in any::<prop::sample::Index>(),
        ) {
            prop_assert_eq!(ours(&pieces), reference(&pieces));
            let at = if pieces.is_empty() { 0 } else { cut.index(pieces.len()) };
            let mut h = Sha256::new();
            for p in &pieces[..at] {
                h.update(p);
            }
            let mut copy = h.clone();
            for p in &pieces[at..] {
                h.update(p);
                copy.update(p);
            }
            prop_assert_eq!(<[u8; 32]>::from(copy.finalize()), reference(&pieces));
            prop_assert_eq!(<[u8; 32]>::from(h.finalize()), reference(&pieces));
        }
    }
}
