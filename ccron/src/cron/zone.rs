//! Time-zone rules as plain data, so every replica resolves local times identically.
//!
//! A replica must never ask its host which offset a zone has: two binaries built with different tz
//! databases would compute different fire instants and diverge. Instead a [`ZoneRules`] value is
//! built once (at admission, from the tz database compiled into *that* binary through chrono-tz),
//! stored in replicated state with the schedule, and from then on every replica resolves local
//! times from the stored transitions only.
//!
//! Representation: an offset before the first transition, then a sorted list of
//! `(UTC instant, offset)` transitions covering 1900 to 2200; after the last transition its offset
//! applies forever. chrono-tz is only read by [`ZoneRules::from_iana`].

use chrono::TimeZone as _;
use serde::{Deserialize, Serialize};

use super::CronError;

/// Most transitions a stored [`ZoneRules`] may hold (decoder bound). Real zones over 1900–2200
/// have at most ~700.
pub const MAX_TRANSITIONS: usize = 4_096;

/// Longest zone name accepted (decoder bound); IANA names are at most ~32 bytes.
pub const MAX_ZONE_NAME_LEN: usize = 64;

/// Largest absolute UTC offset accepted, in seconds (just under a day, chrono's own bound).
pub const MAX_OFFSET_S: i32 = 86_399;

/// First instant whose offset is taken from the tz database: 1900-01-01T00:00:00Z. Earlier
/// instants get this instant's offset.
pub const RULES_START_S: i64 = -2_208_988_800;

/// End of the tz-database scan: 2200-01-01T00:00:00Z. Later instants keep the last offset.
pub const RULES_HORIZON_S: i64 = 7_258_118_400;

const DAY_S: i64 = 86_400;

/// One change of UTC offset.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
pub struct ZoneTransition {
    /// The UTC instant (seconds since the Unix epoch) from which `offset_s` applies.
    pub at_utc_s: i64,
    /// The offset (local minus UTC, seconds) from that instant on.
    pub offset_s: i32,
}

/// The unchecked wire shape of [`ZoneRules`]; every decode path goes through
/// [`ZoneRules::from_parts`], which validates it.
#[derive(Serialize, Deserialize, bincode::Encode, bincode::Decode)]
struct ZoneRulesData {
    name: String,
    initial_offset_s: i32,
    transitions: Vec<ZoneTransition>,
}

/// How a local (wall clock) time maps to UTC in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalResolution {
    /// The wall clock time happens once; the offset in force then.
    Single(i32),
    /// The wall clock time happens twice (clocks went back): the offsets of the earlier and the
    /// later instant.
    Ambiguous(i32, i32),
    /// The wall clock time never happens (clocks went forward).
    Gap,
}

/// Time-zone rules as data: storable in replicated state (serde and bincode), validated on every
/// decode, and the only source of offsets ccron's cron evaluation uses.
///
/// Equality compares the name and every transition, so two replicas holding equal rules compute
/// equal instants.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ZoneRulesData", into = "ZoneRulesData")]
pub struct ZoneRules {
    name: String,
    initial_offset_s: i32,
    transitions: Vec<ZoneTransition>,
}

impl ZoneRules {
    /// UTC: no transitions, offset zero.
    pub fn utc() -> Self {
        Self {
            name: "UTC".to_owned(),
            initial_offset_s: 0,
            transitions: Vec::new(),
        }
    }

