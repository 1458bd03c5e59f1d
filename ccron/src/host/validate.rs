//! Block validity, pure: what every validator re-checks before it votes for a proposed block
//! (and a proposer before it proposes), against the host's replicated state.
//!
//! A block-driven engine (Tendermint: Malachite, CometBFT) orders whatever its proposer puts in
//! a block, so each validator must judge a proposal before voting: the height, the agreed time
//! and its evidence, the ticks (from validators, for ticking components, one per component and
//! sender, numbers above the replay floor, signed), the client requests (bounded in count and
//! bytes, signed, no `(client, number)` twice). [`BlockHost::validate`] applies these rules with
//! the host's own state (last height and agreed time, the tick gate's floor, the time rule), so
//! every engine judges a block the same way. Signature checks go through [`Verify`]: the engine
//! hands each signed item's key, message and signature, and one pinned verification rule
//! decides.

use std::collections::BTreeSet;

use super::app::{Application, ClientId, Millis};
use super::block::BlockHost;
use super::ticks::{TickRejection, ValidatorId};
use super::time::{TimeError, TimeEvidence, next_agreed_time};
use crate::ReservedPages;

/// A signature scheme's verification: whether `signature` is `public_key`'s signature over
/// `message`. Every validator must use the same rule (a pinned implementation), or they
/// disagree on which blocks are valid.
pub trait Verify {
    /// Whether the signature verifies.
    fn verify(&self, public_key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> bool;
}

/// A signed item of a block: who signed what, and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed<'a> {
    /// The signer's public key.
    pub key: &'a [u8; 32],
    /// The exact bytes signed (domain-separated by the engine's format).
    pub message: Vec<u8>,
    /// The signature.
    pub signature: &'a [u8; 64],
}

/// A tick a proposed block carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickClaim<'a> {
    /// The component.
    pub component: u32,
    /// The validator index of the signer's key (`None`: not a validator).
    pub sender: Option<ValidatorId>,
    /// The sender's tick number.
    pub number: u64,
    /// Its signature.
    pub signed: Signed<'a>,
}

/// A client request a proposed block carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestClaim<'a> {
    /// The client (derived from its key by the engine).
    pub client: ClientId,
    /// The client's request number.
    pub number: u64,
    /// Its encoded size in the block.
    pub encoded_len: usize,
    /// Its signature.
    pub signed: Signed<'a>,
}

/// A clock sample a proposed block carries (Tendermint: the previous height's precommit vote
/// extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleClaim<'a> {
    /// The validator index of the signer (`None`: not a validator).
    pub validator: Option<ValidatorId>,
    /// The clock.
    pub time_ms: Millis,
    /// Its signature.
    pub signed: Signed<'a>,
}

/// The time evidence of a proposed block.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProposalTime<'a> {
    /// The chain's first block: the proposer's stamp (the block's claimed time), not before
    /// `genesis_ms`.
    First {
        /// The chain's genesis time.
        genesis_ms: Millis,
    },
    /// The chain's first block timed at the genesis time itself (no proposer's stamp, so no
    /// proposer chooses it and no local clock judges it): its claimed time must be exactly
    /// `genesis_ms`.
    Genesis {
        /// The chain's genesis time.
        genesis_ms: Millis,
    },
    /// Signed samples of the previous height, in ascending validator order, one per validator.
    Samples(Vec<SampleClaim<'a>>),
    /// A primary's stamp and a verified certificate's median (PBFT).
    Stamped {
        /// The primary's clock.
        stamp_ms: Millis,
        /// The certificate's median, if one is attached.
        certificate_median_ms: Option<Millis>,
    },
}

/// What a block may carry at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    /// Client requests per block.
    pub max_requests: usize,
    /// Encoded bytes of a block's client requests.
    pub max_request_bytes: usize,
}

/// A proposed block, as the engine decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal<'a> {
    /// Its height.
    pub height: u64,
    /// The agreed time it claims.
    pub agreed_time_ms: Millis,
    /// The evidence for it.
    pub time: ProposalTime<'a>,
    /// Its ticks.
    pub ticks: Vec<TickClaim<'a>>,
    /// Its client requests, in execution order.
    pub requests: Vec<RequestClaim<'a>>,
}

