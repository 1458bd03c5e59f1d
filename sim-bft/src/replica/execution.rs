//! Execution: committed batches run strictly in sequence order.
//!
//! Each batch gets its agreed time, then its requests run exactly once (user writes through
//! the application, ticks through the execution-time tick bound); replies of one batch are
//! signed once; the state digest is reported after every batch and a checkpoint is taken
//! every `checkpoint_interval` sequence numbers.

use ccron::host::TickRejection;
use ccron::host::block::run_tick;
use ccron::{ReservedPages, Tick};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::{Replica, TimeRecord};
use crate::app::ExecContext;
use crate::crypto::{self, Digest32, internal_client_id, internal_client_owner};
use crate::node::{Executed, Millis, NodeId, Output};
use crate::protocol::{Batch, RequestKind, SignedReply, codec};

impl Replica {
    pub(super) fn execute_ready(&mut self, now: Millis, out: &mut Vec<Output>) {
        while self.transfer.is_none() && self.halted.is_none() {
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
            self.execute(now, seq, &batch, digest, out);
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
                self.vc_deadline = self.work_deadline(now);
            }
            self.view_change_attempts = 0;
            self.status_asked_at = None;
        }
    }

    fn execute(
        &mut self,
        now: Millis,
        seq: u64,
        batch: &Batch,
        digest: Digest32,
        out: &mut Vec<Output>,
    ) {
        let agreed = self.agreed_time(batch);
        if let Some(t) = agreed {
            self.last_agreed_time_ms = Some(t);
            if let Some(c) = &batch.time_cert {
                self.last_cert_seq = self.last_cert_seq.max(c.seq);
            }
            let rec = TimeRecord {
                seq,
                agreed_time_ms: t,
                cert_seq: self.last_cert_seq,
            };
            let saved = codec::encode(&rec)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    self.pages
                        .save(self.cfg.time_page, &b)
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = saved {
                warn!(replica = self.cfg.id, error = %e, "cannot persist agreed time");
                self.metrics.inc("time_page_error");
                self.halt(format!("agreed time not saved: {e}"));
            }
        }
        let ctx = ExecContext {
            seq,
            agreed_time_ms: agreed,
        };
        let own_internal = internal_client_id(self.cfg.id);
        let mut ticks = Vec::new();
        let mut fires = Vec::new();
        let mut replies = Vec::new();
        for r in &batch.requests {
            let (client, req_seq) = (r.request.client, r.request.req_seq);
            if self.clients.is_executed(client, req_seq) {
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
                    && r.request.kind == RequestKind::Tick
                    && let Ok(c) = <[u8; 4]>::try_from(r.request.payload.as_slice())
                {
                    // Our tick was superseded: it will never execute, so its mark goes.
                    self.throttle.on_dropped(u32::from_le_bytes(c), req_seq);
                }
                continue;
            }
            let result = match r.request.kind {
                RequestKind::Tick => {
                    let component = <[u8; 4]>::try_from(r.request.payload.as_slice())
                        .ok()
                        .map(u32::from_le_bytes);
                    let sender = self
                        .tick_authority()
                        .authorize(internal_client_owner(client))
                        .ok();
                    match (component, sender) {
                        (Some(component), Some(sender)) => {
                            if client == own_internal {
                                self.throttle.on_executed(component, req_seq);
                            }
                            ticks.push(component);
                            if self.admit_tick_evaluation(component, sender, agreed) {
                                self.metrics.inc("ticks_evaluated");
                                let tick = Tick::new(component, seq, agreed);
                                if let Err(e) =
                                    run_tick(self.app.as_mut(), &mut self.pages, tick, &mut fires)
                                {
                                    warn!(replica = self.cfg.id, seq, component, error = %e, "tick rejected");
                                    self.metrics.inc("tick_rejected");
                                }
                            }
                        }
                        _ => self.metrics.inc("tick_malformed_at_execution"),
                    }
                    Vec::new()
                }
                RequestKind::Write => {
                    if internal_client_owner(client).is_some() {
                        self.metrics.inc("internal_write_rejected");
                        Vec::new()
                    } else {
                        let payload = &r.request.payload;
                        let res = match self.check_state_room(payload.len()) {
                            Ok(()) => {
                                let res = self.app.execute(ctx, client, payload);
                                self.note_state_growth(payload.len(), res.len());
                                res
                            }
                            Err(e) => {
                                warn!(replica = self.cfg.id, seq, client, error = %e, "write rejected");
                                self.metrics.inc("write_rejected_state_full");
                                super::STATE_FULL_RESULT.to_vec()
                            }
                        };
                        replies.push((client, req_seq, res.clone()));
                        res
                    }
                }
            };
            self.clients.record_executed(client, req_seq, seq, result);
            if let Some(e) = self.app.halted() {
                let cause = e.to_string();
                self.halt(cause);
            }
        }
        self.send_replies(seq, replies, out);
        let batch_bytes = batch.wire_bytes();
        self.earn_repeat_credit(batch_bytes);
        self.last_executed = seq;
        self.last_state_digest = self.state_digest();
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
            .map(|(c, r, res)| crate::protocol::reply_entry(*c, *r, res))
            .collect();
        let header = crate::protocol::ReplyHeader {
            replica: self.cfg.id,
            seq,
            entries_digest: crate::protocol::entries_digest(&entries),
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

    /// The execution-time tick bound: for a listed component, at most one tick per sender and
    /// period of agreed time is evaluated; the others are counted and skipped. Deterministic (a
    /// function of replicated state), so every honest replica skips the same ticks, and a
    /// Byzantine replica flooding ticks costs at most one evaluation per component and period.
    fn admit_tick_evaluation(
        &mut self,
        component: u32,
        sender: NodeId,
        agreed: Option<Millis>,
    ) -> bool {
        // ccron's gate: the sender is a replica, the component ticks, and it is the first tick
        // of this sender, component and period.
        match self.tick_gate.admit(component, Some(sender), agreed) {
            Ok(_) => true,
            Err(TickRejection::UnknownComponent(_)) => {
                warn!(
                    replica = self.cfg.id,
                    component, "ordered tick for an unlisted component"
                );
                self.metrics.inc("tick_rejected_unknown_component");
                false
            }
            Err(e @ TickRejection::Coalesced { .. }) => {
                debug!(replica = self.cfg.id, component, sender, reason = %e, "tick coalesced");
                self.metrics.inc("tick_coalesced");
                false
            }
            Err(e) => {
                warn!(replica = self.cfg.id, component, sender, reason = %e, "tick refused");
                self.metrics.inc("tick_malformed_at_execution");
                false
            }
        }
    }

    /// Digest of the replicated state reported after every batch.
    pub(super) fn state_digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"sim-bft-state");
        h.update(self.app.digest());
        h.update(self.pages.digest());
        h.update(self.last_agreed_time_ms.unwrap_or(i64::MIN).to_le_bytes());
        if !self.tick_gate.coalescer().is_empty() {
            h.update(b"tick-evals");
            for (c, s, p) in self.tick_gate.coalescer().entries() {
                h.update(c.to_le_bytes());
                h.update(s.to_le_bytes());
                h.update(p.to_le_bytes());
            }
        }
        h.finalize().into()
    }
}
