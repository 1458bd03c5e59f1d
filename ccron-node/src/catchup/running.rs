//! Catch-up while running: a node that falls behind every peer's retained history while its
//! engine runs (a long partition, a paused process) notices it and catches up from a peer's
//! verified snapshot, as [`super::fetch::before_start`] does at start.
//!
//! **Detection** ([`Detector`], sans-IO: the caller passes heights and a monotonic `now`). Only
//! a node whose last height has not moved for [`RunningConfig::stall_after`] asks anything:
//! then, every [`RunningConfig::check_every`], it asks every peer's `GET
//! /v1/catchup/history` and classifies the answers ([`Check`], through
//! [`super::fetch::plan`]): no peer answered, some peer's store holds the next height (the
//! engine's value sync can serve it: nothing to do), or the next height is below every
//! reachable peer's first height, with or without a peer offering a snapshot above this node.
//! [`RunningConfig::confirm`] consecutive "behind, offered" checks with the height unchanged
//! are a trigger ([`Behind`], the typed reason). Any new height, or any other answer, resets
//! the count. Each check is counted by outcome in [`RunningCounters`] (`status.json`
//! `catchup_running`) and traced.
//!
//! **Catching up** ([`watch`], the async driver the adapter spawns): on a trigger the peers
//! offering a snapshot above the node are asked in turn, highest first, and the first offer
//! that verifies is taken ([`super::fetch::first_verified`]: the same bounded client, the same
//! [`super::judge`] against the engine's commit certificate of the block above the snapshot,
//! the same refusal kinds, counted into `catchup_refused`). The verified offer goes to the
//! node's loop ([`Event::Found`]), the only writer of the store: it installs it
//! ([`super::install`], crash-safe) unless it has since reached the snapshot's height itself.
//!
//! **Resuming.** Malachite 0.8.2's application channel starts a height only in its answers to
//! `ConsensusReady` (at engine start) and to `Finalized` (after a decision): a stalled node
//! gets neither, and the channel has no message to move a running engine to a later height
//! (`ConsensusMsg::StartHeight`/`RestartHeight` exist, but only the engine's own actors send
//! them). So after installing, the node replaces its process image with itself
//! ([`restart_self`], `execve` of `/proc/self/exe` with the same arguments: the same PID, the
//! same parent, the same log): the new image opens the installed store, restores the snapshot
//! at its base, runs [`super::fetch::before_start`] (which finds a peer holding the next
//! height, or catches up again) and starts its engine at the next height through
//! `ConsensusReady`. [`RESTARTS_ENV`] carries the count of such restarts into the new image's
//! status. The signing guard is untouched by this: its state file is reopened with the engine
//! WAL present, and every height the node signs after the restart is above the snapshot, so
//! above anything it signed before.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccron::host::Application;
use serde::{Deserialize, Serialize};

use super::fetch::{CatchUpReport, FetchConfig, PeerClient, Plan, Restorer, first_verified};
use super::serve::HistoryInfo;
use super::{CatchUpError, CommitVerifier, Verified};
use crate::store::Commit;

/// The environment variable a self-restarted node finds its count of catch-up restarts in.
pub const RESTARTS_ENV: &str = "CCRON_CATCHUP_RESTARTS";

/// The running detection's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningConfig {
    /// No new height for this long before the node asks its peers anything.
    pub stall_after: Duration,
    /// The pause between two checks of a stalled node.
    pub check_every: Duration,
    /// Consecutive "behind every peer, offered" checks that trigger a catch-up.
    pub confirm: u32,
    /// The bounded client's deadlines (history and offer).
    pub fetch: FetchConfig,
}

impl Default for RunningConfig {
    /// Stalled for 4 s, then a check every second, 3 in a row: a catch-up starts about 6 s
    /// after the last height at the earliest.
    fn default() -> Self {
        Self {
            stall_after: Duration::from_secs(4),
            check_every: Duration::from_secs(1),
            confirm: 3,
            fetch: FetchConfig::default(),
        }
    }
}

/// What one check of a stalled node found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// No peer answered.
    NoPeer,
    /// A reachable peer's store holds the next height: the engine's sync can serve it.
    PeerHoldsNext {
        /// That peer.
        peer: SocketAddr,
    },
    /// The next height is below every reachable peer's first height, and no peer offers a
    /// snapshot above this node (nothing to catch up from yet).
    BehindNoOffer(Behind),
    /// The next height is below every reachable peer's first height; these peers offer a
    /// snapshot above it (highest first).
    Behind(Behind, Vec<SocketAddr>),
}

