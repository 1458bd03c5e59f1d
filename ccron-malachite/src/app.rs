//! The application side, engine-independent and pure: the ledger trait the node drives with
//! decided blocks, the demo ledger (a ccron cron table), the agreed-time rule and the block
//! validity rule every validator re-checks.
//!
//! Nothing here does I/O or reads a clock: the same blocks give the same state digest on every
//! node and on any engine (see the cross-engine test).

use std::collections::BTreeSet;

use ccron::{
    CronEntry, CronTable, CronTableRegistry, MemPages, PageAllocator, Periodic, Tick, TimeMs,
};
use malachitebft_core_types::{Round, VoteExtensionScope};
use sha2::{Digest, Sha256};

use crate::context::{
    Block, ClockSample, Ctx, Hash32, Height, PubKey, ValidatorSet, extension_signing_bytes,
    verify_raw,
};

/// What executing one block did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockOutcome {
    /// Ticks evaluated.
    pub ticks: u64,
    /// Cron-table actions fired.
    pub fires: u64,
}

/// An application error while executing a decided block: the node stops (never carries on).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// A cron table failed (unknown component, page error).
    #[error("cron table: {0}")]
    Registry(#[from] ccron::RegistryError),
}

/// A ledger the node drives: the small trait between the engine plumbing and the application.
pub trait LedgerApp: Send {
    /// The components that tick, with their tick period (ms).
    fn tick_components(&self) -> Vec<(u32, u64)>;
    /// Whether `component` has a cron table.
    fn has_component(&self, component: u32) -> bool;
    /// Executes one decided block: every tick at (height, agreed time).
    ///
    /// # Errors
    /// A cron-table failure; the node stops.
    fn execute(&mut self, block: &Block) -> Result<BlockOutcome, AppError>;
    /// The state digest after the last executed block.
    fn state_digest(&self) -> [u8; 32];
}

/// The demo ledger's component id.
pub const DEMO_COMPONENT: u32 = 1;
/// How often validators submit a tick for the demo component.
pub const DEMO_TICK_PERIOD_MS: u64 = 200;

/// The demo ledger's state (acted on by its cron entries).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DemoState {
    /// Runs of the 1-second heartbeat.
    pub heartbeats: u64,
    /// Runs of the 5-second settlement.
    pub settlements: u64,
    /// Pending work items, added by the heartbeat and drained by the rule.
    pub backlog: u64,
    /// Runs of the drain rule.
    pub drains: u64,
}

/// The demo ledger: one cron table with two periodic entries (every 1 s and every 5 s of agreed
/// time) and one user rule on the state (drain the backlog when it exceeds 3).
pub struct DemoLedger {
    registry: CronTableRegistry<DemoState>,
    pages: MemPages,
    state: DemoState,
    digest: [u8; 32],
    /// Ticks executed so far.
    pub ticks_executed: u64,
    /// Actions fired so far.
    pub fires: u64,
}

impl std::fmt::Debug for DemoLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoLedger")
            .field("state", &self.state)
            .field("ticks_executed", &self.ticks_executed)
            .field("fires", &self.fires)
            .finish()
    }
}

impl DemoLedger {
    /// A fresh demo ledger (identical on every node).
    ///
    /// # Errors
    /// Only if the fixed table setup were invalid (it is not).
    pub fn new() -> Result<Self, String> {
        let mut alloc = PageAllocator::new(0, 8);
        let range = alloc.allocate(2).ok_or("no free pages")?;
        let mut table = CronTable::with_persistence(DEMO_COMPONENT, range, 64);
        let every_second = Periodic::every_ms(1_000).map_err(|e| e.to_string())?;
        table
            .add(CronEntry::<DemoState>::periodic(0, every_second, |ctx| {
                ctx.state.heartbeats += 1;
                ctx.state.backlog += 1;
            }))
            .map_err(|e| e.to_string())?;
        let every_5s = Periodic::every_ms(5_000).map_err(|e| e.to_string())?;
        table
            .add(CronEntry::<DemoState>::periodic(1, every_5s, |ctx| {
                ctx.state.settlements += 1;
            }))
            .map_err(|e| e.to_string())?;
        table
            .add(CronEntry::<DemoState>::new(
                2,
                |ctx| ctx.state.backlog > 3,
                |ctx| {
                    ctx.state.backlog = 0;
                    ctx.state.drains += 1;
                },
            ))
            .map_err(|e| e.to_string())?;
        let mut registry = CronTableRegistry::new();
        registry.register(table).map_err(|e| e.to_string())?;
        let pages = MemPages::new(4096, 8);
        registry.reload(&pages).map_err(|e| e.to_string())?;
        Ok(DemoLedger {
            registry,
            pages,
            state: DemoState::default(),
            digest: [0; 32],
            ticks_executed: 0,
            fires: 0,
        })
    }

