//! `ccron-malachite`: the project's node binary on Malachite with its example ledgers, chosen by
//! `--ledger` at `init` / `localnet` (recorded in the genesis): `demo` (prune and contract call)
//! and `orders` (client requests create order expiries; the localnet puts an order load on it).
//! `orders:book-pages=P` is `orders` with a book of P reserved pages instead of 40 (room for a
//! `localnet --preload` of many schedules; another ledger, with its own setup digest).
//! A team's own binary is the one-line `ccron_malachite::cli(|_| my_ledger())` (see
//! `examples/escrow_node.rs`).

use std::process::ExitCode;
use std::sync::Arc;

use ccron::host::Application;
use ccron::schedule::ScheduleRequest;
use ccron_ledgers::demo::{DemoTables, demo_ledger};
use ccron_ledgers::orders::{SchedAppConfig, ScheduledLedger};

/// The `orders` ledger's configuration on the node (puts place orders, as in sim-bft's
/// `--ledger orders`), with `book_pages` reserved pages for the book when given.
fn orders_config(book_pages: Option<u32>) -> SchedAppConfig {
    let default = SchedAppConfig::default();
    SchedAppConfig {
        puts_as_orders: true,
        book_pages: book_pages.unwrap_or(default.book_pages),
        ..default
    }
}

/// The most book pages `orders:book-pages=P` takes: 2^20 pages of 4 KiB (4 GiB), far above what
/// a snapshot can carry (64 MiB) — the option exists to measure where that bound bites.
const MAX_BOOK_PAGES: u32 = 1 << 20;

/// Reads a ledger name: `demo`, `orders` or `orders:book-pages=P` (the base name and the book
/// pages).
fn parse_ledger(name: &str) -> Result<(&str, Option<u32>), String> {
    let Some((base, option)) = name.split_once(':') else {
        return Ok((name, None));
    };
    let pages = option
        .strip_prefix("book-pages=")
        .filter(|_| base == "orders")
        .ok_or_else(|| format!("ledger '{name}': the one option is orders:book-pages=P"))?;
    match pages.parse::<u32>() {
        Ok(p) if (4..=MAX_BOOK_PAGES).contains(&p) => Ok((base, Some(p))),
        _ => Err(format!(
            "ledger '{name}': book-pages is a number of pages from 4 to {MAX_BOOK_PAGES}"
        )),
    }
}

/// The example ledger `name`.
fn ledger(name: &str) -> Result<Box<dyn Application>, String> {
    match parse_ledger(name)? {
        ("demo", None) => Ok(Box::new(
            demo_ledger(&DemoTables::default()).map_err(|e| e.to_string())?,
        )),
        ("orders", pages) => Ok(Box::new(ScheduledLedger::new(orders_config(pages)))),
        _ => Err(format!(
            "ledger '{name}' is not available in this binary (demo, orders, orders:book-pages=P)"
        )),
    }
}

/// Whether `name` is an `orders` ledger (the localnet's load and preload apply).
fn is_orders(name: &str) -> bool {
    matches!(parse_ledger(name), Ok(("orders", _)))
}

/// The localnet's load on `orders`: request k places order `order-k`, expiring 3 s after
/// admission.
fn order(_client: ccron::host::ClientId, number: u64) -> Vec<u8> {
    let order = format!("order-{number}");
    ScheduledLedger::payload(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
        &order, 3_000,
    )))
    .unwrap_or_default()
}

/// How long a preloaded order lives: an hour, so none fires during a measurement.
const HOLD_MS: i64 = 3_600_000;

/// The localnet's preload on `orders`: request k places order `hold-k`, expiring an hour after
/// admission.
fn hold(_client: ccron::host::ClientId, number: u64) -> Vec<u8> {
    let order = format!("hold-{number}");
    ScheduledLedger::payload(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
        &order, HOLD_MS,
    )))
    .unwrap_or_default()
}

fn main() -> ExitCode {
    ccron_malachite::binary(|spec| ledger(&spec.name))
        .default_ledger("demo")
        .load(|name| is_orders(name).then(|| Arc::new(order) as ccron_node::load::LoadPayload))
        .preload(|name| is_orders(name).then(|| Arc::new(hold) as ccron_node::load::LoadPayload))
        .main()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_names_take_the_book_pages_of_orders_only() {
        assert_eq!(parse_ledger("orders"), Ok(("orders", None)));
        assert_eq!(parse_ledger("demo"), Ok(("demo", None)));
        assert_eq!(
            parse_ledger("orders:book-pages=16384"),
            Ok(("orders", Some(16_384)))
        );
        for bad in [
            "orders:book-pages=3",
            "orders:book-pages=x",
            "orders:pages=9",
            "demo:book-pages=99",
            "orders:book-pages=2000000",
        ] {
            assert!(parse_ledger(bad).is_err(), "{bad}");
        }
        assert!(is_orders("orders:book-pages=64") && !is_orders("demo"));
        // The default `orders` keeps its 40 pages; the option changes only the book's size.
        assert_eq!(
            orders_config(None),
            SchedAppConfig {
                puts_as_orders: true,
                ..SchedAppConfig::default()
            }
        );
        assert_eq!(orders_config(Some(99)).book_pages, 99);
        // The book's size is not in the ledger's setup digest: every node reads it from the
        // ledger name its genesis records (`orders:book-pages=P`), so replicas of one genesis
        // cannot differ in it; both names build a ledger.
        assert!(ledger("orders").is_ok() && ledger("orders:book-pages=64").is_ok());
    }
}
