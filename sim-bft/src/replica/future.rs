//! The future-view buffer: normal-case messages of a view this replica has not entered yet.
//!
//! A replica that is still in a view change (or behind by a few views) keeps the pre-prepares,
//! prepares and commits of later views until it gets there, then replays them. Anything a
//! replica keeps on behalf of a peer must be bounded by what that peer can make it hold, so
//! the buffer is bounded three ways:
//!
//! - **bytes per sender**: each entry is charged its encoded size plus a fixed per-entry and
//!   per-request overhead ([`FutureBuffer::charge`]); a sender's entries together stay within
//!   `budget_per_sender` bytes (one faulty replica cannot pin more than that, however many
//!   maximal messages it sends);
//! - **entries per sender**: at most `max_entries_per_sender`, so tiny messages cannot make
//!   the per-entry overhead dominate;
//! - **dedupe**: one entry per (sender, kind, view, seq). An honest replica sends one
//!   pre-prepare, prepare and commit per view and seq, so a second one is a duplicate (the
//!   network's, or a faulty sender's equivocation) and is dropped, not stored.
//!
//! Worst case held by one replica: `(n - 1) * budget_per_sender` bytes of charged size (see
//! docs/replica.md for the figures). What does not fit is dropped with a typed reason; the
//! replica recovers the lost messages by the status / commit-certificate catch-up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::crypto::SigBytes;
use crate::node::NodeId;
use crate::protocol::Body;

/// Fixed charge per buffered entry (the entry, its index key and allocation headers).
pub const ENTRY_OVERHEAD_BYTES: usize = 192;
/// Extra charge per request of a buffered pre-prepare (a decoded request's allocation header
/// and fields beyond its encoded size).
pub const REQUEST_OVERHEAD_BYTES: usize = 64;

/// Why a message was not buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FutureRejected {
    /// The same (sender, kind, view, seq) is already buffered.
    #[error("duplicate of a buffered message")]
    Duplicate,
    /// The sender's byte budget would be exceeded.
    #[error("sender's byte budget exhausted")]
    SenderBytes,
    /// The sender's entry budget would be exceeded.
    #[error("sender's entry budget exhausted")]
    SenderEntries,
    /// Not a normal-case message (only pre-prepares, prepares and commits are buffered).
    #[error("not a bufferable message")]
    NotBufferable,
}

impl FutureRejected {
    /// The metric / drop reason of this rejection.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Duplicate => "drop_future_duplicate",
            Self::SenderBytes => "drop_future_sender_bytes",
            Self::SenderEntries => "drop_future_sender_entries",
            Self::NotBufferable => "drop_future_unbufferable",
        }
    }
}

/// The dedupe key: sender, kind (0 pre-prepare, 1 prepare, 2 commit), view, seq.
type Key = (NodeId, u8, u64, u64);

/// One buffered message.
#[derive(Debug, Clone)]
pub struct Buffered {
    /// Its signer.
    pub from: NodeId,
    /// Its body.
    pub body: Body,
    /// Its signature.
    pub sig: SigBytes,
    charged: usize,
}

/// The bounded, deduplicating future-view buffer.
#[derive(Debug, Clone)]
pub struct FutureBuffer {
    entries: VecDeque<Buffered>,
    keys: BTreeSet<Key>,
    per_sender: BTreeMap<NodeId, (usize, usize)>,
    total_bytes: usize,
    peak_bytes: usize,
    budget_per_sender: usize,
    max_entries_per_sender: usize,
}

fn key_of(from: NodeId, body: &Body) -> Option<Key> {
    match body {
        Body::PrePrepare { view, seq, .. } => Some((from, 0, *view, *seq)),
        Body::Prepare { view, seq, .. } => Some((from, 1, *view, *seq)),
        Body::Commit { view, seq, .. } => Some((from, 2, *view, *seq)),
        _ => None,
    }
}

