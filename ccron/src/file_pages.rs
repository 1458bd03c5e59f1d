//! A crash-safe, file-backed [`ReservedPages`]: the host side of persistence.
//!
//! This is a thin driver, not part of the pure core: it is the one place in ccron that touches
//! the file system. Each page is one file `page-<id>.bin` in a directory, holding a 20-byte
//! header and the page's bytes:
//!
//! ```text
//! offset size field
//!      0    4 magic "CCPG"
//!      4    2 format version (1)
//!      6    2 reserved, zero
//!      8    4 page id (a file renamed or copied to another id is caught)
//!     12    4 data length
//!     16    4 CRC-32 of bytes 0..16 and of the data
//! ```
//!
//! A save writes `page-<id>.tmp`, fsyncs it, renames it over the page file and fsyncs the
//! directory, so a crash leaves either the old or the new page, never a mix; a leftover `.tmp`
//! is deleted on open. [`ReservedPages::save_batch`] writes and fsyncs every temp file of the
//! batch, renames them in order and syncs the directory once. A page whose file fails its checks (torn by a file system without atomic
//! rename, bit rot, truncation) is never loaded as valid: [`ReservedPages::load`] reports
//! [`PagesError::Corrupt`] for it until it is written again.
//!
//! # What the directory may contain
//!
//! The store does not trust its directory. Every entry whose name starts with `page-` (in any
//! letter case) belongs to the store and must be exactly what the store writes: a **regular
//! file** named `page-<id>.bin` or `page-<id>.tmp` with `<id>` in ten decimal digits
//! (`page-0000000005.bin`; a name is canonical when parsing and re-rendering it gives it back).
//! Anything else in that namespace fails [`FilePages::open`] with
//! [`PagesError::UnexpectedEntry`] (and an error event per entry): an alias (`page-5.bin`,
//! `page-+5.bin`, `page-05.bin`), a symbolic link, a FIFO, a socket, a device or a directory.
//! None of them is ever opened, so a symlink to a huge file is not read and a FIFO cannot block
//! the open; an alias can never resurrect a zeroed page. The operator removes the entry and
//! reopens. Entries outside the `page-` namespace (`lost+found` on a mount point, notes) are
//! left alone. Page files with an id beyond the store's pages are ignored (a store shrunk by
//! configuration), with a warning.
//!
//! A page file is checked with `lstat` before it is opened, opened without following symlinks
//! and without blocking (`O_NOFOLLOW | O_NONBLOCK` on Unix), checked again on the open handle
//! (regular file, at most header plus page size) and read through a limit, so no more than
//! header plus page size plus one byte is ever read, even if the file is swapped or grows
//! between the checks.
//!
//! The directory path itself may be a symbolic link: it is the operator's configuration (a data
//! directory moved to another disk, say), not content an attacker on the directory can plant.
//!
//! Pages are cached in memory (the trait hands out borrowed slices); the store is meant for the
//! few hundred pages a replica reserves, not for bulk data.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::pages::{DirEntryProblem, PageId, PagesError, ReservedPages, check_page};

const MAGIC: [u8; 4] = *b"CCPG";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 20;
/// Every entry whose name starts with this (ASCII case ignored) belongs to the store.
const PREFIX: &str = "page-";

