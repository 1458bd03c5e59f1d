//! Read-only queries over a schedule book and its outbox: what a node's schedule read API
//! answers ([`list`], [`describe`], [`book_state`], [`outbox_state`]), and the versioned,
//! bounded wire format of an answer ([`QueryAnswer`]).
//!
//! Every query is a pure function of replicated state (the book, the outbox) and its
//! arguments, so honest replicas at the same height answer byte-identically; a reader outside
//! consensus believes an answer only when f+1 replicas return it identically at the same
//! height (`ccron_http::schedules`). Node-local state (tick pools, mempools) is never in an
//! answer.
//!
//! Bounds: a list holds at most [`MAX_LIST_LIMIT`] summaries and about [`LIST_BYTE_BUDGET`]
//! bytes (a cursor, [`ScheduleList::next_after`], continues it); a description at most
//! [`MAX_PREVIEW`] upcoming instants and the record's bounded history and dead runs. Wire
//! format: a version byte, the replica id, the height, the body, through bincode 2.0.1 with
//! fixed-width big-endian integers and a hard limit of [`MAX_ANSWER_BYTES`]; the decoder
//! refuses trailing bytes, unknown versions and every over-bound collection (a typed
//! [`QueryError`], never a panic).
//!
//! Cron table entries (format 5, `entries.rs`): a list carries the ledger's table entries
//! after the book's schedules ([`ScheduleList::entries`]), [`describe_entry`] one entry with its
//! upcoming instants ([`QueryBody::Entry`]).
//!
//! Formats: this build answers format [`QUERY_FORMAT_VERSION`] (7) and reads 7, 6, 5, 4 and 3
//! (`v6.rs`, `v5.rs`, `v4.rs`, `v3.rs`, frozen), so an upgraded client reads a cluster in a
//! rolling upgrade: a format-6 table entry decodes with [`EntrySummary::overlap_counts`] `None`
//! (not reported), a format-5 book state with [`BookState::refusals`] `None`, a
//! format-4 list with [`ScheduleList::entries`] `None`, a format-3
//! description with [`ScheduleDetail::policies`] `None`, and [`to_common_format`] brings a
//! mixed set of answers to what all their formats say before a reader compares them. A client
//! built for an older format refuses a newer answer ([`QueryError::Version`]): against upgraded
//! nodes it reads nothing (each node's answer a failure, the read `Unreachable`) until it is
//! upgraded too; upgrade clients first.

mod entries;
mod v3;
mod v4;
mod v5;
mod v6;

pub use entries::{
    EntryCounts, EntryCursor, EntryDetail, EntryMisfire, EntryOverlapCounts, EntryPage,
    EntryRetirement, EntryRule, EntrySummary, TableEntries, describe_entry, table_entries,
    upcoming_of,
};

use bincode::config::{self, BigEndian, Configuration, Fixint, Limit};

use super::{
    Bounds, DeadRun, HISTORY_RUNS, MAX_DEAD_RUNS, ManualRuns, NewSchedule, Overlap, PendingRetry,
    RefusalCounters, Retired, RunCounters, RunEntry, RunOutcome, RunPolicy, ScheduleInfo,
    Scheduler, Target, Timing,
};
use crate::authz::Principal;
use crate::due::Due;
use crate::outbox::Outbox;
use crate::tick::TimeMs;

/// Version byte of the answer's wire format.
///
/// 2: a description's counters and the book state carry the replicated run counters (book
/// layout 7). 3: a summary carries the retired state, a description the bounds, the counters
/// retirements (book layout 8). 4: a description carries the schedule's policies
/// ([`SchedulePolicies`]: its exclusion calendar, its overlap policy and state, its pending
/// backfill's overlap policy; book layouts 9, 11, 12). 5: a list carries the cron table
/// entries ([`ScheduleList::entries`]), [`QueryBody::Entry`] describes one. 6: the book state
/// carries the book's replicated admission refusals ([`BookState::refusals`], book layout 13).
/// 7: a table entry carries its replicated overlap counts ([`EntrySummary::overlap_counts`]);
/// formats 6, 5, 4 and 3 are still read.
pub const QUERY_FORMAT_VERSION: u8 = 7;

/// The oldest format this build reads ([`QueryAnswer::decode`]).
pub const OLDEST_READ_FORMAT: u8 = v3::FORMAT_V3;

/// Most summaries one list answer holds.
pub const MAX_LIST_LIMIT: usize = 256;

/// Byte budget of one list answer's summaries (at least one summary is always included).
pub const LIST_BYTE_BUDGET: usize = 256 * 1024;

