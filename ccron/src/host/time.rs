//! The agreed-time rule, pure: verified clock samples in, one agreed time per block out.
//!
//! Each validator signs its local clock into its vote (sim-bft: the commit; a Tendermint engine:
//! a precommit vote extension). A block carries the signed samples of an earlier block; every
//! validator checks the signatures (the engine's job) and then computes, with these functions,
//! the same agreed time:
//!
//! `agreed = max(previous + epsilon, median(samples))`, where the median of at least a quorum
//! (2f+1) of distinct validators' samples lies within the honest clocks' range whenever at most
//! f samples lie. Without samples (the first block) the proposer's stamp is bounded by
//! [`TimeRule::genesis_bound_ms`] against each validator's own clock.
//!
//! Agreed time is monotonic by construction and all arithmetic saturates.
//!
//! Engines bring one of two kinds of evidence ([`TimeEvidence`]), and every engine computes the
//! agreed time with the same [`TimeRule::agreed_from`]:
//!
//! - **samples** (Tendermint engines such as Malachite): the verified signed clocks of the
//!   previous height's precommits; agreed = `max(previous + epsilon, median)`;
//! - **a stamp and a certificate** (PBFT, sim-bft): the primary's clock, checked by each backup
//!   within [`TimeRule::genesis_bound_ms`] of its own, minus that bound, raised to the median of a
//!   verified certificate of 2f+1 signed commit clocks ([`stamped_base`]); agreed =
//!   `max(previous + epsilon, that)`;
//! - the **first** block's proposer stamp ([`TimeRule::genesis`]) and a null batch's
//!   `previous + epsilon` complete the picture.

use std::collections::BTreeSet;

use super::app::Millis;
use super::ticks::ValidatorId;

/// Why a block's time evidence was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// Fewer distinct validators' samples than the quorum.
    #[error("{got} distinct time samples, {need} needed")]
    TooFewSamples {
        /// Distinct samples present.
        got: usize,
        /// The quorum.
        need: usize,
    },
    /// A validator signed two samples into one block's evidence.
    #[error("validator {0} appears twice among the time samples")]
    DuplicateSample(ValidatorId),
    /// The proposed agreed time is not the one the rule gives.
    #[error("proposed time {proposed} ms, the rule gives {expected} ms")]
    Mismatch {
        /// What the proposer put in the block.
        proposed: Millis,
        /// What this validator computed.
        expected: Millis,
    },
    /// No evidence at all: a block that carries none and has no previous agreed time.
    #[error("no time evidence and no previous agreed time")]
    NoEvidence,
    /// The first block's time is before the chain's genesis time.
    #[error("first block time {time} ms is before the genesis time {genesis} ms")]
    BeforeGenesis {
        /// The proposer's stamp.
        time: Millis,
        /// The genesis time.
        genesis: Millis,
    },
    /// The time is further from this validator's clock than the bound allows.
    #[error("time {time} ms is more than {bound} ms from the local clock {now} ms")]
    OutOfBounds {
        /// The checked time.
        time: Millis,
        /// The local clock.
        now: Millis,
        /// The bound that applied.
        bound: Millis,
    },
}

/// The lower median of `samples` (`None` when empty): with 2f+1 samples of which at most f lie,
/// it lies within the honest samples' range.
pub fn median_ms(samples: &[Millis]) -> Option<Millis> {
    let mut s = samples.to_vec();
    s.sort_unstable();
    s.get(s.len().saturating_sub(1) / 2).copied()
}

/// Whether `time` lies within `bound_ms` of `now` (either side; never overflows, a negative
/// bound counts by its magnitude).
pub fn within(time: Millis, now: Millis, bound_ms: Millis) -> bool {
    time.abs_diff(now) <= bound_ms.unsigned_abs()
}

/// The monotonic step: `base`, but at least `previous + epsilon_ms` (saturating).
pub fn next_agreed_time(previous: Option<Millis>, base: Millis, epsilon_ms: Millis) -> Millis {
    match previous {
        Some(prev) => base.max(prev.saturating_add(epsilon_ms)),
        None => base,
    }
}

