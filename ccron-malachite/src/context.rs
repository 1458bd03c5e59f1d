//! The Malachite `Context` of the adapter: heights, addresses, blocks, votes, proposals,
//! proposal parts, the ed25519 signing scheme and the one codec (borsh) for everything the
//! engine sends over the network, writes to its WAL or serves through sync.
//!
//! Every signature the engine makes or checks (votes, proposals, proposal parts, clock
//! samples, validator proofs) covers the chain's signing domain
//! ([`ccron_node::crypto::SigningDomain::message`], the genesis' chain id from version 2) over
//! the fields below: [`Ed25519Signer`] and [`Ed25519Verifier`] carry the domain, so a vote or a
//! part signed for one chain is refused, and counted, on another.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use borsh::{BorshDeserialize, BorshSerialize};
use bytes::Bytes;
pub use ccron_node::crypto::verify_raw;
use ccron_node::crypto::{SignedKind, SigningDomain};
pub use ccron_node::types::{Block, CarriedSample, Hash32, PubKey, Sig, TickTx};
use malachitebft_core_types::{
    self as mct, NilOrVal, Round, SignedExtension, SignedMessage, SigningScheme, ValidatorProof,
    VoteExtensionScope, VoteType,
};
use malachitebft_signing::{Error as SignError, VerificationResult};

/// A block height (`last_executed_seq` in the report).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    BorshSerialize,
    BorshDeserialize,
)]
pub struct Height(pub u64);

impl fmt::Display for Height {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl mct::Height for Height {
    const ZERO: Self = Height(0);
    const INITIAL: Self = Height(1);

    fn increment_by(&self, n: u64) -> Self {
        Height(self.0.saturating_add(n))
    }

    fn decrement_by(&self, n: u64) -> Option<Self> {
        self.0.checked_sub(n).map(Height)
    }

    fn as_u64(&self) -> u64 {
        self.0
    }
}

/// A validator address: its ed25519 public key.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, BorshSerialize, BorshDeserialize,
)]
pub struct Address(pub [u8; 32]);

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl mct::Address for Address {}

impl From<ccron_node::Address> for Address {
    fn from(a: ccron_node::Address) -> Self {
        Address(a.0)
    }
}

impl From<Address> for ccron_node::Address {
    fn from(a: Address) -> Self {
        ccron_node::Address(a.0)
    }
}

/// A signed clock sample: the vote extension each validator attaches to its precommit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct ClockSample {
    /// The validator's wall clock, Unix milliseconds.
    pub time_ms: i64,
}

impl mct::Extension for ClockSample {
    fn size_bytes(&self) -> usize {
        8
    }
}

/// The value consensus decides: the node's [`Block`] (borsh-encoded as the block itself).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct Value(pub Block);

impl mct::Value for Value {
    type Id = Hash32;

    fn id(&self) -> Hash32 {
        self.0.id()
    }
}

/// The signing scheme: ed25519 (ed25519-dalek).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ed25519;

/// A key or signature that does not decode.
#[derive(Debug)]
pub struct DecodeError;

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bad key or signature length")
    }
}

impl SigningScheme for Ed25519 {
    type DecodingError = DecodeError;
    type Signature = Sig;
    type PublicKey = PubKey;
    type PrivateKey = [u8; 32];

    fn decode_signature(bytes: &[u8]) -> Result<Sig, DecodeError> {
        <[u8; 64]>::try_from(bytes)
            .map(Sig)
            .map_err(|_| DecodeError)
    }

    fn encode_signature(signature: &Sig) -> Vec<u8> {
        signature.0.to_vec()
    }

    fn decode_public_key(bytes: &[u8]) -> Result<PubKey, DecodeError> {
        <[u8; 32]>::try_from(bytes)
            .map(PubKey)
            .map_err(|_| DecodeError)
    }

    fn encode_public_key(public_key: &PubKey) -> Vec<u8> {
        public_key.0.to_vec()
    }
}

/// One validator (equal voting power).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validator {
    /// Its address.
    pub address: Address,
    /// Its public key.
    pub public_key: PubKey,
}

