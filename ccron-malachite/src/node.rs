//! One validator process on Malachite: the engine's configuration and start, the node's HTTP
//! server and TicksGenerator thread, and the loop that answers the engine's application
//! messages, each arm a call into [`State`] (and through it the engine-free
//! [`ccron_node::NodeCore`]).

use std::time::Duration;

use ccron::host::Application;
use ccron_node::catchup::running;
use ccron_node::signguard::SigningStateError;
use ccron_node::{Factory, NodeError, NodeOptions};
use malachitebft_app_channel::app::config::{
    ConsensusConfig, NodeConfig, P2pConfig, PubSubProtocol, ValuePayload, ValueSyncConfig,
};
use malachitebft_app_channel::app::engine::host::Next;
use malachitebft_app_channel::app::streaming::StreamContent;
use malachitebft_app_channel::app::types::Keypair;
use malachitebft_app_channel::app::types::core::VoteExtensions;
use malachitebft_app_channel::{
    AppMsg, Channels, ConsensusContext, NetworkContext, NetworkIdentity, NetworkRequest,
    RequestContext, Signer as _, SyncContext, WalContext,
};

use crate::byzantine::Strategy;
use crate::commit::{CertificateVerifier, MalachiteCommit};
use crate::context::{BorshCodec, ClockSample, Ctx, Height, ProposalPart};
use crate::state::{Restream, State};
use crate::stream::{publish, publish_tagged};

/// Rounds (2 s apart) a wiped validator waits for a peer's snapshot above the heights it
/// signed before it refuses to start (docs/malachite.md, "Signing guard").
const FLOOR_WAIT_ROUNDS: u32 = 30;

/// Rounds (1 s apart) a node whose corrupt `blocks.log` was cut asks its peers for the heights
/// it held before it refuses to start.
const REFILL_ROUNDS: u32 = 30;

/// The engine configuration the adapter uses.
#[derive(Debug, Clone)]
struct Config {
    moniker: String,
    consensus: ConsensusConfig,
    value_sync: ValueSyncConfig,
}

impl NodeConfig for Config {
    fn moniker(&self) -> &str {
        &self.moniker
    }
    fn consensus(&self) -> &ConsensusConfig {
        &self.consensus
    }
    fn consensus_mut(&mut self) -> &mut ConsensusConfig {
        &mut self.consensus
    }
    fn value_sync(&self) -> &ValueSyncConfig {
        &self.value_sync
    }
    fn value_sync_mut(&mut self) -> &mut ValueSyncConfig {
        &mut self.value_sync
    }
}

/// Refuses to start when the consensus port cannot be bound. The engine's libp2p swarm only
/// logs a failed listen ("Error listening on ...") and runs on, unreachable by its peers: a
/// validator that never decides and says so nowhere its operator or supervisor looks (campaign
/// seed 69, 2026-11-28: its port taken by another process). Binding it first (and releasing it
/// at once for the engine, which binds it next) turns that into a loud exit.
///
/// # Errors
/// [`NodeError::Config`] naming the port and the cause.
pub fn probe_consensus_port(port: u16) -> Result<(), NodeError> {
    std::net::TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .map_err(|e| {
            NodeError::Config(format!(
                "consensus port 127.0.0.1:{port} cannot be bound (taken by another process?): {e}"
            ))
        })
}

/// The engine's configuration for validator `index` of `genesis`: libp2p on 127.0.0.1 with the
/// genesis' ports, Broadcast pub-sub, proposal-and-parts, value sync.
fn config(genesis: &ccron_node::records::Genesis, index: usize) -> Result<Config, NodeError> {
    let mut p2p = P2pConfig::default();
    let port = genesis
        .validators
        .get(index)
        .ok_or_else(|| NodeError::Config("no such validator index".into()))?
        .port;
    p2p.listen_addr = format!("/ip4/127.0.0.1/tcp/{port}")
        .parse()
        .map_err(|e| NodeError::Config(format!("listen addr: {e}")))?;
    // Localnet fault injection (`node --fault-peers-file`): dial the localnet's proxies
    // instead of the genesis' ports (`ccron_node::netfault`).
    let peers: Vec<String> = match ccron_node::netfault::peer_override() {
        Some(o) => {
            tracing::warn!(peers = ?o.0, "peer addresses overridden (localnet network faults)");
            o.0.clone()
        }
        None => genesis
            .validators
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != index)
            .map(|(_, v)| format!("/ip4/127.0.0.1/tcp/{}", v.port))
            .collect(),
    };
    for addr in peers {
        p2p.persistent_peers.push(
            addr.parse()
                .map_err(|e| NodeError::Config(format!("peer addr {addr}: {e}")))?,
        );
    }
    p2p.protocol = PubSubProtocol::Broadcast;
    Ok(Config {
        moniker: format!("node-{index}"),
        consensus: ConsensusConfig {
            p2p,
            value_payload: ValuePayload::ProposalAndParts,
            ..ConsensusConfig::default()
        },
        value_sync: ValueSyncConfig {
            enabled: true,
            status_update_interval: Duration::from_millis(500),
            request_timeout: Duration::from_secs(3),
            ..ValueSyncConfig::default()
        },
    })
}