/// sim-bft's robust base: the proposer's stamp (checked within `genesis_bound_ms` of the honest
/// voters' clocks) minus that bound, raised to the certificate's median when there is one:
/// never ahead of every honest clock, and current even when the certificate is old.
pub fn stamped_base(stamp: Millis, genesis_bound_ms: Millis, median: Option<Millis>) -> Millis {
    let fresh = stamp.saturating_sub(genesis_bound_ms.max(0));
    median.map_or(fresh, |m| m.max(fresh))
}

/// The smallest number of `n` equal-power validators that is more than two thirds of them,
/// `floor(2n/3) + 1`: the commit quorum of Tendermint engines (Malachite's default threshold).
/// It equals 2f+1 ([`TimeRule::for_validators`]) when `n = 3f+1` and exceeds it otherwise, so
/// the precommits of one commit always carry enough samples for a rule built with it.
pub fn two_thirds_quorum(n: u32) -> usize {
    usize::try_from(u64::from(n) * 2 / 3 + 1).unwrap_or(usize::MAX)
}

/// The evidence a block brings for its agreed time (see the module documentation): every
/// engine hands one of these to [`TimeRule::agreed_from`] (and a validator to
/// [`TimeRule::check_evidence`]), so both engines run one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeEvidence<'a> {
    /// The first block of a chain: the proposer's `stamp_ms`, not before `genesis_ms`.
    First {
        /// The proposer's clock.
        stamp_ms: Millis,
        /// The chain's genesis time.
        genesis_ms: Millis,
    },
    /// Tendermint: the previous height's verified `(validator, clock)` samples.
    Samples(&'a [(ValidatorId, Millis)]),
    /// PBFT: the primary's `stamp_ms` and the median of a verified time certificate it
    /// attached, if any.
    Stamped {
        /// The primary's clock.
        stamp_ms: Millis,
        /// The certificate's median.
        certificate_median_ms: Option<Millis>,
    },
    /// No new evidence (a null batch): the previous agreed time plus epsilon.
    Carried,
}

/// The agreed-time rule of a block-driven engine, recomputed and checked by every validator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRule {
    /// Distinct validators' samples a block's evidence must carry (2f+1).
    pub quorum: usize,
    /// Minimum step between consecutive agreed times (1 ms: strictly increasing).
    pub epsilon_ms: Millis,
    /// How far the first block's proposer stamp may be from a validator's clock.
    pub genesis_bound_ms: Millis,
    /// How far ahead of a validator's clock a median may be (a block beyond it is refused).
    pub hard_limit_ms: Millis,
}

impl TimeRule {
    /// The rule for `n` validators tolerating `f = (n-1)/3` faults: quorum 2f+1, epsilon 1 ms,
    /// the given bounds.
    pub fn for_validators(n: u32, genesis_bound_ms: Millis, hard_limit_ms: Millis) -> Self {
        let f = n.saturating_sub(1) / 3;
        Self {
            quorum: usize::try_from(f.saturating_mul(2).saturating_add(1)).unwrap_or(usize::MAX),
            epsilon_ms: 1,
            genesis_bound_ms,
            hard_limit_ms,
        }
    }

    /// The rule with an explicit sample `quorum`: a block-driven engine passes its own commit
    /// quorum (e.g. [`two_thirds_quorum`] for a Tendermint engine such as Malachite), so that
    /// the samples of one commit certificate always satisfy the rule, for any `n`. Any quorum of
    /// at least 2f+1 keeps the median within the honest clocks' range.
    pub fn with_quorum(quorum: usize, genesis_bound_ms: Millis, hard_limit_ms: Millis) -> Self {
        Self {
            quorum,
            epsilon_ms: 1,
            genesis_bound_ms,
            hard_limit_ms,
        }
    }

