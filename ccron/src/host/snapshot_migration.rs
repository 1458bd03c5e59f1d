//! Host snapshot layout 2 read by this build (layout 4): a fixture written by the code of
//! `83162cd` (`tests/fixtures/host_v2.snapshot.hex`, see the fixtures' README), restored and
//! migrated. Its executed-requests table (bound 2) saw clients 1 (numbers 1-3) and 3 (number
//! 5) evicted, so its global floor was 6; client 2 kept 10-13 and client 4 entered at floor 4
//! with number 40.

use super::block::{Block, BlockHost, HostError, TickGate, Tx, TxResult};
use super::cron_ledger::tests::ledger;
use super::requests::{DuplicateRequest, ExecutedRequests};
use crate::MemPages;

const FIXTURE: &str = include_str!("../../tests/fixtures/host_v2.snapshot.hex");

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn host() -> BlockHost<crate::host::CronLedger<crate::host::cron_ledger::tests::KvLedger>> {
    BlockHost::new(
        ledger(),
        MemPages::new(4_096, 4),
        TickGate::new(4, [(1, 1_000)].into_iter().collect()),
    )
    .with_requests(ExecutedRequests::with_max_clients(2))
}

/// Client `old` of the fixture (a 64-bit id) after the upgrade: an id starting with it.
fn id(old: u64) -> crate::authz::ClientId {
    let mut b = [0xab; 32];
    b[..8].copy_from_slice(&old.to_le_bytes());
    crate::authz::ClientId(b)
}

fn req(client: u64, number: u64) -> Tx {
    Tx::Request {
        client: id(client),
        number,
        payload: format!("k{client}={number}").into_bytes(),
    }
}

#[test]
fn a_layout_2_snapshot_restores_with_its_floors_migrated() {
    let mut h = host();
    h.restore(&unhex(FIXTURE)).unwrap();
    assert_eq!(h.last_height(), 2);
    let r = h.requests();
    // 64-bit ids: clients 2 and 4 are legacy watermarks at their highest (13, 40).
    assert_eq!(
        (
            r.floor(),
            r.clients(),
            r.evicted(),
            r.watermarks(),
            r.legacy_watermarks()
        ),
        (6, 0, 2, 0, 2)
    );
    let txs = vec![
        req(1, 3),  // evicted before the migration: below the frozen base
        req(3, 5),  // the same
        req(2, 12), // executed: below its legacy watermark
        req(4, 3),  // below client 4's legacy watermark
        req(4, 40), // executed: at it
        req(2, 14),
        req(4, 41),
        req(5, 6), // a new client at the base: evicts client 2 to its watermark 14
        req(2, 13),
        req(2, 15),
    ];
    let o = h
        .execute_block(&Block {
            height: 3,
            agreed_time_ms: Some(3_500),
            txs,
        })
        .unwrap();
    let below = |client: u64, number, floor| {
        TxResult::Duplicate(DuplicateRequest::BelowFloor {
            client: id(client),
            number,
            floor,
        })
    };
    let ran = |r: &TxResult| matches!(r, TxResult::Reply(_));
    assert_eq!(o.results[0], below(1, 3, 6));
    assert_eq!(o.results[1], below(3, 5, 6));
    assert_eq!(o.results[2], below(2, 12, 14));
    assert_eq!(o.results[3], below(4, 3, 41));
    assert_eq!(o.results[4], below(4, 40, 41));
    assert!(ran(&o.results[5]) && ran(&o.results[6]) && ran(&o.results[7]));
    assert_eq!(o.results[8], below(2, 13, 15));
    assert!(ran(&o.results[9]));
    // The base never moves again; the snapshot is written in the new layout and reads back.
    assert_eq!(h.requests().floor(), 6);
    let snap = h.snapshot().unwrap();
    let mut back = host();
    back.restore(&snap).unwrap();
    assert_eq!(back.digest(), h.digest());
}

#[test]
fn other_layouts_are_refused() {
    let mut bytes = unhex(FIXTURE);
    // The layout is the file's first field (a fixed-width u32).
    for version in [1u32, 5] {
        bytes[..4].copy_from_slice(&version.to_le_bytes());
        assert!(matches!(
            host().restore(&bytes),
            Err(HostError::BadSnapshot(_))
        ));
    }
}

/// Host snapshot layout 3 (executed requests of layout 4, 64-bit client ids), written by the
/// code of `be3a95a` (`tests/fixtures/host_v3.snapshot.hex`, see the fixtures' README): bound
/// 2; client 1 executed 1-3 and client 2 10, 11 and 13, then clients 3 (number 5) and 4
/// (number 40) evicted them to watermarks 3 and 13.
const FIXTURE_V3: &str = include_str!("../../tests/fixtures/host_v3.snapshot.hex");

/// Restored, every old client is a legacy watermark at its highest number: a client whose
/// 256-bit id starts with an old id can replay nothing at or below it, runs the numbers above,
/// and its own entry then marks everything below the legacy floor executed; another client
/// is unaffected. Snapshotted again as layout 4, it reads back equal.
#[test]
fn a_layout_3_snapshot_restores_with_legacy_watermarks() {
    let mut h = host();
    h.restore(&unhex(FIXTURE_V3)).unwrap();
    assert_eq!(h.last_height(), 4);
    let r = h.requests();
    assert_eq!(
        (
            r.floor(),
            r.clients(),
            r.evicted(),
            r.watermarks(),
            r.legacy_watermarks()
        ),
        (0, 0, 2, 0, 4)
    );
    let other = crate::authz::ClientId::from_index(9);
    let txs = vec![
        req(1, 3),
        req(1, 4),
        req(2, 12),
        req(2, 14),
        req(3, 5),
        req(4, 41), // evicts client 1 (the least recently executed) to its watermark 4
        req(4, 39),
        req(1, 4),
        Tx::Request {
            client: other,
            number: 1,
            payload: b"k9=1".to_vec(),
        },
    ];
    let o = h
        .execute_block(&Block {
            height: 5,
            agreed_time_ms: Some(5_500),
            txs,
        })
        .unwrap();
    let below = |client: u64, number, floor| {
        TxResult::Duplicate(DuplicateRequest::BelowFloor {
            client: id(client),
            number,
            floor,
        })
    };
    let ran = |r: &TxResult| matches!(r, TxResult::Reply(_));
    assert_eq!(o.results[0], below(1, 3, 4));
    assert!(ran(&o.results[1]));
    assert_eq!(o.results[2], below(2, 12, 14));
    assert!(ran(&o.results[3]));
    assert_eq!(o.results[4], below(3, 5, 6));
    assert!(ran(&o.results[5]));
    assert_eq!(
        o.results[6],
        TxResult::Duplicate(DuplicateRequest::Executed {
            client: id(4),
            number: 39
        })
    );
    assert_eq!(o.results[7], below(1, 4, 5));
    assert!(ran(&o.results[8]));
    let snap = h.snapshot().unwrap();
    assert_eq!(snap[..4], 4u32.to_le_bytes(), "written as layout 4");
    let mut back = host();
    back.restore(&snap).unwrap();
    assert_eq!(back.digest(), h.digest());
    assert_eq!(back.requests().legacy_watermarks(), 4);
}
