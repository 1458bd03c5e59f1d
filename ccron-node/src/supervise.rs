//! The localnet's supervisor: what `cosmovisor` does for a Cosmos node, for the localnet's
//! processes (`localnet --upgrade-binary PATH`, `docs/malachite.md`, "Upgrading a live
//! cluster").
//!
//! A node that exits with [`EXIT_UPGRADE_NEEDED`] (its build stopped at a reached plan it does
//! not carry, after saving the snapshot below it: [`crate::upgrade`]) is restarted on the
//! upgrade binary from the same directory; one that exits with [`EXIT_UPGRADE_UNKNOWN`] (an
//! old build on upgraded state) too. One that exits with [`EXIT_UPGRADE_EARLY`] (the new build
//! before the plan) is restarted on the previous binary. Anything else is not restarted (the
//! localnet reports the exit).
//!
//! The supervisor never loops: each node gets at most [`MAX_SUPERVISED_RESTARTS`] restarts, a
//! halt the binary it would switch to cannot cure (the new build stopping with `Needed` again,
//! the old one with `Early`) is not retried, and each refusal is a typed [`SuperviseError`] in
//! the report. The policy is a pure function of the exit codes seen ([`Supervisor::on_exit`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::upgrade::{EXIT_UPGRADE_EARLY, EXIT_UPGRADE_NEEDED, EXIT_UPGRADE_UNKNOWN};

/// Most restarts the supervisor gives one node (a well-behaved upgrade takes one).
pub const MAX_SUPERVISED_RESTARTS: u32 = 3;

/// Why the supervisor restarted a node (a key of the report's `restarts_by_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RestartReason {
    /// Exit [`EXIT_UPGRADE_NEEDED`]: restarted on the upgrade binary.
    UpgradeNeeded,
    /// Exit [`EXIT_UPGRADE_EARLY`]: restarted on the previous binary.
    UpgradeEarly,
    /// Exit [`EXIT_UPGRADE_UNKNOWN`]: restarted on the upgrade binary.
    UpgradeUnknown,
}

impl RestartReason {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::UpgradeNeeded => "upgrade_needed",
            Self::UpgradeEarly => "upgrade_early",
            Self::UpgradeUnknown => "upgrade_unknown",
        }
    }
}

/// Why the supervisor left a node down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SuperviseError {
    /// The node stopped for an upgrade and no upgrade binary was given.
    #[error("node {node} stopped for an upgrade (exit {code}) and there is no upgrade binary")]
    NoUpgradeBinary {
        /// The node.
        node: usize,
        /// Its exit code.
        code: i32,
    },
    /// The binary the node would be switched to is the one that just stopped it that way
    /// (e.g. the upgrade binary stopping with `Needed`: it does not carry the plan either).
    #[error("node {node}: exit {code} on the {binary} binary, which a restart cannot cure")]
    WrongBinary {
        /// The node.
        node: usize,
        /// Its exit code.
        code: i32,
        /// `upgrade` or `previous`.
        binary: String,
    },
    /// The node used up its restarts.
    #[error("node {node}: exit {code} after {limit} supervised restarts; left down")]
    RestartLimit {
        /// The node.
        node: usize,
        /// Its last exit code.
        code: i32,
        /// [`MAX_SUPERVISED_RESTARTS`].
        limit: u32,
    },
}

/// What to do with a node that exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Restart it on this binary.
    Restart {
        /// The binary.
        binary: PathBuf,
        /// Why.
        reason: RestartReason,
    },
    /// Leave it down: not an upgrade exit (the localnet reports it as an exit).
    NotMine,
    /// Leave it down: a typed refusal.
    Refuse(SuperviseError),
}

/// One node's record in the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisedNode {
    /// Whether it runs (or last ran) the upgrade binary.
    pub on_upgrade_binary: bool,
    /// Switches from the previous binary to the upgrade binary.
    pub switches: u32,
    /// Supervised restarts by reason.
    pub restarts: BTreeMap<String, u32>,
    /// Exit codes it stopped with, in order (every exit the supervisor saw).
    pub exits: Vec<i32>,
}

