//! The application side of a node, pure: decided blocks run through ccron's kernel
//! ([`BlockHost`], the one executor sim-bft's replicas run too), and the validity rule every
//! validator re-checks before voting for a block.
//!
//! [`LedgerHost<A>`] executes a node [`Block`] on any [`Application`] `A`; its requests and ticks
//! become the kernel's transactions with the senders the validator set authenticates, and the
//! kernel does the rest (exactly-once, tick gate, counters, digest, snapshot). [`validate_block`]
//! checks a proposal with [`BlockHost::validate`] (time by the kernel's rule over the verified
//! clock samples of the previous height, ticks, requests) plus what is the node format's own:
//! the samples' scope and each request's bounds. Nothing here does I/O or reads a clock: the
//! same blocks give the same digest on every node and on any engine.

use std::collections::BTreeMap;

use ccron::MemPages;
use ccron::host::{
    Application, Block as HostBlock, BlockHost, BlockLimits, BlockOutcome, ClientId, Digest32,
    HostError, Invalid, Proposal, ProposalTime, RequestClaim, SampleClaim, Signed, TickClaim,
    TickGate, TimeRule, Tx,
};

use crate::crypto::{Ed25519, SigningDomain};
use crate::request::{MAX_BLOCK_REQUEST_BYTES, MAX_BLOCK_REQUESTS, RequestError};
use crate::types::{Address, Block, Hash32, Validators};

/// How far height 1's agreed time (the proposer's clock) may be from a validator's clock.
pub const GENESIS_BOUND_MS: i64 = 10_000;

/// How far ahead of a validator's clock the median of a block's samples may be.
pub const HARD_LIMIT_MS: i64 = 10_000;

/// Most bytes a block may encode to: what the engine's value sync can carry with its commit
/// certificate (a sync answer is at most 10 MiB by default, a proposal part 4 MiB, a block
/// store record [`crate::store::MAX_RECORD_BYTES`]), with room for a certificate of
/// thousands of validators. Checked first, before any signature.
pub const MAX_BLOCK_BYTES: usize = 1024 * 1024;

/// The default tick period (ms) of every ticking component (the tick gate coalesces to one
/// evaluated tick per sender, component and period of agreed time).
pub const DEFAULT_TICK_PERIOD_MS: u64 = 200;

/// The default reserved pages of the host (the cron tables' schedules): 64 pages of 4 KiB, as
/// sim-bft's default replica configuration, so a ledger that runs there runs here unchanged.
pub const DEFAULT_PAGES: (usize, u32) = (4_096, 64);

/// What a block may carry (the kernel's [`BlockLimits`]).
pub const LIMITS: BlockLimits = BlockLimits {
    max_requests: MAX_BLOCK_REQUESTS,
    max_request_bytes: MAX_BLOCK_REQUEST_BYTES,
};

/// How a chain's ledger is set up, identically on every node (from the genesis).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerSetup {
    /// Number of validators.
    pub validators: u32,
    /// The ticking components and their tick periods (ms).
    pub tick_periods: BTreeMap<u32, u64>,
    /// Page size and number of the host's reserved pages.
    pub pages: (usize, u32),
}

/// A ledger a node drives with decided blocks: ccron's [`BlockHost`] over the application `A`.
pub struct LedgerHost<A> {
    host: BlockHost<A, MemPages>,
    /// The `(client, number)` of the requests of the last block, in block order (the kernel's
    /// first results are theirs).
    pub last_requests: Vec<(ClientId, u64)>,
}

impl<A> std::fmt::Debug for LedgerHost<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerHost")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// The agreed-time rule for `validators`: [`TimeRule`] with the engine's commit quorum
/// ([`Validators::quorum`], `floor(2n/3)+1`, at least 2f+1 for any n, so one commit's
/// precommits always carry enough samples), [`GENESIS_BOUND_MS`] and [`HARD_LIMIT_MS`].
pub fn time_rule(validators: &Validators) -> TimeRule {
    TimeRule::with_quorum(validators.quorum(), GENESIS_BOUND_MS, HARD_LIMIT_MS)
}

