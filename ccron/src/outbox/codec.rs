//! The outbox module's only encoder/decoder pair.
//!
//! Everything the outbox persists (the replicated [`Outbox`](super::Outbox) and a worker's
//! [`SeenSet`](super::SeenSet)) goes through [`encode`] / [`decode`] here, so that a later
//! integration can route it through `ccron::codec` by changing this one file. The format is
//! bincode 2.0.1 with fixed-width big-endian integers (byte-for-byte identical on every replica and
//! platform) and a hard size limit: a decoder never allocates more than [`MAX_ENCODED_BYTES`].

use bincode::config::{self, BigEndian, Configuration, Fixint, Limit};

/// Largest encoded value accepted or produced by this module (64 MiB).
pub const MAX_ENCODED_BYTES: usize = 64 * 1024 * 1024;

type Config = Configuration<BigEndian, Fixint, Limit<MAX_ENCODED_BYTES>>;

const fn cfg() -> Config {
    config::standard()
        .with_big_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_ENCODED_BYTES>()
}

/// Why bytes could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The encoder failed (the value exceeds [`MAX_ENCODED_BYTES`]).
    #[error("encoding failed: {0}")]
    Encode(String),
    /// The bytes are not a valid encoding (truncated, oversized, or malformed).
    #[error("decoding failed: {0}")]
    Decode(String),
    /// The bytes decoded but were followed by extra bytes.
    #[error("{trailing} trailing bytes after the encoded value")]
    Trailing {
        /// How many bytes were left over.
        trailing: usize,
    },
    /// The format version is not one this build reads.
    #[error("unsupported format version {found} (this build reads {expected})")]
    Version {
        /// Version found in the bytes.
        found: u8,
        /// Version this build reads.
        expected: u8,
    },
}

/// Encodes `value` canonically.
pub(crate) fn encode<T: bincode::Encode>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::encode_to_vec(value, cfg()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes exactly one `T` from all of `bytes` (at most [`MAX_ENCODED_BYTES`]).
pub(crate) fn decode<T: bincode::Decode<()>>(bytes: &[u8]) -> Result<T, CodecError> {
    if bytes.len() > MAX_ENCODED_BYTES {
        return Err(CodecError::Decode(format!(
            "{} bytes exceed the {MAX_ENCODED_BYTES}-byte limit",
            bytes.len()
        )));
    }
    let (value, used) = bincode::decode_from_slice(bytes, cfg()).map_err(|e| {
        tracing::warn!(len = bytes.len(), error = %e, "outbox codec: undecodable bytes");
        CodecError::Decode(e.to_string())
    })?;
    if used != bytes.len() {
        tracing::warn!(len = bytes.len(), used, "outbox codec: trailing bytes");
        return Err(CodecError::Trailing {
            trailing: bytes.len() - used,
        });
    }
    Ok(value)
}
