//! Floods: ticks ignoring the throttle and the rotation, maximal pre-prepares for future views,
//! state requests for whole snapshots, view changes with forged proofs; and a slow state
//! source.

use crate::node::{Input, Millis, NodeId, Output};
use crate::protocol::{
    Batch, Body, CheckpointProof, Request, RequestKind, SignedRequest, ViewChange,
};
use crate::replica::hooks::{InputDecision, Strategy};
use crate::replica::{Dest, Replica};

/// How many tick requests a [`super::Byzantine::TickFlood`] replica submits per internal tick.
pub const TICK_FLOOD_FACTOR: u32 = 16;

/// How many flood messages a [`super::Byzantine::FutureFlood`] replica sends in all (each of about
/// `max_message_bytes`; every other one repeats the previous one).
pub const FUTURE_FLOOD_MESSAGES: u64 = 16;

/// Most chunk indices a [`StateRequestFlood`] attacker puts in one request.
const FLOOD_INDICES: u32 = 1_024;

/// Most forged view changes a [`BogusViewChange`] replica sends.
const BOGUS_VIEW_CHANGES: u64 = 64;

/// Submits [`TICK_FLOOD_FACTOR`] tick requests per internal tick of a listed component,
/// ignoring the throttle and the rotation.
pub(super) struct TickFlood;

impl Strategy for TickFlood {
    fn on_input(
        &mut self,
        r: &mut Replica,
        now: Millis,
        input: &Input,
        out: &mut Vec<Output>,
    ) -> InputDecision {
        match input {
            Input::InternalTick { component } if r.ticks_component(*component) => {
                for _ in 0..TICK_FLOOD_FACTOR {
                    r.submit_next_tick(now, *component, out);
                }
                InputDecision::Handled
            }
            _ => InputDecision::Handle,
        }
    }
}

/// One maximal-size pre-prepare for a future view (cycling over the next `n` views, distinct
/// sequence numbers), or a repeat of the previous one, per input, up to
/// [`FUTURE_FLOOD_MESSAGES`] in all. The signatures are valid (the flooder signs as itself)
/// so that the receivers buffer the messages; the request inside is unsigned.
pub(super) struct FutureFlood;

impl Strategy for FutureFlood {
    fn after_input(&mut self, r: &mut Replica, now: Millis, out: &mut Vec<Output>) {
        let sent = r.metrics().get("future_flood_sent");
        if sent >= FUTURE_FLOOD_MESSAGES {
            return;
        }
        r.metrics_mut().inc("future_flood_sent");
        let k = sent / 2;
        let n = u64::from(r.config().n);
        let view = r.view().saturating_add(1).saturating_add(k % n);
        let seq = r.stable().seq.saturating_add(1).saturating_add(k / n);
        let payload = r.config().max_message_bytes.saturating_sub(1_024);
        let batch = Batch {
            requests: vec![SignedRequest {
                request: Request {
                    client: 0,
                    req_seq: u64::MAX,
                    kind: RequestKind::Write,
                    payload: vec![0xf1; payload],
                },
                sig: [0; 64],
            }],
            primary_clock_ms: now,
            time_cert: None,
            null: false,
        };
        r.send(Body::PrePrepare { view, seq, batch }, Dest::All, out);
    }
}

/// The amplification attacker of state transfer: asks every checkpoint voter for its whole
/// snapshot, and again on every state message it receives (which it never installs).
pub(super) struct StateRequestFlood;

impl StateRequestFlood {
    fn flood(r: &mut Replica, to: NodeId, out: &mut Vec<Output>) {
        r.metrics_mut().inc("state_flood_requests");
        r.send(
            Body::StateRequest {
                seq: 0,
                meta: true,
                indices: (0..FLOOD_INDICES).collect(),
            },
            Dest::One(to),
            out,
        );
    }
}

impl Strategy for StateRequestFlood {
    fn inbound(
        &mut self,
        r: &mut Replica,
        _now: Millis,
        from: NodeId,
        body: &Body,
        out: &mut Vec<Output>,
    ) -> bool {
        match body {
            Body::Checkpoint { .. } => {
                Self::flood(r, from, out);
                false
            }
            Body::StateMeta { .. } | Body::StateChunk { .. } => {
                Self::flood(r, from, out);
                true
            }
            _ => false,
        }
    }
}

/// Serves state transfer slowly: one chunk per request, then lets the receiver time out.
pub(super) struct SlowStateSource;

impl Strategy for SlowStateSource {
    fn serve_limit(&self, allowed: u32) -> u32 {
        allowed.min(1)
    }
}

/// After every input (up to [`BOGUS_VIEW_CHANGES`]), a view change for the next view with a
/// forged checkpoint proof.
pub(super) struct BogusViewChange;

impl Strategy for BogusViewChange {
    fn after_input(&mut self, r: &mut Replica, _now: Millis, out: &mut Vec<Output>) {
        if r.metrics().get("bogus_sent") >= BOGUS_VIEW_CHANGES {
            return;
        }
        r.metrics_mut().inc("bogus_sent");
        let n = r.config().n;
        let vc = ViewChange {
            new_view: r.view() + 1,
            stable: CheckpointProof {
                seq: r.stable().seq + r.config().checkpoint_interval,
                digest: [0xee; 32],
                sigs: (0..n).map(|i| (i, [i as u8; 64])).collect(),
            },
            prepared: Vec::new(),
        };
        r.send(Body::ViewChange(vc), Dest::All, out);
    }
}