/// Most upcoming instants one description holds.
pub const MAX_PREVIEW: usize = 32;

/// Largest encoded answer produced or accepted.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

type Config = Configuration<BigEndian, Fixint, Limit<MAX_ANSWER_BYTES>>;

const fn cfg() -> Config {
    config::standard()
        .with_big_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_ANSWER_BYTES>()
}

/// Which schedules a [`list`] returns: every set field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleFilter {
    /// The book's component (a book answers nothing for another component).
    pub component: Option<u32>,
    /// The owner.
    pub owner: Option<Principal>,
    /// The handler name.
    pub handler: Option<String>,
    /// The routing topic.
    pub topic: Option<String>,
    /// Paused or not.
    pub paused: Option<bool>,
    /// Parked or not.
    pub parked: Option<bool>,
    /// Only ids above this one (the cursor of a previous answer, [`ScheduleList::next_after`]).
    pub after: u64,
    /// Most summaries wanted (0 or above [`MAX_LIST_LIMIT`]: [`MAX_LIST_LIMIT`]), schedules
    /// and table entries together.
    pub limit: usize,
    /// Only schedules of the book, or only table entries (format 5; `None`: both).
    pub kind: Option<ListKind>,
    /// Past the book's schedules: only table entries from this one on (the cursor of a
    /// previous answer, [`EntryPage::next`]; format 5).
    pub entries_from: Option<EntryCursor>,
}

/// Which kind of schedule a list holds ([`ScheduleFilter::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// The book's schedules.
    Book,
    /// The cron tables' entries.
    Entry,
}

impl ScheduleFilter {
    /// Whether `info` passes the filter (the cursor and limit aside).
    pub fn matches(&self, info: &ScheduleInfo) -> bool {
        self.owner.is_none_or(|o| o == info.owner)
            && self
                .handler
                .as_ref()
                .is_none_or(|h| *h == info.schedule.handler)
            && self
                .topic
                .as_ref()
                .is_none_or(|t| Some(t) == info.schedule.topic.as_ref())
            && self.paused.is_none_or(|p| p == info.paused)
            && self.parked.is_none_or(|p| p == info.parked)
    }

    /// Whether table entry `e` passes the filter (the cursors and limit aside). An entry has
    /// no owner, handler or topic (it is code), so a filter naming one leaves it out; it is
    /// never paused nor parked.
    pub fn matches_entry(&self, e: &EntrySummary) -> bool {
        self.kind != Some(ListKind::Book)
            && self.component.is_none_or(|c| c == e.component)
            && self.owner.is_none()
            && self.handler.is_none()
            && self.topic.is_none()
            && self.paused.is_none_or(|p| !p)
            && self.parked.is_none_or(|p| !p)
    }

    fn effective_limit(&self) -> usize {
        if self.limit == 0 {
            MAX_LIST_LIMIT
        } else {
            self.limit.min(MAX_LIST_LIMIT)
        }
    }
}

/// One schedule in a list.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ScheduleSummary {
    /// Its id.
    pub id: u64,
    /// Its client key.
    pub key: Option<String>,
    /// The handler it runs.
    pub handler: String,
    /// When it fires.
    pub timing: Timing,
    /// Who owns it.
    pub owner: Principal,
    /// Its version.
    pub version: u64,
    /// Whether it is paused.
    pub paused: bool,
    /// Whether it is parked (a run came due while no handler of its name was registered).
    pub parked: bool,
    /// Its nominal next occurrence.
    pub next: Option<Due>,
    /// Its runs so far (the next occurrence number).
    pub runs: u64,
    /// Runs a cut-short catch-up still owes (first, last).
    pub owed: Option<(TimeMs, TimeMs)>,
    /// Whether a retry of a failed run is pending.
    pub retry_pending: bool,
    /// Dead runs it holds.
    pub dead: u32,
    /// Its priority.
    pub priority: u8,
    /// Its routing topic.
    pub topic: Option<String>,
    /// Its record type.
    pub kind: Option<String>,
    /// Set when it reached its end or run limit (book layout 8): why and when.
    pub retired: Option<Retired>,
}

impl ScheduleSummary {
    /// The summary of `info`.
    pub fn of(info: &ScheduleInfo) -> Self {
        Self {
            id: info.id,
            key: info.schedule.key.clone(),
            handler: info.schedule.handler.clone(),
            timing: info.schedule.timing.clone(),
            owner: info.owner,
            version: info.version,
            paused: info.paused,
            parked: info.parked,
            next: info.next,
            runs: info.runs,
            owed: info.owed,
            retry_pending: info.retry.is_some(),
            dead: u32::try_from(info.dead.len()).unwrap_or(u32::MAX),
            priority: info.schedule.priority,
            topic: info.schedule.topic.clone(),
            kind: info.schedule.kind.clone(),
            retired: info.retired,
        }
    }
}

