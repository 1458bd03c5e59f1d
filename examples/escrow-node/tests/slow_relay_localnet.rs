//! `ccron relay` against the escrow ledger as real processes: the escrow binary's `localnet`
//! (4 Malachite validators on loopback, one SIGKILLed and restarted mid-run, a load client
//! placing holds and confirmations) and, while it runs, the relay in its own process (this
//! test binary re-run as `ccron relay`: `ccron_cli::run`, the code behind the `ccron` binary)
//! against the nodes' HTTP APIs (found the way any client finds them: each node's
//! `node-<i>/http.addr` under the localnet's home), delivering to two Python workers written
//! from docs/outbox.md (`ccron-http/workers/python`, one SQLite store), worker 0 SIGKILLed
//! mid-run. The workers' answer keys and the relay's client id are the ledger's policy
//! (`escrow_node::demo_policy`, replicated configuration).
//!
//! Asserted: the first [`RECORDS`] outbox records (escrow-refunded and escrow-released),
//! read back by quorum, each have their result applied on f+1 nodes; each effect was performed
//! once at the workers; a second relay run on the same directory reports the progress and the
//! nodes trim their outboxes past it; the localnet's honest nodes agree. On failure it prints
//! the home directory (kept), the relay's output, and the command lines to re-run.
//!
//! Skips (with a message) only when `python3` is not installed. About 60 s on 2 cores.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ccron::outbox::Jobs as _;
use ccron::outbox::WorkerSigner;
use escrow_node::{DEMO_CHAIN, DEMO_RELAY_SECRET, DEMO_WORKER_SEEDS, REFUNDED, RELEASED};

/// Records the relay must deliver, and whose results the nodes must apply.
const RECORDS: u64 = 16;
const NODES: usize = 4;
/// The environment variable that makes this test binary the relay process.
const RELAY_CHILD: &str = "ESCROW_RELAY_CHILD_ARGS";
const TEST: &str = "the_relay_delivers_the_escrow_outbox_of_a_four_process_localnet";
const KEY_ID: &str = "ccron-relay";
const RELAY_SECRET_TO_WORKERS: [u8; 32] = [0x33; 32];

// The test is a process boundary: it reads the real clock.
#[allow(clippy::disallowed_methods)]
fn wall() -> Instant {
    Instant::now()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ccron-http/workers/python")
}

/// In the relay child: runs `ccron` with the arguments in [`RELAY_CHILD`] (JSON), prints its
/// output on one `RELAY-OUT` line and exits with its exit code.
fn relay_child(args: &str) -> ! {
    use clap::Parser as _;
    let args: Vec<String> = serde_json::from_str(args).expect("relay arguments");
    let cli = ccron_cli::Cli::try_parse_from(std::iter::once("ccron".to_string()).chain(args))
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        });
    #[allow(clippy::disallowed_methods)]
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let env = ccron_cli::Env {
        now_ms,
        entropy: [0; 32],
    };
    match rt.block_on(ccron_cli::run(cli, env)) {
        Ok(out) => {
            println!("RELAY-OUT {}", out.trim());
            std::process::exit(0)
        }
        Err(e) => {
            println!("RELAY-ERR {} {e}", e.exit_code());
            std::process::exit(e.exit_code())
        }
    }
}

