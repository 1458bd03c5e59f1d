//! The example ledgers, moved to the `ccron-ledgers` crate (engine-independent, so a real
//! engine's adapter runs them unchanged) and re-exported here so `sim_bft::ledgers::*` paths keep
//! compiling. [`demo`] adds [`demo::DemoRun`], the demo ledger run on the simulated cluster.

pub mod demo;

pub use ccron_ledgers::{
    BookConfig, CronLedger, KvLedger, KvOp, LedgerScheduler, TickCounter, TickRecord, cron_ledger,
    kv, kv_result, orders, scheduler, tick_counter,
};
