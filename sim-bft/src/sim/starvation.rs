//! The starvation checker (issue 9, defect 5): every client request that reached 2f+1 honest
//! replicas gets an honest replica's reply within [`STARVATION_BOUND_MS`].
//!
//! Sound only while the network is clean (no loss, partition, crash or clock jump), so a request
//! is watched when it was sent after the faults healed, or when the run has no such faults at
//! all; a Byzantine replica stays Byzantine either way. A request counts as delivered to an
//! honest replica when the simulator scheduled its delivery (not dropped) to a running honest
//! replica. Requests sent less than the bound before the end of the run are not judged.

use std::collections::BTreeMap;

/// How long a watched request may wait for its first honest reply. Generous against the
/// honest worst case (one status round and a view change with the timeout at its 8 s
/// ceiling), far below "for ever".
pub const STARVATION_BOUND_MS: u64 = 20_000;

/// An overdue request: client, request number, send time, honest replicas it reached.
pub type Overdue = (u32, u64, u64, usize);

/// Watched requests awaiting their first honest reply.
#[derive(Debug, Clone, Default)]
pub struct StarvationWatch {
    quorum: usize,
    outstanding: BTreeMap<(u32, u64), (u64, usize)>,
}

impl StarvationWatch {
    /// A watch for a cluster whose quorum is `quorum` (2f+1).
    pub fn new(quorum: usize) -> Self {
        Self {
            quorum,
            outstanding: BTreeMap::new(),
        }
    }

    /// Client `client` sent request `number` at `sent_ms`, delivered to `honest_deliveries`
    /// honest replicas; watched only if `watch` and the deliveries reach the quorum.
    pub fn sent(
        &mut self,
        client: u32,
        number: u64,
        sent_ms: u64,
        honest_deliveries: usize,
        watch: bool,
    ) {
        if watch && honest_deliveries >= self.quorum {
            self.outstanding
                .insert((client, number), (sent_ms, honest_deliveries));
        }
    }

    /// An honest replica replied to `client`'s request `number`.
    pub fn replied(&mut self, client: u32, number: u64) {
        self.outstanding.remove(&(client, number));
    }

    /// The watched requests unanswered for longer than the bound at `now_ms` (each reported
    /// once, then forgotten).
    pub fn overdue(&mut self, now_ms: u64) -> Vec<Overdue> {
        let late: Vec<(u32, u64)> = self
            .outstanding
            .iter()
            .filter(|(_, (sent, _))| sent.saturating_add(STARVATION_BOUND_MS) < now_ms)
            .map(|(k, _)| *k)
            .collect();
        late.into_iter()
            .filter_map(|k| {
                let (sent, reached) = self.outstanding.remove(&k)?;
                Some((k.0, k.1, sent, reached))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_each_overdue_watched_request_once() {
        let mut w = StarvationWatch::new(3);
        w.sent(0, 1, 100, 3, true);
        w.sent(0, 2, 100, 2, true); // below the quorum: not judged
        w.sent(1, 1, 100, 3, false); // sent while faulty: not judged
        w.sent(1, 2, 100, 3, true);
        w.replied(1, 2);
        assert!(w.overdue(100 + STARVATION_BOUND_MS).is_empty());
        assert_eq!(w.overdue(101 + STARVATION_BOUND_MS), vec![(0, 1, 100, 3)]);
        assert!(w.overdue(u64::MAX).is_empty());
    }
}
