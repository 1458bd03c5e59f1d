//! [`ResultJournal`]: the consumer's durable hold on results between "the worker answered" and
//! "the ledger applied it".
//!
//! The consumer acknowledges a record (and its progress moves past it) as soon as the record's
//! [`OutboxResult`] is taken; the ledger applies the result later, when the request carrying it
//! commits. A consumer that crashes in between must not lose the result: its progress no longer
//! covers the record, so nothing would deliver it again. The journal is that hold: a result is
//! appended and fsynced **before** [`ResultJournal::take`] returns (so before the consumer
//! acknowledges), stays pending until [`ResultJournal::mark_applied`] (when f+1 replicas show it
//! applied), and after a restart [`ResultJournal::pending`] lists every result to send again.
//! The ledger applies a record's result once ([`Outbox::accept_result`](super::Outbox::accept_result)
//! answers a repeat with `Duplicate`), so a result sent twice is applied exactly once.
//!
//! # File format
//!
//! A 5-byte header (`"CCRJ"`, version 1), then records, each
//! `len (u32 BE) ‖ crc32(len ‖ body) (u32 BE) ‖ body`, where `body` is the outbox codec's
//! encoding of `Taken(result)` or `Applied(index)`, at most [`MAX_JOURNAL_RECORD_BYTES`]. Every
//! append is one write then `fdatasync`.
//!
//! **Corruption is refused loudly.** Opening checks every record. A bad record (short, bad
//! checksum, undecodable) that lies within the last [`MAX_JOURNAL_RECORD_BYTES`] + 8 bytes of the
//! file is a **torn append** (a crash mid-write of the last record, which was therefore never
//! acknowledged): it is cut off, with a `warn` event, and reported in
//! [`ResultJournal::torn_bytes`]. A bad record anywhere before that, a bad header or a file over
//! the size bound is [`JournalError::Corrupt`]: the journal does not open, and nothing is
//! silently dropped.
//!
//! Compaction: once the file holds more than twice as many records as results pending (and at
//! least [`COMPACT_MIN_RECORDS`]), it is rewritten with the pending results only (temporary
//! file, fsync, rename, directory fsync: the old or the new file, never a torn one).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::codec;
use super::result::{MAX_RESULT_PAYLOAD_BYTES, OutboxResult};

const MAGIC: &[u8; 4] = b"CCRJ";
const VERSION: u8 = 1;
const HEADER_BYTES: usize = 5;
const RECORD_HEADER_BYTES: usize = 8;

/// Largest record body (a result of up to [`MAX_RESULT_PAYLOAD_BYTES`] plus its tag).
pub const MAX_JOURNAL_RECORD_BYTES: usize = MAX_RESULT_PAYLOAD_BYTES + 64;

/// Fewest records before a compaction is considered.
pub const COMPACT_MIN_RECORDS: usize = 1_024;

#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
enum Entry {
    Taken(OutboxResult),
    Applied(u64),
}

/// Bounds of a [`ResultJournal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalLimits {
    /// Most results pending at once; [`ResultJournal::take`] refuses more
    /// ([`JournalError::Full`]), which leaves the record unacknowledged (back-pressure).
    pub max_pending: usize,
    /// Largest journal file read or written.
    pub max_file_bytes: u64,
}

impl Default for JournalLimits {
    /// 4,096 results pending, 1 GiB of file.
    fn default() -> Self {
        Self {
            max_pending: 4_096,
            max_file_bytes: 1 << 30,
        }
    }
}

/// Why the journal could not open, take or mark.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file system failed.
    #[error("result journal {path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        reason: String,
    },
    /// The file failed a check before its last record: refused, nothing dropped.
    #[error("result journal {path} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad data starts.
        offset: u64,
        /// What the check found.
        reason: String,
    },
    /// [`JournalLimits::max_pending`] results are pending.
    #[error("{max_pending} results pending already")]
    Full {
        /// The bound.
        max_pending: usize,
    },
    /// The result does not encode within [`MAX_JOURNAL_RECORD_BYTES`], or the file would
    /// exceed [`JournalLimits::max_file_bytes`].
    #[error("result journal: {0}")]
    TooLarge(String),
}

/// The consumer's durable results (see the module documentation).
#[derive(Debug)]
pub struct ResultJournal {
    path: PathBuf,
    file: File,
    limits: JournalLimits,
    pending: BTreeMap<u64, OutboxResult>,
    records: usize,
    file_bytes: u64,
    torn_bytes: u64,
}

