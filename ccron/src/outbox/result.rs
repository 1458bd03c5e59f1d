//! Results back into the ledger: a worker's answer (or a dead letter) for one outbox record,
//! carried by a replicated client request and applied exactly once.
//!
//! The consumer outside consensus delivers a record, gets the worker's answer (or gives the
//! record up), and sends an [`OutboxResult`] naming the record's index and
//! [`OccurrenceId`] as an ordinary signed client request. Inside execution the ledger calls
//! [`Outbox::accept_result`](super::Outbox::accept_result), which
//!
//! * authorizes it: only the [`Policy::outbox_consumer`](crate::Policy::outbox_consumer) (or the
//!   host) may report results ([`OutboxError::Unauthorized`](super::OutboxError::Unauthorized));
//! * bounds it: the answer (or reason) is at most the outbox's
//!   [`max_record_bytes`](super::OutboxLimits::max_record_bytes)
//!   ([`OutboxError::ResultTooLarge`](super::OutboxError::ResultTooLarge)), and the payload
//!   decoder at most [`MAX_RESULT_PAYLOAD_BYTES`];
//! * checks it names a record that exists with that id
//!   ([`OutboxError::ResultUnknown`](super::OutboxError::ResultUnknown),
//!   [`OutboxError::ResultMismatch`](super::OutboxError::ResultMismatch));
//! * applies it once: the outbox remembers which held records have a result
//!   ([`ResultApplied::Applied`]); a second result for the same record is the typed no-op
//!   [`ResultApplied::Duplicate`], and a result for a record already trimmed is
//!   [`ResultApplied::Trimmed`] (also a no-op). Memory stays bounded by the held records: the
//!   mark goes with the record when progress trims it.
//!
//! The consumer therefore sends a record's result *before* it reports progress past the record
//! (`docs/outbox.md`, "Results back"). Everything here is pure: no clock, no I/O.

use super::id::OccurrenceId;

/// Prefix of a result request's payload ([`OutboxResult::to_payload`]).
pub const RESULT_PAYLOAD_PREFIX: &[u8; 16] = b"ccron-outbox-res";

/// Largest result request payload [`OutboxResult::from_payload`] decodes (prefix included).
pub const MAX_RESULT_PAYLOAD_BYTES: usize = 128 * 1024;

/// What came back for one delivered record.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum ResultOutcome {
    /// The worker performed the effect and answered with this body.
    Answer(Vec<u8>),
    /// The consumer gave the record up (its retry limit or time-to-run ran out): a dead letter.
    DeadLetter(String),
}

impl ResultOutcome {
    /// Bytes this outcome counts against the bound (answer body or reason length).
    pub fn size_bytes(&self) -> usize {
        match self {
            Self::Answer(body) => body.len(),
            Self::DeadLetter(reason) => reason.len(),
        }
    }
}

/// A result for the outbox record at `index`, whose occurrence id is `id`.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct OutboxResult {
    /// The record's outbox index.
    pub index: u64,
    /// The record's occurrence id (checked against the record at `index`).
    pub id: OccurrenceId,
    /// The answer or the dead letter.
    pub outcome: ResultOutcome,
}

/// Why a payload is not a result request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResultPayloadError {
    /// The payload is larger than [`MAX_RESULT_PAYLOAD_BYTES`].
    #[error("result payload of {len} bytes exceeds {MAX_RESULT_PAYLOAD_BYTES}")]
    TooLarge {
        /// The payload's length.
        len: usize,
    },
    /// The bytes after the prefix do not decode.
    #[error("result payload does not decode: {0}")]
    Decode(String),
}

impl OutboxResult {
    /// The client request payload carrying this result: [`RESULT_PAYLOAD_PREFIX`] then the
    /// canonical encoding.
    ///
    /// # Errors
    /// [`ResultPayloadError::TooLarge`] when the encoding exceeds [`MAX_RESULT_PAYLOAD_BYTES`].
    pub fn to_payload(&self) -> Result<Vec<u8>, ResultPayloadError> {
        let body =
            crate::codec::to_blob(self).map_err(|e| ResultPayloadError::Decode(e.to_string()))?;
        let len = body.len().saturating_add(RESULT_PAYLOAD_PREFIX.len());
        if len > MAX_RESULT_PAYLOAD_BYTES {
            return Err(ResultPayloadError::TooLarge { len });
        }
        let mut p = Vec::with_capacity(len);
        p.extend_from_slice(RESULT_PAYLOAD_PREFIX);
        p.extend_from_slice(&body);
        Ok(p)
    }

    /// The result a request payload carries: `None` when the payload is not a result request
    /// (no prefix), `Some(Err)` when it has the prefix but is oversized or malformed.
    pub fn from_payload(payload: &[u8]) -> Option<Result<Self, ResultPayloadError>> {
        let rest = payload.strip_prefix(RESULT_PAYLOAD_PREFIX.as_slice())?;
        if payload.len() > MAX_RESULT_PAYLOAD_BYTES {
            return Some(Err(ResultPayloadError::TooLarge { len: payload.len() }));
        }
        Some(crate::codec::from_blob(rest).map_err(|e| ResultPayloadError::Decode(e.to_string())))
    }
}

