//! One outbox per ledger, atomic requests (issue 25, items 1 and 2).
//!
//! A `CronLedger`'s schedule book handlers, cron table actions and state's own request code all
//! emit into one outbox, each within room reserved before its run, several records per run
//! under distinct ids; a result comes back to whoever emitted its record. A state request's
//! schedule changes commit with it, all or nothing, authorized as the requesting client.

use std::sync::{Arc, Mutex};

use ccron::host::{
    AppError, Application, BookConfig, ClientId, CronLedger, Digest32, Effects, ExecContext,
    LedgerScheduler,
};
use ccron::outbox::{EmitBudget, EmitError, Origin, OutboxRecord, OutboxResult, ResultOutcome};
use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Target, Timing};
use ccron::{
    CronEntry, CronTable, CronTableRegistry, MemPages, PageAllocator, Periodic, Policy, Tick,
};

const C: u32 = 1;
const CONSUMER: ClientId = ccron::ClientId([99; 32]);

/// Holds by id; the refund task and the `held` record commit with the hold.
#[derive(Debug, Default, Clone)]
struct Esc {
    holds: std::collections::BTreeMap<String, u64>,
    refunded: u64,
    results: Vec<(Origin, u64)>,
}

fn refund_task(client: ClientId, id: &str) -> ScheduleRequest {
    ScheduleRequest::Upsert(
        NewSchedule::new("refund", Timing::AfterMs(500))
            .with_key(format!("refund-{}-{id}", client.short()))
            .with_payload(id.as_bytes().to_vec()),
    )
}

impl Application for Esc {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        self.execute_with(ctx, client, payload, &mut Effects::none())
    }

    fn execute_with(
        &mut self,
        _: ExecContext,
        client: ClientId,
        payload: &[u8],
        fx: &mut Effects<'_>,
    ) -> Vec<u8> {
        let text = String::from_utf8_lossy(payload);
        let words: Vec<&str> = text.split_whitespace().collect();
        match words[..] {
            ["hold", id, amount] => {
                let Ok(amount) = amount.parse() else {
                    return b"err amount".to_vec();
                };
                if let Err(e) = fx.schedule(refund_task(client, id)) {
                    return format!("err {e}").into_bytes();
                }
                if let Err(e) = fx.emit("held", id.as_bytes().to_vec()) {
                    return format!("err {e}").into_bytes();
                }
                self.holds.insert(id.to_string(), amount);
                b"ok".to_vec()
            }
            // Two schedule changes, the second refused: neither stays.
            ["two", id] => {
                if let Err(e) = fx.schedule(refund_task(client, id)) {
                    return format!("err {e}").into_bytes();
                }
                let bad = NewSchedule::new("no-such-handler", Timing::AfterMs(1));
                if let Err(e) = fx.schedule(ScheduleRequest::Create(bad)) {
                    return format!("err {e}").into_bytes();
                }
                self.holds.insert(id.to_string(), 1);
                b"ok".to_vec()
            }
            // Cancels someone's refund task: authorized as the requesting client.
            ["steal", owner, id] => {
                let key = format!("refund-{owner}-{id}");
                if let Err(e) = fx.schedule(ScheduleRequest::Cancel(Target::Key(key))) {
                    return format!("err {e}").into_bytes();
                }
                self.holds.remove(id);
                b"ok".to_vec()
            }
            _ => b"err unknown".to_vec(),
        }
    }

    fn on_outbox_result(&mut self, record: &OutboxRecord, _: &ResultOutcome) {
        self.results
            .push((record.id.origin(), record.id.occurrence));
    }

    fn digest(&self) -> Digest32 {
        [self.holds.len() as u8; 32]
    }
    fn snapshot(&self) -> Vec<u8> {
        Vec::new()
    }
    fn restore(&mut self, _: &[u8]) -> Result<(), AppError> {
        Ok(())
    }
}

type Seen = Arc<Mutex<Vec<(Origin, usize)>>>;

