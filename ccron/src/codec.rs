//! The one codec for everything ccron persists in reserved pages.
//!
//! A value is encoded with bincode 2 (fixed-width little-endian integers, so that the size of a
//! record does not depend on its value) into a *blob*, and the blob is cut into chunks, one per
//! page of the user's [`PageRange`]. Every page carries a 32-byte header:
//!
//! ```text
//! offset size field
//!      0    4 magic "CCRN"
//!      4    2 format version (FORMAT_VERSION)
//!      6    2 kind: which record type the blob holds (a misconfigured range is caught here)
//!      8    4 index of this page in the blob, 0-based
//!     12    4 number of pages of the blob
//!     16    4 total blob length in bytes
//!     20    4 length of this page's chunk
//!     24    4 CRC-32 of the whole blob (equal on every page of one write)
//!     28    4 CRC-32 of bytes 0..28 and of the chunk
//! ```
//!
//! Every byte of a page is covered by the page CRC (CRC-32 detects every single-byte error and
//! every burst up to 32 bits), a page of another write is caught by the blob CRC, and a torn
//! multi-page write (some pages new, some old) fails the blob CRC. Decoding checks every length
//! against the range and against [`MAX_BLOB_BYTES`] before allocating, so hostile bytes (a
//! Byzantine state-transfer source, a corrupt disk) give a typed [`CodecError`], never a panic and
//! never an unbounded allocation.
//!
//! bincode stays behind this module: swapping it means changing this file and bumping
//! [`FORMAT_VERSION`].

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};

use crate::pages::{PageId, PageRange, PagesError, ReservedPages};

/// Version of the page and blob format. Bumped on any incompatible change.
pub const FORMAT_VERSION: u16 = 1;

/// Magic bytes at the start of every ccron page.
pub const MAGIC: [u8; 4] = *b"CCRN";

/// Size in bytes of the header at the start of every page.
pub const HEADER_BYTES: usize = 32;

/// Hard ceiling on the size of one encoded value (64 MiB), whatever the range could hold.
///
/// It bounds what a decoder may allocate from a length field it has not yet verified.
pub const MAX_BLOB_BYTES: usize = 64 << 20;

/// What kind of record a blob holds; stored in every page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum BlobKind {
    /// The periodic schedule of one cron table in table layout 1 (one blob or alternate halves);
    /// table layout 3 reads it and its next save migrates it (`table_store.rs`).
    PeriodicSchedule,
    /// The schedule book of a [`crate::schedule::Scheduler`]: its meta page and zone rules.
    ScheduleBook,
    /// One record page of a schedule book (a single-page blob of records).
    BookRecords,
    /// The journal a schedule book of layouts 2 to 4 wrote before its pages (read, and
    /// migrated by the next save, by layout 6: `schedule/book/legacy.rs`).
    BookJournal,
    /// A replicated [`crate::outbox::Outbox`] ([`crate::outbox::Outbox::save`]).
    Outbox,
    /// A segment of a schedule book's change log (book layouts 5 and 6, `record_log.rs`).
    BookLog,
    /// The commit page of a cron table's schedule (table layouts 2 and 3, `table_store.rs`).
    TableCommit,
    /// A blob of a cron table's change log (table layouts 2 and 3).
    TableLog,
    /// A record page of a cron table's schedule (table layouts 2 and 3).
    TableRecords,
    /// A kind this version does not know (read from a page written by a newer version).
    Unknown(u16),
}

impl BlobKind {
    fn to_u16(self) -> u16 {
        match self {
            BlobKind::PeriodicSchedule => 1,
            BlobKind::ScheduleBook => 2,
            BlobKind::BookRecords => 3,
            BlobKind::BookJournal => 4,
            BlobKind::BookLog => 5,
            // Numbered apart from the schedule book's kinds, which may grow.
            BlobKind::Outbox => 16,
            // Cron tables' layout 2, apart from the book's and the outbox's kinds.
            BlobKind::TableCommit => 32,
            BlobKind::TableLog => 33,
            BlobKind::TableRecords => 34,
            BlobKind::Unknown(k) => k,
        }
    }

    fn from_u16(k: u16) -> Self {
        match k {
            1 => BlobKind::PeriodicSchedule,
            2 => BlobKind::ScheduleBook,
            3 => BlobKind::BookRecords,
            4 => BlobKind::BookJournal,
            5 => BlobKind::BookLog,
            16 => BlobKind::Outbox,
            32 => BlobKind::TableCommit,
            33 => BlobKind::TableLog,
            34 => BlobKind::TableRecords,
            other => BlobKind::Unknown(other),
        }
    }
}

