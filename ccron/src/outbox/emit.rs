//! One outbox per ledger: who emitted a record, several records per run, and the room a run
//! reserves before it starts.
//!
//! A ledger has one [`Outbox`]. Its schedule book's handlers, its cron tables' actions and its
//! state's own request code all emit into it; every record's [`OccurrenceId`] says which of
//! them emitted it (its [`Origin`]) and which record of the run it is (its sub-index), so that
//! a result coming back is routed to whoever emitted the record, and one run may emit several
//! records under distinct ids.
//!
//! # The `entry` field, packed
//!
//! The 20-byte id form does not change (workers, signatures and stored records keep it):
//! the 64-bit `entry` field carries three parts,
//!
//! | bits | part |
//! |---|---|
//! | 63..62 | the [`Origin`]: 0 a schedule of the book, 1 a cron table entry, 2 the state's own code |
//! | 61..48 | the sub-index: 0 for a run's first record, 1 for its second, ... (at most [`MAX_RECORDS_PER_RUN`]) |
//! | 47..0 | the emitter: the schedule id, the table position, 0 for the state |
//!
//! A book record emitted as before (first record of its run) keeps exactly the id it had: a
//! schedule id with origin 0 and sub-index 0. Every id this module builds is unique per
//! (emitter, run, sub-index): a table run's occurrence is its due point (or the tick's sequence
//! number for user rules), a state request's is the outbox index its first record gets (indices
//! are never reused).
//!
//! # Capacity
//!
//! A run reserves its [`EmitBudget`] before it starts ([`Outbox::room_for_run`]): a schedule's
//! handler run and a table pass wait (due, counted) while the outbox cannot take a whole
//! budget, so no emit of a started run meets a full outbox. [`Emits`] stages what a run emits
//! within what was reserved; [`Emits::commit`] appends it.
//!
//! # Quotas
//!
//! Every record is appended with its owner ([`Outbox::append_as`]): a state request's are the
//! requesting client's ([`Emits::charged_to`], checked against the owner's [`Quota`] when the
//! request reserves its budget: an owner that cannot take it gets every emit refused with
//! [`EmitError::QuotaExceeded`]); a table pass's are the host's (exempt).

use super::{OccurrenceId, Outbox, OutboxError, OutboxRecord};
use crate::authz::{Principal, Quota, QuotaKind};
use crate::tick::ComponentId;

/// Bit position of the sub-index in [`OccurrenceId::entry`].
const SUB_SHIFT: u32 = 48;
/// Bit position of the origin in [`OccurrenceId::entry`].
const ORIGIN_SHIFT: u32 = 62;
/// The emitter part of [`OccurrenceId::entry`].
const EMITTER_MASK: u64 = (1 << SUB_SHIFT) - 1;

/// Most records one run may emit (the sub-index has 14 bits).
pub const MAX_RECORDS_PER_RUN: usize = 1 << (ORIGIN_SHIFT - SUB_SHIFT);

/// Largest emitter number (schedule id, table position) a packed id can carry.
pub const MAX_EMITTER: u64 = EMITTER_MASK;

/// Who emitted an outbox record (bits 63..62 of its [`OccurrenceId::entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// A handler run of the schedule book (the emitter is the schedule id).
    Schedule,
    /// A cron table entry's action (the emitter is its position).
    Table,
    /// The ledger state's own request code (`Application::execute_with`).
    State,
    /// Reserved (bits `11`): no emitter of this release builds it.
    Reserved,
}

impl Origin {
    fn bits(self) -> u64 {
        match self {
            Origin::Schedule => 0,
            Origin::Table => 1,
            Origin::State => 2,
            Origin::Reserved => 3,
        }
    }
}

impl OccurrenceId {
    /// The id of record `sub` of a run of `emitter` (schedule id, table position or 0) of
    /// `origin` in `component`, occurrence `occurrence` (see the module documentation).
    ///
    /// # Errors
    /// [`EmitError::TooManyInRun`] for `sub` ≥ [`MAX_RECORDS_PER_RUN`],
    /// [`EmitError::EmitterTooLarge`] for an emitter above [`MAX_EMITTER`] (a schedule id past
    /// 2^48 - 1 can emit only its run's first record, under its plain id).
    pub fn emitted(
        component: ComponentId,
        origin: Origin,
        emitter: u64,
        occurrence: u64,
        sub: usize,
    ) -> Result<Self, EmitError> {
        if sub >= MAX_RECORDS_PER_RUN {
            return Err(EmitError::TooManyInRun {
                max_records: MAX_RECORDS_PER_RUN,
            });
        }
        if origin == Origin::Schedule && sub == 0 {
            // The id a book record always had.
            return Ok(Self::new(component, emitter, occurrence));
        }
        if emitter > MAX_EMITTER {
            return Err(EmitError::EmitterTooLarge { emitter });
        }
        let entry = (origin.bits() << ORIGIN_SHIFT) | ((sub as u64) << SUB_SHIFT) | emitter;
        Ok(Self::new(component, entry, occurrence))
    }

