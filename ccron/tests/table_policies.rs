//! Policies of cron table entries (issue 27, item 4), each against a brute-force model:
//! - run limits and ends of cron rules ([`CronRule::with_max_runs`], [`CronRule::until`]) and
//!   the typed retirement of an entry that can never run again, over random rules, misfire
//!   policies and tick sequences (with stalls), also after a restart from the pages;
//! - overlap policies of table entries ([`CronEntry::with_overlap`]) keyed on "the previous
//!   run has no result yet", read from a real outbox the entries emit into and a consumer
//!   settles (trims) at random;
//! - admission: what can never fire, or cannot be offered, is refused with a typed error;
//!   the policies enter the setup digest.
//!
//! The model enumerates instants minute by minute from the expression's arithmetic (no cron
//! engine), and plans runs from the misfire rules as documented.

use std::collections::BTreeSet;

use ccron::cron::CronSchedule;
use ccron::entry::{Diversion, EntryDiverted, EntryEnd, EntryRetired, PendingResults};
use ccron::outbox::{EmitBudget, Emits, Outbox, OutboxLimits, OutboxResult, ResultOutcome};
use ccron::schedule::{CronRule, Misfire, Overlap, RetireReason, ScheduleError};
use ccron::{
    CronEntry, CronTable, CronTableRegistry, Due, MemPages, PageRange, Policy, Principal,
    TableError, Tick, TimeMs,
};
use proptest::prelude::*;

const C: u32 = 5;
const POS: u32 = 7;
const MIN: i64 = 60_000;

/// Expressions the model knows by arithmetic: (expression, does minute `m` since the epoch
/// match).
fn expression(code: u8) -> (&'static str, fn(i64) -> bool) {
    match code % 5 {
        0 => ("* * * * *", |_| true),
        1 => ("*/2 * * * *", |m| (m % 60) % 2 == 0),
        2 => ("*/7 * * * *", |m| (m % 60) % 7 == 0),
        3 => ("15,45 * * * *", |m| matches!(m % 60, 15 | 45)),
        _ => ("0 */3 * * *", |m| m % 60 == 0 && ((m / 60) % 24) % 3 == 0),
    }
}

fn misfire(code: u8) -> Misfire {
    match code % 4 {
        0 => Misfire::FireOnce,
        1 => Misfire::Skip,
        2 => Misfire::FireEach { cap: 3 },
        _ => Misfire::ExpireAfter {
            deadline_ms: 5 * MIN,
        },
    }
}

/// The instants strictly after `after` up to `horizon`, by brute force.
fn instants(matches: fn(i64) -> bool, after: i64, horizon: i64) -> Vec<i64> {
    let first = after.div_euclid(MIN) + 1;
    (first..=horizon.div_euclid(MIN))
        .filter(|m| matches(*m))
        .map(|m| m * MIN)
        .collect()
}

/// The runs a late tick at `now` plans for the reached instants `reached` (ascending,
/// non-empty), as the misfire policies are documented.
fn plan(misfire: Misfire, reached: &[i64], now: i64) -> Vec<i64> {
    let last = *reached.last().unwrap();
    match misfire {
        Misfire::FireOnce => vec![last],
        Misfire::Skip => {
            if reached.len() == 1 {
                reached.to_vec()
            } else {
                vec![]
            }
        }
        Misfire::FireEach { cap } => reached[reached.len().saturating_sub(cap as usize)..].to_vec(),
        Misfire::ExpireAfter { deadline_ms } => {
            if now - last <= deadline_ms {
                vec![last]
            } else {
                vec![]
            }
        }
    }
}

/// The brute-force model of one cron entry: its stored next instant over `instants`.
struct Model {
    instants: Vec<i64>,
    /// Index in `instants` of the stored next instant (`len`: never).
    next: usize,
}

impl Model {
    /// A tick at `now`: the planned runs and whether the step retired the entry (`None`: not
    /// due).
    fn step(&mut self, misfire: Misfire, now: i64) -> Option<(Vec<i64>, bool)> {
        let due = *self.instants.get(self.next)?;
        if due > now {
            return None;
        }
        let end = self.instants.partition_point(|t| *t <= now);
        let runs = plan(misfire, &self.instants[self.next..end], now);
        self.next = end;
        Some((runs, end == self.instants.len()))
    }
}

fn pages() -> MemPages {
    MemPages::new(4096, 64)
}

fn table() -> CronTable<Vec<(u32, Due)>> {
    CronTable::with_persistence(C, PageRange::new(0, 8).unwrap(), 16)
}

