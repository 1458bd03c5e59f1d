//! Rendering answers: human tables (the default) and JSON (`--json`).

use ccron::Due;
use ccron::schedule::query::{
    BookState, EntryDetail, EntryMisfire, EntryPage, EntryRetirement, EntryRule, EntrySummary,
    OutboxState, ScheduleDetail, ScheduleList, SchedulePolicies, ScheduleSummary, Upcoming,
};
use ccron::schedule::{Misfire, Overlap, Principal, RunEntry, RunOutcome, Timing};
use serde_json::{Value, json};

/// `2026-11-27T01:02:03.004Z` for a Unix-ms instant (the raw number when out of range).
pub fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
    )
}

/// An instant in local time of a zone with offset `offset_s`, e.g. `2026-11-27T03:00:00+02:00`.
pub fn local(ms: i64, offset_s: i32) -> String {
    let Some(off) = chrono::FixedOffset::east_opt(offset_s) else {
        return utc(ms);
    };
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| {
            t.with_timezone(&off)
                .format("%Y-%m-%dT%H:%M:%S%:z")
                .to_string()
        },
    )
}

/// A due point.
pub fn due(d: &Due) -> String {
    match d {
        Due::Time(ms) => utc(*ms),
        Due::Seq(s) => format!("seq {s}"),
    }
}

fn due_json(d: &Due) -> Value {
    match d {
        Due::Time(ms) => json!({"time_ms": ms, "utc": utc(*ms)}),
        Due::Seq(s) => json!({"seq": s}),
    }
}

/// A timing, short.
pub fn timing(t: &Timing) -> String {
    match t {
        Timing::Cron { expression, zone } => match zone {
            Some(z) => format!("cron \"{expression}\" {z}"),
            None => format!("cron \"{expression}\" UTC"),
        },
        Timing::Every {
            period_ms,
            start_ms,
        } => match start_ms {
            Some(s) => format!("every {period_ms}ms from {}", utc(*s)),
            None => format!("every {period_ms}ms"),
        },
        Timing::At(d) => format!("at {}", due(d)),
        Timing::AfterMs(ms) => format!("after {ms}ms"),
        Timing::AfterSeqs(n) => format!("after {n} seqs"),
        Timing::AtOrSeq { at_ms, seq } => format!("at {} or seq {seq}", utc(*at_ms)),
        Timing::AfterMsOrSeqs {
            delay_ms,
            delay_seqs,
        } => format!("after {delay_ms}ms or {delay_seqs} seqs"),
    }
}

fn principal(p: &Principal) -> String {
    match p {
        Principal::Host => "host".into(),
        Principal::Client(c) => format!("client:{c}"),
        Principal::LegacyClient(n) => format!("legacy:{n}"),
    }
}

fn state(s: &ScheduleSummary) -> String {
    let mut parts = Vec::new();
    if s.paused {
        parts.push("paused".to_string());
    }
    if s.parked {
        parts.push("parked".to_string());
    }
    if s.retry_pending {
        parts.push("retrying".to_string());
    }
    if s.dead > 0 {
        parts.push(format!("dead:{}", s.dead));
    }
    if s.owed.is_some() {
        parts.push("owed".to_string());
    }
    if parts.is_empty() {
        "active".into()
    } else {
        parts.join(",")
    }
}

fn outcome(o: &RunOutcome) -> String {
    match o {
        RunOutcome::Ok => "ok".into(),
        RunOutcome::Failed { code } => format!("failed({code})"),
        RunOutcome::Panicked => "panicked".into(),
    }
}

/// An overlap policy as the CLI names it (`--overlap`): `allow-all`, `skip`, `buffer-one`,
/// `buffer-all`; `cancel-other` (shown by `describe`; `--overlap` takes only a backfill's
/// policies, and a backfill refuses it).
pub fn overlap(o: Overlap) -> &'static str {
    match o {
        Overlap::AllowAll => "allow-all",
        Overlap::Skip => "skip",
        Overlap::BufferOne => "buffer-one",
        Overlap::BufferAll => "buffer-all",
        Overlap::CancelOther => "cancel-other",
    }
}

