//! Tests of [`CronLedger`](super::CronLedger): replicated counts, snapshot forms and their
//! fixtures, cancellations, fail-stop on a failed save, the digest stream.

use super::*;
use crate::outbox::EmitBudget;
use crate::schedule::Overlap;
use crate::{CronEntry, CronTable, PageAllocator, Periodic};

/// A minimal ledger state: counts its requests.
#[derive(Debug, Default)]
pub(crate) struct KvLedger(u64);

impl KvLedger {
    pub(crate) fn new() -> Self {
        Self(0)
    }
}

impl Application for KvLedger {
    fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
        self.0 += 1;
        Vec::new()
    }
    fn digest(&self) -> Digest32 {
        crate::sha256::Sha256::digest(self.0.to_le_bytes()).into()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        let b = <[u8; 8]>::try_from(snapshot).map_err(|e| AppError::BadSnapshot(e.to_string()))?;
        self.0 = u64::from_le_bytes(b);
        Ok(())
    }
}

/// A ledger whose one table (component 1) persists its periodic schedule (every 1 s) in
/// pages 0..2.
pub(crate) fn ledger() -> CronLedger<KvLedger> {
    let mut registry = CronTableRegistry::new();
    let range = PageAllocator::new(0, 2).allocate(2).unwrap();
    let mut table = CronTable::with_persistence(1, range, 4);
    table
        .add(CronEntry::<KvLedger>::periodic(
            0,
            Periodic::every_ms(1_000).unwrap(),
            |_| {},
        ))
        .unwrap();
    registry.register(table).unwrap();
    CronLedger::new(KvLedger::new(), registry)
}

/// A ledger with the table of [`ledger`] (component 1) and a book on component 2 (one
/// schedule every second, created by client 5): the fixture's kind of ledger.
fn book_ledger() -> CronLedger<KvLedger> {
    let cfg = crate::host::BookConfig {
        component: 2,
        position: 0,
        limits: crate::schedule::Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    };
    let mut h: crate::schedule::Handlers<KvLedger> = crate::schedule::Handlers::new();
    assert!(h.register("job", |ctx| ctx.state.0 += 10));
    ledger().with_scheduler(LedgerScheduler::new(cfg, h))
}

/// Drives `l` as the fixture was driven: the schedule created, then ticks of both
/// components at 1 s .. 3 s (and a request of the state).
fn drive(l: &mut CronLedger<KvLedger>) {
    let mut pages = MemPages::new(4_096, 2);
    if l.scheduler.is_some() {
        let create = crate::codec::to_blob(&crate::schedule::ScheduleRequest::Create(
            crate::schedule::NewSchedule::new(
                "job",
                crate::schedule::Timing::Every {
                    period_ms: 1_000,
                    start_ms: Some(1_000),
                },
            ),
        ))
        .unwrap();
        let ctx = ExecContext {
            seq: 1,
            agreed_time_ms: Some(0),
        };
        assert!(
            l.execute(ctx, ClientId([5; 32]), &create)
                .starts_with(b"ok")
        );
    }
    for (seq, t) in [(2u64, 1_000i64), (3, 2_000), (4, 3_000)] {
        l.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
        if l.scheduler.is_some() {
            l.on_tick(Tick::new(2, seq, Some(t)), &mut pages).unwrap();
        }
    }
    let ctx = ExecContext {
        seq: 5,
        agreed_time_ms: Some(3_500),
    };
    l.execute(ctx, ClientId([6; 32]), b"kv");
}

/// A ledger with a book on component 1 (position 9: the outbox its entries emit into) and
/// a table on component 1 whose entry 0 emits a record every second under `overlap`.
fn overlap_ledger(overlap: Overlap) -> CronLedger<KvLedger> {
    emitting_ledger(overlap, 1, EmitBudget::new(1, 128), None)
}

