//! Exactly-once client requests, pure: which `(client, request number)` pairs a ledger has
//! already executed.
//!
//! An engine orders whatever its proposers put in blocks; a client that submits one signed
//! request to several validators (so that any proposer has it), or a Byzantine proposer that
//! replays an old request, can get the same request ordered twice. Every validator runs the
//! ordered requests through the same [`ExecutedRequests`] before execution and drops the ones it
//! already executed, so each `(client, number)` executes at most once on every validator.
//!
//! The state is bounded per client: a window of the [`REQUEST_WINDOW`] numbers below the highest
//! executed one. A number inside the window executes once, in any order (a client may have
//! several requests in flight); a number below it is refused as too old.
//!
//! The client table is bounded too: at most `max_clients` clients
//! ([`DEFAULT_MAX_CLIENTS`] unless [`ExecutedRequests::with_max_clients`]). When a request of a
//! client not in the table executes while the table is full, the **least recently executed**
//! client (by execution order, identical on every validator) is evicted, and the table's
//! replicated **floor** rises to one above that client's highest executed number. A client that
//! enters the table (new, or back after its eviction) may only use numbers **at or above the
//! floor** of that moment, for as long as it stays in the table
//! ([`DuplicateRequest::BelowFloor`]): an evicted client's old numbers are all below the floor,
//! so none of them can execute again. A client that may have been evicted (it was idle while
//! many others were not) numbers its requests at or above the floor: e.g. from its wall clock in
//! microseconds, or after reading the floor from a node. (A client whose highest number is
//! `u64::MAX` leaves the floor at `u64::MAX`: only that number could repeat; clients do not
//! number that high.)
//!
//! The state is replicated (every validator holds the same after the same blocks), so it belongs
//! in the state digest ([`ExecutedRequests::digest`]) and in snapshots
//! ([`ExecutedRequests::encode`] / [`ExecutedRequests::decode`]).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::app::{ClientId, Digest32};
use super::wire::{self, WireError};

/// How many request numbers below a client's highest executed one are still accepted (once
/// each, in any order). The same window on every engine (sim-bft's replicas and block-driven
/// nodes run this one table).
pub const REQUEST_WINDOW: u64 = 256;

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

/// The default bound of the client table (about 5 MB of state at most).
pub const DEFAULT_MAX_CLIENTS: usize = 100_000;

/// Why an ordered request is not executed.
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
    /// The number is below the floor that applied when the client entered the table (or
    /// applies now, for a client not in it): it may be an evicted client's old number.
    #[error("request {number} of client {client} is below the floor {floor}")]
    BelowFloor {
        /// The client.
        client: ClientId,
        /// The request number.
        number: u64,
        /// The floor.
        floor: u64,
    },
}

/// One client's entry: the highest executed number, a mask of executed numbers below it (bit
/// `i` set: number `highest - i` executed; bit 0 is `highest` itself, [`Mask`]), and when it last
/// executed (the table's execution counter), and the table's floor when it entered the table
/// (its numbers must stay above it: an evicted client that comes back cannot replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    highest: u64,
    mask: Mask,
    last_used: u64,
    floor: u64,
}

/// An entry as encoded: client, highest, mask words, last execution, entry floor.
type EncodedEntry = (u64, u64, [u64; 4], u64, u64);

/// The executed request numbers of every client in a bounded table (replicated state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutedRequests {
    clients: BTreeMap<ClientId, Entry>,
    /// Clients by last execution (the eviction order).
    by_use: BTreeMap<u64, ClientId>,
    /// Executions so far (the logical clock of `last_used`).
    clock: u64,
    /// Numbers of clients not in the table must be at least this (one above the highest
    /// number of every evicted client).
    floor: u64,
    max_clients: usize,
    /// Clients evicted so far.
    evicted: u64,
}

impl Default for ExecutedRequests {
    fn default() -> Self {
        Self::with_max_clients(DEFAULT_MAX_CLIENTS)
    }
}

impl ExecutedRequests {
    /// Nothing executed (genesis), at most [`DEFAULT_MAX_CLIENTS`] clients.
    pub fn new() -> Self {
        Self::default()
    }

