//! Admission: validating requests against the limits and registered handlers, and applying
//! them (create, upsert, replace, pause, resume, cancel, zone installation); the calendar
//! requests are admitted in `calendars.rs`, operator runs in `manual.rs`.
//!
//! Split by concern: this file holds the checks (instants, spans, misfire, routing strings,
//! authorization, `admit`, the stored-size bounds); `apply.rs` the entry point
//! (`Scheduler::apply`) and its dispatch over every request kind; `lifecycle.rs` creating,
//! upserting, replacing and removing records; `zones.rs` zone installs; `retarget.rs`
//! re-targeting parked schedules; `tests.rs` the size constants checked against the codec.

use super::{
    HISTORY_RUNS, MAX_DEAD_RUNS, MAX_FIRE_EACH_CAP, MAX_INSTANT_MS, MAX_PERIOD_MS, MIN_INSTANT_MS,
    Misfire, NewSchedule, ONE_SHOT_HISTORY_RUNS, ScheduleError, Scheduler, Target, Timing,
};

use super::def::Stored;
use crate::authz::{Action, Principal};
use crate::codec;
use crate::cron::{CronSchedule, ZoneRules};
use crate::due::Due;
use crate::schedule::store;
use crate::tick::TimeMs;

/// Encoded bytes of a record's run state besides its dead runs and history, at its largest:
/// the parked flag (1), the run policy (25), a pending retry (37), the dead runs' length prefix
/// (8), the evicted count (8) and the history's length prefix (8) (checked against the codec in
/// the tests).
pub(super) const RUN_STATE_BYTES: usize = 1 + 25 + 37 + 8 + 8 + 8;

/// Encoded bytes of one history entry at its largest.
pub(super) const RUN_ENTRY_BYTES: usize = 58;

/// Encoded bytes of one dead run at its largest.
pub(super) const DEAD_RUN_BYTES: usize = 49;

fn target_of(id: u64) -> Target {
    Target::Id(id)
}

/// `Ok` when `t` is an instant a request may carry (`[MIN_INSTANT_MS, MAX_INSTANT_MS)`).
fn check_instant(what: &str, t: TimeMs) -> Result<(), ScheduleError> {
    if (MIN_INSTANT_MS..MAX_INSTANT_MS).contains(&t) {
        Ok(())
    } else {
        Err(ScheduleError::Invalid(format!(
            "{what} {t} ms is outside [{MIN_INSTANT_MS}, {MAX_INSTANT_MS}) ms"
        )))
    }
}

/// `Ok` when `d` is a span a request may carry (`[min, MAX_PERIOD_MS]`).
fn check_span(what: &str, d: i64, min: i64) -> Result<(), ScheduleError> {
    if (min..=MAX_PERIOD_MS).contains(&d) {
        Ok(())
    } else {
        Err(ScheduleError::Invalid(format!(
            "{what} {d} ms is outside [{min}, {MAX_PERIOD_MS}] ms"
        )))
    }
}

/// `Ok` when `misfire`'s parameters are in range: a fire-each cap in `1..=MAX_FIRE_EACH_CAP`,
/// an expiry deadline in `[0, MAX_PERIOD_MS]` (the book's schedules and cron table entries,
/// [`crate::schedule::CronRule::with_misfire`], share the check).
pub(crate) fn check_misfire(misfire: Misfire) -> Result<(), ScheduleError> {
    match misfire {
        Misfire::FireEach { cap } if cap == 0 || cap > MAX_FIRE_EACH_CAP => {
            Err(ScheduleError::Invalid(format!(
                "fire-each cap must be in 1..={MAX_FIRE_EACH_CAP}, got {cap}"
            )))
        }
        Misfire::ExpireAfter { deadline_ms } => check_span("expiry deadline", deadline_ms, 0),
        _ => Ok(()),
    }
}