/// A list answer.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ScheduleList {
    /// The book's component.
    pub component: u32,
    /// How many schedules match the filter above its cursor (all pages).
    pub matched: u64,
    /// The matching schedules in this page, ascending id.
    pub items: Vec<ScheduleSummary>,
    /// Where the next page starts (its [`ScheduleFilter::after`]), when more schedules match.
    pub next_after: Option<u64>,
    /// The matching cron table entries (format 5), listed after the schedules: a page whose
    /// schedules end with room left holds entries from the first (or from
    /// [`ScheduleFilter::entries_from`]). `None` only in an answer decoded from format 4 or
    /// 3 (a node built before format 5 does not report them); [`list_all`] always sets it.
    pub entries: Option<EntryPage>,
}

/// One upcoming run instant, with the UTC offset of the schedule's zone at that instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct Upcoming {
    /// The nominal due point.
    pub due: Due,
    /// The zone's UTC offset then, seconds (0 for UTC, sequence numbers and non-cron timings).
    pub utc_offset_s: i32,
}

/// Counters of one schedule, all read from replicated state (equal on every honest node at the
/// same height).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ScheduleCounters {
    /// Occurrences run so far (first attempts; the next occurrence number).
    pub runs: u64,
    /// Dead runs held.
    pub dead_held: u64,
    /// Dead runs evicted because the record held its most.
    pub dead_evicted: u64,
    /// Successful runs among the recent history.
    pub recent_ok: u64,
    /// Failed or panicked runs among the recent history.
    pub recent_failed: u64,
    /// Handler runs started, every attempt (replicated, [`RunCounters::fired`]).
    pub fired: u64,
    /// Handler runs that failed ([`RunCounters::failed`]).
    pub failed: u64,
    /// Plans that found it behind ([`RunCounters::late`]).
    pub late: u64,
    /// Plans whose misfire policy dropped occurrences ([`RunCounters::skipped`]).
    pub skipped: u64,
    /// Plans whose deadline dropped the run ([`RunCounters::expired`]).
    pub expired: u64,
    /// Retirements ([`RunCounters::retired`]).
    pub retired: u64,
}

/// A describe answer.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ScheduleDetail {
    /// The summary.
    pub summary: ScheduleSummary,
    /// The whole definition (payload included).
    pub schedule: NewSchedule,
    /// Its run policy.
    pub policy: RunPolicy,
    /// A retry pending.
    pub retry: Option<PendingRetry>,
    /// Dead runs, oldest first.
    pub dead: Vec<DeadRun>,
    /// Recent runs, oldest first.
    pub history: Vec<RunEntry>,
    /// The next instants (at most [`MAX_PREVIEW`]; the pause ignored).
    pub upcoming: Vec<Upcoming>,
    /// Its counters.
    pub counters: ScheduleCounters,
    /// Runs an operator asked for, pending (trigger, backfill).
    pub manual: ManualRuns,
    /// Its start and end bounds and run limit.
    pub bounds: Bounds,
    /// Its exclusion calendar and overlap policies (format 4). `None` only in an answer
    /// decoded from format 3 (a node built before format 4 does not report them); [`describe`]
    /// always sets it.
    pub policies: Option<SchedulePolicies>,
}

/// A schedule's exclusion calendar and overlap policies, as a description reports them
/// (format 4).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct SchedulePolicies {
    /// The installed exclusion calendar it names, if any
    /// ([`ScheduleRequest::SetCalendar`](super::ScheduleRequest::SetCalendar)).
    pub calendar: Option<String>,
    /// Its overlap policy ([`Overlap`]; [`Overlap::AllowAll`] for a one-shot).
    pub overlap: Overlap,
    /// The occurrence whose result its overlap policy awaits, if any.
    pub awaiting: Option<u64>,
    /// Occurrences its overlap policy holds buffered.
    pub buffered: u32,
    /// The overlap policy of its pending backfill
    /// ([`ScheduleRequest::BackfillWith`](super::ScheduleRequest::BackfillWith);
    /// [`Overlap::AllowAll`] for a plain backfill); `None` when no backfill is pending.
    pub backfill_overlap: Option<Overlap>,
    /// The backfill occurrence whose result the pending backfill awaits, if any.
    pub backfill_awaiting: Option<u64>,
}