    /// Nothing executed, at most `max_clients` clients (at least 1); every validator must use
    /// the same bound.
    pub fn with_max_clients(max_clients: usize) -> Self {
        Self {
            clients: BTreeMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            floor: 0,
            max_clients: max_clients.max(1),
            evicted: 0,
        }
    }

    /// Whether [`admit`](Self::admit) would refuse `(client, number)`, without recording it.
    pub fn check(&self, client: ClientId, number: u64) -> Result<(), DuplicateRequest> {
        let floored = |floor: u64| {
            Err(DuplicateRequest::BelowFloor {
                client,
                number,
                floor,
            })
        };
        let Some(e) = self.clients.get(&client) else {
            if number < self.floor {
                return floored(self.floor);
            }
            return Ok(());
        };
        if number < e.floor {
            return floored(e.floor);
        }
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

    /// Records `(client, number)` as executed, or refuses it when it already executed, is
    /// below the client's window, or below the client's floor; then
    /// nothing changes. A new client in a full table evicts the least recently executed one.
    pub fn admit(&mut self, client: ClientId, number: u64) -> Result<(), DuplicateRequest> {
        self.check(client, number)?;
        // The floor this client was checked against (an eviction below raises it for others).
        let floor = self.floor;
        if !self.clients.contains_key(&client) && self.clients.len() >= self.max_clients {
            self.evict_oldest();
        }
        self.clock = self.clock.saturating_add(1);
        let clock = self.clock;
        let entry = self.clients.entry(client).or_insert(Entry {
            highest: number,
            mask: Mask::default(),
            last_used: clock,
            floor,
        });
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
            self.floor = self.floor.max(e.highest.saturating_add(1));
            self.evicted = self.evicted.saturating_add(1);
            tracing::debug!(
                client,
                highest = e.highest,
                floor = self.floor,
                "executed-requests table full: least recently executed client evicted"
            );
        }
    }

    /// Clients in the table.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// The table's bound.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }

