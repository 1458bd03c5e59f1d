//! Properties of `ZoneRules` as stored data: local-time resolution agrees with the UTC offset
//! function on arbitrary valid rules, stored forms round-trip, and arbitrary bytes never panic
//! the decoder.

use ccron::cron::{LocalResolution, ZoneRules, ZoneTransition};
use proptest::prelude::*;

/// Valid rules: up to 12 transitions, strictly increasing, offsets within ±14 h (whole minutes,
/// as real zones mostly are, plus some odd seconds via the initial offset).
fn rules() -> impl Strategy<Value = ZoneRules> {
    (
        -50_400i32..=50_400,
        proptest::collection::vec((1i64..200_000, -840i32..=840), 0..12),
    )
        .prop_map(|(initial_offset_s, steps)| {
            let mut at_utc_s = -100_000;
            let transitions = steps
                .into_iter()
                .map(|(gap_s, offset_min)| {
                    at_utc_s += gap_s;
                    ZoneTransition {
                        at_utc_s,
                        offset_s: offset_min * 60,
                    }
                })
                .collect();
            ZoneRules::from_parts("Test/Zone".into(), initial_offset_s, transitions).unwrap()
        })
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<{ 1 << 16 }>()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every offset `resolve_local` reports really maps the local time back to itself, in the
    /// right order, and a gap means no offset of the rules does.
    #[test]
    fn resolve_local_agrees_with_offset_at(rules in rules(), local_s in -400_000i64..2_800_000) {
        let maps_back = |o: i32| rules.offset_at(local_s - i64::from(o)) == o;
        let mut candidates: Vec<i32> = std::iter::once(rules.initial_offset_s())
            .chain(rules.transitions().iter().map(|t| t.offset_s))
            .filter(|&o| maps_back(o))
            .collect();
        // Distinct instants, earliest first (a larger offset means an earlier instant).
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates.dedup();
        match rules.resolve_local(local_s) {
            LocalResolution::Single(o) => prop_assert_eq!(candidates, vec![o]),
            LocalResolution::Ambiguous(e, l) => {
                prop_assert!(candidates.len() >= 2);
                prop_assert_eq!(candidates.first().copied(), Some(e));
                prop_assert_eq!(candidates.last().copied(), Some(l));
            }
            LocalResolution::Gap => prop_assert!(candidates.is_empty(), "{:?}", candidates),
        }
    }

    /// Stored forms round-trip exactly.
    #[test]
    fn bincode_round_trip(rules in rules()) {
        let bytes = bincode::encode_to_vec(&rules, config()).unwrap();
        let (back, used): (ZoneRules, usize) = bincode::decode_from_slice(&bytes, config()).unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(back, rules);
    }

    /// Arbitrary bytes decode to an error or to valid rules, never a panic; whatever decodes
    /// re-encodes to a prefix of the input.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok((rules, used)) = bincode::decode_from_slice::<ZoneRules, _>(&bytes, config()) {
            let again = bincode::encode_to_vec(&rules, config()).unwrap();
            prop_assert_eq!(&again[..], &bytes[..used]);
        }
    }
}

#[test]
fn decoding_rejects_unsorted_or_out_of_range_rules() {
    // Encode valid-looking parts by hand through a valid value, then break them.
    let ok = ZoneRules::from_parts(
        "Z".into(),
        0,
        vec![
            ZoneTransition {
                at_utc_s: 10,
                offset_s: 3_600,
            },
            ZoneTransition {
                at_utc_s: 20,
                offset_s: 0,
            },
        ],
    )
    .unwrap();
    let bytes = bincode::encode_to_vec(&ok, config()).unwrap();
    // Layout (standard config, varints): name len, 'Z', initial (zigzag 0), count 2,
    // at 10 (zigzag 20), offset 3600 (zigzag 7200 = 0xfb 0x20 0x1c), at 20 (zigzag 40), offset 0.
    assert_eq!(bytes, [1, b'Z', 0, 2, 20, 0xfb, 0x20, 0x1c, 40, 0]);
    let mut unsorted = bytes.clone();
    unsorted[8] = 20; // second transition at 10: not strictly increasing
    assert!(bincode::decode_from_slice::<ZoneRules, _>(&unsorted, config()).is_err());
    // An offset of 100 000 s (zigzag 200 000 = 0xfc + u32 LE) is out of range.
    let mut huge = vec![1, b'Z', 0xfc];
    huge.extend_from_slice(&200_000u32.to_le_bytes());
    huge.push(0);
    assert!(bincode::decode_from_slice::<ZoneRules, _>(&huge, config()).is_err());
}
