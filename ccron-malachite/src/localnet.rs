//! `localnet`: N validator processes on 127.0.0.1, a SIGKILL and restart mid-run, optionally a late
//! joiner or a lying proposer, and a JSON report. Every child is killed on every exit path (a
//! guard's Drop), and nodes exit on their own when the localnet process disappears.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::node::{Genesis, GenesisValidator, NodeStatus, hex, localnet_secret, node_dir, now_ms};

/// Localnet options.
#[derive(Debug, Clone)]
pub struct LocalnetOptions {
    /// Number of validators.
    pub nodes: usize,
    /// Run time.
    pub duration: Duration,
    /// The ledger.
    pub ledger: String,
    /// Start the last node late (it catches up through the engine's sync).
    pub late_join: bool,
    /// Make node 0 propose lying agreed times.
    pub lying_time: bool,
    /// SIGKILL one node mid-run and restart it from its storage.
    pub kill_restart: bool,
    /// Key seed.
    pub seed: u64,
    /// Where to put the config directories (a fresh temporary directory if None).
    pub home: Option<PathBuf>,
    /// The node binary (this executable by default).
    pub node_bin: PathBuf,
}

/// One node in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeReport {
    /// Index.
    pub id: usize,
    /// PID of its last process.
    pub pid: u32,
    /// Whether it was honest.
    pub honest: bool,
    /// Last decided height.
    pub last_executed_seq: u64,
    /// State digest at that height.
    pub state_digest: String,
    /// Ticks executed.
    pub ticks_executed: u64,
    /// Ticks skipped by the host's tick gate or refused by the ledger.
    #[serde(default)]
    pub ticks_skipped: u64,
    /// Actions fired.
    pub fires: u64,
    /// Proposals it rejected.
    pub rejected_proposals: u64,
    /// Heights it obtained through sync.
    pub synced_heights: u64,
    /// Agreed time of its last height (Unix ms).
    pub agreed_time_ms: i64,
}

/// The localnet report (the sim-bft report's fields where they apply, plus `restarts`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// The engine.
    pub engine: String,
    /// Nodes.
    pub nodes: Vec<NodeReport>,
    /// Whether every honest node has the same digest at every height they share.
    pub honest_agree: bool,
    /// Agreement or liveness violations found.
    pub violations: Vec<String>,
    /// Restarts performed (SIGKILL + restart from storage).
    pub restarts: u32,
    /// Distinct PIDs spawned.
    pub pids: Vec<u32>,
    /// Highest height decided by any honest node.
    pub max_height: u64,
    /// Heights per second (max_height / duration).
    pub heights_per_sec: f64,
    /// The config directory used.
    pub home: String,
}

struct Children(Vec<Option<Child>>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes keys and genesis for `n` nodes, with free loopback ports.
///
/// # Errors
/// I/O errors.
pub fn init_home(home: &Path, n: usize, seed: u64, ledger: &str) -> std::io::Result<Genesis> {
    std::fs::create_dir_all(home)?;
    let mut validators = Vec::new();
    let mut listeners = Vec::new();
    for i in 0..n {
        let secret = localnet_secret(seed, i);
        let public = crate::context::Ed25519Signer::new(secret).public_key();
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        listeners.push(l);
        let dir = node_dir(home, i);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("secret.key"), hex(&secret))?;
        validators.push(GenesisValidator {
            public_key: hex(&public),
            port,
        });
    }
    drop(listeners);
    let genesis = Genesis {
        genesis_time_ms: now_ms(),
        validators,
        ledger: ledger.to_string(),
    };
    std::fs::write(
        home.join("genesis.json"),
        serde_json::to_vec_pretty(&genesis).map_err(std::io::Error::other)?,
    )?;
    Ok(genesis)
}

fn spawn_node(opts: &LocalnetOptions, home: &Path, i: usize) -> std::io::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(node_dir(home, i).join("node.log"))?;
    let mut cmd = Command::new(&opts.node_bin);
    cmd.arg("node")
        .arg("--home")
        .arg(home)
        .arg("--index")
        .arg(i.to_string());
    if opts.lying_time && i == 0 {
        cmd.arg("--lying-time");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
}