/// What a description says when its node answered query format 3 (no policies).
const NOT_REPORTED: &str = "not reported (a node answered query format 3)";

fn policies_json(p: Option<&SchedulePolicies>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "calendar": p.calendar,
            "overlap": overlap(p.overlap),
            "awaiting": p.awaiting,
            "buffered": p.buffered,
            "backfill_overlap": p.backfill_overlap.map(overlap),
            "backfill_awaiting": p.backfill_awaiting,
        }),
    }
}

fn misfire(m: &Misfire) -> String {
    match m {
        Misfire::Skip => "skip".into(),
        Misfire::FireOnce => "fire-once".into(),
        Misfire::FireEach { cap } => format!("fire-each(cap {cap})"),
        Misfire::ExpireAfter { deadline_ms } => format!("expire-after({deadline_ms}ms)"),
    }
}

/// Lays out rows as a table with a header, columns padded to their widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                let pad = w[i].saturating_sub(c.chars().count());
                s.push_str(c);
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.clone()));
        out.push('\n');
    }
    out
}

fn summary_json(s: &ScheduleSummary) -> Value {
    json!({
        "id": s.id,
        "key": s.key,
        "handler": s.handler,
        "timing": timing(&s.timing),
        "owner": principal(&s.owner),
        "version": s.version,
        "paused": s.paused,
        "parked": s.parked,
        "next": s.next.as_ref().map(due_json),
        "runs": s.runs,
        "owed": s.owed.map(|(a, b)| json!([a, b])),
        "retry_pending": s.retry_pending,
        "dead": s.dead,
        "priority": s.priority,
        "topic": s.topic,
        "kind": s.kind,
        "state": state(s),
    })
}

/// What a list says of the table entries when its node answered query format 4 or older.
const ENTRIES_NOT_REPORTED: &str = "not reported (a node answered query format 4 or older)";

/// What a table entry's overlap counts show when a node of format 6 or older answered.
const COUNTS_NOT_REPORTED: &str = "not reported (a node answered query format 6 or older)";

/// What the CLI calls a cron table entry (the `kind` of a listed or described entry).
pub const TABLE_ENTRY: &str = "table entry";

/// A table entry's name on the command line: `entry:C:P`.
pub fn entry_name(e: &EntrySummary) -> String {
    format!("entry:{}:{}", e.component, e.position)
}

fn entry_misfire(m: EntryMisfire) -> String {
    match m {
        EntryMisfire::FireOnce => "fire-once".into(),
        EntryMisfire::SkipMissed => "skip-missed".into(),
        EntryMisfire::FireEach { cap } => format!("fire-each(cap {cap})"),
        EntryMisfire::FromTickTime => "from-tick-time".into(),
    }
}

/// A table entry's rule, short: what it can say of it (`opaque rule` for code).
pub fn entry_rule(r: &EntryRule) -> String {
    match r {
        EntryRule::Opaque => "opaque rule (code)".into(),
        EntryRule::OpaqueSchedule => "opaque schedule".into(),
        EntryRule::Periodic {
            period_ms,
            start_ms,
            aligned,
            misfire: m,
            calendar,
        } => {
            let mut t = format!("every {period_ms}ms");
            if let Some(s) = start_ms {
                t.push_str(&format!(" from {}", utc(*s)));
            } else if *aligned {
                t.push_str(" aligned");
            }
            if *m != EntryMisfire::FireOnce {
                t.push_str(&format!(", misfire {}", entry_misfire(*m)));
            }
            if let Some(c) = calendar {
                t.push_str(&format!(", except calendar {c}"));
            }
            t
        }
        EntryRule::Cron {
            expression,
            zone,
            after_ms,
            misfire: m,
            calendar,
            until_ms,
            max_runs,
        } => {
            let mut t = format!("cron \"{expression}\" {zone}");
            if let Some(a) = after_ms {
                t.push_str(&format!(" after {}", utc(*a)));
            }
            if *m != Misfire::FireOnce {
                t.push_str(&format!(", misfire {}", misfire(m)));
            }
            if let Some(c) = calendar {
                t.push_str(&format!(", except calendar {c}"));
            }
            if let Some(u) = until_ms {
                t.push_str(&format!(", until {}", utc(*u)));
            }
            if let Some(n) = max_runs {
                t.push_str(&format!(", at most {n} runs"));
            }
            t
        }
        EntryRule::EverySeq { every } => format!("every {every} seqs"),
    }
}

