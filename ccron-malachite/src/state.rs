//! The adapter's state between the engine and the node: the engine-free [`NodeCore`] plus what
//! is Malachite's own (the validator set in the engine's type, proposal parts this node made or
//! received early, their durable log). One method per kind of engine request: build, judge,
//! decide, serve sync.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use bytes::Bytes;
use ccron::host::Application;
use ccron_node::store::PartLog;
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
    Address, Block, Ctx, Ed25519Signer, Height, ProposalPart, PubKey, ValidatorSet, Value,
    proposer_of, verify_raw,
};

/// Bound on parts kept for heights not started yet.
const MAX_EARLY_PARTS: usize = 64;

/// Most decided values one sync answer carries.
const MAX_SYNC_VALUES: usize = 50;

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
    parts: PartLog<ProposalPart>,
    /// The parts this node proposed, by (height, round), for restreaming.
    my_parts: BTreeMap<(u64, u32), ProposalPart>,
    /// Authentic parts for a height this node has not started yet.
    early: BTreeMap<(u64, u32), ProposalPart>,
}

impl<A: Application> State<A> {
    /// Opens the node (`NodeCore::open`) and its part log: the undecided blocks it had seen or
    /// proposed are remembered again (the engine's WAL replays them).
    ///
    /// # Errors
    /// The node's.
    pub fn open(opts: NodeOptions, factory: &Factory<A>) -> Result<Self, NodeError> {
        let mut core = NodeCore::open(opts, factory)?;
        let dir = ccron_node::core::node_dir(&core.options().home, core.options().index);
        // A node that ran before (its engine WAL exists) must still have its part log: without
        // it a restarted proposer could sign a second block for a round it proposed in.
        let parts = PartLog::<ProposalPart>::open_expecting(
            &dir.join("parts.log"),
            dir.join("wal").exists(),
        )?;
        let keys: Vec<[u8; 32]> = core.validators().addresses().iter().map(|a| a.0).collect();
        let vset = ValidatorSet::new(&keys);
        let signer = Ed25519Signer(core.signer().clone());
        let me = Address::from(core.me());
        let last = core.last_height();
        let mut my_parts = BTreeMap::new();
        for p in parts.parts() {
            if p.height.0 > last {
                core.remember(p.block.clone());
                if p.proposer == me {
                    my_parts.insert((p.height.0, p.round.as_u32().unwrap_or(0)), p.clone());
                }
            }
        }
        Ok(Self {
            core,
            vset,
            me,
            signer,
            parts,
            my_parts,
            early: BTreeMap::new(),
        })
    }

    /// This node's address.
    pub fn me(&self) -> Address {
        self.me
    }

    /// The signer.
    pub fn signer(&self) -> &Ed25519Signer {
        &self.signer
    }

    /// The parameters of every height (validators, timeouts, vote extensions required).
    pub fn params(&self) -> HeightParams<Ctx> {
        HeightParams::new(self.vset.clone(), timeouts(), None)
            .with_vote_extension_policy(VoteExtensionPolicy::Required)
    }

    /// The height the engine starts at.
    pub fn start_height(&self) -> Height {
        Height(self.core.last_height() + 1)
    }