    /// The state.
    pub fn state(&self) -> &DemoState {
        &self.state
    }

    /// Executes one tick (also used directly by the cross-engine test).
    ///
    /// # Errors
    /// A cron-table failure.
    pub fn execute_tick(&mut self, tick: &Tick) -> Result<u64, AppError> {
        let outcome = self
            .registry
            .evaluate(tick, &mut self.state, &mut self.pages)?;
        self.ticks_executed += 1;
        let fired = outcome.fired.len() as u64;
        self.fires += fired;
        let mut h = Sha256::new();
        h.update(self.digest);
        h.update(tick.component_id.to_le_bytes());
        h.update(tick.bft_sequence_num.to_le_bytes());
        h.update(tick.agreed_time_ms.unwrap_or(i64::MIN).to_le_bytes());
        for f in &outcome.fired {
            h.update(f.position.to_le_bytes());
            h.update(
                f.due
                    .and_then(|d| d.time_ms())
                    .unwrap_or(i64::MIN)
                    .to_le_bytes(),
            );
        }
        h.update(self.state.heartbeats.to_le_bytes());
        h.update(self.state.settlements.to_le_bytes());
        h.update(self.state.backlog.to_le_bytes());
        h.update(self.state.drains.to_le_bytes());
        self.digest = h.finalize().into();
        Ok(fired)
    }
}

impl LedgerApp for DemoLedger {
    fn tick_components(&self) -> Vec<(u32, u64)> {
        vec![(DEMO_COMPONENT, DEMO_TICK_PERIOD_MS)]
    }

    fn has_component(&self, component: u32) -> bool {
        self.registry.get(component).is_some()
    }

    fn execute(&mut self, block: &Block) -> Result<BlockOutcome, AppError> {
        let mut out = BlockOutcome::default();
        for tx in &block.ticks {
            let tick = Tick::new(tx.component, block.height, Some(block.agreed_time_ms));
            out.fires += self.execute_tick(&tick)?;
            out.ticks += 1;
        }
        Ok(out)
    }

    fn state_digest(&self) -> [u8; 32] {
        self.digest
    }
}

/// The agreed-time rule: at height 1 the genesis time; after that
/// `max(previous + 1, median of the signed samples of the previous height)` (lower median).
/// `None` when a later height has no samples (such a block is invalid).
pub fn agreed_time(
    height: u64,
    genesis_ms: TimeMs,
    prev_ms: TimeMs,
    samples: &[i64],
) -> Option<TimeMs> {
    if height <= 1 {
        return Some(genesis_ms);
    }
    let mut s = samples.to_vec();
    if s.is_empty() {
        return None;
    }
    s.sort_unstable();
    let median = *s.get((s.len() - 1) / 2)?;
    Some(median.max(prev_ms.saturating_add(1)))
}

