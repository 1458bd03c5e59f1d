//! Durable consumer state: progress (one number) and dead letters.
//!
//! [`ProgressStore`] keeps the consumer's highest contiguous finished index; [`DeadLetterSink`]
//! keeps the records given up on. Both have an in-memory implementation (tests, hosts that
//! persist elsewhere) and a crash-safe file implementation:
//!
//! * [`FileProgressStore`] writes a 17-byte file (`"CCOP"`, version 1, the index as big-endian
//!   u64, CRC-32 of the preceding 13 bytes) to a temporary sibling, fsyncs it, renames it over the
//!   target and fsyncs the directory: after a crash the file holds either the old or the new value,
//!   never a torn one.
//! * [`FileDeadLetters`] appends one line per dead letter (the hex of its canonical encoding) and
//!   fsyncs; a torn last line (crash mid-append) is skipped with a warning when reading back.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::codec;
use super::consumer::DeadLetter;

/// Why a store could not load or save.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The file system failed.
    #[error("storage failure on {path}: {reason}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The operating system's error.
        reason: String,
    },
    /// Stored bytes failed their integrity check.
    #[error("corrupt store {path}: {reason}")]
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// What the check found.
        reason: String,
    },
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Where a consumer persists its progress (highest contiguous finished index).
pub trait ProgressStore {
    /// The persisted progress, or 0 when nothing was ever saved.
    fn load(&mut self) -> Result<u64, StoreError>;
    /// Durably replaces the persisted progress with `progress`.
    fn save(&mut self, progress: u64) -> Result<(), StoreError>;
}

impl<T: ProgressStore + ?Sized> ProgressStore for &mut T {
    fn load(&mut self) -> Result<u64, StoreError> {
        (**self).load()
    }

    fn save(&mut self, progress: u64) -> Result<(), StoreError> {
        (**self).save(progress)
    }
}

/// Where a consumer records dead letters before persisting progress past them.
pub trait DeadLetterSink {
    /// Durably records `letter`.
    fn record(&mut self, letter: &DeadLetter) -> Result<(), StoreError>;
}

impl<T: DeadLetterSink + ?Sized> DeadLetterSink for &mut T {
    fn record(&mut self, letter: &DeadLetter) -> Result<(), StoreError> {
        (**self).record(letter)
    }
}

/// An in-memory [`ProgressStore`] that also counts saves (for tests and examples).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemProgressStore {
    /// The saved progress.
    pub progress: u64,
    /// How many times [`save`](ProgressStore::save) was called.
    pub saves: u64,
}

impl ProgressStore for MemProgressStore {
    fn load(&mut self) -> Result<u64, StoreError> {
        Ok(self.progress)
    }

    fn save(&mut self, progress: u64) -> Result<(), StoreError> {
        self.progress = progress;
        self.saves += 1;
        Ok(())
    }
}

/// An in-memory [`DeadLetterSink`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemDeadLetters {
    /// Every dead letter recorded, in order.
    pub letters: Vec<DeadLetter>,
}

impl DeadLetterSink for MemDeadLetters {
    fn record(&mut self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.letters.push(letter.clone());
        Ok(())
    }
}

const MAGIC: &[u8; 4] = b"CCOP";
const PROGRESS_VERSION: u8 = 1;
const PROGRESS_FILE_BYTES: usize = 4 + 1 + 8 + 4;

/// A crash-safe file [`ProgressStore`] (see the module documentation for the format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProgressStore {
    path: PathBuf,
}

impl FileProgressStore {
    /// A store kept in the file at `path` (created on first save; its directory must exist).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn tmp_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        self.path.with_file_name(name)
    }
}

impl ProgressStore for FileProgressStore {
    fn load(&mut self) -> Result<u64, StoreError> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err(&self.path, e)),
        };
        // Read one byte more than the format allows, so an oversized file is detected without
        // reading all of it.
        let mut bytes = Vec::with_capacity(PROGRESS_FILE_BYTES + 1);
        file.take(PROGRESS_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(&self.path, e))?;
        let corrupt = |reason: String| StoreError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        if bytes.len() != PROGRESS_FILE_BYTES {
            return Err(corrupt(format!(
                "{} bytes, expected {PROGRESS_FILE_BYTES}",
                bytes.len()
            )));
        }
        if &bytes[..4] != MAGIC {
            return Err(corrupt("bad magic".into()));
        }
        if bytes[4] != PROGRESS_VERSION {
            return Err(corrupt(format!("unsupported version {}", bytes[4])));
        }
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&bytes[13..17]);
        if crc32fast::hash(&bytes[..13]) != u32::from_be_bytes(crc) {
            return Err(corrupt("checksum mismatch".into()));
        }
        let mut value = [0u8; 8];
        value.copy_from_slice(&bytes[5..13]);
        Ok(u64::from_be_bytes(value))
    }

    fn save(&mut self, progress: u64) -> Result<(), StoreError> {
        let mut bytes = Vec::with_capacity(PROGRESS_FILE_BYTES);
        bytes.extend_from_slice(MAGIC);
        bytes.push(PROGRESS_VERSION);
        bytes.extend_from_slice(&progress.to_be_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
        let tmp = self.tmp_path();
        {
            let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
            f.write_all(&bytes).map_err(|e| io_err(&tmp, e))?;
            f.sync_all().map_err(|e| io_err(&tmp, e))?;
        }
        fs::rename(&tmp, &self.path).map_err(|e| io_err(&self.path, e))?;
        // The rename is durable only once the directory entry is.
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_err(dir, e))?;
        }
        Ok(())
    }
}

