//! ClientsManager: exactly-once bookkeeping, pending requests and the reply cache.
//!
//! A client's request `req_seq` executes at most once. A client may have several requests
//! outstanding and the network may reorder them, so requests need not execute in `req_seq`
//! order: each record keeps the highest executed number and, within [`EXECUTED_WINDOW`] below
//! it, the exact set of numbers *not* executed yet (the gaps). A request is a duplicate when it
//! is the highest, lies below the window, or lies in the window and is not a gap; anything else
//! is still executable. (The first design compared against the highest number only, so a lower
//! request overtaken by a higher one was skipped as a duplicate and lost.) The reply cache holds
//! the highest request's result (re-sent for an exact repeat). Pending
//! requests are kept in arrival order (a `BTreeMap` keyed by an arrival counter) so that batches
//! are formed deterministically, and are bounded in total and per client.

use std::collections::BTreeMap;

use bincode::{Decode, Encode};

use crate::node::ClientId;
use crate::protocol::SignedRequest;

/// How far below a client's highest executed request number a lower one may still execute.
/// Requests delayed by more than this many of their client's later requests are refused as
/// too old (exactly-once is kept; the client must resend under a new number). Bounds the gap
/// list a hostile client can make a record hold.
pub const EXECUTED_WINDOW: u64 = 256;

/// What the replicated state remembers of a client (part of checkpoints).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ClientRecord {
    /// The client.
    pub client: ClientId,
    /// Its highest executed request number.
    pub last_req_seq: u64,
    /// Request numbers in `(last_req_seq - EXECUTED_WINDOW, last_req_seq)` not executed yet,
    /// ascending (normally empty: only reordering leaves gaps).
    pub gaps: Vec<u64>,
    /// The reply cache: the replies of the client's [`REPLY_CACHE`] highest executed requests,
    /// ascending by request number, so a retransmission of any of them (a client may keep
    /// several requests outstanding) is answered again, not only the highest one's.
    pub replies: Vec<CachedReply>,
}

/// How many of a client's most recent replies its record keeps for re-sending.
pub const REPLY_CACHE: usize = 16;

/// One cached reply (part of checkpoints).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct CachedReply {
    /// The client's request number.
    pub req_seq: u64,
    /// Sequence number of the batch that executed it.
    pub batch_seq: u64,
    /// The application's result.
    pub result: Vec<u8>,
}

impl ClientRecord {
    /// The cached reply of request `req_seq`, if it is among the most recent ones.
    pub fn reply(&self, req_seq: u64) -> Option<&CachedReply> {
        self.replies
            .binary_search_by_key(&req_seq, |r| r.req_seq)
            .ok()
            .and_then(|i| self.replies.get(i))
    }

    fn cache_reply(&mut self, reply: CachedReply) {
        match self
            .replies
            .binary_search_by_key(&reply.req_seq, |r| r.req_seq)
        {
            Ok(i) => self.replies[i] = reply,
            Err(i) => self.replies.insert(i, reply),
        }
        if self.replies.len() > REPLY_CACHE {
            self.replies.remove(0);
        }
    }
}

/// A request waiting to be ordered.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The request.
    pub request: SignedRequest,
    /// Local clock when it arrived.
    pub arrived_ms: i64,
    /// Sequence number of the batch that proposes it in the current view, if any.
    pub proposed_in: Option<u64>,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Newly pending.
    Added,
    /// Already pending (same client and number).
    AlreadyPending,
    /// Already executed.
    Executed,
    /// Pending limits reached.
    Full,
}

/// The ClientsManager.
#[derive(Debug, Clone, Default)]
pub struct ClientsManager {
    records: BTreeMap<ClientId, ClientRecord>,
    pending: BTreeMap<(ClientId, u64), (u64, Pending)>,
    /// The *unproposed* pending requests by arrival (what the next batch takes from).
    order: BTreeMap<u64, (ClientId, u64)>,
    /// Every pending request by arrival, proposed or not (the oldest one bounds the time to a
    /// view change: see [`Self::oldest_pending`]).
    by_arrival: BTreeMap<u64, (ClientId, u64)>,
    per_client: BTreeMap<ClientId, usize>,
    next_arrival: u64,
    max_pending: usize,
    max_per_client: usize,
    /// The cap of replicas' internal clients (at least `max_per_client`): a replica's tick
    /// throttle keeps at most one tick pending per component, so this is sized from the
    /// number of listed components, not from what a user client may queue.
    max_per_internal_client: usize,
    /// Bytes of all pending requests ([`pending_size`] each) and per client.
    bytes: usize,
    client_bytes: BTreeMap<ClientId, usize>,
    /// Byte caps (0: none): in all, and per user client.
    max_bytes: usize,
    max_bytes_per_client: usize,
}

