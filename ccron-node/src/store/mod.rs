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
//!
//! **Pruning.** [`BlockStore::prune_below`] drops the blocks below a height the snapshots cover:
//! the retained records are copied behind a *base record* (its payload [`BASE_MAGIC`] and the
//! highest pruned height) into `blocks.log.prune`, which is fsync'ed, renamed over `blocks.log`
//! and the directory fsync'ed. A crash before the rename leaves the whole old file (the
//! leftover copy is removed at the next open), after it the pruned one: either opens, and holds
//! every decided height above the retained floor. The base record is checksummed like every
//! other record: a byte flipped in it is [`StoreError::Corrupt`], never a different floor.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use borsh::{BorshDeserialize, BorshSerialize};

mod parts;
mod record;
mod recover;
mod repair;
mod synced;

pub use parts::{Part, PartLog};
pub use record::{Damage, MAX_RECORD_BYTES, Scan, scan_record};
pub use recover::{
    Quarantined, RECOVERY_ENV, RECOVERY_FILE, enabled_from_env as recovery_enabled_from_env,
    note as note_recovery, recorded as recorded_recoveries, recover_at_start, refill_target,
};
pub use repair::{Cut, cut_record_file};
pub use synced::{SYNCED_LOG, SyncedBlock};

use record::{append_synced, encode_record, open_record_file, read_record_from, split_header};

use crate::crypto::{SignedKind, SigningDomain};
use crate::types::{Address, Block, CarriedSample, Hash32};

/// The first 8 bytes of a pruned store's first record, whose payload is exactly these bytes
/// and the highest pruned height (u64 LE): 16 bytes, which no decided block's record is (a
/// block alone encodes to more).
pub const BASE_MAGIC: [u8; 8] = *b"CCRBASE1";

/// The base record's payload for `base` (the highest pruned height).
fn base_payload(base: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&BASE_MAGIC);
    p[8..].copy_from_slice(&base.to_le_bytes());
    p
}

/// The highest pruned height, when `payload` is a base record's.
fn base_of(payload: &[u8]) -> Option<u64> {
    let (magic, base) = (payload.get(..8)?, payload.get(8..)?);
    if payload.len() != 16 || magic != BASE_MAGIC {
        return None;
    }
    Some(u64::from_le_bytes(base.try_into().ok()?))
}

/// The copy a prune writes before renaming it over the store (removed at open when a crash
/// left it behind).
fn prune_tmp(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".prune");
    PathBuf::from(name)
}

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
    /// in round `round` at `height` (the engine's vote-extension scope), in the chain's signing
    /// `domain`.
    fn sample_message(
        domain: &SigningDomain,
        height: u64,
        round: u32,
        id: &Hash32,
        validator: &Address,
        time_ms: i64,
    ) -> Vec<u8>;
}