fn recorder() -> impl FnMut(&mut ccron::ActionCtx<'_, Vec<(u32, Due)>>) + Send + 'static {
    |ctx| {
        let due = ctx.due.unwrap();
        ctx.state.push((ctx.position, due));
    }
}

#[derive(Debug, Clone)]
struct BoundsCase {
    expr: u8,
    after_ms: i64,
    until_offset: Option<i64>,
    max_runs: Option<u64>,
    misfire: u8,
    gaps: Vec<i64>,
}

fn bounds_case() -> impl Strategy<Value = BoundsCase> {
    (
        any::<u8>(),
        0i64..3_000_000,
        prop::option::of(1i64..6 * 3_600_000),
        prop::option::of(1u64..12),
        any::<u8>(),
        prop::collection::vec(
            prop_oneof![3 => 0i64..3 * MIN, 1 => 0i64..5 * 3_600_000],
            1..40,
        ),
    )
        .prop_map(
            |(expr, after_ms, until_offset, max_runs, misfire, gaps)| BoundsCase {
                expr,
                after_ms,
                until_offset,
                max_runs,
                misfire,
                gaps,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Run limits, ends and retirement match the model on every tick; the retired entry is
    /// listed with its reason, and a restarted table (reloaded from the pages) lists the same.
    #[test]
    fn run_limits_ends_and_retirement_match_the_model(case in bounds_case()) {
        let (expr, matches) = expression(case.expr);
        let misfire = misfire(case.misfire);
        let until = case.until_offset.map(|o| case.after_ms + o);
        let horizon: i64 = case.after_ms + case.gaps.iter().sum::<i64>();
        // Every instant of the schedule after the start, far enough for the limit and the end.
        let far = horizon.max(until.unwrap_or(0)) + 30 * 24 * 3_600_000;
        let all = instants(matches, case.after_ms, far);
        let mut bounded = all.clone();
        if let Some(n) = case.max_runs {
            bounded.truncate(n as usize);
        }
        if let Some(u) = until {
            bounded.retain(|t| *t <= u);
        }
        // The reason the model retires for: the limit's last instant binds, or the end.
        let reason = match (case.max_runs, until) {
            (Some(n), u) if u.is_none_or(|u| all[n as usize - 1] <= u) => EntryEnd::RunLimit,
            _ => EntryEnd::Ended,
        };

        let build = || -> Result<CronRule, ScheduleError> {
            let mut rule = CronRule::new(CronSchedule::parse(expr).unwrap())
                .starting_after(case.after_ms)
                .with_misfire(misfire)?;
            if let Some(u) = until {
                rule = rule.until(u)?;
            }
            if let Some(n) = case.max_runs {
                rule = rule.with_max_runs(n)?;
            }
            Ok(rule)
        };
        let rule = match build() {
            Err(ScheduleError::NeverFires(RetireReason::Ended)) => {
                prop_assert!(bounded.is_empty(), "refused a rule that fires at {bounded:?}");
                return Ok(());
            }
            other => other.unwrap(),
        };
        prop_assert!(!bounded.is_empty(), "admitted a rule that never fires");
        prop_assert_eq!(rule.max_runs(), case.max_runs);

        let mut model = Model { instants: bounded.clone(), next: 0 };
        let mut t = table();
        t.add(CronEntry::scheduled(POS, rule.clone(), recorder())).unwrap();
        let mut p = pages();
        let mut ran = Vec::new();
        let mut now = case.after_ms;
        let mut retired_model = false;
        for (i, gap) in case.gaps.iter().enumerate() {
            now += gap;
            let seq = i as u64 + 1;
            let outcome = t.evaluate(&Tick::new(C, seq, Some(now)), &mut ran, &mut p).unwrap();
            prop_assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
            let (want_runs, want_retired) = model.step(misfire, now).unwrap_or_default();
            let got: Vec<i64> = outcome.fired.iter().map(|f| f.due.unwrap().time_ms().unwrap()).collect();
            prop_assert_eq!(&got, &want_runs, "tick {} at {}", seq, now);
            let want_event: Vec<EntryRetired> = if want_retired {
                vec![EntryRetired { position: POS, end: reason, seq, at_ms: Some(now) }]
            } else {
                vec![]
            };
            prop_assert_eq!(&outcome.retired, &want_event, "tick {} at {}", seq, now);
            retired_model |= want_retired;
            // The limit is never exceeded.
            if let Some(n) = case.max_runs {
                prop_assert!(ran.len() as u64 <= n);
            }
        }
        let listed = if retired_model { vec![(POS, reason)] } else { vec![] };
        prop_assert_eq!(t.retired_entries(), listed.clone());
        prop_assert_eq!(t.policy_counters().retired, u64::from(retired_model));
        // A restarted replica derives the same retirement from the pages, and reports no
        // second event.
        let mut again = table();
        again.add(CronEntry::scheduled(POS, rule, recorder())).unwrap();
        again.reload(&p).unwrap();
        prop_assert_eq!(again.retired_entries(), listed);
        let outcome = again.evaluate(&Tick::new(C, 1_000, Some(now + 1)), &mut Vec::new(), &mut p).unwrap();
        if retired_model {
            prop_assert!(outcome.retired.is_empty() && outcome.fired.is_empty());
        }
    }
}

/// The outbox a consumer settles: what the model of "no result yet" reads.
struct Host {
    outbox: Outbox,
}

impl Host {
    fn new() -> Self {
        Self {
            outbox: Outbox::new(OutboxLimits::default()),
        }
    }

    fn emits(&self) -> Emits {
        Emits::reserve(&self.outbox, EmitBudget::new(8, 4096)).unwrap()
    }

    /// The consumer's progress trims every held record (no result can come for them any more:
    /// they are settled, as the book's overlap reads a trim).
    fn settle_all(&mut self) {
        let head = self.outbox.next_index();
        self.outbox.trim_below(head);
    }

    /// Results are applied through consensus for every held record (kept, not trimmed):
    /// answers and dead letters alike settle them.
    fn answer_all(&mut self) {
        let held: Vec<(u64, ccron::outbox::OccurrenceId)> =
            self.outbox.iter().map(|(i, r)| (i, r.id)).collect();
        for (index, id) in held {
            let outcome = if index % 2 == 0 {
                ResultOutcome::Answer(b"ok".to_vec())
            } else {
                ResultOutcome::DeadLetter("gave up".into())
            };
            self.outbox
                .accept_result(
                    &Policy::default(),
                    &Principal::Host,
                    &OutboxResult::unsigned(index, id, outcome),
                )
                .unwrap();
        }
    }
}

/// Whether the action emits a record for the run at `due` (some runs emit nothing and have
/// their result at once).
fn emits_for(due: i64) -> bool {
    (due / MIN) % 3 != 0
}

fn emitter() -> impl FnMut(&mut ccron::ActionCtx<'_, Vec<(u32, Due)>>) + Send + 'static {
    |ctx| {
        let due = ctx.due.unwrap();
        ctx.state.push((ctx.position, due));
        if emits_for(due.time_ms().unwrap()) {
            ctx.emit("job", b"x".to_vec()).unwrap();
        }
    }
}

#[derive(Debug, Clone)]
struct OverlapCase {
    expr: u8,
    misfire: u8,
    overlap: u8,
    /// (gap before the tick, what settles after it: 0 nothing, 1 the consumer trims every
    /// record, 2 results are applied for every record).
    ticks: Vec<(i64, u8)>,
}

fn overlap(code: u8) -> Overlap {
    match code % 3 {
        0 => Overlap::AllowAll,
        1 => Overlap::Skip,
        _ => Overlap::BufferOne,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Overlap on a table entry matches the model on every tick: which runs happen, which are
    /// skipped, which steps are held; the outbox view is the real outbox.
    #[test]
    fn overlap_matches_the_model(case in (
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        prop::collection::vec((prop_oneof![4 => 0i64..4 * MIN, 1 => 0i64..3 * 3_600_000], 0u8..3), 1..50),
    ).prop_map(|(expr, misfire, overlap, ticks)| OverlapCase { expr, misfire, overlap, ticks })) {
        let (expr, matches) = expression(case.expr);
        let misfire = misfire(case.misfire);
        let policy = overlap(case.overlap);
        let after = 0;
        let horizon: i64 = case.ticks.iter().map(|t| t.0).sum::<i64>() + 1;
        let mut model = Model { instants: instants(matches, after, horizon + 30 * 24 * 3_600_000), next: 0 };
        // Records of earlier runs without a result, in the model.
        let mut pending = 0usize;

        let rule = CronRule::new(CronSchedule::parse(expr).unwrap())
            .starting_after(after)
            .with_misfire(misfire)
            .unwrap();
        let entry = CronEntry::scheduled(POS, rule, emitter()).with_overlap(policy).unwrap();
        let mut t = table();
        t.add(entry).unwrap();
        let mut p = pages();
        let mut host = Host::new();
        let mut ran = Vec::new();
        let mut now = after;
        for (i, (gap, settle)) in case.ticks.iter().enumerate() {
            now += gap;
            let seq = i as u64 + 1;
            let tick = Tick::new(C, seq, Some(now));
            // The model.
            let mut want_fired = Vec::new();
            let mut want_diverted = Vec::new();
            let awaiting = pending > 0;
            let due = model.instants.get(model.next).copied().filter(|d| *d <= now);
            if let Some(d) = due {
                if policy == Overlap::BufferOne && awaiting {
                    want_diverted.push(EntryDiverted { position: POS, due: Due::Time(d), what: Diversion::Held });
                } else {
                    let (runs, _) = model.step(misfire, now).unwrap();
                    let mut blocked = awaiting;
                    for r in runs {
                        if policy.tracks() && blocked {
                            want_diverted.push(EntryDiverted { position: POS, due: Due::Time(r), what: Diversion::Skipped });
                        } else {
                            want_fired.push(r);
                            if emits_for(r) {
                                pending += 1;
                                blocked = true;
                            }
                        }
                    }
                }
            }
            // The table.
            let mut emits = host.emits();
            let outcome = t
                .evaluate_with_results(&tick, &mut ran, &mut p, Some(&mut emits), &host.outbox)
                .unwrap();
            emits.commit(&mut host.outbox).unwrap();
            prop_assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
            let got: Vec<i64> = outcome.fired.iter().map(|f| f.due.unwrap().time_ms().unwrap()).collect();
            prop_assert_eq!(&got, &want_fired, "tick {} at {}", seq, now);
            prop_assert_eq!(&outcome.diverted, &want_diverted, "tick {} at {}", seq, now);
            match settle {
                1 => host.settle_all(),
                2 => host.answer_all(),
                _ => continue,
            }
            pending = 0;
        }
        let c = t.policy_counters();
        prop_assert_eq!(c.retired, 0);
        prop_assert_eq!(c.unviewed, 0);
    }
}

/// An entry with a user rule (no occurrences to cancel).
fn custom_cancel() -> CronEntry<()> {
    CronEntry::<()>::new(1, |_| true, |_| {})
}

#[test]
fn admission_refuses_what_never_fires_or_cannot_be_offered() {
    let hourly = || CronRule::new(CronSchedule::parse("0 * * * *").unwrap());
    // A run limit needs a start, at least 1 and at most the bound.
    assert!(matches!(
        hourly().with_max_runs(3),
        Err(ScheduleError::Invalid(_))
    ));
    assert!(matches!(
        hourly().starting_after(0).with_max_runs(0),
        Err(ScheduleError::Invalid(_))
    ));
    assert!(matches!(
        hourly()
            .starting_after(0)
            .with_max_runs(CronRule::MAX_RUNS + 1),
        Err(ScheduleError::Invalid(_))
    ));
    // An end before the first instant after the start: never fires, refused with the book's
    // typed error.
    assert!(matches!(
        hourly().starting_after(0).until(3_599_999),
        Err(ScheduleError::NeverFires(RetireReason::Ended))
    ));
    assert!(hourly().starting_after(0).until(3_600_000).is_ok());
    // Overlap policies: indexed entries only, and no BufferAll on a table entry.
    let custom = CronEntry::<()>::new(1, |_| true, |_| {});
    assert!(matches!(
        custom.with_overlap(Overlap::Skip),
        Err(ScheduleError::Invalid(_))
    ));
    let cron = || CronEntry::<()>::cron(1, CronSchedule::parse("* * * * *").unwrap(), |_| {});
    assert!(matches!(
        cron().with_overlap(Overlap::BufferAll),
        Err(ScheduleError::Invalid(_))
    ));
    assert_eq!(
        cron().with_overlap(Overlap::CancelOther).unwrap().overlap(),
        Overlap::CancelOther
    );
    assert!(matches!(
        custom_cancel().with_overlap(Overlap::CancelOther),
        Err(ScheduleError::Invalid(_))
    ));
    assert_eq!(
        cron().with_overlap(Overlap::Skip).unwrap().overlap(),
        Overlap::Skip
    );
}

#[test]
fn the_policies_enter_the_setup_digest() {
    let digest = |entry: CronEntry<()>| {
        let mut r = CronTableRegistry::new();
        let mut t = CronTable::with_persistence(C, PageRange::new(0, 8).unwrap(), 16);
        t.add(entry).unwrap();
        r.register(t).unwrap();
        r.setup_digest()
    };
    let rule = || CronRule::new(CronSchedule::parse("0 * * * *").unwrap()).starting_after(0);
    let plain = digest(CronEntry::scheduled(1, rule(), |_| {}));
    let limited = digest(CronEntry::scheduled(
        1,
        rule().with_max_runs(3).unwrap(),
        |_| {},
    ));
    let limited4 = digest(CronEntry::scheduled(
        1,
        rule().with_max_runs(4).unwrap(),
        |_| {},
    ));
    let skip = digest(
        CronEntry::scheduled(1, rule(), |_| {})
            .with_overlap(Overlap::Skip)
            .unwrap(),
    );
    let one = digest(
        CronEntry::scheduled(1, rule(), |_| {})
            .with_overlap(Overlap::BufferOne)
            .unwrap(),
    );
    let cancel = digest(
        CronEntry::scheduled(1, rule(), |_| {})
            .with_overlap(Overlap::CancelOther)
            .unwrap(),
    );
    let all = [plain, limited, limited4, skip, one, cancel];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // The default policy adds nothing: existing setups keep their digest.
    let allow = digest(
        CronEntry::scheduled(1, rule(), |_| {})
            .with_overlap(Overlap::AllowAll)
            .unwrap(),
    );
    assert_eq!(allow, plain);
}

/// An entry with an overlap policy evaluated without the outbox is not silently run as if it
/// had none: the pass reports a typed error (and counts it).
#[test]
fn a_tracking_entry_without_an_outbox_view_is_reported() {
    let mut t = table();
    let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap()).starting_after(0);
    t.add(
        CronEntry::scheduled(POS, rule, recorder())
            .with_overlap(Overlap::Skip)
            .unwrap(),
    )
    .unwrap();
    let mut p = pages();
    let mut ran = Vec::new();
    let outcome = t
        .evaluate(&Tick::new(C, 1, Some(60_000)), &mut ran, &mut p)
        .unwrap();
    assert_eq!(outcome.fired.len(), 1);
    assert_eq!(
        outcome.errors,
        [TableError::NoResultView {
            component_id: C,
            position: POS
        }]
    );
    assert_eq!(t.policy_counters().unviewed, 1);
    // Replacing and removing tracking entries keeps the table's count of them right.
    let rule = || CronRule::new(CronSchedule::parse("* * * * *").unwrap()).starting_after(0);
    t.replace(
        CronEntry::scheduled(POS, rule(), recorder())
            .with_overlap(Overlap::BufferOne)
            .unwrap(),
    )
    .unwrap();
    t.check_invariants().unwrap();
    t.replace(CronEntry::scheduled(POS, rule(), recorder()))
        .unwrap();
    t.check_invariants().unwrap();
    t.add(
        CronEntry::scheduled(POS + 1, rule(), recorder())
            .with_overlap(Overlap::Skip)
            .unwrap(),
    )
    .unwrap();
    assert!(t.remove(POS + 1));
    t.check_invariants().unwrap();
    // Without tracking entries a pass needs no view.
    let outcome = t
        .evaluate(&Tick::new(C, 2, Some(120_000)), &mut ran, &mut p)
        .unwrap();
    assert!(outcome.errors.is_empty());
}

/// The outbox view reads results too, not only trims: a record with a result applied is
/// settled.
#[test]
fn the_outbox_view_reads_table_records_without_a_result() {
    let mut host = Host::new();
    let mut t = table();
    let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap()).starting_after(0);
    t.add(CronEntry::scheduled(POS, rule, emitter())).unwrap();
    let mut p = pages();
    let mut emits = host.emits();
    // 60_000 is minute 1: it emits.
    t.evaluate_with_results(
        &Tick::new(C, 1, Some(60_000)),
        &mut Vec::new(),
        &mut p,
        Some(&mut emits),
        &host.outbox,
    )
    .unwrap();
    emits.commit(&mut host.outbox).unwrap();
    let mut awaiting = BTreeSet::new();
    host.outbox.awaiting(C, &mut awaiting);
    assert_eq!(awaiting, BTreeSet::from([POS]));
    // Other components' records are not this table's.
    let mut other = BTreeSet::new();
    host.outbox.awaiting(C + 1, &mut other);
    assert!(other.is_empty());
    host.settle_all();
    let mut after = BTreeSet::new();
    host.outbox.awaiting(C, &mut after);
    assert!(after.is_empty());
}

/// When the run limit's last instant is the end itself, the limit is what retires it.
#[test]
fn a_limit_ending_on_the_end_retires_for_the_limit() {
    let rule = CronRule::new(CronSchedule::parse("0 * * * *").unwrap())
        .starting_after(0)
        .until(7_200_000)
        .unwrap()
        .with_max_runs(2)
        .unwrap();
    assert_eq!(rule.last_ms(), Some(7_200_000));
    assert_eq!(rule.end_reason(), EntryEnd::RunLimit);
    let longer = CronRule::new(CronSchedule::parse("0 * * * *").unwrap())
        .starting_after(0)
        .until(7_200_000)
        .unwrap()
        .with_max_runs(3)
        .unwrap();
    assert_eq!(longer.end_reason(), EntryEnd::Ended);
    let unbounded = CronRule::new(CronSchedule::parse("0 * * * *").unwrap());
    assert_eq!(unbounded.end_reason(), EntryEnd::Stopped);
    assert_eq!(unbounded.last_ms(), None);
}

/// An end passed before the first tick retires the entry on its first step, with the typed
/// record; the table keeps it, idle.
#[test]
fn an_entry_armed_after_its_end_retires_at_once() {
    let mut t = table();
    let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap())
        .until(120_000)
        .unwrap();
    t.add(CronEntry::scheduled(POS, rule, recorder())).unwrap();
    let mut p = pages();
    let outcome = t
        .evaluate(&Tick::new(C, 9, Some(500_000)), &mut Vec::new(), &mut p)
        .unwrap();
    assert!(outcome.fired.is_empty());
    assert_eq!(
        outcome.retired,
        [EntryRetired {
            position: POS,
            end: EntryEnd::Ended,
            seq: 9,
            at_ms: Some(500_000)
        }]
    );
    assert_eq!(t.retired_entries(), [(POS, EntryEnd::Ended)]);
    assert_eq!(t.len(), 1);
    assert_eq!(t.next_due(POS), Some(Due::Time(TimeMs::MAX)));
}

/// A view the test drives: the positions it names await a result.
struct View(BTreeSet<u32>);

impl PendingResults for View {
    fn awaiting(&self, component: u32, out: &mut BTreeSet<u32>) {
        if component == C {
            out.extend(self.0.iter().copied());
        }
    }

    /// An outbox that never held a record (`CancelOther` marks at 0).
    fn append_index(&self) -> Option<u64> {
        Some(0)
    }
}

#[derive(Debug, Clone)]
struct EntrySpec {
    expr: u8,
    misfire: u8,
    overlap: u8,
    start: Option<i64>,
    until_offset: Option<i64>,
    max_runs: Option<u64>,
}

fn entry_spec() -> impl Strategy<Value = EntrySpec> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        prop::option::of(0i64..2 * 3_600_000),
        prop::option::of(1i64..8 * 3_600_000),
        prop::option::of(1u64..8),
    )
        .prop_map(
            |(expr, misfire, overlap, start, until_offset, max_runs)| EntrySpec {
                expr,
                misfire,
                overlap,
                start,
                until_offset,
                max_runs,
            },
        )
}

