//! Real processes on loopback: the `localnet` contract. Each test runs a short localnet of 4
//! validator processes (the localnet kills its children on every exit path, and nodes exit when
//! the localnet process is gone). The tests run one at a time (a lock) to keep 2 cores usable.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use ccron_node::localnet::{Report, SUBSET_STALL_BOUND_MS};
use ccron_node::records::NodeStatus;

fn localnet(args: &[&str], name: &str) -> (bool, Report) {
    let (ok, report, _, _) = localnet_with(args, "demo", name);
    (ok, report)
}

/// Per node: height -> (digest, requests executed), from its `digests.log`
/// (`height digest agreed_time requests_executed` per executed height).
type DigestLog = BTreeMap<u64, (String, u64)>;

fn read_digest_log(path: &std::path::Path) -> DigestLog {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let v: Vec<&str> = line.split_whitespace().collect();
            let [h, d, _, r] = v[..] else { return None };
            Some((h.parse().ok()?, (d.to_string(), r.parse().ok()?)))
        })
        .collect()
}

/// The highest height at least two of `logs` executed, and the nodes that executed it.
/// (Nodes are stopped one after another at the end of a run, so fewer than two may end at the
/// top height: compare at a height they share instead.)
fn highest_shared(logs: &[DigestLog]) -> Option<(u64, Vec<usize>)> {
    let mut heights: Vec<u64> = logs.iter().flat_map(|l| l.keys().copied()).collect();
    heights.sort_unstable();
    heights.dedup();
    heights.into_iter().rev().find_map(|h| {
        let nodes: Vec<usize> = (0..logs.len())
            .filter(|&i| logs[i].contains_key(&h))
            .collect();
        (nodes.len() >= 2).then_some((h, nodes))
    })
}

/// Runs a localnet of `ledger`; also returns each node's final `status.json` and digests log.
fn localnet_with(
    args: &[&str],
    ledger: &str,
    name: &str,
) -> (bool, Report, Vec<NodeStatus>, Vec<DigestLog>) {
    let (ok, report, dir) = localnet_kept(args, ledger, name);
    let statuses = (0..4)
        .map(|i| {
            let path = dir
                .join("home")
                .join(format!("node-{i}"))
                .join("status.json");
            serde_json::from_slice(&std::fs::read(path).expect("status written"))
                .expect("status parses")
        })
        .collect();
    let logs = (0..4)
        .map(|i| {
            read_digest_log(
                &dir.join("home")
                    .join(format!("node-{i}"))
                    .join("digests.log"),
            )
        })
        .collect();
    if ok {
        let _ = std::fs::remove_dir_all(&dir);
    }
    (ok, report, statuses, logs)
}

/// Runs a localnet of `ledger` and keeps its directory (the caller removes it).
fn localnet_kept(args: &[&str], ledger: &str, name: &str) -> (bool, Report, PathBuf) {
    support::run_localnet("test", name, ledger, args)
}

// Issue 23, item 5: the three others prune their block stores below their snapshots
// (`--retain-blocks 0`); the last node starts late, behind every peer's history, so the
// engine's value sync could never serve it. It catches up from a peer's snapshot verified
// against the commit certificate of the block above it, then syncs the blocks above: it never
// holds a height below the snapshot, and it agrees with the others. It starts once the others
// reach height 300 (`--late-join-at-height`), and the report times its catch-up.
#[test]
fn a_late_joiner_after_the_others_pruned_catches_up_from_a_verified_snapshot() {
    let args = [
        "--duration",
        "60s",
        "--late-join-at-height",
        "300",
        "--no-kill",
        "--retain-blocks",
        "0",
    ];
    caught_up_from_a_snapshot(&args, "catchup", 3, false);
}

// The same for a node whose disk is lost: node 1 is SIGKILLed at 20 s and its home wiped
// (all but its key and its signing state); restarted at 30 s, empty, behind the others' pruned
// histories. Its signing state survived: nothing at or below the heights it signed before the
// kill is signed again (the floor), and it signs above.
#[test]
fn a_wiped_node_catches_up_from_a_verified_snapshot_not_from_height_1() {
    let args = [
        "--duration",
        "60s",
        "--retain-blocks",
        "0",
        "--wipe-restarted",
    ];
    caught_up_from_a_snapshot(&args, "wiped", 1, true);
}

