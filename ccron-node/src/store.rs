//! The node's durable application store: the decided blocks, their commit certificates and the
//! signed clock samples of each height, in an append-only, checksummed file.
//!
//! Every decision is appended and fsync'ed before the node acknowledges it to the engine, so a
//! SIGKILL loses nothing the engine considers committed. On open the file is scanned once, one
//! record at a time; a torn last record (a crash mid-write) is detected by its length and CRC and
//! truncated away. Only an offset index and the last decision stay in memory: other heights are
//! read on demand (the engine's sync requests for late joiners, the restart replay). The
//! application state is restored from the newest valid snapshot (`crate::snapshot`) and the
//! blocks above it are re-executed (the state is a pure function of the decided blocks).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use borsh::{BorshDeserialize, BorshSerialize};

use crate::types::{Address, Block, CarriedSample, Hash32};

/// Largest record accepted when reading the store back.
pub const MAX_RECORD_BYTES: usize = 4 * 1024 * 1024;

/// What an engine's commit of a height carries, stored with the block: the certificate and the
/// signed clock samples of its precommits. The node needs only what this trait gives; the engine
/// adapter implements it for its own record.
pub trait Commit:
    BorshSerialize + BorshDeserialize + Clone + std::fmt::Debug + Send + 'static
{
    /// The committed height.
    fn height(&self) -> u64;
    /// The round the value was committed in.
    fn round(&self) -> u32;
    /// The committed value's id.
    fn value_id(&self) -> Hash32;
    /// The signed clock samples of the commit's precommits (the next block carries them).
    fn samples(&self) -> Vec<CarriedSample>;
    /// The bytes `validator` signed for its clock sample `time_ms` on a precommit of value `id`
    /// in round `round` at `height` (the engine's vote-extension scope).
    fn sample_message(
        height: u64,
        round: u32,
        id: &Hash32,
        validator: &Address,
        time_ms: i64,
    ) -> Vec<u8>;
}

/// A commit record without an engine: height, round, value id and the carried samples, with
/// the sample message `(domain, height, round, id, validator, time)` borsh-encoded. For tools and
/// tests that drive a node's stores and ledger without consensus.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct PlainCommit {
    /// The height.
    pub height: u64,
    /// The round.
    pub round: u32,
    /// The value id.
    pub value_id: Hash32,
    /// The samples.
    pub samples: Vec<CarriedSample>,
}

impl PlainCommit {
    /// The round-0 commit of `block`, without samples.
    pub fn of(block: &Block) -> Self {
        Self {
            height: block.height,
            round: 0,
            value_id: block.id(),
            samples: Vec::new(),
        }
    }
}

impl Commit for PlainCommit {
    fn height(&self) -> u64 {
        self.height
    }
    fn round(&self) -> u32 {
        self.round
    }
    fn value_id(&self) -> Hash32 {
        self.value_id
    }
    fn samples(&self) -> Vec<CarriedSample> {
        self.samples.clone()
    }
    fn sample_message(height: u64, round: u32, id: &Hash32, v: &Address, t: i64) -> Vec<u8> {
        borsh::to_vec(&(b"ccron-node/plain-sample", height, round, id, v, t)).unwrap_or_default()
    }
}

/// One decided height: the block and the engine's commit of it. (Encoded as the block followed
/// by the commit.)
#[derive(Clone, Debug, BorshSerialize, BorshDeserialize)]
pub struct Decided<C> {
    /// The decided block.
    pub block: Block,
    /// The engine's commit of it.
    pub commit: C,
}

