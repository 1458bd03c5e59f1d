//! A toy node for testing the simulator without the real replica: a fixed leader orders requests.
//!
//! Replica 0 is the leader. It assigns consecutive sequence numbers to client requests and to its
//! internal ticks, persists each order (`Store` then `Sync`) before broadcasting it, and re-sends
//! orders a follower has not acknowledged on every timer. Followers execute orders from replica 0
//! in sequence order, persist them, and acknowledge their progress. It is crash-tolerant (replica 0
//! never reuses a sequence number after a restart) but not Byzantine-tolerant: keep replica 0
//! honest (pin the Byzantine replicas) when using it. Every decoder rejects malformed bytes.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{DiskImage, Harness, Role};
use crate::node::{Executed, Input, Millis, Node, NodeId, Output};

/// Retransmission and acknowledgement period.
const RESEND_MS: Millis = 50;
/// Orders re-sent to one follower per timer.
const RESEND_BATCH: u64 = 32;
/// Largest accepted message.
const MAX_MESSAGE: usize = 4096;
/// Out-of-order orders a follower keeps.
const MAX_PENDING: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Request(Vec<u8>),
    Tick(u32),
}

impl Entry {
    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Request(b) => {
                out.push(0);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Entry::Tick(c) => {
                out.push(1);
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
    }

    fn decode(b: &[u8]) -> Option<Entry> {
        match b.split_first()? {
            (0, rest) => {
                let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
                let body = rest.get(4..)?;
                (body.len() == len).then(|| Entry::Request(body.to_vec()))
            }
            (1, rest) if rest.len() == 4 => {
                Some(Entry::Tick(u32::from_le_bytes(rest.try_into().ok()?)))
            }
            _ => None,
        }
    }
}

fn seq_key(seq: u64) -> Vec<u8> {
    let mut k = b"log/".to_vec();
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The toy node.
#[derive(Debug, Clone)]
pub struct ToyNode {
    id: NodeId,
    n: u32,
    log: BTreeMap<u64, Entry>,
    executed: u64,
    state: [u8; 32],
    acked: Vec<u64>,
    deadline: Option<Millis>,
    rejected: u64,
}

impl ToyNode {
    /// Node `id` of `n`, restored from `disk`.
    pub fn new(id: NodeId, n: u32, disk: &DiskImage) -> Self {
        let mut node = Self {
            id,
            n,
            log: BTreeMap::new(),
            executed: 0,
            state: [0; 32],
            acked: vec![0; n as usize],
            deadline: None,
            rejected: 0,
        };
        for (k, v) in disk.range(b"log/".to_vec()..b"log0".to_vec()) {
            let seq = k
                .get(4..12)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes);
            if let (Some(seq), Some(e)) = (seq, Entry::decode(v)) {
                node.log.insert(seq, e);
            }
        }
        // Re-execute the persisted prefix silently to rebuild the state digest.
        let mut sink = Vec::new();
        node.drain(&mut sink, false);
        node
    }

    /// Sequence number of the last executed order.
    pub fn executed(&self) -> u64 {
        self.executed
    }

    /// Messages rejected as malformed or unauthorised.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    fn is_leader(&self) -> bool {
        self.id == 0
    }

    fn order_bytes(seq: u64, e: &Entry) -> Vec<u8> {
        let mut b = vec![b'O'];
        b.extend_from_slice(&seq.to_le_bytes());
        e.encode_into(&mut b);
        b
    }

    fn drain(&mut self, out: &mut Vec<Output>, emit: bool) {
        while let Some(e) = self.log.get(&(self.executed + 1)).cloned() {
            self.executed += 1;
            let mut enc = Vec::new();
            e.encode_into(&mut enc);
            let batch: [u8; 32] = Sha256::new()
                .chain_update(self.executed.to_le_bytes())
                .chain_update(&enc)
                .finalize()
                .into();
            self.state = Sha256::new()
                .chain_update(self.state)
                .chain_update(batch)
                .finalize()
                .into();
            if emit {
                out.push(Output::Executed(Executed {
                    seq: self.executed,
                    batch_digest: batch,
                    agreed_time_ms: None,
                    state_digest: self.state,
                    requests: 1,
                    batch_bytes: 0,
                    ticks: match e {
                        Entry::Tick(c) => vec![c],
                        Entry::Request(_) => vec![],
                    },
                    fires: Vec::new(),
                }));
            }
        }
    }

    fn order(&mut self, e: Entry, out: &mut Vec<Output>) {
        let seq = self.log.keys().next_back().copied().unwrap_or(0) + 1;
        let mut v = Vec::new();
        e.encode_into(&mut v);
        out.push(Output::Store {
            key: seq_key(seq),
            value: Some(v),
        });
        out.push(Output::Sync);
        out.push(Output::Broadcast {
            bytes: Self::order_bytes(seq, &e),
        });
        self.log.insert(seq, e);
        self.drain(out, true);
    }

