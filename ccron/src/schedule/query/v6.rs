//! Query answer format 6, frozen: what nodes built before format 7 answer. A format-7 reader
//! decodes it ([`super::QueryAnswer::decode`]) so that a client upgraded before the nodes still
//! reads a cluster in a rolling upgrade: a format-6 table entry becomes a format-7 one whose
//! [`super::EntrySummary::overlap_counts`] is `None` ("not reported"). Format 5 shares its list
//! and entry description ([`ListV6`], [`EntryDetailV6`]). Never encoded by this build outside
//! tests.

use super::{
    BookState, EntryCursor, EntryDetail, EntryPage, EntryRetirement, EntryRule, EntrySummary,
    OutboxState, QueryBody, ScheduleDetail, ScheduleList, ScheduleSummary, Upcoming,
};
use crate::due::Due;
use crate::schedule::Overlap;
use crate::tick::ComponentId;

/// Version byte of format 6.
pub(super) const FORMAT_V6: u8 = 6;

/// A format-6 (and format-5) table entry: [`EntrySummary`] without its overlap counts.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct EntrySummaryV6 {
    pub(super) component: ComponentId,
    pub(super) position: u32,
    pub(super) rule: EntryRule,
    pub(super) overlap: Overlap,
    pub(super) schedule_next: bool,
    pub(super) on_remove: bool,
    pub(super) next: Option<Due>,
    pub(super) stored: bool,
    pub(super) retired: Option<EntryRetirement>,
    pub(super) fired: u64,
    pub(super) awaiting: bool,
}

/// A format-6 page of table entries.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct EntryPageV6 {
    pub(super) matched: u64,
    pub(super) items: Vec<EntrySummaryV6>,
    pub(super) next: Option<EntryCursor>,
}

/// A format-6 (and format-5) list: [`ScheduleList`] with [`EntrySummaryV6`] entries.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct ListV6 {
    pub(super) component: u32,
    pub(super) matched: u64,
    pub(super) items: Vec<ScheduleSummary>,
    pub(super) next_after: Option<u64>,
    pub(super) entries: Option<EntryPageV6>,
}

/// A format-6 (and format-5) table entry described.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct EntryDetailV6 {
    pub(super) summary: EntrySummaryV6,
    pub(super) upcoming: Vec<Upcoming>,
    pub(super) computable: bool,
}

/// A format-6 body: [`QueryBody`] with [`ListV6`] lists and [`EntryDetailV6`] descriptions.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) enum BodyV6 {
    List(ListV6),
    Describe(Option<Box<ScheduleDetail>>),
    Book(BookState),
    Outbox(Option<OutboxState>),
    Entry(Option<Box<EntryDetailV6>>),
}

/// A format-6 answer on the wire.
#[derive(bincode::Encode, bincode::Decode)]
pub(super) struct WireV6 {
    pub(super) version: u8,
    pub(super) replica: u64,
    pub(super) at_height: u64,
    pub(super) body: BodyV6,
}

impl From<EntrySummaryV6> for EntrySummary {
    fn from(e: EntrySummaryV6) -> Self {
        EntrySummary {
            component: e.component,
            position: e.position,
            rule: e.rule,
            overlap: e.overlap,
            schedule_next: e.schedule_next,
            on_remove: e.on_remove,
            next: e.next,
            stored: e.stored,
            retired: e.retired,
            fired: e.fired,
            awaiting: e.awaiting,
            overlap_counts: None,
        }
    }
}

impl From<EntrySummary> for EntrySummaryV6 {
    /// The projection a format-6 node would have answered (the overlap counts dropped).
    fn from(e: EntrySummary) -> Self {
        EntrySummaryV6 {
            component: e.component,
            position: e.position,
            rule: e.rule,
            overlap: e.overlap,
            schedule_next: e.schedule_next,
            on_remove: e.on_remove,
            next: e.next,
            stored: e.stored,
            retired: e.retired,
            fired: e.fired,
            awaiting: e.awaiting,
        }
    }
}

impl From<EntryPageV6> for EntryPage {
    fn from(p: EntryPageV6) -> Self {
        EntryPage {
            matched: p.matched,
            items: p.items.into_iter().map(Into::into).collect(),
            next: p.next,
        }
    }
}

impl From<EntryPage> for EntryPageV6 {
    fn from(p: EntryPage) -> Self {
        EntryPageV6 {
            matched: p.matched,
            items: p.items.into_iter().map(Into::into).collect(),
            next: p.next,
        }
    }
}

impl From<ListV6> for ScheduleList {
    fn from(l: ListV6) -> Self {
        ScheduleList {
            component: l.component,
            matched: l.matched,
            items: l.items,
            next_after: l.next_after,
            entries: l.entries.map(Into::into),
        }
    }
}

impl From<ScheduleList> for ListV6 {
    fn from(l: ScheduleList) -> Self {
        ListV6 {
            component: l.component,
            matched: l.matched,
            items: l.items,
            next_after: l.next_after,
            entries: l.entries.map(Into::into),
        }
    }
}

impl From<EntryDetailV6> for EntryDetail {
    fn from(d: EntryDetailV6) -> Self {
        EntryDetail {
            summary: d.summary.into(),
            upcoming: d.upcoming,
            computable: d.computable,
        }
    }
}

impl From<EntryDetail> for EntryDetailV6 {
    fn from(d: EntryDetail) -> Self {
        EntryDetailV6 {
            summary: d.summary.into(),
            upcoming: d.upcoming,
            computable: d.computable,
        }
    }
}

impl From<BodyV6> for QueryBody {
    fn from(b: BodyV6) -> Self {
        match b {
            BodyV6::List(l) => QueryBody::List(l.into()),
            BodyV6::Describe(d) => QueryBody::Describe(d),
            BodyV6::Book(s) => QueryBody::Book(s),
            BodyV6::Outbox(o) => QueryBody::Outbox(o),
            BodyV6::Entry(e) => QueryBody::Entry(e.map(|d| Box::new((*d).into()))),
        }
    }
}

impl From<QueryBody> for BodyV6 {
    fn from(b: QueryBody) -> Self {
        match b {
            QueryBody::List(l) => BodyV6::List(l.into()),
            QueryBody::Describe(d) => BodyV6::Describe(d),
            QueryBody::Book(s) => BodyV6::Book(s),
            QueryBody::Outbox(o) => BodyV6::Outbox(o),
            QueryBody::Entry(e) => BodyV6::Entry(e.map(|d| Box::new((*d).into()))),
        }
    }
}
