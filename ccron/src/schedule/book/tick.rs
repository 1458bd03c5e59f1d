//! A committed tick: the due schedules in canonical order within the fire budget, each stepped
//! through its owed runs and its misfire plan, with its handler run for every planned occurrence.

use std::collections::BTreeSet;

use super::counters::PlanNote;
use super::due::DueKey;
use super::overlap::Diverted;
use super::{
    FailedRun, FireRecord, HandlerCtx, Handlers, PendingRetry, Record, RunCounters, RunEntry,
    RunOutcome, ScheduleError, ScheduleRequest, Scheduler, TickReport,
};
use crate::authz::Principal;
use crate::due::Due;
use crate::outbox::{EmitBudget, OccurrenceId, Outbox, OutboxRecord};
use crate::tick::{ComponentId, Tick, TimeMs};

/// Due ids a tick warms ([`Scheduler::warm`]) ahead of stepping them: few enough that what
/// it reads stays in the cache until the steps use it.
const WARM_CHUNK: usize = 32;

impl Scheduler {
    /// Up to `budget` due schedule ids in canonical order: priority (high first), then due
    /// key (time keys before sequence keys), then id. Also whether more were due. A
    /// [`Timing::AtOrSeq`](super::Timing::AtOrSeq) schedule reached by both its keys is listed once, at the first.
    /// Last, the last entry listed from the index's front (the first level's time keys):
    /// every entry up to it is listed ([`DueIndex::take_front`](super::due::DueIndex::take_front)).
    fn due_ids(&self, tick: &Tick, budget: usize) -> (Vec<u64>, bool, Option<DueKey>) {
        let mut out = Vec::new();
        let mut front = None;
        for (level, &inv) in self.levels.keys().enumerate() {
            // A record has at most one time key ([`Self::keys_of`]) and all its keys at its own
            // priority level: the time range lists distinct ids, and only sequence keys (an
            // `AtOrSeq`'s, a manual run's) can name an id this level already listed. The set of
            // listed ids is built only when a sequence key is reached.
            let level_start = out.len();
            if let Some(now) = tick.agreed_time_ms {
                let r = self
                    .index
                    .range((inv, Due::Time(TimeMs::MIN), 0)..=(inv, Due::Time(now), u64::MAX));
                for key in r {
                    if out.len() == budget {
                        return (out, true, front);
                    }
                    out.push(key.2);
                    if level == 0 {
                        front = Some(*key);
                    }
                }
            }
            let r = self
                .index
                .range((inv, Due::Seq(0), 0)..=(inv, Due::Seq(tick.bft_sequence_num), u64::MAX));
            let mut seen: Option<BTreeSet<u64>> = None;
            for &(_, _, id) in r {
                let seen = seen.get_or_insert_with(|| out[level_start..].iter().copied().collect());
                if seen.contains(&id) {
                    continue;
                }
                if out.len() == budget {
                    return (out, true, front);
                }
                seen.insert(id);
                out.push(id);
            }
        }
        (out, false, front)
    }

    /// The largest record one handler run may emit ([`HandlerCtx::emit`] refuses larger ones):
    /// an effect name of [`Limits::max_name_bytes`](super::Limits::max_name_bytes), a payload
    /// of [`Limits::max_payload_bytes`](super::Limits::max_payload_bytes) and a topic and type
    /// of [`Limits::max_topic_bytes`](super::Limits::max_topic_bytes) each, capped by the
    /// outbox's own record limit.
    pub fn emit_bound(&self, outbox: &Outbox) -> usize {
        let l = &self.limits;
        l.max_name_bytes
            .saturating_add(l.max_payload_bytes)
            .saturating_add(l.max_topic_bytes.saturating_mul(2))
            .min(outbox.limits().max_record_bytes)
    }

    /// What one handler run may emit and reserves before it starts: the configured budget
    /// ([`Scheduler::with_emit_budget`]), by default one record of [`Scheduler::emit_bound`].
    pub fn run_budget(&self, outbox: &Outbox) -> EmitBudget {
        self.emit_budget
            .unwrap_or_else(|| EmitBudget::new(1, self.emit_bound(outbox)))
    }

