//! Evaluation of a cron table: the pass over the due entries (rule, schedule-next, actions,
//! overlap and retirement policies) and the `evaluate*` entry points that run it and then
//! apply the requested changes and persist.

use super::*;

/// The fields one entry run needs besides the entry itself (split from the table so that an
/// entry can be borrowed mutably at the same time).
pub(super) struct Pass<'a, 'p, S> {
    pub(super) component_id: ComponentId,
    pub(super) tick: &'a Tick,
    pub(super) state: &'a mut S,
    pub(super) pages: &'a mut (dyn ReservedPages + 'p),
    pub(super) changed: &'a mut Vec<ScheduleChange>,
    pub(super) with_record: &'a mut u32,
    pub(super) index: &'a mut DueIndex,
    pub(super) changes: &'a mut Vec<TableChange<S>>,
    pub(super) fired: &'a mut Vec<Fired>,
    /// Scratch for the due points of one entry's runs.
    pub(super) runs: Vec<Due>,
    /// The outbox room reserved for this pass, if any ([`CronTable::evaluate_emitting`]).
    pub(super) emits: Option<&'a mut crate::outbox::Emits>,
    /// Whether the due index handed the pass its indexed entries ([`DueIndex::take_due`]:
    /// each is out of the index, so it is indexed again without the index first looking up
    /// where it sat, a cache miss per entry) or the pass asks every entry in place (the
    /// linear reference).
    pub(super) taken: bool,
    /// Overlap and retirement state of the pass.
    pub(super) policy: &'a mut policy::Policies,
}

impl<S> Pass<'_, '_, S> {
    /// Evaluates the entry of `slot_id`: its rule, then schedule-next and the action(s) when
    /// it holds. An indexed entry the due index handed out is indexed again, whether it ran or
    /// not.
    fn run(&mut self, slot_id: u32, slot: &mut Slot<S>) {
        let entry = &mut slot.entry;
        let position = entry.position;
        match &entry.rule {
            Rule::Custom(rule) => {
                let holds = rule(&RuleCtx {
                    tick: self.tick,
                    position,
                    state: &*self.state,
                    pages: &*self.pages,
                });
                if holds {
                    self.fire(entry, None);
                }
            }
            Rule::Periodic(_) | Rule::Scheduled(_) => {
                let stored = slot.next;
                let tracks = entry.overlap.tracks();
                if tracks && self.hold(slot_id, entry, stored) {
                    return;
                }
                // Built-in periodic schedules are stepped without a virtual call.
                let next = match &entry.rule {
                    Rule::Periodic(p) => self.step(p, slot_id, position, stored),
                    Rule::Scheduled(s) => self.step(s.as_ref(), slot_id, position, stored),
                    Rule::Custom(_) => None,
                };
                let Some(next) = next else {
                    return;
                };
                if next == policy::NEVER && stored != Some(next) {
                    self.retiring(&slot.entry, next);
                }
                // The built-in schedule-next: record the new due point before the action runs.
                slot.next = Some(next);
                if stored.is_none() {
                    *self.with_record += 1;
                }
                self.changed.push(ScheduleChange {
                    position,
                    before: stored,
                    now: Some(next),
                    slot: slot_id,
                    page: slot.page,
                    learned: false,
                });
                let runs = std::mem::take(&mut self.runs);
                for due in &runs {
                    if tracks {
                        self.fire_tracked(&mut slot.entry, *due);
                    } else {
                        self.fire(&mut slot.entry, Some(*due));
                    }
                }
                self.runs = runs;
            }
        }
    }

    /// Steps the indexed entry of `slot_id` (stored next due point `stored`): `None` when it
    /// is not due (indexed again at its key); otherwise the runs' due points in `self.runs`,
    /// the entry indexed at the returned new due point.
    #[inline]
    fn step<K: Schedule + ?Sized>(
        &mut self,
        schedule: &K,
        slot_id: u32,
        position: u32,
        stored: Option<Due>,
    ) -> Option<Due> {
        self.runs.clear();
        let old_key = schedule.due_key(stored);
        let Some(next) = schedule.step(stored, self.tick, &mut self.runs) else {
            if self.taken {
                self.index.insert(slot_id, position, old_key);
            } else {
                self.index.restore(slot_id, position, old_key);
            }
            return None;
        };
        debug_assert!(
            old_key.reached_by(self.tick),
            "schedule {schedule:?} ran at {position} before its due key"
        );
        debug_assert_eq!(schedule.due_key(Some(next)), next, "{schedule:?}");
        // The same rule as `Periodic::step_at`'s: the next point passes the tick, except a
        // grid saturated at `TimeMs::MAX` (a tick at the end of time).
        debug_assert!(
            !next.reached_by(self.tick) || next == Due::Time(TimeMs::MAX),
            "schedule {schedule:?} at {position} is due again at the same tick"
        );
        if self.taken {
            self.index.insert(slot_id, position, next);
        } else {
            self.index.move_key(slot_id, position, old_key, next);
        }
        Some(next)
    }

