//! The `ccron` CLI against four in-process node APIs (the node's real router behind the bounded
//! server) whose requests a small executor loop runs on a real `CronLedger` with a schedule
//! book, one block at a time. One node lies (it publishes a doctored book at the honest
//! height, with a doctored cron table): reads by quorum outvote it, for the book's schedules
//! and the table entries alike; mutations are signed requests whose result is read back by
//! quorum; unreachable and disagreeing nodes are typed errors with their exit codes.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
use ccron::host::{BookConfig, CronLedger, LedgerScheduler, TickPool};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Target, Timing};
use ccron::{CronEntry, CronTable, CronTableRegistry, MemPages, PageRange, Periodic, Tick};
use ccron_cli::{Cli, CliError, Env, run};
use ccron_node::api::{ApiState, lock, serve_with, server_config};
use ccron_node::mempool::{Mempool, MempoolConfig};
use ccron_node::read::NodeReads;
use ccron_node::results::RequestResults;
use ccron_node::types::Validators;
use clap::Parser;
use sha2::{Digest, Sha256};

#[derive(Debug, Default, Clone)]
struct Counter(u64);

impl Application for Counter {
    fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
        b"err unknown".to_vec()
    }
    fn digest(&self) -> Digest32 {
        Sha256::digest(self.0.to_le_bytes()).into()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, s: &[u8]) -> Result<(), AppError> {
        let b = <[u8; 8]>::try_from(s).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        self.0 = u64::from_le_bytes(b);
        Ok(())
    }
}

const SECRET: [u8; 32] = [9; 32];

fn operator() -> ClientId {
    let key = ed25519_dalek::SigningKey::from_bytes(&SECRET);
    ccron_node::request::client_id(&key.verifying_key().to_bytes())
}

/// Component 2's cron table: a periodic entry, a cron entry on `expression` (overlap skip) and
/// a rule of code.
fn table(expression: &str) -> CronTableRegistry<Counter> {
    let mut t = CronTable::with_persistence(2, PageRange::new(0, 8).unwrap(), 8);
    let every = Periodic::every_ms(60_000).unwrap().starting_at(0);
    t.add(CronEntry::<Counter>::periodic(0, every, |ctx| {
        ctx.state.0 += 1
    }))
    .unwrap();
    let rule =
        ccron::schedule::CronRule::new(ccron::cron::CronSchedule::parse(expression).unwrap())
            .starting_after(0);
    t.add(
        CronEntry::scheduled(1, rule, |_| {})
            .with_overlap(ccron::schedule::Overlap::Skip)
            .unwrap(),
    )
    .unwrap();
    t.add(CronEntry::new(2, |_| false, |_| {})).unwrap();
    let mut r = CronTableRegistry::new();
    r.register(t).unwrap();
    r
}

fn ledger(schedules: usize) -> CronLedger<Counter> {
    ledger_with(schedules, "0 9 * * 1-5")
}

fn ledger_with(schedules: usize, expression: &str) -> CronLedger<Counter> {
    let mut h: Handlers<Counter> = Handlers::new();
    assert!(h.register("count", |ctx| ctx.state.0 += 1));
    let cfg = BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    };
    let mut l = CronLedger::new(Counter::default(), table(expression))
        .with_scheduler(LedgerScheduler::new(cfg, h));
    for i in 0..schedules {
        let timing = if i == 1 {
            Timing::Cron {
                expression: "0 9 * * 1-5".into(),
                zone: None,
            }
        } else {
            Timing::Every {
                period_ms: 60_000,
                start_ms: Some(0),
            }
        };
        let s = NewSchedule::new("count", timing).with_key(format!("job-{i}"));
        let payload = ccron::codec::to_blob(&ScheduleRequest::Create(s)).unwrap();
        let ctx = ExecContext {
            seq: 1,
            agreed_time_ms: Some(1_000),
        };
        assert!(l.execute(ctx, operator(), &payload).starts_with(b"ok"));
    }
    let mut pages = MemPages::new(4096, 8);
    l.on_tick(Tick::new(1, 2, Some(61_000)), &mut pages)
        .unwrap();
    l.on_tick(Tick::new(2, 2, Some(61_000)), &mut pages)
        .unwrap();
    l
}