    /// Runs every due schedule (within the budget) on the committed `tick`: handlers get
    /// `state`, may emit one record each into `outbox`, and may queue book changes.
    ///
    /// The budget ([`Limits::budget_per_tick`](super::Limits::budget_per_tick)) bounds the handler runs (and the schedules
    /// stepped). Schedules are taken in the canonical order; one whose catch-up does not fit
    /// runs what fits and keeps the rest owed, taken first (by its earlier due point) on the
    /// next ticks, so nothing is lost or run twice. Schedules created by handlers during the
    /// tick wait for the next tick.
    pub fn on_tick<S>(
        &mut self,
        tick: &Tick,
        state: &mut S,
        handlers: &mut Handlers<S>,
        outbox: &mut Outbox,
    ) -> TickReport {
        let mut report = TickReport::default();
        if !self.parked.is_empty() {
            report.unparked = self.unpark_registered(handlers);
        }
        // A zero budget would starve every schedule forever: treat it as 1.
        let mut left = self.limits.budget_per_tick.max(1);
        let (ids, _, front) = self.due_ids(tick, left);
        if ids.is_empty() {
            // Nothing due, nothing ran: nothing can be left over (the idle tick's only cost is
            // the due index probe).
            return report;
        }
        // Handlers may queue requests naming handlers; the set never changes during a tick.
        let names: BTreeSet<String> = handlers.map.keys().cloned().collect();
        report.fired.reserve(ids.len());
        // The listed entries at the index's front leave its tree at once; the runs remove
        // them from there (a flag each) instead of from the tree one by one.
        if let Some(last) = front {
            self.index.take_front(&last);
        }
        'ids: for chunk in ids.chunks(WARM_CHUNK) {
            let slots = self.warm(chunk);
            for (&id, &slot) in chunk.iter().zip(&slots) {
                if left == 0 {
                    break 'ids;
                }
                self.step_schedule(
                    id,
                    slot,
                    tick,
                    &mut left,
                    &names,
                    state,
                    handlers,
                    outbox,
                    &mut report,
                );
            }
        }
        // What no run removed (held back by the budget or the outbox, or due again).
        self.index.put_back();
        report.carried_over = !self.due_ids(tick, 1).0.is_empty();
        report
    }

    /// Reads what stepping each of `ids` first touches (its record and handler name, its
    /// placement), changing nothing: independent lookups in one tight pass overlap their cache
    /// misses, which the steps, one record at a time, would take one by one. Returns each
    /// id's slot in the records (a hint: [`Records::locate`](super::records::Records::locate)),
    /// so that its step does not search the chunk table again.
    fn warm(&self, ids: &[u64]) -> [u32; WARM_CHUNK] {
        let mut pages = [u32::MAX; WARM_CHUNK];
        let mut slots = [super::records::NONE; WARM_CHUNK];
        let seen = self.records.warm(ids, &mut pages, &mut slots);
        std::hint::black_box(
            seen + self
                .placement
                .warm_pages(&pages[..ids.len().min(WARM_CHUNK)]),
        );
        slots
    }

    /// Unparks every parked schedule whose handler is registered (a build carrying it ticks):
    /// each is due again at its kept due point. O(parked handler names) when none returns.
    /// Returns how many were unparked.
    fn unpark_registered<S>(&mut self, handlers: &Handlers<S>) -> usize {
        let back: Vec<String> = self
            .parked
            .keys()
            .filter(|name| handlers.contains(name))
            .cloned()
            .collect();
        let mut unparked = 0;
        for name in back {
            let ids: Vec<u64> = self
                .parked
                .get(&name)
                .map(|ids| ids.iter().copied().collect())
                .unwrap_or_default();
            tracing::info!(
                component = self.component,
                handler = %name,
                runs = ids.len(),
                "parked schedules resume: their handler is registered"
            );
            for id in ids {
                self.unpark(id);
                unparked += 1;
            }
        }
        unparked
    }

    /// Steps schedule `id` (taken from the due snapshot) within `left` runs: a pending retry
    /// first (one attempt), else its owed runs, then, when they are done and its next point is
    /// reached too, a fresh plan. A schedule whose handler this build does not register is
    /// parked instead: nothing is consumed. A failed run is settled by the schedule's run
    /// policy (a retry, or a dead letter); the rest of a catch-up it cut short stays owed,
    /// behind the retry. `slot`: where the records hold it, as the read-ahead found it (a
    /// checked hint: [`Records::locate`](super::records::Records::locate)).
    #[allow(clippy::too_many_arguments)]
    fn step_schedule<S>(
        &mut self,
        id: u64,
        slot: u32,
        tick: &Tick,
        left: &mut usize,
        names: &BTreeSet<String>,
        state: &mut S,
        handlers: &mut Handlers<S>,
        outbox: &mut Outbox,
        report: &mut TickReport,
    ) {
        let emit_bound = self.emit_bound(outbox);
        let budget = self.run_budget(outbox);
        let mut env = Env {
            tick,
            names,
            emit_bound,
            budget,
            state,
            handlers,
            outbox,
            report,
        };
        loop {
            // A handler earlier in this tick may have cancelled, paused or moved it.
            let Some(rec) = self.records.get_at(id, slot) else {
                return;
            };
            let taken = Self::keys_of(id, rec)
                .into_iter()
                .flatten()
                .any(|key| self.index.contains(&key) && key.1.reached_by(tick));
            if *left == 0 || !taken {
                return;
            }
            // Checked before anything moves: a missing handler never consumes a run.
            if !names.contains(&*rec.def.handler) {
                tracing::warn!(
                    component = self.component,
                    id,
                    handler = %rec.def.handler,
                    "schedule parked: its handler is not registered in this build"
                );
                self.park(id);
                env.report.parked.push(id);
                return;
            }
            // Each run may emit one record of up to `emit_bound` bytes: run only what the outbox
            // can take now, so that no emit meets a full outbox (the rest stays due or owed,
            // exactly as with the fire budget, until the consumer trims the outbox).
            let room = env.outbox.room_for_run(budget).min(*left);
            if room == 0 {
                env.report.outbox_full = true;
                return;
            }
            // Likewise within its owner's outbox quota: the schedule waits, still due, while
            // its owner's pending records cannot take a run's budget (counted and traced by the
            // outbox); other owners' schedules run as before.
            let quota = self.policy.quota_for(&rec.owner);
            let Ok(owner_room) = env.outbox.owner_room(budget, &rec.owner, quota) else {
                return;
            };
            let room = room.min(owner_room);
            if let Some(retry) = rec.retry {
                *left -= 1;
                if !self.retry_attempt(id, retry, &mut env) {
                    return;
                }
                // Succeeded: owed runs or the next occurrence may be due too.
                continue;
            }
            if super::manual::manual_due(rec) {
                *left -= 1;
                if !self.manual_attempt(id, &mut env) {
                    return;
                }
                continue;
            }
            if super::overlap::buffered_key(rec.overlap()).is_some() {
                // The awaited run has its result: the oldest buffered occurrence runs.
                *left -= 1;
                if !self.buffered_attempt(id, &mut env) {
                    return;
                }
                continue;
            }
            if rec.owed.is_none() && rec.def.timing.is_one_shot() {
                // The one-shot plan without the general plan's vector of runs.
                let Some(due) = rec.next else { return };
                let (run, note) = Self::plan_one_shot(id, rec, due, tick);
                let first_run = rec.runs;
                self.run_one_shot(id, slot, run, note, first_run, left, &mut env);
                return;
            }
            let was_owed = rec.owed.is_some();
            let mut note = PlanNote::default();
            let (runs, next, owed_first) = match rec.owed {
                Some((from_ms, last_ms)) => {
                    let (runs, rest) = self.owed_runs(id, rec, from_ms, last_ms, room);
                    (runs, rec.next, rest.map(|r| (r, last_ms)))
                }
                None => {
                    let Some(due) = rec.next else { return };
                    let (mut runs, next, found) = self.plan(id, rec, due, tick);
                    note = found;
                    let rest = if runs.len() > room {
                        runs.split_off(room)
                    } else {
                        Vec::new()
                    };
                    let owed = match (rest.first(), rest.last()) {
                        (Some(Due::Time(a)), Some(Due::Time(b))) => Some((*a, *b)),
                        _ => None,
                    };
                    (runs, next, owed)
                }
            };
            let first_run = rec.runs;
            if rec.def.timing.is_one_shot() {
                let run = runs.first().copied();
                self.run_one_shot(id, slot, run, note, first_run, left, &mut env);
                return;
            }
            let handler_name = rec.def.handler.clone();
            let owner = rec.owner;
            self.unindex(id);
            if let Some(r) = self.records.get_mut(&id) {
                r.next = next;
                r.owed = owed_first;
                r.runs = first_run.saturating_add(runs.len() as u64);
            }
            self.reindex(id);
            self.touch(id);
            self.count(id, note.counters());
            // Its end or run limit reached: retired (its runs planned now still run).
            self.retire_if_done(id, tick.bft_sequence_num, tick.agreed_time_ms);
            if runs.is_empty() {
                env.report.skipped.push(id);
                return;
            }
            for i in 0..runs.len() {
                let run_due = runs[i];
                let occurrence = first_run.saturating_add(i as u64);
                *left = left.saturating_sub(1);
                let Some(rec) = self.records.get(&id) else {
                    return;
                };
                // The previous run has no result yet: the overlap policy decides (the budget
                // unit taken for it is not given back: a deterministic bound). Only
                // `CancelOther` lets the occurrence run (the previous run cancelled).
                if rec.overlap().blocks()
                    && !self.divert_reported(id, run_due, occurrence, env.report)
                {
                    continue;
                }
                let Some(rec) = self.records.get(&id) else {
                    return;
                };
                let attempt = run_phase(self.component, rec, id, run_due, occurrence, 1, &mut env);
                let outcome = attempt.outcome;
                if !outcome.is_ok() {
                    // The runs after it in this catch-up wait behind its retry, owed (they are
                    // consecutive time occurrences, as owed runs are).
                    let rest = match (runs.get(i + 1), owed_first, runs.last()) {
                        (Some(Due::Time(a)), Some((_, last)), _) => Some((*a, last)),
                        (Some(Due::Time(a)), None, Some(Due::Time(b))) => Some((*a, *b)),
                        _ => owed_first,
                    };
                    self.unindex(id);
                    if let Some(r) = self.records.get_mut(&id) {
                        r.runs = occurrence.saturating_add(1);
                        r.owed = rest;
                    }
                    self.fail_attempt(id, run_due, occurrence, 1, outcome, &mut env);
                    return;
                }
                self.commit_attempt(attempt, id, run_due, occurrence, 1, owner, true, &mut env);
                // A run that cancelled, paused or replaced its own schedule ends its catch-up
                // (runs still owed are dropped too).
                if self
                    .records
                    .get(&id)
                    .is_none_or(|r| r.paused || r.def.handler != handler_name)
                {
                    if self.records.get(&id).is_some_and(|r| r.owed.is_some()) {
                        self.unindex(id);
                        if let Some(r) = self.records.get_mut(&id) {
                            r.owed = None;
                        }
                        self.reindex(id);
                    }
                    return;
                }
            }
            // Only a finished owed catch-up can leave the schedule due again in this tick (its
            // resume point may be reached): plan it now, as an unbudgeted tick would have.
            if !was_owed {
                return;
            }
        }
    }

    /// Runs one-shot `id` (due and planned: `run` its occurrence, `None` when its misfire
    /// policy dropped it; `note` what the plan found; `first_run` its run count): the record
    /// leaves the book with its run and comes back only when the run fails.
    ///
    /// The handler runs on the record where it is held (a run sees nothing of the book: its
    /// requests are applied after it, and a failed run's record is put back as if it had
    /// left): a successful run's record is then dropped in place instead of being moved out
    /// first (a copy of the whole record per run). `slot`: its slot hint, as in
    /// [`Self::step_schedule`].
    #[allow(clippy::too_many_arguments)]
    fn run_one_shot<S>(
        &mut self,
        id: u64,
        slot: u32,
        run: Option<Due>,
        note: PlanNote,
        first_run: u64,
        left: &mut usize,
        env: &mut Env<'_, '_, S>,
    ) {
        // Counted in the book's totals only (the record leaves the book; a failed run brings
        // it back with its own counters): what `count` does for an absent id, without
        // looking it up.
        self.totals = self.totals.plus(note.counters());
        let Some(due) = run else {
            // Dropped by its misfire policy (an expired deadline): spent.
            self.drop_record(id, slot);
            env.report.skipped.push(id);
            return;
        };
        let Some(rec) = self.records.get_at(id, slot) else {
            return;
        };
        *left -= 1;
        let attempt = run_phase(self.component, rec, id, due, first_run, 1, env);
        if attempt.outcome.is_ok() {
            // The one-shot leaves the book (its key is free for the run's requests, as a
            // spent schedule's).
            let Some(owner) = self.drop_record(id, slot) else {
                return;
            };
            self.commit_attempt(attempt, id, due, first_run, 1, owner, false, env);
        } else {
            // As if it had left with its run: taken out, then put back with the run counted.
            let Some(mut taken_rec) = self.take_record(id) else {
                return;
            };
            taken_rec.next = None;
            taken_rec.owed = None;
            taken_rec.runs = first_run.saturating_add(1);
            self.restore_record(id, taken_rec);
            self.fail_attempt(id, due, first_run, 1, attempt.outcome, env);
        }
    }
}

