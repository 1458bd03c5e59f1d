//! Durable snapshots of a node's state, so that a restart re-executes only the blocks above the
//! newest one instead of the whole chain.
//!
//! A snapshot at height `h` holds what the node's state digest covers after executing block `h`:
//! the kernel's snapshot ([`LedgerHost::snapshot`]: application, ccron's reserved pages, agreed
//! time, tick gate, executed client requests, counters), plus the value id of block `h`, the
//! ledger's name and the state digest it must reproduce. The node writes one every
//! `snapshot_every` heights (after block `h` is durable in the block store and executed) and at
//! a clean stop.
//!
//! **Crash-atomicity with the block store.** The block store stays the source of truth: a
//! snapshot is only ever written for a height whose block is already appended and fsync'ed, so
//! any snapshot on disk describes a prefix of the durable chain. Each snapshot is one file,
//! written to `snapshot-H.bin.tmp`, fsync'ed, renamed to `snapshot-H.bin` and the directory
//! fsync'ed: a crash leaves either the complete new file or none (a leftover `.tmp` is removed
//! at the next start), and the previous snapshots are deleted only after the new one is durable
//! ([`KEEP_SNAPSHOTS`] are kept). No ordering between the two files is needed: losing a
//! snapshot only costs replay time.
//!
//! **Format** (version [`SNAPSHOT_VERSION`]): magic [`SNAPSHOT_MAGIC`], version (u32 LE), body
//! length (u64 LE), SHA-256 of the body, body (borsh). Reading checks the file size against
//! [`MAX_SNAPSHOT_BYTES`] before reading, then magic, version, length, checksum, the decode, the
//! height against the file name and the block store (never above its last height, and the block
//! id at that height must match), the ledger, and after restoring, the state digest. Any failure
//! is a typed [`SnapshotError`], a `tracing` warning and a count in the node's status; the node
//! then tries the previous snapshot, and finally replays the whole chain: never silently wrong.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use borsh::{BorshDeserialize, BorshSerialize};
use ccron::host::{Application, BlockOutcome, HostError};
use sha2::{Digest, Sha256};

use crate::ledger::LedgerHost;
use crate::store::{BlockStore, Commit, StoreError};
use crate::types::{Block, Hash32, Validators};

/// The first 8 bytes of every snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"CCRMSNAP";

/// The format version this build writes and reads. Version 2 (the kernel's first snapshot
/// layout, with executed requests and counters beside it) is refused with a typed error and the
/// node replays its block store instead: the state is a pure function of the decided blocks, so
/// the replay is the migration.
pub const SNAPSHOT_VERSION: u32 = 3;

/// The largest snapshot file read back (or written): the host snapshot's own decode bound
/// (`ccron::host::wire::ABSOLUTE_LIMIT_BYTES`) plus room for the header and the rest.
pub const MAX_SNAPSHOT_BYTES: u64 = ccron::host::wire::ABSOLUTE_LIMIT_BYTES as u64 + (1 << 20);

/// Heights between two snapshots unless configured (`node --snapshot-every`).
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 100;

/// Snapshots kept on disk (the newest and its predecessors): a corrupt newest one falls back to
/// the previous one rather than to a full replay.
pub const KEEP_SNAPSHOTS: usize = 2;

/// Header bytes: magic, version, body length, SHA-256 of the body.
const HEADER_BYTES: usize = 8 + 4 + 8 + 32;

/// The body of a snapshot file.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub(crate) struct Body {
    /// The height the state is after.
    pub(crate) height: u64,
    /// The value id of the block at `height` (checked against the block store).
    pub(crate) block_id: Hash32,
    /// The ledger's name (the genesis').
    pub(crate) ledger: String,
    /// [`LedgerHost::snapshot`].
    pub(crate) host: Vec<u8>,
    /// [`LedgerHost::state_digest`] at `height`: what the restored state must give.
    pub(crate) state_digest: [u8; 32],
}

