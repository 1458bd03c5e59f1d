//! Exactly-once client requests, pure: which `(client, request number)` pairs a ledger has
//! already executed, and which numbers a client may use next.
//!
//! An engine orders whatever its proposers put in blocks; a client that submits one signed
//! request to several validators (so that any proposer has it), or a Byzantine proposer that
//! replays an old request, can get the same request ordered twice. Every validator runs the
//! ordered requests through the same [`ExecutedRequests`] before execution and drops the ones it
//! already executed, so each `(client, number)` executes at most once on every validator.
//!
//! **Below a client's highest number**: a window of the [`REQUEST_WINDOW`] numbers below the
//! highest executed one. A number inside the window executes once, in any order (a client may
//! have several requests in flight); a number below it is refused as too old
//! ([`DuplicateRequest::TooOld`]).
//!
//! **Above it**: a number is accepted only up to the client's *ceiling*, the larger of its
//! highest executed number plus [`AHEAD_WINDOW`] and the agreed time in microseconds plus
//! [`CLOCK_SLACK_US`] ([`ExecutedRequests::ceiling`]); above it the request is refused
//! ([`DuplicateRequest::AheadOfWindow`]), counted ([`ExecutedRequests::refused_ahead`]) and
//! traced, the same on every validator (both bounds are replicated: the client's history and
//! the block's agreed time). A client numbering consecutively (sim-bft's clients, the load
//! generators) stays under the first bound; one numbering from its wall clock in milliseconds
//! or microseconds (the CLI's default) under the second. No client can take its numbers to
//! `u64::MAX` in any practical horizon (2^48 requests, or half a million years), and if one did
//! it would only stop itself.
//!
//! **Bounded table, eviction that touches nobody else.** At most `max_clients` clients keep
//! a full entry (window mask, last execution; [`DEFAULT_MAX_CLIENTS`] unless
//! [`ExecutedRequests::with_max_clients`]). When a request of a client without an entry
//! executes while the table is full, the **least recently executed** client (by execution
//! order, identical on every validator) is evicted to a compact **watermark**: its highest
//! executed number, 16 bytes. A client with a watermark may use only numbers above it
//! ([`DuplicateRequest::BelowFloor`]; the numbers of its old window it had not used yet are
//! given up: a client that may be evicted does not leave gaps it means to fill later). When it
//! executes again it gets a full entry back, with every number at or below the watermark marked
//! executed. Eviction changes no other client's bounds: a client's numbers are judged only by
//! its own history, so no client, however it numbers, can make another's request refused.
//!
//! Why a watermark per client and not a bounded structure: whatever a bounded table forgets
//! about an evicted client must be replaced by a bound, and a bound that is not the client's
//! own is either global (the floor this table kept until layout 4: raised by the evicted
//! client's highest number, so one client numbering `u64::MAX - 1` froze every later-evicted
//! or new client at one request, forever) or needs the client to carry replicated context in
//! each request (an epoch it must read first, a wire change in every engine and client). A
//! watermark exists only for a client that executed a request, so the watermarks grow by at
//! most one per executed request, 16 bytes, within the per-request overhead
//! ([`super::REQUEST_OVERHEAD_BYTES`]) the host's state budget reserves; an evicted entry
//! shrinks from 56 bytes to 16.
//!
//! **256-bit client ids (layout 5).** Clients are named by their 32-byte [`ClientId`]. Tables
//! of layouts 4 and before named them by 64-bit ids, which cannot be widened: their migration
//! ([`ExecutedRequests::decode_v4`], [`ExecutedRequests::decode_legacy`]) turns every old entry
//! and watermark into a **legacy watermark** (the old id and its highest executed number; the
//! numbers of an entry's window it had not used are given up, as on eviction), frozen. A client
//! without entry or watermark of its own whose id starts with a legacy id
//! ([`ClientId::legacy_prefix`]) has that watermark as its floor, so no request its key signed
//! before the upgrade can execute again after it. Another key sharing the 8 bytes only raises
//! its own floor. Legacy watermarks are never removed (one per client of the old table).
//!
//! **Layout.** Tables encoded before layout 4 (host snapshot layout 2) kept a global floor and
//! a floor per entry; [`ExecutedRequests::decode_legacy`] migrates them: each entry's floor
//! becomes executed marks in its window, and the old global floor stays as the **base**, the
//! lowest number of a client without entry or watermark (it may have been evicted before the
//! migration, and its history is lost), frozen (nothing raises it any more). Tables started at
//! layout 4 have base 0.
//!
//! The state is replicated (every validator holds the same after the same blocks), so it belongs
//! in the state digest ([`ExecutedRequests::digest`]) and in snapshots
//! ([`ExecutedRequests::encode`] / [`ExecutedRequests::decode`]).

use std::collections::BTreeMap;

use super::app::{ClientId, Digest32, Millis};
use super::wire::{self, WireError};

/// How many request numbers below a client's highest executed one are still accepted (once
/// each, in any order). The same window on every engine (sim-bft's replicas and block-driven
/// nodes run this one table).
pub const REQUEST_WINDOW: u64 = 256;

/// How far above a client's highest executed number (or its watermark, or the base for a
/// client never seen) a request number may be, whatever the time.
pub const AHEAD_WINDOW: u64 = 1 << 16;

/// How far above the agreed time in microseconds a request number may be (one hour): clients
/// numbering from their wall clock (milliseconds or microseconds) stay under it.
pub const CLOCK_SLACK_US: u64 = 3_600_000_000;

/// The layout of [`ExecutedRequests::encode`] (5: 256-bit client ids and legacy watermarks;
/// 4: 64-bit ids, watermarks and base, read by [`ExecutedRequests::decode_v4`]; 3 and before: a
/// global floor, read by [`ExecutedRequests::decode_legacy`]).
pub const EXECUTED_REQUESTS_LAYOUT: u32 = 5;

/// The executed numbers of a client's window: bit `i` set means number `highest - i` executed
/// (bit 0 is `highest` itself). [`REQUEST_WINDOW`] bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Mask([u64; 4]);

