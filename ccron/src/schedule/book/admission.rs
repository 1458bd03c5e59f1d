//! Admission: validating requests against the limits and registered handlers, and applying
//! them (create, upsert, replace, pause, resume, cancel, zone installation); the calendar
//! requests are admitted in `calendars.rs`, operator runs in `manual.rs`.

use super::{
    Bounds, Guarded, HISTORY_RUNS, Handlers, MAX_DEAD_RUNS, MAX_FIRE_EACH_CAP, MAX_INSTANT_MS,
    MAX_PERIOD_MS, MIN_INSTANT_MS, Misfire, NewSchedule, ONE_SHOT_HISTORY_RUNS, Overlap, Record,
    RunPolicy, ScheduleError, ScheduleRequest, Scheduler, Target, Timing,
};
use std::sync::Arc;

use super::def::{Def, Stored};
use crate::authz::{Action, Principal};
use crate::codec;
use crate::cron::{CronSchedule, ZoneRules};
use crate::due::Due;
use crate::schedule::store;
use crate::tick::TimeMs;

/// Encoded bytes of a record's run state besides its dead runs and history, at its largest:
/// the parked flag (1), the run policy (25), a pending retry (37), the dead runs' length prefix
/// (8), the evicted count (8) and the history's length prefix (8) (checked against the codec in
/// the tests).
pub(super) const RUN_STATE_BYTES: usize = 1 + 25 + 37 + 8 + 8 + 8;

/// Encoded bytes of one history entry at its largest.
pub(super) const RUN_ENTRY_BYTES: usize = 58;

/// Encoded bytes of one dead run at its largest.
pub(super) const DEAD_RUN_BYTES: usize = 49;

fn target_of(id: u64) -> Target {
    Target::Id(id)
}

/// `Ok` when `t` is an instant a request may carry (`[MIN_INSTANT_MS, MAX_INSTANT_MS)`).
fn check_instant(what: &str, t: TimeMs) -> Result<(), ScheduleError> {
    if (MIN_INSTANT_MS..MAX_INSTANT_MS).contains(&t) {
        Ok(())
    } else {
        Err(ScheduleError::Invalid(format!(
            "{what} {t} ms is outside [{MIN_INSTANT_MS}, {MAX_INSTANT_MS}) ms"
        )))
    }
}

/// `Ok` when `d` is a span a request may carry (`[min, MAX_PERIOD_MS]`).
fn check_span(what: &str, d: i64, min: i64) -> Result<(), ScheduleError> {
    if (min..=MAX_PERIOD_MS).contains(&d) {
        Ok(())
    } else {
        Err(ScheduleError::Invalid(format!(
            "{what} {d} ms is outside [{min}, {MAX_PERIOD_MS}] ms"
        )))
    }
}

/// `Ok` when `misfire`'s parameters are in range: a fire-each cap in `1..=MAX_FIRE_EACH_CAP`,
/// an expiry deadline in `[0, MAX_PERIOD_MS]` (the book's schedules and cron table entries,
/// [`crate::schedule::CronRule::with_misfire`], share the check).
pub(crate) fn check_misfire(misfire: Misfire) -> Result<(), ScheduleError> {
    match misfire {
        Misfire::FireEach { cap } if cap == 0 || cap > MAX_FIRE_EACH_CAP => {
            Err(ScheduleError::Invalid(format!(
                "fire-each cap must be in 1..={MAX_FIRE_EACH_CAP}, got {cap}"
            )))
        }
        Misfire::ExpireAfter { deadline_ms } => check_span("expiry deadline", deadline_ms, 0),
        _ => Ok(()),
    }
}

