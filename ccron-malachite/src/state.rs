//! The adapter's state between the engine and the node: the engine-free [`NodeCore`] plus what
//! is Malachite's own (the validator set in the engine's type, proposal parts this node made or
//! received early, their durable log). One method per kind of engine request: build, judge,
//! decide, serve sync.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::Bytes;
use ccron::host::Application;
use ccron_node::catchup::running;
use ccron_node::catchup::serve::OfferSlot;
use ccron_node::proposals::{Admitted, BookPart, PartLimits, ProposalBook, Verdict};
use ccron_node::store::{PartLog, SYNCED_LOG, SyncedBlock};
use ccron_node::{Factory, NodeCore, NodeError, NodeOptions};
use malachitebft_app_channel::app::engine::host::{HeightParams, SyncedValueOutcome};
use malachitebft_app_channel::app::types::core::{
    CommitCertificate, ExtendedCommitCertificate, LinearTimeouts, Round, SignedExtension, Validity,
    VoteExtensionPolicy, VoteExtensions,
};
use malachitebft_app_channel::app::types::sync::RawDecidedValue;
use malachitebft_app_channel::app::types::{LocallyProposedValue, ProposedValue};

use crate::commit::MalachiteCommit;
use crate::context::{
    Address, Block, Ctx, Ed25519Signer, Ed25519Verifier, Height, ProposalPart, RefusedSignatures,
    ValidatorSet, Value, VerifiedVotes, proposer_of,
};
use crate::guard::{GuardedSigner, SharedGuard};
use crate::reputation::{LAG, Outcomes, WINDOW};
use crate::round0::{ArrivalWatch, Arrivals};

/// Most decided values one sync answer carries.
const MAX_SYNC_VALUES: usize = 50;

/// Most bytes of values and certificates one sync answer carries: below the engine's
/// `max_response_size` (10 MiB by default), so an answer is never refused for its size (the
/// first value always goes: a block and its certificate are far below it,
/// `ccron_node::ledger::MAX_BLOCK_BYTES`).
const MAX_SYNC_BYTES: usize = 6 * 1024 * 1024;

/// The engine's round timeouts.
pub fn timeouts() -> LinearTimeouts {
    use std::time::Duration;
    LinearTimeouts {
        propose: Duration::from_millis(1_000),
        propose_delta: Duration::from_millis(250),
        prevote: Duration::from_millis(500),
        prevote_delta: Duration::from_millis(250),
        precommit: Duration::from_millis(500),
        precommit_delta: Duration::from_millis(250),
        rebroadcast: Duration::from_millis(2_000),
        max_timeout: Duration::from_secs(10),
    }
}

/// One validator's state on Malachite (see the module documentation).
pub struct State<A> {
    /// The engine-free node.
    pub core: NodeCore<A, MalachiteCommit>,
    /// The validator set, in the engine's type.
    pub vset: ValidatorSet,
    me: Address,
    signer: Ed25519Signer,
    /// What this validator's key signed (beside the key): checked before every vote,
    /// proposal and own part.
    guard: SharedGuard,
    parts: PartLog<ProposalPart>,
    /// The blocks value sync handed this node, not yet decided: durable before the engine
    /// hears the verdict (`ccron_node::store::SyncedBlock`), so a decision the engine's WAL
    /// replays after a crash finds its block.
    synced: PartLog<SyncedBlock>,
    /// The parts this node proposed, by (height, round): never two blocks for one round.
    my_parts: BTreeMap<(u64, u32), ProposalPart>,
    /// Every part held for undecided heights (own and others'), with the flood limits.
    book: ProposalBook<ProposalPart>,
    /// Engine messages the verifier refused (copied into the status at each decision).
    refused: Arc<RefusedSignatures>,
    /// Engine votes the verifier accepted, per voter (copied into the status at each
    /// decision).
    verified: Arc<VerifiedVotes>,
    /// This node's history and catch-up offer, published after each decision for the
    /// catch-up routes (`ccron_node::catchup::serve`).
    offers: OfferSlot,
    /// The node's snapshot directory (read to build the offer).
    snapshots: ccron_node::snapshot::Snapshots,
    /// The failed rounds 0 read from the decided blocks: who proposes round 0
    /// ([`crate::reputation`]).
    outcomes: Outcomes,
    /// The round-0 proposal arrivals this node observed: how short its round 0 is
    /// ([`crate::round0`]).
    arrivals: Arrivals,
    /// When the current height's round 0 started (the loop's monotonic clock).
    watch: ArrivalWatch,
}

