//! Reserved pages: fixed-size pages that the host persists, checkpoints and state-transfers.
//!
//! ccron keeps everything that must survive a crash or a state transfer (periodic schedules,
//! delayed tasks, outbox records) in reserved pages. The host owns them: it includes them in its
//! checkpoint digest and ships them to a lagging replica, which then calls ccron's reload entry
//! points. Page writes happen only inside execution of a committed batch.

use std::collections::BTreeMap;

use crate::state_hash::{StateHash, StateHasher};

/// Index of a reserved page.
pub type PageId = u32;

/// A contiguous range of reserved pages `first .. first + len`, owned by one persistence user.
///
/// Every user of reserved pages inside ccron (each table's periodic schedule, later the delay
/// queue and the outbox) is given its own range, so that two users can never overwrite each
/// other's pages. [`PageAllocator`] hands out disjoint ranges deterministically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageRange {
    first: PageId,
    len: u32,
}

impl PageRange {
    /// The range `first .. first + len`, or `None` when it is empty or overflows the id space.
    pub fn new(first: PageId, len: u32) -> Option<Self> {
        if len == 0 {
            return None;
        }
        first.checked_add(len)?;
        Some(Self { first, len })
    }

    /// The first page of the range.
    pub fn first(&self) -> PageId {
        self.first
    }

    /// How many pages the range holds (at least one).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Always false: a range holds at least one page (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// One past the last page of the range.
    pub fn end(&self) -> PageId {
        // `new` checked that this does not overflow.
        self.first.saturating_add(self.len)
    }

    /// The ids of the range, ascending.
    pub fn ids(&self) -> std::ops::Range<PageId> {
        self.first..self.end()
    }

    /// Whether `id` lies in the range.
    pub fn contains(&self, id: PageId) -> bool {
        self.ids().contains(&id)
    }

    /// Whether the two ranges share at least one page.
    pub fn overlaps(&self, other: &PageRange) -> bool {
        self.first < other.end() && other.first < self.end()
    }

    /// Whether the whole range exists in `pages`.
    pub fn fits(&self, pages: &dyn ReservedPages) -> bool {
        self.end() <= pages.num_pages()
    }
}

/// Hands out disjoint [`PageRange`]s from a region of reserved pages, in request order.
///
/// Every replica must allocate the same ranges in the same order (allocation is part of the
/// identical application setup), so the allocator is a plain bump pointer with no state besides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageAllocator {
    next: PageId,
    end: PageId,
}

impl PageAllocator {
    /// An allocator over the pages `first .. first + len`.
    pub fn new(first: PageId, len: u32) -> Self {
        Self {
            next: first,
            end: first.saturating_add(len),
        }
    }

    /// The next `len` pages, or `None` when fewer remain (or `len` is zero).
    pub fn allocate(&mut self, len: u32) -> Option<PageRange> {
        let range = PageRange::new(self.next, len)?;
        if range.end() > self.end {
            return None;
        }
        self.next = range.end();
        Some(range)
    }

    /// How many pages are still free.
    pub fn remaining(&self) -> u32 {
        self.end - self.next
    }
}

/// Errors of a [`ReservedPages`] implementation.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PagesError {
    /// The page id is outside `0..num_pages`.
    #[error("page {id} is out of range (the store has {num_pages} pages)")]
    OutOfRange {
        /// The requested page.
        id: PageId,
        /// How many pages the store has.
        num_pages: u32,
    },
    /// The data is larger than a page.
    #[error("{len} bytes do not fit a page of {page_size} bytes")]
    TooLarge {
        /// Length of the rejected data.
        len: usize,
        /// The store's page size.
        page_size: usize,
    },
    /// The backing storage failed (file-backed stores).
    #[error("storage failure: {0}")]
    Io(String),
    /// Stored bytes failed their integrity check (torn or corrupt write).
    #[error("page {id} is corrupt: {reason}")]
    Corrupt {
        /// The corrupt page.
        id: PageId,
        /// What the check found.
        reason: String,
    },
    /// The page directory holds an entry the store never writes (file-backed stores): a name in
    /// the page namespace that is not the exact form the store writes, or something other than a
    /// regular file under a page name. Nothing is read through such an entry; the store refuses
    /// to open until the operator removes it.
    #[error("page directory entry {path} rejected: {problem}")]
    UnexpectedEntry {
        /// The offending entry.
        path: String,
        /// What is wrong with it.
        problem: DirEntryProblem,
    },
}

