//! The part digests a [`BlockHost`](super::BlockHost) keeps between blocks, so that its state
//! digest costs what changed in the block rather than the whole state.
//!
//! The host's digest ([`BlockHost::digest`](super::BlockHost::digest)) is one stream over
//! per-part digests (the application's, the pages', the exactly-once table's) and the host's own
//! small fields. A part that did not change since the last block has the digest it had then:
//! the host keeps the application's and the exactly-once table's here and recomputes one only
//! after something that may have changed it:
//!
//! | part | changed by (the host marks it) |
//! |---|---|
//! | application | an executed request, an evaluated tick, `restore`, `reload`, `app_mut` |
//! | exactly-once table | any ordered request (admitted or not), `restore`, `with_requests` |
//!
//! (The pages are not kept: sim-bft rewrites its agreed-time page at every block, and a store
//! may be written through `pages_mut`.) What is kept is exactly what a from-scratch computation
//! gives (the tests of `BlockHost` compare both after random blocks, restores and reloads), so
//! the digest's bytes are the same with or without it, under every [`StateHash`].

use super::app::Digest32;
use crate::state_hash::StateHash;

/// The kept part digests of one host, each `None` until recomputed after a change.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartDigests {
    /// The hash function every part and the whole are taken with.
    pub(crate) hash: StateHash,
    app: Option<Digest32>,
    requests: Option<Digest32>,
}

impl PartDigests {
    /// Nothing kept, under `hash`.
    pub(crate) fn new(hash: StateHash) -> Self {
        Self {
            hash,
            app: None,
            requests: None,
        }
    }

    /// The application may have changed.
    #[inline]
    pub(crate) fn app_changed(&mut self) {
        self.app = None;
    }

    /// The exactly-once table may have changed.
    #[inline]
    pub(crate) fn requests_changed(&mut self) {
        self.requests = None;
    }

    /// Anything may have changed (a restore, a new hash function).
    pub(crate) fn all_changed(&mut self) {
        self.app = None;
        self.requests = None;
    }

    /// Recomputes what is not kept (after a block, before its digest).
    pub(crate) fn refresh(
        &mut self,
        app: impl FnOnce(StateHash) -> Digest32,
        requests: impl FnOnce(StateHash) -> Digest32,
    ) {
        let hash = self.hash;
        if self.app.is_none() {
            self.app = Some(app(hash));
        }
        if self.requests.is_none() {
            self.requests = Some(requests(hash));
        }
    }

    /// The application's digest: kept, or computed now (not kept: `&self`).
    #[inline]
    pub(crate) fn app(&self, compute: impl FnOnce(StateHash) -> Digest32) -> Digest32 {
        self.app.unwrap_or_else(|| compute(self.hash))
    }

    /// The exactly-once table's digest: kept, or computed now (not kept).
    #[inline]
    pub(crate) fn requests(&self, compute: impl FnOnce(StateHash) -> Digest32) -> Digest32 {
        self.requests.unwrap_or_else(|| compute(self.hash))
    }
}
