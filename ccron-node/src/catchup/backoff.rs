//! Backing off a peer that answers busy (`429`) or failing (`5xx`): the catch-up client
//! ([`super::fetch::PeerClient`]) asks it again only after a pause, which doubles with every
//! such answer in a row ([`BACKOFF_FIRST`] up to [`BACKOFF_MAX`]) and honours the peer's
//! `Retry-After` (seconds, within the same cap). Until then the client refuses locally
//! ([`super::CatchUpError::Busy`]) without a byte on the wire: a stalled node asking every peer
//! once a second never hammers a peer that is shedding load. Any good answer forgets the peer.
//! Sans-IO: the caller passes its monotonic milliseconds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// The first pause after a busy or failing answer.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);

/// The longest pause (also the cap on a peer's `Retry-After`).
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Whether an HTTP status asks the client to back off: `429 Too Many Requests` or any `5xx`.
pub fn is_busy(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// One peer backed off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// Busy or failing answers in a row.
    strikes: u32,
    /// Not asked before this instant (ms).
    until_ms: u64,
    /// The last status it answered.
    status: u16,
}

/// The peers backed off (module docs). Bounded by the peers a node asks (its validators).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff {
    peers: BTreeMap<SocketAddr, Entry>,
}

impl Backoff {
    /// Whether `peer` may be asked at `now_ms`; `Err((status, ms))`: its last busy status and
    /// how long until it may.
    pub fn check(&self, peer: SocketAddr, now_ms: u64) -> Result<(), (u16, u64)> {
        match self.peers.get(&peer) {
            Some(e) if now_ms < e.until_ms => Err((e.status, e.until_ms - now_ms)),
            _ => Ok(()),
        }
    }

    /// `peer` answered `status` (busy: [`is_busy`]) at `now_ms`, with `retry_after` if it
    /// sent one; returns the pause before it is asked again.
    pub fn busy(
        &mut self,
        peer: SocketAddr,
        status: u16,
        retry_after: Option<Duration>,
        now_ms: u64,
    ) -> Duration {
        let strikes = self
            .peers
            .get(&peer)
            .map_or(0, |e| e.strikes)
            .saturating_add(1);
        let doubled = BACKOFF_FIRST.saturating_mul(1u32 << strikes.saturating_sub(1).min(16));
        let pause = doubled
            .max(retry_after.unwrap_or_default())
            .min(BACKOFF_MAX);
        let ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        self.peers.insert(
            peer,
            Entry {
                strikes,
                until_ms: now_ms.saturating_add(ms),
                status,
            },
        );
        pause
    }

    /// `peer` answered well: forgotten.
    pub fn ok(&mut self, peer: SocketAddr) {
        self.peers.remove(&peer);
    }
}

/// A `Retry-After` header's delay (seconds only; an HTTP date is ignored: the doubling
/// applies).
pub fn retry_after(headers: &hyper::HeaderMap) -> Option<Duration> {
    headers
        .get(hyper::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(i: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, i], 1))
    }

    #[test]
    fn a_busy_peer_waits_a_doubling_pause_capped_and_honouring_retry_after() {
        assert!(is_busy(429) && is_busy(500) && is_busy(503) && is_busy(599));
        assert!(!is_busy(200) && !is_busy(404) && !is_busy(413) && !is_busy(600));
        let mut b = Backoff::default();
        assert_eq!(b.check(peer(1), 0), Ok(()));
        // 1 s, 2 s, 4 s, ... in a row, never above the cap.
        assert_eq!(b.busy(peer(1), 429, None, 0), Duration::from_secs(1));
        assert_eq!(b.check(peer(1), 999), Err((429, 1)));
        assert_eq!(b.check(peer(1), 1_000), Ok(()));
        assert_eq!(b.busy(peer(1), 503, None, 1_000), Duration::from_secs(2));
        assert_eq!(b.check(peer(1), 2_000), Err((503, 1_000)));
        assert_eq!(b.busy(peer(1), 503, None, 3_000), Duration::from_secs(4));
        for _ in 0..40 {
            assert!(b.busy(peer(1), 500, None, 10_000) <= BACKOFF_MAX);
        }
        assert_eq!(b.busy(peer(1), 500, None, 10_000), BACKOFF_MAX);
        // Other peers are not affected; a good answer forgets the peer.
        assert_eq!(b.check(peer(2), 10_000), Ok(()));
        b.ok(peer(1));
        assert_eq!(b.check(peer(1), 10_000), Ok(()));
        assert_eq!(b.busy(peer(1), 429, None, 10_000), Duration::from_secs(1));
        // Retry-After is honoured above the doubling, within the cap.
        assert_eq!(
            b.busy(peer(3), 429, Some(Duration::from_secs(7)), 0),
            Duration::from_secs(7)
        );
        assert_eq!(
            b.busy(peer(3), 429, Some(Duration::from_secs(86_400)), 0),
            BACKOFF_MAX
        );
        let mut h = hyper::HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(hyper::header::RETRY_AFTER, "12".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(12)));
        h.insert(
            hyper::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
    }
}
