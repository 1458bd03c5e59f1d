//! Replicas' read endpoints over loopback, and the consumer's quorum reader: a record is
//! believed only when f+1 endpoints return it identically, so a lying replica serving altered,
//! forged or undecodable pages is outvoted, and a silent one only costs a timeout.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use ccron::outbox::{
    Consumer, ConsumerConfig, Jobs, OccurrenceId, Outbox, OutboxLimits, OutboxRecord, OutboxResult,
    ReadPage, ResultOutcome,
};
use ccron::{Policy, Principal};
use ccron_http::contract::OUTBOX_PATH;
use ccron_http::{
    OutboxSource, PublishedOutbox, QuorumReader, ReadClientConfig, ReadError, ReadServerConfig,
    read_router,
};
use tokio::net::TcpListener;

const RECORDS: u64 = 40;

fn honest_outbox() -> Outbox {
    let mut ob = Outbox::new(OutboxLimits::default());
    for k in 0..RECORDS {
        let r = OutboxRecord::new(OccurrenceId::new(1, 0, k), "pay", format!("order-{k}"))
            .with_topic("shop");
        ob.append(r).unwrap();
    }
    for index in [2, 5] {
        let id = ob.get(index).unwrap().id;
        let r = OutboxResult::unsigned(index, id, ResultOutcome::Answer(b"confirmed".to_vec()));
        ob.accept_result(&Policy::default(), &Principal::Host, &r)
            .unwrap();
    }
    ob
}

/// A replica that serves its honest page with every payload altered, more records than were
/// ever committed (a forged head), and results it never applied.
struct Liar(PublishedOutbox);

impl OutboxSource for Liar {
    fn page(&self, from: u64, max_records: usize, max_bytes: usize) -> Option<ReadPage> {
        let mut p = self.0.page(from, max_records, max_bytes)?;
        for e in &mut p.entries {
            e.record.payload = b"refund-all".to_vec();
            e.has_result = true;
        }
        let forged = OutboxRecord::new(OccurrenceId::new(1, 0, 999), "pay", "refund-all");
        let next = p.last_index() + 1;
        if next > p.head && p.entries.len() < max_records {
            p.entries.push(ccron::outbox::ReadEntry {
                record: forged,
                has_result: false,
            });
            p.head = next;
        }
        p.head += 100;
        Some(p)
    }
}

async fn serve(router: Router) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(ccron_http::serve(
        l,
        router,
        ccron_http::ServerConfig::default(),
        std::future::pending(),
    ));
    addr
}

async fn serve_source(s: Arc<dyn OutboxSource>) -> SocketAddr {
    serve(read_router(s, ReadServerConfig::default())).await
}

fn base(a: SocketAddr) -> String {
    format!("http://{a}")
}

fn honest_source(replica: u64, ob: &Outbox) -> PublishedOutbox {
    let p = PublishedOutbox::new(replica);
    p.publish(ob, 77);
    p
}

