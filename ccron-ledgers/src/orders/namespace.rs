//! Client namespaces of the orders ledger ([`super::KeySpace::PerClient`]): every key, target
//! and payload a client's schedule request names, moved under its authenticated client id.
//!
//! # Names from before 256-bit ids
//! Until book layout 10 a client's id was the 64-bit [`ClientId::legacy_prefix`] of today's, and
//! its names were stored as `<decimal 64-bit id>/<key>`. A migrated book keeps those schedules
//! (owned by the legacy principal). [`own_request_in`] resolves a name the client has only under
//! its legacy prefix there, so a paid order still cancels its old expiry and an upsert changes
//! it instead of adding a second one; a name that exists under the full id, or nowhere, is the
//! full id's.

use ccron::host::ClientId;
use ccron::schedule::{Guarded, NewSchedule, ScheduleRequest, Target};

/// `key` in `client`'s namespace: `<client>/<key>`.
pub fn own_key(client: ClientId, key: &str) -> String {
    format!("{client}/{key}")
}

/// `key` in `client`'s legacy namespace (before 256-bit ids): `<legacy prefix>/<key>`, the
/// prefix in decimal as the 64-bit id was written.
pub fn legacy_key(client: ClientId, key: &str) -> String {
    format!("{}/{key}", client.legacy_prefix())
}

/// Where one client's names go: its full id's namespace, or for a name that exists only in its
/// legacy namespace, that one (see the module documentation).
struct Space<'a> {
    client: ClientId,
    exists: &'a dyn Fn(&str) -> bool,
}

impl Space<'_> {
    /// The namespace prefix (with its `/`) `key` is stored under.
    fn prefix(&self, key: &str) -> String {
        let own = own_key(self.client, key);
        if !(self.exists)(&own) && (self.exists)(&legacy_key(self.client, key)) {
            format!("{}/", self.client.legacy_prefix())
        } else {
            format!("{}/", self.client)
        }
    }

    fn key(&self, key: &str) -> String {
        let mut k = self.prefix(key);
        k.push_str(key);
        k
    }

    /// The schedule with its key and payload in one namespace: its key's (a schedule without
    /// a key: the full id's).
    fn schedule(&self, mut s: NewSchedule) -> NewSchedule {
        let prefix = match &s.key {
            Some(k) => self.prefix(k),
            None => format!("{}/", self.client),
        };
        s.key = s.key.map(|k| format!("{prefix}{k}"));
        let mut p = prefix.into_bytes();
        p.extend_from_slice(&s.payload);
        s.payload = p;
        s
    }

    fn target(&self, t: Target) -> Target {
        match t {
            Target::Key(k) => Target::Key(self.key(&k)),
            Target::Id(id) => Target::Id(id),
        }
    }
}

/// `request` with every key and schedule payload it names moved into `client`'s namespace,
/// as [`own_request_in`] with no legacy names.
pub fn own_request(client: ClientId, request: ScheduleRequest) -> ScheduleRequest {
    own_request_in(client, request, &|_| false)
}