fn read_status(home: &Path, i: usize) -> NodeStatus {
    std::fs::read(node_dir(home, i).join("status.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// (height -> digest) of a node, from its digests log; inconsistent repeats are violations.
fn read_digests(
    home: &Path,
    i: usize,
    violations: &mut Vec<String>,
) -> std::collections::BTreeMap<u64, String> {
    let mut out = std::collections::BTreeMap::new();
    let text = std::fs::read_to_string(node_dir(home, i).join("digests.log")).unwrap_or_default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(h), Some(d)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(h) = h.parse::<u64>() else { continue };
        if let Some(prev) = out.insert(h, d.to_string())
            && prev != d
        {
            violations.push(format!("node {i} has two digests at height {h}"));
        }
    }
    out
}

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
    init_home(&home, opts.nodes, opts.seed, &opts.ledger)?;
    let n = opts.nodes;
    let late = if opts.late_join { Some(n - 1) } else { None };
    let mut children = Children((0..n).map(|_| None).collect());
    let mut pids = Vec::new();
    for i in 0..n {
        if Some(i) != late {
            let c = spawn_node(opts, &home, i)?;
            pids.push(c.id());
            children.0[i] = Some(c);
        }
    }
    // `--ledger orders`: a client places orders through the nodes' endpoints (`crate::load`).
    let load = match opts.ledger.as_str() {
        "orders" => Some(crate::load::LoadGenerator::start(
            crate::load::LoadOptions::localnet(&home, n, opts.seed),
        )?),
        _ => None,
    };
    let start = Instant::now();
    // Kill the node after the liar (or node 1) and, if there is a late joiner, not that one.
    let victim = 1usize.min(n - 1);
    let kill_at = opts.duration / 3;
    let restart_at = opts.duration / 2;
    let late_at = opts.duration * 2 / 5;
    let mut restarts = 0u32;
    let mut killed = false;
    let mut late_started = false;
    while start.elapsed() < opts.duration {
        std::thread::sleep(Duration::from_millis(100));
        let t = start.elapsed();
        if opts.kill_restart && !killed && t >= kill_at && Some(victim) != late {
            if let Some(mut c) = children.0[victim].take() {
                let _ = c.kill(); // SIGKILL
                let _ = c.wait();
            }
            killed = true;
        }
        if killed && restarts == 0 && t >= restart_at {
            let c = spawn_node(opts, &home, victim)?;
            pids.push(c.id());
            children.0[victim] = Some(c);
            restarts += 1;
        }
        if let Some(l) = late
            && !late_started
            && t >= late_at
        {
            let c = spawn_node(opts, &home, l)?;
            pids.push(c.id());
            children.0[l] = Some(c);
            late_started = true;
        }
        // A node that exits on its own is an error: record it.
        for (i, slot) in children.0.iter_mut().enumerate() {
            if let Some(c) = slot
                && let Ok(Some(status)) = c.try_wait()
            {
                tracing::error!(node = i, %status, "node exited");
                *slot = None;
            }
        }
    }
    let alive: Vec<bool> = children.0.iter().map(|c| c.is_some()).collect();
    let load = load.map(crate::load::LoadGenerator::stop);
    drop(children);

    let mut violations = Vec::new();
    if let Some(l) = load {
        tracing::info!(?l, "order load");
        if l.admitted == 0 {
            violations.push("no order was admitted by any node".into());
        }
    }
    let mut nodes = Vec::new();
    let mut digests = Vec::new();
    for (i, &is_alive) in alive.iter().enumerate() {
        let s = read_status(&home, i);
        let honest = !(opts.lying_time && i == 0);
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
    if nodes.iter().all(|n| n.fires == 0) {
        violations.push("nothing fired".into());
    }
    Ok(Report {
        engine: "malachite 0.8.2".into(),
        nodes,
        honest_agree,
        violations,
        restarts,
        pids,
        max_height,
        heights_per_sec: max_height as f64 / opts.duration.as_secs_f64().max(0.001),
        home: home.display().to_string(),
    })
}
