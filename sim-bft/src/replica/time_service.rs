//! The time service: local clocks in, one agreed time per batch out.
//!
//! Commits carry the signer's clock; 2f+1 of them for one seq form a time certificate. In the
//! robust mode the primary attaches a recent certificate to each batch, backups check it
//! (fresh, not replayed, valid signatures, median within the hard limit) and the agreed time is
//! its median, kept monotonic by `epsilon_ms`.

use std::collections::BTreeSet;

use tracing::warn;

use super::{Byzantine, Metrics, Replica, TimeMode};
use crate::node::Millis;
use crate::protocol::{Batch, Body, TimeCert};

impl Replica {
    pub(super) fn clock(&self, now: Millis) -> Millis {
        match self.cfg.byzantine {
            Byzantine::LyingClock { offset_ms } => now.saturating_add(offset_ms),
            _ => now,
        }
    }

    /// The newest certificate usable for `seq`: below it, within the window, not older than the
    /// last one used by the log before `seq`.
    pub(super) fn select_cert(&self, seq: u64) -> Option<TimeCert> {
        let floor = self.cert_floor(seq);
        self.recent_certs
            .range(..seq)
            .next_back()
            .filter(|(s, _)| **s >= floor && s.saturating_add(self.cfg.time.cert_window) >= seq)
            .map(|(_, c)| c.clone())
    }

    /// The last certificate seq used by batches before `seq` (executed or in the log).
    fn cert_floor(&self, seq: u64) -> u64 {
        self.log
            .range(..seq)
            .filter_map(|(_, e)| e.batch.as_ref()?.time_cert.as_ref().map(|c| c.seq))
            .max()
            .unwrap_or(0)
            .max(self.last_cert_seq)
    }

    /// The backup's time check on a pre-prepare; false means "withhold votes".
    pub(super) fn check_batch_time(&mut self, now: Millis, seq: u64, batch: &Batch) -> bool {
        let t = self.cfg.time;
        let bounds = |m: &mut Metrics, ts: Millis, hard: Millis| -> bool {
            // abs_diff: a hostile clock (i64::MIN) must not overflow.
            let d = ts.abs_diff(now);
            if d > t.soft_limit_ms.unsigned_abs() {
                m.inc("time_soft_exceeded");
            }
            if d > hard.unsigned_abs() {
                m.inc("time_hard_exceeded");
                return false;
            }
            true
        };
        match t.mode {
            TimeMode::Off => true,
            TimeMode::Reference => {
                let ok = bounds(&mut self.metrics, batch.primary_clock_ms, t.hard_limit_ms);
                if !ok {
                    warn!(
                        replica = self.cfg.id,
                        seq,
                        primary_clock_ms = batch.primary_clock_ms,
                        now,
                        "primary clock beyond hard limit: withholding votes"
                    );
                }
                ok
            }
            TimeMode::Robust => match &batch.time_cert {
                None => {
                    // Only acceptable when no usable certificate exists (the first seqs, or
                    // right after a restart), and then bounded tightly.
                    let floor = self.cert_floor(seq);
                    // An honest primary proposes `seq` only after executing
                    // `seq - max_in_flight - 1`, so it holds a certificate at least that recent:
                    // only a certificate older than that proves the omission deliberate.
                    let lag = self.cfg.max_in_flight + 1;
                    let known = self
                        .recent_certs
                        .range(..seq)
                        .next_back()
                        .is_some_and(|(s, _)| {
                            *s >= floor
                                && s.saturating_add(t.cert_window) >= seq
                                && s.saturating_add(lag) < seq
                        });
                    if known {
                        self.metrics.inc("time_cert_missing");
                        return false;
                    }
                    bounds(
                        &mut self.metrics,
                        batch.primary_clock_ms,
                        t.genesis_bound_ms,
                    )
                }
                Some(cert) => {
                    let floor = self.cert_floor(seq);
                    if cert.seq < floor
                        || cert.seq >= seq
                        || cert.seq.saturating_add(t.cert_window) < seq
                    {
                        self.metrics.inc("time_cert_replayed");
                        warn!(
                            replica = self.cfg.id,
                            seq,
                            cert_seq = cert.seq,
                            floor,
                            "stale or replayed time certificate"
                        );
                        return false;
                    }
                    if !self.verify_time_cert(cert) {
                        self.metrics.inc("time_cert_invalid");
                        return false;
                    }
                    match cert.median_ms() {
                        Some(m) if m <= now.saturating_add(t.hard_limit_ms) => true,
                        _ => {
                            self.metrics.inc("time_hard_exceeded");
                            false
                        }
                    }
                }
            },
        }
    }

    fn verify_time_cert(&self, cert: &TimeCert) -> bool {
        if cert.samples.len() < self.quorum() {
            return false;
        }
        let mut seen = BTreeSet::new();
        cert.samples.iter().all(|s| {
            seen.insert(s.replica)
                && crate::protocol::verify_body(
                    &self.ring,
                    s.replica,
                    Body::Commit {
                        view: s.view,
                        seq: cert.seq,
                        digest: cert.digest,
                        clock_ms: s.clock_ms,
                    },
                    &s.sig,
                    self.cfg.verify_cache.as_ref(),
                )
        })
    }

    /// How many recent time certificates to keep: enough for every pipelined proposal.
    fn recent_certs_capacity(&self) -> usize {
        usize::try_from(self.cfg.max_in_flight)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .saturating_add(16)
    }

    pub(super) fn agreed_time(&self, batch: &Batch) -> Option<Millis> {
        let eps = self.cfg.time.epsilon_ms;
        let base = match self.cfg.time.mode {
            TimeMode::Off => return None,
            _ if batch.null => return self.last_agreed_time_ms.map(|t| t.saturating_add(eps)),
            TimeMode::Reference => batch.primary_clock_ms,
            TimeMode::Robust => batch
                .time_cert
                .as_ref()
                .and_then(TimeCert::median_ms)
                .unwrap_or(batch.primary_clock_ms),
        };
        Some(match self.last_agreed_time_ms {
            Some(prev) => base.max(prev.saturating_add(eps)),
            None => base,
        })
    }

    /// Keeps a time certificate (2f+1 signed commit clocks for one seq) for later pre-prepares,
    /// bounded to the most recent `recent_certs_capacity()` sequence numbers.
    pub(super) fn remember_time_cert(&mut self, cert: TimeCert) {
        self.recent_certs.insert(cert.seq, cert);
        while self.recent_certs.len() > self.recent_certs_capacity() {
            self.recent_certs.pop_first();
        }
    }
}
