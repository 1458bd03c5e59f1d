//! Admission: client requests, this replica's internal ticks and request bundles.
//!
//! Every request is validated (form, authorisation, signature) before it becomes pending in the
//! [`ClientsManager`](super::clients::ClientsManager); signatures of many requests are checked in
//! one batch equation and remembered. A replica's own ticks pass ccron's tick throttle and the
//! sender rotation, and leave in one bundle per flush.

use std::collections::{BTreeMap, HashSet, VecDeque};

use ccron::host::{TickAuthority, period_index};
use ccron::ticks::{TickDecision, TickThrottle};
use tracing::{debug, warn};

use super::clients::Admission;
use super::{MAX_BUNDLE_REQUESTS, Replica};
use crate::crypto::{self, Digest32, internal_client_id, internal_client_owner};
use crate::node::{Millis, NodeId, Output};
use crate::protocol::{Request, RequestKind, SignedRequest, Wire, codec};

const VERIFIED_MEMO_CAPACITY: usize = 65_536;

/// This replica's own ticks: their throttle and rotation, their request numbers, and the ones
/// waiting to leave in the next bundle.
#[derive(Debug)]
pub(super) struct TickState {
    /// This replica's own internal requests (ticks) admitted but not yet broadcast: they leave
    /// together in one [`Wire::Requests`] at `flush_deadline`, so a burst of ticks reaches every
    /// replica in request-number order (no reordering gaps) and costs one message.
    pub(super) outgoing: Vec<SignedRequest>,
    /// When `outgoing` leaves (a zero-delay deadline: the end of the current instant).
    pub(super) flush_deadline: Option<Millis>,
    /// The one tick throttle (ccron's): at most one pending tick per component.
    pub(super) throttle: TickThrottle,
    /// Per listed component, the local period index in which this replica last sent a tick.
    pub(super) sent_period: BTreeMap<u32, i64>,
    /// The number of this replica's next internal request.
    pub(super) next_req: u64,
    /// Internal request numbers up to this one are reserved in durable storage
    /// ([`super::KEY_INTERNAL_REQ`]) before any of them is sent.
    pub(super) req_reserved: u64,
}

/// The requests whose signatures this replica checked (memo keys: the request's signed bytes,
/// its signature and its key), the last [`VERIFIED_MEMO_CAPACITY`] of them.
#[derive(Debug, Default)]
pub(super) struct VerifiedRequests {
    keys: HashSet<Digest32>,
    order: VecDeque<Digest32>,
}

impl VerifiedRequests {
    /// Whether the request with memo key `d` was verified here.
    fn contains(&self, d: &Digest32) -> bool {
        self.keys.contains(d)
    }

    /// Remembers a verified request, forgetting the oldest beyond the capacity.
    fn remember(&mut self, d: Digest32) {
        if self.keys.insert(d) {
            self.order.push_back(d);
            if self.order.len() > VERIFIED_MEMO_CAPACITY
                && let Some(old) = self.order.pop_front()
            {
                self.keys.remove(&old);
            }
        }
    }
}

impl Replica {
    /// The canonical bytes a request's signature covers and its verification memo key (the
    /// scheme's digest of both).
    fn request_memo(&self, r: &SignedRequest) -> Option<(Vec<u8>, Digest32)> {
        let bytes = codec::encode(&r.request).ok()?;
        let mut h = self.cfg.signatures.hasher();
        h.update(&bytes);
        h.update(r.sig);
        Some((bytes, h.finalize()))
    }