/// Why a page directory entry was rejected ([`PagesError::UnexpectedEntry`]).
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirEntryProblem {
    /// Named like a page or temp file (`page-…`) but not exactly as the store writes it
    /// (`page-<id, 10 digits>.bin` / `.tmp`): an alias such as `page-5.bin` or `page-+5.bin`.
    #[error("not a canonical page file name")]
    NonCanonicalName,
    /// A symbolic link (never followed).
    #[error("a symbolic link")]
    Symlink,
    /// A directory.
    #[error("a directory")]
    Directory,
    /// A FIFO (named pipe).
    #[error("a FIFO")]
    Fifo,
    /// A socket.
    #[error("a socket")]
    Socket,
    /// A block or character device.
    #[error("a device node")]
    Device,
    /// Some other kind of non-regular file.
    #[error("not a regular file")]
    NotRegular,
}

/// The bounds every [`ReservedPages`] store enforces: `id` within `0..num_pages`, `len` at most
/// `page_size` bytes.
pub(crate) fn check_page(
    id: PageId,
    len: usize,
    num_pages: u32,
    page_size: usize,
) -> Result<(), PagesError> {
    if id >= num_pages {
        return Err(PagesError::OutOfRange { id, num_pages });
    }
    if len > page_size {
        return Err(PagesError::TooLarge { len, page_size });
    }
    Ok(())
}

/// Fixed-size pages that the host persists, checkpoints and transfers.
///
/// A page that was never written, or was zeroed, reads as `None`. A written page reads back as
/// exactly the bytes written (which may be shorter than the page size).
pub trait ReservedPages {
    /// Size in bytes of every page.
    fn page_size(&self) -> usize;
    /// Number of pages: valid ids are `0..num_pages()`.
    fn num_pages(&self) -> u32;
    /// The content of page `id`, or `None` when it is empty.
    fn load(&self, id: PageId) -> Result<Option<&[u8]>, PagesError>;
    /// Replaces the content of page `id` with `data` (at most [`page_size`](Self::page_size) bytes).
    fn save(&mut self, id: PageId, data: &[u8]) -> Result<(), PagesError>;
    /// Empties page `id`.
    fn zero(&mut self, id: PageId) -> Result<(), PagesError>;
    /// Saves several pages as one write round, in the order given (as [`save`](Self::save)
    /// each; an empty `data` zeroes the page).
    ///
    /// A batch is not atomic as a whole: a crash may leave some of its pages written and the
    /// others not (each page old or new, never torn), so a caller makes a batch count only
    /// through a later single-page write (the commit page of ccron's layouts). The default
    /// saves page by page; a durable backend overrides it to pay its sync once per batch
    /// instead of once per page (`FilePages`: one directory sync for the batch; `RedbPages`:
    /// one transaction).
    fn save_batch(&mut self, writes: &[(PageId, &[u8])]) -> Result<(), PagesError> {
        for (id, data) in writes {
            self.save(*id, data)?;
        }
        Ok(())
    }

    /// SHA-256 over the non-empty pages in ascending id order (id as 4 little-endian bytes,
    /// length as 8, then the bytes): the pages' part of a host's state digest, computed after
    /// every block. The default loads every id; a store that knows which pages it holds
    /// overrides it to visit only those ([`MemPages`]), with the same bytes.
    ///
    /// Every byte is hashed every time: the digest is one SHA-256 stream in page order, and a
    /// replica rewrites its agreed-time page (the first) at every block, so no prefix of the
    /// stream repeats between two blocks.
    fn digest(&self) -> Result<[u8; 32], PagesError> {
        self.digest_in(StateHash::Sha256)
    }

    /// The same stream as [`Self::digest`] under the hash function `hash` (a host's
    /// [`StateHash`]); `digest_in(StateHash::Sha256)` is [`Self::digest`].
    fn digest_in(&self, hash: StateHash) -> Result<[u8; 32], PagesError> {
        let mut h = StateHasher::new(hash);
        for id in 0..self.num_pages() {
            if let Some(data) = self.load(id)?
                && !data.is_empty()
            {
                h.update(id.to_le_bytes());
                h.update((data.len() as u64).to_le_bytes());
                h.update(data);
            }
        }
        Ok(h.finalize())
    }
}

