//! The encodings of the log's recent batches, kept so that one batch is encoded once.
//!
//! A batch is encoded for its digest when it is proposed or accepted, then again inside every
//! stored log entry (`store_entry`: once when accepted, once when prepared, once when
//! committed) and sized again when it executes. The log shares each batch as an `Arc`; this
//! cache keeps the bytes of the last few by the identity of that `Arc` (it holds a clone, so
//! the allocation cannot be freed and reused for another batch while it is here, and a batch
//! behind a shared `Arc` cannot change). What is written is the same: a stored entry writes the
//! kept bytes where it would have encoded the batch ([`BatchRef`], pinned by
//! `a_kept_batch_encoding_is_the_batch_encoding`), and the kept bytes are the batch's
//! canonical encoding, taken from [`codec::encode`].

use std::collections::VecDeque;
use std::sync::Arc;

use crate::crypto::{Digest32, Signatures};
use crate::protocol::{Batch, codec};

/// How many batches' encodings are kept: the few in flight at once (a full pipeline evicts
/// the oldest, which is then encoded again if stored again: the bytes are the same).
const KEPT: usize = 8;

/// The kept encodings, newest last.
#[derive(Debug, Default)]
pub(super) struct BatchBytes {
    kept: VecDeque<(Arc<Batch>, Arc<[u8]>)>,
}

impl BatchBytes {
    /// The kept encoding of this very batch (the same `Arc`), if any.
    pub(super) fn get(&self, batch: &Arc<Batch>) -> Option<&Arc<[u8]>> {
        self.kept
            .iter()
            .rev()
            .find(|(b, _)| Arc::ptr_eq(b, batch))
            .map(|(_, bytes)| bytes)
    }

    /// Keeps `bytes` as the encoding of `batch` (the caller took them from `codec::encode`).
    pub(super) fn keep(&mut self, batch: &Arc<Batch>, bytes: Arc<[u8]>) {
        if self.get(batch).is_some() {
            return;
        }
        if self.kept.len() >= KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back((Arc::clone(batch), bytes));
    }

    /// The encoding of `batch`: the kept one, or encoded now and kept.
    pub(super) fn encoding(&mut self, batch: &Arc<Batch>) -> Result<Arc<[u8]>, codec::CodecError> {
        if let Some(bytes) = self.get(batch) {
            return Ok(Arc::clone(bytes));
        }
        let bytes: Arc<[u8]> = codec::encode(&**batch)?.into();
        self.keep(batch, Arc::clone(&bytes));
        Ok(bytes)
    }
}

/// Encodes `batch` once: its digest under `scheme` (exactly [`Batch::digest`]'s) and its bytes,
/// for [`BatchBytes::keep`].
pub(super) fn digest_and_bytes(
    batch: &Batch,
    scheme: Signatures,
) -> Result<(Digest32, Arc<[u8]>), codec::CodecError> {
    let bytes = codec::encode(batch)?;
    Ok((scheme.digest(&bytes), bytes.into()))
}

/// A batch inside an encoded structure: encoded from the value, or written from bytes that are
/// its encoding. Both write the same bytes.
#[derive(Debug, Clone, Copy)]
pub(super) enum BatchRef<'a> {
    /// Encode the batch.
    Value(&'a Batch),
    /// Write these bytes, which are `codec::encode` of the batch.
    Encoded(&'a [u8]),
}

impl bincode::Encode for BatchRef<'_> {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        match self {
            Self::Value(b) => b.encode(encoder),
            Self::Encoded(bytes) => bincode::enc::write::Writer::write(encoder.writer(), bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ClockSample, Request, RequestKind, SignedRequest, TimeCert};

    fn batch(clock: i64, requests: usize, samples: usize) -> Batch {
        Batch {
            requests: (0..requests)
                .map(|i| {
                    SignedRequest::sign(
                        &crate::crypto::client_signing_key(1, 0),
                        Request {
                            client: 0,
                            req_seq: i as u64 + 1,
                            kind: RequestKind::Write,
                            payload: vec![i as u8; i * 7],
                        },
                    )
                    .unwrap()
                })
                .collect(),
            primary_clock_ms: clock,
            time_cert: (samples > 0).then(|| TimeCert {
                seq: 3,
                digest: [4; 32],
                samples: (0..samples)
                    .map(|r| ClockSample {
                        replica: r as u32,
                        view: 1,
                        clock_ms: clock - r as i64,
                        sig: [r as u8; 64],
                    })
                    .collect(),
            }),
            null: requests == 0,
        }
    }

    /// A batch written from its kept bytes is the batch encoded, alone and inside a structure
    /// (a field before and after it), and the digest taken with the bytes is `Batch::digest`.
    #[test]
    fn a_kept_batch_encoding_is_the_batch_encoding() {
        for b in [
            batch(0, 0, 0),
            batch(5, 1, 0),
            batch(-9, 3, 3),
            batch(i64::MAX, 40, 4),
        ] {
            for scheme in [Signatures::Ed25519, Signatures::Sim] {
                let (digest, bytes) = digest_and_bytes(&b, scheme).unwrap();
                assert_eq!(digest, b.digest(scheme).unwrap());
                assert_eq!(&*bytes, codec::encode(&b).unwrap().as_slice());
                let by_value = (7u64, BatchRef::Value(&b), true);
                let by_bytes = (7u64, BatchRef::Encoded(&bytes), true);
                let owned = (7u64, b.clone(), true);
                assert_eq!(
                    codec::encode(&by_bytes).unwrap(),
                    codec::encode(&owned).unwrap()
                );
                assert_eq!(
                    codec::encode(&by_value).unwrap(),
                    codec::encode(&owned).unwrap()
                );
            }
        }
    }

    /// The cache answers by identity: an equal batch in another `Arc` is not found; the oldest
    /// goes once more than `KEPT` are kept; `encoding` fills a miss with the batch's bytes.
    #[test]
    fn kept_by_identity_and_bounded() {
        let mut c = BatchBytes::default();
        let a = Arc::new(batch(1, 1, 0));
        let same_value = Arc::new(batch(1, 1, 0));
        assert!(c.get(&a).is_none());
        let bytes = c.encoding(&a).unwrap();
        assert_eq!(&*bytes, codec::encode(&*a).unwrap().as_slice());
        assert!(c.get(&a).is_some());
        assert!(c.get(&same_value).is_none());
        let others: Vec<Arc<Batch>> = (0..KEPT as i64)
            .map(|i| Arc::new(batch(i + 10, 1, 0)))
            .collect();
        for o in &others {
            c.encoding(o).unwrap();
        }
        assert!(c.get(&a).is_none(), "the oldest is evicted");
        for o in &others {
            assert_eq!(
                &**c.get(o).unwrap(),
                codec::encode(&**o).unwrap().as_slice()
            );
        }
    }
}
