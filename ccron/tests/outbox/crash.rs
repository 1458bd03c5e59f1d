//! Crash-and-restart of the outbox consumer against a simulated worker that fails, loses
//! acknowledgements and deduplicates by occurrence id (no network: everything is driven in one
//! thread from a seed).
//!
//! Checked after every step: the consumer's invariants, the in-flight and search-ahead bounds,
//! and that persisted progress never covers a record that is neither performed by the worker nor
//! durably dead-lettered. Checked at the end: every record is done or dead-lettered, each
//! performed exactly once at the worker, poison records never performed and dead-lettered after
//! exactly `max_attempts` attempts.
//!
//! The worker's memory is either the FIFO [`SeenSet`] (capacity `2 · max_search_ahead`) or the
//! [`DedupeTable`] HTTP workers use, whose entries leave only when the consumer's acknowledged
//! (persisted) progress passes them, with a window of exactly `max_search_ahead`: the same
//! scenarios, the same guarantees.

use std::collections::{BTreeMap, BTreeSet};

use ccron::outbox::{
    AckOutcome, Backoff, ConsumerConfig, DedupeLimits, DedupeTable, DedupeVerdict, Delivery,
    FailureReason, MemDeadLetters, MemProgressStore, OccurrenceId, Outbox, OutboxLimits,
    OutboxRecord, PersistentConsumer, Remembered, SeenSet, delivery_digest,
};
use proptest::prelude::*;

/// SplitMix64: a tiny PRNG with a fixed algorithm, so a seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn permille(&mut self, p: u32) -> bool {
        self.next() % 1000 < u64::from(p)
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

#[derive(Debug, Clone)]
struct Scenario {
    records: u64,
    max_processing: usize,
    max_search_ahead: u64,
    max_attempts: u32,
    ack_loss_permille: u32,
    transient_fail_permille: u32,
    poison: BTreeSet<u64>,
    /// Steps after whose worker phase the consumer crashes (its replies are lost with it).
    crashes: BTreeSet<u32>,
    seed: u64,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        1u64..60,
        1usize..6,
        0u64..10,
        1u32..5,
        0u32..500,
        0u32..300,
        prop::collection::btree_set(1u64..60, 0..5),
        prop::collection::btree_set(0u32..120, 0..6),
        any::<u64>(),
    )
        .prop_map(
            |(records, mp, extra, attempts, loss, fail, poison, crashes, seed)| Scenario {
                records,
                max_processing: mp,
                max_search_ahead: mp as u64 + extra,
                max_attempts: attempts,
                ack_loss_permille: loss,
                transient_fail_permille: fail,
                poison: poison.into_iter().filter(|&i| i <= records).collect(),
                crashes,
                seed,
            },
        )
}

#[derive(Debug, Default)]
struct Report {
    deliveries: u64,
    duplicates_at_worker: u64,
    crashes: u64,
    dead: usize,
    steps: u32,
}

/// The worker's idempotency memory.
enum Memory {
    Fifo(SeenSet),
    Table(DedupeTable),
}

impl Memory {
    /// Whether the delivery `d` (sent with acknowledged progress `progress`) was performed
    /// before; if not, it is performed now and remembered.
    fn seen_or_insert(&mut self, d: &Delivery, progress: u64) -> Result<bool, TestCaseError> {
        match self {
            Self::Fifo(seen) => Ok(!seen.insert(d.record.id)),
            Self::Table(t) => {
                t.acknowledge("consumer", progress).unwrap();
                let digest = delivery_digest(&d.record.handler, &d.record.payload);
                match t.check("consumer", d.index, &d.record.id, &digest) {
                    DedupeVerdict::Fresh => {
                        let done = Remembered::Answer {
                            body: vec![],
                            proof: None,
                        };
                        t.remember("consumer", d.record.id, d.index, digest, done)
                            .unwrap();
                        Ok(false)
                    }
                    DedupeVerdict::Replay(_) => Ok(true),
                    v => Err(TestCaseError::fail(format!(
                        "an honest delivery of {} at progress {progress} refused: {v:?}",
                        d.index
                    ))),
                }
            }
        }
    }
}

/// Runs a scenario to completion with the FIFO seen-set, asserting the invariants; returns
/// counters for sanity checks.
fn run(s: &Scenario) -> Result<Report, TestCaseError> {
    run_with(s, false)
}

