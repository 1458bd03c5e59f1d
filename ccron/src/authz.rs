//! Who may do what: the [`Principal`] behind a request and the [`Policy`] that decides.
//!
//! Every change to replicated ccron state that a request asks for is made on behalf of a
//! principal, which the host derives from the *authenticated* request (in a BFT ledger: the
//! client id of the signed request, never a field of the payload):
//!
//! * [`Principal::Client`]: a client request.
//! * [`Principal::Host`]: the host itself, acting on configuration that is identical on every
//!   replica (set-up at start, its own internal clients, tests). Always authorized. A host must
//!   never map a client request to it.
//!
//! Requests queued by a schedule's handler inside execution act **as the owner of the schedule
//! the handler runs for**: a handler can do nothing its schedule's owner could not do by a
//! request of its own, and a schedule it creates belongs to the same owner.
//!
//! The [`Policy`] (configuration, identical on every replica, folded into the host's state
//! digest through [`Policy::digest`] so replicas configured differently visibly diverge):
//!
//! | action | who may |
//! | --- | --- |
//! | create a schedule (`Create`, an `Upsert` of a free key) | anyone when [`Policy::anyone_may_create`], else admins |
//! | replace, pause, resume, cancel a schedule (`Upsert` of a held key too) | its owner, admins |
//! | install or replace zone rules | admins |
//! | report outbox progress (trim the outbox) | the [`Policy::outbox_consumer`] |
//! | report outbox results | the [`Policy::outbox_consumer`]; an answer must also be signed by a worker key registered for the record's handler |
//! | register or revoke worker keys ([`WorkerKeyRequest`](crate::outbox::WorkerKeyRequest)) | admins |
//!
//! Worker keys: the ed25519 keys whose signatures make a worker's answer believable
//! (`docs/outbox.md`, "Authenticated results"). [`Policy::worker_keys`] are the keys known at
//! genesis (configuration); the outbox's replicated registry adds, replaces and revokes keys on
//! top of them through admin requests. Every answer is bound to [`Policy::chain_id`], so an
//! answer signed for another chain is refused.
//!
//! Quotas ([`Quota`], [`Policy::quota`]): a client that is not an admin may hold at most
//! `max_schedules` schedules of at most `max_schedule_bytes` stored bytes in all (each
//! schedule counted at its largest stored size), so one client cannot fill a shared book and
//! refuse everyone after it; a request past its owner's quota is refused
//! ([`crate::schedule::ScheduleError::QuotaExceeded`]), counted and traced, and changes
//! nothing. Likewise in the ledger's one outbox: at most `max_outbox_records` pending records
//! of at most `max_outbox_bytes` bytes per owner (a record's owner is the owner of the
//! schedule whose handler emitted it, or the client whose request emitted it; cron table
//! records are the host's). The check sits before the run, like the outbox's capacity check:
//! an owner's schedule waits, still due, while its owner cannot take a run's emit budget, and a
//! request's emits are refused ([`crate::outbox::EmitError::QuotaExceeded`], voiding all the
//! request's effects); counted ([`crate::outbox::Outbox::quota_refusals`]) and traced
//! (`docs/outbox.md`, "Quotas"). The default policy has the default quota (1,000 schedules,
//! 4 MiB; 1,024 pending outbox records, 4 MiB); admins and the host have none.
//!
//! [`Principal::Host`] may do all of it. A denied request is a typed error
//! ([`crate::schedule::ScheduleError::Unauthorized`], [`crate::outbox::OutboxError::Unauthorized`])
//! and changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sha2::{Digest, Sha256};

use crate::outbox::WorkerKey;

