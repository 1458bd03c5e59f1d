//! How delivery attempts ended, by kind: the worker's answer, its typed refusal
//! ([`contract::ERROR`]), the bounded server's own refusal ([`REFUSAL_HEADER`]), or what the
//! dispatcher saw on its side (a timeout, a transport error, an answer it refused). A closed
//! set: a flood of odd statuses cannot grow the counters (or a metrics endpoint's labels).

use hyper::header::HeaderMap;
use hyper::{StatusCode, header};

use crate::contract;
use crate::server::{REFUSAL_HEADER, RETRY_AFTER_MS_HEADER};

/// How one delivery attempt ended (the label of [`AttemptCounts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum AttemptKind {
    /// `2xx`: answered (performed now or replayed from memory).
    Done,
    /// No answer within the handler's attempt timeout.
    Timeout,
    /// The connection failed or broke off.
    Transport,
    /// A response the dispatcher refused (no valid response MAC or answer signature).
    BadAnswer,
    /// An answer longer than the ledger accepts (said by the worker, or seen here).
    AnswerTooLarge,
    /// `401` from the worker: our credentials were refused.
    Unauthenticated,
    /// `400` from the worker: a malformed delivery.
    BadRequest,
    /// `409`: the same id was delivered with another record.
    Conflict,
    /// `410`: at or below our acknowledged progress.
    Stale,
    /// `422`: the effect rejected the record.
    Rejected,
    /// `503`: beyond the window of our progress at the worker.
    AheadOfWindow,
    /// `503`: the worker's idempotency memory had no room.
    MemoryFull,
    /// `503`: the effect was unavailable.
    Unavailable,
    /// `429` from the bounded server: the per-peer rate limit.
    RateLimited,
    /// `503` from the bounded server: the handler ran past its request timeout.
    ServerTimeout,
    /// `413`, `408` or `400` from the bounded server: the request body was refused.
    BodyRefused,
    /// Any other status (a proxy's, or a worker not speaking the contract).
    OtherStatus,
}

impl AttemptKind {
    /// Every kind, in label order.
    pub const ALL: [Self; 17] = [
        Self::Done,
        Self::Timeout,
        Self::Transport,
        Self::BadAnswer,
        Self::AnswerTooLarge,
        Self::Unauthenticated,
        Self::BadRequest,
        Self::Conflict,
        Self::Stale,
        Self::Rejected,
        Self::AheadOfWindow,
        Self::MemoryFull,
        Self::Unavailable,
        Self::RateLimited,
        Self::ServerTimeout,
        Self::BodyRefused,
        Self::OtherStatus,
    ];

    /// The label (the worker's or the server's refusal name where there is one).
    pub fn name(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::BadAnswer => "bad-answer",
            Self::AnswerTooLarge => "answer-too-large",
            Self::Unauthenticated => "unauthenticated",
            Self::BadRequest => "bad-request",
            Self::Conflict => "conflict",
            Self::Stale => "stale",
            Self::Rejected => "rejected",
            Self::AheadOfWindow => "ahead-of-window",
            Self::MemoryFull => "memory-full",
            Self::Unavailable => "unavailable",
            Self::RateLimited => "rate-limited",
            Self::ServerTimeout => "server-timeout",
            Self::BodyRefused => "body-refused",
            Self::OtherStatus => "other-status",
        }
    }

    fn slot(self) -> usize {
        Self::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }

    /// The kind of a response with `status` and `headers` (before the dispatcher's own checks
    /// of its MAC and signature).
    pub fn of_response(status: StatusCode, headers: &HeaderMap) -> Self {
        if status.is_success() {
            return Self::Done;
        }
        let named = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(worker) = named(contract::ERROR) {
            return match worker {
                "unauthenticated" => Self::Unauthenticated,
                "bad-request" => Self::BadRequest,
                "conflict" => Self::Conflict,
                "stale" => Self::Stale,
                "rejected" => Self::Rejected,
                "answer-too-large" => Self::AnswerTooLarge,
                "ahead-of-window" => Self::AheadOfWindow,
                "memory-full" => Self::MemoryFull,
                "unavailable" => Self::Unavailable,
                _ => Self::OtherStatus,
            };
        }
        if let Some(server) = named(REFUSAL_HEADER) {
            return match server {
                "rate-limited" => Self::RateLimited,
                "request-timeout" => Self::ServerTimeout,
                "body-too-large" | "body-timeout" | "bad-body" => Self::BodyRefused,
                _ => Self::OtherStatus,
            };
        }
        match status {
            StatusCode::UNAUTHORIZED => Self::Unauthenticated,
            StatusCode::TOO_MANY_REQUESTS => Self::RateLimited,
            _ => Self::OtherStatus,
        }
    }
}

