//! The schedule book, one test binary: admission and authorization, quotas and limits, pages,
//! migrations of every released layout, handlers (parked, failing, history), counters, manual runs,
//! bounds and run limits, overlap policies, and upgrades. `cargo test -p ccron --test schedule MODULE::` runs one module.

mod authz;
mod backfill_overlap;
mod book;
mod book_fits;
mod book_migrations;
mod book_pages;
mod bounds;
mod calendars;
mod counters;
mod features;
mod handlers;
mod layout_pin;
mod limits_safety;
mod manual;
mod overlap;
mod quotas;
mod refusals;
mod slots;
mod table_calendars;
mod upgrades;