/// Reserved pages kept in a directory, one file per non-empty page.
#[derive(Debug)]
pub struct FilePages {
    dir: PathBuf,
    page_size: usize,
    num_pages: u32,
    pages: BTreeMap<PageId, Vec<u8>>,
    corrupt: BTreeMap<PageId, String>,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> PagesError {
    PagesError::Io(format!("{what} {}: {e}", path.display()))
}

fn crc(header16: &[u8], data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header16);
    h.update(data);
    h.finalize()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// The one name the store gives page `id`'s file with extension `ext` (`bin` or `tmp`).
fn file_name(id: PageId, ext: &str) -> String {
    format!("{PREFIX}{id:010}.{ext}")
}

/// The page whose canonical `ext` file is called `name`, if `name` is exactly that name.
///
/// Parsing alone would accept aliases (`page-5.bin`, `page-+5.bin`, `page-05.bin`); re-rendering
/// the parsed id and comparing rejects every name but the one [`file_name`] gives.
fn canonical_id(name: &str, ext: &str) -> Option<PageId> {
    let digits = name
        .strip_prefix(PREFIX)?
        .strip_suffix(ext)?
        .strip_suffix('.')?;
    let id: PageId = digits.parse().ok()?;
    (file_name(id, ext) == name).then_some(id)
}

/// What a directory entry is, by its name alone.
#[derive(Debug, PartialEq, Eq)]
enum EntryName {
    /// `page-<id>.bin`, canonical.
    Page(PageId),
    /// `page-<id>.tmp`, canonical: a save that crashed before its rename.
    Temp,
    /// In the store's namespace but not a name the store writes.
    NonCanonical,
    /// Outside the store's namespace: left alone.
    Unrelated,
}

fn classify(name: &OsStr) -> EntryName {
    // A name that is not UTF-8 cannot be canonical; it is still ours if it starts with the prefix.
    let lossy = name.to_string_lossy();
    let ours = lossy
        .get(..PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX));
    if !ours {
        return EntryName::Unrelated;
    }
    let Some(name) = name.to_str() else {
        return EntryName::NonCanonical;
    };
    if let Some(id) = canonical_id(name, "bin") {
        EntryName::Page(id)
    } else if canonical_id(name, "tmp").is_some() {
        EntryName::Temp
    } else {
        EntryName::NonCanonical
    }
}

/// Why a file type is not acceptable for a page or temp file, or `None` for a regular file.
fn type_problem(ft: fs::FileType) -> Option<DirEntryProblem> {
    if ft.is_file() {
        return None;
    }
    if ft.is_symlink() {
        return Some(DirEntryProblem::Symlink);
    }
    if ft.is_dir() {
        return Some(DirEntryProblem::Directory);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return Some(DirEntryProblem::Fifo);
        }
        if ft.is_socket() {
            return Some(DirEntryProblem::Socket);
        }
        if ft.is_block_device() || ft.is_char_device() {
            return Some(DirEntryProblem::Device);
        }
    }
    Some(DirEntryProblem::NotRegular)
}

/// Why a page file could not be read.
#[derive(Debug)]
enum ReadFail {
    /// Not a regular file (caught before opening, or on the open handle after a swap).
    Rejected(DirEntryProblem),
    /// Longer than the limit: `len` is the size seen (at most the limit plus one when counted
    /// while reading).
    TooLong(u64),
    /// The file system failed.
    Io(PagesError),
}

/// Reads the page file at `path`, of at most `limit` bytes, trusting nothing about it.
///
/// `lstat` first: a symlink, FIFO, socket, device or directory is rejected without being
/// opened, a file longer than `limit` without being read. Then [`read_opened`].
fn read_page_file(path: &Path, limit: u64) -> Result<Vec<u8>, ReadFail> {
    let meta =
        fs::symlink_metadata(path).map_err(|e| ReadFail::Io(io_err("inspecting", path, e)))?;
    if let Some(problem) = type_problem(meta.file_type()) {
        return Err(ReadFail::Rejected(problem));
    }
    if meta.len() > limit {
        return Err(ReadFail::TooLong(meta.len()));
    }
    read_opened(path, limit)
}

