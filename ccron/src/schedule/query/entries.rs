//! Cron table entries in the read API (query format 5): what an operator sees of the entries
//! a ledger's [`CronTableRegistry`] holds, next to the book's schedules.
//!
//! A table entry is code (a closure action, maybe a closure rule), registered identically on
//! every replica; its replicated state is its stored next due point (the table's pages), the
//! number of times it fired (`CronLedger`'s replicated fire counts) and whether a record it
//! emitted still awaits a result (the outbox). [`table_entries`] gathers all of it, with a
//! description of every rule that can be described ([`EntryRule`], from
//! [`Schedule::describe`]) and a copy of every indexed rule that can be copied
//! ([`Schedule::clone_schedule`]) for the upcoming instants of [`describe_entry`]. Everything
//! an answer carries is a function of replicated state and the setup, so honest replicas at one
//! height answer byte-identically (the quorum reader compares bytes). Format 7 adds each
//! entry's overlap counts ([`EntrySummary::overlap_counts`]: runs its policy skipped, passes
//! it held the entry), `CronLedger`'s replicated counts next to its fire count; the counters a
//! table keeps per process ([`crate::PolicyCounters`]) are not in an answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use super::{MAX_PREVIEW, Upcoming};
use crate::due::{Due, Schedule};
use crate::entry::{EntryEnd, PendingResults, Rule};
use crate::periodic::MisfirePolicy;
use crate::registry::CronTableRegistry;
use crate::schedule::{Misfire, Overlap};
use crate::tick::{ComponentId, Tick, TimeMs};

/// A table entry's rule, as far as it can be described (format 5).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum EntryRule {
    /// A rule of user code (a closure, [`crate::CronEntry::new`]), asked on every tick: it
    /// cannot be described.
    Opaque,
    /// An indexed schedule that does not describe itself (a [`Schedule`] implemented outside
    /// ccron without [`Schedule::describe`]).
    OpaqueSchedule,
    /// A periodic schedule ([`crate::Periodic`]), with the name of its exclusion calendar when
    /// it is a [`crate::ExcludingPeriodic`].
    Periodic {
        /// The period, ms.
        period_ms: i64,
        /// Its configured first due time.
        start_ms: Option<TimeMs>,
        /// Whether its grid is aligned to the Unix epoch.
        aligned: bool,
        /// What a late tick does.
        misfire: EntryMisfire,
        /// The exclusion calendar's name, if any.
        calendar: Option<String>,
    },
    /// A cron expression ([`crate::schedule::CronRule`]).
    Cron {
        /// The expression's text.
        expression: String,
        /// Its zone's name.
        zone: String,
        /// The instant it arms after ([`crate::schedule::CronRule::starting_after`]), if any.
        after_ms: Option<TimeMs>,
        /// What a late tick does.
        misfire: Misfire,
        /// The exclusion calendar's name, if any.
        calendar: Option<String>,
        /// Its end, if any.
        until_ms: Option<TimeMs>,
        /// Its run limit, if any.
        max_runs: Option<u64>,
    },
    /// Every N sequence numbers ([`crate::EverySeq`]).
    EverySeq {
        /// The interval in sequence numbers.
        every: u64,
    },
}

/// A periodic entry's misfire policy ([`MisfirePolicy`]) on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum EntryMisfire {
    /// [`MisfirePolicy::FireOnce`].
    FireOnce,
    /// [`MisfirePolicy::SkipMissed`].
    SkipMissed,
    /// [`MisfirePolicy::FireEach`].
    FireEach {
        /// The most runs one tick may cause.
        cap: u32,
    },
    /// [`MisfirePolicy::FromTickTime`].
    FromTickTime,
}

impl From<MisfirePolicy> for EntryMisfire {
    fn from(m: MisfirePolicy) -> Self {
        match m {
            MisfirePolicy::FireOnce => EntryMisfire::FireOnce,
            MisfirePolicy::SkipMissed => EntryMisfire::SkipMissed,
            MisfirePolicy::FireEach { cap } => EntryMisfire::FireEach { cap: cap.get() },
            MisfirePolicy::FromTickTime => EntryMisfire::FromTickTime,
        }
    }
}

/// Why a retired table entry never runs again ([`EntryEnd`]) on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum EntryRetirement {
    /// [`EntryEnd::Ended`].
    Ended,
    /// [`EntryEnd::RunLimit`].
    RunLimit,
    /// [`EntryEnd::Stopped`] (and any later reason).
    Stopped,
}

