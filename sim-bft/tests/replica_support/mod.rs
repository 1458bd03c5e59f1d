//! An in-order deterministic harness for replica tests: n replicas, a FIFO network, virtual
//! time, per-replica durable storage, isolation of replicas, timers fired by advancing time.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use sim_bft::crypto::client_signing_key;
use sim_bft::ledgers::KvOp;
use sim_bft::node::{ClientId, Executed, Input, Millis, Node, NodeId, Output};
use sim_bft::protocol::client_request_bytes;
use sim_bft::replica::{Replica, ReplicaConfig};

pub const SEED: u64 = 42;

type SeqRecord = (NodeId, [u8; 32], [u8; 32], Option<Millis>);
pub const T0: Millis = 1_700_000_000_000;

pub struct Harness {
    pub n: u32,
    pub replicas: Vec<Option<Replica>>,
    pub cfgs: Vec<ReplicaConfig>,
    pub now: Millis,
    pub queue: VecDeque<(NodeId, NodeId, Vec<u8>)>,
    pub executed: Vec<Vec<Executed>>,
    pub replies: Vec<(ClientId, Vec<u8>)>,
    pub storage: Vec<BTreeMap<Vec<u8>, Vec<u8>>>,
    pub isolated: BTreeSet<NodeId>,
    pub clock_offset_ms: Vec<Millis>,
    pub next_req: BTreeMap<ClientId, u64>,
    pub delivered: u64,
    /// When set, `deliver_all` picks messages in a seeded random order and drops some.
    pub chaos: Option<Chaos>,
}

/// Seeded reordering and loss for `deliver_all`.
pub struct Chaos {
    pub state: u64,
    /// Drop probability in per mille.
    pub drop_per_mille: u64,
}

