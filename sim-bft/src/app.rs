//! The execution boundary: what a replica executes, and nothing else.
//!
//! Moved to [`ccron::host::app`] (engine-independent, so every engine's adapter implements the
//! same trait); re-exported here so `sim_bft::app::*` paths keep compiling. The replica and the
//! simulator see only these items; the example ledgers live in [`crate::ledgers`] (the
//! `ccron-ledgers` crate).

pub use ccron::host::app::{
    AppError, Application, ClientId, Digest32, ExecContext, FireNote, Millis, TickExecutor,
    WithTicks,
};