fn io(path: &Path, e: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn frame(entry: &Entry) -> Result<Vec<u8>, JournalError> {
    let body = codec::encode(entry).map_err(|e| JournalError::TooLarge(e.to_string()))?;
    if body.len() > MAX_JOURNAL_RECORD_BYTES {
        return Err(JournalError::TooLarge(format!(
            "a record of {} bytes exceeds {MAX_JOURNAL_RECORD_BYTES}",
            body.len()
        )));
    }
    let len = u32::try_from(body.len()).map_err(|e| JournalError::TooLarge(e.to_string()))?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len.to_be_bytes());
    crc.update(&body);
    let mut out = Vec::with_capacity(RECORD_HEADER_BYTES + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc.finalize().to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Parses the record at `bytes[at..]`: `Ok((entry, next offset))` or why it is bad.
fn parse(bytes: &[u8], at: usize) -> Result<(Entry, usize), String> {
    let rest = bytes.get(at..).unwrap_or_default();
    let (Some(len), Some(crc)) = (rest.get(0..4), rest.get(4..8)) else {
        return Err(format!("{} bytes where a record header goes", rest.len()));
    };
    let len_bytes: [u8; 4] = len.try_into().map_err(|_| "short length")?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    if len > MAX_JOURNAL_RECORD_BYTES {
        return Err(format!("record length {len} over the bound"));
    }
    let Some(body) = rest.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + len) else {
        return Err(format!("record of {len} bytes cut short"));
    };
    let mut h = crc32fast::Hasher::new();
    h.update(&len_bytes);
    h.update(body);
    let crc = u32::from_be_bytes(crc.try_into().map_err(|_| "short checksum")?);
    if h.finalize() != crc {
        return Err("checksum mismatch".into());
    }
    let entry: Entry = codec::decode(body).map_err(|e| e.to_string())?;
    Ok((entry, at + RECORD_HEADER_BYTES + len))
}

fn sync_dir(path: &Path) -> Result<(), JournalError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(dir, e))?;
    }
    Ok(())
}

