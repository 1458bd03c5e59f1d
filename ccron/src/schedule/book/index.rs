//! The due index (inverted priority, due key, id) with its per-priority counts, and the zone
//! index: keys, their upkeep on every change, and the invariant check.

use std::collections::{BTreeMap, BTreeSet};

use super::timing::jitter_offset_ms;
use super::{Record, Scheduler, Timing};
use crate::due::Due;

impl Scheduler {
    /// The due index entries of record `id`: none when paused or without a next point; one
    /// usually; two for [`Timing::AtOrSeq`] (its time trigger, jittered, and its sequence
    /// trigger: whichever a tick reaches first takes it).
    pub(super) fn keys_of(id: u64, rec: &Record) -> [Option<(u8, Due, u64)>; 3] {
        if rec.paused || rec.parked {
            return [None, None, None];
        }
        let inv = u8::MAX - rec.def.priority;
        if let Some(retry) = rec.retry {
            // A pending retry comes first: owed runs and the next occurrence wait for it.
            return [Some((inv, retry.at, id)), None, None];
        }
        // Manual runs (`manual.rs`) are due at once: any tick reaches sequence 0 (a backfill
        // waiting for its previous run's result under its overlap policy is not due).
        let manual = super::manual::manual_due(rec).then_some((inv, Due::Seq(0), id));
        if let Some(due) = super::overlap::buffered_key(rec.overlap()) {
            // Buffered occurrences (`overlap.rs`) were reached when planned and waited for
            // the previous run's result, which has arrived: due at once, ahead of owed runs
            // and the next point (all later occurrences).
            return [Some((inv, due, id)), manual, None];
        }
        if let Some((owed_ms, _)) = rec.owed {
            // Owed runs were reached when planned: due at their nominal instant, without
            // jitter, so any later tick with time takes them (in the canonical order).
            return [Some((inv, Due::Time(owed_ms), id)), manual, None];
        }
        let Some(next) = rec.next else {
            return [manual, None, None];
        };
        let key = match next {
            Due::Time(t) => Due::Time(t.saturating_add(jitter_offset_ms(id, rec.def.jitter_ms))),
            seq => seq,
        };
        let second = match rec.def.timing {
            Timing::AtOrSeq { seq, .. } => Some((inv, Due::Seq(seq), id)),
            _ => None,
        };
        [Some((inv, key, id)), second, manual]
    }

    pub(super) fn unindex(&mut self, id: u64) {
        let Some(keys) = self.records.get(&id).map(|r| Self::keys_of(id, r)) else {
            return;
        };
        self.unindex_keys(keys);
    }

    /// Removes `keys` (a record's [`Self::keys_of`]) from the due index, for a record already
    /// out of the book or about to change.
    pub(super) fn unindex_keys(&mut self, keys: [Option<(u8, Due, u64)>; 3]) {
        for k in keys.into_iter().flatten() {
            if self.index.remove(&k)
                && let Some(n) = self.levels.get_mut(&k.0)
            {
                *n -= 1;
                if *n == 0 {
                    self.levels.remove(&k.0);
                }
            }
        }
    }

    /// Indexes record `id` (due index, and zone index for a cron record in a named zone).
    ///
    /// Every path that creates or changes a record, including loading one from the pages, ends
    /// here, which is why the zone index is maintained here too (linking is idempotent).
    pub(super) fn reindex(&mut self, id: u64) {
        let Some(rec) = self.records.get(&id) else {
            return;
        };
        if let Timing::Cron {
            zone: Some(zone), ..
        } = &rec.def.timing
            && !self.zoned.get(zone).is_some_and(|ids| ids.contains(&id))
        {
            self.zoned.entry(zone.clone()).or_default().insert(id);
        }
        for k in Self::keys_of(id, rec).into_iter().flatten() {
            if self.index.insert(k) {
                *self.levels.entry(k.0).or_insert(0) += 1;
            }
        }
    }

    /// Parks record `id`: its run came due and no handler of its name is registered. The
    /// record keeps its due point and owed runs (nothing is consumed) and leaves the due
    /// index until [`Self::unpark`].
    pub(super) fn park(&mut self, id: u64) {
        self.unindex(id);
        let Some(rec) = self.records.get_mut(&id) else {
            return;
        };
        rec.parked = true;
        self.parked
            .entry(rec.def.handler.to_string())
            .or_default()
            .insert(id);
        self.touch(id);
    }

