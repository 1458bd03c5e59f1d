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

use super::app::{ClientId, Millis};

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
}

mod codec;
#[cfg(test)]
mod tests;
