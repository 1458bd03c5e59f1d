//! Execution: committed batches run strictly in sequence order.
//!
//! Each batch gets its agreed time, then runs through ccron's kernel
//! ([`ccron::host::BlockHost::execute_block`], the one executor every engine drives): each
//! write exactly once per `(client, number)` within the state budget, each tick through the tick
//! gate (validators only, listed components, no replayed number, one per sender, component and
//! period). Replies of one batch are signed once; the state digest (the kernel's) is reported
//! after every batch and a checkpoint is taken every `checkpoint_interval` sequence numbers.

use ccron::ReservedPages;
use ccron::host::{Block, STATE_FULL_REPLY, TickRejection, Tx, TxResult};
use tracing::{debug, warn};

use super::{Replica, TimeRecord};
use crate::crypto::{self, Digest32, internal_client_id, internal_client_owner};
use crate::node::{Executed, Millis, Output};
use crate::protocol::{Batch, RequestKind, SignedReply, SignedRequest, codec};

impl Replica {
    pub(super) fn execute_ready(&mut self, now: Millis, out: &mut Vec<Output>) {
        while self.state_transfer.transfer.is_none() && self.halted.is_none() {
            let seq = self.last_executed + 1;
            let Some(e) = self.log.get(&seq) else {
                break;
            };
            if !e.committed {
                break;
            }
            let (Some(batch), Some(digest)) = (e.batch.clone(), e.digest) else {
                break;
            };
            // The batch's size from its kept encoding (`batch_bytes`) when there is one: the
            // same number as sizing it again.
            let batch_bytes = self
                .batch_bytes
                .get(&batch)
                .map_or_else(|| batch.wire_bytes(), |b| b.len() as u64);
            self.execute(now, seq, &batch, digest, batch_bytes, out);
            // A batch may execute without this replica having proposed or accepted it (a
            // commit certificate from a later view, after a restart into a stale view): a
            // primary must never propose again at a seq that already executed.
            self.next_seq = self.next_seq.max(seq + 1);
            // Progress restarts the timer of unexecuted log entries, but not of a request
            // still waiting: its deadline counts from when this replica first saw it. In a view
            // change the timer keeps running (it re-sends the view change or moves on):
            // executing by commit certificates must not leave the replica waiting for a
            // new-view with no timer at all.
            if !self.in_view_change {
                self.vc.deadline = self.work_deadline(now);
            }
            self.vc.attempts = 0;
            self.status.asked_at = None;
        }
    }

