//! Protocol messages of sim-bft: client requests and replies, PBFT messages, their signatures.
//!
//! Wire layout: a peer message is a [`Wire`]: either a replica-signed [`SignedMsg`] (the signature
//! covers the encoded [`Payload`], which names its sender) or a forwarded client
//! [`SignedRequest`] (authenticated by the client's own signature). Client input bytes are one
//! encoded [`SignedRequest`]; replies are encoded [`SignedReply`]s. All encodings go through
//! [`codec`].

pub mod chunks;
pub mod codec;

use crate::crypto::{self, Digest32, Keyring, SigBytes, Signatures, SigningKey, VerifyCache};
use crate::node::{ClientId, Millis, NodeId};
use bincode::{Decode, Encode};
pub use codec::CodecError;

/// What a client request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub enum RequestKind {
    /// An ordinary request for the application.
    Write,
    /// A tick from a replica's internal client; the payload is the component id (4 bytes LE).
    Tick,
}

/// A client request, as signed by its client.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Request {
    /// The issuing client.
    pub client: ClientId,
    /// The client's request sequence number (executes at most once).
    pub req_seq: u64,
    /// Ordinary request or tick.
    pub kind: RequestKind,
    /// Application payload (for a tick: the component id, little endian u32).
    pub payload: Vec<u8>,
}

/// A request with its client's signature over the encoded [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SignedRequest {
    /// The request.
    pub request: Request,
    /// The client's signature over `codec::encode(&request)` (ed25519, or a `sim` tag: see
    /// [`crate::crypto::Signatures`]).
    pub sig: SigBytes,
}

impl SignedRequest {
    /// Signs `request` with `key`.
    pub fn sign(key: &SigningKey, request: Request) -> Result<Self, CodecError> {
        Self::sign_vouched(key, request, None)
    }

    /// Signs `request` with `key` and vouches for the signature in `cache`
    /// ([`crypto::sign_vouched`]).
    pub fn sign_vouched(
        key: &SigningKey,
        request: Request,
        cache: Option<&VerifyCache>,
    ) -> Result<Self, CodecError> {
        let bytes = codec::encode(&request)?;
        Ok(Self {
            sig: crypto::sign_vouched(key, &bytes, cache),
            request,
        })
    }

    /// Encodes the signed request as client input bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(self)
    }

    /// Checks the client's signature (the caller checks authorisation).
    pub fn verify(&self, ring: &Keyring, cache: Option<&VerifyCache>) -> bool {
        let Some(key) = ring.client(self.request.client) else {
            return false;
        };
        match codec::encode(&self.request) {
            Ok(bytes) => crypto::verify(key, &bytes, &self.sig, cache),
            Err(_) => false,
        }
    }
}

/// Builds the client input bytes of a signed request (what a simulated client sends).
pub fn client_request_bytes(
    key: &SigningKey,
    client: ClientId,
    req_seq: u64,
    payload: Vec<u8>,
) -> Result<Vec<u8>, CodecError> {
    SignedRequest::sign(
        key,
        Request {
            client,
            req_seq,
            kind: RequestKind::Write,
            payload,
        },
    )?
    .to_bytes()
}

/// One replica's signed clock reading, taken from its commit message for the certificate's seq.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ClockSample {
    /// The replica that sent the commit.
    pub replica: NodeId,
    /// The view of that commit.
    pub view: u64,
    /// The clock reading the commit carried.
    pub clock_ms: Millis,
    /// The replica's signature over its commit payload.
    pub sig: SigBytes,
}

/// A certificate of 2f+1 signed clock readings from the commits of an earlier sequence number
/// (the Byzantine-robust time service).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct TimeCert {
    /// The sequence number the commits were for.
    pub seq: u64,
    /// The batch digest the commits were for.
    pub digest: Digest32,
    /// At least 2f+1 samples from distinct replicas.
    pub samples: Vec<ClockSample>,
}

impl TimeCert {
    /// The median of the samples' clocks (the lower median for even counts), if any.
    pub fn median_ms(&self) -> Option<Millis> {
        let clocks: Vec<Millis> = self.samples.iter().map(|s| s.clock_ms).collect();
        ccron::host::time::median_ms(&clocks)
    }
}

