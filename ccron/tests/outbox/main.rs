//! The outbox, one test binary: its log in pages, crashes, the consumer, results and the one outbox
//! a ledger's table actions, handlers and state share. `cargo test -p ccron --test outbox MODULE::`
//! runs one module.

mod consumer;
mod crash;
mod ledger_one_outbox;
mod log;
mod owners;
mod results;
