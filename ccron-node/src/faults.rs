//! Process-level faults for the localnet, from a seed: SIGKILL at a random instant (then a
//! restart from the node's storage), SIGSTOP (a paused node) then SIGCONT, one node at a time
//! (at most f = 1 faulty with 4 validators), at random points of the run; with
//! [`FaultPlan::with_kill_all`], also every node SIGKILLed at once and all restarted from their
//! storage. The plan is a pure function of the seed and the instants the localnet polls at; the
//! localnet applies it to its child processes and reports every event, so a failing seed is
//! replayed with the same command (`localnet --faults SEED [--kill-all]`).
//!
//! Clock jumps per process ([`ClockPlan`], `localnet --clock-faults SEED`): the localnet writes
//! a node's clock offset into its `fault.clock` file, and a node started with
//! `node --fault-clock-file` (localnet fault injection only) adds it to every wall-clock read
//! ([`crate::core::now_ms`]: its clock samples, its proposal checks, its tick turns), as a
//! stepped system clock would; its monotonic timers (the engine's timeouts, the ticks
//! generator) are untouched, as they are by a real step of the wall clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// What happens to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL now, restart from storage when it ends.
    Kill,
    /// SIGSTOP now, SIGCONT when it ends.
    Pause,
    /// Every node SIGKILLed now, all restarted from storage when it ends (the step's node is
    /// 0 and means nothing).
    KillAll,
}

/// One step of the plan the localnet acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultStep {
    /// Start a fault on a node.
    Start(FaultKind, usize),
    /// End the fault on a node (restart it, or continue it).
    End(FaultKind, usize),
}

/// A seeded fault plan (see the module documentation).
#[derive(Debug, Clone)]
pub struct FaultPlan {
    state: u64,
    nodes: usize,
    /// No fault starts after this instant of the run (the nodes get time to catch up).
    last_start: Duration,
    next_start: Duration,
    current: Option<(FaultKind, usize, Duration)>,
    kill_all: bool,
}

impl FaultPlan {
    /// A plan over `nodes` nodes for a run of `duration`: faults start from 2 s on and not
    /// later than 5 s before the end.
    pub fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        let mut plan = Self {
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            nodes: nodes.max(1),
            last_start: duration.saturating_sub(Duration::from_secs(5)),
            next_start: Duration::ZERO,
            current: None,
            kill_all: false,
        };
        plan.next_start = Duration::from_millis(2_000 + plan.below(2_000));
        plan
    }

    /// The same plan with every-node kills among the kinds (a third of the faults; the seed's
    /// plan without them is unchanged).
    pub fn with_kill_all(mut self) -> Self {
        self.kill_all = true;
        self
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// The step due at instant `t` of the run, if any (called at every poll).
    pub fn step(&mut self, t: Duration) -> Option<FaultStep> {
        if let Some((kind, node, until)) = self.current {
            if t >= until {
                self.current = None;
                self.next_start = t + Duration::from_millis(500 + self.below(2_000));
                return Some(FaultStep::End(kind, node));
            }
            return None;
        }
        if t < self.next_start || t > self.last_start {
            return None;
        }
        let node = self.below(self.nodes as u64) as usize;
        let kind = match self.below(if self.kill_all { 3 } else { 2 }) {
            0 => FaultKind::Kill,
            1 => FaultKind::Pause,
            _ => FaultKind::KillAll,
        };
        let node = if kind == FaultKind::KillAll { 0 } else { node };
        let hold = Duration::from_millis(300 + self.below(2_700));
        self.current = Some((kind, node, t + hold));
        Some(FaultStep::Start(kind, node))
    }

    /// The fault in progress, if any (the localnet ends it before collecting).
    pub fn current(&self) -> Option<(FaultKind, usize)> {
        self.current.map(|(k, n, _)| (k, n))
    }
}