impl SchedulePolicies {
    /// The policies of `info`.
    pub fn of(info: &ScheduleInfo) -> Self {
        let backfill = info.manual.backfill.is_some();
        Self {
            calendar: info.calendar.clone(),
            overlap: info.overlap.policy,
            awaiting: info.overlap.awaiting.map(|(occurrence, _)| occurrence),
            buffered: u32::try_from(info.overlap.buffered.len()).unwrap_or(u32::MAX),
            backfill_overlap: backfill.then_some(info.backfill_overlap.policy),
            backfill_awaiting: if backfill {
                info.backfill_overlap
                    .awaiting
                    .map(|(occurrence, _)| occurrence)
            } else {
                None
            },
        }
    }
}

/// The book as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct BookState {
    /// The book's component.
    pub component: u32,
    /// Schedules held.
    pub schedules: u64,
    /// Paused schedules.
    pub paused: u64,
    /// Parked schedules.
    pub parked: u64,
    /// Schedules with a retry pending.
    pub retries_pending: u64,
    /// Dead runs held.
    pub dead_runs: u64,
    /// Occurrences run so far, over every schedule held.
    pub runs: u64,
    /// The earliest due time (jitter included).
    pub earliest_due_ms: Option<TimeMs>,
    /// The book's replicated run counters, every schedule it ever held
    /// ([`Scheduler::totals`]).
    pub totals: RunCounters,
    /// The book's replicated admission refusals ([`Scheduler::refusals`], format 6). `None`
    /// only in an answer decoded from format 5, 4 or 3 (a node built before format 6 does not
    /// report them); [`book_state`] always sets it.
    pub refusals: Option<RefusalCounters>,
}

/// The committed outbox: depth and the consumer's progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct OutboxState {
    /// Index of the oldest record held (the consumer acknowledged everything below it).
    pub first_index: u64,
    /// Index of the last record ever appended (0: none).
    pub head: u64,
    /// Records held (the depth).
    pub held: u64,
    /// Bytes held.
    pub held_bytes: u64,
    /// Held records with a result applied.
    pub with_result: u64,
    /// Results refused so far (replicated counter).
    pub refused_results: u64,
}

/// What a query answers.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum QueryBody {
    /// A list.
    List(ScheduleList),
    /// A description (`None`: no such schedule).
    Describe(Option<Box<ScheduleDetail>>),
    /// The book as a whole.
    Book(BookState),
    /// The outbox (`None`: the application keeps none).
    Outbox(Option<OutboxState>),
    /// A table entry described (`None`: no such entry; format 5).
    Entry(Option<Box<EntryDetail>>),
}

/// A replica's answer: who answered, the height its state is at, and the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryAnswer {
    /// The answering replica's id (informational: a liar can claim any).
    pub replica: u64,
    /// The height (sequence number) of the last executed batch the answer was read at.
    pub at_height: u64,
    /// The answer.
    pub body: QueryBody,
}

#[derive(bincode::Encode, bincode::Decode)]
struct Wire {
    version: u8,
    replica: u64,
    at_height: u64,
    body: QueryBody,
}

/// Why bytes are not a valid answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// Over [`MAX_ANSWER_BYTES`].
    #[error("answer of {len} bytes over the {max}-byte limit")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The bytes do not encode or decode.
    #[error("codec: {0}")]
    Codec(String),
    /// Bytes after the answer.
    #[error("{0} trailing bytes")]
    Trailing(usize),
    /// Another format version.
    #[error("format version {found}, this build reads {expected}")]
    Version {
        /// Found.
        found: u8,
        /// Read by this build.
        expected: u8,
    },
    /// A collection over its bound.
    #[error("{what}: {got} over the bound {max}")]
    OverBound {
        /// Which collection.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The bound.
        max: usize,
    },
}

impl QueryBody {
    /// The canonical encoding of the body alone (what readers compare across replicas).
    ///
    /// # Errors
    /// [`QueryError::Codec`] when over [`MAX_ANSWER_BYTES`].
    pub fn encode(&self) -> Result<Vec<u8>, QueryError> {
        bincode::encode_to_vec(self, cfg()).map_err(|e| QueryError::Codec(e.to_string()))
    }

