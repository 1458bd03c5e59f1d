//! The node's own ticks (signed in its F+1 turn, throttled, forwarded to the other validators'
//! `POST /v1/ticks`) and what a decided block's ticks and requests leave behind (the pool's
//! replay floor, the throttle, the clients' results). Part of [`NodeCore`].

use ccron::host::{Application, BlockOutcome, TickSenders, TxResult, period_index};
use ccron::ticks::TickDecision;

use std::path::{Path, PathBuf};

use crate::api::lock;
use crate::core::{NodeCore, now_ms};
use crate::store::Commit;
use crate::types::{Block, TickTx};

impl<A: Application, C: Commit> NodeCore<A, C> {
    /// A generator tick of `component`: when it is this node's turn (F+1 rotation over the
    /// component's tick period) and no tick of the component is pending (the throttle), sign
    /// tick `n`, admit it to the own pool and forward it to the other validators' endpoints.
    pub fn on_local_tick(&mut self, component: u32) {
        let now = now_ms();
        let n = self.validators().count();
        let f = n.saturating_sub(1) / 3;
        let Some(period_ms) = self.tick_periods().get(&component).copied() else {
            return;
        };
        let period = period_index(now, period_ms);
        if !TickSenders::Rotating.sends(self.my_index(), n, f, period) {
            self.status_mut().tick_pool.own_not_my_turn += 1;
            return;
        }
        let next = self.tick_number().saturating_add(1);
        if let Err(e) = self.reserve_tick_number(next) {
            self.status_mut().tick_pool.own_unreserved += 1;
            tracing::error!(component, error = %e, "own tick number not reserved durably: tick not sent");
            return;
        }
        let req_seq = match self
            .throttle_mut()
            .on_internal_tick(component, now, || next)
        {
            TickDecision::Send { req_seq } => req_seq,
            TickDecision::Throttled { .. } => {
                self.status_mut().tick_pool.own_throttled += 1;
                return;
            }
        };
        self.set_tick_number(req_seq);
        let tick = TickTx::sign(self.domain(), component, req_seq, self.signer());
        let bytes = tick.encode();
        let me = Some(self.my_index());
        let admitted = lock(self.tick_pool()).admit(component, me, req_seq, tick);
        if let Err(e) = admitted {
            tracing::warn!(component, req_seq, reason = %e, "own tick not admitted");
            self.throttle_mut().on_dropped(component, req_seq);
            return;
        }
        self.throttle_mut().on_tick_popped(component, req_seq);
        self.status_mut().tick_pool.own_sent += 1;
        if let Some(f) = self.forwarder() {
            f.forward(bytes);
        }
    }

    /// After a decided block executed: its ticks' numbers are recorded in the pool (what they
    /// supersede leaves it; replays are refused from now on), own ticks clear the throttle,
    /// and the requests' results are recorded for clients.
    pub(crate) fn after_decided_ticks_and_results(&mut self, block: &Block, out: &BlockOutcome) {
        let mine = self.my_index();
        let mut committed = Vec::new();
        {
            let mut pool = lock(self.tick_pool());
            for t in &block.ticks {
                if let Some(i) = self.validators().index_of(&t.submitter) {
                    pool.on_included(t.component, i, t.number);
                    if i == mine {
                        committed.push((t.component, t.number));
                    }
                }
            }
        }
        for (component, number) in committed {
            self.throttle_mut().on_committed(component, number);
        }
        let evicted = {
            let mut results = lock(self.results());
            for (&(client, number), r) in self.ledger().last_requests.iter().zip(&out.results) {
                if let TxResult::Reply(reply) = r {
                    results.record(client, number, block.height, reply);
                }
            }
            results.evicted
        };
        self.status_mut().results_evicted = evicted;
    }
}

/// How many own tick numbers one durable reservation covers.
pub const TICK_RESERVE: u64 = 1_024;

/// The durable floor of this node's own tick numbers (`node-I/ticks.floor`): before the node
/// signs a number above the reserved one it writes a new reservation
/// ([`TICK_RESERVE`] more) with a checksum, fsync'ed and renamed into place. A restarted node
/// numbers its ticks above the reservation, so never at or below a number it signed before
/// the restart, whether a decided block carried it or it is still pending in a pool.
#[derive(Debug)]
pub struct TickFloor {
    path: PathBuf,
    reserved: u64,
}

impl TickFloor {
    /// Reads the floor (0 when the file does not exist: a first start).
    ///
    /// # Errors
    /// An unreadable or damaged file (the node refuses to start: it could reuse numbers).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let reserved = match std::fs::read(path) {
            Ok(bytes) => decode_floor(&bytes).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: damaged tick floor", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        Ok(Self {
            path: path.to_path_buf(),
            reserved,
        })
    }

    /// The highest number reserved: own numbers after a restart start above it.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Makes `number` usable: a no-op at or below the reservation, else a new durable one.
    ///
    /// # Errors
    /// I/O: the number must not be used.
    pub fn reserve(&mut self, number: u64) -> std::io::Result<()> {
        if number <= self.reserved {
            return Ok(());
        }
        let reserved = number.saturating_add(TICK_RESERVE);
        let tmp = self.path.with_extension("tmp");
        {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&encode_floor(reserved))?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        self.reserved = reserved;
        Ok(())
    }
}

fn encode_floor(n: u64) -> Vec<u8> {
    let mut out = n.to_le_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(&n.to_le_bytes()).to_le_bytes());
    out
}

fn decode_floor(bytes: &[u8]) -> Option<u64> {
    let n: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    let crc: [u8; 4] = bytes.get(8..12)?.try_into().ok()?;
    (bytes.len() == 12 && crc32fast::hash(&n) == u32::from_le_bytes(crc))
        .then(|| u64::from_le_bytes(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 23, defect 6: after a restart own tick numbers continued above the last one a
    // decided block carried, colliding with numbers still pending in the pools.
    #[test]
    fn a_restart_numbers_own_ticks_above_every_number_signed_before() {
        let dir = std::env::temp_dir().join(format!("ccron-tickfloor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ticks.floor");
        let mut floor = TickFloor::open(&path).unwrap();
        assert_eq!(floor.reserved(), 0);
        for n in 1..=3_000 {
            floor.reserve(n).unwrap();
        }
        let signed_before = 3_000;
        drop(floor); // a crash: nothing else is written
        let floor = TickFloor::open(&path).unwrap();
        assert!(floor.reserved() >= signed_before);
        // The node starts at max(committed floor, reservation) + 1.
        let committed = 2_990;
        assert!(committed.max(floor.reserved()) + 1 > signed_before);
        // A damaged floor is refused, not read as 0.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(TickFloor::open(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
