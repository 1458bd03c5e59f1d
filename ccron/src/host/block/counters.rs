//! [`HostCounters`]: what a host did, counted (replicated), and their canonical encoding.

use std::collections::BTreeMap;

use crate::host::ticks::ValidatorId;

/// What a host did, counted: replicated (a function of the executed blocks, in the digest and
/// the snapshot), so every validator reports the same figures at the same height.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostCounters {
    /// Ticks evaluated (admitted by the gate and run, successfully or not).
    pub ticks_evaluated: u64,
    /// Ticks the gate skipped (not a validator, unknown component, replay, coalesced).
    pub ticks_skipped: u64,
    /// Evaluated ticks the application refused.
    pub ticks_failed: u64,
    /// Evaluated ticks per sender (validator index).
    pub ticks_by_sender: BTreeMap<ValidatorId, u64>,
    /// Cron actions fired.
    pub fires: u64,
    /// Client requests executed.
    pub requests_executed: u64,
    /// Ordered requests not run because their `(client, number)` already executed.
    pub requests_duplicate: u64,
    /// Ordered requests refused without running ([`RequestRefusal`](super::RequestRefusal)).
    pub requests_refused: u64,
}

impl HostCounters {
    /// The counters as one flat tuple list (the canonical encoding's order).
    pub(super) fn encoded(&self) -> CountersWire {
        (
            self.scalars(),
            self.ticks_by_sender.iter().map(|(s, n)| (*s, *n)).collect(),
        )
    }

    /// The scalar counters in the canonical encoding's order (the first part of
    /// [`Self::encoded`]; the state digest reads them without the encoding's allocation).
    #[inline]
    pub(super) fn scalars(&self) -> [u64; 7] {
        [
            self.ticks_evaluated,
            self.ticks_skipped,
            self.ticks_failed,
            self.fires,
            self.requests_executed,
            self.requests_duplicate,
            self.requests_refused,
        ]
    }

    pub(super) fn from_encoded((v, by_sender): CountersWire) -> Self {
        let [
            ticks_evaluated,
            ticks_skipped,
            ticks_failed,
            fires,
            requests_executed,
            requests_duplicate,
            requests_refused,
        ] = v;
        Self {
            ticks_evaluated,
            ticks_skipped,
            ticks_failed,
            ticks_by_sender: by_sender.into_iter().collect(),
            fires,
            requests_executed,
            requests_duplicate,
            requests_refused,
        }
    }
}

/// [`HostCounters`] as encoded: the scalar counters, then evaluated ticks per sender.
pub(super) type CountersWire = ([u64; 7], Vec<(ValidatorId, u64)>);
