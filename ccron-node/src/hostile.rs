//! Byzantine validators for the localnet, engine-free: what a faulty validator does
//! ([`ByzantineKind`]), from when ([`Byzantine`]), and the junk a `bad-ticks` validator posts to
//! the other validators' endpoints ([`HostileClient`]).
//!
//! A Byzantine node is the real node binary with its own valid key and a strategy injected
//! at the seams where it builds, streams and signs (the engine adapter's, e.g.
//! `ccron_malachite::byzantine`); the honest path has no branch on it. The localnet starts one
//! with `--byzantine KIND[@INDEX]`, judges the honest nodes during the fault (liveness before
//! and during, agreement, refusals by reason, memory and disk) and reports it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

use crate::crypto::{Signer, SigningDomain};
use crate::request::{ClientRequest, MAX_SIGNED_REQUEST_BYTES};
use crate::types::{Sig, TickTx};

/// What a Byzantine validator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ByzantineKind {
    /// As proposer, signs two different values for each round it proposes in and streams
    /// both.
    Equivocate,
    /// Signs and streams proposal parts for many rounds and heights (valid and invalid
    /// blocks, rounds far ahead, heights far ahead and behind), continuously.
    Flood,
    /// Withholds its votes (each signed over other bytes, so no peer counts it) and never
    /// streams its proposal parts.
    Withhold,
    /// Never publishes its prevotes and precommits (signed as usual, then kept back: no
    /// vote, vote rebroadcast or certificate carrying its own vote leaves the node, and its
    /// sync answers carry no signature of its own); otherwise honest: it proposes and streams
    /// its parts when it is proposer.
    WithholdVotes,
    /// Stops its engine: the process lives on, silent.
    Silent,
    /// Posts forged, replayed, unknown-component, stranger and oversized ticks and forged,
    /// garbage and oversized client requests to every other validator's endpoint, and
    /// proposes blocks carrying a forged tick.
    BadTicks,
    /// As proposer, carries forged clock samples: one sample's signature changed or fewer
    /// samples than a quorum, alternately.
    ForgeSamples,
    /// As proposer, signs and streams blocks over the block bound
    /// ([`crate::ledger::MAX_BLOCK_BYTES`]: a junk request pads them to
    /// [`OVERSIZED_BLOCK_BYTES`]), below the engine's pub-sub limit so they reach every peer.
    Oversized,
    /// Its HTTP endpoint answers slowly: each answer starts after
    /// [`crate::slow_http::FIRST_BYTE_DELAY`] and drips one byte per
    /// [`crate::slow_http::DRIP_INTERVAL`] (the ticks other validators forward to it, catch-up
    /// and read requests); otherwise honest.
    SlowHttp,
    /// Its schedule read endpoints lie ([`crate::lie_reads`]): each answer is well formed, at
    /// its true height, with a doctored body (a list hides its last schedule and claims more
    /// matches, a description or a table entry is denied); otherwise honest. A reader
    /// believing f+1 identical answers (`ccron_http::ScheduleReader`, the `ccron` CLI)
    /// outvotes it.
    LieReads,
}

/// The encoded size an `oversized` validator pads its blocks to: twice the block bound, half
/// the engine's 4 MiB pub-sub limit.
pub const OVERSIZED_BLOCK_BYTES: usize = 2 * crate::ledger::MAX_BLOCK_BYTES;

impl ByzantineKind {
    /// Every kind, in order.
    pub const ALL: [ByzantineKind; 10] = [
        ByzantineKind::Equivocate,
        ByzantineKind::Flood,
        ByzantineKind::Withhold,
        ByzantineKind::WithholdVotes,
        ByzantineKind::Silent,
        ByzantineKind::BadTicks,
        ByzantineKind::ForgeSamples,
        ByzantineKind::Oversized,
        ByzantineKind::SlowHttp,
        ByzantineKind::LieReads,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ByzantineKind::Equivocate => "equivocate",
            ByzantineKind::Flood => "flood",
            ByzantineKind::Withhold => "withhold",
            ByzantineKind::WithholdVotes => "withhold-votes",
            ByzantineKind::Silent => "silent",
            ByzantineKind::BadTicks => "bad-ticks",
            ByzantineKind::ForgeSamples => "forge-samples",
            ByzantineKind::Oversized => "oversized",
            ByzantineKind::SlowHttp => "slow-http",
            ByzantineKind::LieReads => "lie-reads",
        }
    }
}

impl std::fmt::Display for ByzantineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ByzantineKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                format!("unknown Byzantine kind '{s}' (one of {})", names.join(", "))
            })
    }
}

