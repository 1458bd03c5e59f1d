//! Loopback workers and their credentials for the tests, the bench and the example (included
//! with `#[path]`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use ccron::Policy;
use ccron::outbox::WorkerSigner;
use ccron_http::{DeliverySecret, Worker, WorkerConfig, WorkerEndpoint};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The chain the tests deliver.
pub const CHAIN: &[u8] = b"ccron-test-chain";

/// The dispatcher's key id.
pub const KEY_ID: &str = "consumer";

/// Worker `i`'s delivery secret (shared with the dispatcher).
pub fn secret(i: usize) -> DeliverySecret {
    let mut s = b"test-secret-for-worker-".to_vec();
    s.extend_from_slice(format!("{i:08}").as_bytes());
    DeliverySecret::new(s).expect("secret length")
}

/// Worker `i`'s answer signing key.
pub fn signer(i: usize) -> WorkerSigner {
    WorkerSigner::from_seed([u8::try_from(i + 1).unwrap_or(255); 32])
}

/// Worker `i`'s configuration: it accepts the dispatcher's key id with its secret and signs
/// with its key.
pub fn worker_config(i: usize) -> WorkerConfig {
    WorkerConfig::new(
        CHAIN,
        BTreeMap::from([(KEY_ID.to_string(), secret(i))]),
        signer(i),
    )
}

/// How the dispatcher knows worker `i` at `base`.
pub fn endpoint(i: usize, base: String) -> WorkerEndpoint {
    WorkerEndpoint::new(base, secret(i), signer(i).public())
}

/// `policy` with the test chain and workers `0..n` registered for `handlers`.
pub fn with_workers(policy: Policy, n: usize, handlers: &[&str]) -> Policy {
    (0..n).fold(policy.with_chain_id(CHAIN), |p, i| {
        p.with_worker_key(signer(i).public(), handlers.iter().copied())
    })
}

/// A worker serving on loopback until stopped.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Serves `worker` on `addr` (port 0: any free port).
    pub fn start(worker: Arc<Worker>, addr: SocketAddr) -> std::io::Result<Self> {
        let listener = Worker::bind(addr)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(worker.serve(listener, async move {
            let _ = rx.await;
        }));
        Ok(Self {
            addr,
            stop: Some(tx),
            task,
        })
    }

    /// The base URI.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Kills it: the server stops accepting, closes its connections (waiting at most 2 s for
    /// requests in progress) and releases its port.
    pub async fn kill(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let abort = self.task.abort_handle();
        if tokio::time::timeout(std::time::Duration::from_secs(3), &mut self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// The loopback address with port 0.
pub fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
