//! The one canonical codec of sim-bft's wire formats (bincode 2.0.1, fixed-width integers).
//!
//! Fixed-width integers make the encoding canonical for our types (no maps, no floats on the
//! wire): one value has exactly one encoding, so a re-encoded payload reproduces the bytes its
//! sender signed. Every decode has a size limit and must consume the whole input.

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};

/// Hard ceiling on any decoded value (bounds allocations from a hostile length prefix).
pub const ABSOLUTE_LIMIT_BYTES: usize = 64 << 20;

/// Errors of the codec.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    /// The input is longer than the caller's limit.
    #[error("{len} bytes exceed the limit of {limit} bytes")]
    TooLarge {
        /// Input length.
        len: usize,
        /// The limit that applied.
        limit: usize,
    },
    /// The input is not a valid encoding of the expected type.
    #[error("malformed: {0}")]
    Malformed(String),
    /// The input has bytes after a complete value.
    #[error("{extra} trailing bytes")]
    Trailing {
        /// How many bytes were left over.
        extra: usize,
    },
    /// Encoding failed (cannot happen for sim-bft's types; reported rather than panicking).
    #[error("encode failed: {0}")]
    Encode(String),
}

type Cfg = Configuration<LittleEndian, Fixint, Limit<ABSOLUTE_LIMIT_BYTES>>;

fn config() -> Cfg {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<ABSOLUTE_LIMIT_BYTES>()
}

/// Encodes `value` canonically.
pub fn encode<T: bincode::Encode>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a `T` from exactly `bytes`, refusing inputs longer than `limit_bytes`.
pub fn decode<T: bincode::Decode<()>>(bytes: &[u8], limit_bytes: usize) -> Result<T, CodecError> {
    let limit = limit_bytes.min(ABSOLUTE_LIMIT_BYTES);
    if bytes.len() > limit {
        return Err(CodecError::TooLarge {
            len: bytes.len(),
            limit,
        });
    }
    let (value, used) = bincode::decode_from_slice::<T, _>(bytes, config())
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::Trailing {
            extra: bytes.len() - used,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_limits_and_trailing() {
        let v: (u32, Vec<u8>) = (7, vec![1, 2, 3]);
        let b = encode(&v).unwrap();
        assert_eq!(decode::<(u32, Vec<u8>)>(&b, 100).unwrap(), v);
        assert!(matches!(
            decode::<(u32, Vec<u8>)>(&b, 3),
            Err(CodecError::TooLarge { .. })
        ));
        let mut t = b.clone();
        t.push(0);
        assert_eq!(
            decode::<(u32, Vec<u8>)>(&t, 100),
            Err(CodecError::Trailing { extra: 1 })
        );
        // A huge length prefix must fail cleanly, not allocate.
        let mut huge = 7u32.to_le_bytes().to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            decode::<(u32, Vec<u8>)>(&huge, 100),
            Err(CodecError::Malformed(_))
        ));
    }
}
