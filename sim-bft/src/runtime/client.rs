//! [`ClusterClient`]: a client of the threaded runtime that never loses a request silently.
//!
//! It numbers and signs its requests, paces them (never more in flight than the replicas'
//! request window allows: a replica refuses a number more than 256 below the client's newest
//! executed one), believes a result only when f+1 replicas sent the same one (verified
//! replies: at least one of them is honest), and re-sends a request without a result after
//! `resend_after_ms` or when [`ThreadedCluster::submit`] could not queue it: the replicas
//! execute each `(client, number)` at most once, so a re-send is harmless.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::crypto::{Keyring, SigningKey, client_signing_key};
use crate::node::{ClientId, Millis, NodeId};
use crate::protocol::{SignedReply, client_request_bytes};

use super::{ClientReply, SubmitError, ThreadedCluster, wall_clock_ms};

/// The replicas' request window: a request more than this many numbers below the client's
/// newest executed one is refused (`docs/replica.md`, "Clients").
pub const REQUEST_WINDOW: u64 = 256;

/// How a [`ClusterClient`] paces and re-sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// Most requests without a result at once (at most `REQUEST_WINDOW - 1`; larger values are
    /// lowered to it).
    pub max_in_flight: usize,
    /// A request without f+1 equal replies after this long is sent again.
    pub resend_after_ms: Millis,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            resend_after_ms: 1_000,
        }
    }
}

/// Why a [`ClusterClient`] did not take or finish a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// `max_in_flight` requests await their results: wait for one ([`ClusterClient::on_reply`])
    /// before sending more. Nothing was sent.
    #[error("{in_flight} requests in flight: the window is full")]
    WindowFull {
        /// Requests awaiting results.
        in_flight: usize,
    },
    /// The request could not be encoded or signed. Nothing was sent.
    #[error("request not encoded: {0}")]
    Encode(String),
    /// No f+1 equal replies within the deadline ([`ClusterClient::call`]); the request stays
    /// pending and is re-sent by [`ClusterClient::poll`].
    #[error("request {number}: no f+1 equal replies within {waited_ms} ms")]
    Timeout {
        /// The request number.
        number: u64,
        /// How long the call waited.
        waited_ms: Millis,
    },
}

#[derive(Debug)]
struct Pending {
    bytes: Vec<u8>,
    /// When it was last queued on every replica (`None`: not yet, re-send at the next poll).
    sent_ms: Option<Millis>,
    replies: BTreeMap<NodeId, Vec<u8>>,
}

/// A client of a [`ThreadedCluster`] (see the module documentation). One per client id; it
/// reads replies only through [`ClusterClient::on_reply`] (or [`ClusterClient::call`], which
/// takes them from the cluster's reply channel: one calling client per cluster).
#[derive(Debug)]
pub struct ClusterClient {
    id: ClientId,
    key: SigningKey,
    ring: Keyring,
    f: usize,
    cfg: ClientConfig,
    next: u64,
    pending: BTreeMap<u64, Pending>,
    resent: u64,
    not_queued: u64,
    bad_replies: u64,
}

impl ClusterClient {
    /// Client `id` of the cluster whose keys come from `key_seed` (`n` replicas, `num_clients`
    /// user clients: the replicas' `ReplicaConfig`), tolerating `f` faulty replicas, its first
    /// request numbered `first_number`.
    pub fn new(
        key_seed: u64,
        n: u32,
        num_clients: u64,
        id: ClientId,
        f: usize,
        cfg: ClientConfig,
    ) -> Self {
        Self {
            id,
            key: client_signing_key(key_seed, id),
            ring: Keyring::from_seed(key_seed, n, num_clients),
            f,
            cfg: ClientConfig {
                max_in_flight: cfg.max_in_flight.clamp(1, (REQUEST_WINDOW - 1) as usize),
                ..cfg
            },
            next: 0,
            pending: BTreeMap::new(),
            resent: 0,
            not_queued: 0,
            bad_replies: 0,
        }
    }

    /// Requests awaiting their result.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Re-sends so far, and submits some replica could not queue.
    pub fn resent(&self) -> (u64, u64) {
        (self.resent, self.not_queued)
    }

    /// Replies that failed verification or named another client.
    pub fn bad_replies(&self) -> u64 {
        self.bad_replies
    }

    /// Signs `payload` as the next request and submits it; returns its number. A submit that
    /// some replica could not queue keeps the request pending: [`Self::poll`] re-sends it.
    ///
    /// # Errors
    /// [`ClientError::WindowFull`] (pacing: nothing sent), [`ClientError::Encode`].
    pub fn send(
        &mut self,
        cluster: &ThreadedCluster,
        payload: Vec<u8>,
    ) -> Result<u64, ClientError> {
        let oldest = self.pending.keys().next().copied();
        let window_full = self.pending.len() >= self.cfg.max_in_flight
            || oldest.is_some_and(|o| self.next + 1 - o >= REQUEST_WINDOW);
        if window_full {
            return Err(ClientError::WindowFull {
                in_flight: self.pending.len(),
            });
        }
        let number = self.next + 1;
        let bytes = client_request_bytes(&self.key, self.id, number, payload)
            .map_err(|e| ClientError::Encode(e.to_string()))?;
        self.next = number;
        let mut p = Pending {
            bytes,
            sent_ms: None,
            replies: BTreeMap::new(),
        };
        self.submit(cluster, &mut p);
        self.pending.insert(number, p);
        Ok(number)
    }

