//! `localnet`: N validator processes on 127.0.0.1, a SIGKILL and restart mid-run, optionally a late
//! joiner or a lying proposer, and a JSON report. Every child is killed on every exit path (a
//! guard's Drop), and nodes exit on their own when the localnet process disappears.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use std::collections::BTreeMap;

use crate::core::{node_dir, now_ms};
use crate::hostile::ByzantineKind;
use crate::load::LoadPayload;
use crate::supervise::Supervisor;

mod disk;
mod faults;
mod judge;
mod latejoin;
pub mod logsink;
mod measure;
pub mod ports;
mod replay;
mod report;
mod scale;
mod spawn;

pub use disk::{DISK_RESUME_BOUND, DiskFaultReport, DiskFlip};
pub use measure::{
    MeasureReport, MeasureRow, MeasureRun, default_measure_home, measure_byzantine,
    parse_measure_runs,
};
pub use scale::{
    PreloadReport, ScaleOptions, ScaleReport, ScaleRow, book_schedules, measure_scale,
    newest_snapshot_bytes,
};

/// The longest gap between two heights (agreed times, on an honest node that ran the whole
/// time) a `--byzantine-subset` run may show while the attack lasts: a few rounds' timeouts.
pub const SUBSET_STALL_BOUND_MS: i64 = 8_000;
use faults::{apply_fault, fault_name};
pub use judge::{
    CLOCK_AHEAD_BOUND_MS, KILL_ALL_RESUME_BOUND, MetricsScrapes, ScheduleReads, liveness,
    peak_rss_kb, read_block_ids, refusals,
};
use judge::{
    ResumeWatch, compare_blocks, disagreeing_heights, disk_usage, millis, newest_snapshot,
    poll_trace, quorum_read_outbox, read_agreed, read_digests, read_fires, read_fires_due,
    read_status, top_height, votes_between,
};
use spawn::{Children, init_home_reserved, spawn_node, supervise_exits, write_clock_offset};
pub use spawn::{
    FAULT_CLOCK_FILE, FAULT_PEERS_FILE, LOCALNET_SNAPSHOT_EVERY, init_home, wipe_node_dir,
};

/// What a localnet's genesis records of the ledger (the binary computes it from one instance of
/// its ledger: [`crate::cli`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerInit {
    /// The ledger's name (the binary's; its factory gets it back).
    pub name: String,
    /// The ticking components and their tick periods (ms).
    pub tick_periods: std::collections::BTreeMap<u32, u64>,
    /// The reserved pages (page size, number of pages).
    pub pages: (usize, u32),
    /// The hex setup digest of the build.
    pub setup_digest: Option<String>,
    /// Whether the ledger keeps an outbox (the localnet then reads it back by quorum).
    pub has_outbox: bool,
    /// Whether the ledger keeps a schedule book (the localnet then reads its schedule list by
    /// quorum, as an operator's `ccron` CLI does).
    pub has_book: bool,
}

/// A deterministic secret for localnet node `index` (from a seed): reproducible test networks.
pub fn localnet_secret(seed: u64, index: usize) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"ccron-malachite-localnet");
    h.update(seed.to_le_bytes());
    h.update((index as u64).to_le_bytes());
    h.finalize().into()
}

/// Localnet options.
#[derive(Clone)]
pub struct LocalnetOptions {
    /// Number of validators.
    pub nodes: usize,
    /// Run time.
    pub duration: Duration,
    /// The ledger's genesis record.
    pub ledger: LedgerInit,
    /// The load client's payload per request number (none: no load).
    pub load: Option<LoadPayload>,
    /// The engine's name in the report.
    pub engine: String,
    /// Start the last node late (it catches up through the engine's sync).
    pub late_join: bool,
    /// With `late_join`: start the late node once the others reach this height (instead of
    /// at two fifths of the run), and end the run a few seconds after it caught up (the
    /// duration stays the cap); the report's [`LateJoinReport`] times its catch-up.
    pub late_join_at_height: Option<u64>,
    /// Make node 0 propose lying agreed times.
    pub lying_time: bool,
    /// Make node 0 propose blocks without ticks (it stays honest otherwise: its blocks are
    /// valid, and its own ticks reach the chain through the other proposers).
    pub omit_ticks: bool,
    /// SIGKILL one node mid-run and restart it from its storage.
    pub kill_restart: bool,
    /// Run this node as a Byzantine validator of this kind from a third of the run on.
    pub byzantine: Option<(ByzantineKind, usize)>,
    /// Process-level faults from this seed ([`crate::faults::FaultPlan`]: SIGKILL + restart,
    /// SIGSTOP + SIGCONT, one node at a time, at random points).
    pub faults: Option<u64>,
    /// With `faults`: the plan also kills every node at once and restarts them all
    /// ([`crate::faults::FaultPlan::with_kill_all`]); the report compares their decided blocks
    /// before and after ([`KillAllReport`]).
    pub kill_all: bool,
    /// Network faults from this seed ([`crate::netfault`]: a proxy per directed link, delays,
    /// stalls, resets, an isolation and a 2|2 split, each healed).
    pub net_faults: Option<u64>,
    /// Clock jumps from this seed ([`crate::faults::ClockPlan`]).
    pub clock_faults: Option<u64>,
    /// The Byzantine node (`byzantine`'s, else node 0) delivers its consensus messages
    /// (proposal parts, votes, sync) only to these peers from a third of the run on: its links
    /// to the others are cut at the proxies ([`crate::netfault::NetAction::Withhold`]). The
    /// report's [`SubsetReport`].
    pub byzantine_subset: Option<Vec<usize>>,
    /// Disk faults from this seed ([`crate::faults::DiskPlan`]: a node SIGKILLed, a bit
    /// flipped in its `blocks.log`, `parts.log` or newest snapshot, the node restarted; the
    /// report's [`DiskFaultReport`]).
    pub disk_faults: Option<u64>,
    /// Key seed.
    pub seed: u64,
    /// Where to put the config directories (a fresh temporary directory if None).
    pub home: Option<PathBuf>,
    /// The node binary (this executable by default).
    pub node_bin: PathBuf,
    /// The upgrade binary: a node that stops for a planned upgrade is restarted on it from its
    /// own directory ([`crate::supervise`]); `None`: such a node stays down.
    pub upgrade_binary: Option<PathBuf>,
    /// Every node prunes its block store below its newest snapshot minus this many heights
    /// (`node --retain-blocks`); `None` (the default): no pruning. With a late joiner, it
    /// catches up from a peer's snapshot ([`crate::catchup`]).
    pub retain_blocks: Option<u64>,
    /// The killed node's home is wiped (all but its key) before its restart: it starts empty
    /// ([`wipe_node_dir`]).
    pub wipe_restarted: bool,
    /// The load's rate and a preload of schedules before the run (`localnet::scale`).
    pub scale: ScaleOptions,
}