/// Why a proposed block is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// The block is for another height than the next one.
    #[error("block for height {got}, expected {expected}")]
    WrongHeight {
        /// Claimed.
        got: u64,
        /// Expected.
        expected: u64,
    },
    /// A sample from a non-validator, repeated, or out of validator order.
    #[error("clock sample {index} from a non-validator, repeated or out of order")]
    BadSampler {
        /// Its position.
        index: usize,
    },
    /// A sample whose signature does not verify.
    #[error("clock sample {index}: the signature does not verify")]
    BadSampleSignature {
        /// Its position.
        index: usize,
    },
    /// The claimed time and its evidence fail the time rule.
    #[error("time: {0}")]
    Time(#[from] TimeError),
    /// A tick the gate refuses (not a validator, not ticking, a replayed number).
    #[error("tick {index}: {reason}")]
    Tick {
        /// Its position.
        index: usize,
        /// Why.
        reason: TickRejection,
    },
    /// A second tick of one component and sender.
    #[error("tick {index} repeats a component and sender of the block")]
    RepeatedTick {
        /// Its position.
        index: usize,
    },
    /// A tick whose signature is not its sender's.
    #[error("tick {index}: the signature does not verify")]
    BadTickSignature {
        /// Its position.
        index: usize,
    },
    /// More requests (count or encoded bytes) than a block may carry.
    #[error("{count} requests of {bytes} bytes, over the block's bounds")]
    TooManyRequests {
        /// Requests carried.
        count: usize,
        /// Their encoded bytes.
        bytes: usize,
    },
    /// A request whose signature is not its client's.
    #[error("request {index}: the signature does not verify")]
    BadRequestSignature {
        /// Its position.
        index: usize,
    },
    /// The same `(client, number)` twice in one block.
    #[error("request {index} repeats an earlier request number of its client")]
    RepeatedRequest {
        /// Its position.
        index: usize,
    },
}

fn verified(verify: &dyn Verify, s: &Signed<'_>) -> bool {
    verify.verify(s.key, &s.message, s.signature)
}

impl<A: Application, P: ReservedPages> BlockHost<A, P> {
    /// Judges `proposal` as the next block, at this validator's clock `now_ms`: the height
    /// (one above the last executed), the time (the host's [`TimeRule`](super::TimeRule):
    /// exactly the rule's result over verified evidence, within its bounds of `now_ms`), the
    /// ticks ([`TickGate`](super::TickGate) rules and the replay floor, one per component and
    /// sender, signed by the sender), the requests (within `limits`, signed by their client,
    /// no `(client, number)` twice). Nothing changes.
    ///
    /// # Errors
    /// The first reason the block is invalid.
    pub fn validate(
        &self,
        proposal: &Proposal<'_>,
        limits: &BlockLimits,
        now_ms: Millis,
        verify: &dyn Verify,
    ) -> Result<(), Invalid> {
        let expected = self.last_height().saturating_add(1);
        if proposal.height != expected {
            return Err(Invalid::WrongHeight {
                got: proposal.height,
                expected,
            });
        }
        self.validate_time(proposal, now_ms, verify)?;
        self.validate_ticks(&proposal.ticks, verify)?;
        validate_requests(&proposal.requests, limits, verify)
    }

    fn validate_time(
        &self,
        proposal: &Proposal<'_>,
        now_ms: Millis,
        verify: &dyn Verify,
    ) -> Result<(), Invalid> {
        let rule = self.time_rule();
        let previous = self.last_agreed_ms();
        let claimed = proposal.agreed_time_ms;
        match &proposal.time {
            ProposalTime::First { genesis_ms } => rule.check_evidence(
                claimed,
                previous,
                TimeEvidence::First {
                    stamp_ms: claimed,
                    genesis_ms: *genesis_ms,
                },
                now_ms,
            )?,
            ProposalTime::Genesis { genesis_ms } => {
                let expected = next_agreed_time(previous, *genesis_ms, rule.epsilon_ms);
                if claimed != expected {
                    return Err(TimeError::Mismatch {
                        proposed: claimed,
                        expected,
                    }
                    .into());
                }
            }
            ProposalTime::Samples(samples) => {
                let mut pairs = Vec::with_capacity(samples.len());
                let mut last: Option<ValidatorId> = None;
                for (index, s) in samples.iter().enumerate() {
                    let Some(v) = s.validator.filter(|v| last.is_none_or(|l| l < *v)) else {
                        return Err(Invalid::BadSampler { index });
                    };
                    if self.gate().authority().authorize(Some(v)).is_err() {
                        return Err(Invalid::BadSampler { index });
                    }
                    last = Some(v);
                    if !verified(verify, &s.signed) {
                        return Err(Invalid::BadSampleSignature { index });
                    }
                    pairs.push((v, s.time_ms));
                }
                rule.check_evidence(claimed, previous, TimeEvidence::Samples(&pairs), now_ms)?;
            }
            ProposalTime::Stamped {
                stamp_ms,
                certificate_median_ms,
            } => rule.check_evidence(
                claimed,
                previous,
                TimeEvidence::Stamped {
                    stamp_ms: *stamp_ms,
                    certificate_median_ms: *certificate_median_ms,
                },
                now_ms,
            )?,
        }
        Ok(())
    }

