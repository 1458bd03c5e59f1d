//! [`ReadPage`]: what a replica's read endpoint answers about its committed outbox.
//!
//! A consumer outside consensus reads records by index from every replica and believes one only
//! when f+1 replicas return it identically ([`super::QuorumJobs`]). A replica answers a read
//! with one page: the records it holds from the asked index on (at most a number of records and
//! a byte budget), its head and first held index, which of those records have a result applied,
//! its replica id and the sequence number (or height) its state is at.
//!
//! Wire format: a version byte then the page, through this module's bounded codec (bincode,
//! fixed-width big-endian integers, at most [`super::MAX_ENCODED_BYTES`]); [`ReadPage::decode`]
//! refuses trailing bytes, an unknown version, more records than the reader asked for, and
//! indices that contradict each other (a typed [`ReadPageError`], never a panic).

use super::codec::{self, CodecError};
use super::log::{Outbox, OutboxRecord};

/// Version byte of the read page's wire format.
pub const READ_FORMAT_VERSION: u8 = 1;

/// One record of a [`ReadPage`].
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct ReadEntry {
    /// The committed record.
    pub record: OutboxRecord,
    /// Whether the replica has applied a result for it ([`Outbox::accept_result`]).
    pub has_result: bool,
}

/// A replica's answer to "records from index `from`" (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPage {
    /// The answering replica's id (informational: a liar can claim any).
    pub replica: u64,
    /// The sequence number (or height) of the last batch the replica executed when it answered.
    pub at_seq: u64,
    /// Index of the oldest record the replica still holds.
    pub first_index: u64,
    /// Index of the last record ever appended (0: none).
    pub head: u64,
    /// Index of `entries[0]`.
    pub start: u64,
    /// Consecutive records from `start`.
    pub entries: Vec<ReadEntry>,
}

#[derive(bincode::Encode, bincode::Decode)]
struct Wire {
    version: u8,
    replica: u64,
    at_seq: u64,
    first_index: u64,
    head: u64,
    start: u64,
    entries: Vec<ReadEntry>,
}

/// Why bytes are not a valid [`ReadPage`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadPageError {
    /// The bytes do not decode (truncated, oversized, trailing bytes, unknown version).
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// More records than the reader asked for.
    #[error("{got} records, more than the {max} asked for")]
    TooManyRecords {
        /// Records in the page.
        got: usize,
        /// The reader's bound.
        max: usize,
    },
    /// The page's indices contradict each other.
    #[error("inconsistent page: {0}")]
    Inconsistent(&'static str),
}

impl ReadPage {
    /// The page `outbox` answers for records from `from`: at most `max_records` records, and
    /// records while their [`OutboxRecord::size_bytes`] sum stays within `max_bytes`, but always
    /// the first record that exists (so a reader always progresses). Asking below the first
    /// held index starts at the first held index.
    pub fn from_outbox(
        outbox: &Outbox,
        replica: u64,
        at_seq: u64,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Self {
        let start = from.max(outbox.first_index()).max(1);
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut index = start;
        while entries.len() < max_records {
            let Some(record) = outbox.get(index) else {
                break;
            };
            bytes = bytes.saturating_add(record.size_bytes());
            if !entries.is_empty() && bytes > max_bytes {
                break;
            }
            entries.push(ReadEntry {
                record: record.clone(),
                has_result: outbox.has_result(index),
            });
            index = index.saturating_add(1);
        }
        Self {
            replica,
            at_seq,
            first_index: outbox.first_index(),
            head: outbox.head(),
            start,
            entries,
        }
    }

    /// The entry at `index`, if the page holds it.
    pub fn get(&self, index: u64) -> Option<&ReadEntry> {
        let offset = index.checked_sub(self.start)?;
        self.entries.get(usize::try_from(offset).ok()?)
    }

    /// Index of the last entry, or `start - 1` when there is none.
    pub fn last_index(&self) -> u64 {
        self.start
            .saturating_add(self.entries.len() as u64)
            .saturating_sub(1)
    }

    /// The versioned encoding.
    ///
    /// # Errors
    /// [`CodecError::Encode`] when the page exceeds [`super::MAX_ENCODED_BYTES`].
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(&Wire {
            version: READ_FORMAT_VERSION,
            replica: self.replica,
            at_seq: self.at_seq,
            first_index: self.first_index,
            head: self.head,
            start: self.start,
            entries: self.entries.clone(),
        })
    }

