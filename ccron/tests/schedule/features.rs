//! Issue 13, "schedule features the seeds have that the book lacks": an expected version on
//! replace/pause/resume/cancel (optimistic concurrency), topic/type carried into outbox
//! records, the combined trigger "at time T or sequence S, whichever comes first", and misfire
//! policies for cron-expression table entries.

use ccron::cron::CronSchedule;
use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    CronRule, Guarded, Handlers, Limits, Misfire, NewSchedule, NextRun, ScheduleError,
    ScheduleRequest, Scheduler, Target, Timing,
};
use ccron::{CronEntry, CronTable, Due, MemPages, PageRange, Policy, Principal, Tick};
use proptest::prelude::*;

const MIN: i64 = 60_000;

fn handlers() -> Handlers<Vec<(u64, Due)>> {
    let mut h: Handlers<Vec<(u64, Due)>> = Handlers::new();
    assert!(h.register("run", |ctx| {
        let (id, due) = (ctx.id, ctx.due);
        ctx.state.push((id, due));
    }));
    assert!(h.register("emit", |ctx| {
        ctx.emit("webhook", b"x".to_vec()).unwrap();
    }));
    h
}

fn host_apply(
    book: &mut Scheduler,
    req: ScheduleRequest,
    seq: u64,
    now: i64,
) -> Result<Option<u64>, ScheduleError> {
    let r = book.apply(&Principal::Host, req, &handlers(), seq, Some(now));
    book.check_invariants().unwrap();
    r
}

fn guarded(target: Target, version: u64, change: Guarded) -> ScheduleRequest {
    ScheduleRequest::IfVersion {
        target,
        version,
        change,
    }
}

fn every_minute() -> NewSchedule {
    NewSchedule::new(
        "run",
        Timing::Every {
            period_ms: MIN,
            start_ms: Some(MIN),
        },
    )
}

#[test]
fn versions_count_mutations_and_a_stale_expected_version_changes_nothing() {
    let mut book = Scheduler::new(1, Limits::default());
    let id = host_apply(
        &mut book,
        ScheduleRequest::Create(every_minute().with_key("k")),
        1,
        0,
    )
    .unwrap()
    .unwrap();
    assert_eq!(book.get(id).unwrap().version, 1);
    // Ticks run the schedule but are not mutations.
    let mut state = Vec::new();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut h = handlers();
    book.on_tick(&Tick::new(1, 2, Some(MIN)), &mut state, &mut h, &mut outbox);
    assert_eq!(state.len(), 1);
    assert_eq!(book.get(id).unwrap().version, 1);
    // Guarded pause at the current version: applied, version 2.
    host_apply(
        &mut book,
        guarded(Target::Key("k".into()), 1, Guarded::Pause),
        3,
        MIN,
    )
    .unwrap();
    let info = book.get(id).unwrap();
    assert!(info.paused);
    assert_eq!(info.version, 2);
    // Every stale guarded change is a typed rejection and changes nothing.
    for change in [
        Guarded::Replace(every_minute().with_key("k").with_priority(9)),
        Guarded::Pause,
        Guarded::Resume,
        Guarded::Cancel,
    ] {
        let before = book.clone();
        let r = host_apply(&mut book, guarded(Target::Id(id), 1, change), 4, MIN);
        assert_eq!(
            r,
            Err(ScheduleError::StaleVersion {
                id,
                expected: 1,
                actual: 2
            })
        );
        assert_eq!(book, before);
    }
    assert_eq!(
        book.stale_rejections(),
        4,
        "each stale rejection is counted"
    );
    // Plain requests bump it too; guarded replace and resume at the right version apply.
    host_apply(&mut book, ScheduleRequest::Resume(Target::Id(id)), 5, MIN).unwrap();
    assert_eq!(book.get(id).unwrap().version, 3);
    host_apply(
        &mut book,
        guarded(
            Target::Id(id),
            3,
            Guarded::Replace(every_minute().with_key("k").with_priority(9)),
        ),
        6,
        MIN,
    )
    .unwrap();
    let info = book.get(id).unwrap();
    assert_eq!((info.version, info.schedule.priority, info.runs), (4, 9, 1));
    // The version survives save and load.
    let range = PageRange::new(0, 16).unwrap();
    let mut pages = MemPages::new(4_096, 16);
    book.save(&mut pages, range).unwrap();
    let loaded = Scheduler::load(1, Limits::default(), &pages, range).unwrap();
    assert_eq!(loaded.get(id).unwrap().version, 4);
    assert_eq!(loaded, book);
    // A guarded cancel at the right version removes it; an unknown target is reported as such.
    host_apply(
        &mut book,
        guarded(Target::Id(id), 4, Guarded::Cancel),
        7,
        MIN,
    )
    .unwrap();
    assert!(book.get(id).is_none());
    assert_eq!(
        host_apply(
            &mut book,
            guarded(Target::Id(id), 4, Guarded::Cancel),
            8,
            MIN
        ),
        Err(ScheduleError::UnknownSchedule(Target::Id(id)))
    );
}

