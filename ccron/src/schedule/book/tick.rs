//! A committed tick: the due schedules in canonical order within the fire budget, each stepped
//! through its owed runs and its misfire plan, with its handler run for every planned occurrence.

use std::collections::BTreeSet;

use super::{FireRecord, HandlerCtx, Handlers, Scheduler, TickReport};
use crate::due::Due;
use crate::outbox::{OccurrenceId, Outbox};
use crate::tick::{Tick, TimeMs};

impl Scheduler {
    /// Up to `budget` due schedule ids in canonical order: priority (high first), then due
    /// key (time keys before sequence keys), then id. Also whether more were due. A
    /// [`Timing::AtOrSeq`](super::Timing::AtOrSeq) schedule reached by both its keys is listed once, at the first.
    fn due_ids(&self, tick: &Tick, budget: usize) -> (Vec<u64>, bool) {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for &inv in self.levels.keys() {
            let mut push = |range: std::collections::btree_set::Range<'_, (u8, Due, u64)>| {
                for (_, _, id) in range {
                    if seen.contains(id) {
                        continue;
                    }
                    if out.len() == budget {
                        return true;
                    }
                    seen.insert(*id);
                    out.push(*id);
                }
                false
            };
            if let Some(now) = tick.agreed_time_ms {
                let r = self
                    .index
                    .range((inv, Due::Time(TimeMs::MIN), 0)..=(inv, Due::Time(now), u64::MAX));
                if push(r) {
                    return (out, true);
                }
            }
            let r = self
                .index
                .range((inv, Due::Seq(0), 0)..=(inv, Due::Seq(tick.bft_sequence_num), u64::MAX));
            if push(r) {
                return (out, true);
            }
        }
        (out, false)
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
        let (ids, _) = self.due_ids(tick, left);
        if ids.is_empty() {
            // Nothing due, nothing ran: nothing can be left over (the idle tick's only cost is
            // the due index probe).
            return report;
        }
        // Handlers may queue requests naming handlers; the set never changes during a tick.
        let names: BTreeSet<String> = handlers.map.keys().cloned().collect();
        for id in ids {
            if left == 0 {
                break;
            }
            self.step_schedule(
                id,
                tick,
                &mut left,
                &names,
                state,
                handlers,
                outbox,
                &mut report,
            );
        }
        report.carried_over = !self.due_ids(tick, 1).0.is_empty();
        report
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

    /// Steps schedule `id` (taken from the due snapshot) within `left` runs: its owed runs
    /// first, then, when they are done and its next point is reached too, a fresh plan. A
    /// schedule whose handler this build does not register is parked instead: nothing is
    /// consumed.
    #[allow(clippy::too_many_arguments)]
    fn step_schedule<S>(
        &mut self,
        id: u64,
        tick: &Tick,
        left: &mut usize,
        names: &BTreeSet<String>,
        state: &mut S,
        handlers: &mut Handlers<S>,
        outbox: &mut Outbox,
        report: &mut TickReport,
    ) {
        let emit_bound = self.emit_bound(outbox);
        loop {
            // A handler earlier in this tick may have cancelled, paused or moved it.
            let Some(rec) = self.records.get(&id) else {
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
            if !names.contains(&rec.def.handler) {
                tracing::warn!(
                    component = self.component,
                    id,
                    handler = %rec.def.handler,
                    "schedule parked: its handler is not registered in this build"
                );
                self.park(id);
                report.parked.push(id);
                return;
            }
            // Each run may emit one record of up to `emit_bound` bytes: run only what the outbox
            // can take now, so that no emit meets a full outbox (the rest stays due or owed,
            // exactly as with the fire budget, until the consumer trims the outbox).
            let room = outbox.room_for(emit_bound).min(*left);
            if room == 0 {
                report.outbox_full = true;
                return;
            }
            let was_owed = rec.owed.is_some();
            let (mut runs, next, owed_first) = match rec.owed {
                Some((from_ms, last_ms)) => {
                    let (runs, rest) = self.owed_runs(id, rec, from_ms, last_ms, room);
                    (runs, rec.next, rest.map(|r| (r, last_ms)))
                }
                None => {
                    let Some(due) = rec.next else { return };
                    let (mut runs, next) = self.plan(id, rec, due, tick);
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
            let handler_name = rec.def.handler.clone();
            let payload = rec.def.payload.clone();
            let first_run = rec.runs;
            // The handler's requests act as the schedule's owner (`crate::authz`).
            let owner = rec.owner;
            let one_shot = rec.def.timing.is_one_shot();
            let topic = rec.def.topic.clone();
            let kind = rec.def.kind.clone();
            self.unindex(id);
            if let Some(r) = self.records.get_mut(&id) {
                r.next = next;
                r.owed = owed_first;
                r.runs = first_run.saturating_add(runs.len() as u64);
            }
            if one_shot {
                self.remove(id);
            } else {
                self.reindex(id);
            }
            self.touch(id);
            if runs.is_empty() {
                report.skipped.push(id);
                return;
            }
            *left = left.saturating_sub(runs.len());
            let Some(handler) = handlers.map.get_mut(&handler_name).map(|r| &mut r.run) else {
                // Unreachable: checked above, and the handler set never changes in a tick.
                debug_assert!(false, "handler {handler_name} vanished");
                return;
            };
            for (i, run_due) in runs.drain(..).enumerate() {
                let occurrence = first_run.saturating_add(i as u64);
                let mut ctx = HandlerCtx {
                    tick,
                    id,
                    due: run_due,
                    occurrence: OccurrenceId::new(self.component, id, occurrence),
                    payload: &payload,
                    topic: topic.as_deref(),
                    kind: kind.as_deref(),
                    state: &mut *state,
                    outbox: &mut *outbox,
                    emitted: false,
                    emit_bound,
                    emit_error: None,
                    requests: Vec::new(),
                };
                handler(&mut ctx);
                let requests = std::mem::take(&mut ctx.requests);
                if let Some(e) = ctx.emit_error.take() {
                    // A deterministic outcome (the same on every replica): reported, counted,
                    // traced; the run itself happened.
                    self.emit_failures = self.emit_failures.saturating_add(1);
                    tracing::warn!(id, occurrence, error = %e, "handler emit refused");
                    report.errors.push(e);
                }
                report.fired.push(FireRecord {
                    id,
                    due: run_due,
                    occurrence,
                });
                for req in requests {
                    if let Err(e) = self.apply_with(
                        &owner,
                        req,
                        |h| names.contains(h),
                        tick.bft_sequence_num,
                        tick.agreed_time_ms,
                    ) {
                        report.errors.push(e);
                    }
                }
                // A run that cancelled, paused or replaced its own schedule ends its catch-up
                // (runs still owed are dropped too).
                if !one_shot
                    && self
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
            if one_shot || !was_owed {
                return;
            }
        }
    }
}