    /// Decodes and checks a page of at most `max_records` records. Callers bound `bytes`
    /// (a reader reads at most its configured response size); the decoder never allocates
    /// more than [`super::MAX_ENCODED_BYTES`].
    ///
    /// # Errors
    /// [`ReadPageError`].
    pub fn decode(bytes: &[u8], max_records: usize) -> Result<Self, ReadPageError> {
        let w: Wire = codec::decode(bytes)?;
        if w.version != READ_FORMAT_VERSION {
            return Err(CodecError::Version {
                found: w.version,
                expected: READ_FORMAT_VERSION,
            }
            .into());
        }
        if w.entries.len() > max_records {
            return Err(ReadPageError::TooManyRecords {
                got: w.entries.len(),
                max: max_records,
            });
        }
        if w.start == 0 {
            return Err(ReadPageError::Inconsistent("start index 0"));
        }
        if w.first_index == 0 || w.first_index > w.head.saturating_add(1) {
            return Err(ReadPageError::Inconsistent(
                "first index outside 1..=head+1",
            ));
        }
        if !w.entries.is_empty() {
            let last = w.start.checked_add(w.entries.len() as u64 - 1);
            if w.start < w.first_index || last.is_none_or(|l| l > w.head) {
                return Err(ReadPageError::Inconsistent(
                    "records outside first_index..=head",
                ));
            }
        }
        Ok(Self {
            replica: w.replica,
            at_seq: w.at_seq,
            first_index: w.first_index,
            head: w.head,
            start: w.start,
            entries: w.entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::{OccurrenceId, OutboxLimits, OutboxResult, ResultOutcome};

    fn outbox(n: u64) -> Outbox {
        let mut ob = Outbox::new(OutboxLimits::default());
        for k in 0..n {
            ob.append(OutboxRecord::new(
                OccurrenceId::new(1, 0, k),
                "h",
                vec![7u8; 10],
            ))
            .unwrap();
        }
        ob
    }

    #[test]
    fn a_page_respects_its_bounds_and_round_trips() {
        let mut ob = outbox(10);
        let policy = crate::authz::Policy::default();
        let r = OutboxResult::unsigned(
            3,
            OccurrenceId::new(1, 0, 2),
            ResultOutcome::Answer(b"ok".to_vec()),
        );
        ob.accept_result(&policy, &crate::authz::Principal::Host, &r)
            .unwrap();
        ob.trim_below(2);
        // From below the first held index: starts at it. Each record is 11 bytes.
        let p = ReadPage::from_outbox(&ob, 2, 99, 1, 5, 1_000);
        assert_eq!(
            (p.start, p.entries.len(), p.head, p.first_index),
            (2, 5, 10, 2)
        );
        assert!(p.get(3).unwrap().has_result && !p.get(4).unwrap().has_result);
        assert_eq!(p.get(4).unwrap().record, *ob.get(4).unwrap());
        assert_eq!(p.get(7), None);
        // Byte budget: 25 bytes hold two records; a budget below one record still gives one.
        assert_eq!(
            ReadPage::from_outbox(&ob, 2, 99, 5, 100, 25).entries.len(),
            2
        );
        assert_eq!(
            ReadPage::from_outbox(&ob, 2, 99, 5, 100, 1).entries.len(),
            1
        );
        // Past the head: empty.
        let e = ReadPage::from_outbox(&ob, 2, 99, 11, 100, 1_000);
        assert_eq!((e.start, e.entries.len(), e.last_index()), (11, 0, 10));

        let bytes = p.encode().unwrap();
        assert_eq!(ReadPage::decode(&bytes, 5).unwrap(), p);
        assert!(matches!(
            ReadPage::decode(&bytes, 4),
            Err(ReadPageError::TooManyRecords { got: 5, max: 4 })
        ));
        // Truncated, trailing and foreign bytes are typed errors.
        for cut in 0..bytes.len() {
            assert!(ReadPage::decode(&bytes[..cut], 5).is_err(), "cut {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(ReadPage::decode(&long, 5).is_err());
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert!(matches!(
            ReadPage::decode(&v2, 5),
            Err(ReadPageError::Codec(CodecError::Version { found: 2, .. }))
        ));
    }

    #[test]
    fn inconsistent_indices_are_refused() {
        let ob = outbox(4);
        let good = ReadPage::from_outbox(&ob, 0, 1, 1, 10, 1_000);
        let bad = |f: &dyn Fn(&mut ReadPage)| {
            let mut p = good.clone();
            f(&mut p);
            ReadPage::decode(&p.encode().unwrap(), 10)
        };
        assert!(bad(&|_| {}).is_ok());
        assert!(matches!(
            bad(&|p| p.head = 2),
            Err(ReadPageError::Inconsistent(_))
        ));
        assert!(matches!(
            bad(&|p| p.start = 0),
            Err(ReadPageError::Inconsistent(_))
        ));
        assert!(matches!(
            bad(&|p| p.first_index = 9),
            Err(ReadPageError::Inconsistent(_))
        ));
        assert!(matches!(
            bad(&|p| p.start = u64::MAX),
            Err(ReadPageError::Inconsistent(_))
        ));
    }
}