    fn on_peer(&mut self, from: NodeId, bytes: &[u8], out: &mut Vec<Output>) -> Option<()> {
        if bytes.len() > MAX_MESSAGE {
            return None;
        }
        let (tag, rest) = bytes.split_first()?;
        match tag {
            b'O' if from == 0 && !self.is_leader() => {
                let seq = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
                let e = Entry::decode(rest.get(8..)?)?;
                if seq <= self.executed || self.log.contains_key(&seq) {
                    return Some(());
                }
                if seq > self.executed + MAX_PENDING as u64 {
                    return Some(());
                }
                let mut v = Vec::new();
                e.encode_into(&mut v);
                out.push(Output::Store {
                    key: seq_key(seq),
                    value: Some(v),
                });
                out.push(Output::Sync);
                self.log.insert(seq, e);
                self.drain(out, true);
                Some(())
            }
            b'A' if self.is_leader() && rest.len() == 8 => {
                let seq = u64::from_le_bytes(rest.try_into().ok()?);
                let slot = self.acked.get_mut(from as usize)?;
                *slot = (*slot).max(seq);
                Some(())
            }
            _ => None,
        }
    }

    fn on_timer(&mut self, out: &mut Vec<Output>) {
        if self.is_leader() {
            for to in 1..self.n {
                let acked = self.acked[to as usize];
                for (seq, e) in self.log.range(acked + 1..).take(RESEND_BATCH as usize) {
                    out.push(Output::Send {
                        to,
                        bytes: Self::order_bytes(*seq, e),
                    });
                }
            }
        } else {
            let mut b = vec![b'A'];
            b.extend_from_slice(&self.executed.to_le_bytes());
            out.push(Output::Send { to: 0, bytes: b });
        }
    }
}

impl Node for ToyNode {
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>) {
        match input {
            Input::Peer { from, bytes } => {
                if self.on_peer(from, &bytes, out).is_none() {
                    self.rejected += 1;
                    tracing::trace!(node = self.id, from, "toy: rejected message");
                }
            }
            Input::Client { bytes } => {
                if self.is_leader() && bytes.len() <= MAX_MESSAGE {
                    self.order(Entry::Request(bytes), out);
                }
            }
            Input::InternalTick { component } => {
                if self.is_leader() {
                    self.order(Entry::Tick(component), out);
                }
            }
            Input::Timer => self.on_timer(out),
        }
        // A deadline further away than one period means the clock jumped back: re-arm, or the
        // node would stay silent for the length of the jump.
        match self.deadline {
            Some(d) if d > now && d <= now.saturating_add(RESEND_MS) => {}
            _ => self.deadline = Some(now.saturating_add(RESEND_MS)),
        }
    }

    fn next_deadline(&self) -> Option<Millis> {
        self.deadline
    }
}

/// Boots [`ToyNode`]s; client requests are `client:number` in ASCII.
#[derive(Debug, Clone)]
pub struct ToyHarness {
    /// Number of replicas.
    pub n: u32,
}

impl Harness for ToyHarness {
    type Node = ToyNode;

    fn boot(&mut self, id: NodeId, disk: &DiskImage, _role: Role) -> ToyNode {
        ToyNode::new(id, self.n, disk)
    }

    fn client_request(&mut self, client: u32, number: u64) -> Vec<u8> {
        format!("{client}:{number}").into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_garbage_is_rejected() {
        for e in [Entry::Request(b"abc".to_vec()), Entry::Tick(7)] {
            let mut b = Vec::new();
            e.encode_into(&mut b);
            assert_eq!(Entry::decode(&b), Some(e));
        }
        assert_eq!(Entry::decode(&[0, 9, 0, 0, 0, 1]), None);
        assert_eq!(Entry::decode(&[2]), None);
        let mut n = ToyNode::new(1, 4, &DiskImage::new());
        let mut out = Vec::new();
        n.handle(
            0,
            Input::Peer {
                from: 0,
                bytes: vec![b'O', 1],
            },
            &mut out,
        );
        assert_eq!(n.rejected(), 1);
        assert!(out.is_empty());
    }

    #[test]
    fn follower_rebuilds_state_from_disk() {
        let mut leader = ToyNode::new(0, 2, &DiskImage::new());
        let mut out = Vec::new();
        leader.handle(
            0,
            Input::Client {
                bytes: b"x".to_vec(),
            },
            &mut out,
        );
        leader.handle(0, Input::InternalTick { component: 3 }, &mut out);
        let mut disk = DiskImage::new();
        for o in &out {
            if let Output::Store {
                key,
                value: Some(v),
            } = o
            {
                disk.insert(key.clone(), v.clone());
            }
        }
        let restored = ToyNode::new(0, 2, &disk);
        assert_eq!(restored.executed(), 2);
        assert_eq!(restored.state, leader.state);
    }
}