impl BookPart for ProposalPart {
    fn round(&self) -> u32 {
        self.round.as_u32().unwrap_or(0)
    }
    fn value_id(&self) -> ccron_node::Hash32 {
        self.block.id()
    }
    fn size(&self) -> usize {
        // The block's encoding plus the part's own fields.
        self.block.encode().len() + 160
    }
}

/// What the engine's `RestreamProposal` led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restream {
    /// These parts, to publish again (the value's parts as held, or this node's new part for a
    /// re-proposal at a new round).
    Publish(Vec<ProposalPart>),
    /// The node does not hold the value (counted and traced).
    Unknown,
    /// This node already proposed another value in that round: it never signs a second one.
    Refused,
    /// The signing guard refused the part (counted in `status.json` `signing`).
    Guarded(ccron_node::signguard::SignRefusal),
}

impl<A: Application> State<A> {
    /// Opens the node (`NodeCore::open`), its part log and its synced-value log: the undecided
    /// blocks it had seen, proposed or taken by value sync are remembered again (the engine's
    /// WAL replays them).
    ///
    /// # Errors
    /// The node's.
    pub fn open(opts: NodeOptions, factory: &Factory<A>) -> Result<Self, NodeError> {
        let dir = ccron_node::core::node_dir(&opts.home, opts.index);
        let wal_present = dir.join("wal").exists();
        // What this key signed (kept beside it): without the WAL (a wiped home) nothing at or
        // below the highest height recorded is signed again, and a node that would start
        // there refuses to, before it executes anything (`SigningStateError::SignedAhead`).
        let guard =
            ccron_node::signguard::SigningGuard::open(&opts.signing_state_path(), wal_present)?;
        if guard.state().floor > 0 {
            let last =
                ccron_node::store::BlockStore::<MalachiteCommit>::open(&dir.join("blocks.log"))?
                    .last_height();
            guard.check_start(last + 1)?;
        }
        let mut core = NodeCore::open(opts, factory)?;
        // A node that ran before (its engine WAL exists) must still have its part log: without
        // it a restarted proposer could sign a second block for a round it proposed in.
        let parts = PartLog::<ProposalPart>::open_expecting(&dir.join("parts.log"), wal_present)?;
        // Absent in a home from before it existed: created empty (no synced value was ever
        // kept then).
        let synced = PartLog::<SyncedBlock>::open(&dir.join(SYNCED_LOG))?;
        guard.check_start(core.last_height() + 1)?;
        core.status_mut().signing = guard.counters().clone();
        let guard = SharedGuard::new(guard);
        let keys: Vec<[u8; 32]> = core.validators().addresses().iter().map(|a| a.0).collect();
        let vset = ValidatorSet::new(&keys);
        let signer = Ed25519Signer::of(core.signer().clone(), core.domain().clone());
        let me = Address::from(core.me());
        let last = core.last_height();
        let mut my_parts = BTreeMap::new();
        let mut book = ProposalBook::new(PartLimits::default(), last + 1);
        for p in parts.parts() {
            if p.height.0 > last {
                core.remember(p.block.clone());
                if p.proposer == me {
                    my_parts.insert((p.height.0, p.round.as_u32().unwrap_or(0)), p.clone());
                    book.keep_own(p.clone());
                } else {
                    // Persisted only once judged valid or refused on the local clock only.
                    book.keep(b"", p.clone(), Verdict::Valid);
                }
            }
        }
        for s in synced.parts() {
            if s.block.height > last {
                core.remember(s.block.clone());
            }
        }
        let snapshots = ccron_node::snapshot::Snapshots::open(&dir.join("snapshots"))?;
        let outcomes = read_outcomes(&core);
        if !outcomes.complete_for(last + 1) {
            tracing::warn!(
                height = last + 1,
                "proposer reputation: the decided blocks of its window are not all here \
                 (restored or pruned); unknown rounds 0 count as not failed"
            );
        }
        let offers = OfferSlot::new();
        offers.refresh(
            &snapshots,
            core.history_min_height().saturating_sub(1),
            last,
            |h| core.decided(h),
        );
        Ok(Self {
            core,
            vset,
            me,
            signer,
            guard,
            parts,
            synced,
            my_parts,
            book,
            refused: Arc::default(),
            verified: Arc::default(),
            offers,
            snapshots,
            outcomes,
            arrivals: Arrivals::default(),
            watch: ArrivalWatch::default(),
        })
    }

