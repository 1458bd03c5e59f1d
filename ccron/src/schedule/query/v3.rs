//! Query answer format 3, frozen: what nodes built before format 4 answer. A format-4 reader
//! decodes it ([`super::QueryAnswer::decode`]) so that a client upgraded before the nodes still
//! reads a cluster in a rolling upgrade; a format-3 description becomes a format-4 one whose
//! [`super::ScheduleDetail::policies`] is `None` ("not reported"). Never encoded by this build
//! outside tests.

use super::v4::{BodyV4, ListV4};
use super::v5::BookStateV5;
use super::{
    Bounds, DeadRun, ManualRuns, NewSchedule, OutboxState, PendingRetry, QueryBody, QueryError,
    RunEntry, RunPolicy, ScheduleCounters, ScheduleDetail, Upcoming,
};

/// Version byte of format 3.
pub(super) const FORMAT_V3: u8 = 3;

/// A format-3 description: [`ScheduleDetail`] without its policies.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct DetailV3 {
    pub(super) summary: super::ScheduleSummary,
    pub(super) schedule: NewSchedule,
    pub(super) policy: RunPolicy,
    pub(super) retry: Option<PendingRetry>,
    pub(super) dead: Vec<DeadRun>,
    pub(super) history: Vec<RunEntry>,
    pub(super) upcoming: Vec<Upcoming>,
    pub(super) counters: ScheduleCounters,
    pub(super) manual: ManualRuns,
    pub(super) bounds: Bounds,
}

/// A format-3 body: format 4's ([`BodyV4`]) with [`DetailV3`] descriptions (the other bodies
/// did not change).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) enum BodyV3 {
    List(ListV4),
    Describe(Option<Box<DetailV3>>),
    Book(BookStateV5),
    Outbox(Option<OutboxState>),
}

/// A format-3 answer on the wire.
#[derive(bincode::Encode, bincode::Decode)]
pub(super) struct WireV3 {
    pub(super) version: u8,
    pub(super) replica: u64,
    pub(super) at_height: u64,
    pub(super) body: BodyV3,
}

impl From<DetailV3> for ScheduleDetail {
    fn from(d: DetailV3) -> Self {
        ScheduleDetail {
            summary: d.summary,
            schedule: d.schedule,
            policy: d.policy,
            retry: d.retry,
            dead: d.dead,
            history: d.history,
            upcoming: d.upcoming,
            counters: d.counters,
            manual: d.manual,
            bounds: d.bounds,
            policies: None,
        }
    }
}

impl From<ScheduleDetail> for DetailV3 {
    /// The projection a format-3 node would have answered (the policies dropped).
    fn from(d: ScheduleDetail) -> Self {
        DetailV3 {
            summary: d.summary,
            schedule: d.schedule,
            policy: d.policy,
            retry: d.retry,
            dead: d.dead,
            history: d.history,
            upcoming: d.upcoming,
            counters: d.counters,
            manual: d.manual,
            bounds: d.bounds,
        }
    }
}

impl From<BodyV3> for QueryBody {
    fn from(b: BodyV3) -> Self {
        match b {
            BodyV3::List(l) => QueryBody::List(l.into()),
            BodyV3::Describe(d) => QueryBody::Describe(d.map(|d| Box::new((*d).into()))),
            BodyV3::Book(s) => QueryBody::Book(s.into()),
            BodyV3::Outbox(o) => QueryBody::Outbox(o),
        }
    }
}

impl TryFrom<QueryBody> for BodyV3 {
    type Error = QueryError;

    fn try_from(b: QueryBody) -> Result<Self, QueryError> {
        Ok(match BodyV4::try_from(b)? {
            BodyV4::List(l) => BodyV3::List(l),
            BodyV4::Describe(d) => BodyV3::Describe(d.map(|d| Box::new((*d).into()))),
            BodyV4::Book(s) => BodyV3::Book(s),
            BodyV4::Outbox(o) => BodyV3::Outbox(o),
        })
    }
}
