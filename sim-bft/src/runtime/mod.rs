//! The threaded runtime: the same sans-IO nodes, on real threads, with real time.
//!
//! Each replica gets one messaging thread, the only thread that touches it. Replicas talk over
//! bounded crossbeam channels (a full channel drops the message and counts it, as a congested
//! network would; the protocol recovers). Each replica also runs ccron's real TicksGenerator
//! thread ([`ccron::ticks::TicksGenerator`] on the real monotonic clock): its tick messages
//! arrive on the replica's internal channel and the messaging thread hands them to the replica as
//! [`Input::InternalTick`]. The runtime reads the wall clock in exactly one place,
//! [`wall_clock_ms`] (the generator's monotonic clock is ccron's `SystemClock`).
//! Storage writes go to an in-memory map per replica (this runtime does not crash replicas).
//!
//! Opt-in: [`ThreadedCluster::serve_reads`] serves each replica's committed outbox on its own
//! loopback HTTP endpoint (`ccron_http::read`), for a consumer that reads the cluster over the
//! network and believes a record only when f+1 replicas return it identically.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ccron::ticks::{DriverConfig, SystemClock, TickInternalMsg, TicksGenerator};
use ccron_http::read::{OutboxSource, ReadServerConfig};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use crate::node::{ClientId, Executed, Input, Millis, Node, NodeId, Output};

mod client;
pub use client::{ClientConfig, ClientError, ClusterClient, ClusterSubmit};

/// Capacity of each replica's inbox.
pub const INBOX_CAPACITY: usize = 1 << 16;
/// Capacity of the reply and execution observation channels.
pub const OBSERVER_CAPACITY: usize = 1 << 18;
/// Longest a messaging thread sleeps without a deadline (it re-checks for shutdown).
const IDLE_WAIT_MS: u64 = 50;
/// Most queued ticks the messaging thread takes in one go after a first one (bounded so the
/// network inbox is never starved).
const TICK_DRAIN_MAX: usize = 4_096;

/// The real clock: milliseconds since the Unix epoch. The runtime's only clock read.
pub fn wall_clock_ms() -> Millis {
    // The driver's one real-clock read: everything else receives `now` from here.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// Errors of the threaded runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A thread could not be spawned.
    #[error("cannot spawn a thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// A replica thread panicked.
    #[error("replica {0} thread panicked")]
    Panicked(NodeId),
    /// No replica with this id.
    #[error("no replica {0}")]
    NoSuchReplica(NodeId),
    /// A read endpoint could not bind its socket or start its runtime.
    #[error("read endpoint {replica}: {error}")]
    ReadEndpoint {
        /// The replica whose endpoint failed.
        replica: NodeId,
        /// What failed.
        error: std::io::Error,
    },
    /// [`ThreadedCluster::serve_reads`] got a number of sources other than the replicas'.
    #[error("{sources} read sources for {replicas} replicas")]
    ReadSources {
        /// Sources given.
        sources: usize,
        /// Replicas running.
        replicas: usize,
    },
}

/// Runtime settings (the default: no ticks).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeConfig {
    /// Internal tick period per component (0: no ticks).
    pub tick_period_ms: u64,
    /// Components that tick.
    pub components: Vec<u32>,
}

/// A reply a replica sent to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientReply {
    /// The replica that replied.
    pub from: NodeId,
    /// The client.
    pub client: ClientId,
    /// The encoded reply.
    pub bytes: Vec<u8>,
}

/// What a replica thread did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// Inputs handled.
    pub inputs: u64,
    /// Batches executed.
    pub batches: u64,
    /// Requests executed (ticks included).
    pub requests: u64,
    /// Highest sequence number executed.
    pub last_executed_seq: u64,
    /// Keys in its in-memory storage at the end.
    pub stored_keys: usize,
}

enum Msg {
    Input(Input),
    Stop,
}

