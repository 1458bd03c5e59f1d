//! Outbox end to end over loopback: at-least-once delivery plus worker-side dedupe = effectively
//! once, across a consumer crash.
//!
//! 1. A replicated-state stand-in fires a few cron entries and, as actions would, appends one
//!    [`OutboxRecord`] per occurrence (deterministic [`OccurrenceId`]) to an [`Outbox`]. There are
//!    four replicas (f = 1); one is Byzantine and serves altered payloads plus invented records.
//!    The consumer reads through [`QuorumJobs`] with quorum f+1, so it only sees what a correct
//!    replica vouches for.
//! 2. A worker listens on 127.0.0.1 (port 0). It deduplicates by occurrence id with a
//!    [`SeenSet`], performs each effect (counts it), and acknowledges; a seeded share of its
//!    acknowledgements is lost, and one handler always fails (its records end as dead letters).
//! 3. The consumer (a [`PersistentConsumer`] with file-backed progress and dead letters) delivers
//!    records over TCP, and crashes midway: it is dropped without saving anything, while the
//!    worker may have performed records whose acknowledgements never arrived.
//! 4. A new consumer resumes from the persisted progress and finishes.
//!
//! The run checks that every record was performed exactly once at the worker (with the honest
//! payload) or dead-lettered, that nothing the Byzantine replica invented was performed,
//! prints a summary, and exits non-zero if that fails. Everything is bounded: it stops by itself
//! within seconds (a 30 s guard turns a hang into a failure).
//!
//! Wire protocol (one line each): `DELIVER <index> <attempt> <id> <handler> <payload-hex>` and
//! `ACK <index> <attempt> DONE` / `ACK <index> <attempt> FAIL <reason>`.
//!
//! Run: `cargo run --example outbox_worker -- --records 300 --ack-loss-permille 250`.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccron::outbox::{
    AckOutcome, Backoff, ConsumerConfig, FileDeadLetters, FileProgressStore, Jobs, OccurrenceId,
    Outbox, OutboxLimits, OutboxRecord, PersistentConsumer, QuorumJobs, SeenSet,
};
use clap::Parser;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

type BoxError = Box<dyn Error + Send + Sync>;

/// Handler whose effects always fail at the worker (its records become dead letters).
const BROKEN_HANDLER: &str = "broken-webhook";

