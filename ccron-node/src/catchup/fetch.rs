//! Fetching offers from peers, and the trigger an engine adapter runs before its engine
//! starts ([`before_start`]).
//!
//! **The client** ([`PeerClient`]) asks one peer at a time, each exchange under a deadline
//! (connect to the last byte), the body never read past its bound ([`MAX_HISTORY_BYTES`],
//! [`super::MAX_OFFER_BYTES`]: a declared length above it is refused before a byte of the
//! body is read), and nothing decoded before the bound held. A peer that does not answer,
//! answers slowly or answers junk costs its deadline and nothing else.
//!
//! **The trigger** ([`before_start`]): the node asks every other validator for its history
//! ([`super::serve::HistoryInfo`]). When some reachable peer's store starts at or below this
//! node's next height (or no peer answers), nothing happens: the engine's value sync fetches
//! what is missing, as without catch-up. When this node's next height is below every reachable
//! peer's first height (a wiped home, or a late joiner after the others pruned), the engine
//! could never sync: the node asks the peers for their offers in turn (highest offer first),
//! takes the first that verifies ([`super::judge`]: the engine's commit certificate of the
//! block above the snapshot, then the link, the committed state digest, the restore), and
//! installs it ([`super::install`]); the engine then syncs the blocks above it. Every refusal is
//! a typed [`CatchUpError`], a `tracing` warning and a count by kind in the report
//! ([`CatchUpReport`], written to `node-I/catchup.json`). No offer verifies after
//! [`FetchConfig::rounds`] rounds: the node refuses to start (it could never catch up).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ccron::host::Application;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};

use super::backoff::{Backoff, is_busy, retry_after};
use super::serve::{HISTORY_ROUTE, HistoryInfo, OFFER_ROUTE};
use super::{CatchUpError, CommitVerifier, MAX_OFFER_BYTES, Verified, install, judge};
use crate::core::{Factory, LedgerSpec, NodeError, NodeOptions, node_dir, read_genesis};
use crate::ledger::LedgerHost;
use crate::store::{BlockStore, Commit};

/// The largest history answer read.
pub const MAX_HISTORY_BYTES: usize = 4_096;

/// The client's and the trigger's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchConfig {
    /// The deadline of one history exchange.
    pub history_deadline: Duration,
    /// The deadline of one offer exchange (up to [`MAX_OFFER_BYTES`] on the wire).
    pub offer_deadline: Duration,
    /// Rounds of asking every peer before the node gives up.
    pub rounds: u32,
    /// The pause between rounds.
    pub pause: Duration,
}

impl Default for FetchConfig {
    /// 2 s per history, 30 s per offer, 5 rounds 2 s apart.
    fn default() -> Self {
        Self {
            history_deadline: Duration::from_secs(2),
            offer_deadline: Duration::from_secs(30),
            rounds: 5,
            pause: Duration::from_secs(2),
        }
    }
}

