//! Cross-crate tests in real time: the threaded runtime's real TicksGenerator and a live cluster
//! with HTTP workers (one test binary: README, Tests).

mod http_workers;
mod runtime_cron;