/// A ledger whose one table entry (component 1, every 1 s, under `overlap`) emits `records`
/// records per run within `budget`, beside a book (component 1, position 9) whose outbox it
/// shares, taking results from `consumer` when given.
fn emitting_ledger(
    overlap: Overlap,
    records: usize,
    budget: EmitBudget,
    consumer: Option<ClientId>,
) -> CronLedger<KvLedger> {
    let mut registry = CronTableRegistry::new();
    let range = PageAllocator::new(0, 2).allocate(2).unwrap();
    let mut table = CronTable::with_persistence(1, range, 4);
    let entry =
        CronEntry::<KvLedger>::periodic(0, Periodic::every_ms(1_000).unwrap(), move |ctx| {
            for _ in 0..records {
                let _ = ctx.emit("ping", b"p".to_vec());
            }
        });
    table.add(entry.with_overlap(overlap).unwrap()).unwrap();
    registry.register(table).unwrap();
    let cfg = crate::host::BookConfig {
        component: 1,
        position: 9,
        limits: crate::schedule::Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    };
    let mut book = LedgerScheduler::new(cfg, crate::schedule::Handlers::new());
    if let Some(c) = consumer {
        book = book.with_policy(crate::Policy::default().with_outbox_consumer(c));
    }
    CronLedger::new(KvLedger::new(), registry)
        .with_scheduler(book)
        .with_table_emits(1, budget)
}

/// Ticks of component 1 at 1 s, 2 s and 3 s: the first run's record never gets a result.
fn tick_three(l: &mut CronLedger<KvLedger>) {
    let mut pages = MemPages::new(4_096, 2);
    for (seq, t) in [(1u64, 1_000i64), (2, 2_000), (3, 3_000)] {
        l.on_tick(Tick::new(1, seq, Some(t)), &mut pages).unwrap();
    }
}

/// Issue 27: a table entry's overlap skips and holds are replicated counts of the ledger,
/// next to its fire count: the numbers the table counts per process, in the read API, in
/// the digest, and carried by the snapshot (counted form) into a restored replica.
#[test]
fn overlap_skips_and_holds_are_replicated_and_survive_a_snapshot() {
    for (overlap, skipped, held) in [(Overlap::Skip, 2, 0), (Overlap::BufferOne, 0, 2)] {
        let mut l = overlap_ledger(overlap);
        tick_three(&mut l);
        let want = EntryCounts {
            fired: 1,
            overlap: EntryOverlapCounts { skipped, held },
        };
        assert_eq!(l.entry_counts().get(&(1, 0)), Some(&want), "{overlap:?}");
        assert_eq!(l.fires().get(&(1, 0)), Some(&1));
        // What the table counted in this process (which never restarted).
        let pc = l.registry().get(1).unwrap().policy_counters();
        assert_eq!((pc.skipped, pc.held), (skipped, held), "{overlap:?}");
        let entries = l.table_entries().unwrap();
        assert_eq!(entries.summaries()[0].overlap_counts, Some(want.overlap));
        assert_eq!(entries.summaries()[0].fired, 1);
        let snap = l.snapshot();
        assert_eq!(snap[..8], COUNTED_SNAPSHOT_MAGIC.to_le_bytes());
        // State transfer: a fresh replica restored from it holds the same counts.
        let mut r = overlap_ledger(overlap);
        r.restore(&snap).unwrap();
        assert_eq!(r.entry_counts(), l.entry_counts());
        assert_eq!(r.digest(), l.digest());
        assert_eq!(r.snapshot(), snap);
        // The counts are digested: the same ledger without them digests otherwise, and
        // snapshots in the old form.
        let mut uncounted = overlap_ledger(overlap);
        uncounted.restore(&snap).unwrap();
        uncounted.counts.get_mut(&(1, 0)).unwrap().overlap = EntryOverlapCounts::default();
        assert_ne!(uncounted.digest(), l.digest(), "{overlap:?}");
        assert_ne!(
            uncounted.snapshot()[..8],
            COUNTED_SNAPSHOT_MAGIC.to_le_bytes()
        );
    }
}

/// A counted snapshot whose body or checksum was altered, of another version, or cut
/// short, is refused loudly (`BadSnapshot`) and changes nothing.
#[test]
fn a_damaged_counted_snapshot_is_refused_and_changes_nothing() {
    let mut l = overlap_ledger(Overlap::Skip);
    tick_three(&mut l);
    let snap = l.snapshot();
    let fresh = overlap_ledger(Overlap::Skip).digest();
    let refused = |bytes: &[u8], what: &str| {
        let mut r = overlap_ledger(Overlap::Skip);
        let e = r.restore(bytes).unwrap_err();
        assert!(
            matches!(&e, AppError::BadSnapshot(m) if m.contains(what)),
            "{what}: {e:?}"
        );
        assert_eq!(r.digest(), fresh, "{what}: nothing changed");
        assert!(r.entry_counts().is_empty());
    };
    // Magic (8), version (4), body length (8), body, checksum (32).
    let n = snap.len();
    for at in [20, n / 2, n - 33, n - 1] {
        let mut bad = snap.clone();
        bad[at] ^= 0x10;
        refused(&bad, "checksum mismatch");
    }
    let (magic, _, body, sum): CountedFile = codec::decode(&snap, n).unwrap();
    let other = codec::encode(&(magic, CANCELS_SNAPSHOT_VERSION + 1, body, sum)).unwrap();
    refused(&other, "version 4");
    refused(&snap[..n - 1], "counted ledger snapshot");
    // A counted snapshot of a ledger with a book, into one without.
    let mut bookless = ledger();
    let e = bookless.restore(&snap).unwrap_err();
    assert!(
        matches!(&e, AppError::BadSnapshot(m) if m.contains("book")),
        "{e:?}"
    );
}

