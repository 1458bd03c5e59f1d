//! A replica's schedule read endpoint: list, describe, the book as a whole and the outbox's
//! depth, each answered as a versioned, bounded [`QueryAnswer`] naming the height it was read
//! at (`ccron::schedule::query`). The client that believes only f+1 identical answers is
//! [`crate::schedule_read`].
//!
//! Routes ([`schedule_router`], all `GET`, answers `application/octet-stream`):
//!
//! - [`SCHEDULES_PATH`]`?owner=&component=&handler=&topic=&paused=&parked=&after=&limit=`: a
//!   [`ScheduleList`](ccron::schedule::query::ScheduleList) (every parameter optional; `owner`
//!   is `host`, `client:HEX` (64 hex digits) or `legacy:N`; `after` is the previous page's cursor; text values
//!   percent-encoded).
//! - [`SCHEDULE_PATH`]`?id=N` or `?key=K`, optionally `&preview=N`: a description
//!   (`Describe(None)` when no schedule has that id or key, so that readers agree on absence
//!   too).
//!   A list holds the ledger's cron table entries after the book's schedules (query format 5):
//!   `kind=book|entry` keeps one kind, `entries_from=C:P` continues the entries at component
//!   `C`, position `P` (a previous page's cursor).
//! - [`ENTRY_PATH`]`?component=C&position=P`, optionally `&preview=N`: a cron table entry
//!   described ([`EntryDetail`](ccron::schedule::query::EntryDetail); `Entry(None)` when there
//!   is no such entry).
//! - [`BOOK_PATH`]: the book as a whole ([`BookState`](ccron::schedule::query::BookState)).
//! - [`OUTBOX_STATE_PATH`]: the committed outbox's depth and the consumer's progress.
//!
//! `400` for a malformed query (unknown or repeated parameter, a bad number, over 1 KiB), `503`
//! while nothing is published, `404` from [`SCHEDULES_PATH`] and friends when the application
//! keeps no book (from the list and [`ENTRY_PATH`] only when it keeps no cron table either). Reads only; anyone who reaches the endpoint may read (put it behind the
//! network's access control if the schedules are secret). Mount it in a bounded server
//! ([`crate::server::serve`]).
//!
//! [`PublishedBook`] is the [`ScheduleSource`] a host fills after every executed height: it
//! clones the book only when the application's state digest changed (O(book) per change,
//! fine for examples and moderate books; a production node serves reads from its store) and
//! otherwise only moves the height. Queries run on the reading thread over the shared
//! snapshot, never on the executing thread.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext, FireNote};
use ccron::outbox::Outbox;
use ccron::schedule::query::{
    self, EntryCursor, ListKind, OutboxState, QueryAnswer, QueryBody, ScheduleFilter, TableEntries,
};
use ccron::schedule::{Principal, Scheduler, Target};
use ccron::{PageRange, ReservedPages, Tick};

/// Path of the list query.
pub const SCHEDULES_PATH: &str = "/ccron/v1/schedules";
/// Path of the describe query.
pub const SCHEDULE_PATH: &str = "/ccron/v1/schedule";
/// Path of the book query.
pub const BOOK_PATH: &str = "/ccron/v1/book";
/// Path of the outbox state query.
pub const OUTBOX_STATE_PATH: &str = "/ccron/v1/outbox/state";
/// Path of the table entry query (query format 5).
pub const ENTRY_PATH: &str = "/ccron/v1/entry";

/// Longest query string accepted.
pub const MAX_QUERY_BYTES: usize = 1024;

/// A query, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleQuery {
    /// List with a filter.
    List(ScheduleFilter),
    /// Describe a schedule with its next `preview` instants.
    Describe {
        /// Which.
        target: Target,
        /// How many upcoming instants (clamped to `query::MAX_PREVIEW`).
        preview: usize,
    },
    /// The book as a whole.
    Book,
    /// The outbox's depth.
    Outbox,
    /// Describe a cron table entry with its next `preview` instants (query format 5).
    DescribeEntry {
        /// Its table's component.
        component: u32,
        /// Its position.
        position: u32,
        /// How many upcoming instants (clamped to `query::MAX_PREVIEW`).
        preview: usize,
    },
}