/// Runs the relay as a child process; returns (exit success, its `RELAY-` line, all output).
fn run_relay(args: &[String]) -> (bool, String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(RELAY_CHILD, serde_json::to_string(args).unwrap())
        .output()
        .expect("the relay process runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness prints "test NAME ... " before the test's own output, on the same line.
    let line = text
        .lines()
        .find_map(|l| l.find("RELAY-").map(|at| l[at..].to_string()))
        .unwrap_or_default();
    (out.status.success(), line, text)
}

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start_worker(i: usize, db: &Path) -> (Child, String) {
    let mut child = Command::new("python3")
        .current_dir(python_dir())
        .args(["worker.py", "--listen", "127.0.0.1:0"])
        .arg("--db")
        .arg(db)
        .arg("--chain-hex")
        .arg(hex(DEMO_CHAIN.as_bytes()))
        .arg("--sender")
        .arg(format!("{KEY_ID}:{}", hex(&RELAY_SECRET_TO_WORKERS)))
        .arg("--seed-hex")
        .arg(hex(&DEMO_WORKER_SEEDS[i]))
        .args(["--handler", RELEASED, "--handler", REFUNDED])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 worker.py");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parts.first(), Some(&"LISTENING"), "{line:?}");
    assert_eq!(
        parts[2],
        WorkerSigner::from_seed(DEMO_WORKER_SEEDS[i])
            .public()
            .to_string()
    );
    (child, format!("http://127.0.0.1:{}", parts[1]))
}

/// The effects in the workers' store: occurrence id (lowercase) -> times performed.
fn effects(db: &Path) -> BTreeMap<String, u32> {
    let dump = Command::new("python3")
        .current_dir(python_dir())
        .args(["worker.py", "--dump-effects", "--db"])
        .arg(db)
        .output()
        .unwrap();
    let mut out = BTreeMap::new();
    for line in String::from_utf8_lossy(&dump.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        *out.entry(v["id"].as_str().unwrap().to_lowercase())
            .or_default() += 1;
    }
    out
}

/// What f+1 nodes return identically from their outbox endpoints: for each index from 1, the
/// record's id and handler and how many nodes show its result applied; and the first index
/// each answering node still holds.
/// By index: the record's id, its handler, and how many nodes show its result applied.
type Believed = BTreeMap<u64, (String, String, usize)>;

fn read_outbox(nodes: &[String]) -> (Believed, Vec<u64>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cfg = ccron_http::ReadClientConfig::new(nodes.to_vec(), (NODES - 1) / 3 + 1);
        let mut reader = ccron_http::QuorumReader::new(cfg).unwrap();
        reader.refresh(1).await;
        let mut out = BTreeMap::new();
        for i in 1..=reader.jobs().head() {
            if let Some(r) = reader.jobs().at_index(i) {
                let applied = reader.results_applied(i);
                out.insert(i, (r.id.to_string(), r.handler.clone(), applied));
            }
        }
        let firsts = reader
            .endpoints()
            .iter()
            .filter_map(|e| e.page().map(|p| p.first_index))
            .collect();
        (out, firsts)
    })
}