/// Opens `path` without following a symlink and without blocking, re-checks the open handle
/// (regular file of at most `limit` bytes) and reads at most `limit + 1` bytes from it.
///
/// This is the half of [`read_page_file`] that holds even if the entry is swapped between its
/// `lstat` and the open (for a symlink, a FIFO or a bigger file), or grows while being read.
fn read_opened(path: &Path, limit: u64) -> Result<Vec<u8>, ReadFail> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW: a symlink fails the open (ELOOP) instead of being followed.
        // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; it changes
        // nothing for a regular file.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = match options.open(path) {
        Ok(file) => file,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(ReadFail::Rejected(DirEntryProblem::Symlink));
        }
        Err(e) => return Err(ReadFail::Io(io_err("opening", path, e))),
    };
    let meta = file
        .metadata()
        .map_err(|e| ReadFail::Io(io_err("inspecting", path, e)))?;
    if let Some(problem) = type_problem(meta.file_type()) {
        return Err(ReadFail::Rejected(problem));
    }
    if meta.len() > limit {
        return Err(ReadFail::TooLong(meta.len()));
    }
    read_bounded(file, path, limit, meta.len())
}

/// Reads `source` (the file at `path`) to its end, but never more than `limit + 1` bytes: more
/// than `limit` is [`ReadFail::TooLong`]. `expected` (the size seen on the handle) only sizes
/// the buffer.
fn read_bounded(
    source: impl Read,
    path: &Path,
    limit: u64,
    expected: u64,
) -> Result<Vec<u8>, ReadFail> {
    let capacity = usize::try_from(expected.min(limit)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    source
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadFail::Io(io_err("reading", path, e)))?;
    let len = bytes.len() as u64;
    if len > limit {
        return Err(ReadFail::TooLong(len));
    }
    Ok(bytes)
}

