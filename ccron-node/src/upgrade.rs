//! The node's side of a planned upgrade (`ccron::schedule::upgrade`): what a process does when
//! its ledger stops at an `UpgradePlan`, so that a supervisor (the localnet's, `cosmovisor`, or
//! an operator by hand) can restart it on the right build from the same storage
//! (`docs/malachite.md`, "Upgrading a live cluster").
//!
//! - The ledger stops at the plan's batch, before that batch changes anything
//!   ([`UpgradeHalt`]); the block is already in the node's block store.
//! - On [`UpgradeHalt::Needed`] the node rebuilds its state at the height below the plan's
//!   (newest snapshot + the blocks above it, on this build, which is correct up to there) and
//!   writes a snapshot of it, so that the next build starts exactly where this one must stop:
//!   the new build never re-executes a block of the old one, and the old build never executes
//!   the plan's batch. It then writes [`UpgradeInfo`] to `node-I/upgrade-info.json` (cosmovisor's
//!   file name) and the process exits with [`EXIT_UPGRADE_NEEDED`].
//! - A build whose setup digest differs from the genesis' is accepted only in a node directory
//!   holding `upgrade-info.json` (the node stopped for a named upgrade): the new build's own
//!   gate then refuses to run anywhere but at the plan ([`UpgradeHalt::Early`], exit
//!   [`EXIT_UPGRADE_EARLY`]), and an old build restarted on upgraded state stops
//!   ([`UpgradeHalt::Unknown`], exit [`EXIT_UPGRADE_UNKNOWN`]).
//!
//! Exit codes of the `node` subcommand: 0 a clean stop, 1 an error (a failed migration
//! included: there is no safe build to switch to), 2 bad arguments or I/O, 70 a
//! non-deterministic ledger factory, and the three below.

use std::path::{Path, PathBuf};

use ccron::host::{AppError, HostError};
use ccron::schedule::UpgradeHalt;
use serde::{Deserialize, Serialize};

use crate::core::{NodeError, node_dir};

/// Exit code of a node whose build does not carry the migration of a reached plan: restart it
/// on the build that does, from the same directory.
pub const EXIT_UPGRADE_NEEDED: u8 = 10;

/// Exit code of a node whose build carries a plan's migration but runs before the plan:
/// restart it on the previous build (never on this one again until the plan is reached).
pub const EXIT_UPGRADE_EARLY: u8 = 11;

/// Exit code of a node whose build does not know an upgrade its state went through (an old
/// build restarted on upgraded state): restart it on the newer build.
pub const EXIT_UPGRADE_UNKNOWN: u8 = 12;

/// The file a node writes when it stops for an upgrade, in its node directory.
pub const UPGRADE_INFO_FILE: &str = "upgrade-info.json";

/// What a node that stopped for an upgrade records (`node-I/upgrade-info.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeInfo {
    /// The plan's name (the migration the next build must carry).
    pub name: String,
    /// The height whose execution stopped (the plan's batch): the next build executes it.
    pub height: u64,
    /// The height of the snapshot written for the next build (`height - 1`; `None` at height 1:
    /// the next build starts from genesis).
    pub snapshot_height: Option<u64>,
    /// The stopped build's setup digest (hex), if the ledger has one.
    pub from_setup_digest: Option<String>,
}

/// Where node `index` of `home` keeps its [`UpgradeInfo`].
pub fn upgrade_info_path(home: &Path, index: usize) -> PathBuf {
    node_dir(home, index).join(UPGRADE_INFO_FILE)
}

