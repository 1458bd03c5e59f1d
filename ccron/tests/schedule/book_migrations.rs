//! Every schedule book layout earlier releases wrote (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12) loads
//! and is migrated to layout 13 by the next save: crash-atomic at every page write, byte-identical on every
//! replica. The pages are fixtures the old code wrote (`fixtures/README.md`).

use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    BackfillOverlap, Handlers, Limits, OverlapState, RefusalCounters, RunCounters, ScheduleError,
    ScheduleRequest, Scheduler, Target,
};
use ccron::{ClientId, MemPages, PageRange, Principal, ReservedPages, Tick};

type Crashing = ccron::pages::CrashAfter<MemPages>;

fn fixture(name: &str) -> (MemPages, String) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let text = std::fs::read_to_string(format!("{dir}{name}.pages")).unwrap();
    let mut lines = text.lines();
    let head: Vec<usize> = lines
        .next()
        .unwrap()
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    let mut pages = MemPages::new(head[0], head[1] as u32);
    for line in lines {
        let (id, hex) = line.split_once(' ').unwrap();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        pages.save(id.parse().unwrap(), &bytes).unwrap();
    }
    let expect = std::fs::read_to_string(format!("{dir}{name}.expect")).unwrap();
    (pages, expect)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The book as the fixtures' `.expect` files print it (layout 6's with the run state, layout
/// 7's with the run counters, the manual runs and the book's totals).
fn describe(name: &str, book: &Scheduler) -> String {
    // Layout 13's refusal counters: none stored below it (they start at zero).
    assert_eq!(book.refusals(), RefusalCounters::default(), "{name}");
    if name.starts_with("book_v12") {
        return describe_v12(book);
    }
    for id in book.ids() {
        // Layout 12's backfill overlap policies: none below it (plain backfills).
        assert_eq!(
            book.get(id).unwrap().backfill_overlap,
            BackfillOverlap::default(),
            "{name}"
        );
    }
    if name.starts_with("book_v11") {
        return describe_v11(book);
    }
    for id in book.ids() {
        // Layout 11's exclusion calendars: none below it.
        assert_eq!(book.get(id).unwrap().calendar, None, "{name}");
    }
    assert_eq!(book.calendar_names().count(), 0, "{name}");
    if name.starts_with("book_v10") {
        return describe_v10(book);
    }
    if name.starts_with("book_v9") {
        return describe_v9(book);
    }
    for id in book.ids() {
        // Layout 9's overlap state starts empty: `AllowAll`, nothing awaited or buffered.
        assert_eq!(
            book.get(id).unwrap().overlap,
            OverlapState::default(),
            "{name}"
        );
    }
    if name.starts_with("book_v8") {
        return describe_v8(book);
    }
    let v7 = name.starts_with("book_v7");
    let run_state = name.starts_with("book_v6") || v7;
    let mut out = String::new();
    for id in book.ids().collect::<Vec<_>>() {
        let i = book.get(id).unwrap();
        let s = &i.schedule;
        out += &format!(
            "{id}|{:?}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{}|{:?}|{}|{:?}|{:?}|{}",
            s.key,
            s.handler,
            s.timing,
            s.misfire,
            s.priority,
            s.jitter_ms,
            hex(&s.payload),
            s.topic,
            s.kind,
            i.paused,
            i.next,
            i.runs,
            i.owed,
            Legacy(i.owner),
            i.version
        );
        if run_state {
            out += &format!(
                "|{}|{:?}|{:?}|{:?}|{}|{:?}",
                i.parked, i.policy, i.retry, i.dead, i.dead_evicted, i.history
            );
        } else {
            // The run state starts empty.
            assert!(!i.parked && i.retry.is_none() && i.dead.is_empty() && i.history.is_empty());
        }
        // Layout 8's bounds start empty, nothing retired.
        assert!(i.bounds.is_none() && i.retired.is_none() && i.counters.retired == 0);
        if v7 {
            out += &format!("|{}|{:?}\n", counters(&i.counters), i.manual);
        } else {
            // Layout 7's counters start at zero.
            assert_eq!(i.counters, RunCounters::default());
            out += "\n";
        }
    }
    if v7 {
        assert_eq!(book.totals().retired, 0);
        out += &format!("totals|{}\n", counters(&book.totals()));
    } else {
        assert_eq!(book.totals(), RunCounters::default());
    }
    out
}