    /// The proposer of `(height, round)`: the round-0 proposer by reputation
    /// ([`crate::reputation`], from this node's decided blocks: the same on every node that
    /// holds them, for any height up to three above the last decided one), plain rotation for
    /// rounds `>= 1`. What the engine is told at each height ([`params`](Self::params)) and
    /// what parts are checked against.
    pub fn proposer(&self, height: Height, round: Round) -> Address {
        if round == Round::new(0) {
            let i = self.outcomes.round0(self.vset.validators.len(), height.0);
            if let Some(v) = self.vset.validators.get(i) {
                return v.address;
            }
        }
        proposer_of(&self.vset, height, round).address
    }

    /// The failed rounds 0 this node read from its decided blocks.
    pub fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    /// This node's published history and catch-up offer (served by
    /// [`OfferSlot::router`]).
    pub fn offers(&self) -> &OfferSlot {
        &self.offers
    }

    /// This node's address.
    pub fn me(&self) -> Address {
        self.me
    }

    /// The signer.
    pub fn signer(&self) -> &Ed25519Signer {
        &self.signer
    }

    /// The engine's signer: this node's key behind its signing guard.
    pub fn engine_signer(&self) -> GuardedSigner {
        GuardedSigner::new(self.signer.clone(), self.guard.clone())
    }

    /// The signing guard.
    pub fn guard(&self) -> &SharedGuard {
        &self.guard
    }

    /// Copies the guard's counters into the status (the engine signs on its own task; the
    /// loop calls this on its timer), and writes the status at once when a refusal is new
    /// (signatures made are written with the next decision).
    pub fn refresh_signing_status(&mut self) {
        let c = self.guard.counters();
        let refused_changed = self.core.status().signing.refused != c.refused;
        self.core.status_mut().signing = c;
        if refused_changed {
            self.core.write_status();
        }
    }

    /// The engine's verifier, counting into this node's status what it refuses.
    pub fn verifier(&self) -> Ed25519Verifier {
        Ed25519Verifier::counting(
            self.refused.clone(),
            self.verified.clone(),
            self.core.domain().clone(),
        )
    }

    /// The engine messages refused for a bad signature so far (votes, proposals, clock
    /// samples, validator proofs; `status.json`'s `signatures_refused` at the next height).
    pub fn signature_refusals(&self) -> ccron_node::records::SignatureRefusals {
        self.refused.counts()
    }