/// Runs the localnet with `args` and checks that node `late` started empty, installed a
/// peer's verified snapshot, never held a height below it, synced only above it, agrees with
/// the others at every shared height and kept up; prints the catch-up time. `wiped`: the node
/// ran before its home was wiped, and kept its signing state (`signing.state`).
fn caught_up_from_a_snapshot(args: &[&str], name: &str, late: usize, wiped: bool) {
    let (ok, r, dir) = localnet_kept(args, "demo", name);
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree, "{r:?}");
    let node = |i: usize| dir.join("home").join(format!("node-{i}"));
    let status = |i: usize| -> NodeStatus {
        serde_json::from_slice(&std::fs::read(node(i).join("status.json")).unwrap()).unwrap()
    };
    let peers: Vec<usize> = (0..4).filter(|&i| i != late).collect();
    let peers_first: Vec<u64> = peers
        .iter()
        .map(|&i| status(i).store_first_height)
        .collect();
    assert!(
        peers_first.iter().all(|&f| f > 1),
        "the peers pruned: {peers_first:?}"
    );
    let report: ccron_node::catchup::fetch::CatchUpReport = serde_json::from_slice(
        &std::fs::read(node(late).join("catchup.json")).expect("the node caught up (catchup.json)"),
    )
    .unwrap();
    let installed = report.installed_height.expect("a snapshot installed");
    // The report's timing of a late joiner: started at the height asked, caught up, from the
    // snapshot `catchup.json` names, behind pruned peers.
    if let Some(lj) = &r.late_join {
        assert_eq!(lj.node, late);
        assert!(lj.started_at_height >= 300, "{lj:?}");
        assert!(
            lj.caught_up_after_ms.is_some(),
            "caught up within the run: {lj:?}"
        );
        assert!(lj.caught_up_at_height >= lj.started_at_height, "{lj:?}");
        assert_eq!(lj.installed_height, Some(installed));
        assert_eq!(lj.install_took_ms, Some(report.took_ms));
        assert!(lj.snapshot_bytes > 0 && lj.peers_first_height > 1, "{lj:?}");
    } else {
        assert!(wiped, "a late joiner's run reports it: {r:?}");
    }
    // The node started empty (a wiped node that had to wait for a snapshot above the heights
    // it signed installs again from the first snapshot's height: `have` is then that one's).
    assert!(
        report.have == 0 || wiped,
        "the node started empty: {report:?}"
    );
    assert!(report.refusals.is_empty(), "{report:?}");
    let s = status(late);
    assert_eq!(
        s.catchup_refused, report.refused_by_kind,
        "status.json counts the refusals"
    );
    // The signing guard: the wiped node restarted with what its key signed before the wipe,
    // so its floor is the highest height it signed then (below the snapshot it installed:
    // it could start), and it signed again above it; no node's guard refused anything.
    assert!(node(late).join("signing.state").exists());
    if wiped {
        assert!(
            s.signing.floor > 0 && s.signing.floor <= installed + 1,
            "floor {} of the wiped node (snapshot at {installed})",
            s.signing.floor
        );
    } else {
        assert_eq!(s.signing.floor, 0, "a late joiner never signed before");
    }
    assert!(s.signing.signed > 0, "{:?}", s.signing);
    for i in 0..4 {
        assert!(
            status(i).signing.refused.is_empty(),
            "node {i}: {:?}",
            status(i).signing
        );
    }
    let log = read_digest_log(&node(late).join("digests.log"));
    let lowest = *log.keys().next().expect("the node executed");
    assert!(
        lowest >= installed && s.store_first_height > installed,
        "the node never held a height below the snapshot at {installed}: digests from \
         {lowest}, store from {}",
        s.store_first_height
    );
    assert!(
        s.synced_heights <= s.last_height - installed,
        "synced only above the snapshot: {} synced, {installed}..{}",
        s.synced_heights,
        s.last_height
    );
    // It agrees with the others at every height it shares with them, and kept up.
    let others: Vec<DigestLog> = peers
        .iter()
        .map(|&i| read_digest_log(&node(i).join("digests.log")))
        .collect();
    let mut shared = 0;
    for (h, (d, _)) in &log {
        for o in &others {
            if let Some((od, _)) = o.get(h) {
                assert_eq!(d, od, "node {late} disagrees at height {h}");
                shared += 1;
            }
        }
    }
    let top = peers
        .iter()
        .map(|&i| status(i).last_height)
        .max()
        .unwrap_or(0);
    assert!(
        shared > 0 && s.last_height + 20 >= top,
        "node {late} at {} of {top}",
        s.last_height
    );
    println!(
        "catch-up ({name}): node {late} installed the snapshot at {installed} from {:?} in {} \
         ms (peers' stores now from {peers_first:?}); then synced {} heights to {} (peers at \
         {top}); signing floor {}, {} signed by its guard since (catch-up from height {})",
        report.from_peer,
        report.took_ms,
        s.synced_heights,
        s.last_height,
        s.signing.floor,
        s.signing.signed,
        report.have
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn orders_placed_through_the_endpoint_expire_on_every_node() {
    let (ok, r, statuses, logs) = localnet_with(&["--duration", "20s"], "orders", "orders");
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree);
    assert_eq!(r.restarts, 1);
    for (n, s) in r.nodes.iter().zip(&statuses) {
        // The orders ledger has no cron tables: every fire is an order's expiry.
        assert!(n.fires > 0, "node {} fired no expiry: {r:?}", n.id);
        assert!(s.requests_executed > 0, "node {} executed no request", n.id);
        assert!(s.mempool.accepted > 0, "node {} admitted no request", n.id);
    }
    // Nodes at the same height executed the same requests (the digest covers them too): at the
    // highest height two or more nodes executed, and at every height shared by all four.
    let (h, nodes) = highest_shared(&logs).expect("two nodes share a height");
    assert!(nodes.len() >= 2 && h > 0, "{statuses:?}");
    let first = &logs[nodes[0]][&h];
    assert!(first.1 > 0, "no request executed by height {h}");
    for &i in &nodes {
        assert_eq!(&logs[i][&h], first, "node {i} at height {h}");
    }
    let mut compared = 0;
    for (h, entry) in &logs[0] {
        if logs[1..]
            .iter()
            .all(|l| l.get(h).is_some_and(|e| e == entry))
        {
            compared += 1;
        } else {
            assert!(
                logs[1..]
                    .iter()
                    .all(|l| l.get(h).is_none_or(|e| e == entry)),
                "nodes disagree at height {h}"
            );
        }
    }
    assert!(compared > 0, "no height shared by all four nodes");
    // The client read its results back from the nodes (`GET /v1/requests/{client}/{number}`)
    // and believed those f+1 nodes returned identically: most of its orders, all placed.
    let res = r.results.expect("results read back");
    assert!(res.asked > 0 && res.conflicting == 0, "{res:?}");
    assert!(res.believed * 2 >= res.asked, "{res:?}");
    assert_eq!(res.believed_ok, res.believed, "{res:?}");
    // A consumer reading the nodes' outbox endpoints over HTTP believed the expiries' effects
    // (each `shop.cancel` record returned identically by f+1 = 2 nodes).
    let believed = r.outbox_quorum_records.unwrap_or(0);
    let least_fires = r.nodes.iter().map(|n| n.fires).min().unwrap_or(0);
    assert!(
        believed > 0 && believed <= r.nodes.iter().map(|n| n.fires).max().unwrap_or(0),
        "outbox records believed by quorum: {believed}, fires per node from {least_fires}: {r:?}"
    );
    // An operator's reader (the `ccron` CLI's) believed the schedule list, and no honest node
    // answered it otherwise at the believed height.
    let reads = r.schedule_reads.expect("the orders ledger has a book");
    assert!(reads.believed > 0, "{reads:?}");
    assert!(reads.differed.iter().all(|&d| d == 0), "{reads:?}");
    // Every node's `/metrics`: the replicated figures (schedules, run counters, outbox depth and
    // progress) equal between any two nodes scraped at the same book height.
    let m = r.metrics_scrapes.expect("the orders ledger has a book");
    println!("metrics: {m:?}");
    assert!(m.compared > 0 && m.series_compared > 0, "{m:?}");
    assert_eq!(m.mismatched, 0, "{m:?}");
}

