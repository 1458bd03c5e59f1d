//! `localnet --measure-byzantine LIST`: the honest localnet and then each listed Byzantine run,
//! one after the other, all of the same length and options, compared on the window in which the
//! fault is on (the run's last two thirds, [`WindowReport`]): heights per second and the p99 of
//! agreed time minus due and of wall clock minus due of the fires due in it, each as a ratio to
//! the honest run's. Issue 23's target: every ratio within 2x (heights/s at least half the
//! honest rate, each p99 at most twice the honest one). A measurement, not a test: the table is
//! printed and written, the exit code says only whether every run ran and agreed.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{LocalnetOptions, Report, WindowReport, run_localnet};
use crate::hostile::ByzantineKind;

/// One run of a measurement: honest, a Byzantine kind at node 0, or node 0 delivering to f+1
/// honest nodes only (`--byzantine-subset 1..=f+1`), alone or with a kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasureRun {
    /// Its name in the table (`honest`, `KIND`, `subset`, `KIND+subset`).
    pub name: String,
    /// The kind, at node 0.
    pub kind: Option<ByzantineKind>,
    /// Whether node 0 delivers to f+1 honest nodes only.
    pub subset: bool,
}

impl MeasureRun {
    /// The honest baseline.
    pub fn honest() -> Self {
        Self {
            name: "honest".into(),
            kind: None,
            subset: false,
        }
    }
}

/// Parses `--measure-byzantine`'s list: comma-separated `KIND`, `subset` or `KIND+subset`, or
/// `all` (every kind, then `subset` and `withhold-votes+subset`). The honest baseline is not
/// listed: it always runs first.
///
/// # Errors
/// An unknown kind or item.
pub fn parse_measure_runs(s: &str) -> Result<Vec<MeasureRun>, String> {
    let items: Vec<String> = if s.trim() == "all" {
        ByzantineKind::ALL
            .iter()
            .map(|k| k.name().to_string())
            .chain(["subset".into(), "withhold-votes+subset".into()])
            .collect()
    } else {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect()
    };
    if items.is_empty() {
        return Err("no run listed".into());
    }
    items
        .into_iter()
        .map(|item| {
            let (kind, subset) = match item.strip_suffix("+subset") {
                Some(k) => (Some(k), true),
                None if item == "subset" => (None, true),
                None => (Some(item.as_str()), false),
            };
            let kind = kind.map(str::parse::<ByzantineKind>).transpose()?;
            Ok(MeasureRun {
                name: item.clone(),
                kind,
                subset,
            })
        })
        .collect()
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureRow {
    /// The run.
    pub run: MeasureRun,
    /// Its window (`None`: no honest node ran the whole time).
    pub window: Option<WindowReport>,
    /// Whether the honest nodes agreed and the run had no violation.
    pub clean: bool,
    /// Its violations.
    pub violations: Vec<String>,
    /// Its report's home.
    pub home: String,
    /// Heights/s in the window against the honest run's.
    pub heights_ratio: Option<f64>,
    /// The window's agreed-minus-due p99 against the honest run's.
    pub agreed_p99_ratio: Option<f64>,
    /// The window's wall-minus-due p99 against the honest run's.
    pub wall_p99_ratio: Option<f64>,
    /// Whether every ratio is within 2x of the honest run's (heights/s at least half, each
    /// p99 at most twice).
    pub within_2x: bool,
}

/// A measurement: every run's row, the honest one first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasureReport {
    /// Each run's length (ms).
    pub duration_ms: u64,
    /// Nodes.
    pub nodes: usize,
    /// The ledger.
    pub ledger: String,
    /// The rows, the honest baseline first.
    pub rows: Vec<MeasureRow>,
}

/// `a / b`, when `b` is positive.
fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// The p99 ratios with a floor: a p99 below one tick period's worth of noise (1 ms) is taken
/// as 1 ms, so an honest p99 of 0 does not make every ratio infinite.
fn p99_ratio(a: i64, b: i64) -> Option<f64> {
    ratio(a.max(1) as f64, b.max(1) as f64)
}

