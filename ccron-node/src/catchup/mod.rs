//! Catch-up from a peer's snapshot: a node whose height is below every peer's history minimum
//! (a wiped home, or a late joiner after the others pruned: `crate::store`'s pruning) cannot
//! take the missing heights from the engine's value sync. It takes a peer's newest snapshot and
//! the decided block above it instead, checks the pair against what the chain committed, and
//! installs it as its own store's base; the engine's sync then fetches the blocks above.
//!
//! **What vouches for a snapshot.** A snapshot of height `h` records the value id of block `h`
//! and the state digest after it. Block `h + 1` names both: `prev_id` (block `h`'s value id)
//! and `prev_state` (the state digest after `h`, which the validity rule requires every
//! proposal to carry and every honest validator checks against its own state,
//! `crate::ledger::validate_block`). Its commit (2f+1 precommits for its value id, checked by
//! the engine's `verify_commit`) therefore vouches, through at least f+1 honest validators'
//! checks, for the state the snapshot must restore to. An [`Offer`] is that pair: the snapshot
//! file's bytes and `Decided` block `h + 1`; [`verify_offer`] refuses it with a typed
//! [`CatchUpError`] unless the commit verifies, is the block's, the block links to the
//! snapshot's block and state, and the restored state gives that digest. Any peer may lie: the
//! node tries the next one ([`first_good_offer`]).
//!
//! **Installing** ([`install`]) is crash-safe: the snapshot is written first (temporary file,
//! fsync, rename; a snapshot ahead of the old store is refused at start, so a crash here leaves
//! the old node as it was), then the store is replaced by one whose base is `h` and whose only
//! block is `h + 1` (a copy renamed over `blocks.log`, as a prune does). The next
//! `NodeCore::open` restores the snapshot at the store's base and re-executes block `h + 1`.
//!
//! **The commit check is the engine's** ([`CommitVerifier`], injected: this crate knows no
//! engine): on Malachite, the certificate's precommit signatures, each checked with
//! `ccron::sig`'s one pinned rule in the chain's signing domain, by distinct validators of
//! the genesis' set holding more than two thirds of the voting power.
//!
//! **Serving and fetching.** [`serve`]: the routes a node answers (`GET /v1/catchup/history`,
//! `GET /v1/catchup/offer`), fed by the node's loop after each decided height; [`fetch`]: the
//! bounded client and [`fetch::before_start`], the trigger an adapter runs before its engine
//! starts; [`running`]: the same catch-up for a node that falls behind every peer's history
//! while its engine runs (detection, then a verified offer handed to the node's loop).

pub mod backoff;
pub mod blocks;
pub mod fetch;
pub mod running;
pub mod serve;
#[cfg(test)]
pub(crate) mod testkit;

use std::path::Path;

use borsh::{BorshDeserialize, BorshSerialize};
use ccron::host::Application;

use crate::ledger::LedgerHost;
use crate::snapshot::{MAX_SNAPSHOT_BYTES, SnapshotError, Snapshots};
use crate::store::{BlockStore, Commit, Decided, MAX_RECORD_BYTES, StoreError};

/// The largest offer read from a peer: a snapshot file, a block record and their lengths.
pub const MAX_OFFER_BYTES: u64 = MAX_SNAPSHOT_BYTES + MAX_RECORD_BYTES as u64 + 64;

/// A peer's newest snapshot and the decided block above it (what vouches for it).
#[derive(Debug, Clone, BorshSerialize, BorshDeserialize)]
pub struct Offer<C> {
    /// The snapshot file's bytes, as the peer keeps it (`crate::snapshot`'s format).
    pub snapshot: Vec<u8>,
    /// The decided block at the snapshot's height + 1, with its commit.
    pub above: Decided<C>,
}