/// Layout 7's counters as its code printed them (`Debug` before `retired` was added).
fn counters(c: &RunCounters) -> String {
    format!(
        "RunCounters {{ fired: {}, failed: {}, late: {}, skipped: {}, expired: {} }}",
        c.fired, c.failed, c.late, c.skipped, c.expired
    )
}

fn limits() -> Limits {
    Limits {
        budget_per_tick: 1,
        ..Limits::default()
    }
}

fn range() -> PageRange {
    PageRange::new(0, 64).unwrap()
}

fn load(pages: &MemPages) -> Result<Scheduler, ScheduleError> {
    Scheduler::load(7, limits(), pages, range())
}

const FIXTURES: [&str; 23] = [
    "book_v2",
    "book_v2_crashed",
    "book_v3",
    "book_v3_crashed",
    "book_v4",
    "book_v4_crashed",
    "book_v4_big",
    "book_v5",
    "book_v5_full_log",
    "book_v6",
    "book_v6_stale",
    "book_v6_full_log",
    "book_v7",
    "book_v7_stale",
    "book_v7_full_log",
    "book_v8",
    "book_v8_stale",
    "book_v8_full_log",
    "book_v9",
    "book_v9_full_log",
    "book_v10",
    "book_v11",
    "book_v12",
];

/// Each older layout loads as what the old code held (a journal in force replayed), and its
/// next save migrates it: a crash at any page write of that save reloads as the same book
/// (old layout or new), and re-saving after the crash writes the pages a replica that never
/// crashed wrote; two replicas migrate to identical pages; the migrated book reloads equal.
#[test]
fn every_older_layout_loads_and_migrates_crash_atomically() {
    for name in FIXTURES {
        let (pages, expect) = fixture(name);
        let book = load(&pages).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(describe(name, &book), expect, "{name}: loaded");
        assert!(book.migrating() && book.is_dirty(), "{name}");
        book.check_invariants().unwrap();
        // The migration, uncrashed, on two replicas.
        let migrate = || {
            let mut b = load(&pages).unwrap();
            let mut counting = Crashing::new(pages.clone(), usize::MAX);
            b.save(&mut counting, range()).unwrap();
            assert!(!b.migrating());
            (b, counting)
        };
        let (a, wa) = migrate();
        let (_, wb) = migrate();
        assert!(
            wa.inner.snapshot() == wb.inner.snapshot(),
            "{name}: replicas migrate to different pages"
        );
        if name.ends_with("_full_log") {
            // No room past the old log: the old layout's log is folded first, in its format.
            let records_first = range().end() - ccron::schedule::record_pages_of(range());
            assert!(
                wa.writes.iter().any(|id| *id >= records_first),
                "{name}: the old log folded first"
            );
        }
        let migrated = load(&wa.inner).unwrap();
        assert!(!migrated.migrating(), "{name}: layout 13 now");
        assert_eq!(describe(name, &migrated), expect, "{name}: migrated");
        assert!(migrated == a);
        // A crash after each page write of the migration.
        for k in 0..wa.writes.len() {
            let mut b = load(&pages).unwrap();
            let mut crashed = Crashing::new(pages.clone(), k);
            assert!(b.save(&mut crashed, range()).is_err(), "{name}: k = {k}");
            let mut after = crashed.inner;
            let mut again =
                load(&after).unwrap_or_else(|e| panic!("{name}: crash after {k} writes: {e}"));
            assert_eq!(
                describe(name, &again),
                expect,
                "{name}: crash after {k} writes"
            );
            // The host re-saves what it had not saved.
            again.save(&mut after, range()).unwrap();
            assert!(
                after.snapshot() == wa.inner.snapshot(),
                "{name}: k = {k}: pages differ from a replica that never crashed"
            );
        }
    }
}