    /// Who emitted the record (bits 63..62 of `entry`). A schedule id of 2^62 or more (never
    /// allocated in practice) would read as another origin.
    pub fn origin(&self) -> Origin {
        match self.entry >> ORIGIN_SHIFT {
            0 => Origin::Schedule,
            1 => Origin::Table,
            2 => Origin::State,
            _ => Origin::Reserved,
        }
    }

    /// Which record of its run this is (0 for the first).
    pub fn sub_index(&self) -> usize {
        ((self.entry >> SUB_SHIFT) as usize) & (MAX_RECORDS_PER_RUN - 1)
    }

    /// The emitter: the schedule id (the whole `entry` for a first record), the table position,
    /// or 0 for the state.
    pub fn emitter(&self) -> u64 {
        if self.origin() == Origin::Schedule && self.sub_index() == 0 {
            self.entry
        } else {
            self.entry & EMITTER_MASK
        }
    }
}

/// The room one run reserves in the outbox before it starts: at most `records` records of at
/// most `bytes` bytes ([`OutboxRecord::size_bytes`]) in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmitBudget {
    /// Most records the run may emit (at most [`MAX_RECORDS_PER_RUN`]).
    pub records: usize,
    /// Most bytes its records may take together.
    pub bytes: usize,
}

impl EmitBudget {
    /// `records` records of `bytes` bytes together.
    pub const fn new(records: usize, bytes: usize) -> Self {
        Self { records, bytes }
    }

    /// Nothing: a run with this budget never waits for the outbox and cannot emit.
    pub const NONE: Self = Self::new(0, 0);
}

/// Why an emit was refused. Nothing was staged; the run goes on and decides (skip, count, fail).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// The ledger has no outbox (a `CronLedger` gets one with its schedule book), or this
    /// emitter reserved no room (a table whose component was not declared emitting:
    /// `CronLedger::with_table_emits`).
    #[error("no outbox room reserved for this run (declare an emit budget for it)")]
    NotReserved,
    /// The outbox cannot take this emitter's budget now (it waits for the consumer to trim).
    #[error("the outbox is full: no room for this run's emit budget until the consumer trims it")]
    OutboxFull,
    /// The run already emitted its budget's records.
    #[error("the run's emit budget allows {max_records} records")]
    TooManyInRun {
        /// The budget's records.
        max_records: usize,
    },
    /// The run's records would take more bytes than its budget, or one record more than the
    /// outbox's record limit.
    #[error(
        "an emitted record of {size_bytes} bytes exceeds the {max_bytes} bytes left in the run's budget"
    )]
    TooLarge {
        /// The record's size.
        size_bytes: usize,
        /// What was left.
        max_bytes: usize,
    },
    /// The emitter number does not fit the packed id ([`MAX_EMITTER`]).
    #[error("emitter {emitter} does not fit an occurrence id's 48 emitter bits")]
    EmitterTooLarge {
        /// The schedule id or position.
        emitter: u64,
    },
    /// The run's owner has its quota of pending outbox records or bytes
    /// ([`Quota::max_outbox_records`], [`Quota::max_outbox_bytes`]): no room for the run's
    /// budget until the consumer trims the owner's records ([`Outbox::owner_room`]).
    #[error("{owner} is at its outbox quota of {limit} {kind}")]
    QuotaExceeded {
        /// The owner of the run.
        owner: Principal,
        /// What ran out.
        kind: QuotaKind,
        /// The quota.
        limit: u64,
    },
}

