//! The timeline picture is honest: its fire marks are the JSON report's fire events, replica by
//! replica and component/position by component/position, and (in these runs, without state
//! transfer past a fire) the report's fire counts; the SVG is well-formed and its text escaped.

use std::collections::BTreeMap;
use std::process::Command;

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sim-bft-timeline-{}-{name}", std::process::id()))
}

/// Runs `sim-bft run ARGS --fire-events --json .. --timeline ..`; returns (report, svg).
fn run(tag: &str, args: &[&str]) -> (serde_json::Value, String) {
    let (json, svg) = (tmp(&format!("{tag}.json")), tmp(&format!("{tag}.svg")));
    let out = Command::new(env!("CARGO_BIN_EXE_sim-bft"))
        .arg("run")
        .args(args)
        .arg("--fire-events")
        .arg("--json")
        .arg(&json)
        .arg("--timeline")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(json);
    let _ = std::fs::remove_file(svg);
    (report, text)
}

/// The value of attribute `name` in the tag text `tag` (`<circle a="1" ...`).
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let len = tag[at..].find('"')?;
    Some(&tag[at..at + len])
}

/// Every tag of `svg`, checked: balanced open/close, no stray `<`, `>` or `&` in text or
/// attribute values (only the five entities). Returns the tags' texts (`<...>`).
fn tags(svg: &str) -> Vec<&str> {
    let mut stack: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        check_text(&rest[..open]);
        let close = rest[open..].find('>').expect("unclosed tag") + open;
        let tag = &rest[open..=close];
        assert!(!tag[1..tag.len() - 1].contains('<'), "'<' inside {tag}");
        let inner = &tag[1..tag.len() - 1];
        if let Some(name) = inner.strip_prefix('/') {
            let top = stack.pop().expect("close without open");
            assert_eq!(top, name.trim(), "mismatched </{name}>");
        } else {
            let name = inner
                .split(|c: char| c.is_whitespace() || c == '/')
                .next()
                .unwrap();
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "bad tag name in {tag}"
            );
            // Attribute values: quoted, entity-only ampersands.
            let quotes = inner.matches('"').count();
            assert_eq!(quotes % 2, 0, "unbalanced quotes in {tag}");
            for (i, v) in inner.split('"').enumerate() {
                if i % 2 == 1 {
                    check_text(v);
                }
            }
            if !inner.ends_with('/') {
                stack.push(name);
            }
        }
        out.push(tag);
        rest = &rest[close + 1..];
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    out
}

fn check_text(t: &str) {
    assert!(!t.contains('>'), "unescaped '>' in {t:?}");
    let mut rest = t;
    while let Some(at) = rest.find('&') {
        let after = &rest[at..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| after.starts_with(e)),
            "unescaped '&' in {t:?}"
        );
        rest = &rest[at + 1..];
    }
}

/// Fire marks per replica, per `"<component>/<position>"`.
fn marks(svg: &str) -> BTreeMap<u64, BTreeMap<String, u64>> {
    let mut m: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
    for t in tags(svg) {
        if t.starts_with("<circle") && attr(t, "class") == Some("fire") {
            let r: u64 = attr(t, "data-replica").unwrap().parse().unwrap();
            let key = format!(
                "{}/{}",
                attr(t, "data-component").unwrap(),
                attr(t, "data-position").unwrap()
            );
            assert!(attr(t, "data-seq").unwrap().parse::<u64>().unwrap() > 0);
            *m.entry(r).or_default().entry(key).or_insert(0) += 1;
        }
    }
    m
}

fn counts(v: &serde_json::Value) -> BTreeMap<String, u64> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect()
}

/// The picture's marks equal the report's fire events and fire counts, replica by replica.
fn assert_honest(report: &serde_json::Value, svg: &str) {
    let drawn = marks(svg);
    let events = report["fire_events"].as_array().unwrap();
    assert_eq!(report["fire_events_dropped"], 0);
    let mut total = 0;
    for n in report["nodes"].as_array().unwrap() {
        let id = n["id"].as_u64().unwrap();
        let fires = counts(&n["fires"]);
        let recorded = counts(&n["fire_events"]);
        let listed = events
            .iter()
            .filter(|e| e["replica"].as_u64() == Some(id))
            .count() as u64;
        let mine = drawn.get(&id).cloned().unwrap_or_default();
        assert_eq!(mine, recorded, "replica {id}: marks vs fire_events");
        assert_eq!(mine, fires, "replica {id}: marks vs fires");
        assert_eq!(mine.values().sum::<u64>(), listed, "replica {id}");
        assert!(
            !fires.is_empty(),
            "replica {id} fired nothing: a vacuous check"
        );
        total += listed;
    }
    assert_eq!(total, events.len() as u64);
    // Byzantine replicas are labelled.
    for n in report["nodes"].as_array().unwrap() {
        if n["honest"] == false {
            assert!(svg.contains(&format!("replica {} (Byzantine: ", n["id"])));
        }
    }
}

#[test]
fn demo_timeline_marks_equal_the_report_fires() {
    let (report, svg) = run(
        "demo",
        &[
            "--seed",
            "7",
            "--duration",
            "20s",
            "--liveness",
            "20s",
            "--crash",
            "1",
            "--partition",
            "isolate",
            "--byzantine",
            "1",
        ],
    );
    assert_honest(&report, &svg);
    // The faults are drawn.
    let tags = tags(&svg);
    let has = |class: &str| tags.iter().any(|t| attr(t, "class") == Some(class));
    assert!(has("down") && has("restart") && has("partition") && has("view-change"));
    let marks = report["replica_marks"].as_array().unwrap();
    assert!(marks.iter().any(|m| m["kind"] == "crash"));
    let vc: u64 = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["view_changes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        vc,
        marks.iter().filter(|m| m["kind"] == "view-change").count() as u64
    );
}

#[test]
fn orders_timeline_marks_equal_the_report_fires() {
    let (report, svg) = run(
        "orders",
        &[
            "--seed",
            "3",
            "--ledger",
            "orders",
            "--duration",
            "10s",
            "--liveness",
            "10s",
        ],
    );
    assert_honest(&report, &svg);
    // Book runs name their schedule, and say how late they ran.
    let first = &report["fire_events"][0];
    assert!(first["schedule"].is_u64(), "{first}");
    assert!(first["lateness_ms"].is_i64(), "{first}");
}

#[test]
fn timeline_is_refused_with_seeds_before_running() {
    let out = Command::new(env!("CARGO_BIN_EXE_sim-bft"))
        .args(["run", "--seeds", "1..3", "--timeline"])
        .arg(tmp("never.svg"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeline"));
    let bad = Command::new(env!("CARGO_BIN_EXE_sim-bft"))
        .args(["run", "--timeline", "/nonexistent-dir/x.svg"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot write timeline"));
    assert!(bad.stdout.is_empty(), "the run started before the check");
}

#[test]
fn the_checker_rejects_bad_markup() {
    for bad in ["<a><b></a>", "<a>x & y</a>", "<a t=\"<\"/>", "<a>"] {
        assert!(std::panic::catch_unwind(|| tags(bad)).is_err(), "{bad}");
    }
    assert_eq!(tags("<a t=\"&amp;\"><b/>x &lt; y</a>").len(), 3);
}
