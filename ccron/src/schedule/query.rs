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

use bincode::config::{self, BigEndian, Configuration, Fixint, Limit};

use super::{
    Bounds, DeadRun, HISTORY_RUNS, MAX_DEAD_RUNS, ManualRuns, NewSchedule, PendingRetry, Retired,
    RunCounters, RunEntry, RunOutcome, RunPolicy, ScheduleInfo, Scheduler, Target, Timing,
};
use crate::authz::Principal;
use crate::due::Due;
use crate::outbox::Outbox;
use crate::tick::TimeMs;

/// Version byte of the answer's wire format.
///
/// 2: a description's counters and the book state carry the replicated run counters (book
/// layout 7). 3: a summary carries the retired state, a description the bounds, the counters
/// retirements (book layout 8).
pub const QUERY_FORMAT_VERSION: u8 = 3;

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
    /// Most summaries wanted (0 or above [`MAX_LIST_LIMIT`]: [`MAX_LIST_LIMIT`]).
    pub limit: usize,
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
    /// Where the next page starts (its [`ScheduleFilter::after`]), when more match.
    pub next_after: Option<u64>,
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
            QueryBody::List(l) => over("list items", l.items.len(), MAX_LIST_LIMIT),
            QueryBody::Describe(Some(d)) => {
                over("history", d.history.len(), HISTORY_RUNS)?;
                over("dead runs", d.dead.len(), MAX_DEAD_RUNS)?;
                over("upcoming", d.upcoming.len(), MAX_PREVIEW)
            }
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

    /// Decodes and checks an answer (see the module documentation).
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
        let (w, used): (Wire, usize) = bincode::decode_from_slice(bytes, cfg())
            .map_err(|e| QueryError::Codec(e.to_string()))?;
        if used != bytes.len() {
            return Err(QueryError::Trailing(bytes.len() - used));
        }
        if w.version != QUERY_FORMAT_VERSION {
            return Err(QueryError::Version {
                found: w.version,
                expected: QUERY_FORMAT_VERSION,
            });
        }
        w.body.check_bounds()?;
        Ok(Self {
            replica: w.replica,
            at_height: w.at_height,
            body: w.body,
        })
    }
}

/// The schedules of `book` passing `filter`, ascending id, from its cursor on, at most its
/// limit and about [`LIST_BYTE_BUDGET`] bytes. Costs O(schedules) (every record is matched).
pub fn list(book: &Scheduler, filter: &ScheduleFilter) -> ScheduleList {
    let mut out = ScheduleList {
        component: book.component(),
        matched: 0,
        items: Vec::new(),
        next_after: None,
    };
    if filter.component.is_some_and(|c| c != book.component()) {
        return out;
    }
    let limit = filter.effective_limit();
    let mut bytes = 0usize;
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
        let size = bincode::encode_to_vec(&summary, cfg()).map_or(usize::MAX, |b| b.len());
        if out.items.len() >= limit || (!out.items.is_empty() && bytes + size > LIST_BYTE_BUDGET) {
            full = true;
            out.next_after = out.items.last().map(|s| s.id);
            continue;
        }
        bytes = bytes.saturating_add(size);
        out.items.push(summary);
    }
    out
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
mod tests {
    use super::*;
    use crate::cron::ZoneRules;
    use crate::outbox::{OutboxLimits, OutboxRecord};
    use crate::schedule::{Handlers, Limits, ScheduleRequest};

    fn book() -> (Scheduler, Handlers<u64>) {
        let mut h: Handlers<u64> = Handlers::new();
        assert!(h.register("a", |ctx| *ctx.state += 1));
        assert!(h.register("b", |ctx| *ctx.state += 1));
        let mut b = Scheduler::new(7, Limits::default());
        let admin = Principal::Host;
        b.apply(
            &admin,
            ScheduleRequest::InstallZone(ZoneRules::fixed("Plus2", 7_200).unwrap()),
            &h,
            1,
            Some(0),
        )
        .unwrap();
        for i in 0..10u64 {
            let timing = if i % 2 == 0 {
                Timing::Every {
                    period_ms: 60_000,
                    start_ms: None,
                }
            } else {
                Timing::Cron {
                    expression: "0 * * * *".into(),
                    zone: Some("Plus2".into()),
                }
            };
            let mut s = NewSchedule::new(if i < 6 { "a" } else { "b" }, timing)
                .with_key(format!("k{i}"))
                .with_payload(vec![1u8; 100]);
            if i % 3 == 0 {
                s = s.with_topic("billing");
            }
            let by = Principal::Client(crate::authz::ClientId::from_index(i % 2));
            b.apply(&by, ScheduleRequest::Create(s), &h, 2, Some(1_000))
                .unwrap();
        }
        b.apply(
            &Principal::Client(crate::authz::ClientId::from_index(1)),
            ScheduleRequest::Pause(Target::Key("k3".into())),
            &h,
            3,
            Some(2_000),
        )
        .unwrap();
        (b, h)
    }

