//! Cross-engine equivalence, no processes: a chain of adapter blocks (signed clock samples of
//! the previous height, agreed time by the rule, tick transactions of validators) is checked with
//! the adapter's validity rule and executed through the adapter's execution path
//! (`app::LedgerHost`), and the same (height, agreed time, ticks) sequence is fed directly to
//! `ccron::host::replay` on a `BlockHost` of the same `ccron-ledgers` ledger: the fires of every
//! block and the state digest are the same. sim-bft's side of the same contract is
//! `sim-bft/tests/host_equivalence.rs`.

use std::collections::BTreeMap;

use ccron::MemPages;
use ccron::host::{Application, Block as HostBlock, BlockHost, TickGate, Tx, TxResult, replay};
use ccron_ledgers::demo::{DemoTables, demo_ledger};
use ccron_ledgers::orders::ScheduledLedger;
use ccron_malachite::app::{
    BlockRejection, DEMO_TICK_PERIOD_MS, GENESIS_BOUND_MS, HARD_LIMIT_MS, HOST_PAGES, LedgerHost,
    PrevCommit, agreed_time, orders_config, validate_block,
};
use ccron_malachite::context::{
    Address, Block, CarriedSample, ClockSample, Ctx, Ed25519Signer, Hash32, Height, TickTx,
    ValidatorSet, extension_signing_bytes,
};
use ccron_malachite::load::order_request;
use ccron_malachite::request::{ClientRequest, MAX_BLOCK_REQUESTS, SignedRequest};
use ed25519_dalek::SigningKey;
use malachitebft_core_types::{Round, Value, VoteExtensionScope};

const GENESIS_MS: i64 = 1_700_000_000_000;
/// A validator's clock when it checks height 3 of a 250 ms chain.
const NOW3: i64 = GENESIS_MS + 500;
const N: usize = 4;

/// Four validators with fixed keys, in the set's (address) order.
fn validators() -> (ValidatorSet, Vec<Ed25519Signer>) {
    let mut signers: Vec<Ed25519Signer> = (0..N as u8)
        .map(|i| Ed25519Signer::new([i + 1; 32]))
        .collect();
    signers.sort_by_key(|s| s.public_key());
    let keys: Vec<[u8; 32]> = signers.iter().map(|s| s.public_key()).collect();
    (ValidatorSet::new(&keys), signers)
}

/// Each validator's clock sample for the commit of `height` at `round` with value `id`, signed
/// over the vote-extension scope (validator `i`'s clock runs `skew[i]` ms off `time`).
fn samples(
    signers: &[Ed25519Signer],
    height: u64,
    round: u32,
    id: Hash32,
    time: i64,
    skew: &[i64],
) -> Vec<CarriedSample> {
    signers
        .iter()
        .zip(skew)
        .map(|(s, d)| {
            let validator = Address(s.public_key());
            let sample = ClockSample { time_ms: time + d };
            let scope =
                VoteExtensionScope::<Ctx>::new(Height(height), Round::new(round), id, validator);
            CarriedSample {
                validator,
                time_ms: sample.time_ms,
                signature: s.sign_raw(&extension_signing_bytes(&scope, &sample)),
            }
        })
        .collect()
}

/// A valid chain of `heights` blocks, `step_ms` of wall clock apart, whose ticks of
/// `components` come from rotating validators.
fn chain(heights: u64, step_ms: i64, components: &[u32]) -> Vec<Block> {
    let (vs, signers) = validators();
    let mut blocks: Vec<Block> = Vec::new();
    let mut prev: Option<PrevCommit> = None;
    for h in 1..=heights {
        let (prev_round, prev_id, carried) = match prev {
            None => (0, Hash32::default(), Vec::new()),
            Some(p) => {
                let wall = GENESIS_MS + (h as i64 - 1) * step_ms;
                let s = samples(&signers, h - 1, p.round, p.id, wall, &[-40, 3, 17, 900]);
                (p.round, p.id, s)
            }
        };
        let prev_time = prev.map_or(0, |p| p.agreed_time_ms);
        let time = agreed_time(h, GENESIS_MS, prev_time, &carried, &vs).expect("a quorum");
        // Validator k submits at heights 2k and 2k+1: two ticks of one sender, component and
        // 200 ms period of agreed time are coalesced by the gate.
        let ticks = components
            .iter()
            .enumerate()
            .map(|(i, &c)| TickTx::sign(c, h, &signers[(h as usize / 2 + i) % N]))
            .collect();
        let block = Block {
            height: h,
            prev_round,
            prev_id,
            samples: carried,
            agreed_time_ms: time,
            ticks,
            requests: Vec::new(),
        };
        validate_block(&block, h, prev, GENESIS_MS, time, &vs, &|c| {
            components.contains(&c)
        })
        .expect("a valid block");
        let round = (h % 3) as u32;
        prev = Some(PrevCommit {
            round,
            id: block.id(),
            agreed_time_ms: time,
        });
        blocks.push(block);
    }
    blocks
}

