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
//! * believes an answer only when a worker signed it: [`OutboxResult::proof`] must be a
//!   signature by a key registered for the record's handler over the record and the answer
//!   ([`super::workers`]); a dead letter is the consumer's own word;
//! * applies it once: the outbox remembers which held records have a result
//!   ([`ResultApplied::Applied`]); a second result for the same record is the typed no-op
//!   [`ResultApplied::Duplicate`], and a result for a record already trimmed is
//!   [`ResultApplied::Trimmed`] (also a no-op). Memory stays bounded by the held records: the
//!   mark goes with the record when progress trims it.
//!
//! The consumer therefore sends a record's result *before* it reports progress past the record
//! (`docs/outbox.md`, "Results back"). Everything here is pure: no clock, no I/O.

use super::id::OccurrenceId;
use super::log::OutboxLimits;
use super::workers::AnswerProof;

/// Prefix of a result request's payload ([`OutboxResult::to_payload`]).
pub const RESULT_PAYLOAD_PREFIX: &[u8; 16] = b"ccron-outbox-res";

/// Largest result request payload [`OutboxResult::from_payload`] decodes (prefix included).
pub const MAX_RESULT_PAYLOAD_BYTES: usize = 128 * 1024;

/// Bytes of a signed answer's result payload besides the answer itself, with the longest
/// proof: the prefix (16), the index (8), the id (20), the outcome's tag and length (4 + 8),
/// the proof's tag, key, signature and path (1 + 32 + 64 + 8 + 16 × 33). Pinned by a test
/// against the encoder.
pub const ANSWER_PAYLOAD_OVERHEAD_BYTES: usize =
    16 + 8 + 20 + 4 + 8 + 1 + 32 + 64 + 8 + super::workers::MAX_PROOF_STEPS * 33;

/// The largest answer body the ledger accepts from a worker with an outbox of `limits`: at most
/// [`OutboxLimits::max_record_bytes`] ([`Outbox::accept_result`](super::Outbox::accept_result)'s
/// bound) and small enough that its signed result request fits
/// [`MAX_RESULT_PAYLOAD_BYTES`]. Workers and the dispatcher enforce it, so no answer is
/// acknowledged done that the ledger would refuse.
pub fn max_answer_bytes(limits: &OutboxLimits) -> usize {
    limits
        .max_record_bytes
        .min(MAX_RESULT_PAYLOAD_BYTES - ANSWER_PAYLOAD_OVERHEAD_BYTES)
}

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
    /// The signature of the worker that made an answer (required for answers reported by a
    /// client, see [`Outbox::accept_result`](super::Outbox::accept_result); `None` for dead
    /// letters).
    pub proof: Option<AnswerProof>,
}

/// The payload layout before answers were signed: read (as unsigned), never written.
#[derive(bincode::Encode, bincode::Decode)]
struct UnsignedResult {
    index: u64,
    id: OccurrenceId,
    outcome: ResultOutcome,
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
    /// A worker's answer `body` to record `index` (occurrence `id`), signed by `proof`.
    pub fn answer(index: u64, id: OccurrenceId, body: Vec<u8>, proof: AnswerProof) -> Self {
        Self {
            index,
            id,
            outcome: ResultOutcome::Answer(body),
            proof: Some(proof),
        }
    }

    /// The consumer's dead letter for record `index` (occurrence `id`).
    pub fn dead_letter(index: u64, id: OccurrenceId, reason: impl Into<String>) -> Self {
        Self {
            index,
            id,
            outcome: ResultOutcome::DeadLetter(reason.into()),
            proof: None,
        }
    }

