//! The example ledgers, moved to the `ccron-ledgers` crate (engine-independent, so a real
//! engine's adapter runs them unchanged) and re-exported here so `sim_bft::ledgers::*` paths keep
//! compiling. [`demo`] adds [`demo::DemoRun`], the demo ledger run on the simulated cluster.
//!
//! [`Replica::new`](crate::replica::Replica::new), the protocol tests' default replica, is
//! defined here, so the replica's own modules never name a ledger.

pub mod demo;

pub use ccron_ledgers::{
    BookConfig, CronLedger, KvLedger, KvOp, LedgerScheduler, TickCounter, TickRecord, cron_ledger,
    kv, kv_result, orders, scheduler, tick_counter,
};

impl crate::replica::Replica {
    /// A fresh replica running the demo [`KvLedger`] for requests and a [`TickCounter`] for
    /// ticks (in the pages after the agreed-time page), for protocol tests; a ledger of your
    /// own goes through [`Replica::with_app`](crate::replica::Replica::with_app).
    pub fn new(cfg: crate::replica::ReplicaConfig) -> Result<Self, crate::replica::ReplicaError> {
        let ticks = TickCounter::new(
            if cfg.time_page == 0 { 1 } else { 0 },
            cfg.num_pages.saturating_sub(1).max(1),
        );
        Self::with_parts(cfg, Box::new(KvLedger::new()), Box::new(ticks))
    }
}
