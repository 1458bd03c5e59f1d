//! What the node stores with each decided block on this engine: Malachite's commit certificate
//! and the signed clock samples (vote extensions) of its precommits, as the node's
//! [`ccron_node::Commit`].

use borsh::{BorshDeserialize, BorshSerialize};
use ccron_node::{CarriedSample, Commit};
use malachitebft_core_types::{CommitCertificate, Round, SignedExtension, VoteExtensionScope};

use crate::context::{Address, ClockSample, Ctx, Hash32, Height, extension_signing_bytes};

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