fn entry_rule_json(r: &EntryRule) -> Value {
    match r {
        EntryRule::Opaque => json!({"type": "opaque rule"}),
        EntryRule::OpaqueSchedule => json!({"type": "opaque schedule"}),
        EntryRule::Periodic {
            period_ms,
            start_ms,
            aligned,
            misfire: m,
            calendar,
        } => json!({
            "type": "periodic",
            "period_ms": period_ms,
            "start_ms": start_ms,
            "aligned": aligned,
            "misfire": entry_misfire(*m),
            "calendar": calendar,
        }),
        EntryRule::Cron {
            expression,
            zone,
            after_ms,
            misfire: m,
            calendar,
            until_ms,
            max_runs,
        } => json!({
            "type": "cron",
            "expression": expression,
            "zone": zone,
            "after_ms": after_ms,
            "misfire": misfire(m),
            "calendar": calendar,
            "until_ms": until_ms,
            "max_runs": max_runs,
        }),
        EntryRule::EverySeq { every } => json!({"type": "every-seq", "every": every}),
    }
}

fn retirement(r: EntryRetirement) -> &'static str {
    match r {
        EntryRetirement::Ended => "retired: its end passed",
        EntryRetirement::RunLimit => "retired: its run limit is reached",
        EntryRetirement::Stopped => "retired: its schedule has no further instant",
    }
}

fn entry_state(e: &EntrySummary) -> String {
    let mut parts = Vec::new();
    match e.retired {
        Some(r) => parts.push(retirement(r).to_string()),
        None => parts.push("active".to_string()),
    }
    if e.awaiting {
        parts.push("awaiting a result".to_string());
    }
    parts.join(", ")
}

fn entry_json(e: &EntrySummary) -> Value {
    json!({
        "kind": TABLE_ENTRY,
        "name": entry_name(e),
        "component": e.component,
        "position": e.position,
        "rule": entry_rule_json(&e.rule),
        "rule_text": entry_rule(&e.rule),
        "overlap": overlap(e.overlap),
        "schedule_next": e.schedule_next,
        "on_remove": e.on_remove,
        "next": e.next.as_ref().map(due_json),
        "stored": e.stored,
        "retired": e.retired.map(retirement),
        "fired": e.fired,
        // Query format 7; null when a node of an older format answered.
        "skipped": e.overlap_counts.map(|c| c.skipped),
        "held": e.overlap_counts.map(|c| c.held),
        "awaiting": e.awaiting,
        "state": entry_state(e),
    })
}

fn entries_json(p: Option<&EntryPage>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "matched": p.matched,
            "next": p.next.map(|c| format!("{}:{}", c.component, c.position)),
            "items": p.items.iter().map(entry_json).collect::<Vec<_>>(),
        }),
    }
}

