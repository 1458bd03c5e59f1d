//! The tick throttle: at most one pending tick per component, and no way to leak the mark.
//!
//! Runs on the replica's messaging thread (the only thread that touches the external queue's
//! bookkeeping and the clients manager), so it needs no locks. A tick is pending in one of two
//! places, exactly as in the reference design:
//! - the external queue: from `on_internal_tick` returning [`TickDecision::Send`] until the host
//!   pops the request (`on_tick_popped`) or fails to enqueue it (`on_enqueue_failed`);
//! - consensus: from the pop until the request commits, executes, is dropped, or a view change
//!   clears the clients manager's pending requests.
//!
//! Fixes over the reference: a failed enqueue clears the mark (the reference leaked it and that
//! component never ticked again); marks are per component, so components do not share one slot;
//! callbacks carry the request sequence number, so a late callback for an old request cannot clear
//! the mark of a newer one; and an optional maximum pending age turns any leak the host might still
//! introduce into a counted, traced, self-healing event instead of a component that stops forever.

use std::collections::BTreeMap;

use crate::tick::{ComponentId, TimeMs};

/// Where a component's pending tick currently is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingTick {
    /// Pushed to the external queue, not yet popped by the messaging thread.
    InQueue {
        /// The request sequence number the tick request carries.
        req_seq: u64,
        /// When the tick was sent (host time line, for the stale-mark safety net).
        since_ms: TimeMs,
    },
    /// Popped and handed to consensus (pending in the clients manager).
    InConsensus {
        /// The request sequence number the tick request carries.
        req_seq: u64,
        /// When the tick was sent (host time line, for the stale-mark safety net).
        since_ms: TimeMs,
    },
}

impl PendingTick {
    /// The request sequence number of the pending tick.
    pub fn req_seq(&self) -> u64 {
        match *self {
            PendingTick::InQueue { req_seq, .. } | PendingTick::InConsensus { req_seq, .. } => {
                req_seq
            }
        }
    }

    fn since_ms(&self) -> TimeMs {
        match *self {
            PendingTick::InQueue { since_ms, .. } | PendingTick::InConsensus { since_ms, .. } => {
                since_ms
            }
        }
    }
}

/// What the messaging thread should do with an internal tick message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickDecision {
    /// Build a tick request with this request sequence number and push it to the external queue;
    /// report the outcome with `on_enqueue_failed` if the push fails.
    Send {
        /// The request sequence number to put in the tick request.
        req_seq: u64,
    },
    /// A tick for this component is already pending; drop the internal message.
    Throttled {
        /// Where the pending tick is.
        pending: PendingTick,
    },
}

/// Counters of the throttle, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleStats {
    /// Internal ticks turned into tick requests.
    pub sent: u64,
    /// Internal ticks dropped because one was already pending.
    pub throttled: u64,
    /// Enqueues reported as failed (their marks were cleared).
    pub enqueue_failed: u64,
    /// Pending marks older than the configured maximum age, cleared by the safety net.
    pub stale_cleared: u64,
    /// Callbacks that matched no pending tick (late or duplicate), ignored.
    pub ignored_callbacks: u64,
}

/// The pure per-component throttle. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct TickThrottle {
    pending: BTreeMap<ComponentId, PendingTick>,
    max_pending_ms: Option<u64>,
    stats: ThrottleStats,
}

impl TickThrottle {
    /// A throttle without the stale-mark safety net: a mark lives until a callback clears it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A throttle whose marks older than `max_pending_ms` are treated as lost at the next
    /// internal tick of that component (counted in [`ThrottleStats::stale_cleared`] and traced).
    /// Choose it well above a commit latency (e.g. the client request timeout).
    pub fn with_max_pending_ms(max_pending_ms: u64) -> Self {
        Self {
            max_pending_ms: Some(max_pending_ms),
            ..Self::default()
        }
    }