/// After the migration the book works on: ticks run its schedules, saves fill the log until a
/// fold rewrites the (stale) record pages, and every reload equals the book in memory.
#[test]
fn a_migrated_book_runs_saves_and_folds_on() {
    for name in FIXTURES {
        let (pages, _) = fixture(name);
        let mut pages = pages;
        let mut book = load(&pages).unwrap();
        book.save(&mut pages, range()).unwrap();
        let mut h: Handlers<u64> = Handlers::new();
        h.register("expire", |ctx| *ctx.state += 1);
        h.register("report", |ctx| *ctx.state += 1);
        h.register("flaky", |ctx| *ctx.state += 1);
        let records_first = range().end() - ccron::schedule::record_pages_of(range());
        let mut folded = false;
        let mut ran = 0u64;
        for k in 0..200u64 {
            let mut outbox = Outbox::new(OutboxLimits::default());
            book.on_tick(
                &Tick::new(7, 100 + k, Some(3_600 + 5_000 * k as i64)),
                &mut ran,
                &mut h,
                &mut outbox,
            );
            let target = book.ids().next().unwrap_or(1);
            let req = if k % 2 == 0 {
                ScheduleRequest::Pause(Target::Id(target))
            } else {
                ScheduleRequest::Resume(Target::Id(target))
            };
            let _ = book.apply(&Principal::Host, req, &h, 100 + k, Some(0));
            let mut counting = Crashing::new(pages, usize::MAX);
            book.save(&mut counting, range()).unwrap();
            folded |= counting.writes.iter().any(|id| *id >= records_first);
            pages = counting.inner;
            let reloaded = load(&pages).unwrap_or_else(|e| panic!("{name}: save {k}: {e}"));
            assert!(reloaded == book, "{name}: save {k}");
            if folded && k > 10 {
                break;
            }
        }
        assert!(folded, "{name}: the log folded into the record pages");
        assert!(ran > 0, "{name}: schedules ran");
    }
}

/// A layout 8 book as the `book_v8*` fixtures' `.expect` files print it: layout 7's line with
/// the bounds, the retired state and the retirements counted, then the book's totals.
fn describe_v8(book: &Scheduler) -> String {
    describe_v8_owners(book, |o| format!("{:?}", Legacy(o)))
}

/// [`describe_v8`] with owners printed by `owner`.
fn describe_v8_owners(book: &Scheduler, owner: impl Fn(Principal) -> String) -> String {
    let mut out = String::new();
    for id in book.ids().collect::<Vec<_>>() {
        let i = book.get(id).unwrap();
        let s = &i.schedule;
        out += &format!(
            "{id}|{:?}|{}|{:?}|{:?}|{}|{}|{}|{:?}|{:?}|{}|{:?}|{}|{:?}|{}|{}",
            s.key,
            s.handler,
            s.timing,
            s.misfire,
            s.priority,
            s.jitter_ms,
            hex(&s.payload),
            s.topic,
            s.kind,
            i.paused,
            i.next,
            i.runs,
            i.owed,
            owner(i.owner),
            i.version
        );
        out += &format!(
            "|{}|{:?}|{:?}|{:?}|{}|{:?}",
            i.parked, i.policy, i.retry, i.dead, i.dead_evicted, i.history
        );
        out += &format!(
            "|{}|retired {}|{:?}|{:?}|{:?}\n",
            counters(&i.counters),
            i.counters.retired,
            i.manual,
            i.bounds,
            i.retired
        );
    }
    let t = book.totals();
    out += &format!("totals|{}|retired {}\n", counters(&t), t.retired);
    out
}

/// A layout 9 book as the `book_v9*` fixtures' `.expect` files print it: layout 8's line with
/// the overlap state (policy, awaited run, buffered occurrences, counts) appended.
fn describe_v9(book: &Scheduler) -> String {
    describe_v9_from(book, describe_v8(book))
}

/// A layout 10 book as the `book_v10*` fixtures' `.expect` files print it: layout 9's line
/// with every owner printed as it is (`LegacyClient(n)`, `Client(hex)`, `Host`).
fn describe_v10(book: &Scheduler) -> String {
    describe_v9_from(book, describe_v8_owners(book, |o| format!("{o:?}")))
}

/// Layout 8's lines `v8` of `book` with the overlap state appended.
fn describe_v9_from(book: &Scheduler, v8: String) -> String {
    let mut out = String::new();
    let mut ids = book.ids();
    for line in v8.lines() {
        if line.starts_with("totals|") {
            out += line;
        } else {
            let id = ids.next().unwrap();
            out += &format!("{line}|{:?}", book.get(id).unwrap().overlap);
        }
        out += "\n";
    }
    out
}