impl<C: Commit> Offer<C> {
    /// Its bytes on the wire.
    ///
    /// # Errors
    /// Encoding failures (none for well-formed values).
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        borsh::to_vec(self)
    }

    /// Decodes an offer of at most [`MAX_OFFER_BYTES`].
    ///
    /// # Errors
    /// [`CatchUpError::TooLarge`], [`CatchUpError::Decode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, CatchUpError> {
        if bytes.len() as u64 > MAX_OFFER_BYTES {
            return Err(CatchUpError::TooLarge {
                bytes: bytes.len() as u64,
            });
        }
        borsh::from_slice(bytes).map_err(|e| CatchUpError::Decode(e.to_string()))
    }
}

/// Why an offer was refused (each a `tracing` warning; the node tries another peer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatchUpError {
    /// The peer did not answer in time, or with an error.
    #[error("fetch: {0}")]
    Fetch(String),
    /// The peer answered `429` or `5xx`, or is still backed off after such an answer
    /// ([`backoff`]): not asked before `retry_in_ms`.
    #[error("peer busy (status {status}); not asked again for {retry_in_ms} ms")]
    Busy {
        /// Its (last) status.
        status: u16,
        /// Milliseconds before it is asked again.
        retry_in_ms: u64,
    },
    /// Larger than [`MAX_OFFER_BYTES`].
    #[error("offer of {bytes} bytes, above the bound {MAX_OFFER_BYTES}")]
    TooLarge {
        /// Its size (or the size announced).
        bytes: u64,
    },
    /// Not an offer.
    #[error("offer does not decode: {0}")]
    Decode(String),
    /// The snapshot itself: header, checksum, decode, ledger, restore, digest.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The block is not the one above the snapshot.
    #[error("block {above} is not above snapshot {snapshot}")]
    NotAbove {
        /// The snapshot's height.
        snapshot: u64,
        /// The block's height.
        above: u64,
    },
    /// Not ahead of this node: nothing to catch up.
    #[error("snapshot {offered} is not above this node's height {have}")]
    NotAhead {
        /// The snapshot's height.
        offered: u64,
        /// This node's last height.
        have: u64,
    },
    /// The block's commit does not verify (signatures, quorum, height).
    #[error("the block's commit does not verify: {0}")]
    Commit(#[from] CommitRefusal),
    /// The commit is for another value than the block.
    #[error("the commit is not the block's")]
    NotCommitted,
    /// The block does not name the snapshot's block (`prev_id`).
    #[error("the block does not follow the snapshot's block")]
    Link,
    /// The block does not carry the snapshot's state digest (`prev_state`; absent in a block
    /// of the first layout): nothing committed vouches for this state.
    #[error("the committed state digest is not the snapshot's")]
    StateNotCommitted,
    /// The store could not be replaced.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CatchUpError {
    /// The refusal's kind, one word (the report's and the counters' key).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Fetch(_) => "fetch",
            Self::Busy { .. } => "busy",
            Self::TooLarge { .. } => "too_large",
            Self::Decode(_) => "decode",
            Self::Snapshot(_) => "snapshot",
            Self::NotAbove { .. } => "not_above",
            Self::NotAhead { .. } => "not_ahead",
            Self::Commit(_) => "commit",
            Self::NotCommitted => "not_committed",
            Self::Link => "link",
            Self::StateNotCommitted => "state_not_committed",
            Self::Store(_) => "store",
        }
    }
}

/// Why an engine refused a commit certificate ([`CommitVerifier`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitRefusal {
    /// A signer is not in the validator set.
    #[error("signer {0} is not a validator")]
    UnknownSigner(String),
    /// A validator's signature appears twice.
    #[error("validator {0} signed twice")]
    DuplicateSigner(String),
    /// A signature does not verify (for this height, round, value and chain).
    #[error("the signature of {0} does not verify")]
    BadSignature(String),
    /// The distinct valid signers hold at most two thirds of the voting power.
    #[error("{signed} of {total} voting power signed; more than two thirds are needed")]
    NotEnoughPower {
        /// The power that signed.
        signed: u64,
        /// The set's total.
        total: u64,
    },
    /// Another reason (an engine's own).
    #[error("{0}")]
    Other(String),
}