/// Errors of encoding to or decoding from reserved pages.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    /// The reserved pages themselves failed.
    #[error("reserved pages: {0}")]
    Pages(#[from] PagesError),
    /// The range does not exist in the store (it ends past `num_pages`).
    #[error("page range {first}..{end} does not fit a store of {num_pages} pages")]
    RangeOutOfStore {
        /// First page of the range.
        first: PageId,
        /// One past the last page of the range.
        end: PageId,
        /// Pages in the store.
        num_pages: u32,
    },
    /// The pages are too small to hold a header and at least one byte.
    #[error("page size {page_size} cannot hold a {HEADER_BYTES}-byte header and data")]
    PageTooSmall {
        /// The store's page size.
        page_size: usize,
    },
    /// The encoded value does not fit the range or exceeds [`MAX_BLOB_BYTES`].
    #[error("encoded value of {len} bytes exceeds the capacity of {capacity} bytes")]
    TooLarge {
        /// Length of the encoded value.
        len: usize,
        /// What the range (or the hard ceiling) can hold.
        capacity: usize,
    },
    /// bincode refused to encode the value.
    #[error("encoding failed: {0}")]
    Encode(String),
    /// A page failed its integrity checks (torn write, corruption, foreign data).
    #[error("page {page} is corrupt: {reason}")]
    Corrupt {
        /// The offending page.
        page: PageId,
        /// What the check found.
        reason: String,
    },
    /// A page was written by an unknown format version.
    #[error("page {page} has format version {found}, this build reads {FORMAT_VERSION}")]
    Version {
        /// The offending page.
        page: PageId,
        /// The version found.
        found: u16,
    },
    /// The pages hold a different kind of record than expected (overlapping ranges?).
    #[error("page {page} holds {found:?}, expected {expected:?}")]
    WrongKind {
        /// The offending page.
        page: PageId,
        /// The kind found.
        found: BlobKind,
        /// The kind asked for.
        expected: BlobKind,
    },
    /// The blob passed every checksum but does not decode as the expected type.
    #[error("blob does not decode: {0}")]
    Decode(String),
}

type BlobConfig = Configuration<LittleEndian, Fixint, Limit<MAX_BLOB_BYTES>>;

fn config() -> BlobConfig {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_BLOB_BYTES>()
}

/// Encodes `value` to bytes (the blob format, without page headers).
pub fn to_blob<T: bincode::Encode>(value: &T) -> Result<Vec<u8>, CodecError> {
    let blob =
        bincode::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))?;
    if blob.len() > MAX_BLOB_BYTES {
        return Err(CodecError::TooLarge {
            len: blob.len(),
            capacity: MAX_BLOB_BYTES,
        });
    }
    Ok(blob)
}

/// Decodes a blob produced by [`to_blob`]; trailing bytes are an error.
pub fn from_blob<T: bincode::Decode<()>>(blob: &[u8]) -> Result<T, CodecError> {
    if blob.len() > MAX_BLOB_BYTES {
        return Err(CodecError::TooLarge {
            len: blob.len(),
            capacity: MAX_BLOB_BYTES,
        });
    }
    let (value, used) = bincode::decode_from_slice::<T, _>(blob, config())
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != blob.len() {
        return Err(CodecError::Decode(format!(
            "{} trailing bytes after the value",
            blob.len() - used
        )));
    }
    Ok(value)
}

/// The encoded size of `value` in bytes, without page headers.
pub fn encoded_len<T: bincode::Encode>(value: &T) -> Result<usize, CodecError> {
    let mut sizer = bincode::enc::write::SizeWriter::default();
    bincode::encode_into_writer(value, &mut sizer, config())
        .map_err(|e| CodecError::Encode(e.to_string()))?;
    Ok(sizer.bytes_written)
}

/// Bytes of blob that `range` can hold in pages of `page_size` bytes.
pub fn capacity(range: PageRange, page_size: usize) -> usize {
    let per_page = page_size.saturating_sub(HEADER_BYTES);
    per_page
        .saturating_mul(range.len() as usize)
        .min(MAX_BLOB_BYTES)
}