/// A legacy owner of the `book_v9` fixture (client 5 of main's 64-bit ids, owner of the
/// schedules keyed `v9-skip` and `v9-one`) is claimed by a 256-bit id starting with it: it may
/// pause its schedule, which is then re-owned to the full id (and its quota usage with it);
/// an id equal in 7 of the 8 bytes, or another client, may not.
#[test]
fn a_legacy_owner_of_layout_9_is_claimed_by_its_prefix_and_reowned() {
    let (pages, _) = fixture("book_v9");
    let mut book = load(&pages).unwrap();
    let h: Handlers<u64> = Handlers::new();
    let id_of = |book: &Scheduler, key: &str| {
        book.ids()
            .find(|id| book.get(*id).unwrap().schedule.key.as_deref() == Some(key))
            .unwrap()
    };
    let (skip, one) = (id_of(&book, "v9-skip"), id_of(&book, "v9-one"));
    assert_eq!(book.get(skip).unwrap().owner, Principal::LegacyClient(5));
    let full = {
        let mut b = [0x5a; 32];
        b[..8].copy_from_slice(&5u64.to_le_bytes());
        ClientId(b)
    };
    let mut near = full;
    near.0[7] ^= 0x80;
    let pause = |t| ScheduleRequest::Pause(Target::Id(t));
    for stranger in [near, ClientId::from_index(5)] {
        assert!(matches!(
            book.apply(&Principal::Client(stranger), pause(skip), &h, 900, Some(0)),
            Err(ScheduleError::Unauthorized { .. })
        ));
    }
    assert_eq!(
        book.apply(&Principal::Client(full), pause(skip), &h, 901, Some(0)),
        Ok(Some(skip))
    );
    assert_eq!(book.get(skip).unwrap().owner, Principal::Client(full));
    assert!(book.get(skip).unwrap().paused);
    // The other schedule of the same legacy owner stays legacy until its own change.
    assert_eq!(book.get(one).unwrap().owner, Principal::LegacyClient(5));
    book.check_invariants().unwrap();
    // Saved as layout 10 and reloaded: the full owner persists.
    let mut pages = pages;
    book.save(&mut pages, range()).unwrap();
    let again = load(&pages).unwrap();
    assert!(!again.migrating());
    assert_eq!(again.get(skip).unwrap().owner, Principal::Client(full));
    assert_eq!(again.get(one).unwrap().owner, Principal::LegacyClient(5));
}

/// An owner as the fixtures' `.expect` files print it: the old code printed a 64-bit client
/// owner as `Client(n)`; migrated, it is the legacy owner `LegacyClient(n)` (asserted here:
/// no other client form can come out of an old layout).
struct Legacy(Principal);

impl std::fmt::Debug for Legacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Principal::LegacyClient(n) => write!(f, "Client({n})"),
            Principal::Host => write!(f, "Host"),
            Principal::Client(id) => panic!("an old layout's owner read as a 256-bit id {id}"),
        }
    }
}