/// Why a source cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswerable {
    /// Nothing published yet (`503`).
    NotYet,
    /// The application keeps no schedule book (`404`).
    NoBook,
}

/// What a replica's schedule read endpoint answers from.
pub trait ScheduleSource: Send + Sync + 'static {
    /// The answer to `q`, as of the last published height.
    ///
    /// # Errors
    /// [`Unanswerable`].
    fn answer(&self, q: &ScheduleQuery) -> Result<QueryAnswer, Unanswerable>;
}

#[derive(Debug)]
struct Snap {
    book: Option<Arc<Scheduler>>,
    outbox: Option<OutboxState>,
    entries: Option<Arc<TableEntries>>,
    at_height: u64,
    digest: [u8; 32],
}

/// One publish of a [`PublishedBook`] in one piece ([`PublishedBook::snapshot_with_entries`]).
#[derive(Debug, Clone)]
pub struct PublishedState {
    /// The book, if the application keeps one.
    pub book: Option<Arc<Scheduler>>,
    /// The outbox's state, if the application keeps one.
    pub outbox: Option<OutboxState>,
    /// The cron table entries, if the application has tables.
    pub entries: Option<Arc<TableEntries>>,
    /// The height they were read at.
    pub at_height: u64,
}

/// A replica's last committed book and outbox state, shared between its executing thread
/// (which [`publish`](Self::publish)es) and its read endpoint (a [`ScheduleSource`]).
#[derive(Debug, Clone)]
pub struct PublishedBook {
    replica: u64,
    inner: Arc<Mutex<Option<Snap>>>,
    /// The outbox's [`Outbox::quota_refusals`] at the last publish (replica-local).
    quota_refusals: Arc<std::sync::atomic::AtomicU64>,
}

impl PublishedBook {
    /// Nothing published yet, for replica `replica`.
    pub fn new(replica: u64) -> Self {
        Self {
            replica,
            inner: Arc::default(),
            quota_refusals: Arc::default(),
        }
    }

    /// Runs and requests the outbox refused or held back for their owner's quota, as of the
    /// last publish ([`Outbox::quota_refusals`]: this replica's counter, not replicated state,
    /// so it is read at every publish, digest changed or not).
    pub fn quota_refusals(&self) -> u64 {
        self.quota_refusals
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Publishes the state after executing height `at_height` whose application state digest
    /// is `digest`: the book and the outbox's state are taken again only when the digest
    /// changed. Returns whether they were.
    pub fn publish(
        &self,
        book: Option<&Scheduler>,
        outbox: Option<&Outbox>,
        at_height: u64,
        digest: [u8; 32],
    ) -> bool {
        self.publish_with_entries(book, outbox, || None, at_height, digest)
    }

    /// [`Self::publish`] with the application's cron table entries
    /// ([`Application::table_entries`]), gathered (O(entries)) only when the digest changed.
    pub fn publish_with_entries(
        &self,
        book: Option<&Scheduler>,
        outbox: Option<&Outbox>,
        entries: impl FnOnce() -> Option<TableEntries>,
        at_height: u64,
        digest: [u8; 32],
    ) -> bool {
        if let Some(o) = outbox {
            self.quota_refusals
                .store(o.quota_refusals(), std::sync::atomic::Ordering::Relaxed);
        }
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = g.as_mut()
            && s.digest == digest
        {
            s.at_height = at_height;
            return false;
        }
        *g = Some(Snap {
            book: book.map(|b| Arc::new(b.clone())),
            outbox: outbox.map(query::outbox_state),
            entries: entries().map(Arc::new),
            at_height,
            digest,
        });
        true
    }

    /// The last published book and its height.
    pub fn book(&self) -> Option<(Arc<Scheduler>, u64)> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = g.as_ref()?;
        Some((s.book.clone()?, s.at_height))
    }