/// A bounded HTTP client of peers' catch-up routes (module docs).
#[derive(Clone)]
pub struct PeerClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    cfg: FetchConfig,
    /// Peers that answered busy or failing, not asked again before their pause ends.
    backoff: Arc<Mutex<Backoff>>,
    /// The origin of the backoff's milliseconds.
    origin: tokio::time::Instant,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl PeerClient {
    /// A client with `cfg`'s deadlines. Call inside a tokio runtime.
    pub fn new(cfg: FetchConfig) -> Self {
        let mut c = HttpConnector::new();
        c.set_connect_timeout(Some(cfg.history_deadline));
        c.set_nodelay(true);
        Self {
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(c),
            cfg,
            backoff: Arc::new(Mutex::new(Backoff::default())),
            origin: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn backoff(&self) -> std::sync::MutexGuard<'_, Backoff> {
        self.backoff.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `GET route` of `peer`: a `200` body of at most `limit` bytes within `deadline`. A
    /// peer backed off ([`super::backoff`]) is refused without asking; a `429` or `5xx`
    /// answer backs it off; a `200` forgets it.
    async fn get(
        &self,
        peer: SocketAddr,
        route: &str,
        limit: usize,
        deadline: Duration,
    ) -> Result<Bytes, CatchUpError> {
        if let Err((status, retry_in_ms)) = self.backoff().check(peer, self.now_ms()) {
            return Err(CatchUpError::Busy {
                status,
                retry_in_ms,
            });
        }
        let req = hyper::Request::get(format!("http://{peer}{route}"))
            .body(Empty::new())
            .map_err(|e| CatchUpError::Fetch(e.to_string()))?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| CatchUpError::Fetch(format!("{peer}{route}: {e}")))?;
            let code = resp.status().as_u16();
            if is_busy(code) {
                let wait = retry_after(resp.headers());
                let pause = self.backoff().busy(peer, code, wait, self.now_ms());
                let retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(%peer, route, status = code, retry_in_ms,
                    "catch-up: a peer answered busy; backing off");
                return Err(CatchUpError::Busy {
                    status: code,
                    retry_in_ms,
                });
            }
            if code == 200 {
                self.backoff().ok(peer);
            }
            if code != 200 {
                return Err(CatchUpError::Fetch(format!("{peer}{route}: status {code}")));
            }
            let declared = resp
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(bytes) = declared.filter(|&b| b > limit as u64) {
                return Err(CatchUpError::TooLarge { bytes });
            }
            Limited::new(resp.into_body(), limit)
                .collect()
                .await
                .map(http_body_util::Collected::to_bytes)
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        CatchUpError::TooLarge {
                            bytes: limit as u64 + 1,
                        }
                    } else {
                        CatchUpError::Fetch(format!("{peer}{route}: {e}"))
                    }
                })
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(CatchUpError::Fetch(format!(
                    "{peer}{route}: no whole answer within {} ms",
                    deadline.as_millis()
                )))
            })
    }

    /// `peer`'s history.
    ///
    /// # Errors
    /// [`CatchUpError::Fetch`], [`CatchUpError::TooLarge`], [`CatchUpError::Decode`].
    pub async fn history(&self, peer: SocketAddr) -> Result<HistoryInfo, CatchUpError> {
        let body = self
            .get(
                peer,
                HISTORY_ROUTE,
                MAX_HISTORY_BYTES,
                self.cfg.history_deadline,
            )
            .await?;
        serde_json::from_slice(&body).map_err(|e| CatchUpError::Decode(e.to_string()))
    }

    /// Up to [`super::blocks::MAX_BLOCKS_PER_ANSWER`] of `peer`'s decided blocks from height
    /// `from`, as bytes (at most [`super::blocks::MAX_BLOCKS_BYTES`]; decoded and verified by
    /// [`super::blocks::refill`]), within the offer deadline.
    ///
    /// # Errors
    /// [`CatchUpError::Fetch`], [`CatchUpError::TooLarge`], [`CatchUpError::Busy`].
    pub async fn blocks(&self, peer: SocketAddr, from: u64) -> Result<Bytes, CatchUpError> {
        let route = format!("{}?from={from}", super::blocks::BLOCKS_ROUTE);
        self.get(
            peer,
            &route,
            super::blocks::MAX_BLOCKS_BYTES,
            self.cfg.offer_deadline,
        )
        .await
    }

    /// `peer`'s offer, as bytes (at most [`MAX_OFFER_BYTES`]; decoded by [`judge`]).
    ///
    /// # Errors
    /// [`CatchUpError::Fetch`], [`CatchUpError::TooLarge`].
    pub async fn offer(&self, peer: SocketAddr) -> Result<Bytes, CatchUpError> {
        let limit = usize::try_from(MAX_OFFER_BYTES).unwrap_or(usize::MAX);
        self.get(peer, OFFER_ROUTE, limit, self.cfg.offer_deadline)
            .await
    }
}

