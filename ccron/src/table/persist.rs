//! Persistence of a cron table's schedule in its reserved pages (table layout 3,
//! `table_store.rs`): write, reload, clear, and the page arithmetic.

use super::*;

impl<S> CronTable<S> {
    /// Writes the schedule to the table's pages if it changed since the last write; returns
    /// whether it wrote. Call it only inside execution (evaluation calls it itself).
    ///
    /// Table layout 3 (`table_store.rs`, `docs/scheduling.md` "Persistence"): when
    /// `max_scheduled` records fit one page, the whole schedule lives on the range's first page
    /// and a write is that one page. Otherwise a write appends the changed records to the
    /// range's active log and rewrites the commit page: O(changes) pages, a single page for the
    /// commit. The log area has two halves: when the active one is full it is frozen and folded
    /// into the record pages a share per write while the other half takes the writes, so no
    /// write folds everything at once (a write larger than a half, or a log the pacing could
    /// not keep up with, folds synchronously: [`CronTable::last_persist_stats`]). Pages of
    /// table layouts 1 and 2 are migrated by this write. A crash at any page write reloads as
    /// the schedule before or after the write, and a replica that re-executes writes the same
    /// pages as one that never stopped. On error the changes stay marked and the next write
    /// retries them.
    pub fn persist(&mut self, pages: &mut dyn ReservedPages) -> Result<bool, TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(false);
        };
        if self.schedule.changed.is_empty() {
            return Ok(false);
        }
        let form = table_store::form(
            persistence.range,
            persistence.max_scheduled,
            pages.page_size(),
        )?;
        if !persistence.range.fits(pages) {
            return Err(CodecError::RangeOutOfStore {
                first: persistence.range.first(),
                end: persistence.range.end(),
                num_pages: pages.num_pages(),
            }
            .into());
        }
        // One change per position, ascending: the due point at the last write and now.
        self.schedule.merge_changes();
        let records = RecordView {
            entries: &self.entries,
            slot_of: &self.slot_of,
            slots: &self.slots,
            orphans: &self.schedule.orphans,
            with_record: self.with_record,
        };
        let stats = self.store.save(
            pages,
            form,
            self.component_id,
            &records,
            &mut self.schedule.changed,
        )?;
        // The slab learns the pages of records the write had to look up.
        for c in &self.schedule.changed {
            if c.learned
                && let Some(Some(s)) = self.slots.get_mut(c.slot as usize)
                && s.entry.position == c.position
                && s.next == c.now
            {
                s.page = c.page;
            }
        }
        self.last_save = PersistStats {
            writes: stats.writes,
            folded: stats.folded,
            paced_pages: stats.paced_pages,
        };
        self.schedule.changed.clear();
        Ok(true)
    }

    /// Page writes of the last successful [`persist`](Self::persist) (for tests and
    /// benchmarks: a write after one change takes O(1) pages).
    pub fn last_persist_writes(&self) -> usize {
        self.last_save.writes
    }

    /// What the last successful [`persist`](Self::persist) wrote: its page writes, whether it
    /// folded every log synchronously, and how many record pages a paced fold rewrote in it
    /// (for tests and benchmarks).
    pub fn last_persist_stats(&self) -> PersistStats {
        self.last_save
    }

    /// The schedule stored in the table's pages (ascending position), as a restarted replica
    /// would load it; the table is not changed. Empty without persistence or when nothing is
    /// stored. For tools and tests.
    ///
    /// # Errors
    /// As [`reload`](Self::reload).
    pub fn stored_schedule(
        &self,
        pages: &dyn ReservedPages,
    ) -> Result<Vec<(u32, Due)>, TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(Vec::new());
        };
        let form = table_store::form(
            persistence.range,
            persistence.max_scheduled,
            pages.page_size(),
        )?;
        let (next, _) = TableStore::load(pages, persistence.range, form, self.component_id)?;
        Ok(next.into_iter().collect())
    }

    /// Pages a range needs to persist a table of at most `max_scheduled` indexed entries in
    /// pages of `page_size` bytes (1 when they all fit one page), or `None` when such pages
    /// cannot hold a record. A larger range is fine: the extra pages lengthen the log, so
    /// folds are rarer.
    pub fn pages_needed(max_scheduled: u32, page_size: usize) -> Option<u32> {
        table_store::pages_needed(max_scheduled, page_size)
    }

    /// Reloads the schedule from the pages: the host calls it at start-up (a fresh store reads
    /// as empty), after a restart and after a state transfer, inside its execution thread.
    ///
    /// Entries may be registered before or after the reload; either way each indexed entry
    /// honours the stored schedule of its position. Records of positions with no entry are kept
    /// (their entry may be registered later) and count against `max_scheduled`. On error the
    /// in-memory schedule is unchanged.
    ///
    /// # Errors
    /// [`TableError::RangeTooShort`] / [`TableError::RangeTooSmall`] (the range cannot hold
    /// `max_scheduled` records), [`TableError::OldLayout`] (pages of table layout 1),
    /// [`TableError::ForeignSchedule`], [`TableError::TooManyRecords`] (the stored records and
    /// the registered entries exceed the bound), [`TableError::Persist`] (pages fail their
    /// checks).
    pub fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(());
        };
        let form = table_store::form(
            persistence.range,
            persistence.max_scheduled,
            pages.page_size(),
        )?;
        let (next, store) = TableStore::load(pages, persistence.range, form, self.component_id)?;
        let orphans = next
            .keys()
            .filter(|p| self.get(**p).is_none_or(|e| e.rule.schedule().is_none()))
            .count();
        let held = orphans.saturating_add(self.scheduled_count as usize);
        if next.len() > persistence.max_scheduled as usize
            || held > persistence.max_scheduled as usize
        {
            return Err(TableError::TooManyRecords {
                found: next.len().max(held),
                max: persistence.max_scheduled,
            });
        }
        // Validated: from here on nothing fails.
        let mut next = next;
        let records = next.len();
        let mut with_record = 0;
        for (position, &slot) in &self.entries {
            let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Some(schedule) = s.entry.rule.schedule() else {
                continue;
            };
            let new = next.remove(position);
            let (old_key, new_key) = (schedule.due_key(s.next), schedule.due_key(new));
            self.index.move_key(slot, *position, old_key, new_key);
            s.next = new;
            s.page = NO_PAGE;
            with_record += u32::from(new.is_some());
        }
        self.schedule.orphans = next;
        self.schedule.changed.clear();
        self.with_record = with_record;
        self.store = store;
        tracing::debug!(
            component_id = self.component_id,
            records,
            "periodic schedule reloaded"
        );
        debug_assert!(self.check_invariants().is_ok());
        Ok(())
    }

    /// Clears the persistence: zeroes the table's pages and forgets every stored schedule (the
    /// indexed entries then start afresh: periodic ones at once on the next tick with time).
    /// Inside execution only.
    pub fn clear_persistence(&mut self, pages: &mut dyn ReservedPages) -> Result<(), TableError> {
        let Some(persistence) = self.persistence else {
            return Ok(());
        };
        codec::clear(pages, persistence.range)?;
        for (position, &slot) in &self.entries {
            let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Some(schedule) = s.entry.rule.schedule() else {
                continue;
            };
            let (old_key, new_key) = (schedule.due_key(s.next), schedule.due_key(None));
            self.index.move_key(slot, *position, old_key, new_key);
            s.next = None;
            s.page = NO_PAGE;
        }
        // The pages are empty and so is the schedule: nothing to write.
        self.schedule = ScheduleStore::default();
        self.with_record = 0;
        self.store = TableStore::new();
        Ok(())
    }
}