    /// The last published outbox state and its height.
    pub fn outbox(&self) -> Option<(OutboxState, u64)> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = g.as_ref()?;
        Some((s.outbox?, s.at_height))
    }

    /// The last publish in one piece: the book (if the application keeps one), the outbox
    /// state (likewise) and their height.
    pub fn snapshot(&self) -> Option<(Option<Arc<Scheduler>>, Option<OutboxState>, u64)> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|s| (s.book.clone(), s.outbox, s.at_height))
    }

    /// [`Self::snapshot`] with the cron table entries of the same publish (if the
    /// application has tables).
    pub fn snapshot_with_entries(&self) -> Option<PublishedState> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|s| PublishedState {
            book: s.book.clone(),
            outbox: s.outbox,
            entries: s.entries.clone(),
            at_height: s.at_height,
        })
    }

    /// The last published cron table entries, if the application has tables.
    pub fn entries(&self) -> Option<Arc<TableEntries>> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref()?.entries.clone()
    }

    /// The height of the last publish.
    pub fn at_height(&self) -> Option<u64> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().map(|s| s.at_height)
    }
}

impl ScheduleSource for PublishedBook {
    fn answer(&self, q: &ScheduleQuery) -> Result<QueryAnswer, Unanswerable> {
        let (book, outbox, entries, at_height) = {
            let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let s = g.as_ref().ok_or(Unanswerable::NotYet)?;
            (s.book.clone(), s.outbox, s.entries.clone(), s.at_height)
        };
        let body = match q {
            ScheduleQuery::Outbox => QueryBody::Outbox(outbox),
            other => answer_with(book.as_deref(), entries.as_deref(), other)?,
        };
        Ok(QueryAnswer {
            replica: self.replica,
            at_height,
            body,
        })
    }
}

/// The body `book` answers to a book query (`Outbox` answers `Outbox(None)`), for a ledger
/// without cron tables.
pub fn answer_book(book: &Scheduler, q: &ScheduleQuery) -> QueryBody {
    answer_with(Some(book), None, q).unwrap_or(QueryBody::Outbox(None))
}

/// The body a ledger with `book` and cron table `entries` answers to `q` (`Outbox` answers
/// `Outbox(None)`): a list and an entry's description need one of them, the book's queries
/// the book.
///
/// # Errors
/// [`Unanswerable::NoBook`] when the query needs what the ledger does not keep.
pub fn answer_with(
    book: Option<&Scheduler>,
    entries: Option<&TableEntries>,
    q: &ScheduleQuery,
) -> Result<QueryBody, Unanswerable> {
    let no_book = Unanswerable::NoBook;
    Ok(match q {
        ScheduleQuery::List(f) => {
            if book.is_none() && entries.is_none() {
                return Err(no_book);
            }
            QueryBody::List(query::list_all(book, entries, f))
        }
        ScheduleQuery::Describe { target, preview } => QueryBody::Describe(
            query::describe(book.ok_or(no_book)?, target, *preview).map(Box::new),
        ),
        ScheduleQuery::Book => QueryBody::Book(query::book_state(book.ok_or(no_book)?)),
        ScheduleQuery::Outbox => QueryBody::Outbox(None),
        ScheduleQuery::DescribeEntry {
            component,
            position,
            preview,
        } => {
            if book.is_none() && entries.is_none() {
                return Err(no_book);
            }
            QueryBody::Entry(
                entries
                    .and_then(|e| query::describe_entry(e, *component, *position, *preview))
                    .map(Box::new),
            )
        }
    })
}

/// An [`Application`] wrapper that publishes the inner application's book and outbox state
/// into a [`PublishedBook`] after every executed request, tick, restore and reload, so a host
/// that does not publish by itself (sim-bft's threaded runtime) serves [`schedule_router`]
/// without knowing the application. Replicated behaviour is the inner application's,
/// unchanged; each publish costs one [`Application::digest`] (cheap by contract) and a clone of
/// the book (and a gathering of the table entries) when the digest changed. The tables' stored
/// next due points live in the host's pages, outside [`Application::digest`]: a tick that only
/// moves an entry without running it (a cron rule arming) shows in the published entries with
/// the next change of the digest (a node publishes on its state digest, pages included).
pub struct PublishBook<A> {
    inner: A,
    out: PublishedBook,
    at_seq: u64,
}