impl Mask {
    fn get(&self, i: u64) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        self.0.get(w).is_some_and(|word| word & (1u64 << b) != 0)
    }

    fn set(&mut self, i: u64) {
        let (w, b) = ((i / 64) as usize, i % 64);
        if let Some(word) = self.0.get_mut(w) {
            *word |= 1u64 << b;
        }
    }

    /// The mask of a window whose highest number is `highest`, with every number at or below
    /// `floor_below` (exclusive bound: numbers `< floor_below`) marked executed besides
    /// `highest` itself.
    fn marking_below(highest: u64, floor_below: u64) -> Mask {
        let mut m = Mask::default();
        m.set(0);
        // Numbers `highest - i` < floor_below  <=>  i > highest - floor_below (every i when
        // `highest` itself is below it); `i <= highest` (no number below 0).
        let first = highest
            .checked_sub(floor_below)
            .map_or(1, |gap| gap.saturating_add(1));
        for i in first..REQUEST_WINDOW.min(highest.saturating_add(1)) {
            m.set(i);
        }
        m
    }

    /// The mask after the highest number moved up by `shift` (older bits move out of the
    /// window).
    fn shifted(&self, shift: u64) -> Mask {
        if shift >= REQUEST_WINDOW {
            return Mask::default();
        }
        let (words, bits) = ((shift / 64) as usize, shift % 64);
        let mut out = [0u64; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            let Some(src) = i.checked_sub(words) else {
                continue;
            };
            let mut v = self.0[src] << bits;
            if bits > 0
                && let Some(lower) = src.checked_sub(1)
            {
                v |= self.0[lower] >> (64 - bits);
            }
            *slot = v;
        }
        Mask(out)
    }
}

/// The default bound of the client table's full entries (about 5 MB of state at most; evicted
/// clients keep 16 bytes each).
pub const DEFAULT_MAX_CLIENTS: usize = 100_000;

/// Why an ordered request is not executed (nothing changes; the same on every validator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DuplicateRequest {
    /// This `(client, number)` already executed.
    #[error("request {number} of client {client} already executed")]
    Executed {
        /// The client.
        client: ClientId,
        /// The request number.
        number: u64,
    },
    /// The number is below the client's window: it may have executed, it cannot be told.
    #[error(
        "request {number} of client {client} is more than {REQUEST_WINDOW} below its highest executed {highest}"
    )]
    TooOld {
        /// The client.
        client: ClientId,
        /// The request number.
        number: u64,
        /// The client's highest executed number.
        highest: u64,
    },
    /// The number is below the client's own floor: one above its watermark (it was evicted
    /// from the table after executing up to it), or the table's base for a client never seen
    /// (0 unless migrated from an older layout).
    #[error("request {number} of client {client} is below its floor {floor}")]
    BelowFloor {
        /// The client.
        client: ClientId,
        /// The request number.
        number: u64,
        /// The lowest number the client may use.
        floor: u64,
    },
    /// The number is above the client's ceiling ([`ExecutedRequests::ceiling`]): too far
    /// ahead of its history and of the agreed time.
    #[error("request {number} of client {client} is above its ceiling {ceiling}")]
    AheadOfWindow {
        /// The client.
        client: ClientId,
        /// The request number.
        number: u64,
        /// The highest number the client may use now.
        ceiling: u64,
    },
}

/// One client's full entry: the highest executed number, a mask of executed numbers below it
/// (bit `i` set: number `highest - i` executed; bit 0 is `highest` itself, [`Mask`]), and when
/// it last executed (the table's execution counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    highest: u64,
    mask: Mask,
    last_used: u64,
}

/// An entry as encoded: client, highest, mask words, last execution.
type EncodedEntry = (ClientId, u64, [u64; 4], u64);

/// Layout 5: (bound, base, clock, evictions, refused ahead), entries, watermarks, legacy
/// watermarks (64-bit id, highest).
type Encoded = (
    (u64, u64, u64, u64, u64),
    Vec<EncodedEntry>,
    Vec<(ClientId, u64)>,
    Vec<(u64, u64)>,
);

/// Layout 4 (frozen): as layout 5 with 64-bit client ids and no legacy watermarks.
type EncodedV4 = (
    (u64, u64, u64, u64, u64),
    Vec<(u64, u64, [u64; 4], u64)>,
    Vec<(u64, u64)>,
);

/// The executed request numbers of every client: full entries for a bounded set of recent
/// clients, a watermark for each evicted one (replicated state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutedRequests {
    clients: BTreeMap<ClientId, Entry>,
    /// Clients by last execution (the eviction order).
    by_use: BTreeMap<u64, ClientId>,
    /// Executions so far (the logical clock of `last_used`).
    clock: u64,
    /// Evicted clients: the highest number each executed (no entry in `clients`).
    watermarks: BTreeMap<ClientId, u64>,
    /// The lowest number of a client without entry or watermark (0; a migrated table's old
    /// floor, frozen).
    base: u64,
    /// Clients of a table migrated from 64-bit ids (layout 4 and before): the highest number
    /// each executed, by its old id; frozen (the module documentation).
    legacy: BTreeMap<u64, u64>,
    max_clients: usize,
    /// Clients evicted so far.
    evicted: u64,
    /// Requests refused as above their client's ceiling.
    refused_ahead: u64,
}

impl Default for ExecutedRequests {
    fn default() -> Self {
        Self::with_max_clients(DEFAULT_MAX_CLIENTS)
    }
}

/// The agreed time in microseconds plus [`CLOCK_SLACK_US`] (0 without time or before the
/// epoch: then only a client's history bounds its numbers).
fn clock_ceiling(now_ms: Option<Millis>) -> u64 {
    now_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map_or(0, |ms| {
            ms.saturating_mul(1_000).saturating_add(CLOCK_SLACK_US)
        })
}