/// The clock offset this process adds to its wall clock (ms; 0 unless a clock fault file is
/// watched).
static CLOCK_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// The clock offset in force (ms), added by [`crate::core::now_ms`].
pub fn clock_offset_ms() -> i64 {
    CLOCK_OFFSET_MS.load(Ordering::Relaxed)
}

/// Watches `path` (`node --fault-clock-file`, written by the localnet): every 50 ms its content,
/// a signed number of milliseconds, becomes this process's clock offset. Each change is a
/// warning in the log; an unreadable or malformed file leaves the offset as it was.
///
/// # Errors
/// The watcher thread cannot be spawned.
pub fn watch_clock_file(path: std::path::PathBuf) -> std::io::Result<()> {
    let read = |p: &std::path::Path| -> Option<i64> {
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    };
    if let Some(ms) = read(&path) {
        CLOCK_OFFSET_MS.store(ms, Ordering::Relaxed);
    }
    tracing::warn!(path = %path.display(), offset_ms = clock_offset_ms(), "clock fault injection on (localnet)");
    std::thread::Builder::new()
        .name("fault-clock".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(50));
                if let Some(ms) = read(&path)
                    && ms != clock_offset_ms()
                {
                    tracing::warn!(
                        from_ms = clock_offset_ms(),
                        to_ms = ms,
                        "clock fault: wall clock jumped"
                    );
                    CLOCK_OFFSET_MS.store(ms, Ordering::Relaxed);
                }
            }
        })
        .map(|_| ())
}

/// A seeded plan of clock jumps: from 2 s on, one node at a time, a random node's wall clock
/// jumps forward or backward by 1-9 s, 10-59 s or 1-5 min, stays there 2-6 s, then jumps back
/// (0.5-3 s between two jumps; none starts in the last 8 s). A pure function of the seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockPlan {
    /// `(instant, node, offset ms)`: from this instant the node's clock reads `offset` ms off.
    pub events: Vec<(Duration, usize, i64)>,
}

impl ClockPlan {
    /// The plan of `seed` over `nodes` nodes for a run of `duration`.
    pub fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        let mut rng = FaultPlan::new(seed ^ 0x636c_6f63_6b5f_6a6d, nodes, duration);
        let last = duration.saturating_sub(Duration::from_secs(8));
        let mut t = Duration::from_millis(2_000);
        let mut events = Vec::new();
        while t <= last {
            let node = rng.below(nodes.max(1) as u64) as usize;
            let magnitude = match rng.below(3) {
                0 => 1_000 + rng.below(8_000),
                1 => 10_000 + rng.below(49_000),
                _ => 60_000 + rng.below(240_000),
            } as i64;
            let offset = if rng.below(2) == 0 {
                magnitude
            } else {
                -magnitude
            };
            events.push((t, node, offset));
            t += Duration::from_millis(2_000 + rng.below(4_000));
            events.push((t, node, 0));
            t += Duration::from_millis(500 + rng.below(2_500));
        }
        Self { events }
    }
}

/// The file a disk fault flips a byte in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum DiskFile {
    /// `blocks.log`: the decided blocks.
    Blocks,
    /// `parts.log`: the proposal parts not yet decided.
    Parts,
    /// The node's newest snapshot file.
    Snapshot,
}

impl DiskFile {
    /// Its name in the report and in `store-recovery.json` (`snapshot` for any snapshot file).
    pub fn name(self) -> &'static str {
        match self {
            Self::Blocks => "blocks.log",
            Self::Parts => "parts.log",
            Self::Snapshot => "snapshot",
        }
    }
}

/// One disk fault: at `at`, node `node` is SIGKILLed, one bit (`bit`) of one byte of `file` is
/// flipped at `position` millionths of the file's length (always in its middle half:
/// 250,000-749,999), and the node is restarted from its storage `down` later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFault {
    /// When (from the run's start).
    pub at: Duration,
    /// The node.
    pub node: usize,
    /// The file.
    pub file: DiskFile,
    /// Where in the file, in millionths of its length.
    pub position_ppm: u64,
    /// The bit flipped (0-7).
    pub bit: u8,
    /// How long the node stays down.
    pub down: Duration,
}

