//! The node's own ticks (signed in its F+1 turn, throttled, forwarded to the other validators'
//! `POST /v1/ticks`) and what a decided block's ticks and requests leave behind (the pool's
//! replay floor, the throttle, the clients' results). Part of [`NodeCore`].

use ccron::host::{Application, BlockOutcome, TickSenders, TxResult, period_index};
use ccron::ticks::TickDecision;

use crate::api::lock;
use crate::core::{NodeCore, now_ms};
use crate::store::Commit;
use crate::types::{Block, TickTx};

impl<A: Application, C: Commit> NodeCore<A, C> {
    /// A generator tick of `component`: when it is this node's turn (F+1 rotation over the
    /// component's tick period) and no tick of the component is pending (the throttle), sign
    /// tick `n`, admit it to the own pool and forward it to the other validators' endpoints.
    pub fn on_local_tick(&mut self, component: u32) {
        let now = now_ms();
        let n = self.validators().count();
        let f = n.saturating_sub(1) / 3;
        let Some(period_ms) = self.tick_periods().get(&component).copied() else {
            return;
        };
        let period = period_index(now, period_ms);
        if !TickSenders::Rotating.sends(self.my_index(), n, f, period) {
            self.status_mut().tick_pool.own_not_my_turn += 1;
            return;
        }
        let next = self.tick_number().saturating_add(1);
        let req_seq = match self
            .throttle_mut()
            .on_internal_tick(component, now, || next)
        {
            TickDecision::Send { req_seq } => req_seq,
            TickDecision::Throttled { .. } => {
                self.status_mut().tick_pool.own_throttled += 1;
                return;
            }
        };
        self.set_tick_number(req_seq);
        let tick = TickTx::sign(component, req_seq, self.signer());
        let bytes = tick.encode();
        let me = Some(self.my_index());
        let admitted = lock(self.tick_pool()).admit(component, me, req_seq, tick);
        if let Err(e) = admitted {
            tracing::warn!(component, req_seq, reason = %e, "own tick not admitted");
            self.throttle_mut().on_dropped(component, req_seq);
            return;
        }
        self.throttle_mut().on_tick_popped(component, req_seq);
        self.status_mut().tick_pool.own_sent += 1;
        if let Some(f) = self.forwarder() {
            f.forward(bytes);
        }
    }

    /// After a decided block executed: its ticks' numbers are recorded in the pool (what they
    /// supersede leaves it; replays are refused from now on), own ticks clear the throttle,
    /// and the requests' results are recorded for clients.
    pub(crate) fn after_decided_ticks_and_results(&mut self, block: &Block, out: &BlockOutcome) {
        let mine = self.my_index();
        let mut committed = Vec::new();
        {
            let mut pool = lock(self.tick_pool());
            for t in &block.ticks {
                if let Some(i) = self.validators().index_of(&t.submitter) {
                    pool.on_included(t.component, i, t.number);
                    if i == mine {
                        committed.push((t.component, t.number));
                    }
                }
            }
        }
        for (component, number) in committed {
            self.throttle_mut().on_committed(component, number);
        }
        let evicted = {
            let mut results = lock(self.results());
            for (&(client, number), r) in self.ledger().last_requests.iter().zip(&out.results) {
                if let TxResult::Reply(reply) = r {
                    results.record(client, number, block.height, reply);
                }
            }
            results.evicted
        };
        self.status_mut().results_evicted = evicted;
    }
}
