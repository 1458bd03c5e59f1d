//! The replay line of a localnet run (`Report::replay`).

use super::LocalnetOptions;

/// The `localnet` command line that runs this run again: every option that shapes it (the
/// node count, ledger, length, key seed, tick period, the mid-run kill or its absence, the
/// adversary: `--byzantine KIND@I`, `--byzantine-subset`, the seeded fault layers, a late
/// joiner, a lying or tick-omitting proposer, pruning, a wiped restart, an upgrade binary).
/// Never empty: a Byzantine or subset run that fails must print how to run it again as much as
/// a seeded fault run. (Wall-clock timing is not replayed: the same command meets the same
/// adversary and the same fault plan, not the same interleaving.)
pub(crate) fn replay_command(opts: &LocalnetOptions) -> String {
    let mut cmd = format!(
        "localnet --nodes {} --ledger {} --duration {}ms --seed {}",
        opts.nodes,
        opts.ledger.name,
        opts.duration.as_millis(),
        opts.seed
    );
    let mut periods = opts.ledger.tick_periods.values();
    if let Some(&p) = periods.next()
        && p != crate::ledger::DEFAULT_TICK_PERIOD_MS
        && periods.all(|&q| q == p)
    {
        cmd.push_str(&format!(" --tick-period-ms {p}"));
    }
    if !opts.kill_restart {
        cmd.push_str(" --no-kill");
    }
    if let Some((kind, i)) = opts.byzantine {
        cmd.push_str(&format!(" --byzantine {}@{i}", kind.name()));
    }
    if let Some(subset) = &opts.byzantine_subset {
        let list: Vec<String> = subset.iter().map(usize::to_string).collect();
        cmd.push_str(&format!(" --byzantine-subset {}", list.join(",")));
    }
    if let Some(s) = opts.faults {
        cmd.push_str(&format!(" --faults {s}"));
        if opts.kill_all {
            cmd.push_str(" --kill-all");
        }
    }
    if let Some(s) = opts.net_faults {
        cmd.push_str(&format!(" --net-faults {s}"));
    }
    if let Some(s) = opts.clock_faults {
        cmd.push_str(&format!(" --clock-faults {s}"));
    }
    if let Some(s) = opts.disk_faults {
        cmd.push_str(&format!(" --disk-faults {s}"));
    }
    if opts.late_join {
        cmd.push_str(" --late-join");
    }
    if let Some(h) = opts.late_join_at_height {
        cmd.push_str(&format!(" --late-join-at-height {h}"));
    }
    if opts.lying_time {
        cmd.push_str(" --lying-time");
    }
    if opts.omit_ticks {
        cmd.push_str(" --omit-ticks");
    }
    if let Some(n) = opts.retain_blocks {
        cmd.push_str(&format!(" --retain-blocks {n}"));
    }
    if opts.wipe_restarted {
        cmd.push_str(" --wipe-restarted");
    }
    if let Some(b) = &opts.upgrade_binary {
        cmd.push_str(&format!(" --upgrade-binary {}", b.display()));
    }
    if opts.scale.load_rate != crate::load::DEFAULT_LOAD_RATE {
        cmd.push_str(&format!(" --load-rate {}", opts.scale.load_rate));
    }
    if opts.scale.preload > 0 {
        cmd.push_str(&format!(" --preload {}", opts.scale.preload));
    }
    cmd
}
