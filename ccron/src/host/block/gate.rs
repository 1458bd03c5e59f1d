//! [`TickGate`]: tick admission at execution (authorization, ticking components, the replay
//! floor of tick numbers, the per-period flood bound).

use std::collections::BTreeMap;

use crate::host::app::Millis;
use crate::host::ticks::{TickAuthority, TickCoalescer, TickRejection, ValidatorId};

/// Tick admission at execution: authorization, ticking components, the replay floor and the
/// flood bound. Its state (the floor and the coalescer) is replicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickGate {
    authority: TickAuthority,
    /// Ticking components and their tick periods (empty: every component ticks, none coalesced).
    periods: BTreeMap<u32, u64>,
    coalescer: TickCoalescer,
    /// The highest tick number ordered per (component, sender): a tick at or below it is a
    /// replay.
    floor: BTreeMap<(u32, ValidatorId), u64>,
}

impl TickGate {
    /// A gate for `validators` validators whose components `periods` tick (component → tick
    /// period in ms; empty: any component, no coalescing).
    pub fn new(validators: u32, periods: BTreeMap<u32, u64>) -> Self {
        Self {
            authority: TickAuthority::new(validators),
            periods,
            coalescer: TickCoalescer::new(),
            floor: BTreeMap::new(),
        }
    }

    /// The validators' authority.
    pub fn authority(&self) -> TickAuthority {
        self.authority
    }

    /// Whether `component` ticks (listed, or no list).
    pub fn ticks(&self, component: u32) -> bool {
        self.periods.is_empty() || self.periods.contains_key(&component)
    }

    /// The tick period of `component`, if listed.
    pub fn period_ms(&self, component: u32) -> Option<u64> {
        self.periods.get(&component).copied()
    }

    /// The ticking components and their periods.
    pub fn periods(&self) -> &BTreeMap<u32, u64> {
        &self.periods
    }

    /// The replicated coalescer state.
    pub fn coalescer(&self) -> &TickCoalescer {
        &self.coalescer
    }

    /// The highest tick number ordered for `component` from `sender` (the replay floor).
    pub fn last_number(&self, component: u32, sender: ValidatorId) -> Option<u64> {
        self.floor.get(&(component, sender)).copied()
    }

    /// The replay floor's `(component, sender, number)` entries in ascending order.
    pub fn floor_entries(&self) -> impl Iterator<Item = (u32, ValidatorId, u64)> + '_ {
        self.floor.iter().map(|((c, s), n)| (*c, *s, *n))
    }

    /// Replaces the replicated state (a snapshot's coalescer and floor).
    pub(super) fn replace_state(
        &mut self,
        coalescer: TickCoalescer,
        floor: impl IntoIterator<Item = (u32, ValidatorId, u64)>,
    ) {
        self.coalescer = coalescer;
        self.floor = floor.into_iter().map(|(c, s, n)| ((c, s), n)).collect();
    }

    /// Admits an ordered tick: its sender must be a validator, its component must tick, its
    /// number must be above the last one ordered for its sender and component (the floor rises
    /// to it), and it must be the first of its sender, component and period of `agreed` time.
    /// Returns the sender.
    pub fn admit(
        &mut self,
        component: u32,
        sender: Option<ValidatorId>,
        number: u64,
        agreed: Option<Millis>,
    ) -> Result<ValidatorId, TickRejection> {
        let sender = self.authority.authorize(sender)?;
        if !self.ticks(component) {
            return Err(TickRejection::UnknownComponent(component));
        }
        if let Some(&last) = self.floor.get(&(component, sender))
            && number <= last
        {
            return Err(TickRejection::Stale {
                component,
                sender,
                number,
                last,
            });
        }
        self.floor.insert((component, sender), number);
        self.coalescer
            .admit(component, sender, self.period_ms(component), agreed)?;
        Ok(sender)
    }
}