    fn execute(
        &mut self,
        now: Millis,
        seq: u64,
        batch: &Batch,
        digest: Digest32,
        batch_bytes: u64,
        out: &mut Vec<Output>,
    ) {
        let agreed = self.agreed_time(batch);
        if let Some(t) = agreed {
            if let Some(c) = &batch.time_cert {
                self.time.last_cert_seq = self.time.last_cert_seq.max(c.seq);
            }
            let rec = TimeRecord {
                seq,
                agreed_time_ms: t,
                cert_seq: self.time.last_cert_seq,
            };
            let time_page = self.cfg.time_page;
            let saved = codec::encode(&rec)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    self.host
                        .pages_mut()
                        .save(time_page, &b)
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = saved {
                warn!(replica = self.cfg.id, error = %e, "cannot persist agreed time");
                self.metrics.inc("time_page_error");
                self.halt(format!("agreed time not saved: {e}"));
            }
        }
        // The batch as ccron's kernel sees it: the ordered requests and ticks, with the
        // authenticated sender of each. What is malformed or not the kernel's to judge (an
        // internal client's write, a tick payload that is not a component id) is settled here,
        // counted, and never reaches it.
        let own_internal = internal_client_id(self.cfg.id);
        let mut txs = Vec::with_capacity(batch.requests.len());
        let mut origin = Vec::with_capacity(batch.requests.len());
        let mut ticks = Vec::new();
        for r in &batch.requests {
            let (client, req_seq) = (r.request.client, r.request.req_seq);
            match r.request.kind {
                RequestKind::Tick => {
                    let component = <[u8; 4]>::try_from(r.request.payload.as_slice())
                        .ok()
                        .map(u32::from_le_bytes);
                    match component {
                        Some(component) => {
                            txs.push(Tx::Tick {
                                component,
                                sender: internal_client_owner(client),
                                number: req_seq,
                            });
                            origin.push((client, req_seq, Some(component)));
                        }
                        None => {
                            self.metrics.inc("tick_malformed_at_execution");
                            self.clients.remove(client, req_seq);
                        }
                    }
                }
                RequestKind::Write => {
                    if internal_client_owner(client).is_some() {
                        self.metrics.inc("internal_write_rejected");
                        self.clients.remove(client, req_seq);
                    } else {
                        txs.push(Tx::Request {
                            client: crate::node::ledger_client(client),
                            number: req_seq,
                            payload: r.request.payload.clone(),
                        });
                        origin.push((client, req_seq, None));
                    }
                }
            }
        }
        let block = Block {
            height: seq,
            agreed_time_ms: agreed,
            txs,
        };
        // The kernel's digest after the block comes with its outcome (nothing below changes
        // the kernel's state): computing it again doubled the per-batch digest cost.
        let (results, fires, state_digest) = match self.host.execute_block(&block) {
            Ok(o) => (o.results, o.fires, Some(o.digest)),
            Err(e) => {
                self.halt(format!("execution stopped at seq {seq}: {e}"));
                (Vec::new(), Vec::new(), None)
            }
        };
        let mut replies = Vec::new();
        for ((client, req_seq, component), result) in origin.into_iter().zip(results) {
            match result {
                TxResult::Reply(res) => {
                    self.clients
                        .settle(client, req_seq, Some((seq, res.clone())));
                    replies.push((client, req_seq, res));
                }
                TxResult::Refused(e) => {
                    warn!(replica = self.cfg.id, seq, client, error = %e, "write rejected");
                    self.metrics.inc("write_rejected_state_full");
                    let res = STATE_FULL_REPLY.to_vec();
                    self.clients
                        .settle(client, req_seq, Some((seq, res.clone())));
                    replies.push((client, req_seq, res));
                }
                TxResult::Duplicate(_) | TxResult::TickSkipped(TickRejection::Stale { .. }) => {
                    self.metrics.inc("duplicate_execution_skipped");
                    debug!(
                        replica = self.cfg.id,
                        seq,
                        client,
                        req_seq,
                        view = self.view,
                        "request ordered twice: second copy skipped"
                    );
                    if client == own_internal
                        && let Some(c) = component
                    {
                        // Our tick was superseded: it will never execute, so its mark goes.
                        self.ticks.throttle.on_dropped(c, req_seq);
                    }
                    self.clients.settle(client, req_seq, None);
                }
                other => {
                    // A tick that reached the gate (evaluated, coalesced or refused); a replayed
                    // one was counted above as a skipped copy.
                    ticks.extend(component);
                    match &other {
                        TxResult::TickEvaluated => self.metrics.inc("ticks_evaluated"),
                        TxResult::TickFailed(e) => {
                            warn!(replica = self.cfg.id, seq, error = %e, "tick rejected");
                            self.metrics.inc("ticks_evaluated");
                            self.metrics.inc("tick_rejected");
                        }
                        TxResult::TickSkipped(TickRejection::UnknownComponent(c)) => {
                            warn!(
                                replica = self.cfg.id,
                                component = c,
                                "ordered tick for an unlisted component"
                            );
                            self.metrics.inc("tick_rejected_unknown_component");
                        }
                        TxResult::TickSkipped(e @ TickRejection::Coalesced { .. }) => {
                            debug!(replica = self.cfg.id, reason = %e, "tick coalesced");
                            self.metrics.inc("tick_coalesced");
                        }
                        TxResult::TickSkipped(e) => {
                            warn!(replica = self.cfg.id, reason = %e, "tick refused");
                            self.metrics.inc("tick_malformed_at_execution");
                        }
                        _ => {}
                    }
                    if client == own_internal
                        && let Some(c) = component
                    {
                        self.ticks.throttle.on_executed(c, req_seq);
                    }
                    self.clients.settle(client, req_seq, None);
                }
            }
        }
        self.drop_settled_pending(&batch.requests);
        self.send_replies(seq, replies, out);
        self.earn_repeat_credit(batch_bytes);
        self.last_executed = seq;
        self.last_state_digest = state_digest.unwrap_or_else(|| self.state_digest());
        debug_assert_eq!(self.last_state_digest, self.state_digest());
        self.metrics.inc("batches_executed");
        self.metrics
            .add("requests_executed", batch.requests.len() as u64);
        out.push(Output::Executed(Executed {
            seq,
            batch_digest: digest,
            agreed_time_ms: agreed,
            state_digest: self.last_state_digest,
            requests: u32::try_from(batch.requests.len()).unwrap_or(u32::MAX),
            batch_bytes,
            ticks,
            fires,
        }));
        if seq.is_multiple_of(self.cfg.checkpoint_interval) {
            self.take_checkpoint(now, seq, out);
        }
    }