impl Chaos {
    pub fn next(&mut self) -> u64 {
        // xorshift64*: a stable algorithm, so a seed reproduces a run.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

impl Harness {
    pub fn new(n: u32, tweak: impl Fn(&mut ReplicaConfig)) -> Self {
        let cfgs: Vec<ReplicaConfig> = (0..n)
            .map(|i| {
                let mut c = ReplicaConfig::new(i, n, SEED, 8);
                tweak(&mut c);
                c
            })
            .collect();
        Self {
            n,
            replicas: cfgs
                .iter()
                .map(|c| Some(Replica::new(c.clone()).unwrap()))
                .collect(),
            cfgs,
            now: T0,
            queue: VecDeque::new(),
            executed: vec![Vec::new(); n as usize],
            replies: Vec::new(),
            storage: vec![BTreeMap::new(); n as usize],
            isolated: BTreeSet::new(),
            clock_offset_ms: vec![0; n as usize],
            next_req: BTreeMap::new(),
            delivered: 0,
            chaos: None,
        }
    }

    pub fn replica(&self, i: NodeId) -> &Replica {
        self.replicas[i as usize].as_ref().unwrap()
    }

    /// Hands `input` to replica `to` now and routes its outputs.
    pub fn input(&mut self, to: NodeId, input: Input) {
        let Some(r) = self.replicas[to as usize].as_mut() else {
            return;
        };
        let mut out = Vec::new();
        r.handle(
            self.now + self.clock_offset_ms[to as usize],
            input,
            &mut out,
        );
        r.check_invariants().unwrap();
        for o in out {
            match o {
                Output::Send { to: dest, bytes } => self.queue.push_back((to, dest, bytes)),
                Output::Broadcast { bytes } => {
                    for dest in 0..self.n {
                        if dest != to {
                            self.queue.push_back((to, dest, bytes.clone()));
                        }
                    }
                }
                Output::Reply { client, bytes } => self.replies.push((client, bytes)),
                Output::Store { key, value } => match value {
                    Some(v) => {
                        self.storage[to as usize].insert(key, v);
                    }
                    None => {
                        self.storage[to as usize].remove(&key);
                    }
                },
                Output::Sync => {}
                Output::Executed(e) => self.executed[to as usize].push(e),
            }
        }
    }

    /// Delivers queued messages in FIFO order until none is left.
    pub fn deliver_all(&mut self) {
        let mut steps = 0u64;
        loop {
            let next = match &mut self.chaos {
                None => self.queue.pop_front(),
                Some(c) if !self.queue.is_empty() => {
                    let i = (c.next() % self.queue.len() as u64) as usize;
                    let m = self.queue.swap_remove_back(i);
                    if c.next() % 1000 < c.drop_per_mille {
                        continue;
                    }
                    m
                }
                Some(_) => None,
            };
            let Some((from, to, bytes)) = next else {
                break;
            };
            steps += 1;
            assert!(steps < 5_000_000, "runaway message loop");
            if self.isolated.contains(&from) || self.isolated.contains(&to) {
                continue;
            }
            self.delivered += 1;
            self.input(to, Input::Peer { from, bytes });
        }
    }

    pub fn request_bytes(&mut self, client: ClientId, payload: Vec<u8>) -> Vec<u8> {
        let seq = self.next_req.entry(client).or_insert(0);
        *seq += 1;
        client_request_bytes(&client_signing_key(SEED, client), client, *seq, payload).unwrap()
    }

    /// A Put from `client` sent to every replica.
    pub fn put(&mut self, client: ClientId, key: &str, value: &str) {
        let payload = KvOp::Put {
            key: key.into(),
            value: value.into(),
        }
        .to_payload();
        let bytes = self.request_bytes(client, payload);
        for i in 0..self.n {
            if !self.isolated.contains(&i) {
                self.input(
                    i,
                    Input::Client {
                        bytes: bytes.clone(),
                    },
                );
            }
        }
    }

    pub fn tick(&mut self, replica: NodeId, component: u32) {
        self.input(replica, Input::InternalTick { component });
    }

    /// Advances virtual time by `ms` in 10 ms steps, firing due timers and delivering.
    pub fn advance(&mut self, ms: Millis) {
        let end = self.now + ms;
        while self.now < end {
            self.now = (self.now + 10).min(end);
            for i in 0..self.n {
                let due = self.replicas[i as usize]
                    .as_ref()
                    .and_then(|r| r.next_deadline())
                    .is_some_and(|d| d <= self.now + self.clock_offset_ms[i as usize]);
                if due {
                    self.input(i, Input::Timer);
                }
            }
            self.deliver_all();
        }
    }

    pub fn crash(&mut self, i: NodeId) {
        self.replicas[i as usize] = None;
    }

    pub fn recover(&mut self, i: NodeId) {
        let cfg = self.cfgs[i as usize].clone();
        let ticks = sim_bft::ledgers::TickCounter::new(1, cfg.num_pages - 1);
        let r = Replica::recover(
            cfg,
            Box::new(sim_bft::ledgers::KvLedger::new()),
            Box::new(ticks),
            &self.storage[i as usize],
        )
        .unwrap();
        self.replicas[i as usize] = Some(r);
    }

    /// Asserts that every pair of replicas in `set` executed identical prefixes (same seq ->
    /// same batch and state digest) and returns the smallest executed count.
    pub fn assert_agreement(&self, set: &[NodeId]) -> usize {
        let mut by_seq: BTreeMap<u64, SeqRecord> = BTreeMap::new();
        for &i in set {
            for e in &self.executed[i as usize] {
                if let Some((j, bd, sd, t)) = by_seq.get(&e.seq) {
                    assert_eq!(
                        *bd, e.batch_digest,
                        "batch digest differs at seq {} ({} vs {i})",
                        e.seq, j
                    );
                    assert_eq!(
                        *sd, e.state_digest,
                        "state digest differs at seq {} ({} vs {i})",
                        e.seq, j
                    );
                    assert_eq!(*t, e.agreed_time_ms, "agreed time differs at seq {}", e.seq);
                } else {
                    by_seq.insert(e.seq, (i, e.batch_digest, e.state_digest, e.agreed_time_ms));
                }
            }
        }
        set.iter()
            .map(|&i| self.executed[i as usize].len())
            .min()
            .unwrap_or(0)
    }

    pub fn total_requests(&self, i: NodeId) -> u64 {
        self.executed[i as usize]
            .iter()
            .map(|e| u64::from(e.requests))
            .sum()
    }
}
