//! Layout 9 (records whose owner is a 64-bit client id, [`PrincipalV1`]), read so that the
//! next save migrates it to layout 10, where owners are 256-bit ids and an old client owner
//! becomes [`Principal::LegacyClient`](crate::authz::Principal::LegacyClient). Frozen copies of
//! its encodings: never change them (persisted bytes are forever).

use super::v8::RunCountersV8;
use super::{LoggedCommit, OldRecord, record};
use crate::authz::PrincipalV1;
use crate::due::Due;
use crate::record_log::{LogSpan, Stale};
use crate::schedule::book::{
    Bounds, DeadRun, ManualRuns, NewSchedule, OverlapState, PendingRetry, Record, Retired,
    RunEntry, RunPolicy,
};
use crate::tick::{ComponentId, TimeMs};

/// A record of layout 9 (layout 10's with a 64-bit owner).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV9 {
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
    overlap: Option<Box<OverlapState>>,
}

impl OldRecord for RecordV9 {
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
        r.overlap = self.overlap;
        r
    }
}

/// The commit page of layout 9 (the same fields as layout 10's).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct CommitV9 {
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

impl From<CommitV9> for LoggedCommit {
    fn from(c: CommitV9) -> Self {
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