/// A seeded plan of byte flips in the nodes' files (`localnet --disk-faults SEED`): from 3 s
/// on, every 3-6 s, a random node stopped (SIGKILL), one bit flipped in the middle half of its
/// `blocks.log`, `parts.log` or newest snapshot, and the node restarted 0.3-1.5 s later; none
/// in the last 8 s. A pure function of the seed, the number of nodes and the duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskPlan {
    /// The faults, in instant order.
    pub events: Vec<DiskFault>,
}

impl DiskPlan {
    /// The plan of `seed` over `nodes` nodes for a run of `duration`.
    pub fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        let mut rng = FaultPlan::new(seed ^ 0x6469_736b_5f66_6c69, nodes, duration);
        let last = duration.saturating_sub(Duration::from_secs(8));
        let mut t = Duration::from_millis(3_000 + rng.below(1_000));
        let mut events = Vec::new();
        while t <= last {
            let node = rng.below(nodes.max(1) as u64) as usize;
            let file = match rng.below(3) {
                0 => DiskFile::Blocks,
                1 => DiskFile::Parts,
                _ => DiskFile::Snapshot,
            };
            events.push(DiskFault {
                at: t,
                node,
                file,
                position_ppm: 250_000 + rng.below(500_000),
                bit: rng.below(8) as u8,
                down: Duration::from_millis(300 + rng.below(1_200)),
            });
            t += Duration::from_millis(3_000 + rng.below(3_000));
        }
        Self { events }
    }
}

