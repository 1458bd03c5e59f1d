//! Recovery at start from a store file a node refused as corrupt ([`StoreError::Corrupt`]: a
//! byte changed on disk in the middle of `blocks.log`, `parts.log` or `synced.log`), without an
//! operator.
//!
//! What it does (the node's start, before anything else opens the store,
//! [`recover_at_start`]): each record file is opened as the node would open it; on `Corrupt` at
//! offset `O` the whole file is **kept** as `FILE.corrupt-O` (fsync'ed; a second damage gets
//! `FILE.corrupt-O-1`, ...: never overwritten, never deleted), then the records before `O` (each
//! already checked by the open that refused the file) are written to `FILE.recover` — for
//! `parts.log` and `synced.log` followed by the checked records after the damaged one (its parts need not be
//! contiguous; the newest, of the height in progress, are at the end) —, fsync'ed and renamed
//! over `FILE`, the directory fsync'ed. A crash at any step leaves either the
//! damaged file (refused and recovered again at the next start) or the cut one. Every recovery
//! is an error event (`store: corrupt file kept aside and cut`), an entry of
//! `node-I/store-recovery.json` ([`RECOVERY_FILE`], every recovery of this home) and of
//! `status.json` `store_recovery` (and `/metrics` `ccron_store_recovered_total{file}`).
//!
//! What comes back from the peers: the blocks above the cut. The node's engine starts at the
//! height after the cut and takes the later heights from its peers through value sync, each
//! verified against its commit certificate; a node behind every peer's pruned history first
//! installs a peer's verified snapshot (`crate::catchup`). Nothing decided is dropped silently:
//! the kept copy holds every byte the node had, and the refused heights are decided again only
//! as the chain decided them. A recovered `parts.log` loses the damaged record only; the signing
//! guard (`crate::signguard`) refuses a second, different part for a round this node proposed
//! in. If that record was a part of the height in progress that the engine's WAL decides at
//! the restart, the node stops loudly (`decided value … is unknown`), as before: not handled. Corrupt snapshots are kept the
//! same way by `crate::snapshot` (renamed `….bin.corrupt`, the previous one restored).
//!
//! `CCRON_STORE_RECOVERY=off` ([`RECOVERY_ENV`]) turns this off: the node then refuses to start
//! on a corrupt file, as before, for an operator to inspect (and `repair-store`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::record::{Scan, scan_record};
use super::{BlockStore, Commit, Part, PartLog, StoreError};

/// The node-local record of every recovery of this home (`node-I/store-recovery.json`).
pub const RECOVERY_FILE: &str = "store-recovery.json";

/// The environment variable that turns recovery at start off (`off`).
pub const RECOVERY_ENV: &str = "CCRON_STORE_RECOVERY";

/// Corrupt files recovered at most this many times per file per start (each a distinct
/// damaged record: a file with more is refused as before).
const MAX_CUTS_PER_START: usize = 8;

/// One corrupt file the node refused, kept and replaced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    /// The file, relative to the node directory (`blocks.log`, `parts.log`,
    /// `snapshots/snapshot-….bin`).
    pub file: String,
    /// Where the damaged record starts (0 for a snapshot).
    pub offset: u64,
    /// Why it was refused (the typed error's text).
    pub reason: String,
    /// The kept copy, relative to the node directory.
    pub kept_as: String,
    /// Bytes of the file the node kept using: the records before the damage (and, for
    /// `parts.log`, the checked records after the damaged one).
    pub kept_bytes: u64,
    /// Bytes dropped (in the kept copy only): the damaged record, and for `blocks.log`
    /// everything after it (the heights after it come from the peers, in order).
    pub cut_bytes: u64,
    /// For `blocks.log`: the last height the cut store holds (the engine syncs the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_height_kept: Option<u64>,
    /// For `blocks.log`: the last height the file held (the last checked record after the
    /// damaged one, or the damaged record's height): the node takes the heights up to it from
    /// its peers before its engine starts (`crate::catchup::blocks::refill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_to: Option<u64>,
    /// Wall-clock milliseconds of the recovery.
    pub at_ms: i64,
}