/// Hex of `b`.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Snapshots of [`ledger`] and [`book_ledger`] driven by [`drive`], written by the code of
/// `e056996` (before the overlap counts), and their digests then.
const V1_TABLE: &str = include_str!("../../../tests/fixtures/ledger_v1_table.snapshot.hex");
const V1_BOOK: &str = include_str!("../../../tests/fixtures/ledger_v1_book.snapshot.hex");
const V1_TABLE_DIGEST: &str = "1a759caa2396efd4e0d85c0c30d869d13730ecec1f4202c5b67be1645d19572a";
const V1_BOOK_DIGEST: &str = "0dd8cbab80f13f8b062817782ef2d33364b28f94a7471c0662432cbb307d18c6";

/// Persisted bytes are forever: a snapshot in the form before the overlap counts restores
/// to the digest it had, with zero overlap counts, and a ledger nothing diverted still
/// writes exactly those bytes and that digest (so no pinned digest moves).
#[test]
fn snapshots_written_before_the_overlap_counts_restore() {
    let cases = [
        (V1_TABLE, ledger(), ledger(), V1_TABLE_DIGEST, 1usize),
        (V1_BOOK, book_ledger(), book_ledger(), V1_BOOK_DIGEST, 2),
    ];
    for (fixture, mut restored, mut driven, digest, fired) in cases {
        let bytes = unhex(fixture);
        restored.restore(&bytes).unwrap();
        assert_eq!(hex(&restored.digest()), digest);
        assert_eq!(restored.fires().len(), fired);
        assert!(restored.fires().values().all(|&n| n == 3));
        assert!(
            restored
                .entry_counts()
                .values()
                .all(|c| c.overlap == EntryOverlapCounts::default())
        );
        assert_eq!(restored.snapshot(), bytes, "written back in the same form");
        drive(&mut driven);
        assert_eq!(hex(&driven.digest()), digest);
        assert_eq!(driven.snapshot(), bytes);
    }
}

/// A counted snapshot (version 2, skips and holds) of [`overlap_ledger`] (`Skip`) driven
/// by [`tick_three`], written by the code of `88094a8` (before table entries' cancellations),
/// and the digests then of that ledger and of the `BufferOne` one driven alike.
const V2_COUNTED: &str = include_str!("../../../tests/fixtures/ledger_v2_counted.snapshot.hex");
const V2_SKIP_DIGEST: &str = "be237e0425ca61d7fbb46752a7119a0496743197b9c58e615950d6a196939b4e";
const V2_BUFFER_ONE_DIGEST: &str =
    "53ca9b2321caf657049cb0f17fa0848245c0b7b4c44c927c7f1f2c44c2d63e73";

/// Persisted bytes are forever: a counted snapshot written before the cancellations
/// restores to the digest it had, with no cancellation, and is written back byte for byte;
/// ledgers whose entries skip or hold (and never cancel) still digest as they did.
#[test]
fn counted_snapshots_written_before_the_cancellations_restore() {
    let bytes = unhex(V2_COUNTED);
    let mut restored = overlap_ledger(Overlap::Skip);
    restored.restore(&bytes).unwrap();
    assert_eq!(hex(&restored.digest()), V2_SKIP_DIGEST);
    assert!(restored.entry_cancels().is_empty());
    assert_eq!(
        restored
            .entry_counts()
            .get(&(1, 0))
            .map(|c| c.overlap.skipped),
        Some(2)
    );
    assert_eq!(restored.snapshot(), bytes, "written back in the same form");
    for (overlap, digest) in [
        (Overlap::Skip, V2_SKIP_DIGEST),
        (Overlap::BufferOne, V2_BUFFER_ONE_DIGEST),
    ] {
        let mut driven = overlap_ledger(overlap);
        tick_three(&mut driven);
        assert_eq!(hex(&driven.digest()), digest, "{overlap:?}");
        if overlap == Overlap::Skip {
            assert_eq!(driven.snapshot(), bytes);
        }
    }
}

