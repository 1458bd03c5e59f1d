//! Byzantine validators as real processes: the node's strategy at the seams where it builds,
//! streams and signs. The app-message loop (`node.rs`) always goes through a [`Strategy`];
//! an honest node's is [`Honest`] (the node's own behaviour, unchanged), a Byzantine one's is
//! [`Faulty`], which acts as [`Honest`] until its start time and then, with the validator's
//! own valid key:
//!
//! - `equivocate`: as proposer, signs a second value for the same round (its block without
//!   one sample or its ticks, else with another time) and streams both;
//! - `flood`: every 100 ms signs and streams up to [`FLOOD_BATCH`] parts for rounds it is
//!   proposer of, up to thousands of rounds ahead, for the next heights, heights far ahead
//!   and heights behind (its valid block, and blocks with times no rule gives);
//! - `withhold`: signs its votes over other bytes (no peer counts them) and streams no part of
//!   its proposals or restreams (the engine's signed proposal still goes out, without its
//!   value): with Broadcast pub-sub the engine gives the application no per-peer send, so the
//!   subset it withholds from is every peer;
//! - `withhold-votes`: signs its prevotes and precommits as an honest node does (behind its
//!   signing guard) and never publishes them: the network codec ([`NetCodec`]) refuses to
//!   encode its own votes, vote rebroadcasts and round or polka certificates carrying its own
//!   vote (the engine logs the refusal and sends nothing), and strips its own signatures from
//!   the commit certificates of its sync answers; otherwise honest (it proposes and streams
//!   its parts);
//! - `silent`: stops its engine (the process and its HTTP endpoint live on);
//! - `bad-ticks`: posts junk ticks and requests to the other validators' endpoints
//!   ([`ccron_node::hostile::HostileClient`]) and proposes blocks carrying a forged tick;
//! - `forge-samples`: as proposer, carries h-1's clock samples forged ([`forge_samples`]): one
//!   signature changed, or fewer than a quorum, alternately;
//! - `oversized`: as proposer, signs and streams blocks padded past the block bound
//!   ([`oversize`]);
//! - `slow-http`: its endpoint answers late and drips ([`ccron_node::slow_http`], a layer over
//!   the node's routes); its engine is honest.

use std::time::Duration;

use ccron::host::Application;
use ccron_node::hostile::{Byzantine, ByzantineKind, HostileClient};
use ccron_node::{NodeError, TickTx};
use malachitebft_app_channel::app::types::LocallyProposedValue;
use malachitebft_core_types::{Round, SignedMessage, ValidatorProof, VoteExtensionScope};
use malachitebft_signing::{Error as SignError, Signer};

use bytes::Bytes;
use malachitebft_app_channel::app::types::codec::{Codec, HasEncodedLen};
use malachitebft_app_channel::app::types::streaming::StreamMessage;
use malachitebft_app_channel::app::types::sync as msync;
use malachitebft_core_consensus::{LivenessMsg, SignedConsensusMsg};

use crate::context::{
    Address, BorshCodec, ClockSample, CodecError, Ctx, Ed25519Signer, Height, Proposal,
    ProposalPart, Sig, Vote,
};
use crate::guard::GuardedSigner;
use crate::state::State;

/// Most parts a flooding validator signs per timer tick (every 100 ms).
pub const FLOOD_BATCH: usize = 48;

/// How far ahead (rounds) a flooding validator goes before it starts over.
pub const FLOOD_ROUNDS: u32 = 4_096;

/// What this node proposes at a round: the value for the engine and the parts to stream.
pub type Proposed = Option<(LocallyProposedValue<Ctx>, Vec<ProposalPart>)>;

/// The node's behaviour at its seams (see the module documentation).
pub trait Strategy<A: Application>: Send {
    /// The signer the engine signs votes, proposals and clock samples with (`honest`: the
    /// node's key behind its signing guard).
    fn engine_signer(&self, honest: GuardedSigner) -> Box<dyn Signer<Ctx>>;

