//! The node's block validity and execution, no processes: a chain of node blocks (signed clock
//! samples of the previous height, agreed time by the kernel's rule, signed tick transactions of
//! validators, signed client requests) is judged with the validity rule every validator applies
//! (`ccron_node::ledger::validate_block`, over the kernel's `BlockHost::validate`) and executed
//! through the node's path (`LedgerHost::execute`); the same (height, agreed time, transactions)
//! fed directly to `ccron::host::replay` gives the same results, fires and digest. sim-bft's side
//! of the same contract is `sim-bft/tests/cluster/host_equivalence.rs`.

use std::collections::BTreeMap;

use ccron::MemPages;
use ccron::host::{
    Application, Block as HostBlock, BlockHost, Invalid, TickGate, TickPool, TickRejection,
    TimeError, TimeRule, Tx, TxResult, replay,
};
use ccron::schedule::ScheduleRequest;
use ccron_ledgers::demo::{DemoTables, demo_ledger};
use ccron_ledgers::orders::{SchedAppConfig, ScheduledLedger};
use ccron_node::crypto::{Signer, SigningDomain};
use ccron_node::ledger::{
    BlockRejection, DEFAULT_PAGES, DEFAULT_TICK_PERIOD_MS, GENESIS_BOUND_MS, HARD_LIMIT_MS,
    LedgerHost, LedgerSetup, PrevCommit, agreed_time, validate_block,
};
use ccron_node::request::{ClientRequest, MAX_BLOCK_REQUESTS, SignedRequest};
use ccron_node::store::{Commit, PlainCommit};
use ccron_node::types::{Block, CarriedSample, Hash32, TickTx, Validators};
use ed25519_dalek::SigningKey;

const GENESIS_MS: i64 = 1_700_000_000_000;

/// The chain every test block is signed for.
fn dom() -> SigningDomain {
    SigningDomain::chain(b"block-validity").unwrap()
}
const N: usize = 4;

/// Four validators with fixed keys, in the set's (address) order.
fn validators() -> (Validators, Vec<Signer>) {
    let mut signers: Vec<Signer> = (0..N as u8).map(|i| Signer::new([i + 1; 32])).collect();
    signers.sort_by_key(|s| s.public_key());
    let keys: Vec<[u8; 32]> = signers.iter().map(|s| s.public_key()).collect();
    (Validators::new(&keys), signers)
}

/// Each validator's clock sample for the commit of `height` at `round` with value `id` (the
/// engine-free sample message of `PlainCommit`; validator `i`'s clock runs `skew[i]` ms off
/// `time`).
fn samples(
    signers: &[Signer],
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
            let validator = ccron_node::Address(s.public_key());
            let time_ms = time + d;
            CarriedSample {
                validator,
                time_ms,
                signature: s.sign_raw(&PlainCommit::sample_message(
                    &dom(),
                    height,
                    round,
                    &id,
                    &validator,
                    time_ms,
                )),
            }
        })
        .collect()
}

fn setup(components: &[u32]) -> LedgerSetup {
    LedgerSetup {
        validators: N as u32,
        tick_periods: components
            .iter()
            .map(|&c| (c, DEFAULT_TICK_PERIOD_MS))
            .collect(),
        pages: DEFAULT_PAGES,
    }
}

fn demo_host() -> LedgerHost<impl Application> {
    let tables = DemoTables::default();
    LedgerHost::new(demo_ledger(&tables).unwrap(), &setup(&tables.components()))
}

fn orders_config() -> SchedAppConfig {
    SchedAppConfig {
        puts_as_orders: true,
        ..SchedAppConfig::default()
    }
}

fn orders_host() -> LedgerHost<ScheduledLedger> {
    let cfg = orders_config();
    LedgerHost::new(ScheduledLedger::new(cfg), &setup(&[cfg.component]))
}

/// Checks `block` as the next block of `ledger` at clock `now`.
fn check<A: Application>(
    ledger: &LedgerHost<A>,
    block: &Block,
    prev: Option<PrevCommit>,
    now: i64,
) -> Result<(), BlockRejection> {
    check_in(&dom(), ledger, block, prev, now)
}

