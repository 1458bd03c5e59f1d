//! The record log: the one commit protocol of everything ccron keeps in record pages, the cron
//! tables' schedules (`table_store.rs`, table layout 3) and the schedule book
//! (`schedule/book/persist.rs`, book layout 6). [`RecordLog`] owns the protocol (fold, append,
//! commit); each instance ([`LogInstance`]) keeps only its encodings: its commit page, its
//! change segments and the content of a folded record page.
//!
//! A range is cut into a *commit page*, a *log area* and *record pages* (each instance adds its
//! own parts: the book its zones). A record lives on one record page, placed by
//! [`Placement`](crate::schedule::store::Placement). A save writes only what changed:
//! - it appends the changed records, each a keyed *record image* `(key, Some((page, record)))`
//!   or a removal `(key, None)`, as one or more *segments* (codec blobs of a 4-byte segment
//!   index and an instance-defined body) right after the committed part of the *active log*;
//! - then it rewrites the commit page with the new log length. The commit page is the only
//!   write that decides what is stored: a crash before it leaves the previous save (appended
//!   pages lie past the committed log and are never read), after it the new one.
//!
//! When the active log has no room for a save, the save *rolls* it. A synchronous fold (the
//! book, and the fallback of every instance) rewrites the record pages with their committed
//! content, commits empty logs, then appends. A *paced* fold (the cron tables) spreads that
//! work instead: the log area is two halves; the full active log is *frozen* and a new active
//! log starts in the other half; every following save rewrites a share of the record pages
//! (from a cursor kept in the commit page) with their content as of the frozen log's end,
//! proportional to the room the save takes, so the frozen log is folded before the active one
//! fills; then the commit drops it. Load reads the record pages, then the frozen log, then the
//! active log (later images take priority), so record pages that are old, new or a mix load as
//! the same records, and a crash at any page write reloads as the state before or after the
//! save. Page images depend only on the operations (segments are cut by size, placement is a
//! function of the records, the fold's cursor and share are in or derived from the commit
//! page), so a replica that crashed and re-executed writes the same bytes as one that never
//! stopped.

use crate::codec::{self, BlobKind, CodecError, HEADER_BYTES};
use crate::pages::{PageRange, ReservedPages};

/// Encoded bytes of a segment's index, before its body.
pub(crate) const SEGMENT_INDEX_BYTES: usize = 4;

/// How much of a log is committed: its pages and its segments (both counted from the log's
/// first page, as the commit page records them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
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

/// One log in the log area: its first page (counted from the area's first) and its committed
/// part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) struct LogSpan {
    /// First page, from the log area's first.
    pub start: u32,
    /// The committed part.
    pub pos: LogPos,
}

impl LogSpan {
    /// One past its last committed page, from the area's first.
    pub(crate) fn end(&self) -> u32 {
        self.start.saturating_add(self.pos.pages)
    }

    /// The pages from its start to the end of `area` (where its segments lie).
    pub(crate) fn range(&self, area: PageRange) -> Option<PageRange> {
        PageRange::new(
            area.first().saturating_add(self.start),
            area.len().checked_sub(self.start)?,
        )
    }
}

/// Whether the record pages count for nothing because they hold another layout's bytes (a
/// migration logged every record instead): load ignores them until a fold has rewritten them
/// all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(crate) enum Stale {
    /// The record pages are this layout's.
    #[default]
    No,
    /// Stale; the active log holds every record.
    InActive,
    /// Stale; the frozen log holds every record (its fold's completion clears it).
    InFrozen,
}

/// What a fold writes to a record page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FoldPoint {
    /// The state at the end of the frozen log (a paced fold).
    FrozenEnd,
    /// The committed state (a synchronous fold of every log).
    Committed,
}

/// What a save wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SaveStats {
    /// Page writes (saves and zeroes).
    pub writes: usize,
    /// Whether the save folded every log synchronously first.
    pub folded: bool,
    /// Record pages a paced fold rewrote in this save.
    pub paced_pages: usize,
}