/// An in-memory [`ReservedPages`], as a host that checkpoints its own state would keep them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemPages {
    page_size: usize,
    num_pages: u32,
    pages: BTreeMap<PageId, Vec<u8>>,
}

impl MemPages {
    /// An empty store of `num_pages` pages of `page_size` bytes.
    pub fn new(page_size: usize, num_pages: u32) -> Self {
        Self {
            page_size,
            num_pages,
            pages: BTreeMap::new(),
        }
    }

    /// The non-empty pages in ascending id order (what a checkpoint or a state transfer carries).
    pub fn snapshot(&self) -> Vec<(PageId, Vec<u8>)> {
        self.pages
            .iter()
            .map(|(id, data)| (*id, data.clone()))
            .collect()
    }

    /// Replaces every page with `pages` (the receiving side of a state transfer).
    ///
    /// Validates everything before changing anything: on error the store is unchanged.
    pub fn restore(&mut self, pages: &[(PageId, Vec<u8>)]) -> Result<(), PagesError> {
        for (id, data) in pages {
            self.check(*id, data.len())?;
        }
        self.pages = pages
            .iter()
            .filter(|(_, data)| !data.is_empty())
            .map(|(id, data)| (*id, data.clone()))
            .collect();
        Ok(())
    }

    /// SHA-256 over the non-empty pages in ascending id order (id, length, bytes): the same
    /// bytes as [`ReservedPages::digest`], which this store implements with it.
    pub fn digest(&self) -> [u8; 32] {
        self.digest_in(StateHash::Sha256)
    }

    /// [`MemPages::digest`]'s stream under the hash function `hash`.
    pub fn digest_in(&self, hash: StateHash) -> [u8; 32] {
        let mut h = StateHasher::new(hash);
        for (id, data) in &self.pages {
            h.update(id.to_le_bytes());
            h.update((data.len() as u64).to_le_bytes());
            h.update(data);
        }
        h.finalize()
    }

    fn check(&self, id: PageId, len: usize) -> Result<(), PagesError> {
        check_page(id, len, self.num_pages, self.page_size)
    }
}

impl ReservedPages for MemPages {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn num_pages(&self) -> u32 {
        self.num_pages
    }

    fn load(&self, id: PageId) -> Result<Option<&[u8]>, PagesError> {
        self.check(id, 0)?;
        Ok(self.pages.get(&id).map(Vec::as_slice))
    }

    fn save(&mut self, id: PageId, data: &[u8]) -> Result<(), PagesError> {
        self.check(id, data.len())?;
        if data.is_empty() {
            self.pages.remove(&id);
        } else if let Some(page) = self.pages.get_mut(&id) {
            // Overwriting reuses the page's buffer: no allocation, no fresh memory to fault in.
            page.clear();
            page.extend_from_slice(data);
        } else {
            self.pages.insert(id, data.to_vec());
        }
        Ok(())
    }

    fn zero(&mut self, id: PageId) -> Result<(), PagesError> {
        self.check(id, 0)?;
        self.pages.remove(&id);
        Ok(())
    }

    /// Visits only the pages it holds (no load of each of the `num_pages` ids).
    fn digest(&self) -> Result<[u8; 32], PagesError> {
        Ok(MemPages::digest(self))
    }

    fn digest_in(&self, hash: StateHash) -> Result<[u8; 32], PagesError> {
        Ok(MemPages::digest_in(self, hash))
    }
}

/// A page store that crashes after a number of writes, for crash-atomicity tests of anything
/// persisted in reserved pages (a cron table's schedule, a schedule book, an outbox): it records
/// every write (saves and zeroes alike) and fails each write after the first `budget` ones with
/// [`PagesError::Io`], leaving `inner` exactly as a crash between two page writes would.
///
/// Run the persist once with `budget = usize::MAX` to learn how many writes it makes, then
/// once per `k` below that with `budget = k`, and reload from `inner` each time.
#[derive(Debug, Clone)]
pub struct CrashAfter<P> {
    /// The store written through.
    pub inner: P,
    /// The pages written so far, in order (failed writes are not recorded).
    pub writes: Vec<PageId>,
    /// How many writes succeed before the crash.
    pub budget: usize,
}