/// A file [`DeadLetterSink`]: one hex line per dead letter, fsynced on every append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDeadLetters {
    path: PathBuf,
}

impl FileDeadLetters {
    /// A sink appending to the file at `path` (created on first record).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Reads back every complete dead letter, reading at most `max_bytes` of the file.
    ///
    /// A line that does not decode (a torn final append) is skipped with a warning; a file over
    /// `max_bytes` is an error rather than a partial answer.
    pub fn read_all(&self, max_bytes: u64) -> Result<Vec<DeadLetter>, StoreError> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&self.path, e)),
        };
        let mut text = String::new();
        file.take(max_bytes.saturating_add(1))
            .read_to_string(&mut text)
            .map_err(|e| io_err(&self.path, e))?;
        if text.len() as u64 > max_bytes {
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                reason: format!("larger than the {max_bytes}-byte read limit"),
            });
        }
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match decode_hex(line).and_then(|b| codec::decode::<DeadLetter>(&b).ok()) {
                Some(letter) => out.push(letter),
                None => {
                    tracing::warn!(line = n + 1, path = %self.path.display(), "skipping undecodable dead-letter line")
                }
            }
        }
        Ok(out)
    }
}

impl DeadLetterSink for FileDeadLetters {
    fn record(&mut self, letter: &DeadLetter) -> Result<(), StoreError> {
        let bytes = codec::encode(letter).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let mut line = String::with_capacity(bytes.len() * 2 + 1);
        for b in bytes {
            line.push_str(&format!("{b:02x}"));
        }
        line.push('\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| io_err(&self.path, e))?;
        f.write_all(line.as_bytes())
            .map_err(|e| io_err(&self.path, e))?;
        f.sync_data().map_err(|e| io_err(&self.path, e))
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::{FailureReason, OccurrenceId};

    fn tmp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ccron-outbox-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn file_progress_round_trips_and_detects_corruption() {
        let dir = tmp_dir("progress");
        let path = dir.join("progress");
        let mut store = FileProgressStore::new(&path);
        assert_eq!(store.load(), Ok(0));
        store.save(41).unwrap();
        store.save(42).unwrap();
        assert_eq!(FileProgressStore::new(&path).load(), Ok(42));
        assert!(!store.tmp_path().exists());

        // A crash before the rename leaves a stray temporary file: the old value still loads,
        // and the next save replaces the stray.
        fs::write(store.tmp_path(), b"torn").unwrap();
        assert_eq!(store.load(), Ok(42));
        store.save(43).unwrap();
        assert_eq!(store.load(), Ok(43));

        let mut bytes = fs::read(&path).unwrap();
        bytes[12] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(store.load(), Err(StoreError::Corrupt { .. })));
        fs::write(&path, [0u8; 100]).unwrap();
        assert!(matches!(store.load(), Err(StoreError::Corrupt { .. })));
        fs::write(&path, b"").unwrap();
        assert!(matches!(store.load(), Err(StoreError::Corrupt { .. })));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_dead_letters_append_and_skip_torn_line() {
        let dir = tmp_dir("dead");
        let path = dir.join("dead");
        let mut sink = FileDeadLetters::new(&path);
        let a = DeadLetter {
            index: 3,
            id: OccurrenceId::new(1, 2, 3),
            handler: "mail".into(),
            attempts: 4,
            reason: FailureReason::Failed("smtp down\nreally".into()),
            at_ms: -5,
        };
        let b = DeadLetter {
            index: 9,
            reason: FailureReason::Timeout,
            ..a.clone()
        };
        sink.record(&a).unwrap();
        sink.record(&b).unwrap();
        assert_eq!(sink.read_all(1 << 20).unwrap(), vec![a.clone(), b.clone()]);
        // A crash mid-append leaves a torn line: it is skipped, the complete ones survive.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"0000ab").unwrap();
        assert_eq!(sink.read_all(1 << 20).unwrap(), vec![a, b]);
        assert!(sink.read_all(10).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