/// A batch of requests ordered at one sequence number, with its time evidence.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Batch {
    /// The requests, executed in this order.
    pub requests: Vec<SignedRequest>,
    /// The primary's clock when it proposed the batch (the reference time rule).
    pub primary_clock_ms: Millis,
    /// Certificate of signed clocks (the robust time rule), absent for the first seqs.
    pub time_cert: Option<TimeCert>,
    /// A null batch fills a gap after a view change; it executes nothing.
    pub null: bool,
}

impl Batch {
    /// The batch's encoded size (0 if it does not encode): an observation for accounting
    /// (the simulator's amplification checker), not a bound used by the protocol.
    pub fn wire_bytes(&self) -> u64 {
        codec::encoded_len(self).map_or(0, |l| l as u64)
    }

    /// The null batch a new view uses to fill a sequence number nobody prepared.
    pub fn null() -> Self {
        Self {
            requests: Vec::new(),
            primary_clock_ms: 0,
            time_cert: None,
            null: true,
        }
    }

    /// The digest of the canonical encoding under `scheme` ([`Signatures::digest`]: SHA-256
    /// under ed25519): the batch digest that the votes are about.
    pub fn digest(&self, scheme: Signatures) -> Result<Digest32, CodecError> {
        Ok(scheme.digest(&codec::encode(self)?))
    }
}

/// A list of signatures by distinct replicas over one reconstructible payload.
pub type SigList = Vec<(NodeId, SigBytes)>;

/// Proof that a checkpoint is stable: 2f+1 signed checkpoint messages with the same digest.
/// The genesis checkpoint (seq 0) needs no signatures.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct CheckpointProof {
    /// Checkpoint sequence number.
    pub seq: u64,
    /// State digest at `seq`.
    pub digest: Digest32,
    /// Signatures over `Payload { from, Body::Checkpoint { seq, digest } }`.
    pub sigs: SigList,
}

/// Proof that a batch prepared at (view, seq): 2f prepares from backups of `view`.
///
/// It names the batch by digest only (what the prepares signed), so a view change's size does
/// not depend on the batch size: a replica that lacks a batch the new view orders fetches it
/// by digest ([`Body::BatchFetch`]) from a replica that prepared it.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct PreparedProof {
    /// View in which it prepared.
    pub view: u64,
    /// Sequence number.
    pub seq: u64,
    /// The batch digest the prepares signed.
    pub digest: Digest32,
    /// Signatures over `Payload { from, Body::Prepare { view, seq, digest } }`.
    pub sigs: SigList,
}

/// A view-change message.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ViewChange {
    /// The view the sender moves to.
    pub new_view: u64,
    /// The sender's last stable checkpoint, with proof.
    pub stable: CheckpointProof,
    /// Batches (by digest) the sender prepared above its stable checkpoint.
    pub prepared: Vec<PreparedProof>,
}

/// Most `(seq, digest)` pairs one [`Body::BatchFetch`] may ask for.
pub const MAX_FETCH_BATCHES: usize = 8;

