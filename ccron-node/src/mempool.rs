//! A node's bounded pool of verified client requests waiting for a block.
//!
//! Requests enter through the node's endpoint ([`crate::api`]) after their signature and bounds
//! are verified. The pool dedupes by digest (a client submits the same signed request to every
//! validator, and may retry), refuses a request whose `(client, number)` already executed (it
//! mirrors the ledger's [`ExecutedRequests`]) or lies above its client's ceiling (the ledger
//! would refuse it at execution: [`Rejection::OutOfWindow`], judged at the agreed time of the
//! last decided block), caps the requests of one client and the whole
//! pool (count and bytes), and counts every refusal by reason. The proposer takes the oldest
//! requests up to a block's bounds ([`Mempool::select`]); when a block is decided its requests
//! leave every node's pool ([`Mempool::after_block`]), with any other request whose
//! `(client, number)` has executed by then.

use std::collections::{BTreeMap, HashMap};

use ccron::host::{ClientId, DuplicateRequest, ExecutedRequests, Millis};
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
    /// Its `(client, number)` already executed (or is below the client's window or floor).
    #[error(transparent)]
    Executed(DuplicateRequest),
    /// Its number is above the client's ceiling
    /// ([`DuplicateRequest::AheadOfWindow`]): execution would refuse it.
    #[error("out of the client's window: {0}")]
    OutOfWindow(DuplicateRequest),
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
    /// Refused: above the client's ceiling.
    #[serde(default)]
    pub rejected_out_of_window: u64,
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
    /// The executed-requests table's base (`ccron::host::ExecutedRequests::floor`): the lowest
    /// number of a client never seen (0, or the frozen floor of a table migrated from before
    /// per-client watermarks); an evicted client numbers above its own watermark.
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
    /// The agreed time of the last decided block (`None` before the first: the ceiling is
    /// then left to execution).
    now_ms: Option<Millis>,
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
        self.executed.settled(client, number)
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
            now_ms: None,
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
                Rejection::OutOfWindow(_) => c.rejected_out_of_window += 1,
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
        self.check_number(client, request.request.number)?;
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

    /// The ledger's verdict on `(client, number)` as of the last decided block: settled, above
    /// the ceiling (only once a block's agreed time is known), or fine.
    fn check_number(&self, client: ClientId, number: u64) -> Result<(), Rejection> {
        let now = self.now_ms;
        match self.executed.check(client, number, now) {
            Ok(()) => Ok(()),
            Err(e @ DuplicateRequest::AheadOfWindow { .. }) if now.is_some() => {
                Err(Rejection::OutOfWindow(e))
            }
            Err(DuplicateRequest::AheadOfWindow { .. }) => Ok(()),
            Err(e) => Err(Rejection::Executed(e)),
        }
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
            if self.check_number(key.0, key.1).is_err() || !taken.insert(key) {
                continue;
            }
            bytes += e.bytes;
            out.push(e.request.clone());
        }
        out
    }

    /// [`after_block_at`](Self::after_block_at) at the agreed time of the last block seen (for
    /// callers without the block's time; the node passes it).
    pub fn after_block(&mut self, decided: &[SignedRequest], executed: &[(ClientId, u64)]) {
        let now = self.now_ms;
        self.judge(decided, executed, now);
    }

    /// After a decided block of agreed time `agreed_time_ms`: records its ordered
    /// `(client, number)` pairs in the mirror (judged as the ledger judged them, at the block's
    /// time) and removes its requests, and every other request whose number has executed, from
    /// the pool.
    pub fn after_block_at(
        &mut self,
        decided: &[SignedRequest],
        executed: &[(ClientId, u64)],
        agreed_time_ms: Millis,
    ) {
        self.judge(decided, executed, Some(agreed_time_ms));
    }

    fn judge(
        &mut self,
        decided: &[SignedRequest],
        executed: &[(ClientId, u64)],
        now_ms: Option<Millis>,
    ) {
        self.now_ms = now_ms;
        for &(client, number) in executed {
            let _ = self.executed.admit(client, number, self.now_ms);
        }
        let mut gone: Vec<Hash32> = decided.iter().map(SignedRequest::digest).collect();
        if !executed.is_empty() {
            gone.extend(
                self.by_digest
                    .iter()
                    .filter(|(_, e)| self.executed.settled(e.client, e.request.request.number))
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
        .sign(&crate::crypto::SigningDomain::V1, &key)
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
        done.admit(req(1, 9, b"").client(), 9, None).unwrap();
        let mut fresh = Mempool::new(MempoolConfig::default(), done);
        assert!(matches!(
            fresh.insert(req(1, 9, b"q")),
            Err(Rejection::Executed(_))
        ));
    }

    /// A number above its client's ceiling is refused before consensus, typed and counted,
    /// once a block's agreed time is known (before, execution decides); it is not "executed"
    /// (it may fit later), and a clock-numbered request (Unix ms) is within the ceiling.
    #[test]
    fn numbers_above_the_ceiling_are_refused_before_consensus() {
        let now: Millis = 1_800_000_000_000;
        let mut m = Mempool::new(MempoolConfig::default(), ExecutedRequests::new());
        m.insert(req(1, u64::MAX - 1, b"before any block")).unwrap();
        let first = req(2, 1, b"a");
        m.after_block_at(std::slice::from_ref(&first), &[(first.client(), 1)], now);
        let far = req(3, u64::MAX - 1, b"x");
        assert!(matches!(
            m.insert(far),
            Err(Rejection::OutOfWindow(
                DuplicateRequest::AheadOfWindow { .. }
            ))
        ));
        assert!(!m.executed(req(3, 0, b"").client(), u64::MAX - 1));
        m.insert(req(3, now as u64, b"clock-numbered")).unwrap();
        m.insert(req(2, 2, b"consecutive")).unwrap();
        assert_eq!(m.counters().rejected_out_of_window, 1);
        let picked: Vec<u64> = m
            .select(10, usize::MAX)
            .iter()
            .map(|r| r.request.number)
            .collect();
        assert_eq!(
            picked,
            vec![now as u64, 2],
            "the one admitted before is not proposed"
        );
    }
}