/// What a run (or a table pass, or a request) emits, staged within the room reserved for it
/// and appended by [`Emits::commit`].
#[derive(Debug, Clone, Default)]
pub struct Emits {
    /// Whether room was reserved at all ([`Emits::none`]: not).
    reserved: bool,
    /// Room was asked for and refused ([`Emits::full`], [`Emits::charged_to`]): every emit
    /// is refused with this.
    blocked: Option<EmitError>,
    /// Who owns the records (`None`: the host).
    owner: Option<Principal>,
    staged: Vec<OutboxRecord>,
    /// What was reserved.
    budget: EmitBudget,
    /// Records and bytes still reserved.
    records_left: usize,
    bytes_left: usize,
    max_record_bytes: usize,
    /// The index the next staged record gets.
    next_index: u64,
    /// Records staged by the current run (its next sub-index).
    run_records: usize,
    /// Emits refused so far.
    refused: u64,
    /// The first refusal.
    first_refusal: Option<EmitError>,
}

impl Emits {
    /// Nothing reserved: every emit is [`EmitError::NotReserved`].
    pub fn none() -> Self {
        Self::default()
    }

    /// Room was asked for and the outbox had none: every emit is [`EmitError::OutboxFull`].
    pub fn full() -> Self {
        Self {
            blocked: Some(EmitError::OutboxFull),
            ..Self::default()
        }
    }

    /// The same reservation, its records owned by `owner` and checked against `owner`'s
    /// `quota` now, before the run ([`Outbox::owner_room`]; `None`: no quota, for admins):
    /// when the owner cannot take the reserved budget, every emit of the run is refused with
    /// [`EmitError::QuotaExceeded`] (counted and traced by the outbox). A reservation that
    /// was already refused stays so.
    pub fn charged_to(mut self, outbox: &Outbox, owner: Principal, quota: Option<Quota>) -> Self {
        self.owner = Some(owner);
        if self.blocked.is_none()
            && self.reserved
            && let Err(e) = outbox.owner_room(self.budget, &owner, quota)
        {
            self.blocked = Some(e);
        }
        self
    }

    /// Who owns the staged records (the host unless [`Emits::charged_to`] said otherwise).
    pub fn owner(&self) -> Principal {
        self.owner.unwrap_or(Principal::Host)
    }

    /// Reserves `budget` in `outbox`, or `None` when the outbox cannot take it now
    /// ([`Outbox::room_for_run`]). Nothing changes in the outbox until [`Emits::commit`].
    pub fn reserve(outbox: &Outbox, budget: EmitBudget) -> Option<Self> {
        if outbox.room_for_run(budget) == 0 {
            return None;
        }
        Some(Self {
            budget,
            records_left: budget.records.min(MAX_RECORDS_PER_RUN),
            bytes_left: budget.bytes,
            max_record_bytes: outbox.limits().max_record_bytes,
            next_index: outbox.next_index(),
            reserved: true,
            ..Self::default()
        })
    }

    /// A new run starts (its records' sub-indices count from 0 again).
    pub fn begin_run(&mut self) {
        self.run_records = 0;
    }

    /// Records the current run staged so far.
    pub fn run_records(&self) -> usize {
        self.run_records
    }

    /// The index the next staged record will get.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Stages `record` with the id `id_of(sub)` gives for its sub-index; returns the index it
    /// will get. A refusal stages nothing and is counted ([`Emits::refused`]).
    ///
    /// # Errors
    /// See [`EmitError`].
    pub fn stage(
        &mut self,
        id_of: impl FnOnce(usize) -> Result<OccurrenceId, EmitError>,
        record: impl FnOnce(OccurrenceId) -> OutboxRecord,
    ) -> Result<u64, EmitError> {
        let result = self.try_stage(id_of, record);
        if let Err(e) = &result {
            self.refused = self.refused.saturating_add(1);
            self.first_refusal.get_or_insert_with(|| e.clone());
            tracing::debug!(error = %e, "outbox emit refused");
        }
        result
    }

    fn try_stage(
        &mut self,
        id_of: impl FnOnce(usize) -> Result<OccurrenceId, EmitError>,
        record: impl FnOnce(OccurrenceId) -> OutboxRecord,
    ) -> Result<u64, EmitError> {
        if let Some(e) = &self.blocked {
            return Err(e.clone());
        }
        if !self.reserved {
            return Err(EmitError::NotReserved);
        }
        if self.records_left == 0 {
            return Err(EmitError::TooManyInRun {
                max_records: self.staged.len(),
            });
        }
        let id = id_of(self.run_records)?;
        let record = record(id);
        let size_bytes = record.size_bytes();
        let max_bytes = self.bytes_left.min(self.max_record_bytes);
        if size_bytes > max_bytes {
            return Err(EmitError::TooLarge {
                size_bytes,
                max_bytes,
            });
        }
        let index = self.next_index;
        self.staged.push(record);
        self.records_left -= 1;
        self.bytes_left -= size_bytes;
        self.run_records += 1;
        self.next_index = self.next_index.saturating_add(1);
        Ok(index)
    }