/// The engine's check of a commit certificate: signatures of distinct validators of the
/// chain's set, holding more than two thirds of the voting power, each on a precommit of the
/// commit's (height, round, value) in the chain's signing domain. Implemented by the engine
/// adapter (a closure works too).
pub trait CommitVerifier<C>: Send + Sync {
    /// `Ok` when `commit` is a valid commit certificate of this chain.
    ///
    /// # Errors
    /// The first reason it is not.
    fn verify_commit(&self, commit: &C) -> Result<(), CommitRefusal>;
}

impl<C, F: Fn(&C) -> Result<(), CommitRefusal> + Send + Sync> CommitVerifier<C> for F {
    fn verify_commit(&self, commit: &C) -> Result<(), CommitRefusal> {
        self(commit)
    }
}

/// An offer that passed [`verify_offer`]: the restored state at `height` and the block above.
#[derive(Debug)]
pub struct Verified<A, C> {
    /// The snapshot's height.
    pub height: u64,
    /// The state restored from it (its digest the committed one).
    pub ledger: LedgerHost<A>,
    /// Block `height + 1` and its commit.
    pub above: Decided<C>,
}

/// Checks `offer` (module docs) for a node at height `have` of ledger `ledger_name`:
/// `verifier` is the engine's check of a commit (signatures of a quorum of the validators, in
/// the chain's signing domain); `fresh` builds the ledger to restore into. The commit is
/// checked before anything in the snapshot is believed.
///
/// # Errors
/// The first reason the offer is refused.
pub fn verify_offer<A: Application, C: Commit>(
    offer: Offer<C>,
    have: u64,
    ledger_name: &str,
    fresh: &dyn Fn() -> LedgerHost<A>,
    verifier: &dyn CommitVerifier<C>,
) -> Result<Verified<A, C>, CatchUpError> {
    let from_peer = Path::new("(a peer's snapshot)");
    let body = crate::snapshot::decode_file(&offer.snapshot, from_peer)?;
    let (height, above) = (body.height, offer.above);
    if height <= have {
        return Err(CatchUpError::NotAhead {
            offered: height,
            have,
        });
    }
    if above.height() != height.saturating_add(1) || above.block.height != above.height() {
        return Err(CatchUpError::NotAbove {
            snapshot: height,
            above: above.height(),
        });
    }
    verifier.verify_commit(&above.commit)?;
    if above.commit.value_id() != above.block.id() {
        return Err(CatchUpError::NotCommitted);
    }
    if above.block.prev_id != body.block_id {
        return Err(CatchUpError::Link);
    }
    if above.block.prev_state != Some(body.state_digest) {
        return Err(CatchUpError::StateNotCommitted);
    }
    let mut ledger = fresh();
    crate::snapshot::restore_body(&mut ledger, body, ledger_name, from_peer, false)?;
    Ok(Verified {
        height,
        ledger,
        above,
    })
}

/// The peers whose offers were refused, and why.
pub type Refusals<P> = Vec<(P, CatchUpError)>;

/// Tries `peers` in turn: fetches each one's offer (`fetch`, which bounds its own time and
/// size) and verifies it; the first good one, and every refusal (each also a `tracing`
/// warning).
pub fn first_good_offer<A: Application, C: Commit, P: std::fmt::Debug>(
    peers: impl IntoIterator<Item = P>,
    mut fetch: impl FnMut(&P) -> Result<Vec<u8>, CatchUpError>,
    have: u64,
    ledger_name: &str,
    fresh: &dyn Fn() -> LedgerHost<A>,
    verifier: &dyn CommitVerifier<C>,
) -> (Option<Verified<A, C>>, Refusals<P>) {
    let mut refused = Vec::new();
    for peer in peers {
        let verdict =
            fetch(&peer).and_then(|bytes| judge(&bytes, have, ledger_name, fresh, verifier));
        match verdict {
            Ok(v) => {
                tracing::info!(
                    ?peer,
                    height = v.height,
                    "catch-up: a peer's snapshot verified"
                );
                return (Some(v), refused);
            }
            Err(e) => {
                tracing::warn!(?peer, error = %e, "catch-up: a peer's snapshot refused");
                refused.push((peer, e));
            }
        }
    }
    (None, refused)
}