    /// Clients not in the table must number their requests at least this (one above every
    /// evicted client's highest executed number; 0 until a client is evicted).
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Clients evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Whether nothing executed yet.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty() && self.evicted == 0
    }

    /// SHA-256 over the bound, floor, clock, evictions and the entries in client order (equal
    /// on validators that executed the same requests).
    pub fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"ccron-executed-requests/v3");
        for v in [
            self.max_clients as u64,
            self.floor,
            self.clock,
            self.evicted,
        ] {
            h.update(v.to_le_bytes());
        }
        for (client, e) in &self.clients {
            h.update(client.to_le_bytes());
            h.update(e.highest.to_le_bytes());
            for w in e.mask.0 {
                h.update(w.to_le_bytes());
            }
            h.update(e.last_used.to_le_bytes());
            h.update(e.floor.to_le_bytes());
        }
        h.finalize().into()
    }

    /// The canonical encoding ([`wire`]) for snapshots.
    ///
    /// # Errors
    /// [`WireError::Encode`] (never for this type in practice).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let entries: Vec<EncodedEntry> = self
            .clients
            .iter()
            .map(|(c, e)| (*c, e.highest, e.mask.0, e.last_used, e.floor))
            .collect();
        wire::encode(&(
            (
                self.max_clients as u64,
                self.floor,
                self.clock,
                self.evicted,
            ),
            entries,
        ))
    }

    /// Decodes [`encode`](Self::encode)'s bytes, refusing more than `limit_bytes`, more
    /// clients than the bound, clients out of order or repeated, masks without their highest
    /// bit, and execution times repeated or after the clock.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes or entries.
    pub fn decode(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        type Encoded = ((u64, u64, u64, u64), Vec<EncodedEntry>);
        let ((max_clients, floor, clock, evicted), entries): Encoded =
            wire::decode(bytes, limit_bytes)?;
        let bad = |what: String| WireError::Malformed(format!("executed-requests: {what}"));
        let max_clients = usize::try_from(max_clients)
            .ok()
            .filter(|&m| m >= 1)
            .ok_or_else(|| bad(format!("bound {max_clients}")))?;
        if entries.len() > max_clients {
            return Err(bad(format!("{} clients over the bound", entries.len())));
        }
        let mut out = Self {
            floor,
            clock,
            evicted,
            ..Self::with_max_clients(max_clients)
        };
        let mut last = None;
        for (client, highest, mask, last_used, entry_floor) in entries {
            let mask = Mask(mask);
            if last.is_some_and(|l| l >= client)
                || !mask.get(0)
                || entry_floor > floor
                || last_used == 0
                || last_used > clock
                || out.by_use.insert(last_used, client).is_some()
            {
                return Err(bad(format!(
                    "entry of client {client} out of order, without its highest number, or with a bad execution time"
                )));
            }
            last = Some(client);
            out.clients.insert(
                client,
                Entry {
                    highest,
                    mask,
                    last_used,
                    floor: entry_floor,
                },
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn each_number_executes_once_in_any_order_inside_the_window() {
        let mut e = ExecutedRequests::new();
        assert_eq!(e.admit(7, 5), Ok(()));
        assert_eq!(
            e.admit(7, 5),
            Err(DuplicateRequest::Executed {
                client: 7,
                number: 5
            })
        );
        assert_eq!(e.admit(7, 3), Ok(()));
        assert_eq!(e.admit(7, 9), Ok(()));
        assert_eq!(
            e.check(7, 3),
            Err(DuplicateRequest::Executed {
                client: 7,
                number: 3
            })
        );
        assert_eq!(e.admit(7, 4), Ok(()));
        assert_eq!(e.admit(8, 5), Ok(()), "another client has its own numbers");
        assert_eq!(e.admit(7, 9 + REQUEST_WINDOW), Ok(()));
        assert_eq!(
            e.admit(7, 9),
            Err(DuplicateRequest::TooOld {
                client: 7,
                number: 9,
                highest: 9 + REQUEST_WINDOW
            })
        );
        assert_eq!(
            e.admit(7, 10),
            Ok(()),
            "the lowest number inside the window"
        );
        assert_eq!(
            e.admit(7, 10),
            Err(DuplicateRequest::Executed {
                client: 7,
                number: 10
            })
        );
        assert_eq!(e.admit(7, u64::MAX), Ok(()));
        assert_eq!(
            e.admit(7, u64::MAX),
            Err(DuplicateRequest::Executed {
                client: 7,
                number: u64::MAX
            })
        );
        assert_eq!(e.clients(), 2);
    }

    #[test]
    fn encoding_round_trips_and_refuses_bad_entries() {
        let mut e = ExecutedRequests::new();
        for (c, n) in [(1, 3), (1, 1), (2, 100), (9, 0)] {
            e.admit(c, n).unwrap();
        }
        let bytes = e.encode().unwrap();
        let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.digest(), e.digest());
        assert_ne!(ExecutedRequests::new().digest(), e.digest());
        assert!(ExecutedRequests::decode(&bytes, bytes.len() - 1).is_err());
        let head = (10u64, 0u64, 5u64, 0u64);
        let unordered = wire::encode(&(
            head,
            vec![
                (2u64, 1u64, [1u64, 0, 0, 0], 1u64, 0u64),
                (1, 1, [1, 0, 0, 0], 2, 0),
            ],
        ))
        .unwrap();
        assert!(ExecutedRequests::decode(&unordered, 1_000).is_err());
        let no_top =
            wire::encode(&(head, vec![(2u64, 1u64, [2u64, 0, 0, 0], 1u64, 0u64)])).unwrap();
        assert!(ExecutedRequests::decode(&no_top, 1_000).is_err());
        let same_time = wire::encode(&(
            head,
            vec![
                (1u64, 1u64, [1u64, 0, 0, 0], 1u64, 0u64),
                (2, 1, [1, 0, 0, 0], 1, 0),
            ],
        ))
        .unwrap();
        assert!(ExecutedRequests::decode(&same_time, 1_000).is_err());
        let future =
            wire::encode(&(head, vec![(1u64, 1u64, [1u64, 0, 0, 0], 6u64, 0u64)])).unwrap();
        assert!(ExecutedRequests::decode(&future, 1_000).is_err());
        let over = wire::encode(&(
            (1u64, 0u64, 5u64, 0u64),
            vec![
                (1u64, 1u64, [1u64, 0, 0, 0], 1u64, 0u64),
                (2, 1, [1, 0, 0, 0], 2, 0),
            ],
        ))
        .unwrap();
        assert!(ExecutedRequests::decode(&over, 1_000).is_err());
        let ok = wire::encode(&(
            head,
            vec![
                (1u64, 1u64, [1u64, 0, 0, 0], 1u64, 0u64),
                (2, 1, [1, 0, 0, 0], 2, 0),
            ],
        ))
        .unwrap();
        assert!(ExecutedRequests::decode(&ok, 1_000).is_ok());
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_executed_client_and_raises_the_floor() {
        let mut e = ExecutedRequests::with_max_clients(2);
        e.admit(1, 10).unwrap();
        e.admit(2, 20).unwrap();
        e.admit(1, 11).unwrap(); // client 1 is now the most recent
        assert_eq!(e.floor(), 0);
        e.admit(3, 5).unwrap(); // evicts client 2 (highest 20)
        assert_eq!((e.clients(), e.evicted(), e.floor()), (2, 1, 21));
        // Client 2's old numbers cannot execute again; new clients must number from 21.
        for n in [1, 20] {
            assert_eq!(
                e.admit(2, n),
                Err(DuplicateRequest::BelowFloor {
                    client: 2,
                    number: n,
                    floor: 21
                })
            );
        }
        assert!(e.check(4, 7).is_err());
        // A client still in the table keeps its window, floor or not.
        assert_eq!(e.admit(3, 6), Ok(()));
        assert_eq!(
            e.admit(2, 21),
            Ok(()),
            "at the floor: evicts client 1 (highest 11)"
        );
        assert_eq!(e.floor(), 21);
        assert!(e.admit(1, 11).is_err());
        // Back in the table, client 2 keeps the floor it entered with: 20 never repeats.
        assert!(matches!(
            e.admit(2, 20),
            Err(DuplicateRequest::BelowFloor { floor: 21, .. })
        ));
        let bytes = e.encode().unwrap();
        let back = ExecutedRequests::decode(&bytes, bytes.len()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.digest(), e.digest());
    }

    proptest! {
        /// Against a model of the bounded table (executed numbers and last execution per client
        /// in the table, the floor): a number executes iff the client is in the table and the
        /// number never executed and lies in its window, or the client is not in the table and
        /// the number is above the floor; a new client in a full table evicts the least recently
        /// executed one and the floor rises to its highest number. No evicted client's executed
        /// number ever executes again.
        #[test]
        fn bounded_table_matches_its_model(
            cap in 1usize..4,
            ops in proptest::collection::vec((0u64..6, 0u64..400), 0..300),
        ) {
            let mut e = ExecutedRequests::with_max_clients(cap);
            // client -> (executed numbers, highest, last execution, floor when it entered)
            let mut table: BTreeMap<u64, (BTreeSet<u64>, u64, u64, u64)> = BTreeMap::new();
            let mut ever: BTreeSet<(u64, u64)> = BTreeSet::new();
            let (mut floor, mut clock, mut evicted) = (0u64, 0u64, 0u64);
            for (client, number) in ops {
                let ok = match table.get(&client) {
                    Some((done, h, _, f)) => {
                        !done.contains(&number)
                            && (number > *h || h - number < REQUEST_WINDOW)
                            && number >= *f
                    }
                    None => number >= floor,
                };
                let got = e.admit(client, number);
                prop_assert_eq!(got.is_ok(), ok, "{} {}: {:?}", client, number, got);
                if ok {
                    let entry_floor = floor;
                    prop_assert!(ever.insert((client, number)), "{} {} executed twice", client, number);
                    if !table.contains_key(&client) && table.len() >= cap {
                        let (&old, _) = table.iter().min_by_key(|(_, (_, _, t, _))| *t).unwrap();
                        let (_, h, _, _) = table.remove(&old).unwrap();
                        floor = floor.max(h + 1);
                        evicted += 1;
                    }
                    clock += 1;
                    let entry = table.entry(client).or_insert((BTreeSet::new(), number, clock, entry_floor));
                    entry.0.insert(number);
                    entry.1 = entry.1.max(number);
                    entry.2 = clock;
                }
                prop_assert_eq!((e.clients(), e.floor(), e.evicted()), (table.len(), floor, evicted));
            }
            let bytes = e.encode().unwrap();
            prop_assert_eq!(ExecutedRequests::decode(&bytes, bytes.len()).unwrap(), e);
        }


        /// Against a model (every executed number, the highest so far): a number executes iff
        /// it never executed and lies inside the window of the highest executed before it.
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
                let got = e.admit(client, number);
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