    #[test]
    fn lists_filter_and_page() {
        let (b, _) = book();
        let all = list(&b, &ScheduleFilter::default());
        assert_eq!(
            (all.matched, all.items.len(), all.next_after),
            (10, 10, None)
        );
        assert_eq!(all.component, 7);
        let ids: Vec<u64> = all.items.iter().map(|s| s.id).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let f = |f: ScheduleFilter| list(&b, &f).items.len();
        assert_eq!(
            f(ScheduleFilter {
                handler: Some("b".into()),
                ..Default::default()
            }),
            4
        );
        assert_eq!(
            f(ScheduleFilter {
                owner: Some(Principal::Client(crate::authz::ClientId::from_index(1))),
                ..Default::default()
            }),
            5
        );
        assert_eq!(
            f(ScheduleFilter {
                topic: Some("billing".into()),
                ..Default::default()
            }),
            4
        );
        assert_eq!(
            f(ScheduleFilter {
                paused: Some(true),
                ..Default::default()
            }),
            1
        );
        assert_eq!(
            f(ScheduleFilter {
                parked: Some(true),
                ..Default::default()
            }),
            0
        );
        assert_eq!(
            f(ScheduleFilter {
                component: Some(8),
                ..Default::default()
            }),
            0
        );
        // Paging: 3 at a time covers all 10 exactly once.
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let page = list(
                &b,
                &ScheduleFilter {
                    after,
                    limit: 3,
                    ..Default::default()
                },
            );
            assert!(page.items.len() <= 3);
            seen.extend(page.items.iter().map(|s| s.id));
            match page.next_after {
                Some(a) => after = a,
                None => break,
            }
        }
        assert_eq!(seen, ids);
    }

    #[test]
    fn describes_with_upcoming_instants_in_the_zone() {
        let (b, _) = book();
        let d = describe(&b, &Target::Key("k1".into()), 5).unwrap();
        assert_eq!(d.summary.key.as_deref(), Some("k1"));
        assert_eq!(d.upcoming.len(), 5);
        assert!(d.upcoming.iter().all(|u| u.utc_offset_s == 7_200));
        let times: Vec<i64> = d.upcoming.iter().filter_map(|u| u.due.time_ms()).collect();
        assert!(times.windows(2).all(|w| w[1] - w[0] == 3_600_000));
        assert_eq!(d.schedule.payload.len(), 100);
        let p = describe(&b, &Target::Key("k0".into()), 1_000).unwrap();
        assert_eq!(p.upcoming.len(), MAX_PREVIEW);
        assert!(p.upcoming.iter().all(|u| u.utc_offset_s == 0));
        assert!(describe(&b, &Target::Key("nope".into()), 3).is_none());
        assert!(describe(&b, &Target::Id(999), 3).is_none());
        let s = book_state(&b);
        assert_eq!(
            (s.schedules, s.paused, s.parked, s.component),
            (10, 1, 0, 7)
        );
    }

    #[test]
    fn answers_round_trip_and_bad_bytes_are_typed_errors() {
        let (b, _) = book();
        let mut ob = Outbox::new(OutboxLimits::default());
        ob.append(OutboxRecord::new(
            crate::outbox::OccurrenceId::new(7, 1, 0),
            "a",
            vec![1],
        ))
        .unwrap();
        let bodies = [
            QueryBody::List(list(&b, &ScheduleFilter::default())),
            QueryBody::Describe(describe(&b, &Target::Id(2), 4).map(Box::new)),
            QueryBody::Describe(None),
            QueryBody::Book(book_state(&b)),
            QueryBody::Outbox(Some(outbox_state(&ob))),
        ];
        for body in bodies {
            let a = QueryAnswer {
                replica: 3,
                at_height: 42,
                body,
            };
            let bytes = a.encode().unwrap();
            assert_eq!(QueryAnswer::decode(&bytes).unwrap(), a);
            for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
                assert!(QueryAnswer::decode(&bytes[..cut]).is_err(), "cut {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert_eq!(QueryAnswer::decode(&long), Err(QueryError::Trailing(1)));
            let mut other = bytes.clone();
            other[0] = QUERY_FORMAT_VERSION + 1;
            assert!(matches!(
                QueryAnswer::decode(&other),
                Err(QueryError::Version { found, .. }) if found == QUERY_FORMAT_VERSION + 1
            ));
        }
        assert_eq!(
            outbox_state(&ob),
            OutboxState {
                first_index: 1,
                head: 1,
                held: 1,
                held_bytes: ob.held_bytes() as u64,
                with_result: 0,
                refused_results: 0
            }
        );
        // An over-bound list is refused on decode.
        let mut l = list(&b, &ScheduleFilter::default());
        let one = l.items[0].clone();
        l.items = vec![one; MAX_LIST_LIMIT + 1];
        let a = QueryAnswer {
            replica: 0,
            at_height: 1,
            body: QueryBody::List(l),
        };
        assert!(matches!(
            QueryAnswer::decode(&a.encode().unwrap()),
            Err(QueryError::OverBound { .. })
        ));
        assert!(matches!(
            QueryAnswer::decode(&vec![0u8; MAX_ANSWER_BYTES + 1]),
            Err(QueryError::TooLarge { .. })
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Paging through `list` with any filter and page size returns exactly the schedules
        /// a brute-force filter over every record keeps, in ascending id, each once.
        #[test]
        fn paged_lists_match_a_brute_force_filter(
            specs in proptest::collection::vec((0u8..3, 0u64..3, 0u8..3, proptest::bool::ANY), 0..40),
            f_handler in proptest::option::of(0u8..3),
            f_owner in proptest::option::of(0u64..3),
            f_topic in proptest::option::of(0u8..3),
            f_paused in proptest::option::of(proptest::bool::ANY),
            page in 1usize..7,
        ) {
            let mut h: Handlers<u64> = Handlers::new();
            for n in ["h0", "h1", "h2"] {
                assert!(h.register(n, |ctx| *ctx.state += 1));
            }
            let mut b = Scheduler::new(1, Limits::default());
            for (i, (handler, owner, topic, paused)) in specs.iter().enumerate() {
                let mut s = NewSchedule::new(format!("h{handler}"), Timing::Every {
                    period_ms: 1_000 + i as i64,
                    start_ms: Some(0),
                });
                if *topic > 0 {
                    s = s.with_topic(format!("t{topic}"));
                }
                let by = Principal::Client(crate::authz::ClientId::from_index(*owner));
                let id = b.apply(&by, ScheduleRequest::Create(s), &h, 1, Some(0)).unwrap().unwrap();
                if *paused {
                    b.apply(&by, ScheduleRequest::Pause(Target::Id(id)), &h, 1, Some(0)).unwrap();
                }
            }
            let filter = ScheduleFilter {
                handler: f_handler.map(|x| format!("h{x}")),
                owner: f_owner.map(|o| Principal::Client(crate::authz::ClientId::from_index(o))),
                topic: f_topic.map(|x| format!("t{x}")),
                paused: f_paused,
                limit: page,
                ..ScheduleFilter::default()
            };
            let want: Vec<u64> = b
                .ids()
                .filter(|&id| {
                    let i = b.get(id).unwrap();
                    f_handler.is_none_or(|x| i.schedule.handler == format!("h{x}"))
                        && f_owner.is_none_or(|o| i.owner == Principal::Client(crate::authz::ClientId::from_index(o)))
                        && f_topic.is_none_or(|t| i.schedule.topic == Some(format!("t{t}")))
                        && f_paused.is_none_or(|p| i.paused == p)
                })
                .collect();
            let mut got = Vec::new();
            let mut f = filter.clone();
            let first = list(&b, &f);
            proptest::prop_assert_eq!(first.matched, want.len() as u64);
            let mut pages = 0;
            loop {
                let l = list(&b, &f);
                proptest::prop_assert!(l.items.len() <= page);
                got.extend(l.items.iter().map(|s| s.id));
                pages += 1;
                match l.next_after {
                    Some(a) => f.after = a,
                    None => break,
                }
                proptest::prop_assert!(pages <= want.len() + 1);
            }
            proptest::prop_assert_eq!(got, want);
        }
    }
}
