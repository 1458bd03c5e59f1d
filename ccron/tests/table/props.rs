//! Property tests: the indexed evaluation agrees with the linear reference, a restart from the
//! pages changes no future fire, the codec round-trips and detects every corruption.

use std::num::{NonZeroU32, NonZeroU64};

use ccron::codec::{self, BlobKind, CodecError};
use ccron::periodic::PersistedSchedule;
use ccron::{
    CronEntry, CronTable, Due, EverySeq, MemPages, MisfirePolicy, PageRange, Periodic,
    ReservedPages, Tick, TickOutcome,
};
use proptest::prelude::*;

const C: u32 = 3;

/// What ran: (position, sequence number, due time).
type World = Vec<(u32, u64, Option<Due>)>;

/// A recipe for an entry, so that the same entry can be built for several tables.
#[derive(Debug, Clone)]
enum Spec {
    Periodic {
        period_ms: i64,
        policy: u8,
        start_ms: Option<i64>,
    },
    /// Indexed schedule on the sequence number.
    SeqIndexed { every: u64 },
    /// User rule on the sequence number.
    SeqRule { modulo: u64 },
    /// User rule reading the state: holds while fewer than `max` runs happened overall.
    WhileFewerThan { max: usize },
    /// Runs when seq % modulo == 0 and requests its own removal.
    SelfRemoving { modulo: u64 },
    /// Runs when seq % modulo == 0, requests adding a periodic entry at `target` (which may be
    /// taken: then an error) and replacing `victim` (which may be absent: then an error).
    Spawner {
        modulo: u64,
        target: u32,
        victim: u32,
    },
}

fn policy(code: u8) -> MisfirePolicy {
    match code % 4 {
        0 => MisfirePolicy::FireOnce,
        1 => MisfirePolicy::SkipMissed,
        2 => MisfirePolicy::FireEach {
            cap: NonZeroU32::new(3).unwrap(),
        },
        _ => MisfirePolicy::FromTickTime,
    }
}

fn record(ctx: &mut ccron::ActionCtx<'_, World>) {
    ctx.state
        .push((ctx.position, ctx.tick.bft_sequence_num, ctx.due));
}

fn build(position: u32, spec: &Spec) -> CronEntry<World> {
    match spec.clone() {
        Spec::Periodic {
            period_ms,
            policy: code,
            start_ms,
        } => {
            let mut p = Periodic::every_ms(period_ms)
                .unwrap()
                .with_misfire(policy(code));
            if let Some(s) = start_ms {
                p = p.starting_at(s);
            }
            CronEntry::<World>::periodic(position, p, record)
        }
        Spec::SeqIndexed { every } => CronEntry::<World>::scheduled(
            position,
            EverySeq::new(NonZeroU64::new(every).unwrap()),
            record,
        ),
        Spec::SeqRule { modulo } => CronEntry::<World>::new(
            position,
            move |ctx| ctx.tick.bft_sequence_num % modulo == 0,
            record,
        ),
        Spec::WhileFewerThan { max } => {
            CronEntry::<World>::new(position, move |ctx| ctx.state.len() < max, record)
        }
        Spec::SelfRemoving { modulo } => CronEntry::<World>::new(
            position,
            move |ctx| ctx.tick.bft_sequence_num % modulo == 0,
            |ctx| {
                record(ctx);
                let me = ctx.position;
                ctx.request_remove(me);
            },
        ),
        Spec::Spawner {
            modulo,
            target,
            victim,
        } => CronEntry::<World>::new(
            position,
            move |ctx| ctx.tick.bft_sequence_num % modulo == 0,
            move |ctx| {
                record(ctx);
                let spawned = Spec::Periodic {
                    period_ms: 700,
                    policy: 2,
                    start_ms: None,
                };
                ctx.request_add(build(target, &spawned));
                ctx.request_replace(build(victim, &Spec::SeqRule { modulo: 2 }));
            },
        ),
    }
}