impl From<EntryEnd> for EntryRetirement {
    fn from(e: EntryEnd) -> Self {
        match e {
            EntryEnd::Ended => EntryRetirement::Ended,
            EntryEnd::RunLimit => EntryRetirement::RunLimit,
            _ => EntryRetirement::Stopped,
        }
    }
}

/// Where a list of table entries continues: the entry at `(component, position)` (or the
/// first after it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, bincode::Encode, bincode::Decode,
)]
pub struct EntryCursor {
    /// The component.
    pub component: ComponentId,
    /// The position.
    pub position: u32,
}

/// One table entry in a list (format 5).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct EntrySummary {
    /// Its table's component.
    pub component: ComponentId,
    /// Its position in the table.
    pub position: u32,
    /// Its rule.
    pub rule: EntryRule,
    /// Its overlap policy ([`crate::CronEntry::with_overlap`]).
    pub overlap: Overlap,
    /// Whether it has a schedule-next callback.
    pub schedule_next: bool,
    /// Whether it has an on-remove callback.
    pub on_remove: bool,
    /// Its next due point: the one its table stores, or (never stored) the first one its
    /// rule knows before any tick (a start); `None` for a rule of user code and for a rule
    /// due at (or armed by) its first tick.
    pub next: Option<Due>,
    /// Whether its table stores a next due point for it (it was stepped at least once).
    pub stored: bool,
    /// Set when it can never run again ([`crate::CronTable::retired_entries`]).
    pub retired: Option<EntryRetirement>,
    /// Times its action ran (replicated: `CronLedger`'s fire counts).
    pub fired: u64,
    /// Whether a record it emitted has no result yet (its overlap policy's "previous run has
    /// no result yet", read from the outbox).
    pub awaiting: bool,
    /// What its overlap policy kept from happening (replicated: `CronLedger`'s counts; format
    /// 7). `None` only in an answer decoded from format 6 or 5 (a node built before format 7
    /// does not report them); [`table_entries`] always sets it.
    pub overlap_counts: Option<EntryOverlapCounts>,
}

/// A table entry's replicated overlap counts (format 7): computed in execution from each
/// pass's [`crate::TickOutcome::diverted`], so every honest replica at one height holds the
/// same numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, bincode::Encode, bincode::Decode)]
pub struct EntryOverlapCounts {
    /// Planned runs its overlap policy skipped ([`crate::entry::Diversion::Skipped`]).
    pub skipped: u64,
    /// Passes that held it, due, while its previous run had no result yet
    /// ([`crate::entry::Diversion::Held`], [`Overlap::BufferOne`]: one per pass, so a hold
    /// that lasts several ticks counts each).
    pub held: u64,
}

/// What a ledger counts per table entry (`(component, position)`), all replicated: the runs of
/// its action and what its overlap policy diverted. A bare fire count converts with zero
/// overlap counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EntryCounts {
    /// Times its action ran.
    pub fired: u64,
    /// Its overlap counts.
    pub overlap: EntryOverlapCounts,
}

impl From<u64> for EntryCounts {
    fn from(fired: u64) -> Self {
        EntryCounts {
            fired,
            overlap: EntryOverlapCounts::default(),
        }
    }
}

/// A page of table entries in a list answer (format 5).
#[derive(Debug, Clone, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct EntryPage {
    /// How many entries match the filter from its entry cursor on (all pages).
    pub matched: u64,
    /// The matching entries in this page, ascending (component, position).
    pub items: Vec<EntrySummary>,
    /// Where the next page of entries starts ([`super::ScheduleFilter::entries_from`]: the
    /// first matching entry this page does not hold), when more match than it holds. A page
    /// full of the book's schedules holds no entry and leaves this `None`: the next page
    /// ([`super::ScheduleList::next_after`]) continues with the schedules, then the entries.
    pub next: Option<EntryCursor>,
}

/// A table entry described (format 5).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct EntryDetail {
    /// The summary.
    pub summary: EntrySummary,
    /// Its next instants (at most [`MAX_PREVIEW`]), in its zone for a cron rule; empty when
    /// they cannot be computed (a rule of user code, an indexed rule that cannot be copied, a
    /// rule armed by its first tick).
    pub upcoming: Vec<Upcoming>,
    /// Whether the upcoming instants could be computed at all (see [`Self::upcoming`]).
    pub computable: bool,
}

/// One entry as gathered: its summary and a copy of its indexed rule.
struct Gathered {
    summary: EntrySummary,
    schedule: Option<Box<dyn Schedule>>,
}