    fn validate_ticks(&self, ticks: &[TickClaim<'_>], verify: &dyn Verify) -> Result<(), Invalid> {
        let gate = self.gate();
        let mut seen = BTreeSet::new();
        for (index, t) in ticks.iter().enumerate() {
            let tick = |reason| Invalid::Tick { index, reason };
            let sender = gate.authority().authorize(t.sender).map_err(tick)?;
            if !gate.ticks(t.component) {
                return Err(tick(TickRejection::UnknownComponent(t.component)));
            }
            if let Some(last) = gate.last_number(t.component, sender)
                && t.number <= last
            {
                return Err(tick(TickRejection::Stale {
                    component: t.component,
                    sender,
                    number: t.number,
                    last,
                }));
            }
            if !seen.insert((t.component, sender)) {
                return Err(Invalid::RepeatedTick { index });
            }
            if !verified(verify, &t.signed) {
                return Err(Invalid::BadTickSignature { index });
            }
        }
        Ok(())
    }
}

fn validate_requests(
    requests: &[RequestClaim<'_>],
    limits: &BlockLimits,
    verify: &dyn Verify,
) -> Result<(), Invalid> {
    let bytes = requests
        .iter()
        .fold(0usize, |acc, r| acc.saturating_add(r.encoded_len));
    if requests.len() > limits.max_requests || bytes > limits.max_request_bytes {
        return Err(Invalid::TooManyRequests {
            count: requests.len(),
            bytes,
        });
    }
    let mut numbers = BTreeSet::new();
    for (index, r) in requests.iter().enumerate() {
        if !numbers.insert((r.client, r.number)) {
            return Err(Invalid::RepeatedRequest { index });
        }
        if !verified(verify, &r.signed) {
            return Err(Invalid::BadRequestSignature { index });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemPages;
    use crate::host::cron_ledger::tests::{KvLedger, ledger};
    use crate::host::{Block, CronLedger, TickGate, TimeRule, Tx};

    /// A toy scheme: a signature is the key's first byte repeated, xor the message length.
    struct Toy;

    fn sign(key: &[u8; 32], message: &[u8]) -> [u8; 64] {
        [key[0] ^ (message.len() as u8); 64]
    }

    impl Verify for Toy {
        fn verify(&self, key: &[u8; 32], message: &[u8], signature: &[u8; 64]) -> bool {
            *signature == sign(key, message)
        }
    }

    const KEYS: [[u8; 32]; 5] = [[1; 32], [2; 32], [3; 32], [4; 32], [9; 32]];
    const LIMITS: BlockLimits = BlockLimits {
        max_requests: 3,
        max_request_bytes: 100,
    };

    fn host() -> BlockHost<CronLedger<KvLedger>> {
        BlockHost::new(
            ledger(),
            MemPages::new(4_096, 4),
            TickGate::new(4, [(1, 1_000)].into_iter().collect()),
        )
        .with_time_rule(TimeRule::for_validators(4, 500, 2_000))
    }

    fn signed(key: &[u8; 32], message: Vec<u8>) -> Signed<'_> {
        let signature = Box::leak(Box::new(sign(key, &message)));
        Signed {
            key,
            message,
            signature,
        }
    }

    fn tick(sender: u32, number: u64) -> TickClaim<'static> {
        TickClaim {
            component: 1,
            sender: (sender < 4).then_some(sender),
            number,
            signed: signed(&KEYS[sender as usize], vec![0; 3]),
        }
    }

    fn request(client: u64, number: u64, len: usize) -> RequestClaim<'static> {
        RequestClaim {
            client: crate::authz::ClientId::from_index(client),
            number,
            encoded_len: len,
            signed: signed(&KEYS[0], vec![7; len]),
        }
    }

    fn sample(v: u32, time_ms: i64) -> SampleClaim<'static> {
        SampleClaim {
            validator: (v < 4).then_some(v),
            time_ms,
            signed: signed(&KEYS[v as usize], vec![1; 2]),
        }
    }