const CONSUMER: super::super::app::ClientId = super::super::app::ClientId([42; 32]);

/// [`overlap_ledger`] under `CancelOther`, whose book takes results from [`CONSUMER`]; the
/// entry emits `records` records per run.
fn cancel_ledger(records: usize) -> CronLedger<KvLedger> {
    emitting_ledger(
        Overlap::CancelOther,
        records,
        EmitBudget::new(4, 512),
        Some(CONSUMER),
    )
}

/// The consumer's dead letter for outbox record `index`, through consensus.
fn answer(l: &mut CronLedger<KvLedger>, seq: u64, index: u64) -> Vec<u8> {
    let id = l.outbox().unwrap().get(index).unwrap().id;
    let p = crate::outbox::OutboxResult::dead_letter(index, id, "done")
        .to_payload()
        .unwrap();
    let ctx = ExecContext {
        seq,
        agreed_time_ms: Some(0),
    };
    l.execute(ctx, CONSUMER, &p)
}

fn awaiting(l: &CronLedger<KvLedger>) -> bool {
    l.table_entries().unwrap().summaries()[0].awaiting
}

/// Regression (issue 27, `CancelOther` on table entries): through the ledger, a cancelled
/// run's late result is applied but neither releases the run that cancelled it nor, after
/// that run's own results, makes the entry await again; the cancellations are replicated
/// (digest, snapshot form version 3, restored equal).
#[test]
fn a_cancelled_table_runs_late_result_neither_releases_nor_reopens() {
    let mut l = cancel_ledger(1);
    let mut pages = MemPages::new(4_096, 2);
    let f = l.outbox().unwrap().next_index();
    let mut tick = |l: &mut CronLedger<KvLedger>, seq: u64| {
        l.on_tick(Tick::new(1, seq, Some(seq as i64 * 1_000)), &mut pages)
            .unwrap();
    };
    // Run A (record f), then run B cancels it (record f + 1).
    tick(&mut l, 1);
    let plain = l.digest();
    tick(&mut l, 2);
    let cancels = |l: &CronLedger<KvLedger>| l.entry_cancels().get(1, 0);
    assert_eq!(
        cancels(&l),
        Some(EntryCancels {
            cancelled: 1,
            mark: f + 1
        })
    );
    assert!(awaiting(&l));
    // A's late result: applied, B still awaited.
    assert!(answer(&mut l, 10, f).starts_with(b"ok result applied"));
    assert_eq!(l.late_cancelled_results(), 1);
    assert!(
        awaiting(&l),
        "a cancelled run's result does not release the new run"
    );
    // So run C cancels B (record f + 2) rather than running unannounced.
    tick(&mut l, 3);
    assert_eq!(cancels(&l).map(|c| (c.cancelled, c.mark)), Some((2, f + 2)));
    // C's result: nothing awaited, though B's record has none; B's late result then
    // reopens nothing, and run D runs with nothing to cancel.
    assert!(answer(&mut l, 11, f + 2).starts_with(b"ok result applied"));
    assert!(!awaiting(&l), "a cancelled run is not awaited");
    assert!(answer(&mut l, 12, f + 1).starts_with(b"ok result applied"));
    assert!(!awaiting(&l), "a late result never reopens the await");
    assert_eq!(l.late_cancelled_results(), 2);
    tick(&mut l, 4);
    assert_eq!(cancels(&l).map(|c| c.cancelled), Some(2));
    assert_eq!(l.fires().get(&(1, 0)), Some(&4));
    assert_eq!(l.registry().get(1).unwrap().policy_counters().cancelled, 2);
    // Replicated: the snapshot takes version 3 and restores equal.
    let snap = l.snapshot();
    assert_eq!(snap[..8], COUNTED_SNAPSHOT_MAGIC.to_le_bytes());
    let (_, version, _, _): CountedFile = codec::decode(&snap, snap.len()).unwrap();
    assert_eq!(version, CANCELS_SNAPSHOT_VERSION);
    let mut r = cancel_ledger(1);
    r.restore(&snap).unwrap();
    assert_eq!(r.entry_cancels(), l.entry_cancels());
    assert_eq!(r.digest(), l.digest());
    assert_eq!(r.snapshot(), snap);
    // The cancellations are digested.
    let mut uncancelled = cancel_ledger(1);
    uncancelled.restore(&snap).unwrap();
    uncancelled.cancels = CancelledRuns::new();
    assert_ne!(uncancelled.digest(), l.digest());
    assert_ne!(plain, l.digest());
}