/// Decodes (bounded) and verifies one offer's bytes ([`Offer::decode`], [`verify_offer`]).
///
/// # Errors
/// The first reason the offer is refused.
pub fn judge<A: Application, C: Commit>(
    bytes: &[u8],
    have: u64,
    ledger_name: &str,
    fresh: &dyn Fn() -> LedgerHost<A>,
    verifier: &dyn CommitVerifier<C>,
) -> Result<Verified<A, C>, CatchUpError> {
    let offer = Offer::<C>::decode(bytes)?;
    verify_offer(offer, have, ledger_name, fresh, verifier)
}

/// What this node offers a peer that catches up: its newest snapshot (at or above the store's
/// base) whose next block it holds, and that block. `None`: no such pair.
///
/// # Errors
/// The store's or the snapshot directory's I/O errors.
pub fn offer<C: Commit>(
    snapshots: &Snapshots,
    store: &BlockStore<C>,
) -> Result<Option<Offer<C>>, CatchUpError> {
    offer_from(snapshots, store.base(), store.last_height(), |h| {
        store.get(h).map_err(CatchUpError::from)
    })
}

/// [`offer`] over any view of a store: its pruned `base`, its `last` height and a reader of
/// the decided block at a height.
///
/// # Errors
/// The reader's or the snapshot directory's errors.
pub fn offer_from<C: Commit>(
    snapshots: &Snapshots,
    base: u64,
    last: u64,
    get: impl Fn(u64) -> Result<Option<Decided<C>>, CatchUpError>,
) -> Result<Option<Offer<C>>, CatchUpError> {
    for (height, path) in snapshots.list()? {
        if height < base || height >= last {
            continue;
        }
        let Some(above) = get(height + 1)? else {
            continue;
        };
        let snapshot = match crate::snapshot::read_bounded(&path) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "catch-up offer: snapshot not read");
                continue;
            }
        };
        return Ok(Some(Offer { snapshot, above }));
    }
    Ok(None)
}