#[test]
fn the_relay_delivers_the_escrow_outbox_of_a_four_process_localnet() {
    if let Ok(args) = std::env::var(RELAY_CHILD) {
        relay_child(&args);
    }
    if !Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED: python3 is not installed; this test's workers need it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("escrow-relay-localnet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let home = dir.join("home");
    let localnet_cmd = format!(
        "{} localnet --nodes {NODES} --duration 50s --home {} --json {}",
        env!("CARGO_BIN_EXE_escrow-node"),
        home.display(),
        dir.join("report.json").display()
    );
    let mut procs = Procs(Vec::new());
    procs.0.push(
        Command::new(env!("CARGO_BIN_EXE_escrow-node"))
            .args(["localnet", "--nodes", "4", "--duration", "50s", "--home"])
            .arg(&home)
            .arg("--json")
            .arg(dir.join("report.json"))
            .stdout(Stdio::from(
                std::fs::File::create(dir.join("localnet.out")).unwrap(),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("localnet.err")).unwrap(),
            ))
            .spawn()
            .expect("the localnet runs"),
    );
    let mut relay_outputs: Vec<String> = Vec::new();
    let diag = |what: &str, relay_outputs: &[String]| {
        format!(
            "{what}\nhome (kept): {}\nlocalnet: {localnet_cmd}\nrelay outputs:\n{}\nre-run: \
             cargo test -p escrow-node --test slow_relay_localnet -- --nocapture",
            home.display(),
            relay_outputs.join("\n---\n")
        )
    };

    // The nodes' API addresses, as any client finds them: each node writes its bound address.
    let start = wall();
    let nodes: Vec<String> = loop {
        let addrs: Vec<String> = (0..NODES)
            .filter_map(|i| std::fs::read_to_string(home.join(format!("node-{i}/http.addr"))).ok())
            .map(|a| format!("http://{}", a.trim()))
            .collect();
        if addrs.len() == NODES {
            break addrs;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            diag("the nodes did not start", &relay_outputs)
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    // Two workers of one service (one SQLite store), registered in the ledger's policy.
    let db = dir.join("effects.sqlite");
    let (w0, url0) = start_worker(0, &db);
    let (w1, url1) = start_worker(1, &db);
    let mut w0 = Some(w0);
    procs.0.push(w1);
    let key = dir.join("relay.key");
    std::fs::write(&key, hex(&DEMO_RELAY_SECRET)).unwrap();
    let workers = dir.join("workers.txt");
    std::fs::write(
        &workers,
        DEMO_WORKER_SEEDS
            .iter()
            .zip([&url0, &url1])
            .map(|(seed, url)| {
                format!(
                    "{url} {} {}\n",
                    hex(&RELAY_SECRET_TO_WORKERS),
                    WorkerSigner::from_seed(*seed).public()
                )
            })
            .collect::<String>(),
    )
    .unwrap();
    let relay_args = |keep: bool| -> Vec<String> {
        let mut a: Vec<String> = [
            "relay",
            "--nodes",
            &nodes.join(","),
            "--key",
            key.to_str().unwrap(),
            "--workers",
            workers.to_str().unwrap(),
            "--chain-id",
            DEMO_CHAIN,
            "--key-id",
            KEY_ID,
            "--dir",
            dir.join("relay").to_str().unwrap(),
            "--resend-after-ms",
            "1000",
            "--until-progress",
            &RECORDS.to_string(),
            "--max-run-ms",
            "30000",
            "--json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if keep {
            a.push("--keep-records".into());
        }
        a
    };

    // Run 1 keeps the records (their results are read back below); worker 0 is SIGKILLed
    // once a third of the records' effects are performed.
    let killer = {
        let db = db.clone();
        let mut w0 = w0.take().unwrap();
        std::thread::spawn(move || {
            let start = wall();
            let mut at = None;
            while start.elapsed() < Duration::from_secs(40) {
                let n = effects(&db).len() as u64;
                if n >= RECORDS / 3 {
                    at = Some(n);
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = w0.kill(); // SIGKILL
            let _ = w0.wait();
            at
        })
    };
    let (ok, line, text) = run_relay(&relay_args(true));
    relay_outputs.push(text);
    let killed_at = killer.join().unwrap();
    assert!(ok, "{}", diag("relay run 1 failed", &relay_outputs));
    let stats: serde_json::Value = serde_json::from_str(line.trim_start_matches("RELAY-OUT "))
        .unwrap_or_else(|e| panic!("{}", diag(&format!("{e}: {line}"), &relay_outputs)));
    assert!(stats["progress"].as_u64().unwrap() >= RECORDS, "{stats}");
    assert_eq!(stats["pending_results"], 0, "{stats}");
    assert_eq!(stats["requests"]["executed_err"], 0, "{stats}");
    assert!(
        killed_at.is_some_and(|n| n < RECORDS),
        "{}",
        diag(
            &format!("worker 0 was not killed mid-run: {killed_at:?}"),
            &relay_outputs
        )
    );

    // By quorum: records 1..=RECORDS, each with its result applied on f+1 nodes.
    let (outbox, _) = read_outbox(&nodes);
    let done = effects(&db);
    for i in 1..=RECORDS {
        let Some((id, handler, applied)) = outbox.get(&i) else {
            panic!(
                "{}",
                diag(
                    &format!("record {i} not believed: {outbox:?}"),
                    &relay_outputs
                )
            );
        };
        assert!(handler == RELEASED || handler == REFUNDED, "{handler}");
        assert!(
            *applied > (NODES - 1) / 3,
            "{}",
            diag(
                &format!("record {i}: result on {applied} nodes"),
                &relay_outputs
            )
        );
        // Each effect performed once, by one of the workers.
        assert_eq!(
            done.get(id),
            Some(&1),
            "{}",
            diag(&format!("record {i} ({id}): {done:?}"), &relay_outputs)
        );
    }
    assert!(done.values().all(|n| *n == 1), "{done:?}");
    let kinds: std::collections::BTreeSet<&str> =
        outbox.values().map(|(_, h, _)| h.as_str()).collect();
    assert!(kinds.contains(REFUNDED), "{kinds:?}");

    // Run 2 on the same directory reports the progress: the nodes trim past it, and nothing
    // is performed again.
    let (ok, line, text) = run_relay(&relay_args(false));
    relay_outputs.push(text);
    assert!(ok, "{}", diag("relay run 2 failed", &relay_outputs));
    let stats: serde_json::Value = serde_json::from_str(line.trim_start_matches("RELAY-OUT "))
        .unwrap_or_else(|e| panic!("{}", diag(&format!("{e}: {line}"), &relay_outputs)));
    assert!(
        stats["reported_progress"].as_u64().unwrap() >= RECORDS,
        "{stats}"
    );
    let mut trimmed = false;
    for _ in 0..50 {
        let (_, firsts) = read_outbox(&nodes);
        if firsts.iter().filter(|f| **f > RECORDS).count() > (NODES - 1) / 3 {
            trimmed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        trimmed,
        "{}",
        diag("the outbox was not trimmed", &relay_outputs)
    );
    assert!(effects(&db).values().all(|n| *n == 1));

    // The localnet ends on its own: its honest nodes agree.
    let mut localnet = procs.0.remove(0);
    let status = localnet.wait().unwrap();
    drop(procs);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap_or_default())
            .unwrap_or_default();
    assert!(
        status.success() && report["honest_agree"] == true,
        "{}",
        diag(&format!("localnet: {status} {report:#}"), &relay_outputs)
    );
    println!("relay runs:\n{}", relay_outputs.join("\n---\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