impl<C: Commit> Decided<C> {
    /// The height.
    pub fn height(&self) -> u64 {
        self.commit.height()
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

/// The decided-block store: the record file plus an in-memory offset index (8 bytes per height)
/// and the last decision. Every other decision is read from the file on demand (the engine's
/// value sync, the restart replay above the newest snapshot), one record at a time and bounded
/// by [`MAX_RECORD_BYTES`]: memory does not grow with the chain.
#[derive(Debug)]
pub struct BlockStore<C> {
    path: PathBuf,
    file: File,
    /// `offsets[i]`: where the record of height `i + 1` starts.
    offsets: Vec<u64>,
    /// The last decision (the next height's samples, time and scope come from it).
    last: Option<Decided<C>>,
    /// The file's length: where the next record starts.
    end: u64,
}

impl<C: Commit> BlockStore<C> {
    /// Opens (or creates) the store: reads the records back one at a time (each decoded and
    /// checked to be the next height), indexes them and truncates a torn tail.
    ///
    /// # Errors
    /// I/O errors, and a corrupt record that is not the last one.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = open_record_file(path)?;
        let len = file.metadata().map_err(io)?.len();
        let mut offsets: Vec<u64> = Vec::new();
        let mut last = None;
        let mut off = 0u64;
        {
            let mut reader = std::io::BufReader::new(&file);
            while off < len {
                let Some((payload, next)) = read_record_from(&mut reader, off, len).map_err(io)?
                else {
                    break;
                };
                match borsh::from_slice::<Decided<C>>(&payload) {
                    Ok(d) if d.height() == offsets.len() as u64 + 1 => {
                        offsets.push(off);
                        last = Some(d);
                    }
                    _ => {
                        return Err(StoreError::Corrupt {
                            path: path.to_path_buf(),
                            offset: off,
                        });
                    }
                }
                off = next;
            }
        }
        if off < len {
            tracing::warn!(
                path = %path.display(),
                torn_bytes = len - off,
                "store: truncating a torn last record"
            );
            file.set_len(off).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        Ok(BlockStore {
            path: path.to_path_buf(),
            file,
            offsets,
            last,
            end: off,
        })
    }

    /// The last decided height (0 if none).
    pub fn last_height(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// The last decision (kept in memory).
    pub fn last(&self) -> Option<&Decided<C>> {
        self.last.as_ref()
    }

    /// The decision at `height` (`None` above the last height or at 0): the last one from
    /// memory, any other read from the file (bounded by [`MAX_RECORD_BYTES`], checksum and
    /// height checked).
    ///
    /// # Errors
    /// I/O errors; a record that no longer reads back (the file changed under the node).
    pub fn get(&self, height: u64) -> Result<Option<Decided<C>>, StoreError> {
        if height == 0 || height > self.last_height() {
            return Ok(None);
        }
        if height == self.last_height() {
            return Ok(self.last.clone());
        }
        let i = usize::try_from(height - 1).map_err(|_| self.corrupt(0))?;
        let off = *self.offsets.get(i).ok_or_else(|| self.corrupt(0))?;
        let d = self.read_at(off)?;
        if d.height() != height {
            return Err(self.corrupt(off));
        }
        Ok(Some(d))
    }

    /// The record at `off`, read with positioned reads (the append handle is not moved).
    fn read_at(&self, off: u64) -> Result<Decided<C>, StoreError> {
        use std::os::unix::fs::FileExt;
        let io = |source| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let mut header = [0u8; 8];
        self.file.read_exact_at(&mut header, off).map_err(io)?;
        let (len, crc) = split_header(&header);
        if len > MAX_RECORD_BYTES {
            return Err(self.corrupt(off));
        }
        let mut payload = vec![0u8; len];
        self.file.read_exact_at(&mut payload, off + 8).map_err(io)?;
        if crc32fast::hash(&payload) != crc {
            return Err(self.corrupt(off));
        }
        borsh::from_slice::<Decided<C>>(&payload).map_err(|_| self.corrupt(off))
    }

    fn corrupt(&self, offset: u64) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            offset,
        }
    }

    /// Appends the next decision and fsyncs it.
    ///
    /// # Errors
    /// I/O errors; a decision that is not for the next height.
    pub fn append(&mut self, d: Decided<C>) -> Result<(), StoreError> {
        let expected = self.last_height() + 1;
        if d.height() != expected || d.block.height != expected {
            return Err(StoreError::OutOfOrder {
                got: d.height(),
                expected,
            });
        }
        let written = append_synced(&mut self.file, &self.path, &d)?;
        self.offsets.push(self.end);
        self.end += written;
        self.last = Some(d);
        Ok(())
    }
}

/// A record header: (payload length, CRC-32).
fn split_header(header: &[u8; 8]) -> (usize, u32) {
    let [a, b, c, d, e, f, g, h] = *header;
    (
        u32::from_le_bytes([a, b, c, d]) as usize,
        u32::from_le_bytes([e, f, g, h]),
    )
}

/// Reads the record at `off` from a reader positioned there, in a file of `len` bytes:
/// `Some((payload, next offset))`, or `None` for a torn or bad tail (short header or payload,
/// length above [`MAX_RECORD_BYTES`] or past the end, checksum mismatch).
fn read_record_from(
    reader: &mut impl Read,
    off: u64,
    len: u64,
) -> std::io::Result<Option<(Vec<u8>, u64)>> {
    if len.saturating_sub(off) < 8 {
        return Ok(None);
    }
    let mut header = [0u8; 8];
    reader.read_exact(&mut header)?;
    let (n, crc) = split_header(&header);
    if n > MAX_RECORD_BYTES || len - off - 8 < n as u64 {
        return Ok(None);
    }
    let mut payload = vec![0u8; n];
    reader.read_exact(&mut payload)?;
    if crc32fast::hash(&payload) != crc {
        return Ok(None);
    }
    Ok(Some((payload, off + 8 + n as u64)))
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
            let part = borsh::from_slice::<P>(payload).map_err(|_| StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: off as u64,
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
    let mut file = open_record_file(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    Ok((file, bytes))
}

/// Opens (or creates) a record file to read it and append to it.
fn open_record_file(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })
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

    type TestCommit = PlainCommit;

    #[derive(Clone, Debug, BorshSerialize, BorshDeserialize)]
    struct TestPart(u64, Vec<u8>);

    impl Part for TestPart {
        fn height(&self) -> u64 {
            self.0
        }
    }

    fn decided(h: u64) -> Decided<TestCommit> {
        let block = Block {
            height: h,
            prev_round: 0,
            prev_id: Hash32::default(),
            samples: Vec::new(),
            agreed_time_ms: 1_000 * h as i64,
            ticks: Vec::new(),
            requests: Vec::new(),
        };
        Decided {
            commit: PlainCommit::of(&block),
            block,
        }
    }

    #[test]
    fn blocks_are_read_on_demand_and_a_torn_tail_is_cut_at_reopen() {
        let dir = std::env::temp_dir().join(format!("ccron-blockstore-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("blocks.log");
        let mut store = BlockStore::<TestCommit>::open(&path).unwrap();
        assert!(store.get(1).unwrap().is_none());
        for h in 1..=10 {
            store.append(decided(h)).unwrap();
        }
        assert!(matches!(
            store.append(decided(12)),
            Err(StoreError::OutOfOrder {
                got: 12,
                expected: 11
            })
        ));
        for h in 1..=10 {
            let d = store.get(h).unwrap().unwrap();
            assert_eq!(d.block, decided(h).block);
        }
        assert!(store.get(0).unwrap().is_none());
        assert!(store.get(11).unwrap().is_none());
        drop(store);
        // A crash mid-append: half a record at the end.
        let rec = encode_record(&decided(11)).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&rec[..rec.len() / 2]).unwrap();
        drop(f);
        let mut store = BlockStore::<TestCommit>::open(&path).unwrap();
        assert_eq!(store.last_height(), 10);
        assert_eq!(store.last().unwrap().block, decided(10).block);
        assert_eq!(store.get(4).unwrap().unwrap().block, decided(4).block);
        store.append(decided(11)).unwrap();
        drop(store);
        let store = BlockStore::<TestCommit>::open(&path).unwrap();
        assert_eq!(store.last_height(), 11);
        assert_eq!(store.get(11).unwrap().unwrap().block, decided(11).block);
        assert_eq!(store.get(7).unwrap().unwrap().block, decided(7).block);
        // A record changed under the node is reported, not returned.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            store.get(1),
            Err(StoreError::Corrupt { offset: 0, .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_part_record_that_does_not_decode_is_corruption_not_skipped() {
        let dir = std::env::temp_dir().join(format!("ccron-partlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("parts.log");
        // A record with a good checksum whose payload is no proposal part.
        std::fs::write(&path, encode_record(&vec![0xffu8; 3]).unwrap()).unwrap();
        let opened = PartLog::<TestPart>::open(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            matches!(opened, Err(StoreError::Corrupt { offset: 0, .. })),
            "{opened:?}"
        );
    }
}