impl<P> CrashAfter<P> {
    /// `inner`, crashing after `budget` writes.
    pub fn new(inner: P, budget: usize) -> Self {
        Self {
            inner,
            writes: Vec::new(),
            budget,
        }
    }

    fn write(&mut self, id: PageId) -> Result<(), PagesError> {
        if self.writes.len() >= self.budget {
            return Err(PagesError::Io(format!("crashed before writing page {id}")));
        }
        self.writes.push(id);
        Ok(())
    }
}

impl<P: ReservedPages> ReservedPages for CrashAfter<P> {
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }
    fn num_pages(&self) -> u32 {
        self.inner.num_pages()
    }
    fn load(&self, id: PageId) -> Result<Option<&[u8]>, PagesError> {
        self.inner.load(id)
    }
    fn save(&mut self, id: PageId, data: &[u8]) -> Result<(), PagesError> {
        self.write(id)?;
        self.inner.save(id, data)
    }
    fn zero(&mut self, id: PageId) -> Result<(), PagesError> {
        self.write(id)?;
        self.inner.zero(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_after_fails_every_write_past_its_budget_and_leaves_the_rest() {
        let mut p = CrashAfter::new(MemPages::new(8, 4), 2);
        p.save(0, b"a").unwrap();
        p.zero(1).unwrap();
        assert!(matches!(p.save(2, b"c"), Err(PagesError::Io(_))));
        assert!(matches!(p.zero(0), Err(PagesError::Io(_))));
        assert_eq!(p.writes, vec![0, 1]);
        assert_eq!(p.load(0), Ok(Some(&b"a"[..])));
        assert_eq!(p.inner.load(2), Ok(None));
    }

    #[test]
    fn save_load_zero_and_bounds() {
        let mut p = MemPages::new(8, 2);
        assert_eq!(p.load(0), Ok(None));
        p.save(1, b"abc").unwrap();
        assert_eq!(p.load(1), Ok(Some(&b"abc"[..])));
        assert_eq!(
            p.save(2, b"x"),
            Err(PagesError::OutOfRange {
                id: 2,
                num_pages: 2
            })
        );
        assert_eq!(
            p.save(0, &[0; 9]),
            Err(PagesError::TooLarge {
                len: 9,
                page_size: 8
            })
        );
        let before = p.digest();
        let snap = p.snapshot();
        p.zero(1).unwrap();
        assert_eq!(p.load(1), Ok(None));
        assert_ne!(p.digest(), before);
        p.restore(&snap).unwrap();
        assert_eq!(p.digest(), before);
    }

    /// `MemPages`' digest (its own pages only) is the trait's default walk over every id, byte
    /// for byte, whatever was written, overwritten or zeroed (`CrashAfter` keeps the default).
    #[test]
    fn mem_pages_digest_is_the_default_walk() {
        let mut mem = MemPages::new(64, 16);
        let mut walk = CrashAfter::new(MemPages::new(64, 16), usize::MAX);
        let empty = crate::sha256::Sha256::new().finalize();
        assert_eq!(ReservedPages::digest(&mem), Ok(empty.into()));
        for step in 0u32..200 {
            let id = step.wrapping_mul(7) % 16;
            let len = (step.wrapping_mul(13) % 70).min(64) as usize;
            let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ step) as u8).collect();
            if step % 5 == 0 {
                mem.zero(id).unwrap();
                walk.zero(id).unwrap();
            } else {
                mem.save(id, &data).unwrap();
                walk.save(id, &data).unwrap();
            }
            let got = ReservedPages::digest(&mem).unwrap();
            assert_eq!(got, ReservedPages::digest(&walk).unwrap(), "step {step}");
            let blake = ReservedPages::digest_in(&mem, StateHash::Blake3).unwrap();
            assert_eq!(
                blake,
                ReservedPages::digest_in(&walk, StateHash::Blake3).unwrap(),
                "step {step}"
            );
            assert_ne!(blake, got);
            assert_eq!(got, mem.digest(), "step {step}");
        }
    }
}
