//! A node's bounded pool of verified client requests waiting for a block.
//!
//! Requests enter through the node's endpoint ([`crate::api`]) after their signature and bounds
//! are verified. The pool dedupes by digest (a client submits the same signed request to every
//! validator, and may retry), refuses a request whose `(client, number)` already executed (it
//! mirrors the ledger's [`ExecutedRequests`]), caps the requests of one client and the whole
//! pool (count and bytes), and counts every refusal by reason. The proposer takes the oldest
//! requests up to a block's bounds ([`Mempool::select`]); when a block is decided its requests
//! leave every node's pool ([`Mempool::after_block`]), with any other request whose
//! `(client, number)` has executed by then.

use std::collections::{BTreeMap, HashMap};

use ccron::host::{ClientId, DuplicateRequest, ExecutedRequests};
use serde::{Deserialize, Serialize};

use crate::request::SignedRequest;
use crate::types::Hash32;

/// Bounds of a [`Mempool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MempoolConfig {
    /// The most requests held.
    pub max_requests: usize,
    /// The most encoded bytes held.
    pub max_bytes: usize,
    /// The most requests held for one client.
    pub per_client: usize,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        Self {
            max_requests: 4_096,
            max_bytes: 4 << 20,
            per_client: 128,
        }
    }
}

/// Why the pool refused a (verified) request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The same signed request is already pending.
    #[error("the same request is already pending")]
    Pending,
    /// Its `(client, number)` already executed (or is below the client's window).
    #[error(transparent)]
    Executed(#[from] DuplicateRequest),
    /// The client has its cap of pending requests.
    #[error("client {client} has {cap} pending requests, the cap")]
    ClientFull {
        /// The client.
        client: ClientId,
        /// The cap.
        cap: usize,
    },
    /// The pool is full (count or bytes).
    #[error("mempool full ({requests} requests, {bytes} bytes)")]
    Full {
        /// Requests held.
        requests: usize,
        /// Bytes held.
        bytes: usize,
    },
}

/// What the pool did, counted (reported in the node's status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MempoolCounters {
    /// Requests admitted.
    pub accepted: u64,
    /// Refused: already pending.
    pub rejected_pending: u64,
    /// Refused: already executed.
    pub rejected_executed: u64,
    /// Refused: client cap.
    pub rejected_client_full: u64,
    /// Refused: pool full.
    pub rejected_full: u64,
    /// Refused before the pool: malformed, over a bound, or a bad signature (counted by the
    /// endpoint).
    pub rejected_invalid: u64,
    /// Removed because a decided block carried them or their number executed.
    pub removed_executed: u64,
    /// Requests held now.
    pub pending: u64,
    /// The executed-requests table's floor (`ccron::host::ExecutedRequests::floor`): a client
    /// that is not in the table (new, or evicted) numbers its requests at or above it.
    #[serde(default)]
    pub requests_floor: u64,
}

struct Entry {
    arrival: u64,
    request: SignedRequest,
    client: ClientId,
    bytes: usize,
}

