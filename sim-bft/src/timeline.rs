//! A picture of a run: what fired where, as an SVG drawn by hand (no dependency).
//!
//! [`render_svg`] draws one row per replica with time on the x axis: a mark per cron action the
//! replica ran (placed at the agreed time of its batch, coloured by component/position),
//! downtime from crash to restart, restarts, view changes, partition windows on the rows of the
//! replicas they cut off, and the heal. Byzantine replicas are labelled. The picture reads the
//! same events as the JSON report ([`crate::sim::SimEvents`]), so its marks are the report's
//! `fire_events`, replica by replica; actions a replica skipped over by state transfer are counted
//! in its `fires` but not drawn, and the row says how many.
//!
//! Every mark carries data attributes (`class="fire" data-replica=".." data-component=".."
//! data-position=".." data-seq=".."`), so tools and tests can read the picture back. All text is
//! escaped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::sim::{MarkKind, SimOutcome};

const WIDTH: f64 = 1_100.0;
const LEFT: f64 = 190.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 78.0;
const ROW: f64 = 44.0;
const BOTTOM: f64 = 56.0;

/// Colours of the component/position keys, in key order (then again).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes `s` for SVG text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 text.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Time axis: run milliseconds to x.
struct Axis {
    span_ms: u64,
}

impl Axis {
    fn x(&self, ms: u64) -> f64 {
        let ms = ms.min(self.span_ms) as f64;
        LEFT + ms / self.span_ms.max(1) as f64 * (WIDTH - LEFT - RIGHT)
    }
}

