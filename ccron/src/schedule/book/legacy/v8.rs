//! Layout 8 (records with bounds and the retired state, retirements counted; no overlap
//! policy), read so that the next save migrates it to layout 9. Frozen copies of its
//! encodings: never change them (persisted bytes are forever).

use super::{LoggedCommit, OldRecord, record};
use crate::authz::PrincipalV1;
use crate::due::Due;
use crate::record_log::{LogSpan, Stale};
use crate::schedule::book::{
    Bounds, DeadRun, ManualRuns, NewSchedule, PendingRetry, Record, Retired, RunCounters, RunEntry,
    RunPolicy,
};
use crate::tick::{ComponentId, TimeMs};

/// The run counters of layout 8 (with retirements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RunCountersV8 {
    fired: u64,
    failed: u64,
    late: u64,
    skipped: u64,
    expired: u64,
    retired: u64,
}

impl RunCountersV8 {
    pub(super) fn upgrade(self) -> RunCounters {
        RunCounters {
            fired: self.fired,
            failed: self.failed,
            late: self.late,
            skipped: self.skipped,
            expired: self.expired,
            retired: self.retired,
        }
    }
}

/// A record of layout 8 (layout 7's with bounds and the retired state; no overlap policy).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV8 {
    def: NewSchedule,
    paused: bool,
    next: Option<Due>,
    runs: u64,
    owed: Option<(TimeMs, TimeMs)>,
    owner: PrincipalV1,
    version: u64,
    parked: bool,
    policy: RunPolicy,
    retry: Option<PendingRetry>,
    dead: Vec<DeadRun>,
    dead_evicted: u64,
    history: Vec<RunEntry>,
    counters: RunCountersV8,
    manual: ManualRuns,
    bounds: Bounds,
    retired: Option<Retired>,
}

impl OldRecord for RecordV8 {
    fn upgrade(self) -> Record {
        let state = (self.paused, self.next, self.runs, self.owed);
        let mut r = record(self.def, state, self.owner.into(), self.version);
        r.parked = self.parked;
        r.policy = self.policy;
        r.retry = self.retry;
        r.dead = self.dead;
        r.dead_evicted = self.dead_evicted;
        r.history = self.history;
        r.counters = self.counters.upgrade();
        r.manual = self.manual;
        r.bounds = self.bounds;
        r.retired = self.retired;
        // No overlap policy: `AllowAll`, nothing awaited or buffered (the default).
        r
    }
}

/// The commit page of layout 8.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct CommitV8 {
    version: u8,
    pub(super) component: ComponentId,
    next_id: u64,
    page_bytes: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
    pub(super) log: LogSpan,
    pub(super) stale: Stale,
    totals: RunCountersV8,
}

impl From<CommitV8> for LoggedCommit {
    fn from(c: CommitV8) -> Self {
        Self {
            component: c.component,
            next_id: c.next_id,
            records: c.records,
            zones: c.zones,
            zones_crc: c.zones_crc,
            log: c.log,
            stale: c.stale,
            totals: c.totals.upgrade(),
        }
    }
}
