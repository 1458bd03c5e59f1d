//! The block-driven entry point any engine calls: one committed block (height or sequence
//! number, agreed time, ordered transactions that are ticks or client requests) in, results,
//! fires and a state digest out.
//!
//! Engines map onto it directly: sim-bft's primary + sequence number gives `height = seq`, a
//! Tendermint engine's decided value at height h gives `height = h` (rounds never reach the
//! application). The engine provides the order, the agreed time ([`super::time::TimeRule`] on
//! verified samples) and the authenticated sender of each transaction; [`BlockHost`] does the
//! rest, identically on every validator: tick authorization and the flood bound
//! ([`TickGate`]), dispatch to the [`Application`], fail-stop on a fatal application error.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::app::{AppError, Application, ClientId, Digest32, ExecContext, FireNote, Millis};
use super::ticks::{TickAuthority, TickCoalescer, TickRejection, ValidatorId};
use super::wire;
use crate::{MemPages, PagesError, ReservedPages, Tick};

/// One transaction of a committed block, as the engine decoded and authenticated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tx {
    /// A tick of `component`; `sender` is the validator whose tick sender signed it (`None`:
    /// the signer is not a validator's tick sender; the tick is refused).
    Tick {
        /// The component to evaluate.
        component: u32,
        /// The authenticated sender.
        sender: Option<ValidatorId>,
    },
    /// A client request: `payload` from the authenticated `client`.
    Request {
        /// The requester.
        client: ClientId,
        /// The request bytes (untrusted: the application must not panic on any).
        payload: Vec<u8>,
    },
}

/// A committed block (or batch) as ccron sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Height (Tendermint) or sequence number (PBFT): strictly increasing.
    pub height: u64,
    /// The block's agreed time (`None` when the engine runs without a time service).
    pub agreed_time_ms: Option<Millis>,
    /// The ordered transactions.
    pub txs: Vec<Tx>,
}

/// What one transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxResult {
    /// A client request's result (to send back to the client).
    Reply(Vec<u8>),
    /// A tick that was evaluated.
    TickEvaluated,
    /// A tick refused by the gate (not a validator, unknown component, coalesced): counted,
    /// nothing ran.
    TickSkipped(TickRejection),
    /// A tick the application refused (e.g. a component without a table); the block goes on.
    TickFailed(AppError),
}

/// The outcome of one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockOutcome {
    /// The block's height.
    pub height: u64,
    /// One result per transaction, in block order.
    pub results: Vec<TxResult>,
    /// The cron actions the block's ticks ran, in order (observation, not replicated state).
    pub fires: Vec<FireNote>,
    /// [`BlockHost::digest`] after the block.
    pub digest: Digest32,
}

/// Errors of [`BlockHost`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The application stopped (fail-stop) on a fatal error; nothing executes any more. The
    /// engine must stop this node loudly (and may restore it from a snapshot).
    #[error("halted: {0}")]
    Halted(AppError),
    /// A block at or below the last executed height.
    #[error("block {got} after block {last}: heights must increase")]
    OutOfOrder {
        /// Last executed height.
        last: u64,
        /// The block's height.
        got: u64,
    },
    /// A block whose agreed time is below the previous block's (the engine's time rule is
    /// monotonic, so this is an engine bug).
    #[error("agreed time {got} ms after {previous} ms")]
    TimeWentBack {
        /// Previous agreed time.
        previous: Millis,
        /// The block's.
        got: Millis,
    },
    /// A snapshot that does not decode or does not fit.
    #[error("bad snapshot: {0}")]
    BadSnapshot(String),
    /// The reserved pages refused an operation.
    #[error("pages: {0}")]
    Pages(#[from] PagesError),
}

/// Tick admission at execution: authorization, ticking components, the flood bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickGate {
    authority: TickAuthority,
    /// Ticking components and their tick periods (empty: every component ticks, none coalesced).
    periods: BTreeMap<u32, u64>,
    coalescer: TickCoalescer,
}

impl TickGate {
    /// A gate for `validators` validators whose components `periods` tick (component → tick
    /// period in ms; empty: any component, no coalescing).
    pub fn new(validators: u32, periods: BTreeMap<u32, u64>) -> Self {
        Self {
            authority: TickAuthority::new(validators),
            periods,
            coalescer: TickCoalescer::new(),
        }
    }

