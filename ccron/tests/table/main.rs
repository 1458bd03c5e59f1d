//! Cron tables and their reserved pages, one test binary: tables against a reference model,
//! properties, pages and crashes at every write, layout migrations, the ticks generator.
//! `cargo test -p ccron --test table MODULE::` runs one module.

mod layout_pin;
mod migrations;
mod pages;
mod pages_crash;
mod props;
mod reference;
mod ticks_generator;
