//! The schedule book layouts earlier releases wrote, read so that the next save migrates them
//! to layout 13 (`persist.rs`). The types here are frozen copies of the old encodings: never
//! change them (persisted bytes are forever).
//!
//! - Layouts 2, 3 and 4: a meta page, the zones part, a write-ahead journal in the log's place
//!   (always in force: the last save's meta, zones, changed records and record page list) and
//!   record pages. 3 added the owner to records, 4 the version, topic and type.
//! - Layout 5: the record log (commit page, log, record pages) with layout 4's records.
//! - Layout 6: the record log with the log's start and the stale flag in the commit page, and
//!   records carrying their run state (parked, run policy, pending retry, dead runs, history).
//! - Layout 7: layout 6 with run counters per record and for the book in the commit page.
//! - Layout 8: layout 7 with bounds and the retired state per record, retirements counted
//!   (`legacy/v8.rs`).
//! - Layout 9: layout 8 with the overlap policy and state per record (`legacy/v9.rs`).
//! - Layout 10: layout 9 with 256-bit client owners (`legacy/v10.rs`).
//! - Layout 11: layout 10 with the exclusion calendar a record names and the calendars in the
//!   zones part (`legacy/v11.rs`).
//! - Layout 12: layout 11 with the overlap policy of a record's backfills (`legacy/v12.rs`: its
//!   records are layout 13's; its commit page lacks the book's admission refusal counters,
//!   which a migrated book starts at zero).
//!
//! Every layout from 3 to 9 names a client owner by a 64-bit id ([`PrincipalV1`]); layout 10
//! by a 256-bit one. An old client owner becomes [`Principal::LegacyClient`]: matched by an
//! authenticated client whose id starts with it (only the old 64-bit strength), re-owned to
//! that client's full id by its next mutation of the schedule (`crate::authz`).
//!
//! Loading converts every record to layout 13 (the book's refusal counters at zero; below
//! layout 12 no backfill overlap policy: plain backfills;
//! below layout 11 no exclusion calendar, and none installed; no overlap policy: [`Overlap::AllowAll`](super::Overlap::AllowAll),
//! nothing awaited or buffered; no bounds below layout 8, not retired; the run counters at zero
//! below layout 7, kept from layout 7 with no retirements; and the run state
//! empty below layout 6; a layout 2 record, which has no owner, is owned by the host, so only
//! admins may change it; records without a version are at version 1). The migration is the next save, a *full save* (every record and the
//! zones, the record pages marked stale) appended to the log area where nothing the old layout
//! needs lies: past the old journal's pages or the old committed log. The new commit page is
//! its last write, so a crash before it reloads the old layout as it was. When the log area
//! has no room past them, the old layout's own save is completed first, in its own format (a
//! journal replayed in place and zeroed, or a layout 5 or 6 log folded), which is what that
//! layout did after a crash or a full log too.

mod v10;
mod v11;
mod v12;
mod v8;
mod v9;

use std::collections::{BTreeMap, BTreeSet};

use super::persist::{self, Committed};
use super::{
    DeadRun, ManualRuns, Misfire, NewSchedule, PendingRetry, Record, RunCounters, RunEntry,
    RunPolicy, ScheduleError, Timing,
};
use crate::authz::{Principal, PrincipalV1};
use crate::codec::{self, BlobKind, CodecError};
use crate::cron::{ExclusionCalendar, ZoneRules};
use crate::due::Due;
use crate::pages::{PageRange, ReservedPages};
use crate::record_log::{self, LogPos, LogSpan, Stale};
use crate::schedule::store::Layout;
use crate::tick::{ComponentId, TimeMs};

/// A schedule definition of layouts 2 and 3 (before topics and types).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct NewScheduleV2 {
    key: Option<String>,
    handler: String,
    timing: Timing,
    misfire: Misfire,
    priority: u8,
    jitter_ms: u32,
    payload: Vec<u8>,
}

impl NewScheduleV2 {
    fn upgrade(self) -> NewSchedule {
        NewSchedule {
            key: self.key,
            handler: self.handler,
            timing: self.timing,
            misfire: self.misfire,
            priority: self.priority,
            jitter_ms: self.jitter_ms,
            payload: self.payload,
            topic: None,
            kind: None,
        }
    }
}

/// A record of layout 2.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV2 {
    def: NewScheduleV2,
    paused: bool,
    next: Option<Due>,
    runs: u64,
    owed: Option<(TimeMs, TimeMs)>,
}