/// Whether recovery at start is on (the default; `CCRON_STORE_RECOVERY=off` turns it off).
pub fn enabled_from_env() -> bool {
    std::env::var(RECOVERY_ENV).map_or(true, |v| v != "off")
}

/// Recovers node directory `dir`'s `blocks.log` (records of commit type `C`), `parts.log`
/// (parts of type `P`) and `synced.log` ([`super::SyncedBlock`]) when the node would refuse them as corrupt (module docs). Returns what
/// this call recovered (empty: both files open as they are, or are absent).
///
/// # Errors
/// I/O errors; a file still corrupt after `MAX_CUTS_PER_START` (8) cuts; any other error the
/// open gives (returned as is: the node refuses to start).
pub fn recover_at_start<C: Commit, P: Part>(dir: &Path) -> Result<Vec<Quarantined>, StoreError> {
    let mut out = Vec::new();
    let blocks = dir.join("blocks.log");
    let mut cut = recover_file(dir, &blocks, false, |p| {
        BlockStore::<C>::open(p).map(|s| Some(s.last_height()))
    })?;
    let kept_last = cut.last().and_then(|q| q.last_height_kept).unwrap_or(0);
    for q in &mut cut {
        q.last_height_kept = Some(kept_last);
        q.refill_to = Some(held_until::<C>(&dir.join(&q.kept_as), q.offset).max(kept_last + 1));
    }
    out.extend(cut);
    let parts = dir.join("parts.log");
    out.extend(recover_file(dir, &parts, true, |p| {
        PartLog::<P>::open(p).map(|_| None)
    })?);
    // The synced-value log is salvaged like the part log (its records need not be contiguous).
    let synced = dir.join(super::SYNCED_LOG);
    out.extend(recover_file(dir, &synced, true, |p| {
        PartLog::<super::SyncedBlock>::open(p).map(|_| None)
    })?);
    for q in &out {
        note(dir, q);
    }
    Ok(out)
}