/// A window's heights/s, agreed-minus-due p99 and wall-minus-due p99 as ratios to a
/// baseline window's (each `None` without both windows or a positive baseline).
pub(super) fn ratios(
    window: Option<WindowReport>,
    base: Option<&WindowReport>,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    match (window, base) {
        (Some(w), Some(h)) => (
            ratio(w.heights_per_sec, h.heights_per_sec),
            p99_ratio(w.lateness.agreed_p99_ms, h.lateness.agreed_p99_ms),
            p99_ratio(w.lateness.wall_p99_ms, h.lateness.wall_p99_ms),
        ),
        _ => (None, None, None),
    }
}

/// A window's table cells: heights/s, heights, fires, agreed-due p99, wall-due p99.
pub(super) fn window_cells(window: Option<WindowReport>) -> (String, u64, u64, i64, i64) {
    window.map_or(("n/a".into(), 0, 0, 0, 0), |w| {
        (
            format!("{:.1}", w.heights_per_sec),
            w.heights,
            w.lateness.fires,
            w.lateness.agreed_p99_ms,
            w.lateness.wall_p99_ms,
        )
    })
}

fn row(run: MeasureRun, r: &Report, honest: Option<&WindowReport>) -> MeasureRow {
    let window = r.window;
    let (heights_ratio, agreed_p99_ratio, wall_p99_ratio) = ratios(window, honest);
    let within_2x = heights_ratio.is_some_and(|x| x >= 0.5)
        && agreed_p99_ratio.is_some_and(|x| x <= 2.0)
        && wall_p99_ratio.is_some_and(|x| x <= 2.0);
    MeasureRow {
        run,
        window,
        clean: r.honest_agree && r.violations.is_empty(),
        violations: r.violations.clone(),
        home: r.home.clone(),
        heights_ratio,
        agreed_p99_ratio,
        wall_p99_ratio,
        within_2x,
    }
}

/// Runs the honest localnet of `opts` and then each of `runs` (node 0 Byzantine from D/3 on;
/// `opts`' own `byzantine` and `byzantine_subset` are replaced, and no node is killed
/// mid-run), one at a time, each in its own
/// home (`<home>/<name>` when `opts.home` is set), and compares them.
///
/// # Errors
/// A localnet that could not start.
pub fn measure_byzantine(
    opts: &LocalnetOptions,
    runs: &[MeasureRun],
) -> std::io::Result<MeasureReport> {
    let f = (opts.nodes - 1) / 3;
    let mut rows: Vec<MeasureRow> = Vec::new();
    let mut honest: Option<WindowReport> = None;
    for run in std::iter::once(MeasureRun::honest()).chain(runs.iter().cloned()) {
        let mut o = opts.clone();
        // No mid-run SIGKILL: a restart would confound the comparison.
        o.kill_restart = false;
        o.byzantine = run.kind.map(|k| (k, 0));
        o.byzantine_subset = run.subset.then(|| (1..=f + 1).collect());
        o.home = opts
            .home
            .as_ref()
            .map(|h| h.join(run.name.replace('+', "-")));
        tracing::info!(run = %run.name, "measure-byzantine: starting");
        let r = run_localnet(&o)?;
        let first = rows.is_empty();
        let row = row(run, &r, honest.as_ref());
        if first {
            honest = r.window;
        }
        rows.push(row);
    }
    Ok(MeasureReport {
        duration_ms: u64::try_from(opts.duration.as_millis()).unwrap_or(u64::MAX),
        nodes: opts.nodes,
        ledger: opts.ledger.name.clone(),
        rows,
    })
}