/// The table entries of a ledger at one height, gathered for the read API
/// ([`table_entries`]): summaries ascending (component, position), and copies of the rules
/// for previews. `Send + Sync`: a host publishes it for its reading threads.
pub struct TableEntries {
    summaries: Vec<EntrySummary>,
    /// The copies of the indexed rules, by the summaries' index (behind a lock: a
    /// [`Schedule`] need not be `Sync`).
    schedules: Mutex<Vec<Option<Box<dyn Schedule>>>>,
}

impl std::fmt::Debug for TableEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableEntries")
            .field("entries", &self.summaries.len())
            .finish_non_exhaustive()
    }
}

impl TableEntries {
    fn new(gathered: Vec<Gathered>) -> Self {
        let (summaries, schedules) = gathered
            .into_iter()
            .map(|g| (g.summary, g.schedule))
            .unzip();
        Self {
            summaries,
            schedules: Mutex::new(schedules),
        }
    }

    /// The entries, ascending (component, position).
    pub fn summaries(&self) -> &[EntrySummary] {
        &self.summaries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.summaries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.summaries.is_empty()
    }

    fn index_of(&self, component: ComponentId, position: u32) -> Option<usize> {
        self.summaries
            .binary_search_by(|s| (s.component, s.position).cmp(&(component, position)))
            .ok()
    }
}

/// The rule of an entry as [`EntryRule`] says it.
fn rule_of<S>(rule: &Rule<S>) -> EntryRule {
    match rule {
        Rule::Custom(_) => EntryRule::Opaque,
        Rule::Periodic(p) => p.describe().unwrap_or(EntryRule::OpaqueSchedule),
        Rule::Scheduled(s) => s.describe().unwrap_or(EntryRule::OpaqueSchedule),
    }
}

/// Gathers every entry of `registry` for the read API: its rule described, its stored next
/// due point, its retirement, its counts from `counts` (`(component, position)` -> the
/// ledger's replicated [`EntryCounts`], or a bare fire count) and whether it awaits a result
/// in `results` (the ledger's outbox; `None`: no outbox, nothing awaited). O(entries + outbox
/// records per component).
pub fn table_entries<S, C: Copy + Into<EntryCounts>>(
    registry: &CronTableRegistry<S>,
    counts: &BTreeMap<(u32, u32), C>,
    results: Option<&dyn PendingResults>,
) -> TableEntries {
    let mut out = Vec::new();
    for component in registry.components() {
        let Some(table) = registry.get(component) else {
            continue;
        };
        let mut awaiting = BTreeSet::new();
        if let Some(r) = results {
            r.awaiting(component, &mut awaiting);
        }
        for position in table.positions() {
            let Some(entry) = table.get(position) else {
                continue;
            };
            let schedule = entry.rule().schedule();
            let stored = schedule.and_then(|_| table.next_due(position));
            let next = match (schedule, stored) {
                (Some(_), Some(d)) => Some(d),
                (Some(s), None) => match s.due_key(None) {
                    // Due on the first tick (with agreed time): not known before it.
                    Due::Time(TimeMs::MIN) | Due::Seq(0) => None,
                    d => Some(d),
                },
                (None, _) => None,
            };
            let counts: EntryCounts = counts
                .get(&(component, position))
                .map_or_else(EntryCounts::default, |&c| c.into());
            let summary = EntrySummary {
                component,
                position,
                rule: rule_of(entry.rule()),
                overlap: entry.overlap(),
                schedule_next: entry.has_schedule_next(),
                on_remove: entry.has_on_remove(),
                next,
                stored: stored.is_some(),
                retired: schedule
                    .and_then(|s| s.retirement(stored))
                    .map(EntryRetirement::from),
                fired: counts.fired,
                awaiting: awaiting.contains(&position),
                overlap_counts: Some(counts.overlap),
            };
            out.push(Gathered {
                summary,
                schedule: schedule.and_then(Schedule::clone_schedule),
            });
        }
    }
    TableEntries::new(out)
}