/// Runs one validator until the process is killed (or its parent localnet dies), on a
/// two-worker tokio runtime of its own.
///
/// # Errors
/// Config, store, engine and ledger failures.
pub fn run<A: Application>(opts: NodeOptions, factory: Factory<A>) -> Result<(), NodeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| NodeError::Engine(format!("runtime: {e}")))?;
    rt.block_on(run_node(opts, factory))
}

/// Runs one validator (see [`run`]) on the current tokio runtime.
///
/// # Errors
/// Config, store, engine and ledger failures.
pub async fn run_node<A: Application>(
    opts: NodeOptions,
    factory: Factory<A>,
) -> Result<(), NodeError> {
    // Behind every peer's history (a wiped home, or a late joiner after the others pruned):
    // a peer's snapshot, verified against the engine's commit certificate of the block above
    // it, installed before anything opens the store; the engine syncs the blocks above it.
    // Otherwise nothing changes (`ccron_node::catchup::fetch::before_start`).
    let genesis = ccron_node::core::read_genesis(&opts.home)?;
    let verifier = CertificateVerifier::of_genesis(&genesis)?;
    // A byte changed on disk in `blocks.log` or `parts.log` (`StoreError::Corrupt`): the
    // whole file kept aside, the records before the damage kept, the heights after it taken
    // from the peers (value sync, or a verified snapshot below): `ccron_node::store::recover_at_start`.
    let home_dir = ccron_node::core::node_dir(&opts.home, opts.index);
    if ccron_node::store::recovery_enabled_from_env() {
        let recovered =
            ccron_node::store::recover_at_start::<MalachiteCommit, ProposalPart>(&home_dir)?;
        if !recovered.is_empty() {
            tracing::error!(
                files = recovered.len(),
                "store: corrupt data refused and kept aside; recovering the rest from the peers"
            );
        }
    } else {
        tracing::warn!(
            "store recovery at start is off ({})",
            ccron_node::store::RECOVERY_ENV
        );
    }
    let peers = ccron_node::catchup::fetch::genesis_peers(&genesis, opts.index);
    // A store cut at a damaged record (above, or at an earlier start that crashed before this
    // step): the heights it held come back from the peers, each block verified against its
    // commit certificate, before the engine starts where this node was (its WAL and signing
    // guard are there): `ccron_node::catchup::blocks`.
    if ccron_node::store::recovery_enabled_from_env()
        && let Some(want) = ccron_node::store::refill_target::<MalachiteCommit>(&home_dir)?
    {
        let client = ccron_node::catchup::fetch::PeerClient::new(
            ccron_node::catchup::fetch::FetchConfig::default(),
        );
        ccron_node::catchup::blocks::refill::<MalachiteCommit>(
            &home_dir.join("blocks.log"),
            &peers,
            &client,
            &verifier,
            want,
            REFILL_ROUNDS,
            Duration::from_secs(1),
        )
        .await?;
    }
    // A wiped validator whose signing state says it signed at the height it would start at
    // (`SigningStateError::SignedAhead`) waits for a peer's snapshot above that height (the
    // peers prune below their newest snapshot) and catches up again, at most
    // `FLOOR_WAIT_ROUNDS` times, then refuses to start.
    let mut refused = std::collections::BTreeMap::new();
    let mut round = 0u32;
    let mut node = loop {
        let caught_up = ccron_node::catchup::fetch::before_start::<A, MalachiteCommit>(
            &opts,
            &factory,
            &verifier,
            &peers,
            ccron_node::catchup::fetch::FetchConfig::default(),
        )
        .await?;
        if let Some(r) = &caught_up {
            tracing::info!(
                installed = ?r.installed_height,
                took_ms = r.took_ms,
                refused = r.refusals.len(),
                "caught up from a peer's snapshot"
            );
            for (k, n) in &r.refused_by_kind {
                *refused.entry(k.clone()).or_insert(0u64) += n;
            }
        }
        match State::open(opts.clone(), &factory) {
            Err(NodeError::Signing(e @ SigningStateError::SignedAhead { .. }))
                if round < FLOOR_WAIT_ROUNDS =>
            {
                round += 1;
                tracing::warn!(round, error = %e, "waiting for a snapshot above the signed heights");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            other => break other?,
        }
    };
    node.core.status_mut().store_recovery = ccron_node::store::recorded_recoveries(&home_dir);
    node.core
        .note_catch_up(&ccron_node::catchup::fetch::CatchUpReport {
            refused_by_kind: refused,
            ..Default::default()
        });
    // Catch-up while running (`ccron_node::catchup::running`): once this node stalls, a
    // watcher asks the peers' histories; a verified offer comes back to this loop.
    let catchup = running::Shared::new(node.core.last_height(), running::restarts_from_env());
    node.refresh_catch_up_status(&catchup);
    let (catchup_tx, mut catchup_rx) = tokio::sync::mpsc::channel(1);
    if !running::enabled_from_env() {
        tracing::warn!("catch-up while running is off ({})", running::RUNNING_ENV);
    } else {
        tokio::spawn(running::watch(
            catchup.clone(),
            peers.clone(),
            std::sync::Arc::new(ccron_node::catchup::fetch::Restorer::of(
                &genesis, &factory,
            )?),
            std::sync::Arc::new(verifier.clone()),
            running::RunningConfig::default(),
            catchup_tx,
        ));
    }
    // The node's behaviour at its seams: honest, or a Byzantine strategy (`--byzantine`).
    let mut strategy = crate::byzantine::strategy::<A>(opts.byzantine);
    let dir = ccron_node::core::node_dir(&opts.home, opts.index);
    let config = config(node.core.genesis(), opts.index)?;
    probe_consensus_port(node.core.genesis().validators[opts.index].port)?;

    // The libp2p identity is derived from the validator key (one key per validator).
    let secret = ccron_node::core::read_secret(&opts.home, opts.index)?;
    let keypair = Keypair::ed25519_from_bytes(secret)
        .map_err(|e| NodeError::Config(format!("libp2p key: {e}")))?;
    let peer_id = keypair.public().to_peer_id();
    let me = node.me();
    let proof = node
        .signer()
        .sign_validator_proof(me.0.to_vec(), peer_id.to_bytes())
        .await
        .map_err(|e| NodeError::Engine(e.to_string()))?;
    let proof_bytes =
        malachitebft_app_channel::app::types::codec::Codec::encode(&BorshCodec, &proof)
            .map_err(|e| NodeError::Engine(e.to_string()))?;
    let identity = NetworkIdentity::new_validator(
        config.moniker.clone(),
        keypair,
        me.to_string(),
        proof_bytes,
    );

    // Client submissions and forwarded ticks: the HTTP server feeds the pools the proposer
    // reads. The genesis' port, unless `--http` names one.
    let http = match node.core.genesis().validators[opts.index].http_port {
        Some(port) if opts.http.port() == 0 => std::net::SocketAddr::new(opts.http.ip(), port),
        _ => opts.http,
    };
    let routes = ccron_node::api::router(node.core.api_state())
        .merge(node.offers().router())
        .merge(ccron_node::catchup::blocks::router::<MalachiteCommit>(
            dir.join("blocks.log"),
        ));
    // A `slow-http` Byzantine node answers late and drips; every other node unchanged.
    let routes = ccron_node::slow_http::layer(routes, opts.byzantine);
    let routes = ccron_node::lie_reads::layer(routes, opts.byzantine);
    let bound = ccron_node::api::serve_router(http, routes, ccron_node::api::server_config())
        .await
        .map_err(|e| NodeError::Config(format!("HTTP listen on {http}: {e}")))?;
    std::fs::write(
        ccron_node::core::http_addr_path(&opts.home, opts.index),
        bound.to_string(),
    )
    .map_err(|e| NodeError::Config(format!("http.addr: {e}")))?;
    tracing::info!(%bound, "client endpoint");

    let (mut channels, engine) = malachitebft_app_channel::start_engine(
        Ctx,
        config,
        WalContext::new(dir.join("wal"), BorshCodec),
        NetworkContext::new(
            identity,
            crate::byzantine::NetCodec::of(opts.byzantine, node.me()),
        ),
        ConsensusContext::new_validator(
            me,
            Box::new(node.verifier()),
            strategy.engine_signer(node.engine_signer()),
        ),
        SyncContext::new(BorshCodec),
        RequestContext::new(100),
    )
    .await
    .map_err(|e| NodeError::Engine(e.to_string()))?;

    // Ticks: ccron's TicksGenerator thread, one timer per component; at most one pending.
    let (tick_tx, tick_rx) = crossbeam_channel::bounded(ccron::ticks::DEFAULT_CHANNEL_CAPACITY);
    let generator = ccron::ticks::TicksGenerator::spawn(
        ccron::ticks::SystemClock::new(),
        ccron::ticks::DriverConfig { poll_period_ms: 50 },
        tick_tx,
    )
    .map_err(|e| NodeError::Engine(format!("ticks thread: {e}")))?;
    for (&component, &period) in node.core.tick_periods() {
        generator.start(component, period);
    }

    let parent = std::os::unix::process::parent_id();
    // SIGTERM (an operator's or the localnet's stop): a snapshot of the last height, then
    // exit, so the next start replays nothing.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| NodeError::Engine(format!("SIGTERM handler: {e}")))?;
    let mut watchdog = tokio::time::interval(Duration::from_millis(500));
    let mut timer = tokio::time::interval(Duration::from_millis(100));
    let mut streams = Streams::default();
    loop {
        tokio::select! {
            msg = channels.consensus.recv() => {
                let Some(msg) = msg else {
                    return Err(NodeError::Engine("consensus channel closed".into()));
                };
                while let Ok(t) = tick_rx.try_recv() {
                    node.core.on_local_tick(t.component);
                }
                handle(&mut node, msg, &mut channels, strategy.as_mut(), &mut streams).await?;
                catchup.height.store(node.core.last_height(), std::sync::atomic::Ordering::Relaxed);
            }
            Some(event) = catchup_rx.recv() => {
                if let Some(restarts) = node.caught_up_while_running(event, &catchup) {
                    // Malachite 0.8.2 starts a height only in answer to `ConsensusReady` or
                    // `Finalized`: the process restarts itself (same PID) into the installed
                    // snapshot, and its engine starts above it.
                    tracing::warn!(restarts, "catch-up (running): restarting this process");
                    let e = running::restart_self(restarts);
                    return Err(NodeError::Engine(format!("catch-up restart failed: {e}")));
                }
            }
            _ = timer.tick() => {
                node.refresh_signing_status();
                node.refresh_catch_up_status(&catchup);
                let parts = strategy.on_timer(&mut node);
                streams.publish_all(&mut channels, &parts).await;
                if strategy.silenced() {
                    engine.actor.stop(Some("silent".into()));
                    break;
                }
            }
            _ = term.recv() => {
                tracing::info!("SIGTERM: snapshot, then stop");
                node.core.snapshot();
                return Ok(());
            }
            _ = watchdog.tick() => {
                while let Ok(t) = tick_rx.try_recv() {
                    node.core.on_local_tick(t.component);
                }
                if std::os::unix::process::parent_id() != parent {
                    tracing::info!("parent exited; node stops");
                    node.core.snapshot();
                    return Ok(());
                }
            }
        }
    }
    // Silent (a Byzantine strategy stopped the engine): the process and its endpoint live on
    // until the parent is gone.
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = watchdog.tick() => {
                if std::os::unix::process::parent_id() != parent {
                    return Ok(());
                }
            }
        }
    }
}