    /// The parameters of `height` (validators with the height's round-0 proposer, timeouts,
    /// vote extensions required): the engine starts a height only with them
    /// (`ConsensusReady`, `Finalized`).
    ///
    /// The timeouts are [`timeouts`] with round 0 as short as this node's observed proposal
    /// arrivals allow ([`crate::round0::height_timeouts`]; without observations, the normal
    /// ones), and at a retry height (the round-0 proposer has a failed round 0 in the
    /// reputation window) at most the retry ones ([`crate::reputation::retry_timeouts`]).
    pub fn params(&self, height: Height) -> HeightParams<Ctx> {
        let pick = self
            .outcomes
            .round0_pick(self.vset.validators.len(), height.0);
        let plain = crate::reputation::plain_index(self.vset.validators.len(), height.0);
        if pick.index != plain {
            tracing::info!(
                height = height.0,
                plain = plain,
                proposer = pick.index,
                "proposer reputation: round 0 skips a validator whose round 0 failed"
            );
        }
        if pick.is_retry() {
            tracing::info!(
                height = height.0,
                proposer = pick.index,
                failed = pick.record,
                "proposer reputation: round 0 retries a validator whose round 0 failed, \
                 with short timeouts"
            );
        }
        let n = self.vset.validators.len();
        let t = crate::round0::height_timeouts(timeouts(), n, pick, &self.arrivals);
        tracing::debug!(
            height = height.0,
            propose_ms = t.propose.as_millis() as u64,
            vote_ms = t.precommit.as_millis() as u64,
            "round 0 timeouts"
        );
        if height.0.is_multiple_of(64) {
            tracing::info!(
                height = height.0,
                propose_ms = t.propose.as_millis() as u64,
                vote_ms = t.precommit.as_millis() as u64,
                p90s_ms = ?self.arrivals.p90s(),
                "round 0 timeouts from observed proposal arrivals"
            );
        }
        HeightParams::new(self.vset.for_height(height, pick.index), t, None)
            .with_vote_extension_policy(VoteExtensionPolicy::Required)
    }

    /// Round `round` of `height` started at `now_ms` (the loop's monotonic clock, in ms):
    /// the start a round-0 proposal's arrival is measured from ([`crate::round0`]). `seen` is
    /// what [`started_round`](Self::started_round) returned: a round-0 proposal already held
    /// arrived before the round (latency 0).
    pub fn note_round_started(
        &mut self,
        height: Height,
        round: Round,
        seen: &[ProposedValue<Ctx>],
        now_ms: u64,
    ) {
        self.watch
            .started(height.0, round.as_u32().unwrap_or(u32::MAX), now_ms);
        for v in seen {
            self.note_proposal(v, now_ms);
        }
    }

    /// A proposal `value` reached the engine at `now_ms`: if it is round 0's, valid, from the
    /// height's round-0 proposer (not this node) and the first of the height, its arrival is
    /// observed ([`Arrivals::observe`]).
    pub fn note_proposal(&mut self, value: &ProposedValue<Ctx>, now_ms: u64) {
        if value.validity != Validity::Valid
            || value.round != Round::new(0)
            || value.proposer == self.me
            || value.proposer != self.proposer(value.height, value.round)
        {
            return;
        }
        let Some(index) = self
            .vset
            .validators
            .iter()
            .position(|v| v.address == value.proposer)
        else {
            return;
        };
        if let Some(latency) = self.watch.arrived(value.height.0, 0, now_ms) {
            self.arrivals.observe(index, latency);
        }
    }

    /// The round-0 proposal arrivals this node observed.
    pub fn arrivals(&self) -> &Arrivals {
        &self.arrivals
    }

    /// The height the engine starts at.
    pub fn start_height(&self) -> Height {
        Height(self.core.last_height() + 1)
    }

    /// A round started: the value this node already proposed in it, and the parts of the
    /// height that arrived before it started, judged now.
    ///
    /// # Errors
    /// The part log failing.
    pub fn started_round(
        &mut self,
        height: Height,
        round: Round,
    ) -> Result<Vec<ProposedValue<Ctx>>, NodeError> {
        let r = round.as_u32().unwrap_or(0);
        self.book.started_round(height.0, r);
        self.admit_released();
        let mut seen = Vec::new();
        if let Some(p) = self.my_parts.get(&(height.0, r)) {
            seen.push(ProposedValue {
                height,
                round,
                valid_round: p.valid_round,
                proposer: p.proposer,
                value: Value(p.block.clone()),
                validity: Validity::Valid,
            });
        }
        if height.0 == self.core.last_height() + 1 {
            let pending: Vec<ProposalPart> =
                self.book.pending(height.0).into_iter().cloned().collect();
            for p in pending {
                let (value, verdict) = self.judge(&p)?;
                self.book
                    .set_verdict(p.height.0, p.round.as_u32().unwrap_or(0), verdict);
                seen.push(value);
            }
        }
        Ok(seen)
    }

