//! The pure timer core of the TicksGenerator.
//!
//! Semantics (matching the reference generator, see `docs/` and semantics.md):
//! - `start(component, period_ms, now_ms)` arms a timer whose first expiry is `now_ms + period_ms`;
//!   on a running component it resets the phase the same way. A zero period means stop.
//! - `evaluate(now_ms)` returns every component whose expiry is `<= now_ms`, each at most once, in the
//!   order the timers were (last) started, and re-arms each at `now_ms + period_ms`. A timer that
//!   missed several periods (a slow poll) therefore fires once, not once per missed period: ticks
//!   only give the cron tables a chance to look at agreed time, so a burst would be pure waste.

use std::collections::BTreeMap;

use crate::tick::{ComponentId, TimeMs};

/// One armed timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timer {
    period_ms: u64,
    next_due_ms: TimeMs,
    /// Position in start order; a restart takes a fresh (later) position.
    start_order: u64,
}

/// The pure timer core: per-component periodic timers evaluated against an injected `now`.
///
/// Times are milliseconds on whatever monotonic time line the host uses; the core only compares
/// and adds them (saturating, so no input can overflow it).
#[derive(Debug, Clone, Default)]
pub struct TickTimers {
    timers: BTreeMap<ComponentId, Timer>,
    next_start_order: u64,
}

impl TickTimers {
    /// An empty core: nothing generates until [`TickTimers::start`] is called.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts (or restarts) ticking for `component` every `period_ms`; the first tick is due at
    /// `now_ms + period_ms`. A restart resets the phase and counts as a fresh start for ordering.
    /// A zero period stops the component, as in the reference.
    pub fn start(&mut self, component: ComponentId, period_ms: u64, now_ms: TimeMs) {
        if period_ms == 0 {
            self.stop(component);
            return;
        }
        let start_order = self.next_start_order;
        self.next_start_order = self.next_start_order.saturating_add(1);
        let timer = Timer {
            period_ms,
            next_due_ms: add_ms(now_ms, period_ms),
            start_order,
        };
        tracing::debug!(component, period_ms, now_ms, "ticks: timer started");
        self.timers.insert(component, timer);
    }

    /// Stops ticking for `component` and forgets its timer. Returns whether it was generating.
    pub fn stop(&mut self, component: ComponentId) -> bool {
        let was = self.timers.remove(&component).is_some();
        if was {
            tracing::debug!(component, "ticks: timer stopped");
        }
        was
    }

    /// Whether `component` currently has a running timer.
    pub fn is_generating(&self, component: ComponentId) -> bool {
        self.timers.contains_key(&component)
    }

    /// The period of `component`'s timer, if it is generating.
    pub fn period_ms(&self, component: ComponentId) -> Option<u64> {
        self.timers.get(&component).map(|t| t.period_ms)
    }

    /// Number of running timers.
    pub fn len(&self) -> usize {
        self.timers.len()
    }

    /// Whether no timer is running.
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
    }

    /// Returns the components due at `now_ms`, in start order, each at most once, and re-arms
    /// each of them at `now_ms + period_ms`.
    pub fn evaluate(&mut self, now_ms: TimeMs) -> Vec<ComponentId> {
        let mut due: Vec<(u64, ComponentId)> = self
            .timers
            .iter()
            .filter(|(_, t)| t.next_due_ms <= now_ms)
            .map(|(c, t)| (t.start_order, *c))
            .collect();
        due.sort_unstable();
        for (_, component) in &due {
            if let Some(timer) = self.timers.get_mut(component) {
                timer.next_due_ms = add_ms(now_ms, timer.period_ms);
            }
        }
        due.into_iter().map(|(_, c)| c).collect()
    }

    /// The earliest expiry among running timers, or `None` when nothing is generating.
    pub fn next_deadline(&self) -> Option<TimeMs> {
        self.timers.values().map(|t| t.next_due_ms).min()
    }
}

/// `now + period`, saturating: a huge period simply never expires.
fn add_ms(now_ms: TimeMs, period_ms: u64) -> TimeMs {
    let period = i64::try_from(period_ms).unwrap_or(i64::MAX);
    now_ms.saturating_add(period)
}