/// Why a proposed block is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockRejection {
    /// The block is for another height.
    #[error("block for height {got}, expected {expected}")]
    WrongHeight {
        /// Claimed.
        got: u64,
        /// Expected.
        expected: u64,
    },
    /// The samples' scope is not the previous commit.
    #[error("samples scope does not match the previous commit")]
    WrongScope,
    /// Fewer samples than a quorum.
    #[error("{got} clock samples, a quorum is {quorum}")]
    TooFewSamples {
        /// Carried.
        got: usize,
        /// Needed.
        quorum: usize,
    },
    /// A sample from a non-validator, a duplicate, or out of order.
    #[error("clock sample from a non-validator or repeated")]
    BadSampler,
    /// A sample whose signature does not verify.
    #[error("clock sample signature does not verify")]
    BadSampleSignature,
    /// The claimed agreed time is not the rule's result.
    #[error("claimed agreed time {claimed}, the rule gives {computed}")]
    WrongTime {
        /// Claimed by the proposer.
        claimed: i64,
        /// Recomputed.
        computed: i64,
    },
    /// A tick for an unknown component, repeated, or from a non-validator.
    #[error("tick transaction for an unknown component, repeated, or not from a validator")]
    BadTick,
}

/// What a validator knows about the previous height to check a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrevCommit {
    /// Round of the previous commit.
    pub round: u32,
    /// Value id of the previous block.
    pub id: Hash32,
    /// Agreed time of the previous block.
    pub agreed_time_ms: i64,
}

/// Checks a proposed block at `height` (every validator, before voting for it).
///
/// # Errors
/// The first reason the block is invalid.
pub fn validate_block(
    block: &Block,
    height: u64,
    prev: Option<PrevCommit>,
    genesis_ms: i64,
    validators: &ValidatorSet,
    has_component: &dyn Fn(u32) -> bool,
) -> Result<(), BlockRejection> {
    if block.height != height {
        return Err(BlockRejection::WrongHeight {
            got: block.height,
            expected: height,
        });
    }
    let computed = match prev {
        None => {
            if !block.samples.is_empty()
                || block.prev_round != 0
                || block.prev_id != Hash32::default()
            {
                return Err(BlockRejection::WrongScope);
            }
            genesis_ms
        }
        Some(p) => {
            if block.prev_round != p.round || block.prev_id != p.id {
                return Err(BlockRejection::WrongScope);
            }
            let quorum = validators.quorum();
            if block.samples.len() < quorum {
                return Err(BlockRejection::TooFewSamples {
                    got: block.samples.len(),
                    quorum,
                });
            }
            let mut last = None;
            for s in &block.samples {
                if !validators.contains(&s.validator) || last.is_some_and(|l| l >= s.validator) {
                    return Err(BlockRejection::BadSampler);
                }
                last = Some(s.validator);
                let scope = VoteExtensionScope::<Ctx>::new(
                    Height(height - 1),
                    Round::new(p.round),
                    p.id,
                    s.validator,
                );
                let bytes = extension_signing_bytes(&scope, &ClockSample { time_ms: s.time_ms });
                if !verify_raw(&PubKey(s.validator.0), &bytes, &s.signature) {
                    return Err(BlockRejection::BadSampleSignature);
                }
            }
            let times: Vec<i64> = block.samples.iter().map(|s| s.time_ms).collect();
            agreed_time(height, genesis_ms, p.agreed_time_ms, &times).ok_or(
                BlockRejection::TooFewSamples {
                    got: 0,
                    quorum: validators.quorum(),
                },
            )?
        }
    };
    if block.agreed_time_ms != computed {
        return Err(BlockRejection::WrongTime {
            claimed: block.agreed_time_ms,
            computed,
        });
    }
    let mut seen = BTreeSet::new();
    for t in &block.ticks {
        if !has_component(t.component)
            || !seen.insert(t.component)
            || !validators.contains(&t.submitter)
        {
            return Err(BlockRejection::BadTick);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreed_time_is_genesis_then_monotone_median() {
        assert_eq!(agreed_time(1, 500, 0, &[]), Some(500));
        assert_eq!(agreed_time(2, 500, 500, &[]), None);
        assert_eq!(
            agreed_time(2, 500, 500, &[900, 700, 800, 10_000]),
            Some(800)
        );
        // A median in the past does not move time backwards.
        assert_eq!(agreed_time(3, 500, 1_000, &[10, 20, 30]), Some(1_001));
    }
}
