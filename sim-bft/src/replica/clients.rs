//! ClientsManager: pending requests and the reply cache.
//!
//! Which `(client, req_seq)` may still execute is not decided here: ccron's kernel owns
//! exactly-once (`ccron::host::ExecutedRequests` inside the replica's `BlockHost`), and the
//! replica asks it before admitting (`Replica::settled`). This manager keeps what is the
//! replica's own: pending requests in arrival order (a `BTreeMap` keyed by an arrival counter,
//! so batches are formed deterministically), bounded in total, per client and in bytes; and the
//! replies of each client's most recent executed requests (replicated: part of checkpoints), so
//! a retransmitted request is answered again.

use std::collections::BTreeMap;

use bincode::{Decode, Encode};

use crate::node::ClientId;
use crate::protocol::SignedRequest;

/// How far below a client's highest executed request number a lower one may still execute:
/// the kernel's window (requests delayed by more than this many of their client's later
/// requests are refused as too old; the client must resend under a new number).
pub const EXECUTED_WINDOW: u64 = ccron::host::REQUEST_WINDOW;

/// The replies the replicated state remembers of a client (part of checkpoints).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ClientRecord {
    /// The client.
    pub client: ClientId,
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

    /// Admits `request` as pending (the caller checked that it may still execute).
    pub fn admit(&mut self, request: SignedRequest, now_ms: i64) -> Admission {
        let key = (request.request.client, request.request.req_seq);
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

    /// The pending requests of `client`, by request number.
    pub fn pending_of(&self, client: ClientId) -> impl Iterator<Item = &SignedRequest> + '_ {
        self.pending
            .range((client, 0)..=(client, u64::MAX))
            .map(|(_, (_, p))| &p.request)
    }

    /// Settles `(client, req_seq)` after its batch executed: it leaves the pending requests,
    /// and `reply` (the batch's sequence number and the result) is cached when it has one.
    pub fn settle(&mut self, client: ClientId, req_seq: u64, reply: Option<(u64, Vec<u8>)>) {
        self.remove(client, req_seq);
        if let Some((batch_seq, result)) = reply {
            self.records
                .entry(client)
                .or_insert_with(|| ClientRecord {
                    client,
                    replies: Vec::new(),
                })
                .cache_reply(CachedReply {
                    req_seq,
                    batch_seq,
                    result,
                });
        }
    }

    /// Every pending request, by client and number.
    pub fn pending_requests(&self) -> impl Iterator<Item = &SignedRequest> + '_ {
        self.pending.values().map(|(_, p)| &p.request)
    }

    /// The replicated part (reply records), in client order, for checkpoints.
    pub fn records_snapshot(&self) -> Vec<ClientRecord> {
        self.records.values().cloned().collect()
    }

    /// Replaces the reply records (state transfer).
    pub fn restore_records(&mut self, records: Vec<ClientRecord>) {
        self.records = records.into_iter().map(|r| (r.client, r)).collect();
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
            if r.replies.len() > REPLY_CACHE
                || !r.replies.windows(2).all(|w| w[0].req_seq < w[1].req_seq)
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

    fn exec(m: &mut ClientsManager, client: ClientId, req_seq: u64) {
        m.settle(
            client,
            req_seq,
            Some((req_seq, req_seq.to_le_bytes().to_vec())),
        );
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
        m.settle(2, 1, Some((1, Vec::new())));
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
    fn settling_drops_the_pending_request_and_caches_its_reply() {
        let mut m = ClientsManager::new(16, 16);
        for r in 1..=3 {
            assert_eq!(m.admit(request(7, r), 0), Admission::Added);
        }
        assert_eq!(m.admit(request(7, 2), 0), Admission::AlreadyPending);
        exec(&mut m, 7, 2);
        m.settle(7, 3, None);
        let left: Vec<u64> = m.pending_of(7).map(|r| r.request.req_seq).collect();
        assert_eq!(left, vec![1]);
        assert_eq!(
            m.record(7).unwrap().reply(2).unwrap().result,
            2u64.to_le_bytes()
        );
        assert!(m.record(7).unwrap().reply(3).is_none(), "no reply to cache");
        assert_eq!(m.pending_requests().count(), 1);
        m.remove(7, 1);
        assert_eq!(m.pending_len(), 0);
        let snap = m.records_snapshot();
        let mut back = ClientsManager::new(16, 16);
        back.restore_records(snap.clone());
        assert_eq!(back.records_snapshot(), snap);
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
}
