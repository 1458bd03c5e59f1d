//! `NodeSubmit` and `NodeApi` against four in-process node APIs (the node's real router behind
//! the bounded server), whose pools the test executes by hand: an equal payload re-sent keeps
//! its number and executes once; pacing refuses past the window without sending; an oversized
//! payload, unreachable nodes and the ledger's refusals are typed errors and counters; a lying
//! node is outvoted and two liars are a conflict; request numbers survive a restart through
//! the number file, and a damaged one is refused; requests are signed for the chain the nodes
//! name (`GET /v1/chain`, signing domain 1 or 2), and a request signed for another chain is
//! refused.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ccron::host::TickPool;
use ccron_http::{PublishedOutbox, SubmitError};
use ccron_node::api::{ApiState, lock, serve_with, server_config};
use ccron_node::crypto::SigningDomain;
use ccron_node::mempool::{Mempool, MempoolConfig};
use ccron_node::read::NodeReads;
use ccron_node::request::MAX_PAYLOAD_BYTES;
use ccron_node::results::RequestResults;
use ccron_node::submit::{
    Believed, NodeApi, NodeApiConfig, NodeSubmit, NodeSubmitConfig, NumberFile, NumberFileError,
};
use ccron_node::types::Validators;
use ed25519_dalek::SigningKey;

fn chain() -> SigningDomain {
    SigningDomain::chain(b"node-submit").unwrap()
}

fn api(index: u64, domain: &SigningDomain) -> ApiState {
    ApiState {
        domain: domain.clone(),
        mempool: Arc::new(Mutex::new(Mempool::new(
            MempoolConfig::default(),
            Default::default(),
        ))),
        outbox: PublishedOutbox::new(index),
        ticks: Arc::new(Mutex::new(TickPool::new(4, [1]))),
        validators: Validators::new(&[[1; 32], [2; 32], [3; 32], [4; 32]]),
        ticks_invalid: Arc::new(AtomicU64::new(0)),
        results: Arc::new(Mutex::new(RequestResults::default())),
        reads: NodeReads::new(index),
    }
}

struct Net {
    nodes: Vec<ApiState>,
    urls: Vec<String>,
    height: u64,
    done: BTreeSet<[u8; 32]>,
}

impl Net {
    async fn start() -> Self {
        Self::of_chain(&chain()).await
    }

    async fn of_chain(domain: &SigningDomain) -> Self {
        let nodes: Vec<ApiState> = (0..4).map(|i| api(i, domain)).collect();
        let mut urls = Vec::new();
        for n in &nodes {
            let a: SocketAddr =
                serve_with("127.0.0.1:0".parse().unwrap(), n.clone(), server_config())
                    .await
                    .unwrap();
            urls.push(format!("http://{a}"));
        }
        Self {
            nodes,
            urls,
            height: 0,
            done: BTreeSet::new(),
        }
    }

    /// Executes one block of what the pools hold; `reply` gives each payload's result, and
    /// `liars` nodes record `lie` instead. Returns the requests executed.
    fn block(&mut self, reply: &[u8], liars: &[usize], lie: &[u8]) -> usize {
        self.height += 1;
        let mut block = Vec::new();
        for n in &self.nodes {
            for r in lock(&n.mempool).select(64, 1 << 20) {
                if self.done.insert(r.digest().0) {
                    block.push(r);
                }
            }
        }
        let mut executed = Vec::new();
        for r in &block {
            executed.push((r.client(), r.request.number));
            for (i, n) in self.nodes.iter().enumerate() {
                let reply = if liars.contains(&i) { lie } else { reply };
                lock(&n.results).record(r.client(), r.request.number, self.height, reply);
            }
        }
        for n in &self.nodes {
            lock(&n.mempool).after_block(&block, &executed);
        }
        block.len()
    }

    fn pooled(&self, node: usize) -> usize {
        lock(&self.nodes[node].mempool).len()
    }