/// [`check`] by a validator of the chain of `domain`.
fn check_in<A: Application>(
    domain: &SigningDomain,
    ledger: &LedgerHost<A>,
    block: &Block,
    prev: Option<PrevCommit>,
    now: i64,
) -> Result<(), BlockRejection> {
    let (vs, _) = validators();
    validate_block(
        ledger,
        block,
        prev,
        GENESIS_MS,
        now,
        &vs,
        domain,
        PlainCommit::sample_message,
    )
}

/// The block at the next height of `ledger`: the samples of the previous commit (round
/// `round_of(h-1)`), the agreed time by the rule, the ticks of `components` from rotating
/// validators (numbered by height), and `requests`.
fn next_block<A: Application>(
    ledger: &LedgerHost<A>,
    prev: Option<(PrevCommit, u32)>,
    step_ms: i64,
    components: &[u32],
    requests: Vec<SignedRequest>,
) -> Block {
    let (vs, signers) = validators();
    let h = ledger.height() + 1;
    let (prev_round, prev_id, carried) = match prev {
        None => (0, Hash32::default(), Vec::new()),
        Some((p, round)) => {
            let wall = GENESIS_MS + (h as i64 - 1) * step_ms;
            let s = samples(&signers, h - 1, round, p.id, wall, &[-40, 3, 17, 900]);
            (round, p.id, s)
        }
    };
    let time = agreed_time(ledger, h, GENESIS_MS, GENESIS_MS, &carried, &vs).expect("a quorum");
    // Validator k submits at heights 2k and 2k+1: two ticks of one sender, component and
    // 200 ms period of agreed time are coalesced by the gate.
    let ticks = components
        .iter()
        .enumerate()
        .map(|(i, &c)| TickTx::sign(&dom(), c, h, &signers[(h as usize / 2 + i) % N]))
        .collect();
    Block {
        height: h,
        prev_round,
        prev_id,
        samples: carried,
        agreed_time_ms: time,
        ticks,
        requests,
        prev_state: Some(ledger.state_digest()),
    }
}

/// A valid chain of `heights` blocks, `step_ms` of wall clock apart, each judged valid by
/// `ledger` (which executes it) before the next is built; `requests` at some heights.
fn chain<A: Application>(
    ledger: &mut LedgerHost<A>,
    heights: u64,
    step_ms: i64,
    components: &[u32],
    mut requests: BTreeMap<u64, Vec<SignedRequest>>,
) -> Vec<Block> {
    let (vs, _) = validators();
    let mut blocks = Vec::new();
    let mut prev: Option<(PrevCommit, u32)> = None;
    for h in 1..=heights {
        let block = next_block(
            ledger,
            prev,
            step_ms,
            components,
            requests.remove(&h).unwrap_or_default(),
        );
        check(ledger, &block, prev.map(|p| p.0), block.agreed_time_ms).expect("a valid block");
        ledger.execute(&block, &vs).unwrap();
        prev = Some((
            PrevCommit {
                id: block.id(),
                agreed_time_ms: block.agreed_time_ms,
            },
            (h % 3) as u32,
        ));
        blocks.push(block);
    }
    blocks
}

/// The same blocks as the kernel sees them, built independently of the node's conversion: the
/// sender is the submitter's index in the address-ordered validator set.
fn host_blocks(blocks: &[Block]) -> Vec<HostBlock> {
    let (vs, _) = validators();
    blocks
        .iter()
        .map(|b| HostBlock {
            height: b.height,
            agreed_time_ms: Some(b.agreed_time_ms),
            txs: b
                .requests
                .iter()
                .map(|r| Tx::Request {
                    client: r.client(),
                    number: r.request.number,
                    payload: r.request.payload.clone(),
                })
                .chain(b.ticks.iter().map(|t| Tx::Tick {
                    component: t.component,
                    sender: vs.index_of(&t.submitter),
                    number: t.number,
                }))
                .collect(),
        })
        .collect()
}

fn gate(components: &[u32]) -> TickGate {
    TickGate::new(
        N as u32,
        components
            .iter()
            .map(|&c| (c, DEFAULT_TICK_PERIOD_MS))
            .collect(),
    )
}