#[tokio::test]
async fn a_lying_replica_serving_altered_records_is_outvoted() {
    let ob = honest_outbox();
    let mut endpoints = Vec::new();
    endpoints.push(base(
        serve_source(Arc::new(Liar(honest_source(0, &ob)))).await,
    ));
    for r in 1..4 {
        endpoints.push(base(serve_source(Arc::new(honest_source(r, &ob))).await));
    }
    let mut cfg = ReadClientConfig::new(endpoints, 2);
    cfg.max_records = 16;
    let mut reader = QuorumReader::new(cfg).unwrap();
    assert_eq!(reader.refresh(1).await, 4);

    // The liar's page differs from the honest ones.
    let liar_page = reader.endpoints()[0].page().unwrap().clone();
    assert_eq!(liar_page.head, RECORDS + 100);
    assert_eq!(liar_page.get(4).unwrap().record.payload, b"refund-all");
    let honest_page = reader.endpoints()[1].page().unwrap().clone();
    assert_eq!((honest_page.replica, honest_page.at_seq), (1, 77));

    // The quorum view: the honest head, the honest records, nothing forged.
    let q = reader.jobs();
    assert_eq!(q.head(), RECORDS);
    for index in 1..=16 {
        assert_eq!(q.at_index(index).as_ref(), ob.get(index), "index {index}");
    }
    assert_eq!(q.at_index(17), None, "past the page asked for");
    // Results: only what f+1 show counts; the liar claims every one.
    assert_eq!(reader.results_applied(2), 4);
    assert_eq!(reader.results_applied(3), 1);

    // A consumer on the quorum view delivers exactly the honest records.
    let mut consumer = Consumer::new(ConsumerConfig::default(), 0).unwrap();
    let mut delivered = Vec::new();
    for from in [1, 17, 33] {
        reader.refresh(from).await;
        for d in consumer.poll(reader.jobs(), 0) {
            assert_eq!(Some(&d.record), ob.get(d.index));
            consumer.on_ack(d.index, d.attempt, ccron::outbox::AckOutcome::Done, 1);
            delivered.push(d.index);
        }
    }
    assert_eq!(delivered, (1..=RECORDS).collect::<Vec<_>>());
    assert_eq!(consumer.progress(), RECORDS);

    // With only two endpoints, liar and honest disagree: nothing is believed.
    let two = ReadClientConfig::new(
        vec![
            reader.endpoints()[0].base().to_owned(),
            reader.endpoints()[1].base().to_owned(),
        ],
        2,
    );
    let mut split = QuorumReader::new(two).unwrap();
    split.refresh(1).await;
    assert_eq!(split.jobs().at_index(1), None);
    assert_eq!(split.jobs().head(), RECORDS);
}

#[tokio::test]
async fn garbage_oversized_silent_and_unready_endpoints_are_typed_failures() {
    let ob = honest_outbox();
    let garbage = serve(Router::new().route(OUTBOX_PATH, get(|| async { vec![0xffu8; 64] }))).await;
    let huge = serve(Router::new().route(OUTBOX_PATH, get(|| async { vec![0u8; 1 << 20] }))).await;
    // Accepts connections (the kernel's backlog) but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let unready = serve_source(Arc::new(PublishedOutbox::new(9))).await;
    let honest: Vec<String> = {
        let mut v = Vec::new();
        for r in 0..2 {
            v.push(base(serve_source(Arc::new(honest_source(r, &ob))).await));
        }
        v
    };
    let mut endpoints = vec![
        base(garbage),
        base(huge),
        base(silent.local_addr().unwrap()),
        base(unready),
    ];
    endpoints.extend(honest);
    let mut cfg = ReadClientConfig::new(endpoints, 2);
    cfg.max_response_bytes = 64 * 1024;
    cfg.timeout_ms = 300;
    let mut reader = QuorumReader::new(cfg).unwrap();
    assert_eq!(reader.refresh(1).await, 2);
    let errors: Vec<Option<ReadError>> = reader
        .endpoints()
        .iter()
        .map(|e| e.stats().last_error.clone())
        .collect();
    assert!(matches!(errors[0], Some(ReadError::Page(_))), "{errors:?}");
    assert!(
        matches!(errors[1], Some(ReadError::TooLarge(_))),
        "{errors:?}"
    );
    assert!(
        matches!(errors[2], Some(ReadError::Timeout(300))),
        "{errors:?}"
    );
    assert!(
        matches!(errors[3], Some(ReadError::Status(503))),
        "{errors:?}"
    );
    assert_eq!((errors[4].clone(), errors[5].clone()), (None, None));
    assert_eq!(reader.endpoints()[0].stats().failures, 1);
    // The two honest endpoints still make a quorum.
    assert_eq!(reader.jobs().head(), RECORDS);
    assert_eq!(reader.jobs().at_index(7).as_ref(), ob.get(7));
    drop(silent);
}