/// Flips bit `bit` of the byte at `position_ppm` millionths of `path`'s length (in place, then
/// fsync'ed). The offset flipped; `None` when the file is absent or shorter than 64 bytes.
///
/// # Errors
/// I/O errors reading or writing the file.
pub fn flip_bit(
    path: &std::path::Path,
    position_ppm: u64,
    bit: u8,
) -> std::io::Result<Option<u64>> {
    use std::io::{Read as _, Seek as _, Write as _};
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    else {
        return Ok(None);
    };
    let len = f.metadata()?.len();
    if len < 64 {
        return Ok(None);
    }
    let offset = (u128::from(len) * u128::from(position_ppm.min(999_999)) / 1_000_000) as u64;
    let mut b = [0u8; 1];
    f.seek(std::io::SeekFrom::Start(offset))?;
    f.read_exact(&mut b)?;
    b[0] ^= 1u8 << (bit % 8);
    f.seek(std::io::SeekFrom::Start(offset))?;
    f.write_all(&b)?;
    f.sync_all()?;
    Ok(Some(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_plan_is_a_function_of_its_seed_and_flips_the_middle_of_each_file_kind() {
        let d = Duration::from_secs(40);
        let p = DiskPlan::new(3, 4, d);
        assert_eq!(p, DiskPlan::new(3, 4, d));
        assert_ne!(p, DiskPlan::new(4, 4, d));
        assert!(p.events.len() >= 5, "{p:?}");
        for pair in p.events.windows(2) {
            assert!(pair[1].at >= pair[0].at + Duration::from_secs(3), "{p:?}");
            assert!(pair[0].at + pair[0].down < pair[1].at, "{p:?}");
        }
        for e in &p.events {
            assert!(e.node < 4 && e.bit < 8 && e.at <= d - Duration::from_secs(8));
            assert!((250_000..750_000).contains(&e.position_ppm));
        }
        let kinds: std::collections::BTreeSet<DiskFile> = (0..10u64)
            .flat_map(|s| DiskPlan::new(s, 4, d).events)
            .map(|e| e.file)
            .collect();
        assert_eq!(kinds.len(), 3);
        // The flip changes exactly one bit, in the middle half.
        let path = std::env::temp_dir().join(format!("ccron-flip-{}", std::process::id()));
        let before: Vec<u8> = (0..200u8).collect();
        std::fs::write(&path, &before).unwrap();
        assert_eq!(flip_bit(&path, 500_000, 3).unwrap(), Some(100));
        let after = std::fs::read(&path).unwrap();
        let diff: Vec<usize> = (0..200).filter(|&i| before[i] != after[i]).collect();
        assert_eq!(diff, vec![100]);
        assert_eq!(after[100], before[100] ^ 8);
        std::fs::write(&path, [0u8; 10]).unwrap();
        assert_eq!(flip_bit(&path, 500_000, 3).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(flip_bit(&path, 500_000, 3).unwrap(), None);
    }

    fn steps(seed: u64) -> Vec<(u64, FaultStep)> {
        let mut p = FaultPlan::new(seed, 4, Duration::from_secs(30));
        (0..300u64)
            .filter_map(|k| p.step(Duration::from_millis(k * 100)).map(|s| (k, s)))
            .collect()
    }

    #[test]
    fn a_plan_is_a_function_of_its_seed_one_fault_at_a_time() {
        assert_eq!(steps(7), steps(7));
        assert_ne!(steps(7), steps(8));
        let s = steps(7);
        assert!(s.len() >= 6, "{s:?}");
        let mut open: Option<(FaultKind, usize)> = None;
        for (k, step) in &s {
            match *step {
                FaultStep::Start(kind, node) => {
                    assert!(open.is_none(), "two faults at once: {s:?}");
                    assert!(node < 4 && *k >= 20 && *k <= 250, "{s:?}");
                    open = Some((kind, node));
                }
                FaultStep::End(kind, node) => {
                    assert_eq!(open.take(), Some((kind, node)), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn kill_all_steps_come_only_when_asked_and_leave_other_seeds_alone() {
        let all = |seed| {
            let mut p = FaultPlan::new(seed, 4, Duration::from_secs(30)).with_kill_all();
            (0..300u64)
                .filter_map(|k| p.step(Duration::from_millis(k * 100)))
                .collect::<Vec<_>>()
        };
        assert!(steps(7).iter().all(|(_, s)| !matches!(
            s,
            FaultStep::Start(FaultKind::KillAll, _) | FaultStep::End(FaultKind::KillAll, _)
        )));
        let kill_alls = (0..20u64)
            .flat_map(all)
            .filter(|s| *s == FaultStep::Start(FaultKind::KillAll, 0))
            .count();
        assert!(kill_alls >= 10, "{kill_alls}");
        assert_eq!(all(3), all(3));
    }

    #[test]
    fn a_clock_plan_jumps_one_node_at_a_time_both_ways_and_back() {
        let d = Duration::from_secs(40);
        let p = ClockPlan::new(5, 4, d);
        assert_eq!(p, ClockPlan::new(5, 4, d));
        assert_ne!(p, ClockPlan::new(6, 4, d));
        assert!(p.events.len() >= 6, "{p:?}");
        for pair in p.events.chunks(2) {
            let [(t0, n0, off), (t1, n1, back)] = pair else {
                panic!("{p:?}")
            };
            assert!(
                n0 == n1 && *n0 < 4 && *off != 0 && *back == 0 && t1 > t0,
                "{p:?}"
            );
            assert!((1_000..=300_000).contains(&off.abs()), "{p:?}");
            assert!(*t0 <= d - Duration::from_secs(8), "{p:?}");
        }
        let jumps: Vec<i64> = (0..30u64)
            .flat_map(|s| ClockPlan::new(s, 4, d).events)
            .map(|e| e.2)
            .filter(|&o| o != 0)
            .collect();
        assert!(jumps.iter().any(|&o| o > 60_000) && jumps.iter().any(|&o| o < -60_000));
        assert!(jumps.iter().any(|&o| o.abs() < 10_000));
    }
}