fn api(index: u64) -> ApiState {
    ApiState {
        mempool: Arc::new(Mutex::new(Mempool::new(
            MempoolConfig::default(),
            Default::default(),
        ))),
        outbox: ccron_http::PublishedOutbox::new(index),
        ticks: Arc::new(Mutex::new(TickPool::new(4, [1]))),
        validators: Validators::new(&[[1; 32], [2; 32], [3; 32], [4; 32]]),
        domain: ccron_node::crypto::SigningDomain::chain(b"test-chain").unwrap(),
        ticks_invalid: Arc::new(AtomicU64::new(0)),
        results: Arc::new(Mutex::new(RequestResults::default())),
        reads: NodeReads::new(index),
    }
}

/// Four nodes, node 3 lying; a task executes what their pools hold, one block every 30 ms.
async fn cluster() -> Vec<SocketAddr> {
    let nodes: Vec<ApiState> = (0..4).map(api).collect();
    let mut honest = ledger(3);
    // The liar's book: a schedule nobody created, and job-0 missing; its table's cron entry
    // another expression.
    let mut liar = ledger_with(4, "0 10 * * *");
    let payload =
        ccron::codec::to_blob(&ScheduleRequest::Cancel(Target::Key("job-0".into()))).unwrap();
    let ctx = ExecContext {
        seq: 2,
        agreed_time_ms: Some(61_000),
    };
    assert!(liar.execute(ctx, operator(), &payload).starts_with(b"ok"));
    let publish =
        |nodes: &[ApiState], honest: &CronLedger<Counter>, liar: &CronLedger<Counter>, h| {
            for n in &nodes[..3] {
                n.reads.publish(honest, h, honest.digest());
            }
            nodes[3].reads.publish(liar, h, liar.digest());
        };
    publish(&nodes, &honest, &liar, 2);
    let mut addrs = Vec::new();
    for n in &nodes {
        addrs.push(
            serve_with("127.0.0.1:0".parse().unwrap(), n.clone(), server_config())
                .await
                .unwrap(),
        );
    }
    tokio::spawn(async move {
        let mut height = 2u64;
        let mut done: BTreeSet<[u8; 32]> = BTreeSet::new();
        loop {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let mut block = Vec::new();
            for n in &nodes {
                for r in lock(&n.mempool).select(64, 1 << 20) {
                    if done.insert(r.digest().0) {
                        block.push(r);
                    }
                }
            }
            if block.is_empty() {
                continue;
            }
            height += 1;
            let ctx = ExecContext {
                seq: height,
                agreed_time_ms: Some(61_000 + height as i64),
            };
            let mut executed = Vec::new();
            for r in &block {
                let reply = honest.execute(ctx, r.client(), &r.request.payload);
                executed.push((r.client(), r.request.number));
                for n in &nodes {
                    lock(&n.results).record(r.client(), r.request.number, height, &reply);
                }
            }
            for n in &nodes {
                lock(&n.mempool).after_block(&block, &executed);
            }
            publish(&nodes, &honest, &liar, height);
        }
    });
    addrs
}

fn nodes(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(|a| format!("http://{a}"))
        .collect::<Vec<_>>()
        .join(",")
}

async fn ccron(args: &[&str]) -> Result<String, CliError> {
    let cli = Cli::try_parse_from(std::iter::once("ccron").chain(args.iter().copied()))
        .map_err(|e| CliError::Args(e.to_string()))?;
    run(
        cli,
        Env {
            now_ms: 1_700_000_000_000,
            entropy: [5; 32],
        },
    )
    .await
}