    /// Whether `component` ticks (listed, or no list).
    pub fn ticks(&self, component: u32) -> bool {
        self.periods.is_empty() || self.periods.contains_key(&component)
    }

    /// The tick period of `component`, if listed.
    pub fn period_ms(&self, component: u32) -> Option<u64> {
        self.periods.get(&component).copied()
    }

    /// The replicated coalescer state.
    pub fn coalescer(&self) -> &TickCoalescer {
        &self.coalescer
    }

    /// Replaces the coalescer state (a snapshot's, after a state transfer) and returns the old
    /// one.
    pub fn replace_coalescer(&mut self, coalescer: TickCoalescer) -> TickCoalescer {
        std::mem::replace(&mut self.coalescer, coalescer)
    }

    /// Admits an ordered tick: its sender must be a validator, its component must tick, and it
    /// must be the first of its sender, component and period of `agreed` time. Returns the
    /// sender.
    pub fn admit(
        &mut self,
        component: u32,
        sender: Option<ValidatorId>,
        agreed: Option<Millis>,
    ) -> Result<ValidatorId, TickRejection> {
        let sender = self.authority.authorize(sender)?;
        if !self.ticks(component) {
            return Err(TickRejection::UnknownComponent(component));
        }
        self.coalescer
            .admit(component, sender, self.period_ms(component), agreed)?;
        Ok(sender)
    }
}

/// Runs one admitted tick: the application's `on_tick`, then its fire notes into `fires`.
pub fn run_tick(
    app: &mut dyn Application,
    pages: &mut dyn ReservedPages,
    tick: Tick,
    fires: &mut Vec<FireNote>,
) -> Result<(), AppError> {
    let result = app.on_tick(tick, pages);
    app.take_fire_notes(fires);
    result
}

/// SHA-256 over the non-empty pages in ascending id order (id, length, bytes): for
/// [`MemPages`] the same as [`MemPages::digest`], for any store.
pub fn pages_digest(pages: &dyn ReservedPages) -> Result<Digest32, PagesError> {
    let mut h = Sha256::new();
    for id in 0..pages.num_pages() {
        if let Some(data) = pages.load(id)?
            && !data.is_empty()
        {
            h.update(id.to_le_bytes());
            h.update((data.len() as u64).to_le_bytes());
            h.update(data);
        }
    }
    Ok(h.finalize().into())
}

/// A ledger driven block by block: the application `A`, its reserved pages `P` (the cron
/// tables' schedules), the tick gate, and the last height and agreed time.
pub struct BlockHost<A, P = MemPages> {
    app: A,
    pages: P,
    gate: TickGate,
    last_height: u64,
    last_agreed_ms: Option<Millis>,
    halted: Option<AppError>,
}

impl<A, P> std::fmt::Debug for BlockHost<A, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockHost")
            .field("gate", &self.gate)
            .field("last_height", &self.last_height)
            .field("last_agreed_ms", &self.last_agreed_ms)
            .field("halted", &self.halted)
            .finish_non_exhaustive()
    }
}

/// The snapshot of a [`BlockHost`]: application snapshot, non-empty pages, last height, last
/// agreed time, coalescer entries.
type HostSnapshot = (
    Vec<u8>,
    Vec<(u32, Vec<u8>)>,
    u64,
    Option<Millis>,
    Vec<(u32, u32, i64)>,
);

impl<A: Application, P: ReservedPages> BlockHost<A, P> {
    /// A host for `app` over `pages` with `gate`, at genesis (height 0). Call
    /// [`BlockHost::reload`] when `pages` come from durable storage.
    pub fn new(app: A, pages: P, gate: TickGate) -> Self {
        Self {
            app,
            pages,
            gate,
            last_height: 0,
            last_agreed_ms: None,
            halted: None,
        }
    }

    /// Reloads what the application caches from the pages (after a restart from storage).
    pub fn reload(&mut self) -> Result<(), AppError> {
        self.app.reload(&self.pages)
    }