    /// The staged records, in emit order.
    pub fn staged(&self) -> &[OutboxRecord] {
        &self.staged
    }

    /// Emits refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The first refused emit, if any.
    pub fn first_refusal(&self) -> Option<&EmitError> {
        self.first_refusal.as_ref()
    }

    /// Drops what the current run staged (a failed run: nothing of it is emitted).
    pub fn discard_run(&mut self) {
        let keep = self.staged.len().saturating_sub(self.run_records);
        for r in self.staged.drain(keep..) {
            self.records_left += 1;
            self.bytes_left += r.size_bytes();
            self.next_index = self.next_index.saturating_sub(1);
        }
        self.run_records = 0;
    }

    /// Appends every staged record to `outbox`, in order; returns the indices. The room was
    /// reserved, so this succeeds unless the outbox changed since [`Emits::reserve`].
    ///
    /// # Errors
    /// The first append that failed (records before it are appended; the rest are dropped).
    pub fn commit(self, outbox: &mut Outbox) -> Result<Vec<u64>, OutboxError> {
        let owner = self.owner();
        let mut indices = Vec::with_capacity(self.staged.len());
        for record in self.staged {
            indices.push(outbox.append_as(record, owner)?);
        }
        Ok(indices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::OutboxLimits;

    #[test]
    fn a_first_book_record_keeps_its_id_and_others_pack_origin_and_sub_index() {
        let plain = OccurrenceId::emitted(7, Origin::Schedule, 42, 3, 0).unwrap();
        assert_eq!(plain, OccurrenceId::new(7, 42, 3));
        assert_eq!(
            (plain.origin(), plain.sub_index(), plain.emitter()),
            (Origin::Schedule, 0, 42)
        );
        let second = OccurrenceId::emitted(7, Origin::Schedule, 42, 3, 1).unwrap();
        assert_eq!(
            second.to_string(),
            "00000007-000100000000002a-0000000000000003"
        );
        assert_eq!(
            (second.origin(), second.sub_index(), second.emitter()),
            (Origin::Schedule, 1, 42)
        );
        let table = OccurrenceId::emitted(7, Origin::Table, 5, 9, 2).unwrap();
        assert_eq!(
            table.to_string(),
            "00000007-4002000000000005-0000000000000009"
        );
        assert_eq!(
            (table.origin(), table.sub_index(), table.emitter()),
            (Origin::Table, 2, 5)
        );
        let state = OccurrenceId::emitted(7, Origin::State, 0, 11, 0).unwrap();
        assert_eq!(state.origin(), Origin::State);
        // Distinct emitters of one component never share an id.
        assert_ne!(
            OccurrenceId::emitted(7, Origin::Table, 5, 9, 0).unwrap(),
            OccurrenceId::emitted(7, Origin::Schedule, 5, 9, 0).unwrap()
        );
        assert!(matches!(
            OccurrenceId::emitted(7, Origin::Table, 1 << 48, 9, 0),
            Err(EmitError::EmitterTooLarge { .. })
        ));
        assert!(matches!(
            OccurrenceId::emitted(7, Origin::Table, 1, 9, MAX_RECORDS_PER_RUN),
            Err(EmitError::TooManyInRun { .. })
        ));
    }

    #[test]
    fn a_reservation_bounds_records_and_bytes_and_commits_in_order() {
        let mut outbox = Outbox::new(OutboxLimits::default());
        let mut e = Emits::reserve(&outbox, EmitBudget::new(2, 40)).unwrap();
        let id = |sub| OccurrenceId::emitted(1, Origin::Table, 3, 8, sub);
        assert_eq!(
            e.stage(id, |i| OutboxRecord::new(i, "a", vec![0; 10])),
            Ok(1)
        );
        assert!(matches!(
            e.stage(id, |i| OutboxRecord::new(i, "b", vec![0; 40])),
            Err(EmitError::TooLarge { .. })
        ));
        assert_eq!(
            e.stage(id, |i| OutboxRecord::new(i, "b", vec![0; 10])),
            Ok(2)
        );
        assert!(matches!(
            e.stage(id, |i| OutboxRecord::new(i, "c", vec![])),
            Err(EmitError::TooManyInRun { .. })
        ));
        assert_eq!(e.refused(), 2);
        assert_eq!(e.commit(&mut outbox).unwrap(), vec![1, 2]);
        let subs: Vec<usize> = outbox.iter().map(|(_, r)| r.id.sub_index()).collect();
        assert_eq!(subs, vec![0, 1]);
        assert!(matches!(
            Emits::none().stage(id, |i| OutboxRecord::new(i, "a", vec![])),
            Err(EmitError::NotReserved)
        ));
    }

    #[test]
    fn a_full_outbox_reserves_nothing() {
        let mut outbox = Outbox::new(OutboxLimits {
            max_records: 2,
            ..OutboxLimits::default()
        });
        assert!(Emits::reserve(&outbox, EmitBudget::new(3, 10)).is_none());
        assert!(Emits::reserve(&outbox, EmitBudget::new(2, 10)).is_some());
        outbox
            .append(OutboxRecord::new(OccurrenceId::new(1, 1, 1), "a", vec![]))
            .unwrap();
        assert!(Emits::reserve(&outbox, EmitBudget::new(2, 10)).is_none());
        assert_eq!(outbox.room_for_run(EmitBudget::NONE), usize::MAX);
    }

    #[test]
    fn an_owner_at_its_quota_gets_every_emit_refused_and_others_do_not() {
        let quota = Some(Quota::UNLIMITED.with_outbox(2, 1_000));
        let (hog, other) = (
            Principal::Client(crate::authz::ClientId::from_index(1)),
            Principal::Client(crate::authz::ClientId::from_index(2)),
        );
        let mut outbox = Outbox::new(OutboxLimits::default());
        let id = |sub| OccurrenceId::emitted(1, Origin::State, 0, 8, sub);
        for _ in 0..2 {
            let mut e = Emits::reserve(&outbox, EmitBudget::new(1, 10))
                .unwrap()
                .charged_to(&outbox, hog, quota);
            e.stage(id, |i| OutboxRecord::new(i, "a", vec![0; 4]))
                .unwrap();
            e.commit(&mut outbox).unwrap();
        }
        assert_eq!(outbox.owner_usage(&hog), (2, 10));
        assert_eq!(outbox.owner_of(1), Some(hog));
        let mut e = Emits::reserve(&outbox, EmitBudget::new(1, 10))
            .unwrap()
            .charged_to(&outbox, hog, quota);
        assert_eq!(
            e.stage(id, |i| OutboxRecord::new(i, "a", vec![])),
            Err(EmitError::QuotaExceeded {
                owner: hog,
                kind: QuotaKind::OutboxRecords,
                limit: 2
            })
        );
        assert_eq!(outbox.quota_refusals(), 1);
        // Another owner, and an owner without quota (an admin, the host), are unaffected.
        for (owner, quota) in [(other, quota), (hog, None)] {
            let mut e = Emits::reserve(&outbox, EmitBudget::new(1, 10))
                .unwrap()
                .charged_to(&outbox, owner, quota);
            assert!(e.stage(id, |i| OutboxRecord::new(i, "a", vec![])).is_ok());
        }
        // Bytes count too; trimming gives the owner its room back.
        let bytes = Some(Quota::UNLIMITED.with_outbox(100, 12));
        assert!(matches!(
            outbox.owner_room(EmitBudget::new(1, 3), &hog, bytes),
            Err(EmitError::QuotaExceeded {
                kind: QuotaKind::OutboxBytes,
                ..
            })
        ));
        outbox.trim_below(2);
        assert_eq!(outbox.owner_usage(&hog), (1, 5));
        assert_eq!(outbox.owner_room(EmitBudget::new(1, 3), &hog, bytes), Ok(2));
        outbox.trim_below(3);
        assert_eq!(outbox.owner_usage(&hog), (0, 0));
    }

    #[test]
    fn a_discarded_run_gives_its_room_back() {
        let outbox = Outbox::new(OutboxLimits::default());
        let mut e = Emits::reserve(&outbox, EmitBudget::new(2, 100)).unwrap();
        let id = |sub| OccurrenceId::emitted(1, Origin::Schedule, 3, 8, sub);
        e.begin_run();
        e.stage(id, |i| OutboxRecord::new(i, "a", vec![0; 10]))
            .unwrap();
        e.begin_run();
        e.stage(id, |i| OutboxRecord::new(i, "b", vec![0; 10]))
            .unwrap();
        e.discard_run();
        assert_eq!(e.staged().len(), 1);
        assert_eq!(e.next_index(), 2);
        assert_eq!(
            e.stage(id, |i| OutboxRecord::new(i, "c", vec![0; 80])),
            Ok(2)
        );
    }
}