impl<A: Application> PublishBook<A> {
    /// Wraps `inner`, publishing into `out`.
    pub fn new(inner: A, out: PublishedBook) -> Self {
        Self {
            inner,
            out,
            at_seq: 0,
        }
    }

    /// The wrapped application.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    fn publish(&self) {
        self.out.publish_with_entries(
            self.inner.schedule_book(),
            self.inner.outbox(),
            || self.inner.table_entries(),
            self.at_seq,
            self.inner.digest(),
        );
    }
}

impl<A: Application> Application for PublishBook<A> {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        let r = self.inner.execute(ctx, client, payload);
        self.at_seq = self.at_seq.max(ctx.seq);
        self.publish();
        r
    }
    fn digest(&self) -> Digest32 {
        self.inner.digest()
    }
    fn digest_in(&self, hash: ccron::state_hash::StateHash) -> Digest32 {
        self.inner.digest_in(hash)
    }
    fn execute_with(
        &mut self,
        ctx: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut ccron::host::Effects<'_>,
    ) -> Vec<u8> {
        let r = self.inner.execute_with(ctx, client, payload, fx);
        self.at_seq = self.at_seq.max(ctx.seq);
        self.publish();
        r
    }
    fn on_outbox_result(
        &mut self,
        record: &ccron::outbox::OutboxRecord,
        outcome: &ccron::outbox::ResultOutcome,
    ) {
        self.inner.on_outbox_result(record, outcome);
    }
    fn snapshot(&self) -> Vec<u8> {
        self.inner.snapshot()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let r = self.inner.restore(snapshot);
        self.publish();
        r
    }
    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        let r = self.inner.on_tick(tick, pages);
        self.at_seq = self.at_seq.max(tick.bft_sequence_num);
        self.publish();
        r
    }
    fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), AppError> {
        let r = self.inner.reload(pages);
        self.publish();
        r
    }
    fn fires(&self) -> std::collections::BTreeMap<(u32, u32), u64> {
        self.inner.fires()
    }
    fn halted(&self) -> Option<&AppError> {
        self.inner.halted()
    }
    fn take_fire_notes(&mut self, out: &mut Vec<FireNote>) {
        self.inner.take_fire_notes(out);
    }
    fn tick_components(&self) -> Vec<u32> {
        self.inner.tick_components()
    }
    fn setup_digest(&self) -> Option<Digest32> {
        self.inner.setup_digest()
    }
    fn outbox(&self) -> Option<&Outbox> {
        self.inner.outbox()
    }
    fn schedule_book(&self) -> Option<&Scheduler> {
        self.inner.schedule_book()
    }
    fn table_entries(&self) -> Option<TableEntries> {
        self.inner.table_entries()
    }
    fn page_ranges(&self) -> Vec<PageRange> {
        self.inner.page_ranges()
    }
}

// ---------------------------------------------------------------------------------------------
// Query strings.

/// Percent-decodes `s` (`%XX` and `+` as a space) into UTF-8.
fn pct_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("bad percent escape")?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8".to_string())
}

/// Percent-encodes `s` for a query value (unreserved characters kept).
pub fn pct_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(c));
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

fn pairs(q: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let q = q.unwrap_or("");
    if q.len() > MAX_QUERY_BYTES {
        return Err("query too long".into());
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or("a parameter has no value")?;
        let k = pct_decode(k)?;
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(format!("{k} given twice"));
        }
        out.push((k, pct_decode(v)?));
    }
    Ok(out)
}

fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{k}: not a number"))
}

fn boolean(k: &str, v: &str) -> Result<bool, String> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("{k}: not true or false")),
    }
}