/// The `book_v10` fixture (written by layout 10's code, `fixtures/README.md`) migrated to
/// layout 11: its zoned cron schedule (256-bit owner, overlap `BufferOne`, an end bound, a
/// pending trigger) takes an exclusion calendar; saved, reloaded, it keeps it, and the rest of
/// the book is as layout 10 held it.
#[test]
fn a_layout_10_book_takes_exclusion_calendars_once_migrated() {
    use ccron::cron::{Exclusion, ExclusionCalendar};
    let (mut pages, expect) = fixture("book_v10");
    let mut book = load(&pages).unwrap();
    assert!(book.migrating());
    book.save(&mut pages, range()).unwrap();
    let h: Handlers<u64> = Handlers::new();
    let id = book.id_of("v10-cron").unwrap();
    let owner = book.get(id).unwrap().owner;
    assert_eq!(owner, Principal::Client(ClientId([0xa1; 32])));
    let cal = ExclusionCalendar::new("ny", vec![Exclusion::Annual { month: 7, day: 4 }]).unwrap();
    book.apply(
        &Principal::Host,
        ScheduleRequest::InstallCalendar(cal.clone()),
        &h,
        900,
        Some(200_000),
    )
    .unwrap();
    let set = ScheduleRequest::SetCalendar {
        target: Target::Id(id),
        calendar: Some("ny".into()),
    };
    book.apply(&owner, set, &h, 901, Some(200_000)).unwrap();
    book.save(&mut pages, range()).unwrap();
    let again = load(&pages).unwrap();
    assert!(again == book && !again.migrating());
    assert_eq!(again.get(id).unwrap().calendar.as_deref(), Some("ny"));
    assert_eq!(again.calendar("ny"), Some(&cal));
    again.check_invariants().unwrap();
    // Everything else as layout 10 held it, but the schedule's version (one SetCalendar).
    let mut back = again.clone();
    let clear = ScheduleRequest::SetCalendar {
        target: Target::Id(id),
        calendar: None,
    };
    back.apply(&owner, clear, &h, 902, Some(200_000)).unwrap();
    let text = describe_v10(&back);
    let v = back.get(id).unwrap().version;
    let line = |t: &str, v: u64| {
        t.lines()
            .find(|l| l.starts_with(&format!("{id}|")))
            .unwrap()
            .replace(&format!("|{v}|false|"), "|V|false|")
    };
    assert_eq!(line(&text, v), line(&expect, v - 2));
    for (got, want) in text.lines().zip(expect.lines()) {
        if !got.starts_with(&format!("{id}|")) {
            assert_eq!(got, want);
        }
    }
}

/// A layout 11 book as the `book_v11*` fixtures' `.expect` files print it: layout 10's line
/// with the exclusion calendar it names appended, then a line per installed calendar (its
/// name and exclusions).
fn describe_v11(book: &Scheduler) -> String {
    let mut out = String::new();
    let mut ids = book.ids();
    for line in describe_v10(book).lines() {
        if line.starts_with("totals|") {
            out += line;
        } else {
            let id = ids.next().unwrap();
            out += &format!("{line}|{:?}", book.get(id).unwrap().calendar);
        }
        out += "\n";
    }
    for name in book.calendar_names() {
        let c = book.calendar(name).unwrap();
        out += &format!("calendar|{name}|{:?}\n", c.exclusions());
    }
    out
}

/// The `book_v11` fixture (written by layout 11's code, `fixtures/README.md`) migrated to
/// layout 12: its periodic schedule takes a backfill under its own overlap policy, whose run
/// awaits its result; saved, reloaded, the state is kept (and the calendars of layout 11 with
/// it), and the rest of the book is as layout 11 held it.
#[test]
fn a_layout_11_book_takes_backfill_overlap_once_migrated() {
    use ccron::schedule::{Overlap, manual_occurrence};
    let (mut pages, expect) = fixture("book_v11");
    let mut book = load(&pages).unwrap();
    assert!(book.migrating());
    assert_eq!(describe_v11(&book), expect);
    book.save(&mut pages, range()).unwrap();
    let mut h: Handlers<u64> = Handlers::new();
    for name in ["expire", "report", "notify", "flaky"] {
        h.register(name, |ctx| {
            ctx.emit("v12", b"v12".to_vec()).unwrap();
        });
    }
    let id = book.id_of("v10-every").unwrap();
    let owner = book.get(id).unwrap().owner;
    let mut outbox = Outbox::new(OutboxLimits {
        max_records: 1 << 16,
        max_total_bytes: 1 << 26,
        ..OutboxLimits::default()
    });
    let (mut now, mut seq) = (400_000, 900);
    // The fixture's pending backfill runs out first (plain: nothing awaited).
    while book.get(id).unwrap().manual.backfill.is_some() {
        assert!(seq < 2_000, "the backfill ran out");
        (now, seq) = (now + 1, seq + 1);
        book.on_tick(
            &Tick::new(7, seq, Some(now)),
            &mut 0u64,
            &mut h,
            &mut outbox,
        );
    }
    assert_eq!(
        book.get(id).unwrap().backfill_overlap,
        BackfillOverlap::default()
    );
    let req = ScheduleRequest::BackfillWith {
        target: Target::Id(id),
        from_ms: 60_000,
        to_ms: 100_000,
        overlap: Overlap::BufferAll,
    };
    book.apply(&owner, req, &h, seq, Some(now)).unwrap();
    while book.get(id).unwrap().backfill_overlap.awaiting.is_none() {
        assert!(seq < 3_000, "the backfill ran");
        (now, seq) = (now + 1, seq + 1);
        book.on_tick(
            &Tick::new(7, seq, Some(now)),
            &mut 0u64,
            &mut h,
            &mut outbox,
        );
    }
    let awaited = BackfillOverlap {
        policy: Overlap::BufferAll,
        awaiting: Some((manual_occurrence(60_000, false), 1)),
    };
    assert_eq!(book.get(id).unwrap().backfill_overlap, awaited);
    book.save(&mut pages, range()).unwrap();
    let again = load(&pages).unwrap();
    assert!(again == book && !again.migrating());
    assert_eq!(again.get(id).unwrap().backfill_overlap, awaited);
    assert_eq!(again.calendar_names().collect::<Vec<_>>(), vec!["hol"]);
    again.check_invariants().unwrap();
    // Its other occurrences wait for that result (BufferAll).
    let m = again.get(id).unwrap().manual;
    assert_eq!((m.backfill, m.backfill_left), (Some((80_000, 100_000)), 2));
}