/// Why a snapshot was not written or not used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// An I/O error on a snapshot file or the directory.
    #[error("snapshot {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file (or the snapshot to write) is larger than [`MAX_SNAPSHOT_BYTES`].
    #[error("snapshot {path}: {bytes} bytes, the limit is {MAX_SNAPSHOT_BYTES}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// Not a snapshot of this format: bad magic, unknown version, or a length that does not
    /// match the file (a torn or truncated file).
    #[error("snapshot {path}: bad header ({reason})")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The body's SHA-256 does not match the header's.
    #[error("snapshot {path}: checksum mismatch")]
    Checksum {
        /// The file.
        path: PathBuf,
    },
    /// The body does not decode, or its parts do not.
    #[error("snapshot {path}: does not decode ({reason})")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The snapshot's height disagrees with its file name, or is above the block store's last
    /// height (the store lost blocks the snapshot had executed).
    #[error("snapshot {path}: height {height} (file name {named}, block store at {store_last})")]
    WrongHeight {
        /// The file.
        path: PathBuf,
        /// The body's height.
        height: u64,
        /// The height in the file name.
        named: u64,
        /// The block store's last height.
        store_last: u64,
    },
    /// The snapshot is below the block store's pruned base: the blocks between it and the
    /// store's first height are gone, so it cannot be brought up to the store's last height.
    #[error("snapshot {path}: height {height} is below the block store's first height {first}")]
    BelowStore {
        /// The file.
        path: PathBuf,
        /// The snapshot's height.
        height: u64,
        /// The block store's lowest height.
        first: u64,
    },
    /// The block store's block at the snapshot's height is another block.
    #[error("snapshot {path}: block at height {height} is not the block store's")]
    OtherChain {
        /// The file.
        path: PathBuf,
        /// The height.
        height: u64,
    },
    /// A snapshot of another ledger.
    #[error("snapshot {path}: ledger {found}, this node runs {expected}")]
    OtherLedger {
        /// The file.
        path: PathBuf,
        /// In the snapshot.
        found: String,
        /// This node's.
        expected: String,
    },
    /// The host refused the snapshot, or the restored state's digest is not the recorded one.
    #[error("snapshot {path}: restore failed ({reason})")]
    Restore {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The block store could not be read to check the snapshot.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A node's snapshot directory.
#[derive(Debug, Clone)]
pub struct Snapshots {
    dir: PathBuf,
    /// The height of the snapshot an older build wrote below a planned upgrade, when this
    /// build is the next one ([`Snapshots::expect_build_change_at`]).
    build_change_at: Option<u64>,
}

/// What [`Snapshots::restore_latest`] did.
#[derive(Debug)]
pub struct Restored<A> {
    /// The restored host (a fresh one at height 0 when no snapshot was usable).
    pub ledger: LedgerHost<A>,
    /// The height of the snapshot restored, if one was.
    pub height: Option<u64>,
    /// The snapshots tried and rejected, newest first (each also a `tracing` warning).
    pub rejected: Vec<SnapshotError>,
}
impl Snapshots {
    /// Opens (or creates) the directory and removes leftover `.tmp` files (torn writes: a crash
    /// between creating a snapshot's temporary file and renaming it).
    ///
    /// # Errors
    /// I/O errors creating or listing the directory.
    pub fn open(dir: &Path) -> Result<Self, SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                tracing::warn!(path = %path.display(), "snapshot: removing a torn write");
                std::fs::remove_file(&path).map_err(|source| SnapshotError::Io {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            build_change_at: None,
        })
    }

    /// The snapshot at `height` was written by the previous build below a planned upgrade
    /// (`crate::upgrade`) and this build is the next one: its state digest covers the build's
    /// setup (handler set), so restoring it on this build gives another digest by design. That
    /// one snapshot is accepted with a different digest (a warning naming both); every other
    /// check (checksum, height, block id, ledger, restore) still applies, and the nodes'
    /// digests are compared again from the next height on.
    pub fn expect_build_change_at(&mut self, height: u64) {
        self.build_change_at = Some(height);
    }

    /// The file of the snapshot at `height`.
    pub fn path(&self, height: u64) -> PathBuf {
        self.dir.join(format!("snapshot-{height:020}.bin"))
    }

    /// The snapshots on disk, newest first (files named `snapshot-H.bin`; others ignored).
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn list(&self) -> Result<Vec<(u64, PathBuf)>, SnapshotError> {
        let io = |source| SnapshotError::Io {
            path: self.dir.clone(),
            source,
        };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let height = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("snapshot-"))
                .and_then(|n| n.strip_suffix(".bin"))
                .and_then(|h| h.parse::<u64>().ok());
            if let Some(h) = height {
                out.push((h, path));
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.0));
        Ok(out)
    }

    /// Writes the snapshot of `ledger` after block `height` (value id `block_id`) of ledger
    /// `ledger_name`, crash-atomically (temporary file, fsync, rename, directory fsync), then
    /// deletes all but the newest [`KEEP_SNAPSHOTS`] (a deletion failure is a warning: the new
    /// snapshot is durable). Returns the file's size.
    ///
    /// # Errors
    /// The host's snapshot failing, a snapshot above [`MAX_SNAPSHOT_BYTES`], I/O errors writing
    /// it (the previous snapshots are left as they were).
    pub fn write<A: Application>(
        &self,
        height: u64,
        block_id: Hash32,
        ledger_name: &str,
        ledger: &LedgerHost<A>,
    ) -> Result<u64, SnapshotError> {
        let path = self.path(height);
        let host = ledger.snapshot().map_err(|e| SnapshotError::Decode {
            path: path.clone(),
            reason: format!("host snapshot: {e}"),
        })?;
        let body = Body {
            height,
            block_id,
            ledger: ledger_name.to_string(),
            host,
            state_digest: ledger.state_digest(),
        };
        let bytes = encode_file(&body).map_err(|e| SnapshotError::Decode {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
            return Err(SnapshotError::TooLarge {
                path,
                bytes: bytes.len() as u64,
            });
        }
        let tmp = path.with_extension("bin.tmp");
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| SnapshotError::Io { path: p, source }
        };
        {
            let mut f = File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(&bytes).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))?;
        // The new snapshot is durable: a failure to delete an old one only costs disk space.
        // Kept: the new one and the newest below it, [`KEEP_SNAPSHOTS`] in all. Any above it
        // are ahead of the durable chain (a store cut by `repair-store` below them): they are
        // refused at start, and kept they would count as the newest and push the new one out.
        match self.list() {
            Ok(all) => {
                let (above, at_or_below): (Vec<_>, Vec<_>) =
                    all.into_iter().partition(|(h, _)| *h > height);
                for (_, old) in above
                    .into_iter()
                    .chain(at_or_below.into_iter().skip(KEEP_SNAPSHOTS))
                {
                    if let Err(e) = std::fs::remove_file(&old) {
                        tracing::warn!(path = %old.display(), error = %e, "old snapshot not deleted");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "old snapshots not listed for deletion"),
        }
        Ok(bytes.len() as u64)
    }

    /// Reads and checks the snapshot file `path` (named for height `named`) against `store`:
    /// size, header, checksum, decode, height (the name's, at most the store's last), block id.
    fn read<C: Commit>(
        &self,
        named: u64,
        path: &Path,
        store: &BlockStore<C>,
    ) -> Result<Body, SnapshotError> {
        let bytes = read_bounded(path)?;
        let body = decode_file(&bytes, path)?;
        let store_last = store.last_height();
        if body.height != named || body.height > store_last || body.height == 0 {
            return Err(SnapshotError::WrongHeight {
                path: path.to_path_buf(),
                height: body.height,
                named,
                store_last,
            });
        }
        if body.height < store.base() {
            return Err(SnapshotError::BelowStore {
                path: path.to_path_buf(),
                height: body.height,
                first: store.first_height(),
            });
        }
        // The block at the snapshot's height, or at the pruned base the next block's link to
        // it (its `prev_id`).
        let same = if body.height == store.base() {
            store
                .get(body.height + 1)?
                .is_some_and(|d| d.block.prev_id == body.block_id)
        } else {
            store
                .get(body.height)?
                .is_some_and(|d| d.commit.value_id() == body.block_id)
        };
        if !same {
            return Err(SnapshotError::OtherChain {
                path: path.to_path_buf(),
                height: body.height,
            });
        }
        Ok(body)
    }

    /// Prunes `store` below the snapshots on disk, keeping `retain` blocks below the newest
    /// one (at or below the store's last height) and every block above the oldest kept one
    /// (so that the previous snapshot stays restorable if the newest turns out corrupt):
    /// the store's base becomes `min(newest - retain, oldest kept)`. It prunes only once the
    /// records to drop take at least as many bytes as those kept, so each retained record is
    /// copied at most about once per its own size dropped (amortised: the file stays under
    /// about twice the retained blocks). `Ok(None)`: nothing pruned.
    ///
    /// # Errors
    /// Listing the snapshots; the store's I/O errors (the store is then left whole).
    pub fn prune_store<C: Commit>(
        &self,
        store: &mut BlockStore<C>,
        retain: u64,
    ) -> Result<Option<crate::store::Pruned>, SnapshotError> {
        let kept: Vec<u64> = self
            .list()?
            .into_iter()
            .map(|(h, _)| h)
            .filter(|h| *h <= store.last_height())
            .take(KEEP_SNAPSHOTS)
            .collect();
        let (Some(&newest), Some(&oldest)) = (kept.first(), kept.last()) else {
            return Ok(None);
        };
        let base = newest.saturating_sub(retain).min(oldest);
        let keep_from = base.saturating_add(1);
        let drop = store.bytes_below(keep_from);
        if keep_from <= store.first_height() || drop < store.bytes().saturating_sub(drop) {
            return Ok(None);
        }
        Ok(store.prune_below(keep_from)?)
    }

    /// Restores a fresh host (`fresh()`) of ledger `ledger_name` from the newest snapshot that
    /// passes every check (see the module docs), falling back to older ones and finally to a
    /// fresh host at height 0 (full replay). Each rejected snapshot is a `tracing` warning and an
    /// entry of [`Restored::rejected`].
    ///
    /// # Errors
    /// The directory not listing is not an error (full replay); none today.
    pub fn restore_latest<A: Application, C: Commit>(
        &self,
        store: &BlockStore<C>,
        ledger_name: &str,
        fresh: &dyn Fn() -> LedgerHost<A>,
    ) -> Restored<A> {
        let mut rejected = Vec::new();
        let candidates = match self.list() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "snapshots not listed; full replay");
                rejected.push(e);
                Vec::new()
            }
        };
        for (named, path) in candidates {
            let mut ledger = fresh();
            match self.read(named, &path, store).and_then(|body| {
                let build_change = self.build_change_at == Some(body.height);
                restore_body(&mut ledger, body, ledger_name, &path, build_change)
            }) {
                Ok(height) => {
                    tracing::info!(height, path = %path.display(), "restored from snapshot");
                    return Restored {
                        ledger,
                        height: Some(height),
                        rejected,
                    };
                }
                Err(e) => {
                    tracing::warn!(error = %e, "snapshot rejected; trying an older one");
                    self.keep_corrupt(&path, &e);
                    rejected.push(e);
                }
            }
        }
        Restored {
            ledger: fresh(),
            height: None,
            rejected,
        }
    }
}