impl std::fmt::Debug for LocalnetOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalnetOptions")
            .field("nodes", &self.nodes)
            .field("duration", &self.duration)
            .field("ledger", &self.ledger)
            .field("load", &self.load.is_some())
            .field("engine", &self.engine)
            .field("late_join", &self.late_join)
            .field("late_join_at_height", &self.late_join_at_height)
            .field("lying_time", &self.lying_time)
            .field("omit_ticks", &self.omit_ticks)
            .field("kill_restart", &self.kill_restart)
            .field("byzantine", &self.byzantine)
            .field("faults", &self.faults)
            .field("kill_all", &self.kill_all)
            .field("net_faults", &self.net_faults)
            .field("clock_faults", &self.clock_faults)
            .field("disk_faults", &self.disk_faults)
            .field("byzantine_subset", &self.byzantine_subset)
            .field("seed", &self.seed)
            .field("home", &self.home)
            .field("node_bin", &self.node_bin)
            .field("upgrade_binary", &self.upgrade_binary)
            .field("retain_blocks", &self.retain_blocks)
            .field("wipe_restarted", &self.wipe_restarted)
            .field("scale", &self.scale)
            .finish()
    }
}

pub use latejoin::{CAUGHT_UP_WITHIN, LATE_JOIN_TAIL_MS, LateJoinReport};
pub(crate) use replay::replay_command;
pub use report::*;