/// What the peers' histories say a node at `have` should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// No peer answered: start as without catch-up.
    NoPeer,
    /// A reachable peer's store holds the next height: the engine's sync can serve it.
    Sync {
        /// That peer.
        peer: SocketAddr,
    },
    /// The next height is below every reachable peer's first height: catch up, asking these
    /// peers (offer above `have`, highest first).
    CatchUp {
        /// The peers to ask, in turn.
        peers: Vec<SocketAddr>,
    },
}

/// The plan of a node whose last height is `have`, from its peers' `answers` (module docs).
pub fn plan(have: u64, answers: &[(SocketAddr, Result<HistoryInfo, CatchUpError>)]) -> Plan {
    let next = have.saturating_add(1);
    let reachable: Vec<(SocketAddr, HistoryInfo)> = answers
        .iter()
        .filter_map(|(p, a)| a.as_ref().ok().map(|h| (*p, *h)))
        .collect();
    if reachable.is_empty() {
        return Plan::NoPeer;
    }
    if let Some((peer, _)) = reachable.iter().find(|(_, h)| h.first_height <= next) {
        return Plan::Sync { peer: *peer };
    }
    let mut offering: Vec<(SocketAddr, u64)> = reachable
        .iter()
        .filter_map(|(p, h)| h.offer_height.filter(|&o| o > have).map(|o| (*p, o)))
        .collect();
    offering.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Plan::CatchUp {
        peers: offering.into_iter().map(|(p, _)| p).collect(),
    }
}

/// What [`before_start`] did (also `node-I/catchup.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatchUpReport {
    /// This node's last height before.
    pub have: u64,
    /// The peers' first heights, as they answered (`null`: no answer).
    pub peers_first_height: BTreeMap<String, Option<u64>>,
    /// The height of the snapshot installed.
    pub installed_height: Option<u64>,
    /// The peer whose offer was installed.
    pub from_peer: Option<String>,
    /// Every refused offer: peer, kind ([`CatchUpError::kind`]) and reason.
    pub refusals: Vec<(String, String, String)>,
    /// Refused offers by kind.
    pub refused_by_kind: BTreeMap<String, u64>,
    /// Rounds of asking.
    pub rounds: u32,
    /// Milliseconds from the first question to the installed offer.
    pub took_ms: u64,
    /// What started this catch-up: `null` before the engine started
    /// ([`before_start`]), `"running"` for a node that fell behind while running
    /// ([`super::running`]).
    #[serde(default)]
    pub trigger: Option<String>,
    /// Why a running node caught up ([`super::running::Behind`]).
    #[serde(default)]
    pub reason: Option<super::running::Behind>,
}

impl CatchUpReport {
    /// The report of a node at `have` whose peers answered `answers`.
    pub fn asked(have: u64, answers: &[(SocketAddr, Result<HistoryInfo, CatchUpError>)]) -> Self {
        Self {
            have,
            peers_first_height: first_heights(answers),
            ..Self::default()
        }
    }

    /// `peer`'s offer at `height` verified, `took_ms` after the first question.
    pub fn verified(&mut self, peer: SocketAddr, height: u64, took_ms: u64) {
        self.installed_height = Some(height);
        self.from_peer = Some(peer.to_string());
        self.took_ms = took_ms;
    }

    fn refused(&mut self, peer: SocketAddr, e: &CatchUpError) {
        tracing::warn!(%peer, kind = e.kind(), error = %e, "catch-up: a peer's offer refused");
        *self
            .refused_by_kind
            .entry(e.kind().to_string())
            .or_insert(0) += 1;
        self.refusals
            .push((peer.to_string(), e.kind().to_string(), e.to_string()));
    }
}