impl FilePages {
    /// Opens (creating if needed) the store in `dir` with `num_pages` pages of `page_size` bytes,
    /// loading and checking every page file.
    ///
    /// Corrupt pages do not fail the open: they are listed by
    /// [`corrupt_pages`](Self::corrupt_pages) and fail their `load`. An entry the store never
    /// writes (see the [module documentation](self)) fails it with
    /// [`PagesError::UnexpectedEntry`], naming the first such entry by path order; every one of
    /// them gets an error event.
    pub fn open(
        dir: impl Into<PathBuf>,
        page_size: usize,
        num_pages: u32,
    ) -> Result<Self, PagesError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| io_err("creating", &dir, e))?;
        let mut store = Self {
            dir,
            page_size,
            num_pages,
            pages: BTreeMap::new(),
            corrupt: BTreeMap::new(),
        };
        // Bound what a hostile or corrupt file can make us read: a valid page file is never
        // longer than the header plus a page.
        let limit = u64::try_from(HEADER_BYTES.saturating_add(page_size)).unwrap_or(u64::MAX);
        let mut first_rejected: Option<(PathBuf, DirEntryProblem)> = None;
        let mut reject = |path: PathBuf, problem: DirEntryProblem| {
            tracing::error!(file = %path.display(), %problem, "page directory entry rejected");
            if first_rejected
                .as_ref()
                .is_none_or(|(first, _)| path < *first)
            {
                first_rejected = Some((path, problem));
            }
        };
        let listing = fs::read_dir(&store.dir).map_err(|e| io_err("listing", &store.dir, e))?;
        for item in listing {
            let item = item.map_err(|e| io_err("listing", &store.dir, e))?;
            let path = item.path();
            match classify(&item.file_name()) {
                EntryName::Unrelated => {
                    tracing::debug!(file = %path.display(), "not a page file, left alone");
                }
                EntryName::NonCanonical => reject(path, DirEntryProblem::NonCanonicalName),
                EntryName::Temp => {
                    let meta =
                        fs::symlink_metadata(&path).map_err(|e| io_err("inspecting", &path, e))?;
                    if let Some(problem) = type_problem(meta.file_type()) {
                        reject(path, problem);
                        continue;
                    }
                    // A save that crashed before its rename: the old page file is still intact.
                    fs::remove_file(&path).map_err(|e| io_err("removing", &path, e))?;
                    tracing::info!(file = %path.display(), "removed an unfinished page write");
                }
                EntryName::Page(id) if id >= num_pages => {
                    tracing::warn!(id, num_pages, "page file beyond the store's pages ignored");
                }
                EntryName::Page(id) => match read_page_file(&path, limit) {
                    Ok(bytes) => match store.check_file(id, &bytes) {
                        Ok(data) => {
                            store.pages.insert(id, data.to_vec());
                        }
                        Err(reason) => {
                            tracing::error!(id, %reason, "corrupt page file");
                            store.corrupt.insert(id, reason);
                        }
                    },
                    Err(ReadFail::Rejected(problem)) => reject(path, problem),
                    Err(ReadFail::TooLong(len)) => {
                        let reason = format!("{len}-byte file exceeds header plus page size");
                        tracing::error!(id, %reason, "corrupt page file");
                        store.corrupt.insert(id, reason);
                    }
                    Err(ReadFail::Io(e)) => return Err(e),
                },
            }
        }
        if let Some((path, problem)) = first_rejected {
            return Err(PagesError::UnexpectedEntry {
                path: path.display().to_string(),
                problem,
            });
        }
        Ok(store)
    }

    /// The pages whose files failed their checks on open, with the reason.
    pub fn corrupt_pages(&self) -> &BTreeMap<PageId, String> {
        &self.corrupt
    }

    /// The directory holding the page files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: PageId, ext: &str) -> PathBuf {
        self.dir.join(file_name(id, ext))
    }

    fn check_file<'b>(&self, id: PageId, bytes: &'b [u8]) -> Result<&'b [u8], String> {
        if bytes.len() < HEADER_BYTES {
            return Err(format!("{} bytes, shorter than the header", bytes.len()));
        }
        if bytes[..4] != MAGIC {
            return Err("bad magic".into());
        }
        if bytes[4..6] != VERSION.to_le_bytes() {
            return Err("unknown version".into());
        }
        if u32_at(bytes, 8) != id {
            return Err(format!("file holds page {}", u32_at(bytes, 8)));
        }
        let len = u32_at(bytes, 12) as usize;
        let data = &bytes[HEADER_BYTES..];
        if len != data.len() {
            return Err(format!(
                "header says {len} bytes, file holds {}",
                data.len()
            ));
        }
        if len > self.page_size {
            return Err(format!(
                "{len} bytes exceed the page size {}",
                self.page_size
            ));
        }
        if crc(&bytes[..16], data) != u32_at(bytes, 16) {
            return Err("checksum mismatch".into());
        }
        Ok(data)
    }

    fn check(&self, id: PageId, len: usize) -> Result<(), PagesError> {
        check_page(id, len, self.num_pages, self.page_size)
    }

    /// Writes page `id`'s file (header, checksum, `data`) to its temp name and fsyncs it;
    /// returns the temp and the page file's paths.
    fn write_temp(&self, id: PageId, data: &[u8]) -> Result<(PathBuf, PathBuf), PagesError> {
        let mut file = Vec::with_capacity(HEADER_BYTES + data.len());
        file.extend_from_slice(&MAGIC);
        file.extend_from_slice(&VERSION.to_le_bytes());
        file.extend_from_slice(&[0, 0]);
        file.extend_from_slice(&id.to_le_bytes());
        file.extend_from_slice(&(data.len() as u32).to_le_bytes());
        let sum = crc(&file, data);
        file.extend_from_slice(&sum.to_le_bytes());
        file.extend_from_slice(data);
        let tmp = self.path(id, "tmp");
        let dst = self.path(id, "bin");
        // A temp file left by a failed save is removed (a symlink is unlinked, never followed),
        // and the new one is created exclusively: nothing planted at the temp name is written
        // through.
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &tmp, e)),
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| io_err("creating", &tmp, e))?;
        f.write_all(&file).map_err(|e| io_err("writing", &tmp, e))?;
        f.sync_all().map_err(|e| io_err("syncing", &tmp, e))?;
        Ok((tmp, dst))
    }

    fn sync_dir(&self) -> Result<(), PagesError> {
        // A rename or unlink is durable only once the directory entry is.
        let mut options = fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // Whatever now sits at the path, only a directory is opened (a FIFO cannot block).
            options.custom_flags(libc::O_DIRECTORY);
        }
        options
            .open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err("syncing", &self.dir, e))
    }
}