/// The pool.
pub struct Mempool {
    cfg: MempoolConfig,
    by_digest: HashMap<Hash32, Entry>,
    /// Arrival order.
    order: BTreeMap<u64, Hash32>,
    per_client: HashMap<ClientId, usize>,
    bytes: usize,
    next_arrival: u64,
    /// The ledger's executed requests, mirrored (updated by [`Mempool::after_block`]).
    executed: ExecutedRequests,
    counters: MempoolCounters,
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("cfg", &self.cfg)
            .field("pending", &self.by_digest.len())
            .field("bytes", &self.bytes)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Mempool {
    /// Whether a request of `(client, number)` is pending in the pool.
    pub fn holds(&self, client: ClientId, number: u64) -> bool {
        self.by_digest
            .values()
            .any(|e| e.client == client && e.request.request.number == number)
    }

    /// Whether `(client, number)` executed (or is below the client's window), as far as the
    /// pool's mirror of the ledger knows.
    pub fn executed(&self, client: ClientId, number: u64) -> bool {
        self.executed.check(client, number).is_err()
    }

    /// An empty pool whose mirror of executed requests is `executed` (the ledger's, at start).
    pub fn new(cfg: MempoolConfig, executed: ExecutedRequests) -> Self {
        Self {
            cfg,
            by_digest: HashMap::new(),
            order: BTreeMap::new(),
            per_client: HashMap::new(),
            bytes: 0,
            next_arrival: 0,
            executed,
            counters: MempoolCounters::default(),
        }
    }

    /// Admits a verified request (the caller checked its signature and bounds).
    ///
    /// # Errors
    /// Why it was refused (counted).
    pub fn insert(&mut self, request: SignedRequest) -> Result<Hash32, Rejection> {
        let result = self.try_insert(request);
        if let Err(e) = &result {
            let c = &mut self.counters;
            match e {
                Rejection::Pending => c.rejected_pending += 1,
                Rejection::Executed(_) => c.rejected_executed += 1,
                Rejection::ClientFull { .. } => c.rejected_client_full += 1,
                Rejection::Full { .. } => c.rejected_full += 1,
            }
        }
        result
    }

    fn try_insert(&mut self, request: SignedRequest) -> Result<Hash32, Rejection> {
        let digest = request.digest();
        if self.by_digest.contains_key(&digest) {
            return Err(Rejection::Pending);
        }
        let client = request.client();
        self.executed.check(client, request.request.number)?;
        let held = self.per_client.get(&client).copied().unwrap_or(0);
        if held >= self.cfg.per_client {
            return Err(Rejection::ClientFull {
                client,
                cap: self.cfg.per_client,
            });
        }
        let bytes = request.encoded_len();
        if self.by_digest.len() >= self.cfg.max_requests
            || self.bytes.saturating_add(bytes) > self.cfg.max_bytes
        {
            return Err(Rejection::Full {
                requests: self.by_digest.len(),
                bytes: self.bytes,
            });
        }
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.order.insert(arrival, digest);
        *self.per_client.entry(client).or_insert(0) += 1;
        self.bytes += bytes;
        self.by_digest.insert(
            digest,
            Entry {
                arrival,
                request,
                client,
                bytes,
            },
        );
        self.counters.accepted += 1;
        self.counters.pending = self.by_digest.len() as u64;
        Ok(digest)
    }

    /// Counts a request refused before the pool (malformed, over a bound, bad signature).
    pub fn count_invalid(&mut self) {
        self.counters.rejected_invalid += 1;
    }

    /// The oldest pending requests, at most `max_count` of them and `max_bytes` encoded, one per
    /// `(client, number)`, skipping those already executed (for a proposal; they stay pending
    /// until a decided block carries them).
    pub fn select(&self, max_count: usize, max_bytes: usize) -> Vec<SignedRequest> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut taken = std::collections::BTreeSet::new();
        for digest in self.order.values() {
            if out.len() >= max_count {
                break;
            }
            let Some(e) = self.by_digest.get(digest) else {
                continue;
            };
            if bytes.saturating_add(e.bytes) > max_bytes {
                break;
            }
            let key = (e.client, e.request.request.number);
            if self.executed.check(key.0, key.1).is_err() || !taken.insert(key) {
                continue;
            }
            bytes += e.bytes;
            out.push(e.request.clone());
        }
        out
    }

    /// After a decided block: records its executed `(client, number)` pairs in the mirror and
    /// removes its requests, and every other request whose number has executed, from the pool.
    pub fn after_block(&mut self, decided: &[SignedRequest], executed: &[(ClientId, u64)]) {
        for &(client, number) in executed {
            let _ = self.executed.admit(client, number);
        }
        let mut gone: Vec<Hash32> = decided.iter().map(SignedRequest::digest).collect();
        if !executed.is_empty() {
            gone.extend(
                self.by_digest
                    .iter()
                    .filter(|(_, e)| {
                        self.executed
                            .check(e.client, e.request.request.number)
                            .is_err()
                    })
                    .map(|(d, _)| *d),
            );
        }
        for d in gone {
            self.remove(&d);
        }
    }