impl Snapshots {
    /// A snapshot refused because its bytes changed on disk (too large, bad header, checksum,
    /// decode) is kept aside as `….bin.corrupt[-N]` (never deleted, no longer listed: the
    /// retention of newer snapshots does not remove it), an error event and an entry of the
    /// node's `store-recovery.json` (`crate::store::recover_at_start`, docs/malachite.md). A
    /// snapshot refused for any other reason (ahead of a cut store, another chain) stays.
    fn keep_corrupt(&self, path: &Path, e: &SnapshotError) {
        if !matches!(
            e,
            SnapshotError::TooLarge { .. }
                | SnapshotError::BadHeader { .. }
                | SnapshotError::Checksum { .. }
                | SnapshotError::Decode { .. }
        ) {
            return;
        }
        let base = format!("{}.corrupt", path.display());
        let mut kept = PathBuf::from(&base);
        let mut k = 1u32;
        while kept.exists() {
            kept = PathBuf::from(format!("{base}-{k}"));
            k = k.saturating_add(1);
        }
        if let Err(err) = std::fs::rename(path, &kept) {
            tracing::warn!(error = %err, path = %path.display(), "corrupt snapshot not renamed");
            return;
        }
        let node_dir = self.dir.parent().unwrap_or(&self.dir);
        let rel = |p: &Path| p.strip_prefix(node_dir).unwrap_or(p).display().to_string();
        let q = crate::store::Quarantined {
            file: rel(path),
            offset: 0,
            reason: e.to_string(),
            kept_as: rel(&kept),
            kept_bytes: 0,
            cut_bytes: std::fs::metadata(&kept).map_or(0, |m| m.len()),
            last_height_kept: None,
            refill_to: None,
            at_ms: crate::core::now_ms(),
        };
        tracing::error!(file = %q.file, kept_as = %q.kept_as, reason = %q.reason, "snapshot: corrupt file kept aside; an older snapshot (or the blocks) restores the state");
        crate::store::note_recovery(node_dir, &q);
    }
}