/// A list: the book's schedules, then the cron table entries (query format 5).
pub fn list(height: u64, l: &ScheduleList, as_json: bool) -> String {
    if as_json {
        return json!({
            "at_height": height,
            "component": l.component,
            "matched": l.matched,
            "next_after": l.next_after,
            "items": l.items.iter().map(summary_json).collect::<Vec<_>>(),
            // `null` when a node answered query format 4 or older (not reported).
            "entries": entries_json(l.entries.as_ref()),
        })
        .to_string();
    }
    let rows: Vec<Vec<String>> = l
        .items
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                s.key.clone().unwrap_or_else(|| "-".into()),
                s.handler.clone(),
                timing(&s.timing),
                s.next.as_ref().map_or("-".into(), due),
                s.runs.to_string(),
                state(s),
                principal(&s.owner),
                s.version.to_string(),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "ID", "KEY", "HANDLER", "TIMING", "NEXT", "RUNS", "STATE", "OWNER", "VER",
        ],
        &rows,
    );
    out.push_str(&format!(
        "{} of {} matching, component {}, at height {height}",
        l.items.len(),
        l.matched,
        l.component
    ));
    if let Some(a) = l.next_after {
        out.push_str(&format!(" (more: --after {a})"));
    }
    out.push('\n');
    match &l.entries {
        None => out.push_str(&format!("table entries: {ENTRIES_NOT_REPORTED}\n")),
        Some(p) if p.matched == 0 => {}
        Some(p) => {
            if !p.items.is_empty() {
                let rows: Vec<Vec<String>> = p
                    .items
                    .iter()
                    .map(|e| {
                        vec![
                            entry_name(e),
                            TABLE_ENTRY.to_string(),
                            entry_rule(&e.rule),
                            e.next.as_ref().map_or("-".into(), due),
                            e.fired.to_string(),
                            entry_state(e),
                            overlap(e.overlap).to_string(),
                        ]
                    })
                    .collect();
                out.push_str(&table(
                    &["ENTRY", "KIND", "RULE", "NEXT", "FIRED", "STATE", "OVERLAP"],
                    &rows,
                ));
            }
            out.push_str(&format!(
                "{} of {} table entries matching",
                p.items.len(),
                p.matched
            ));
            if let Some(c) = p.next {
                out.push_str(&format!(
                    " (more: --entries-from {}:{})",
                    c.component, c.position
                ));
            } else if l.next_after.is_some() {
                out.push_str(" (after the schedules: --after)");
            }
            out.push('\n');
        }
    }
    out
}

/// A table entry's description (or its preview part).
pub fn entry_detail(height: u64, d: &EntryDetail, view: View, as_json: bool) -> String {
    let e = &d.summary;
    if as_json {
        let mut v = json!({"at_height": height, "kind": TABLE_ENTRY, "name": entry_name(e)});
        if let Some(o) = v.as_object_mut() {
            if view == View::Describe {
                o.insert("entry".into(), entry_json(e));
            }
            o.insert("upcoming".into(), json!(upcoming_json(&d.upcoming)));
            o.insert("upcoming_computable".into(), json!(d.computable));
        }
        return v.to_string();
    }
    let mut out = format!(
        "{TABLE_ENTRY} {} (component {}, position {}) at height {height}\n",
        entry_name(e),
        e.component,
        e.position
    );
    if view == View::Describe {
        let mut callbacks = Vec::new();
        if e.schedule_next {
            callbacks.push("schedule-next");
        }
        if e.on_remove {
            callbacks.push("on-remove");
        }
        let kv = [
            ("kind", TABLE_ENTRY.to_string()),
            ("rule", entry_rule(&e.rule)),
            ("overlap", overlap(e.overlap).to_string()),
            ("state", entry_state(e)),
            (
                "next",
                match (&e.next, e.stored) {
                    (Some(n), true) => due(n),
                    (Some(n), false) => format!("{} (its start; never stepped)", due(n)),
                    (None, _) if matches!(e.rule, EntryRule::Opaque) => {
                        "- (its rule is asked on every tick)".into()
                    }
                    (None, _) => "- (armed by its first tick with agreed time)".into(),
                },
            ),
            ("fired", e.fired.to_string()),
            (
                "diverted",
                match e.overlap_counts {
                    Some(c) => format!("skipped {}, held {}", c.skipped, c.held),
                    None => COUNTS_NOT_REPORTED.to_string(),
                },
            ),
            (
                "callbacks",
                if callbacks.is_empty() {
                    "-".into()
                } else {
                    callbacks.join(", ")
                },
            ),
        ];
        for (k, v) in kv {
            out.push_str(&format!("  {k:<9} {v}\n"));
        }
    }
    out.push_str("upcoming:\n");
    if d.computable {
        out.push_str(&upcoming_lines(&d.upcoming));
    } else {
        out.push_str("  (not computable: its rule is code, or it is armed by its first tick)\n");
    }
    out
}

fn history_rows(h: &[RunEntry]) -> Vec<Vec<String>> {
    h.iter()
        .map(|r| {
            vec![
                r.occurrence.to_string(),
                due(&r.due),
                r.attempt.to_string(),
                r.seq.to_string(),
                r.agreed_time_ms.map_or("-".into(), utc),
                outcome(&r.outcome),
                r.emitted.map_or("-".into(), |i| i.to_string()),
            ]
        })
        .collect()
}