/// A client's identity as the engine authenticated it: 32 bytes, the SHA-256 of the client's
/// public key (each engine hashes its own domain tag and the key: ccron-node
/// `SHA-256("ccron-malachite/client-id" || key)`; sim-bft a deterministic id per client).
///
/// A 256-bit hash rather than the key itself: one fixed width (32 bytes, `Copy`, fixed-size in
/// every encoding) whatever the signature scheme and its key length, and no way to name a
/// principal that is not the hash of some key without breaking SHA-256; 128-bit collision
/// strength where the 64-bit ids before it (layouts up to book 9, outbox 5, executed requests
/// 4) fell to about 2^47 key generations against 10^5 clients. Those old ids live on only as
/// [`Principal::LegacyClient`] and legacy request watermarks, matched by
/// [`ClientId::legacy_prefix`].
///
/// `Display` (and serde) is the full lowercase hex; [`ClientId::short`] the first 8 bytes' hex,
/// for logs. Persisted through the one codec ([`crate::codec`]) as its 32 bytes.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, bincode::Encode, bincode::Decode,
)]
pub struct ClientId(pub [u8; 32]);

impl serde::Serialize for ClientId {
    /// As its `Display`: 64 hex digits.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for ClientId {
    /// From 64 hex digits.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl ClientId {
    /// The largest id (all bytes `0xff`): the largest encoded form a bound must cover.
    pub const MAX: ClientId = ClientId([0xff; 32]);

    /// The id of these 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The id of a client holding `key` under `domain`: `SHA-256(domain || key)`.
    pub fn of_key(domain: &[u8], key: &[u8]) -> Self {
        Self(
            Sha256::new()
                .chain_update(domain)
                .chain_update(key)
                .finalize()
                .into(),
        )
    }

    /// A deterministic id for test and simulated client number `n`
    /// (`SHA-256("ccron/client-index" || n as 8 bytes LE)`): distinct for distinct `n`, and
    /// not related to any key. Engines that authenticate clients by key use
    /// [`ClientId::of_key`].
    pub fn from_index(n: u64) -> Self {
        Self::of_key(b"ccron/client-index", &n.to_le_bytes())
    }

    /// Its 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64-bit id the same key had before ids were 256 bits: the first 8 bytes,
    /// little-endian (what ccron-node's `client_id` returned). A legacy owner or watermark is
    /// matched by it ([`Principal::LegacyClient`]).
    pub fn legacy_prefix(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_le_bytes(b)
    }

    /// The first 8 bytes in hex, for logs.
    pub fn short(&self) -> String {
        hex(&self.0[..8])
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientId({})", self.short())
    }
}

impl std::str::FromStr for ClientId {
    type Err = String;

    /// 64 hex digits.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.len() != 64 || !s.is_ascii() {
            return Err(format!("a client id is 64 hex digits, got {s:?}"));
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
                .map_err(|e| format!("a client id is 64 hex digits: {e}"))?;
        }
        Ok(Self(out))
    }
}

fn hex(b: &[u8]) -> String {
    use fmt::Write as _;
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// On whose behalf a request runs (see the module documentation).
///
/// The variant order is part of every persisted layout holding a principal (bincode's variant
/// index): `Host` is 0 and `LegacyClient` 1, exactly the encoding of the 64-bit `Client(u64)`
/// of the layouts before 256-bit ids ([`PrincipalV1`]), so old bytes read as the legacy form.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, bincode::Encode, bincode::Decode,
)]
pub enum Principal {
    /// The host itself, on configuration identical on every replica: always authorized.
    Host,
    /// A client named by the 64-bit id of the layouts before 256-bit ids (an owner migrated
    /// from book layout 9 or outbox layout 5 and before). It carries only the old 64-bit
    /// strength: an authenticated client whose [`ClientId::legacy_prefix`] equals it may
    /// mutate what it owns (so rightful owners keep access across the upgrade; the book then
    /// re-owns the schedule to the full id), but it is never an admin or the outbox consumer,
    /// and no request ever runs as it (only a legacy-owned schedule's handler does).
    LegacyClient(u64),
    /// An authenticated client, by its 256-bit id.
    Client(ClientId),
}