    fn client(&self, cfg: NodeSubmitConfig) -> NodeSubmit {
        NodeSubmit::new(
            NodeApi::new(NodeApiConfig::new(self.urls.clone())),
            SigningKey::from_bytes(&[3; 32]),
            1_000,
            cfg,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_payload_keeps_its_number_and_executes_once() {
    let mut net = Net::start().await;
    let mut c = net.client(NodeSubmitConfig::default());
    let n = c.send(b"result 1".to_vec()).await.unwrap();
    assert_eq!(n, 1_000);
    // The relay re-sends it (no result seen yet): the same number, the same bytes.
    assert_eq!(c.send(b"result 1".to_vec()).await.unwrap(), n);
    assert_eq!(c.counters().signed, 1);
    assert_eq!(c.counters().resent, 1);
    assert_eq!(net.pooled(0), 1, "one request in each pool");
    assert_eq!(net.block(b"ok applied", &[], b""), 1, "executed once");
    // Re-sent after it executed but before the client read its result: the nodes call it
    // executed (409), and it does not execute again.
    assert_eq!(c.send(b"result 1".to_vec()).await.unwrap(), n);
    assert_eq!(net.block(b"ok applied", &[], b""), 0);
    c.poll().await;
    assert_eq!(c.in_flight(), 0);
    assert_eq!(c.counters().executed_ok, 1);
    // Once its result is read, an equal payload is a new request.
    assert_eq!(c.send(b"result 1".to_vec()).await.unwrap(), n + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_and_bounds_are_typed_errors_and_nothing_is_sent() {
    let mut net = Net::start().await;
    let mut c = net.client(NodeSubmitConfig {
        max_in_flight: 2,
        max_reads_per_poll: 8,
    });
    c.send(b"a".to_vec()).await.unwrap();
    c.send(b"b".to_vec()).await.unwrap();
    let e = c.send(b"c".to_vec()).await.unwrap_err();
    assert_eq!(e, SubmitError::WindowFull { in_flight: 2 });
    assert_eq!(net.pooled(0), 2, "nothing sent");
    let e = c.send(vec![0; MAX_PAYLOAD_BYTES + 1]).await.unwrap_err();
    assert!(matches!(e, SubmitError::Refused(_)), "{e}");
    assert_eq!(c.counters().window_full, 1);
    assert_eq!(c.counters().refused, 1);
    // The ledger refuses one: counted and kept as the last refusal; the window frees.
    net.block(b"err not the consumer", &[], b"");
    c.poll().await;
    assert_eq!(c.counters().executed_err, 2);
    assert_eq!(c.last_refusal(), Some("err not the consumer"));
    assert_eq!(c.in_flight(), 0);
    c.send(b"c".to_vec()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_nodes_leave_the_request_pending_under_its_number() {
    // Ports nothing listens on.
    let dead: Vec<String> = (0..4)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        })
        .collect();
    let mut cfg = NodeApiConfig::new(dead);
    cfg.timeout_ms = 300;
    let mut c = NodeSubmit::new(
        NodeApi::new(cfg),
        SigningKey::from_bytes(&[3; 32]),
        7,
        NodeSubmitConfig::default(),
    )
    .with_domain(chain());
    let e = c.send(b"x".to_vec()).await.unwrap_err();
    assert!(matches!(e, SubmitError::NotSent(_)), "{e}");
    assert_eq!(c.in_flight(), 1, "kept, never dropped");
    let _ = c.send(b"x".to_vec()).await;
    assert_eq!(c.counters().resent, 1, "the same number again");
    assert_eq!(c.counters().not_sent, 2);
    assert_eq!(c.next_number(), 8);
}

// Issue 23, item 6: requests carried no chain id. A client signs for the chain the nodes name
// (domain 2 or, from nodes of an old chain, domain 1); one signed for another chain is refused
// by every node, typed and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_signed_for_the_nodes_chain_and_another_chains_are_refused() {
    for domain in [chain(), SigningDomain::V1] {
        let mut net = Net::of_chain(&domain).await;
        let mut c = net.client(NodeSubmitConfig::default());
        assert_eq!(
            c.domain().await.unwrap(),
            domain,
            "read from the nodes by quorum"
        );
        c.send(b"mine".to_vec()).await.unwrap();
        assert_eq!(net.pooled(0), 1);
        assert_eq!(net.block(b"ok", &[], b""), 1);
    }
    // Signed for chain B, sent to chain A's nodes: a bad signature, refused by every node.
    let net = Net::start().await;
    let chain_b = SigningDomain::chain(b"chain-b").unwrap();
    for foreign in [chain_b, SigningDomain::V1] {
        let mut c = net.client(NodeSubmitConfig::default()).with_domain(foreign);
        let e = c.send(b"elsewhere".to_vec()).await.unwrap_err();
        assert!(
            matches!(&e, SubmitError::Refused(t) if t.contains("signature")),
            "{e}"
        );
        assert_eq!(c.counters().refused, 1);
    }
    for n in &net.nodes {
        assert_eq!(lock(&n.mempool).len(), 0);
        assert_eq!(lock(&n.mempool).counters().rejected_invalid, 2, "counted");
    }
    // Two quorums naming different chains are no answer.
    let mut urls = Net::start().await.urls[..2].to_vec();
    urls.extend(
        Net::of_chain(&SigningDomain::chain(b"chain-b").unwrap())
            .await
            .urls[..2]
            .to_vec(),
    );
    let mut cfg = NodeApiConfig::new(urls);
    cfg.quorum = 2;
    assert!(NodeApi::new(cfg).domain_by_quorum().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_node_is_outvoted_and_two_liars_conflict() {
    let mut net = Net::start().await;
    let mut c = net.client(NodeSubmitConfig::default());
    let api = NodeApi::new(NodeApiConfig::new(net.urls.clone()));
    let n = c.send(b"p".to_vec()).await.unwrap();
    assert_eq!(
        api.result_by_quorum(c.client(), n).await,
        Believed::Undecided
    );
    net.block(b"ok honest", &[3], b"ok lie");
    match api.result_by_quorum(c.client(), n).await {
        Believed::Executed(r) => assert_eq!(r.result, "ok honest"),
        other => panic!("{other:?}"),
    }
    let m = c.send(b"q".to_vec()).await.unwrap();
    net.block(b"ok honest", &[2, 3], b"ok lie");
    assert_eq!(
        api.result_by_quorum(c.client(), m).await,
        Believed::Conflict
    );
    c.poll().await;
    assert_eq!(c.counters().conflicts, 1);
    assert_eq!(c.in_flight(), 1, "a conflict keeps the request pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_waits_for_the_quorum_result() {
    let net = Arc::new(tokio::sync::Mutex::new(Net::start().await));
    let mut c = net.lock().await.client(NodeSubmitConfig::default());
    let executor = {
        let net = net.clone();
        tokio::spawn(async move {
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if net.lock().await.block(b"ok done", &[], b"") > 0 {
                    return;
                }
            }
        })
    };
    let r = c
        .call(b"hello".to_vec(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.result, "ok done");
    assert_eq!(c.in_flight(), 0);
    executor.await.unwrap();
}

#[test]
fn request_numbers_survive_a_restart_and_a_damaged_file_is_refused() {
    let dir = std::env::temp_dir().join(format!("ccron-node-numbers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("numbers");
    let mut f = NumberFile::open(&path).unwrap();
    assert_eq!(f.reserved(), 0);
    f.reserve(10).unwrap();
    let reserved = f.reserved();
    assert!(reserved > 10);
    f.reserve(11).unwrap();
    assert_eq!(f.reserved(), reserved, "within the reservation: no write");
    let again = NumberFile::open(&path).unwrap();
    assert_eq!(again.reserved(), reserved);
    // A client whose clock went back still starts above the reservation.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(async {
        NodeSubmit::new(
            NodeApi::new(NodeApiConfig::new(vec![])),
            SigningKey::from_bytes(&[3; 32]),
            1,
            NodeSubmitConfig::default(),
        )
        .with_number_file(again)
    });
    assert_eq!(c.next_number(), reserved);
    // One flipped bit: refused, never taken for zero.
    let mut b = std::fs::read(&path).unwrap();
    b[0] ^= 1;
    std::fs::write(&path, &b).unwrap();
    assert!(matches!(
        NumberFile::open(&path),
        Err(NumberFileError::Damaged(_))
    ));
    std::fs::write(&path, [0u8; 5]).unwrap();
    assert!(matches!(
        NumberFile::open(&path),
        Err(NumberFileError::Damaged(_))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 23, item 6: ticks carried no chain id. A validator's tick signed for another chain (or
// in signing domain 1) is refused at `POST /v1/ticks` of a chain-A node, typed (400) and counted
// (`ticks_invalid`); the same tick signed for chain A is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_signed_for_another_chain_is_refused_at_the_endpoint() {
    use ccron_node::crypto::Signer;
    use ccron_node::types::TickTx;
    let validator = Signer::new([7; 32]);
    let mut state = api(0, &chain());
    state.validators = Validators::new(&[validator.public_key(), [2; 32], [3; 32], [4; 32]]);
    let addr = serve_with(
        "127.0.0.1:0".parse().unwrap(),
        state.clone(),
        server_config(),
    )
    .await
    .unwrap();
    let post = |body: Vec<u8>| {
        tokio::task::spawn_blocking(move || {
            ccron_node::load::post(addr, "/v1/ticks", &body).unwrap().0
        })
    };
    let chain_b = SigningDomain::chain(b"chain-b").unwrap();
    for (k, foreign) in [chain_b, SigningDomain::V1].into_iter().enumerate() {
        let tick = TickTx::sign(&foreign, 1, 5, &validator);
        assert_eq!(post(tick.encode()).await.unwrap(), 400);
        assert_eq!(
            state
                .ticks_invalid
                .load(std::sync::atomic::Ordering::Relaxed),
            k as u64 + 1
        );
    }
    assert_eq!(lock(&state.ticks).len(), 0);
    let tick = TickTx::sign(&chain(), 1, 5, &validator);
    assert_eq!(post(tick.encode()).await.unwrap(), 202);
    assert_eq!(lock(&state.ticks).len(), 1);
}
