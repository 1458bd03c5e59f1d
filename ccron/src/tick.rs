//! The tick: what a committed tick request hands to the cron tables.

use serde::{Deserialize, Serialize};

/// Identifies a component (one cron table per component).
pub type ComponentId = u32;

/// Agreed time in milliseconds since the Unix epoch (signed, as the reference defines it).
pub type TimeMs = i64;

/// A committed tick, as the host hands it to [`crate`]'s tables.
///
/// Every replica sees the same ticks, in the same order, at the same point of the ordered log, so
/// everything evaluated against a tick is deterministic. Equality covers all three fields.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
pub struct Tick {
    /// The component this tick is for.
    pub component_id: ComponentId,
    /// The consensus sequence number of the batch that carried the tick.
    pub bft_sequence_num: u64,
    /// The time the replicas agreed on for that batch; `None` when the time service is off.
    pub agreed_time_ms: Option<TimeMs>,
}

impl Tick {
    /// A tick for `component_id` at `bft_sequence_num`, with agreed time `agreed_time_ms`.
    pub fn new(
        component_id: ComponentId,
        bft_sequence_num: u64,
        agreed_time_ms: Option<TimeMs>,
    ) -> Self {
        Self {
            component_id,
            bft_sequence_num,
            agreed_time_ms,
        }
    }
}