/// A layout 12 book as the `book_v12*` fixtures' `.expect` files print it: layout 11's line
/// with the overlap policy of the record's backfills (and the backfill run it awaits)
/// appended; the totals and calendar lines as layout 11's.
fn describe_v12(book: &Scheduler) -> String {
    let mut out = String::new();
    let mut ids = book.ids();
    for line in describe_v11(book).lines() {
        if line.starts_with("totals|") || line.starts_with("calendar|") {
            out += line;
        } else {
            let id = ids.next().unwrap();
            out += &format!("{line}|{:?}", book.get(id).unwrap().backfill_overlap);
        }
        out += "\n";
    }
    out
}

/// The `book_v12` fixture (written by layout 12's code, `fixtures/README.md`) migrated to
/// layout 13: the refusals layout 12 counted per process (one calendar, two backfills before
/// the fixture's last save) are not in its pages, so the migrated book starts them at zero;
/// refusals from then on are saved with the commit page and survive a reload. A flipped
/// byte of its commit page is refused loudly (a codec error), as any layout's.
#[test]
fn a_layout_12_book_counts_refusals_once_migrated() {
    let (mut pages, expect) = fixture("book_v12");
    let mut flipped = pages.clone();
    let mut commit = flipped.load(0).unwrap().unwrap().to_vec();
    let last = commit.len() - 1;
    commit[last] ^= 0x01;
    flipped.save(0, &commit).unwrap();
    assert!(matches!(load(&flipped), Err(ScheduleError::Codec(_))));
    let mut book = load(&pages).unwrap();
    assert!(book.migrating());
    assert_eq!(describe_v12(&book), expect);
    assert_eq!(book.refusals(), RefusalCounters::default());
    book.save(&mut pages, range()).unwrap();
    let h: Handlers<u64> = Handlers::new();
    let cron = book.id_of("v10-cron").unwrap();
    let one = book.id_of("v10-one").unwrap();
    for req in [
        ScheduleRequest::SetCalendar {
            target: Target::Id(cron),
            calendar: Some("none".into()),
        },
        ScheduleRequest::Backfill {
            target: Target::Id(one),
            from_ms: 0,
            to_ms: 1_000,
        },
    ] {
        assert!(
            book.apply(&Principal::Host, req, &h, 2_000, Some(500_000))
                .is_err()
        );
    }
    let counted = RefusalCounters {
        slot_full: 0,
        calendar: 1,
        backfill: 1,
    };
    assert_eq!(book.refusals(), counted);
    book.save(&mut pages, range()).unwrap();
    let again = load(&pages).unwrap();
    assert!(!again.migrating());
    assert_eq!(again.refusals(), counted);
    assert!(again == book);
    // Refusals change nothing else: the book is the fixture's.
    assert_eq!(describe_v12(&again), expect);
    again.check_invariants().unwrap();
}
