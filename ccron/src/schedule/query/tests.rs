//! The query module's tests: list, describe, filters, paging, formats and bounds.

use super::*;
use crate::cron::ZoneRules;
use crate::outbox::{OutboxLimits, OutboxRecord};
use crate::schedule::{Handlers, Limits, ScheduleRequest};

fn book() -> (Scheduler, Handlers<u64>) {
    let mut h: Handlers<u64> = Handlers::new();
    assert!(h.register("a", |ctx| *ctx.state += 1));
    assert!(h.register("b", |ctx| *ctx.state += 1));
    let mut b = Scheduler::new(7, Limits::default());
    let admin = Principal::Host;
    b.apply(
        &admin,
        ScheduleRequest::InstallZone(ZoneRules::fixed("Plus2", 7_200).unwrap()),
        &h,
        1,
        Some(0),
    )
    .unwrap();
    for i in 0..10u64 {
        let timing = if i % 2 == 0 {
            Timing::Every {
                period_ms: 60_000,
                start_ms: None,
            }
        } else {
            Timing::Cron {
                expression: "0 * * * *".into(),
                zone: Some("Plus2".into()),
            }
        };
        let mut s = NewSchedule::new(if i < 6 { "a" } else { "b" }, timing)
            .with_key(format!("k{i}"))
            .with_payload(vec![1u8; 100]);
        if i % 3 == 0 {
            s = s.with_topic("billing");
        }
        let by = Principal::Client(crate::authz::ClientId::from_index(i % 2));
        b.apply(&by, ScheduleRequest::Create(s), &h, 2, Some(1_000))
            .unwrap();
    }
    b.apply(
        &Principal::Client(crate::authz::ClientId::from_index(1)),
        ScheduleRequest::Pause(Target::Key("k3".into())),
        &h,
        3,
        Some(2_000),
    )
    .unwrap();
    (b, h)
}

#[test]
fn lists_filter_and_page() {
    let (b, _) = book();
    let all = list(&b, &ScheduleFilter::default());
    assert_eq!(
        (all.matched, all.items.len(), all.next_after),
        (10, 10, None)
    );
    assert_eq!(all.component, 7);
    let ids: Vec<u64> = all.items.iter().map(|s| s.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let f = |f: ScheduleFilter| list(&b, &f).items.len();
    assert_eq!(
        f(ScheduleFilter {
            handler: Some("b".into()),
            ..Default::default()
        }),
        4
    );
    assert_eq!(
        f(ScheduleFilter {
            owner: Some(Principal::Client(crate::authz::ClientId::from_index(1))),
            ..Default::default()
        }),
        5
    );
    assert_eq!(
        f(ScheduleFilter {
            topic: Some("billing".into()),
            ..Default::default()
        }),
        4
    );
    assert_eq!(
        f(ScheduleFilter {
            paused: Some(true),
            ..Default::default()
        }),
        1
    );
    assert_eq!(
        f(ScheduleFilter {
            parked: Some(true),
            ..Default::default()
        }),
        0
    );
    assert_eq!(
        f(ScheduleFilter {
            component: Some(8),
            ..Default::default()
        }),
        0
    );
    // Paging: 3 at a time covers all 10 exactly once.
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = list(
            &b,
            &ScheduleFilter {
                after,
                limit: 3,
                ..Default::default()
            },
        );
        assert!(page.items.len() <= 3);
        seen.extend(page.items.iter().map(|s| s.id));
        match page.next_after {
            Some(a) => after = a,
            None => break,
        }
    }
    assert_eq!(seen, ids);
}