#[derive(Parser, Debug)]
#[command(about = "Outbox delivery over loopback with a consumer crash and restart")]
struct Args {
    /// Number of occurrence records the replicated state produces.
    #[arg(long, default_value_t = 200)]
    records: u64,
    /// The first consumer crashes after finishing this many records (default: a third).
    #[arg(long)]
    crash_after: Option<u64>,
    /// Share of worker acknowledgements lost, in thousandths.
    #[arg(long, default_value_t = 200)]
    ack_loss_permille: u64,
    /// Seed of the worker's (deterministic) acknowledgement losses.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// What the worker did, shared between its connection tasks.
struct WorkerState {
    seen: SeenSet,
    /// Effects performed per occurrence id (the invariant: at most one).
    effects: BTreeMap<OccurrenceId, u32>,
    /// The payload each effect was performed with (hex, as received).
    payloads: BTreeMap<OccurrenceId, String>,
    deliveries: u64,
    duplicates: u64,
    acks_lost: u64,
    ack_loss_permille: u64,
    seed: u64,
}

impl WorkerState {
    /// Handles one delivery line; returns the acknowledgement to send, if it is not "lost".
    fn handle(&mut self, line: &str) -> Option<String> {
        let mut parts = line.split(' ');
        let (Some("DELIVER"), Some(index), Some(attempt), Some(id), Some(handler), Some(payload)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            tracing::warn!(line, "worker: malformed delivery ignored");
            return None;
        };
        let (Ok(index), Ok(attempt), Ok(id)) = (
            index.parse::<u64>(),
            attempt.parse::<u32>(),
            id.parse::<OccurrenceId>(),
        ) else {
            tracing::warn!(line, "worker: malformed delivery ignored");
            return None;
        };
        self.deliveries += 1;
        let reply = if handler == BROKEN_HANDLER {
            format!("ACK {index} {attempt} FAIL endpoint-unreachable")
        } else {
            // Dedupe by occurrence id: check, perform, remember.
            if self.seen.contains(&id) {
                self.duplicates += 1;
            } else {
                *self.effects.entry(id).or_default() += 1;
                self.payloads.insert(id, payload.to_string());
                self.seen.insert(id);
            }
            format!("ACK {index} {attempt} DONE")
        };
        // Deterministic loss: a function of the seed, the id and the attempt.
        if id.mix(self.seed ^ u64::from(attempt)) % 1000 < self.ack_loss_permille {
            self.acks_lost += 1;
            return None;
        }
        Some(reply)
    }
}

/// Serves deliveries on every accepted connection until the listener task is aborted.
async fn serve(listener: TcpListener, state: Arc<Mutex<WorkerState>>, open: Arc<AtomicUsize>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        let open = Arc::clone(&open);
        open.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            let mut peer_gone = false;
            // Ends at EOF: a crashed consumer's connection is still drained, so records it sent
            // are performed even though their acknowledgements go nowhere.
            while let Ok(Some(line)) = lines.next_line().await {
                let reply = match state.lock() {
                    Ok(mut s) => s.handle(&line),
                    Err(_) => None,
                };
                if let Some(reply) = reply
                    && !peer_gone
                    && write
                        .write_all(format!("{reply}\n").as_bytes())
                        .await
                        .is_err()
                {
                    peer_gone = true;
                }
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// A stand-in for the replicated state: cron entries firing on ticks, each occurrence appending
/// one record exactly as an action would (same ids on every replica).
fn fill_outbox(records: u64, byzantine: bool) -> Result<Outbox, BoxError> {
    let mut outbox = Outbox::new(OutboxLimits::default());
    // (entry, period in ticks, handler)
    let entries = [
        (1u64, 1u64, "send-invoice"),
        (2, 2, "refresh-rates"),
        (3, 3, "audit-export"),
        (4, 37, BROKEN_HANDLER),
    ];
    let mut occurrences: BTreeMap<u64, u64> = BTreeMap::new();
    let mut seq = 0u64;
    while (outbox.head()) < records {
        seq += 1;
        for &(entry, period, handler) in &entries {
            if !seq.is_multiple_of(period) || outbox.head() >= records {
                continue;
            }
            let occurrence = occurrences.entry(entry).or_default();
            let id = OccurrenceId::new(1, entry, *occurrence);
            *occurrence += 1;
            let payload = if byzantine {
                format!("{{\"seq\":{seq},\"entry\":{entry},\"pay_to\":\"mallory\"}}")
            } else {
                format!("{{\"seq\":{seq},\"entry\":{entry}}}")
            };
            outbox.append(OutboxRecord::new(id, handler, payload.into_bytes()))?;
        }
    }
    if byzantine {
        // Records no correct replica has: the quorum must never let them through.
        for k in 0..10 {
            let id = OccurrenceId::new(1, 99, k);
            outbox.append(OutboxRecord::new(id, "send-invoice", b"invented".to_vec()))?;
        }
    }
    Ok(outbox)
}

fn config() -> ConsumerConfig {
    ConsumerConfig {
        max_processing: 8,
        max_search_ahead: 32,
        max_attempts: 4,
        ack_timeout_ms: 100,
        backoff: Backoff {
            base_ms: 10,
            cap_ms: 200,
            jitter_permille: 250,
        },
    }
}

/// How one consumer incarnation ended.
#[derive(Debug, PartialEq, Eq)]
enum RunEnd {
    /// Dropped on purpose after finishing this many records, without saving anything more.
    Crashed(u64),
    /// Persisted progress reached the outbox head.
    Finished,
}

fn parse_ack(line: &str) -> Option<(u64, u32, AckOutcome)> {
    let mut parts = line.splitn(5, ' ');
    let (Some("ACK"), Some(index), Some(attempt), Some(verdict)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let outcome = match verdict {
        "DONE" => AckOutcome::Done,
        "FAIL" => AckOutcome::Failed {
            reason: parts.next().unwrap_or("unspecified").to_string(),
        },
        _ => return None,
    };
    Some((index.parse().ok()?, attempt.parse().ok()?, outcome))
}

/// Runs one consumer incarnation against the worker at `addr`.
async fn run_consumer(
    addr: SocketAddr,
    outbox: &impl Jobs,
    dir: &Path,
    started: Instant,
    crash_after: Option<u64>,
) -> Result<RunEnd, BoxError> {
    let mut pc = PersistentConsumer::open(
        config(),
        FileProgressStore::new(dir.join("progress")),
        FileDeadLetters::new(dir.join("dead-letters")),
    )?;
    println!(
        "consumer: resumed at persisted progress {}",
        pc.persisted_progress()
    );
    let stream = TcpStream::connect(addr).await?;
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).await.is_err() {
                break;
            }
        }
    });
    let resumed_at = pc.persisted_progress();
    let end = loop {
        if started.elapsed() > Duration::from_secs(30) {
            reader.abort();
            return Err("consumer did not finish within 30 s".into());
        }
        let now_ms = i64::try_from(started.elapsed().as_millis())?;
        for d in pc.poll(outbox, now_ms)? {
            let payload: String = d
                .record
                .payload
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let line = format!(
                "DELIVER {} {} {} {} {}\n",
                d.index, d.attempt, d.record.id, d.record.handler, payload
            );
            write.write_all(line.as_bytes()).await?;
        }
        if pc.persisted_progress() == outbox.head() {
            break RunEnd::Finished;
        }
        // Wait for an acknowledgement, but never past the consumer's next deadline (or 5 ms, to
        // notice new capacity); then apply everything that arrived.
        let wait_ms = pc
            .consumer()
            .next_wakeup_ms()
            .map_or(5, |at| (at - now_ms).clamp(1, 5));
        let first =
            tokio::time::timeout(Duration::from_millis(wait_ms.unsigned_abs()), rx.recv()).await;
        let mut lines: Vec<String> = match first {
            Ok(Some(line)) => vec![line],
            Ok(None) => {
                reader.abort();
                return Err("worker closed the connection".into());
            }
            Err(_) => Vec::new(),
        };
        while let Ok(line) = rx.try_recv() {
            lines.push(line);
        }
        let now_ms = i64::try_from(started.elapsed().as_millis())?;
        for line in lines {
            let Some((index, attempt, outcome)) = parse_ack(&line) else {
                tracing::warn!(line, "consumer: malformed acknowledgement ignored");
                continue;
            };
            pc.on_ack(index, attempt, outcome, now_ms)?;
        }
        let finished = pc.persisted_progress() - resumed_at;
        if crash_after.is_some_and(|limit| finished >= limit) {
            break RunEnd::Crashed(finished);
        }
    };
    println!(
        "consumer: {} with persisted progress {} (in memory: progress {}, {} in flight)",
        match end {
            RunEnd::Crashed(_) => "CRASHED",
            RunEnd::Finished => "finished",
        },
        pc.persisted_progress(),
        pc.consumer().progress(),
        pc.consumer().in_flight(),
    );
    // A crash: everything in memory (in-flight attempts, unapplied acks) is simply dropped.
    reader.abort();
    drop(pc);
    Ok(end)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn scratch_dir() -> Result<PathBuf, BoxError> {
    let dir = std::env::temp_dir().join(format!("ccron-outbox-worker-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .init();
    let args = Args::parse();
    if args.records == 0 || args.records > 4000 || args.ack_loss_permille > 900 {
        return Err("--records must be 1..=4000 and --ack-loss-permille at most 900".into());
    }
    // Four replicas (f = 1): three correct ones hold identical outboxes, the Byzantine one lies.
    let outbox = fill_outbox(args.records, false)?;
    let replicas = [outbox.clone(), outbox.clone(), outbox.clone()];
    let byzantine = fill_outbox(args.records, true)?;
    let sources: Vec<&Outbox> = vec![&byzantine, &replicas[0], &replicas[1], &replicas[2]];
    let quorum = QuorumJobs::new(sources, 2)?;
    let dir = scratch_dir()?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let worker = Arc::new(Mutex::new(WorkerState {
        seen: SeenSet::new(2 * config().max_search_ahead as usize),
        effects: BTreeMap::new(),
        payloads: BTreeMap::new(),
        deliveries: 0,
        duplicates: 0,
        acks_lost: 0,
        ack_loss_permille: args.ack_loss_permille,
        seed: args.seed,
    }));
    let open = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn(serve(listener, Arc::clone(&worker), Arc::clone(&open)));
    println!(
        "worker: listening on {addr}; outbox holds {} records",
        outbox.len()
    );

    // The one real clock read of this driver: the consumer itself only sees `now_ms`.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let crash_after = args.crash_after.unwrap_or(args.records / 3).max(1);
    let first = run_consumer(addr, &quorum, &dir, started, Some(crash_after)).await?;
    let second = if first == RunEnd::Finished {
        RunEnd::Finished
    } else {
        run_consumer(addr, &quorum, &dir, started, None).await?
    };

    // Let the worker drain both connections (bounded wait), then stop it.
    for _ in 0..200 {
        if open.load(Ordering::SeqCst) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();

    let dead = FileDeadLetters::new(dir.join("dead-letters")).read_all(1 << 20)?;
    let dead_indices: BTreeSet<u64> = dead.iter().map(|l| l.index).collect();
    let w = worker.lock().map_err(|_| "worker state poisoned")?;
    let mut failures = Vec::new();
    if second != RunEnd::Finished {
        failures.push("the restarted consumer did not finish".to_string());
    }
    for (index, record) in outbox.iter() {
        let effects = w.effects.get(&record.id).copied().unwrap_or(0);
        let honest_payload = hex(&record.payload);
        if let Some(p) = w.payloads.get(&record.id)
            && *p != honest_payload
        {
            failures.push(format!("record {index} performed with an altered payload"));
        }
        let broken = record.handler == BROKEN_HANDLER;
        match (broken, effects, dead_indices.contains(&index)) {
            (true, 0, true) | (false, 1, false) => {}
            // A working record may be dead-lettered only if every acknowledgement was lost;
            // then it was still performed exactly once.
            (false, 1, true) => {}
            (_, n, d) => failures.push(format!(
                "record {index} ({}) performed {n} times, dead-lettered: {d}",
                record.id
            )),
        }
    }
    let invented = w.effects.keys().filter(|id| id.entry == 99).count();
    if invented > 0 {
        failures.push(format!("{invented} invented records were performed"));
    }
    println!(
        "summary: {} records, {} deliveries ({} duplicates deduplicated by id, {} acks lost), \
         {} effects performed, {} dead letters ({} records), first consumer {:?}",
        outbox.len(),
        w.deliveries,
        w.duplicates,
        w.acks_lost,
        w.effects.values().sum::<u32>(),
        dead.len(),
        dead_indices.len(),
        first,
    );
    drop(w);
    std::fs::remove_dir_all(&dir)?;
    if failures.is_empty() {
        println!("OK: no occurrence lost, each performed at most once at the worker");
        Ok(())
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        std::process::exit(1);
    }
}