impl mct::Validator<Ctx> for Validator {
    fn address(&self) -> &Address {
        &self.address
    }

    fn public_key(&self) -> &PubKey {
        &self.public_key
    }

    fn voting_power(&self) -> u64 {
        1
    }
}

/// The validator set, ordered by address (the genesis order), as the application passes it to
/// the engine for one height: with that height's round-0 proposer when proposer reputation
/// chose one ([`crate::reputation`], [`ValidatorSet::for_height`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatorSet {
    /// The validators.
    pub validators: Vec<Validator>,
    /// `(height, index)`: the round-0 proposer of `height` is `validators[index]`.
    round0: Option<(Height, usize)>,
}

impl ValidatorSet {
    /// A set from public keys.
    pub fn new(keys: &[[u8; 32]]) -> Self {
        let mut validators: Vec<Validator> = keys
            .iter()
            .map(|k| Validator {
                address: Address(*k),
                public_key: PubKey(*k),
            })
            .collect();
        validators.sort_by_key(|v| v.address);
        ValidatorSet {
            validators,
            round0: None,
        }
    }

    /// This set for `height`, whose round-0 proposer is `validators[index]` (an index out of
    /// range is ignored: plain rotation).
    pub fn for_height(&self, height: Height, index: usize) -> Self {
        ValidatorSet {
            validators: self.validators.clone(),
            round0: (index < self.validators.len()).then_some((height, index)),
        }
    }

    /// The proposer of `(height, round)`, what the engine asks
    /// (`Context::select_proposer`): the round-0 proposer this set carries for its height,
    /// else plain rotation ([`proposer_of`]; every round `>= 1`, and any other height).
    pub fn proposer(&self, height: Height, round: Round) -> &Validator {
        if let Some((h, i)) = self.round0
            && h == height
            && round == Round::new(0)
            && let Some(v) = self.validators.get(i)
        {
            return v;
        }
        proposer_of(self, height, round)
    }

    /// The engine's commit quorum with equal power: more than two thirds,
    /// [`ccron::host::two_thirds_quorum`] (2f+1 when n = 3f+1, at least that for any n).
    pub fn quorum(&self) -> usize {
        ccron::host::two_thirds_quorum(u32::try_from(self.validators.len()).unwrap_or(u32::MAX))
    }

    /// Whether `address` is a validator.
    pub fn contains(&self, address: &Address) -> bool {
        self.validators.iter().any(|v| v.address == *address)
    }
}

impl mct::ValidatorSet<Ctx> for ValidatorSet {
    fn count(&self) -> usize {
        self.validators.len()
    }

    fn total_voting_power(&self) -> u64 {
        self.validators.len() as u64
    }

    fn get_by_address(&self, address: &Address) -> Option<&Validator> {
        self.validators.iter().find(|v| v.address == *address)
    }

    fn get_by_index(&self, index: usize) -> Option<&Validator> {
        self.validators.get(index)
    }
}

/// A vote.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Vote {
    /// Prevote or precommit.
    pub typ: VoteType,
    /// Height.
    pub height: Height,
    /// Round.
    pub round: Round,
    /// The value voted for, or nil.
    pub value: NilOrVal<Hash32>,
    /// The voter.
    pub validator: Address,
    /// The vote extension (precommits only).
    pub extension: Option<SignedExtension<Ctx>>,
}

impl Vote {
    /// The bytes signed in `domain`: everything but the extension (signed separately).
    pub fn signing_bytes(&self, domain: &SigningDomain) -> Vec<u8> {
        let mut out = Vec::with_capacity(80);
        let _ = self.typ.serialize(&mut out);
        let _ = self.height.serialize(&mut out);
        let _ = self.round.serialize(&mut out);
        let _ = self.value.serialize(&mut out);
        let _ = self.validator.serialize(&mut out);
        domain.message(SignedKind::Vote, &out)
    }
}

impl mct::Vote<Ctx> for Vote {
    fn height(&self) -> Height {
        self.height
    }

    fn round(&self) -> Round {
        self.round
    }

    fn value(&self) -> &NilOrVal<Hash32> {
        &self.value
    }

    fn take_value(self) -> NilOrVal<Hash32> {
        self.value
    }

