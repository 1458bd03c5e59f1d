//! Authorization (issue 10): who may trim the outbox and change the schedule book. Every denied
//! request is a typed error and changes nothing (compared through the encoded state).

use ccron::outbox::{OccurrenceId, Outbox, OutboxError, OutboxLimits, OutboxRecord};
use ccron::{Policy, Principal};

const CONSUMER: u64 = 7;

fn outbox_with(n: u64) -> Outbox {
    let mut o = Outbox::new(OutboxLimits::default());
    for i in 0..n {
        o.append(OutboxRecord::new(
            OccurrenceId::new(1, 1, i),
            "mail",
            vec![1; 3],
        ))
        .unwrap();
    }
    o
}

#[test]
fn outbox_progress_only_from_the_consumer_and_never_past_the_head() {
    let policy = Policy::default().with_outbox_consumer(ccron::ClientId::from_index(CONSUMER));
    let mut o = outbox_with(5);
    let before = o.encode().unwrap();
    // A stranger, an admin that is not the consumer, and the consumer past the head: rejected,
    // nothing trimmed.
    let stranger = Principal::Client(ccron::ClientId([1; 32]));
    assert_eq!(
        o.accept_progress(&policy, &stranger, 3),
        Err(OutboxError::Unauthorized { by: stranger })
    );
    let admin_policy = policy.clone().with_admin(ccron::ClientId([1; 32]));
    assert_eq!(
        o.accept_progress(&admin_policy, &stranger, 3),
        Err(OutboxError::Unauthorized { by: stranger })
    );
    let consumer = Principal::Client(ccron::ClientId::from_index(CONSUMER));
    for upto in [6, 1_000, u64::MAX] {
        assert_eq!(
            o.accept_progress(&policy, &consumer, upto),
            Err(OutboxError::ProgressAboveHead { upto, head: 5 })
        );
    }
    // Without a configured consumer no client may report.
    assert_eq!(
        o.accept_progress(&Policy::default(), &consumer, 1),
        Err(OutboxError::Unauthorized { by: consumer })
    );
    assert_eq!(o.encode().unwrap(), before);
    assert_eq!((o.first_index(), o.len()), (1, 5));

    // The consumer within the head trims; repeating or going back trims nothing.
    assert_eq!(o.accept_progress(&policy, &consumer, 3), Ok(3));
    assert_eq!((o.first_index(), o.len()), (4, 2));
    assert_eq!(o.accept_progress(&policy, &consumer, 2), Ok(0));
    assert_eq!(o.accept_progress(&policy, &consumer, 5), Ok(2));
    assert_eq!((o.first_index(), o.len()), (6, 0));
    // The host (set-up, tests) is always allowed, still bounded by the head.
    let mut h = outbox_with(2);
    assert_eq!(
        h.accept_progress(&Policy::default(), &Principal::Host, 1),
        Ok(1)
    );
    assert_eq!(
        h.accept_progress(&Policy::default(), &Principal::Host, 3),
        Err(OutboxError::ProgressAboveHead { upto: 3, head: 2 })
    );
}

mod book {
    use ccron::cron::ZoneRules;
    use ccron::outbox::{Outbox, OutboxLimits};
    use ccron::schedule::{
        Action, Handlers, Limits, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, Target,
        Timing,
    };
    use ccron::{MemPages, PageRange, Policy, Principal, Tick};

    const OWNER: Principal = Principal::Client(ccron::ClientId([1; 32]));
    const STRANGER: Principal = Principal::Client(ccron::ClientId([2; 32]));
    const ADMIN: Principal = Principal::Client(ccron::ClientId([9; 32]));

    /// Handler `tamper` cancels the schedule keyed by its payload (as its schedule's owner).
    fn handlers() -> Handlers<Vec<u64>> {
        let mut h: Handlers<Vec<u64>> = Handlers::new();
        h.register("run", |ctx| ctx.state.push(ctx.id));
        h.register("tamper", |ctx| {
            let key = String::from_utf8_lossy(ctx.payload).into_owned();
            ctx.request(ScheduleRequest::Cancel(Target::Key(key)));
        });
        h
    }

    fn policy() -> Policy {
        Policy::default().with_admin(ccron::ClientId([9; 32]))
    }

    fn every(key: &str) -> NewSchedule {
        NewSchedule::new(
            "run",
            Timing::Every {
                period_ms: 1_000,
                start_ms: Some(0),
            },
        )
        .with_key(key)
    }

    /// A book holding `OWNER`'s schedule "o" (id 1), saved.
    fn rig() -> (Scheduler, MemPages, PageRange, Handlers<Vec<u64>>) {
        let h = handlers();
        let mut book = Scheduler::new(3, Limits::default()).with_policy(policy());
        book.apply(&OWNER, ScheduleRequest::Create(every("o")), &h, 1, Some(0))
            .unwrap();
        let range = PageRange::new(0, 16).unwrap();
        let mut pages = MemPages::new(4_096, 16);
        book.save(&mut pages, range).unwrap();
        (book, pages, range, h)
    }