/// A record of layout 3 (records carry their owner).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV3 {
    def: NewScheduleV2,
    paused: bool,
    next: Option<Due>,
    runs: u64,
    owed: Option<(TimeMs, TimeMs)>,
    owner: PrincipalV1,
}

/// A record of layouts 4 and 5 (with version, topic and type).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV4 {
    def: NewSchedule,
    paused: bool,
    next: Option<Due>,
    runs: u64,
    owed: Option<(TimeMs, TimeMs)>,
    owner: PrincipalV1,
    version: u64,
}

/// A record of layout 6 (the run state: parked, run policy, pending retry, dead runs, run
/// history; no run counters).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV6 {
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
}

/// The run counters of layout 7 (layout 8 added retirements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RunCountersV7 {
    fired: u64,
    failed: u64,
    late: u64,
    skipped: u64,
    expired: u64,
}

impl RunCountersV7 {
    fn upgrade(self) -> RunCounters {
        RunCounters {
            fired: self.fired,
            failed: self.failed,
            late: self.late,
            skipped: self.skipped,
            expired: self.expired,
            retired: 0,
        }
    }
}

/// A record of layout 7 (layout 6's with run counters and pending manual runs; no bounds).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub(super) struct RecordV7 {
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
    counters: RunCountersV7,
    manual: ManualRuns,
}

/// An older layout's record.
pub(super) trait OldRecord: Clone + bincode::Encode + bincode::Decode<()> {
    /// The layout 8 record it becomes.
    fn upgrade(self) -> Record;
}

fn record(
    def: NewSchedule,
    (paused, next, runs, owed): (bool, Option<Due>, u64, Option<(TimeMs, TimeMs)>),
    owner: Principal,
    version: u64,
) -> Record {
    // Its handler name is shared with the book's others when it is loaded (`load_record`).
    let def = super::def::Def::new(def, &mut super::def::HandlerNames::default());
    let mut r = Record::new(def, next, owner, RunPolicy::default());
    r.paused = paused;
    r.runs = runs;
    r.owed = owed;
    r.version = version;
    r
}

impl OldRecord for RecordV2 {
    fn upgrade(self) -> Record {
        let state = (self.paused, self.next, self.runs, self.owed);
        record(self.def.upgrade(), state, Principal::Host, 1)
    }
}

impl OldRecord for RecordV3 {
    fn upgrade(self) -> Record {
        let state = (self.paused, self.next, self.runs, self.owed);
        record(self.def.upgrade(), state, self.owner.into(), 1)
    }
}

impl OldRecord for RecordV4 {
    fn upgrade(self) -> Record {
        let state = (self.paused, self.next, self.runs, self.owed);
        record(self.def, state, self.owner.into(), self.version)
    }
}

impl OldRecord for RecordV6 {
    fn upgrade(self) -> Record {
        let state = (self.paused, self.next, self.runs, self.owed);
        let mut r = record(self.def, state, self.owner.into(), self.version);
        r.parked = self.parked;
        r.policy = self.policy;
        r.retry = self.retry;
        r.dead = self.dead;
        r.dead_evicted = self.dead_evicted;
        r.history = self.history;
        r
    }
}

impl OldRecord for RecordV7 {
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
        r
    }
}

/// The meta page of layouts 2 to 4.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct Meta {
    version: u8,
    component: ComponentId,
    next_id: u64,
    page_bytes: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
}

/// The commit page of layout 5.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct CommitV5 {
    version: u8,
    component: ComponentId,
    next_id: u64,
    page_bytes: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
    log_pages: u32,
    log_segments: u32,
}

/// The commit page of layout 6 (layout 7 added the book's run counters).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct CommitV6 {
    version: u8,
    component: ComponentId,
    next_id: u64,
    page_bytes: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
    log: LogSpan,
    stale: Stale,
}

/// The commit page of layout 7 (layout 8's counters count retirements too).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
struct CommitV7 {
    version: u8,
    component: ComponentId,
    next_id: u64,
    page_bytes: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
    log: LogSpan,
    stale: Stale,
    totals: RunCountersV7,
}

/// The head of one journal part: (version, part index, part count, CRC-32 of every part's
/// body).
type JournalHead = (u8, u32, u32, u32);

/// Encoded bytes of a [`JournalHead`].
const JOURNAL_HEAD_BYTES: usize = 13;

