//! Tests of [`BlockHost`]: the gate, heights and time, replicas agreeing and restoring, the
//! state limit, a proptest of execution against restore, the default hash, fail-stop.

use std::collections::BTreeMap;

use super::snapshot::SnapshotFile;
use super::*;
use crate::host::cron_ledger::tests::ledger;
use crate::host::requests::DuplicateRequest;
use crate::host::ticks::TickRejection;
use crate::host::wire;

fn host() -> BlockHost<crate::host::CronLedger<crate::host::cron_ledger::tests::KvLedger>> {
    BlockHost::new(
        ledger(),
        MemPages::new(4_096, 4),
        TickGate::new(4, [(1, 1_000)].into_iter().collect()),
    )
}

fn tick(sender: Option<u32>, number: u64) -> Tx {
    Tx::Tick {
        component: 1,
        sender,
        number,
    }
}

fn put(number: u64) -> Tx {
    Tx::Request {
        client: crate::authz::ClientId::from_index(7),
        number,
        payload: b"x".to_vec(),
    }
}

fn blocks() -> Vec<Block> {
    (1..=6u64)
        .map(|h| Block {
            height: h,
            agreed_time_ms: Some(1_000 * h as i64 + 500),
            txs: vec![
                put(h),
                tick(Some((h % 4) as u32), 2 * h),
                tick(Some((h % 4) as u32), 2 * h + 1),
            ],
        })
        .collect()
}

#[test]
fn gate_refuses_strangers_unknown_components_and_floods() {
    let mut h = host();
    let b = Block {
        height: 1,
        agreed_time_ms: Some(1_500),
        txs: vec![
            tick(None, 1),
            tick(Some(4), 1),
            Tx::Tick {
                component: 9,
                sender: Some(0),
                number: 1,
            },
            tick(Some(0), 1),
            tick(Some(0), 2),
            tick(Some(1), 5),
            tick(Some(1), 5),
            tick(Some(1), 4),
            put(3),
            put(3),
        ],
    };
    let o = h.execute_block(&b).unwrap();
    let stale = |number| {
        TxResult::TickSkipped(TickRejection::Stale {
            component: 1,
            sender: 1,
            number,
            last: 5,
        })
    };
    assert_eq!(
        o.results,
        vec![
            TxResult::TickSkipped(TickRejection::NotAValidator),
            TxResult::TickSkipped(TickRejection::NotAValidator),
            TxResult::TickSkipped(TickRejection::UnknownComponent(9)),
            TxResult::TickEvaluated,
            TxResult::TickSkipped(TickRejection::Coalesced {
                component: 1,
                sender: 0,
                period: 1
            }),
            TxResult::TickEvaluated,
            stale(5),
            stale(4),
            TxResult::Reply(Vec::new()),
            TxResult::Duplicate(DuplicateRequest::Executed {
                client: crate::authz::ClientId::from_index(7),
                number: 3
            }),
        ]
    );
    let c = h.counters();
    assert_eq!(
        (
            c.ticks_evaluated,
            c.ticks_skipped,
            c.requests_executed,
            c.requests_duplicate
        ),
        (2, 6, 1, 1)
    );
    assert_eq!(c.ticks_by_sender, [(0, 1), (1, 1)].into_iter().collect());
    assert_eq!(h.gate().last_number(1, 1), Some(5));
    // The periodic entry fired once (first evaluated tick), not per tick.
    assert_eq!(o.fires.len(), 1);
    assert_eq!(h.app().fires().get(&(1, 0)), Some(&1));
    assert_eq!(o.digest, h.digest());
    // A replayed tick in a later block is still refused.
    let later = Block {
        height: 2,
        agreed_time_ms: Some(9_500),
        txs: vec![tick(Some(1), 5), tick(Some(1), 6)],
    };
    let o2 = h.execute_block(&later).unwrap();
    assert_eq!(o2.results, vec![stale(5), TxResult::TickEvaluated]);
}

