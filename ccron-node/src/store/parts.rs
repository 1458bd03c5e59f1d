//! The proposal-part log (`parts.log`): what the engine was told of and is not yet decided.
//! Split out of `store.rs` as is (behaviour unchanged).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use borsh::{BorshDeserialize, BorshSerialize};

use super::record::{Damage, Scan, append_synced, encode_record, open_and_read, scan_record};
use super::{StoreError, corrupt_at};

/// The proposal parts this node has seen or made and told the engine about, not yet decided.
///
/// The engine's WAL keeps the proposed values it has seen, and replays them after a crash: the
/// node must still know those blocks when they are decided, and must re-propose the very same
/// block if it was the proposer (a different one would equivocate). Each part is appended and
/// fsync'ed before the engine hears of it. The file is compacted when it grows.
#[derive(Debug)]
pub struct PartLog<P> {
    path: PathBuf,
    file: File,
    parts: Vec<P>,
    bytes: u64,
}

/// An engine's proposal part, as the part log keeps it.
pub trait Part: BorshSerialize + BorshDeserialize + Clone + std::fmt::Debug {
    /// The height it proposes for.
    fn height(&self) -> u64;
}

/// Compact the part log past this size.
const PART_LOG_COMPACT_BYTES: u64 = 1024 * 1024;

impl<P: Part> PartLog<P> {
    /// [`open`](Self::open) for a node that `ran_before` (its engine WAL exists): a missing log
    /// is then refused ([`StoreError::MissingPartLog`]) instead of created empty, since a
    /// restarted proposer that forgot its parts could sign a second block for a round.
    ///
    /// # Errors
    /// As [`open`](Self::open), and the missing log.
    pub fn open_expecting(path: &Path, ran_before: bool) -> Result<Self, StoreError> {
        if ran_before && !path.exists() {
            tracing::error!(path = %path.display(), "part log missing; the node stops");
            return Err(StoreError::MissingPartLog {
                path: path.to_path_buf(),
            });
        }
        Self::open(path)
    }

    /// Opens (or creates) the log and reads it back: a torn last record (incomplete at the
    /// end of the file) is cut; a damaged record anywhere else is refused.
    ///
    /// # Errors
    /// I/O errors; [`StoreError::Corrupt`].
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (mut file, bytes) = open_and_read(path)?;
        let mut parts = Vec::new();
        let mut off = 0usize;
        loop {
            match scan_record(&bytes, off) {
                Scan::Record(payload, next) => {
                    // A record with a good checksum that does not decode is corruption, not a
                    // torn tail: dropping it could make this node re-propose a different block.
                    let part = borsh::from_slice::<P>(payload)
                        .map_err(|_| corrupt_at(path, off as u64, Damage::Decode))?;
                    parts.push(part);
                    off = usize::try_from(next).unwrap_or(usize::MAX);
                }
                Scan::Torn => break,
                Scan::Damaged(reason) => return Err(corrupt_at(path, off as u64, reason)),
            }
        }
        if off < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                offset = off,
                torn_bytes = bytes.len() - off,
                "part log: truncating a torn last record (incomplete at the end of the file)"
            );
            file.set_len(off as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
        }
        Ok(PartLog {
            path: path.to_path_buf(),
            file,
            parts,
            bytes: off as u64,
        })
    }

    /// The parts read back or appended, oldest first.
    pub fn parts(&self) -> &[P] {
        &self.parts
    }

    /// Appends a part and fsyncs it.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append(&mut self, part: &P) -> Result<(), StoreError> {
        let written = append_synced(&mut self.file, &self.path, part)?;
        self.bytes += written;
        self.parts.push(part.clone());
        Ok(())
    }

    /// Forgets parts at or below `height` (decided), rewriting the file when it has grown.
    ///
    /// # Errors
    /// I/O errors.
    pub fn prune(&mut self, height: u64) -> Result<(), StoreError> {
        self.parts.retain(|p| p.height() > height);
        if self.bytes < PART_LOG_COMPACT_BYTES {
            return Ok(());
        }
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let tmp = self.path.with_extension("tmp");
        let mut out = Vec::new();
        for p in &self.parts {
            out.extend_from_slice(&encode_record(p).map_err(io)?);
        }
        {
            let mut f = File::create(&tmp).map_err(io)?;
            f.write_all(&out).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        self.bytes = out.len() as u64;
        Ok(())
    }
}