fn ledger(outbox_pages: u32, seen: &Seen) -> CronLedger<Esc> {
    let mut table =
        CronTable::with_persistence(C, PageAllocator::new(0, 2).allocate(2).unwrap(), 4);
    table
        .add(CronEntry::<Esc>::periodic(
            0,
            Periodic::every_ms(1_000).unwrap(),
            |ctx| {
                // One record per open hold: several records in one run.
                let ids: Vec<String> = ctx.state.holds.keys().cloned().collect();
                for id in ids {
                    if ctx.emit("released", id.into_bytes()).is_err() {
                        return;
                    }
                }
            },
        ))
        .unwrap();
    let mut registry = CronTableRegistry::new();
    registry.register(table).unwrap();
    let mut handlers = Handlers::<Esc>::new();
    handlers.register("refund", |ctx| {
        let id = String::from_utf8_lossy(ctx.payload).to_string();
        if let Some(a) = ctx.state.holds.remove(&id) {
            ctx.state.refunded += a;
            ctx.emit("refunded", id.clone().into_bytes())?;
            ctx.emit("notify", id.into_bytes())?;
        }
        Ok::<(), ccron::schedule::HandlerError>(())
    });
    let cfg = BookConfig {
        component: C,
        position: 9,
        limits: Limits {
            max_payload_bytes: 64,
            ..Limits::default()
        },
        book_pages: 64,
        outbox_pages,
    };
    let (s1, s2) = (seen.clone(), seen.clone());
    let book = LedgerScheduler::try_new(cfg, handlers)
        .unwrap()
        .with_policy(Policy::default().with_outbox_consumer(CONSUMER))
        .with_emit_budget(2, 600)
        .with_result_reaction(Box::new(move |_, r, _| {
            s1.lock().unwrap().push((r.id.origin(), r.id.sub_index()));
        }))
        .with_table_result_reaction(Box::new(move |_, r, _| {
            s2.lock().unwrap().push((r.id.origin(), r.id.sub_index()));
        }));
    CronLedger::new(Esc::default(), registry)
        .with_scheduler(book)
        .with_table_emits(C, EmitBudget::new(8, 1_024))
        .with_request_emits(EmitBudget::new(1, 128))
}

fn ctx(seq: u64, t: i64) -> ExecContext {
    ExecContext {
        seq,
        agreed_time_ms: Some(t),
    }
}