    /// Executes one committed block. Blocks must come in increasing height; a halted host
    /// executes nothing ([`HostError::Halted`]).
    pub fn execute_block(&mut self, block: &Block) -> Result<BlockOutcome, HostError> {
        if let Some(e) = &self.halted {
            return Err(HostError::Halted(e.clone()));
        }
        if block.height <= self.last_height {
            return Err(HostError::OutOfOrder {
                last: self.last_height,
                got: block.height,
            });
        }
        if let (Some(previous), Some(got)) = (self.last_agreed_ms, block.agreed_time_ms)
            && got < previous
        {
            return Err(HostError::TimeWentBack { previous, got });
        }
        let ctx = ExecContext {
            seq: block.height,
            agreed_time_ms: block.agreed_time_ms,
        };
        let mut results = Vec::with_capacity(block.txs.len());
        let mut fires = Vec::new();
        for tx in &block.txs {
            let result = match tx {
                Tx::Request { client, payload } => {
                    TxResult::Reply(self.app.execute(ctx, *client, payload))
                }
                Tx::Tick { component, sender } => {
                    match self.gate.admit(*component, *sender, block.agreed_time_ms) {
                        Err(e) => {
                            tracing::debug!(height = block.height, component, reason = %e, "tick skipped");
                            TxResult::TickSkipped(e)
                        }
                        Ok(_) => {
                            let tick = Tick::new(*component, block.height, block.agreed_time_ms);
                            match run_tick(&mut self.app, &mut self.pages, tick, &mut fires) {
                                Ok(()) => TxResult::TickEvaluated,
                                Err(e) => {
                                    tracing::warn!(height = block.height, component, error = %e, "tick rejected");
                                    TxResult::TickFailed(e)
                                }
                            }
                        }
                    }
                }
            };
            results.push(result);
            if let Some(e) = self.app.halted() {
                tracing::error!(height = block.height, cause = %e, "application halted (fail-stop)");
                self.halted = Some(e.clone());
                break;
            }
        }
        self.last_height = block.height;
        if block.agreed_time_ms.is_some() {
            self.last_agreed_ms = block.agreed_time_ms;
        }
        if let Some(e) = &self.halted {
            return Err(HostError::Halted(e.clone()));
        }
        Ok(BlockOutcome {
            height: block.height,
            results,
            fires,
            digest: self.digest(),
        })
    }

    /// Digest of the replicated state: the application's digest, the pages, the last agreed
    /// time and the coalescer. Equal on every honest validator after the same blocks.
    pub fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"ccron-host-state");
        h.update(self.app.digest());
        match pages_digest(&self.pages) {
            Ok(d) => h.update(d),
            // A store that cannot read its own pages: the digest says so (never equal to a
            // healthy validator's).
            Err(e) => h.update(format!("pages unreadable: {e}").as_bytes()),
        }
        h.update(self.last_agreed_ms.unwrap_or(i64::MIN).to_le_bytes());
        for (c, s, p) in self.gate.coalescer().entries() {
            h.update(c.to_le_bytes());
            h.update(s.to_le_bytes());
            h.update(p.to_le_bytes());
        }
        h.finalize().into()
    }

    /// Canonical encoding of the whole replicated state (for the engine's state sync).
    pub fn snapshot(&self) -> Result<Vec<u8>, HostError> {
        let mut pages = Vec::new();
        for id in 0..self.pages.num_pages() {
            if let Some(d) = self.pages.load(id)?
                && !d.is_empty()
            {
                pages.push((id, d.to_vec()));
            }
        }
        let snap: HostSnapshot = (
            self.app.snapshot(),
            pages,
            self.last_height,
            self.last_agreed_ms,
            self.gate.coalescer().entries().collect(),
        );
        wire::encode(&snap).map_err(|e| HostError::BadSnapshot(e.to_string()))
    }

    /// Replaces the state with a snapshot of [`BlockHost::snapshot`]. The snapshot is decoded
    /// and the application restored before any page changes; a store that then refuses a write
    /// halts the host.
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), HostError> {
        let (app, pages, height, agreed, evals): HostSnapshot =
            wire::decode(snapshot, wire::ABSOLUTE_LIMIT_BYTES)
                .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        if pages
            .iter()
            .any(|(id, d)| *id >= self.pages.num_pages() || d.len() > self.pages.page_size())
        {
            return Err(HostError::BadSnapshot("pages do not fit the store".into()));
        }
        self.app
            .restore(&app)
            .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        let by_id: BTreeMap<u32, Vec<u8>> = pages.into_iter().collect();
        for id in 0..self.pages.num_pages() {
            let written = match by_id.get(&id) {
                Some(d) => self.pages.save(id, d),
                None => self.pages.zero(id),
            };
            if let Err(e) = written {
                let fatal = AppError::Fatal(format!("restored pages not saved: {e}"));
                self.halted = Some(fatal.clone());
                return Err(HostError::Halted(fatal));
            }
        }
        self.app
            .reload(&self.pages)
            .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        self.last_height = height;
        self.last_agreed_ms = agreed;
        self.gate
            .replace_coalescer(TickCoalescer::from_entries(evals));
        Ok(())
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The reserved pages.
    pub fn pages(&self) -> &P {
        &self.pages
    }

    /// The tick gate.
    pub fn gate(&self) -> &TickGate {
        &self.gate
    }

    /// Last executed height (0 at genesis).
    pub fn last_height(&self) -> u64 {
        self.last_height
    }

    /// Last agreed time.
    pub fn last_agreed_ms(&self) -> Option<Millis> {
        self.last_agreed_ms
    }

    /// Why the host stopped, if it did.
    pub fn halted(&self) -> Option<&AppError> {
        self.halted.as_ref()
    }
}