#[test]
fn authorization_comes_before_the_version_check() {
    let policy = Policy::default().with_anyone_may_create(true);
    let mut book = Scheduler::new(1, Limits::default()).with_policy(policy);
    let h = handlers();
    let owner = Principal::Client(ccron::ClientId::from_index(1));
    let stranger = Principal::Client(ccron::ClientId::from_index(2));
    let id = book
        .apply(
            &owner,
            ScheduleRequest::Create(every_minute()),
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    // A stranger gets Unauthorized whatever version it names (it learns nothing about it).
    for version in [0, 1, 2] {
        let r = book.apply(
            &stranger,
            guarded(Target::Id(id), version, Guarded::Cancel),
            &h,
            2,
            Some(0),
        );
        assert!(
            matches!(r, Err(ScheduleError::Unauthorized { .. })),
            "{r:?}"
        );
    }
    assert!(book.get(id).is_some());
    book.apply(
        &owner,
        guarded(Target::Id(id), 1, Guarded::Cancel),
        &h,
        3,
        Some(0),
    )
    .unwrap();
    assert!(book.is_empty());
}

#[test]
fn topic_and_type_are_validated_and_carried_into_outbox_records() {
    let mut book = Scheduler::new(3, Limits::default());
    let long = "t".repeat(65);
    for (topic, kind) in [
        ("", "ok"),
        ("has space", "ok"),
        ("ok", "tab\t"),
        ("é", "ok"),
        (long.as_str(), "ok"),
    ] {
        let def = NewSchedule::new("emit", Timing::At(Due::Time(10)))
            .with_topic(topic)
            .with_kind(kind);
        let before = book.clone();
        let r = host_apply(&mut book, ScheduleRequest::Create(def), 1, 0);
        assert!(
            matches!(r, Err(ScheduleError::Invalid(_) | ScheduleError::Limit(_))),
            "{topic:?}/{kind:?}: {r:?}"
        );
        assert_eq!(book, before);
    }
    let max = "m".repeat(64);
    let a = host_apply(
        &mut book,
        ScheduleRequest::Create(
            NewSchedule::new("emit", Timing::At(Due::Time(10)))
                .with_topic("payments.v1/expire")
                .with_kind(max.clone()),
        ),
        2,
        0,
    )
    .unwrap()
    .unwrap();
    let b = host_apply(
        &mut book,
        ScheduleRequest::Create(NewSchedule::new("emit", Timing::At(Due::Time(10)))),
        3,
        0,
    )
    .unwrap()
    .unwrap();
    let mut outbox = Outbox::new(OutboxLimits::default());
    let mut h = handlers();
    let rep = book.on_tick(
        &Tick::new(3, 4, Some(10)),
        &mut Vec::new(),
        &mut h,
        &mut outbox,
    );
    assert_eq!(rep.fired.len(), 2, "{rep:?}");
    let records: Vec<_> = outbox.iter().map(|(_, r)| r.clone()).collect();
    assert_eq!(records.len(), 2);
    let of = |id: u64| records.iter().find(|r| r.id.entry == id).unwrap();
    assert_eq!(of(a).topic.as_deref(), Some("payments.v1/expire"));
    assert_eq!(of(a).kind.as_deref(), Some(max.as_str()));
    assert_eq!(of(a).size_bytes(), "webhook".len() + 1 + 18 + 64);
    assert_eq!(
        (of(b).topic.as_deref(), of(b).kind.as_deref()),
        (None, None)
    );
}

fn at_or_seq(at_ms: i64, seq: u64) -> NewSchedule {
    NewSchedule::new("run", Timing::AtOrSeq { at_ms, seq })
}

/// Runs a tick; returns the runs.
fn tick(book: &mut Scheduler, seq: u64, now: Option<i64>) -> Vec<(u64, Due)> {
    let mut state = Vec::new();
    let mut h = handlers();
    let mut outbox = Outbox::new(OutboxLimits::default());
    book.on_tick(&Tick::new(1, seq, now), &mut state, &mut h, &mut outbox);
    book.check_invariants().unwrap();
    state
}

#[test]
fn at_time_or_sequence_fires_once_on_whichever_comes_first() {
    let mut book = Scheduler::new(1, Limits::default());
    // id 1: time first; id 2: sequence first; id 3: both on the same tick; id 4: a tick
    // without agreed time can fire the sequence trigger.
    for def in [
        at_or_seq(1_000, 100),
        at_or_seq(9_000, 5),
        at_or_seq(2_000, 7),
        at_or_seq(50_000, 8),
    ] {
        host_apply(&mut book, ScheduleRequest::Create(def), 1, 0).unwrap();
    }
    assert_eq!(tick(&mut book, 2, Some(500)), []);
    assert_eq!(tick(&mut book, 3, Some(1_000)), [(1, Due::Time(1_000))]);
    assert_eq!(tick(&mut book, 5, Some(1_500)), [(2, Due::Seq(5))]);
    assert_eq!(tick(&mut book, 7, Some(2_000)), [(3, Due::Time(2_000))]);
    assert_eq!(tick(&mut book, 8, None), [(4, Due::Seq(8))]);
    assert!(book.is_empty(), "one-shots leave after their run");
    // Nothing fires twice: the other trigger coming later finds nothing.
    assert_eq!(tick(&mut book, 200, Some(100_000)), []);
}

#[test]
fn next_run_shows_the_earlier_trigger_when_known_and_says_when_it_is_not() {
    let mut book = Scheduler::new(1, Limits::default());
    for def in [
        at_or_seq(1_000, 100),
        at_or_seq(9_000, 5),
        at_or_seq(2_000, 7),
        at_or_seq(50_000, 8),
        every_minute(),
    ] {
        host_apply(&mut book, ScheduleRequest::Create(def), 1, 0).unwrap();
    }
    // Neither trigger reached: the book cannot know which comes first, and says so.
    assert_eq!(
        book.next_run(2, 1, Some(0)),
        Some(NextRun::EarlierOf {
            at_ms: 9_000,
            due_ms: 9_000,
            seq: 5
        })
    );
    // A plain timing has one trigger; an unknown id has none.
    assert_eq!(
        book.next_run(5, 1, Some(0)),
        Some(NextRun::At(Due::Time(MIN)))
    );
    assert_eq!(book.next_run(99, 1, Some(0)), None);
    // At each tick's point, next_run names exactly what the tick then runs.
    for (id, seq, now, due) in [
        (1, 3, Some(1_000), Due::Time(1_000)),
        (2, 5, Some(1_500), Due::Seq(5)),
        (3, 7, Some(2_000), Due::Time(2_000)),
        (4, 8, None, Due::Seq(8)),
    ] {
        assert_eq!(
            book.next_run(id, seq, now),
            Some(NextRun::At(due)),
            "id {id}"
        );
        assert_eq!(tick(&mut book, seq, now), [(id, due)]);
        assert_eq!(book.next_run(id, seq, now), None, "ran once");
    }
    // The time-only preview still lists the time trigger of an AtOrSeq.
    let id = host_apply(
        &mut book,
        ScheduleRequest::Create(at_or_seq(70_000, 20)),
        9,
        0,
    )
    .unwrap()
    .unwrap();
    assert_eq!(book.preview(id, 3), [Due::Time(70_000)]);
}

#[test]
fn at_time_or_sequence_admission_ranges_pause_jitter_and_reload() {
    let mut book = Scheduler::new(1, Limits::default());
    for (timing, seq, now) in [
        (Timing::AtOrSeq { at_ms: -1, seq: 5 }, 1, Some(0)),
        (
            Timing::AtOrSeq {
                at_ms: ccron::schedule::MAX_INSTANT_MS,
                seq: 5,
            },
            1,
            Some(0),
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: -1,
                delay_seqs: 1,
            },
            1,
            Some(0),
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: 10,
                delay_seqs: u64::MAX,
            },
            2,
            Some(0),
        ),
        (
            Timing::AfterMsOrSeqs {
                delay_ms: ccron::schedule::MAX_PERIOD_MS,
                delay_seqs: 1,
            },
            2,
            Some(1),
        ),
    ] {
        let r = book.apply(
            &Principal::Host,
            ScheduleRequest::Create(NewSchedule::new("run", timing.clone())),
            &handlers(),
            seq,
            now,
        );
        assert!(
            matches!(r, Err(ScheduleError::Invalid(_))),
            "{timing:?}: {r:?}"
        );
    }
    let r = book.apply(
        &Principal::Host,
        ScheduleRequest::Create(NewSchedule::new(
            "run",
            Timing::AfterMsOrSeqs {
                delay_ms: 10,
                delay_seqs: 1,
            },
        )),
        &handlers(),
        1,
        None,
    );
    assert_eq!(r, Err(ScheduleError::NeedsTime));
    assert!(book.is_empty());
    // The relative form is stored resolved.
    let id = host_apply(
        &mut book,
        ScheduleRequest::Create(
            NewSchedule::new(
                "run",
                Timing::AfterMsOrSeqs {
                    delay_ms: 5_000,
                    delay_seqs: 10,
                },
            )
            .with_jitter_ms(1_000),
        ),
        20,
        1_000,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        book.get(id).unwrap().schedule.timing,
        Timing::AtOrSeq {
            at_ms: 6_000,
            seq: 30
        }
    );
    // Paused: neither trigger fires; the book saves and reloads equal.
    host_apply(&mut book, ScheduleRequest::Pause(Target::Id(id)), 21, 1_000).unwrap();
    assert_eq!(tick(&mut book, 40, Some(100_000)), []);
    let range = PageRange::new(0, 16).unwrap();
    let mut pages = MemPages::new(4_096, 16);
    book.save(&mut pages, range).unwrap();
    let mut book = Scheduler::load(1, Limits::default(), &pages, range).unwrap();
    book.check_invariants().unwrap();
    host_apply(
        &mut book,
        ScheduleRequest::Resume(Target::Id(id)),
        41,
        1_000,
    )
    .unwrap();
    // Jitter delays the time trigger only: at 6,000 + jitter, or at once by the sequence.
    let by_seq = tick(&mut book.clone(), 41, Some(6_000));
    assert_eq!(by_seq, [(id, Due::Seq(30))]);
    let by_time = tick(&mut book, 29, Some(7_000));
    assert_eq!(by_time, [(id, Due::Time(6_000))]);
}

