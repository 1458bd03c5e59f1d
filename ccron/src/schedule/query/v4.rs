//! Query answer format 4, frozen: what nodes built before format 5 answer. A format-5 reader
//! decodes it ([`super::QueryAnswer::decode`]) so that a client upgraded before the nodes still
//! reads a cluster in a rolling upgrade: a format-4 list becomes a format-5 one whose
//! [`super::ScheduleList::entries`] is `None` ("not reported"), and its book state (format 5's,
//! [`BookStateV5`]) one whose [`super::BookState::refusals`] is `None`. Format 3 shares its
//! list ([`ListV4`]). Never encoded by this build outside tests.

use super::v5::BookStateV5;
use super::{OutboxState, QueryBody, QueryError, ScheduleDetail, ScheduleList};

/// Version byte of format 4.
pub(super) const FORMAT_V4: u8 = 4;

/// A format-4 (and format-3) list: [`ScheduleList`] without its table entries.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct ListV4 {
    pub(super) component: u32,
    pub(super) matched: u64,
    pub(super) items: Vec<super::ScheduleSummary>,
    pub(super) next_after: Option<u64>,
}

/// A format-4 body: [`QueryBody`] with [`ListV4`] lists and no table entry descriptions.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) enum BodyV4 {
    List(ListV4),
    Describe(Option<Box<ScheduleDetail>>),
    Book(BookStateV5),
    Outbox(Option<OutboxState>),
}

/// A format-4 answer on the wire.
#[derive(bincode::Encode, bincode::Decode)]
pub(super) struct WireV4 {
    pub(super) version: u8,
    pub(super) replica: u64,
    pub(super) at_height: u64,
    pub(super) body: BodyV4,
}

impl From<ListV4> for ScheduleList {
    fn from(l: ListV4) -> Self {
        ScheduleList {
            component: l.component,
            matched: l.matched,
            items: l.items,
            next_after: l.next_after,
            entries: None,
        }
    }
}

impl From<ScheduleList> for ListV4 {
    /// The projection a format-4 node would have answered (the entries dropped).
    fn from(l: ScheduleList) -> Self {
        ListV4 {
            component: l.component,
            matched: l.matched,
            items: l.items,
            next_after: l.next_after,
        }
    }
}

impl From<BodyV4> for QueryBody {
    fn from(b: BodyV4) -> Self {
        match b {
            BodyV4::List(l) => QueryBody::List(l.into()),
            BodyV4::Describe(d) => QueryBody::Describe(d),
            BodyV4::Book(s) => QueryBody::Book(s.into()),
            BodyV4::Outbox(o) => QueryBody::Outbox(o),
        }
    }
}

impl TryFrom<QueryBody> for BodyV4 {
    type Error = QueryError;

    fn try_from(b: QueryBody) -> Result<Self, QueryError> {
        Ok(match b {
            QueryBody::List(l) => BodyV4::List(l.into()),
            QueryBody::Describe(d) => BodyV4::Describe(d),
            QueryBody::Book(s) => BodyV4::Book(s.into()),
            QueryBody::Outbox(o) => BodyV4::Outbox(o),
            QueryBody::Entry(_) => {
                return Err(QueryError::Codec(
                    "format 4 has no table entry descriptions".into(),
                ));
            }
        })
    }
}
