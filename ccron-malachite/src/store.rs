//! The node's durable application store: the decided blocks, their commit certificates and the
//! signed clock samples of each height, in an append-only, checksummed file.
//!
//! Every decision is appended and fsync'ed before the node acknowledges it to the engine, so a
//! SIGKILL loses nothing the engine considers committed. On open the file is read back; a torn
//! last record (a crash mid-write) is detected by its length and CRC and truncated away. The
//! application state is rebuilt by re-executing the decided blocks in order (it is a pure function
//! of them), and the store serves the engine's sync requests for late joiners.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use borsh::{BorshDeserialize, BorshSerialize};
use malachitebft_core_types::{CommitCertificate, SignedExtension};

use crate::context::{Address, Block, Ctx, Height};

/// Largest record accepted when reading the store back.
pub const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// One decided height.
#[derive(Clone, Debug, BorshSerialize, BorshDeserialize)]
pub struct Decided {
    /// The decided block.
    pub block: Block,
    /// Its commit certificate.
    pub certificate: CommitCertificate<Ctx>,
    /// The signed clock samples on the deciding precommits.
    pub extensions: Vec<(Address, SignedExtension<Ctx>)>,
}

impl Decided {
    /// The height.
    pub fn height(&self) -> Height {
        self.certificate.height
    }
}

/// A store error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An I/O error on the store file.
    #[error("store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A record does not decode (not a torn tail: a corrupt middle).
    #[error("store {path}: corrupt record at offset {offset}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
    },
    /// A decision out of order (not the next height).
    #[error("decision for height {got} but the next height is {expected}")]
    OutOfOrder {
        /// The height appended.
        got: u64,
        /// The next height.
        expected: u64,
    },
}

/// The decided-block store.
#[derive(Debug)]
pub struct BlockStore {
    path: PathBuf,
    file: File,
    decided: Vec<Decided>,
}

impl BlockStore {
    /// Opens (or creates) the store, reading back every record and truncating a torn tail.
    ///
    /// # Errors
    /// I/O errors, and a corrupt record that is not the last one.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (mut file, bytes) = open_and_read(path)?;
        let mut decided: Vec<Decided> = Vec::new();
        let mut off = 0usize;
        let mut good_end = 0usize;
        while off < bytes.len() {
            let Some(rec) = read_record(&bytes, off) else {
                break;
            };
            let (payload, next) = rec;
            match borsh::from_slice::<Decided>(payload) {
                Ok(d) if d.height().0 == decided.len() as u64 + 1 => decided.push(d),
                _ => {
                    return Err(StoreError::Corrupt {
                        path: path.to_path_buf(),
                        offset: off as u64,
                    });
                }
            }
            off = next;
            good_end = next;
        }
        if good_end < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                torn_bytes = bytes.len() - good_end,
                "store: truncating a torn last record"
            );
            file.set_len(good_end as u64).map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
        }
        Ok(BlockStore {
            path: path.to_path_buf(),
            file,
            decided,
        })
    }

    /// The last decided height (0 if none).
    pub fn last_height(&self) -> u64 {
        self.decided.len() as u64
    }

    /// The decision at `height`.
    pub fn get(&self, height: u64) -> Option<&Decided> {
        let i = usize::try_from(height.checked_sub(1)?).ok()?;
        self.decided.get(i)
    }

    /// Every decision, in height order.
    pub fn all(&self) -> &[Decided] {
        &self.decided
    }

    /// Appends the next decision and fsyncs it.
    ///
    /// # Errors
    /// I/O errors; a decision that is not for the next height.
    pub fn append(&mut self, d: Decided) -> Result<(), StoreError> {
        let expected = self.last_height() + 1;
        if d.height().0 != expected {
            return Err(StoreError::OutOfOrder {
                got: d.height().0,
                expected,
            });
        }
        append_synced(&mut self.file, &self.path, &d)?;
        self.decided.push(d);
        Ok(())
    }
}

/// One record at `off`: (payload, next offset), or None for a torn or bad tail.
fn read_record(bytes: &[u8], off: usize) -> Option<(&[u8], usize)> {
    let len_bytes: [u8; 4] = bytes.get(off..off + 4)?.try_into().ok()?;
    let crc_bytes: [u8; 4] = bytes.get(off + 4..off + 8)?.try_into().ok()?;
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len > MAX_RECORD_BYTES {
        return None;
    }
    let payload = bytes.get(off + 8..off + 8 + len)?;
    if crc32fast::hash(payload) != u32::from_le_bytes(crc_bytes) {
        return None;
    }
    Some((payload, off + 8 + len))
}