impl ExecutedRequests {
    /// Nothing executed (genesis), at most [`DEFAULT_MAX_CLIENTS`] full entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nothing executed, at most `max_clients` full entries (at least 1); every validator must
    /// use the same bound.
    pub fn with_max_clients(max_clients: usize) -> Self {
        Self {
            clients: BTreeMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            watermarks: BTreeMap::new(),
            base: 0,
            legacy: BTreeMap::new(),
            max_clients: max_clients.max(1),
            evicted: 0,
            refused_ahead: 0,
        }
    }

    /// The highest number `client` may use in a block of agreed time `now_ms`: the larger of
    /// its last executed number (its highest, or its watermark; for a client never seen, one
    /// below the base) plus [`AHEAD_WINDOW`], and the agreed time in microseconds plus
    /// [`CLOCK_SLACK_US`]. Saturating.
    pub fn ceiling(&self, client: ClientId, now_ms: Option<Millis>) -> u64 {
        let by_history = match (self.clients.get(&client), self.watermark(client)) {
            (Some(e), _) => e.highest.saturating_add(AHEAD_WINDOW),
            (None, Some(w)) => w.saturating_add(AHEAD_WINDOW),
            (None, None) => self.base.saturating_add(AHEAD_WINDOW - 1),
        };
        by_history.max(clock_ceiling(now_ms))
    }

    /// The lowest number `client` may use that it cannot have used: one above its highest
    /// executed number (or its watermark), or the base for a client never seen. Saturating (a
    /// client at `u64::MAX` has none left).
    pub fn next_fresh(&self, client: ClientId) -> u64 {
        match (self.clients.get(&client), self.watermark(client)) {
            (Some(e), _) => e.highest.saturating_add(1),
            (None, Some(w)) => w.saturating_add(1),
            (None, None) => self.base,
        }
    }

    /// Whether [`admit`](Self::admit) would refuse `(client, number)` in a block of agreed time
    /// `now_ms`, without recording it.
    pub fn check(
        &self,
        client: ClientId,
        number: u64,
        now_ms: Option<Millis>,
    ) -> Result<(), DuplicateRequest> {
        let ceiling = self.ceiling(client, now_ms);
        if number > ceiling {
            return Err(DuplicateRequest::AheadOfWindow {
                client,
                number,
                ceiling,
            });
        }
        let Some(e) = self.clients.get(&client) else {
            let below = match self.watermark(client) {
                Some(w) => number <= w,
                None => number < self.base,
            };
            if below {
                let floor = self.next_fresh(client);
                return Err(DuplicateRequest::BelowFloor {
                    client,
                    number,
                    floor,
                });
            }
            return Ok(());
        };
        let (highest, mask) = (e.highest, e.mask);
        if number > highest {
            return Ok(());
        }
        let below = highest - number;
        if below >= REQUEST_WINDOW {
            return Err(DuplicateRequest::TooOld {
                client,
                number,
                highest,
            });
        }
        if mask.get(below) {
            return Err(DuplicateRequest::Executed { client, number });
        }
        Ok(())
    }

    /// The watermark of a client without a full entry: its own (it was evicted), or the legacy
    /// watermark of its old 64-bit id (the larger when both).
    fn watermark(&self, client: ClientId) -> Option<u64> {
        let own = self.watermarks.get(&client).copied();
        let legacy = self.legacy.get(&client.legacy_prefix()).copied();
        own.max(legacy)
    }

    /// Whether `(client, number)` can never execute again: it executed, or it is below its
    /// client's window or floor (a number above the ceiling is not settled: it may fit later,
    /// once the client's earlier numbers executed or time passed).
    pub fn settled(&self, client: ClientId, number: u64) -> bool {
        matches!(
            self.check(client, number, None),
            Err(DuplicateRequest::Executed { .. }
                | DuplicateRequest::TooOld { .. }
                | DuplicateRequest::BelowFloor { .. })
        )
    }

    /// Records `(client, number)` as executed in a block of agreed time `now_ms`, or refuses it
    /// ([`DuplicateRequest`]) and then nothing changes but the counter of refusals above the
    /// ceiling. A client without a full entry in a full table evicts the least recently
    /// executed one to its watermark.
    pub fn admit(
        &mut self,
        client: ClientId,
        number: u64,
        now_ms: Option<Millis>,
    ) -> Result<(), DuplicateRequest> {
        if let Err(e) = self.check(client, number, now_ms) {
            if let DuplicateRequest::AheadOfWindow { ceiling, .. } = e {
                self.refused_ahead = self.refused_ahead.saturating_add(1);
                tracing::warn!(
                    client = %client.short(),
                    number,
                    ceiling,
                    "request number above its client's ceiling: refused"
                );
            }
            return Err(e);
        }
        if !self.clients.contains_key(&client) && self.clients.len() >= self.max_clients {
            self.evict_oldest();
        }
        self.clock = self.clock.saturating_add(1);
        let clock = self.clock;
        if !self.clients.contains_key(&client) {
            // New, or back from eviction: every number below its floor counts as executed.
            let floor = self.next_fresh(client);
            self.watermarks.remove(&client);
            self.clients.insert(
                client,
                Entry {
                    highest: number,
                    mask: Mask::marking_below(number, floor),
                    last_used: clock,
                },
            );
        }
        let Some(entry) = self.clients.get_mut(&client) else {
            return Ok(());
        };
        self.by_use.remove(&entry.last_used);
        entry.last_used = clock;
        self.by_use.insert(clock, client);
        let (highest, mask) = (entry.highest, entry.mask);
        (entry.highest, entry.mask) = if number > highest {
            let mut moved = mask.shifted(number - highest);
            moved.set(0);
            (number, moved)
        } else {
            let mut kept = mask;
            kept.set(highest - number);
            (highest, kept)
        };
        Ok(())
    }

    fn evict_oldest(&mut self) {
        let Some((_, client)) = self.by_use.pop_first() else {
            return;
        };
        if let Some(e) = self.clients.remove(&client) {
            self.watermarks.insert(client, e.highest);
            self.evicted = self.evicted.saturating_add(1);
            tracing::debug!(
                client = %client.short(),
                watermark = e.highest,
                "executed-requests table full: least recently executed client evicted to its watermark"
            );
        }
    }