#[test]
fn heights_increase_and_time_never_goes_back() {
    let mut h = host();
    let b = |height, t| Block {
        height,
        agreed_time_ms: Some(t),
        txs: vec![],
    };
    h.execute_block(&b(2, 5_000)).unwrap();
    assert_eq!(
        h.execute_block(&b(2, 6_000)),
        Err(HostError::OutOfOrder { last: 2, got: 2 })
    );
    assert_eq!(
        h.execute_block(&b(3, 4_999)),
        Err(HostError::TimeWentBack {
            previous: 5_000,
            got: 4_999
        })
    );
    assert_eq!(h.last_height(), 2);
    h.execute_block(&b(5, 5_000)).unwrap();
    assert_eq!(h.last_height(), 5);
}

#[test]
fn replicas_agree_and_a_restored_one_continues_identically() {
    let all = blocks();
    let mut a = host();
    let mut b = host();
    let oa = replay(&mut a, &all).unwrap();
    let ob = replay(&mut b, &all).unwrap();
    assert_eq!(oa, ob);
    assert!(oa.iter().map(|o| o.fires.len()).sum::<usize>() >= 5);
    // A third restored from a snapshot taken midway continues to the same state.
    let mut c = host();
    let mut d = host();
    replay(&mut c, &all[..3]).unwrap();
    d.restore(&c.snapshot().unwrap()).unwrap();
    assert_eq!(d.digest(), c.digest());
    assert_eq!(d.last_height(), 3);
    let od = replay(&mut d, &all[3..]).unwrap();
    assert_eq!(od.last().map(|o| o.digest), oa.last().map(|o| o.digest));
    // A different agreed time changes the outcome (the digest covers it).
    let mut e = host();
    let mut shifted = all.clone();
    shifted[5].agreed_time_ms = Some(9_999);
    let oe = replay(&mut e, &shifted).unwrap();
    assert_ne!(oe.last().map(|o| o.digest), oa.last().map(|o| o.digest));
    assert!(d.restore(b"junk").is_err());
    assert_eq!(d.digest(), a.digest());
}

#[test]
fn a_state_limit_refuses_requests_that_could_outgrow_it_and_checkpoints_make_it_exact() {
    let base = host().snapshot_body().unwrap().len() as u64;
    // Room for two requests of 8 bytes (each reserves 2 x payload + overhead), not three.
    let limit = base + 2 * (16 + REQUEST_OVERHEAD_BYTES) + 10;
    let mut h = host().with_state_limit(limit);
    h.checkpoint().unwrap();
    assert_eq!(h.budget().base, base);
    let req = |number| Tx::Request {
        client: crate::authz::ClientId::from_index(3),
        number,
        payload: vec![b'k'; 8],
    };
    let b = Block {
        height: 1,
        agreed_time_ms: Some(1_000),
        txs: vec![req(1), req(2), req(3), req(3)],
    };
    let o = h.execute_block(&b).unwrap();
    assert!(matches!(o.results[0], TxResult::Reply(_)));
    assert!(matches!(o.results[1], TxResult::Reply(_)));
    assert!(matches!(
        o.results[2],
        TxResult::Refused(RequestRefusal::StateFull { .. })
    ));
    // The refused number is consumed: its repeat is a duplicate, not a second refusal.
    assert!(matches!(o.results[3], TxResult::Duplicate(_)));
    assert_eq!(h.counters().requests_refused, 1);
    // A host restored from a checkpoint holds the same budget as the one that took it.
    let snap = h.checkpoint().unwrap();
    let mut r = host().with_state_limit(limit);
    r.restore(&snap).unwrap();
    assert_eq!(r.budget(), h.budget());
    assert_eq!(r.digest(), h.digest());
    // A snapshot of another layout is refused, loudly.
    let other: SnapshotFile = (1, Vec::new(), (0, 0));
    let bytes = wire::encode(&other).unwrap();
    assert!(matches!(r.restore(&bytes), Err(HostError::BadSnapshot(m)) if m.contains("layout 1")));
}

use proptest::prelude::*;