/// `Ok` when `value` is a routing string a schedule may carry (topic or type): 1 to `max`
/// bytes of printable ASCII without spaces, so that it is safe in a header, a path or a log.
fn check_route(what: &str, value: Option<&str>, max: usize) -> Result<(), ScheduleError> {
    let Some(v) = value else { return Ok(()) };
    if v.len() > max {
        return Err(ScheduleError::Limit(format!(
            "{what} of {} bytes, at most {max}",
            v.len()
        )));
    }
    if v.is_empty() || !v.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
        return Err(ScheduleError::Invalid(format!(
            "{what} must be 1 to {max} bytes of printable ASCII without spaces"
        )));
    }
    Ok(())
}

impl Scheduler {
    pub(super) fn resolve(&self, target: &Target) -> Result<u64, ScheduleError> {
        let id = match target {
            Target::Id(id) => Some(*id).filter(|id| self.records.contains_key(id)),
            Target::Key(k) => self.keys.get(k).copied(),
        };
        id.ok_or_else(|| ScheduleError::UnknownSchedule(target.clone()))
    }

    /// Whether the policy lets `by` do `action` to schedule `id` (its owner or an admin), or
    /// create one (`id` = `None`); a typed error otherwise.
    pub(super) fn authorize(
        &self,
        by: &Principal,
        action: Action,
        id: Option<u64>,
    ) -> Result<(), ScheduleError> {
        let allowed = match (action, id) {
            (Action::InstallZone, _) => self.policy.may_install_zone(by),
            (_, None) => self.policy.may_create(by),
            (_, Some(id)) => self
                .records
                .get(&id)
                .is_some_and(|r| self.policy.may_mutate(by, &r.owner)),
        };
        if allowed {
            Ok(())
        } else {
            Err(ScheduleError::Unauthorized { by: *by, action })
        }
    }

    /// Validates `def` and computes its stored form and first due point.
    pub(super) fn admit(
        &self,
        def: &NewSchedule,
        handlers_ok: impl Fn(&str) -> bool,
        seq: u64,
        now_ms: Option<TimeMs>,
    ) -> Result<(NewSchedule, Option<Due>, Option<CronSchedule>), ScheduleError> {
        let max = self.limits.max_name_bytes;
        if def.handler.len() > max || def.key.as_ref().is_some_and(|k| k.len() > max) {
            return Err(ScheduleError::Limit(format!(
                "names are at most {max} bytes"
            )));
        }
        if def.payload.len() > self.limits.max_payload_bytes {
            return Err(ScheduleError::Limit(format!(
                "payload of {} bytes, at most {}",
                def.payload.len(),
                self.limits.max_payload_bytes
            )));
        }
        if !handlers_ok(&def.handler) {
            return Err(ScheduleError::UnknownHandler(def.handler.clone()));
        }
        let max_route = self.limits.max_topic_bytes;
        check_route("topic", def.topic.as_deref(), max_route)?;
        check_route("type", def.kind.as_deref(), max_route)?;
        check_misfire(def.misfire)?;
        let mut stored = def.clone();
        let (next, cron) = match &def.timing {
            Timing::Cron { expression, zone } => {
                let rules = match zone {
                    None => ZoneRules::utc(),
                    Some(name) => self
                        .zones
                        .get(name)
                        .cloned()
                        .ok_or_else(|| ScheduleError::UnknownZone(name.clone()))?,
                };
                let cron = CronSchedule::parse_in(expression, rules)?;
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                (cron.next_after(now).map(Due::Time), Some(cron))
            }
            Timing::Every {
                period_ms,
                start_ms,
            } => {
                check_span("period", *period_ms, 1)?;
                let start = match start_ms {
                    Some(s) => *s,
                    None => now_ms.ok_or(ScheduleError::NeedsTime)?,
                };
                // Also a defaulted start (the agreed time): a stored start outside the range
                // would not load back.
                check_instant("start", start)?;
                stored.timing = Timing::Every {
                    period_ms: *period_ms,
                    start_ms: Some(start),
                };
                (Some(Due::Time(start)), None)
            }
            Timing::At(due) => {
                if let Due::Time(t) = due {
                    check_instant("instant", *t)?;
                }
                (Some(*due), None)
            }
            Timing::AfterMs(delay_ms) => {
                check_span("delay", *delay_ms, 0)?;
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                let t = now.saturating_add(*delay_ms);
                check_instant("instant", t)?;
                let due = Due::Time(t);
                stored.timing = Timing::At(due);
                (Some(due), None)
            }
            Timing::AfterSeqs(delay) => {
                let due = Due::Seq(seq.saturating_add(*delay));
                stored.timing = Timing::At(due);
                (Some(due), None)
            }
            Timing::AtOrSeq { at_ms, .. } => {
                check_instant("instant", *at_ms)?;
                // Indexed under both triggers (`key_of`); `next` holds the time one.
                (Some(Due::Time(*at_ms)), None)
            }
            Timing::AfterMsOrSeqs {
                delay_ms,
                delay_seqs,
            } => {
                check_span("delay", *delay_ms, 0)?;
                let now = now_ms.ok_or(ScheduleError::NeedsTime)?;
                let at_ms = now.checked_add(*delay_ms).ok_or_else(|| {
                    ScheduleError::Invalid(format!("{now} + {delay_ms} ms overflows"))
                })?;
                check_instant("instant", at_ms)?;
                let seq = seq.checked_add(*delay_seqs).ok_or_else(|| {
                    ScheduleError::Invalid(format!(
                        "sequence {seq} + {delay_seqs} is past the sequence numbers"
                    ))
                })?;
                stored.timing = Timing::AtOrSeq { at_ms, seq };
                (Some(Due::Time(at_ms)), None)
            }
        };
        // The stored record must fit one record page (no overflow chains).
        let entry = Self::entry_bound(&stored)?;
        let room = store::record_room(self.limits.page_bytes);
        if entry > room {
            return Err(ScheduleError::Limit(format!(
                "the stored schedule takes {entry} bytes, a page of {} bytes holds at most {room}",
                self.limits.page_bytes
            )));
        }
        Ok((stored, next, cron))
    }