fn check_store(pages: &dyn ReservedPages, range: PageRange) -> Result<usize, CodecError> {
    if !range.fits(pages) {
        return Err(CodecError::RangeOutOfStore {
            first: range.first(),
            end: range.end(),
            num_pages: pages.num_pages(),
        });
    }
    let page_size = pages.page_size();
    if page_size <= HEADER_BYTES {
        return Err(CodecError::PageTooSmall { page_size });
    }
    Ok(page_size - HEADER_BYTES)
}

/// Encodes `value` into the pages of `range`, zeroing the range's pages the value does not need.
///
/// Validates sizes before writing anything: on a size error no page changes.
pub fn save<T: bincode::Encode>(
    pages: &mut dyn ReservedPages,
    range: PageRange,
    kind: BlobKind,
    value: &T,
) -> Result<(), CodecError> {
    let blob = to_blob(value)?;
    save_blob(pages, range, kind, &blob)
}

/// Writes an already encoded blob into the pages of `range` (see [`save`]).
pub fn save_blob(
    pages: &mut dyn ReservedPages,
    range: PageRange,
    kind: BlobKind,
    blob: &[u8],
) -> Result<(), CodecError> {
    let per_page = check_store(pages, range)?;
    let cap = capacity(range, pages.page_size());
    if blob.len() > cap {
        return Err(CodecError::TooLarge {
            len: blob.len(),
            capacity: cap,
        });
    }
    // An empty blob still takes one page, so that "stored an empty value" and "nothing stored"
    // stay distinguishable.
    let count = blob.len().div_ceil(per_page).max(1);
    debug_assert!(count <= range.len() as usize);
    let blob_crc = crc32fast::hash(blob);
    // The blob's pages, written as one batch (one sync round on a durable backend); the blob
    // counts only once a later write (a commit page, a header) refers to it.
    let mut images: Vec<Vec<u8>> = Vec::with_capacity(count);
    for i in 0..count {
        let start = i * per_page;
        let chunk = &blob[start.min(blob.len())..(start + per_page).min(blob.len())];
        let mut page = Vec::with_capacity(HEADER_BYTES + chunk.len());
        page.extend_from_slice(&MAGIC);
        page.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        page.extend_from_slice(&kind.to_u16().to_le_bytes());
        page.extend_from_slice(&(i as u32).to_le_bytes());
        page.extend_from_slice(&(count as u32).to_le_bytes());
        page.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        page.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
        page.extend_from_slice(&blob_crc.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&page);
        h.update(chunk);
        page.extend_from_slice(&h.finalize().to_le_bytes());
        debug_assert_eq!(page.len(), HEADER_BYTES);
        page.extend_from_slice(chunk);
        images.push(page);
    }
    let batch: Vec<(PageId, &[u8])> = range.ids().zip(images.iter().map(Vec::as_slice)).collect();
    pages.save_batch(&batch)?;
    // Leftovers of a longer earlier value would be harmless (the header says how many pages
    // count) but would leak into checkpoints and digests: clear them.
    for id in range.ids().skip(count) {
        if pages.load(id)?.is_some() {
            pages.zero(id)?;
        }
    }
    Ok(())
}

/// Zeroes every page of `range`.
pub fn clear(pages: &mut dyn ReservedPages, range: PageRange) -> Result<(), CodecError> {
    if !range.fits(pages) {
        return Err(CodecError::RangeOutOfStore {
            first: range.first(),
            end: range.end(),
            num_pages: pages.num_pages(),
        });
    }
    for id in range.ids() {
        if pages.load(id)?.is_some() {
            pages.zero(id)?;
        }
    }
    Ok(())
}