    /// The value this node proposes at `(height, round)` and the parts it streams.
    ///
    /// # Errors
    /// The node's (its part log failing).
    fn propose(
        &mut self,
        state: &mut State<A>,
        height: Height,
        round: Round,
    ) -> Result<Proposed, NodeError>;

    /// The parts it streams for an engine's restream of `parts`.
    fn restream(&mut self, parts: Vec<ProposalPart>) -> Vec<ProposalPart>;

    /// Parts to stream on the loop's timer (every 100 ms).
    fn on_timer(&mut self, state: &mut State<A>) -> Vec<ProposalPart>;

    /// Whether the engine is to stop now (checked on the loop's timer).
    fn silenced(&mut self) -> bool;
}

/// The honest node: proposes what the node builds, streams its part, signs with its key.
#[derive(Debug, Clone, Copy, Default)]
pub struct Honest;

impl<A: Application> Strategy<A> for Honest {
    fn engine_signer(&self, honest: GuardedSigner) -> Box<dyn Signer<Ctx>> {
        Box::new(honest)
    }

    fn propose(
        &mut self,
        state: &mut State<A>,
        height: Height,
        round: Round,
    ) -> Result<Proposed, NodeError> {
        Ok(state
            .propose(height, round)?
            .map(|(value, part)| (value, vec![part])))
    }

    fn restream(&mut self, parts: Vec<ProposalPart>) -> Vec<ProposalPart> {
        parts
    }

    fn on_timer(&mut self, _state: &mut State<A>) -> Vec<ProposalPart> {
        Vec::new()
    }

    fn silenced(&mut self) -> bool {
        false
    }
}

/// The strategy of a node's options: [`Faulty`] with `--byzantine`, else [`Honest`].
pub fn strategy<A: Application>(byzantine: Option<Byzantine>) -> Box<dyn Strategy<A>> {
    match byzantine {
        Some(b) => Box::new(Faulty::new(b)),
        None => Box::new(Honest),
    }
}

/// A Byzantine validator (see the module documentation).
#[derive(Debug)]
pub struct Faulty {
    spec: Byzantine,
    /// The next round the flood signs from.
    flood_round: u32,
    /// The junk poster of `bad-ticks`, once started.
    hostile: Option<HostileClient>,
    /// Whether the engine was stopped (`silent`).
    silent: bool,
    /// Proposals forged so far (`forge-samples` alternates its two forgeries).
    forged: u64,
}

impl Faulty {
    /// A validator of `spec`'s kind, from its start time.
    pub fn new(spec: Byzantine) -> Self {
        Self {
            spec,
            flood_round: 0,
            hostile: None,
            silent: false,
            forged: 0,
        }
    }

    fn on(&self, kind: ByzantineKind) -> bool {
        self.spec.kind == kind && self.spec.active(ccron_node::core::now_ms())
    }
}

/// `part` re-signed over `block` (same height, round and valid round).
fn resign(signer: &Ed25519Signer, part: &ProposalPart, block: ccron_node::Block) -> ProposalPart {
    let bytes = ProposalPart::signing_bytes(
        signer.domain(),
        part.height,
        part.round,
        part.valid_round,
        &part.proposer,
        &block,
    );
    ProposalPart {
        block,
        signature: signer.sign_raw(&bytes),
        ..part.clone()
    }
}

/// Another value for the same height: without one sample when it carries more than a
/// quorum, else without its ticks, else with another time (invalid, still signed).
fn other_value(block: &ccron_node::Block, quorum: usize) -> ccron_node::Block {
    let mut b = block.clone();
    if b.samples.len() > quorum {
        b.samples.pop();
    } else if !b.ticks.is_empty() {
        b.ticks.clear();
    } else {
        b.agreed_time_ms = b.agreed_time_ms.saturating_add(1);
    }
    b
}