/// The first offer among `peers` (asked in turn) that verifies for a node at `have`; the
/// refusals go to `report`.
pub async fn first_verified<A: Application, C: Commit>(
    client: &PeerClient,
    peers: &[SocketAddr],
    have: u64,
    ledger_name: &str,
    fresh: &(dyn Fn() -> LedgerHost<A> + Sync),
    verifier: &dyn CommitVerifier<C>,
    report: &mut CatchUpReport,
) -> Option<(SocketAddr, Verified<A, C>)> {
    for &peer in peers {
        let verdict = match client.offer(peer).await {
            Ok(bytes) => judge(&bytes, have, ledger_name, fresh, verifier),
            Err(e) => Err(e),
        };
        match verdict {
            Ok(v) => {
                tracing::info!(%peer, height = v.height, "catch-up: a peer's snapshot verified");
                return Some((peer, v));
            }
            Err(e) => report.refused(peer, &e),
        }
    }
    None
}

/// The peers' first heights as they answered (`None`: no answer), for the report.
pub fn first_heights(
    answers: &[(SocketAddr, Result<HistoryInfo, CatchUpError>)],
) -> BTreeMap<String, Option<u64>> {
    answers
        .iter()
        .map(|(p, a)| (p.to_string(), a.as_ref().ok().map(|h| h.first_height)))
        .collect()
}

/// Installs a verified offer in node directory `dir` ([`install`], crash-safe), then writes
/// its report beside it (`catchup.json`).
///
/// # Errors
/// The install's I/O errors (the old store is then intact).
pub fn install_reported<A: Application, C: Commit>(
    dir: &Path,
    ledger: &str,
    verified: &Verified<A, C>,
    report: &CatchUpReport,
) -> Result<(), CatchUpError> {
    install(dir, ledger, verified)?;
    write_report(dir, report);
    Ok(())
}

/// Every peer's history, asked at once (each under its deadline), in `peers`' order.
pub async fn histories(
    client: &PeerClient,
    peers: &[SocketAddr],
) -> Vec<(SocketAddr, Result<HistoryInfo, CatchUpError>)> {
    let mut set = tokio::task::JoinSet::new();
    for (i, &peer) in peers.iter().enumerate() {
        let client = client.clone();
        set.spawn(async move { (i, peer, client.history(peer).await) });
    }
    let mut out = Vec::with_capacity(peers.len());
    while let Some(joined) = set.join_next().await {
        if let Ok(answer) = joined {
            out.push(answer);
        }
    }
    out.sort_by_key(|(i, _, _)| *i);
    out.into_iter().map(|(_, p, a)| (p, a)).collect()
}

/// A fresh ledger of the chain's setup, at height 0 (what an offer is restored into).
pub type FreshLedger<A> = Arc<dyn Fn() -> LedgerHost<A> + Send + Sync>;

/// What verifying an offer needs besides the offer: the chain's ledger name and a fresh
/// ledger of the chain's setup to restore into.
pub struct Restorer<A> {
    ledger: String,
    fresh: FreshLedger<A>,
}

impl<A> std::fmt::Debug for Restorer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Restorer")
            .field("ledger", &self.ledger)
            .finish_non_exhaustive()
    }
}

impl<A: Application> Restorer<A> {
    /// A restorer of ledger `ledger` building fresh ledgers with `fresh`.
    pub fn new(ledger: impl Into<String>, fresh: FreshLedger<A>) -> Self {
        Self {
            ledger: ledger.into(),
            fresh,
        }
    }

    /// The restorer of `genesis`' chain with the binary's `factory`: builds one ledger to
    /// learn its ticking components (the chain's setup). The factory succeeded once with the
    /// same arguments: a later failure stops the node loudly (not deterministic).
    ///
    /// # Errors
    /// [`NodeError::Config`] when the factory fails.
    pub fn of(genesis: &crate::records::Genesis, factory: &Factory<A>) -> Result<Self, NodeError> {
        let spec = LedgerSpec {
            name: genesis.ledger.clone(),
            validators: u32::try_from(genesis.validators.len()).unwrap_or(u32::MAX),
        };
        let probe = factory(&spec).map_err(NodeError::Config)?;
        let setup = genesis.setup(&probe.tick_components());
        let factory = factory.clone();
        let fresh: FreshLedger<A> = Arc::new(move || match factory(&spec) {
            Ok(app) => LedgerHost::new(app, &setup),
            Err(e) => factory_failed(&e),
        });
        Ok(Self::new(genesis.ledger.clone(), fresh))
    }

