//! The node's diagnostic line logs, bounded: `digests.log` (one line per executed height) and
//! `fires.log` (one line per fire with a due instant), appended after every height and rotated
//! to `<name>.1` before a write would take the file past [`DIAG_LOG_CAP`] bytes (one older
//! generation kept, as for `node.log`). Unbounded, they grew by about 87 bytes a height
//! (about 200 MB a day at 27 heights/s) on every node.
//!
//! They are diagnostics, not state: the block store and the snapshots are the source of
//! truth, and nothing replicated depends on a line being written. A failed open, write or
//! rotation is still never silent: it is a counter ([`LineLogStats::failures`], the node's
//! `status.json` and `/metrics`) and a tracing event, and the next append tries again.
//!
//! Readers (the localnet's judge) read both generations, the older first
//! ([`read_generations`]).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Bytes a diagnostic log holds before it rotates (64 MiB: about 770,000 heights of
/// `digests.log`, 8 hours at 27 heights/s; two generations on disk at most).
pub const DIAG_LOG_CAP: u64 = 64 << 20;

/// Bytes read from a log's end at open to find a torn last line (a kill mid-write): a line is
/// far shorter.
const TAIL_SCAN: u64 = 64 << 10;

/// What a log did since the process opened it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineLogStats {
    /// Bytes appended.
    #[serde(default)]
    pub written: u64,
    /// Rotations to `<name>.1`.
    #[serde(default)]
    pub rotations: u64,
    /// Opens, writes, rotations and trims that failed (each an error event).
    #[serde(default)]
    pub failures: u64,
}

impl LineLogStats {
    /// The sum of two logs' figures.
    pub fn plus(self, other: Self) -> Self {
        Self {
            written: self.written.saturating_add(other.written),
            rotations: self.rotations.saturating_add(other.rotations),
            failures: self.failures.saturating_add(other.failures),
        }
    }
}

/// An append-only log of whole lines, rotated at a byte cap.
#[derive(Debug)]
pub struct LineLog {
    path: PathBuf,
    cap: u64,
    /// The open file (`None` until the first append, and after a failure: reopened then).
    file: Option<File>,
    /// Bytes in the current file.
    size: u64,
    stats: LineLogStats,
}

impl LineLog {
    /// The log at `path`, rotated at `cap` bytes. Opens nothing yet; cuts a torn last line
    /// left by a process killed mid-write (a later line would otherwise be glued to it).
    pub fn new(path: PathBuf, cap: u64) -> Self {
        let mut log = Self {
            path,
            cap,
            file: None,
            size: 0,
            stats: LineLogStats::default(),
        };
        if let Err(e) = cut_torn_tail(&log.path) {
            log.stats.failures = log.stats.failures.saturating_add(1);
            tracing::error!(log = %log.path.display(), error = %e, "could not cut the log's torn last line");
        }
        log
    }

    /// What the log did.
    pub fn stats(&self) -> LineLogStats {
        self.stats
    }

    /// Appends `lines` (whole lines, each ending in `\n`), rotating first when they would take
    /// a non-empty file past the cap. A failure is counted and traced (and returned); the next
    /// append reopens the file.
    pub fn append(&mut self, lines: &[u8]) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let r = self.try_append(lines);
        if let Err(e) = &r {
            self.file = None;
            self.stats.failures = self.stats.failures.saturating_add(1);
            tracing::error!(log = %self.path.display(), error = %e, "diagnostic log append failed");
        }
        r
    }

    fn try_append(&mut self, lines: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.size = f.metadata()?.len();
            self.file = Some(f);
        }
        let len = lines.len() as u64;
        if self.size > 0 && self.size.saturating_add(len) > self.cap {
            self.file = None;
            std::fs::rename(&self.path, rotated(&self.path))?;
            self.stats.rotations = self.stats.rotations.saturating_add(1);
            tracing::info!(log = %self.path.display(), bytes = self.size, "diagnostic log rotated");
            self.size = 0;
            self.file = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(lines)?;
        }
        self.size = self.size.saturating_add(len);
        self.stats.written = self.stats.written.saturating_add(len);
        Ok(())
    }
}

/// `<path>.1`: the older generation.
pub fn rotated(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    path.with_file_name(name)
}

