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

mod in_pages {
    //! The outbox in reserved pages (`Outbox::save` / `Outbox::load` through `ccron::codec`).

    use super::rec;
    use ccron::codec::{self, BlobKind, CodecError as PageCodecError};
    use ccron::outbox::{
        AckOutcome, Consumer, ConsumerConfig, Outbox, OutboxError, OutboxLimits, OutboxRecord,
    };
    use ccron::{MemPages, PageRange, ReservedPages};
    use proptest::prelude::*;

    fn range() -> PageRange {
        PageRange::new(2, 6).unwrap()
    }

    #[test]
    fn round_trips_across_pages_and_starts_empty() {
        let mut pages = MemPages::new(256, 10);
        let loaded = Outbox::load(&pages, range(), OutboxLimits::default()).unwrap();
        assert_eq!(loaded, Outbox::new(OutboxLimits::default()));
        let mut ob = Outbox::new(OutboxLimits::default());
        for n in 1..=9 {
            ob.append(rec(n, &[n as u8; 40])).unwrap();
        }
        ob.trim_below(3);
        ob.save(&mut pages, range()).unwrap();
        assert!(
            pages.load(range().first() + 1).unwrap().is_some(),
            "multi-page"
        );
        let loaded = Outbox::load(&pages, range(), OutboxLimits::default()).unwrap();
        assert_eq!(loaded, ob);
        assert_eq!((loaded.first_index(), loaded.head()), (3, 9));
        // A smaller outbox clears the pages it no longer needs (no stale bytes in checkpoints).
        ob.trim_below(9);
        ob.save(&mut pages, range()).unwrap();
        assert!(pages.load(range().first() + 1).unwrap().is_none());
        assert_eq!(
            Outbox::load(&pages, range(), OutboxLimits::default()).unwrap(),
            ob
        );
    }

    #[test]
    fn size_limits_and_bad_pages_are_typed_errors() {
        let mut pages = MemPages::new(256, 10);
        let mut big = Outbox::new(OutboxLimits::default());
        for n in 1..=20 {
            big.append(rec(n, &[7; 100])).unwrap();
        }
        // Too large for the range: nothing is written.
        let before = pages.clone();
        assert!(matches!(
            big.save(&mut pages, range()),
            Err(OutboxError::Pages(PageCodecError::TooLarge { .. }))
        ));
        assert_eq!(pages, before);
        // A range past the store.
        assert!(matches!(
            big.save(&mut pages, PageRange::new(8, 6).unwrap()),
            Err(OutboxError::Pages(PageCodecError::RangeOutOfStore { .. }))
        ));
        // Stored outbox over the loader's limits.
        let mut ob = Outbox::new(OutboxLimits::default());
        for n in 1..=4 {
            ob.append(rec(n, b"abc")).unwrap();
        }
        ob.save(&mut pages, range()).unwrap();
        let tight = OutboxLimits {
            max_records: 3,
            ..OutboxLimits::default()
        };
        assert!(matches!(
            Outbox::load(&pages, range(), tight),
            Err(OutboxError::Invalid(_))
        ));
        // A flipped byte, another kind of record, garbage of the right kind.
        let mut flipped = pages.clone();
        let mut page = flipped.load(range().first()).unwrap().unwrap().to_vec();
        page[40] ^= 1;
        flipped.save(range().first(), &page).unwrap();
        assert!(matches!(
            Outbox::load(&flipped, range(), OutboxLimits::default()),
            Err(OutboxError::Pages(PageCodecError::Corrupt { .. }))
        ));
        let mut other = MemPages::new(256, 10);
        codec::save_blob(&mut other, range(), BlobKind::ScheduleBook, b"book").unwrap();
        assert!(matches!(
            Outbox::load(&other, range(), OutboxLimits::default()),
            Err(OutboxError::Pages(PageCodecError::WrongKind { .. }))
        ));
        codec::save_blob(&mut other, range(), BlobKind::Outbox, b"\x04\x02garbage").unwrap();
        assert!(matches!(
            Outbox::load(&other, range(), OutboxLimits::default()),
            Err(OutboxError::Pages(PageCodecError::Decode(_)))
        ));
        codec::save_blob(&mut other, range(), BlobKind::Outbox, b"\x05\x02garbage").unwrap();
        assert!(matches!(
            Outbox::load(&other, range(), OutboxLimits::default()),
            Err(OutboxError::Pages(PageCodecError::Decode(_)))
        ));
        codec::save_blob(&mut other, range(), BlobKind::Outbox, b"\x03\x02garbage").unwrap();
        assert!(matches!(
            Outbox::load(&other, range(), OutboxLimits::default()),
            Err(OutboxError::Pages(PageCodecError::Decode(_)))
        ));
        // An unknown layout version is named as such.
        codec::save_blob(&mut other, range(), BlobKind::Outbox, b"\x01\x02garbage").unwrap();
        assert!(matches!(
            Outbox::load(&other, range(), OutboxLimits::default()),
            Err(OutboxError::Codec(ccron::outbox::CodecError::Version {
                found: 1,
                expected: 6
            }))
        ));
    }

