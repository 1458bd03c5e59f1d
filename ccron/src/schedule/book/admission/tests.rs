//! Tests of admission's size constants.

use super::*;
use crate::schedule::{DeadRun, PendingRetry, RetryPolicy, RunOutcome, RunPolicy};

/// The run state's largest encoding is what the constants say (placement relies on it).
#[test]
fn run_state_sizes_match_the_codec() {
    let policy = RunPolicy::default().with_retry(RetryPolicy::exponential(3, 1, 2));
    let retry = Some(PendingRetry {
        due: Due::Seq(1),
        occurrence: 2,
        attempt: 3,
        at: Due::Time(4),
    });
    let dead = DeadRun {
        due: Due::Time(1),
        occurrence: 2,
        attempts: 3,
        outcome: RunOutcome::Failed { code: 4 },
        seq: 5,
        at_ms: Some(6),
    };
    assert_eq!(codec::encoded_len(&dead).unwrap(), DEAD_RUN_BYTES);
    let entry = crate::schedule::RunEntry {
        due: Due::Time(1),
        seq: 2,
        agreed_time_ms: Some(3),
        occurrence: 4,
        attempt: 5,
        outcome: RunOutcome::Failed { code: 6 },
        emitted: Some(7),
    };
    assert_eq!(codec::encoded_len(&entry).unwrap(), RUN_ENTRY_BYTES);
    let no_dead: Vec<DeadRun> = Vec::new();
    let no_history: Vec<crate::schedule::RunEntry> = Vec::new();
    assert_eq!(
        codec::encoded_len(&(true, policy, retry, no_dead, 0u64, no_history)).unwrap(),
        RUN_STATE_BYTES
    );
}
