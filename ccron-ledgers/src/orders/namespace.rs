//! Client namespaces of the orders ledger ([`super::KeySpace::PerClient`]): every key, target
//! and payload a client's schedule request names, moved under its authenticated client id.

use ccron::host::ClientId;
use ccron::schedule::{Guarded, NewSchedule, ScheduleRequest, Target};

/// `key` in `client`'s namespace: `<client>/<key>`.
pub fn own_key(client: ClientId, key: &str) -> String {
    format!("{client}/{key}")
}

/// `payload` in `client`'s namespace: `<client>/` then the bytes.
fn own_payload(client: ClientId, payload: &[u8]) -> Vec<u8> {
    let mut p = format!("{client}/").into_bytes();
    p.extend_from_slice(payload);
    p
}

pub(super) fn own_schedule(client: ClientId, mut s: NewSchedule) -> NewSchedule {
    s.key = s.key.map(|k| own_key(client, &k));
    s.payload = own_payload(client, &s.payload);
    s
}

fn own_target(client: ClientId, t: Target) -> Target {
    match t {
        Target::Key(k) => Target::Key(own_key(client, &k)),
        Target::Id(id) => Target::Id(id),
    }
}

/// `request` with every key and schedule payload it names moved into `client`'s namespace
/// ([`own_key`]): what a [`KeySpace::PerClient`](super::KeySpace::PerClient) ledger applies for a client's request.
/// Ids, zones and handler names are not names of a client.
pub fn own_request(client: ClientId, request: ScheduleRequest) -> ScheduleRequest {
    use ScheduleRequest as R;
    let s = |x| own_schedule(client, x);
    let t = |x| own_target(client, x);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orders::ScheduledLedger;

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
}
