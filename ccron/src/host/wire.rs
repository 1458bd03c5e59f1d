//! The canonical byte encoding of host-side values: application snapshots, request payloads and
//! everything a state digest covers.
//!
//! bincode 2.0.1 (pinned) with little-endian fixed-width integers: for types without maps or
//! floats one value has exactly one encoding, so two replicas that hold equal values produce
//! equal bytes (and equal digests). Every decode has a size limit and must consume its whole
//! input. This is the same encoding sim-bft's wire codec uses, so values move between the two
//! byte for byte.

use bincode::config::{Configuration, Fixint, Limit, LittleEndian};

/// Hard ceiling on any decoded value (bounds allocations from a hostile length prefix).
pub const ABSOLUTE_LIMIT_BYTES: usize = 64 << 20;

/// Errors of the host codec.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
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
    /// Encoding failed (reported rather than panicking).
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
pub fn encode<T: bincode::Encode>(value: &T) -> Result<Vec<u8>, WireError> {
    bincode::encode_to_vec(value, config()).map_err(|e| WireError::Encode(e.to_string()))
}

/// The length of `value`'s canonical encoding, without allocating it.
pub fn encoded_len<T: bincode::Encode>(value: &T) -> Result<usize, WireError> {
    let mut w = bincode::enc::write::SizeWriter::default();
    bincode::encode_into_writer(value, &mut w, config())
        .map_err(|e| WireError::Encode(e.to_string()))?;
    Ok(w.bytes_written)
}

/// Decodes a `T` from exactly `bytes`, refusing inputs longer than `limit_bytes`.
pub fn decode<T: bincode::Decode<()>>(bytes: &[u8], limit_bytes: usize) -> Result<T, WireError> {
    let limit = limit_bytes.min(ABSOLUTE_LIMIT_BYTES);
    if bytes.len() > limit {
        return Err(WireError::TooLarge {
            len: bytes.len(),
            limit,
        });
    }
    let (value, used) = bincode::decode_from_slice::<T, _>(bytes, config())
        .map_err(|e| WireError::Malformed(e.to_string()))?;
    if used != bytes.len() {
        return Err(WireError::Trailing {
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
        // Fixed-width: 4 bytes of u32, 8 of length, 3 of data.
        assert_eq!(b.len(), 15);
        assert_eq!(decode::<(u32, Vec<u8>)>(&b, 100).unwrap(), v);
        assert!(matches!(
            decode::<(u32, Vec<u8>)>(&b, 3),
            Err(WireError::TooLarge { len: 15, limit: 3 })
        ));
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(
            decode::<(u32, Vec<u8>)>(&longer, 100),
            Err(WireError::Trailing { extra: 1 })
        );
        assert!(matches!(
            decode::<(u32, Vec<u8>)>(&b[..5], 100),
            Err(WireError::Malformed(_))
        ));
    }
}
