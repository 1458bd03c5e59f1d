//! The ready consumer (issue 25, item 5): `Relay` reads a ledger's outbox by quorum from two
//! read endpoints, delivers to two authenticated workers, submits every result back (the first
//! submits fail and are re-sent) and reports progress, which trims the outbox only past
//! records whose results were applied.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ccron::host::scheduler::outbox_delivered_of;
use ccron::outbox::{
    Backoff, ConsumerConfig, DedupeLimits, OccurrenceId, Outbox, OutboxLimits, OutboxRecord,
    OutboxResult, ResultApplied,
};
use ccron::{Policy, Principal};
use ccron_http::read::{PublishedOutbox, ReadClientConfig, ReadServerConfig, read_router};
use ccron_http::{Dedupe, DispatcherConfig, Relay, RelayConfig, Submit, SubmitError, Worker};
use support::{CHAIN, KEY_ID, Running, any_port, endpoint, with_workers, worker_config};
use tokio::net::TcpListener;

/// The outbox consumer (a stand-in id: no key behind it).
const CONSUMER: ccron::ClientId = ccron::ClientId::from_bytes([7; 32]);
const RECORDS: u64 = 40;

/// A stand-in ledger: its outbox, published to its replicas' read endpoints after each change.
struct Ledger {
    outbox: Outbox,
    policy: Policy,
    published: Vec<PublishedOutbox>,
    seq: u64,
    applied: u64,
    /// Submits to refuse first (transport failures the relay must survive).
    fail_first: u32,
}

impl Ledger {
    fn publish(&mut self) {
        self.seq += 1;
        for p in &self.published {
            p.publish(&self.outbox, self.seq);
        }
    }
}

struct LedgerSubmit(Arc<Mutex<Ledger>>);

impl Submit for LedgerSubmit {
    async fn submit(&mut self, payload: Vec<u8>) -> Result<(), SubmitError> {
        self.apply(payload).map_err(SubmitError::NotSent)
    }
}

impl LedgerSubmit {
    fn apply(&mut self, payload: Vec<u8>) -> Result<(), String> {
        let mut l = self.0.lock().unwrap();
        if l.fail_first > 0 {
            l.fail_first -= 1;
            return Err("connection refused".into());
        }
        let by = Principal::Client(CONSUMER);
        if let Some(upto) = outbox_delivered_of(&payload) {
            let policy = l.policy.clone();
            l.outbox
                .accept_progress(&policy, &by, upto)
                .map_err(|e| e.to_string())?;
        } else if let Some(result) = OutboxResult::from_payload(&payload) {
            let result = result.map_err(|e| e.to_string())?;
            let policy = l.policy.clone();
            if l.outbox
                .accept_result(&policy, &by, &result)
                .map_err(|e| e.to_string())?
                == ResultApplied::Applied
            {
                l.applied += 1;
            }
        } else {
            return Err("unknown payload".into());
        }
        l.publish();
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_delivers_by_quorum_and_brings_every_result_back() {
    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 0..RECORDS {
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(1, 2, k),
                "mail",
                format!("m{k}"),
            ))
            .unwrap();
    }
    let published: Vec<PublishedOutbox> = (0..2).map(PublishedOutbox::new).collect();
    let ledger = Arc::new(Mutex::new(Ledger {
        outbox,
        policy: with_workers(
            Policy::default().with_outbox_consumer(CONSUMER),
            2,
            &["mail"],
        ),
        published: published.clone(),
        seq: 0,
        applied: 0,
        fail_first: 3,
    }));
    ledger.lock().unwrap().publish();
    let mut read_endpoints = Vec::new();
    for p in published {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        read_endpoints.push(format!("http://{}", l.local_addr().unwrap()));
        let router = read_router(Arc::new(p), ReadServerConfig::default());
        tokio::spawn(ccron_http::serve(
            l,
            router,
            ccron_http::ServerConfig::default(),
            std::future::pending(),
        ));
    }

    let performed: Arc<Mutex<BTreeMap<OccurrenceId, u32>>> = Arc::default();
    let consumer = ConsumerConfig {
        max_processing: 8,
        max_search_ahead: 64,
        max_attempts: u32::MAX,
        ack_timeout_ms: 3_000,
        backoff: Backoff {
            base_ms: 5,
            cap_ms: 100,
            jitter_permille: 250,
        },
    };
    let dedupe = Dedupe::new(DedupeLimits {
        window: consumer.max_search_ahead,
        ..DedupeLimits::default()
    });
    let running: Vec<Running> = (0..2)
        .map(|i| {
            let performed = performed.clone();
            let w = Worker::new(worker_config(i), dedupe.clone(), move |_, id, payload| {
                *performed.lock().unwrap().entry(*id).or_insert(0) += 1;
                Ok(format!("sent {}", String::from_utf8_lossy(payload)).into_bytes())
            });
            Running::start(w, any_port()).unwrap()
        })
        .collect();
    let workers = running
        .iter()
        .enumerate()
        .map(|(i, r)| endpoint(i, r.base()))
        .collect();

    let dir = std::env::temp_dir().join(format!("ccron-relay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = RelayConfig {
        read: ReadClientConfig::new(read_endpoints, 2),
        dispatcher: DispatcherConfig::new(CHAIN, KEY_ID, workers),
        consumer,
        dir: dir.clone(),
        resend_after_ms: 200,
        step_wait: Duration::from_millis(20),
        report_progress: true,
    };
    // The test's clock (tests may read it; the relay gets it injected).
    #[allow(clippy::disallowed_methods)]
    let start = Instant::now();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));
    let mut relay = Relay::open(cfg, clock, LedgerSubmit(ledger.clone())).unwrap();
    let stats = relay
        .run_until(Duration::from_secs(30), |s| {
            s.progress == RECORDS && s.pending_results == 0 && s.reported_progress == RECORDS
        })
        .await
        .unwrap();
    assert_eq!(stats.progress, RECORDS, "{stats:?}");
    assert_eq!(stats.pending_results, 0, "{stats:?}");
    assert!(stats.submit_failures >= 3 && stats.resent > 0, "{stats:?}");
    {
        let l = ledger.lock().unwrap();
        assert_eq!(l.applied, RECORDS, "every result applied once");
        assert_eq!(
            l.outbox.first_index(),
            RECORDS + 1,
            "trimmed after the results"
        );
        let performed = performed.lock().unwrap();
        assert_eq!(performed.len() as u64, RECORDS);
        assert!(performed.values().all(|n| *n == 1), "each effect once");
    }
    for r in running {
        r.kill().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