/// An instance of the record log: its encodings (see the module documentation).
pub(crate) trait LogInstance {
    /// The instance's error.
    type Error: From<CodecError>;
    /// How many record pages the layout has.
    fn record_pages(&self) -> u32;
    /// The page of record page `p`.
    fn record_page(&self, p: u32) -> Option<PageRange>;
    /// The record pages a synchronous fold rewrites.
    fn fold_list(
        &mut self,
        pages: &dyn ReservedPages,
        log: &RecordLog,
    ) -> Result<Vec<u32>, Self::Error>;
    /// The content of record page `p` at `at`, encoded (`None`: empty).
    fn folded_page(
        &mut self,
        pages: &dyn ReservedPages,
        log: &RecordLog,
        p: u32,
        at: FoldPoint,
    ) -> Result<Option<Vec<u8>>, Self::Error>;
    /// What else a synchronous fold writes before its commit (the book's zones); page writes.
    fn fold_extra(
        &mut self,
        pages: &mut dyn ReservedPages,
        log: &RecordLog,
    ) -> Result<usize, Self::Error> {
        let _ = (pages, log);
        Ok(0)
    }
    /// The paced fold of the frozen log is done (the tables drop the frozen-end values they
    /// kept).
    fn frozen_folded(&mut self) {}
    /// Writes the commit page describing `log` and the content `of` says: a fold's commit in
    /// the middle of a save ([`CommitOf::Previous`]) must describe the previous save's content
    /// (its record count and every other field but the log's), since a crash right after it
    /// reloads exactly that content; only the save's last commit describes the new one.
    fn commit(
        &mut self,
        pages: &mut dyn ReservedPages,
        log: &RecordLog,
        of: CommitOf,
    ) -> Result<(), Self::Error>;
}

/// Which content a commit page written by the record log describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitOf {
    /// The previously committed content with its logs folded (a fold's commit in the middle of
    /// a save: the save's own changes are not on the pages yet).
    Previous,
    /// This save's content (the save's last write).
    This,
}

/// The record log of one range (see the module documentation): where its logs lie, what is
/// committed, and the paced fold's progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordLog {
    /// The log area.
    pub area: PageRange,
    /// The blob kind of its segments.
    pub kind: BlobKind,
    /// The blob kind of its record pages.
    pub page_kind: BlobKind,
    /// The log saves append to.
    pub active: LogSpan,
    /// The log a paced fold is folding.
    pub frozen: Option<LogSpan>,
    /// The next record page the paced fold rewrites.
    pub cursor: u32,
    /// Whether the record pages count for nothing yet.
    pub stale: Stale,
    /// Whether folds are paced (two halves) or synchronous (one log).
    pub paced: bool,
}

impl RecordLog {
    /// An empty log over `area`.
    pub(crate) fn new(area: PageRange, kind: BlobKind, page_kind: BlobKind, paced: bool) -> Self {
        Self {
            area,
            kind,
            page_kind,
            active: LogSpan::default(),
            frozen: None,
            cursor: 0,
            stale: Stale::No,
            paced,
        }
    }

    /// Where the second half of a paced log area starts.
    fn half(&self) -> u32 {
        self.area.len() / 2
    }

    /// How far the active log may grow before the save must roll it.
    fn limit(&self) -> u32 {
        let len = self.area.len();
        if !self.paced || self.active.start > 0 {
            return len;
        }
        // In the first half: up to the second half, unless it already spans both (a save
        // larger than a half made it wide) or, with nothing frozen, it must.
        if self.frozen.is_none() && self.active.end() > self.half() {
            len
        } else {
            self.half()
        }
    }

    /// Writes one save of `bodies` (encoded segment bodies): rolls the active log when it has
    /// no room, takes a paced fold's share, appends, commits.
    ///
    /// # Errors
    /// [`CodecError::TooLarge`] when the save is larger than the whole log area (before any
    /// write); the codec's, the store's or the instance's errors.
    pub(crate) fn save<I: LogInstance>(
        &mut self,
        pages: &mut dyn ReservedPages,
        inst: &mut I,
        bodies: Vec<Vec<u8>>,
    ) -> Result<SaveStats, I::Error> {
        let per_page = pages.page_size().saturating_sub(HEADER_BYTES).max(1);
        let need: usize = bodies
            .iter()
            .map(|b| segment_pages(b.len(), per_page))
            .sum();
        let need = u32::try_from(need).unwrap_or(u32::MAX);
        if need > self.area.len() {
            return Err(CodecError::TooLarge {
                len: bodies.iter().map(Vec::len).sum(),
                capacity: codec::capacity(self.area, pages.page_size()),
            }
            .into());
        }
        let mut stats = SaveStats::default();
        if self.active.end().saturating_add(need) > self.limit() {
            self.roll(pages, inst, need, &mut stats)?;
        }
        if self.frozen.is_some() {
            // The share: the frozen log's remaining pages in proportion to the room this save
            // takes, so that the fold is done before the active log fills.
            let remaining = inst.record_pages().saturating_sub(self.cursor);
            let room = self.limit().saturating_sub(self.active.end()).max(1);
            let share = if need >= room {
                remaining
            } else {
                let share = u64::from(remaining) * u64::from(need);
                u32::try_from(share.div_ceil(u64::from(room))).unwrap_or(u32::MAX)
            };
            self.fold_step(pages, inst, share.max(1), &mut stats)?;
        }
        let Some(log) = self.active.range(self.area) else {
            return Err(CodecError::TooLarge {
                len: 0,
                capacity: 0,
            }
            .into());
        };
        let (pos, writes) = append(
            pages,
            log,
            self.active.pos,
            self.kind,
            bodies.into_iter().map(Ok),
        )?;
        self.active.pos = pos;
        stats.writes += writes;
        inst.commit(pages, self, CommitOf::This)?;
        stats.writes += 1;
        Ok(stats)
    }