/// Runs `blocks` through a fresh node ledger and through `replay` on `direct`; returns the fires
/// and the ticks the gate skipped.
fn equivalent<A: Application, B: Application>(
    mut node: LedgerHost<A>,
    mut direct: BlockHost<B>,
    blocks: &[Block],
) -> (usize, usize) {
    let (vs, _) = validators();
    let expected = replay(&mut direct, &host_blocks(blocks)).unwrap();
    let mut fires = 0;
    let mut skipped = 0;
    for (b, e) in blocks.iter().zip(&expected) {
        let got = node.execute(b, &vs).unwrap();
        assert_eq!(got, *e, "block {}", b.height);
        fires += got.fires.len();
        skipped += got
            .results
            .iter()
            .filter(|r| matches!(r, TxResult::TickSkipped(_)))
            .count();
    }
    assert_eq!(node.state_digest(), direct.digest());
    let c = node.host().counters();
    assert_eq!(
        (c.fires as usize, c.ticks_skipped as usize),
        (fires, skipped)
    );
    (fires, skipped)
}

#[test]
fn demo_ledger_runs_the_same_on_the_node_and_on_the_kernel() {
    let tables = DemoTables::default();
    let components = tables.components();
    // 200 heights 120 ms apart: ~24 s of agreed time, the 4 s and 5 s tables fire repeatedly.
    let blocks = chain(&mut demo_host(), 200, 120, &components, BTreeMap::new());
    let direct = BlockHost::new(
        demo_ledger(&tables).unwrap(),
        MemPages::new(DEFAULT_PAGES.0, DEFAULT_PAGES.1),
        gate(&components),
    )
    .with_time_rule(TimeRule::with_quorum(3, GENESIS_BOUND_MS, HARD_LIMIT_MS));
    let (fires, skipped) = equivalent(demo_host(), direct, &blocks);
    assert!(fires >= 8, "the demo tables fired {fires} times");
    assert!(skipped > 0, "no tick was coalesced");
}

/// A signed order request of the test client (key 9), number `n`: order `order-n`, expiring
/// 1 s after admission.
fn order(n: u64) -> SignedRequest {
    let key = SigningKey::from_bytes(&[9; 32]);
    ClientRequest {
        client_key: key.verifying_key().to_bytes(),
        number: n,
        payload: ScheduledLedger::payload(&ScheduleRequest::Upsert(ScheduledLedger::expiry(
            &format!("order-{n}"),
            1_000,
        )))
        .unwrap(),
    }
    .sign(&dom(), &key)
}

#[test]
fn client_requests_execute_once_and_their_orders_fire() {
    let cfg = orders_config();
    // Orders 1 and 2 at height 2; order 1 again at height 3 (a copy another proposer had) with
    // order 3: the copy is not executed again.
    let requests = BTreeMap::from([(2, vec![order(1), order(2)]), (3, vec![order(1), order(3)])]);
    let blocks = chain(&mut orders_host(), 40, 120, &[cfg.component], requests);
    let direct = BlockHost::new(
        ScheduledLedger::new(cfg),
        MemPages::new(DEFAULT_PAGES.0, DEFAULT_PAGES.1),
        gate(&[cfg.component]),
    );
    let (fires, _) = equivalent(orders_host(), direct, &blocks);
    // 40 heights of 120 ms: the three 1 s expiries fired.
    assert_eq!(fires, 3, "the three orders expired");
    let mut node = orders_host();
    let (vs, _) = validators();
    let outcomes: Vec<_> = blocks
        .iter()
        .map(|b| node.execute(b, &vs).unwrap())
        .collect();
    assert!(matches!(&outcomes[1].results[0], TxResult::Reply(r) if r.starts_with(b"ok")));
    assert!(matches!(outcomes[2].results[0], TxResult::Duplicate(_)));
    let c = node.host().counters();
    assert_eq!((c.requests_executed, c.requests_duplicate), (3, 1));
}

