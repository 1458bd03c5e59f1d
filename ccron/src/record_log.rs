//! The record log: the one commit protocol of everything ccron keeps in record pages, the cron
//! tables' schedules (`table_store.rs`, table layout 2) and the schedule book
//! (`schedule/book/persist.rs`, book layout 5).
//!
//! A range is cut into a *commit page*, a *log* and *record pages* (each instance adds its own
//! parts: the book its zones). A record lives on one record page, placed by
//! [`Placement`](crate::schedule::store::Placement). A save writes only what changed:
//! - it appends the changed records, each a keyed *record image* `(key, Some((page, record)))`
//!   or a removal `(key, None)`, as one or more *segments* (codec blobs of a 4-byte segment
//!   index and an instance-defined body) right after the committed part of the log;
//! - then it rewrites the commit page with the new log length. The commit page is the only
//!   write that decides what is stored: a crash before it leaves the previous save (appended
//!   pages lie past the committed log and are never read), after it the new one.
//!
//! When the log has no room for a save, the save first *folds*: it rewrites the record pages
//! the committed log touched with their committed content, then commits an empty log, then
//! appends. A crash inside a fold leaves the committed log in force, and load gives the log's
//! images priority over any copy on a record page, so record pages that are old, new or a mix
//! load as the same records. Page images depend only on the operations (segments are cut by
//! size, placement is a function of the records), so a replica that crashed and re-executed
//! writes the same bytes as one that never stopped.
//!
//! A save after one change writes 2 pages (one segment page, the commit page); a fold writes
//! the record pages changed since the last one, once per log's worth of saves. This module
//! holds the instance-independent parts: appending and reading segments, and writing a folded
//! record page; each instance keeps its commit page and its fold's content.

use crate::codec::{self, BlobKind, CodecError, HEADER_BYTES};
use crate::pages::{PageRange, ReservedPages};

/// Encoded bytes of a segment's index, before its body.
pub(crate) const SEGMENT_INDEX_BYTES: usize = 4;

/// How much of a log is committed: its pages and its segments (both counted from the log's
/// first page, as the commit page records them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogPos {
    /// Committed log pages.
    pub pages: u32,
    /// Committed segments.
    pub segments: u32,
}

/// Log pages one segment of `body_len` encoded body bytes takes, in pages of `per_page` blob
/// bytes.
pub(crate) fn segment_pages(body_len: usize, per_page: usize) -> usize {
    (SEGMENT_INDEX_BYTES + body_len)
        .div_ceil(per_page.max(1))
        .max(1)
}

/// Appends the segments of `bodies` (encoded bodies, numbered on from `at.segments`, encoded
/// lazily so that a large save never holds all of them) to `log` right after its committed
/// part `at`. Nothing is committed: the caller then writes its commit page with the returned
/// position. Returns the new position and the pages written.
///
/// # Errors
/// [`CodecError::TooLarge`] when a segment does not fit the log (before its write; callers
/// size their saves first, and pages written past the committed part are never read), a body's
/// encoding error, or the store's error.
pub(crate) fn append(
    pages: &mut dyn ReservedPages,
    log: PageRange,
    at: LogPos,
    kind: BlobKind,
    bodies: impl IntoIterator<Item = Result<Vec<u8>, CodecError>>,
) -> Result<(LogPos, usize), CodecError> {
    let page_size = pages.page_size();
    let per_page = page_size.saturating_sub(HEADER_BYTES).max(1);
    let mut pos = at;
    let mut writes = 0;
    for body in bodies {
        let body = body?;
        let mut blob = Vec::with_capacity(SEGMENT_INDEX_BYTES + body.len());
        blob.extend_from_slice(&pos.segments.to_le_bytes());
        blob.extend_from_slice(&body);
        let len = u32::try_from(segment_pages(body.len(), per_page)).unwrap_or(u32::MAX);
        let part = PageRange::new(log.first().saturating_add(pos.pages), len)
            .filter(|p| p.end() <= log.end())
            .ok_or(CodecError::TooLarge {
                len: blob.len(),
                capacity: codec::capacity(log, page_size)
                    .saturating_sub((pos.pages as usize).saturating_mul(per_page)),
            })?;
        codec::save_blob(pages, part, kind, &blob)?;
        writes += len as usize;
        pos.pages += len;
        pos.segments = pos.segments.saturating_add(1);
    }
    Ok((pos, writes))
}

/// Why a committed log could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// A page failed the codec's checks, or the store failed.
    Codec(CodecError),
    /// The log is inconsistent with its commit page (a segment missing, misnumbered, past the
    /// committed part, or rejected by the instance).
    Corrupt(String),
}