/// What one tick's runs share.
struct Env<'a, 'b, S> {
    tick: &'a Tick,
    names: &'a BTreeSet<String>,
    emit_bound: usize,
    budget: EmitBudget,
    state: &'b mut S,
    handlers: &'b mut Handlers<S>,
    outbox: &'b mut Outbox,
    report: &'b mut TickReport,
}

/// One attempt's outcome and its staged effects.
struct Attempt {
    outcome: RunOutcome,
    staged: Vec<OutboxRecord>,
    requests: Vec<ScheduleRequest>,
    emit_error: Option<ScheduleError>,
}

/// Runs attempt `attempt` of occurrence `occurrence` (nominal `due`) of record `rec` (id `id`),
/// isolated ([`Handlers::run`]): nothing of the book or the outbox changes here; the caller
/// commits the staged effects of a successful attempt or settles a failed one.
fn run_phase<S>(
    component: ComponentId,
    rec: &Record,
    id: u64,
    due: Due,
    occurrence: u64,
    attempt: u32,
    env: &mut Env<'_, '_, S>,
) -> Attempt {
    let mut ctx = HandlerCtx {
        tick: env.tick,
        id,
        due,
        occurrence: OccurrenceId::new(component, id, occurrence),
        attempt,
        payload: &rec.def.payload,
        topic: rec.def.topic.as_deref(),
        kind: rec.def.kind.as_deref(),
        state: &mut *env.state,
        outbox: &*env.outbox,
        staged: Vec::new(),
        budget: env.budget,
        emit_bound: env.emit_bound,
        emit_error: None,
        requests: Vec::new(),
    };
    // The handler set never changes during a tick and the name was checked: always `Some`.
    let outcome = env
        .handlers
        .run(&rec.def.handler, &mut ctx)
        .unwrap_or(RunOutcome::Failed { code: 0 });
    Attempt {
        outcome,
        staged: std::mem::take(&mut ctx.staged),
        requests: std::mem::take(&mut ctx.requests),
        emit_error: ctx.emit_error.take(),
    }
}