    /// A replica restarted from its pages: a consumer reading the reloaded outbox (from the
    /// consumer's persisted progress) sees exactly the records the original replica's consumer
    /// sees, at the same indices.
    #[test]
    fn a_restarted_replicas_consumer_sees_the_same_records() {
        let mut pages = MemPages::new(512, 10);
        let mut ob = Outbox::new(OutboxLimits::default());
        for n in 1..=12 {
            ob.append(rec(n, format!("effect {n}").as_bytes())).unwrap();
        }
        ob.trim_below(2);
        ob.save(&mut pages, range()).unwrap();
        let cfg = ConsumerConfig::default();
        let mut original = Consumer::new(cfg, 1).unwrap(); // index 1 was delivered and trimmed
        let first: Vec<_> = original.poll(&ob, 0);
        assert!(!first.is_empty());
        for d in &first[..3] {
            original.on_ack(d.index, d.attempt, AckOutcome::Done, 1);
        }
        let progress = original.progress();

        // Restart: the outbox comes back from the pages, the consumer from its progress.
        let reloaded = Outbox::load(&pages, range(), OutboxLimits::default()).unwrap();
        assert_eq!(reloaded, ob);
        let mut restarted = Consumer::new(cfg, progress).unwrap();
        let again = restarted.poll(&reloaded, 1);
        let mut fresh = Consumer::new(cfg, progress).unwrap();
        let expected = fresh.poll(&ob, 1);
        assert_eq!(again, expected);
        let records: Vec<&OutboxRecord> = again.iter().map(|d| &d.record).collect();
        let originals: Vec<&OutboxRecord> =
            again.iter().map(|d| ob.get(d.index).unwrap()).collect();
        assert_eq!(records, originals);
        assert!(again.iter().all(|d| d.index > progress));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any sequence of appends and trims survives a save and load unchanged; a range too
        /// small is a typed error that leaves the pages alone.
        #[test]
        fn save_load_round_trips(
            ops in prop::collection::vec(prop_oneof![
                3 => (0u64..1_000, prop::collection::vec(any::<u8>(), 0..60)).prop_map(|(n, p)| (true, n, p)),
                1 => (0u64..40).prop_map(|n| (false, n, Vec::new())),
            ], 0..60),
            len in 1u32..8,
        ) {
            let mut ob = Outbox::new(OutboxLimits::default());
            for (append, n, p) in ops {
                if append {
                    ob.append(rec(n, &p)).unwrap();
                } else {
                    ob.trim_below(n);
                }
            }
            let mut pages = MemPages::new(512, 8);
            let r = PageRange::new(0, len).unwrap();
            let before = pages.clone();
            match ob.save(&mut pages, r) {
                Ok(()) => prop_assert_eq!(Outbox::load(&pages, r, OutboxLimits::default()).unwrap(), ob),
                Err(OutboxError::Pages(PageCodecError::TooLarge { .. })) => prop_assert_eq!(pages, before),
                Err(e) => prop_assert!(false, "{}", e),
            }
        }
    }
}
