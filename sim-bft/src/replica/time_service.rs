//! The time service: local clocks in, one agreed time per batch out.
//!
//! Commits carry the signer's clock; 2f+1 of them for one seq form a time certificate. In the
//! robust mode the primary attaches a recent certificate to each batch, backups check it
//! (fresh, not replayed, valid signatures, median within the hard limit) and the agreed time is
//! its median, kept monotonic by `epsilon_ms`.

use std::collections::{BTreeMap, BTreeSet};

use ccron::host::time;
use tracing::warn;

use super::hooks::CertChoice;
use super::{Metrics, Replica, ReplicaError, TimeMode};
use crate::node::{Millis, Output};
use crate::protocol::{Batch, Body, TimeCert, codec};

/// The time service's state: the time certificates this replica holds and the newest one an
/// executed batch carried.
#[derive(Debug)]
pub(super) struct TimeState {
    /// The seq of the newest time certificate an executed batch carried (replicated: part of
    /// the snapshot).
    pub(super) last_cert_seq: u64,
    /// The recent time certificates, by the seq they certify (a primary attaches one).
    pub(super) recent_certs: BTreeMap<u64, TimeCert>,
}

impl Replica {
    /// The clock this replica writes into its commits (its strategy's offset added: 0 for
    /// an honest replica).
    pub(super) fn clock(&self, now: Millis) -> Millis {
        now.saturating_add(self.strategy.time_policy().clock_offset_ms)
    }

    /// The stamp a primary puts in its batches (`Batch::primary_clock_ms`).
    pub(super) fn primary_stamp(&self, now: Millis) -> Millis {
        self.clock(now)
            .saturating_add(self.strategy.time_policy().stamp_ahead_ms)
    }

    /// How far (in sequence numbers) a batch's certificate may lag the batch. An honest primary
    /// proposes `seq` only after executing `seq - max_in_flight`, so it holds that seq's
    /// certificate; one more covers a primary that restarted with its durable certificate.
    pub(super) fn cert_max_lag(&self) -> u64 {
        self.cfg.max_in_flight.saturating_add(1)
    }

    /// Whether a certificate for `cert_seq` may be attached to the batch at `seq` at all: below
    /// it, not older than `floor` (the last certificate used before `seq`), within the window.
    fn cert_usable(&self, cert_seq: u64, seq: u64, floor: u64) -> bool {
        cert_seq < seq
            && cert_seq >= floor
            && cert_seq.saturating_add(self.cfg.time.cert_window) >= seq
    }

    /// The newest certificate usable for `seq`: below it, within the window, not older than the
    /// last one used by the log before `seq`.
    pub(super) fn select_cert(&self, seq: u64) -> Option<TimeCert> {
        let floor = self.cert_floor(seq);
        let mut usable = self
            .time
            .recent_certs
            .range(..seq)
            .filter(|(s, _)| self.cert_usable(**s, seq, floor));
        let chosen = match self.strategy.time_policy().cert {
            CertChoice::Omit => None,
            // The oldest certificate still usable: time would freeze at its median.
            CertChoice::Oldest => usable.next(),
            CertChoice::Newest => usable.next_back(),
        };
        chosen.map(|(_, c)| c.clone())
    }

    /// The last certificate seq used by batches before `seq` (executed or in the log).
    fn cert_floor(&self, seq: u64) -> u64 {
        self.log
            .range(..seq)
            .filter_map(|(_, e)| e.batch.as_ref()?.time_cert.as_ref().map(|c| c.seq))
            .max()
            .unwrap_or(0)
            .max(self.time.last_cert_seq)
    }

