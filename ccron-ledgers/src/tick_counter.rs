//! [`TickCounter`]: a demo [`TickExecutor`] recording every tick in the reserved pages (so that
//! checkpoints and state transfer visibly carry pages).

use bincode::{Decode, Encode};
use ccron::{PageId, ReservedPages, Tick};

use ccron::host::Millis;
use ccron::host::app::{AppError, TickExecutor};
use ccron::host::wire as codec;

/// Per-component tick record kept by [`TickCounter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct TickRecord {
    /// Component.
    pub component: u32,
    /// Ticks executed for it.
    pub count: u64,
    /// Sequence number of the last one.
    pub last_seq: u64,
    /// Agreed time of the last one.
    pub last_time_ms: Option<Millis>,
}

/// A demo [`TickExecutor`]: counts ticks per component in reserved pages
/// `first_page..first_page + pages` (component `c` in page `first_page + c % pages`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickCounter {
    first_page: PageId,
    pages: u32,
}

impl TickCounter {
    /// A counter using pages `first_page..first_page + pages` (at least one page).
    pub fn new(first_page: PageId, pages: u32) -> Self {
        Self {
            first_page,
            pages: pages.max(1),
        }
    }

    fn page_of(&self, component: u32) -> PageId {
        self.first_page.saturating_add(component % self.pages)
    }

    /// The records stored for `component`'s page.
    pub fn records(pages: &dyn ReservedPages, page: PageId) -> Result<Vec<TickRecord>, AppError> {
        match pages.load(page)? {
            None => Ok(Vec::new()),
            Some(b) => codec::decode(b, b.len()).map_err(|e| AppError::BadSnapshot(e.to_string())),
        }
    }

    /// The record of `component`, if it ever ticked.
    pub fn record(&self, pages: &dyn ReservedPages, component: u32) -> Option<TickRecord> {
        Self::records(pages, self.page_of(component))
            .ok()?
            .into_iter()
            .find(|r| r.component == component)
    }
}

impl TickExecutor for TickCounter {
    fn on_tick(&mut self, tick: Tick, pages: &mut dyn ReservedPages) -> Result<(), AppError> {
        let page = self.page_of(tick.component_id);
        let mut recs = Self::records(pages, page)?;
        match recs.iter_mut().find(|r| r.component == tick.component_id) {
            Some(r) => {
                r.count += 1;
                r.last_seq = tick.bft_sequence_num;
                r.last_time_ms = tick.agreed_time_ms;
            }
            None => {
                recs.push(TickRecord {
                    component: tick.component_id,
                    count: 1,
                    last_seq: tick.bft_sequence_num,
                    last_time_ms: tick.agreed_time_ms,
                });
                recs.sort_by_key(|r| r.component);
            }
        }
        let bytes = codec::encode(&recs).map_err(|e| AppError::TickRejected(e.to_string()))?;
        pages.save(page, &bytes)?;
        Ok(())
    }

    fn page_ranges(&self) -> Vec<ccron::PageRange> {
        ccron::PageRange::new(self.first_page, self.pages)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::MemPages;

    #[test]
    fn tick_counter_records_in_pages() {
        let mut pages = MemPages::new(4096, 4);
        let mut t = TickCounter::new(1, 3);
        t.on_tick(Tick::new(5, 9, Some(100)), &mut pages).unwrap();
        t.on_tick(Tick::new(5, 10, Some(101)), &mut pages).unwrap();
        t.on_tick(Tick::new(2, 10, Some(101)), &mut pages).unwrap();
        let r = t.record(&pages, 5).unwrap();
        assert_eq!((r.count, r.last_seq, r.last_time_ms), (2, 10, Some(101)));
        assert_eq!(t.record(&pages, 2).unwrap().count, 1);
        assert!(t.record(&pages, 3).is_none());
    }
}