/// The body of a replica-signed message.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Body {
    /// Primary proposes `batch` at (`view`, `seq`).
    PrePrepare {
        /// View.
        view: u64,
        /// Sequence number.
        seq: u64,
        /// The proposed batch.
        batch: Batch,
    },
    /// A backup accepted the pre-prepare for (`view`, `seq`, `digest`).
    Prepare {
        /// View.
        view: u64,
        /// Sequence number.
        seq: u64,
        /// Batch digest.
        digest: Digest32,
    },
    /// The sender prepared (`view`, `seq`, `digest`); carries its signed clock.
    Commit {
        /// View.
        view: u64,
        /// Sequence number.
        seq: u64,
        /// Batch digest.
        digest: Digest32,
        /// The sender's clock when it committed (a robust time sample).
        clock_ms: Millis,
    },
    /// The sender's state digest after executing `seq`.
    Checkpoint {
        /// Sequence number.
        seq: u64,
        /// State digest.
        digest: Digest32,
    },
    /// The sender moves to a new view.
    ViewChange(ViewChange),
    /// The primary of `view` starts it, justified by 2f+1 signed view changes (as wire bytes).
    NewView {
        /// The new view.
        view: u64,
        /// 2f+1 encoded [`SignedMsg`]s each carrying a [`Body::ViewChange`] for `view`.
        view_changes: Vec<SignedMsg>,
    },
    /// Asks for chunks of the sender's latest stable checkpoint at or above `seq` (pull: the
    /// requester names the chunks it still lacks, a bounded window at a time).
    StateRequest {
        /// The lowest acceptable checkpoint.
        seq: u64,
        /// Whether the requester also needs the [`Body::StateMeta`] (it has none yet).
        meta: bool,
        /// Indices of the wanted chunks (a source serves at most its window of them, and at
        /// most its per-peer rate).
        indices: Vec<u32>,
    },
    /// Describes the snapshot whose chunks the requester pulls.
    StateMeta {
        /// Proof of the checkpoint the snapshot is for.
        proof: CheckpointProof,
        /// Total snapshot length.
        total_len: u64,
        /// The digests of the snapshot's content-defined chunks, in order
        /// ([`chunks`]); `proof.digest` commits to them (with
        /// `total_len` and the chunk size), so each chunk is verified on arrival and the
        /// requester fetches only chunks whose content it does not hold.
        leaves: Vec<Digest32>,
    },
    /// One chunk of a snapshot, checked against its leaf in the [`Body::StateMeta`].
    StateChunk {
        /// Checkpoint sequence number.
        seq: u64,
        /// Index of the chunk.
        index: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// "I executed up to `last_executed` and I am stuck": peers that are further along answer
    /// with [`Body::Committed`] certificates (retransmission after message loss).
    Status {
        /// The sender's view.
        view: u64,
        /// The sender's last executed sequence number.
        last_executed: u64,
    },
    /// A batch with 2f+1 signed commits for it (all of view `view`): proof that it committed.
    Committed {
        /// The view of the commits.
        view: u64,
        /// Sequence number.
        seq: u64,
        /// The batch.
        batch: Batch,
        /// (replica, clock carried by its commit, signature of its commit).
        commits: Vec<(NodeId, Millis, SigBytes)>,
    },
    /// Normal-case retransmission: "these sequence numbers have been stuck for a while and this
    /// is what I hold of each"; each peer answers with exactly its own messages the sender
    /// lacks (the primary's pre-prepare, the peer's prepare and commit) or, for a sequence
    /// number the peer has committed, its [`Body::Committed`] certificate.
    Have {
        /// The sender's view.
        view: u64,
        /// The sender's last executed sequence number.
        last_executed: u64,
        /// What the sender holds of each stuck sequence number (at most
        /// [`MAX_HAVE_SEQS`] entries).
        seqs: Vec<SeqHave>,
    },
    /// "Send me these batches": a new view ordered them (by digest, see [`PreparedProof`])
    /// and the sender does not hold them. At most [`MAX_FETCH_BATCHES`] pairs.
    BatchFetch {
        /// `(seq, digest)` of each wanted batch.
        wanted: Vec<(u64, Digest32)>,
    },
    /// A batch asked for by [`Body::BatchFetch`]; the receiver checks it against the digest it
    /// asked for (any replica may serve it: the digest, not the sender, vouches for it).
    BatchData {
        /// Sequence number.
        seq: u64,
        /// The batch.
        batch: Batch,
    },
}

/// Most sequence numbers one [`Body::Have`] may list.
pub const MAX_HAVE_SEQS: usize = 64;

/// What a replica holds of one sequence number, in its current view (in a [`Body::Have`]).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SeqHave {
    /// Sequence number.
    pub seq: u64,
    /// Digest of the pre-prepared batch, if the sender holds the pre-prepare.
    pub digest: Option<Digest32>,
    /// Replicas whose prepare the sender holds.
    pub prepares: Vec<NodeId>,
    /// Replicas whose commit (of this view) the sender holds.
    pub commits: Vec<NodeId>,
}