/// What [`Outbox::accept_result`](super::Outbox::accept_result) did with a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultApplied {
    /// First result for this record: applied (the ledger's reaction runs now).
    Applied,
    /// The record already has a result: nothing changed.
    Duplicate,
    /// The record was trimmed (its progress was reported): nothing changed.
    Trimmed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::{Policy, Principal};
    use crate::outbox::codec::CodecError;
    use crate::outbox::{Outbox, OutboxError, OutboxLimits, OutboxRecord};

    fn outbox(n: u64) -> Outbox {
        let mut ob = Outbox::new(OutboxLimits::default());
        for k in 0..n {
            ob.append(OutboxRecord::new(
                OccurrenceId::new(1, 0, k),
                "h",
                b"p".to_vec(),
            ))
            .unwrap();
        }
        ob
    }

    fn answer(ob: &Outbox, index: u64) -> OutboxResult {
        OutboxResult {
            index,
            id: ob.get(index).unwrap().id,
            outcome: ResultOutcome::Answer(b"ok".to_vec()),
        }
    }

    #[test]
    fn a_result_applies_once_and_its_mark_survives_encoding_until_trimmed() {
        let policy = Policy::default().with_outbox_consumer(5);
        let consumer = Principal::Client(5);
        let mut ob = outbox(3);
        let r2 = answer(&ob, 2);
        assert_eq!(
            ob.accept_result(&policy, &Principal::Client(6), &r2),
            Err(OutboxError::ResultUnauthorized {
                by: Principal::Client(6)
            })
        );
        assert_eq!(
            ob.accept_result(&policy, &consumer, &r2),
            Ok(ResultApplied::Applied)
        );
        assert_eq!(
            ob.accept_result(&policy, &consumer, &r2),
            Ok(ResultApplied::Duplicate)
        );
        assert_eq!(
            ob.accept_result(&policy, &Principal::Host, &r2),
            Ok(ResultApplied::Duplicate)
        );
        let unknown = OutboxResult {
            index: 4,
            ..r2.clone()
        };
        assert!(matches!(
            ob.accept_result(&policy, &consumer, &unknown),
            Err(OutboxError::ResultUnknown { index: 4, head: 3 })
        ));
        let zero = OutboxResult {
            index: 0,
            ..r2.clone()
        };
        assert!(ob.accept_result(&policy, &consumer, &zero).is_err());
        let mismatch = OutboxResult {
            index: 1,
            ..r2.clone()
        };
        assert!(matches!(
            ob.accept_result(&policy, &consumer, &mismatch),
            Err(OutboxError::ResultMismatch { index: 1, .. })
        ));
        let big = OutboxResult {
            outcome: ResultOutcome::DeadLetter("x".repeat(64 * 1024 + 1)),
            ..answer(&ob, 3)
        };
        assert!(matches!(
            ob.accept_result(&policy, &consumer, &big),
            Err(OutboxError::ResultTooLarge { .. })
        ));
        assert_eq!(ob.results_len(), 1);

        // The mark is replicated state: encoded, decoded, equal.
        let back = Outbox::decode(&ob.encode().unwrap(), OutboxLimits::default()).unwrap();
        assert_eq!(back, ob);
        assert!(back.has_result(2) && !back.has_result(1));

        // Trimming drops the mark with its record; a late result is then a no-op.
        ob.trim_below(3);
        assert_eq!(ob.results_len(), 0);
        assert_eq!(
            ob.accept_result(&policy, &consumer, &r2),
            Ok(ResultApplied::Trimmed)
        );
        assert_eq!(
            ob.accept_result(&policy, &consumer, &answer(&ob, 3)),
            Ok(ResultApplied::Applied)
        );
    }

    #[test]
    fn older_formats_are_refused_and_bad_marks_are_refused() {
        #[derive(bincode::Encode)]
        struct Wire {
            version: u8,
            first_index: u64,
            records: Vec<OutboxRecord>,
            results: Vec<u64>,
        }
        let ob = outbox(2);
        let records: Vec<OutboxRecord> = ob.iter().map(|(_, r)| r.clone()).collect();
        let encode = |version: u8, results: Vec<u64>| {
            crate::outbox::codec::encode(&Wire {
                version,
                first_index: 1,
                records: records.clone(),
                results,
            })
            .unwrap()
        };
        // The current format (3) round-trips; 1 and 2 (before topics/types and result marks
        // were both stored) are a typed version error, never a misread.
        assert_eq!(
            Outbox::decode(&encode(3, vec![]), OutboxLimits::default()).unwrap(),
            ob
        );
        for old in [1, 2] {
            assert!(matches!(
                Outbox::decode(&encode(old, vec![]), OutboxLimits::default()),
                Err(OutboxError::Codec(CodecError::Version { found, .. })) if found == old
            ));
        }
        for results in [vec![3], vec![0], vec![2, 1], vec![1, 1]] {
            assert!(matches!(
                Outbox::decode(&encode(3, results), OutboxLimits::default()),
                Err(OutboxError::Invalid(_))
            ));
        }
    }

    #[test]
    fn payload_round_trips_and_rejects_garbage() {
        let r = OutboxResult {
            index: 9,
            id: OccurrenceId::new(1, 2, 3),
            outcome: ResultOutcome::Answer(b"confirmed".to_vec()),
        };
        let p = r.to_payload().unwrap();
        assert_eq!(OutboxResult::from_payload(&p), Some(Ok(r)));
        assert_eq!(OutboxResult::from_payload(b"something else"), None);
        assert!(matches!(
            OutboxResult::from_payload(b"ccron-outbox-res\x01"),
            Some(Err(ResultPayloadError::Decode(_)))
        ));
        let mut big = RESULT_PAYLOAD_PREFIX.to_vec();
        big.resize(MAX_RESULT_PAYLOAD_BYTES + 1, 0);
        assert!(matches!(
            OutboxResult::from_payload(&big),
            Some(Err(ResultPayloadError::TooLarge { .. }))
        ));
        let huge = OutboxResult {
            index: 1,
            id: OccurrenceId::new(0, 0, 0),
            outcome: ResultOutcome::DeadLetter("x".repeat(MAX_RESULT_PAYLOAD_BYTES)),
        };
        assert!(matches!(
            huge.to_payload(),
            Err(ResultPayloadError::TooLarge { .. })
        ));
    }
}
