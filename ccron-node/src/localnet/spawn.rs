//! Starting a localnet's processes: homes (keys, genesis), spawning a node, the children and
//! their reaping, clock offsets for clock faults, wiping a node's home.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::core::{node_dir, now_ms};
use crate::records::{Genesis, GenesisValidator};
use crate::supervise::{Decision, Supervisor};
use crate::types::hex;

use super::logsink::{NODE_LOG, NODE_LOG_OLD};
use super::ports::{PORT_FLOOR, Reserved, ephemeral_floor, port_draws, reserve_port};
use super::{LedgerInit, LocalnetOptions, localnet_secret};

pub(super) struct Children(pub(super) Vec<Option<Child>>);

impl Drop for Children {
    /// SIGTERM to every child (a node writes a snapshot of its last height and exits), up to
    /// 5 s for all of them to exit, then SIGKILL to any left.
    // The localnet is the process boundary: it reads the real clock for the deadline.
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in self.0.iter_mut().flatten() {
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes keys and genesis for `n` nodes of `ledger`, with free loopback ports drawn below the
/// kernel's ephemeral range ([`super::ports`]).
///
/// # Errors
/// I/O errors; no free port.
pub fn init_home(
    home: &Path,
    n: usize,
    seed: u64,
    ledger: &LedgerInit,
) -> std::io::Result<Genesis> {
    init_home_reserved(home, n, seed, ledger).map(|(g, _)| g)
}

/// [`init_home`], returning the listeners holding the genesis's ports: the caller drops them
/// right before spawning the nodes.
pub(super) fn init_home_reserved(
    home: &Path,
    n: usize,
    seed: u64,
    ledger: &LedgerInit,
) -> std::io::Result<(Genesis, Reserved)> {
    std::fs::create_dir_all(home)?;
    let mut validators = Vec::new();
    let mut listeners = Vec::new();
    let mut draw = port_draws();
    let ceiling = ephemeral_floor();
    for i in 0..n {
        let secret = localnet_secret(seed, i);
        let public = crate::crypto::Signer::new(secret).public_key();
        let l = reserve_port(&mut draw, PORT_FLOOR, ceiling)?;
        let port = l.local_addr()?.port();
        listeners.push(l);
        let h = reserve_port(&mut draw, PORT_FLOOR, ceiling)?;
        let http_port = h.local_addr()?.port();
        listeners.push(h);
        let dir = node_dir(home, i);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("secret.key"), hex(&secret))?;
        validators.push(GenesisValidator {
            public_key: hex(&public),
            port,
            http_port: Some(http_port),
        });
    }
    let genesis_time_ms = now_ms();
    let genesis = Genesis {
        genesis_time_ms,
        validators,
        ledger: ledger.name.clone(),
        tick_periods: ledger.tick_periods.clone(),
        pages: ledger.pages,
        setup_digest: ledger.setup_digest.clone(),
        // Signing domain 2: every signature names this chain (two homes of one seed share keys).
        chain_id: format!("localnet-{seed}-{genesis_time_ms}-{}", chain_nonce()),
        signing_domain: Some(2),
    };
    std::fs::write(
        home.join("genesis.json"),
        serde_json::to_vec_pretty(&genesis).map_err(std::io::Error::other)?,
    )?;
    Ok((genesis, Reserved { _held: listeners }))
}

/// Eight hex digits telling apart two homes initialised in one millisecond (their chain ids):
/// the clock, the process and a count within it.
pub(super) fn chain_nonce() -> String {
    use sha2::Digest as _;
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let h = sha2::Sha256::new()
        .chain_update(now_ms().to_le_bytes())
        .chain_update(std::process::id().to_le_bytes())
        .chain_update(
            COUNT
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .to_le_bytes(),
        )
        .finalize();
    hex(&h[..4])
}

/// Starts node `i` on `bin` (the binary the supervisor runs it on: [`Supervisor::binary`]).
pub(super) fn spawn_node(
    opts: &LocalnetOptions,
    home: &Path,
    i: usize,
    byzantine_from_ms: i64,
    bin: &Path,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(bin);
    cmd.arg("node")
        .arg("--home")
        .arg(home)
        .arg("--index")
        .arg(i.to_string());
    if opts.lying_time && i == 0 {
        cmd.arg("--lying-time");
    }
    if opts.omit_ticks && i == 0 {
        cmd.arg("--omit-ticks");
    }
    if let Some((kind, node)) = opts.byzantine
        && node == i
    {
        cmd.arg("--byzantine")
            .arg(kind.name())
            .arg("--byzantine-from-ms")
            .arg(byzantine_from_ms.to_string());
    }
    cmd.arg("--snapshot-every")
        .arg(LOCALNET_SNAPSHOT_EVERY.to_string());
    if let Some(retain) = opts.retain_blocks {
        cmd.arg("--retain-blocks").arg(retain.to_string());
    }
    if opts.net_faults.is_some() || opts.byzantine_subset.is_some() {
        cmd.arg("--fault-peers-file")
            .arg(node_dir(home, i).join(FAULT_PEERS_FILE));
    }
    if opts.clock_faults.is_some() {
        cmd.arg("--fault-clock-file")
            .arg(node_dir(home, i).join(FAULT_CLOCK_FILE));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    // Its log, bounded ([`super::logsink`]); the copy ends when the process exits.
    if let Some(stderr) = child.stderr.take()
        && let Err(e) = super::logsink::start(
            stderr,
            node_dir(home, i).join(NODE_LOG),
            format!("node-{i}-log"),
        )
    {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    Ok(child)
}

/// The file in a node's directory naming the proxies it dials (`node --fault-peers-file`).
pub const FAULT_PEERS_FILE: &str = "fault-peers";

/// The file in a node's directory holding its clock offset (`node --fault-clock-file`).
pub const FAULT_CLOCK_FILE: &str = "fault.clock";

/// Writes node `i`'s clock offset (a temporary file renamed over the old one).
pub(super) fn write_clock_offset(home: &Path, i: usize, offset_ms: i64) -> std::io::Result<()> {
    let dir = node_dir(home, i);
    let tmp = dir.join("fault.clock.tmp");
    std::fs::write(&tmp, offset_ms.to_string())?;
    std::fs::rename(tmp, dir.join(FAULT_CLOCK_FILE))
}

/// Removes everything in node `i`'s directory but its key (`secret.key`), its signing state
/// kept beside it (`signing.state`, [`crate::signguard`]) and its logs (`node.log`, `node.log.1`): a node whose
/// state was lost, restarted with its identity and what its key signed.
///
/// # Errors
/// I/O errors listing or removing.
pub fn wipe_node_dir(home: &Path, i: usize) -> std::io::Result<()> {
    for entry in std::fs::read_dir(node_dir(home, i))? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if matches!(
            name.as_deref(),
            Some("secret.key" | crate::signguard::SIGNING_STATE_FILE | NODE_LOG | NODE_LOG_OLD)
        ) {
            continue;
        }
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    tracing::info!(node = i, "node home wiped (key kept)");
    Ok(())
}

/// Heights between two snapshots of a localnet node: short runs still restart their killed
/// node from a snapshot (the node's own default is
/// [`DEFAULT_SNAPSHOT_EVERY`](crate::snapshot::DEFAULT_SNAPSHOT_EVERY)).
pub const LOCALNET_SNAPSHOT_EVERY: u64 = 25;

/// Reaps the nodes that exited: one stopped for an upgrade is restarted where the supervisor
/// says ([`Supervisor::on_exit`]); any other exit is recorded (an error event) and the node
/// stays down.
pub(super) fn supervise_exits(
    opts: &LocalnetOptions,
    home: &Path,
    children: &mut Children,
    pids: &mut Vec<u32>,
    supervisor: &mut Supervisor,
    byzantine_from_ms: i64,
) -> std::io::Result<()> {
    for i in 0..children.0.len() {
        let Some(c) = &mut children.0[i] else {
            continue;
        };
        let Ok(Some(status)) = c.try_wait() else {
            continue;
        };
        children.0[i] = None;
        match supervisor.on_exit(i, status.code()) {
            Decision::Restart { binary, reason } => {
                tracing::info!(node = i, %status, reason = reason.name(), "node restarted by the supervisor");
                let c = spawn_node(opts, home, i, byzantine_from_ms, &binary)?;
                pids.push(c.id());
                children.0[i] = Some(c);
            }
            Decision::NotMine | Decision::Refuse(_) => {
                tracing::error!(node = i, %status, "node exited");
            }
        }
    }
    Ok(())
}