/// The [`UpgradeInfo`] node `index` recorded, if any (a file that does not parse is an error).
///
/// # Errors
/// The file exists but does not read or parse.
pub fn read_upgrade_info(home: &Path, index: usize) -> Result<Option<UpgradeInfo>, String> {
    let path = upgrade_info_path(home, index);
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() <= 64 * 1024 => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Ok(bytes) => Err(format!(
            "{}: {} bytes, at most 65536",
            path.display(),
            bytes.len()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `info` crash-atomically (temporary file, fsync, rename).
///
/// # Errors
/// I/O errors.
pub fn write_upgrade_info(home: &Path, index: usize, info: &UpgradeInfo) -> std::io::Result<()> {
    let path = upgrade_info_path(home, index);
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(info).map_err(std::io::Error::other)?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The upgrade stop an application error is, if it is one: the ledger reports an
/// [`UpgradeHalt`] as the typed [`AppError::Upgrade`]; any other error (a
/// [`AppError::Fatal`] whose text reads like a halt included) is not one.
pub fn halt_of_app_error(e: &AppError) -> Option<UpgradeHalt> {
    e.upgrade_halt().cloned()
}

/// The upgrade stop a host error is, if it is one (a halted application).
pub fn halt_of_host_error(e: &HostError) -> Option<UpgradeHalt> {
    match e {
        HostError::Halted(app) => halt_of_app_error(app),
        _ => None,
    }
}

/// The exit code of a node stopped by `e` (see the module documentation).
pub fn exit_code_of(e: &NodeError) -> u8 {
    match e {
        NodeError::Upgrade { halt, .. } => match halt {
            UpgradeHalt::Needed(_) => EXIT_UPGRADE_NEEDED,
            UpgradeHalt::Early(_) => EXIT_UPGRADE_EARLY,
            UpgradeHalt::Unknown(_) => EXIT_UPGRADE_UNKNOWN,
            _ => 1,
        },
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_upgrade_error_is_its_halt() {
        for name in ["v2", "a\"b", "x\\y", "upgrade-7"] {
            for halt in [
                UpgradeHalt::Needed(name.into()),
                UpgradeHalt::Early(name.into()),
                UpgradeHalt::Unknown(name.into()),
                UpgradeHalt::Failed(name.into()),
            ] {
                let e = AppError::Upgrade(halt.clone());
                assert_eq!(halt_of_app_error(&e), Some(halt.clone()), "{e}");
                let host = HostError::Halted(e);
                assert_eq!(halt_of_host_error(&host), Some(halt.clone()));
                // The text alone is not a halt: only the typed error is.
                assert_eq!(halt_of_app_error(&AppError::Fatal(halt.to_string())), None);
            }
        }
    }

    #[test]
    fn other_fatal_errors_are_not_upgrades() {
        for text in [
            "page write failed",
            "upgrade \"v2\" needed: this build does not carry it!",
            "upgrade v2 needed: this build does not carry it",
            "",
        ] {
            assert_eq!(halt_of_app_error(&AppError::Fatal(text.into())), None);
        }
        assert_eq!(
            halt_of_app_error(&AppError::BadSnapshot(
                UpgradeHalt::Needed("v2".into()).to_string()
            )),
            None
        );
    }

    #[test]
    fn exit_codes_are_distinct_per_halt() {
        let code = |halt| {
            exit_code_of(&NodeError::Upgrade {
                halt,
                height: 7,
                saved: None,
            })
        };
        assert_eq!(code(UpgradeHalt::Needed("v2".into())), EXIT_UPGRADE_NEEDED);
        assert_eq!(code(UpgradeHalt::Early("v2".into())), EXIT_UPGRADE_EARLY);
        assert_eq!(
            code(UpgradeHalt::Unknown("v2".into())),
            EXIT_UPGRADE_UNKNOWN
        );
        assert_eq!(code(UpgradeHalt::Failed("v2".into())), 1);
        assert_eq!(exit_code_of(&NodeError::Config("x".into())), 1);
    }

    #[test]
    fn upgrade_info_writes_and_reads_back() {
        let home = std::env::temp_dir().join(format!("ccron-upgrade-info-{}", std::process::id()));
        std::fs::create_dir_all(node_dir(&home, 2)).unwrap();
        assert_eq!(read_upgrade_info(&home, 2), Ok(None));
        let info = UpgradeInfo {
            name: "v2".into(),
            height: 40,
            snapshot_height: Some(39),
            from_setup_digest: Some("ab".into()),
        };
        write_upgrade_info(&home, 2, &info).unwrap();
        assert_eq!(read_upgrade_info(&home, 2), Ok(Some(info)));
        std::fs::write(upgrade_info_path(&home, 2), b"{").unwrap();
        assert!(read_upgrade_info(&home, 2).is_err());
        std::fs::remove_dir_all(&home).unwrap();
    }
}