impl Body {
    /// A short name of the message type (for traces and counters).
    pub fn kind(&self) -> &'static str {
        match self {
            Body::PrePrepare { .. } => "pre_prepare",
            Body::Prepare { .. } => "prepare",
            Body::Commit { .. } => "commit",
            Body::Checkpoint { .. } => "checkpoint",
            Body::ViewChange(_) => "view_change",
            Body::NewView { .. } => "new_view",
            Body::StateRequest { .. } => "state_request",
            Body::StateMeta { .. } => "state_meta",
            Body::StateChunk { .. } => "state_chunk",
            Body::Status { .. } => "status",
            Body::Committed { .. } => "committed",
            Body::Have { .. } => "have",
            Body::BatchFetch { .. } => "batch_fetch",
            Body::BatchData { .. } => "batch_data",
        }
    }
}

/// What a replica signs: its id and the body.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Payload {
    /// The signer.
    pub from: NodeId,
    /// The message.
    pub body: Body,
}

/// An encoded [`Payload`] with its sender's signature over exactly these bytes.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SignedMsg {
    /// `codec::encode(&Payload)`.
    pub payload: Vec<u8>,
    /// Signature over `payload`.
    pub sig: SigBytes,
}

impl SignedMsg {
    /// Encodes and signs `payload`.
    pub fn sign(key: &SigningKey, payload: &Payload) -> Result<Self, CodecError> {
        Self::sign_vouched(key, payload, None)
    }

    /// Encodes and signs `payload`, vouching for the signature in `cache`
    /// ([`crypto::sign_vouched`]).
    pub fn sign_vouched(
        key: &SigningKey,
        payload: &Payload,
        cache: Option<&VerifyCache>,
    ) -> Result<Self, CodecError> {
        let bytes = codec::encode(payload)?;
        Ok(Self {
            sig: crypto::sign_vouched(key, &bytes, cache),
            payload: bytes,
        })
    }

    /// Decodes the payload and checks the signature with the claimed sender's key.
    pub fn open(
        &self,
        ring: &Keyring,
        limit_bytes: usize,
        cache: Option<&VerifyCache>,
    ) -> Result<Payload, OpenError> {
        let payload: Payload = codec::decode(&self.payload, limit_bytes)?;
        let key = ring
            .replica(payload.from)
            .ok_or(OpenError::UnknownSender(payload.from))?;
        if !crypto::verify(key, &self.payload, &self.sig, cache) {
            return Err(OpenError::BadSignature);
        }
        Ok(payload)
    }
}

/// Verifies that `sig` is `from`'s signature over `Payload { from, body }`.
pub fn verify_body(
    ring: &Keyring,
    from: NodeId,
    body: Body,
    sig: &SigBytes,
    cache: Option<&VerifyCache>,
) -> bool {
    let Some(key) = ring.replica(from) else {
        return false;
    };
    match codec::encode(&Payload { from, body }) {
        Ok(bytes) => crypto::verify(key, &bytes, sig, cache),
        Err(_) => false,
    }
}

/// Encodes and signs `payload` as a whole [`Wire::Signed`] message, returning its bytes and the
/// signature: exactly `codec::encode(&Wire::Signed(SignedMsg::sign_vouched(key, payload,
/// cache)?))`, written in one buffer. The wire header (the [`Wire`] tag and the payload's length)
/// and a signature-sized placeholder are encoded around the payload in one pass; the length and
/// the signature are then written in place. Compared with signing a [`SignedMsg`] and encoding
/// it, that saves one allocation, one copy of the payload and one sizing pass per message (the
/// replica's send path). A test pins the bytes to `codec::encode`'s.
pub fn sign_wire(
    key: &SigningKey,
    payload: &Payload,
    cache: Option<&VerifyCache>,
) -> Result<(Vec<u8>, SigBytes), CodecError> {
    let mut bytes = codec::encode(&SignedWireDraft(payload))?;
    let Some(len) = bytes.len().checked_sub(SIGNED_WIRE_HEAD + SIG_LEN) else {
        return Err(CodecError::Encode(format!(
            "a signed message draft of {} bytes is shorter than its frame",
            bytes.len()
        )));
    };
    let end = SIGNED_WIRE_HEAD + len;
    bytes[4..SIGNED_WIRE_HEAD].copy_from_slice(&(len as u64).to_le_bytes());
    let sig = crypto::sign_vouched(key, &bytes[SIGNED_WIRE_HEAD..end], cache);
    bytes[end..].copy_from_slice(&sig);
    Ok((bytes, sig))
}