    /// The part this node proposes at `(height, round)` (the same one again if it already
    /// proposed there: never two blocks for one round), appended to the part log before the
    /// engine hears of it. `None`: no valid block (the round times out).
    ///
    /// # Errors
    /// The part log failing.
    pub fn propose(
        &mut self,
        height: Height,
        round: Round,
    ) -> Result<Option<(LocallyProposedValue<Ctx>, ProposalPart)>, NodeError> {
        self.propose_shaped(height, round, |b| b)
    }

    /// [`propose`](Self::propose), with the new block passed through `shape` before it is
    /// signed (the seam a Byzantine strategy uses, `crate::byzantine`; honest: unchanged).
    ///
    /// # Errors
    /// The part log failing.
    pub fn propose_shaped(
        &mut self,
        height: Height,
        round: Round,
        shape: impl FnOnce(ccron_node::types::Block) -> ccron_node::types::Block,
    ) -> Result<Option<(LocallyProposedValue<Ctx>, ProposalPart)>, NodeError> {
        let r = round.as_u32().unwrap_or(0);
        let part = match self.my_parts.get(&(height.0, r)) {
            Some(p) => p.clone(),
            None => {
                let block = match self.core.build_block(height.0) {
                    Ok(b) => b,
                    Err(e) => {
                        // No value: the engine's propose timeout runs out, the validators
                        // prevote nil and the next round's proposer proposes.
                        self.core.status_mut().proposals_skipped += 1;
                        tracing::warn!(height = height.0, round = r, reason = %e, "proposal skipped");
                        self.core.write_status();
                        return Ok(None);
                    }
                };
                match self.sign_own_part(height, round, Round::Nil, shape(block))? {
                    Ok(p) => p,
                    Err(_) => {
                        // Refused by the signing guard (traced there): no value, the round
                        // times out.
                        self.core.status_mut().proposals_skipped += 1;
                        self.refresh_signing_status();
                        return Ok(None);
                    }
                }
            }
        };
        self.core.remember(part.block.clone());
        let value = LocallyProposedValue::new(height, round, Value(part.block.clone()));
        Ok(Some((value, part)))
    }

    /// Signs this node's part for `(height, round)` once the signing guard recorded it,
    /// appends it to the part log (durable before anyone sees it) and remembers it: the one
    /// way an own part is made, for a new proposal and for a re-proposal alike. `Ok(Err)`:
    /// the guard refused (nothing signed).
    fn sign_own_part(
        &mut self,
        height: Height,
        round: Round,
        valid_round: Round,
        block: ccron_node::types::Block,
    ) -> Result<Result<ProposalPart, ccron_node::signguard::SignRefusal>, NodeError> {
        let bytes = ProposalPart::signing_bytes(
            self.core.domain(),
            height,
            round,
            valid_round,
            &self.me,
            &block,
        );
        if let Err(e) = self.guard.sign(
            ccron_node::signguard::SignKind::Part,
            height.0,
            round,
            &bytes,
        ) {
            return Ok(Err(e));
        }
        let part = ProposalPart {
            height,
            round,
            valid_round,
            proposer: self.me,
            block,
            signature: self.signer.sign_raw(&bytes),
        };
        self.parts.append(&part)?;
        let r = round.as_u32().unwrap_or(0);
        self.my_parts.insert((height.0, r), part.clone());
        self.book.keep_own(part.clone());
        Ok(Ok(part))
    }