    /// Every kind of mutation of schedule "o" (and a zone install).
    fn mutations() -> Vec<(ScheduleRequest, Action)> {
        let other = every("o").with_priority(7);
        vec![
            (
                ScheduleRequest::Replace {
                    target: Target::Key("o".into()),
                    schedule: other.clone(),
                },
                Action::Replace,
            ),
            (
                ScheduleRequest::Replace {
                    target: Target::Id(1),
                    schedule: other.clone().with_key("p"),
                },
                Action::Replace,
            ),
            (ScheduleRequest::Upsert(other), Action::Replace),
            (
                ScheduleRequest::Pause(Target::Key("o".into())),
                Action::Pause,
            ),
            (ScheduleRequest::Resume(Target::Id(1)), Action::Resume),
            (
                ScheduleRequest::Cancel(Target::Key("o".into())),
                Action::Cancel,
            ),
            (ScheduleRequest::Cancel(Target::Id(1)), Action::Cancel),
            (
                ScheduleRequest::InstallZone(ZoneRules::fixed("Z", 3_600).unwrap()),
                Action::InstallZone,
            ),
        ]
    }

    #[test]
    fn a_stranger_can_mutate_nothing_and_changes_nothing() {
        for (req, action) in mutations() {
            let (mut book, mut pages, range, h) = rig();
            let before = book.clone();
            let image = pages.snapshot();
            assert_eq!(
                book.apply(&STRANGER, req.clone(), &h, 2, Some(10)),
                Err(ScheduleError::Unauthorized {
                    by: STRANGER,
                    action
                }),
                "{req:?}"
            );
            assert_eq!(book, before, "{req:?}");
            assert!(!book.is_dirty(), "{req:?}");
            book.save(&mut pages, range).unwrap();
            assert_eq!(pages.snapshot(), image, "{req:?}: the saved image changed");
            book.check_invariants().unwrap();
        }
    }

    #[test]
    fn the_owner_and_an_admin_may_mutate_and_zones_are_admin_only() {
        for by in [OWNER, ADMIN, Principal::Host] {
            for (req, action) in mutations() {
                let (mut book, ..) = rig();
                let result = book.apply(&by, req.clone(), &handlers(), 2, Some(10));
                if action == Action::InstallZone && by == OWNER {
                    assert_eq!(
                        result,
                        Err(ScheduleError::Unauthorized { by, action }),
                        "owning a schedule does not make a zone admin"
                    );
                } else {
                    assert!(result.is_ok(), "{by} {req:?}: {result:?}");
                }
                // A replaced schedule keeps its owner.
                if let Some(info) = book.get(1) {
                    assert_eq!(info.owner, OWNER);
                }
            }
        }
    }

    #[test]
    fn owners_are_recorded_persisted_and_creation_can_be_closed() {
        let (mut book, mut pages, range, h) = rig();
        book.apply(
            &STRANGER,
            ScheduleRequest::Create(every("s")),
            &h,
            2,
            Some(0),
        )
        .unwrap();
        // An upsert of a free key creates, owned by the requester; of a held key, needs its owner.
        book.apply(
            &STRANGER,
            ScheduleRequest::Upsert(every("u")),
            &h,
            3,
            Some(0),
        )
        .unwrap();
        assert_eq!(book.get(book.id_of("u").unwrap()).unwrap().owner, STRANGER);
        assert!(matches!(
            book.apply(&OWNER, ScheduleRequest::Upsert(every("u")), &h, 4, Some(0)),
            Err(ScheduleError::Unauthorized { .. })
        ));
        book.save(&mut pages, range).unwrap();
        let loaded = Scheduler::load(3, Limits::default(), &pages, range)
            .unwrap()
            .with_policy(policy());
        assert_eq!(loaded, book);
        assert_eq!(loaded.get(1).unwrap().owner, OWNER);
        assert_eq!(loaded.get(2).unwrap().owner, STRANGER);

        let mut closed = Scheduler::new(3, Limits::default())
            .with_policy(policy().with_anyone_may_create(false));
        assert_eq!(
            closed.apply(&OWNER, ScheduleRequest::Create(every("x")), &h, 1, Some(0)),
            Err(ScheduleError::Unauthorized {
                by: OWNER,
                action: Action::Create
            })
        );
        assert_eq!(
            closed.apply(&OWNER, ScheduleRequest::Upsert(every("x")), &h, 1, Some(0)),
            Err(ScheduleError::Unauthorized {
                by: OWNER,
                action: Action::Create
            })
        );
        assert!(closed.is_empty());
        closed
            .apply(&ADMIN, ScheduleRequest::Create(every("x")), &h, 1, Some(0))
            .unwrap();
    }

    #[test]
    fn a_handler_acts_as_its_schedules_owner() {
        let (mut book, _, _, mut h) = rig();
        // The stranger's schedule tries to cancel the owner's "o" and its own "mine".
        let tamper = |key: &str| {
            NewSchedule::new("tamper", Timing::AfterMs(0)).with_payload(key.as_bytes().to_vec())
        };
        book.apply(
            &STRANGER,
            ScheduleRequest::Create(every("mine")),
            &h,
            2,
            Some(0),
        )
        .unwrap();
        book.apply(
            &STRANGER,
            ScheduleRequest::Create(tamper("o")),
            &h,
            3,
            Some(0),
        )
        .unwrap();
        book.apply(
            &STRANGER,
            ScheduleRequest::Create(tamper("mine")),
            &h,
            4,
            Some(0),
        )
        .unwrap();
        let mut state = Vec::new();
        let mut outbox = Outbox::new(OutboxLimits::default());
        let report = book.on_tick(&Tick::new(3, 5, Some(0)), &mut state, &mut h, &mut outbox);
        assert_eq!(
            report.errors,
            vec![ScheduleError::Unauthorized {
                by: STRANGER,
                action: Action::Cancel
            }]
        );
        assert!(book.id_of("o").is_some(), "the owner's schedule survives");
        assert!(
            book.id_of("mine").is_none(),
            "its own schedule it may cancel"
        );
        book.check_invariants().unwrap();
    }
}