/// Installs a verified offer in node directory `dir` (module docs: the snapshot first, then
/// the store replaced by one whose base is the snapshot's height).
///
/// # Errors
/// I/O errors writing the snapshot or the store.
pub fn install<A: Application, C: Commit>(
    dir: &Path,
    ledger_name: &str,
    verified: &Verified<A, C>,
) -> Result<(), CatchUpError> {
    let snapshots = Snapshots::open(&dir.join("snapshots"))?;
    snapshots.write(
        verified.height,
        verified.above.block.prev_id,
        ledger_name,
        &verified.ledger,
    )?;
    BlockStore::<C>::replace_with_base(&dir.join("blocks.log"), verified.height, &verified.above)?;
    tracing::info!(
        height = verified.height,
        "catch-up: snapshot and the block above it installed"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Signer, SigningDomain};
    use crate::ledger::{DEFAULT_PAGES, LedgerSetup};
    use crate::snapshot::Body;
    use crate::store::PlainCommit;
    use crate::types::{Block, Hash32, TickTx, Validators};
    use ccron::host::CronLedger;
    use ccron_ledgers::demo::{DemoLedger, DemoTables, demo_ledger};
    use std::path::PathBuf;

    type Demo = CronLedger<DemoLedger>;

    fn fresh() -> LedgerHost<Demo> {
        let tables = DemoTables::default();
        let setup = LedgerSetup {
            validators: 4,
            tick_periods: tables.components().into_iter().map(|c| (c, 200)).collect(),
            pages: DEFAULT_PAGES,
        };
        LedgerHost::new(demo_ledger(&tables).unwrap(), &setup)
    }

    fn scratch(name: &str) -> PathBuf {
        crate::testutil::scratch("catchup", name)
    }

    fn signers() -> Vec<Signer> {
        (1..=4u8).map(|i| Signer::new([i; 32])).collect()
    }

    fn validators() -> Validators {
        let keys: Vec<[u8; 32]> = signers().iter().map(|s| s.public_key()).collect();
        Validators::new(&keys)
    }

    /// The test's stand-in for an engine's commit check: round 0 is "signed by a quorum",
    /// any other round is a forgery.
    fn verify_commit(c: &PlainCommit) -> Result<(), CommitRefusal> {
        if c.round == 0 {
            Ok(())
        } else {
            Err(CommitRefusal::NotEnoughPower {
                signed: 0,
                total: 4,
            })
        }
    }

    /// A node of a chain (`shift` moves its times: another chain) in `dir`: `n` linked blocks,
    /// each carrying the state digest it executes on, a snapshot every `every` heights. The
    /// state digest after each height (index `h`).
    fn node(dir: &Path, n: u64, every: u64, shift: i64) -> Vec<[u8; 32]> {
        let set = validators();
        let signers = signers();
        let components = DemoTables::default().components();
        let mut store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let mut ledger = fresh();
        let mut digests = vec![ledger.state_digest()];
        let mut prev_id = Hash32::default();
        for h in 1..=n {
            let b = Block {
                height: h,
                prev_round: 0,
                prev_id,
                samples: Vec::new(),
                agreed_time_ms: 1_700_000_000_000 + 250 * h as i64 + shift,
                ticks: components
                    .iter()
                    .map(|&c| TickTx::sign(&SigningDomain::V1, c, h, &signers[h as usize % 4]))
                    .collect(),
                requests: Vec::new(),
                prev_state: Some(ledger.state_digest()),
            };
            prev_id = b.id();
            store
                .append(Decided {
                    commit: PlainCommit::of(&b),
                    block: b.clone(),
                })
                .unwrap();
            ledger.execute(&b, &set).unwrap();
            digests.push(ledger.state_digest());
            if h % every == 0 {
                snaps.write(h, b.id(), "demo", &ledger).unwrap();
            }
        }
        digests
    }

    fn offer_of(dir: &Path) -> Offer<PlainCommit> {
        let snaps = Snapshots::open(&dir.join("snapshots")).unwrap();
        let store = BlockStore::<PlainCommit>::open(&dir.join("blocks.log")).unwrap();
        offer(&snaps, &store).unwrap().unwrap()
    }

    /// The same offer with its snapshot's body changed (the checksum made to match).
    fn with_body(o: &Offer<PlainCommit>, change: impl FnOnce(&mut Body)) -> Offer<PlainCommit> {
        let mut body = crate::snapshot::decode_file(&o.snapshot, Path::new("x")).unwrap();
        change(&mut body);
        Offer {
            snapshot: crate::snapshot::encode_file(&body).unwrap(),
            above: o.above.clone(),
        }
    }

    /// A peer of the chain pruned below its newest snapshot (70 heights, a snapshot every 20:
    /// its history from 41, its offer at 60) in scratch directory `name`: the directory, the
    /// state digests, its snapshots and store, and a liar's slot serving the same offer with a
    /// forged commit (round 9).
    fn pruned_peer_and_liar(
        name: &str,
    ) -> (
        PathBuf,
        Vec<[u8; 32]>,
        Snapshots,
        BlockStore<PlainCommit>,
        serve::OfferSlot,
    ) {
        let honest = scratch(name);
        let digests = node(&honest, 70, 20, 0);
        let snaps = Snapshots::open(&honest.join("snapshots")).unwrap();
        let mut store = BlockStore::<PlainCommit>::open(&honest.join("blocks.log")).unwrap();
        snaps.prune_store(&mut store, 0).unwrap().unwrap();
        let liar = serve::OfferSlot::new();
        liar.refresh(&snaps, store.base(), 70, |h| {
            store.get(h).unwrap().map(|mut d| {
                if h == 61 {
                    d.commit.round = 9;
                }
                d
            })
        });
        (honest, digests, snaps, store, liar)
    }

    /// `slot`'s routes behind the node's bounded server on loopback; its address.
    async fn serve(slot: &serve::OfferSlot) -> std::net::SocketAddr {
        let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        crate::api::serve_router(any, slot.router(), crate::api::server_config())
            .await
            .unwrap()
    }

    /// Steps 1 and 2 over real sockets: the honest node's slot served behind the node's
    /// bounded server, fetched by the bounded client, verified; a peer offering a forged
    /// commit and a peer not answering are refused on the way, each by its kind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_served_offer_is_fetched_verified_and_a_lying_peer_refused() {
        use fetch::{CatchUpReport, FetchConfig, PeerClient, first_verified};
        let (honest, digests, snaps, store, liar) = pruned_peer_and_liar("served");
        let slot = serve::OfferSlot::new();
        // Block 61 decided after the snapshot at 60: the slot publishes the pair.
        slot.after_decide(&snaps, store.base(), 61, |h| store.get(h).unwrap());
        assert_eq!(slot.history().offer_height, Some(60));
        slot.after_decide(&snaps, store.base(), 70, |h| store.get(h).unwrap());
        assert_eq!(
            slot.history(),
            serve::HistoryInfo {
                first_height: 41,
                last_height: 70,
                offer_height: Some(60),
                offers_served: 0,
                offers_unpublished: 0,
            }
        );
        let (good, bad) = (serve(&slot).await, serve(&liar).await);
        let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        // A port nobody listens on.
        let gone = {
            let l = std::net::TcpListener::bind(any).unwrap();
            l.local_addr().unwrap()
        };
        let client = PeerClient::new(FetchConfig::default());
        assert_eq!(client.history(good).await.unwrap().first_height, 41);
        let mut report = CatchUpReport::default();
        let (from, v) = first_verified::<Demo, PlainCommit>(
            &client,
            &[gone, bad, good],
            5,
            "demo",
            &fresh,
            &verify_commit,
            &mut report,
        )
        .await
        .expect("the honest peer's offer");
        assert_eq!((from, v.height), (good, 60));
        assert_eq!(v.ledger.state_digest(), digests[60]);
        let kinds: Vec<&str> = report.refusals.iter().map(|r| r.1.as_str()).collect();
        assert_eq!(kinds, vec!["fetch", "commit"]);
        assert_eq!(slot.counters().1, 1, "the honest offer was served once");
        assert_eq!(client.history(good).await.unwrap().offers_served, 1);
        std::fs::remove_dir_all(honest).unwrap();
    }

    /// Catch-up while running ([`running`]), over real sockets: a node stalled at height 5
    /// while its peers pruned above it is detected after the confirmations, a lying peer's
    /// offer is refused by kind, the honest one verified and handed over; the loop installs
    /// it (the next open restores the peer's state), and a second one at or below the height
    /// the node reached meanwhile is not installed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_node_behind_every_history_is_detected_and_installs_a_verified_offer() {
        use running::{Event, Outcome, RunningConfig, Shared, install_found, watch};
        let (honest, digests, snaps, store, liar) = pruned_peer_and_liar("running-honest");
        let slot = serve::OfferSlot::new();
        slot.refresh(&snaps, store.base(), 70, |h| store.get(h).unwrap());
        assert_eq!(slot.history().offer_height, Some(60));
        let (good, bad) = (serve(&slot).await, serve(&liar).await);
        // The stalled node, at height 5 of the chain.
        let late = scratch("running-late");
        node(&late, 5, 1_000, 0);
        let shared = Shared::new(5, 0);
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let run = RunningConfig {
            stall_after: std::time::Duration::from_millis(300),
            check_every: std::time::Duration::from_millis(100),
            confirm: 3,
            ..RunningConfig::default()
        };
        let restorer = fetch::Restorer::<Demo>::new("demo", std::sync::Arc::new(fresh));
        // The liar first (the two offer the same height: address order decides).
        let peers = if bad < good {
            vec![bad, good]
        } else {
            vec![good, bad]
        };
        let watcher = tokio::spawn(watch(
            shared.clone(),
            peers,
            std::sync::Arc::new(restorer),
            std::sync::Arc::new(verify_commit),
            run,
            tx,
        ));
        let event = tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv())
            .await
            .expect("detected within 20 s")
            .expect("an event");
        let Event::Found(found) = event else {
            panic!("expected a verified offer");
        };
        let c = shared.counters();
        assert!(c.checks >= 3 && c.behind >= 3 && c.triggered == 1, "{c:?}");
        assert_eq!(found.reason.have, 5);
        assert_eq!(found.reason.lowest_first, 41);
        assert!(found.reason.stalled_ms >= 300, "{:?}", found.reason);
        assert_eq!(found.verified.height, 60);
        assert_eq!(found.verified.ledger.state_digest(), digests[60]);
        assert_eq!(found.report.trigger.as_deref(), Some("running"));
        if bad < good {
            assert_eq!(found.report.refused_by_kind.get("commit"), Some(&1));
        }
        // The node reached height 60 meanwhile: not installed.
        let (ev_again, _) = {
            // The watcher keeps watching; the next trigger comes after three more checks.
            let e = tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv())
                .await
                .expect("a second trigger")
                .expect("an event");
            (e, ())
        };
        let Event::Found(again) = ev_again else {
            panic!("expected a verified offer again");
        };
        assert_eq!(
            install_found(&late, "demo", 60, *again, &shared).unwrap(),
            Outcome::Stale {
                height: 60,
                have: 60
            }
        );
        // Installed by the loop: the store's base is the snapshot, the report says why.
        assert_eq!(
            install_found(&late, "demo", 5, *found, &shared).unwrap(),
            Outcome::Installed { height: 60 }
        );
        let c = shared.counters();
        assert_eq!((c.installed, c.stale, c.last_installed), (1, 1, Some(60)));
        let report: fetch::CatchUpReport =
            serde_json::from_slice(&std::fs::read(late.join("catchup.json")).unwrap()).unwrap();
        assert_eq!(report.trigger.as_deref(), Some("running"));
        assert_eq!(report.reason.map(|r| r.have), Some(5));
        assert_eq!(report.installed_height, Some(60));
        let store = BlockStore::<PlainCommit>::open(&late.join("blocks.log")).unwrap();
        assert_eq!((store.first_height(), store.last_height()), (61, 61));
        let mut r = Snapshots::open(&late.join("snapshots"))
            .unwrap()
            .restore_latest(&store, "demo", &fresh);
        assert_eq!(r.height, Some(60), "{:?}", r.rejected);
        crate::snapshot::replay_above(&store, &mut r.ledger, &validators(), 60, |_, _, _| {})
            .unwrap();
        assert_eq!(r.ledger.state_digest(), digests[61]);
        drop(rx);
        watcher.await.unwrap();
        for d in [honest, late] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }

    #[test]
    fn a_node_behind_every_peer_catches_up_from_a_committed_snapshot_and_refuses_lies() {
        let honest = scratch("honest");
        let digests = node(&honest, 70, 20, 0);
        {
            // The peer pruned: its history starts above height 1.
            let snaps = Snapshots::open(&honest.join("snapshots")).unwrap();
            let mut store = BlockStore::<PlainCommit>::open(&honest.join("blocks.log")).unwrap();
            snaps.prune_store(&mut store, 0).unwrap().unwrap();
            assert_eq!(store.first_height(), 41);
        }
        let good = offer_of(&honest);
        assert_eq!(good.above.height(), 61);
        let fork_dir = scratch("fork");
        node(&fork_dir, 70, 20, 7);
        let fork = offer_of(&fork_dir);
        let forged_commit = Offer {
            snapshot: fork.snapshot.clone(),
            above: Decided {
                commit: PlainCommit {
                    round: 9,
                    ..fork.above.commit.clone()
                },
                block: fork.above.block.clone(),
            },
        };
        // The fork's snapshot next to the honest, committed block: not its block.
        let unlinked = Offer {
            snapshot: fork.snapshot.clone(),
            above: good.above.clone(),
        };
        // A block claiming another state, with a commit of it (a quorum never signs it, but
        // the link and state checks must not rely on that alone).
        let mut claims = good.above.block.clone();
        claims.prev_state = Some([7; 32]);
        let other_state = Offer {
            snapshot: good.snapshot.clone(),
            above: Decided {
                commit: PlainCommit::of(&claims),
                block: claims,
            },
        };
        // The honest header, digest and block id over another state (the peer's state at 40).
        let at_40 = {
            let snaps = Snapshots::open(&honest.join("snapshots")).unwrap();
            std::fs::read(snaps.path(40)).unwrap()
        };
        let old_host = crate::snapshot::decode_file(&at_40, Path::new("x")).unwrap();
        let relabelled = with_body(&good, |b| b.host = old_host.host.clone());
        // The node is at height 5 of this chain (a late joiner) or wiped (0).
        let late = scratch("late");
        node(&late, 5, 1_000, 0);
        let mut stale = good.clone();
        stale.snapshot = {
            // The late joiner's own state at 5: not above it.
            let store = BlockStore::<PlainCommit>::open(&late.join("blocks.log")).unwrap();
            let mut ledger = fresh();
            crate::snapshot::replay_above(&store, &mut ledger, &validators(), 0, |_, _, _| {})
                .unwrap();
            crate::snapshot::encode_file(&Body {
                height: 5,
                block_id: store.get(5).unwrap().unwrap().block.id(),
                ledger: "demo".into(),
                host: ledger.snapshot().unwrap(),
                state_digest: ledger.state_digest(),
            })
            .unwrap()
        };
        let offers: Vec<(&str, Vec<u8>)> = vec![
            ("silent", Vec::new()),
            ("truncated", good.encode().unwrap()[..100].to_vec()),
            ("stale", stale.encode().unwrap()),
            ("forged commit", forged_commit.encode().unwrap()),
            ("unlinked", unlinked.encode().unwrap()),
            ("other state", other_state.encode().unwrap()),
            ("relabelled", relabelled.encode().unwrap()),
            ("honest", good.encode().unwrap()),
        ];
        let (verified, refused) = first_good_offer::<Demo, PlainCommit, _>(
            offers.iter().map(|(name, _)| *name),
            |name| match offers.iter().find(|(n, _)| n == name) {
                Some((_, bytes)) if !bytes.is_empty() => Ok(bytes.clone()),
                _ => Err(CatchUpError::Fetch("deadline passed".into())),
            },
            5,
            "demo",
            &fresh,
            &verify_commit,
        );
        let got: Vec<(&str, String)> = refused
            .iter()
            .map(|(p, e)| {
                (
                    *p,
                    format!("{e:?}")
                        .split([' ', '(', '{'])
                        .next()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("silent", "Fetch".to_string()),
                ("truncated", "Decode".to_string()),
                ("stale", "NotAhead".to_string()),
                ("forged commit", "Commit".to_string()),
                ("unlinked", "Link".to_string()),
                ("other state", "StateNotCommitted".to_string()),
                ("relabelled", "Snapshot".to_string()),
            ]
        );
        let verified = verified.expect("the honest peer's offer");
        assert_eq!(verified.height, 60);
        assert_eq!(verified.ledger.state_digest(), digests[60]);
        // Installed over the late joiner's store: the next open restores the snapshot at the
        // store's base and re-executes block 61 into the peer's state.
        install(&late, "demo", &verified).unwrap();
        let store = BlockStore::<PlainCommit>::open(&late.join("blocks.log")).unwrap();
        assert_eq!((store.first_height(), store.last_height()), (61, 61));
        let snaps = Snapshots::open(&late.join("snapshots")).unwrap();
        let mut r = snaps.restore_latest(&store, "demo", &fresh);
        assert_eq!(r.height, Some(60), "{:?}", r.rejected);
        let run =
            crate::snapshot::replay_above(&store, &mut r.ledger, &validators(), 60, |_, _, _| {})
                .unwrap();
        assert_eq!(run, 1);
        assert_eq!(r.ledger.state_digest(), digests[61]);
        for d in [honest, fork_dir, late] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