/// The body of one journal part: (full save, meta, zones (part 0 only), record pages written
/// (part 0 only), changes).
type JournalBody<R> = (
    bool,
    Meta,
    Option<Vec<ZoneRules>>,
    Vec<u32>,
    Vec<(u64, Option<(u32, R)>)>,
);

/// A journal, its parts merged.
struct Journal<R> {
    /// Log area pages its parts span.
    pages: u32,
    full: bool,
    meta: Meta,
    zones: Option<Vec<ZoneRules>>,
    listed: Vec<u32>,
    changes: Vec<(u64, Option<(u32, R)>)>,
}

/// Where the older layout's data lies in the log area, for the migration's full save.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OldExtent {
    /// Layout 5: its committed log.
    Log(LogPos),
    /// Layout 6: its committed log (from where it starts in the log area).
    LogV6(LogSpan),
    /// Layout 7: its committed log (from where it starts in the log area).
    LogV7(LogSpan),
    /// Layout 8: its committed log (from where it starts in the log area).
    LogV8(LogSpan),
    /// Layout 9: its committed log (from where it starts in the log area).
    LogV9(LogSpan),
    /// Layout 10: its committed log (from where it starts in the log area).
    LogV10(LogSpan),
    /// Layout 11: its committed log (from where it starts in the log area).
    LogV11(LogSpan),
    /// Layout 12: its committed log (from where it starts in the log area).
    LogV12(LogSpan),
    /// Layouts 2 to 4 (the version): the journal in force.
    Journal {
        /// The layout.
        version: u8,
        /// Log area pages from the first its parts span (0 without a journal in force).
        pages: u32,
    },
}

/// A book of an older layout, read and converted.
pub(super) struct Loaded {
    pub next_id: u64,
    pub zones: Vec<ZoneRules>,
    /// The exclusion calendars (none below layout 11).
    pub calendars: Vec<ExclusionCalendar>,
    pub records: BTreeMap<u64, Record>,
    pub old: OldExtent,
    /// The book's run counters (zero below layout 7).
    pub totals: RunCounters,
}

/// The journal stored in `layout`, or `None` when there is none or it is torn (a part fails the
/// codec's checks, does not decode, is missing, or belongs to another save). Store failures
/// and a journal of another version are errors.
fn read_journal<R: OldRecord>(
    pages: &dyn ReservedPages,
    layout: Layout,
    version: u8,
    component: ComponentId,
) -> Result<Option<Journal<R>>, ScheduleError> {
    let per_page = pages.page_size().saturating_sub(codec::HEADER_BYTES).max(1);
    let mut at = layout.log.first();
    let mut head0: Option<JournalHead> = None;
    let mut merged: Option<Journal<R>> = None;
    let mut part = 0u32;
    let mut tag = crc32fast::Hasher::new();
    loop {
        let Some(range) = PageRange::new(at, layout.log.end().saturating_sub(at)) else {
            return Ok(None);
        };
        let blob = match codec::load_blob(pages, range, BlobKind::BookJournal) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e @ (CodecError::Pages(_) | CodecError::RangeOutOfStore { .. })) => {
                return Err(e.into());
            }
            Err(_) => return Ok(None),
        };
        if blob.first() != Some(&version) {
            return Err(ScheduleError::Corrupt(format!(
                "a journal of another version in a book of layout {version}"
            )));
        }
        let Ok((head, body)) = codec::from_blob::<(JournalHead, JournalBody<R>)>(&blob) else {
            return Ok(None);
        };
        let body_bytes = blob.get(JOURNAL_HEAD_BYTES..).unwrap_or_default();
        let expected = head0.unwrap_or(head);
        if body.1.component != component {
            return Err(ScheduleError::Corrupt(format!(
                "journal of component {}",
                body.1.component
            )));
        }
        if head.1 != part || head.2 != expected.2 || head.3 != expected.3 {
            return Ok(None);
        }
        head0 = Some(expected);
        let (full, meta, zones, listed, changes) = body;
        match merged.as_mut() {
            None => {
                merged = Some(Journal {
                    pages: 0,
                    full,
                    meta,
                    zones,
                    listed,
                    changes,
                });
            }
            Some(j) => j.changes.extend(changes),
        }
        tag.update(body_bytes);
        at = at.saturating_add(
            u32::try_from(blob.len().div_ceil(per_page).max(1)).unwrap_or(u32::MAX),
        );
        part += 1;
        if part >= expected.2 {
            break;
        }
    }
    if head0.map(|h| h.3) != Some(tag.finalize()) {
        return Ok(None);
    }
    Ok(merged.map(|mut j| {
        j.pages = at - layout.log.first();
        j
    }))
}