/// The entry of `spec` at `position`, or `None` when admission refuses it.
fn entry_of(position: u32, spec: &EntrySpec) -> Option<CronEntry<Vec<(u32, Due)>>> {
    let (expr, _) = expression(spec.expr);
    let mut rule = CronRule::new(CronSchedule::parse(expr).unwrap())
        .with_misfire(misfire(spec.misfire))
        .unwrap();
    if let Some(s) = spec.start {
        rule = rule.starting_after(s);
        if let Some(n) = spec.max_runs {
            rule = rule.with_max_runs(n).ok()?;
        }
    }
    if let Some(o) = spec.until_offset {
        rule = rule.until(spec.start.unwrap_or(0) + o).ok()?;
    }
    let policy = match spec.overlap % 4 {
        3 => Overlap::CancelOther,
        code => overlap(code),
    };
    CronEntry::scheduled(position, rule, recorder())
        .with_overlap(policy)
        .ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// With holds, skips and retirements, the indexed evaluation agrees with the linear
    /// reference on every tick (runs, diversions, retirements), the table's invariants hold
    /// (a held entry stays indexed at its key), and a restart from the pages changes nothing.
    #[test]
    fn policies_agree_between_indexed_and_linear_evaluation_and_across_restarts(
        specs in prop::collection::vec(entry_spec(), 1..6),
        ticks in prop::collection::vec((prop_oneof![4 => 0i64..4 * MIN, 1 => 0i64..4 * 3_600_000], any::<u8>()), 1..60),
        restart_at in any::<prop::sample::Index>(),
    ) {
        let build = || {
            let mut t = table();
            for (i, spec) in specs.iter().enumerate() {
                if let Some(e) = entry_of(i as u32, spec) {
                    t.add(e).unwrap();
                }
            }
            t
        };
        let (mut indexed, mut linear) = (build(), build());
        let (mut pi, mut pl) = (pages(), pages());
        let (mut si, mut sl) = (Vec::new(), Vec::new());
        let restart = restart_at.index(ticks.len());
        let mut now = 0;
        for (i, (gap, mask)) in ticks.iter().enumerate() {
            now += gap;
            let seq = i as u64 + 1;
            let tick = Tick::new(C, seq, Some(now));
            let view = View((0..8u32).filter(|b| mask & (1 << b) != 0).collect());
            let a = indexed.evaluate_with_results(&tick, &mut si, &mut pi, None, &view).unwrap();
            let b = linear.evaluate_linear_with_results(&tick, &mut sl, &mut pl, &view).unwrap();
            prop_assert_eq!(&a, &b, "tick {} at {}", seq, now);
            prop_assert!(a.errors.is_empty(), "{:?}", a.errors);
            indexed.check_invariants().map_err(TestCaseError::fail)?;
            linear.check_invariants().map_err(TestCaseError::fail)?;
            if i == restart {
                indexed = build();
                indexed.reload(&pi).unwrap();
                prop_assert_eq!(indexed.retired_entries(), linear.retired_entries());
            }
        }
        prop_assert_eq!(si, sl);
        prop_assert_eq!(indexed.retired_entries(), linear.retired_entries());
    }
}