    /// Clients with a full entry.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Evicted clients holding a watermark.
    pub fn watermarks(&self) -> usize {
        self.watermarks.len()
    }

    /// Legacy watermarks: clients of a table migrated from 64-bit ids (module documentation).
    pub fn legacy_watermarks(&self) -> usize {
        self.legacy.len()
    }

    /// The bound of full entries.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }

    /// The lowest number of a client never seen: 0, or the floor of a table migrated from
    /// layout 3 ([`decode_legacy`](Self::decode_legacy)), frozen. Eviction never raises it.
    pub fn floor(&self) -> u64 {
        self.base
    }

    /// Clients evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Requests refused so far as above their client's ceiling
    /// ([`DuplicateRequest::AheadOfWindow`]).
    pub fn refused_ahead(&self) -> u64 {
        self.refused_ahead
    }

    /// Whether nothing executed yet.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
            && self.watermarks.is_empty()
            && self.legacy.is_empty()
            && self.evicted == 0
    }

    /// SHA-256 over the layout, bound, base, clock, evictions, refusals, the entries and the
    /// watermarks in client order, and the legacy watermarks (equal on validators that
    /// executed the same requests).
    pub fn digest(&self) -> Digest32 {
        self.digest_in(crate::state_hash::StateHash::Sha256)
    }

    /// [`Self::digest`]'s stream under the host's hash function `hash`.
    pub fn digest_in(&self, hash: crate::state_hash::StateHash) -> Digest32 {
        let mut h = crate::state_hash::StateHasher::new(hash);
        h.update(b"ccron-executed-requests/v5");
        for v in [
            self.max_clients as u64,
            self.base,
            self.clock,
            self.evicted,
            self.refused_ahead,
        ] {
            h.update(v.to_le_bytes());
        }
        h.update((self.clients.len() as u64).to_le_bytes());
        for (client, e) in &self.clients {
            h.update(client.0);
            h.update(e.highest.to_le_bytes());
            for w in e.mask.0 {
                h.update(w.to_le_bytes());
            }
            h.update(e.last_used.to_le_bytes());
        }
        h.update((self.watermarks.len() as u64).to_le_bytes());
        for (client, w) in &self.watermarks {
            h.update(client.0);
            h.update(w.to_le_bytes());
        }
        h.update((self.legacy.len() as u64).to_le_bytes());
        for (old, w) in &self.legacy {
            h.update(old.to_le_bytes());
            h.update(w.to_le_bytes());
        }
        h.finalize()
    }

    /// The canonical encoding ([`wire`]) for snapshots, layout [`EXECUTED_REQUESTS_LAYOUT`].
    ///
    /// # Errors
    /// [`WireError::Encode`] (never for this type in practice).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let entries: Vec<EncodedEntry> = self
            .clients
            .iter()
            .map(|(c, e)| (*c, e.highest, e.mask.0, e.last_used))
            .collect();
        let watermarks: Vec<(ClientId, u64)> =
            self.watermarks.iter().map(|(c, w)| (*c, *w)).collect();
        let legacy: Vec<(u64, u64)> = self.legacy.iter().map(|(c, w)| (*c, *w)).collect();
        let encoded: Encoded = (
            (
                self.max_clients as u64,
                self.base,
                self.clock,
                self.evicted,
                self.refused_ahead,
            ),
            entries,
            watermarks,
            legacy,
        );
        wire::encode(&encoded)
    }

    /// Decodes [`encode`](Self::encode)'s bytes, refusing more than `limit_bytes`, more
    /// entries than the bound, clients out of order, repeated, or with both an entry and a
    /// watermark, masks without their highest bit, and execution times repeated or after the
    /// clock.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes or entries.
    pub fn decode(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        let ((max_clients, base, clock, evicted, refused_ahead), entries, watermarks, legacy): Encoded =
            wire::decode(bytes, limit_bytes)?;
        let mut out = Self::empty_decoded(max_clients, clock, entries.len())?;
        out.base = base;
        out.evicted = evicted;
        out.refused_ahead = refused_ahead;
        for (client, highest, mask, last_used) in entries {
            out.insert_decoded(client, highest, Mask(mask), last_used)?;
        }
        let mut last = None;
        for (client, w) in watermarks {
            if last.is_some_and(|l| l >= client) || out.clients.contains_key(&client) {
                return Err(bad(format!(
                    "watermark of client {client} out of order or beside its entry"
                )));
            }
            last = Some(client);
            out.watermarks.insert(client, w);
        }
        out.set_legacy(legacy)?;
        Ok(out)
    }

    /// Installs legacy watermarks, ascending by old id.
    fn set_legacy(&mut self, legacy: Vec<(u64, u64)>) -> Result<(), WireError> {
        let mut last = None;
        for (old, w) in legacy {
            if last.is_some_and(|l| l >= old) {
                return Err(bad(format!(
                    "legacy watermark of client {old} out of order"
                )));
            }
            last = Some(old);
            self.legacy.insert(old, w);
        }
        Ok(())
    }

    /// Decodes a table of layout 4 (64-bit client ids) and migrates it: every entry (its
    /// highest number) and every watermark becomes a legacy watermark of its old id (the
    /// module documentation); no entries or watermarks of 256-bit ids; bound, base, clock and
    /// counters kept.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes, more entries than the bound, clients out of order
    /// or repeated.
    pub fn decode_v4(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        let ((max_clients, base, clock, evicted, refused_ahead), entries, watermarks): EncodedV4 =
            wire::decode(bytes, limit_bytes)?;
        let mut out = Self::empty_decoded(max_clients, clock, entries.len())?;
        out.base = base;
        out.evicted = evicted;
        out.refused_ahead = refused_ahead;
        let mut legacy: Vec<(u64, u64)> = entries
            .iter()
            .map(|(c, highest, _, _)| (*c, *highest))
            .chain(watermarks)
            .collect();
        legacy.sort_unstable();
        if legacy.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(bad("a client with both an entry and a watermark".into()));
        }
        out.set_legacy(legacy)?;
        tracing::info!(
            legacy = out.legacy.len(),
            "executed requests of layout 4 (64-bit client ids) migrated to legacy watermarks"
        );
        Ok(out)
    }

    /// Decodes a table of layout 3 (host snapshot layout 2: a global floor raised by evictions
    /// and a floor per entry, 64-bit client ids) and migrates it: each entry becomes a legacy
    /// watermark at its highest number (every number at or below it refused, its entry floor
    /// included), the global floor becomes the frozen base (every client evicted before the
    /// migration is below it), no entries of 256-bit ids, no refusals.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes or entries (as [`decode`](Self::decode), and an entry
    /// floor above the table's).
    pub fn decode_legacy(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        type Legacy = ((u64, u64, u64, u64), Vec<(u64, u64, [u64; 4], u64, u64)>);
        let ((max_clients, floor, clock, evicted), entries): Legacy =
            wire::decode(bytes, limit_bytes)?;
        let mut out = Self::empty_decoded(max_clients, clock, entries.len())?;
        out.base = floor;
        out.evicted = evicted;
        let mut legacy = Vec::with_capacity(entries.len());
        for (client, highest, mask, last_used, entry_floor) in entries {
            if entry_floor > floor {
                return Err(bad(format!(
                    "entry floor {entry_floor} of client {client} above the floor {floor}"
                )));
            }
            if !Mask(mask).get(0) || last_used == 0 || last_used > clock {
                return Err(bad(format!(
                    "entry of client {client} without its highest number or with a bad execution time"
                )));
            }
            // 64-bit ids (layout 5 names clients by 256 bits): the entry's highest number
            // becomes its legacy watermark (its window's unused numbers are given up).
            legacy.push((client, highest));
        }
        out.set_legacy(legacy)?;
        Ok(out)
    }

    fn empty_decoded(max_clients: u64, clock: u64, entries: usize) -> Result<Self, WireError> {
        let max_clients = usize::try_from(max_clients)
            .ok()
            .filter(|&m| m >= 1)
            .ok_or_else(|| bad(format!("bound {max_clients}")))?;
        if entries > max_clients {
            return Err(bad(format!("{entries} clients over the bound")));
        }
        Ok(Self {
            clock,
            ..Self::with_max_clients(max_clients)
        })
    }

    /// Inserts a decoded entry, in client order.
    fn insert_decoded(
        &mut self,
        client: ClientId,
        highest: u64,
        mask: Mask,
        last_used: u64,
    ) -> Result<(), WireError> {
        if self
            .clients
            .last_key_value()
            .is_some_and(|(&l, _)| l >= client)
            || !mask.get(0)
            || last_used == 0
            || last_used > self.clock
            || self.by_use.insert(last_used, client).is_some()
        {
            return Err(bad(format!(
                "entry of client {client} out of order, without its highest number, or with a bad execution time"
            )));
        }
        self.clients.insert(
            client,
            Entry {
                highest,
                mask,
                last_used,
            },
        );
        Ok(())
    }
}