/// The same blocks as ccron sees them, built independently of the adapter's conversion: the
/// sender is the submitter's index in the address-ordered validator set.
fn host_blocks(blocks: &[Block]) -> Vec<HostBlock> {
    let (vs, _) = validators();
    blocks
        .iter()
        .map(|b| HostBlock {
            height: b.height,
            agreed_time_ms: Some(b.agreed_time_ms),
            txs: b
                .ticks
                .iter()
                .map(|t| Tx::Tick {
                    component: t.component,
                    sender: vs
                        .validators
                        .iter()
                        .position(|v| v.address == t.submitter)
                        .map(|i| i as u32),
                })
                .collect(),
        })
        .collect()
}

fn gate(components: &[u32]) -> TickGate {
    let periods: BTreeMap<u32, u64> = components
        .iter()
        .map(|&c| (c, DEMO_TICK_PERIOD_MS))
        .collect();
    TickGate::new(N as u32, periods)
}

/// Runs `blocks` through the adapter and through `replay` on `direct`; returns the fires and
/// the ticks the gate skipped.
fn equivalent<A: Application>(
    ledger: &str,
    mut direct: BlockHost<A>,
    blocks: &[Block],
) -> (usize, usize) {
    let (vs, _) = validators();
    let mut adapter = LedgerHost::new(ledger, N as u32).unwrap();
    let expected = replay(&mut direct, &host_blocks(blocks)).unwrap();
    let mut fires = 0;
    let mut skipped = 0;
    for (b, e) in blocks.iter().zip(&expected) {
        let got = adapter.execute(b, &vs).unwrap();
        assert_eq!(got.height, e.height);
        assert_eq!(got.results, e.results, "results of block {}", b.height);
        assert_eq!(got.fires, e.fires, "fires of block {}", b.height);
        assert_eq!(got.digest, e.digest, "digest after block {}", b.height);
        fires += got.fires.len();
        skipped += got
            .results
            .iter()
            .filter(|r| matches!(r, TxResult::TickSkipped(_)))
            .count();
    }
    assert_eq!(adapter.host_digest(), direct.digest());
    assert_eq!(adapter.fires as usize, fires);
    assert_eq!(adapter.ticks_skipped as usize, skipped);
    (fires, skipped)
}

#[test]
fn demo_ledger_runs_the_same_on_the_adapter_and_on_the_host() {
    let tables = DemoTables::default();
    let components = tables.components();
    // 200 heights 120 ms apart: ~24 s of agreed time, the 4 s and 5 s tables fire repeatedly.
    let blocks = chain(200, 120, &components);
    let direct = BlockHost::new(
        demo_ledger(&tables).unwrap(),
        MemPages::new(HOST_PAGES.0, HOST_PAGES.1),
        gate(&components),
    );
    let (fires, skipped) = equivalent("demo", direct, &blocks);
    assert!(fires >= 8, "the demo tables fired {fires} times");
    assert!(skipped > 0, "no tick was coalesced");
}

#[test]
fn orders_ledger_runs_the_same_on_the_adapter_and_on_the_host() {
    let cfg = orders_config();
    assert!(cfg.puts_as_orders);
    let blocks = chain(60, 120, &[cfg.component]);
    let direct = BlockHost::new(
        ScheduledLedger::new(cfg),
        MemPages::new(HOST_PAGES.0, HOST_PAGES.1),
        gate(&[cfg.component]),
    );
    // Ticks only: the book stays empty, nothing fires, and both paths agree on that (client
    // requests: `client_requests_execute_once_and_their_orders_fire`).
    assert_eq!(equivalent("orders", direct, &blocks).0, 0);
}

