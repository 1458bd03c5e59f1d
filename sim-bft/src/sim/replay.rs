//! The one rendering of a run's configuration as the `sim-bft run` command line that replays it
//! (the run header, the JSON report's `replay`, `SimOutcome::replay_command`).

use super::config::{
    FaultConfig, LedgerKind, PartitionKind, SimConfig, TimeServiceMode, format_instant_ms,
};

impl SimConfig {
    /// The `sim-bft run` command line that reproduces a run of this configuration: the one
    /// rendering of a run's full configuration (the run header, the JSON report's `replay`,
    /// [`super::SimOutcome::replay_command`]). Every knob that shapes the run is written out,
    /// defaults included, except fault knobs at their "no fault" value, so a replay does not
    /// depend on the command line's defaults. What the command line cannot express (an
    /// application or client workload built in code, a negative checker slack) is listed after
    /// a shell comment (`# set in code, not reproducible from the command line: …`).
    pub fn command_line(&self) -> String {
        let fc = &self.faults;
        let mut s = format!(
            "sim-bft run --seed {} --replicas {}",
            self.seed, self.replicas
        );
        let mut push = |x: String| {
            s.push(' ');
            s.push_str(&x);
        };
        push(format!("--node {}", self.node));
        if self.ledger != LedgerKind::Custom {
            push(format!("--ledger {}", self.ledger));
        }
        if self.zone_installs {
            push("--zone-installs".to_string());
        }
        push(format!(
            "--duration {}ms --liveness {}ms",
            self.duration_ms, self.liveness_ms
        ));
        push(format!("--tick-period {}ms", self.tick_period_ms));
        if let Some(spread) = self.tick_spread_ms {
            push(format!("--tick-spread {spread}ms"));
        }
        let components: Vec<String> = self.components.iter().map(|c| c.to_string()).collect();
        push(format!(
            "--components {}",
            if components.is_empty() {
                "none".to_string()
            } else {
                components.join(",")
            }
        ));
        push(format!(
            "--tick-senders {}",
            if self.rotate_ticks { "rotating" } else { "all" }
        ));
        push(format!(
            "--clients {} --request-interval {}ms",
            self.clients, self.request_interval_ms
        ));
        for (c, p) in &self.component_periods_ms {
            push(format!("--component-period {c}={p}ms"));
        }
        push(format!("--from {}", format_instant_ms(self.epoch_ms)));
        push(format!("--time-service {}", self.time_service));
        push(format!("--signatures {}", self.signatures));
        if self.check_time_bounds != (self.time_service == TimeServiceMode::Robust) {
            push(format!("--check-time-bounds {}", self.check_time_bounds));
        }
        let d = SimConfig::default();
        for (name, v, dv) in [
            (
                "--time-ahead-slack",
                self.time_ahead_slack_ms,
                d.time_ahead_slack_ms,
            ),
            (
                "--time-behind-slack",
                self.time_behind_slack_ms,
                d.time_behind_slack_ms,
            ),
        ] {
            if v != dv && v >= 0 {
                push(format!("{name} {v}ms"));
            }
        }
        if self.time_lag_seqs != d.time_lag_seqs {
            push(format!("--time-lag-seqs {}", self.time_lag_seqs));
        }
        if self.max_events != d.max_events {
            push(format!("--max-events {}", self.max_events));
        }
        if self.node_check_every != d.node_check_every {
            push(format!("--check-every {}", self.node_check_every));
        }
        if let Some(b) = self.stall_bound_ms {
            push(format!("--stall-bound {b}ms"));
        }
        push(format!("--max-delay {}ms", fc.max_delay_ms));
        let fd = FaultConfig::default();
        if fc.min_delay_ms != fd.min_delay_ms {
            push(format!("--min-delay {}ms", fc.min_delay_ms));
        }
        if fc.reorder_delay_ms != fd.reorder_delay_ms {
            push(format!("--reorder-delay {}ms", fc.reorder_delay_ms));
        }
        for (name, rate) in [
            ("--drop-rate", fc.drop_rate),
            ("--duplicate-rate", fc.duplicate_rate),
            ("--reorder-rate", fc.reorder_rate),
        ] {
            if rate != 0.0 {
                // `{}` of an f64 is the shortest text that parses back to the same value.
                push(format!("{name} {rate}"));
            }
        }
        if fc.partition != PartitionKind::None {
            push(format!("--partition {}", fc.partition));
        }
        if fc.crashes > 0 {
            push(format!("--crash {}", fc.crashes));
        }
        if fc.byzantine > 0 {
            push(format!("--byzantine {}", fc.byzantine));
        }
        if !fc.pinned_byzantine.is_empty() {
            let ids: Vec<String> = fc.pinned_byzantine.iter().map(|c| c.to_string()).collect();
            push(format!("--byzantine-ids {}", ids.join(",")));
        }
        if fc.byzantine > 0 || !fc.pinned_byzantine.is_empty() {
            push(format!("--byzantine-kind {}", fc.byzantine_kind));
        }
        if fc.max_clock_skew_ms != 0 {
            push(format!("--clock-skew {}ms", fc.max_clock_skew_ms));
        }
        if fc.max_drift_ppm != 0 {
            push(format!("--drift-ppm {}", fc.max_drift_ppm));
        }
        if fc.clock_jumps > 0 || fc.max_clock_jump_ms != 0 {
            push(format!(
                "--clock-jumps {} --clock-jump {}ms",
                fc.clock_jumps, fc.max_clock_jump_ms
            ));
        }
        if fc.max_size_requests {
            push("--max-size-requests".to_string());
        }
        if fc.crash_at_view_change > 0.0 {
            push(format!(
                "--crash-at-view-change {}",
                fc.crash_at_view_change
            ));
        }
        if fc.state_growth_bytes > 0 {
            push(format!("--state-growth {}", fc.state_growth_bytes));
        }
        if self.clocks_beyond_time_bound() {
            push("--allow-clock-stall".to_string());
        }
        let in_code = self.settings_only_code_sets();
        if !in_code.is_empty() {
            push(format!(
                "# set in code, not reproducible from the command line: {}",
                in_code.join(", ")
            ));
        }
        s
    }

    /// The settings of this configuration that `sim-bft run` cannot express (empty when
    /// [`Self::command_line`] reproduces the run exactly).
    pub fn settings_only_code_sets(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.ledger == LedgerKind::Custom {
            out.push("ledger = an application built in code".to_string());
        }
        if self.custom_workload {
            out.push("clients = a workload built in code".to_string());
        }
        for (name, v) in [
            ("time_ahead_slack_ms", self.time_ahead_slack_ms),
            ("time_behind_slack_ms", self.time_behind_slack_ms),
        ] {
            if v < 0 {
                out.push(format!("{name} = {v}"));
            }
        }
        out
    }
}