/// What one pending request counts against the byte caps: its payload plus a fixed overhead
/// for the rest of the signed request and the bookkeeping.
pub fn pending_size(r: &SignedRequest) -> usize {
    r.request.payload.len().saturating_add(128)
}

impl ClientsManager {
    /// A manager holding at most `max_pending` requests, `max_per_client` per client.
    pub fn new(max_pending: usize, max_per_client: usize) -> Self {
        Self {
            max_pending,
            max_per_client,
            max_per_internal_client: max_per_client,
            ..Self::default()
        }
    }

    /// Also bounds the pending requests by bytes ([`pending_size`]): at most `total` in all and
    /// `per_client` per user client (0: no bound). A count bound alone let 20,000 requests of
    /// 64 KiB (1.25 GiB) pile up.
    pub fn with_byte_caps(mut self, total: usize, per_client: usize) -> Self {
        self.max_bytes = total;
        self.max_bytes_per_client = per_client;
        self
    }

    /// Bytes of the pending requests.
    pub fn pending_bytes(&self) -> usize {
        self.bytes
    }

    fn bytes_fit(&self, client: ClientId, size: usize) -> bool {
        let user = crate::crypto::internal_client_owner(client).is_none();
        let mine = self.client_bytes.get(&client).copied().unwrap_or(0);
        (self.max_bytes == 0 || self.bytes.saturating_add(size) <= self.max_bytes)
            && (!user
                || self.max_bytes_per_client == 0
                || mine.saturating_add(size) <= self.max_bytes_per_client)
    }

    /// Lets each replica's internal client hold up to `cap` pending requests (never fewer
    /// than a user client may).
    pub fn with_internal_cap(mut self, cap: usize) -> Self {
        self.max_per_internal_client = cap.max(self.max_per_client);
        self
    }

    fn cap_of(&self, client: ClientId) -> usize {
        if crate::crypto::internal_client_owner(client).is_some() {
            self.max_per_internal_client
        } else {
            self.max_per_client
        }
    }

    /// The record of `client`.
    pub fn record(&self, client: ClientId) -> Option<&ClientRecord> {
        self.records.get(&client)
    }

    /// The highest executed request number of `client` (0 when none).
    pub fn last_req_seq(&self, client: ClientId) -> u64 {
        self.records.get(&client).map_or(0, |r| r.last_req_seq)
    }

    /// Whether `client`'s request `req_seq` must not execute (again): it executed, or it is
    /// older than the window below the client's highest executed request.
    pub fn is_executed(&self, client: ClientId, req_seq: u64) -> bool {
        let Some(r) = self.records.get(&client) else {
            return req_seq == 0;
        };
        if req_seq > r.last_req_seq {
            return false;
        }
        if req_seq.saturating_add(EXECUTED_WINDOW) <= r.last_req_seq {
            return true;
        }
        r.gaps.binary_search(&req_seq).is_err()
    }

    /// Admits `request` as pending.
    pub fn admit(&mut self, request: SignedRequest, now_ms: i64) -> Admission {
        let key = (request.request.client, request.request.req_seq);
        if self.is_executed(key.0, key.1) {
            return Admission::Executed;
        }
        if self.pending.contains_key(&key) {
            return Admission::AlreadyPending;
        }
        let count = self.per_client.get(&key.0).copied().unwrap_or(0);
        let size = pending_size(&request);
        if self.pending.len() >= self.max_pending
            || count >= self.cap_of(key.0)
            || !self.bytes_fit(key.0, size)
        {
            return Admission::Full;
        }
        self.bytes = self.bytes.saturating_add(size);
        *self.client_bytes.entry(key.0).or_insert(0) += size;
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.order.insert(arrival, key);
        self.by_arrival.insert(arrival, key);
        self.per_client.insert(key.0, count + 1);
        self.pending.insert(
            key,
            (
                arrival,
                Pending {
                    request,
                    arrived_ms: now_ms,
                    proposed_in: None,
                },
            ),
        );
        Admission::Added
    }

