//! [`BlockHost::snapshot`], [`BlockHost::checkpoint`] and [`BlockHost::restore`]: the
//! canonical encoding of the whole replicated state (versioned layout; layouts 2 and 3
//! migrated on restore).

use std::collections::BTreeMap;

use super::counters::CountersWire;
use super::{BlockHost, HostCounters, HostError, StateBudget};
use crate::ReservedPages;
use crate::host::app::{AppError, Application, Millis};
use crate::host::requests::ExecutedRequests;
use crate::host::ticks::TickCoalescer;
use crate::host::wire;

/// The layout version of [`BlockHost::snapshot`]'s bytes: 4, the executed requests in their
/// layout 5 (256-bit client ids, legacy watermarks). [`BlockHost::restore`] also reads layout 3
/// (executed requests of layout 4, 64-bit ids: [`ExecutedRequests::decode_v4`]) and layout 2
/// (executed requests of layout 3: [`ExecutedRequests::decode_legacy`]) and migrates them.
pub const HOST_SNAPSHOT_VERSION: u32 = 4;

/// The layout before 256-bit client ids [`BlockHost::restore`] still reads (executed requests
/// of layout 4).
const HOST_SNAPSHOT_V3: u32 = 3;

/// The oldest layout [`BlockHost::restore`] still reads (executed requests of layout 3).
const HOST_SNAPSHOT_LEGACY: u32 = 2;

/// The body of a host snapshot (layouts 2 to 4): application snapshot, non-empty pages, last
/// height, last agreed time, coalescer entries, tick floor entries, executed requests,
/// counters.
type SnapshotBody = (
    Vec<u8>,
    Vec<(u32, Vec<u8>)>,
    u64,
    Option<Millis>,
    Vec<(u32, u32, i64)>,
    Vec<(u32, u32, u64)>,
    Vec<u8>,
    CountersWire,
);

/// A whole host snapshot: version, body, and the state budget `(base, growth)` (last, so a
/// checkpoint can set the base to the body's own length).
pub(super) type SnapshotFile = (u32, Vec<u8>, (u64, u64));

impl<A: Application, P: ReservedPages> BlockHost<A, P> {
    pub(super) fn snapshot_body(&self) -> Result<Vec<u8>, HostError> {
        let mut pages = Vec::new();
        for id in 0..self.pages.num_pages() {
            if let Some(d) = self.pages.load(id)?
                && !d.is_empty()
            {
                pages.push((id, d.to_vec()));
            }
        }
        let body: SnapshotBody = (
            self.app.snapshot(),
            pages,
            self.last_height,
            self.last_agreed_ms,
            self.gate.coalescer().entries().collect(),
            self.gate.floor_entries().collect(),
            self.requests
                .encode()
                .map_err(|e| HostError::BadSnapshot(e.to_string()))?,
            self.counters.encoded(),
        );
        wire::encode(&body).map_err(|e| HostError::BadSnapshot(e.to_string()))
    }

    fn seal(body: Vec<u8>, budget: StateBudget) -> Result<Vec<u8>, HostError> {
        let file: SnapshotFile = (HOST_SNAPSHOT_VERSION, body, (budget.base, budget.growth));
        wire::encode(&file).map_err(|e| HostError::BadSnapshot(e.to_string()))
    }

    /// Canonical encoding of the whole replicated state (for restarts and the engine's state
    /// sync), layout [`HOST_SNAPSHOT_VERSION`].
    pub fn snapshot(&self) -> Result<Vec<u8>, HostError> {
        Self::seal(self.snapshot_body()?, self.budget)
    }

    /// A snapshot taken at a checkpoint height, which every validator takes at the same
    /// heights: the state budget becomes exact (its base is the snapshot's size, its growth
    /// zero) before the snapshot records it, so a validator that installs this snapshot holds
    /// the same budget as one that took it.
    pub fn checkpoint(&mut self) -> Result<Vec<u8>, HostError> {
        let body = self.snapshot_body()?;
        self.budget.base = body.len() as u64;
        self.budget.growth = 0;
        Self::seal(body, self.budget)
    }

    /// Replaces the state with a snapshot of [`BlockHost::snapshot`]. The snapshot is decoded
    /// and checked, and the application restored, before any page changes; a store that then
    /// refuses a write halts the host. A snapshot of another layout is refused
    /// ([`HostError::BadSnapshot`]).
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), HostError> {
        self.parts.all_changed();
        let bad = |e: String| HostError::BadSnapshot(e);
        let (version, body, (base, growth)): SnapshotFile =
            wire::decode(snapshot, wire::ABSOLUTE_LIMIT_BYTES).map_err(|e| bad(e.to_string()))?;
        if !(HOST_SNAPSHOT_LEGACY..=HOST_SNAPSHOT_VERSION).contains(&version) {
            return Err(bad(format!(
                "host snapshot layout {version}, this build reads {HOST_SNAPSHOT_LEGACY} to {HOST_SNAPSHOT_VERSION}"
            )));
        }
        let (app, pages, height, agreed, evals, floor, executed, counters): SnapshotBody =
            wire::decode(&body, wire::ABSOLUTE_LIMIT_BYTES).map_err(|e| bad(e.to_string()))?;
        if pages
            .iter()
            .any(|(id, d)| *id >= self.pages.num_pages() || d.len() > self.pages.page_size())
        {
            return Err(bad("pages do not fit the store".into()));
        }
        let requests = match version {
            HOST_SNAPSHOT_LEGACY => {
                ExecutedRequests::decode_legacy(&executed, wire::ABSOLUTE_LIMIT_BYTES)
            }
            HOST_SNAPSHOT_V3 => ExecutedRequests::decode_v4(&executed, wire::ABSOLUTE_LIMIT_BYTES),
            _ => ExecutedRequests::decode(&executed, wire::ABSOLUTE_LIMIT_BYTES),
        }
        .map_err(|e| bad(e.to_string()))?;
        if requests.max_clients() != self.requests.max_clients() {
            return Err(bad(format!(
                "executed-requests bound {} in the snapshot, {} here",
                requests.max_clients(),
                self.requests.max_clients()
            )));
        }
        self.app
            .restore(&app)
            .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        let by_id: BTreeMap<u32, Vec<u8>> = pages.into_iter().collect();
        for id in 0..self.pages.num_pages() {
            let written = match by_id.get(&id) {
                Some(d) => self.pages.save(id, d),
                None => self.pages.zero(id),
            };
            if let Err(e) = written {
                let fatal = AppError::Fatal(format!("restored pages not saved: {e}"));
                self.halted = Some(fatal.clone());
                return Err(HostError::Halted(fatal));
            }
        }
        self.app
            .reload(&self.pages)
            .map_err(|e| HostError::BadSnapshot(e.to_string()))?;
        self.last_height = height;
        self.last_agreed_ms = agreed;
        self.gate
            .replace_state(TickCoalescer::from_entries(evals), floor);
        self.requests = requests;
        self.counters = HostCounters::from_encoded(counters);
        self.budget.base = base;
        self.budget.growth = growth;
        Ok(())
    }
}