/// Up to `count` upcoming due points of `schedule` from `next` on, by stepping it on time at
/// each (the steps a tick exactly at each due point would take). Stops at the end of time, a
/// retirement, a step that does not move forward. Pure: a function of the rule and `next`.
pub fn upcoming_of(
    schedule: &dyn Schedule,
    component: ComponentId,
    next: Due,
    count: usize,
) -> Vec<Due> {
    let mut out = Vec::new();
    let mut at = next;
    let mut runs = Vec::new();
    while out.len() < count.min(MAX_PREVIEW) {
        if at == Due::Time(TimeMs::MAX) || schedule.retirement(Some(at)).is_some() {
            break;
        }
        out.push(at);
        let tick = match at {
            Due::Time(t) => Tick::new(component, 0, Some(t)),
            Due::Seq(s) => Tick::new(component, s, None),
        };
        runs.clear();
        match schedule.step(Some(at), &tick, &mut runs) {
            Some(n) if n > at => at = n,
            _ => break,
        }
    }
    out
}

/// Table entry `(component, position)` of `entries` in full, with its next `preview` instants
/// (at most [`MAX_PREVIEW`]); `None` when there is no such entry.
pub fn describe_entry(
    entries: &TableEntries,
    component: ComponentId,
    position: u32,
    preview: usize,
) -> Option<EntryDetail> {
    let i = entries.index_of(component, position)?;
    let summary = entries.summaries.get(i)?.clone();
    let schedules = entries
        .schedules
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let schedule = schedules.get(i).and_then(|s| s.as_deref());
    let computable = schedule.is_some() && summary.next.is_some();
    let upcoming = match (schedule, summary.next) {
        (Some(s), Some(next)) => upcoming_of(s, component, next, preview)
            .into_iter()
            .map(|due| Upcoming {
                due,
                utc_offset_s: due.time_ms().map_or(0, |ms| s.utc_offset_s(ms)),
            })
            .collect(),
        _ => Vec::new(),
    };
    Some(EntryDetail {
        summary,
        upcoming,
        computable,
    })
}

#[cfg(test)]
mod tests {
    use std::num::{NonZeroU32, NonZeroU64};

    use super::*;
    use crate::cron::{CronSchedule, Exclusion, ExclusionCalendar, ZoneRules};
    use crate::pages::{MemPages, PageRange};
    use crate::schedule::CronRule;
    use crate::{CronEntry, CronTable, EverySeq, Periodic};

    const DAY: i64 = 86_400_000;

    /// A schedule implemented outside ccron: no description, no copy.
    #[derive(Debug)]
    struct Foreign;

    impl Schedule for Foreign {
        fn due_key(&self, stored: Option<Due>) -> Due {
            stored.unwrap_or(Due::Seq(0))
        }
        fn step(&self, _: Option<Due>, tick: &Tick, runs: &mut Vec<Due>) -> Option<Due> {
            runs.push(Due::Seq(tick.bft_sequence_num));
            Some(Due::Seq(tick.bft_sequence_num + 1))
        }
        fn fingerprint(&self) -> Vec<u8> {
            b"foreign".to_vec()
        }
    }

    /// Entries awaiting a result, as an outbox would say.
    struct Awaiting(Vec<(ComponentId, u32)>);

    impl PendingResults for Awaiting {
        fn awaiting(&self, component: ComponentId, out: &mut BTreeSet<u32>) {
            out.extend(
                self.0
                    .iter()
                    .filter(|(c, _)| *c == component)
                    .map(|(_, p)| *p),
            );
        }
    }

    fn weekends() -> ExclusionCalendar {
        ExclusionCalendar::new("weekends", vec![Exclusion::Weekdays { mask: 0b100_0001 }]).unwrap()
    }

    /// Component 1 holds one entry of every rule kind; component 2 one periodic entry.
    fn registry() -> CronTableRegistry<()> {
        let mut t = CronTable::with_persistence(1, PageRange::new(0, 8).unwrap(), 16);
        t.add(
            CronEntry::new(0, |_| true, |_| {})
                .with_schedule_next(|_| {})
                .with_on_remove(|_, _| {}),
        )
        .unwrap();
        let fire_each = MisfirePolicy::FireEach {
            cap: NonZeroU32::new(3).unwrap(),
        };
        t.add(CronEntry::periodic(
            1,
            Periodic::every_ms(60_000)
                .unwrap()
                .starting_at(1_000)
                .with_misfire(fire_each),
            |_| {},
        ))
        .unwrap();
        let grid = Periodic::every_ms(DAY)
            .unwrap()
            .aligned()
            .excluding(weekends())
            .unwrap();
        t.add(CronEntry::scheduled(2, grid, |_| {})).unwrap();
        let zone = ZoneRules::fixed("Plus2", 7_200).unwrap();
        let cron = CronRule::new(CronSchedule::parse_in("0 9 * * *", zone).unwrap())
            .starting_after(0)
            .until(10 * DAY)
            .unwrap();
        t.add(
            CronEntry::scheduled(3, cron, |_| {})
                .with_overlap(Overlap::Skip)
                .unwrap(),
        )
        .unwrap();
        t.add(CronEntry::scheduled(
            4,
            EverySeq::new(NonZeroU64::new(5).unwrap()),
            |_| {},
        ))
        .unwrap();
        t.add(CronEntry::periodic(
            5,
            Periodic::every_ms(1_000).unwrap(),
            |_| {},
        ))
        .unwrap();
        t.add(CronEntry::scheduled(6, Foreign, |_| {})).unwrap();
        let mut r = CronTableRegistry::new();
        r.register(t).unwrap();
        let mut t2 = CronTable::with_persistence(2, PageRange::new(8, 8).unwrap(), 4);
        t2.add(CronEntry::periodic(
            0,
            Periodic::every_ms(5_000).unwrap().starting_at(0),
            |_| {},
        ))
        .unwrap();
        r.register(t2).unwrap();
        r
    }