    /// Whether one more request of `client` would fit the pending limits.
    pub fn has_room(&self, client: ClientId) -> bool {
        self.pending.len() < self.max_pending
            && self.per_client.get(&client).copied().unwrap_or(0) < self.cap_of(client)
            && self.bytes_fit(client, 128)
    }

    /// Whether `(client, req_seq)` is pending.
    pub fn is_pending(&self, client: ClientId, req_seq: u64) -> bool {
        self.pending.contains_key(&(client, req_seq))
    }

    /// The pending request `(client, req_seq)`.
    pub fn pending(&self, client: ClientId, req_seq: u64) -> Option<&Pending> {
        self.pending.get(&(client, req_seq)).map(|(_, p)| p)
    }

    /// Number of pending requests.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Removes a pending request.
    pub fn remove(&mut self, client: ClientId, req_seq: u64) {
        if let Some((arrival, p)) = self.pending.remove(&(client, req_seq)) {
            let size = pending_size(&p.request);
            self.bytes = self.bytes.saturating_sub(size);
            if let Some(b) = self.client_bytes.get_mut(&client) {
                *b = b.saturating_sub(size);
                if *b == 0 {
                    self.client_bytes.remove(&client);
                }
            }
            self.order.remove(&arrival);
            self.by_arrival.remove(&arrival);
            if let Some(c) = self.per_client.get_mut(&client) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    self.per_client.remove(&client);
                }
            }
        }
    }

    /// Up to `max` unproposed pending requests in arrival order, marking them proposed in `seq`.
    pub fn take_batch(&mut self, max: usize, seq: u64) -> Vec<SignedRequest> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some((_, p)) = self.pending.get_mut(&key) {
                p.proposed_in = Some(seq);
                out.push(p.request.clone());
            }
        }
        out
    }

    /// Arrival time of the oldest unproposed pending request and how many are unproposed.
    pub fn unproposed(&self) -> (Option<i64>, usize) {
        let oldest = self
            .order
            .first_key_value()
            .and_then(|(_, k)| self.pending.get(k))
            .map(|(_, p)| p.arrived_ms);
        (oldest, self.order.len())
    }

    /// The pending request (proposed or not) this replica admitted first, and its local arrival
    /// time: the request that has waited longest.
    pub fn oldest_pending(&self) -> Option<((ClientId, u64), i64)> {
        let (_, key) = self.by_arrival.first_key_value()?;
        let (_, p) = self.pending.get(key)?;
        Some((*key, p.arrived_ms))
    }

    /// Marks `(client, req_seq)` proposed in `seq` (when it appears in an accepted batch).
    pub fn mark_proposed(&mut self, client: ClientId, req_seq: u64, seq: u64) {
        if let Some((arrival, p)) = self.pending.get_mut(&(client, req_seq)) {
            p.proposed_in = Some(seq);
            self.order.remove(arrival);
        }
    }

    /// Forgets every proposal mark (a new view re-proposes from scratch).
    pub fn clear_proposed(&mut self) {
        for (key, (arrival, p)) in self.pending.iter_mut() {
            if p.proposed_in.take().is_some() {
                self.order.insert(*arrival, *key);
            }
        }
    }

    /// The pending requests not proposed in the current view, in arrival order (at most `max`).
    pub fn unproposed_requests(&self, max: usize) -> Vec<SignedRequest> {
        self.order
            .values()
            .take(max)
            .filter_map(|k| self.pending.get(k))
            .map(|(_, p)| p.request.clone())
            .collect()
    }

    /// Records that `client`'s `req_seq` executed in batch `seq` with `result` (the caller
    /// checked [`Self::is_executed`] first), and drops the pending requests it settles: this one,
    /// and those that fell below the window.
    pub fn record_executed(&mut self, client: ClientId, req_seq: u64, seq: u64, result: Vec<u8>) {
        let rec = self.records.entry(client).or_insert_with(|| ClientRecord {
            client,
            last_req_seq: 0,
            gaps: Vec::new(),
            replies: Vec::new(),
        });
        if req_seq > rec.last_req_seq {
            // Everything skipped between the old highest and this one is a new gap (within
            // the window; older numbers are settled as too old).
            let floor = req_seq.saturating_sub(EXECUTED_WINDOW - 1).max(1);
            let first_new = rec.last_req_seq.saturating_add(1).max(floor);
            rec.gaps.retain(|g| *g >= floor);
            rec.gaps.extend(first_new..req_seq);
            rec.last_req_seq = req_seq;
        } else if let Ok(i) = rec.gaps.binary_search(&req_seq) {
            rec.gaps.remove(i);
        }
        rec.cache_reply(CachedReply {
            req_seq,
            batch_seq: seq,
            result,
        });
        let low = rec.last_req_seq.saturating_sub(EXECUTED_WINDOW - 1);
        let mut settled: Vec<u64> = self
            .pending
            .range((client, 0)..(client, low))
            .map(|((_, r), _)| *r)
            .collect();
        settled.push(req_seq);
        for r in settled {
            self.remove(client, r);
        }
    }

    /// The replicated part (records), in client order, for checkpoints.
    pub fn records_snapshot(&self) -> Vec<ClientRecord> {
        self.records.values().cloned().collect()
    }

    /// Replaces the records (state transfer), dropping pending requests they cover.
    pub fn restore_records(&mut self, records: Vec<ClientRecord>) {
        self.records = records.into_iter().map(|r| (r.client, r)).collect();
        let stale: Vec<(ClientId, u64)> = self
            .pending
            .keys()
            .filter(|(c, r)| self.is_executed(*c, *r))
            .copied()
            .collect();
        for (c, r) in stale {
            self.remove(c, r);
        }
    }

    /// Consistency of the internal indexes (for `check_invariants`).
    pub fn check(&self) -> Result<(), String> {
        let unproposed = self
            .pending
            .values()
            .filter(|(_, p)| p.proposed_in.is_none())
            .count();
        if self.order.len() != unproposed {
            return Err(format!(
                "order index has {} keys for {} unproposed",
                self.order.len(),
                unproposed
            ));
        }
        for r in self.records.values() {
            let low = r.last_req_seq.saturating_sub(EXECUTED_WINDOW);
            if !r.gaps.windows(2).all(|w| w[0] < w[1])
                || r.gaps.iter().any(|g| *g <= low || *g >= r.last_req_seq)
            {
                return Err(format!("client {} gaps out of order or window", r.client));
            }
            if r.replies.len() > REPLY_CACHE
                || !r.replies.windows(2).all(|w| w[0].req_seq < w[1].req_seq)
                || r.replies.iter().any(|c| c.req_seq > r.last_req_seq)
            {
                return Err(format!(
                    "client {} reply cache out of order or bounds",
                    r.client
                ));
            }
        }
        if self.by_arrival.len() != self.pending.len()
            || self
                .by_arrival
                .iter()
                .any(|(a, k)| self.pending.get(k).is_none_or(|(pa, _)| pa != a))
        {
            return Err("arrival index disagrees with pending".into());
        }
        let total: usize = self.per_client.values().sum();
        if total != self.pending.len() {
            return Err("per-client counts disagree with pending".into());
        }
        let bytes: usize = self
            .pending
            .values()
            .map(|(_, p)| pending_size(&p.request))
            .sum();
        if bytes != self.bytes || self.client_bytes.values().sum::<usize>() != bytes {
            return Err("pending byte counts disagree with pending".into());
        }
        if self.max_bytes > 0 && self.bytes > self.max_bytes {
            return Err("pending bytes above the cap".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exec(m: &mut ClientsManager, client: ClientId, req_seq: u64) -> bool {
        if m.is_executed(client, req_seq) {
            return false;
        }
        m.record_executed(client, req_seq, req_seq, req_seq.to_le_bytes().to_vec());
        true
    }

    fn request(client: ClientId, req_seq: u64) -> SignedRequest {
        SignedRequest {
            request: crate::protocol::Request {
                client,
                req_seq,
                kind: crate::protocol::RequestKind::Write,
                payload: Vec::new(),
            },
            sig: [0; 64],
        }
    }

    /// Regression (issue 9, pending requests bounded by count only: 20,000 maximal requests
    /// could pin 1.25 GiB): the byte caps hold, in all and per user client, and free up when
    /// requests leave.
    #[test]
    fn pending_requests_are_bounded_by_bytes() {
        let big = |client, req_seq| {
            let mut r = request(client, req_seq);
            r.request.payload = vec![7; 300];
            r
        };
        let size = pending_size(&big(1, 1));
        assert_eq!(size, 428);
        let mut m = ClientsManager::new(100, 100).with_byte_caps(1_000, 600);
        assert_eq!(m.admit(big(1, 1), 0), Admission::Added);
        assert_eq!(m.admit(big(1, 2), 0), Admission::Full, "per-client bytes");
        assert_eq!(m.admit(big(2, 1), 0), Admission::Added);
        assert_eq!(m.admit(big(3, 1), 0), Admission::Full, "total bytes");
        assert_eq!(m.pending_bytes(), 2 * size);
        assert!(m.has_room(4), "a small request still fits");
        m.check().unwrap();
        m.remove(1, 1);
        assert_eq!(m.pending_bytes(), size);
        assert_eq!(m.admit(big(1, 2), 0), Admission::Added);
        m.record_executed(2, 1, 1, Vec::new());
        assert_eq!(m.pending_bytes(), size);
        m.check().unwrap();
    }

    #[test]
    fn internal_clients_get_their_own_pending_cap() {
        let internal = crate::crypto::internal_client_id(1);
        let mut m = ClientsManager::new(100, 2).with_internal_cap(5);
        for seq in 1..=5 {
            assert!(m.has_room(internal));
            assert_eq!(m.admit(request(internal, seq), 0), Admission::Added);
        }
        assert!(!m.has_room(internal));
        assert_eq!(m.admit(request(internal, 6), 0), Admission::Full);
        assert_eq!(m.admit(request(3, 1), 0), Admission::Added);
        assert_eq!(m.admit(request(3, 2), 0), Admission::Added);
        assert_eq!(m.admit(request(3, 3), 0), Admission::Full);
        // Never below a user client's cap.
        let m = ClientsManager::new(100, 4).with_internal_cap(0);
        assert_eq!(m.max_per_internal_client, 4);
        m.check().unwrap();
    }

    #[test]
    fn a_lower_request_overtaken_by_a_higher_one_still_executes_once() {
        let mut m = ClientsManager::new(16, 16);
        assert!(exec(&mut m, 7, 2));
        assert!(exec(&mut m, 7, 1), "request 1 arrived after 2 and was lost");
        assert!(!exec(&mut m, 7, 1));
        assert!(!exec(&mut m, 7, 2));
        assert!(exec(&mut m, 7, 5));
        assert_eq!(m.record(7).unwrap().gaps, vec![3, 4]);
        assert!(exec(&mut m, 7, 4));
        assert!(exec(&mut m, 7, 3));
        assert!(m.record(7).unwrap().gaps.is_empty());
        assert_eq!(m.last_req_seq(7), 5);
        let rec = m.record(7).unwrap();
        // Every executed request's reply is cached, not only the highest one's.
        for r in 1..=5u64 {
            assert_eq!(rec.reply(r).unwrap().result, r.to_le_bytes());
            assert_eq!(rec.reply(r).unwrap().batch_seq, r);
        }
        assert!(rec.reply(6).is_none());
        m.check().unwrap();
    }

    #[test]
    fn the_reply_cache_keeps_the_most_recent_replies_in_order() {
        let mut m = ClientsManager::new(16, 16);
        for r in (1..=40u64).rev().step_by(2).chain((1..=40).step_by(2)) {
            exec(&mut m, 4, r);
        }
        let rec = m.record(4).unwrap();
        let kept: Vec<u64> = rec.replies.iter().map(|c| c.req_seq).collect();
        assert_eq!(kept, (40 - REPLY_CACHE as u64 + 1..=40).collect::<Vec<_>>());
        assert!(rec.reply(40 - REPLY_CACHE as u64).is_none());
        m.check().unwrap();
    }

    #[test]
    fn requests_older_than_the_window_are_refused() {
        let mut m = ClientsManager::new(16, 16);
        assert!(exec(&mut m, 1, EXECUTED_WINDOW + 10));
        // Numbers 1..=10 fell below the window: settled as too old, never executed.
        assert!(!exec(&mut m, 1, 10));
        assert!(exec(&mut m, 1, 11));
        assert_eq!(m.record(1).unwrap().gaps.len() as u64, EXECUTED_WINDOW - 2);
        m.check().unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Any arrival order with repeats: every number within the window executes exactly once.
        #[test]
        fn exactly_once_under_any_order(
            order in proptest::collection::vec(1u64..64, 1..200),
        ) {
            let mut m = ClientsManager::new(16, 16);
            let mut done = std::collections::BTreeSet::new();
            for r in order {
                let ran = exec(&mut m, 3, r);
                prop_assert_eq!(ran, done.insert(r), "request {} ran={}", r, ran);
                m.check().map_err(TestCaseError::fail)?;
            }
        }
    }
}
