//! Network faults between localnet processes: a loopback TCP proxy per directed link, between
//! the validators' consensus transports (libp2p over TCP), driven by a seeded plan.
//!
//! **Where it sits.** For every ordered pair `(i, j)` the localnet binds a proxy on
//! `127.0.0.1` that forwards to validator `j`'s genesis port; node `i` is started with
//! `node --fault-peers-file` naming, for each other validator, the proxy of `(i, j)` instead of
//! the genesis port ([`PeerOverride`]). Every consensus connection node `i` dials to `j` therefore
//! passes through proxy `(i, j)`; libp2p keeps using a connection both ways, so the proxy judges
//! each byte by its direction: bytes from the dialer travel on link `i -> j`, the answers on
//! link `j -> i`. The nodes' HTTP endpoints (tick forwarding, catch-up, the load client) are not
//! proxied: a partition here cuts consensus and value sync, not the side channel of ticks.
//!
//! **What a fault is** ([`LinkTable`]):
//! - *delay*: each chunk read on a directed link is written `delay` later (order kept);
//! - *stall*: a directed link holds its bytes until the stall ends, then delivers them in order.
//!   TCP cannot lose one packet without breaking its stream, so this is what loss looks like to
//!   the nodes under TCP: a burst lost and retransmitted arrives late, in order;
//! - *reset*: every connection between two nodes is closed with an RST (`SO_LINGER` 0): what was
//!   in flight is lost, which is what message loss is at the application level; libp2p redials;
//! - *cut* (partitions): the connections across the cut are reset and new ones accepted and
//!   reset at once until the cut heals ([`NetAction::Isolate`], [`NetAction::Split`],
//!   [`NetAction::Heal`]).
//!
//! **The plan** ([`NetPlan`]) is a pure function of its seed, the number of nodes and the run's
//! duration (splitmix64, as [`crate::faults::FaultPlan`]): random per-link delays, stalls and
//! resets in the first 30% of the run, then one node isolated for 15%, a pause of 10%, a 2|2
//! split (two halves of the validators, at random) for 15%, and the last 30% healed to recover.
//! Below 20 s the noise and the isolation are stretched to [`MIN_JUDGED_WINDOW`] (one failed
//! round at the normal timeouts plus a margin) and the rest follows ([`layout`]).
//! `localnet --net-faults SEED` applies it and the report judges each window from the heights
//! the nodes reached ([`judge_windows`]); the same command replays a run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A peer-address override for a node (`node --fault-peers-file`): one multiaddr per line,
/// the addresses this node dials instead of the genesis ports (localnet fault injection only;
/// without the flag the node dials the genesis' ports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOverride(pub Vec<String>);

static PEER_OVERRIDE: std::sync::OnceLock<PeerOverride> = std::sync::OnceLock::new();

/// Reads a peers file and installs it as this process's peer override.
///
/// # Errors
/// The file cannot be read, is empty, or an override is installed already.
pub fn install_peer_override(path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("fault peers file {}: {e}", path.display()))?;
    let addrs: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if addrs.is_empty() {
        return Err(format!("fault peers file {}: empty", path.display()));
    }
    PEER_OVERRIDE
        .set(PeerOverride(addrs))
        .map_err(|_| "a peer override is installed already".to_string())
}

/// The peer override of this process, if `node --fault-peers-file` installed one.
pub fn peer_override() -> Option<&'static PeerOverride> {
    PEER_OVERRIDE.get()
}

/// One action of a network fault plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetAction {
    /// Bytes on the directed link `from -> to` are written `ms` after they are read.
    Delay {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// Latency added (ms).
        ms: u64,
    },
    /// Every delay back to zero.
    ClearDelays,
    /// The directed link `from -> to` holds its bytes for `ms`, then delivers them in order.
    Stall {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// How long (ms).
        ms: u64,
    },
    /// Every connection between `a` and `b` is reset (RST); new ones are accepted.
    Reset {
        /// One node.
        a: usize,
        /// The other.
        b: usize,
    },
    /// Every link of `node` cut (both directions, existing connections reset).
    Isolate(usize),
    /// The validators in `side` cut from the others.
    Split(Vec<usize>),
    /// Every link between `from` and each node of `to` cut (both directions: a byte stream
    /// with one direction held is closed by its peer's keep-alive, so a one-way cut is a cut):
    /// a Byzantine `from` delivering its proposal parts and votes only to the nodes not in
    /// `to` (`localnet --byzantine-subset`). Healed by [`NetAction::Heal`].
    Withhold {
        /// The Byzantine sender.
        from: usize,
        /// The nodes it withholds from.
        to: Vec<usize>,
    },
    /// Every cut healed.
    Heal,
}

impl std::fmt::Display for NetAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Delay { from, to, ms } => write!(f, "delay {from}->{to} {ms}ms"),
            Self::ClearDelays => write!(f, "clear-delays"),
            Self::Stall { from, to, ms } => write!(f, "stall {from}->{to} {ms}ms"),
            Self::Reset { a, b } => write!(f, "reset {a}-{b}"),
            Self::Isolate(i) => write!(f, "isolate {i}"),
            Self::Split(side) => {
                let s: Vec<String> = side.iter().map(ToString::to_string).collect();
                write!(f, "split {}|rest", s.join(","))
            }
            Self::Withhold { from, to } => {
                let s: Vec<String> = to.iter().map(ToString::to_string).collect();
                write!(f, "withhold {from}->{}", s.join(","))
            }
            Self::Heal => write!(f, "heal"),
        }
    }
}