/// Publishes parts: the first of each batch under its `(height, round)` stream, any further
/// ones (a Byzantine strategy's) under streams of their own.
#[derive(Debug, Default)]
struct Streams {
    extra: u32,
}

impl Streams {
    async fn publish_all(&mut self, channels: &mut Channels<Ctx>, parts: &[ProposalPart]) {
        for (i, part) in parts.iter().enumerate() {
            if i == 0 {
                publish(channels, part).await;
            } else {
                self.extra = self.extra.wrapping_add(1);
                publish_tagged(channels, part, self.extra).await;
            }
        }
    }
}

/// Milliseconds on this process's monotonic clock (from its first call): what round-0
/// proposal arrivals are measured with ([`crate::round0`]). The loop's one reading of a
/// monotonic clock; the protocol code gets the value injected.
#[allow(clippy::disallowed_methods)]
fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Answers one application message of the engine.
async fn handle<A: Application>(
    node: &mut State<A>,
    msg: AppMsg<Ctx>,
    channels: &mut Channels<Ctx>,
    strategy: &mut dyn Strategy<A>,
    streams: &mut Streams,
) -> Result<(), NodeError> {
    match msg {
        AppMsg::ConsensusReady { reply } => {
            // Wait for a quorum's worth of peers before starting: a first proposal made before
            // they connect is lost. (Not all: a late or dead validator must not hold the others
            // back; it catches up through sync.)
            let want = node.core.validators().quorum().saturating_sub(1);
            for _ in 0..100 {
                match NetworkRequest::dump_state(&channels.net_requests).await {
                    Ok(Some(dump)) if dump.peers.len() >= want => break,
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            let start = node.start_height();
            tracing::info!(%start, "consensus ready");
            if reply.send((start, node.params(start))).is_err() {
                return Err(NodeError::Engine("ConsensusReady reply dropped".into()));
            }
        }
        AppMsg::StartedRound {
            reply_value,
            height,
            round,
            ..
        } => {
            let seen = node.started_round(height, round)?;
            node.note_round_started(height, round, &seen, mono_ms());
            let _ = reply_value.send(seen);
        }
        AppMsg::GetValue {
            height,
            round,
            reply,
            ..
        } => {
            if let Some((value, parts)) = strategy.propose(node, height, round)? {
                if reply.send(value).is_err() {
                    tracing::error!("GetValue reply dropped");
                }
                streams.publish_all(channels, &parts).await;
            }
        }
        AppMsg::ExtendVote { reply, .. } => {
            let _ = reply.send(Some(ClockSample {
                time_ms: ccron_node::core::now_ms(),
            }));
        }
        AppMsg::VerifyVoteExtensions {
            extensions, reply, ..
        } => {
            let verdicts = extensions.into_iter().map(|(a, _)| (a, Ok(()))).collect();
            let _ = reply.send(verdicts);
        }
        AppMsg::RestreamProposal {
            height,
            round,
            valid_round,
            address,
            value_id,
        } => {
            if let Restream::Publish(parts) =
                node.restream(height, round, valid_round, address, value_id)?
            {
                for part in &strategy.restream(parts) {
                    publish(channels, part).await;
                }
            }
        }
        AppMsg::GetHistoryMinHeight { reply } => {
            // The lowest height the block store holds: nothing below it is served (pruned).
            let _ = reply.send(Height(node.core.history_min_height()));
        }
        AppMsg::ReceivedProposalPart {
            from, part, reply, ..
        } => {
            let value = match &part.content {
                StreamContent::Data(p) => node.received_part(&from.to_bytes(), p)?,
                _ => None,
            };
            if let Some(v) = &value {
                node.note_proposal(v, mono_ms());
            }
            let _ = reply.send(value);
        }
        AppMsg::Decided {
            certificate,
            extensions,
            reply,
        } => {
            let VoteExtensions { extensions } = extensions;
            node.decided(certificate, extensions)?;
            let _ = reply.send(());
        }
        AppMsg::Finalized {
            certificate, reply, ..
        } => {
            let next = Height(certificate.height.0 + 1);
            let _ = reply.send(Next::Start(next, node.params(next)));
        }
        AppMsg::GetDecidedValues { range, reply } => {
            let _ = reply.send(node.decided_values(range));
        }
        AppMsg::ProcessSyncedValue {
            height,
            round,
            proposer,
            value_bytes,
            reply,
        } => {
            let _ = reply.send(node.synced(height, round, proposer, &value_bytes)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_consensus_port_stops_the_node_loudly() {
        let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = probe_consensus_port(port).unwrap_err();
        assert!(
            err.to_string().contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
        drop(taken);
        probe_consensus_port(port).unwrap();
    }
}
