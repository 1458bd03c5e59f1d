//! Tick admission, pure and sans-IO: who may send ticks, which validators send in a period, and
//! which ordered ticks are evaluated.
//!
//! Ticks are ordinary transactions of the engine, so without a bound a faulty validator could
//! order a flood of them. These rules bound them, each a pure function of plain data (ids,
//! periods, agreed time) that every engine applies the same way:
//!
//! 1. [`TickAuthority`]: only the engine's validators (their own tick senders) may submit ticks;
//!    a tick from anyone else is refused before ordering and again at execution.
//! 2. [`TickSenders`]: with rotation, only F+1 validators send a component's tick in each
//!    period of local time (any F+1 include an honest one, so every period still gets a tick).
//! 3. [`TickPool`]: on each node, at most one pending tick per (sender, component), numbered,
//!    never a number a decided block already carried: the throttle and replay bound before
//!    ordering, the same rules every validator checks on a proposed block.
//! 4. [`TickCoalescer`]: at execution, at most one tick per (sender, component, period of agreed
//!    time) is evaluated; the rest are counted and skipped. Its state is replicated (digested,
//!    snapshotted) because it decides what executes.
//!
//! Signature checks stay in the engine: ccron gets senders the engine already authenticated.

use std::collections::BTreeMap;

use super::app::Millis;

/// A validator's index in the engine's validator set (sim-bft: the replica id).
pub type ValidatorId = u32;

/// Why a tick was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TickRejection {
    /// The sender is not one of the validators' tick senders.
    #[error("tick sender is not a validator")]
    NotAValidator,
    /// The component is not listed among the ticking components.
    #[error("component {0} does not tick")]
    UnknownComponent(u32),
    /// An earlier tick of the same sender, component and period was already evaluated.
    #[error(
        "tick coalesced: sender {sender} already ticked component {component} in period {period}"
    )]
    Coalesced {
        /// Component of the tick.
        component: u32,
        /// The sender.
        sender: ValidatorId,
        /// Period index of agreed time.
        period: i64,
    },
    /// A tick of the same sender and component with this number or a higher one is already
    /// pending ([`TickPool`]: at most one pending per sender and component).
    #[error(
        "tick throttled: sender {sender} already has tick {pending} of component {component} pending"
    )]
    AlreadyPending {
        /// Component of the tick.
        component: u32,
        /// The sender.
        sender: ValidatorId,
        /// The number of the pending tick.
        pending: u64,
    },
    /// The tick's number is not above the last one of its sender and component a decided block
    /// carried (a replay).
    #[error(
        "tick {number} of sender {sender}, component {component} is not above the last included {last}"
    )]
    Stale {
        /// Component of the tick.
        component: u32,
        /// The sender.
        sender: ValidatorId,
        /// The tick's number.
        number: u64,
        /// The last included number.
        last: u64,
    },
}

/// Who may submit ticks: the validators `0..n` (each through its own tick sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickAuthority {
    validators: u32,
}

impl TickAuthority {
    /// The authority of an `n`-validator set (ids `0..n`).
    pub fn new(validators: u32) -> Self {
        Self { validators }
    }

    /// The number of validators.
    pub fn validators(&self) -> u32 {
        self.validators
    }

    /// Checks the sender of a tick, as the engine authenticated it: `None` (a user client, or an
    /// unknown key) and ids outside the validator set are refused.
    pub fn authorize(&self, sender: Option<ValidatorId>) -> Result<ValidatorId, TickRejection> {
        match sender {
            Some(id) if id < self.validators => Ok(id),
            _ => Err(TickRejection::NotAValidator),
        }
    }
}

/// The index of the period of `period_ms` that `time_ms` falls in (`floor(time / period)`;
/// a zero period counts as 1 ms; never panics).
pub fn period_index(time_ms: Millis, period_ms: u64) -> i64 {
    time_ms.div_euclid(i64::try_from(period_ms).unwrap_or(i64::MAX).max(1))
}

/// Which validators send the ticks of a component in one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TickSenders {
    /// Every validator sends one tick per period: n ordered ticks per period.
    All,
    /// Only F+1 validators per period, rotating: the senders of period
    /// `p = floor(local time / period)` are validators `(p*(F+1) + k) mod n` for `k` in `0..F+1`.
    /// Any F+1 validators include an honest one, so every period still gets a tick.
    #[default]
    Rotating,
}

