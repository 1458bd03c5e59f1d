//! Layout 11 (records without their backfills' overlap policy), read so that the next save
//! migrates it to layout 12, where a recurring record carries the overlap policy of its
//! backfills and the backfill run it awaits. Its zones part holds the zones and the exclusion
//! calendars, as layout 12's does. Frozen copies of its encodings: never change them
//! (persisted bytes are forever).

use super::{LoggedCommit, OldRecord, record};
use crate::authz::Principal;
use crate::due::Due;
use crate::record_log::{LogSpan, Stale};
use crate::schedule::book::{
    Bounds, DeadRun, ManualRuns, NewSchedule, OverlapState, PendingRetry, Record, Retired,
    RunCounters, RunEntry, RunPolicy,
};
use crate::tick::{ComponentId, TimeMs};

/// A record of layout 11 (layout 12's without the backfills' overlap policy).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV11 {
    def: NewSchedule,
    paused: bool,
    next: Option<Due>,
    runs: u64,
    owed: Option<(TimeMs, TimeMs)>,
    owner: Principal,
    version: u64,
    parked: bool,
    policy: RunPolicy,
    retry: Option<PendingRetry>,
    dead: Vec<DeadRun>,
    dead_evicted: u64,
    history: Vec<RunEntry>,
    counters: RunCounters,
    manual: ManualRuns,
    bounds: Bounds,
    retired: Option<Retired>,
    overlap: Option<Box<OverlapState>>,
    calendar: Option<String>,
}

impl OldRecord for RecordV11 {
    fn upgrade(self) -> Record {
        let state = (self.paused, self.next, self.runs, self.owed);
        let mut r = record(self.def, state, self.owner, self.version);
        r.parked = self.parked;
        r.policy = self.policy;
        r.retry = self.retry;
        r.dead = self.dead;
        r.dead_evicted = self.dead_evicted;
        r.history = self.history;
        r.counters = self.counters;
        r.manual = self.manual;
        r.bounds = self.bounds;
        r.retired = self.retired;
        r.overlap = self.overlap;
        r.calendar = self.calendar;
        r
    }
}

/// The commit page of layout 11 (the same fields as layout 12's).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct CommitV11 {
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

impl From<CommitV11> for LoggedCommit {
    fn from(c: CommitV11) -> Self {
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
