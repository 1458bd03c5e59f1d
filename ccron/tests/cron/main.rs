//! Cron expressions and time zones, one test binary: the parser and next-instant search against a
//! reference, nicknames, zone rules, instants between two times, time ranges and the evaluation
//! budget. `cargo test -p ccron --test cron MODULE::` runs one module.

mod budget;
mod instants;
mod nicknames;
mod reference;
mod schedule;
mod time_ranges;
mod zone_rules;