/// `block` with h-1's samples forged: fewer than `quorum` of them (`short`), else the first
/// one's signature changed (a block without samples, height 1's, is left as it is). Honest
/// validators refuse it (`TooFewSamples`, `BadSampleSignature`).
pub fn forge_samples(
    mut block: ccron_node::Block,
    quorum: usize,
    short: bool,
) -> ccron_node::Block {
    if short {
        block.samples.truncate(quorum.saturating_sub(1));
    } else if let Some(s) = block.samples.first_mut() {
        s.signature.0[5] ^= 0x20;
    }
    block
}

/// `block` padded with a junk request to [`ccron_node::hostile::OVERSIZED_BLOCK_BYTES`]
/// encoded: over the block bound, under the engine's pub-sub limit. Honest validators refuse
/// it for its size (`too_large`) before any signature in it.
pub fn oversize(mut block: ccron_node::Block) -> ccron_node::Block {
    let pad = ccron_node::hostile::OVERSIZED_BLOCK_BYTES.saturating_sub(block.encode().len());
    block.requests.push(ccron_node::request::SignedRequest {
        request: ccron_node::request::ClientRequest {
            client_key: [0x5a; 32],
            number: block.height,
            payload: vec![0x5a; pad],
        },
        signature: ccron_node::types::Sig([0; 64]),
    });
    block
}

impl<A: Application> Strategy<A> for Faulty {
    fn engine_signer(&self, honest: GuardedSigner) -> Box<dyn Signer<Ctx>> {
        if self.spec.kind == ByzantineKind::Withhold {
            Box::new(WithholdingSigner {
                inner: honest,
                from_ms: self.spec.from_ms,
            })
        } else {
            Box::new(honest)
        }
    }

    fn propose(
        &mut self,
        state: &mut State<A>,
        height: Height,
        round: Round,
    ) -> Result<Proposed, NodeError> {
        if self.on(ByzantineKind::BadTicks) {
            // A tick of its own with a signature that is not its own: honest validators
            // refuse the block (`BadTickSignature`).
            let signer = state.core.signer().clone();
            let domain = state.core.domain().clone();
            let component = state.core.tick_periods().keys().next().copied();
            return Ok(state
                .propose_shaped(height, round, move |mut b| {
                    if let Some(c) = component {
                        let mut t = TickTx::sign(&domain, c, u64::MAX / 2, &signer);
                        t.signature.0[3] ^= 1;
                        b.ticks
                            .retain(|x| x.submitter != t.submitter || x.component != c);
                        b.ticks.push(t);
                    }
                    b
                })?
                .map(|(value, part)| (value, vec![part])));
        }
        if self.on(ByzantineKind::ForgeSamples) {
            let quorum = state.core.validators().quorum();
            // Alternating per proposal (its turns come at heights of one parity: the
            // reputation's skips are even).
            let short = self.forged % 2 == 1;
            self.forged = self.forged.saturating_add(1);
            return Ok(state
                .propose_shaped(height, round, move |b| forge_samples(b, quorum, short))?
                .map(|(value, part)| (value, vec![part])));
        }
        if self.on(ByzantineKind::Oversized) {
            return Ok(state
                .propose_shaped(height, round, oversize)?
                .map(|(value, part)| (value, vec![part])));
        }
        let Some((value, part)) = state.propose(height, round)? else {
            return Ok(None);
        };
        if self.on(ByzantineKind::Withhold) {
            return Ok(Some((value, Vec::new())));
        }
        if self.on(ByzantineKind::Equivocate) {
            let quorum = state.core.validators().quorum();
            let second = resign(state.signer(), &part, other_value(&part.block, quorum));
            return Ok(Some((value, vec![part, second])));
        }
        Ok(Some((value, vec![part])))
    }

    fn restream(&mut self, parts: Vec<ProposalPart>) -> Vec<ProposalPart> {
        if self.on(ByzantineKind::Withhold) {
            Vec::new()
        } else {
            parts
        }
    }