impl<A: Application> LedgerHost<A> {
    /// A fresh host of `app` (at height 0) for the chain's `setup`, identical on every node.
    pub fn new(app: A, setup: &LedgerSetup) -> Self {
        let gate = TickGate::new(setup.validators, setup.tick_periods.clone());
        let validators = setup.validators;
        let rule = TimeRule::with_quorum(
            ccron::host::two_thirds_quorum(validators),
            GENESIS_BOUND_MS,
            HARD_LIMIT_MS,
        );
        Self {
            host: BlockHost::new(app, MemPages::new(setup.pages.0, setup.pages.1), gate)
                .with_time_rule(rule),
            last_requests: Vec::new(),
        }
    }

    /// Executes one decided block through [`BlockHost::execute_block`]: its client requests
    /// first (in block order; the kernel runs each `(client, number)` at most once), then its
    /// ticks (each with its submitter's validator index: the kernel's gate refuses strangers,
    /// replays and floods).
    ///
    /// # Errors
    /// The host's error (a halted application, out-of-order height, time going back): the
    /// node stops.
    pub fn execute(
        &mut self,
        block: &Block,
        validators: &Validators,
    ) -> Result<BlockOutcome, HostError> {
        self.execute_with_clients(block, validators, &|r| r.client())
    }

    /// [`execute`](Self::execute) with the client id of each request given by `client_of`
    /// instead of derived from its key: for replaying another engine's recorded requests under
    /// that engine's client ids (`tests/cross_engine.rs`); a node always uses
    /// [`execute`](Self::execute).
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub fn execute_with_clients(
        &mut self,
        block: &Block,
        validators: &Validators,
        client_of: &dyn Fn(&crate::request::SignedRequest) -> ClientId,
    ) -> Result<BlockOutcome, HostError> {
        self.last_requests.clear();
        let mut txs = Vec::with_capacity(block.requests.len() + block.ticks.len());
        for r in &block.requests {
            let (client, number) = (client_of(r), r.request.number);
            self.last_requests.push((client, number));
            txs.push(Tx::Request {
                client,
                number,
                payload: r.request.payload.clone(),
            });
        }
        txs.extend(block.ticks.iter().map(|t| Tx::Tick {
            component: t.component,
            sender: validators.index_of(&t.submitter),
            number: t.number,
        }));
        self.host.execute_block(&HostBlock {
            height: block.height,
            agreed_time_ms: Some(block.agreed_time_ms),
            txs,
        })
    }

    /// The node's state digest after the last executed block: the kernel's
    /// ([`BlockHost::digest`]), what any engine's kernel gives after the same blocks.
    pub fn state_digest(&self) -> Digest32 {
        self.host.digest()
    }

    /// The application's own digest ([`Application::digest`]): comparable with any engine's
    /// copy of the same ledger.
    pub fn app_digest(&self) -> Digest32 {
        self.host.app().digest()
    }

    /// The kernel.
    pub fn host(&self) -> &BlockHost<A, MemPages> {
        &self.host
    }

    /// The application.
    pub fn app(&self) -> &A {
        self.host.app()
    }

    /// The host's snapshot ([`BlockHost::snapshot`]: everything the digest covers), for the
    /// node's durable snapshots (`crate::snapshot`).
    ///
    /// # Errors
    /// The host's (pages that do not read back, an encoding failure).
    pub fn snapshot(&self) -> Result<Vec<u8>, HostError> {
        self.host.snapshot()
    }

    /// Restores the host from [`snapshot`](Self::snapshot)'s bytes. On error the host may be
    /// partly restored: the caller drops it.
    ///
    /// # Errors
    /// The host's ([`HostError::BadSnapshot`], a halted store).
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), HostError> {
        self.host.restore(snapshot)?;
        self.last_requests.clear();
        Ok(())
    }

    /// The host's last executed height (0 at genesis).
    pub fn height(&self) -> u64 {
        self.host.last_height()
    }
}