/// Issue 27's check on real processes: node 3 lies in every schedule read answer (`lie-reads`:
/// well formed, at its true height, a doctored body); an operator's reader that believes f+1
/// identical answers (`ccron_http::ScheduleReader`, as the `ccron` CLI reads) still believes the
/// honest nodes' list, never the liar's.
#[test]
fn byzantine_lying_read_endpoint_is_outvoted() {
    let (ok, r, _, _) = localnet_with(
        &[
            "--duration",
            "18s",
            "--no-kill",
            "--byzantine",
            "lie-reads@3",
        ],
        "orders",
        "lie-reads",
    );
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree, "{r:?}");
    let reads = r.schedule_reads.expect("the orders ledger has a book");
    println!("lie-reads: {reads:?}");
    assert!(reads.believed * 2 > reads.reads, "{reads:?}");
    // The liar's answer was never the believed one, and it was seen answering otherwise at
    // the believed height; every honest node's answer was believed at least once.
    assert_eq!(reads.agreed[3], 0, "{reads:?}");
    // Schedules were listed and described by quorum (the orders' pending expiries; the last
    // reads may find none left once the load stopped), although the liar denies every one.
    assert!(reads.described > 0, "{reads:?}");
    assert!(reads.differed[3] > 0, "{reads:?}");
    for i in 0..3 {
        assert!(reads.agreed[i] > 0, "node {i}: {reads:?}");
        assert_eq!(reads.differed[i], 0, "node {i}: {reads:?}");
    }
}

