//! The replicated outbox: an append-only, densely indexed log of external effects to perform.
//!
//! Actions running inside consensus must not talk to the outside world (replicas would do it n
//! times, at different moments, and Byzantine ones would lie about it). Instead an action appends
//! an [`OutboxRecord`] naming its deterministic [`OccurrenceId`]; every replica appends the same
//! record at the same index. A consumer outside consensus (see [`super::Consumer`]) reads records
//! by index and delivers them to workers, which deduplicate by id.
//!
//! The outbox is pure replicated state: no clock, no I/O, bounded size (typed error when full),
//! deterministic encoding ([`Outbox::encode`] / [`Outbox::decode`]). A host keeps it in reserved
//! pages with [`Outbox::save`] / [`Outbox::load`] (through [`crate::codec`], multi-page,
//! checksummed, size-limited), so it is checkpointed and transferred with the rest of the
//! replicated state and reloaded after a restart or a state transfer. The host trims records below
//! an index once it knows they are delivered (for example after the consumers' acknowledgements
//! are themselves agreed through consensus).
//!
//! Results come back through [`Outbox::accept_result`]: only from the consumer, and a worker's
//! answer only when signed by a worker key registered for the record's handler (the genesis
//! [`Policy::worker_keys`] and the outbox's own [`WorkerRegistry`], changed by admins through
//! [`Outbox::apply_worker_keys`]).
//!
//! Every held record has an owner ([`Outbox::owner_of`]): the owner of the schedule whose
//! handler emitted it, the client whose request emitted it, or the host (cron table records,
//! host appends). The outbox keeps each owner's pending records and bytes
//! ([`Outbox::owner_usage`]) and answers how many runs an owner may still start within its
//! [`Quota`] ([`Outbox::owner_room`]): the per-owner quota is checked before a run, like the
//! capacity (`docs/outbox.md`, "Quotas").

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use super::codec::{self, CodecError};
use super::emit::{EmitBudget, EmitError};
use super::id::OccurrenceId;
use super::result::{OutboxResult, ResultApplied, ResultOutcome};
use super::workers::{self, Grant, WorkerKey, WorkerKeyRequest, WorkerKeysApplied, WorkerRegistry};
use crate::authz::{Policy, Principal, PrincipalV1, Quota, QuotaKind};

/// Version byte of [`Outbox::encode`]'s format and of the outbox's pages. 5: records carry a
/// topic and a type, the outbox the indices of records that have a result, its worker
/// registry and each held record's owner. Layouts 4 (without owners) and 3 (without owners
/// and registry) are still read: their records load owned by the host (they were admitted
/// before quotas), with an empty registry for layout 3, and the next save writes the current
/// layout. 6: layout 5 with owners named by 256-bit client ids ([`crate::authz::ClientId`]);
/// layout 5 is read and its client owners become [`Principal::LegacyClient`] (their quota
/// usage is counted under the legacy owner until its records are trimmed). Versions 1 and 2
/// are refused ([`CodecError::Version`]).
const FORMAT_VERSION: u8 = 6;

/// The layout before 256-bit client ids ([`FORMAT_VERSION`]), migrated on load.
const FORMAT_V5: u8 = 5;

/// The layout before record owners ([`FORMAT_VERSION`]), migrated on load.
const FORMAT_V4: u8 = 4;

/// The layout before worker keys ([`FORMAT_VERSION`]), migrated on load.
const FORMAT_V3: u8 = 3;

/// One external effect to perform, named by the occurrence that produced it.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct OutboxRecord {
    /// The deterministic id of the firing that produced the record (the worker's dedupe key).
    pub id: OccurrenceId,
    /// Which worker-side handler performs the effect.
    pub handler: String,
    /// Opaque argument for the handler.
    pub payload: Vec<u8>,
    /// A routing topic (a worker pool may route by it), or none. A schedule's records carry
    /// its [`NewSchedule::topic`](crate::schedule::NewSchedule::topic), bounded and validated
    /// when the schedule was admitted.
    pub topic: Option<String>,
    /// A record type, or none (a schedule's [`NewSchedule::kind`](crate::schedule::NewSchedule::kind)).
    pub kind: Option<String>,
}

impl OutboxRecord {
    /// A record for occurrence `id`, to be performed by `handler` with `payload`.
    pub fn new(id: OccurrenceId, handler: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            id,
            handler: handler.into(),
            payload: payload.into(),
            topic: None,
            kind: None,
        }
    }

    /// With a routing topic.
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// With a record type.
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Bytes this record counts against [`OutboxLimits`]: handler, payload, topic and type
    /// lengths.
    pub fn size_bytes(&self) -> usize {
        let route = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        self.handler
            .len()
            .saturating_add(self.payload.len())
            .saturating_add(route(&self.topic))
            .saturating_add(route(&self.kind))
    }
}

/// Size bounds of an [`Outbox`]. Every replica must configure the same limits, since a full
/// outbox rejects an append and that rejection is part of the replicated outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxLimits {
    /// Most records held at once (appended and not yet trimmed).
    pub max_records: usize,
    /// Largest [`OutboxRecord::size_bytes`] of one record.
    pub max_record_bytes: usize,
    /// Largest sum of [`OutboxRecord::size_bytes`] over the held records.
    pub max_total_bytes: usize,
}