    fn gathered(r: &CronTableRegistry<()>) -> TableEntries {
        let fires = BTreeMap::from([((1, 1), 4), ((1, 0), 9), ((9, 9), 1)]);
        table_entries(r, &fires, Some(&Awaiting(vec![(1, 3), (2, 7)])))
    }

    fn summary(e: &TableEntries, component: u32, position: u32) -> &EntrySummary {
        &e.summaries()[e.index_of(component, position).unwrap()]
    }

    #[test]
    fn every_rule_kind_is_described() {
        let e = gathered(&registry());
        let keys: Vec<(u32, u32)> = e
            .summaries()
            .iter()
            .map(|s| (s.component, s.position))
            .collect();
        assert_eq!(
            keys,
            [
                (1, 0),
                (1, 1),
                (1, 2),
                (1, 3),
                (1, 4),
                (1, 5),
                (1, 6),
                (2, 0)
            ]
        );
        assert_eq!(summary(&e, 1, 0).rule, EntryRule::Opaque);
        assert_eq!(
            summary(&e, 1, 1).rule,
            EntryRule::Periodic {
                period_ms: 60_000,
                start_ms: Some(1_000),
                aligned: false,
                misfire: EntryMisfire::FireEach { cap: 3 },
                calendar: None,
            }
        );
        assert_eq!(
            summary(&e, 1, 2).rule,
            EntryRule::Periodic {
                period_ms: DAY,
                start_ms: None,
                aligned: true,
                misfire: EntryMisfire::FireOnce,
                calendar: Some("weekends".into()),
            }
        );
        assert_eq!(
            summary(&e, 1, 3).rule,
            EntryRule::Cron {
                expression: "0 9 * * *".into(),
                zone: "Plus2".into(),
                after_ms: Some(0),
                misfire: Misfire::FireOnce,
                calendar: None,
                until_ms: Some(10 * DAY),
                max_runs: None,
            }
        );
        assert_eq!(summary(&e, 1, 4).rule, EntryRule::EverySeq { every: 5 });
        assert_eq!(summary(&e, 1, 6).rule, EntryRule::OpaqueSchedule);
    }

    #[test]
    fn callbacks_overlap_fires_and_awaiting_are_reported() {
        let e = gathered(&registry());
        let opaque = summary(&e, 1, 0);
        assert!(opaque.schedule_next && opaque.on_remove);
        assert_eq!(opaque.fired, 9);
        let periodic = summary(&e, 1, 1);
        assert!(!periodic.schedule_next && !periodic.on_remove);
        assert_eq!(periodic.fired, 4);
        assert_eq!(summary(&e, 1, 2).fired, 0);
        assert_eq!(summary(&e, 1, 3).overlap, Overlap::Skip);
        assert_eq!(summary(&e, 1, 1).overlap, Overlap::AllowAll);
        let awaiting: Vec<(u32, u32)> = e
            .summaries()
            .iter()
            .filter(|s| s.awaiting)
            .map(|s| (s.component, s.position))
            .collect();
        // (2, 7) names no entry.
        assert_eq!(awaiting, [(1, 3)]);
        // Without an outbox nothing awaits.
        let none = table_entries(&registry(), &BTreeMap::<(u32, u32), u64>::new(), None);
        assert!(none.summaries().iter().all(|s| !s.awaiting && s.fired == 0));
    }