fn history_json(h: &[RunEntry]) -> Vec<Value> {
    h.iter()
        .map(|r| {
            json!({
                "occurrence": r.occurrence,
                "due": due_json(&r.due),
                "attempt": r.attempt,
                "seq": r.seq,
                "agreed_time_ms": r.agreed_time_ms,
                "outcome": outcome(&r.outcome),
                "emitted": r.emitted,
            })
        })
        .collect()
}

fn upcoming_json(u: &[Upcoming]) -> Vec<Value> {
    u.iter()
        .map(|x| {
            let mut v = due_json(&x.due);
            if let (Due::Time(ms), Some(o)) = (x.due, v.as_object_mut()) {
                o.insert("local".into(), json!(local(ms, x.utc_offset_s)));
                o.insert("utc_offset_s".into(), json!(x.utc_offset_s));
            }
            v
        })
        .collect()
}

fn upcoming_lines(u: &[Upcoming]) -> String {
    let mut out = String::new();
    for x in u {
        match x.due {
            Due::Time(ms) => {
                out.push_str(&format!("  {}  ({})\n", utc(ms), local(ms, x.utc_offset_s)))
            }
            Due::Seq(s) => out.push_str(&format!("  seq {s}\n")),
        }
    }
    if u.is_empty() {
        out.push_str("  (none)\n");
    }
    out
}

/// What to show of a description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Everything.
    Describe,
    /// The upcoming instants.
    Preview,
    /// Recent runs and dead runs.
    History,
}