    /// The most bytes the stored `(id, record)` entry of `def` can take: measured with a next
    /// due point and owed runs, the largest forms its fixed-size fields take (`Record`'s fields
    /// in order), plus the run state at its largest ([`RUN_STATE_BYTES`]: a retry pending and
    /// every dead run the record may keep).
    pub(super) fn entry_bound(def: &impl Stored) -> Result<usize, ScheduleError> {
        let owed: Option<(TimeMs, TimeMs)> = Some((0, 0));
        let core = codec::encoded_len(&(
            0u64,
            def,
            false,
            Some(Due::Seq(0)),
            0u64,
            owed,
            Principal::Client(crate::authz::ClientId::MAX),
            0u64,
        ))?;
        let one_shot = def.timing().is_one_shot();
        let (dead, history) = if one_shot {
            (1, ONE_SHOT_HISTORY_RUNS)
        } else {
            (MAX_DEAD_RUNS, HISTORY_RUNS)
        };
        Ok(core
            .saturating_add(RUN_STATE_BYTES)
            .saturating_add(super::counters::COUNTER_BYTES)
            .saturating_add(super::manual::MANUAL_BYTES)
            .saturating_add(super::bounds::stored_bytes(one_shot))
            .saturating_add(super::overlap::stored_bytes(one_shot))
            // Layout 11: the exclusion calendar's name (one tag for a one-shot; reserved for
            // every recurring schedule from layout 12, periodic ones included).
            .saturating_add(if one_shot {
                1
            } else {
                super::calendars::CALENDAR_REF_BYTES
            })
            // Layout 12: the backfills' overlap policy and awaited run (recurring only).
            .saturating_add(super::manual::backfill_overlap_bytes(one_shot))
            .saturating_add(dead * DEAD_RUN_BYTES)
            .saturating_add(history * RUN_ENTRY_BYTES))
    }
}

mod apply;
mod lifecycle;
mod retarget;
#[cfg(test)]
mod tests;
mod zones;
