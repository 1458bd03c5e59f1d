//! Drives a cron table registry through committed ticks (with agreed time) and prints what fired.
//!
//! A toy ledger registers one table with three entries:
//! - position 0: prune old orders every 5 minutes of agreed time (periodic, drift-free);
//! - position 1: accrue interest every minute, catching up missed minutes up to 3 at a time;
//! - position 2: a user rule on the ledger's state: when more than 3 orders are open, expire the
//!   oldest one.
//!
//! Ticks arrive every 60 s of agreed time, a few repeated (several replicas' ticks ordered into
//! one batch), then a 4-minute stall, then a replica restarts from its reserved pages and carries
//! on exactly where it was. Run: `cargo run --release --example periodic_table`.

use std::num::NonZeroU32;

use ccron::{
    CronEntry, CronTable, CronTableRegistry, MemPages, MisfirePolicy, PageAllocator, Periodic, Tick,
};

const LEDGER: u32 = 1;
const MINUTE_MS: i64 = 60_000;
/// 2026-01-01T00:00:00Z, the agreed time of the first tick.
const START_MS: i64 = 1_767_225_600_000;

/// The ledger's state that the cron entries act on.
#[derive(Debug, Default)]
struct Ledger {
    open_orders: Vec<u64>,
    next_order: u64,
    pruned: u32,
    interest_runs: u32,
}

/// Application setup: identical on every replica, and again after a restart.
fn setup(alloc: &mut PageAllocator) -> CronTableRegistry<Ledger> {
    let range = alloc.allocate(2).expect("two free pages");
    let mut table = CronTable::with_persistence(LEDGER, range, 64);
    let prune = Periodic::every_ms(5 * MINUTE_MS).expect("positive period");
    table
        .add(CronEntry::<Ledger>::periodic(0, prune, |ctx| {
            ctx.state.pruned += 1;
        }))
        .expect("free position");
    let interest = Periodic::every_ms(MINUTE_MS)
        .expect("positive period")
        .with_misfire(MisfirePolicy::FireEach {
            cap: NonZeroU32::new(3).expect("non-zero"),
        });
    table
        .add(CronEntry::<Ledger>::periodic(1, interest, |ctx| {
            ctx.state.interest_runs += 1;
        }))
        .expect("free position");
    table
        .add(CronEntry::<Ledger>::new(
            2,
            |ctx| ctx.state.open_orders.len() > 3,
            |ctx| {
                ctx.state.open_orders.remove(0);
            },
        ))
        .expect("free position");
    let mut registry = CronTableRegistry::new();
    registry.register(table).expect("first table");
    registry
}

fn name(position: u32) -> &'static str {
    match position {
        0 => "prune",
        1 => "interest",
        _ => "expire-oldest-order",
    }
}

fn main() {
    let mut pages = MemPages::new(4096, 8);
    let mut registry = setup(&mut PageAllocator::new(0, 8));
    registry.reload(&pages).expect("fresh pages");
    let mut ledger = Ledger::default();

    // (seq, minutes since start): a repeat at seq 3 (same batch), a stall from minute 6 to 10.
    let ticks: &[(u64, i64)] = &[
        (1, 0),
        (2, 1),
        (3, 2),
        (3, 2),
        (4, 3),
        (5, 4),
        (6, 5),
        (7, 6),
        (8, 10),
        (9, 11),
    ];
    for &(seq, minute) in ticks {
        // A user request in the same batch opens an order.
        ledger.open_orders.push(ledger.next_order);
        ledger.next_order += 1;
        let tick = Tick::new(LEDGER, seq, Some(START_MS + minute * MINUTE_MS));
        let outcome = registry
            .evaluate(&tick, &mut ledger, &mut pages)
            .expect("registered component");
        let fired: Vec<String> = outcome
            .fired
            .iter()
            .map(|f| match f.due.and_then(|d| d.time_ms()) {
                Some(due) => format!("{}@{}m", name(f.position), (due - START_MS) / MINUTE_MS),
                None => name(f.position).to_string(),
            })
            .collect();
        println!(
            "seq {seq:>2}  t={minute:>2}m  fired [{}]{}",
            fired.join(", "),
            if outcome.persisted {
                "  (schedule written)"
            } else {
                ""
            }
        );
    }

    // A restart: the ledger state and the pages survive (the host persists both); the tables
    // are set up again and reload their schedule from the pages.
    println!("-- replica restarts; setup again and reload from the reserved pages --");
    let mut registry = setup(&mut PageAllocator::new(0, 8));
    registry
        .reload(&pages)
        .expect("pages written by this build");
    for (seq, minute) in [(10, 12), (11, 15)] {
        let tick = Tick::new(LEDGER, seq, Some(START_MS + minute * MINUTE_MS));
        let outcome = registry
            .evaluate(&tick, &mut ledger, &mut pages)
            .expect("registered component");
        let fired: Vec<&str> = outcome.fired.iter().map(|f| name(f.position)).collect();
        println!("seq {seq:>2}  t={minute:>2}m  fired {fired:?}");
    }
    // A tick for a component nobody registered is rejected and creates nothing.
    let stray = Tick::new(99, 12, Some(START_MS + 16 * MINUTE_MS));
    let err = registry
        .evaluate(&stray, &mut ledger, &mut pages)
        .expect_err("unknown component");
    println!("stray tick: {err}");
    println!(
        "ledger: pruned {} times, interest {} runs, open orders {:?}",
        ledger.pruned, ledger.interest_runs, ledger.open_orders
    );
}