    fn check_bounds(&self) -> Result<(), QueryError> {
        let over = |what, got: usize, max: usize| {
            if got > max {
                Err(QueryError::OverBound { what, got, max })
            } else {
                Ok(())
            }
        };
        match self {
            QueryBody::List(l) => {
                over("list items", l.items.len(), MAX_LIST_LIMIT)?;
                let entries = l.entries.as_ref().map_or(0, |e| e.items.len());
                over("list entries", entries, MAX_LIST_LIMIT)?;
                over(
                    "list items and entries",
                    l.items.len() + entries,
                    MAX_LIST_LIMIT,
                )
            }
            QueryBody::Describe(Some(d)) => {
                over("history", d.history.len(), HISTORY_RUNS)?;
                over("dead runs", d.dead.len(), MAX_DEAD_RUNS)?;
                over("upcoming", d.upcoming.len(), MAX_PREVIEW)
            }
            QueryBody::Entry(Some(d)) => over("upcoming", d.upcoming.len(), MAX_PREVIEW),
            _ => Ok(()),
        }
    }
}

impl QueryAnswer {
    /// The versioned encoding.
    ///
    /// # Errors
    /// [`QueryError::Codec`] / [`QueryError::TooLarge`] when over [`MAX_ANSWER_BYTES`].
    pub fn encode(&self) -> Result<Vec<u8>, QueryError> {
        let bytes = bincode::encode_to_vec(
            Wire {
                version: QUERY_FORMAT_VERSION,
                replica: self.replica,
                at_height: self.at_height,
                body: self.body.clone(),
            },
            cfg(),
        )
        .map_err(|e| QueryError::Codec(e.to_string()))?;
        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(QueryError::TooLarge {
                len: bytes.len(),
                max: MAX_ANSWER_BYTES,
            });
        }
        Ok(bytes)
    }

    /// Decodes and checks an answer of format [`QUERY_FORMAT_VERSION`] or
    /// [`OLDEST_READ_FORMAT`] (see the module documentation).
    ///
    /// # Errors
    /// [`QueryError`].
    pub fn decode(bytes: &[u8]) -> Result<Self, QueryError> {
        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(QueryError::TooLarge {
                len: bytes.len(),
                max: MAX_ANSWER_BYTES,
            });
        }
        // The version is the first byte (a fixed-width u8): it picks the layout of the rest.
        let answer = match bytes.first() {
            Some(&QUERY_FORMAT_VERSION) => {
                let w: Wire = decode_all(bytes)?;
                Self {
                    replica: w.replica,
                    at_height: w.at_height,
                    body: w.body,
                }
            }
            Some(&v6::FORMAT_V6) => {
                let w: v6::WireV6 = decode_all(bytes)?;
                Self {
                    replica: w.replica,
                    at_height: w.at_height,
                    body: w.body.into(),
                }
            }
            Some(&v5::FORMAT_V5) => {
                let w: v5::WireV5 = decode_all(bytes)?;
                Self {
                    replica: w.replica,
                    at_height: w.at_height,
                    body: w.body.into(),
                }
            }
            Some(&v4::FORMAT_V4) => {
                let w: v4::WireV4 = decode_all(bytes)?;
                Self {
                    replica: w.replica,
                    at_height: w.at_height,
                    body: w.body.into(),
                }
            }
            Some(&v3::FORMAT_V3) => {
                let w: v3::WireV3 = decode_all(bytes)?;
                Self {
                    replica: w.replica,
                    at_height: w.at_height,
                    body: w.body.into(),
                }
            }
            Some(&found) => {
                return Err(QueryError::Version {
                    found,
                    expected: QUERY_FORMAT_VERSION,
                });
            }
            None => return Err(QueryError::Codec("no version byte".into())),
        };
        answer.body.check_bounds()?;
        Ok(answer)
    }

    /// This answer as a format-3 node would have given it, encoded (tests of readers that
    /// meet old nodes).
    ///
    /// # Errors
    /// As [`Self::encode`]; [`QueryError::Codec`] for a table entry's description (format 3
    /// has none).
    pub fn encode_format3(&self) -> Result<Vec<u8>, QueryError> {
        let body = v3::BodyV3::try_from(self.body.clone())?;
        bounded(bincode::encode_to_vec(
            v3::WireV3 {
                version: v3::FORMAT_V3,
                replica: self.replica,
                at_height: self.at_height,
                body,
            },
            cfg(),
        ))
    }

    /// This answer as a format-6 node would have given it, encoded (tests of readers that
    /// meet old nodes).
    ///
    /// # Errors
    /// As [`Self::encode`].
    pub fn encode_format6(&self) -> Result<Vec<u8>, QueryError> {
        bounded(bincode::encode_to_vec(
            v6::WireV6 {
                version: v6::FORMAT_V6,
                replica: self.replica,
                at_height: self.at_height,
                body: self.body.clone().into(),
            },
            cfg(),
        ))
    }

    /// This answer as a format-5 node would have given it, encoded (tests of readers that
    /// meet old nodes).
    ///
    /// # Errors
    /// As [`Self::encode`].
    pub fn encode_format5(&self) -> Result<Vec<u8>, QueryError> {
        bounded(bincode::encode_to_vec(
            v5::WireV5 {
                version: v5::FORMAT_V5,
                replica: self.replica,
                at_height: self.at_height,
                body: self.body.clone().into(),
            },
            cfg(),
        ))
    }

    /// This answer as a format-4 node would have given it, encoded (tests of readers that
    /// meet old nodes).
    ///
    /// # Errors
    /// As [`Self::encode_format3`].
    pub fn encode_format4(&self) -> Result<Vec<u8>, QueryError> {
        let body = v4::BodyV4::try_from(self.body.clone())?;
        bounded(bincode::encode_to_vec(
            v4::WireV4 {
                version: v4::FORMAT_V4,
                replica: self.replica,
                at_height: self.at_height,
                body,
            },
            cfg(),
        ))
    }
}