impl TickSenders {
    /// Whether validator `id` of an `n`-validator set tolerating `f` faults sends in period
    /// `period_index`.
    pub fn sends(self, id: ValidatorId, n: u32, f: u32, period_index: i64) -> bool {
        match self {
            TickSenders::All => true,
            TickSenders::Rotating => {
                let (n, id, k) = (i128::from(n.max(1)), i128::from(id), i128::from(f) + 1);
                let first = (i128::from(period_index) * k).rem_euclid(n);
                (id - first).rem_euclid(n) < k
            }
        }
    }
}

/// The flood bound at execution: at most one tick per (sender, component, period of agreed
/// time) is evaluated.
///
/// Replicated state: every replica holds the same coalescer after the same ordered ticks, so it
/// belongs in the state digest ([`TickCoalescer::entries`]) and the snapshot
/// ([`TickCoalescer::from_entries`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickCoalescer {
    /// Last evaluated period per (component, sender).
    last: BTreeMap<(u32, ValidatorId), i64>,
}

impl TickCoalescer {
    /// An empty coalescer (genesis).
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides whether an ordered tick of `component` from `sender` at agreed time `agreed` is
    /// evaluated, and records it when it is. `period_ms` is the component's tick period
    /// (`None`: not coalesced, e.g. no period configured); without agreed time nothing is
    /// coalesced either.
    pub fn admit(
        &mut self,
        component: u32,
        sender: ValidatorId,
        period_ms: Option<u64>,
        agreed: Option<Millis>,
    ) -> Result<(), TickRejection> {
        let (Some(period_ms), Some(t)) = (period_ms, agreed) else {
            return Ok(());
        };
        let period = period_index(t, period_ms);
        if self.last.get(&(component, sender)) == Some(&period) {
            return Err(TickRejection::Coalesced {
                component,
                sender,
                period,
            });
        }
        self.last.insert((component, sender), period);
        Ok(())
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    /// The recorded `(component, sender, period)` triples in ascending order (for digests and
    /// snapshots).
    pub fn entries(&self) -> impl Iterator<Item = (u32, ValidatorId, i64)> + '_ {
        self.last.iter().map(|((c, s), p)| (*c, *s, *p))
    }

    /// A coalescer holding exactly `entries` (a snapshot's).
    pub fn from_entries(entries: impl IntoIterator<Item = (u32, ValidatorId, i64)>) -> Self {
        Self {
            last: entries.into_iter().map(|(c, s, p)| ((c, s), p)).collect(),
        }
    }
}

/// What a [`TickPool`] did, counted (an engine reports it in its status; serde so an engine's
/// status record can embed it flattened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TickPoolCounters {
    /// Ticks admitted (new, or replacing an older pending one of the same sender and component).
    pub admitted: u64,
    /// Of those, ticks that replaced an older pending tick of their sender and component.
    pub replaced: u64,
    /// Refused: the sender is not a validator.
    pub not_a_validator: u64,
    /// Refused: the component does not tick.
    pub unknown_component: u64,
    /// Refused: a tick of the sender and component with this number or a higher one is
    /// already pending (the throttle: at most one pending per sender and component).
    pub already_pending: u64,
    /// Refused: a number not above the last one a decided block carried (a replay).
    pub stale: u64,
}

/// Validators' ticks waiting for a proposal, on one node (engine-independent).
///
/// A block-driven engine whose validators all submit ticks (not just the proposer's own) keeps
/// one pool per node: each validator signs its ticks (numbered, increasing per component) and
/// sends them to every validator; a node admits a tick only from a validator
/// ([`TickAuthority`]), for a ticking component, and only if its number is above the last one
/// of that sender and component a decided block carried (no replays). At most **one** tick per
/// (component, sender) is pending: a newer number replaces the pending one, an equal or older
/// one is refused ([`TickRejection::AlreadyPending`]). The pool is therefore bounded by
/// `validators x components` entries, whatever a faulty validator sends. A proposer puts the
/// pending ticks ([`TickPool::pending`]) into its block; every validator checks each carried
/// tick with [`TickPool::check`] (the same rules, against the chain's last included numbers);
/// when a block is decided, [`TickPool::on_included`] records its ticks' numbers and drops
/// what they supersede. Execution then bounds what runs per period ([`TickCoalescer`]).
///
/// `T` is the engine's tick transaction (e.g. signed bytes); signature checks stay in the
/// engine. The included numbers are a function of the decided blocks (rebuilt by replaying
/// them), so every validator judges a block's ticks the same way.
#[derive(Debug, Clone)]
pub struct TickPool<T> {
    authority: TickAuthority,
    components: std::collections::BTreeSet<u32>,
    pending: BTreeMap<(u32, ValidatorId), (u64, T)>,
    included: BTreeMap<(u32, ValidatorId), u64>,
    counters: TickPoolCounters,
}