/// `Ok` when `value` is a routing string a schedule may carry (topic or type): 1 to `max`
/// bytes of printable ASCII without spaces, so that it is safe in a header, a path or a log.
fn check_route(what: &str, value: Option<&str>, max: usize) -> Result<(), ScheduleError> {
    let Some(v) = value else { return Ok(()) };
    if v.len() > max {
        return Err(ScheduleError::Limit(format!(
            "{what} of {} bytes, at most {max}",
            v.len()
        )));
    }
    if v.is_empty() || !v.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
        return Err(ScheduleError::Invalid(format!(
            "{what} must be 1 to {max} bytes of printable ASCII without spaces"
        )));
    }
    Ok(())
}

impl Scheduler {
    pub(super) fn resolve(&self, target: &Target) -> Result<u64, ScheduleError> {
        let id = match target {
            Target::Id(id) => Some(*id).filter(|id| self.records.contains_key(id)),
            Target::Key(k) => self.keys.get(k).copied(),
        };
        id.ok_or_else(|| ScheduleError::UnknownSchedule(target.clone()))
    }

    /// Whether the policy lets `by` do `action` to schedule `id` (its owner or an admin), or
    /// create one (`id` = `None`); a typed error otherwise.
    pub(super) fn authorize(
        &self,
        by: &Principal,
        action: Action,
        id: Option<u64>,
    ) -> Result<(), ScheduleError> {
        let allowed = match (action, id) {
            (Action::InstallZone, _) => self.policy.may_install_zone(by),
            (_, None) => self.policy.may_create(by),
            (_, Some(id)) => self
                .records
                .get(&id)
                .is_some_and(|r| self.policy.may_mutate(by, &r.owner)),
        };
        if allowed {
            Ok(())
        } else {
            Err(ScheduleError::Unauthorized { by: *by, action })
        }
    }

