//! What must not drift between replicas, made visible.
//!
//! Every replica must compute exactly the same fire instants from the same cron expressions and
//! zones, and encode replicated state to exactly the same bytes. Three dependencies decide that:
//! the codec (bincode), the cron engine (croner, with chrono's calendar arithmetic) and the IANA
//! time-zone data (chrono-tz). Two safeguards keep them aligned:
//!
//! 1. **Pins.** The workspace pins bincode, croner and chrono-tz to exact versions, so every
//!    build from this repository's `Cargo.lock` resolves the same code. chrono is a caret
//!    requirement: it is the dependency a downstream ledger most often shares, so an exact pin
//!    would block its resolution, and the calendar arithmetic ccron uses from it is covered by
//!    the probe below.
//! 2. **A behaviour digest in the setup digest.** [`environment_digest`] hashes the IANA data
//!    version and the fire instants a fixed corpus of expressions and zones (DST gaps and
//!    overlaps, leap days, half-hour zones) produces on this build, plus the codec's bytes for a
//!    fixed value. [`crate::CronTableRegistry::setup_digest`] includes it, and hosts fold the
//!    setup digest into the state digest: two replicas built against drifting versions (a
//!    `[patch]`, an older lock file, a newer tz release) that would fire differently show
//!    different state digests from the first checkpoint on, instead of diverging silently
//!    months later at the first DST change.
//!
//! The probe is computed once per process (a cache of a constant; a few milliseconds).

use std::sync::OnceLock;

use crate::sha256::Sha256;

use crate::cron::{CronSchedule, ZoneRules};

/// The codec every replicated byte goes through (see [`crate::codec`]), as pinned.
pub const CODEC: &str = "bincode 2.0.1";

/// The IANA time-zone database release compiled into this build (e.g. `"2025b"`).
pub fn tz_data_version() -> &'static str {
    chrono_tz::IANA_TZDB_VERSION
}

/// Expressions of the probe corpus: every field kind, ranges, steps, lists, nicknames, a leap
/// day, times inside DST gaps and overlaps.
const PROBE_EXPRESSIONS: &[&str] = &[
    "*/7 * * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "30 1 * * 0",
    "0 0 29 2 *",
    "15,45 */3 1-10 * *",
    "@daily",
    "0 12 * * MON#2",
];

/// Zones of the probe corpus: no DST, northern and southern DST, a half-hour DST shift, a
/// quarter-hour offset.
const PROBE_ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
];

/// Start instants of the probe (ms since the Unix epoch, UTC): just before the 2026 EU spring
/// change, the 2026 US autumn change, a leap year and a far-future instant.
const PROBE_FROM_MS: &[i64] = &[
    1_774_742_400_000, // 2026-03-29T00:00:00Z
    1_793_509_200_000, // 2026-11-01T05:00:00Z
    946_684_800_000,   // 2000-01-01T00:00:00Z
    2_127_600_000_000, // 2037-06-03T00:00:00Z
];

/// Fire instants per (expression, zone, start) in the probe.
const PROBE_FIRES: usize = 3;

/// A digest of how this build encodes and schedules: the codec name, the IANA data version,
/// the probe corpus's fire instants (or parse/zone errors, which are just as deterministic)
/// and the codec's bytes for a fixed value. Equal on every correctly built replica.
pub fn environment_digest() -> [u8; 32] {
    static DIGEST: OnceLock<[u8; 32]> = OnceLock::new();
    *DIGEST.get_or_init(compute_environment_digest)
}

fn compute_environment_digest() -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"ccron-environment-v1");
    h.update(CODEC.as_bytes());
    h.update([0]);
    h.update(tz_data_version().as_bytes());
    h.update([0]);
    let probe_value: (u32, i64, String, Vec<u8>) = (7, -1, "probe".to_owned(), vec![1, 2, 3]);
    h.update(crate::codec::to_blob(&probe_value).unwrap_or_default());
    for zone_name in PROBE_ZONES {
        h.update(b"Z");
        h.update(zone_name.as_bytes());
        let zone = match ZoneRules::from_iana(zone_name) {
            Ok(zone) => zone,
            Err(e) => {
                h.update(b"!");
                h.update(e.to_string().as_bytes());
                continue;
            }
        };
        for expression in PROBE_EXPRESSIONS {
            h.update(b"X");
            h.update(expression.as_bytes());
            match CronSchedule::parse_in(expression, zone.clone()) {
                Ok(schedule) => {
                    for from in PROBE_FROM_MS {
                        for fire in schedule.preview(*from, PROBE_FIRES) {
                            h.update(fire.to_le_bytes());
                        }
                        h.update(b";");
                    }
                }
                Err(e) => {
                    h.update(b"!");
                    h.update(e.to_string().as_bytes());
                }
            }
        }
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_stable_within_a_process_and_names_the_tz_data() {
        assert_eq!(environment_digest(), environment_digest());
        assert_eq!(environment_digest(), compute_environment_digest());
        let v = tz_data_version();
        assert_eq!(v.len(), 5, "{v}");
        assert!(v[..4].chars().all(|c| c.is_ascii_digit()), "{v}");
    }

    #[test]
    fn the_probe_exercises_every_expression_and_zone() {
        // A corpus entry that fails to parse would hash its error and probe nothing: every
        // expression must parse in every zone and fire from every start instant.
        for zone_name in PROBE_ZONES {
            let zone = ZoneRules::from_iana(zone_name).unwrap();
            for expression in PROBE_EXPRESSIONS {
                let schedule = CronSchedule::parse_in(expression, zone.clone())
                    .unwrap_or_else(|e| panic!("{expression} in {zone_name}: {e}"));
                for from in PROBE_FROM_MS {
                    assert_eq!(
                        schedule.preview(*from, PROBE_FIRES).len(),
                        PROBE_FIRES,
                        "{expression} in {zone_name} from {from}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_probe_sees_a_dst_gap() {
        // 02:30 does not exist in Berlin on 2026-03-29; the probe's instants must depend on
        // the zone data, or the digest would not detect a tz release that moves a change.
        let berlin =
            CronSchedule::parse_in("30 2 * * *", ZoneRules::from_iana("Europe/Berlin").unwrap())
                .unwrap();
        let utc = CronSchedule::parse("30 2 * * *").unwrap();
        assert_ne!(
            berlin.preview(PROBE_FROM_MS[0], 3),
            utc.preview(PROBE_FROM_MS[0], 3)
        );
    }
}