/// Opens `path` with `open` (absent: nothing to do, never created here) and cuts it at each
/// damaged record the open reports, keeping the whole file aside each time.
fn recover_file(
    dir: &Path,
    path: &Path,
    salvage: bool,
    open: impl Fn(&Path) -> Result<Option<u64>, StoreError>,
) -> Result<Vec<Quarantined>, StoreError> {
    let mut out: Vec<Quarantined> = Vec::new();
    if !path.exists() {
        return Ok(out);
    }
    for _ in 0..=MAX_CUTS_PER_START {
        match open(path) {
            Ok(last) => {
                if let Some(q) = out.last_mut() {
                    q.last_height_kept = last;
                }
                return Ok(out);
            }
            Err(e @ StoreError::Corrupt { .. }) if out.len() < MAX_CUTS_PER_START => {
                let StoreError::Corrupt { offset, .. } = e else {
                    return Err(e);
                };
                out.push(keep_and_cut(dir, path, offset, salvage, &e.to_string())?);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The last height a kept `blocks.log` copy holds after its damaged record at `damaged` (the
/// last checked record that decodes; 0 when none).
fn held_until<C: Commit>(copy: &Path, damaged: u64) -> u64 {
    let Ok(bytes) = std::fs::read(copy) else {
        return 0;
    };
    let Some(mut off) = resume_after(&bytes, usize::try_from(damaged).unwrap_or(usize::MAX)) else {
        return 0;
    };
    let mut last = 0;
    while let Scan::Record(payload, next) = scan_record(&bytes, off) {
        if let Ok(d) = borsh::from_slice::<super::Decided<C>>(payload) {
            last = d.height();
        }
        match usize::try_from(next) {
            Ok(n) if n > off => off = n,
            _ => break,
        }
    }
    last
}

/// The height node directory `dir`'s block store must be brought back to from the peers
/// before its engine starts (`crate::catchup::blocks::refill`): the highest `refill_to` of its
/// recorded `blocks.log` recoveries, when its store is below it (also after a crash during an
/// earlier refill). `None`: nothing to refill.
///
/// # Errors
/// The store's.
pub fn refill_target<C: Commit>(dir: &Path) -> Result<Option<u64>, StoreError> {
    let want = recorded(dir)
        .iter()
        .filter(|q| q.file == "blocks.log")
        .filter_map(|q| q.refill_to)
        .max();
    let Some(want) = want else {
        return Ok(None);
    };
    let path = dir.join("blocks.log");
    if !path.exists() {
        return Ok(None);
    }
    let last = BlockStore::<C>::open(&path)?.last_height();
    Ok((last < want).then_some(want))
}

/// The first free name `FILE.corrupt-OFFSET[-N]` next to `path`.
fn kept_name(path: &Path, offset: u64) -> PathBuf {
    let base = format!("{}.corrupt-{offset}", path.display());
    let mut name = PathBuf::from(&base);
    let mut k = 1u32;
    while name.exists() {
        name = PathBuf::from(format!("{base}-{k}"));
        k = k.saturating_add(1);
    }
    name
}

/// `path` relative to `dir` (as a display string; the whole path when it is not below it).
fn relative(dir: &Path, path: &Path) -> String {
    path.strip_prefix(dir).unwrap_or(path).display().to_string()
}

/// Bytes of checksums a salvage may compute looking for the record after a damaged length.
const SALVAGE_BUDGET_BYTES: usize = 64 << 20;

/// Whether the records from `at` chain to the end of `bytes` (at least one, each checked).
fn chains_to_end(bytes: &[u8], at: usize, budget: &mut usize) -> bool {
    let mut off = at;
    let mut records = 0u32;
    loop {
        match scan_record(bytes, off) {
            // Eight zero bytes read as a record of no payload (CRC-32 of nothing is 0): inside a
            // damaged record's payload that is no record boundary (no record is empty).
            Scan::Record([], _) => return false,
            Scan::Record(payload, next) => {
                *budget = budget.saturating_sub(payload.len() + 8);
                records += 1;
                match usize::try_from(next) {
                    Ok(n) if n > off => off = n,
                    _ => return false,
                }
            }
            Scan::Torn => return records > 0 && off >= bytes.len(),
            Scan::Damaged(_) => return false,
        }
        if *budget == 0 {
            return false;
        }
    }
}

/// Where the records after the damaged one at `damaged` start again, for a file whose
/// records need not be contiguous heights (`parts.log`): the end of the damaged record when
/// its length field is intact (a payload or checksum flip), else the first later offset from
/// which checked records chain to the end of the file (a bounded search). `None`: nothing
/// after it verifies.
fn resume_after(bytes: &[u8], damaged: usize) -> Option<usize> {
    let mut budget = SALVAGE_BUDGET_BYTES;
    let header = bytes.get(damaged..damaged + 8)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let natural = damaged.saturating_add(8).saturating_add(len);
    if natural < bytes.len() && chains_to_end(bytes, natural, &mut budget) {
        return Some(natural);
    }
    (damaged + 1..bytes.len()).find(|&r| budget > 0 && chains_to_end(bytes, r, &mut budget))
}

/// Keeps the whole of `path` as `FILE.corrupt-OFFSET` and replaces `path` by its bytes before
/// `offset` (temporary file, fsync, rename, directory fsync), followed, when `salvage`, by the
/// checked records after the damaged one ([`resume_after`]).
fn keep_and_cut(
    dir: &Path,
    path: &Path,
    offset: u64,
    salvage: bool,
    reason: &str,
) -> Result<Quarantined, StoreError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StoreError::Io { path: p, source }
    };
    let bytes = std::fs::read(path).map_err(io(path))?;
    let cut = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let kept = kept_name(path, offset);
    {
        let mut f = File::create(&kept).map_err(io(&kept))?;
        f.write_all(&bytes).map_err(io(&kept))?;
        f.sync_all().map_err(io(&kept))?;
    }
    let tail = if salvage {
        resume_after(&bytes, cut).map_or(&[][..], |r| &bytes[r..])
    } else {
        &[][..]
    };
    let tmp = PathBuf::from(format!("{}.recover", path.display()));
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&bytes[..cut]).map_err(io(&tmp))?;
        f.write_all(tail).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    if let Some(parent) = path.parent() {
        File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(io(parent))?;
    }
    let q = Quarantined {
        file: relative(dir, path),
        offset,
        reason: reason.to_string(),
        kept_as: relative(dir, &kept),
        kept_bytes: (cut + tail.len()) as u64,
        cut_bytes: (bytes.len() - cut - tail.len()) as u64,
        last_height_kept: None,
        refill_to: None,
        at_ms: crate::core::now_ms(),
    };
    tracing::error!(
        file = %q.file,
        offset,
        kept_as = %q.kept_as,
        cut_bytes = q.cut_bytes,
        reason,
        "store: corrupt file kept aside and cut at the damaged record; the heights after it \
         come from the peers"
    );
    Ok(q)
}

/// Every recovery recorded in node directory `dir` ([`RECOVERY_FILE`]; none when absent or
/// unreadable).
pub fn recorded(dir: &Path) -> Vec<Quarantined> {
    std::fs::read(dir.join(RECOVERY_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Appends `q` to node directory `dir`'s [`RECOVERY_FILE`] (a failure is a warning: the kept
/// copy and the log's error event remain).
pub fn note(dir: &Path, q: &Quarantined) {
    let mut all = recorded(dir);
    all.push(q.clone());
    let tmp = dir.join(format!("{RECOVERY_FILE}.tmp"));
    let written = serde_json::to_vec_pretty(&all)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&tmp, b))
        .and_then(|()| std::fs::rename(&tmp, dir.join(RECOVERY_FILE)));
    if let Err(e) = written {
        tracing::warn!(error = %e, "store recovery: record not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Decided, PlainCommit};
    use crate::types::{Block, Hash32};

    fn scratch(name: &str) -> PathBuf {
        crate::testutil::scratch("recover", name)
    }

    fn block(h: u64, prev_id: Hash32) -> Block {
        crate::testutil::empty_block(h, prev_id)
    }

    #[derive(Clone, Debug, borsh::BorshSerialize, borsh::BorshDeserialize, PartialEq)]
    struct TestPart(u64, Vec<u8>);
    impl Part for TestPart {
        fn height(&self) -> u64 {
            self.0
        }
    }

    /// A store of `n` linked blocks; the value id of each height.
    fn store(dir: &Path, n: u64) -> Vec<Hash32> {
        let mut s = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let mut ids = vec![Hash32::default()];
        for h in 1..=n {
            let b = block(h, ids[h as usize - 1]);
            ids.push(b.id());
            s.append(Decided {
                commit: PlainCommit::of(&b),
                block: b,
            })
            .unwrap();
        }
        ids
    }

    fn flip(path: &Path, at: usize) -> Vec<u8> {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[at] ^= 0x10;
        std::fs::write(path, &bytes).unwrap();
        bytes
    }

    /// Issue 23 item 3: a byte flipped in the middle of `blocks.log` is refused (typed), and
    /// at start the whole file is kept aside, the store cut before the damaged record, every
    /// height before it kept exactly, and the record written; the node then opens.
    #[test]
    fn a_flipped_byte_in_blocks_log_is_kept_aside_and_the_store_cut_before_it() {
        let dir = scratch("blocks");
        let ids = store(&dir, 40);
        let path = dir.join("blocks.log");
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        let damaged = flip(&path, len / 2);
        // The node refuses it as it is.
        assert!(matches!(
            BlockStore::<PlainCommit>::open(&path),
            Err(StoreError::Corrupt { .. })
        ));
        let got = recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        let q = &got[0];
        assert_eq!(q.file, "blocks.log");
        assert!(q.reason.contains("corrupt record"), "{q:?}");
        // The whole damaged file is kept, byte for byte.
        assert_eq!(std::fs::read(dir.join(&q.kept_as)).unwrap(), damaged);
        assert_eq!(q.kept_bytes + q.cut_bytes, len as u64);
        // The store opens and holds exactly the heights before the damaged record.
        let s = BlockStore::<PlainCommit>::open(&path).unwrap();
        let last = s.last_height();
        assert_eq!(q.last_height_kept, Some(last));
        assert!((15..=25).contains(&last), "{last}");
        for (h, id) in ids.iter().enumerate().skip(1).take(last as usize) {
            assert_eq!(s.get(h as u64).unwrap().unwrap().block.id(), *id);
        }
        // The node appends the later heights (the peers' blocks) after the cut.
        drop(s);
        let mut s = BlockStore::<PlainCommit>::open(&path).unwrap();
        let b = block(last + 1, ids[last as usize]);
        s.append(Decided {
            commit: PlainCommit::of(&b),
            block: b,
        })
        .unwrap();
        assert_eq!(s.last_height(), last + 1);
        // Recorded for the status, and nothing more to recover.
        assert_eq!(recorded(&dir), got);
        assert!(
            recover_at_start::<PlainCommit, TestPart>(&dir)
                .unwrap()
                .is_empty()
        );
        // A second damage keeps the first copy and writes another.
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        flip(&path, len / 2);
        let again = recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        assert_eq!(again.len(), 1);
        assert_ne!(again[0].kept_as, q.kept_as);
        assert_eq!(std::fs::read(dir.join(&q.kept_as)).unwrap(), damaged);
        assert_eq!(recorded(&dir).len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_flipped_byte_in_parts_log_is_kept_aside_and_a_missing_log_not_created() {
        let dir = scratch("parts");
        let path = dir.join("parts.log");
        // Absent: nothing recovered, nothing created (a missing log stays refused).
        assert!(
            recover_at_start::<PlainCommit, TestPart>(&dir)
                .unwrap()
                .is_empty()
        );
        assert!(!path.exists() && !dir.join("blocks.log").exists());
        let mut log = PartLog::<TestPart>::open(&path).unwrap();
        for h in 1..=20 {
            log.append(&TestPart(h, vec![h as u8; 64])).unwrap();
        }
        drop(log);
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        let damaged = flip(&path, len / 2);
        assert!(matches!(
            PartLog::<TestPart>::open(&path),
            Err(StoreError::Corrupt { .. })
        ));
        let got = recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].file, "parts.log");
        assert_eq!(std::fs::read(dir.join(&got[0].kept_as)).unwrap(), damaged);
        // Only the damaged record is dropped: the parts after it (the heights in progress
        // are the newest) are kept.
        let log = PartLog::<TestPart>::open(&path).unwrap();
        let kept: Vec<u64> = log.parts().iter().map(|p| p.0).collect();
        assert_eq!(kept.len(), 19, "{kept:?}");
        assert!(kept.contains(&1) && kept.contains(&20), "{kept:?}");
        drop(log);
        // A flipped length field: the records after it are found again by their checksums.
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        let rec = len / 19;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[rec * 9 + 1] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let got = recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        let log = PartLog::<TestPart>::open(&path).unwrap();
        let kept: Vec<u64> = log.parts().iter().map(|p| p.0).collect();
        assert_eq!(kept.len(), 18, "{kept:?}");
        assert!(kept.contains(&20), "{kept:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `synced.log` is salvaged as `parts.log` is: a flipped byte drops the damaged record
    /// only, the whole file kept aside. The flip here lands in a record's length field, and
    /// the damaged payload ends in eight zero bytes: the salvage once took them for an empty
    /// record (CRC-32 of nothing is 0), kept them, and the next open cut the file a second
    /// time (two recoveries for one flip).
    #[test]
    fn a_flipped_byte_in_synced_log_drops_only_the_damaged_record() {
        use crate::store::{SYNCED_LOG, SyncedBlock};
        let dir = scratch("synced");
        let path = dir.join(SYNCED_LOG);
        let mut log = PartLog::<SyncedBlock>::open(&path).unwrap();
        for h in 1..=12 {
            log.append(&SyncedBlock {
                block: block(h, Hash32::default()),
            })
            .unwrap();
        }
        drop(log);
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        let damaged = flip(&path, len / 2);
        assert!(matches!(
            PartLog::<SyncedBlock>::open(&path),
            Err(StoreError::Corrupt { .. })
        ));
        let got = recover_at_start::<PlainCommit, TestPart>(&dir).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].file, SYNCED_LOG);
        assert_eq!(std::fs::read(dir.join(&got[0].kept_as)).unwrap(), damaged);
        let log = PartLog::<SyncedBlock>::open(&path).unwrap();
        let kept: Vec<u64> = log.parts().iter().map(|p| p.block.height).collect();
        assert_eq!(kept.len(), 11, "{kept:?}");
        assert!(kept.contains(&1) && kept.contains(&12), "{kept:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
