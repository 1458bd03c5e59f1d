//! Signed client requests: the format clients submit to a node's endpoint, proposers put into
//! blocks and every validator re-verifies.
//!
//! A request is `(client key, request number, payload)`, signed by the client's ed25519 key over
//! a domain-separated encoding ([`ClientRequest::signing_bytes`]): the chain's signing domain
//! for requests ([`SigningDomain::message`]: the chain id in version 2), the key, the number
//! (8 bytes LE), the payload's length (8 bytes LE) and the payload. The ledger sees the
//! client as [`ClientId`] = `SHA-256("ccron-malachite/client-id" || key)`, all 32 bytes
//! ([`client_id`]), and each `(client, number)` executes at most once
//! ([`ccron::host::ExecutedRequests`]). Sizes are bounded everywhere: the payload by
//! [`MAX_PAYLOAD_BYTES`], an encoded request by [`MAX_SIGNED_REQUEST_BYTES`] (checked before
//! decoding), and a block's requests by [`MAX_BLOCK_REQUESTS`] and [`MAX_BLOCK_REQUEST_BYTES`].

use borsh::{BorshDeserialize, BorshSerialize};
use ccron::host::ClientId;
use ed25519_dalek::{Signer as _, SigningKey};
use sha2::{Digest, Sha256};

use crate::crypto::{SignedKind, SigningDomain, verify_raw};
use crate::types::{Hash32, PubKey, Sig};

/// The domain tag request signatures covered in signing domain version 1
/// ([`crate::crypto::SignedKind::v1_tag`]; a request signature can never be taken for a vote, a
/// proposal or a clock sample, whose tags differ).
pub const REQUEST_DOMAIN: &[u8] = b"ccron-malachite/client-request/v1";

/// The largest request payload.
pub const MAX_PAYLOAD_BYTES: usize = 4 * 1024;

/// The largest encoded signed request (key, number, payload with its length, signature).
pub const MAX_SIGNED_REQUEST_BYTES: usize = MAX_PAYLOAD_BYTES + 32 + 8 + 4 + 64;

/// The most requests one block carries.
pub const MAX_BLOCK_REQUESTS: usize = 256;

/// The most bytes of encoded requests one block carries (well under the block limit).
pub const MAX_BLOCK_REQUEST_BYTES: usize = 128 * 1024;

/// A client request before signing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct ClientRequest {
    /// The client's ed25519 public key.
    pub client_key: [u8; 32],
    /// The client's request number: each executes at most once.
    pub number: u64,
    /// The application payload (at most [`MAX_PAYLOAD_BYTES`]).
    pub payload: Vec<u8>,
}

/// A request with its client's signature.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct SignedRequest {
    /// The request.
    pub request: ClientRequest,
    /// The client's signature over [`ClientRequest::signing_bytes`].
    pub signature: Sig,
}

/// Why a submitted or proposed request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The encoded request is over [`MAX_SIGNED_REQUEST_BYTES`].
    #[error("request of {len} bytes is over the limit of {limit}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The payload is over [`MAX_PAYLOAD_BYTES`].
    #[error("payload of {len} bytes is over the limit of {limit}")]
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not one signed request.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The signature does not verify under the request's key (or the key is not a valid
    /// ed25519 point).
    #[error("request signature does not verify")]
    BadSignature,
}

/// The ledger's id of the client holding `key`: the whole domain-separated SHA-256 of the key
/// (256 bits, equal on every validator). Before 256-bit ids it was the first 8 bytes of the
/// same hash, little-endian: [`ClientId::legacy_prefix`] of this id, by which owners and
/// request history migrated from that time are still matched.
pub fn client_id(key: &[u8; 32]) -> ClientId {
    ClientId::of_key(b"ccron-malachite/client-id", key)
}

impl ClientRequest {
    /// The bytes the client signs for chain `domain`.
    pub fn signing_bytes(&self, domain: &SigningDomain) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.payload.len());
        out.extend_from_slice(&self.client_key);
        out.extend_from_slice(&self.number.to_le_bytes());
        out.extend_from_slice(&(self.payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.payload);
        domain.message(SignedKind::Request, &out)
    }

    /// The ledger's id of the client ([`client_id`]).
    pub fn client(&self) -> ClientId {
        client_id(&self.client_key)
    }

    /// Signs the request for chain `domain` with `key` (whose public key must be `client_key`
    /// for it to verify).
    pub fn sign(self, domain: &SigningDomain, key: &SigningKey) -> SignedRequest {
        let signature = Sig(key.sign(&self.signing_bytes(domain)).to_bytes());
        SignedRequest {
            request: self,
            signature,
        }
    }
}

impl SignedRequest {
    /// Checks the request's own bounds (the payload's size).
    ///
    /// # Errors
    /// [`RequestError::PayloadTooLarge`].
    pub fn check_bounds(&self) -> Result<(), RequestError> {
        let len = self.request.payload.len();
        if len > MAX_PAYLOAD_BYTES {
            return Err(RequestError::PayloadTooLarge {
                len,
                limit: MAX_PAYLOAD_BYTES,
            });
        }
        Ok(())
    }

    /// Checks the bounds and the signature (made for chain `domain`).
    ///
    /// # Errors
    /// [`RequestError::PayloadTooLarge`] or [`RequestError::BadSignature`] (also a signature
    /// made for another chain or signing domain).
    pub fn verify(&self, domain: &SigningDomain) -> Result<(), RequestError> {
        self.check_bounds()?;
        if !verify_raw(
            &PubKey(self.request.client_key),
            &self.request.signing_bytes(domain),
            &self.signature,
        ) {
            return Err(RequestError::BadSignature);
        }
        Ok(())
    }