/// A commit record without an engine: height, round, value id and the carried samples, with
/// the sample message the signing domain's plain-sample tag followed by `(height, round, id,
/// validator, time)` borsh-encoded. For tools and
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
    fn sample_message(
        domain: &SigningDomain,
        height: u64,
        round: u32,
        id: &Hash32,
        v: &Address,
        t: i64,
    ) -> Vec<u8> {
        let fields = borsh::to_vec(&(height, round, id, v, t)).unwrap_or_default();
        domain.message(SignedKind::PlainSample, &fields)
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
    /// A record that fails its checksum, its length bound, its decoding or its height, and is
    /// not a torn last record (bytes follow it, or it is complete at the end of the file): data
    /// this node wrote and fsync'ed changed on disk. The node refuses to start rather than drop
    /// it (and every decided block after it); `repair-store` keeps a copy and cuts the file
    /// there, and the node takes the missing heights from its peers (docs/malachite.md,
    /// "Recovering a corrupt store").
    #[error(
        "store {path}: corrupt record at offset {offset} ({reason}); not a torn tail: refusing \
         to drop it and what follows (recover with `repair-store`, docs/malachite.md)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        reason: Damage,
    },
    /// The part log is missing although this node ran before (its engine WAL exists): without
    /// it a restarted proposer could sign a second block for a round it already proposed in.
    #[error(
        "part log {path} is missing but the node ran before: refusing to start (a restarted \
         proposer could equivocate)"
    )]
    MissingPartLog {
        /// The file.
        path: PathBuf,
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
    /// The highest pruned height (0: nothing pruned); the records hold `base + 1 ..`.
    base: u64,
    /// `offsets[i]`: where the record of height `base + i + 1` starts.
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
        let tmp = prune_tmp(path);
        if tmp.exists() {
            // A prune that crashed before its rename: the store itself is the old, whole file.
            tracing::warn!(path = %tmp.display(), "store: removing an unfinished prune's copy");
            std::fs::remove_file(&tmp).map_err(io)?;
        }
        let mut file = open_record_file(path)?;
        let len = file.metadata().map_err(io)?.len();
        let mut offsets: Vec<u64> = Vec::new();
        let mut last = None;
        let mut base = 0u64;
        let mut off = 0u64;
        {
            let mut reader = std::io::BufReader::new(&file);
            loop {
                match read_record_from(&mut reader, off, len).map_err(io)? {
                    Scan::Record(payload, next) if off == 0 && base_of(&payload).is_some() => {
                        base = base_of(&payload).unwrap_or(0);
                        off = next;
                    }
                    Scan::Record(payload, next) => {
                        let expected = base + offsets.len() as u64 + 1;
                        let damage = match borsh::from_slice::<Decided<C>>(&payload) {
                            Ok(d) if d.height() == expected => {
                                offsets.push(off);
                                last = Some(d);
                                None
                            }
                            Ok(d) => Some(Damage::Height {
                                got: d.height(),
                                expected,
                            }),
                            Err(_) => Some(Damage::Decode),
                        };
                        if let Some(reason) = damage {
                            return Err(corrupt_at(path, off, reason));
                        }
                        off = next;
                    }
                    Scan::Torn => break,
                    Scan::Damaged(reason) => return Err(corrupt_at(path, off, reason)),
                }
            }
        }
        if off < len {
            tracing::warn!(
                path = %path.display(),
                offset = off,
                torn_bytes = len - off,
                "store: truncating a torn last record (incomplete at the end of the file)"
            );
            file.set_len(off).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        Ok(BlockStore {
            path: path.to_path_buf(),
            file,
            base,
            offsets,
            last,
            end: off,
        })
    }

    /// The last decided height (0 if none).
    pub fn last_height(&self) -> u64 {
        self.base + self.offsets.len() as u64
    }

    /// The lowest height the store holds (above the pruned ones): the node's history minimum
    /// (1 when nothing was pruned).
    pub fn first_height(&self) -> u64 {
        self.base + 1
    }

    /// The highest pruned height (0: nothing pruned).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The last decision (kept in memory).
    pub fn last(&self) -> Option<&Decided<C>> {
        self.last.as_ref()
    }

    /// The decision at `height` (`None` above the last height, at or below the pruned base,
    /// or at 0): the last one from memory, any other read from the file (bounded by
    /// [`MAX_RECORD_BYTES`], checksum and height checked).
    ///
    /// # Errors
    /// I/O errors; a record that no longer reads back (the file changed under the node).
    pub fn get(&self, height: u64) -> Result<Option<Decided<C>>, StoreError> {
        if height <= self.base || height > self.last_height() {
            return Ok(None);
        }
        if height == self.last_height() {
            return Ok(self.last.clone());
        }
        let missing = || StoreError::OutOfOrder {
            got: height,
            expected: self.last_height() + 1,
        };
        let i = usize::try_from(height - self.base - 1).map_err(|_| missing())?;
        let off = *self.offsets.get(i).ok_or_else(missing)?;
        let d = self.read_at(off)?;
        if d.height() != height {
            return Err(self.corrupt(
                off,
                Damage::Height {
                    got: d.height(),
                    expected: height,
                },
            ));
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
            return Err(self.corrupt(off, Damage::Length(len)));
        }
        let mut payload = vec![0u8; len];
        self.file.read_exact_at(&mut payload, off + 8).map_err(io)?;
        if crc32fast::hash(&payload) != crc {
            return Err(self.corrupt(off, Damage::Checksum));
        }
        borsh::from_slice::<Decided<C>>(&payload).map_err(|_| self.corrupt(off, Damage::Decode))
    }

    fn corrupt(&self, offset: u64, reason: Damage) -> StoreError {
        corrupt_at(&self.path, offset, reason)
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

    /// Drops the decided blocks below `keep_from` (clamped to the last height: the last block
    /// is always kept), crash-safely (module docs): after it the store holds `keep_from ..=
    /// last`. The caller keeps a durable snapshot at or above `keep_from - 1` (the state the
    /// restart replays from). `Ok(None)`: nothing to drop.
    ///
    /// # Errors
    /// I/O errors (the store is then left as it was, whole).
    pub fn prune_below(&mut self, keep_from: u64) -> Result<Option<Pruned>, StoreError> {
        let Some(copy) = self.write_pruned_copy(keep_from)? else {
            return Ok(None);
        };
        self.install_pruned_copy(copy)
    }

    /// Replaces the store at `path` by one whose base is `base` and whose only block is
    /// `above` (height `base + 1`): a node catching up from a peer's snapshot of `base`
    /// (`crate::catchup`). Crash-safe as a prune: the new file is written beside the store,
    /// fsync'ed, renamed over it and the directory fsync'ed.
    ///
    /// # Errors
    /// I/O errors; `above` not at `base + 1`.
    pub fn replace_with_base(path: &Path, base: u64, above: &Decided<C>) -> Result<(), StoreError> {
        let expected = base.saturating_add(1);
        if above.height() != expected || above.block.height != expected {
            return Err(StoreError::OutOfOrder {
                got: above.height(),
                expected,
            });
        }
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| StoreError::Io { path: p, source }
        };
        let mut bytes = encode_record(&base_payload(base)).map_err(io(path))?;
        bytes.extend_from_slice(&encode_record(above).map_err(io(path))?);
        let tmp = prune_tmp(path);
        {
            let mut out = File::create(&tmp).map_err(io(&tmp))?;
            out.write_all(&bytes).map_err(io(&tmp))?;
            out.sync_all().map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, path).map_err(io(path))?;
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(dir))?;
        }
        Ok(())
    }

    /// A prune's first step: the base record and the retained records copied to
    /// `blocks.log.prune`, fsync'ed. The store itself is untouched.
    fn write_pruned_copy(&self, keep_from: u64) -> Result<Option<PrunedCopy>, StoreError> {
        let keep_from = keep_from.min(self.last_height());
        if keep_from <= self.first_height() {
            return Ok(None);
        }
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| StoreError::Io { path: p, source }
        };
        let dropped = keep_from - self.first_height();
        let i = usize::try_from(dropped).unwrap_or(usize::MAX);
        let Some(&from_off) = self.offsets.get(i) else {
            return Ok(None);
        };
        let base = keep_from - 1;
        let marker = encode_record(&base_payload(base)).map_err(io(&self.path))?;
        let tmp = prune_tmp(&self.path);
        {
            let mut out = File::create(&tmp).map_err(io(&tmp))?;
            out.write_all(&marker).map_err(io(&tmp))?;
            let mut src = File::open(&self.path).map_err(io(&self.path))?;
            src.seek(SeekFrom::Start(from_off))
                .map_err(io(&self.path))?;
            let want = self.end - from_off;
            let copied = std::io::copy(&mut (&mut src).take(want), &mut out).map_err(io(&tmp))?;
            if copied != want {
                return Err(StoreError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{copied} of {want} retained bytes read"),
                    ),
                });
            }
            out.sync_all().map_err(io(&tmp))?;
        }
        Ok(Some(PrunedCopy {
            tmp,
            base,
            from_off,
            marker_len: marker.len() as u64,
            dropped,
        }))
    }

    /// A prune's second step: the copy renamed over the store, the directory fsync'ed, the
    /// append handle and the index moved to the new file.
    fn install_pruned_copy(&mut self, copy: PrunedCopy) -> Result<Option<Pruned>, StoreError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| StoreError::Io { path: p, source }
        };
        std::fs::rename(&copy.tmp, &self.path).map_err(io(&self.path))?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(dir))?;
        }
        let mut file = open_record_file(&self.path)?;
        file.seek(SeekFrom::End(0)).map_err(io(&self.path))?;
        self.file = file;
        let bytes_dropped = copy.from_off - self.offsets.first().copied().unwrap_or(0);
        let n = usize::try_from(copy.dropped).unwrap_or(usize::MAX);
        self.offsets.drain(..n.min(self.offsets.len()));
        for off in &mut self.offsets {
            *off = *off - copy.from_off + copy.marker_len;
        }
        self.end = self.end - copy.from_off + copy.marker_len;
        self.base = copy.base;
        tracing::info!(
            path = %self.path.display(),
            base = self.base,
            heights = copy.dropped,
            bytes = bytes_dropped,
            "store: pruned the blocks below the retained floor"
        );
        Ok(Some(Pruned {
            heights: copy.dropped,
            bytes: bytes_dropped,
            first: self.first_height(),
        }))
    }

    /// The bytes the records below `height` take (what pruning below it would free, but
    /// the base record): 0 at or below the first height.
    pub fn bytes_below(&self, height: u64) -> u64 {
        let i = height.saturating_sub(self.first_height());
        let i = usize::try_from(i).unwrap_or(usize::MAX);
        match self.offsets.get(i) {
            Some(&off) => off,
            None if i > 0 => self.end,
            None => 0,
        }
        .saturating_sub(self.offsets.first().copied().unwrap_or(0))
    }

    /// The file's size.
    pub fn bytes(&self) -> u64 {
        self.end
    }
}