/// The records of page `p` once `journal` is applied: the stored records the journal does not
/// name, plus the journal's records placed on `p` (only the latter after a full save).
fn journal_page<R: OldRecord>(
    pages: &dyn ReservedPages,
    layout: Layout,
    journal: &Journal<R>,
    p: u32,
) -> Result<Vec<(u64, R)>, ScheduleError> {
    let stored = persist::read_page::<R>(pages, layout, p)?;
    let named: BTreeSet<u64> = journal.changes.iter().map(|(id, _)| *id).collect();
    let mut out: BTreeMap<u64, R> = if journal.full {
        BTreeMap::new()
    } else {
        stored
            .into_iter()
            .filter(|(id, _)| !named.contains(id))
            .collect()
    };
    for (id, change) in &journal.changes {
        if let Some((page, r)) = change
            && *page == p
        {
            out.insert(*id, r.clone());
        }
    }
    Ok(out.into_iter().collect())
}

/// Reads a book of layout 2, 3 or 4 (`version`) with records `R`: the meta page, the zones
/// part and the record pages, the journal replayed over them.
fn load_journal_layout<R: OldRecord>(
    pages: &dyn ReservedPages,
    layout: Layout,
    version: u8,
    component: ComponentId,
) -> Result<Option<Loaded>, ScheduleError> {
    let corrupt = |m: String| ScheduleError::Corrupt(m);
    let journal = read_journal::<R>(pages, layout, version, component)?;
    // What the old layout needs of the log area: its journal in force (pages past it hold a
    // longer journal's leftovers, or a migration a crash cut short: never read).
    let journal_pages = journal.as_ref().map_or(0, |j| j.pages);
    let stored_meta = codec::load::<Meta>(pages, layout.meta, BlobKind::ScheduleBook)?;
    let stored_zones = codec::load::<Vec<ZoneRules>>(pages, layout.zones, BlobKind::ScheduleBook)?;
    let meta = match &journal {
        Some(j) => Some(j.meta.clone()),
        None => stored_meta,
    };
    let Some(meta) = meta else {
        return Ok(None);
    };
    if meta.version != version || meta.component != component {
        return Err(corrupt(format!(
            "meta of version {} component {}",
            meta.version, meta.component
        )));
    }
    let zones = match journal.as_ref().and_then(|j| j.zones.clone()) {
        Some(z) => z,
        None => stored_zones.ok_or_else(|| corrupt("the zones part is empty".into()))?,
    };
    if zones.len() != meta.zones as usize
        || crc32fast::hash(&codec::to_blob(&zones)?) != meta.zones_crc
    {
        return Err(corrupt("zones differ from the meta page".into()));
    }
    let listed: BTreeSet<u32> = journal
        .as_ref()
        .map(|j| j.listed.iter().copied().collect())
        .unwrap_or_default();
    let mut records = BTreeMap::new();
    for p in 0..layout.record_pages {
        let page = match &journal {
            Some(j) if listed.contains(&p) => journal_page(pages, layout, j, p)?,
            _ => persist::read_page::<R>(pages, layout, p)?,
        };
        for (id, r) in page {
            if id == 0 || id >= meta.next_id || records.insert(id, r.upgrade()).is_some() {
                return Err(corrupt(format!("schedule id {id} misplaced on page {p}")));
            }
        }
    }
    if records.len() as u64 != meta.records {
        return Err(corrupt(format!(
            "{} schedules stored, the meta page counts {}",
            records.len(),
            meta.records
        )));
    }
    Ok(Some(Loaded {
        next_id: meta.next_id,
        zones,
        calendars: Vec::new(),
        records,
        old: OldExtent::Journal {
            version,
            pages: journal_pages,
        },
        totals: RunCounters::default(),
    }))
}