/// The wait a refusal asks for, in milliseconds (at most an hour): the bounded server's
/// [`RETRY_AFTER_MS_HEADER`] when present, else `Retry-After` (delta seconds only).
pub fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    if let Some(ms) = headers
        .get(RETRY_AFTER_MS_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Some(ms.min(3_600_000));
    }
    let secs: u64 = headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(secs.min(3_600).saturating_mul(1_000))
}

/// Attempts by how they ended ([`AttemptKind`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttemptCounts([u64; AttemptKind::ALL.len()]);

impl AttemptCounts {
    /// Attempts that ended as `kind`.
    pub fn get(&self, kind: AttemptKind) -> u64 {
        self.0.get(kind.slot()).copied().unwrap_or(0)
    }

    /// Every kind with its count, in label order (zeros included).
    pub fn iter(&self) -> impl Iterator<Item = (AttemptKind, u64)> + '_ {
        AttemptKind::ALL.iter().map(|k| (*k, self.get(*k)))
    }

    /// Every attempt counted.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    pub(crate) fn add(&mut self, kind: AttemptKind) {
        if let Some(c) = self.0.get_mut(kind.slot()) {
            *c += 1;
        }
    }
}

impl std::fmt::Display for AttemptCounts {
    /// The kinds that happened, as `name count` pairs (`done 9, rate-limited 2`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (k, n) in self.iter().filter(|(_, n)| *n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{} {n}", k.name())?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_counted_by_who_refused_and_why() {
        let with = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, value.parse().unwrap());
            h
        };
        let none = HeaderMap::new();
        let s = |c: u16| StatusCode::from_u16(c).unwrap();
        assert_eq!(AttemptKind::of_response(s(200), &none), AttemptKind::Done);
        assert_eq!(
            AttemptKind::of_response(s(503), &with(contract::ERROR, "ahead-of-window")),
            AttemptKind::AheadOfWindow
        );
        assert_eq!(
            AttemptKind::of_response(s(503), &with(contract::ERROR, "unavailable")),
            AttemptKind::Unavailable
        );
        assert_eq!(
            AttemptKind::of_response(s(429), &with(REFUSAL_HEADER, "rate-limited")),
            AttemptKind::RateLimited
        );
        assert_eq!(
            AttemptKind::of_response(s(503), &with(REFUSAL_HEADER, "request-timeout")),
            AttemptKind::ServerTimeout
        );
        assert_eq!(
            AttemptKind::of_response(s(401), &none),
            AttemptKind::Unauthenticated
        );
        assert_eq!(
            AttemptKind::of_response(s(502), &none),
            AttemptKind::OtherStatus
        );
        assert_eq!(
            AttemptKind::of_response(s(503), &with(contract::ERROR, "made-up")),
            AttemptKind::OtherStatus
        );
        // Every kind has its own slot and a distinct name.
        let mut c = AttemptCounts::default();
        for k in AttemptKind::ALL {
            c.add(k);
        }
        assert!(c.iter().all(|(_, n)| n == 1));
        let names: std::collections::BTreeSet<_> =
            AttemptKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), AttemptKind::ALL.len());
        assert_eq!(
            retry_after_ms(&with("retry-after", "2")),
            Some(2_000),
            "delta seconds"
        );
        assert_eq!(retry_after_ms(&with("retry-after", "soon")), None);
        let mut both = with("retry-after", "1");
        both.insert(RETRY_AFTER_MS_HEADER, "3".parse().unwrap());
        assert_eq!(retry_after_ms(&both), Some(3), "the exact wait wins");
        assert_eq!(
            retry_after_ms(&with("retry-after", "99999999")),
            Some(3_600_000)
        );
    }
}