/// Runs a scenario with the FIFO seen-set or (`table`) the progress-evicted [`DedupeTable`].
fn run_with(s: &Scenario, table: bool) -> Result<Report, TestCaseError> {
    let mut rng = Rng(s.seed);
    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 0..s.records {
        // As actions would: component 9, entry k % 4, the entry's k / 4-th occurrence.
        let id = OccurrenceId::new(9, k % 4, k / 4);
        outbox
            .append(OutboxRecord::new(id, "effect", k.to_be_bytes()))
            .unwrap();
    }
    let id_of = |i: u64| outbox.get(i).map(|r| r.id);
    let cfg = ConsumerConfig {
        max_processing: s.max_processing,
        max_search_ahead: s.max_search_ahead,
        max_attempts: s.max_attempts,
        ack_timeout_ms: 30,
        backoff: Backoff {
            base_ms: 10,
            cap_ms: 80,
            jitter_permille: 500,
        },
    };
    let mut progress_store = MemProgressStore::default();
    let mut dead_sink = MemDeadLetters::default();
    let mut seen = if table {
        Memory::Table(DedupeTable::new(DedupeLimits {
            window: s.max_search_ahead,
            ..DedupeLimits::default()
        }))
    } else {
        Memory::Fifo(SeenSet::new(2 * s.max_search_ahead as usize))
    };
    let mut effects: BTreeMap<OccurrenceId, u32> = BTreeMap::new();
    let mut report = Report::default();

    let mut pc = PersistentConsumer::open(cfg, &mut progress_store, &mut dead_sink).unwrap();
    let mut step = 0u32;
    loop {
        prop_assert!(step < 20_000, "no convergence after {step} steps: {s:?}");
        let now = i64::from(step) * 10;

        // 1. The consumer dispatches within its bounds.
        let mut deliveries: Vec<Delivery> = pc.poll(&outbox, now).unwrap();
        // What the deliveries carry as the consumer's acknowledged progress.
        let acknowledged = pc.persisted_progress();
        let c = pc.consumer();
        prop_assert!(c.in_flight() <= s.max_processing);
        for d in &deliveries {
            prop_assert!(d.index > c.progress());
            prop_assert!(
                d.index <= c.progress() + s.max_search_ahead,
                "beyond search-ahead"
            );
            prop_assert!(d.attempt <= s.max_attempts);
        }
        report.deliveries += deliveries.len() as u64;

        // 2. The worker performs each delivery at most once per id, and replies.
        rng.shuffle(&mut deliveries);
        let mut replies = Vec::new();
        for d in deliveries {
            let outcome = if s.poison.contains(&d.index) {
                AckOutcome::Failed {
                    reason: "poison".into(),
                }
            } else if rng.permille(s.transient_fail_permille) {
                AckOutcome::Failed {
                    reason: "transient".into(),
                }
            } else {
                if seen.seen_or_insert(&d, acknowledged)? {
                    report.duplicates_at_worker += 1;
                } else {
                    *effects.entry(d.record.id).or_default() += 1;
                }
                AckOutcome::Done
            };
            if !rng.permille(s.ack_loss_permille) {
                replies.push((d.index, d.attempt, outcome));
            }
        }

        // 3. Crash: the consumer's memory and the replies in transit are gone.
        if s.crashes.contains(&step) {
            drop(pc);
            report.crashes += 1;
            pc = PersistentConsumer::open(cfg, &mut progress_store, &mut dead_sink).unwrap();
        } else {
            rng.shuffle(&mut replies);
            for (index, attempt, outcome) in replies {
                pc.on_ack(index, attempt, outcome, now).unwrap();
            }
        }

        // 4. Persisted progress never covers an unfinished record.
        if let Err(e) = pc.consumer().check_invariants() {
            return Err(TestCaseError::fail(e));
        }
        let persisted = pc.persisted_progress();
        prop_assert_eq!(
            persisted,
            pc.consumer().progress(),
            "progress saved every step"
        );
        let dead: BTreeSet<u64> = pc.stores().1.letters.iter().map(|l| l.index).collect();
        for i in 1..=persisted {
            let id = id_of(i).unwrap();
            prop_assert!(
                effects.contains_key(&id) || dead.contains(&i),
                "progress {} skipped undone record {}",
                persisted,
                i
            );
        }
        if persisted == s.records && s.crashes.range(step + 1..).next().is_none() {
            break;
        }
        step += 1;
    }
    drop(pc);

    // Every record done or dead-lettered, effects exactly once per id.
    prop_assert_eq!(progress_store.progress, s.records);
    // A record dead-lettered above progress is tried again after a crash, so the log may name it
    // twice (documented); readers key by index.
    let mut dead_indices = BTreeSet::new();
    for l in &dead_sink.letters {
        dead_indices.insert(l.index);
        prop_assert_eq!(l.attempts, s.max_attempts);
        prop_assert_eq!(Some(l.id), id_of(l.index));
    }
    for i in 1..=s.records {
        let id = id_of(i).unwrap();
        let n = effects.get(&id).copied().unwrap_or(0);
        prop_assert!(n <= 1, "record {} performed {} times", i, n);
        prop_assert!(n == 1 || dead_indices.contains(&i), "record {} lost", i);
        if s.poison.contains(&i) {
            prop_assert_eq!(n, 0);
            // Its last failure was reported, or its report was lost and the attempt timed out.
            for letter in dead_sink.letters.iter().filter(|l| l.index == i) {
                let expected = match &letter.reason {
                    FailureReason::Timeout => true,
                    FailureReason::Failed(r) => r == "poison",
                };
                prop_assert!(expected, "{:?}", letter);
            }
        }
    }
    report.dead = dead_sink.letters.len();
    report.steps = step;
    Ok(report)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn crash_restart_loses_nothing_and_effects_happen_once(s in scenario()) {
        run(&s)?;
    }

    /// The same with the HTTP workers' memory: entries leave only with the consumer's
    /// acknowledged progress, the window is exactly the search-ahead.
    #[test]
    fn crash_restart_with_the_progress_evicted_table(s in scenario()) {
        run_with(&s, true)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100_000))]

    /// Long campaign of the property above (100,000 scenarios, about 30 s).
    /// Run with `cargo test -p ccron --test outbox crash:: -- --ignored`.
    #[test]
    #[ignore]
    fn crash_restart_long_campaign(s in scenario()) {
        run(&s)?;
    }
}