    /// The canonical encoding (borsh).
    pub fn encode(&self) -> Vec<u8> {
        borsh::to_vec(self).unwrap_or_default()
    }

    /// The encoded length.
    pub fn encoded_len(&self) -> usize {
        // key + number + payload length prefix + payload + signature.
        32 + 8 + 4 + self.request.payload.len() + 64
    }

    /// Decodes exactly one signed request, refusing more than [`MAX_SIGNED_REQUEST_BYTES`]
    /// before decoding; does not verify (see [`verify`](Self::verify)).
    ///
    /// # Errors
    /// [`RequestError::TooLarge`] or [`RequestError::Malformed`].
    pub fn decode(bytes: &[u8]) -> Result<Self, RequestError> {
        if bytes.len() > MAX_SIGNED_REQUEST_BYTES {
            return Err(RequestError::TooLarge {
                len: bytes.len(),
                limit: MAX_SIGNED_REQUEST_BYTES,
            });
        }
        borsh::from_slice(bytes).map_err(|e| RequestError::Malformed(e.to_string()))
    }

    /// Decodes and verifies ([`decode`](Self::decode), then [`verify`](Self::verify)).
    ///
    /// # Errors
    /// The first failure.
    pub fn decode_verified(bytes: &[u8], domain: &SigningDomain) -> Result<Self, RequestError> {
        let r = Self::decode(bytes)?;
        r.verify(domain)?;
        Ok(r)
    }

    /// The request's digest: SHA-256 of its encoding (the mempool's dedupe key).
    pub fn digest(&self) -> Hash32 {
        Hash32(Sha256::digest(self.encode()).into())
    }

    /// The ledger's client id.
    pub fn client(&self) -> ClientId {
        self.request.client()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> SigningKey {
        SigningKey::from_bytes(&[i; 32])
    }

    fn d() -> SigningDomain {
        SigningDomain::chain(b"test-chain").unwrap()
    }

    fn request(k: &SigningKey, number: u64, payload: &[u8]) -> SignedRequest {
        ClientRequest {
            client_key: k.verifying_key().to_bytes(),
            number,
            payload: payload.to_vec(),
        }
        .sign(&d(), k)
    }

    #[test]
    fn signed_requests_round_trip_and_verify() {
        let r = request(&key(1), 7, b"hello");
        let bytes = r.encode();
        assert_eq!(bytes.len(), r.encoded_len());
        let back = SignedRequest::decode_verified(&bytes, &d()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.digest(), r.digest());
        assert_eq!(back.client(), client_id(&key(1).verifying_key().to_bytes()));
        assert_ne!(back.client(), request(&key(2), 7, b"hello").client());
    }

    #[test]
    fn tampering_and_bounds_are_refused() {
        let k = key(3);
        let r = request(&k, 1, b"pay");
        // Any changed field breaks the signature.
        let mut other = r.clone();
        other.request.number = 2;
        assert_eq!(other.verify(&d()), Err(RequestError::BadSignature));
        let mut other = r.clone();
        other.request.payload = b"paY".to_vec();
        assert_eq!(other.verify(&d()), Err(RequestError::BadSignature));
        let mut other = r.clone();
        other.request.client_key = key(4).verifying_key().to_bytes();
        assert_eq!(other.verify(&d()), Err(RequestError::BadSignature));
        // Signed by a key that is not the request's.
        let forged = ClientRequest {
            client_key: k.verifying_key().to_bytes(),
            number: 1,
            payload: b"pay".to_vec(),
        }
        .sign(&d(), &key(5));
        assert_eq!(forged.verify(&d()), Err(RequestError::BadSignature));
        // Payload and encoding limits.
        let big = request(&k, 1, &vec![0; MAX_PAYLOAD_BYTES + 1]);
        assert!(matches!(
            big.verify(&d()),
            Err(RequestError::PayloadTooLarge { .. })
        ));
        assert!(matches!(
            SignedRequest::decode(&big.encode()),
            Err(RequestError::TooLarge { .. })
        ));
        let max = request(&k, 1, &vec![0; MAX_PAYLOAD_BYTES]);
        assert_eq!(max.encode().len(), MAX_SIGNED_REQUEST_BYTES);
        assert!(SignedRequest::decode_verified(&max.encode(), &d()).is_ok());
        // Truncated, extended and garbage bytes.
        let bytes = r.encode();
        assert!(matches!(
            SignedRequest::decode(&bytes[..bytes.len() - 1]),
            Err(RequestError::Malformed(_))
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            SignedRequest::decode(&longer),
            Err(RequestError::Malformed(_))
        ));
        assert!(SignedRequest::decode(&[0xff; 100]).is_err());
    }

    #[test]
    fn signing_bytes_are_domain_separated_and_length_prefixed() {
        let a = ClientRequest {
            client_key: [1; 32],
            number: 1,
            payload: vec![2, 3],
        };
        let b = a.signing_bytes(&SigningDomain::V1);
        assert!(b.starts_with(REQUEST_DOMAIN));
        assert_eq!(b.len(), REQUEST_DOMAIN.len() + 32 + 8 + 8 + 2);
        let v2 = a.signing_bytes(&d());
        assert!(v2.starts_with(crate::crypto::SIGNING_DOMAIN_V2));
        assert!(v2.ends_with(&b[REQUEST_DOMAIN.len()..]));
        assert_eq!(
            &b[REQUEST_DOMAIN.len() + 40..REQUEST_DOMAIN.len() + 48],
            &2u64.to_le_bytes()
        );
    }
}