#[test]
fn a_tick_from_a_non_validator_is_skipped_on_both_paths() {
    let components = DemoTables::default().components();
    let mut blocks = chain(3, 250, &components);
    blocks[2].ticks.push(TickTx::sign(
        components[0],
        3,
        &Ed25519Signer::new([0xAB; 32]),
    ));
    let mut direct = BlockHost::new(
        demo_ledger(&DemoTables::default()).unwrap(),
        MemPages::new(HOST_PAGES.0, HOST_PAGES.1),
        gate(&components),
    );
    let (vs, _) = validators();
    let mut adapter = LedgerHost::new("demo", N as u32).unwrap();
    let expected = replay(&mut direct, &host_blocks(&blocks)).unwrap();
    for (b, e) in blocks.iter().zip(&expected) {
        assert_eq!(adapter.execute(b, &vs).unwrap(), *e);
    }
    assert!(matches!(
        expected[2].results.last(),
        Some(TxResult::TickSkipped(_))
    ));
    // The validity rule refuses such a block before it is ever voted for.
    let prev = PrevCommit {
        round: 2,
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    assert_eq!(
        validate_block(&blocks[2], 3, Some(prev), GENESIS_MS, NOW3, &vs, &|c| {
            components.contains(&c)
        }),
        Err(BlockRejection::BadTick)
    );
}

#[test]
fn a_lying_or_sample_omitting_proposer_is_rejected() {
    let components = DemoTables::default().components();
    let blocks = chain(3, 250, &components);
    let (vs, _) = validators();
    let has = |c: u32| components.contains(&c);
    let prev = PrevCommit {
        round: 2,
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    assert_eq!(
        validate_block(&blocks[2], 3, Some(prev), GENESIS_MS, NOW3, &vs, &has),
        Ok(())
    );
    // Samples 2 of the 4 validators' clocks (skews -40, 3, 17, 900): the lower median is the
    // second one, so the rule gives wall + 3.
    let wall = GENESIS_MS + 2 * 250;
    assert_eq!(blocks[2].agreed_time_ms, wall + 3);

    let mut lying = blocks[2].clone();
    lying.agreed_time_ms += 3_600_000;
    assert_eq!(
        validate_block(&lying, 3, Some(prev), GENESIS_MS, NOW3, &vs, &has),
        Err(BlockRejection::WrongTime {
            claimed: wall + 3 + 3_600_000,
            computed: wall + 3,
        })
    );

    let mut omitting = blocks[2].clone();
    omitting.samples.truncate(2);
    assert_eq!(
        validate_block(&omitting, 3, Some(prev), GENESIS_MS, NOW3, &vs, &has),
        Err(BlockRejection::TooFewSamples { got: 2, quorum: 3 })
    );

    let mut forged = blocks[2].clone();
    forged.samples[0].time_ms += 1;
    assert_eq!(
        validate_block(&forged, 3, Some(prev), GENESIS_MS, NOW3, &vs, &has),
        Err(BlockRejection::BadSampleSignature)
    );

    // The samples' median more than the hard limit ahead of this validator's clock.
    assert!(matches!(
        validate_block(
            &blocks[2],
            3,
            Some(prev),
            GENESIS_MS,
            wall - HARD_LIMIT_MS - 10,
            &vs,
            &has
        ),
        Err(BlockRejection::TimeOutOfBounds { .. })
    ));

    // Height 1: no samples; the proposer's stamp, not before genesis, within the genesis bound
    // of the validator's clock.
    assert_eq!(blocks[0].agreed_time_ms, GENESIS_MS);
    let mut early = blocks[0].clone();
    early.agreed_time_ms -= 1;
    assert!(matches!(
        validate_block(&early, 1, None, GENESIS_MS, GENESIS_MS, &vs, &has),
        Err(BlockRejection::BeforeGenesis { .. })
    ));
    let mut later = blocks[0].clone();
    later.agreed_time_ms += 2_000;
    assert_eq!(
        validate_block(&later, 1, None, GENESIS_MS, GENESIS_MS + 1_000, &vs, &has),
        Ok(())
    );
    assert!(matches!(
        validate_block(
            &later,
            1,
            None,
            GENESIS_MS,
            GENESIS_MS + 2_000 + GENESIS_BOUND_MS + 1,
            &vs,
            &has
        ),
        Err(BlockRejection::TimeOutOfBounds { .. })
    ));
    assert!(matches!(
        validate_block(
            &later,
            1,
            None,
            GENESIS_MS,
            GENESIS_MS + 2_000 - GENESIS_BOUND_MS - 1,
            &vs,
            &has
        ),
        Err(BlockRejection::TimeOutOfBounds { .. })
    ));
}

/// A signed order request of the test client (key 9), number `n`.
fn order(n: u64) -> SignedRequest {
    order_request(&SigningKey::from_bytes(&[9; 32]), n, 1_000).unwrap()
}

#[test]
fn client_requests_execute_once_and_their_orders_fire() {
    let cfg = orders_config();
    let mut blocks = chain(40, 120, &[cfg.component]);
    // Orders 1 and 2 at height 2; order 1 again at height 3 (a copy another proposer had) with
    // order 3: the copy is not executed again.
    blocks[1].requests = vec![order(1), order(2)];
    blocks[2].requests = vec![order(1), order(3)];
    let (vs, _) = validators();
    let mut adapter = LedgerHost::new("orders", N as u32).unwrap();
    // The same blocks on the host directly, the requests deduped by hand (1 and 2 at height 2,
    // only 3 at height 3).
    let mut host = host_blocks(&blocks);
    let client = order(1).client();
    let tx = |n: u64| Tx::Request {
        client,
        payload: order(n).request.payload,
    };
    host[1].txs.splice(0..0, [tx(1), tx(2)]);
    host[2].txs.insert(0, tx(3));
    let mut direct = BlockHost::new(
        ScheduledLedger::new(cfg),
        MemPages::new(HOST_PAGES.0, HOST_PAGES.1),
        gate(&[cfg.component]),
    );
    let expected = replay(&mut direct, &host).unwrap();
    let mut fires = 0;
    for (b, e) in blocks.iter().zip(&expected) {
        let got = adapter.execute(b, &vs).unwrap();
        assert_eq!(got, *e, "block {}", b.height);
        fires += got.fires.len();
    }
    assert_eq!(adapter.requests_executed, 3);
    assert_eq!(adapter.requests_duplicate, 1);
    assert!(matches!(&expected[1].results[0], TxResult::Reply(r) if r.starts_with(b"ok")));
    // 40 heights of 120 ms: the three 1 s expiries fired.
    assert_eq!(fires, 3, "the three orders expired");
    assert_eq!(adapter.host_digest(), direct.digest());
    // The node digest also covers the executed requests.
    assert_ne!(adapter.state_digest(), adapter.host_digest());
}

#[test]
fn the_rule_refuses_forged_oversized_and_repeated_requests() {
    let components = [orders_config().component];
    let blocks = chain(3, 250, &components);
    let (vs, _) = validators();
    let has = |c: u32| components.contains(&c);
    let prev = PrevCommit {
        round: 2,
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let check = |b: &Block| validate_block(b, 3, Some(prev), GENESIS_MS, NOW3, &vs, &has);
    let mut ok = blocks[2].clone();
    ok.requests = vec![order(1), order(2)];
    assert_eq!(check(&ok), Ok(()));
    let mut forged = ok.clone();
    forged.requests[1].request.number = 7;
    assert!(matches!(
        check(&forged),
        Err(BlockRejection::BadRequest { index: 1, .. })
    ));
    let mut repeated = ok.clone();
    let mut twin = order(1);
    twin = ClientRequest {
        payload: b"other".to_vec(),
        ..twin.request
    }
    .sign(&SigningKey::from_bytes(&[9; 32]));
    repeated.requests.push(twin);
    assert_eq!(
        check(&repeated),
        Err(BlockRejection::RepeatedRequest { index: 2 })
    );
    let mut many = blocks[2].clone();
    many.requests = (0..=MAX_BLOCK_REQUESTS as u64).map(order).collect();
    assert!(matches!(
        check(&many),
        Err(BlockRejection::TooManyRequests { .. })
    ));
}

/// Tick admission on the adapter: a non-validator's tick and a second tick of one submitter,
/// component and period are refused at execution (typed, counted); the tick pool refuses them
/// and a throttled duplicate before ordering; the validity rule refuses a forged, repeated or
/// replayed tick.
#[test]
fn non_validator_duplicate_and_replayed_ticks_are_refused() {
    use ccron::host::{TickPool, TickRejection};
    use ccron_malachite::app::{validate_ticks, validator_index};
    let components = DemoTables::default().components();
    let c = components[0];
    let (vs, signers) = validators();
    let outsider = Ed25519Signer::new([0xAB; 32]);
    let block = |height: u64, agreed_time_ms: i64, ticks: Vec<TickTx>| Block {
        height,
        prev_round: 0,
        prev_id: Hash32::default(),
        samples: Vec::new(),
        agreed_time_ms,
        ticks,
        requests: Vec::new(),
    };
    // Execution (ccron's TickGate through `LedgerHost`): heights 1 and 2 in one 200 ms period.
    let mut host = LedgerHost::new("demo", N as u32).unwrap();
    let t0 = GENESIS_MS - GENESIS_MS.rem_euclid(DEMO_TICK_PERIOD_MS as i64);
    let out = host
        .execute(
            &block(
                1,
                t0,
                vec![
                    TickTx::sign(c, 1, &signers[0]),
                    TickTx::sign(c, 1, &outsider),
                ],
            ),
            &vs,
        )
        .unwrap();
    assert_eq!(out.results[0], TxResult::TickEvaluated);
    assert_eq!(
        out.results[1],
        TxResult::TickSkipped(TickRejection::NotAValidator)
    );
    let out = host
        .execute(
            &block(2, t0 + 150, vec![TickTx::sign(c, 2, &signers[0])]),
            &vs,
        )
        .unwrap();
    assert!(
        matches!(
            out.results[0],
            TxResult::TickSkipped(TickRejection::Coalesced { sender: 0, .. })
        ),
        "{out:?}"
    );
    assert_eq!((host.ticks_executed, host.ticks_skipped), (1, 2));
    assert_eq!(host.ticks_by_submitter, vec![1, 0, 0, 0]);

    // Before ordering (ccron's TickPool on a node): not a validator, throttled duplicate.
    let mut pool: TickPool<TickTx> = TickPool::new(N as u32, components.iter().copied());
    let admit = |pool: &mut TickPool<TickTx>, t: TickTx| {
        pool.admit(t.component, validator_index(&vs, &t.submitter), t.number, t)
    };
    assert_eq!(
        admit(&mut pool, TickTx::sign(c, 1, &outsider)),
        Err(TickRejection::NotAValidator)
    );
    assert_eq!(admit(&mut pool, TickTx::sign(c, 5, &signers[1])), Ok(()));
    assert!(matches!(
        admit(&mut pool, TickTx::sign(c, 5, &signers[1])),
        Err(TickRejection::AlreadyPending { pending: 5, .. })
    ));
    assert_eq!(pool.counters().not_a_validator, 1);
    assert_eq!(pool.counters().already_pending, 1);
    assert_eq!(pool.len(), 1);

    // The validity rule: a replayed number (a decided block carried it) is refused.
    pool.on_included(c, 1, 5);
    assert!(pool.is_empty());
    let replay_block = block(3, t0, vec![TickTx::sign(c, 5, &signers[1])]);
    assert!(matches!(
        validate_ticks(&replay_block, &vs, &pool),
        Err(BlockRejection::TickRefused {
            index: 0,
            reason: TickRejection::Stale {
                number: 5,
                last: 5,
                ..
            }
        })
    ));
    let fresh = block(3, t0, vec![TickTx::sign(c, 6, &signers[1])]);
    assert_eq!(validate_ticks(&fresh, &vs, &pool), Ok(()));
    // ... and a forged signature or one submitter's two ticks of a component, by
    // `validate_block` (checked on a valid chain's third block).
    let blocks = chain(3, 250, &components);
    let prev = PrevCommit {
        round: 2,
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let has = |x: u32| components.contains(&x);
    let mut forged = blocks[2].clone();
    forged.ticks[0].number += 1;
    assert_eq!(
        validate_block(&forged, 3, Some(prev), GENESIS_MS, NOW3, &vs, &has),
        Err(BlockRejection::BadTickSignature { index: 0 })
    );
    let mut twice = blocks[2].clone();
    let again = twice.ticks[0].clone();
    twice.ticks.push(TickTx::sign(
        again.component,
        again.number + 1,
        &signers[signers
            .iter()
            .position(|s| s.public_key() == again.submitter.0)
            .unwrap()],
    ));
    assert_eq!(
        validate_block(&twice, 3, Some(prev), GENESIS_MS, NOW3, &vs, &has),
        Err(BlockRejection::BadTick)
    );
}