    /// Whether `r` must not execute (again): its number is 0, it executed, or it fell below
    /// its client's window (a write, by the kernel's exactly-once table), or its number is not
    /// above the last ordered tick of its sender and component (a tick, by the tick gate's
    /// replay floor). The admission-time view of what execution would skip.
    pub(super) fn settled(&self, r: &SignedRequest) -> bool {
        let (client, req_seq) = (r.request.client, r.request.req_seq);
        if req_seq == 0 {
            return true;
        }
        match r.request.kind {
            RequestKind::Write => self
                .host
                .requests()
                .settled(crate::node::ledger_client(client), req_seq),
            RequestKind::Tick => {
                let component = <[u8; 4]>::try_from(r.request.payload.as_slice())
                    .ok()
                    .map(u32::from_le_bytes);
                match (component, internal_client_owner(client)) {
                    (Some(c), Some(owner)) => self
                        .host
                        .gate()
                        .last_number(c, owner)
                        .is_some_and(|last| req_seq <= last),
                    _ => false,
                }
            }
        }
    }

    /// The highest number of this replica's own ticks ever ordered (its internal client's
    /// request numbers continue above it).
    pub(super) fn last_own_tick(&self) -> u64 {
        let me = self.cfg.id;
        self.host
            .gate()
            .floor_entries()
            .filter(|(_, sender, _)| *sender == me)
            .map(|(_, _, n)| n)
            .max()
            .unwrap_or(0)
    }

    /// Drops the pending requests of the clients of `requests` that can no longer execute (a
    /// number that fell below its client's window once a later one executed).
    fn drop_settled_pending(&mut self, requests: &[SignedRequest]) {
        let clients: std::collections::BTreeSet<u64> =
            requests.iter().map(|r| r.request.client).collect();
        for client in clients {
            let stale: Vec<u64> = self
                .clients
                .pending_of(client)
                .filter(|p| self.settled(p))
                .map(|p| p.request.req_seq)
                .collect();
            for req_seq in stale {
                self.clients.remove(client, req_seq);
            }
        }
    }

    /// Stops executing (fail-stop) for `cause`: loud (an error event, a counter, and the
    /// invariant check fails naming it, which the simulator reports), never a silent
    /// divergence. The batch in progress completes (every replica that executes it does the
    /// same); nothing after it executes.
    fn halt(&mut self, cause: String) {
        if self.halted.is_none() {
            tracing::error!(replica = self.cfg.id, cause = %cause, "replica halted (fail-stop)");
            self.metrics.inc("halted");
            self.halted = Some(cause);
        }
    }

    pub(super) fn reply(
        &mut self,
        client: u64,
        req_seq: u64,
        seq: u64,
        result: Vec<u8>,
        out: &mut Vec<Output>,
    ) {
        self.send_replies(seq, vec![(client, req_seq, result)], out);
    }

    /// Signs the replies of one batch once and emits one `Output::Reply` per request.
    fn send_replies(&mut self, seq: u64, replies: Vec<(u64, u64, Vec<u8>)>, out: &mut Vec<Output>) {
        if replies.is_empty() {
            return;
        }
        let entries: Vec<Digest32> = replies
            .iter()
            .map(|(c, r, res)| crate::protocol::reply_entry(self.cfg.signatures, *c, *r, res))
            .collect();
        let header = crate::protocol::ReplyHeader {
            replica: self.cfg.id,
            seq,
            entries_digest: crate::protocol::entries_digest(self.cfg.signatures, &entries),
        };
        let Ok(bytes) = codec::encode(&header) else {
            return;
        };
        let sig = crypto::sign(&self.key, &bytes);
        for (index, (client, req_seq, result)) in replies.into_iter().enumerate() {
            let reply = crate::protocol::Reply {
                replica: self.cfg.id,
                seq,
                client,
                req_seq,
                result,
                batch_entries: entries.clone(),
                index: u32::try_from(index).unwrap_or(u32::MAX),
            };
            if let Ok(bytes) = codec::encode(&SignedReply { reply, sig }) {
                out.push(Output::Reply { client, bytes });
            }
        }
    }

    /// Digest of the replicated state reported after every batch: the kernel's
    /// ([`ccron::host::BlockHost::digest`]), the same any engine reports after the same blocks.
    pub(super) fn state_digest(&self) -> Digest32 {
        self.host.digest()
    }
}