/// The scenario above must actually exercise re-delivery: with lost acknowledgements and
/// crashes, duplicates reach the worker and only its seen-set keeps effects single.
#[test]
fn redelivery_happens_and_is_deduplicated() {
    let s = Scenario {
        records: 50,
        max_processing: 4,
        max_search_ahead: 8,
        max_attempts: 6,
        ack_loss_permille: 300,
        transient_fail_permille: 100,
        poison: [7].into(),
        crashes: [3, 10, 11, 30].into(),
        seed: 7,
    };
    for table in [false, true] {
        let r = run_with(&s, table).unwrap();
        assert_eq!(r.crashes, 4);
        assert!(r.duplicates_at_worker > 0, "{r:?}");
        assert!(r.deliveries > 50, "{r:?}");
        assert!(r.dead >= 1, "{r:?}");
    }
}

/// A seed replays exactly: same scenario, same counters.
#[test]
fn runs_are_reproducible_from_the_seed() {
    let s = Scenario {
        records: 40,
        max_processing: 3,
        max_search_ahead: 5,
        max_attempts: 3,
        ack_loss_permille: 250,
        transient_fail_permille: 150,
        poison: [2, 30].into(),
        crashes: [5, 6, 20].into(),
        seed: 99,
    };
    let a = run(&s).unwrap();
    let b = run(&s).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

/// The same story with the crash-safe file stores: a consumer dropped midway resumes from the
/// file, and dead letters written before the crash are still there afterwards.
#[test]
fn file_stores_survive_a_crash() {
    use ccron::outbox::{FileDeadLetters, FileProgressStore};

    let dir = std::env::temp_dir().join(format!("ccron-outbox-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut outbox = Outbox::new(OutboxLimits::default());
    for k in 0..20u64 {
        let handler = if k == 2 { "poison" } else { "ok" };
        outbox
            .append(OutboxRecord::new(
                OccurrenceId::new(1, 0, k),
                handler,
                vec![],
            ))
            .unwrap();
    }
    let cfg = ConsumerConfig {
        max_processing: 3,
        max_search_ahead: 6,
        max_attempts: 2,
        ack_timeout_ms: 50,
        backoff: Backoff {
            base_ms: 0,
            cap_ms: 0,
            jitter_permille: 0,
        },
    };
    let open = || {
        PersistentConsumer::open(
            cfg,
            FileProgressStore::new(dir.join("progress")),
            FileDeadLetters::new(dir.join("dead")),
        )
        .unwrap()
    };
    let mut performed: BTreeMap<OccurrenceId, u32> = BTreeMap::new();
    let mut seen = SeenSet::new(12);
    let mut step = |pc: &mut PersistentConsumer<FileProgressStore, FileDeadLetters>, now: i64| {
        for d in pc.poll(&outbox, now).unwrap() {
            let outcome = if d.record.handler == "poison" {
                AckOutcome::Failed {
                    reason: "poison".into(),
                }
            } else {
                if seen.insert(d.record.id) {
                    *performed.entry(d.record.id).or_default() += 1;
                }
                AckOutcome::Done
            };
            // Every acknowledgement of a multiple of 3 is lost: those records time out on every
            // attempt and end as dead letters, although the worker performed them (once).
            if d.index % 3 != 0 {
                pc.on_ack(d.index, d.attempt, outcome, now).unwrap();
            }
        }
    };
    let mut pc = open();
    for t in 0..4 {
        step(&mut pc, t * 10);
    }
    let before = pc.persisted_progress();
    assert!(before > 0 && before < 20, "crash midway, at {before}");
    drop(pc);
    let mut pc = open();
    assert_eq!(pc.persisted_progress(), before);
    for t in 4..200 {
        step(&mut pc, t * 10);
        if pc.persisted_progress() == 20 {
            break;
        }
    }
    assert_eq!(pc.persisted_progress(), 20);
    drop(pc);
    let dead = FileDeadLetters::new(dir.join("dead"))
        .read_all(1 << 20)
        .unwrap();
    let dead_indices: BTreeSet<u64> = dead.iter().map(|l| l.index).collect();
    for (index, record) in outbox.iter() {
        let n = performed.get(&record.id).copied().unwrap_or(0);
        if record.handler == "poison" {
            assert_eq!((n, dead_indices.contains(&index)), (0, true));
        } else {
            assert_eq!(n, 1, "record {index}");
            assert_eq!(
                dead_indices.contains(&index),
                index % 3 == 0,
                "record {index}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
