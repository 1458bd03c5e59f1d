//! The attacks of issue 24 on a worker, over loopback, and what the dispatcher does with
//! answers it must not believe.
//!
//! * Forged deliveries (no MAC, another secret, another chain, an unknown key id, a stale
//!   timestamp, a payload or header changed after the MAC): 401, counted, nothing performed,
//!   nothing remembered; the real delivery then performs its effect once.
//! * An eviction flood of fresh ids from a stranger cannot make a re-delivery perform twice;
//!   only the sender's own acknowledged progress makes the worker forget, and what it forgot is
//!   refused (410), never performed again.
//! * A repeat of an id with another payload is a 409, not a replay; a captured delivery
//!   replayed within the skew window is answered from memory, later it is a 401.
//! * An answer longer than the ledger accepts is never acknowledged done: the worker answers
//!   422 and the dispatcher gives the record up (a dead letter the ledger applies); an answer
//!   signed by a key the pool does not have is refused by the dispatcher and never reaches the
//!   sink.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ccron::outbox::workers::{hex_array, sha256, to_hex, verify_answer};
use ccron::outbox::{
    AnswerProof, ConsumerConfig, DedupeLimits, MemDeadLetters, MemProgressStore, OccurrenceId,
    Outbox, OutboxLimits, OutboxRecord, OutboxResult, PersistentConsumer, ResultApplied,
    ResultOutcome, WorkerKey,
};
use ccron::{Policy, Principal};
use ccron_http::auth::{self, DeliveryClaims, DeliverySecret};
use ccron_http::{
    Dedupe, Dispatcher, DispatcherConfig, EffectError, ResultSink, ResultSinkError, Worker,
    contract,
};
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::{CHAIN, KEY_ID, Running, any_port, secret, signer, worker_config};

/// The wall clock of this test shell.
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// One delivery as a client builds it, with every field an attacker may change.
#[derive(Clone)]
struct Post {
    index: u64,
    id: OccurrenceId,
    handler: String,
    payload: Vec<u8>,
    progress: u64,
    /// The MAC's secret, or none (no authentication headers at all).
    secret: Option<DeliverySecret>,
    key_id: String,
    chain: Vec<u8>,
    timestamp_ms: u64,
    /// Sent instead of `payload` after the MAC was computed.
    body_override: Option<Vec<u8>>,
    /// Sent instead of `progress` after the MAC was computed.
    progress_override: Option<u64>,
}

impl Post {
    fn real(index: u64, payload: &str) -> Self {
        Self {
            index,
            id: OccurrenceId::new(1, 2, index),
            handler: "pay".into(),
            payload: payload.as_bytes().to_vec(),
            progress: 0,
            secret: Some(secret(0)),
            key_id: KEY_ID.into(),
            chain: CHAIN.to_vec(),
            timestamp_ms: auth::unix_now_ms(),
            body_override: None,
            progress_override: None,
        }
    }

    fn request(&self, base: &str) -> Request<Full<Bytes>> {
        let mut b = Request::post(format!("{base}{}", contract::DELIVER_PATH))
            .header(contract::IDEMPOTENCY_KEY, self.id.to_string())
            .header(contract::HANDLER, self.handler.as_str())
            .header(contract::OUTBOX_INDEX, self.index)
            .header(contract::ATTEMPT, 1)
            .header(
                contract::PROGRESS,
                self.progress_override.unwrap_or(self.progress),
            );
        if let Some(secret) = &self.secret {
            let claims = DeliveryClaims {
                chain_id: &self.chain,
                key_id: &self.key_id,
                index: self.index,
                id: self.id,
                handler: &self.handler,
                attempt: 1,
                progress: self.progress,
                timestamp_ms: self.timestamp_ms,
                payload_sha256: sha256(&self.payload),
            };
            let tag = auth::mac(secret, &auth::delivery_signing_bytes(&claims));
            b = b
                .header(contract::CHAIN, to_hex(&self.chain))
                .header(contract::KEY_ID, self.key_id.as_str())
                .header(contract::TIMESTAMP, self.timestamp_ms)
                .header(contract::SIGNATURE, to_hex(&tag));
        }
        let body = self
            .body_override
            .clone()
            .unwrap_or_else(|| self.payload.clone());
        b.body(Full::new(Bytes::from(body))).unwrap()
    }