/// Runs `blocks` through `host` in order and returns every block's outcome (the equivalence
/// helper: feed the same blocks to two engines' hosts, or to sim-bft and to a host, and compare
/// fires and digests). Stops at the first error.
pub fn replay<A: Application, P: ReservedPages>(
    host: &mut BlockHost<A, P>,
    blocks: &[Block],
) -> Result<Vec<BlockOutcome>, HostError> {
    blocks.iter().map(|b| host.execute_block(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::cron_ledger::tests::ledger;

    fn host() -> BlockHost<crate::host::CronLedger<crate::host::cron_ledger::tests::KvLedger>> {
        BlockHost::new(
            ledger(),
            MemPages::new(4_096, 4),
            TickGate::new(4, [(1, 1_000)].into_iter().collect()),
        )
    }

    fn tick(sender: Option<u32>) -> Tx {
        Tx::Tick {
            component: 1,
            sender,
        }
    }

    fn put() -> Tx {
        Tx::Request {
            client: 7,
            payload: b"x".to_vec(),
        }
    }

    fn blocks() -> Vec<Block> {
        (1..=6u64)
            .map(|h| Block {
                height: h,
                agreed_time_ms: Some(1_000 * h as i64 + 500),
                txs: vec![
                    put(),
                    tick(Some((h % 4) as u32)),
                    tick(Some((h % 4) as u32)),
                ],
            })
            .collect()
    }

    #[test]
    fn gate_refuses_strangers_unknown_components_and_floods() {
        let mut h = host();
        let b = Block {
            height: 1,
            agreed_time_ms: Some(1_500),
            txs: vec![
                tick(None),
                tick(Some(4)),
                Tx::Tick {
                    component: 9,
                    sender: Some(0),
                },
                tick(Some(0)),
                tick(Some(0)),
                tick(Some(1)),
                put(),
            ],
        };
        let o = h.execute_block(&b).unwrap();
        assert_eq!(
            o.results,
            vec![
                TxResult::TickSkipped(TickRejection::NotAValidator),
                TxResult::TickSkipped(TickRejection::NotAValidator),
                TxResult::TickSkipped(TickRejection::UnknownComponent(9)),
                TxResult::TickEvaluated,
                TxResult::TickSkipped(TickRejection::Coalesced {
                    component: 1,
                    sender: 0,
                    period: 1
                }),
                TxResult::TickEvaluated,
                TxResult::Reply(Vec::new()),
            ]
        );
        // The periodic entry fired once (first evaluated tick), not per tick.
        assert_eq!(o.fires.len(), 1);
        assert_eq!(h.app().fires().get(&(1, 0)), Some(&1));
        assert_eq!(o.digest, h.digest());
    }

    #[test]
    fn heights_increase_and_time_never_goes_back() {
        let mut h = host();
        let b = |height, t| Block {
            height,
            agreed_time_ms: Some(t),
            txs: vec![],
        };
        h.execute_block(&b(2, 5_000)).unwrap();
        assert_eq!(
            h.execute_block(&b(2, 6_000)),
            Err(HostError::OutOfOrder { last: 2, got: 2 })
        );
        assert_eq!(
            h.execute_block(&b(3, 4_999)),
            Err(HostError::TimeWentBack {
                previous: 5_000,
                got: 4_999
            })
        );
        assert_eq!(h.last_height(), 2);
        h.execute_block(&b(5, 5_000)).unwrap();
        assert_eq!(h.last_height(), 5);
    }

    #[test]
    fn replicas_agree_and_a_restored_one_continues_identically() {
        let all = blocks();
        let mut a = host();
        let mut b = host();
        let oa = replay(&mut a, &all).unwrap();
        let ob = replay(&mut b, &all).unwrap();
        assert_eq!(oa, ob);
        assert!(oa.iter().map(|o| o.fires.len()).sum::<usize>() >= 5);
        // A third restored from a snapshot taken midway continues to the same state.
        let mut c = host();
        let mut d = host();
        replay(&mut c, &all[..3]).unwrap();
        d.restore(&c.snapshot().unwrap()).unwrap();
        assert_eq!(d.digest(), c.digest());
        assert_eq!(d.last_height(), 3);
        let od = replay(&mut d, &all[3..]).unwrap();
        assert_eq!(od.last().map(|o| o.digest), oa.last().map(|o| o.digest));
        // A different agreed time changes the outcome (the digest covers it).
        let mut e = host();
        let mut shifted = all.clone();
        shifted[5].agreed_time_ms = Some(9_999);
        let oe = replay(&mut e, &shifted).unwrap();
        assert_ne!(oe.last().map(|o| o.digest), oa.last().map(|o| o.digest));
        assert!(d.restore(b"junk").is_err());
        assert_eq!(d.digest(), a.digest());
    }

    use proptest::prelude::*;

    fn arb_tx() -> impl Strategy<Value = Tx> {
        prop_oneof![
            (0u32..3, proptest::option::weighted(0.9, 0u32..6))
                .prop_map(|(component, sender)| { Tx::Tick { component, sender } }),
            (0u64..4, proptest::collection::vec(any::<u8>(), 0..4))
                .prop_map(|(client, payload)| Tx::Request { client, payload }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any sequence of blocks (ticks from validators and strangers, known and unknown
        /// components, floods, requests, time jumps): two hosts fed the same blocks end equal,
        /// and a host restored from the first one's snapshot at any point continues to the
        /// same digest and the same fires.
        #[test]
        fn hosts_fed_the_same_blocks_agree_even_across_a_restore(
            steps in proptest::collection::vec(
                (0i64..3_000, proptest::collection::vec(arb_tx(), 0..6)),
                1..24,
            ),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut t = 0i64;
            let blocks: Vec<Block> = steps
                .into_iter()
                .enumerate()
                .map(|(i, (dt, txs))| {
                    t += dt;
                    Block { height: i as u64 + 1, agreed_time_ms: Some(t), txs }
                })
                .collect();
            let mut a = host();
            let mut b = host();
            let oa = replay(&mut a, &blocks).unwrap();
            let ob = replay(&mut b, &blocks).unwrap();
            prop_assert_eq!(&oa, &ob);
            let k = cut.index(blocks.len() + 1);
            let mut c = host();
            replay(&mut c, &blocks[..k]).unwrap();
            let mut d = host();
            d.restore(&c.snapshot().unwrap()).unwrap();
            prop_assert_eq!(d.digest(), c.digest());
            let od = replay(&mut d, &blocks[k..]).unwrap();
            prop_assert_eq!(&od[..], &oa[k..]);
            prop_assert_eq!(d.digest(), a.digest());
            prop_assert_eq!(d.app().fires(), a.app().fires());
        }
    }

    #[test]
    fn a_failed_schedule_save_halts_the_host() {
        let mut h = BlockHost::new(
            ledger(),
            crate::pages::CrashAfter::new(MemPages::new(4_096, 4), 0),
            TickGate::new(4, BTreeMap::new()),
        );
        let b = Block {
            height: 1,
            agreed_time_ms: Some(1_000),
            txs: vec![tick(Some(0)), put()],
        };
        assert!(matches!(
            h.execute_block(&b),
            Err(HostError::Halted(AppError::Fatal(_)))
        ));
        assert!(h.halted().is_some());
        // Nothing executes any more.
        let next = Block { height: 2, ..b };
        assert!(matches!(h.execute_block(&next), Err(HostError::Halted(_))));
    }
}