impl Principal {
    /// Whether `self`, a legacy owner, is claimed by the authenticated `by`: `by` is a client
    /// whose id starts with the legacy id ([`ClientId::legacy_prefix`]).
    pub fn legacy_matches(&self, by: &Principal) -> bool {
        match (self, by) {
            (Principal::LegacyClient(old), Principal::Client(id)) => id.legacy_prefix() == *old,
            _ => false,
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Host => f.write_str("host"),
            Self::LegacyClient(id) => write!(f, "legacy client {id}"),
            Self::Client(id) => write!(f, "client {}", id.short()),
        }
    }
}

/// The principal of the layouts before 256-bit ids (book layouts 3 to 9, outbox layout 5):
/// a frozen copy of its encoding, read by their migrations, never written. Its clients
/// become [`Principal::LegacyClient`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum PrincipalV1 {
    /// The host.
    Host,
    /// A client by its 64-bit id.
    Client(u64),
}

impl From<PrincipalV1> for Principal {
    fn from(p: PrincipalV1) -> Self {
        match p {
            PrincipalV1::Host => Principal::Host,
            PrincipalV1::Client(id) => Principal::LegacyClient(id),
        }
    }
}

/// What a principal asks to do (named in denials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Create a schedule.
    Create,
    /// Replace a schedule's definition (also an upsert of a held key).
    Replace,
    /// Pause a schedule.
    Pause,
    /// Resume a schedule.
    Resume,
    /// Cancel a schedule.
    Cancel,
    /// Install or replace zone rules.
    InstallZone,
    /// Report outbox progress (trim the outbox).
    OutboxProgress,
    /// Register or revoke a worker key.
    ManageWorkerKeys,
    /// Re-target parked schedules to another handler (their owner or an admin).
    Retarget,
    /// Re-drive or discard a schedule's dead runs (its owner or an admin).
    DeadLetter,
    /// Trigger a schedule now or backfill a past window (its owner or an admin).
    Trigger,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Create => "create a schedule",
            Self::Replace => "replace this schedule",
            Self::Pause => "pause this schedule",
            Self::Resume => "resume this schedule",
            Self::Cancel => "cancel this schedule",
            Self::InstallZone => "install zone rules",
            Self::OutboxProgress => "report outbox progress",
            Self::ManageWorkerKeys => "register or revoke worker keys",
            Self::Retarget => "re-target these parked schedules",
            Self::DeadLetter => "re-drive or discard this schedule's dead runs",
            Self::Trigger => "trigger or backfill this schedule",
        })
    }
}

/// Per-owner quotas of a schedule book and its outbox (configuration, part of the [`Policy`];
/// see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Schedules one owner may hold.
    pub max_schedules: u64,
    /// Stored bytes one owner's schedules may take, each counted at its largest stored size
    /// (the bound the book's admission places it by).
    pub max_schedule_bytes: u64,
    /// Outbox records one owner may have pending (appended and not yet trimmed): those its
    /// schedules' handlers emitted and those its own requests emitted.
    pub max_outbox_records: u64,
    /// Bytes ([`OutboxRecord::size_bytes`](crate::outbox::OutboxRecord::size_bytes)) one
    /// owner's pending outbox records may take.
    pub max_outbox_bytes: u64,
}

impl Quota {
    /// No quota.
    pub const UNLIMITED: Quota = Quota {
        max_schedules: u64::MAX,
        max_schedule_bytes: u64::MAX,
        max_outbox_records: u64::MAX,
        max_outbox_bytes: u64::MAX,
    };

    /// The default outbox part: 1,024 pending records and 4 MiB per owner (a quarter of the
    /// default outbox's 4,096 records and 16 MiB, so at least four owners always fit).
    pub const DEFAULT_OUTBOX_RECORDS: u64 = 1_024;
    /// See [`Quota::DEFAULT_OUTBOX_RECORDS`].
    pub const DEFAULT_OUTBOX_BYTES: u64 = 4 << 20;

    /// With `records` pending outbox records and `bytes` bytes per owner.
    pub const fn with_outbox(mut self, records: u64, bytes: u64) -> Self {
        self.max_outbox_records = records;
        self.max_outbox_bytes = bytes;
        self
    }