impl FutureBuffer {
    /// An empty buffer holding at most `budget_per_sender` charged bytes and
    /// `max_entries_per_sender` entries of each sender.
    pub fn new(budget_per_sender: usize, max_entries_per_sender: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            keys: BTreeSet::new(),
            per_sender: BTreeMap::new(),
            total_bytes: 0,
            peak_bytes: 0,
            budget_per_sender,
            max_entries_per_sender,
        }
    }

    /// What an entry of `encoded_len` payload bytes with `body` is charged.
    pub fn charge(encoded_len: usize, body: &Body) -> usize {
        let requests = match body {
            Body::PrePrepare { batch, .. } => batch.requests.len(),
            _ => 0,
        };
        encoded_len
            .saturating_add(ENTRY_OVERHEAD_BYTES)
            .saturating_add(requests.saturating_mul(REQUEST_OVERHEAD_BYTES))
    }

    /// Buffers `body` from `from` (`encoded_len`: its signed payload's size), or says why not.
    pub fn push(
        &mut self,
        from: NodeId,
        body: Body,
        sig: SigBytes,
        encoded_len: usize,
    ) -> Result<(), FutureRejected> {
        let key = key_of(from, &body).ok_or(FutureRejected::NotBufferable)?;
        if self.keys.contains(&key) {
            return Err(FutureRejected::Duplicate);
        }
        let charged = Self::charge(encoded_len, &body);
        let (bytes, count) = self.per_sender.get(&from).copied().unwrap_or((0, 0));
        if count >= self.max_entries_per_sender {
            return Err(FutureRejected::SenderEntries);
        }
        if bytes.saturating_add(charged) > self.budget_per_sender {
            return Err(FutureRejected::SenderBytes);
        }
        self.keys.insert(key);
        self.per_sender.insert(
            from,
            (bytes.saturating_add(charged), count.saturating_add(1)),
        );
        self.total_bytes = self.total_bytes.saturating_add(charged);
        self.peak_bytes = self.peak_bytes.max(self.total_bytes);
        self.entries.push_back(Buffered {
            from,
            body,
            sig,
            charged,
        });
        Ok(())
    }

    /// Takes every entry out, in arrival order (the peak is kept).
    pub fn drain(&mut self) -> Vec<Buffered> {
        self.keys.clear();
        self.per_sender.clear();
        self.total_bytes = 0;
        self.entries.drain(..).collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Charged bytes held now.
    pub fn bytes(&self) -> usize {
        self.total_bytes
    }

    /// Most charged bytes ever held at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// Charged bytes held now for `from`.
    pub fn sender_bytes(&self, from: NodeId) -> usize {
        self.per_sender.get(&from).map_or(0, |(b, _)| *b)
    }

    /// The byte budget of each sender.
    pub fn budget_per_sender(&self) -> usize {
        self.budget_per_sender
    }

    /// Consistency of the accounting and the bounds (for `check_invariants`).
    pub fn check(&self) -> Result<(), String> {
        let mut per: BTreeMap<NodeId, (usize, usize)> = BTreeMap::new();
        let mut total = 0usize;
        for e in &self.entries {
            let p = per.entry(e.from).or_default();
            p.0 += e.charged;
            p.1 += 1;
            total += e.charged;
        }
        if per != self.per_sender || total != self.total_bytes {
            return Err("future buffer accounting disagrees with its entries".into());
        }
        if self.keys.len() != self.entries.len() {
            return Err("future buffer dedupe index disagrees with its entries".into());
        }
        if let Some((from, (bytes, count))) = per
            .iter()
            .find(|(_, (b, c))| *b > self.budget_per_sender || *c > self.max_entries_per_sender)
        {
            return Err(format!(
                "future buffer holds {bytes} bytes / {count} entries of replica {from}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Batch, Request, RequestKind, SignedRequest};

    fn pre_prepare(view: u64, seq: u64, payload: usize) -> Body {
        Body::PrePrepare {
            view,
            seq,
            batch: Batch {
                requests: vec![SignedRequest {
                    request: Request {
                        client: 0,
                        req_seq: seq,
                        kind: RequestKind::Write,
                        payload: vec![7; payload],
                    },
                    sig: [0; 64],
                }],
                primary_clock_ms: 0,
                time_cert: None,
                null: false,
            },
        }
    }

    #[test]
    fn bounded_by_bytes_per_sender_and_deduplicated() {
        let mut b = FutureBuffer::new(10_000, 1_000);
        let big = |s| pre_prepare(1, s, 4_000);
        assert_eq!(b.push(1, big(1), [0; 64], 4_100), Ok(()));
        assert_eq!(
            b.push(1, big(1), [0; 64], 4_100),
            Err(FutureRejected::Duplicate)
        );
        assert_eq!(b.push(1, big(2), [0; 64], 4_100), Ok(()));
        // A third would exceed sender 1's budget...
        assert_eq!(
            b.push(1, big(3), [0; 64], 4_100),
            Err(FutureRejected::SenderBytes)
        );
        // ...but another sender has its own.
        assert_eq!(b.push(2, big(3), [0; 64], 4_100), Ok(()));
        assert!(b.sender_bytes(1) <= 10_000);
        assert_eq!(b.len(), 3);
        b.check().unwrap();
        let peak = b.bytes();
        let drained = b.drain();
        assert_eq!(drained.len(), 3);
        assert_eq!((drained[0].from, drained[2].from), (1, 2));
        assert_eq!((b.bytes(), b.len(), b.peak_bytes()), (0, 0, peak));
        // After a drain the same messages may be buffered again (a still-future view).
        assert_eq!(b.push(1, big(1), [0; 64], 4_100), Ok(()));
        b.check().unwrap();
    }

    #[test]
    fn bounded_by_entries_per_sender_and_only_normal_case_messages() {
        let mut b = FutureBuffer::new(usize::MAX, 2);
        let prep = |seq| Body::Prepare {
            view: 2,
            seq,
            digest: [0; 32],
        };
        assert_eq!(b.push(0, prep(1), [0; 64], 100), Ok(()));
        assert_eq!(b.push(0, prep(2), [0; 64], 100), Ok(()));
        assert_eq!(
            b.push(0, prep(3), [0; 64], 100),
            Err(FutureRejected::SenderEntries)
        );
        assert_eq!(
            b.push(
                0,
                Body::StateRequest {
                    seq: 1,
                    meta: true,
                    indices: Vec::new(),
                },
                [0; 64],
                10,
            ),
            Err(FutureRejected::NotBufferable)
        );
        b.check().unwrap();
    }
}