/// A prune's copy, written and fsync'ed, not yet renamed.
#[derive(Debug)]
struct PrunedCopy {
    tmp: PathBuf,
    base: u64,
    from_off: u64,
    marker_len: u64,
    dropped: u64,
}

/// What [`BlockStore::prune_below`] dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// The heights dropped.
    pub heights: u64,
    /// Their bytes in the file.
    pub bytes: u64,
    /// The lowest height the store now holds.
    pub first: u64,
}

pub(super) fn corrupt_at(path: &Path, offset: u64, reason: Damage) -> StoreError {
    tracing::error!(
        path = %path.display(),
        offset,
        %reason,
        "store: a record in the middle of the file is damaged (not a torn tail)"
    );
    StoreError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::record::*;
    use super::*;

    #[test]
    fn an_oversized_record_is_refused_not_written() {
        // Written, it would read back as a torn tail and take every later record with it.
        let big = vec![7u8; MAX_RECORD_BYTES];
        assert!(encode_record(&big).is_err());
        let small = vec![7u8; 16];
        let rec = encode_record(&small).unwrap();
        let Scan::Record(payload, next) = scan_record(&rec, 0) else {
            panic!("a written record reads back")
        };
        let next = next as usize;
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
            prev_state: None,
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

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ccron-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A store of `n` blocks; the offsets of its records.
    fn store_of(path: &Path, n: u64) -> Vec<u64> {
        let mut store = BlockStore::<TestCommit>::open(path).unwrap();
        for h in 1..=n {
            store.append(decided(h)).unwrap();
        }
        store.offsets.clone()
    }

    // Issue 23, defect 4: one flipped byte in the middle of blocks.log was taken for a torn
    // tail, and the file cut there: every later decided block deleted.
    #[test]
    fn a_flipped_byte_in_the_middle_of_blocks_log_is_refused_not_truncated() {
        let dir = temp_dir("blocks-flip");
        let path = dir.join("blocks.log");
        let offsets = store_of(&path, 10);
        let before = std::fs::read(&path).unwrap();
        for (what, at) in [
            ("payload", offsets[3] as usize + 20),
            ("checksum", offsets[3] as usize + 5),
            ("length, low bit", offsets[3] as usize),
            ("length, a bit past the end", offsets[3] as usize + 2),
            ("length, high byte", offsets[3] as usize + 3),
            ("the last record's payload", offsets[9] as usize + 20),
        ] {
            let mut bytes = before.clone();
            bytes[at] ^= 0x10;
            std::fs::write(&path, &bytes).unwrap();
            let opened = BlockStore::<TestCommit>::open(&path);
            let off = if at >= offsets[9] as usize {
                offsets[9]
            } else {
                offsets[3]
            };
            assert!(
                matches!(&opened, Err(StoreError::Corrupt { offset, .. }) if *offset == off),
                "{what}: {opened:?}"
            );
            // Nothing was cut.
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "{what}");
            let msg = opened.unwrap_err().to_string();
            assert!(
                msg.contains("blocks.log") && msg.contains(&format!("offset {off}")),
                "{msg}"
            );
        }
        // The operator's cut keeps a copy and the records before the damage.
        let mut bytes = before.clone();
        bytes[offsets[3] as usize + 20] ^= 0x10;
        std::fs::write(&path, &bytes).unwrap();
        let cut = cut_record_file(&path, None).unwrap().unwrap();
        assert_eq!(cut.offset, offsets[3]);
        assert_eq!(std::fs::read(&cut.copy).unwrap(), bytes);
        let store = BlockStore::<TestCommit>::open(&path).unwrap();
        assert_eq!(store.last_height(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_a_record_incomplete_at_the_end_is_a_torn_tail() {
        let dir = temp_dir("blocks-torn");
        let path = dir.join("blocks.log");
        let offsets = store_of(&path, 5);
        let whole = std::fs::read(&path).unwrap();
        let rec = encode_record(&decided(6)).unwrap();
        for (what, tail) in [
            ("half a header", rec[..5].to_vec()),
            ("header and half the payload", rec[..rec.len() / 2].to_vec()),
            ("all but the last byte", rec[..rec.len() - 1].to_vec()),
            ("a zero-filled extent", vec![0u8; 4096]),
        ] {
            let mut bytes = whole.clone();
            bytes.extend_from_slice(&tail);
            std::fs::write(&path, &bytes).unwrap();
            let store = BlockStore::<TestCommit>::open(&path).unwrap();
            assert_eq!(store.last_height(), 5, "{what}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                whole,
                "{what}: cut to the records"
            );
        }
        // Zeros in the middle are damage.
        let mut bytes = whole[..offsets[2] as usize].to_vec();
        bytes.extend_from_slice(&[0u8; 64]);
        bytes.extend_from_slice(&whole[offsets[2] as usize..]);
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            BlockStore::<TestCommit>::open(&path),
            Err(StoreError::Corrupt { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // A restarted proposer re-proposes from parts.log: a damaged part is refused, never
    // skipped (it could be the block it already signed), and a missing log of a node that ran
    // before is refused.
    #[test]
    fn a_flipped_byte_in_parts_log_is_refused_and_a_missing_log_too() {
        let dir = temp_dir("parts-flip");
        let path = dir.join("parts.log");
        let mut log = PartLog::<TestPart>::open(&path).unwrap();
        for h in 1..=4 {
            log.append(&TestPart(h, vec![h as u8; 40])).unwrap();
        }
        drop(log);
        let whole = std::fs::read(&path).unwrap();
        let second = 8 + borsh::to_vec(&TestPart(1, vec![1; 40])).unwrap().len();
        let mut bytes = whole.clone();
        bytes[second + 12] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let opened = PartLog::<TestPart>::open(&path);
        assert!(
            matches!(&opened, Err(StoreError::Corrupt { offset, reason: Damage::Checksum, .. }) if *offset == second as u64),
            "{opened:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing cut");
        // A torn last part is cut.
        let mut bytes = whole.clone();
        bytes.extend_from_slice(&encode_record(&TestPart(5, vec![5; 40])).unwrap()[..20]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(PartLog::<TestPart>::open(&path).unwrap().parts().len(), 4);
        // Gone although the node ran before.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            PartLog::<TestPart>::open_expecting(&path, true),
            Err(StoreError::MissingPartLog { .. })
        ));
        assert!(PartLog::<TestPart>::open_expecting(&path, false).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every height from `from` to `to` reads back as itself.
    fn all_read(store: &BlockStore<TestCommit>, from: u64, to: u64) {
        for h in from..=to {
            let d = store
                .get(h)
                .unwrap()
                .unwrap_or_else(|| panic!("height {h} missing"));
            assert_eq!(d.block, decided(h).block);
        }
    }

    #[test]
    fn pruning_keeps_every_height_above_the_floor_across_reopens_and_appends() {
        let dir = temp_dir("prune");
        let path = dir.join("blocks.log");
        store_of(&path, 30);
        let mut store = BlockStore::<TestCommit>::open(&path).unwrap();
        let before = store.bytes();
        let pruned = store.prune_below(21).unwrap().unwrap();
        assert_eq!(pruned.heights, 20);
        assert_eq!(pruned.first, 21);
        assert_eq!(store.first_height(), 21);
        assert_eq!(store.last_height(), 30);
        assert!(store.bytes() < before);
        assert!(store.get(20).unwrap().is_none());
        all_read(&store, 21, 30);
        store.append(decided(31)).unwrap();
        assert!(
            store.prune_below(5).unwrap().is_none(),
            "below the floor: nothing"
        );
        drop(store);
        let mut store = BlockStore::<TestCommit>::open(&path).unwrap();
        assert_eq!((store.first_height(), store.last_height()), (21, 31));
        all_read(&store, 21, 31);
        // A pruned store pruned again; the last block always stays.
        store.prune_below(1_000).unwrap().unwrap();
        assert_eq!((store.first_height(), store.last_height()), (31, 31));
        store.append(decided(32)).unwrap();
        drop(store);
        let store = BlockStore::<TestCommit>::open(&path).unwrap();
        assert_eq!((store.first_height(), store.last_height()), (31, 32));
        all_read(&store, 31, 32);
        assert!(!prune_tmp(&path).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // A crash at each step of a prune: the copy torn, the copy whole but not renamed, renamed
    // before the node updated its index. Each reopens to a store holding every height above
    // the floor (the old whole file, or the pruned one).
    #[test]
    fn a_crash_at_each_step_of_a_prune_leaves_a_store_that_opens_whole_above_the_floor() {
        let dir = temp_dir("prune-crash");
        let path = dir.join("blocks.log");
        store_of(&path, 30);
        let whole = std::fs::read(&path).unwrap();
        for step in ["copy torn", "copy not renamed", "renamed"] {
            std::fs::write(&path, &whole).unwrap();
            let store = BlockStore::<TestCommit>::open(&path).unwrap();
            let copy = store.write_pruned_copy(21).unwrap().unwrap();
            match step {
                "copy torn" => {
                    let bytes = std::fs::read(&copy.tmp).unwrap();
                    std::fs::write(&copy.tmp, &bytes[..bytes.len() / 2]).unwrap();
                }
                "copy not renamed" => {}
                _ => std::fs::rename(&copy.tmp, &path).unwrap(),
            }
            drop(store); // the crash
            let store = BlockStore::<TestCommit>::open(&path).unwrap();
            assert!(
                !prune_tmp(&path).exists(),
                "{step}: the leftover copy is removed"
            );
            let first = if step == "renamed" { 21 } else { 1 };
            assert_eq!(
                (store.first_height(), store.last_height()),
                (first, 30),
                "{step}"
            );
            all_read(&store, first, 30);
            if step != "renamed" {
                assert_eq!(std::fs::read(&path).unwrap(), whole, "{step}: untouched");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_flipped_byte_in_a_pruned_store_is_refused_not_taken_for_another_floor() {
        let dir = temp_dir("prune-flip");
        let path = dir.join("blocks.log");
        store_of(&path, 30);
        let mut store = BlockStore::<TestCommit>::open(&path).unwrap();
        store.prune_below(21).unwrap().unwrap();
        let second = store.offsets[1];
        drop(store);
        let pruned = std::fs::read(&path).unwrap();
        for (what, at, offset) in [
            ("the base record's floor", 8 + 8, 0u64),
            ("the base record's magic", 8 + 1, 0),
            ("a retained record", second as usize + 20, second),
        ] {
            let mut bytes = pruned.clone();
            bytes[at] ^= 0x04;
            std::fs::write(&path, &bytes).unwrap();
            let opened = BlockStore::<TestCommit>::open(&path);
            assert!(
                matches!(&opened, Err(StoreError::Corrupt { offset: o, .. }) if *o == offset),
                "{what}: {opened:?}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "{what}: nothing cut");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
