//! Per-owner quotas (issue 24, item 5): one client at its quota is refused with a typed error,
//! counted, and changes nothing; every other client's admission is exactly what it would be
//! without it; cancelling frees the quota; admins and the host have none; the usage survives a
//! save and load; the default policy has a quota.

use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{MemPages, PageAllocator, Policy, Principal, Quota, QuotaKind};

const NOW: i64 = 1_700_000_000_000;

fn handlers() -> Handlers<()> {
    let mut h: Handlers<()> = Handlers::new();
    h.register("job", |_| {});
    h
}

fn every(key: &str, payload: usize) -> ScheduleRequest {
    ScheduleRequest::Create(
        NewSchedule::new(
            "job",
            Timing::Every {
                period_ms: 60_000,
                start_ms: None,
            },
        )
        .with_key(key)
        .with_payload(vec![7; payload]),
    )
}

fn book(policy: Policy) -> Scheduler {
    Scheduler::new(1, Limits::default()).with_policy(policy)
}

/// A shared book of 40 schedules: without quotas the hostile client alone fills it.
fn small_book(policy: Policy) -> Scheduler {
    let limits = Limits {
        max_schedules: 40,
        ..Limits::default()
    };
    Scheduler::new(1, limits).with_policy(policy)
}

/// Every honest client's replies (ok id or error) to the same requests, interleaved with a
/// hostile client's flood when `hostile`.
fn honest_replies(policy: &Policy, hostile: bool) -> Vec<Result<Option<u64>, ScheduleError>> {
    let h = handlers();
    let mut b = small_book(policy.clone());
    let mut out = Vec::new();
    for round in 0..20u64 {
        if hostile {
            for k in 0..10 {
                let _ = b.apply(
                    &Principal::Client(ccron::ClientId::from_index(666)),
                    every(&format!("x{round}-{k}"), 10),
                    &h,
                    round,
                    Some(NOW),
                );
            }
        }
        for client in 1..=3u64 {
            let r = b.apply(
                &Principal::Client(ccron::ClientId::from_index(client)),
                every(&format!("c{client}-{round}"), 10),
                &h,
                round,
                Some(NOW),
            );
            // Ids differ with the hostile client's schedules in between: compare the outcome.
            out.push(r.map(|id| id.map(|_| 1)));
        }
    }
    b.check_invariants().unwrap();
    out
}

#[test]
fn a_client_at_its_quota_leaves_every_other_clients_admission_unchanged() {
    let policy = Policy::default().with_quota(Quota {
        max_schedules: 8,
        ..Quota::default()
    });
    let with = honest_replies(&policy, true);
    let without = honest_replies(&policy, false);
    assert_eq!(with, without);
    // The honest clients reach their own quota the same way in both runs.
    assert_eq!(with.iter().filter(|r| r.is_ok()).count(), 3 * 8);
}

#[test]
fn the_quota_refuses_typed_counts_and_frees_on_cancel() {
    let h = handlers();
    let policy = Policy::default()
        .with_admin(ccron::ClientId::from_index(9))
        .with_quota(Quota {
            max_schedules: 2,
            max_schedule_bytes: u64::MAX,
            ..Quota::default()
        });
    let mut b = book(policy);
    let me = Principal::Client(ccron::ClientId::from_index(1));
    b.apply(&me, every("a", 1), &h, 1, Some(NOW)).unwrap();
    b.apply(&me, every("b", 1), &h, 1, Some(NOW)).unwrap();
    let before = b.clone();
    let r = b.apply(&me, every("c", 1), &h, 1, Some(NOW));
    assert_eq!(
        r,
        Err(ScheduleError::QuotaExceeded {
            owner: me,
            kind: QuotaKind::Schedules,
            would: 3,
            limit: 2
        })
    );
    assert_eq!(b, before, "a refusal changes nothing");
    assert_eq!(b.quota_refusals(), 1);
    assert_eq!(b.owner_usage(&me).0, 2);
    // Admins and the host have no quota.
    for by in [
        Principal::Client(ccron::ClientId::from_index(9)),
        Principal::Host,
    ] {
        for k in 0..3 {
            b.apply(&by, every(&format!("{by}-{k}"), 1), &h, 1, Some(NOW))
                .unwrap();
        }
    }
    // Cancelling frees one.
    b.apply(
        &me,
        ScheduleRequest::Cancel(Target::Key("a".into())),
        &h,
        2,
        Some(NOW),
    )
    .unwrap();
    b.apply(&me, every("c", 1), &h, 2, Some(NOW)).unwrap();
    b.check_invariants().unwrap();
}

#[test]
fn the_bytes_quota_counts_replacements_and_survives_a_reload() {
    let h = handlers();
    let one = {
        let mut b = book(Policy::default().with_quota(Quota::UNLIMITED));
        b.apply(
            &Principal::Client(ccron::ClientId::from_index(1)),
            every("a", 10),
            &h,
            1,
            Some(NOW),
        )
        .unwrap();
        b.owner_usage(&Principal::Client(ccron::ClientId::from_index(1)))
            .1
    };
    let policy = Policy::default().with_quota(Quota {
        max_schedules: 100,
        max_schedule_bytes: 2 * one + 50,
        ..Quota::default()
    });
    let mut b = book(policy.clone());
    let me = Principal::Client(ccron::ClientId::from_index(1));
    b.apply(&me, every("a", 10), &h, 1, Some(NOW)).unwrap();
    b.apply(&me, every("b", 10), &h, 1, Some(NOW)).unwrap();
    assert!(matches!(
        b.apply(&me, every("c", 10), &h, 1, Some(NOW)),
        Err(ScheduleError::QuotaExceeded {
            kind: QuotaKind::ScheduleBytes,
            ..
        })
    ));
    // Growing a schedule past the quota is refused too; within it, allowed.
    let grow = |n| ScheduleRequest::Replace {
        target: Target::Key("a".into()),
        schedule: NewSchedule::new(
            "job",
            Timing::Every {
                period_ms: 60_000,
                start_ms: None,
            },
        )
        .with_key("a")
        .with_payload(vec![1; n]),
    };
    assert!(matches!(
        b.apply(&me, grow(200), &h, 2, Some(NOW)),
        Err(ScheduleError::QuotaExceeded { .. })
    ));
    b.apply(&me, grow(40), &h, 2, Some(NOW)).unwrap();
    let usage = b.owner_usage(&me);
    // Saved and loaded, the book holds the same usage (derived from the records).
    let range = PageAllocator::new(0, 64).allocate(64).unwrap();
    let mut pages = MemPages::new(4_096, 64);
    b.save(&mut pages, range).unwrap();
    let back = Scheduler::load(1, Limits::default(), &pages, range)
        .unwrap()
        .with_policy(policy);
    assert_eq!(back.owner_usage(&me), usage);
    back.check_invariants().unwrap();
}

#[test]
fn the_default_policy_has_a_per_owner_quota() {
    assert_eq!(Policy::default().quota, Quota::default());
    assert!(Quota::default().max_schedules <= 1_000);
    let h = handlers();
    let mut b = book(Policy::default());
    let me = Principal::Client(ccron::ClientId::from_index(5));
    let mut refused = None;
    for k in 0..=Quota::default().max_schedules {
        if let Err(e) = b.apply(&me, every(&format!("k{k}"), 0), &h, 1, Some(NOW)) {
            refused = Some((k, e));
            break;
        }
    }
    assert!(matches!(
        refused,
        Some((_, ScheduleError::QuotaExceeded { .. }))
    ));
}
