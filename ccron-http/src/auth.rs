//! Authentication of deliveries, dispatcher → worker: HMAC-SHA256 with a secret per worker.
//!
//! Every delivery carries a MAC over [`delivery_signing_bytes`]: the chain id, the sender's key
//! id, the record's index, occurrence id and handler, the attempt, the sender's acknowledged
//! progress, a timestamp and the SHA-256 of the payload. A worker recomputes it with the secret
//! it shares with that key id and refuses (401) anything else: a wrong chain, an unknown key id,
//! a timestamp more than its allowed skew away from its own clock (a captured delivery cannot
//! be replayed later), a MAC that does not match.
//!
//! Why HMAC and not a signature: a delivery is between two parties that can share a secret (the
//! consumer and one worker), and the worker is the only verifier. HMAC-SHA256 costs a few
//! microseconds, is in every language's standard library (a worker can be a short Python
//! script), and a secret per worker means one compromised worker learns nothing that lets it
//! impersonate the consumer to the others. Answers go the other way and must convince every
//! replica, which cannot hold a worker's secret without being able to forge it: those are
//! ed25519 signatures ([`ccron::outbox::workers`]).

use hmac::digest::KeyInit;
use hmac::digest::generic_array::GenericArray;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use ccron::outbox::OccurrenceId;

/// Domain separation of [`delivery_signing_bytes`] (16 bytes).
pub const DELIVER_DOMAIN: &[u8; 16] = b"ccron-deliver-v1";

/// Domain separation of [`response_signing_bytes`] (16 bytes).
pub const RESPOND_DOMAIN: &[u8; 16] = b"ccron-respond-v1";

/// Shortest secret accepted (bytes).
pub const MIN_SECRET_BYTES: usize = 16;

/// Longest secret accepted (bytes).
pub const MAX_SECRET_BYTES: usize = 64;

/// Longest sender key id.
pub const MAX_KEY_ID_BYTES: usize = 64;

/// A secret shared by the dispatcher and one worker (16 to 64 bytes; `Debug` hides it). It
/// keeps the HMAC keyed with it, so a MAC costs only the message's hashing.
#[derive(Clone)]
pub struct DeliverySecret {
    bytes: std::sync::Arc<[u8]>,
    keyed: Hmac<Sha256>,
}

impl PartialEq for DeliverySecret {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for DeliverySecret {}

impl std::fmt::Debug for DeliverySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeliverySecret({} bytes)", self.bytes.len())
    }
}

/// A secret of the wrong length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a delivery secret is {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, got {0}")]
pub struct SecretLengthError(pub usize);

impl DeliverySecret {
    /// The secret `bytes`.
    ///
    /// # Errors
    /// [`SecretLengthError`] outside 16 to 64 bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, SecretLengthError> {
        let bytes = bytes.into();
        if (MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&bytes.len()) {
            let keyed = keyed(&bytes);
            Ok(Self {
                bytes: bytes.into(),
                keyed,
            })
        } else {
            Err(SecretLengthError(bytes.len()))
        }
    }

    /// The secret's bytes (to hand to a worker's configuration).
    pub fn expose(&self) -> &[u8] {
        &self.bytes
    }
}

/// Whether `id` is a valid sender key id: 1 to [`MAX_KEY_ID_BYTES`] of `A-Z a-z 0-9 . _ -`.
pub fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// What a delivery's MAC covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryClaims<'a> {
    /// The chain the record belongs to.
    pub chain_id: &'a [u8],
    /// The sender's key id.
    pub key_id: &'a str,
    /// The record's outbox index.
    pub index: u64,
    /// The record's occurrence id.
    pub id: OccurrenceId,
    /// The record's handler.
    pub handler: &'a str,
    /// The attempt number.
    pub attempt: u32,
    /// The sender's acknowledged progress.
    pub progress: u64,
    /// The sender's clock, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// SHA-256 of the payload (the request body).
    pub payload_sha256: [u8; 32],
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The bytes a delivery's MAC covers (`docs/outbox.md`, "The worker protocol"):
///
/// ```text
/// "ccron-deliver-v1"                      16 bytes
/// len(chain_id) u32 BE ‖ chain_id
/// len(key_id) u32 BE ‖ key_id
/// index u64 BE
/// occurrence id                           20 bytes
/// len(handler) u32 BE ‖ handler
/// attempt u32 BE
/// progress u64 BE
/// timestamp_ms u64 BE
/// SHA-256(payload)                        32 bytes
/// ```
pub fn delivery_signing_bytes(c: &DeliveryClaims<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + c.chain_id.len() + c.handler.len());
    out.extend_from_slice(DELIVER_DOMAIN);
    put(&mut out, c.chain_id);
    put(&mut out, c.key_id.as_bytes());
    out.extend_from_slice(&c.index.to_be_bytes());
    out.extend_from_slice(&c.id.to_bytes());
    put(&mut out, c.handler.as_bytes());
    out.extend_from_slice(&c.attempt.to_be_bytes());
    out.extend_from_slice(&c.progress.to_be_bytes());
    out.extend_from_slice(&c.timestamp_ms.to_be_bytes());
    out.extend_from_slice(&c.payload_sha256);
    out
}

