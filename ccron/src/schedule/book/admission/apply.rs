//! Applying an admitted request: `Scheduler::apply` and its dispatch over every request kind.

use super::super::{
    Bounds, Guarded, Handlers, Overlap, RunPolicy, ScheduleError, ScheduleRequest, Scheduler,
    Target,
};

use crate::authz::{Action, Principal};

use crate::tick::TimeMs;

impl Scheduler {
    /// Applies `request` on behalf of `by` (the authenticated requester: see [`crate::authz`]),
    /// admitted at sequence number `seq` and agreed time `now_ms` (the executing batch's).
    /// Returns the id it created or changed. On error nothing changes.
    ///
    /// Authorization (the book's [`Policy`](crate::authz::Policy)): creating needs
    /// `may_create`; replacing, pausing, resuming and cancelling a schedule (an upsert of a held
    /// key too) need its owner or an admin; installing zone rules needs an admin. A new
    /// schedule is owned by `by`; a replaced one keeps its owner.
    ///
    /// Versions: a new schedule is at version 1; every admitted request that changes it
    /// (replace, upsert of its key, pause, resume) bumps it. [`ScheduleRequest::IfVersion`]
    /// applies its change only at the named version (after resolving the target and
    /// authorizing), otherwise [`ScheduleError::StaleVersion`] and nothing changes.
    ///
    /// # Errors
    /// See [`ScheduleError`]: [`ScheduleError::Unauthorized`]; unknown handler, schedule, key or
    /// zone; invalid timing, policy, topic or type; a limit; [`ScheduleError::NeedsTime`];
    /// [`ScheduleError::StaleVersion`].
    pub fn apply<S>(
        &mut self,
        by: &Principal,
        request: ScheduleRequest,
        handlers: &Handlers<S>,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<u64>, ScheduleError> {
        let result = self.apply_with(by, request, |h| handlers.contains(h), seq, now_ms);
        if let Ok(Some(id)) = result {
            self.reown_legacy(by, id);
        }
        self.note_outcome(&result, None);
        result
    }

    /// Counts and traces the outcome of an executed request: one [`Scheduler::apply`] applied
    /// (`run` `None`), or one a handler run of schedule `run` issued
    /// ([`HandlerCtx::request`](super::super::HandlerCtx::request), applied after the run).
    /// Both are executed requests, so a [`ScheduleError::SlotFull`] is counted in the
    /// replicated [`RefusalCounters::slot_full`](super::super::RefusalCounters::slot_full)
    /// either way (calendar and backfill refusals are counted where they are decided).
    pub(in crate::schedule::book) fn note_outcome(
        &mut self,
        result: &Result<Option<u64>, ScheduleError>,
        run: Option<u64>,
    ) {
        match result {
            Err(e @ ScheduleError::Unauthorized { .. }) => {
                tracing::warn!(component = self.component, ?run, error = %e, "schedule request denied");
            }
            Err(ScheduleError::StaleVersion {
                id,
                expected,
                actual,
            }) => {
                self.stale_rejections = self.stale_rejections.saturating_add(1);
                tracing::info!(
                    component = self.component,
                    ?run,
                    id,
                    expected,
                    actual,
                    "guarded schedule change rejected: stale version"
                );
            }
            Err(e @ ScheduleError::SlotFull { .. }) => {
                self.refuse(|r| &mut r.slot_full);
                tracing::info!(component = self.component, ?run, error = %e, "schedule refused: slot full");
            }
            Err(e) => {
                tracing::debug!(component = self.component, ?run, error = %e, "schedule request rejected");
            }
            Ok(_) => {}
        }
    }

    /// After `by` changed schedule `id`: a schedule owned by a legacy principal that `by`
    /// claims ([`Principal::legacy_matches`]) becomes `by`'s, with its quota usage (no quota
    /// check: the same holder), so the legacy 64-bit match is needed once per schedule.
    pub(super) fn reown_legacy(&mut self, by: &Principal, id: u64) {
        let Some(rec) = self.records.get(&id) else {
            return;
        };
        if !rec.owner.legacy_matches(by) {
            return;
        }
        let (old, bytes) = (rec.owner, Self::quota_bytes(&rec.def).unwrap_or(0));
        if let Some(r) = self.records.get_mut(&id) {
            r.owner = *by;
        }
        self.usage.sub(old, bytes);
        self.usage.add(*by, bytes);
        self.touch(id);
        tracing::info!(
            component = self.component,
            id,
            from = %old,
            to = %by,
            "schedule of a legacy owner re-owned to its full client id"
        );
    }

    pub(in crate::schedule::book) fn apply_with(
        &mut self,
        by: &Principal,
        request: ScheduleRequest,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<Option<u64>, ScheduleError> {
        match request {
            ScheduleRequest::Create(def) => self
                .create(
                    by,
                    def,
                    RunPolicy::default(),
                    Bounds::NONE,
                    handlers_ok,
                    seq,
                    now_ms,
                )
                .map(Some),
            ScheduleRequest::Upsert(def) => self
                .upsert(by, def, None, None, handlers_ok, seq, now_ms)
                .map(Some),
            ScheduleRequest::UpsertIfVersion { schedule, version } => {
                let key = schedule.key.clone().ok_or(ScheduleError::MissingKey)?;
                match self.keys.get(&key).copied() {
                    Some(id) => {
                        self.authorize(by, Action::Replace, Some(id))?;
                        let actual = self.records.get(&id).map_or(0, |r| r.version);
                        if actual != version {
                            return Err(ScheduleError::StaleVersion {
                                id,
                                expected: version,
                                actual,
                            });
                        }
                        self.replace(id, schedule, None, handlers_ok, seq, now_ms)
                            .map(Some)
                    }
                    None => {
                        self.authorize(by, Action::Create, None)?;
                        if version != 0 {
                            return Err(ScheduleError::UnknownSchedule(Target::Key(key)));
                        }
                        self.insert_new(
                            *by,
                            schedule,
                            RunPolicy::default(),
                            Bounds::NONE,
                            None,
                            handlers_ok,
                            seq,
                            now_ms,
                        )
                        .map(Some)
                    }
                }
            }
            ScheduleRequest::Replace { target, schedule } => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Replace, Some(id))?;
                if let Some(k) = &schedule.key
                    && self.keys.get(k).is_some_and(|&holder| holder != id)
                {
                    return Err(ScheduleError::KeyInUse(k.clone()));
                }
                self.replace(id, schedule, None, handlers_ok, seq, now_ms)
                    .map(Some)
            }
            ScheduleRequest::Pause(target) => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Pause, Some(id))?;
                self.unindex(id);
                if let Some(r) = self.records.get_mut(&id) {
                    r.paused = true;
                    r.version = r.version.saturating_add(1);
                }
                self.touch(id);
                Ok(Some(id))
            }
            ScheduleRequest::Resume(target) => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Resume, Some(id))?;
                self.unindex(id);
                if let Some(r) = self.records.get_mut(&id) {
                    r.paused = false;
                    r.version = r.version.saturating_add(1);
                }
                self.reindex(id);
                self.touch(id);
                Ok(Some(id))
            }
            ScheduleRequest::Cancel(target) => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Cancel, Some(id))?;
                self.remove(id);
                Ok(Some(id))
            }
            ScheduleRequest::IfVersion {
                target,
                version,
                change,
            } => {
                let id = self.resolve(&target)?;
                let action = match &change {
                    Guarded::Replace(_) => Action::Replace,
                    Guarded::Pause => Action::Pause,
                    Guarded::Resume => Action::Resume,
                    Guarded::Cancel => Action::Cancel,
                };
                self.authorize(by, action, Some(id))?;
                let actual = self.records.get(&id).map_or(0, |r| r.version);
                if actual != version {
                    return Err(ScheduleError::StaleVersion {
                        id,
                        expected: version,
                        actual,
                    });
                }
                let target = Target::Id(id);
                // One level only: a guarded change is never itself guarded.
                let plain = match change {
                    Guarded::Replace(schedule) => ScheduleRequest::Replace { target, schedule },
                    Guarded::Pause => ScheduleRequest::Pause(target),
                    Guarded::Resume => ScheduleRequest::Resume(target),
                    Guarded::Cancel => ScheduleRequest::Cancel(target),
                };
                self.apply_with(by, plain, handlers_ok, seq, now_ms)
            }
            ScheduleRequest::SetRunPolicy { target, policy } => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Replace, Some(id))?;
                policy.retry.check()?;
                if let Some(r) = self.records.get_mut(&id) {
                    r.policy = policy;
                    r.version = r.version.saturating_add(1);
                }
                self.touch(id);
                Ok(Some(id))
            }
            ScheduleRequest::CreateWith { schedule, policy } => self
                .create(by, schedule, policy, Bounds::NONE, handlers_ok, seq, now_ms)
                .map(Some),
            ScheduleRequest::UpsertWith { schedule, policy } => self
                .upsert(by, schedule, Some(policy), None, handlers_ok, seq, now_ms)
                .map(Some),
            ScheduleRequest::CreateBounded {
                schedule,
                policy,
                bounds,
            } => self
                .create(by, schedule, policy, bounds, handlers_ok, seq, now_ms)
                .map(Some),
            ScheduleRequest::UpsertBounded {
                schedule,
                policy,
                bounds,
            } => self
                .upsert(
                    by,
                    schedule,
                    Some(policy),
                    Some(bounds),
                    handlers_ok,
                    seq,
                    now_ms,
                )
                .map(Some),
            ScheduleRequest::CreateOverlap {
                schedule,
                policy,
                bounds,
                overlap,
            } => {
                super::super::overlap::check_policy(overlap, schedule.timing.is_one_shot())?;
                let id = self.create(by, schedule, policy, bounds, handlers_ok, seq, now_ms)?;
                self.admit_overlap(id, overlap);
                Ok(Some(id))
            }
            ScheduleRequest::UpsertOverlap {
                schedule,
                policy,
                bounds,
                overlap,
            } => {
                super::super::overlap::check_policy(overlap, schedule.timing.is_one_shot())?;
                let id = self.upsert(
                    by,
                    schedule,
                    Some(policy),
                    Some(bounds),
                    handlers_ok,
                    seq,
                    now_ms,
                )?;
                self.admit_overlap(id, overlap);
                Ok(Some(id))
            }
            ScheduleRequest::SetOverlap { target, overlap } => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Replace, Some(id))?;
                self.set_overlap(id, overlap)?;
                Ok(Some(id))
            }
            ScheduleRequest::SetBounds { target, bounds } => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Replace, Some(id))?;
                self.set_bounds(id, bounds, now_ms)?;
                Ok(Some(id))
            }
            ScheduleRequest::Redrive { target, occurrence } => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::DeadLetter, Some(id))?;
                self.redrive(id, occurrence, seq, now_ms)?;
                Ok(Some(id))
            }
            ScheduleRequest::TriggerNow(target) => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::Trigger, Some(id))?;
                self.trigger_now(id, now_ms)?;
                Ok(Some(id))
            }
            ScheduleRequest::Backfill {
                target,
                from_ms,
                to_ms,
            } => self.admit_backfill(by, &target, (from_ms, to_ms), Overlap::AllowAll, now_ms),
            ScheduleRequest::BackfillWith {
                target,
                from_ms,
                to_ms,
                overlap,
            } => self.admit_backfill(by, &target, (from_ms, to_ms), overlap, now_ms),
            ScheduleRequest::Discard { target, occurrence } => {
                let id = self.resolve(&target)?;
                self.authorize(by, Action::DeadLetter, Some(id))?;
                self.discard(id, occurrence)?;
                Ok(Some(id))
            }
            ScheduleRequest::Retarget {
                from_handler,
                to_handler,
            } => self
                .retarget(by, &from_handler, &to_handler, handlers_ok)
                .map(Some),
            ScheduleRequest::InstallCalendar(calendar) => {
                self.admit_install_calendar(by, calendar, seq, now_ms)
            }
            ScheduleRequest::SetCalendar { target, calendar } => {
                self.admit_set_calendar(by, &target, calendar, now_ms)
            }
            ScheduleRequest::CreateExcluding {
                schedule,
                policy,
                bounds,
                overlap,
                calendar,
            } => self.create_excluding(
                by,
                schedule,
                policy,
                bounds,
                overlap,
                calendar,
                handlers_ok,
                seq,
                now_ms,
            ),
            ScheduleRequest::InstallZone(rules) => {
                self.authorize(by, Action::InstallZone, None)?;
                let name = rules.name().to_owned();
                if !self.zones.contains_key(&name) && self.zones.len() >= self.limits.max_zones {
                    return Err(ScheduleError::Limit(format!(
                        "at most {} zones",
                        self.limits.max_zones
                    )));
                }
                // The exact bytes the next save writes to the zones part (the same encoding:
                // zones ascending by name, then the calendars).
                let len = self.shared_fits(Some(&rules), None)?;
                self.install_zone(name, rules, seq, now_ms)?;
                self.zones_bytes = len;
                Ok(None)
            }
        }
    }
}