impl<T> TickPool<T> {
    /// An empty pool of an `n`-validator set whose `components` tick.
    pub fn new(validators: u32, components: impl IntoIterator<Item = u32>) -> Self {
        Self {
            authority: TickAuthority::new(validators),
            components: components.into_iter().collect(),
            pending: BTreeMap::new(),
            included: BTreeMap::new(),
            counters: TickPoolCounters::default(),
        }
    }

    /// Whether a tick of `component` numbered `number` from `sender` (as the engine
    /// authenticated it) may be carried by a block: a validator, a ticking component, a number
    /// above the last included one of that sender and component. Returns the sender.
    pub fn check(
        &self,
        component: u32,
        sender: Option<ValidatorId>,
        number: u64,
    ) -> Result<ValidatorId, TickRejection> {
        let sender = self.authority.authorize(sender)?;
        if !self.components.contains(&component) {
            return Err(TickRejection::UnknownComponent(component));
        }
        if let Some(&last) = self.included.get(&(component, sender))
            && number <= last
        {
            return Err(TickRejection::Stale {
                component,
                sender,
                number,
                last,
            });
        }
        Ok(sender)
    }

    /// Admits a tick to the pool ([`check`](Self::check), then at most one pending per
    /// component and sender: a higher number replaces the pending tick). Every refusal is
    /// counted.
    pub fn admit(
        &mut self,
        component: u32,
        sender: Option<ValidatorId>,
        number: u64,
        tick: T,
    ) -> Result<(), TickRejection> {
        let sender = match self.check(component, sender, number) {
            Ok(s) => s,
            Err(e) => {
                let c = &mut self.counters;
                match e {
                    TickRejection::NotAValidator => c.not_a_validator += 1,
                    TickRejection::UnknownComponent(_) => c.unknown_component += 1,
                    _ => c.stale += 1,
                }
                return Err(e);
            }
        };
        if let Some((pending, _)) = self.pending.get(&(component, sender)) {
            if *pending >= number {
                self.counters.already_pending += 1;
                return Err(TickRejection::AlreadyPending {
                    component,
                    sender,
                    pending: *pending,
                });
            }
            self.counters.replaced += 1;
        }
        self.pending.insert((component, sender), (number, tick));
        self.counters.admitted += 1;
        Ok(())
    }