#[test]
fn describes_with_upcoming_instants_in_the_zone() {
    let (b, _) = book();
    let d = describe(&b, &Target::Key("k1".into()), 5).unwrap();
    assert_eq!(d.summary.key.as_deref(), Some("k1"));
    assert_eq!(d.upcoming.len(), 5);
    assert!(d.upcoming.iter().all(|u| u.utc_offset_s == 7_200));
    let times: Vec<i64> = d.upcoming.iter().filter_map(|u| u.due.time_ms()).collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] == 3_600_000));
    assert_eq!(d.schedule.payload.len(), 100);
    let p = describe(&b, &Target::Key("k0".into()), 1_000).unwrap();
    assert_eq!(p.upcoming.len(), MAX_PREVIEW);
    assert!(p.upcoming.iter().all(|u| u.utc_offset_s == 0));
    assert!(describe(&b, &Target::Key("nope".into()), 3).is_none());
    assert!(describe(&b, &Target::Id(999), 3).is_none());
    let s = book_state(&b);
    assert_eq!(
        (s.schedules, s.paused, s.parked, s.component),
        (10, 1, 0, 7)
    );
}

#[test]
fn answers_round_trip_and_bad_bytes_are_typed_errors() {
    let (b, _) = book();
    let mut ob = Outbox::new(OutboxLimits::default());
    ob.append(OutboxRecord::new(
        crate::outbox::OccurrenceId::new(7, 1, 0),
        "a",
        vec![1],
    ))
    .unwrap();
    let bodies = [
        QueryBody::List(list(&b, &ScheduleFilter::default())),
        QueryBody::Describe(describe(&b, &Target::Id(2), 4).map(Box::new)),
        QueryBody::Describe(None),
        QueryBody::Book(book_state(&b)),
        QueryBody::Outbox(Some(outbox_state(&ob))),
    ];
    for body in bodies {
        let a = QueryAnswer {
            replica: 3,
            at_height: 42,
            body,
        };
        let bytes = a.encode().unwrap();
        assert_eq!(QueryAnswer::decode(&bytes).unwrap(), a);
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            assert!(QueryAnswer::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(QueryAnswer::decode(&long), Err(QueryError::Trailing(1)));
        let mut other = bytes.clone();
        other[0] = QUERY_FORMAT_VERSION + 1;
        assert!(matches!(
            QueryAnswer::decode(&other),
            Err(QueryError::Version { found, .. }) if found == QUERY_FORMAT_VERSION + 1
        ));
    }
    assert_eq!(
        outbox_state(&ob),
        OutboxState {
            first_index: 1,
            head: 1,
            held: 1,
            held_bytes: ob.held_bytes() as u64,
            with_result: 0,
            refused_results: 0
        }
    );
    // An over-bound list is refused on decode.
    let mut l = list(&b, &ScheduleFilter::default());
    let one = l.items[0].clone();
    l.items = vec![one; MAX_LIST_LIMIT + 1];
    let a = QueryAnswer {
        replica: 0,
        at_height: 1,
        body: QueryBody::List(l),
    };
    assert!(matches!(
        QueryAnswer::decode(&a.encode().unwrap()),
        Err(QueryError::OverBound { .. })
    ));
    assert!(matches!(
        QueryAnswer::decode(&vec![0u8; MAX_ANSWER_BYTES + 1]),
        Err(QueryError::TooLarge { .. })
    ));
}

/// A book whose schedule "k1" (cron, id 2) names a calendar, buffers one overlapping
/// occurrence and has a backfill pending under `Skip`.
fn book_with_policies() -> Scheduler {
    let (mut b, h) = book();
    let host = Principal::Host;
    let cal = crate::cron::ExclusionCalendar::new(
        "weekends",
        vec![crate::cron::Exclusion::Weekdays { mask: 0b100_0001 }],
    )
    .unwrap();
    let mut apply = |req| b.apply(&host, req, &h, 4, Some(3_000)).unwrap();
    apply(ScheduleRequest::InstallCalendar(cal));
    apply(ScheduleRequest::SetCalendar {
        target: Target::Key("k1".into()),
        calendar: Some("weekends".into()),
    });
    apply(ScheduleRequest::SetOverlap {
        target: Target::Key("k1".into()),
        overlap: Overlap::BufferOne,
    });
    apply(ScheduleRequest::BackfillWith {
        target: Target::Key("k1".into()),
        from_ms: 0,
        to_ms: 2_000,
        overlap: Overlap::Skip,
    });
    b
}

#[test]
fn descriptions_carry_the_calendar_and_overlap_policies() {
    let b = book_with_policies();
    let d = describe(&b, &Target::Key("k1".into()), 3).unwrap();
    assert_eq!(
        d.policies,
        Some(SchedulePolicies {
            calendar: Some("weekends".into()),
            overlap: Overlap::BufferOne,
            awaiting: None,
            buffered: 0,
            backfill_overlap: Some(Overlap::Skip),
            backfill_awaiting: None,
        })
    );
    assert!(d.manual.backfill.is_some());
    // No backfill pending, no calendar: the defaults.
    let p = describe(&b, &Target::Key("k0".into()), 3).unwrap();
    assert_eq!(
        p.policies,
        Some(SchedulePolicies {
            calendar: None,
            overlap: Overlap::AllowAll,
            awaiting: None,
            buffered: 0,
            backfill_overlap: None,
            backfill_awaiting: None,
        })
    );
    // Round trip in format 4, the policies included.
    let a = QueryAnswer {
        replica: 1,
        at_height: 9,
        body: QueryBody::Describe(Some(Box::new(d))),
    };
    let bytes = a.encode().unwrap();
    assert_eq!(bytes[0], QUERY_FORMAT_VERSION);
    assert_eq!(QueryAnswer::decode(&bytes).unwrap(), a);
}

/// A format-3 answer (a node built before format 4) still decodes: the same answer, a
/// description's policies `None`, a list's entries `None`; other bodies unchanged byte
/// for byte.
#[test]
fn format3_answers_decode_without_policies() {
    let b = book_with_policies();
    let d = describe(&b, &Target::Key("k1".into()), 3).unwrap();
    let bodies = [
        QueryBody::Describe(Some(Box::new(d))),
        QueryBody::Describe(None),
        QueryBody::List(list(&b, &ScheduleFilter::default())),
        QueryBody::Book(book_state(&b)),
        QueryBody::Outbox(None),
    ];
    for body in bodies {
        let a = QueryAnswer {
            replica: 2,
            at_height: 5,
            body,
        };
        let old = a.encode_format3().unwrap();
        assert_eq!(old[0], OLDEST_READ_FORMAT);
        let back = QueryAnswer::decode(&old).unwrap();
        let want = QueryAnswer {
            body: a
                .body
                .clone()
                .without_policies()
                .without_entries()
                .without_refusals(),
            ..a.clone()
        };
        assert_eq!(back, want);
        assert_eq!(
            back.body.lacks_policies(),
            matches!(a.body, QueryBody::Describe(Some(_)))
        );
        assert_eq!(
            back.body.lacks_entries(),
            matches!(a.body, QueryBody::List(_))
        );
        // Only a description's, a list's and a book state's bytes differ between the formats.
        let new = a.encode().unwrap();
        assert_eq!(
            new[1..] == old[1..],
            !matches!(
                a.body,
                QueryBody::Describe(Some(_)) | QueryBody::List(_) | QueryBody::Book(_)
            )
        );
        for cut in [0, 1, old.len() / 2, old.len() - 1] {
            assert!(QueryAnswer::decode(&old[..cut]).is_err(), "cut {cut}");
        }
        let mut long = old.clone();
        long.push(0);
        assert_eq!(QueryAnswer::decode(&long), Err(QueryError::Trailing(1)));
    }
    for v in [0u8, 1, 2, 8, 255] {
        let mut other = QueryAnswer {
            replica: 0,
            at_height: 1,
            body: QueryBody::Outbox(None),
        }
        .encode()
        .unwrap();
        other[0] = v;
        assert_eq!(
            QueryAnswer::decode(&other),
            Err(QueryError::Version {
                found: v,
                expected: QUERY_FORMAT_VERSION
            })
        );
    }
}

/// Answers of both formats from honest nodes at one height become identical bodies; a
/// set of format-4 answers is left as it is.
#[test]
fn mixed_formats_meet_at_the_common_one() {
    let b = book_with_policies();
    let d = describe(&b, &Target::Key("k1".into()), 3).unwrap();
    let new = QueryAnswer {
        replica: 0,
        at_height: 7,
        body: QueryBody::Describe(Some(Box::new(d))),
    };
    let old = QueryAnswer::decode(&new.encode_format3().unwrap()).unwrap();
    let mut only_new = [new.clone(), new.clone()];
    assert!(!to_common_format(only_new.iter_mut()));
    assert!(only_new.iter().all(|a| *a == new));
    let mut mixed = [new.clone(), old.clone(), new.clone()];
    assert!(to_common_format(mixed.iter_mut()));
    assert!(mixed.iter().all(|a| *a == old), "{mixed:?}");
    assert_eq!(mixed[0].body.encode().unwrap(), old.body.encode().unwrap());
}

/// Table entries: components 7 (the book's) and 9, three and two entries.
fn entries() -> TableEntries {
    use crate::pages::PageRange;
    use crate::{CronEntry, CronTable, CronTableRegistry, Periodic};
    let mut r: CronTableRegistry<()> = CronTableRegistry::new();
    for (c, first, n) in [(7u32, 0u32, 3u32), (9, 8, 2)] {
        let mut t = CronTable::with_persistence(c, PageRange::new(first, 8).unwrap(), 8);
        for p in 0..n {
            let every = Periodic::every_ms(1_000 * i64::from(p + 1))
                .unwrap()
                .starting_at(0);
            t.add(CronEntry::periodic(p * 10, every, |_| {})).unwrap();
        }
        r.register(t).unwrap();
    }
    let fires = std::collections::BTreeMap::from([((9, 10), 3)]);
    table_entries(&r, &fires, None)
}

#[test]
fn lists_carry_the_table_entries_after_the_schedules() {
    let (b, _) = book();
    let e = entries();
    let l = |f: ScheduleFilter| list_all(Some(&b), Some(&e), &f);
    let counts = |l: &ScheduleList| {
        let p = l.entries.as_ref().unwrap();
        (l.items.len(), p.items.len(), p.matched)
    };
    let all = l(ScheduleFilter::default());
    assert_eq!(counts(&all), (10, 5, 5));
    let names: Vec<(u32, u32)> = all
        .entries
        .as_ref()
        .unwrap()
        .items
        .iter()
        .map(|e| (e.component, e.position))
        .collect();
    assert_eq!(names, [(7, 0), (7, 10), (7, 20), (9, 0), (9, 10)]);
    assert_eq!(all.entries.as_ref().unwrap().items[4].fired, 3);
    let f = |f: ScheduleFilter| counts(&l(f));
    // Entries have no owner, handler or topic: a filter naming one leaves them out.
    let owner = Some(Principal::Client(crate::authz::ClientId::from_index(1)));
    assert_eq!(
        f(ScheduleFilter {
            owner,
            ..Default::default()
        }),
        (5, 0, 0)
    );
    assert_eq!(
        f(ScheduleFilter {
            handler: Some("a".into()),
            ..Default::default()
        }),
        (6, 0, 0)
    );
    assert_eq!(
        f(ScheduleFilter {
            topic: Some("billing".into()),
            ..Default::default()
        }),
        (4, 0, 0)
    );
    // Never paused nor parked.
    assert_eq!(
        f(ScheduleFilter {
            paused: Some(true),
            ..Default::default()
        }),
        (1, 0, 0)
    );
    assert_eq!(
        f(ScheduleFilter {
            paused: Some(false),
            ..Default::default()
        }),
        (9, 5, 5)
    );
    assert_eq!(
        f(ScheduleFilter {
            parked: Some(false),
            ..Default::default()
        }),
        (10, 5, 5)
    );
    // The component: the book's, or another table's.
    assert_eq!(
        f(ScheduleFilter {
            component: Some(7),
            ..Default::default()
        }),
        (10, 3, 3)
    );
    assert_eq!(
        f(ScheduleFilter {
            component: Some(9),
            ..Default::default()
        }),
        (0, 2, 2)
    );
    // One kind.
    assert_eq!(
        f(ScheduleFilter {
            kind: Some(ListKind::Book),
            ..Default::default()
        }),
        (10, 0, 0)
    );
    assert_eq!(
        f(ScheduleFilter {
            kind: Some(ListKind::Entry),
            ..Default::default()
        }),
        (0, 5, 5)
    );
    // A page full of schedules lists no entry but counts them; the entries' cursor.
    let p = l(ScheduleFilter {
        limit: 4,
        ..Default::default()
    });
    assert_eq!(
        (counts(&p), p.next_after, p.entries.as_ref().unwrap().next),
        ((4, 0, 5), Some(4), None)
    );
    let p = l(ScheduleFilter {
        after: 8,
        limit: 4,
        ..Default::default()
    });
    let cursor = EntryCursor {
        component: 7,
        position: 20,
    };
    assert_eq!(
        (counts(&p), p.next_after, p.entries.as_ref().unwrap().next),
        ((2, 2, 5), None, Some(cursor))
    );
    let p = l(ScheduleFilter {
        entries_from: Some(cursor),
        limit: 4,
        ..Default::default()
    });
    assert_eq!(
        (counts(&p), p.matched, p.entries.as_ref().unwrap().next),
        ((0, 3, 3), 0, None)
    );
    // A ledger without a book lists its entries (component 0); one without tables an
    // empty page.
    let nb = list_all(None, Some(&e), &ScheduleFilter::default());
    assert_eq!((nb.component, counts(&nb)), (0, (0, 5, 5)));
    assert_eq!(counts(&list(&b, &ScheduleFilter::default())), (10, 0, 0));
}

/// Follows a list's cursors from the first page to the last: every schedule id and
/// entry listed, and the pages' sizes.
fn page_through(
    b: &Scheduler,
    e: &TableEntries,
    filter: &ScheduleFilter,
) -> (Vec<u64>, Vec<(u32, u32)>, Vec<usize>) {
    let (mut ids, mut names, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    let mut f = filter.clone();
    for _ in 0..100 {
        let l = list_all(Some(b), Some(e), &f);
        let page = l.entries.unwrap();
        ids.extend(l.items.iter().map(|s| s.id));
        names.extend(page.items.iter().map(|e| (e.component, e.position)));
        sizes.push(l.items.len() + page.items.len());
        if let Some(a) = l.next_after {
            f.after = a;
        } else if let Some(c) = page.next {
            f.entries_from = Some(c);
        } else {
            break;
        }
    }
    (ids, names, sizes)
}

#[test]
fn paging_lists_every_schedule_then_every_entry_once() {
    let (b, _) = book();
    let e = entries();
    let all_names: Vec<(u32, u32)> = e
        .summaries()
        .iter()
        .map(|s| (s.component, s.position))
        .collect();
    let all_ids: Vec<u64> = b.ids().collect();
    for limit in 1..=16 {
        let (ids, names, sizes) = page_through(
            &b,
            &e,
            &ScheduleFilter {
                limit,
                ..Default::default()
            },
        );
        assert_eq!(ids, all_ids, "limit {limit}");
        assert_eq!(names, all_names, "limit {limit}");
        assert!(
            sizes.iter().all(|&n| n <= limit && n > 0),
            "limit {limit}: {sizes:?}"
        );
        let f = ScheduleFilter {
            limit,
            component: Some(9),
            ..Default::default()
        };
        assert_eq!(page_through(&b, &e, &f).1, [(9, 0), (9, 10)]);
    }
}

#[test]
fn format5_answers_carry_entries_and_format4_answers_decode_without() {
    let (b, _) = book();
    let e = entries();
    let list5 = list_all(Some(&b), Some(&e), &ScheduleFilter::default());
    let detail = describe_entry(&e, 9, 10, 3).unwrap();
    assert_eq!(detail.upcoming.len(), 3);
    let bodies = [
        QueryBody::List(list5.clone()),
        QueryBody::Entry(Some(Box::new(detail))),
        QueryBody::Entry(None),
    ];
    for body in bodies {
        let a = QueryAnswer {
            replica: 1,
            at_height: 3,
            body,
        };
        let bytes = a.encode().unwrap();
        assert_eq!(bytes[0], QUERY_FORMAT_VERSION);
        // Formats 6 and 5 said the same of lists and entries, but for the overlap counts
        // (format 7).
        for old in [a.encode_format6().unwrap(), a.encode_format5().unwrap()] {
            let back = QueryAnswer::decode(&old).unwrap();
            assert_eq!(back.body, a.body.clone().without_entry_counts());
            assert_eq!(
                back.body.lacks_entry_counts(),
                !matches!(a.body, QueryBody::Entry(None))
            );
        }
        assert_eq!(QueryAnswer::decode(&bytes).unwrap(), a);
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            assert!(QueryAnswer::decode(&bytes[..cut]).is_err(), "cut {cut}");
        }
        // Formats 4 and 3 have no entry descriptions; their lists no entries.
        match &a.body {
            QueryBody::Entry(_) => {
                assert!(a.encode_format4().is_err());
                assert!(a.encode_format3().is_err());
            }
            _ => {
                let old = a.encode_format4().unwrap();
                assert_eq!(old[0], 4);
                let back = QueryAnswer::decode(&old).unwrap();
                assert!(back.body.lacks_entries());
                assert_eq!(back.body, a.body.clone().without_entries());
            }
        }
    }
    // Over-bound entries are refused on decode.
    let mut l = list5;
    let page = l.entries.as_mut().unwrap();
    let one = page.items[0].clone();
    page.items = vec![one; MAX_LIST_LIMIT - 9];
    let a = QueryAnswer {
        replica: 0,
        at_height: 1,
        body: QueryBody::List(l),
    };
    assert!(matches!(
        QueryAnswer::decode(&a.encode().unwrap()),
        Err(QueryError::OverBound {
            what: "list items and entries",
            ..
        })
    ));
}

/// Format 7: a table entry carries its overlap counts; a format-6 answer decodes without
/// them (not reported), and a mixed set meets at what both formats say.
#[test]
fn format7_entries_carry_overlap_counts_and_format6_answers_decode_without() {
    use crate::pages::PageRange;
    use crate::{CronEntry, CronTable, CronTableRegistry, Periodic};
    let mut r: CronTableRegistry<()> = CronTableRegistry::new();
    let mut t = CronTable::with_persistence(4, PageRange::new(0, 8).unwrap(), 8);
    let every = Periodic::every_ms(1_000).unwrap();
    t.add(CronEntry::periodic(1, every, |_| {})).unwrap();
    t.add(CronEntry::new(2, |_| true, |_| {})).unwrap();
    r.register(t).unwrap();
    let counts = std::collections::BTreeMap::from([(
        (4, 1),
        EntryCounts {
            fired: 6,
            overlap: EntryOverlapCounts {
                skipped: 4,
                held: 1,
            },
        },
    )]);
    let e = table_entries(&r, &counts, None);
    let s = e.summaries();
    assert_eq!(
        (
            s[0].fired,
            s[0].overlap_counts,
            s[1].fired,
            s[1].overlap_counts
        ),
        (
            6,
            Some(EntryOverlapCounts {
                skipped: 4,
                held: 1
            }),
            0,
            Some(EntryOverlapCounts::default())
        )
    );
    let list = list_all(None, Some(&e), &ScheduleFilter::default());
    for body in [
        QueryBody::List(list),
        QueryBody::Entry(describe_entry(&e, 4, 1, 2).map(Box::new)),
    ] {
        let a = QueryAnswer {
            replica: 2,
            at_height: 8,
            body,
        };
        let bytes = a.encode().unwrap();
        assert_eq!(bytes[0], 7);
        assert_eq!(QueryAnswer::decode(&bytes).unwrap(), a);
        let old6 = a.encode_format6().unwrap();
        assert_eq!(old6[0], 6);
        let back = QueryAnswer::decode(&old6).unwrap();
        assert!(back.body.lacks_entry_counts() && !a.body.lacks_entry_counts());
        assert_eq!(back.body, a.body.clone().without_entry_counts());
        // Format 6 is format 7 without the counts, byte for byte.
        assert!(old6.len() < bytes.len());
        let mut mixed = [a.clone(), back.clone(), a.clone()];
        assert!(to_common_format(mixed.iter_mut()));
        assert!(mixed.iter().all(|x| *x == back), "{mixed:?}");
        let mut only_new = [a.clone(), a.clone()];
        assert!(!to_common_format(only_new.iter_mut()));
        assert!(only_new.iter().all(|x| *x == a));
    }
}

/// A format-5 list and a format-4 one from honest nodes at one height meet at format 4:
/// the schedules of a page are the same in both formats, whatever the page size.
#[test]
fn mixed_list_formats_meet_at_format4() {
    let (b, _) = book();
    let e = entries();
    for limit in [0, 3, 10, 12] {
        let f = ScheduleFilter {
            limit,
            ..Default::default()
        };
        let new = QueryAnswer {
            replica: 0,
            at_height: 2,
            body: QueryBody::List(list_all(Some(&b), Some(&e), &f)),
        };
        // What a format-4 node (which lists no entries) answers.
        let old4 = QueryAnswer::decode(
            &QueryAnswer {
                body: QueryBody::List(list(&b, &f)),
                ..new.clone()
            }
            .encode_format4()
            .unwrap(),
        )
        .unwrap();
        let mut mixed = [new.clone(), old4.clone(), new.clone()];
        assert!(to_common_format(mixed.iter_mut()));
        assert!(mixed.iter().all(|a| *a == old4), "limit {limit}: {mixed:?}");
        let mut only_new = [new.clone(), new.clone()];
        assert!(!to_common_format(only_new.iter_mut()));
        assert!(only_new.iter().all(|a| *a == new));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Paging through `list` with any filter and page size returns exactly the schedules
    /// a brute-force filter over every record keeps, in ascending id, each once.
    #[test]
    fn paged_lists_match_a_brute_force_filter(
        specs in proptest::collection::vec((0u8..3, 0u64..3, 0u8..3, proptest::bool::ANY), 0..40),
        f_handler in proptest::option::of(0u8..3),
        f_owner in proptest::option::of(0u64..3),
        f_topic in proptest::option::of(0u8..3),
        f_paused in proptest::option::of(proptest::bool::ANY),
        page in 1usize..7,
    ) {
        let mut h: Handlers<u64> = Handlers::new();
        for n in ["h0", "h1", "h2"] {
            assert!(h.register(n, |ctx| *ctx.state += 1));
        }
        let mut b = Scheduler::new(1, Limits::default());
        for (i, (handler, owner, topic, paused)) in specs.iter().enumerate() {
            let mut s = NewSchedule::new(format!("h{handler}"), Timing::Every {
                period_ms: 1_000 + i as i64,
                start_ms: Some(0),
            });
            if *topic > 0 {
                s = s.with_topic(format!("t{topic}"));
            }
            let by = Principal::Client(crate::authz::ClientId::from_index(*owner));
            let id = b.apply(&by, ScheduleRequest::Create(s), &h, 1, Some(0)).unwrap().unwrap();
            if *paused {
                b.apply(&by, ScheduleRequest::Pause(Target::Id(id)), &h, 1, Some(0)).unwrap();
            }
        }
        let filter = ScheduleFilter {
            handler: f_handler.map(|x| format!("h{x}")),
            owner: f_owner.map(|o| Principal::Client(crate::authz::ClientId::from_index(o))),
            topic: f_topic.map(|x| format!("t{x}")),
            paused: f_paused,
            limit: page,
            ..ScheduleFilter::default()
        };
        let want: Vec<u64> = b
            .ids()
            .filter(|&id| {
                let i = b.get(id).unwrap();
                f_handler.is_none_or(|x| i.schedule.handler == format!("h{x}"))
                    && f_owner.is_none_or(|o| i.owner == Principal::Client(crate::authz::ClientId::from_index(o)))
                    && f_topic.is_none_or(|t| i.schedule.topic == Some(format!("t{t}")))
                    && f_paused.is_none_or(|p| i.paused == p)
            })
            .collect();
        let mut got = Vec::new();
        let mut f = filter.clone();
        let first = list(&b, &f);
        proptest::prop_assert_eq!(first.matched, want.len() as u64);
        let mut pages = 0;
        loop {
            let l = list(&b, &f);
            proptest::prop_assert!(l.items.len() <= page);
            got.extend(l.items.iter().map(|s| s.id));
            pages += 1;
            match l.next_after {
                Some(a) => f.after = a,
                None => break,
            }
            proptest::prop_assert!(pages <= want.len() + 1);
        }
        proptest::prop_assert_eq!(got, want);
    }
}

/// Format 6: the book state carries the book's replicated refusals; a book state of format
/// 5, 4 or 3 decodes without them (not reported), and answers of mixed formats meet at what
/// all of them say.
#[test]
fn format6_book_states_carry_refusals_and_older_formats_decode_without() {
    let (mut b, h) = book();
    for req in [
        ScheduleRequest::Backfill {
            target: Target::Key("no-such-key".into()),
            from_ms: 0,
            to_ms: 1,
        },
        ScheduleRequest::SetCalendar {
            target: Target::Id(2),
            calendar: Some("none".into()),
        },
    ] {
        assert!(b.apply(&Principal::Host, req, &h, 9, Some(0)).is_err());
    }
    let s = book_state(&b);
    let counted = crate::schedule::RefusalCounters {
        slot_full: 0,
        calendar: 1,
        backfill: 1,
    };
    assert_eq!(s.refusals, Some(counted));
    let a = QueryAnswer {
        replica: 1,
        at_height: 4,
        body: QueryBody::Book(s),
    };
    let bytes = a.encode().unwrap();
    assert_eq!(bytes[0], QUERY_FORMAT_VERSION);
    assert_eq!(QueryAnswer::decode(&bytes).unwrap(), a);
    let olds = [
        a.encode_format5().unwrap(),
        a.encode_format4().unwrap(),
        a.encode_format3().unwrap(),
    ];
    for (old, version) in olds.iter().zip([5u8, 4, 3]) {
        assert_eq!(old[0], version);
        let back = QueryAnswer::decode(old).unwrap();
        assert!(back.body.lacks_refusals() && !a.body.lacks_refusals());
        assert_eq!(back.body, a.body.clone().without_refusals());
    }
    let old5 = QueryAnswer::decode(&olds[0]).unwrap();
    let mut mixed = [a.clone(), old5.clone(), a.clone()];
    assert!(to_common_format(mixed.iter_mut()));
    assert!(mixed.iter().all(|x| *x == old5));
    let mut only_new = [a.clone(), a.clone()];
    assert!(!to_common_format(only_new.iter_mut()));
}
