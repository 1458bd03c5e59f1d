//! The engine's signer behind the validator's signing guard ([`ccron_node::signguard`]): every
//! prevote, precommit and proposal the engine signs, and every proposal part the adapter signs
//! (`State::sign_own_part`), is first checked against what this key signed before (the state
//! file beside its key) and recorded durably before the signature is made. A refusal is a
//! typed [`SignRefusal`], counted (`status.json` `signing`, `/metrics`
//! `ccron_sign_refused_total{reason}`) and traced as an error; the engine gets a signing error
//! for it (Malachite then stops its consensus actor and the node exits: a validator that would
//! double-sign stops instead).
//!
//! Not guarded: clock samples (vote extensions, a wall-clock reading that differs on every
//! signing; they ride on the guarded precommit) and the validator proof (no height).

use std::sync::{Arc, Mutex, MutexGuard};

use ccron_node::signguard::{Check, SignCounters, SignKind, SignRefusal, SigningGuard, digest};
use malachitebft_core_types::{Round, SignedMessage, ValidatorProof, VoteExtensionScope, VoteType};
use malachitebft_signing::{Error as SignError, Signer};

use crate::context::{ClockSample, Ctx, Ed25519Signer, Proposal, Vote, proposal_signing_bytes};

/// The node's signing guard, shared by the engine's signer and the adapter's part signing.
#[derive(Debug, Clone)]
pub struct SharedGuard(Arc<Mutex<SigningGuard>>);

impl SharedGuard {
    /// Shares `guard`.
    pub fn new(guard: SigningGuard) -> Self {
        Self(Arc::new(Mutex::new(guard)))
    }

    fn lock(&self) -> MutexGuard<'_, SigningGuard> {
        // A panic while holding it cannot leave a half-made state: the file is replaced
        // atomically and the memory copy only after the save.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks to sign `kind` at `(height, round)` over `signing_bytes` (recorded durably first
    /// when new); a refusal is traced here.
    ///
    /// # Errors
    /// The refusal: nothing may be signed.
    pub fn sign(
        &self,
        kind: SignKind,
        height: u64,
        round: Round,
        signing_bytes: &[u8],
    ) -> Result<Check, SignRefusal> {
        let round = round.as_i64();
        let out = self.lock().sign(kind, height, round, digest(signing_bytes));
        if let Err(e) = &out {
            tracing::error!(
                %kind,
                height,
                round,
                reason = e.reason(),
                error = %e,
                "signing guard: refused to sign"
            );
        }
        out
    }

    /// The guard's counters now.
    pub fn counters(&self) -> SignCounters {
        self.lock().counters().clone()
    }

    /// The guard's floor (nothing at or below it is signed).
    pub fn floor(&self) -> u64 {
        self.lock().state().floor
    }
}

/// The validator's engine signer behind the guard (see the module documentation).
#[derive(Debug, Clone)]
pub struct GuardedSigner {
    inner: Ed25519Signer,
    guard: SharedGuard,
}

impl GuardedSigner {
    /// `inner` behind `guard`.
    pub fn new(inner: Ed25519Signer, guard: SharedGuard) -> Self {
        Self { inner, guard }
    }

    /// The unguarded signer (for a Byzantine strategy's deliberate misbehaviour only).
    pub fn raw(&self) -> &Ed25519Signer {
        &self.inner
    }

    /// The guard.
    pub fn guard(&self) -> &SharedGuard {
        &self.guard
    }
}

fn refused(e: SignRefusal) -> SignError {
    SignError::from_source(e)
}

#[async_trait::async_trait]
impl Signer<Ctx> for GuardedSigner {
    async fn sign_vote(&self, vote: Vote) -> Result<SignedMessage<Ctx, Vote>, SignError> {
        let kind = match vote.typ {
            VoteType::Prevote => SignKind::Prevote,
            VoteType::Precommit => SignKind::Precommit,
        };
        let bytes = vote.signing_bytes(self.inner.domain());
        self.guard
            .sign(kind, vote.height.0, vote.round, &bytes)
            .map_err(refused)?;
        self.inner.sign_vote(vote).await
    }

    async fn sign_proposal(
        &self,
        proposal: Proposal,
    ) -> Result<SignedMessage<Ctx, Proposal>, SignError> {
        let bytes = proposal_signing_bytes(self.inner.domain(), &proposal);
        self.guard
            .sign(
                SignKind::Proposal,
                proposal.height.0,
                proposal.round,
                &bytes,
            )
            .map_err(refused)?;
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