fn arb_tx() -> impl Strategy<Value = Tx> {
    prop_oneof![
        (0u32..3, proptest::option::weighted(0.9, 0u32..6), 0u64..8).prop_map(
            |(component, sender, number)| Tx::Tick {
                component,
                sender,
                number
            }
        ),
        (
            0u64..4,
            0u64..6,
            proptest::collection::vec(any::<u8>(), 0..4)
        )
            .prop_map(|(client, number, payload)| Tx::Request {
                client: crate::authz::ClientId::from_index(client),
                number,
                payload
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sequence of blocks (ticks from validators and strangers, known and unknown
    /// components, floods, requests, time jumps): two hosts fed the same blocks end equal,
    /// and a host restored from the first one's snapshot at any point continues to the
    /// same digest and the same fires.
    #[test]
    fn hosts_fed_the_same_blocks_agree_even_across_a_restore(
        steps in proptest::collection::vec(
            (0i64..3_000, proptest::collection::vec(arb_tx(), 0..6)),
            1..24,
        ),
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut t = 0i64;
        let blocks: Vec<Block> = steps
            .into_iter()
            .enumerate()
            .map(|(i, (dt, txs))| {
                t += dt;
                Block { height: i as u64 + 1, agreed_time_ms: Some(t), txs }
            })
            .collect();
        let mut a = host();
        let mut b = host();
        let oa = replay(&mut a, &blocks).unwrap();
        let ob = replay(&mut b, &blocks).unwrap();
        prop_assert_eq!(&oa, &ob);
        let k = cut.index(blocks.len() + 1);
        let mut c = host();
        replay(&mut c, &blocks[..k]).unwrap();
        let mut d = host();
        d.restore(&c.snapshot().unwrap()).unwrap();
        prop_assert_eq!(d.digest(), c.digest());
        let od = replay(&mut d, &blocks[k..]).unwrap();
        prop_assert_eq!(&od[..], &oa[k..]);
        prop_assert_eq!(d.digest(), a.digest());
        prop_assert_eq!(d.app().fires(), a.app().fires());
    }
}

/// What a host may go through between two digests.
#[derive(Debug, Clone)]
enum Op {
    /// A block `dt` ms after the last one.
    Block(i64, Vec<Tx>),
    /// A restore from the snapshot taken before the op at this index (or at genesis).
    Restore(proptest::sample::Index),
    Reload,
    /// A request run straight through `app_mut` (an engine's setup).
    AppMut,
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0i64..3_000, proptest::collection::vec(arb_tx(), 0..6))
            .prop_map(|(dt, txs)| Op::Block(dt, txs)),
        1 => any::<proptest::sample::Index>().prop_map(Op::Restore),
        1 => Just(Op::Reload),
        1 => Just(Op::AppMut),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The kept part digests are never stale: after any sequence of blocks, restores,
    /// reloads and `app_mut` changes, under both hash functions, the digest equals the one
    /// computed from scratch, and after every block the outcome reports it.
    #[test]
    fn kept_part_digests_equal_a_fresh_computation(
        ops in proptest::collection::vec(arb_op(), 1..40),
        blake in any::<bool>(),
    ) {
        let hash = if blake { StateHash::Blake3 } else { StateHash::Sha256 };
        let mut h = host().with_state_hash(hash);
        prop_assert_eq!(h.state_hash(), hash);
        let mut snapshots = vec![h.snapshot().unwrap()];
        let mut t = 0i64;
        for op in ops {
            match op {
                Op::Block(dt, txs) => {
                    t += dt;
                    let block = Block { height: h.last_height() + 1, agreed_time_ms: Some(t), txs };
                    let o = h.execute_block(&block).unwrap();
                    prop_assert_eq!(o.digest, h.digest_from_scratch());
                }
                Op::Restore(i) => {
                    let snap = &snapshots[i.index(snapshots.len())];
                    h.restore(snap).unwrap();
                    t = h.last_agreed_ms().unwrap_or(0);
                }
                Op::Reload => h.reload().unwrap(),
                Op::AppMut => {
                    let ctx = ExecContext { seq: 0, agreed_time_ms: None };
                    let _ = h.app_mut().execute(ctx, Default::default(), b"y");
                }
            }
            prop_assert_eq!(h.digest(), h.digest_from_scratch());
            snapshots.push(h.snapshot().unwrap());
        }
    }
}

/// The digest under SHA-256 is the one a host without a chosen hash function reports, and
/// BLAKE3's differs from it.
#[test]
fn the_default_state_hash_is_sha256() {
    let mut a = host();
    let mut b = host().with_state_hash(StateHash::Sha256);
    let mut c = host().with_state_hash(StateHash::Blake3);
    assert_eq!(a.state_hash(), StateHash::Sha256);
    for block in blocks() {
        let (oa, ob, oc) = (
            a.execute_block(&block).unwrap(),
            b.execute_block(&block).unwrap(),
            c.execute_block(&block).unwrap(),
        );
        assert_eq!(oa, ob);
        assert_ne!(oa.digest, oc.digest);
        assert_eq!(oa.results, oc.results);
        assert_eq!(c.digest_with(StateHash::Sha256), oa.digest);
        assert_eq!(a.digest_with(StateHash::Blake3), oc.digest);
    }
}

#[test]
fn a_failed_schedule_save_halts_the_host() {
    let mut h = BlockHost::new(
        ledger(),
        crate::pages::CrashAfter::new(MemPages::new(4_096, 4), 0),
        TickGate::new(4, BTreeMap::new()),
    );
    let b = Block {
        height: 1,
        agreed_time_ms: Some(1_000),
        txs: vec![tick(Some(0), 1), put(1)],
    };
    assert!(matches!(
        h.execute_block(&b),
        Err(HostError::Halted(AppError::Fatal(_)))
    ));
    assert!(h.halted().is_some());
    // Nothing executes any more.
    let next = Block { height: 2, ..b };
    assert!(matches!(h.execute_block(&next), Err(HostError::Halted(_))));
}

/// The host's stream fed field by field, as `digest_of` fed it before it gathered its pieces
/// (the reference its bytes must keep equal).
fn field_by_field<A: Application>(h: &BlockHost<A>, hash: StateHash) -> Digest32 {
    use crate::state_hash::StateHasher;
    let mut s = StateHasher::new(hash);
    s.update(b"ccron-host-state/v2");
    s.update(h.app.digest_in(hash));
    s.update(h.pages.digest_in(hash));
    s.update(h.last_agreed_ms.unwrap_or(i64::MIN).to_le_bytes());
    for (c, sender, p) in h.gate.coalescer().entries() {
        s.update(c.to_le_bytes());
        s.update(sender.to_le_bytes());
        s.update(p.to_le_bytes());
    }
    s.update(b"floor");
    for (c, sender, n) in h.gate.floor_entries() {
        s.update(c.to_le_bytes());
        s.update(sender.to_le_bytes());
        s.update(n.to_le_bytes());
    }
    s.update(h.requests.digest_in(hash));
    let (counters, by_sender) = h.counters.encoded();
    for v in counters {
        s.update(v.to_le_bytes());
    }
    for (sender, n) in by_sender {
        s.update(sender.to_le_bytes());
        s.update(n.to_le_bytes());
    }
    s.finalize()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The digest after every block of random blocks (several senders and components, so the
    /// coalescer, the replay floor and the per-sender counters hold several entries) is the
    /// field-by-field stream's, under both hash functions.
    #[test]
    fn stream_is_the_field_by_field_stream(
        steps in proptest::collection::vec(
            (0i64..3_000, proptest::collection::vec(arb_tx(), 0..6)),
            1..16,
        ),
        blake in any::<bool>(),
    ) {
        let hash = if blake { StateHash::Blake3 } else { StateHash::Sha256 };
        let mut h = BlockHost::new(
            ledger(),
            MemPages::new(4_096, 4),
            TickGate::new(4, [(0, 1_000), (1, 1_000), (2, 500)].into_iter().collect()),
        )
        .with_state_hash(hash);
        prop_assert_eq!(h.digest(), field_by_field(&h, hash));
        let mut t = 0i64;
        for (i, (dt, txs)) in steps.into_iter().enumerate() {
            t += dt;
            let b = Block { height: i as u64 + 1, agreed_time_ms: Some(t), txs };
            if let Ok(o) = h.execute_block(&b) {
                prop_assert_eq!(o.digest, field_by_field(&h, hash));
            }
            prop_assert_eq!(h.digest_with(hash), field_by_field(&h, hash));
        }
    }
}
