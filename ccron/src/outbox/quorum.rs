//! [`QuorumJobs`]: read outbox records from several replicas and believe only what a quorum
//! agrees on.
//!
//! The consumer runs outside consensus and learns records by asking replicas. Up to f of the
//! n = 3f+1 replicas may be Byzantine: one of them alone could invent records, alter payloads or
//! hide the head. Asking f+1 replicas and accepting a record only when at least f+1 return
//! byte-identical records guarantees that at least one correct replica vouches for it, and a
//! correct replica only reports what consensus committed.

use super::consumer::Jobs;
use super::log::OutboxRecord;

/// Why a [`QuorumJobs`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuorumError {
    /// The quorum is 0 or larger than the number of sources.
    #[error("quorum {quorum} is not within 1..={sources}")]
    BadQuorum {
        /// The requested quorum.
        quorum: usize,
        /// How many sources were given.
        sources: usize,
    },
}

/// A [`Jobs`] source that answers only what at least `quorum` of its sources agree on.
#[derive(Debug, Clone)]
pub struct QuorumJobs<J> {
    sources: Vec<J>,
    quorum: usize,
}

impl<J: Jobs> QuorumJobs<J> {
    /// Agreement of `quorum` out of `sources` (use f+1 to tolerate f Byzantine replicas).
    pub fn new(sources: Vec<J>, quorum: usize) -> Result<Self, QuorumError> {
        if quorum == 0 || quorum > sources.len() {
            return Err(QuorumError::BadQuorum {
                quorum,
                sources: sources.len(),
            });
        }
        Ok(Self { sources, quorum })
    }

    /// The sources, for inspection.
    pub fn sources(&self) -> &[J] {
        &self.sources
    }

    /// The quorum.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The sources, for inspection or refresh.
    pub fn sources_mut(&mut self) -> &mut [J] {
        &mut self.sources
    }
}

impl<J: Jobs> Jobs for QuorumJobs<J> {
    /// The highest index that at least `quorum` sources report having (so a lying source can
    /// neither raise it nor, while a quorum of honest sources answers, hold it down).
    fn head(&self) -> u64 {
        let mut heads: Vec<u64> = self.sources.iter().map(Jobs::head).collect();
        heads.sort_unstable_by(|a, b| b.cmp(a));
        heads.get(self.quorum - 1).copied().unwrap_or(0)
    }

    /// The record at least `quorum` sources return identically, if any.
    fn at_index(&self, index: u64) -> Option<OutboxRecord> {
        // A handful of sources: a linear tally is simpler than hashing and needs no Ord.
        let mut tally: Vec<(OutboxRecord, usize)> = Vec::new();
        for record in self.sources.iter().filter_map(|s| s.at_index(index)) {
            match tally.iter_mut().find(|(r, _)| *r == record) {
                Some((_, n)) => *n += 1,
                None => tally.push((record, 1)),
            }
        }
        if tally.len() > 1 {
            tracing::warn!(
                index,
                versions = tally.len(),
                "sources disagree on an outbox record"
            );
        }
        tally
            .into_iter()
            .find(|(_, n)| *n >= self.quorum)
            .map(|(r, _)| r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::{OccurrenceId, Outbox, OutboxLimits};

    fn outbox(n: u64, payload: &[u8]) -> Outbox {
        let mut ob = Outbox::new(OutboxLimits::default());
        for k in 0..n {
            ob.append(OutboxRecord::new(OccurrenceId::new(1, 0, k), "h", payload))
                .unwrap();
        }
        ob
    }

    #[test]
    fn one_liar_out_of_four_cannot_inject_alter_or_hide() {
        let honest = outbox(5, b"ok");
        // The liar claims more records, with a different payload.
        let liar = outbox(9, b"evil");
        let q = QuorumJobs::new(vec![&liar, &honest, &honest, &honest], 2).unwrap();
        assert_eq!(q.head(), 5);
        assert_eq!(q.at_index(3), honest.get(3).cloned());
        assert_eq!(q.at_index(7), None);

        // A liar hiding records does not hold the head down either.
        let empty = outbox(0, b"");
        let q = QuorumJobs::new(vec![&empty, &honest, &honest, &honest], 2).unwrap();
        assert_eq!(q.head(), 5);
        assert_eq!(q.at_index(5), honest.get(5).cloned());

        // With quorum 2, two sources that disagree yield nothing.
        let q = QuorumJobs::new(vec![&liar, &honest], 2).unwrap();
        assert_eq!(q.at_index(1), None);
        assert_eq!(q.head(), 5);
    }

    #[test]
    fn quorum_must_fit_the_sources() {
        let ob = outbox(1, b"");
        assert!(QuorumJobs::new(vec![&ob], 0).is_err());
        assert!(QuorumJobs::new(vec![&ob], 2).is_err());
        assert!(QuorumJobs::new(Vec::<&Outbox>::new(), 1).is_err());
    }
}