/// A running threaded cluster.
pub struct ThreadedCluster {
    inboxes: Vec<Sender<Msg>>,
    threads: Vec<JoinHandle<ThreadStats>>,
    /// One TicksGenerator per replica (dropping one stops and joins its thread).
    generators: Vec<TicksGenerator<SystemClock>>,
    stop: Arc<AtomicBool>,
    replies: Receiver<ClientReply>,
    executed: Receiver<(NodeId, Executed)>,
    dropped: Arc<AtomicU64>,
    /// The read endpoints' threads and their stop signals (empty unless `serve_reads`).
    readers: Vec<(JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>,
}

impl std::fmt::Debug for ThreadedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadedCluster")
            .field("replicas", &self.inboxes.len())
            .finish_non_exhaustive()
    }
}

/// Queues `input` on a replica's inbox; `false` (counted in `dropped`) when the inbox is full
/// or its thread has stopped.
fn try_deliver(to: &Sender<Msg>, input: Input, dropped: &AtomicU64) -> bool {
    match to.try_send(Msg::Input(input)) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// A client request [`ThreadedCluster::submit`] could not queue on every replica: never a
/// silent drop. The request may still execute (the replicas that queued it forward it to the
/// primary); a client re-sends it under the same request number ([`ClusterClient`] does),
/// which executes it at most once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// These replicas' inboxes were full (or their threads stopped): the request was not
    /// queued there.
    #[error(
        "request not queued on replicas {refused:?} (inbox full or stopped); {queued} queued it"
    )]
    NotQueued {
        /// The replicas that did not take it.
        refused: Vec<NodeId>,
        /// How many did.
        queued: usize,
    },
    /// No replica with this id.
    #[error("no replica {0}")]
    NoSuchReplica(NodeId),
}

struct Worker<N> {
    id: NodeId,
    node: N,
    inbox: Receiver<Msg>,
    peers: Vec<Sender<Msg>>,
    replies: Sender<ClientReply>,
    executed: Sender<(NodeId, Executed)>,
    dropped: Arc<AtomicU64>,
    disk: BTreeMap<Vec<u8>, Vec<u8>>,
    stats: ThreadStats,
    /// The internal queue fed by this replica's TicksGenerator.
    ticks: Receiver<TickInternalMsg>,
}