/// Why a running node catches up: its next height is below every reachable peer's retained
/// history (the typed reason of a trigger, traced and kept in `status.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Behind {
    /// This node's last height.
    pub have: u64,
    /// The lowest first height among the reachable peers (above `have + 1`).
    pub lowest_first: u64,
    /// Peers that answered.
    pub reachable: u32,
    /// Milliseconds since the node's last new height.
    pub stalled_ms: u64,
}

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "height {} is below every reachable peer's history (lowest first height {}, {} \
             peers, no new height for {} ms)",
            self.have, self.lowest_first, self.reachable, self.stalled_ms
        )
    }
}

/// The running catch-up's counters (`status.json` `catchup_running`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningCounters {
    /// Checks made while stalled (each asks every peer's history).
    pub checks: u64,
    /// Checks no peer answered.
    pub no_peer: u64,
    /// Checks where a peer held the next height (the engine's sync can serve it).
    pub peer_holds_next: u64,
    /// Checks that found the node behind every reachable peer, with an offer above it.
    pub behind: u64,
    /// Checks that found it behind every reachable peer, nobody offering above it.
    pub behind_no_offer: u64,
    /// Catch-ups started ([`RunningConfig::confirm`] behind checks in a row).
    pub triggered: u64,
    /// Catch-ups where no offer verified (the refusals are in `catchup_refused`).
    pub no_verified_offer: u64,
    /// Verified offers not installed: the node reached their height meanwhile.
    pub stale: u64,
    /// Verified offers installed (the process then restarts itself).
    pub installed: u64,
    /// Verified offers whose install failed (an I/O error; the old store stays whole).
    pub install_failures: u64,
    /// Self-restarts after an install that led to this process ([`RESTARTS_ENV`]).
    pub restarts: u64,
    /// The reason of the last trigger.
    pub last_reason: Option<Behind>,
    /// The height of the last snapshot installed while running.
    pub last_installed: Option<u64>,
}