    /// Builds the rules of IANA zone `name` (e.g. `"Europe/Paris"`) from the tz database compiled
    /// into this binary (chrono-tz), sampling 1900–2200 daily and bisecting every change to the
    /// second. Done once, at admission; store the result rather than rebuilding it on replicas.
    ///
    /// Limitation: two changes less than a day apart that cancel out are not seen (no such
    /// pair exists in the tz database for the period covered).
    ///
    /// # Errors
    /// [`CronError::UnknownZone`] if the name is not in the database.
    pub fn from_iana(name: &str) -> Result<Self, CronError> {
        if name.len() > MAX_ZONE_NAME_LEN {
            return Err(CronError::UnknownZone {
                zone: name.chars().take(MAX_ZONE_NAME_LEN).collect(),
            });
        }
        let tz: chrono_tz::Tz = name.parse().map_err(|_| CronError::UnknownZone {
            zone: name.to_owned(),
        })?;
        let offset_at = |utc_s: i64| -> i32 {
            match chrono::DateTime::from_timestamp(utc_s, 0) {
                Some(dt) => {
                    use chrono::Offset as _;
                    tz.offset_from_utc_datetime(&dt.naive_utc())
                        .fix()
                        .local_minus_utc()
                }
                // Unreachable for the scanned range; a zero offset keeps this total.
                None => 0,
            }
        };
        let initial_offset_s = offset_at(RULES_START_S);
        let mut transitions = Vec::new();
        let mut lo_offset_s = initial_offset_s;
        let mut day_start_s = RULES_START_S;
        while day_start_s < RULES_HORIZON_S {
            let day_end_s = (day_start_s + DAY_S).min(RULES_HORIZON_S);
            let mut lo_s = day_start_s;
            // Each pass finds one change in (lo_s, day_end_s]; lo_s strictly increases, so the
            // loop ends within a day's worth of seconds at worst (in practice one or two passes).
            while offset_at(day_end_s) != lo_offset_s {
                let mut hi_s = day_end_s;
                while hi_s - lo_s > 1 {
                    let mid_s = lo_s + (hi_s - lo_s) / 2;
                    if offset_at(mid_s) == lo_offset_s {
                        lo_s = mid_s;
                    } else {
                        hi_s = mid_s;
                    }
                }
                lo_offset_s = offset_at(hi_s);
                transitions.push(ZoneTransition {
                    at_utc_s: hi_s,
                    offset_s: lo_offset_s,
                });
                lo_s = hi_s;
            }
            day_start_s = day_end_s;
        }
        Self::from_parts(tz.name().to_owned(), initial_offset_s, transitions)
    }

    /// A single fixed offset (e.g. `+05:30` as 19 800 s), named `name`.
    ///
    /// # Errors
    /// [`CronError::InvalidZoneRules`] if the offset is out of range or the name too long.
    pub fn fixed(name: &str, offset_s: i32) -> Result<Self, CronError> {
        Self::from_parts(name.to_owned(), offset_s, Vec::new())
    }

    /// Builds rules from their parts, validating them: name length, transition count, offsets in
    /// range, transitions strictly increasing.
    ///
    /// # Errors
    /// [`CronError::InvalidZoneRules`] naming the first violated constraint.
    pub fn from_parts(
        name: String,
        initial_offset_s: i32,
        transitions: Vec<ZoneTransition>,
    ) -> Result<Self, CronError> {
        let invalid = |reason: String| Err(CronError::InvalidZoneRules { reason });
        if name.len() > MAX_ZONE_NAME_LEN {
            return invalid(format!("zone name longer than {MAX_ZONE_NAME_LEN} bytes"));
        }
        if transitions.len() > MAX_TRANSITIONS {
            return invalid(format!(
                "{} transitions, more than {MAX_TRANSITIONS}",
                transitions.len()
            ));
        }
        let offsets =
            std::iter::once(initial_offset_s).chain(transitions.iter().map(|t| t.offset_s));
        if let Some(bad) = offsets
            .into_iter()
            .find(|o| o.unsigned_abs() > MAX_OFFSET_S.unsigned_abs())
        {
            return invalid(format!("offset {bad} s out of range"));
        }
        if let Some(w) = transitions
            .windows(2)
            .find(|w| w[0].at_utc_s >= w[1].at_utc_s)
        {
            return invalid(format!(
                "transitions not strictly increasing at {} s",
                w[1].at_utc_s
            ));
        }
        Ok(Self {
            name,
            initial_offset_s,
            transitions,
        })
    }

    /// The zone's name (the IANA name for rules built by [`ZoneRules::from_iana`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The offset before the first transition, in seconds.
    pub fn initial_offset_s(&self) -> i32 {
        self.initial_offset_s
    }

    /// The transitions, sorted by instant.
    pub fn transitions(&self) -> &[ZoneTransition] {
        &self.transitions
    }

    /// Whether this is a zero offset without transitions.
    pub fn is_utc(&self) -> bool {
        self.initial_offset_s == 0 && self.transitions.is_empty()
    }