struct Header {
    kind: u16,
    index: u32,
    count: u32,
    total: u32,
    chunk: u32,
    blob_crc: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn parse_page(id: PageId, bytes: &[u8], expected: BlobKind) -> Result<Header, CodecError> {
    let corrupt = |reason: String| CodecError::Corrupt { page: id, reason };
    if bytes.len() < HEADER_BYTES {
        return Err(corrupt(format!(
            "{} bytes cannot hold the {HEADER_BYTES}-byte header",
            bytes.len()
        )));
    }
    // The CRC goes first: a flipped byte anywhere reports as corruption, not as a confusing
    // version or kind mismatch.
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[..28]);
    h.update(&bytes[HEADER_BYTES..]);
    if h.finalize() != u32_at(bytes, 28) {
        return Err(corrupt("page checksum mismatch".into()));
    }
    if bytes[..4] != MAGIC {
        return Err(corrupt("bad magic".into()));
    }
    let version = u16_at(bytes, 4);
    if version != FORMAT_VERSION {
        return Err(CodecError::Version {
            page: id,
            found: version,
        });
    }
    let header = Header {
        kind: u16_at(bytes, 6),
        index: u32_at(bytes, 8),
        count: u32_at(bytes, 12),
        total: u32_at(bytes, 16),
        chunk: u32_at(bytes, 20),
        blob_crc: u32_at(bytes, 24),
    };
    if header.kind != expected.to_u16() {
        return Err(CodecError::WrongKind {
            page: id,
            found: BlobKind::from_u16(header.kind),
            expected,
        });
    }
    if header.chunk as usize != bytes.len() - HEADER_BYTES {
        return Err(corrupt(format!(
            "chunk length {} but {} bytes follow the header",
            header.chunk,
            bytes.len() - HEADER_BYTES
        )));
    }
    Ok(header)
}

/// Reads the blob stored in `range` (checking every page), or `None` when nothing is stored.
///
/// "Nothing stored" means every page of the range is empty; any other inconsistency is an
/// error. (A one-page value whose page is emptied entirely is indistinguishable from nothing
/// stored at this level; [`crate::FilePages`] catches that case at the file level.)
pub fn load_blob(
    pages: &dyn ReservedPages,
    range: PageRange,
    kind: BlobKind,
) -> Result<Option<Vec<u8>>, CodecError> {
    let per_page = check_store(pages, range)?;
    let first = range.first();
    let Some(bytes) = pages.load(first)? else {
        // An empty first page with data after it is a first page lost or truncated to nothing,
        // not an empty store: report it rather than silently starting from scratch.
        for id in range.ids().skip(1) {
            if pages.load(id)?.is_some() {
                return Err(CodecError::Corrupt {
                    page: first,
                    reason: format!("first page is empty but page {id} holds data"),
                });
            }
        }
        return Ok(None);
    };
    let head = parse_page(first, bytes, kind)?;
    let corrupt = |page: PageId, reason: String| CodecError::Corrupt { page, reason };
    if head.index != 0 {
        return Err(corrupt(
            first,
            format!("first page has index {}", head.index),
        ));
    }
    let total = head.total as usize;
    let cap = capacity(range, pages.page_size());
    if total > cap {
        return Err(CodecError::TooLarge {
            len: total,
            capacity: cap,
        });
    }
    let count = head.count as usize;
    if count == 0 || count > range.len() as usize || count != total.div_ceil(per_page).max(1) {
        return Err(corrupt(
            first,
            format!("page count {count} does not match a {total}-byte blob"),
        ));
    }
    // `total` was bounded by the range capacity above, so this allocation is bounded too.
    let mut blob = Vec::with_capacity(total);
    for (i, id) in range.ids().enumerate().take(count) {
        let header = if i == 0 {
            head.chunk
        } else {
            let Some(bytes) = pages.load(id)? else {
                return Err(corrupt(id, format!("page {i} of {count} is missing")));
            };
            let h = parse_page(id, bytes, kind)?;
            if h.index as usize != i
                || h.count != head.count
                || h.total != head.total
                || h.blob_crc != head.blob_crc
            {
                return Err(corrupt(id, "page belongs to another write".into()));
            }
            blob.extend_from_slice(&bytes[HEADER_BYTES..]);
            continue;
        };
        let expected = per_page.min(total);
        if header as usize != expected {
            return Err(corrupt(id, "chunk length does not match the blob".into()));
        }
        blob.extend_from_slice(&bytes[HEADER_BYTES..]);
    }
    if blob.len() != total {
        return Err(corrupt(
            first,
            format!("pages hold {} bytes, header says {total}", blob.len()),
        ));
    }
    if crc32fast::hash(&blob) != head.blob_crc {
        return Err(corrupt(
            first,
            "blob checksum mismatch (torn write?)".into(),
        ));
    }
    Ok(Some(blob))
}