/// The records of a log-form book (layouts 5 and 6): those on the first `record_pages` record
/// pages (none when the log holds a full save) that the committed log does not name, then the
/// log's own; each id in `1..next_id`, none twice, `count` in all, or `Corrupt`.
fn collect_records<R: OldRecord, Z>(
    pages: &dyn ReservedPages,
    layout: Layout,
    record_pages: u32,
    committed: Committed<R, Z>,
    next_id: u64,
    count: u64,
) -> Result<BTreeMap<u64, Record>, ScheduleError> {
    let corrupt = |m: String| ScheduleError::Corrupt(m);
    let mut records = BTreeMap::new();
    for p in 0..record_pages {
        let page = persist::read_page::<R>(pages, layout, p)?;
        if committed.full {
            continue;
        }
        for (id, r) in page {
            if committed.named.contains_key(&id) {
                continue;
            }
            if id == 0 || id >= next_id || records.insert(id, r.upgrade()).is_some() {
                return Err(corrupt(format!("schedule id {id} misplaced on page {p}")));
            }
        }
    }
    for (id, placed) in committed.named {
        if let Some((_, r)) = placed {
            if id == 0 || id >= next_id {
                return Err(corrupt(format!("the log names schedule id {id}")));
            }
            records.insert(id, r.upgrade());
        }
    }
    if records.len() as u64 != count {
        return Err(corrupt(format!(
            "{} schedules stored, the commit page counts {}",
            records.len(),
            count
        )));
    }
    Ok(records)
}

/// Reads a book of layout 5: the commit page, the committed log over the record pages.
fn load_v5(
    pages: &dyn ReservedPages,
    layout: Layout,
    blob: &[u8],
    component: ComponentId,
) -> Result<Loaded, ScheduleError> {
    let corrupt = |m: String| ScheduleError::Corrupt(m);
    let commit = codec::from_blob::<CommitV5>(blob)?;
    if commit.component != component {
        return Err(corrupt(format!("component {}", commit.component)));
    }
    let span = LogSpan {
        start: 0,
        pos: LogPos {
            pages: commit.log_pages,
            segments: commit.log_segments,
        },
    };
    let committed = persist::read_log::<RecordV4, Vec<ZoneRules>>(pages, layout, span)?;
    let zones = match &committed.zones {
        Some(z) => z.clone(),
        None => codec::load::<Vec<ZoneRules>>(pages, layout.zones, BlobKind::ScheduleBook)?
            .ok_or_else(|| corrupt("the zones part is empty".into()))?,
    };
    if zones.len() != commit.zones as usize
        || crc32fast::hash(&codec::to_blob(&zones)?) != commit.zones_crc
    {
        return Err(corrupt("zones differ from the commit page".into()));
    }
    let records = collect_records::<RecordV4, _>(
        pages,
        layout,
        layout.record_pages,
        committed,
        commit.next_id,
        commit.records,
    )?;
    Ok(Loaded {
        next_id: commit.next_id,
        zones,
        calendars: Vec::new(),
        records,
        old: OldExtent::Log(span.pos),
        totals: RunCounters::default(),
    })
}

/// What an older logged layout's zones part holds: the zones (layouts 5 to 10), or the zones
/// and the exclusion calendars (layout 11, [`persist::Shared`]).
pub(super) trait OldShared: Clone + bincode::Encode + bincode::Decode<()> {
    /// How many zones and calendars it holds.
    fn counts(&self) -> (usize, usize);
    /// Its zones and calendars.
    fn split(self) -> (Vec<ZoneRules>, Vec<ExclusionCalendar>);
}

impl OldShared for Vec<ZoneRules> {
    fn counts(&self) -> (usize, usize) {
        (self.len(), 0)
    }

    fn split(self) -> (Vec<ZoneRules>, Vec<ExclusionCalendar>) {
        (self, Vec::new())
    }
}

impl OldShared for persist::Shared {
    fn counts(&self) -> (usize, usize) {
        (self.0.len(), self.1.len())
    }

    fn split(self) -> (Vec<ZoneRules>, Vec<ExclusionCalendar>) {
        self
    }
}

/// What the commit pages of layouts 6 and 7 share (7 added the book's run counters).
struct LoggedCommit {
    component: ComponentId,
    next_id: u64,
    records: u64,
    zones: u32,
    zones_crc: u32,
    log: LogSpan,
    stale: Stale,
    totals: RunCounters,
}

impl From<CommitV6> for LoggedCommit {
    fn from(c: CommitV6) -> Self {
        Self {
            component: c.component,
            next_id: c.next_id,
            records: c.records,
            zones: c.zones,
            zones_crc: c.zones_crc,
            log: c.log,
            stale: c.stale,
            totals: RunCounters::default(),
        }
    }
}