/// A seeded network fault plan: actions at instants of the run (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPlan {
    /// `(instant, action)`, in instant order.
    pub events: Vec<(Duration, NetAction)>,
    /// The judged windows: `(kind, nodes, start, end)` ([`judge_windows`]).
    pub windows: Vec<PlannedWindow>,
}

/// A window of the plan the report judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWindow {
    /// `noise`, `isolate` or `split`.
    pub kind: WindowKind,
    /// The isolated node, or the nodes of one side of a split (empty for noise).
    pub nodes: Vec<usize>,
    /// Start (from the run's start).
    pub start: Duration,
    /// End (healed).
    pub end: Duration,
}

/// What a judged window holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// Delays, stalls and resets on random links: the chain must keep deciding.
    Noise,
    /// One node cut off: the others (a quorum of 3 of 4) must keep deciding; the isolated node
    /// must catch up after the heal.
    Isolate,
    /// Two halves: no quorum on either side, so no height may be decided during it (beyond one
    /// already voted), and deciding must resume after the heal.
    Split,
}

/// splitmix64 over a seed.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

impl NetPlan {
    /// The plan of `seed` over `nodes` nodes for a run of `duration` (see the module
    /// documentation).
    pub fn new(seed: u64, nodes: usize, duration: Duration) -> Self {
        let n = nodes.max(2);
        let mut rng = Rng(seed ^ 0x6e65_745f_6661_756c);
        let (noise_end, iso_end, split_start, split_end) = layout(duration);
        let mut events = Vec::new();
        let mut t = Duration::from_millis(2_000);
        while t < noise_end {
            let from = rng.below(n as u64) as usize;
            let to = (from + 1 + rng.below(n as u64 - 1) as usize) % n;
            let action = match rng.below(3) {
                0 => NetAction::Delay {
                    from,
                    to,
                    ms: 20 + rng.below(180),
                },
                1 => NetAction::Stall {
                    from,
                    to,
                    ms: 200 + rng.below(1_800),
                },
                _ => NetAction::Reset { a: from, b: to },
            };
            events.push((t, action));
            t += Duration::from_millis(400 + rng.below(1_200));
        }
        events.push((noise_end, NetAction::ClearDelays));
        let isolated = rng.below(n as u64) as usize;
        events.push((noise_end, NetAction::Isolate(isolated)));
        events.push((iso_end, NetAction::Heal));
        // A random half of the validators (node 0 always named on its side: the split of
        // {a, b} | {c, d} is the same as {c, d} | {a, b}).
        let mut others: Vec<usize> = (1..n).collect();
        let mut side = vec![0usize];
        while side.len() < n / 2 {
            let k = rng.below(others.len() as u64) as usize;
            side.push(others.remove(k));
        }
        side.sort_unstable();
        events.push((split_start, NetAction::Split(side.clone())));
        events.push((split_end, NetAction::Heal));
        let windows = vec![
            PlannedWindow {
                kind: WindowKind::Noise,
                nodes: Vec::new(),
                start: Duration::from_millis(2_000).min(noise_end),
                end: noise_end,
            },
            PlannedWindow {
                kind: WindowKind::Isolate,
                nodes: vec![isolated],
                start: noise_end,
                end: iso_end,
            },
            PlannedWindow {
                kind: WindowKind::Split,
                nodes: side,
                start: split_start,
                end: split_end,
            },
        ];
        Self { events, windows }
    }
}

/// One failed round at the Malachite adapter's normal timeouts: round 0's propose (1 s),
/// prevote (0.5 s) and precommit (0.5 s) waits before round 1 starts
/// (`ccron_malachite::state::timeouts`; that crate's tests check this is not below their sum).
/// A round whose proposer is the isolated node, or whose proposal a stalled link holds, costs
/// this much before the next proposer's round can decide.
pub const FAILED_ROUND: Duration = Duration::from_millis(2_000);

/// What a window that must see a decision needs beyond [`FAILED_ROUND`]: round 1 itself
/// (tens of ms, hundreds under load) and the localnet's 100 ms polls. The engine's redial
/// back-off after the noise's resets (2 s) runs at the same time as the failed round, not
/// after it.
pub const WINDOW_MARGIN: Duration = Duration::from_millis(1_000);

/// The shortest noise or isolation window the plan lays out, and the shortest the judge
/// judges ([`judge_windows`]): "nothing decided" in a shorter one may be one failed round,
/// not a fault of the nodes (campaign 2026-11-28: the 1.8 s isolations of 12 s runs, seeds
/// 60, 87, 105, 186).
pub const MIN_JUDGED_WINDOW: Duration = Duration::from_millis(3_000);

/// The shortest run a plan fits in ([`layout`]): 2 s for the nodes to connect, the noise and
/// isolation windows at [`MIN_JUDGED_WINDOW`] each, a pause and a split, and 1 s of the run
/// left after the heal (the localnet polls on past its end until the chain resumes). A plan
/// for a shorter run is laid out on this length: its later windows end after the run, which
/// the judge reports ("not over when the run ended").
pub const MIN_DURATION: Duration = Duration::from_millis(12_000);