impl ReservedPages for FilePages {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn num_pages(&self) -> u32 {
        self.num_pages
    }

    fn load(&self, id: PageId) -> Result<Option<&[u8]>, PagesError> {
        self.check(id, 0)?;
        if let Some(reason) = self.corrupt.get(&id) {
            return Err(PagesError::Corrupt {
                id,
                reason: reason.clone(),
            });
        }
        Ok(self.pages.get(&id).map(Vec::as_slice))
    }

    fn save(&mut self, id: PageId, data: &[u8]) -> Result<(), PagesError> {
        self.check(id, data.len())?;
        if data.is_empty() {
            return self.zero(id);
        }
        let (tmp, dst) = self.write_temp(id, data)?;
        fs::rename(&tmp, &dst).map_err(|e| io_err("renaming", &tmp, e))?;
        self.sync_dir()?;
        self.pages.insert(id, data.to_vec());
        self.corrupt.remove(&id);
        Ok(())
    }

    /// Writes and fsyncs every page's temp file, renames them in order, then syncs the
    /// directory once: N + 1 syncs instead of 2N. A crash leaves each page old or new (its
    /// rename is atomic); which renames survive a power loss before the directory sync is up to
    /// the file system, as the trait allows.
    fn save_batch(&mut self, writes: &[(PageId, &[u8])]) -> Result<(), PagesError> {
        let mut ids = std::collections::BTreeSet::new();
        let simple = writes.len() <= 1
            || writes
                .iter()
                .any(|(id, data)| data.is_empty() || !ids.insert(*id));
        if simple {
            for (id, data) in writes {
                self.save(*id, data)?;
            }
            return Ok(());
        }
        for (id, data) in writes {
            self.check(*id, data.len())?;
        }
        let mut renames = Vec::with_capacity(writes.len());
        for (id, data) in writes {
            renames.push(self.write_temp(*id, data)?);
        }
        for (tmp, dst) in &renames {
            fs::rename(tmp, dst).map_err(|e| io_err("renaming", tmp, e))?;
        }
        self.sync_dir()?;
        for (id, data) in writes {
            self.pages.insert(*id, data.to_vec());
            self.corrupt.remove(id);
        }
        Ok(())
    }