/// A snapshot file's bytes, its size checked against [`MAX_SNAPSHOT_BYTES`] before reading.
pub(crate) fn read_bounded(path: &Path) -> Result<Vec<u8>, SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > MAX_SNAPSHOT_BYTES {
        return Err(SnapshotError::TooLarge {
            path: path.to_path_buf(),
            bytes: size,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_SNAPSHOT_BYTES)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(bytes)
}

/// Restores `body` into the fresh `ledger` and checks the result: the height and the state
/// digest recorded.
pub(crate) fn restore_body<A: Application>(
    ledger: &mut LedgerHost<A>,
    body: Body,
    ledger_name: &str,
    path: &Path,
    build_change: bool,
) -> Result<u64, SnapshotError> {
    let restore = |reason: String| SnapshotError::Restore {
        path: path.to_path_buf(),
        reason,
    };
    if body.ledger != ledger_name {
        return Err(SnapshotError::OtherLedger {
            path: path.to_path_buf(),
            found: body.ledger,
            expected: ledger_name.to_string(),
        });
    }
    ledger
        .restore(&body.host)
        .map_err(|e| restore(e.to_string()))?;
    if ledger.height() != body.height {
        return Err(restore(format!(
            "host at height {}, snapshot of {}",
            ledger.height(),
            body.height
        )));
    }
    if ledger.state_digest() != body.state_digest && build_change {
        tracing::warn!(
            height = body.height,
            recorded = %crate::types::hex(&body.state_digest),
            restored = %crate::types::hex(&ledger.state_digest()),
            "the snapshot below a planned upgrade restored on the next build: another state \
             digest, by design (the build's setup is in it)"
        );
    } else if ledger.state_digest() != body.state_digest {
        return Err(restore(
            "restored state digest differs from the recorded one".into(),
        ));
    }
    Ok(body.height)
}

/// Re-executes the store's blocks above `from` up to its last height into `ledger`, reading
/// them one at a time, and hands each block and outcome to `each`. Returns the blocks run.
///
/// # Errors
/// A block that does not read back, or the host's error.
pub fn replay_above<A: Application, C: Commit>(
    store: &BlockStore<C>,
    ledger: &mut LedgerHost<A>,
    validators: &Validators,
    from: u64,
    mut each: impl FnMut(&LedgerHost<A>, &Block, &BlockOutcome),
) -> Result<u64, ReplayError> {
    let last = store.last_height();
    let mut run = 0;
    for h in from.saturating_add(1)..=last {
        let Some(d) = store.get(h)? else {
            return Err(ReplayError::Store(StoreError::OutOfOrder {
                got: h,
                expected: last,
            }));
        };
        let out = ledger.execute(&d.block, validators)?;
        each(ledger, &d.block, &out);
        run += 1;
    }
    Ok(run)
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The block store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The kernel refused a block (a halted application, heights or time out of order).
    #[error(transparent)]
    Host(#[from] HostError),
}

/// A snapshot file's bytes.
pub(crate) fn encode_file(body: &Body) -> std::io::Result<Vec<u8>> {
    let payload = borsh::to_vec(body)?;
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(&payload));
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Checks and decodes a snapshot file's bytes.
pub(crate) fn decode_file(bytes: &[u8], path: &Path) -> Result<Body, SnapshotError> {
    let header = |reason: String| SnapshotError::BadHeader {
        path: path.to_path_buf(),
        reason,
    };
    let (Some(magic), Some(version), Some(len), Some(sum), Some(payload)) = (
        bytes.get(0..8),
        bytes.get(8..12),
        bytes.get(12..20),
        bytes.get(20..HEADER_BYTES),
        bytes.get(HEADER_BYTES..),
    ) else {
        return Err(header(format!(
            "{} bytes, shorter than a header",
            bytes.len()
        )));
    };
    if magic != SNAPSHOT_MAGIC {
        return Err(header("not a snapshot file".into()));
    }
    let version = u32::from_le_bytes(version.try_into().unwrap_or_default());
    if version != SNAPSHOT_VERSION {
        return Err(header(format!(
            "version {version}, this build reads {SNAPSHOT_VERSION}"
        )));
    }
    let len = u64::from_le_bytes(len.try_into().unwrap_or_default());
    if len != payload.len() as u64 {
        return Err(header(format!(
            "body of {len} bytes announced, {} present",
            payload.len()
        )));
    }
    if Sha256::digest(payload).as_slice() != sum {
        return Err(SnapshotError::Checksum {
            path: path.to_path_buf(),
        });
    }
    borsh::from_slice::<Body>(payload).map_err(|e| SnapshotError::Decode {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Signer;
    use crate::ledger::{DEFAULT_PAGES, LedgerSetup};
    use crate::store::{Decided, PlainCommit};
    use crate::types::{Address, TickTx};
    use ccron::host::CronLedger;
    use ccron_ledgers::demo::{DemoLedger, DemoTables, demo_ledger};

    type Demo = CronLedger<DemoLedger>;

    fn fresh() -> LedgerHost<Demo> {
        let tables = DemoTables::default();
        let setup = LedgerSetup {
            validators: 4,
            tick_periods: tables.components().into_iter().map(|c| (c, 200)).collect(),
            pages: DEFAULT_PAGES,
        };
        LedgerHost::new(demo_ledger(&tables).unwrap(), &setup)
    }

    const GENESIS_MS: i64 = 1_700_000_000_000;

    /// A fresh scratch directory for one test.
    fn scratch(name: &str) -> PathBuf {
        crate::testutil::scratch("snapshot", name)
    }

    fn validators() -> (Validators, Vec<Address>) {
        let keys: Vec<[u8; 32]> = (1..=4u8)
            .map(|i| Signer::new([i; 32]).public_key())
            .collect();
        let set = Validators::new(&keys);
        let addrs = set.addresses().to_vec();
        (set, addrs)
    }

    /// Block `h` of a demo chain: every component ticked by a rotating validator, 250 ms apart
    /// (`shift` moves the agreed time: another chain).
    fn block(h: u64, components: &[u32], addrs: &[Address], shift: i64) -> Block {
        // The submitter: one of the four validators of `validators()`, in turn.
        let signer = Signer::new([(h % addrs.len() as u64) as u8 + 1; 32]);
        Block {
            height: h,
            prev_round: 0,
            prev_id: Hash32::default(),
            samples: Vec::new(),
            agreed_time_ms: GENESIS_MS + 250 * h as i64 + shift,
            ticks: components
                .iter()
                .map(|&component| {
                    TickTx::sign(&crate::crypto::SigningDomain::V1, component, h, &signer)
                })
                .collect(),
            requests: Vec::new(),
            prev_state: None,
        }
    }

    fn decided(b: Block) -> Decided<PlainCommit> {
        Decided {
            commit: PlainCommit::of(&b),
            block: b,
        }
    }

    /// A node's life: blocks 1..=n decided into a store in `dir` and executed, a snapshot every
    /// `every` heights. Returns the final state digest and fires.
    fn run_chain(dir: &Path, n: u64, every: u64, shift: i64) -> ([u8; 32], u64) {
        let (set, addrs) = validators();
        let mut store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let mut ledger = fresh();
        let components: Vec<u32> = DemoTables::default().components();
        let mut prev_id = Hash32::default();
        for h in 1..=n {
            let mut b = block(h, &components, &addrs, shift);
            // Linked as a chain is: each block names the previous one.
            b.prev_id = prev_id;
            prev_id = b.id();
            store.append(decided(b.clone())).unwrap();
            ledger.execute(&b, &set).unwrap();
            if h % every == 0 {
                snaps.write(h, b.id(), "demo", &ledger).unwrap();
            }
        }
        (ledger.state_digest(), ledger.host().counters().fires)
    }

    /// A restart: the store reopened, the newest valid snapshot restored, the rest replayed.
    fn restart(dir: &Path) -> (Restored<Demo>, u64) {
        let (set, _) = validators();
        let store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let mut restored = snaps.restore_latest(&store, "demo", &fresh);
        let from = restored.height.unwrap_or(0);
        let run = replay_above(&store, &mut restored.ledger, &set, from, |_, _, _| {}).unwrap();
        (restored, run)
    }

    #[test]
    fn a_restart_from_a_snapshot_reaches_the_full_replay_state() {
        let dir = scratch("restart");
        let (digest, fires) = run_chain(&dir, 70, 20, 0);
        assert!(fires > 0, "the demo chain fires");
        let (r, run) = restart(&dir);
        assert_eq!(r.height, Some(60));
        assert_eq!(
            run, 10,
            "only the blocks above the snapshot are re-executed"
        );
        assert!(r.rejected.is_empty(), "{:?}", r.rejected);
        assert_eq!(r.ledger.state_digest(), digest);
        assert_eq!(r.ledger.host().counters().fires, fires);
        // What the kernel derives from the blocks survives the snapshot too: the tick replay
        // floor per (component, submitter) and the ticks per submitter.
        let (set, _) = validators();
        let store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let mut full = fresh();
        replay_above(&store, &mut full, &set, 0, |_, _, _| {}).unwrap();
        let floor = |l: &LedgerHost<Demo>| l.host().gate().floor_entries().collect::<Vec<_>>();
        assert!(!floor(&full).is_empty());
        assert_eq!(floor(&r.ledger), floor(&full));
        assert_eq!(r.ledger.host().counters(), full.host().counters());
        // Only the newest KEEP_SNAPSHOTS stay on disk.
        let kept = Snapshots::open(&dir.join("snapshots"))
            .unwrap()
            .list()
            .unwrap();
        let heights: Vec<u64> = kept.iter().map(|k| k.0).collect();
        assert_eq!(heights, vec![60, 40]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_snapshot_falls_back_to_the_previous_then_to_full_replay_and_is_reported() {
        let dir = scratch("corrupt");
        let (digest, _) = run_chain(&dir, 50, 20, 0);
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        // One flipped bit in the newest snapshot's body.
        let newest = snaps.path(40);
        let mut bytes = std::fs::read(&newest).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&newest, &bytes).unwrap();
        let (r, run) = restart(&dir);
        assert_eq!(r.height, Some(20));
        assert_eq!(run, 30);
        assert!(
            matches!(r.rejected[..], [SnapshotError::Checksum { .. }]),
            "{:?}",
            r.rejected
        );
        assert_eq!(r.ledger.state_digest(), digest);
        // Kept aside, byte for byte, no longer listed (retention never deletes it), recorded.
        let kept = newest.with_extension("bin.corrupt");
        assert_eq!(std::fs::read(&kept).unwrap(), bytes);
        assert!(!newest.exists());
        let recorded = crate::store::recorded_recoveries(&dir);
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        assert!(
            recorded[0].file.starts_with("snapshots/snapshot-"),
            "{recorded:?}"
        );
        assert!(recorded[0].reason.contains("checksum"), "{recorded:?}");
        // The previous one cut short too (a file system that lost its tail): full replay.
        let older = snaps.path(20);
        let bytes = std::fs::read(&older).unwrap();
        std::fs::write(&older, &bytes[..bytes.len() / 2]).unwrap();
        let (r, run) = restart(&dir);
        assert_eq!(r.height, None);
        assert_eq!(run, 50);
        assert!(
            matches!(r.rejected[..], [SnapshotError::BadHeader { .. }]),
            "{:?}",
            r.rejected
        );
        assert_eq!(r.ledger.state_digest(), digest);
        assert!(older.with_extension("bin.corrupt").exists());
        assert_eq!(crate::store::recorded_recoveries(&dir).len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_torn_snapshot_write_leaves_the_previous_one_usable() {
        let dir = scratch("torn");
        let (digest, _) = run_chain(&dir, 45, 20, 0);
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        // A crash while writing the snapshot of height 45: its temporary file, half written,
        // never renamed.
        let full = std::fs::read(snaps.path(40)).unwrap();
        let tmp = snaps.path(45).with_extension("bin.tmp");
        std::fs::write(&tmp, &full[..full.len() / 2]).unwrap();
        let (r, run) = restart(&dir);
        assert!(!tmp.exists(), "the torn write is removed at start");
        assert_eq!(r.height, Some(40));
        assert_eq!(run, 5);
        assert!(r.rejected.is_empty(), "{:?}", r.rejected);
        assert_eq!(r.ledger.state_digest(), digest);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_snapshot_ahead_of_the_store_or_of_another_chain_is_refused() {
        let dir = scratch("other");
        run_chain(&dir, 40, 20, 0);
        // The same snapshots next to a shorter store: height 40 is ahead of it, 20 is fine.
        let short = dir.join("short");
        std::fs::create_dir_all(&short).unwrap();
        run_chain(&short, 30, 1_000, 0);
        std::fs::rename(dir.join("snapshots"), short.join("snapshots")).unwrap();
        let (r, _) = restart(&short);
        assert_eq!(r.height, Some(20));
        assert!(
            matches!(
                r.rejected[..],
                [SnapshotError::WrongHeight {
                    height: 40,
                    store_last: 30,
                    ..
                }]
            ),
            "{:?}",
            r.rejected
        );
        // Next to another chain's store (other agreed times): neither snapshot is used.
        let other = dir.join("other");
        std::fs::create_dir_all(&other).unwrap();
        let (digest, _) = run_chain(&other, 40, 1_000, 7);
        std::fs::rename(short.join("snapshots"), other.join("snapshots")).unwrap();
        let (r, run) = restart(&other);
        assert_eq!(r.height, None);
        assert_eq!(run, 40);
        assert!(
            r.rejected
                .iter()
                .all(|e| matches!(e, SnapshotError::OtherChain { .. })),
            "{:?}",
            r.rejected
        );
        assert_eq!(r.ledger.state_digest(), digest);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Figures for the docs, not a timing assertion: restart time of a node with `N` decided
    /// heights (`CCRON_RESTART_HEIGHTS`, default 5,000) from its newest snapshot (every
    /// [`DEFAULT_SNAPSHOT_EVERY`]) against a full replay, both computing the per-height digest
    /// as the node does for `digests.log`. `cargo test -p ccron-node --release --lib
    /// restart_time_figures -- --ignored --nocapture`.
    #[test]
    #[ignore = "figures for docs/malachite.md; seconds of work"]
    #[allow(clippy::disallowed_methods)]
    fn restart_time_figures() {
        use std::time::Instant;
        let n: u64 = std::env::var("CCRON_RESTART_HEIGHTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5_000);
        let dir = scratch("figures");
        let t = Instant::now();
        let (digest, _) = run_chain(&dir, n, DEFAULT_SNAPSHOT_EVERY, 0);
        let build = t.elapsed();
        let (set, _) = validators();
        let t = Instant::now();
        let store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let open = t.elapsed();
        let t = Instant::now();
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let mut r = snaps.restore_latest(&store, "demo", &fresh);
        let restore = t.elapsed();
        let from = r.height.unwrap_or(0);
        let t = Instant::now();
        let run = replay_above(&store, &mut r.ledger, &set, from, |l, _, _| {
            std::hint::black_box(l.state_digest());
        })
        .unwrap();
        let above = t.elapsed();
        assert_eq!(r.ledger.state_digest(), digest);
        let t = Instant::now();
        let mut from_genesis = fresh();
        replay_above(&store, &mut from_genesis, &set, 0, |l, _, _| {
            std::hint::black_box(l.state_digest());
        })
        .unwrap();
        let full = t.elapsed();
        assert_eq!(from_genesis.state_digest(), digest);
        let bytes = std::fs::metadata(snaps.path(from)).map_or(0, |m| m.len());
        let store_bytes = std::fs::metadata(dir.join("blocks.log")).map_or(0, |m| m.len());
        println!(
            "heights {n} (chain built in {build:.2?}; blocks.log {store_bytes} bytes): store open \
             {open:.2?}; from the snapshot at {from} ({bytes} bytes) restore {restore:.2?} + \
             {run} blocks {above:.2?}; full replay of {n} blocks {full:.2?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_header_or_another_version_is_refused() {
        let path = Path::new("x");
        let body = Body {
            height: 1,
            block_id: Hash32::default(),
            ledger: "demo".into(),
            host: vec![1, 2, 3],
            state_digest: [0; 32],
        };
        let good = encode_file(&body).unwrap();
        assert_eq!(decode_file(&good, path).unwrap(), body);
        let mut v2 = good.clone();
        v2[8] = 2;
        assert!(matches!(
            decode_file(&v2, path),
            Err(SnapshotError::BadHeader { .. })
        ));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(matches!(
            decode_file(&magic, path),
            Err(SnapshotError::BadHeader { .. })
        ));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(
            decode_file(&long, path),
            Err(SnapshotError::BadHeader { .. })
        ));
        assert!(matches!(
            decode_file(&good[..10], path),
            Err(SnapshotError::BadHeader { .. })
        ));
    }

    fn heights(dir: &Path) -> Vec<u64> {
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        snaps.list().unwrap().iter().map(|k| k.0).collect()
    }

    #[test]
    fn a_pruned_store_restarts_from_a_snapshot_at_or_above_its_base_only() {
        let dir = scratch("pruned");
        let (digest, fires) = run_chain(&dir, 70, 20, 0);
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let mut store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        // Retain 10 below the newest (60): 50, but never above the previous snapshot (40).
        let pruned = snaps.prune_store(&mut store, 10).unwrap().unwrap();
        assert_eq!((pruned.heights, store.first_height()), (40, 41));
        // Not again until the prefix to drop outweighs what is kept.
        assert_eq!(snaps.prune_store(&mut store, 0).unwrap(), None);
        drop(store);
        let (r, run) = restart(&dir);
        assert_eq!((r.height, run), (Some(60), 10));
        assert_eq!(r.ledger.state_digest(), digest);
        assert_eq!(r.ledger.host().counters().fires, fires);
        // The newest corrupt: the one at the store's base, checked through block 41's link.
        let newest = snaps.path(60);
        let mut bytes = std::fs::read(&newest).unwrap();
        let at = bytes.len() - 3;
        bytes[at] ^= 1;
        std::fs::write(&newest, &bytes).unwrap();
        let (r, run) = restart(&dir);
        assert_eq!((r.height, run), (Some(40), 30), "{:?}", r.rejected);
        assert_eq!(r.ledger.state_digest(), digest);
        // Pruned past it: neither is usable, and a full replay is impossible.
        let mut store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        store.prune_below(51).unwrap().unwrap();
        drop(store);
        let store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let r = snaps.restore_latest(&store, "demo", &fresh);
        assert_eq!(r.height, None);
        assert!(
            matches!(
                r.rejected[..],
                [SnapshotError::BelowStore {
                    height: 40,
                    first: 51,
                    ..
                }]
            ),
            "{:?}",
            r.rejected
        );
        assert_eq!(
            store.base(),
            50,
            "the node refuses to start (NodeError::Pruned)"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // Issue 23, item 6: after the store was cut below the newest snapshots, the stale ones
    // (ahead of the store) counted as the newest and each new snapshot deleted the previous
    // good one, or itself.
    #[test]
    fn snapshot_retention_keeps_working_after_the_store_was_cut() {
        let dir = scratch("retention");
        run_chain(&dir, 70, 20, 0);
        assert_eq!(heights(&dir), vec![60, 40]);
        // The store cut at height 45 (`repair-store`): 60 is ahead of it.
        let store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let after: u64 = (46..=70)
            .map(|h| {
                borsh::to_vec(&store.get(h).unwrap().unwrap())
                    .unwrap()
                    .len() as u64
                    + 8
            })
            .sum();
        let cut_at = store.bytes() - after;
        drop(store);
        crate::store::cut_record_file(&dir.join("blocks.log"), Some(cut_at)).unwrap();
        let (mut r, run) = restart(&dir);
        assert_eq!((r.height, run), (Some(40), 5));
        let (set, addrs) = validators();
        let components: Vec<u32> = DemoTables::default().components();
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let mut store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        assert_eq!(store.last_height(), 45);
        for h in 46..=50 {
            let mut b = block(h, &components, &addrs, 0);
            b.prev_id = store.last().unwrap().commit.value_id;
            store.append(decided(b.clone())).unwrap();
            r.ledger.execute(&b, &set).unwrap();
            if h == 48 || h == 50 {
                let id = store.last().unwrap().commit.value_id;
                snaps.write(h, id, "demo", &r.ledger).unwrap();
            }
        }
        assert_eq!(
            heights(&dir),
            vec![50, 48],
            "the stale 60 is gone, the new ones kept"
        );
        let (r, run) = restart(&dir);
        assert_eq!((r.height, run), (Some(50), 0));
        assert!(r.rejected.is_empty(), "{:?}", r.rejected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