    fn vote_type(&self) -> VoteType {
        self.typ
    }

    fn validator_address(&self) -> &Address {
        &self.validator
    }

    fn extension(&self) -> Option<&SignedExtension<Ctx>> {
        self.extension.as_ref()
    }

    fn take_extension(&mut self) -> Option<SignedExtension<Ctx>> {
        self.extension.take()
    }

    fn extend(self, extension: SignedExtension<Ctx>) -> Self {
        Vote {
            extension: Some(extension),
            ..self
        }
    }
}

/// A proposal.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Proposal {
    /// Height.
    pub height: Height,
    /// Round.
    pub round: Round,
    /// The proposed block.
    pub value: Value,
    /// The proof-of-lock round.
    pub pol_round: Round,
    /// The proposer.
    pub proposer: Address,
}

impl mct::Proposal<Ctx> for Proposal {
    fn height(&self) -> Height {
        self.height
    }

    fn round(&self) -> Round {
        self.round
    }

    fn value(&self) -> &Value {
        &self.value
    }

    fn take_value(self) -> Value {
        self.value
    }

    fn pol_round(&self) -> Round {
        self.pol_round
    }

    fn validator_address(&self) -> &Address {
        &self.proposer
    }
}

/// A streamed proposal part. A proposal is one self-contained `Full` part (blocks are small),
/// signed by the proposer, followed by the stream's `Fin`.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct ProposalPart {
    /// Height.
    pub height: Height,
    /// Round.
    pub round: Round,
    /// The round at which the proposer locked on the value (-1 for none).
    pub valid_round: Round,
    /// The proposer.
    pub proposer: Address,
    /// The block.
    pub block: Block,
    /// The proposer's signature over the part (without this field).
    pub signature: Sig,
}

impl ProposalPart {
    /// The bytes the proposer signs in `domain`.
    pub fn signing_bytes(
        domain: &SigningDomain,
        height: Height,
        round: Round,
        valid_round: Round,
        proposer: &Address,
        block: &Block,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(90);
        let _ = height.serialize(&mut out);
        let _ = round.serialize(&mut out);
        let _ = valid_round.serialize(&mut out);
        let _ = proposer.serialize(&mut out);
        out.extend_from_slice(&block.id().0);
        domain.message(SignedKind::ProposalPart, &out)
    }

    /// Whether the part's signature is its named proposer's, in `domain`.
    pub fn verify(&self, domain: &SigningDomain) -> bool {
        let bytes = Self::signing_bytes(
            domain,
            self.height,
            self.round,
            self.valid_round,
            &self.proposer,
            &self.block,
        );
        verify_raw(&PubKey(self.proposer.0), &bytes, &self.signature)
    }
}

impl ccron_node::Part for ProposalPart {
    fn height(&self) -> u64 {
        self.height.0
    }
}

impl mct::ProposalPart<Ctx> for ProposalPart {
    fn is_first(&self) -> bool {
        true
    }

    fn is_last(&self) -> bool {
        true
    }
}

/// The adapter's Malachite context.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ctx;

impl mct::Context for Ctx {
    type Address = Address;
    type Height = Height;
    type ProposalPart = ProposalPart;
    type Proposal = Proposal;
    type Validator = Validator;
    type ValidatorSet = ValidatorSet;
    type Timeouts = mct::LinearTimeouts;
    type Value = Value;
    type Vote = Vote;
    type Extension = ClockSample;
    type SigningScheme = Ed25519;

    fn select_proposer<'a>(
        &self,
        validator_set: &'a ValidatorSet,
        height: Height,
        round: Round,
    ) -> &'a Validator {
        validator_set.proposer(height, round)
    }

    fn new_proposal(
        &self,
        height: Height,
        round: Round,
        value: Value,
        pol_round: Round,
        address: Address,
    ) -> Proposal {
        Proposal {
            height,
            round,
            value,
            pol_round,
            proposer: address,
        }
    }

    fn new_prevote(
        &self,
        height: Height,
        round: Round,
        value_id: NilOrVal<Hash32>,
        address: Address,
    ) -> Vote {
        Vote {
            typ: VoteType::Prevote,
            height,
            round,
            value: value_id,
            validator: address,
            extension: None,
        }
    }

    fn new_precommit(
        &self,
        height: Height,
        round: Round,
        value_id: NilOrVal<Hash32>,
        address: Address,
    ) -> Vote {
        Vote {
            typ: VoteType::Precommit,
            height,
            round,
            value: value_id,
            validator: address,
            extension: None,
        }
    }
}

