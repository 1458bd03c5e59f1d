//! Tests of the older layouts' loading and migration (moved out of `legacy.rs`, unchanged).

use super::*;
use crate::pages::MemPages;
use crate::schedule::{Limits, Scheduler};
use proptest::prelude::*;

/// A random valid definition of layouts 4 and 5.
fn def() -> impl Strategy<Value = NewSchedule> {
    let timing = prop_oneof![
        (0i64..1_000_000).prop_map(|t| Timing::At(Due::Time(t))),
        (0u64..1_000).prop_map(|s| Timing::At(Due::Seq(s))),
        (1i64..100_000, 0i64..1_000).prop_map(|(p, s)| Timing::Every {
            period_ms: p,
            start_ms: Some(s)
        }),
    ];
    let misfire = prop_oneof![
        Just(Misfire::FireOnce),
        Just(Misfire::Skip),
        (1u32..5).prop_map(|cap| Misfire::FireEach { cap }),
    ];
    (
        prop::option::of("[a-z]{1,8}"),
        prop_oneof![Just("expire"), Just("report")],
        timing,
        misfire,
        any::<u8>(),
        0u32..1_000,
        prop::collection::vec(any::<u8>(), 0..40),
        prop::option::of("[a-z]{1,6}"),
    )
        .prop_map(
            |(key, handler, timing, misfire, priority, jitter_ms, payload, topic)| NewSchedule {
                key,
                handler: handler.into(),
                timing,
                misfire,
                priority,
                jitter_ms,
                payload,
                topic: topic.clone(),
                kind: topic,
            },
        )
}

fn old_record() -> impl Strategy<Value = RecordV4> {
    (def(), any::<bool>(), 0u64..100, 1u64..9, 0u64..3).prop_map(
        |(def, paused, runs, version, owner)| {
            let recurring = matches!(def.timing, Timing::Every { .. });
            let next = match &def.timing {
                Timing::At(d) => Some(*d),
                Timing::Every { start_ms, .. } => start_ms.map(Due::Time),
                _ => None,
            };
            RecordV4 {
                def,
                paused,
                next,
                runs,
                owed: (recurring && runs % 3 == 0).then_some((5, 9)),
                owner: if owner == 0 {
                    PrincipalV1::Host
                } else {
                    PrincipalV1::Client(owner)
                },
                version,
            }
        },
    )
}

/// Writes `records` (ids 1..) as a book of `version` (3: meta and record pages of layout
/// 3, no journal; 5: a layout 5 commit page and record pages, an empty log), packing the
/// record pages in id order.
fn write_old(records: &[RecordV4], version: u8) -> (MemPages, PageRange) {
    let range = PageRange::new(0, 96).unwrap();
    let layout = Layout::of(range).unwrap();
    let mut pages = MemPages::new(4_096, 96);
    let zones: Vec<ZoneRules> = Vec::new();
    let zones_crc = crc32fast::hash(&codec::to_blob(&zones).unwrap());
    codec::save(&mut pages, layout.zones, BlobKind::ScheduleBook, &zones).unwrap();
    let room = crate::schedule::store::record_room(4_096);
    let mut page = 0u32;
    let mut on_page: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut used = 0;
    let flush = |page: u32, on: &mut Vec<(u64, Vec<u8>)>, pages: &mut MemPages| {
        if on.is_empty() {
            return;
        }
        // (page, vec len, then each (id, record) encoding).
        let mut blob = codec::to_blob(&(page, on.len() as u64)).unwrap();
        for (_, bytes) in on.iter() {
            blob.extend_from_slice(bytes);
        }
        let part = layout.record_page(page).unwrap();
        codec::save_blob(pages, part, BlobKind::BookRecords, &blob).unwrap();
        on.clear();
    };
    for (i, r) in records.iter().enumerate() {
        let id = i as u64 + 1;
        let bytes = if version == 3 {
            let v3 = RecordV3 {
                def: NewScheduleV2 {
                    key: r.def.key.clone(),
                    handler: r.def.handler.to_string(),
                    timing: r.def.timing.clone(),
                    misfire: r.def.misfire,
                    priority: r.def.priority,
                    jitter_ms: r.def.jitter_ms,
                    payload: r.def.payload.clone(),
                },
                paused: r.paused,
                next: r.next,
                runs: r.runs,
                owed: r.owed,
                owner: r.owner,
            };
            codec::to_blob(&(id, v3)).unwrap()
        } else {
            codec::to_blob(&(id, r)).unwrap()
        };
        if used + bytes.len() > room {
            flush(page, &mut on_page, &mut pages);
            page += 1;
            used = 0;
        }
        used += bytes.len();
        on_page.push((id, bytes));
    }
    flush(page, &mut on_page, &mut pages);
    let next_id = records.len() as u64 + 1;
    if version == 3 {
        let meta = Meta {
            version: 3,
            component: 7,
            next_id,
            page_bytes: 4_096,
            records: records.len() as u64,
            zones: 0,
            zones_crc,
        };
        codec::save(&mut pages, layout.meta, BlobKind::ScheduleBook, &meta).unwrap();
    } else {
        let commit = CommitV5 {
            version: 5,
            component: 7,
            next_id,
            page_bytes: 4_096,
            records: records.len() as u64,
            zones: 0,
            zones_crc,
            log_pages: 0,
            log_segments: 0,
        };
        codec::save(&mut pages, layout.meta, BlobKind::ScheduleBook, &commit).unwrap();
    }
    (pages, range)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Round trip: a book written in layout 3 or 5 loads as its records converted, the
    /// migration's save reloads as the same book (now layout 7), and a second save writes
    /// nothing.
    #[test]
    fn older_books_round_trip_through_the_migration(
        records in prop::collection::vec(old_record(), 0..60),
        v5 in any::<bool>(),
    ) {
        // Keys are unique in a book.
        let mut seen = BTreeSet::new();
        let records: Vec<RecordV4> = records
            .into_iter()
            .map(|mut r| {
                if let Some(k) = &r.def.key && !seen.insert(k.clone()) {
                    r.def.key = None;
                }
                r
            })
            .collect();
        let version = if v5 { 5 } else { 3 };
        let (mut pages, range) = write_old(&records, version);
        let mut book = Scheduler::load(7, Limits::default(), &pages, range).unwrap();
        prop_assert!(book.migrating());
        prop_assert_eq!(book.len(), records.len());
        for (i, r) in records.iter().enumerate() {
            let info = book.get(i as u64 + 1).unwrap();
            let mut want = r.clone();
            if version == 3 {
                want.def.topic = None;
                want.def.kind = None;
                want.version = 1;
            }
            prop_assert_eq!(&info.schedule, &want.def);
            prop_assert_eq!((info.paused, info.next, info.runs, info.owed, info.owner, info.version),
                (want.paused, want.next, want.runs, want.owed, want.owner.into(), want.version));
        }
        book.save(&mut pages, range).unwrap();
        prop_assert!(!book.is_dirty());
        let again = Scheduler::load(7, Limits::default(), &pages, range).unwrap();
        prop_assert!(!again.migrating());
        prop_assert!(again == book);
        let before = pages.snapshot();
        book.save(&mut pages, range).unwrap();
        prop_assert!(pages.snapshot() == before);
    }
}
