//! What the node stores with each decided block on this engine: Malachite's commit certificate
//! and the signed clock samples (vote extensions) of its precommits, as the node's
//! [`ccron_node::Commit`]; and [`CertificateVerifier`], the check a node catching up from a
//! peer's snapshot makes of the certificate vouching for it ([`ccron_node::catchup`]).

use std::collections::BTreeSet;

use borsh::{BorshDeserialize, BorshSerialize};
use ccron_node::catchup::{CommitRefusal, CommitVerifier};
use ccron_node::crypto::SigningDomain;
use ccron_node::{CarriedSample, Commit, NodeError};
use malachitebft_core_types::{
    CommitCertificate, NilOrVal, Round, SignedExtension, ValidatorSet as _, VoteExtensionScope,
    VoteType,
};

use crate::context::{
    Address, ClockSample, Ctx, Hash32, Height, ValidatorSet, Vote, extension_signing_bytes,
    verify_raw,
};

/// One decided height's commit on Malachite. (Its encoding after the block is the block store's
/// record layout since the first release: block, certificate, extensions.)
#[derive(Clone, Debug, BorshSerialize, BorshDeserialize)]
pub struct MalachiteCommit {
    /// The commit certificate.
    pub certificate: CommitCertificate<Ctx>,
    /// The signed clock samples on the deciding precommits.
    pub extensions: Vec<(Address, SignedExtension<Ctx>)>,
}

impl Commit for MalachiteCommit {
    fn height(&self) -> u64 {
        self.certificate.height.0
    }

    fn round(&self) -> u32 {
        self.certificate.round.as_u32().unwrap_or(0)
    }

    fn value_id(&self) -> Hash32 {
        self.certificate.value_id
    }

    fn samples(&self) -> Vec<CarriedSample> {
        self.extensions
            .iter()
            .map(|(a, e)| CarriedSample {
                validator: (*a).into(),
                time_ms: e.message.time_ms,
                signature: e.signature,
            })
            .collect()
    }

    fn sample_message(
        domain: &ccron_node::crypto::SigningDomain,
        height: u64,
        round: u32,
        id: &Hash32,
        validator: &ccron_node::Address,
        time_ms: i64,
    ) -> Vec<u8> {
        let scope = VoteExtensionScope::<Ctx>::new(
            Height(height),
            Round::new(round),
            *id,
            Address(validator.0),
        );
        extension_signing_bytes(domain, &scope, &ClockSample { time_ms })
    }
}

/// Checks a [`MalachiteCommit`] as the engine checks a commit certificate
/// (`VerifierExt::verify_commit_certificate`, the same reconstruction of each precommit): every
/// signer a distinct validator of the set, every signature a precommit of the certificate's
/// (height, round, value) in the chain's signing domain, checked with `ccron::sig`'s one pinned
/// rule ([`verify_raw`]), and the signers holding more than two thirds of the voting power;
/// every clock sample carried (vote extension) a validator's signature over its scope too.
#[derive(Clone, Debug)]
pub struct CertificateVerifier {
    vset: ValidatorSet,
    domain: SigningDomain,
}

impl CertificateVerifier {
    /// A verifier for `vset` in `domain`.
    pub fn new(vset: ValidatorSet, domain: SigningDomain) -> Self {
        Self { vset, domain }
    }

    /// The verifier of a genesis' chain: its validators and signing domain.
    ///
    /// # Errors
    /// A malformed genesis ([`NodeError::Config`]).
    pub fn of_genesis(genesis: &ccron_node::records::Genesis) -> Result<Self, NodeError> {
        let domain = genesis
            .domain()
            .map_err(|e| NodeError::Config(format!("genesis.json: {e}")))?;
        let keys: Vec<[u8; 32]> = ccron_node::core::genesis_validators(genesis)?
            .addresses()
            .iter()
            .map(|a| a.0)
            .collect();
        Ok(Self::new(ValidatorSet::new(&keys), domain))
    }
}

impl CommitVerifier<MalachiteCommit> for CertificateVerifier {
    fn verify_commit(&self, commit: &MalachiteCommit) -> Result<(), CommitRefusal> {
        let cert = &commit.certificate;
        let mut seen = BTreeSet::new();
        for sig in &cert.commit_signatures {
            if !seen.insert(sig.address) {
                return Err(CommitRefusal::DuplicateSigner(sig.address.to_string()));
            }
            let Some(v) = self.vset.get_by_address(&sig.address) else {
                return Err(CommitRefusal::UnknownSigner(sig.address.to_string()));
            };
            let vote = Vote {
                typ: VoteType::Precommit,
                height: cert.height,
                round: cert.round,
                value: NilOrVal::Val(cert.value_id),
                validator: sig.address,
                extension: None,
            };
            if !verify_raw(
                &v.public_key,
                &vote.signing_bytes(&self.domain),
                &sig.signature,
            ) {
                return Err(CommitRefusal::BadSignature(sig.address.to_string()));
            }
        }
        let (signed, total) = (seen.len() as u64, self.vset.total_voting_power());
        if seen.len() < self.vset.quorum() {
            return Err(CommitRefusal::NotEnoughPower { signed, total });
        }
        for (address, ext) in &commit.extensions {
            let Some(v) = self.vset.get_by_address(address) else {
                return Err(CommitRefusal::UnknownSigner(address.to_string()));
            };
            let scope =
                VoteExtensionScope::<Ctx>::new(cert.height, cert.round, cert.value_id, *address);
            let bytes = extension_signing_bytes(&self.domain, &scope, &ext.message);
            if !verify_raw(&v.public_key, &bytes, &ext.signature) {
                return Err(CommitRefusal::BadSignature(format!(
                    "{address} (clock sample)"
                )));
            }
        }
        Ok(())
    }
}