    #[test]
    fn next_is_the_stored_point_or_the_start_and_retirement_follows_it() {
        let mut r = registry();
        let e = gathered(&r);
        // Never stepped: the start where the rule knows one, nothing for code and for
        // rules armed by their first tick.
        let next = |e: &TableEntries, c, p| (summary(e, c, p).next, summary(e, c, p).stored);
        assert_eq!(next(&e, 1, 0), (None, false));
        assert_eq!(next(&e, 1, 1), (Some(Due::Time(1_000)), false));
        assert_eq!(next(&e, 1, 3), (Some(Due::Time(7 * 3_600_000)), false));
        assert_eq!(
            next(&e, 1, 4),
            (None, false),
            "due at its first tick, whichever"
        );
        assert_eq!(next(&e, 1, 5), (None, false));
        assert!(e.summaries().iter().all(|s| s.retired.is_none()));
        // A tick at 12 days steps them: stored points from then on; the cron rule's end
        // passed, so it retired.
        let mut pages = MemPages::new(4096, 16);
        r.evaluate(&Tick::new(1, 3, Some(12 * DAY)), &mut (), &mut pages)
            .unwrap();
        let e = gathered(&r);
        assert_eq!(next(&e, 1, 1), (Some(Due::Time(12 * DAY + 1_000)), true));
        assert_eq!(next(&e, 1, 5), (Some(Due::Time(12 * DAY + 1_000)), true));
        assert_eq!(next(&e, 1, 4), (Some(Due::Seq(8)), true));
        let seq: Vec<Due> = describe_entry(&e, 1, 4, 3)
            .unwrap()
            .upcoming
            .iter()
            .map(|u| u.due)
            .collect();
        assert_eq!(seq, [Due::Seq(8), Due::Seq(13), Due::Seq(18)]);
        assert_eq!(
            next(&e, 1, 3),
            (Some(Due::Time(TimeMs::MAX)), true),
            "the end of time"
        );
        assert_eq!(summary(&e, 1, 3).retired, Some(EntryRetirement::Ended));
        assert_eq!(summary(&e, 1, 1).retired, None);
        // The other table saw no tick.
        assert_eq!(next(&e, 2, 0), (Some(Due::Time(0)), false));
    }

    #[test]
    fn upcoming_instants_follow_each_rule() {
        let e = gathered(&registry());
        let up = |c, p, n| describe_entry(&e, c, p, n).unwrap();
        let times = |d: &EntryDetail| -> Vec<i64> {
            d.upcoming.iter().filter_map(|u| u.due.time_ms()).collect()
        };
        let periodic = up(1, 1, 3);
        assert!(periodic.computable);
        assert_eq!(times(&periodic), [1_000, 61_000, 121_000]);
        assert!(periodic.upcoming.iter().all(|u| u.utc_offset_s == 0));
        // The cron rule in its zone: 09:00 at +02:00 is 07:00 UTC, daily, until day 10.
        let cron = up(1, 3, 32);
        let want: Vec<i64> = (0..10).map(|d| d * DAY + 7 * 3_600_000).collect();
        assert_eq!(times(&cron), want);
        assert!(cron.upcoming.iter().all(|u| u.utc_offset_s == 7_200));
        // Code, rules due at or armed by their first tick, a foreign schedule: not
        // computable.
        for p in [0, 4, 5, 6] {
            let d = up(1, p, 3);
            assert!(!d.computable && d.upcoming.is_empty(), "position {p}");
        }
        // At most MAX_PREVIEW; an absent entry is None.
        assert_eq!(up(2, 0, 1_000).upcoming.len(), MAX_PREVIEW);
        assert!(describe_entry(&e, 1, 99, 3).is_none());
        assert!(describe_entry(&e, 3, 0, 3).is_none());
    }

    #[test]
    fn an_excluding_grid_skips_the_calendar_days() {
        let mut r = registry();
        let mut pages = MemPages::new(4096, 16);
        // Armed on day 0 (Thursday 1970-01-01): its first point is the next allowed one.
        r.evaluate(&Tick::new(1, 1, Some(1)), &mut (), &mut pages)
            .unwrap();
        let e = gathered(&r);
        let d = describe_entry(&e, 1, 2, 6).unwrap();
        let days: Vec<i64> = d
            .upcoming
            .iter()
            .filter_map(|u| u.due.time_ms())
            .map(|t| t / DAY)
            .collect();
        // Days 2 and 3 are Saturday and Sunday.
        assert_eq!(days, [1, 4, 5, 6, 7, 8]);
    }
}