/// The brute-force model of a cron table entry on "every `k` minutes": the instants in
/// `(armed, now]` a tick reaches, then the policy.
fn model_runs(misfire: Misfire, reached: &[i64], now: i64) -> Vec<i64> {
    match misfire {
        Misfire::FireOnce => reached.last().copied().into_iter().collect(),
        Misfire::Skip if reached.len() == 1 => reached.to_vec(),
        Misfire::Skip => Vec::new(),
        Misfire::FireEach { cap } => reached[reached.len().saturating_sub(cap as usize)..].to_vec(),
        Misfire::ExpireAfter { deadline_ms } => reached
            .last()
            .copied()
            .filter(|&t| now - t <= deadline_ms)
            .into_iter()
            .collect(),
    }
}

fn table_with(misfire: Misfire, k: i64) -> CronTable<Vec<i64>> {
    let schedule = CronSchedule::parse(&format!("*/{k} * * * *")).unwrap();
    let rule = CronRule::new(schedule).with_misfire(misfire).unwrap();
    let mut table = CronTable::<Vec<i64>>::with_persistence(1, PageRange::new(0, 2).unwrap(), 4);
    table
        .add(CronEntry::<Vec<i64>>::scheduled(0, rule, |ctx| {
            let due = ctx.due_ms().unwrap();
            ctx.state.push(due);
        }))
        .unwrap();
    table
}

