//! Test helpers shared by the catch-up modules' tests: peers' addresses and histories, and
//! raw peers answering whatever a test needs on a real socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::CatchUpError;
use super::serve::HistoryInfo;

/// A peer address (nobody listens: for the pure functions).
pub(crate) fn peer(i: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, i], 1))
}

/// A history answer: first height `first`, 50 heights, an offer at `offer`.
pub(crate) fn h(first: u64, offer: Option<u64>) -> Result<HistoryInfo, CatchUpError> {
    Ok(HistoryInfo {
        first_height: first,
        last_height: first + 50,
        offer_height: offer,
        ..HistoryInfo::default()
    })
}

/// What a raw peer does after reading a request.
#[derive(Debug, Clone)]
pub(crate) enum Raw {
    /// `head`, then `body` (a byte every `drip` when set).
    Answer {
        head: &'static str,
        body: Vec<u8>,
        drip: Option<Duration>,
    },
    /// `head`, then `chunk` again and again until the client goes away.
    Endless { head: &'static str, chunk: Vec<u8> },
}

/// What a raw peer saw: connections (and those still open), the most bytes written on one,
/// the longest one (ms).
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) connections: AtomicU64,
    pub(crate) open: AtomicU64,
    pub(crate) max_bytes: AtomicU64,
    pub(crate) max_ms: AtomicU64,
}

/// A peer on a real socket answering every connection as `raw` says.
pub(crate) async fn raw_peer(raw: Raw) -> (SocketAddr, Arc<Seen>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            counts.connections.fetch_add(1, Ordering::Relaxed);
            counts.open.fetch_add(1, Ordering::Relaxed);
            let counts = counts.clone();
            let raw = raw.clone();
            tokio::spawn(async move {
                let t = tokio::time::Instant::now();
                let mut buf = vec![0u8; 4_096];
                let _ = s.read(&mut buf).await;
                let mut bytes = 0u64;
                match raw {
                    Raw::Answer { head, body, drip } => {
                        let _ = s.write_all(head.as_bytes()).await;
                        match drip {
                            Some(d) => {
                                for b in body {
                                    if s.write_all(&[b]).await.is_err() {
                                        break;
                                    }
                                    bytes += 1;
                                    tokio::time::sleep(d).await;
                                }
                            }
                            None => {
                                if s.write_all(&body).await.is_ok() {
                                    bytes = body.len() as u64;
                                }
                            }
                        }
                    }
                    Raw::Endless { head, chunk } => {
                        let mut ok = s.write_all(head.as_bytes()).await.is_ok();
                        while ok {
                            ok = s.write_all(&chunk).await.is_ok();
                            bytes += chunk.len() as u64;
                        }
                    }
                }
                let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
                counts.max_bytes.fetch_max(bytes, Ordering::Relaxed);
                counts.max_ms.fetch_max(ms, Ordering::Relaxed);
                counts.open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    (addr, seen)
}

/// A raw peer answering `head` then `body` (a byte every `drip` when set).
pub(crate) async fn answering(
    head: &'static str,
    body: Vec<u8>,
    drip: Option<Duration>,
) -> SocketAddr {
    raw_peer(Raw::Answer { head, body, drip }).await.0
}