    /// The outbox part a policy digest leaves out: the one that comes with the schedule part
    /// (unlimited with an unlimited schedule part, the default otherwise), so that the digests
    /// of policies configured before outbox quotas existed do not change.
    fn implied_outbox(&self) -> (u64, u64) {
        if (self.max_schedules, self.max_schedule_bytes) == (u64::MAX, u64::MAX) {
            (u64::MAX, u64::MAX)
        } else {
            (Self::DEFAULT_OUTBOX_RECORDS, Self::DEFAULT_OUTBOX_BYTES)
        }
    }
}

impl Default for Quota {
    /// 1,000 schedules and 4 MiB per owner; 1,024 pending outbox records and 4 MiB.
    fn default() -> Self {
        Self {
            max_schedules: 1_000,
            max_schedule_bytes: 4 << 20,
            max_outbox_records: Self::DEFAULT_OUTBOX_RECORDS,
            max_outbox_bytes: Self::DEFAULT_OUTBOX_BYTES,
        }
    }
}

/// What a quota counts (named in refusals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaKind {
    /// Schedules held.
    Schedules,
    /// Stored schedule bytes.
    ScheduleBytes,
    /// Pending outbox records.
    OutboxRecords,
    /// Bytes of pending outbox records.
    OutboxBytes,
}

impl fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Schedules => "schedules",
            Self::ScheduleBytes => "stored schedule bytes",
            Self::OutboxRecords => "pending outbox records",
            Self::OutboxBytes => "bytes of pending outbox records",
        })
    }
}

/// Who may mutate what (configuration, identical on every replica; see the module
/// documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Clients that may mutate every schedule and install zones.
    pub admins: BTreeSet<ClientId>,
    /// The client whose outbox progress reports are accepted (`None`: only the host's).
    pub outbox_consumer: Option<ClientId>,
    /// Whether any client may create schedules (otherwise only admins).
    pub anyone_may_create: bool,
    /// The chain every worker answer is bound to (signed over; empty by default). Workers and
    /// the dispatcher are configured with the same bytes.
    pub chain_id: Vec<u8>,
    /// Worker keys known at genesis: each key and the handlers it may answer for. The outbox's
    /// replicated registry overrides them key by key (a registration replaces the handlers, a
    /// revocation removes the key), see [`crate::outbox::WorkerKeyRequest`].
    pub worker_keys: BTreeMap<WorkerKey, BTreeSet<String>>,
    /// What one client that is not an admin may hold ([`Quota::default`] by default).
    pub quota: Quota,
}

impl Default for Policy {
    /// Anyone may create schedules (and mutate only their own) within the default per-owner
    /// [`Quota`], no admins (zones only by the host), no outbox consumer (progress only from
    /// the host).
    fn default() -> Self {
        Self {
            admins: BTreeSet::new(),
            outbox_consumer: None,
            anyone_may_create: true,
            chain_id: Vec::new(),
            worker_keys: BTreeMap::new(),
            quota: Quota::default(),
        }
    }
}

impl Policy {
    /// With `client` as an admin.
    pub fn with_admin(mut self, client: ClientId) -> Self {
        self.admins.insert(client);
        self
    }

    /// With `quota` for every client that is not an admin ([`Quota::UNLIMITED`]: none).
    pub fn with_quota(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self
    }

    /// The quota that binds `owner`: none for the host and admins.
    pub fn quota_for(&self, owner: &Principal) -> Option<Quota> {
        (!self.is_admin(owner)).then_some(self.quota)
    }

    /// With `client` as the outbox consumer.
    pub fn with_outbox_consumer(mut self, client: ClientId) -> Self {
        self.outbox_consumer = Some(client);
        self
    }

    /// With or without creation open to every client.
    pub fn with_anyone_may_create(mut self, open: bool) -> Self {
        self.anyone_may_create = open;
        self
    }

    /// With `chain_id` as the chain worker answers are bound to.
    pub fn with_chain_id(mut self, chain_id: impl Into<Vec<u8>>) -> Self {
        self.chain_id = chain_id.into();
        self
    }