#[test]
fn cron_rule_rejects_out_of_range_policies() {
    let rule = || CronRule::new(CronSchedule::parse("* * * * *").unwrap());
    for bad in [
        Misfire::FireEach { cap: 0 },
        Misfire::FireEach {
            cap: ccron::schedule::MAX_FIRE_EACH_CAP + 1,
        },
        Misfire::ExpireAfter { deadline_ms: -1 },
        Misfire::ExpireAfter {
            deadline_ms: i64::MAX,
        },
    ] {
        assert!(
            matches!(rule().with_misfire(bad), Err(ScheduleError::Invalid(_))),
            "{bad:?}"
        );
    }
    assert_eq!(
        rule().with_misfire(Misfire::Skip).unwrap().misfire(),
        Misfire::Skip
    );
    assert_eq!(rule().misfire(), Misfire::FireOnce);
}

fn policy() -> impl Strategy<Value = Misfire> {
    prop_oneof![
        Just(Misfire::Skip),
        Just(Misfire::FireOnce),
        (1u32..6).prop_map(|cap| Misfire::FireEach { cap }),
        (0i64..10 * MIN).prop_map(|deadline_ms| Misfire::ExpireAfter { deadline_ms }),
    ]
}

fn upsert_if(schedule: NewSchedule, version: u64) -> ScheduleRequest {
    ScheduleRequest::UpsertIfVersion { schedule, version }
}