    fn record(&self) -> OutboxRecord {
        OutboxRecord::new(self.id, self.handler.as_str(), self.payload.clone())
    }
}

struct Answer {
    status: StatusCode,
    error: Option<String>,
    replayed: bool,
    body: Vec<u8>,
    proof: Option<AnswerProof>,
}

async fn send(base: &str, post: &Post) -> Answer {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let resp = client.request(post.request(base)).await.unwrap();
    let h = resp.headers().clone();
    let text = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let proof = match (text(contract::ANSWER_KEY), text(contract::ANSWER_SIGNATURE)) {
        (Some(k), Some(s)) => Some(AnswerProof {
            key: k.parse::<WorkerKey>().unwrap(),
            signature: hex_array::<64>(&s).unwrap(),
            path: ccron_http::deliver::parse_answer_path(text(contract::ANSWER_PATH).as_deref())
                .unwrap(),
        }),
        _ => None,
    };
    Answer {
        status: resp.status(),
        error: text(contract::ERROR),
        replayed: h.contains_key(contract::REPLAYED),
        body: resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
        proof,
    }
}

type Effects = Arc<Mutex<BTreeMap<OccurrenceId, Vec<Vec<u8>>>>>;

async fn start_worker(answer_len: Option<usize>) -> (Running, Arc<Worker>, Arc<Dedupe>, Effects) {
    let effects: Effects = Arc::default();
    let dedupe = Dedupe::new(DedupeLimits {
        window: 64,
        ..DedupeLimits::default()
    });
    let e = effects.clone();
    let w = Worker::new(worker_config(0), dedupe.clone(), move |_, id, payload| {
        e.lock()
            .unwrap()
            .entry(*id)
            .or_default()
            .push(payload.to_vec());
        match answer_len {
            Some(n) => Ok(vec![b'a'; n]),
            None => Ok(format!("paid {}", String::from_utf8_lossy(payload)).into_bytes()),
        }
    });
    let r = Running::start(w.clone(), any_port()).unwrap();
    (r, w, dedupe, effects)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_deliveries_are_refused_and_the_real_one_is_performed_once() {
    let (r, w, dedupe, effects) = start_worker(None).await;
    let base = r.base();
    let real = Post::real(1, "order-1");
    // An outsider knows the next id (ids are predictable) and posts it with its own payload.
    let forged = Post {
        payload: b"refund-all".to_vec(),
        ..real.clone()
    };
    let now = auth::unix_now_ms();
    let attempts = [
        Post {
            secret: None,
            ..forged.clone()
        },
        Post {
            secret: Some(DeliverySecret::new(b"guessed-secret-guessed".to_vec()).unwrap()),
            ..forged.clone()
        },
        Post {
            chain: b"another-chain".to_vec(),
            ..real.clone()
        },
        Post {
            key_id: "stranger".into(),
            ..real.clone()
        },
        Post {
            timestamp_ms: now - 60_000,
            ..real.clone()
        },
        Post {
            timestamp_ms: now + 60_000,
            ..real.clone()
        },
        Post {
            body_override: Some(b"refund-all".to_vec()),
            ..real.clone()
        },
        Post {
            progress_override: Some(1_000),
            ..real.clone()
        },
    ];
    for (k, a) in attempts.iter().enumerate() {
        let ans = send(&base, a).await;
        assert_eq!(ans.status, StatusCode::UNAUTHORIZED, "attempt {k}");
        assert_eq!(ans.error.as_deref(), Some("unauthenticated"), "attempt {k}");
    }
    assert_eq!(
        w.stats().unauthenticated.load(Ordering::Relaxed),
        attempts.len() as u64
    );
    assert!(effects.lock().unwrap().is_empty(), "nothing performed");
    assert!(dedupe.is_empty(), "nothing remembered");

    // The real delivery: performed once, its answer signed over the real record.
    let ans = send(&base, &real).await;
    assert_eq!(ans.status, StatusCode::OK);
    assert_eq!(ans.body, b"paid order-1");
    let proof = ans.proof.expect("a signed answer");
    assert_eq!(proof.key, signer(0).public());
    assert!(verify_answer(&proof, CHAIN, 1, &real.record(), &ans.body));
    assert!(!verify_answer(
        &proof,
        CHAIN,
        1,
        &forged.record(),
        &ans.body
    ));
    // A repeat is answered from memory, byte for byte.
    let again = send(&base, &real).await;
    assert!(again.replayed);
    assert_eq!((again.body, again.proof), (ans.body, Some(proof)));
    assert_eq!(effects.lock().unwrap()[&real.id], vec![b"order-1".to_vec()]);
    r.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_cannot_evict_and_only_acknowledged_progress_forgets() {
    let (r, w, dedupe, effects) = start_worker(None).await;
    let base = r.base();
    let first = Post::real(1, "order-1");
    assert_eq!(send(&base, &first).await.status, StatusCode::OK);
    // The FIFO store of before evicted its oldest id after `capacity` fresh ones: a stranger's
    // fresh ids now never get in.
    for k in 0..300 {
        let flood = Post {
            secret: None,
            ..Post::real(10_000 + k, "x")
        };
        assert_eq!(send(&base, &flood).await.status, StatusCode::UNAUTHORIZED);
    }
    assert!(dedupe.contains(KEY_ID, &first.id));
    let again = send(&base, &first).await;
    assert!(again.replayed, "the re-delivery is answered from memory");
    assert_eq!(effects.lock().unwrap().len(), 1);
    // The consumer's own acknowledged progress is the only eviction; a delivery at or below
    // it is refused, never performed again.
    let second = Post {
        progress: 1,
        ..Post::real(2, "order-2")
    };
    assert_eq!(send(&base, &second).await.status, StatusCode::OK);
    assert!(!dedupe.contains(KEY_ID, &first.id));
    let late = Post {
        progress: 1,
        ..first.clone()
    };
    let ans = send(&base, &late).await;
    assert_eq!(
        (ans.status, ans.error.as_deref()),
        (StatusCode::GONE, Some("stale"))
    );
    // Beyond the window of the acknowledged progress: not now (503), nothing performed.
    let far = Post {
        progress: 1,
        ..Post::real(1 + 64 + 1, "order-far")
    };
    let ans = send(&base, &far).await;
    assert_eq!(
        (ans.status, ans.error.as_deref()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("ahead-of-window"))
    );
    assert_eq!(effects.lock().unwrap().len(), 2);
    assert_eq!(w.stats().stale.load(Ordering::Relaxed), 1);
    r.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_payload_is_a_conflict_and_captures_expire() {
    let (r, w, _dedupe, effects) = start_worker(None).await;
    let base = r.base();
    let real = Post::real(3, "order-3");
    assert_eq!(send(&base, &real).await.status, StatusCode::OK);
    // The authenticated sender itself repeats the id with another payload (or handler).
    for other in [
        Post {
            payload: b"order-4".to_vec(),
            ..real.clone()
        },
        Post {
            handler: "refund".into(),
            ..real.clone()
        },
        Post {
            index: 4,
            ..real.clone()
        },
    ] {
        let ans = send(&base, &other).await;
        assert_eq!(
            (ans.status, ans.error.as_deref()),
            (StatusCode::CONFLICT, Some("conflict"))
        );
    }
    assert_eq!(w.stats().conflicts.load(Ordering::Relaxed), 3);
    // A captured delivery replayed as is: answered from memory (no second effect).
    assert!(send(&base, &real).await.replayed);
    // The same capture a minute later is outside the skew window.
    let old = Post {
        timestamp_ms: auth::unix_now_ms() - 60_000,
        ..real.clone()
    };
    assert_eq!(send(&base, &old).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(effects.lock().unwrap()[&real.id].len(), 1);
    r.kill().await;
}

/// The ledger stand-in: applies results (the policy registers worker 0 for "pay").
struct Ledger {
    outbox: Outbox,
    policy: Policy,
    applied: BTreeMap<u64, ResultOutcome>,
    answers_without_proof: u64,
}

impl ResultSink for Ledger {
    fn offer(&mut self, r: OutboxResult) -> Result<(), ResultSinkError> {
        if matches!(r.outcome, ResultOutcome::Answer(_)) && r.proof.is_none() {
            self.answers_without_proof += 1;
        }
        match self.outbox.accept_result(
            &self.policy,
            &Principal::Client(ccron::ClientId::from_index(9)),
            &r,
        ) {
            Ok(ResultApplied::Applied) => {
                self.applied.insert(r.index, r.outcome);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(ResultSinkError(e.to_string())),
        }
    }
}

async fn drive(
    cfg: DispatcherConfig,
    ledger: &mut Ledger,
    records: u64,
) -> ccron_http::DispatchStats {
    let start = wall();
    let clock: ccron_http::deliver::Clock =
        Arc::new(move || i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX));
    let mut store = MemProgressStore::default();
    let mut letters = MemDeadLetters::default();
    let consumer_cfg = ConsumerConfig {
        max_attempts: u32::MAX,
        ack_timeout_ms: 3_000,
        ..ConsumerConfig::default()
    };
    let mut consumer = PersistentConsumer::open(consumer_cfg, &mut store, &mut letters).unwrap();
    let mut dispatcher = Dispatcher::new(cfg, clock).unwrap();
    let outbox = ledger.outbox.clone();
    while consumer.persisted_progress() < records {
        assert!(start.elapsed() < Duration::from_secs(30), "stuck");
        dispatcher
            .step(
                &mut consumer,
                &outbox,
                &mut *ledger,
                Duration::from_millis(20),
            )
            .await
            .unwrap();
    }
    dispatcher.stats()
}

fn ledger(records: u64) -> Ledger {
    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 1..=records {
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(1, 2, k),
                "pay",
                format!("order-{k}"),
            ))
            .unwrap();
    }
    Ledger {
        outbox,
        policy: support::with_workers(
            Policy::default().with_outbox_consumer(ccron::ClientId::from_index(9)),
            1,
            &["pay"],
        ),
        applied: BTreeMap::new(),
        answers_without_proof: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_over_the_ledgers_bound_are_given_up_never_acked_done() {
    // The worker's answer (100 bytes) is over what this ledger accepts (50 bytes): the worker
    // refuses to answer it as done, and the dispatcher gives the record up.
    let limits = OutboxLimits {
        max_record_bytes: 50,
        ..OutboxLimits::default()
    };
    let effects: Effects = Arc::default();
    let e = effects.clone();
    let mut wcfg = worker_config(0);
    wcfg.max_answer_bytes = ccron::outbox::max_answer_bytes(&limits);
    let w = Worker::new(
        wcfg,
        Dedupe::new(DedupeLimits::default()),
        move |_, id, _| {
            e.lock().unwrap().entry(*id).or_default().push(vec![]);
            Ok(vec![b'a'; 100])
        },
    );
    let r = Running::start(w.clone(), any_port()).unwrap();
    let mut l = ledger(3);
    let cfg = DispatcherConfig::new(CHAIN, KEY_ID, vec![support::endpoint(0, r.base())])
        .with_outbox_limits(&limits);
    let stats = drive(cfg, &mut l, 3).await;
    assert_eq!(stats.answers_too_large, 3, "{stats:?}");
    assert_eq!(stats.given_up, 3);
    assert_eq!(stats.done, 0, "nothing acknowledged done");
    // Each record ends as a dead letter (cut to the ledger's bound), which the ledger applies.
    for i in 1..=3 {
        assert!(
            matches!(&l.applied[&i], ResultOutcome::DeadLetter(why) if why.len() <= 50),
            "{:?}",
            l.applied[&i]
        );
    }
    assert_eq!(w.stats().answers_too_large.load(Ordering::Relaxed), 3);
    assert_eq!(effects.lock().unwrap().len(), 3, "performed once each");
    r.kill().await;

    // A worker that does not enforce the bound (another implementation): the dispatcher reads
    // at most the bound and gives the record up all the same.
    let w = Worker::new(
        worker_config(0),
        Dedupe::new(DedupeLimits::default()),
        |_, _, _| Ok(vec![b'a'; 100]),
    );
    let r = Running::start(w, any_port()).unwrap();
    let mut l = ledger(2);
    let cfg = DispatcherConfig::new(CHAIN, KEY_ID, vec![support::endpoint(0, r.base())])
        .with_outbox_limits(&limits);
    let stats = drive(cfg, &mut l, 2).await;
    assert_eq!((stats.answers_too_large, stats.done), (2, 0), "{stats:?}");
    assert!(
        l.applied
            .values()
            .all(|o| matches!(o, ResultOutcome::DeadLetter(_)))
    );
    r.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_signed_by_a_stranger_never_reach_the_sink() {
    // The worker signs with key 5; the pool (and the ledger) know worker 0's key only.
    let mut wcfg = worker_config(0);
    wcfg.signer = Some(signer(5));
    let w = Worker::new(wcfg, Dedupe::new(DedupeLimits::default()), |_, _, p| {
        if p == b"order-2" {
            Err(EffectError::Rejected("no such order".into()))
        } else {
            Ok(b"paid".to_vec())
        }
    });
    let r = Running::start(w, any_port()).unwrap();
    let mut l = ledger(2);
    let mut cfg = DispatcherConfig::new(CHAIN, KEY_ID, vec![support::endpoint(0, r.base())]);
    cfg.pool.default_policy.time_to_run_ms = 600;
    cfg.pool.health.base_down_ms = 50;
    let stats = drive(cfg, &mut l, 2).await;
    assert!(stats.bad_answers > 0, "{stats:?}");
    assert_eq!(stats.done, 0, "{stats:?}");
    assert_eq!(l.answers_without_proof, 0);
    assert!(
        l.applied
            .values()
            .all(|o| matches!(o, ResultOutcome::DeadLetter(_))),
        "{:?}",
        l.applied
    );
    r.kill().await;
}

/// How a fake worker answers (an on-path attacker, or a broken implementation).
#[derive(Clone, Copy)]
enum Fake {
    /// 200 with an answer validly signed by the registered key, but no response MAC.
    SignedUnmaced,
    /// 422 (refused for good) without a response MAC.
    RefusalUnmaced,
    /// 200 with a response MAC, the registered key, and a signature that does not verify.
    BadSignatureMaced,
}

async fn fake_worker(kind: Fake) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    use axum::http::HeaderMap;
    use axum::response::IntoResponse;
    let handler = move |headers: HeaderMap, body: Bytes| async move {
        let text = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        let index: u64 = text(contract::OUTBOX_INDEX).parse().unwrap_or(0);
        let (chain, id) = contract::parse_idempotency_key(text(contract::IDEMPOTENCY_KEY)).unwrap();
        assert_eq!(
            chain,
            Some(to_hex(CHAIN).as_str()),
            "the key names the chain"
        );
        let record = OutboxRecord::new(id, text(contract::HANDLER), body.to_vec());
        let answer = b"paid".to_vec();
        let mut proof = signer(0).sign(CHAIN, index, &record, &answer);
        let status = match kind {
            Fake::RefusalUnmaced => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::OK,
        };
        if matches!(kind, Fake::BadSignatureMaced) {
            proof.signature = [7; 64];
        }
        let mut h = HeaderMap::new();
        if status == StatusCode::OK {
            h.insert(contract::ANSWER_KEY, proof.key.to_string().parse().unwrap());
            h.insert(
                contract::ANSWER_SIGNATURE,
                to_hex(&proof.signature).parse().unwrap(),
            );
        }
        if matches!(kind, Fake::BadSignatureMaced) {
            let tag = hex_array::<32>(text(contract::SIGNATURE)).unwrap();
            let mac = auth::mac(
                &secret(0),
                &auth::response_signing_bytes(&tag, 200, &answer, Some(&proof)),
            );
            h.insert(contract::RESPONSE_SIGNATURE, to_hex(&mac).parse().unwrap());
        }
        (status, h, answer).into_response()
    };
    let router = axum::Router::new().route(contract::DELIVER_PATH, axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(ccron_http::serve(
        listener,
        router,
        ccron_http::ServerConfig::default(),
        async move {
            let _ = rx.await;
        },
    ));
    (addr, tx)
}

/// Responses are believed only with the worker's MAC: a 200 or a refusal for good without it
/// is a worker fault (retried), never acknowledged done nor dead-lettered on its word; a
/// worker whose signatures do not verify is caught on its first answers (the dispatcher's
/// sampled verification), never acknowledged done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_need_the_workers_mac_and_bad_signers_are_caught() {
    for kind in [
        Fake::SignedUnmaced,
        Fake::RefusalUnmaced,
        Fake::BadSignatureMaced,
    ] {
        let (addr, stop) = fake_worker(kind).await;
        let mut l = ledger(1);
        let mut cfg = DispatcherConfig::new(
            CHAIN,
            KEY_ID,
            vec![support::endpoint(0, format!("http://{addr}"))],
        );
        cfg.pool.default_policy.time_to_run_ms = 500;
        cfg.pool.health.base_down_ms = 20;
        let stats = drive(cfg, &mut l, 1).await;
        assert!(stats.bad_answers > 0, "{stats:?}");
        assert_eq!(stats.done, 0, "{stats:?}");
        // Given up only when its time-to-run ran out, not on the forged refusal's word.
        match &l.applied[&1] {
            ResultOutcome::DeadLetter(why) => assert!(why.contains("time-to-run"), "{why}"),
            other => panic!("{other:?}"),
        }
        let _ = stop.send(());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_throttles_strangers_not_the_authenticated_sender() {
    // A bucket of 3 requests, one more per second: far below what the consumer sends.
    let mut cfg = worker_config(0);
    cfg.server.rate = ccron_http::server::RateLimit {
        per_second: 1,
        burst: 3,
    };
    let w = Worker::new(
        cfg,
        Dedupe::new(DedupeLimits {
            window: 64,
            ..DedupeLimits::default()
        }),
        |_, _, payload| Ok(payload.to_vec()),
    );
    let r = Running::start(w.clone(), any_port()).unwrap();
    let base = r.base();
    // The authenticated sender, from the same address as the stranger below: 20 in a row.
    for k in 1..=20 {
        let ans = send(&base, &Post::real(k, "order")).await;
        assert_eq!(ans.status, StatusCode::OK, "delivery {k}");
    }
    // A stranger (no MAC) spends the bucket and is throttled.
    let mut statuses = Vec::new();
    for k in 0..5 {
        let stranger = Post {
            secret: None,
            ..Post::real(100 + k, "x")
        };
        statuses.push(send(&base, &stranger).await.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::UNAUTHORIZED,
            StatusCode::UNAUTHORIZED,
            StatusCode::UNAUTHORIZED,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let s = w.server_stats().snapshot();
    assert_eq!((s.authenticated, s.rate_limited), (20, 2), "{s:?}");
    r.kill().await;
}