    /// The chain's ledger name.
    pub fn ledger(&self) -> &str {
        &self.ledger
    }

    /// A fresh ledger at height 0.
    pub fn fresh(&self) -> LedgerHost<A> {
        (self.fresh)()
    }
}

/// The other validators' HTTP endpoints in the genesis (loopback, as the localnet runs them).
pub fn genesis_peers(genesis: &crate::records::Genesis, me: usize) -> Vec<SocketAddr> {
    genesis
        .validators
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != me)
        .filter_map(|(_, v)| v.http_port)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect()
}

/// The catch-up trigger (module docs) for node `opts.index`, run before its engine starts,
/// against `peers` (the other validators' endpoints: [`genesis_peers`]). `None`: nothing to
/// do (no peer answered, or a peer's history holds the next height); a report when a peer's
/// verified offer was installed.
///
/// # Errors
/// Config and store failures; [`NodeError::Config`] when the node is behind every peer and
/// no offer verified after [`FetchConfig::rounds`] rounds.
pub async fn before_start<A: Application, C: Commit>(
    opts: &NodeOptions,
    factory: &Factory<A>,
    verifier: &dyn CommitVerifier<C>,
    peers: &[SocketAddr],
    cfg: FetchConfig,
) -> Result<Option<CatchUpReport>, NodeError> {
    if peers.is_empty() {
        return Ok(None);
    }
    let genesis = read_genesis(&opts.home)?;
    let dir = node_dir(&opts.home, opts.index);
    let have = BlockStore::<C>::open(&dir.join("blocks.log"))?.last_height();
    let client = PeerClient::new(cfg);
    // The process boundary: the catch-up time in the report is a wall-clock figure.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let mut report = CatchUpReport {
        have,
        ..CatchUpReport::default()
    };
    let mut restorer = None;
    for round in 1..=cfg.rounds.max(1) {
        report.rounds = round;
        let answers = histories(&client, peers).await;
        report.peers_first_height = first_heights(&answers);
        let candidates = match plan(have, &answers) {
            Plan::NoPeer | Plan::Sync { .. } if round == 1 => return Ok(None),
            Plan::NoPeer | Plan::Sync { .. } => {
                // Behind every peer in an earlier round, no longer: a peer's history came
                // back down (a restarted peer) or all went away. Start as without catch-up.
                tracing::warn!(round, "catch-up: no longer behind every peer; starting");
                return Ok(None);
            }
            Plan::CatchUp { peers } => peers,
        };
        tracing::warn!(
            have,
            round,
            offering = candidates.len(),
            "catch-up: this node is behind every peer's history"
        );
        if restorer.is_none() {
            restorer = Some(Restorer::of(&genesis, factory)?);
        }
        let Some(restorer) = restorer.as_ref() else {
            continue;
        };
        let fresh = || restorer.fresh();
        if let Some((peer, verified)) = first_verified(
            &client,
            &candidates,
            have,
            &genesis.ledger,
            &fresh,
            verifier,
            &mut report,
        )
        .await
        {
            let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            report.verified(peer, verified.height, took_ms);
            install_reported(&dir, &genesis.ledger, &verified, &report).map_err(|e| {
                NodeError::Config(format!("catch-up: installing the verified offer: {e}"))
            })?;
            tracing::info!(
                height = verified.height,
                %peer,
                took_ms = report.took_ms,
                "catch-up: installed a peer's verified snapshot; the engine syncs above it"
            );
            return Ok(Some(report));
        }
        if round < cfg.rounds {
            tokio::time::sleep(cfg.pause).await;
        }
    }
    report.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    write_report(&dir, &report);
    Err(NodeError::Config(format!(
        "catch-up: height {have} is below every peer's history and no peer's offer verified \
         ({:?}; node-{}/catchup.json)",
        report.refused_by_kind, opts.index
    )))
}