    /// Checks the signatures of many requests in one batch equation ([`crypto::verify_many`])
    /// and remembers the good ones, so that [`Self::validate_request`] finds them verified.
    /// Requests it cannot judge here (vouched, unknown client, malformed) are left to
    /// `validate_request`; a bad signature is found again there and dropped as usual.
    pub(super) fn preverify_requests<'a>(
        &mut self,
        requests: impl Iterator<Item = &'a SignedRequest>,
        signer_vouched: Option<NodeId>,
    ) {
        let mut todo = Vec::new();
        for r in requests {
            let owner = internal_client_owner(r.request.client);
            let (client, req_seq) = (r.request.client, r.request.req_seq);
            if req_seq == 0
                || (r.request.kind == RequestKind::Tick
                    && owner.is_some()
                    && owner == signer_vouched)
                || self.settled(r)
                || self.clients.is_pending(client, req_seq)
            {
                continue;
            }
            if let Some((bytes, memo)) = self.request_memo(r)
                && !self.verified.contains(&memo)
                && self.ring.client(r.request.client).is_some()
            {
                todo.push((bytes, memo, r));
            }
        }
        if todo.len() < 2 {
            return;
        }
        let checks: Vec<crypto::SigCheck<'_>> = todo
            .iter()
            .filter_map(|(bytes, _, r)| {
                Some(crypto::SigCheck {
                    key: self.ring.client(r.request.client)?,
                    msg: bytes,
                    sig: &r.sig,
                })
            })
            .collect();
        let verdicts = crypto::verify_many(&checks, self.cfg.verify_cache.as_ref());
        let good: Vec<Digest32> = todo
            .iter()
            .zip(verdicts)
            .filter_map(|((_, memo, _), ok)| ok.then_some(*memo))
            .collect();
        self.metrics
            .add("requests_batch_verified", good.len() as u64);
        for memo in good {
            self.verified.remember(memo);
        }
    }

    /// Checks a request's form, authorisation and signature. `signer_vouched` is true when the
    /// request's signer also signed the enclosing message (a primary's own tick in its
    /// pre-prepare), so the enclosing signature already authenticates it.
    pub(super) fn validate_request(
        &mut self,
        r: &SignedRequest,
        signer_vouched: Option<NodeId>,
    ) -> Result<(), &'static str> {
        let internal = internal_client_owner(r.request.client);
        match r.request.kind {
            RequestKind::Tick => {
                let Some(owner) = internal else {
                    return Err("drop_unauthorized_tick");
                };
                if owner >= self.cfg.n {
                    return Err("drop_unknown_client");
                }
                let Ok(component) = <[u8; 4]>::try_from(r.request.payload.as_slice()) else {
                    return Err("drop_malformed_tick");
                };
                if !self.ticks_component(u32::from_le_bytes(component)) {
                    return Err("drop_unknown_tick_component");
                }
                if signer_vouched == Some(owner) {
                    return Ok(());
                }
            }
            RequestKind::Write => {
                if internal.is_some() {
                    return Err("drop_unauthorized_internal_write");
                }
            }
        }
        if r.request.req_seq == 0 {
            return Err("drop_invalid_request");
        }
        // The very request (content and signature) is pending here: it passed these checks
        // when it was admitted, so its signature is not checked again.
        if self
            .clients
            .pending(r.request.client, r.request.req_seq)
            .is_some_and(|p| p.request == *r)
        {
            return Ok(());
        }
        let Some((bytes, memo)) = self.request_memo(r) else {
            return Err("drop_invalid_request");
        };
        if self.verified.contains(&memo) {
            return Ok(());
        }
        let Some(key) = self.ring.client(r.request.client) else {
            return Err("drop_unknown_client");
        };
        if !crypto::verify(key, &bytes, &r.sig, self.cfg.verify_cache.as_ref()) {
            return Err("drop_bad_request_signature");
        }
        self.verified.remember(memo);
        Ok(())
    }

    pub(super) fn on_client(&mut self, now: Millis, bytes: &[u8], out: &mut Vec<Output>) {
        let req: SignedRequest = match codec::decode(bytes, self.cfg.max_request_bytes) {
            Ok(r) => r,
            Err(codec::CodecError::TooLarge { .. }) => {
                return self.drop_msg("drop_oversized", None);
            }
            Err(_) => return self.drop_msg("drop_malformed", None),
        };
        self.admit_request(now, req, true, out);
    }

    /// Admits a client request (from a client, or forwarded by a replica).
    pub(super) fn admit_request(
        &mut self,
        now: Millis,
        req: SignedRequest,
        direct: bool,
        out: &mut Vec<Output>,
    ) {
        let (client, req_seq) = (req.request.client, req.request.req_seq);
        if !self.strategy.admits(client, &mut self.metrics) {
            return;
        }
        // Only the validators' own tick senders may tick (ccron's engine-independent rule).
        if req.request.kind == RequestKind::Tick
            && self
                .tick_authority()
                .authorize(internal_client_owner(client))
                .is_err()
        {
            return self.drop_msg("drop_unauthorized_tick", None);
        }
        if self.settled(&req) {
            // Exactly once: re-send the cached reply of a repeated request (one of the client's
            // most recent ones; see `clients::REPLY_CACHE`).
            self.metrics.inc("duplicate_request");
            if direct
                && internal_client_owner(client).is_none()
                && let Some(c) = self.clients.record(client).and_then(|r| r.reply(req_seq))
            {
                let (seq, result) = (c.batch_seq, c.result.clone());
                self.reply(client, req_seq, seq, result, out);
            }
            return;
        }
        if self.clients.is_pending(client, req_seq) {
            self.metrics.inc("duplicate_request");
            return;
        }
        // Our own internal client's requests were signed a moment ago by this replica.
        let own = (req.request.client == internal_client_id(self.cfg.id)).then_some(self.cfg.id);
        if let Err(reason) = self.validate_request(&req, own) {
            return self.drop_msg(reason, None);
        }
        let forward = direct && self.cfg.forward_requests && !self.is_primary();
        let fwd = if forward { Some(req.clone()) } else { None };
        match self.clients.admit(req, now) {
            Admission::Added => {}
            Admission::Full => return self.drop_msg("drop_pending_full", None),
            Admission::AlreadyPending => {
                self.metrics.inc("duplicate_request");
                return;
            }
        }
        if let Some(r) = fwd {
            if own.is_some() {
                // A backup's own internal requests go to every replica, so that all of them
                // watch for their ordering (a primary that ignores them gets replaced: one
                // replica's timer alone cannot gather a view-change quorum). They leave
                // together at the flush deadline (see `own_outgoing`).
                self.ticks.outgoing.push(r);
                self.ticks.flush_deadline.get_or_insert(now);
            } else if let Ok(bytes) = codec::encode(&Wire::Request(r)) {
                // Other requests are broadcast by their clients; the backup only relays them
                // to the primary.
                out.push(Output::Send {
                    to: self.primary(),
                    bytes,
                });
            }
        }
        if self.vc.deadline.is_none() {
            self.vc.deadline = Some(now.saturating_add(self.vc_timeout()));
        }
    }

    /// Who may tick: this cluster's replicas (through their internal clients).
    pub(super) fn tick_authority(&self) -> TickAuthority {
        TickAuthority::new(self.cfg.n)
    }

    /// Whether ticks of `component` are accepted: it is listed in `tick_components`, or no
    /// list is configured.
    pub(crate) fn ticks_component(&self, component: u32) -> bool {
        self.cfg.tick_components.is_empty() || self.cfg.tick_components.contains_key(&component)
    }

    pub(super) fn on_internal_tick(&mut self, now: Millis, component: u32, out: &mut Vec<Output>) {
        if !self.ticks_component(component) {
            debug!(
                replica = self.cfg.id,
                component, "internal tick for an unlisted component"
            );
            self.metrics.inc("tick_unknown_component");
            return;
        }
        // Rotation: only F+1 replicas send a component's tick in each period of local time, and
        // a sender sends at most one per period.
        let period_index = self
            .cfg
            .tick_components
            .get(&component)
            .map(|p| period_index(now, *p));
        if let Some(p) = period_index {
            if !self
                .cfg
                .tick_senders
                .sends(self.cfg.id, self.cfg.n, self.cfg.f(), p)
            {
                self.metrics.inc("tick_not_my_turn");
                return;
            }
            if self.ticks.sent_period.get(&component) == Some(&p) {
                self.metrics.inc("tick_already_sent_in_period");
                return;
            }
        }
        let candidate = self.ticks.next_req;
        match self
            .ticks
            .throttle
            .on_internal_tick(component, now, || candidate)
        {
            TickDecision::Throttled { pending } => {
                self.metrics.inc("tick_throttled");
                self.retransmit_pending_tick(now, pending);
            }
            TickDecision::Send { req_seq } => {
                if self.submit_tick(now, component, req_seq, out) {
                    // Admitted: the request is pending in the clients manager (the replica has
                    // no separate external queue, so "popped" is immediate).
                    self.ticks.next_req += 1;
                    self.ticks.throttle.on_tick_popped(component, req_seq);
                    if let Some(p) = period_index {
                        self.ticks.sent_period.insert(component, p);
                    }
                } else {
                    // A failed enqueue must not leak the mark (the reference's defect).
                    self.ticks.throttle.on_enqueue_failed(component, req_seq);
                }
            }
        }
    }

    /// A backup's tick still pending a period later, never seen in a pre-prepare: the primary
    /// may have lost it (or its bundle), so it is sent again, as it is (same number and
    /// signature: the replicas that hold it count a duplicate and drop it). Without this, a lost
    /// tick would hold its component's throttle mark until a view change or the safety net.
    fn retransmit_pending_tick(&mut self, now: Millis, pending: ccron::ticks::PendingTick) {
        let ccron::ticks::PendingTick::InConsensus { req_seq, .. } = pending else {
            return;
        };
        if self.is_primary() || !self.cfg.forward_requests {
            return;
        }
        let client = internal_client_id(self.cfg.id);
        if let Some(p) = self.clients.pending(client, req_seq)
            && p.proposed_in.is_none()
        {
            self.ticks.outgoing.push(p.request.clone());
            self.ticks.flush_deadline.get_or_insert(now);
            self.metrics.inc("tick_retransmitted");
        }
    }

    /// Signs and admits a tick request of this replica's with its next internal request
    /// number, bypassing the throttle and the rotation (what a tick-flooding strategy does,
    /// [`crate::byzantine`]); true when it became pending.
    pub(crate) fn submit_next_tick(
        &mut self,
        now: Millis,
        component: u32,
        out: &mut Vec<Output>,
    ) -> bool {
        let req_seq = self.ticks.next_req;
        let admitted = self.submit_tick(now, component, req_seq, out);
        if admitted {
            self.ticks.next_req += 1;
        }
        admitted
    }

    /// Signs and admits this replica's tick request; true when it became pending.
    fn submit_tick(
        &mut self,
        now: Millis,
        component: u32,
        req_seq: u64,
        out: &mut Vec<Output>,
    ) -> bool {
        if !self.clients.has_room(internal_client_id(self.cfg.id)) {
            // Check before signing: a full queue must not cost a signature per tick.
            self.metrics.inc("tick_enqueue_failed");
            self.metrics.inc("drop_pending_full");
            return false;
        }
        // The number must be durable before it can leave (a restart never re-issues it).
        self.reserve_internal_req(req_seq, out);
        let request = Request {
            client: internal_client_id(self.cfg.id),
            req_seq,
            kind: RequestKind::Tick,
            payload: component.to_le_bytes().to_vec(),
        };
        let Ok(signed) =
            SignedRequest::sign_vouched(&self.key, request, self.cfg.verify_cache.as_ref())
        else {
            self.metrics.inc("encode_error");
            return false;
        };
        let before = self.clients.pending_len();
        self.admit_request(now, signed, true, out);
        if self.clients.pending_len() > before {
            self.metrics.inc("ticks_submitted");
            true
        } else {
            self.metrics.inc("tick_enqueue_failed");
            false
        }
    }

    /// Admits the requests of a [`Wire::Requests`] bundle from replica `from`, in order.
    /// Each request stands on its own signature; the bundle only saves messages and keeps
    /// the requests' order.
    pub(super) fn admit_bundle(
        &mut self,
        now: Millis,
        from: NodeId,
        requests: Vec<SignedRequest>,
        out: &mut Vec<Output>,
    ) {
        if requests.is_empty() || requests.len() > MAX_BUNDLE_REQUESTS {
            return self.drop_msg("drop_bad_bundle", Some(from));
        }
        self.metrics.inc("bundles_received");
        self.preverify_requests(requests.iter(), None);
        for r in requests {
            self.admit_request(now, r, false, out);
        }
    }

    /// Broadcasts this replica's pending own requests (see `own_outgoing`) in bundles of at
    /// most [`MAX_BUNDLE_REQUESTS`] requests and about a quarter of the message size limit.
    pub(super) fn flush_own_requests(&mut self, out: &mut Vec<Output>) {
        self.ticks.flush_deadline = None;
        let mut rest = std::mem::take(&mut self.ticks.outgoing)
            .into_iter()
            .peekable();
        let budget = self.cfg.max_message_bytes / 4;
        while rest.peek().is_some() {
            let mut bundle = Vec::new();
            let mut bytes = 0usize;
            while let Some(r) = rest.next_if(|r| {
                bundle.is_empty()
                    || (bundle.len() < MAX_BUNDLE_REQUESTS
                        && bytes.saturating_add(r.request.payload.len() + 128) <= budget)
            }) {
                bytes = bytes.saturating_add(r.request.payload.len() + 128);
                bundle.push(r);
            }
            match codec::encode(&Wire::Requests(bundle)) {
                Ok(bytes) => {
                    self.metrics.inc("bundles_sent");
                    out.push(Output::Broadcast { bytes });
                }
                Err(e) => {
                    warn!(replica = self.cfg.id, error = %e, "cannot encode a request bundle");
                    self.metrics.inc("encode_error");
                }
            }
        }
    }
}