/// An encoding's bytes, refused over [`MAX_ANSWER_BYTES`].
fn bounded(encoded: Result<Vec<u8>, bincode::error::EncodeError>) -> Result<Vec<u8>, QueryError> {
    let bytes = encoded.map_err(|e| QueryError::Codec(e.to_string()))?;
    if bytes.len() > MAX_ANSWER_BYTES {
        return Err(QueryError::TooLarge {
            len: bytes.len(),
            max: MAX_ANSWER_BYTES,
        });
    }
    Ok(bytes)
}

/// Decodes all of `bytes` as a `T` (trailing bytes refused).
fn decode_all<T: bincode::Decode<()>>(bytes: &[u8]) -> Result<T, QueryError> {
    let (w, used): (T, usize) =
        bincode::decode_from_slice(bytes, cfg()).map_err(|e| QueryError::Codec(e.to_string()))?;
    if used != bytes.len() {
        return Err(QueryError::Trailing(bytes.len() - used));
    }
    Ok(w)
}

impl QueryBody {
    /// Whether this is a description without the format-4 policies (decoded from format 3).
    pub fn lacks_policies(&self) -> bool {
        matches!(self, QueryBody::Describe(Some(d)) if d.policies.is_none())
    }

    /// Whether this is a list without the format-5 table entries (decoded from format 4 or
    /// 3).
    pub fn lacks_entries(&self) -> bool {
        matches!(self, QueryBody::List(l) if l.entries.is_none())
    }

    /// Whether this is a book state without the format-6 refusal counters (decoded from
    /// format 5, 4 or 3).
    pub fn lacks_refusals(&self) -> bool {
        matches!(self, QueryBody::Book(s) if s.refusals.is_none())
    }

    /// Whether this holds a table entry without the format-7 overlap counts (decoded from
    /// format 6 or 5).
    pub fn lacks_entry_counts(&self) -> bool {
        match self {
            QueryBody::List(l) => l
                .entries
                .as_ref()
                .is_some_and(|p| p.items.iter().any(|e| e.overlap_counts.is_none())),
            QueryBody::Entry(Some(d)) => d.summary.overlap_counts.is_none(),
            _ => false,
        }
    }

    /// The body as format 6 says it: every table entry's overlap counts dropped, every other
    /// body as it is.
    pub fn without_entry_counts(self) -> Self {
        match self {
            QueryBody::List(mut l) => {
                if let Some(p) = &mut l.entries {
                    for e in &mut p.items {
                        e.overlap_counts = None;
                    }
                }
                QueryBody::List(l)
            }
            QueryBody::Entry(Some(mut d)) => {
                d.summary.overlap_counts = None;
                QueryBody::Entry(Some(d))
            }
            other => other,
        }
    }

    /// The body as format 5 says it: a book state's refusal counters dropped, every other
    /// body as it is.
    pub fn without_refusals(self) -> Self {
        match self {
            QueryBody::Book(mut s) => {
                s.refusals = None;
                QueryBody::Book(s)
            }
            other => other,
        }
    }

    /// The body as format 4 says it: a list's table entries dropped, every other body as it
    /// is.
    pub fn without_entries(self) -> Self {
        match self {
            QueryBody::List(mut l) => {
                l.entries = None;
                QueryBody::List(l)
            }
            other => other,
        }
    }