    /// The engine's `RestreamProposal` (its contract: re-publish every part of the value):
    /// the value `value_id` proposed at `(height, round)` by `address`.
    ///
    /// - Another proposer's value: its parts this node holds for that round, as signed (any
    ///   round of the height when the engine names the value at a round whose part this node
    ///   does not hold: the parts it has of the value).
    /// - This node's own: its part of that round if it has one for that value; a re-proposal
    ///   of a value it holds (locked at `valid_round`) at a new round is signed for that round,
    ///   persisted before publishing, and remembered (the same part ever after). A round it
    ///   already proposed another value in is refused: never two blocks for one round.
    ///
    /// # Errors
    /// The part log failing.
    pub fn restream(
        &mut self,
        height: Height,
        round: Round,
        valid_round: Round,
        address: Address,
        value_id: ccron_node::Hash32,
    ) -> Result<Restream, NodeError> {
        let r = round.as_u32().unwrap_or(0);
        self.core.status_mut().restreams += 1;
        if address == self.me {
            if let Some(p) = self.my_parts.get(&(height.0, r)) {
                if p.block.id() == value_id {
                    return Ok(Restream::Publish(vec![p.clone()]));
                }
                self.core.status_mut().restreams_refused += 1;
                tracing::error!(
                    height = height.0,
                    round = r,
                    "restream of another value in a round this node proposed in: refused"
                );
                return Ok(Restream::Refused);
            }
            let Some(block) = self.core.undecided_block(&value_id).cloned() else {
                return Ok(self.restream_unknown(height.0, r));
            };
            return Ok(
                match self.sign_own_part(height, round, valid_round, block)? {
                    Ok(part) => Restream::Publish(vec![part]),
                    Err(e) => {
                        self.core.status_mut().restreams_refused += 1;
                        self.refresh_signing_status();
                        Restream::Guarded(e)
                    }
                },
            );
        }
        let held = self.book.parts_of(height.0, &value_id);
        let of_round: Vec<ProposalPart> = held
            .iter()
            .filter(|p| p.round == round && p.proposer == address)
            .map(|p| (*p).clone())
            .collect();
        let parts = if of_round.is_empty() {
            held.into_iter().cloned().collect()
        } else {
            of_round
        };
        if parts.is_empty() {
            return Ok(self.restream_unknown(height.0, r));
        }
        Ok(Restream::Publish(parts))
    }

    fn restream_unknown(&mut self, height: u64, round: u32) -> Restream {
        self.core.status_mut().restreams_unknown += 1;
        tracing::warn!(height, round, "restream of a value this node does not hold");
        Restream::Unknown
    }

    /// Judges a part for the next height: the value for the engine, and the verdict the book
    /// keeps. A valid block, or one refused on this node's clock only, is persisted before the
    /// engine hears of it and remembered; a block invalid for a shared reason is neither.
    fn judge(&mut self, part: &ProposalPart) -> Result<(ProposedValue<Ctx>, Verdict), NodeError> {
        let (validity, verdict) = match self.core.judge(&part.block) {
            Ok(()) => (Validity::Valid, Verdict::Valid),
            Err(e) if e.local_clock_only() => (Validity::Invalid, Verdict::ClockRefused),
            Err(_) => (Validity::Invalid, Verdict::Invalid),
        };
        if verdict != Verdict::Invalid && !self.core.knows(&part.block.id()) {
            self.parts.append(part)?;
            self.core.remember(part.block.clone());
        }
        let value = ProposedValue {
            height: part.height,
            round: part.round,
            valid_round: part.valid_round,
            proposer: part.proposer,
            value: Value(part.block.clone()),
            validity,
        };
        Ok((value, verdict))
    }