/// The supervisor of a localnet's nodes (see the module docs).
#[derive(Debug, Clone)]
pub struct Supervisor {
    previous: PathBuf,
    upgrade: Option<PathBuf>,
    nodes: Vec<SupervisedNode>,
    errors: Vec<SuperviseError>,
}

impl Supervisor {
    /// `n` nodes on `previous`, switched to `upgrade` when they stop for an upgrade.
    pub fn new(n: usize, previous: &Path, upgrade: Option<&Path>) -> Self {
        Self {
            previous: previous.to_path_buf(),
            upgrade: upgrade.map(Path::to_path_buf),
            nodes: vec![SupervisedNode::default(); n],
            errors: Vec::new(),
        }
    }

    /// The binary node `i` runs now (a fault's restart uses it too).
    pub fn binary(&self, i: usize) -> &Path {
        match (&self.upgrade, self.nodes.get(i)) {
            (Some(up), Some(n)) if n.on_upgrade_binary => up,
            _ => &self.previous,
        }
    }

    /// Node `i` exited with `code` (`None`: killed by a signal): the decision, recorded.
    pub fn on_exit(&mut self, i: usize, code: Option<i32>) -> Decision {
        let Some(node) = self.nodes.get_mut(i) else {
            return Decision::NotMine;
        };
        let Some(code) = code else {
            return Decision::NotMine;
        };
        node.exits.push(code);
        let (to_upgrade, reason) = match u8::try_from(code) {
            Ok(EXIT_UPGRADE_NEEDED) => (true, RestartReason::UpgradeNeeded),
            Ok(EXIT_UPGRADE_UNKNOWN) => (true, RestartReason::UpgradeUnknown),
            Ok(EXIT_UPGRADE_EARLY) => (false, RestartReason::UpgradeEarly),
            _ => return Decision::NotMine,
        };
        let refuse = |e: SuperviseError, errors: &mut Vec<SuperviseError>| {
            tracing::error!(error = %e, "supervisor leaves a node down");
            errors.push(e.clone());
            Decision::Refuse(e)
        };
        let Some(upgrade) = self.upgrade.clone() else {
            return refuse(
                SuperviseError::NoUpgradeBinary { node: i, code },
                &mut self.errors,
            );
        };
        if to_upgrade == node.on_upgrade_binary {
            let binary = if node.on_upgrade_binary {
                "upgrade"
            } else {
                "previous"
            };
            return refuse(
                SuperviseError::WrongBinary {
                    node: i,
                    code,
                    binary: binary.into(),
                },
                &mut self.errors,
            );
        }
        let done: u32 = node.restarts.values().sum();
        if done >= MAX_SUPERVISED_RESTARTS {
            return refuse(
                SuperviseError::RestartLimit {
                    node: i,
                    code,
                    limit: MAX_SUPERVISED_RESTARTS,
                },
                &mut self.errors,
            );
        }
        *node.restarts.entry(reason.name().into()).or_default() += 1;
        node.on_upgrade_binary = to_upgrade;
        if to_upgrade {
            node.switches += 1;
        }
        let binary = if to_upgrade {
            upgrade
        } else {
            self.previous.clone()
        };
        tracing::info!(node = i, code, reason = reason.name(), binary = %binary.display(), "supervisor restarts a node");
        Decision::Restart { binary, reason }
    }

    /// Every node's record.
    pub fn nodes(&self) -> &[SupervisedNode] {
        &self.nodes
    }

    /// The refusals, in order.
    pub fn errors(&self) -> &[SuperviseError] {
        &self.errors
    }

