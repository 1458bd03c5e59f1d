//! Cron tables and their reserved pages, one test binary: tables against a reference model,
//! properties, pages and crashes at every write, layout migrations, the ticks generator.
//! `cargo test -p ccron --test table MODULE::` runs one module.

mod pages_crash;
mod migrations;
mod pages;
mod props;
mod reference;
mod ticks_generator;