/// The proposal parts this node has seen or made and told the engine about, not yet decided.
///
/// The engine's WAL keeps the proposed values it has seen, and replays them after a crash: the
/// node must still know those blocks when they are decided, and must re-propose the very same
/// block if it was the proposer (a different one would equivocate). Each part is appended and
/// fsync'ed before the engine hears of it. The file is compacted when it grows.
#[derive(Debug)]
pub struct PartLog {
    path: PathBuf,
    file: File,
    parts: Vec<crate::context::ProposalPart>,
    bytes: u64,
}

/// Compact the part log past this size.
const PART_LOG_COMPACT_BYTES: u64 = 1024 * 1024;

impl PartLog {
    /// Opens (or creates) the log and reads it back (a torn tail is dropped).
    ///
    /// # Errors
    /// I/O errors.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (mut file, bytes) = open_and_read(path)?;
        let mut parts = Vec::new();
        let mut off = 0usize;
        while let Some((payload, next)) = read_record(&bytes, off) {
            // A record with a good checksum that does not decode is corruption, not a torn tail:
            // dropping it silently could make this node re-propose a different block.
            let part =
                borsh::from_slice::<crate::context::ProposalPart>(payload).map_err(|_| {
                    StoreError::Corrupt {
                        path: path.to_path_buf(),
                        offset: off as u64,
                    }
                })?;
            parts.push(part);
            off = next;
        }
        if off < bytes.len() {
            file.set_len(off as u64).map_err(io)?;
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
    pub fn parts(&self) -> &[crate::context::ProposalPart] {
        &self.parts
    }

    /// Appends a part and fsyncs it.
    ///
    /// # Errors
    /// I/O errors.
    pub fn append(&mut self, part: &crate::context::ProposalPart) -> Result<(), StoreError> {
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
        self.parts.retain(|p| p.height.0 > height);
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
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        self.bytes = out.len() as u64;
        Ok(())
    }
}

/// Opens (or creates) a record file for appending and reads it whole.
fn open_and_read(path: &Path) -> Result<(File, Vec<u8>), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(io)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;
    Ok((file, bytes))
}

/// Appends `value` as one record and fsyncs it; the record's length in bytes.
fn append_synced<T: BorshSerialize>(
    file: &mut File,
    path: &Path,
    value: &T,
) -> Result<u64, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let rec = encode_record(value).map_err(io)?;
    file.write_all(&rec).map_err(io)?;
    file.sync_data().map_err(io)?;
    Ok(rec.len() as u64)
}

/// One record: length, CRC-32 of the payload, payload. A payload above [`MAX_RECORD_BYTES`] is
/// refused here: [`read_record`] would take it for a torn tail and drop it and every later record.
fn encode_record<T: BorshSerialize>(value: &T) -> std::io::Result<Vec<u8>> {
    let payload = borsh::to_vec(value)?;
    if payload.len() > MAX_RECORD_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "record of {} bytes exceeds MAX_RECORD_BYTES = {MAX_RECORD_BYTES}",
                payload.len()
            ),
        ));
    }
    let mut rec = Vec::with_capacity(payload.len() + 8);
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    rec.extend_from_slice(&payload);
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_record_is_refused_not_written() {
        // Written, it would read back as a torn tail and take every later record with it.
        let big = vec![7u8; MAX_RECORD_BYTES];
        assert!(encode_record(&big).is_err());
        let small = vec![7u8; 16];
        let rec = encode_record(&small).unwrap();
        let (payload, next) = read_record(&rec, 0).unwrap();
        assert_eq!(next, rec.len());
        assert_eq!(borsh::from_slice::<Vec<u8>>(payload).unwrap(), small);
    }

    #[test]
    fn a_part_record_that_does_not_decode_is_corruption_not_skipped() {
        let dir = std::env::temp_dir().join(format!("ccron-partlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("parts.log");
        // A record with a good checksum whose payload is no proposal part.
        std::fs::write(&path, encode_record(&vec![0xffu8; 3]).unwrap()).unwrap();
        let opened = PartLog::open(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            matches!(opened, Err(StoreError::Corrupt { offset: 0, .. })),
            "{opened:?}"
        );
    }
}