/// `request` with every key and schedule payload it names moved into `client`'s namespace
/// ([`own_key`]): what a [`KeySpace::PerClient`](super::KeySpace::PerClient) ledger applies for a client's request.
/// A name for which `exists` (is a schedule key in the book) holds only under the client's
/// [`legacy_key`] is moved there instead (see the module documentation). Ids, zones,
/// exclusion calendars and handler names are not names of a client.
pub fn own_request_in(
    client: ClientId,
    request: ScheduleRequest,
    exists: &dyn Fn(&str) -> bool,
) -> ScheduleRequest {
    use ScheduleRequest as R;
    let space = Space { client, exists };
    let s = |x| space.schedule(x);
    let t = |x| space.target(x);
    match request {
        R::Create(x) => R::Create(s(x)),
        R::Upsert(x) => R::Upsert(s(x)),
        R::Replace { target, schedule } => R::Replace {
            target: t(target),
            schedule: s(schedule),
        },
        R::Pause(x) => R::Pause(t(x)),
        R::Resume(x) => R::Resume(t(x)),
        R::Cancel(x) => R::Cancel(t(x)),
        R::IfVersion {
            target,
            version,
            change,
        } => R::IfVersion {
            target: t(target),
            version,
            change: match change {
                Guarded::Replace(x) => Guarded::Replace(s(x)),
                other => other,
            },
        },
        R::InstallZone(z) => R::InstallZone(z),
        R::UpsertIfVersion { schedule, version } => R::UpsertIfVersion {
            schedule: s(schedule),
            version,
        },
        R::Retarget {
            from_handler,
            to_handler,
        } => R::Retarget {
            from_handler,
            to_handler,
        },
        R::SetRunPolicy { target, policy } => R::SetRunPolicy {
            target: t(target),
            policy,
        },
        R::CreateWith { schedule, policy } => R::CreateWith {
            schedule: s(schedule),
            policy,
        },
        R::UpsertWith { schedule, policy } => R::UpsertWith {
            schedule: s(schedule),
            policy,
        },
        R::Redrive { target, occurrence } => R::Redrive {
            target: t(target),
            occurrence,
        },
        R::Discard { target, occurrence } => R::Discard {
            target: t(target),
            occurrence,
        },
        R::TriggerNow(x) => R::TriggerNow(t(x)),
        R::Backfill {
            target,
            from_ms,
            to_ms,
        } => R::Backfill {
            target: t(target),
            from_ms,
            to_ms,
        },
        R::CreateBounded {
            schedule,
            policy,
            bounds,
        } => R::CreateBounded {
            schedule: s(schedule),
            policy,
            bounds,
        },
        R::UpsertBounded {
            schedule,
            policy,
            bounds,
        } => R::UpsertBounded {
            schedule: s(schedule),
            policy,
            bounds,
        },
        R::SetBounds { target, bounds } => R::SetBounds {
            target: t(target),
            bounds,
        },
        R::CreateOverlap {
            schedule,
            policy,
            bounds,
            overlap,
        } => R::CreateOverlap {
            schedule: s(schedule),
            policy,
            bounds,
            overlap,
        },
        R::UpsertOverlap {
            schedule,
            policy,
            bounds,
            overlap,
        } => R::UpsertOverlap {
            schedule: s(schedule),
            policy,
            bounds,
            overlap,
        },
        R::SetOverlap { target, overlap } => R::SetOverlap {
            target: t(target),
            overlap,
        },
        // Calendars, like zones, are not names of a client.
        R::InstallCalendar(c) => R::InstallCalendar(c),
        R::SetCalendar { target, calendar } => R::SetCalendar {
            target: t(target),
            calendar,
        },
        R::CreateExcluding {
            schedule,
            policy,
            bounds,
            overlap,
            calendar,
        } => R::CreateExcluding {
            schedule: s(schedule),
            policy,
            bounds,
            overlap,
            calendar,
        },
        R::BackfillWith {
            target,
            from_ms,
            to_ms,
            overlap,
        } => R::BackfillWith {
            target: t(target),
            from_ms,
            to_ms,
            overlap,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orders::ScheduledLedger;

    /// The exclusion calendar requests that name a schedule (set, create) are moved into the
    /// client's namespace, so no client can name a calendar for another's schedule; the
    /// calendar's own name (shared data, like a zone's) is not moved.
    #[test]
    fn calendar_requests_are_moved_into_the_clients_namespace() {
        use ccron::schedule::{Bounds, Overlap, RunPolicy};
        let client = ClientId::from_index(7);
        let own = own_key(client, "o-1");
        let set = ScheduleRequest::SetCalendar {
            target: Target::Key("o-1".into()),
            calendar: Some("xmas".into()),
        };
        match own_request(client, set) {
            ScheduleRequest::SetCalendar { target, calendar } => {
                assert_eq!(target, Target::Key(own.clone()));
                assert_eq!(calendar.as_deref(), Some("xmas"));
            }
            other => panic!("moved into another request: {other:?}"),
        }
        let create = ScheduleRequest::CreateExcluding {
            schedule: ScheduledLedger::expiry("o-1", 1_000),
            policy: RunPolicy::default(),
            bounds: Bounds::NONE,
            overlap: Overlap::AllowAll,
            calendar: "xmas".into(),
        };
        match own_request(client, create) {
            ScheduleRequest::CreateExcluding {
                schedule, calendar, ..
            } => {
                assert_eq!(schedule.key.as_deref(), Some(own.as_str()));
                assert_eq!(calendar, "xmas");
            }
            other => panic!("moved into another request: {other:?}"),
        }
    }

    /// The overlap requests name a key (create, upsert) or a target (set): a client's are moved
    /// into its namespace like every other request's, so no client can set another's policy.
    #[test]
    fn overlap_requests_are_moved_into_the_clients_namespace() {
        use ccron::schedule::{Bounds, Overlap, RunPolicy};
        let client = ClientId::from_index(7);
        let own = own_key(client, "o-1");
        let schedule = || ScheduledLedger::expiry("o-1", 1_000);
        let create = ScheduleRequest::CreateOverlap {
            schedule: schedule(),
            policy: RunPolicy::default(),
            bounds: Bounds::default(),
            overlap: Overlap::Skip,
        };
        let upsert = ScheduleRequest::UpsertOverlap {
            schedule: schedule(),
            policy: RunPolicy::default(),
            bounds: Bounds::default(),
            overlap: Overlap::BufferOne,
        };
        for r in [create, upsert] {
            match own_request(client, r) {
                ScheduleRequest::CreateOverlap {
                    schedule, overlap, ..
                }
                | ScheduleRequest::UpsertOverlap {
                    schedule, overlap, ..
                } => {
                    assert_eq!(schedule.key.as_deref(), Some(own.as_str()));
                    assert!(
                        schedule
                            .payload
                            .starts_with(format!("{client}/").as_bytes())
                    );
                    assert_ne!(overlap, Overlap::AllowAll, "the policy is kept");
                }
                other => panic!("moved into another request: {other:?}"),
            }
        }
        let set = ScheduleRequest::SetOverlap {
            target: Target::Key("o-1".into()),
            overlap: Overlap::Skip,
        };
        match own_request(client, set) {
            ScheduleRequest::SetOverlap { target, overlap } => {
                assert_eq!(target, Target::Key(own.clone()));
                assert_eq!(overlap, Overlap::Skip);
            }
            other => panic!("moved into another request: {other:?}"),
        }
    }

    /// A backfill under its own overlap policy names a target: a client's is moved into its
    /// namespace, so no client can backfill another's schedule.
    #[test]
    fn backfill_with_is_moved_into_the_clients_namespace() {
        use ccron::schedule::Overlap;
        let client = ClientId::from_index(7);
        let own = own_key(client, "o-1");
        let req = ScheduleRequest::BackfillWith {
            target: Target::Key("o-1".into()),
            from_ms: 5,
            to_ms: 9,
            overlap: Overlap::BufferAll,
        };
        match own_request(client, req) {
            ScheduleRequest::BackfillWith {
                target,
                from_ms,
                to_ms,
                overlap,
            } => {
                assert_eq!(target, Target::Key(own));
                assert_eq!((from_ms, to_ms, overlap), (5, 9, Overlap::BufferAll));
            }
            other => panic!("moved into another request: {other:?}"),
        }
    }
}
