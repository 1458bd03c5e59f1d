//! Cross-crate tests on the simulated cluster, one module per topic (one test binary: README,
//! Tests).

#[path = "../support/mod.rs"]
mod support;

mod cluster_cron;
mod hostile_clients;
mod sim_observability;
mod sim_setup_errors;
mod tick_admission;
mod upgrade_handlers;