/// Reads and decodes the value stored in `range`, or `None` when nothing is stored.
pub fn load<T: bincode::Decode<()>>(
    pages: &dyn ReservedPages,
    range: PageRange,
    kind: BlobKind,
) -> Result<Option<T>, CodecError> {
    match load_blob(pages, range, kind)? {
        None => Ok(None),
        Some(blob) => from_blob(&blob).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::MemPages;

    fn range(first: u32, len: u32) -> PageRange {
        PageRange::new(first, len).unwrap()
    }

    #[test]
    fn round_trip_over_several_pages_and_shrink_clears_leftovers() {
        let mut p = MemPages::new(64, 16);
        let r = range(2, 10);
        let big: Vec<u64> = (0..38).collect();
        save(&mut p, r, BlobKind::PeriodicSchedule, &big).unwrap();
        let back: Vec<u64> = load(&p, r, BlobKind::PeriodicSchedule).unwrap().unwrap();
        assert_eq!(back, big);
        assert!(
            p.load(9).unwrap().is_some(),
            "a 312-byte blob spans 10 pages"
        );
        assert_eq!(p.load(1).unwrap(), None, "nothing outside the range");
        let small: Vec<u64> = vec![7];
        save(&mut p, r, BlobKind::PeriodicSchedule, &small).unwrap();
        assert_eq!(p.snapshot().len(), 1, "leftover pages are zeroed");
        let back: Vec<u64> = load(&p, r, BlobKind::PeriodicSchedule).unwrap().unwrap();
        assert_eq!(back, small);
    }

    #[test]
    fn nothing_stored_reads_none_and_too_large_writes_nothing() {
        let mut p = MemPages::new(64, 4);
        let r = range(0, 2);
        assert_eq!(load::<Vec<u8>>(&p, r, BlobKind::PeriodicSchedule), Ok(None));
        let huge = vec![1u8; 100];
        let err = save(&mut p, r, BlobKind::PeriodicSchedule, &huge).unwrap_err();
        assert!(
            matches!(err, CodecError::TooLarge { capacity: 64, .. }),
            "{err:?}"
        );
        assert!(p.snapshot().is_empty());
    }

    #[test]
    fn wrong_kind_version_and_range_errors_are_typed() {
        let mut p = MemPages::new(64, 4);
        let r = range(0, 2);
        save(&mut p, r, BlobKind::PeriodicSchedule, &5u32).unwrap();
        assert!(matches!(
            load::<u32>(&p, r, BlobKind::Unknown(9)),
            Err(CodecError::WrongKind { .. })
        ));
        assert!(matches!(
            load::<u32>(&p, range(3, 2), BlobKind::PeriodicSchedule),
            Err(CodecError::RangeOutOfStore { .. })
        ));
        let mut raw = p.load(0).unwrap().unwrap().to_vec();
        raw[4] = 9; // version 9, with a fixed-up CRC so that only the version is wrong
        let mut h = crc32fast::Hasher::new();
        h.update(&raw[..28]);
        h.update(&raw[HEADER_BYTES..]);
        let crc = h.finalize().to_le_bytes();
        raw[28..32].copy_from_slice(&crc);
        p.save(0, &raw).unwrap();
        assert!(matches!(
            load::<u32>(&p, r, BlobKind::PeriodicSchedule),
            Err(CodecError::Version { found: 9, .. })
        ));
        assert!(matches!(
            load::<u64>(
                &MemPages::new(16, 1),
                range(0, 1),
                BlobKind::PeriodicSchedule
            ),
            Err(CodecError::PageTooSmall { .. })
        ));
    }

    #[test]
    fn a_torn_multi_page_write_is_detected() {
        let mut p = MemPages::new(48, 8);
        let r = range(0, 8);
        let a: Vec<u64> = (0..10).collect();
        let b: Vec<u64> = (100..110).collect();
        save(&mut p, r, BlobKind::PeriodicSchedule, &a).unwrap();
        let old = p.snapshot();
        save(&mut p, r, BlobKind::PeriodicSchedule, &b).unwrap();
        // The crash hit after the first page of the new write: page 0 is new, the rest old.
        p.save(1, &old[1].1).unwrap();
        assert!(matches!(
            load::<Vec<u64>>(&p, r, BlobKind::PeriodicSchedule),
            Err(CodecError::Corrupt { page: 1, .. })
        ));
    }

    #[test]
    fn hostile_blob_lengths_do_not_allocate() {
        // A vector claiming 2^60 elements: bincode's limit refuses it before allocating.
        let mut blob = Vec::new();
        blob.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            from_blob::<Vec<u64>>(&blob),
            Err(CodecError::Decode(_))
        ));
        assert!(matches!(
            from_blob::<u32>(&[1, 2, 3, 4, 5]),
            Err(CodecError::Decode(_))
        ));
    }
}