impl Scheduler {
    /// Runs the pending retry `retry` of record `id` (one attempt); returns whether it
    /// succeeded. A one-shot leaves the book for the attempt, as for its first run.
    fn retry_attempt<S>(&mut self, id: u64, retry: PendingRetry, env: &mut Env<'_, '_, S>) -> bool {
        let PendingRetry {
            due,
            occurrence,
            attempt,
            ..
        } = retry;
        let one_shot = self
            .records
            .get(&id)
            .is_some_and(|r| r.def.timing.is_one_shot());
        if one_shot {
            let Some(mut rec) = self.take_record(id) else {
                return false;
            };
            rec.retry = None;
            let run = run_phase(self.component, &rec, id, due, occurrence, attempt, env);
            let outcome = run.outcome;
            if outcome.is_ok() {
                // Spent, unless it still keeps dead runs of its own.
                let owner = rec.owner;
                let kept = !rec.dead.is_empty();
                if kept {
                    self.restore_record(id, rec);
                    self.reindex(id);
                }
                self.commit_attempt(run, id, due, occurrence, attempt, owner, kept, env);
                return true;
            }
            self.restore_record(id, rec);
            self.fail_attempt(id, due, occurrence, attempt, outcome, env);
            return false;
        }
        self.unindex(id);
        if let Some(r) = self.records.get_mut(&id) {
            r.retry = None;
        }
        let Some(rec) = self.records.get(&id) else {
            return false;
        };
        let owner = rec.owner;
        let run = run_phase(self.component, rec, id, due, occurrence, attempt, env);
        let outcome = run.outcome;
        if outcome.is_ok() {
            self.reindex(id);
            self.touch(id);
            self.commit_attempt(run, id, due, occurrence, attempt, owner, true, env);
            return true;
        }
        self.fail_attempt(id, due, occurrence, attempt, outcome, env);
        false
    }

