//! Fixtures shared by the crate's unit tests (compiled for tests only).

use std::path::PathBuf;

use crate::types::{Block, Hash32};

/// A fresh, empty scratch directory `<tmp>/ccron-<prefix>-<name>-<pid>` for one test.
pub(crate) fn scratch(prefix: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ccron-{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// An empty block at height `h` linked to `prev_id`, committed in round 0, its agreed time
/// 250 ms per height after 1,700,000,000,000 ms.
pub(crate) fn empty_block(h: u64, prev_id: Hash32) -> Block {
    Block {
        height: h,
        prev_round: 0,
        prev_id,
        samples: Vec::new(),
        agreed_time_ms: 1_700_000_000_000 + 250 * h as i64,
        ticks: Vec::new(),
        requests: Vec::new(),
        prev_state: None,
    }
}