    fn on_timer(&mut self, state: &mut State<A>) -> Vec<ProposalPart> {
        if self.on(ByzantineKind::BadTicks) && self.hostile.is_none() {
            let genesis = state.core.genesis();
            let me = state.core.options().index;
            let targets = genesis
                .validators
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != me)
                .filter_map(|(_, v)| v.http_port)
                .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
                .collect();
            let component = state
                .core
                .tick_periods()
                .keys()
                .next()
                .copied()
                .unwrap_or(0);
            match HostileClient::start(
                targets,
                state.core.domain().clone(),
                state.core.signer().clone(),
                component,
                Duration::from_millis(100),
            ) {
                Ok(c) => self.hostile = Some(c),
                Err(e) => tracing::error!(error = %e, "bad-ticks: no junk thread"),
            }
        }
        if !self.on(ByzantineKind::Flood) {
            return Vec::new();
        }
        flood(state, &mut self.flood_round)
    }

    fn silenced(&mut self) -> bool {
        if !self.silent && self.on(ByzantineKind::Silent) {
            self.silent = true;
            tracing::warn!("Byzantine: silent from now on");
            return true;
        }
        false
    }
}

/// One batch of a flood: parts this node signs as the proposer of rounds from `*cursor` on at
/// the next height (its valid block every fourth, else blocks with times no rule gives), the
/// two heights after it, a height far ahead and one behind.
fn flood<A: Application>(state: &mut State<A>, cursor: &mut u32) -> Vec<ProposalPart> {
    let next = state.core.last_height() + 1;
    let me = state.me();
    let Ok(template) = state.core.build_block(next) else {
        return Vec::new();
    };
    let signer = state.signer().clone();
    let mut out = Vec::new();
    let heights = [
        next,
        next + 1,
        next + 2,
        next + 40,
        next.saturating_sub(3).max(1),
    ];
    while out.len() < FLOOD_BATCH {
        let r = *cursor;
        *cursor = (*cursor + 1) % FLOOD_ROUNDS;
        for (k, &h) in heights.iter().enumerate() {
            let (height, round) = (Height(h), Round::new(r));
            if state.proposer(height, round) != me {
                continue;
            }
            let mut block = ccron_node::Block {
                height: h,
                ..template.clone()
            };
            if !(k == 0 && r.is_multiple_of(4)) {
                block.agreed_time_ms = block.agreed_time_ms.saturating_add(i64::from(r) + 1);
            }
            let bytes = ProposalPart::signing_bytes(
                signer.domain(),
                height,
                round,
                Round::Nil,
                &me,
                &block,
            );
            out.push(ProposalPart {
                height,
                round,
                valid_round: Round::Nil,
                proposer: me,
                signature: signer.sign_raw(&bytes),
                block,
            });
        }
    }
    out
}

/// The `withhold` validator's engine signer: from `from_ms` on, its votes are signed over
/// other bytes, so every peer refuses them (counted as `signatures_refused.votes`).
struct WithholdingSigner {
    inner: GuardedSigner,
    from_ms: i64,
}

#[async_trait::async_trait]
impl Signer<Ctx> for WithholdingSigner {
    async fn sign_vote(&self, vote: Vote) -> Result<SignedMessage<Ctx, Vote>, SignError> {
        if ccron_node::core::now_ms() < self.from_ms {
            return self.inner.sign_vote(vote).await;
        }
        let mut bytes = b"withheld".to_vec();
        bytes.extend_from_slice(&vote.signing_bytes(self.inner.raw().domain()));
        let sig: Sig = self.inner.raw().sign_raw(&bytes);
        Ok(SignedMessage::new(vote, sig))
    }

    async fn sign_proposal(
        &self,
        proposal: Proposal,
    ) -> Result<SignedMessage<Ctx, Proposal>, SignError> {
        self.inner.sign_proposal(proposal).await
    }

    async fn sign_vote_extension(
        &self,
        scope: VoteExtensionScope<Ctx>,
        extension: ClockSample,
    ) -> Result<SignedMessage<Ctx, ClockSample>, SignError> {
        self.inner.sign_vote_extension(scope, extension).await
    }