    /// Runs record `id`'s next manual run (a trigger, else the backfill's next occurrence;
    /// `manual.rs`): one attempt, settled like a regular run's. Returns whether it succeeded.
    fn manual_attempt<S>(&mut self, id: u64, env: &mut Env<'_, '_, S>) -> bool {
        self.extra_attempt(id, env, Self::next_manual)
    }

    /// Runs record `id`'s oldest buffered occurrence (`overlap.rs`: nothing awaited any
    /// more): one attempt, settled like a regular run's. Returns whether it succeeded.
    fn buffered_attempt<S>(&mut self, id: u64, env: &mut Env<'_, '_, S>) -> bool {
        self.extra_attempt(id, env, Self::take_buffered)
    }

    /// One attempt of the occurrence `take` yields for record `id` (a manual or a buffered
    /// run, outside the regular phase): settled like a regular run's. Returns whether it
    /// succeeded; with nothing to take, the record is reindexed unchanged.
    fn extra_attempt<S>(
        &mut self,
        id: u64,
        env: &mut Env<'_, '_, S>,
        take: fn(&mut Self, u64) -> Option<(Due, u64)>,
    ) -> bool {
        self.unindex(id);
        let Some((due, occurrence)) = take(self, id) else {
            self.reindex(id);
            return false;
        };
        self.touch(id);
        let Some(rec) = self.records.get(&id) else {
            return false;
        };
        let owner = rec.owner;
        let run = run_phase(self.component, rec, id, due, occurrence, 1, env);
        let outcome = run.outcome;
        if outcome.is_ok() {
            self.reindex(id);
            self.commit_attempt(run, id, due, occurrence, 1, owner, true, env);
            return true;
        }
        self.fail_attempt(id, due, occurrence, 1, outcome, env);
        false
    }