impl RunningCounters {
    /// The counts by name (`/metrics` `ccron_catchup_running_total{event}`).
    pub fn by_event(&self) -> std::collections::BTreeMap<String, u64> {
        [
            ("checks", self.checks),
            ("no_peer", self.no_peer),
            ("peer_holds_next", self.peer_holds_next),
            ("behind", self.behind),
            ("behind_no_offer", self.behind_no_offer),
            ("triggered", self.triggered),
            ("no_verified_offer", self.no_verified_offer),
            ("stale", self.stale),
            ("installed", self.installed),
            ("install_failures", self.install_failures),
            ("restarts", self.restarts),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The running detection (module docs), sans-IO.
#[derive(Debug, Clone)]
pub struct Detector {
    cfg: RunningConfig,
    height: u64,
    /// When `height` was first seen (ms, the caller's monotonic clock).
    since_ms: u64,
    /// The earliest instant of the next check.
    next_check_ms: u64,
    /// Consecutive "behind, offered" checks at `height`.
    streak: u32,
}

impl Detector {
    /// A detector for a node at `height` at instant `now_ms`.
    pub fn new(cfg: RunningConfig, height: u64, now_ms: u64) -> Self {
        Self {
            cfg,
            height,
            since_ms: now_ms,
            next_check_ms: 0,
            streak: 0,
        }
    }

    /// The node's last height at `now_ms`: a new one resets the stall and the count.
    pub fn observe(&mut self, height: u64, now_ms: u64) {
        if height != self.height {
            self.height = height;
            self.since_ms = now_ms;
            self.streak = 0;
        }
    }

    fn stalled_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.since_ms)
    }

    /// Whether the node has been stalled long enough and the next check is due.
    pub fn due(&self, now_ms: u64) -> bool {
        let stall = u64::try_from(self.cfg.stall_after.as_millis()).unwrap_or(u64::MAX);
        self.stalled_ms(now_ms) >= stall && now_ms >= self.next_check_ms
    }

    /// Classifies the peers' `answers` for the node's current height at `now_ms`, counting
    /// into `counters`; `Some` when this check completes a trigger (the reason, the peers to
    /// ask). The count restarts after a trigger.
    pub fn on_answers(
        &mut self,
        answers: &[(SocketAddr, Result<HistoryInfo, CatchUpError>)],
        now_ms: u64,
        counters: &mut RunningCounters,
    ) -> (Check, Option<(Behind, Vec<SocketAddr>)>) {
        let every = u64::try_from(self.cfg.check_every.as_millis()).unwrap_or(u64::MAX);
        self.next_check_ms = now_ms.saturating_add(every);
        counters.checks = counters.checks.saturating_add(1);
        let reachable: Vec<&HistoryInfo> = answers
            .iter()
            .filter_map(|(_, a)| a.as_ref().ok())
            .collect();
        let behind = Behind {
            have: self.height,
            lowest_first: reachable.iter().map(|h| h.first_height).min().unwrap_or(0),
            reachable: u32::try_from(reachable.len()).unwrap_or(u32::MAX),
            stalled_ms: self.stalled_ms(now_ms),
        };
        let check = match super::fetch::plan(self.height, answers) {
            Plan::NoPeer => Check::NoPeer,
            Plan::Sync { peer } => Check::PeerHoldsNext { peer },
            Plan::CatchUp { peers } if peers.is_empty() => Check::BehindNoOffer(behind),
            Plan::CatchUp { peers } => Check::Behind(behind, peers),
        };
        let c = match &check {
            Check::NoPeer => &mut counters.no_peer,
            Check::PeerHoldsNext { .. } => &mut counters.peer_holds_next,
            Check::BehindNoOffer(_) => &mut counters.behind_no_offer,
            Check::Behind(..) => &mut counters.behind,
        };
        *c = c.saturating_add(1);
        let Check::Behind(reason, peers) = &check else {
            self.streak = 0;
            return (check, None);
        };
        self.streak = self.streak.saturating_add(1);
        if self.streak < self.cfg.confirm.max(1) {
            return (check, None);
        }
        self.streak = 0;
        counters.triggered = counters.triggered.saturating_add(1);
        counters.last_reason = Some(*reason);
        let fire = Some((*reason, peers.clone()));
        (check, fire)
    }
}

/// What the watcher tells the node's loop.
#[derive(Debug)]
pub enum Event<A, C> {
    /// A verified offer to install (the loop checks it is still above its height).
    Found(Box<Found<A, C>>),
    /// A catch-up found no offer that verifies: its refusals (for `catchup_refused`).
    Refused(CatchUpReport),
}

/// A verified offer found while running, with why and from whom.
#[derive(Debug)]
pub struct Found<A, C> {
    /// Why the node caught up.
    pub reason: Behind,
    /// The offer, verified.
    pub verified: Verified<A, C>,
    /// What was asked and refused on the way (`catchup.json`).
    pub report: CatchUpReport,
}

/// Where the watcher reads the node's last height and writes its counters (shared with the
/// node's loop).
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// The node's last decided height (the loop stores it after each engine message).
    pub height: Arc<AtomicU64>,
    /// The counters (the loop copies them into its status).
    pub counters: Arc<Mutex<RunningCounters>>,
}

impl Shared {
    /// Shared state starting at `height`, with `restarts` earlier self-restarts.
    pub fn new(height: u64, restarts: u64) -> Self {
        Self {
            height: Arc::new(AtomicU64::new(height)),
            counters: Arc::new(Mutex::new(RunningCounters {
                restarts,
                ..RunningCounters::default()
            })),
        }
    }

    /// The counters now.
    pub fn counters(&self) -> RunningCounters {
        self.counters
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Changes the counters (under their lock).
    pub fn count<T>(&self, f: impl FnOnce(&mut RunningCounters) -> T) -> T {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut c)
    }
}

/// The environment variable that turns the running catch-up off (`off` or `0`): the node
/// then stalls behind every peer's history until it is restarted, as before (for an operator
/// who wants that, and to show what the catch-up does).
pub const RUNNING_ENV: &str = "CCRON_RUNNING_CATCHUP";

/// Whether the running catch-up is on ([`RUNNING_ENV`] is not `off` or `0`).
pub fn enabled_from_env() -> bool {
    !matches!(std::env::var(RUNNING_ENV).as_deref(), Ok("off" | "0"))
}

