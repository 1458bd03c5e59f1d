//! Schedules as replicated data: unpaid orders expire 30 minutes after they are placed.
//!
//! Part 1 (one ledger, by hand): client requests create an expiry task per order (upsert by
//! key), a payment cancels it, a nightly cron report and a periodic sweep are schedules too; a
//! tick at agreed time runs what is due, the handler emits one outbox record per run with its
//! occurrence id, and the book survives a restart from its reserved pages.
//!
//! Part 2 (the simulated PBFT cluster): 4 replicas whose clients' key-value puts become orders
//! (`sim_bft::ledgers::orders::ScheduledLedger` with `puts_as_orders`), under a crash, loss,
//! reordering and clock skew; prints the checkers' verdict and what each replica ran, and exits
//! non-zero if the honest replicas disagree, a checker failed or no order expired.
//!
//! Run: `cargo run --release --example order_expiry`.

use ccron::Principal;
use ccron::cron::{format_rfc3339_ms, parse_rfc3339_ms};
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    Handlers, Limits, Misfire, NewSchedule, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{MemPages, PageRange, Tick};
use sim_bft::ledgers::orders::{SchedAppConfig, ScheduledLedger};
use sim_bft::sim::cluster::Cluster;
use sim_bft::sim::{FaultConfig, TimeServiceMode};

const MINUTE_MS: i64 = 60_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    by_hand()?;
    on_the_cluster()
}

fn by_hand() -> Result<(), Box<dyn std::error::Error>> {
    println!("== one ledger ==");
    let mut handlers: Handlers<Vec<String>> = Handlers::new();
    handlers.register("expire-order", |ctx| {
        let order = String::from_utf8_lossy(ctx.payload).into_owned();
        ctx.state.push(format!("expired {order}"));
        if let Err(e) = ctx.emit("shop.cancel", order.into_bytes()) {
            ctx.state.push(format!("emit failed: {e}"));
        }
    });
    handlers.register("report", |ctx| {
        let line = format!(
            "report for {}",
            format_rfc3339_ms(ctx.due.time_ms().unwrap_or(0))
        );
        ctx.state.push(line);
    });
    let limits = Limits::default();
    let mut book = Scheduler::new(1, limits);
    let mut log = Vec::new();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let t0 = parse_rfc3339_ms("2026-03-28T23:50:00Z")?;

    let expiry = |order: &str| {
        NewSchedule::new("expire-order", Timing::AfterMs(30 * MINUTE_MS))
            .with_key(order)
            .with_payload(order.as_bytes().to_vec())
            .with_misfire(Misfire::ExpireAfter {
                deadline_ms: 60 * MINUTE_MS,
            })
    };
    let requests = [
        ScheduleRequest::Upsert(expiry("order-1")),
        ScheduleRequest::Upsert(expiry("order-2")),
        ScheduleRequest::Upsert(expiry("order-3")),
        ScheduleRequest::Cancel(Target::Key("order-2".into())), // paid
        ScheduleRequest::Create(NewSchedule::new(
            "report",
            Timing::Cron {
                expression: "0 0 * * *".into(),
                zone: None,
            },
        )),
        ScheduleRequest::Create(NewSchedule::new("no-such-handler", Timing::AfterMs(1))),
    ];
    for (seq, req) in (1..).zip(requests) {
        let what = format!("{req:?}");
        match book.apply(&Principal::Host, req, &handlers, seq, Some(t0)) {
            Ok(id) => println!("  request {seq}: ok {id:?}"),
            Err(e) => println!(
                "  request {seq}: rejected ({e}); {}",
                &what[..what.len().min(40)]
            ),
        }
    }
    println!("  load per 15 min from {}:", format_rfc3339_ms(t0));
    for slot in book.load_per_slot(t0, t0 + 60 * MINUTE_MS, 15 * MINUTE_MS, 10) {
        println!(
            "    {}  {} run(s)",
            format_rfc3339_ms(slot.slot_start_ms),
            slot.runs
        );
    }

    // Persist, "restart", and carry on from the pages.
    let range = PageRange::new(0, 20).ok_or("range")?;
    let mut pages = MemPages::new(4_096, 20);
    book.save(&mut pages, range)?;
    let mut book = Scheduler::load(1, limits, &pages, range)?;
    println!("  restarted from pages: {} schedules", book.len());

    for (i, minutes) in [5, 15, 25, 35, 45].into_iter().enumerate() {
        let tick = Tick::new(1, 10 + i as u64, Some(t0 + minutes * MINUTE_MS));
        book.on_tick(&tick, &mut log, &mut handlers, &mut outbox);
    }
    for line in &log {
        println!("  {line}");
    }
    for (index, record) in outbox.iter() {
        println!(
            "  outbox #{index}: {} {} ({})",
            record.handler,
            String::from_utf8_lossy(&record.payload),
            record.id
        );
    }
    Ok(())
}

fn on_the_cluster() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== simulated cluster: 4 replicas, a crash, 2% loss, reordering, 100 ms skew ==");
    let app = SchedAppConfig {
        puts_as_orders: true,
        expiry_ms: 2_000,
        ..SchedAppConfig::default()
    };
    let sim = Cluster::builder()
        .seed(7)
        .replicas(4)
        .time_service(TimeServiceMode::Robust)
        .duration_ms(8_000, 20_000)
        .clients(2, 250)
        .ticks(vec![app.component], 500)
        .faults(FaultConfig {
            crashes: 1,
            drop_rate: 0.02,
            reorder_rate: 0.05,
            max_clock_skew_ms: 100,
            ..FaultConfig::default()
        })
        .build_with_app(|_| {}, move |_| Box::new(ScheduledLedger::new(app)))?;
    let outcome = sim.run();
    println!(
        "  checkers: {}; honest replicas agree: {}",
        if outcome.ok() { "ok" } else { "FAILED" },
        outcome.honest_agree
    );
    for n in &outcome.nodes {
        let digest: String = n.state_digest[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        println!(
            "  replica {}: executed up to seq {}, {} requests, {} ticks, {} expiries run here, state {digest}",
            n.id,
            n.last_executed_seq,
            n.requests_executed,
            n.ticks_executed,
            n.fires.values().sum::<u64>()
        );
    }
    println!("  replay: {}", outcome.replay_command());
    let expiries: Vec<u64> = outcome
        .nodes
        .iter()
        .filter(|n| n.honest)
        .map(|n| n.fires.values().sum::<u64>())
        .collect();
    if !outcome.ok() || !outcome.honest_agree {
        return Err(format!(
            "the honest replicas disagree or a checker failed: {:?}\n  replay: {}",
            outcome.violations,
            outcome.replay_command()
        )
        .into());
    }
    if expiries.iter().all(|n| *n == 0) {
        return Err("no order expired on any honest replica".into());
    }
    Ok(())
}
