//! Loopback workers for the tests, the bench and the example (included with `#[path]`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use ccron_http::Worker;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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
        if tokio::time::timeout(std::time::Duration::from_secs(2), &mut self.task)
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