/// The stand-in returned for an empty validator set (never the case: genesis rejects it).
static NOBODY: Validator = Validator {
    address: Address([0; 32]),
    public_key: PubKey([0; 32]),
};

/// Plain round-robin proposer: (height - 1 + round) mod n over the address-ordered set (the
/// engine's choice for every round >= 1; round 0 may differ, [`ValidatorSet::proposer`]).
pub fn proposer_of(set: &ValidatorSet, height: Height, round: Round) -> &Validator {
    let n = set.validators.len().max(1) as u64;
    let r = round.as_u32().map_or(0, u64::from);
    let i = height.0.saturating_sub(1).wrapping_add(r) % n;
    set.validators.get(i as usize).unwrap_or(&NOBODY)
}

/// The bytes a vote extension (clock sample) signature covers in `domain`.
pub fn extension_signing_bytes(
    domain: &SigningDomain,
    scope: &VoteExtensionScope<Ctx>,
    sample: &ClockSample,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(90);
    let _ = scope.height.serialize(&mut out);
    let _ = scope.round.serialize(&mut out);
    let _ = scope.value_id.serialize(&mut out);
    let _ = scope.validator_address.serialize(&mut out);
    let _ = sample.serialize(&mut out);
    domain.message(SignedKind::ClockSample, &out)
}

/// The validator's signer (the node's, [`ccron_node::crypto::Signer`]) as the engine's, signing
/// in its chain's domain.
#[derive(Clone, Debug)]
pub struct Ed25519Signer {
    signer: ccron_node::crypto::Signer,
    domain: SigningDomain,
}

impl Ed25519Signer {
    /// From a 32-byte secret, signing in `domain`.
    pub fn new(secret: [u8; 32], domain: SigningDomain) -> Self {
        Self::of(ccron_node::crypto::Signer::new(secret), domain)
    }

    /// The node's `signer`, signing in `domain`.
    pub fn of(signer: ccron_node::crypto::Signer, domain: SigningDomain) -> Self {
        Ed25519Signer { signer, domain }
    }

    /// The public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.signer.public_key()
    }

    /// The node's signer.
    pub fn node_signer(&self) -> &ccron_node::crypto::Signer {
        &self.signer
    }

    /// The signing domain.
    pub fn domain(&self) -> &SigningDomain {
        &self.domain
    }

    /// Signs raw bytes (already in a domain: e.g. [`ProposalPart::signing_bytes`]).
    pub fn sign_raw(&self, bytes: &[u8]) -> Sig {
        self.signer.sign_raw(bytes)
    }
}

#[async_trait::async_trait]
impl malachitebft_signing::Signer<Ctx> for Ed25519Signer {
    async fn sign_vote(&self, vote: Vote) -> Result<SignedMessage<Ctx, Vote>, SignError> {
        let sig = self.sign_raw(&vote.signing_bytes(&self.domain));
        Ok(SignedMessage::new(vote, sig))
    }

    async fn sign_proposal(
        &self,
        proposal: Proposal,
    ) -> Result<SignedMessage<Ctx, Proposal>, SignError> {
        let sig = self.sign_raw(&proposal_signing_bytes(&self.domain, &proposal));
        Ok(SignedMessage::new(proposal, sig))
    }

    async fn sign_vote_extension(
        &self,
        scope: VoteExtensionScope<Ctx>,
        extension: ClockSample,
    ) -> Result<SignedMessage<Ctx, ClockSample>, SignError> {
        let sig = self.sign_raw(&extension_signing_bytes(&self.domain, &scope, &extension));
        Ok(SignedMessage::new(extension, sig))
    }