    /// Supervised restarts of all nodes by reason.
    pub fn restarts_by_reason(&self) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for n in &self.nodes {
            for (k, v) in &n.restarts {
                *out.entry(k.clone()).or_default() += v;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sup() -> Supervisor {
        Supervisor::new(4, Path::new("/bin/old"), Some(Path::new("/bin/new")))
    }

    fn restart(binary: &str, reason: RestartReason) -> Decision {
        Decision::Restart {
            binary: PathBuf::from(binary),
            reason,
        }
    }

    #[test]
    fn a_node_stopped_for_an_upgrade_is_switched_once() {
        let mut s = sup();
        assert_eq!(s.binary(2), Path::new("/bin/old"));
        assert_eq!(
            s.on_exit(2, Some(10)),
            restart("/bin/new", RestartReason::UpgradeNeeded)
        );
        assert_eq!(s.binary(2), Path::new("/bin/new"));
        assert_eq!(s.binary(1), Path::new("/bin/old"));
        assert_eq!(s.nodes()[2].switches, 1);
        // The new build stopping with Needed again: it does not carry the plan either.
        assert!(matches!(
            s.on_exit(2, Some(10)),
            Decision::Refuse(SuperviseError::WrongBinary {
                node: 2,
                code: 10,
                ..
            })
        ));
        assert_eq!(s.restarts_by_reason()["upgrade_needed"], 1);
        assert_eq!(s.errors().len(), 1);
    }

    #[test]
    fn other_exits_are_not_the_supervisors() {
        let mut s = sup();
        assert_eq!(s.on_exit(0, Some(1)), Decision::NotMine);
        assert_eq!(s.on_exit(0, Some(0)), Decision::NotMine);
        assert_eq!(s.on_exit(0, None), Decision::NotMine);
        assert_eq!(s.on_exit(9, Some(10)), Decision::NotMine);
        assert!(s.restarts_by_reason().is_empty());
        assert_eq!(s.nodes()[0].exits, vec![1, 0]);
    }

    #[test]
    fn an_early_new_build_goes_back_and_the_restarts_are_bounded() {
        let mut s = sup();
        // A node on the upgrade binary too early (its snapshot below the plan missing, say)
        // goes back to the previous one; if that stops with Needed at once again, and so on,
        // the supervisor stops after MAX_SUPERVISED_RESTARTS.
        assert_eq!(
            s.on_exit(1, Some(10)),
            restart("/bin/new", RestartReason::UpgradeNeeded)
        );
        assert_eq!(
            s.on_exit(1, Some(11)),
            restart("/bin/old", RestartReason::UpgradeEarly)
        );
        assert_eq!(
            s.on_exit(1, Some(10)),
            restart("/bin/new", RestartReason::UpgradeNeeded)
        );
        assert_eq!(
            s.on_exit(1, Some(11)),
            Decision::Refuse(SuperviseError::RestartLimit {
                node: 1,
                code: 11,
                limit: MAX_SUPERVISED_RESTARTS
            })
        );
        // Left down: the next exit is refused the same way, never restarted.
        assert!(matches!(s.on_exit(1, Some(10)), Decision::Refuse(_)));
        // Early on the previous binary cannot happen with a correct build: refused.
        assert!(matches!(
            s.on_exit(3, Some(11)),
            Decision::Refuse(SuperviseError::WrongBinary { node: 3, .. })
        ));
    }

    #[test]
    fn an_old_build_on_upgraded_state_is_switched() {
        let mut s = sup();
        assert_eq!(
            s.on_exit(0, Some(12)),
            restart("/bin/new", RestartReason::UpgradeUnknown)
        );
    }

    #[test]
    fn without_an_upgrade_binary_nothing_is_restarted() {
        let mut s = Supervisor::new(4, Path::new("/bin/old"), None);
        assert_eq!(
            s.on_exit(0, Some(10)),
            Decision::Refuse(SuperviseError::NoUpgradeBinary { node: 0, code: 10 })
        );
        assert_eq!(s.binary(0), Path::new("/bin/old"));
    }
}
