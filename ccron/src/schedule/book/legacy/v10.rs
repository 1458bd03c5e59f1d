//! Layout 10 (records without an exclusion calendar; the zones part holds zone rules only),
//! read so that the next save migrates it to layout 11, where a recurring cron record may name
//! an exclusion calendar and the zones part holds the book's calendars too. Frozen copies of
//! its encodings: never change them (persisted bytes are forever).

use super::{LoggedCommit, OldRecord, record};
use crate::authz::Principal;
use crate::due::Due;
use crate::record_log::{LogSpan, Stale};
use crate::schedule::book::{
    Bounds, DeadRun, ManualRuns, NewSchedule, OverlapState, PendingRetry, Record, Retired,
    RunCounters, RunEntry, RunPolicy,
};
use crate::tick::{ComponentId, TimeMs};

/// A record of layout 10 (layout 11's without the calendar name).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV10 {
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
}

impl OldRecord for RecordV10 {
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
        r
    }
}

/// The commit page of layout 10 (layout 11's without the calendar count).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct CommitV10 {
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
}

impl From<CommitV10> for LoggedCommit {
    fn from(c: CommitV10) -> Self {
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
