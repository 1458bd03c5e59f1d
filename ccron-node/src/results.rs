//! The results of executed client requests, kept for clients to read back.
//!
//! Every validator computes each `Tx::Request`'s result (`ok <id>`, `err ...`) when it executes
//! a decided block; [`RequestResults`] keeps the most recent [`MAX_RESULTS`] of them, keyed by
//! `(client, request number)`, in execution order. It is a pure function of the decided blocks
//! (the same blocks give the same record on every node, and a restarted node rebuilds it by
//! re-executing its block store), so it is not part of the state digest: it is derived, like
//! the node's counters.
//!
//! The node serves it at `GET /v1/requests/{client}/{number}` ([`crate::api`]). A node may be
//! faulty, so a client asks f+1 nodes (or all) and believes a result only when f+1 return it
//! identically (at most f are faulty, so one of them is honest): `load::read_results` does this
//! for the localnet's orders.

use std::collections::{BTreeMap, VecDeque};

use ccron::host::ClientId;
use serde::{Deserialize, Serialize};

/// How many results a node keeps (the oldest leave first).
pub const MAX_RESULTS: usize = 4_096;

/// One request's result, as served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestResult {
    /// The client.
    pub client: ClientId,
    /// The request number.
    pub number: u64,
    /// The height of the block that executed it.
    pub height: u64,
    /// The ledger's reply, as text (lossy UTF-8).
    pub result: String,
    /// The ledger's reply bytes, hex.
    pub result_hex: String,
}

/// The bounded record of recent results (see the module documentation).
#[derive(Debug, Clone)]
pub struct RequestResults {
    cap: usize,
    order: VecDeque<(ClientId, u64)>,
    by_key: BTreeMap<(ClientId, u64), RequestResult>,
    /// Results dropped because the record was full (the oldest first).
    pub evicted: u64,
}

impl Default for RequestResults {
    fn default() -> Self {
        Self::new(MAX_RESULTS)
    }
}

impl RequestResults {
    /// An empty record of at most `cap` results (at least 1).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            order: VecDeque::new(),
            by_key: BTreeMap::new(),
            evicted: 0,
        }
    }

    /// Records the result of `(client, number)`, executed at `height` (a number executes once,
    /// so a key is recorded once; a repeat replaces nothing).
    pub fn record(&mut self, client: ClientId, number: u64, height: u64, reply: &[u8]) {
        if self.by_key.contains_key(&(client, number)) {
            return;
        }
        while self.order.len() >= self.cap {
            if let Some(old) = self.order.pop_front() {
                self.by_key.remove(&old);
                self.evicted += 1;
            }
        }
        self.order.push_back((client, number));
        self.by_key.insert(
            (client, number),
            RequestResult {
                client,
                number,
                height,
                result: String::from_utf8_lossy(reply).into_owned(),
                result_hex: crate::types::hex(reply),
            },
        );
    }

    /// The result of `(client, number)`, if it is still kept.
    pub fn get(&self, client: ClientId, number: u64) -> Option<&RequestResult> {
        self.by_key.get(&(client, number))
    }

    /// How many results are kept.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u64) -> ClientId {
        ClientId::from_index(n)
    }

    #[test]
    fn keeps_the_most_recent_results_in_execution_order() {
        let mut r = RequestResults::new(2);
        r.record(c(7), 1, 10, b"ok 1");
        r.record(c(7), 1, 11, b"ok again");
        assert_eq!(
            r.get(c(7), 1).map(|x| (x.height, x.result.as_str())),
            Some((10, "ok 1"))
        );
        r.record(c(8), 1, 12, b"err no");
        r.record(c(7), 2, 12, b"ok 2");
        assert_eq!((r.len(), r.evicted), (2, 1));
        assert!(r.get(c(7), 1).is_none(), "the oldest left first");
        assert_eq!(
            r.get(c(8), 1).map(|x| x.result_hex.as_str()),
            Some("657272206e6f")
        );
        assert_eq!(r.get(c(7), 2).map(|x| x.number), Some(2));
    }
}
