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
///
/// A SHA-256 per call (about 3,700 instructions), asked at admission, pre-verification and
/// execution of every request: the ids of the last few clients are kept per thread
/// (64 slots, direct-mapped, keyed by the full index). A pure function of
/// `client` either way: the memo only skips recomputing the same bytes.
pub fn ledger_client(client: ClientId) -> ccron::ClientId {
    type Slots = [Option<(ClientId, ccron::ClientId)>; LEDGER_CLIENT_MEMO];
    thread_local! {
        static MEMO: std::cell::RefCell<Slots> =
            const { std::cell::RefCell::new([None; LEDGER_CLIENT_MEMO]) };
    }
    let slot = ledger_client_slot(client);
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        match memo.get(slot).copied().flatten() {
            Some((c, id)) if c == client => id,
            _ => {
                let id = ccron::ClientId::from_index(client);
                if let Some(s) = memo.get_mut(slot) {
                    *s = Some((client, id));
                }
                id
            }
        }
    })
}

/// Slots of [`ledger_client`]'s per-thread memo.
const LEDGER_CLIENT_MEMO: usize = 64;

/// The memo slot of `client`: user clients (small indices) and the internal clients (indices
/// from a high base) spread over the slots.
fn ledger_client_slot(client: ClientId) -> usize {
    let mixed = (client ^ (client >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // The top 6 bits: 0..64.
    (mixed >> 58) as usize % LEDGER_CLIENT_MEMO
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_client_is_from_index_whatever_the_memo_holds() {
        // User clients, internal clients, and ids that share memo slots, asked in an order
        // that evicts and re-reads every slot: the memo must never answer another client's id.
        let mut ids: Vec<ClientId> = (0..300).collect();
        ids.extend((0..16).map(crate::crypto::internal_client_id));
        ids.extend([u64::MAX, u64::MAX - 1, 1 << 32, (1 << 32) + 64, 1 << 63]);
        let slot0: Vec<ClientId> = (0..10_000u64)
            .filter(|c| ledger_client_slot(*c) == 0)
            .take(4)
            .collect();
        assert!(slot0.len() == 4, "ids sharing slot 0");
        ids.extend(&slot0);
        for round in 0..3 {
            for &c in ids.iter().chain(slot0.iter().rev()) {
                assert_eq!(
                    ledger_client(c),
                    ccron::ClientId::from_index(c),
                    "client {c}, round {round}"
                );
            }
        }
    }
}