    /// Handles a [`super::TickInternalMsg`] for `component` at host time `now_ms`.
    ///
    /// If no tick is pending for `component`, allocates a request sequence number with
    /// `alloc_req_seq` (called only then), marks the tick pending in the external queue and returns
    /// [`TickDecision::Send`]. Otherwise returns [`TickDecision::Throttled`].
    pub fn on_internal_tick(
        &mut self,
        component: ComponentId,
        now_ms: TimeMs,
        alloc_req_seq: impl FnOnce() -> u64,
    ) -> TickDecision {
        if let Some(pending) = self.pending.get(&component).copied() {
            let stale = self.max_pending_ms.is_some_and(|max_ms| {
                let age_ms = now_ms.saturating_sub(pending.since_ms());
                age_ms >= 0 && age_ms.unsigned_abs() >= max_ms
            });
            if !stale {
                self.stats.throttled = self.stats.throttled.saturating_add(1);
                return TickDecision::Throttled { pending };
            }
            self.stats.stale_cleared = self.stats.stale_cleared.saturating_add(1);
            tracing::warn!(
                component,
                req_seq = pending.req_seq(),
                ?pending,
                "ticks: pending tick mark exceeded its maximum age; treating it as lost"
            );
        }
        let req_seq = alloc_req_seq();
        self.pending.insert(
            component,
            PendingTick::InQueue {
                req_seq,
                since_ms: now_ms,
            },
        );
        self.stats.sent = self.stats.sent.saturating_add(1);
        TickDecision::Send { req_seq }
    }

    /// The push of tick request `req_seq` to the external queue failed: clear its mark so the next
    /// internal tick tries again.
    pub fn on_enqueue_failed(&mut self, component: ComponentId, req_seq: u64) {
        self.stats.enqueue_failed = self.stats.enqueue_failed.saturating_add(1);
        match self.pending.get(&component) {
            Some(PendingTick::InQueue { req_seq: r, .. }) if *r == req_seq => {
                self.pending.remove(&component);
                tracing::warn!(component, req_seq, "ticks: enqueue failed; mark cleared");
            }
            _ => self.ignore("on_enqueue_failed", component, req_seq),
        }
    }

    /// The messaging thread popped tick request `req_seq` from the external queue: it is now
    /// pending in consensus.
    pub fn on_tick_popped(&mut self, component: ComponentId, req_seq: u64) {
        match self.pending.get_mut(&component) {
            Some(p @ PendingTick::InQueue { .. }) if p.req_seq() == req_seq => {
                *p = PendingTick::InConsensus {
                    req_seq,
                    since_ms: p.since_ms(),
                };
            }
            _ => self.ignore("on_tick_popped", component, req_seq),
        }
    }

    /// Tick request `req_seq` committed: the tick will execute, a new one may be sent.
    pub fn on_committed(&mut self, component: ComponentId, req_seq: u64) {
        self.clear_matching("on_committed", component, req_seq);
    }

    /// Tick request `req_seq` executed.
    pub fn on_executed(&mut self, component: ComponentId, req_seq: u64) {
        self.clear_matching("on_executed", component, req_seq);
    }

    /// Tick request `req_seq` was dropped (rejected at admission, evicted, …).
    pub fn on_dropped(&mut self, component: ComponentId, req_seq: u64) {
        self.clear_matching("on_dropped", component, req_seq);
    }

    /// A view change cleared the clients manager's pending requests: every tick pending in
    /// consensus is gone. Ticks still in the external queue stay pending (they are still there).
    /// Returns how many marks were cleared.
    pub fn on_view_change_cleared(&mut self) -> usize {
        let before = self.pending.len();
        self.pending
            .retain(|_, p| matches!(p, PendingTick::InQueue { .. }));
        let cleared = before - self.pending.len();
        tracing::debug!(
            cleared,
            "ticks: view change cleared pending ticks in consensus"
        );
        cleared
    }

    /// Where `component`'s pending tick is, if any.
    pub fn pending(&self, component: ComponentId) -> Option<PendingTick> {
        self.pending.get(&component).copied()
    }

    /// Whether a tick is pending for `component`.
    pub fn is_pending(&self, component: ComponentId) -> bool {
        self.pending.contains_key(&component)
    }

    /// The components with a pending tick, ascending.
    pub fn pending_components(&self) -> impl Iterator<Item = ComponentId> + '_ {
        self.pending.keys().copied()
    }

    /// Number of components with a pending tick.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// The throttle's counters.
    pub fn stats(&self) -> ThrottleStats {
        self.stats
    }

    fn clear_matching(&mut self, what: &'static str, component: ComponentId, req_seq: u64) {
        match self.pending.get(&component) {
            Some(p) if p.req_seq() == req_seq => {
                self.pending.remove(&component);
            }
            _ => self.ignore(what, component, req_seq),
        }
    }

    fn ignore(&mut self, what: &'static str, component: ComponentId, req_seq: u64) {
        self.stats.ignored_callbacks = self.stats.ignored_callbacks.saturating_add(1);
        tracing::debug!(
            what,
            component,
            req_seq,
            "ticks: callback matches no pending tick; ignored"
        );
    }
}