#[tokio::test]
async fn the_server_clamps_pages_and_refuses_bad_queries() {
    let ob = honest_outbox();
    let cfg = ReadServerConfig {
        max_records: 5,
        max_bytes: 1024,
        ..ReadServerConfig::default()
    };
    let addr = serve(read_router(Arc::new(honest_source(3, &ob)), cfg)).await;
    // The client asks for more than the server gives: it gets the server's bound.
    let mut reader = QuorumReader::new(ReadClientConfig::new(vec![base(addr)], 1)).unwrap();
    assert_eq!(reader.refresh(3).await, 1);
    let page = reader.endpoints()[0].page().unwrap().clone();
    assert_eq!((page.start, page.entries.len()), (3, 5));
    // A reader that accepts fewer records than the page holds refuses it.
    let mut small = ReadClientConfig::new(vec![base(addr)], 1);
    small.max_records = 2;
    small.max_bytes = 1 << 20;
    let mut strict = QuorumReader::new(small).unwrap();
    // It asks for 2, so the server answers 2: accepted.
    assert_eq!(strict.refresh(1).await, 1);

    // Bad queries: 400.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    for q in ["", "?limit=3", "?from=x", "?from=1&from=2", "?from=1&x=1"] {
        let uri = format!("http://{addr}{OUTBOX_PATH}{q}").parse().unwrap();
        let resp = client.get(uri).await.unwrap();
        assert_eq!(resp.status(), 400, "{q}");
    }
    // Bad endpoints are refused when the reader is built; so is a quorum that does not fit.
    assert!(matches!(
        QuorumReader::new(ReadClientConfig::new(vec!["not a uri\u{0}".into()], 1)),
        Err(ReadError::Endpoint(_))
    ));
    assert!(matches!(
        QuorumReader::new(ReadClientConfig::new(vec![base(addr)], 2)),
        Err(ReadError::Quorum(_))
    ));
}

/// An application whose methods say which of them ran.
#[derive(Default)]
struct Marker {
    results: u32,
}

impl ccron::host::Application for Marker {
    fn execute(
        &mut self,
        _: ccron::host::ExecContext,
        _: ccron::host::ClientId,
        _: &[u8],
    ) -> Vec<u8> {
        b"plain".to_vec()
    }
    fn execute_with(
        &mut self,
        _: ccron::host::ExecContext,
        _: ccron::host::ClientId,
        _: &[u8],
        _: &mut ccron::host::Effects<'_>,
    ) -> Vec<u8> {
        b"with effects".to_vec()
    }
    fn on_outbox_result(&mut self, _: &OutboxRecord, _: &ResultOutcome) {
        self.results += 1;
    }
    fn digest(&self) -> ccron::host::Digest32 {
        [1; 32]
    }
    fn digest_in(&self, hash: ccron::state_hash::StateHash) -> ccron::host::Digest32 {
        match hash {
            ccron::state_hash::StateHash::Sha256 => [1; 32],
            ccron::state_hash::StateHash::Blake3 => [2; 32],
        }
    }
    fn snapshot(&self) -> Vec<u8> {
        Vec::new()
    }
    fn restore(&mut self, _: &[u8]) -> Result<(), ccron::host::AppError> {
        Ok(())
    }
}

/// The publishing wrappers forward every method with a default: a wrapper that fell back to
/// the default would drop a request's effects (`execute_with`), a result (`on_outbox_result`),
/// or hash the state with SHA-256 where the host asked for BLAKE3 (`digest_in`).
#[test]
fn the_publishing_wrappers_forward_effects_results_and_the_hash_function() {
    use ccron::host::{Application, ClientId, Effects, ExecContext};
    use ccron::state_hash::StateHash;
    use ccron_http::{PublishBook, PublishOutbox, PublishedBook};
    let ctx = ExecContext {
        seq: 7,
        agreed_time_ms: Some(1),
    };
    let client = ClientId::from_index(1);
    let record = OutboxRecord::new(OccurrenceId::new(1, 0, 0), "pay", "x");
    let answer = ResultOutcome::Answer(b"ok".to_vec());
    let mut o = PublishOutbox::new(Marker::default(), |_| None, PublishedOutbox::new(0));
    let mut b = PublishBook::new(Marker::default(), PublishedBook::new(0));
    let apps: [&mut dyn Application; 2] = [&mut o, &mut b];
    for app in apps {
        let out = app.execute_with(ctx, client, b"x", &mut Effects::none());
        assert_eq!(out, b"with effects");
        assert_eq!(app.digest_in(StateHash::Blake3), [2; 32]);
        assert_eq!(app.digest_in(StateHash::Sha256), app.digest());
        app.on_outbox_result(&record, &answer);
    }
    assert_eq!((o.inner().results, b.inner().results), (1, 1));
}
