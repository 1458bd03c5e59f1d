//! Strategies that rewrite what the replica sends: bad signatures, bad digests, replayed old
//! messages, an equivocating primary, corrupt state chunks.

use std::collections::VecDeque;

use crate::node::{NodeId, Output};
use crate::protocol::{Body, Wire, codec};
use crate::replica::Dest;
use crate::replica::Metrics;
use crate::replica::hooks::{Outgoing, Strategy};

/// How many of its own sent messages a [`ReplayOld`] replica keeps to re-send.
const REPLAY_HISTORY: usize = 64;

/// Corrupts the signature of everything it signs (one flipped bit of byte 7).
pub(super) struct BadSignatures {
    /// The replica's message size limit (to decode its own encoded message).
    pub(super) max_bytes: usize,
}

impl Strategy for BadSignatures {
    fn on_wire(&mut self, bytes: Vec<u8>, _out: &mut Vec<Output>) -> Vec<u8> {
        let Ok(Wire::Signed(mut msg)) = codec::decode::<Wire>(&bytes, self.max_bytes) else {
            return bytes;
        };
        msg.sig[7] ^= 0x01;
        codec::encode(&Wire::Signed(msg)).unwrap_or(bytes)
    }
}

/// Votes (prepare, commit, checkpoint) with a wrong digest.
pub(super) struct BadDigests;

impl Strategy for BadDigests {
    fn outgoing(&mut self, mut body: Body, dest: Dest, _metrics: &mut Metrics) -> Outgoing {
        match &mut body {
            Body::Prepare { digest, .. }
            | Body::Commit { digest, .. }
            | Body::Checkpoint { digest, .. } => digest[0] ^= 0x5a,
            _ => {}
        }
        Outgoing::Send(body, dest)
    }
}

/// Before each message it sends, broadcasts again the oldest of its last
/// [`REPLAY_HISTORY`] sent messages.
#[derive(Default)]
pub(super) struct ReplayOld {
    history: VecDeque<Vec<u8>>,
}

impl Strategy for ReplayOld {
    fn on_wire(&mut self, bytes: Vec<u8>, out: &mut Vec<Output>) -> Vec<u8> {
        if let Some(old) = self.history.front().cloned() {
            out.push(Output::Broadcast { bytes: old });
        }
        self.history.push_back(bytes.clone());
        if self.history.len() > REPLAY_HISTORY {
            self.history.pop_front();
        }
        bytes
    }
}

/// As primary, sends odd backups another batch (its clock moved by one, so another digest)
/// than even ones.
pub(super) struct Equivocate {
    pub(super) id: NodeId,
    pub(super) n: u32,
}

impl Strategy for Equivocate {
    fn outgoing(&mut self, body: Body, dest: Dest, _metrics: &mut Metrics) -> Outgoing {
        let (Body::PrePrepare { view, seq, batch }, Dest::All) = (&body, dest) else {
            return Outgoing::Send(body, dest);
        };
        let mut other = batch.clone();
        other.primary_clock_ms += 1;
        let parts = (0..self.n)
            .filter(|to| *to != self.id)
            .map(|to| {
                let b = if to % 2 == 1 {
                    other.clone()
                } else {
                    batch.clone()
                };
                (
                    Body::PrePrepare {
                        view: *view,
                        seq: *seq,
                        batch: b,
                    },
                    Dest::One(to),
                )
            })
            .collect();
        Outgoing::Split(parts)
    }
}

/// Serves state transfer with corrupted chunks (the first byte of each flipped).
pub(super) struct CorruptStateChunks;

impl Strategy for CorruptStateChunks {
    fn outgoing(&mut self, mut body: Body, dest: Dest, _metrics: &mut Metrics) -> Outgoing {
        if let Body::StateChunk { data, .. } = &mut body
            && let Some(b) = data.first_mut()
        {
            *b ^= 0xff;
        }
        Outgoing::Send(body, dest)
    }
}