fn periodic_spec() -> impl Strategy<Value = Spec> + Clone {
    (
        // Periods on a 250 ms grid make ticks land exactly on due times (the inclusive edge).
        prop_oneof![3 => (1i64..8).prop_map(|k| k * 250), 1 => 1i64..4_000],
        0u8..4,
        prop::option::weighted(0.3, 0i64..20_000),
    )
        .prop_map(|(period_ms, policy, start_ms)| Spec::Periodic {
            period_ms,
            policy,
            start_ms,
        })
}

fn any_spec() -> impl Strategy<Value = Spec> + Clone {
    prop_oneof![
        4 => periodic_spec(),
        1 => (1u64..4).prop_map(|every| Spec::SeqIndexed { every }),
        1 => (1u64..4).prop_map(|modulo| Spec::SeqRule { modulo }),
        1 => (0usize..30).prop_map(|max| Spec::WhileFewerThan { max }),
        1 => (1u64..5).prop_map(|modulo| Spec::SelfRemoving { modulo }),
        1 => (1u64..6, 0u32..12, 0u32..12).prop_map(|(modulo, target, victim)| Spec::Spawner {
            modulo,
            target,
            victim
        }),
    ]
}

/// Specs without callbacks that change the table: the host knows the set of entries, so a
/// restarted replica can register it again.
fn static_spec() -> impl Strategy<Value = Spec> + Clone {
    prop_oneof![
        4 => periodic_spec(),
        1 => (1u64..4).prop_map(|every| Spec::SeqIndexed { every }),
        1 => (1u64..4).prop_map(|modulo| Spec::SeqRule { modulo }),
        1 => (0usize..30).prop_map(|max| Spec::WhileFewerThan { max }),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Add(u32, Spec),
    Remove(u32),
    Replace(u32, Spec),
    /// Advance time by `dt_ms` (0: the same time) and the sequence number by `dseq` (0: a
    /// repeated tick, as when several replicas' ticks land in one batch); `timed: false` is a
    /// tick without agreed time.
    Tick {
        dt_ms: i64,
        dseq: u64,
        timed: bool,
    },
}

fn ops(spec: impl Strategy<Value = Spec> + Clone) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0u32..12, spec.clone()).prop_map(|(p, s)| Op::Add(p, s)),
        1 => (0u32..12).prop_map(Op::Remove),
        1 => (0u32..12, spec).prop_map(|(p, s)| Op::Replace(p, s)),
        6 => (
            prop_oneof![
                2 => Just(0i64),
                4 => (1i64..12).prop_map(|k| k * 250),
                2 => 1i64..3_000,
                1 => 3_000i64..20_000
            ],
            prop_oneof![1 => Just(0u64), 4 => Just(1u64)],
            prop::bool::weighted(0.9),
        )
            .prop_map(|(dt_ms, dseq, timed)| Op::Tick { dt_ms, dseq, timed }),
    ];
    prop::collection::vec(op, 1..80)
}

/// One replica under test: a table, its state and its pages.
struct Replica {
    table: CronTable<World>,
    world: World,
    pages: MemPages,
}

/// 256-byte pages and 16 entries: the log form of layout 2 with the shortest log it accepts,
/// so that random operation sequences fold the log into the record pages often.
fn range() -> PageRange {
    PageRange::new(1, CronTable::<World>::pages_needed(16, 256).unwrap()).unwrap()
}

fn fresh_table() -> CronTable<World> {
    CronTable::with_persistence(C, range(), 16)
}

impl Replica {
    fn new() -> Self {
        let pages = MemPages::new(256, range().end() + 1);
        let mut table = fresh_table();
        table.reload(&pages).unwrap();
        Self {
            table,
            world: Vec::new(),
            pages,
        }
    }

    /// Applies a host operation; host changes happen inside execution, so they are persisted.
    /// Returns a comparable summary of the result.
    fn host(&mut self, op: &Op) -> String {
        let r = match op {
            Op::Add(p, s) => format!("{:?}", self.table.add(build(*p, s))),
            Op::Remove(p) => format!("{}", self.table.remove(*p)),
            Op::Replace(p, s) => format!("{:?}", self.table.replace(build(*p, s)).map(|_| ())),
            Op::Tick { .. } => unreachable!(),
        };
        self.table.persist(&mut self.pages).unwrap();
        r
    }