/// A description (or its preview or history part).
pub fn detail(height: u64, d: &ScheduleDetail, view: View, as_json: bool) -> String {
    let s = &d.summary;
    if as_json {
        let mut v = json!({"at_height": height, "id": s.id, "key": s.key});
        let o = v.as_object_mut();
        if let Some(o) = o {
            if view == View::Describe {
                o.insert("summary".into(), summary_json(s));
                o.insert(
                    "definition".into(),
                    json!({
                        "misfire": misfire(&d.schedule.misfire),
                        "priority": d.schedule.priority,
                        "jitter_ms": d.schedule.jitter_ms,
                        "payload_bytes": d.schedule.payload.len(),
                    }),
                );
                o.insert(
                    "policy".into(),
                    json!({
                        "max_attempts": d.policy.retry.max_attempts,
                        "backoff_base_ms": d.policy.retry.backoff_base_ms,
                        "backoff_cap_ms": d.policy.retry.backoff_cap_ms,
                        "pause_on_failure": d.policy.pause_on_failure,
                    }),
                );
                o.insert(
                    "counters".into(),
                    json!({
                        "runs": d.counters.runs,
                        "dead_held": d.counters.dead_held,
                        "dead_evicted": d.counters.dead_evicted,
                        "recent_ok": d.counters.recent_ok,
                        "recent_failed": d.counters.recent_failed,
                        "fired": d.counters.fired,
                        "failed": d.counters.failed,
                        "late": d.counters.late,
                        "skipped": d.counters.skipped,
                        "expired": d.counters.expired,
                        "retired": d.counters.retired,
                    }),
                );
                o.insert(
                    "manual".into(),
                    json!({
                        "trigger_ms": d.manual.trigger,
                        "backfill_next_ms": d.manual.backfill.map(|b| b.0),
                        "backfill_last_ms": d.manual.backfill.map(|b| b.1),
                        "backfill_left": d.manual.backfill_left,
                        "backfill_overlap": d.policies.as_ref().and_then(|p| p.backfill_overlap.map(overlap)),
                    }),
                );
                // `null` when the answer was format 3 (not reported).
                o.insert("policies".into(), policies_json(d.policies.as_ref()));
            }
            if view != View::History {
                o.insert("upcoming".into(), json!(upcoming_json(&d.upcoming)));
            }
            if view != View::Preview {
                o.insert("history".into(), json!(history_json(&d.history)));
                o.insert(
                    "dead".into(),
                    json!(
                        d.dead
                            .iter()
                            .map(|r| json!({
                                "occurrence": r.occurrence,
                                "due": due_json(&r.due),
                                "attempts": r.attempts,
                                "outcome": outcome(&r.outcome),
                                "seq": r.seq,
                            }))
                            .collect::<Vec<_>>()
                    ),
                );
            }
        }
        return v.to_string();
    }
    let mut out = String::new();
    let name = s.key.clone().map_or(String::new(), |k| format!(" ({k})"));
    out.push_str(&format!("schedule {}{name} at height {height}\n", s.id));
    if view == View::Describe {
        let kv = [
            ("handler", s.handler.clone()),
            ("timing", timing(&s.timing)),
            ("misfire", misfire(&d.schedule.misfire)),
            ("state", state(s)),
            ("owner", principal(&s.owner)),
            ("version", s.version.to_string()),
            ("next", s.next.as_ref().map_or("-".into(), due)),
            ("priority", s.priority.to_string()),
            ("jitter", format!("{}ms", d.schedule.jitter_ms)),
            ("topic", s.topic.clone().unwrap_or_else(|| "-".into())),
            ("kind", s.kind.clone().unwrap_or_else(|| "-".into())),
            ("payload", format!("{} bytes", d.schedule.payload.len())),
            (
                "retries",
                format!(
                    "{} attempts, backoff {}..{}ms{}",
                    d.policy.retry.max_attempts,
                    d.policy.retry.backoff_base_ms,
                    d.policy.retry.backoff_cap_ms,
                    if d.policy.pause_on_failure {
                        ", pause on failure"
                    } else {
                        ""
                    }
                ),
            ),
            (
                "counters",
                format!(
                    "runs {}, fired {} (failed {}), late {}, skipped {}, expired {}, retired {}, recent ok {}, recent failed {}, dead {} (evicted {})",
                    d.counters.runs,
                    d.counters.fired,
                    d.counters.failed,
                    d.counters.late,
                    d.counters.skipped,
                    d.counters.expired,
                    d.counters.retired,
                    d.counters.recent_ok,
                    d.counters.recent_failed,
                    d.counters.dead_held,
                    d.counters.dead_evicted
                ),
            ),
        ];
        for (k, v) in kv {
            out.push_str(&format!("  {k:<9} {v}\n"));
        }
        match &d.policies {
            Some(p) => {
                out.push_str(&format!(
                    "  calendar  {}\n",
                    p.calendar.as_deref().unwrap_or("-")
                ));
                let mut o = overlap(p.overlap).to_string();
                if let Some(occ) = p.awaiting {
                    o.push_str(&format!(", awaiting occurrence {occ}"));
                }
                if p.buffered > 0 {
                    o.push_str(&format!(", {} buffered", p.buffered));
                }
                out.push_str(&format!("  overlap   {o}\n"));
            }
            None => {
                out.push_str(&format!("  calendar  {NOT_REPORTED}\n"));
                out.push_str(&format!("  overlap   {NOT_REPORTED}\n"));
            }
        }
        if let Some((a, b)) = s.owed {
            out.push_str(&format!("  owed      {} .. {}\n", utc(a), utc(b)));
        }
        if let Some(t) = d.manual.trigger {
            out.push_str(&format!("  trigger   pending, nominal {}\n", utc(t)));
        }
        if let Some((next, last)) = d.manual.backfill {
            let policy = match &d.policies {
                Some(p) => {
                    let mut o = p.backfill_overlap.map_or("allow-all", overlap).to_string();
                    if let Some(occ) = p.backfill_awaiting {
                        o.push_str(&format!(", awaiting occurrence {occ}"));
                    }
                    o
                }
                None => NOT_REPORTED.to_string(),
            };
            out.push_str(&format!(
                "  backfill  {} runs left, next {} .. {}, overlap {policy}\n",
                d.manual.backfill_left,
                utc(next),
                utc(last)
            ));
        }
        if let Some(r) = &d.retry {
            out.push_str(&format!(
                "  retry     occurrence {} attempt {} at {}\n",
                r.occurrence,
                r.attempt,
                due(&r.at)
            ));
        }
    }
    if view != View::History {
        out.push_str("upcoming:\n");
        out.push_str(&upcoming_lines(&d.upcoming));
    }
    if view != View::Preview {
        out.push_str("recent runs:\n");
        if d.history.is_empty() {
            out.push_str("  (none)\n");
        } else {
            let t = table(
                &[
                    "OCCURRENCE",
                    "DUE",
                    "ATTEMPT",
                    "SEQ",
                    "AGREED",
                    "OUTCOME",
                    "OUTBOX",
                ],
                &history_rows(&d.history),
            );
            for l in t.lines() {
                out.push_str(&format!("  {l}\n"));
            }
        }
        if !d.dead.is_empty() {
            out.push_str("dead runs:\n");
            for r in &d.dead {
                out.push_str(&format!(
                    "  occurrence {} due {} after {} attempts: {}\n",
                    r.occurrence,
                    due(&r.due),
                    r.attempts,
                    outcome(&r.outcome)
                ));
            }
        }
    }
    out
}

