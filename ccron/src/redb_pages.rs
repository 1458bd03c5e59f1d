//! [`RedbPages`]: reserved pages in a [redb](https://docs.rs/redb) database file (cargo feature
//! `redb`), beside [`crate::FilePages`].
//!
//! redb is a pure-Rust embedded key-value store with ACID write transactions (copy-on-write
//! B-trees, a checksummed commit, an fsync per commit by default). Each page is one entry of
//! the table `ccron_pages` (page id -> bytes); every [`ReservedPages::save`] and
//! [`ReservedPages::zero`] is one write transaction, committed durably before it returns, so a
//! crash leaves each page either old or new, as with `FilePages` (checked by
//! `ccron/tests/table/pages_crash.rs`, which kills a child process writing through either backend).
//!
//! Pages are cached in memory (the trait hands out borrowed slices) and read once at
//! [`RedbPages::open`]: an entry longer than the page size or with an id past the store is a
//! typed error or a warning, never a panic. The database file is the operator's configuration,
//! like `FilePages`' directory path; redb itself verifies its pages' checksums.
//!
//! Measured against `FilePages` in `cargo bench -p ccron --features redb --bench pages`
//! (`docs/benchmarks.md`, "reserved pages backends").

use std::collections::BTreeMap;
use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};

use crate::pages::{PageId, PagesError, ReservedPages, check_page};

const TABLE: TableDefinition<u32, &[u8]> = TableDefinition::new("ccron_pages");

fn io(what: &str, e: impl std::fmt::Display) -> PagesError {
    PagesError::Io(format!("redb {what}: {e}"))
}

/// Reserved pages kept in one redb database file, one entry per non-empty page.
pub struct RedbPages {
    db: Database,
    page_size: usize,
    num_pages: u32,
    pages: BTreeMap<PageId, Vec<u8>>,
}

impl std::fmt::Debug for RedbPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbPages")
            .field("page_size", &self.page_size)
            .field("num_pages", &self.num_pages)
            .field("stored", &self.pages.len())
            .finish()
    }
}

impl RedbPages {
    /// Opens (or creates) the database at `path` as a store of `num_pages` pages of `page_size`
    /// bytes and reads every stored page.
    ///
    /// # Errors
    /// [`PagesError::Io`] (redb failed: not a redb file, I/O), [`PagesError::Corrupt`] (a
    /// stored page is longer than `page_size`).
    pub fn open(path: &Path, page_size: usize, num_pages: u32) -> Result<Self, PagesError> {
        let db = Database::create(path).map_err(|e| io("open", e))?;
        let w = db.begin_write().map_err(|e| io("begin", e))?;
        {
            w.open_table(TABLE).map_err(|e| io("table", e))?;
        }
        w.commit().map_err(|e| io("commit", e))?;
        let mut pages = BTreeMap::new();
        {
            let r = db.begin_read().map_err(|e| io("begin read", e))?;
            let t = r.open_table(TABLE).map_err(|e| io("table", e))?;
            for item in t.iter().map_err(|e| io("iterate", e))? {
                let (k, v) = item.map_err(|e| io("read", e))?;
                let id = k.value();
                let data = v.value();
                if id >= num_pages {
                    tracing::warn!(id, num_pages, "redb page past the store ignored");
                    continue;
                }
                if data.len() > page_size {
                    return Err(PagesError::Corrupt {
                        id,
                        reason: format!("{} bytes in a page of {page_size}", data.len()),
                    });
                }
                if !data.is_empty() {
                    pages.insert(id, data.to_vec());
                }
            }
        }
        Ok(Self {
            db,
            page_size,
            num_pages,
            pages,
        })
    }

    fn write(&mut self, id: PageId, data: Option<&[u8]>) -> Result<(), PagesError> {
        self.write_all(&[(id, data)])
    }

    /// Writes (`Some`) or removes (`None`) every page in one durable transaction.
    fn write_all(&mut self, writes: &[(PageId, Option<&[u8]>)]) -> Result<(), PagesError> {
        let w = self.db.begin_write().map_err(|e| io("begin", e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| io("table", e))?;
            for (id, data) in writes {
                match data {
                    Some(d) => {
                        t.insert(*id, *d).map_err(|e| io("insert", e))?;
                    }
                    None => {
                        t.remove(*id).map_err(|e| io("remove", e))?;
                    }
                }
            }
        }
        w.commit().map_err(|e| io("commit", e))?;
        for (id, data) in writes {
            match data {
                Some(d) => {
                    self.pages.insert(*id, d.to_vec());
                }
                None => {
                    self.pages.remove(id);
                }
            }
        }
        Ok(())
    }
}

impl ReservedPages for RedbPages {
    fn page_size(&self) -> usize {
        self.page_size
    }

    fn num_pages(&self) -> u32 {
        self.num_pages
    }

    fn load(&self, id: PageId) -> Result<Option<&[u8]>, PagesError> {
        check_page(id, 0, self.num_pages, self.page_size)?;
        Ok(self.pages.get(&id).map(Vec::as_slice))
    }

    fn save(&mut self, id: PageId, data: &[u8]) -> Result<(), PagesError> {
        check_page(id, data.len(), self.num_pages, self.page_size)?;
        if data.is_empty() {
            return self.zero(id);
        }
        self.write(id, Some(data))
    }

    fn zero(&mut self, id: PageId) -> Result<(), PagesError> {
        check_page(id, 0, self.num_pages, self.page_size)?;
        if !self.pages.contains_key(&id) {
            return Ok(());
        }
        self.write(id, None)
    }

    /// One durable transaction for the whole batch (atomic here, stronger than the trait
    /// asks).
    fn save_batch(&mut self, writes: &[(PageId, &[u8])]) -> Result<(), PagesError> {
        for (id, data) in writes {
            check_page(*id, data.len(), self.num_pages, self.page_size)?;
        }
        let batch: Vec<(PageId, Option<&[u8]>)> = writes
            .iter()
            .map(|(id, d)| (*id, (!d.is_empty()).then_some(*d)))
            .collect();
        self.write_all(&batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_through_a_reopen() {
        let dir = std::env::temp_dir().join(format!("ccron-redb-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pages.redb");
        {
            let mut p = RedbPages::open(&path, 64, 4).unwrap();
            p.save(1, b"hello").unwrap();
            p.save(2, b"x").unwrap();
            p.zero(2).unwrap();
            assert!(matches!(
                p.save(4, b"y"),
                Err(PagesError::OutOfRange { .. })
            ));
            assert!(matches!(
                p.save(0, &[0; 65]),
                Err(PagesError::TooLarge { .. })
            ));
        }
        {
            let p = RedbPages::open(&path, 64, 4).unwrap();
            assert_eq!(p.load(1).unwrap(), Some(&b"hello"[..]));
            assert_eq!(p.load(2).unwrap(), None);
        }
        assert!(matches!(
            RedbPages::open(&path, 3, 4),
            Err(PagesError::Corrupt { id: 1, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