/// Both generations of the log at `path`, the older first (missing files read as empty).
pub fn read_generations(path: &Path) -> String {
    let mut text = std::fs::read_to_string(rotated(path)).unwrap_or_default();
    text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
    text
}

/// Cuts the file at `path` after its last line end (nothing to do when it is missing, empty or
/// ends in one).
fn cut_torn_tail(path: &Path) -> std::io::Result<()> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let from = len.saturating_sub(TAIL_SCAN);
    f.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::new();
    Read::take(&mut f, TAIL_SCAN).read_to_end(&mut tail)?;
    if tail.last() == Some(&b'\n') {
        return Ok(());
    }
    let keep = match tail.iter().rposition(|&b| b == b'\n') {
        Some(i) => from.saturating_add(i as u64).saturating_add(1),
        // No line end in the scanned tail: a whole file of one torn line is dropped; a longer
        // file without one is not a log of lines (left alone, reported).
        None if from == 0 => 0,
        None => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no line end in the log's last 64 KiB",
            ));
        }
    };
    f.set_len(keep)?;
    tracing::warn!(log = %path.display(), cut = len.saturating_sub(keep), "torn last line cut");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccron-linelog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_log_rotates_before_the_cap_and_keeps_two_generations_of_whole_lines() {
        let d = scratch("rotate");
        let path = d.join("digests.log");
        let mut log = LineLog::new(path.clone(), 40);
        for h in 0..10u32 {
            // 10 bytes a line: four fit in 40 bytes.
            log.append(format!("{h:09}\n").as_bytes()).unwrap();
        }
        let s = log.stats();
        assert_eq!(s.written, 100);
        assert_eq!(s.rotations, 2, "rotated at lines 4 and 8");
        assert_eq!(s.failures, 0);
        // The current file never exceeds the cap; the older generation holds the 4 before it.
        let cur = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(rotated(&path)).unwrap();
        assert_eq!(cur, "000000008\n000000009\n");
        assert_eq!(old, "000000004\n000000005\n000000006\n000000007\n");
        assert_eq!(read_generations(&path), format!("{old}{cur}"));
        // A reopened log continues the current file's size (rotates at the same point).
        drop(log);
        let mut log = LineLog::new(path.clone(), 40);
        log.append(b"000000010\n000000011\n000000012\n").unwrap();
        assert_eq!(log.stats().rotations, 1, "20 + 30 bytes > 40");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "000000010\n000000011\n000000012\n"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_torn_last_line_is_cut_at_open_and_the_next_line_starts_clean() {
        let d = scratch("torn");
        let path = d.join("fires.log");
        std::fs::write(&path, "1 2 3\n4 5").unwrap();
        let mut log = LineLog::new(path.clone(), DIAG_LOG_CAP);
        log.append(b"6 7 8\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1 2 3\n6 7 8\n");
        // A file of one torn line is emptied; a whole file is untouched.
        std::fs::write(&path, "9 9").unwrap();
        drop(LineLog::new(path.clone(), DIAG_LOG_CAP));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        std::fs::write(&path, "1\n").unwrap();
        drop(LineLog::new(path.clone(), DIAG_LOG_CAP));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n");
        // A torn line longer than the scanned tail: left alone and reported.
        let long = format!("1\n{}", "x".repeat(TAIL_SCAN as usize + 10));
        std::fs::write(&path, long).unwrap();
        let log = LineLog::new(path.clone(), DIAG_LOG_CAP);
        assert_eq!(log.stats().failures, 1, "no line end in the tail: reported");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failing_append_is_counted_and_the_next_one_retries() {
        let d = scratch("fail");
        let dir = d.join("gone");
        let path = dir.join("digests.log");
        let mut log = LineLog::new(path.clone(), DIAG_LOG_CAP);
        assert!(log.append(b"1\n").is_err(), "its directory does not exist");
        assert_eq!(log.stats().failures, 1);
        assert_eq!(log.stats().written, 0);
        std::fs::create_dir_all(&dir).unwrap();
        log.append(b"2\n").unwrap();
        assert_eq!(log.stats().failures, 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2\n");
        let _ = std::fs::remove_dir_all(&d);
    }
}