    /// The backup's time check on a pre-prepare; false means "withhold votes".
    pub(super) fn check_batch_time(&mut self, now: Millis, seq: u64, batch: &Batch) -> bool {
        let t = self.cfg.time;
        let bounds = |m: &mut Metrics, ts: Millis, hard: Millis| -> bool {
            // Saturating: a hostile clock (i64::MIN) must not overflow.
            if !time::within(ts, now, t.soft_limit_ms) {
                m.inc("time_soft_exceeded");
            }
            if !time::within(ts, now, hard) {
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
            TimeMode::Robust => self.check_robust_time(now, seq, batch, &bounds),
        }
    }

    /// The robust rule's checks, in order: the primary's stamp within `genesis_bound_ms` of this
    /// backup's clock (it floors agreed time); the certificate usable (not replayed); fresh
    /// (at most `cert_max_lag()` seqs old, unless this backup knows nothing newer); valid; its
    /// median not beyond the hard limit ahead.
    fn check_robust_time(
        &mut self,
        now: Millis,
        seq: u64,
        batch: &Batch,
        bounds: &dyn Fn(&mut Metrics, Millis, Millis) -> bool,
    ) -> bool {
        let t = self.cfg.time;
        if !bounds(
            &mut self.metrics,
            batch.primary_clock_ms,
            t.genesis_bound_ms,
        ) {
            warn!(
                replica = self.cfg.id,
                seq,
                primary_clock_ms = batch.primary_clock_ms,
                now,
                "primary stamp beyond the genesis bound: withholding votes"
            );
            return false;
        }
        let floor = self.cert_floor(seq);
        let attached = batch.time_cert.as_ref().map(|c| c.seq);
        if let Some(c) = attached
            && !self.cert_usable(c, seq, floor)
        {
            self.metrics.inc("time_cert_replayed");
            warn!(
                replica = self.cfg.id,
                seq,
                cert_seq = c,
                floor,
                "stale or replayed time certificate"
            );
            return false;
        }
        // Freshness: an honest primary holds a certificate at most `cert_max_lag()` old. An
        // older one (or none) is accepted only while this backup knows no newer usable one
        // either (the first seqs; a cluster that lost its recent certificates).
        let required = seq.saturating_sub(self.cert_max_lag());
        let fresh = attached.map_or(required == 0, |c| c >= required);
        if !fresh {
            let newer = self
                .time
                .recent_certs
                .range(..seq)
                .next_back()
                .map(|(s, _)| *s)
                .filter(|s| self.cert_usable(*s, seq, floor) && Some(*s) > attached);
            if let Some(known) = newer {
                let counter = if attached.is_some() {
                    "time_cert_replayed"
                } else {
                    "time_cert_missing"
                };
                self.metrics.inc(counter);
                warn!(
                    replica = self.cfg.id,
                    seq,
                    cert_seq = ?attached,
                    known,
                    "time certificate omitted or stale while a newer one exists"
                );
                return false;
            }
        }
        let Some(cert) = &batch.time_cert else {
            return true;
        };
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

    fn verify_time_cert(&self, cert: &TimeCert) -> bool {
        if cert.samples.len() < self.quorum() {
            return false;
        }
        // A sample this replica holds as a commit vote for the certificate's seq (the same view,
        // digest, clock and signature) was verified when the commit arrived (or signed here):
        // it verifies again, so it is not checked twice. Any other sample is verified.
        let votes = self.log.get(&cert.seq).map(|e| &e.commits);
        let held = |s: &crate::protocol::ClockSample| {
            votes.and_then(|v| v.get(&s.replica)).is_some_and(|v| {
                v.view == s.view
                    && v.digest == cert.digest
                    && v.clock_ms == s.clock_ms
                    && v.sig == s.sig
            })
        };
        let mut seen = BTreeSet::new();
        cert.samples.iter().all(|s| {
            seen.insert(s.replica)
                && (held(s)
                    || crate::protocol::verify_body(
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
                    ))
        })
    }

    /// How many recent time certificates to keep: enough for every pipelined proposal.
    fn recent_certs_capacity(&self) -> usize {
        usize::try_from(self.cfg.max_in_flight)
            .unwrap_or(usize::MAX)
            .saturating_mul(2)
            .saturating_add(16)
    }

    /// The agreed time of `batch`, by ccron's one time rule ([`time::TimeRule::agreed_from`]):
    /// a null batch carries the previous time forward; otherwise the primary's stamp (in the
    /// robust mode less the genesis bound, raised to the attached certificate's median), never
    /// below the previous agreed time plus epsilon.
    pub(super) fn agreed_time(&self, batch: &Batch) -> Option<Millis> {
        let evidence = match self.cfg.time.mode {
            TimeMode::Off => return None,
            _ if batch.null => time::TimeEvidence::Carried,
            TimeMode::Reference => time::TimeEvidence::Stamped {
                stamp_ms: batch.primary_clock_ms,
                certificate_median_ms: None,
            },
            TimeMode::Robust => time::TimeEvidence::Stamped {
                stamp_ms: batch.primary_clock_ms,
                certificate_median_ms: batch.time_cert.as_ref().and_then(TimeCert::median_ms),
            },
        };
        self.host
            .time_rule()
            .agreed_from(self.host.last_agreed_ms(), evidence)
            .ok()
    }

    /// Keeps a time certificate (2f+1 signed commit clocks for one seq) for later pre-prepares,
    /// bounded to the most recent `recent_certs_capacity()` sequence numbers.
    /// The newest one is also stored durably (`KEY_TIME_CERT`), so a primary that restarts
    /// still holds a certificate fresh enough for its next proposals.
    pub(super) fn remember_time_cert(&mut self, cert: TimeCert, out: &mut Vec<Output>) {
        let newest = self
            .time
            .recent_certs
            .keys()
            .next_back()
            .is_none_or(|s| *s < cert.seq);
        if newest {
            match codec::encode(&cert) {
                Ok(value) => out.push(Output::Store {
                    key: KEY_TIME_CERT.to_vec(),
                    value: Some(value),
                }),
                Err(_) => self.metrics.inc("encode_error"),
            }
        }
        self.time.recent_certs.insert(cert.seq, cert);
        while self.time.recent_certs.len() > self.recent_certs_capacity() {
            self.time.recent_certs.pop_first();
        }
    }
}

/// Storage key of the newest time certificate a replica holds.
pub const KEY_TIME_CERT: &[u8] = b"tcert";

impl Replica {
    /// Reloads the newest time certificate from durable storage after a restart.
    pub(super) fn restore_time_cert(
        &mut self,
        stored: &BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> Result<(), ReplicaError> {
        if let Some(bytes) = stored.get(KEY_TIME_CERT) {
            let cert: TimeCert = codec::decode(bytes, self.cfg.max_message_bytes)
                .map_err(|e| ReplicaError::Storage(format!("time certificate: {e}")))?;
            self.time.recent_certs.insert(cert.seq, cert);
        }
        Ok(())
    }
}