    /// The agreed time of a block whose evidence is `samples` (verified `(validator, clock)`
    /// pairs), after `previous`: `max(previous + epsilon, median)`.
    pub fn agreed(
        &self,
        previous: Option<Millis>,
        samples: &[(ValidatorId, Millis)],
    ) -> Result<Millis, TimeError> {
        let mut seen = BTreeSet::new();
        for (v, _) in samples {
            if !seen.insert(*v) {
                return Err(TimeError::DuplicateSample(*v));
            }
        }
        if samples.len() < self.quorum {
            return Err(TimeError::TooFewSamples {
                got: samples.len(),
                need: self.quorum,
            });
        }
        let clocks: Vec<Millis> = samples.iter().map(|(_, c)| *c).collect();
        let median = median_ms(&clocks).ok_or(TimeError::TooFewSamples {
            got: 0,
            need: self.quorum.max(1),
        })?;
        Ok(next_agreed_time(previous, median, self.epsilon_ms))
    }

    /// The agreed time after `previous` for `evidence`: the one computation every engine runs.
    ///
    /// # Errors
    /// [`TimeError::TooFewSamples`] / [`TimeError::DuplicateSample`] for bad samples,
    /// [`TimeError::BeforeGenesis`] for a first block before the genesis time,
    /// [`TimeError::NoEvidence`] for a carried time with nothing to carry.
    pub fn agreed_from(
        &self,
        previous: Option<Millis>,
        evidence: TimeEvidence<'_>,
    ) -> Result<Millis, TimeError> {
        match evidence {
            TimeEvidence::First {
                stamp_ms,
                genesis_ms,
            } => {
                if stamp_ms < genesis_ms {
                    return Err(TimeError::BeforeGenesis {
                        time: stamp_ms,
                        genesis: genesis_ms,
                    });
                }
                Ok(next_agreed_time(previous, stamp_ms, self.epsilon_ms))
            }
            TimeEvidence::Samples(samples) => self.agreed(previous, samples),
            TimeEvidence::Stamped {
                stamp_ms,
                certificate_median_ms,
            } => Ok(next_agreed_time(
                previous,
                stamped_base(stamp_ms, self.genesis_bound_ms, certificate_median_ms),
                self.epsilon_ms,
            )),
            TimeEvidence::Carried => previous
                .map(|p| p.saturating_add(self.epsilon_ms))
                .ok_or(TimeError::NoEvidence),
        }
    }

    /// A validator's check of a proposed time against `evidence`, at its local clock `now`:
    /// the `proposed` time must be exactly [`agreed_from`](Self::agreed_from)'s; a first
    /// block's stamp must lie within [`genesis_bound_ms`](Self::genesis_bound_ms) of `now`
    /// ([`genesis`](Self::genesis)); samples' median and a stamp no more than
    /// [`hard_limit_ms`](Self::hard_limit_ms) ahead of `now` ([`check`](Self::check)).
    ///
    /// # Errors
    /// The first reason the time is refused.
    pub fn check_evidence(
        &self,
        proposed: Millis,
        previous: Option<Millis>,
        evidence: TimeEvidence<'_>,
        now: Millis,
    ) -> Result<(), TimeError> {
        match evidence {
            TimeEvidence::Samples(samples) => return self.check(proposed, previous, samples, now),
            TimeEvidence::First { stamp_ms, .. } => {
                self.genesis(stamp_ms, now)?;
            }
            TimeEvidence::Stamped { stamp_ms, .. } => {
                if !within(stamp_ms, now, self.genesis_bound_ms) {
                    return Err(TimeError::OutOfBounds {
                        time: stamp_ms,
                        now,
                        bound: self.genesis_bound_ms,
                    });
                }
            }
            TimeEvidence::Carried => {}
        }
        let expected = self.agreed_from(previous, evidence)?;
        if proposed != expected {
            return Err(TimeError::Mismatch { proposed, expected });
        }
        Ok(())
    }

    /// The first block's agreed time (no samples yet): the proposer's `stamp`, accepted only
    /// within [`genesis_bound_ms`](Self::genesis_bound_ms) of this validator's clock `now`.
    pub fn genesis(&self, stamp: Millis, now: Millis) -> Result<Millis, TimeError> {
        if within(stamp, now, self.genesis_bound_ms) {
            Ok(stamp)
        } else {
            Err(TimeError::OutOfBounds {
                time: stamp,
                now,
                bound: self.genesis_bound_ms,
            })
        }
    }

