//! Per-owner quotas ([`crate::authz::Quota`]): what each owner holds in the book, derived from
//! the records (maintained by admission and removal, rebuilt on load), and the check admission
//! runs before creating or growing a schedule.

use std::collections::BTreeMap;

use super::{ScheduleError, Scheduler};
use crate::authz::{Principal, QuotaKind};

/// Schedules and stored bytes (each schedule at its largest, [`Scheduler::entry_bound`]) per
/// owner: derived state, equal on every replica holding the same records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct OwnerUsage {
    by_owner: BTreeMap<Principal, (u64, u64)>,
    /// Requests refused for a quota (an observation, like the book's other counters).
    pub(super) refusals: u64,
}

impl OwnerUsage {
    pub(super) fn add(&mut self, owner: Principal, bytes: u64) {
        let u = self.by_owner.entry(owner).or_insert((0, 0));
        u.0 = u.0.saturating_add(1);
        u.1 = u.1.saturating_add(bytes);
    }

    pub(super) fn sub(&mut self, owner: Principal, bytes: u64) {
        if let Some(u) = self.by_owner.get_mut(&owner) {
            u.0 = u.0.saturating_sub(1);
            u.1 = u.1.saturating_sub(bytes);
            if u.0 == 0 {
                self.by_owner.remove(&owner);
            }
        }
    }

    pub(super) fn resize(&mut self, owner: Principal, old: u64, new: u64) {
        if let Some(u) = self.by_owner.get_mut(&owner) {
            u.1 = u.1.saturating_sub(old).saturating_add(new);
        }
    }

    pub(super) fn get(&self, owner: &Principal) -> (u64, u64) {
        self.by_owner.get(owner).copied().unwrap_or((0, 0))
    }
}

impl Scheduler {
    /// The stored bytes `def` counts for in its owner's quota.
    pub(super) fn quota_bytes(def: &impl super::def::Stored) -> Result<u64, ScheduleError> {
        Ok(Self::entry_bound(def)? as u64)
    }

    /// `Ok` when `owner` may hold `more` schedules more and its stored bytes may go from
    /// `freed` less to `added` more; a typed refusal otherwise (counted and traced).
    pub(super) fn check_quota(
        &mut self,
        owner: &Principal,
        more: u64,
        freed: u64,
        added: u64,
    ) -> Result<(), ScheduleError> {
        let Some(quota) = self.policy.quota_for(owner) else {
            return Ok(());
        };
        let (count, bytes) = self.usage.get(owner);
        let would_count = count.saturating_add(more);
        let would_bytes = bytes.saturating_sub(freed).saturating_add(added);
        let refusal = if more > 0 && would_count > quota.max_schedules {
            Some((QuotaKind::Schedules, would_count, quota.max_schedules))
        } else if added > freed && would_bytes > quota.max_schedule_bytes {
            Some((
                QuotaKind::ScheduleBytes,
                would_bytes,
                quota.max_schedule_bytes,
            ))
        } else {
            None
        };
        let Some((kind, would, limit)) = refusal else {
            return Ok(());
        };
        self.usage.refusals = self.usage.refusals.saturating_add(1);
        tracing::info!(
            component = self.component,
            owner = %owner,
            %kind,
            would,
            limit,
            "schedule request refused: owner's quota"
        );
        Err(ScheduleError::QuotaExceeded {
            owner: *owner,
            kind,
            would,
            limit,
        })
    }

    /// What `owner` holds: (schedules, stored bytes at their largest).
    pub fn owner_usage(&self, owner: &Principal) -> (u64, u64) {
        self.usage.get(owner)
    }

    /// Requests refused for their owner's quota since this book was created or loaded (a
    /// metric for the host: not stored, not part of equality).
    pub fn quota_refusals(&self) -> u64 {
        self.usage.refusals
    }

    /// Checks the usage against the records (for [`Scheduler::check_invariants`]).
    pub(super) fn check_usage(&self) -> Result<(), String> {
        let mut expected = OwnerUsage::default();
        for r in self.records.values() {
            let bytes = Self::quota_bytes(&r.def).map_err(|e| e.to_string())?;
            expected.add(r.owner, bytes);
        }
        if expected.by_owner != self.usage.by_owner {
            return Err("per-owner usage differs from the records".into());
        }
        Ok(())
    }
}