/// Bytes before the payload in an encoded [`Wire::Signed`]: the variant index (u32) and the
/// payload's length (u64), both fixed-width.
const SIGNED_WIRE_HEAD: usize = 4 + 8;

/// Bytes of an encoded signature (an array: no length prefix).
const SIG_LEN: usize = std::mem::size_of::<SigBytes>();

/// [`Wire::Signed`]'s encoding with the payload encoded in place and zeros for the payload's
/// length and the signature ([`sign_wire`] fills them in).
struct SignedWireDraft<'a>(&'a Payload);

impl Encode for SignedWireDraft<'_> {
    fn encode<E: bincode::enc::Encoder>(
        &self,
        encoder: &mut E,
    ) -> Result<(), bincode::error::EncodeError> {
        // Wire::Signed is variant 0; the derived encoding writes the index as a u32.
        0u32.encode(encoder)?;
        // SignedMsg::payload's length prefix (a u64 under fixed-width integers).
        0u64.encode(encoder)?;
        self.0.encode(encoder)?;
        let placeholder: SigBytes = [0; SIG_LEN];
        placeholder.encode(encoder)
    }
}

/// Why a [`SignedMsg`] could not be opened.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenError {
    /// The payload does not decode.
    #[error("codec: {0}")]
    Codec(#[from] CodecError),
    /// The claimed sender is not a replica.
    #[error("unknown sender {0}")]
    UnknownSender(NodeId),
    /// The signature does not verify.
    #[error("bad signature")]
    BadSignature,
}

/// Everything a replica sends to another replica.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub enum Wire {
    /// A replica-signed protocol message.
    Signed(SignedMsg),
    /// A client request forwarded to the primary (the client's signature authenticates it).
    Request(SignedRequest),
    /// Several requests sent together, in order: a replica's own internal requests (ticks)
    /// produced at one instant. Each request is authenticated by its own signature.
    Requests(Vec<SignedRequest>),
}

/// What the simulator's amplification checker judges a replica-to-replica message against
/// (see `sim::checker::Traffic`). For accounting only; a replica decodes and verifies
/// everything it acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficClass {
    /// A signed message carrying a whole batch: a pre-prepare, a commit certificate
    /// ([`Body::Committed`]) or fetched batch data ([`Body::BatchData`]).
    Batch,
    /// State transfer data: [`Body::StateMeta`] and [`Body::StateChunk`].
    State,
    /// Client requests relayed by a replica ([`Wire::Request`], [`Wire::Requests`]).
    Forward,
    /// Everything else (votes, checkpoints, view changes, status, …).
    Other,
}

/// The [`TrafficClass`] of wire `bytes`, read off the encoding's fixed prefix without decoding
/// the message: the [`Wire`] tag, then for [`Wire::Signed`] the payload's length, the signer and
/// the [`Body`] tag (fixed-width integers).
pub fn traffic_class(bytes: &[u8]) -> TrafficClass {
    let tag = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
    };
    match (tag(0), tag(16)) {
        (Some(0), Some(t)) if BATCH_CARRYING_TAGS.contains(&t) => TrafficClass::Batch,
        (Some(0), Some(t)) if STATE_TAGS.contains(&t) => TrafficClass::State,
        (Some(1 | 2), _) => TrafficClass::Forward,
        _ => TrafficClass::Other,
    }
}

/// The variant indices of [`Body::PrePrepare`], [`Body::Committed`] and [`Body::BatchData`]
/// (checked against the encoder by a test).
const BATCH_CARRYING_TAGS: [u32; 3] = [0, 10, 13];