/// Writes `report` to `dir/catchup.json` (a failure is a warning: it is a report, not state).
pub fn write_report(dir: &Path, report: &CatchUpReport) {
    let written = serde_json::to_vec_pretty(report)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(dir.join("catchup.json"), b));
    if let Err(e) = written {
        tracing::warn!(error = %e, "catchup.json not written");
    }
}

/// The ledger factory failed after succeeding with the same arguments (not deterministic):
/// the node stops loudly (exit code 70), as `NodeCore::open` does.
fn factory_failed(reason: &str) -> ! {
    tracing::error!(
        reason,
        "the ledger factory is not deterministic; the node stops"
    );
    eprintln!("ccron node: the ledger factory failed after succeeding once: {reason}");
    std::process::exit(70)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catchup::testkit::{answering, h, peer};

    #[test]
    fn a_node_catches_up_only_when_below_every_reachable_history() {
        let down = || Err(CatchUpError::Fetch("refused".into()));
        assert_eq!(plan(0, &[(peer(1), down())]), Plan::NoPeer);
        // One peer still holds height 6: the engine syncs from it.
        assert_eq!(
            plan(5, &[(peer(1), h(41, Some(60))), (peer(2), h(6, Some(60)))]),
            Plan::Sync { peer: peer(2) }
        );
        // A fresh chain: every peer starts at 1.
        assert_eq!(
            plan(0, &[(peer(1), h(1, None))]),
            Plan::Sync { peer: peer(1) }
        );
        // Below every reachable history (an unreachable peer does not count): the peers
        // offering above the node, highest offer first; one offering nothing new is skipped.
        assert_eq!(
            plan(
                5,
                &[
                    (peer(1), h(41, Some(60))),
                    (peer(2), down()),
                    (peer(3), h(81, Some(100))),
                    (peer(4), h(7, Some(5))),
                ]
            ),
            Plan::CatchUp {
                peers: vec![peer(3), peer(1)]
            }
        );
    }

    #[tokio::test]
    async fn a_slow_oversized_or_failing_peer_costs_its_deadline_and_is_refused_by_kind() {
        let cfg = FetchConfig {
            history_deadline: Duration::from_millis(300),
            offer_deadline: Duration::from_millis(300),
            ..FetchConfig::default()
        };
        let client = PeerClient::new(cfg);
        // Drips a valid history, a byte every 50 ms: past the deadline.
        let slow = answering(
            "HTTP/1.1 200 OK\r\ncontent-length: 60\r\n\r\n",
            br#"{"first_height":1,"last_height":2,"offer_height":null}      "#.to_vec(),
            Some(Duration::from_millis(50)),
        )
        .await;
        // Declares a body above the bound: refused before reading it.
        let declared = answering(
            "HTTP/1.1 200 OK\r\ncontent-length: 999999999999\r\n\r\n",
            Vec::new(),
            None,
        )
        .await;
        // Chunked, no length, more than the bound.
        let chunk = format!("{:x}\r\n{}\r\n", 5_000, "x".repeat(5_000));
        let endless = answering(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            chunk.into_bytes(),
            None,
        )
        .await;
        let missing = answering(
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            Vec::new(),
            None,
        )
        .await;
        let junk = answering(
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n",
            b"{x}".to_vec(),
            None,
        )
        .await;
        #[allow(clippy::disallowed_methods)]
        let t = std::time::Instant::now();
        let e = client.history(slow).await.unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(
            matches!(e, CatchUpError::Fetch(ref m) if m.contains("within")),
            "{e}"
        );
        assert!(matches!(
            client.offer(declared).await,
            Err(CatchUpError::TooLarge {
                bytes: 999_999_999_999
            })
        ));
        assert!(matches!(
            client.history(endless).await,
            Err(CatchUpError::TooLarge { .. })
        ));
        assert!(
            matches!(client.offer(missing).await, Err(CatchUpError::Fetch(ref m)) if m.contains("404"))
        );
        assert!(matches!(
            client.history(junk).await,
            Err(CatchUpError::Decode(_))
        ));
    }
}