    fn remove(&mut self, digest: &Hash32) {
        let Some(e) = self.by_digest.remove(digest) else {
            return;
        };
        self.order.remove(&e.arrival);
        self.bytes = self.bytes.saturating_sub(e.bytes);
        if let Some(n) = self.per_client.get_mut(&e.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_client.remove(&e.client);
            }
        }
        self.counters.removed_executed += 1;
        self.counters.pending = self.by_digest.len() as u64;
    }

    /// Requests held.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The counters.
    pub fn counters(&self) -> MempoolCounters {
        MempoolCounters {
            requests_floor: self.executed.floor(),
            ..self.counters
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ClientRequest;
    use ed25519_dalek::SigningKey;

    fn req(k: u8, number: u64, payload: &[u8]) -> SignedRequest {
        let key = SigningKey::from_bytes(&[k; 32]);
        ClientRequest {
            client_key: key.verifying_key().to_bytes(),
            number,
            payload: payload.to_vec(),
        }
        .sign(&key)
    }

    #[test]
    fn dedupes_caps_and_counts() {
        let cfg = MempoolConfig {
            max_requests: 4,
            max_bytes: 10_000,
            per_client: 2,
        };
        let mut m = Mempool::new(cfg, ExecutedRequests::new());
        m.insert(req(1, 1, b"a")).unwrap();
        assert_eq!(m.insert(req(1, 1, b"a")), Err(Rejection::Pending));
        m.insert(req(1, 2, b"b")).unwrap();
        assert!(matches!(
            m.insert(req(1, 3, b"c")),
            Err(Rejection::ClientFull { cap: 2, .. })
        ));
        m.insert(req(2, 1, b"a")).unwrap();
        m.insert(req(3, 1, b"a")).unwrap();
        assert!(matches!(
            m.insert(req(4, 1, b"a")),
            Err(Rejection::Full { .. })
        ));
        let c = m.counters();
        assert_eq!(
            (
                c.accepted,
                c.rejected_pending,
                c.rejected_client_full,
                c.rejected_full,
                c.pending
            ),
            (4, 1, 1, 1, 4)
        );
        // Bytes bound.
        let mut small = Mempool::new(
            MempoolConfig {
                max_requests: 100,
                max_bytes: 300,
                per_client: 100,
            },
            ExecutedRequests::new(),
        );
        small.insert(req(1, 1, &[0; 150])).unwrap();
        assert!(matches!(
            small.insert(req(1, 2, &[0; 150])),
            Err(Rejection::Full { .. })
        ));
    }

    #[test]
    fn select_is_oldest_first_bounded_and_one_per_number() {
        let mut m = Mempool::new(MempoolConfig::default(), ExecutedRequests::new());
        m.insert(req(1, 1, b"x")).unwrap();
        m.insert(req(1, 1, b"other payload, same number")).unwrap();
        m.insert(req(2, 5, b"y")).unwrap();
        m.insert(req(1, 2, b"z")).unwrap();
        let s = m.select(10, usize::MAX);
        let keys: Vec<(u64, &[u8])> = s
            .iter()
            .map(|r| (r.request.number, r.request.payload.as_slice()))
            .collect();
        assert_eq!(keys, vec![(1, &b"x"[..]), (5, b"y"), (2, b"z")]);
        assert_eq!(m.select(2, usize::MAX).len(), 2);
        let one = req(1, 1, b"x").encoded_len();
        assert_eq!(m.select(10, one).len(), 1);
        assert_eq!(m.select(10, one - 1).len(), 0);
        assert_eq!(m.len(), 4, "selecting leaves them pending");
    }

    #[test]
    fn decided_requests_leave_and_executed_numbers_are_refused() {
        let mut m = Mempool::new(MempoolConfig::default(), ExecutedRequests::new());
        let a = req(1, 1, b"x");
        let a_twin = req(1, 1, b"same number");
        m.insert(a.clone()).unwrap();
        m.insert(a_twin.clone()).unwrap();
        m.insert(req(1, 2, b"y")).unwrap();
        m.after_block(std::slice::from_ref(&a), &[(a.client(), 1)]);
        assert_eq!(m.len(), 1, "the request and its same-number twin left");
        assert!(matches!(m.insert(a), Err(Rejection::Executed(_))));
        assert!(matches!(m.insert(a_twin), Err(Rejection::Executed(_))));
        assert_eq!(m.counters().removed_executed, 2);
        assert_eq!(m.counters().rejected_executed, 2);
        // A mirror taken from the ledger at start refuses what executed before the restart.
        let mut done = ExecutedRequests::new();
        done.admit(req(1, 9, b"").client(), 9).unwrap();
        let mut fresh = Mempool::new(MempoolConfig::default(), done);
        assert!(matches!(
            fresh.insert(req(1, 9, b"q")),
            Err(Rejection::Executed(_))
        ));
    }
}