impl Default for OutboxLimits {
    /// 4,096 records, 64 KiB each, 16 MiB in total.
    fn default() -> Self {
        Self {
            max_records: 4096,
            max_record_bytes: 64 * 1024,
            max_total_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Why the outbox refused an operation or some bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The outbox already holds [`OutboxLimits::max_records`] records.
    #[error("the outbox is full ({max_records} records); trim delivered records first")]
    Full {
        /// The configured bound.
        max_records: usize,
    },
    /// One record is larger than [`OutboxLimits::max_record_bytes`].
    #[error("a record of {size_bytes} bytes exceeds the {max_record_bytes}-byte limit")]
    RecordTooLarge {
        /// Size of the rejected record.
        size_bytes: usize,
        /// The configured bound.
        max_record_bytes: usize,
    },
    /// Appending would exceed [`OutboxLimits::max_total_bytes`].
    #[error("the outbox would hold {total_bytes} bytes, over the {max_total_bytes}-byte limit")]
    TotalTooLarge {
        /// Bytes the outbox would hold after the append.
        total_bytes: usize,
        /// The configured bound.
        max_total_bytes: usize,
    },
    /// The index space is exhausted (after 2^64 - 1 appends).
    #[error("the outbox index space is exhausted")]
    IndexExhausted,
    /// Encoding or decoding failed.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The reserved pages failed, or held a corrupt, foreign or oversized outbox, or the outbox
    /// does not fit the page range ([`Outbox::save`] / [`Outbox::load`]).
    #[error("outbox pages: {0}")]
    Pages(#[from] crate::codec::CodecError),
    /// Decoded bytes describe an outbox that violates its invariants or the given limits.
    #[error("decoded outbox is invalid: {0}")]
    Invalid(String),
    /// Progress reported by someone other than the configured outbox consumer
    /// ([`Outbox::accept_progress`]); nothing was trimmed.
    #[error("{by} may not report outbox progress")]
    Unauthorized {
        /// Who reported it.
        by: Principal,
    },
    /// A result reported by someone other than the configured outbox consumer
    /// ([`Outbox::accept_result`]); nothing changed.
    #[error("{by} may not report outbox results")]
    ResultUnauthorized {
        /// Who reported it.
        by: Principal,
    },
    /// A result for an index never appended ([`Outbox::accept_result`]).
    #[error("result for index {index} past the outbox head {head}")]
    ResultUnknown {
        /// The index the result named.
        index: u64,
        /// The outbox head at the time.
        head: u64,
    },
    /// A result whose occurrence id is not the one of the record at its index.
    #[error("result for index {index} names {claimed}, but the record there is {actual}")]
    ResultMismatch {
        /// The index the result named.
        index: u64,
        /// The id the result named.
        claimed: OccurrenceId,
        /// The id of the record at that index.
        actual: OccurrenceId,
    },
    /// A result whose answer or reason exceeds [`OutboxLimits::max_record_bytes`].
    #[error("a result of {size_bytes} bytes exceeds the {max_bytes}-byte limit")]
    ResultTooLarge {
        /// The result's size.
        size_bytes: usize,
        /// The bound.
        max_bytes: usize,
    },
    /// Progress reported past the last record ever appended ([`Outbox::accept_progress`]):
    /// nothing past the head can have been delivered; nothing was trimmed.
    #[error("progress {upto} is past the outbox head {head}")]
    ProgressAboveHead {
        /// The reported progress.
        upto: u64,
        /// The outbox head at the time.
        head: u64,
    },
    /// A worker's answer without a worker signature ([`Outbox::accept_result`]): only the
    /// host may report unsigned answers; nothing changed.
    #[error("the answer for index {index} is not signed by a worker")]
    ResultUnsigned {
        /// The index the result named.
        index: u64,
    },
    /// An answer signed by a key that is not registered for the record's handler.
    #[error("worker key {key} is not registered for handler {handler:?} (index {index})")]
    ResultWorkerUnknown {
        /// The index the result named.
        index: u64,
        /// The key that signed.
        key: WorkerKey,
        /// The record's handler.
        handler: String,
    },
    /// An answer whose signature does not verify over the record and the answer.
    #[error("the worker signature of the answer for index {index} does not verify")]
    ResultBadSignature {
        /// The index the result named.
        index: u64,
        /// The key named in the proof.
        key: WorkerKey,
    },
    /// A worker key request from someone other than an admin
    /// ([`Outbox::apply_worker_keys`]); nothing changed.
    #[error("{by} may not register or revoke worker keys")]
    WorkerKeysUnauthorized {
        /// Who asked.
        by: Principal,
    },
    /// A malformed worker key request (bad key, handlers out of bounds, registry full);
    /// nothing changed.
    #[error("worker key request refused: {0}")]
    WorkerKeyInvalid(String),
}

/// The replicated outbox (see the module documentation).
///
/// Indices are dense and start at 1: the `k`-th record ever appended has index `k`, forever,
/// whatever was trimmed since. Index 0 means "nothing" (e.g. a consumer that has done nothing).
///
/// Equality compares the replicated state only (not the [`refused_results`](Self::refused_results)
/// counter).
#[derive(Debug)]
pub struct Outbox {
    limits: OutboxLimits,
    /// Index of `records[0]` (equals `next_index` when empty).
    first_index: u64,
    records: VecDeque<OutboxRecord>,
    total_bytes: usize,
    /// Indices of held records that have a result applied ([`Outbox::accept_result`]); every
    /// one is within `first_index..next_index`, so this is bounded by the held records.
    results: BTreeSet<u64>,
    /// Worker keys registered or revoked on top of the policy's genesis keys; its bytes count
    /// against `limits.max_total_bytes` with the records'.
    workers: WorkerRegistry,
    /// The owner of each held record (`owners[i]` owns `records[i]`).
    owners: VecDeque<Principal>,
    /// Pending records and bytes per owner (derived from `owners` and `records`, rebuilt on
    /// load; an owner with nothing pending has no entry).
    usage: BTreeMap<Principal, (u64, u64)>,
    /// Results refused by [`Outbox::accept_result`] (observation only: not replicated state,
    /// not encoded, not compared).
    refused: AtomicU64,
    /// Runs and requests refused or held back by an owner's quota ([`Outbox::owner_room`];
    /// observation only, like `refused`).
    quota_refusals: AtomicU64,
}

impl Clone for Outbox {
    fn clone(&self) -> Self {
        Self {
            limits: self.limits,
            first_index: self.first_index,
            records: self.records.clone(),
            total_bytes: self.total_bytes,
            results: self.results.clone(),
            workers: self.workers.clone(),
            owners: self.owners.clone(),
            usage: self.usage.clone(),
            refused: AtomicU64::new(self.refused.load(Ordering::Relaxed)),
            quota_refusals: AtomicU64::new(self.quota_refusals.load(Ordering::Relaxed)),
        }
    }
}

impl PartialEq for Outbox {
    fn eq(&self, other: &Self) -> bool {
        self.limits == other.limits
            && self.first_index == other.first_index
            && self.records == other.records
            && self.total_bytes == other.total_bytes
            && self.results == other.results
            && self.workers == other.workers
            && self.owners == other.owners
    }
}

impl Eq for Outbox {}

/// What [`Outbox::encode`] writes (layout 5): limits are configuration, not state, so they are
/// not encoded.
#[derive(bincode::Encode, bincode::Decode)]
struct Wire {
    version: u8,
    first_index: u64,
    records: Vec<OutboxRecord>,
    /// Ascending indices of held records with a result.
    results: Vec<u64>,
    /// The worker registry, keys ascending.
    workers: Vec<(WorkerKey, Grant)>,
    /// The owner of each record, in record order (as many as records).
    owners: Vec<Principal>,
}

/// Layout 5 (frozen): [`Wire`] with owners named by 64-bit ids. Read and migrated (client
/// owners become [`Principal::LegacyClient`]), never written.
#[derive(bincode::Encode, bincode::Decode)]
struct WireV5 {
    version: u8,
    first_index: u64,
    records: Vec<OutboxRecord>,
    results: Vec<u64>,
    workers: Vec<(WorkerKey, Grant)>,
    owners: Vec<PrincipalV1>,
}

impl From<WireV5> for Wire {
    fn from(v5: WireV5) -> Self {
        Self {
            version: v5.version,
            first_index: v5.first_index,
            records: v5.records,
            results: v5.results,
            workers: v5.workers,
            owners: v5.owners.into_iter().map(Principal::from).collect(),
        }
    }
}

/// Layout 4: [`Wire`] without the owners. Read and migrated (every record the host's), never
/// written.
#[derive(bincode::Encode, bincode::Decode)]
struct WireV4 {
    version: u8,
    first_index: u64,
    records: Vec<OutboxRecord>,
    results: Vec<u64>,
    workers: Vec<(WorkerKey, Grant)>,
}

impl From<WireV4> for Wire {
    fn from(v4: WireV4) -> Self {
        Self {
            version: v4.version,
            owners: vec![Principal::Host; v4.records.len()],
            first_index: v4.first_index,
            records: v4.records,
            results: v4.results,
            workers: v4.workers,
        }
    }
}

/// Layout 3: [`Wire`] without the worker registry. Read and migrated, never written.
#[derive(bincode::Encode, bincode::Decode)]
struct WireV3 {
    version: u8,
    first_index: u64,
    records: Vec<OutboxRecord>,
    results: Vec<u64>,
}

impl From<WireV3> for Wire {
    fn from(v3: WireV3) -> Self {
        Self {
            version: v3.version,
            owners: vec![Principal::Host; v3.records.len()],
            first_index: v3.first_index,
            records: v3.records,
            results: v3.results,
            workers: Vec::new(),
        }
    }
}

/// Decodes any readable layout: the version byte (the first byte of every encoding) picks the
/// shape.
fn decode_wire<E>(
    bytes: &[u8],
    v6: impl Fn(&[u8]) -> Result<Wire, E>,
    v5: impl Fn(&[u8]) -> Result<WireV5, E>,
    v4: impl Fn(&[u8]) -> Result<WireV4, E>,
    v3: impl Fn(&[u8]) -> Result<WireV3, E>,
) -> Result<Wire, OutboxError>
where
    OutboxError: From<E>,
{
    match bytes.first() {
        Some(&FORMAT_V3) => {
            tracing::info!(
                "outbox layout 3 read: migrating to layout 6 (no worker keys, records the host's)"
            );
            Ok(v3(bytes)?.into())
        }
        Some(&FORMAT_V4) => {
            tracing::info!("outbox layout 4 read: migrating to layout 6 (records the host's)");
            Ok(v4(bytes)?.into())
        }
        Some(&FORMAT_V5) => {
            tracing::info!(
                "outbox layout 5 read: migrating to layout 6 (client owners of 64-bit ids become legacy owners)"
            );
            Ok(v5(bytes)?.into())
        }
        Some(&FORMAT_VERSION) | None => Ok(v6(bytes)?),
        Some(&found) => Err(CodecError::Version {
            found,
            expected: FORMAT_VERSION,
        }
        .into()),
    }
}

impl Outbox {
    /// An empty outbox whose first record will get index 1.
    pub fn new(limits: OutboxLimits) -> Self {
        Self {
            limits,
            first_index: 1,
            records: VecDeque::new(),
            total_bytes: 0,
            results: BTreeSet::new(),
            workers: WorkerRegistry::default(),
            owners: VecDeque::new(),
            usage: BTreeMap::new(),
            refused: AtomicU64::new(0),
            quota_refusals: AtomicU64::new(0),
        }
    }

    /// The limits this outbox enforces.
    pub fn limits(&self) -> OutboxLimits {
        self.limits
    }

    /// How many records of up to `record_bytes` bytes each ([`OutboxRecord::size_bytes`])
    /// [`Outbox::append`] would take now, one after the other: free record slots, room for the
    /// bytes, an unexhausted index space; 0 when one such record is over the record limit. The
    /// schedule book asks this before a handler runs, so that no run's emit meets a full
    /// outbox (see `docs/outbox.md`, "Capacity").
    pub fn room_for(&self, record_bytes: usize) -> usize {
        if record_bytes > self.limits.max_record_bytes {
            return 0;
        }
        let slots = self.limits.max_records.saturating_sub(self.records.len());
        let bytes = self
            .limits
            .max_total_bytes
            .saturating_sub(self.held_bytes())
            .checked_div(record_bytes)
            .unwrap_or(usize::MAX);
        // Indices up to u64::MAX - 1 are appendable (`append` keeps u64::MAX unused).
        let indices =
            usize::try_from(u64::MAX.saturating_sub(self.next_index())).unwrap_or(usize::MAX);
        slots.min(bytes).min(indices)
    }

    /// How many runs of `budget` ([`EmitBudget`](super::EmitBudget): records and bytes
    /// together) the outbox would take now, one after the other: free record slots, room for
    /// the bytes, an unexhausted index space (`usize::MAX` for a budget of no records). A run
    /// starts only when this is at least 1 (`docs/outbox.md`, "Capacity").
    pub fn room_for_run(&self, budget: super::EmitBudget) -> usize {
        if budget.records == 0 {
            return usize::MAX;
        }
        let slots = self.limits.max_records.saturating_sub(self.records.len()) / budget.records;
        let bytes = self
            .limits
            .max_total_bytes
            .saturating_sub(self.held_bytes())
            .checked_div(budget.bytes)
            .unwrap_or(usize::MAX);
        let indices = usize::try_from(u64::MAX.saturating_sub(self.next_index()))
            .unwrap_or(usize::MAX)
            / budget.records;
        slots.min(bytes).min(indices)
    }

    /// How many runs of `budget` `owner` may still start within `quota` (`None`: no quota,
    /// for the host and admins: `usize::MAX`), counting its pending records and their bytes
    /// ([`Outbox::owner_usage`]); `usize::MAX` for a budget of no records. The book asks this
    /// before a handler run of `owner`'s schedule, a ledger before `owner`'s request runs
    /// (`docs/outbox.md`, "Quotas"), as [`Outbox::room_for_run`] for the capacity.
    ///
    /// # Errors
    /// [`EmitError::QuotaExceeded`] when not even one run fits: counted
    /// ([`Outbox::quota_refusals`]) and traced.
    pub fn owner_room(
        &self,
        budget: EmitBudget,
        owner: &Principal,
        quota: Option<Quota>,
    ) -> Result<usize, EmitError> {
        let Some(quota) = quota else {
            return Ok(usize::MAX);
        };
        if budget.records == 0 {
            return Ok(usize::MAX);
        }
        let (records, bytes) = self.owner_usage(owner);
        let runs = |left: u64, per_run: usize| {
            left.checked_div(per_run as u64)
                .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let by_records = runs(
            quota.max_outbox_records.saturating_sub(records),
            budget.records,
        );
        let by_bytes = runs(quota.max_outbox_bytes.saturating_sub(bytes), budget.bytes);
        let room = by_records.min(by_bytes);
        if room > 0 {
            return Ok(room);
        }
        let (kind, limit, used) = if by_records == 0 {
            (QuotaKind::OutboxRecords, quota.max_outbox_records, records)
        } else {
            (QuotaKind::OutboxBytes, quota.max_outbox_bytes, bytes)
        };
        self.quota_refusals.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%owner, %kind, limit, used, "outbox quota: no room for the owner's run");
        Err(EmitError::QuotaExceeded {
            owner: *owner,
            kind,
            limit,
        })
    }

    /// Runs and requests refused or held back so far because their owner's outbox quota could
    /// not take their budget ([`Outbox::owner_room`]; a counter for the replica's metrics, not
    /// replicated state).
    pub fn quota_refusals(&self) -> u64 {
        self.quota_refusals.load(Ordering::Relaxed)
    }

    /// `owner`'s pending records and their bytes ([`OutboxRecord::size_bytes`]).
    pub fn owner_usage(&self, owner: &Principal) -> (u64, u64) {
        self.usage.get(owner).copied().unwrap_or((0, 0))
    }

    /// The owner of the held record at `index`.
    pub fn owner_of(&self, index: u64) -> Option<Principal> {
        let offset = index.checked_sub(self.first_index)?;
        self.owners.get(usize::try_from(offset).ok()?).copied()
    }

    fn charge(&mut self, owner: Principal, size_bytes: usize) {
        let u = self.usage.entry(owner).or_insert((0, 0));
        u.0 = u.0.saturating_add(1);
        u.1 = u.1.saturating_add(size_bytes as u64);
    }

    fn release(&mut self, owner: Principal, size_bytes: usize) {
        if let Some(u) = self.usage.get_mut(&owner) {
            u.0 = u.0.saturating_sub(1);
            u.1 = u.1.saturating_sub(size_bytes as u64);
            if u.0 == 0 {
                self.usage.remove(&owner);
            }
        }
    }

    /// Appends `record` owned by the host, returning its index. On error the outbox is
    /// unchanged.
    pub fn append(&mut self, record: OutboxRecord) -> Result<u64, OutboxError> {
        self.append_as(record, Principal::Host)
    }

    /// Appends `record` owned by `owner`, returning its index. On error the outbox is
    /// unchanged. The owner's quota is not checked here: it was, before the run that emitted
    /// the record ([`Outbox::owner_room`]).
    pub fn append_as(
        &mut self,
        record: OutboxRecord,
        owner: Principal,
    ) -> Result<u64, OutboxError> {
        let size_bytes = record.size_bytes();
        if size_bytes > self.limits.max_record_bytes {
            return Err(OutboxError::RecordTooLarge {
                size_bytes,
                max_record_bytes: self.limits.max_record_bytes,
            });
        }
        if self.records.len() >= self.limits.max_records {
            return Err(OutboxError::Full {
                max_records: self.limits.max_records,
            });
        }
        let total_bytes = self.total_bytes.saturating_add(size_bytes);
        let held = total_bytes.saturating_add(self.workers.bytes());
        if held > self.limits.max_total_bytes {
            return Err(OutboxError::TotalTooLarge {
                total_bytes: held,
                max_total_bytes: self.limits.max_total_bytes,
            });
        }
        let index = self.next_index();
        // Keep next_index representable so head() and the consumer's arithmetic never overflow.
        if index == u64::MAX {
            return Err(OutboxError::IndexExhausted);
        }
        self.records.push_back(record);
        self.owners.push_back(owner);
        self.charge(owner, size_bytes);
        self.total_bytes = total_bytes;
        tracing::trace!(index, %owner, "outbox append");
        Ok(index)
    }

    /// The record at `index`, if it was appended and not trimmed.
    pub fn get(&self, index: u64) -> Option<&OutboxRecord> {
        let offset = index.checked_sub(self.first_index)?;
        self.records.get(usize::try_from(offset).ok()?)
    }

    /// Index the next append will get.
    pub fn next_index(&self) -> u64 {
        self.first_index.saturating_add(self.records.len() as u64)
    }

    /// Index of the last record ever appended (0 when nothing was ever appended).
    pub fn head(&self) -> u64 {
        self.next_index() - 1
    }

    /// Index of the oldest record still held (equals [`next_index`](Self::next_index) when empty).
    pub fn first_index(&self) -> u64 {
        self.first_index
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Sum of [`OutboxRecord::size_bytes`] over the held records.
    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// What counts against [`OutboxLimits::max_total_bytes`]: the held records' bytes and the
    /// worker registry's ([`WorkerRegistry::bytes`]).
    pub fn held_bytes(&self) -> usize {
        self.total_bytes.saturating_add(self.workers.bytes())
    }

    /// The replicated worker registry (overrides of [`Policy::worker_keys`]).
    pub fn workers(&self) -> &WorkerRegistry {
        &self.workers
    }

    /// Results refused by [`Outbox::accept_result`] since this outbox was created or loaded
    /// (a counter for the replica's metrics, not replicated state).
    pub fn refused_results(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Applies an admin's worker key request (see [`WorkerKeyRequest`]): only an admin of
    /// `policy` (or the host) may; a registration names a usable ed25519 key and 1 to
    /// [`workers::MAX_HANDLERS_PER_KEY`] distinct handlers, and the registry stays within
    /// [`workers::MAX_WORKER_KEYS`] entries and, with the held records, within
    /// [`OutboxLimits::max_total_bytes`]. On error nothing changes. The caller saves the outbox
    /// after a change (the registry is part of its encoding).
    ///
    /// # Errors
    /// [`OutboxError::WorkerKeysUnauthorized`], [`OutboxError::WorkerKeyInvalid`],
    /// [`OutboxError::TotalTooLarge`].
    pub fn apply_worker_keys(
        &mut self,
        policy: &Policy,
        by: &Principal,
        req: &WorkerKeyRequest,
    ) -> Result<WorkerKeysApplied, OutboxError> {
        let key = req.key();
        if !policy.may_manage_workers(by) {
            tracing::warn!(%by, %key, "worker key request rejected: not an admin");
            return Err(OutboxError::WorkerKeysUnauthorized { by: *by });
        }
        let (grant, registry_bytes, effect) = self.workers.plan(policy, req).map_err(|e| {
            tracing::warn!(%by, %key, error = %e, "worker key request rejected");
            OutboxError::WorkerKeyInvalid(e)
        })?;
        let held = self.total_bytes.saturating_add(registry_bytes);
        if held > self.limits.max_total_bytes {
            tracing::warn!(%by, %key, held, "worker key request rejected: outbox bytes");
            return Err(OutboxError::TotalTooLarge {
                total_bytes: held,
                max_total_bytes: self.limits.max_total_bytes,
            });
        }
        self.workers.set(key, grant);
        tracing::info!(%by, %key, ?effect, "worker key request applied");
        Ok(effect)
    }

    /// Drops every record whose index is below `index`; returns how many were dropped.
    ///
    /// Trimming past the head is clamped: indices are never reused.
    pub fn trim_below(&mut self, index: u64) -> usize {
        let upto = index.min(self.next_index());
        let mut dropped = 0;
        while self.first_index < upto {
            if let Some(r) = self.records.pop_front() {
                self.total_bytes = self.total_bytes.saturating_sub(r.size_bytes());
                if let Some(owner) = self.owners.pop_front() {
                    self.release(owner, r.size_bytes());
                }
            }
            self.results.remove(&self.first_index);
            self.first_index += 1;
            dropped += 1;
        }
        if dropped > 0 {
            tracing::debug!(dropped, first_index = self.first_index, "outbox trimmed");
        }
        dropped
    }

    /// Accepts a consumer's progress report: every record up to `upto` is delivered, so the
    /// records up to it are trimmed; returns how many went. This is the entry point for
    /// progress that arrives in a request: only the [`Policy::outbox_consumer`] (or the host)
    /// may report, and never past [`head`](Self::head) (a record not yet appended cannot have
    /// been delivered). Progress at or below what was already trimmed trims nothing.
    ///
    /// # Errors
    /// [`OutboxError::Unauthorized`], [`OutboxError::ProgressAboveHead`]; the outbox is then
    /// unchanged.
    pub fn accept_progress(
        &mut self,
        policy: &Policy,
        by: &Principal,
        upto: u64,
    ) -> Result<usize, OutboxError> {
        if !policy.may_report_progress(by) {
            tracing::warn!(%by, upto, "outbox progress rejected: not the consumer");
            return Err(OutboxError::Unauthorized { by: *by });
        }
        let head = self.head();
        if upto > head {
            tracing::warn!(%by, upto, head, "outbox progress rejected: past the head");
            return Err(OutboxError::ProgressAboveHead { upto, head });
        }
        Ok(self.trim_below(upto.saturating_add(1)))
    }

    /// Applies a result for a held record once (see [`OutboxResult`]): only the policy's
    /// outbox consumer (or the host) may report, the outcome is at most
    /// [`OutboxLimits::max_record_bytes`], and the result must name an appended index and the id
    /// of the record there. A worker's answer must carry a proof ([`OutboxResult::proof`]) by a
    /// key that may answer for the record's handler (the policy's genesis keys overridden by
    /// [`Outbox::workers`]), signed over [`workers::answer_signing_bytes`] with the policy's
    /// [`chain_id`](Policy::chain_id); a dead letter is the consumer's own word and needs none,
    /// and the host may report unsigned answers. Returns [`ResultApplied::Applied`] the first
    /// time (the caller runs its reaction then, and only then), [`ResultApplied::Duplicate`] for
    /// a record that already has a result and [`ResultApplied::Trimmed`] for a record already
    /// trimmed (both no-ops). Every refusal is counted ([`Outbox::refused_results`]) and traced.
    ///
    /// # Errors
    /// [`OutboxError::ResultUnauthorized`], [`OutboxError::ResultTooLarge`],
    /// [`OutboxError::ResultUnknown`], [`OutboxError::ResultMismatch`],
    /// [`OutboxError::ResultUnsigned`], [`OutboxError::ResultWorkerUnknown`],
    /// [`OutboxError::ResultBadSignature`]; the outbox is then unchanged.
    pub fn accept_result(
        &mut self,
        policy: &Policy,
        by: &Principal,
        result: &OutboxResult,
    ) -> Result<ResultApplied, OutboxError> {
        let r = self.accept_result_inner(policy, by, result);
        if r.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn accept_result_inner(
        &mut self,
        policy: &Policy,
        by: &Principal,
        result: &OutboxResult,
    ) -> Result<ResultApplied, OutboxError> {
        let index = result.index;
        if !policy.may_report_progress(by) {
            tracing::warn!(%by, index, id = %result.id, "outbox result rejected: not the consumer");
            return Err(OutboxError::ResultUnauthorized { by: *by });
        }
        let size_bytes = result.outcome.size_bytes();
        if size_bytes > self.limits.max_record_bytes {
            tracing::warn!(%by, index, id = %result.id, size_bytes, "outbox result rejected: too large");
            return Err(OutboxError::ResultTooLarge {
                size_bytes,
                max_bytes: self.limits.max_record_bytes,
            });
        }
        let head = self.head();
        if index == 0 || index > head {
            tracing::warn!(%by, index, head, id = %result.id, "outbox result rejected: unknown index");
            return Err(OutboxError::ResultUnknown { index, head });
        }
        let Some(record) = self.get(index) else {
            tracing::debug!(index, id = %result.id, "outbox result for a trimmed record ignored");
            return Ok(ResultApplied::Trimmed);
        };
        if record.id != result.id {
            tracing::warn!(%by, index, claimed = %result.id, actual = %record.id, "outbox result rejected: id mismatch");
            return Err(OutboxError::ResultMismatch {
                index,
                claimed: result.id,
                actual: record.id,
            });
        }
        if let (ResultOutcome::Answer(body), Principal::Client(_)) = (&result.outcome, by) {
            let Some(proof) = &result.proof else {
                tracing::warn!(%by, index, id = %result.id, "outbox result rejected: unsigned answer");
                return Err(OutboxError::ResultUnsigned { index });
            };
            if !self.workers.may_answer(policy, &proof.key, &record.handler) {
                tracing::warn!(%by, index, id = %result.id, key = %proof.key, handler = %record.handler, "outbox result rejected: worker key not registered for the handler");
                return Err(OutboxError::ResultWorkerUnknown {
                    index,
                    key: proof.key,
                    handler: record.handler.clone(),
                });
            }
            if !workers::verify_answer(proof, &policy.chain_id, index, record, body) {
                tracing::warn!(%by, index, id = %result.id, key = %proof.key, "outbox result rejected: bad worker signature");
                return Err(OutboxError::ResultBadSignature {
                    index,
                    key: proof.key,
                });
            }
        }
        if !self.results.insert(index) {
            tracing::debug!(index, id = %result.id, "duplicate outbox result ignored");
            return Ok(ResultApplied::Duplicate);
        }
        tracing::debug!(index, id = %result.id, "outbox result applied");
        Ok(ResultApplied::Applied)
    }

    /// Whether the held record at `index` has a result applied.
    pub fn has_result(&self, index: u64) -> bool {
        self.results.contains(&index)
    }

    /// Number of held records with a result applied.
    pub fn results_len(&self) -> usize {
        self.results.len()
    }

    /// Held records with their indices, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &OutboxRecord)> {
        (self.first_index..).zip(self.records.iter())
    }

    /// The canonical encoding: identical bytes on every replica holding the same outbox.
    pub fn encode(&self) -> Result<Vec<u8>, OutboxError> {
        // The wire struct borrows nothing so it can derive Decode; the clone is the price of
        // keeping one derive for both directions (encoding happens at checkpoints only).
        Ok(codec::encode(&self.to_wire())?)
    }

    /// Writes the outbox into the pages of `range` through [`crate::codec`] (kind
    /// [`BlobKind::Outbox`](crate::codec::BlobKind::Outbox)), clearing the range's pages it does
    /// not need. The size is checked before any page is written: an outbox larger than the
    /// range's capacity is [`OutboxError::Pages`] (`TooLarge`) and no page changes. The whole
    /// outbox is rewritten (O(held bytes)): call it after a tick or request that appended or
    /// trimmed, not on every tick.
    ///
    /// # Errors
    /// [`OutboxError::Pages`].
    pub fn save(
        &self,
        pages: &mut dyn crate::pages::ReservedPages,
        range: crate::pages::PageRange,
    ) -> Result<(), OutboxError> {
        crate::codec::save(
            pages,
            range,
            crate::codec::BlobKind::Outbox,
            &self.to_wire(),
        )?;
        Ok(())
    }

    /// Reads the outbox stored in `range` by [`save`](Self::save) (an empty outbox when nothing
    /// is stored), checking it against `limits` like [`decode`](Self::decode). Every length is
    /// checked against the range before anything is allocated.
    ///
    /// # Errors
    /// [`OutboxError::Pages`] (pages failing their checks, another kind of record, a blob that
    /// does not decode), [`OutboxError::Codec`] (`Version`) or [`OutboxError::Invalid`].
    pub fn load(
        pages: &dyn crate::pages::ReservedPages,
        range: crate::pages::PageRange,
        limits: OutboxLimits,
    ) -> Result<Self, OutboxError> {
        let blob = match crate::codec::load_blob(pages, range, crate::codec::BlobKind::Outbox) {
            Ok(None) => return Ok(Self::new(limits)),
            Ok(Some(blob)) => blob,
            Err(e) => {
                tracing::warn!(error = %e, "stored outbox rejected");
                return Err(e.into());
            }
        };
        let wire = decode_wire(
            &blob,
            crate::codec::from_blob::<Wire>,
            crate::codec::from_blob::<WireV5>,
            crate::codec::from_blob::<WireV4>,
            crate::codec::from_blob::<WireV3>,
        )
        .inspect_err(|e| tracing::warn!(error = %e, "stored outbox rejected"))?;
        Self::from_wire(wire, limits)
    }

    fn to_wire(&self) -> Wire {
        Wire {
            version: FORMAT_VERSION,
            first_index: self.first_index,
            records: self.records.iter().cloned().collect(),
            results: self.results.iter().copied().collect(),
            workers: self.workers.to_wire(),
            owners: self.owners.iter().copied().collect(),
        }
    }

    /// Decodes bytes from [`encode`](Self::encode) (layout 6, or layout 5, 4 or 3 migrated),
    /// checking them against `limits`.
    pub fn decode(bytes: &[u8], limits: OutboxLimits) -> Result<Self, OutboxError> {
        let wire = decode_wire(
            bytes,
            codec::decode::<Wire>,
            codec::decode::<WireV5>,
            codec::decode::<WireV4>,
            codec::decode::<WireV3>,
        )?;
        Self::from_wire(wire, limits)
    }

    /// Checks a decoded outbox against its invariants and `limits`.
    fn from_wire(wire: Wire, limits: OutboxLimits) -> Result<Self, OutboxError> {
        let migrated = (wire.version == FORMAT_V3 && wire.workers.is_empty())
            || wire.version == FORMAT_V4
            || wire.version == FORMAT_V5;
        if wire.version != FORMAT_VERSION && !migrated {
            return Err(CodecError::Version {
                found: wire.version,
                expected: FORMAT_VERSION,
            }
            .into());
        }
        if wire.first_index == 0 {
            return Err(OutboxError::Invalid(
                "first index 0 (indices start at 1)".into(),
            ));
        }
        if wire.records.len() > limits.max_records {
            return Err(OutboxError::Invalid(format!(
                "{} records over the limit of {}",
                wire.records.len(),
                limits.max_records
            )));
        }
        if wire
            .first_index
            .checked_add(wire.records.len() as u64)
            .is_none()
        {
            return Err(OutboxError::Invalid("index range overflows".into()));
        }
        if wire.owners.len() != wire.records.len() {
            return Err(OutboxError::Invalid(format!(
                "{} owners for {} records",
                wire.owners.len(),
                wire.records.len()
            )));
        }
        let mut total_bytes = 0usize;
        for r in &wire.records {
            let size_bytes = r.size_bytes();
            if size_bytes > limits.max_record_bytes {
                return Err(OutboxError::Invalid(format!(
                    "a record of {size_bytes} bytes exceeds the {}-byte limit",
                    limits.max_record_bytes
                )));
            }
            total_bytes = total_bytes.saturating_add(size_bytes);
        }
        let workers = WorkerRegistry::from_wire(wire.workers).map_err(OutboxError::Invalid)?;
        let held = total_bytes.saturating_add(workers.bytes());
        if held > limits.max_total_bytes {
            return Err(OutboxError::Invalid(format!(
                "{held} bytes over the limit of {}",
                limits.max_total_bytes
            )));
        }
        let next_index = wire.first_index + wire.records.len() as u64;
        if wire.results.windows(2).any(|w| w[0] >= w[1])
            || wire
                .results
                .iter()
                .any(|&i| i < wire.first_index || i >= next_index)
        {
            return Err(OutboxError::Invalid(
                "result marks out of order or outside the held records".into(),
            ));
        }
        let mut ob = Self {
            limits,
            first_index: wire.first_index,
            records: wire.records.into(),
            total_bytes,
            results: wire.results.into_iter().collect(),
            workers,
            owners: wire.owners.into(),
            usage: BTreeMap::new(),
            refused: AtomicU64::new(0),
            quota_refusals: AtomicU64::new(0),
        };
        let charges: Vec<(Principal, usize)> = ob
            .owners
            .iter()
            .zip(&ob.records)
            .map(|(o, r)| (*o, r.size_bytes()))
            .collect();
        for (owner, size_bytes) in charges {
            ob.charge(owner, size_bytes);
        }
        Ok(ob)
    }
}
