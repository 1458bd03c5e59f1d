//! The registry: one cron table per component, and the dispatch of committed ticks.
//!
//! Tables are created only by explicit registration (identical application setup on every
//! replica). A tick for an unregistered component is a typed error, counted and traced, and
//! creates no state: Concord created a table on any access, so a stray tick grew the state.

use std::collections::BTreeMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::entry::CronEntry;
use crate::pages::{PageRange, ReservedPages};
use crate::schedule::Overlap;
use crate::table::{CronTable, TableError, TickOutcome};
use crate::tick::{ComponentId, Tick};

/// Errors of the registry.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryError {
    /// A tick (or a lookup) for a component with no registered table.
    #[error("no cron table is registered for component {0}")]
    UnknownComponent(ComponentId),
    /// `register` for a component that already has a table.
    #[error("component {0} already has a cron table")]
    AlreadyRegistered(ComponentId),
    /// Two tables would persist into overlapping page ranges.
    #[error("page range of component {component_id} overlaps that of component {other}")]
    OverlappingPages {
        /// The component being registered.
        component_id: ComponentId,
        /// The component already holding part of the range.
        other: ComponentId,
    },
    /// The table of `component_id` failed.
    #[error("component {component_id}: {source}")]
    Table {
        /// The failing table's component.
        component_id: ComponentId,
        /// What failed.
        source: TableError,
    },
}

/// The byte a table entry's overlap policy adds to the setup digest (fixed forever).
fn overlap_code(overlap: Overlap) -> u8 {
    match overlap {
        Overlap::AllowAll => 0,
        Overlap::Skip => 1,
        Overlap::BufferOne => 2,
        Overlap::BufferAll => 3,
        // Refused on table entries (`CronEntry::with_overlap`); its code is fixed all the same.
        Overlap::CancelOther => 4,
    }
}

/// All cron tables of a replica, by component id.
pub struct CronTableRegistry<S> {
    tables: BTreeMap<ComponentId, CronTable<S>>,
    /// The handler sets declared per component (`(name, version)` ascending by name): code
    /// the component's schedule book runs, part of the setup digest.
    handlers: BTreeMap<ComponentId, Vec<(String, u32)>>,
    unknown_ticks: u64,
    /// Bumped by every change the tables' own generations ([`CronTable::generation`]) do not
    /// show: a table registered, removed or lent out mutably, a handler set declared.
    structure: u64,
    /// The last [`Self::setup_digest`] and what it was computed from: hosts fold the setup
    /// digest into the state digest after every block, and it changes only with the setup.
    setup_cache: Mutex<Option<SetupCache>>,
}

/// A computed setup digest with the registry's structure counter and every table's
/// generation at the time: still right while both are unchanged.
struct SetupCache {
    structure: u64,
    tables: Vec<u64>,
    digest: [u8; 32],
}

impl<S> Default for CronTableRegistry<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> std::fmt::Debug for CronTableRegistry<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronTableRegistry")
            .field("tables", &self.tables)
            .field("handlers", &self.handlers)
            .field("unknown_ticks", &self.unknown_ticks)
            .finish()
    }
}