fn bad(what: String) -> WireError {
    WireError::Malformed(format!("executed-requests: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// Client `n`: an id ordered like `n` (its last 8 bytes, big-endian), legacy prefix 0.
    fn c(n: u64) -> ClientId {
        let mut b = [0u8; 32];
        b[24..].copy_from_slice(&n.to_be_bytes());
        ClientId(b)
    }

    #[test]
    fn each_number_executes_once_in_any_order_inside_the_window() {
        let mut e = ExecutedRequests::new();
        assert_eq!(e.admit(c(7), 5, None), Ok(()));
        assert_eq!(
            e.admit(c(7), 5, None),
            Err(DuplicateRequest::Executed {
                client: c(7),
                number: 5
            })
        );
        assert_eq!(e.admit(c(7), 3, None), Ok(()));
        assert_eq!(e.admit(c(7), 9, None), Ok(()));
        assert_eq!(
            e.check(c(7), 3, None),
            Err(DuplicateRequest::Executed {
                client: c(7),
                number: 3
            })
        );
        assert_eq!(e.admit(c(7), 4, None), Ok(()));
        assert_eq!(
            e.admit(c(8), 5, None),
            Ok(()),
            "another client has its own numbers"
        );
        assert_eq!(e.admit(c(7), 9 + REQUEST_WINDOW, None), Ok(()));
        assert_eq!(
            e.admit(c(7), 9, None),
            Err(DuplicateRequest::TooOld {
                client: c(7),
                number: 9,
                highest: 9 + REQUEST_WINDOW
            })
        );
        assert_eq!(
            e.admit(c(7), 10, None),
            Ok(()),
            "the lowest number inside the window"
        );
        assert_eq!(
            e.admit(c(7), 10, None),
            Err(DuplicateRequest::Executed {
                client: c(7),
                number: 10
            })
        );
        assert!(e.settled(c(7), 10) && e.settled(c(7), 9) && !e.settled(c(7), 11));
        assert_eq!(e.clients(), 2);
    }

    #[test]
    fn numbers_above_the_ceiling_are_refused_counted_and_change_nothing() {
        let mut e = ExecutedRequests::new();
        // A client never seen: numbers below AHEAD_WINDOW (base 0).
        let first = e.ceiling(c(1), None);
        assert_eq!(first, AHEAD_WINDOW - 1);
        for n in [u64::MAX, u64::MAX - 1, AHEAD_WINDOW] {
            assert_eq!(
                e.admit(c(1), n, None),
                Err(DuplicateRequest::AheadOfWindow {
                    client: c(1),
                    number: n,
                    ceiling: first
                })
            );
        }
        assert_eq!((e.refused_ahead(), e.clients()), (3, 0));
        assert!(
            !e.settled(c(1), u64::MAX),
            "ahead is not settled: it may fit later"
        );
        assert_eq!(e.admit(c(1), AHEAD_WINDOW - 1, None), Ok(()));
        // Above its highest: AHEAD_WINDOW more.
        assert_eq!(e.ceiling(c(1), None), 2 * AHEAD_WINDOW - 1);
        assert!(e.admit(c(1), 2 * AHEAD_WINDOW, None).is_err());
        assert_eq!(e.admit(c(1), 2 * AHEAD_WINDOW - 1, None), Ok(()));
        assert_eq!(e.refused_ahead(), 4);
        // A clock-numbered client (Unix ms or µs) fits under the agreed time's bound.
        let now: Millis = 1_800_000_000_000;
        let micros = now as u64 * 1_000;
        assert_eq!(e.ceiling(c(2), Some(now)), micros + CLOCK_SLACK_US);
        assert_eq!(e.admit(c(2), now as u64, Some(now)), Ok(()));
        assert_eq!(e.admit(c(3), micros + 5, Some(now)), Ok(()));
        assert_eq!(
            e.admit(c(2), now as u64 + 86_400_000, Some(now + 86_400_000)),
            Ok(())
        );
        assert!(matches!(
            e.admit(c(4), micros + CLOCK_SLACK_US + 1, Some(now)),
            Err(DuplicateRequest::AheadOfWindow { .. })
        ));
        // Without time (or before the epoch), only the history bound.
        assert_eq!(e.ceiling(c(9), Some(-5)), AHEAD_WINDOW - 1);
        let bytes = e.encode().unwrap();
        let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
        assert_eq!((back.refused_ahead(), back.digest()), (5, e.digest()));
    }

    /// The defect of layout 3 (issue 24, item 4): a client numbering `u64::MAX - 1`, once
    /// evicted, raised the replicated floor to `u64::MAX` for every client entering the table
    /// afterwards. Now its eviction leaves only its own watermark.
    #[test]
    fn an_evicted_hostile_client_raises_nobody_elses_floor() {
        let now = Some(0x7fff_ffff_ffff_ffff);
        let mut e = ExecutedRequests::with_max_clients(2);
        assert_eq!(e.admit(c(666), u64::MAX - 1, now), Ok(()));
        assert_eq!(e.admit(c(1), 1, now), Ok(()));
        assert_eq!(e.admit(c(2), 1, now), Ok(()), "evicts the hostile client");
        assert_eq!((e.evicted(), e.watermarks(), e.floor()), (1, 1, 0));
        for k in 3..50 {
            for n in 1..4 {
                assert_eq!(e.admit(c(k), n, now), Ok(()), "client {k} number {n}");
            }
        }
        // The hostile client itself: at most u64::MAX, once.
        assert!(matches!(
            e.admit(c(666), u64::MAX - 1, now),
            Err(DuplicateRequest::BelowFloor { .. })
        ));
        assert_eq!(e.admit(c(666), u64::MAX, now), Ok(()));
        assert!(e.admit(c(666), u64::MAX, now).is_err());
    }

    #[test]
    fn an_evicted_client_comes_back_above_its_watermark_only() {
        let mut e = ExecutedRequests::with_max_clients(2);
        e.admit(c(1), 10, None).unwrap();
        e.admit(c(1), 8, None).unwrap(); // 9 never executed
        e.admit(c(2), 20, None).unwrap();
        e.admit(c(2), 21, None).unwrap();
        e.admit(c(3), 5, None).unwrap(); // evicts client 1 (watermark 10)
        assert_eq!(
            (e.clients(), e.watermarks(), e.next_fresh(c(1))),
            (2, 1, 11)
        );
        for n in [1, 9, 10] {
            assert_eq!(
                e.admit(c(1), n, None),
                Err(DuplicateRequest::BelowFloor {
                    client: c(1),
                    number: n,
                    floor: 11
                })
            );
        }
        // New clients are not affected: they start wherever they like below the ceiling.
        assert_eq!(e.check(c(4), 0, None), Ok(()));
        assert_eq!(e.admit(c(1), 12, None), Ok(()), "back: evicts client 2");
        assert_eq!(e.next_fresh(c(2)), 22);
        // Back in the table, its window still refuses everything up to the watermark.
        for n in [8, 9, 10] {
            assert_eq!(
                e.admit(c(1), n, None),
                Err(DuplicateRequest::Executed {
                    client: c(1),
                    number: n
                })
            );
        }
        assert_eq!(e.admit(c(1), 11, None), Ok(()));
        let bytes = e.encode().unwrap();
        let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.digest(), e.digest());
    }

    #[test]
    fn encoding_round_trips_and_refuses_bad_entries() {
        let mut e = ExecutedRequests::with_max_clients(3);
        for (k, n) in [(1, 3), (1, 1), (2, 100), (9, 0), (4, 7)] {
            e.admit(c(k), n, None).unwrap();
        }
        let bytes = e.encode().unwrap();
        let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.digest(), e.digest());
        assert_ne!(ExecutedRequests::new().digest(), e.digest());
        assert!(ExecutedRequests::decode(&bytes, bytes.len() - 1).is_err());
        let head = (10u64, 0u64, 5u64, 0u64, 0u64);
        let enc = |entries: Vec<(u64, u64, [u64; 4], u64)>,
                   marks: Vec<(u64, u64)>,
                   legacy: Vec<(u64, u64)>| {
            let entries = entries
                .into_iter()
                .map(|(k, h, m, u)| (c(k), h, m, u))
                .collect();
            let marks = marks.into_iter().map(|(k, w)| (c(k), w)).collect();
            let v: Encoded = (head, entries, marks, legacy);
            wire::encode(&v).unwrap()
        };
        let one = [1u64, 0, 0, 0];
        let cases = [
            (vec![(2, 1, one, 1), (1, 1, one, 2)], vec![], vec![]),
            (vec![(2, 1, [2, 0, 0, 0], 1)], vec![], vec![]),
            (vec![(1, 1, one, 1), (2, 1, one, 1)], vec![], vec![]),
            (vec![(1, 1, one, 6)], vec![], vec![]),
            (vec![(1, 1, one, 1)], vec![(1, 5)], vec![]),
            (vec![], vec![(3, 5), (2, 5)], vec![]),
            (vec![], vec![], vec![(3, 5), (2, 5)]),
            (vec![], vec![], vec![(3, 5), (3, 6)]),
        ];
        for (entries, marks, legacy) in cases {
            assert!(ExecutedRequests::decode(&enc(entries, marks, legacy), 1_000).is_err());
        }
        let over: Encoded = (
            (1, 0, 5, 0, 0),
            vec![(c(1), 1, one, 1), (c(2), 1, one, 2)],
            vec![],
            vec![],
        );
        assert!(ExecutedRequests::decode(&wire::encode(&over).unwrap(), 1_000).is_err());
        let ok = enc(
            vec![(1, 1, one, 1), (2, 1, one, 2)],
            vec![(3, 9)],
            vec![(7, 4)],
        );
        let ok = ExecutedRequests::decode(&ok, 1_000).unwrap();
        assert_eq!(
            (ok.clients(), ok.watermarks(), ok.next_fresh(c(3))),
            (2, 1, 10)
        );
    }

    /// A client whose id starts with the 64-bit id `old` (its legacy prefix), `tail` after.
    fn with_prefix(old: u64, tail: u8) -> ClientId {
        let mut b = [tail; 32];
        b[..8].copy_from_slice(&old.to_le_bytes());
        ClientId(b)
    }

    #[test]
    fn a_layout_3_table_migrates_its_floors() {
        // Layout 3: floor 21 (client 2 evicted at 20), client 3 entered at floor 21 and executed
        // 30 and 25; client 1 entered at floor 0 and executed 11 (64-bit ids).
        type Legacy = ((u64, u64, u64, u64), Vec<(u64, u64, [u64; 4], u64, u64)>);
        let m30 = {
            let mut m = Mask::default();
            m.set(0);
            m.set(5);
            m.0
        };
        let legacy: Legacy = (
            (2, 21, 4, 1),
            vec![(1, 11, [1, 0, 0, 0], 3, 0), (3, 30, m30, 4, 21)],
        );
        let bytes = wire::encode(&legacy).unwrap();
        let mut e = ExecutedRequests::decode_legacy(&bytes, bytes.len()).unwrap();
        assert_eq!(
            (e.floor(), e.clients(), e.evicted(), e.legacy_watermarks()),
            (21, 0, 1, 2)
        );
        // Clients 1 and 3 (by every full id starting with their old id) keep their old
        // history as a watermark at their highest number.
        for tail in [0, 0xee] {
            let three = with_prefix(3, tail);
            assert!(matches!(
                e.check(three, 30, None),
                Err(DuplicateRequest::BelowFloor { floor: 31, .. })
            ));
            assert!(e.check(three, 21, None).is_err());
            assert_eq!(e.check(three, 31, None), Ok(()));
            assert!(e.check(with_prefix(1, tail), 11, None).is_err());
            assert_eq!(e.check(with_prefix(1, tail), 12, None), Ok(()));
        }
        // Client 2 (evicted before the migration) cannot replay: the base is its old floor.
        assert!(matches!(
            e.check(with_prefix(2, 0), 20, None),
            Err(DuplicateRequest::BelowFloor { floor: 21, .. })
        ));
        // A key not starting with an old id is a new client at the base.
        assert_eq!(e.check(with_prefix(4, 0), 21, None), Ok(()));
        // Evictions from now on leave the base where it is; a legacy watermark stays after its
        // client executed (no replay of its old numbers, whoever shares its prefix).
        e.admit(with_prefix(3, 0), 31, None).unwrap();
        e.admit(with_prefix(5, 0), 21 + 1_000, None).unwrap();
        e.admit(with_prefix(6, 0), 21 + 1_000, None).unwrap();
        assert_eq!(
            (e.floor(), e.watermarks(), e.legacy_watermarks()),
            (21, 1, 2)
        );
        assert!(e.check(with_prefix(3, 7), 30, None).is_err());
        let bad: Legacy = ((2, 21, 4, 1), vec![(1, 11, [1, 0, 0, 0], 3, 22)]);
        assert!(ExecutedRequests::decode_legacy(&wire::encode(&bad).unwrap(), 1_000).is_err());
    }

    /// Layout 4 (64-bit ids, entries and watermarks) migrates to legacy watermarks: a client
    /// starting with an old id cannot replay anything it executed before, another is new.
    #[test]
    fn a_layout_4_table_migrates_to_legacy_watermarks() {
        let v4: EncodedV4 = (
            (2, 0, 9, 1, 3),
            vec![(7, 40, [1, 0, 0, 0], 9), (9, 12, [3, 0, 0, 0], 8)],
            vec![(8, 100)],
        );
        let bytes = wire::encode(&v4).unwrap();
        let e = ExecutedRequests::decode_v4(&bytes, bytes.len()).unwrap();
        assert_eq!(
            (e.clients(), e.watermarks(), e.legacy_watermarks()),
            (0, 0, 3)
        );
        assert_eq!((e.evicted(), e.refused_ahead(), e.max_clients()), (1, 3, 2));
        for (old, highest) in [(7, 40), (8, 100), (9, 12)] {
            let id = with_prefix(old, 0x5a);
            assert!(e.settled(id, highest), "{old}");
            assert_eq!(e.next_fresh(id), highest + 1);
            // The same 8 bytes under another id: bound too (only its own floor is raised).
            assert_eq!(e.next_fresh(with_prefix(old, 1)), highest + 1);
            // One byte of the 8 differs: a new client.
            let mut other = id;
            other.0[7] ^= 0x80;
            assert_eq!(e.next_fresh(other), 0);
        }
        // It re-encodes in layout 5 and reads back.
        let again = ExecutedRequests::decode(&e.encode().unwrap(), 10_000).unwrap();
        assert_eq!(again, e);
        // Bad layout 4 bytes are refused.
        let both: EncodedV4 = (
            (2, 0, 9, 0, 0),
            vec![(7, 40, [1, 0, 0, 0], 9)],
            vec![(7, 1)],
        );
        assert!(ExecutedRequests::decode_v4(&wire::encode(&both).unwrap(), 1_000).is_err());
        let over: EncodedV4 = (
            (1, 0, 9, 0, 0),
            vec![(7, 40, [1, 0, 0, 0], 9), (9, 12, [3, 0, 0, 0], 8)],
            vec![],
        );
        assert!(ExecutedRequests::decode_v4(&wire::encode(&over).unwrap(), 1_000).is_err());
    }

    /// A simple model of the table: every number each client executed, its highest, the full
    /// entries by last execution, and which clients were evicted (to their highest).
    #[derive(Default)]
    struct Model {
        done: BTreeMap<u64, BTreeSet<u64>>,
        in_table: BTreeMap<u64, u64>, // client -> last execution
        evicted: BTreeMap<u64, u64>,  // client -> watermark
        clock: u64,
    }

    impl Model {
        fn admits(&self, client: u64, n: u64) -> bool {
            let done = self.done.get(&client);
            let highest = done.and_then(|d| d.last().copied());
            let ceiling = match (self.in_table.contains_key(&client), highest) {
                (true, Some(h)) => h.saturating_add(AHEAD_WINDOW),
                _ => match self.evicted.get(&client) {
                    Some(&w) => w.saturating_add(AHEAD_WINDOW),
                    None => AHEAD_WINDOW - 1,
                },
            };
            if n > ceiling {
                return false;
            }
            if let Some(&w) = self.evicted.get(&client) {
                return n > w;
            }
            match highest {
                None => true,
                Some(h) => {
                    !done.is_some_and(|d| d.contains(&n)) && (n > h || h - n < REQUEST_WINDOW)
                }
            }
        }

        fn execute(&mut self, client: u64, n: u64, cap: usize) {
            if !self.in_table.contains_key(&client) && self.in_table.len() >= cap {
                let (&old, _) = self.in_table.iter().min_by_key(|(_, t)| **t).unwrap();
                self.in_table.remove(&old);
                let w = *self.done[&old].last().unwrap();
                self.evicted.insert(old, w);
            }
            if self.evicted.remove(&client).is_some() {
                // Back: its numbers at or below the watermark stay executed (the model keeps
                // them all in `done`; the ones never used are given up).
                let w = *self.done[&client].last().unwrap();
                let d = self.done.get_mut(&client).unwrap();
                for m in w.saturating_sub(REQUEST_WINDOW)..=w {
                    d.insert(m);
                }
            }
            self.clock += 1;
            self.in_table.insert(client, self.clock);
            self.done.entry(client).or_default().insert(n);
        }
    }

    fn hostile_number() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..600,
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(AHEAD_WINDOW - 1),
            Just(AHEAD_WINDOW),
            (0u64..4).prop_map(|k| k * AHEAD_WINDOW + 3),
            any::<u64>(),
        ]
    }

    proptest! {
        /// Against the model, with eviction and hostile numbers (`u64::MAX`, `u64::MAX - 1`,
        /// jumps to the ceiling and beyond, many clients forcing eviction): the table admits
        /// exactly what the model admits, no `(client, number)` executes twice, and an honest
        /// client numbering consecutively (client 0, interleaved) is never refused, whatever
        /// the others do.
        #[test]
        fn hostile_clients_cannot_replay_or_refuse_an_honest_one(
            cap in 1usize..4,
            ops in proptest::collection::vec((1u64..8, hostile_number(), any::<bool>()), 0..300),
        ) {
            let now = None; // only the history bounds numbers
            let mut e = ExecutedRequests::with_max_clients(cap);
            let mut model = Model::default();
            let mut ever: BTreeSet<(u64, u64)> = BTreeSet::new();
            let mut honest = 0u64;
            for (client, number, honest_turn) in ops {
                let (client, number) = if honest_turn {
                    honest += 1;
                    (0, honest)
                } else {
                    (client, number)
                };
                let ok = model.admits(client, number);
                let got = e.admit(c(client), number, now);
                prop_assert_eq!(got.is_ok(), ok, "{} {}: {:?}", client, number, got);
                if client == 0 {
                    prop_assert!(got.is_ok(), "the honest client refused: {:?}", got);
                }
                if ok {
                    prop_assert!(ever.insert((client, number)), "{} {} executed twice", client, number);
                    model.execute(client, number, cap);
                }
                prop_assert_eq!(
                    (e.clients(), e.watermarks(), e.floor()),
                    (model.in_table.len(), model.evicted.len(), 0)
                );
            }
            let bytes = e.encode().unwrap();
            prop_assert_eq!(ExecutedRequests::decode(&bytes, bytes.len()).unwrap(), e);
        }

        /// Against a model (every executed number, the highest so far), no eviction: a number
        /// executes iff it never executed, lies inside the window of the highest executed
        /// before it and under the ceiling.
        #[test]
        fn matches_the_set_model(ops in proptest::collection::vec((0u64..3, 0u64..700), 0..400)) {
            let mut e = ExecutedRequests::new();
            let mut done: BTreeSet<(u64, u64)> = BTreeSet::new();
            let mut highest: BTreeMap<u64, u64> = BTreeMap::new();
            for (client, number) in ops {
                let fresh = !done.contains(&(client, number));
                let in_window = highest
                    .get(&client)
                    .is_none_or(|&h| number > h || h - number < REQUEST_WINDOW);
                let got = e.admit(c(client), number, None);
                prop_assert_eq!(got.is_ok(), fresh && in_window, "{} {}: {:?}", client, number, got);
                if got.is_ok() {
                    done.insert((client, number));
                    let h = highest.entry(client).or_insert(number);
                    *h = (*h).max(number);
                }
            }
            let bytes = e.encode().unwrap();
            prop_assert_eq!(ExecutedRequests::decode(&bytes, bytes.len()).unwrap(), e);
        }
    }
}
