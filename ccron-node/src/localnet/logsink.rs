//! A localnet node's log, bounded: the node's stderr through a pipe into `node.log`, rotated
//! to `node.log.1` at [`NODE_LOG_CAP`] bytes (one older generation kept), so a localnet left
//! running for weeks does not fill the disk (a node logs about 100 MB an hour at `info`).
//!
//! The copy runs on its own thread per node process and ends when the process exits (end of
//! the pipe). It never blocks the node on a failing disk: a write that fails is traced, and the
//! rest of the stream is read and counted as dropped, reported when the stream ends.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// A node's log file in its directory.
pub const NODE_LOG: &str = "node.log";

/// The older generation of a node's log after a rotation.
pub const NODE_LOG_OLD: &str = "node.log.1";

/// Bytes of `node.log` before it is rotated.
pub const NODE_LOG_CAP: u64 = 64 << 20;

/// What a finished copy did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SinkStats {
    /// Bytes written to the log files.
    pub written: u64,
    /// Rotations done.
    pub rotations: u64,
    /// Bytes read but not written (a failing disk).
    pub dropped: u64,
}

/// Copies `from` into `path`, appending, rotating to `path.1` (replacing it) at the first line
/// end once the file holds `cap` bytes: a file holds at most `cap` bytes plus one line.
pub fn copy_rotating(mut from: impl Read, path: &Path, cap: u64) -> SinkStats {
    let old = crate::linelog::rotated(path);
    let mut stats = SinkStats::default();
    let mut file = open(path);
    let mut size = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::error!(log = %path.display(), error = %e, "node log pipe failed");
                break;
            }
        };
        let mut chunk = &buf[..n];
        while !chunk.is_empty() {
            // Below the cap: up to the cap. At or past it: to the end of the current line, then
            // the file rotates (so a file holds at most the cap plus one line).
            let cut = match cap.checked_sub(size).filter(|&room| room > 0) {
                Some(room) => usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len()),
                None => chunk
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(chunk.len(), |p| p + 1),
            };
            let (head, rest) = chunk.split_at(cut);
            match file.as_mut().map(|f| f.write_all(head)) {
                Some(Ok(())) => {
                    stats.written = stats.written.saturating_add(head.len() as u64);
                    size = size.saturating_add(head.len() as u64);
                }
                Some(Err(e)) => {
                    tracing::error!(log = %path.display(), error = %e, "node log write failed: dropping the log until the node exits");
                    file = None;
                    stats.dropped = stats.dropped.saturating_add(head.len() as u64);
                }
                None => stats.dropped = stats.dropped.saturating_add(head.len() as u64),
            }
            chunk = rest;
            let at_line_end = head.last() == Some(&b'\n');
            if size >= cap && at_line_end && file.is_some() {
                drop(file.take());
                if let Err(e) = std::fs::rename(path, &old) {
                    tracing::error!(log = %path.display(), error = %e, "node log rotation failed");
                }
                file = open(path);
                size = 0;
                stats.rotations = stats.rotations.saturating_add(1);
            }
        }
    }
    if stats.dropped > 0 {
        tracing::error!(log = %path.display(), dropped = stats.dropped, "node log bytes dropped");
    }
    stats
}

fn open(path: &Path) -> Option<File> {
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!(log = %path.display(), error = %e, "node log cannot be opened");
            None
        }
    }
}

/// Starts copying a node's stderr into `path` on a named thread.
///
/// # Errors
/// The thread cannot be started.
pub fn start(from: impl Read + Send + 'static, path: PathBuf, name: String) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            copy_rotating(from, &path, NODE_LOG_CAP);
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccron-logsink-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn lines(n: usize) -> String {
        (0..n)
            .map(|i| format!("line {i:05} of the node's log\n"))
            .collect()
    }

    #[test]
    fn the_log_rotates_at_line_ends_and_keeps_the_newest_lines() {
        let d = scratch("rotate");
        let path = d.join(NODE_LOG);
        let input = lines(2_000); // 29 bytes a line: 58,000 bytes
        // A reader returning odd-sized chunks, so cuts fall inside lines.
        struct Chunky<'a>(&'a [u8]);
        impl Read for Chunky<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(997);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let stats = copy_rotating(Chunky(input.as_bytes()), &path, 10_000);
        assert_eq!(stats.dropped, 0);
        assert_eq!(stats.written, input.len() as u64);
        assert!(stats.rotations >= 5, "{stats:?}");
        let new = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(d.join(NODE_LOG_OLD)).unwrap();
        for f in [&new, &old] {
            assert!(f.len() <= 10_000 + 28, "{}", f.len());
            assert!(f.ends_with('\n'));
            assert!(
                f.lines().all(|l| l.starts_with("line ") && l.len() == 28),
                "a line was cut"
            );
        }
        // The two files are the input's tail, in order.
        let kept = format!("{old}{new}");
        assert!(input.ends_with(&kept));
        assert!(kept.len() > 10_000);
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn an_existing_log_is_appended_to_and_counted_toward_the_cap() {
        let d = scratch("append");
        let path = d.join(NODE_LOG);
        std::fs::write(&path, "before the restart\n").unwrap();
        let stats = copy_rotating(&b"after\n"[..], &path, 1_000);
        assert_eq!(stats.rotations, 0);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "before the restart\nafter\n"
        );
        // At the cap already: the next line goes in, then the file rotates.
        let stats = copy_rotating(&b"one\ntwo\n"[..], &path, 20);
        assert_eq!(stats.rotations, 1);
        assert_eq!(
            std::fs::read_to_string(d.join(NODE_LOG_OLD)).unwrap(),
            "before the restart\nafter\none\n"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn an_unwritable_log_drains_the_pipe_and_counts_the_drop() {
        let d = scratch("unwritable");
        // A directory where the log file should be: opening it fails.
        let path = d.join(NODE_LOG);
        std::fs::create_dir_all(&path).unwrap();
        let stats = copy_rotating(&b"lost line\n"[..], &path, 1_000);
        assert_eq!(stats.written, 0);
        assert_eq!(stats.dropped, 10);
        let _ = std::fs::remove_dir_all(d);
    }
}