impl<S> CronTableRegistry<S> {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            tables: BTreeMap::new(),
            handlers: BTreeMap::new(),
            unknown_ticks: 0,
            structure: 0,
            setup_cache: Mutex::new(None),
        }
    }

    /// Invalidates the setup digest's cache ([`Self::setup_digest`]).
    fn touch(&mut self) {
        self.structure = self.structure.wrapping_add(1);
    }

    /// Declares the handler set (names and versions, [`crate::schedule::Handlers::manifest`])
    /// that `component`'s schedule book runs, replacing any declared before: it enters
    /// [`Self::setup_digest`], so replicas built with different handlers (one renamed, dropped
    /// or at another version) disagree visibly at the first checkpoint rather than at the
    /// first run. A `CronLedger` with a schedule book declares its book's handlers itself.
    pub fn declare_handlers(
        &mut self,
        component: ComponentId,
        manifest: impl IntoIterator<Item = (String, u32)>,
    ) {
        let mut set: Vec<(String, u32)> = manifest.into_iter().collect();
        set.sort();
        set.dedup_by(|a, b| a.0 == b.0);
        self.handlers.insert(component, set);
        self.touch();
    }

    /// The handler set declared for `component` ([`Self::declare_handlers`]).
    pub fn declared_handlers(&self, component: ComponentId) -> Option<&[(String, u32)]> {
        self.handlers.get(&component).map(Vec::as_slice)
    }

    /// Registers `table` under its component id. Its page range must not overlap another
    /// table's.
    pub fn register(&mut self, table: CronTable<S>) -> Result<(), RegistryError> {
        let component_id = table.component_id();
        if self.tables.contains_key(&component_id) {
            return Err(RegistryError::AlreadyRegistered(component_id));
        }
        if let Some(mine) = table.persistence() {
            for (other, t) in &self.tables {
                if let Some(theirs) = t.persistence()
                    && mine.range.overlaps(&theirs.range)
                {
                    return Err(RegistryError::OverlappingPages {
                        component_id,
                        other: *other,
                    });
                }
            }
        }
        self.tables.insert(component_id, table);
        self.touch();
        Ok(())
    }

    /// Removes the table of `component` and returns it, calling no on_remove (its persisted
    /// schedule stays in the pages).
    pub fn disassociate(&mut self, component: ComponentId) -> Option<CronTable<S>> {
        self.touch();
        self.tables.remove(&component)
    }

    /// The table of `component`.
    pub fn get(&self, component: ComponentId) -> Option<&CronTable<S>> {
        self.tables.get(&component)
    }

    /// The table of `component`, mutably.
    pub fn get_mut(&mut self, component: ComponentId) -> Option<&mut CronTable<S>> {
        // The caller may replace the table itself, which its generation would not show.
        self.touch();
        self.tables.get_mut(&component)
    }

    /// The registered components, ascending.
    pub fn components(&self) -> impl Iterator<Item = ComponentId> + '_ {
        self.tables.keys().copied()
    }

    /// Number of registered tables.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    /// Whether no table is registered.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// How many ticks named an unregistered component.
    pub fn unknown_ticks(&self) -> u64 {
        self.unknown_ticks
    }

    /// The table a committed tick is for. An unregistered component is counted, traced and
    /// reported as a typed error; no table is created for it.
    fn table_for(&mut self, tick: &Tick) -> Result<&mut CronTable<S>, RegistryError> {
        match self.tables.get_mut(&tick.component_id) {
            Some(table) => Ok(table),
            None => {
                self.unknown_ticks += 1;
                tracing::warn!(
                    component_id = tick.component_id,
                    seq = tick.bft_sequence_num,
                    "tick for an unregistered component"
                );
                Err(RegistryError::UnknownComponent(tick.component_id))
            }
        }
    }

    /// Dispatches a committed tick to its component's table ([`CronTable::evaluate`]).
    pub fn evaluate(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
    ) -> Result<TickOutcome, RegistryError> {
        self.evaluate_emitting(tick, state, pages, None)
    }

    /// [`Self::evaluate`] with outbox room reserved for the pass
    /// ([`CronTable::evaluate_emitting`]).
    pub fn evaluate_emitting(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        emits: Option<&mut crate::outbox::Emits>,
    ) -> Result<TickOutcome, RegistryError> {
        self.run_table(tick, |t| t.evaluate_emitting(tick, state, pages, emits))
    }

    /// [`Self::evaluate_emitting`] with the entries' overlap policies reading "no result yet"
    /// from `results`, the host's outbox ([`CronTable::evaluate_with_results`]).
    pub fn evaluate_with_results(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
        emits: Option<&mut crate::outbox::Emits>,
        results: &dyn crate::entry::PendingResults,
    ) -> Result<TickOutcome, RegistryError> {
        self.run_table(tick, |t| {
            t.evaluate_with_results(tick, state, pages, emits, results)
        })
    }

    /// Dispatches a committed tick with the linear-scan reference evaluation
    /// ([`CronTable::evaluate_linear`]): same outcome as [`evaluate`](Self::evaluate), O(n) per
    /// tick. For cross-checking runs (a simulator mode) and baselines, not for production.
    pub fn evaluate_linear(
        &mut self,
        tick: &Tick,
        state: &mut S,
        pages: &mut dyn ReservedPages,
    ) -> Result<TickOutcome, RegistryError> {
        self.run_table(tick, |t| t.evaluate_linear(tick, state, pages))
    }

    /// Runs `pass` on the table of `tick`'s component, naming the component in its error.
    fn run_table(
        &mut self,
        tick: &Tick,
        pass: impl FnOnce(&mut CronTable<S>) -> Result<TickOutcome, crate::table::TableError>,
    ) -> Result<TickOutcome, RegistryError> {
        pass(self.table_for(tick)?).map_err(|source| RegistryError::Table {
            component_id: tick.component_id,
            source,
        })
    }

    /// Reloads every table's schedule from the pages (after restart or state transfer).
    /// Stops at the first failing table and reports it.
    pub fn reload(&mut self, pages: &dyn ReservedPages) -> Result<(), RegistryError> {
        self.touch();
        for (component_id, table) in &mut self.tables {
            table.reload(pages).map_err(|source| RegistryError::Table {
                component_id: *component_id,
                source,
            })?;
        }
        Ok(())
    }

    /// A digest of what is registered (components, positions, rule kinds, schedule parameters,
    /// page ranges, and the declared handler sets with their versions,
    /// [`Self::declare_handlers`]). Replicas that set up different tables get different digests, so a setup
    /// mismatch can be detected instead of diverging silently. User rules are opaque code and
    /// contribute only their position. It also includes
    /// [`crate::determinism::environment_digest`] (tz data version, cron engine behaviour,
    /// codec bytes), so replicas built against drifting dependency versions differ here too.
    ///
    /// Computed once per setup: kept until a table gains or loses an entry
    /// ([`CronTable::generation`]) or the registry changes (hosts call it after every block).
    pub fn setup_digest(&self) -> [u8; 32] {
        // A poisoned lock only means a panic elsewhere while it was held; the cache is written
        // whole, so what it holds is still a consistent (digest, key) pair.
        let mut cache = self
            .setup_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = cache.as_ref()
            && c.structure == self.structure
            && c.tables
                .iter()
                .copied()
                .eq(self.tables.values().map(CronTable::generation))
        {
            return c.digest;
        }
        let digest = self.compute_setup_digest();
        *cache = Some(SetupCache {
            structure: self.structure,
            tables: self.tables.values().map(CronTable::generation).collect(),
            digest,
        });
        digest
    }

    /// [`Self::setup_digest`] computed afresh.
    fn compute_setup_digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"ENV");
        h.update(crate::determinism::environment_digest());
        for (component_id, table) in &self.tables {
            h.update(b"T");
            h.update(component_id.to_le_bytes());
            if let Some(p) = table.persistence() {
                h.update(p.range.first().to_le_bytes());
                h.update(p.range.len().to_le_bytes());
                h.update(p.max_scheduled.to_le_bytes());
            }
            for position in table.positions() {
                h.update(b"E");
                h.update(position.to_le_bytes());
                let entry = table.get(position);
                match entry.and_then(|e| e.rule().schedule()) {
                    Some(schedule) => {
                        let fingerprint = schedule.fingerprint();
                        h.update(b"S");
                        h.update((fingerprint.len() as u64).to_le_bytes());
                        h.update(&fingerprint);
                    }
                    None => h.update(b"C"),
                }
                // Only a policy other than the default: existing setups keep their digest.
                if let Some(overlap) = entry.map(CronEntry::overlap).filter(|o| o.tracks()) {
                    h.update(b"O");
                    h.update([overlap_code(overlap)]);
                }
            }
        }
        // Only when declared: a registry without schedule books keeps its digest.
        for (component_id, set) in &self.handlers {
            h.update(b"H");
            h.update(component_id.to_le_bytes());
            h.update(crate::schedule::manifest_digest(
                set.iter().map(|(n, v)| (n.as_str(), *v)),
            ));
        }
        h.finalize().into()
    }

    /// The reserved pages the registered tables persist to (one range per table with
    /// persistence), for hosts that check their own pages against them.
    pub fn page_ranges(&self) -> Vec<PageRange> {
        self.tables
            .values()
            .filter_map(|t| t.persistence().map(|p| p.range))
            .collect()
    }

    /// Checks every table's invariants.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (component_id, table) in &self.tables {
            if table.component_id() != *component_id {
                return Err(format!(
                    "table of {} filed under {component_id}",
                    table.component_id()
                ));
            }
            table
                .check_invariants()
                .map_err(|e| format!("component {component_id}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::MemPages;
    use crate::periodic::Periodic;

    /// The cached setup digest follows every change of the setup, including entries a pass's
    /// actions add, replace and remove (which reach the table without the registry seeing
    /// them): after each step it equals the digest computed afresh.
    #[test]
    fn the_cached_setup_digest_follows_changes_made_inside_a_pass() {
        let mut r: CronTableRegistry<()> = CronTableRegistry::new();
        let range = PageRange::new(0, 8).unwrap();
        let mut t = CronTable::with_persistence(1, range, 16);
        // Position 0 asks, on the ticks it sees, for the changes below.
        t.add(CronEntry::new(
            0,
            |_| true,
            |ctx| match ctx.tick.bft_sequence_num {
                1 => ctx.request_add(CronEntry::periodic(
                    5,
                    Periodic::every_ms(1_000).unwrap(),
                    |_| {},
                )),
                2 => ctx.request_replace(CronEntry::periodic(
                    5,
                    Periodic::every_ms(2_000).unwrap(),
                    |_| {},
                )),
                3 => ctx.request_remove(5),
                _ => {}
            },
        ))
        .unwrap();
        r.register(t).unwrap();
        let mut pages = MemPages::new(4096, 8);
        let mut seen = vec![r.setup_digest()];
        for seq in 1..=4 {
            r.evaluate(&Tick::new(1, seq, None), &mut (), &mut pages)
                .unwrap();
            let cached = r.setup_digest();
            assert_eq!(cached, r.compute_setup_digest(), "after tick {seq}");
            seen.push(cached);
        }
        // Added, replaced (another period), removed (back to the first setup), unchanged.
        assert_ne!(seen[1], seen[0]);
        assert_ne!(seen[2], seen[1]);
        assert_eq!(seen[3], seen[0]);
        assert_eq!(seen[4], seen[3]);
        // Changes the tables' generations do not show.
        r.declare_handlers(1, [("h".to_string(), 1)]);
        assert_eq!(r.setup_digest(), r.compute_setup_digest());
        assert_ne!(r.setup_digest(), seen[4]);
        let table = r.disassociate(1).unwrap();
        assert_eq!(r.setup_digest(), r.compute_setup_digest());
        r.register(table).unwrap();
        assert_eq!(r.setup_digest(), r.compute_setup_digest());
    }
}