    fn submit(&mut self, cluster: &ThreadedCluster, p: &mut Pending) {
        match cluster.submit(&p.bytes) {
            Ok(()) => p.sent_ms = Some(wall_clock_ms()),
            Err(SubmitError::NotQueued { queued, .. }) if queued > self.f => {
                // Enough replicas have it to reach the primary; re-sent on the timer anyway.
                self.not_queued += 1;
                p.sent_ms = Some(wall_clock_ms());
            }
            Err(e) => {
                self.not_queued += 1;
                tracing::debug!(client = self.id, error = %e, "request not queued: re-sent at the next poll");
                p.sent_ms = None;
            }
        }
    }

    /// Re-sends every pending request never queued or older than `resend_after_ms`; returns
    /// how many.
    pub fn poll(&mut self, cluster: &ThreadedCluster) -> usize {
        let now = wall_clock_ms();
        let due: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| {
                p.sent_ms
                    .is_none_or(|t| now.saturating_sub(t) >= self.cfg.resend_after_ms)
            })
            .map(|(n, _)| *n)
            .collect();
        for n in &due {
            if let Some(mut p) = self.pending.remove(n) {
                self.submit(cluster, &mut p);
                self.pending.insert(*n, p);
                self.resent += 1;
            }
        }
        due.len()
    }

    /// Takes one reply: `Some((number, result))` once f+1 replicas sent the same verified
    /// result for a pending request of this client (it is then done). Replies of other
    /// clients are ignored (`None`), unverifiable ones counted.
    pub fn on_reply(&mut self, reply: &ClientReply) -> Option<(u64, Vec<u8>)> {
        if reply.client != self.id {
            return None;
        }
        let Ok(r) = SignedReply::open(&reply.bytes, &self.ring) else {
            self.bad_replies += 1;
            return None;
        };
        if r.client != self.id || r.replica != reply.from {
            self.bad_replies += 1;
            return None;
        }
        let p = self.pending.get_mut(&r.req_seq)?;
        p.replies.insert(r.replica, r.result);
        let mut counts: BTreeMap<&[u8], usize> = BTreeMap::new();
        for result in p.replies.values() {
            *counts.entry(result.as_slice()).or_insert(0) += 1;
        }
        let agreed = counts
            .into_iter()
            .find(|(_, c)| *c > self.f)
            .map(|(result, _)| result.to_vec())?;
        self.pending.remove(&r.req_seq);
        Some((r.req_seq, agreed))
    }

    /// Sends `payload` and waits up to `timeout` for its result (f+1 equal replies), re-sending
    /// on the way. Takes replies from the cluster's reply channel: replies of this client's
    /// other pending requests are applied ([`Self::on_reply`]), other clients' are dropped.
    ///
    /// # Errors
    /// [`ClientError`]: the window full, encoding, or [`ClientError::Timeout`] (the request
    /// stays pending).
    pub fn call(
        &mut self,
        cluster: &ThreadedCluster,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ClientError> {
        let number = self.send(cluster, payload)?;
        let start = wall_clock_ms();
        let limit = Millis::try_from(timeout.as_millis()).unwrap_or(Millis::MAX);
        loop {
            let waited = wall_clock_ms().saturating_sub(start);
            if waited >= limit {
                return Err(ClientError::Timeout {
                    number,
                    waited_ms: waited,
                });
            }
            if let Ok(reply) = cluster.replies().recv_timeout(Duration::from_millis(20))
                && let Some((n, result)) = self.on_reply(&reply)
                && n == number
            {
                return Ok(result);
            }
            self.poll(cluster);
        }
    }
}

/// The threaded runtime as a [`ccron_http::relay::Submit`]: a relay's results and progress
/// reports, signed as client `id` (the ledger's `Policy::outbox_consumer`) and submitted to
/// every replica. A submit some replica could not queue is an error, which the relay re-sends
/// (as a new request: the ledger applies each result once).
pub struct ClusterSubmit {
    cluster: std::sync::Arc<ThreadedCluster>,
    id: ClientId,
    key: SigningKey,
    next: u64,
}

impl std::fmt::Debug for ClusterSubmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSubmit")
            .field("id", &self.id)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl ClusterSubmit {
    /// Client `id` (keys from `key_seed`) of `cluster`, its first request numbered
    /// `first_number` (above any number this client used before: a restarted relay passes one
    /// past the last it used, or a fresh client id).
    pub fn new(
        cluster: std::sync::Arc<ThreadedCluster>,
        key_seed: u64,
        id: ClientId,
        first_number: u64,
    ) -> Self {
        Self {
            cluster,
            id,
            key: client_signing_key(key_seed, id),
            next: first_number.saturating_sub(1),
        }
    }
}

impl ClusterSubmit {
    /// The number the next request gets (what a restarted relay passes as `first_number`).
    pub fn next_number(&self) -> u64 {
        self.next.saturating_add(1)
    }
}

impl ccron_http::relay::Submit for ClusterSubmit {
    async fn submit(&mut self, payload: Vec<u8>) -> Result<(), ccron_http::SubmitError> {
        self.next += 1;
        let bytes = client_request_bytes(&self.key, self.id, self.next, payload)
            .map_err(|e| ccron_http::SubmitError::Refused(e.to_string()))?;
        self.cluster
            .submit(&bytes)
            .map_err(|e| ccron_http::SubmitError::NotSent(e.to_string()))
    }
}