    /// Validates `def` and computes its stored form and first due point.
    pub(super) fn admit(
        &self,
        def: &NewSchedule,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(NewSchedule, Option<Due>, Option<CronSchedule>), ScheduleError> {
        let max = self.limits.max_name_bytes;
        if def.handler.len() > max || def.key.as_ref().is_some_and(|k| k.len() > max) {
            return Err(ScheduleError::Limit(format!(
                "names are at most {max} bytes"
            )));
        }
        if def.payload.len() > self.limits.max_payload_bytes {
            return Err(ScheduleError::Limit(format!(
                "payload of {} bytes, at most {}",
                def.payload.len(),
                self.limits.max_payload_bytes
            )));
        }
        if !handlers_ok(&def.handler) {
            return Err(ScheduleError::UnknownHandler(def.handler.clone()));
        }
        let max_route = self.limits.max_topic_bytes;
        check_route("topic", def.topic.as_deref(), max_route)?;
        check_route("type", def.kind.as_deref(), max_route)?;
        check_misfire(def.misfire)?;
        let mut stored = def.clone();
        let (next, cron) = match &def.timing {
            Timing::Cron { expression, zone } => {
                let rules = match zone {
                    None => ZoneRules::utc(),
                    Some(name) => self
                        .zones
                        .get(name)
                        .cloned()
                        .ok_or_else(|| ScheduleError::UnknownZone(name.clone()))?,
                };
                let cron = CronSchedule::parse_in(expression, rules)?;
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                (cron.next_after(now).map(Due::Time), Some(cron))
            }
            Timing::Every {
                period_ms,
                start_ms,
            } => {
                check_span("period", *period_ms, 1)?;
                let start = match start_ms {
                    Some(s) => *s,
                    None => now_ms.ok_or(ScheduleError::NeedsTime)?,
                };
                // Also a defaulted start (the agreed time): a stored start outside the range
                // would not load back.
                check_instant("start", start)?;
                stored.timing = Timing::Every {
                    period_ms: *period_ms,
                    start_ms: Some(start),
                };
                (Some(Due::Time(start)), None)
            }
            Timing::At(due) => {
                if let Due::Time(t) = due {
                    check_instant("instant", *t)?;
                }
                (Some(*due), None)
            }
            Timing::AfterMs(delay_ms) => {
                check_span("delay", *delay_ms, 0)?;
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                let t = now.saturating_add(*delay_ms);
                check_instant("instant", t)?;
                let due = Due::Time(t);
                stored.timing = Timing::At(due);
                (Some(due), None)
            }
            Timing::AfterSeqs(delay) => {
                let due = Due::Seq(seq.saturating_add(*delay));
                stored.timing = Timing::At(due);
                (Some(due), None)
            }
            Timing::AtOrSeq { at_ms, .. } => {
                check_instant("instant", *at_ms)?;
                // Indexed under both triggers (`key_of`); `next` holds the time one.
                (Some(Due::Time(*at_ms)), None)
            }
            Timing::AfterMsOrSeqs {
                delay_ms,
                delay_seqs,
            } => {
                check_span("delay", *delay_ms, 0)?;
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                let at_ms = now.checked_add(*delay_ms).ok_or_else(|| {
                    ScheduleError::Invalid(format!("{now} + {delay_ms} ms overflows"))
                })?;
                check_instant("instant", at_ms)?;
                let seq = seq.checked_add(*delay_seqs).ok_or_else(|| {
                    ScheduleError::Invalid(format!(
                        "sequence {seq} + {delay_seqs} is past the sequence numbers"
                    ))
                })?;
                stored.timing = Timing::AtOrSeq { at_ms, seq };
                (Some(Due::Time(at_ms)), None)
            }
        };
        // The stored record must fit one record page (no overflow chains).
        let entry = Self::entry_bound(&stored)?;
        let room = store::record_room(self.limits.page_bytes);
        if entry > room {
            return Err(ScheduleError::Limit(format!(
                "the stored schedule takes {entry} bytes, a page of {} bytes holds at most {room}",
                self.limits.page_bytes
            )));
        }
        Ok((stored, next, cron))
    }

    /// The most bytes the stored `(id, record)` entry of `def` can take: measured with a next
    /// due point and owed runs, the largest forms its fixed-size fields take (`Record`'s fields
    /// in order), plus the run state at its largest ([`RUN_STATE_BYTES`]: a retry pending and
    /// every dead run the record may keep).
    pub(super) fn entry_bound(def: &impl Stored) -> Result<usize, ScheduleError> {
        let owed: Option<(TimeMs, TimeMs)> = Some((0, 0));
        let core = codec::encoded_len(&(
            0u64,
            def,
            false,
            Some(Due::Seq(0)),
            0u64,
            owed,
            Principal::Client(crate::authz::ClientId::MAX),
            0u64,
        ))?;
        let one_shot = def.timing().is_one_shot();
        let (dead, history) = if one_shot {
            (1, ONE_SHOT_HISTORY_RUNS)
        } else {
            (MAX_DEAD_RUNS, HISTORY_RUNS)
        };
        Ok(core
            .saturating_add(RUN_STATE_BYTES)
            .saturating_add(super::counters::COUNTER_BYTES)
            .saturating_add(super::manual::MANUAL_BYTES)
            .saturating_add(super::bounds::stored_bytes(one_shot))
            .saturating_add(super::overlap::stored_bytes(one_shot))
            // Layout 11: the exclusion calendar's name (one tag for a one-shot; reserved for
            // every recurring schedule from layout 12, periodic ones included).
            .saturating_add(if one_shot {
                1
            } else {
                super::calendars::CALENDAR_REF_BYTES
            })
            // Layout 12: the backfills' overlap policy and awaited run (recurring only).
            .saturating_add(super::manual::backfill_overlap_bytes(one_shot))
            .saturating_add(dead * DEAD_RUN_BYTES)
            .saturating_add(history * RUN_ENTRY_BYTES))
    }

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
        match &result {
            Err(e @ ScheduleError::Unauthorized { .. }) => {
                tracing::warn!(component = self.component, error = %e, "schedule request denied");
            }
            Err(ScheduleError::StaleVersion {
                id,
                expected,
                actual,
            }) => {
                self.stale_rejections = self.stale_rejections.saturating_add(1);
                tracing::info!(
                    component = self.component,
                    id,
                    expected,
                    actual,
                    "guarded schedule change rejected: stale version"
                );
            }
            Err(e @ ScheduleError::SlotFull { .. }) => {
                self.slot_refusals = self.slot_refusals.saturating_add(1);
                tracing::info!(component = self.component, error = %e, "schedule refused: slot full");
            }
            Err(e) => {
                tracing::debug!(component = self.component, error = %e, "schedule request rejected");
            }
            Ok(_) => {}
        }
        result
    }

