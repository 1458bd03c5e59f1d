//! The one canonical codec of sim-bft's wire formats: ccron's host codec
//! ([`ccron::host::wire`]: bincode 2.0.1, little-endian fixed-width integers, a size limit on
//! every decode, no trailing bytes), re-exported so that the replica's messages and the
//! applications' snapshots and payloads are encoded by one implementation.
//!
//! Fixed-width integers make the encoding canonical for our types (no maps, no floats on the
//! wire): one value has exactly one encoding, so a re-encoded payload reproduces the bytes its
//! sender signed.

pub use ccron::host::wire::{
    ABSOLUTE_LIMIT_BYTES, WireError as CodecError, decode, encode, encoded_len,
};

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
