//! The synced-value log (`synced.log`): blocks the engine's value sync handed this node and
//! the node accepted, kept until their height is decided.
//!
//! A value taken by value sync reaches the engine as a verdict; the engine may then decide it
//! and write that decision to its WAL before the adapter stores the decided block. A process
//! killed in between replays the decision from the WAL at its next start, and a node that had
//! kept the synced block in memory only would stop for ever (`decided value … is unknown to
//! this node`). So each synced block the node did not already know is appended here and
//! fsync'ed before the verdict goes back to the engine, read back at start (the heights above
//! the last stored one), and forgotten once decided ([`PartLog::prune`]).
//!
//! Records are the store's record format (length, CRC-32, payload: `crate::store::record`);
//! the payload is the block's own encoding (`Block`'s borsh, which reads every block layout).
//! A damaged record is refused at open and recovered at start like `parts.log`
//! (`crate::store::recover_at_start`).
//!
//! [`PartLog::prune`]: super::PartLog::prune

use borsh::{BorshDeserialize, BorshSerialize};

use super::Part;
use crate::types::Block;

/// The file name of the synced-value log in a node directory.
pub const SYNCED_LOG: &str = "synced.log";

/// One block taken by value sync (a record of `synced.log`).
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SyncedBlock {
    /// The block, as the peer sent it and this node accepted it.
    pub block: Block,
}

impl Part for SyncedBlock {
    fn height(&self) -> u64 {
        self.block.height
    }
}