/// Parses `host`, `client:HEX` (or a bare client id: 64 hex digits, a 256-bit
/// [`ClientId`]) or `legacy:N` (an owner migrated from a 64-bit id).
pub fn parse_principal(v: &str) -> Result<Principal, String> {
    if v == "host" {
        return Ok(Principal::Host);
    }
    if let Some(n) = v.strip_prefix("legacy:") {
        return n
            .parse()
            .map(Principal::LegacyClient)
            .map_err(|_| format!("owner {v:?}: legacy:N takes a 64-bit number"));
    }
    let n = v.strip_prefix("client:").unwrap_or(v);
    n.parse::<ClientId>()
        .map(Principal::Client)
        .map_err(|_| format!("owner {v:?}: host, client:HEX (64 hex digits) or legacy:N"))
}

/// Renders a principal as [`parse_principal`] reads it.
pub fn principal_param(p: &Principal) -> String {
    match p {
        Principal::Host => "host".into(),
        Principal::Client(id) => format!("client:{id}"),
        Principal::LegacyClient(n) => format!("legacy:{n}"),
    }
}

/// Parses a list query string.
///
/// # Errors
/// A message naming the bad parameter.
pub fn parse_list(q: Option<&str>) -> Result<ScheduleFilter, String> {
    let mut f = ScheduleFilter::default();
    for (k, v) in pairs(q)? {
        match k.as_str() {
            "owner" => f.owner = Some(parse_principal(&v)?),
            "component" => f.component = Some(num(&k, &v)?),
            "handler" => f.handler = Some(v),
            "topic" => f.topic = Some(v),
            "paused" => f.paused = Some(boolean(&k, &v)?),
            "parked" => f.parked = Some(boolean(&k, &v)?),
            "after" => f.after = num(&k, &v)?,
            "limit" => f.limit = num(&k, &v)?,
            "kind" => {
                f.kind = Some(match v.as_str() {
                    "book" => ListKind::Book,
                    "entry" => ListKind::Entry,
                    _ => return Err("kind: book or entry".into()),
                })
            }
            "entries_from" => f.entries_from = Some(parse_cursor(&v)?),
            _ => return Err(format!("unknown parameter {k}")),
        }
    }
    Ok(f)
}

/// Renders `f` as the query string [`parse_list`] reads.
pub fn list_query(f: &ScheduleFilter) -> String {
    let mut parts = Vec::new();
    if let Some(o) = &f.owner {
        parts.push(format!("owner={}", pct_encode(&principal_param(o))));
    }
    if let Some(c) = f.component {
        parts.push(format!("component={c}"));
    }
    if let Some(h) = &f.handler {
        parts.push(format!("handler={}", pct_encode(h)));
    }
    if let Some(t) = &f.topic {
        parts.push(format!("topic={}", pct_encode(t)));
    }
    if let Some(p) = f.paused {
        parts.push(format!("paused={p}"));
    }
    if let Some(p) = f.parked {
        parts.push(format!("parked={p}"));
    }
    if f.after > 0 {
        parts.push(format!("after={}", f.after));
    }
    if f.limit > 0 {
        parts.push(format!("limit={}", f.limit));
    }
    // Only when set: a node of query format 4 refuses parameters it does not know.
    match f.kind {
        Some(ListKind::Book) => parts.push("kind=book".into()),
        Some(ListKind::Entry) => parts.push("kind=entry".into()),
        None => {}
    }
    if let Some(c) = f.entries_from {
        parts.push(format!("entries_from={}", cursor_param(c)));
    }
    parts.join("&")
}

/// Parses a table entry cursor `C:P` (component, position).
///
/// # Errors
/// A message when it is not two numbers joined by `:`.
pub fn parse_cursor(v: &str) -> Result<EntryCursor, String> {
    let (c, p) = v
        .split_once(':')
        .ok_or("a table entry is COMPONENT:POSITION")?;
    Ok(EntryCursor {
        component: num("component", c)?,
        position: num("position", p)?,
    })
}

/// Renders a table entry cursor as [`parse_cursor`] reads it.
pub fn cursor_param(c: EntryCursor) -> String {
    format!("{}:{}", c.component, c.position)
}