#[test]
fn a_tick_from_a_non_validator_is_skipped_at_execution_and_refused_by_the_rule() {
    let components = DemoTables::default().components();
    let mut node = demo_host();
    let mut blocks = chain(&mut node, 2, 250, &components, BTreeMap::new());
    let prev = PrevCommit {
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let mut third = next_block(&node, Some((prev, 2)), 250, &components, Vec::new());
    third.ticks.push(TickTx::sign(
        &dom(),
        components[0],
        3,
        &Signer::new([0xAB; 32]),
    ));
    assert!(matches!(
        check(&node, &third, Some(prev), third.agreed_time_ms),
        Err(BlockRejection::Invalid(Invalid::Tick {
            reason: TickRejection::NotAValidator,
            ..
        }))
    ));
    // Were it decided anyway, both paths skip it alike.
    blocks.push(third);
    let direct = BlockHost::new(
        demo_ledger(&DemoTables::default()).unwrap(),
        MemPages::new(DEFAULT_PAGES.0, DEFAULT_PAGES.1),
        gate(&components),
    );
    equivalent(demo_host(), direct, &blocks);
}

#[test]
fn a_lying_or_sample_omitting_proposer_is_rejected() {
    let components = DemoTables::default().components();
    let mut node = demo_host();
    let blocks = chain(&mut node, 2, 250, &components, BTreeMap::new());
    let prev = PrevCommit {
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let good = next_block(&node, Some((prev, 2)), 250, &components, Vec::new());
    let now = good.agreed_time_ms;
    assert_eq!(check(&node, &good, Some(prev), now), Ok(()));
    // Samples of the 4 validators' clocks (skews -40, 3, 17, 900): the lower median is the
    // second one, so the rule gives wall + 3.
    let wall = GENESIS_MS + 2 * 250;
    assert_eq!(good.agreed_time_ms, wall + 3);

    let mut lying = good.clone();
    lying.agreed_time_ms += 3_600_000;
    assert_eq!(
        check(&node, &lying, Some(prev), now),
        Err(BlockRejection::Invalid(Invalid::Time(
            TimeError::Mismatch {
                proposed: wall + 3 + 3_600_000,
                expected: wall + 3,
            }
        )))
    );
    let mut omitting = good.clone();
    omitting.samples.truncate(2);
    assert!(matches!(
        check(&node, &omitting, Some(prev), now),
        Err(BlockRejection::Invalid(Invalid::Time(
            TimeError::TooFewSamples { got: 2, need: 3 }
        )))
    ));
    let mut forged = good.clone();
    forged.samples[0].time_ms += 1;
    assert_eq!(
        check(&node, &forged, Some(prev), now),
        Err(BlockRejection::Invalid(Invalid::BadSampleSignature {
            index: 0
        }))
    );
    let mut other_value = good.clone();
    other_value.prev_id = Hash32([7; 32]);
    assert_eq!(
        check(&node, &other_value, Some(prev), now),
        Err(BlockRejection::WrongScope)
    );
    // The state digest a quorum's commit vouches for (snapshot catch-up): another one, or
    // none (a block of the first layout), is refused.
    for prev_state in [Some([7; 32]), None] {
        let lying = Block {
            prev_state,
            ..good.clone()
        };
        assert_eq!(
            check(&node, &lying, Some(prev), now),
            Err(BlockRejection::WrongState)
        );
    }
    // The samples' median more than the hard limit ahead of this validator's clock.
    assert!(matches!(
        check(&node, &good, Some(prev), wall - HARD_LIMIT_MS - 10),
        Err(BlockRejection::Invalid(Invalid::Time(
            TimeError::OutOfBounds { .. }
        )))
    ));
}

/// `block`'s samples, ticks and requests signed again, by the same validators and client (key
/// 9), for the chain of `domain`.
fn resigned(block: &Block, domain: &SigningDomain) -> Block {
    let (_, signers) = validators();
    let by_key = |a: &ccron_node::Address| signers.iter().find(|s| s.public_key() == a.0).unwrap();
    let mut b = block.clone();
    for s in &mut b.samples {
        let msg = PlainCommit::sample_message(
            domain,
            b.height - 1,
            b.prev_round,
            &b.prev_id,
            &s.validator,
            s.time_ms,
        );
        s.signature = by_key(&s.validator).sign_raw(&msg);
    }
    for t in &mut b.ticks {
        *t = TickTx::sign(domain, t.component, t.number, by_key(&t.submitter));
    }
    for r in &mut b.requests {
        *r = r
            .request
            .clone()
            .sign(domain, &SigningKey::from_bytes(&[9; 32]));
    }
    b
}

/// Issue 23, item 6: no signing domain named the chain, so a clock sample, a tick or a client
/// request signed for one chain verified on every other chain with the same keys. Each is now
/// refused by a validator of another chain (and one signed in domain 1 by a chain of domain 2),
/// with the typed reason the kernel counts.
#[test]
fn samples_ticks_and_requests_signed_for_another_chain_are_refused() {
    let cfg = orders_config();
    let mut node = orders_host();
    let blocks = chain(&mut node, 2, 250, &[cfg.component], BTreeMap::new());
    let prev = PrevCommit {
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let good = next_block(
        &node,
        Some((prev, 1)),
        250,
        &[cfg.component],
        vec![order(1)],
    );
    let now = good.agreed_time_ms;
    assert!(!good.samples.is_empty() && !good.ticks.is_empty() && !good.requests.is_empty());
    assert_eq!(check(&node, &good, Some(prev), now), Ok(()));
    let chain_b = SigningDomain::chain(b"another-chain").unwrap();
    // The same block signed for chain B is valid on chain B, and only there.
    let of_b = resigned(&good, &chain_b);
    assert_eq!(check_in(&chain_b, &node, &of_b, Some(prev), now), Ok(()));
    assert_eq!(
        check_in(&chain_b, &node, &good, Some(prev), now),
        Err(BlockRejection::Invalid(Invalid::BadSampleSignature {
            index: 0
        }))
    );
    for foreign in [chain_b, SigningDomain::V1] {
        let other = resigned(&good, &foreign);
        let mut sample = good.clone();
        sample.samples[1] = other.samples[1].clone();
        assert_eq!(
            check(&node, &sample, Some(prev), now),
            Err(BlockRejection::Invalid(Invalid::BadSampleSignature {
                index: 1
            })),
            "{foreign:?}"
        );
        let mut tick = good.clone();
        tick.ticks[0] = other.ticks[0].clone();
        assert!(
            matches!(
                check(&node, &tick, Some(prev), now),
                Err(BlockRejection::Invalid(Invalid::BadTickSignature { .. }))
            ),
            "{foreign:?}"
        );
        let mut request = good.clone();
        request.requests[0] = other.requests[0].clone();
        assert_eq!(
            check(&node, &request, Some(prev), now),
            Err(BlockRejection::Invalid(Invalid::BadRequestSignature {
                index: 0
            })),
            "{foreign:?}"
        );
    }
}

/// Regression (issue 23, defect 1: a block was refused unless its `prev_round` equalled the
/// round of the commit this node stored for h-1; honest nodes can store commits of one value
/// from different rounds and then refused each other's proposals forever): samples of any
/// round's commit of the decided value are accepted, as long as they verify for that round.
#[test]
fn samples_of_another_rounds_commit_of_the_same_value_are_accepted() {
    let components = DemoTables::default().components();
    let mut node = demo_host();
    let blocks = chain(&mut node, 2, 250, &components, BTreeMap::new());
    let prev = PrevCommit {
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    // This node stored the round-2 commit; the proposer holds the round-5 one.
    for round in [2, 5] {
        let b = next_block(&node, Some((prev, round)), 250, &components, Vec::new());
        assert_eq!(b.prev_round, round);
        assert_eq!(check(&node, &b, Some(prev), b.agreed_time_ms), Ok(()));
    }
    // A round the samples were not signed for does not verify.
    let mut relabeled = next_block(&node, Some((prev, 2)), 250, &components, Vec::new());
    relabeled.prev_round = 6;
    assert!(matches!(
        check(&node, &relabeled, Some(prev), relabeled.agreed_time_ms),
        Err(BlockRejection::Invalid(Invalid::BadSampleSignature { .. }))
    ));
}

// Issue 23, defect 6: height 1's time was the first proposer's stamp, anything within 10 s of
// each validator's clock; it is now the genesis time itself, whatever the clocks say.
#[test]
fn height_one_is_timed_at_the_genesis_time_exactly() {
    let components = DemoTables::default().components();
    let node = demo_host();
    let first = next_block(&node, None, 250, &components, Vec::new());
    assert_eq!(first.agreed_time_ms, GENESIS_MS);
    // Accepted at any local clock (a chain started long after its genesis time included).
    for now in [GENESIS_MS, GENESIS_MS + 3_600_000, GENESIS_MS - 60_000] {
        assert_eq!(check(&node, &first, None, now), Ok(()));
    }
    // A proposer's stamp is no longer a choice: any other time is refused.
    for delta in [-1, 1, 2_000, -2_000] {
        let mut other = first.clone();
        other.agreed_time_ms += delta;
        assert!(
            matches!(
                check(&node, &other, None, GENESIS_MS + 1_000),
                Err(BlockRejection::Invalid(Invalid::Time(
                    TimeError::Mismatch { .. }
                )))
            ),
            "{delta}"
        );
    }
    let mut with_samples = first.clone();
    with_samples.prev_round = 1;
    assert_eq!(
        check(&node, &with_samples, None, GENESIS_MS),
        Err(BlockRejection::WrongScope)
    );
}

#[test]
fn the_rule_refuses_forged_oversized_and_repeated_requests() {
    let components = [orders_config().component];
    let mut node = orders_host();
    let blocks = chain(&mut node, 2, 250, &components, BTreeMap::new());
    let prev = PrevCommit {
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let with = |requests: Vec<SignedRequest>| {
        next_block(&node, Some((prev, 2)), 250, &components, requests)
    };
    let judge = |b: &Block| check(&node, b, Some(prev), b.agreed_time_ms);
    assert_eq!(judge(&with(vec![order(1), order(2)])), Ok(()));
    let mut forged = with(vec![order(1), order(2)]);
    forged.requests[1].request.number = 7;
    assert_eq!(
        judge(&forged),
        Err(BlockRejection::Invalid(Invalid::BadRequestSignature {
            index: 1
        }))
    );
    let twin = ClientRequest {
        payload: b"other".to_vec(),
        ..order(1).request
    }
    .sign(&dom(), &SigningKey::from_bytes(&[9; 32]));
    assert_eq!(
        judge(&with(vec![order(1), order(2), twin])),
        Err(BlockRejection::Invalid(Invalid::RepeatedRequest {
            index: 2
        }))
    );
    assert!(matches!(
        judge(&with((0..=MAX_BLOCK_REQUESTS as u64).map(order).collect())),
        Err(BlockRejection::Invalid(Invalid::TooManyRequests { .. }))
    ));
    let mut big = order(1);
    big.request.payload = vec![0; ccron_node::request::MAX_PAYLOAD_BYTES + 1];
    assert!(matches!(
        judge(&with(vec![big])),
        Err(BlockRejection::BadRequest { index: 0, .. })
    ));
}

/// Tick admission on the node: a non-validator's tick and a second tick of one submitter,
/// component and period are refused at execution (typed, counted); the tick pool refuses them
/// and a throttled duplicate before ordering; the validity rule refuses a forged, repeated or
/// replayed tick.
#[test]
fn non_validator_duplicate_and_replayed_ticks_are_refused() {
    let components = DemoTables::default().components();
    let c = components[0];
    let (vs, signers) = validators();
    let outsider = Signer::new([0xAB; 32]);
    let block = |height: u64, agreed_time_ms: i64, ticks: Vec<TickTx>| Block {
        height,
        prev_round: 0,
        prev_id: Hash32::default(),
        samples: Vec::new(),
        agreed_time_ms,
        ticks,
        requests: Vec::new(),
        prev_state: None,
    };
    // Execution (the kernel's TickGate through `LedgerHost`): heights 1 and 2 in one 200 ms
    // period; a replayed number at height 3.
    let mut host = demo_host();
    let t0 = GENESIS_MS - GENESIS_MS.rem_euclid(DEFAULT_TICK_PERIOD_MS as i64);
    let out = host
        .execute(
            &block(
                1,
                t0,
                vec![
                    TickTx::sign(&dom(), c, 1, &signers[0]),
                    TickTx::sign(&dom(), c, 1, &outsider),
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
            &block(2, t0 + 150, vec![TickTx::sign(&dom(), c, 2, &signers[0])]),
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
    let out = host
        .execute(
            &block(3, t0 + 900, vec![TickTx::sign(&dom(), c, 2, &signers[0])]),
            &vs,
        )
        .unwrap();
    assert!(matches!(
        out.results[0],
        TxResult::TickSkipped(TickRejection::Stale {
            number: 2,
            last: 2,
            ..
        })
    ));
    let counters = host.host().counters();
    assert_eq!((counters.ticks_evaluated, counters.ticks_skipped), (1, 3));
    assert_eq!(counters.ticks_by_sender, BTreeMap::from([(0, 1)]));

    // Before ordering (ccron's TickPool on a node): not a validator, throttled duplicate.
    let mut pool: TickPool<TickTx> = TickPool::new(N as u32, components.iter().copied());
    let admit = |pool: &mut TickPool<TickTx>, t: TickTx| {
        pool.admit(t.component, vs.index_of(&t.submitter), t.number, t)
    };
    assert_eq!(
        admit(&mut pool, TickTx::sign(&dom(), c, 1, &outsider)),
        Err(TickRejection::NotAValidator)
    );
    assert_eq!(
        admit(&mut pool, TickTx::sign(&dom(), c, 5, &signers[1])),
        Ok(())
    );
    assert!(matches!(
        admit(&mut pool, TickTx::sign(&dom(), c, 5, &signers[1])),
        Err(TickRejection::AlreadyPending { pending: 5, .. })
    ));
    assert_eq!(pool.counters().not_a_validator, 1);
    assert_eq!(pool.counters().already_pending, 1);
    assert_eq!(pool.len(), 1);

    // The validity rule: a replayed number (a decided block carried it), a forged signature or
    // one submitter's two ticks of a component.
    let mut node = demo_host();
    let blocks = chain(&mut node, 2, 250, &components, BTreeMap::new());
    let prev = PrevCommit {
        id: blocks[1].id(),
        agreed_time_ms: blocks[1].agreed_time_ms,
    };
    let good = next_block(&node, Some((prev, 2)), 250, &components, Vec::new());
    let judge = |b: &Block| check(&node, b, Some(prev), b.agreed_time_ms);
    assert_eq!(judge(&good), Ok(()));
    let sender_of = |t: &TickTx| {
        signers
            .iter()
            .position(|s| s.public_key() == t.submitter.0)
            .unwrap()
    };
    let mut replayed = good.clone();
    replayed.ticks[0] = TickTx::sign(&dom(), c, 2, &signers[sender_of(&good.ticks[0])]);
    assert!(matches!(
        judge(&replayed),
        Err(BlockRejection::Invalid(Invalid::Tick {
            index: 0,
            reason: TickRejection::Stale { .. }
        }))
    ));
    let mut forged = good.clone();
    forged.ticks[0].number += 1;
    assert_eq!(
        judge(&forged),
        Err(BlockRejection::Invalid(Invalid::BadTickSignature {
            index: 0
        }))
    );
    let mut twice = good.clone();
    let again = twice.ticks[0].clone();
    twice.ticks.push(TickTx::sign(
        &dom(),
        again.component,
        again.number + 1,
        &signers[sender_of(&again)],
    ));
    assert_eq!(
        judge(&twice),
        Err(BlockRejection::Invalid(Invalid::RepeatedTick { index: 2 }))
    );
}

// Issue 23, defect 6: a valid block could exceed what the engine's value sync carries; the
// size is now bounded, and checked before any signature.
#[test]
fn a_block_over_the_size_bound_is_refused_before_any_signature() {
    let components = DemoTables::default().components();
    let node = demo_host();
    let mut big = next_block(&node, None, 250, &components, Vec::new());
    let filler = big.ticks.first().cloned().unwrap_or_else(|| {
        ccron_node::TickTx::sign(&dom(), components[0], 1, &Signer::new([1; 32]))
    });
    while big.encode().len() <= ccron_node::ledger::MAX_BLOCK_BYTES {
        big.ticks.push(filler.clone());
    }
    assert!(matches!(
        check(&node, &big, None, GENESIS_MS),
        Err(BlockRejection::TooLarge { .. })
    ));
}