/// The instants of a plan over a run of `duration`: the noise's end (it starts at 2 s), the
/// isolation's end (it starts at the noise's end), the split's start and end.
///
/// At 20 s and more: 30%, 45%, 55% and 70% of the run (each window at least
/// [`MIN_JUDGED_WINDOW`] already). Shorter runs (down to [`MIN_DURATION`], shorter ones laid
/// out on it): the noise and the isolation stretched to [`MIN_JUDGED_WINDOW`], then a pause of
/// 10% and a split of 15% of the run.
pub fn layout(duration: Duration) -> (Duration, Duration, Duration, Duration) {
    let d = duration.max(MIN_DURATION);
    let ms = |f: f64| Duration::from_millis((d.as_millis() as f64 * f) as u64);
    let start = Duration::from_millis(2_000);
    let (noise_end, iso_end) = (ms(0.3), ms(0.45));
    if noise_end >= start + MIN_JUDGED_WINDOW && iso_end >= noise_end + MIN_JUDGED_WINDOW {
        return (noise_end, iso_end, ms(0.55), ms(0.7));
    }
    let noise_end = noise_end.max(start + MIN_JUDGED_WINDOW);
    let iso_end = noise_end + (iso_end - ms(0.3)).max(MIN_JUDGED_WINDOW);
    let split_start = iso_end + ms(0.1);
    (noise_end, iso_end, split_start, split_start + ms(0.15))
}

/// The faults on every link, shared by the proxies (indices `from * n + to`).
#[derive(Debug)]
pub struct LinkTable {
    n: usize,
    delay_ms: Vec<u64>,
    stall_until: Vec<Option<Instant>>,
    /// Per unordered pair (`min * n + max`): bumped to close every connection of the pair.
    epoch: Vec<u64>,
    /// Per unordered pair: cut (partitioned).
    cut: Vec<bool>,
    /// What the proxies did.
    pub counters: NetCounters,
}

/// What the proxies did (in the report).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetCounters {
    /// Connections accepted and forwarded.
    pub connections: u64,
    /// Connections accepted during a cut and reset at once.
    pub refused_while_cut: u64,
    /// Connections closed by a reset or a cut.
    pub reset: u64,
    /// Connections whose target could not be reached (the node down).
    pub target_unreachable: u64,
    /// Bytes forwarded, per directed link `from -> to` (`"0->1"`).
    pub bytes: std::collections::BTreeMap<String, u64>,
}

/// What a pump may do with a chunk now.
#[derive(Debug, PartialEq, Eq)]
enum Gate {
    Open,
    Stalled,
    Closed,
}

impl LinkTable {
    /// A table of `n` nodes without faults.
    pub fn new(n: usize) -> Self {
        Self {
            n,
            delay_ms: vec![0; n * n],
            stall_until: vec![None; n * n],
            epoch: vec![0; n * n],
            cut: vec![false; n * n],
            counters: NetCounters::default(),
        }
    }

    fn pair(&self, a: usize, b: usize) -> usize {
        a.min(b) * self.n + a.max(b)
    }

    fn reset_pair(&mut self, a: usize, b: usize) {
        let p = self.pair(a, b);
        self.epoch[p] = self.epoch[p].wrapping_add(1);
    }

    fn set_cut(&mut self, a: usize, b: usize, cut: bool) {
        let p = self.pair(a, b);
        if cut && !self.cut[p] {
            self.epoch[p] = self.epoch[p].wrapping_add(1);
        }
        self.cut[p] = cut;
    }

    /// Applies one action at `now`.
    pub fn apply(&mut self, action: &NetAction, now: Instant) {
        let n = self.n;
        let ok = |i: usize| i < n;
        match *action {
            NetAction::Delay { from, to, ms } if ok(from) && ok(to) => {
                self.delay_ms[from * n + to] = ms;
            }
            NetAction::ClearDelays => self.delay_ms.iter_mut().for_each(|d| *d = 0),
            NetAction::Stall { from, to, ms } if ok(from) && ok(to) => {
                self.stall_until[from * n + to] = Some(now + Duration::from_millis(ms));
            }
            NetAction::Reset { a, b } if ok(a) && ok(b) => self.reset_pair(a, b),
            NetAction::Isolate(i) if ok(i) => {
                for j in (0..n).filter(|&j| j != i) {
                    self.set_cut(i, j, true);
                }
            }
            NetAction::Split(ref side) => {
                for a in 0..n {
                    for b in a + 1..n {
                        if side.contains(&a) != side.contains(&b) {
                            self.set_cut(a, b, true);
                        }
                    }
                }
            }
            NetAction::Withhold { from, ref to } if ok(from) => {
                for &j in to.iter().filter(|&&j| ok(j) && j != from) {
                    self.set_cut(from, j, true);
                }
            }
            NetAction::Heal => {
                for a in 0..n {
                    for b in a + 1..n {
                        self.set_cut(a, b, false);
                    }
                }
            }
            _ => tracing::warn!(%action, "net fault names a node outside the localnet; ignored"),
        }
    }

    fn delay(&self, from: usize, to: usize) -> Duration {
        Duration::from_millis(self.delay_ms[from * self.n + to])
    }

    fn gate(&self, from: usize, to: usize, epoch: u64, now: Instant) -> Gate {
        let p = self.pair(from, to);
        if self.epoch[p] != epoch || self.cut[p] {
            return Gate::Closed;
        }
        match self.stall_until[from * self.n + to] {
            Some(until) if now < until => Gate::Stalled,
            _ => Gate::Open,
        }
    }
}