/// A version 3 body whose cancellations repeat an entry, count none, or are missing is
/// refused and changes nothing.
#[test]
fn a_bad_cancellations_body_is_refused() {
    let mut l = cancel_ledger(1);
    let mut pages = MemPages::new(4_096, 2);
    for seq in 1..=3 {
        l.on_tick(Tick::new(1, seq, Some(seq as i64 * 1_000)), &mut pages)
            .unwrap();
    }
    let snap = l.snapshot();
    let (magic, version, body, _): CountedFile = codec::decode(&snap, snap.len()).unwrap();
    let (state, rows, book, up, cancels): CancelsBody = codec::decode(&body, body.len()).unwrap();
    assert_eq!(cancels.len(), 1);
    let fresh = cancel_ledger(1).digest();
    let with = |c: Vec<(u32, u32, u64, u64)>| {
        let body =
            codec::encode(&(state.clone(), rows.clone(), book.clone(), up.clone(), c)).unwrap();
        let sum: [u8; 32] = crate::sha256::Sha256::digest(&body).into();
        codec::encode(&(magic, version, body, sum)).unwrap()
    };
    let twice = vec![cancels[0], cancels[0]];
    let none = vec![(1, 0, 0, 5)];
    for (bytes, what) in [
        (with(twice), "listed twice"),
        (with(none), "listed twice or none"),
        (with(Vec::new()), "without cancellations"),
    ] {
        let mut r = cancel_ledger(1);
        let e = r.restore(&bytes).unwrap_err();
        assert!(
            matches!(&e, AppError::BadSnapshot(m) if m.contains(what)),
            "{what}: {e:?}"
        );
        assert_eq!(r.digest(), fresh, "{what}: nothing changed");
    }
}

/// Regression (issue 10): a failed write of a table's schedule during a tick was only
/// logged, so the pages (snapshot, digest) fell behind the memory. It is now fatal: the
/// tick fails with `AppError::Fatal` and the ledger reports itself halted.
#[test]
fn failed_schedule_save_in_a_tick_is_fatal() {
    let mut ok = ledger();
    let mut pages = MemPages::new(4_096, 2);
    ok.on_tick(Tick::new(1, 1, Some(1_000)), &mut pages)
        .unwrap();
    assert!(ok.halted().is_none());
    assert_eq!(ok.fires().get(&(1, 0)), Some(&1));

    // The same tick over pages that refuse every write.
    let mut l = ledger();
    let mut broken = crate::pages::CrashAfter::new(MemPages::new(4_096, 2), 0);
    let err = l.on_tick(Tick::new(1, 1, Some(1_000)), &mut broken);
    assert!(matches!(err, Err(AppError::Fatal(_))), "{err:?}");
    assert!(matches!(l.halted(), Some(AppError::Fatal(_))));
    assert_eq!(l.table_errors(), 1);
}

/// The ledger's digest is its stream fed field by field, as before its fire counts were
/// gathered one update per entry (the bytes must not change), under both hash functions.
#[test]
fn digest_is_the_field_by_field_stream() {
    let reference = |l: &CronLedger<KvLedger>, hash: StateHash| {
        let mut h = StateHasher::new(hash);
        h.update(b"cron-ledger");
        h.update(l.state.digest_in(hash));
        h.update(l.registry.setup_digest());
        for ((c, p), n) in &l.counts {
            h.update(c.to_le_bytes());
            h.update(p.to_le_bytes());
            h.update(n.fired.to_le_bytes());
        }
        assert!(l.scheduler.is_none() && l.upgrades.state().is_empty());
        h.finalize()
    };
    let mut l = ledger();
    let mut pages = MemPages::new(4_096, 2);
    for t in 1..=4 {
        for hash in [StateHash::Sha256, StateHash::Blake3] {
            assert_eq!(l.digest_in(hash), reference(&l, hash), "tick {t}");
        }
        l.on_tick(Tick::new(1, t, Some(1_000 * t as i64)), &mut pages)
            .unwrap();
        l.counts
            .insert((t as u32 + 1, 7), (0x0102_0304_0506_0708 * t).into());
    }
    assert!(l.counts.len() > 2);
    for hash in [StateHash::Sha256, StateHash::Blake3] {
        assert_eq!(l.digest_in(hash), reference(&l, hash));
    }
}