    async fn sign_validator_proof(
        &self,
        public_key: Vec<u8>,
        peer_id: Vec<u8>,
    ) -> Result<ValidatorProof<Ctx>, SignError> {
        let bytes = ValidatorProof::<Ctx>::signing_bytes(&public_key, &peer_id);
        let sig = self.sign_raw(&self.domain.message(SignedKind::ValidatorProof, &bytes));
        Ok(ValidatorProof::new(public_key, peer_id, sig))
    }
}

/// The bytes a proposal signature covers in `domain`.
pub fn proposal_signing_bytes(domain: &SigningDomain, p: &Proposal) -> Vec<u8> {
    let mut out = Vec::with_capacity(110);
    let _ = p.height.serialize(&mut out);
    let _ = p.round.serialize(&mut out);
    out.extend_from_slice(&p.value.0.id().0);
    let _ = p.pol_round.serialize(&mut out);
    let _ = p.proposer.serialize(&mut out);
    domain.message(SignedKind::Proposal, &out)
}

/// Engine messages refused for a bad signature, counted by [`Ed25519Verifier`].
#[derive(Debug, Default)]
pub struct RefusedSignatures {
    votes: AtomicU64,
    proposals: AtomicU64,
    extensions: AtomicU64,
    proofs: AtomicU64,
}

impl RefusedSignatures {
    /// The counts now.
    pub fn counts(&self) -> ccron_node::records::SignatureRefusals {
        ccron_node::records::SignatureRefusals {
            votes: self.votes.load(Ordering::Relaxed),
            proposals: self.proposals.load(Ordering::Relaxed),
            extensions: self.extensions.load(Ordering::Relaxed),
            proofs: self.proofs.load(Ordering::Relaxed),
        }
    }
}

/// Engine votes whose signature verified, per voter, counted by [`Ed25519Verifier`]
/// (`status.json`'s `votes_verified`): what reached this node of each validator's votes.
#[derive(Debug, Default)]
pub struct VerifiedVotes {
    by_voter: std::sync::Mutex<std::collections::BTreeMap<Address, ccron_node::records::VoteTally>>,
}

impl VerifiedVotes {
    /// Counts one verified vote.
    fn count(&self, vote: &Vote) {
        let mut m = self
            .by_voter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let t = m.entry(vote.validator).or_default();
        match vote.typ {
            VoteType::Prevote => t.prevotes = t.prevotes.saturating_add(1),
            VoteType::Precommit => t.precommits = t.precommits.saturating_add(1),
        }
        t.last_height = t.last_height.max(vote.height.0);
    }

    /// The counts now, by the voter's hex public key.
    pub fn counts(&self) -> std::collections::BTreeMap<String, ccron_node::records::VoteTally> {
        self.by_voter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(a, t)| (ccron_node::types::hex(&a.0), *t))
            .collect()
    }
}

/// Verifies everyone's signatures in the chain's domain; each refusal (a bad signature, or
/// one made for another chain) is counted (when it has counters) and traced (the engine drops
/// the message), and each verified vote is counted by voter (when it has counters).
#[derive(Clone, Debug)]
pub struct Ed25519Verifier {
    refused: Option<Arc<RefusedSignatures>>,
    verified: Option<Arc<VerifiedVotes>>,
    domain: SigningDomain,
}

impl Ed25519Verifier {
    /// A verifier of `domain`'s signatures, counting nothing.
    pub fn new(domain: SigningDomain) -> Self {
        Self {
            refused: None,
            verified: None,
            domain,
        }
    }

    /// A verifier of `domain`'s signatures counting its refusals into `refused` and the votes
    /// it verified into `verified`.
    pub fn counting(
        refused: Arc<RefusedSignatures>,
        verified: Arc<VerifiedVotes>,
        domain: SigningDomain,
    ) -> Self {
        Self {
            refused: Some(refused),
            verified: Some(verified),
            domain,
        }
    }

    fn verdict(
        &self,
        ok: bool,
        what: &'static str,
        pick: fn(&RefusedSignatures) -> &AtomicU64,
    ) -> VerificationResult {
        if !ok {
            if let Some(r) = &self.refused {
                pick(r).fetch_add(1, Ordering::Relaxed);
            }
            tracing::debug!(what, "signature refused");
        }
        VerificationResult::from_bool(ok)
    }
}