fn lock(t: &Mutex<LinkTable>) -> std::sync::MutexGuard<'_, LinkTable> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The proxies of a localnet: one listener per directed link, on a runtime of their own.
pub struct NetFaults {
    rt: tokio::runtime::Runtime,
    table: Arc<Mutex<LinkTable>>,
    /// `ports[i][j]`: the proxy node `i` dials to reach `j` (0 on the diagonal).
    ports: Vec<Vec<u16>>,
}

impl std::fmt::Debug for NetFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetFaults")
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

impl NetFaults {
    /// Binds a proxy for every directed link between the validators listening on `targets`
    /// (their genesis ports) and starts forwarding.
    ///
    /// # Errors
    /// The runtime or a listener cannot be created.
    pub fn start(targets: &[u16]) -> std::io::Result<Self> {
        let n = targets.len();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("netfault")
            .enable_all()
            .build()?;
        let table = Arc::new(Mutex::new(LinkTable::new(n)));
        let mut ports = vec![vec![0u16; n]; n];
        for (i, row) in ports.iter_mut().enumerate() {
            for (j, port) in row.iter_mut().enumerate() {
                if i == j {
                    continue;
                }
                let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
                *port = listener.local_addr()?.port();
                rt.spawn(serve(listener, i, j, targets[j], table.clone()));
            }
        }
        Ok(Self { rt, table, ports })
    }

    /// The addresses node `i` dials (every other validator's proxy, in genesis order), one
    /// multiaddr each: the content of its `--fault-peers-file`.
    pub fn peers_of(&self, i: usize) -> Vec<String> {
        (0..self.ports.len())
            .filter(|&j| j != i)
            .map(|j| format!("/ip4/127.0.0.1/tcp/{}", self.ports[i][j]))
            .collect()
    }

    /// Applies one action now.
    // The localnet is the process boundary: its proxies run on the real clock.
    #[allow(clippy::disallowed_methods)]
    pub fn apply(&self, action: &NetAction) {
        lock(&self.table).apply(action, Instant::now());
    }

    /// What the proxies did so far.
    pub fn counters(&self) -> NetCounters {
        lock(&self.table).counters.clone()
    }

    /// Stops every proxy (connections dropped).
    pub fn stop(self) {
        self.rt.shutdown_background();
    }
}

/// Accepts connections for link `from -> to` and forwards each to `target`.
async fn serve(
    listener: tokio::net::TcpListener,
    from: usize,
    to: usize,
    target: u16,
    table: Arc<Mutex<LinkTable>>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let epoch = {
            let mut t = lock(&table);
            let p = t.pair(from, to);
            if t.cut[p] {
                t.counters.refused_while_cut += 1;
                drop(t);
                rst(inbound);
                continue;
            }
            t.epoch[p]
        };
        tokio::spawn(connection(inbound, from, to, target, epoch, table.clone()));
    }
}

/// Closes a socket with an RST.
fn rst(s: tokio::net::TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

/// One proxied connection: two pumps (dialer -> target on `from -> to`, answers on `to ->
/// from`), until both ends close (each direction half-closed in turn) or the pair's epoch
/// changes (a reset or a cut: both sockets closed with an RST).
// The proxy is a process boundary of the localnet (real sockets, real delays): wall-clock
// time enters here, as it does in `core::now_ms`; the plan itself stays a pure function.
#[allow(clippy::disallowed_methods)]
async fn connection(
    mut inbound: tokio::net::TcpStream,
    from: usize,
    to: usize,
    target: u16,
    epoch: u64,
    table: Arc<Mutex<LinkTable>>,
) {
    let mut outbound = match tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
        Ok(s) => s,
        Err(_) => {
            lock(&table).counters.target_unreachable += 1;
            rst(inbound);
            return;
        }
    };
    lock(&table).counters.connections += 1;
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let closed = {
        let (in_r, in_w) = inbound.split();
        let (out_r, out_w) = outbound.split();
        let both = async {
            tokio::join!(
                pump(in_r, out_w, from, to, epoch, &table),
                pump(out_r, in_w, to, from, epoch, &table)
            )
        };
        let watch = async {
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if lock(&table).gate(from, to, epoch, Instant::now()) == Gate::Closed {
                    return;
                }
            }
        };
        tokio::select! {
            _ = both => false,
            () = watch => true,
        }
    };
    if closed {
        lock(&table).counters.reset += 1;
        rst(inbound);
        rst(outbound);
    }
}