    /// Makes room for a save of `need` pages: freezes the active log and starts the other half
    /// (paced, when the frozen one is done and the other half takes the save), or folds every
    /// log synchronously and starts over at the area's first page.
    fn roll<I: LogInstance>(
        &mut self,
        pages: &mut dyn ReservedPages,
        inst: &mut I,
        need: u32,
        stats: &mut SaveStats,
    ) -> Result<(), I::Error> {
        if self.paced && self.frozen.is_some() {
            // Finish the frozen log first, and commit that before its half is reused.
            let rest = inst.record_pages().saturating_sub(self.cursor);
            self.fold_step(pages, inst, rest.max(1), stats)?;
            inst.commit(pages, self, CommitOf::Previous)?;
            stats.writes += 1;
        }
        if self.active.pos.pages == 0 && self.frozen.is_none() {
            // No log at all: the save starts at the area's first page (and may span both
            // halves), nothing to fold.
            self.active = LogSpan::default();
            return Ok(());
        }
        let half = self.half();
        let wide = self.active.end() > half && self.active.start == 0;
        let (other, other_len) = if self.active.start == 0 {
            (half, self.area.len() - half)
        } else {
            (0, half)
        };
        if self.paced && !wide && self.active.pos.pages > 0 && need <= other_len {
            self.frozen = Some(self.active);
            self.cursor = 0;
            if self.stale == Stale::InActive {
                self.stale = Stale::InFrozen;
            }
            self.active = LogSpan {
                start: other,
                pos: LogPos::default(),
            };
            return Ok(());
        }
        self.fold_all(pages, inst, stats)
    }

    /// Folds every committed log synchronously into the record pages (their committed content)
    /// and commits empty logs.
    pub(crate) fn fold_all<I: LogInstance>(
        &mut self,
        pages: &mut dyn ReservedPages,
        inst: &mut I,
        stats: &mut SaveStats,
    ) -> Result<(), I::Error> {
        let list = inst.fold_list(pages, self)?;
        for p in list {
            let Some(part) = inst.record_page(p) else {
                continue;
            };
            let blob = inst.folded_page(pages, self, p, FoldPoint::Committed)?;
            stats.writes += write_page(pages, part, self.page_kind, blob.as_deref())?;
        }
        stats.writes += inst.fold_extra(pages, self)?;
        if self.frozen.take().is_some() {
            inst.frozen_folded();
        }
        self.cursor = 0;
        self.stale = Stale::No;
        self.active = LogSpan::default();
        inst.commit(pages, self, CommitOf::Previous)?;
        stats.writes += 1;
        stats.folded = true;
        Ok(())
    }

    /// Rewrites up to `share` record pages from the cursor with their content at the frozen
    /// log's end; at the last one, the frozen log is done (the next commit drops it).
    fn fold_step<I: LogInstance>(
        &mut self,
        pages: &mut dyn ReservedPages,
        inst: &mut I,
        share: u32,
        stats: &mut SaveStats,
    ) -> Result<(), I::Error> {
        let end = self.cursor.saturating_add(share).min(inst.record_pages());
        for p in self.cursor..end {
            let Some(part) = inst.record_page(p) else {
                continue;
            };
            let blob = inst.folded_page(pages, self, p, FoldPoint::FrozenEnd)?;
            stats.writes += write_page(pages, part, self.page_kind, blob.as_deref())?;
            stats.paced_pages += 1;
        }
        self.cursor = end;
        if self.cursor >= inst.record_pages() {
            self.frozen = None;
            self.cursor = 0;
            if self.stale == Stale::InFrozen {
                self.stale = Stale::No;
            }
            inst.frozen_folded();
        }
        Ok(())
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
