//! The boundary between a replica state machine and its hosts.
//!
//! A replica is a sans-IO state machine: hosts (the deterministic simulator, the threaded runtime)
//! feed it [`Input`]s together with the current reading of its local clock, and perform the
//! [`Output`]s it returns. It never reads a clock, never touches a socket or a file, never draws
//! randomness. The same replica code therefore runs under the simulator and the threaded runtime,
//! and a simulated run is fully determined by its seed.

/// Index of a replica, `0..n`.
pub type NodeId = u32;

/// Identifies a client (user clients and each replica's internal client) on the simulated
/// network: its index, by which its key is found. The ledger names it by a 256-bit id
/// ([`ledger_client`]).
pub type ClientId = u64;

/// The 256-bit id the ledger (`ccron::host`) sees for simulated client `client`: the
/// deterministic [`ccron::ClientId::from_index`] of its index (a client is authenticated by its
/// index's key, so its index names it; the id is the same on every replica and run).
pub fn ledger_client(client: ClientId) -> ccron::ClientId {
    ccron::ClientId::from_index(client)
}

/// A reading of a local clock, in milliseconds since the Unix epoch.
pub type Millis = i64;

/// Something a host hands to a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Bytes that arrived from replica `from`. Untrusted: they may be anything.
    Peer {
        /// The transport-level sender (authenticated again by the signature inside).
        from: NodeId,
        /// The encoded, signed protocol message.
        bytes: Vec<u8>,
    },
    /// An encoded, signed client request. Untrusted.
    Client {
        /// The encoded request.
        bytes: Vec<u8>,
    },
    /// The deadline returned by [`Node::next_deadline`] has passed.
    Timer,
    /// This replica's TicksGenerator fired for `component` (an internal message).
    InternalTick {
        /// The component whose timer fired.
        component: u32,
    },
}

/// Something a replica asks its host to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send `bytes` to replica `to`.
    Send {
        /// Destination replica.
        to: NodeId,
        /// Encoded message.
        bytes: Vec<u8>,
    },
    /// Send `bytes` to every other replica.
    Broadcast {
        /// Encoded message.
        bytes: Vec<u8>,
    },
    /// Deliver a reply to a client.
    Reply {
        /// Destination client.
        client: ClientId,
        /// Encoded reply.
        bytes: Vec<u8>,
    },
    /// Write to durable storage. Writes are applied in order; a crash may lose the writes issued
    /// after the last `Sync`, never earlier ones.
    Store {
        /// Storage key.
        key: Vec<u8>,
        /// New value; `None` deletes the key.
        value: Option<Vec<u8>>,
    },
    /// Make every earlier `Store` durable before performing any later output.
    Sync,
    /// A committed batch was executed (an observation for checkers, reports and traces).
    Executed(Executed),
}

/// What a replica reports after executing a committed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    /// Sequence number of the batch.
    pub seq: u64,
    /// Digest of the batch's content (requests and agreed time).
    pub batch_digest: [u8; 32],
    /// Agreed time of the batch, when the time service is on.
    pub agreed_time_ms: Option<Millis>,
    /// Digest of the replicated state (application, cron tables' pages, time) after the batch.
    pub state_digest: [u8; 32],
    /// Number of requests in the batch, ticks included.
    pub requests: u32,
    /// The batch's encoded size ([`crate::protocol::Batch::wire_bytes`]): the simulator's
    /// amplification checker sizes the committed batch stream by it.
    pub batch_bytes: u64,
    /// Components of the ticks in the batch, in batch order.
    pub ticks: Vec<u32>,
    /// The cron actions the batch's ticks ran, in the order they ran (an observation taken
    /// from [`crate::app::Application::take_fire_notes`]; empty for applications that keep none).
    pub fires: Vec<FireNote>,
}

/// One cron action run by a tick (defined in [`ccron::host`], re-exported).
pub use ccron::host::FireNote;

/// A sans-IO replica: hosts feed it inputs and perform its outputs.
pub trait Node {
    /// Handles one input at local clock reading `now`, appending the resulting outputs to `out`.
    /// Never panics, whatever the input bytes are.
    fn handle(&mut self, now: Millis, input: Input, out: &mut Vec<Output>);

    /// When the host should next deliver [`Input::Timer`], if ever.
    fn next_deadline(&self) -> Option<Millis>;
}