impl<N: Node> Worker<N> {
    fn step(&mut self, input: Input, out: &mut Vec<Output>) {
        out.clear();
        self.node.handle(wall_clock_ms(), input, out);
        self.stats.inputs += 1;
        for o in out.drain(..) {
            match o {
                Output::Send { to, bytes } => {
                    if to != self.id
                        && let Some(p) = self.peers.get(to as usize)
                    {
                        let input = Input::Peer {
                            from: self.id,
                            bytes,
                        };
                        try_deliver(p, input, &self.dropped);
                    }
                }
                Output::Broadcast { bytes } => {
                    for (to, p) in self.peers.iter().enumerate() {
                        if to as NodeId != self.id {
                            let input = Input::Peer {
                                from: self.id,
                                bytes: bytes.clone(),
                            };
                            try_deliver(p, input, &self.dropped);
                        }
                    }
                }
                Output::Reply { client, bytes } => {
                    let r = ClientReply {
                        from: self.id,
                        client,
                        bytes,
                    };
                    if self.replies.try_send(r).is_err() {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Output::Store { key, value } => match value {
                    Some(v) => {
                        self.disk.insert(key, v);
                    }
                    None => {
                        self.disk.remove(&key);
                    }
                },
                // Memory is as durable as this runtime gets.
                Output::Sync => {}
                Output::Executed(e) => {
                    self.stats.batches += 1;
                    self.stats.requests += u64::from(e.requests);
                    self.stats.last_executed_seq = self.stats.last_executed_seq.max(e.seq);
                    if self.executed.try_send((self.id, e)).is_err() {
                        self.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    fn run(mut self) -> ThreadStats {
        let mut out = Vec::new();
        loop {
            let now = wall_clock_ms();
            if let Some(d) = self.node.next_deadline()
                && d <= now
            {
                self.step(Input::Timer, &mut out);
                continue;
            }
            let wait_ms = match self.node.next_deadline() {
                Some(d) => d.saturating_sub(now).clamp(1, IDLE_WAIT_MS as i64) as u64,
                None => IDLE_WAIT_MS,
            };
            crossbeam_channel::select! {
                recv(self.inbox) -> m => match m {
                    Ok(Msg::Input(i)) => self.step(i, &mut out),
                    Ok(Msg::Stop) | Err(_) => break,
                },
                recv(self.ticks) -> t => match t {
                    Ok(TickInternalMsg { component }) => {
                        self.step(Input::InternalTick { component }, &mut out);
                        // Ticks the generator sent at the same instant are taken now, so that
                        // the replica's own requests leave in one bundle.
                        for _ in 0..TICK_DRAIN_MAX {
                            match self.ticks.try_recv() {
                                Ok(TickInternalMsg { component }) => {
                                    self.step(Input::InternalTick { component }, &mut out);
                                }
                                Err(_) => break,
                            }
                        }
                    }
                    // The generator stopped: no more ticks; keep serving the inbox.
                    Err(_) => self.ticks = crossbeam_channel::never(),
                },
                default(Duration::from_millis(wait_ms)) => {}
            }
        }
        self.stats.stored_keys = self.disk.len();
        self.stats
    }
}

impl ThreadedCluster {
    /// Starts one messaging thread per node (node `i` gets id `i`) and, if configured, a ticker.
    pub fn start<N: Node + Send + 'static>(
        nodes: Vec<N>,
        cfg: RuntimeConfig,
    ) -> Result<Self, RuntimeError> {
        let n = nodes.len();
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..n).map(|_| bounded::<Msg>(INBOX_CAPACITY)).unzip();
        let (reply_tx, replies) = bounded(OBSERVER_CAPACITY);
        let (exec_tx, executed) = bounded(OBSERVER_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::with_capacity(n);
        let mut generators = Vec::with_capacity(n);
        let ticking = cfg.tick_period_ms > 0 && !cfg.components.is_empty();
        for (i, (node, inbox)) in nodes.into_iter().zip(receivers).enumerate() {
            let ticks = if ticking {
                let (tx, rx) = bounded(ccron::ticks::DEFAULT_CHANNEL_CAPACITY);
                // Poll a few times per period so a tick is at most a fraction of a period late.
                let poll_period_ms = (cfg.tick_period_ms / 4).clamp(1, 250);
                let g =
                    TicksGenerator::spawn(SystemClock::new(), DriverConfig { poll_period_ms }, tx)?;
                for c in &cfg.components {
                    g.start(*c, cfg.tick_period_ms);
                }
                generators.push(g);
                rx
            } else {
                crossbeam_channel::never()
            };
            let w = Worker {
                id: i as NodeId,
                node,
                inbox,
                peers: senders.clone(),
                replies: reply_tx.clone(),
                executed: exec_tx.clone(),
                dropped: dropped.clone(),
                disk: BTreeMap::new(),
                stats: ThreadStats::default(),
                ticks,
            };
            threads.push(
                std::thread::Builder::new()
                    .name(format!("replica-{i}"))
                    .spawn(move || w.run())?,
            );
        }
        Ok(Self {
            inboxes: senders,
            threads,
            generators,
            stop,
            replies,
            executed,
            dropped,
            readers: Vec::new(),
        })
    }

    /// Opt-in: serves replica `i`'s committed outbox (`sources[i]`, typically a
    /// `ccron_http::PublishedOutbox` filled by a `ccron_http::PublishOutbox` wrapper around the
    /// replica's application) on its own loopback endpoint, each on its own thread with a
    /// single-threaded tokio runtime; returns the endpoints' addresses in replica order. They
    /// stop with the cluster.
    ///
    /// # Errors
    /// [`RuntimeError::ReadSources`], [`RuntimeError::ReadEndpoint`], [`RuntimeError::Spawn`].
    pub fn serve_reads(
        &mut self,
        sources: Vec<Arc<dyn OutboxSource>>,
        cfg: ReadServerConfig,
    ) -> Result<Vec<SocketAddr>, RuntimeError> {
        if sources.len() != self.inboxes.len() {
            return Err(RuntimeError::ReadSources {
                sources: sources.len(),
                replicas: self.inboxes.len(),
            });
        }
        let mut addrs = Vec::with_capacity(sources.len());
        for (i, source) in sources.into_iter().enumerate() {
            let replica = i as NodeId;
            let io = |error| RuntimeError::ReadEndpoint { replica, error };
            let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(io)?;
            listener.set_nonblocking(true).map_err(io)?;
            addrs.push(listener.local_addr().map_err(io)?);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(io)?;
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("read-{i}"))
                .spawn(move || {
                    rt.block_on(async move {
                        let served = match tokio::net::TcpListener::from_std(listener) {
                            Ok(l) => {
                                ccron_http::read::serve_reads(l, source, cfg, async move {
                                    let _ = stop_rx.await;
                                })
                                .await
                            }
                            Err(e) => Err(e),
                        };
                        if let Err(e) = served {
                            tracing::error!(replica, error = %e, "read endpoint stopped");
                        }
                    });
                })?;
            self.readers.push((thread, stop_tx));
        }
        Ok(addrs)
    }

    fn stop_readers(&mut self) {
        for (thread, stop) in std::mem::take(&mut self.readers) {
            let _ = stop.send(());
            if thread.join().is_err() {
                tracing::error!("a read endpoint thread panicked");
            }
        }
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.inboxes.len()
    }

    /// True when there are no replicas.
    pub fn is_empty(&self) -> bool {
        self.inboxes.is_empty()
    }

    /// Hands an encoded client request to replica `to`.
    ///
    /// # Errors
    /// [`SubmitError`]: no such replica, or its inbox ([`INBOX_CAPACITY`] messages) is full.
    pub fn submit_to(&self, to: NodeId, bytes: Vec<u8>) -> Result<(), SubmitError> {
        let inbox = self
            .inboxes
            .get(to as usize)
            .ok_or(SubmitError::NoSuchReplica(to))?;
        if try_deliver(inbox, Input::Client { bytes }, &self.dropped) {
            Ok(())
        } else {
            Err(SubmitError::NotQueued {
                refused: vec![to],
                queued: 0,
            })
        }
    }

    /// Hands an encoded client request to every replica.
    ///
    /// Limits (what a client must respect; [`ClusterClient`] does): each replica's inbox holds
    /// [`INBOX_CAPACITY`] messages, and a replica refuses a request whose number is more than
    /// 256 below the client's newest executed one (`docs/replica.md`, "Clients"): send at most
    /// 255 requests ahead of the oldest one without a reply.
    ///
    /// # Errors
    /// [`SubmitError::NotQueued`] names the replicas that did not queue it (counted in
    /// [`Self::dropped`] too): re-send it later under the same request number.
    pub fn submit(&self, bytes: &[u8]) -> Result<(), SubmitError> {
        let mut refused = Vec::new();
        for (i, inbox) in self.inboxes.iter().enumerate() {
            let input = Input::Client {
                bytes: bytes.to_vec(),
            };
            if !try_deliver(inbox, input, &self.dropped) {
                refused.push(i as NodeId);
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            tracing::warn!(?refused, "client request not queued on every replica");
            Err(SubmitError::NotQueued {
                queued: self.inboxes.len() - refused.len(),
                refused,
            })
        }
    }

    /// Replies sent to clients.
    pub fn replies(&self) -> &Receiver<ClientReply> {
        &self.replies
    }

    /// Executed batches, per replica.
    pub fn executed(&self) -> &Receiver<(NodeId, Executed)> {
        &self.executed
    }

    /// Messages dropped because a channel was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Stops every thread and returns each replica's statistics.
    pub fn stop(mut self) -> Result<Vec<ThreadStats>, RuntimeError> {
        self.stop.store(true, Ordering::Relaxed);
        for inbox in &self.inboxes {
            // A blocking send: Stop must get through even behind a full inbox.
            let _ = inbox.send(Msg::Stop);
        }
        let mut stats = Vec::with_capacity(self.threads.len());
        for (i, t) in std::mem::take(&mut self.threads).into_iter().enumerate() {
            stats.push(t.join().map_err(|_| RuntimeError::Panicked(i as NodeId))?);
        }
        // The generators' threads stop and join when dropped.
        self.generators.clear();
        self.stop_readers();
        Ok(stats)
    }
}

impl Drop for ThreadedCluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for inbox in &self.inboxes {
            // Blocking is safe: workers always drain their inbox (they never block on a send),
            // and a stopped worker's inbox is disconnected, so this returns at once.
            let _ = inbox.send(Msg::Stop);
        }
        self.stop_readers();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::DiskImage;
    use crate::sim::toy::ToyNode;

    #[test]
    fn toy_cluster_orders_requests_on_threads() {
        let nodes: Vec<ToyNode> = (0..4)
            .map(|i| ToyNode::new(i, 4, &DiskImage::new()))
            .collect();
        let c = ThreadedCluster::start(
            nodes,
            RuntimeConfig {
                tick_period_ms: 10,
                components: vec![5],
            },
        )
        .unwrap();
        for i in 0..20u32 {
            c.submit(&i.to_le_bytes()).unwrap();
        }
        let mut seen = [0u64; 4];
        let deadline = wall_clock_ms() + 10_000;
        while seen.iter().any(|s| *s < 20) && wall_clock_ms() < deadline {
            if let Ok((id, e)) = c.executed().recv_timeout(Duration::from_millis(100)) {
                seen[id as usize] = seen[id as usize].max(e.seq);
            }
        }
        let stats = c.stop().unwrap();
        assert!(seen.iter().all(|s| *s >= 20), "{seen:?}");
        assert!(
            stats
                .iter()
                .all(|s| s.last_executed_seq >= 20 && s.stored_keys >= 20)
        );
    }

    #[test]
    fn read_endpoints_serve_each_replica_and_stop_with_the_cluster() {
        use ccron::outbox::{Jobs, OccurrenceId, Outbox, OutboxLimits, OutboxRecord};
        use ccron_http::{PublishedOutbox, QuorumReader, ReadClientConfig};

        let nodes: Vec<ToyNode> = (0..4)
            .map(|i| ToyNode::new(i, 4, &DiskImage::new()))
            .collect();
        let mut c = ThreadedCluster::start(nodes, RuntimeConfig::default()).unwrap();
        assert!(matches!(
            c.serve_reads(Vec::new(), ReadServerConfig::default()),
            Err(RuntimeError::ReadSources {
                sources: 0,
                replicas: 4
            })
        ));
        let mut ob = Outbox::new(OutboxLimits::default());
        ob.append(OutboxRecord::new(
            OccurrenceId::new(1, 2, 3),
            "h",
            b"p".to_vec(),
        ))
        .unwrap();
        let published: Vec<PublishedOutbox> = (0..4).map(PublishedOutbox::new).collect();
        // Replica 3 has published nothing yet (it answers 503).
        for p in &published[..3] {
            p.publish(&ob, 5);
        }
        let sources = published
            .iter()
            .map(|p| Arc::new(p.clone()) as Arc<dyn OutboxSource>)
            .collect();
        let addrs = c.serve_reads(sources, ReadServerConfig::default()).unwrap();
        assert_eq!(addrs.len(), 4);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let endpoints = addrs.iter().map(|a| format!("http://{a}")).collect();
        let (answered, head, record, replicas) = rt.block_on(async {
            let mut r = QuorumReader::new(ReadClientConfig::new(endpoints, 2)).unwrap();
            let answered = r.refresh(1).await;
            let replicas: Vec<Option<u64>> = r
                .endpoints()
                .iter()
                .map(|e| e.page().map(|p| p.replica))
                .collect();
            (answered, r.jobs().head(), r.jobs().at_index(1), replicas)
        });
        assert_eq!((answered, head), (3, 1));
        assert_eq!(record.as_ref(), ob.get(1));
        assert_eq!(replicas, vec![Some(0), Some(1), Some(2), None]);
        c.stop().unwrap();
    }
}
