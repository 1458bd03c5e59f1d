//! The simulator's network: what a sent message becomes between two nodes. The sender's
//! Byzantine byte-level behaviour (silent, corrupt, replay) first, then the seeded network
//! faults (partition, loss, duplication, reordering, delay) before delivery is queued.

use super::{ByzantineKind, Event, Harness, REPLAY_HISTORY, Role, Simulator};
use crate::node::{Input, NodeId};

impl<H: Harness> Simulator<H> {
    /// Applies the sender's Byzantine behaviour, then the network faults.
    pub(super) fn send_from(&mut self, from: NodeId, to: NodeId, mut bytes: Vec<u8>) {
        match self.slots[from as usize].role {
            Role::Byzantine(ByzantineKind::Silent) => {
                self.stats.dropped += 1;
                return;
            }
            Role::Byzantine(ByzantineKind::Corrupt)
                if !bytes.is_empty() && self.byz_rng.chance(0.5) =>
            {
                let flips = 1 + self.byz_rng.below(3);
                for _ in 0..flips {
                    let at = self.byz_rng.below(bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << self.byz_rng.below(8);
                }
                if self.byz_rng.chance(0.1) {
                    let keep = self.byz_rng.below(bytes.len() as u64) as usize;
                    bytes.truncate(keep);
                }
                self.stats.corrupted += 1;
            }
            Role::Byzantine(ByzantineKind::Replay) => {
                let h = &self.slots[from as usize].history;
                if !h.is_empty() && self.byz_rng.chance(0.3) {
                    let k = self.byz_rng.below(h.len() as u64) as usize;
                    let old = h[k].clone();
                    let target = self.byz_rng.below(u64::from(self.cfg.replicas)) as NodeId;
                    self.stats.replayed += 1;
                    if target != from {
                        self.transmit(from, target, old);
                    }
                }
                let h = &mut self.slots[from as usize].history;
                if h.len() >= REPLAY_HISTORY {
                    h.pop_front();
                }
                h.push_back(bytes.clone());
            }
            _ => {}
        }
        self.transmit(from, to, bytes);
    }

    /// The network: partitions, loss, duplication, delay and reordering.
    fn transmit(&mut self, from: NodeId, to: NodeId, bytes: Vec<u8>) {
        if !self.healed {
            if self.blocked.contains_key(&(from, to)) {
                self.stats.dropped += 1;
                return;
            }
            if self.net_rng.chance(self.cfg.faults.drop_rate) {
                self.stats.dropped += 1;
                return;
            }
            if self.net_rng.chance(self.cfg.faults.duplicate_rate) {
                self.stats.duplicated += 1;
                let d = self.delay();
                let input = Input::Peer {
                    from,
                    bytes: bytes.clone(),
                };
                self.push(self.now_ms.saturating_add(d), Event::Deliver { to, input });
            }
        }
        let d = self.delay();
        self.push(
            self.now_ms.saturating_add(d),
            Event::Deliver {
                to,
                input: Input::Peer { from, bytes },
            },
        );
    }

    pub(super) fn delay(&mut self) -> u64 {
        let fc = &self.cfg.faults;
        let (lo, hi, rr, rd) = (
            fc.min_delay_ms,
            fc.max_delay_ms,
            fc.reorder_rate,
            fc.reorder_delay_ms,
        );
        let mut d = self.net_rng.range(lo, hi);
        if !self.healed && self.net_rng.chance(rr) {
            self.stats.reordered += 1;
            d += self.net_rng.range(1, rd.max(1));
        }
        d
    }
}