fn key_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ccron-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("operator.key");
    std::fs::write(&p, format!("{}\n", ccron_node::types::hex(&SECRET))).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_outvote_a_liar_and_mutations_are_signed_requests() {
    let addrs = cluster().await;
    let all = nodes(&addrs);

    // List: the honest three agree; the liar's extra schedule and missing job-0 are outvoted.
    let out = ccron(&["schedules", "list", "--nodes", &all])
        .await
        .unwrap();
    assert!(out.starts_with("ID"), "{out}");
    for k in ["job-0", "job-1", "job-2"] {
        assert!(out.contains(k), "{out}");
    }
    assert!(!out.contains("job-3"), "{out}");
    assert!(out.contains("3 of 3 matching"), "{out}");
    let json: serde_json::Value = serde_json::from_str(
        &ccron(&["schedules", "list", "--nodes", &all, "--json"])
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["items"].as_array().unwrap().len(), 3);
    assert_eq!(json["at_height"], 2);

    // The cron table's entries, after the schedules (query format 5); the liar's doctored
    // cron entry is outvoted.
    assert!(out.contains("3 of 3 table entries matching"), "{out}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or("")
            .to_string()
    };
    let periodic = row("entry:2:0 ");
    assert!(
        periodic.contains("table entry")
            && periodic.contains("every 60000ms from 1970-01-01T00:00:00.000Z")
            && periodic.contains("1970-01-01T00:02:00.000Z"),
        "{out}"
    );
    let cron = row("entry:2:1 ");
    assert!(
        cron.contains("cron \"0 9 * * 1-5\" UTC") && cron.contains("skip"),
        "{out}"
    );
    assert!(row("entry:2:2 ").contains("opaque rule (code)"), "{out}");
    let entries = json["entries"]["items"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["kind"], "table entry");
    assert_eq!(entries[0]["fired"], 1);
    // Its replicated overlap counts (query format 7): nothing diverted here.
    assert_eq!(
        (&entries[0]["skipped"], &entries[0]["held"]),
        (&0.into(), &0.into())
    );
    assert_eq!(entries[1]["rule"]["expression"], "0 9 * * 1-5");
    assert_eq!(entries[1]["overlap"], "skip");
    assert_eq!(entries[2]["rule"]["type"], "opaque rule");
    let only = ccron(&[
        "schedules",
        "list",
        "--kind",
        "entry",
        "--limit",
        "2",
        "--nodes",
        &all,
    ])
    .await
    .unwrap();
    assert!(!only.contains("job-0"), "{only}");
    assert!(
        only.contains("2 of 3 table entries matching (more: --entries-from 2:2)"),
        "{only}"
    );
    let rest = ccron(&[
        "schedules",
        "list",
        "--kind",
        "entry",
        "--entries-from",
        "2:2",
        "--nodes",
        &all,
    ])
    .await
    .unwrap();
    assert!(
        rest.contains("entry:2:2 ") && !rest.contains("entry:2:1 "),
        "{rest}"
    );
    // Describe and preview an entry: its rule, its next instants (weekdays at 09:00 UTC).
    let out = ccron(&["schedules", "describe", "entry:2:1", "--nodes", &all])
        .await
        .unwrap();
    assert!(out.contains("  kind      table entry\n"), "{out}");
    assert!(
        out.contains("  rule      cron \"0 9 * * 1-5\" UTC after"),
        "{out}"
    );
    assert!(out.contains("  overlap   skip\n"), "{out}");
    assert!(out.contains("  1970-01-01T09:00:00.000Z"), "{out}");
    let p: serde_json::Value = serde_json::from_str(
        &ccron(&[
            "schedules",
            "preview",
            "entry:2:1",
            "--count",
            "3",
            "--nodes",
            &all,
            "--json",
        ])
        .await
        .unwrap(),
    )
    .unwrap();
    let days: Vec<&str> = p["upcoming"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["utc"].as_str().unwrap())
        .collect();
    // 1970-01-01 is a Thursday: Thursday, Friday, then Monday.
    assert_eq!(
        days,
        [
            "1970-01-01T09:00:00.000Z",
            "1970-01-02T09:00:00.000Z",
            "1970-01-05T09:00:00.000Z"
        ]
    );
    let v: serde_json::Value = serde_json::from_str(
        &ccron(&[
            "schedules",
            "describe",
            "entry:2:2",
            "--nodes",
            &all,
            "--json",
        ])
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(v["entry"]["rule"]["type"], "opaque rule");
    assert_eq!(v["upcoming_computable"], false);
    let e = ccron(&["schedules", "describe", "entry:2:9", "--nodes", &all])
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 5, "{e}");
    let e = ccron(&["schedules", "describe", "entry:x", "--nodes", &all])
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");

    // Describe, preview, history.
    let out = ccron(&["schedules", "describe", "key:job-1", "--nodes", &all])
        .await
        .unwrap();
    assert!(out.contains("cron \"0 9 * * 1-5\" UTC"), "{out}");
    assert!(out.contains("upcoming:"), "{out}");
    let p: serde_json::Value = serde_json::from_str(
        &ccron(&[
            "schedules",
            "preview",
            "job-1",
            "--count",
            "4",
            "--nodes",
            &all,
            "--json",
        ])
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(p["upcoming"].as_array().unwrap().len(), 4);
    assert!(
        p["upcoming"][0]["utc"]
            .as_str()
            .unwrap()
            .ends_with("09:00:00.000Z")
    );
    let h = ccron(&["schedules", "history", "1", "--nodes", &all])
        .await
        .unwrap();
    assert!(h.contains("OUTCOME") && h.contains(" ok"), "{h}");
    let e = ccron(&["schedules", "describe", "key:nope", "--nodes", &all])
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 5, "{e}");

    // Pause job-2 with the operator's key; read it back by quorum.
    let key = key_file();
    let key = key.to_str().unwrap();
    let out = ccron(&[
        "schedules",
        "pause",
        "key:job-2",
        "--key-file",
        key,
        "--number",
        "1",
        "--nodes",
        &all,
    ])
    .await
    .unwrap();
    assert!(out.starts_with("ok"), "{out}");
    let mut paused = String::new();
    for _ in 0..50 {
        paused = ccron(&["schedules", "list", "--paused", "true", "--nodes", &all])
            .await
            .unwrap();
        if paused.contains("job-2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        paused.contains("job-2") && paused.contains("paused"),
        "{paused}"
    );
    // Backfill job-0's past two minutes under its own overlap policy (`BackfillWith`): the
    // describe answer (query format 4) shows the pending backfill's policy.
    let out = ccron(&[
        "schedules",
        "backfill",
        "key:job-0",
        "--from",
        "0",
        "--to",
        "1970-01-01T00:01:00Z",
        "--overlap",
        "buffer-one",
        "--key-file",
        key,
        "--number",
        "3",
        "--nodes",
        &all,
    ])
    .await
    .unwrap();
    assert!(out.starts_with("ok"), "{out}");
    let mut described = String::new();
    for _ in 0..50 {
        described = ccron(&["schedules", "describe", "key:job-0", "--nodes", &all])
            .await
            .unwrap();
        if described.contains("backfill") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("  backfill  2 runs left") && l.ends_with("overlap buffer-one")),
        "{described}"
    );
    assert!(described.contains("  calendar  -\n"), "{described}");
    let v: serde_json::Value = serde_json::from_str(
        &ccron(&[
            "schedules",
            "describe",
            "key:job-0",
            "--nodes",
            &all,
            "--json",
        ])
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(v["policies"]["backfill_overlap"], "buffer-one");
    assert_eq!(v["policies"]["overlap"], "allow-all");
    // An unknown policy is a usage error.
    let e = ccron(&[
        "schedules",
        "backfill",
        "1",
        "--from",
        "0",
        "--to",
        "1",
        "--overlap",
        "sometimes",
        "--key-file",
        key,
        "--nodes",
        &all,
    ])
    .await
    .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");

    // The ledger's refusal is a typed error (exit 7).
    let e = ccron(&[
        "schedules",
        "cancel",
        "999",
        "--key-file",
        key,
        "--number",
        "2",
        "--nodes",
        &all,
    ])
    .await
    .unwrap_err();
    assert!(
        matches!(e, CliError::Refused(ref m) if m.contains("err")),
        "{e}"
    );
    assert_eq!(e.exit_code(), 7);

    // Cluster status: book and outbox by quorum, tick pools per node.
    let s = ccron(&["cluster", "status", "--nodes", &all])
        .await
        .unwrap();
    assert!(s.contains("3 schedules (1 paused"), "{s}");
    // The book's replicated refusals (query format 6): none refused by the book here.
    assert!(
        s.contains("refused ever: slot full 0, calendar 0, backfill 0"),
        "{s}"
    );
    assert!(s.contains("tick pools (node-local)"), "{s}");

    // Disagreement: an honest node and the liar, quorum 2.
    let two = nodes(&[addrs[0], addrs[3]]);
    let e = ccron(&["schedules", "list", "--nodes", &two, "--quorum", "2"])
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 4, "{e}");
    assert!(e.to_string().contains("no 2 nodes agree"), "{e}");

    // Unreachable: nothing listens.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let e = ccron(&[
        "schedules",
        "list",
        "--nodes",
        &format!("{dead},{dead},{dead},{}", nodes(&addrs[..1])),
        "--timeout-ms",
        "300",
    ])
    .await
    .unwrap_err();
    assert_eq!(e.exit_code(), 3, "{e}");
    // A bad key file.
    let e = ccron(&[
        "schedules",
        "pause",
        "1",
        "--key-file",
        "/nonexistent",
        "--nodes",
        &all,
    ])
    .await
    .unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
}

#[tokio::test]
async fn keys_are_written_once_and_shown() {
    let dir = std::env::temp_dir().join(format!("ccron-cli-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("k");
    let _ = std::fs::remove_file(&p);
    let p = p.to_str().unwrap().to_string();
    let out = ccron(&["key", "new", "--out", &p]).await.unwrap();
    assert!(out.contains("client id"), "{out}");
    assert_eq!(
        ccron(&["key", "show", "--key-file", &p]).await.unwrap(),
        out
    );
    // Never overwritten.
    assert_eq!(
        ccron(&["key", "new", "--out", &p])
            .await
            .unwrap_err()
            .exit_code(),
        2
    );
}