    /// [`Self::divert`], reported in `report`. Returns whether the occurrence runs (the
    /// previous run cancelled).
    fn divert_reported(
        &mut self,
        id: u64,
        due: Due,
        occurrence: u64,
        report: &mut TickReport,
    ) -> bool {
        match self.divert(id, due, occurrence) {
            Diverted::Buffered => report.overlap_buffered.push((id, occurrence)),
            Diverted::Skipped => report.overlap_skipped.push((id, occurrence)),
            Diverted::Cancelled { previous } => {
                report.overlap_cancelled.push((id, previous, occurrence));
                return true;
            }
            Diverted::Overflowed => {
                report.overlap_skipped.push((id, occurrence));
                report.errors.push(ScheduleError::BufferFull {
                    id,
                    occurrence,
                    bound: super::MAX_BUFFERED,
                });
            }
        }
        false
    }

    /// Commits a successful attempt: appends its staged record, applies the requests it queued
    /// (as the schedule's `owner`), reports it. `kept`: whether the record may be in the book
    /// (`false` for a one-shot that left it: its counters and history go with it, and the run
    /// counts in the book's totals only, without a lookup).
    #[allow(clippy::too_many_arguments)]
    fn commit_attempt<S>(
        &mut self,
        run: Attempt,
        id: u64,
        due: Due,
        occurrence: u64,
        attempt: u32,
        owner: Principal,
        kept: bool,
        env: &mut Env<'_, '_, S>,
    ) {
        if let Some(e) = run.emit_error {
            // A deterministic outcome (the same on every replica): reported, counted,
            // traced; the run itself happened.
            self.emit_failures = self.emit_failures.saturating_add(1);
            tracing::warn!(id, occurrence, error = %e, "handler emit refused");
            env.report.errors.push(e);
        }
        let fired = RunCounters {
            fired: 1,
            ..RunCounters::default()
        };
        if kept {
            self.count(id, fired);
        } else {
            self.totals = self.totals.plus(fired);
        }
        let mut emitted = None;
        let mut appended = 0u32;
        for record in run.staged {
            match env.outbox.append_as(record, owner) {
                Ok(index) => {
                    appended = appended.saturating_add(1);
                    emitted.get_or_insert(index);
                }
                Err(e) => {
                    // Unreachable: the tick ran the attempt only with room for a record of the
                    // emit bound, and the staged record is within it. Reported and counted if
                    // it happens.
                    self.emit_failures = self.emit_failures.saturating_add(1);
                    tracing::error!(id, occurrence, error = %e, "staged outbox record refused");
                    env.report.errors.push(e.into());
                }
            }
        }
        // A one-shot has left the book, with its history: nothing to keep.
        if kept {
            self.record_run(
                id,
                RunEntry {
                    due,
                    seq: env.tick.bft_sequence_num,
                    agreed_time_ms: env.tick.agreed_time_ms,
                    occurrence,
                    attempt,
                    outcome: RunOutcome::Ok,
                    emitted,
                },
            );
            // Under a tracking overlap policy the schedule now awaits these records' results.
            self.note_started(id, occurrence, appended);
        }
        env.report.fired.push(FireRecord {
            id,
            due,
            occurrence,
            attempt,
            outcome: RunOutcome::Ok,
        });
        for req in run.requests {
            let names = env.names;
            let result = self.apply_with(
                &owner,
                req,
                |h| names.contains(h),
                env.tick.bft_sequence_num,
                env.tick.agreed_time_ms,
            );
            // Counted as an applied request's outcome is (a `SlotFull` refusal in the
            // replicated refusal counters).
            self.note_outcome(&result, Some(id));
            if let Err(e) = result {
                env.report.errors.push(e);
            }
        }
    }