    /// The body as format 3 says it: a description's policies dropped, every other body as it
    /// is.
    pub fn without_policies(self) -> Self {
        match self {
            QueryBody::Describe(Some(mut d)) => {
                d.policies = None;
                QueryBody::Describe(Some(d))
            }
            other => other,
        }
    }
}

/// Brings answers of mixed formats to what all of them say, before a reader compares them:
/// when any description lacks the format-4 policies (a node of format 3 answered), every
/// description's policies are dropped; when any list lacks the format-5 table entries (a node
/// of format 4 or 3), every list's entries are dropped. So honest nodes of different formats
/// at one height answer identical bodies (otherwise a rolling upgrade would split them into
/// groups, a false conflict): a format-5 list lists the book's schedules exactly as format 4
/// does, its entries only after them. When any book state lacks the format-6 refusal
/// counters (a node of format 5 or older), every book state's are dropped; when any table entry
/// lacks the format-7 overlap counts (a node of format 6 or 5), every entry's are dropped.
/// Returns whether it dropped anything. A lying node answering an older format can so hide a
/// schedule's policies, the table entries, the book's refusals or the entries' overlap counts
/// from the reader (shown as not reported), never forge them.
pub fn to_common_format<'a>(answers: impl IntoIterator<Item = &'a mut QueryAnswer>) -> bool {
    let mut answers: Vec<&'a mut QueryAnswer> = answers.into_iter().collect();
    let no_policies = answers.iter().any(|a| a.body.lacks_policies());
    let no_entries = answers.iter().any(|a| a.body.lacks_entries());
    let no_refusals = answers.iter().any(|a| a.body.lacks_refusals());
    let no_counts = answers.iter().any(|a| a.body.lacks_entry_counts());
    let dropping = no_policies || no_entries || no_refusals || no_counts;
    if dropping {
        for a in &mut answers {
            let mut body = std::mem::replace(&mut a.body, QueryBody::Outbox(None));
            if no_policies {
                body = body.without_policies();
            }
            if no_entries {
                body = body.without_entries();
            }
            if no_refusals {
                body = body.without_refusals();
            }
            if no_counts {
                body = body.without_entry_counts();
            }
            a.body = body;
        }
    }
    dropping
}

/// The schedules of `book` passing `filter`, ascending id, from its cursor on, at most its
/// limit and about [`LIST_BYTE_BUDGET`] bytes, for a ledger without cron tables (its
/// [`ScheduleList::entries`] an empty page). Costs O(schedules) (every record is matched).
pub fn list(book: &Scheduler, filter: &ScheduleFilter) -> ScheduleList {
    list_all(Some(book), None, filter)
}

/// The schedules of `book` and then the table entries of `entries` passing `filter`, each
/// from its cursor on, at most its limit and about [`LIST_BYTE_BUDGET`] bytes together.
/// Schedules come first (ascending id), so the schedules of a page are exactly what format 4
/// lists; entries (ascending component and position) fill a page whose schedules ended with
/// room left. `book` `None`: a ledger without a book (component 0, no schedules). Costs
/// O(schedules + entries).
pub fn list_all(
    book: Option<&Scheduler>,
    entries: Option<&TableEntries>,
    filter: &ScheduleFilter,
) -> ScheduleList {
    let mut out = ScheduleList {
        component: book.map_or(0, Scheduler::component),
        matched: 0,
        items: Vec::new(),
        next_after: None,
        entries: Some(EntryPage::default()),
    };
    let limit = filter.effective_limit();
    let mut bytes = 0usize;
    let size_of = |v: &dyn EncodedSize| v.size();
    if let Some(book) = book
        && filter.entries_from.is_none()
        && filter.kind != Some(ListKind::Entry)
        && filter.component.is_none_or(|c| c == book.component())
    {
        let mut full = false;
        for id in book.ids().filter(|&id| id > filter.after) {
            let Some(info) = book.get(id) else { continue };
            if !filter.matches(&info) {
                continue;
            }
            out.matched += 1;
            if full {
                continue;
            }
            let summary = ScheduleSummary::of(&info);
            let size = size_of(&summary);
            if out.items.len() >= limit
                || (!out.items.is_empty() && bytes.saturating_add(size) > LIST_BYTE_BUDGET)
            {
                full = true;
                out.next_after = out.items.last().map(|s| s.id);
                continue;
            }
            bytes = bytes.saturating_add(size);
            out.items.push(summary);
        }
    }
    let (Some(entries), Some(page)) = (entries, out.entries.as_mut()) else {
        return out;
    };
    // A page full of schedules lists no entry (the next page may); it still counts them.
    let mut full = out.next_after.is_some();
    for e in entries.summaries() {
        let at = EntryCursor {
            component: e.component,
            position: e.position,
        };
        if filter.entries_from.is_some_and(|from| at < from) || !filter.matches_entry(e) {
            continue;
        }
        page.matched += 1;
        if full {
            continue;
        }
        let size = size_of(e);
        let listed = out.items.len() + page.items.len();
        if listed >= limit || (listed > 0 && bytes.saturating_add(size) > LIST_BYTE_BUDGET) {
            full = true;
            page.next = Some(at);
            continue;
        }
        bytes = bytes.saturating_add(size);
        page.items.push(e.clone());
    }
    out
}