impl ResultJournal {
    /// Opens (or creates) the journal at `path` and replays it (see the module documentation
    /// for what is refused and what is cut off as a torn append).
    ///
    /// # Errors
    /// [`JournalError::Io`], [`JournalError::Corrupt`].
    pub fn open(path: impl Into<PathBuf>, limits: JournalLimits) -> Result<Self, JournalError> {
        let path = path.into();
        let bytes = match File::open(&path) {
            Ok(f) => {
                let mut bytes = Vec::new();
                f.take(limits.max_file_bytes.saturating_add(1))
                    .read_to_end(&mut bytes)
                    .map_err(|e| io(&path, e))?;
                Some(bytes)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&path, e)),
        };
        let corrupt = |offset: usize, reason: String| JournalError::Corrupt {
            path: path.clone(),
            offset: offset as u64,
            reason,
        };
        let Some(bytes) = bytes else {
            Self::write_fresh(&path, &[])?;
            return Self::reopen(path, limits, BTreeMap::new(), 0, HEADER_BYTES as u64, 0);
        };
        if bytes.len() as u64 > limits.max_file_bytes {
            return Err(corrupt(0, "larger than the file bound".into()));
        }
        if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC {
            return Err(corrupt(0, "not a result journal (bad header)".into()));
        }
        if bytes[4] != VERSION {
            return Err(corrupt(4, format!("unsupported version {}", bytes[4])));
        }
        let mut pending = BTreeMap::new();
        let mut records = 0usize;
        let mut at = HEADER_BYTES;
        let mut torn = 0u64;
        while at < bytes.len() {
            match parse(&bytes, at) {
                Ok((entry, next)) => {
                    match entry {
                        Entry::Taken(r) => {
                            pending.entry(r.index).or_insert(r);
                        }
                        Entry::Applied(index) => {
                            pending.remove(&index);
                        }
                    }
                    records += 1;
                    at = next;
                }
                Err(reason) => {
                    let left = bytes.len() - at;
                    if left > MAX_JOURNAL_RECORD_BYTES + RECORD_HEADER_BYTES {
                        tracing::error!(path = %path.display(), offset = at, %reason, "result journal corrupt");
                        return Err(corrupt(at, reason));
                    }
                    tracing::warn!(path = %path.display(), offset = at, bytes = left, %reason, "result journal: torn last append cut off");
                    torn = left as u64;
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| io(&path, e))?;
                    f.set_len(at as u64).map_err(|e| io(&path, e))?;
                    f.sync_all().map_err(|e| io(&path, e))?;
                    break;
                }
            }
        }
        if pending.len() > limits.max_pending {
            tracing::warn!(
                pending = pending.len(),
                max = limits.max_pending,
                "result journal holds more pending results than its bound; new ones wait"
            );
        }
        Self::reopen(path, limits, pending, records, at as u64, torn)
    }

    fn reopen(
        path: PathBuf,
        limits: JournalLimits,
        pending: BTreeMap<u64, OutboxResult>,
        records: usize,
        file_bytes: u64,
        torn_bytes: u64,
    ) -> Result<Self, JournalError> {
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        tracing::info!(path = %path.display(), pending = pending.len(), records, "result journal opened");
        Ok(Self {
            path,
            file,
            limits,
            pending,
            records,
            file_bytes,
            torn_bytes,
        })
    }

    /// Writes a journal holding `entries` at `path` atomically (temporary file, fsync, rename,
    /// directory fsync).
    fn write_fresh(path: &Path, entries: &[Vec<u8>]) -> Result<u64, JournalError> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        let tmp = path.with_file_name(name);
        let mut len = HEADER_BYTES as u64;
        {
            let mut f = File::create(&tmp).map_err(|e| io(&tmp, e))?;
            let mut header = MAGIC.to_vec();
            header.push(VERSION);
            f.write_all(&header).map_err(|e| io(&tmp, e))?;
            for e in entries {
                f.write_all(e).map_err(|e| io(&tmp, e))?;
                len = len.saturating_add(e.len() as u64);
            }
            f.sync_all().map_err(|e| io(&tmp, e))?;
        }
        fs::rename(&tmp, path).map_err(|e| io(path, e))?;
        sync_dir(path)?;
        Ok(len)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Results taken and not yet applied, by index.
    pub fn pending(&self) -> impl Iterator<Item = &OutboxResult> {
        self.pending.values()
    }

    /// Number of results pending.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether a result for `index` is pending.
    pub fn is_pending(&self, index: u64) -> bool {
        self.pending.contains_key(&index)
    }

    /// Bytes of a torn last append cut off when this journal was opened (0 if none).
    pub fn torn_bytes(&self) -> u64 {
        self.torn_bytes
    }

    /// Records in the file (for tests and metrics).
    pub fn records(&self) -> usize {
        self.records
    }

    fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let bytes = frame(entry)?;
        if self.file_bytes.saturating_add(bytes.len() as u64) > self.limits.max_file_bytes {
            self.compact()?;
            if self.file_bytes.saturating_add(bytes.len() as u64) > self.limits.max_file_bytes {
                return Err(JournalError::TooLarge(format!(
                    "the journal would exceed {} bytes",
                    self.limits.max_file_bytes
                )));
            }
        }
        self.file
            .write_all(&bytes)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| {
                tracing::error!(path = %self.path.display(), error = %e, "result journal append failed");
                io(&self.path, e)
            })?;
        self.records += 1;
        self.file_bytes = self.file_bytes.saturating_add(bytes.len() as u64);
        Ok(())
    }

    /// Holds `result` durably (fsynced before this returns) until
    /// [`mark_applied`](Self::mark_applied). A result for an index already pending is not
    /// written again (the first one is what goes to the ledger; the ledger applies one result
    /// per record anyway). Returns whether it was written.
    ///
    /// # Errors
    /// [`JournalError::Full`] ([`JournalLimits::max_pending`]), [`JournalError::TooLarge`],
    /// [`JournalError::Io`]; the result is then not held.
    pub fn take(&mut self, result: OutboxResult) -> Result<bool, JournalError> {
        if self.pending.contains_key(&result.index) {
            return Ok(false);
        }
        if self.pending.len() >= self.limits.max_pending {
            return Err(JournalError::Full {
                max_pending: self.limits.max_pending,
            });
        }
        let entry = Entry::Taken(result);
        self.append(&entry)?;
        if let Entry::Taken(r) = entry {
            self.pending.insert(r.index, r);
        }
        Ok(true)
    }

    /// The ledger applied the result for `index` (f+1 replicas show it): it is no longer
    /// pending. Returns whether it was.
    ///
    /// # Errors
    /// [`JournalError::Io`]; it then stays pending (and is sent again: harmless).
    pub fn mark_applied(&mut self, index: u64) -> Result<bool, JournalError> {
        if !self.pending.contains_key(&index) {
            return Ok(false);
        }
        self.append(&Entry::Applied(index))?;
        self.pending.remove(&index);
        if self.records >= COMPACT_MIN_RECORDS && self.records > 2 * self.pending.len() {
            self.compact()?;
        }
        Ok(true)
    }

    /// Rewrites the file with the pending results only.
    ///
    /// # Errors
    /// [`JournalError::Io`], [`JournalError::TooLarge`]; the old file then stays as it was.
    pub fn compact(&mut self) -> Result<(), JournalError> {
        let entries = self
            .pending
            .values()
            .map(|r| frame(&Entry::Taken(r.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let len = Self::write_fresh(&self.path, &entries)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| io(&self.path, e))?;
        tracing::debug!(path = %self.path.display(), from = self.records, to = entries.len(), "result journal compacted");
        self.records = entries.len();
        self.file_bytes = len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::{OccurrenceId, ResultOutcome};

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccron-journal-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn result(index: u64) -> OutboxResult {
        OutboxResult::unsigned(
            index,
            OccurrenceId::new(1, 2, index),
            ResultOutcome::Answer(format!("answer {index}").into_bytes()),
        )
    }

    #[test]
    fn results_survive_a_reopen_until_applied() {
        let d = dir("reopen");
        let path = d.join("results");
        let mut j = ResultJournal::open(&path, JournalLimits::default()).unwrap();
        assert_eq!(j.take(result(1)), Ok(true));
        assert_eq!(j.take(result(2)), Ok(true));
        assert_eq!(j.take(result(2)), Ok(false), "one result per index");
        assert_eq!(j.mark_applied(1), Ok(true));
        assert_eq!(j.mark_applied(1), Ok(false));
        drop(j);
        let j = ResultJournal::open(&path, JournalLimits::default()).unwrap();
        assert_eq!(j.pending().cloned().collect::<Vec<_>>(), vec![result(2)]);
        assert_eq!(j.torn_bytes(), 0);
        fs::remove_dir_all(&d).unwrap();
    }

    /// A crash at any byte of the last append loses only that (unacknowledged) record; a bad
    /// byte anywhere before the last record is refused.
    #[test]
    fn torn_tails_are_cut_and_corruption_is_refused() {
        let d = dir("torn");
        let path = d.join("results");
        let mut j = ResultJournal::open(&path, JournalLimits::default()).unwrap();
        j.take(result(1)).unwrap();
        j.take(result(2)).unwrap();
        drop(j);
        let full = fs::read(&path).unwrap();
        let one = ResultJournal::open(&path, JournalLimits::default()).unwrap();
        drop(one);
        let first_end = HEADER_BYTES + frame(&Entry::Taken(result(1))).unwrap().len();
        for cut in first_end..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            let j = ResultJournal::open(&path, JournalLimits::default()).unwrap();
            assert_eq!(
                j.pending().cloned().collect::<Vec<_>>(),
                vec![result(1)],
                "cut at {cut}"
            );
            assert_eq!(j.torn_bytes(), (cut - first_end) as u64);
            assert_eq!(
                fs::metadata(&path).unwrap().len(),
                first_end as u64,
                "the tail is cut off"
            );
        }
        // Flipped bytes in the last record: a torn append too.
        let mut bad = full.clone();
        bad[full.len() - 1] ^= 1;
        fs::write(&path, &bad).unwrap();
        assert_eq!(
            ResultJournal::open(&path, JournalLimits::default())
                .unwrap()
                .pending_len(),
            1
        );
        // In a record followed by more than one record's worth of bytes: refused.
        let mut j = ResultJournal::open(&path, JournalLimits::default()).unwrap();
        for index in [3, 4] {
            j.take(OutboxResult::unsigned(
                index,
                OccurrenceId::new(1, 2, index),
                ResultOutcome::Answer(vec![7; 70_000]),
            ))
            .unwrap();
        }
        drop(j);
        let mut bad = fs::read(&path).unwrap();
        bad[HEADER_BYTES + 10] ^= 1;
        fs::write(&path, &bad).unwrap();
        assert!(matches!(
            ResultJournal::open(&path, JournalLimits::default()),
            Err(JournalError::Corrupt { offset, .. }) if offset == HEADER_BYTES as u64
        ));
        fs::write(&path, b"XXXX\x01").unwrap();
        assert!(matches!(
            ResultJournal::open(&path, JournalLimits::default()),
            Err(JournalError::Corrupt { .. })
        ));
        fs::write(&path, b"CCRJ\x02").unwrap();
        assert!(matches!(
            ResultJournal::open(&path, JournalLimits::default()),
            Err(JournalError::Corrupt { .. })
        ));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bounds_and_compaction() {
        let d = dir("bounds");
        let path = d.join("results");
        let limits = JournalLimits {
            max_pending: 2,
            ..JournalLimits::default()
        };
        let mut j = ResultJournal::open(&path, limits).unwrap();
        j.take(result(1)).unwrap();
        j.take(result(2)).unwrap();
        assert_eq!(
            j.take(result(3)),
            Err(JournalError::Full { max_pending: 2 })
        );
        for k in 3..(COMPACT_MIN_RECORDS as u64 + 10) {
            j.mark_applied(k - 2).unwrap();
            j.take(result(k)).unwrap();
        }
        assert!(
            j.records() < COMPACT_MIN_RECORDS,
            "compacted: {}",
            j.records()
        );
        let pending: Vec<u64> = j.pending().map(|r| r.index).collect();
        drop(j);
        let j = ResultJournal::open(&path, limits).unwrap();
        assert_eq!(j.pending().map(|r| r.index).collect::<Vec<_>>(), pending);
        assert!(!d.join("results.tmp").exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