#[test]
fn kill_and_restart_agrees_and_fires() {
    // Node 0 also proposes its blocks without ticks (a Byzantine proposer starving ticks).
    let (ok, r) = localnet(&["--duration", "20s", "--omit-ticks"], "kill");
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree);
    assert_eq!(r.restarts, 1);
    let mut pids = r.pids.clone();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(
        pids.len(),
        5,
        "4 processes and a restarted one, distinct PIDs"
    );
    assert!(r.max_height >= 5, "decided too few heights: {r:?}");
    for n in &r.nodes {
        assert!(n.fires > 0, "node {} fired nothing", n.id);
        assert!(n.last_executed_seq > 0);
    }
    // The restarted node caught up past its restart (not stuck at the height it was killed).
    let victim = &r.nodes[1];
    assert!(victim.last_executed_seq + 5 >= r.max_height, "{r:?}");
    // It restarted from its newest snapshot (one every LOCALNET_SNAPSHOT_EVERY heights) and
    // re-executed only the blocks above it; no snapshot only if it was killed below the first.
    let every = ccron_node::localnet::LOCALNET_SNAPSHOT_EVERY;
    let restored = victim.restored_from_height.unwrap_or(0);
    let at_restart = restored + victim.replayed_blocks;
    println!(
        "victim restarted at height {at_restart}: restored from {:?}, replayed {}",
        victim.restored_from_height, victim.replayed_blocks
    );
    assert!(at_restart > 0, "the victim had decided nothing: {r:?}");
    assert!(
        restored == at_restart / every * every
            // Killed between appending a snapshot height and writing its snapshot.
            || (at_restart % every == 0 && restored + every == at_restart),
        "{r:?}"
    );
    for n in r.nodes.iter().filter(|n| n.id != 1) {
        assert_eq!(n.restored_from_height, None, "never restarted: {r:?}");
    }
    // Benchmark fields: every live process's peak memory, and the lateness of the fires on a
    // node that was never restarted (node 0), agreed time never before the due instant.
    assert!(r.nodes.iter().all(|n| n.peak_rss_kb > 0), "{r:?}");
    let l = r.lateness_ms.expect("lateness of node 0's fires");
    assert_eq!(l.node, 0);
    assert!(l.fires > 0 && l.fires <= r.nodes[0].fires, "{l:?}");
    assert!(
        l.agreed_p50_ms >= 0 && l.agreed_p50_ms <= l.agreed_p99_ms,
        "{l:?}"
    );
    assert!(r.committed_ticks_per_sec > 0.0);
    // Ticks come from every validator (signed, forwarded to the others, carried by whichever
    // proposes), not only from the proposers': ticks of all 4 validators were evaluated,
    // node 0's included although it never puts a tick in its own blocks.
    let by = &r.nodes[0].ticks_by_submitter;
    assert_eq!(by.len(), 4, "{r:?}");
    assert!(by.iter().all(|&k| k > 0), "{by:?}");
}