/// A node's Byzantine behaviour: its kind, active from a wall-clock instant (Unix ms; honest
/// before, so a run measures liveness before and during the fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Byzantine {
    /// What it does.
    pub kind: ByzantineKind,
    /// From when (Unix ms).
    pub from_ms: i64,
}

impl Byzantine {
    /// Whether the behaviour is on at `now_ms`.
    pub fn active(&self, now_ms: i64) -> bool {
        now_ms >= self.from_ms
    }
}

/// Parses `KIND[@INDEX]` (the localnet's `--byzantine`): the kind and the node (default 0).
///
/// # Errors
/// An unknown kind or a bad index.
pub fn parse_target(s: &str) -> Result<(ByzantineKind, usize), String> {
    let (kind, index) = match s.split_once('@') {
        Some((k, i)) => (
            k,
            i.parse::<usize>()
                .map_err(|e| format!("bad node index '{i}': {e}"))?,
        ),
        None => (s, 0),
    };
    Ok((kind.parse()?, index))
}

/// One kind of junk a `bad-ticks` validator posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Junk {
    /// Its own tick with the signature's bits flipped.
    ForgedTick,
    /// Its own validly signed tick for a component no table has.
    UnknownComponent,
    /// A tick signed by a key that is no validator's.
    StrangerTick,
    /// A tick it already posted, posted again (a replay).
    ReplayedTick,
    /// Bytes over a tick's size bound.
    OversizedTick,
    /// A client request whose signature is not its key's.
    ForgedRequest,
    /// Bytes that decode to nothing.
    GarbageRequest,
    /// A body over the endpoint's bound.
    OversizedRequest,
    /// Its own tick, validly signed for another chain (same key, another chain id).
    OtherChainTick,
    /// A client request validly signed for another chain.
    OtherChainRequest,
}

impl Junk {
    /// Every kind of junk, in the order posted.
    pub const ALL: [Junk; 10] = [
        Junk::ForgedTick,
        Junk::UnknownComponent,
        Junk::StrangerTick,
        Junk::ReplayedTick,
        Junk::OversizedTick,
        Junk::ForgedRequest,
        Junk::GarbageRequest,
        Junk::OversizedRequest,
        Junk::OtherChainTick,
        Junk::OtherChainRequest,
    ];

    /// Its name in the stats.
    pub fn name(self) -> &'static str {
        match self {
            Junk::ForgedTick => "forged_tick",
            Junk::UnknownComponent => "unknown_component",
            Junk::StrangerTick => "stranger_tick",
            Junk::ReplayedTick => "replayed_tick",
            Junk::OversizedTick => "oversized_tick",
            Junk::ForgedRequest => "forged_request",
            Junk::GarbageRequest => "garbage_request",
            Junk::OversizedRequest => "oversized_request",
            Junk::OtherChainTick => "other_chain_tick",
            Junk::OtherChainRequest => "other_chain_request",
        }
    }

    /// The path and body of junk number `k` of this kind from `signer`, for the chain of
    /// signing domain `domain`.
    pub fn make(
        self,
        domain: &SigningDomain,
        signer: &Signer,
        component: u32,
        k: u64,
    ) -> (&'static str, Vec<u8>) {
        let other = other_chain(domain);
        match self {
            Junk::ForgedTick => {
                let mut t = TickTx::sign(domain, component, k.saturating_add(1 << 40), signer);
                t.signature.0[7] ^= 0x20;
                ("/v1/ticks", t.encode())
            }
            Junk::UnknownComponent => (
                "/v1/ticks",
                TickTx::sign(domain, u32::MAX - 7, k.saturating_add(1), signer).encode(),
            ),
            Junk::StrangerTick => {
                let stranger = Signer::new([0x5a; 32]);
                (
                    "/v1/ticks",
                    TickTx::sign(domain, component, k.saturating_add(1), &stranger).encode(),
                )
            }
            // The same number every time: admitted once at most, then pending or stale.
            Junk::ReplayedTick => (
                "/v1/ticks",
                TickTx::sign(domain, component, 1, signer).encode(),
            ),
            Junk::OversizedTick => ("/v1/ticks", vec![0xab; crate::types::MAX_TICK_BYTES * 4]),
            Junk::ForgedRequest => {
                let key = SigningKey::from_bytes(&[0x3c; 32]);
                let mut r = ClientRequest {
                    client_key: key.verifying_key().to_bytes(),
                    number: k.saturating_add(1),
                    payload: b"forged".to_vec(),
                }
                .sign(domain, &key);
                r.signature = Sig([0x11; 64]);
                ("/v1/requests", r.encode())
            }
            Junk::OtherChainTick => (
                "/v1/ticks",
                TickTx::sign(&other, component, k.saturating_add(1 << 41), signer).encode(),
            ),
            Junk::OtherChainRequest => {
                let key = SigningKey::from_bytes(&[0x3d; 32]);
                let r = ClientRequest {
                    client_key: key.verifying_key().to_bytes(),
                    number: k.saturating_add(1),
                    payload: b"other chain".to_vec(),
                }
                .sign(&other, &key);
                ("/v1/requests", r.encode())
            }
            Junk::GarbageRequest => ("/v1/requests", vec![0xff; 97]),
            Junk::OversizedRequest => ("/v1/requests", vec![0u8; MAX_SIGNED_REQUEST_BYTES * 3]),
        }
    }
}

