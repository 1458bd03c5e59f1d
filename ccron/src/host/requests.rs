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
//! several requests in flight); a number below it is refused as too old. The state is replicated
//! (every validator holds the same after the same blocks), so it belongs in the state digest
//! ([`ExecutedRequests::digest`]) and in snapshots ([`ExecutedRequests::encode`] /
//! [`ExecutedRequests::decode`]).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::app::{ClientId, Digest32};
use super::wire::{self, WireError};

/// How many request numbers below a client's highest executed one are still accepted (once
/// each, in any order).
pub const REQUEST_WINDOW: u64 = 64;

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
}

/// The executed request numbers of every client (replicated state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutedRequests {
    /// Per client: the highest executed number and a mask of executed numbers below it (bit
    /// `i` set: number `highest - i` executed; bit 0 is `highest` itself).
    clients: BTreeMap<ClientId, (u64, u64)>,
}

impl ExecutedRequests {
    /// Nothing executed (genesis).
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether [`admit`](Self::admit) would refuse `(client, number)`, without recording it.
    pub fn check(&self, client: ClientId, number: u64) -> Result<(), DuplicateRequest> {
        let Some(&(highest, mask)) = self.clients.get(&client) else {
            return Ok(());
        };
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
        if mask & (1u64 << below) != 0 {
            return Err(DuplicateRequest::Executed { client, number });
        }
        Ok(())
    }

    /// Records `(client, number)` as executed, or refuses it when it already executed or is
    /// below the client's window (then nothing changes).
    pub fn admit(&mut self, client: ClientId, number: u64) -> Result<(), DuplicateRequest> {
        self.check(client, number)?;
        let entry = self.clients.entry(client).or_insert((number, 0));
        let (highest, mask) = *entry;
        *entry = if number > highest {
            let shift = number - highest;
            let moved = if shift >= REQUEST_WINDOW {
                0
            } else {
                mask << shift
            };
            (number, moved | 1)
        } else {
            (highest, mask | (1u64 << (highest - number)))
        };
        Ok(())
    }

    /// Clients with at least one executed request.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Whether nothing executed yet.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// SHA-256 over the entries in client order (equal on validators that executed the same
    /// requests).
    pub fn digest(&self) -> Digest32 {
        let mut h = Sha256::new();
        h.update(b"ccron-executed-requests");
        for (client, (highest, mask)) in &self.clients {
            h.update(client.to_le_bytes());
            h.update(highest.to_le_bytes());
            h.update(mask.to_le_bytes());
        }
        h.finalize().into()
    }

    /// The canonical encoding ([`wire`]) for snapshots.
    ///
    /// # Errors
    /// [`WireError::Encode`] (never for this type in practice).
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let entries: Vec<(u64, u64, u64)> = self
            .clients
            .iter()
            .map(|(c, (h, m))| (*c, *h, *m))
            .collect();
        wire::encode(&entries)
    }

    /// Decodes [`encode`](Self::encode)'s bytes, refusing more than `limit_bytes`, clients out
    /// of order or repeated, and masks that do not have their highest bit set.
    ///
    /// # Errors
    /// [`WireError`] for malformed bytes or entries.
    pub fn decode(bytes: &[u8], limit_bytes: usize) -> Result<Self, WireError> {
        let entries: Vec<(u64, u64, u64)> = wire::decode(bytes, limit_bytes)?;
        let mut clients = BTreeMap::new();
        let mut last = None;
        for (client, highest, mask) in entries {
            if last.is_some_and(|l| l >= client) || mask & 1 == 0 {
                return Err(WireError::Malformed(format!(
                    "executed-requests entry of client {client} out of order or without its highest number"
                )));
            }
            last = Some(client);
            clients.insert(client, (highest, mask));
        }
        Ok(Self { clients })
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
        let unordered = wire::encode(&vec![(2u64, 1u64, 1u64), (1, 1, 1)]).unwrap();
        assert!(ExecutedRequests::decode(&unordered, 1_000).is_err());
        let no_top = wire::encode(&vec![(2u64, 1u64, 2u64)]).unwrap();
        assert!(ExecutedRequests::decode(&no_top, 1_000).is_err());
    }

    proptest! {
        /// Against a model (every executed number, the highest so far): a number executes iff
        /// it never executed and lies inside the window of the highest executed before it.
        #[test]
        fn matches_the_set_model(ops in proptest::collection::vec((0u64..3, 0u64..200), 0..300)) {
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