#[async_trait::async_trait]
impl malachitebft_signing::Verifier<Ctx> for Ed25519Verifier {
    async fn verify_signed_vote(
        &self,
        vote: &Vote,
        signature: &Sig,
        public_key: &PubKey,
    ) -> Result<VerificationResult, SignError> {
        let ok = verify_raw(public_key, &vote.signing_bytes(&self.domain), signature);
        if ok && let Some(v) = &self.verified {
            v.count(vote);
        }
        Ok(self.verdict(ok, "vote", |r| &r.votes))
    }

    async fn verify_signed_proposal(
        &self,
        proposal: &Proposal,
        signature: &Sig,
        public_key: &PubKey,
    ) -> Result<VerificationResult, SignError> {
        let ok = verify_raw(
            public_key,
            &proposal_signing_bytes(&self.domain, proposal),
            signature,
        );
        Ok(self.verdict(ok, "proposal", |r| &r.proposals))
    }

    async fn verify_signed_vote_extension(
        &self,
        scope: &VoteExtensionScope<Ctx>,
        extension: &ClockSample,
        signature: &Sig,
        public_key: &PubKey,
    ) -> Result<VerificationResult, SignError> {
        let ok = verify_raw(
            public_key,
            &extension_signing_bytes(&self.domain, scope, extension),
            signature,
        );
        Ok(self.verdict(ok, "extension", |r| &r.extensions))
    }

    async fn verify_validator_proof(
        &self,
        proof: &ValidatorProof<Ctx>,
    ) -> Result<VerificationResult, SignError> {
        let message = self
            .domain
            .message(SignedKind::ValidatorProof, &proof.preimage());
        let ok = <[u8; 32]>::try_from(proof.public_key.as_slice())
            .is_ok_and(|pk| verify_raw(&PubKey(pk), &message, &proof.signature));
        Ok(self.verdict(ok, "validator proof", |r| &r.proofs))
    }
}

/// The largest message the codec decodes.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// A codec error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The bytes do not decode.
    #[error("decode: {0}")]
    Decode(String),
    /// A message over the byte limit.
    #[error("message of {0} bytes is over the limit")]
    TooLarge(usize),
    /// Encoding failed.
    #[error("encode: {0}")]
    Encode(String),
    /// A Byzantine validator's network codec kept this message back (`withhold-votes`:
    /// `crate::byzantine::NetCodec`); the engine logs it and publishes nothing.
    #[error("withheld: {0}")]
    Withheld(&'static str),
}

/// The one codec for the engine: borsh for every type (network, WAL, sync).
#[derive(Clone, Copy, Debug, Default)]
pub struct BorshCodec;

fn borsh_decode<T: BorshDeserialize>(bytes: &Bytes) -> Result<T, CodecError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(CodecError::TooLarge(bytes.len()));
    }
    borsh::from_slice(bytes).map_err(|e| CodecError::Decode(e.to_string()))
}

fn borsh_encode<T: BorshSerialize>(msg: &T) -> Result<Bytes, CodecError> {
    borsh::to_vec(msg)
        .map(Bytes::from)
        .map_err(|e| CodecError::Encode(e.to_string()))
}

macro_rules! borsh_codec {
    ($($t:ty),* $(,)?) => {$(
        impl Codec<$t> for BorshCodec {
            type Error = CodecError;

            fn decode(&self, bytes: Bytes) -> Result<$t, CodecError> {
                borsh_decode(&bytes)
            }

            fn encode(&self, msg: &$t) -> Result<Bytes, CodecError> {
                borsh_encode(msg)
            }
        }
    )*};
}

use malachitebft_app_channel::app::types::codec::{Codec, HasEncodedLen};
use malachitebft_app_channel::app::types::sync as msync;

borsh_codec!(
    ProposalPart,
    malachitebft_core_consensus::SignedConsensusMsg<Ctx>,
    malachitebft_core_consensus::LivenessMsg<Ctx>,
    malachitebft_app_channel::app::types::streaming::StreamMessage<ProposalPart>,
    malachitebft_core_consensus::ProposedValue<Ctx>,
    mct::PolkaCertificate<Ctx>,
    msync::Status<Ctx>,
    msync::Request<Ctx>,
);