#[test]
fn late_joiner_catches_up_through_sync() {
    let (ok, r) = localnet(&["--duration", "20s", "--late-join", "--no-kill"], "late");
    assert!(ok, "localnet failed: {r:?}");
    let late = &r.nodes[3];
    assert!(
        late.synced_heights > 0,
        "the late node synced nothing: {r:?}"
    );
    assert!(late.last_executed_seq + 5 >= r.max_height, "{r:?}");
    // Once it reached the tip it decides with the others, not by following them through sync
    // for ever (CI stop 40: parts above next + 2 were refused, so it decided 3 of its 634
    // heights itself and ended 12 behind). It starts at 2D/5: after catching up it holds well
    // over a quarter of the heights through consensus.
    let own = late.last_executed_seq.saturating_sub(late.synced_heights);
    assert!(
        own >= r.max_height / 4,
        "the late node decided only {own} heights itself: {r:?}"
    );
}

#[test]
#[allow(clippy::disallowed_methods)] // compares against the wall clock the nodes used
fn lying_proposer_is_rejected() {
    let (ok, r) = localnet(&["--duration", "20s", "--lying-time", "--no-kill"], "lying");
    assert!(ok, "localnet failed: {r:?}");
    assert!(!r.nodes[0].honest);
    let rejected: u64 = r.nodes[1..].iter().map(|n| n.rejected_proposals).sum();
    assert!(rejected > 0, "nobody rejected the liar: {r:?}");
    // No lie was decided: agreed time stays near the wall clock (the liar adds an hour).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for n in &r.nodes {
        assert!(
            n.agreed_time_ms < now_ms + 60_000,
            "a lying time was decided: {r:?}"
        );
    }
    assert!(r.max_height >= 5, "{r:?}");
}

/// A 4-node localnet with node 0 Byzantine of `kind` from a third of the run on (18 s, no
/// kill): the honest three keep deciding during the fault, agree, stay bounded in memory and
/// disk; returns the report for the kind's own checks.
fn byzantine_run(kind: &str) -> Report {
    byzantine_run_statuses(kind).0
}