    fn tick(&mut self, tick: &Tick, linear: bool) -> TickOutcome {
        let out = if linear {
            self.table
                .evaluate_linear(tick, &mut self.world, &mut self.pages)
        } else {
            self.table.evaluate(tick, &mut self.world, &mut self.pages)
        };
        out.unwrap()
    }
}

/// Drives both replicas through `ops`; `restart_at` rebuilds the second one from its pages
/// before that op (re-registering `setup`'s entries).
fn run(ops: &[Op], mode: Mode) -> Result<(), TestCaseError> {
    let mut a = Replica::new();
    let mut b = Replica::new();
    // Registered entries, as the host knows them (only used by the restart mode).
    let mut setup: std::collections::BTreeMap<u32, Spec> = Default::default();
    let (mut seq, mut now_ms) = (1u64, 1_000i64);
    for (i, op) in ops.iter().enumerate() {
        if let Mode::Restart(at) = mode
            && at == i
        {
            let mut table = fresh_table();
            // Half the time entries come before the reload, half after: both must work.
            if at % 2 == 0 {
                for (p, s) in &setup {
                    table.add(build(*p, s)).unwrap();
                }
                table.reload(&b.pages).unwrap();
            } else {
                table.reload(&b.pages).unwrap();
                for (p, s) in &setup {
                    table.add(build(*p, s)).unwrap();
                }
            }
            b.table = table;
        }
        match op {
            Op::Tick { dt_ms, dseq, timed } => {
                now_ms += dt_ms;
                seq += dseq;
                let t = Tick::new(C, seq, timed.then_some(now_ms));
                let oa = a.tick(&t, matches!(mode, Mode::Linear));
                let ob = b.tick(&t, false);
                prop_assert_eq!(&oa, &ob, "op {} {:?}", i, op);
            }
            _ => {
                let ra = a.host(op);
                let rb = b.host(op);
                prop_assert_eq!(&ra, &rb, "op {} {:?}", i, op);
                if ra == "Ok(())" || ra == "true" {
                    match op {
                        Op::Add(p, s) | Op::Replace(p, s) => {
                            setup.insert(*p, s.clone());
                        }
                        Op::Remove(p) => {
                            setup.remove(p);
                        }
                        Op::Tick { .. } => {}
                    }
                }
            }
        }
        prop_assert_eq!(a.table.check_invariants(), Ok(()));
        prop_assert_eq!(b.table.check_invariants(), Ok(()));
        prop_assert_eq!(&a.world, &b.world);
        prop_assert_eq!(&a.pages, &b.pages);
        prop_assert_eq!(
            a.table.positions().collect::<Vec<_>>(),
            b.table.positions().collect::<Vec<_>>()
        );
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Replica a evaluates linearly, b with the index.
    Linear,
    /// Both indexed; b restarts from its pages before op `n`.
    Restart(usize),
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn indexed_evaluation_fires_exactly_what_the_linear_reference_fires(ops in ops(any_spec())) {
        run(&ops, Mode::Linear)?;
    }

    #[test]
    fn restarting_from_the_pages_changes_no_future_fire(
        ops in ops(static_spec()),
        at in 0usize..80,
    ) {
        let at = at % ops.len();
        run(&ops, Mode::Restart(at))?;
    }

    #[test]
    fn fires_are_idempotent_under_repeated_ticks(ops in ops(static_spec())) {
        // Every op followed by the same tick again: the repeat fires no periodic entry.
        let mut r = Replica::new();
        let (mut seq, mut now_ms) = (1u64, 0i64);
        for op in &ops {
            match op {
                Op::Tick { dt_ms, dseq, timed } => {
                    now_ms += dt_ms;
                    seq += dseq;
                    let t = Tick::new(C, seq, timed.then_some(now_ms));
                    r.tick(&t, false);
                    let again = r.tick(&t, false);
                    prop_assert!(again.fired.iter().all(|f| f.due.is_none()), "{:?}", again);
                }
                _ => { r.host(op); }
            }
        }
    }
}

fn schedule() -> impl Strategy<Value = PersistedSchedule> {
    let due = prop_oneof![
        any::<i64>().prop_map(Due::Time),
        any::<u64>().prop_map(Due::Seq)
    ];
    (
        any::<u32>(),
        prop::collection::vec((any::<u32>(), due), 0..200),
    )
        .prop_map(|(component_id, records)| PersistedSchedule {
            component_id,
            records,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn codec_round_trips_over_any_page_size(s in schedule(), page_size in 40usize..600) {
        let pages_needed = 3_400 / (page_size - 32) + 2;
        let r = PageRange::new(2, pages_needed as u32).unwrap();
        let mut p = MemPages::new(page_size, r.end() + 1);
        codec::save(&mut p, r, BlobKind::PeriodicSchedule, &s).unwrap();
        let back: PersistedSchedule = codec::load(&p, r, BlobKind::PeriodicSchedule).unwrap().unwrap();
        prop_assert_eq!(back, s);
        prop_assert_eq!(p.load(1).unwrap(), None);
        prop_assert_eq!(p.load(r.end()).unwrap(), None);
    }

    #[test]
    fn any_single_byte_corruption_or_truncation_is_detected(
        s in schedule(),
        page_pick in any::<prop::sample::Index>(),
        byte_pick in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut_pick in any::<prop::sample::Index>(),
    ) {
        let r = PageRange::new(0, 60).unwrap();
        let mut p = MemPages::new(100, 60);
        codec::save(&mut p, r, BlobKind::PeriodicSchedule, &s).unwrap();
        let written = p.snapshot();
        let (id, bytes) = written[page_pick.index(written.len())].clone();

        let mut bad = bytes.clone();
        let at = byte_pick.index(bad.len());
        bad[at] ^= flip;
        let mut q = p.clone();
        q.save(id, &bad).unwrap();
        let res = codec::load::<PersistedSchedule>(&q, r, BlobKind::PeriodicSchedule);
        prop_assert!(res.is_err(), "flip at {} of page {} went unnoticed", at, id);

        // Truncations that leave at least one byte.
        let cut = 1 + cut_pick.index(bytes.len() - 1);
        let mut q = p.clone();
        q.save(id, &bytes[..cut]).unwrap();
        let res = codec::load::<PersistedSchedule>(&q, r, BlobKind::PeriodicSchedule);
        prop_assert!(matches!(res, Err(CodecError::Corrupt { .. })), "cut to {} of page {}: {:?}", cut, id, res);
        // Emptying a page entirely is detected too, except for the only page of a one-page value.
        if written.len() > 1 {
            let mut q = p.clone();
            q.zero(id).unwrap();
            prop_assert!(codec::load::<PersistedSchedule>(&q, r, BlobKind::PeriodicSchedule).is_err());
        }
    }

    #[test]
    fn arbitrary_page_bytes_never_panic(
        pages in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 1..4),
        seed_valid in any::<bool>(),
    ) {
        let r = PageRange::new(0, 4).unwrap();
        let mut p = MemPages::new(120, 4);
        if seed_valid {
            let s = PersistedSchedule { component_id: 1, records: vec![(1, Due::Time(2)); 5] };
            codec::save(&mut p, r, BlobKind::PeriodicSchedule, &s).unwrap();
        }
        for (i, bytes) in pages.iter().enumerate() {
            p.save(i as u32, bytes).unwrap();
        }
        let _ = codec::load::<PersistedSchedule>(&p, r, BlobKind::PeriodicSchedule);
        let mut t: CronTable<World> = CronTable::with_persistence(1, r, 10);
        let _ = t.reload(&p);
        prop_assert_eq!(t.check_invariants(), Ok(()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    /// Long campaign (20,000 cases, ~30 s in the test profile):
    /// `cargo test -p ccron --test table props:: -- --ignored`.
    #[test]
    #[ignore]
    fn long_campaign_indexed_equals_linear_and_restarts_change_nothing(
        ops in ops(any_spec()),
        static_ops in ops(static_spec()),
        at in 0usize..80,
    ) {
        run(&ops, Mode::Linear)?;
        run(&static_ops, Mode::Restart(at % static_ops.len()))?;
    }
}