    fn zero(&mut self, id: PageId) -> Result<(), PagesError> {
        self.check(id, 0)?;
        let path = self.path(id, "bin");
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir()?,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &path, e)),
        }
        self.pages.remove(&id);
        self.corrupt.remove(&id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ccron-file-pages-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn pages_survive_reopen_and_zero_removes_them() {
        let dir = temp_dir("reopen");
        let mut p = FilePages::open(&dir, 64, 4).unwrap();
        p.save(1, b"hello").unwrap();
        p.save(3, b"world").unwrap();
        p.zero(3).unwrap();
        p.zero(2).unwrap();
        let q = FilePages::open(&dir, 64, 4).unwrap();
        assert_eq!(q.load(1).unwrap(), Some(&b"hello"[..]));
        assert_eq!(q.load(3).unwrap(), None);
        assert!(q.corrupt_pages().is_empty());
        assert!(matches!(q.load(4), Err(PagesError::OutOfRange { .. })));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_truncation_and_byte_flip_of_a_page_file_is_detected() {
        let dir = temp_dir("corrupt");
        let mut p = FilePages::open(&dir, 64, 2).unwrap();
        p.save(0, b"some page data").unwrap();
        let path = p.path(0, "bin");
        let good = fs::read(&path).unwrap();
        for cut in 0..good.len() {
            fs::write(&path, &good[..cut]).unwrap();
            let q = FilePages::open(&dir, 64, 2).unwrap();
            assert!(
                matches!(q.load(0), Err(PagesError::Corrupt { id: 0, .. })),
                "cut {cut}"
            );
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x5a;
            fs::write(&path, &bad).unwrap();
            let mut q = FilePages::open(&dir, 64, 2).unwrap();
            assert!(q.load(0).is_err(), "flip at {at}");
            // Rewriting a corrupt page heals it.
            q.save(0, b"fresh").unwrap();
            assert_eq!(q.load(0).unwrap(), Some(&b"fresh"[..]));
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_oversized_page_file_is_corrupt_without_being_read() {
        let dir = temp_dir("oversized");
        let mut p = FilePages::open(&dir, 16, 2).unwrap();
        p.save(1, b"ok").unwrap();
        fs::write(p.path(1, "bin"), vec![0u8; 4096]).unwrap();
        let q = FilePages::open(&dir, 16, 2).unwrap();
        assert!(matches!(q.load(1), Err(PagesError::Corrupt { id: 1, .. })));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_exact_names_the_store_writes_are_page_files() {
        let of = |name: &str| classify(OsStr::new(name));
        assert_eq!(of("page-0000000005.bin"), EntryName::Page(5));
        assert_eq!(of("page-4294967295.bin"), EntryName::Page(u32::MAX));
        assert_eq!(of("page-0000000005.tmp"), EntryName::Temp);
        for alias in [
            "page-5.bin",
            "page-+5.bin",
            "page-05.bin",
            "page-00000000005.bin",
            "page-+000000005.bin",
            "page- 000000005.bin",
            "page-4294967296.bin",
            "page-0000000005.BIN",
            "PAGE-0000000005.bin",
            "Page-0000000005.bin",
            "page-0000000005.bin.bak",
            "page-0000000005",
            "page-.bin",
            "page-",
            "page-5.tmp",
            "page-0000000005.tmp.tmp",
        ] {
            assert_eq!(of(alias), EntryName::NonCanonical, "{alias}");
        }
        for other in [
            "notes.txt",
            "lost+found",
            "pages",
            "page",
            "x-page-0000000005.bin",
        ] {
            assert_eq!(of(other), EntryName::Unrelated, "{other}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            assert_eq!(
                classify(OsStr::from_bytes(b"page-000000000\xff.bin")),
                EntryName::NonCanonical
            );
            assert_eq!(
                classify(OsStr::from_bytes(b"\xffpage-0000000005.bin")),
                EntryName::Unrelated
            );
        }
    }

    fn rejected(result: Result<FilePages, PagesError>) -> (String, DirEntryProblem) {
        match result {
            Err(PagesError::UnexpectedEntry { path, problem }) => (path, problem),
            other => panic!("expected an UnexpectedEntry, got {other:?}"),
        }
    }

    #[test]
    fn a_non_canonical_alias_is_rejected_and_never_resurrects_a_zeroed_page() {
        let dir = temp_dir("alias");
        let mut p = FilePages::open(&dir, 64, 8).unwrap();
        p.save(5, b"stale").unwrap();
        // A valid file for page 5: loaded under any name, it would bring "stale" back.
        let stale = fs::read(p.path(5, "bin")).unwrap();
        p.zero(5).unwrap();
        drop(p);
        for alias in ["page-5.bin", "page-+5.bin", "page-05.bin"] {
            fs::write(dir.join(alias), &stale).unwrap();
            let (path, problem) = rejected(FilePages::open(&dir, 64, 8));
            assert_eq!(problem, DirEntryProblem::NonCanonicalName, "{alias}");
            assert!(path.ends_with(alias), "{path} names {alias}");
            fs::remove_file(dir.join(alias)).unwrap();
            // Once the operator removes the alias, the zeroed page is still zero.
            let q = FilePages::open(&dir, 64, 8).unwrap();
            assert_eq!(q.load(5).unwrap(), None, "{alias}");
            assert!(q.corrupt_pages().is_empty());
        }
        // Several at once: the error names the first by path order, and none is loaded.
        for alias in ["page-5.bin", "page-05.bin", "page-+5.bin"] {
            fs::write(dir.join(alias), &stale).unwrap();
        }
        let (path, _) = rejected(FilePages::open(&dir, 64, 8));
        assert!(path.ends_with("page-+5.bin"), "{path}");
        // A non-canonical temp name is not ours to delete either.
        for alias in ["page-5.bin", "page-05.bin", "page-+5.bin"] {
            fs::remove_file(dir.join(alias)).unwrap();
        }
        fs::write(dir.join("page-5.tmp"), b"x").unwrap();
        let (path, problem) = rejected(FilePages::open(&dir, 64, 8));
        assert_eq!(problem, DirEntryProblem::NonCanonicalName);
        assert!(path.ends_with("page-5.tmp"), "{path}");
        assert!(dir.join("page-5.tmp").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_growing_or_endless_file_is_never_read_past_its_bound() {
        // An endless source stands for a file that grows between its checks and the read.
        match read_bounded(std::io::repeat(7), Path::new("endless"), 100, 10) {
            Err(ReadFail::TooLong(len)) => assert_eq!(len, 101),
            other => panic!("expected TooLong, got {other:?}"),
        }
        let exact = read_bounded(&[7u8; 100][..], Path::new("exact"), 100, 100);
        assert_eq!(exact.unwrap(), vec![7u8; 100]);
    }

    #[test]
    fn unrelated_entries_are_left_alone() {
        let dir = temp_dir("unrelated");
        let mut p = FilePages::open(&dir, 64, 2).unwrap();
        p.save(1, b"kept").unwrap();
        fs::write(dir.join("notes.txt"), b"operator notes").unwrap();
        fs::create_dir(dir.join("lost+found")).unwrap();
        let q = FilePages::open(&dir, 64, 2).unwrap();
        assert_eq!(q.load(1).unwrap(), Some(&b"kept"[..]));
        assert!(dir.join("notes.txt").exists() && dir.join("lost+found").is_dir());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Runs `f` on another thread and fails (instead of hanging) if it does not finish within a
    /// generous minute: a guard against a regression that blocks, not a speed check.
    #[cfg(unix)]
    fn without_hanging<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(v) => v,
            Err(_) => panic!("{what} blocked"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_page_file_is_rejected_without_reading_its_target() {
        use std::os::unix::fs::symlink;
        let dir = temp_dir("symlink");
        let outside = temp_dir("symlink-target");
        fs::create_dir_all(&outside).unwrap();
        // 256 MiB, sparse: reading it whole is what the size bound forbids.
        let big = outside.join("big");
        fs::File::create(&big).unwrap().set_len(256 << 20).unwrap();
        let mut p = FilePages::open(&dir, 64, 4).unwrap();
        p.save(2, b"valid page 2").unwrap();
        let valid = outside.join("valid");
        fs::copy(p.path(2, "bin"), &valid).unwrap();
        p.zero(2).unwrap();
        drop(p);
        // To the huge file and to a perfectly valid page file alike: never followed.
        for (target, id) in [(&big, 1), (&valid, 2)] {
            let link = dir.join(file_name(id, "bin"));
            symlink(target, &link).unwrap();
            let (path, problem) = rejected(FilePages::open(&dir, 64, 4));
            assert_eq!(problem, DirEntryProblem::Symlink);
            assert_eq!(path, link.display().to_string());
            // Swapped in after the lstat, the open itself refuses it (O_NOFOLLOW).
            assert!(matches!(
                read_opened(&link, 84),
                Err(ReadFail::Rejected(DirEntryProblem::Symlink))
            ));
            fs::remove_file(&link).unwrap();
        }
        // A symlinked temp name is rejected too, not deleted as a leftover write.
        let link = dir.join(file_name(3, "tmp"));
        symlink(&valid, &link).unwrap();
        let (_, problem) = rejected(FilePages::open(&dir, 64, 4));
        assert_eq!(problem, DirEntryProblem::Symlink);
        fs::remove_file(&link).unwrap();
        // The huge file swapped in as a regular file after the lstat: the check on the open
        // handle reports its full size, so nothing was read (a read would stop at 85 bytes).
        let swapped = dir.join(file_name(1, "bin"));
        fs::rename(&big, &swapped).unwrap();
        match read_opened(&swapped, 84) {
            Err(ReadFail::TooLong(len)) => assert_eq!(len, 256 << 20),
            other => panic!("expected TooLong, got {other:?}"),
        }
        let q = FilePages::open(&dir, 64, 4).unwrap();
        assert!(matches!(q.load(1), Err(PagesError::Corrupt { id: 1, .. })));
        assert_eq!(q.load(2).unwrap(), None);
        assert_eq!(fs::read(&valid).unwrap().len(), HEADER_BYTES + 12);
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_named_like_a_page_does_not_block_the_open() {
        let dir = temp_dir("fifo");
        fs::create_dir_all(&dir).unwrap();
        for name in [file_name(1, "bin"), file_name(1, "tmp")] {
            let fifo = dir.join(&name);
            let status = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(status.success(), "mkfifo {name}");
            let d = dir.clone();
            let (path, problem) =
                rejected(without_hanging("FilePages::open on a FIFO", move || {
                    FilePages::open(d, 64, 4)
                }));
            assert_eq!(problem, DirEntryProblem::Fifo);
            assert_eq!(path, fifo.display().to_string());
            // Swapped in after the lstat, the open does not wait for a writer (O_NONBLOCK) and
            // the check on the handle rejects it.
            let f = fifo.clone();
            let read = without_hanging("opening a FIFO", move || read_opened(&f, 84));
            assert!(matches!(
                read,
                Err(ReadFail::Rejected(DirEntryProblem::Fifo))
            ));
            fs::remove_file(&fifo).unwrap();
        }
        assert!(FilePages::open(&dir, 64, 4).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn directories_and_sockets_named_like_pages_are_rejected() {
        let dir = temp_dir("special");
        fs::create_dir_all(&dir).unwrap();
        for name in [file_name(1, "bin"), file_name(1, "tmp")] {
            let sub = dir.join(&name);
            fs::create_dir(&sub).unwrap();
            let (path, problem) = rejected(FilePages::open(&dir, 64, 4));
            assert_eq!(problem, DirEntryProblem::Directory, "{name}");
            assert_eq!(path, sub.display().to_string());
            fs::remove_dir(&sub).unwrap();
        }
        let sock = dir.join(file_name(2, "bin"));
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let (_, problem) = rejected(FilePages::open(&dir, 64, 4));
        assert_eq!(problem, DirEntryProblem::Socket);
        drop(listener);
        fs::remove_file(&sock).unwrap();
        assert!(FilePages::open(&dir, 64, 4).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_save_never_writes_through_a_planted_temp_file() {
        use std::os::unix::fs::symlink;
        let dir = temp_dir("planted-tmp");
        let outside = temp_dir("planted-tmp-target");
        fs::create_dir_all(&outside).unwrap();
        let victim = outside.join("victim");
        fs::write(&victim, b"not yours").unwrap();
        let mut p = FilePages::open(&dir, 64, 4).unwrap();
        symlink(&victim, p.path(1, "tmp")).unwrap();
        p.save(1, b"page one").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"not yours");
        let q = FilePages::open(&dir, 64, 4).unwrap();
        assert_eq!(q.load(1).unwrap(), Some(&b"page one"[..]));
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn an_unfinished_write_leaves_the_old_page() {
        let dir = temp_dir("torn");
        let mut p = FilePages::open(&dir, 64, 2).unwrap();
        p.save(1, b"old").unwrap();
        // A crash after writing the temp file but before the rename.
        fs::write(p.path(1, "tmp"), b"CCPG half a new pa").unwrap();
        let q = FilePages::open(&dir, 64, 2).unwrap();
        assert_eq!(q.load(1).unwrap(), Some(&b"old"[..]));
        assert!(!q.path(1, "tmp").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
