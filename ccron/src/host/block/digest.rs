//! [`BlockHost::digest`]: the digest of the replicated state, with the part digests kept
//! between blocks that did not change them.

use super::BlockHost;
use crate::ReservedPages;
use crate::host::app::{Application, Digest32};
use crate::state_hash::{StateHash, StateHasher};

impl<A: Application, P: ReservedPages> BlockHost<A, P> {
    /// Digest of the replicated state: the application's digest, the pages, the last agreed
    /// time, the tick gate (coalescer and replay floor), the executed requests and the
    /// counters. Equal on every honest validator after the same blocks, on every engine. (The
    /// state budget is not in it: a checkpoint changes it without a block, and what it decides,
    /// a refusal, shows in the counters.)
    ///
    /// The application's and the exactly-once table's digests are kept from the last block
    /// when it did not change them (`digest_cache`), and every part is taken with the host's
    /// hash function ([`Self::with_state_hash`]).
    pub fn digest(&self) -> Digest32 {
        self.digest_of(
            self.parts.hash,
            self.parts.app(|hash| self.app.digest_in(hash)),
            self.parts.requests(|hash| self.requests.digest_in(hash)),
        )
    }

    /// [`Self::digest`] with every part computed now, nothing kept (what the kept parts must
    /// always equal).
    pub fn digest_from_scratch(&self) -> Digest32 {
        self.digest_with(self.parts.hash)
    }

    /// The digest [`Self::digest`] would be under the hash function `hash`, computed now (e.g.
    /// the SHA-256 digest of a host that runs BLAKE3, to compare its state with another
    /// engine's or another scheme's run).
    pub fn digest_with(&self, hash: StateHash) -> Digest32 {
        self.digest_of(
            hash,
            self.app.digest_in(hash),
            self.requests.digest_in(hash),
        )
    }

    /// Recomputes the part digests a block's changes dropped.
    pub(super) fn refresh_parts(&mut self) {
        let (app, requests) = (&self.app, &self.requests);
        self.parts
            .refresh(|hash| app.digest_in(hash), |hash| requests.digest_in(hash));
    }

    /// The host's digest over the application's and the exactly-once table's part digests.
    ///
    /// Taken after every block, so its pieces reach the hasher gathered (one update per
    /// entry, the scalar counters in one) and nothing is allocated; the byte stream is the
    /// same as feeding every field on its own (`stream_is_the_field_by_field_stream`).
    fn digest_of(&self, hash: StateHash, app: Digest32, requests: Digest32) -> Digest32 {
        let mut h = StateHasher::new(hash);
        h.update(b"ccron-host-state/v2");
        h.update(app);
        match self.pages.digest_in(hash) {
            Ok(d) => h.update(d),
            // A store that cannot read its own pages: the digest says so (never equal to a
            // healthy validator's).
            Err(e) => h.update(format!("pages unreadable: {e}").as_bytes()),
        }
        h.update(self.last_agreed_ms.unwrap_or(i64::MIN).to_le_bytes());
        for (c, s, p) in self.gate.coalescer().entries() {
            h.update(entry16(c, s, p.to_le_bytes()));
        }
        h.update(b"floor");
        for (c, s, n) in self.gate.floor_entries() {
            h.update(entry16(c, s, n.to_le_bytes()));
        }
        h.update(requests);
        let mut scalars = [0u8; 56];
        for (out, v) in scalars.chunks_exact_mut(8).zip(self.counters.scalars()) {
            out.copy_from_slice(&v.to_le_bytes());
        }
        h.update(scalars);
        for (s, n) in &self.counters.ticks_by_sender {
            let mut e = [0u8; 12];
            e[..4].copy_from_slice(&s.to_le_bytes());
            e[4..].copy_from_slice(&n.to_le_bytes());
            h.update(e);
        }
        h.finalize()
    }
}

/// A tick-gate entry as the digest streams it: two little-endian `u32`s, then 8 bytes.
#[inline]
fn entry16(component: u32, sender: u32, last: [u8; 8]) -> [u8; 16] {
    let mut e = [0u8; 16];
    e[..4].copy_from_slice(&component.to_le_bytes());
    e[4..8].copy_from_slice(&sender.to_le_bytes());
    e[8..].copy_from_slice(&last);
    e
}
