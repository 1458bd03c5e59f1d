//! Disk faults in a running localnet (`--disk-faults SEED`, [`crate::faults::DiskPlan`]): a
//! node SIGKILLed, one bit flipped in the middle of its `blocks.log`, `parts.log` or newest
//! snapshot, the node restarted from its storage; and the judgement of what it did about it.
//!
//! Before each flip the localnet reads the node's decided blocks (as the kill-all check does,
//! [`read_block_ids`]); after the run every block held before a flip must still be in the
//! node's store with the same value id (nothing decided dropped: the node refuses the damaged
//! record and takes the heights after it from its peers), the node must have recorded the
//! corruption (`store-recovery.json`: the damaged file kept aside) and decided a new height
//! within [`DISK_RESUME_BOUND`] of its restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::node_dir;
use crate::faults::{DiskFile, DiskPlan, flip_bit};
use crate::supervise::Supervisor;

use super::LocalnetOptions;
use super::judge::{compare_blocks, millis, read_block_ids, read_status};
use super::report::KillAllReport;
use super::spawn::{Children, spawn_node};

/// A node restarted after a flip must decide a height above the one its store held at the flip
/// within this time of its restart (a process start, the store's recovery, the engine's sync
/// of the heights after the cut).
pub const DISK_RESUME_BOUND: Duration = Duration::from_secs(20);

/// One flip, as applied and judged.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct DiskFlip {
    /// When (ms from the run's start).
    pub at_ms: u64,
    /// The node.
    pub node: usize,
    /// The kind of file planned (`blocks.log`, `parts.log`, `snapshot`).
    pub planned: String,
    /// The file flipped, relative to the node's directory (the plan's, or `blocks.log` when
    /// the planned file was absent or too small).
    pub file: String,
    /// The byte offset flipped.
    pub offset: u64,
    /// The bit flipped.
    pub bit: u8,
    /// The highest height the node's store held at the flip.
    pub height_at_flip: u64,
    /// When the node was restarted (ms from the run's start).
    pub restarted_at_ms: Option<u64>,
    /// From the restart to the first poll at which the node held a height above
    /// `height_at_flip` (`None`: not within [`DISK_RESUME_BOUND`]).
    pub resumed_after_ms: Option<u64>,
    /// The node recorded the corrupt file (`store-recovery.json`) after this flip.
    pub detected: bool,
    /// Where it kept the damaged file (relative to its directory).
    pub kept_as: Option<String>,
}

/// The report's `disk_faults`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct DiskFaultReport {
    /// The seed.
    pub seed: u64,
    /// Every flip.
    pub flips: Vec<DiskFlip>,
    /// (node, height) pairs held before a flip and compared after the run.
    pub blocks_compared: u64,
    /// Blocks held before a flip and missing from the node's store at the end.
    pub lost: u64,
    /// Blocks held before a flip and another value at that height at the end.
    pub changed: u64,
    /// Flips the node did not record as corrupt data.
    pub undetected: u64,
    /// Flips after which the node did not decide a new height within the bound.
    pub not_resumed: u64,
}

/// The localnet's side of the disk faults.
#[derive(Debug)]
pub(super) struct DiskFaults {
    seed: u64,
    plan: DiskPlan,
    next: usize,
    /// The node down for a flip and when it is restarted.
    down: Option<(usize, Duration)>,
    /// Per node, every block it held before a flip.
    before: Vec<BTreeMap<u64, String>>,
    flips: Vec<DiskFlip>,
}

/// The newest `snapshot-H.bin` in node directory `dir`.
fn newest_snapshot_file(dir: &Path) -> Option<PathBuf> {
    let snaps = dir.join("snapshots");
    std::fs::read_dir(&snaps)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let h = name
                .strip_prefix("snapshot-")?
                .strip_suffix(".bin")?
                .parse::<u64>()
                .ok()?;
            Some((h, e.path()))
        })
        .max_by_key(|(h, _)| *h)
        .map(|(_, p)| p)
}

