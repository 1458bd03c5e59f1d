//! Own-tick forwarding: a node posts each of its signed ticks to the other validators'
//! `POST /v1/ticks`, over a real HTTP client with a deadline per post.
//!
//! Each target is independent: one post in flight per target at most (a tick that finds its
//! target busy is not queued: the next tick supersedes it, and the node's own pool still
//! carries it when it proposes), every post bounded by [`FORWARD_DEADLINE`] from connect to the
//! last byte of the answer, the answer's body never read past [`MAX_ANSWER_BYTES`]. One endpoint
//! that drips its answer or never accepts costs only its own slot, never the forwarding to the
//! others. Every outcome is counted ([`ForwardCounters`]) and traced.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

/// The deadline of one post (connect, send, answer).
pub const FORWARD_DEADLINE: Duration = Duration::from_millis(750);

/// The most answer bytes read back.
pub const MAX_ANSWER_BYTES: usize = 1_024;

/// What forwarding did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardCounters {
    /// Posts answered `202` (admitted) or `409` (already pending there: fine).
    pub delivered: u64,
    /// Posts answered with another status.
    pub refused: u64,
    /// Posts that failed (connect, send or read error).
    pub failed: u64,
    /// Posts that ran out of their deadline.
    pub timed_out: u64,
    /// Ticks not posted to a target because its previous post was still in flight.
    pub skipped_busy: u64,
}

#[derive(Debug, Default)]
struct Counters {
    delivered: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    skipped_busy: AtomicU64,
}

#[derive(Debug)]
struct Target {
    addr: SocketAddr,
    busy: AtomicBool,
}

/// Posts own ticks to the other validators (see the module documentation).
#[derive(Clone)]
pub struct Forwarder {
    client: Client<HttpConnector, Full<Bytes>>,
    targets: Arc<Vec<Target>>,
    counters: Arc<Counters>,
    deadline: Duration,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("targets", &self.targets)
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// A forwarder to `targets` (their HTTP endpoints), each post bounded by `deadline`.
    pub fn new(targets: Vec<SocketAddr>, deadline: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(deadline));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Self {
            client,
            targets: Arc::new(
                targets
                    .into_iter()
                    .map(|addr| Target {
                        addr,
                        busy: AtomicBool::new(false),
                    })
                    .collect(),
            ),
            counters: Arc::new(Counters::default()),
            deadline,
        }
    }

    /// Posts `tick` (its encoding) to every target that has no post in flight, each in its own
    /// task on the current tokio runtime. Returns at once.
    pub fn forward(&self, tick: Vec<u8>) {
        let body = Bytes::from(tick);
        for i in 0..self.targets.len() {
            let Some(target) = self.targets.get(i) else {
                continue;
            };
            if target.busy.swap(true, Ordering::AcqRel) {
                self.counters.skipped_busy.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let this = self.clone();
            let body = body.clone();
            tokio::spawn(async move {
                this.post(i, body).await;
            });
        }
    }

    async fn post(&self, i: usize, body: Bytes) {
        let Some(target) = self.targets.get(i) else {
            return;
        };
        let addr = target.addr;
        let outcome = tokio::time::timeout(self.deadline, self.exchange(addr, body)).await;
        let c = &self.counters;
        match outcome {
            Ok(Ok(202 | 409)) => {
                c.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(code)) => {
                c.refused.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%addr, code, "tick forward refused");
            }
            Ok(Err(e)) => {
                c.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%addr, error = %e, "tick forward failed");
            }
            Err(_) => {
                c.timed_out.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%addr, deadline_ms = self.deadline.as_millis() as u64, "tick forward timed out");
            }
        }
        target.busy.store(false, Ordering::Release);
    }

    async fn exchange(&self, addr: SocketAddr, body: Bytes) -> Result<u16, String> {
        let req = hyper::Request::post(format!("http://{addr}/v1/ticks"))
            .header("content-type", "application/octet-stream")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        // Drain at most MAX_ANSWER_BYTES so the connection can be reused; a longer answer is
        // dropped with its connection.
        let _ = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await;
        Ok(code)
    }

    /// The counters so far.
    pub fn counters(&self) -> ForwardCounters {
        let c = &self.counters;
        ForwardCounters {
            delivered: c.delivered.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            timed_out: c.timed_out.load(Ordering::Relaxed),
            skipped_busy: c.skipped_busy.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers `202` at once.
    async fn quick() -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4_096];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {
                                let _ = s
                                    .write_all(
                                        b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n",
                                    )
                                    .await;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// A server that accepts and then drips: one byte of a status line every 10 s.
    async fn dripping() -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    for b in b"HTTP/1.1 202" {
                        if s.write_all(&[*b]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(10)).await;
                    }
                });
            }
        });
        addr
    }

    /// Regression (issue 23, item 5: sequential posts with per-read timeouts let one dripping
    /// endpoint stop a node's forwarding to everyone): the honest target gets every tick while
    /// the dripping one costs only its own slot, each of its posts ends at the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dripping_endpoint_never_holds_back_the_others() {
        let good = quick().await;
        let bad = dripping().await;
        let deadline = Duration::from_millis(300);
        let f = Forwarder::new(vec![bad, good], deadline);
        let start = tokio::time::Instant::now();
        for k in 0..10u8 {
            f.forward(vec![k; 8]);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let elapsed = start.elapsed();
        let c = f.counters();
        // The quick endpoint got every tick although the other one never answers.
        assert_eq!(c.delivered, 10, "{c:?}");
        // Every post to the dripping one ended as a timeout or was skipped while one was in
        // flight; none is lost from the counters.
        assert_eq!(c.timed_out + c.skipped_busy + c.failed, 10, "{c:?}");
        assert!(c.timed_out >= 1, "{c:?}");
        // One post in flight per target: at most one timeout per deadline of the run (bounds
        // that hold on a loaded machine too, where sleeps stretch).
        let most =
            u64::try_from(elapsed.as_millis() / deadline.as_millis()).unwrap_or(u64::MAX) + 1;
        assert!(c.timed_out <= most, "{c:?} in {elapsed:?}");
    }
}