/// Parses an entry describe query string (`component=C&position=P[&preview=N]`).
///
/// # Errors
/// A message naming the bad parameter.
pub fn parse_entry(q: Option<&str>) -> Result<(u32, u32, usize), String> {
    let (mut component, mut position, mut preview) = (None, None, 0usize);
    for (k, v) in pairs(q)? {
        match k.as_str() {
            "component" => component = Some(num(&k, &v)?),
            "position" => position = Some(num(&k, &v)?),
            "preview" => preview = num(&k, &v)?,
            _ => return Err(format!("unknown parameter {k}")),
        }
    }
    Ok((
        component.ok_or("missing component")?,
        position.ok_or("missing position")?,
        preview,
    ))
}

/// Parses a describe query string.
///
/// # Errors
/// A message naming the bad parameter.
pub fn parse_describe(q: Option<&str>) -> Result<(Target, usize), String> {
    let mut target = None;
    let mut preview = 0usize;
    for (k, v) in pairs(q)? {
        match k.as_str() {
            "id" if target.is_none() => target = Some(Target::Id(num(&k, &v)?)),
            "key" if target.is_none() => target = Some(Target::Key(v)),
            "id" | "key" => return Err("give one of id and key".into()),
            "preview" => preview = num(&k, &v)?,
            _ => return Err(format!("unknown parameter {k}")),
        }
    }
    Ok((target.ok_or("missing id or key")?, preview))
}

/// Renders a describe query string.
pub fn describe_query(target: &Target, preview: usize) -> String {
    let t = match target {
        Target::Id(id) => format!("id={id}"),
        Target::Key(k) => format!("key={}", pct_encode(k)),
    };
    format!("{t}&preview={preview}")
}