#[test]
fn upsert_with_an_expected_version_creates_replaces_or_is_a_typed_rejection() {
    let mut book = Scheduler::new(1, Limits::default());
    let k = || every_minute().with_key("k");
    // Version 0: create only.
    let id = host_apply(&mut book, upsert_if(k(), 0), 1, 0)
        .unwrap()
        .unwrap();
    assert_eq!(book.get(id).unwrap().version, 1);
    // Version 0 again: the key is taken now; nothing changes.
    let before = book.clone();
    assert_eq!(
        host_apply(&mut book, upsert_if(k().with_priority(3), 0), 2, 0),
        Err(ScheduleError::StaleVersion {
            id,
            expected: 0,
            actual: 1
        })
    );
    assert_eq!(book, before);
    assert_eq!(book.stale_rejections(), 1);
    // The current version replaces (same id, version bumped), a stale one does not.
    assert_eq!(
        host_apply(&mut book, upsert_if(k().with_priority(4), 1), 3, 0),
        Ok(Some(id))
    );
    let info = book.get(id).unwrap();
    assert_eq!((info.version, info.schedule.priority), (2, 4));
    let before = book.clone();
    assert_eq!(
        host_apply(&mut book, upsert_if(k().with_priority(5), 1), 4, 0),
        Err(ScheduleError::StaleVersion {
            id,
            expected: 1,
            actual: 2
        })
    );
    assert_eq!(book, before);
    // A version for a key nobody holds, and a missing key, change nothing.
    assert_eq!(
        host_apply(
            &mut book,
            upsert_if(every_minute().with_key("other"), 1),
            5,
            0
        ),
        Err(ScheduleError::UnknownSchedule(Target::Key("other".into())))
    );
    assert_eq!(
        host_apply(&mut book, upsert_if(every_minute(), 0), 6, 0),
        Err(ScheduleError::MissingKey)
    );
    assert_eq!(book, before);
    // Authorization comes first: a stranger gets Unauthorized, not the version.
    let stranger = Principal::Client(ccron::ClientId::from_index(77));
    let policy = Policy::default().with_anyone_may_create(true);
    let mut owned = Scheduler::new(1, Limits::default()).with_policy(policy);
    owned
        .apply(
            &Principal::Client(ccron::ClientId::from_index(1)),
            upsert_if(k(), 0),
            &handlers(),
            1,
            Some(0),
        )
        .unwrap();
    let r = owned.apply(&stranger, upsert_if(k(), 5), &handlers(), 2, Some(0));
    assert!(
        matches!(r, Err(ScheduleError::Unauthorized { .. })),
        "{r:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A cron table entry with a misfire policy runs exactly what the model says on random
    /// agreed-time sequences (repeats, small steps, jumps of hours), through a reload from its
    /// pages at a random tick; and the indexed and linear evaluations agree.
    #[test]
    fn cron_table_entries_follow_their_misfire_policy(
        misfire in policy(),
        k in 1i64..4,
        t0 in 0i64..MIN * 60,
        steps in proptest::collection::vec(
            prop_oneof![Just(0i64), 1i64..3 * MIN, 1i64..120 * MIN],
            1..40,
        ),
        restart in any::<proptest::sample::Index>(),
    ) {
        let period = k * MIN;
        let mut times = vec![t0];
        for s in &steps {
            let last = *times.last().unwrap();
            times.push(last + s);
        }
        // The model: armed by the first tick (first instant after it), then the policy.
        let mut expected = Vec::new();
        let mut next = (times[0].div_euclid(period) + 1) * period;
        for &now in &times[1..] {
            if next <= now {
                let reached: Vec<i64> = (0..).map(|i| next + i * period)
                    .take_while(|&t| t <= now).collect();
                expected.extend(model_runs(misfire, &reached, now));
                next = (now.div_euclid(period) + 1) * period;
            }
        }
        let mut table = table_with(misfire, k);
        let mut linear = table_with(misfire, k);
        let mut pages = MemPages::new(1_024, 2);
        let mut linear_pages = MemPages::new(1_024, 2);
        let mut got = Vec::new();
        let mut got_linear = Vec::new();
        let restart_at = restart.index(times.len());
        for (i, &t) in times.iter().enumerate() {
            if i == restart_at {
                table = table_with(misfire, k);
                table.reload(&pages).unwrap();
            }
            let tick = Tick::new(1, i as u64 + 1, Some(t));
            table.evaluate(&tick, &mut got, &mut pages).unwrap();
            linear.evaluate_linear(&tick, &mut got_linear, &mut linear_pages).unwrap();
        }
        prop_assert_eq!(&got, &expected, "{:?} every {} min over {:?}", misfire, k, times);
        prop_assert_eq!(&got_linear, &expected);
    }

    /// `next_run` agrees with the tick: when it names a trigger, a tick at that point runs the
    /// schedule with that due point; when it cannot know, the tick runs nothing (jitter
    /// included).
    #[test]
    fn next_run_agrees_with_the_tick(
        at_ms in 0i64..10_000,
        seq in 2u64..50,
        jitter in prop_oneof![Just(0u32), 1u32..5_000],
        tick_seq in 2u64..60,
        tick_ms in prop_oneof![Just(None), (0i64..20_000).prop_map(Some)],
    ) {
        let mut book = Scheduler::new(1, Limits::default());
        let def = at_or_seq(at_ms, seq).with_jitter_ms(jitter);
        let id = host_apply(&mut book, ScheduleRequest::Create(def), 1, 0).unwrap().unwrap();
        let predicted = book.next_run(id, tick_seq, tick_ms);
        let ran = tick(&mut book, tick_seq, tick_ms);
        match predicted {
            Some(NextRun::At(due)) => prop_assert_eq!(ran, vec![(id, due)]),
            Some(NextRun::EarlierOf { at_ms: a, seq: s, due_ms }) => {
                prop_assert_eq!((a, s), (at_ms, seq));
                prop_assert!(due_ms >= at_ms);
                prop_assert_eq!(ran, vec![]);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    /// Upserts with an expected version against a model (key -> version): one applies exactly
    /// when the model says so (0 and free, or the holder's version), bumps or creates at 1,
    /// and a rejection changes nothing.
    #[test]
    fn upserts_with_an_expected_version_follow_the_model(
        ops in proptest::collection::vec((0u8..3, 0u64..4, any::<bool>()), 1..40),
    ) {
        let mut book = Scheduler::new(1, Limits::default());
        let mut model: std::collections::BTreeMap<String, u64> = Default::default();
        for (i, (key, version, cancel)) in ops.into_iter().enumerate() {
            let seq = i as u64 + 1;
            let key = format!("k{key}");
            if cancel && model.contains_key(&key) {
                host_apply(&mut book, ScheduleRequest::Cancel(Target::Key(key.clone())), seq, 0)
                    .unwrap();
                model.remove(&key);
                continue;
            }
            let before = book.clone();
            let def = every_minute().with_key(key.as_str()).with_priority(seq as u8);
            let r = host_apply(&mut book, upsert_if(def, version), seq, 0);
            match (model.get(&key).copied(), version) {
                (None, 0) => {
                    prop_assert!(matches!(r, Ok(Some(_))));
                    model.insert(key.clone(), 1);
                }
                (Some(v), w) if v == w => {
                    prop_assert!(matches!(r, Ok(Some(_))));
                    model.insert(key.clone(), v + 1);
                }
                (None, _) => {
                    prop_assert!(matches!(r, Err(ScheduleError::UnknownSchedule(_))), "{:?}", r);
                    prop_assert_eq!(&book, &before);
                }
                (Some(v), w) => {
                    prop_assert!(
                        matches!(r, Err(ScheduleError::StaleVersion { expected, actual, .. })
                            if expected == w && actual == v),
                        "{:?}", r
                    );
                    prop_assert_eq!(&book, &before);
                }
            }
            for (k, v) in &model {
                let id = book.id_of(k);
                prop_assert!(id.is_some());
                prop_assert_eq!(book.get(id.unwrap()).map(|s| s.version), Some(*v));
            }
        }
    }

    /// Optimistic concurrency over random interleavings of two writers: a guarded change
    /// applies exactly when its version is the schedule's, each applied change bumps the
    /// version by one, and a rejection changes nothing.
    #[test]
    fn guarded_changes_apply_exactly_at_the_current_version(
        ops in proptest::collection::vec((0u64..6, 0u8..5), 1..40),
    ) {
        let mut book = Scheduler::new(1, Limits::default());
        let id = host_apply(&mut book, ScheduleRequest::Create(every_minute()), 1, 0)
            .unwrap()
            .unwrap();
        for (i, (version, what)) in ops.into_iter().enumerate() {
            let seq = i as u64 + 2;
            let Some(current) = book.get(id).map(|s| s.version) else {
                break;
            };
            let change = match what {
                0 => Guarded::Pause,
                1 => Guarded::Resume,
                2 => Guarded::Replace(every_minute().with_priority(seq as u8)),
                3 => Guarded::Cancel,
                _ => Guarded::Pause,
            };
            let before = book.clone();
            let r = host_apply(&mut book, guarded(Target::Id(id), version, change.clone()), seq, 0);
            if version == current {
                prop_assert_eq!(r, Ok(Some(id)));
                match book.get(id) {
                    Some(s) => prop_assert_eq!(s.version, current + 1),
                    None => prop_assert_eq!(change, Guarded::Cancel),
                }
            } else {
                prop_assert_eq!(
                    r,
                    Err(ScheduleError::StaleVersion { id, expected: version, actual: current })
                );
                prop_assert_eq!(&book, &before);
            }
        }
    }
}
