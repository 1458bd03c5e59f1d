//! Re-targeting parked schedules to a registered handler (`ScheduleRequest::Retarget`).

use super::super::{ScheduleError, Scheduler};
use super::target_of;
use std::sync::Arc;

use crate::authz::{Action, Principal};

use crate::schedule::store;

impl Scheduler {
    /// [`ScheduleRequest::Retarget`]: moves up to the budget of `by`'s parked schedules (every
    /// one's for an admin) waiting for `from` to the registered handler `to`, ascending id;
    /// returns how many moved. Each is checked like a replacement (its record page and the
    /// log bound); the first that does not fit ends the request (the ones before it moved).
    pub(super) fn retarget(
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
    pub(super) fn retarget_one(&mut self, id: u64, to: &str) -> Result<(), ScheduleError> {
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
}