/// A chain other than `domain`'s (version 2 with another chain id; for a version 1 chain a
/// version 2 one).
fn other_chain(domain: &SigningDomain) -> SigningDomain {
    let mut id = domain.chain_id().to_vec();
    id.truncate(crate::crypto::MAX_CHAIN_ID_BYTES - 6);
    id.extend_from_slice(b"-other");
    SigningDomain::chain(&id).unwrap_or(SigningDomain::V1)
}

/// What a [`HostileClient`] posted, and the answers: per junk kind, status code -> count
/// (0: no answer: connection refused or reset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostileStats {
    /// Per junk kind, per status code, how many posts.
    pub answers: BTreeMap<String, BTreeMap<u16, u64>>,
}

/// The junk poster of a `bad-ticks` validator: a thread that, every `interval`, posts each
/// kind of [`Junk`] to every target endpoint, until stopped.
#[derive(Debug)]
pub struct HostileClient {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<HostileStats>>,
}

impl HostileClient {
    /// Starts posting to `targets` as `signer` (a validator's key) of the chain of `domain`,
    /// ticks for `component`.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(
        targets: Vec<SocketAddr>,
        domain: SigningDomain,
        signer: Signer,
        component: u32,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("hostile-client".into())
            .spawn(move || {
                let mut stats = HostileStats::default();
                let mut k = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    for junk in Junk::ALL {
                        let (path, body) = junk.make(&domain, &signer, component, k);
                        for &t in &targets {
                            let code = crate::load::post(t, path, &body).map_or(0, |(c, _)| c);
                            *stats
                                .answers
                                .entry(junk.name().to_string())
                                .or_default()
                                .entry(code)
                                .or_default() += 1;
                        }
                    }
                    k = k.wrapping_add(1);
                    std::thread::sleep(interval);
                }
                stats
            })?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread and returns what it posted.
    pub fn stop(mut self) -> HostileStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for HostileClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_and_without_an_index() {
        assert_eq!(parse_target("flood"), Ok((ByzantineKind::Flood, 0)));
        assert_eq!(
            parse_target("bad-ticks@2"),
            Ok((ByzantineKind::BadTicks, 2))
        );
        assert_eq!(
            parse_target("withhold-votes@3"),
            Ok((ByzantineKind::WithholdVotes, 3))
        );
        assert!(parse_target("nope").is_err());
        assert!(parse_target("silent@x").is_err());
        for k in ByzantineKind::ALL {
            assert_eq!(k.name().parse::<ByzantineKind>(), Ok(k));
        }
    }

    #[test]
    fn every_junk_is_refused_by_the_checks_a_node_makes() {
        let signer = Signer::new([9; 32]);
        let d = SigningDomain::chain(b"hostile").unwrap();
        for junk in Junk::ALL {
            let (path, body) = junk.make(&d, &signer, 1, 3);
            match junk {
                Junk::ForgedTick | Junk::OversizedTick | Junk::OtherChainTick => {
                    assert!(
                        TickTx::decode(&body).filter(|t| t.verify(&d)).is_none(),
                        "{junk:?}"
                    )
                }
                Junk::UnknownComponent | Junk::StrangerTick | Junk::ReplayedTick => {
                    // Well signed: refused by the pool (unknown component, not a validator,
                    // stale or pending), not by the signature check.
                    assert!(
                        TickTx::decode(&body).is_some_and(|t| t.verify(&d)),
                        "{junk:?}"
                    )
                }
                Junk::ForgedRequest
                | Junk::GarbageRequest
                | Junk::OversizedRequest
                | Junk::OtherChainRequest => {
                    assert_eq!(path, "/v1/requests");
                    assert!(
                        crate::request::SignedRequest::decode_verified(&body, &d).is_err(),
                        "{junk:?}"
                    )
                }
            }
        }
    }
}