/// How many records the action emits for the run at `due` (0, 1 or 2: some runs have their
/// result at once, some are answered in parts).
fn records_for(due: i64) -> usize {
    ((due / MIN) % 3) as usize
}

fn multi_emitter() -> impl FnMut(&mut ccron::ActionCtx<'_, Vec<(u32, Due)>>) + Send + 'static {
    |ctx| {
        let due = ctx.due.unwrap();
        ctx.state.push((ctx.position, due));
        for _ in 0..records_for(due.time_ms().unwrap()) {
            ctx.emit("job", b"x".to_vec()).unwrap();
        }
    }
}

/// One record in the model: its outbox index, when its result arrives, whether it has one.
#[derive(Debug, Clone)]
struct ModelRecord {
    index: u64,
    arrival: i64,
    settled: bool,
}

/// The brute-force model of a table entry under a tracking policy with results arriving at
/// given times: which records await (those without a result at or above the entry's mark).
#[derive(Debug, Default)]
struct Awaits {
    records: Vec<ModelRecord>,
    /// The outbox index the next record gets.
    next_index: u64,
    /// Records below it belong to cancelled runs.
    mark: u64,
}

impl Awaits {
    fn awaiting(&self) -> bool {
        self.records
            .iter()
            .any(|r| !r.settled && r.index >= self.mark)
    }
}

/// `(result delays by minute, …)`: the delay of a record's result is
/// `delays[(due minute) % len]`; a delay at or past `NEVER` never arrives.
const NEVER: i64 = 1 << 40;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `CancelOther` (and, against the same model, `Skip` and `AllowAll`) on a table entry over
    /// random cron rules, misfire policies, tick times and result arrival times: the runs,
    /// the skips, the cancellations with their marks, the set of entries awaiting a result
    /// after every tick (through the host's `CancelledRuns` view of the real outbox) and the
    /// counters match the brute-force model. A late result of a cancelled run (applied to
    /// the outbox as any other) never changes what the entry awaits. The table is rebuilt
    /// from its pages at a random tick (nothing else of a cancellation lives in the table).
    #[test]
    fn cancel_other_matches_the_model(
        expr in any::<u8>(),
        misfire_code in any::<u8>(),
        policy in prop_oneof![Just(Overlap::CancelOther), Just(Overlap::Skip), Just(Overlap::AllowAll)],
        ticks in prop::collection::vec((prop_oneof![4 => 0i64..4 * MIN, 1 => 0i64..2 * 3_600_000], 0u8..12), 1..50),
        delays in prop::collection::vec(prop_oneof![4 => 0i64..6 * MIN, 1 => Just(NEVER)], 1..6),
        restart_at in any::<prop::sample::Index>(),
    ) {
        let (expr, matches) = expression(expr);
        let misfire = misfire(misfire_code);
        let horizon: i64 = ticks.iter().map(|t| t.0).sum::<i64>() + 1;
        let mut model = Model { instants: instants(matches, 0, horizon + 30 * 24 * 3_600_000), next: 0 };
        let rule = || CronRule::new(CronSchedule::parse(expr).unwrap())
            .starting_after(0)
            .with_misfire(misfire)
            .unwrap();
        let build = || {
            let mut t = table();
            t.add(CronEntry::scheduled(POS, rule(), multi_emitter()).with_overlap(policy).unwrap()).unwrap();
            t
        };
        let mut t = build();
        let mut p = pages();
        let mut host = Host::new();
        let mut cancels = ccron::entry::CancelledRuns::new();
        let mut m = Awaits { next_index: host.outbox.next_index(), ..Awaits::default() };
        let (mut want_skipped, mut want_cancelled, mut late_of_cancelled) = (0u64, 0u64, 0usize);
        let mut ran = Vec::new();
        let mut counted = (0u64, 0u64);
        let restart = restart_at.index(ticks.len());
        let mut now = 0;
        let awaited = |cancels: &ccron::entry::CancelledRuns, outbox: &Outbox| {
            let mut set = BTreeSet::new();
            cancels.view(outbox).awaiting(C, &mut set);
            set
        };
        for (i, (gap, trim)) in ticks.iter().enumerate() {
            now += gap;
            let seq = i as u64 + 1;
            // Results that arrived by now are applied (in index order), or the consumer's
            // progress trims every record (no result can come for them any more).
            if *trim == 0 {
                host.settle_all();
                for r in &mut m.records {
                    r.settled = true;
                }
            } else {
                for r in m.records.iter_mut().filter(|r| !r.settled && r.arrival <= now) {
                    let before = awaited(&cancels, &host.outbox);
                    let id = host.outbox.get(r.index).unwrap().id;
                    host.outbox
                        .accept_result(
                            &Policy::default(),
                            &Principal::Host,
                            &OutboxResult::unsigned(r.index, id, ResultOutcome::Answer(b"ok".to_vec())),
                        )
                        .unwrap();
                    r.settled = true;
                    if r.index < m.mark {
                        // A late result of a cancelled run: applied, and nothing changes
                        // for the entry (it neither releases the new run nor awaits again).
                        prop_assert!(cancels.covers(r.index, &id));
                        prop_assert_eq!(awaited(&cancels, &host.outbox), before, "late result of record {}", r.index);
                        late_of_cancelled += 1;
                    } else {
                        prop_assert!(!cancels.covers(r.index, &id));
                    }
                }
            }
            // The model.
            let mut want_fired = Vec::new();
            let mut want_diverted = Vec::new();
            let mut blocked = policy.tracks() && m.awaiting();
            if let Some((runs, _)) = model.step(misfire, now) {
                for r in runs {
                    let due = Due::Time(r);
                    if blocked && policy == Overlap::Skip {
                        want_diverted.push(EntryDiverted { position: POS, due, what: Diversion::Skipped });
                        want_skipped += 1;
                        continue;
                    }
                    if blocked {
                        want_diverted.push(EntryDiverted { position: POS, due, what: Diversion::Cancelled { mark: m.next_index } });
                        m.mark = m.next_index;
                        want_cancelled += 1;
                        blocked = false;
                    }
                    want_fired.push(r);
                    let delay = delays[((r / MIN) as usize) % delays.len()];
                    for _ in 0..records_for(r) {
                        m.records.push(ModelRecord { index: m.next_index, arrival: now.saturating_add(delay), settled: false });
                        m.next_index += 1;
                        blocked = policy.tracks();
                    }
                }
            }
            // The table.
            let tick = Tick::new(C, seq, Some(now));
            let mut emits = host.emits();
            let outcome = t
                .evaluate_with_results(&tick, &mut ran, &mut p, Some(&mut emits), &cancels.view(&host.outbox))
                .unwrap();
            emits.commit(&mut host.outbox).unwrap();
            cancels.note(C, &outcome.diverted);
            prop_assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
            let got: Vec<i64> = outcome.fired.iter().map(|f| f.due.unwrap().time_ms().unwrap()).collect();
            prop_assert_eq!(&got, &want_fired, "tick {} at {}", seq, now);
            prop_assert_eq!(&outcome.diverted, &want_diverted, "tick {} at {}", seq, now);
            prop_assert_eq!(host.outbox.next_index(), m.next_index);
            // What the entry awaits after the tick: the latest run's records only.
            let want_awaited: BTreeSet<u32> = if m.awaiting() { BTreeSet::from([POS]) } else { BTreeSet::new() };
            prop_assert_eq!(awaited(&cancels, &host.outbox), want_awaited, "tick {} at {}", seq, now);
            if i == restart {
                // Counters are per process: the restarted table counts from zero.
                let c = t.policy_counters();
                counted = (counted.0 + c.skipped, counted.1 + c.cancelled);
                t = build();
                t.reload(&p).unwrap();
            }
        }
        let c = t.policy_counters();
        prop_assert_eq!((counted.0 + c.skipped, counted.1 + c.cancelled), (want_skipped, want_cancelled));
        prop_assert_eq!(c.unviewed, 0);
        let cancels_of_entry = cancels.get(C, POS).map_or(0, |e| e.cancelled);
        prop_assert_eq!(cancels_of_entry, want_cancelled);
        prop_assert_eq!(cancels.get(C, POS).map_or(0, |e| e.mark), m.mark);
        if policy != Overlap::CancelOther {
            prop_assert!(cancels.is_empty());
            prop_assert_eq!(late_of_cancelled, 0);
        }
    }
}