#[test]
fn every_emitter_writes_the_one_outbox_and_gets_its_results_back() {
    let seen = Seen::default();
    let mut l = ledger(4, &seen);
    let mut pages = MemPages::new(4_096, 2);
    assert_eq!(
        l.execute(ctx(1, 0), ccron::ClientId([1; 32]), b"hold a 5"),
        b"ok"
    );
    assert_eq!(
        l.execute(ctx(2, 0), ccron::ClientId([1; 32]), b"hold b 7"),
        b"ok"
    );
    let book = l.scheduler().unwrap();
    assert_eq!(
        book.book().len(),
        2,
        "both refund tasks committed with their holds"
    );
    assert_eq!(book.outbox().len(), 2, "one `held` record per request");
    // The table's first run (two holds: two records), then the book's refunds (two records
    // each) at 1 s.
    l.on_tick(Tick::new(C, 3, Some(1_000)), &mut pages).unwrap();
    let outbox = l.scheduler().unwrap().outbox();
    let records: Vec<(u64, Origin, usize, String)> = outbox
        .iter()
        .map(|(i, r)| (i, r.id.origin(), r.id.sub_index(), r.handler.clone()))
        .collect();
    let origins: Vec<(Origin, usize, &str)> = records
        .iter()
        .map(|(_, o, s, h)| (*o, *s, h.as_str()))
        .collect();
    assert_eq!(
        origins,
        vec![
            (Origin::State, 0, "held"),
            (Origin::State, 0, "held"),
            (Origin::Schedule, 0, "refunded"),
            (Origin::Schedule, 1, "notify"),
            (Origin::Schedule, 0, "refunded"),
            (Origin::Schedule, 1, "notify"),
        ],
        "the book runs first on its component; the table then finds no hold"
    );
    // Every id distinct.
    let mut ids: Vec<_> = outbox.iter().map(|(_, r)| r.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    assert_eq!(l.state().refunded, 12);

    // Another hold; the table's next run emits for it.
    assert_eq!(
        l.execute(ctx(4, 1_600), ccron::ClientId([1; 32]), b"hold c 1"),
        b"ok"
    );
    l.on_tick(Tick::new(C, 5, Some(2_000)), &mut pages).unwrap();
    let outbox = l.scheduler().unwrap().outbox();
    let (_, last) = outbox.iter().last().unwrap();
    assert_eq!(
        (last.id.origin(), last.handler.as_str()),
        (Origin::Table, "released")
    );
    assert_eq!(last.id.emitter(), 0, "the table position");

    // Results come back to whoever emitted each record.
    let head = outbox.head();
    let all: Vec<_> = outbox.iter().map(|(i, r)| (i, r.id)).collect();
    for (i, id) in all {
        let p = OutboxResult::dead_letter(i, id, "gave up")
            .to_payload()
            .unwrap();
        let reply = l.execute(ctx(10 + i, 3_000), CONSUMER, &p);
        assert!(
            reply.starts_with(b"ok result applied"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }
    assert_eq!(head, 8);
    let state_results: Vec<Origin> = l.state().results.iter().map(|r| r.0).collect();
    assert_eq!(state_results, vec![Origin::State; 3]);
    // The refund of `c` is still due: one schedule, one hold.
    assert_eq!(l.scheduler().unwrap().book().len(), 1);
    let mut book_and_table = seen.lock().unwrap().clone();
    book_and_table.sort();
    assert_eq!(
        book_and_table,
        vec![
            (Origin::Schedule, 0),
            (Origin::Schedule, 0),
            (Origin::Schedule, 1),
            (Origin::Schedule, 1),
            (Origin::Table, 0),
        ]
    );
}

#[test]
fn a_request_changes_the_state_and_the_book_all_or_nothing() {
    let seen = Seen::default();
    let mut l = ledger(4, &seen);
    let before = l.digest();
    let reply = l.execute(ctx(1, 0), ccron::ClientId([1; 32]), b"two x");
    assert!(
        reply.starts_with(b"err unknown handler"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let book = l.scheduler().unwrap();
    assert_eq!(book.book().len(), 0, "the first schedule change was undone");
    assert!(book.outbox().is_empty());
    assert!(l.state().holds.is_empty());
    assert_eq!(l.voided_requests(), 1);
    assert_eq!(l.digest(), before);

    // Authorized as the requesting client: client 2 cannot cancel client 1's refund.
    assert_eq!(
        l.execute(ctx(2, 0), ccron::ClientId([1; 32]), b"hold a 5"),
        b"ok"
    );
    let steal = format!("steal {} a", ccron::ClientId([1; 32]).short());
    let reply = l.execute(ctx(3, 0), ccron::ClientId([2; 32]), steal.as_bytes());
    assert!(
        reply.starts_with(b"err"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(l.scheduler().unwrap().book().len(), 1);
    assert!(l.state().holds.contains_key("a"));
    // Its owner may.
    assert_eq!(
        l.execute(ctx(4, 0), ccron::ClientId([1; 32]), steal.as_bytes()),
        b"ok"
    );
    assert_eq!(l.scheduler().unwrap().book().len(), 0);
}

#[test]
fn a_full_outbox_refuses_a_request_whole_and_holds_a_table_pass_back() {
    let seen = Seen::default();
    // One outbox page: ~30 records of 128 bytes.
    let mut l = ledger(1, &seen);
    let limits = l.scheduler().unwrap().outbox().limits();
    let mut seq = 0;
    let mut held = 0;
    loop {
        seq += 1;
        let reply = l.execute(
            ctx(seq, 0),
            ccron::ClientId([1; 32]),
            format!("hold h{seq} 1").as_bytes(),
        );
        if reply != b"ok" {
            let text = String::from_utf8_lossy(&reply).to_string();
            assert!(text.contains(&EmitError::OutboxFull.to_string()), "{text}");
            break;
        }
        held += 1;
        assert!(held <= limits.max_records, "the outbox never fills");
    }
    // The refused request left nothing: no hold, no refund task for it.
    assert_eq!(l.state().holds.len(), held);
    assert_eq!(l.scheduler().unwrap().book().len(), held);
    // The table's pass needs 8 records of room: it waits, and so do the refunds.
    let mut pages = MemPages::new(4_096, 2);
    l.on_tick(Tick::new(C, 1_000, Some(1_000)), &mut pages)
        .unwrap();
    assert_eq!(l.held_passes(), 1);
    assert_eq!(l.fires().get(&(C, 0)), None, "the table did not run");
    assert_eq!(
        l.state().holds.len(),
        held,
        "no refund ran into a full outbox"
    );
    // The consumer trims; the refunds run (the book first, as far as the room goes), then
    // the table's pass.
    let mut seq = 2_000;
    for _ in 0..64 {
        if l.fires().contains_key(&(C, 0)) {
            break;
        }
        let head = l.scheduler().unwrap().outbox().head();
        let trim = ccron::host::scheduler::outbox_delivered_payload(head);
        seq += 2;
        assert!(
            l.execute(ctx(seq, 1_000), CONSUMER, &trim)
                .starts_with(b"ok trimmed")
        );
        l.on_tick(Tick::new(C, seq + 1, Some(1_100)), &mut pages)
            .unwrap();
    }
    assert!(
        l.state().holds.is_empty(),
        "every refund ran once room came back"
    );
    assert_eq!(l.state().refunded, held as u64);
    assert_eq!(l.fires().get(&(C, 0)), Some(&1));
}

/// Issue 27: a cron table entry's overlap policy reads "the previous run has no result yet"
/// from the ledger's one outbox. Under `Skip` the entry's run while its record awaits a result
/// is skipped; once the consumer's result is applied through consensus, it runs again.
#[test]
fn a_table_entrys_overlap_reads_the_ledgers_outbox() {
    use ccron::schedule::Overlap;
    let mut table =
        CronTable::with_persistence(C, PageAllocator::new(0, 2).allocate(2).unwrap(), 4);
    table
        .add(
            CronEntry::<Esc>::periodic(0, Periodic::every_ms(1_000).unwrap(), |ctx| {
                let _ = ctx.emit("ping", b"p".to_vec());
            })
            .with_overlap(Overlap::Skip)
            .unwrap(),
        )
        .unwrap();
    let mut registry = CronTableRegistry::new();
    registry.register(table).unwrap();
    let cfg = BookConfig {
        component: C,
        position: 9,
        limits: Limits::default(),
        book_pages: 64,
        outbox_pages: 4,
    };
    let book = LedgerScheduler::try_new(cfg, Handlers::<Esc>::new())
        .unwrap()
        .with_policy(Policy::default().with_outbox_consumer(CONSUMER));
    let mut l = CronLedger::new(Esc::default(), registry)
        .with_scheduler(book)
        .with_table_emits(C, EmitBudget::new(1, 128));
    let mut pages = MemPages::new(4_096, 2);
    let records = |l: &CronLedger<Esc>| l.scheduler().unwrap().outbox().len();
    l.on_tick(Tick::new(C, 1, Some(1_000)), &mut pages).unwrap();
    assert_eq!(records(&l), 1, "the first run emits");
    l.on_tick(Tick::new(C, 2, Some(2_000)), &mut pages).unwrap();
    assert_eq!(
        records(&l),
        1,
        "skipped: the first run's record has no result"
    );
    let (i, id) = {
        let (i, r) = l.scheduler().unwrap().outbox().iter().last().unwrap();
        (i, r.id)
    };
    let p = OutboxResult::dead_letter(i, id, "gave up")
        .to_payload()
        .unwrap();
    let reply = l.execute(ctx(3, 2_500), CONSUMER, &p);
    assert!(
        reply.starts_with(b"ok result applied"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    l.on_tick(Tick::new(C, 4, Some(3_000)), &mut pages).unwrap();
    assert_eq!(records(&l), 2, "the result is in: the entry runs again");
    assert!(l.halted().is_none());
}