impl From<CodecError> for ReadError {
    fn from(e: CodecError) -> Self {
        ReadError::Codec(e)
    }
}

/// Reads the committed part `committed` of `log`, oldest segment first, handing each decoded
/// body to `visit` (which may reject it). Every segment must be present, numbered in order and
/// end exactly at the committed length.
///
/// # Errors
/// [`ReadError`].
pub(crate) fn read<S: bincode::Decode<()>>(
    pages: &dyn ReservedPages,
    log: PageRange,
    committed: LogPos,
    kind: BlobKind,
    mut visit: impl FnMut(S) -> Result<(), String>,
) -> Result<(), ReadError> {
    if committed.pages > log.len() {
        return Err(ReadError::Corrupt(
            "the committed log is longer than the log".into(),
        ));
    }
    let per_page = pages.page_size().saturating_sub(HEADER_BYTES).max(1);
    let end = log.first() + committed.pages;
    let mut at = log.first();
    for s in 0..committed.segments {
        let part = PageRange::new(at, end.saturating_sub(at)).ok_or_else(|| {
            ReadError::Corrupt(format!("log segment {s} lies past the committed log"))
        })?;
        let blob = codec::load_blob(pages, part, kind)?
            .ok_or_else(|| ReadError::Corrupt(format!("log segment {s} is missing")))?;
        let (index, body) = codec::from_blob::<(u32, S)>(&blob)?;
        if index != s {
            return Err(ReadError::Corrupt(format!(
                "log segment {s} holds segment {index}"
            )));
        }
        visit(body).map_err(ReadError::Corrupt)?;
        at = at.saturating_add(
            u32::try_from(blob.len().div_ceil(per_page).max(1)).unwrap_or(u32::MAX),
        );
    }
    if at != end {
        return Err(ReadError::Corrupt(
            "log segments do not fill the committed log".into(),
        ));
    }
    Ok(())
}

/// Writes one folded record page: the blob when there is one, otherwise zeroes the page if it
/// holds data. Returns the pages written (0 or 1).
///
/// # Errors
/// The codec's or the store's error.
pub(crate) fn write_page(
    pages: &mut dyn ReservedPages,
    part: PageRange,
    kind: BlobKind,
    blob: Option<&[u8]>,
) -> Result<usize, CodecError> {
    match blob {
        Some(b) => {
            codec::save_blob(pages, part, kind, b)?;
            Ok(1)
        }
        None if pages.load(part.first())?.is_some() => {
            pages.zero(part.first())?;
            Ok(1)
        }
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::MemPages;

    #[test]
    fn segments_append_after_the_committed_part_and_read_back_in_order() {
        let mut pages = MemPages::new(128, 16);
        let log = PageRange::new(2, 10).unwrap();
        let bodies = || {
            [
                codec::to_blob(&vec![1u64, 2]),
                codec::to_blob(&vec![7u64; 30]),
            ]
        };
        let (pos, writes) = append(
            &mut pages,
            log,
            LogPos::default(),
            BlobKind::BookLog,
            bodies(),
        )
        .unwrap();
        // 4 + 24 bytes (1 page), 4 + 248 bytes (3 pages of 96).
        assert_eq!((pos.pages, pos.segments, writes), (4, 2, 4));
        let more = [codec::to_blob(&vec![9u64])];
        let (pos, _) = append(&mut pages, log, pos, BlobKind::BookLog, more).unwrap();
        let mut seen = Vec::new();
        read::<Vec<u64>>(&pages, log, pos, BlobKind::BookLog, |v| {
            seen.push(v.len());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![2, 30, 1]);
        // Only the committed part is read: a position one segment short ends early.
        let short = LogPos {
            pages: 4,
            segments: 2,
        };
        let mut n = 0;
        read::<Vec<u64>>(&pages, log, short, BlobKind::BookLog, |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
        // A commit naming more segments than the pages hold is corrupt, not a crash.
        let long = LogPos {
            pages: 5,
            segments: 4,
        };
        assert!(matches!(
            read::<Vec<u64>>(&pages, log, long, BlobKind::BookLog, |_| Ok(())),
            Err(ReadError::Corrupt(_))
        ));
        // No room past the committed part: refused before the segment's write.
        let before = pages.snapshot();
        let full = LogPos {
            pages: 9,
            segments: 3,
        };
        let big = [codec::to_blob(&vec![7u64; 30])];
        assert!(matches!(
            append(&mut pages, log, full, BlobKind::BookLog, big),
            Err(CodecError::TooLarge { .. })
        ));
        assert!(pages.snapshot() == before);
    }
}
