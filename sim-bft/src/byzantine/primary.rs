//! A silent replica, and the primaries that misuse their position: one that starves a
//! client, one that re-proposes committed seqs, one that builds view changes too large to send.

use tracing::info;

use crate::node::{ClientId, Input, Millis, Output};
use crate::protocol::{Batch, Body};
use crate::replica::hooks::{InputDecision, Strategy};
use crate::replica::{Dest, Metrics, Replica};

/// Most conflicting pre-prepares a [`ReproposeCommitted`] replica sends.
const REPROPOSE_MAX: usize = 4_096;
/// Most conflicting pre-prepares it sends in one round.
const REPROPOSE_ROUND: usize = 16;

/// Ignores every input and sends nothing.
pub(super) struct Silent;

impl Strategy for Silent {
    fn on_input(
        &mut self,
        _r: &mut Replica,
        _now: Millis,
        _input: &Input,
        _out: &mut Vec<Output>,
    ) -> InputDecision {
        InputDecision::Ignore
    }
}

/// Never admits (so, as primary, never proposes) the requests of user client
/// [`super::STARVED_CLIENT`].
pub(super) struct StarveClient;

impl Strategy for StarveClient {
    fn admits(&mut self, client: ClientId, metrics: &mut Metrics) -> bool {
        if client == super::STARVED_CLIENT {
            metrics.inc("byzantine_starved_request");
            return false;
        }
        true
    }
}

/// As primary, every half view-change timeout, pre-prepares another batch (its clock moved by
/// one) for each of the last [`REPROPOSE_ROUND`] seqs committed in this view, at most
/// [`REPROPOSE_MAX`] in all.
pub(super) struct ReproposeCommitted {
    /// When it next re-proposes.
    pub(super) next_at: Millis,
}

impl Strategy for ReproposeCommitted {
    fn after_input(&mut self, r: &mut Replica, now: Millis, out: &mut Vec<Output>) {
        if !r.is_primary() || r.in_view_change() || now < self.next_at {
            return;
        }
        let sent = usize::try_from(r.metrics().get("byz_reproposed")).unwrap_or(usize::MAX);
        if sent >= REPROPOSE_MAX {
            return;
        }
        self.next_at = now.saturating_add((r.config().view_change_timeout_ms / 2).max(1));
        let view = r.view();
        let todo: Vec<(u64, Batch)> = r
            .log()
            .iter()
            .rev()
            .filter(|(_, e)| e.view == view && e.committed)
            .filter_map(|(s, e)| e.batch.as_deref().map(|b| (*s, b.clone())))
            .filter(|(_, b)| !b.null)
            .take(REPROPOSE_ROUND.min(REPROPOSE_MAX - sent))
            .collect();
        for (seq, mut batch) in todo {
            batch.primary_clock_ms = batch.primary_clock_ms.saturating_add(1);
            r.metrics_mut().inc("byz_reproposed");
            r.send(Body::PrePrepare { view, seq, batch }, Dest::All, out);
        }
    }
}

/// As primary, proposes only large batches (it holds requests back until half a batch waits,
/// or half a view-change timeout passed, so that the backups' timers do not fire first), and
/// goes silent for good once the prepared batches above its stable checkpoint (what a
/// batch-carrying view change would carry) exceed `max_message_bytes`.
pub(super) struct FatViewChange {
    pub(super) silenced: bool,
}

impl Strategy for FatViewChange {
    fn on_input(
        &mut self,
        _r: &mut Replica,
        _now: Millis,
        _input: &Input,
        _out: &mut Vec<Output>,
    ) -> InputDecision {
        if self.silenced {
            InputDecision::Ignore
        } else {
            InputDecision::Handle
        }
    }

    fn hold_proposals(&self, r: &Replica, now: Millis) -> Option<Millis> {
        let (oldest, count) = r.unproposed();
        let until = oldest?.saturating_add(r.config().view_change_timeout_ms / 2);
        if count * 2 >= r.config().batch_max || now >= until {
            return None;
        }
        Some(until)
    }

    fn after_propose(&mut self, r: &mut Replica, _now: Millis, _out: &mut Vec<Output>) {
        if self.silenced || !r.is_primary() || r.in_view_change() {
            return;
        }
        let carried: usize = r
            .log()
            .range(r.stable().seq + 1..)
            .filter(|(_, e)| e.proof.is_some())
            .filter_map(|(_, e)| e.proof_batch.as_ref())
            .map(|b| {
                b.requests
                    .iter()
                    .map(|q| q.request.payload.len().saturating_add(128))
                    .sum::<usize>()
            })
            .sum();
        if carried > r.config().max_message_bytes {
            info!(
                replica = r.id(),
                carried, "fat-view-change: going silent with a full log"
            );
            self.silenced = true;
            r.metrics_mut().inc("byz_silenced");
        }
    }
}