/// The variant indices of [`Body::StateMeta`] and [`Body::StateChunk`] (checked by a test).
const STATE_TAGS: [u32; 2] = [7, 8];

/// A replica's reply to a client.
///
/// Replies are signed once per executed batch, not once per request: the replica signs a
/// [`ReplyHeader`] naming the digest of the list of every reply of the batch, and each reply
/// carries that list (`batch_entries`, 32 bytes per request) and its own position in it. A
/// client recomputes its entry, checks it is at `index`, and verifies the one signature.
///
/// Besides the replying replica (and its signature) a reply is a function of execution only:
/// no view number or other replica-local state, so a cached reply re-sent after a view change
/// (a single-entry list) is the same on every replica and matches the original's content.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct Reply {
    /// The replying replica.
    pub replica: NodeId,
    /// Sequence number of the batch that executed it.
    pub seq: u64,
    /// The client.
    pub client: ClientId,
    /// The client's request number.
    pub req_seq: u64,
    /// The application's result.
    pub result: Vec<u8>,
    /// [`reply_entry`] of every reply of the batch, in batch order.
    pub batch_entries: Vec<Digest32>,
    /// Position of this reply in `batch_entries`.
    pub index: u32,
}

/// What a replica signs for a batch of replies.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct ReplyHeader {
    /// The replying replica.
    pub replica: NodeId,
    /// Batch sequence number.
    pub seq: u64,
    /// The scheme's digest ([`entries_digest`]) over the concatenated entries.
    pub entries_digest: Digest32,
}

/// The digest identifying one reply inside its batch's reply list, under `scheme`'s digest.
pub fn reply_entry(scheme: Signatures, client: ClientId, req_seq: u64, result: &[u8]) -> Digest32 {
    let mut h = scheme.hasher();
    h.update(client.to_le_bytes());
    h.update(req_seq.to_le_bytes());
    h.update(result);
    h.finalize()
}

/// The digest (under `scheme`) over concatenated reply entries.
pub fn entries_digest(scheme: Signatures, entries: &[Digest32]) -> Digest32 {
    let mut h = scheme.hasher();
    for e in entries {
        h.update(e);
    }
    h.finalize()
}

/// A reply with the replica's signature over the [`ReplyHeader`] of its batch.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub struct SignedReply {
    /// The reply.
    pub reply: Reply,
    /// Signature over `codec::encode(&ReplyHeader)`.
    pub sig: SigBytes,
}

