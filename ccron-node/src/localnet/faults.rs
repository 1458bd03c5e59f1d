//! Applying a seeded fault step to a localnet's children, and naming it in the report.

use std::path::Path;
use std::process::{Child, Command};

use crate::supervise::Supervisor;

use super::LocalnetOptions;
use super::spawn::{Children, spawn_node};

/// `kill 2`, `restart 2`, `pause 1`, `continue 1`.
pub(super) fn fault_name(step: crate::faults::FaultStep) -> String {
    use crate::faults::{FaultKind as K, FaultStep as S};
    match step {
        S::Start(K::Kill, i) => format!("kill {i}"),
        S::End(K::Kill, i) => format!("restart {i}"),
        S::Start(K::Pause, i) => format!("pause {i}"),
        S::End(K::Pause, i) => format!("continue {i}"),
        S::Start(K::KillAll, _) => "kill all".to_string(),
        S::End(K::KillAll, _) => "restart all".to_string(),
    }
}

/// Applies one fault step to the children (a restart on the node's current binary); the
/// number of nodes it restarted.
pub(super) fn apply_fault(
    opts: &LocalnetOptions,
    home: &Path,
    children: &mut Children,
    pids: &mut Vec<u32>,
    step: crate::faults::FaultStep,
    byzantine_from_ms: i64,
    supervisor: &Supervisor,
) -> std::io::Result<u32> {
    use crate::faults::{FaultKind as K, FaultStep as S};
    let signal = |c: &Child, sig: &str| {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(c.id().to_string())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            tracing::error!(pid = c.id(), sig, "could not signal a node");
        }
    };
    match step {
        S::Start(K::Kill, i) => {
            if let Some(mut c) = children.0[i].take() {
                let _ = c.kill(); // SIGKILL
                let _ = c.wait();
            }
        }
        S::End(K::Kill, i) => {
            if children.0[i].is_none() {
                let c = spawn_node(opts, home, i, byzantine_from_ms, supervisor.binary(i))?;
                pids.push(c.id());
                children.0[i] = Some(c);
                return Ok(1);
            }
        }
        S::Start(K::KillAll, _) => {
            for slot in &mut children.0 {
                if let Some(mut c) = slot.take() {
                    let _ = c.kill(); // SIGKILL
                    let _ = c.wait();
                }
            }
        }
        S::End(K::KillAll, _) => {
            let mut restarted = 0;
            for i in 0..children.0.len() {
                if children.0[i].is_none() {
                    let c = spawn_node(opts, home, i, byzantine_from_ms, supervisor.binary(i))?;
                    pids.push(c.id());
                    children.0[i] = Some(c);
                    restarted += 1;
                }
            }
            return Ok(restarted);
        }
        S::Start(K::Pause, i) => {
            if let Some(c) = &children.0[i] {
                signal(c, "STOP");
            }
        }
        S::End(K::Pause, i) => {
            if let Some(c) = &children.0[i] {
                signal(c, "CONT");
            }
        }
    }
    Ok(0)
}