/// Forwards `r` to `w` on link `from -> to`: each chunk written no earlier than its read
/// instant plus the link's delay, in order, held while the link is stalled; at the reader's
/// end `w` is shut down (a half close). A closed gate (reset, cut) parks it: the caller's watch
/// closes the connection.
// The proxy is a process boundary of the localnet (real sockets, real delays): wall-clock
// time enters here, as it does in `core::now_ms`; the plan itself stays a pure function.
#[allow(clippy::disallowed_methods)]
async fn pump(
    mut r: tokio::net::tcp::ReadHalf<'_>,
    mut w: tokio::net::tcp::WriteHalf<'_>,
    from: usize,
    to: usize,
    epoch: u64,
    table: &Mutex<LinkTable>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Bounded: a stalled link stops reading after 64 chunks (TCP back-pressure to the sender).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(64);
    let key = format!("{from}->{to}");
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let delay = lock(table).delay(from, to);
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let writer = async move {
        let mut last = tokio::time::Instant::now();
        while let Some((due, chunk)) = rx.recv().await {
            let due = due.max(last);
            last = due;
            tokio::time::sleep_until(due).await;
            loop {
                let gate = lock(table).gate(from, to, epoch, Instant::now());
                match gate {
                    Gate::Open => break,
                    Gate::Stalled => tokio::time::sleep(Duration::from_millis(10)).await,
                    Gate::Closed => std::future::pending::<()>().await,
                }
            }
            if w.write_all(&chunk).await.is_err() {
                break;
            }
            *lock(table).counters.bytes.entry(key.clone()).or_default() += chunk.len() as u64;
        }
        let _ = w.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// One judged window in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NetWindow {
    /// What it held.
    pub kind: WindowKind,
    /// The isolated node, or one side of the split.
    pub nodes: Vec<usize>,
    /// Start and end (ms from the run's start).
    pub start_ms: u64,
    /// End (healed).
    pub end_ms: u64,
    /// Heights the chain (the highest node) gained during the window.
    pub heights_during: u64,
    /// The longest time the highest node's height stood still during the window (ms, at the
    /// localnet's 100 ms polls).
    pub longest_stall_during_ms: u64,
    /// From the heal to the next height decided by any node (ms); `None`: none until the end.
    pub resumed_after_ms: Option<u64>,
    /// From the heal to every node holding the height the highest had at the heal (ms); `None`:
    /// not by the end (the isolated node's catch-up, for an isolation).
    pub caught_up_after_ms: Option<u64>,
    /// Heights the nodes kept in the window (isolate: the others' gain; the isolated node's
    /// gain is in `isolated_gained`).
    pub isolated_gained: Option<u64>,
}

/// The heights every node held at each localnet poll: `(ms from start, height per node)`.
pub type Trace = [(u64, Vec<u64>)];

/// Judges each planned window from the trace: progress, the longest stall, resumption and
/// catch-up after the heal; the second value is the violations found (an isolation during which
/// the others decided nothing, a split during which more than one height was decided, a split
/// after which nothing was decided again, a node that did not catch up by the end). A noise or
/// isolation window shorter than [`MIN_JUDGED_WINDOW`] is not judged on its decisions (one
/// failed round may fill it) and is itself reported, as is a window the run ended inside or
/// one without a poll: the judge never passes a window it could not judge.
pub fn judge_windows(windows: &[PlannedWindow], trace: &Trace) -> (Vec<NetWindow>, Vec<String>) {
    let mut out = Vec::new();
    let mut violations = Vec::new();
    let top = |hs: &Vec<u64>| hs.iter().copied().max().unwrap_or(0);
    for w in windows {
        let (start, end) = (w.start.as_millis() as u64, w.end.as_millis() as u64);
        let inside: Vec<&(u64, Vec<u64>)> = trace
            .iter()
            .filter(|(t, _)| *t >= start && *t <= end)
            .collect();
        let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
            violations.push(format!(
                "net {:?} window {start}-{end} ms: no poll of the nodes inside it",
                w.kind
            ));
            continue;
        };
        if trace.last().is_none_or(|(t, _)| *t < end) {
            violations.push(format!(
                "net {:?} window {start}-{end} ms: not over when the run ended (net faults need \
                 runs of at least {} ms)",
                w.kind,
                MIN_DURATION.as_millis()
            ));
        }
        let progress = matches!(w.kind, WindowKind::Noise | WindowKind::Isolate);
        let too_short = progress && w.end.saturating_sub(w.start) < MIN_JUDGED_WINDOW;
        if too_short {
            violations.push(format!(
                "net {:?} window {start}-{end} ms: shorter than one failed round plus margin \
                 ({} ms), so whether it decides says nothing about the nodes: not judged",
                w.kind,
                MIN_JUDGED_WINDOW.as_millis()
            ));
        }
        // Heights decided in the window: the rise of the highest height the others hold (an
        // isolated node's own are not counted). Not a node's own gain: a node behind the top
        // that takes decided heights from a peer (value sync after an earlier fault) decides
        // nothing new, and during a split it may do so from a peer on its side.
        let others_top = |hs: &Vec<u64>| {
            (0..hs.len())
                .filter(|i| !(w.kind == WindowKind::Isolate && w.nodes.contains(i)))
                .map(|i| hs[i])
                .max()
                .unwrap_or(0)
        };
        let heights_during = others_top(&last.1).saturating_sub(others_top(&first.1));
        let mut stall = 0u64;
        let mut since = first.0;
        let mut h = top(&first.1);
        for (t, hs) in &inside {
            if top(hs) > h {
                h = top(hs);
                since = *t;
            }
            stall = stall.max(t - since);
        }
        let at_heal = top(&last.1);
        let after: Vec<&(u64, Vec<u64>)> = trace.iter().filter(|(t, _)| *t > end).collect();
        let resumed_after_ms = after
            .iter()
            .find(|(_, hs)| top(hs) > at_heal)
            .map(|(t, _)| t - end);
        let caught_up_after_ms = after
            .iter()
            .find(|(_, hs)| hs.iter().all(|&x| x >= at_heal))
            .map(|(t, _)| t - end);
        let isolated_gained = (w.kind == WindowKind::Isolate).then(|| {
            w.nodes
                .iter()
                .map(|&i| {
                    last.1
                        .get(i)
                        .copied()
                        .unwrap_or(0)
                        .saturating_sub(first.1.get(i).copied().unwrap_or(0))
                })
                .max()
                .unwrap_or(0)
        });
        match w.kind {
            WindowKind::Noise | WindowKind::Isolate if heights_during == 0 && !too_short => violations.push(
                format!("net {:?} window {start}-{end} ms: nothing decided", w.kind),
            ),
            WindowKind::Split if heights_during > 1 => violations.push(format!(
                "net split window {start}-{end} ms: {heights_during} heights decided without a quorum on either side"
            )),
            _ => {}
        }
        if w.kind == WindowKind::Split && resumed_after_ms.is_none() {
            violations.push(format!(
                "net split healed at {end} ms: nothing decided after it"
            ));
        }
        if caught_up_after_ms.is_none() {
            violations.push(format!(
                "net {:?} healed at {end} ms: not every node reached height {at_heal} by the end",
                w.kind
            ));
        }
        out.push(NetWindow {
            kind: w.kind,
            nodes: w.nodes.clone(),
            start_ms: start,
            end_ms: end,
            heights_during,
            longest_stall_during_ms: stall,
            resumed_after_ms,
            caught_up_after_ms,
            isolated_gained,
        });
    }
    (out, violations)
}