/// The SVG of the run `o` (see the module documentation).
pub fn render_svg(o: &SimOutcome) -> String {
    let n = o.config.replicas;
    let epoch = o.config.epoch_ms;
    // A fire's place: its agreed time (ms since the run's epoch), or the simulated time it ran
    // at when the time service is off.
    let at = |e: &crate::sim::FireEvent| -> u64 {
        e.agreed_time_ms
            .and_then(|t| u64::try_from(t.saturating_sub(epoch)).ok())
            .unwrap_or(e.sim_ms)
    };
    let latest_fire = o.events.fires.iter().map(at).max().unwrap_or(0);
    let axis = Axis {
        span_ms: o.end_ms.max(latest_fire).max(1),
    };
    let keys: BTreeSet<(u32, u32)> = o
        .events
        .fires
        .iter()
        .map(|e| (e.component, e.position))
        .chain(o.nodes.iter().flat_map(|s| {
            s.fires.keys().filter_map(|k| {
                let (c, p) = k.split_once('/')?;
                Some((c.parse().ok()?, p.parse().ok()?))
            })
        }))
        .collect();
    let lane: BTreeMap<(u32, u32), usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let lanes = keys.len().max(1);
    let colour = |k: &(u32, u32)| PALETTE[lane.get(k).copied().unwrap_or(0) % PALETTE.len()];
    let row_top = |r: u32| TOP + f64::from(r) * ROW;
    let height = TOP + f64::from(n) * ROW + BOTTOM;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let title = format!(
        "sim-bft seed {}: n = {}, f = {}, {} ms simulated; {}",
        o.config.seed,
        n,
        o.params.f,
        o.end_ms,
        if o.ok() {
            "every checker held"
        } else {
            "CHECKER VIOLATIONS"
        }
    );
    let _ = writeln!(
        s,
        r#"<text class="title" x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
        escape(&title)
    );

    // Legend: one swatch per component/position, then the other marks.
    let mut lx = 10.0;
    let ly = 44.0;
    for k in &keys {
        let label = format!("component {} / position {}", k.0, k.1);
        let _ = writeln!(
            s,
            r#"<circle class="legend" cx="{:.1}" cy="{ly}" r="4" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 4.0,
            colour(k),
            lx + 12.0,
            ly + 4.0,
            escape(&label)
        );
        lx += 12.0 + 7.0 * label.len() as f64 + 16.0;
    }
    let extra = [
        (r##"fill="#bbbbbb""##, "crashed"),
        (
            r##"fill="#f4a442" fill-opacity="0.6""##,
            "partitioned (darker: cut from more peers)",
        ),
        (r##"fill="#7b3294""##, "view change"),
        (r##"fill="#1a9641""##, "restart"),
    ];
    for (fill, label) in extra {
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="10" {fill}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 5.0,
            lx + 14.0,
            ly + 4.0,
            escape(label)
        );
        lx += 14.0 + 7.0 * label.len() as f64 + 16.0;
    }

    // Rows: background, Byzantine shading, label.
    for r in 0..n {
        let y = row_top(r);
        let summary = o.nodes.get(r as usize);
        let byz = !summary.is_none_or(|s| s.honest);
        let fill = match (byz, r % 2) {
            (true, _) => "#fbe3e3",
            (false, 0) => "#f7f7f7",
            (false, _) => "#ffffff",
        };
        let _ = writeln!(
            s,
            r#"<rect class="row" data-replica="{r}" x="{LEFT}" y="{y:.1}" width="{:.1}" height="{ROW}" fill="{fill}"/>"#,
            WIDTH - LEFT - RIGHT
        );
        let label = if byz {
            format!(
                "replica {r} (Byzantine: {})",
                o.config.faults.byzantine_kind
            )
        } else {
            format!("replica {r}")
        };
        let _ = writeln!(
            s,
            r#"<text class="{}" x="{:.1}" y="{:.1}" text-anchor="end"{}>{}</text>"#,
            if byz { "byzantine" } else { "replica" },
            LEFT - 8.0,
            y + ROW / 2.0 + 4.0,
            if byz { r##" fill="#b2182b""## } else { "" },
            escape(&label)
        );
    }

    // Partitions: on the row of every replica with a cut link, darker the more of its peers it
    // is cut from. They end at the heal.
    for (i, p) in o.params.partitions.iter().enumerate() {
        let until = p.until_ms.min(o.config.duration_ms);
        if until <= p.from_ms {
            continue;
        }
        let mut peers: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for (a, b) in &p.blocked {
            peers.entry(*a).or_default().insert(*b);
            peers.entry(*b).or_default().insert(*a);
        }
        for (r, cut) in peers.into_iter().filter(|(r, _)| *r < n) {
            let (x0, x1) = (axis.x(p.from_ms), axis.x(until));
            let share = cut.len() as f64 / f64::from(n.saturating_sub(1).max(1));
            let _ = writeln!(
                s,
                r##"<rect class="partition" data-index="{i}" data-replica="{r}" data-cut-peers="{}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#f4a442" fill-opacity="{:.2}"/>"##,
                cut.len(),
                row_top(r) + 1.0,
                (x1 - x0).max(1.0),
                ROW - 2.0,
                0.15 + 0.55 * share.min(1.0)
            );
        }
    }

    // Downtime, restarts and view changes.
    let mut down_since: BTreeMap<u32, u64> = BTreeMap::new();
    let draw_down = |s: &mut String, r: u32, from: u64, to: u64| {
        let (x0, x1) = (axis.x(from), axis.x(to));
        let _ = writeln!(
            s,
            r##"<rect class="down" data-replica="{r}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#bbbbbb" fill-opacity="0.85"/>"##,
            row_top(r) + 1.0,
            (x1 - x0).max(1.0),
            ROW - 2.0
        );
    };
    for m in &o.events.marks {
        if m.replica >= n {
            continue;
        }
        let y = row_top(m.replica);
        let x = axis.x(m.sim_ms);
        match m.kind {
            MarkKind::Crash => {
                down_since.insert(m.replica, m.sim_ms);
            }
            MarkKind::Restart => {
                if let Some(from) = down_since.remove(&m.replica) {
                    draw_down(&mut s, m.replica, from, m.sim_ms);
                }
                let _ = writeln!(
                    s,
                    r##"<line class="restart" data-replica="{}" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#1a9641" stroke-width="2"/>"##,
                    m.replica,
                    y + 1.0,
                    y + ROW - 1.0
                );
            }
            MarkKind::StateTransferred { from_seq, to_seq } => {
                let _ = writeln!(
                    s,
                    r##"<path class="state-transfer" data-replica="{}" data-from-seq="{from_seq}" data-to-seq="{to_seq}" d="M {:.1} {:.1} l 7 4 l -7 4 z" fill="#e66101"><title>state transfer: batches {from_seq}..={to_seq} skipped</title></path>"##,
                    m.replica,
                    x,
                    y + 1.0
                );
            }
            MarkKind::ViewChange { view } => {
                let _ = writeln!(
                    s,
                    r##"<path class="view-change" data-replica="{}" data-view="{view}" d="M {:.1} {:.1} l -4 -7 l 8 0 z" fill="#7b3294"><title>view {view}</title></path>"##,
                    m.replica,
                    x,
                    y + ROW - 1.0
                );
            }
        }
    }
    for (r, from) in down_since {
        draw_down(&mut s, r, from, axis.span_ms);
    }

    // The heal.
    let hx = axis.x(o.config.duration_ms);
    let _ = writeln!(
        s,
        r##"<line class="heal" x1="{hx:.1}" y1="{:.1}" x2="{hx:.1}" y2="{:.1}" stroke="#444444" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#444444" text-anchor="end">faults heal</text>"##,
        TOP - 6.0,
        row_top(n),
        hx - 3.0,
        TOP - 8.0
    );

    // Fires.
    for e in &o.events.fires {
        if e.replica >= n {
            continue;
        }
        let k = (e.component, e.position);
        let l = lane.get(&k).copied().unwrap_or(0);
        let cy = row_top(e.replica) + ROW * (l as f64 + 1.0) / (lanes as f64 + 1.0);
        let mut attrs = format!(
            r#"class="fire" data-replica="{}" data-component="{}" data-position="{}" data-seq="{}""#,
            e.replica, e.component, e.position, e.seq
        );
        if let Some(id) = e.schedule {
            let _ = write!(attrs, r#" data-schedule="{id}""#);
        }
        if let Some(t) = e.agreed_time_ms {
            let _ = write!(attrs, r#" data-agreed-ms="{t}""#);
        }
        if let Some(late) = e.lateness_ms {
            let _ = write!(attrs, r#" data-lateness-ms="{late}""#);
        }
        let _ = writeln!(
            s,
            r#"<circle {attrs} cx="{:.1}" cy="{cy:.1}" r="3" fill="{}"/>"#,
            axis.x(at(e)),
            colour(&k)
        );
    }

    // What is counted but not drawn, said on the row.
    let mut drawn: BTreeMap<u32, u64> = BTreeMap::new();
    for e in &o.events.fires {
        *drawn.entry(e.replica).or_insert(0) += 1;
    }
    for node in &o.nodes {
        let total: u64 = node.fires.values().sum();
        let shown = drawn.get(&node.id).copied().unwrap_or(0);
        if total > shown {
            let note = format!(
                "{} more fire(s) in this replica's count, not drawn (state transfer or cap)",
                total - shown
            );
            let _ = writeln!(
                s,
                r##"<text class="note" data-replica="{}" x="{:.1}" y="{:.1}" text-anchor="end" font-size="10" fill="#555555">{}</text>"##,
                node.id,
                WIDTH - RIGHT - 4.0,
                row_top(node.id) + 11.0,
                escape(&note)
            );
        }
    }

    // Axis.
    let base = row_top(n);
    let _ = writeln!(
        s,
        r##"<line class="axis" x1="{LEFT}" y1="{base:.1}" x2="{:.1}" y2="{base:.1}" stroke="#000000"/>"##,
        WIDTH - RIGHT
    );
    let step = tick_step(axis.span_ms);
    let mut t = 0;
    while t <= axis.span_ms {
        let x = axis.x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{base:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000000"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            base + 5.0,
            base + 18.0,
            escape(&format_ms(t))
        );
        t = t.saturating_add(step);
        if step == 0 {
            break;
        }
    }
    let caption = format!(
        "agreed time since the run's epoch (fires); simulated time (faults, restarts, view changes){}",
        if o.events.fires_dropped > 0 || o.events.marks_dropped > 0 {
            format!(
                "; {} fire event(s) and {} mark(s) beyond the cap not drawn",
                o.events.fires_dropped, o.events.marks_dropped
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        r#"<text class="caption" x="{LEFT}" y="{:.1}">{}</text>"#,
        base + 40.0,
        escape(&caption)
    );
    s.push_str("</svg>\n");
    s
}

/// A round step for about ten axis ticks over `span_ms`.
fn tick_step(span_ms: u64) -> u64 {
    let raw = (span_ms / 10).max(1);
    let mut step = 1;
    while step < raw {
        for m in [2, 5, 10] {
            if step.saturating_mul(m) >= raw {
                return step.saturating_mul(m);
            }
        }
        step = step.saturating_mul(10);
    }
    step
}

fn format_ms(ms: u64) -> String {
    if ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else {
        format!("{:.1} s", ms as f64 / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup() {
        assert_eq!(
            escape(r#"<a & 'b' "c">"#),
            "&lt;a &amp; &apos;b&apos; &quot;c&quot;&gt;"
        );
        assert_eq!(escape("x\u{1}y"), "x\u{fffd}y");
    }

    #[test]
    fn tick_steps_are_round() {
        assert_eq!(tick_step(10_000), 1_000);
        assert_eq!(tick_step(25_000), 5_000);
        assert_eq!(tick_step(3), 1);
        assert_eq!(format_ms(2_500), "2.5 s");
        assert_eq!(format_ms(3_000), "3 s");
    }
}