/// Runs a localnet and returns its report.
///
/// # Errors
/// I/O errors starting it.
// The localnet is the process boundary: it reads the real clock to schedule kills and restarts.
#[allow(clippy::disallowed_methods)]
pub fn run_localnet(opts: &LocalnetOptions) -> std::io::Result<Report> {
    let home = match &opts.home {
        Some(h) => h.clone(),
        None => std::env::temp_dir().join(format!(
            "ccron-localnet-{}-{}",
            std::process::id(),
            now_ms()
        )),
    };
    // The genesis's ports stay held until the nodes are spawned ([`ports`]).
    let (genesis, reserved) = init_home_reserved(&home, opts.nodes, opts.seed, &opts.ledger)?;
    let n = opts.nodes;
    // Network faults: a proxy per directed link, each node dialing its proxies.
    let proxied = opts.net_faults.is_some() || opts.byzantine_subset.is_some();
    let net = match proxied {
        true => {
            let ports: Vec<u16> = genesis.validators.iter().map(|v| v.port).collect();
            let net = crate::netfault::NetFaults::start(&ports)?;
            for i in 0..n {
                std::fs::write(
                    node_dir(&home, i).join(FAULT_PEERS_FILE),
                    net.peers_of(i).join("\n"),
                )?;
            }
            Some(net)
        }
        false => None,
    };
    // The subset attack: who withholds from whom, applied at a third of the run.
    let subset_sender = opts.byzantine.map_or(0, |(_, i)| i);
    let withheld_from: Vec<usize> = opts.byzantine_subset.as_ref().map_or(Vec::new(), |s| {
        (0..n)
            .filter(|&j| j != subset_sender && !s.contains(&j))
            .collect()
    });
    let mut subset_applied: Option<u64> = None;
    let net_plan = opts
        .net_faults
        .map(|seed| crate::netfault::NetPlan::new(seed, n, opts.duration));
    let mut net_next = 0usize;
    let mut net_log: Vec<String> = Vec::new();
    // The net plan's 2|2 split heals at `split_end`: the chain must decide again after it, and
    // a heal late in a short run may leave too little of it to see that (reconnections wait
    // for the engine's redial, rounds for their grown timeouts), so the run polls on past its
    // end until the chain decides again, bounded by `KILL_ALL_RESUME_BOUND` from the heal.
    let split_end = net_plan.as_ref().and_then(|p| {
        p.windows
            .iter()
            .find(|w| w.kind == crate::netfault::WindowKind::Split)
            .map(|w| w.end)
    });
    let mut split_resume = ResumeWatch::default();
    if opts.clock_faults.is_some() {
        for i in 0..n {
            write_clock_offset(&home, i, 0)?;
        }
    }
    let clock_plan = opts
        .clock_faults
        .map(|seed| crate::faults::ClockPlan::new(seed, n, opts.duration));
    let mut clock_next = 0usize;
    let mut clock_log: Vec<String> = Vec::new();
    // The heights every node holds at each poll (and the agreed time against this clock).
    let traced = net.is_some() || clock_plan.is_some();
    let mut trace: Vec<(u64, Vec<u64>)> = Vec::new();
    let (mut ahead_max, mut behind_max) = (i64::MIN, 0i64);
    // Every node's decided blocks at each kill of every node.
    let mut before_kill_all: Vec<BTreeMap<u64, String>> = vec![BTreeMap::new(); n];
    let mut kill_all = KillAllReport::default();
    // Whether (and how soon) the chain decides again after the last restart of every node.
    let mut resume = ResumeWatch::default();
    let late = (opts.late_join || opts.late_join_at_height.is_some()).then_some(n - 1);
    let mut late_watch = latejoin::LateJoinWatch::default();
    let mut byzantine_from_ms =
        now_ms().saturating_add(i64::try_from((opts.duration / 3).as_millis()).unwrap_or(i64::MAX));
    let byzantine_node = opts.byzantine.map(|(_, i)| i);
    // Each honest node's first status written at a height timed at or after the fault's start:
    // the votes it verifies from then on were all signed during the fault.
    let voters: Vec<String> = genesis
        .validators
        .iter()
        .map(|v| v.public_key.clone())
        .collect();
    let mut votes_from: Vec<Option<crate::records::NodeStatus>> = vec![None; n];
    let mut children = Children((0..n).map(|_| None).collect());
    let mut pids = Vec::new();
    let mut supervisor = Supervisor::new(n, &opts.node_bin, opts.upgrade_binary.as_deref());
    drop(reserved);
    for i in 0..n {
        if Some(i) != late {
            let c = spawn_node(opts, &home, i, byzantine_from_ms, supervisor.binary(i))?;
            pids.push(c.id());
            children.0[i] = Some(c);
        }
    }
    // A preload fills the book before the run's clock starts, and the window starts a third
    // of the run after it (`scale`; a preload run has no Byzantine node the old start was
    // given to).
    let preload = scale::preload(opts, &home)?;
    if preload.is_some() {
        byzantine_from_ms = now_ms()
            .saturating_add(i64::try_from((opts.duration / 3).as_millis()).unwrap_or(i64::MAX));
    }
    // Load clients submit requests through the nodes' endpoints (`crate::load`).
    let load = match &opts.load {
        Some(payload) => Some(crate::load::LoadGenerator::start(
            crate::load::LoadOptions::at_rate(
                &home,
                n,
                opts.seed,
                opts.scale.load_rate,
                payload.clone(),
            ),
        )?),
        None => None,
    };
    let start = Instant::now();
    // The run's start on the wall clock (the agreed times the liveness figures use).
    let wall_start = now_ms();
    // Kill the node after the liar (or node 1) and, if there is a late joiner, not that one.
    let victim = 1usize.min(n - 1);
    let kill_at = opts.duration / 3;
    let restart_at = opts.duration / 2;
    let late_at = opts.duration * 2 / 5;
    let mut restarts = 0u32;
    let mut killed = false;
    let mut late_started = false;
    let mut plan = opts.faults.map(|seed| {
        let plan = crate::faults::FaultPlan::new(seed, n, opts.duration);
        if opts.kill_all {
            plan.with_kill_all()
        } else {
            plan
        }
    });
    let mut fault_log = Vec::new();
    let mut disk = opts
        .disk_faults
        .map(|seed| disk::DiskFaults::new(seed, n, opts.duration));
    while start.elapsed() < opts.duration {
        std::thread::sleep(Duration::from_millis(100));
        let t = start.elapsed();
        if let Some(d) = disk.as_mut() {
            restarts += d.step(
                t,
                opts,
                &home,
                &mut children,
                &mut pids,
                byzantine_from_ms,
                &supervisor,
                &mut fault_log,
            )?;
            d.observe(t, &home);
        }
        if let Some(step) = plan.as_mut().and_then(|p| p.step(t)) {
            fault_log.push(format!("{} {}", t.as_millis(), fault_name(step)));
            restarts += apply_fault(
                opts,
                &home,
                &mut children,
                &mut pids,
                step,
                byzantine_from_ms,
                &supervisor,
            )?;
            if step == crate::faults::FaultStep::Start(crate::faults::FaultKind::KillAll, 0) {
                // Every node is down: what their stores hold now was decided and must stay.
                kill_all.kill_alls += 1;
                for (i, before) in before_kill_all.iter_mut().enumerate() {
                    let now = read_block_ids(&home, i);
                    kill_all.height_at_kill = kill_all
                        .height_at_kill
                        .max(now.keys().next_back().copied().unwrap_or(0));
                    compare_blocks(before, &now, opts.retain_blocks.is_some(), &mut kill_all);
                    before.extend(now);
                }
            }
            if step == crate::faults::FaultStep::End(crate::faults::FaultKind::KillAll, 0) {
                resume.restarted(millis(t), kill_all.height_at_kill);
            }
        }
        if resume.pending() {
            resume.observe(millis(t), top_height(&home, n));
        }
        if opts.byzantine.is_some() && now_ms() >= byzantine_from_ms {
            for (i, from) in votes_from.iter_mut().enumerate() {
                if from.is_none() && Some(i) != byzantine_node {
                    let s = read_status(&home, i);
                    if s.last_height > 1 && s.agreed_time_ms >= byzantine_from_ms {
                        *from = Some(s);
                    }
                }
            }
        }
        if let Some(net) = &net
            && opts.byzantine_subset.is_some()
            && subset_applied.is_none()
            && t >= opts.duration / 3
        {
            let action = crate::netfault::NetAction::Withhold {
                from: subset_sender,
                to: withheld_from.clone(),
            };
            net.apply(&action);
            tracing::info!(%action, "byzantine subset");
            fault_log.push(format!("{} {action}", t.as_millis()));
            subset_applied = Some(millis(t));
        }
        if let (Some(net), Some(p)) = (&net, &net_plan) {
            while let Some((at, action)) = p.events.get(net_next)
                && *at <= t
            {
                net.apply(action);
                net_log.push(format!("{} {action}", t.as_millis()));
                tracing::info!(%action, "net fault");
                net_next += 1;
            }
        }
        if let Some(p) = &clock_plan {
            while let Some(&(at, node, offset)) = p.events.get(clock_next)
                && at <= t
            {
                write_clock_offset(&home, node, offset)?;
                clock_log.push(format!("{} node {node} offset {offset}", t.as_millis()));
                clock_next += 1;
            }
        }
        if traced {
            poll_trace(&home, n, t, &mut trace, &mut ahead_max, &mut behind_max);
        }
        if let Some(end) = split_end
            && !split_resume.pending()
            && split_resume.resumed_after_ms().is_none()
            && t >= end
        {
            let top = trace
                .last()
                .map_or(0, |(_, hs)| hs.iter().copied().max().unwrap_or(0));
            split_resume.restarted(millis(end), top);
        }
        if split_resume.pending()
            && let Some((at, hs)) = trace.last()
        {
            split_resume.observe(*at, hs.iter().copied().max().unwrap_or(0));
        }
        if opts.kill_restart && !killed && t >= kill_at && Some(victim) != late {
            if let Some(mut c) = children.0[victim].take() {
                let _ = c.kill(); // SIGKILL
                let _ = c.wait();
            }
            killed = true;
        }
        if killed && restarts == 0 && t >= restart_at {
            if opts.wipe_restarted {
                wipe_node_dir(&home, victim)?;
            }
            let c = spawn_node(
                opts,
                &home,
                victim,
                byzantine_from_ms,
                supervisor.binary(victim),
            )?;
            pids.push(c.id());
            children.0[victim] = Some(c);
            restarts += 1;
        }
        if let Some(l) = late {
            // The others' top height (polled only while it matters).
            let others = || {
                (0..n)
                    .filter(|&i| i != l)
                    .map(|i| read_status(&home, i).last_height)
                    .max()
                    .unwrap_or(0)
            };
            if !late_started {
                let due = match opts.late_join_at_height {
                    Some(h) => others() >= h,
                    None => t >= late_at,
                };
                if due {
                    late_watch.started(millis(t), others());
                    let c = spawn_node(opts, &home, l, byzantine_from_ms, supervisor.binary(l))?;
                    pids.push(c.id());
                    children.0[l] = Some(c);
                    late_started = true;
                }
            } else if late_watch.pending() {
                late_watch.observe(millis(t), read_status(&home, l).last_height, others());
            }
            // Timed from a height: the run ends a little after the catch-up.
            if opts.late_join_at_height.is_some()
                && late_watch
                    .caught_up_for(millis(t))
                    .is_some_and(|after| after >= LATE_JOIN_TAIL_MS)
            {
                break;
            }
        }
        // A node that exits on its own is an error (recorded), unless it stopped for an
        // upgrade and the supervisor restarts it.
        supervise_exits(
            opts,
            &home,
            &mut children,
            &mut pids,
            &mut supervisor,
            byzantine_from_ms,
        )?;
    }
    // How long the run ran (shorter than its duration when it ended after a late joiner's
    // catch-up): the per-second figures divide by it.
    let ran = start.elapsed().min(opts.duration);
    // A fault still in progress ends before the nodes are judged.
    if let Some((kind, node)) = plan.as_ref().and_then(crate::faults::FaultPlan::current) {
        let step = crate::faults::FaultStep::End(kind, node);
        fault_log.push(format!(
            "{} {}",
            start.elapsed().as_millis(),
            fault_name(step)
        ));
        restarts += apply_fault(
            opts,
            &home,
            &mut children,
            &mut pids,
            step,
            byzantine_from_ms,
            &supervisor,
        )?;
        if step == crate::faults::FaultStep::End(crate::faults::FaultKind::KillAll, 0) {
            resume.restarted(millis(start.elapsed()), kill_all.height_at_kill);
        }
    }
    // After a restart of every node the chain must decide again within a bound counted from
    // that restart, not from the end of the run: the plan may restart them a second before
    // the end, and a restart costs a process start and a round (the run goes on, bounded).
    if let Some(d) = disk.as_mut() {
        restarts += d.end(
            start.elapsed(),
            opts,
            &home,
            &mut children,
            &mut pids,
            byzantine_from_ms,
            &supervisor,
        )?;
    }
    let bound = millis(KILL_ALL_RESUME_BOUND);
    let end = millis(start.elapsed());
    // A node restarted after a disk fault is judged from its restart too, and a healed split
    // from its heal (polled into the trace, which judges it).
    while resume.waiting(millis(start.elapsed()), bound)
        || disk.as_ref().is_some_and(|d| d.waiting(start.elapsed()))
        || split_resume.waiting(millis(start.elapsed()), bound)
    {
        std::thread::sleep(Duration::from_millis(100));
        resume.observe(millis(start.elapsed()), top_height(&home, n));
        if split_resume.pending() {
            let t = start.elapsed();
            poll_trace(&home, n, t, &mut trace, &mut ahead_max, &mut behind_max);
            split_resume.observe(millis(t), top_height(&home, n));
        }
        if let Some(d) = disk.as_mut() {
            d.observe(start.elapsed(), &home);
        }
    }
    kill_all.resumed_after_ms = resume.resumed_after_ms();
    kill_all.waited_past_end_ms = millis(start.elapsed()).saturating_sub(end);
    // The run ends here; what follows (the client's and operator's end-of-run reads) keeps the
    // nodes running for a while, at a pace set by how fast they answer (seconds against a
    // `slow-http` node), so the judged window and the Byzantine figures stop at this instant.
    let run_end_ms = now_ms();
    let alive: Vec<bool> = children.0.iter().map(|c| c.is_some()).collect();
    // Peak memory of every live process, read before they are stopped.
    let peaks: Vec<u64> = children
        .0
        .iter()
        .map(|c| c.as_ref().and_then(|c| peak_rss_kb(c.id())).unwrap_or(0))
        .collect();
    let load_each = load.map(crate::load::LoadGenerator::stop_each);
    // The clients' view: their requests' results, read back from every node (f+1 identical).
    let results = load_each.as_ref().map(|each| {
        let orders: Vec<u64> = each.iter().map(|l| l.orders).collect();
        crate::load::read_results_of_clients(&home, n, opts.seed, &orders)
    });
    let load = load_each.map(|each| {
        each.into_iter().fold(
            crate::load::LoadStats::default(),
            crate::load::LoadStats::plus,
        )
    });
    // The consumer's view: read the committed outbox over HTTP while the nodes still run.
    let outbox_quorum_records = opts.ledger.has_outbox.then(|| quorum_read_outbox(&home, n));
    // The replicated `/metrics` figures, equal on every honest node at the same book height.
    let metrics_scrapes = (opts.ledger.has_book || opts.ledger.has_outbox).then(|| {
        judge::scrape_replicated_metrics(&home, n, 10, Duration::from_millis(200), byzantine_node)
    });
    // The operator's view: the schedule list read by quorum, ten times 200 ms apart.
    let schedule_reads = opts
        .ledger
        .has_book
        .then(|| judge::quorum_read_schedules(&home, n, 10, Duration::from_millis(200)));
    drop(children);
    let net_counters = net.map(|net| {
        let c = net.counters();
        net.stop();
        c
    });

    let mut violations = Vec::new();
    let disk_faults = disk.map(|d| {
        let (r, v) = d.finish(&home, opts.retain_blocks.is_some());
        violations.extend(v);
        r
    });
    let kill_all = opts.kill_all.then(|| {
        for (i, before) in before_kill_all.iter().enumerate() {
            let after = read_block_ids(&home, i);
            compare_blocks(before, &after, opts.retain_blocks.is_some(), &mut kill_all);
            kill_all.heights_after = kill_all.heights_after.max(
                after
                    .keys()
                    .next_back()
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(kill_all.height_at_kill),
            );
        }
        kill_all.nodes_disagree = disagreeing_heights(&home, n);
        if kill_all.lost > 0 || kill_all.changed > 0 {
            violations.push(format!(
                "kill-all: {} decided blocks lost, {} changed",
                kill_all.lost, kill_all.changed
            ));
        }
        if kill_all.nodes_disagree > 0 {
            violations.push(format!(
                "kill-all: nodes' stores hold different blocks at {} heights",
                kill_all.nodes_disagree
            ));
        }
        if kill_all.kill_alls > 0 && kill_all.resumed_after_ms.is_none() {
            violations.push(format!(
                "kill-all: nothing decided within {} ms after every node restarted",
                KILL_ALL_RESUME_BOUND.as_millis()
            ));
        }
        kill_all
    });
    if let Some(l) = load {
        tracing::info!(?l, "load");
        if l.admitted == 0 {
            violations.push("no load request was admitted by any node".into());
        }
    }
    let mut nodes = Vec::new();
    let mut digests = Vec::new();
    for (i, &is_alive) in alive.iter().enumerate() {
        let s = read_status(&home, i);
        let honest = !(opts.lying_time && i == 0) && Some(i) != byzantine_node;
        let (disk_bytes, log_bytes) = disk_usage(&home, i);
        if !is_alive {
            violations.push(format!(
                "node {i} exited before the end (see node-{i}/node.log)"
            ));
        }
        nodes.push(NodeReport {
            id: i,
            pid: s.pid,
            honest,
            last_executed_seq: s.last_height,
            state_digest: s.state_digest.clone(),
            ticks_executed: s.ticks_executed,
            ticks_skipped: s.ticks_skipped,
            fires: s.fires,
            rejected_proposals: s.rejected_proposals,
            synced_heights: s.synced_heights,
            agreed_time_ms: s.agreed_time_ms,
            ticks_by_submitter: s.ticks_by_submitter.clone(),
            peak_rss_kb: peaks[i],
            restored_from_height: s.restored_from_height,
            replayed_blocks: s.replayed_blocks,
            disk_bytes,
            log_bytes,
            refusals: refusals(&s),
            final_snapshot: newest_snapshot(&home, i),
        });
        digests.push(read_digests(&home, i, &mut violations));
    }
    // Agreement: at every height two honest nodes both executed, the digests are equal.
    let honest: Vec<usize> = (0..n).filter(|&i| nodes[i].honest).collect();
    for (a_i, &a) in honest.iter().enumerate() {
        for &b in &honest[a_i + 1..] {
            for (h, da) in &digests[a] {
                if let Some(db) = digests[b].get(h)
                    && da != db
                {
                    violations.push(format!("nodes {a} and {b} disagree at height {h}"));
                    break;
                }
            }
        }
    }
    let honest_agree = !violations
        .iter()
        .any(|v| v.contains("disagree") || v.contains("two digests"));
    let max_height = honest
        .iter()
        .map(|&i| nodes[i].last_executed_seq)
        .max()
        .unwrap_or(0);
    if opts.faults.is_some()
        || opts.net_faults.is_some()
        || opts.clock_faults.is_some()
        || opts.disk_faults.is_some()
    {
        for nr in &nodes {
            if nr.last_executed_seq.saturating_mul(2) < max_height {
                violations.push(format!(
                    "node {} stuck at height {} (others at {max_height})",
                    nr.id, nr.last_executed_seq
                ));
            }
        }
    }
    if nodes.iter().all(|n| n.fires == 0) {
        violations.push("nothing fired".into());
    }
    if let Some(r) = results {
        tracing::info!(?r, "results read back");
        if r.believed == 0 {
            violations.push("no request result was returned identically by f+1 nodes".into());
        }
        if r.conflicting > 0 {
            violations.push(format!(
                "{} request results differ between nodes",
                r.conflicting
            ));
        }
    }
    let mut outbox_quorum_payloads = Vec::new();
    let outbox_quorum_records = match outbox_quorum_records {
        None => None,
        Some(Ok((0, _))) => {
            violations.push("no outbox record was returned identically by f+1 nodes".into());
            Some(0)
        }
        Some(Ok((k, payloads))) => {
            outbox_quorum_payloads = payloads;
            Some(k)
        }
        Some(Err(e)) => {
            violations.push(format!("outbox quorum read failed: {e}"));
            None
        }
    };
    if let Some(m) = &metrics_scrapes {
        if m.compared == 0 {
            violations.push(format!(
                "no two nodes' /metrics were scraped at the same book height in {} rounds",
                m.rounds
            ));
        }
        for d in &m.mismatches {
            violations.push(format!("replicated /metrics figures differ: {d}"));
        }
    }
    let schedule_reads = match schedule_reads {
        None => None,
        Some(Err(e)) => {
            violations.push(format!("schedule quorum read failed: {e}"));
            None
        }
        Some(Ok(r)) => {
            if r.believed == 0 {
                violations.push(format!(
                    "no schedule list answer was returned identically by f+1 nodes in {} reads: {:?}",
                    r.reads, r.errors
                ));
            }
            for (i, d) in r.differed.iter().enumerate() {
                if *d > 0 && Some(i) != byzantine_node {
                    violations.push(format!(
                        "node {i} answered the schedule list otherwise than f+1 nodes at the same \
                         height ({d} of {} reads)",
                        r.reads
                    ));
                }
            }
            Some(r)
        }
    };
    for e in supervisor.errors() {
        violations.push(format!("supervisor: {e}"));
    }
    let mut restarts_by_reason = supervisor.restarts_by_reason();
    if restarts > 0 {
        restarts_by_reason.insert("fault".into(), restarts);
    }
    let supervisor = opts.upgrade_binary.is_some().then(|| SupervisorReport {
        nodes: supervisor.nodes().to_vec(),
        errors: supervisor.errors().to_vec(),
    });
    // Lateness on an honest node that ran the whole time (not the restarted victim, not the
    // late joiner).
    let restarted = (opts.kill_restart && Some(victim) != late).then_some(victim);
    let measured = honest
        .iter()
        .copied()
        .find(|&i| Some(i) != restarted && Some(i) != late);
    let lateness_ms = measured.and_then(|i| {
        let samples = read_fires(&home, i);
        (!samples.is_empty()).then(|| Lateness::from_samples(i, &samples))
    });
    let agreed: BTreeMap<u64, i64> = measured
        .map(|i| read_agreed(&home, i))
        .unwrap_or_default()
        .into_iter()
        .filter(|&(_, t)| t <= run_end_ms)
        .collect();
    let (_, _, _, stall_all, stall_rest) = liveness(&agreed, i64::MAX);
    let longest_stall_ms = stall_all.max(stall_rest);
    // The judged window is the run's last two thirds: of the time it ran when it ended early
    // (after a late joiner's catch-up), else from where a Byzantine node starts.
    let window_from_ms = if ran < opts.duration {
        wall_start.saturating_add(i64::try_from((ran / 3).as_millis()).unwrap_or(i64::MAX))
    } else {
        byzantine_from_ms
    };
    let window = measured.map(|m| {
        let (_, during, heights, _, stall) = liveness(&agreed, window_from_ms);
        let samples: Vec<(i64, i64)> = read_fires_due(&home, m)
            .into_iter()
            .filter(|&(due, _, _)| due >= window_from_ms && due <= run_end_ms)
            .map(|(_, agreed, wall)| (agreed, wall))
            .collect();
        WindowReport {
            node: m,
            from_ms: window_from_ms,
            heights_per_sec: during,
            heights,
            longest_stall_ms: stall,
            lateness: Lateness::from_samples(m, &samples),
        }
    });
    let byzantine = opts.byzantine.zip(measured).map(|((kind, node), m)| {
        let (before, during, heights_during, stall_before, stall_during) =
            liveness(&agreed, byzantine_from_ms);
        let votes_during = honest
            .iter()
            .filter(|&&i| Some(i) != restarted && Some(i) != late)
            .filter_map(|&i| {
                let from = votes_from[i].as_ref()?;
                Some(votes_between(i, &voters, from, &read_status(&home, i)))
            })
            .collect();
        ByzantineReport {
            kind,
            node,
            from_ms: byzantine_from_ms,
            measured_node: m,
            heights_per_sec_before: before,
            heights_per_sec_during: during,
            heights_during,
            longest_stall_during_ms: stall_during,
            longest_stall_before_ms: stall_before,
            votes_during,
        }
    });
    if let Some(b) = &byzantine
        && b.heights_during == 0
    {
        violations.push(format!(
            "honest nodes decided nothing while node {} was Byzantine ({})",
            b.node, b.kind
        ));
    }
    if let Some(b) = &byzantine {
        violations.extend(withheld_vote_violations(b));
    }
    let subset = opts.byzantine_subset.as_ref().zip(measured).map(|(s, m)| {
        let from_ms = subset_applied
            .and_then(|a| i64::try_from(a).ok())
            .map_or(i64::MAX, |a| wall_start.saturating_add(a));
        let (before, during, heights_during, stall_before, stall_during) =
            liveness(&agreed, from_ms);
        let top = nodes.iter().map(|r| r.last_executed_seq).max().unwrap_or(0);
        SubsetReport {
            node: subset_sender,
            delivers_to: s.clone(),
            withheld_from: withheld_from.clone(),
            from_ms,
            measured_node: m,
            heights_per_sec_before: before,
            heights_per_sec_during: during,
            heights_during,
            longest_stall_before_ms: stall_before,
            longest_stall_during_ms: stall_during,
            withheld_heights: withheld_from
                .iter()
                .map(|&j| nodes[j].last_executed_seq)
                .collect(),
            top_height: top,
        }
    });
    if let Some(s) = &subset {
        if s.heights_during == 0 {
            violations.push(format!(
                "honest nodes decided nothing while node {} delivered only to {:?}",
                s.node, s.delivers_to
            ));
        }
        if s.longest_stall_during_ms > SUBSET_STALL_BOUND_MS {
            violations.push(format!(
                "a stall of {} ms while node {} delivered only to {:?} (bound {SUBSET_STALL_BOUND_MS} ms)",
                s.longest_stall_during_ms, s.node, s.delivers_to
            ));
        }
    }
    let net_faults = net_plan.map(|p| {
        let (windows, v) = crate::netfault::judge_windows(&p.windows, &trace);
        violations.extend(v);
        NetFaultReport {
            seed: opts.net_faults.unwrap_or(0),
            events: net_log,
            windows,
            counters: net_counters.unwrap_or_default(),
        }
    });
    let clock_faults = opts.clock_faults.map(|seed| {
        let mut non_monotone = 0u64;
        for i in 0..n {
            let agreed = read_agreed(&home, i);
            for ((h0, t0), (h1, t1)) in agreed.iter().zip(agreed.iter().skip(1)) {
                if *h1 == h0 + 1 && t1 <= t0 {
                    non_monotone += 1;
                    violations.push(format!(
                        "node {i}: agreed time of height {h1} ({t1}) not above height {h0}'s ({t0})"
                    ));
                }
            }
        }
        let ahead = ahead_max.max(0);
        if ahead > CLOCK_AHEAD_BOUND_MS {
            violations.push(format!(
                "agreed time {ahead} ms ahead of the honest clock (bound {CLOCK_AHEAD_BOUND_MS} ms)"
            ));
        }
        ClockFaultReport {
            seed,
            events: clock_log,
            agreed_ahead_max_ms: ahead,
            agreed_behind_max_ms: behind_max,
            non_monotone,
            rejected_proposals: nodes.iter().map(|r| r.rejected_proposals).collect(),
        }
    });
    let replay = replay_command(opts);
    let late_join = late.filter(|_| late_started).map(|l| {
        let mut r = late_watch.report(l);
        if let Ok(b) = std::fs::read(node_dir(&home, l).join("catchup.json"))
            && let Ok(c) = serde_json::from_slice::<crate::catchup::fetch::CatchUpReport>(&b)
        {
            r.installed_height = c.installed_height;
            r.install_took_ms = c.installed_height.map(|_| c.took_ms);
        }
        // The installed snapshot itself is gone by now (a node keeps its two newest).
        r.snapshot_bytes = std::fs::read_dir(node_dir(&home, l).join("snapshots"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".bin"))
            .max_by_key(|e| e.file_name())
            .and_then(|e| e.metadata().ok())
            .map_or(0, |m| m.len());
        r.peers_first_height = (0..n)
            .filter(|&i| i != l)
            .map(|i| read_status(&home, i).store_first_height)
            .min()
            .unwrap_or(0);
        if opts.late_join_at_height.is_some() && r.caught_up_after_ms.is_none() {
            violations.push(format!(
                "the late node {l} (started at height {}) did not catch up within the run",
                r.started_at_height
            ));
        }
        r
    });
    let ticks_node = &nodes[measured.unwrap_or(0)];
    let committed_ticks_per_sec = (ticks_node.ticks_executed + ticks_node.ticks_skipped) as f64
        / ran.as_secs_f64().max(0.001);
    Ok(Report {
        engine: opts.engine.clone(),
        nodes,
        honest_agree,
        violations,
        restarts,
        pids,
        max_height,
        heights_per_sec: max_height as f64 / ran.as_secs_f64().max(0.001),
        home: home.display().to_string(),
        committed_ticks_per_sec,
        lateness_ms,
        outbox_quorum_records,
        schedule_reads,
        metrics_scrapes,
        results,
        byzantine,
        longest_stall_ms,
        faults: fault_log,
        restarts_by_reason,
        supervisor,
        outbox_quorum_payloads,
        net_faults,
        kill_all,
        clock_faults,
        disk_faults,
        subset,
        window,
        late_join,
        replay,
        preload,
        load,
    })
}