/// [`byzantine_run`], with each node's final `status.json`.
fn byzantine_run_statuses(kind: &str) -> (Report, Vec<NodeStatus>) {
    let name = format!("byz-{kind}");
    let (ok, r, statuses, _) = localnet_with(
        &["--duration", "18s", "--no-kill", "--byzantine", kind],
        "demo",
        &name,
    );
    assert!(ok, "localnet failed: {r:?}");
    assert!(r.honest_agree, "{r:?}");
    assert!(!r.nodes[0].honest);
    let b = r.byzantine.clone().expect("a Byzantine report");
    println!(
        "{kind}: heights/s before {:.1} during {:.1} ({} heights during), longest stall before {} ms during {} ms",
        b.heights_per_sec_before,
        b.heights_per_sec_during,
        b.heights_during,
        b.longest_stall_before_ms,
        b.longest_stall_during_ms
    );
    for n in &r.nodes[1..] {
        println!(
            "  node {} height {} rss {} KiB disk {} B logs {} B refusals {:?}",
            n.id, n.last_executed_seq, n.peak_rss_kb, n.disk_bytes, n.log_bytes, n.refusals
        );
    }
    // Liveness during the fault: heights keep coming, no stall beyond a few round timeouts.
    assert!(b.heights_during >= 5, "{r:?}");
    assert!(b.heights_per_sec_during >= 1.0, "{r:?}");
    assert!(b.longest_stall_during_ms < 8_000, "{r:?}");
    // The honest nodes are all near the top, bounded in memory and disk.
    for n in &r.nodes[1..] {
        // Stopped with SIGTERM: each wrote a snapshot of its last height before exiting.
        assert_eq!(n.final_snapshot, Some(n.last_executed_seq), "{r:?}");
        assert!(n.last_executed_seq + 5 >= r.max_height, "{r:?}");
        assert!(n.peak_rss_kb > 0 && n.peak_rss_kb < 256 * 1024, "{r:?}");
        assert!(n.disk_bytes < 64 << 20, "{r:?}");
        assert!(n.log_bytes < 64 << 20, "{r:?}");
    }
    (r, statuses)
}

/// The sum over the honest nodes of refusal counter `key`.
fn refused(r: &Report, key: &str) -> u64 {
    r.nodes[1..]
        .iter()
        .map(|n| n.refusals.get(key).copied().unwrap_or(0))
        .sum()
}

#[test]
fn byzantine_equivocating_proposer_is_recorded_and_the_rest_decide() {
    let r = byzantine_run("equivocate");
    assert!(refused(&r, "part.equivocation") > 0, "{r:?}");
}

#[test]
fn byzantine_part_flood_is_refused_and_bounded() {
    let r = byzantine_run("flood");
    let flood: u64 = [
        "part.round_too_far",
        "part.height_too_far",
        "part.stale_height",
        "part.peer_muted",
        "part.invalid",
        "part.full",
    ]
    .iter()
    .map(|k| refused(&r, k))
    .sum();
    assert!(flood > 100, "{r:?}");
    // Parts at rounds it may propose in were verified, judged invalid and not kept.
    assert!(refused(&r, "part.invalid") > 0, "{r:?}");
}

#[test]
fn byzantine_withheld_votes_and_parts_do_not_stop_the_rest() {
    let r = byzantine_run("withhold");
    assert!(refused(&r, "signature.votes") > 0, "{r:?}");
}

#[test]
fn byzantine_silent_validator_does_not_stop_the_rest() {
    let r = byzantine_run("silent");
    // The silent node stopped deciding well before the others.
    assert!(r.nodes[0].last_executed_seq + 5 < r.max_height, "{r:?}");
}

#[test]
fn byzantine_bad_ticks_and_requests_are_refused_by_reason() {
    let r = byzantine_run("bad-ticks");
    for key in [
        "tick.invalid",
        "tick.unknown_component",
        "tick.not_a_validator",
        "request.rejected_invalid",
    ] {
        assert!(refused(&r, key) > 0, "no {key}: {r:?}");
    }
    assert!(refused(&r, "block.BadTickSignature") > 0, "{r:?}");
}

#[test]
fn byzantine_forged_clock_samples_are_refused() {
    let r = byzantine_run("forge-samples");
    // Its first forgery changes a signature; the next one carries fewer samples than a
    // quorum (the time rule's refusal), when it gets a second turn.
    assert!(refused(&r, "block.BadSampleSignature") > 0, "{r:?}");
}

#[test]
fn byzantine_oversized_blocks_are_refused_for_their_size() {
    let r = byzantine_run("oversized");
    assert!(refused(&r, "block.too_large") > 0, "{r:?}");
    // Refused blocks are not kept: the honest nodes' disks stay far below one per turn.
    for n in &r.nodes[1..] {
        assert!(n.disk_bytes < 16 << 20, "{r:?}");
    }
}