/// Regression: a cancelled run's late result is applied but does not release the run that
/// cancelled it, and the cancelled run's records, left without a result, do not keep the entry
/// awaiting once the new run has its result (the previous view read only *which* entries had
/// a record without a result, so it could not tell them apart).
#[test]
fn a_cancelled_runs_late_result_neither_releases_nor_reopens() {
    let mut t = table();
    let rule = CronRule::new(CronSchedule::parse("* * * * *").unwrap()).starting_after(0);
    t.add(
        CronEntry::scheduled(POS, rule, multi_emitter())
            .with_overlap(Overlap::CancelOther)
            .unwrap(),
    )
    .unwrap();
    let mut p = pages();
    let mut host = Host::new();
    let mut cancels = ccron::entry::CancelledRuns::new();
    let mut ran = Vec::new();
    let mut tick = |t: &mut CronTable<_>,
                    host: &mut Host,
                    cancels: &mut ccron::entry::CancelledRuns,
                    minute: i64| {
        let mut emits = host.emits();
        let outcome = t
            .evaluate_with_results(
                &Tick::new(C, minute as u64, Some(minute * MIN)),
                &mut ran,
                &mut p,
                Some(&mut emits),
                &cancels.view(&host.outbox),
            )
            .unwrap();
        emits.commit(&mut host.outbox).unwrap();
        cancels.note(C, &outcome.diverted);
        outcome
    };
    let awaited = |cancels: &ccron::entry::CancelledRuns, host: &Host| {
        let mut set = BTreeSet::new();
        cancels.view(&host.outbox).awaiting(C, &mut set);
        set
    };
    let answer = |host: &mut Host, index: u64| {
        let id = host.outbox.get(index).unwrap().id;
        host.outbox
            .accept_result(
                &Policy::default(),
                &Principal::Host,
                &OutboxResult::unsigned(index, id, ResultOutcome::Answer(b"ok".to_vec())),
            )
            .unwrap();
    };
    // Records per run: minute % 3 (minute 1: one, 2: two, 4: one, 5: two).
    let f = host.outbox.next_index();
    // Minute 1: run A emits record f, no result.
    let o = tick(&mut t, &mut host, &mut cancels, 1);
    assert_eq!((o.fired.len(), o.diverted.len()), (1, 0));
    // Minute 2: A is cancelled, run B emits records f+1 and f+2.
    let o = tick(&mut t, &mut host, &mut cancels, 2);
    assert_eq!(o.fired.len(), 1);
    let cancelled = |minute: i64, mark: u64| EntryDiverted {
        position: POS,
        due: Due::Time(minute * MIN),
        what: Diversion::Cancelled { mark },
    };
    assert_eq!(o.diverted, [cancelled(2, f + 1)]);
    // A's late result is applied: B still awaits.
    answer(&mut host, f);
    assert!(cancels.covers(f, &host.outbox.get(f).unwrap().id));
    assert_eq!(awaited(&cancels, &host), BTreeSet::from([POS]));
    // B answered in part: still awaited.
    answer(&mut host, f + 1);
    assert_eq!(awaited(&cancels, &host), BTreeSet::from([POS]));
    // Minute 4 finds B awaited: B is cancelled (not released by A's result), run D emits f+3.
    let o = tick(&mut t, &mut host, &mut cancels, 4);
    assert_eq!(o.fired.len(), 1);
    assert_eq!(o.diverted, [cancelled(4, f + 3)]);
    // D's result: the entry awaits nothing, though B's record f+2 has no result.
    answer(&mut host, f + 3);
    assert!(
        awaited(&cancels, &host).is_empty(),
        "a cancelled run is not awaited"
    );
    // B's late result does not reopen the await.
    answer(&mut host, f + 2);
    assert!(
        awaited(&cancels, &host).is_empty(),
        "a late result never reopens"
    );
    // Minute 5 runs with nothing to cancel.
    let o = tick(&mut t, &mut host, &mut cancels, 5);
    assert_eq!((o.fired.len(), o.diverted.len()), (1, 0));
    assert_eq!(
        cancels.get(C, POS),
        Some(ccron::entry::EntryCancels {
            cancelled: 2,
            mark: f + 3
        })
    );
    assert_eq!(t.policy_counters().cancelled, 2);
}