    pub(super) fn fire(&mut self, entry: &mut CronEntry<S>, due: Option<Due>) {
        if let Some(e) = self.emits.as_deref_mut() {
            e.begin_run();
        }
        let mut ctx = ActionCtx {
            tick: self.tick,
            position: entry.position,
            due,
            state: &mut *self.state,
            pages: &mut *self.pages,
            changes: &mut *self.changes,
            emits: self.emits.as_deref_mut(),
        };
        if let Some(next) = entry.schedule_next.as_mut() {
            next(&mut ctx);
        }
        (entry.action)(&mut ctx);
        self.fired.push(Fired {
            position: entry.position,
            due,
        });
        tracing::trace!(
            component_id = self.component_id,
            position = entry.position,
            seq = self.tick.bft_sequence_num,
            ?due,
            "cron entry fired"
        );
    }
}

impl<S> CronTable<S> {
    /// Evaluates `tick` with the due index: runs every entry whose rule holds, in position order.
    ///
    /// Cost: O(due · log due + points · log points + custom): the due entries sorted into
    /// position order, one ordered-map step per distinct due point the tick reached (entries
    /// sharing a period and phase share one), and one rule call per entry with a user rule. No
    /// ordered-map or hash-map work per fired entry.
    /// Changes requested by callbacks are applied after the pass in request order; then the
    /// schedule is written once if it changed. A tick for another component runs nothing.
    pub fn evaluate(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
    ) -> Result<TickOutcome, TableError> {
        self.evaluate_emitting(tick, state, pages, None)
    }

    /// [`CronTable::evaluate`] with outbox room reserved for the pass: actions may emit
    /// records into `emits` ([`ActionCtx::emit`](crate::ActionCtx::emit)), which the caller
    /// appends to its outbox after the pass ([`crate::outbox::Emits::commit`]). Without
    /// `emits`, every emit is refused ([`crate::outbox::EmitError::NotReserved`]).
    pub fn evaluate_emitting(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        emits: Option<&mut crate::outbox::Emits>,
    ) -> Result<TickOutcome, TableError> {
        self.check_component(tick)?;
        let mut candidates = std::mem::take(&mut self.scratch);
        candidates.clear();
        // Takes the due entries out of the index; running each indexes it again.
        self.index.take_due(tick, &mut candidates);
        if !self.custom.is_empty() {
            candidates.extend(self.custom.iter().map(|(p, s)| (*p, *s)));
        }
        // Firing order is position order. Custom and indexed positions are disjoint, so no
        // duplicates arise.
        candidates.sort_unstable();
        debug_assert!(candidates.windows(2).all(|w| w[0].0 < w[1].0));
        let mut changes = Vec::new();
        // Room for one run per candidate: no regrowth while firing.
        let mut fired = Vec::with_capacity(candidates.len());
        self.schedule.changed.reserve(candidates.len());
        let mut pass = Pass {
            component_id: self.component_id,
            tick,
            state,
            pages: &mut *pages,
            changed: &mut self.schedule.changed,
            with_record: &mut self.with_record,
            index: &mut self.index,
            changes: &mut changes,
            fired: &mut fired,
            runs: Vec::new(),
            emits,
            taken: true,
            policy: &mut self.policies,
        };
        for chunk in candidates.chunks(WARM_CHUNK) {
            // One tight pass reading each candidate's slot first: the cache misses of these
            // independent reads overlap (the runs below, one entry at a time, would take
            // them one by one); nothing is decided here.
            let live = chunk
                .iter()
                .filter(|(_, slot)| {
                    matches!(self.slots.get(*slot as usize), Some(Some(s)) if s.page != NO_PAGE)
                })
                .count();
            std::hint::black_box(live);
            for &(position, slot) in chunk {
                if let Some(Some(s)) = self.slots.get_mut(slot as usize) {
                    pass.run(slot, s);
                } else {
                    debug_assert!(false, "candidate {position} has no entry");
                }
            }
        }
        self.scratch = candidates;
        Ok(self.finish_pass(changes, fired, pages))
    }

