//! The replicated outbox: dense indices, bounds, trimming and its canonical encoding.

use ccron::outbox::{CodecError, OccurrenceId, Outbox, OutboxError, OutboxLimits, OutboxRecord};
use proptest::prelude::*;

fn rec(n: u64, payload: &[u8]) -> OutboxRecord {
    OutboxRecord::new(
        OccurrenceId::new(3, n % 4, n),
        format!("h{}", n % 3),
        payload,
    )
}

fn small() -> OutboxLimits {
    OutboxLimits {
        max_records: 3,
        max_record_bytes: 10,
        max_total_bytes: 20,
    }
}

#[test]
fn indices_are_dense_from_one_and_survive_trimming() {
    let mut ob = Outbox::new(OutboxLimits::default());
    assert_eq!(ob.head(), 0);
    assert_eq!(ob.get(0), None);
    assert_eq!(ob.get(1), None);
    for n in 1..=5 {
        assert_eq!(ob.append(rec(n, b"x")), Ok(n));
    }
    assert_eq!(ob.head(), 5);
    assert_eq!(ob.get(3), Some(&rec(3, b"x")));
    assert_eq!(ob.trim_below(4), 3);
    assert_eq!((ob.first_index(), ob.len(), ob.head()), (4, 2, 5));
    assert_eq!(ob.get(3), None);
    assert_eq!(ob.get(4), Some(&rec(4, b"x")));
    // Trimming never reuses indices, even past the head.
    assert_eq!(ob.trim_below(100), 2);
    assert!(ob.is_empty());
    assert_eq!(ob.append(rec(6, b"x")), Ok(6));
    assert_eq!(ob.trim_below(2), 0);
    let listed: Vec<u64> = ob.iter().map(|(i, _)| i).collect();
    assert_eq!(listed, vec![6]);
}

#[test]
fn bounds_give_typed_errors_and_leave_the_outbox_unchanged() {
    let mut ob = Outbox::new(small());
    assert_eq!(
        ob.append(rec(1, &[0; 9])),
        Err(OutboxError::RecordTooLarge {
            size_bytes: 11,
            max_record_bytes: 10
        })
    );
    ob.append(rec(1, &[0; 8])).unwrap(); // 10 bytes
    ob.append(rec(2, &[0; 8])).unwrap(); // 20 bytes
    let before = ob.clone();
    assert_eq!(
        ob.append(rec(3, b"")),
        Err(OutboxError::TotalTooLarge {
            total_bytes: 22,
            max_total_bytes: 20
        })
    );
    assert_eq!(ob, before);
    ob.trim_below(2);
    assert_eq!(ob.total_bytes(), 10);
    ob.append(rec(3, b"")).unwrap();
    ob.append(rec(4, b"")).unwrap();
    assert_eq!(
        ob.append(rec(5, b"")),
        Err(OutboxError::Full { max_records: 3 })
    );
    assert_eq!(ob.head(), 4);
}

#[test]
fn decode_rejects_bad_bytes_without_panicking() {
    let mut ob = Outbox::new(small());
    ob.append(rec(1, b"abc")).unwrap();
    ob.append(rec(2, b"defgh")).unwrap();
    let bytes = ob.encode().unwrap();
    assert_eq!(Outbox::decode(&bytes, small()), Ok(ob.clone()));

    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(
        Outbox::decode(&trailing, small()),
        Err(OutboxError::Codec(CodecError::Trailing { trailing: 1 }))
    );
    for cut in 0..bytes.len() {
        assert!(
            Outbox::decode(&bytes[..cut], small()).is_err(),
            "cut at {cut}"
        );
    }
    let mut version = bytes.clone();
    version[0] = 9;
    assert!(matches!(
        Outbox::decode(&version, small()),
        Err(OutboxError::Codec(CodecError::Version { found: 9, .. }))
    ));
    // Limits are configuration: bytes valid under one limit are rejected under a tighter one.
    let tight = OutboxLimits {
        max_records: 1,
        ..small()
    };
    assert!(matches!(
        Outbox::decode(&bytes, tight),
        Err(OutboxError::Invalid(_))
    ));
    // A length prefix claiming a huge vector must fail on the limit, not try to allocate it.
    let mut huge = vec![1u8];
    huge.extend_from_slice(&1u64.to_be_bytes());
    huge.extend_from_slice(&u64::MAX.to_be_bytes());
    assert!(Outbox::decode(&huge, small()).is_err());
    let mut zero = bytes.clone();
    zero[1..9].copy_from_slice(&0u64.to_be_bytes());
    assert!(matches!(
        Outbox::decode(&zero, small()),
        Err(OutboxError::Invalid(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Replicas applying the same appends and trims hold byte-identical encodings, and decoding
    /// gives back the same outbox (indices included).
    #[test]
    fn encoding_is_canonical_and_round_trips(
        ops in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 0..40), 0u64..8), 0..60)
    ) {
        let limits = OutboxLimits { max_records: 16, max_record_bytes: 42, max_total_bytes: 300 };
        let mut a = Outbox::new(limits);
        let mut b = Outbox::new(limits);
        for (n, (trim, payload, k)) in ops.into_iter().enumerate() {
            if trim {
                let upto = a.first_index() + k;
                prop_assert_eq!(a.trim_below(upto), b.trim_below(upto));
            } else {
                let r = rec(n as u64, &payload);
                prop_assert_eq!(a.append(r.clone()), b.append(r));
            }
            prop_assert!(a.len() <= limits.max_records);
            prop_assert!(a.total_bytes() <= limits.max_total_bytes);
        }
        let bytes = a.encode().unwrap();
        prop_assert_eq!(&bytes, &b.encode().unwrap());
        let back = Outbox::decode(&bytes, limits).unwrap();
        prop_assert_eq!(back.first_index(), a.first_index());
        prop_assert_eq!(back.total_bytes(), a.total_bytes());
        prop_assert_eq!(back, a);
    }

    /// Arbitrary bytes never panic the decoder.
    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Outbox::decode(&bytes, small());
    }
}