impl From<CommitV7> for LoggedCommit {
    fn from(c: CommitV7) -> Self {
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

/// Reads a book of layout 6 or 7 (`R` its record): the commit page, the committed log over the
/// record pages (not read when stale: they hold the layout before, and the log holds every
/// record).
fn load_logged<R: OldRecord, Z: OldShared>(
    pages: &dyn ReservedPages,
    layout: Layout,
    commit: LoggedCommit,
    calendars: u32,
    component: ComponentId,
    old: OldExtent,
) -> Result<Loaded, ScheduleError> {
    let corrupt = |m: String| ScheduleError::Corrupt(m);
    if commit.component != component {
        return Err(corrupt(format!("component {}", commit.component)));
    }
    if commit.log.end() > layout.log.len() || commit.stale == Stale::InFrozen {
        return Err(corrupt("a log the log area cannot hold".into()));
    }
    let committed = persist::read_log::<R, Z>(pages, layout, commit.log)?;
    let shared = match &committed.zones {
        Some(z) => z.clone(),
        None => codec::load::<Z>(pages, layout.zones, BlobKind::ScheduleBook)?
            .ok_or_else(|| corrupt("the zones part is empty".into()))?,
    };
    if shared.counts() != (commit.zones as usize, calendars as usize)
        || crc32fast::hash(&codec::to_blob(&shared)?) != commit.zones_crc
    {
        return Err(corrupt("zones differ from the commit page".into()));
    }
    let (zones, calendars) = shared.split();
    // A stale book's record pages hold the layout before: the log holds every record.
    let record_pages = if commit.stale != Stale::No {
        0
    } else {
        layout.record_pages
    };
    let records = collect_records::<R, _>(
        pages,
        layout,
        record_pages,
        committed,
        commit.next_id,
        commit.records,
    )?;
    Ok(Loaded {
        next_id: commit.next_id,
        zones,
        calendars,
        records,
        old,
        totals: commit.totals,
    })
}

/// Reads a book of an older layout: `blob` is its first page (`None`: the meta page is empty,
/// and a journal may hold a first save a crash cut short).
pub(super) fn load(
    pages: &dyn ReservedPages,
    layout: Layout,
    blob: Option<&[u8]>,
    component: ComponentId,
) -> Result<Option<Loaded>, ScheduleError> {
    let version = match blob {
        Some(b) => b.first().copied().unwrap_or(0),
        None => match codec::load_blob(pages, layout.log, BlobKind::BookJournal) {
            Ok(Some(j)) => j.first().copied().unwrap_or(0),
            _ => return Ok(None),
        },
    };
    let loaded = match (version, blob) {
        (5, Some(b)) => Some(load_v5(pages, layout, b, component)?),
        (6, Some(b)) => {
            let commit = codec::from_blob::<CommitV6>(b)?;
            let old = OldExtent::LogV6(commit.log);
            Some(load_logged::<RecordV6, Vec<ZoneRules>>(
                pages,
                layout,
                commit.into(),
                0,
                component,
                old,
            )?)
        }
        (7, Some(b)) => {
            let commit = codec::from_blob::<CommitV7>(b)?;
            let old = OldExtent::LogV7(commit.log);
            Some(load_logged::<RecordV7, Vec<ZoneRules>>(
                pages,
                layout,
                commit.into(),
                0,
                component,
                old,
            )?)
        }
        (8, Some(b)) => {
            let commit = codec::from_blob::<v8::CommitV8>(b)?;
            let old = OldExtent::LogV8(commit.log);
            Some(load_logged::<v8::RecordV8, Vec<ZoneRules>>(
                pages,
                layout,
                commit.into(),
                0,
                component,
                old,
            )?)
        }
        (9, Some(b)) => {
            let commit = codec::from_blob::<v9::CommitV9>(b)?;
            let old = OldExtent::LogV9(commit.log);
            Some(load_logged::<v9::RecordV9, Vec<ZoneRules>>(
                pages,
                layout,
                commit.into(),
                0,
                component,
                old,
            )?)
        }
        (10, Some(b)) => {
            let commit = codec::from_blob::<v10::CommitV10>(b)?;
            let old = OldExtent::LogV10(commit.log);
            Some(load_logged::<v10::RecordV10, Vec<ZoneRules>>(
                pages,
                layout,
                commit.into(),
                0,
                component,
                old,
            )?)
        }
        (11, Some(b)) => {
            let commit = codec::from_blob::<v11::CommitV11>(b)?;
            let old = OldExtent::LogV11(commit.log);
            let calendars = commit.calendars;
            Some(load_logged::<v11::RecordV11, persist::Shared>(
                pages,
                layout,
                commit.into(),
                calendars,
                component,
                old,
            )?)
        }
        (12, Some(b)) => {
            // Layout 12's records and zones part are layout 13's; its commit page has no
            // refusal counters (they start at zero).
            let commit = codec::from_blob::<v12::CommitV12>(b)?;
            let old = OldExtent::LogV12(commit.log);
            let calendars = commit.calendars;
            Some(load_logged::<Record, persist::Shared>(
                pages,
                layout,
                commit.into(),
                calendars,
                component,
                old,
            )?)
        }
        (2, _) => load_journal_layout::<RecordV2>(pages, layout, 2, component)?,
        (3, _) => load_journal_layout::<RecordV3>(pages, layout, 3, component)?,
        (4, _) => load_journal_layout::<RecordV4>(pages, layout, 4, component)?,
        (found, _) => {
            return Err(ScheduleError::UnsupportedLayout {
                found,
                supported: persist::WIRE_VERSION,
            });
        }
    };
    if let Some(l) = &loaded {
        tracing::info!(
            component,
            version,
            records = l.records.len(),
            "schedule book of an older layout loaded: the next save migrates it"
        );
    }
    Ok(loaded)
}

/// Makes room in the log area for the migration's full save of `need` pages; returns the page
/// (from the area's first) where it starts: past the old layout's data when it fits there,
/// else at the first page after completing the old layout's save in its own format.
pub(super) fn prepare(
    pages: &mut dyn ReservedPages,
    layout: Layout,
    component: ComponentId,
    old: OldExtent,
    need: u32,
) -> Result<u32, ScheduleError> {
    let area = layout.log.len();
    let extent = match old {
        OldExtent::Log(pos) => pos.pages,
        OldExtent::LogV6(span)
        | OldExtent::LogV7(span)
        | OldExtent::LogV8(span)
        | OldExtent::LogV9(span)
        | OldExtent::LogV10(span)
        | OldExtent::LogV11(span)
        | OldExtent::LogV12(span) => span.end(),
        OldExtent::Journal { pages, .. } => pages,
    };
    if extent.saturating_add(need) <= area {
        return Ok(extent);
    }
    match old {
        OldExtent::Log(pos) => fold_v5(pages, layout, component, pos)?,
        OldExtent::LogV6(_) => fold_logged::<RecordV6, CommitV6, Vec<ZoneRules>>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::LogV7(_) => fold_logged::<RecordV7, CommitV7, Vec<ZoneRules>>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::LogV8(_) => fold_logged::<v8::RecordV8, v8::CommitV8, Vec<ZoneRules>>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::LogV9(_) => fold_logged::<v9::RecordV9, v9::CommitV9, Vec<ZoneRules>>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::LogV10(_) => fold_logged::<v10::RecordV10, v10::CommitV10, Vec<ZoneRules>>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::LogV11(_) => fold_logged::<v11::RecordV11, v11::CommitV11, persist::Shared>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::LogV12(_) => fold_logged::<Record, v12::CommitV12, persist::Shared>(
            pages,
            layout,
            component,
            |c| (c.component, c.log, c.stale),
            |c| {
                c.log = LogSpan::default();
                c.stale = Stale::No;
            },
        )?,
        OldExtent::Journal { version, pages: n } => {
            match version {
                2 => complete_journal::<RecordV2>(pages, layout, version, component)?,
                3 => complete_journal::<RecordV3>(pages, layout, version, component)?,
                _ => complete_journal::<RecordV4>(pages, layout, version, component)?,
            }
            // The journal is now redundant: zero it, first page first (a journal whose first
            // part is missing reads as none).
            for id in layout.log.first()..layout.log.first().saturating_add(n) {
                pages.zero(id).map_err(CodecError::from)?;
            }
        }
    }
    Ok(0)
}

/// Completes the stored journal's save in place, in its layout's format (as that layout did
/// after a crash): the meta page, the zones, the record pages it lists.
fn complete_journal<R: OldRecord>(
    pages: &mut dyn ReservedPages,
    layout: Layout,
    version: u8,
    component: ComponentId,
) -> Result<(), ScheduleError> {
    let Some(journal) = read_journal::<R>(pages, layout, version, component)? else {
        return Ok(());
    };
    let mut writes = Vec::new();
    for &p in &journal.listed {
        let Some(part) = layout.record_page(p) else {
            continue;
        };
        let records = journal_page(pages, layout, &journal, p)?;
        let blob = if records.is_empty() {
            None
        } else {
            Some(codec::to_blob(&(p, records))?)
        };
        writes.push((part, blob));
    }
    codec::save(pages, layout.meta, BlobKind::ScheduleBook, &journal.meta)?;
    if let Some(zones) = &journal.zones {
        codec::save(pages, layout.zones, BlobKind::ScheduleBook, zones)?;
    }
    for (part, blob) in writes {
        record_log::write_page(pages, part, BlobKind::BookRecords, blob.as_deref())?;
    }
    Ok(())
}

/// Folds a layout 5 book's committed log into its record pages and zones part, in layout 5's
/// format, and commits it with an empty log (as layout 5's own fold did).
fn fold_v5(
    pages: &mut dyn ReservedPages,
    layout: Layout,
    component: ComponentId,
    pos: LogPos,
) -> Result<(), ScheduleError> {
    let Some(blob) = codec::load_blob(pages, layout.meta, BlobKind::ScheduleBook)? else {
        return Err(ScheduleError::Corrupt(
            "a layout 5 log without a commit page".into(),
        ));
    };
    let mut commit = codec::from_blob::<CommitV5>(&blob)?;
    if commit.component != component {
        return Err(ScheduleError::Corrupt(format!(
            "component {}",
            commit.component
        )));
    }
    let span = LogSpan { start: 0, pos };
    let committed: Committed<RecordV4> = persist::read_log(pages, layout, span)?;
    let mut by_page: BTreeMap<u32, Vec<(u64, RecordV4)>> = BTreeMap::new();
    for (id, placed) in &committed.named {
        if let Some((p, r)) = placed {
            by_page.entry(*p).or_default().push((*id, r.clone()));
        }
    }
    for p in 0..layout.record_pages {
        let Some(part) = layout.record_page(p) else {
            continue;
        };
        let blob = persist::folded_page(pages, layout, &committed, &by_page, false, p)?;
        record_log::write_page(pages, part, BlobKind::BookRecords, blob.as_deref())?;
    }
    if let Some(zones) = &committed.zones {
        codec::save(pages, layout.zones, BlobKind::ScheduleBook, zones)?;
    }
    commit.log_pages = 0;
    commit.log_segments = 0;
    codec::save(pages, layout.meta, BlobKind::ScheduleBook, &commit)?;
    Ok(())
}

/// Folds a layout 6 to 12 book's committed log (`R` its record, `C` its commit page, `Z` its
/// zones part: `parts`
/// reads its component, log and stale flag, `reset` empties its log) into its record pages and
/// zones part, in that layout's format (every record page rewritten, as its fold of a stale book
/// did), and commits it with an empty log from the area's first page. A crash part-way reloads
/// as the same book: until the commit page, the log is in force over pages that hold its
/// records or the ones before.
fn fold_logged<R: OldRecord, C: bincode::Encode + bincode::Decode<()>, Z: OldShared>(
    pages: &mut dyn ReservedPages,
    layout: Layout,
    component: ComponentId,
    parts: impl Fn(&C) -> (ComponentId, LogSpan, Stale),
    reset: impl Fn(&mut C),
) -> Result<(), ScheduleError> {
    let Some(blob) = codec::load_blob(pages, layout.meta, BlobKind::ScheduleBook)? else {
        return Err(ScheduleError::Corrupt(
            "a logged layout without a commit page".into(),
        ));
    };
    let mut commit = codec::from_blob::<C>(&blob)?;
    let (found, log, stale) = parts(&commit);
    if found != component {
        return Err(ScheduleError::Corrupt(format!("component {found}")));
    }
    let committed: Committed<R, Z> = persist::read_log(pages, layout, log)?;
    let mut by_page: BTreeMap<u32, Vec<(u64, R)>> = BTreeMap::new();
    for (id, placed) in &committed.named {
        if let Some((p, r)) = placed {
            by_page.entry(*p).or_default().push((*id, r.clone()));
        }
    }
    let stale = stale != Stale::No;
    for p in 0..layout.record_pages {
        let Some(part) = layout.record_page(p) else {
            continue;
        };
        let blob = persist::folded_page(pages, layout, &committed, &by_page, stale, p)?;
        record_log::write_page(pages, part, BlobKind::BookRecords, blob.as_deref())?;
    }
    if let Some(zones) = &committed.zones {
        codec::save(pages, layout.zones, BlobKind::ScheduleBook, zones)?;
    }
    reset(&mut commit);
    codec::save(pages, layout.meta, BlobKind::ScheduleBook, &commit)?;
    Ok(())
}

#[cfg(test)]
mod tests;