/// What a validator knows about the previous height to check a block: the decided value id
/// at h-1 and its agreed time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrevCommit {
    /// Value id of the previous block.
    pub id: Hash32,
    /// Agreed time of the previous block.
    pub agreed_time_ms: i64,
}

/// Why a proposed block is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockRejection {
    /// The block encodes to more than [`MAX_BLOCK_BYTES`].
    #[error("block of {bytes} bytes, over the bound of {max}")]
    TooLarge {
        /// Its encoded size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// The samples' scope is not the previous decided block, or a first block carries samples.
    #[error("samples scope does not match the previous decided block")]
    WrongScope,
    /// The block does not carry the state digest after the previous height (this node's,
    /// which every honest node shares): a quorum's commit of it would vouch for a wrong state
    /// (`crate::catchup` checks snapshots against it).
    #[error("the block's previous state digest is not the state after height h-1")]
    WrongState,
    /// A request whose own bounds fail.
    #[error("request {index}: {reason}")]
    BadRequest {
        /// Its position in the block.
        index: usize,
        /// Why.
        reason: RequestError,
    },
    /// The kernel's verdict ([`BlockHost::validate`]).
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl BlockRejection {
    /// The reason's name, for counters (`too_large`, `wrong_scope`, `bad_request`, or the
    /// kernel's variant, e.g. `BadTickSignature`, `Time`).
    pub fn name(&self) -> String {
        match self {
            BlockRejection::TooLarge { .. } => "too_large".into(),
            BlockRejection::WrongScope => "wrong_scope".into(),
            BlockRejection::WrongState => "wrong_state".into(),
            BlockRejection::BadRequest { .. } => "bad_request".into(),
            BlockRejection::Invalid(inner) => {
                let debug = format!("{inner:?}");
                debug
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .next()
                    .unwrap_or("invalid")
                    .to_string()
            }
        }
    }

    /// Whether the refusal rests on this validator's own clock only (a time out of its local
    /// bounds): another honest validator may accept the block, so a quorum may still decide
    /// it and the node keeps it. Every other reason is a function of the chain every honest
    /// node shares: no quorum decides such a block, the node drops it.
    pub fn local_clock_only(&self) -> bool {
        matches!(
            self,
            BlockRejection::Invalid(Invalid::Time(ccron::host::TimeError::OutOfBounds { .. }))
        )
    }
}

/// The bytes a validator signs for its clock sample: the engine's vote-extension scope. Given
/// by the engine adapter ([`crate::Commit::sample_message`]).
pub type SampleMessage = fn(
    domain: &SigningDomain,
    height: u64,
    round: u32,
    id: &Hash32,
    validator: &Address,
    time_ms: i64,
) -> Vec<u8>;

/// Checks a proposed block as the next one of `ledger`, at this validator's clock `now_ms`:
///
/// - its size: at most [`MAX_BLOCK_BYTES`] encoded (first, before any signature);
/// - its `prev_state`: the state digest of `ledger` (the state after h-1), so that the
///   quorum that commits the block vouches for it (`crate::catchup`);
/// - the samples' scope: the block names the previous decided value (`prev_id`) and the round
///   of a commit of it (`prev_round`: any round, since honest nodes may hold commits of one
///   value from different rounds; the samples' signatures bind it);
/// - the kernel's checks ([`BlockHost::validate`]): height, time (at height 1 exactly
///   `genesis_ms`, no proposer's stamp and no local clock; later exactly
///   the rule over the previous height's verified samples, their median at most
///   [`HARD_LIMIT_MS`] ahead of `now_ms`), ticks (validators, ticking components, one per
///   component and submitter, above the replay floor, signed), requests (bounded, signed, no
///   `(client, number)` twice);
/// - each request's own bounds.
///
/// Every signature (samples, ticks, requests) is checked in the chain's signing `domain`: one
/// made for another chain is a bad signature.
///
/// # Errors
/// The first reason the block is invalid.
#[allow(clippy::too_many_arguments)]
pub fn validate_block<A: Application>(
    ledger: &LedgerHost<A>,
    block: &Block,
    prev: Option<PrevCommit>,
    genesis_ms: i64,
    now_ms: i64,
    validators: &Validators,
    domain: &SigningDomain,
    sample_message: SampleMessage,
) -> Result<(), BlockRejection> {
    let bytes = block.encode().len();
    if bytes > MAX_BLOCK_BYTES {
        return Err(BlockRejection::TooLarge {
            bytes,
            max: MAX_BLOCK_BYTES,
        });
    }
    if block.prev_state != Some(ledger.state_digest()) {
        return Err(BlockRejection::WrongState);
    }
    let time = match prev {
        None => {
            if !block.samples.is_empty()
                || block.prev_round != 0
                || block.prev_id != Hash32::default()
            {
                return Err(BlockRejection::WrongScope);
            }
            ProposalTime::Genesis { genesis_ms }
        }
        Some(p) => {
            if block.prev_id != p.id {
                return Err(BlockRejection::WrongScope);
            }
            let prev_height = block.height.saturating_sub(1);
            ProposalTime::Samples(
                block
                    .samples
                    .iter()
                    .map(|s| SampleClaim {
                        validator: validators.index_of(&s.validator),
                        time_ms: s.time_ms,
                        signed: Signed {
                            key: &s.validator.0,
                            message: sample_message(
                                domain,
                                prev_height,
                                block.prev_round,
                                &block.prev_id,
                                &s.validator,
                                s.time_ms,
                            ),
                            signature: &s.signature.0,
                        },
                    })
                    .collect(),
            )
        }
    };
    for (index, r) in block.requests.iter().enumerate() {
        r.check_bounds()
            .map_err(|reason| BlockRejection::BadRequest { index, reason })?;
    }
    let proposal = Proposal {
        height: block.height,
        agreed_time_ms: block.agreed_time_ms,
        time,
        ticks: block
            .ticks
            .iter()
            .map(|t| TickClaim {
                component: t.component,
                sender: validators.index_of(&t.submitter),
                number: t.number,
                signed: Signed {
                    key: &t.submitter.0,
                    message: crate::types::TickTx::signing_bytes(
                        domain,
                        t.component,
                        &t.submitter,
                        t.number,
                    ),
                    signature: &t.signature.0,
                },
            })
            .collect(),
        requests: block
            .requests
            .iter()
            .map(|r| RequestClaim {
                client: r.client(),
                number: r.request.number,
                encoded_len: r.encoded_len(),
                signed: Signed {
                    key: &r.request.client_key,
                    message: r.request.signing_bytes(domain),
                    signature: &r.signature.0,
                },
            })
            .collect(),
    };
    ledger
        .host()
        .validate(&proposal, &LIMITS, now_ms, &Ed25519)?;
    Ok(())
}

/// The agreed time a proposer gives the block at `height`: at height 1 its own clock, not
/// before the genesis time; later the kernel's rule over the previous height's samples
/// (`None` without a quorum of them).
pub fn agreed_time<A: Application>(
    ledger: &LedgerHost<A>,
    height: u64,
    genesis_ms: i64,
    now_ms: i64,
    samples: &[crate::types::CarriedSample],
    validators: &Validators,
) -> Option<i64> {
    let rule = ledger.host().time_rule();
    let previous = ledger.host().last_agreed_ms();
    if height <= 1 {
        // The genesis time itself: no proposer picks it, no local clock judges it.
        let _ = now_ms;
        return Some(previous.map_or(genesis_ms, |p| {
            genesis_ms.max(p.saturating_add(rule.epsilon_ms))
        }));
    }
    let pairs: Vec<(u32, i64)> = samples
        .iter()
        .filter_map(|s| Some((validators.index_of(&s.validator)?, s.time_ms)))
        .collect();
    rule.agreed_from(previous, ccron::host::TimeEvidence::Samples(&pairs))
        .ok()
}
