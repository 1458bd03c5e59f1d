//! Query answer format 5, frozen: what nodes built before format 6 answer. A format-6 reader
//! decodes it ([`super::QueryAnswer::decode`]) so that a client upgraded before the nodes still
//! reads a cluster in a rolling upgrade: a format-5 book state becomes a format-6 one whose
//! [`super::BookState::refusals`] is `None` ("not reported"). Formats 4 and 3 share its book
//! state ([`BookStateV5`]); its lists and table entry descriptions are format 6's
//! ([`ListV6`], [`EntryDetailV6`]: no overlap counts). Never encoded by this build outside
//! tests.

use super::v6::{EntryDetailV6, ListV6};
use super::{BookState, OutboxState, QueryBody, RunCounters, ScheduleDetail};
use crate::tick::TimeMs;

/// Version byte of format 5.
pub(super) const FORMAT_V5: u8 = 5;

/// A format-5 (and format-4 and -3) book state: [`BookState`] without its refusal counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct BookStateV5 {
    pub(super) component: u32,
    pub(super) schedules: u64,
    pub(super) paused: u64,
    pub(super) parked: u64,
    pub(super) retries_pending: u64,
    pub(super) dead_runs: u64,
    pub(super) runs: u64,
    pub(super) earliest_due_ms: Option<TimeMs>,
    pub(super) totals: RunCounters,
}

/// A format-5 body: [`QueryBody`] with [`BookStateV5`] book states.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) enum BodyV5 {
    List(ListV6),
    Describe(Option<Box<ScheduleDetail>>),
    Book(BookStateV5),
    Outbox(Option<OutboxState>),
    Entry(Option<Box<EntryDetailV6>>),
}

/// A format-5 answer on the wire.
#[derive(bincode::Encode, bincode::Decode)]
pub(super) struct WireV5 {
    pub(super) version: u8,
    pub(super) replica: u64,
    pub(super) at_height: u64,
    pub(super) body: BodyV5,
}

impl From<BookStateV5> for BookState {
    fn from(s: BookStateV5) -> Self {
        BookState {
            component: s.component,
            schedules: s.schedules,
            paused: s.paused,
            parked: s.parked,
            retries_pending: s.retries_pending,
            dead_runs: s.dead_runs,
            runs: s.runs,
            earliest_due_ms: s.earliest_due_ms,
            totals: s.totals,
            refusals: None,
        }
    }
}

impl From<BookState> for BookStateV5 {
    /// The projection a format-5 node would have answered (the refusals dropped).
    fn from(s: BookState) -> Self {
        BookStateV5 {
            component: s.component,
            schedules: s.schedules,
            paused: s.paused,
            parked: s.parked,
            retries_pending: s.retries_pending,
            dead_runs: s.dead_runs,
            runs: s.runs,
            earliest_due_ms: s.earliest_due_ms,
            totals: s.totals,
        }
    }
}

impl From<BodyV5> for QueryBody {
    fn from(b: BodyV5) -> Self {
        match b {
            BodyV5::List(l) => QueryBody::List(l.into()),
            BodyV5::Describe(d) => QueryBody::Describe(d),
            BodyV5::Book(s) => QueryBody::Book(s.into()),
            BodyV5::Outbox(o) => QueryBody::Outbox(o),
            BodyV5::Entry(e) => QueryBody::Entry(e.map(|d| Box::new((*d).into()))),
        }
    }
}

impl From<QueryBody> for BodyV5 {
    fn from(b: QueryBody) -> Self {
        match b {
            QueryBody::List(l) => BodyV5::List(l.into()),
            QueryBody::Describe(d) => BodyV5::Describe(d),
            QueryBody::Book(s) => BodyV5::Book(s.into()),
            QueryBody::Outbox(o) => BodyV5::Outbox(o),
            QueryBody::Entry(e) => BodyV5::Entry(e.map(|d| Box::new((*d).into()))),
        }
    }
}