    /// With `key` registered at genesis for `handlers` (added to the handlers it already has).
    pub fn with_worker_key<H: Into<String>>(
        mut self,
        key: WorkerKey,
        handlers: impl IntoIterator<Item = H>,
    ) -> Self {
        self.worker_keys
            .entry(key)
            .or_default()
            .extend(handlers.into_iter().map(Into::into));
        self
    }

    /// Whether `by` may register or revoke worker keys (admins; the host is one).
    pub fn may_manage_workers(&self, by: &Principal) -> bool {
        self.is_admin(by)
    }

    /// Whether `by` is an admin (the host is).
    pub fn is_admin(&self, by: &Principal) -> bool {
        match by {
            Principal::Host => true,
            Principal::Client(id) => self.admins.contains(id),
            // Only the old 64-bit strength: never an admin (module documentation).
            Principal::LegacyClient(_) => false,
        }
    }

    /// Whether `by` may create a schedule.
    pub fn may_create(&self, by: &Principal) -> bool {
        self.anyone_may_create || self.is_admin(by)
    }

    /// Whether `by` may change or remove a schedule owned by `owner`: its owner, an admin, or
    /// for a legacy owner ([`Principal::LegacyClient`]) a client whose id starts with it.
    pub fn may_mutate(&self, by: &Principal, owner: &Principal) -> bool {
        by == owner || owner.legacy_matches(by) || self.is_admin(by)
    }

    /// Whether `by` may install or replace zone rules.
    pub fn may_install_zone(&self, by: &Principal) -> bool {
        self.is_admin(by)
    }

    /// Whether `by` may report outbox progress.
    pub fn may_report_progress(&self, by: &Principal) -> bool {
        match by {
            Principal::Host => true,
            Principal::Client(id) => self.outbox_consumer == Some(*id),
            Principal::LegacyClient(_) => false,
        }
    }