    /// Unparks record `id` (its handler is registered again, or it was re-targeted or
    /// replaced): back in the due index at its kept due point.
    pub(super) fn unpark(&mut self, id: u64) {
        self.unlink_parked(id);
        if let Some(rec) = self.records.get_mut(&id) {
            rec.parked = false;
        }
        self.reindex(id);
        self.touch(id);
    }

    /// Removes record `id` from the parked index (before its handler changes or it leaves).
    pub(super) fn unlink_parked(&mut self, id: u64) {
        if let Some(rec) = self.records.get(&id) {
            Self::unlink_parked_of(&mut self.parked, id, rec);
        }
    }

    /// [`Self::unlink_parked`] for record `rec` (id `id`), in the book or taken out of it.
    pub(super) fn unlink_parked_of(
        parked: &mut BTreeMap<String, BTreeSet<u64>>,
        id: u64,
        rec: &Record,
    ) {
        if !rec.parked {
            return;
        }
        if let Some(ids) = parked.get_mut(&*rec.def.handler) {
            ids.remove(&id);
            if ids.is_empty() {
                parked.remove(&*rec.def.handler);
            }
        }
    }

    /// Removes record `id` from the zone index (before its timing changes or it leaves).
    pub(super) fn unlink_zone(&mut self, id: u64) {
        if let Some(rec) = self.records.get(&id) {
            Self::unlink_zone_of(&mut self.zoned, id, rec);
        }
    }

    /// [`Self::unlink_zone`] for record `rec` (id `id`), in the book or taken out of it.
    pub(super) fn unlink_zone_of(
        zoned: &mut BTreeMap<String, BTreeSet<u64>>,
        id: u64,
        rec: &Record,
    ) {
        let Timing::Cron {
            zone: Some(zone), ..
        } = &rec.def.timing
        else {
            return;
        };
        if let Some(ids) = zoned.get_mut(zone) {
            ids.remove(&id);
            if ids.is_empty() {
                zoned.remove(zone);
            }
        }
    }

    /// Checks the index against the records; returns the first mismatch.
    pub fn check_invariants(&self) -> Result<(), String> {
        let expected: BTreeSet<_> = self
            .records
            .iter()
            .flat_map(|(&id, r)| Self::keys_of(id, r))
            .flatten()
            .collect();
        if !expected.iter().eq(self.index.iter()) {
            return Err("due index differs from the records".into());
        }
        let total: usize = self.levels.values().sum();
        if total != self.index.len() {
            return Err("priority level counts differ from the index".into());
        }
        for (k, id) in &self.keys {
            if self.records.get(id).and_then(|r| r.def.key.as_ref()) != Some(k) {
                return Err(format!("key {k:?} maps to {id}, which does not hold it"));
            }
        }
        let mut zoned: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (&id, r) in &self.records {
            if let Timing::Cron {
                zone: Some(zone), ..
            } = &r.def.timing
            {
                zoned.entry(zone.clone()).or_default().insert(id);
            }
        }
        if zoned != self.zoned {
            return Err("zone index differs from the records".into());
        }
        for (&id, r) in &self.records {
            if let Some(name) = &r.calendar
                && (!self.calendars.contains_key(name) || r.def.timing.is_one_shot())
            {
                return Err(format!(
                    "schedule {id} names calendar {name:?}, not installed or not a recurring schedule"
                ));
            }
        }
        let mut parked: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (&id, r) in &self.records {
            if r.parked {
                parked
                    .entry(r.def.handler.to_string())
                    .or_default()
                    .insert(id);
            }
        }
        if parked != self.parked {
            return Err("parked index differs from the records".into());
        }
        let dead: BTreeSet<u64> = self
            .records
            .iter()
            .filter(|(_, r)| !r.dead.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if dead != self.dead_ids {
            return Err("dead-letter index differs from the records".into());
        }
        for (id, r) in &self.records {
            if r.dead.len() > Self::dead_cap(r) {
                return Err(format!("schedule {id} holds {} dead runs", r.dead.len()));
            }
            if Self::is_spent(r) {
                return Err(format!("one-shot schedule {id} has nothing left but stays"));
            }
            // A retired schedule has no next point; a bounded one's next point is within them.
            if r.retired.is_some() && r.next.is_some() {
                return Err(format!("retired schedule {id} has a next point"));
            }
            if let Some(crate::due::Due::Time(t)) = r.next
                && (r.bounds.starts_at_ms.is_some_and(|s| t < s)
                    || r.bounds.ends_at_ms.is_some_and(|e| t > e))
            {
                return Err(format!(
                    "schedule {id}'s next point {t} is outside its bounds"
                ));
            }
        }
        self.check_usage()
    }
}