    /// A part received from the network through peer `from` (its bytes): admitted by the
    /// part book's limits (`ccron_node::proposals`: next heights only, rounds near the
    /// current one, the round's proposer, one value per round, held parts bounded, muted
    /// peers), then judged when it is for the next height, or kept to be judged when its
    /// height starts.
    ///
    /// # Errors
    /// The part log failing.
    pub fn received_part(
        &mut self,
        from: &[u8],
        part: &ProposalPart,
    ) -> Result<Option<ProposedValue<Ctx>>, NodeError> {
        let from_proposer = self.proposer(part.height, part.round) == part.proposer;
        let domain = self.core.domain();
        match self
            .book
            .admit(from, part, from_proposer, || part.verify(domain))
        {
            Ok(Admitted::Judge) => {}
            // A far height's part (unverified): handed back by the book when its height
            // comes within reach (`admit_released`).
            Ok(Admitted::Parked) | Err(_) => return Ok(None),
        }
        if part.height.0 == self.core.last_height() + 1 {
            let (value, verdict) = self.judge(part)?;
            self.book.keep(from, part.clone(), verdict);
            return Ok(Some(value));
        }
        // Early: this node has not finished the previous height. Judged when it starts.
        self.book.keep(from, part.clone(), Verdict::Pending);
        Ok(None)
    }

    /// Parked parts whose height came within reach (the book's `take_released`), admitted
    /// again now that their round's proposer is known, and kept to be judged when their height
    /// starts (`started_round`): a node that reached the tip by value sync has the next
    /// heights' values and decides them with the others.
    fn admit_released(&mut self) {
        for (from, part) in self.book.take_released() {
            let from_proposer = self.proposer(part.height, part.round) == part.proposer;
            let domain = self.core.domain();
            if self
                .book
                .admit(&from, &part, from_proposer, || part.verify(domain))
                == Ok(Admitted::Judge)
            {
                self.book.keep(&from, part, Verdict::Pending);
            }
        }
    }

    /// The part book (counters, held parts).
    pub fn book(&self) -> &ProposalBook<ProposalPart> {
        &self.book
    }

    /// A value was decided: durable, then executed (the node's [`NodeCore::decide`]); this
    /// node's parts up to it are dropped.
    ///
    /// # Errors
    /// The node's: an unknown value, a store failure, a halted ledger.
    pub fn decided(
        &mut self,
        certificate: CommitCertificate<Ctx>,
        extensions: Vec<(Address, SignedExtension<Ctx>)>,
    ) -> Result<(), NodeError> {
        let height = certificate.height.0;
        self.book.advance(height + 1);
        let status = self.core.status_mut();
        status.proposal_parts = self.book.counters().clone();
        status.proposal_parts_held = self.book.held();
        status.signatures_refused = self.refused.counts();
        status.votes_verified = self.verified.counts();
        status.signing = self.guard.counters();
        self.core.decide(MalachiteCommit {
            certificate,
            extensions,
        })?;
        if let Some(d) = self.core.decided(height) {
            self.outcomes.record(height, d.block.prev_round);
        }
        // After the outcome: the released parts' proposers may depend on it.
        self.admit_released();
        self.my_parts.retain(|(h, _), _| *h > height);
        self.parts.prune(height)?;
        self.synced.prune(height)?;
        let core = &self.core;
        self.offers.after_decide(
            &self.snapshots,
            core.history_min_height().saturating_sub(1),
            height,
            |h| core.decided(h),
        );
        Ok(())
    }

    /// What the running catch-up's watcher found (`ccron_node::catchup::running`): refusals
    /// are counted into the status (`catchup_refused`); a verified offer is installed unless
    /// this node reached its height meanwhile. `Some(n)`: installed, the caller restarts the
    /// process into it (`running::restart_self(n)`, `n` the restarts so far, this one
    /// included). An install that fails is an error event and a counter; the node carries
    /// on (its old store is whole) and the watcher asks again later.
    pub fn caught_up_while_running(
        &mut self,
        event: running::Event<A, MalachiteCommit>,
        shared: &running::Shared,
    ) -> Option<u64> {
        let found = match event {
            running::Event::Refused(report) => {
                self.core.note_catch_up(&report);
                self.refresh_catch_up_status(shared);
                return None;
            }
            running::Event::Found(found) => *found,
        };
        self.core.status_mut().count_catch_up(&found.report);
        let dir = ccron_node::core::node_dir(&self.core.options().home, self.core.options().index);
        let ledger = self.core.genesis().ledger.clone();
        let outcome = running::install_found(&dir, &ledger, self.core.last_height(), found, shared);
        let restart = match outcome {
            Ok(running::Outcome::Installed { .. }) => {
                Some(shared.counters().restarts.saturating_add(1))
            }
            Ok(running::Outcome::Stale { .. }) => None,
            Err(e) => {
                shared.count(|c| c.install_failures = c.install_failures.saturating_add(1));
                tracing::error!(error = %e, "catch-up (running): the verified offer was not installed");
                None
            }
        };
        self.refresh_catch_up_status(shared);
        self.core.write_status();
        restart
    }