/// The path and query string of `q`.
pub fn path_of(q: &ScheduleQuery) -> String {
    match q {
        ScheduleQuery::List(f) => format!("{SCHEDULES_PATH}?{}", list_query(f)),
        ScheduleQuery::Describe { target, preview } => {
            format!("{SCHEDULE_PATH}?{}", describe_query(target, *preview))
        }
        ScheduleQuery::Book => BOOK_PATH.to_string(),
        ScheduleQuery::Outbox => OUTBOX_STATE_PATH.to_string(),
        ScheduleQuery::DescribeEntry {
            component,
            position,
            preview,
        } => format!("{ENTRY_PATH}?component={component}&position={position}&preview={preview}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Server.

type Src = Arc<dyn ScheduleSource>;

fn respond(src: &Src, q: Result<ScheduleQuery, String>) -> Response {
    let q = match q {
        Ok(q) => q,
        Err(e) => {
            tracing::debug!(error = %e, "schedule read: bad query");
            return (StatusCode::BAD_REQUEST, e).into_response();
        }
    };
    match src.answer(&q) {
        Ok(a) => match a.encode() {
            Ok(bytes) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                bytes,
            )
                .into_response(),
            Err(e) => {
                tracing::error!(error = %e, "schedule read: answer does not encode");
                (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
            }
        },
        Err(Unanswerable::NotYet) => {
            (StatusCode::SERVICE_UNAVAILABLE, "nothing committed yet").into_response()
        }
        Err(Unanswerable::NoBook) => (StatusCode::NOT_FOUND, "no schedule book").into_response(),
    }
}

async fn list_handler(State(src): State<Src>, RawQuery(q): RawQuery) -> Response {
    respond(&src, parse_list(q.as_deref()).map(ScheduleQuery::List))
}

async fn describe_handler(State(src): State<Src>, RawQuery(q): RawQuery) -> Response {
    respond(
        &src,
        parse_describe(q.as_deref())
            .map(|(target, preview)| ScheduleQuery::Describe { target, preview }),
    )
}

async fn entry_handler(State(src): State<Src>, RawQuery(q): RawQuery) -> Response {
    respond(
        &src,
        parse_entry(q.as_deref()).map(|(component, position, preview)| {
            ScheduleQuery::DescribeEntry {
                component,
                position,
                preview,
            }
        }),
    )
}

async fn book_handler(State(src): State<Src>, RawQuery(q): RawQuery) -> Response {
    let q = match pairs(q.as_deref()) {
        Ok(p) if p.is_empty() => Ok(ScheduleQuery::Book),
        Ok(_) => Err("no parameters".into()),
        Err(e) => Err(e),
    };
    respond(&src, q)
}

async fn outbox_handler(State(src): State<Src>, RawQuery(q): RawQuery) -> Response {
    let q = match pairs(q.as_deref()) {
        Ok(p) if p.is_empty() => Ok(ScheduleQuery::Outbox),
        Ok(_) => Err("no parameters".into()),
        Err(e) => Err(e),
    };
    respond(&src, q)
}

/// The schedule read endpoint's router (see the module documentation).
pub fn schedule_router(source: Arc<dyn ScheduleSource>) -> Router {
    Router::new()
        .route(SCHEDULES_PATH, get(list_handler))
        .route(SCHEDULE_PATH, get(describe_handler))
        .route(ENTRY_PATH, get(entry_handler))
        .route(BOOK_PATH, get(book_handler))
        .route(OUTBOX_STATE_PATH, get(outbox_handler))
        .with_state(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_round_trip_and_are_parsed_strictly() {
        let f = ScheduleFilter {
            component: Some(3),
            owner: Some(Principal::Client(ClientId::from_index(9))),
            handler: Some("a b&c=d%".into()),
            topic: Some("billing".into()),
            paused: Some(true),
            parked: Some(false),
            after: 17,
            limit: 5,
            kind: Some(ListKind::Entry),
            entries_from: Some(EntryCursor {
                component: 4,
                position: 9,
            }),
        };
        assert_eq!(parse_list(Some(&list_query(&f))), Ok(f));
        for kind in [None, Some(ListKind::Book)] {
            let f = ScheduleFilter {
                kind,
                ..ScheduleFilter::default()
            };
            assert_eq!(parse_list(Some(&list_query(&f))), Ok(f));
        }
        // A filter of format 4's parameters renders none of format 5's (old nodes refuse
        // unknown parameters).
        assert_eq!(list_query(&ScheduleFilter::default()), "");
        assert_eq!(
            parse_entry(Some("component=3&position=7&preview=2")),
            Ok((3, 7, 2))
        );
        for bad in [
            "",
            "component=3",
            "position=7",
            "component=x&position=1",
            "component=1&position=2&z=1",
            "component=1&component=2&position=1",
        ] {
            assert!(parse_entry(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse_list(None), Ok(ScheduleFilter::default()));
        for t in [Target::Id(4), Target::Key("k/é?&=".into())] {
            assert_eq!(
                parse_describe(Some(&describe_query(&t, 3))),
                Ok((t.clone(), 3))
            );
        }
        for bad in [
            "owner=x",
            "paused=maybe",
            "limit=-1",
            "after=1&after=2",
            "evil=1",
            "handler",
            "handler=%zz",
            "handler=%ff",
            "kind=other",
            "entries_from=3",
            "entries_from=a:1",
        ] {
            assert!(parse_list(Some(bad)).is_err(), "{bad}");
        }
        assert!(parse_list(Some(&"a".repeat(MAX_QUERY_BYTES + 1))).is_err());
        for bad in ["", "id=1&key=a", "id=x", "preview=3", "id=1&z=2"] {
            assert!(parse_describe(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse_principal("host"), Ok(Principal::Host));
        let id = ClientId::from_index(5);
        for p in [
            Principal::Host,
            Principal::Client(id),
            Principal::LegacyClient(5),
        ] {
            assert_eq!(parse_principal(&principal_param(&p)), Ok(p));
        }
        assert_eq!(parse_principal(&id.to_string()), Ok(Principal::Client(id)));
        assert!(parse_principal("client:5").is_err(), "64-bit ids are gone");
        assert!(parse_principal("legacy:x").is_err());
    }
}