    /// Evaluates `tick` by asking every entry's rule in position order: the reference model.
    ///
    /// Same observable behaviour as [`evaluate`](Self::evaluate) (the property tests check it on
    /// random operation sequences), at O(n) per tick: kept as the baseline of the benchmark and
    /// the model of the tests, as Concord's table evaluates.
    pub fn evaluate_linear(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
    ) -> Result<TickOutcome, TableError> {
        self.check_component(tick)?;
        let mut changes = Vec::new();
        let mut fired = Vec::new();
        let mut pass = Pass {
            component_id: self.component_id,
            tick,
            state,
            pages: &mut *pages,
            changed: &mut self.schedule.changed,
            with_record: &mut self.with_record,
            index: &mut self.index,
            changes: &mut changes,
            fired: &mut fired,
            runs: Vec::new(),
            emits: None,
            taken: false,
            policy: &mut self.policies,
        };
        for &slot in self.entries.values() {
            if let Some(Some(s)) = self.slots.get_mut(slot as usize) {
                pass.run(slot, s);
            }
        }
        Ok(self.finish_pass(changes, fired, pages))
    }

    /// [`CronTable::evaluate_emitting`] with the entries' overlap policies reading "no result
    /// yet" from `results` (the host's outbox, [`crate::entry::PendingResults`]): the
    /// evaluation for tables with entries under [`CronEntry::with_overlap`]. The read costs
    /// O(held records) per tick, only when the table has such an entry.
    pub fn evaluate_with_results(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        emits: Option<&mut crate::outbox::Emits>,
        results: &dyn crate::entry::PendingResults,
    ) -> Result<TickOutcome, TableError> {
        self.policies.read(self.component_id, results);
        let outcome = self.evaluate_emitting(tick, state, pages, emits);
        self.policies.forget();
        outcome
    }

    /// [`CronTable::evaluate_linear`] with an outbox view, as
    /// [`CronTable::evaluate_with_results`] (the reference model of the property tests).
    pub fn evaluate_linear_with_results(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        results: &dyn crate::entry::PendingResults,
    ) -> Result<TickOutcome, TableError> {
        self.policies.read(self.component_id, results);
        let outcome = self.evaluate_linear(tick, state, pages);
        self.policies.forget();
        outcome
    }

    /// The entries that can never run again, ascending position, with why: derived from each
    /// indexed entry's stored next due point and its schedule ([`crate::Schedule::retirement`]),
    /// so every replica, and a restarted one, lists the same. O(entries).
    pub fn retired_entries(&self) -> Vec<(u32, crate::entry::EntryEnd)> {
        self.entries
            .iter()
            .filter_map(|(position, &slot)| {
                let s = self.slots.get(slot as usize)?.as_ref()?;
                let end = s.entry.rule.schedule()?.retirement(s.next)?;
                Some((*position, end))
            })
            .collect()
    }

    /// What the table's policies did since it was built (this process's count).
    pub fn policy_counters(&self) -> PolicyCounters {
        self.policies.counters
    }

    fn check_component(&self, tick: &Tick) -> Result<(), TableError> {
        if tick.component_id != self.component_id {
            tracing::warn!(
                table = self.component_id,
                tick = tick.component_id,
                "tick for another component ignored"
            );
            return Err(TableError::WrongComponent {
                expected: self.component_id,
                got: tick.component_id,
            });
        }
        Ok(())
    }

    fn finish_pass(
        &mut self,
        changes: Vec<TableChange<S>>,
        fired: Vec<Fired>,
        pages: &mut dyn ReservedPages,
    ) -> TickOutcome {
        let mut outcome = TickOutcome {
            fired,
            ..TickOutcome::default()
        };
        self.policies.finish(self.component_id, &mut outcome);
        for change in changes {
            let result = match change {
                TableChange::Add(e) => self.add(e),
                TableChange::Remove(p) => {
                    self.remove(p);
                    Ok(())
                }
                TableChange::Replace(e) => self.replace(e).map(drop),
            };
            if let Err(e) = result {
                tracing::warn!(component_id = self.component_id, error = %e, "requested table change failed");
                outcome.errors.push(e);
            }
        }
        match self.persist(pages) {
            Ok(written) => outcome.persisted = written,
            Err(e) => {
                tracing::error!(component_id = self.component_id, error = %e, "schedule write failed");
                outcome.errors.push(e);
            }
        }
        debug_assert!(
            self.check_invariants().is_ok(),
            "{:?}",
            self.check_invariants()
        );
        outcome
    }
}