/// The bytes a worker's response MAC covers (`docs/outbox.md`, "The worker protocol"), so the
/// dispatcher knows the status, the body and the answer's signature come from the worker it
/// authenticated, for this request:
///
/// ```text
/// "ccron-respond-v1"                      16 bytes
/// the request's MAC (Ccron-Signature)     32 bytes
/// status                                  u16 BE
/// SHA-256(body)                           32 bytes
/// 0x00, or 0x01 ‖ answer key (32) ‖ signature (64) ‖ steps u32 BE ‖ per step: side (0x01 left,
///                                         0x00 right) ‖ hash (32)
/// ```
pub fn response_signing_bytes(
    request_tag: &[u8; 32],
    status: u16,
    body: &[u8],
    proof: Option<&ccron::outbox::AnswerProof>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + proof.map_or(0, |p| 101 + 33 * p.path.len()));
    out.extend_from_slice(RESPOND_DOMAIN);
    out.extend_from_slice(request_tag);
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&ccron::outbox::workers::sha256(body));
    match proof {
        None => out.push(0),
        Some(p) => {
            out.push(1);
            out.extend_from_slice(&p.key.0);
            out.extend_from_slice(&p.signature);
            out.extend_from_slice(
                &u32::try_from(p.path.len())
                    .unwrap_or(u32::MAX)
                    .to_be_bytes(),
            );
            for step in &p.path {
                out.push(u8::from(step.left));
                out.extend_from_slice(&step.hash);
            }
        }
    }
    out
}

fn keyed(secret: &[u8]) -> Hmac<Sha256> {
    // RFC 2104: a key shorter than the hash's block (64 bytes) is zero-padded to it, so padding
    // here computes the same MAC and lets the key be a fixed-size block (an infallible
    // constructor). Secrets are at most 64 bytes.
    let mut block = [0u8; 64];
    let n = secret.len().min(64);
    block[..n].copy_from_slice(&secret[..n]);
    <Hmac<Sha256> as KeyInit>::new(GenericArray::from_slice(&block))
}

fn hmac(secret: &DeliverySecret) -> Hmac<Sha256> {
    secret.keyed.clone()
}

/// HMAC-SHA256 of `bytes` under `secret`.
pub fn mac(secret: &DeliverySecret, bytes: &[u8]) -> [u8; 32] {
    let mut m = hmac(secret);
    m.update(bytes);
    m.finalize().into_bytes().into()
}

/// Whether `tag` is the HMAC-SHA256 of `bytes` under `secret` (compared in constant time).
pub fn verify_mac(secret: &DeliverySecret, bytes: &[u8], tag: &[u8]) -> bool {
    let mut m = hmac(secret);
    m.update(bytes);
    m.verify_slice(tag).is_ok()
}

/// The wall clock in milliseconds since the Unix epoch: the delivery timestamps' clock (the one
/// place ccron-http reads it; a clock before 1970 reads 0).
#[allow(clippy::disallowed_methods)]
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 (its 4-byte key is below our minimum, so the vector is checked
    /// through the hmac crate directly); our framing is pinned.
    #[test]
    fn mac_matches_rfc_4231_and_the_framing_is_pinned() {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let tag: [u8; 32] = m.finalize().into_bytes().into();
        assert_eq!(
            ccron::outbox::workers::to_hex(&tag),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let c = DeliveryClaims {
            chain_id: b"ch",
            key_id: "k1",
            index: 2,
            id: OccurrenceId::new(1, 2, 3),
            handler: "h",
            attempt: 4,
            progress: 5,
            timestamp_ms: 6,
            payload_sha256: [9; 32],
        };
        let mut expected = b"ccron-deliver-v1".to_vec();
        expected.extend_from_slice(&[0, 0, 0, 2, b'c', b'h', 0, 0, 0, 2, b'k', b'1']);
        expected.extend_from_slice(&2u64.to_be_bytes());
        expected.extend_from_slice(&OccurrenceId::new(1, 2, 3).to_bytes());
        expected.extend_from_slice(&[0, 0, 0, 1, b'h', 0, 0, 0, 4]);
        expected.extend_from_slice(&5u64.to_be_bytes());
        expected.extend_from_slice(&6u64.to_be_bytes());
        expected.extend_from_slice(&[9; 32]);
        assert_eq!(delivery_signing_bytes(&c), expected);
        let s = DeliverySecret::new(vec![7; 32]).unwrap();
        let tag = mac(&s, &expected);
        assert!(verify_mac(&s, &expected, &tag));
        assert!(!verify_mac(&s, &expected, &tag[..31]));
        let mut bad = tag;
        bad[0] ^= 1;
        assert!(!verify_mac(&s, &expected, &bad));
        let other = DeliverySecret::new(vec![8; 32]).unwrap();
        assert!(!verify_mac(&other, &expected, &tag));
        // The padded key gives the MAC of the key itself (RFC 2104), at every length.
        for len in [16, 33, 64] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
            m.update(b"msg");
            let plain: [u8; 32] = m.finalize().into_bytes().into();
            assert_eq!(mac(&DeliverySecret::new(key).unwrap(), b"msg"), plain);
        }
    }

    #[test]
    fn secrets_and_key_ids_are_bounded() {
        assert!(DeliverySecret::new(vec![0; 15]).is_err());
        assert!(DeliverySecret::new(vec![0; 65]).is_err());
        assert_eq!(
            format!("{:?}", DeliverySecret::new(vec![1; 16]).unwrap()),
            "DeliverySecret(16 bytes)"
        );
        assert!(valid_key_id("consumer-1.a_b"));
        for bad in ["", "a b", "é", "a:b", &"x".repeat(65)] {
            assert!(!valid_key_id(bad), "{bad}");
        }
    }
}
