//! Test ledgers shared by the root crate's integration tests (`mod support;` in each).

use sim_bft::app::{AppError, Application, ClientId, ExecContext};
use sim_bft::crypto::Digest32;
use sim_bft::ledgers::KvLedger;

/// A key-value ledger that logs every request it executes, as a user's own code would.
#[derive(Default)]
pub struct Loud(pub KvLedger);

impl Application for Loud {
    fn execute(&mut self, ctx: ExecContext, client: ClientId, payload: &[u8]) -> Vec<u8> {
        tracing::info!(seq = ctx.seq, client = %client.short(), "user request executed");
        self.0.execute(ctx, client, payload)
    }
    fn digest(&self) -> Digest32 {
        self.0.digest()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.snapshot()
    }
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), AppError> {
        self.0.restore(snapshot)
    }
}
