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
//! is deleted on open. A page whose file fails its checks (torn by a file system without atomic
//! rename, bit rot, truncation) is never loaded as valid: [`ReservedPages::load`] reports
//! [`PagesError::Corrupt`] for it until it is written again.
//!
//! Pages are cached in memory (the trait hands out borrowed slices); the store is meant for the
//! few hundred pages a replica reserves, not for bulk data.

use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::pages::{PageId, PagesError, ReservedPages, check_page};

const MAGIC: [u8; 4] = *b"CCPG";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 20;

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

impl FilePages {
    /// Opens (creating if needed) the store in `dir` with `num_pages` pages of `page_size` bytes,
    /// loading and checking every page file.
    ///
    /// Corrupt pages do not fail the open: they are listed by
    /// [`corrupt_pages`](Self::corrupt_pages) and fail their `load`.
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
        let listing = fs::read_dir(&store.dir).map_err(|e| io_err("listing", &store.dir, e))?;
        for item in listing {
            let item = item.map_err(|e| io_err("listing", &store.dir, e))?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = item.path();
            if name.starts_with("page-") && name.ends_with(".tmp") {
                // A save that crashed before its rename: the old page file is still intact.
                fs::remove_file(&path).map_err(|e| io_err("removing", &path, e))?;
                tracing::info!(file = %path.display(), "removed an unfinished page write");
                continue;
            }
            let Some(id) = name
                .strip_prefix("page-")
                .and_then(|s| s.strip_suffix(".bin"))
                .and_then(|s| s.parse::<PageId>().ok())
            else {
                continue;
            };
            if id >= num_pages {
                tracing::warn!(id, num_pages, "page file beyond the store's pages ignored");
                continue;
            }
            // Bound what a hostile or corrupt file can make us allocate: a valid page file is
            // never longer than the header plus a page.
            let len = item
                .metadata()
                .map_err(|e| io_err("inspecting", &path, e))?
                .len();
            if len > (HEADER_BYTES + page_size) as u64 {
                let reason = format!("{len}-byte file exceeds header plus page size");
                tracing::error!(id, %reason, "corrupt page file");
                store.corrupt.insert(id, reason);
                continue;
            }
            let bytes = fs::read(&path).map_err(|e| io_err("reading", &path, e))?;
            match store.check_file(id, &bytes) {
                Ok(data) => {
                    store.pages.insert(id, data.to_vec());
                }
                Err(reason) => {
                    tracing::error!(id, %reason, "corrupt page file");
                    store.corrupt.insert(id, reason);
                }
            }
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
        self.dir.join(format!("page-{id:010}.{ext}"))
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

    fn sync_dir(&self) -> Result<(), PagesError> {
        // A rename or unlink is durable only once the directory entry is.
        fs::File::open(&self.dir)
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
        {
            let mut f = fs::File::create(&tmp).map_err(|e| io_err("creating", &tmp, e))?;
            f.write_all(&file).map_err(|e| io_err("writing", &tmp, e))?;
            f.sync_all().map_err(|e| io_err("syncing", &tmp, e))?;
        }
        fs::rename(&tmp, &dst).map_err(|e| io_err("renaming", &tmp, e))?;
        self.sync_dir()?;
        self.pages.insert(id, data.to_vec());
        self.corrupt.remove(&id);
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