    /// A digest of the policy, for a host's setup or state digest.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"ccron-policy-v1");
        h.update((self.admins.len() as u64).to_le_bytes());
        // 256-bit ids: 32 bytes each (the digest of a policy with 64-bit admins or consumer
        // hashed 8; one without either is unchanged).
        for a in &self.admins {
            h.update(a.0);
        }
        match self.outbox_consumer {
            None => h.update([0]),
            Some(c) => {
                h.update([1]);
                h.update(c.0);
            }
        }
        h.update([u8::from(self.anyone_may_create)]);
        // Added with worker keys: hashed only when set, so the digest of a policy without
        // them is the one it always had.
        if !self.chain_id.is_empty() || !self.worker_keys.is_empty() {
            h.update(b"ccron-policy-workers-v1");
            h.update((self.chain_id.len() as u64).to_le_bytes());
            h.update(&self.chain_id);
            h.update((self.worker_keys.len() as u64).to_le_bytes());
            for (key, handlers) in &self.worker_keys {
                h.update(key.0);
                h.update((handlers.len() as u64).to_le_bytes());
                for handler in handlers {
                    h.update((handler.len() as u64).to_le_bytes());
                    h.update(handler.as_bytes());
                }
            }
        }
        // Added with quotas: hashed only when not unlimited (an unlimited policy keeps the
        // digest it always had; the default one, now with a quota, has a new one).
        let q = &self.quota;
        if (q.max_schedules, q.max_schedule_bytes) != (u64::MAX, u64::MAX) {
            h.update(b"ccron-policy-quota-v1");
            h.update(q.max_schedules.to_le_bytes());
            h.update(q.max_schedule_bytes.to_le_bytes());
        }
        // Added with outbox quotas: hashed only when not the part implied by the schedule part
        // (unlimited with unlimited, the default with any other), so every policy configured
        // before keeps its digest; the encoding stays injective (absent means "implied").
        if (q.max_outbox_records, q.max_outbox_bytes) != q.implied_outbox() {
            h.update(b"ccron-policy-outbox-quota-v1");
            h.update(q.max_outbox_records.to_le_bytes());
            h.update(q.max_outbox_bytes.to_le_bytes());
        }
        h.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u64) -> ClientId {
        ClientId::from_index(n)
    }

    #[test]
    fn policy_decides_by_role() {
        let p = Policy::default()
            .with_admin(c(9))
            .with_outbox_consumer(c(7))
            .with_anyone_may_create(false);
        let (owner, stranger, admin) = (
            Principal::Client(c(1)),
            Principal::Client(c(2)),
            Principal::Client(c(9)),
        );
        assert!(p.may_mutate(&owner, &owner));
        assert!(!p.may_mutate(&stranger, &owner));
        assert!(p.may_mutate(&admin, &owner));
        assert!(p.may_mutate(&Principal::Host, &owner));
        assert!(!p.may_mutate(&owner, &Principal::Host));
        assert!(!p.may_create(&owner));
        assert!(p.may_create(&admin));
        assert!(Policy::default().may_create(&owner));
        assert!(!p.may_install_zone(&owner));
        assert!(p.may_install_zone(&admin));
        assert!(p.may_report_progress(&Principal::Client(c(7))));
        assert!(!p.may_report_progress(&admin));
        assert!(!Policy::default().may_report_progress(&Principal::Client(c(0))));
        assert_eq!(Policy::default().quota_for(&owner), Some(Quota::default()));
        assert_eq!(p.quota_for(&admin), None);
        assert_eq!(p.quota_for(&Principal::Host), None);
        assert!(Policy::default().may_report_progress(&Principal::Host));
    }

    #[test]
    fn digest_tells_policies_apart() {
        let a = Policy::default().with_quota(Quota::UNLIMITED);
        let digests = [
            Policy::default().digest(),
            a.clone()
                .with_quota(Quota {
                    max_schedules: 5,
                    ..Quota::default()
                })
                .digest(),
            a.digest(),
            a.clone().with_admin(c(1)).digest(),
            a.clone().with_outbox_consumer(c(1)).digest(),
            a.clone().with_anyone_may_create(false).digest(),
            a.clone().with_outbox_consumer(c(0)).digest(),
            a.clone().with_chain_id(b"a".to_vec()).digest(),
            a.clone().with_chain_id(b"b".to_vec()).digest(),
            a.clone()
                .with_worker_key(WorkerKey([1; 32]), ["h"])
                .digest(),
            a.clone()
                .with_worker_key(WorkerKey([1; 32]), ["i"])
                .digest(),
            a.clone()
                .with_worker_key(WorkerKey([2; 32]), ["h"])
                .digest(),
            a.clone()
                .with_quota(Quota::UNLIMITED.with_outbox(5, u64::MAX))
                .digest(),
            a.clone()
                .with_quota(Quota::UNLIMITED.with_outbox(u64::MAX, 5))
                .digest(),
            a.clone()
                .with_quota(Quota::default().with_outbox(u64::MAX, u64::MAX))
                .digest(),
            a.clone()
                .with_quota(Quota::default().with_outbox(5, Quota::DEFAULT_OUTBOX_BYTES))
                .digest(),
        ];
        let distinct: BTreeSet<_> = digests.iter().collect();
        assert_eq!(distinct.len(), digests.len());
        assert_eq!(
            a.digest(),
            Policy::default().with_quota(Quota::UNLIMITED).digest()
        );
        // The default policy's digest did not change when outbox quotas were added.
        assert_eq!(
            hex(&Policy::default().digest()),
            "f6decd065d2d53df0d8ea317451cb21abf91dfe86291ef0952ddd2b69f6a5416"
        );
        // The digest of a policy without worker keys or quota did not change when they were
        // added.
        assert_eq!(
            hex(&a.digest()),
            "2fd1cffc9f151278314176f0cce86474beba52985cd2437d63d10e249efb5634"
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn only_admins_manage_worker_keys() {
        let p = Policy::default()
            .with_admin(c(9))
            .with_outbox_consumer(c(7));
        assert!(p.may_manage_workers(&Principal::Client(c(9))));
        assert!(p.may_manage_workers(&Principal::Host));
        assert!(!p.may_manage_workers(&Principal::Client(c(7))));
        let p = p
            .with_worker_key(WorkerKey([3; 32]), ["a"])
            .with_worker_key(WorkerKey([3; 32]), ["b"]);
        assert_eq!(p.worker_keys[&WorkerKey([3; 32])].len(), 2);
    }

    /// Two ids sharing their first 8 bytes (the whole of a 64-bit id before) are distinct
    /// principals: neither may mutate the other's schedules, and only one is an admin.
    #[test]
    fn ids_sharing_eight_bytes_are_distinct_principals() {
        let mut a = [7u8; 32];
        let mut b = a;
        a[31] = 1;
        b[8] = 2;
        let (a, b) = (ClientId(a), ClientId(b));
        assert_eq!(a.legacy_prefix(), b.legacy_prefix());
        assert_ne!(a, b);
        let (pa, pb) = (Principal::Client(a), Principal::Client(b));
        let p = Policy::default().with_admin(a).with_outbox_consumer(a);
        assert!(!p.may_mutate(&pb, &pa));
        assert!(p.may_mutate(&pa, &pb), "a is an admin");
        assert!(!Policy::default().may_mutate(&pa, &pb));
        assert!(!p.is_admin(&pb));
        assert!(!p.may_report_progress(&pb));
        assert!(p.may_report_progress(&pa));
    }

    /// A legacy owner is claimed by every client whose id starts with it, and by no other:
    /// not by an id equal in 7 of the 8 bytes, not by a legacy principal itself; a legacy
    /// principal is never an admin or the consumer.
    #[test]
    fn a_legacy_owner_is_matched_only_by_its_prefix() {
        let full = ClientId::from_index(42);
        let legacy = Principal::LegacyClient(full.legacy_prefix());
        let p = Policy::default();
        assert!(p.may_mutate(&Principal::Client(full), &legacy));
        let mut same_prefix = full;
        same_prefix.0[20] ^= 0xff;
        assert!(p.may_mutate(&Principal::Client(same_prefix), &legacy));
        for byte in 0..8 {
            let mut other = full;
            other.0[byte] ^= 1;
            assert!(!p.may_mutate(&Principal::Client(other), &legacy), "{byte}");
        }
        assert!(!p.may_mutate(&legacy, &Principal::Client(full)));
        assert!(!p.may_mutate(&Principal::LegacyClient(0), &legacy));
        let p = p.with_admin(full).with_outbox_consumer(full);
        assert!(!p.is_admin(&legacy));
        assert!(!p.may_report_progress(&legacy));
    }

    /// The bytes of the 64-bit principal (`PrincipalV1`) read as the legacy form, and the
    /// legacy prefix is the old id's derivation (the first 8 bytes, little-endian).
    #[test]
    fn old_principal_bytes_read_as_legacy() {
        let cfg = bincode::config::standard().with_fixed_int_encoding();
        for (old, new) in [
            (PrincipalV1::Host, Principal::Host),
            (PrincipalV1::Client(5), Principal::LegacyClient(5)),
            (
                PrincipalV1::Client(u64::MAX),
                Principal::LegacyClient(u64::MAX),
            ),
        ] {
            let bytes = bincode::encode_to_vec(old, cfg).unwrap();
            let (read, _): (Principal, usize) = bincode::decode_from_slice(&bytes, cfg).unwrap();
            assert_eq!(read, new);
            assert_eq!(Principal::from(old), new);
        }
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(ClientId(id).legacy_prefix(), 0x0102_0304_0506_0708);
        let shown = ClientId(id).to_string();
        assert_eq!(shown.len(), 64);
        assert_eq!(shown.parse::<ClientId>().unwrap(), ClientId(id));
        assert_eq!(ClientId(id).short(), "0807060504030201");
    }
}