    /// Settles a failed attempt of record `id` (back in the book, unindexed or about to be):
    /// a retry or a dead letter, reported.
    fn fail_attempt<S>(
        &mut self,
        id: u64,
        due: Due,
        occurrence: u64,
        attempt: u32,
        outcome: RunOutcome,
        env: &mut Env<'_, '_, S>,
    ) {
        env.report.fired.push(FireRecord {
            id,
            due,
            occurrence,
            attempt,
            outcome,
        });
        self.unindex(id);
        self.count(
            id,
            RunCounters {
                fired: 1,
                failed: 1,
                ..RunCounters::default()
            },
        );
        let then = self.settle_failure(id, due, occurrence, attempt, outcome, env.tick);
        self.record_run(
            id,
            RunEntry {
                due,
                seq: env.tick.bft_sequence_num,
                agreed_time_ms: env.tick.agreed_time_ms,
                occurrence,
                attempt,
                outcome,
                emitted: None,
            },
        );
        self.reindex(id);
        self.touch(id);
        env.report.failed.push(FailedRun {
            id,
            occurrence,
            attempt,
            outcome,
            then,
        });
    }

    /// Takes record `id` out of the book (as `remove` does) and returns it.
    /// One lookup in the records (the removal): the indexes are updated from the taken record.
    fn take_record(&mut self, id: u64) -> Option<Record> {
        let (rec, at) = self.records.remove_placed(id)?;
        self.unlink_record(id, &rec);
        // What `touch` does for a record that left the book.
        self.placement.remove_at(id, at);
        Some(rec)
    }