/// The cluster's state: the book and outbox (by quorum) and each node's tick pool.
pub fn cluster(
    height: u64,
    book: Option<&BookState>,
    outbox: Option<&OutboxState>,
    pools: &[(String, Result<Value, String>)],
    as_json: bool,
) -> String {
    if as_json {
        return json!({
            "at_height": height,
            "book": book.map(|b| json!({
                "component": b.component,
                "schedules": b.schedules,
                "paused": b.paused,
                "parked": b.parked,
                "retries_pending": b.retries_pending,
                "dead_runs": b.dead_runs,
                "runs": b.runs,
                "earliest_due_ms": b.earliest_due_ms,
                "fired": b.totals.fired,
                "failed": b.totals.failed,
                "late": b.totals.late,
                "skipped": b.totals.skipped,
                "expired": b.totals.expired,
                "retired": b.totals.retired,
                // Query format 6; null when a node of an older format answered.
                "refusals": b.refusals.map(|r| json!({
                    "slot_full": r.slot_full,
                    "calendar": r.calendar,
                    "backfill": r.backfill,
                })),
            })),
            "outbox": outbox.map(|o| json!({
                "first_index": o.first_index,
                "head": o.head,
                "depth": o.held,
                "held_bytes": o.held_bytes,
                "with_result": o.with_result,
                "refused_results": o.refused_results,
            })),
            "tick_pools": pools.iter().map(|(n, r)| match r {
                Ok(v) => json!({"node": n, "pool": v}),
                Err(e) => json!({"node": n, "error": e}),
            }).collect::<Vec<_>>(),
        })
        .to_string();
    }
    let mut out = format!("at height {height} (believed by quorum)\n");
    match book {
        Some(b) => out.push_str(&format!(
            "book:   component {}, {} schedules ({} paused, {} parked, {} retrying), {} dead runs, {} runs, earliest due {}\n        runs ever: fired {} (failed {}), late {}, skipped {}, expired {}, retired {}\n",
            b.component,
            b.schedules,
            b.paused,
            b.parked,
            b.retries_pending,
            b.dead_runs,
            b.runs,
            b.earliest_due_ms.map_or("-".into(), utc),
            b.totals.fired,
            b.totals.failed,
            b.totals.late,
            b.totals.skipped,
            b.totals.expired,
            b.totals.retired
        )),
        None => out.push_str("book:   none\n"),
    }
    if let Some(b) = book {
        out.push_str(&match b.refusals {
            Some(r) => format!(
                "        refused ever: slot full {}, calendar {}, backfill {}\n",
                r.slot_full, r.calendar, r.backfill
            ),
            None => {
                "        refused ever: not reported (a node answered query format 5 or older)\n"
                    .into()
            }
        });
    }
    match outbox {
        Some(o) => out.push_str(&format!(
            "outbox: depth {} ({} bytes), records {}..={}, consumer acknowledged below {}, {} with a result, {} results refused\n",
            o.held, o.held_bytes, o.first_index, o.head, o.first_index, o.with_result, o.refused_results
        )),
        None => out.push_str("outbox: none\n"),
    }
    out.push_str("tick pools (node-local):\n");
    let rows: Vec<Vec<String>> = pools
        .iter()
        .map(|(n, r)| match r {
            Ok(v) => {
                let refused: u64 = v["refused"]
                    .as_object()
                    .map_or(0, |o| o.values().filter_map(Value::as_u64).sum());
                vec![
                    n.clone(),
                    v["pending"].to_string(),
                    v["admitted"].to_string(),
                    refused.to_string(),
                ]
            }
            Err(e) => vec![n.clone(), "-".into(), "-".into(), e.clone()],
        })
        .collect();
    for l in table(&["NODE", "PENDING", "ADMITTED", "REFUSED"], &rows).lines() {
        out.push_str(&format!("  {l}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::schedule::query::describe;
    use ccron::schedule::{Handlers, Limits, NewSchedule, ScheduleRequest, Scheduler, Target};

    /// Schedule 1 (cron) names calendar "weekends", overlap `BufferOne`, and has a backfill
    /// pending under `Skip`; schedule 2 has none of them.
    fn detail_of(id: u64) -> ScheduleDetail {
        let mut h: Handlers<u64> = Handlers::new();
        assert!(h.register("a", |ctx| *ctx.state += 1));
        let mut b = Scheduler::new(1, Limits::default());
        let cron = || Timing::Cron {
            expression: "0 9 * * *".into(),
            zone: None,
        };
        let cal = ccron::cron::ExclusionCalendar::new(
            "weekends",
            vec![ccron::cron::Exclusion::Weekdays { mask: 0b100_0001 }],
        )
        .unwrap();
        for req in [
            ScheduleRequest::InstallCalendar(cal),
            ScheduleRequest::Create(NewSchedule::new("a", cron())),
            ScheduleRequest::Create(NewSchedule::new("a", cron())),
            ScheduleRequest::SetCalendar {
                target: Target::Id(1),
                calendar: Some("weekends".into()),
            },
            ScheduleRequest::SetOverlap {
                target: Target::Id(1),
                overlap: Overlap::BufferOne,
            },
            ScheduleRequest::BackfillWith {
                target: Target::Id(1),
                from_ms: 0,
                to_ms: 86_400_000,
                overlap: Overlap::Skip,
            },
        ] {
            b.apply(&Principal::Host, req, &h, 1, Some(3 * 86_400_000))
                .unwrap();
        }
        describe(&b, &Target::Id(id), 2).unwrap()
    }

    #[test]
    fn describe_shows_the_calendar_and_the_overlap_policies() {
        let d = detail_of(1);
        let text = detail(7, &d, View::Describe, false);
        assert!(text.contains("  calendar  weekends\n"), "{text}");
        assert!(text.contains("  overlap   buffer-one\n"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("  backfill ") && l.ends_with(", overlap skip")),
            "{text}"
        );
        let v: Value = serde_json::from_str(&detail(7, &d, View::Describe, true)).unwrap();
        assert_eq!(v["policies"]["calendar"], "weekends");
        assert_eq!(v["policies"]["overlap"], "buffer-one");
        assert_eq!(v["policies"]["backfill_overlap"], "skip");
        assert_eq!(v["manual"]["backfill_overlap"], "skip");
        // No calendar, the default overlap, no backfill.
        let d = detail_of(2);
        let text = detail(7, &d, View::Describe, false);
        assert!(text.contains("  calendar  -\n"), "{text}");
        assert!(text.contains("  overlap   allow-all\n"), "{text}");
        assert!(!text.contains("backfill"), "{text}");
        let v: Value = serde_json::from_str(&detail(7, &d, View::Describe, true)).unwrap();
        assert_eq!(v["policies"]["calendar"], Value::Null);
        assert_eq!(v["policies"]["backfill_overlap"], Value::Null);
        // An answer of query format 3: said to be not reported, never shown as "none".
        let mut d = detail_of(1);
        d.policies = None;
        let text = detail(7, &d, View::Describe, false);
        assert!(
            text.contains(&format!("  calendar  {NOT_REPORTED}\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("overlap {NOT_REPORTED}\n")),
            "{text}"
        );
        let v: Value = serde_json::from_str(&detail(7, &d, View::Describe, true)).unwrap();
        assert_eq!(v["policies"], Value::Null);
    }
}