    /// The offset (local minus UTC, seconds) in force at UTC instant `utc_s`.
    pub fn offset_at(&self, utc_s: i64) -> i32 {
        let idx = self.transitions.partition_point(|t| t.at_utc_s <= utc_s);
        self.period_offset(idx)
    }

    /// Resolves local time `local_s` (seconds since 1970-01-01T00:00 on the wall clock) to the
    /// offset(s) under which it happens.
    pub fn resolve_local(&self, local_s: i64) -> LocalResolution {
        // Offsets are within a day, so only periods overlapping [local - 1 day, local + 1 day] can
        // contain local - offset.
        let first = self
            .transitions
            .partition_point(|t| t.at_utc_s <= local_s.saturating_sub(DAY_S));
        let last = self
            .transitions
            .partition_point(|t| t.at_utc_s <= local_s.saturating_add(DAY_S));
        let mut earliest: Option<i32> = None;
        let mut latest: Option<i32> = None;
        for period in first..=last {
            let offset_s = self.period_offset(period);
            let utc_s = local_s.saturating_sub(i64::from(offset_s));
            let starts_ok = period == 0
                || self
                    .transitions
                    .get(period - 1)
                    .is_some_and(|t| t.at_utc_s <= utc_s);
            let ends_ok = self
                .transitions
                .get(period)
                .is_none_or(|t| utc_s < t.at_utc_s);
            if starts_ok && ends_ok {
                if earliest.is_none() {
                    earliest = Some(offset_s);
                }
                latest = Some(offset_s);
            }
        }
        match (earliest, latest) {
            (Some(e), Some(l)) if e == l => LocalResolution::Single(e),
            // Equal offsets in two periods mean one instant (a no-op transition): Single above.
            // Different offsets: two instants, the earlier period's first.
            (Some(e), Some(l)) => LocalResolution::Ambiguous(e, l),
            _ => LocalResolution::Gap,
        }
    }

    fn period_offset(&self, period: usize) -> i32 {
        match period.checked_sub(1) {
            None => self.initial_offset_s,
            Some(i) => self
                .transitions
                .get(i)
                .map_or(self.initial_offset_s, |t| t.offset_s),
        }
    }
}

impl TryFrom<ZoneRulesData> for ZoneRules {
    type Error = CronError;

    fn try_from(data: ZoneRulesData) -> Result<Self, Self::Error> {
        Self::from_parts(data.name, data.initial_offset_s, data.transitions)
    }
}

impl From<ZoneRules> for ZoneRulesData {
    fn from(rules: ZoneRules) -> Self {
        Self {
            name: rules.name,
            initial_offset_s: rules.initial_offset_s,
            transitions: rules.transitions,
        }
    }
}

validated_codec!(
    ZoneRules,
    ZoneRulesData {
        name,
        initial_offset_s,
        transitions
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_resolves_everything_once() {
        let z = ZoneRules::utc();
        assert_eq!(z.offset_at(0), 0);
        assert_eq!(z.resolve_local(123), LocalResolution::Single(0));
    }

    #[test]
    fn gap_and_overlap_around_synthetic_transitions() {
        // +1h until t=10_000, then +2h (gap of one hour), then back to +1h at t=20_000.
        let z = ZoneRules::from_parts(
            "X".into(),
            3_600,
            vec![
                ZoneTransition {
                    at_utc_s: 10_000,
                    offset_s: 7_200,
                },
                ZoneTransition {
                    at_utc_s: 20_000,
                    offset_s: 3_600,
                },
            ],
        )
        .unwrap();
        assert_eq!(z.resolve_local(13_599), LocalResolution::Single(3_600));
        assert_eq!(z.resolve_local(13_600), LocalResolution::Gap);
        assert_eq!(z.resolve_local(17_199), LocalResolution::Gap);
        assert_eq!(z.resolve_local(17_200), LocalResolution::Single(7_200));
        assert_eq!(z.resolve_local(23_599), LocalResolution::Single(7_200));
        assert_eq!(
            z.resolve_local(23_600),
            LocalResolution::Ambiguous(7_200, 3_600)
        );
        assert_eq!(
            z.resolve_local(27_199),
            LocalResolution::Ambiguous(7_200, 3_600)
        );
        assert_eq!(z.resolve_local(27_200), LocalResolution::Single(3_600));
    }
}
