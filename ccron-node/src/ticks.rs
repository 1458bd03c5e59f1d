//! The node's own ticks (signed in its F+1 turn, throttled, forwarded to the other validators'
//! `POST /v1/ticks`) and what a decided block's ticks and requests leave behind (the pool's
//! replay floor, the throttle, the clients' results). Part of [`super::NodeState`].

use std::sync::atomic::Ordering;

use ccron::host::{TickSenders, period_index};
use ccron::ticks::TickDecision;

use super::{NodeState, now_ms};
use crate::api::lock;
use crate::app::{DEMO_TICK_PERIOD_MS, validator_index};
use crate::context::{Block, TickTx};
use ccron::host::BlockOutcome;

impl NodeState {
    /// A generator tick of `component`: when it is this node's turn (F+1 rotation) and no
    /// tick of the component is pending (the throttle), sign tick `n`, admit it to the own
    /// pool and forward it to the other validators' endpoints.
    pub(super) fn on_local_tick(&mut self, component: u32) {
        let now = now_ms();
        let n = u32::try_from(self.validators.validators.len()).unwrap_or(u32::MAX);
        let f = n.saturating_sub(1) / 3;
        let period = period_index(now, DEMO_TICK_PERIOD_MS);
        if !TickSenders::Rotating.sends(self.my_index, n, f, period) {
            self.status.tick_pool.own_not_my_turn += 1;
            return;
        }
        let next = self.tick_number.saturating_add(1);
        let req_seq = match self.throttle.on_internal_tick(component, now, || next) {
            TickDecision::Send { req_seq } => req_seq,
            TickDecision::Throttled { .. } => {
                self.status.tick_pool.own_throttled += 1;
                return;
            }
        };
        self.tick_number = req_seq;
        let tick = TickTx::sign(component, req_seq, &self.signer);
        let bytes = tick.encode();
        if let Err(e) = lock(&self.ticks).admit(component, Some(self.my_index), req_seq, tick) {
            tracing::warn!(component, req_seq, reason = %e, "own tick not admitted");
            self.throttle.on_dropped(component, req_seq);
            return;
        }
        self.throttle.on_tick_popped(component, req_seq);
        self.status.tick_pool.own_sent += 1;
        // Forward to the others (bounded: at most 8 forwarding tasks in flight; a tick not
        // forwarded is still carried when this node proposes).
        if self.forward_to.is_empty() || self.forwarding.load(Ordering::Relaxed) >= 8 {
            return;
        }
        self.forwarding.fetch_add(1, Ordering::Relaxed);
        let (targets, inflight, failed) = (
            self.forward_to.clone(),
            self.forwarding.clone(),
            self.forward_failed.clone(),
        );
        tokio::task::spawn_blocking(move || {
            for addr in targets {
                match crate::load::post(addr, "/v1/ticks", &bytes) {
                    Ok((202 | 409, _)) => {}
                    Ok((code, text)) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%addr, code, response = %text.lines().last().unwrap_or(""), "tick forward refused");
                    }
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%addr, error = %e, "tick forward failed");
                    }
                }
            }
            inflight.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// After a decided block executed: its ticks' numbers are recorded in the pool (what they
    /// supersede leaves it; replays are refused from now on), own ticks clear the throttle,
    /// and the requests' results are recorded for clients.
    pub(super) fn after_decided_ticks_and_results(&mut self, block: &Block, out: &BlockOutcome) {
        {
            let mut pool = lock(&self.ticks);
            for t in &block.ticks {
                if let Some(i) = validator_index(&self.validators, &t.submitter) {
                    pool.on_included(t.component, i, t.number);
                    if i == self.my_index {
                        self.throttle.on_committed(t.component, t.number);
                    }
                }
            }
        }
        let mut results = lock(&self.results);
        for (&(client, number), r) in self.ledger.last_requests.iter().zip(&out.results) {
            if let ccron::host::TxResult::Reply(reply) = r {
                results.record(client, number, block.height, reply);
            }
        }
        self.status.results_evicted = results.evicted;
    }
}