    /// After `by` changed schedule `id`: a schedule owned by a legacy principal that `by`
    /// claims ([`Principal::legacy_matches`]) becomes `by`'s, with its quota usage (no quota
    /// check: the same holder), so the legacy 64-bit match is needed once per schedule.
    fn reown_legacy(&mut self, by: &Principal, id: u64) {
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

    pub(super) fn apply_with(
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
                super::overlap::check_policy(overlap, schedule.timing.is_one_shot())?;
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
                super::overlap::check_policy(overlap, schedule.timing.is_one_shot())?;
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
                let len = self.shared_len(Some(&rules), None)?;
                if let Some(max) = self.limits.max_zones_bytes
                    && len > max
                {
                    return Err(ScheduleError::Limit(format!(
                        "the zones and calendars would take {len} bytes, the book's zones part holds {max}"
                    )));
                }
                self.check_log(
                    self.placement.records() as u64,
                    self.placement.placed_bytes,
                    len,
                )?;
                self.install_zone(name, rules, seq, now_ms)?;
                self.zones_bytes = len;
                Ok(None)
            }
        }
    }

    /// Installs `rules` under `name` and re-evaluates the cron schedules of that zone (through
    /// the zone index: O(k log n) for its k schedules, plus one cron search each).
    ///
    /// A schedule's new next due point is the first instant of the new rules strictly after the
    /// request's agreed time `now_ms`; a schedule already overdue (its old point reached but not
    /// yet run, e.g. carried over by the budget) keeps that run: its new point is the first
    /// instant of the new rules at or after its old one. Owed catch-up runs stay owed (they were
    /// reached under the old rules). Every expression is re-parsed under the new rules first, so
    /// a failure changes nothing. Within its bounds: a schedule left without an instant before
    /// its end bound is retired; a retired one is left as it is. A schedule naming an
    /// exclusion calendar (`calendars.rs`) keeps to its allowed instants, read in the new
    /// rules' local days; one the calendar would then keep from ever firing refuses the
    /// install ([`crate::cron::CronError::ExcludedForever`]).
    fn install_zone(
        &mut self,
        name: String,
        rules: ZoneRules,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(), ScheduleError> {
        let ids: Vec<u64> = self
            .zoned
            .get(&name)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        let mut reparsed = Vec::with_capacity(ids.len());
        for id in ids {
            // A retired schedule stays retired (new bounds revive it, not new rules).
            let Some(Timing::Cron { expression, .. }) = self
                .records
                .get(&id)
                .filter(|r| r.retired.is_none())
                .map(|r| &r.def.timing)
            else {
                continue;
            };
            let cron = CronSchedule::parse_in(expression, rules.clone())?;
            // Local days move with the zone: the schedule's calendar must still let it fire.
            if let Some(calendar) = self.records.get(&id).and_then(|r| self.calendar_of(r)) {
                calendar.check_fires(&cron)?;
            }
            reparsed.push((id, cron));
        }
        for (id, cron) in reparsed {
            let old = self.records.get(&id).and_then(|r| r.next);
            let from_ms = match (old, now_ms) {
                (Some(Due::Time(t)), Some(now)) => t.saturating_sub(1).min(now),
                (Some(Due::Time(t)), None) => t.saturating_sub(1),
                (_, Some(now)) => now,
                // Past the horizon and no time to search from: stays so, with the new rules.
                (_, None) => TimeMs::MAX,
            };
            let bounds = self.records.get(&id).map(|r| r.bounds).unwrap_or_default();
            let calendar = self.records.get(&id).and_then(|r| self.calendar_of(r));
            let next = bounds
                .occurrence_after(from_ms, |after| {
                    super::calendars::allowed_after(&cron, calendar, after)
                })
                .map(Due::Time);
            self.unindex(id);
            if let Some(r) = self.records.get_mut(&id) {
                r.next = next;
            }
            self.crons.insert(id, cron);
            self.reindex(id);
            self.touch(id);
            // The new rules may leave no instant before its end bound.
            self.retire_if_done(id, seq, now_ms);
        }
        self.zones.insert(name, rules);
        self.header_dirty = true;
        Ok(())
    }

    /// [`ScheduleRequest::Retarget`]: moves up to the budget of `by`'s parked schedules (every
    /// one's for an admin) waiting for `from` to the registered handler `to`, ascending id;
    /// returns how many moved. Each is checked like a replacement (its record page and the
    /// log bound); the first that does not fit ends the request (the ones before it moved).
    fn retarget(
        &mut self,
        by: &Principal,
        from: &str,
        to: &str,
        handlers_ok: impl Fn(&str) -> bool,
    ) -> Result<u64, ScheduleError> {
        let max = self.limits.max_name_bytes;
        if to.len() > max {
            return Err(ScheduleError::Limit(format!(
                "names are at most {max} bytes"
            )));
        }
        if !handlers_ok(to) {
            return Err(ScheduleError::UnknownHandler(to.to_owned()));
        }
        let Some(waiting) = self.parked.get(from) else {
            return Err(ScheduleError::NothingParked(from.to_owned()));
        };
        let budget = self.limits.budget_per_tick.max(1);
        let ids: Vec<u64> = waiting
            .iter()
            .copied()
            .filter(|id| {
                self.records
                    .get(id)
                    .is_some_and(|r| self.policy.may_mutate(by, &r.owner))
            })
            .take(budget)
            .collect();
        if ids.is_empty() {
            return Err(ScheduleError::Unauthorized {
                by: *by,
                action: Action::Retarget,
            });
        }
        let mut moved = 0u64;
        for id in ids {
            if let Err(e) = self.retarget_one(id, to) {
                if moved == 0 {
                    return Err(e);
                }
                tracing::info!(component = self.component, id, error = %e, "retarget stopped");
                break;
            }
            moved += 1;
        }
        tracing::info!(
            component = self.component,
            from,
            to,
            moved,
            "parked schedules re-targeted"
        );
        Ok(moved)
    }

    /// Moves schedule `id` to handler `to` after checking it like a replacement (its record
    /// fits a page, the book's record pages and the log bound); on error nothing changes.
    fn retarget_one(&mut self, id: u64, to: &str) -> Result<(), ScheduleError> {
        let Some(rec) = self.records.get(&id) else {
            return Err(ScheduleError::UnknownSchedule(target_of(id)));
        };
        let mut def = rec.def.clone();
        def.handler = Arc::from(to);
        let need = Self::entry_bound(&def)?;
        // The owner's usage follows the new size (a handler name within `max_name_bytes`; not
        // checked against the quota: re-targeting keeps a schedule, it does not add one).
        let (owner, old_bytes) = (rec.owner, Self::quota_bytes(&rec.def)?);
        let room = store::record_room(self.limits.page_bytes);
        if need > room {
            return Err(ScheduleError::Limit(format!(
                "schedule {id} would take {need} bytes, a page holds at most {room}"
            )));
        }
        if let Some(max_pages) = self.limits.max_record_pages
            && !self
                .placement
                .can_hold_in(&self.records, id, need, max_pages)
        {
            return Err(ScheduleError::Limit(format!(
                "schedule {id} re-targeted does not fit the book's {max_pages} record pages"
            )));
        }
        let old = self.placed_len(id);
        self.check_log(
            self.placement.records() as u64,
            self.placement
                .placed_bytes
                .saturating_sub(old)
                .saturating_add(need as u64),
            self.zones_bytes,
        )?;
        self.unindex(id);
        self.unlink_parked(id);
        let to = self.names.intern(to);
        if let Some(r) = self.records.get_mut(&id) {
            r.def.handler = to;
            r.parked = false;
            r.version = r.version.saturating_add(1);
        }
        self.usage.resize(owner, old_bytes, need as u64);
        self.reindex(id);
        self.touch(id);
        Ok(())
    }

    /// Moves every schedule naming handler `from` (parked or not) to handler `to`, whatever
    /// its owner, without budget: for a migration run once at an upgrade, on every replica
    /// alike (the host's code, not a client request: `to` is not checked against the
    /// handlers). O(n) over the book. Each moved schedule gets version + 1 and, when parked,
    /// is due again at once. Returns how many moved.
    ///
    /// # Errors
    /// As a replacement would be: [`ScheduleError::Limit`] (a name too long, or a record that
    /// would not fit its pages) or [`ScheduleError::LogFull`]; the schedules before the
    /// failing one (ascending id) have moved.
    pub fn retarget_all(&mut self, from: &str, to: &str) -> Result<u64, ScheduleError> {
        let max = self.limits.max_name_bytes;
        if to.len() > max {
            return Err(ScheduleError::Limit(format!(
                "names are at most {max} bytes"
            )));
        }
        let ids: Vec<u64> = self
            .records
            .iter()
            .filter(|(_, r)| &*r.def.handler == from)
            .map(|(id, _)| *id)
            .collect();
        for &id in &ids {
            self.retarget_one(id, to)?;
        }
        Ok(ids.len() as u64)
    }

    /// `Create`, `CreateWith`, `CreateBounded`: a new schedule (its key, if any, not in use).
    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        by: &Principal,
        def: NewSchedule,
        policy: RunPolicy,
        bounds: Bounds,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<u64, ScheduleError> {
        self.authorize(by, Action::Create, None)?;
        if let Some(k) = &def.key
            && self.keys.contains_key(k)
        {
            return Err(ScheduleError::KeyInUse(k.clone()));
        }
        self.insert_new(*by, def, policy, bounds, None, handlers_ok, seq, now_ms)
    }

    /// `Upsert`, `UpsertWith`, `UpsertBounded`: replaces the schedule holding `def`'s key
    /// (required), setting `policy` and `bounds` when given (else keeping the holder's), or
    /// creates it (with `policy` and `bounds`, or the defaults).
    #[allow(clippy::too_many_arguments)]
    fn upsert(
        &mut self,
        by: &Principal,
        def: NewSchedule,
        policy: Option<RunPolicy>,
        bounds: Option<Bounds>,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<u64, ScheduleError> {
        let key = def.key.clone().ok_or(ScheduleError::MissingKey)?;
        if let Some(p) = &policy {
            p.retry.check()?;
        }
        match self.keys.get(&key).copied() {
            Some(id) => {
                self.authorize(by, Action::Replace, Some(id))?;
                self.replace(id, def, bounds, handlers_ok, seq, now_ms)?;
                if let Some(policy) = policy {
                    if let Some(r) = self.records.get_mut(&id) {
                        r.policy = policy;
                    }
                    self.touch(id);
                }
                Ok(id)
            }
            None => {
                self.authorize(by, Action::Create, None)?;
                self.insert_new(
                    *by,
                    def,
                    policy.unwrap_or_default(),
                    bounds.unwrap_or(Bounds::NONE),
                    None,
                    handlers_ok,
                    seq,
                    now_ms,
                )
            }
        }
    }

    /// A new schedule owned by `owner`, naming exclusion calendar `calendar` when given
    /// (`calendars.rs`: checked before anything changes).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_new(
        &mut self,
        owner: Principal,
        def: NewSchedule,
        policy: RunPolicy,
        bounds: Bounds,
        calendar: Option<String>,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<u64, ScheduleError> {
        policy.retry.check()?;
        if self.records.len() >= self.limits.max_schedules {
            return Err(ScheduleError::Limit(format!(
                "at most {} schedules",
                self.limits.max_schedules
            )));
        }
        let (stored, next, cron) = self.admit(&def, handlers_ok, seq, now_ms)?;
        let cal = match &calendar {
            Some(name) => Some(self.calendar_for(name, &stored.timing, cron.as_ref())?),
            None => None,
        };
        let next = Self::bounded_first(
            &stored,
            next,
            cron.as_ref(),
            cal.as_deref(),
            &bounds,
            0,
            now_ms,
        )?;
        self.check_slot(self.next_id, next, stored.jitter_ms)?;
        let bytes = Self::quota_bytes(&stored)?;
        self.check_quota(&owner, 1, 0, bytes)?;
        if let Some(max_pages) = self.limits.max_record_pages {
            let need = Self::entry_bound(&stored)?;
            if !self.placement.can_place(need, max_pages) {
                return Err(ScheduleError::Limit(format!(
                    "the book's {max_pages} record pages are full"
                )));
            }
        }
        if self.limits.max_log_pages.is_some() {
            let need = Self::entry_bound(&stored)? as u64;
            self.check_log(
                self.placement.records() as u64 + 1,
                self.placement.placed_bytes.saturating_add(need),
                self.zones_bytes,
            )?;
        }
        let id = self.next_id;
        self.next_id = id
            .checked_add(1)
            .ok_or_else(|| ScheduleError::Limit("schedule ids exhausted".into()))?;
        if let Some(k) = &stored.key {
            self.keys.insert(k.clone(), id);
        }
        if let Some(c) = cron {
            self.crons.insert(id, c);
        }
        let mut rec = Record::new(Def::new(stored, &mut self.names), next, owner, policy);
        rec.bounds = bounds;
        rec.calendar = calendar;
        self.records.insert(id, rec);
        self.usage.add(owner, bytes);
        self.reindex(id);
        self.touch(id);
        self.header_dirty = true;
        Ok(id)
    }

    fn replace(
        &mut self,
        id: u64,
        def: NewSchedule,
        bounds: Option<Bounds>,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<u64, ScheduleError> {
        let (stored, next, cron) = self.admit(&def, handlers_ok, seq, now_ms)?;
        let (owner, old_bytes, bounds, runs, calendar) = match self.records.get(&id) {
            Some(r) => (
                r.owner,
                Self::quota_bytes(&r.def)?,
                bounds.unwrap_or(r.bounds),
                r.runs,
                r.calendar.clone(),
            ),
            None => return Err(ScheduleError::UnknownSchedule(target_of(id))),
        };
        // A replace keeps the exclusion calendar: the new definition must be a cron schedule
        // the calendar lets fire (`calendars.rs`; name none first to replace it by another
        // kind).
        let cal = match &calendar {
            Some(name) => Some(self.calendar_for(name, &stored.timing, cron.as_ref())?),
            None => None,
        };
        // A replace keeps the bounds (or takes new ones) and the run counter they limit.
        let next = Self::bounded_first(
            &stored,
            next,
            cron.as_ref(),
            cal.as_deref(),
            &bounds,
            runs,
            now_ms,
        )?;
        self.check_slot(id, next, stored.jitter_ms)?;
        let new_bytes = Self::quota_bytes(&stored)?;
        self.check_quota(&owner, 0, old_bytes, new_bytes)?;
        if let Some(max_pages) = self.limits.max_record_pages {
            let need = Self::entry_bound(&stored)?;
            if !self
                .placement
                .can_hold_in(&self.records, id, need, max_pages)
            {
                return Err(ScheduleError::Limit(format!(
                    "the replacement does not fit the book's {max_pages} record pages"
                )));
            }
        }
        if self.limits.max_log_pages.is_some() {
            let need = Self::entry_bound(&stored)? as u64;
            let old = self.placed_len(id);
            self.check_log(
                self.placement.records() as u64,
                self.placement
                    .placed_bytes
                    .saturating_sub(old)
                    .saturating_add(need),
                self.zones_bytes,
            )?;
        }
        self.unindex(id);
        self.unlink_zone(id);
        // A replacement names a registered handler (admission checked it): no longer parked.
        self.unlink_parked(id);
        let Some(rec) = self.records.get_mut(&id) else {
            return Err(ScheduleError::UnknownSchedule(target_of(id)));
        };
        rec.parked = false;
        if let Some(old) = rec.def.key.take() {
            self.keys.remove(&old);
        }
        if let Some(k) = &stored.key {
            self.keys.insert(k.clone(), id);
        }
        rec.def = Def::new(stored, &mut self.names);
        rec.next = next;
        rec.owed = None;
        // Like owed runs, buffered occurrences of the old definition are dropped; a one-shot
        // takes no overlap policy (it runs once).
        if rec.def.timing.is_one_shot() {
            rec.overlap = None;
            rec.backfill_overlap = None;
        } else if let Some(o) = &mut rec.overlap {
            o.buffered.clear();
        }
        rec.bounds = bounds;
        rec.retired = None;
        self.usage.resize(owner, old_bytes, new_bytes);
        // Like owed runs, a retry of the old definition's run is dropped, and so are its
        // pending manual runs (the last trigger's time stays: trigger ids never repeat).
        rec.retry = None;
        rec.manual = super::ManualRuns {
            last_trigger_ms: rec.manual.last_trigger_ms,
            ..super::ManualRuns::default()
        };
        rec.version = rec.version.saturating_add(1);
        self.crons.remove(&id);
        if let Some(c) = cron {
            self.crons.insert(id, c);
        }
        self.reindex(id);
        self.touch(id);
        Ok(id)
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.unindex(id);
        self.unlink_zone(id);
        self.unlink_parked(id);
        self.dead_ids.remove(&id);
        let at = match self.records.remove_placed(id) {
            Some((rec, at)) => {
                self.usage
                    .sub(rec.owner, Self::quota_bytes(&rec.def).unwrap_or(0));
                if let Some(k) = rec.def.key {
                    self.keys.remove(&k);
                }
                at
            }
            None => None,
        };
        self.crons.remove(&id);
        // What `touch` does for a record that left the book (its location left with it).
        self.placement.remove_at(id, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{DeadRun, PendingRetry, RetryPolicy, RunOutcome};

    /// The run state's largest encoding is what the constants say (placement relies on it).
    #[test]
    fn run_state_sizes_match_the_codec() {
        let policy = RunPolicy::default().with_retry(RetryPolicy::exponential(3, 1, 2));
        let retry = Some(PendingRetry {
            due: Due::Seq(1),
            occurrence: 2,
            attempt: 3,
            at: Due::Time(4),
        });
        let dead = DeadRun {
            due: Due::Time(1),
            occurrence: 2,
            attempts: 3,
            outcome: RunOutcome::Failed { code: 4 },
            seq: 5,
            at_ms: Some(6),
        };
        assert_eq!(codec::encoded_len(&dead).unwrap(), DEAD_RUN_BYTES);
        let entry = crate::schedule::RunEntry {
            due: Due::Time(1),
            seq: 2,
            agreed_time_ms: Some(3),
            occurrence: 4,
            attempt: 5,
            outcome: RunOutcome::Failed { code: 6 },
            emitted: Some(7),
        };
        assert_eq!(codec::encoded_len(&entry).unwrap(), RUN_ENTRY_BYTES);
        let no_dead: Vec<DeadRun> = Vec::new();
        let no_history: Vec<crate::schedule::RunEntry> = Vec::new();
        assert_eq!(
            codec::encoded_len(&(true, policy, retry, no_dead, 0u64, no_history)).unwrap(),
            RUN_STATE_BYTES
        );
    }
}