    fn first(
        ticks: Vec<TickClaim<'static>>,
        requests: Vec<RequestClaim<'static>>,
    ) -> Proposal<'static> {
        Proposal {
            height: 1,
            agreed_time_ms: 10_000,
            time: ProposalTime::First { genesis_ms: 9_000 },
            ticks,
            requests,
        }
    }

    /// One table of steps through one check: each proposal against a fresh host at genesis.
    #[test]
    fn the_first_block_is_judged_by_each_rule() {
        let h = host();
        let check = |p: Proposal<'static>, now: i64| h.validate(&p, &LIMITS, now, &Toy);
        assert_eq!(
            check(
                first(vec![tick(0, 1), tick(1, 1)], vec![request(5, 1, 10)]),
                10_100
            ),
            Ok(())
        );
        assert_eq!(
            check(
                Proposal {
                    height: 2,
                    ..first(vec![], vec![])
                },
                10_000
            ),
            Err(Invalid::WrongHeight {
                got: 2,
                expected: 1
            })
        );
        assert!(matches!(
            check(first(vec![], vec![]), 11_000),
            Err(Invalid::Time(TimeError::OutOfBounds { .. }))
        ));
        assert!(matches!(
            check(
                Proposal {
                    agreed_time_ms: 8_999,
                    ..first(vec![], vec![])
                },
                9_000
            ),
            Err(Invalid::Time(TimeError::BeforeGenesis { .. }))
        ));
        assert_eq!(
            check(first(vec![tick(4, 1)], vec![]), 10_000),
            Err(Invalid::Tick {
                index: 0,
                reason: TickRejection::NotAValidator
            })
        );
        let mut other = tick(0, 1);
        other.component = 2;
        assert_eq!(
            check(first(vec![other], vec![]), 10_000),
            Err(Invalid::Tick {
                index: 0,
                reason: TickRejection::UnknownComponent(2)
            })
        );
        assert_eq!(
            check(first(vec![tick(0, 1), tick(0, 2)], vec![]), 10_000),
            Err(Invalid::RepeatedTick { index: 1 })
        );
        let mut forged = tick(2, 1);
        forged.signed.key = &KEYS[1];
        assert_eq!(
            check(first(vec![forged], vec![]), 10_000),
            Err(Invalid::BadTickSignature { index: 0 })
        );
        assert_eq!(
            check(
                first(
                    vec![],
                    vec![
                        request(5, 1, 1),
                        request(5, 2, 1),
                        request(5, 3, 1),
                        request(5, 4, 1)
                    ]
                ),
                10_000
            ),
            Err(Invalid::TooManyRequests { count: 4, bytes: 4 })
        );
        assert_eq!(
            check(first(vec![], vec![request(5, 1, 101)]), 10_000),
            Err(Invalid::TooManyRequests {
                count: 1,
                bytes: 101
            })
        );
        assert_eq!(
            check(
                first(vec![], vec![request(5, 1, 1), request(5, 1, 2)]),
                10_000
            ),
            Err(Invalid::RepeatedRequest { index: 1 })
        );
        let mut bad = request(5, 1, 3);
        bad.signed.message.push(0);
        assert_eq!(
            check(first(vec![], vec![bad]), 10_000),
            Err(Invalid::BadRequestSignature { index: 0 })
        );
    }

    #[test]
    fn later_blocks_need_signed_samples_and_fresh_tick_numbers() {
        let mut h = host();
        h.execute_block(&Block {
            height: 1,
            agreed_time_ms: Some(10_000),
            txs: vec![Tx::Tick {
                component: 1,
                sender: Some(1),
                number: 5,
            }],
        })
        .unwrap();
        let next = |samples: Vec<SampleClaim<'static>>, time: i64, ticks| Proposal {
            height: 2,
            agreed_time_ms: time,
            time: ProposalTime::Samples(samples),
            ticks,
            requests: vec![],
        };
        let check = |p: Proposal<'static>| h.validate(&p, &LIMITS, 10_500, &Toy);
        let good = || vec![sample(0, 10_400), sample(1, 10_500), sample(2, 10_450)];
        assert_eq!(check(next(good(), 10_450, vec![tick(1, 6)])), Ok(()));
        assert_eq!(
            check(next(good(), 10_450, vec![tick(1, 5)])),
            Err(Invalid::Tick {
                index: 0,
                reason: TickRejection::Stale {
                    component: 1,
                    sender: 1,
                    number: 5,
                    last: 5
                }
            })
        );
        assert!(matches!(
            check(next(good(), 10_451, vec![])),
            Err(Invalid::Time(TimeError::Mismatch {
                expected: 10_450,
                ..
            }))
        ));
        assert!(matches!(
            check(next(good()[..2].to_vec(), 10_450, vec![])),
            Err(Invalid::Time(TimeError::TooFewSamples { got: 2, need: 3 }))
        ));
        let mut unordered = good();
        unordered.swap(0, 1);
        assert_eq!(
            check(next(unordered, 10_450, vec![])),
            Err(Invalid::BadSampler { index: 1 })
        );
        let mut stranger = good();
        stranger[2] = sample(4, 10_450);
        assert_eq!(
            check(next(stranger, 10_450, vec![])),
            Err(Invalid::BadSampler { index: 2 })
        );
        let mut forged = good();
        forged[1].signed.message.clear();
        assert_eq!(
            check(next(forged, 10_450, vec![])),
            Err(Invalid::BadSampleSignature { index: 1 })
        );
    }
}