    /// The pending ticks, in (component, sender) order: what a proposer puts in its block.
    pub fn pending(&self) -> impl Iterator<Item = &T> + '_ {
        self.pending.values().map(|(_, t)| t)
    }

    /// How many ticks are pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no tick is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// A decided block carried tick `number` of `component` from `sender`: record it (later
    /// numbers only) and drop a pending tick it supersedes.
    pub fn on_included(&mut self, component: u32, sender: ValidatorId, number: u64) {
        let last = self.included.entry((component, sender)).or_insert(number);
        *last = (*last).max(number);
        let last = *last;
        if self
            .pending
            .get(&(component, sender))
            .is_some_and(|(n, _)| *n <= last)
        {
            self.pending.remove(&(component, sender));
        }
    }

    /// The last number of `component` from `sender` a decided block carried.
    pub fn last_included(&self, component: u32, sender: ValidatorId) -> Option<u64> {
        self.included.get(&(component, sender)).copied()
    }

    /// The counters.
    pub fn counters(&self) -> TickPoolCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_admits_only_validators() {
        let a = TickAuthority::new(4);
        assert_eq!(a.authorize(Some(0)), Ok(0));
        assert_eq!(a.authorize(Some(3)), Ok(3));
        assert_eq!(a.authorize(Some(4)), Err(TickRejection::NotAValidator));
        assert_eq!(a.authorize(None), Err(TickRejection::NotAValidator));
    }

    #[test]
    fn period_index_floors_and_never_panics() {
        assert_eq!(period_index(1_999, 1_000), 1);
        assert_eq!(period_index(-1, 1_000), -1);
        assert_eq!(period_index(5, 0), 5);
        assert_eq!(period_index(i64::MIN, u64::MAX), -2);
    }

    #[test]
    fn rotation_picks_f_plus_one_distinct_senders_per_period() {
        for (n, f) in [(4u32, 1u32), (7, 2), (10, 3), (1, 0)] {
            for p in [-3i64, 0, 1, 2, 1_000, i64::MAX, i64::MIN] {
                let senders: Vec<u32> = (0..n)
                    .filter(|id| TickSenders::Rotating.sends(*id, n, f, p))
                    .collect();
                assert_eq!(senders.len() as u32, (f + 1).min(n), "n={n} f={f} p={p}");
                assert!((0..n).all(|id| TickSenders::All.sends(id, n, f, p)));
            }
        }
        // Consecutive periods move the window: 4 replicas, f = 1.
        let of = |p| {
            (0..4)
                .filter(|id| TickSenders::Rotating.sends(*id, 4, 1, p))
                .collect::<Vec<_>>()
        };
        assert_eq!(of(0), vec![0, 1]);
        assert_eq!(of(1), vec![2, 3]);
        assert_eq!(of(2), vec![0, 1]);
    }

    #[test]
    fn coalescer_evaluates_one_tick_per_sender_component_and_period() {
        let mut c = TickCoalescer::new();
        assert_eq!(c.admit(1, 0, Some(1_000), Some(1_500)), Ok(()));
        assert_eq!(
            c.admit(1, 0, Some(1_000), Some(1_999)),
            Err(TickRejection::Coalesced {
                component: 1,
                sender: 0,
                period: 1
            })
        );
        // Another sender, another component, the next period: evaluated.
        assert_eq!(c.admit(1, 1, Some(1_000), Some(1_999)), Ok(()));
        assert_eq!(c.admit(2, 0, Some(1_000), Some(1_999)), Ok(()));
        assert_eq!(c.admit(1, 0, Some(1_000), Some(2_000)), Ok(()));
        // No period or no agreed time: never coalesced, nothing recorded.
        assert_eq!(c.admit(3, 0, None, Some(1)), Ok(()));
        assert_eq!(c.admit(3, 0, Some(1_000), None), Ok(()));
        let e: Vec<_> = c.entries().collect();
        assert_eq!(e, vec![(1, 0, 2), (1, 1, 1), (2, 0, 1)]);
        assert_eq!(TickCoalescer::from_entries(e), c);
    }

    #[test]
    fn pool_keeps_one_tick_per_sender_and_component_and_refuses_the_rest() {
        let mut p: TickPool<&str> = TickPool::new(4, [1, 2]);
        assert_eq!(p.admit(1, Some(0), 1, "a"), Ok(()));
        assert_eq!(p.admit(1, None, 5, "x"), Err(TickRejection::NotAValidator));
        assert_eq!(
            p.admit(1, Some(4), 5, "x"),
            Err(TickRejection::NotAValidator)
        );
        assert_eq!(
            p.admit(3, Some(0), 5, "x"),
            Err(TickRejection::UnknownComponent(3))
        );
        // The throttle: one pending per (component, sender); equal or older numbers refused.
        assert_eq!(
            p.admit(1, Some(0), 1, "dup"),
            Err(TickRejection::AlreadyPending {
                component: 1,
                sender: 0,
                pending: 1
            })
        );
        assert_eq!(
            p.admit(1, Some(0), 2, "b"),
            Ok(()),
            "a newer one replaces it"
        );
        assert_eq!(p.admit(1, Some(1), 1, "c"), Ok(()));
        assert_eq!(p.admit(2, Some(0), 1, "d"), Ok(()));
        assert_eq!(
            p.pending().copied().collect::<Vec<_>>(),
            vec!["b", "c", "d"]
        );
        // A decided block carried (1, 0, 2): it leaves, and its number cannot come back.
        p.on_included(1, 0, 2);
        assert_eq!(p.len(), 2);
        assert_eq!(p.last_included(1, 0), Some(2));
        assert_eq!(
            p.check(1, Some(0), 2),
            Err(TickRejection::Stale {
                component: 1,
                sender: 0,
                number: 2,
                last: 2
            })
        );
        assert!(p.admit(1, Some(0), 1, "old").is_err());
        assert_eq!(p.check(1, Some(0), 3), Ok(0));
        // An older inclusion never lowers the mark; a pending tick above it stays.
        p.on_included(1, 1, 0);
        assert_eq!(p.len(), 2);
        let c = p.counters();
        assert_eq!(
            (
                c.admitted,
                c.replaced,
                c.not_a_validator,
                c.unknown_component,
                c.already_pending,
                c.stale
            ),
            (4, 1, 2, 1, 1, 1)
        );
    }
}