#[test]
fn byzantine_slow_endpoint_does_not_stall_the_honest_forwarders() {
    let (r, statuses) = byzantine_run_statuses("slow-http");
    // The honest nodes' posts to the dripping endpoint ended at their deadline (or were
    // skipped while one was in flight), and they kept forwarding to each other.
    for (i, s) in statuses.iter().enumerate().skip(1) {
        let f = &s.tick_pool.forward;
        assert!(f.timed_out > 0, "node {i}: {f:?}");
        assert!(f.delivered > f.timed_out, "node {i}: {f:?}");
    }
    let _ = r;
}

/// The Byzantine kinds the campaign's `byzantine` layer rotates through. `lie-reads` runs on
/// the `orders` ledger (a schedule book for its reads to lie about; [`campaign_ledger`]), the
/// others on `demo`.
const CAMPAIGN_BYZANTINE: [&str; 10] = [
    "equivocate",
    "flood",
    "withhold",
    "withhold-votes",
    "silent",
    "bad-ticks",
    "forge-samples",
    "oversized",
    "slow-http",
    "lie-reads",
];

/// The ledger a campaign run with `--byzantine` `byz` (`KIND@NODE`, or empty) runs: `orders`
/// for `lie-reads` (the end-of-run quorum reads of its schedule book must outvote the liar:
/// the report's `schedule_reads`, a violation when no read is believed or an honest node
/// answers otherwise at the believed height), `demo` for every other run.
fn campaign_ledger(byz: &str) -> &'static str {
    if byz.starts_with("lie-reads@") {
        "orders"
    } else {
        "demo"
    }
}

/// splitmix64 of `seed`: the campaign's Byzantine choices, independent of which layer the
/// rotation gives a seed (a plain `seed mod 6` would meet only odd seeds in a 2-layer
/// rotation).
fn campaign_mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `byzantine` layer's `--byzantine KIND@NODE` for `seed`: a kind and a node drawn from
/// [`campaign_mix`] of the seed.
fn campaign_byzantine(seed: u64) -> String {
    let m = campaign_mix(seed);
    let kind = CAMPAIGN_BYZANTINE[(m % CAMPAIGN_BYZANTINE.len() as u64) as usize];
    format!("{kind}@{}", (m >> 8) % 4)
}

/// The `subset` layer for `seed`: the sender's `KIND@NODE` (`honest-code` is node 0, honest
/// code whose links to one peer are cut; `equivocate` and `withhold-votes` add a Byzantine kind)
/// and the two honest peers it still delivers to (`--byzantine-subset`), so it reaches f + 1
/// honest nodes only.
fn campaign_subset(seed: u64) -> (String, String) {
    let m = campaign_mix(seed);
    let kind = ["honest-code", "equivocate", "withhold-votes"][(m % 3) as usize];
    // Without `--byzantine` the localnet's subset sender is node 0.
    let node = if kind == "honest-code" {
        0
    } else {
        (m >> 8) % 4
    };
    let delivers_to = format!("{},{}", (node + 1) % 4, (node + 2) % 4);
    (format!("{kind}@{node}"), delivers_to)
}