impl MeasureReport {
    /// The table (Markdown): per run, heights/s, heights and the longest stall in the window,
    /// the fires measured, the agreed-minus-due and wall-minus-due p99, the ratios to the
    /// honest run and whether each is within 2x.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| run | heights/s | heights | longest stall (ms) | fires | agreed-due p99 (ms) | wall-due p99 (ms) | heights/s ratio | agreed p99 ratio | wall p99 ratio | within 2x | clean |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
        );
        let fmt = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.2}"));
        for r in &self.rows {
            let (hs, h, stall, fires, ap, wp) =
                r.window.map_or(("n/a".into(), 0, 0, 0, 0, 0), |w| {
                    (
                        format!("{:.1}", w.heights_per_sec),
                        w.heights,
                        w.longest_stall_ms,
                        w.lateness.fires,
                        w.lateness.agreed_p99_ms,
                        w.lateness.wall_p99_ms,
                    )
                });
            let baseline = r.run.kind.is_none() && !r.run.subset;
            out.push_str(&format!(
                "| `{}` | {hs} | {h} | {stall} | {fires} | {ap} | {wp} | {} | {} | {} | {} | {} |\n",
                r.run.name,
                fmt(r.heights_ratio),
                fmt(r.agreed_p99_ratio),
                fmt(r.wall_p99_ratio),
                if baseline {
                    "(baseline)"
                } else if r.within_2x {
                    "yes"
                } else {
                    "**no**"
                },
                if r.clean { "yes" } else { "**no**" },
            ));
        }
        out
    }

    /// Whether every run was clean (agreement, no violation).
    pub fn clean(&self) -> bool {
        self.rows.iter().all(|r| r.clean)
    }
}

/// Where a measurement's runs go without `--home`: a fresh temporary directory.
pub fn default_measure_home() -> PathBuf {
    std::env::temp_dir().join(format!(
        "ccron-measure-byzantine-{}-{}",
        std::process::id(),
        crate::core::now_ms()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::localnet::Lateness;

    #[test]
    fn runs_parse_kinds_subsets_and_all() {
        let r = parse_measure_runs("flood, withhold-votes+subset,subset").unwrap();
        assert_eq!(
            r,
            vec![
                MeasureRun {
                    name: "flood".into(),
                    kind: Some(ByzantineKind::Flood),
                    subset: false
                },
                MeasureRun {
                    name: "withhold-votes+subset".into(),
                    kind: Some(ByzantineKind::WithholdVotes),
                    subset: true
                },
                MeasureRun {
                    name: "subset".into(),
                    kind: None,
                    subset: true
                },
            ]
        );
        let all = parse_measure_runs("all").unwrap();
        assert_eq!(all.len(), ByzantineKind::ALL.len() + 2);
        assert!(parse_measure_runs("nope").is_err());
        assert!(parse_measure_runs("nope+subset").is_err());
        assert!(parse_measure_runs(" , ").is_err());
    }

    fn window(hps: f64, agreed: i64, wall: i64) -> WindowReport {
        WindowReport {
            node: 1,
            from_ms: 0,
            heights_per_sec: hps,
            heights: 10,
            longest_stall_ms: 100,
            lateness: Lateness {
                node: 1,
                fires: 5,
                agreed_p99_ms: agreed,
                wall_p99_ms: wall,
                ..Lateness::default()
            },
        }
    }

    fn report(w: Option<WindowReport>) -> Report {
        serde_json::from_value(serde_json::json!({
            "engine": "e", "nodes": [], "honest_agree": true, "violations": [],
            "restarts": 0, "pids": [], "max_height": 0, "heights_per_sec": 0.0, "home": "h",
            "window": w,
        }))
        .unwrap()
    }

    #[test]
    fn ratios_are_against_the_honest_window_and_judged_at_2x() {
        let honest = window(10.0, 200, 300);
        let half = row(
            parse_measure_runs("flood").unwrap().remove(0),
            &report(Some(window(5.0, 400, 600))),
            Some(&honest),
        );
        assert_eq!(half.heights_ratio, Some(0.5));
        assert_eq!(half.agreed_p99_ratio, Some(2.0));
        assert_eq!(half.wall_p99_ratio, Some(2.0));
        assert!(half.within_2x && half.clean);
        let slow = row(
            parse_measure_runs("withhold").unwrap().remove(0),
            &report(Some(window(4.9, 100, 100))),
            Some(&honest),
        );
        assert!(!slow.within_2x, "heights/s below half");
        let late = row(
            parse_measure_runs("silent").unwrap().remove(0),
            &report(Some(window(10.0, 200, 601))),
            Some(&honest),
        );
        assert!(!late.within_2x, "wall p99 above twice");
        let none = row(MeasureRun::honest(), &report(None), Some(&honest));
        assert!(!none.within_2x && none.heights_ratio.is_none());
        // An honest p99 of 0 ms: floored at 1 ms, no infinite ratio.
        assert_eq!(p99_ratio(3, 0), Some(3.0));
    }
}