    /// Copies the running catch-up's counters into the status, and writes the status when
    /// they changed (the loop calls this on its timer: a stalled node decides nothing).
    pub fn refresh_catch_up_status(&mut self, shared: &running::Shared) {
        let c = shared.counters();
        if self.core.status().catchup_running != c {
            self.core.status_mut().catchup_running = c;
            self.core.write_status();
        }
    }

    /// Decided values for the engine's sync (at most 50 per answer).
    pub fn decided_values(&self, range: RangeInclusive<Height>) -> Vec<RawDecidedValue<Ctx>> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let (lo, hi) = (range.start().0, range.end().0.min(self.core.last_height()));
        for h in lo..=hi {
            if out.len() >= MAX_SYNC_VALUES {
                break;
            }
            if let Some(d) = self.core.decided(h) {
                let size = d.block.encode().len() + 256 * d.commit.extensions.len().max(1);
                if !out.is_empty() && bytes.saturating_add(size) > MAX_SYNC_BYTES {
                    break;
                }
                bytes = bytes.saturating_add(size);
                let cert = ExtendedCommitCertificate::from_commit_certificate_and_extensions(
                    d.commit.certificate.clone(),
                    VoteExtensions::new(d.commit.extensions.clone()),
                );
                out.push(RawDecidedValue::new(Bytes::from(d.block.encode()), cert));
            }
        }
        out
    }

    /// A value the engine's sync fetched for `height`: appended to the synced-value log and
    /// fsync'ed (unless this node already holds the block), then remembered until it is
    /// decided, and only then the verdict. Bytes that do not decode to a block of `height` are
    /// the peer's fault; a block this node cannot keep (its undecided blocks at their bound) is
    /// a local, transient refusal (counted, `undecided_refused`): the engine asks again.
    ///
    /// # Errors
    /// The synced-value log failing (the node stops: a verdict on a block it could lose at a
    /// crash would leave a decision its WAL replays with no block).
    pub fn synced(
        &mut self,
        height: Height,
        round: Round,
        proposer: Address,
        value_bytes: &[u8],
    ) -> Result<SyncedValueOutcome<Ctx>, NodeError> {
        let block = match Block::decode(value_bytes) {
            Some(block) if block.height == height.0 => block,
            _ => return Ok(SyncedValueOutcome::PeerFault),
        };
        if !self.core.knows(&block.id()) {
            if !self.core.remember(block.clone()) {
                return Ok(SyncedValueOutcome::LocalTransientError);
            }
            self.synced.append(&SyncedBlock {
                block: block.clone(),
            })?;
        }
        self.core.note_synced(height.0);
        Ok(SyncedValueOutcome::Verdict(ProposedValue {
            height,
            round,
            valid_round: Round::Nil,
            proposer,
            value: Value(block),
            validity: Validity::Valid,
        }))
    }
}

/// The outcomes of the heights the next windows read, from the node's decided blocks (those it
/// holds: after a restore or pruning, fewer).
fn read_outcomes<A: Application>(core: &NodeCore<A, MalachiteCommit>) -> Outcomes {
    let mut out = Outcomes::default();
    let last = core.last_height();
    let from = last
        .saturating_sub(WINDOW + LAG)
        .max(core.history_min_height())
        .max(1);
    for h in from..=last {
        if let Some(d) = core.decided(h) {
            out.record(h, d.block.prev_round);
        }
    }
    out
}