#[cfg(test)]
// The proxy tests time real sockets.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_a_function_of_its_seed_with_an_isolation_and_a_split() {
        let d = Duration::from_secs(40);
        let a = NetPlan::new(7, 4, d);
        assert_eq!(a, NetPlan::new(7, 4, d));
        assert_ne!(a.events, NetPlan::new(8, 4, d).events);
        let kinds: Vec<WindowKind> = a.windows.iter().map(|w| w.kind).collect();
        assert_eq!(
            kinds,
            [WindowKind::Noise, WindowKind::Isolate, WindowKind::Split]
        );
        assert!(a.events.windows(2).all(|w| w[0].0 <= w[1].0), "{a:?}");
        let split = &a.windows[2];
        assert_eq!(split.nodes.len(), 2);
        assert!(split.nodes.contains(&0));
        // Every cut is healed, the last with 30% of the run left.
        let heals: Vec<Duration> = a
            .events
            .iter()
            .filter(|(_, e)| *e == NetAction::Heal)
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(heals.len(), 2);
        assert!(heals[1] <= d * 7 / 10);
        for s in 0..50 {
            let p = NetPlan::new(s, 4, d);
            assert!(p.events.len() > 5, "{p:?}");
            for (_, e) in &p.events {
                if let NetAction::Delay { from, to, .. }
                | NetAction::Stall { from, to, .. }
                | NetAction::Reset { a: from, b: to } = e
                {
                    assert!(from != to && *from < 4 && *to < 4, "{e:?}");
                }
            }
        }
    }

    #[test]
    fn the_table_cuts_splits_heals_and_stalls_by_direction() {
        let now = Instant::now();
        let mut t = LinkTable::new(4);
        let e = |t: &LinkTable, a, b| t.epoch[t.pair(a, b)];
        t.apply(&NetAction::Split(vec![0, 2]), now);
        for (a, b, cut) in [(0, 2, false), (1, 3, false), (0, 1, true), (2, 3, true)] {
            assert_eq!(t.cut[t.pair(a, b)], cut, "{a}-{b}");
            assert_eq!(t.gate(a, b, 0, now) == Gate::Closed, cut, "{a}-{b}");
            assert_eq!(t.gate(b, a, 0, now) == Gate::Closed, cut, "{b}-{a}");
        }
        t.apply(&NetAction::Heal, now);
        // A healed pair is open to new connections; the old ones were closed (epoch moved).
        assert_eq!(t.gate(0, 1, e(&t, 0, 1), now), Gate::Open);
        assert_eq!(t.gate(0, 1, 0, now), Gate::Closed);
        assert_eq!(t.gate(0, 2, 0, now), Gate::Open);
        t.apply(&NetAction::Isolate(3), now);
        assert!((0..3).all(|i| t.cut[t.pair(i, 3)]));
        assert!(!t.cut[t.pair(0, 1)]);
        t.apply(&NetAction::Heal, now);
        t.apply(
            &NetAction::Stall {
                from: 1,
                to: 2,
                ms: 500,
            },
            now,
        );
        assert_eq!(t.gate(1, 2, e(&t, 1, 2), now), Gate::Stalled);
        assert_eq!(t.gate(2, 1, e(&t, 1, 2), now), Gate::Open);
        assert_eq!(
            t.gate(1, 2, e(&t, 1, 2), now + Duration::from_millis(501)),
            Gate::Open
        );
        t.apply(
            &NetAction::Delay {
                from: 2,
                to: 0,
                ms: 90,
            },
            now,
        );
        assert_eq!(t.delay(2, 0), Duration::from_millis(90));
        assert_eq!(t.delay(0, 2), Duration::ZERO);
        t.apply(&NetAction::ClearDelays, now);
        assert_eq!(t.delay(2, 0), Duration::ZERO);
        let before = e(&t, 3, 0);
        t.apply(&NetAction::Reset { a: 3, b: 0 }, now);
        assert_eq!(e(&t, 0, 3), before + 1);
        // A Byzantine 0 delivering to 1 and 2 only: its links to 3 cut, no other.
        t.apply(
            &NetAction::Withhold {
                from: 0,
                to: vec![3],
            },
            now,
        );
        for a in 0..4 {
            for b in (a + 1)..4 {
                assert_eq!(t.cut[t.pair(a, b)], (a, b) == (0, 3), "{a}-{b}");
            }
        }
        assert_eq!(t.gate(0, 3, e(&t, 0, 3), now), Gate::Closed);
        assert_eq!(t.gate(3, 0, e(&t, 0, 3), now), Gate::Closed);
        assert_eq!(t.gate(0, 1, e(&t, 0, 1), now), Gate::Open);
        assert_eq!(
            NetAction::Withhold {
                from: 0,
                to: vec![2, 3]
            }
            .to_string(),
            "withhold 0->2,3"
        );
    }

    fn window(kind: WindowKind, nodes: Vec<usize>, s: u64, e: u64) -> PlannedWindow {
        PlannedWindow {
            kind,
            nodes,
            start: Duration::from_millis(s),
            end: Duration::from_millis(e),
        }
    }

    #[test]
    fn windows_are_judged_from_the_heights_trace() {
        // Node 3 isolated 1,000-4,000 (the others go on), a split 5,000-6,000 (nothing), all
        // at 50 by 6,600.
        let mut trace = Vec::new();
        for t in (0..=7_000u64).step_by(100) {
            let h = match t {
                0..=4_000 => 10 + t / 100,
                4_001..=6_300 => 50,
                _ => 50 + (t - 6_300) / 100,
            };
            let h3 = if (1_000..4_400).contains(&t) { 20 } else { h };
            trace.push((t, vec![h, h, h, h3]));
        }
        let ws = [
            window(WindowKind::Isolate, vec![3], 1_000, 4_000),
            window(WindowKind::Split, vec![0, 1], 5_000, 6_000),
        ];
        let (judged, violations) = judge_windows(&ws, &trace);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(judged[0].heights_during, 30);
        assert_eq!(judged[0].isolated_gained, Some(0));
        assert_eq!(judged[0].caught_up_after_ms, Some(400));
        assert_eq!(judged[1].heights_during, 0);
        assert_eq!(judged[1].longest_stall_during_ms, 1_000);
        assert_eq!(judged[1].resumed_after_ms, Some(400));
        // A split that decides is a violation; so is one that never resumes.
        let moving: Vec<(u64, Vec<u64>)> = (0..=70u64).map(|k| (k * 100, vec![k; 4])).collect();
        let (_, v) = judge_windows(&ws[1..], &moving);
        assert!(v.iter().any(|v| v.contains("without a quorum")), "{v:?}");
        let stuck: Vec<(u64, Vec<u64>)> = (0..=70u64).map(|k| (k * 100, vec![5; 4])).collect();
        let (_, v) = judge_windows(&ws, &stuck);
        assert!(
            v.iter().any(|v| v.contains("nothing decided after")),
            "{v:?}"
        );
        assert!(v.iter().any(|v| v.contains("Isolate window")), "{v:?}");
    }

    /// Campaign seeds 60, 87, 105, 186 (12 s runs, 2026-11-28): the isolation window was
    /// 3.6-5.4 s, shorter than one failed round at the normal timeouts (2 s), and "nothing
    /// decided" in it failed the run although the three connected nodes were fine. A window
    /// that short is not judged on its decisions (it is reported as unjudgeable instead), and
    /// no plan lays one out.
    #[test]
    fn a_window_shorter_than_a_failed_round_is_not_blamed_on_the_nodes() {
        // Nothing decided 3,600-5,400 (a failed round), then the chain goes on.
        let trace: Vec<(u64, Vec<u64>)> = (0..=120u64)
            .map(|k| {
                let t = k * 100;
                let h = if t < 3_600 {
                    t / 100
                } else if t <= 5_600 {
                    36
                } else {
                    36 + (t - 5_600) / 100
                };
                (t, vec![h; 4])
            })
            .collect();
        let short = [window(WindowKind::Isolate, vec![2], 3_600, 5_400)];
        let (_, v) = judge_windows(&short, &trace);
        assert!(!v.iter().any(|v| v.contains("nothing decided")), "{v:?}");
        assert!(v.iter().any(|v| v.contains("not judged")), "{v:?}");
        // The same stall inside a window of the minimum length is judged (and passes: the
        // chain decided after the failed round).
        let long = [window(WindowKind::Isolate, vec![2], 3_600, 6_600)];
        let (j, v) = judge_windows(&long, &trace);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(j[0].heights_during, 10);
        // A long window where nothing is decided is still a violation.
        let flat: Vec<(u64, Vec<u64>)> = (0..=120u64).map(|k| (k * 100, vec![7; 4])).collect();
        let (_, v) = judge_windows(&long, &flat);
        assert!(v.iter().any(|v| v.contains("nothing decided")), "{v:?}");
        // A window the run ended inside, or one without a poll, is reported, not skipped.
        let late = [window(WindowKind::Isolate, vec![2], 10_000, 13_000)];
        let (_, v) = judge_windows(&late, &trace);
        assert!(v.iter().any(|v| v.contains("not over")), "{v:?}");
        let after = [window(WindowKind::Isolate, vec![2], 20_000, 23_000)];
        let (_, v) = judge_windows(&after, &trace);
        assert!(v.iter().any(|v| v.contains("no poll")), "{v:?}");
    }

    #[test]
    fn every_plan_gives_its_judged_windows_a_failed_round_and_ends_in_the_run() {
        // The judged window must outlast a failed round at the adapter's normal timeouts.
        assert!(MIN_JUDGED_WINDOW >= FAILED_ROUND + WINDOW_MARGIN);
        for secs in 12..=60u64 {
            for extra_ms in [0u64, 333, 999] {
                let d = Duration::from_millis(secs * 1_000 + extra_ms);
                for seed in [1u64, 60, 87, 105, 186] {
                    let p = NetPlan::new(seed, 4, d);
                    assert!(p.events.windows(2).all(|w| w[0].0 <= w[1].0), "{d:?} {p:?}");
                    let [noise, iso, split] = &p.windows[..] else {
                        panic!("{p:?}");
                    };
                    for w in [noise, iso] {
                        assert!(
                            w.end - w.start >= MIN_JUDGED_WINDOW,
                            "{d:?} seed {seed}: {w:?}"
                        );
                    }
                    assert!(noise.end <= iso.start && iso.end < split.start, "{p:?}");
                    assert!(
                        split.end + Duration::from_millis(1_000) <= d,
                        "{d:?}: {split:?}"
                    );
                    assert!(p.events.iter().all(|(t, _)| *t < d), "{d:?}");
                }
            }
        }
        // From 20 s on the plan is the fractions of the run, as before the minimum existed
        // (a seed replays the same plan).
        for secs in [20u64, 30, 40, 60] {
            let d = Duration::from_secs(secs);
            let f = |x: u64| Duration::from_millis(secs * 10 * x);
            assert_eq!(layout(d), (f(30), f(45), f(55), f(70)), "{secs} s");
        }
        // 12 s: noise 2-5 s, isolation 5-8 s, split 9.2-11 s.
        assert_eq!(
            layout(Duration::from_secs(12)),
            (
                Duration::from_millis(5_000),
                Duration::from_millis(8_000),
                Duration::from_millis(9_200),
                Duration::from_millis(11_000)
            )
        );
        // Shorter runs are laid out on the minimum.
        assert_eq!(layout(Duration::from_secs(6)), layout(MIN_DURATION));
    }

    /// Campaign seed 15 (12 s runs, 2026-11-28): node 0, isolated from 3.6 to 5.4 s, was still
    /// redialling its peers when the 2|2 split began at 6.6 s and took 17 decided heights from
    /// node 1 (its side) by value sync during the split, while the top height stood still. The
    /// judge counted that node's gain as 17 heights "decided without a quorum"; only a rise of
    /// the top is a decision.
    #[test]
    fn a_node_catching_up_during_a_split_is_not_a_decision() {
        let mut trace = Vec::new();
        for t in (3_000..=6_000u64).step_by(100) {
            // Nodes 1-3 stand at 56 through the split; node 0 syncs 39 -> 56 inside it,
            // and the chain resumes after the heal at 4,000.
            let top = if t <= 4_300 {
                56
            } else {
                56 + (t - 4_300) / 100
            };
            let h0 = if t < 3_400 {
                39
            } else {
                top.min(39 + (t - 3_300) / 10)
            };
            trace.push((t, vec![h0, top, top, top]));
        }
        let ws = [window(WindowKind::Split, vec![0, 1], 3_000, 4_000)];
        let (judged, violations) = judge_windows(&ws, &trace);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(judged[0].heights_during, 0);
        // The same trace with the top rising inside the split still is a violation.
        let rising: Vec<(u64, Vec<u64>)> = trace
            .iter()
            .map(|(t, hs)| (*t, hs.iter().map(|h| h + t / 100).collect()))
            .collect();
        let (_, v) = judge_windows(&ws, &rising);
        assert!(v.iter().any(|v| v.contains("without a quorum")), "{v:?}");
    }

    #[test]
    fn bytes_pass_through_a_proxy_delayed_and_stop_at_a_cut() {
        use std::io::{Read, Write};
        // Node 1's "transport": an echo server.
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in server.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let net = NetFaults::start(&[1, port]).unwrap();
        let proxy: u16 = net.peers_of(0)[0]
            .rsplit('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        net.apply(&NetAction::Delay {
            from: 0,
            to: 1,
            ms: 150,
        });
        let mut c = std::net::TcpStream::connect(("127.0.0.1", proxy)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t0 = Instant::now();
        c.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        assert!(
            t0.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t0.elapsed()
        );
        // A cut resets the connection, and a new one is reset at once.
        net.apply(&NetAction::Isolate(1));
        std::thread::sleep(Duration::from_millis(100));
        let _ = c.write_all(b"more");
        let mut rest = Vec::new();
        assert!(
            matches!(c.read_to_end(&mut rest), Err(_) | Ok(0)),
            "{rest:?}"
        );
        let mut d = std::net::TcpStream::connect(("127.0.0.1", proxy)).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = d.write_all(b"x");
        assert!(matches!(d.read(&mut buf), Err(_) | Ok(0)));
        let c = net.counters();
        assert_eq!(c.connections, 1);
        assert!(c.refused_while_cut >= 1 && c.reset >= 1, "{c:?}");
        assert_eq!(c.bytes.get("0->1"), Some(&4));
        net.stop();
    }
}
