//! The replica's interception points: everything a fault strategy may wrap.
//!
//! The honest protocol (every other file of `replica/`) has no branch on a fault mode. A
//! replica holds one [`Strategy`], [`Honest`] unless the simulator or a test configured a
//! Byzantine one (`ReplicaConfig::byzantine`, built by [`crate::byzantine::strategy`]), and
//! calls it at these points and nowhere else:
//!
//! - **the step** ([`Replica`]'s `Node::handle`): before an input is handled
//!   ([`Strategy::on_input`]: handle it, ignore it, or handle it itself), after the input's
//!   handler ([`Strategy::after_input`]), when the primary is about to cut batches
//!   ([`Strategy::hold_proposals`]) and after it did ([`Strategy::after_propose`]);
//! - **outgoing**: every message the replica signs, before it is signed
//!   ([`Strategy::outgoing`]: send it as it is, rewrite it, split it into other messages to
//!   other peers, or withhold it) and once encoded ([`Strategy::on_wire`]);
//! - **inbound**: every peer message whose signature checked, before it is routed
//!   ([`Strategy::inbound`]), and every request before admission ([`Strategy::admits`]);
//! - **policy values**: the clock a replica writes into what it signs and the time certificate
//!   a primary attaches ([`Strategy::time_policy`]), and how many state chunks one answer
//!   carries ([`Strategy::serve_limit`]).
//!
//! The step hooks get the replica itself (its crate-private API: reads of its state, `send`);
//! while one runs, the strategy is out of the replica, so what it sends itself goes out as it
//! built it (its own `outgoing` and `on_wire` do not apply to it).

use super::{Dest, Metrics, Replica};
use crate::node::{ClientId, Input, Millis, NodeId, Output};
use crate::protocol::Body;

/// What happens to an input ([`Strategy::on_input`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputDecision {
    /// The replica's handler runs (honest).
    Handle,
    /// The strategy handled it; the rest of the step runs.
    Handled,
    /// The whole step is skipped: the replica neither handles the input nor acts.
    Ignore,
}

/// What goes out for one message the replica meant to sign and send ([`Strategy::outgoing`]).
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// This message to this destination (the honest answer: the message as it was).
    Send(Body, Dest),
    /// These messages instead, in order, each signed on its own.
    Split(Vec<(Body, Dest)>),
    /// Nothing.
    Withhold,
}

/// Which usable time certificate a primary attaches to a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CertChoice {
    /// The newest (honest).
    #[default]
    Newest,
    /// The oldest still usable.
    Oldest,
    /// None.
    Omit,
}

/// The clocks a replica writes into what it signs ([`Strategy::time_policy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TimePolicy {
    /// Added to the local clock in commits and pre-prepares (0: honest).
    pub clock_offset_ms: Millis,
    /// Added again to a primary's batch stamp (0: honest).
    pub stamp_ahead_ms: Millis,
    /// Which time certificate a primary attaches.
    pub cert: CertChoice,
}

/// A replica's behaviour at its interception points (see the module docs). Every method's
/// default is the honest behaviour.
pub(crate) trait Strategy: Send {
    /// Before an input is handled.
    fn on_input(
        &mut self,
        _r: &mut Replica,
        _now: Millis,
        _input: &Input,
        _out: &mut Vec<Output>,
    ) -> InputDecision {
        InputDecision::Handle
    }

    /// After the input's handler, before the primary proposes.
    fn after_input(&mut self, _r: &mut Replica, _now: Millis, _out: &mut Vec<Output>) {}

    /// When the primary is about to cut batches: `Some(until)` holds its proposals back until
    /// then (the replica sets its batch deadline there).
    fn hold_proposals(&self, _r: &Replica, _now: Millis) -> Option<Millis> {
        None
    }

    /// After the primary's proposals, before the step's timers are armed.
    fn after_propose(&mut self, _r: &mut Replica, _now: Millis, _out: &mut Vec<Output>) {}

    /// A message the replica is about to sign and send.
    fn outgoing(&mut self, body: Body, dest: Dest, _metrics: &mut Metrics) -> Outgoing {
        Outgoing::Send(body, dest)
    }

    /// The encoded bytes of a signed message about to leave: returns the bytes that leave
    /// (and may push other outputs before them).
    fn on_wire(&mut self, bytes: Vec<u8>, _out: &mut Vec<Output>) -> Vec<u8> {
        bytes
    }

    /// A verified peer message about to be routed; true when the strategy consumed it.
    fn inbound(
        &mut self,
        _r: &mut Replica,
        _now: Millis,
        _from: NodeId,
        _body: &Body,
        _out: &mut Vec<Output>,
    ) -> bool {
        false
    }

    /// Whether a request of `client` may be admitted at all.
    fn admits(&mut self, _client: ClientId, _metrics: &mut Metrics) -> bool {
        true
    }

    /// The clocks this replica signs.
    fn time_policy(&self) -> TimePolicy {
        TimePolicy::default()
    }

    /// How many of the `allowed` state chunks one state answer carries.
    fn serve_limit(&self, allowed: u32) -> u32 {
        allowed
    }
}

/// The honest strategy: every default.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Honest;

impl Strategy for Honest {}

impl Replica {
    /// Runs `f` with this replica's strategy taken out of it (so `f` may hand the replica
    /// to the strategy's step hooks); an [`Honest`] placeholder stands in meanwhile.
    pub(super) fn with_strategy<T>(
        &mut self,
        f: impl FnOnce(&mut dyn Strategy, &mut Replica) -> T,
    ) -> T {
        let mut s = std::mem::replace(&mut self.strategy, Box::new(Honest));
        let t = f(s.as_mut(), self);
        self.strategy = s;
        t
    }
}