/// A validator withholding its votes (`withhold-votes`): a violation for each honest node that
/// verified one of them during the fault, and one when no honest node could be counted.
pub fn withheld_vote_violations(b: &ByzantineReport) -> Vec<String> {
    let mut out = Vec::new();
    if b.kind != ByzantineKind::WithholdVotes {
        return out;
    }
    if b.votes_during.is_empty() {
        out.push(format!(
            "no honest node's votes could be counted while node {} withheld its votes",
            b.node
        ));
    }
    for v in &b.votes_during {
        let k = v.by_voter.get(b.node).copied().unwrap_or(0);
        if k > 0 {
            out.push(format!(
                "node {} verified {k} votes of node {} while it withheld them (heights {}-{})",
                v.node, b.node, v.from_height, v.to_height
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::NodeStatus;

    #[test]
    fn a_vote_of_the_withholding_node_seen_during_the_fault_is_a_violation() {
        let votes = |node, by_voter: Vec<u64>| VotesDuring {
            node,
            from_height: 10,
            to_height: 30,
            last_height_by_voter: by_voter.iter().map(|_| 30).collect(),
            by_voter,
        };
        let mut b = ByzantineReport {
            kind: ByzantineKind::WithholdVotes,
            node: 0,
            from_ms: 0,
            measured_node: 1,
            heights_per_sec_before: 10.0,
            heights_per_sec_during: 10.0,
            heights_during: 20,
            longest_stall_during_ms: 100,
            longest_stall_before_ms: 100,
            votes_during: vec![votes(1, vec![0, 40, 40, 40]), votes(2, vec![0, 40, 40, 40])],
        };
        assert!(withheld_vote_violations(&b).is_empty());
        b.votes_during[1].by_voter[0] = 3;
        let v = withheld_vote_violations(&b);
        assert_eq!(v.len(), 1);
        assert!(
            v[0].starts_with("node 2 verified 3 votes of node 0"),
            "{v:?}"
        );
        // Nothing counted: no verdict is a violation too.
        b.votes_during.clear();
        assert_eq!(withheld_vote_violations(&b).len(), 1);
        // Another kind's votes are not judged.
        b.kind = ByzantineKind::Withhold;
        b.votes_during = vec![votes(1, vec![9, 40, 40, 40])];
        assert!(withheld_vote_violations(&b).is_empty());
    }

    #[test]
    fn lateness_percentiles_of_samples() {
        let samples: Vec<(i64, i64)> = (1..=100).map(|i| (i, 1_000 + i)).collect();
        let l = Lateness::from_samples(2, &samples);
        assert_eq!((l.node, l.fires), (2, 100));
        assert_eq!(
            (l.agreed_p50_ms, l.agreed_p99_ms, l.agreed_max_ms),
            (51, 99, 100)
        );
        assert_eq!(
            (l.wall_p50_ms, l.wall_p99_ms, l.wall_max_ms),
            (1_051, 1_099, 1_100)
        );
        assert_eq!(Lateness::from_samples(0, &[]), Lateness::default());
    }

    #[test]
    fn fires_log_lines_give_agreed_and_wall_lateness() {
        let home = std::env::temp_dir().join(format!("ccron-fires-log-{}", std::process::id()));
        let dir = node_dir(&home, 0);
        std::fs::create_dir_all(&dir).unwrap();
        // height agreed wall component position due; a torn last line is ignored.
        std::fs::write(
            dir.join("fires.log"),
            "7 1000 1100 1 0 990\n9 2000 2050 2 0 2000\n9 20",
        )
        .unwrap();
        assert_eq!(read_fires(&home, 0), vec![(10, 110), (0, 50)]);
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn liveness_splits_heights_and_gaps_at_the_fault() {
        // Height 1 at the genesis time (ignored), then a height every 100 ms up to 1,000, a
        // 2 s stall, then a height every 500 ms.
        let mut agreed = BTreeMap::from([(1u64, 0i64)]);
        for h in 2..=11 {
            agreed.insert(h, (h as i64 - 1) * 100);
        }
        for (k, h) in (12..=15).enumerate() {
            agreed.insert(h, 3_000 + k as i64 * 500);
        }
        let (before, during, heights_during, stall_before, stall_during) = liveness(&agreed, 1_500);
        assert_eq!(heights_during, 4);
        assert_eq!((stall_before, stall_during), (100, 2_000));
        // Before: 10 heights from the first (100 ms) to the fault (1,500 ms).
        assert!((before - 10.0 * 1_000.0 / 1_400.0).abs() < 1e-9, "{before}");
        assert!((during - 4.0 * 1_000.0 / 3_000.0).abs() < 1e-9, "{during}");
        assert_eq!(liveness(&BTreeMap::new(), 0), (0.0, 0.0, 0, 0, 0));
    }

    #[test]
    fn refusals_name_every_non_zero_counter_by_reason() {
        let mut s = NodeStatus::default();
        s.proposal_parts.accepted = 9;
        s.proposal_parts.equivocation = 2;
        s.proposal_parts.parked = 8;
        s.proposal_parts.released = 8;
        s.proposal_parts.far_full = 1;
        s.tick_pool.invalid = 3;
        s.tick_pool.own_sent = 7;
        s.mempool.rejected_invalid = 4;
        s.mempool.accepted = 5;
        s.signatures_refused.votes = 6;
        s.rejections_by_reason.insert("BadTickSignature".into(), 1);
        // Own ticks' forwarding: what did not deliver, by outcome; delivered posts are not
        // refusals, and zero counts are left out.
        s.tick_pool.forward = crate::forward::ForwardCounters {
            delivered: 40,
            refused: 1,
            failed: 8,
            timed_out: 0,
            skipped_busy: 5,
        };
        let r = refusals(&s);
        let want: BTreeMap<String, u64> = [
            ("part.equivocation", 2),
            ("part.far_full", 1),
            ("tick.invalid", 3),
            ("request.rejected_invalid", 4),
            ("signature.votes", 6),
            ("block.BadTickSignature", 1),
            ("forward.refused", 1),
            ("forward.failed", 8),
            ("forward.skipped_busy", 5),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(r, want);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn peak_rss_of_this_process() {
        assert!(peak_rss_kb(std::process::id()).is_some_and(|kb| kb > 0));
        assert_eq!(peak_rss_kb(u32::MAX), None);
    }
}