    /// A round started: the value this node already proposed in it, or an early part of its
    /// proposer's, judged now.
    ///
    /// # Errors
    /// The part log failing.
    pub fn started_round(
        &mut self,
        height: Height,
        round: Round,
    ) -> Result<Vec<ProposedValue<Ctx>>, NodeError> {
        let r = round.as_u32().unwrap_or(0);
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
        } else if let Some(p) = self.early.remove(&(height.0, r))
            && height.0 == self.core.last_height() + 1
        {
            seen.push(self.judge(&p)?);
        }
        self.early.retain(|(h, _), _| *h >= height.0);
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
                let valid_round = Round::Nil;
                let bytes =
                    ProposalPart::signing_bytes(height, round, valid_round, &self.me, &block);
                let part = ProposalPart {
                    height,
                    round,
                    valid_round,
                    proposer: self.me,
                    block,
                    signature: self.signer.sign_raw(&bytes),
                };
                self.parts.append(&part)?;
                self.my_parts.insert((height.0, r), part.clone());
                part
            }
        };
        self.core.remember(part.block.clone());
        let value = LocallyProposedValue::new(height, round, Value(part.block.clone()));
        Ok(Some((value, part)))
    }

    /// The part this node proposed at `(height, round)`, to stream again.
    pub fn own_part(&self, height: Height, round: Round) -> Option<&ProposalPart> {
        self.my_parts.get(&(height.0, round.as_u32().unwrap_or(0)))
    }

    /// Whether a part comes from the round's proposer and carries its valid signature.
    fn authentic(&self, part: &ProposalPart) -> bool {
        let expected = proposer_of(&self.vset, part.height, part.round);
        if expected.address != part.proposer {
            tracing::warn!(height = %part.height, "proposal part from a non-proposer");
            return false;
        }
        let bytes = ProposalPart::signing_bytes(
            part.height,
            part.round,
            part.valid_round,
            &part.proposer,
            &part.block,
        );
        if !verify_raw(&PubKey(part.proposer.0), &bytes, &part.signature) {
            tracing::warn!(height = %part.height, "proposal part signature does not verify");
            return false;
        }
        true
    }

    /// Judges an authentic part for the next height and records its block (persisted first).
    fn judge(&mut self, part: &ProposalPart) -> Result<ProposedValue<Ctx>, NodeError> {
        let validity = match self.core.judge(&part.block) {
            Ok(()) => Validity::Valid,
            Err(_) => Validity::Invalid,
        };
        if !self.core.knows(&part.block.id()) {
            self.parts.append(part)?;
            self.core.remember(part.block.clone());
        }
        Ok(ProposedValue {
            height: part.height,
            round: part.round,
            valid_round: part.valid_round,
            proposer: part.proposer,
            value: Value(part.block.clone()),
            validity,
        })
    }

    /// A part received from the network: judged when it is for the next height and authentic,
    /// kept for later when it is a little early, dropped otherwise.
    ///
    /// # Errors
    /// The part log failing.
    pub fn received_part(
        &mut self,
        part: &ProposalPart,
    ) -> Result<Option<ProposedValue<Ctx>>, NodeError> {
        let next = self.core.last_height() + 1;
        if part.height.0 == next && self.authentic(part) {
            return self.judge(part).map(Some);
        }
        if part.height.0 > next
            && part.height.0 <= next + 2
            && self.early.len() < MAX_EARLY_PARTS
            && self.authentic(part)
        {
            // Early: this node has not finished the previous height. Kept for StartedRound,
            // which hands it to consensus once the height starts.
            let r = part.round.as_u32().unwrap_or(0);
            self.early.insert((part.height.0, r), part.clone());
        }
        Ok(None)
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
        self.core.decide(MalachiteCommit {
            certificate,
            extensions,
        })?;
        self.my_parts.retain(|(h, _), _| *h > height);
        self.parts.prune(height)?;
        Ok(())
    }

    /// Decided values for the engine's sync (at most 50 per answer).
    pub fn decided_values(&self, range: RangeInclusive<Height>) -> Vec<RawDecidedValue<Ctx>> {
        let mut out = Vec::new();
        let (lo, hi) = (range.start().0, range.end().0.min(self.core.last_height()));
        for h in lo..=hi {
            if out.len() >= MAX_SYNC_VALUES {
                break;
            }
            if let Some(d) = self.core.decided(h) {
                let cert = ExtendedCommitCertificate::from_commit_certificate_and_extensions(
                    d.commit.certificate.clone(),
                    VoteExtensions::new(d.commit.extensions.clone()),
                );
                out.push(RawDecidedValue::new(Bytes::from(d.block.encode()), cert));
            }
        }
        out
    }

    /// A value the engine's sync fetched for `height`, to remember until it is decided.
    pub fn synced(
        &mut self,
        height: Height,
        round: Round,
        proposer: Address,
        value_bytes: &[u8],
    ) -> SyncedValueOutcome<Ctx> {
        match Block::decode(value_bytes) {
            Some(block) if block.height == height.0 => {
                self.core.remember(block.clone());
                self.core.note_synced(height.0);
                SyncedValueOutcome::Verdict(ProposedValue {
                    height,
                    round,
                    valid_round: Round::Nil,
                    proposer,
                    value: Value(block),
                    validity: Validity::Valid,
                })
            }
            _ => SyncedValueOutcome::PeerFault,
        }
    }
}