/// Wire mirror of one extended commit signature (upstream has no borsh for the certificate).
#[derive(BorshSerialize, BorshDeserialize)]
struct WireCommitSig {
    address: Address,
    signature: Sig,
    extension: Option<SignedExtension<Ctx>>,
}

/// Wire mirror of a synced decided value.
#[derive(BorshSerialize, BorshDeserialize)]
struct WireDecided {
    value_bytes: Vec<u8>,
    height: Height,
    round: Round,
    value_id: Hash32,
    signatures: Vec<WireCommitSig>,
}

/// Wire mirror of a sync response.
#[derive(BorshSerialize, BorshDeserialize)]
struct WireResponse {
    start_height: Height,
    values: Vec<WireDecided>,
}

fn to_wire(msg: &msync::Response<Ctx>) -> WireResponse {
    let msync::Response::ValueResponse(r) = msg;
    WireResponse {
        start_height: r.start_height,
        values: r
            .values
            .iter()
            .map(|v| WireDecided {
                value_bytes: v.value_bytes.to_vec(),
                height: v.certificate.height,
                round: v.certificate.round,
                value_id: v.certificate.value_id,
                signatures: v
                    .certificate
                    .commit_signatures
                    .iter()
                    .map(|c| WireCommitSig {
                        address: c.address,
                        signature: c.signature,
                        extension: c.extension.clone(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

impl Codec<msync::Response<Ctx>> for BorshCodec {
    type Error = CodecError;

    fn decode(&self, bytes: Bytes) -> Result<msync::Response<Ctx>, CodecError> {
        let w: WireResponse = borsh_decode(&bytes)?;
        let values = w
            .values
            .into_iter()
            .map(|v| {
                msync::RawDecidedValue::new(
                    Bytes::from(v.value_bytes),
                    mct::ExtendedCommitCertificate {
                        height: v.height,
                        round: v.round,
                        value_id: v.value_id,
                        commit_signatures: v
                            .signatures
                            .into_iter()
                            .map(|c| {
                                mct::ExtendedCommitSignature::new(
                                    c.address,
                                    c.signature,
                                    c.extension,
                                )
                            })
                            .collect(),
                    },
                )
            })
            .collect();
        Ok(msync::Response::ValueResponse(
            malachitebft_sync::ValueResponse::new(w.start_height, values),
        ))
    }

    fn encode(&self, msg: &msync::Response<Ctx>) -> Result<Bytes, CodecError> {
        borsh_encode(&to_wire(msg))
    }
}

/// A sync response encoded without the commit signatures of `skip` (a vote-withholding
/// validator's answers carry no vote of its own).
pub(crate) fn encode_response_without(
    msg: &msync::Response<Ctx>,
    skip: &Address,
) -> Result<Bytes, CodecError> {
    let mut w = to_wire(msg);
    for v in &mut w.values {
        v.signatures.retain(|c| c.address != *skip);
    }
    borsh_encode(&w)
}

impl HasEncodedLen<msync::Response<Ctx>> for BorshCodec {
    fn encoded_len(&self, msg: &msync::Response<Ctx>) -> Result<usize, CodecError> {
        borsh::object_length(&to_wire(msg)).map_err(|e| CodecError::Encode(e.to_string()))
    }
}

/// Validator proofs have no borsh encoding upstream: encoded by hand (key, peer id, signature).
impl Codec<ValidatorProof<Ctx>> for BorshCodec {
    type Error = CodecError;

    fn decode(&self, bytes: Bytes) -> Result<ValidatorProof<Ctx>, CodecError> {
        let (pk, peer, sig): (Vec<u8>, Vec<u8>, Sig) = borsh_decode(&bytes)?;
        Ok(ValidatorProof::new(pk, peer, sig))
    }

    fn encode(&self, msg: &ValidatorProof<Ctx>) -> Result<Bytes, CodecError> {
        borsh_encode(&(&msg.public_key, &msg.peer_id, &msg.signature))
    }
}