/// The number of self-restarts recorded in this process's environment ([`RESTARTS_ENV`]).
pub fn restarts_from_env() -> u64 {
    std::env::var(RESTARTS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The watcher (module docs): runs until `events` is closed. Spawn it on the node's runtime.
pub async fn watch<A, C, V>(
    shared: Shared,
    peers: Vec<SocketAddr>,
    restorer: Arc<Restorer<A>>,
    verifier: Arc<V>,
    cfg: RunningConfig,
    events: tokio::sync::mpsc::Sender<Event<A, C>>,
) where
    A: Application,
    C: Commit + Send + 'static,
    V: CommitVerifier<C> + 'static,
{
    if peers.is_empty() {
        return;
    }
    let client = PeerClient::new(cfg.fetch);
    let origin = tokio::time::Instant::now();
    let now = || u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut detector = Detector::new(cfg, shared.height.load(Ordering::Relaxed), now());
    let tick = cfg.check_every.min(Duration::from_millis(500));
    loop {
        tokio::time::sleep(tick).await;
        if events.is_closed() {
            return;
        }
        detector.observe(shared.height.load(Ordering::Relaxed), now());
        if !detector.due(now()) {
            continue;
        }
        let answers = super::fetch::histories(&client, &peers).await;
        // The height may have moved while the peers answered.
        detector.observe(shared.height.load(Ordering::Relaxed), now());
        let t = now();
        let (check, fire) = shared.count(|c| detector.on_answers(&answers, t, c));
        match &check {
            Check::Behind(b, _) | Check::BehindNoOffer(b) => {
                tracing::warn!(
                    have = b.have,
                    lowest_first = b.lowest_first,
                    stalled_ms = b.stalled_ms,
                    offered = matches!(check, Check::Behind(..)),
                    "catch-up (running): this node is behind every peer's history"
                );
            }
            Check::NoPeer => tracing::info!("catch-up (running): stalled, no peer answered"),
            Check::PeerHoldsNext { peer } => {
                tracing::debug!(%peer, "catch-up (running): stalled, a peer holds the next height");
            }
        }
        let Some((reason, candidates)) = fire else {
            continue;
        };
        tracing::warn!(%reason, peers = candidates.len(), "catch-up (running): triggered");
        let mut report = CatchUpReport {
            rounds: 1,
            trigger: Some("running".into()),
            ..CatchUpReport::asked(reason.have, &answers)
        };
        let started = now();
        let fresh = || restorer.fresh();
        let found = first_verified(
            &client,
            &candidates,
            reason.have,
            restorer.ledger(),
            &fresh,
            verifier.as_ref(),
            &mut report,
        )
        .await;
        let took_ms = now().saturating_sub(started);
        report.took_ms = took_ms;
        let event = match found {
            Some((peer, verified)) => {
                report.verified(peer, verified.height, took_ms);
                Event::Found(Box::new(Found {
                    reason,
                    verified,
                    report,
                }))
            }
            None => {
                shared.count(|c| c.no_verified_offer = c.no_verified_offer.saturating_add(1));
                tracing::error!(%reason, refused = ?report.refused_by_kind,
                    "catch-up (running): no peer's offer verified; asking again later");
                Event::Refused(report)
            }
        };
        if events.send(event).await.is_err() {
            return;
        }
    }
}

/// What the node's loop did with a verified offer ([`install_found`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Installed: the process restarts itself into it ([`restart_self`]).
    Installed {
        /// The snapshot's height.
        height: u64,
    },
    /// The node reached the snapshot's height itself meanwhile: nothing installed.
    Stale {
        /// The snapshot's height.
        height: u64,
        /// The node's height.
        have: u64,
    },
}

/// The node's loop (the only writer of its store) installs a verified offer found while
/// running in node directory `dir` of ledger `ledger`, its last height being `have`:
/// unless the node reached the snapshot's height meanwhile, [`super::install`] (crash-safe:
/// the snapshot first, then the store replaced), then `catchup.json` (with the trigger and
/// its reason), counted in `shared`.
///
/// # Errors
/// The install's I/O errors (the old store is then intact: module docs of [`super`]).
pub fn install_found<A: Application, C: Commit>(
    dir: &std::path::Path,
    ledger: &str,
    have: u64,
    found: Found<A, C>,
    shared: &Shared,
) -> Result<Outcome, CatchUpError> {
    let height = found.verified.height;
    if height <= have {
        shared.count(|c| c.stale = c.stale.saturating_add(1));
        tracing::info!(
            height,
            have,
            "catch-up (running): the node reached the offer's height itself; not installed"
        );
        return Ok(Outcome::Stale { height, have });
    }
    let mut report = found.report;
    report.reason = Some(found.reason);
    super::fetch::install_reported(dir, ledger, &found.verified, &report)?;
    shared.count(|c| {
        c.installed = c.installed.saturating_add(1);
        c.last_installed = Some(height);
    });
    tracing::warn!(
        height,
        have,
        reason = %found.reason,
        "catch-up (running): a peer's verified snapshot installed; the process restarts into it"
    );
    Ok(Outcome::Installed { height })
}

/// Replaces this process's image with itself (module docs): `execve` of `/proc/self/exe`
/// with the same arguments and [`RESTARTS_ENV`] set to `restarts`. Returns only on failure.
pub fn restart_self(restarts: u64) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| "ccron-node".into());
    let exe = if std::path::Path::new("/proc/self/exe").exists() {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => return e,
        }
    };
    std::process::Command::new(exe)
        .arg0(argv0)
        .args(args)
        .env(RESTARTS_ENV, restarts.to_string())
        .exec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PlainCommit;
    use ccron::host::CronLedger;
    use ccron_ledgers::demo::DemoLedger;

    use crate::catchup::testkit::{Raw, h, peer, raw_peer};

    type Demo = CronLedger<DemoLedger>;

    fn cfg() -> RunningConfig {
        RunningConfig {
            stall_after: Duration::from_millis(4_000),
            check_every: Duration::from_millis(1_000),
            confirm: 3,
            ..RunningConfig::default()
        }
    }

    #[test]
    fn a_stalled_node_behind_every_peer_triggers_after_the_confirmations_and_only_then() {
        let mut c = RunningCounters::default();
        let mut d = Detector::new(cfg(), 10, 0);
        // Not stalled yet: nothing is asked.
        assert!(!d.due(3_999));
        assert!(d.due(4_000));
        let behind = [(peer(1), h(60, Some(75))), (peer(2), h(51, Some(5)))];
        // Two checks behind: no trigger yet; a third one a second later triggers.
        assert_eq!(d.on_answers(&behind, 4_000, &mut c).1, None);
        assert!(!d.due(4_500), "one check per check_every");
        assert_eq!(d.on_answers(&behind, 5_000, &mut c).1, None);
        let (check, fire) = d.on_answers(&behind, 6_000, &mut c);
        let reason = Behind {
            have: 10,
            lowest_first: 51,
            reachable: 2,
            stalled_ms: 6_000,
        };
        // Only the peer offering above the node is asked.
        assert_eq!(check, Check::Behind(reason, vec![peer(1)]));
        assert_eq!(fire, Some((reason, vec![peer(1)])));
        assert_eq!((c.checks, c.behind, c.triggered), (3, 3, 1));
        assert_eq!(c.last_reason, Some(reason));
        // The count restarts after a trigger.
        assert_eq!(d.on_answers(&behind, 7_000, &mut c).1, None);
    }

    #[test]
    fn a_new_height_or_a_peer_holding_the_next_one_resets_the_count() {
        let mut c = RunningCounters::default();
        let mut d = Detector::new(cfg(), 10, 0);
        let behind = [(peer(1), h(60, Some(75)))];
        assert_eq!(d.on_answers(&behind, 4_000, &mut c).1, None);
        assert_eq!(d.on_answers(&behind, 5_000, &mut c).1, None);
        // A peer (restarted, or back from a partition) holds height 11: the engine syncs.
        let one_holds = [(peer(1), h(60, Some(75))), (peer(2), h(11, Some(50)))];
        let (check, fire) = d.on_answers(&one_holds, 6_000, &mut c);
        assert_eq!(
            (check, fire),
            (Check::PeerHoldsNext { peer: peer(2) }, None)
        );
        assert_eq!(d.on_answers(&behind, 7_000, &mut c).1, None);
        assert_eq!(d.on_answers(&behind, 8_000, &mut c).1, None);
        // The node decided a height: stalled no longer, count reset.
        d.observe(11, 8_500);
        assert!(!d.due(9_000));
        assert!(d.due(12_500));
        assert_eq!(d.on_answers(&behind, 12_500, &mut c).1, None);
        assert_eq!(d.on_answers(&behind, 13_500, &mut c).1, None);
        assert!(d.on_answers(&behind, 14_500, &mut c).1.is_some());
        // No peer answering, or nobody offering above the node: never a trigger.
        let down = || Err(CatchUpError::Fetch("refused".into()));
        let no_offer = [(peer(1), h(60, Some(10)))];
        for t in 0..5u64 {
            assert_eq!(
                d.on_answers(&[(peer(1), down())], 20_000 + t, &mut c).1,
                None
            );
            assert_eq!(d.on_answers(&no_offer, 30_000 + t, &mut c).1, None);
        }
        assert_eq!((c.no_peer, c.behind_no_offer, c.peer_holds_next), (5, 5, 1));
        assert_eq!(c.triggered, 1);
    }

    /// The running watcher's reads of its peers are bounded: a peer dripping its answer costs
    /// one deadline per check (the checks go on), one answering without end is cut at the
    /// size bound, and one answering `429` is asked again only after its pause, not at every
    /// check. Each assertion fails without its bound (no deadline: the drip's connection
    /// lives on and the checks stop; no size bound: megabytes per connection; no backoff:
    /// the busy peer asked at every check).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_watchers_peer_reads_are_deadlined_bounded_and_back_off_a_busy_peer() {
        // A valid head, then the body a byte every 100 ms.
        let (drip, dripped) = raw_peer(Raw::Answer {
            head: "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n",
            body: vec![b' '; 1_000],
            drip: Some(Duration::from_millis(100)),
        })
        .await;
        // A chunked body of 64 KiB chunks without end.
        let (endless, flooded) = raw_peer(Raw::Endless {
            head: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            chunk: format!("{:x}\r\n{}\r\n", 65_536, "x".repeat(65_536)).into_bytes(),
        })
        .await;
        // 429, asking for a 1 s pause.
        let (busy, asked) = raw_peer(Raw::Answer {
            head: "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n",
            body: Vec::new(),
            drip: None,
        })
        .await;
        let cfg = RunningConfig {
            stall_after: Duration::ZERO,
            check_every: Duration::from_millis(50),
            confirm: 3,
            fetch: FetchConfig {
                history_deadline: Duration::from_millis(400),
                offer_deadline: Duration::from_millis(400),
                ..FetchConfig::default()
            },
        };
        let shared = Shared::new(5, 0);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Event<Demo, PlainCommit>>(1);
        let restorer = Restorer::<Demo>::new(
            "demo",
            Arc::new(|| -> crate::ledger::LedgerHost<Demo> { unreachable!("nothing verified") }),
        );
        fn any_commit(_: &PlainCommit) -> Result<(), super::super::CommitRefusal> {
            Ok(())
        }
        let watcher = tokio::spawn(watch(
            shared.clone(),
            vec![drip, endless, busy],
            Arc::new(restorer),
            Arc::new(any_commit),
            cfg,
            tx,
        ));
        // 3 s of checks: no peer ever answers, so nothing is found.
        let got = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await;
        assert!(got.is_err(), "no event expected");
        drop(rx);
        watcher.await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let c = shared.counters();
        // Each check costs at most the deadline: at least 4 in 3 s, none answered.
        assert!(c.checks >= 4, "{c:?}");
        assert_eq!(c.no_peer, c.checks, "{c:?}");
        // The drip: every connection cut at the deadline (plus a drip step).
        let drip_ms = dripped.max_ms.load(Ordering::Relaxed);
        assert!(drip_ms <= 1_500, "a dripping connection lived {drip_ms} ms");
        assert_eq!(
            dripped.open.load(Ordering::Relaxed),
            0,
            "a dripping connection lives on"
        );
        assert!(dripped.connections.load(Ordering::Relaxed) >= 4);
        // The endless answer: cut at the 4 KiB bound (plus the sockets' buffers).
        let flood = flooded.max_bytes.load(Ordering::Relaxed);
        assert!(flood < 16 << 20, "{flood} bytes written on one connection");
        // The busy peer: asked at the first check, then after 1 s, then 2 s: not at every
        // check.
        let busy_asks = asked.connections.load(Ordering::Relaxed);
        println!(
            "checks {}, drip: {} connections, longest {drip_ms} ms; endless: at most {flood} \
             bytes on one connection; busy: asked {busy_asks} times",
            c.checks,
            dripped.connections.load(Ordering::Relaxed)
        );
        assert!(
            busy_asks <= 3 && busy_asks < c.checks,
            "{busy_asks} of {} checks",
            c.checks
        );
    }
}