    /// A validator's check of a proposed block: the proposer's `proposed` time must be exactly
    /// what the rule gives for `samples` after `previous`, and the median must not be more than
    /// [`hard_limit_ms`](Self::hard_limit_ms) ahead of the local clock `now`. A lying proposer
    /// (wrong time, omitted or duplicated samples) fails here and its proposal is refused.
    pub fn check(
        &self,
        proposed: Millis,
        previous: Option<Millis>,
        samples: &[(ValidatorId, Millis)],
        now: Millis,
    ) -> Result<(), TimeError> {
        let expected = self.agreed(previous, samples)?;
        if proposed != expected {
            return Err(TimeError::Mismatch { proposed, expected });
        }
        let clocks: Vec<Millis> = samples.iter().map(|(_, c)| *c).collect();
        if let Some(m) = median_ms(&clocks)
            && m > now.saturating_add(self.hard_limit_ms)
        {
            return Err(TimeError::OutOfBounds {
                time: m,
                now,
                bound: self.hard_limit_ms,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn two_thirds_quorum_is_at_least_two_f_plus_one() {
        for n in 1..200u32 {
            let q = two_thirds_quorum(n);
            let f = TimeRule::for_validators(n, 0, 0).quorum;
            assert!(q >= f, "n={n}: {q} < {f}");
            assert!(q <= n as usize, "n={n}");
            assert_eq!(q == f, n % 3 == 1, "n={n}");
            // More than two thirds, and the smallest such count.
            assert!(
                3 * q > 2 * n as usize && 3 * (q - 1) <= 2 * n as usize,
                "n={n}"
            );
        }
        assert_eq!(TimeRule::with_quorum(5, 7, 9).quorum, 5);
    }

    #[test]
    fn median_is_the_lower_one() {
        assert_eq!(median_ms(&[]), None);
        assert_eq!(median_ms(&[5]), Some(5));
        assert_eq!(median_ms(&[30, 10, 20]), Some(20));
        assert_eq!(median_ms(&[40, 10, 30, 20]), Some(20));
    }

    #[test]
    fn bounds_and_steps_saturate() {
        assert!(!within(i64::MIN, i64::MAX, i64::MAX));
        assert!(within(i64::MIN, i64::MIN, 0));
        assert!(within(100, 90, 10));
        assert!(!within(100, 89, 10));
        assert!(within(100, 110, -10));
        assert_eq!(next_agreed_time(None, 5, 1), 5);
        assert_eq!(next_agreed_time(Some(10), 5, 1), 11);
        assert_eq!(next_agreed_time(Some(10), 50, 1), 50);
        assert_eq!(next_agreed_time(Some(i64::MAX), 0, 1), i64::MAX);
        assert_eq!(stamped_base(1_000, 300, None), 700);
        assert_eq!(stamped_base(1_000, 300, Some(900)), 900);
        assert_eq!(stamped_base(i64::MIN, 300, Some(i64::MIN)), i64::MIN);
    }

    #[test]
    fn rule_recomputes_checks_and_refuses_lies() {
        let r = TimeRule::for_validators(4, 500, 2_000);
        assert_eq!(r.quorum, 3);
        let s = [(0, 1_000), (1, 1_010), (2, 990)];
        assert_eq!(r.agreed(None, &s), Ok(1_000));
        assert_eq!(r.agreed(Some(1_500), &s), Ok(1_501));
        assert_eq!(r.check(1_000, None, &s, 1_000), Ok(()));
        assert_eq!(
            r.check(1_200, None, &s, 1_000),
            Err(TimeError::Mismatch {
                proposed: 1_200,
                expected: 1_000
            })
        );
        assert_eq!(
            r.agreed(None, &s[..2]),
            Err(TimeError::TooFewSamples { got: 2, need: 3 })
        );
        assert_eq!(
            r.agreed(None, &[(0, 1), (0, 2), (1, 3)]),
            Err(TimeError::DuplicateSample(0))
        );
        assert!(matches!(
            r.check(1_000, None, &s, -5_000),
            Err(TimeError::OutOfBounds { .. })
        ));
        assert_eq!(r.genesis(1_400, 1_000), Ok(1_400));
        assert!(r.genesis(1_501, 1_000).is_err());
    }

    #[test]
    fn both_kinds_of_evidence_go_through_one_rule() {
        let r = TimeRule::for_validators(4, 500, 2_000);
        let s = [(0, 1_000), (1, 1_010), (2, 990)];
        // Samples: the same as `agreed`.
        assert_eq!(
            r.agreed_from(Some(10), TimeEvidence::Samples(&s)),
            Ok(1_000)
        );
        // Stamp and certificate: the stamp less the bound, raised to the median.
        let stamped = |stamp_ms, certificate_median_ms| TimeEvidence::Stamped {
            stamp_ms,
            certificate_median_ms,
        };
        assert_eq!(r.agreed_from(None, stamped(2_000, None)), Ok(1_500));
        assert_eq!(r.agreed_from(None, stamped(2_000, Some(1_700))), Ok(1_700));
        assert_eq!(
            r.agreed_from(Some(1_800), stamped(2_000, Some(1_700))),
            Ok(1_801)
        );
        // Carried: previous + epsilon, nothing without a previous time.
        assert_eq!(r.agreed_from(Some(7), TimeEvidence::Carried), Ok(8));
        assert_eq!(
            r.agreed_from(None, TimeEvidence::Carried),
            Err(TimeError::NoEvidence)
        );
        // First block: the stamp, not before genesis, within the bound of the local clock.
        let first = |stamp_ms| TimeEvidence::First {
            stamp_ms,
            genesis_ms: 1_000,
        };
        assert_eq!(r.agreed_from(None, first(1_200)), Ok(1_200));
        assert_eq!(
            r.agreed_from(None, first(999)),
            Err(TimeError::BeforeGenesis {
                time: 999,
                genesis: 1_000
            })
        );
        assert_eq!(r.check_evidence(1_200, None, first(1_200), 1_600), Ok(()));
        assert!(matches!(
            r.check_evidence(1_200, None, first(1_200), 1_701),
            Err(TimeError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.check_evidence(1_201, None, first(1_200), 1_200),
            Err(TimeError::Mismatch { .. })
        ));
        // A stamp beyond the bound of the local clock is refused; the samples path is `check`.
        assert!(matches!(
            r.check_evidence(1_500, None, stamped(2_000, None), 1_000),
            Err(TimeError::OutOfBounds { .. })
        ));
        assert_eq!(
            r.check_evidence(1_500, None, stamped(2_000, None), 1_600),
            Ok(())
        );
        assert_eq!(
            r.check_evidence(1_000, None, TimeEvidence::Samples(&s), 1_000),
            Ok(())
        );
    }

    proptest! {
        /// With at most f of 2f+1 samples from liars (any values), the agreed time lies within
        /// the honest samples' range (or at previous + epsilon), and never goes backwards.
        #[test]
        fn agreed_time_stays_in_the_honest_range(
            f in 1usize..5,
            honest in proptest::collection::vec(-1_000_000i64..1_000_000, 9),
            liars in proptest::collection::vec(any::<i64>(), 4),
            prev in proptest::option::of(-1_000_000i64..1_000_000),
        ) {
            let honest = &honest[..f + 1];
            let liars = &liars[..f.min(liars.len())];
            let samples: Vec<(u32, i64)> = honest
                .iter()
                .chain(liars)
                .enumerate()
                .map(|(i, c)| (i as u32, *c))
                .collect();
            let r = TimeRule { quorum: samples.len(), epsilon_ms: 1, genesis_bound_ms: 0, hard_limit_ms: 0 };
            let t = r.agreed(prev, &samples).unwrap();
            let (lo, hi) = (*honest.iter().min().unwrap(), *honest.iter().max().unwrap());
            let floor = prev.map_or(i64::MIN, |p| p + 1);
            prop_assert!(t >= floor);
            prop_assert!((lo..=hi).contains(&t) || t == floor);
        }
    }
}