    async fn sign_validator_proof(
        &self,
        public_key: Vec<u8>,
        peer_id: Vec<u8>,
    ) -> Result<ValidatorProof<Ctx>, SignError> {
        self.inner.sign_validator_proof(public_key, peer_id).await
    }
}

/// The engine's network codec: [`BorshCodec`] for every message, on every node. A
/// `withhold-votes` validator's ([`NetCodec::of`]) keeps its own votes back from its start
/// time on: it refuses to encode a vote of its own (the engine's `PublishConsensusMsg` and
/// the liveness rebroadcast: the network actor logs the error and publishes nothing) and a
/// polka or round certificate holding one, and encodes its sync answers without its own
/// commit signatures. Decoding is never changed, and the engine's WAL keeps its own codec:
/// the node records and counts its votes as an honest one does.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetCodec {
    withhold: Option<(Address, i64)>,
}

impl NetCodec {
    /// The codec of a node at `me` with strategy `byzantine`: withholding for
    /// `withhold-votes`, else plain.
    pub fn of(byzantine: Option<Byzantine>, me: Address) -> Self {
        Self {
            withhold: byzantine
                .filter(|b| b.kind == ByzantineKind::WithholdVotes)
                .map(|b| (me, b.from_ms)),
        }
    }

    /// The voter whose votes are kept back now, if any.
    fn withheld(&self) -> Option<Address> {
        self.withhold
            .filter(|&(_, from)| ccron_node::core::now_ms() >= from)
            .map(|(me, _)| me)
    }

    /// Whether `msg` is to be kept back: a vote of the withheld voter, or a certificate
    /// holding one.
    fn keeps_back_liveness(&self, msg: &LivenessMsg<Ctx>) -> bool {
        let Some(me) = self.withheld() else {
            return false;
        };
        match msg {
            LivenessMsg::Vote(v) => v.message.validator == me,
            LivenessMsg::PolkaCertificate(c) => c.polka_signatures.iter().any(|s| s.address == me),
            LivenessMsg::SkipRoundCertificate(c) => {
                c.round_signatures.iter().any(|s| s.address == me)
            }
        }
    }
}

macro_rules! plain_net_codec {
    ($($t:ty),* $(,)?) => {$(
        impl Codec<$t> for NetCodec {
            type Error = CodecError;

            fn decode(&self, bytes: Bytes) -> Result<$t, CodecError> {
                BorshCodec.decode(bytes)
            }

            fn encode(&self, msg: &$t) -> Result<Bytes, CodecError> {
                BorshCodec.encode(msg)
            }
        }
    )*};
}

plain_net_codec!(
    ProposalPart,
    StreamMessage<ProposalPart>,
    ValidatorProof<Ctx>,
    msync::Status<Ctx>,
    msync::Request<Ctx>,
);

impl Codec<SignedConsensusMsg<Ctx>> for NetCodec {
    type Error = CodecError;

    fn decode(&self, bytes: Bytes) -> Result<SignedConsensusMsg<Ctx>, CodecError> {
        BorshCodec.decode(bytes)
    }

    fn encode(&self, msg: &SignedConsensusMsg<Ctx>) -> Result<Bytes, CodecError> {
        if let SignedConsensusMsg::Vote(v) = msg
            && self.withheld() == Some(v.message.validator)
        {
            tracing::debug!(
                height = v.message.height.0,
                "withhold-votes: own vote kept back"
            );
            return Err(CodecError::Withheld("own vote"));
        }
        BorshCodec.encode(msg)
    }
}

impl Codec<LivenessMsg<Ctx>> for NetCodec {
    type Error = CodecError;

    fn decode(&self, bytes: Bytes) -> Result<LivenessMsg<Ctx>, CodecError> {
        BorshCodec.decode(bytes)
    }

    fn encode(&self, msg: &LivenessMsg<Ctx>) -> Result<Bytes, CodecError> {
        if self.keeps_back_liveness(msg) {
            tracing::debug!("withhold-votes: own vote or certificate kept back");
            return Err(CodecError::Withheld("own vote in a liveness message"));
        }
        BorshCodec.encode(msg)
    }
}

