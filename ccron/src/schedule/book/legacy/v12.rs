//! Layout 12 (the commit page without the book's admission refusal counters), read so that
//! the next save migrates it to layout 13, whose commit page counts them
//! ([`RefusalCounters`](crate::schedule::RefusalCounters)); a migrated book's counters start at
//! zero. Its records and its zones part are layout 13's. A frozen copy of its commit page:
//! never change it (persisted bytes are forever).

use super::{LoggedCommit, OldRecord};
use crate::record_log::{LogSpan, Stale};
use crate::schedule::book::{Record, RunCounters};
use crate::tick::ComponentId;

/// Layout 12's records are layout 13's.
impl OldRecord for Record {
    fn upgrade(self) -> Record {
        self
    }
}

/// The commit page of layout 12 (layout 13's without the refusal counters).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct CommitV12 {
    version: u8,
    pub(super) component: ComponentId,
    next_id: u64,
    page_bytes: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
    pub(super) log: LogSpan,
    pub(super) stale: Stale,
    totals: RunCounters,
    /// How many exclusion calendars the zones part holds after the zones.
    pub(super) calendars: u32,
}

impl From<CommitV12> for LoggedCommit {
    fn from(c: CommitV12) -> Self {
        Self {
            component: c.component,
            next_id: c.next_id,
            records: c.records,
            zones: c.zones,
            zones_crc: c.zones_crc,
            log: c.log,
            stale: c.stale,
            totals: c.totals,
        }
    }
}