impl SignedReply {
    /// Decodes reply bytes and checks them and the replica's signature (what a client does).
    pub fn open(bytes: &[u8], ring: &Keyring) -> Result<Reply, OpenError> {
        let signed: SignedReply = codec::decode(bytes, 4 << 20)?;
        let r = &signed.reply;
        let key = ring
            .replica(r.replica)
            .ok_or(OpenError::UnknownSender(r.replica))?;
        let scheme = key.scheme();
        if r.batch_entries.get(r.index as usize)
            != Some(&reply_entry(scheme, r.client, r.req_seq, &r.result))
        {
            return Err(OpenError::BadSignature);
        }
        let header = ReplyHeader {
            replica: r.replica,
            seq: r.seq,
            entries_digest: entries_digest(scheme, &r.batch_entries),
        };
        let bytes = codec::encode(&header)?;
        if !crypto::verify(key, &bytes, &signed.sig, None) {
            return Err(OpenError::BadSignature);
        }
        Ok(signed.reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{client_signing_key, replica_signing_key};

    #[test]
    fn traffic_classes_are_recognised_from_their_prefix() {
        let key = replica_signing_key(3, 1);
        let wire = |body: Body| {
            let m = SignedMsg::sign(&key, &Payload { from: 1, body }).unwrap();
            codec::encode(&Wire::Signed(m)).unwrap()
        };
        let batch = Batch::null();
        let cases = [
            (
                Body::PrePrepare {
                    view: 1,
                    seq: 2,
                    batch: batch.clone(),
                },
                TrafficClass::Batch,
            ),
            (
                Body::Committed {
                    view: 1,
                    seq: 2,
                    batch: batch.clone(),
                    commits: Vec::new(),
                },
                TrafficClass::Batch,
            ),
            (
                Body::BatchData {
                    seq: 2,
                    batch: batch.clone(),
                },
                TrafficClass::Batch,
            ),
            (
                Body::StateChunk {
                    seq: 2,
                    index: 0,
                    data: vec![0; 40],
                },
                TrafficClass::State,
            ),
            (
                Body::StateMeta {
                    proof: CheckpointProof {
                        seq: 2,
                        digest: [0; 32],
                        sigs: Vec::new(),
                    },
                    total_len: 40,
                    leaves: vec![[0; 32]],
                },
                TrafficClass::State,
            ),
            (
                Body::Prepare {
                    view: 1,
                    seq: 2,
                    digest: [0; 32],
                },
                TrafficClass::Other,
            ),
            (
                Body::Status {
                    view: 1,
                    last_executed: 2,
                },
                TrafficClass::Other,
            ),
            (
                Body::StateRequest {
                    seq: 2,
                    meta: true,
                    indices: vec![0, 1],
                },
                TrafficClass::Other,
            ),
        ];
        for (b, class) in cases {
            let kind = b.kind();
            assert_eq!(traffic_class(&wire(b)), class, "{kind}");
        }
        let client = client_signing_key(3, 7);
        let r = SignedRequest::sign(
            &client,
            Request {
                client: 7,
                req_seq: 1,
                kind: RequestKind::Write,
                payload: vec![1, 2],
            },
        )
        .unwrap();
        let one = codec::encode(&Wire::Request(r.clone())).unwrap();
        assert_eq!(traffic_class(&one), TrafficClass::Forward);
        let many = codec::encode(&Wire::Requests(vec![r])).unwrap();
        assert_eq!(traffic_class(&many), TrafficClass::Forward);
        assert_eq!(traffic_class(&[]), TrafficClass::Other);
        assert_eq!(traffic_class(&[0; 12]), TrafficClass::Other);
    }

    /// `sign_wire` writes exactly the bytes of `codec::encode(&Wire::Signed(..))` of the signed
    /// message (the wire layout is unchanged) and returns its signature, under both schemes, for
    /// payloads from a few bytes to a length prefix of three bytes, with and without a cache.
    #[test]
    fn sign_wire_is_the_encoded_signed_msg() {
        let request = |client: u64, len: usize| {
            SignedRequest::sign(
                &client_signing_key(3, client),
                Request {
                    client,
                    req_seq: 1,
                    kind: RequestKind::Write,
                    payload: vec![7; len],
                },
            )
            .unwrap()
        };
        let batch = Batch {
            requests: vec![request(1, 3), request(2, 300)],
            primary_clock_ms: 1_000,
            time_cert: None,
            null: false,
        };
        let bodies = [
            Body::PrePrepare {
                view: 1,
                seq: 2,
                batch: batch.clone(),
            },
            Body::Committed {
                view: 1,
                seq: 2,
                batch,
                commits: Vec::new(),
            },
            Body::Prepare {
                view: 0,
                seq: 5,
                digest: [9; 32],
            },
            Body::StateChunk {
                seq: 2,
                index: 0,
                data: (0..70_000u32).map(|i| i as u8).collect(),
            },
            Body::StateRequest {
                seq: 2,
                meta: true,
                indices: Vec::new(),
            },
        ];
        for scheme in [Signatures::Ed25519, Signatures::Sim] {
            let key = crypto::replica_key(scheme, 3, 1);
            let cache = VerifyCache::new(16);
            for body in &bodies {
                let kind = body.kind();
                let payload = Payload {
                    from: 1,
                    body: body.clone(),
                };
                let signed = SignedMsg::sign(&key, &payload).unwrap();
                let expected = codec::encode(&Wire::Signed(signed.clone())).unwrap();
                for cache in [None, Some(&cache)] {
                    let (bytes, sig) = sign_wire(&key, &payload, cache).unwrap();
                    assert_eq!(sig, signed.sig, "{scheme:?} {kind}");
                    assert_eq!(bytes, expected, "{scheme:?} {kind}");
                }
            }
        }
    }

    #[test]
    fn signed_msg_round_trip_and_tamper() {
        let ring = Keyring::from_seed(3, 4, 1);
        let key = replica_signing_key(3, 1);
        let p = Payload {
            from: 1,
            body: Body::Prepare {
                view: 0,
                seq: 5,
                digest: [9; 32],
            },
        };
        let m = SignedMsg::sign(&key, &p).unwrap();
        assert_eq!(m.open(&ring, 1 << 20, None).unwrap(), p);
        assert!(verify_body(&ring, 1, p.body.clone(), &m.sig, None));
        assert!(!verify_body(&ring, 2, p.body.clone(), &m.sig, None));
        let mut t = m.clone();
        t.sig[0] ^= 1;
        assert_eq!(t.open(&ring, 1 << 20, None), Err(OpenError::BadSignature));
        // A message claiming another sender fails with that sender's key.
        let forged = SignedMsg::sign(
            &key,
            &Payload {
                from: 2,
                body: p.body.clone(),
            },
        )
        .unwrap();
        assert_eq!(
            forged.open(&ring, 1 << 20, None),
            Err(OpenError::BadSignature)
        );
    }

    #[test]
    fn request_signature_and_median() {
        let ring = Keyring::from_seed(3, 4, 2);
        let bytes = client_request_bytes(&client_signing_key(3, 1), 1, 1, b"x".to_vec()).unwrap();
        let r: SignedRequest = codec::decode(&bytes, 1 << 20).unwrap();
        assert!(r.verify(&ring, None));
        let mut wrong = r.clone();
        wrong.request.client = 0;
        assert!(!wrong.verify(&ring, None));
        let s = |c| ClockSample {
            replica: 0,
            view: 0,
            clock_ms: c,
            sig: [0; 64],
        };
        let cert = TimeCert {
            seq: 1,
            digest: [0; 32],
            samples: vec![s(30), s(10), s(20)],
        };
        assert_eq!(cert.median_ms(), Some(20));
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// With at most f of 2f+1 samples from liars (any values), the median lies within the
        /// range of the honest samples.
        #[test]
        fn median_stays_in_the_honest_range(
            f in 1usize..5,
            honest in proptest::collection::vec(0i64..1_000_000, 9),
            liars in proptest::collection::vec(any::<i64>(), 4),
            liar_count in 0usize..5,
        ) {
            let liar_count = liar_count.min(f);
            let honest = &honest[..2 * f + 1 - liar_count];
            let s = |c| ClockSample { replica: 0, view: 0, clock_ms: c, sig: [0; 64] };
            let mut samples: Vec<ClockSample> = honest.iter().map(|c| s(*c)).collect();
            samples.extend(liars.iter().take(liar_count).map(|c| s(*c)));
            let cert = TimeCert { seq: 1, digest: [0; 32], samples };
            let m = cert.median_ms().unwrap();
            let lo = *honest.iter().min().unwrap();
            let hi = *honest.iter().max().unwrap();
            prop_assert!(lo <= m && m <= hi, "median {m} outside [{lo}, {hi}]");
        }

        /// Every body round-trips through the codec, and re-encoding is byte-identical.
        #[test]
        fn codec_round_trip_is_canonical(view in any::<u64>(), seq in any::<u64>(), d in any::<[u8; 32]>(), clock in any::<i64>()) {
            for body in [
                Body::Prepare { view, seq, digest: d },
                Body::Commit { view, seq, digest: d, clock_ms: clock },
                Body::Checkpoint { seq, digest: d },
                Body::Status { view, last_executed: seq },
            ] {
                let p = Payload { from: 3, body };
                let bytes = codec::encode(&p).unwrap();
                let back: Payload = codec::decode(&bytes, 1 << 20).unwrap();
                prop_assert_eq!(&back, &p);
                prop_assert_eq!(codec::encode(&back).unwrap(), bytes);
            }
        }
    }
}