    /// Removes record `id` from the book as [`Self::take_record`] does, dropping it where it
    /// is held (nothing copied out), found through `slot` (a checked hint:
    /// [`Records::locate`](super::records::Records::locate)); returns its owner.
    fn drop_record(&mut self, id: u64, slot: u32) -> Option<Principal> {
        let slot = self.records.locate(id, slot)?;
        let (rec, at) = self.records.get_placed_at(id, slot)?;
        let keys = Self::keys_of(id, rec);
        // A placed record takes its quota bytes on its page (both are `entry_bound`, which
        // `touch` placed it at): no re-measuring of the definition per run.
        let bytes = match at {
            Some((_, len)) => u64::from(len),
            None => Self::quota_bytes(&rec.def).unwrap_or(0),
        };
        debug_assert_eq!(bytes, Self::quota_bytes(&rec.def).unwrap_or(0));
        let owner = rec.owner;
        Self::unlink_zone_of(&mut self.zoned, id, rec);
        Self::unlink_parked_of(&mut self.parked, id, rec);
        if let Some(k) = &rec.def.key {
            self.keys.remove(k);
        }
        self.unindex_keys(keys);
        self.usage.sub(owner, bytes);
        self.unlink_indexes(id);
        let at = self.records.delete_at(id, slot)?;
        // What `touch` does for a record that left the book.
        self.placement.remove_at(id, at);
        Some(owner)
    }

    /// Unlinks record `rec` (id `id`, taken out of the book) from every index but the records.
    fn unlink_record(&mut self, id: u64, rec: &Record) {
        self.unindex_keys(Self::keys_of(id, rec));
        Self::unlink_zone_of(&mut self.zoned, id, rec);
        Self::unlink_parked_of(&mut self.parked, id, rec);
        self.usage
            .sub(rec.owner, Self::quota_bytes(&rec.def).unwrap_or(0));
        if let Some(k) = &rec.def.key {
            self.keys.remove(k);
        }
        self.unlink_indexes(id);
    }

    /// What [`Self::unlink_record`] does that needs only the id: the dead-letter and cron
    /// indexes.
    fn unlink_indexes(&mut self, id: u64) {
        if !self.dead_ids.is_empty() {
            self.dead_ids.remove(&id);
        }
        if !self.crons.is_empty() {
            self.crons.remove(&id);
        }
    }

    /// Puts back a record [`Self::take_record`] took (not indexed: the caller settles it).
    fn restore_record(&mut self, id: u64, rec: Record) {
        if let Some(k) = &rec.def.key {
            self.keys.insert(k.clone(), id);
        }
        if !rec.dead.is_empty() {
            self.dead_ids.insert(id);
        }
        self.usage
            .add(rec.owner, Self::quota_bytes(&rec.def).unwrap_or(0));
        self.records.insert(id, rec);
        self.touch(id);
    }
}
