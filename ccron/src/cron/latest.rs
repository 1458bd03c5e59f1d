//! Backward searches of a [`CronSchedule`]: its latest fire instants in an interval, found
//! without walking every missed instant (what a catch-up after a long stall needs).

use core::cell::Cell;

use super::zoned::Budget;
use super::{
    CronError, CronSchedule, Exhausted, LATEST_IN_SEARCH_BUDGET, LATEST_IN_SEARCHES_PER_COUNT,
    MAX_PREVIEW_COUNT, SEARCH_STEP_BUDGET,
};
use crate::tick::TimeMs;

impl CronSchedule {
    /// The latest `count` fire instants in `(after_ms, through_ms]`, ascending (fewer when the
    /// interval holds fewer).
    ///
    /// A catch-up after a long stall wants the *most recent* missed instants without walking
    /// every one of them (a job every second, a year late, has 31 million). The search walks a
    /// window ending at `through_ms` that doubles (from `count` seconds) until it holds `count`
    /// instants or reaches `after_ms`; a window found too dense to walk (instants crowded in its
    /// older half) is halved instead, latest half first. Fire instants are distinct whole
    /// seconds, so a span of fewer than `2·count + 8` seconds is always walked: both searches
    /// end, after O(count + log(span)) searches for evenly spread instants and
    /// O(count · log(span)) at worst.
    ///
    /// Budget: at most [`LATEST_IN_SEARCH_BUDGET`] `+` [`LATEST_IN_SEARCHES_PER_COUNT`]`·count`
    /// searches, each under its own [`SEARCH_STEP_BUDGET`]. A catch-up that spends it gets an empty list (logged;
    /// [`Self::try_latest_in`] returns the error), the same on every replica.
    pub fn latest_in(&self, after_ms: TimeMs, through_ms: TimeMs, count: usize) -> Vec<TimeMs> {
        match self.try_latest_in(after_ms, through_ms, count) {
            Ok(latest) => latest,
            Err(error) => {
                tracing::warn!(expression = %self.expression, after_ms, through_ms, count, %error,
                    "cron: catch-up search stopped");
                Vec::new()
            }
        }
    }

    /// [`Self::latest_in`], with a spent budget as an error.
    ///
    /// # Errors
    /// [`CronError::SearchBudgetExhausted`] when the searches spend their budget.
    pub fn try_latest_in(
        &self,
        after_ms: TimeMs,
        through_ms: TimeMs,
        count: usize,
    ) -> Result<Vec<TimeMs>, CronError> {
        let searches = u32::try_from(count)
            .unwrap_or(u32::MAX)
            .saturating_mul(LATEST_IN_SEARCHES_PER_COUNT)
            .saturating_add(LATEST_IN_SEARCH_BUDGET);
        let searches = Cell::new(searches);
        self.latest_in_budgeted(after_ms, through_ms, count, &searches)
            .map_err(|Exhausted| CronError::SearchBudgetExhausted {
                expression: self.expression.clone(),
            })
    }

    fn latest_in_budgeted(
        &self,
        after_ms: TimeMs,
        through_ms: TimeMs,
        count: usize,
        searches: &Cell<u32>,
    ) -> Result<Vec<TimeMs>, Exhausted> {
        if count == 0 || through_ms <= after_ms {
            return Ok(Vec::new());
        }
        let mut window_ms = i128::try_from(count)
            .unwrap_or(i128::MAX)
            .saturating_mul(1_000);
        loop {
            let lower_ms = (i128::from(through_ms) - window_ms).max(i128::from(after_ms)) as TimeMs;
            match self.walk_tail(lower_ms, through_ms, count, searches)? {
                Some(tail) if tail.len() == count || lower_ms == after_ms => return Ok(tail),
                Some(_) => window_ms = window_ms.saturating_mul(2),
                None => return self.latest_by_halving(lower_ms, through_ms, count, searches),
            }
        }
    }

    /// One budgeted search for [`Self::latest_in`].
    fn counted_next_after(
        &self,
        at_ms: TimeMs,
        searches: &Cell<u32>,
    ) -> Result<Option<TimeMs>, Exhausted> {
        let left = searches.get().checked_sub(1).ok_or(Exhausted)?;
        searches.set(left);
        self.next_after_in(at_ms, &Budget::new(SEARCH_STEP_BUDGET))
    }

    /// The last `count` instants of `(after_ms, through_ms]` by walking forward, or `None` when
    /// the interval holds more than `2·count + 8` (too many to walk).
    fn walk_tail(
        &self,
        after_ms: TimeMs,
        through_ms: TimeMs,
        count: usize,
        searches: &Cell<u32>,
    ) -> Result<Option<Vec<TimeMs>>, Exhausted> {
        let walk_limit = count.saturating_mul(2).saturating_add(8);
        let mut ring = std::collections::VecDeque::with_capacity(count.min(MAX_PREVIEW_COUNT));
        let mut at_ms = after_ms;
        let mut walked = 0usize;
        while let Some(t) = self
            .counted_next_after(at_ms, searches)?
            .filter(|&t| t <= through_ms)
        {
            walked += 1;
            if walked > walk_limit {
                return Ok(None);
            }
            if ring.len() == count {
                ring.pop_front();
            }
            ring.push_back(t);
            at_ms = t;
        }
        Ok(Some(ring.into()))
    }

    /// [`Self::latest_in`] by halving: the latest half first, then what is still missing from
    /// the earlier half.
    fn latest_by_halving(
        &self,
        after_ms: TimeMs,
        through_ms: TimeMs,
        count: usize,
        searches: &Cell<u32>,
    ) -> Result<Vec<TimeMs>, Exhausted> {
        if count == 0 || through_ms <= after_ms {
            return Ok(Vec::new());
        }
        if let Some(tail) = self.walk_tail(after_ms, through_ms, count, searches)? {
            return Ok(tail);
        }
        let mid_ms = ((i128::from(after_ms) + i128::from(through_ms)) / 2) as TimeMs;
        let mut latest = self.latest_by_halving(mid_ms, through_ms, count, searches)?;
        if latest.len() < count {
            let mut earlier =
                self.latest_by_halving(after_ms, mid_ms, count - latest.len(), searches)?;
            earlier.append(&mut latest);
            latest = earlier;
        }
        Ok(latest)
    }
}