/// The encoded size of a list item (for the list's byte budget).
trait EncodedSize {
    fn size(&self) -> usize;
}

impl<T: bincode::Encode> EncodedSize for T {
    fn size(&self) -> usize {
        bincode::encode_to_vec(self, cfg()).map_or(usize::MAX, |b| b.len())
    }
}

/// Resolves `target` to a schedule id of `book`.
pub fn resolve(book: &Scheduler, target: &Target) -> Option<u64> {
    match target {
        Target::Id(id) => book.get(*id).map(|_| *id),
        Target::Key(k) => book.id_of(k),
    }
}

fn offset_of(book: &Scheduler, timing: &Timing, due: Due) -> i32 {
    match (timing, due) {
        (
            Timing::Cron {
                zone: Some(zone), ..
            },
            Due::Time(ms),
        ) => book
            .zone(zone)
            .map_or(0, |z| z.offset_at(ms.div_euclid(1000))),
        _ => 0,
    }
}

/// Schedule `target` of `book` in full, with its next `preview` instants (at most
/// [`MAX_PREVIEW`]) in its zone; `None` when the book holds no such schedule.
pub fn describe(book: &Scheduler, target: &Target, preview: usize) -> Option<ScheduleDetail> {
    let id = resolve(book, target)?;
    let info = book.get(id)?;
    let upcoming = book
        .preview(id, preview.min(MAX_PREVIEW))
        .into_iter()
        .map(|due| Upcoming {
            due,
            utc_offset_s: offset_of(book, &info.schedule.timing, due),
        })
        .collect();
    let recent_ok = info.history.iter().filter(|r| r.outcome.is_ok()).count() as u64;
    let recent_failed = info
        .history
        .iter()
        .filter(|r| matches!(r.outcome, RunOutcome::Failed { .. } | RunOutcome::Panicked))
        .count() as u64;
    let policies = SchedulePolicies::of(&info);
    Some(ScheduleDetail {
        summary: ScheduleSummary::of(&info),
        counters: ScheduleCounters {
            runs: info.runs,
            dead_held: info.dead.len() as u64,
            dead_evicted: info.dead_evicted,
            recent_ok,
            recent_failed,
            fired: info.counters.fired,
            failed: info.counters.failed,
            late: info.counters.late,
            skipped: info.counters.skipped,
            expired: info.counters.expired,
            retired: info.counters.retired,
        },
        schedule: info.schedule,
        policy: info.policy,
        retry: info.retry,
        dead: info.dead,
        history: info.history,
        upcoming,
        policies: Some(policies),
        manual: info.manual,
        bounds: info.bounds,
    })
}

/// The book as a whole. Costs O(schedules).
pub fn book_state(book: &Scheduler) -> BookState {
    let mut s = BookState {
        component: book.component(),
        schedules: book.len() as u64,
        parked: book.parked_count() as u64,
        dead_runs: book.dead_count() as u64,
        earliest_due_ms: book.earliest_due_ms(),
        totals: book.totals(),
        refusals: Some(book.refusals()),
        ..BookState::default()
    };
    for id in book.ids() {
        if let Some(info) = book.get(id) {
            s.paused += u64::from(info.paused);
            s.retries_pending += u64::from(info.retry.is_some());
            s.runs = s.runs.saturating_add(info.runs);
        }
    }
    s
}

/// The committed outbox's depth and the consumer's progress. Costs O(records held).
pub fn outbox_state(outbox: &Outbox) -> OutboxState {
    let with_result = outbox.iter().filter(|(i, _)| outbox.has_result(*i)).count() as u64;
    OutboxState {
        first_index: outbox.first_index(),
        head: outbox.head(),
        held: outbox.len() as u64,
        held_bytes: outbox.held_bytes() as u64,
        with_result,
        refused_results: outbox.refused_results(),
    }
}

#[cfg(test)]
mod tests;