impl Codec<msync::Response<Ctx>> for NetCodec {
    type Error = CodecError;

    fn decode(&self, bytes: Bytes) -> Result<msync::Response<Ctx>, CodecError> {
        BorshCodec.decode(bytes)
    }

    fn encode(&self, msg: &msync::Response<Ctx>) -> Result<Bytes, CodecError> {
        match self.withheld() {
            Some(me) => crate::context::encode_response_without(msg, &me),
            None => BorshCodec.encode(msg),
        }
    }
}

/// The unfiltered length: at most a few signatures more than a withholding node's answer.
impl HasEncodedLen<msync::Response<Ctx>> for NetCodec {
    fn encoded_len(&self, msg: &msync::Response<Ctx>) -> Result<usize, CodecError> {
        BorshCodec.encoded_len(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use malachitebft_core_types::{
        ExtendedCommitCertificate, ExtendedCommitSignature, NilOrVal, PolkaCertificate,
        PolkaSignature, VoteType,
    };

    fn vote(by: Address, height: u64) -> SignedMessage<Ctx, Vote> {
        SignedMessage::new(
            Vote {
                typ: VoteType::Prevote,
                height: Height(height),
                round: Round::new(0),
                value: NilOrVal::Nil,
                validator: by,
                extension: None,
            },
            Sig([7; 64]),
        )
    }

    fn withholding(me: Address, from_ms: i64) -> NetCodec {
        NetCodec::of(
            Some(Byzantine {
                kind: ByzantineKind::WithholdVotes,
                from_ms,
            }),
            me,
        )
    }

    #[test]
    fn a_vote_withholding_codec_keeps_back_its_own_votes_only_and_only_from_its_start() {
        let (me, peer) = (Address([1; 32]), Address([2; 32]));
        let on = withholding(me, 0);
        let own = SignedConsensusMsg::Vote(vote(me, 5));
        let other = SignedConsensusMsg::Vote(vote(peer, 5));
        assert!(matches!(on.encode(&own), Err(CodecError::Withheld(_))));
        assert_eq!(
            on.encode(&other).unwrap(),
            BorshCodec.encode(&other).unwrap()
        );
        assert!(matches!(
            on.encode(&LivenessMsg::Vote(vote(me, 5))),
            Err(CodecError::Withheld(_))
        ));
        assert!(on.encode(&LivenessMsg::Vote(vote(peer, 5))).is_ok());
        let polka = |by: Vec<Address>| {
            LivenessMsg::PolkaCertificate(PolkaCertificate {
                height: Height(5),
                round: Round::new(0),
                value_id: ccron_node::Hash32([3; 32]),
                polka_signatures: by
                    .into_iter()
                    .map(|a| PolkaSignature::new(a, Sig([9; 64])))
                    .collect(),
            })
        };
        assert!(on.encode(&polka(vec![peer, me])).is_err());
        assert!(on.encode(&polka(vec![peer])).is_ok());
        // Decoding is untouched.
        let bytes = BorshCodec.encode(&own).unwrap();
        assert_eq!(
            Codec::<SignedConsensusMsg<Ctx>>::decode(&on, bytes).unwrap(),
            own
        );
        // Before its start time, and for any other kind or an honest node: plain.
        let later = withholding(me, i64::MAX);
        assert!(later.encode(&own).is_ok());
        let flood = NetCodec::of(
            Some(Byzantine {
                kind: ByzantineKind::Flood,
                from_ms: 0,
            }),
            me,
        );
        assert!(flood.encode(&own).is_ok());
        assert!(NetCodec::default().encode(&own).is_ok());
    }

    #[test]
    fn a_vote_withholding_codec_answers_sync_without_its_own_commit_signatures() {
        let (me, peer) = (Address([1; 32]), Address([2; 32]));
        let cert = ExtendedCommitCertificate {
            height: Height(4),
            round: Round::new(0),
            value_id: ccron_node::Hash32([3; 32]),
            commit_signatures: [me, peer]
                .into_iter()
                .map(|a| ExtendedCommitSignature::new(a, Sig([9; 64]), None))
                .collect(),
        };
        let response = msync::Response::ValueResponse(malachitebft_sync::ValueResponse::new(
            Height(4),
            vec![msync::RawDecidedValue::new(Bytes::from_static(b"v"), cert)],
        ));
        let signers = |codec: &NetCodec| -> Vec<Address> {
            let bytes = codec.encode(&response).unwrap();
            let msync::Response::ValueResponse(r) = BorshCodec.decode(bytes).unwrap();
            r.values[0]
                .certificate
                .commit_signatures
                .iter()
                .map(|c| c.address)
                .collect()
        };
        assert_eq!(signers(&withholding(me, 0)), vec![peer]);
        assert_eq!(signers(&NetCodec::default()), vec![me, peer]);
    }

    #[test]
    fn the_second_value_differs_from_the_first() {
        let signer = ccron_node::crypto::Signer::new([1; 32]);
        let block = ccron_node::Block {
            height: 5,
            prev_round: 0,
            prev_id: Default::default(),
            samples: Vec::new(),
            agreed_time_ms: 10,
            ticks: vec![TickTx::sign(
                &ccron_node::crypto::SigningDomain::V1,
                1,
                1,
                &signer,
            )],
            requests: Vec::new(),
            prev_state: None,
        };
        let other = other_value(&block, 3);
        assert!(other.ticks.is_empty() && other.id() != block.id());
        let again = other_value(&other, 3);
        assert_eq!(again.agreed_time_ms, 11);
        assert_ne!(again.id(), other.id());
    }

    fn block_with_samples(n: u8) -> ccron_node::Block {
        ccron_node::Block {
            height: 9,
            prev_round: 0,
            prev_id: ccron_node::types::Hash32::default(),
            samples: (0..n)
                .map(|i| ccron_node::types::CarriedSample {
                    validator: ccron_node::Address([i; 32]),
                    time_ms: 1_700_000_000_000 + i64::from(i),
                    signature: Sig([i; 64]),
                })
                .collect(),
            agreed_time_ms: 1_700_000_000_001,
            ticks: Vec::new(),
            requests: Vec::new(),
            prev_state: Some([3; 32]),
        }
    }

    #[test]
    fn forged_samples_are_one_changed_signature_or_fewer_than_a_quorum() {
        let b = block_with_samples(4);
        let flipped = forge_samples(b.clone(), 3, false);
        assert_eq!(flipped.samples.len(), 4);
        assert_ne!(flipped.samples[0].signature, b.samples[0].signature);
        assert_eq!(flipped.samples[1..], b.samples[1..]);
        let short = forge_samples(b.clone(), 3, true);
        assert_eq!(short.samples, b.samples[..2]);
        // Everything else unchanged; a block without samples stays as it is.
        assert_eq!(
            (short.agreed_time_ms, short.height),
            (b.agreed_time_ms, b.height)
        );
        let none = block_with_samples(0);
        assert_eq!(forge_samples(none.clone(), 3, false), none);
    }

    #[test]
    fn an_oversized_block_is_over_the_bound_and_under_the_pubsub_limit() {
        let b = oversize(block_with_samples(4));
        let len = b.encode().len();
        assert!(len > ccron_node::ledger::MAX_BLOCK_BYTES, "{len}");
        assert!(
            (ccron_node::hostile::OVERSIZED_BLOCK_BYTES
                ..ccron_node::hostile::OVERSIZED_BLOCK_BYTES + 256)
                .contains(&len),
            "{len}"
        );
        // The engine's pub-sub limit (malachitebft-config's default `pubsub_max_size`).
        assert!(len < 4 << 20, "{len}");
        assert_eq!(b.samples, block_with_samples(4).samples);
    }
}
