//! Deterministic occurrence ids: the name every replica gives to one firing of one action.
//!
//! An occurrence is identified by the component whose table fired, the entry (schedule) inside
//! that table, and the occurrence number of that entry (how many times it had fired before, as
//! counted in replicated state). All three are replicated values, so every replica derives the
//! same id for the same firing, and an external worker can deduplicate re-deliveries by it.
//!
//! # Stable forms
//!
//! * bytes ([`OccurrenceId::to_bytes`]): 20 bytes, big-endian `component (u32) ‖ entry (u64) ‖
//!   occurrence (u64)`. Big-endian makes the lexicographic byte order equal to the `Ord` order.
//! * text ([`Display`](std::fmt::Display) / [`FromStr`]): the same fields as lowercase hex,
//!   zero-padded, separated by dashes: `cccccccc-eeeeeeeeeeeeeeee-oooooooooooooooo` (42 chars).
//!   Parsing accepts upper- or lowercase hex and nothing else.
//!
//! Both forms are part of the wire contract with workers and never change.

use std::fmt;
use std::str::FromStr;

use crate::tick::ComponentId;

/// Length of [`OccurrenceId::to_bytes`].
pub const OCCURRENCE_ID_BYTES: usize = 20;

/// Length of the text form of an [`OccurrenceId`].
pub const OCCURRENCE_ID_TEXT_LEN: usize = 8 + 1 + 16 + 1 + 16;

/// The deterministic id of one firing of one action.
///
/// Ordered by `(component, entry, occurrence)`, the same order as its byte form.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
pub struct OccurrenceId {
    /// The component whose table fired.
    pub component: ComponentId,
    /// The entry (schedule id or position) inside the component's table.
    pub entry: u64,
    /// The occurrence number of that entry (0 for its first firing).
    pub occurrence: u64,
}

/// Why a text occurrence id was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdParseError {
    /// The text does not have the 42-character `8-16-16` shape.
    #[error(
        "an occurrence id is {OCCURRENCE_ID_TEXT_LEN} characters `cccccccc-eeeeeeeeeeeeeeee-oooooooooooooooo`, got {len} characters"
    )]
    Shape {
        /// Length of the rejected text in bytes.
        len: usize,
    },
    /// A field holds something other than hex digits.
    #[error("occurrence id field {field} is not hexadecimal")]
    NotHex {
        /// Which field: `component`, `entry` or `occurrence`.
        field: &'static str,
    },
}

impl OccurrenceId {
    /// The id of occurrence `occurrence` of entry `entry` of component `component`.
    pub const fn new(component: ComponentId, entry: u64, occurrence: u64) -> Self {
        Self {
            component,
            entry,
            occurrence,
        }
    }

    /// The stable 20-byte big-endian form (see the module documentation).
    pub fn to_bytes(&self) -> [u8; OCCURRENCE_ID_BYTES] {
        let mut out = [0u8; OCCURRENCE_ID_BYTES];
        out[..4].copy_from_slice(&self.component.to_be_bytes());
        out[4..12].copy_from_slice(&self.entry.to_be_bytes());
        out[12..].copy_from_slice(&self.occurrence.to_be_bytes());
        out
    }

    /// The id whose [`to_bytes`](Self::to_bytes) form is `bytes`.
    pub fn from_bytes(bytes: &[u8; OCCURRENCE_ID_BYTES]) -> Self {
        let mut c = [0u8; 4];
        let mut e = [0u8; 8];
        let mut o = [0u8; 8];
        c.copy_from_slice(&bytes[..4]);
        e.copy_from_slice(&bytes[4..12]);
        o.copy_from_slice(&bytes[12..]);
        Self {
            component: u32::from_be_bytes(c),
            entry: u64::from_be_bytes(e),
            occurrence: u64::from_be_bytes(o),
        }
    }

    /// A well-mixed 64-bit digest of the id and `salt`, stable across platforms and releases.
    ///
    /// Used for deterministic retry jitter: it is a fixed function of replicated values, so two
    /// runs of the same consumer make the same decisions (no RNG, no clock).
    pub fn mix(&self, salt: u64) -> u64 {
        let mut h = splitmix64(u64::from(self.component) ^ 0x6363_726f_6e5f_6f62);
        h = splitmix64(h ^ self.entry);
        h = splitmix64(h ^ self.occurrence);
        splitmix64(h ^ salt)
    }
}

/// SplitMix64's finaliser: a fixed, documented bijection on u64 with good avalanche.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl fmt::Display for OccurrenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08x}-{:016x}-{:016x}",
            self.component, self.entry, self.occurrence
        )
    }
}

impl FromStr for OccurrenceId {
    type Err = IdParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let shape = IdParseError::Shape { len: s.len() };
        if s.len() != OCCURRENCE_ID_TEXT_LEN {
            return Err(shape);
        }
        let mut parts = s.split('-');
        let (Some(c), Some(e), Some(o), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(shape);
        };
        if c.len() != 8 || e.len() != 16 || o.len() != 16 {
            return Err(shape);
        }
        // from_str_radix accepts a leading '+': insist on hex digits only.
        let hex = |field: &'static str, text: &str| {
            if text.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(())
            } else {
                Err(IdParseError::NotHex { field })
            }
        };
        hex("component", c)?;
        hex("entry", e)?;
        hex("occurrence", o)?;
        Ok(Self {
            component: u32::from_str_radix(c, 16)
                .map_err(|_| IdParseError::NotHex { field: "component" })?,
            entry: u64::from_str_radix(e, 16)
                .map_err(|_| IdParseError::NotHex { field: "entry" })?,
            occurrence: u64::from_str_radix(o, 16).map_err(|_| IdParseError::NotHex {
                field: "occurrence",
            })?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn documented_forms_are_stable() {
        let id = OccurrenceId::new(7, 0x0102_0304_0506_0708, 42);
        assert_eq!(id.to_string(), "00000007-0102030405060708-000000000000002a");
        assert_eq!(
            id.to_bytes(),
            [0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 42]
        );
        // Pin the jitter hash: changing it would change every consumer's retry schedule.
        assert_eq!(id.mix(1), 0x9d82_a661_5ff2_2edb);
        assert_ne!(id.mix(1), id.mix(2));
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "00000007-0102030405060708-00000000000000",
            "00000007+0102030405060708-000000000000002a",
            "0000000g-0102030405060708-000000000000002a",
            "+0000007-0102030405060708-000000000000002a",
            "00000007-0102030405060708-000000000000002a-",
            "000000007-102030405060708-000000000000002a",
        ] {
            assert!(bad.parse::<OccurrenceId>().is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            "0000000A-0102030405060708-000000000000002A".parse::<OccurrenceId>(),
            Ok(OccurrenceId::new(10, 0x0102_0304_0506_0708, 42))
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn forms_round_trip_and_preserve_order(a in any::<(u32, u64, u64)>(), b in any::<(u32, u64, u64)>()) {
            let x = OccurrenceId::new(a.0, a.1, a.2);
            let y = OccurrenceId::new(b.0, b.1, b.2);
            prop_assert_eq!(OccurrenceId::from_bytes(&x.to_bytes()), x);
            prop_assert_eq!(x.to_string().parse::<OccurrenceId>(), Ok(x));
            prop_assert_eq!(x.cmp(&y), x.to_bytes().cmp(&y.to_bytes()));
            prop_assert_eq!(x.cmp(&y), x.to_string().cmp(&y.to_string()));
        }
    }
}