    /// An answer without a worker signature: only the host may report one.
    pub fn unsigned(index: u64, id: OccurrenceId, outcome: ResultOutcome) -> Self {
        Self {
            index,
            id,
            outcome,
            proof: None,
        }
    }

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
    /// (no prefix), `Some(Err)` when it has the prefix but is oversized or malformed. A payload
    /// of the layout before signed answers (no proof field) decodes as a result without a
    /// proof, so a replayed old log still finds its dead letters (its answers are refused as
    /// unsigned unless the host reported them).
    pub fn from_payload(payload: &[u8]) -> Option<Result<Self, ResultPayloadError>> {
        let rest = payload.strip_prefix(RESULT_PAYLOAD_PREFIX.as_slice())?;
        if payload.len() > MAX_RESULT_PAYLOAD_BYTES {
            return Some(Err(ResultPayloadError::TooLarge { len: payload.len() }));
        }
        Some(match crate::codec::from_blob::<Self>(rest) {
            Ok(r) => Ok(r),
            Err(e) => crate::codec::from_blob::<UnsignedResult>(rest)
                .map(|old| Self::unsigned(old.index, old.id, old.outcome))
                .map_err(|_| ResultPayloadError::Decode(e.to_string())),
        })
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
    use crate::outbox::{
        Outbox, OutboxError, OutboxLimits, OutboxRecord, WorkerKeyRequest, WorkerSigner,
    };

    const CHAIN: &[u8] = b"test-chain";

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

    fn worker() -> WorkerSigner {
        WorkerSigner::from_seed([7; 32])
    }

    fn policy() -> Policy {
        Policy::default()
            .with_outbox_consumer(crate::authz::ClientId::from_index(5))
            .with_chain_id(CHAIN)
            .with_worker_key(worker().public(), ["h"])
    }

    fn answer(ob: &Outbox, index: u64) -> OutboxResult {
        let record = ob.get(index).unwrap();
        let proof = worker().sign(CHAIN, index, record, b"ok");
        OutboxResult::answer(index, record.id, b"ok".to_vec(), proof)
    }

    #[test]
    fn a_result_applies_once_and_its_mark_survives_encoding_until_trimmed() {
        let policy = policy();
        let consumer = Principal::Client(crate::authz::ClientId::from_index(5));
        let mut ob = outbox(3);
        let r2 = answer(&ob, 2);
        assert_eq!(
            ob.accept_result(
                &policy,
                &Principal::Client(crate::authz::ClientId::from_index(6)),
                &r2
            ),
            Err(OutboxError::ResultUnauthorized {
                by: Principal::Client(crate::authz::ClientId::from_index(6))
            })
        );
        assert_eq!(ob.refused_results(), 1);
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
        let big = OutboxResult::dead_letter(3, ob.get(3).unwrap().id, "x".repeat(64 * 1024 + 1));
        assert!(matches!(
            ob.accept_result(&policy, &consumer, &big),
            Err(OutboxError::ResultTooLarge { .. })
        ));
        assert_eq!(ob.results_len(), 1);
        assert_eq!(ob.refused_results(), 5);

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

    /// The forged-result attack: an answer is believed only when a worker registered for the
    /// record's handler signed exactly this record and this answer on this chain.
    #[test]
    fn answers_need_a_registered_worker_signature() {
        let policy = policy();
        let consumer = Principal::Client(crate::authz::ClientId::from_index(5));
        let mut ob = outbox(3);
        let id = ob.get(1).unwrap().id;
        let check = |ob: &mut Outbox, r: &OutboxResult| ob.accept_result(&policy, &consumer, r);

        let unsigned = OutboxResult::unsigned(1, id, ResultOutcome::Answer(b"ok".to_vec()));
        assert_eq!(
            check(&mut ob, &unsigned),
            Err(OutboxError::ResultUnsigned { index: 1 })
        );
        let stranger = WorkerSigner::from_seed([8; 32]);
        let r = ob.get(1).unwrap().clone();
        let forged =
            OutboxResult::answer(1, id, b"ok".to_vec(), stranger.sign(CHAIN, 1, &r, b"ok"));
        assert!(matches!(
            check(&mut ob, &forged),
            Err(OutboxError::ResultWorkerUnknown { index: 1, .. })
        ));
        // Signed by the right worker, but for another answer, index, chain or payload.
        let proof = worker().sign(CHAIN, 1, &r, b"ok");
        let other_answer = OutboxResult::answer(1, id, b"no".to_vec(), proof.clone());
        let other_chain =
            OutboxResult::answer(1, id, b"ok".to_vec(), worker().sign(b"other", 1, &r, b"ok"));
        let mut forged_payload = r.clone();
        forged_payload.payload = b"forged".to_vec();
        let other_payload = OutboxResult::answer(
            1,
            id,
            b"ok".to_vec(),
            worker().sign(CHAIN, 1, &forged_payload, b"ok"),
        );
        for bad in [other_answer, other_chain, other_payload] {
            assert!(
                matches!(
                    check(&mut ob, &bad),
                    Err(OutboxError::ResultBadSignature { index: 1, .. })
                ),
                "{bad:?}"
            );
        }
        // A worker registered for another handler only.
        let other_handler = Policy::default()
            .with_outbox_consumer(crate::authz::ClientId::from_index(5))
            .with_chain_id(CHAIN)
            .with_worker_key(worker().public(), ["mail"]);
        let good = OutboxResult::answer(1, id, b"ok".to_vec(), proof);
        assert!(matches!(
            ob.accept_result(&other_handler, &consumer, &good),
            Err(OutboxError::ResultWorkerUnknown { .. })
        ));
        assert_eq!(ob.results_len(), 0, "nothing applied");
        assert_eq!(ob.refused_results(), 6);
        // The dead letter is the consumer's own word; the host is trusted.
        let dead = OutboxResult::dead_letter(2, ob.get(2).unwrap().id, "gave up");
        assert_eq!(check(&mut ob, &dead), Ok(ResultApplied::Applied));
        assert_eq!(
            ob.accept_result(&policy, &Principal::Host, &unsigned),
            Ok(ResultApplied::Applied)
        );
        assert_eq!(check(&mut ob, &good), Ok(ResultApplied::Duplicate));
    }

    /// Keys registered or revoked through admin requests decide over the genesis keys, and
    /// travel with the outbox's encoding.
    #[test]
    fn registered_and_revoked_keys_decide_and_are_replicated_state() {
        let policy = Policy::default()
            .with_admin(crate::authz::ClientId::from_index(1))
            .with_outbox_consumer(crate::authz::ClientId::from_index(5))
            .with_chain_id(CHAIN);
        let consumer = Principal::Client(crate::authz::ClientId::from_index(5));
        let mut ob = outbox(3);
        let r2 = answer(&ob, 2);
        assert!(matches!(
            ob.accept_result(&policy, &consumer, &r2),
            Err(OutboxError::ResultWorkerUnknown { .. })
        ));
        let register = WorkerKeyRequest::Register {
            key: worker().public(),
            handlers: vec!["h".into()],
        };
        assert_eq!(
            ob.apply_worker_keys(&policy, &consumer, &register),
            Err(OutboxError::WorkerKeysUnauthorized { by: consumer })
        );
        ob.apply_worker_keys(
            &policy,
            &Principal::Client(crate::authz::ClientId::from_index(1)),
            &register,
        )
        .unwrap();
        let back = Outbox::decode(&ob.encode().unwrap(), OutboxLimits::default()).unwrap();
        assert_eq!(back, ob);
        assert_eq!(back.workers().len(), 1);
        assert_eq!(
            ob.accept_result(&policy, &consumer, &r2),
            Ok(ResultApplied::Applied)
        );
        ob.apply_worker_keys(
            &policy,
            &Principal::Client(crate::authz::ClientId::from_index(1)),
            &WorkerKeyRequest::Revoke {
                key: worker().public(),
            },
        )
        .unwrap();
        assert!(matches!(
            ob.accept_result(&policy, &consumer, &answer(&ob, 3)),
            Err(OutboxError::ResultWorkerUnknown { .. })
        ));
    }

    #[test]
    fn older_formats_are_migrated_or_refused_and_bad_marks_are_refused() {
        #[derive(bincode::Encode)]
        struct WireV3 {
            version: u8,
            first_index: u64,
            records: Vec<OutboxRecord>,
            results: Vec<u64>,
        }
        let ob = outbox(2);
        let records: Vec<OutboxRecord> = ob.iter().map(|(_, r)| r.clone()).collect();
        let encode = |version: u8, results: Vec<u64>| {
            crate::outbox::codec::encode(&WireV3 {
                version,
                first_index: 1,
                records: records.clone(),
                results,
            })
            .unwrap()
        };
        // Layout 3 is read (migrated, empty registry); 1 and 2 (before topics/types and
        // result marks were both stored) are a typed version error, never a misread.
        assert_eq!(
            Outbox::decode(&encode(3, vec![]), OutboxLimits::default()).unwrap(),
            ob
        );
        for old in [1, 2, 7, 255] {
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
        // The current layout is 6 (records carry their owner, by a 256-bit client id).
        assert_eq!(ob.encode().unwrap()[0], 6);
    }

    #[test]
    fn payload_round_trips_and_rejects_garbage() {
        let r = OutboxResult::answer(
            9,
            OccurrenceId::new(1, 2, 3),
            b"confirmed".to_vec(),
            worker().sign(
                b"x",
                9,
                &OutboxRecord::new(OccurrenceId::new(1, 2, 3), "h", vec![]),
                b"confirmed",
            ),
        );
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
        let huge = OutboxResult::dead_letter(
            1,
            OccurrenceId::new(0, 0, 0),
            "x".repeat(MAX_RESULT_PAYLOAD_BYTES),
        );
        assert!(matches!(
            huge.to_payload(),
            Err(ResultPayloadError::TooLarge { .. })
        ));
        // A payload of the layout before signed answers still decodes, without a proof.
        let old = UnsignedResult {
            index: 4,
            id: OccurrenceId::new(1, 2, 3),
            outcome: ResultOutcome::DeadLetter("gave up".into()),
        };
        let mut p = RESULT_PAYLOAD_PREFIX.to_vec();
        p.extend_from_slice(&crate::codec::to_blob(&old).unwrap());
        assert_eq!(
            OutboxResult::from_payload(&p),
            Some(Ok(OutboxResult::dead_letter(
                4,
                OccurrenceId::new(1, 2, 3),
                "gave up"
            )))
        );
    }

    /// The answer bound: the largest answer the ledger accepts makes a payload that fits, one
    /// byte more does not (or is over the record bound).
    #[test]
    fn the_answer_bound_is_what_the_ledger_accepts() {
        let mut proof = worker().sign(
            b"x",
            1,
            &OutboxRecord::new(OccurrenceId::new(1, 2, 3), "h", vec![]),
            b"",
        );
        proof.path = vec![
            crate::outbox::workers::PathStep {
                left: true,
                hash: [0; 32]
            };
            crate::outbox::workers::MAX_PROOF_STEPS
        ];
        let at = |n: usize| {
            OutboxResult::answer(
                u64::MAX,
                OccurrenceId::new(u32::MAX, u64::MAX, u64::MAX),
                vec![0; n],
                proof.clone(),
            )
        };
        assert_eq!(
            at(0).to_payload().unwrap().len(),
            ANSWER_PAYLOAD_OVERHEAD_BYTES
        );
        let unbounded = OutboxLimits {
            max_record_bytes: usize::MAX,
            ..OutboxLimits::default()
        };
        let max = max_answer_bytes(&unbounded);
        assert_eq!(
            at(max).to_payload().unwrap().len(),
            MAX_RESULT_PAYLOAD_BYTES
        );
        assert!(at(max + 1).to_payload().is_err());
        assert_eq!(max_answer_bytes(&OutboxLimits::default()), 64 * 1024);
        // The record bound decides when it is the smaller.
        let mut ob = outbox(1);
        let policy = policy();
        let record = ob.get(1).unwrap().clone();
        let limit = max_answer_bytes(&ob.limits());
        let over = vec![0; limit + 1];
        let r = OutboxResult::answer(
            1,
            record.id,
            over.clone(),
            worker().sign(CHAIN, 1, &record, &over),
        );
        assert!(matches!(
            ob.accept_result(
                &policy,
                &Principal::Client(crate::authz::ClientId::from_index(5)),
                &r
            ),
            Err(OutboxError::ResultTooLarge { .. })
        ));
        let fits = vec![0; limit];
        let r = OutboxResult::answer(
            1,
            record.id,
            fits.clone(),
            worker().sign(CHAIN, 1, &record, &fits),
        );
        assert_eq!(
            ob.accept_result(
                &policy,
                &Principal::Client(crate::authz::ClientId::from_index(5)),
                &r
            ),
            Ok(ResultApplied::Applied)
        );
    }
}