impl DiskFaults {
    pub(super) fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        Self {
            seed,
            plan: DiskPlan::new(seed, nodes, duration),
            next: 0,
            down: None,
            before: vec![BTreeMap::new(); nodes],
            flips: Vec::new(),
        }
    }

    /// Applies what is due at instant `t` of the run: a restart, then the next flip (its
    /// line for the report's fault log). The number of nodes restarted.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn step(
        &mut self,
        t: Duration,
        opts: &LocalnetOptions,
        home: &Path,
        children: &mut Children,
        pids: &mut Vec<u32>,
        byzantine_from_ms: i64,
        supervisor: &Supervisor,
        log: &mut Vec<String>,
    ) -> std::io::Result<u32> {
        let mut restarted = 0;
        if let Some((i, at)) = self.down
            && t >= at
        {
            restarted +=
                self.restart(t, opts, home, children, pids, byzantine_from_ms, supervisor)?;
            log.push(format!("{} restart {i} (disk)", t.as_millis()));
            self.down = None;
        }
        while self.down.is_none()
            && let Some(ev) = self.plan.events.get(self.next).copied()
            && ev.at <= t
        {
            self.next += 1;
            let i = ev.node;
            if let Some(mut c) = children.0[i].take() {
                let _ = c.kill(); // SIGKILL
                let _ = c.wait();
            }
            let dir = node_dir(home, i);
            let held = read_block_ids(home, i);
            let height_at_flip = held.keys().next_back().copied().unwrap_or(0);
            self.before[i].extend(held);
            let planned = match ev.file {
                DiskFile::Blocks => Some(dir.join("blocks.log")),
                DiskFile::Parts => Some(dir.join("parts.log")),
                DiskFile::Snapshot => newest_snapshot_file(&dir),
            };
            let mut flipped = None;
            for path in planned.into_iter().chain([dir.join("blocks.log")]) {
                if let Some(offset) = flip_bit(&path, ev.position_ppm, ev.bit)? {
                    flipped = Some((path, offset));
                    break;
                }
            }
            let Some((path, offset)) = flipped else {
                // Nothing to flip yet (an empty store): the node just restarts.
                self.down = Some((i, t + ev.down));
                continue;
            };
            let file = path
                .strip_prefix(&dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            tracing::warn!(node = i, %file, offset, bit = ev.bit, "disk fault: bit flipped");
            log.push(format!(
                "{} flip {i} {file}@{offset} bit {}",
                t.as_millis(),
                ev.bit
            ));
            self.flips.push(DiskFlip {
                at_ms: millis(t),
                node: i,
                planned: ev.file.name().to_string(),
                file,
                offset,
                bit: ev.bit,
                height_at_flip,
                ..DiskFlip::default()
            });
            self.down = Some((i, t + ev.down));
        }
        Ok(restarted)
    }

    #[allow(clippy::too_many_arguments)]
    fn restart(
        &mut self,
        t: Duration,
        opts: &LocalnetOptions,
        home: &Path,
        children: &mut Children,
        pids: &mut Vec<u32>,
        byzantine_from_ms: i64,
        supervisor: &Supervisor,
    ) -> std::io::Result<u32> {
        let Some((i, _)) = self.down else {
            return Ok(0);
        };
        if let Some(f) = self.flips.iter_mut().rev().find(|f| f.node == i)
            && f.restarted_at_ms.is_none()
        {
            f.restarted_at_ms = Some(millis(t));
        }
        if children.0[i].is_some() {
            return Ok(0);
        }
        let c = spawn_node(opts, home, i, byzantine_from_ms, supervisor.binary(i))?;
        pids.push(c.id());
        children.0[i] = Some(c);
        Ok(1)
    }

    /// Ends a fault still in progress (the node restarted now).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn end(
        &mut self,
        t: Duration,
        opts: &LocalnetOptions,
        home: &Path,
        children: &mut Children,
        pids: &mut Vec<u32>,
        byzantine_from_ms: i64,
        supervisor: &Supervisor,
    ) -> std::io::Result<u32> {
        let n = self.restart(t, opts, home, children, pids, byzantine_from_ms, supervisor)?;
        self.down = None;
        Ok(n)
    }

    /// A poll at instant `t`: each restarted node that has not yet resumed is checked.
    pub(super) fn observe(&mut self, t: Duration, home: &Path) {
        for f in &mut self.flips {
            if let Some(r) = f.restarted_at_ms
                && f.resumed_after_ms.is_none()
                && read_status(home, f.node).last_height > f.height_at_flip
            {
                f.resumed_after_ms = Some(millis(t).saturating_sub(r));
            }
        }
    }

    /// Whether a restarted node still waits for its first new height, less than
    /// [`DISK_RESUME_BOUND`] after its restart, at `t`.
    pub(super) fn waiting(&self, t: Duration) -> bool {
        self.flips.iter().any(|f| {
            f.resumed_after_ms.is_none()
                && f.restarted_at_ms
                    .is_some_and(|r| millis(t) < r.saturating_add(millis(DISK_RESUME_BOUND)))
        })
    }

    /// The judgement after the nodes stopped (their stores read again), and its violations.
    pub(super) fn finish(mut self, home: &Path, pruned: bool) -> (DiskFaultReport, Vec<String>) {
        let mut violations = Vec::new();
        let mut cmp = KillAllReport::default();
        for (i, before) in self.before.iter().enumerate() {
            let after = read_block_ids(home, i);
            let was = (cmp.lost, cmp.changed);
            compare_blocks(before, &after, pruned, &mut cmp);
            if (cmp.lost, cmp.changed) != was {
                violations.push(format!(
                    "disk faults: node {i} lost {} and changed {} decided blocks it held before a flip",
                    cmp.lost - was.0,
                    cmp.changed - was.1
                ));
            }
        }
        // Each node's recorded recoveries, matched in order to its flips of the same kind.
        let n = self.before.len();
        for i in 0..n {
            let recorded = crate::store::recorded_recoveries(&node_dir(home, i));
            for kind in ["blocks.log", "parts.log", "snapshot"] {
                let mut entries = recorded.iter().filter(|q| {
                    let k = if q.file.starts_with("snapshots") {
                        "snapshot"
                    } else {
                        q.file.as_str()
                    };
                    k == kind
                });
                for f in self.flips.iter_mut().filter(|f| {
                    f.node == i
                        && (if f.file.starts_with("snapshots") {
                            "snapshot"
                        } else {
                            f.file.as_str()
                        }) == kind
                }) {
                    if let Some(q) = entries.next() {
                        f.detected = true;
                        f.kept_as = Some(q.kept_as.clone());
                    }
                }
            }
        }
        let mut report = DiskFaultReport {
            seed: self.seed,
            blocks_compared: cmp.blocks_compared,
            lost: cmp.lost,
            changed: cmp.changed,
            ..DiskFaultReport::default()
        };
        for f in &self.flips {
            if !f.detected {
                report.undetected += 1;
                violations.push(format!(
                    "disk faults: node {} did not record the corrupt {} (flipped at {} ms)",
                    f.node, f.file, f.at_ms
                ));
            }
            if f.resumed_after_ms.is_none() {
                report.not_resumed += 1;
                violations.push(format!(
                    "disk faults: node {} decided nothing above height {} within {} ms of its \
                     restart after the flip at {} ms",
                    f.node,
                    f.height_at_flip,
                    DISK_RESUME_BOUND.as_millis(),
                    f.at_ms
                ));
            }
        }
        report.flips = self.flips;
        (report, violations)
    }
}