/// The seeded process-fault campaign (ignored: minutes). Each seed runs a 4-node localnet
/// with `--no-kill --faults SEED` (SIGKILL + restart and SIGSTOP + SIGCONT of random nodes at
/// random points, one at a time) and must end with every node alive, the honest digests equal
/// at every shared height and no node stuck; a failing seed prints its replay command.
///
/// `CCRON_CAMPAIGN_SEEDS=1-200 CCRON_CAMPAIGN_DURATION=12s cargo test -p
/// ccron-malachite --test slow_localnet fault_campaign -- --ignored --nocapture`
///
/// `CCRON_CAMPAIGN_KINDS` (comma-separated, default `faults`) lists the seeded fault layers the
/// campaign rotates through, one per run (seed `lo + k` runs the `k`-th modulo their number),
/// from the run's seed: `faults` (`--faults`), `kill-all` (`--faults --kill-all`), `net`
/// (`--net-faults`), `clock` (`--clock-faults`), `disk` (`--disk-faults`), and the Byzantine
/// validators as processes: `byzantine` (`--byzantine KIND@NODE`, [`campaign_byzantine`]) and
/// `subset` (`--byzantine-subset`, [`campaign_subset`]), whose longest stall while the
/// behaviour lasts must stay under `SUBSET_STALL_BOUND_MS`. One per run: each
/// plan keeps at most f = 1 node faulty at a time, two layers together do not (a disk fault's
/// restart during a net isolation leaves 2 of 4 out: nothing can be decided, and the judge says
/// so). A failing run prints `REPLAY` with the report's replay command.
#[test]
#[ignore = "a campaign of localnet runs: minutes"]
fn fault_campaign() {
    let seeds = std::env::var("CCRON_CAMPAIGN_SEEDS").unwrap_or_else(|_| "1-10".into());
    let (lo, hi) = seeds
        .split_once('-')
        .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
        .unwrap_or_else(|| {
            let s = seeds.parse().unwrap();
            (s, s)
        });
    let duration = std::env::var("CCRON_CAMPAIGN_DURATION").unwrap_or_else(|_| "12s".into());
    let kinds = std::env::var("CCRON_CAMPAIGN_KINDS").unwrap_or_else(|_| "faults".into());
    let mut failed = Vec::new();
    let mut faults = 0usize;
    for seed in lo..=hi {
        let seed_s = seed.to_string();
        let (mut byz, mut subset) = (String::new(), String::new());
        let mut args = vec!["--duration", &duration, "--no-kill"];
        let all: Vec<&str> = kinds.split(',').map(str::trim).collect();
        let k = usize::try_from(seed - lo).unwrap_or(0) % all.len();
        let kind = all[k];
        match kind {
            "faults" => args.extend(["--faults", &seed_s]),
            "kill-all" => args.extend(["--faults", &seed_s, "--kill-all"]),
            "net" => args.extend(["--net-faults", &seed_s]),
            "clock" => args.extend(["--clock-faults", &seed_s]),
            "disk" => args.extend(["--disk-faults", &seed_s]),
            "byzantine" => {
                byz = campaign_byzantine(seed);
                args.extend(["--byzantine", &byz]);
            }
            "subset" => {
                let (b, delivers_to) = campaign_subset(seed);
                (byz, subset) = (b, delivers_to);
                if !byz.starts_with("honest-code") {
                    args.extend(["--byzantine", &byz]);
                }
                args.extend(["--byzantine-subset", &subset]);
            }
            other => panic!("CCRON_CAMPAIGN_KINDS: unknown kind {other}"),
        }
        let ledger = campaign_ledger(&byz);
        let (ok, r, _, _) = localnet_with(&args, ledger, &format!("campaign-{seed}"));
        faults += r.faults.len();
        let heights: Vec<u64> = r.nodes.iter().map(|n| n.last_executed_seq).collect();
        // A Byzantine run's stall while the behaviour lasts, bounded like a subset's (a few
        // rounds' timeouts); the subset report's own bound is a violation already.
        let stall_during = r
            .byzantine
            .as_ref()
            .map(|b| b.longest_stall_during_ms)
            .or(r.subset.as_ref().map(|s| s.longest_stall_during_ms));
        let stalled = stall_during.is_some_and(|ms| ms > SUBSET_STALL_BOUND_MS);
        println!(
            "seed {seed} ({kind}{}, {ledger}): ok {ok} max_height {} heights {heights:?} restarts {} longest stall {} ms (during the behaviour {stall_during:?} ms) faults [{}] violations {:?}",
            if byz.is_empty() {
                String::new()
            } else {
                format!(" {byz} {subset}")
            },
            r.max_height,
            r.restarts,
            r.longest_stall_ms,
            r.faults.join(", "),
            r.violations
        );
        if !ok || !r.honest_agree || stalled {
            println!(
                "REPLAY seed {seed}: cargo run -p ccron-malachite -- {}",
                r.replay
            );
            failed.push(seed);
        }
    }
    println!(
        "campaign seeds {lo}-{hi}: {} runs, {faults} fault events, {} failed {failed:?}",
        hi - lo + 1,
        failed.len()
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}
