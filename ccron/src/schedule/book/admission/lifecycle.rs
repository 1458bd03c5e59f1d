//! Creating, upserting, replacing and removing schedule records.

use super::super::{Bounds, NewSchedule, Record, RunPolicy, ScheduleError, Scheduler};
use super::target_of;

use super::super::def::Def;
use crate::authz::{Action, Principal};

use crate::tick::TimeMs;

impl Scheduler {
    /// `Create`, `CreateWith`, `CreateBounded`: a new schedule (its key, if any, not in use).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create(
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
    pub(super) fn upsert(
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
    pub(in crate::schedule::book) fn insert_new(
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

    pub(super) fn replace(
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
        rec.manual = super::super::ManualRuns {
            last_trigger_ms: rec.manual.last_trigger_ms,
            ..super::super::ManualRuns::default()
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

    pub(in crate::schedule::book) fn remove(&mut self, id: u64) {
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
